/* auth.c - the token file's parser (tokens and cert: lines), the Authorization header's,
 * the client certificate's key, and the rights matcher (see auth.h). SHA-256 and the constant-time comparison are nettle's (already on every
 * system with libmicrohttpd's GnuTLS). Pure; any thread.
 */
#include "config.h"
#include "proto/auth.h"

#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const right_names[] = {
#define X(n, s) s,
    TFP_RIGHT_MAP(X)
#undef X
};

const char *tfp_right_name(int right)
{
    return right >= 0 && right < TFP_RIGHT_COUNT ? right_names[right] : "?";
}

int tfp_auth_equal(const void *a, const void *b, size_t n)
{
    return n == 0 || memeql_sec(a, b, n) != 0;
}

void tfp_auth_hash(const char *token, size_t len, uint8_t out[TFP_AUTH_HASH_LEN])
{
    struct sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, len, (const uint8_t *)token);
    sha256_digest(&h, TFP_AUTH_HASH_LEN, out);
}

/* A certificate subject's byte as the token file spells it (see auth.h): 1 if it is kept. */
static int subject_char(unsigned char ch)
{
    return ch > ' ' && ch != 0x7f;
}

void tfp_auth_cert_hash(const char *dn, uint8_t out[TFP_AUTH_HASH_LEN])
{
    static const char hex[] = "0123456789ABCDEF";
    struct sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, 5, (const uint8_t *)"cert:");
    const unsigned char *s = (const unsigned char *)dn;
    while (*s) {
        size_t run = 0;                 /* kept bytes, hashed as one piece */
        while (s[run] && subject_char(s[run]) && !(s[run] == '\\' && s[run + 1] == ' ')) {
            if (s[run] == '\\' && subject_char(s[run + 1]))
                run++;                  /* an escape pair is kept whole */
            run++;
        }
        sha256_update(&h, run, s);
        s += run;
        if (!*s)
            break;
        if (*s == '\\')
            s++;                        /* "\ ": the escaped space, spelled \20 like any */
        char esc[3] = {'\\', hex[*s >> 4], hex[*s & 15]};
        sha256_update(&h, 3, (const uint8_t *)esc);
        s++;
    }
    sha256_digest(&h, TFP_AUTH_HASH_LEN, out);
}

static int b64token_char(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '.' || ch == '_' || ch == '~' || ch == '+' || ch == '/';
}

int tfp_auth_token_valid(const char *s, size_t n)
{
    if (n == 0 || n > TFP_AUTH_MAX_TOKEN)
        return 0;
    size_t i = 0;
    while (i < n && b64token_char(s[i]))
        i++;
    if (i == 0)
        return 0;
    while (i < n && s[i] == '=')
        i++;
    return i == n;
}

static int pattern_char(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '.' || ch == '_' || ch == '/';
}

int tfp_auth_pattern_match(const char *pattern, const char *name)
{
    size_t n = strlen(pattern);
    if (n && pattern[n - 1] == '*')
        return strncmp(pattern, name, n - 1) == 0;
    return strcmp(pattern, name) == 0;
}

int tfp_token_allows(const tfp_token_t *tok, tfp_right_t right, const char *name)
{
    if (!tok || !name)
        return 0;
    for (size_t i = 0; i < tok->ngrants; i++)
        if (tok->grants[i].right == right && tfp_auth_pattern_match(tok->grants[i].pattern, name))
            return 1;
    return 0;
}

int tfp_token_has_right(const tfp_token_t *tok, tfp_right_t right)
{
    if (!tok)
        return 0;
    for (size_t i = 0; i < tok->ngrants; i++)
        if (tok->grants[i].right == right)
            return 1;
    return 0;
}

