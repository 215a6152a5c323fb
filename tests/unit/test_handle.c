/* SPDX-License-Identifier: Apache-2.0 */
/* test_handle.c - file handles: round trip, every flipped byte rejected,
 * wrong sizes, versions and reserved bytes, another state's handles, and
 * handles surviving a restart. */
#include "test_un.h"

#include <sodium.h>

static void open_export(struct fx *fx)
{
	t_mkdir(fx, "l1");
	t_export(fx, "l1", NULL, NULL);
}

static void test_round_trip(void **state)
{
	struct fx *fx = *state;
	uint8_t fh[UN_FH_MAX];
	uint32_t eid;
	un_id id;

	open_export(fx);
	assert_int_equal(un_handle_encode(fx->ex, 0x0102030405060708ull, fh), 32);
	assert_int_equal(un_handle_decode(fx->st, fh, 32, &eid, &id), 0);
	assert_int_equal(eid, un_export_id(fx->ex));
	assert_int_equal(id, 0x0102030405060708ull);
	assert_int_equal(fh[0], 1);
	assert_int_equal(fh[1] | fh[2] | fh[3], 0);
}

static void test_flipped_bytes(void **state)
{
	struct fx *fx = *state;
	uint8_t fh[UN_FH_MAX], bad[UN_FH_MAX];
	uint32_t eid = 7;
	un_id id = 7;

	open_export(fx);
	un_handle_encode(fx->ex, 42, fh);
	for (size_t i = 0; i < 32; i++) {
		for (int bit = 0; bit < 8; bit++) {
			memcpy(bad, fh, sizeof(bad));
			bad[i] ^= (uint8_t)(1u << bit);
			assert_int_equal(un_handle_decode(fx->st, bad, 32, &eid, &id),
					 -EBADMSG);
		}
	}
	assert_int_equal(eid, 7); /* out-parameters untouched on failure */
	assert_int_equal(id, 7);
}

static void test_wrong_sizes(void **state)
{
	struct fx *fx = *state;
	uint8_t fh[UN_FH_MAX] = {0};
	uint32_t eid;
	un_id id;

	open_export(fx);
	un_handle_encode(fx->ex, 42, fh);
	assert_int_equal(un_handle_decode(fx->st, fh, 0, &eid, &id), -EBADMSG);
	assert_int_equal(un_handle_decode(fx->st, fh, 31, &eid, &id), -EBADMSG);
	assert_int_equal(un_handle_decode(fx->st, fh, 33, &eid, &id), -EBADMSG);
	assert_int_equal(un_handle_decode(fx->st, fh, UN_FH_MAX, &eid, &id), -EBADMSG);
}

/* A handle with a correct MAC but FIELD set: still no handle of ours. */
static void test_version_and_reserved(void **state)
{
	struct fx *fx = *state;
	uint8_t fh[UN_FH_MAX];
	uint32_t eid;
	un_id id;

	open_export(fx);
	for (size_t field = 0; field < 4; field++) {
		un_handle_encode(fx->ex, 42, fh);
		fh[field] = field == 0 ? 2 : 1;
		crypto_generichash(fh + 16, 16, fh, 16, fx->st->sh->key_handle,
				   sizeof(fx->st->sh->key_handle));
		assert_int_equal(un_handle_decode(fx->st, fh, 32, &eid, &id), -EBADMSG);
	}
	/* The control: re-MACing an untouched handle keeps it valid. */
	un_handle_encode(fx->ex, 42, fh);
	crypto_generichash(fh + 16, 16, fh, 16, fx->st->sh->key_handle,
			   sizeof(fx->st->sh->key_handle));
	assert_int_equal(un_handle_decode(fx->st, fh, 32, &eid, &id), 0);
}

static void test_other_state_and_restart(void **state)
{
	struct fx *fx = *state;
	struct un_state *other;
	uint8_t fh[UN_FH_MAX];
	struct un_obj *o;
	uint32_t eid;
	un_id id, f;

	t_file(fx, "l1/f", "x");
	t_export(fx, "l1", NULL, NULL);
	f = t_id(fx, "f");
	un_handle_encode(fx->ex, f, fh);
	assert_int_equal(un_state_open(t_path(fx, "other"), &other), 0);
	assert_int_equal(un_handle_decode(other, fh, 32, &eid, &id), -EBADMSG);
	un_state_close(other);

	t_export_close(fx);
	un_state_close(fx->st);
	assert_int_equal(un_state_open(t_path(fx, "state"), &fx->st), 0);
	t_export(fx, "l1", NULL, NULL);
	assert_int_equal(un_handle_decode(fx->st, fh, 32, &eid, &id), 0);
	assert_int_equal(eid, un_export_id(fx->ex));
	assert_int_equal(un_resolve(fx->ex, id, &o), 0);
	assert_int_equal(un_obj_id(o), f);
	un_obj_put(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T_TEST(test_round_trip),
	    T_TEST(test_flipped_bytes),
	    T_TEST(test_wrong_sizes),
	    T_TEST(test_version_and_reserved),
	    T_TEST(test_other_state_and_restart),
	};

	return cmocka_run_group_tests_name("handle", tests, NULL, NULL);
}
