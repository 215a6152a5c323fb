/* SPDX-License-Identifier: Apache-2.0 */
/* cred.c - a request's filesystem identity on its worker thread.
 *
 * Design notes
 *
 * An NFS call runs with its caller's identity (the AUTH_SYS ids after the
 * export's squashing): fsuid, fsgid and supplementary groups of the worker
 * thread are the caller's for the whole handler, so the kernel checks every
 * plain step on the layers and new objects get the caller as owner.  The
 * union engine switches to the server's identity for its own work (copy-up,
 * white-outs, lookups across layers: un_sys_creds_override) and back.
 *
 * Invariants:
 *  1. Per thread only: raw system calls, since glibc's setgroups (and setfsuid
 *     on some versions) broadcast the change to every thread of the process
 *     (un_ident_take and un_ident_resume in union/sys.c make them).
 *  2. Taking an identity sets groups and fsgid before fsuid; leaving one
 *     sets fsuid first.  A thread whose fsuid is not 0 has lost the
 *     filesystem capabilities (CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER,
 *     CAP_FSETID...) but keeps CAP_SETUID and CAP_SETGID; going back to fsuid
 *     0 gives the filesystem ones back (srv_ident_take, srv_ident_leave).
 *  3. A server running as root never runs a handler with more than the
 *     caller's identity: when a switch did not take, the handler does not run
 *     (srv_call_handler).  A server that is not root cannot switch; it acts as
 *     itself, and the kernel holds it to its own permissions.
 *  4. Every srv_ident_enter or srv_ident_server is undone by srv_ident_leave
 *     before the thread serves anything else.
 *  5. An id no process can have, (uid_t)-1 or (gid_t)-1, becomes the caller's
 *     anonymous id (srv_cred_valid): a client sending it is answered as
 *     nobody, not refused and not served as the server.
 *  6. Reads are free: the thread's fsuid, fsgid and groups come from its
 *     identity record (include/union.h, un_ident_now), which the only calls
 *     that change them keep (union/sys.c, "the identity record": each
 *     raw per-thread call updates it, a switch that may fail is read back,
 *     a thread reads the kernel once at its first use, and the process's
 *     own ids never change, so nothing else moves them).  A switch changes
 *     only what differs from the record: every change makes the kernel
 *     build a new credential, even setfsuid to the id the thread already
 *     has, so a caller who is the server, or whose groups equal the
 *     thread's, costs no system call at all.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "exports.h"

#define SRV_NOBODY 65534 /* the anonymous id when no client rule names one */

_Static_assert(SRV_IDENT_GROUPS_MAX >= UN_IDENT_GROUPS_MAX,
	       "a saved identity holds every group the record does");

/* Whether the thread's groups, as its record has them (HAVE, N_HAVE;
 * ascending), are the multiset WANT of N_WANT, in any order (invariant 6). */
static bool srv_groups_same(const gid_t *have, int n_have, const gid_t *want,
			    size_t n_want)
{
	gid_t sorted[SRV_IDENT_GROUPS_MAX];

	if (n_have < 0 || (size_t)n_have != n_want || n_want > SRV_IDENT_GROUPS_MAX)
		return false;
	for (size_t i = 0; i < n_want; i++) { /* insertion sort: a few ids */
		size_t j = i;

		for (; j > 0 && sorted[j - 1] > want[i]; j--)
			sorted[j] = sorted[j - 1];
		sorted[j] = want[i];
	}
	return n_want == 0 || !memcmp(sorted, have, n_want * sizeof(*have));
}

/* Copies what the thread holds now into SAVED: no system call (invariant 6). */
static void srv_ident_save(struct srv_ident *saved)
{
	const struct un_ident *now = un_ident_now();

	saved->fsuid = now->fsuid;
	saved->fsgid = now->fsgid;
	saved->ngroups = now->ngroups;
	if (now->ngroups > 0)
		memcpy(saved->groups, now->groups, (size_t)now->ngroups * sizeof(gid_t));
}

static size_t rpc_cred_ngroups(const struct rpc_cred *c)
{
	size_t max = sizeof(c->groups) / sizeof(c->groups[0]);

	return c->ngroups < max ? c->ngroups : max;
}

