/* SPDX-License-Identifier: Apache-2.0 */
/* node.c - the node table: one persistent id for every object a client has
 * been shown.
 *
 * Design notes
 * ------------
 * The table lives in the state dir's LMDB environment, in eight named
 * databases:
 *
 *   meta   "format" -> u32 LE (NODE_FORMAT), "next" -> u64 LE: the next id,
 *          "roots" -> u32 LE 1: every root is linked (roots.c rule 3)
 *   nodes  id (u64 BE) -> struct node_rec + name bytes
 *   names  parent id (u64 BE) + name bytes -> id (u64 LE)
 *   links  root id (u64 BE) + dev (u64 BE) + ino (u64 BE) -> id (u64 LE): the
 *          node shared by the names of an inode with several links
 *          (UN_LINKS_SHARED), and the targets of LINK
 *   groups root id + dev + ino, as links -> fileid (u64 LE): the fileid a
 *          name of a lower inode with several links takes in a writable
 *          union when it is first seen (UN_LINKS_GROUP); 0 once a copy-up
 *          parted that group
 *   parted fileid (u64 BE) -> nothing: the groups a copy-up parted
 *   aliases id (u64 BE) -> parent id (u64 BE) + name bytes, several values per
 *          key (MDB_DUPSORT): every name of a node that LINK gave a second
 *          name, so that removing the name its record holds can move the
 *          record to another one instead of forgetting the node
 *   intents parent id (u64 BE) + name bytes -> struct intent_rec + name
 *          bytes + a record: a RENAME or LINK about to give that name to a
 *          node, committed before the change on disk (invariant 14), or a
 *          REMOVE that took it; each kept, with the record of the node the
 *          change took the name from, until the change is durable
 *          (invariant 15)
 *
 * Keys are big-endian so LMDB's byte order is numeric order; values are
 * little-endian.  A record is a versioned struct with a checked size
 * (STYLE item 8); a record of an unknown version is treated as a node that is
 * gone (-ESTALE), never parsed.  The links and groups keys start with the
 * export's root id: exports that share a lower layer share its inodes, never
 * their nodes.  (Tables written before the root id was in the key hold 16-byte
 * links keys; they are never read, so such a name gets a node of its own.)
 *
 * An export's root is a node with parent 0, named "root:<its own id in
 * hex>" (un_node_root_create), or "export:<export id in hex>" in tables
 * written before roots.c linked roots, so every export has its own root id
 * and ids are unique across exports.  roots.c says which root is whose.
 *
 * A node remembers (dev, ino) of its object's top-most layer instance when it
 * was first seen, and after a copy-up the upper instance with the lower one
 * as its origin (record version 2; version 1 records, without an origin, are
 * still read).  An observation matches a record when the types agree and the
 * record's (dev, ino) or origin is one of the observed instances (a directory
 * has one per layer it is merged from, so a directory that gains an upper
 * part keeps its id), or when the record is an export root (pinned:
 * reconfiguring the layers of an export does not renumber it).  The
 * "(dev, ino)" of a lower instance is its key in its layer's index
 * (layerid.c rule 6: lineage and objnum, which a copy or a new version of
 * the layer keeps), of anything else its raw pair.  An observation offers
 * both the key and the raw pair of each instance (obs_is), since records
 * written before the indexes hold the raw pair; new records store the key.
 *
 * A node is what a file handle names, and its fileid is its own id (record
 * version 3 stores the fileid; older records report their id), with one
 * exception, the names of a lower file with several links in a writable
 * union.  Those are one file to every client until a copy-up: one fileid,
 * nlink > 1, as overlayfs shows them.  But a copy-up (overlayfs without its
 * index) breaks the link: the name written is copied up alone, the others
 * keep the lower file.  A WRITE carries only a handle, so the server must
 * know from the handle which name to copy up: each name is a node of its
 * own (its own handle, its own path), and all report the fileid of their
 * group (groups; the link leader's lower id, lowerid.c rule 7, on a server
 * given a key file, so every gateway reports the same; else the id of the
 * node first seen).  The copy-up of one name
 * parts the group (un_node_part): the name copied up keeps its node and its
 * fileid (the writer's handle and inode number stay), and the other names
 * no longer match their records (parted): their handles are stale and a
 * lookup gives them new nodes, which form a new group.  This is the one case where the
 * fileid of a name changes, forced by the on-disk format: without an index,
 * the link is gone.  In a read-only union, and in the upper layer, the names
 * of one inode share one node (links), as they can never part.
 *
 * Changes of the union keep the table in step (dir.c calls them after the
 * change on disk): a rename moves the names entry and the record's
 * (parent, name) of the node, so a directory's subtree moves with one record
 * written - the records below it name their parent by id and are not
 * touched; a removed or overwritten name loses its names entry and its node
 * its record, so the old id is stale even if the inode number comes back.
 *
 * Durability: every id is in a committed transaction before the engine hands
 * it out (the write transaction of a miss commits before un_lookup returns),
 * so a process crash loses none, and a commit's pages are on disk when it
 * returns (MDB_NOMETASYNC: only its meta page waits for the next commit or
 * flush, state.c), so an OS crash loses at most the last commit.
 *
 * Writes per change: a CREATE commits one write transaction (the miss of
 * its new name), a REMOVE one (un_node_remove: the names entry, the record,
 * the links entry), a LOOKUP of a known name none (invariant 4).  A commit
 * costs an fdatasync and about five other system calls (pwrites of its
 * pages, then of the meta page) whatever it holds, so concurrent changes
 * share commits: every write transaction is a job of the writer (below),
 * which runs the jobs queued meanwhile as one batch with one commit, and
 * dir.c waits for a create's or a remove's job only after it dropped the
 * directory's lock, so changes in one directory do not run one commit at a
 * time (on a sync export only after the upper's fsync, whose run commits
 * the queue: sync.c, un_node_jobs_drain).  No transaction rewrites a record it leaves
 * unchanged, and a read transaction decides before a write one begins.
 *
 * Invariants
 *  1. Ids are never reused: "next" only grows, and it grows in the same
 *     write transaction that stores the record of the id it handed out
 *     (node_create).
 *  2. names and nodes agree: names(P, N) -> I is written in the same
 *     transaction as the record of I, which was created for (P, N) or, for a
 *     hard link, for another name of the same inode (node_create).
 *  3. A replaced object gets a new id: when the object under (P, N) no longer
 *     matches the record names(P, N) points to, a new id is allocated and
 *     names(P, N) is repointed to it; the old record stays, so the old id
 *     resolves to its path and un_resolve finds the mismatch (-ESTALE, or
 *     the old object read only when a retired layer still holds it: its
 *     record's key names it there, retire.c).
 *  4. Lookups never write when the name is known: the read transaction
 *     decides (node_match), unless a change is pending (13); only a miss
 *     opens a write transaction, which decides again under LMDB's
 *     single-writer lock, so two threads that miss the same name get the
 *     same id.
 *  5. Every record's parent chain ends at an export root (parent 0): records
 *     are only created for a name in a directory that already has an id.
 *     un_node_path still bounds the walk, as the table is data on disk.
 *  6. A batch (un_node_ids_batch) uses one read and at most one write
 *     transaction, so a page of a listing costs one commit at most.
 *  7. A node whose name was removed or overwritten through the union has no
 *     record, unless aliases holds another name of it, to which its record
 *     then points (node_unname).  Ids are still never reused (1).
 *  8. aliases holds either nothing or at least two names for a node, one of
 *     them its record's (node_unname, un_node_link, un_node_rename).
 *  9. A fileid names one file: a group's fileid is reported by the names of
 *     one lower inode only, and by its copied-up name once parted - the
 *     other names match their records only while their fileid is not in
 *     parted (group_check), and un_node_part puts it there and unmaps the
 *     inode in groups in one transaction, so no new name joins it.  A
 *     fileid is a node id, or the lower id of the group's link leader,
 *     which no other inode's node takes (lowerid.c rule 7), so fileids are
 *     unique across exports too.
 * 10. un_node_assign is the only writer that never changes the node or
 *     fileid an existing (parent, name) maps to: it adds names, and
 *     repoints one only when that name's object was replaced, which changes
 *     the directory too.  Every other write transaction (in_write_txn)
 *     bumps st->node_epoch after it ends, so a reader that noted the epoch
 *     before reading the table knows its answer stands while the epoch does
 *     (readdir.c keeps the nodes of a listing's entries on that ground).
 * 11. The writer runs jobs in the order they were queued, one batch at a
 *     time, and a batch commits before any of its jobs is answered: a
 *     change queued under its directory's lock reaches the table after
 *     every change that held the lock before it, and its id is committed
 *     before it leaves the engine, as with one transaction a change.
 * 12. One thread at a time holds the writer's turn (wq_running): the one
 *     that claimed it for a job no batch has taken, a sync run that found
 *     none held and jobs queued (un_node_jobs_drain), or the owner of the
 *     first job queued when a batch ended whose owner waits for it, to whom
 *     it was handed; with none waiting nobody holds it, and the next owner
 *     to wait claims it.
 * 13. A read transaction decides a lookup only while no job that may
 *     repoint or forget a name (a bumping one, 10) is queued and
 *     uncommitted (st->node_pending, reads_decide); else the lookup is a
 *     job of the writer, run after them (11).  A remove is on disk before
 *     its job commits (dir.c waits after its lock), and a file made again
 *     at its name may have the inode number of the one removed (ext4 and
 *     xfs hand a freed inode out again at once): a read in between would
 *     find the old record matching and answer the old id, which the remove
 *     then forgets, so the new file's first handle would be stale at once
 *     and the next lookup would give it another id.
 * 14. A live object keeps its node id whatever a crash cuts short.  A
 *     create, remove or rmdir changes the disk first and the table after:
 *     cut between them, a created name gets its node at its first lookup
 *     (no handle named it before) and a removed one leaves a record whose
 *     path no longer resolves (-ESTALE, right for an object that is gone).
 *     A rename or a link would leave a live object under a name the table
 *     does not know, so they write an intent first (un_node_intent,
 *     committed before the disk changes): a lookup that finds no node for
 *     a name, or one whose record does not match, adopts the intent of
 *     that name when the intent's node matches the object seen there
 *     (intent_adopt: the rename or link is applied as un_node_rename or
 *     un_node_link would, in the same transaction), and intent.c adopts
 *     the intents a crash left when the export opens, so an old handle
 *     resolves before anyone looks the new name up.  Only the intent's own
 *     object is ever adopted, so a leftover intent is harmless.  A copy-up
 *     is written ahead by its own design (copyup.c invariant 5).
 * 15. The table is never durably ahead of the disk without the means to
 *     take it back.  A commit becomes durable at the next flush, which may
 *     come from any other change before this change's directories are
 *     fsynced; a power cut then keeps the table's move or forgetting and
 *     loses the directory change it followed.  So the intent outlives its
 *     change's commit: a rename's, a link's or a removal's job keeps it,
 *     notes in it the record of the node it took the name from (a target
 *     renamed or linked over, a node removed: victim_note, in the same
 *     transaction), and a removal writes its own there; dir.c hands it to
 *     un_node_intent_done once the change is durable, and the writer's
 *     next batch deletes it.  An intent of a sync call is itself flushed
 *     before the upper changes (dir.c, table_durable).  At the next start
 *     intent.c takes every leftover change back (un_node_intent_undo,
 *     newest first: the move back, the victim's name given back) and then
 *     looks each name up, oldest first, which re-applies what the layers
 *     show done: the table follows the disk either way.  Two changes of
 *     one name under way at once (a remove of the name a rename just
 *     made, a rename onto the name a remove just freed) share its intent:
 *     the newer one carries the older one's undo (intent_put).  A node a
 *     change forgot gets its record back only from the lookup that finds
 *     an object matching it (victim_revive), never by the undo itself: an
 *     object made since may have its inode number.
 * 16. A LOOKUP's new node of a lower id is answered before its commit
 *     (assign_ahead): such a handle stands without the table (lowerid.c
 *     rule 5: the index gives its path), so no crash can make it stale
 *     while its object stands, and the lookup costs no fdatasync.  Only
 *     where the writer is sure to give that id: no links group (whose
 *     fileid is the group's), no record holding the id, no intent of the
 *     name (ahead_decides); a name of a shared node missed in the links
 *     index too, so no other name holds its inode's node yet, and all of
 *     them take the id of the inode's objnum.  Its job is queued with nobody waiting; it
 *     commits with the next batch that any caller runs, the syncer's drain
 *     (sync.c rule 5) at the latest, or, once AHEAD_MAX wait, with the
 *     batch of the lookup that found no room, and batch_end frees it.  A
 *     later change of the name is queued after it (11), and whoever reads
 *     a path from the table commits them first (un_node_path: a copy-up
 *     finds its parents so, a rename its ancestors).
 *
 * Known limits: identity by raw (dev, ino) (the upper; a lower object its
 * index does not know; every record written before the indexes) trusts the
 * layers' inode numbers; an inode number reused after a delete, with an
 * equal type, is taken for the old object, and such a record goes stale
 * when its layer is replaced by a copy.  A file that gains a second link
 * after it was first seen keeps one id per name until LINK (which knows
 * both) records it in links; a lower file that gains one while served keeps
 * its fileid for the names seen before (the names seen after it share
 * another), as does a group of names recorded before groups existed.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <ctype.h>
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <sodium.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "un_private.h"

#define NODE_FORMAT	 1u
#define NODE_REC_V1	 1    /* without an origin */
#define NODE_REC_V2	 2    /* without a fileid */
#define NODE_REC_VERSION 3    /* the version written */
#define NODE_FIRST_ID	 2    /* 0 is UN_ID_NONE; 1 is kept back */
#define NODE_DEPTH_MAX	 4096 /* bounds un_node_path on a damaged table */

