/* check_jsonread.c - the jsonread suite: the client-side JSON readers (proto/jsonread.c):
 * the strict checker, duplicate keys, error bodies and tensor listings, good and malformed.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "proto/cjson.h"
#include "proto/ids.h"
#include "proto/jsonread.h"
#include "proto/jsonw.h"
#include "proto/status.h"
#include "tests/suites.h"

/* ---- JSON readers --------------------------------------------------------------------- */

static void json_ok(const char *s, size_t want_end)
{
    size_t end = 12345;
    tfp_err_t err;

    ck_assert_msg(tfp_json_check(s, strlen(s), &end, &err) == TFP_OK, "'%s': %s", s, err.msg);
    ck_assert_msg(end == want_end, "'%s': end %zu", s, end);
}

static void json_bad(const char *s, const char *substr)
{
    tfp_err_t err;

    ck_assert_msg(tfp_json_check(s, strlen(s), NULL, &err) == TFP_EPROTO, "'%s' accepted", s);
    ck_assert_msg(strstr(err.msg, substr) != NULL, "'%s': '%s' lacks '%s'", s, err.msg, substr);
}

START_TEST(json_check_strict)
{
    char deep[600];

    json_ok("0", 1);
    json_ok(" -0.5e+10 x", 9);
    json_ok("[1,\"a\",true,false,null,{\"k\":[]}] ", 32);
    json_ok("\"\\ud83d\\ude00\\n\\/\"", 18);
    json_ok("\"\xf0\x9f\x98\x80\"", 6);
    json_bad("", "unexpected end");
    json_ok("01", 1);               /* a value, then junk for the caller to refuse */
    json_bad("[01]", "expected ',' or ']'");
    json_bad("1.", "invalid number");
    json_bad("-", "invalid number");
    json_bad(".5", "expected a value");
    json_bad("+1", "expected a value");
    json_bad("1e", "invalid number");
    json_bad("\"\\u0000\"", "\\u0000 is not allowed");
    json_bad("\"\\udc00\"", "unpaired surrogate");
    json_bad("\"\\ud800\\u0041\"", "unpaired surrogate");
    json_bad("\"\\u12\"", "invalid \\u escape");
    json_bad("\"abc", "unterminated string");
    json_bad("\"a\x1f\"", "raw control character");
    json_bad("\"\xc3\x28\"", "not valid UTF-8");
    json_bad("[1,]", "expected a value");
    json_bad("{\"a\":1 \"b\":2}", "expected ',' or '}'");
    json_bad("nul", "expected a value");
    json_bad("1234567890123456789012345678901234567890123456789012345678901234",
             "number longer than 63");
    for (int i = 0; i < TFP_JSON_MAX_DEPTH; i++)
        deep[i] = '[';
    for (int i = 0; i < TFP_JSON_MAX_DEPTH; i++)
        deep[TFP_JSON_MAX_DEPTH + i] = ']';
    deep[2 * TFP_JSON_MAX_DEPTH] = '\0';
    json_ok(deep, 2 * TFP_JSON_MAX_DEPTH);
    memmove(deep + 1, deep, 2 * TFP_JSON_MAX_DEPTH + 1);
    deep[0] = '[';
    json_bad(deep, "nested deeper than 256");
}
END_TEST

START_TEST(find_dup)
{
    const char *k1[] = { "b", "a", "c" }, *k2[] = { "b", "a", "c", "a" };

    ck_assert_ptr_null(tfp_find_dup(k1, 3));
    ck_assert_str_eq(tfp_find_dup(k2, 4), "a");
    ck_assert_ptr_null(tfp_find_dup(k1, 0));
}
END_TEST

static int err_body(const char *s, tfp_status_t *code, char *msg, size_t msg_size)
{
    return tfp_parse_error_body(s, strlen(s), code, msg, msg_size);
}

