/* SPDX-License-Identifier: Apache-2.0 */
/* intent.c - a rename, link or removal that a crash cut short keeps its
 * objects' nodes: the intents node.c holds are settled by looking their
 * names up.
 *
 * Design notes
 * ------------
 * A RENAME or LINK writes an intent before it changes the disk (node.c
 * invariant 14), and every change that takes a name from a node keeps
 * one, with that node's record, until its directories are fsynced
 * (invariant 15).  A crash leaves the disk and the table apart either
 * way: the disk changed and the table behind (a process killed between
 * the two), or the table's commit durable and the directory change lost
 * (a power cut before the fsync).  The lookup of the name adopts an intent
 * whose change the disk shows (node.c, intent_adopt), so the name gets the
 * object's old node and fileid.  The REMOVE of one of several names of a
 * node writes one ahead too, with the move of the record to another name:
 * the removed name must leave the node's aliases, or a later remove could
 * move the record to it.  Two moments settle intents here:
 *
 *   at the export's open (un_intents_settle_open): the intents of an
 *     earlier run (no change of this run is under way) are first taken
 *     back in the table, newest first (un_node_intent_undo), then looked
 *     up oldest first, which re-applies those the layers show done, and
 *     deleted; all before the first call, flushed;
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
 *     or written (as the root's node would), never a resolve: what cannot
 *     be looked up stays as it was (a leftover intent is harmless, rule 1).
 *  3. A settle resolves the intent's directory, which may itself wait for
 *     a settle (a directory renamed, then its entry); SETTLE_DEPTH bounds
 *     that chain, per thread, as the table is data on disk.
 *  4. Leftovers are undone newest first and looked up oldest first, in the
 *     order their run wrote them (seq): a chain of renames of one object
 *     (a to b, then b to c) goes back to a, and each step is re-applied
 *     only if the disk has it; a step re-applied re-applies the steps
 *     before it that the disk passed through (node.c, rename_chain).  A
 *     settle flushes before the export serves, so the leftovers of two runs
 *     never meet.
 *  5. An undo that cannot give a node back a name, as an object made there
 *     later holds it (a create at the name a rename left), writes an
 *     intent of that name for the node instead (node.c, name_back); so
 *     does the undo of a removal that gives its node the name a rename had
 *     just brought it from, as no intent of that rename is left (node.c,
 *     victim_restore).  The settle looks those up last, so that whichever
 *     object the disk shows there keeps or takes the name, and deletes
 *     them.
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
	struct un_obj *dir = NULL, *o = NULL;
	bool removal = ref->kind == UN_INTENT_REMOVE;
	int err;

	err = un_resolve(ex, ref->parent, &dir);
	if (!err)
		err = un_lookup(ex, dir, ref->name, &o);
	/* A removal happened when the name is gone (another object there
	 * adopted it in the lookup); a rename or link when the node is there,
	 * which the lookup adopted unless it found the node by its inode (a
	 * file with several links), not by the name; so did the rename that a
	 * removal of the node there carries (node.c, intent_put). */
	if (removal && err == -ENOENT)
		err = un_node_intent_apply(ex->st, ref, false);
	else if (!err)
		err = o->id == ref->id ? un_node_intent_apply(ex->st, ref, true) : 0;
	un_obj_put(o);
	un_obj_put(dir);
	return err;
}

/* Looks REFS[0..n-1] up in order; *ADOPTED gets how many were adopted. */
static void lookup_all(struct un_export *ex, const struct un_node_intent_ref *refs,
		       size_t n, size_t *adopted)
{
	settle_depth++;
	for (size_t i = 0; i < n; i++)
		*adopted += settle_one(ex, &refs[i]) == 1;
	settle_depth--;
}

/* The intents of EX of node ID (of any run), each looked up; *ADOPTED
 * gets how many were adopted; fails only when the table cannot be read. */
static int settle_id(struct un_export *ex, un_id id, size_t *adopted)
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
	lookup_all(ex, refs, n, adopted);
	free(refs);
	return 0;
}

/* Orders intents as their run wrote them (a settle sees one run's). */
static int seq_order(const void *a, const void *b)
{
	const struct un_node_intent_ref *x = a, *y = b;

	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Moves the intents of earlier runs to the front of REFS[0..n-1], in the
 * order they were written; returns how many there are. */
static size_t leftovers_sort(struct un_node_intent_ref *refs, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (!refs[i].this_run)
			refs[k++] = refs[i];
	if (k > 1) /* REFS is NULL when there are none */
		qsort(refs, k, sizeof(*refs), seq_order);
	return k;
}

static int del_all(struct un_export *ex, const struct un_node_intent_ref *refs, size_t n)
{
	int err = 0;

	for (size_t i = 0; i < n && !err; i++)
		err = un_node_intent_del(
		    ex->st,
		    &(struct un_node_name){refs[i].parent, refs[i].name, refs[i].len},
		    refs[i].run, refs[i].seq);
	return err;
}

/* The intents the undo wrote (rule 5), looked up and deleted. */
static int settle_undo_intents(struct un_export *ex)
{
	struct un_node_intent_ref *refs;
	size_t n, k = 0, adopted = 0;
	int err = un_node_intents(ex->st, ex->root_id, UN_ID_NONE, &refs, &n);

	for (size_t i = 0; !err && i < n; i++)
		if (refs[i].this_run)
			refs[k++] = refs[i];
	if (!err) {
		lookup_all(ex, refs, k, &adopted);
		err = del_all(ex, refs, k);
	}
	free(refs);
	return err;
}

/* Undoes the leftovers REFS[0..n-1] newest first (rule 4), then looks
 * them up oldest first; *ADOPTED gets how many the layers showed done. */
static int settle_leftovers(struct un_export *ex, struct un_node_intent_ref *refs,
			    size_t n, size_t *adopted)
{
	int err = 0;

	*adopted = 0;
	for (size_t i = n; i-- > 0 && !err;)
		err = un_node_intent_undo(ex->st, &refs[i]);
	if (!err)
		lookup_all(ex, refs, n, adopted);
	if (!err)
		err = del_all(ex, refs, n);
	if (!err && n)
		err = settle_undo_intents(ex);
	/* Durable before the first call is served: a later crash finds the
	 * intents of one run at most. */
	return err || !n ? err : un_state_sync(ex->st);
}

int un_intents_settle_open(struct un_export *ex)
{
	struct un_node_intent_ref *refs;
	size_t n, adopted;
	int err = un_node_intents(ex->st, ex->root_id, UN_ID_NONE, &refs, &n);

	if (err)
		return err;
	n = leftovers_sort(refs, n);
	err = settle_leftovers(ex, refs, n, &adopted);
	free(refs);
	if (!err && n)
		un_notice(
		    ex->st,
		    "export %s: %zu change(s) a crash cut short settled in the node "
		    "table as the layers show them (%zu done, %zu not)",
		    ex->path, n, adopted, n - adopted);
	return err;
}

bool un_intents_settle_id(struct un_export *ex, un_id id)
{
	size_t adopted;

	return !settle_id(ex, id, &adopted) && adopted;
}
