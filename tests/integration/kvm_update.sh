#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# kvm_update.sh UNION_NFSD - issue 20's kernel client test: an image updated
# under a running client.
#
# A Debian kernel in qemu (tests/vm) boots with its root on the union, as a
# thin client does.  The image is a busybox root with /usr/bin/upd_prog
# (upd_prog.c, built static, version 1), /etc/upd.conf ("version=1") and
# /etc/gone.txt, in a dated dir img-1; an upper dir of its own.  While the
# guest (guest_update.sh) runs a loop that execs upd_prog and reads
# upd.conf, keeps an upd_prog running, and holds gone.txt open, the host
# makes img-2 as an image build does (a copy of img-1 with upd_prog version
# 2, upd.conf "version=2", gone.txt removed), points the config's lowerdir
# at it and sends SIGHUP.  Then:
#   - no run of the loop fails (no ESTALE, no EIO, no crash), before, during
#     or after the update, and none sees version 1 after one saw version 2;
#   - processes started after the update run version 2 and read version=2
#     (once the client's attribute cache lets it look the names up again:
#     the guest mounts with actimeo=2);
#   - the upd_prog started before the update runs on: the pages it first
#     reads after the update (and a drop of the guest's page cache) are
#     version 1's, through its old handle, from the retired layer;
#   - gone.txt, removed by the update, reads its old bytes through the
#     descriptor held open, and its path is gone;
#   - new.conf, added to /etc by the update, shows within actimeo to the
#     guest that looked it up (absent) and listed /etc before, /etc having
#     its upper part (the guest wrote /etc/local.conf): the client keeps
#     its negative entry and listing while /etc's mtime and ctime stay;
#   - no kernel message or output line says "Stale file handle" or
#     "Input/output error"; the log says the export was updated in place
#     (not reopened); union-nfsd exits 0 on SIGTERM.
# Env: KVMU_KEEP=1 (keep the temp dir).
# Exit: 0 passed, 1 failed, 77 skipped (no root, /dev/net/tun, qemu, static libc).
set -euo pipefail
UNION_NFSD=$(realpath "${1:?usage: kvm_update.sh UNION_NFSD}")
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../vm/lib.sh"

vm_require_host
vm_need_busybox
vm_test_init kvmu 900 "${KVMU_KEEP:-0}" # ctest TIMEOUT is 960
t0=$SECONDS
for v in 1 2; do
	cc -static -O2 -Wall -Wextra -Werror -DVER=$v -o "$T/upd$v" "$HERE/upd_prog.c" ||
		skip "cc -static failed (no static libc?)"
done

# image_v1 DIR: the busybox root of version 1
image_v1() {
	local r=$1 a
	mkdir -p "$r"/{bin,usr/bin,etc,proc,sys,dev,run,tmp}
	cp "$BUSYBOX" "$r/bin/busybox"
	for a in sh cat echo sleep grep cut tail touch sync ls; do ln -s busybox "$r/bin/$a"; done
	cp "$T/upd1" "$r/usr/bin/upd_prog"
	echo version=1 >"$r/etc/upd.conf"
	echo "gone v1" >"$r/etc/gone.txt"
	echo keep >"$r/etc/keep.txt"
}
# image_v2: img-2 made from img-1 as an image build would, beside it
image_v2() {
	cp -a "$T/img-1" "$T/img-2"
	cp "$T/upd2" "$T/img-2/usr/bin/upd_prog"
	echo version=2 >"$T/img-2/etc/upd.conf"
	rm "$T/img-2/etc/gone.txt"
	echo new >"$T/img-2/etc/new.conf"
}
image_v1 "$T/img-1"
mkdir -p "$T/upper" "$T/work"

vm_net_up
conf() {
	cat >"$T/union.conf" <<CONF
[export]
path = /
lowerdir = $T/img-$1
upperdir = $T/upper
workdir = $T/work
clients = $VM_NETWORK(rw,no_root_squash)
CONF
}
conf 1
fail() {
	echo "FAIL: $*"
	echo "--- guest output:"
	cat "$VM_WORK/g1.out"
	echo "--- console (end):"
	tail -20 "$VM_WORK/g1.console"
	echo "--- server log (end):"
	tail -20 "$VM_WORK/server.log"
	exit 1
}
vm_server_start "$(vm_server_cmd "$UNION_NFSD" --config="$T/union.conf")" || exit 1
vm_guest_start 1 "$HERE/guest_update.sh" --root --opts actimeo=2 --mem 256 --timeout 840
vm_guest_expect 1 '^before the update|^FAIL' 600 && ! grep -q '^FAIL' "$VM_WORK/g1.out" ||
	fail "the guest did not get going"
grep -E '^(guest up|before the update)' "$VM_WORK/g1.out" | sed 's/^/guest: /'

t1=$SECONDS
image_v2
conf 2
reloads=$(grep -c 'reloaded:' "$VM_WORK/server.log" || true)
kill -HUP "$VM_SERVER_PID"
for ((i = 0; i < 600; i++)); do
	[ "$(grep -c 'reloaded:' "$VM_WORK/server.log" || true)" -gt "$reloads" ] && break
	grep -q 'reload failed' "$VM_WORK/server.log" && fail "the reload failed"
	sleep 0.1
done
[ "$i" -lt 600 ] || fail "no reload in 60 s"
echo "image updated and reloaded in $((SECONDS - t1)) s"
vm_guest_send 1 updated
st=0
vm_guest_wait 1 2>"$T/g1.err" || st=$?
[ "$st" = 0 ] || { cat "$T/g1.err"; fail "the guest ended with status $st"; }
grep -vE '^(guest up|before the update)' "$VM_WORK/g1.out" | sed 's/^/guest: /'

out=$VM_WORK/g1.out
grep -qx 'serve: status 0: serve v=1 all ok' "$out" ||
	fail "the program started before the update did not run on with its own pages"
grep -qx 'gone: gone v1' "$out" || fail "the removed file did not read its old bytes through its open descriptor"
grep -qx 'gone path: absent' "$out" || fail "the removed file's path is still there"
grep -q '^new.conf: seen at' "$out" || fail "the name added to /etc by the update did not show (negative entry kept)"
grep -qx 'new.conf: listed' "$out" || fail "the name added to /etc by the update is not listed"
grep -qE '^loop: [0-9]+ runs, 0 failed, 0 saw version 1 after version 2$' "$out" ||
	fail "the exec loop saw failures or went back to version 1"
grep -q '^loop: first v=2 at' "$out" || fail "no program started after the update ran version 2"
grep -q '^loop: first version=2 at' "$out" || fail "no read after the update saw version=2"
grep -qx 'after: once v=2 ok' "$out" || fail "a program started at the end did not run version 2"
if grep -qiE 'stale file handle|input/output error' "$out" "$VM_WORK/g1.console"; then
	fail "ESTALE or EIO: $(grep -iE 'stale file handle|input/output error' "$out" "$VM_WORK/g1.console" | head -3)"
fi
grep -iE 'retir|in place' "$VM_WORK/server.log" | sed 's/^/server: /' || true
grep -q 'reload: export / lower layers updated in place' "$VM_WORK/server.log" ||
	fail "the export was not updated in place (reopened?)"
vm_server_stop
[ "$VM_SERVER_STATUS" = 0 ] || fail "union-nfsd exited $VM_SERVER_STATUS on SIGTERM (want 0)"
echo "PASS: the image updated under a running client; total $((SECONDS - t0)) s"