START_TEST(error_body_parse)
{
    tfp_status_t code = TFP_OK;
    char msg[64], tiny[6];
    size_t len;
    char *s;

    ck_assert_int_eq(err_body("{\"error\":\"no such tensor 'w'\",\"code\":\"TF_ENOTFOUND\"}\n",
                              &code, msg, sizeof msg), 0);
    ck_assert_int_eq(code, TFP_ENOTFOUND);
    ck_assert_str_eq(msg, "no such tensor 'w'");
    ck_assert_int_eq(err_body("{\"code\":\"TF_EFUTURE\",\"error\":\"x\",\"extra\":[1]}", &code,
                              msg, sizeof msg), 0);
    ck_assert_int_eq(code, TFP_EINTERNAL);
    ck_assert_int_eq(err_body("{\"code\":\"TF_OK\",\"error\":\"x\"}", &code, msg, sizeof msg), 0);
    ck_assert_int_eq(code, TFP_EINTERNAL);
    /* truncation keeps characters whole */
    ck_assert_int_eq(err_body("{\"error\":\"abcd\\u00e9f\",\"code\":\"TF_EBUSY\"}", &code, tiny,
                              sizeof tiny), 0);
    ck_assert_str_eq(tiny, "abcd");
    ck_assert_int_eq(err_body("{\"error\":\"ab\",\"code\":\"TF_EBUSY\"}", &code, NULL, 0), 0);
    /* what tfp_error_json writes reads back */
    s = tfp_error_json(TFP_ETOOBIG, "header \"big\"\t", &len);
    ck_assert_int_eq(tfp_parse_error_body(s, len, &code, msg, sizeof msg), 0);
    ck_assert_int_eq(code, TFP_ETOOBIG);
    ck_assert_str_eq(msg, "header \"big\"\t");
    free(s);
}
END_TEST

