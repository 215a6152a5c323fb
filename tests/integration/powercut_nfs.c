/* SPDX-License-Identifier: Apache-2.0 */
/* powercut_nfs.c - powercut_client's NFSv3 calls through libnfs' raw API,
 * each waited for on the caller's own connection (powercut.h). */
#define _GNU_SOURCE
#include <string.h>

#include "powercut.h"

/* Paths and texts here are short and bounded (PC_PATH); one cut short
 * would fail the check anyway. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

static void attrs_keep(struct pc_res *o, const post_op_attr *a)
{
	const fattr3 *f = &a->post_op_attr_u.attributes;

	o->attrs = a->attributes_follow;
	if (!o->attrs)
		return;
	o->fileid = f->fileid;
	o->size = f->size;
	o->mode = f->mode & 07777;
	o->nlink = f->nlink;
	o->type = f->type;
}

static void verf_keep(struct pc_res *o, const char v[NFS3_WRITEVERFSIZE])
{
	pc_hex((const unsigned char *)v, NFS3_WRITEVERFSIZE, o->verf);
}

static void keep_getattr(void *data, void *out)
{
	struct pc_res *o = out;
	GETATTR3res *r = data;
	post_op_attr a = {.attributes_follow = 1};

	o->status = r->status;
	if (r->status == NFS3_OK) {
		a.post_op_attr_u.attributes = r->GETATTR3res_u.resok.obj_attributes;
		attrs_keep(o, &a);
	}
}

static void keep_lookup(void *data, void *out)
{
	struct pc_res *o = out;
	LOOKUP3res *r = data;

	o->status = r->status;
	if (r->status == NFS3_OK) {
		nfs_raw_copy_fh(&o->fh, &r->LOOKUP3res_u.resok.object);
		attrs_keep(o, &r->LOOKUP3res_u.resok.obj_attributes);
	}
}

static void keep_read(void *data, void *out)
{
	struct pc_res *o = out;
	READ3res *r = data;
	uint32_t n;

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	n = r->READ3res_u.resok.data.data_len;
	o->count = n < o->count ? n : o->count;
	memcpy(o->buf, r->READ3res_u.resok.data.data_val, o->count);
	o->eof = r->READ3res_u.resok.eof;
	attrs_keep(o, &r->READ3res_u.resok.file_attributes);
}

static void keep_write(void *data, void *out)
{
	struct pc_res *o = out;
	WRITE3res *r = data;

	o->status = r->status;
	if (r->status == NFS3_OK) {
		o->count = r->WRITE3res_u.resok.count;
		o->committed = r->WRITE3res_u.resok.committed;
		verf_keep(o, r->WRITE3res_u.resok.verf);
	}
}

static void keep_commit(void *data, void *out)
{
	struct pc_res *o = out;
	COMMIT3res *r = data;

	o->status = r->status;
	if (r->status == NFS3_OK)
		verf_keep(o, r->COMMIT3res_u.resok.verf);
}

static void keep_create(void *data, void *out)
{
	struct pc_res *o = out;
	CREATE3res *r = data;

	o->status = r->status;
	if (r->status == NFS3_OK && r->CREATE3res_u.resok.obj.handle_follows) {
		nfs_raw_copy_fh(&o->fh, &r->CREATE3res_u.resok.obj.post_op_fh3_u.handle);
		attrs_keep(o, &r->CREATE3res_u.resok.obj_attributes);
	}
}

/* REMOVE, RENAME, LINK, SETATTR: the status comes first in every reply. */
static void keep_status(void *data, void *out)
{
	struct pc_res *o = out;

	o->status = *(nfsstat3 *)data;
}

/* Waits for the call queued (QUEUED: what the rpc_*_async said) with C. */
static void finish(struct rpc_context *rpc, struct call *c, int queued)
{
	nfs_raw_finish_within(rpc, c, queued, PC_CALL_S);
}

struct pc_res pc_getattr(struct rpc_context *rpc, const struct fh *f)
{
	GETATTR3args a = {.object = nfs_raw_fh3(f)};
	struct pc_res o = {.status = -1};
	struct call c = {.keep = keep_getattr, .out = &o};

	finish(rpc, &c, rpc_nfs3_getattr_async(rpc, nfs_raw_on_reply, &a, &c));
	return o;
}

struct pc_res pc_lookup(struct rpc_context *rpc, const struct fh *dir, const char *name)
{
	LOOKUP3args a = {.what = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};
	struct pc_res o = {.status = -1};
	struct call c = {.keep = keep_lookup, .out = &o};

