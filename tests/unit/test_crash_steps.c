/* SPDX-License-Identifier: Apache-2.0 */
/* test_crash_steps.c - node.c invariant 14: every namespace change, cut
 * short at each of its steps, leaves every live object with its node id
 * and fileid, and every handle of a live object resolving to it.
 *
 * Each change runs once whole, to count the calls it makes through the
 * seam (sys.c).  Then, for each call N, from the same start:
 *   kill  a child process opens the state and the export, arms the seam to
 *         SIGKILL it before call N and runs the change; the parent opens the
 *         state again, as a restarted server does;
 *   fail  call N fails with EIO in this process; the checks run at once,
 *         and again after a restart.
 * The checks: each watched object that is still there (at its old name, or
 * at its new one when the change was made) has its old node id and fileid
 * by lookup, and its old node resolves to it; an object the change removes
 * either is gone (its node stale) or is still itself; the work dir is
 * empty after a restart.  A change that can be retried (an exclusive
 * create) succeeds when retried with the same verifier.
 *
 * A power cut can do what no kill does (node.c invariant 15): keep the
 * table's commits and lose the directory change they followed.  Each
 * change with a way to lose it runs whole in a child that ends without
 * closing anything (the intents the change leaves until its directories
 * are fsynced stay in the table); the parent puts the upper back as it was
 * before the change (LOSE, with the inodes it kept aside: KEEP) and
 * restarts: every watched object is at its old name with its node and
 * fileid, and no intent is left.  The same run without LOSE finds the
 * change made.
 */
#include "test_wr.h"

#include <signal.h>

/* One object the checks follow: where it is before the change and where
 * once the change is made (NULL: the change removes it); STAYS: it keeps
 * its old name too (a link). */
struct watch {
	const char *before, *after;
	bool stays;
	const char *lost; /* where LOSE leaves it, if not BEFORE */
};

struct recorded {
	un_id id, fileid;
};

#define WATCH_MAX 4

struct scenario {
	const char *name;
	void (*layers)(struct fx *fx); /* on disk, before the export opens */
	int (*prepare)(struct fx *fx); /* through the engine; may be NULL */
	int (*change)(struct fx *fx);
	struct watch w[WATCH_MAX];
	bool retry_succeeds; /* the change again must answer 0 */
	/* more changes after the checks, and their own check (may be NULL) */
	void (*then)(struct fx *fx, const struct recorded *rec);
	/* the upper as before the change, as a power cut may leave it (may be
	 * NULL), with the inode KEEP names in the upper linked aside first */
	void (*lose)(struct fx *fx);
	const char *keep;
	bool cut_only; /* two changes: not killed or failed at each step */
};

/* ---- the changes ---- */

/* The usual tree: d merges l1, l2 and the upper; p and q are upper only. */
static void layers_std(struct fx *fx)
{
	t_file(fx, "l2/d/low", "a lower file, 30 bytes long..");
	t_file(fx, "l1/d/top", "a file of the top lower");
	t_file(fx, "u/d/up", "an upper file");
	t_file(fx, "u/d/target", "the target, replaced");
	t_file(fx, "u/p/sub/f", "below a moving directory");
	t_mkdir(fx, "u/q");
	t_mkdir(fx, "u/d/emptyup");
	t_mkdir(fx, "l2/d/emptylow");
	t_mkdir(fx, "w");
}

static int ch_rename_upper(struct fx *fx)
{
	return w_rename(fx, "d", "up", "d", "moved");
}

static int ch_rename_lower(struct fx *fx)
{
	return w_rename(fx, "d", "low", "q", "low2");
}

static int ch_rename_over(struct fx *fx)
{
	return w_rename(fx, "d", "top", "d", "target");
}

static int ch_rename_dir(struct fx *fx)
{
	return w_rename(fx, "p", "sub", "q", "sub2");
}

static int ch_link_lower(struct fx *fx)
{
	return w_link(fx, "d/low", "q", "hard");
}

static int ch_link_upper(struct fx *fx)
{
	return w_link(fx, "d/up", "d", "up2");
}

static int prep_link(struct fx *fx)
{
	return w_link(fx, "d/up", "q", "other");
}

static int prep_link_target(struct fx *fx)
{
	return w_link(fx, "d/target", "q", "tlink");
}

static int ch_remove_linked(struct fx *fx)
{
	return w_remove(fx, "d", "up", false);
}

