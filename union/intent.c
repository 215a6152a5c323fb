/* SPDX-License-Identifier: Apache-2.0 */
/* intent.c - a rename or link that a crash cut short keeps its object's
 * node: the intents node.c holds are adopted by looking their names up.
 *
 * Design notes
 * ------------
 * A RENAME or LINK writes an intent before it changes the disk and deletes
 * it with its own commit (node.c invariant 14).  A crash, or a commit that
 * failed, between the two leaves the disk changed and the table behind:
 * the object is under a name the table does not give to its node.  The
 * lookup of that name adopts the intent (node.c, intent_adopt), so the
 * name gets the object's old node and fileid; what is left is the handle
 * a client already holds, whose record still names the old place.  The
 * REMOVE of one of several names of a node writes one too, with the move
 * of the record to another name: the removed name must leave the node's
 * aliases, or a later remove could move the record to it.  Two moments
 * settle intents here, both by looking the intent's name up:
 *
 *   at the export's open (un_intents_settle_open): every intent of an
 *     earlier run (no change of this run is under way) is looked up, and
 *     deleted after, adopted or not: its rename or link either happened,
 *     and the lookup adopted it, or did not, and the intent is void;
 *   at a handle that resolves to nothing (un_intents_settle_id, from
 *     lookup.c): the intents of that node, of any run, are looked up and
 *     the resolve is tried again when one was adopted.  A change of this
 *     run still under way may be adopted so: only when its disk change is
 *     done, and it commits the same names itself.
 *
 * Rules:
 *  1. What the layers show decides: a rename or link is adopted only for
 *     the intent's own object at its name (its record matching what the
 *     lookup saw), a removal only when the name is gone or holds another
 *     object.
 *  2. Settling fails an export's open only when the table cannot be read
 *     (as the root's node would), never a resolve: what cannot be looked
 *     up stays as it was (a leftover intent is harmless, rule 1).
 *  3. A settle resolves the intent's directory, which may itself wait for
 *     a settle (a directory renamed, then its entry); SETTLE_DEPTH bounds
 *     that chain, per thread, as the table is data on disk.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>

#include "un_private.h"

#define SETTLE_DEPTH 8

static __thread int settle_depth;

/* Looks REF's name up in EX, which adopts REF when what it announced
 * happened: 1 if it was adopted, 0 if not, or -errno. */
static int settle_one(struct un_export *ex, const struct un_node_intent_ref *ref)
{
	struct un_node_name to = {ref->parent, ref->name, ref->len};
	struct un_obj *dir = NULL, *o = NULL;
	bool removal = ref->kind == UN_INTENT_REMOVE;
	int err;

	err = un_resolve(ex, ref->parent, &dir);
	if (!err)
		err = un_lookup(ex, dir, ref->name, &o);
	/* A removal happened when the name is gone (another object there
	 * adopted it in the lookup); a rename or link when the node is there,
	 * which the lookup adopted unless it found the node by its inode (a
	 * file with several links), not by the name. */
	if (removal && err == -ENOENT)
		err = un_node_intent_apply(ex->st, ref->id, &to);
	else if (!err && !removal && o->id == ref->id)
		err = un_node_intent_apply(ex->st, ref->id, &to);
	else if (!err)
		err = -ENOENT;
	un_obj_put(o);
	un_obj_put(dir);
	return err ? err : 1;
}

/* The intents of EX (of node ID only, unless UN_ID_NONE), each looked up;
 * with LEFTOVERS those of earlier runs only, deleted after.  *ADOPTED gets
 * how many were adopted; fails only when the table cannot be read. */
static int settle(struct un_export *ex, un_id id, bool leftovers, size_t *adopted)
{
	struct un_node_intent_ref *refs;
	size_t n;
	int err;

	*adopted = 0;
	if (settle_depth >= SETTLE_DEPTH)
		return 0;
	err = un_node_intents(ex->st, ex->root_id, id, &refs, &n);
	if (err)
		return err;
	settle_depth++;
	for (size_t i = 0; i < n; i++) {
		const struct un_node_intent_ref *r = &refs[i];

		if (leftovers && r->this_run)
			continue;
		*adopted += settle_one(ex, r) == 1;
		if (leftovers)
			un_node_intent_del(
			    ex->st, r->id,
			    &(struct un_node_name){r->parent, r->name, r->len});
	}
	settle_depth--;
	free(refs);
	return 0;
}

int un_intents_settle_open(struct un_export *ex)
{
	size_t adopted;
	int err = settle(ex, UN_ID_NONE, true, &adopted);

	if (adopted)
		un_notice(ex->st,
			  "export %s: %zu rename(s), link(s) or removal(s) cut short "
			  "by a crash settled in the node table",
			  ex->path, adopted);
	return err;
}

bool un_intents_settle_id(struct un_export *ex, un_id id)
{
	size_t adopted;

	return !settle(ex, id, false, &adopted) && adopted;
}
