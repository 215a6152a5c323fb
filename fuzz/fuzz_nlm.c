/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_nlm.c - the NLM and NSM decoders (rpcgen's, from rpc/nlm_prot.x and
 * rpc/nsm_prot.x) on untrusted bytes.
 *
 * The first input byte chooses one of the argument and result types of
 * NLM versions 1, 3 and 4 or of NSM; the rest is decoded as that type.  What decodes is
 * encoded again, and must take exactly the bytes the decoder consumed (the
 * canonical length: bools and padding may differ in value, never in size),
 * then is freed with xdr_free, as the dispatcher frees arguments.  The
 * whole calls, with real handles, reach the handlers through fuzz_rpc
 * (corpus/rpc/nlm_*).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nlm_prot.h"
#include "nsm_prot.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

struct nlm_type {
	xdrproc_t xdr;
	size_t size;
};

#define T(name)                                                                          \
	{                                                                                \
		(xdrproc_t) xdr_##name, sizeof(name)                                     \
	}
static const struct nlm_type types[] = {
    T(nlm_testargs),
    T(nlm_lockargs),
    T(nlm_cancargs),
    T(nlm_unlockargs),
    T(nlm_testres),
    T(nlm_res),
    T(nlm_shareargs),
    T(nlm_shareres),
    T(nlm_notify),
    T(nlm4_testargs),
    T(nlm4_lockargs),
    T(nlm4_cancargs),
    T(nlm4_unlockargs),
    T(nlm4_testres),
    T(nlm4_res),
    T(nlm4_shareargs),
    T(nlm4_shareres),
    T(nlm4_notify),
    /* NSM, after NLM's so that the seeds' type bytes keep their meaning */
    T(sm_name),
    T(sm_my_id),
    T(sm_mon_id),
    T(sm_mon),
    T(sm_stat),
    T(sm_stat_res),
    T(sm_status),
    T(sm_stat_chge),
};
#define NTYPES (sizeof(types) / sizeof(types[0]))

/* Encodes OBJ again: its size must be USED, the bytes it was decoded from. */
static void check_reencode(const struct nlm_type *t, void *obj, u_int used)
{
	unsigned long len = xdr_sizeof(t->xdr, obj);
	char *buf = malloc(len ? len : 4);
	XDR x;

	if (!buf)
		abort();
	xdrmem_create(&x, buf, (u_int)len, XDR_ENCODE);
	if (!t->xdr(&x, obj) || xdr_getpos(&x) != used) {
		fprintf(stderr, "fuzz_nlm: %lu bytes decoded re-encode as %u\n",
			(unsigned long)used, xdr_getpos(&x));
		abort();
	}
	xdr_destroy(&x);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct nlm_type *t;
	void *obj;
	XDR x;

	if (size < 1 || size - 1 > UINT32_MAX)
		return 0;
	t = &types[data[0] % NTYPES];
	obj = calloc(1, t->size);
	if (!obj)
		abort();
	xdrmem_create(&x, (char *)data + 1, (u_int)(size - 1), XDR_DECODE);
	if (t->xdr(&x, obj))
		check_reencode(t, obj, xdr_getpos(&x));
	xdr_destroy(&x);
	xdr_free(t->xdr, obj);
	free(obj);
	return 0;
}
