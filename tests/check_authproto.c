/* check_authproto.c - unit suite "auth": the token file parser (fields, rights, patterns, the
 * errors with their line numbers, duplicates, cert: lines and their subjects' spelling), the
 * hash lookup, the rights matcher and the Authorization header's parser (proto/auth.c), and
 * what tfp_http_op_parse takes from them (a bearer token before a client certificate).
 */
#include "config.h"
#include "tests/suites.h"
#include "proto/auth.h"
#include "proto/http.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static tfp_status_t parse(const char *text, tfp_tokens_t *t, tfp_err_t *err)
{
    return tfp_tokens_parse(text, strlen(text), t, err);
}

static const tfp_token_t *find(const tfp_tokens_t *t, const char *token)
{
    uint8_t h[TFP_AUTH_HASH_LEN];
    tfp_auth_hash(token, strlen(token), h);
    return tfp_tokens_find(t, h);
}

START_TEST(test_parse_file)
{
    tfp_tokens_t t;
    tfp_err_t err = {0};
    const char *text = "# tokens\n"
                       "\n"
                       "tka-1f2e3d alice read:a/* write:a/* delete:a/* call:*   # alice\n"
                       "  tkb_XYZ==\tbob  read:bob.*\tserve:echo\r\n"
                       "tkc carol admin:*";
    ck_assert_int_eq(parse(text, &t, &err), TFP_OK);
    ck_assert_uint_eq(t.n, 3);
    const tfp_token_t *a = find(&t, "tka-1f2e3d");
    ck_assert_ptr_nonnull(a);
    ck_assert_str_eq(a->principal, "alice");
    ck_assert_uint_eq(a->ngrants, 4);
    ck_assert_int_eq(a->grants[3].right, TFP_RIGHT_CALL);
    ck_assert_str_eq(a->grants[3].pattern, "*");
    const tfp_token_t *b = find(&t, "tkb_XYZ==");
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(b->principal, "bob");
    ck_assert_str_eq(b->grants[1].pattern, "echo");
    ck_assert_ptr_nonnull(find(&t, "tkc"));
    ck_assert_ptr_null(find(&t, "tka-1f2e3"));      /* a prefix of a token is no token */
    ck_assert_ptr_null(find(&t, "tka-1f2e3d "));
    ck_assert_ptr_null(find(&t, "alice"));
    tfp_tokens_free(&t);
    ck_assert_int_eq(parse("", &t, &err), TFP_OK);  /* empty: nobody is let in */
    ck_assert_uint_eq(t.n, 0);
    ck_assert_ptr_null(find(&t, "x"));
    tfp_tokens_free(&t);
}
END_TEST

