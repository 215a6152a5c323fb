/* SPDX-License-Identifier: Apache-2.0 */
/* access.c - client rules (exports(5) syntax), host names, squashing, and
 * the rule that admits a caller to an export (srv_access_rule), which MNT
 * and the NFSv3 check before each handler (nfs3_admit) ask.
 *
 * Design notes
 *
 * A rule list is what exports(5) puts after an export path:
 * "SPEC(opt,opt) SPEC(opt) ...", SPEC an address, a CIDR network, a host
 * name, a wildcard pattern or "*".  It is parsed once (srv_clients_parse) into
 * an array the workers only read.
 *
 * Invariants:
 *  1. The rule that applies to a client is the first of the most specific
 *     kind that matches it, whatever the order on the line: a single host (by
 *     address or name), then networks, then wildcard patterns, then "*", and
 *     among rules of one kind the first written (exports(5)'s precedence;
 *     rule_rank, srv_clients_match).
 *  2. A caller that no rule admits, or that calls from port 1024 or above
 *     under a `secure` rule, gets nothing: MNT3ERR_ACCES from MNT (mnt3_proc.c)
 *     and NFS3ERR_ACCES from every NFS procedure but NULL (nfs3_admit),
 *     whatever handle it holds.  Each refusal leaves a log line.
 *  3. A host name counts only when the address's reverse name resolves
 *     forward to the same address (as mountd checks), so a client cannot
 *     name itself by controlling its own reverse zone alone (srv_peer_name).
 *  4. The squash of a rule is applied to the caller's credential before any
 *     handler runs (srv_cred_squash); handlers see only the squashed one.
 *     AUTH_NONE callers are always the anonymous ids.
 */
#define _GNU_SOURCE /* FNM_CASEFOLD */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "exports.h"

#define ANON_ID	      65534
#define NAME_TTL_SEC  60
#define NAME_SLOTS    256
#define MAX_RULES     4096
#define RESERVED_PORT 1024

/* ---- addresses ---- */

/* PEER's address as 16 bytes: a v4 address (or a v4-mapped v6 one) as
 * ::ffff:a.b.c.d, so one comparison serves both families.  *v4 says which. */
static bool peer_addr16(const struct sockaddr_storage *peer, uint8_t out[16], bool *v4)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	if (peer->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)peer;
		memcpy(out, mapped, 12);
		memcpy(out + 12, &sin->sin_addr, 4);
		*v4 = true;
		return true;
	}
	if (peer->ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)peer;
		memcpy(out, &sin6->sin6_addr, 16);
		*v4 = memcmp(out, mapped, 12) == 0;
		return true;
	}
	return false;
}

static unsigned peer_port(const struct sockaddr_storage *peer)
{
	if (peer->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)peer)->sin_port);
	if (peer->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)peer)->sin6_port);
	return 0;
}

bool srv_peer_port_reserved(const struct sockaddr_storage *peer)
{
	unsigned port = peer_port(peer);

	return port > 0 && port < RESERVED_PORT;
}

/* Parses an address literal into 16 bytes (v4 as v4-mapped); *bits is its
 * width in the 16-byte form's terms (v4: 96 + 32). */
static bool parse_addr16(const char *text, uint8_t out[16], bool *v4)
{
	struct in_addr a4;

	if (inet_pton(AF_INET, text, &a4) == 1) {
		memset(out, 0, 10);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &a4, 4);
		*v4 = true;
		return true;
	}
	*v4 = false;
	return inet_pton(AF_INET6, text, out) == 1;
}

/* Counts the leading ones of a dotted v4 netmask; false if it is no mask. */
static bool mask_bits(const char *text, unsigned *bits)
{
	struct in_addr m;
	uint32_t v;
	unsigned n = 0;

	if (inet_pton(AF_INET, text, &m) != 1)
		return false;
	v = ntohl(m.s_addr);
	while (n < 32 && (v & (UINT32_C(1) << (31 - n))))
		n++;
	if (n < 32 && (v << n) != 0)
		return false; /* holes: 255.0.255.0 */
	*bits = n;
	return true;
}