const tfp_token_t *tfp_tokens_find(const tfp_tokens_t *t, const uint8_t hash[TFP_AUTH_HASH_LEN])
{
    if (!t || t->n == 0)
        return NULL;
    size_t lo = 0, hi = t->n;           /* the first entry not below hash */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (memcmp(t->tokens[mid].hash, hash, TFP_AUTH_HASH_LEN) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == t->n)
        return NULL;
    return tfp_auth_equal(t->tokens[lo].hash, hash, TFP_AUTH_HASH_LEN) ? &t->tokens[lo] : NULL;
}

static int by_hash(const void *a, const void *b)
{
    const tfp_token_t *x = a, *y = b;
    int c = memcmp(x->hash, y->hash, TFP_AUTH_HASH_LEN);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

void tfp_tokens_free(tfp_tokens_t *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        free(t->tokens[i].grants);
    free(t->tokens);
    t->tokens = NULL;
    t->n = 0;
    t->ncerts = 0;
}

/* The next space-separated field of [*p, end): its start and length; 0 at the end. */
static int next_field(const char **p, const char *end, const char **f, size_t *n)
{
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    if (s == end)
        return 0;
    const char *e = s;
    while (e < end && *e != ' ' && *e != '\t')
        e++;
    *f = s;
    *n = (size_t)(e - s);
    *p = e;
    return 1;
}

/* Parses one right, "KIND:PATTERN". 0, or -1 with err set. */
static int parse_grant(const char *f, size_t n, unsigned line, size_t nth, tfp_grant_t *g,
                       tfp_err_t *err)
{
    const char *colon = memchr(f, ':', n);
    if (!colon) {                   /* not echoed: it may be a token in the wrong place */
        tfp_err_set(err, TFP_EINVAL, "line %u: a right is KIND:PATTERN (right %zu is not)",
                    line, nth + 1);
        return -1;
    }
    size_t kn = (size_t)(colon - f);
    int kind = -1;
    for (int i = 0; i < TFP_RIGHT_COUNT; i++)
        if (strlen(right_names[i]) == kn && memcmp(right_names[i], f, kn) == 0)
            kind = i;
    if (kind < 0) {
        int word = kn > 0 && kn <= 16;      /* echoed only when it looks like a misspelling */
        for (size_t i = 0; word && i < kn; i++)
            word = f[i] >= 'a' && f[i] <= 'z';
        tfp_err_set(err, TFP_EINVAL, "line %u: unknown right '%.*s' (read, write, delete, call, "
                    "serve, produce, consume, forward or admin)", line, word ? (int)kn : 1,
                    word ? f : "?");
        return -1;
    }
    const char *pat = colon + 1;
    size_t pn = n - kn - 1;
    int ok = pn > 0 && pn <= TFP_MAX_TENSOR_NAME + 1;
    for (size_t i = 0; ok && i < pn; i++)
        ok = pattern_char(pat[i]) || (pat[i] == '*' && i == pn - 1);
    if (!ok) {
        tfp_err_set(err, TFP_EINVAL, "line %u: right %s: the pattern must be a name of "
                    "[A-Za-z0-9._/-], a '*' only at its end", line, right_names[kind]);
        return -1;
    }
    g->right = (tfp_right_t)kind;
    memcpy(g->pattern, pat, pn);
    g->pattern[pn] = '\0';
    return 0;
}

/* A cert: line's subject, [f, f + n) with the "cert:" prefix: 0, or -1 with err set. */
static int check_subject(const char *f, size_t n, unsigned line, tfp_err_t *err)
{
    const char *subj = f + 5;
    size_t sn = n - 5;
    int ok = sn > 0 && sn <= TFP_AUTH_MAX_SUBJECT && memchr(subj, '=', sn) != NULL;
    for (size_t i = 0; ok && i < sn; i++)
        if (subj[i] == '\\')
            ok = ++i < sn;              /* an escape needs what it escapes */
    if (!ok) {
        tfp_err_set(err, TFP_EINVAL, "line %u: cert: needs a subject DN (CN=...,O=...; a space "
                    "written \\20) of 1 to %u bytes", line, TFP_AUTH_MAX_SUBJECT);
        return -1;
    }
    return 0;
}

/* Parses one line's fields into *tok. 1 for a token or a cert: line, 0 for a blank or
 * comment line, -1 with err set. */
static int parse_line(const char *s, const char *end, unsigned line, tfp_token_t *tok,
                      tfp_err_t *err)
{
    if (end > s && end[-1] == '\r')
        end--;
    const char *p = s, *f;
    size_t n;
    /* A cert: line's subject may hold a '#' (RFC 4514 escapes one that starts a value): the
     * comment can start only after it. */
    int cert = next_field(&p, end, &f, &n) && n >= 5 && memcmp(f, "cert:", 5) == 0;
    const char *hash = memchr(cert ? p : s, '#', (size_t)(end - (cert ? p : s)));
    if (hash)
        end = hash;
    p = s;
    if (!next_field(&p, end, &f, &n))
        return 0;
    if (cert) {
        if (check_subject(f, n, line, err) != 0)
            return -1;
        tfp_auth_hash(f, n, tok->hash);         /* "cert:SUBJECT": tfp_auth_cert_hash's key */
        tok->cert = 1;
    } else if (!tfp_auth_token_valid(f, n)) {
        tfp_err_set(err, TFP_EINVAL, "line %u: the token must be 1 to %u characters of "
                    "[A-Za-z0-9-._~+/] then '='s", line, TFP_AUTH_MAX_TOKEN);
        return -1;
    } else {
        tfp_auth_hash(f, n, tok->hash);
    }
    char principal[TFP_MAX_USER_ID + 2];
    if (!next_field(&p, end, &f, &n)) {
        tfp_err_set(err, TFP_EINVAL, "line %u: a %s needs a principal and rights", line,
                    cert ? "certificate" : "token");
        return -1;
    }
    snprintf(principal, sizeof principal, "%.*s", (int)(n > TFP_MAX_USER_ID + 1 ? TFP_MAX_USER_ID + 1 : n), f);
    if (n > TFP_MAX_USER_ID || !tfp_user_id_valid(principal)) {
        tfp_err_set(err, TFP_EINVAL, "line %u: the principal must match [A-Za-z0-9._-]{1,128}",
                    line);
        return -1;
    }
    memcpy(tok->principal, principal, n + 1);
    const char *rest = p;
    size_t count = 0;
    while (next_field(&p, end, &f, &n))
        count++;
    if (count == 0) {
        tfp_err_set(err, TFP_EINVAL, "line %u: principal %s has no rights", line, tok->principal);
        return -1;
    }
    if (!(tok->grants = calloc(count, sizeof *tok->grants))) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return -1;
    }
    p = rest;
    while (next_field(&p, end, &f, &n)) {
        if (parse_grant(f, n, line, tok->ngrants, &tok->grants[tok->ngrants], err) != 0)
            return -1;
        tok->ngrants++;
    }
    return 1;
}

