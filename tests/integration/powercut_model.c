/* SPDX-License-Identifier: Apache-2.0 */
/* powercut_model.c - powercut_client's data, ack log and model (powercut.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "powercut.h"

/* Paths and texts here are short and bounded (PC_PATH); one cut short
 * would fail the check anyway. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

const char *const pc_dirs[3] = {"up", "mg", "pool"};

#define DATA_MAGIC 0x5043555444415441ull /* "PCUTDATA" */
#define LOG_MAGIC  0x50434c4f47303031ull /* "PCLOG001" */
#define LOG_HDR	   32
#define LOG_TEXT   (PC_SECTOR - LOG_HDR)
#define READ_SECS  256

/* ---- data ---- */

uint64_t pc_pool_size(unsigned p)
{
	return (256u << 10) << (p % 4);
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void pc_fill(uint64_t op, uint64_t sec, unsigned char out[PC_SECTOR])
{
	uint64_t w[PC_SECTOR / 8], s = op * 0x2545f4914f6cdd1dull ^ sec;

	w[0] = DATA_MAGIC;
	w[1] = op;
	w[2] = sec;
	for (unsigned i = 3; i < PC_SECTOR / 8; i++)
		w[i] = splitmix(&s);
	memcpy(out, w, PC_SECTOR);
}

static bool all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

uint64_t pc_decode(const unsigned char in[PC_SECTOR], uint64_t sec)
{
	unsigned char want[PC_SECTOR];
	uint64_t h[3];

	if (all_zero(in, PC_SECTOR))
		return 0;
	memcpy(h, in, sizeof(h));
	if (h[0] != DATA_MAGIC || h[2] != sec || !h[1] || h[1] >= PC_BAD)
		return PC_BAD;
	pc_fill(h[1], sec, want);
	return memcmp(in, want, PC_SECTOR) ? PC_BAD : h[1];
}

/* ---- the log ---- */

/* The header of a record sector; the text follows. */
struct log_hdr {
	uint64_t magic, index;
	uint32_t boot, len;
	uint64_t sum;
};

static uint64_t fnv(const unsigned char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static uint64_t sector_sum(const unsigned char *s)
{
	unsigned char c[PC_SECTOR];

	memcpy(c, s, PC_SECTOR);
	memset(c + offsetof(struct log_hdr, sum), 0, sizeof(uint64_t));
	return fnv(c, PC_SECTOR);
}

int pc_log_open(struct pc_log *l, const char *dev, uint32_t boot)
{
	l->fd = open(dev, O_RDWR | O_DIRECT | O_DSYNC | O_CLOEXEC);
	if (l->fd < 0)
		return -errno;
	if (posix_memalign(&l->buf, 4096, PC_SECTOR)) {
		close(l->fd);
		return -ENOMEM;
	}
	l->boot = boot;
	pthread_mutex_init(&l->lock, NULL);
	return 0;
}

/* Writes the record TEXT at l->next; the caller holds the lock. */
static int log_write(struct pc_log *l, const char *text, size_t n)
{
	struct log_hdr h = {
	    .magic = LOG_MAGIC, .index = l->next, .boot = l->boot, .len = (uint32_t)n};
	unsigned char *s = l->buf;

	memset(s, 0, PC_SECTOR);
	memcpy(s, &h, sizeof(h));
	memcpy(s + LOG_HDR, text, n);
	h.sum = sector_sum(s);
	memcpy(s, &h, sizeof(h));
	if (pwrite(l->fd, s, PC_SECTOR, (off_t)(l->next * PC_SECTOR)) != PC_SECTOR) {
		printf("PC FAIL log write at sector %" PRIu64 ": %s\n", l->next,
		       strerror(errno));
		return -1;
	}
	l->next++;
	return 0;
}

int pc_log_put(struct pc_log *l, const char *fmt, ...)
{
	char text[LOG_TEXT + 1];
	va_list ap;
	int n, err;

	va_start(ap, fmt);
	n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (n < 0 || n > LOG_TEXT) {
		printf("PC FAIL log record too long: %.60s\n", text);
		return -1;
	}
	pthread_mutex_lock(&l->lock);
	err = log_write(l, text, (size_t)n);
	pthread_mutex_unlock(&l->lock);
	return err;
}

/* The text of sector S read at index IDX, or NULL when it is no record of a
 * boot at or after *BOOT (which it then updates). */
static const char *log_record(unsigned char *s, uint64_t idx, uint32_t *boot)
{
	struct log_hdr h;

	memcpy(&h, s, sizeof(h));
	if (h.magic != LOG_MAGIC || h.index != idx || h.len > LOG_TEXT ||
	    h.boot < *boot || h.sum != sector_sum(s))
		return NULL;
	*boot = h.boot;
	s[LOG_HDR + h.len] = '\0';
	return (const char *)s + LOG_HDR;
}

/* The lines of the valid records from sector FROM: *LINES (malloc'ed
 * strings), their number in *N, the first invalid sector in *END. */
static int log_read(const char *dev, uint64_t from, char ***lines, int *n, uint64_t *end)
{
	unsigned char *buf;
	int fd = open(dev, O_RDONLY | O_DIRECT | O_CLOEXEC), cap = 0;
	uint32_t boot = 0;
	uint64_t idx = from;
	ssize_t got = 0;

	*lines = NULL;
	*n = 0;
	if (fd < 0 || posix_memalign((void **)&buf, 4096, READ_SECS * PC_SECTOR)) {
		printf("PC FAIL open %s: %s\n", dev, strerror(errno));
		return -1;
	}
	for (bool more = true; more;) {
		got = pread(fd, buf, READ_SECS * PC_SECTOR, (off_t)(idx * PC_SECTOR));
		more = got == READ_SECS * PC_SECTOR;
		for (ssize_t i = 0; i + PC_SECTOR <= got; i += PC_SECTOR, idx++) {
			const char *t = log_record(buf + i, idx, &boot);

			if (!t) {
				more = false;
				break;
			}
			if (*n == cap) {
				cap = cap ? 2 * cap : 1024;
				*lines = realloc(*lines, (size_t)cap * sizeof(char *));
			}
			(*lines)[(*n)++] = strdup(t);
		}
	}
	*end = idx;
	free(buf);
	close(fd);
	return got < 0 ? -1 : 0;
}

/* ---- the model ---- */

void pc_hex(const unsigned char *p, uint32_t n, char *out)
{
	for (uint32_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
	out[2 * n] = '\0';
}

bool pc_unhex_fh(const char *s, struct fh *f)
{
	size_t n = strlen(s);

	if (n % 2 || n / 2 > NFS_RAW_FH_MAX || !n)
		return false;
	f->len = (uint32_t)(n / 2);
	for (uint32_t i = 0; i < f->len; i++)
		if (sscanf(s + 2 * i, "%2hhx", &f->d[i]) != 1)
			return false;
	return true;
}

int pc_name_find(const struct pc_worker *w, const char *path)
{
	for (int i = 0; i < w->nnames; i++)
		if (!strcmp(w->names[i].path, path))
			return i;
	return -1;
}

int pc_name_add(struct pc_worker *w, const char *path)
{
	int i = pc_name_find(w, path);

	if (i >= 0 || w->nnames == PC_MAXNAME)
		return i;
	snprintf(w->names[w->nnames].path, PC_PATH, "%s", path);
	w->names[w->nnames].obj = -1;
	return w->nnames++;
}

int pc_obj_new(struct pc_worker *w)
{
	for (int i = 0; i < PC_MAXOBJ; i++) {
		struct pc_obj *o = &w->objs[i];

		if (o->used)
			continue;
		if (!o->sec)
			o->sec = malloc(PC_MAXSIZE / PC_SECTOR * sizeof(uint64_t));
		memset(o->sec, 0, PC_MAXSIZE / PC_SECTOR * sizeof(uint64_t));
		o->used = true;
		o->fileid = 0;
		o->nfh = 0;
		o->mode = 0644;
		o->mode_alt = 0;
		o->promised = false;
		o->old_fileid = 0;
		o->newid_by = 0;
		o->newid_applied = false;
		o->pool = -1;
		o->size = 0;
		o->nwl = 0;
		return i;
	}
	return -1;
}

void pc_obj_drop(struct pc_obj *o)
{
	o->used = false;
	o->nwl = 0;
}

void pc_obj_add_fh(struct pc_obj *o, const struct fh *f)
{
	for (int i = 0; i < o->nfh; i++)
		if (o->fh[i].len == f->len && !memcmp(o->fh[i].d, f->d, f->len))
			return;
	if (o->nfh < PC_MAXFH && f->len)
		o->fh[o->nfh++] = *f;
}

void pc_obj_add_write(struct pc_obj *o, uint64_t op, uint64_t off, uint64_t len,
		      enum pc_wstate st)
{
	if (o->nwl == o->wlcap) {
		o->wlcap = o->wlcap ? 2 * o->wlcap : 16;
		o->wl = realloc(o->wl, (size_t)o->wlcap * sizeof(*o->wl));
	}
	o->wl[o->nwl++] = (struct pc_write){.op = op, .off = off, .len = len, .st = st};
}

void pc_obj_commit(struct pc_obj *o)
{
	for (int i = 0; i < o->nwl; i++)
		if (o->wl[i].st == PC_PENDING)
			o->wl[i].st = PC_CERTAIN;
}

int pc_links(const struct pc_name *names, int n, int obj)
{
	int k = 0;

	for (int i = 0; i < n; i++)
		k += names[i].obj == obj;
	return k;
}

static int name_in(const struct pc_name *names, int n, const char *path)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(names[i].path, path))
			return i;
	return -1;
}

void pc_apply_names(struct pc_name *names, int n, const struct pc_op *op, int newobj)
{
	int a = name_in(names, n, op->a), b = op->b[0] ? name_in(names, n, op->b) : -1;

	if (a < 0)
		return;
	switch (op->kind) {
	case 'C':
		names[a].obj = newobj;
		break;
	case 'R':
		if (b >= 0 && names[a].obj != names[b].obj) {
			names[b].obj = names[a].obj;
			names[a].obj = -1;
		}
		break;
	case 'D':
		names[a].obj = -1;
		break;
	case 'L':
		if (b >= 0)
			names[b].obj = names[a].obj;
		break;
	default:
		break;
	}
}

/* Whether an acknowledged OP made the node table durable (a sync call). */
static bool op_syncs(const struct pc_op *op)
{
	return op->kind != 'P' && !(op->kind == 'W' && op->stable == 0);
}

/* CREATE or the claim of a pool file (LOOKUP): the object they name. */
static void apply_new(struct pc_worker *w, const struct pc_op *op)
{
	int a = pc_name_add(w, op->a), o;

	if (a < 0 || (o = pc_obj_new(w)) < 0)
		return;
	if (op->kind == 'P') {
		w->objs[o].pool = (int)op->off;
		w->objs[o].size = pc_pool_size((unsigned)op->off);
		for (uint64_t s = 0; s < w->objs[o].size / PC_SECTOR; s++)
			w->objs[o].sec[s] = PC_LOWER | op->off;
		w->names[a].obj = o;
	} else
		pc_apply_names(w->names, w->nnames, op, o);
	if (op->acked) {
		w->objs[o].fileid = op->fileid;
		pc_obj_add_fh(&w->objs[o], &op->fh);
	}
}

/* The object a call on name PATH works on, or NULL. */
static struct pc_obj *obj_at(struct pc_worker *w, const char *path)
{
	int a = pc_name_find(w, path);

	return a < 0 || w->names[a].obj < 0 ? NULL : &w->objs[w->names[a].obj];
}

static void apply_data(struct pc_worker *w, const struct pc_op *op)
{
	struct pc_obj *o = obj_at(w, op->a);

	if (!o)
		return;
	if (op->kind == 'W')
		pc_obj_add_write(o, op->op, op->off, op->len,
				 !op->acked   ? PC_INFLIGHT
				 : op->stable ? PC_CERTAIN
					      : PC_PENDING);
	else if (op->kind == 'M' && op->acked)
		pc_obj_commit(o);
	else if (op->kind == 'S') {
		if (op->acked)
			o->mode = op->mode;
		else
			o->mode_alt = op->mode;
	}
}

/* Objects no name of W shows any more are gone. */
static void drop_unnamed(struct pc_worker *w)
{
	for (int i = 0; i < PC_MAXOBJ; i++)
		if (w->objs[i].used && !pc_links(w->names, w->nnames, i))
			pc_obj_drop(&w->objs[i]);
}

void pc_apply(struct pc_worker *w, const struct pc_op *op)
{
	if (op->kind == 'P' || (op->kind == 'C' && op->acked))
		apply_new(w, op);
	else if (op->kind == 'W' || op->kind == 'M' || op->kind == 'S')
		apply_data(w, op);
	else if (op->acked) {
		pc_name_add(w, op->a);
		if (op->b[0])
			pc_name_add(w, op->b);
		pc_apply_names(w->names, w->nnames, op, -1);
		drop_unnamed(w);
	}
	if (op->acked && op->status == 0 && op_syncs(op))
		for (int i = 0; i < PC_MAXOBJ; i++)
			w->objs[i].promised |= w->objs[i].used;
}

/* ---- loading the log ---- */

static void model_clear_workers(struct pc_model *m)
{
	for (int i = 0; i < PC_NW; i++) {
		struct pc_worker *w = &m->w[i];

		for (int o = 0; o < PC_MAXOBJ; o++)
			pc_obj_drop(&w->objs[o]);
		w->nnames = 0;
		w->nops = 0;
	}
	m->nverf = 0;
}

static int snap_obj(struct pc_model *m, const char *t)
{
	unsigned w, o, mode;
	int pool;
	uint64_t fileid, size;
	struct pc_obj *ob;

	if (sscanf(t, "O %u %u %" SCNu64 " %o %" SCNu64 " %d", &w, &o, &fileid, &mode,
		   &size, &pool) != 6 ||
	    w >= PC_NW || o >= PC_MAXOBJ || size > PC_MAXSIZE)
		return -1;
	ob = &m->w[w].objs[o];
	if (!ob->sec)
		ob->sec = malloc(PC_MAXSIZE / PC_SECTOR * sizeof(uint64_t));
	memset(ob->sec, 0, PC_MAXSIZE / PC_SECTOR * sizeof(uint64_t));
	*ob = (struct pc_obj){.used = true,
			      .fileid = fileid,
			      .mode = mode,
			      .promised = true,
			      .pool = pool,
			      .size = size,
			      .sec = ob->sec,
			      .wl = ob->wl,
			      .wlcap = ob->wlcap};
	return 0;
}

static int snap_fh(struct pc_model *m, const char *t)
{
	unsigned w, o;
	char h[2 * NFS_RAW_FH_MAX + 2];
	struct fh f;

	if (sscanf(t, "H %u %u %129s", &w, &o, h) != 3 || w >= PC_NW || o >= PC_MAXOBJ ||
	    !m->w[w].objs[o].used || !pc_unhex_fh(h, &f))
		return -1;
	pc_obj_add_fh(&m->w[w].objs[o], &f);
	return 0;
}

static int snap_content(struct pc_model *m, const char *t)
{
	unsigned w, o;
	uint64_t start, count, op;

	if (sscanf(t, "K %u %u %" SCNu64 " %" SCNu64 " %" SCNx64, &w, &o, &start, &count,
		   &op) != 5 ||
	    w >= PC_NW || o >= PC_MAXOBJ || !m->w[w].objs[o].used ||
	    start + count > PC_MAXSIZE / PC_SECTOR)
		return -1;
	for (uint64_t s = start; s < start + count; s++)
		m->w[w].objs[o].sec[s] = op;
	return 0;
}

static int snap_name(struct pc_model *m, const char *t)
{
	unsigned w;
	int o, a;
	char path[PC_PATH];

	if (sscanf(t, "N %u %23s %d", &w, path, &o) != 3 || w >= PC_NW)
		return -1;
	a = pc_name_add(&m->w[w], path);
	if (a < 0)
		return -1;
	m->w[w].names[a].obj = o;
	return 0;
}

static int snap_dir(struct pc_model *m, const char *t)
{
	unsigned i;
	uint64_t fileid;
	char h[2 * NFS_RAW_FH_MAX + 2];

	if (sscanf(t, "G %u %" SCNu64 " %129s", &i, &fileid, h) != 3 || i >= 3 ||
	    !pc_unhex_fh(h, &m->dir_fh[i]))
		return -1;
	m->dir_fileid[i] = fileid;
	return 0;
}

/* One record of a snapshot. */
static int snap_line(struct pc_model *m, const char *t)
{
	switch (t[0]) {
	case 'V':
		if (m->nverf < PC_MAXVERF)
			snprintf(m->verfs[m->nverf++], 17, "%.16s", t + 2);
		return 0;
	case 'G':
		return snap_dir(m, t);
	case 'Q':
		return sscanf(t, "Q %u", &m->next_pool) == 1 ? 0 : -1;
	case 'O':
		return snap_obj(m, t);
	case 'H':
		return snap_fh(m, t);
	case 'N':
		return snap_name(m, t);
	case 'K':
		return snap_content(m, t);
	default:
		return -1;
	}
}

static struct pc_op *op_push(struct pc_worker *w)
{
	if (w->nops == w->opcap) {
		w->opcap = w->opcap ? 2 * w->opcap : 64;
		w->ops = realloc(w->ops, (size_t)w->opcap * sizeof(*w->ops));
	}
	memset(&w->ops[w->nops], 0, sizeof(w->ops[0]));
	return &w->ops[w->nops++];
}

static int log_intent(struct pc_model *m, const char *t)
{
	unsigned w;
	char kind, a[PC_PATH], b[PC_PATH];
	uint64_t op, off, len;
	unsigned stable, mode;
	struct pc_op *p;

	if (sscanf(t, "I %u %" SCNx64 " %c %23s %23s %" SCNu64 " %" SCNu64 " %u %o", &w,
		   &op, &kind, a, b, &off, &len, &stable, &mode) != 9 ||
	    w >= PC_NW)
		return -1;
	if (m->w[w].nops && !m->w[w].ops[m->w[w].nops - 1].acked) {
		printf("PC FAIL log: worker %u: a call after one with no ack\n", w);
		return -1;
	}
	p = op_push(&m->w[w]);
	*p = (struct pc_op){.op = op,
			    .kind = kind,
			    .off = off,
			    .len = len,
			    .stable = stable,
			    .mode = mode};
	snprintf(p->a, PC_PATH, "%s", a);
	snprintf(p->b, PC_PATH, "%s", strcmp(b, "-") ? b : "");
	if (kind == 'P' && off + 1 > m->next_pool)
		m->next_pool = (unsigned)off + 1;
	return 0;
}

static int log_ack(struct pc_model *m, const char *t)
{
	unsigned w;
	uint64_t op, fileid;
	int status;
	char h[2 * NFS_RAW_FH_MAX + 2], verf[20];
	struct pc_op *p;

	if (sscanf(t, "A %u %" SCNx64 " %d %" SCNu64 " %129s %19s", &w, &op, &status,
		   &fileid, h, verf) != 6 ||
	    w >= PC_NW || !m->w[w].nops)
		return -1;
	p = &m->w[w].ops[m->w[w].nops - 1];
	if (p->op != op || p->acked)
		return -1;
	p->acked = true;
	p->status = status;
	p->fileid = fileid;
	if (strcmp(h, "-"))
		pc_unhex_fh(h, &p->fh);
	snprintf(p->verf, sizeof(p->verf), "%.16s", verf);
	return 0;
}

/* The index of the "S" of the last complete snapshot in LINES, or -1; its
 * "E" in *E. */
static int last_snapshot(char **lines, int n, int *e)
{
	int start = -1, best = -1;

	for (int i = 0; i < n; i++) {
		unsigned b, k;

		if (lines[i][0] == 'S')
			start = i;
		else if (lines[i][0] == 'E' && start >= 0 &&
			 sscanf(lines[i], "E %u %u", &b, &k) == 2 &&
			 (int)k == i - start - 1) {
			best = start;
			*e = i;
			start = -1;
		} else if (lines[i][0] == 'I' || lines[i][0] == 'A')
			start = -1;
	}
	return best;
}

static int model_apply_lines(struct pc_model *m, char **lines, int n)
{
	int e = -1, s = last_snapshot(lines, n, &e), first = 0;

	if (s >= 0) {
		m->have_snap = true;
		sscanf(lines[s], "S %u", &m->boot);
		for (int i = s + 1; i < e; i++)
			if (snap_line(m, lines[i])) {
				printf("PC FAIL log: bad snapshot record '%s'\n",
				       lines[i]);
				return -1;
			}
		first = e + 1;
	}
	for (int i = first; i < n; i++) {
		int err = 0;

		if (lines[i][0] == 'I')
			err = log_intent(m, lines[i]);
		else if (lines[i][0] == 'A')
			err = log_ack(m, lines[i]);
		if (err) {
			printf("PC FAIL log: bad record '%s'\n", lines[i]);
			return -1;
		}
	}
	return 0;
}

int pc_model_load(struct pc_model *m, const char *dev, uint64_t from)
{
	char **lines;
	int n, err;

	model_clear_workers(m);
	m->have_snap = false;
	m->next_pool = 0;
	if (log_read(dev, from, &lines, &n, &m->log_end))
		return -1;
	err = model_apply_lines(m, lines, n);
	for (int i = 0; i < n; i++)
		free(lines[i]);
	free(lines);
	return err;
}

int pc_log_dump(const char *dev, uint64_t from)
{
	char **lines;
	int n;
	uint64_t end;

	if (log_read(dev, from, &lines, &n, &end))
		return -1;
	for (int i = 0; i < n; i++) {
		printf("%s\n", lines[i]);
		free(lines[i]);
	}
	free(lines);
	printf("# %d records, the log ends at sector %" PRIu64 "\n", n, end);
	return 0;
}

void pc_model_free(struct pc_model *m)
{
	for (int i = 0; i < PC_NW; i++) {
		for (int o = 0; o < PC_MAXOBJ; o++) {
			free(m->w[i].objs[o].sec);
			free(m->w[i].objs[o].wl);
		}
		free(m->w[i].ops);
	}
}
