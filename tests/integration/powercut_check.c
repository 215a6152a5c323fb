/* SPDX-License-Identifier: Apache-2.0 */
/* powercut_check.c - the check at the start of each boot of kvm_powercut.sh:
 * everything the ack log says the server promised before the cut must be
 * there (powercut.h).
 *
 * For each worker the model is the last snapshot (what the previous check
 * found) with the calls acknowledged since applied, and at most one call in
 * flight, whose effect may or may not be there: its names are allowed both
 * ways (but only whole: both names of a RENAME move together), its data
 * sector by sector.  What is checked:
 *   - every name of the worker: LOOKUP finds the object the model names,
 *     with its fileid, or NOENT where the model has none;
 *   - every handle a reply gave for a live object: GETATTR answers NFS3_OK
 *     with the same fileid.  A handle is promised once a call that syncs the
 *     node table (any change but an UNSTABLE WRITE) was acknowledged after
 *     it was given; a LOOKUP's handle alone is durable only within the
 *     table's syncer period, so its loss is counted as renewed, not stale;
 *   - nlink (the worker's names of it), the mode, the size between what
 *     certain writes made it and what all writes could have, and every
 *     sector: written by the last certain write over it (FILE_SYNC, or
 *     UNSTABLE followed by an acknowledged COMMIT), by a write after that
 *     which was not certain, or still what the snapshot held (lower data of
 *     a copied-up pool file: never a half copy-up);
 *   - the three directories keep their fileids and handles (mg and pool are
 *     copied up by the first change in them);
 *   - each file takes a change through its handle too: a COMMIT (it changes
 *     nothing) must not answer NFS3ERR_STALE where GETATTR did not
 *     (halfstale; the file's names are then removed, so that the workers do
 *     not stop on it boot after boot).
 * A LINK in flight that happened but gave its new name a fileid of its own
 * (one file, two identities) is counted as a split and its new name removed.
 * A mismatch is printed ("PC LOSS", "PC STALE") and counted, and the model
 * then takes what was found, so that one loss does not hide the next boots'.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "powercut.h"

/* Paths and texts here are short and bounded (PC_PATH); one cut short
 * would fail the check anyway. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define ABSENT	-1
#define NEWOBJ	-2 /* the object a CREATE in flight made */
#define READ_SZ (128u << 10)

struct obs {
	int status;
	uint64_t fileid;
	struct fh fh;
};

/* The check of one worker. */
struct wcheck {
	struct pc_model *m;
	struct pc_worker *w;
	int wi;
	struct rpc_context *rpc;
	struct pc_counts *c;
	const struct pc_op *u;		   /* the call in flight, or NULL */
	struct pc_name alt[2][PC_MAXNAME]; /* the names without and with u */
	struct obs obs[PC_MAXNAME];
};

static bool ns_kind(const struct pc_op *u)
{
	return u && strchr("CRDL", u->kind);
}

static const char *kind_name(char k)
{
	switch (k) {
	case 'C':
		return "CREATE";
	case 'W':
		return "WRITE";
	case 'M':
		return "COMMIT";
	case 'R':
		return "RENAME";
	case 'D':
		return "REMOVE";
	case 'L':
		return "LINK";
	case 'S':
		return "SETATTR";
	default:
		return "LOOKUP";
	}
}

/* ---- the model of the worker: the snapshot and the calls since ---- */

static void count_acked(struct pc_counts *c, const struct pc_op *op)
{
	c->acked++;
	if (op->kind == 'W' && op->stable)
		c->synced++;
	else if (op->kind == 'M')
		c->committed++;
	else if (strchr("CRDL", op->kind))
		c->names++;
}

static void slot_names(struct pc_worker *w, int wi)
{
	char p[PC_PATH];

	for (int d = 0; d < 2; d++)
		for (int k = 0; k < PC_SLOTS; k++) {
			snprintf(p, sizeof(p), "%s/w%d-%d", pc_dirs[d], wi, k);
			pc_name_add(w, p);
		}
}

