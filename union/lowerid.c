/* SPDX-License-Identifier: Apache-2.0 */
/* lowerid.c - lower ids: node ids computed from the layer index, so that
 * gateways with their own state dirs and one key file give every object of
 * the same read-only layers the same id, and resolve each other's
 * (docs/gateways.md, part 1).
 *
 * A lower id has its top bit set:
 *
 *     1 | tag (24 bits) | objnum (39 bits)
 *
 * tag is a keyed hash (the state's key_lower, derived from the key file) of
 * the layer's key dev (UN_KEY_DEV | 48 bits of its lineage, layerid.c rule
 * 6) and the export's root id, so that two exports over one layer do not
 * share ids; objnum is the object's link leader in that layer's index (a
 * name of a writable union's lower inode with several links: its own
 * path's, rule 7).
 * Counter ids stay below 2^63 (node.c), so the two never meet.
 *
 * Rules:
 *  1. An export computes ids (ex->lower_ids) when its state was opened
 *     with a key file, or when the server asks (un_export_cfg.lower_ids:
 *     its own exports, whose lookups then need not wait for the table,
 *     node.c invariant 16).  A client union of a server without a key
 *     file keeps counter ids: its nodes live in the main table with every
 *     other union's, and a counter keeps that table's keys in the order
 *     they are written (roots.c says why that matters).
 *  2. Which instance names an object (un_lower_id_of): a non-directory's
 *     top-most one; a directory's lowest one, the last of its instances, as
 *     images are stacked base first and updated on top, so a layer added
 *     above keeps every id.  An instance without an index key (the upper,
 *     a layer without an index, an object added to a layer while served)
 *     gives none, and the object a counter id.
 *  3. An export's root is the root (UN_LX_ROOT) of its bottom-most lower
 *     layer, under a tag of that layer and the export id
 *     (un_lower_root_id): its children's tags need the root id first.
 *  4. The table still records a lower-id node exactly as any other; the id
 *     is only chosen here (node.c, node_create), and taken only where no
 *     record holds it already: a replaced object's old record, or a record
 *     of another export whose tags collide with this one's (node.c logs
 *     it once), keeps it, and the new node gets a counter id.
 *  5. A lower id that the table does not hold decodes to a layer of the
 *     export and a path in its index (un_lower_path), which lookup.c walks
 *     from the root, as a first LOOKUP would: the id stands if the walk
 *     ends at a node of that id, and is stale otherwise (the path is now
 *     hidden, or names another object).
 *  6. A tag names one layer of an export (un_lower_tags, at every open,
 *     once the root id is known): a layer whose tag a layer below it has
 *     too (about one stack in a million with four layers, or the same
 *     lineage twice: two copies of one layer) is not tagged, and its
 *     objects get counter ids, with one log line.  The decision depends on
 *     the stack, the lineages and the key only, so every gateway that
 *     opens the same stack makes it, and says it.  (A layer twice in one
 *     stack is refused before: layer.c rule 3.)
 *  7. The names of a lower inode with several links in a writable union
 *     (UN_LINKS_GROUP) are nodes of their own: each takes the lower id of
 *     its own path's objnum (un_node_obs.pathnum, from un_layer_pathnum),
 *     so a gateway that never saw a name decodes its id (rule 5), and the
 *     group's fileid is its link leader's lower id (un_lower_fileid_of),
 *     whichever name a gateway saw first.  A name whose path the index
 *     does not know gets a counter id, never the leader's.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "lindex.h"
#include "un_private.h"

#define LOWER_BIT     (1ull << 63)
#define TAG_BITS      24
#define OBJNUM_BITS   39
#define OBJNUM_MAX    ((1ull << OBJNUM_BITS) - 1)
#define ROOT_SALT     (1ull << 32) /* rule 3: above every export id */
#define PATH_HOPS_MAX 4096	   /* bounds the walk up a damaged index */

static _Atomic unsigned tag_bits = TAG_BITS; /* narrowed by a test only */

void un_lower_test_tag_bits(unsigned bits)
{
	tag_bits = bits < TAG_BITS ? bits : TAG_BITS;
}

static uint32_t tag_of(const struct un_state *st, uint64_t key_dev, uint64_t salt)
{
	uint8_t in[16], h[crypto_shorthash_BYTES];
	uint64_t v;

	key_dev = htole64(key_dev);
	salt = htole64(salt);
	memcpy(in, &key_dev, 8);
	memcpy(in + 8, &salt, 8);
	crypto_shorthash(h, in, sizeof(in), st->sh->key_lower);
	memcpy(&v, h, sizeof(v));
	return (uint32_t)(le64toh(v) & ((1ull << tag_bits) - 1));
}

static un_id lower_id(uint32_t tag, uint64_t objnum)
{
	if (objnum == 0 || objnum > OBJNUM_MAX)
		return UN_ID_NONE;
	return LOWER_BIT | (uint64_t)tag << OBJNUM_BITS | objnum;
}

bool un_id_is_lower(un_id id)
{
	return id & LOWER_BIT;
}

/* Whether layer L of EX has a tag (un_lower_tags gave it one). */
static bool has_tag(const struct un_export *ex, const struct un_layer *l)
{
	return ex->lower_ids && l->lower && l->lxc;
}

