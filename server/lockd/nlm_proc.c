/* SPDX-License-Identifier: Apache-2.0 */
/* nlm_proc.c - the NLM program (XNFS chapters 10 and 14): versions 1, 3
 * and 4 over the lock table (lock.c).
 *
 * Design notes
 *
 * Version 4 is the one the handlers speak; a version 1 or 3 call is widened
 * to version 4 arguments (32-bit ranges are 64-bit ones), served by the same
 * handler, and its results narrowed again (nlm1_*).  The _MSG forms run the
 * handler of their synchronous form and queue its results as an _RES call
 * to the caller's lock manager (nlm_send.c); no worker waits on a client.
 *
 * Rules:
 *  1. A file is (export id, node id) from the NLM handle, which is our NFS
 *     handle: decoded by un_handle_decode, its export found and admitted as
 *     for NFS (nlm_file).  A handle that is no handle of ours, or of an
 *     export no longer served, is NLM4_STALE_FH; a caller no rule admits, or
 *     holding a handle of another client's union, gets NLM4_FAILED (what
 *     knfsd's lockd answers when the file cannot be opened for it), which a
 *     Linux client reports as ENOLCK, not as a conflict.
 *  2. A lock owner is the client host, svid and oh.  The host is the
 *     caller_name joined with the caller's address and the address of ours
 *     it called ("NAME@ADDR via OURS", nlm_host), as Linux lockd keys hosts
 *     by all three: FREE_ALL (and SM_NOTIFY later) from one address cannot
 *     free the locks another address took under the same name, the
 *     per-host cap counts what one address holds, and the locks taken
 *     through a floating address are the ones its takeover's clients
 *     reclaim and its giving up frees (nsm.c rule 10).
 *  3. A blocking LOCK that conflicts is queued with what GRANTED needs
 *     (struct nlm_wait: version, handle, caller's address) in front of the
 *     client's cookie; every call that can free a range hands the waiters
 *     the table granted to the sender (nlm_grants).
 *  4. The grace period after a restart (nsm.c, rule 4): a LOCK or SHARE
 *     with reclaim is served, but never queued (a reclaim that conflicts,
 *     with another reclaim, is NLM4_DENIED, as the specification gives);
 *     any other LOCK, SHARE or TEST is NLM4_DENIED_GRACE_PERIOD, as Linux
 *     lockd answers (a TEST could report a range free that a reclaim is
 *     about to take).  Outside grace a reclaim is an ordinary LOCK.  A host
 *     is recorded with the status monitor (nsm_monitor) before its LOCK or
 *     SHARE is served; if it cannot be, the answer is NLM4_DENIED_NOLOCKS.
 *  5. GRANTED and GRANTED_MSG to this server are answered as a server that
 *     holds no client's locks: NLM4_DENIED.  The _RES calls are accepted and
 *     dropped: this server sends GRANTED, never GRANTED_MSG, so no
 *     GRANTED_RES is awaited.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nlm.h"

/* The answer to a call grace refuses, counted for the grace's end. */
static nlm4_stats grace_refused(struct srv_req *req)
{
	nlm_grace_count(&nlm_of(req)->grace, false);
	return NLM4_DENIED_GRACE_PERIOD;
}

/* ST, the answer to a reclaim in grace, counted when it was granted. */
static nlm4_stats grace_reclaimed(struct srv_req *req, nlm4_stats st)
{
	if (st == NLM4_GRANTED)
		nlm_grace_count(&nlm_of(req)->grace, true);
	return st;
}

/* This host's name in the SM_NOTIFY it sends: the address it serves on,
 * when it binds one, else its host name. */
static void nlm_mon_name(const struct srv *s, char *buf, size_t len)
{
	const char *b = s->cfg.bind_addr;

	if (b && strcmp(b, "0.0.0.0") != 0 && strcmp(b, "::") != 0)
		snprintf(buf, len, "%s", b);
	else if (gethostname(buf, len) != 0)
		snprintf(buf, len, "localhost");
	buf[len - 1] = '\0';
}

int srv_nlm_new(struct srv *s, const char *state_dir, const char *nsm_dir,
		struct srv_nlm **out, char *err, size_t errlen)
{
	char mon_name[256];
	struct lock_limits lim = {.per_host = s->cfg.nlm_max_locks_per_host,
				  .total = s->cfg.nlm_max_locks};
	struct srv_nlm *n = calloc(1, sizeof(*n));
	int rc = -ENOMEM;