static bool prefix_match(const uint8_t *a, const uint8_t *b, unsigned bits)
{
	unsigned full = bits / 8, rest = bits % 8;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));

	if (memcmp(a, b, full) != 0)
		return false;
	return rest == 0 || ((a[full] ^ b[full]) & mask) == 0;
}

/* ---- parsing ---- */

static void opts_default(struct srv_client_opts *o)
{
	o->rw = false;
	o->squash = SRV_SQUASH_ROOT;
	o->anonuid = ANON_ID;
	o->anongid = ANON_ID;
	o->secure = true;
	o->sync = true;
}

static bool parse_id(const char *text, uint32_t *out)
{
	char *end;
	unsigned long v;

	if (!isdigit((unsigned char)text[0]))
		return false;
	errno = 0;
	v = strtoul(text, &end, 10);
	if (errno || *end || v > UINT32_MAX - 1) /* (uid_t)-1 means "unchanged" */
		return false;
	*out = (uint32_t)v;
	return true;
}

/* Options exports(5) has that mean nothing here (no subtrees: handles never
 * carry a path; every write is honoured as the client's stable_how asks). */
static bool ignored_option(const char *opt)
{
	static const char *const ignored[] = {"no_subtree_check", "subtree_check",
					      "wdelay", "no_wdelay", "no_all_squash"};

	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		if (strcmp(opt, ignored[i]) == 0)
			return true;
	return false;
}

/* Applies one option word to O; false with ERR set. */
static bool apply_option(struct srv_client_opts *o, const char *opt, char *err,
			 size_t errlen)
{
	uint32_t id;

	if (strcmp(opt, "ro") == 0)
		o->rw = false;
	else if (strcmp(opt, "rw") == 0)
		o->rw = true;
	else if (strcmp(opt, "root_squash") == 0)
		o->squash = SRV_SQUASH_ROOT;
	else if (strcmp(opt, "no_root_squash") == 0)
		o->squash = SRV_SQUASH_NONE;
	else if (strcmp(opt, "all_squash") == 0)
		o->squash = SRV_SQUASH_ALL;
	else if (strcmp(opt, "secure") == 0)
		o->secure = true;
	else if (strcmp(opt, "insecure") == 0)
		o->secure = false;
	else if (strcmp(opt, "sync") == 0)
		o->sync = true;
	else if (strcmp(opt, "async") == 0)
		o->sync = false;
	else if (strncmp(opt, "anonuid=", 8) == 0 && parse_id(opt + 8, &id))
		o->anonuid = id;
	else if (strncmp(opt, "anongid=", 8) == 0 && parse_id(opt + 8, &id))
		o->anongid = id;
	else if (!ignored_option(opt)) {
		snprintf(err, errlen, "unknown or malformed option '%s'", opt);
		return false;
	}
	return true;
}

/* Parses "opt,opt,..." (LEN bytes at P) into O. */
static bool parse_options(const char *p, size_t len, struct srv_client_opts *o, char *err,
			  size_t errlen)
{
	char word[64];
	const char *end = p + len, *comma;
	size_t n;

	while (p < end) {
		comma = memchr(p, ',', (size_t)(end - p));
		n = (size_t)((comma ? comma : end) - p);
		if (n == 0 || n >= sizeof(word)) {
			snprintf(err, errlen, n ? "option too long" : "empty option");
			return false;
		}
		memcpy(word, p, n);
		word[n] = '\0';
		if (!apply_option(o, word, err, errlen))
			return false;
		p += n + (comma != NULL);
		if (comma && p == end) {
			snprintf(err, errlen, "empty option");
			return false;
		}
	}
	return true;
}

/* True for a name exports(5) would take as a host name or pattern. */
static bool valid_name(const char *s)
{
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr(".-_*?[]", *s))
			return false;
	return true;
}