/* After a remove of one of two names: a third name (after the first in the aliases'
 * order), and the second removed; the node lives on under the third, whatever the first
 * left in the table (its name must not be where the record goes). */
static void then_relink(struct fx *fx, const struct recorded *rec)
{
	struct un_obj *o = NULL;

	assert_int_equal(w_link(fx, "q/other", "d", "zz"), 0);
	assert_int_equal(w_remove(fx, "q", "other", false), 0);
	assert_int_equal(un_resolve(fx->ex, rec[0].id, &o), 0);
	assert_int_equal(o->fileid, rec[0].fileid);
	un_obj_put(o);
	assert_int_equal(t_id(fx, "d/zz"), rec[0].id);
}

/* d/up gets two more names, q/other and q/third. */
static int prep_links2(struct fx *fx)
{
	int rc = w_link(fx, "d/up", "q", "other");

	return rc ? rc : w_link(fx, "d/up", "q", "third");
}

/* One name of several renamed, then the new name removed: the remove's
 * intent carries the rename's undo (node.c, intent_put). */
static int ch_rename_remove_linked(struct fx *fx)
{
	int rc = w_rename(fx, "d", "up", "d", "moved");

	return rc ? rc : w_remove(fx, "d", "moved", false);
}

/* REC's node resolves to its object, which LIVE (a path) gives too. */
static void node_at(struct fx *fx, const struct recorded *rec, const char *live)
{
	struct un_obj *o = NULL;

	assert_int_equal(un_resolve(fx->ex, rec->id, &o), 0);
	assert_int_equal(o->fileid, rec->fileid);
	un_obj_put(o);
	assert_int_equal(t_id(fx, live), rec->id);
}

/* The node's names removed one by one down to the last the disk holds: it
 * lives on under the others, whatever the changes before left in the
 * table (a name the disk does not hold must not be among its names, where
 * its record could go; a name it holds must be, or its last remove would
 * forget the node). */
static void then_remove_other(struct fx *fx, const struct recorded *rec)
{
	const char *last = !t_lookup_rc(fx, "d/up")	 ? "d/up"
			   : !t_lookup_rc(fx, "d/moved") ? "d/moved"
							 : NULL;

	assert_int_equal(w_remove(fx, "q", "other", false), 0);
	node_at(fx, &rec[0], "q/third");
	if (!last)
		return;
	assert_int_equal(w_remove(fx, "q", "third", false), 0);
	node_at(fx, &rec[0], last);
}

static int ch_remove_lower(struct fx *fx)
{
	return w_remove(fx, "d", "low", false);
}

static int ch_remove_upper(struct fx *fx)
{
	return w_remove(fx, "d", "up", false);
}

/* Two changes of one name, both under way at a cut (node.c invariant 15):
 * the first one's sync fails (EIO), so that the cut finds it between its
 * change and its directories' fsync, its intent still in the table.  The
 * sync that fails is the seam's NTH of the change: a remove's first is its
 * own; a rename's first is its intent's, written early as best effort and
 * again under the locks when it failed, so its second.  -EPROTO when the
 * first change did not fail so (the seam's count moved). */
static int in_flight(int (*first)(struct fx *), unsigned long nth, struct fx *fx)
{
	int rc;

	un_sys_inject_reset();
	un_sys_inject(UN_SYS_SYNC, nth, EIO);
	rc = first(fx);
	un_sys_inject_reset();
	return rc == -EIO ? 0 : -EPROTO;
}

static int rename_up(struct fx *fx)
{
	return w_rename(fx, "d", "up", "d", "moved");
}

static int remove_up(struct fx *fx)
{
	return w_remove(fx, "d", "up", false);
}

static int ch_rename_remove(struct fx *fx)
{
	int rc = in_flight(rename_up, 2, fx);

	return rc ? rc : w_remove(fx, "d", "moved", false);
}

/* Two renames of one name of several, the first still under way: a chain
 * (intent.c rule 4). */
static int ch_rename_chain_linked(struct fx *fx)
{
	int rc = in_flight(rename_up, 2, fx);

	return rc ? rc : w_rename(fx, "d", "moved", "d", "last");
}

static int ch_rename_create(struct fx *fx)
{
	int rc = in_flight(rename_up, 2, fx);

	return rc ? rc : w_create(fx, "d", "up");
}

