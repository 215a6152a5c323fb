/* SPDX-License-Identifier: Apache-2.0 */
/* fixture_nfs3.c - the NFSv3 handler tests' fixture (test_nfs3.h). */
#include "test_nfs3.h"

#include <arpa/inet.h>

char tmp_root[64], upper[128], work[128], lower0[128], lower1[128], state_dir[128];
struct srv srv;
struct rpc_arena *arena;
nfs_fh3 root_fh;
uint8_t root_fh_bytes[UN_FH_MAX];

/* The caller of every request: this host, from a reserved port, which the
 * export's default rule (SRV_LOOPBACK_CLIENTS) admits as itself. */
static struct sockaddr_in caller;

void put_dir(const char *dir, const char *nm, mode_t mode)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", dir, nm);
	assert_int_equal(mkdir(p, mode), 0);
	assert_int_equal(chmod(p, mode), 0);
}

/* Makes TMP_ROOT (/tmp/PREFIX.XXXXXX) and the layer dirs in it (upper and work
 * only if WRITABLE; their paths are set either way), lets make_layers fill the
 * lower ones, and opens the server with umask 022 (what the tests' modes
 * assume).  0, or -1 with a line on stderr; group_teardown cleans up either
 * way. */
int nfs3_fx_open(const char *prefix, bool writable, void (*make_layers)(void))
{
	char err[256] = "";
	char *lowers[2] = {lower0, lower1};
	struct srv_export_opts eo = {.path = "/",
				     .upperdir = writable ? upper : NULL,
				     .workdir = writable ? work : NULL,
				     .lowerdirs = lowers,
				     .nlower = 2};
	struct srv_opts o = {.state_dir = state_dir, .exports = &eo, .nexports = 1};
	struct un_obj *root;

	snprintf(tmp_root, sizeof(tmp_root), "/tmp/%s.XXXXXX", prefix);
	if (!mkdtemp(tmp_root)) {
		perror(tmp_root);
		tmp_root[0] = '\0';
		return -1;
	}
	snprintf(upper, sizeof(upper), "%s/upper", tmp_root);
	snprintf(work, sizeof(work), "%s/work", tmp_root);
	snprintf(lower0, sizeof(lower0), "%s/lower0", tmp_root);
	snprintf(lower1, sizeof(lower1), "%s/lower1", tmp_root);
	snprintf(state_dir, sizeof(state_dir), "%s/state", tmp_root);
	if ((writable && (mkdir(upper, 0755) || mkdir(work, 0755))) ||
	    mkdir(lower0, 0755) || mkdir(lower1, 0755) || mkdir(state_dir, 0700)) {
		perror("mkdir");
		return -1;
	}
	make_layers();
	umask(022);
	caller.sin_family = AF_INET;
	caller.sin_port = htons(700);
	caller.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

	if (srv_open(&srv, &o, err, sizeof(err)) < 0) {
		fprintf(stderr, "srv_open: %s\n", err);
		return -1;
	}
	if (un_root(srv.exports[0]->ux, &root))
		return -1;
	root_fh.data.data_len =
	    (u_int)un_handle_encode(srv.exports[0]->ux, un_obj_id(root), root_fh_bytes);
	root_fh.data.data_val = (char *)root_fh_bytes;
	un_obj_put(root);
	return 0;
}

int group_teardown(void **state)
{
	(void)state;
	srv_close(&srv);
	if (tmp_root[0])
		t_rm_rf(tmp_root);
	return 0;
}

int test_setup(void **state)
{
	(void)state;
	arena = rpc_arena_new();
	return arena ? 0 : -1;
}

int test_teardown(void **state)
{
	(void)state;
	rpc_arena_free(arena);
	arena = NULL;
	return 0;
}

/* A request of the AUTH_SYS caller UID:GID over TCP, with the test's arena. */
struct test_req req_as(uid_t uid, gid_t gid)
{
	struct test_req r = {
	    .rpc = {.cred = {.flavor = AUTH_SYS, .uid = uid, .gid = gid},
		    .peer = (const struct sockaddr_storage *)&caller,
		    .peerlen = sizeof(caller),
		    .peer_addr = "127.0.0.1",
		    .proto = IPPROTO_TCP,
		    .prog = NFS_PROGRAM,
		    .vers = NFS_V3,
		    .arena = arena},
	    .srv = {.srv = &srv},
	};
	return r;
}

struct rpc_req *test_req_tie(struct test_req *t)
{
	t->rpc.ctx = &t->srv;
	t->srv.rpc = &t->rpc;
	return &t->rpc;
}

bool test_req_admit(struct test_req *t, const struct rpc_proc *p, void *args, void *res)
{
	if (!p->has_fh)
		return true;
	return nfs3_program.admit(&t->rpc, rpc_proc_fh(p, args), res);
}
