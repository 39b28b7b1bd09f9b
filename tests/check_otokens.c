/* check_otokens.c - unit suite "otokens": the one-time token table the UCX upgrade and the
 * shm socket admit clients with (daemon/otokens.c): single use, expiry, a lookup that finds
 * exactly the token issued (not a prefix, not one differing in a byte), the per-owner quota
 * that keeps one principal from starving the others, the table's own bound, and thousands
 * of tokens found through the hash table.
 */
#include "config.h"
#include "tests/suites.h"
#include "daemon/otokens.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    int n;
    char who[16];
} pay_t;

static tfd_otok_result_t issue(tfd_otokens_t *t, const char *owner, int n, uint64_t now,
                               char tok[TFP_UP_TOKEN_LEN + 1], uint64_t *retry)
{
    pay_t p = {n, ""};
    snprintf(p.who, sizeof p.who, "%s", owner);
    return tfd_otokens_issue(t, owner, &p, now, 1000, tok, retry);
}

START_TEST(otokens_single_use_and_exact)
{
    tfd_otokens_t *t = tfd_otokens_new(16, sizeof(pay_t), 0);
    ck_assert_ptr_nonnull(t);
    char tok[TFP_UP_TOKEN_LEN + 1], other[TFP_UP_TOKEN_LEN + 1];
    ck_assert_int_eq(issue(t, "alice", 7, 100, tok, NULL), TFD_OTOK_OK);
    ck_assert_int_eq(issue(t, "bob", 8, 100, other, NULL), TFD_OTOK_OK);
    ck_assert_uint_eq(strlen(tok), TFP_UP_TOKEN_LEN);
    ck_assert_str_ne(tok, other);
    /* a prefix, one byte changed, nothing: not found */
    char probe[TFP_UP_TOKEN_LEN + 1];
    memcpy(probe, tok, sizeof probe);
    probe[TFP_UP_TOKEN_LEN - 1] = '\0';
    ck_assert_ptr_null(tfd_otokens_find(t, probe, 200));
    memcpy(probe, tok, sizeof probe);
    probe[TFP_UP_TOKEN_LEN - 1] = probe[TFP_UP_TOKEN_LEN - 1] == '0' ? '1' : '0';
    ck_assert_ptr_null(tfd_otokens_find(t, probe, 200));
    ck_assert_ptr_null(tfd_otokens_find(t, "", 200));
    pay_t *p = tfd_otokens_find(t, tok, 200);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(p->n, 7);
    ck_assert_str_eq(tfd_otokens_owner(t, p), "alice");
    tfd_otokens_take(t, p);
    ck_assert_ptr_null(tfd_otokens_find(t, tok, 200));         /* single use */
    p = tfd_otokens_find(t, other, 200);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(p->n, 8);
    /* expired: gone */
    ck_assert_ptr_null(tfd_otokens_find(t, other, 1100));
    ck_assert_uint_eq(tfd_otokens_count(t, NULL, 1100), 0);
    tfd_otokens_free(t);
}
END_TEST

/* One owner at its quota is refused (with the time until its first token expires) while
 * another still gets tokens; a token taken or expired makes room again. */
START_TEST(otokens_quota_per_owner)
{
    tfd_otokens_t *t = tfd_otokens_new(64, sizeof(pay_t), 3);
    char tok[4][TFP_UP_TOKEN_LEN + 1];
    uint64_t retry = 0;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(issue(t, "alice", i, 100 + (uint64_t)i, tok[i], NULL), TFD_OTOK_OK);
    ck_assert_int_eq(issue(t, "alice", 3, 300, tok[3], &retry), TFD_OTOK_QUOTA);
    ck_assert_uint_eq(retry, 800);          /* her first expires at 1100 */
    ck_assert_int_eq(issue(t, "bob", 0, 300, tok[3], NULL), TFD_OTOK_OK);
    ck_assert_uint_eq(tfd_otokens_count(t, "alice", 300), 3);
    ck_assert_uint_eq(tfd_otokens_count(t, "bob", 300), 1);
    tfd_otokens_take(t, tfd_otokens_find(t, tok[1], 300));
    ck_assert_int_eq(issue(t, "alice", 4, 300, tok[1], NULL), TFD_OTOK_OK);
    ck_assert_int_eq(issue(t, "alice", 5, 300, tok[3], NULL), TFD_OTOK_QUOTA);
    ck_assert_int_eq(issue(t, "alice", 5, 1100, tok[3], NULL), TFD_OTOK_OK);   /* 1st expired */
    tfd_otokens_set_quota(t, 0);                                               /* no limit */
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(issue(t, "alice", i, 1100, tok[3], NULL), TFD_OTOK_OK);
    tfd_otokens_free(t);
}
END_TEST

/* The table's own bound, and many tokens found through the hash table's chains. */
START_TEST(otokens_full_and_many)
{
    enum { N = 4096 };
    tfd_otokens_t *t = tfd_otokens_new(N, sizeof(pay_t), 0);
    static char toks[N][TFP_UP_TOKEN_LEN + 1];
    char extra[TFP_UP_TOKEN_LEN + 1];
    uint64_t retry = 0;
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(issue(t, i % 2 ? "a" : "b", i, 10 + (uint64_t)i / 8, toks[i], NULL),
                         TFD_OTOK_OK);      /* issued from 10 to 521: none expired by 1000 */
    ck_assert_int_eq(issue(t, "c", 0, 1000, extra, &retry), TFD_OTOK_FULL);
    ck_assert_uint_eq(retry, 10);           /* the first expires at 1010 */
    for (int i = N - 1; i >= 0; i -= 3) {
        pay_t *p = tfd_otokens_find(t, toks[i], 1000);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(p->n, i);
        tfd_otokens_take(t, p);
    }
    for (int i = 0; i < N; i++) {
        pay_t *p = tfd_otokens_find(t, toks[i], 1000);
        if ((N - 1 - i) % 3 == 0)
            ck_assert_ptr_null(p);
        else
            ck_assert_msg(p && p->n == i, "token %d", i);
    }
    tfd_otokens_free(t);
}
END_TEST

Suite *suite_otokens(void)
{
    Suite *s = suite_create("otokens");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, otokens_single_use_and_exact);
    tcase_add_test(tc, otokens_quota_per_owner);
    tcase_add_test(tc, otokens_full_and_many);
    suite_add_tcase(s, tc);
    return s;
}
