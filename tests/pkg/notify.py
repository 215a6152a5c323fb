#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""notify.py UNION_NFSD WITH_SYSTEMD - what the service manager hears, and
the log as the journal reads it (server/notify.c, server/log.c).

A server started as systemd starts it (NOTIFY_SOCKET a datagram socket of
this test's, JOURNAL_STREAM naming its stderr) must send READY=1 with a
STATUS once it serves (after its "listening" line), RELOADING=1 with
MONOTONIC_USEC and then READY=1 around a SIGHUP, and STOPPING=1 on SIGTERM,
then exit 0.  Each stderr line then starts with a syslog priority "<N>"
(sd-daemon(3)), and a bad flag is "<3>union-nfsd: ...".  When JOURNAL_STREAM
names another file, the lines keep the plain format (time first).

Exit: 0 passed, 1 failed, 77 skipped (built without libsystemd).
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1]
if len(sys.argv) < 3 or sys.argv[2] not in ("ON", "1", "TRUE"):
    print("SKIP: built without libsystemd (WITH_SYSTEMD off)")
    sys.exit(77)

fails = []


def check(ok, what):
    if not ok:
        fails.append(what)
        print("FAIL:", what)


def stream_id(fd):
    st = os.fstat(fd)
    return "%d:%d" % (st.st_dev, st.st_ino)


def recv_until(sock, want, deadline):
    """Datagrams until one holding the line WANT, or the deadline."""
    got = []
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            msg = sock.recv(4096).decode()
        except socket.timeout:
            break
        got.append(msg)
        if want in msg.split("\n"):
            return msg, got
    return None, got


def server_args(tmp):
    return [BIN, "--foreground", "--lowerdir=" + tmp + "/lower",
            "--state-dir=" + tmp + "/state", "--bind=127.0.0.1",
            "--nfs-port=0", "--mount-port=0", "--nlm-port=0", "--nsm-port=0",
            "--grace-period=0", "--no-rpcbind", "--no-portmapper"]


def serve_and_signal(tmp, sock, env, err_w):
    proc = subprocess.Popen(server_args(tmp), env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=err_w)
    try:
        msg, got = recv_until(sock, "READY=1", time.monotonic() + 60)
        check(msg is not None, "no READY=1 after start (got %r)" % got)
        line = proc.stdout.readline().decode()
        check(line.startswith("listening nfs="),
              "READY=1 came, but no 'listening' line before it: %r" % line)
        check(msg is not None and "STATUS=serving 1 export: nfs " in msg,
              "READY=1 without the serving STATUS: %r" % msg)
        proc.send_signal(signal.SIGHUP)
        msg, got = recv_until(sock, "RELOADING=1", time.monotonic() + 30)
        check(msg is not None and re.search(r"^MONOTONIC_USEC=\d+$", msg, re.M),
              "SIGHUP: no RELOADING=1 with MONOTONIC_USEC (got %r)" % got)
        msg, got = recv_until(sock, "READY=1", time.monotonic() + 30)
        check(msg is not None and "STATUS=serving (reloaded)" in msg,
              "SIGHUP: no READY=1 after the reload (got %r)" % got)
        proc.send_signal(signal.SIGTERM)
        msg, got = recv_until(sock, "STOPPING=1", time.monotonic() + 30)
        check(msg is not None, "SIGTERM: no STOPPING=1 (got %r)" % got)
        check(proc.wait(60) == 0, "exit status %s after SIGTERM" % proc.returncode)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def read_all(path):
    with open(path) as f:
        return f.read()


def main():
    tmp = tempfile.mkdtemp(prefix="pkg-notify.")
    try:
        os.makedirs(tmp + "/lower")
        with open(tmp + "/lower/a", "w") as f:
            f.write("a\n")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(tmp + "/notify")
        env = dict(os.environ, NOTIFY_SOCKET=tmp + "/notify")

        # As the journal's stream: priorities first.
        with open(tmp + "/err", "w") as err_w:
            env["JOURNAL_STREAM"] = stream_id(err_w.fileno())
            serve_and_signal(tmp, sock, env, err_w)
        lines = read_all(tmp + "/err").splitlines()
        check(len(lines) > 3, "too few log lines: %r" % lines)
        bad = [l for l in lines if not re.match(r"<[3467]>(err|warn|info|debug): ", l)]
        check(not bad, "lines without a priority prefix: %r" % bad[:3])
        check("<6>info: SIGHUP: reloading" in lines, "no '<6>info: SIGHUP: reloading'")
        check(any(l.startswith("<4>warn: ") for l in lines), "no '<4>warn: ' line")

        # A flag the server refuses, as the journal's stream: an error.
        with open(tmp + "/err2", "w") as err_w:
            env["JOURNAL_STREAM"] = stream_id(err_w.fileno())
            rc = subprocess.call([BIN, "--no-such-flag"], env=env,
                                 stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=err_w)
        out = read_all(tmp + "/err2")
        check(rc == 2 and out.startswith("<3>union-nfsd: unknown option"),
              "bad flag: exit %d, stderr %r" % (rc, out))

        # JOURNAL_STREAM naming another file: the plain format.
        with open(tmp + "/err3", "w") as err_w:
            env["JOURNAL_STREAM"] = stream_id(sock.fileno())
            serve_and_signal(tmp, sock, env, err_w)
        lines = read_all(tmp + "/err3").splitlines()
        bad = [l for l in lines if not re.match(r"\d{4}-\d\d-\d\dT.*union-nfsd\[\d+\] ", l)]
        check(lines and not bad, "stderr not the journal, yet: %r" % bad[:3])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % len(fails) if fails else "notify: all passed")
    return 1 if fails else 0


sys.exit(main())
