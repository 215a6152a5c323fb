/* SPDX-License-Identifier: Apache-2.0 */
/* nfs_raw.c - libnfs' raw calls made synchronous; see nfs_raw.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "nfs_raw.h"

void nfs_raw_on_reply(struct rpc_context *rpc, int status, void *data, void *priv)
{
	struct call *c = priv;
	(void)rpc;
	c->done = true;
	c->status = status;
	c->err[0] = '\0';
	if (status == RPC_STATUS_SUCCESS && c->keep)
		c->keep(data, c->out);
	else if (status == RPC_STATUS_ERROR && data)
		snprintf(c->err, sizeof(c->err), "%s", (const char *)data);
}

static bool all_done(const struct call *cs, int n)
{
	for (int i = 0; i < n; i++)
		if (!cs[i].done)
			return false;
	return true;
}

int nfs_raw_wait(struct rpc_context *rpc, struct call *cs, int n, int seconds)
{
	time_t end = time(NULL) + seconds;
	while (!all_done(cs, n)) {
		struct pollfd p = {.fd = rpc_get_fd(rpc),
				   .events = (short)rpc_which_events(rpc)};
		if (time(NULL) > end) {
			fprintf(stderr, "no reply in %d s\n", seconds);
			return -1;
		}
		if (poll(&p, 1, 100) < 0 && errno != EINTR) {
			perror("poll");
			return -1;
		}
		if (rpc_service(rpc, p.revents) < 0) {
			fprintf(stderr, "rpc_service: %s\n", rpc_get_error(rpc));
			return -1;
		}
	}
	return 0;
}

int nfs_raw_finish_within(struct rpc_context *rpc, struct call *c, int queued,
			  int seconds)
{
	if (queued) {
		fprintf(stderr, "call not queued: %s\n", rpc_get_error(rpc));
		return -1;
	}
	if (nfs_raw_wait(rpc, c, 1, seconds))
		return -1;
	if (c->status != RPC_STATUS_SUCCESS) {
		fprintf(stderr, "rpc error: %s\n", c->err[0] ? c->err : "(none given)");
		return -1;
	}
	return 0;
}

int nfs_raw_finish(struct rpc_context *rpc, struct call *c, int queued)
{
	return nfs_raw_finish_within(rpc, c, queued, NFS_RAW_WAIT_S);
}

struct rpc_context *nfs_raw_connect_to(const char *host, int port, int prog, int vers)
{
	struct rpc_context *rpc = rpc_init_context();
	struct call c = {0};
	if (!rpc)
		return NULL;
	if (nfs_raw_finish(rpc, &c,
			   rpc_connect_port_async(rpc, host, port, prog, vers,
						  nfs_raw_on_reply, &c))) {
		fprintf(stderr, "connect to %s port %d: %s\n", host, port,
			rpc_get_error(rpc));
		rpc_destroy_context(rpc);
		return NULL;
	}
	return rpc;
}

struct rpc_context *nfs_raw_connect(int port, int prog, int vers)
{
	return nfs_raw_connect_to("127.0.0.1", port, prog, vers);
}

nfs_fh3 nfs_raw_fh3(const struct fh *f)
{
	nfs_fh3 h;
	h.data.data_len = f->len;
	h.data.data_val = (char *)f->d;
	return h;
}

static void keep_fh(struct fh *dst, const char *bytes, uint32_t len)
{
	dst->len = len > NFS_RAW_FH_MAX ? 0 : len;
	memcpy(dst->d, bytes, dst->len);
}

void nfs_raw_copy_fh(struct fh *dst, const nfs_fh3 *src)
{
	keep_fh(dst, src->data.data_val, src->data.data_len);
}

/* What nfs_raw_mnt keeps of a MNT reply. */
struct mnt_out {
	int status;
	struct fh *root;
};

