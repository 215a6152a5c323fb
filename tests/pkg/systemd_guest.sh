#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# systemd_guest.sh - run inside systemd_vm.sh's guest (a Debian 12 root with
# systemd as PID 1 and the .deb installed) by unfsd-vmtest.service, once the
# boot is done.  It acts as an admin would: the installed service is off
# until /etc/union-nfsd.conf exists; then enable --now, a mount from this
# guest's own kernel NFS client, union-nfsctl, a reload that adds a layer, a reload with a
# bad file, stop.  Each check prints "PASS: ..." or "FAIL: ..." (stdout is
# the guest's second serial port); the last line is "@@VM_RC=N@@" (N: the
# number of failures), then the guest powers off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C SYSTEMD_PAGER='' SYSTEMD_COLORS=0
UNIT=union-nfsd.service
CONF=/etc/union-nfsd.conf
L=/srv/layers
fails=0
up() { cut -d' ' -f1 /proc/uptime; }
pass() { echo "PASS: $*"; }
fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}
check() { # check WHAT CMD...: PASS or FAIL by CMD's status
	what=$1
	shift
	if "$@"; then pass "$what"; else fail "$what"; fi
}
prop() { systemctl show -p "$1" --value "$UNIT"; }
# timed out calls hang no test: each systemctl gets 120 s (a slow TCG boot)
sc() { timeout 120 systemctl "$@"; }
finish() {
	echo "--- journalctl -u $UNIT (last 30 lines):"
	journalctl -u "$UNIT" --no-pager -o short-monotonic | tail -30
	echo "@@VM_RC=$fails@@"
	sync
	systemctl poweroff --no-block
	exit 0
}
# journal_has PRIO TEXT: a line of the unit's journal at PRIO or above holds TEXT
journal_has() { journalctl -u "$UNIT" -p "$1" -o cat --no-pager | grep -qF "$2"; }

echo "test unit up at $(up) s"
state=$(timeout 600 systemctl is-system-running --wait)
echo "system $state at $(up) s"
[ "$state" = running ] || {
	fail "boot: system is $state, not running"
	systemctl --failed --no-pager --plain
}

# ---- installed, not configured: nothing runs, and a start changes nothing ----
check "installed: $UNIT is disabled" [ "$(systemctl is-enabled $UNIT)" = disabled ]
check "installed: $UNIT is inactive" [ "$(systemctl is-active $UNIT)" = inactive ]
sc start "$UNIT" || fail "systemctl start without $CONF: exit $?"
check "start without $CONF: still inactive" [ "$(systemctl is-active $UNIT)" = inactive ]
check "start without $CONF: ConditionResult=no" [ "$(prop ConditionResult)" = no ]

# ---- configured: enable --now returns once the server said READY=1 ----
mkdir -p $L/base/dir $L/site $L/new
echo "base 1" >$L/base/hello.txt
echo "base motd" >$L/base/motd
echo "site motd" >$L/site/motd
echo "in a dir" >$L/base/dir/file
echo "the new layer" >$L/new/added.txt
write_conf() { # write_conf LOWERDIR
	cat >$CONF <<EOF
[server]
log-level = info
[export]
path = /
lowerdir = $1
clients = 127.0.0.1(ro,no_root_squash)
EOF
}
write_conf "$L/site:$L/base"
t=$(up)
if sc enable --now "$UNIT"; then
	pass "systemctl enable --now $UNIT ($(up) - $t s)"
else
	fail "systemctl enable --now $UNIT: exit $?"
fi
check "after enable --now: active" [ "$(systemctl is-active $UNIT)" = active ]
check "after enable --now: enabled" [ "$(systemctl is-enabled $UNIT)" = enabled ]
echo "Type=$(prop Type) StatusText='$(prop StatusText)'"
case $(prop Type) in
notify) check "READY=1 status line (serving ...)" \
	sh -c "systemctl show -p StatusText --value $UNIT | grep -q '^serving 1 export: nfs 2049, mount 20048$'" ;;
esac
pid=$(prop MainPID)

# ---- this guest's kernel client: no mount.nfs here, so mount(2) gets the
# server's address itself (addr=); the ports come from the server's own
# portmapper on 111, as no rpcbind runs ----
mkdir -p /mnt
OPTS=vers=3,proto=tcp,nolock,addr=127.0.0.1,actimeo=1
i=0
until err=$(mount -t nfs -o $OPTS 127.0.0.1:/ /mnt 2>&1); do
	i=$((i + 1))
	[ $i -lt 10 ] || break
	sleep 1
