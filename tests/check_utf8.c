/* check_utf8.c - the utf8 suite: proto/utf8.c's decoder, validity check and cut.
 *
 * Well-formed sequences of each length and at each boundary, then what RFC 3629 refuses:
 * overlong forms, surrogates, values above U+10FFFF, stray continuation bytes and sequences
 * cut short. Pure functions; runs in Check's forked children.
 */
#include "config.h"

#include <string.h>

#include "proto/utf8.h"
#include "tests/suites.h"

static size_t next(const char *s, size_t n, uint32_t *cp)
{
    return tfp_utf8_next((const unsigned char *)s, n, cp);
}

START_TEST(utf8_valid_sequences)
{
    static const struct {
        const char *s;
        size_t len;
        uint32_t cp;
    } ok[] = {
        {"A", 1, 0x41},
        {"\x7f", 1, 0x7f},
        {"\xc2\x80", 2, 0x80},                  /* the smallest 2-byte */
        {"\xc3\xa9", 2, 0xe9},
        {"\xdf\xbf", 2, 0x7ff},
        {"\xe0\xa0\x80", 3, 0x800},             /* the smallest 3-byte */
        {"\xe2\x82\xac", 3, 0x20ac},
        {"\xed\x9f\xbf", 3, 0xd7ff},            /* just below the surrogates */
        {"\xee\x80\x80", 3, 0xe000},            /* just above them */
        {"\xef\xbf\xbf", 3, 0xffff},
        {"\xf0\x90\x80\x80", 4, 0x10000},       /* the smallest 4-byte */
        {"\xf0\x9f\x98\x80", 4, 0x1f600},
        {"\xf4\x8f\xbf\xbf", 4, 0x10ffff},      /* the largest code point */
    };

    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint32_t cp = 0;

        ck_assert_uint_eq(next(ok[i].s, strlen(ok[i].s), &cp), ok[i].len);
        ck_assert_uint_eq(cp, ok[i].cp);
        ck_assert_uint_eq(next(ok[i].s, strlen(ok[i].s), NULL), ok[i].len);
        ck_assert_int_eq(tfp_utf8_valid(ok[i].s, strlen(ok[i].s)), 1);
    }
    ck_assert_int_eq(tfp_utf8_valid("", 0), 1);
    {
        const char *mixed = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
        ck_assert_int_eq(tfp_utf8_valid(mixed, strlen(mixed)), 1);
    }
    ck_assert_int_eq(tfp_utf8_valid("a\0b", 3), 1);        /* NUL is a character */
}
END_TEST

START_TEST(utf8_overlong)
{
    static const char *const bad[] = {
        "\xc0\x80",                 /* U+0000 in two bytes */
        "\xc1\xbf",                 /* U+007F in two bytes */
        "\xe0\x80\x80",             /* U+0000 in three */
        "\xe0\x9f\xbf",             /* U+07FF in three */
        "\xf0\x80\x80\x80",         /* U+0000 in four */
        "\xf0\x8f\xbf\xbf",         /* U+FFFF in four */
    };

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_uint_eq(next(bad[i], strlen(bad[i]), NULL), 0);
        ck_assert_int_eq(tfp_utf8_valid(bad[i], strlen(bad[i])), 0);
    }
}
END_TEST

START_TEST(utf8_surrogates)
{
    static const char *const bad[] = {
        "\xed\xa0\x80",             /* U+D800, the first high surrogate */
        "\xed\xaf\xbf",             /* U+DBFF */
        "\xed\xb0\x80",             /* U+DC00, the first low surrogate */
        "\xed\xbf\xbf",             /* U+DFFF */
        "\xed\xa0\xbd\xed\xb8\x80", /* a CESU-8 pair for U+1F600 */
    };

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_uint_eq(next(bad[i], strlen(bad[i]), NULL), 0);
        ck_assert_int_eq(tfp_utf8_valid(bad[i], strlen(bad[i])), 0);
    }
}
END_TEST

START_TEST(utf8_above_max)
{
    static const char *const bad[] = {
        "\xf4\x90\x80\x80",         /* U+110000 */
        "\xf7\xbf\xbf\xbf",         /* U+1FFFFF */
        "\xf5\x80\x80\x80",         /* leads F5..FF never start a character */
        "\xf8\x88\x80\x80\x80",     /* the old 5-byte form */
        "\xfc\x84\x80\x80\x80\x80", /* the old 6-byte form */
        "\xfe",
        "\xff",
    };

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_uint_eq(next(bad[i], strlen(bad[i]), NULL), 0);
        ck_assert_int_eq(tfp_utf8_valid(bad[i], strlen(bad[i])), 0);
    }
}
END_TEST

START_TEST(utf8_truncated_and_stray)
{
    static const char *const bad[] = {
        "\xc3",                     /* a lead with nothing after it */
        "\xe2\x82",
        "\xf0\x9f\x98",
        "\xe2\x82" "A",             /* an ASCII byte where a continuation belongs */
        "\xc3\xc3\xa9",             /* a lead where a continuation belongs */
        "\x80",                     /* a continuation with no lead */
        "\xbf",
        "A\x80",
        "caf\xc3",                  /* cut at the end of a longer text */
    };

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(tfp_utf8_valid(bad[i], strlen(bad[i])) == 0, "case %zu", i);
    /* the bytes readable bound the decoder, not the NUL */
    ck_assert_uint_eq(next("\xe2\x82\xac", 2, NULL), 0);
    ck_assert_uint_eq(next("\xe2\x82\xac", 3, NULL), 3);
    ck_assert_uint_eq(next("A", 0, NULL), 0);
    ck_assert_int_eq(tfp_utf8_valid("\xc3\xa9", 1), 0);
}
END_TEST

START_TEST(utf8_cut)
{
    const char *s = "ab\xc3\xa9\xe2\x82\xac";   /* a b e-acute euro: 1+1+2+3 bytes */
    size_t len = strlen(s);

    ck_assert_uint_eq(tfp_utf8_cut(s, len, 100), len);
    ck_assert_uint_eq(tfp_utf8_cut(s, len, len), len);
    ck_assert_uint_eq(tfp_utf8_cut(s, len, 6), 4);     /* inside the euro: back to its lead */
    ck_assert_uint_eq(tfp_utf8_cut(s, len, 5), 4);
    ck_assert_uint_eq(tfp_utf8_cut(s, len, 4), 4);
    ck_assert_uint_eq(tfp_utf8_cut(s, len, 3), 2);     /* inside the e-acute */
    ck_assert_uint_eq(tfp_utf8_cut(s, len, 2), 2);
    ck_assert_uint_eq(tfp_utf8_cut(s, len, 0), 0);
    ck_assert_uint_eq(tfp_utf8_cut("", 0, 0), 0);
}
END_TEST

Suite *suite_utf8(void)
{
    Suite *s = suite_create("utf8");
    TCase *tc = tcase_create("utf8");

    tcase_add_test(tc, utf8_valid_sequences);
    tcase_add_test(tc, utf8_overlong);
    tcase_add_test(tc, utf8_surrogates);
    tcase_add_test(tc, utf8_above_max);
    tcase_add_test(tc, utf8_truncated_and_stray);
    tcase_add_test(tc, utf8_cut);
    suite_add_tcase(s, tc);
    return s;
}