/* The fixed part of a record; NAMELEN name bytes follow.  Version 1 ends
 * after pad (40 bytes), version 2 after the origin (56 bytes), version 3
 * after the fileid (64 bytes). */
struct node_rec {
	uint8_t version; /* NODE_REC_V1 or NODE_REC_VERSION */
	uint8_t reserved[3];
	uint32_t type;	  /* S_IFMT bits, LE */
	uint64_t parent;  /* LE */
	uint64_t dev;	  /* LE: the top-most instance when first seen or copied up */
	uint64_t ino;	  /* LE */
	uint16_t namelen; /* LE */
	uint8_t pad[6];
	uint64_t odev;	 /* LE, version 2: the instance copied up from; 0 0: none */
	uint64_t oino;	 /* LE */
	uint64_t fileid; /* LE, version 3: what getattr reports (see above) */
};
#define NODE_REC_V1_SIZE 40
#define NODE_REC_V2_SIZE 56
_Static_assert(offsetof(struct node_rec, odev) == NODE_REC_V1_SIZE,
	       "node record version 1 layout is on disk");
_Static_assert(offsetof(struct node_rec, fileid) == NODE_REC_V2_SIZE,
	       "node record version 2 layout is on disk");
_Static_assert(sizeof(struct node_rec) == 64, "node record layout is on disk");

/* A record as read, in host order; NAME points into the read transaction. */
struct rec_view {
	un_id parent;
	un_id fileid;
	mode_t type;
	struct un_devino di, origin; /* origin 0 0: none */
	const char *name;
	uint16_t namelen;
};

static void be64_put(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, sizeof(v));
}

static uint64_t le64_get(const MDB_val *v)
{
	uint64_t x;

	memcpy(&x, v->mv_data, sizeof(x));
	return le64toh(x);
}

static int txn_begin(struct un_state *st, bool write, MDB_txn **txn)
{
	int err = un_sys_fault(UN_SYS_MDB);

	if (err)
		return -err;
	return un_mdb_err(mdb_txn_begin(st->env, NULL, write ? 0 : MDB_RDONLY, txn));
}

static int txn_commit(MDB_txn *txn)
{
	int err = un_sys_fault(UN_SYS_MDB);

	if (err) {
		mdb_txn_abort(txn);
		return -err;
	}
	return un_mdb_err(mdb_txn_commit(txn));
}

/* The writer's commit, counted (stats.c), and for the syncer, which
 * flushes a table that committed since its last flush (sync.c rule 5),
 * whether it succeeded or not (a failed commit may have written pages). */
static int timed_commit(struct un_state *st, MDB_txn *txn)
{
	uint64_t t0 = un_now_ns();
	int err = txn_commit(txn);

	atomic_fetch_add(&st->commits, 1);
	un_count_timed(&st->sh->counters.commits, &st->sh->counters.commit_ns, t0);
	return err;
}

/* ---- records ---- */

/* Parses record V of node ID into *OUT (whose NAME points into V):
 * -ESTALE for a record of an unknown version or size. */
static int rec_parse(const MDB_val *v, un_id id, struct rec_view *out)
{
	struct node_rec r;
	size_t fixed;

	if (v->mv_size < NODE_REC_V1_SIZE)
		return -ESTALE;
	memset(&r, 0, sizeof(r));
	memcpy(&r, v->mv_data, NODE_REC_V1_SIZE);
	fixed = r.version == NODE_REC_V1   ? NODE_REC_V1_SIZE
		: r.version == NODE_REC_V2 ? NODE_REC_V2_SIZE
					   : sizeof(r);
	if (r.version < NODE_REC_V1 || r.version > NODE_REC_VERSION ||
	    v->mv_size != fixed + le16toh(r.namelen) || le16toh(r.namelen) > UN_NAME_MAX)
		return -ESTALE;
	memcpy(&r, v->mv_data, fixed);
	out->parent = le64toh(r.parent);
	out->fileid = r.version == NODE_REC_VERSION ? le64toh(r.fileid) : id;
	out->type = (mode_t)le32toh(r.type);
	out->di.dev = le64toh(r.dev);
	out->di.ino = le64toh(r.ino);
	out->origin.dev = le64toh(r.odev);
	out->origin.ino = le64toh(r.oino);
	out->namelen = le16toh(r.namelen);
	out->name = (const char *)v->mv_data + fixed;
	return 0;
}

static int rec_get(struct un_state *st, MDB_txn *txn, un_id id, struct rec_view *out)
{
	uint8_t key[8];
	MDB_val k = {sizeof(key), key}, v;
	int err;

	be64_put(key, id);
	err = un_mdb_err(mdb_get(txn, st->db_nodes, &k, &v));
	if (err)
		return err == -ENOENT ? -ESTALE : err;
	return rec_parse(&v, id, out);
}

/* Writes record ID from R (whose NAME must not point into the table: a put
 * may move what it points to). */
static int rec_write(struct un_state *st, MDB_txn *txn, un_id id,
		     const struct rec_view *rv)
{
	uint8_t key[8], buf[sizeof(struct node_rec) + UN_NAME_MAX];
	MDB_val k = {sizeof(key), key}, v = {sizeof(struct node_rec) + rv->namelen, buf};
	struct node_rec r = {
	    .version = NODE_REC_VERSION,
	    .type = htole32((uint32_t)rv->type),
	    .parent = htole64(rv->parent),
	    .dev = htole64(rv->di.dev),
	    .ino = htole64(rv->di.ino),
	    .namelen = htole16(rv->namelen),
	    .odev = htole64(rv->origin.dev),
	    .oino = htole64(rv->origin.ino),
	    .fileid = htole64(rv->fileid),
	};

	be64_put(key, id);
	memcpy(buf, &r, sizeof(r));
	memcpy(buf + sizeof(r), rv->name, rv->namelen);
	return un_mdb_err(mdb_put(txn, st->db_nodes, &k, &v, 0));
}

static int rec_put(struct un_state *st, MDB_txn *txn, un_id id, un_id fileid,
		   const struct un_node_obs *obs)
{
	struct rec_view rv = {
	    .parent = obs->parent,
	    .fileid = fileid,
	    .type = obs->type,
	    .di = obs->inst[0],
	    .name = obs->name,
	    .namelen = (uint16_t)obs->namelen,
	};

	return rec_write(st, txn, id, &rv);
}

static bool di_eq(struct un_devino a, struct un_devino b)
{
	return a.dev == b.dev && a.ino == b.ino;
}

/* Is DI instance I of OBS, by its key or by its raw (dev, ino)?  Records
 * written before the layer indexes hold the raw pair; newer ones the key
 * (layerid.c rule 6), so both are offered and no handle goes stale when
 * the indexes come in. */
static bool obs_is(const struct un_node_obs *obs, size_t i, struct un_devino di)
{
	return di_eq(di, obs->inst[i]) || (obs->raw && di_eq(di, obs->raw[i]));
}

/* The raw (dev, ino) of OBS's top instance: the links and groups keys.
 * They stay raw: an inode's names are seen in one layer as it is served,
 * so they agree on it; a layer replaced by a copy only costs the names
 * first seen after it their sharing (a node, or a group fileid, of their
 * own), never a handle.  Copy-up origins are raw too: they matter only
 * while the lower instance the copy was made from is still observed. */
static struct un_devino obs_raw_top(const struct un_node_obs *obs)
{
	return obs->raw ? obs->raw[0] : obs->inst[0];
}

static bool rec_matches(const struct rec_view *r, const struct un_node_obs *obs)
{
	static const struct un_devino none;

	if (r->type != obs->type)
		return false;
	if (obs->pinned)
		return true;
	for (size_t i = 0; i < obs->ninst; i++)
		if (obs_is(obs, i, r->di) ||
		    (!di_eq(r->origin, none) && obs_is(obs, i, r->origin)))
			return true;
	return false;
}

/* ---- the name, link and group indexes ---- */

#define INODE_KEY 24 /* root id + dev + ino */

static size_t name_key(uint8_t *key, const struct un_node_obs *obs)
{
	be64_put(key, obs->parent);
	memcpy(key + 8, obs->name, obs->namelen);
	return 8 + obs->namelen;
}

/* The key of inode DI of export ROOT in links and groups. */
static void inode_key(uint8_t key[INODE_KEY], un_id root, struct un_devino di)
{
	be64_put(key, root);
	be64_put(key + 8, di.dev);
	be64_put(key + 16, di.ino);
}

/* Gets the id DB maps KEY to: 0, -ENOENT, or -errno. */
static int index_get(MDB_txn *txn, MDB_dbi db, uint8_t *key, size_t klen, un_id *id)
{
	MDB_val k = {klen, key}, v;
	int err = un_mdb_err(mdb_get(txn, db, &k, &v));

	if (err)
		return err;
	if (v.mv_size != sizeof(uint64_t))
		return -ENOENT; /* damaged: treated as absent, rewritten on create */
	*id = le64_get(&v);
	return 0;
}

static int index_put(MDB_txn *txn, MDB_dbi db, uint8_t *key, size_t klen, un_id id)
{
	uint64_t le = htole64(id);
	MDB_val k = {klen, key}, v = {sizeof(le), &le};

	return un_mdb_err(mdb_put(txn, db, &k, &v, 0));
}

/* What a match found: the node and the fileid it reports. */
struct found {
	un_id id, fileid;
};

/* Tries index DB at KEY: 0 with *F and the record *R (valid in TXN) when it
 * names a record matching OBS. */
static int try_index(struct un_state *st, MDB_txn *txn, MDB_dbi db, uint8_t *key,
		     size_t klen, const struct un_node_obs *obs, struct found *f,
		     struct rec_view *r)
{
	un_id cand;
	int err;

	err = index_get(txn, db, key, klen, &cand);
	if (err)
		return err;
	err = rec_get(st, txn, cand, r);
	if (err)
		return err == -ESTALE ? -ENOENT : err;
	if (!rec_matches(r, obs))
		return -ENOENT;
	*f = (struct found){cand, r->fileid};
	return 0;
}

static bool rec_named(const struct rec_view *r, const struct un_node_name *nm)
{
	return r->parent == nm->parent && r->namelen == nm->len &&
	       !memcmp(r->name, nm->name, nm->len);
}

/* The record R (fileid F->fileid) that the name of a lower file with several
 * links matched still stands for that name (invariant 9), or -ENOENT:
 *   - while R is the lower file's, unless a copy-up parted its group;
 *   - once R was copied up (it matched by its origin: a listing built before
 *     the copy-up, or a lookup during it), if it is this name's: the name
 *     copied up keeps its node, no other name may take it. */
static int group_check(struct un_state *st, MDB_txn *txn, const struct un_node_obs *obs,
		       const struct found *f, const struct rec_view *r)
{
	struct un_node_name nm = {obs->parent, obs->name, obs->namelen};
	uint8_t key[8];
	MDB_val k = {sizeof(key), key}, v;
	int err;

	if (!obs_is(obs, 0, r->di))
		return rec_named(r, &nm) ? 0 : -ENOENT;
	be64_put(key, f->fileid);
	err = un_mdb_err(mdb_get(txn, st->db_parted, &k, &v));
	return err == -ENOENT ? 0 : err ? err : -ENOENT;
}

/* Finds the node of OBS in TXN: 0, -ENOENT (unknown or replaced), or -errno;
 * *F is set on success only. */
static int node_match(struct un_state *st, MDB_txn *txn, const struct un_node_obs *obs,
		      struct found *f)
{
	uint8_t key[8 + UN_NAME_MAX], lkey[INODE_KEY];
	struct rec_view r;
	struct found m;
	int err;

	err = try_index(st, txn, st->db_names, key, name_key(key, obs), obs, &m, &r);
	if (!err && obs->links == UN_LINKS_GROUP)
		err = group_check(st, txn, obs, &m, &r);
	if (err == -ENOENT && obs->links == UN_LINKS_SHARED) {
		inode_key(lkey, obs->root, obs_raw_top(obs));
		err = try_index(st, txn, st->db_links, lkey, sizeof(lkey), obs, &m, &r);
	}
	if (!err)
		*f = m;
	return err;
}

static int id_alloc(struct un_state *st, MDB_txn *txn, un_id *id)
{
	MDB_val k = {4, "next"}, v;
	uint64_t next;
	int err;

	err = un_mdb_err(mdb_get(txn, st->db_meta, &k, &v));
	if (err)
		return err == -ENOENT ? -EIO : err;
	if (v.mv_size != sizeof(next))
		return -EIO;
	next = le64_get(&v);
	if (next < NODE_FIRST_ID || un_id_is_lower(next)) /* lowerid.c: never met */
		return -EIO;
	*id = next;
	next = htole64(next + 1);
	v = (MDB_val){sizeof(next), &next};
	return un_mdb_err(mdb_put(txn, st->db_meta, &k, &v, 0));
}

static int rec_root(struct un_state *st, MDB_txn *txn, un_id parent, un_id *root);

/* Says once that lower id ID, which OBS (not a root) would take, is held
 * by a node of another export: two exports' tags collide (lowerid.c rule
 * 4). */
static void clash_note(struct un_state *st, MDB_txn *txn, const struct un_node_obs *obs,
		       un_id id)
{
	struct rec_view r;
	un_id root;

	if (obs->root == UN_ID_NONE || rec_get(st, txn, id, &r) ||
	    rec_root(st, txn, r.parent, &root) || root == obs->root ||
	    atomic_exchange(&st->sh->lower_clash_said, true))
		return;
	un_notice(st,
		  "lower id %016" PRIx64 " is held by a node of export root %016" PRIx64
		  ": the tags of two exports collide, and such objects get this "
		  "server's own ids (said once)",
		  id, root);
}

