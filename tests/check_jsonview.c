/* check_jsonview.c - the jsonview suite: the JSON view of a document (proto/jsonview.c):
 * examples, every dtype, the size limit, and the float decoders it uses.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "proto/doc.h"
#include "proto/jsonview.h"
#include "proto/status.h"
#include "tests/suites.h"

/* ---- JSON view ------------------------------------------------------------------------ */

static char *view(tfp_doc_t *doc, uint64_t max)
{
    char *out = NULL;
    size_t len = 0;
    tfp_err_t err;

    ck_assert_msg(tfp_jsonview_render(doc, max, &out, &len, &err) == TFP_OK, "%s", err.msg);
    ck_assert_uint_eq(len, strlen(out));
    return out;
}

START_TEST(jsonview_examples)
{
    tfp_doc_t *doc = tfp_doc_new();
    uint64_t sh[2] = { 2, 2 }, z1[2] = { 2, 0 }, z2[2] = { 0, 2 };
    float f[4] = { 1, 2, 3, 4 };
    double d = 0.1;
    tfp_err_t err;
    char *out;

    tfp_doc_add(doc, "w", TFP_F32, 2, sh, f, 16, &err);
    out = view(doc, 100);
    ck_assert_str_eq(out, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data\":[[1,2],[3,4]]}}");
    free(out);
    tfp_doc_add(doc, "s", TFP_F64, 0, NULL, &d, 8, &err);
    tfp_doc_add(doc, "e1", TFP_I8, 2, z1, NULL, 0, &err);
    tfp_doc_add(doc, "e2", TFP_I8, 2, z2, NULL, 0, &err);
    tfp_doc_set_meta(doc, "k", "v\"", &err);
    out = view(doc, 100);
    ck_assert_str_eq(out, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data\":[[1,2],[3,4]]},"
                          "\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data\":0.10000000000000001},"
                          "\"e1\":{\"dtype\":\"I8\",\"shape\":[2,0],\"data\":[[],[]]},"
                          "\"e2\":{\"dtype\":\"I8\",\"shape\":[0,2],\"data\":[]},"
                          "\"__metadata__\":{\"k\":\"v\\\"\"}}");
    free(out);
    tfp_doc_free(doc);
}
END_TEST

START_TEST(jsonview_types)
{
    tfp_doc_t *doc = tfp_doc_new();
    uint64_t s3[1] = { 3 }, s4[1] = { 4 }, s2[1] = { 2 };
    float f[3] = { 0.1f, NAN, -INFINITY };
    uint16_t h[3] = { 0x3C00, 0x7C00, 0xFE00 }, bf[2] = { 0x3F80, 0x4049 };
    uint8_t e4[4] = { 0x38, 0x7E, 0x7F, 0x01 }, e5[4] = { 0x3C, 0x7C, 0xFC, 0x7D };
    uint8_t bl[2] = { 0, 1 };
    int8_t i8[2] = { -128, 127 };
    int16_t i16[2] = { -32768, 7 };
    int32_t i32[2] = { INT32_MIN, 1 };
    int64_t i64[2] = { INT64_MIN, INT64_MAX };
    uint16_t u16[2] = { 65535, 0 };
    uint32_t u32[2] = { UINT32_MAX, 0 };
    uint64_t u64[2] = { UINT64_MAX, 0 };
    uint8_t u8[2] = { 255, 0 };
    tfp_err_t err;
    char *out;

    tfp_doc_add(doc, "f32", TFP_F32, 1, s3, f, 12, &err);
    tfp_doc_add(doc, "f16", TFP_F16, 1, s3, h, 6, &err);
    tfp_doc_add(doc, "bf16", TFP_BF16, 1, s2, bf, 4, &err);
    tfp_doc_add(doc, "e4", TFP_F8_E4M3, 1, s4, e4, 4, &err);
    tfp_doc_add(doc, "e5", TFP_F8_E5M2, 1, s4, e5, 4, &err);
    tfp_doc_add(doc, "b", TFP_BOOL, 1, s2, bl, 2, &err);
    tfp_doc_add(doc, "i8", TFP_I8, 1, s2, i8, 2, &err);
    tfp_doc_add(doc, "i16", TFP_I16, 1, s2, i16, 4, &err);
    tfp_doc_add(doc, "i32", TFP_I32, 1, s2, i32, 8, &err);
    tfp_doc_add(doc, "i64", TFP_I64, 1, s2, i64, 16, &err);
    tfp_doc_add(doc, "u8", TFP_U8, 1, s2, u8, 2, &err);
    tfp_doc_add(doc, "u16", TFP_U16, 1, s2, u16, 4, &err);
    tfp_doc_add(doc, "u32", TFP_U32, 1, s2, u32, 8, &err);
    tfp_doc_add(doc, "u64", TFP_U64, 1, s2, u64, 16, &err);
    ck_assert_uint_eq(doc->n, 14);
    out = view(doc, 1000);
    ck_assert_str_eq(out,
        "{\"f32\":{\"dtype\":\"F32\",\"shape\":[3],\"data\":[0.100000001,\"NaN\",\"-Infinity\"]},"
        "\"f16\":{\"dtype\":\"F16\",\"shape\":[3],\"data\":[1,\"Infinity\",\"NaN\"]},"
        "\"bf16\":{\"dtype\":\"BF16\",\"shape\":[2],\"data\":[1,3.140625]},"
        "\"e4\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data\":[1,448,\"NaN\",0.001953125]},"
        "\"e5\":{\"dtype\":\"F8_E5M2\",\"shape\":[4],\"data\":[1,\"Infinity\",\"-Infinity\",\"NaN\"]},"
        "\"b\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data\":[false,true]},"
        "\"i8\":{\"dtype\":\"I8\",\"shape\":[2],\"data\":[-128,127]},"
        "\"i16\":{\"dtype\":\"I16\",\"shape\":[2],\"data\":[-32768,7]},"
        "\"i32\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[-2147483648,1]},"
        "\"i64\":{\"dtype\":\"I64\",\"shape\":[2],\"data\":[-9223372036854775808,9223372036854775807]},"
        "\"u8\":{\"dtype\":\"U8\",\"shape\":[2],\"data\":[255,0]},"
        "\"u16\":{\"dtype\":\"U16\",\"shape\":[2],\"data\":[65535,0]},"
        "\"u32\":{\"dtype\":\"U32\",\"shape\":[2],\"data\":[4294967295,0]},"
        "\"u64\":{\"dtype\":\"U64\",\"shape\":[2],\"data\":[18446744073709551615,0]}}");
    free(out);
    tfp_doc_free(doc);
}
END_TEST