/* Each error names its line and never echoes the token. */
START_TEST(test_parse_errors)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"tok alice\n", "line 1: principal alice has no rights"},
        {"# c\ntok\n", "line 2: a token needs a principal"},
        {"\n\ntok alice rede:x\n", "line 3: unknown right 'rede'"},
        {"tok alice read\n", "line 1: a right is KIND:PATTERN"},
        {"tok alice read:\n", "line 1: right read: the pattern"},
        {"tok alice read:a*b\n", "line 1: right read: the pattern"},
        {"tok alice read:a b:c\n", "line 1: unknown right 'b'"},
        {"tok alice read:a secret-1\n", "line 1: a right is KIND:PATTERN (right 2 is not)"},
        {"tok alice secret-1:x\n", "line 1: unknown right '?'"},
        {"tok al:ice read:x\n", "line 1: the principal must match"},
        {"t\"k alice read:x\n", "line 1: the token must be"},
        {"tk=a alice read:x\n", "line 1: the token must be"},
        {"=== alice read:x\n", "line 1: the token must be"},
        {"secret-1 alice read:x\nsecret-1 bob read:y\n", "line 2: this token is given on an "
                                                         "earlier line"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tfp_tokens_t t;
        tfp_err_t err = {0};
        ck_assert_int_eq(parse(cases[i].text, &t, &err), TFP_EINVAL);
        ck_assert_msg(strstr(err.msg, cases[i].want), "case %zu: '%s'", i, err.msg);
        ck_assert_msg(!strstr(err.msg, "secret-1") && !strstr(err.msg, "tk=a"), "%s", err.msg);
        ck_assert_uint_eq(t.n, 0);
        ck_assert_ptr_null(t.tokens);
    }
    /* a NUL byte, an over-long token, an over-long principal */
    tfp_tokens_t t;
    tfp_err_t err = {0};
    ck_assert_int_eq(tfp_tokens_parse("a b read:x\nt\0k b read:x\n", 24, &t, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "line 2: a NUL byte"));
    char big[TFP_AUTH_MAX_TOKEN + 40];
    memset(big, 'k', TFP_AUTH_MAX_TOKEN + 1);
    strcpy(big + TFP_AUTH_MAX_TOKEN + 1, " a read:x");
    ck_assert_int_eq(parse(big, &t, &err), TFP_EINVAL);
    memset(big, 'k', TFP_AUTH_MAX_TOKEN);
    strcpy(big + TFP_AUTH_MAX_TOKEN, " a read:x");
    ck_assert_int_eq(parse(big, &t, &err), TFP_OK);
    tfp_tokens_free(&t);
    char principal[200] = "tok ";
    memset(principal + 4, 'p', TFP_MAX_USER_ID + 1);
    strcpy(principal + 4 + TFP_MAX_USER_ID + 1, " read:x");
    ck_assert_int_eq(parse(principal, &t, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "principal must match"));
}
END_TEST

START_TEST(test_match)
{
    ck_assert(tfp_auth_pattern_match("*", ""));
    ck_assert(tfp_auth_pattern_match("*", "anything"));
    ck_assert(tfp_auth_pattern_match("alice.*", "alice.w"));
    ck_assert(tfp_auth_pattern_match("alice.*", "alice."));
    ck_assert(!tfp_auth_pattern_match("alice.*", "alice"));
    ck_assert(!tfp_auth_pattern_match("alice.*", "bob.w"));
    ck_assert(tfp_auth_pattern_match("echo", "echo"));
    ck_assert(!tfp_auth_pattern_match("echo", "echo2"));
    ck_assert(!tfp_auth_pattern_match("echo", "ech"));
    tfp_tokens_t t;
    tfp_err_t err = {0};
    ck_assert_int_eq(parse("tk alice read:alice.* write:alice.w call:echo serve:ec*\n", &t, &err),
                     TFP_OK);
    const tfp_token_t *a = find(&t, "tk");
    ck_assert(tfp_token_allows(a, TFP_RIGHT_READ, "alice.x"));
    ck_assert(!tfp_token_allows(a, TFP_RIGHT_READ, "bob.x"));
    ck_assert(!tfp_token_allows(a, TFP_RIGHT_WRITE, "alice.x"));   /* the right, not the name */
    ck_assert(tfp_token_allows(a, TFP_RIGHT_WRITE, "alice.w"));
    ck_assert(!tfp_token_allows(a, TFP_RIGHT_DELETE, "alice.w"));
    ck_assert(tfp_token_allows(a, TFP_RIGHT_CALL, "echo"));
    ck_assert(!tfp_token_allows(a, TFP_RIGHT_CALL, "echoes"));
    ck_assert(tfp_token_allows(a, TFP_RIGHT_SERVE, "echoes"));
    ck_assert(!tfp_token_allows(a, TFP_RIGHT_ADMIN, ""));
    ck_assert(!tfp_token_allows(NULL, TFP_RIGHT_READ, "alice.x"));
    ck_assert(tfp_token_has_right(a, TFP_RIGHT_SERVE));
    ck_assert(!tfp_token_has_right(a, TFP_RIGHT_PRODUCE));
    tfp_tokens_free(&t);
    ck_assert_str_eq(tfp_right_name(TFP_RIGHT_FORWARD), "forward");
    ck_assert_str_eq(tfp_right_name(TFP_RIGHT_COUNT), "?");
}
END_TEST

