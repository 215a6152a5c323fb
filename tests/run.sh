#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# run.sh - install, build and run every test (Debian 12, as root):
#
#   bash tests/run.sh
#
# Installs the packages (etc/install-deps.sh build tests), builds a normal
# tree (build/, RelWithDebInfo) and an ASan+UBSan tree (build-asan/,
# -DCMAKE_BUILD_TYPE=asan), and runs ctest in both: unit tests, fuzz-corpus
# replays, and the integration tests (protocol edge cases, the overlayfs
# oracle, the command line, and the kernel client tests: Debian's kernel in
# qemu through the project's VM harness, tests/vm, whose kernel and initramfs
# tests/vm/prepare.sh fetches and builds once into
# /var/cache/union-nfsd-test/vm).  One of them alone, e.g.:
#   ctest --test-dir build -R integration/kvm_client --output-on-failure
# ctest prints its summary line for each tree.  Then the libFuzzer target
# fuzz/fuzz_rpc is built with clang (build-fuzz/, ASan+UBSan) and run for
# FUZZ_SECONDS from the seeds of fuzz/corpus/rpc; a finding fails the run and
# its reproducer is printed.  The exit status is non-zero if anything failed.
# .ci/run runs exactly this.
#
# Env: BUILD_DIR, ASAN_DIR, FUZZ_DIR (default build, build-asan, build-fuzz);
# CTEST_ARGS (extra ctest arguments, e.g. "-LE kvm" to leave out the VM tests);
# FUZZ_SECONDS (default 120; 0 leaves the fuzzing out).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ASAN_DIR=${ASAN_DIR:-build-asan}
FUZZ_DIR=${FUZZ_DIR:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-120}
JOBS=$(nproc)
start=$SECONDS

bash etc/install-deps.sh build tests </dev/null

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

# run_fuzz: builds fuzz_rpc with clang and runs it for FUZZ_SECONDS on a
# scratch corpus seeded from fuzz/corpus/rpc (the repository's corpus is not
# written to).  A crash, leak, timeout or sanitizer report fails the run; the
# input that caused it is printed in base64 with the command that replays it.
run_fuzz() {
	echo "=== fuzz: build $FUZZ_DIR (clang, asan)"
	cmake -S . -B "$FUZZ_DIR" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=asan \
		-DFUZZ_INSTRUMENT=ON >/dev/null &&
		cmake --build "$FUZZ_DIR" -j"$JOBS" --target fuzz_rpc || return 1
	local work rc=0
	work=$(mktemp -d /tmp/fuzz_rpc.XXXXXX)
	mkdir -p "$work/corpus" "$work/found"
	echo "=== fuzz: fuzz_rpc for $FUZZ_SECONDS s"
	ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1} \
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
		"$FUZZ_DIR/fuzz/fuzz_rpc" -max_total_time="$FUZZ_SECONDS" -timeout=25 \
		-rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$work/found/" \
		"$work/corpus" fuzz/corpus/rpc >"$work/log" 2>&1 || rc=$?
	tail -n 25 "$work/log"
	for f in "$work"/found/*; do
		[ -e "$f" ] || continue
		[ "$rc" != 0 ] || rc=1
		echo "=== fuzz: finding $(basename "$f") ($(stat -c %s "$f") bytes), base64:"
		base64 "$f"
		echo "=== replay: base64 -d > x.bin; $FUZZ_DIR/fuzz/fuzz_rpc x.bin"
	done
	rm -rf "$work"
	echo "=== fuzz: $([ "$rc" = 0 ] && echo "no finding" || echo "FAILED (exit $rc)")"
	return "$rc"
}

build "$BUILD_DIR" RelWithDebInfo
build "$ASAN_DIR" asan

rc=0
run_tests "$BUILD_DIR" || rc=1
run_tests "$ASAN_DIR" || rc=1
if [ "$FUZZ_SECONDS" != 0 ]; then
	run_fuzz || rc=1
fi
echo "=== tests/run.sh: $([ "$rc" = 0 ] && echo PASSED || echo FAILED) in $((SECONDS - start)) s"
exit "$rc"