/* Applies the logged calls; the one in flight (or failed) is returned. */
static const struct pc_op *replay(struct wcheck *k)
{
	const struct pc_op *u = NULL;

	slot_names(k->w, k->wi);
	for (int i = 0; i < k->w->nops; i++) {
		struct pc_op *op = &k->w->ops[i];

		if (op->acked && op->status) {
			/* reported by its boot; its effect is as unknown as a
			 * call's in flight */
			op->acked = false;
		}
		if (op->acked)
			count_acked(k->c, op);
		else
			u = op;
		pc_name_add(k->w, op->a);
		if (op->b[0])
			pc_name_add(k->w, op->b);
		pc_apply(k->w, op);
	}
	return u;
}

/* ---- names ---- */

static void observe(struct wcheck *k)
{
	for (int i = 0; i < k->w->nnames; i++) {
		const char *base;
		int d = pc_split(k->w->names[i].path, &base);
		struct pc_res r = pc_lookup(k->rpc, &k->m->dir_fh[d], base);

		k->obs[i] =
		    (struct obs){.status = r.status, .fileid = r.fileid, .fh = r.fh};
	}
}

static uint64_t want_fileid(const struct wcheck *k, int obj)
{
	return obj >= 0 ? k->w->objs[obj].fileid : 0;
}

/* Whether what LOOKUP found is names NM: presence, fileids, and the same
 * fileid exactly where the same object has two names. */
static bool names_match(const struct wcheck *k, const struct pc_name *nm)
{
	int n = k->w->nnames;

	for (int i = 0; i < n; i++) {
		uint64_t f = want_fileid(k, nm[i].obj);

		if (nm[i].obj == ABSENT ? k->obs[i].status != NFS3ERR_NOENT
					: k->obs[i].status != NFS3_OK)
			return false;
		if (nm[i].obj != ABSENT && f && f != k->obs[i].fileid)
			return false;
	}
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (nm[i].obj != ABSENT && nm[j].obj != ABSENT &&
			    (nm[i].obj == nm[j].obj) !=
				(k->obs[i].fileid == k->obs[j].fileid))
				return false;
	return true;
}

static int mismatches(const struct wcheck *k, const struct pc_name *nm)
{
	int bad = 0;

	for (int i = 0; i < k->w->nnames; i++) {
		uint64_t f = want_fileid(k, nm[i].obj);

		bad += nm[i].obj == ABSENT
			   ? k->obs[i].status != NFS3ERR_NOENT
			   : k->obs[i].status != NFS3_OK || (f && f != k->obs[i].fileid);
	}
	return bad;
}

/* The last acknowledged call that named PATH, for the report. */
static const struct pc_op *last_on(const struct pc_worker *w, const char *path)
{
	for (int i = w->nops - 1; i >= 0; i--)
		if (w->ops[i].acked &&
		    (!strcmp(w->ops[i].a, path) || !strcmp(w->ops[i].b, path)))
			return &w->ops[i];
	return NULL;
}

/* The object of the model whose fileid is F, or -1. */
static int obj_with_fileid(const struct pc_worker *w, uint64_t f)
{
	for (int i = 0; i < PC_MAXOBJ; i++)
		if (w->objs[i].used && w->objs[i].fileid == f)
			return i;
	return -1;
}

static void report_name(struct wcheck *k, int i, const struct pc_name *ref)
{
	const struct pc_op *op = last_on(k->w, k->w->names[i].path);
	char last[96] = "no call since the snapshot";

	if (op)
		snprintf(last, sizeof(last), "last acked: %s op %" PRIx64,
			 kind_name(op->kind), op->op);
	printf("PC LOSS w%d %s: want %s %" PRIu64 ", found status %d fileid %" PRIu64
	       " (%s%s%s)\n",
	       k->wi, k->w->names[i].path, ref[i].obj == ABSENT ? "no entry" : "fileid",
	       want_fileid(k, ref[i].obj), k->obs[i].status, k->obs[i].fileid, last,
	       k->u ? "; in flight: " : "", k->u ? kind_name(k->u->kind) : "");
}

/* Whether the call in flight names PATH. */
static bool names_u(const struct wcheck *k, const char *path)
{
	return k->u && (!strcmp(k->u->a, path) || !strcmp(k->u->b, path));
}

/* " (in flight: KIND A -> B)", or nothing. */
static void u_desc(const struct wcheck *k, char *out, size_t n)
{
	if (!k->u)
		*out = '\0';
	else
		snprintf(out, n, " (in flight: %s %s%s%s)", kind_name(k->u->kind),
			 k->u->a, k->u->b[0] ? " -> " : "", k->u->b);
}

