/* check_ids.c - the ids suite: ids (proto/ids.c): name, route and request id validation and
 * the u64 parser.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include <check.h>

#include "proto/ids.h"
#include "tests/suites.h"

/* ---- ids ------------------------------------------------------------------------------ */

START_TEST(ids_validation)
{
    char s[300];

    ck_assert_int_eq(tfp_name_valid("w"), 1);
    ck_assert_int_eq(tfp_name_valid("layer.0_w-1"), 1);
    ck_assert_int_eq(tfp_name_valid("..."), 1);
    ck_assert_int_eq(tfp_name_valid(".a"), 1);
    ck_assert_int_eq(tfp_name_valid("."), 0);
    ck_assert_int_eq(tfp_name_valid(".."), 0);
    ck_assert_int_eq(tfp_name_valid(""), 0);
    ck_assert_int_eq(tfp_name_valid(NULL), 0);
    ck_assert_int_eq(tfp_name_valid("a/b"), 0);
    ck_assert_int_eq(tfp_name_valid("a b"), 0);
    ck_assert_int_eq(tfp_name_valid("a:b"), 0);
    ck_assert_int_eq(tfp_name_valid("caf\xc3\xa9"), 0);
    ck_assert_int_eq(tfp_name_valid("a%2f"), 0);
    memset(s, 'a', 255);
    s[255] = '\0';
    ck_assert_int_eq(tfp_name_valid(s), 1);
    s[255] = 'a', s[256] = '\0';
    ck_assert_int_eq(tfp_name_valid(s), 0);

    s[128] = '\0';
    ck_assert_int_eq(tfp_user_id_valid(s), 1);
    ck_assert_int_eq(tfp_request_id_valid(s), 1);
    s[128] = 'a', s[129] = '\0';
    ck_assert_int_eq(tfp_user_id_valid(s), 0);
    ck_assert_int_eq(tfp_request_id_valid(s), 0);
    ck_assert_int_eq(tfp_user_id_valid("alice.b_c-1"), 1);
    ck_assert_int_eq(tfp_user_id_valid("."), 1);
    ck_assert_int_eq(tfp_user_id_valid("a:b"), 0);
    ck_assert_int_eq(tfp_user_id_valid(""), 0);
    ck_assert_int_eq(tfp_user_id_valid(NULL), 0);
    ck_assert_int_eq(tfp_request_id_valid("req:42-a.b_c"), 1);
    ck_assert_int_eq(tfp_request_id_valid("a b"), 0);
    ck_assert_int_eq(tfp_request_id_valid(""), 0);
    ck_assert_int_eq(tfp_request_id_valid(NULL), 0);
}
END_TEST

START_TEST(ids_parse_u64)
{
    uint64_t v = 7;

    ck_assert_int_eq(tfp_hex_digit('0'), 0);
    ck_assert_int_eq(tfp_hex_digit('9'), 9);
    ck_assert_int_eq(tfp_hex_digit('a'), 10);
    ck_assert_int_eq(tfp_hex_digit('F'), 15);
    ck_assert_int_eq(tfp_hex_digit('g'), -1);
    ck_assert_int_eq(tfp_hex_digit('\0'), -1);
    ck_assert_int_eq(tfp_parse_u64("0", 10, &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(tfp_parse_u64("1500", 60000, &v), 0);
    ck_assert_uint_eq(v, 1500);
    ck_assert_int_eq(tfp_parse_u64("18446744073709551615", UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    v = 7;
    ck_assert_int_eq(tfp_parse_u64("18446744073709551616", UINT64_MAX, &v), -1);
    ck_assert_int_eq(tfp_parse_u64("60001", 60000, &v), -1);
    ck_assert_int_eq(tfp_parse_u64("", 10, &v), -1);
    ck_assert_int_eq(tfp_parse_u64("-1", 10, &v), -1);
    ck_assert_int_eq(tfp_parse_u64("+1", 10, &v), -1);
    ck_assert_int_eq(tfp_parse_u64(" 1", 10, &v), -1);
    ck_assert_int_eq(tfp_parse_u64("1 ", 10, &v), -1);
    ck_assert_int_eq(tfp_parse_u64("0x1", 10, &v), -1);
    ck_assert_int_eq(tfp_parse_u64(NULL, 10, &v), -1);
    ck_assert_uint_eq(v, 7);
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

Suite *suite_ids(void)
{
    Suite *s = suite_create("ids");
    TCase *tc;

    tc = tcase_create("ids");
    tcase_add_test(tc, ids_validation);
    tcase_add_test(tc, ids_parse_u64);
    suite_add_tcase(s, tc);

    return s;
}
