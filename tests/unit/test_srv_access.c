/* SPDX-License-Identifier: Apache-2.0 */
/* test_srv_access.c - client rules (server/access.c): parsing, exports(5)
 * precedence, squashing, per-client dir templates, and how the config file
 * and --clients report their errors (server/args.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "args.h"

static struct sockaddr_storage v4(const char *addr, unsigned port)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)port);
	assert_int_equal(inet_pton(AF_INET, addr, &sin->sin_addr), 1);
	return ss;
}

static struct sockaddr_storage v6(const char *addr, unsigned port)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

	sin6->sin6_family = AF_INET6;
	sin6->sin6_port = htons((uint16_t)port);
	assert_int_equal(inet_pton(AF_INET6, addr, &sin6->sin6_addr), 1);
	return ss;
}

/* The spec of the rule of TEXT that admits ADDR (v4 or v6) named HOST, or
 * "-" when none does. */
static const char *who(const char *text, const char *addr, const char *host)
{
	static char spec[128];
	struct srv_clients c;
	struct sockaddr_storage ss = strchr(addr, ':') ? v6(addr, 700) : v4(addr, 700);
	const struct srv_client_rule *r;
	char err[256];

	assert_int_equal(srv_clients_parse(text, &c, err, sizeof(err)), 0);
	r = srv_clients_match(&c, &ss, host);
	snprintf(spec, sizeof(spec), "%s", r ? r->spec : "-");
	srv_clients_free(&c);
	return spec;
}

static void expect_parse_error(const char *text, const char *words)
{
	struct srv_clients c;
	char err[256] = "";

	assert_int_equal(srv_clients_parse(text, &c, err, sizeof(err)), -EINVAL);
	if (!strstr(err, words))
		fail_msg("'%s': error '%s' does not say '%s'", text, err, words);
}

static void test_parse_options(void **state)
{
	struct srv_clients c;
	char err[256];

	(void)state;
	assert_int_equal(srv_clients_parse("  10.0.0.0/8(rw,no_root_squash,insecure)\t"
					   "host.example.com *(anonuid=1000,anongid=99,"
					   "all_squash,sync,no_subtree_check)",
					   &c, err, sizeof(err)),
			 0);
	assert_int_equal(c.n, 3);
	assert_int_equal(c.rules[0].kind, SRV_MATCH_NET);
	assert_true(c.rules[0].opts.rw);
	assert_int_equal(c.rules[0].opts.squash, SRV_SQUASH_NONE);
	assert_false(c.rules[0].opts.secure);
	/* no options: exports(5)'s defaults */
	assert_int_equal(c.rules[1].kind, SRV_MATCH_NAME);
	assert_false(c.rules[1].opts.rw);
	assert_int_equal(c.rules[1].opts.squash, SRV_SQUASH_ROOT);
	assert_true(c.rules[1].opts.secure);
	assert_int_equal(c.rules[1].opts.anonuid, 65534);
	assert_int_equal(c.rules[2].kind, SRV_MATCH_ANY);
	assert_int_equal(c.rules[2].opts.squash, SRV_SQUASH_ALL);
	assert_int_equal(c.rules[2].opts.anonuid, 1000);
	assert_int_equal(c.rules[2].opts.anongid, 99);
	/* sync is the default and an option; async the other way */
	assert_true(c.rules[0].opts.sync);
	assert_true(c.rules[2].opts.sync);
	assert_true(c.need_name);
	assert_string_equal(c.rules[0].spec, "10.0.0.0/8");
	srv_clients_free(&c);
	/* later options win, as in exports(5) */
	assert_int_equal(srv_clients_parse("*(rw,ro)", &c, err, sizeof(err)), 0);
	assert_false(c.rules[0].opts.rw);
	assert_false(c.need_name);
	srv_clients_free(&c);
	assert_int_equal(
	    srv_clients_parse("::1(async) *(async,sync)", &c, err, sizeof(err)), 0);
	assert_false(c.rules[0].opts.sync);
	assert_true(c.rules[1].opts.sync);
	srv_clients_free(&c);
}