/* Name I shows fileid F, which no object of the model has, where REF has
 * object OBJ: OBJ has a new identity (check_handles counts its old handles
 * as stale) - or an object the model never heard of is there, whose content
 * is then not known. */
static int rebind(struct wcheck *k, int i, int obj)
{
	struct pc_obj *o;
	char desc[96];

	if (obj >= 0 && k->w->objs[obj].fileid &&
	    obj_with_fileid(k->w, k->obs[i].fileid) < 0) {
		o = &k->w->objs[obj];
		u_desc(k, desc, sizeof(desc));
		printf("PC NEWID w%d %s: fileid %" PRIu64 " is now %" PRIu64 "%s\n",
		       k->wi, k->w->names[i].path, o->fileid, k->obs[i].fileid, desc);
		o->old_fileid = o->fileid;
		o->newid_by = names_u(k, k->w->names[i].path) ? k->u->kind : 0;
		/* the name it has now is the call's target: the call happened */
		o->newid_applied = o->newid_by && !strcmp(k->u->b, k->w->names[i].path);
	}
	if (obj >= 0) {
		k->w->objs[obj].fileid = k->obs[i].fileid;
		return obj;
	}
	obj = pc_obj_new(k->w);
	if (obj < 0)
		return ABSENT;
	o = &k->w->objs[obj];
	o->fileid = k->obs[i].fileid;
	for (uint64_t s = 0; s < PC_MAXSIZE / PC_SECTOR; s++)
		o->sec[s] = PC_ANY;
	o->size = PC_MAXSIZE;
	return obj;
}

/* No alternative matches: report against the nearer one (a name that shows
 * its object under a new fileid is no lost name: its handles tell), then
 * take the names as found. */
static void rebase_names(struct wcheck *k)
{
	int r = ns_kind(k->u) && mismatches(k, k->alt[1]) < mismatches(k, k->alt[0]);
	struct pc_name *ref = k->alt[r];
	bool lost = false;

	for (int i = 0; i < k->w->nnames; i++) {
		int obj = ABSENT;
		uint64_t f = want_fileid(k, ref[i].obj);
		bool ok = k->obs[i].status == NFS3_OK,
		     newid = ref[i].obj >= 0 && ok &&
			     obj_with_fileid(k->w, k->obs[i].fileid) < 0;

		if (!newid && ((ref[i].obj == ABSENT) == ok ||
			       (f && ok && f != k->obs[i].fileid))) {
			report_name(k, i, ref);
			lost = true;
		}
		if (ok) {
			obj = obj_with_fileid(k->w, k->obs[i].fileid);
			if (obj < 0)
				obj = rebind(k, i,
					     ref[i].obj == NEWOBJ ? pc_obj_new(k->w)
								  : ref[i].obj);
		}
		k->w->names[i].obj = obj;
	}
	k->c->lost += lost;
}

/* Removes name I through NFS (the check's clean-up of a name the model
 * cannot follow); false if the REMOVE failed. */
static bool drop_name(struct wcheck *k, int i)
{
	const char *base;
	int d = pc_split(k->w->names[i].path, &base);
	struct pc_res r = pc_remove(k->rpc, &k->m->dir_fh[d], base);

	if (r.status != NFS3_OK)
		printf("PC FAIL w%d REMOVE %s (clean-up): status %d\n", k->wi,
		       k->w->names[i].path, r.status);
	return r.status == NFS3_OK;
}

/* The LINK in flight happened (both names there, one file: nlink 2) but its
 * new name shows a fileid of its own: one file, two identities.  Counted
 * (split), and the new name removed, so the model goes on with the file as
 * it was before the LINK.  True when that was it. */
static bool split_link(struct wcheck *k)
{
	int a, b;
	struct pc_name tmp[PC_MAXNAME];

	if (!k->u || k->u->kind != 'L')
		return false;
	a = pc_name_find(k->w, k->u->a);
	b = pc_name_find(k->w, k->u->b);
	memcpy(tmp, k->alt[1], sizeof(tmp));
	tmp[b].obj = NEWOBJ; /* any fileid but a's */
	if (names_match(k, k->alt[1]) || !names_match(k, tmp))
		return false;
	printf(
	    "PC SPLIT w%d %s: the LINK in flight (%s -> %s) happened, but the new name "
	    "has fileid %" PRIu64 ", the file %" PRIu64 "\n",
	    k->wi, k->u->b, k->u->a, k->u->b, k->obs[b].fileid, k->obs[a].fileid);
	k->c->split++;
	drop_name(k, b);
	memcpy(k->w->names, k->alt[0], sizeof(k->alt[0]));
	return true;
}