static void keep_mnt(void *data, void *out)
{
	const mountres3 *r = data;
	struct mnt_out *o = out;
	const fhandle3 *h = &r->mountres3_u.mountinfo.fhandle;
	o->status = r->fhs_status;
	if (r->fhs_status == MNT3_OK)
		keep_fh(o->root, h->fhandle3_val, h->fhandle3_len);
}

int nfs_raw_mnt(int port, const char *path, struct fh *root)
{
	struct rpc_context *rpc;
	struct mnt_out o = {.status = -1, .root = root};
	struct call c = {.keep = keep_mnt, .out = &o};
	root->len = 0;
	rpc = nfs_raw_connect(port, MOUNT_PROG, 3);
	if (!rpc)
		return -1;
	if (nfs_raw_finish(rpc, &c,
			   rpc_mount3_mnt_async(rpc, nfs_raw_on_reply, (char *)path, &c)))
		o.status = -1;
	rpc_destroy_context(rpc);
	return o.status;
}

int nfs_raw_umnt(int port, const char *path)
{
	struct rpc_context *rpc = nfs_raw_connect(port, MOUNT_PROG, 3);
	struct call c = {0};
	int rc;

	if (!rpc)
		return -1;
	rc = nfs_raw_finish(
	    rpc, &c, rpc_mount3_umnt_async(rpc, nfs_raw_on_reply, (char *)path, &c));
	rpc_destroy_context(rpc);
	return rc;
}

struct stat_name {
	int status;
	const char *name;
};

#define SN(x) x, #x /* an entry: the value and its name */
static const struct stat_name nfs3_names[] = {
    {SN(NFS3_OK)},	     {SN(NFS3ERR_PERM)},	{SN(NFS3ERR_NOENT)},
    {SN(NFS3ERR_IO)},	     {SN(NFS3ERR_NXIO)},	{SN(NFS3ERR_ACCES)},
    {SN(NFS3ERR_EXIST)},     {SN(NFS3ERR_XDEV)},	{SN(NFS3ERR_NODEV)},
    {SN(NFS3ERR_NOTDIR)},    {SN(NFS3ERR_ISDIR)},	{SN(NFS3ERR_INVAL)},
    {SN(NFS3ERR_FBIG)},	     {SN(NFS3ERR_NOSPC)},	{SN(NFS3ERR_ROFS)},
    {SN(NFS3ERR_MLINK)},     {SN(NFS3ERR_NAMETOOLONG)}, {SN(NFS3ERR_NOTEMPTY)},
    {SN(NFS3ERR_DQUOT)},     {SN(NFS3ERR_STALE)},	{SN(NFS3ERR_REMOTE)},
    {SN(NFS3ERR_BADHANDLE)}, {SN(NFS3ERR_NOT_SYNC)},	{SN(NFS3ERR_BAD_COOKIE)},
    {SN(NFS3ERR_NOTSUPP)},   {SN(NFS3ERR_TOOSMALL)},	{SN(NFS3ERR_SERVERFAULT)},
    {SN(NFS3ERR_BADTYPE)},   {SN(NFS3ERR_JUKEBOX)},
};
static const struct stat_name mnt3_names[] = {
    {SN(MNT3_OK)},	   {SN(MNT3ERR_PERM)},
    {SN(MNT3ERR_NOENT)},   {SN(MNT3ERR_IO)},
    {SN(MNT3ERR_ACCES)},   {SN(MNT3ERR_NOTDIR)},
    {SN(MNT3ERR_INVAL)},   {SN(MNT3ERR_NAMETOOLONG)},
    {SN(MNT3ERR_NOTSUPP)}, {SN(MNT3ERR_SERVERFAULT)},
};
#undef SN

static const char *stat_name(const struct stat_name *t, size_t n, int status)
{
	static char other[4][32]; /* a few names in one printf */
	static unsigned next;
	char *buf;

	if (status == -1)
		return "no reply";
	for (size_t i = 0; i < n; i++)
		if (t[i].status == status)
			return t[i].name;
	buf = other[next++ % 4];
	snprintf(buf, sizeof(other[0]), "status %d", status);
	return buf;
}

