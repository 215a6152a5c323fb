/* SPDX-License-Identifier: Apache-2.0 */
/* lindex.c - the layer identity index: a read-only layer's paths numbered
 * once, deterministically, in one LMDB file (lindex.h has the interface).
 *
 * Design notes
 * ------------
 * The file is one LMDB environment without a subdirectory, in four named
 * databases:
 *
 *   meta   "format" -> u32 LE (LX_FORMAT); "info" -> struct lx_meta
 *   names  parent objnum (u64 BE) + name bytes -> objnum (u64 LE)
 *   objs   objnum (u64 BE) -> struct lx_rec + name bytes
 *   inos   inode number (u64 BE) in the directory the index was built on ->
 *          struct lx_ino: the objnum of the inode's link leader and its type
 *
 * Keys are big-endian so LMDB's order is numeric; values little-endian.
 * Records are versioned with checked sizes (STYLE item 8); a file whose
 * format, meta or record this code does not know is -EPROTO, never parsed.
 * The root (objnum 1, parent 0, name "") has a record but no names entry.
 *
 * Rules
 *  1. A file at its final name is whole and never changes.  The walk
 *     writes a scratch file beside it, whose pages the puts' order leaves
 *     part empty; out_pack copies it in key order into a temp file, synced,
 *     which build_install renames into place before it syncs the directory.
 *     Both temps are removed whatever happens (un_lx_build).  So readers
 *     open it MDB_RDONLY | MDB_NOLOCK: there is no writer to lock out and no
 *     lock file to leave beside a layer.
 *  2. The walk is deterministic: depth first, each directory's names sorted
 *     bytewise (names_read), a path numbered when visited (walk_visit), the
 *     root 1.  It reads the layer only: no symlink is followed
 *     (AT_SYMLINK_NOFOLLOW, un_sys_open_beneath).
 *  3. A fresh build's lineage is the first 8 bytes (LE) of the listing hash,
 *     BLAKE2b-128 over each path's walk ordinal of its parent, name, type,
 *     and exactly the fields rule 4 compares for that type, plus its link
 *     leader's ordinal (listing_add).  Ordinals, not objnums, so an inherited
 *     build's listing hash equals a fresh build's of the same tree.
 *     Directories' sizes and mtimes are left out: they differ between
 *     filesystems and between copies.  Content digests are left out: the
 *     lineage does not depend on UN_LX_DIGESTS.  An index's id is its
 *     listing hash when fresh, else BLAKE2b-128 of FROM's id and its listing
 *     hash (build_info): a lineage forks when copies of a layer are updated
 *     apart, ids do not collide.
 *  4. An inherited build keeps FROM's lineage, generation + 1, and the
 *     objnum of a path FROM has under the same parent objnum when it is the
 *     same object (same_object): same type, and a directory always, a
 *     symlink the same target digest, a device, fifo or socket the same rdev,
 *     a regular file the same size and, when both indexes hold content
 *     digests, the same digest, otherwise the same mtime to the ns.
 *  5. Objnums are never reused in a lineage: a path that keeps none gets
 *     max + 1, max being FROM's max_objnum or the last one handed out
 *     (walk_number), and max_objnum only grows.  A path below a directory
 *     that got a new objnum (a file turned directory) has no counterpart in
 *     FROM (its parent key is new) and gets a new one too (walk_dir's OLD 0).
 *  6. names and objs agree: both entries of a path are put by put_entry;
 *     an objnum put twice (FROM damaged) fails the build (MDB_NOOVERWRITE).
 *  7. Link leaders: every path has its own objnum; a non-directory with
 *     nlink > 1 records the objnum of the first path of its (dev, ino) in
 *     walk order (links_leader).
 *  8. The inode table (inos) is the bridge from what the kernel shows to
 *     the index: every inode of the root's device, put once, by its link
 *     leader (put_ino); the root's inode number is in meta, so a reader
 *     can tell the directory the index was built on from another one at
 *     the same path.  It says nothing about a copy of the layer (other
 *     inode numbers): a copy gets an index of its own, which inherits.
 *     Objects on another device below the root (a mount inside the layer)
 *     are in names and objs but not in inos.
 *
 * Known limits: a directory deeper than LX_DEPTH_MAX below the root fails
 * the build (-ELOOP); each level holds a descriptor.  Corruption inside an
 * LMDB page is caught only as far as LMDB checks it (as for node.c's
 * table); a truncated file is caught before any page is read (lx_env_check).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <endian.h>
#include <fcntl.h>
#include <lmdb.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lindex.h"
#include "un_private.h"

#define LX_FORMAT	2u
#define LX_META_VERSION 2
#define LX_REC_VERSION	1
#define LX_META_DIGESTS 0x01
#define LX_MAP_SIZE	(64ull << 30) /* the writer's address space */
#define LX_TXN_PUTS	65536	      /* puts per write transaction */
#define LX_DEPTH_MAX	512
#define LX_DENTS_BUF	(32u << 10)
#define LX_READ_BUF	(256u << 10)
#define LX_LISTING_KEY	"union-nfsd layer index listing v1"
#define LX_ID_KEY	"union-nfsd layer index id v1"
#define LX_TMP_SUFFIX	".tmp-"
#define LX_KEY_MAX	(8 + UN_LX_NAME_MAX)

/* "info" in meta. */
struct lx_meta {
	uint8_t version; /* LX_META_VERSION */
	uint8_t flags;	 /* LX_META_DIGESTS */
	uint8_t reserved[2];
	uint32_t generation; /* LE, as the rest */
	uint64_t lineage;
	uint64_t max_objnum;
	uint64_t count;
	uint64_t from_lineage;
	uint32_t from_generation;
	uint32_t reserved2;
	uint8_t listing[UN_LX_DIGEST_BYTES];
	uint8_t id[UN_LX_DIGEST_BYTES];
	uint8_t from_id[UN_LX_DIGEST_BYTES];
	uint64_t root_ino; /* rule 8 */
};
_Static_assert(sizeof(struct lx_meta) == 104, "meta layout is on disk");