/* Whether a record holds ID, whatever it says: 0, -ENOENT, or -errno. */
static int id_held(struct un_state *st, MDB_txn *txn, un_id id)
{
	uint8_t key[8];
	MDB_val k = {sizeof(key), key}, v;

	be64_put(key, id);
	return un_mdb_err(mdb_get(txn, st->db_nodes, &k, &v));
}

/* The id of a new node OBS: PREFER (a lower id, lowerid.c rule 4) when it
 * is not UN_ID_NONE and no record holds it, else the counter's next. */
static int id_choose(struct un_state *st, MDB_txn *txn, const struct un_node_obs *obs,
		     un_id prefer, un_id *id)
{
	int err;

	if (prefer == UN_ID_NONE)
		return id_alloc(st, txn, id);
	err = id_held(st, txn, prefer);
	if (err == -ENOENT) {
		*id = prefer;
		return 0;
	}
	if (!err)
		clash_note(st, txn, obs, prefer);
	return err ? err : id_alloc(st, txn, id);
}

/* The fileid a new name of group OBS joins: the group's; with no group
 * entry at all, the fileid of the node a read-only run shared among the
 * inode's names (links), so that names it showed keep theirs, else the
 * link leader's lower id (lowerid.c rule 7: the same on every gateway,
 * whichever name it saw first), else NID; after a part (an entry of 0),
 * NID, which starts a new group. */
static int group_join(struct un_state *st, MDB_txn *txn, const struct un_node_obs *obs,
		      un_id nid, un_id *fileid)
{
	uint8_t key[INODE_KEY];
	struct rec_view r;
	struct found f;
	un_id g;
	int err;

	inode_key(key, obs->root, obs_raw_top(obs));
	err = index_get(txn, st->db_groups, key, sizeof(key), &g);
	if (!err && g != UN_ID_NONE) {
		*fileid = g;
		return 0;
	}
	if (err && err != -ENOENT)
		return err;
	*fileid = err == -ENOENT ? un_lower_fileid_of(obs) : UN_ID_NONE;
	if (*fileid == UN_ID_NONE)
		*fileid = nid;
	if (err == -ENOENT) {
		err = try_index(st, txn, st->db_links, key, sizeof(key), obs, &f, &r);
		if (!err)
			*fileid = f.fileid;
		if (err && err != -ENOENT)
			return err;
	}
	return index_put(txn, st->db_groups, key, sizeof(key), *fileid);
}

/* Creates a node for OBS in write transaction TXN (invariants 1 to 3, 9). */
static int node_create(struct un_state *st, MDB_txn *txn, const struct un_node_obs *obs,
		       struct found *f)
{
	uint8_t key[8 + UN_NAME_MAX], lkey[INODE_KEY];
	un_id nid, fileid;
	int err;

	err = id_choose(st, txn, obs, un_lower_id_of(obs), &nid);
	if (err)
		return err;
	fileid = nid;
	if (obs->links == UN_LINKS_GROUP)
		err = group_join(st, txn, obs, nid, &fileid);
	if (!err)
		err = rec_put(st, txn, nid, fileid, obs);
	if (!err)
		err = index_put(txn, st->db_names, key, name_key(key, obs), nid);
	if (!err && obs->links == UN_LINKS_SHARED) {
		inode_key(lkey, obs->root, obs_raw_top(obs));
		err = index_put(txn, st->db_links, lkey, sizeof(lkey), nid);
	}
	if (!err)
		*f = (struct found){nid, fileid};
	return err;
}

static void obs_check(const struct un_node_obs *obs)
{
	(void)obs;
	assert(obs->ninst >= 1 && obs->namelen >= 1 && obs->namelen <= UN_NAME_MAX);
}

/* ---- the API of node.c ---- */

/* Lookups' nodes queued ahead at most (invariant 16): past it, a lookup
 * waits for a batch that commits them all with its own. */
#define AHEAD_MAX 64

static int roots_mark_txn(struct un_state *st, MDB_txn *txn, const void *arg);
static int write_job(struct un_state *st, struct un_node_job *j);
static int call_txn(struct un_state *st, MDB_txn *txn, struct un_node_job *j);

/* The first id of a new table: a table opened from the main state starts
 * at a random one (state.c rule 7: a union's table made anew after a reset
 * hands out no id of the one it replaces). */
static uint64_t first_id(const struct un_state *st)
{
	uint64_t r;

	if (!st->main)
		return NODE_FIRST_ID;
	randombytes_buf(&r, sizeof(r));
	return NODE_FIRST_ID + (r & ((UINT64_C(1) << 61) - 1));
}

int un_node_init(struct un_state *st, MDB_txn *txn)
{
	MDB_val k = {6, "format"}, v;
	uint32_t fmt = htole32(NODE_FORMAT);
	uint64_t next = htole64(first_id(st));
	int err;

	if ((err = un_mdb_err(mdb_dbi_open(txn, "meta", MDB_CREATE, &st->db_meta))) ||
	    (err = un_mdb_err(mdb_dbi_open(txn, "nodes", MDB_CREATE, &st->db_nodes))) ||
	    (err = un_mdb_err(mdb_dbi_open(txn, "names", MDB_CREATE, &st->db_names))) ||
	    (err = un_mdb_err(mdb_dbi_open(txn, "links", MDB_CREATE, &st->db_links))) ||
	    (err = un_mdb_err(mdb_dbi_open(txn, "groups", MDB_CREATE, &st->db_groups))) ||
	    (err = un_mdb_err(mdb_dbi_open(txn, "parted", MDB_CREATE, &st->db_parted))) ||
	    (err = un_mdb_err(mdb_dbi_open(txn, "aliases", MDB_CREATE | MDB_DUPSORT,
					   &st->db_aliases))) ||
	    (err = un_mdb_err(mdb_dbi_open(txn, "intents", MDB_CREATE, &st->db_intents))))
		return err;
	err = un_mdb_err(mdb_get(txn, st->db_meta, &k, &v));
	if (!err) /* a table of another format is refused, never reinterpreted */
		return v.mv_size == sizeof(fmt) && !memcmp(v.mv_data, &fmt, sizeof(fmt))
			   ? 0
			   : -EPROTO;
	if (err != -ENOENT)
		return err;
	v = (MDB_val){sizeof(fmt), &fmt};
	err = un_mdb_err(mdb_put(txn, st->db_meta, &k, &v, 0));
	if (err)
		return err;
	k = (MDB_val){4, "next"};
	v = (MDB_val){sizeof(next), &next};
	err = un_mdb_err(mdb_put(txn, st->db_meta, &k, &v, 0));
	return err ? err
		   : roots_mark_txn(st, txn, NULL); /* a new table has no old roots */
}

/* ---- export roots (roots.c) ---- */

struct root_args {
	const struct un_node_obs *obs;
	un_id prefer, *id;
};

/* Names the new root by its own id: ids only grow, so a new root's names
 * key lands next to the last one's, whoever its export is (roots.c). */
static int root_create_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	const struct root_args *a = arg;
	struct un_node_obs o = *a->obs;
	uint8_t key[8 + UN_NAME_MAX];
	char name[32];
	un_id nid;
	int err;

	err = id_choose(st, txn, a->obs, a->prefer, &nid);
	if (err)
		return err;
	o.root = o.parent = UN_ID_NONE;
	o.name = name;
	o.namelen = (size_t)snprintf(name, sizeof(name), UN_ROOT_NAME_FMT, nid);
	err = rec_put(st, txn, nid, nid, &o);
	if (!err)
		err = index_put(txn, st->db_names, key, name_key(key, &o), nid);
	if (!err)
		*a->id = nid;
	return err;
}

int un_node_root_create(struct un_state *st, const struct un_node_obs *obs, un_id prefer,
			un_id *id)
{
	struct root_args a = {obs, prefer, id};
	struct un_node_job j = {.fn = call_txn, .call = root_create_txn, .arg = &a};

	return write_job(st, &j);
}

/* The export id in NAME when it is an old root's name, "export:" and 8 hex
 * digits; 0 when not. */
static uint32_t legacy_root_export(const MDB_val *k)
{
	char hex[9];
	char *end;
	unsigned long v;

	if (k->mv_size != 8 + UN_LEGACY_ROOT_LEN ||
	    memcmp((const uint8_t *)k->mv_data + 8, "export:", 7))
		return 0;
	memcpy(hex, (const uint8_t *)k->mv_data + 15, 8);
	hex[8] = '\0';
	v = strtoul(hex, &end, 16);
	return *end == '\0' && isxdigit((unsigned char)hex[0]) ? (uint32_t)v : 0;
}

static bool roots_marked(struct un_state *st, MDB_txn *txn)
{
	MDB_val k = {5, "roots"}, v;

	return mdb_get(txn, st->db_meta, &k, &v) == 0;
}

int un_node_roots_legacy(struct un_state *st, un_node_root_fn *fn, void *arg)
{
	uint8_t zero[8] = {0};
	MDB_val k = {sizeof(zero), zero}, v;
	MDB_cursor *c = NULL;
	MDB_txn *txn;
	uint32_t xid;
	int rc, err;

	err = txn_begin(st, false, &txn);
	if (err)
		return err;
	if (roots_marked(st, txn)) {
		mdb_txn_abort(txn);
		return 1;
	}
	err = un_mdb_err(mdb_cursor_open(txn, st->db_names, &c));
	for (rc = err ? MDB_NOTFOUND : mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
	     !err && !rc && k.mv_size >= 8 && !memcmp(k.mv_data, zero, 8);
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
		if ((xid = legacy_root_export(&k)) && v.mv_size == 8)
			err = fn(arg, xid, le64_get(&v));
	if (!err && rc && rc != MDB_NOTFOUND)
		err = un_mdb_err(rc);
	if (c)
		mdb_cursor_close(c);
	mdb_txn_abort(txn);
	return err;
}

static int roots_mark_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	uint32_t one = htole32(1);
	MDB_val k = {5, "roots"}, v = {sizeof(one), &one};

	(void)arg;
	return un_mdb_err(mdb_put(txn, st->db_meta, &k, &v, 0));
}

int un_node_roots_mark(struct un_state *st)
{
	struct un_node_job j = {.fn = call_txn, .call = roots_mark_txn};

	return write_job(st, &j);
}

int un_node_get_or_create(struct un_state *st, const struct un_node_obs *obs, un_id *out)
{
	return un_node_assign(st, obs, 1, out, NULL);
}

int un_node_ids_batch(struct un_state *st, const struct un_node_obs *obs, size_t n,
		      un_id *ids)
{
	return un_node_assign(st, obs, n, ids, NULL);
}

/* Fills F from a read transaction (id 0 for a miss); *misses gets their
 * count. */
static int batch_read(struct un_state *st, const struct un_node_obs *obs, size_t n,
		      struct found *f, size_t *misses)
{
	MDB_txn *txn;
	int err;

	err = txn_begin(st, false, &txn);
	if (err)
		return err;
	*misses = 0;
	for (size_t i = 0; i < n && !err; i++) {
		obs_check(&obs[i]);
		f[i].id = UN_ID_NONE;
		err = node_match(st, txn, &obs[i], &f[i]);
		if (err == -ENOENT) {
			(*misses)++;
			err = 0;
		}
	}
	mdb_txn_abort(txn);
	return err;
}

struct assign_args {
	const struct un_node_obs *obs;
	size_t n;
	struct found *f;
};

static int intent_adopt(struct un_state *st, MDB_txn *txn, const struct un_node_obs *obs,
			struct found *f);

/* Assigns the misses (ids 0) of A->f (invariants 4, 6, 14); A->f is
 * scratch space of the caller's, left half-filled on failure. */
static int assign_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	const struct assign_args *a = arg;
	int err = 0;

	for (size_t i = 0; i < a->n && !err; i++) {
		if (a->f[i].id != UN_ID_NONE)
			continue;
		obs_check(&a->obs[i]);
		err = node_match(st, txn, &a->obs[i], &a->f[i]);
		if (err == -ENOENT)
			err = intent_adopt(st, txn, &a->obs[i], &a->f[i]);
		if (err == -ENOENT)
			err = node_create(st, txn, &a->obs[i], &a->f[i]);
	}
	return err;
}

/* assign_txn in a committed write transaction.  The commit comes before any
 * id leaves the engine: a handle handed out names a node a crash of the
 * process cannot lose. */
static int batch_write(struct un_state *st, const struct un_node_obs *obs, size_t n,
		       struct found *f)
{
	struct assign_args a = {obs, n, f};
	struct un_node_job j = {.fn = call_txn, .call = assign_txn, .arg = &a};

	return write_job(st, &j);
}

/* True when a read transaction may decide a lookup (invariant 13): no
 * change that may repoint or forget a name is queued and uncommitted.  Read
 * after the caller observed the layers and before its read transaction
 * begins: a change whose entry the observation saw was queued before its
 * name's lock was dropped, so it is counted here or already committed. */
static bool reads_decide(struct un_state *st)
{
	return atomic_load(&st->node_pending) == 0;
}

static int assign_ahead(struct un_state *st, const struct un_node_obs *obs,
			struct found *f);

int un_node_assign(struct un_state *st, const struct un_node_obs *obs, size_t n,
		   un_id *ids, un_id *fileids)
{
	struct found *tmp;
	size_t misses = n; /* all to the writer, after the changes queued */
	int err = 0;

	tmp = un_sys_calloc(n ? n : 1, sizeof(*tmp));
	if (!tmp)
		return -ENOMEM;
	if (reads_decide(st))
		err = batch_read(st, obs, n, tmp, &misses);
	if (!err && misses == 1 && n == 1 && assign_ahead(st, obs, tmp) == 0)
		misses = 0;
	if (!err && misses)
		err = batch_write(st, obs, n, tmp);
	for (size_t i = 0; !err && i < n;
	     i++) { /* out-parameters change only on success */
		if (ids)
			ids[i] = tmp[i].id;
		if (fileids)
			fileids[i] = tmp[i].fileid;
	}
	free(tmp);
	return err;
}