/* Many tokens: each found as itself (the sorted table's search), nothing else found, and a
 * duplicate far from its first line named with both lines. */
START_TEST(test_many_tokens)
{
    static char text[400 * 64];
    char *p = text;
    for (int i = 0; i < 400; i++)
        p += sprintf(p, "tok-%d user%d read:u%d.*\n", i, i, i);
    tfp_tokens_t t;
    tfp_err_t err = {0};
    ck_assert_int_eq(parse(text, &t, &err), TFP_OK);
    ck_assert_uint_eq(t.n, 400);
    for (int i = 0; i < 400; i++) {
        char tok[32], who[32];
        snprintf(tok, sizeof tok, "tok-%d", i);
        snprintf(who, sizeof who, "user%d", i);
        const tfp_token_t *k = find(&t, tok);
        ck_assert_ptr_nonnull(k);
        ck_assert_str_eq(k->principal, who);
        ck_assert_uint_eq(k->line, (unsigned)i + 1);
        snprintf(tok, sizeof tok, "tok-%d", i + 400);
        ck_assert_ptr_null(find(&t, tok));
    }
    tfp_tokens_free(&t);
    p += sprintf(p, "tok-7 mallory read:*\n");
    ck_assert_int_eq(parse(text, &t, &err), TFP_EINVAL);
    ck_assert_str_eq(err.msg, "line 401: this token is given on an earlier line (8)");
    ck_assert_uint_eq(t.n, 0);
}
END_TEST

/* SHA-256 itself (FIPS 180-2's "abc"), so a token file's hashes mean what they say. */
START_TEST(test_hash)
{
    static const uint8_t abc[32] = {
        0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde, 0x5d, 0xae,
        0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61,
        0xf2, 0x00, 0x15, 0xad};
    uint8_t h[TFP_AUTH_HASH_LEN];
    tfp_auth_hash("abc", 3, h);
    ck_assert_mem_eq(h, abc, 32);
}
END_TEST

/* Nanoseconds of the fastest of reps comparisons of a and b (n bytes). */
static uint64_t fastest(const uint8_t *a, const uint8_t *b, size_t n, int reps, int *eq)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < reps; i++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        *eq += tfp_auth_equal(a, b, n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        uint64_t ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u +
                      (uint64_t)(t1.tv_nsec - t0.tv_nsec);
        if (ns < best)
            best = ns;
    }
    return best;
}

/* tfp_auth_equal, how secrets and their hashes are compared: right answers, and a time that
 * does not depend on where the bytes differ (a memcmp or strcmp returns at the first
 * difference: over 64 KiB, a difference at byte 0 then costs a small fraction of one at the
 * last byte; here both cost the same, so the fastest of many runs of each are close). */
START_TEST(test_equal_constant_time)
{
    static uint8_t a[1 << 16], b[1 << 16];
    memset(a, 0x5a, sizeof a);
    memcpy(b, a, sizeof b);
    ck_assert_int_eq(tfp_auth_equal(a, b, sizeof a), 1);
    ck_assert_int_eq(tfp_auth_equal(a, b, 0), 1);
    b[sizeof b - 1] ^= 1;
    ck_assert_int_eq(tfp_auth_equal(a, b, sizeof a), 0);
    ck_assert_int_eq(tfp_auth_equal(a, b, sizeof a - 1), 1);
    b[sizeof b - 1] ^= 1;
    b[0] ^= 0x80;
    ck_assert_int_eq(tfp_auth_equal(a, b, sizeof a), 0);
    ck_assert_int_eq(tfp_auth_equal("tok", "tok", 3), 1);
    ck_assert_int_eq(tfp_auth_equal("tok", "toc", 3), 0);
    int eq = 0;
    uint64_t first = fastest(a, b, sizeof a, 200, &eq);         /* differs at byte 0 */
    b[0] ^= 0x80;
    b[sizeof b - 1] ^= 1;
    uint64_t last = fastest(a, b, sizeof a, 200, &eq);          /* differs at the end */
    ck_assert_int_eq(eq, 0);
    ck_assert_msg(first * 2 >= last, "a difference at byte 0 took %llu ns, at the last byte "
                  "%llu ns: the comparison stops early", (unsigned long long)first,
                  (unsigned long long)last);
}
END_TEST