const char *nfs_raw_stat_name(int status)
{
	return stat_name(nfs3_names, sizeof(nfs3_names) / sizeof(nfs3_names[0]), status);
}

const char *nfs_raw_mnt_stat_name(int status)
{
	return stat_name(mnt3_names, sizeof(mnt3_names) / sizeof(mnt3_names[0]), status);
}

void nfs_raw_keep_status(void *data, void *out)
{
	*(int *)out = *(int *)data;
}

int nfs_raw_create_or_remove(struct rpc_context *rpc, const struct fh *dir,
			     const char *name, bool create)
{
	int status = -1;
	struct call c = {.keep = nfs_raw_keep_status, .out = &status};
	int queued;

	if (create) {
		CREATE3args a;
		memset(&a, 0, sizeof(a));
		a.where.dir = nfs_raw_fh3(dir);
		a.where.name = (char *)name;
		a.how.mode = UNCHECKED;
		a.how.createhow3_u.obj_attributes.mode.set_it = 1;
		a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
		queued = rpc_nfs3_create_async(rpc, nfs_raw_on_reply, &a, &c);
	} else {
		REMOVE3args a;
		a.object.dir = nfs_raw_fh3(dir);
		a.object.name = (char *)name;
		queued = rpc_nfs3_remove_async(rpc, nfs_raw_on_reply, &a, &c);
	}
	if (nfs_raw_finish(rpc, &c, queued))
		return -1;
	return status;
}

static void keep_mkdir(void *data, void *out)
{
	MKDIR3res *r = data;
	struct nfs_raw_obj *o = out;

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	if (r->MKDIR3res_u.resok.obj.handle_follows)
		nfs_raw_copy_fh(&o->fh, &r->MKDIR3res_u.resok.obj.post_op_fh3_u.handle);
	nfs_raw_keep_attrs(o, &r->MKDIR3res_u.resok.obj_attributes);
}

struct nfs_raw_obj nfs_raw_mkdir(struct rpc_context *rpc, const struct fh *dir,
				 const char *name)
{
	MKDIR3args a;
	struct nfs_raw_obj o = {.status = -1};
	struct call c = {.keep = keep_mkdir, .out = &o};

	memset(&a, 0, sizeof(a));
	a.where.dir = nfs_raw_fh3(dir);
	a.where.name = (char *)name;
	a.attributes.mode.set_it = 1;
	a.attributes.mode.set_mode3_u.mode = 0755;
	if (nfs_raw_finish(rpc, &c, rpc_nfs3_mkdir_async(rpc, nfs_raw_on_reply, &a, &c)))
		o.status = -1;
	return o;
}

int nfs_raw_rename(struct rpc_context *rpc, const struct fh *fdir, const char *fname,
		   const struct fh *tdir, const char *tname)
{
	RENAME3args a = {.from = {.dir = nfs_raw_fh3(fdir), .name = (char *)fname},
			 .to = {.dir = nfs_raw_fh3(tdir), .name = (char *)tname}};
	int status = -1;
	struct call c = {.keep = nfs_raw_keep_status, .out = &status};

	if (nfs_raw_finish(rpc, &c, rpc_nfs3_rename_async(rpc, nfs_raw_on_reply, &a, &c)))
		return -1;
	return status;
}

int nfs_raw_link(struct rpc_context *rpc, const struct fh *file, const struct fh *tdir,
		 const char *tname)
{
	LINK3args a = {.file = nfs_raw_fh3(file),
		       .link = {.dir = nfs_raw_fh3(tdir), .name = (char *)tname}};
	int status = -1;
	struct call c = {.keep = nfs_raw_keep_status, .out = &status};

	if (nfs_raw_finish(rpc, &c, rpc_nfs3_link_async(rpc, nfs_raw_on_reply, &a, &c)))
		return -1;
	return status;
}