static int ch_remove_rename(struct fx *fx)
{
	int rc = in_flight(remove_up, 1, fx);

	return rc ? rc : w_rename(fx, "d", "top", "d", "up");
}

static int ch_remove_create(struct fx *fx)
{
	int rc = in_flight(remove_up, 1, fx);

	return rc ? rc : w_create(fx, "d", "up");
}

static int link_up(struct fx *fx)
{
	return w_link(fx, "d/up", "q", "other");
}

/* A link still under way when the name its record holds is removed: the
 * record moves to the link's name (node.c, remove_ahead_txn). */
static int ch_link_remove(struct fx *fx)
{
	int rc = in_flight(link_up, 2, fx);

	return rc ? rc : w_remove(fx, "d", "up", false);
}

/* The names the node has left, but the last, removed: it lives on under
 * that one. */
static void then_keep_one(struct fx *fx, const struct recorded *rec)
{
	bool up = !t_lookup_rc(fx, "d/up"), other = !t_lookup_rc(fx, "q/other");

	if (up && other)
		assert_int_equal(w_remove(fx, "d", "up", false), 0);
	node_at(fx, &rec[0], other ? "q/other" : "d/up");
}

static int ch_rmdir_upper(struct fx *fx)
{
	return w_remove(fx, "d", "emptyup", true);
}

static int ch_rmdir_lower(struct fx *fx)
{
	return w_remove(fx, "d", "emptylow", true);
}

static int ch_create_verf(struct fx *fx)
{
	static const uint8_t v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	struct un_obj *d = NULL, *o = NULL;
	int rc = t_walk(fx, "d", &d);

	if (!rc)
		rc = un_create_verf(SYNC_CX, fx->ex, d, "excl", v, &o);
	un_obj_put(o);
	un_obj_put(d);
	return rc;
}

/* ---- the upper as a power cut may leave it: the change lost ---- */

static void mv(struct fx *fx, const char *from, const char *to)
{
	char f[PATH_MAX];

	snprintf(f, sizeof(f), "%s", t_path(fx, from));
	if (rename(f, t_path(fx, to)))
		fail_msg("rename %s %s: %s", from, to, strerror(errno));
}

static void ln(struct fx *fx, const char *from, const char *to)
{
	char f[PATH_MAX];

	snprintf(f, sizeof(f), "%s", t_path(fx, from));
	if (link(f, t_path(fx, to)))
		fail_msg("link %s %s: %s", from, to, strerror(errno));
}

static void rm(struct fx *fx, const char *path)
{
	if (unlink(t_path(fx, path)))
		fail_msg("unlink %s: %s", path, strerror(errno));
}

static void lose_rename_upper(struct fx *fx)
{
	mv(fx, "u/d/moved", "u/d/up");
}

/* The copy-up stays (it is durable on its own), the move goes. */
static void lose_rename_lower(struct fx *fx)
{
	mv(fx, "u/q/low2", "u/d/low");
}

static void lose_rename_over(struct fx *fx)
{
	mv(fx, "u/d/target", "u/d/top");
	ln(fx, "keep/inode", "u/d/target");
}

static void lose_rename_over_linked(struct fx *fx)
{
	mv(fx, "u/d/target", "u/d/top");
	ln(fx, "u/q/tlink", "u/d/target");
}

static void lose_rename_dir(struct fx *fx)
{
	mv(fx, "u/q/sub2", "u/p/sub");
}

static void lose_link_lower(struct fx *fx)
{
	rm(fx, "u/q/hard");
}

static void lose_link_upper(struct fx *fx)
{
	rm(fx, "u/d/up2");
}

static void lose_remove_linked(struct fx *fx)
{
	ln(fx, "u/q/other", "u/d/up");
}

static void lose_remove_linked_only(struct fx *fx)
{
	ln(fx, "u/q/other", "u/d/moved");
}

static void lose_link_remove(struct fx *fx)
{
	rm(fx, "u/q/other");
	ln(fx, "keep/inode", "u/d/up");
}

static void lose_rename_chain_linked(struct fx *fx)
{
	mv(fx, "u/d/last", "u/d/up");
}

static void lose_remove_upper(struct fx *fx)
{
	ln(fx, "keep/inode", "u/d/up");
}

static void lose_remove_only(struct fx *fx)
{
	ln(fx, "keep/inode", "u/d/moved");
}