	*out = NULL;
	if (!n)
		goto fail;
	n->srv = s;
	n->locks = lock_table_new(&lim);
	if (!n->locks)
		goto fail;
	nlm_mon_name(s, mon_name, sizeof(mon_name));
	rc = nsm_open(nsm_dir ? nsm_dir : state_dir, nsm_dir != NULL, mon_name,
		      s->cfg.grace_period, &n->grace, &n->sm, err, errlen);
	if (rc < 0)
		goto fail_quiet;
	rc = nlm_sender_new(n, &n->tx);
	if (rc < 0)
		goto fail;
	*out = n;
	return 0;
fail:
	snprintf(err, errlen, "lock manager: %s", strerror(-rc));
fail_quiet:
	if (n) {
		nsm_close(n->sm);
		lock_table_free(n->locks);
	}
	free(n);
	return rc;
}

void srv_nlm_announce(struct srv_nlm *n)
{
	if (n)
		nsm_notify_all(n);
}

int srv_nlm_takeover(struct srv_nlm *n, const char *addr, char *msg, size_t len)
{
	return nsm_takeover(n->sm, addr, msg, len);
}

int srv_nlm_giveup(struct srv_nlm *n, const char *addr, char *msg, size_t len)
{
	return nsm_giveup(n, addr, msg, len);
}

int srv_nlm_check(struct srv_nlm *n, char *msg, size_t len)
{
	return nsm_check(n->sm, msg, len);
}

void srv_nlm_free(struct srv_nlm *n)
{
	if (!n)
		return;
	nlm_sender_free(n->tx);
	nsm_close(n->sm);
	lock_table_free(n->locks);
	free(n);
}

/* ---- files and owners ---- */

/* The file handle FH names for REQ's caller (rule 1). */
static nlm4_stats nlm_file(struct srv_req *req, const nlm_obj *fh, struct lock_file *f)
{
	struct srv_export *ex;
	uint32_t export_id;
	un_id id;

	if (un_handle_decode(req->srv->state, (const uint8_t *)fh->nlm_obj_val,
			     fh->nlm_obj_len, &export_id, &id) != 0)
		return NLM4_STALE_FH;
	ex = srv_export_for_handle(req, export_id);
	if (!ex)
		return srv_export_id_is_client_union(req->srv, export_id) ? NLM4_FAILED
									  : NLM4_STALE_FH;
	if (!srv_access_rule(req->srv, ex, req->rpc->peer, "NLM call") ||
	    !srv_export_is_callers(req, ex))
		return NLM4_FAILED;
	f->export_id = export_id;
	f->node_id = id;
	return NLM4_GRANTED;
}

/* The lock table's host for CALLER on REQ's addresses (rule 2) into BUF. */
static bool nlm_host(const struct srv_req *req, const char *caller, char *buf, size_t len)
{
	char addr[INET6_ADDRSTRLEN] = "-", ours[INET6_ADDRSTRLEN] = "";
	int n;

	if (req->rpc->peer)
		rpc_addr_str(req->rpc->peer, false, addr, sizeof(addr));
	if (req->rpc->local)
		rpc_addr_str(req->rpc->local, false, ours, sizeof(ours));
	n = snprintf(buf, len, "%s@%s%s%s", caller ? caller : "", addr,
		     ours[0] ? " via " : "", ours);
	return n > 0 && (size_t)n < len;
}

/* What one call is about: the file, the owner and the range of ALOCK. */
struct nlm_target {
	struct lock_file file;
	char host[LOCK_MAX_HOST + 1];
	struct lock_owner owner;
	struct lock_range range;
};

static nlm4_stats nlm_target(struct srv_req *req, const nlm4_lock *alock,
			     struct nlm_target *t)
{
	if (!nlm_host(req, alock->caller_name, t->host, sizeof(t->host)))
		return NLM4_FAILED;
	t->owner = (struct lock_owner){.host = t->host,
				       .svid = alock->svid,
				       .oh = alock->oh.nlm_obj_val,
				       .oh_len = alock->oh.nlm_obj_len};
	t->range = (struct lock_range){.off = alock->l_offset, .len = alock->l_len};
	return nlm_file(req, &alock->fh, &t->file);
}

static enum lock_type nlm_type(bool exclusive)
{
	return exclusive ? LOCK_EXCLUSIVE : LOCK_SHARED;
}

static nlm4_stats nlm_status(enum lock_result r)
{
	switch (r) {
	case LOCK_OK:
		return NLM4_GRANTED;
	case LOCK_DENIED:
		return NLM4_DENIED;
	case LOCK_BLOCKED:
		return NLM4_BLOCKED;
	case LOCK_NOLOCKS:
	default:
		return NLM4_DENIED_NOLOCKS;
	}
}