START_TEST(error_body_malformed)
{
    tfp_status_t code = TFP_EBUSY;
    char msg[16] = "untouched";

    ck_assert_int_eq(err_body("", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("<html>502</html>", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("[\"error\"]", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":\"x\"}", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":1,\"code\":\"TF_EBUSY\"}", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":\"x\",\"code\":5}", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":\"x\",\"code\":\"TF_EBUSY\"} x", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":\"x\",\"code\":\"TF_EBUSY\"", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":\"x\",\"error\":\"y\",\"code\":\"TF_EBUSY\"}", &code,
                              msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":\"x\\u0000y\",\"code\":\"TF_EBUSY\"}", &code, msg,
                              sizeof msg), -1);
    ck_assert_int_eq(tfp_parse_error_body(NULL, 0, &code, msg, sizeof msg), -1);
    ck_assert_int_eq(code, TFP_EBUSY);
    ck_assert_str_eq(msg, "untouched");
}
END_TEST

static tfp_status_t listing(const char *s, tfp_list_entry_t **e, size_t *n, tfp_err_t *err)
{
    return tfp_parse_listing(s, strlen(s), e, n, err);
}

START_TEST(listing_parse)
{
    tfp_list_entry_t *e = NULL;
    size_t n = 99;
    tfp_err_t err;

    ck_assert_int_eq(listing("{\"tensors\":[{\"name\":\"w\",\"bytes\":123,\"tensors\":"
                             "[{\"name\":\"w\",\"dtype\":\"F32\",\"shape\":[2,2]}]},"
                             "{\"name\":\"m\",\"bytes\":0,\"tensors\":[],\"future\":true},"
                             "{\"name\":\"p\",\"bytes\":9007199254740992,\"tensors\":"
                             "[{\"name\":\"a\",\"dtype\":\"BF16\",\"shape\":[]},"
                             "{\"name\":\"b\",\"dtype\":\"U8\",\"shape\":[0,3]}]}]}\n",
                             &e, &n, &err), TFP_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(e[0].name, "w");
    ck_assert_uint_eq(e[0].bytes, 123);
    ck_assert_uint_eq(e[0].ntensors, 1);
    ck_assert_str_eq(e[1].name, "m");
    ck_assert_uint_eq(e[1].ntensors, 0);
    ck_assert_uint_eq(e[2].bytes, UINT64_C(1) << 53);
    ck_assert_uint_eq(e[2].ntensors, 2);
    tfp_listing_free(e, n);

    ck_assert_int_eq(listing("{\"tensors\":[]}", &e, &n, &err), TFP_OK);
    ck_assert_uint_eq(n, 0);
    tfp_listing_free(e, n);
    tfp_listing_free(NULL, 0);
}
END_TEST

static void listing_bad(int line, const char *s, tfp_status_t want, const char *substr)
{
    tfp_list_entry_t *e = (tfp_list_entry_t *)&line;
    size_t n = 77;
    tfp_err_t err = { TFP_OK, "" };
    tfp_status_t st = listing(s, &e, &n, &err);

    ck_assert_msg(st == want, "line %d: got %s (%s)", line, tfp_status_name(st), err.msg);
    ck_assert_msg(strstr(err.msg, substr) != NULL, "line %d: '%s' lacks '%s'", line, err.msg,
                  substr);
    ck_assert_msg(e == (tfp_list_entry_t *)&line && n == 77, "line %d: output touched", line);
}

#define LISTING_BAD(s, substr) listing_bad(__LINE__, s, TFP_EPROTO, substr)

/* A listing page's "next": a name, absent on the last page, refused when not a name. */
START_TEST(listing_next)
{
    char next[TFP_MAX_TENSOR_NAME + 1] = "x";
    tfp_err_t err;
    const char *p = "{\"tensors\":[],\"next\":\"a1\"}";
    ck_assert_int_eq(tfp_parse_listing_next(p, strlen(p), next, &err), TFP_OK);
    ck_assert_str_eq(next, "a1");
    p = "{\"tensors\":[]}";
    ck_assert_int_eq(tfp_parse_listing_next(p, strlen(p), next, &err), TFP_OK);
    ck_assert_str_eq(next, "");
    const char *bad[] = {"{\"next\":1}", "{\"next\":\"\"}", "{\"next\":\"a/b\"}",
                         "{\"next\":\"..\"}", "[]", "{\"next\":\"a\",\"next\":\"b\"}", "{", NULL};
    for (int i = 0; bad[i]; i++) {
        strcpy(next, "kept");
        ck_assert_msg(tfp_parse_listing_next(bad[i], strlen(bad[i]), next, &err) != TFP_OK,
                      "%s", bad[i]);
        ck_assert_str_eq(next, "kept");
    }
}
END_TEST

START_TEST(listing_malformed)
{
    LISTING_BAD("", "invalid JSON");
    LISTING_BAD("{\"tensors\":[}", "invalid JSON");
    LISTING_BAD("[]", "not an object with a \"tensors\" array");
    LISTING_BAD("{\"tensors\":{}}", "\"tensors\" array");
    LISTING_BAD("{}", "\"tensors\" array");
    LISTING_BAD("{\"tensors\":[1]}", "tensors[0] is not an object");
    LISTING_BAD("{\"tensors\":[{\"bytes\":1,\"tensors\":[]}]}", "tensors[0].name is not");
    LISTING_BAD("{\"tensors\":[{\"name\":\"\",\"bytes\":1,\"tensors\":[]}]}", "tensors[0].name");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":-1,\"tensors\":[]}]}",
                "tensors[0].bytes is not a non-negative integer");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1.5,\"tensors\":[]}]}", "bytes");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":\"1\",\"tensors\":[]}]}", "bytes");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1}]}", "tensors[0].tensors is not an array");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[],\"name\":\"b\"}]}",
                "duplicate key");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[]},{\"name\":\"b\","
                "\"bytes\":1,\"tensors\":[{\"name\":\"x\",\"dtype\":\"F99\",\"shape\":[]}]}]}",
                "tensors[1].tensors[0].dtype is not a known dtype");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[{\"dtype\":\"U8\","
                "\"shape\":[]}]}]}", "tensors[0].tensors[0].name is not a string");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[{\"name\":\"x\","
                "\"dtype\":\"U8\",\"shape\":[-1]}]}]}", "tensors[0].tensors[0].shape");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[{\"name\":\"x\","
                "\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1]}]}]}", "up to 8 dims");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[{\"name\":\"x\","
                "\"dtype\":\"U8\",\"shape\":{}}]}]}", "shape is not an array");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[7]}]}",
                "tensors[0].tensors[0] is not an object");
    LISTING_BAD("{\"tensors\":[]} []", "text after the value");
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

/* ---- exact integers (proto/cjson.c) ---------------------------------------------------- */