START_TEST(jsonview_refuses_big)
{
    tfp_doc_t *doc = tfp_doc_new();
    uint64_t sh[2] = { 2, 2 }, wide[2] = { 1000000, 0 };
    float f[4] = { 0 };
    tfp_err_t err;
    char *out = NULL;
    size_t len;

    tfp_doc_add(doc, "w", TFP_F32, 2, sh, f, 16, &err);
    ck_assert_int_eq(tfp_jsonview_render(doc, 3, &out, &len, &err), TFP_ENOTACCEPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "4 elements are too many for JSON (at most 3)"));
    ck_assert_ptr_null(out);
    ck_assert_int_eq(tfp_jsonview_render(doc, 4, &out, &len, &err), TFP_OK);
    free(out);
    out = NULL;
    /* no elements, but a million empty arrays */
    tfp_doc_add(doc, "e", TFP_F32, 2, wide, NULL, 0, &err);
    ck_assert_int_eq(tfp_jsonview_render(doc, 1000, &out, &len, &err), TFP_ENOTACCEPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "nested arrays"));
    ck_assert_ptr_null(out);
    /* unbound data is refused, not read */
    doc->t[0].data = NULL;
    ck_assert_int_eq(tfp_jsonview_render(doc, UINT64_MAX, &out, &len, &err), TFP_EINVAL);
    tfp_doc_free(doc);
}
END_TEST

