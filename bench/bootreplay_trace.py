#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bootreplay_trace.py PCAP TRACE - a boot's NFSv3 calls, from a tcpdump
capture (bench/bootreplay.sh record), as the trace boot_replay replays.

The capture holds one client's TCP connections to the NFS port and the MOUNT
port (Ethernet, IPv4).  Each direction of each connection is put back in
sequence order (retransmitted and overlapping segments are dropped) and cut
into RPC records (record marking, RFC 5531 section 11).  A message's time is
its place in the capture: a call's is the packet that carried its first
byte (the client had sent nothing of it before), a reply's the packet that
carried its last (the client could act on it only then).

The trace (every number a big-endian u32) is b"BOOTRPL1", then records in
capture order:
  1 ROOT  fhlen fh      the root handle: MNT's answer, else the handle of
                        the first NFS call (every NFSv3 call but NULL starts
                        with one)
  2 CALL  xid proc uid gid ngids gids... arglen args
                        an NFSv3 call, its arguments as sent (XDR), its
                        AUTH_UNIX credential (uid 0 with another flavour)
  3 REPLY xid bodylen body
                        the results (XDR, nfsstat3 first) of an accepted
                        reply to a CALL above
Only calls answered in the capture are kept, each once (a retransmission,
same connection and xid, is dropped), with their one reply.  Prints the
calls by procedure on stderr.
"""
import collections
import struct
import sys

PROCS = ("null getattr setattr lookup access readlink read write create mkdir symlink "
         "mknod remove rmdir rename link readdir readdirplus fsstat fsinfo pathconf "
         "commit").split()
NFS_PROG, MOUNT_PROG = 100003, 100005


def packets(path):
    """(index, (src, sport, dst, dport), seq, flags, payload) of each TCP/IPv4 packet."""
    data = open(path, "rb").read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        sys.exit("bootreplay_trace: %s: not a pcap file" % path)
    linktype = struct.unpack(end + "I", data[20:24])[0]
    if linktype != 1:
        sys.exit("bootreplay_trace: link type %d, want Ethernet (1)" % linktype)
    off, idx = 24, 0
    while off + 16 <= len(data):
        incl = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        frame = data[off + 16:off + 16 + incl]
        off += 16 + incl
        idx += 1
        if len(frame) < 14 + 20 or frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        ihl = (ip[0] & 15) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        if ip[9] != 6:
            continue
        tcp = ip[ihl:total]
        sport, dport, seq = struct.unpack(">HHI", tcp[:8])
        thl = (tcp[12] >> 4) * 4
        key = (ip[12:16], sport, ip[16:20], dport)
        yield idx, key, seq, tcp[13], tcp[thl:]


class Stream:
    """One direction of a connection: bytes in order, cut into RPC records."""

    def __init__(self):
        self.next = None  # the sequence number of the next byte wanted
        self.held = {}  # seq -> payload, ahead of next
        self.buf = b""
        self.start = None  # the packet that carried the pending record's first byte
        self.frags = b""

    def add(self, idx, seq, flags, payload):
        if self.next is None:
            self.next = (seq + 1) & 0xFFFFFFFF if flags & 2 else seq
            if flags & 2:
                return []
        if payload:
            self.held.setdefault(seq, payload)
        out = []
        while True:
            got = None
            for s, p in self.held.items():
                d = (self.next - s) & 0xFFFFFFFF
                if d < len(p):  # holds the next byte
                    got = (s, p[d:])
                    break
            if got is None:
                break
            del self.held[got[0]]
            if not self.buf and not self.frags:
                self.start = idx
            self.buf += got[1]
            self.next = (self.next + len(got[1])) & 0xFFFFFFFF
            out += self.records(idx)
        # drop what lies wholly behind (retransmissions)
        for s in [s for s, p in self.held.items()
                  if ((self.next - s) & 0xFFFFFFFF) < 0x80000000 and
                  ((self.next - s) & 0xFFFFFFFF) >= len(p)]:
            del self.held[s]
        return out

    def records(self, idx):
        out = []
        while len(self.buf) >= 4:
            mark = struct.unpack(">I", self.buf[:4])[0]
            n = mark & 0x7FFFFFFF
            if len(self.buf) < 4 + n:
                break
            self.frags += self.buf[4:4 + n]
            self.buf = self.buf[4 + n:]
            if mark & 0x80000000:
                out.append((self.start, idx, self.frags))
                self.frags = b""
                self.start = idx
        return out


def opaque(b, o):
    n = struct.unpack(">I", b[o:o + 4])[0]
    return b[o + 4:o + 4 + n], o + 4 + ((n + 3) & ~3)


def parse_call(m):
    xid, _, _, prog, vers, proc, flavor = struct.unpack(">7I", m[:28])
    cred, o = opaque(m, 28)
    _, o = opaque(m, o + 4)  # the verifier's body (after its flavour)
    uid = gid = 0
    gids = []
    if flavor == 1:  # AUTH_UNIX: stamp, machine name, uid, gid, gids
        _, c = opaque(cred, 4)
        uid, gid, n = struct.unpack(">3I", cred[c:c + 12])
        gids = list(struct.unpack(">%dI" % n, cred[c + 12:c + 12 + 4 * n]))
    return xid, prog, vers, proc, uid, gid, gids, m[o:]


def parse_reply(m):
    """xid and the results of an accepted, successful reply, else None."""
    xid, mtype, stat = struct.unpack(">3I", m[:12])
    if mtype != 1 or stat != 0:
        return xid, None
    _, o = opaque(m, 16)  # the verifier's body
    if struct.unpack(">I", m[o:o + 4])[0] != 0:
        return xid, None
    return xid, m[o + 4:]


def main():
    pcap, trace = sys.argv[1], sys.argv[2]
    streams = collections.defaultdict(Stream)
    events = []  # (packet index, order, kind, conn, message)
    for idx, key, seq, flags, payload in packets(pcap):
        for first, last, msg in streams[key].add(idx, seq, flags, payload):
            to_server = key[3] in (2049, 20048) or key[1] not in (2049, 20048)
            conn = key if to_server else (key[2], key[3], key[0], key[1])
            if to_server:
                events.append((first, len(events), "call", conn, msg))
            else:
                events.append((last, len(events), "reply", conn, msg))
    events.sort()
    calls, replies, root = {}, {}, None
    for _, _, kind, conn, msg in events:
        if kind == "call":
            c = parse_call(msg)
            calls.setdefault((conn, c[0]), c)
        else:
            xid, body = parse_reply(msg)
            if body is not None:
                replies.setdefault((conn, xid), body)
    out = [b"BOOTRPL1"]
    count = collections.Counter()
    seen = set()
    for _, _, kind, conn, msg in events:
        xid = struct.unpack(">I", msg[:4])[0]
        c = calls.get((conn, xid))
        if c is None or (conn, xid) not in replies:
            continue
        _, prog, vers, proc, uid, gid, gids, args = c
        if prog == MOUNT_PROG and proc == 1 and kind == "reply":
            body = replies[(conn, xid)]
            if struct.unpack(">I", body[:4])[0] == 0:
                fh, _ = opaque(body, 4)
                root = fh
            continue
        if prog != NFS_PROG or vers != 3:
            continue
        if kind == "call" and (conn, xid, "c") not in seen:
            seen.add((conn, xid, "c"))
            if root is None and proc != 0:
                root, _ = opaque(args, 0)
                out.append(struct.pack(">2I", 1, len(root)) + root)
            count[PROCS[proc] if proc < len(PROCS) else str(proc)] += 1
            out.append(struct.pack(">6I", 2, xid, proc, uid, gid, len(gids)) +
                       struct.pack(">%dI" % len(gids), *gids) +
                       struct.pack(">I", len(args)) + args)
        elif kind == "reply" and (conn, xid, "c") in seen and (conn, xid, "r") not in seen:
            seen.add((conn, xid, "r"))
            body = replies[(conn, xid)]
            out.append(struct.pack(">3I", 3, xid, len(body)) + body)
    if root is None:
        sys.exit("bootreplay_trace: no NFSv3 call answered in %s" % pcap)
    if out[1][:4] != struct.pack(">I", 1):  # MNT's root came first: put it first
        out.insert(1, struct.pack(">2I", 1, len(root)) + root)
    open(trace, "wb").write(b"".join(out))
    total = sum(count.values())
    print("bootreplay_trace: %d calls: " % total + ", ".join(
        "%s %d" % (p, n) for p, n in count.most_common()), file=sys.stderr)


if __name__ == "__main__":
    main()
