/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_rpc.c - feeds untrusted bytes to the real decode-and-dispatch path.
 *
 * The first input byte chooses the entry point: even, the rest is one RPC
 * call record handed to rpc_process (call header, credentials, argument
 * decoding, every NFSv3, MOUNT, NLM, NSM and portmapper handler); odd, the rest is a TCP
 * byte stream fed to the record-marking reader, in chunks whose sizes come from the
 * stream itself.  The server serves one writable union over temp dirs, made once per
 * process, so handlers touch nothing outside it.
 *
 * File handles carry a MAC keyed with a secret drawn when the state dir is
 * made, so no corpus file can hold a valid one.  Instead a 32-byte run of 'H'
 * whose last byte is a digit D is replaced, before dispatch, with the real
 * handle of object D (0 the root, 1 "a", 2 "d", 3 "d/b"): seeds reach the
 * handlers, and mutations around the placeholder keep reaching them.
 */
#define _GNU_SOURCE
#include <ftw.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FH_PLACEHOLDER_LEN 32
#define FH_OBJECTS	   4

static struct srv_daemon fuzz_srv_d;
static struct sockaddr_storage fuzz_peer;
static char fuzz_root[] = "/tmp/fuzz_rpc.XXXXXX";
static uint8_t fuzz_fh[FH_OBJECTS][UN_FH_MAX];
static size_t fuzz_fh_len[FH_OBJECTS];

static void make_dir(const char *root, const char *rel)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", root, rel);
	if (mkdir(p, 0755) < 0) {
		perror(p);
		abort();
	}
}

static void make_file(const char *root, const char *rel, const char *text)
{
	char p[512];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", root, rel);
	f = fopen(p, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		perror(p);
		abort();
	}
}

/* A small union: two lowers with an overlapping directory, an upper. */
static void make_layers(const char *root)
{
	static const char *dirs[] = {"lower1", "lower2",   "upper",    "work",
				     "state",  "lower1/d", "lower2/d", "lower2/d/e"};

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		make_dir(root, dirs[i]);
	make_file(root, "lower1/a", "top\n");
	make_file(root, "lower2/a", "hidden\n");
	make_file(root, "lower2/d/b", "bee\n");
	make_file(root, "lower1/d/c", "sea\n");
}

/* Mints the handles the placeholders stand for. */
static void mint_handles(void)
{
	static const char *paths[FH_OBJECTS][2] = {
	    {NULL, NULL}, {"a", NULL}, {"d", NULL}, {"d", "b"}};
	struct un_export *ux = fuzz_srv_d.srv.exports[0]->ux;

	for (size_t i = 0; i < FH_OBJECTS; i++) {
		struct un_obj *o, *next;

		if (un_root(ux, &o) < 0)
			abort();
		for (size_t c = 0; c < 2 && paths[i][c]; c++) {
			if (un_lookup(ux, o, paths[i][c], &next) < 0)
				abort();
			un_obj_put(o);
			o = next;
		}
		fuzz_fh_len[i] = un_handle_encode(ux, un_obj_id(o), fuzz_fh[i]);
		un_obj_put(o);
	}
}

