/* SPDX-License-Identifier: Apache-2.0 */
/* test_srv_args.c - the command line and the config file (args.c), including
 * the example etc/union-nfsd.conf.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <libgen.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "args.h"

static char errbuf[1024];

/* Parses a NULL-terminated list of arguments (argv[0] is added). */
static enum srv_args_result parse(struct srv_opts *o, ...)
{
	char *argv[32] = {"union-nfsd"};
	int argc = 1;
	va_list ap;
	enum srv_args_result res;

	va_start(ap, o);
	while ((argv[argc] = va_arg(ap, char *)) != NULL)
		argc++;
	va_end(ap);
	errbuf[0] = '\0';
	res = srv_args_parse(argc, argv, o, errbuf, sizeof(errbuf));
	return res;
}

static void expect_error(const char *needle, enum srv_args_result res, struct srv_opts *o)
{
	assert_int_equal(res, SRV_ARGS_ERROR);
	if (!strstr(errbuf, needle))
		fail_msg("error '%s' does not mention '%s'", errbuf, needle);
	assert_null(strchr(errbuf, '\n'));
	srv_opts_free(o);
}

static void test_minimal(void **state)
{
	struct srv_opts o;

	(void)state;
	assert_int_equal(parse(&o, "--lowerdir=/a:/b", NULL), SRV_ARGS_RUN);
	assert_int_equal(o.nexports, 1);
	assert_string_equal(o.exports[0].path, "/");
	assert_int_equal(o.exports[0].nlower, 2);
	assert_string_equal(o.exports[0].lowerdirs[0], "/a");
	assert_string_equal(o.exports[0].lowerdirs[1], "/b");
	assert_null(o.exports[0].upperdir);
	assert_int_equal(o.cfg.nfs_port, 2049);
	assert_int_equal(o.cfg.mount_port, 20048);
	assert_string_equal(o.state_dir, "/var/lib/union-nfsd");
	assert_true(o.cfg.nthreads >= 32 && o.cfg.nthreads <= 128);
	assert_true(o.cfg.register_rpcbind);
	assert_true(o.cfg.portmapper);
	assert_false(o.foreground);
	assert_null(o.cfg.bind_addr);
	assert_int_equal(o.cfg.max_conns, 0); /* derived by the loop */
	assert_int_equal(o.cfg.max_conns_per_addr, 0);
	assert_int_equal(o.cfg.idle_timeout, 360);
	srv_opts_free(&o);
}

static void test_all_flags(void **state)
{
	struct srv_opts o;

	(void)state;
	assert_int_equal(parse(&o, "--lowerdir", "/l\\:1:/l2", "--upperdir=/u",
			       "--workdir=/w", "--export=/data", "--nfs-port=0",
			       "--mount-port=0", "--bind=127.0.0.1",
			       "--state-dir=/tmp/st", "--threads=3", "--log-level=debug",
			       "--max-connections=300", "--max-connections-per-address=7",
			       "--idle-timeout=0", "--client-unions-memory=3G",
			       "--foreground", "--no-rpcbind", "--no-portmapper", NULL),
			 SRV_ARGS_RUN);
	assert_string_equal(o.exports[0].lowerdirs[0], "/l:1");
	assert_string_equal(o.exports[0].lowerdirs[1], "/l2");
	assert_string_equal(o.exports[0].upperdir, "/u");
	assert_string_equal(o.exports[0].workdir, "/w");
	assert_string_equal(o.exports[0].path, "/data");
	assert_int_equal(o.cfg.nfs_port, 0);
	assert_int_equal(o.cfg.mount_port, 0);
	assert_string_equal(o.cfg.bind_addr, "127.0.0.1");
	assert_string_equal(o.state_dir, "/tmp/st");
	assert_int_equal(o.cfg.nthreads, 3);
	assert_int_equal(o.cfg.max_conns, 300);
	assert_int_equal(o.cfg.max_conns_per_addr, 7);
	assert_int_equal(o.cfg.idle_timeout, 0);
	assert_int_equal(o.cfg.client_unions_memory, 3ull << 30);
	assert_int_equal(o.log_level, RPC_LOG_DEBUG);
	assert_true(o.foreground);
	assert_false(o.cfg.register_rpcbind);
	assert_false(o.cfg.portmapper);
	srv_opts_free(&o);
}

