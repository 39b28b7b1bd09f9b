/* check_jsonw.c - the jsonw suite: the JSON writer (proto/jsonw.c): escaping, invalid
 * UTF-8, structure, large output, and the error body.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "proto/jsonw.h"
#include "proto/status.h"
#include "tests/suites.h"

/* ---- JSON writer ---------------------------------------------------------------------- */

static char *jw_str(const char *s, size_t n)
{
    tfp_jw_t w;
    char *out;

    tfp_jw_init(&w);
    tfp_jw_strn(&w, s, n);
    out = tfp_jw_finish(&w, NULL);
    ck_assert_ptr_nonnull(out);
    return out;
}

#define JW_EXPECT(in, want)                                 \
    do {                                                    \
        char *o_ = jw_str(in, sizeof(in) - 1);              \
        ck_assert_str_eq(o_, want);                         \
        free(o_);                                           \
    } while (0)

START_TEST(jsonw_escaping)
{
    JW_EXPECT("plain", "\"plain\"");
    JW_EXPECT("a\"b\\c/d", "\"a\\\"b\\\\c/d\"");
    JW_EXPECT("\n\t\r\b\f", "\"\\u000a\\u0009\\u000d\\u0008\\u000c\"");
    JW_EXPECT("\x01\x1f\x7f", "\"\\u0001\\u001f\x7f\"");
    JW_EXPECT("nul\0x", "\"nul\\u0000x\"");
    JW_EXPECT("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
}
END_TEST

START_TEST(jsonw_invalid_utf8)
{
    JW_EXPECT("a\xff" "b", "\"a\xef\xbf\xbd" "b\"");
    JW_EXPECT("\x80", "\"\xef\xbf\xbd\"");
    JW_EXPECT("\xc0\xaf", "\"\xef\xbf\xbd\xef\xbf\xbd\"");            /* overlong '/' */
    JW_EXPECT("\xed\xa0\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");   /* surrogate */
    JW_EXPECT("x\xe2\x82", "\"x\xef\xbf\xbd\xef\xbf\xbd\"");          /* truncated */
    JW_EXPECT("\xf4\x90\x80\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    ck_assert_int_eq(tfp_utf8_valid("caf\xc3\xa9", 5), 1);
    ck_assert_int_eq(tfp_utf8_valid("caf\xc3", 4), 0);
    ck_assert_int_eq(tfp_utf8_valid("\xf4\x8f\xbf\xbf", 4), 1);     /* U+10FFFF */
    ck_assert_int_eq(tfp_utf8_valid("\xe0\x80\x80", 3), 0);         /* overlong */
}
END_TEST

START_TEST(jsonw_structure)
{
    tfp_jw_t w;
    char *out;
    size_t len;

    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "a");
    tfp_jw_arr_begin(&w);
    tfp_jw_int(&w, -1);
    tfp_jw_uint(&w, UINT64_MAX);
    tfp_jw_double(&w, 0.5);
    tfp_jw_double(&w, NAN);
    tfp_jw_double(&w, 1e300);
    tfp_jw_obj_begin(&w);
    tfp_jw_obj_end(&w);
    tfp_jw_arr_begin(&w);
    tfp_jw_arr_end(&w);
    tfp_jw_arr_end(&w);
    tfp_jw_key(&w, "b\n");
    tfp_jw_bool(&w, 1);
    tfp_jw_key(&w, "c");
    tfp_jw_null(&w);
    tfp_jw_key(&w, "d");
    tfp_jw_raw(&w, "{\"x\":1}", 7);
    tfp_jw_key(&w, "e");
    tfp_jw_str(&w, NULL);
    tfp_jw_key(&w, "f");
    tfp_jw_int(&w, INT64_MIN);
    tfp_jw_obj_end(&w);
    out = tfp_jw_finish(&w, &len);
    ck_assert_str_eq(out, "{\"a\":[-1,18446744073709551615,0.5,null,1.0000000000000001e+300,{},[]],"
                          "\"b\\u000a\":true,\"c\":null,\"d\":{\"x\":1},\"e\":null,"
                          "\"f\":-9223372036854775808}");
    ck_assert_uint_eq(len, strlen(out));
    free(out);

    /* empty writer gives "", unbalanced or too deep fails */
    out = tfp_jw_finish(&w, &len);
    ck_assert_str_eq(out, "");
    ck_assert_uint_eq(len, 0);
    free(out);
    tfp_jw_init(&w);
    tfp_jw_obj_end(&w);
    ck_assert_ptr_null(tfp_jw_finish(&w, NULL));
    tfp_jw_init(&w);
    for (int i = 0; i < 100; i++)
        tfp_jw_arr_begin(&w);
    ck_assert_ptr_null(tfp_jw_finish(&w, NULL));
    tfp_jw_init(&w);
    tfp_jw_arr_begin(&w);
    tfp_jw_str(&w, "x");
    tfp_jw_discard(&w);
    ck_assert_ptr_null(w.buf);
}
END_TEST

START_TEST(jsonw_numbers_as_printf)
{
    /* Each power of ten and its neighbours, both signs, and the extremes: what printf says. */
    for (int i = 0; i <= 20; i++) {
        uint64_t p10 = 1;
        for (int k = 0; k < i && k < 19; k++)
            p10 *= 10;
        uint64_t us[] = {p10 - 1, p10, p10 + 1, i == 20 ? UINT64_MAX : p10 * 3 + 7};
        for (size_t j = 0; j < sizeof us / sizeof us[0]; j++) {
            char want[128];
            tfp_jw_t w;
            char *out;
            tfp_jw_init(&w);
            tfp_jw_arr_begin(&w);
            tfp_jw_uint(&w, us[j]);
            tfp_jw_int(&w, (int64_t)us[j]);
            tfp_jw_int(&w, -(int64_t)(us[j] & INT64_MAX));
            tfp_jw_int(&w, INT64_MAX);
            tfp_jw_arr_end(&w);
            out = tfp_jw_finish(&w, NULL);
            snprintf(want, sizeof want, "[%llu,%lld,%lld,%lld]", (unsigned long long)us[j],
                     (long long)(int64_t)us[j], -(long long)(us[j] & INT64_MAX),
                     (long long)INT64_MAX);
            ck_assert_str_eq(out, want);
            free(out);
        }
    }
}
END_TEST

START_TEST(jsonw_large)
{
    tfp_jw_t w;
    char *out;
    size_t len;

    tfp_jw_init(&w);
    tfp_jw_arr_begin(&w);
    for (int i = 0; i < 100000; i++)
        tfp_jw_int(&w, i);
    tfp_jw_arr_end(&w);
    out = tfp_jw_finish(&w, &len);
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(strncmp(out, "[0,1,2,", 7), 0);
    ck_assert_int_eq(strcmp(out + len - 7, ",99999]"), 0);
    free(out);
}
END_TEST

START_TEST(error_json)
{
    size_t len;
    char *s = tfp_error_json(TFP_ENOTFOUND, "no tensor 'x\"'", &len);

    ck_assert_str_eq(s, "{\"error\":\"no tensor 'x\\\"'\",\"code\":\"TF_ENOTFOUND\"}\n");
    ck_assert_uint_eq(len, strlen(s));
    free(s);
    s = tfp_error_json(TFP_EBUSY, NULL, NULL);
    ck_assert_str_eq(s, "{\"error\":\"server busy\",\"code\":\"TF_EBUSY\"}\n");
    free(s);
    s = tfp_error_json(TFP_EPROTO, "bad \xff byte\n", NULL);
    ck_assert_str_eq(s, "{\"error\":\"bad \xef\xbf\xbd byte\\u000a\",\"code\":\"TF_EPROTO\"}\n");
    free(s);
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

Suite *suite_jsonw(void)
{
    Suite *s = suite_create("jsonw");
    TCase *tc;

    tc = tcase_create("jsonw");
    tcase_add_test(tc, jsonw_escaping);
    tcase_add_test(tc, jsonw_invalid_utf8);
    tcase_add_test(tc, jsonw_structure);
    tcase_add_test(tc, jsonw_numbers_as_printf);
    tcase_add_test(tc, jsonw_large);
    tcase_add_test(tc, error_json);
    suite_add_tcase(s, tc);

    return s;
}