static void hop_fill(struct un_node_hop *h, un_id id, const struct rec_view *r)
{
	h->id = id;
	h->parent = r->parent;
	h->type = r->type;
	h->di = r->di;
	h->fileid = r->fileid;
	h->namelen = r->namelen;
	memcpy(h->name, r->name, r->namelen);
	h->name[r->namelen] = '\0';
}

static void hops_reverse(struct un_node_hop *h, size_t n)
{
	struct un_node_hop t;

	for (size_t i = 0; i < n / 2; i++) {
		t = h[i];
		h[i] = h[n - 1 - i];
		h[n - 1 - i] = t;
	}
}

/* Appends the hops from ID up to its root to *H (grown as needed). */
static int path_collect(struct un_state *st, MDB_txn *txn, un_id id,
			struct un_node_hop **h, size_t *n)
{
	size_t cap = 0;
	struct rec_view r;
	void *p;
	int err;

	for (*n = 0; id != UN_ID_NONE; id = r.parent) {
		if (*n == NODE_DEPTH_MAX)
			return -ELOOP; /* invariant 5 broken on disk */
		if (*n == cap) {
			cap = cap ? cap * 2 : 8;
			p = un_sys_realloc(*h, cap * sizeof(**h));
			if (!p)
				return -ENOMEM;
			*h = p;
		}
		err = rec_get(st, txn, id, &r);
		if (err)
			return err;
		hop_fill(&(*h)[(*n)++], id, &r);
	}
	return 0;
}

/* path_collect in a read transaction of its own. */
static int path_read(struct un_state *st, un_id id, struct un_node_hop **h, size_t *n)
{
	MDB_txn *txn;
	int err = txn_begin(st, false, &txn);

	if (err)
		return err;
	err = path_collect(st, txn, id, h, n);
	mdb_txn_abort(txn);
	return err;
}

int un_node_path(struct un_state *st, un_id id, struct un_node_hop **out, size_t *n)
{
	struct un_node_hop *h = NULL;
	size_t cnt = 0;
	int err;

	if (id == UN_ID_NONE)
		return -ESTALE;
	err = path_read(st, id, &h, &cnt);
	if (err == -ESTALE && atomic_load(&st->ahead)) {
		/* the path may run through nodes queued ahead (16) */
		free(h);
		h = NULL;
		un_node_ahead_commit(st);
		err = path_read(st, id, &h, &cnt);
	}
	if (err) {
		free(h);
		return err;
	}
	hops_reverse(h, cnt);
	*out = h;
	*n = cnt;
	return 0;
}

/* ---- changes of the union ---- */

/* A name copied out of the table (record and alias values move on puts). */
struct name_buf {
	un_id parent;
	uint16_t len;
	char name[UN_NAME_MAX + 1];
};

static size_t nm_key(uint8_t *key, const struct un_node_name *nm)
{
	be64_put(key, nm->parent);
	memcpy(key + 8, nm->name, nm->len);
	return 8 + nm->len;
}

/* Gets the id names maps NM to: 0, -ENOENT, or -errno. */
static int names_get(struct un_state *st, MDB_txn *txn, const struct un_node_name *nm,
		     un_id *id)
{
	uint8_t key[8 + UN_NAME_MAX];

	return index_get(txn, st->db_names, key, nm_key(key, nm), id);
}

static int del_ok(int rc)
{
	int err = un_mdb_err(rc);

	return err == -ENOENT ? 0 : err;
}

/* Deletes names(NM) if it maps to ID. */
static int names_del(struct un_state *st, MDB_txn *txn, const struct un_node_name *nm,
		     un_id id)
{
	uint8_t key[8 + UN_NAME_MAX];
	MDB_val k = {nm_key(key, nm), key};
	un_id cur;
	int err = index_get(txn, st->db_names, key, k.mv_size, &cur);

	if (err)
		return err == -ENOENT ? 0 : err;
	if (cur != id)
		return 0;
	return del_ok(mdb_del(txn, st->db_names, &k, NULL));
}

static int names_put(struct un_state *st, MDB_txn *txn, const struct un_node_name *nm,
		     un_id id)
{
	uint8_t key[8 + UN_NAME_MAX];

	return index_put(txn, st->db_names, key, nm_key(key, nm), id);
}

/* ---- aliases (invariant 8) ---- */

static int alias_put(struct un_state *st, MDB_txn *txn, un_id id,
		     const struct un_node_name *nm)
{
	uint8_t key[8], val[8 + UN_NAME_MAX];
	MDB_val k = {sizeof(key), key}, v = {nm_key(val, nm), val};
	int rc;

	be64_put(key, id);
	rc = mdb_put(txn, st->db_aliases, &k, &v, MDB_NODUPDATA);
	return rc == MDB_KEYEXIST ? 0 : un_mdb_err(rc);
}

/* Deletes alias NM of ID (NULL: every alias of ID). */
static int alias_del(struct un_state *st, MDB_txn *txn, un_id id,
		     const struct un_node_name *nm)
{
	uint8_t key[8], val[8 + UN_NAME_MAX];
	MDB_val k = {sizeof(key), key}, v;

	be64_put(key, id);
	if (!nm)
		return del_ok(mdb_del(txn, st->db_aliases, &k, NULL));
	v = (MDB_val){nm_key(val, nm), val};
	return del_ok(mdb_del(txn, st->db_aliases, &k, &v));
}

/* Counts the aliases of ID into *n and copies one that is not NOT into
 * *other (other->len 0 if there is none). */
static int alias_scan(struct un_state *st, MDB_txn *txn, un_id id,
		      const struct un_node_name * not, size_t *n, struct name_buf *other)
{
	uint8_t key[8];
	MDB_val k = {sizeof(key), key}, v;
	MDB_cursor *c;
	int rc;

	be64_put(key, id);
	*n = 0;
	other->len = 0;
	rc = mdb_cursor_open(txn, st->db_aliases, &c);
	if (rc)
		return un_mdb_err(rc);
	for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_KEY); rc == 0;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT_DUP)) {
		size_t len = v.mv_size - 8;
		const char *name = (const char *)v.mv_data + 8;
		uint64_t be;

		(*n)++;
		if (other->len || v.mv_size <= 8 || len > UN_NAME_MAX)
			continue;
		memcpy(&be, v.mv_data, 8);
		if (not &&be64toh(be) == not ->parent && len == not ->len &&
		    !memcmp(name, not ->name, len))
			continue;
		other->parent = be64toh(be);
		other->len = (uint16_t)len;
		memcpy(other->name, name, len);
		other->name[len] = '\0';
	}
	mdb_cursor_close(c);
	return rc == MDB_NOTFOUND ? 0 : un_mdb_err(rc);
}

/* Drops every alias of ID once fewer than two are left (invariant 8). */
static int alias_trim(struct un_state *st, MDB_txn *txn, un_id id)
{
	struct name_buf other;
	size_t n;
	int err = alias_scan(st, txn, id, NULL, &n, &other);

	if (err || n >= 2)
		return err;
	return alias_del(st, txn, id, NULL);
}

/* Renames alias FROM of ID to TO when ID has aliases at all: a node with a
 * single name has none (invariant 8). */
static int alias_move(struct un_state *st, MDB_txn *txn, un_id id,
		      const struct un_node_name *from, const struct un_node_name *to)
{
	struct name_buf other;
	size_t n;
	int err = alias_scan(st, txn, id, NULL, &n, &other);

	if (err || n == 0)
		return err;
	err = alias_del(st, txn, id, from);
	return err ? err : alias_put(st, txn, id, to);
}

/* ---- forgetting and moving names ---- */

/* Rewrites record ID (as R says) under the name NEW. */
static int rec_rename(struct un_state *st, MDB_txn *txn, un_id id,
		      const struct rec_view *r, un_id parent, const char *name,
		      size_t len)
{
	struct rec_view nr = *r;

	nr.parent = parent;
	nr.name = name;
	nr.namelen = (uint16_t)len;
	return rec_write(st, txn, id, &nr);
}

/* The export root above a record whose parent is PARENT: -ESTALE when the
 * chain is broken (an ancestor forgotten). */
static int rec_root(struct un_state *st, MDB_txn *txn, un_id parent, un_id *root)
{
	struct rec_view r = {.parent = parent};
	un_id id = UN_ID_NONE;
	int err;

	for (int i = 0; r.parent != UN_ID_NONE; i++) {
		if (i == NODE_DEPTH_MAX)
			return -ELOOP; /* invariant 5 broken on disk */
		id = r.parent;
		err = rec_get(st, txn, id, &r);
		if (err)
			return err;
	}
	if (id == UN_ID_NONE)
		return -ESTALE;
	*root = id;
	return 0;
}

/* Deletes DB's entry for inode DI of export ROOT if it maps to ID (any id:
 * ID 0). */
static int inode_del(MDB_txn *txn, MDB_dbi db, un_id root, struct un_devino di, un_id id)
{
	uint8_t key[INODE_KEY];
	MDB_val k = {sizeof(key), key};
	un_id cur;
	int err;

	inode_key(key, root, di);
	err = index_get(txn, db, key, sizeof(key), &cur);
	if (err)
		return err == -ENOENT ? 0 : err;
	if (id != UN_ID_NONE && cur != id)
		return 0;
	return del_ok(mdb_del(txn, db, &k, NULL));
}

/* Forgets node ID: its record, its links entry, its aliases (invariant 7). */
static int node_kill(struct un_state *st, MDB_txn *txn, un_id id)
{
	uint8_t key[8];
	MDB_val k = {sizeof(key), key};
	struct rec_view r;
	un_id root;
	int err = rec_get(st, txn, id, &r);

	if (err)
		return err == -ESTALE ? 0 : err;
	/* Without its export's root the links entry stays: a hint that is
	 * checked against the record on every use, and no record matches. */
	err = rec_root(st, txn, r.parent, &root);
	if (!err)
		err = inode_del(txn, st->db_links, root, r.di, id);
	else if (err == -ESTALE || err == -ELOOP)
		err = 0;
	if (err)
		return err;
	be64_put(key, id);
	err = del_ok(mdb_del(txn, st->db_nodes, &k, NULL));
	return err ? err : alias_del(st, txn, id, NULL);
}

/* Name NM of node ID goes away: the node lives on under another name LINK
 * recorded, or is forgotten (invariants 7, 8). */
static int node_unname(struct un_state *st, MDB_txn *txn, un_id id,
		       const struct un_node_name *nm)
{
	struct name_buf other;
	struct rec_view r;
	size_t n;
	int err;

	err = names_del(st, txn, nm, id);
	if (!err)
		err = rec_get(st, txn, id, &r);
	if (err)
		return err == -ESTALE ? 0 : err;
	if (!rec_named(&r, nm)) { /* a second name: the record keeps its own */
		err = alias_del(st, txn, id, nm);
		return err ? err : alias_trim(st, txn, id);
	}
	err = alias_scan(st, txn, id, nm, &n, &other);
	if (err)
		return err;
	if (!other.len)
		return node_kill(st, txn, id);
	err = rec_rename(st, txn, id, &r, other.parent, other.name, other.len);
	if (!err)
		err = alias_del(st, txn, id, nm);
	return err ? err : alias_trim(st, txn, id);
}

/* ---- the writer ----
 *
 * Every write transaction is a job in one queue, and a batch of the jobs
 * queued runs in one transaction with one commit, by one of the threads
 * that wait for them (un_node_job_wait): the thread that finds no batch
 * running takes the whole queue.  A commit writes its pages and the meta
 * page whatever it holds, so the changes that run together (32 clients'
 * creates in one directory) share that cost, and none holds a lock of the
 * engine while it waits: dir.c queues a change's job under the directory's
 * lock, in the order of the changes on disk, and waits after dropping it.
 * Jobs run in queue order, so the table sees the changes of a directory in
 * the order the directory saw them.  In a batch of more than one, each job
 * runs in a nested transaction, so that one failing undoes only its own
 * writes; a job alone runs in the batch's own transaction. */

static int call_txn(struct un_state *st, MDB_txn *txn, struct un_node_job *j)
{
	return j->call(st, txn, j->arg);
}

/* Runs J in TXN, in a nested transaction of its own unless ALONE. */
static int job_run(struct un_state *st, MDB_txn *txn, struct un_node_job *j, bool alone)
{
	MDB_txn *child;
	int err;

	if (alone)
		return j->fn(st, txn, j);
	err = un_mdb_err(mdb_txn_begin(st->env, txn, 0, &child));
	if (err)
		return err;
	err = j->fn(st, child, j);
	if (err) {
		mdb_txn_abort(child);
		return err;
	}
	return un_mdb_err(mdb_txn_commit(child));
}

static bool dones_run(struct un_state *st, MDB_txn *txn, struct un_intent_done *done);

/* Runs the jobs of BATCH in one write transaction and commits what
 * succeeded, with the deletions of the intents DONE lists: each job's err
 * is its own failure or the commit's. */
static void batch_run(struct un_state *st, struct un_node_job *batch,
		      struct un_intent_done *done)
{
	bool alone = !batch->next && !done, any = false, bump = false;
	struct un_node_job *j;
	MDB_txn *txn;
	int err = txn_begin(st, true, &txn);

