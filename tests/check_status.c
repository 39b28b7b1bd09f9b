/* check_status.c - the status suite: the status map (proto/status.c): names, messages, the
 * error setter, and that the public status and dtype maps in client/tfetch.h agree with
 * proto's.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "client/tfetch.h"
#include "proto/dtype.h"
#include "proto/status.h"
#include "tests/suites.h"

/* ---- status and dtype maps ----------------------------------------------------------- */

START_TEST(status_names)
{
    tfp_status_t st;

    ck_assert_str_eq(tfp_status_name(TFP_OK), "TF_OK");
    ck_assert_str_eq(tfp_status_name(TFP_EPROTO), "TF_EPROTO");
    ck_assert_str_eq(tfp_status_name(TFP_ELENGTH), "TF_ELENGTH");
    ck_assert_str_eq(tfp_status_name((tfp_status_t)-99), "TF_EUNKNOWN");
    ck_assert_str_eq(tfp_status_text(TFP_ENOTFOUND), "no such tensor");
    ck_assert_str_eq(tfp_status_text((tfp_status_t)7), "unknown status");
    ck_assert_int_eq(tfp_status_http(TFP_ENOTFOUND), 404);
    ck_assert_int_eq(tfp_status_http(TFP_ETOOBIG), 413);
    ck_assert_int_eq(tfp_status_http(TFP_OK), 200);
    ck_assert_int_eq(tfp_status_http((tfp_status_t)-99), 500);
    ck_assert_int_eq(tfp_status_from_name("TF_EBUSY", &st), 0);
    ck_assert_int_eq(st, TFP_EBUSY);
    ck_assert_int_eq(tfp_status_from_name("TF_NOPE", &st), -1);
    ck_assert_int_eq(tfp_status_from_name("EBUSY", &st), -1);
    ck_assert_int_eq(tfp_status_from_name(NULL, &st), -1);
#define X(n, v, h, s)                                                       \
    ck_assert_int_eq(tfp_status_from_name(tfp_status_name(TFP_##n), &st), 0); \
    ck_assert_int_eq(st, TFP_##n);
    TFP_STATUS_MAP(X)
#undef X
}
END_TEST

START_TEST(status_err_set)
{
    tfp_err_t err;
    char longname[600];

    ck_assert_int_eq(tfp_err_set(NULL, TFP_EPROTO, "x %d", 1), TFP_EPROTO);
    ck_assert_int_eq(tfp_err_set(&err, TFP_ERANGE, "dim %d of '%s'", 3, "w"), TFP_ERANGE);
    ck_assert_int_eq(err.code, TFP_ERANGE);
    ck_assert_str_eq(err.msg, "dim 3 of 'w'");
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    tfp_err_set(&err, TFP_EPROTO, "%s", longname);
    ck_assert_uint_eq(strlen(err.msg), sizeof err.msg - 1);
}
END_TEST

/* Public statuses and dtypes must equal proto's in value and text. */
START_TEST(status_map_matches_public)
{
    int n = 0;

#define X(name, v, h, s)                                                                 \
    ck_assert_int_eq((int)TFP_##name, (int)TF_##name);                                   \
    ck_assert_str_eq(tfp_status_text(TFP_##name), tf_strerror(TF_##name));               \
    ck_assert_str_eq(tfp_status_name(TFP_##name), tf_err_name(TF_##name));               \
    n++;
    TFP_STATUS_MAP(X)
#undef X
    ck_assert_int_eq(n, 28);
    n = 0;
#define X(name, v) ck_assert_int_eq((int)TFP_##name, (int)TF_##name); n++;
    TF_DTYPE_MAP(X)
#undef X
    ck_assert_int_eq(n, TFP_DTYPE_COUNT);
#define X(name, v, sz, s)                                                                \
    ck_assert_int_eq((int)TFP_##name, (int)TF_##name);                                   \
    ck_assert_uint_eq(tfp_dtype_size(TFP_##name), tf_dtype_size(TF_##name));             \
    ck_assert_str_eq(tfp_dtype_name(TFP_##name), tf_dtype_name(TF_##name));
    TFP_DTYPE_MAP(X)
#undef X
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

Suite *suite_status(void)
{
    Suite *s = suite_create("status");
    TCase *tc;

    tc = tcase_create("status");
    tcase_add_test(tc, status_names);
    tcase_add_test(tc, status_err_set);
    tcase_add_test(tc, status_map_matches_public);
    suite_add_tcase(s, tc);

    return s;
}