/* Picks the names the export shows among the model's alternatives. */
static void settle_names(struct wcheck *k)
{
	int n = k->w->nnames, newobj;

	memcpy(k->alt[0], k->w->names, sizeof(k->alt[0]));
	memcpy(k->alt[1], k->w->names, sizeof(k->alt[1]));
	if (ns_kind(k->u))
		pc_apply_names(k->alt[1], n, k->u, NEWOBJ);
	observe(k);
	if (split_link(k))
		return;
	if (ns_kind(k->u) && names_match(k, k->alt[1])) {
		k->c->applied++;
		for (int i = 0; i < n; i++)
			if (k->alt[1][i].obj == NEWOBJ) {
				newobj = pc_obj_new(k->w);
				k->alt[1][i].obj = newobj;
			}
		memcpy(k->w->names, k->alt[1], sizeof(k->alt[1]));
	} else if (!names_match(k, k->alt[0]))
		rebase_names(k);
}

/* ---- objects ---- */

/* " (the file of the RENAME in flight, which happened)" or nothing. */
static void inflight_note(const struct pc_obj *o, char *out, size_t n)
{
	*out = '\0';
	if (o->newid_by)
		snprintf(out, n, " (the file of the %s in flight, which %s)",
			 kind_name(o->newid_by),
			 o->newid_applied ? "happened" : "did not happen");
}

/* Drops the handles of O that no longer name it. */
static void check_handles(struct wcheck *k, struct pc_obj *o, const char *path)
{
	int keep = 0;
	char note[80];

	for (int i = 0; i < o->nfh; i++) {
		struct pc_res a = pc_getattr(k->rpc, &o->fh[i]);

		if (a.status == NFS3_OK && a.fileid == o->fileid) {
			o->fh[keep++] = o->fh[i];
			continue;
		}
		inflight_note(o, note, sizeof(note));
		printf("PC %s w%d %s: a handle of fileid %" PRIu64
		       ": status %d fileid %" PRIu64 "%s\n",
		       o->promised ? "STALE" : "RENEWED", k->wi, path,
		       o->old_fileid ? o->old_fileid : o->fileid, a.status, a.fileid,
		       note);
		if (o->promised)
			k->c->stale++;
		else
			k->c->renewed++;
		k->c->stale_inflight += o->promised && o->newid_by;
	}
	o->nfh = keep;
}

/* The values sector S of O may hold: the snapshot's, then each write over S
 * in order (a certain one replaces them all).  Their number. */
static int candidates(const struct pc_obj *o, uint64_t s, uint64_t *v, int max)
{
	int n = 1;

	v[0] = s < o->size / PC_SECTOR ? o->sec[s] : 0;
	for (int i = 0; i < o->nwl; i++) {
		const struct pc_write *x = &o->wl[i];

		if (s < x->off / PC_SECTOR || s >= (x->off + x->len) / PC_SECTOR)
			continue;
		if (x->st == PC_CERTAIN)
			n = 0;
		if (n < max)
			v[n++] = x->op;
	}
	return n;
}

static bool allowed(const struct pc_obj *o, uint64_t s, uint64_t got, uint64_t *want)
{
	uint64_t v[16];
	int n = candidates(o, s, v, 16);

	*want = v[n - 1];
	for (int i = 0; i < n; i++)
		if (v[i] == got || v[i] == PC_ANY)
			return true;
	return false;
}

static void size_range(const struct pc_obj *o, uint64_t *lo, uint64_t *hi)
{
	*lo = *hi = o->size;
	for (int i = 0; i < o->nwl; i++) {
		uint64_t end = o->wl[i].off + o->wl[i].len;

		if (o->wl[i].st == PC_CERTAIN && end > *lo)
			*lo = end;
		if (end > *hi)
			*hi = end;
	}
	if (o->size == PC_MAXSIZE) /* content unknown since a loss */
		*lo = 0;
}