	st->node_adopted = false; /* the turn's own: no other thread writes */
	for (j = batch; j; j = j->next) {
		j->err = err ? err : job_run(st, txn, j, alone);
		any = any || !j->err;
		bump = bump || j->bump;
	}
	if (!err)
		any = dones_run(st, txn, done) || any;
	else
		dones_run(st, NULL, done); /* frees the list */
	bump = bump || st->node_adopted;   /* an adoption moves names (14) */
	if (!err && !any)
		mdb_txn_abort(txn);
	else if (!err)
		err = timed_commit(st, txn);
	for (j = batch; j; j = j->next) {
		j->err = j->err ? j->err : err;
		j->flush = un_seq_ticket(&st->flushes); /* after the commit */
	}
	/* A job fails with ENOSPC only for want of room in the table. */
	for (j = batch; !err && j; j = j->next)
		if (j->err == -ENOSPC)
			err = j->err;
	if (err)
		un_state_failed(st, err, "write");
	else
		un_state_map_trim(st); /* the writer's turn: one thread at a time */
	/* After the commit, so a reader that saw the old epoch read the table
	 * no later than this change (invariant 10). */
	if (bump)
		atomic_fetch_add(&st->node_epoch, 1);
	/* After the commit: a reader that sees none pending reads it. */
	for (j = batch; j; j = j->next)
		if (j->bump)
			atomic_fetch_sub(&st->node_pending, 1);
}

/* A job's state.  JOB_SLEEPING is JOB_QUEUED with its owner asleep on the
 * futex: only then does a change of state cost a wake (job_set). */
enum { JOB_QUEUED, JOB_SLEEPING, JOB_RUN, JOB_DONE };

/* A thread waits for the jobs it queued in the order it queued them, and
 * for every one before it queues or waits for a job of another call: the
 * turn may be handed to its first job while it sleeps on a later one
 * (dir.c waits for its one job right after dropping its locks). */
static void job_queue(struct un_state *st, struct un_node_job *j)
{
	j->next = NULL;
	j->taken = false;
	j->waiting = false;
	atomic_store(&j->state, JOB_QUEUED);
	if (j->bump) /* before the caller drops the lock of its change */
		atomic_fetch_add(&st->node_pending, 1);
	pthread_mutex_lock(&st->wq_lock);
	*st->wq_tail = j;
	st->wq_tail = &j->next;
	pthread_mutex_unlock(&st->wq_lock);
}

/* Sleeps while J is queued, having said so (JOB_SLEEPING), so that the
 * thread that moves it on knows to wake this one. */
static void job_sleep(struct un_node_job *j)
{
	int queued = JOB_QUEUED;

	if (atomic_compare_exchange_strong(&j->state, &queued, JOB_SLEEPING) ||
	    queued == JOB_SLEEPING)
		syscall(SYS_futex, &j->state, FUTEX_WAIT_PRIVATE, JOB_SLEEPING, NULL,
			NULL, 0);
}

/* Moves J to STATE; true when its owner sleeps and must be woken
 * (job_wake), which may be done after J's memory was reused: a stale wake
 * is harmless. */
static bool job_set(struct un_node_job *j, int state)
{
	return atomic_exchange(&j->state, state) == JOB_SLEEPING;
}

static void job_wake(struct un_node_job *j)
{
	syscall(SYS_futex, &j->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* The first queued job whose owner waits for it (un_node_job_wait), or
 * NULL; with wq_lock held.  An owner that queued its job and went on to
 * other work (a sync run, which drains the queue: un_node_jobs_drain) gets
 * no turn it would hold up: it takes one when it comes to wait and none
 * runs. */
static struct un_node_job *first_waiting(struct un_state *st)
{
	struct un_node_job *j = st->wq_head;

	un_assert_locked(&st->wq_lock);
	while (j && !j->waiting)
		j = j->next;
	return j;
}

/* A job answered ahead, run: nobody waits for it (invariant 16). */
static void ahead_free(struct un_state *st, struct un_node_job *j)
{
	atomic_fetch_sub(&st->ahead, 1);
	free(j); /* the start of its struct ahead_job */
}

/* Ends BATCH: hands the turn to the owner of the first job queued since it
 * began whose owner waits (no other thread can take it in between), and
 * wakes the owners of the batch's jobs.  Once handed on, the turn may end and be taken
 * again while this batch is still being marked: only a job no batch has taken claims it
 * (un_node_job_wait).  An owner may return once its job is done: each job is read before
 * it is marked. */
static void batch_end(struct un_state *st, struct un_node_job *batch)
{
	struct un_node_job *turn, *next;
	bool asleep = false;

	pthread_mutex_lock(&st->wq_lock);
	turn = first_waiting(st);
	if (turn)
		asleep = job_set(turn, JOB_RUN);
	pthread_mutex_unlock(&st->wq_lock);
	for (; batch; batch = next) {
		next = batch->next;
		if (batch->ahead)
			ahead_free(st, batch);
		else if (job_set(batch, JOB_DONE))
			job_wake(batch);
	}
	if (!turn) {
		pthread_mutex_lock(&st->wq_lock);
		turn = first_waiting(st); /* queued while the jobs were marked */
		if (turn)
			asleep = job_set(turn, JOB_RUN);
		else
			st->wq_running = false;
		pthread_mutex_unlock(&st->wq_lock);
	}
	if (asleep)
		job_wake(turn);
}

/* Runs the queue as one batch: the caller holds the turn. */
static void batch_next(struct un_state *st)
{
	struct un_intent_done *done;
	struct un_node_job *batch;

	pthread_mutex_lock(&st->wq_lock);
	batch = st->wq_head;
	st->wq_head = NULL;
	st->wq_tail = &st->wq_head;
	for (struct un_node_job *j = batch; j; j = j->next)
		j->taken = true;
	done = st->intents_done;
	st->intents_done = NULL;
	pthread_mutex_unlock(&st->wq_lock);
	batch_run(st, batch, done);
	batch_end(st, batch);
}

int un_node_job_wait(struct un_state *st, struct un_node_job *j)
{
	int state;

	pthread_mutex_lock(&st->wq_lock);
	j->waiting = true; /* batch_end may hand it the turn from now on */
	if (!st->wq_running && !j->taken) {
		st->wq_running = true;
		atomic_store(&j->state, JOB_RUN);
	}
	pthread_mutex_unlock(&st->wq_lock);
	/* J is queued until a batch takes it, and the turn goes only to the
	 * owner of a queued job: a turn taken runs a batch that holds J. */
	while ((state = atomic_load(&j->state)) != JOB_DONE) {
		if (state == JOB_RUN)
			batch_next(st);
		else
			job_sleep(j);
	}
	return j->err;
}

void un_node_jobs_drain(struct un_state *st)
{
	bool turn;

	pthread_mutex_lock(&st->wq_lock);
	turn = !st->wq_running && st->wq_head;
	if (turn)
		st->wq_running = true;
	pthread_mutex_unlock(&st->wq_lock);
	if (turn)
		batch_next(st);
}

static int write_job(struct un_state *st, struct un_node_job *j)
{
	job_queue(st, j);
	return un_node_job_wait(st, j);
}

/* Runs FN(ST, TXN, ARG) in a write transaction, committed only if FN
 * succeeds; the epoch moves after it (invariant 10). */
static int in_write_txn(struct un_state *st,
			int (*fn)(struct un_state *, MDB_txn *, const void *),
			const void *arg)
{
	struct un_node_job j = {.fn = call_txn, .call = fn, .arg = arg, .bump = true};

	return write_job(st, &j);
}

/* assign_txn of the job's one object, its answer kept in the job. */
static int assign_one_txn(struct un_state *st, MDB_txn *txn, struct un_node_job *j)
{
	struct found f = {UN_ID_NONE, UN_ID_NONE};
	int err = assign_txn(st, txn, &(struct assign_args){&j->obs, 1, &f});

	j->id = f.id;
	j->fileid = f.fileid;
	return err;
}

void un_node_assign_queue(struct un_state *st, const struct un_node_obs *obs,
			  struct un_node_job *job)
{
	assert(obs->ninst == 1);
	obs_check(obs);
	*job =
	    (struct un_node_job){.fn = assign_one_txn, .obs = *obs, .di = obs->inst[0]};
	job->obs.inst = &job->di;
	job->obs.raw = NULL; /* one instance, of the upper: its own key */
	job_queue(st, job);
}

struct set_inst_args {
	un_id id;
	struct un_devino top, origin;
	const struct un_node_name *nm;
};

static int set_inst_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	const struct set_inst_args *a = arg;
	char name[UN_NAME_MAX + 1];
	struct rec_view r;
	int err = rec_get(st, txn, a->id, &r);

	if (err)
		return err;
	memcpy(name, r.name, r.namelen);
	r.name = name;
	r.di = a->top;
	r.origin = a->origin;
	if (a->nm) {
		r.parent = a->nm->parent;
		r.name = a->nm->name;
		r.namelen = (uint16_t)a->nm->len;
		err = names_put(st, txn, a->nm, a->id);
	}
	return err ? err : rec_write(st, txn, a->id, &r);
}

int un_node_set_inst(struct un_state *st, un_id id, struct un_devino top,
		     const struct un_devino *origin, const struct un_node_name *nm)
{
	struct set_inst_args a = {.id = id, .top = top, .nm = nm};

	if (origin)
		a.origin = *origin;
	return in_write_txn(st, set_inst_txn, &a);
}

struct part_args {
	un_id root, id;
	struct un_devino lower;
};

static int part_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	const struct part_args *a = arg;
	uint8_t key[INODE_KEY], fkey[8];
	MDB_val fk = {sizeof(fkey), fkey}, empty = {0, NULL};
	struct rec_view r;
	un_id g;
	int err = rec_get(st, txn, a->id, &r);

	if (err)
		return err;
	/* The record keeps its origin, so that an observation of the lower
	 * file made before the copy-up still finds it (group_check lets no
	 * other name take it); but a node a read-only run shared among the
	 * names (links) must neither match them nor seed the next group. */
	err = inode_del(txn, st->db_links, a->root, a->lower, UN_ID_NONE);
	/* The other names stop matching their records, and no new name joins
	 * their fileid (invariant 9). */
	be64_put(fkey, r.fileid);
	if (!err)
		err = un_mdb_err(mdb_put(txn, st->db_parted, &fk, &empty, 0));
	inode_key(key, a->root, a->lower);
	if (!err)
		err = index_get(txn, st->db_groups, key, sizeof(key), &g);
	if (err)
		return err == -ENOENT ? 0 : err;
	return g == r.fileid ? index_put(txn, st->db_groups, key, sizeof(key), UN_ID_NONE)
			     : 0;
}

int un_node_part(struct un_state *st, un_id root, un_id id, struct un_devino lower)
{
	struct part_args a = {.root = root, .id = id, .lower = lower};

	return in_write_txn(st, part_txn, &a);
}

/* ---- intents (invariant 14) ---- */

#define INTENT_V1	    1  /* without a number or a victim */
#define INTENT_VERSION	    2  /* the version written */
#define INTENT_VICTIM_LINKS 1u /* flags: links mapped the victim's inode */
#define INTENT_SETTLE	    2u /* flags: written by a settle's undo */

/* An intent as stored, little-endian; FROMLEN name bytes follow (a
 * rename's source name; none for a link or a removal), then VICTIMLEN
 * bytes of the victim's record as the nodes database held it. */
struct intent_rec {
	uint8_t version;
	uint8_t kind;	  /* enum un_intent_kind */
	uint16_t fromlen; /* LE */
	uint8_t flags;	  /* INTENT_VICTIM_LINKS, INTENT_SETTLE */
	uint8_t reserved[3];
	uint64_t run;	      /* LE: st->run of the process that wrote it */
	uint64_t root;	      /* LE: the export's root */
	uint64_t id;	      /* LE: the node that is to get (or lose) the name */
	uint64_t from_parent; /* LE */
	/* version 2 */
	uint64_t seq;	    /* LE: its number in its run, in the order written */
	uint64_t victim;    /* LE: the node the change took the name from; 0 none */
	uint16_t victimlen; /* LE */
	uint8_t pad[6];
};
#define INTENT_V1_SIZE 40
_Static_assert(offsetof(struct intent_rec, seq) == INTENT_V1_SIZE,
	       "intent record version 1 layout is on disk");
_Static_assert(sizeof(struct intent_rec) == 64, "intent record layout is on disk");

#define NODE_VAL_MAX   (sizeof(struct node_rec) + UN_NAME_MAX)
#define INTENT_VAL_MAX (sizeof(struct intent_rec) + UN_NAME_MAX + NODE_VAL_MAX)

/* An intent as read, copied out of the table into the caller's buffer
 * (intent_get): its parts stay valid across the transaction's puts. */
struct intent_view {
	enum un_intent_kind kind;
	uint8_t flags;
	uint64_t run, seq;
	un_id root, id, victim;
	struct un_node_name from;
	MDB_val vrec; /* the victim's record (mv_size 0: none) */
};

/* Parses the N bytes at P into *IV: -ESTALE for a record of another
 * version or size. */
