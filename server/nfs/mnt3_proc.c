/* SPDX-License-Identifier: Apache-2.0 */
/* mnt3_proc.c - the MOUNT v3 program (RFC 1813 appendix I).
 *
 * MNT turns an export path into the export's root file handle, for a caller
 * the export's client rules admit (access.c), and for a per-client export
 * into the root of the caller's own union, opened on its first MNT
 * (exports/table.c); EXPORT lists what the caller may mount.  The mount list
 * (DUMP, UMNT, UMNTALL) is advisory bookkeeping, as in every server: clients
 * never rely on it, so it lives in memory only and is capped.  Results are
 * built in the call's arena.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "nfs.h"

/* More entries than any real site has; bounds what clients can make us hold. */
#define MOUNT_LIST_MAX 65536

static const char *client_host(const struct srv_req *req, char *buf, size_t len)
{
	if (!req->rpc->peer)
		return "-";
	return rpc_addr_str(req->rpc->peer, false, buf, len);
}

/* ---- the mount list (guarded by srv->mounts_lock) ---- */

static bool mount_matches(const struct srv_mount_entry *m, const char *host,
			  const char *path)
{
	return strcmp(m->host, host) == 0 && (!path || strcmp(m->path, path) == 0);
}

static void mount_add(struct srv *s, const char *host, const char *path)
{
	struct srv_mount_entry *m;

	pthread_mutex_lock(&s->mounts_lock);
	for (size_t i = 0; i < s->nmounts; i++)
		if (mount_matches(&s->mounts[i], host, path))
			goto out;
	if (s->nmounts >= MOUNT_LIST_MAX)
		goto out;
	m = realloc(s->mounts, (s->nmounts + 1) * sizeof(*m));
	if (!m)
		goto out;
	s->mounts = m;
	m = &s->mounts[s->nmounts++];
	snprintf(m->host, sizeof(m->host), "%s", host);
	snprintf(m->path, sizeof(m->path), "%s", path);
	m->since = time(NULL);
out:
	pthread_mutex_unlock(&s->mounts_lock);
}

/* Removes HOST's entry for PATH, or every entry of HOST when PATH is NULL. */
static void mount_remove(struct srv *s, const char *host, const char *path)
{
	size_t keep = 0;

	pthread_mutex_lock(&s->mounts_lock);
	for (size_t i = 0; i < s->nmounts; i++)
		if (!mount_matches(&s->mounts[i], host, path))
			s->mounts[keep++] = s->mounts[i];
	s->nmounts = keep;
	pthread_mutex_unlock(&s->mounts_lock);
}

/* ---- handlers ---- */

static void mnt3_null(struct rpc_req *rq, void *args, void *res)
{
	(void)rq;
	(void)args;
	(void)res;
}

static mountstat3 mnt3_status_from_errno(int err)
{
	switch (-err) {
	case ENOENT:
	case ESTALE:
		return MNT3ERR_NOENT;
	case EACCES:
	case EPERM:
		return MNT3ERR_ACCES;
	case ENOTDIR:
		return MNT3ERR_NOTDIR;
	case ENAMETOOLONG:
		return MNT3ERR_NAMETOOLONG;
	case EIO:
		return MNT3ERR_IO;
	default:
		return MNT3ERR_SERVERFAULT;
	}
}

/* Resolves REL (a relative path, "" for the root) from the root of EX, one
 * component at a time through the union, so a mount of a directory below an
 * export sees the merged tree and never follows a symlink.  *out is owned by
 * the caller. */
static int mnt_walk(struct srv_export *ex, char *rel, struct un_obj **out)
{
	struct un_obj *cur, *next;
	char *save = NULL;
	int rc = un_root(ex->ux, &cur);

	for (char *c = strtok_r(rel, "/", &save); rc == 0 && c;
	     c = strtok_r(NULL, "/", &save)) {
		rc = strcmp(c, "..") == 0 ? -EACCES : un_lookup(ex->ux, cur, c, &next);
		un_obj_put(cur);
		cur = rc == 0 ? next : NULL;
	}
	if (rc == 0 && un_obj_type(cur) != S_IFDIR) {
		un_obj_put(cur);
		rc = -ENOTDIR;
	}
	if (rc == 0)
		*out = cur;
	return rc;
}

/* Fills OK with the handle of directory REL of EX and the flavour list
 * {AUTH_SYS}. */
static mountstat3 mnt_dir(struct srv_req *req, struct srv_export *ex, char *rel,
			  mountres3_ok *ok)
{
	uint8_t *fh = rpc_arena_alloc(req->rpc->arena, UN_FH_MAX);
	int *flavors = rpc_arena_alloc(req->rpc->arena, sizeof(*flavors));
	struct un_obj *dir = NULL;
	int rc;

	if (!fh || !flavors)
		return MNT3ERR_SERVERFAULT;
	rc = mnt_walk(ex, rel, &dir);
	if (rc < 0)
		return mnt3_status_from_errno(rc);
	ok->fhandle.fhandle3_len = (u_int)un_handle_encode(ex->ux, un_obj_id(dir), fh);
	ok->fhandle.fhandle3_val = (char *)fh;
	un_obj_put(dir);
	/* AUTH_SYS only: the Linux client picks the first flavour it supports. */
	flavors[0] = AUTH_SYS;
	ok->auth_flavors.auth_flavors_len = 1;
	ok->auth_flavors.auth_flavors_val = flavors;
	return MNT3_OK;
}