static void test_bad_flags(void **state)
{
	struct srv_opts o;

	(void)state;
	expect_error("unknown option '--frob'",
		     parse(&o, "--lowerdir=/a", "--frob", NULL), &o);
	expect_error("missing --lowerdir", parse(&o, "--nfs-port=1", NULL), &o);
	expect_error("--nfs-port", parse(&o, "--lowerdir=/a", "--nfs-port=70000", NULL),
		     &o);
	expect_error("--mount-port", parse(&o, "--lowerdir=/a", "--mount-port=x", NULL),
		     &o);
	expect_error("--nfs-port", parse(&o, "--lowerdir=/a", "--nfs-port=", NULL), &o);
	expect_error("--nfs-port", parse(&o, "--lowerdir=/a", "--nfs-port=-1", NULL), &o);
	expect_error("--threads", parse(&o, "--lowerdir=/a", "--threads=0", NULL), &o);
	expect_error("--max-connections",
		     parse(&o, "--lowerdir=/a", "--max-connections=-5", NULL), &o);
	expect_error("--idle-timeout",
		     parse(&o, "--lowerdir=/a", "--idle-timeout=6m", NULL), &o);
	expect_error("--client-unions-memory",
		     parse(&o, "--lowerdir=/a", "--client-unions-memory=1MB", NULL), &o);
	expect_error("--client-unions-memory",
		     parse(&o, "--lowerdir=/a", "--client-unions-memory=k", NULL), &o);
	expect_error("--client-unions-memory",
		     parse(&o, "--lowerdir=/a", "--client-unions-memory=-1", NULL), &o);
	expect_error(
	    "--client-unions-memory",
	    parse(&o, "--lowerdir=/a", "--client-unions-memory=99999999999T", NULL), &o);
	expect_error("--log-level", parse(&o, "--lowerdir=/a", "--log-level=loud", NULL),
		     &o);
	expect_error("--bind 'localhost'",
		     parse(&o, "--lowerdir=/a", "--bind=localhost", NULL), &o);
	expect_error("--upperdir needs --workdir",
		     parse(&o, "--lowerdir=/a", "--upperdir=/u", NULL), &o);
	expect_error("--workdir needs --upperdir",
		     parse(&o, "--lowerdir=/a", "--workdir=/w", NULL), &o);
	expect_error("need --lowerdir", parse(&o, "--upperdir=/u", "--workdir=/w", NULL),
		     &o);
	expect_error("empty layer", parse(&o, "--lowerdir=/a::/b", NULL), &o);
	expect_error("empty layer", parse(&o, "--lowerdir=", NULL), &o);
	expect_error("needs a value", parse(&o, "--lowerdir=/a", "--nfs-port", NULL), &o);
	expect_error("unexpected argument 'extra'",
		     parse(&o, "--lowerdir=/a", "extra", NULL), &o);
	expect_error("not absolute", parse(&o, "--lowerdir=/a", "--export=data", NULL),
		     &o);
	expect_error("twice", parse(&o, "--lowerdir=/a", "--lowerdir=/b", NULL), &o);
	expect_error("nope.conf", parse(&o, "--config=/nonexistent/nope.conf", NULL), &o);
	expect_error("--metrics 'localhost:9311'",
		     parse(&o, "--lowerdir=/a", "--metrics=localhost:9311", NULL), &o);
	expect_error("--metrics", parse(&o, "--lowerdir=/a", "--metrics=127.0.0.1", NULL),
		     &o);
	expect_error("--metrics",
		     parse(&o, "--lowerdir=/a", "--metrics=127.0.0.1:65536", NULL), &o);
	expect_error("--metrics", parse(&o, "--lowerdir=/a", "--metrics=::1:9311", NULL),
		     &o);
}

static void test_help_version(void **state)
{
	struct srv_opts o;

	(void)state;
	assert_int_equal(parse(&o, "--version", NULL), SRV_ARGS_EXIT);
	srv_opts_free(&o);
	assert_int_equal(parse(&o, "--help", NULL), SRV_ARGS_EXIT);
	srv_opts_free(&o);
}

/* ---- config files ---- */

static char conf_path[64];

