#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""mkseeds_nlm.py - writes the NLM and NSM seeds: corpus/nlm/ for fuzz_nlm (a
type byte, then that type's XDR) and corpus/rpc/nlm_*, nsm_* for fuzz_rpc
(whole NLM calls with handle placeholders, and NSM calls, through the
dispatcher to the handlers).

Encoded here by hand from the XNFS NLM and NSM types, so the seeds do not depend on
the code under test.  Run it again after changing it; the files are
committed.
"""
import os

from mkseeds import u32, u64, opaque, fh, call

HERE = os.path.dirname(os.path.abspath(__file__))
NLM_PROG = 100021
SM_PROG = 100024

# fuzz_nlm.c's table, in order
TYPES = ["nlm_testargs", "nlm_lockargs", "nlm_cancargs", "nlm_unlockargs",
         "nlm_testres", "nlm_res", "nlm_shareargs", "nlm_shareres", "nlm_notify",
         "nlm4_testargs", "nlm4_lockargs", "nlm4_cancargs", "nlm4_unlockargs",
         "nlm4_testres", "nlm4_res", "nlm4_shareargs", "nlm4_shareres",
         "nlm4_notify",
         "sm_name", "sm_my_id", "sm_mon_id", "sm_mon", "sm_stat", "sm_stat_res",
         "sm_status", "sm_stat_chge"]


def lock(v4, handle, svid=1, off=0, length=10, caller=b"fuzzhost", oh=b"owner"):
    rng = (u64(off) + u64(length)) if v4 else (u32(off) + u32(length))
    return opaque(caller) + handle + opaque(oh) + u32(svid) + rng


def testargs(v4, h, excl=1):
    return opaque(b"ck") + u32(excl) + lock(v4, h)


def lockargs(v4, h, block=0, excl=1, reclaim=0):
    return opaque(b"ck") + u32(block) + u32(excl) + lock(v4, h) + u32(reclaim) + u32(3)


def cancargs(v4, h):
    return opaque(b"ck") + u32(1) + u32(1) + lock(v4, h)


def unlockargs(v4, h):
    return opaque(b"ck") + lock(v4, h)


def shareargs(h, mode=1, access=3):
    return opaque(b"ck") + opaque(b"fuzzhost") + h + opaque(b"owner") + \
        u32(mode) + u32(access) + u32(0)


def holder(v4):
    rng = (u64(5) + u64(0)) if v4 else (u32(5) + u32(0))
    return u32(1) + u32(7) + opaque(b"other") + rng


def notify():
    return opaque(b"fuzzhost") + u32(3)


def my_id():
    return opaque(b"fuzzhost") + u32(NLM_PROG) + u32(4) + u32(16)


def mon_id():
    return opaque(b"server") + my_id()


def stat_chge():
    return opaque(b"fuzzhost") + u32(5)


def nsm_decoder_seeds():
    return {
        "sm_name": opaque(b"fuzzhost"),
        "sm_my_id": my_id(),
        "sm_mon_id": mon_id(),
        "sm_mon": mon_id() + b"p" * 16,
        "sm_stat": u32(3),
        "sm_stat_res": u32(0) + u32(3),
        "sm_status": opaque(b"fuzzhost") + u32(5) + b"p" * 16,
        "sm_stat_chge": stat_chge(),
    }


def nsm_call_seeds():
    return {
        "nsm_null": call(SM_PROG, 1, 0),
        "nsm_stat": call(SM_PROG, 1, 1, opaque(b"fuzzhost")),
        "nsm_mon": call(SM_PROG, 1, 2, mon_id() + b"p" * 16),
        "nsm_unmon": call(SM_PROG, 1, 3, mon_id()),
        "nsm_unmon_all": call(SM_PROG, 1, 4, my_id()),
        "nsm_simu_crash": call(SM_PROG, 1, 5),
        "nsm_notify": call(SM_PROG, 1, 6, stat_chge()),
    }


def decoder_seeds():
    h = opaque(b"\x01" * 32)
    s = {}
    for v4, p in ((False, "nlm_"), (True, "nlm4_")):
        s[p + "testargs"] = testargs(v4, h)
        s[p + "lockargs"] = lockargs(v4, h, block=1)
        s[p + "cancargs"] = cancargs(v4, h)
        s[p + "unlockargs"] = unlockargs(v4, h)
        s[p + "testres"] = opaque(b"ck") + u32(1) + holder(v4)
        s[p + "res"] = opaque(b"ck") + u32(3)
        s[p + "shareargs"] = shareargs(h)
        s[p + "shareres"] = opaque(b"ck") + u32(0) + u32(1)
        s[p + "notify"] = notify()
    s.update(nsm_decoder_seeds())
    return {name: bytes([TYPES.index(name)]) + b for name, b in s.items()}


def call_seeds():
    f = fh(1)  # the file "a"
    return {
        "nlm4_test": call(NLM_PROG, 4, 1, testargs(True, f)),
        "nlm4_lock": call(NLM_PROG, 4, 2, lockargs(True, f)),
        "nlm4_lock_block": call(NLM_PROG, 4, 2, lockargs(True, f, block=1)),
        "nlm4_cancel": call(NLM_PROG, 4, 3, cancargs(True, f)),
        "nlm4_unlock": call(NLM_PROG, 4, 4, unlockargs(True, f)),
        "nlm4_granted": call(NLM_PROG, 4, 5, testargs(True, f)),
        "nlm4_share": call(NLM_PROG, 4, 20, shareargs(f)),
        "nlm4_unshare": call(NLM_PROG, 4, 21, shareargs(f)),
        "nlm4_nm_lock": call(NLM_PROG, 4, 22, lockargs(True, f)),
        "nlm4_free_all": call(NLM_PROG, 4, 23, notify()),
        "nlm1_lock": call(NLM_PROG, 1, 2, lockargs(False, f, excl=0)),
        "nlm1_test": call(NLM_PROG, 1, 1, testargs(False, f)),
        "nlm3_share": call(NLM_PROG, 3, 20, shareargs(f)),
        "nlm4_stale": call(NLM_PROG, 4, 2, lockargs(True, opaque(b"junk"))),
    }


def write(d, seeds, prefix=b""):
    os.makedirs(d, exist_ok=True)
    for name, b in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(prefix + b)


def main():
    write(os.path.join(HERE, "corpus", "nlm"), decoder_seeds())
    write(os.path.join(HERE, "corpus", "rpc"), {"nlm_" + k.split("_", 1)[0][3:] +
                                                "_" + k.split("_", 1)[1]: v
                                                for k, v in call_seeds().items()},
          prefix=b"\0")
    write(os.path.join(HERE, "corpus", "rpc"), nsm_call_seeds(), prefix=b"\0")


if __name__ == "__main__":
    main()
