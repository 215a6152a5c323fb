/* SPDX-License-Identifier: Apache-2.0 */
/* handle.c - file handles: the bytes a client holds to name an object.
 *
 * A handle is a versioned packed struct of UN_FH_LEN bytes:
 *
 *   offset  size  field
 *        0     1  version (UN_FH_VERSION)
 *        1     3  reserved, zero
 *        4     4  export id, big-endian
 *        8     8  node id, big-endian
 *       16    16  MAC: BLAKE2b-128 of bytes 0..15, keyed with the state's
 *                 handle key (derived from the state dir's secret)
 *
 * Rules:
 *  1. A client can neither forge a handle nor move one to another export:
 *     the MAC covers the version, export id and node id (fh_mac), and is
 *     compared in constant time (un_handle_decode).
 *  2. Anything that is not such a handle (length, version, reserved bits,
 *     MAC) is one error, -EBADMSG, and never a crash (un_handle_decode);
 *     whether the node still exists is un_resolve's question.
 *  3. A handle stays valid across restarts with the same state dir: its
 *     key comes from the state dir's secret (state.c, 1) and the export id
 *     from the export's path (layer.c, 2).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "un_private.h"

struct fh {
	uint8_t version;
	uint8_t reserved[3];
	uint8_t export_id[4]; /* BE */
	uint8_t node_id[8];   /* BE */
	uint8_t mac[16];
};
_Static_assert(sizeof(struct fh) == UN_FH_LEN, "handle layout is on the wire");
_Static_assert(UN_FH_LEN <= UN_FH_MAX, "handle fits NFSv3's 64 bytes");
_Static_assert(offsetof(struct fh, mac) == 16, "the MAC covers bytes 0..15");

static void be_put(uint8_t *p, uint64_t v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
}

static uint64_t be_get(const uint8_t *p, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

static void fh_mac(const struct un_state *st, const struct fh *fh, uint8_t mac[16])
{
	crypto_generichash(mac, 16, (const uint8_t *)fh, offsetof(struct fh, mac),
			   st->sh->key_handle, sizeof(st->sh->key_handle));
}

size_t un_handle_encode(const struct un_export *ex, un_id id, uint8_t out[UN_FH_MAX])
{
	struct fh fh = {.version = UN_FH_VERSION};

	be_put(fh.export_id, ex->id, sizeof(fh.export_id));
	be_put(fh.node_id, id, sizeof(fh.node_id));
	fh_mac(ex->st, &fh, fh.mac);
	memcpy(out, &fh, sizeof(fh));
	return sizeof(fh);
}

int un_handle_decode(const struct un_state *st, const uint8_t *bytes, size_t len,
		     uint32_t *export_id, un_id *id)
{
	static const uint8_t zero[3];
	uint8_t mac[16];
	struct fh fh;

	if (len != sizeof(fh))
		return -EBADMSG;
	memcpy(&fh, bytes, sizeof(fh));
	if (fh.version != UN_FH_VERSION || memcmp(fh.reserved, zero, sizeof(zero)))
		return -EBADMSG;
	fh_mac(st, &fh, mac);
	if (sodium_memcmp(mac, fh.mac, sizeof(mac)) != 0)
		return -EBADMSG;
	*export_id = (uint32_t)be_get(fh.export_id, sizeof(fh.export_id));
	*id = be_get(fh.node_id, sizeof(fh.node_id));
	return 0;
}
