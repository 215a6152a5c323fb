#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# deb.sh CHECK BUILD_DIR - the .deb that `cpack -G DEB` makes from the build
# tree (into a temp dir), by CHECK:
#   contents  dpkg-deb -c lists exactly the package's files (binaries in
#             /usr/sbin, the unit, man pages, example, copyright, changelog;
#             nothing in /etc or /usr/local, no conffile); -I has Depends on
#             each library the binaries link (dpkg-shlibdeps) and on procps
#             (the unit's /bin/kill), the maintainer
#             scripts, executable and valid sh; the unit runs /usr/sbin's
#             binary and only once /etc/union-nfsd.conf exists
#   lintian   lintian reports no error and no warning, and no tag of any
#             level (info, pedantic, experimental) about the copyright file;
#             that file, as debian/copyright of a throwaway source package,
#             gets no copyright tag from lintian's DEP-5 checks either (they
#             run on source packages only); it gives Files: * alone, under
#             Apache-2.0, pointing at /usr/share/common-licenses
#   unit      systemd-analyze verify says nothing about the packaged unit
# Exit: 0 passed, 1 failed, 77 skipped (cpack, dpkg-deb or the check's tool
# is not installed).
set -euo pipefail
CHECK=${1:?usage: deb.sh contents|lintian|unit BUILD_DIR}
BUILD=$(cd "${2:?usage: deb.sh contents|lintian|unit BUILD_DIR}" && pwd)
for tool in cpack dpkg-deb; do
	command -v $tool >/dev/null || { echo "SKIP: no $tool"; exit 77; }
done
case $CHECK in
lintian)
	for tool in lintian dpkg-source; do
		command -v $tool >/dev/null || { echo "SKIP: no $tool"; exit 77; }
	done
	;;
unit)
	command -v systemd-analyze >/dev/null || { echo "SKIP: no systemd-analyze"; exit 77; }
	[ -e /lib/systemd/system/sysinit.target ] || {
		echo "SKIP: no systemd units on this host to verify against"
		exit 77
	}
	;;
contents) ;;
*) echo "unknown check $CHECK"; exit 2 ;;
esac
. "$(dirname "$0")/lib.sh"
pkg_tmp deb

(cd "$BUILD" && cpack -G DEB -B "$T/out") >"$T/cpack.log" 2>&1 || {
	cat "$T/cpack.log"
	echo "FAIL: cpack -G DEB"
	exit 1
}
DEB=$(ls "$T"/out/union-nfsd_*.deb)
UNITDIR=$(cache SYSTEMD_UNITDIR)
case $UNITDIR in /*) ;; *) UNITDIR=/usr/$UNITDIR ;; esac
dpkg-deb -x "$DEB" "$T/root"
UNIT=$T/root$UNITDIR/union-nfsd.service

contents() {
	local want got dep lib nlibs=0
	want=$(printf '%s\n' /usr/sbin/union-nfsd "$UNITDIR/union-nfsd.service" \
		/usr/sbin/union-nfsctl /usr/share/man/man8/union-nfsctl.8.gz \
		/usr/share/man/man8/union-nfsd.8.gz /usr/share/man/man5/union-nfsd.conf.5.gz \
		/usr/share/doc/union-nfsd/examples/union-nfsd.conf \
		/usr/share/doc/union-nfsd/examples/keepalived.conf \
		/usr/libexec/union-nfsd/union-nfsd-ha \
		/usr/share/doc/union-nfsd/copyright /usr/share/doc/union-nfsd/changelog.gz | sort)
	got=$(dpkg-deb -c "$DEB" | awk '$1 !~ /^d/ {print $6}' | sed 's|^\.||' | sort)
	[ "$got" = "$want" ] || fail "package files differ: $(diff <(echo "$want") <(echo "$got") | grep '^[<>]' | tr '\n' ' ')"
	dpkg-deb -c "$DEB" | awk '{print $2}' | grep -qv '^root/root$' &&
		fail "files not owned by root"
	[ "$(dpkg-deb -f "$DEB" Package)" = union-nfsd ] || fail "Package field"
	[ "$(dpkg-deb -f "$DEB" Architecture)" = "$(dpkg --print-architecture)" ] ||
		fail "Architecture field"
	dep=$(dpkg-deb -f "$DEB" Depends)
	# Each library the binary needs, by its package (dpkg-shlibdeps' work).
	for lib in $(objdump -p "$T/root/usr/sbin/union-nfsd" "$T/root/usr/sbin/union-nfsctl" |
		awk '/NEEDED/ {print $2}' | sort -u); do
		# every package holding a file of that name (libc6 and libc6-i386
		# both hold a libm.so.6): one of them must be a dependency
		pkgs=$(dpkg -S "*/$lib" 2>/dev/null | cut -d: -f1 | tr ',' '\n' |
			sed 's/^ *//' | sort -u)
		[ -n "$pkgs" ] || continue
		found=
		for pkg in $pkgs; do
			[[ ", $dep" == *", $pkg"* ]] && found=$pkg
		done
		[ -n "$found" ] || fail "Depends lacks any of $(echo $pkgs) (for $lib): $dep"
		nlibs=$((nlibs + 1))
	done
	[ "$nlibs" -ge 5 ] || fail "only $nlibs libraries traced to their packages"
	[[ "$dep" == *libtirpc3* && "$dep" == *liblmdb0* && "$dep" == *libc6* &&
		"$dep" == *libjansson4* ]] ||
		fail "Depends: $dep"
	# the unit's ExecReload=/bin/kill: procps, not essential
	[[ ", $dep" == *", procps"* ]] || fail "Depends lacks procps (/bin/kill): $dep"
	dpkg-deb -I "$DEB" | grep -q conffiles && fail "a conffile: the config is the admin's"
	mkdir "$T/control"
	dpkg-deb -e "$DEB" "$T/control"
	for s in postinst prerm postrm; do
		if [ ! -x "$T/control/$s" ]; then
			fail "no executable $s"
			continue
		fi
		sh -n "$T/control/$s" || fail "$s: not valid sh"
	done
	grep -v '^[[:space:]]*#' "$T/control/postinst" |
		grep -q 'enable --now\|deb-systemd-invoke start\|systemctl start' &&
		fail "postinst starts the service"
	grep -qx 'ExecStart=/usr/sbin/union-nfsd --foreground --config=/etc/union-nfsd.conf' "$UNIT" ||
		fail "unit ExecStart: $(grep ExecStart= "$UNIT")"
	grep -qx 'ConditionPathExists=/etc/union-nfsd.conf' "$UNIT" ||
		fail "unit starts without /etc/union-nfsd.conf"
	grep -qx 'StateDirectory=union-nfsd' "$UNIT" || fail "unit: no StateDirectory"
}