/* An inos value (rule 8). */
struct lx_ino {
	uint64_t objnum; /* the link leader's */
	uint32_t type;
	uint32_t reserved;
};
_Static_assert(sizeof(struct lx_ino) == 16, "inos layout is on disk");

/* The fixed part of an objs value; NAMELEN name bytes follow. */
struct lx_rec {
	uint8_t version; /* LX_REC_VERSION */
	uint8_t reserved;
	uint16_t namelen;
	uint32_t type;
	uint64_t parent;
	uint64_t leader;
	uint64_t size;
	int64_t mtime_sec;
	uint32_t mtime_nsec;
	uint32_t reserved2;
	uint64_t rdev;
	uint8_t digest[UN_LX_DIGEST_BYTES];
};
_Static_assert(sizeof(struct lx_rec) == 72, "record layout is on disk");

/* One block of the listing hash per path (rule 3), before its name. */
struct lx_listed {
	uint64_t parent_ord;
	uint64_t leader_ord;
	uint32_t type;
	uint32_t mtime_nsec;
	uint64_t size;
	int64_t mtime_sec;
	uint64_t rdev;
	uint8_t digest[UN_LX_DIGEST_BYTES];
	uint16_t namelen;
	uint8_t pad[6];
};
_Static_assert(sizeof(struct lx_listed) == 72, "the listing hash's input is fixed");

struct un_lx {
	MDB_env *env;
	MDB_dbi db_names, db_objs, db_inos;
	struct un_lx_info info;
};

/* ---- encoding ---- */

static void be64_put(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, sizeof(v));
}

static size_t names_key(uint8_t key[LX_KEY_MAX], uint64_t parent, const char *name,
			size_t len)
{
	be64_put(key, parent);
	memcpy(key + 8, name, len);
	return 8 + len;
}

/* LMDB's answers: a file it cannot read as an environment, or whose pages
 * do not hang together, is not an index (-EPROTO). */
static int lx_err(int rc)
{
	switch (rc) {
	case MDB_INVALID:
	case MDB_VERSION_MISMATCH:
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INCOMPATIBLE:
	case MDB_BAD_VALSIZE:
	case MDB_KEYEXIST:
		return -EPROTO;
	default:
		return un_mdb_err(rc);
	}
}

static void rec_encode(const struct un_lx_entry *e, uint8_t *buf, size_t *len)
{
	struct lx_rec r = {
	    .version = LX_REC_VERSION,
	    .namelen = htole16(e->namelen),
	    .type = htole32(e->type),
	    .parent = htole64(e->parent),
	    .leader = htole64(e->leader),
	    .size = htole64(e->size),
	    .mtime_sec = (int64_t)htole64((uint64_t)e->mtime_sec),
	    .mtime_nsec = htole32(e->mtime_nsec),
	    .rdev = htole64(e->rdev),
	};

	memcpy(r.digest, e->digest, sizeof(r.digest));
	memcpy(buf, &r, sizeof(r));
	memcpy(buf + sizeof(r), e->name, e->namelen);
	*len = sizeof(r) + e->namelen;
}

static int rec_decode(uint64_t objnum, const MDB_val *v, struct un_lx_entry *e)
{
	struct lx_rec r;

	if (v->mv_size < sizeof(r))
		return -EPROTO;
	memcpy(&r, v->mv_data, sizeof(r));
	e->namelen = le16toh(r.namelen);
	if (r.version != LX_REC_VERSION || e->namelen > UN_LX_NAME_MAX ||
	    v->mv_size != sizeof(r) + e->namelen)
		return -EPROTO;
	e->objnum = objnum;
	e->type = le32toh(r.type);
	e->parent = le64toh(r.parent);
	e->leader = le64toh(r.leader);
	e->size = le64toh(r.size);
	e->mtime_sec = (int64_t)le64toh((uint64_t)r.mtime_sec);
	e->mtime_nsec = le32toh(r.mtime_nsec);
	e->rdev = le64toh(r.rdev);
	memcpy(e->digest, r.digest, sizeof(e->digest));
	memcpy(e->name, (const uint8_t *)v->mv_data + sizeof(r), e->namelen);
	e->name[e->namelen] = '\0';
	return 0;
}

static int meta_decode(const MDB_val *v, struct un_lx_info *info)
{
	struct lx_meta m;

	if (v->mv_size != sizeof(m))
		return -EPROTO;
	memcpy(&m, v->mv_data, sizeof(m));
	if (m.version != LX_META_VERSION || (m.flags & ~LX_META_DIGESTS))
		return -EPROTO;
	info->lineage = le64toh(m.lineage);
	info->generation = le32toh(m.generation);
	info->max_objnum = le64toh(m.max_objnum);
	info->count = le64toh(m.count);
	info->digests = m.flags & LX_META_DIGESTS;
	info->from_lineage = le64toh(m.from_lineage);
	info->from_generation = le32toh(m.from_generation);
	memcpy(info->listing, m.listing, sizeof(info->listing));
	memcpy(info->id, m.id, sizeof(info->id));
	memcpy(info->from_id, m.from_id, sizeof(info->from_id));
	info->root_ino = le64toh(m.root_ino);
	return info->max_objnum < info->count || info->generation == 0 ? -EPROTO : 0;
}