void nfs_raw_keep_attrs(struct nfs_raw_obj *o, const post_op_attr *a)
{
	const fattr3 *f = &a->post_op_attr_u.attributes;

	o->attrs = a->attributes_follow;
	if (!o->attrs)
		return;
	o->type = f->type;
	o->mode = f->mode;
	o->nlink = f->nlink;
	o->fileid = f->fileid;
	o->fsid = f->fsid;
	o->size = f->size;
	o->mtime_s = f->mtime.seconds;
	o->mtime_ns = f->mtime.nseconds;
}

static void keep_getattr(void *data, void *out)
{
	GETATTR3res *r = data;
	struct nfs_raw_obj *o = out;
	post_op_attr a = {.attributes_follow = 1};

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	a.post_op_attr_u.attributes = r->GETATTR3res_u.resok.obj_attributes;
	nfs_raw_keep_attrs(o, &a);
}

struct nfs_raw_obj nfs_raw_getattr(struct rpc_context *rpc, const struct fh *fh)
{
	GETATTR3args a = {.object = nfs_raw_fh3(fh)};
	struct nfs_raw_obj o = {.status = -1, .fh = *fh};
	struct call c = {.keep = keep_getattr, .out = &o};

	if (nfs_raw_finish(rpc, &c,
			   rpc_nfs3_getattr_async(rpc, nfs_raw_on_reply, &a, &c)))
		o.status = -1;
	return o;
}

static void keep_lookup(void *data, void *out)
{
	LOOKUP3res *r = data;
	struct nfs_raw_obj *o = out;

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	nfs_raw_copy_fh(&o->fh, &r->LOOKUP3res_u.resok.object);
	nfs_raw_keep_attrs(o, &r->LOOKUP3res_u.resok.obj_attributes);
}

struct nfs_raw_obj nfs_raw_lookup(struct rpc_context *rpc, const struct fh *dir,
				  const char *name)
{
	LOOKUP3args a = {.what = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};
	struct nfs_raw_obj o = {.status = -1};
	struct call c = {.keep = keep_lookup, .out = &o};

	if (nfs_raw_finish(rpc, &c, rpc_nfs3_lookup_async(rpc, nfs_raw_on_reply, &a, &c)))
		o.status = -1;
	return o;
}

struct nfs_raw_obj nfs_raw_walk(struct rpc_context *rpc, const struct fh *dir,
				const char *path)
{
	char buf[4096], *save = NULL;
	struct nfs_raw_obj o = {.status = NFS3_OK, .fh = *dir};

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *t = strtok_r(buf, "/", &save); t && o.status == NFS3_OK;
	     t = strtok_r(NULL, "/", &save)) {
		struct fh d = o.fh;

		o = nfs_raw_lookup(rpc, &d, t);
	}
	return o;
}

/* What nfs_raw_read keeps of a READ reply. */
struct read_out {
	int status;
	void *buf;
	uint32_t max, got;
	bool eof;
};

static void keep_read(void *data, void *out)
{
	READ3res *r = data;
	struct read_out *o = out;

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	o->got = r->READ3res_u.resok.data.data_len;
	if (o->got > o->max) /* more than asked: keep what fits, the test sees it */
		o->got = o->max;
	memcpy(o->buf, r->READ3res_u.resok.data.data_val, o->got);
	o->eof = r->READ3res_u.resok.eof;
}

int nfs_raw_read(struct rpc_context *rpc, const struct fh *fh, uint64_t offset,
		 uint32_t count, void *buf, uint32_t *got, bool *eof)
{
	READ3args a = {.file = nfs_raw_fh3(fh), .offset = offset, .count = count};
	struct read_out o = {.status = -1, .buf = buf, .max = count};
	struct call c = {.keep = keep_read, .out = &o};

	if (nfs_raw_finish(rpc, &c, rpc_nfs3_read_async(rpc, nfs_raw_on_reply, &a, &c)))
		o.status = -1;
	*got = o.got;
	*eof = o.eof;
	return o.status;
}