/* The normalised path of directory REL of EX, as the mount list records it. */
static void mount_path(const struct srv_export *ex, const char *rel, char *out,
		       size_t len)
{
	bool root = strcmp(ex->path, "/") == 0;

	int n = *rel ? snprintf(out, len, "%s/%s", root ? "" : ex->path, rel)
		     : snprintf(out, len, "%s", ex->path);

	/* A path too long for the list is listed as its export. */
	if (n < 0 || (size_t)n >= len)
		snprintf(out, len, "%s", ex->path);
}

static void mnt3_mnt(struct rpc_req *rq, void *args, void *res)
{
	struct srv_req *req = srv_req_of(rq);
	const char *path = *(dirpath *)args;
	mountres3 *r = res;
	char host[INET6_ADDRSTRLEN];
	char rel[MNTPATHLEN + 1], full[MNTPATHLEN + 1];
	struct srv_export *ex = srv_export_containing(req->srv, path, rel, sizeof(rel));
	struct srv_export *u;

	client_host(req, host, sizeof(host));
	if (!ex) {
		RPC_LOG_LIMITED(RPC_LOG_INFO, "MNT %s from %s: no such export", path,
				host);
		r->fhs_status = MNT3ERR_NOENT;
		return;
	}
	/* The rule decides before anything of the export is looked at; a
	 * per-client export then gets the caller's own union. */
	if (!srv_access_rule(req->srv, ex, req->rpc->peer, "MNT")) {
		r->fhs_status = MNT3ERR_ACCES;
		return;
	}
	u = srv_export_instance(req, ex);
	if (!u) {
		r->fhs_status = MNT3ERR_SERVERFAULT;
		return;
	}
	r->fhs_status = mnt_dir(req, u, rel, &r->mountres3_u.mountinfo);
	if (r->fhs_status != MNT3_OK) {
		RPC_LOG_LIMITED(RPC_LOG_WARN, "MNT %s from %s: error %d", path, host,
				r->fhs_status);
		srv_export_abandon(req, u); /* no dirs for a client not mounted */
		return;
	}
	srv_export_mounted(req, u);
	mount_path(ex, rel, full, sizeof(full));
	RPC_LOG_LIMITED(RPC_LOG_INFO, "MNT %s from %s", full, host);
	mount_add(req->srv, host, full);
}

static void mnt3_dump(struct rpc_req *rq, void *args, void *res)
{
	struct srv_req *req = srv_req_of(rq);
	struct srv *s = req->srv;
	mountlist *out = res;
	mountbody *b;

	(void)args;
	pthread_mutex_lock(&s->mounts_lock);
	/* Built back to front so the list keeps the order of the table. */
	for (size_t i = s->nmounts; i-- > 0;) {
		b = rpc_arena_alloc(req->rpc->arena, sizeof(*b));
		if (!b)
			break;
		b->ml_hostname = rpc_arena_strndup(req->rpc->arena, s->mounts[i].host,
						   sizeof(s->mounts[i].host));
		b->ml_directory = rpc_arena_strndup(req->rpc->arena, s->mounts[i].path,
						    sizeof(s->mounts[i].path));
		if (!b->ml_hostname || !b->ml_directory)
			break;
		b->ml_next = *out;
		*out = b;
	}
	pthread_mutex_unlock(&s->mounts_lock);
}

static void mnt3_umnt(struct rpc_req *rq, void *args, void *res)
{
	struct srv_req *req = srv_req_of(rq);
	const char *path = *(dirpath *)args;
	struct srv_export *ex = srv_export_by_path(req->srv, path);
	char host[INET6_ADDRSTRLEN], rel[MNTPATHLEN + 1];
	struct srv_export *t = srv_export_containing(req->srv, path, rel, sizeof(rel));

	(void)res;
	client_host(req, host, sizeof(host));
	RPC_LOG_LIMITED(RPC_LOG_INFO, "UMNT %s from %s", path, host);
	mount_remove(req->srv, host, ex ? ex->path : path);
	if (t && !t->ux)
		srv_export_unmounted(req, t);
}

static void mnt3_umntall(struct rpc_req *rq, void *args, void *res)
{
	struct srv_req *req = srv_req_of(rq);
	char host[INET6_ADDRSTRLEN];

	(void)args;
	(void)res;
	client_host(req, host, sizeof(host));
	RPC_LOG_LIMITED(RPC_LOG_INFO, "UMNTALL from %s", host);
	mount_remove(req->srv, host, NULL);
	srv_export_unmounted(req, NULL);
}

/* The client specs of EX as EXPORT's group list, in the arena (the export
 * may be gone by the time a later call is served). */