static void meta_encode(const struct un_lx_info *info, struct lx_meta *m)
{
	*m = (struct lx_meta){
	    .version = LX_META_VERSION,
	    .flags = info->digests ? LX_META_DIGESTS : 0,
	    .generation = htole32(info->generation),
	    .lineage = htole64(info->lineage),
	    .max_objnum = htole64(info->max_objnum),
	    .count = htole64(info->count),
	    .from_lineage = htole64(info->from_lineage),
	    .from_generation = htole32(info->from_generation),
	    .root_ino = htole64(info->root_ino),
	};
	memcpy(m->listing, info->listing, sizeof(m->listing));
	memcpy(m->id, info->id, sizeof(m->id));
	memcpy(m->from_id, info->from_id, sizeof(m->from_id));
}

/* ---- reading ---- */

static int txn_read(struct un_lx *lx, MDB_txn **txn)
{
	int err = un_sys_fault(UN_SYS_MDB);

	return err ? -err : lx_err(mdb_txn_begin(lx->env, NULL, MDB_RDONLY, txn));
}

static int get_txn(struct un_lx *lx, MDB_txn *txn, uint64_t objnum,
		   struct un_lx_entry *out)
{
	uint8_t key[8];
	MDB_val k = {sizeof(key), key}, v;
	int err;

	be64_put(key, objnum);
	err = lx_err(mdb_get(txn, lx->db_objs, &k, &v));
	return err ? err : rec_decode(objnum, &v, out);
}

static int lookup_txn(struct un_lx *lx, MDB_txn *txn, uint64_t parent, const char *name,
		      struct un_lx_entry *out)
{
	uint8_t key[LX_KEY_MAX];
	size_t len = strlen(name);
	MDB_val k = {0, key}, v;
	uint64_t objnum;
	int err;

	if (len == 0 || len > UN_LX_NAME_MAX)
		return -ENOENT;
	k.mv_size = names_key(key, parent, name, len);
	err = lx_err(mdb_get(txn, lx->db_names, &k, &v));
	if (err)
		return err;
	if (v.mv_size != sizeof(objnum))
		return -EPROTO;
	memcpy(&objnum, v.mv_data, sizeof(objnum));
	err = get_txn(lx, txn, le64toh(objnum), out);
	/* A names entry without its record, or naming another path. */
	if (err == -ENOENT ||
	    (!err && (out->parent != parent || strcmp(out->name, name) != 0)))
		err = -EPROTO;
	return err;
}

int un_lx_get(struct un_lx *lx, uint64_t objnum, struct un_lx_entry *out)
{
	MDB_txn *txn;
	int err = txn_read(lx, &txn);

	if (err)
		return err;
	err = get_txn(lx, txn, objnum, out);
	mdb_txn_abort(txn);
	return err;
}

int un_lx_lookup(struct un_lx *lx, uint64_t parent, const char *name,
		 struct un_lx_entry *out)
{
	MDB_txn *txn;
	int err = txn_read(lx, &txn);

	if (err)
		return err;
	err = lookup_txn(lx, txn, parent, name, out);
	mdb_txn_abort(txn);
	return err;
}

int un_lx_ino(struct un_lx *lx, uint64_t ino, uint64_t *objnum, uint32_t *type)
{
	uint8_t key[8];
	MDB_val k = {sizeof(key), key}, v;
	struct lx_ino r;
	MDB_txn *txn;
	int err = txn_read(lx, &txn);

	if (err)
		return err;
	be64_put(key, ino);
	err = lx_err(mdb_get(txn, lx->db_inos, &k, &v));
	if (!err && v.mv_size != sizeof(r))
		err = -EPROTO;
	if (!err) {
		memcpy(&r, v.mv_data, sizeof(r));
		*objnum = le64toh(r.objnum);
		*type = le32toh(r.type);
	}
	mdb_txn_abort(txn);
	return err;
}

void un_lx_info(const struct un_lx *lx, struct un_lx_info *out)
{
	*out = lx->info;
}

/* A file shorter than the pages its meta names would fault when mapped
 * pages past its end are read: refuse it before any is. */
static int lx_env_check(MDB_env *env, const char *path)
{
	struct stat st;
	MDB_envinfo ei;
	MDB_stat ms;
	int err = un_sys_fstatat(AT_FDCWD, path, &st, 0);

	if (err)
		return err;
	mdb_env_info(env, &ei);
	mdb_env_stat(env, &ms);
	if ((uint64_t)st.st_size < ((uint64_t)ei.me_last_pgno + 1) * ms.ms_psize)
		return -EPROTO;
	return 0;
}

static int lx_meta_read(struct un_lx *lx, MDB_txn *txn)
{
	MDB_val k = {6, "format"}, v;
	MDB_dbi meta;
	uint32_t format;
	int err;

	if ((err = lx_err(mdb_dbi_open(txn, "meta", 0, &meta))) ||
	    (err = lx_err(mdb_dbi_open(txn, "names", 0, &lx->db_names))) ||
	    (err = lx_err(mdb_dbi_open(txn, "objs", 0, &lx->db_objs))) ||
	    (err = lx_err(mdb_dbi_open(txn, "inos", 0, &lx->db_inos))) ||
	    (err = lx_err(mdb_get(txn, meta, &k, &v))))
		return err == -ENOENT ? -EPROTO : err;
	if (v.mv_size != sizeof(format))
		return -EPROTO;
	memcpy(&format, v.mv_data, sizeof(format));
	if (le32toh(format) != LX_FORMAT)
		return -EPROTO;
	k = (MDB_val){4, "info"};
	err = lx_err(mdb_get(txn, meta, &k, &v));
	if (err)
		return err == -ENOENT ? -EPROTO : err;
	return meta_decode(&v, &lx->info);
}