START_TEST(test_bearer)
{
    const char *tok = NULL;
    size_t n = 0;
    ck_assert_int_eq(tfp_bearer_parse(NULL, &tok, &n), TFP_BEARER_NONE);
    ck_assert_int_eq(tfp_bearer_parse("Bearer abc-1", &tok, &n), TFP_BEARER_OK);
    ck_assert_uint_eq(n, 5);
    ck_assert_mem_eq(tok, "abc-1", 5);
    ck_assert_int_eq(tfp_bearer_parse("  bearer\t x/y+z==  ", &tok, &n), TFP_BEARER_OK);
    ck_assert_uint_eq(n, 7);
    ck_assert_mem_eq(tok, "x/y+z==", 7);
    ck_assert_int_eq(tfp_bearer_parse("Basic YWxpY2U6eA==", &tok, &n), TFP_BEARER_BAD);
    ck_assert_int_eq(tfp_bearer_parse("Bearer", &tok, &n), TFP_BEARER_BAD);
    ck_assert_int_eq(tfp_bearer_parse("Bearer ", &tok, &n), TFP_BEARER_BAD);
    ck_assert_int_eq(tfp_bearer_parse("Bearerabc", &tok, &n), TFP_BEARER_BAD);
    ck_assert_int_eq(tfp_bearer_parse("Bearer a b", &tok, &n), TFP_BEARER_BAD);
    ck_assert_int_eq(tfp_bearer_parse("Bearer a\"b", &tok, &n), TFP_BEARER_BAD);
    ck_assert_int_eq(tfp_bearer_parse("Bearer =a", &tok, &n), TFP_BEARER_BAD);
    ck_assert_int_eq(tfp_bearer_parse("", &tok, &n), TFP_BEARER_BAD);
}
END_TEST

/* tfp_http_op_parse keeps the token's hash, never the token, and refuses nothing for it. */
START_TEST(test_http_op)
{
    tfp_http_req_t in = {.method = "GET", .path = "/v1/tensors/w", .content_length = -1,
                         .authorization = "Bearer s3cret"};
    tfp_op_t op;
    tfp_op_err_t e;
    ck_assert_int_eq(tfp_http_op_parse(&in, &op, &e), TFP_OK);
    ck_assert_int_eq(op.who.cred, TFP_CRED_BEARER);
    uint8_t h[TFP_AUTH_HASH_LEN];
    tfp_auth_hash("s3cret", 6, h);
    ck_assert_mem_eq(op.who.token_hash, h, 32);
    ck_assert(!memmem(&op, sizeof op, "s3cret", 6));
    ck_assert_str_eq(op.who.principal, "");
    in.authorization = "Basic x";
    ck_assert_int_eq(tfp_http_op_parse(&in, &op, &e), TFP_OK);
    ck_assert_int_eq(op.who.cred, TFP_CRED_BAD);
    in.authorization = NULL;
    ck_assert_int_eq(tfp_http_op_parse(&in, &op, &e), TFP_OK);
    ck_assert_int_eq(op.who.cred, TFP_CRED_NONE);
    ck_assert_str_eq(op.who.user_principal, "");
    /* Tfetch-User-Principal: shaped like a user id, else 400 */
    in.user_principal = "team.x";
    ck_assert_int_eq(tfp_http_op_parse(&in, &op, &e), TFP_OK);
    ck_assert_str_eq(op.who.user_principal, "team.x");
    const char *bad[] = {"", "a/b", "a b", "\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        in.user_principal = bad[i];
        ck_assert_int_ne(tfp_http_op_parse(&in, &op, &e), TFP_OK);
        ck_assert_int_eq(e.code, TFP_EBADREQ);
        ck_assert_msg(strstr(e.msg, "Tfetch-User-Principal"), "%s", e.msg);
    }
}
END_TEST