done
if mountpoint -q /mnt; then
	pass "mount -t nfs -o $OPTS 127.0.0.1:/ /mnt"
	check "read through the mount: base's hello.txt" [ "$(cat /mnt/hello.txt)" = "base 1" ]
	check "read through the mount: site's motd over base's" [ "$(cat /mnt/motd)" = "site motd" ]
	check "read through the mount: dir/file" [ "$(cat /mnt/dir/file)" = "in a dir" ]
	# READDIR, not a LOOKUP of the name: the client would keep that negative
	# answer for as long as the directory's mtime stays the same, and the
	# new layer's root may well have site's mtime (made in the same tick)
	check "no added.txt listed before the reload" sh -c '! ls /mnt | grep -qx added.txt'
	echo "root before the reload: $(stat -c 'mtime %y' /mnt)"
else
	fail "mount -t nfs -o $OPTS 127.0.0.1:/ /mnt: $err"
fi

# ---- union-nfsctl, installed beside it, over the service's control socket ----
check "union-nfsctl status: the export and its lowers" \
	sh -c "union-nfsctl status | grep -q '^export /' && union-nfsctl status | grep -q 'lower .*$L/base'"
check "union-nfsctl clients: this host's mount" \
	sh -c "union-nfsctl clients | grep -q '^127.0.0.1 .* / '"

# ---- systemctl reload: a layer more, the same process, seen by the mount ----
write_conf "$L/new:$L/site:$L/base"
if sc reload "$UNIT"; then pass "systemctl reload"; else fail "systemctl reload: exit $?"; fi
# systemd 252 may return before the server's READY=1: the file may take a moment
i=0
until [ "$(cat /mnt/added.txt 2>/dev/null)" = "the new layer" ]; do
	i=$((i + 1))
	[ $i -lt 30 ] || break
	sleep 1
done
echo "root after the reload: $(stat -c 'mtime %y' /mnt)"
check "after reload: added.txt of the new layer read through the mount" \
	[ "$(cat /mnt/added.txt 2>/dev/null)" = "the new layer" ]
check "after reload: motd still site's" [ "$(cat /mnt/motd 2>/dev/null)" = "site motd" ]
check "after reload: active, same MainPID $pid, no restart" \
	[ "$(systemctl is-active $UNIT) $(prop MainPID) $(prop NRestarts)" = "active $pid 0" ]
check "journal (-p info): the reload's line" journal_has info "reloaded: 1 export"

# ---- a bad file: refused, the running export stays, an error in the journal ----
echo "lowerdir = /nonexistent" >>$CONF
sc reload "$UNIT" || fail "systemctl reload (bad file): exit $?"
i=0
until journal_has err "reload failed"; do
	i=$((i + 1))
	[ $i -lt 30 ] || break
	sleep 1
done
check "journal (-p err): the bad file's reload failed" journal_has err "reload failed"
check "journal (-p err): no info line there" sh -c "! journalctl -u $UNIT -p err -o cat | grep -q 'reloaded: '"
check "after the bad reload: active, same MainPID" \
	[ "$(systemctl is-active $UNIT) $(prop MainPID)" = "active $pid" ]
check "after the bad reload: still served" [ "$(cat /mnt/added.txt 2>/dev/null)" = "the new layer" ]

# ---- stop: a clean exit ----
umount /mnt || fail "umount /mnt"
if sc stop "$UNIT"; then pass "systemctl stop"; else fail "systemctl stop: exit $?"; fi
res="$(systemctl is-active $UNIT) Result=$(prop Result) ExecMainCode=$(prop ExecMainCode)"
res="$res ExecMainStatus=$(prop ExecMainStatus)"
# ExecMainCode 1: CLD_EXITED (not killed by a signal)
check "after stop: $res" [ "$res" = "inactive Result=success ExecMainCode=1 ExecMainStatus=0" ]
check "journal (-p info): the server's listening line" journal_has info "listening nfs=2049 mount=20048"

# ---- the installed unit, verified where it runs ----
out=$(systemd-analyze verify "$UNIT" 2>&1)
rc=$?
if [ $rc = 0 ] && [ -z "$out" ]; then
	pass "systemd-analyze verify $UNIT: nothing to say"
else
	fail "systemd-analyze verify $UNIT (exit $rc): $out"
fi
finish
