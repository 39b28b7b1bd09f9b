/* check_answer.c - the answer suite: the typed answer's one table (proto/answer.c): every
 * field renders as its HTTP header and parses back, every field with a UCX place goes into
 * a REPLY's feed block and back, malformed values are refused with nothing set, and the
 * table's rows are sound (distinct headers; every number has a UCX place, the ETag shm's).
 *
 * Single-threaded, no I/O.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <check.h>

#include "proto/answer.h"
#include "tests/suites.h"

START_TEST(answer_round_trips)
{
    tfp_answer_t a, b, c;
    tfp_uf_feed_t f;
    char v[64];
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    memset(&f, 0, sizeof f);
    for (unsigned i = 0; i < TFP_AF_COUNT; i++) {
        if (i == TFP_AF_REPR_DIGEST)
            ck_assert_int_eq(tfp_answer_set_str(&a, (tfp_af_t)i, "sha-256=:47DEQpj8HBSa+/TImW+"
                                                "5JCeuQeRkm5NMpJWZG3hSuFU=:"), 0);
        else if (tfp_answer_fields[i].is_str)
            ck_assert_int_eq(tfp_answer_set_str(&a, (tfp_af_t)i, "\"00000000000000ab-3\""), 0);
        else if (tfp_answer_fields[i].kind == TFP_AK_DUR)   /* at most a day, in us */
            tfp_answer_set_u64(&a, (tfp_af_t)i, 86400000000ull - i);
        else
            tfp_answer_set_u64(&a, (tfp_af_t)i, UINT64_MAX - i);
    }
    for (unsigned i = 0; i < TFP_AF_COUNT; i++) {
        ck_assert_uint_gt(tfp_answer_header_value(&a, (tfp_af_t)i, v, sizeof v), 0);
        ck_assert_int_eq(tfp_answer_header_parse(&b, tfp_answer_fields[i].header, v), 1);
    }
    ck_assert_mem_eq(&a, &b, sizeof a);
    char x[64];
    ck_assert_uint_gt(tfp_answer_header_value(&a, TFP_AF_POSITION, x, sizeof x), 0);
    ck_assert_str_eq(x, "18446744073709551614");
    /* UCX: every number, in the feed block's own place, and back */
    tfp_answer_to_feed(&a, &f);
    ck_assert_uint_eq(f.position, UINT64_MAX - TFP_AF_POSITION);
    ck_assert_uint_eq(f.retry_after, UINT64_MAX - TFP_AF_RETRY_AFTER);
    ck_assert_uint_eq(f.present, TFP_UF_FP_POSITION | TFP_UF_FP_SEQ | TFP_UF_FP_ROUND |
                                 TFP_UF_FP_GENERATION | TFP_UF_FP_DEVICE |
                                 TFP_UF_FP_RETRY_AFTER);
    tfp_answer_from_feed(&f, &c);
    for (unsigned i = 0; i < TFP_AF_COUNT; i++)
        if (tfp_answer_fields[i].uf_present) {
            ck_assert(tfp_answer_has(&c, (tfp_af_t)i));
            ck_assert_uint_eq(c.num[i], a.num[i]);
        }
    ck_assert(!tfp_answer_has(&c, TFP_AF_ETAG));        /* no place in the feed block */
    /* the others as answer lines (UCX's ANSWER block, shm's REPLY), and back */
    char lines[TFP_ANSWER_MAX_LINES + 1];
    tfp_answer_t d;
    memset(&d, 0, sizeof d);
    size_t nl = tfp_answer_lines(&a, ~0u, lines, sizeof lines);
    ck_assert_uint_gt(nl, 0);
    ck_assert(tfp_answer_lines_valid(lines, nl));
    ck_assert_int_eq(tfp_answer_lines_parse(&d, lines, nl), 0);
    ck_assert_mem_eq(&a, &d, sizeof a);
    char want[80];                      /* the server's time: one short line, microseconds */
    snprintf(want, sizeof want, "T: %llu,%llu,%llu,%llu\n",
             (unsigned long long)a.num[TFP_AF_SRV_RECV], (unsigned long long)a.num[TFP_AF_SRV_QUEUE],
             (unsigned long long)a.num[TFP_AF_SRV_HANDLER],
             (unsigned long long)a.num[TFP_AF_SRV_TOTAL]);
    ck_assert_msg(strncmp(lines, want, strlen(want)) == 0, "%s", lines);
    ck_assert_msg(strstr(lines, "Server-Timing") == NULL, "%s", lines);
    /* an absent one is "-"; a malformed line sets nothing, and the lines after it still count */
    memset(&a, 0, sizeof a);
    tfp_answer_set_u64(&a, TFP_AF_SRV_TOTAL, 42);
    nl = tfp_answer_lines(&a, ~0u, lines, sizeof lines);
    ck_assert_str_eq(lines, "T: -,-,-,42\n");
    static const char *const bad_t[] = {"T: 1,2,3\n", "T: 1,2,3,4,5\n", "T: 1,,3,4\n",
                                        "T: 1,2,3,x\n", "T: 1,2,3,86400000001\n", "T: \n"};
    for (size_t i = 0; i < sizeof bad_t / sizeof bad_t[0]; i++) {
        char in[96];
        snprintf(in, sizeof in, "%sTfetch-Seq: 7\n", bad_t[i]);
        memset(&d, 0, sizeof d);
        ck_assert_int_eq(tfp_answer_lines_parse(&d, in, strlen(in)), 0);
        ck_assert_msg(d.present == (1u << TFP_AF_SEQ), "%s: present %#x", bad_t[i], d.present);
        ck_assert_uint_eq(d.num[TFP_AF_SEQ], 7);
    }
    /* a field not set renders nothing, and goes nowhere */
    memset(&a, 0, sizeof a);
    ck_assert_uint_eq(tfp_answer_header_value(&a, TFP_AF_SEQ, v, sizeof v), 0);
    memset(&f, 0, sizeof f);
    tfp_answer_to_feed(&a, &f);
    ck_assert_uint_eq(f.present, 0);
}
END_TEST