static void test_parse_errors(void **state)
{
	(void)state;
	expect_parse_error("", "no clients");
	expect_parse_error("10.0.0.1(rx)", "'rx'");
	expect_parse_error("10.0.0.1(rw,,ro)", "empty option");
	expect_parse_error("10.0.0.1(rw,)", "empty option");
	expect_parse_error("10.0.0.1(rw", "not closed");
	expect_parse_error("(rw)", "without a client");
	expect_parse_error("10.0.0.1 (rw)", "without a client");
	expect_parse_error("10.0.0.0/33", "bad client");
	expect_parse_error("10.0.0.0/x", "bad client");
	expect_parse_error("10.0.0.0/255.0.255.0", "bad client");
	expect_parse_error("::/129", "bad client");
	expect_parse_error("ho$t", "bad client");
	expect_parse_error("*(anonuid=-1)", "anonuid=-1");
	expect_parse_error("*(anonuid=4294967295)", "anonuid");
	expect_parse_error("*(anongid=)", "anongid=");
}

static void test_match_kinds(void **state)
{
	(void)state;
	assert_string_equal(who("10.1.2.3", "10.1.2.3", NULL), "10.1.2.3");
	assert_string_equal(who("10.1.2.3", "10.1.2.4", NULL), "-");
	assert_string_equal(who("10.0.0.0/8", "10.200.0.1", NULL), "10.0.0.0/8");
	assert_string_equal(who("10.0.0.0/8", "11.0.0.1", NULL), "-");
	assert_string_equal(who("10.1.0.0/255.255.0.0", "10.1.9.9", NULL),
			    "10.1.0.0/255.255.0.0");
	assert_string_equal(who("10.1.0.0/255.255.0.0", "10.2.9.9", NULL), "-");
	assert_string_equal(who("192.168.1.128/25", "192.168.1.200", NULL),
			    "192.168.1.128/25");
	assert_string_equal(who("192.168.1.128/25", "192.168.1.100", NULL), "-");
	assert_string_equal(who("0.0.0.0/0", "8.8.8.8", NULL), "0.0.0.0/0");
	/* a v4 client over a v6 socket is still the v4 client */
	assert_string_equal(who("10.0.0.0/8", "::ffff:10.9.9.9", NULL), "10.0.0.0/8");
	assert_string_equal(who("2001:db8::/32", "2001:db8:1::5", NULL), "2001:db8::/32");
	assert_string_equal(who("2001:db8::/32", "2001:db9::5", NULL), "-");
	assert_string_equal(who("::1", "::1", NULL), "::1");
	/* a v4 network is no v6 one */
	assert_string_equal(who("0.0.0.0/0", "2001:db8::1", NULL), "-");
	assert_string_equal(who("Host.Example.COM", "10.0.0.1", "host.example.com"),
			    "Host.Example.COM");
	assert_string_equal(who("host.example.com", "10.0.0.1", NULL), "-");
	assert_string_equal(who("*.example.com", "10.0.0.1", "a.b.example.com"),
			    "*.example.com");
	assert_string_equal(who("*.example.com", "10.0.0.1", "example.com"), "-");
	assert_string_equal(who("ws?.lan", "10.0.0.1", "ws7.lan"), "ws?.lan");
	assert_string_equal(who("*", "10.0.0.1", NULL), "*");
}

/* exports(5): host, then network, then pattern, then *, whatever the order
 * on the line; among rules of one kind the first written. */
static void test_match_precedence(void **state)
{
	const char *line = "* *.lab 10.0.0.0/8 10.1.0.0/16 lab1.lab 10.9.9.9";

	(void)state;
	assert_string_equal(who(line, "10.9.9.9", "lab1.lab"), "lab1.lab");
	assert_string_equal(who(line, "10.9.9.9", NULL), "10.9.9.9");
	assert_string_equal(who(line, "10.1.2.3", "lab2.lab"), "10.0.0.0/8");
	assert_string_equal(who(line, "11.1.2.3", "lab2.lab"), "*.lab");
	assert_string_equal(who(line, "11.1.2.3", "x.org"), "*");
}

