/* SPDX-License-Identifier: Apache-2.0 */
/* test_crash_random.c - node.c invariant 14 under random sequences of
 * namespace changes of files with several names, each sequence killed at a
 * random step: after the restart every name the upper holds gives the node
 * of its inode, an inode keeps the node it had, and every node resolves.
 *
 * test_crash_steps kills scripted changes at each of their steps; the kill
 * soak (integration/kill_soak) kills a server under load at random moments
 * and found there what no script had: the undo of a remove whose intent
 * carried a rename gave a node with other names back a name the disk no
 * longer held, and a later remove moved its record there.  This is the same
 * search at the engine's level, fast enough to run in every build: a round
 * forks a child that opens the state and the export, arms the seam to
 * SIGKILL it before a random call, and runs a random sequence of creates,
 * links, renames (to new names, and over names of other inodes) and removes
 * of names in two upper dirs; the parent opens the state again, as a
 * restarted server does, and checks against the upper as it is:
 *   - every name the upper holds is found, and the names of one inode give
 *     one node, which resolves to an object of that fileid;
 *   - an inode that was there before the round, and that no change of the
 *     round could have removed, has the node it had (a removed inode's
 *     number may come back for a new file);
 *   - the work dir is empty.
 * Env: CRASH_RANDOM_ROUNDS (default 400), CRASH_RANDOM_SEED (default: the
 * time; a failure prints it).
 */
#include "test_wr.h"

#include <signal.h>

#define DIRS	     2
#define NAMES_MAX    24 /* names in the upper at once, about */
#define OPS_MAX	     6	/* changes a round */
#define CALLS_PER_OP 80 /* about: the kill falls within the round's calls */
#define ROUNDS_DEF   400

static const char *const dir_names[DIRS] = {"d", "q"};

/* One name of the upper: DIR/NAME, of inode INO. */
struct name {
	int dir;
	char name[16];
	ino_t ino;
};

struct tree {
	struct name v[NAMES_MAX * 2];
	size_t n;
};

enum op_kind { OP_CREATE, OP_LINK, OP_RENAME, OP_RENAME_OVER, OP_REMOVE };

/* One change of a round: A is the name it acts on (-1: none), B the name
 * it goes to (OP_LINK, OP_RENAME: new; OP_RENAME_OVER: existing). */
struct op {
	enum op_kind kind;
	struct name a, b;
};

struct round {
	struct op ops[OPS_MAX];
	size_t n;
	ino_t gone[OPS_MAX]; /* inodes a change of the round may remove */
	size_t ngone;
};

static unsigned seed, seed0; /* the run's, as it goes; as given */
static unsigned long names_made;
static unsigned long kills, changes; /* rounds cut short; changes chosen */

/* ---- the upper as it is ---- */

static void tree_scan(struct fx *fx, struct tree *t)
{
	char rel[64];

	t->n = 0;
	for (int d = 0; d < DIRS; d++) {
		DIR *dir;
		struct dirent *e;

		snprintf(rel, sizeof(rel), "u/%s", dir_names[d]);
		dir = opendir(t_path(fx, rel));
		assert_non_null(dir);
		while ((e = readdir(dir)) && t->n < sizeof(t->v) / sizeof(t->v[0])) {
			if (e->d_name[0] == '.')
				continue;
			t->v[t->n] = (struct name){.dir = d, .ino = e->d_ino};
			snprintf(t->v[t->n].name, sizeof(t->v[0].name), "%s", e->d_name);
			t->n++;
		}
		closedir(dir);
	}
}

static const char *name_path(const struct name *nm)
{
	static __thread char buf[4][64];
	static __thread int k;
	char *p = buf[k++ % 4];

	snprintf(p, sizeof(buf[0]), "%s/%s", dir_names[nm->dir], nm->name);
	return p;
}

/* ---- a round's changes, chosen on a copy of the tree ---- */

static struct name name_new(void)
{
	struct name nm = {.dir = rand_r(&seed) % DIRS};

	snprintf(nm.name, sizeof(nm.name), "n%lu", ++names_made);
	return nm;
}

static size_t names_of(const struct tree *t, ino_t ino)
{
	size_t k = 0;

	for (size_t i = 0; i < t->n; i++)
		k += t->v[i].ino == ino;
	return k;
}