/* What the first wrong sector held and should have. */
struct bad {
	uint64_t n, sec, got, want;
};

/* Reads O through F (SIZE bytes) and checks each sector; the values read
 * replace the snapshot's in O. */
static int check_data(struct wcheck *k, struct pc_obj *o, const struct fh *f,
		      uint64_t size, struct bad *b)
{
	static unsigned char buf[READ_SZ];
	uint64_t *got = calloc(PC_MAXSIZE / PC_SECTOR, sizeof(uint64_t)), want;

	for (uint64_t off = 0; off < size;) {
		struct pc_res r = pc_read(k->rpc, f, off, READ_SZ, buf);

		if (r.status != NFS3_OK || !r.count) {
			free(got);
			return r.status ? r.status : -1;
		}
		for (uint32_t i = 0; i + PC_SECTOR <= r.count; i += PC_SECTOR) {
			uint64_t s = (off + i) / PC_SECTOR, v = pc_decode(buf + i, s);

			got[s] = v;
			if (!allowed(o, s, v, &want) && !b->n++) {
				b->sec = s;
				b->got = v;
				b->want = want;
			}
		}
		off += r.count;
	}
	for (uint64_t s = 0; s < PC_MAXSIZE / PC_SECTOR; s++)
		o->sec[s] = got[s] == PC_BAD ? PC_ANY : got[s];
	free(got);
	return 0;
}

static void describe(uint64_t v, char *out, size_t n)
{
	if (v == 0)
		snprintf(out, n, "zeros");
	else if (v == PC_BAD)
		snprintf(out, n, "foreign or torn bytes");
	else if (v & PC_LOWER && v != PC_ANY)
		snprintf(out, n, "lower data of pool file %" PRIu64,
			 (uint64_t)(v & ~PC_LOWER));
	else
		snprintf(out, n, "op %" PRIx64 "'s data", v);
}

static void report_data(struct wcheck *k, const struct pc_obj *o, const char *path,
			const struct bad *b)
{
	char got[64], want[64];

	describe(b->got, got, sizeof(got));
	describe(b->want, want, sizeof(want));
	printf("PC LOSS w%d %s (fileid %" PRIu64 "): %" PRIu64
	       " sectors wrong, the first %" PRIu64 " holds %s, want %s%s\n",
	       k->wi, path, o->fileid, b->n, b->sec, got, want,
	       o->pool >= 0 && b->want == (PC_LOWER | (uint64_t)o->pool)
		   ? " (a half copy-up)"
		   : "");
}

/* nlink, mode and size of O as GETATTR A gave them; false (printed) when
 * one is wrong. */
static bool check_attrs(struct wcheck *k, struct pc_obj *o, int obj, const char *path,
			const struct pc_res *a)
{
	uint64_t lo, hi;
	int links = pc_links(k->w->names, k->w->nnames, obj);

	size_range(o, &lo, &hi);
	if (a->type == NF3REG && (int)a->nlink == links &&
	    (a->mode == o->mode || a->mode == o->mode_alt) && a->size >= lo &&
	    a->size <= hi && a->size % PC_SECTOR == 0)
		return true;
	printf("PC LOSS w%d %s (fileid %" PRIu64
	       "): type %u nlink %u mode %o size %" PRIu64
	       ", want a file, nlink %d, mode %o%s, size %" PRIu64 "-%" PRIu64 "\n",
	       k->wi, path, o->fileid, a->type, a->nlink, a->mode, a->size, links,
	       o->mode, o->mode_alt ? " or the one in flight" : "", lo, hi);
	return false;
}

/* A file whose handle answers GETATTR and READ must take a change too: a
 * COMMIT through it (it changes nothing).  If it is refused, the file's
 * names are removed, as the model cannot go on with it. */
static void probe_changes(struct wcheck *k, struct pc_obj *o, int obj, const char *path)
{
	struct pc_res r = pc_commit(k->rpc, &o->fh[0]);

	if (r.status == NFS3_OK)
		return;
	printf("PC HALFSTALE w%d %s (fileid %" PRIu64
	       "): GETATTR and READ answer, COMMIT through the same handle: status %d\n",
	       k->wi, path, o->fileid, r.status);
	k->c->halfstale++;
	for (int i = 0; i < k->w->nnames; i++)
		if (k->w->names[i].obj == obj && drop_name(k, i))
			k->w->names[i].obj = ABSENT;
}