static void write_conf(const char *text)
{
	int fd;

	snprintf(conf_path, sizeof(conf_path), "/tmp/test_srv_args.XXXXXX");
	fd = mkstemp(conf_path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static enum srv_args_result parse_conf(struct srv_opts *o, const char *text,
				       const char *extra)
{
	char flag[96];
	enum srv_args_result res;

	write_conf(text);
	snprintf(flag, sizeof(flag), "--config=%s", conf_path);
	res = parse(o, flag, extra, NULL);
	unlink(conf_path);
	return res;
}

/* --metrics: off unless given; an IPv4 address or a bracketed IPv6 one. */
static void test_metrics_flag(void **state)
{
	struct srv_opts o;
	struct sockaddr_storage ss;

	(void)state;
	assert_int_equal(parse(&o, "--lowerdir=/a", NULL), SRV_ARGS_RUN);
	assert_null(o.metrics);
	srv_opts_free(&o);
	assert_int_equal(parse(&o, "--lowerdir=/a", "--metrics=127.0.0.1:9311", NULL),
			 SRV_ARGS_RUN);
	assert_string_equal(o.metrics, "127.0.0.1:9311");
	srv_opts_free(&o);
	assert_int_equal(parse(&o, "--lowerdir=/a", "--metrics=[::1]:0", NULL),
			 SRV_ARGS_RUN);
	assert_string_equal(o.metrics, "[::1]:0");
	srv_opts_free(&o);
	assert_true(rpc_addr_port_parse("[::1]:9311", &ss));
	assert_int_equal(ss.ss_family, AF_INET6);
	assert_int_equal(ntohs(((struct sockaddr_in6 *)&ss)->sin6_port), 9311);
	assert_true(rpc_addr_port_parse("10.1.2.3:80", &ss));
	assert_int_equal(ss.ss_family, AF_INET);
	assert_false(rpc_addr_port_parse(":80", NULL));
	assert_false(rpc_addr_port_parse("10.1.2.3:", NULL));
	assert_false(rpc_addr_port_parse("10.1.2.3:8x", NULL));
	/* the config key, and the flag over it */
	assert_int_equal(parse_conf(&o,
				    "[server]\nmetrics = 127.0.0.1:9311\n[export]\n"
				    "lowerdir = /a\n",
				    NULL),
			 SRV_ARGS_RUN);
	assert_string_equal(o.metrics, "127.0.0.1:9311");
	srv_opts_free(&o);
	assert_int_equal(parse_conf(&o,
				    "[server]\nmetrics = 127.0.0.1:9311\n[export]\n"
				    "lowerdir = /a\n",
				    "--metrics=[::1]:9312"),
			 SRV_ARGS_RUN);
	assert_string_equal(o.metrics, "[::1]:9312");
	srv_opts_free(&o);
}

static void test_config(void **state)
{
	struct srv_opts o;

	(void)state;
	assert_int_equal(parse_conf(&o,
				    "; comment\n"
				    "[server]\n"
				    "nfs-port = 3049\n"
				    "mount-port = 0\n"
				    "  threads = 5\n"
				    "max-connections = 900\n"
				    "idle-timeout = 60\n"
				    "client-unions-memory = 512M\n"
				    "bind = ::1\n"
				    "state-dir = /tmp/s\n"
				    "key-file = /etc/k\n"
				    "log-level = warn\n"
				    "portmapper = no\n"
				    "[export]\n"
				    "lowerdir = /x:/y\n"
				    "[export]\n"
				    "path = /two\n"
				    "lowerdir = /z\n"
				    "upperdir = /u\n"
				    "workdir = /w\n"
				    "fsid = image-7\n",
				    "--nfs-port=4049"),
			 SRV_ARGS_RUN);
	assert_int_equal(o.cfg.nfs_port, 4049); /* the flag wins */
	assert_int_equal(o.cfg.max_conns, 900);
	assert_int_equal(o.cfg.idle_timeout, 60);
	assert_int_equal(o.cfg.client_unions_memory, 512u << 20);
	assert_int_equal(o.cfg.mount_port, 0);
	assert_int_equal(o.cfg.nthreads, 5);
	assert_string_equal(o.cfg.bind_addr, "::1");
	assert_string_equal(o.state_dir, "/tmp/s");
	assert_string_equal(o.key_file, "/etc/k");
	assert_int_equal(o.log_level, RPC_LOG_WARN);
	assert_false(o.cfg.portmapper);
	assert_int_equal(o.nexports, 2);
	assert_string_equal(o.exports[0].path, "/");
	assert_int_equal(o.exports[0].nlower, 2);
	assert_string_equal(o.exports[1].path, "/two");
	assert_string_equal(o.exports[1].lowerdirs[0], "/z");
	assert_string_equal(o.exports[1].upperdir, "/u");
	assert_string_equal(o.exports[1].workdir, "/w");
	assert_null(o.exports[0].fsid);
	assert_string_equal(o.exports[1].fsid, "image-7");
	srv_opts_free(&o);
}

static void test_config_long_line(void **state)
{
	char text[4096], list[3000];
	struct srv_opts o;
	size_t n = 0;

	(void)state;
	for (int i = 0; i < 200; i++)
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s/layer%03d",
				      i ? ":" : "", i);
	snprintf(text, sizeof(text), "[export]\nlowerdir = %s\npath = /p\n", list);
	assert_int_equal(parse_conf(&o, text, NULL), SRV_ARGS_RUN);
	assert_int_equal(o.nexports, 1);
	assert_int_equal(o.exports[0].nlower, 200);
	assert_string_equal(o.exports[0].lowerdirs[199], "/layer199");
	assert_string_equal(o.exports[0].path, "/p");
	srv_opts_free(&o);
}

/* Errors name the file and the line. */
static void expect_conf_error(const char *text, const char *needle)
{
	struct srv_opts o;
	char want[256];

	assert_int_equal(parse_conf(&o, text, NULL), SRV_ARGS_ERROR);
	snprintf(want, sizeof(want), "%s:%s", conf_path, needle);
	if (strcmp(errbuf, want) != 0 && !strstr(errbuf, want))
		fail_msg("error '%s', wanted '%s'", errbuf, want);
	srv_opts_free(&o);
}

static void test_config_errors(void **state)
{
	(void)state;
	expect_conf_error("[server]\nnfs-port = 1\ncolour = red\n",
			  "3: unknown key 'colour' in [server]");
	expect_conf_error("[server]\n\n[client]\nx = 1\n", "4: unknown section [client]");
	expect_conf_error("x = 1\n", "1: key outside a section");
	expect_conf_error("[server]\nnfs-port = 99999\n", "2: bad nfs-port '99999'");
	expect_conf_error("[server]\nthis is not ini\n", "2: syntax error");
	expect_conf_error("[server]\nportmapper = maybe\n", "2: bad portmapper 'maybe'");
	expect_conf_error("[export]\nlowerdir = /a\n\n[export]\npath = /b\n",
			  "4: export needs a lowerdir");
	expect_conf_error("[export]\nlowerdir = /a\nupperdir = /u\n",
			  "1: upperdir needs a workdir");
	expect_conf_error("[export]\nlowerdir = /a\nlowerdir = /b\n",
			  "3: lowerdir given twice");
	expect_conf_error("[export]\nlowerdir = /a:/b:/a\n",
			  "1: lowerdir /a is in the stack twice");
	expect_conf_error("[export]\nlowerdir = /a\nflavour = x\n",
			  "3: unknown key 'flavour' in [export]");
	expect_conf_error("[export]\nlowerdir = /a\nfsid =\n", "3: empty fsid");
}

static void test_example_config(void **state)
{
	char src[PATH_MAX], path[PATH_MAX + 64], flag[PATH_MAX + 80];
	struct srv_opts o;

	(void)state;
	snprintf(src, sizeof(src), "%s", __FILE__);
	snprintf(path, sizeof(path), "%s/../../etc/union-nfsd.conf", dirname(src));
	snprintf(flag, sizeof(flag), "--config=%s", path);
	if (parse(&o, flag, NULL) != SRV_ARGS_RUN)
		fail_msg("%s: %s", path, errbuf);
	assert_int_equal(o.cfg.nfs_port, 2049);
	assert_int_equal(o.cfg.mount_port, 20048);
	assert_int_equal(o.nexports, 3);
	assert_string_equal(o.exports[0].path, "/");
	assert_int_equal(o.exports[0].nlower, 2);
	assert_string_equal(o.exports[1].path, "/scratch");
	assert_non_null(o.exports[1].upperdir);
	/* the thin-client export: an upper and a work dir per client */
	assert_string_equal(o.exports[2].path, "/netboot");
	assert_true(srv_is_template(o.exports[2].upperdir));
	assert_true(srv_is_template(o.exports[2].workdir));
	for (size_t i = 0; i < o.nexports; i++) {
		struct srv_clients c;

		assert_non_null(o.exports[i].clients);
		assert_int_equal(
		    srv_clients_parse(o.exports[i].clients, &c, errbuf, sizeof(errbuf)),
		    0);
		srv_clients_free(&c);
	}
	srv_opts_free(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_minimal),	  cmocka_unit_test(test_all_flags),
	    cmocka_unit_test(test_bad_flags),	  cmocka_unit_test(test_help_version),
	    cmocka_unit_test(test_config),	  cmocka_unit_test(test_config_long_line),
	    cmocka_unit_test(test_config_errors), cmocka_unit_test(test_example_config),
	    cmocka_unit_test(test_metrics_flag),
	};

	return cmocka_run_group_tests_name("srv_args", tests, NULL, NULL);
}
