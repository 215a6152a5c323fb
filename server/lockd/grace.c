/* SPDX-License-Identifier: Apache-2.0 */
/* grace.c - the grace period after a restart: while it runs, only reclaims
 * of locks are served (nlm_proc.c rule 4), so that the clients that held
 * locks before the restart get them back first.
 *
 * One place for the grace's state, which the status monitor starts (nsm.c,
 * rule 4: only when it found hosts recorded), the NLM handlers ask and
 * count in, and the sender thread reports the end of (nlm_send.c, once a
 * second): each calls down into this file, none into another's.
 *
 * Rules:
 *  1. The period is a deadline on CLOCK_MONOTONIC, 0 when none ran
 *     (nlm_grace_start, nlm_grace_active); any thread reads it.
 *  2. Its end is logged once, when it has passed, with the reclaims it
 *     granted and the calls it refused (nlm_grace_report): an admin sees
 *     when new locks are served again, and whether the clients came back.
 *  3. One period for the whole server, also when it begins at an address
 *     taken over (nsm.c rule 10): a takeover starts one or lengthens the one
 *     running.  A grace of that address alone would let a client of another
 *     address take, in the meantime, a lock that a client of the address
 *     taken over is about to reclaim (the same file reached through either);
 *     knfsd's grace is per server too.  New locks wait out the grace
 *     (Linux's lockd retries NLM4_DENIED_GRACE_PERIOD), none is lost.
 */
#include <time.h>

#include "nlm.h"

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void nlm_grace_start(struct nlm_grace *g, unsigned seconds)
{
	long long until = now_ms() + (long long)seconds * 1000;

	if (seconds == 0)
		return;
	if (!nlm_grace_active(g)) { /* a new period: its own counts and end */
		atomic_store(&g->reclaims, 0);
		atomic_store(&g->refused, 0);
		atomic_store(&g->reported, false);
	}
	if (until > atomic_load(&g->until_ms))
		atomic_store(&g->until_ms, until);
}

bool nlm_grace_active(const struct nlm_grace *g)
{
	long long until = atomic_load(&((struct nlm_grace *)g)->until_ms);

	return until != 0 && now_ms() < until;
}

void nlm_grace_count(struct nlm_grace *g, bool reclaimed)
{
	atomic_fetch_add(reclaimed ? &g->reclaims : &g->refused, 1);
}

void nlm_grace_report(struct nlm_grace *g)
{
	unsigned long reclaims, refused;

	if (atomic_load(&g->until_ms) == 0 || nlm_grace_active(g) ||
	    atomic_exchange(&g->reported, true))
		return;
	reclaims = atomic_load(&g->reclaims);
	refused = atomic_load(&g->refused);
	rpc_log(RPC_LOG_INFO,
		"NSM: grace period over: %lu reclaim%s granted, %lu call%s refused",
		reclaims, reclaims == 1 ? "" : "s", refused, refused == 1 ? "" : "s");
}