tfp_status_t tfp_tokens_parse(const char *text, size_t len, tfp_tokens_t *out, tfp_err_t *err)
{
    memset(out, 0, sizeof *out);
    size_t cap = 0;
    unsigned line = 0;
    const char *s = text, *end = text + len;
    while (s < end) {
        line++;
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        if (memchr(s, '\0', (size_t)(le - s))) {
            tfp_err_set(err, TFP_EINVAL, "line %u: a NUL byte", line);
            goto fail;
        }
        if (le - s > TFP_AUTH_MAX_LINE) {
            tfp_err_set(err, TFP_EINVAL, "line %u: longer than %u bytes", line, TFP_AUTH_MAX_LINE);
            goto fail;
        }
        tfp_token_t tok;
        memset(&tok, 0, sizeof tok);
        int rc = parse_line(s, le, line, &tok, err);
        if (rc < 0) {
            free(tok.grants);
            goto fail;
        }
        if (rc > 0) {
            tok.line = line;
            if (out->n == cap) {
                size_t nc = cap ? cap * 2 : 8;
                tfp_token_t *nt = realloc(out->tokens, nc * sizeof *nt);
                if (!nt) {
                    free(tok.grants);
                    tfp_err_set(err, TFP_ENOMEM, "out of memory");
                    goto fail;
                }
                out->tokens = nt;
                cap = nc;
            }
            out->tokens[out->n++] = tok;
            out->ncerts += (size_t)tok.cert;
        }
        s = nl ? nl + 1 : end;
    }
    if (out->n)
        qsort(out->tokens, out->n, sizeof *out->tokens, by_hash);
    for (size_t i = 1; i < out->n; i++)
        if (memcmp(out->tokens[i - 1].hash, out->tokens[i].hash, TFP_AUTH_HASH_LEN) == 0) {
            tfp_err_set(err, TFP_EINVAL, "line %u: this %s is given on an earlier line (%u)",
                        out->tokens[i].line, out->tokens[i].cert ? "certificate subject" : "token",
                        out->tokens[i - 1].line);
            goto fail;
        }
    return TFP_OK;
fail:
    tfp_tokens_free(out);
    return err->code;
}

