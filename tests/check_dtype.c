/* check_dtype.c - the dtype suite: the dtype table (proto/dtype.c): names, sizes and
 * parsing by name.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <string.h>

#include <check.h>

#include "proto/dtype.h"
#include "tests/suites.h"

START_TEST(dtype_table)
{
    tfp_dtype_t dt;

#define X(n, v, b, s)                                                     \
    ck_assert_str_eq(tfp_dtype_name(TFP_##n), s);                         \
    ck_assert_uint_eq(tfp_dtype_bits(TFP_##n), b);                        \
    ck_assert_uint_eq(tfp_dtype_size(TFP_##n), (b) % 8 ? 0 : (b) / 8);    \
    ck_assert(tfp_dtype_valid(TFP_##n));                                  \
    ck_assert_int_eq(tfp_dtype_from_name(s, strlen(s), &dt), 0);          \
    ck_assert_int_eq(dt, TFP_##n);
    TFP_DTYPE_MAP(X)
#undef X
    ck_assert_ptr_null(tfp_dtype_name(TFP_DTYPE_COUNT));
    ck_assert_ptr_null(tfp_dtype_name((tfp_dtype_t)-1));
    ck_assert_uint_eq(tfp_dtype_size(TFP_DTYPE_COUNT), 0);
    ck_assert_uint_eq(tfp_dtype_bits(TFP_DTYPE_COUNT), 0);
    ck_assert(!tfp_dtype_valid(TFP_DTYPE_COUNT));
    ck_assert(!tfp_dtype_valid((tfp_dtype_t)-1));
    ck_assert_int_eq(tfp_dtype_from_name("f32", 3, &dt), -1);
    ck_assert_int_eq(tfp_dtype_from_name("F3", 2, &dt), -1);
    ck_assert_int_eq(tfp_dtype_from_name("F32x", 4, &dt), -1);
    ck_assert_int_eq(tfp_dtype_from_name("F32x", 3, &dt), 0);   /* exactly len bytes */
    ck_assert_int_eq(dt, TFP_F32);
    ck_assert_int_eq(tfp_dtype_from_name(NULL, 0, &dt), -1);
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

/* The rows appended after BOOL: values are a wire contract, names the safetensors ones. */
START_TEST(dtype_newer_rows)
{
    static const struct { const char *name; int value; unsigned bits; } rows[] = {
        { "F8_E8M0", 15, 8 }, { "F4", 16, 4 }, { "F6_E2M3", 17, 6 }, { "F6_E3M2", 18, 6 },
        { "F8_E4M3FNUZ", 19, 8 }, { "F8_E5M2FNUZ", 20, 8 }, { "C64", 21, 64 },
    };
    tfp_dtype_t dt;

    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ck_assert_int_eq(tfp_dtype_from_name(rows[i].name, strlen(rows[i].name), &dt), 0);
        ck_assert_int_eq((int)dt, rows[i].value);
        ck_assert_uint_eq(tfp_dtype_bits(dt), rows[i].bits);
    }
    ck_assert_uint_eq(tfp_dtype_size(TFP_F4), 0);       /* packed: sized by tfp_shape_nbytes */
    ck_assert_uint_eq(tfp_dtype_size(TFP_C64), 8);
}
END_TEST

Suite *suite_dtype(void)
{
    Suite *s = suite_create("dtype");
    TCase *tc;

    tc = tcase_create("dtype");
    tcase_add_test(tc, dtype_table);
    tcase_add_test(tc, dtype_newer_rows);
    suite_add_tcase(s, tc);

    return s;
}