static int lx_env_open(struct un_lx *lx, const char *path)
{
	struct stat st;
	int rc = un_sys_fstatat(AT_FDCWD, path, &st, 0);

	if (rc)
		return rc;
	if (!S_ISREG(st.st_mode) || st.st_size == 0)
		return -EPROTO;
	rc = mdb_env_create(&lx->env);
	if (rc)
		return lx_err(rc);
	/* The map covers the file, not the writer's address space: an index
	 * per layer of a stack is mapped at once. */
	if ((rc = mdb_env_set_maxdbs(lx->env, 4)) ||
	    (rc = mdb_env_set_mapsize(lx->env, (size_t)st.st_size)))
		return lx_err(rc);
	/* Rule 1: an immutable file, read without locks. */
	rc = mdb_env_open(lx->env, path,
			  MDB_RDONLY | MDB_NOSUBDIR | MDB_NOTLS | MDB_NOLOCK, 0);
	/* LMDB says ENOENT for a file too short to hold its header. */
	return rc == ENOENT ? -EPROTO : lx_err(rc);
}

int un_lx_open(const char *path, struct un_lx **out)
{
	struct un_lx *lx;
	MDB_txn *txn = NULL;
	int err = -ENOMEM;

	*out = NULL;
	lx = un_sys_calloc(1, sizeof(*lx));
	if (!lx)
		return err;
	err = lx_env_open(lx, path);
	if (err)
		goto fail;
	err = lx_env_check(lx->env, path);
	if (err)
		goto fail;
	err = txn_read(lx, &txn);
	if (err)
		goto fail;
	err = lx_meta_read(lx, txn);
	if (err)
		goto fail;
	/* The dbi handles outlive a transaction that commits. */
	err = lx_err(mdb_txn_commit(txn));
	txn = NULL;
	if (err)
		goto fail;
	*out = lx;
	return 0;
fail:
	if (txn)
		mdb_txn_abort(txn);
	un_lx_close(lx);
	return err;
}

void un_lx_close(struct un_lx *lx)
{
	if (!lx)
		return;
	if (lx->env)
		mdb_env_close(lx->env);
	free(lx);
}

/* ---- building: the state of one build ---- */

/* (dev, ino) -> first path of an inode with several links (rule 7); open
 * addressing, objnum 0 marks a free slot. */
struct lx_link {
	uint64_t dev, ino, objnum, ordinal;
};

struct lx_links {
	struct lx_link *slot;
	size_t cap, n; /* cap a power of two, n < cap / 2 */
};

struct lx_build {
	MDB_env *env;	  /* the file being written */
	MDB_env *scratch; /* the walk's, once packing (out_pack) */
	MDB_txn *txn;
	MDB_dbi db_meta, db_names, db_objs, db_inos;
	size_t puts; /* in txn */
	struct un_lx *from;
	MDB_txn *from_txn;
	bool digests;		     /* this build takes them */
	bool both_digests;	     /* ... and FROM holds them */
	uint64_t next;		     /* the next new objnum (rule 5) */
	uint64_t ordinals;	     /* paths visited */
	uint64_t max;		     /* the highest objnum put */
	uint64_t root_dev, root_ino; /* rule 8 */
	crypto_generichash_state listing;
	struct lx_links links;
	uint8_t *readbuf; /* file contents for digests */
	char where[512];  /* the path being visited, for messages */
	size_t wherelen;
	const char *out; /* the index file, for messages */
	char *err;
	size_t errlen;
	bool failed; /* ERR holds the first failure */
};

/* A path being visited: its entry and what the walk needs beside it. */
struct lx_visit {
	struct un_lx_entry e;
	uint64_t ordinal, parent_ord, leader_ord;
	uint64_t old; /* its objnum in FROM, when it kept it; else 0 */
	nlink_t nlink;
	dev_t dev;
	ino_t ino;
};

/* Records the first failure in the message buffer, naming the path. */
static int build_fail(struct lx_build *b, int rc, const char *what)
{
	if (!b->failed && b->err && b->errlen)
		snprintf(b->err, b->errlen, "layer index %s: /%s: %s: %s", b->out,
			 b->where, what, strerror(-rc));
	b->failed = true;
	return rc;
}

/* Appends "/NAME" (or NAME at the root) to the message path; returns the
 * length to restore.  A path too long for messages is cut, never refused. */
static size_t where_push(struct lx_build *b, const char *name)
{
	size_t old = b->wherelen;
	int n = snprintf(b->where + old, sizeof(b->where) - old, "%s%s", old ? "/" : "",
			 name);

	b->wherelen = n < 0 ? old : old + (size_t)n;
	if (b->wherelen >= sizeof(b->where))
		b->wherelen = sizeof(b->where) - 1;
	return old;
}

static void where_pop(struct lx_build *b, size_t len)
{
	b->wherelen = len;
	b->where[len] = '\0';
}

static uint64_t link_hash(uint64_t dev, uint64_t ino)
{
	return (ino * 0x9e3779b97f4a7c15ull) ^ (dev * 0xc2b2ae3d27d4eb4full);
}

static struct lx_link *links_slot(struct lx_links *l, uint64_t dev, uint64_t ino)
{
	size_t i = link_hash(dev, ino) & (l->cap - 1);

	while (l->slot[i].objnum && (l->slot[i].dev != dev || l->slot[i].ino != ino))
		i = (i + 1) & (l->cap - 1);
	return &l->slot[i];
}

static int links_grow(struct lx_links *l)
{
	struct lx_links bigger = {.cap = l->cap ? l->cap * 2 : 1024, .n = l->n};

	bigger.slot = un_sys_calloc(bigger.cap, sizeof(*bigger.slot));
	if (!bigger.slot)
		return -ENOMEM;
	for (size_t i = 0; i < l->cap; i++)
		if (l->slot[i].objnum)
			*links_slot(&bigger, l->slot[i].dev, l->slot[i].ino) = l->slot[i];
	free(l->slot);
	*l = bigger;
	return 0;
}