/* Whether the thread already is C's (invariant 6). */
static bool srv_ident_holds(const struct rpc_cred *c)
{
	const struct un_ident *now = un_ident_now();

	return now->fsuid == c->uid && now->fsgid == c->gid &&
	       srv_groups_same(now->groups, now->ngroups, c->groups, rpc_cred_ngroups(c));
}

/* Gives this thread C's groups, fsgid and fsuid, in the order of invariant 2;
 * true if all three hold afterwards. */
static bool srv_ident_take(const struct rpc_cred *c)
{
	return un_ident_take(c->uid, c->gid, rpc_cred_ngroups(c), c->groups);
}

bool srv_ident_enter(const struct rpc_cred *c, struct srv_ident *saved)
{
	srv_ident_save(saved);
	return srv_ident_take(c);
}

void srv_ident_server(struct srv_ident *saved)
{
	srv_ident_save(saved);
	/* the groups stay the caller's, as before these calls switched */
	un_ident_resume(geteuid(), getegid(), -1, NULL);
}

void srv_ident_leave(const struct srv_ident *saved)
{
	/* fsuid first (invariant 2).  ngroups -1: the thread had more groups
	 * than we keep; they were never changed by a caller's then, since
	 * enter would have saved them. */
	un_ident_resume(saved->fsuid, saved->fsgid, saved->ngroups, saved->groups);
}

/* C with every id the kernel cannot hold ((uid_t)-1 and (gid_t)-1, which
 * setfsuid and setfsgid read as "no change") made the anonymous one of the
 * caller's client rule, as knfsd maps an invalid id; such groups are left
 * out (invariant 5). */
static struct rpc_cred srv_cred_valid(const struct srv_req *req)
{
	struct rpc_cred c = req->rpc->cred;
	uid_t anonuid = req->client ? req->client->anonuid : SRV_NOBODY;
	gid_t anongid = req->client ? req->client->anongid : SRV_NOBODY;
	uint32_t n = 0;

	if (c.uid == (uid_t)-1)
		c.uid = anonuid;
	if (c.gid == (gid_t)-1)
		c.gid = anongid;
	for (uint32_t i = 0; i < c.ngroups && i < sizeof(c.groups) / sizeof(c.groups[0]);
	     i++)
		if (c.groups[i] != (gid_t)-1)
			c.groups[n++] = c.groups[i];
	c.ngroups = n;
	return c;
}

/* Whether a failed switch to C leaves the thread more powerful than the
 * caller: only a root server can be (invariant 3). */
static bool srv_ident_unsafe(const struct rpc_cred *c)
{
	return geteuid() == 0 && (c->uid != 0 || c->gid != 0);
}

bool srv_call_handler(const struct rpc_program *prog, const struct rpc_proc *p,
		      struct rpc_req *rq, void *args, void *res)
{
	struct srv_req *req = srv_req_of(rq);
	struct rpc_cred *cred = &rq->cred;
	struct srv_ident saved;
	bool ok = true, same;

	if (!p->handler)
		return true;
	/* exports(5) sync/async of the caller's rule, for the engine's changes
	 * of names and attributes. */
	req->un = (struct un_ctx){.async = req->client && !req->client->sync};
	if (!prog->caller_identity) {
		p->handler(rq, args, res);
		return true;
	}
	/* The handler's own checks (ACCESS) judge the identity the kernel
	 * holds the thread to. */
	*cred = srv_cred_valid(req);
	/* A thread that already is the caller switches nothing and so has
	 * nothing to restore (invariant 6). */
	same = srv_ident_holds(cred);
	if (!same)
		srv_ident_save(&saved);
	if (!same && !srv_ident_take(cred) && srv_ident_unsafe(cred)) {
		RPC_LOG_LIMITED(RPC_LOG_ERR,
				"xid %#x: cannot take uid %u gid %u on this thread",
				rq->xid, (unsigned)cred->uid, (unsigned)cred->gid);
		ok = false;
	}
	if (ok)
		p->handler(rq, args, res);
	if (!same)
		srv_ident_leave(&saved);
	return ok;
}
