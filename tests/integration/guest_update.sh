# SPDX-License-Identifier: Apache-2.0
# guest_update.sh - run by kvm_update.sh's guest, whose root is the union
# (busybox sh of the image's own busybox).  While the host replaces the
# image's layer by a new version, this guest:
#   - runs a loop that execs /usr/bin/upd_prog from the image and reads
#     /etc/upd.conf, again and again, before, during and after the update
#     (every run must succeed; once a run sees version 2 none may see 1);
#   - keeps one upd_prog running from before the update: its second half
#     of pages is first read after the update (and a drop of the page
#     cache), and must still be version 1's;
#   - holds /etc/gone.txt open: the update removes it, and reading the open
#     descriptor afterwards must give its old bytes;
#   - writes /etc/local.conf (so /etc has its upper part), looks up
#     /etc/new.conf (absent: the client keeps a negative entry) and lists
#     /etc before the update, which adds new.conf to the image's /etc: the
#     name must show within the attribute cache's time (actimeo), before
#     anything drops the guest's caches.
# The host's line "updated" says the server has reloaded.  Every result is a
# line the host checks; a failed step is "FAIL: ..." and exit 1.
set -u
exec 3<"$VM_IN"
up() { cut -d' ' -f1 /proc/uptime; }
fail() {
	echo "FAIL: $*"
	exit 1
}

# loop: the exec loop, into /tmp/loop.out; ends when /tmp/stop exists
loop() {
	n=0 bad=0 back=0 v2= c2=
	while [ ! -e /tmp/stop ]; do
		out=$(/usr/bin/upd_prog once 2>&1)
		rc=$?
		conf=$(cat /etc/upd.conf 2>&1) || rc=$((rc + 100))
		n=$((n + 1))
		case "$rc $out" in
		"0 once v=1 ok") [ -z "$v2" ] || back=$((back + 1)) ;;
		"0 once v=2 ok") [ -n "$v2" ] || { v2=$(up) && echo "loop: first v=2 at $v2 s (run $n)"; } ;;
		*) bad=$((bad + 1)) && echo "loop: run $n failed: status $rc: $out" ;;
		esac
		case $conf in
		version=1) ;;
		version=2) [ -n "$c2" ] || { c2=$(up) && echo "loop: first version=2 at $c2 s"; } ;;
		*) bad=$((bad + 1)) && echo "loop: run $n: /etc/upd.conf: $conf" ;;
		esac
	done
	echo "loop: $n runs, $bad failed, $back saw version 1 after version 2"
}

echo "guest up at $(up) s: $(/usr/bin/upd_prog once)"
/usr/bin/upd_prog serve /tmp/go >/tmp/serve.out 2>&1 &
serve=$!
exec 4</etc/gone.txt || fail "cannot open /etc/gone.txt"
echo local >/etc/local.conf || fail "cannot write /etc/local.conf"
[ ! -e /etc/new.conf ] || fail "/etc/new.conf is there before the update"
ls /etc >/dev/null || fail "cannot list /etc"
loop >/tmp/loop.out 2>&1 &
lp=$!
i=0
until grep -q 'half ok' /tmp/serve.out; do
	i=$((i + 1))
	[ $i -le 600 ] || fail "upd_prog serve: $(cat /tmp/serve.out)"
	sleep 0.1
done
sleep 2
echo "before the update: $(grep -c . /tmp/loop.out) loop lines, serve: $(cat /tmp/serve.out)"
read -r line <&3
[ "$line" = updated ] || fail "the host said '$line', want 'updated'"
echo "update seen at $(up) s"
# the negative entry and the cached listing of /etc go once its
# attributes say it changed (the client rechecks them after actimeo)
i=0
until [ -e /etc/new.conf ]; do
	i=$((i + 1))
	[ $i -le 50 ] || break
	sleep 0.2
done
if [ -e /etc/new.conf ]; then echo "new.conf: seen at $(up) s"; else echo "new.conf: not seen in 10 s"; fi
if ls /etc | grep -qx new.conf; then echo "new.conf: listed"; else echo "new.conf: not listed"; fi
# the pages the running program has not touched, and the removed file's,
# are read from the server again, through the handles of before the update
sync
echo 3 >/proc/sys/vm/drop_caches
touch /tmp/go
st=0
wait $serve || st=$?
echo "serve: status $st: $(tail -1 /tmp/serve.out)"
echo "gone: $(cat <&4)"
i=0
until grep -q 'first v=2' /tmp/loop.out && grep -q 'first version=2' /tmp/loop.out; do
	i=$((i + 1))
	[ $i -le 900 ] || break
	sleep 0.1
done
sleep 3
touch /tmp/stop
wait $lp
cat /tmp/loop.out
if [ -e /etc/gone.txt ]; then echo "gone path: present"; else echo "gone path: absent"; fi
echo "after: $(/usr/bin/upd_prog once)"
echo "guest done at $(up) s"