static void tree_drop(struct tree *t, size_t i)
{
	t->v[i] = t->v[--t->n];
}

/* Chooses one change on T and applies it to T; false when none fits. */
static bool op_choose(struct tree *t, struct round *r, ino_t *next_ino)
{
	struct op *o = &r->ops[r->n];
	int k = rand_r(&seed) % 100;
	size_t i = t->n ? (size_t)rand_r(&seed) % t->n : 0, j;

	if (!t->n || (k < 20 && t->n < NAMES_MAX)) {
		*o = (struct op){.kind = OP_CREATE, .b = name_new()};
		o->b.ino = (*next_ino)--; /* a stand-in: no inode yet */
		t->v[t->n++] = o->b;
	} else if (k < 45 && t->n < NAMES_MAX) {
		*o = (struct op){.kind = OP_LINK, .a = t->v[i], .b = name_new()};
		o->b.ino = o->a.ino;
		t->v[t->n++] = o->b;
	} else if (k < 70) {
		*o = (struct op){.kind = OP_RENAME, .a = t->v[i], .b = name_new()};
		o->b.ino = o->a.ino;
		t->v[i] = o->b;
	} else if (k < 80) {
		j = (size_t)rand_r(&seed) % t->n;
		if (t->v[j].ino == t->v[i].ino)
			return false; /* a rename onto another name of itself */
		*o = (struct op){.kind = OP_RENAME_OVER, .a = t->v[i], .b = t->v[j]};
		if (names_of(t, o->b.ino) == 1)
			r->gone[r->ngone++] = o->b.ino;
		o->b.ino = o->a.ino;
		t->v[j] = o->b;
		tree_drop(t, i);
	} else {
		*o = (struct op){.kind = OP_REMOVE, .a = t->v[i]};
		if (names_of(t, o->a.ino) == 1)
			r->gone[r->ngone++] = o->a.ino;
		tree_drop(t, i);
	}
	r->n++;
	return true;
}

static void round_choose(const struct tree *now, struct round *r)
{
	struct tree t = *now;
	ino_t stand_in = (ino_t)-1;
	size_t want = 1 + (size_t)rand_r(&seed) % OPS_MAX;

	memset(r, 0, sizeof(*r));
	for (int tries = 0; r->n < want && tries < 4 * OPS_MAX; tries++)
		op_choose(&t, r, &stand_in);
}

static int op_run(struct fx *fx, const struct op *o)
{
	switch (o->kind) {
	case OP_CREATE:
		return w_create(fx, dir_names[o->b.dir], o->b.name);
	case OP_LINK:
		return w_link(fx, name_path(&o->a), dir_names[o->b.dir], o->b.name);
	case OP_RENAME:
	case OP_RENAME_OVER:
		return w_rename(fx, dir_names[o->a.dir], o->a.name, dir_names[o->b.dir],
				o->b.name);
	case OP_REMOVE:
		return w_remove(fx, dir_names[o->a.dir], o->a.name, false);
	}
	return -EINVAL;
}

/* ---- the engine opened and closed as a server would ---- */

static void engine_open(struct fx *fx)
{
	assert_int_equal(un_state_open(t_path(fx, "state"), &fx->st), 0);
	t_export(fx, "l1", "u", "w");
}

static void engine_close(struct fx *fx)
{
	t_export_close(fx);
	un_state_close(fx->st);
	fx->st = NULL;
}

/* Runs R in a child killed before its call KILL_AT (it may end first). */
static void round_run_killed(struct fx *fx, const struct round *r, unsigned long kill_at)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		engine_open(fx);
		un_sys_inject_reset();
		un_sys_inject(UN_SYS_ANY, kill_at, UN_SYS_KILL);
		for (size_t i = 0; i < r->n; i++)
			op_run(fx, &r->ops[i]);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	kills += WIFSIGNALED(status);
	changes += r->n;
	if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) &&
	    !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
		fail_msg("the round's child ended with status %#x", status);
}

/* ---- the checks ---- */

/* The node of each inode of T (NODES[i] for T->v[i]), checked to be one
 * node an inode, resolving to its fileid. */