/* cert: lines sit beside tokens: looked up by the subject's key, never by a token, a '#'
 * inside the subject kept, the comment after it dropped. */
START_TEST(test_cert_lines)
{
    tfp_tokens_t t;
    tfp_err_t err = {0};
    const char *text = "tka alice read:a.*\n"
                       "cert:CN=alice,O=ml alice read:a.* write:a.*  # alice's laptop\n"
                       "  cert:CN=Bob\\20Smith,O=ml\tbob read:b.*\r\n"
                       "cert:CN=\\#hash,O=ml carol read:c.*#comment\n";
    ck_assert_int_eq(parse(text, &t, &err), TFP_OK);
    ck_assert_uint_eq(t.n, 4);
    ck_assert_uint_eq(t.ncerts, 3);
    uint8_t h[TFP_AUTH_HASH_LEN];
    tfp_auth_cert_hash("CN=alice,O=ml", h);
    const tfp_token_t *a = tfp_tokens_find(&t, h);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->cert, 1);
    ck_assert_str_eq(a->principal, "alice");
    ck_assert_uint_eq(a->ngrants, 2);
    ck_assert(tfp_token_allows(a, TFP_RIGHT_WRITE, "a.w"));
    ck_assert(!tfp_token_allows(a, TFP_RIGHT_WRITE, "b.w"));
    ck_assert_int_eq(find(&t, "tka")->cert, 0);
    /* no bearer token can be the key's text (a ':' is no b64token character), and a subject
     * is no token */
    const char *tok;
    size_t tn;
    ck_assert_int_eq(tfp_bearer_parse("Bearer cert:CN=alice,O=ml", &tok, &tn), TFP_BEARER_BAD);
    ck_assert_ptr_null(find(&t, "CN=alice,O=ml"));
    tfp_auth_cert_hash("CN=alice,O=ml2", h);
    ck_assert_ptr_null(tfp_tokens_find(&t, h));
    tfp_auth_cert_hash("CN=Alice,O=ml", h);         /* exact: case counts */
    ck_assert_ptr_null(tfp_tokens_find(&t, h));
    tfp_auth_cert_hash("CN=Bob Smith,O=ml", h);
    ck_assert_str_eq(tfp_tokens_find(&t, h)->principal, "bob");
    tfp_auth_cert_hash("CN=\\#hash,O=ml", h);
    const tfp_token_t *c = tfp_tokens_find(&t, h);
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(c->principal, "carol");
    ck_assert_uint_eq(c->ngrants, 1);
    tfp_tokens_free(&t);
    ck_assert_uint_eq(t.ncerts, 0);
}
END_TEST

/* How a subject DN is spelled in the file: spaces (escaped or not) and control bytes as \XX,
 * escape pairs kept whole, so two different subjects never share a key. */
START_TEST(test_cert_spelling)
{
    static const struct {
        const char *dn, *file;
    } same[] = {
        {"CN=a b,O=ml", "cert:CN=a\\20b,O=ml"},
        {"CN=\\ a,O=ml", "cert:CN=\\20a,O=ml"},           /* RFC 4514's escaped leading space */
        {"CN=a\\ ", "cert:CN=a\\20"},
        {"CN=a\tb", "cert:CN=a\\09b"},
        {"CN=a\\,b", "cert:CN=a\\,b"},
        {"CN=a\\\\b", "cert:CN=a\\\\b"},
        {"CN=\xc3\xa9t\xc3\xa9", "cert:CN=\xc3\xa9t\xc3\xa9"},
        {"CN=x\x7f", "cert:CN=x\\7F"},
    };
    uint8_t h[TFP_AUTH_HASH_LEN], w[TFP_AUTH_HASH_LEN];
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        tfp_auth_cert_hash(same[i].dn, h);
        tfp_auth_hash(same[i].file, strlen(same[i].file), w);
        ck_assert_msg(memcmp(h, w, sizeof h) == 0, "case %zu: %s", i, same[i].file);
    }
    /* a literal backslash before "20" is not a space */
    uint8_t sp[TFP_AUTH_HASH_LEN];
    tfp_auth_cert_hash("CN=a b", sp);
    tfp_auth_cert_hash("CN=a\\\\20b", h);
    ck_assert(memcmp(h, sp, sizeof h) != 0);
    tfp_auth_cert_hash("CN=a\\ ", sp);                /* escaped trailing space */
    tfp_auth_cert_hash("CN=a\\\\20", h);             /* a backslash, then "20" */
    ck_assert(memcmp(h, sp, sizeof h) != 0);
}
END_TEST