/* Sets V's leader (rule 7): the first path of its inode, or itself. */
static int links_leader(struct lx_build *b, struct lx_visit *v)
{
	struct lx_link *s;
	int err;

	v->e.leader = v->e.objnum;
	v->leader_ord = v->ordinal;
	if (v->e.type == S_IFDIR || v->nlink < 2)
		return 0;
	if (b->links.n + 1 > b->links.cap / 2 && (err = links_grow(&b->links)))
		return err;
	s = links_slot(&b->links, v->dev, v->ino);
	if (s->objnum) {
		v->e.leader = s->objnum;
		v->leader_ord = s->ordinal;
		return 0;
	}
	*s = (struct lx_link){v->dev, v->ino, v->e.objnum, v->ordinal};
	b->links.n++;
	return 0;
}

/* ---- building: the output file ---- */

static int txn_write(struct lx_build *b)
{
	int err = un_sys_fault(UN_SYS_MDB);

	return err ? -err : lx_err(mdb_txn_begin(b->env, NULL, 0, &b->txn));
}

static int txn_commit(struct lx_build *b)
{
	int err = un_sys_fault(UN_SYS_MDB);
	MDB_txn *txn = b->txn;

	b->txn = NULL;
	b->puts = 0;
	if (err) {
		mdb_txn_abort(txn);
		return -err;
	}
	return lx_err(mdb_txn_commit(txn));
}

/* One put, in a transaction renewed every LX_TXN_PUTS puts: a temp file
 * needs no atomicity of its own, and LMDB's write transactions stay small. */
static int put(struct lx_build *b, MDB_dbi dbi, MDB_val *k, MDB_val *v, unsigned flags)
{
	int err;

	if (b->puts >= LX_TXN_PUTS && ((err = txn_commit(b)) || (err = txn_write(b))))
		return err;
	b->puts++;
	return lx_err(mdb_put(b->txn, dbi, k, v, flags));
}

/* Puts both entries of a path (rule 6); the root has no names entry. */
static int put_entry(struct lx_build *b, const struct un_lx_entry *e)
{
	uint8_t key[LX_KEY_MAX], okey[8], rec[sizeof(struct lx_rec) + UN_LX_NAME_MAX];
	uint64_t objnum = htole64(e->objnum);
	MDB_val k = {sizeof(okey), okey}, v = {0, rec};
	int err;

	be64_put(okey, e->objnum);
	rec_encode(e, rec, &v.mv_size);
	err = put(b, b->db_objs, &k, &v, MDB_NOOVERWRITE);
	if (err || !e->parent)
		return err;
	k = (MDB_val){names_key(key, e->parent, e->name, e->namelen), key};
	v = (MDB_val){sizeof(objnum), &objnum};
	return put(b, b->db_names, &k, &v, MDB_NOOVERWRITE);
}

/* Puts V's inode in inos (rule 8): once per inode, by its leader. */
static int put_ino(struct lx_build *b, const struct lx_visit *v)
{
	uint8_t key[8];
	struct lx_ino r = {.objnum = htole64(v->e.leader), .type = htole32(v->e.type)};
	MDB_val k = {sizeof(key), key}, val = {sizeof(r), &r};

	if (v->dev != b->root_dev || v->e.leader != v->e.objnum)
		return 0;
	be64_put(key, v->ino);
	return put(b, b->db_inos, &k, &val, MDB_NOOVERWRITE);
}

static int out_open(struct lx_build *b, const char *tmp)
{
	int rc = mdb_env_create(&b->env);

	if (rc)
		return lx_err(rc);
	if ((rc = mdb_env_set_maxdbs(b->env, 4)) ||
	    (rc = mdb_env_set_mapsize(b->env, LX_MAP_SIZE)))
		return lx_err(rc);
	/* A private temp file: no lock file; one sync at the end (rule 1). */
	rc = mdb_env_open(b->env, tmp, MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0600);
	if (rc)
		return lx_err(rc);
	return txn_write(b);
}

static int out_dbs(struct lx_build *b)
{
	uint32_t format = htole32(LX_FORMAT);
	MDB_val k = {6, "format"}, v = {sizeof(format), &format};
	int err;

	if ((err = lx_err(mdb_dbi_open(b->txn, "meta", MDB_CREATE, &b->db_meta))) ||
	    (err = lx_err(mdb_dbi_open(b->txn, "names", MDB_CREATE, &b->db_names))) ||
	    (err = lx_err(mdb_dbi_open(b->txn, "objs", MDB_CREATE, &b->db_objs))) ||
	    (err = lx_err(mdb_dbi_open(b->txn, "inos", MDB_CREATE, &b->db_inos))))
		return err;
	return put(b, b->db_meta, &k, &v, 0);
}

/* An inherited build's id: FROM's id and the listing, hashed (rule 3). */
static void id_inherited(const uint8_t from_id[UN_LX_DIGEST_BYTES],
			 const uint8_t listing[UN_LX_DIGEST_BYTES],
			 uint8_t id[UN_LX_DIGEST_BYTES])
{
	crypto_generichash_state h;

	crypto_generichash_init(&h, (const uint8_t *)LX_ID_KEY, sizeof(LX_ID_KEY) - 1,
				UN_LX_DIGEST_BYTES);
	crypto_generichash_update(&h, from_id, UN_LX_DIGEST_BYTES);
	crypto_generichash_update(&h, listing, UN_LX_DIGEST_BYTES);
	crypto_generichash_final(&h, id, UN_LX_DIGEST_BYTES);
}

