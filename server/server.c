/* server.c - the server object: state dir, exports, write verifier, mounts.
 *
 * struct srv is built once at start-up (srv_open) and torn down once at exit
 * (srv_close); in between its exports are read-only and may be shared by every
 * worker without a lock.  Only the mount list changes while serving, under
 * mounts_lock (mnt3_proc.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "srv.h"

/* Copies PATH into OUT with runs of '/' collapsed and no trailing '/' (except
 * for "/" itself).  False when it does not fit or is not absolute. */
static bool normalise_path(const char *path, char *out, size_t len)
{
	size_t n = 0;

	if (path[0] != '/')
		return false;
	for (const char *p = path; *p; p++) {
		if (*p == '/' && n > 0 && out[n - 1] == '/')
			continue;
		if (n + 1 >= len)
			return false;
		out[n++] = *p;
	}
	if (n > 1 && out[n - 1] == '/')
		n--;
	out[n] = '\0';
	return true;
}

struct srv_export *srv_export_by_id(struct srv *s, uint32_t id)
{
	for (size_t i = 0; i < s->nexports; i++)
		if (un_export_id(s->exports[i].ux) == id)
			return &s->exports[i];
	return NULL;
}

struct srv_export *srv_export_by_path(struct srv *s, const char *path)
{
	char norm[MNTPATHLEN + 1];

	if (!normalise_path(path, norm, sizeof(norm)))
		return NULL;
	for (size_t i = 0; i < s->nexports; i++)
		if (strcmp(s->exports[i].path, norm) == 0)
			return &s->exports[i];
	return NULL;
}

/* True if export path EP is PATH or a leading part of it; *rest gets the part
 * of PATH below EP, without its leading slashes. */
static bool export_covers(const char *ep, const char *path, const char **rest)
{
	size_t n = strlen(ep);

	if (strcmp(ep, "/") == 0)
		n = 0;
	else if (strncmp(ep, path, n) != 0 || (path[n] != '/' && path[n] != '\0'))
		return false;
	while (path[n] == '/')
		n++;
	*rest = path + n;
	return true;
}

struct srv_export *srv_export_containing(struct srv *s, const char *path, char *rest,
					 size_t restlen)
{
	char norm[MNTPATHLEN + 1];
	struct srv_export *best = NULL;
	const char *best_rest = NULL, *r;

	if (!normalise_path(path, norm, sizeof(norm)))
		return NULL;
	for (size_t i = 0; i < s->nexports; i++) {
		if (!export_covers(s->exports[i].path, norm, &r))
			continue;
		if (!best || strlen(s->exports[i].path) > strlen(best->path)) {
			best = &s->exports[i];
			best_rest = r;
		}
	}
	if (best && (size_t)snprintf(rest, restlen, "%s", best_rest) >= restlen)
		return NULL;
	return best;
}

const char *srv_addr_str(const struct sockaddr_storage *peer, bool with_port, char *buf,
			 size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	bool v6 = false;

	if (peer->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)peer;
		inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
		port = ntohs(sin->sin_port);
	} else if (peer->ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)peer;
		port = ntohs(sin6->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
			inet_ntop(AF_INET, &sin6->sin6_addr.s6_addr[12], host,
				  sizeof(host));
		} else {
			inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
			v6 = true;
		}
	}
	if (!with_port)
		snprintf(buf, len, "%s", host);
	else if (v6)
		snprintf(buf, len, "[%s]:%u", host, port);
	else
		snprintf(buf, len, "%s:%u", host, port);
	return buf;
}

/* Opens export I of O into S->exports[S->nexports]. */
static int open_export(struct srv *s, const struct srv_export_opts *eo, char *err,
		       size_t errlen)
{
	struct srv_export *ex = &s->exports[s->nexports];
	char norm[MNTPATHLEN + 1];
	struct un_export_cfg cfg = {
	    .path = norm,
	    .upperdir = eo->upperdir,
	    .workdir = eo->workdir,
	    .lowerdirs = (const char *const *)eo->lowerdirs,
	    .nlower = eo->nlower,
	};
	int rc = -EINVAL;

	if (!normalise_path(eo->path, norm, sizeof(norm))) {
		snprintf(err, errlen, "export path %s: not an absolute path", eo->path);
		goto out;
	}
	if (srv_export_by_path(s, norm)) {
		snprintf(err, errlen, "export path %s: exported twice", norm);
		goto out;
	}
	rc = -ENOMEM;
	ex->path = strdup(norm);
	if (!ex->path) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	rc = un_export_open(s->state, &cfg, &ex->ux, err, errlen);
	if (rc < 0)
		goto out_path;
	rc = -EEXIST;
	if (srv_export_by_id(s, un_export_id(ex->ux))) {
		snprintf(err, errlen,
			 "export path %s: its id collides with another export's", norm);
		goto out_ux;
	}
	s->nexports++;
	return 0;
out_ux:
	un_export_close(ex->ux);
out_path:
	free(ex->path);
	ex->path = NULL;
out:
	return rc;
}

int srv_open(struct srv *s, const struct srv_opts *o, char *err, size_t errlen)
{
	int rc;

	s->cfg = o->cfg;
	pthread_mutex_init(&s->mounts_lock, NULL);
	/* Random per start, so a client that sees it change resends unstable writes. */
	rc = -EIO;
	if (getrandom(s->write_verf, sizeof(s->write_verf), 0) != sizeof(s->write_verf)) {
		snprintf(err, errlen, "cannot draw the write verifier: %s",
			 strerror(errno));
		goto fail;
	}
	rc = srv_drc_new(SRV_DRC_CAPACITY, &s->drc);
	if (rc < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	rc = un_state_open(o->state_dir, &s->state);
	if (rc < 0) {
		snprintf(err, errlen, "state dir %s: %s", o->state_dir, strerror(-rc));
		goto fail;
	}
	rc = -ENOMEM;
	s->exports = calloc(o->nexports ? o->nexports : 1, sizeof(*s->exports));
	if (!s->exports) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < o->nexports; i++) {
		rc = open_export(s, &o->exports[i], err, errlen);
		if (rc < 0)
			goto fail;
	}
	return 0;
fail:
	srv_close(s);
	return rc;
}

void srv_close(struct srv *s)
{
	for (size_t i = 0; i < s->nexports; i++) {
		un_export_close(s->exports[i].ux);
		free(s->exports[i].path);
	}
	free(s->exports);
	if (s->state)
		un_state_close(s->state);
	free(s->mounts);
	pthread_mutex_destroy(&s->mounts_lock);
	srv_drc_free(s->drc);
	memset(s, 0, sizeof(*s));
}