/* tfp_cj_uint (count: tfp_cj_count) on the first element of the array text arr. */
static int cj_get(const char *arr, int count, uint64_t lo, uint64_t hi, uint64_t *out)
{
    cJSON *root = NULL;
    tfp_err_t err;

    ck_assert_int_eq(tfp_cj_parse(arr, strlen(arr), TFP_CJ_WHOLE, &root, NULL, &err), TFP_OK);
    int rc = count ? tfp_cj_count(root->child, lo, hi, out) : tfp_cj_uint(root->child, lo, hi, out);
    cJSON_Delete(root);
    return rc;
}
#define cj_uint(a, lo, hi, out) cj_get(a, 0, lo, hi, out)
#define cj_count(a, lo, hi, out) cj_get(a, 1, lo, hi, out)

START_TEST(cj_uint_exact)
{
    uint64_t v = 0;

    /* every integer up to 2^64-1 is read exactly, not through a double */
    ck_assert_int_eq(cj_uint("[9007199254740993]", 0, UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, (UINT64_C(1) << 53) + 1);
    ck_assert_int_eq(cj_count("[9007199254740993]", 0, UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, (UINT64_C(1) << 53) + 1);
    ck_assert_int_eq(cj_uint("[18446744073709551615]", 0, UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    ck_assert_int_eq(cj_uint("[18446744073709551614]", 0, UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX - 1);
    ck_assert_int_eq(cj_uint("[18446744073709551616]", 0, UINT64_MAX, &v), TFP_CJ_EHIGH);
    ck_assert_int_eq(cj_uint("[99999999999999999999999]", 0, UINT64_MAX, &v), TFP_CJ_EHIGH);
    /* 2^53+1 is above a 2^53 limit, not rounded down to it */
    ck_assert_int_eq(cj_uint("[9007199254740993]", 0, UINT64_C(1) << 53, &v), TFP_CJ_EHIGH);
    ck_assert_int_eq(cj_count("[9007199254740993]", 0, UINT64_C(1) << 53, &v), TFP_CJ_EHIGH);
    ck_assert_int_eq(cj_uint("[9007199254740992]", 0, UINT64_C(1) << 53, &v), 0);
    ck_assert_uint_eq(v, UINT64_C(1) << 53);
    ck_assert_int_eq(cj_uint("[5]", 6, 9, &v), TFP_CJ_ELOW);
    ck_assert_int_eq(cj_uint("[9007199254740993]", UINT64_MAX, UINT64_MAX, &v), TFP_CJ_ELOW);
    ck_assert_int_eq(cj_uint("[0]", 0, 0, &v), 0);
    ck_assert_uint_eq(v, 0);
    /* by value, where a double may be a rounding: refused, not rounded */
    ck_assert_int_eq(cj_uint("[9007199254740993.0]", 0, UINT64_MAX, &v), TFP_CJ_EHIGH);
    ck_assert_int_eq(cj_uint("[1e19]", 0, UINT64_MAX, &v), TFP_CJ_EHIGH);
    /* numbers after strings holding digits, in nested objects: the texts stay in step */
    cJSON *root = NULL;
    tfp_err_t err;
    const char *t = "{\"a\":\"1.5 -0 \\\"2e0\",\"b\":[1.5,{\"c\":9007199254740995}],"
                    "\"d\":true,\"e\":18446744073709551615}";
    ck_assert_int_eq(tfp_cj_parse(t, strlen(t), TFP_CJ_WHOLE, &root, NULL, &err), TFP_OK);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "b");
    ck_assert_int_eq(tfp_cj_uint(b->child, 0, UINT64_MAX, &v), TFP_CJ_EFRAC);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(b->child->next, "c");
    ck_assert_int_eq(tfp_cj_uint(c, 0, UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, (UINT64_C(1) << 53) + 3);
    ck_assert_int_eq(tfp_cj_uint(cJSON_GetObjectItemCaseSensitive(root, "e"), 0, UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    cJSON_Delete(root);
}
END_TEST

START_TEST(cj_count_refuses_non_integers)
{
    uint64_t v = 7;

    /* as the reference safetensors reader: only integer spellings are counts */
    ck_assert_int_eq(cj_count("[2.0]", 0, UINT64_MAX, &v), TFP_CJ_EFRAC);
    ck_assert_int_eq(cj_count("[2e0]", 0, UINT64_MAX, &v), TFP_CJ_EFRAC);
    ck_assert_int_eq(cj_count("[2E0]", 0, UINT64_MAX, &v), TFP_CJ_EFRAC);
    ck_assert_int_eq(cj_count("[20e-1]", 0, UINT64_MAX, &v), TFP_CJ_EFRAC);
    ck_assert_int_eq(cj_count("[1.5]", 0, UINT64_MAX, &v), TFP_CJ_EFRAC);
    ck_assert_int_eq(cj_count("[0.0]", 0, UINT64_MAX, &v), TFP_CJ_EFRAC);
    ck_assert_int_eq(cj_count("[-0]", 0, UINT64_MAX, &v), TFP_CJ_ELOW);
    ck_assert_int_eq(cj_count("[-0.0]", 0, UINT64_MAX, &v), TFP_CJ_ELOW);
    ck_assert_int_eq(cj_count("[-1]", 0, UINT64_MAX, &v), TFP_CJ_ELOW);
    ck_assert_int_eq(cj_count("[1e300]", 0, UINT64_C(1) << 53, &v), TFP_CJ_EHIGH);
    ck_assert_int_eq(cj_count("[\"2\"]", 0, UINT64_MAX, &v), TFP_CJ_ENOTNUM);
    ck_assert_int_eq(cj_count("[true]", 0, UINT64_MAX, &v), TFP_CJ_ENOTNUM);
    ck_assert_uint_eq(v, 7);                        /* untouched on failure */
    /* tfp_cj_uint counts by value: "1E2" is 100 */
    ck_assert_int_eq(cj_uint("[1E2]", 0, UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, 100);
    ck_assert_int_eq(cj_uint("[2.0]", 0, UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, 2);
    ck_assert_int_eq(cj_uint("[1.5]", 0, UINT64_MAX, &v), TFP_CJ_EFRAC);
    ck_assert_int_eq(cj_uint("[-1]", 0, UINT64_MAX, &v), TFP_CJ_ELOW);
}
END_TEST

/* A feed's replies ({"seq": S}, {"resume_after": S}): one integer member, hostile bodies
 * refused. */
START_TEST(uint_member)
{
    tfp_err_t err;
    uint64_t v = 7;
    const char *ok = "{\"seq\":42,\"round\":3,\"generation\":1}";
    ck_assert_int_eq(tfp_parse_uint_member(ok, strlen(ok), "seq", &v, &err), TFP_OK);
    ck_assert_uint_eq(v, 42);
    ck_assert_int_eq(tfp_parse_uint_member(ok, strlen(ok), "round", &v, &err), TFP_OK);
    ck_assert_uint_eq(v, 3);
    const char *bad[] = {
        "", "[]", "42", "{\"seq\":-1}", "{\"seq\":1.5}", "{\"seq\":\"1\"}",
        "{\"seq\":1,\"seq\":2}", "{\"seq\":1e20}", "{\"seq\":18446744073709551616}",
        "{\"other\":1}",
        "{\"seq\":1} trailing", "{\"seq\":01}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 7;
        ck_assert_msg(tfp_parse_uint_member(bad[i], strlen(bad[i]), "seq", &v, &err) != TFP_OK,
                      "accepted %s", bad[i]);
        ck_assert_uint_eq(v, 7);
    }
}
END_TEST

Suite *suite_jsonread(void)
{
    Suite *s = suite_create("jsonread");
    TCase *tc;

    tc = tcase_create("jsonread");
    tcase_add_test(tc, json_check_strict);
    tcase_add_test(tc, find_dup);
    tcase_add_test(tc, error_body_parse);
    tcase_add_test(tc, error_body_malformed);
    tcase_add_test(tc, listing_parse);
    tcase_add_test(tc, listing_malformed);
    tcase_add_test(tc, listing_next);
    tcase_add_test(tc, cj_uint_exact);
    tcase_add_test(tc, cj_count_refuses_non_integers);
    tcase_add_test(tc, uint_member);
    suite_add_tcase(s, tc);

    return s;
}
