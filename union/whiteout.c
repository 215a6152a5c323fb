/* SPDX-License-Identifier: Apache-2.0 */
/* whiteout.c - the on-disk markers of a union and the one rule that merges a
 * name across layers.
 *
 * Formats read (Linux overlayfs, and OCI image layers in lower layers):
 *   white-out   a character device 0:0, or an empty regular file carrying the
 *               xattr overlay.whiteout (trusted. or user. namespace), or, in a
 *               lower layer, a sibling ".wh.NAME" (OCI)
 *   opaque dir  xattr overlay.opaque = "y" (trusted. or user.), or, in a lower
 *               layer, a ".wh..wh..opq" entry inside it or a ".wh.NAME" beside
 *               it (OCI: a white-out applies to the layers below its own).
 *               overlay.opaque = "x" is not opaque: it only says that the
 *               directory holds xattr white-outs.
 *   private     in a lower layer, every name starting with ".wh." belongs to
 *               the layer format and is never shown.
 *
 * Rules:
 *  1. One rule merges a name across layers, for lookups (lookup.c) and
 *     listings (readdir.c) alike (un_merge_step): a white-out or a
 *     non-directory ends the walk, directories merge down to the first
 *     opaque one.  So a listing shows exactly the names a lookup finds.
 *  2. Both xattr namespaces are accepted whatever the server runs as
 *     (overlay_xattr), so layers written by a privileged and by an
 *     unprivileged overlayfs both read right.
 *  3. Xattr white-outs count everywhere (un_whiteout_classify), not only in
 *     directories marked "x" as the kernel's readdir has it, so that readdir
 *     and lookup always agree.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "un_private.h"

static const char *const xattr_ns[] = {"trusted.overlay.", "user.overlay."};

/* 1 if DIRFD/NAME carries overlay.KEY (in either namespace) with a value
 * equal to WANT (NULL: any value), 0 if not, -errno on a real failure. */
static int overlay_xattr(int dirfd, const char *name, const char *key, const char *want)
{
	char attr[32], val[8];
	ssize_t n;

	for (size_t i = 0; i < sizeof(xattr_ns) / sizeof(xattr_ns[0]); i++) {
		strcpy(attr, xattr_ns[i]);
		strcat(attr, key);
		n = un_sys_getxattrat(dirfd, name, attr, val, sizeof(val));
		if (n == -ERANGE && !want)
			return 1; /* present, with a long value */
		if (n == -ENODATA || n == -ENOTSUP || n == -EPERM || n == -EACCES ||
		    n == -ERANGE)
			continue; /* absent, not readable to us, or too long to match */
		if (n < 0)
			return (int)n;
		/* exact value, as overlayfs compares it: "yes" is not "y" */
		if (!want || ((size_t)n == strlen(want) && !memcmp(val, want, (size_t)n)))
			return 1;
	}
	return 0;
}

bool un_merge_step(struct un_merge *m, enum un_seen seen)
{
	if (m->stop)
		return false;
	switch (seen) {
	case UN_SEEN_NONE:
		return false;
	case UN_SEEN_WHITEOUT:
		m->stop = true; /* hides this name in every layer below */
		return false;
	case UN_SEEN_OTHER:
		m->stop = true; /* a non-directory is never merged */
		if (m->nfound)
			return false; /* hidden by the directory above */
		m->nfound = 1;
		return true;
	case UN_SEEN_DIR:
		m->is_dir = true;
		m->nfound++;
		return true;
	}
	return false;
}

bool un_name_private(const char *name, size_t len)
{
	return len >= UN_OCI_WH_LEN && !memcmp(name, UN_OCI_WH, UN_OCI_WH_LEN);
}

int un_whiteout_classify(int dirfd, const char *name, const struct stat *st)
{
	int r;

	if (S_ISDIR(st->st_mode))
		return UN_SEEN_DIR;
	if (S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0))
		return UN_SEEN_WHITEOUT;
	if (!S_ISREG(st->st_mode) || st->st_size != 0)
		return UN_SEEN_OTHER;
	r = overlay_xattr(dirfd, name, "whiteout", NULL);
	if (r < 0)
		return r;
	return r ? UN_SEEN_WHITEOUT : UN_SEEN_OTHER;
}

/* 1 if NAME exists in DIRFD (whatever it is), 0 if not. */
static int exists(int dirfd, const char *name)
{
	struct stat st;
	int err = un_sys_fstatat(dirfd, name, &st, 0);

	if (err == -ENOENT || err == -ENAMETOOLONG)
		return 0;
	return err < 0 ? err : 1;
}

int un_oci_whiteout_exists(int dirfd, const char *name, size_t len)
{
	char wh[UN_NAME_MAX + 1];

	if (len + UN_OCI_WH_LEN > UN_NAME_MAX)
		return 0; /* no such name can exist */
	memcpy(wh, UN_OCI_WH, UN_OCI_WH_LEN);
	memcpy(wh + UN_OCI_WH_LEN, name, len + 1);
	return exists(dirfd, wh);
}

int un_dir_opaque_own(int dir, bool lower)
{
	int r = overlay_xattr(dir, "", "opaque", "y");

	if (r || !lower)
		return r;
	return exists(dir, UN_OCI_OPQ);
}

int un_dir_opaque(int dir, int parent, const char *name, size_t len, bool lower)
{
	int r = un_dir_opaque_own(dir, lower);

	if (r || !lower)
		return r;
	return un_oci_whiteout_exists(parent, name, len);
}