/* Fills R's match part from SPEC. */
static bool parse_spec(const char *spec, struct srv_client_rule *r, char *err,
		       size_t errlen)
{
	char host[256];
	const char *slash = strchr(spec, '/');
	unsigned long bits;
	unsigned mbits;
	char *end;
	bool v4;

	if (strcmp(spec, "*") == 0) {
		r->kind = SRV_MATCH_ANY;
		return true;
	}
	if (slash) {
		if ((size_t)(slash - spec) >= sizeof(host))
			goto bad;
		memcpy(host, spec, (size_t)(slash - spec));
		host[slash - spec] = '\0';
		if (!parse_addr16(host, r->addr, &v4))
			goto bad;
		if (v4 && strchr(slash + 1, '.')) {
			if (!mask_bits(slash + 1, &mbits))
				goto bad;
			bits = mbits;
		} else {
			errno = 0;
			bits = strtoul(slash + 1, &end, 10);
			if (!isdigit((unsigned char)slash[1]) || *end || errno ||
			    bits > (v4 ? 32u : 128u))
				goto bad;
		}
		r->kind = SRV_MATCH_NET;
		r->prefix = (unsigned)bits + (v4 ? 96 : 0);
		return true;
	}
	if (parse_addr16(spec, r->addr, &v4)) {
		r->kind = SRV_MATCH_ADDR;
		return true;
	}
	if (!valid_name(spec) || strlen(spec) >= sizeof(host))
		goto bad;
	r->kind = strpbrk(spec, "*?[") ? SRV_MATCH_WILDCARD : SRV_MATCH_NAME;
	r->name = strdup(spec);
	if (!r->name) {
		snprintf(err, errlen, "out of memory");
		return false;
	}
	return true;
bad:
	snprintf(err, errlen,
		 "bad client '%s' (address, ADDR/BITS, host name or pattern)", spec);
	return false;
}

/* Parses one "SPEC" or "SPEC(options)" token of LEN bytes at P into R. */
static bool parse_rule(const char *p, size_t len, struct srv_client_rule *r, char *err,
		       size_t errlen)
{
	const char *open = memchr(p, '(', len);
	size_t speclen = open ? (size_t)(open - p) : len;

	opts_default(&r->opts);
	if (speclen == 0) {
		/* exports(5) reads "(rw)" as "everybody": too easy to write by
		 * accident (a space after the host), so it must be said. */
		snprintf(err, errlen,
			 "options without a client: write *(...) for everybody, "
			 "with no space before '('");
		return false;
	}
	r->spec = strndup(p, speclen);
	if (!r->spec) {
		snprintf(err, errlen, "out of memory");
		return false;
	}
	if (open && p[len - 1] != ')') {
		snprintf(err, errlen, "client '%s': options not closed by ')'", r->spec);
		return false;
	}
	if (!parse_spec(r->spec, r, err, errlen))
		return false;
	if (open && !parse_options(open + 1, len - speclen - 2, &r->opts, err, errlen))
		return false;
	return true;
}

static void rule_free(struct srv_client_rule *r)
{
	free(r->spec);
	free(r->name);
}

void srv_clients_free(struct srv_clients *c)
{
	for (size_t i = 0; i < c->n; i++)
		rule_free(&c->rules[i]);
	free(c->rules);
	memset(c, 0, sizeof(*c));
}

int srv_clients_parse(const char *text, struct srv_clients *out, char *err, size_t errlen)
{
	struct srv_clients c = {0};
	struct srv_client_rule *grown;
	const char *p = text;
	size_t len;
	char msg[300];

	for (;;) {
		p += strspn(p, " \t\r\n");
		if (!*p)
			break;
		len = strcspn(p, " \t\r\n");
		if (c.n == MAX_RULES) {
			snprintf(err, errlen, "more than %d clients", MAX_RULES);
			goto fail;
		}
		grown = realloc(c.rules, (c.n + 1) * sizeof(*grown));
		if (!grown) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		c.rules = grown;
		memset(&c.rules[c.n], 0, sizeof(c.rules[0]));
		c.n++;
		if (!parse_rule(p, len, &c.rules[c.n - 1], msg, sizeof(msg))) {
			snprintf(err, errlen, "%s", msg);
			goto fail;
		}
		c.need_name = c.need_name || c.rules[c.n - 1].name;
		p += len;
	}
	if (c.n == 0) {
		snprintf(err, errlen, "no clients");
		goto fail;
	}
	*out = c;
	return 0;
fail:
	srv_clients_free(&c);
	return -EINVAL;
}

/* ---- matching ---- */

