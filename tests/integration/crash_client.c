/* SPDX-License-Identifier: Apache-2.0 */
/* crash_client - the NFS client inside the VM of kvm_crash.sh: it checks what
 * the previous boot saved, does the next phase's work through libnfs' raw
 * NFSv3 calls to the guest's own union-nfsd on loopback, saves what it was
 * told, and crashes the kernel.
 *
 *   crash_client PHASE NFS_PORT MOUNT_PORT SAVED [--crash]
 *
 * SAVED is a file of "SAVE" lines from earlier boots (may be empty):
 *   SAVE obj KEY PATH FH FILEID SIZE MODE SUM   an object a reply named
 *   SAVE absent KEY PATH                        a name a reply removed
 * Each is checked first: GETATTR through the saved handle (FH, hex) must
 * answer NFS3_OK with FILEID, SIZE and MODE, READ must give bytes whose
 * FNV-1a hash is SUM (regular files), and a LOOKUP of PATH from the export
 * root must find the same fileid; an absent name must be NFS3ERR_NOENT.
 * Every check prints "CRASH CHECK KEY ok" or "CRASH CHECK KEY LOST why".
 *
 * Then the work of PHASE, each step printing the SAVE lines of what a reply
 * promised (phase 3 does none; the boot ends cleanly):
 *   1  created  CREATE d1/new.bin in the deep merged dir, WRITE UNSTABLE,
 *               COMMIT;
 *      copyup   WRITE FILE_SYNC into the lower file d1/d2/copy.bin (the
 *               copy-up), same fileid before and after;
 *      deep     LOOKUP e1/.../e5/deep.bin, a merged tree no call touched
 *               before (new nodes for the five dirs and the file), then
 *               1.5 s of nothing: only the node table's syncer (period 1 s)
 *               makes them durable before the crash;
 *   2  the namespace operations, each replied to just before the crash:
 *      fresh    CREATE fresh.bin;  newdir  MKDIR newdir;
 *      sym      SYMLINK sym -> fresh.bin;
 *      linked   LINK linked.txt to the lower file linksrc.txt;
 *      moved    RENAME old.txt -> moved.txt;  gone  REMOVE gone.txt;
 *      rmme     RMDIR of the empty lower dir rmme;
 *      chmod    SETATTR mode 0600 of the lower file chmod.txt.
 * With --crash the kernel is crashed (sysrq c) at once after the last reply:
 * no sync, no clean stop of union-nfsd.
 *
 * Output goes to stdout, a line at a time (the guest points it at /dev/kmsg,
 * whose records reach the serial console before the panic stops the VM).
 * Exit: 0 every check passed and the phase's work done, 1 otherwise, 2 usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nfs_raw.h"

#define IO_MAX	     32768
#define CALL_TIMEOUT 20		      /* s; TCG is slow */
#define DEEP_DIR     "d1/d2/d3/d4/d5" /* created's */
#define LONE_DIR     "e1/e2/e3/e4/e5" /* deep's, seen first by its LOOKUP */
#define CREATED_LEN  100000

/* What one reply said. */
struct res {
	int status;
	struct fh fh;
	bool attrs;
	uint64_t fileid, size;
	uint32_t mode, count, type;
	stable_how committed; /* WRITE */
	bool eof;
	char *buf; /* READ: where the data goes (IO_MAX bytes) */
};

static struct rpc_context *nfs;
static struct fh root;
static int failures;

/* ---- raw calls (nfs_raw.h makes them synchronous) ---- */

/* Waits for the NFS call C; its reply, if any, is in C's struct res. */
static void finish(struct call *c, int queued)
{
	nfs_raw_finish_within(nfs, c, queued, CALL_TIMEOUT);
}

static void attrs_keep(struct res *o, const post_op_attr *a)
{
	const fattr3 *f = &a->post_op_attr_u.attributes;

	o->attrs = a->attributes_follow;
	if (!o->attrs)
		return;
	o->fileid = f->fileid;
	o->size = f->size;
	o->mode = f->mode & 07777;
	o->type = f->type;
}

/* The call record of one NFS call whose reply KEEP copies into OUT. */
static struct call call_for(void (*keep)(void *, void *), struct res *out)
{
	out->status = -1;
	return (struct call){.keep = keep, .out = out};
}