static void lose_rename_create(struct fx *fx)
{
	rm(fx, "u/d/up");
	mv(fx, "u/d/moved", "u/d/up");
}

static void lose_remove_rename(struct fx *fx)
{
	mv(fx, "u/d/up", "u/d/top");
	ln(fx, "keep/inode", "u/d/up");
}

static void lose_whiteout_low(struct fx *fx)
{
	rm(fx, "u/d/low");
}

static void lose_whiteout_emptylow(struct fx *fx)
{
	rm(fx, "u/d/emptylow");
}

#define MOVES(a, b)                                                                      \
	{                                                                                \
		.before = (a), .after = (b)                                              \
	}
#define LINKS(a, b)                                                                      \
	{                                                                                \
		.before = (a), .after = (b), .stays = true                               \
	}
#define GOES(a)                                                                          \
	{                                                                                \
		.before = (a)                                                            \
	}

static const struct scenario scenarios[] = {
    {.name = "rename of an upper file",
     .layers = layers_std,
     .change = ch_rename_upper,
     .w = {MOVES("d/up", "d/moved"), MOVES("d/low", "d/low")},
     .lose = lose_rename_upper},
    {.name = "rename of a lower file across dirs (copy-up)",
     .layers = layers_std,
     .change = ch_rename_lower,
     .w = {MOVES("d/low", "q/low2"), MOVES("d/top", "d/top")},
     .lose = lose_rename_lower},
    {.name = "rename over an existing name",
     .layers = layers_std,
     .change = ch_rename_over,
     .w = {MOVES("d/top", "d/target"), GOES("d/target")},
     .lose = lose_rename_over,
     .keep = "d/target"},
    {.name = "rename over a name with another link",
     .layers = layers_std,
     .prepare = prep_link_target,
     .change = ch_rename_over,
     .w = {MOVES("d/top", "d/target"), MOVES("q/tlink", "q/tlink")},
     .lose = lose_rename_over_linked},
    {.name = "rename of a directory",
     .layers = layers_std,
     .change = ch_rename_dir,
     .w = {MOVES("p/sub", "q/sub2"), MOVES("p/sub/f", "q/sub2/f")},
     .lose = lose_rename_dir},
    {.name = "link of a lower file (copy-up)",
     .layers = layers_std,
     .change = ch_link_lower,
     .w = {LINKS("d/low", "q/hard")},
     .lose = lose_link_lower},
    {.name = "link of an upper file",
     .layers = layers_std,
     .change = ch_link_upper,
     .w = {LINKS("d/up", "d/up2")},
     .lose = lose_link_upper},
    {.name = "remove of a name with another link",
     .layers = layers_std,
     .prepare = prep_link,
     .change = ch_remove_linked,
     .w = {MOVES("q/other", "q/other"), MOVES("d/low", "d/low")},
     .then = then_relink,
     .lose = lose_remove_linked},
    {.name = "rename of one of several names, then remove of the new name",
     .layers = layers_std,
     .prepare = prep_links2,
     .change = ch_rename_remove_linked,
     .w = {MOVES("q/other", "q/other"), MOVES("q/third", "q/third")},
     .then = then_remove_other,
     .lose = lose_remove_linked}, /* d/up back, d/moved never made */
    {.name = "rename of one of several names, then remove of the new name (only "
	     "the remove lost)",
     .layers = layers_std,
     .prepare = prep_links2,
     .change = ch_rename_remove_linked,
     .w = {MOVES("q/other", "q/other"), MOVES("q/third", "q/third")},
     .then = then_remove_other,
     .lose = lose_remove_linked_only,
     .cut_only = true},
    {.name = "remove of a lower file (white-out)",
     .layers = layers_std,
     .change = ch_remove_lower,
     .w = {GOES("d/low"), MOVES("d/top", "d/top")},
     .lose = lose_whiteout_low},
    {.name = "remove of an upper file",
     .layers = layers_std,
     .change = ch_remove_upper,
     .w = {GOES("d/up"), MOVES("d/low", "d/low")},
     .lose = lose_remove_upper,
     .keep = "d/up"},
    {.name = "rename, then remove of the new name",
     .layers = layers_std,
     .change = ch_rename_remove,
     .w = {GOES("d/up"), MOVES("d/low", "d/low")},
     .lose = lose_remove_upper, /* the file back at its first name */
     .keep = "d/up",
     .cut_only = true},
    {.name = "rename, then remove of the new name (only the remove lost)",
     .layers = layers_std,
     .change = ch_rename_remove,
     .w = {{.before = "d/up", .lost = "d/moved"}},
     .lose = lose_remove_only,
     .keep = "d/up",
     .cut_only = true},
    {.name = "rename, then a create at the old name",
     .layers = layers_std,
     .change = ch_rename_create,
     .w = {MOVES("d/up", "d/moved")},
     .lose = lose_rename_create,
     .cut_only = true},
    {.name = "remove, then a rename onto the name",
     .layers = layers_std,
     .change = ch_remove_rename,
     .w = {GOES("d/up"), MOVES("d/top", "d/up")},
     .lose = lose_remove_rename,
     .keep = "d/up",
     .cut_only = true},
    {.name = "remove, then a create at the name",
     .layers = layers_std,
     .change = ch_remove_create,
     .w = {GOES("d/up")},
     .cut_only = true},
    {.name = "rename of one of several names, then again",
     .layers = layers_std,
     .prepare = prep_links2,
     .change = ch_rename_chain_linked,
     .w = {MOVES("d/up", "d/last"), MOVES("q/other", "q/other")},
     .then = then_remove_other,
     .lose = lose_rename_chain_linked,
     .cut_only = true},
    {.name = "link, then remove of the name the record holds",
     .layers = layers_std,
     .change = ch_link_remove,
     .w = {MOVES("d/up", "q/other")},
     .then = then_keep_one,
     .lose = lose_link_remove,
     .keep = "d/up",
     .cut_only = true},
    {.name = "rmdir of an upper dir",
     .layers = layers_std,
     .change = ch_rmdir_upper,
     .w = {GOES("d/emptyup"), MOVES("d/up", "d/up")}},
    {.name = "rmdir of a lower dir (white-out)",
     .layers = layers_std,
     .change = ch_rmdir_lower,
     .w = {GOES("d/emptylow"), MOVES("d/up", "d/up")},
     .lose = lose_whiteout_emptylow},
    {.name = "exclusive create",
     .layers = layers_std,
     .change = ch_create_verf,
     .w = {MOVES("d/up", "d/up")},
     .retry_succeeds = true},
};