START_TEST(float_decoders)
{
    ck_assert(tfp_f16_to_f32(0x3C00) == 1.0f);
    ck_assert(tfp_f16_to_f32(0xC000) == -2.0f);
    ck_assert(tfp_f16_to_f32(0x7BFF) == 65504.0f);
    ck_assert(tfp_f16_to_f32(0x0001) == ldexpf(1, -24));
    ck_assert(tfp_f16_to_f32(0x03FF) == ldexpf(1023, -24));
    ck_assert(tfp_f16_to_f32(0x0400) == ldexpf(1, -14));
    ck_assert(tfp_f16_to_f32(0x3555) == 0.333251953125f);
    ck_assert(tfp_f16_to_f32(0x7C00) == INFINITY);
    ck_assert(tfp_f16_to_f32(0xFC00) == -INFINITY);
    ck_assert(isnan(tfp_f16_to_f32(0x7E00)));
    ck_assert(signbit(tfp_f16_to_f32(0x8000)) && tfp_f16_to_f32(0x8000) == 0);

    ck_assert(tfp_bf16_to_f32(0x3F80) == 1.0f);
    ck_assert(tfp_bf16_to_f32(0xC049) == -3.140625f);
    ck_assert(tfp_bf16_to_f32(0x7F80) == INFINITY);
    ck_assert(isnan(tfp_bf16_to_f32(0x7FC0)));
    ck_assert(tfp_bf16_to_f32(0x0001) == ldexpf(1, -133));

    ck_assert(tfp_f8e4m3_to_f32(0x38) == 1.0f);
    ck_assert(tfp_f8e4m3_to_f32(0x7E) == 448.0f);
    ck_assert(tfp_f8e4m3_to_f32(0xFE) == -448.0f);
    ck_assert(tfp_f8e4m3_to_f32(0x78) == 256.0f);       /* exp 15 is finite in the fn variant */
    ck_assert(isnan(tfp_f8e4m3_to_f32(0x7F)));
    ck_assert(isnan(tfp_f8e4m3_to_f32(0xFF)));
    ck_assert(tfp_f8e4m3_to_f32(0x01) == ldexpf(1, -9));
    ck_assert(tfp_f8e4m3_to_f32(0x08) == ldexpf(1, -6));
    ck_assert(signbit(tfp_f8e4m3_to_f32(0x80)));
    for (int v = 0; v < 256; v++) {
        if ((v & 0x7F) != 0x7F)
            ck_assert(isfinite(tfp_f8e4m3_to_f32((uint8_t)v)));
    }

    ck_assert(tfp_f8e5m2_to_f32(0x3C) == 1.0f);
    ck_assert(tfp_f8e5m2_to_f32(0x7B) == 57344.0f);
    ck_assert(tfp_f8e5m2_to_f32(0x7C) == INFINITY);
    ck_assert(tfp_f8e5m2_to_f32(0xFC) == -INFINITY);
    ck_assert(isnan(tfp_f8e5m2_to_f32(0x7D)));
    ck_assert(isnan(tfp_f8e5m2_to_f32(0xFF)));
    ck_assert(tfp_f8e5m2_to_f32(0x01) == ldexpf(1, -16));

    ck_assert(tfp_f8e8m0_to_f32(0x7F) == 1.0f);
    ck_assert(tfp_f8e8m0_to_f32(0x80) == 2.0f);
    ck_assert(tfp_f8e8m0_to_f32(0x00) == ldexpf(1, -127));
    ck_assert(tfp_f8e8m0_to_f32(0xFE) == ldexpf(1, 127));
    ck_assert(isnan(tfp_f8e8m0_to_f32(0xFF)));

    ck_assert(tfp_f8e4m3fnuz_to_f32(0x40) == 1.0f);     /* bias 8 */
    ck_assert(tfp_f8e4m3fnuz_to_f32(0x7F) == 240.0f);   /* the largest: 1.875 x 2^7 */
    ck_assert(tfp_f8e4m3fnuz_to_f32(0xC0) == -1.0f);
    ck_assert(tfp_f8e4m3fnuz_to_f32(0x01) == ldexpf(1, -10));
    ck_assert(isnan(tfp_f8e4m3fnuz_to_f32(0x80)));      /* the one NaN; no -0 */
    ck_assert(tfp_f8e5m2fnuz_to_f32(0x40) == 1.0f);     /* bias 16 */
    ck_assert(tfp_f8e5m2fnuz_to_f32(0x7F) == 57344.0f);
    ck_assert(tfp_f8e5m2fnuz_to_f32(0x01) == ldexpf(1, -17));
    ck_assert(isnan(tfp_f8e5m2fnuz_to_f32(0x80)));
    for (int v = 0; v < 256; v++) {
        if (v != 0x80) {
            ck_assert(isfinite(tfp_f8e4m3fnuz_to_f32((uint8_t)v)));
            ck_assert(isfinite(tfp_f8e5m2fnuz_to_f32((uint8_t)v)));
        }
    }
}
END_TEST

/* C64 renders as [real, imaginary]; packed F4 has no JSON view. */
START_TEST(jsonview_complex_and_packed)
{
    tfp_doc_t *doc = tfp_doc_new();
    uint64_t two[1] = { 2 };
    float c[4] = { 1.5f, -2, 0, 0.25f };
    uint8_t e8[2] = { 0x7F, 0xFF }, f4 = 0x21;
    tfp_err_t err;
    char *out;

    ck_assert_int_eq(tfp_doc_add(doc, "z", TFP_C64, 1, two, c, sizeof c, &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_add(doc, "s", TFP_F8_E8M0, 1, two, e8, sizeof e8, &err), TFP_OK);
    out = view(doc, 100);
    ck_assert_str_eq(out, "{\"z\":{\"dtype\":\"C64\",\"shape\":[2],\"data\":[[1.5,-2],[0,0.25]]},"
                          "\"s\":{\"dtype\":\"F8_E8M0\",\"shape\":[2],\"data\":[1,\"NaN\"]}}");
    free(out);
    ck_assert_int_eq(tfp_doc_add(doc, "q", TFP_F4, 1, two, &f4, 1, &err), TFP_OK);
    out = NULL;
    size_t len;
    ck_assert_int_eq(tfp_jsonview_render(doc, 100, &out, &len, &err), TFP_ENOTACCEPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "packed F4"));
    ck_assert_ptr_null(out);
    tfp_doc_free(doc);
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

Suite *suite_jsonview(void)
{
    Suite *s = suite_create("jsonview");
    TCase *tc;

    tc = tcase_create("jsonview");
    tcase_add_test(tc, jsonview_examples);
    tcase_add_test(tc, jsonview_types);
    tcase_add_test(tc, jsonview_refuses_big);
    tcase_add_test(tc, float_decoders);
    tcase_add_test(tc, jsonview_complex_and_packed);
    suite_add_tcase(s, tc);

    return s;
}