tfp_bearer_t tfp_bearer_parse(const char *value, const char **tok, size_t *len)
{
    if (!value)
        return TFP_BEARER_NONE;
    const char *s = value;
    while (*s == ' ' || *s == '\t')
        s++;
    if (strncasecmp(s, "Bearer", 6) != 0 || (s[6] != ' ' && s[6] != '\t'))
        return TFP_BEARER_BAD;
    s += 6;
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = 0;
    while (s[n] && s[n] != ' ' && s[n] != '\t')
        n++;
    const char *e = s + n;
    while (*e == ' ' || *e == '\t')
        e++;
    if (*e || !tfp_auth_token_valid(s, n))
        return TFP_BEARER_BAD;
    *tok = s;
    *len = n;
    return TFP_BEARER_OK;
}

/* ---- the principal's proof in a UCX HELLO ------------------------------------------------ */

void tfp_auth_hello_proof(const uint8_t token_hash[TFP_AUTH_HASH_LEN], const char *up_token,
                          char out[TFP_AUTH_PROOF_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    struct sha256_ctx h;
    uint8_t d[TFP_AUTH_HASH_LEN];
    sha256_init(&h);
    sha256_update(&h, TFP_AUTH_HASH_LEN, token_hash);
    sha256_update(&h, strlen(up_token), (const uint8_t *)up_token);
    sha256_digest(&h, sizeof d, d);
    for (int i = 0; i < TFP_AUTH_HASH_LEN; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[TFP_AUTH_PROOF_LEN] = '\0';
}

tfp_status_t tfp_auth_hello_split(const char *msg, size_t n, size_t *ident_len,
                                  char proof[TFP_AUTH_PROOF_LEN + 1])
{
    proof[0] = '\0';
    *ident_len = n;
    const char *first = msg ? memchr(msg, ' ', n) : NULL;
    if (!first)
        return TFP_OK;                  /* no identity at all: its parser says so */
    size_t rest = n - (size_t)(first + 1 - msg);
    const char *second = memchr(first + 1, ' ', rest);
    if (!second)
        return TFP_OK;                  /* "boot_id netns" */
    size_t ilen = (size_t)(second - msg), plen = n - ilen - 1;
    if (plen != TFP_AUTH_PROOF_LEN)
        return TFP_EPROTO;
    for (size_t i = 0; i < plen; i++) {
        char ch = second[1 + i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
            return TFP_EPROTO;
    }
    memcpy(proof, second + 1, plen);
    proof[plen] = '\0';
    *ident_len = ilen;
    return TFP_OK;
}

int tfp_auth_proof_equal(const char *a, const char *b)
{
    if (strlen(a) != TFP_AUTH_PROOF_LEN || strlen(b) != TFP_AUTH_PROOF_LEN)
        return 0;
    return tfp_auth_equal(a, b, TFP_AUTH_PROOF_LEN);
}
