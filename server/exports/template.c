/* SPDX-License-Identifier: Apache-2.0 */
/* template.c - an export's options as the parser hands them over, and the
 * per-client dir templates (%a, %h) in them: what a template is, and its
 * expansion for one client.  Below both the parser (server/args.c), which
 * checks them, and the client unions (unions.c), which expand them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exports.h"

void srv_export_opts_free(struct srv_export_opts *e)
{
	for (size_t i = 0; i < e->nlower; i++)
		free(e->lowerdirs[i]);
	free(e->lowerdirs);
	free(e->path);
	free(e->upperdir);
	free(e->workdir);
	free(e->clients);
	free(e->fsid);
	memset(e, 0, sizeof(*e));
}

/* Copies string SRC (NULL stays NULL) into *DST; false when out of memory. */
static bool dup_opt(char **dst, const char *src)
{
	*dst = src ? strdup(src) : NULL;
	return !src || *dst;
}

int srv_export_opts_copy(struct srv_export_opts *dst, const struct srv_export_opts *src)
{
	bool ok;

	memset(dst, 0, sizeof(*dst));
	dst->cfg_line = src->cfg_line;
	dst->lowerdirs = calloc(src->nlower ? src->nlower : 1, sizeof(*dst->lowerdirs));
	ok = dst->lowerdirs && dup_opt(&dst->path, src->path) &&
	     dup_opt(&dst->upperdir, src->upperdir) &&
	     dup_opt(&dst->workdir, src->workdir) &&
	     dup_opt(&dst->clients, src->clients) && dup_opt(&dst->fsid, src->fsid);
	for (size_t i = 0; ok && i < src->nlower; i++, dst->nlower++)
		ok = dup_opt(&dst->lowerdirs[i], src->lowerdirs[i]);
	if (!ok)
		srv_export_opts_free(dst);
	return ok ? 0 : -ENOMEM;
}

/* ---- per-client dir templates ---- */

bool srv_template_uses(const char *dir, char v)
{
	for (const char *p = dir; p && (p = strchr(p, '%')) != NULL; p += 2) {
		if (p[1] == v)
			return true;
		if (!p[1])
			break;
	}
	return false;
}

bool srv_is_template(const char *dir)
{
	return srv_template_uses(dir, 'a') || srv_template_uses(dir, 'h');
}

bool srv_lowers_per_client(const struct srv_export_opts *e)
{
	for (size_t i = 0; i < e->nlower; i++)
		if (srv_is_template(e->lowerdirs[i]))
			return true;
	return false;
}

bool srv_export_per_client(const struct srv_export_opts *e)
{
	return srv_is_template(e->upperdir) || srv_lowers_per_client(e);
}

bool srv_template_expand(const char *t, const char *addr, const char *host, char *out,
			 size_t len)
{
	size_t n = 0, add;
	const char *piece;
	char one[2] = {0};

	for (const char *p = t; *p; p++) {
		piece = one;
		one[0] = *p;
		if (*p == '%' && p[1]) {
			p++;
			piece = *p == 'a'   ? addr
				: *p == 'h' ? host
				: *p == '%' ? "%"
					    : NULL;
			if (!piece || !*piece || strchr(piece, '/'))
				return false; /* no host name, or one that is no dir name
					       */
		}
		add = strlen(piece);
		if (n + add >= len)
			return false;
		memcpy(out + n, piece, add);
		n += add;
	}
	out[n] = '\0';
	return true;
}