static void test_squash(void **state)
{
	struct srv_client_opts o = {
	    .squash = SRV_SQUASH_ROOT, .anonuid = 7, .anongid = 8};
	struct rpc_cred root = {
	    .flavor = AUTH_SYS, .uid = 0, .gid = 0, .ngroups = 2, .groups = {0, 5}};
	struct rpc_cred user = {
	    .flavor = AUTH_SYS, .uid = 1000, .gid = 100, .ngroups = 1, .groups = {0}};
	struct rpc_cred none = {.flavor = AUTH_NONE, .uid = 65534, .gid = 65534};
	struct rpc_cred c;

	(void)state;
	c = root;
	srv_cred_squash(&c, &o);
	assert_int_equal(c.uid, 7);
	assert_int_equal(c.gid, 8);
	assert_int_equal(c.ngroups, 2);
	assert_int_equal(c.groups[0], 8); /* group 0 is root's too */
	assert_int_equal(c.groups[1], 5);
	c = user;
	srv_cred_squash(&c, &o);
	assert_int_equal(c.uid, 1000);
	assert_int_equal(c.gid, 100);
	assert_int_equal(c.groups[0], 8);
	c = none;
	srv_cred_squash(&c, &o); /* AUTH_NONE is always the anonymous ids */
	assert_int_equal(c.uid, 7);
	assert_int_equal(c.gid, 8);

	o.squash = SRV_SQUASH_ALL;
	c = user;
	srv_cred_squash(&c, &o);
	assert_int_equal(c.uid, 7);
	assert_int_equal(c.gid, 8);
	assert_int_equal(c.ngroups, 0);

	o.squash = SRV_SQUASH_NONE;
	c = root;
	srv_cred_squash(&c, &o);
	assert_int_equal(c.uid, 0);
	assert_int_equal(c.gid, 0);
	assert_int_equal(c.groups[0], 0);
}

static void test_ports(void **state)
{
	struct sockaddr_storage a = v4("127.0.0.1", 1023), b = v4("127.0.0.1", 1024);
	struct sockaddr_storage c = v6("::1", 600), d = v4("127.0.0.1", 0);

	(void)state;
	assert_true(srv_peer_port_reserved(&a));
	assert_false(srv_peer_port_reserved(&b));
	assert_true(srv_peer_port_reserved(&c));
	assert_false(srv_peer_port_reserved(&d));
}

static void test_templates(void **state)
{
	char out[64];

	(void)state;
	assert_true(srv_is_template("/u/%a"));
	assert_true(srv_is_template("/u/%h.up"));
	assert_false(srv_is_template("/u/%%a"));
	assert_false(srv_is_template("/u"));
	assert_false(srv_is_template(NULL));
	assert_true(srv_template_expand("/u/%a/x", "10.0.0.1", NULL, out, sizeof(out)));
	assert_string_equal(out, "/u/10.0.0.1/x");
	assert_true(srv_template_expand("/u/%h-%a%%", "::1", "ws1", out, sizeof(out)));
	assert_string_equal(out, "/u/ws1-::1%");
	/* %h without a name, a name that is no file name, no room */
	assert_false(srv_template_expand("/u/%h", "10.0.0.1", NULL, out, sizeof(out)));
	assert_false(srv_template_expand("/u/%h", "10.0.0.1", "", out, sizeof(out)));
	assert_false(srv_template_expand("/u/%h", "10.0.0.1", "a/b", out, sizeof(out)));
	assert_false(srv_template_expand("/u/%a", "10.0.0.1", NULL, out, 8));
}

/* ---- the config file and --clients (args.c) ---- */

static char conf_path[64];