/* ---- the fixture: a fresh start, a restart ---- */

static void state_open(struct fx *fx)
{
	assert_int_equal(un_state_open(t_path(fx, "state"), &fx->st), 0);
}

static void state_close(struct fx *fx)
{
	t_export_close(fx);
	un_state_close(fx->st);
	fx->st = NULL;
}

static void export_open(struct fx *fx)
{
	t_export(fx, "l1:l2", "u", "w");
}

/* What a restarted server sees: the state and the export opened again. */
static void restart(struct fx *fx)
{
	state_close(fx);
	state_open(fx);
	export_open(fx);
}

/* The layers and state of SC from scratch, its objects recorded in REC
 * (through an engine that is closed again when this returns). */
static void start(struct fx *fx, const struct scenario *sc, struct recorded *rec)
{
	static const char *const dirs[] = {"l1", "l2", "u", "w", "state", "keep"};

	state_close(fx);
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		t_rm_rf(t_path(fx, dirs[i]));
		t_mkdir(fx, dirs[i]);
	}
	sc->layers(fx);
	state_open(fx);
	export_open(fx);
	if (sc->prepare)
		assert_int_equal(sc->prepare(fx), 0);
	for (size_t i = 0; i < WATCH_MAX && sc->w[i].before; i++) {
		struct un_obj *o = NULL;

		assert_int_equal(t_walk(fx, sc->w[i].before, &o), 0);
		rec[i] = (struct recorded){o->id, o->fileid};
		un_obj_put(o);
	}
	state_close(fx);
}

/* ---- the checks ---- */

/* The object at PATH: 0 with *ID and *FILEID, or -errno. */
static int at(struct fx *fx, const char *path, un_id *id, un_id *fileid)
{
	struct un_obj *o = NULL;
	int rc = t_walk(fx, path, &o);

	if (!rc) {
		*id = o->id;
		*fileid = o->fileid;
	}
	un_obj_put(o);
	return rc;
}

/* Whether PATH holds the object recorded as R (by node id and fileid). */
static bool holds(struct fx *fx, const char *path, const struct recorded *r)
{
	un_id id = 0, fileid = 0;

	return path && !at(fx, path, &id, &fileid) && id == r->id && fileid == r->fileid;
}