/* The first name of OBJ. */
static int name_of(const struct wcheck *k, int obj)
{
	for (int i = 0; i < k->w->nnames; i++)
		if (k->w->names[i].obj == obj)
			return i;
	return -1;
}

static void check_obj(struct wcheck *k, int obj)
{
	struct pc_obj *o = &k->w->objs[obj];
	int i = name_of(k, obj);
	const char *path = k->w->names[i].path;
	struct pc_res a;
	struct bad b = {0};
	bool attrs_ok;
	int err;

	k->c->objects++;
	if (!o->fileid)
		o->fileid = k->obs[i].fileid;
	check_handles(k, o, path);
	pc_obj_add_fh(o, &k->obs[i].fh);
	a = pc_getattr(k->rpc, &k->obs[i].fh);
	if (a.status != NFS3_OK) {
		printf("PC FAIL w%d %s: GETATTR of the handle LOOKUP gave: status %d\n",
		       k->wi, path, a.status);
		k->c->fails++;
		return;
	}
	attrs_ok = check_attrs(k, o, obj, path, &a);
	if (a.type != NF3REG) {
		k->c->lost++;
		return;
	}
	if (a.size > PC_MAXSIZE)
		a.size = PC_MAXSIZE;
	/* read even after a wrong size: what is there becomes the model */
	err = check_data(k, o, &k->obs[i].fh, a.size, &b);
	if (err) {
		printf("PC FAIL w%d %s: READ status %d\n", k->wi, path, err);
		k->c->fails++;
	} else if (b.n)
		report_data(k, o, path, &b);
	k->c->lost += !attrs_ok || b.n; /* one object, one loss */
	probe_changes(k, o, obj, path);
	o->size = a.size;
	o->mode = a.mode;
	o->mode_alt = 0;
	o->old_fileid = 0;
	o->newid_by = 0;
	o->newid_applied = false;
	o->nwl = 0;
	o->promised = true; /* the check's COMMIT syncs the table */
}

static void check_worker(struct wcheck *k)
{
	k->u = replay(k);
	k->c->inflight += k->u != NULL;
	settle_names(k);
	for (int obj = 0; obj < PC_MAXOBJ; obj++) {
		if (!k->w->objs[obj].used)
			continue;
		if (name_of(k, obj) < 0)
			pc_obj_drop(&k->w->objs[obj]);
		else
			check_obj(k, obj);
	}
	for (int obj = 0; obj < PC_MAXOBJ; obj++)
		if (k->w->objs[obj].used && name_of(k, obj) < 0)
			pc_obj_drop(&k->w->objs[obj]);
	k->w->nops = 0;
}

/* ---- the directories and the verifier ---- */

static int check_dirs(struct pc_model *m, struct rpc_context *rpc, const struct fh *root,
		      struct pc_counts *c)
{
	for (int i = 0; i < 3; i++) {
		struct pc_res l = pc_lookup(rpc, root, pc_dirs[i]), a;

		if (l.status != NFS3_OK) {
			printf("PC FAIL LOOKUP %s: status %d\n", pc_dirs[i], l.status);
			return -1;
		}
		if (m->have_snap) {
			a = pc_getattr(rpc, &m->dir_fh[i]);
			if (l.fileid != m->dir_fileid[i] || a.status != NFS3_OK ||
			    a.fileid != m->dir_fileid[i]) {
				printf("PC STALE dir %s: fileid %" PRIu64 ", was %" PRIu64
				       "; its handle: status %d fileid %" PRIu64 "\n",
				       pc_dirs[i], l.fileid, m->dir_fileid[i], a.status,
				       a.fileid);
				c->stale++;
			}
		}
		m->dir_fh[i] = l.fh;
		m->dir_fileid[i] = l.fileid;
	}
	return 0;
}

/* COMMIT of verf.bin: this boot's write verifier, and the node table synced
 * (every handle the check was given is then promised). */
static int check_verf(struct pc_model *m, struct rpc_context *rpc, const struct fh *root,
		      struct pc_counts *c)
{
	struct pc_res l = pc_lookup(rpc, root, "verf.bin"), r;