static void keep_getattr(void *data, void *out)
{
	struct res *o = out;
	GETATTR3res *r = data;
	post_op_attr a = {.attributes_follow = 1};

	o->status = r->status;
	if (r->status == NFS3_OK) {
		a.post_op_attr_u.attributes = r->GETATTR3res_u.resok.obj_attributes;
		attrs_keep(o, &a);
	}
}

static void keep_lookup(void *data, void *out)
{
	struct res *o = out;
	LOOKUP3res *r = data;

	o->status = r->status;
	if (r->status == NFS3_OK) {
		nfs_raw_copy_fh(&o->fh, &r->LOOKUP3res_u.resok.object);
		attrs_keep(o, &r->LOOKUP3res_u.resok.obj_attributes);
	}
}

static void keep_read(void *data, void *out)
{
	struct res *o = out;
	READ3res *r = data;

	o->status = r->status;
	if (r->status != NFS3_OK)
		return;
	o->count = r->READ3res_u.resok.data.data_len;
	if (o->count > IO_MAX)
		o->count = IO_MAX;
	memcpy(o->buf, r->READ3res_u.resok.data.data_val, o->count);
	o->eof = r->READ3res_u.resok.eof;
}

static void keep_write(void *data, void *out)
{
	struct res *o = out;
	WRITE3res *r = data;

	o->status = r->status;
	if (r->status == NFS3_OK) {
		o->count = r->WRITE3res_u.resok.count;
		o->committed = r->WRITE3res_u.resok.committed;
		attrs_keep(o, &r->WRITE3res_u.resok.file_wcc.after);
	}
}

/* What CREATE, MKDIR and SYMLINK share: with NFS3_OK, the new object's handle
 * (when the server sent one) and attributes; H and A are read only then. */
static void keep_made(struct res *o, nfsstat3 status, const post_op_fh3 *h,
		      const post_op_attr *a)
{
	o->status = status;
	if (status == NFS3_OK && h->handle_follows) {
		nfs_raw_copy_fh(&o->fh, &h->post_op_fh3_u.handle);
		attrs_keep(o, a);
	}
}

static void keep_create(void *data, void *out)
{
	CREATE3res *r = data;

	keep_made(out, r->status, &r->CREATE3res_u.resok.obj,
		  &r->CREATE3res_u.resok.obj_attributes);
}

static void keep_mkdir(void *data, void *out)
{
	MKDIR3res *r = data;

	keep_made(out, r->status, &r->MKDIR3res_u.resok.obj,
		  &r->MKDIR3res_u.resok.obj_attributes);
}

static void keep_symlink(void *data, void *out)
{
	SYMLINK3res *r = data;

	keep_made(out, r->status, &r->SYMLINK3res_u.resok.obj,
		  &r->SYMLINK3res_u.resok.obj_attributes);
}

/* REMOVE, RMDIR, RENAME, LINK, COMMIT, SETATTR: the status is all we need (it comes
 * first in every reply). */
static void keep_status(void *data, void *out)
{
	struct res *o = out;
	o->status = *(nfsstat3 *)data;
}

static struct res getattr(const struct fh *f)
{
	GETATTR3args a = {.object = nfs_raw_fh3(f)};
	struct res o = {0};
	struct call c = call_for(keep_getattr, &o);

	finish(&c, rpc_nfs3_getattr_async(nfs, nfs_raw_on_reply, &a, &c));
	return o;
}

static struct res lookup(const struct fh *dir, const char *name)
{
	LOOKUP3args a = {.what = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};
	struct res o = {0};
	struct call c = call_for(keep_lookup, &o);

	finish(&c, rpc_nfs3_lookup_async(nfs, nfs_raw_on_reply, &a, &c));
	return o;
}

/* READ of up to IO_MAX bytes at OFF into BUF. */
static struct res read_at(const struct fh *f, uint64_t off, char *buf)
{
	READ3args a = {.file = nfs_raw_fh3(f), .offset = off, .count = IO_MAX};
	struct res o = {.buf = buf};
	struct call c = call_for(keep_read, &o);

	finish(&c, rpc_nfs3_read_async(nfs, nfs_raw_on_reply, &a, &c));
	return o;
}

