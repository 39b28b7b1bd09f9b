/* check_ids.c - the ids suite: ids (proto/ids.c): name, route and request id validation and
 * the u64 parser; the keyed hash of client-chosen keys (proto/keyhash.c).
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <xxhash.h>

#include "proto/ids.h"
#include "proto/keyhash.h"
#include "proto/le.h"
#include "proto/xxh3_avx2.h"
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

/* Every byte, one at a time, against the rule as the docs write it (the validator reads a
 * table of classes). */
START_TEST(ids_every_byte)
{
    for (int c = 1; c < 256; c++) {
        char s[4] = {'a', (char)c, 'b', '\0'};
        int id = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        ck_assert_msg(tfp_name_valid(s) == id, "name with byte %d", c);
        ck_assert_msg(tfp_user_id_valid(s) == id, "user id with byte %d", c);
        ck_assert_msg(tfp_request_id_valid(s) == (id || c == ':'), "request id with byte %d", c);
    }
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

/* ---- keyhash ---------------------------------------------------------------------------- */

/* SipHash-2-4 against the paper's vectors (key 00..0f; messages 00.., 0 and 15 bytes long;
 * appendix A and the reference vectors), so the rounds, the padding and the finalization are
 * right; the 1-3 variant tables use is the same code with fewer rounds, keyed per table. */
START_TEST(keyhash_vectors)
{
    tfp_hashkey_t k = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
    uint8_t m[64];
    for (int i = 0; i < 64; i++)
        m[i] = (uint8_t)i;
    ck_assert_uint_eq(tfp_siphash(&k, m, 0, 2, 4), 0x726fdb47dd0e0e31ull);
    ck_assert_uint_eq(tfp_siphash(&k, m, 15, 2, 4), 0xa129ca6149be45e5ull);
    ck_assert_uint_eq(tfp_siphash(&k, m, 8, 2, 4), 0x93f5f5799a932462ull);
    ck_assert_uint_eq(tfp_keyhash(&k, m, 15), tfp_siphash(&k, m, 15, 1, 3));
    ck_assert_uint_ne(tfp_keyhash(&k, m, 15), tfp_siphash(&k, m, 15, 2, 4));
    /* Every length, and the key, changes the hash. */
    tfp_hashkey_t k2;
    (void)tfp_hashkey_new(&k2);         /* -1 without getrandom: still a different key */
    for (size_t n = 0; n < 63; n++) {
        ck_assert_uint_ne(tfp_keyhash(&k, m, n), tfp_keyhash(&k, m, n + 1));
        ck_assert_uint_ne(tfp_keyhash(&k, m, n), tfp_keyhash(&k2, m, n));
    }
    /* The body digest: every length, every byte of a stripe or of the tail, and the key. */
    uint8_t big[200];
    for (int i = 0; i < 200; i++)
        big[i] = (uint8_t)(i * 7);
    for (size_t n = 0; n < 199; n++) {
        ck_assert_uint_ne(tfp_bodyhash(&k, big, n), tfp_bodyhash(&k, big, n + 1));
        ck_assert_uint_ne(tfp_bodyhash(&k, big, n + 1), tfp_bodyhash(&k2, big, n + 1));
    }
    for (size_t i = 0; i < 200; i++) {
        uint64_t h = tfp_bodyhash(&k, big, 200);
        big[i] ^= 1;
        ck_assert_uint_ne(tfp_bodyhash(&k, big, 200), h);
        big[i] ^= 1;
        ck_assert_uint_eq(tfp_bodyhash(&k, big, 200), h);
    }
}
END_TEST

/* The body digest's XXH3 is libxxhash's, whichever build of it ran (xxh3_avx2.c on a CPU
 * with AVX2): every one of XXH3's paths (0, 1-3, 4-8, 9-16, 17-128, 129-240 bytes, then
 * stripes, blocks of 1 KiB and a tail) gives the library's value. */
START_TEST(bodyhash_is_xxh3)
{
    tfp_hashkey_t k = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
    size_t cap = (1u << 20) + 4100;
    uint8_t *b = malloc(cap);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < cap; i++)
        b[i] = (uint8_t)(i * 131 + (i >> 9));
    static const size_t lens[] = {0, 1, 3, 4, 8, 9, 16, 17, 100, 128, 129, 200, 240, 241,
                                  255, 256, 1023, 1024, 1025, 4096, 65537, (1u << 20) + 4099};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        XXH128_hash_t h = XXH3_128bits_withSeed(b + 1, lens[i], k.k0 ^ k.k1);
        uint8_t fin[24];
        tfp_le64_put(fin, h.low64);
        tfp_le64_put(fin + 8, h.high64);
        tfp_le64_put(fin + 16, (uint64_t)lens[i]);
        ck_assert_uint_eq(tfp_bodyhash(&k, b + 1, lens[i]), tfp_siphash(&k, fin, sizeof fin, 1, 3));
        uint64_t x[2];
        if (tfp_xxh3_avx2(b, lens[i], 42, x)) {         /* unaligned above, aligned here */
            XXH128_hash_t r = XXH3_128bits_withSeed(b, lens[i], 42);
            ck_assert_uint_eq(x[0], r.low64);
            ck_assert_uint_eq(x[1], r.high64);
        }
    }
    free(b);
}
END_TEST

Suite *suite_ids(void)
{
    Suite *s = suite_create("ids");
    TCase *tc;

    tc = tcase_create("ids");
    tcase_add_test(tc, ids_validation);
    tcase_add_test(tc, ids_every_byte);
    tcase_add_test(tc, ids_parse_u64);
    tcase_add_test(tc, keyhash_vectors);
    tcase_add_test(tc, bodyhash_is_xxh3);
    suite_add_tcase(s, tc);

    return s;
}
