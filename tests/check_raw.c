/* check_raw.c - the raw suite: raw bodies (proto/raw.c): shape headers, good and bad, and
 * the raw format check.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "proto/doc.h"
#include "proto/raw.h"
#include "proto/status.h"
#include "tests/suites.h"

/* ---- raw bodies ----------------------------------------------------------------------- */

static void shape_ok(const char *s, int rank, const uint64_t *want)
{
    uint64_t sh[TFP_MAX_RANK];
    int r = -1;
    tfp_err_t err;

    ck_assert_msg(tfp_raw_parse_shape(s, &r, sh, &err) == TFP_OK, "'%s': %s", s, err.msg);
    ck_assert_msg(r == rank, "'%s': rank %d", s, r);
    for (int i = 0; i < rank; i++)
        ck_assert_uint_eq(sh[i], want[i]);
}

static void shape_bad(const char *s, const char *substr)
{
    uint64_t sh[TFP_MAX_RANK];
    int r = -7;
    tfp_err_t err;

    ck_assert_msg(tfp_raw_parse_shape(s, &r, sh, &err) == TFP_EBADREQ, "'%s' accepted", s);
    ck_assert_msg(strstr(err.msg, substr) != NULL, "'%s': '%s' lacks '%s'", s, err.msg, substr);
    ck_assert_int_eq(r, -7);
}

START_TEST(raw_shapes_good)
{
    const uint64_t d234[] = { 2, 3, 4 }, d23[] = { 2, 3 }, d0[] = { 0 },
                   big[] = { UINT64_C(1) << 53 }, d8[] = { 1, 2, 3, 4, 5, 6, 7, 8 };

    shape_ok("", 0, NULL);
    shape_ok("[]", 0, NULL);
    shape_ok(" [ ] ", 0, NULL);
    shape_ok("  ", 0, NULL);
    shape_ok("2,3,4", 3, d234);
    shape_ok("[2,3]", 2, d23);
    shape_ok(" 2 , 3 ", 2, d23);
    shape_ok("[ 2,\t3 ]", 2, d23);
    shape_ok("0", 1, d0);
    shape_ok("9007199254740992", 1, big);
    shape_ok("1,2,3,4,5,6,7,8", 8, d8);
}
END_TEST

START_TEST(raw_shapes_bad)
{
    shape_bad("2,,3", "dim 1 is empty");
    shape_bad("2,", "dim 1 is empty");
    shape_bad(",", "dim 0 is empty");
    shape_bad("-1", "unexpected '-'");
    shape_bad("+1", "unexpected '+'");
    shape_bad("1.5", "unexpected '.'");
    shape_bad("abc", "unexpected 'a'");
    shape_bad("2 3", "unexpected '3'");
    shape_bad("[2,3", "without a closing ']'");
    shape_bad("[", "without a closing ']'");
    shape_bad("2,3]", "unexpected ']'");
    shape_bad("[[2]]", "unexpected '['");
    shape_bad("1,2,3,4,5,6,7,8,9", "more than 8 dims");
    shape_bad("9007199254740993", "dim 0 exceeds 2^53");
    shape_bad("99999999999999999999999", "exceeds 2^53");
    shape_bad(NULL, "missing Tfetch-Shape");
}
END_TEST

START_TEST(raw_format_and_check)
{
    uint64_t sh[TFP_MAX_RANK] = { 2, 3, 4 };
    char buf[32];
    tfp_dtype_t dt;
    int rank;
    tfp_err_t err;

    ck_assert_int_eq(tfp_raw_format_shape(3, sh, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "2,3,4");
    ck_assert_int_eq(tfp_raw_format_shape(0, sh, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(tfp_raw_format_shape(3, sh, buf, 5), -1);
    ck_assert_int_eq(tfp_raw_format_shape(3, sh, buf, 6), 0);
    ck_assert_int_eq(tfp_raw_format_shape(9, sh, buf, sizeof buf), -1);

    ck_assert_int_eq(tfp_raw_check("F32", "2,2", 16, &dt, &rank, sh, &err), TFP_OK);
    ck_assert_int_eq(dt, TFP_F32);
    ck_assert_int_eq(rank, 2);
    ck_assert_int_eq(tfp_raw_check("BF16", "", 2, &dt, &rank, sh, &err), TFP_OK);
    ck_assert_int_eq(rank, 0);
    ck_assert_int_eq(tfp_raw_check("F32", "2,2", 12, &dt, &rank, sh, &err), TFP_EUNPROC);
    ck_assert_str_eq(err.msg, "body is 12 bytes but F32 x [2,2] needs 16");
    ck_assert_int_eq(tfp_raw_check("F33", "2", 8, &dt, &rank, sh, &err), TFP_EBADREQ);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown dtype 'F33'"));
    ck_assert_int_eq(tfp_raw_check(NULL, "2", 8, &dt, &rank, sh, &err), TFP_EBADREQ);
    ck_assert_ptr_nonnull(strstr(err.msg, "missing Tfetch-Dtype"));
    ck_assert_int_eq(tfp_raw_check("F32", "x", 8, &dt, &rank, sh, &err), TFP_EBADREQ);
    ck_assert_int_eq(tfp_raw_check("F64", "2147483648,2147483648", 0, &dt, &rank, sh, &err),
                     TFP_ERANGE);
    /* packed: whole bytes only, refused as a bad header pair (found by fuzz_raw) */
    ck_assert_int_eq(tfp_raw_check("F4", "4", 2, &dt, &rank, sh, &err), TFP_OK);
    ck_assert_int_eq(tfp_raw_check("F4", "3", TFP_RAW_LEN_UNKNOWN, &dt, &rank, sh, &err),
                     TFP_EBADREQ);
    ck_assert_int_eq(err.code, TFP_EBADREQ);
    ck_assert_ptr_nonnull(strstr(err.msg, "do not fill whole bytes"));
    ck_assert_int_eq(tfp_raw_check("F6_E3M2", "1,2", 2, &dt, &rank, sh, NULL), TFP_EBADREQ);
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

Suite *suite_raw(void)
{
    Suite *s = suite_create("raw");
    TCase *tc;

    tc = tcase_create("raw");
    tcase_add_test(tc, raw_shapes_good);
    tcase_add_test(tc, raw_shapes_bad);
    tcase_add_test(tc, raw_format_and_check);
    suite_add_tcase(s, tc);

    return s;
}