static struct res write_at(const struct fh *f, uint64_t off, const char *data, uint32_t n,
			   stable_how how)
{
	WRITE3args a = {.file = nfs_raw_fh3(f),
			.offset = off,
			.count = n,
			.stable = how,
			.data = {.data_len = n, .data_val = (char *)data}};
	struct res o = {0};
	struct call c = call_for(keep_write, &o);

	finish(&c, rpc_nfs3_write_async(nfs, nfs_raw_on_reply, &a, &c));
	return o;
}

static struct res commit(const struct fh *f)
{
	COMMIT3args a = {.file = nfs_raw_fh3(f)};
	struct res o = {0};
	struct call c = call_for(keep_status, &o);

	finish(&c, rpc_nfs3_commit_async(nfs, nfs_raw_on_reply, &a, &c));
	return o;
}

/* CREATE (UNCHECKED, mode 0644) or MKDIR (0755) of NAME in DIR. */
static struct res make(const struct fh *dir, const char *name, bool isdir)
{
	CREATE3args ca = {.where = {.dir = nfs_raw_fh3(dir), .name = (char *)name},
			  .how = {.mode = UNCHECKED}};
	MKDIR3args ma = {.where = ca.where};
	struct res o = {0};
	struct call c = call_for(isdir ? keep_mkdir : keep_create, &o);
	int q;

	ca.how.createhow3_u.obj_attributes.mode.set_it = 1;
	ca.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
	ma.attributes.mode.set_it = 1;
	ma.attributes.mode.set_mode3_u.mode = 0755;
	q = isdir ? rpc_nfs3_mkdir_async(nfs, nfs_raw_on_reply, &ma, &c)
		  : rpc_nfs3_create_async(nfs, nfs_raw_on_reply, &ca, &c);
	finish(&c, q);
	return o;
}

static struct res rename_in(const struct fh *dir, const char *from, const char *to)
{
	RENAME3args a = {.from = {.dir = nfs_raw_fh3(dir), .name = (char *)from},
			 .to = {.dir = nfs_raw_fh3(dir), .name = (char *)to}};
	struct res o = {0};
	struct call c = call_for(keep_status, &o);

	finish(&c, rpc_nfs3_rename_async(nfs, nfs_raw_on_reply, &a, &c));
	return o;
}

static struct res remove_in(const struct fh *dir, const char *name)
{
	REMOVE3args a = {.object = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};
	struct res o = {0};
	struct call c = call_for(keep_status, &o);

	finish(&c, rpc_nfs3_remove_async(nfs, nfs_raw_on_reply, &a, &c));
	return o;
}

static struct res rmdir_in(const struct fh *dir, const char *name)
{
	RMDIR3args a = {.object = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};
	struct res o = {0};
	struct call c = call_for(keep_status, &o);

	finish(&c, rpc_nfs3_rmdir_async(nfs, nfs_raw_on_reply, &a, &c));
	return o;
}

static struct res symlink_in(const struct fh *dir, const char *name, const char *target)
{
	SYMLINK3args a = {.where = {.dir = nfs_raw_fh3(dir), .name = (char *)name},
			  .symlink = {.symlink_data = (char *)target}};
	struct res o = {0};
	struct call c = call_for(keep_symlink, &o);

	finish(&c, rpc_nfs3_symlink_async(nfs, nfs_raw_on_reply, &a, &c));
	return o;
}

static struct res link_in(const struct fh *f, const struct fh *dir, const char *name)
{
	LINK3args a = {.file = nfs_raw_fh3(f),
		       .link = {.dir = nfs_raw_fh3(dir), .name = (char *)name}};
	struct res o = {0};
	struct call c = call_for(keep_status, &o);

	finish(&c, rpc_nfs3_link_async(nfs, nfs_raw_on_reply, &a, &c));
	return o;
}

static struct res chmod_fh(const struct fh *f, uint32_t mode)
{
	SETATTR3args a = {.object = nfs_raw_fh3(f)};
	struct res o = {0};
	struct call c = call_for(keep_status, &o);

	a.new_attributes.mode.set_it = 1;
	a.new_attributes.mode.set_mode3_u.mode = mode;
	finish(&c, rpc_nfs3_setattr_async(nfs, nfs_raw_on_reply, &a, &c));
	return o;
}

