#!/bin/bash
# run.sh - install, build and run every test (Debian 12, as root):
#
#   bash tests/run.sh
#
# Installs the packages (etc/install-deps.sh), builds a normal tree (build/,
# RelWithDebInfo) and an ASan+UBSan tree (build-asan/, -DCMAKE_BUILD_TYPE=asan),
# and runs ctest in both: unit tests, fuzz-corpus replays, and the integration
# tests (protocol edge cases, the overlayfs oracle, the command line, and the
# kernel client in qemu, which needs ../shared/kvm-nfs beside the repository).
# ctest prints its summary line for each tree; the exit status is non-zero if
# anything failed in either.  .ci/run runs exactly this.
#
# Env: BUILD_DIR, ASAN_DIR (default build, build-asan); CTEST_ARGS (extra ctest
# arguments, e.g. "-LE kvm" to leave out the VM test).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ASAN_DIR=${ASAN_DIR:-build-asan}
JOBS=$(nproc)
start=$SECONDS

bash etc/install-deps.sh </dev/null

build() { # build DIR TYPE
	echo "=== configure and build $1 ($2)"
	cmake -S . -B "$1" -DCMAKE_BUILD_TYPE="$2" >/dev/null
	cmake --build "$1" -j"$JOBS"
}

# run_tests DIR: ctest with the failures' output; returns ctest's status
run_tests() {
	echo "=== ctest in $1"
	local t0=$SECONDS rc=0
	# ASan: report every error; a leak or a UB report makes the process fail
	ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1} \
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
		ctest --test-dir "$1" --output-on-failure -j"$JOBS" ${CTEST_ARGS:-} || rc=$?
	echo "=== ctest in $1: exit $rc after $((SECONDS - t0)) s"
	return "$rc"
}

build "$BUILD_DIR" RelWithDebInfo
build "$ASAN_DIR" asan

rc=0
run_tests "$BUILD_DIR" || rc=1
run_tests "$ASAN_DIR" || rc=1
echo "=== tests/run.sh: $([ "$rc" = 0 ] && echo PASSED || echo FAILED) in $((SECONDS - start)) s"
exit "$rc"