/* A bad cert: line is an error naming its line, like a bad token line. */
START_TEST(test_cert_errors)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"cert: alice read:x\n", "line 1: cert: needs a subject DN"},
        {"tok a read:x\ncert:alice alice read:x\n", "line 2: cert: needs a subject DN"},
        {"cert:CN=a\\ alice read:x\n", "line 1: cert: needs a subject DN"},
        {"cert:CN=a\n", "line 1: a certificate needs a principal"},
        {"cert:CN=a alice\n", "line 1: principal alice has no rights"},
        {"cert:CN=a al/ice read:x\n", "line 1: the principal must match"},
        {"cert:CN=a alice rede:x\n", "line 1: unknown right 'rede'"},
        {"cert:CN=a alice read:x\n\ncert:CN=a bob read:y\n",
         "line 3: this certificate subject is given on an earlier line (1)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tfp_tokens_t t;
        tfp_err_t err = {0};
        ck_assert_int_eq(parse(cases[i].text, &t, &err), TFP_EINVAL);
        ck_assert_msg(strstr(err.msg, cases[i].want), "case %zu: '%s'", i, err.msg);
        ck_assert_uint_eq(t.n, 0);
    }
    char big[TFP_AUTH_MAX_SUBJECT + 64] = "cert:CN=";
    memset(big + 8, 'x', TFP_AUTH_MAX_SUBJECT - 3);
    strcpy(big + 8 + TFP_AUTH_MAX_SUBJECT - 3, " a read:x");
    tfp_tokens_t t;
    tfp_err_t err = {0};
    ck_assert_int_eq(parse(big, &t, &err), TFP_OK);             /* 1024 bytes: the most */
    tfp_tokens_free(&t);
    memset(big + 8, 'x', TFP_AUTH_MAX_SUBJECT - 2);
    strcpy(big + 8 + TFP_AUTH_MAX_SUBJECT - 2, " a read:x");
    ck_assert_int_eq(parse(big, &t, &err), TFP_EINVAL);
}
END_TEST

/* A bearer token decides; without one a verified certificate; a bad one is said so. */
START_TEST(test_http_op_cert)
{
    tfp_http_req_t in = {.method = "GET", .path = "/v1/tensors/w", .content_length = -1,
                         .cert_subject = "CN=alice,O=ml"};
    tfp_op_t op;
    tfp_op_err_t e;
    uint8_t h[TFP_AUTH_HASH_LEN];
    ck_assert_int_eq(tfp_http_op_parse(&in, &op, &e), TFP_OK);
    ck_assert_int_eq(op.who.cred, TFP_CRED_CERT);
    tfp_auth_cert_hash("CN=alice,O=ml", h);
    ck_assert_mem_eq(op.who.token_hash, h, 32);
    in.authorization = "Bearer s3cret";
    ck_assert_int_eq(tfp_http_op_parse(&in, &op, &e), TFP_OK);
    ck_assert_int_eq(op.who.cred, TFP_CRED_BEARER);
    tfp_auth_hash("s3cret", 6, h);
    ck_assert_mem_eq(op.who.token_hash, h, 32);
    in.authorization = "Basic x";                   /* sent, and bad: no fall back */
    ck_assert_int_eq(tfp_http_op_parse(&in, &op, &e), TFP_OK);
    ck_assert_int_eq(op.who.cred, TFP_CRED_BAD);
    in.authorization = NULL;
    in.cert_subject = NULL;
    in.cert_bad = 1;
    ck_assert_int_eq(tfp_http_op_parse(&in, &op, &e), TFP_OK);
    ck_assert_int_eq(op.who.cred, TFP_CRED_CERT_BAD);
}
END_TEST