static int intent_parse(const uint8_t *p, size_t n, struct intent_view *iv)
{
	struct intent_rec r = {0};
	size_t fixed, fromlen, vlen = 0;

	if (n < INTENT_V1_SIZE)
		return -ESTALE;
	memcpy(&r, p, INTENT_V1_SIZE);
	fixed = r.version == INTENT_V1 ? INTENT_V1_SIZE : sizeof(r);
	if ((r.version != INTENT_V1 && r.version != INTENT_VERSION) || n < fixed)
		return -ESTALE;
	memcpy(&r, p, fixed);
	fromlen = le16toh(r.fromlen);
	if (r.version == INTENT_VERSION)
		vlen = le16toh(r.victimlen);
	if (fromlen > UN_NAME_MAX || vlen > NODE_VAL_MAX || n != fixed + fromlen + vlen ||
	    (r.kind != UN_INTENT_RENAME && r.kind != UN_INTENT_LINK &&
	     r.kind != UN_INTENT_REMOVE))
		return -ESTALE;
	*iv = (struct intent_view){
	    .kind = r.kind,
	    .flags = r.flags,
	    .run = le64toh(r.run),
	    .seq = le64toh(r.seq),
	    .root = le64toh(r.root),
	    .id = le64toh(r.id),
	    .victim = le64toh(r.victim),
	    .from = {le64toh(r.from_parent), (const char *)p + fixed, fromlen},
	    .vrec = {vlen, (uint8_t *)p + fixed + fromlen},
	};
	return 0;
}

/* The intent of name TO, copied into BUF (INTENT_VAL_MAX bytes): 0,
 * -ENOENT, -ESTALE (unreadable), or -errno. */
static int intent_get(struct un_state *st, MDB_txn *txn, const struct un_node_name *to,
		      uint8_t *buf, struct intent_view *iv)
{
	uint8_t key[8 + UN_NAME_MAX];
	MDB_val k = {nm_key(key, to), key}, v;
	int err = un_mdb_err(mdb_get(txn, st->db_intents, &k, &v));

	if (err)
		return err;
	if (v.mv_size > INTENT_VAL_MAX)
		return -ESTALE;
	memcpy(buf, v.mv_data, v.mv_size);
	return intent_parse(buf, v.mv_size, iv);
}

/* Writes IV as the intent of name TO (IV's parts may point anywhere but
 * into the intents database). */
static int intent_write(struct un_state *st, MDB_txn *txn, const struct un_node_name *to,
			const struct intent_view *iv)
{
	uint8_t key[8 + UN_NAME_MAX], buf[INTENT_VAL_MAX];
	struct intent_rec r = {
	    .version = INTENT_VERSION,
	    .kind = (uint8_t)iv->kind,
	    .fromlen = htole16((uint16_t)iv->from.len),
	    .flags = iv->flags,
	    .run = htole64(iv->run),
	    .root = htole64(iv->root),
	    .id = htole64(iv->id),
	    .from_parent = htole64(iv->from.parent),
	    .seq = htole64(iv->seq),
	    .victim = htole64(iv->victim),
	    .victimlen = htole16((uint16_t)iv->vrec.mv_size),
	};
	MDB_val k = {nm_key(key, to), key},
		v = {sizeof(r) + iv->from.len + iv->vrec.mv_size, buf};

	memcpy(buf, &r, sizeof(r));
	if (iv->from.len)
		memcpy(buf + sizeof(r), iv->from.name, iv->from.len);
	if (iv->vrec.mv_size)
		memcpy(buf + sizeof(r) + iv->from.len, iv->vrec.mv_data,
		       iv->vrec.mv_size);
	return un_mdb_err(mdb_put(txn, st->db_intents, &k, &v, 0));
}

/* Writes intent number SEQ, of KIND, of name TO for node ID of export
 * ROOT (FROM: a rename's source, else NULL).  An intent of this run that
 * TO already holds is of an earlier change of the name whose undo the new
 * one must carry (invariant 15: two changes of one name under way at a
 * cut): the node it took the name from, and for a removal of the node a
 * rename just brought there, where it came from. */
static int intent_put(struct un_state *st, MDB_txn *txn, enum un_intent_kind kind,
		      un_id root, un_id id, const struct un_node_name *from,
		      const struct un_node_name *to, uint64_t seq)
{
	struct intent_view iv = {
	    .kind = kind, .run = st->run, .seq = seq, .root = root, .id = id};
	uint8_t buf[INTENT_VAL_MAX];
	struct intent_view prev;
	int err = intent_get(st, txn, to, buf, &prev);

	if (err && err != -ENOENT && err != -ESTALE)
		return err;
	if (from)
		iv.from = *from;
	if (!err && prev.run == st->run && prev.victim != UN_ID_NONE) {
		iv.victim = prev.victim;
		iv.flags = prev.flags & INTENT_VICTIM_LINKS; /* never a settle's */
		iv.vrec = prev.vrec;
	}
	if (!err && prev.run == st->run && kind == UN_INTENT_REMOVE && prev.id == id &&
	    prev.kind != UN_INTENT_LINK)
		iv.from = prev.from;
	return intent_write(st, txn, to, &iv);
}

/* Deletes the intent of TO when it is number SEQ of run RUN (or
 * unreadable). */
static int intent_del(struct un_state *st, MDB_txn *txn, const struct un_node_name *to,
		      uint64_t run, uint64_t seq)
{
	uint8_t key[8 + UN_NAME_MAX], buf[INTENT_VAL_MAX];
	MDB_val k = {nm_key(key, to), key};
	struct intent_view iv;
	int err = intent_get(st, txn, to, buf, &iv);

	if (err == -ENOENT || (!err && (iv.run != run || iv.seq != seq)))
		return 0;
	if (err && err != -ESTALE)
		return err;
	return del_ok(mdb_del(txn, st->db_intents, &k, NULL));
}

static uint64_t intent_seq_next(struct un_state *st)
{
	return atomic_fetch_add(&st->intent_seq, 1) + 1;
}

/* Notes in the intent of TO, when it is ID's, the record of VICTIM, the
 * node the change is about to take TO from, so that a settle can give it
 * back if the change did not reach the disk (intent_undo_txn). */
static int victim_note(struct un_state *st, MDB_txn *txn, const struct un_node_name *to,
		       un_id id, un_id victim)
{
	uint8_t buf[INTENT_VAL_MAX], rec[NODE_VAL_MAX], key[8], lkey[INODE_KEY];
	MDB_val k = {sizeof(key), key}, v;
	struct intent_view iv;
	struct rec_view r;
	un_id mapped;
	int err = intent_get(st, txn, to, buf, &iv);

	if (err == -ENOENT || err == -ESTALE || (!err && iv.id != id))
		return 0; /* no intent of this change: nothing to note */
	be64_put(key, victim);
	if (!err)
		err = un_mdb_err(mdb_get(txn, st->db_nodes, &k, &v));
	if (!err && v.mv_size > sizeof(rec))
		err = -ESTALE;
	if (!err) {
		memcpy(rec, v.mv_data, v.mv_size);
		err = rec_get(st, txn, victim, &r);
	}
	if (err)
		return err == -ENOENT || err == -ESTALE ? 0 : err;
	inode_key(lkey, iv.root, r.di);
	iv.flags = 0;
	if (!index_get(txn, st->db_links, lkey, sizeof(lkey), &mapped) &&
	    mapped == victim)
		iv.flags = INTENT_VICTIM_LINKS;
	iv.victim = victim;
	iv.vrec = (MDB_val){v.mv_size, rec};
	return intent_write(st, txn, to, &iv);
}

/* Name NM goes from node VICTIM to node ID (a rename or a link over it),
 * noted in ID's intent first. */
static int name_take(struct un_state *st, MDB_txn *txn, const struct un_node_name *nm,
		     un_id id, un_id victim)
{
	int err = victim_note(st, txn, nm, id, victim);

	return err ? err : node_unname(st, txn, victim, nm);
}

struct rename_args {
	un_id id;
	const struct un_node_name *from, *to;
};

static int rename_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	const struct rename_args *a = arg;
	struct name_buf other;
	struct rec_view r;
	size_t n;
	un_id old;
	int err;

	err = names_get(st, txn, a->to, &old);
	if (!err && old != a->id)
		err = name_take(st, txn, a->to, a->id, old); /* the overwritten node */
	else if (err == -ENOENT || !err)
		err = 0;
	if (!err)
		err = names_del(st, txn, a->from, a->id);
	if (!err)
		err = names_put(st, txn, a->to, a->id);
	if (!err)
		err = rec_get(st, txn, a->id, &r);
	if (!err)
		err = alias_scan(st, txn, a->id, NULL, &n, &other);
	if (err)
		return err == -ESTALE ? 0 : err; /* no record: nothing more to move */
	/* A node of one name is where that name went, wherever its record
	 * was (a settle replays the renames of a chain one by one); one of
	 * several keeps its record on another name (aliases list them all). */
	if (n == 0 || rec_named(&r, a->from))
		err = rec_rename(st, txn, a->id, &r, a->to->parent, a->to->name,
				 a->to->len);
	if (!err && n)
		err = alias_del(st, txn, a->id, a->from);
	return err || !n ? err : alias_put(st, txn, a->id, a->to);
}

int un_node_rename(struct un_state *st, un_id id, const struct un_node_name *from,
		   const struct un_node_name *to)
{
	struct rename_args a = {.id = id, .from = from, .to = to};

	return in_write_txn(st, rename_txn, &a);
}

static int rename_job(struct un_state *st, MDB_txn *txn, struct un_node_job *j)
{
	return rename_txn(st, txn, &(struct rename_args){j->id, &j->from, &j->to});
}

void un_node_rename_queue(struct un_state *st, un_id id, const struct un_node_name *from,
			  const struct un_node_name *to, struct un_node_job *job)
{
	*job = (struct un_node_job){
	    .fn = rename_job, .id = id, .from = *from, .to = *to, .bump = true};
	job_queue(st, job);
}

struct remove_args {
	un_id root;
	const struct un_node_name *nm;
	uint64_t seq;
};

/* Forgets NM's node, or drops NM from its names, with a REMOVE intent
 * that keeps the node's record until the removal is durable (a settle
 * gives it back if the removal did not reach the disk). */
static int remove_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	const struct remove_args *a = arg;
	un_id id;
	int err = names_get(st, txn, a->nm, &id);

	if (err)
		return err == -ENOENT ? 0 : err; /* never shown: nothing to forget */
	err = intent_put(st, txn, UN_INTENT_REMOVE, a->root, id, NULL, a->nm, a->seq);
	if (!err)
		err = name_take(st, txn, a->nm, id, id);
	return err;
}

int un_node_remove(struct un_state *st, un_id root, const struct un_node_name *nm,
		   uint64_t *seq)
{
	struct remove_args a = {root, nm, intent_seq_next(st)};

	*seq = a.seq;
	return in_write_txn(st, remove_txn, &a);
}

static int remove_job(struct un_state *st, MDB_txn *txn, struct un_node_job *j)
{
	return remove_txn(st, txn, &(struct remove_args){j->root, &j->to, j->seq});
}

void un_node_remove_queue(struct un_state *st, un_id root, const struct un_node_name *nm,
			  struct un_node_job *job)
{
	*job = (struct un_node_job){.fn = remove_job,
				    .root = root,
				    .to = *nm,
				    .seq = intent_seq_next(st),
				    .bump = true};
	job_queue(st, job);
}

struct remove_ahead_args {
	un_id root;
	const struct un_node_name *nm;
	bool intent; /* and a REMOVE intent of NM */
	bool write;  /* else only decide */
};

/* A remove's write ahead (invariant 14): when NM's node has another name
 * (aliases) and its record names NM, the record moves to the other name,
 * with a REMOVE intent of NM when asked; 1 when nothing is to be done.
 * Both names still give the node, so the record names a live name
 * whether the removal reaches the disk or not, and the intent drops NM
 * from the aliases once it is gone, so that no later remove moves the
 * record to a name that is not there. */
static int remove_ahead_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	const struct remove_ahead_args *a = arg;
	struct name_buf other;
	struct rec_view r;
	size_t n;
	un_id id;
	int err = names_get(st, txn, a->nm, &id);

	if (!err)
		err = rec_get(st, txn, id, &r);
	if (!err)
		err = alias_scan(st, txn, id, a->nm, &n, &other);
	if (err == -ENOENT || err == -ESTALE || (!err && !other.len))
		return 1; /* one name: a crash leaves the node gone, as it is */
	if (err || !a->write)
		return err;
	if (rec_named(&r, a->nm))
		err = rec_rename(st, txn, id, &r, other.parent, other.name, other.len);
	if (!err && a->intent)
		err = intent_put(st, txn, UN_INTENT_REMOVE, a->root, id, NULL, a->nm,
				 intent_seq_next(st));
	return err;
}

int un_node_remove_ahead(struct un_state *st, un_id root, const struct un_node_name *nm,
			 bool intent)
{
	struct remove_ahead_args a = {root, nm, intent, false};
	MDB_txn *txn;
	int err = txn_begin(st, false, &txn);

	if (err)
		return err;
	err = remove_ahead_txn(st, txn, &a); /* a read transaction decides */
	mdb_txn_abort(txn);
	if (err)
		return err == 1 ? 0 : err;
	a.write = true;
	err = in_write_txn(st, remove_ahead_txn, &a);
	return err ? err : 1;
}

struct link_args {
	un_id root, id;
	const struct un_node_name *nm;
	struct un_devino di;
};

static int link_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	const struct link_args *a = arg;
	uint8_t lkey[INODE_KEY];
	struct name_buf own, other;
	struct un_node_name ownnm;
	struct rec_view r;
	size_t n;
	un_id old;
	int err;

	err = names_get(st, txn, a->nm, &old);
	if (!err && old != a->id)
		err = name_take(st, txn, a->nm, a->id, old);
	else if (err == -ENOENT || !err)
		err = 0;
	if (!err)
		err = names_put(st, txn, a->nm, a->id);
	inode_key(lkey, a->root, a->di);
	if (!err)
		err = index_put(txn, st->db_links, lkey, sizeof(lkey), a->id);
	if (!err)
		err = rec_get(st, txn, a->id, &r);
	if (err)
		return err;
	own.parent = r.parent;
	own.len = r.namelen;
	memcpy(own.name, r.name, r.namelen);
	ownnm = (struct un_node_name){own.parent, own.name, own.len};
	err = alias_scan(st, txn, a->id, NULL, &n, &other);
	if (!err && n == 0) /* the first second name: the record's joins it */
		err = alias_put(st, txn, a->id, &ownnm);
	return err ? err : alias_put(st, txn, a->id, a->nm);
}

