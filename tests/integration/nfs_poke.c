/* SPDX-License-Identifier: Apache-2.0 */
/* nfs_poke - small NFSv3 client actions for kvm_handles.sh, through libnfs.
 *
 *   nfs_poke URL rewrite PATH   opens PATH read-write, reads its first byte
 *                               and writes the same byte back at offset 0,
 *                               then COMMITs: a write that leaves the content
 *                               as it was, but makes a writable union copy a
 *                               lower file up.  Prints the fileid before and
 *                               after, and the size.
 *   nfs_poke URL create PATH    creates PATH (an empty file; an existing one
 *                               is left as it is).
 *   nfs_poke URL fileid PATH    prints PATH's fileid.
 *   nfs_poke URL hold PATH      opens PATH and prints "holding FILEID", waits
 *                               for a line on stdin, then asks GETATTR by the
 *                               handle it held and READs its first bytes by
 *                               it, and prints "after: ok FILEID BYTES" (up to
 *                               a newline) or "after: " and the error: a
 *                               client that keeps a file open across what the
 *                               server does (reconnecting, as a client does,
 *                               when the server went away meanwhile).
 *
 * URL is the export root, e.g. nfs://192.0.2.1/?nfsport=P&mountport=M&version=3;
 * PATH is relative to it and starts with '/'.  Every call is a fresh mount and a
 * fresh lookup from the export root: "another path" to the object than the one
 * a client that holds its handle uses.
 *
 * Exit status: 0 done, 1 an NFS call failed (the message names it), 2 bad usage.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include <nfsc/libnfs.h>

#define POKE_TIMEOUT_MS 10000

static int usage(void)
{
	fprintf(stderr, "usage: nfs_poke URL rewrite|create|fileid|hold PATH\n");
	return 2;
}

static int failed(struct nfs_context *nfs, const char *what, const char *path)
{
	fprintf(stderr, "nfs_poke: %s %s: %s\n", what, path, nfs_get_error(nfs));
	return 1;
}

static int fileid_of(struct nfs_context *nfs, struct nfsfh *fh, uint64_t *id,
		     uint64_t *size)
{
	struct nfs_stat_64 st;

	if (nfs_fstat64(nfs, fh, &st))
		return -1;
	*id = st.nfs_ino;
	*size = st.nfs_size;
	return 0;
}

/* Writes byte 0 of PATH with itself and commits it. */
static int rewrite(struct nfs_context *nfs, const char *path)
{
	struct nfsfh *fh = NULL;
	uint64_t before, after, size;
	char byte;
	int rc = 1;

	if (nfs_open(nfs, path, O_RDWR, &fh))
		return failed(nfs, "open", path);
	if (fileid_of(nfs, fh, &before, &size)) {
		failed(nfs, "fstat", path);
		goto out;
	}
	if (nfs_pread(nfs, fh, 0, 1, &byte) != 1) {
		failed(nfs, "read", path);
		goto out;
	}
	if (nfs_pwrite(nfs, fh, 0, 1, &byte) != 1) {
		failed(nfs, "write", path);
		goto out;
	}
	if (nfs_fsync(nfs, fh)) {
		failed(nfs, "commit", path);
		goto out;
	}
	if (fileid_of(nfs, fh, &after, &size)) {
		failed(nfs, "fstat", path);
		goto out;
	}
	printf("rewrote %s: fileid %" PRIu64 " before, %" PRIu64 " after, size %" PRIu64
	       "\n",
	       path, before, after, size);
	rc = 0;
out:
	nfs_close(nfs, fh);
	return rc;
}

static int create(struct nfs_context *nfs, const char *path)
{
	struct nfsfh *fh = NULL;

	if (nfs_create(nfs, path, O_WRONLY, 0644, &fh))
		return failed(nfs, "create", path);
	nfs_close(nfs, fh);
	printf("created %s\n", path);
	return 0;
}

static int fileid(struct nfs_context *nfs, const char *path)
{
	struct nfs_stat_64 st;

	if (nfs_stat64(nfs, path, &st))
		return failed(nfs, "stat", path);
	printf("%" PRIu64 "\n", st.nfs_ino);
	return 0;
}

static int hold(struct nfs_context *nfs, const char *path)
{
	struct nfsfh *fh = NULL;
	uint64_t id, size;
	char line[64], data[64] = "";
	int n;

	if (nfs_open(nfs, path, O_RDONLY, &fh))
		return failed(nfs, "open", path);
	if (fileid_of(nfs, fh, &id, &size)) {
		nfs_close(nfs, fh);
		return failed(nfs, "fstat", path);
	}
	printf("holding %" PRIu64 "\n", id);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		fprintf(stderr, "nfs_poke: hold %s: stdin closed\n", path);
	if (fileid_of(nfs, fh, &id, &size) ||
	    (n = nfs_pread(nfs, fh, 0, sizeof(data) - 1, data)) < 0) {
		printf("after: %s\n", nfs_get_error(nfs));
	} else {
		data[strcspn(data, "\n")] = '\0';
		printf("after: ok %" PRIu64 " %s\n", id, data);
	}
	nfs_close(nfs, fh);
	return 0;
}

static int run(struct nfs_context *nfs, const char *verb, const char *path)
{
	if (!strcmp(verb, "rewrite"))
		return rewrite(nfs, path);
	if (!strcmp(verb, "create"))
		return create(nfs, path);
	if (!strcmp(verb, "fileid"))
		return fileid(nfs, path);
	if (!strcmp(verb, "hold"))
		return hold(nfs, path);
	return usage();
}

int main(int argc, char **argv)
{
	struct nfs_context *nfs;
	struct nfs_url *url = NULL;
	int rc = 1;

	if (argc != 4 || argv[3][0] != '/')
		return usage();
	nfs = nfs_init_context();
	if (!nfs) {
		fprintf(stderr, "nfs_poke: nfs_init_context failed\n");
		return 1;
	}
	/* one round trip per call, and a dead server is an error, not a hang;
	 * but a held handle is asked again after the server may have been
	 * replaced (another gateway on its address), as a client reconnects */
	nfs_set_dircache(nfs, 0);
	nfs_set_autoreconnect(nfs, strcmp(argv[2], "hold") == 0 ? 10 : 0);
	nfs_set_timeout(nfs, POKE_TIMEOUT_MS);
	url = nfs_parse_url_dir(nfs, argv[1]);
	if (!url) {
		failed(nfs, "parse URL", argv[1]);
		goto out;
	}
	if (nfs_mount(nfs, url->server, url->path)) {
		failed(nfs, "mount", argv[1]);
		goto out;
	}
	rc = run(nfs, argv[2], argv[3]);
	nfs_umount(nfs);
out:
	if (url)
		nfs_destroy_url(url);
	nfs_destroy_context(nfs);
	return rc;
}
