/* check_doc.c - the doc suite: the document model (proto/doc.c): adding and finding
 * tensors, metadata, and the shape arithmetic.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "proto/doc.h"
#include "proto/dtype.h"
#include "proto/status.h"
#include "tests/suites.h"

/* ---- doc model ----------------------------------------------------------------------- */

START_TEST(doc_add_and_find)
{
    tfp_doc_t *doc = tfp_doc_new();
    uint64_t sh[2] = { 2, 3 }, big[2] = { UINT64_C(1) << 54, 0 };
    float d[6] = { 0 };
    char longname[TFP_MAX_NAME + 2];
    tfp_err_t err;

    ck_assert_ptr_nonnull(doc);
    ck_assert_int_eq(tfp_doc_add(doc, "w", TFP_F32, 2, sh, d, 24, &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_add(doc, "w", TFP_F32, 2, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "already"));
    ck_assert_int_eq(tfp_doc_add(doc, "", TFP_F32, 2, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "empty"));
    ck_assert_int_eq(tfp_doc_add(doc, "__metadata__", TFP_F32, 2, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_add(doc, "\xff", TFP_F32, 2, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "UTF-8"));
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ck_assert_int_eq(tfp_doc_add(doc, longname, TFP_U8, 0, NULL, d, 1, &err), TFP_EINVAL);
    longname[TFP_MAX_NAME] = '\0';
    ck_assert_int_eq(tfp_doc_add(doc, longname, TFP_U8, 0, NULL, d, 1, &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_add(doc, "x", TFP_F32, 2, sh, d, 23, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_add(doc, "x", TFP_F32, 9, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_add(doc, "x", TFP_F32, -1, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_add(doc, "x", TFP_DTYPE_COUNT, 2, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_add(doc, "x", TFP_F32, 2, big, d, 0, &err), TFP_ERANGE);
    ck_assert_int_eq(tfp_doc_add(doc, "z", TFP_F32, 2, NULL, d, 0, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_add(NULL, "z", TFP_F32, 0, NULL, d, 4, &err), TFP_EINVAL);
    ck_assert_uint_eq(doc->n, 2);
    ck_assert_ptr_eq(tfp_doc_find(doc, "w"), &doc->t[0]);
    ck_assert_ptr_eq(tfp_doc_find(doc, "w")->data, d);
    ck_assert_ptr_null(tfp_doc_find(doc, "nope"));
    ck_assert_uint_eq(tfp_doc_data_bytes(doc), 25);
    ck_assert_uint_eq(tfp_doc_data_bytes(NULL), 0);
    tfp_doc_free(doc);
    tfp_doc_free(NULL);
}
END_TEST

START_TEST(doc_meta)
{
    tfp_doc_t *doc = tfp_doc_new();
    tfp_err_t err;

    ck_assert_int_eq(tfp_doc_set_meta(doc, "k", "v1", &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_set_meta(doc, "k", "v2", &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_set_meta(doc, "", "empty key", &err), TFP_OK);
    ck_assert_uint_eq(doc->nmeta, 2);
    ck_assert_str_eq(tfp_doc_meta(doc, "k"), "v2");
    ck_assert_str_eq(tfp_doc_meta(doc, ""), "empty key");
    ck_assert_ptr_null(tfp_doc_meta(doc, "x"));
    ck_assert_int_eq(tfp_doc_set_meta(doc, "k", "\xc3", &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_set_meta(doc, "\xc3", "v", &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_set_meta(doc, NULL, "v", &err), TFP_EINVAL);
    ck_assert_str_eq(tfp_doc_meta(doc, "k"), "v2");
    tfp_doc_free(doc);
}
END_TEST

START_TEST(shape_arithmetic)
{
    uint64_t c, b;
    uint64_t s1[3] = { 2, 3, 4 }, s0[3] = { UINT64_C(1) << 40, UINT64_C(1) << 40, 0 };
    uint64_t so[2] = { UINT64_C(1) << 32, UINT64_C(1) << 32 };
    uint64_t sb[2] = { UINT64_C(1) << 31, UINT64_C(1) << 31 };
    tfp_err_t err;

    ck_assert_int_eq(tfp_shape_count(3, s1, &c, &err), TFP_OK);
    ck_assert_uint_eq(c, 24);
    ck_assert_int_eq(tfp_shape_count(0, NULL, &c, &err), TFP_OK);
    ck_assert_uint_eq(c, 1);
    ck_assert_int_eq(tfp_shape_count(3, s0, &c, &err), TFP_OK);
    ck_assert_uint_eq(c, 0);
    ck_assert_int_eq(tfp_shape_count(2, so, &c, &err), TFP_ERANGE);
    ck_assert_int_eq(tfp_shape_count(9, s1, &c, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_shape_nbytes(TFP_F64, 3, s1, &b, &err), TFP_OK);
    ck_assert_uint_eq(b, 192);
    ck_assert_int_eq(tfp_shape_nbytes(TFP_F64, 2, sb, &b, &err), TFP_ERANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "byte size"));
    ck_assert_int_eq(tfp_shape_nbytes(TFP_U8, 2, sb, &b, &err), TFP_OK);
    ck_assert_int_eq(tfp_shape_nbytes(TFP_DTYPE_COUNT, 2, sb, &b, &err), TFP_EINVAL);
    {   /* packed: F4 two per byte, F6 four in three bytes, no overflow near 2^64 bits */
        uint64_t n3[1] = { 3 }, n4[1] = { 4 }, n8[1] = { 8 };
        uint64_t big[2] = { UINT64_C(1) << 62, 2 };
        ck_assert_int_eq(tfp_shape_nbytes(TFP_F4, 1, n4, &b, &err), TFP_OK);
        ck_assert_uint_eq(b, 2);
        ck_assert_int_eq(tfp_shape_nbytes(TFP_F4, 1, n3, &b, &err), TFP_EINVAL);
        ck_assert_ptr_nonnull(strstr(err.msg, "do not fill whole bytes"));
        ck_assert_int_eq(tfp_shape_nbytes(TFP_F6_E2M3, 1, n4, &b, &err), TFP_OK);
        ck_assert_uint_eq(b, 3);
        ck_assert_int_eq(tfp_shape_nbytes(TFP_F6_E3M2, 1, n8, &b, &err), TFP_OK);
        ck_assert_uint_eq(b, 6);
        ck_assert_int_eq(tfp_shape_nbytes(TFP_F4, 2, big, &b, &err), TFP_OK);
        ck_assert_uint_eq(b, UINT64_C(1) << 62);
        ck_assert_int_eq(tfp_shape_nbytes(TFP_C64, 2, big, &b, &err), TFP_ERANGE);
    }
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

Suite *suite_doc(void)
{
    Suite *s = suite_create("doc");
    TCase *tc;

    tc = tcase_create("doc");
    tcase_add_test(tc, doc_add_and_find);
    tcase_add_test(tc, doc_meta);
    tcase_add_test(tc, shape_arithmetic);
    suite_add_tcase(s, tc);

    return s;
}