	if (l.status != NFS3_OK)
		return -1;
	r = pc_commit(rpc, &l.fh);
	if (r.status != NFS3_OK)
		return -1;
	snprintf(c->verf, sizeof(c->verf), "%s", r.verf);
	c->verf_new = true;
	for (int i = 0; i < m->nverf; i++)
		if (!strcmp(m->verfs[i], r.verf)) {
			printf(
			    "PC LOSS the write verifier %s is that of an earlier boot\n",
			    r.verf);
			c->verf_new = false;
			c->lost++;
		}
	if (m->nverf < PC_MAXVERF)
		snprintf(m->verfs[m->nverf++], 17, "%s", r.verf);
	return 0;
}

int pc_check(struct pc_model *m, struct rpc_context *rpc, const struct fh *root,
	     struct pc_counts *c)
{
	if (check_dirs(m, rpc, root, c))
		return -1;
	for (int i = 0; i < PC_NW; i++) {
		struct wcheck k = {.m = m, .w = &m->w[i], .wi = i, .rpc = rpc, .c = c};

		check_worker(&k);
	}
	if (check_verf(m, rpc, root, c)) {
		printf("PC FAIL COMMIT of verf.bin\n");
		return -1;
	}
	return 0;
}

/* ---- the snapshot ---- */

/* The records of object O of worker W; their number, or -1. */
static int snap_obj(struct pc_log *l, int w, int i, const struct pc_obj *o)
{
	int n = 0;
	char h[2 * NFS_RAW_FH_MAX + 1];
	uint64_t end = o->size / PC_SECTOR;

	if (pc_log_put(l, "O %d %d %" PRIu64 " %o %" PRIu64 " %d", w, i, o->fileid,
		       o->mode, o->size, o->pool))
		return -1;
	n++;
	for (int f = 0; f < o->nfh; f++, n++) {
		pc_hex(o->fh[f].d, o->fh[f].len, h);
		if (pc_log_put(l, "H %d %d %s", w, i, h))
			return -1;
	}
	for (uint64_t s = 0, e; s < end; s = e) {
		for (e = s + 1; e < end && o->sec[e] == o->sec[s]; e++)
			;
		if (!o->sec[s])
			continue;
		if (pc_log_put(l, "K %d %d %" PRIu64 " %" PRIu64 " %" PRIx64, w, i, s,
			       e - s, o->sec[s]))
			return -1;
		n++;
	}
	return n;
}

/* The records of worker W; their number, or -1. */
static int snap_worker(struct pc_log *l, int wi, const struct pc_worker *w)
{
	int n = 0, k;

	for (int i = 0; i < PC_MAXOBJ; i++) {
		if (!w->objs[i].used)
			continue;
		if ((k = snap_obj(l, wi, i, &w->objs[i])) < 0)
			return -1;
		n += k;
	}
	for (int i = 0; i < w->nnames; i++) {
		if (w->names[i].obj < 0)
			continue;
		if (pc_log_put(l, "N %d %s %d", wi, w->names[i].path, w->names[i].obj))
			return -1;
		n++;
	}
	return n;
}

static int snap_globals(struct pc_model *m, struct pc_log *l)
{
	char h[2 * NFS_RAW_FH_MAX + 1];

	for (int i = 0; i < m->nverf; i++)
		if (pc_log_put(l, "V %s", m->verfs[i]))
			return -1;
	for (int i = 0; i < 3; i++) {
		pc_hex(m->dir_fh[i].d, m->dir_fh[i].len, h);
		if (pc_log_put(l, "G %d %" PRIu64 " %s", i, m->dir_fileid[i], h))
			return -1;
	}
	if (pc_log_put(l, "Q %u", m->next_pool))
		return -1;
	return m->nverf + 4;
}

int pc_snapshot(struct pc_model *m, struct pc_log *l, uint32_t boot)
{
	uint64_t start = l->next;
	int n, k;

	if (pc_log_put(l, "S %u", boot) || (n = snap_globals(m, l)) < 0)
		return -1;
	for (int i = 0; i < PC_NW; i++) {
		if ((k = snap_worker(l, i, &m->w[i])) < 0)
			return -1;
		n += k;
	}
	if (pc_log_put(l, "E %u %d", boot, n))
		return -1;
	printf("PC SNAP %" PRIu64 "\n", start);
	return 0;
}