/* W's object (recorded as R), after step STEP of SC: a live object is at
 * its old or its new place with its node and fileid, and its node
 * resolves to it; a removed one is gone or still itself. */
static void check_watch(struct fx *fx, const struct scenario *sc, unsigned long step,
			const char *when, const struct watch *w, const struct recorded *r)
{
	struct un_obj *o = NULL;
	un_id id = 0, fileid = 0;
	int res;

	res = un_resolve(fx->ex, r->id, &o);
	if (!res && o->fileid != r->fileid)
		fail_msg("%s, step %lu %s: %s's node resolves to fileid %llu, not %llu",
			 sc->name, step, when, w->before, (unsigned long long)o->fileid,
			 (unsigned long long)r->fileid);
	un_obj_put(o);
	if (!w->after) { /* removed or replaced by the change */
		if (!res && !holds(fx, w->before, r))
			fail_msg("%s, step %lu %s: %s's node resolves, another object "
				 "is at its name",
				 sc->name, step, when, w->before);
		return;
	}
	if (res)
		fail_msg("%s, step %lu %s: %s's node does not resolve (%d)", sc->name,
			 step, when, w->before, res);
	if (w->stays && !holds(fx, w->before, r))
		fail_msg("%s, step %lu %s: %s lost its node", sc->name, step, when,
			 w->before);
	if (w->stays && !at(fx, w->after, &id, &fileid) && fileid != r->fileid)
		fail_msg("%s, step %lu %s: %s has fileid %llu, %s %llu", sc->name, step,
			 when, w->after, (unsigned long long)fileid, w->before,
			 (unsigned long long)r->fileid);
	if (!w->stays && !holds(fx, w->after, r) && !holds(fx, w->before, r))
		fail_msg("%s, step %lu %s: %s (node %llu) is neither at its name nor "
			 "at %s",
			 sc->name, step, when, w->before, (unsigned long long)r->id,
			 w->after);
}

static void check_all(struct fx *fx, const struct scenario *sc, unsigned long step,
		      const char *when, const struct recorded *rec)
{
	for (size_t i = 0; i < WATCH_MAX && sc->w[i].before; i++)
		check_watch(fx, sc, step, when, &sc->w[i], &rec[i]);
}

static void check_restarted(struct fx *fx, const struct scenario *sc, unsigned long step,
			    const char *when, const struct recorded *rec)
{
	int rc;

	if (w_count(fx, "w/work"))
		fail_msg("%s, step %lu %s: the work dir is not empty", sc->name, step,
			 when);
	check_all(fx, sc, step, when, rec);
	if (sc->retry_succeeds && (rc = sc->change(fx)) != 0)
		fail_msg("%s, step %lu %s: the change again answered %d", sc->name, step,
			 when, rc);
	check_all(fx, sc, step, when, rec);
}

/* The changes after (SC->then), on a state that is thrown away after. */
static void check_then(struct fx *fx, const struct scenario *sc,
		       const struct recorded *rec)
{
	if (sc->then)
		sc->then(fx, rec);
}

/* ---- the runs ---- */

/* The calls SC's change makes through the seam, run whole. */
static unsigned long count_calls(struct fx *fx, const struct scenario *sc)
{
	struct recorded rec[WATCH_MAX];
	unsigned long calls;

	start(fx, sc, rec);
	state_open(fx);
	export_open(fx);
	un_sys_inject_reset();
	assert_int_equal(sc->change(fx), 0);
	calls = un_sys_calls(UN_SYS_ANY);
	un_sys_inject_reset();
	check_restarted(fx, sc, 0, "(whole)", rec);
	restart(fx);
	check_restarted(fx, sc, 0, "(whole, restarted)", rec);
	return calls;
}