static void write_conf(const char *text)
{
	FILE *f;

	snprintf(conf_path, sizeof(conf_path), "/tmp/test_srv_access.XXXXXX");
	close(mkstemp(conf_path));
	f = fopen(conf_path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Loads TEXT; returns the error ("" when it loaded). */
static const char *load(const char *text)
{
	static char err[512];
	char *argv[] = {"union-nfsd", NULL, NULL};
	char arg[96];
	struct srv_opts o;

	write_conf(text);
	snprintf(arg, sizeof(arg), "--config=%s", conf_path);
	argv[1] = arg;
	err[0] = '\0';
	if (srv_args_parse(2, argv, &o, err, sizeof(err)) != SRV_ARGS_RUN && !err[0])
		snprintf(err, sizeof(err), "failed without a message");
	srv_opts_free(&o);
	unlink(conf_path);
	return err;
}

static void expect_conf_error(const char *text, int line, const char *words)
{
	const char *err = load(text);
	char where[96];

	snprintf(where, sizeof(where), "%s:%d: ", conf_path, line);
	if (strncmp(err, where, strlen(where)) != 0 || !strstr(err, words))
		fail_msg("error '%s', want '%s...%s'", err, where, words);
}

static void test_config_clients(void **state)
{
	(void)state;
	assert_string_equal(
	    load("[export]\nlowerdir = /l\nclients = 10.0.0.0/8(rw) *(ro)\n"), "");
	expect_conf_error("[export]\nlowerdir = /l\n\nclients = 10.0.0.0/8(rw,bogus)\n",
			  4, "'bogus'");
	expect_conf_error("[server]\nthreads = 4\n[export]\nlowerdir = /l\nclients = "
			  "(rw)\n",
			  5, "without a client");
	expect_conf_error("[export]\nlowerdir = /l\nclients = *\nclients = *\n", 4,
			  "given twice");
	/* per-client dirs: both or neither, known escapes only; the error names
	 * the export's line */
	assert_string_equal(load("[export]\nlowerdir = /l\nupperdir = /u/%a\n"
				 "workdir = /w/%a\n"),
			    "");
	expect_conf_error("# one\n[export]\nlowerdir = /l\nupperdir = /u/%a\n"
			  "workdir = /w\n",
			  2, "both be per client");
	expect_conf_error("[export]\nlowerdir = /l\nupperdir = /u/%x\nworkdir = /w/%a\n",
			  1, "'%x'");
}

static void test_clients_flag(void **state)
{
	char *ok[] = {"union-nfsd", "--lowerdir=/l", "--clients=10.0.0.0/8(rw) ::1",
		      NULL};
	char *bad[] = {"union-nfsd", "--lowerdir=/l", "--clients=10.0.0.0/8(rw,wat)",
		       NULL};
	char *alone[] = {"union-nfsd", "--clients=*", NULL};
	char *none[] = {"union-nfsd", "--lowerdir=/l", NULL};
	struct srv_opts o;
	char err[512];

	(void)state;
	assert_int_equal(srv_args_parse(3, ok, &o, err, sizeof(err)), SRV_ARGS_RUN);
	assert_string_equal(o.exports[0].clients, "10.0.0.0/8(rw) ::1");
	srv_opts_free(&o);
	assert_int_equal(srv_args_parse(3, bad, &o, err, sizeof(err)), SRV_ARGS_ERROR);
	assert_non_null(strstr(err, "'wat'"));
	srv_opts_free(&o);
	assert_int_equal(srv_args_parse(2, alone, &o, err, sizeof(err)), SRV_ARGS_ERROR);
	assert_non_null(strstr(err, "--clients"));
	srv_opts_free(&o);
	/* no --clients: none recorded, the server applies the loopback default */
	assert_int_equal(srv_args_parse(2, none, &o, err, sizeof(err)), SRV_ARGS_RUN);
	assert_null(o.exports[0].clients);
	srv_opts_free(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_options), cmocka_unit_test(test_parse_errors),
	    cmocka_unit_test(test_match_kinds),	  cmocka_unit_test(test_match_precedence),
	    cmocka_unit_test(test_squash),	  cmocka_unit_test(test_ports),
	    cmocka_unit_test(test_templates),	  cmocka_unit_test(test_config_clients),
	    cmocka_unit_test(test_clients_flag),
	};

	rpc_log_level = RPC_LOG_ERR;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
