/* check_base64.c - the base64 suite: proto/base64.c against RFC 4648 and its strictness.
 *
 * The test vectors of RFC 4648 section 10 both ways, then every way a text can fail to be
 * canonical base64 (length, alphabet, padding position, padding bits), the size bound and
 * argument checks. Pure functions; runs in Check's forked children.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "proto/base64.h"
#include "tests/suites.h"

/* RFC 4648 section 10. */
static const struct {
    const char *plain, *coded;
} rfc4648[] = {
    {"", ""},
    {"f", "Zg=="},
    {"fo", "Zm8="},
    {"foo", "Zm9v"},
    {"foob", "Zm9vYg=="},
    {"fooba", "Zm9vYmE="},
    {"foobar", "Zm9vYmFy"},
};

START_TEST(b64_rfc4648_encode)
{
    for (size_t i = 0; i < sizeof rfc4648 / sizeof rfc4648[0]; i++) {
        size_t n = strlen(rfc4648[i].plain), len = 99;
        char *e = tfp_b64_encode(rfc4648[i].plain, n, &len);

        ck_assert_ptr_nonnull(e);
        ck_assert_str_eq(e, rfc4648[i].coded);
        ck_assert_uint_eq(len, strlen(rfc4648[i].coded));
        ck_assert_uint_eq(tfp_b64_len(n), len);
        free(e);
    }
}
END_TEST

START_TEST(b64_rfc4648_decode)
{
    for (size_t i = 0; i < sizeof rfc4648 / sizeof rfc4648[0]; i++) {
        const char *c = rfc4648[i].coded;
        uint8_t *d = NULL;
        size_t len = 99;
        tfp_err_t err;

        ck_assert_int_eq(tfp_b64_decode(c, strlen(c), 64, &d, &len, &err), TFP_OK);
        ck_assert_ptr_nonnull(d);
        ck_assert_uint_eq(len, strlen(rfc4648[i].plain));
        ck_assert(memcmp(d, rfc4648[i].plain, len) == 0);
        free(d);
    }
}
END_TEST

START_TEST(b64_every_byte)
{
    uint8_t all[256], *d = NULL;
    size_t len = 0;
    tfp_err_t err;

    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    char *e = tfp_b64_encode(all, sizeof all, NULL);
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(strlen(e), tfp_b64_len(sizeof all));
    ck_assert_int_eq(tfp_b64_decode(e, strlen(e), sizeof all, &d, &len, &err), TFP_OK);
    ck_assert_uint_eq(len, sizeof all);
    ck_assert(memcmp(d, all, sizeof all) == 0);
    free(d);
    free(e);
}
END_TEST

START_TEST(b64_rejects_bad_text)
{
    static const struct {
        const char *s;
        const char *why;            /* a part of the message */
    } bad[] = {
        {"Zg=", "not a multiple of 4"},
        {"Zm9vY", "not a multiple of 4"},
        {"Zm 9", "invalid character at offset 2"},
        {"Zm9v\n", "not a multiple of 4"},
        {"Zm9v\nZm9", "invalid character at offset 4"},
        {"Zm-_", "invalid character at offset 2"},        /* the URL-safe alphabet */
        {"Z===", "invalid character at offset 1"},        /* three pads */
        {"Zg=a", "invalid character at offset 2"},        /* a pad before data */
        {"Zg==Zm9v", "invalid character at offset 2"},    /* padding in the middle */
        {"=Zm9", "invalid character at offset 0"},
        {"Zh==", "non-zero padding bits at offset 1"},    /* 'h' leaves bits set */
        {"Zm9=", "non-zero padding bits at offset 2"},
        {"Zm\xc3\xa9", "invalid character at offset 2"},  /* not ASCII */
    };

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *d = (uint8_t *)"untouched";
        size_t len = 7;
        tfp_err_t err;

        ck_assert_int_eq(tfp_b64_decode(bad[i].s, strlen(bad[i].s), 100, &d, &len, &err),
                         TFP_EPROTO);
        ck_assert_msg(strstr(err.msg, bad[i].why) != NULL, "\"%s\": %s", bad[i].s, err.msg);
        ck_assert_str_eq((const char *)d, "untouched");
        ck_assert_uint_eq(len, 7);
    }
    {
        uint8_t *d = NULL;
        size_t len;
        tfp_err_t err;

        /* an embedded NUL is a character outside the alphabet, not the end */
        ck_assert_int_eq(tfp_b64_decode("Zm\0v", 4, 100, &d, &len, &err), TFP_EPROTO);
    }
}
END_TEST

START_TEST(b64_bounds_and_arguments)
{
    uint8_t *d = NULL;
    size_t len = 0;
    tfp_err_t err;

    ck_assert_int_eq(tfp_b64_decode("Zm9v", 4, 3, &d, &len, &err), TFP_OK);
    free(d);
    ck_assert_int_eq(tfp_b64_decode("Zm9v", 4, 2, &d, &len, &err), TFP_ETOOBIG);
    ck_assert_int_eq(tfp_b64_decode("Zm8=", 4, 2, &d, &len, &err), TFP_OK);
    ck_assert_uint_eq(len, 2);
    free(d);
    ck_assert_int_eq(tfp_b64_decode(NULL, 4, 100, &d, &len, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_b64_decode("Zm9v", 4, 100, NULL, &len, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_b64_decode("Zm9v", 4, 100, &d, NULL, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_b64_decode("Zm9v", 4, 100, &d, &len, NULL), TFP_OK);  /* err optional */
    free(d);
    ck_assert_ptr_null(tfp_b64_encode(NULL, 1, NULL));
    ck_assert_uint_eq(tfp_b64_len(0), 0);
    ck_assert_uint_eq(tfp_b64_len(1), 4);
    ck_assert_uint_eq(tfp_b64_len(2), 4);
    ck_assert_uint_eq(tfp_b64_len(3), 4);
    ck_assert_uint_eq(tfp_b64_len(4), 8);
}
END_TEST

Suite *suite_base64(void)
{
    Suite *s = suite_create("base64");
    TCase *tc = tcase_create("base64");

    tcase_add_test(tc, b64_rfc4648_encode);
    tcase_add_test(tc, b64_rfc4648_decode);
    tcase_add_test(tc, b64_every_byte);
    tcase_add_test(tc, b64_rejects_bad_text);
    tcase_add_test(tc, b64_bounds_and_arguments);
    suite_add_tcase(s, tc);
    return s;
}