/* The HELLO proof: bound to both the bearer token and the upgrade token; the split accepts
 * "boot_id netns" alone or with exactly 64 lowercase hex digits after one more space. */
START_TEST(test_hello_proof)
{
    uint8_t ha[TFP_AUTH_HASH_LEN], hb[TFP_AUTH_HASH_LEN];
    tfp_auth_hash("tka", 3, ha);
    tfp_auth_hash("tkb", 3, hb);
    char p1[TFP_AUTH_PROOF_LEN + 1], p2[TFP_AUTH_PROOF_LEN + 1], p3[TFP_AUTH_PROOF_LEN + 1];
    tfp_auth_hello_proof(ha, "0123456789abcdef0123456789abcdef", p1);
    tfp_auth_hello_proof(hb, "0123456789abcdef0123456789abcdef", p2);
    tfp_auth_hello_proof(ha, "1123456789abcdef0123456789abcdef", p3);
    ck_assert_uint_eq(strlen(p1), TFP_AUTH_PROOF_LEN);
    ck_assert(tfp_auth_proof_equal(p1, p1));
    ck_assert(!tfp_auth_proof_equal(p1, p2));       /* another principal */
    ck_assert(!tfp_auth_proof_equal(p1, p3));       /* another upgrade token */
    ck_assert(!tfp_auth_proof_equal(p1, ""));
    ck_assert(!tfp_auth_proof_equal("", ""));

    const char *id = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0 net:[4026531840]";
    char msg[256], proof[TFP_AUTH_PROOF_LEN + 1];
    size_t n;
    ck_assert_int_eq(tfp_auth_hello_split(id, strlen(id), &n, proof), TFP_OK);
    ck_assert_uint_eq(n, strlen(id));
    ck_assert_str_eq(proof, "");
    snprintf(msg, sizeof msg, "%s %s", id, p1);
    ck_assert_int_eq(tfp_auth_hello_split(msg, strlen(msg), &n, proof), TFP_OK);
    ck_assert_uint_eq(n, strlen(id));
    ck_assert_str_eq(proof, p1);
    /* hostile: short, long, upper case, not hex, an empty proof, three spaces */
    const char *bad[] = {"%s %.63s", "%s %s0", "%s %.63sA", "%s %.63sg", "%s ", "%s %s %s"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(msg, sizeof msg, bad[i], id, p1, p1);
        ck_assert_msg(tfp_auth_hello_split(msg, strlen(msg), &n, proof) == TFP_EPROTO, "%s",
                      msg);
        ck_assert_str_eq(proof, "");
    }
    /* no space at all: left to the identity parser */
    ck_assert_int_eq(tfp_auth_hello_split("x", 1, &n, proof), TFP_OK);
}
END_TEST

Suite *suite_auth(void)
{
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_parse_file);
    tcase_add_test(tc, test_parse_errors);
    tcase_add_test(tc, test_match);
    tcase_add_test(tc, test_many_tokens);
    tcase_add_test(tc, test_hash);
    tcase_add_test(tc, test_equal_constant_time);
    tcase_add_test(tc, test_bearer);
    tcase_add_test(tc, test_http_op);
    tcase_add_test(tc, test_hello_proof);
    tcase_add_test(tc, test_cert_lines);
    tcase_add_test(tc, test_cert_spelling);
    tcase_add_test(tc, test_cert_errors);
    tcase_add_test(tc, test_http_op_cert);
    suite_add_tcase(s, tc);
    return s;
}