/* The top-most layer of EX whose keys have dev KEY_DEV, or NULL. */
static const struct un_layer *layer_keyed(const struct un_export *ex, uint64_t key_dev)
{
	for (size_t i = 0; i < ex->nlayers; i++)
		if (ex->layers[i].lxc && ex->layers[i].key_dev == key_dev)
			return &ex->layers[i];
	return NULL;
}

/* The lower id of OBJNUM in the layer of key K of OBS's export, or
 * UN_ID_NONE (rules 1, 6). */
static un_id id_in(const struct un_node_obs *obs, struct un_devino k, uint64_t objnum)
{
	const struct un_layer *l;

	if (!obs->ex || !obs->ex->lower_ids || obs->root == UN_ID_NONE ||
	    !un_devino_is_key(k))
		return UN_ID_NONE;
	l = layer_keyed(obs->ex, k.dev);
	return l && l->tagged ? lower_id(l->tag, objnum) : UN_ID_NONE;
}

un_id un_lower_id_of(const struct un_node_obs *obs)
{
	struct un_devino k =
	    S_ISDIR(obs->type) ? obs->inst[obs->ninst - 1] : obs->inst[0];

	return id_in(obs, k, obs->links == UN_LINKS_GROUP ? obs->pathnum : k.ino);
}

un_id un_lower_fileid_of(const struct un_node_obs *obs)
{
	return obs->links == UN_LINKS_GROUP ? id_in(obs, obs->inst[0], obs->inst[0].ino)
					    : UN_ID_NONE;
}

/* The layer below position I of EX that has tag TAG, or NULL. */
static const struct un_layer *tag_below(const struct un_export *ex, size_t i,
					uint32_t tag)
{
	for (size_t j = i + 1; j < ex->nlayers; j++)
		if (has_tag(ex, &ex->layers[j]) && ex->layers[j].tag == tag)
			return &ex->layers[j];
	return NULL;
}

void un_lower_tags(struct un_export *ex)
{
	for (size_t i = ex->nlayers; i-- > 0;) {
		struct un_layer *l = &ex->layers[i];
		const struct un_layer *below;

		l->tagged = false;
		if (!has_tag(ex, l))
			continue;
		l->tag = tag_of(ex->st, l->key_dev, ex->root_id);
		below = tag_below(ex, i, l->tag);
		l->tagged = !below;
		if (below)
			un_notice(
			    ex->st,
			    "export %s: lowerdir %s has the lower-id tag of lowerdir "
			    "%s below it: its objects get this server's own ids, "
			    "their handles not the same on other gateways",
			    ex->path, l->dir, below->dir);
	}
}

un_id un_lower_root_id(const struct un_export *ex)
{
	const struct un_layer *bottom;

	if (!ex->lower_ids || !ex->nlayers)
		return UN_ID_NONE;
	bottom = &ex->layers[ex->nlayers - 1];
	if (!bottom->lower || !bottom->lxc)
		return UN_ID_NONE;
	return lower_id(tag_of(ex->st, bottom->key_dev, ROOT_SALT | ex->id), UN_LX_ROOT);
}

/* The index of the layer of EX whose tag ID carries, or NULL. */
static struct un_lx *layer_of(const struct un_export *ex, un_id id)
{
	uint32_t tag = (uint32_t)(id >> OBJNUM_BITS) & ((1u << TAG_BITS) - 1);

	for (size_t i = 0; i < ex->nlayers; i++) {
		const struct un_layer *l = &ex->layers[i];

		if (l->tagged && l->tag == tag)
			return un_lxc_lx(l->lxc);
	}
	return NULL;
}

/* Puts NAME before the path that starts at BUF + *AT, with a '/' after it
 * unless it is the path's last name (TAIL). */
static int path_prepend(char *buf, size_t *at, const char *name, size_t len, bool tail)
{
	size_t need = len + !tail;

	if (need > *at)
		return -ENAMETOOLONG;
	*at -= need;
	memcpy(buf + *at, name, len);
	if (!tail)
		buf[*at + len] = '/';
	return 0;
}

int un_lower_path(const struct un_export *ex, un_id id, char **out)
{
	struct un_lx_entry e;
	struct un_lx *lx;
	size_t cap = 4096, at = cap;
	char *buf;
	int err;

	*out = NULL;
	if (!ex->lower_ids || !un_id_is_lower(id) || !(lx = layer_of(ex, id)))
		return -ESTALE;
	buf = un_sys_malloc(cap + 1);
	if (!buf)
		return -ENOMEM;
	buf[cap] = '\0';
	err = un_lx_get(lx, id & OBJNUM_MAX, &e);
	for (int hops = 0; !err && e.parent != 0; hops++) {
		err = hops < PATH_HOPS_MAX
			  ? path_prepend(buf, &at, e.name, e.namelen, at == cap)
			  : -ELOOP;
		if (!err)
			err = un_lx_get(lx, e.parent, &e);
	}
	if (err) {
		free(buf);
		return err == -ENOENT ? -ESTALE : err;
	}
	memmove(buf, buf + at, cap - at + 1);
	*out = buf;
	return 0;
}