static int remove_entry(const char *path, const struct stat *st, int flag,
			struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void fuzz_cleanup(void)
{
	srv_daemon_close(&fuzz_srv_d);
	nftw(fuzz_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char *root = fuzz_root;
	static char l1[64], l2[64], up[64], wk[64], st[64];
	char *lowers[] = {l1, l2};
	struct srv_export_opts eo = {
	    .path = "/", .upperdir = up, .workdir = wk, .lowerdirs = lowers, .nlower = 2};
	struct srv_opts o = {.state_dir = st, .exports = &eo, .nexports = 1};
	struct sockaddr_in *sin = (struct sockaddr_in *)&fuzz_peer;
	char err[512];

	(void)argc;
	(void)argv;
	if (!mkdtemp(root))
		abort();
	make_layers(root);
	snprintf(l1, sizeof(l1), "%s/lower1", root);
	snprintf(l2, sizeof(l2), "%s/lower2", root);
	snprintf(up, sizeof(up), "%s/upper", root);
	snprintf(wk, sizeof(wk), "%s/work", root);
	snprintf(st, sizeof(st), "%s/state", root);
	o.cfg.nthreads = 1;
	if (srv_daemon_open(&fuzz_srv_d, &o, err, sizeof(err)) < 0) {
		fprintf(stderr, "fuzz_rpc: %s\n", err);
		abort();
	}
	/* the built-in portmapper answers, as when it holds port 111 */
	rpc_svc_bound(fuzz_srv_d.svc, "nfs", 2049);
	rpc_svc_bound(fuzz_srv_d.svc, "mount", 20048);
	rpc_svc_bound(fuzz_srv_d.svc, "nlm", 4045);
	rpc_svc_bound(fuzz_srv_d.svc, "nsm", 4046);
	rpc_svc_bound(fuzz_srv_d.svc, "portmapper", 111);
	sin->sin_family = AF_INET;
	sin->sin_port = htons(700);
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	rpc_log_level = RPC_LOG_ERR; /* every rejected call logs at info */
	mint_handles();
	atexit(fuzz_cleanup);
	return 0;
}

/* Replaces every handle placeholder in BUF[0..len) with a real handle (of the
 * same 32-byte length: handles are exactly that long). */
static void fill_handles(uint8_t *buf, size_t len)
{
	for (size_t i = 0; i + FH_PLACEHOLDER_LEN <= len; i++) {
		size_t run = 0;
		unsigned obj;

		while (run < FH_PLACEHOLDER_LEN - 1 && buf[i + run] == 'H')
			run++;
		obj = (unsigned)buf[i + run] - '0';
		if (run < FH_PLACEHOLDER_LEN - 1 || obj >= FH_OBJECTS ||
		    fuzz_fh_len[obj] != FH_PLACEHOLDER_LEN)
			continue;
		memcpy(buf + i, fuzz_fh[obj], FH_PLACEHOLDER_LEN);
		i += FH_PLACEHOLDER_LEN - 1;
	}
}

static void fuzz_call(const uint8_t *data, size_t size)
{
	struct rpc_buf reply = {0};
	/* An exact-size copy, so reads past the input still trip ASan. */
	uint8_t *call = malloc(size ? size : 1);

	if (!call)
		abort();
	if (size)
		memcpy(call, data, size);
	fill_handles(call, size);
	rpc_process(fuzz_srv_d.svc, call, size, &fuzz_peer, sizeof(struct sockaddr_in),
		    IPPROTO_TCP, &reply);
	rpc_buf_free(&reply);
	free(call);
}

/* Feeds DATA to the record reader in chunks of 1..256 bytes, handing every
 * complete record to the dispatcher as the transport does. */
static void fuzz_stream(const uint8_t *data, size_t size)
{
	struct rpc_rm rm;
	struct rpc_buf rec = {0};
	enum rpc_rm_status st;
	size_t pos = 0;

	rpc_rm_init(&rm, 64 * 1024);
	while (pos < size) {
		size_t chunk = 1 + data[pos] % 256, used;

		if (chunk > size - pos)
			chunk = size - pos;
		used = rpc_rm_feed(&rm, data + pos, chunk, &st);
		pos += used ? used : chunk;
		if (st == RPC_RM_TOOBIG)
			break;
		if (st == RPC_RM_RECORD) {
			rpc_rm_take(&rm, &rec);
			fuzz_call(rec.data, rec.len);
			rpc_buf_free(&rec);
		}
	}
	rpc_rm_free(&rm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] & 1)
		fuzz_stream(data + 1, size - 1);
	else
		fuzz_call(data + 1, size - 1);
	return 0;
}
