/* SPDX-License-Identifier: Apache-2.0 */
/* test_whiteout.c - white-outs (0:0 device, xattr forms, OCI), opaque
 * directories (trusted./user. "y", "x" not opaque, OCI marker) and
 * layer-private names, seen through lookup and readdir alike. */
#include "test_un.h"

static void test_chardev_whiteout(void **state)
{
	struct fx *fx = *state;

	t_file(fx, "l2/f", "lower");
	t_file(fx, "l2/keep", "k");
	t_file(fx, "l2/d/inner", "i");
	t_file(fx, "l3/f", "lowest");
	t_chr0(fx, "l1/f");
	t_chr0(fx, "l1/d");
	t_export(fx, "l1:l2:l3", NULL, NULL);
	assert_int_equal(t_lookup_rc(fx, "f"), -ENOENT);
	assert_int_equal(t_lookup_rc(fx, "d"), -ENOENT);
	assert_int_equal(t_lookup_rc(fx, "d/inner"), -ENOENT);
	t_list_eq(fx, "", "keep");

	/* The same from an upper layer. */
	t_mkdir(fx, "w");
	t_chr0(fx, "u/keep");
	t_export(fx, "l1:l2:l3", "u", "w");
	assert_int_equal(t_lookup_rc(fx, "keep"), -ENOENT);
	t_list_eq(fx, "", "");
}

static void test_whiteout_below_dir_stops_merge(void **state)
{
	struct fx *fx = *state;

	t_file(fx, "l1/a/top", "t");
	t_chr0(fx, "l2/a");
	t_file(fx, "l3/a/bottom", "b");
	t_export(fx, "l1:l2:l3", NULL, NULL);
	assert_int_equal(t_lookup_rc(fx, "a/top"), 0);
	assert_int_equal(t_lookup_rc(fx, "a/bottom"), -ENOENT);
	t_list_eq(fx, "a", "top");
}

static void xattr_whiteout(void **state, const char *attr)
{
	struct fx *fx = *state;

	t_file(fx, "l2/f", "lower");
	t_file(fx, "l2/g", "lower");
	t_file(fx, "l2/h", "lower");
	t_file(fx, "l1/f", "");
	t_xattr(fx, "l1/f", attr, "");
	t_file(fx, "l1/g", "not empty");
	t_xattr(fx, "l1/g", attr, ""); /* only an empty file is a white-out */
	t_file(fx, "l1/h", "");	       /* an empty file without the xattr is a file */
	t_export(fx, "l1:l2", NULL, NULL);
	assert_int_equal(t_lookup_rc(fx, "f"), -ENOENT);
	assert_int_equal(t_lookup_rc(fx, "g"), 0);
	assert_int_equal(t_lookup_rc(fx, "h"), 0);
	t_list_eq(fx, "", "g,h");
}

static void test_xattr_whiteout_trusted(void **state)
{
	xattr_whiteout(state, "trusted.overlay.whiteout");
}

static void test_xattr_whiteout_user(void **state)
{
	xattr_whiteout(state, "user.overlay.whiteout");
}

static void test_oci_whiteout(void **state)
{
	struct fx *fx = *state;

	t_file(fx, "l2/f", "lower");
	t_file(fx, "l2/g", "lower");
	t_file(fx, "l2/d/x", "lower");
	t_file(fx, "l1/.wh.f", "");
	t_file(fx, "l1/d/y", "same layer"); /* .wh.d beside d: d hides what is below */
	t_file(fx, "l1/.wh.d", "");
	t_file(fx, "l1/.wh..wh.plnk", "");
	t_export(fx, "l1:l2", NULL, NULL);
	assert_int_equal(t_lookup_rc(fx, "f"), -ENOENT);
	assert_int_equal(t_lookup_rc(fx, "g"), 0);
	assert_int_equal(t_lookup_rc(fx, "d/y"), 0);
	assert_int_equal(t_lookup_rc(fx, "d/x"), -ENOENT);
	assert_int_equal(t_lookup_rc(fx, ".wh.f"), -ENOENT);
	assert_int_equal(t_lookup_rc(fx, ".wh..wh.plnk"), -ENOENT);
	t_list_eq(fx, "", "d,g");
	t_list_eq(fx, "d", "y");
}

static void test_oci_only_in_lowers(void **state)
{
	struct fx *fx = *state;

	/* In the upper, ".wh." names are ordinary files: overlayfs format. */
	t_mkdir(fx, "w");
	t_file(fx, "l1/f", "lower");
	t_file(fx, "u/.wh.f", "");
	t_export(fx, "l1", "u", "w");
	assert_int_equal(t_lookup_rc(fx, "f"), 0);
	assert_int_equal(t_lookup_rc(fx, ".wh.f"), 0);
	t_list_eq(fx, "", ".wh.f,f");
}