/* LOOKUP of each component of PATH from the root; the last reply (or the
 * first that failed). */
static struct res walk(const char *path)
{
	char buf[256], *save = NULL;
	struct res o = {.status = NFS3_OK, .fh = root};

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *t = strtok_r(buf, "/", &save); t && o.status == NFS3_OK;
	     t = strtok_r(NULL, "/", &save)) {
		struct fh d = o.fh;

		o = lookup(&d, t);
	}
	return o;
}

static uint64_t fnv1a(uint64_t h, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * 0x100000001b3ull;
	return h;
}

#define FNV_START 0xcbf29ce484222325ull

/* READ of the whole file F: its hash in *sum; 0 or the failing status. */
static int read_sum(const struct fh *f, uint64_t *sum)
{
	static char buf[IO_MAX];
	uint64_t off = 0;
	struct res o;

	*sum = FNV_START;
	do {
		o = read_at(f, off, buf);
		if (o.status != NFS3_OK)
			return o.status;
		*sum = fnv1a(*sum, buf, o.count);
		off += o.count;
	} while (!o.eof && o.count);
	return 0;
}

static void hex(const struct fh *f, char *out)
{
	for (uint32_t i = 0; i < f->len; i++)
		sprintf(out + 2 * i, "%02x", f->d[i]);
	out[2 * f->len] = '\0';
}

static bool unhex(const char *s, struct fh *f)
{
	size_t n = strlen(s);

	if (n % 2 || n / 2 > NFS_RAW_FH_MAX)
		return false;
	f->len = (uint32_t)(n / 2);
	for (uint32_t i = 0; i < f->len; i++)
		if (sscanf(s + 2 * i, "%2hhx", &f->d[i]) != 1)
			return false;
	return true;
}

/* ---- saving and checking ---- */

/* Prints a failure line and counts it; false, for the caller to return. */
static bool failed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool failed(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	failures++;
	return false;
}

/* true if the call got a reply with NFS3_OK */
static bool ok(const char *what, const struct res *o)
{
	if (o->status == NFS3_OK)
		return true;
	failed("CRASH FAIL %s: status %d", what, o->status);
	return false;
}

static void print_save(const char *key, const char *path, const struct fh *f,
		       const struct res *a, uint64_t sum)
{
	char h[2 * NFS_RAW_FH_MAX + 1];

	hex(f, h);
	printf("CRASH SAVE obj %s %s %s %" PRIu64 " %" PRIu64 " %o %016" PRIx64 "\n", key,
	       path, h, a->fileid, a->size, a->mode, sum);
}

/* The SAVE line of object KEY at PATH, whose reply gave handle F: GETATTR
 * and READ now give the rest. */
static bool save_obj(const char *key, const char *path, const struct fh *f)
{
	struct res a = getattr(f);
	uint64_t sum = FNV_START;

	if (!ok(key, &a) || (a.type == NF3REG && read_sum(f, &sum)))
		return failed("CRASH FAIL save %s: no attributes or data", key);
	print_save(key, path, f, &a, sum);
	return true;
}

static bool check_obj(const char *key, const char *path, const char *hexfh,
		      const struct res *want, uint64_t sum)
{
	struct fh f;
	struct res a, l;
	uint64_t now = FNV_START;
	int err = 0;

	if (!unhex(hexfh, &f))
		return failed("CRASH CHECK %s LOST: bad saved handle", key);
	a = getattr(&f);
	if (a.status != NFS3_OK || !a.attrs)
		return failed(
		    "CRASH CHECK %s LOST: GETATTR of the saved handle: status %d", key,
		    a.status);
	if (a.fileid != want->fileid || a.size != want->size || a.mode != want->mode)
		return failed("CRASH CHECK %s LOST: fileid %" PRIu64 " size %" PRIu64
			      " mode %o, saved %" PRIu64 " %" PRIu64 " %o",
			      key, a.fileid, a.size, a.mode, want->fileid, want->size,
			      want->mode);
	if (a.type == NF3REG && ((err = read_sum(&f, &now)) || now != sum))
		return failed("CRASH CHECK %s LOST: READ status %d, data %s", key, err,
			      now == sum ? "as saved" : "differs");
	l = walk(path);
	if (l.status != NFS3_OK || !l.attrs || l.fileid != want->fileid)
		return failed("CRASH CHECK %s LOST: LOOKUP %s: status %d fileid %" PRIu64,
			      key, path, l.status, l.fileid);
	printf("CRASH CHECK %s ok (fileid %" PRIu64 ", %" PRIu64 " bytes)\n", key,
	       want->fileid, want->size);
	return true;
}