/* SC killed before its call STEP, in a child; checked after a restart. */
static void run_killed(struct fx *fx, const struct scenario *sc, unsigned long step)
{
	struct recorded rec[WATCH_MAX];
	int status;
	pid_t pid;

	start(fx, sc, rec);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		state_open(fx);
		export_open(fx);
		un_sys_inject_reset();
		un_sys_inject(UN_SYS_ANY, step, UN_SYS_KILL);
		_exit(sc->change(fx) == 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fail_msg("%s, step %lu: the child was not killed (status %#x)", sc->name,
			 step, status);
	state_open(fx);
	export_open(fx);
	check_restarted(fx, sc, step, "killed", rec);
	check_then(fx, sc, rec);
}

/* SC's call STEP fails with EIO; checked at once and after a restart. */
static void run_failed(struct fx *fx, const struct scenario *sc, unsigned long step)
{
	struct recorded rec[WATCH_MAX];

	start(fx, sc, rec);
	state_open(fx);
	export_open(fx);
	un_sys_inject_reset();
	un_sys_inject(UN_SYS_ANY, step, EIO);
	sc->change(fx);
	un_sys_inject_reset();
	check_all(fx, sc, step, "failed", rec);
	restart(fx);
	check_restarted(fx, sc, step, "failed, restarted", rec);
	check_then(fx, sc, rec);
}

/* Whether W's object (recorded as R) is where it was before the change,
 * and nowhere else. */
static void check_before(struct fx *fx, const struct scenario *sc, const char *when,
			 const struct watch *w, const struct recorded *r)
{
	struct un_obj *o = NULL;
	un_id id, fileid;
	int res = un_resolve(fx->ex, r->id, &o);

	if (res || o->fileid != r->fileid)
		fail_msg("%s %s: %s's node does not resolve to it (%d)", sc->name, when,
			 w->before, res);
	un_obj_put(o);
	if (!holds(fx, w->lost ? w->lost : w->before, r))
		fail_msg("%s %s: %s lost its node", sc->name, when, w->before);
	if (w->stays && at(fx, w->after, &id, &fileid) != -ENOENT)
		fail_msg("%s %s: %s is there", sc->name, when, w->after);
}

static void check_no_intents(struct fx *fx, const struct scenario *sc, const char *when)
{
	struct un_node_intent_ref *refs;
	size_t n;

	assert_int_equal(un_node_intents(fx->st, fx->ex->root_id, UN_ID_NONE, &refs, &n),
			 0);
	free(refs);
	if (n)
		fail_msg("%s %s: %zu intent(s) left", sc->name, when, n);
}

/* SC run whole in a child that ends without closing anything; with LOST
 * its change is then taken off the upper, as a power cut before the
 * directories' fsync may leave it. */
static void run_cut(struct fx *fx, const struct scenario *sc, bool lost)
{
	const char *when = lost ? "lost by a power cut" : "cut before its intent went";
	struct recorded rec[WATCH_MAX];
	int status;
	pid_t pid;

	start(fx, sc, rec);
	if (lost && sc->keep) {
		char up[PATH_MAX];

		snprintf(up, sizeof(up), "u/%s", sc->keep);
		ln(fx, up, "keep/inode");
	}
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		state_open(fx);
		export_open(fx);
		_exit(sc->change(fx) == 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fail_msg("%s: the change failed (status %#x)", sc->name, status);
	if (lost)
		sc->lose(fx);
	for (int round = 0; round < 2; round++) { /* the settle holds a restart */
		state_open(fx);
		export_open(fx);
		check_no_intents(fx, sc, when);
		for (size_t i = 0; lost && i < WATCH_MAX && sc->w[i].before; i++)
			check_before(fx, sc, when, &sc->w[i], &rec[i]);
		if (!lost)
			check_all(fx, sc, 0, when, rec);
		if (round)
			check_then(fx, sc, rec);
		state_close(fx);
	}
}

static void test_cut_after_the_change(void **state)
{
	struct fx *fx = *state;

	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		run_cut(fx, &scenarios[i], false);
		if (scenarios[i].lose)
			run_cut(fx, &scenarios[i], true);
	}
}

static void test_killed_at_each_step(void **state)
{
	struct fx *fx = *state;

	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		unsigned long calls =
		    scenarios[i].cut_only ? 0 : count_calls(fx, &scenarios[i]);

		for (unsigned long n = 1; n <= calls; n++)
			run_killed(fx, &scenarios[i], n);
	}
}

static void test_failed_at_each_step(void **state)
{
	struct fx *fx = *state;

	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		unsigned long calls =
		    scenarios[i].cut_only ? 0 : count_calls(fx, &scenarios[i]);

		for (unsigned long n = 1; n <= calls; n++)
			run_failed(fx, &scenarios[i], n);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    W_TEST(test_killed_at_each_step),
	    W_TEST(test_failed_at_each_step),
	    W_TEST(test_cut_after_the_change),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