static groupnode *export_groups(struct srv_req *req, const struct srv_export *ex)
{
	groupnode *list = NULL, *g;

	for (size_t i = ex->clients.n; i-- > 0;) {
		const char *spec = ex->clients.rules[i].spec;

		g = rpc_arena_alloc(req->rpc->arena, sizeof(*g));
		if (!g)
			return list;
		g->gr_name = rpc_arena_strndup(req->rpc->arena, spec, strlen(spec));
		if (!g->gr_name)
			return list;
		g->gr_next = list;
		list = g;
	}
	return list;
}

/* The exports the caller may mount, with their clients, as showmount -e
 * prints them.  Only those: a client that walks the list and mounts every
 * entry (libnfs does, to cross nested exports) must not fail on one it was
 * never meant to see, and the others are none of its business. */
static void mnt3_export(struct rpc_req *rq, void *args, void *res)
{
	struct srv_req *req = srv_req_of(rq);
	struct srv *s = req->srv;
	exports *out = res;
	exportnode *e;

	(void)args;
	for (size_t i = s->nexports; i-- > 0;) {
		if (!srv_access_admits(s, s->exports[i], req->rpc->peer))
			continue;
		e = rpc_arena_alloc(req->rpc->arena, sizeof(*e));
		if (!e)
			return;
		e->ex_dir = rpc_arena_strndup(req->rpc->arena, s->exports[i]->path,
					      strlen(s->exports[i]->path));
		if (!e->ex_dir)
			return;
		e->ex_groups = export_groups(req, s->exports[i]);
		e->ex_next = *out;
		*out = e;
	}
}

#define VOID_ARGS .decode_args = (xdrproc_t)(void (*)(void))xdr_void
#define VOID_RES  .encode_res = (xdrproc_t)(void (*)(void))xdr_void

static const struct rpc_proc mnt3_procs[] = {
    [MOUNTPROC3_NULL] = {.name = "MOUNT_NULL",
			 VOID_ARGS,
			 VOID_RES,
			 .handler = mnt3_null,
			 .idempotent = true},
    [MOUNTPROC3_MNT] = {.name = "MNT",
			.decode_args = (xdrproc_t)xdr_dirpath,
			.args_size = sizeof(dirpath),
			.encode_res = (xdrproc_t)xdr_mountres3,
			.res_size = sizeof(mountres3),
			.handler = mnt3_mnt,
			.idempotent = true},
    [MOUNTPROC3_DUMP] = {.name = "DUMP",
			 VOID_ARGS,
			 .encode_res = (xdrproc_t)xdr_mountlist,
			 .res_size = sizeof(mountlist),
			 .handler = mnt3_dump,
			 .idempotent = true},
    [MOUNTPROC3_UMNT] = {.name = "UMNT",
			 .decode_args = (xdrproc_t)xdr_dirpath,
			 .args_size = sizeof(dirpath),
			 VOID_RES,
			 .handler = mnt3_umnt,
			 .idempotent = true},
    [MOUNTPROC3_UMNTALL] = {.name = "UMNTALL",
			    VOID_ARGS,
			    VOID_RES,
			    .handler = mnt3_umntall,
			    .idempotent = true},
    [MOUNTPROC3_EXPORT] = {.name = "EXPORT",
			   VOID_ARGS,
			   .encode_res = (xdrproc_t)xdr_exports,
			   .res_size = sizeof(exports),
			   .handler = mnt3_export,
			   .idempotent = true},
};

#define ST(x)                                                                            \
	{                                                                                \
		x, #x                                                                    \
	}
static const struct rpc_status_name mnt3_statuses[] = {
    ST(MNT3_OK),	 ST(MNT3ERR_PERM),
    ST(MNT3ERR_NOENT),	 ST(MNT3ERR_IO),
    ST(MNT3ERR_ACCES),	 ST(MNT3ERR_NOTDIR),
    ST(MNT3ERR_INVAL),	 ST(MNT3ERR_NAMETOOLONG),
    ST(MNT3ERR_NOTSUPP), ST(MNT3ERR_SERVERFAULT),
};

/* MNT's result begins with its mountstat3; the others carry none. */
static bool mnt3_result_status(const struct rpc_proc *p, const void *res, uint32_t *code)
{
	if (p != &mnt3_procs[MOUNTPROC3_MNT])
		return false;
	*code = ((const mountres3 *)res)->fhs_status;
	return true;
}

/* MOUNT's calls are served against the exports; a MNT may write to a
 * client union (it makes its dirs: srv_req.writes). */
static void mnt3_dispatch(struct rpc_call *call, struct rpc_req *rq)
{
	srv_call_serve(rq->arg, call, rq, rq->proc == MOUNTPROC3_MNT);
}

const struct rpc_program mnt3_program = {
    .name = "MOUNT",
    .prog = MOUNT_PROGRAM,
    .vers = MOUNT_V3,
    .procs = mnt3_procs,
    .nprocs = sizeof(mnt3_procs) / sizeof(mnt3_procs[0]),
    .dispatch = mnt3_dispatch,
    .invoke = srv_call_handler,
    .result_status = mnt3_result_status,
    .statuses = mnt3_statuses,
    .nstatuses = sizeof(mnt3_statuses) / sizeof(mnt3_statuses[0]),
};
