#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""mkseeds.py - writes the seed corpus of fuzz_rpc into corpus/rpc/.

Each seed is one well-formed call of every MOUNT and NFSv3 procedure, encoded
here by hand from RFC 1813/5531 so the seeds do not depend on the code under
test.  A seed starts with the mode byte (0: a call record, 1: a TCP stream);
file handles are placeholders (31 'H' and a digit) that fuzz_rpc.c swaps for
real handles.  Run it again after changing it; the files are committed.
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "rpc")


def u32(v):
    return struct.pack(">I", v)


def u64(v):
    return struct.pack(">Q", v)


def opaque(b):
    return u32(len(b)) + b + b"\0" * (-len(b) % 4)


def fh(obj):
    return opaque(b"H" * 31 + str(obj).encode())


def auth_sys(uid=0, gid=0, gids=(0,)):
    body = u32(1) + opaque(b"fuzzhost") + u32(uid) + u32(gid)
    body += u32(len(gids)) + b"".join(u32(g) for g in gids)
    return u32(1) + opaque(body)


def call(prog, vers, proc, args=b"", cred=None, xid=0x1234):
    hdr = u32(xid) + u32(0) + u32(2) + u32(prog) + u32(vers) + u32(proc)
    return hdr + (cred or auth_sys()) + u32(0) + u32(0) + args


def sattr(mode=None, size=None):
    s = (u32(1) + u32(mode)) if mode is not None else u32(0)
    s += u32(0) + u32(0)  # uid, gid
    s += (u32(1) + u64(size)) if size is not None else u32(0)
    s += u32(2) + u32(1000) + u32(0)  # atime = client time
    s += u32(1)  # mtime = server time
    return s


def dirop(obj, name):
    return fh(obj) + opaque(name)


NFS, MNT = 100003, 100005
VERF = b"\0" * 8
nfs = {
    "null": (0, b""),
    "getattr": (1, fh(0)),
    "setattr": (2, fh(1) + sattr(0o600, 2) + u32(0)),
    "lookup": (3, dirop(2, b"b")),
    "lookup_dotdot": (3, dirop(0, b"..")),
    "access": (4, fh(1) + u32(0x3F)),
    "readlink": (5, fh(1)),
    "read": (6, fh(1) + u64(0) + u32(4096)),
    "write": (7, fh(1) + u64(2) + u32(5) + u32(2) + opaque(b"hello")),
    "create": (8, dirop(2, b"new") + u32(0) + sattr(0o644)),
    "create_excl": (8, dirop(0, b"ex") + u32(2) + b"verifier"),
    "mkdir": (9, dirop(0, b"nd") + sattr(0o755)),
    "symlink": (10, dirop(0, b"sl") + sattr() + opaque(b"../etc/passwd")),
    "mknod": (11, dirop(0, b"fifo") + u32(7) + sattr(0o644)),
    "remove": (12, dirop(2, b"c")),
    "rmdir": (13, dirop(2, b"e")),
    "rename": (14, dirop(0, b"a") + dirop(2, b"a2")),
    "link": (15, fh(3) + dirop(0, b"b2")),
    "readdir": (16, fh(2) + u64(0) + VERF + u32(512)),
    "readdirplus": (17, fh(2) + u64(0) + VERF + u32(256) + u32(1024)),
    "fsstat": (18, fh(0)),
    "fsinfo": (19, fh(0)),
    "pathconf": (20, fh(0)),
    "commit": (21, fh(1) + u64(0) + u32(0)),
}
mnt = {
    "mnt": (1, opaque(b"/")),
    "mnt_sub": (1, opaque(b"/d/e")),
    "dump": (2, b""),
    "umnt": (3, opaque(b"/")),
    "umntall": (4, b""),
    "export": (5, b""),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {}
    for name, (proc, args) in nfs.items():
        seeds["nfs_" + name] = b"\0" + call(NFS, 3, proc, args)
    for name, (proc, args) in mnt.items():
        seeds["mnt_" + name] = b"\0" + call(MNT, 3, proc, args)
    seeds["auth_none"] = b"\0" + call(NFS, 3, 1, fh(0), cred=u32(0) + u32(0))
    # Calls as a user with a supplementary group (the worker thread takes the
    # identity), as an id no process can have, and names holding a NUL
    # (refused when decoding).
    user = auth_sys(1000, 1000, (2000, 2001))
    for name in ("create", "write", "setattr", "remove", "read"):
        proc, args = nfs[name]
        seeds["user_" + name] = b"\0" + call(NFS, 3, proc, args, cred=user)
    seeds["user_invalid_ids"] = b"\0" + call(
        NFS, 3, 8, nfs["create"][1], cred=auth_sys(0xFFFFFFFF, 0xFFFFFFFF, (0xFFFFFFFF,)))
    seeds["nul_lookup"] = b"\0" + call(NFS, 3, 3, dirop(0, b"a\0/etc/shadow"))
    seeds["nul_symlink"] = b"\0" + call(
        NFS, 3, 10, dirop(0, b"sl2") + sattr() + opaque(b"/etc\0/shadow"))
    # A TCP stream: two records, the first split into two fragments.
    a = call(NFS, 3, 1, fh(0))
    b = call(MNT, 3, 5)
    seeds["stream"] = (b"\1" + u32(8) + a[:8] + u32(0x80000000 | (len(a) - 8)) + a[8:]
                       + u32(0x80000000 | len(b)) + b)
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(seeds), OUT))


if __name__ == "__main__":
    main()