# A lintian tag about the copyright file or a license, whatever its level.
COPYRIGHT_TAG='^[EWIPX]: [^ ]+( source)?: [^ ]*(copyright|licen[cs]e|dep5)'

run_lintian() {
	local rc=0 src=$T/src/union-nfsd-0
	lintian --fail-on error,warning --display-info --pedantic --display-experimental \
		"$DEB" >"$T/lintian" 2>&1 || rc=$?
	cat "$T/lintian"
	[ "$rc" = 0 ] || fail "lintian exited $rc"
	grep -q '^[EW]: ' "$T/lintian" && fail "lintian: errors or warnings above"
	grep -qE "$COPYRIGHT_TAG" "$T/lintian" && fail "lintian: copyright tags above"

	# The copyright file as packaged, in a source package of nothing else,
	# where a Files: pattern but * would match nothing and be flagged.
	mkdir -p "$src/debian/source"
	cp "$T/root/usr/share/doc/union-nfsd/copyright" "$src/debian/copyright"
	echo '3.0 (native)' >"$src/debian/source/format"
	printf '%s\n' 'Source: union-nfsd' "Maintainer: $(dpkg-deb -f "$DEB" Maintainer)" \
		'Standards-Version: 4.6.2' '' 'Package: union-nfsd' 'Architecture: any' \
		'Description: the copyright file alone' ' Checked by tests/pkg/deb.sh.' \
		>"$src/debian/control"
	printf 'union-nfsd (0) unstable; urgency=medium\n\n  * Check.\n\n -- %s  %s\n' \
		"$(dpkg-deb -f "$DEB" Maintainer)" "$(date -R)" >"$src/debian/changelog"
	if (cd "$T/src" && dpkg-source -b union-nfsd-0) >"$T/dpkg-source" 2>&1; then
		# only the copyright checks: any tag they give is one
		lintian --fail-on none --display-info --pedantic --display-experimental \
			-C debian/copyright,debian/copyright/dep5,debian/copyright/dep5/components \
			"$T"/src/union-nfsd_0.dsc >"$T/lintian-src" 2>&1 ||
			{ cat "$T/lintian-src"; fail "lintian on the copyright check's package"; }
		grep -E '^[EWIPX]: ' "$T/lintian-src" &&
			fail "lintian (DEP-5): copyright tags above"
	else
		cat "$T/dpkg-source"
		fail "dpkg-source -b of the copyright check's package"
	fi

	# What lintian accepts but the project does not: another license, a
	# Files: paragraph for code the package does not bundle.
	local c=$src/debian/copyright
	grep -qx 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' "$c" ||
		fail "copyright: not in the machine-readable format 1.0"
	[ "$(grep '^Files:' "$c")" = 'Files: *' ] ||
		fail "copyright: Files: paragraphs other than one for *: $(grep '^Files:' "$c" | tr '\n' ' ')"
	[ "$(grep '^License:' "$c" | sort -u)" = 'License: Apache-2.0' ] ||
		fail "copyright: licenses other than Apache-2.0: $(grep '^License:' "$c" | tr '\n' ' ')"
	grep -q '"/usr/share/common-licenses/Apache-2.0"' "$c" ||
		fail "copyright: no pointer to /usr/share/common-licenses/Apache-2.0"
}

# The unit as packaged, but running the extracted binary, checked against
# the host's units and with the package's man pages for Documentation=.
verify_unit() {
	local out
	mkdir "$T/unit"
	sed "s|=/usr/sbin/union-nfsd|=$T/root/usr/sbin/union-nfsd|" "$UNIT" >"$T/unit/union-nfsd.service"
	out=$(MANPATH=$T/root/usr/share/man systemd-analyze verify "$T/unit/union-nfsd.service" 2>&1) ||
		fail "systemd-analyze verify failed: $out"
	[ -z "$out" ] || fail "systemd-analyze verify: $out"
}

case $CHECK in
contents) contents ;;
lintian) run_lintian ;;
unit) verify_unit ;;
esac
pkg_end
echo "deb $CHECK: all passed ($(basename "$DEB"))"
