/* SPDX-License-Identifier: Apache-2.0 */
/* record.c - TCP record marking (RFC 5531 section 11): a byte stream cut
 * into call records by a pure state machine, fed from a socket (conn.c) or
 * from a test's buffer.  A record is one or more fragments, each behind a
 * 4-byte header (the last-fragment bit, 31 bits of length).
 *
 * Rules:
 *  1. A record longer than r->max is refused before its bytes are stored:
 *     rpc_rm_feed says RPC_RM_TOOBIG as soon as a fragment header announces
 *     more than the room left, and the connection closes (conn.c, rule 7).
 *  2. Memory follows the bytes that arrived, not the lengths announced:
 *     rm_grow doubles from RM_FIRST_CAP, and rpc_rm_direct lends at most one
 *     reader's buffer (RPC_RX_BUF_SIZE) ahead until that much has arrived.
 *  3. rpc_rm_take hands the whole record over and leaves R at the start of
 *     the next one; rpc_rm_free frees only what R still holds.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

#define RM_FIRST_CAP 512 /* bytes: a record buffer's first size */
/* Fragment bytes still to come that are worth a read straight into the record. */
#define RM_DIRECT_MIN 16384

void rpc_rm_init(struct rpc_rm *r, size_t max)
{
	memset(r, 0, sizeof(*r));
	r->max = max;
}

void rpc_rm_free(struct rpc_rm *r)
{
	rpc_buf_free(&r->rec);
}

void rpc_rm_take(struct rpc_rm *r, struct rpc_buf *out)
{
	*out = r->rec;
	r->rec = (struct rpc_buf){0};
	r->in_frag = false;
	r->last = false;
	r->hdr_have = 0;
}

/* Grows the record buffer to hold NEED bytes, doubling so that a client that
 * announces a large fragment costs memory only as its bytes arrive.  The
 * first size fits a metadata call, in a block malloc's per-thread cache
 * serves. */
static bool rm_grow(struct rpc_rm *r, size_t need)
{
	size_t cap = r->rec.cap ? r->rec.cap : RM_FIRST_CAP;
	uint8_t *p;

	if (need <= r->rec.cap)
		return true;
	while (cap < need)
		cap *= 2;
	if (cap > r->max)
		cap = need;
	p = realloc(r->rec.data, cap);
	if (!p)
		return false;
	r->rec.data = p;
	r->rec.cap = cap;
	return true;
}

/* Reads a fragment header from P; true when the 4 bytes are complete. */
static bool rm_header(struct rpc_rm *r, const uint8_t *p, size_t n, size_t *used)
{
	size_t take = 4 - r->hdr_have;
	uint32_t word;

	if (take > n)
		take = n;
	memcpy(r->hdr + r->hdr_have, p, take);
	r->hdr_have += (uint8_t)take;
	*used = take;
	if (r->hdr_have < 4)
		return false;
	memcpy(&word, r->hdr, 4);
	word = ntohl(word);
	r->hdr_have = 0;
	r->last = (word & 0x80000000u) != 0;
	r->frag_left = word & 0x7fffffffu;
	r->in_frag = true;
	return true;
}

size_t rpc_rm_feed(struct rpc_rm *r, const uint8_t *p, size_t n, enum rpc_rm_status *st)
{
	size_t used = 0, take;

	*st = RPC_RM_MORE;
	while (used < n || (r->in_frag && r->frag_left == 0)) {
		if (!r->in_frag) {
			if (!rm_header(r, p + used, n - used, &take))
				return used + take;
			used += take;
			if (r->frag_left > r->max - r->rec.len) {
				*st = RPC_RM_TOOBIG;
				return used;
			}
		}
		take = n - used < r->frag_left ? n - used : r->frag_left;
		if (take > 0) {
			if (!rm_grow(r, r->rec.len + take)) {
				*st = RPC_RM_TOOBIG;
				return used;
			}
			memcpy(r->rec.data + r->rec.len, p + used, take);
			r->rec.len += take;
		}
		r->frag_left -= (uint32_t)take;
		used += take;
		if (r->frag_left > 0)
			break;
		r->in_frag = false;
		if (r->last) {
			*st = RPC_RM_RECORD;
			break;
		}
	}
	return used;
}

uint8_t *rpc_rm_direct(struct rpc_rm *r, size_t *room)
{
	size_t step;

	if (!r->in_frag || r->frag_left < RM_DIRECT_MIN)
		return NULL;
	/* The fragment's whole rest once a reader's buffer of the record has
	 * arrived, before that one buffer's worth: a client holds memory only
	 * for bytes it sent, give or take one read (rule 1 bounds it). */
	step = r->rec.len >= RPC_RX_BUF_SIZE ? r->frag_left : RPC_RX_BUF_SIZE;
	if (step > r->frag_left)
		step = r->frag_left;
	if (!rm_grow(r, r->rec.len + step))
		return NULL; /* rpc_rm_feed meets the ENOMEM and says so */
	*room = r->rec.cap - r->rec.len < r->frag_left ? r->rec.cap - r->rec.len
						       : r->frag_left;
	return r->rec.data + r->rec.len;
}

void rpc_rm_direct_done(struct rpc_rm *r, size_t n, enum rpc_rm_status *st)
{
	r->rec.len += n;
	r->frag_left -= (uint32_t)n;
	*st = RPC_RM_MORE;
	if (r->frag_left > 0)
		return;
	r->in_frag = false;
	if (r->last)
		*st = RPC_RM_RECORD;
}