struct nfs_raw_text nfs_raw_read_text(struct rpc_context *rpc, const struct fh *fh)
{
	struct nfs_raw_text t;

	t.status = nfs_raw_read(rpc, fh, 0, NFS_RAW_TEXT_MAX, t.data, &t.count, &t.eof);
	t.data[t.count] = '\0';
	return t;
}

static void keep_readlink(void *data, void *out)
{
	READLINK3res *r = data;
	struct nfs_raw_text *t = out;

	t->status = r->status;
	if (r->status != NFS3_OK)
		return;
	snprintf(t->data, sizeof(t->data), "%s", r->READLINK3res_u.resok.data);
	t->count = (uint32_t)strlen(t->data);
}

struct nfs_raw_text nfs_raw_readlink(struct rpc_context *rpc, const struct fh *fh)
{
	READLINK3args a = {.symlink = nfs_raw_fh3(fh)};
	struct nfs_raw_text t = {.status = -1};
	struct call c = {.keep = keep_readlink, .out = &t};

	if (nfs_raw_finish(rpc, &c,
			   rpc_nfs3_readlink_async(rpc, nfs_raw_on_reply, &a, &c)))
		t.status = -1;
	return t;
}

int nfs_raw_write(struct rpc_context *rpc, const struct fh *fh, uint64_t offset,
		  const void *data, uint32_t len)
{
	WRITE3args a = {
	    .file = nfs_raw_fh3(fh), .offset = offset, .count = len, .stable = FILE_SYNC};
	int status = -1;
	struct call c = {.keep = nfs_raw_keep_status, .out = &status};

	a.data.data_len = len;
	a.data.data_val = (char *)data;
	if (nfs_raw_finish(rpc, &c, rpc_nfs3_write_async(rpc, nfs_raw_on_reply, &a, &c)))
		return -1;
	return status;
}

int nfs_raw_setattr_mode(struct rpc_context *rpc, const struct fh *fh, uint32_t mode)
{
	SETATTR3args a = {.object = nfs_raw_fh3(fh)};
	int status = -1;
	struct call c = {.keep = nfs_raw_keep_status, .out = &status};

	a.new_attributes.mode.set_it = 1;
	a.new_attributes.mode.set_mode3_u.mode = mode;
	if (nfs_raw_finish(rpc, &c,
			   rpc_nfs3_setattr_async(rpc, nfs_raw_on_reply, &a, &c)))
		return -1;
	return status;
}

/* What nfs_raw_access keeps of an ACCESS reply. */
struct access_out {
	int status;
	uint32_t granted;
};

static void keep_access(void *data, void *out)
{
	ACCESS3res *r = data;
	struct access_out *o = out;

	o->status = r->status;
	if (r->status == NFS3_OK)
		o->granted = r->ACCESS3res_u.resok.access;
}

int nfs_raw_access(struct rpc_context *rpc, const struct fh *fh, uint32_t want,
		   uint32_t *granted)
{
	ACCESS3args a = {.object = nfs_raw_fh3(fh), .access = want};
	struct access_out o = {.status = -1};
	struct call c = {.keep = keep_access, .out = &o};

	if (nfs_raw_finish(rpc, &c, rpc_nfs3_access_async(rpc, nfs_raw_on_reply, &a, &c)))
		o.status = -1;
	*granted = o.granted;
	return o.status;
}

double nfs_raw_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

long long nfs_raw_cpu_ticks(int pid)
{
	char path[64], buf[2048], *p;
	unsigned long long ut, st;
	FILE *f;
	size_t n;

	if (pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* the command name may hold spaces and parentheses: skip to the last ')' */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
			 &ut, &st) != 2)
		return -1;
	return (long long)(ut + st);
}