/* exports(5)'s precedence (invariant 1): lower ranks first. */
static int rule_rank(const struct srv_client_rule *r)
{
	switch (r->kind) {
	case SRV_MATCH_ADDR:
	case SRV_MATCH_NAME:
		return 0;
	case SRV_MATCH_NET:
		return 1;
	case SRV_MATCH_WILDCARD:
		return 2;
	case SRV_MATCH_ANY:
		break;
	}
	return 3;
}

static bool rule_matches(const struct srv_client_rule *r, const uint8_t addr[16],
			 const char *hostname)
{
	switch (r->kind) {
	case SRV_MATCH_ADDR:
		return memcmp(r->addr, addr, 16) == 0;
	case SRV_MATCH_NET:
		return prefix_match(r->addr, addr, r->prefix);
	case SRV_MATCH_NAME:
		return hostname && strcasecmp(r->name, hostname) == 0;
	case SRV_MATCH_WILDCARD:
		return hostname && fnmatch(r->name, hostname, FNM_CASEFOLD) == 0;
	case SRV_MATCH_ANY:
		return true;
	}
	return false;
}

const struct srv_client_rule *srv_clients_match(const struct srv_clients *c,
						const struct sockaddr_storage *peer,
						const char *hostname)
{
	const struct srv_client_rule *best = NULL;
	uint8_t addr[16];
	bool v4;

	if (!peer_addr16(peer, addr, &v4))
		return NULL;
	for (size_t i = 0; i < c->n; i++) {
		if (best && rule_rank(&c->rules[i]) >= rule_rank(best))
			continue;
		if (rule_matches(&c->rules[i], addr, hostname))
			best = &c->rules[i];
	}
	return best;
}

void srv_cred_squash(struct rpc_cred *cred, const struct srv_client_opts *o)
{
	bool all = o->squash == SRV_SQUASH_ALL || cred->flavor != AUTH_SYS;

	if (all) {
		cred->uid = o->anonuid;
		cred->gid = o->anongid;
		cred->ngroups = 0;
		return;
	}
	if (o->squash == SRV_SQUASH_NONE)
		return;
	if (cred->uid == 0)
		cred->uid = o->anonuid;
	if (cred->gid == 0)
		cred->gid = o->anongid;
	for (uint32_t i = 0; i < cred->ngroups; i++)
		if (cred->groups[i] == 0)
			cred->groups[i] = o->anongid;
}

/* ---- host names (invariant 3), cached per address ---- */

struct name_slot {
	uint8_t addr[16];
	time_t until; /* 0: empty */
	bool found;
	char name[NI_MAXHOST];
};

struct srv_names {
	pthread_mutex_t lock;
	struct name_slot slots[NAME_SLOTS];
};

int srv_names_new(struct srv_names **out)
{
	struct srv_names *n = calloc(1, sizeof(*n));

	if (!n)
		return -ENOMEM;
	pthread_mutex_init(&n->lock, NULL);
	*out = n;
	return 0;
}

void srv_names_free(struct srv_names *n)
{
	if (!n)
		return;
	pthread_mutex_destroy(&n->lock);
	free(n);
}

/* True if NAME resolves to ADDR (forward confirmation). */
static bool name_has_addr(const char *hostname, const uint8_t addr[16])
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
	bool found = false;
	uint8_t a[16];
	bool v4;

	if (getaddrinfo(hostname, NULL, &hints, &res) != 0)
		return false;
	for (ai = res; ai && !found; ai = ai->ai_next)
		found =
		    peer_addr16((const struct sockaddr_storage *)ai->ai_addr, a, &v4) &&
		    memcmp(a, addr, 16) == 0;
	freeaddrinfo(res);
	return found;
}

/* Resolves PEER's confirmed host name into SLOT (without the lock held: a
 * slow resolver must not stall other clients' look-ups). */
static void resolve_slot(const struct sockaddr_storage *peer, struct name_slot *slot)
{
	socklen_t len = peer->ss_family == AF_INET ? sizeof(struct sockaddr_in)
						   : sizeof(struct sockaddr_in6);

	slot->found = getnameinfo((const struct sockaddr *)peer, len, slot->name,
				  sizeof(slot->name), NULL, 0, NI_NAMEREQD) == 0 &&
		      name_has_addr(slot->name, slot->addr);
	if (!slot->found)
		slot->name[0] = '\0';
	slot->until = time(NULL) + NAME_TTL_SEC;
}