/* Hands the waiters a call let through to the sender (rule 3). */
static void nlm_grants(struct srv_req *req, struct lock_grant *g)
{
	if (g)
		nlm_send_grants(nlm_of(req), g);
}

/* ---- version 4 handlers ---- */

void nlm_do_nothing(struct rpc_req *rq, void *args, void *res)
{
	(void)rq;
	(void)args;
	(void)res;
}

/* The conflicting lock H as TEST reports it; its oh in REQ's arena. */
static void nlm4_holder_set(struct srv_req *req, const struct lock_holder *h,
			    nlm4_holder *out)
{
	char *oh = rpc_arena_alloc(req->rpc->arena, h->oh_len ? h->oh_len : 1);

	out->exclusive = h->type == LOCK_EXCLUSIVE;
	out->svid = h->svid;
	out->oh.nlm_obj_len = oh ? (u_int)h->oh_len : 0;
	out->oh.nlm_obj_val = oh;
	if (oh)
		lock_copy_bytes(oh, h->oh, h->oh_len);
	out->l_offset = h->range.off;
	out->l_len = h->range.len;
}

static void nlm4_do_test(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	nlm4_testargs *a = argp;
	nlm4_testres *r = resp;
	struct nlm_target t;
	struct lock_holder *h = rpc_arena_alloc(req->rpc->arena, sizeof(*h));
	nlm4_stats st;

	r->cookie = a->cookie;
	st = h ? nlm_target(req, &a->alock, &t) : NLM4_DENIED_NOLOCKS;
	if (st == NLM4_GRANTED && nlm_grace_active(&nlm_of(req)->grace))
		st = grace_refused(req);
	if (st == NLM4_GRANTED)
		st = nlm_status(lock_test(nlm_of(req)->locks, &t.file, &t.owner,
					  nlm_type(a->exclusive), &t.range, h));
	if (st == NLM4_DENIED)
		nlm4_holder_set(req, h, &r->stat.nlm4_testrply_u.holder);
	r->stat.stat = st;
}

/* Queues A's request as a waiter, its cookie behind the nlm_wait GRANTED
 * needs (rule 3). */
static enum lock_result nlm_block(struct srv_req *req, const nlm4_lockargs *a,
				  struct nlm_target *t, struct lock_grant **grants)
{
	size_t clen = a->cookie.nlm_obj_len;
	uint8_t buf[LOCK_MAX_COOKIE];
	struct nlm_wait w = {.vers = req->rpc->vers, .fh_len = a->alock.fh.nlm_obj_len};

	if (clen > NLM_WAIT_COOKIE_MAX || w.fh_len > sizeof(w.fh) || !req->rpc->peer)
		return LOCK_NOLOCKS;
	lock_copy_bytes(w.fh, a->alock.fh.nlm_obj_val, w.fh_len);
	memcpy(&w.peer, req->rpc->peer, sizeof(w.peer));
	if (req->rpc->local)
		w.local = *req->rpc->local;
	memcpy(buf, &w, sizeof(w));
	lock_copy_bytes(buf + sizeof(w), a->cookie.nlm_obj_val, clen);
	return lock_block(nlm_of(req)->locks, &t->file, &t->owner, nlm_type(a->exclusive),
			  &t->range, buf, sizeof(w) + clen, grants);
}

/* The status of LOCK A (rule 4 for reclaims and grace). */
static nlm4_stats nlm_lock_status(struct srv_req *req, const nlm4_lockargs *a)
{
	struct lock_grant *grants = NULL;
	struct nlm_target t;
	bool grace = nlm_grace_active(&nlm_of(req)->grace);
	enum lock_result lr;
	nlm4_stats st;

	if (grace && !a->reclaim)
		return grace_refused(req);
	st = nlm_target(req, &a->alock, &t);
	if (st != NLM4_GRANTED)
		return st;
	if (nsm_monitor(nlm_of(req)->sm, t.host) < 0)
		return NLM4_DENIED_NOLOCKS;
	/* The first lock through an address not taken over takes it, which
	 * may begin a grace (nsm.c rule 9). */
	grace = nlm_grace_active(&nlm_of(req)->grace);
	if (grace && !a->reclaim)
		return grace_refused(req);
	if (a->block && !grace)
		lr = nlm_block(req, a, &t, &grants);
	else
		lr = lock_acquire(nlm_of(req)->locks, &t.file, &t.owner,
				  nlm_type(a->exclusive), &t.range, &grants);
	nlm_grants(req, grants);
	return grace ? grace_reclaimed(req, nlm_status(lr)) : nlm_status(lr);
}