/* The info of the index built: rule 3's lineage, or rule 4's. */
static void build_info(struct lx_build *b, struct un_lx_info *info)
{
	const struct un_lx_info *from = b->from ? &b->from->info : NULL;

	memset(info, 0, sizeof(*info));
	crypto_generichash_final(&b->listing, info->listing, sizeof(info->listing));
	info->count = b->ordinals;
	info->max_objnum = b->max;
	info->digests = b->digests;
	info->root_ino = b->root_ino;
	if (from) {
		info->lineage = from->lineage;
		info->generation = from->generation + 1;
		info->from_lineage = from->lineage;
		info->from_generation = from->generation;
		if (from->max_objnum > info->max_objnum)
			info->max_objnum = from->max_objnum;
		memcpy(info->from_id, from->id, sizeof(info->from_id));
		id_inherited(from->id, info->listing, info->id);
		return;
	}
	memcpy(&info->lineage, info->listing, sizeof(info->lineage));
	info->lineage = le64toh(info->lineage);
	info->generation = 1;
	memcpy(info->id, info->listing, sizeof(info->id));
}

/* Writes meta and commits the scratch file (never synced: only its packed
 * copy is). */
static int out_finish(struct lx_build *b)
{
	struct un_lx_info info;
	struct lx_meta m;
	MDB_val k = {4, "info"}, v = {sizeof(m), &m};
	int err;

	build_info(b, &info);
	meta_encode(&info, &m);
	err = put(b, b->db_meta, &k, &v, 0);
	return err ? err : txn_commit(b);
}

/* Copies database NAME of the scratch file (read in RTXN) to the output in
 * key order.  MDB_APPEND fills every page, where the walk's puts, out of key
 * order (names always, objs in an inherited build), leave pages a third
 * empty or more. */
static int pack_db(struct lx_build *b, MDB_txn *rtxn, const char *name)
{
	MDB_cursor *c;
	MDB_dbi from, to;
	MDB_val k, v;
	int rc, err = 0;

	if ((rc = mdb_dbi_open(rtxn, name, 0, &from)) ||
	    (rc = mdb_dbi_open(b->txn, name, MDB_CREATE, &to)) ||
	    (rc = mdb_cursor_open(rtxn, from, &c)))
		return lx_err(rc);
	while (!err) {
		rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
		if (rc) {
			err = rc == MDB_NOTFOUND ? 0 : lx_err(rc);
			break;
		}
		err = put(b, to, &k, &v, MDB_APPEND);
	}
	mdb_cursor_close(c);
	return err;
}

/* Writes the packed copy of the scratch file to TMP and syncs it (rule 1). */
static int out_pack(struct lx_build *b, const char *tmp)
{
	static const char *const dbs[] = {"meta", "names", "objs", "inos"};
	MDB_txn *rtxn;
	int err;

	b->scratch = b->env;
	b->env = NULL;
	err = lx_err(mdb_txn_begin(b->scratch, NULL, MDB_RDONLY, &rtxn));
	if (err)
		return err;
	err = out_open(b, tmp);
	for (size_t i = 0; !err && i < sizeof(dbs) / sizeof(dbs[0]); i++)
		err = pack_db(b, rtxn, dbs[i]);
	mdb_txn_abort(rtxn);
	if (!err)
		err = txn_commit(b);
	if (!err)
		err = -un_sys_fault(UN_SYS_SYNC);
	if (!err)
		err = lx_err(mdb_env_sync(b->env, 1));
	return err;
}

/* Renames TMP to OUT and syncs the directory, so the name is durable. */
static int build_install(const char *tmp, const char *out)
{
	const char *slash = strrchr(out, '/');
	char *dir = NULL;
	int fd, err;

	err = un_sys_renameat2(AT_FDCWD, tmp, AT_FDCWD, out, 0);
	if (err)
		return err;
	if (slash && (dir = un_sys_malloc((size_t)(slash - out) + 2)))
		snprintf(dir, (size_t)(slash - out) + 2, "%.*s",
			 (int)(slash - out + (slash == out)), out);
	if (slash && !dir)
		return -ENOMEM;
	fd = un_sys_openat(AT_FDCWD, dir ? dir : ".", O_RDONLY | O_DIRECTORY, 0);
	free(dir);
	if (fd < 0)
		return fd;
	err = un_sys_fsync(fd);
	un_sys_close(fd);
	return err;
}

/* ---- building: what one path is ---- */

static void digest_of(const void *data, size_t len, uint8_t out[UN_LX_DIGEST_BYTES])
{
	crypto_generichash(out, UN_LX_DIGEST_BYTES, data, len, NULL, 0);
}

static int observe_symlink(int dirfd, const char *name, struct un_lx_entry *e)
{
	char target[PATH_MAX];
	ssize_t n = un_sys_readlinkat(dirfd, name, target, sizeof(target));

	if (n < 0)
		return (int)n;
	digest_of(target, (size_t)n, e->digest);
	e->size = (uint64_t)n;
	return 0;
}

static int observe_content(struct lx_build *b, int dirfd, const char *name,
			   struct un_lx_entry *e)
{
	crypto_generichash_state h;
	off_t off = 0;
	ssize_t n;
	int fd = un_sys_open_beneath(dirfd, name, O_RDONLY);

	if (fd < 0)
		return fd;
	crypto_generichash_init(&h, NULL, 0, UN_LX_DIGEST_BYTES);
	while ((n = un_sys_pread(fd, b->readbuf, LX_READ_BUF, off)) > 0) {
		crypto_generichash_update(&h, b->readbuf, (size_t)n);
		off += n;
	}
	crypto_generichash_final(&h, e->digest, UN_LX_DIGEST_BYTES);
	un_sys_close(fd);
	return n < 0 ? (int)n : 0;
}