bool srv_peer_name(struct srv_names *n, const struct sockaddr_storage *peer, char *buf,
		   size_t len)
{
	struct name_slot fresh = {0}, *slot;
	size_t h = 0;
	bool v4;

	if (!n || !peer_addr16(peer, fresh.addr, &v4))
		return false;
	for (size_t i = 0; i < 16; i++)
		h = h * 31 + fresh.addr[i];
	slot = &n->slots[h % NAME_SLOTS];
	pthread_mutex_lock(&n->lock);
	if (slot->until > time(NULL) && memcmp(slot->addr, fresh.addr, 16) == 0)
		fresh = *slot;
	pthread_mutex_unlock(&n->lock);
	if (!fresh.until) {
		resolve_slot(peer, &fresh);
		pthread_mutex_lock(&n->lock);
		*slot = fresh;
		pthread_mutex_unlock(&n->lock);
	}
	if (fresh.found)
		snprintf(buf, len, "%s", fresh.name);
	return fresh.found;
}

/* ---- the decision for one caller ---- */

/* Refusals are logged under a limit each (a client retrying, or a flood,
 * would bury the log), with a count of the rest. */
static struct rpc_log_limit no_rule_limit, insecure_limit;

/* The rule of EX for PEER, its confirmed host name into HOSTNAME ("" if none). */
static const struct srv_client_rule *rule_for(struct srv *s, const struct srv_export *ex,
					      const struct sockaddr_storage *peer,
					      char *hostname, size_t len)
{
	const struct srv_clients *c = ex->parent ? &ex->parent->clients : &ex->clients;

	hostname[0] = '\0';
	if (c->need_name && !srv_peer_name(s->names, peer, hostname, len))
		hostname[0] = '\0';
	return srv_clients_match(c, peer, hostname[0] ? hostname : NULL);
}

bool srv_access_admits(struct srv *s, const struct srv_export *ex,
		       const struct sockaddr_storage *peer)
{
	char hostname[NI_MAXHOST];
	const struct srv_client_rule *r;

	if (!peer)
		return false;
	r = rule_for(s, ex, peer, hostname, sizeof(hostname));
	return r && (!r->opts.secure || srv_peer_port_reserved(peer));
}

/* By address alone: a name would need the resolver, which must not hold up
 * the loop thread, so a rule list with host names admits every address
 * here, and its calls are checked as always (nfs3_admit, MNT). */
bool srv_access_admits_conn(void *arg, const struct sockaddr_storage *peer)
{
	struct srv *s = arg;
	const struct srv_clients *c;
	bool admitted = false;

	srv_exports_read_begin(s);
	for (size_t k = 0; k < s->nexports && !admitted; k++) {
		c = &s->exports[k]->clients;
		admitted = c->need_name || srv_clients_match(c, peer, NULL) != NULL;
	}
	srv_exports_read_end(s);
	return admitted;
}

const struct srv_client_rule *srv_access_rule(struct srv *s, const struct srv_export *ex,
					      const struct sockaddr_storage *peer,
					      const char *what)
{
	const struct srv_client_rule *r;
	char hostname[NI_MAXHOST], addr[INET6_ADDRSTRLEN + 16];
	bool named;

	if (!peer)
		return NULL;
	r = rule_for(s, ex, peer, hostname, sizeof(hostname));
	if (r && (!r->opts.secure || srv_peer_port_reserved(peer)))
		return r; /* admitted: no address text to format on every call */
	named = hostname[0] != '\0';
	rpc_addr_str(peer, true, addr, sizeof(addr));
	if (!r) {
		rpc_log_limited(&no_rule_limit, RPC_LOG_WARN,
				"%s of %s from %s%s%s: no client rule admits it", what,
				ex->path, addr, named ? " " : "", named ? hostname : "");
		return NULL;
	}
	rpc_log_limited(&insecure_limit, RPC_LOG_WARN,
			"%s of %s from %s: refused, source port is not below 1024 "
			"(rule %s is secure; 'insecure' admits it)",
			what, ex->path, addr, r->spec);
	return NULL;
}