static void nlm4_do_lock(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	nlm4_lockargs *a = argp;
	nlm4_res *r = resp;

	r->cookie = a->cookie;
	r->stat.stat = nlm_lock_status(req, a);
}

static void nlm4_do_cancel(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	nlm4_cancargs *a = argp;
	nlm4_res *r = resp;
	struct nlm_target t;
	nlm4_stats st;

	r->cookie = a->cookie;
	st = nlm_target(req, &a->alock, &t);
	if (st == NLM4_GRANTED)
		st = nlm_status(lock_cancel(nlm_of(req)->locks, &t.file, &t.owner,
					    nlm_type(a->exclusive), &t.range));
	r->stat.stat = st;
}

static void nlm4_do_unlock(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	nlm4_unlockargs *a = argp;
	nlm4_res *r = resp;
	struct lock_grant *grants = NULL;
	struct nlm_target t;
	nlm4_stats st;

	r->cookie = a->cookie;
	st = nlm_target(req, &a->alock, &t);
	if (st == NLM4_GRANTED)
		st = nlm_status(lock_release(nlm_of(req)->locks, &t.file, &t.owner,
					     &t.range, &grants));
	nlm_grants(req, grants);
	r->stat.stat = st;
}

/* A server holds no client's locks to be granted (rule 5). */
static void nlm4_do_granted(struct rpc_req *rq, void *argp, void *resp)
{
	nlm4_testargs *a = argp;
	nlm4_res *r = resp;

	(void)rq;
	r->cookie = a->cookie;
	r->stat.stat = NLM4_DENIED;
}

/* The results of a _MSG form, sent to the caller as _RES call PROC. */
static void nlm_reply_msg(struct srv_req *req, uint32_t proc, xdrproc_t enc,
			  const void *res)
{
	if (req->rpc->peer)
		nlm_send_msg(nlm_of(req), req->rpc->peer, req->rpc->local, req->rpc->vers,
			     proc, enc, res);
}

/* A _MSG handler: the synchronous HANDLER, its results (RES_TYPE) sent as
 * RES_PROC in the caller's version. */