static bool check_absent(const char *key, const char *path)
{
	struct res l = walk(path);

	if (l.status != NFS3ERR_NOENT)
		return failed("CRASH CHECK %s LOST: LOOKUP %s: status %d, want NOENT",
			      key, path, l.status);
	printf("CRASH CHECK %s ok (no %s)\n", key, path);
	return true;
}

static void check_line(const char *line)
{
	char key[32], path[128], h[2 * NFS_RAW_FH_MAX + 2];
	struct res want = {0};
	uint64_t sum;

	if (sscanf(line, "SAVE obj %31s %127s %129s %" SCNu64 " %" SCNu64 " %o %" SCNx64,
		   key, path, h, &want.fileid, &want.size, &want.mode, &sum) == 7)
		check_obj(key, path, h, &want, sum);
	else if (sscanf(line, "SAVE absent %31s %127s", key, path) == 2)
		check_absent(key, path);
	else if (line[strspn(line, " \n")])
		failed("CRASH FAIL bad saved line: %s", line);
}

static bool check_saved(const char *file)
{
	char line[512];
	FILE *f = fopen(file, "r");

	if (!f)
		return failed("CRASH FAIL cannot read %s", file);
	while (fgets(line, sizeof(line), f))
		check_line(line);
	fclose(f);
	return true;
}

/* ---- the phases ---- */

/* created: CREATE in the deep merged dir, WRITE UNSTABLE, COMMIT. */
static void phase1_created(void)
{
	static char data[CREATED_LEN];
	const char *path = DEEP_DIR "/new.bin";
	struct res d = walk(DEEP_DIR), o, w;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (char)(i * 131 + i / 977);
	if (!ok("LOOKUP " DEEP_DIR, &d))
		return;
	o = make(&d.fh, "new.bin", false);
	if (!ok("CREATE new.bin", &o))
		return;
	for (uint32_t off = 0; off < sizeof(data); off += w.count) {
		uint32_t n = sizeof(data) - off > IO_MAX ? IO_MAX : sizeof(data) - off;

		w = write_at(&o.fh, off, data + off, n, UNSTABLE);
		if (!ok("WRITE new.bin", &w) || !w.count)
			return;
	}
	w = commit(&o.fh);
	if (ok("COMMIT new.bin", &w))
		save_obj("created", path, &o.fh);
}

/* copyup: a FILE_SYNC WRITE into a lower file keeps its fileid. */
static bool phase1_copyup(void)
{
	const char *path = "d1/d2/copy.bin";
	struct res l = walk(path), w;

	if (!ok("LOOKUP copy.bin", &l))
		return false;
	w = write_at(&l.fh, 1000, "written-through-a-copy-up", 25, FILE_SYNC);
	if (!ok("WRITE FILE_SYNC copy.bin", &w))
		return false;
	if (w.committed != FILE_SYNC || !w.attrs || w.fileid != l.fileid)
		return failed("CRASH FAIL copyup: committed %u, fileid %" PRIu64
			      " -> %" PRIu64,
			      w.committed, l.fileid, w.fileid);
	save_obj("copyup", path, &l.fh);
	return true;
}

/* deep: handles of names never seen before, then only the syncer's period. */
static void phase1_deep(void)
{
	struct res f = walk(LONE_DIR "/deep.bin"), d = walk(LONE_DIR);

	if (!ok("LOOKUP deep.bin", &f) || !ok("LOOKUP " LONE_DIR, &d))
		return;
	save_obj("deep", LONE_DIR "/deep.bin", &f.fh);
	save_obj("deepdir", LONE_DIR, &d.fh);
	printf("CRASH STEP deep: handles given out; 1.5 s without a sync request\n");
	usleep(1500 * 1000);
}