	finish(rpc, &c, rpc_nfs3_lookup_async(rpc, nfs_raw_on_reply, &a, &c));
	return o;
}

struct pc_res pc_read(struct rpc_context *rpc, const struct fh *f, uint64_t off,
		      uint32_t count, unsigned char *buf)
{
	READ3args a = {.file = nfs_raw_fh3(f), .offset = off, .count = count};
	struct pc_res o = {.status = -1, .buf = buf, .count = count};
	struct call c = {.keep = keep_read, .out = &o};

	finish(rpc, &c, rpc_nfs3_read_async(rpc, nfs_raw_on_reply, &a, &c));
	return o;
}

struct pc_res pc_write(struct rpc_context *rpc, const struct fh *f, uint64_t off,
		       const unsigned char *data, uint32_t n, uint32_t stable)
{
	WRITE3args a = {.file = nfs_raw_fh3(f),
			.offset = off,
			.count = n,
			.stable = (stable_how)stable,
			.data = {.data_len = n, .data_val = (char *)data}};
	struct pc_res o = {.status = -1};
	struct call c = {.keep = keep_write, .out = &o};

	finish(rpc, &c, rpc_nfs3_write_async(rpc, nfs_raw_on_reply, &a, &c));
	return o;
}

struct pc_res pc_commit(struct rpc_context *rpc, const struct fh *f)
{
	COMMIT3args a = {.file = nfs_raw_fh3(f)};
	struct pc_res o = {.status = -1};
	struct call c = {.keep = keep_commit, .out = &o};

	finish(rpc, &c, rpc_nfs3_commit_async(rpc, nfs_raw_on_reply, &a, &c));
	return o;
}

struct pc_res pc_create(struct rpc_context *rpc, const struct fh *dir, const char *name)
{
	CREATE3args a = {.where = {.dir = nfs_raw_fh3(dir), .name = (char *)name},
			 .how = {.mode = GUARDED}};
	struct pc_res o = {.status = -1};
	struct call c = {.keep = keep_create, .out = &o};

	a.how.createhow3_u.obj_attributes.mode.set_it = 1;
	a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
	finish(rpc, &c, rpc_nfs3_create_async(rpc, nfs_raw_on_reply, &a, &c));
	return o;
}

struct pc_res pc_rename(struct rpc_context *rpc, const struct fh *fdir, const char *from,
			const struct fh *tdir, const char *to)
{
	RENAME3args a = {.from = {.dir = nfs_raw_fh3(fdir), .name = (char *)from},
			 .to = {.dir = nfs_raw_fh3(tdir), .name = (char *)to}};
	struct pc_res o = {.status = -1};
	struct call c = {.keep = keep_status, .out = &o};

	finish(rpc, &c, rpc_nfs3_rename_async(rpc, nfs_raw_on_reply, &a, &c));
	return o;
}

struct pc_res pc_remove(struct rpc_context *rpc, const struct fh *dir, const char *name)
{
	REMOVE3args a = {.object = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};
	struct pc_res o = {.status = -1};
	struct call c = {.keep = keep_status, .out = &o};

	finish(rpc, &c, rpc_nfs3_remove_async(rpc, nfs_raw_on_reply, &a, &c));
	return o;
}

struct pc_res pc_link(struct rpc_context *rpc, const struct fh *f, const struct fh *dir,
		      const char *name)
{
	LINK3args a = {.file = nfs_raw_fh3(f),
		       .link = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};
	struct pc_res o = {.status = -1};
	struct call c = {.keep = keep_status, .out = &o};

	finish(rpc, &c, rpc_nfs3_link_async(rpc, nfs_raw_on_reply, &a, &c));
	return o;
}

struct pc_res pc_setmode(struct rpc_context *rpc, const struct fh *f, uint32_t mode)
{
	SETATTR3args a = {.object = nfs_raw_fh3(f)};
	struct pc_res o = {.status = -1};
	struct call c = {.keep = keep_status, .out = &o};

	a.new_attributes.mode.set_it = 1;
	a.new_attributes.mode.set_mode3_u.mode = mode;
	finish(rpc, &c, rpc_nfs3_setattr_async(rpc, nfs_raw_on_reply, &a, &c));
	return o;
}

int pc_split(const char *path, const char **base)
{
	const char *slash = strchr(path, '/');

	*base = slash ? slash + 1 : path;
	for (int i = 0; slash && i < 3; i++)
		if (strlen(pc_dirs[i]) == (size_t)(slash - path) &&
		    !strncmp(pc_dirs[i], path, (size_t)(slash - path)))
			return i;
	return -1;
}