#define NLM_MSG(name, handler, res_type, res_proc)                                       \
	static void name(struct rpc_req *rq, void *argp, void *resp)                     \
	{                                                                                \
		res_type r = {0};                                                        \
		(void)resp;                                                              \
		handler(rq, argp, &r);                                                   \
		nlm_reply_msg(srv_req_of(rq), res_proc, (xdrproc_t)xdr_##res_type, &r);  \
	}

NLM_MSG(nlm4_do_test_msg, nlm4_do_test, nlm4_testres, NLMPROC4_TEST_RES)
NLM_MSG(nlm4_do_lock_msg, nlm4_do_lock, nlm4_res, NLMPROC4_LOCK_RES)
NLM_MSG(nlm4_do_cancel_msg, nlm4_do_cancel, nlm4_res, NLMPROC4_CANCEL_RES)
NLM_MSG(nlm4_do_unlock_msg, nlm4_do_unlock, nlm4_res, NLMPROC4_UNLOCK_RES)
NLM_MSG(nlm4_do_granted_msg, nlm4_do_granted, nlm4_res, NLMPROC4_GRANTED_RES)

/* TEST_RES ... GRANTED_RES: accepted, nothing awaits them (rule 5). */
static void nlm4_do_res_ignore(struct rpc_req *rq, void *args, void *res)
{
	(void)rq;
	(void)args;
	(void)res;
}

static nlm4_stats nlm_share_status(struct srv_req *req, const nlm4_shareargs *a,
				   bool share)
{
	nlm4_lock alock = {
	    .caller_name = a->share.caller_name, .fh = a->share.fh, .oh = a->share.oh};
	struct nlm_target t;
	nlm4_stats st;

	if (share && nlm_grace_active(&nlm_of(req)->grace) && !a->reclaim)
		return grace_refused(req);
	st = nlm_target(req, &alock, &t);
	if (st != NLM4_GRANTED)
		return st;
	if (share && nsm_monitor(nlm_of(req)->sm, t.host) < 0)
		return NLM4_DENIED_NOLOCKS;
	if (share && nlm_grace_active(&nlm_of(req)->grace) && !a->reclaim)
		return grace_refused(req); /* begun by the monitor (nsm.c rule 9) */
	t.owner.svid = 0; /* a reservation's owner has none (lock.c, rule 10) */
	if (!share) {
		lock_unshare(nlm_of(req)->locks, &t.file, &t.owner);
		return NLM4_GRANTED;
	}
	st = nlm_status(lock_share(nlm_of(req)->locks, &t.file, &t.owner,
				   (unsigned)a->share.access, (unsigned)a->share.mode));
	return a->reclaim && nlm_grace_active(&nlm_of(req)->grace)
		   ? grace_reclaimed(req, st)
		   : st;
}

/* SHARE (SHARE true) or UNSHARE of version 4. */
static void nlm4_share_call(struct srv_req *req, void *argp, void *resp, bool share)
{
	nlm4_shareargs *a = argp;
	nlm4_shareres *r = resp;

	r->cookie = a->cookie;
	r->stat = nlm_share_status(req, a, share);
}

static void nlm4_do_share(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	nlm4_share_call(req, argp, resp, true);
}

static void nlm4_do_unshare(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	nlm4_share_call(req, argp, resp, false);
}

static void nlm4_do_free_all(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	nlm4_notify *a = argp;
	struct lock_grant *grants = NULL;
	char host[LOCK_MAX_HOST + 1];

	(void)resp;
	if (!nlm_host(req, a->name, host, sizeof(host)))
		return;
	lock_free_host(nlm_of(req)->locks, host, &grants);
	nlm_grants(req, grants);
}

/* ---- versions 1 and 3: widened to 4, narrowed back ---- */

static nlm4_lock nlm_widen(const nlm_lock *l)
{
	return (nlm4_lock){.caller_name = l->caller_name,
			   .fh = l->fh,
			   .oh = l->oh,
			   .svid = l->svid,
			   .l_offset = l->l_offset,
			   .l_len = l->l_len};
}

/* Version 4 statuses a version 1 or 3 client does not know, as knfsd maps
 * them. */
static nlm_stats nlm_narrow(nlm4_stats st)
{
	if (st <= NLM4_DENIED_GRACE_PERIOD)
		return (nlm_stats)st;
	return st == NLM4_DEADLCK ? nlm_denied : nlm_denied_nolocks;
}

/* A 64-bit range in 32 bits: the part past 2^32 - 1 runs to the end. */
static void nlm_narrow_holder(const nlm4_holder *h, nlm_holder *out)
{
	out->exclusive = h->exclusive;
	out->svid = h->svid;
	out->oh = h->oh;
	out->l_offset = h->l_offset > UINT32_MAX ? UINT32_MAX : (u_int)h->l_offset;
	out->l_len = h->l_len == 0 || h->l_offset + h->l_len - 1 > UINT32_MAX
			 ? 0
			 : (u_int)h->l_len;
}

static void nlm1_do_test(struct rpc_req *rq, void *argp, void *resp)
{
	nlm_testargs *a = argp;
	nlm_testres *r = resp;
	nlm4_testargs a4 = {a->cookie, a->exclusive, nlm_widen(&a->alock)};
	nlm4_testres r4 = {0};

	nlm4_do_test(rq, &a4, &r4);
	r->cookie = a->cookie;
	r->stat.stat = nlm_narrow(r4.stat.stat);
	if (r->stat.stat == nlm_denied && r4.stat.stat == NLM4_DENIED)
		nlm_narrow_holder(&r4.stat.nlm4_testrply_u.holder,
				  &r->stat.nlm_testrply_u.holder);
}

static void nlm1_do_lock(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	nlm_lockargs *a = argp;
	nlm_res *r = resp;
	nlm4_lockargs a4 = {a->cookie,	a->block, a->exclusive, nlm_widen(&a->alock),
			    a->reclaim, a->state};

	r->cookie = a->cookie;
	r->stat.stat = nlm_narrow(nlm_lock_status(req, &a4));
}

static void nlm1_do_cancel(struct rpc_req *rq, void *argp, void *resp)
{
	nlm_cancargs *a = argp;
	nlm_res *r = resp;
	nlm4_cancargs a4 = {a->cookie, a->block, a->exclusive, nlm_widen(&a->alock)};
	nlm4_res r4 = {0};

	nlm4_do_cancel(rq, &a4, &r4);
	r->cookie = a->cookie;
	r->stat.stat = nlm_narrow(r4.stat.stat);
}

static void nlm1_do_unlock(struct rpc_req *rq, void *argp, void *resp)
{
	nlm_unlockargs *a = argp;
	nlm_res *r = resp;
	nlm4_unlockargs a4 = {a->cookie, nlm_widen(&a->alock)};
	nlm4_res r4 = {0};

	nlm4_do_unlock(rq, &a4, &r4);
	r->cookie = a->cookie;
	r->stat.stat = nlm_narrow(r4.stat.stat);
}

static void nlm1_do_granted(struct rpc_req *rq, void *argp, void *resp)
{
	nlm_testargs *a = argp;
	nlm_res *r = resp;

	(void)rq;
	r->cookie = a->cookie;
	r->stat.stat = nlm_denied;
}

NLM_MSG(nlm1_do_test_msg, nlm1_do_test, nlm_testres, NLM_TEST_RES)
NLM_MSG(nlm1_do_lock_msg, nlm1_do_lock, nlm_res, NLM_LOCK_RES)
NLM_MSG(nlm1_do_cancel_msg, nlm1_do_cancel, nlm_res, NLM_CANCEL_RES)
NLM_MSG(nlm1_do_unlock_msg, nlm1_do_unlock, nlm_res, NLM_UNLOCK_RES)
NLM_MSG(nlm1_do_granted_msg, nlm1_do_granted, nlm_res, NLM_GRANTED_RES)

static nlm4_shareargs nlm_widen_share(const nlm_shareargs *a)
{
	return (nlm4_shareargs){.cookie = a->cookie,
				.share = {.caller_name = a->share.caller_name,
					  .fh = a->share.fh,
					  .oh = a->share.oh,
					  .mode = a->share.mode,
					  .access = a->share.access},
				.reclaim = a->reclaim};
}

/* SHARE (SHARE true) or UNSHARE of version 3. */
static void nlm3_share_call(struct srv_req *req, void *argp, void *resp, bool share)
{
	nlm_shareargs *a = argp;
	nlm_shareres *r = resp;
	nlm4_shareargs a4 = nlm_widen_share(a);

	r->cookie = a->cookie;
	r->stat = nlm_narrow(nlm_share_status(req, &a4, share));
}

static void nlm3_do_share(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	nlm3_share_call(req, argp, resp, true);
}

static void nlm3_do_unshare(struct rpc_req *rq, void *argp, void *resp)
{
	struct srv_req *req = srv_req_of(rq);
	nlm3_share_call(req, argp, resp, false);
}

static void nlm3_do_free_all(struct rpc_req *rq, void *argp, void *resp)
{
	nlm_notify *a = argp;
	nlm4_notify a4 = {.name = a->name, .state = a->state};

	nlm4_do_free_all(rq, &a4, resp);
}

/* ---- the tables ---- */

static const struct rpc_proc nlm4_procs[] = {
    NLM_NULL_PROC(NLMPROC4_NULL, "NLM_NULL", nlm_do_nothing),
    NLM_PROC(NLMPROC4_TEST, "NLM4_TEST", nlm4_do_test, nlm4_testargs, nlm4_testres, true),
    NLM_PROC(NLMPROC4_LOCK, "NLM4_LOCK", nlm4_do_lock, nlm4_lockargs, nlm4_res, false),
    NLM_PROC(NLMPROC4_CANCEL, "NLM4_CANCEL", nlm4_do_cancel, nlm4_cancargs, nlm4_res,
	     false),
    NLM_PROC(NLMPROC4_UNLOCK, "NLM4_UNLOCK", nlm4_do_unlock, nlm4_unlockargs, nlm4_res,
	     false),
    NLM_PROC(NLMPROC4_GRANTED, "NLM4_GRANTED", nlm4_do_granted, nlm4_testargs, nlm4_res,
	     true),
    NLM_MSG_PROC(NLMPROC4_TEST_MSG, "NLM4_TEST_MSG", nlm4_do_test_msg, nlm4_testargs,
		 false),
    NLM_MSG_PROC(NLMPROC4_LOCK_MSG, "NLM4_LOCK_MSG", nlm4_do_lock_msg, nlm4_lockargs,
		 false),
    NLM_MSG_PROC(NLMPROC4_CANCEL_MSG, "NLM4_CANCEL_MSG", nlm4_do_cancel_msg,
		 nlm4_cancargs, false),
    NLM_MSG_PROC(NLMPROC4_UNLOCK_MSG, "NLM4_UNLOCK_MSG", nlm4_do_unlock_msg,
		 nlm4_unlockargs, false),
    NLM_MSG_PROC(NLMPROC4_GRANTED_MSG, "NLM4_GRANTED_MSG", nlm4_do_granted_msg,
		 nlm4_testargs, false),
    NLM_MSG_PROC(NLMPROC4_TEST_RES, "NLM4_TEST_RES", nlm4_do_res_ignore, nlm4_testres,
		 true),
    NLM_MSG_PROC(NLMPROC4_LOCK_RES, "NLM4_LOCK_RES", nlm4_do_res_ignore, nlm4_res, true),
    NLM_MSG_PROC(NLMPROC4_CANCEL_RES, "NLM4_CANCEL_RES", nlm4_do_res_ignore, nlm4_res,
		 true),
    NLM_MSG_PROC(NLMPROC4_UNLOCK_RES, "NLM4_UNLOCK_RES", nlm4_do_res_ignore, nlm4_res,
		 true),
    NLM_MSG_PROC(NLMPROC4_GRANTED_RES, "NLM4_GRANTED_RES", nlm4_do_res_ignore, nlm4_res,
		 true),
    NLM_PROC(NLMPROC4_SHARE, "NLM4_SHARE", nlm4_do_share, nlm4_shareargs, nlm4_shareres,
	     false),
    NLM_PROC(NLMPROC4_UNSHARE, "NLM4_UNSHARE", nlm4_do_unshare, nlm4_shareargs,
	     nlm4_shareres, false),
    NLM_PROC(NLMPROC4_NM_LOCK, "NLM4_NM_LOCK", nlm4_do_lock, nlm4_lockargs, nlm4_res,
	     false),
    NLM_MSG_PROC(NLMPROC4_FREE_ALL, "NLM4_FREE_ALL", nlm4_do_free_all, nlm4_notify,
		 false),
};

/* Version 3 is version 1 and procedures 20-23; version 1 the first 16. */
static const struct rpc_proc nlm3_procs[] = {
    NLM_NULL_PROC(NLM_NULL, "NLM_NULL", nlm_do_nothing),
    NLM_PROC(NLM_TEST, "NLM_TEST", nlm1_do_test, nlm_testargs, nlm_testres, true),
    NLM_PROC(NLM_LOCK, "NLM_LOCK", nlm1_do_lock, nlm_lockargs, nlm_res, false),
    NLM_PROC(NLM_CANCEL, "NLM_CANCEL", nlm1_do_cancel, nlm_cancargs, nlm_res, false),
    NLM_PROC(NLM_UNLOCK, "NLM_UNLOCK", nlm1_do_unlock, nlm_unlockargs, nlm_res, false),
    NLM_PROC(NLM_GRANTED, "NLM_GRANTED", nlm1_do_granted, nlm_testargs, nlm_res, true),
    NLM_MSG_PROC(NLM_TEST_MSG, "NLM_TEST_MSG", nlm1_do_test_msg, nlm_testargs, false),
    NLM_MSG_PROC(NLM_LOCK_MSG, "NLM_LOCK_MSG", nlm1_do_lock_msg, nlm_lockargs, false),
    NLM_MSG_PROC(NLM_CANCEL_MSG, "NLM_CANCEL_MSG", nlm1_do_cancel_msg, nlm_cancargs,
		 false),
    NLM_MSG_PROC(NLM_UNLOCK_MSG, "NLM_UNLOCK_MSG", nlm1_do_unlock_msg, nlm_unlockargs,
		 false),
    NLM_MSG_PROC(NLM_GRANTED_MSG, "NLM_GRANTED_MSG", nlm1_do_granted_msg, nlm_testargs,
		 false),
    NLM_MSG_PROC(NLM_TEST_RES, "NLM_TEST_RES", nlm4_do_res_ignore, nlm_testres, true),
    NLM_MSG_PROC(NLM_LOCK_RES, "NLM_LOCK_RES", nlm4_do_res_ignore, nlm_res, true),
    NLM_MSG_PROC(NLM_CANCEL_RES, "NLM_CANCEL_RES", nlm4_do_res_ignore, nlm_res, true),
    NLM_MSG_PROC(NLM_UNLOCK_RES, "NLM_UNLOCK_RES", nlm4_do_res_ignore, nlm_res, true),
    NLM_MSG_PROC(NLM_GRANTED_RES, "NLM_GRANTED_RES", nlm4_do_res_ignore, nlm_res, true),
    NLM_PROC(NLM_SHARE, "NLM_SHARE", nlm3_do_share, nlm_shareargs, nlm_shareres, false),
    NLM_PROC(NLM_UNSHARE, "NLM_UNSHARE", nlm3_do_unshare, nlm_shareargs, nlm_shareres,
	     false),
    NLM_PROC(NLM_NM_LOCK, "NLM_NM_LOCK", nlm1_do_lock, nlm_lockargs, nlm_res, false),
    NLM_MSG_PROC(NLM_FREE_ALL, "NLM_FREE_ALL", nlm3_do_free_all, nlm_notify, false),
};

#define NLM_V1_NPROCS (NLM_GRANTED_RES + 1)

/* ---- result statuses (the metrics' errors by status) ---- */

#define ST(x)                                                                            \
	{                                                                                \
		x, #x                                                                    \
	}
static const struct rpc_status_name nlm4_statuses[] = {
    ST(NLM4_GRANTED),
    ST(NLM4_DENIED),
    ST(NLM4_DENIED_NOLOCKS),
    ST(NLM4_BLOCKED),
    ST(NLM4_DENIED_GRACE_PERIOD),
    ST(NLM4_DEADLCK),
    ST(NLM4_ROFS),
    ST(NLM4_STALE_FH),
    ST(NLM4_FBIG),
    ST(NLM4_FAILED),
};
static const struct rpc_status_name nlm_statuses[] = {
    ST(nlm_granted),
    ST(nlm_denied),
    ST(nlm_denied_nolocks),
    ST(nlm_blocked),
    ST(nlm_denied_grace_period),
    ST(nlm_deadlck),
};

/* Every NLM result (res, testres, shareres, of each version) is its cookie
 * and then its status; the _MSG and _RES procedures have none. */
#define NLM_STATUS_AT offsetof(nlm4_res, stat)
_Static_assert(offsetof(nlm4_testres, stat) == NLM_STATUS_AT, "NLM status");
_Static_assert(offsetof(nlm4_shareres, stat) == NLM_STATUS_AT, "NLM status");
_Static_assert(offsetof(nlm_res, stat) == NLM_STATUS_AT, "NLM status");
_Static_assert(offsetof(nlm_testres, stat) == NLM_STATUS_AT, "NLM status");
_Static_assert(offsetof(nlm_shareres, stat) == NLM_STATUS_AT, "NLM status");

static bool nlm_result_status(const struct rpc_proc *p, const void *res, uint32_t *code)
{
	if (p->res_size < NLM_STATUS_AT + sizeof(uint32_t))
		return false;
	*code = *(const uint32_t *)((const char *)res + NLM_STATUS_AT);
	return true;
}

/* NLM's calls name files by their NFS handles: they are served against the
 * exports (exports.h, call.c), and change no union. */
static void nlm_dispatch(struct rpc_call *call, struct rpc_req *rq)
{
	struct srv_nlm *n = rq->arg;

	srv_call_serve(n->srv, call, rq, false);
}

const struct rpc_program nlm1_program = {
    .dispatch = nlm_dispatch,
    .invoke = srv_call_handler,
    .name = "NLM",
    .prog = NLM_PROG,
    .vers = NLM_VERS,
    .procs = nlm3_procs,
    .nprocs = NLM_V1_NPROCS,
    .result_status = nlm_result_status,
    .statuses = nlm_statuses,
    .nstatuses = sizeof(nlm_statuses) / sizeof(nlm_statuses[0]),
};

const struct rpc_program nlm3_program = {
    .dispatch = nlm_dispatch,
    .invoke = srv_call_handler,
    .name = "NLM",
    .prog = NLM_PROG,
    .vers = NLM_VERSX,
    .procs = nlm3_procs,
    .nprocs = sizeof(nlm3_procs) / sizeof(nlm3_procs[0]),
    .result_status = nlm_result_status,
    .statuses = nlm_statuses,
    .nstatuses = sizeof(nlm_statuses) / sizeof(nlm_statuses[0]),
};

const struct rpc_program nlm4_program = {
    .dispatch = nlm_dispatch,
    .invoke = srv_call_handler,
    .name = "NLM",
    .prog = NLM_PROG,
    .vers = NLM4_VERS,
    .procs = nlm4_procs,
    .nprocs = sizeof(nlm4_procs) / sizeof(nlm4_procs[0]),
    .result_status = nlm_result_status,
    .statuses = nlm4_statuses,
    .nstatuses = sizeof(nlm4_statuses) / sizeof(nlm4_statuses[0]),
};

int lockd_register(struct rpc_svc *svc, struct srv_nlm *n)
{
	static const struct rpc_program *const nlm[] = {&nlm4_program, &nlm3_program,
							&nlm1_program};
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < sizeof(nlm) / sizeof(nlm[0]); i++)
		rc = rpc_svc_register(svc, nlm[i], "nlm", n);
	return rc < 0 ? rc : rpc_svc_register(svc, &nsm1_program, "nsm", n);
}