static int link_job(struct un_state *st, MDB_txn *txn, struct un_node_job *j)
{
	return link_txn(st, txn, &(struct link_args){j->root, j->id, &j->to, j->di});
}

void un_node_link_queue(struct un_state *st, un_id root, un_id id,
			const struct un_node_name *nm, struct un_devino di,
			struct un_node_job *job)
{
	*job = (struct un_node_job){
	    .fn = link_job, .root = root, .id = id, .to = *nm, .di = di, .bump = true};
	job_queue(st, job);
}

/* ---- intents: undoing a change the disk lost (invariant 15) ---- */

/* Gives name AT back to node ID of export ROOT, whose record says it was
 * there: its entry, unless another node holds AT now (an object made there
 * after ID left, whose fate only the disk knows): then an intent of AT for
 * ID, which the lookup that finds ID's object there adopts (intent_adopt),
 * as another object found there keeps AT. */
static int name_back(struct un_state *st, MDB_txn *txn, un_id root, un_id id,
		     const struct un_node_name *at)
{
	un_id cur;
	int err = names_get(st, txn, at, &cur);

	if (err == -ENOENT)
		return names_put(st, txn, at, id);
	if (err || cur == id)
		return err;
	return intent_put(st, txn, UN_INTENT_RENAME, root, id, at, at,
			  intent_seq_next(st));
}

/* Writes an intent of AT, of this run's settle, that offers AT to the
 * victim of IV: the settle's lookup of AT decides (intent.c rule 5). */
static int victim_offer(struct un_state *st, MDB_txn *txn, const struct intent_view *iv,
			const struct un_node_name *at)
{
	struct intent_view offer = *iv;

	offer.kind = UN_INTENT_REMOVE;
	offer.id = iv->victim;
	offer.from = (struct un_node_name){0, NULL, 0};
	offer.run = st->run;
	offer.seq = intent_seq_next(st);
	offer.flags |= INTENT_SETTLE;
	return intent_write(st, txn, at, &offer);
}

/* Gives the victim IV noted (victim_note) the name AT back, unless another
 * node holds AT now.  A victim with other names gets AT among its aliases
 * again.  A forgotten one gets nothing here: an object made since may have
 * its inode number (ext4 and xfs reuse a freed one at once), and a record
 * given back would take that object for the victim; instead an intent of
 * AT offers it (the one undone, when AT is its name; else one written
 * here), and the lookup that finds an object matching the victim's record
 * there gives it back (intent_adopt), after the node of the newer change.
 * A name not its own (!OWN_NAME: where a rename had just brought it from)
 * is offered to a live victim too, after it is given back: no intent of
 * the rename is left to look it up (intent_put), and a name the disk does
 * not hold must not stay among the victim's aliases, where a later remove
 * would move its record (node_unname). */
static int victim_restore(struct un_state *st, MDB_txn *txn, const struct intent_view *iv,
			  const struct un_node_name *at, bool own_name)
{
	struct name_buf own;
	struct rec_view r;
	un_id cur;
	int err;

	if (iv->victim == UN_ID_NONE)
		return 0;
	err = names_get(st, txn, at, &cur);
	if (!err && cur != iv->victim)
		return 0;
	if (err && err != -ENOENT)
		return err;
	err = rec_get(st, txn, iv->victim, &r);
	if (err == -ESTALE && !own_name && iv->vrec.mv_size)
		return victim_offer(st, txn, iv, at);
	if (err)
		return err == -ESTALE ? 0 : err;
	own = (struct name_buf){.parent = r.parent, .len = r.namelen};
	memcpy(own.name, r.name, r.namelen);
	err = names_put(st, txn, at, iv->victim);
	if (!err && !rec_named(&r, at)) /* one name of several: both listed */
		err = alias_put(st, txn, iv->victim, at);
	if (!err && !rec_named(&r, at))
		err = alias_put(st, txn, iv->victim,
				&(struct un_node_name){own.parent, own.name, own.len});
	return err || own_name ? err : victim_offer(st, txn, iv, at);
}

/* Invariant 15: the victim of intent IV, forgotten, whose record as IV
 * saved it matches OBS at name TO, gets that record back and TO: an
 * intent of an earlier run, or one a settle wrote, only (at run time an
 * object there is a new one, whatever its inode number).  -ENOENT when
 * there is none to give back. */
static int victim_revive(struct un_state *st, MDB_txn *txn, const struct intent_view *iv,
			 const struct un_node_obs *obs, const struct un_node_name *to,
			 struct found *f)
{
	uint8_t key[8], lkey[INODE_KEY];
	MDB_val k = {sizeof(key), key};
	struct rec_view r;
	int err;

	if (iv->victim == UN_ID_NONE || !iv->vrec.mv_size ||
	    (iv->run == st->run && !(iv->flags & INTENT_SETTLE)))
		return -ENOENT;
	if (rec_parse(&iv->vrec, iv->victim, &r) || !rec_matches(&r, obs))
		return -ENOENT;
	err = rec_get(st, txn, iv->victim, &r);
	if (err != -ESTALE)
		return err ? err : -ENOENT; /* alive: not forgotten */
	be64_put(key, iv->victim);
	err = un_mdb_err(mdb_put(txn, st->db_nodes, &k, (MDB_val *)&iv->vrec, 0));
	if (!err)
		err = rec_get(st, txn, iv->victim, &r);
	if (!err && !rec_named(&r, to))
		err = rec_rename(st, txn, iv->victim, &r, to->parent, to->name, to->len);
	if (!err && (iv->flags & INTENT_VICTIM_LINKS)) {
		inode_key(lkey, iv->root, r.di);
		err = index_put(txn, st->db_links, lkey, sizeof(lkey), iv->victim);
	}
	if (!err)
		err = names_put(st, txn, to, iv->victim);
	if (!err)
		err = rec_get(st, txn, iv->victim, &r);
	if (err)
		return err;
	st->node_adopted = true;
	*f = (struct found){iv->victim, r.fileid};
	return 0;
}

/* A rename IV made in the table, from IV->from to TO, taken back. */
static int rename_back(struct un_state *st, MDB_txn *txn, const struct intent_view *iv,
		       const struct un_node_name *to)
{
	struct rec_view r;
	int err = name_back(st, txn, iv->root, iv->id, &iv->from);

	if (!err)
		err = rec_get(st, txn, iv->id, &r);
	if (err)
		return err == -ESTALE ? 0 : err;
	if (rec_named(&r, to))
		err = rec_rename(st, txn, iv->id, &r, iv->from.parent, iv->from.name,
				 iv->from.len);
	return err ? err : alias_move(st, txn, iv->id, to, &iv->from);
}

/* A link IV made in the table, of name TO, taken back: TO leaves the
 * node's names, and its record, when a remove moved it there while the
 * link was under way (remove_ahead_txn), goes to a name the node had. */
static int link_back(struct un_state *st, MDB_txn *txn, const struct intent_view *iv,
		     const struct un_node_name *to)
{
	struct name_buf other;
	struct rec_view r;
	size_t n;
	int err = rec_get(st, txn, iv->id, &r);

	if (!err)
		err = alias_scan(st, txn, iv->id, to, &n, &other);
	if (err)
		return err == -ESTALE ? 0 : err;
	if (rec_named(&r, to) && other.len)
		err =
		    rec_rename(st, txn, iv->id, &r, other.parent, other.name, other.len);
	if (!err)
		err = alias_del(st, txn, iv->id, to);
	return err ? err : alias_trim(st, txn, iv->id);
}

static int intent_undo_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	const struct un_node_intent_ref *ref = arg;
	struct un_node_name to = {ref->parent, ref->name, ref->len};
	uint8_t buf[INTENT_VAL_MAX];
	struct intent_view iv;
	un_id cur = UN_ID_NONE;
	int err = intent_get(st, txn, &to, buf, &iv);

	if (err == -ENOENT || err == -ESTALE ||
	    (!err && (iv.run != ref->run || iv.seq != ref->seq)))
		return 0;
	if (!err)
		err = names_get(st, txn, &to, &cur);
	if (err && err != -ENOENT)
		return err;
	/* A removal gives its node back where it was: TO, or where a rename
	 * had just brought it from (intent_put); the intent stays for the
	 * lookup of TO, which adopts the rename if the node is there. */
	if (iv.kind == UN_INTENT_REMOVE)
		return cur == iv.id  ? 0
		       : iv.from.len ? victim_restore(st, txn, &iv, &iv.from, false)
				     : victim_restore(st, txn, &iv, &to, true);
	err = 0;
	if (cur == iv.id)
		err = names_del(st, txn, &to, iv.id);
	if (!err && cur == iv.id && iv.kind == UN_INTENT_RENAME)
		err = rename_back(st, txn, &iv, &to);
	else if (!err && cur == iv.id)
		err = link_back(st, txn, &iv, &to);
	/* The victim even when the change itself is not in the table: it may
	 * be an earlier change's (intent_put). */
	return err ? err : victim_restore(st, txn, &iv, &to, true);
}

int un_node_intent_undo(struct un_state *st, const struct un_node_intent_ref *ref)
{
	return in_write_txn(st, intent_undo_txn, ref);
}

/* ---- intents: the API (invariant 14) ---- */

struct intent_args {
	enum un_intent_kind kind;
	un_id root, id;
	const struct un_node_name *from, *to;
	uint64_t seq;
};

static int intent_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	const struct intent_args *a = arg;

	return intent_put(st, txn, a->kind, a->root, a->id, a->from, a->to, a->seq);
}

int un_node_intent(struct un_state *st, enum un_intent_kind kind, un_id root, un_id id,
		   const struct un_node_name *from, const struct un_node_name *to,
		   uint64_t *seq)
{
	struct intent_args a = {kind, root, id, from, to, intent_seq_next(st)};
	/* No bump: an intent changes no name's node until it is adopted. */
	struct un_node_job j = {.fn = call_txn, .call = intent_txn, .arg = &a};

	assert((kind == UN_INTENT_RENAME) == (from != NULL));
	*seq = a.seq;
	return write_job(st, &j);
}

/* The renames of one chain re-applied at once: bounded, as the table is
 * data on disk. */
#define CHAIN_MAX 8

/* Re-applies, before rename IV, the rename of the same run that brought
 * IV's node to IV->from, when the table does not give the node that name:
 * the undo took a chain of renames of one node back to its start (a to b,
 * then b to c: intent.c rule 4), and the lookup of b found nothing there.
 * A node of one name would follow the last rename alone (rename_txn); one
 * of several would keep its record on a, which the disk no longer holds. */
static int rename_chain(struct un_state *st, MDB_txn *txn, const struct intent_view *iv,
			int depth)
{
	uint8_t buf[INTENT_VAL_MAX];
	struct intent_view prev;
	un_id cur;
	int err;

	if (depth >= CHAIN_MAX || !iv->from.len)
		return 0;
	err = names_get(st, txn, &iv->from, &cur);
	if (!err && cur == iv->id)
		return 0;
	if (err && err != -ENOENT)
		return err;
	err = intent_get(st, txn, &iv->from, buf, &prev);
	if (err)
		return err == -ENOENT || err == -ESTALE ? 0 : err;
	if (prev.kind != UN_INTENT_RENAME || prev.id != iv->id || prev.run != iv->run ||
	    prev.seq >= iv->seq)
		return 0;
	err = rename_chain(st, txn, &prev, depth + 1);
	return err ? err
		   : rename_txn(st, txn,
				&(struct rename_args){prev.id, &prev.from, &iv->from});
}

/* Rename IV to TO, after the renames of its chain. */
static int rename_apply(struct un_state *st, MDB_txn *txn, const struct intent_view *iv,
			const struct un_node_name *to)
{
	int err = rename_chain(st, txn, iv, 0);

	return err ? err
		   : rename_txn(st, txn, &(struct rename_args){iv->id, &iv->from, to});
}

/* Applies intent IV of name TO in TXN: the rename, link or removal it
 * announced, as the change's own job would (DI: the object's top
 * instance, for a link's links entry).  The intent stays: it is deleted
 * once the change is durable, or by the settle that adopted it. */
static int intent_apply(struct un_state *st, MDB_txn *txn, const struct intent_view *iv,
			const struct un_node_name *to, struct un_devino di)
{
	int err;

	if (iv->kind == UN_INTENT_REMOVE)
		err = node_unname(st, txn, iv->id, to);
	else if (iv->kind == UN_INTENT_RENAME)
		err = rename_apply(st, txn, iv, to);
	else
		err = link_txn(st, txn, &(struct link_args){iv->root, iv->id, to, di});
	if (!err)
		st->node_adopted = true;
	return err;
}

/* Invariant 14: when the intent of OBS's name is for a node whose record
 * matches OBS, the rename or link it announced happened on disk; it is
 * applied here and *F gets the node.  Invariant 15: else a node the intent
 * took the name from may be given it back (victim_revive).  -ENOENT when
 * there is nothing to adopt. */
static int intent_adopt(struct un_state *st, MDB_txn *txn, const struct un_node_obs *obs,
			struct found *f)
{
	struct un_node_name to = {obs->parent, obs->name, obs->namelen};
	uint8_t buf[INTENT_VAL_MAX];
	struct intent_view iv;
	struct rec_view r;
	bool mine;
	int err = intent_get(st, txn, &to, buf, &iv);