/* The namespace changes back to back, then their SAVE lines from what the
 * replies and the reads before them said: the crash follows the last reply
 * within milliseconds. */
static bool phase2_namespace(void)
{
	struct res old = walk("old.txt"), ch = walk("chmod.txt"),
		   src = walk("linksrc.txt");
	struct res fresh, dir, sym, r[5];
	uint64_t oldsum, chsum, srcsum;

	if (!ok("LOOKUP old.txt", &old) || !ok("LOOKUP chmod.txt", &ch) ||
	    !ok("LOOKUP linksrc.txt", &src) || read_sum(&old.fh, &oldsum) ||
	    read_sum(&ch.fh, &chsum) || read_sum(&src.fh, &srcsum))
		return failed("CRASH FAIL phase 2: the lower files cannot be read");
	fresh = make(&root, "fresh.bin", false);
	dir = make(&root, "newdir", true);
	sym = symlink_in(&root, "sym", "fresh.bin");
	r[0] = link_in(&src.fh, &root, "linked.txt");
	r[1] = rename_in(&root, "old.txt", "moved.txt");
	r[2] = remove_in(&root, "gone.txt");
	r[3] = rmdir_in(&root, "rmme");
	r[4] = chmod_fh(&ch.fh, 0600);
	if (!ok("CREATE fresh.bin", &fresh) || !ok("MKDIR newdir", &dir) ||
	    !ok("SYMLINK sym", &sym) || !ok("LINK linked.txt", &r[0]) ||
	    !ok("RENAME old.txt", &r[1]) || !ok("REMOVE gone.txt", &r[2]) ||
	    !ok("RMDIR rmme", &r[3]) || !ok("SETATTR chmod.txt", &r[4]))
		return false;
	if (!fresh.attrs || !dir.attrs || !sym.attrs)
		return failed("CRASH FAIL phase 2: a reply without attributes");
	print_save("fresh", "fresh.bin", &fresh.fh, &fresh, FNV_START);
	print_save("newdir", "newdir", &dir.fh, &dir, FNV_START);
	print_save("sym", "sym", &sym.fh, &sym, FNV_START);
	print_save("linked", "linked.txt", &src.fh, &src, srcsum);
	print_save("moved", "moved.txt", &old.fh, &old, oldsum);
	ch.mode = 0600;
	print_save("chmod", "chmod.txt", &ch.fh, &ch, chsum);
	printf("CRASH SAVE absent old old.txt\n");
	printf("CRASH SAVE absent gone gone.txt\n");
	printf("CRASH SAVE absent rmme rmme\n");
	return true;
}

static int mount_root(int mport)
{
	int st = nfs_raw_mnt(mport, "/", &root);

	if (st != MNT3_OK || !root.len) {
		printf("CRASH FAIL MNT /: status %d\n", st);
		return -1;
	}
	return 0;
}

static void crash_now(void)
{
	int fd = open("/proc/sysrq-trigger", O_WRONLY);

	printf("CRASH STEP crashing the kernel now\n");
	if (fd >= 0 && write(fd, "c", 1) == 1)
		pause(); /* not reached */
	printf("CRASH FAIL sysrq c: %s\n", strerror(errno));
	failures++;
}

int main(int argc, char **argv)
{
	int phase;

	if (argc < 5 || argc > 6 || (argc == 6 && strcmp(argv[5], "--crash"))) {
		fprintf(
		    stderr,
		    "usage: crash_client PHASE NFS_PORT MOUNT_PORT SAVED [--crash]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	phase = atoi(argv[1]);
	if (mount_root(atoi(argv[3])))
		return 1;
	nfs = nfs_raw_connect(atoi(argv[2]), NFS_PROGRAM, NFS_V3);
	if (!nfs) {
		printf("CRASH FAIL connect to NFS port %s\n", argv[2]);
		return 1;
	}
	check_saved(argv[4]);
	printf("CRASH STEP checks done: %d failed; phase %d\n", failures, phase);
	if (phase == 1) {
		phase1_created();
		phase1_copyup();
		phase1_deep();
	} else if (phase == 2)
		phase2_namespace();
	if (argc == 6)
		crash_now();
	rpc_destroy_context(nfs);
	printf("CRASH RESULT %s (%d failed)\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