/* Fills V from NAME in DIRFD (the root: NAME ""), as rule 4 will compare it. */
static int observe(struct lx_build *b, int dirfd, const char *name, struct lx_visit *v)
{
	struct stat st;
	int err = un_sys_fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW);

	if (err)
		return build_fail(b, err, "stat");
	v->e.namelen = (uint16_t)strlen(name);
	memcpy(v->e.name, name, v->e.namelen + 1u);
	v->e.type = st.st_mode & S_IFMT;
	v->e.size = (uint64_t)st.st_size;
	v->e.mtime_sec = st.st_mtim.tv_sec;
	v->e.mtime_nsec = (uint32_t)st.st_mtim.tv_nsec;
	v->e.rdev = st.st_rdev;
	v->nlink = st.st_nlink;
	v->dev = st.st_dev;
	v->ino = st.st_ino;
	if (v->e.type == S_IFLNK && (err = observe_symlink(dirfd, name, &v->e)))
		return build_fail(b, err, "readlink");
	if (v->e.type == S_IFREG && b->digests &&
	    (err = observe_content(b, dirfd, name, &v->e)))
		return build_fail(b, err, "read");
	return 0;
}

/* Rule 4. */
static bool same_object(const struct lx_build *b, const struct un_lx_entry *old,
			const struct un_lx_entry *now)
{
	if (old->type != now->type)
		return false;
	switch (now->type) {
	case S_IFDIR:
		return true;
	case S_IFLNK:
		return memcmp(old->digest, now->digest, UN_LX_DIGEST_BYTES) == 0;
	case S_IFREG:
		if (old->size != now->size)
			return false;
		if (b->both_digests)
			return memcmp(old->digest, now->digest, UN_LX_DIGEST_BYTES) == 0;
		return old->mtime_sec == now->mtime_sec &&
		       old->mtime_nsec == now->mtime_nsec;
	default:
		return old->rdev == now->rdev;
	}
}

/* Gives V its objnum: FROM's for the same object under OLD_PARENT, else a
 * new one (rules 4 and 5). */
static int walk_number(struct lx_build *b, uint64_t old_parent, struct lx_visit *v)
{
	struct un_lx_entry old;
	int err = -ENOENT;

	if (b->from && old_parent)
		err = lookup_txn(b->from, b->from_txn, old_parent, v->e.name, &old);
	if (err && err != -ENOENT)
		return build_fail(b, err, "earlier index");
	if (!err && same_object(b, &old, &v->e)) {
		v->e.objnum = v->old = old.objnum;
	} else {
		v->e.objnum = b->next++;
		v->old = 0;
	}
	if (v->e.objnum > b->max)
		b->max = v->e.objnum;
	return 0;
}

/* Rule 3: what the listing hash takes of V. */
static void listing_add(struct lx_build *b, const struct lx_visit *v)
{
	const struct un_lx_entry *e = &v->e;
	struct lx_listed l = {
	    .parent_ord = htole64(v->parent_ord),
	    .leader_ord = htole64(v->leader_ord),
	    .type = htole32(e->type),
	    .namelen = htole16(e->namelen),
	};

	if (e->type == S_IFREG) {
		l.size = htole64(e->size);
		l.mtime_sec = (int64_t)htole64((uint64_t)e->mtime_sec);
		l.mtime_nsec = htole32(e->mtime_nsec);
	} else if (e->type == S_IFLNK) {
		memcpy(l.digest, e->digest, sizeof(l.digest));
	} else if (e->type != S_IFDIR) {
		l.rdev = htole64(e->rdev);
	}
	crypto_generichash_update(&b->listing, (const uint8_t *)&l, sizeof(l));
	crypto_generichash_update(&b->listing, (const uint8_t *)e->name, e->namelen);
}

/* ---- building: the walk ---- */

/* The names of a directory, sorted bytewise (rule 2). */
struct lx_names {
	char *blob; /* NUL-terminated names, end to end */
	size_t len, cap;
	char **sorted;
	size_t n;
};

static int names_add(struct lx_names *ns, const char *name)
{
	size_t len = strlen(name) + 1;
	char *p;

	if (ns->len + len > ns->cap) {
		size_t cap = ns->cap ? ns->cap * 2 : 4096;

		while (cap < ns->len + len)
			cap *= 2;
		p = un_sys_realloc(ns->blob, cap);
		if (!p)
			return -ENOMEM;
		ns->blob = p;
		ns->cap = cap;
	}
	memcpy(ns->blob + ns->len, name, len);
	ns->len += len;
	ns->n++;
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int names_sort(struct lx_names *ns)
{
	char *p = ns->blob;

	ns->sorted = un_sys_malloc((ns->n ? ns->n : 1) * sizeof(*ns->sorted));
	if (!ns->sorted)
		return -ENOMEM;
	for (size_t i = 0; i < ns->n; i++, p += strlen(p) + 1)
		ns->sorted[i] = p;
	qsort(ns->sorted, ns->n, sizeof(*ns->sorted), cmp_names);
	return 0;
}

static bool dot_or_dotdot(const char *n)
{
	return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]));
}

static int names_read(int fd, struct lx_names *ns)
{
	struct dirent64 *d;
	ssize_t n;
	int err = 0;
	char *buf = un_sys_malloc(LX_DENTS_BUF);

	if (!buf)
		return -ENOMEM;
	while (!err && (n = un_sys_getdents(fd, buf, LX_DENTS_BUF)) > 0) {
		for (ssize_t off = 0; off < n && !err; off += d->d_reclen) {
			d = (struct dirent64 *)(buf + off);
			if (!dot_or_dotdot(d->d_name))
				err = names_add(ns, d->d_name);
		}
	}
	free(buf);
	if (!err && n < 0)
		err = (int)n;
	return err ? err : names_sort(ns);
}

static void names_free(struct lx_names *ns)
{
	free(ns->blob);
	free(ns->sorted);
}

static int walk_dir(struct lx_build *b, int fd, const struct lx_visit *dir, int depth);

/* Visits NAME of directory DIR (open as DIRFD): numbers it, puts it, and
 * walks it if it is a directory. */