	if (err == -ESTALE)
		err = -ENOENT; /* unreadable */
	if (!err && iv.root != obs->root)
		err = -ENOENT;
	if (err)
		return err;
	/* The intent's own node there: its rename or link happened, or for a
	 * removal of a node a rename had just brought, the rename did and the
	 * removal did not (intent_put). */
	err = rec_get(st, txn, iv.id, &r);
	mine =
	    !err && rec_matches(&r, obs) && (iv.kind != UN_INTENT_REMOVE || iv.from.len);
	if (err && err != -ESTALE)
		return err;
	if (mine && iv.kind == UN_INTENT_REMOVE)
		iv.kind = UN_INTENT_RENAME;
	if (!mine) {
		err = victim_revive(st, txn, &iv, obs, &to, f);
		if (err != -ENOENT)
			return err;
	}
	if (!mine && iv.kind == UN_INTENT_REMOVE) {
		/* another object at a name whose removal the crash cut short:
		 * the removal happened; the new object gets a node of its own */
		err = intent_apply(st, txn, &iv, &to, (struct un_devino){0, 0});
		return err ? err : -ENOENT;
	}
	if (!mine)
		return -ENOENT;
	err = intent_apply(st, txn, &iv, &to, obs_raw_top(obs));
	if (!err)
		err = rec_get(st, txn, iv.id, &r);
	if (err)
		return err == -ESTALE ? -ENOENT : err;
	*f = (struct found){iv.id, r.fileid};
	return 0;
}

struct intent_apply_args {
	const struct un_node_intent_ref *ref;
	bool present;
};

/* Whether the disk shows the change of IV done, PRESENT telling whether
 * its object is at its name: a rename or link when it is; a removal when
 * it is not, or when it is and the removal carries the rename before it
 * (intent_put), which then happened alone. */
static bool apply_wanted(const struct intent_view *iv, bool present)
{
	if (iv->kind != UN_INTENT_REMOVE)
		return present;
	return !present || iv->from.len > 0;
}

/* un_node_intent_apply's transaction: 1 when there was nothing to apply. */
static int intent_apply_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	const struct intent_apply_args *a = arg;
	const struct un_node_intent_ref *ref = a->ref;
	struct un_node_name to = {ref->parent, ref->name, ref->len};
	uint8_t buf[INTENT_VAL_MAX];
	struct intent_view iv;
	struct rec_view r;
	int err = intent_get(st, txn, &to, buf, &iv);

	if (!err && (iv.id != ref->id || iv.run != ref->run || iv.seq != ref->seq))
		return 1;
	if (!err && !apply_wanted(&iv, a->present))
		return 1;
	if (!err && iv.kind == UN_INTENT_REMOVE && a->present)
		iv.kind = UN_INTENT_RENAME; /* the rename it carries did (intent_put) */
	if (!err)
		err = rec_get(st, txn, iv.id, &r);
	if (err == -ENOENT || err == -ESTALE)
		return 1;
	return err ? err : intent_apply(st, txn, &iv, &to, r.di);
}

int un_node_intent_apply(struct un_state *st, const struct un_node_intent_ref *ref,
			 bool present)
{
	struct intent_apply_args a = {ref, present};
	struct un_node_job j = {.fn = call_txn, .call = intent_apply_txn, .arg = &a};
	int err = write_job(st, &j);

	return err == 1 ? 0 : err ? err : 1;
}

/* Appends the intent at K, V to *OUT when it is of ROOT (and of ID). */
static int intent_collect(struct un_state *st, const MDB_val *k, const MDB_val *v,
			  un_id root, un_id id, struct un_node_intent_ref **out,
			  size_t *n, size_t *cap)
{
	struct un_node_intent_ref *ref;
	struct intent_view iv;
	uint64_t be;

	if (k->mv_size <= 8 || k->mv_size > 8 + UN_NAME_MAX ||
	    intent_parse(v->mv_data, v->mv_size, &iv) || iv.root != root ||
	    (id != UN_ID_NONE && iv.id != id))
		return 0;
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 4;
		void *p = un_sys_realloc(*out, ncap * sizeof(**out));

		if (!p)
			return -ENOMEM;
		*out = p;
		*cap = ncap;
	}
	ref = &(*out)[(*n)++];
	memcpy(&be, k->mv_data, 8);
	ref->kind = iv.kind;
	ref->id = iv.id;
	ref->parent = be64toh(be);
	ref->len = (uint16_t)(k->mv_size - 8);
	memcpy(ref->name, (const char *)k->mv_data + 8, ref->len);
	ref->name[ref->len] = '\0';
	ref->run = iv.run;
	ref->seq = iv.seq;
	ref->this_run = iv.run == st->run;
	return 0;
}

int un_node_intents(struct un_state *st, un_id root, un_id id,
		    struct un_node_intent_ref **out, size_t *n)
{
	MDB_val k, v;
	MDB_cursor *c = NULL;
	MDB_txn *txn;
	size_t cap = 0;
	int rc, err;

	*out = NULL;
	*n = 0;
	err = txn_begin(st, false, &txn);
	if (err)
		return err;
	err = un_mdb_err(mdb_cursor_open(txn, st->db_intents, &c));
	for (rc = err ? MDB_NOTFOUND : mdb_cursor_get(c, &k, &v, MDB_FIRST); !err && !rc;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
		err = intent_collect(st, &k, &v, root, id, out, n, &cap);
	if (!err && rc != MDB_NOTFOUND)
		err = un_mdb_err(rc);
	if (c)
		mdb_cursor_close(c);
	mdb_txn_abort(txn);
	if (err) {
		free(*out);
		*out = NULL;
		*n = 0;
	}
	return err;
}

struct intent_del_args {
	const struct un_node_name *to;
	uint64_t run, seq;
};

static int intent_del_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	const struct intent_del_args *a = arg;

	return intent_del(st, txn, a->to, a->run, a->seq);
}

int un_node_intent_del(struct un_state *st, const struct un_node_name *to, uint64_t run,
		       uint64_t seq)
{
	struct intent_del_args a = {to, run, seq};
	struct un_node_job j = {.fn = call_txn, .call = intent_del_txn, .arg = &a};

	return write_job(st, &j);
}

void un_node_intent_done(struct un_state *st, const struct un_node_name *to, uint64_t seq)
{
	struct un_intent_done *d = un_sys_malloc(sizeof(*d));

	if (!d) /* a leftover intent is settled at the next start */
		return;
	d->seq = seq;
	d->parent = to->parent;
	d->len = (uint16_t)to->len;
	memcpy(d->name, to->name, to->len);
	pthread_mutex_lock(&st->wq_lock);
	d->next = st->intents_done;
	st->intents_done = d;
	pthread_mutex_unlock(&st->wq_lock);
}

/* Deletes, in a transaction nested in TXN, the intents of the changes
 * DONE lists (un_node_intent_done), and frees the list: true when the
 * deletions are to be committed.  Best effort: what fails stays for the
 * next start to settle. */
static bool dones_run(struct un_state *st, MDB_txn *txn, struct un_intent_done *done)
{
	struct un_intent_done *next;
	MDB_txn *child = NULL;
	int err = !done	 ? -ENOENT
		  : !txn ? -EIO /* only to free the list */
			 : un_mdb_err(mdb_txn_begin(st->env, txn, 0, &child));

	for (; done; done = next) {
		next = done->next;
		if (!err)
			err = intent_del(
			    st, child,
			    &(struct un_node_name){done->parent, done->name, done->len},
			    st->run, done->seq);
		free(done);
	}
	if (child && err)
		mdb_txn_abort(child);
	return !err && !un_mdb_err(mdb_txn_commit(child));
}

static int nothing_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	(void)st, (void)txn, (void)arg;
	return 0;
}

/* Runs a batch with whatever is queued: every job before it commits. */
static void queue_commit(struct un_state *st)
{
	struct un_node_job j = {.fn = call_txn, .call = nothing_txn};

	write_job(st, &j);
}

void un_node_ahead_commit(struct un_state *st)
{
	if (atomic_load(&st->ahead))
		queue_commit(st);
}

void un_node_dones_commit(struct un_state *st)
{
	if (st->intents_done)
		queue_commit(st);
}

void un_node_dones_free(struct un_state *st)
{
	for (struct un_intent_done *d = st->intents_done, *next; d; d = next) {
		next = d->next;
		free(d);
	}
	st->intents_done = NULL;
}

/* ---- lookups answered ahead of their commit (invariant 16) ---- */

/* A lookup's node answered ahead of its commit (invariant 16): the job,
 * the copy of the observation it runs on, and nobody waiting for it. */
struct ahead_job {
	struct un_node_job job; /* first: batch_end frees the whole */
	struct un_devino inst[UN_LAYERS_MAX], raw[UN_LAYERS_MAX];
	char name[UN_NAME_MAX + 1];
};

static int ahead_txn(struct un_state *st, MDB_txn *txn, struct un_node_job *j)
{
	struct found f = {UN_ID_NONE, UN_ID_NONE};

	return assign_txn(st, txn, &(struct assign_args){&j->obs, 1, &f});
}

/* Whether the writer, running OBS's job after the jobs queued now, would
 * give it the lower id LID: no record holds LID (id_choose) and no intent
 * of OBS's name would be adopted instead (intent_adopt); read in a read
 * transaction begun after the miss.  A change that could alter either
 * after this read is queued after the job (a rename's intent commits
 * before the rename, a record of LID is only ever its own object's). */
static int ahead_decides(struct un_state *st, const struct un_node_obs *obs, un_id lid)
{
	uint8_t buf[INTENT_VAL_MAX];
	struct intent_view iv;
	MDB_txn *txn;
	int err = txn_begin(st, false, &txn);

	if (err)
		return err;
	err = id_held(st, txn, lid); /* id_choose's test */
	if (err == -ENOENT)
		err = intent_get(
		    st, txn, &(struct un_node_name){obs->parent, obs->name, obs->namelen},
		    buf, &iv);
	mdb_txn_abort(txn);
	return err == -ENOENT ? 0 : err ? err : -EEXIST;
}

/* Queues OBS's job with nobody waiting for it, when it may be answered
 * ahead (invariant 16): *F gets the id, or -EAGAIN (the caller waits). */
static int assign_ahead(struct un_state *st, const struct un_node_obs *obs,
			struct found *f)
{
	un_id lid = un_lower_id_of(obs);
	struct ahead_job *a;
	int err;

	if (lid == UN_ID_NONE || obs->links == UN_LINKS_GROUP || obs->pinned ||
	    obs->ninst > UN_LAYERS_MAX)
		return -EAGAIN;
	err = atomic_load(&st->ahead) < AHEAD_MAX ? ahead_decides(st, obs, lid) : -EAGAIN;
	a = err ? NULL : un_sys_malloc(sizeof(*a));
	if (!a)
		return -EAGAIN;
	a->job = (struct un_node_job){.fn = ahead_txn, .obs = *obs, .ahead = true};
	memcpy(a->inst, obs->inst, obs->ninst * sizeof(a->inst[0]));
	if (obs->raw)
		memcpy(a->raw, obs->raw, obs->ninst * sizeof(a->raw[0]));
	memcpy(a->name, obs->name, obs->namelen);
	a->name[obs->namelen] = '\0';
	a->job.obs.inst = a->inst;
	a->job.obs.raw = obs->raw ? a->raw : NULL;
	a->job.obs.name = a->name;
	atomic_fetch_add(&st->ahead, 1);
	job_queue(st, &a->job);
	*f = (struct found){lid, lid}; /* node_create's but for a group */
	return 0;
}

/* ---- a reset of the upper layer ---- */

int un_node_name_id(struct un_state *st, const struct un_node_name *nm, un_id *id)
{
	MDB_txn *txn;
	int err = txn_begin(st, false, &txn);

	if (err)
		return err;
	err = names_get(st, txn, nm, id);
	mdb_txn_abort(txn);
	return err;
}

struct forget_args {
	const struct un_node_upper *up;
	size_t n, forgot;
};

/* Forgets the node of UP when its record is the upper object's own: made
 * in the upper (no origin) and of that very inode.  A copied-up object's
 * record keeps its origin, so it matches the lower object again; so does a
 * merged directory's first seen with its upper part, given its lower part
 * as its origin here. */
static int forget_one(struct un_state *st, MDB_txn *txn, const struct un_node_upper *up,
		      size_t *forgot)
{
	static const struct un_devino none;
	struct un_node_name nm = {up->parent, up->name, up->len};
	char name[UN_NAME_MAX + 1];
	struct rec_view r;
	un_id id;
	int err = names_get(st, txn, &nm, &id);

	if (!err)
		err = rec_get(st, txn, id, &r);
	if (err)
		return err == -ENOENT || err == -ESTALE ? 0 : err;
	if (!di_eq(r.origin, none) || !di_eq(r.di, up->raw))
		return 0;
	if (!di_eq(up->lower, none)) { /* as if copied up from it */
		memcpy(name, r.name, r.namelen);
		r.name = name;
		r.origin = up->lower;
		return rec_write(st, txn, id, &r);
	}
	err = node_unname(st, txn, id, &nm);
	*forgot += !err;
	return err;
}

static int forget_txn(struct un_state *st, MDB_txn *txn, const void *arg)
{
	struct forget_args *a = (struct forget_args *)arg;
	int err = 0;

	for (size_t i = 0; !err && i < a->n; i++)
		err = forget_one(st, txn, &a->up[i], &a->forgot);
	return err;
}

int un_node_forget_upper(struct un_state *st, const struct un_node_upper *up, size_t n,
			 size_t *forgot)
{
	struct forget_args a = {.up = up, .n = n};
	int err = n ? in_write_txn(st, forget_txn, &a) : 0;

	*forgot = err ? 0 : a.forgot;
	return err;
}