START_TEST(answer_refuses)
{
    tfp_answer_t a;
    memset(&a, 0, sizeof a);
    ck_assert_int_eq(tfp_answer_header_parse(&a, "Content-Type", "x"), 0);     /* no field */
    ck_assert_int_eq(tfp_answer_header_parse(&a, "tfetch-seq", "12"), 1);      /* any case */
    ck_assert(tfp_answer_has(&a, TFP_AF_SEQ));
    memset(&a, 0, sizeof a);
    static const char *const bad[][2] = {
        {"Tfetch-Seq", "abc"}, {"Tfetch-Seq", "-1"}, {"Tfetch-Seq", ""},
        {"Tfetch-Round", "18446744073709551616"}, {"Retry-After", "1.5"},
        {"ETag", "W/\"weak\""}, {"ETag", "noquotes"}, {"ETag", "\"a\", \"b\""}, {"ETag", "*"},
        {"ETag", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(tfp_answer_header_parse(&a, bad[i][0], bad[i][1]) == -1, "%s: %s",
                      bad[i][0], bad[i][1]);
        ck_assert_uint_eq(a.present, 0);
    }
    ck_assert_int_eq(tfp_answer_set_str(&a, TFP_AF_SEQ, "\"x\""), -1);   /* not a string */
    tfp_answer_set_u64(&a, TFP_AF_ETAG, 5);                             /* not a number */
    ck_assert_uint_eq(a.present, 0);
}
END_TEST

/* Server-Timing as RFC-style lists: our metrics taken, another server's left, a malformed
 * one of ours refused whole; answer lines refused when they are not "Name: value" lines. */
START_TEST(answer_server_timing)
{
    tfp_answer_t a;
    memset(&a, 0, sizeof a);
    ck_assert_int_eq(tfp_answer_header_parse(&a, "server-timing",
                                             "cache;desc=\"a, b\";dur=1, handler;dur=1.5, "
                                             "tf;dur=12;desc=x, db"), 1);
    ck_assert_uint_eq(a.present, (1u << TFP_AF_SRV_HANDLER) | (1u << TFP_AF_SRV_TOTAL));
    ck_assert_uint_eq(a.num[TFP_AF_SRV_HANDLER], 1500);
    ck_assert_uint_eq(a.num[TFP_AF_SRV_TOTAL], 12000);
    memset(&a, 0, sizeof a);
    ck_assert_int_eq(tfp_answer_header_parse(&a, "Server-Timing", "recv;dur=0.0019999"), 1);
    ck_assert_uint_eq(a.num[TFP_AF_SRV_RECV], 1);      /* microseconds: the rest dropped */
    memset(&a, 0, sizeof a);
    ck_assert_int_eq(tfp_answer_header_parse(&a, "Server-Timing", "cache, db;dur=3"), 0);
    static const char *const bad[] = {"handler", "handler;dur=", "handler;dur=-1",
                                      "handler;dur=1e3", "handler;dur=1.", "handler;dur=.5",
                                      "tf;dur=1, handler;dur=x", "handler;dur=1;dur=2",
                                      "tf;dur=86400001"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(tfp_answer_header_parse(&a, "Server-Timing", bad[i]) == -1, "%s", bad[i]);
        ck_assert_uint_eq(a.present, 0);
    }
    static const char *const badlines[] = {"ETag \"x\"\n", "ETag: x", ": x\n", "A: \x01\n",
                                           "A b: c\n"};
    for (size_t i = 0; i < sizeof badlines / sizeof badlines[0]; i++) {
        ck_assert_msg(!tfp_answer_lines_valid(badlines[i], strlen(badlines[i])), "%s",
                      badlines[i]);
        ck_assert_int_eq(tfp_answer_lines_parse(&a, badlines[i], strlen(badlines[i])), -1);
    }
    /* lines of no field's, or malformed values, are skipped */
    const char *ok = "X-Other: 1\nTfetch-Seq: abc\nTfetch-Round: 7\n";
    ck_assert_int_eq(tfp_answer_lines_parse(&a, ok, strlen(ok)), 0);
    ck_assert_uint_eq(a.present, 1u << TFP_AF_ROUND);
}
END_TEST

START_TEST(answer_table)
{
    for (unsigned i = 0; i < TFP_AF_COUNT; i++) {
        const tfp_af_row_t *r = &tfp_answer_fields[i];
        ck_assert_ptr_nonnull(r->header);
        for (unsigned j = 0; j < i; j++)    /* one header a field, but Server-Timing's */
            if (r->kind != TFP_AK_DUR || tfp_answer_fields[j].kind != TFP_AK_DUR)
                ck_assert_str_ne(r->header, tfp_answer_fields[j].header);
            else
                ck_assert_str_ne(r->metric, tfp_answer_fields[j].metric);
        /* every number travels over UCX: in the feed block, else in the answer lines */
        if (!r->is_str)
            ck_assert((r->uf_present != 0) !=
                      ((tfp_answer_uf_lines_mask() & (1u << i)) != 0));
        ck_assert_int_eq(r->kind == TFP_AK_DUR, r->metric != NULL);
        ck_assert_int_eq(r->kind == TFP_AK_STR, r->is_str);
    }
}
END_TEST

Suite *suite_answer(void)
{
    Suite *s = suite_create("answer");
    TCase *tc = tcase_create("answer");
    tcase_add_test(tc, answer_round_trips);
    tcase_add_test(tc, answer_refuses);
    tcase_add_test(tc, answer_table);
    tcase_add_test(tc, answer_server_timing);
    suite_add_tcase(s, tc);
    return s;
}