static void nodes_check(struct fx *fx, const struct tree *t, un_id *nodes,
			const char *when)
{
	for (size_t i = 0; i < t->n; i++) {
		struct un_obj *o = NULL;
		int rc = t_walk(fx, name_path(&t->v[i]), &o);

		if (rc)
			fail_msg("%s: %s is in the upper, its lookup answers %d "
				 "(CRASH_RANDOM_SEED=%u)",
				 when, name_path(&t->v[i]), rc, seed0);
		nodes[i] = o->id;
		un_obj_put(o);
		for (size_t j = 0; j < i; j++)
			if (t->v[j].ino == t->v[i].ino && nodes[j] != nodes[i])
				fail_msg(
				    "%s: %s and %s, one inode, have nodes %llu and %llu "
				    "(CRASH_RANDOM_SEED=%u)",
				    when, name_path(&t->v[j]), name_path(&t->v[i]),
				    (unsigned long long)nodes[j],
				    (unsigned long long)nodes[i], seed0);
		rc = un_resolve(fx->ex, nodes[i], &o);
		if (rc)
			fail_msg("%s: the node %llu of %s does not resolve (%d) "
				 "(CRASH_RANDOM_SEED=%u)",
				 when, (unsigned long long)nodes[i], name_path(&t->v[i]),
				 rc, seed0);
		un_obj_put(o);
	}
}

/* Every inode of AFTER that was in BEFORE (with BEFORE_NODES) and that no
 * change of R could remove has its node of before. */
static void nodes_kept(const struct tree *before, const un_id *before_nodes,
		       const struct tree *after, const un_id *after_nodes,
		       const struct round *r)
{
	for (size_t i = 0; i < after->n; i++) {
		bool may_go = false;

		for (size_t k = 0; k < r->ngone; k++)
			may_go = may_go || r->gone[k] == after->v[i].ino;
		for (size_t j = 0; !may_go && j < before->n; j++)
			if (before->v[j].ino == after->v[i].ino &&
			    before_nodes[j] != after_nodes[i])
				fail_msg("%s (inode %llu) had node %llu, has %llu "
					 "(CRASH_RANDOM_SEED=%u)",
					 name_path(&after->v[i]),
					 (unsigned long long)after->v[i].ino,
					 (unsigned long long)before_nodes[j],
					 (unsigned long long)after_nodes[i], seed0);
	}
}

static void test_random_kills(void **state)
{
	struct fx *fx = *state;
	const char *e = getenv("CRASH_RANDOM_ROUNDS");
	int rounds = e ? atoi(e) : ROUNDS_DEF;
	struct tree before, after;
	un_id bnodes[NAMES_MAX * 2], anodes[NAMES_MAX * 2];
	struct round r;

	e = getenv("CRASH_RANDOM_SEED");
	seed = seed0 = e ? (unsigned)strtoul(e, NULL, 10) : (unsigned)time(NULL);
	print_message("crash_random: %d rounds, CRASH_RANDOM_SEED=%u\n", rounds, seed0);
	un_state_close(fx->st); /* t_setup's: the rounds open their own */
	fx->st = NULL;
	t_mkdir(fx, "l1");
	t_mkdir(fx, "u/d");
	t_mkdir(fx, "u/q");
	t_mkdir(fx, "w");
	engine_open(fx);
	for (int round = 0; round < rounds; round++) {
		tree_scan(fx, &before);
		nodes_check(fx, &before, bnodes, "before a round");
		round_choose(&before, &r);
		engine_close(fx);
		round_run_killed(fx, &r,
				 1 + (unsigned long)rand_r(&seed) % (r.n * CALLS_PER_OP));
		engine_open(fx);
		if (w_count(fx, "w/work"))
			fail_msg("round %d: the work dir is not empty "
				 "(CRASH_RANDOM_SEED=%u)",
				 round, seed0);
		tree_scan(fx, &after);
		nodes_check(fx, &after, anodes, "after a kill");
		nodes_kept(&before, bnodes, &after, anodes, &r);
	}
	engine_close(fx);
	print_message("crash_random: %lu changes, %lu rounds killed\n", changes, kills);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    W_TEST(test_random_kills),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