static int walk_visit(struct lx_build *b, int dirfd, const struct lx_visit *dir,
		      const char *name, int depth)
{
	struct lx_visit v = {.parent_ord = dir->ordinal};
	size_t mark = where_push(b, name);
	int fd, err;

	v.e.parent = dir->e.objnum;
	err = observe(b, dirfd, name, &v);
	if (err)
		goto out;
	v.ordinal = ++b->ordinals;
	if ((err = walk_number(b, dir->old, &v)) || (err = links_leader(b, &v)))
		goto out;
	listing_add(b, &v);
	err = put_entry(b, &v.e);
	if (!err)
		err = put_ino(b, &v);
	if (err || v.e.type != S_IFDIR) {
		err = err ? build_fail(b, err, "index write") : 0;
		goto out;
	}
	err = fd = un_sys_open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY);
	if (fd < 0) {
		build_fail(b, err, "open");
		goto out;
	}
	err = walk_dir(b, fd, &v, depth + 1);
	un_sys_close(fd);
out:
	where_pop(b, mark);
	return err;
}

/* Walks directory DIR, open as FD, names sorted (rule 2). */
static int walk_dir(struct lx_build *b, int fd, const struct lx_visit *dir, int depth)
{
	struct lx_names ns = {0};
	int err = -ELOOP;

	if (depth > LX_DEPTH_MAX)
		return build_fail(b, err, "deeper than the index walks");
	err = names_read(fd, &ns);
	if (err)
		build_fail(b, err, "read dir");
	for (size_t i = 0; !err && i < ns.n; i++)
		err = walk_visit(b, fd, dir, ns.sorted[i], depth);
	names_free(&ns);
	return err;
}

static int walk_root(struct lx_build *b, int root_fd)
{
	struct lx_visit root = {.e.objnum = UN_LX_ROOT};
	int err = observe(b, root_fd, "", &root);

	if (err)
		return err;
	if (root.e.type != S_IFDIR)
		return build_fail(b, -ENOTDIR, "layer root");
	root.ordinal = ++b->ordinals;
	root.old = b->from ? UN_LX_ROOT : 0;
	root.e.leader = UN_LX_ROOT;
	b->max = UN_LX_ROOT;
	b->root_dev = root.dev;
	b->root_ino = root.ino;
	listing_add(b, &root);
	err = put_entry(b, &root.e);
	if (!err)
		err = put_ino(b, &root);
	if (err)
		return build_fail(b, err, "index write");
	return walk_dir(b, root_fd, &root, 0);
}

/* ---- building: the whole ---- */

static int build_begin(struct lx_build *b, struct un_lx *from, unsigned flags)
{
	int err;

	b->from = from;
	b->digests = flags & UN_LX_DIGESTS;
	b->both_digests = b->digests && from && from->info.digests;
	b->next = from ? from->info.max_objnum + 1 : UN_LX_ROOT + 1;
	crypto_generichash_init(&b->listing, (const uint8_t *)LX_LISTING_KEY,
				sizeof(LX_LISTING_KEY) - 1, UN_LX_DIGEST_BYTES);
	if (b->digests && !(b->readbuf = un_sys_malloc(LX_READ_BUF)))
		return -ENOMEM;
	if (from && (err = txn_read(from, &b->from_txn)))
		return err;
	return 0;
}

/* Frees what B holds; may be called again. */
static void build_end(struct lx_build *b)
{
	if (b->txn)
		mdb_txn_abort(b->txn);
	if (b->env)
		mdb_env_close(b->env);
	if (b->scratch)
		mdb_env_close(b->scratch);
	if (b->from_txn)
		mdb_txn_abort(b->from_txn);
	free(b->links.slot);
	free(b->readbuf);
	b->txn = b->from_txn = NULL;
	b->env = b->scratch = NULL;
	b->links.slot = NULL;
	b->readbuf = NULL;
}

/* OUT + ".tmp-" + 16 random hex digits (to free). */
static char *tmp_name(const char *out)
{
	size_t len = strlen(out) + sizeof(LX_TMP_SUFFIX) + 16;
	uint8_t r[8];
	char *tmp = un_sys_malloc(len);

	if (!tmp)
		return NULL;
	randombytes_buf(r, sizeof(r));
	snprintf(tmp, len, "%s" LX_TMP_SUFFIX "%02x%02x%02x%02x%02x%02x%02x%02x", out,
		 r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
	return tmp;
}

int un_lx_build(int root_fd, struct un_lx *from, const char *out_path, unsigned flags,
		char *err, size_t errlen)
{
	struct lx_build *b = NULL;
	char *scratch = NULL, *tmp = NULL;
	int rc = -EIO;

	if (sodium_init() < 0)
		return rc;
	rc = -ENOMEM;
	if (!(b = un_sys_calloc(1, sizeof(*b))) || !(scratch = tmp_name(out_path)) ||
	    !(tmp = tmp_name(out_path)))
		goto out;
	b->out = out_path;
	b->err = err;
	b->errlen = errlen;
	rc = build_begin(b, from, flags);
	if (!rc)
		rc = out_open(b, scratch);
	if (!rc)
		rc = out_dbs(b);
	if (!rc)
		rc = walk_root(b, root_fd);
	if (!rc)
		rc = out_finish(b);
	if (!rc)
		rc = out_pack(b, tmp);
	if (!rc)
		build_end(b);
	if (!rc)
		rc = build_install(tmp, out_path);
out:
	if (rc == -EIO && scratch && un_sys_disk_full(scratch))
		rc = -ENOSPC;
	/* Failures of the walk named their path; the others name the file. */
	if (rc && (!b || !b->failed) && err && errlen)
		snprintf(err, errlen, "layer index %s: %s", out_path, strerror(-rc));
	if (b && rc)
		build_end(b);
	if (scratch)
		un_sys_unlinkat(AT_FDCWD, scratch, 0);
	if (rc && tmp)
		un_sys_unlinkat(AT_FDCWD, tmp, 0);
	free(scratch);
	free(tmp);
	free(b);
	return rc;
}