static void test_oci_opaque(void **state)
{
	struct fx *fx = *state;

	t_file(fx, "l1/d/top", "t");
	t_file(fx, "l1/d/.wh..wh..opq", "");
	t_file(fx, "l2/d/below", "b");
	t_export(fx, "l1:l2", NULL, NULL);
	assert_int_equal(t_lookup_rc(fx, "d/top"), 0);
	assert_int_equal(t_lookup_rc(fx, "d/below"), -ENOENT);
	assert_int_equal(t_lookup_rc(fx, "d/.wh..wh..opq"), -ENOENT);
	t_list_eq(fx, "d", "top");
}

static void opaque(void **state, const char *attr, const char *val, bool is_opaque)
{
	struct fx *fx = *state;

	t_file(fx, "l1/d/top", "t");
	t_xattr(fx, "l1/d", attr, val);
	t_file(fx, "l2/d/below", "b");
	t_file(fx, "l2/d/sub/x", "b");
	t_export(fx, "l1:l2", NULL, NULL);
	assert_int_equal(t_lookup_rc(fx, "d/top"), 0);
	assert_int_equal(t_lookup_rc(fx, "d/below"), is_opaque ? -ENOENT : 0);
	assert_int_equal(t_lookup_rc(fx, "d/sub/x"), is_opaque ? -ENOENT : 0);
	t_list_eq(fx, "d", is_opaque ? "top" : "below,sub,top");
}

static void test_opaque_trusted(void **state)
{
	opaque(state, "trusted.overlay.opaque", "y", true);
}

static void test_opaque_user(void **state)
{
	opaque(state, "user.overlay.opaque", "y", true);
}

static void test_opaque_x_is_not_opaque(void **state)
{
	opaque(state, "trusted.overlay.opaque", "x", false);
}

static void test_opaque_other_values(void **state)
{
	opaque(state, "user.overlay.opaque", "yes", false);
}

/* The same markers read through /proc/self/fd, as on kernels without
 * getxattrat (sys.c), and the fallback from getxattrat to it. */
static void test_markers_through_proc(void **state)
{
	un_sys_test_no_getxattrat(true);
	xattr_whiteout(state, "trusted.overlay.whiteout");
	t_teardown(state);
	t_setup(state);
	un_sys_test_no_getxattrat(true);
	opaque(state, "user.overlay.opaque", "y", true);
	un_sys_test_no_getxattrat(false);
}

static void test_opaque_upper_over_lowers(void **state)
{
	struct fx *fx = *state;

	t_mkdir(fx, "w");
	t_file(fx, "u/d/up", "u");
	t_xattr(fx, "u/d", "trusted.overlay.opaque", "y");
	t_file(fx, "l1/d/l1", "1");
	t_file(fx, "l2/d/l2", "2");
	t_file(fx, "l1/e/l1", "1");
	t_xattr(fx, "l1/e", "user.overlay.opaque", "y"); /* opaque in a lower */
	t_file(fx, "l2/e/l2", "2");
	t_file(fx, "u/e/up", "u");
	t_export(fx, "l1:l2", "u", "w");
	t_list_eq(fx, "d", "up");
	t_list_eq(fx, "e", "l1,up");
	assert_int_equal(t_lookup_rc(fx, "e/l2"), -ENOENT);
}

static void test_xwhiteout_in_x_dir(void **state)
{
	struct fx *fx = *state;

	/* The kernel's own layout for xattr white-outs: the dir marked "x". */
	t_file(fx, "l1/d/gone", "");
	t_xattr(fx, "l1/d/gone", "trusted.overlay.whiteout", "");
	t_xattr(fx, "l1/d", "trusted.overlay.opaque", "x");
	t_file(fx, "l2/d/gone", "lower");
	t_file(fx, "l2/d/kept", "lower");
	t_export(fx, "l1:l2", NULL, NULL);
	t_list_eq(fx, "d", "kept");
	assert_int_equal(t_lookup_rc(fx, "d/gone"), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T_TEST(test_chardev_whiteout),
	    T_TEST(test_whiteout_below_dir_stops_merge),
	    T_TEST(test_xattr_whiteout_trusted),
	    T_TEST(test_xattr_whiteout_user),
	    T_TEST(test_oci_whiteout),
	    T_TEST(test_oci_only_in_lowers),
	    T_TEST(test_oci_opaque),
	    T_TEST(test_opaque_trusted),
	    T_TEST(test_opaque_user),
	    T_TEST(test_opaque_x_is_not_opaque),
	    T_TEST(test_opaque_other_values),
	    T_TEST(test_markers_through_proc),
	    T_TEST(test_opaque_upper_over_lowers),
	    T_TEST(test_xwhiteout_in_x_dir),
	};

	if (geteuid() != 0) {
		/* mknod 0:0 and trusted.* xattrs need root. */
		printf("skipped: needs root\n");
		return 0;
	}
	return cmocka_run_group_tests_name("whiteout", tests, NULL, NULL);
}
