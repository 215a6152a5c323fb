#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""mkseeds_pmap.py - writes the portmapper seeds corpus/rpc/pmap_* for
fuzz_rpc: whole calls of program 100000, versions 2 (struct pmap), 3 and 4
(struct rpcb), through the dispatcher and libtirpc's decoders to the
handlers of server/pmap.c; and calls whose rpcb strings claim more bytes
than the bound (pmap.c, rule 5) or than the record holds.

Encoded here by hand from RFC 1833, so the seeds do not depend on the code
under test.  Run it again after changing it; the files are committed.
"""
import os

from mkseeds import u32, opaque, call
from mkseeds_nlm import write

HERE = os.path.dirname(os.path.abspath(__file__))
PMAP_PROG = 100000


def pmap(prog, vers, prot, port=0):
    return u32(prog) + u32(vers) + u32(prot) + u32(port)


def rpcb(prog, vers, netid=b"tcp", addr=b"", owner=b""):
    return u32(prog) + u32(vers) + opaque(netid) + opaque(addr) + opaque(owner)


def seeds():
    return {
        "pmap2_null": call(PMAP_PROG, 2, 0),
        "pmap2_set": call(PMAP_PROG, 2, 1, pmap(100099, 1, 6, 999)),
        "pmap2_unset": call(PMAP_PROG, 2, 2, pmap(100003, 3, 6)),
        "pmap2_getport": call(PMAP_PROG, 2, 3, pmap(100003, 3, 17)),
        "pmap2_getport_nlm": call(PMAP_PROG, 2, 3, pmap(100021, 4, 6)),
        "pmap2_dump": call(PMAP_PROG, 2, 4),
        "pmap2_callit": call(PMAP_PROG, 2, 5, u32(100003) + u32(3) + u32(0) +
                             opaque(b"")),
        "pmap3_set": call(PMAP_PROG, 3, 1, rpcb(100099, 1, addr=b"127.0.0.1.3.231",
                                                owner=b"superuser")),
        "pmap3_getaddr": call(PMAP_PROG, 3, 3, rpcb(100003, 3)),
        "pmap3_dump": call(PMAP_PROG, 3, 4),
        "pmap3_gettime": call(PMAP_PROG, 3, 6),
        "pmap3_uaddr2taddr": call(PMAP_PROG, 3, 7, opaque(b"127.0.0.1.8.1")),
        "pmap3_taddr2uaddr": call(PMAP_PROG, 3, 8, u32(16) + opaque(
            b"\x02\x00\x08\x01\x7f\x00\x00\x01" + b"\0" * 8)),
        "pmap4_taddr2uaddr_huge": call(PMAP_PROG, 4, 8, u32(0xfffffff0) +
                                       u32(0xfffffff0) + b"\x02\x00"),
        "pmap4_getaddr": call(PMAP_PROG, 4, 3, rpcb(100005, 3, b"udp")),
        "pmap4_getversaddr": call(PMAP_PROG, 4, 9, rpcb(100024, 1)),
        "pmap4_getaddrlist": call(PMAP_PROG, 4, 11, rpcb(100021, 4)),
        "pmap4_indirect": call(PMAP_PROG, 4, 10, rpcb(100003, 3)),
        # a netid over the bound, then one longer than the record
        "pmap4_getaddr_long": call(PMAP_PROG, 4, 3, rpcb(100003, 3, b"t" * 300)),
        "pmap4_getaddr_huge": call(PMAP_PROG, 4, 3, u32(100003) + u32(3) +
                                   u32(0xfffffff0) + b"tcp\0"),
    }


def main():
    write(os.path.join(HERE, "corpus", "rpc"), seeds(), prefix=b"\0")


if __name__ == "__main__":
    main()
