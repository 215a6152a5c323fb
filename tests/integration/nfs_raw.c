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
