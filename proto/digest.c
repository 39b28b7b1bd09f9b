/* digest.c - RFC 9530 digest fields (see digest.h).
 *
 * A small strict reader of the Structured Fields dictionary subset these fields use: keys
 * (lcalpha or '*', then lcalpha, digits, '_', '-', '.', '*'), values that are byte sequences
 * (digests) or integers (Want- weights), and parameters (';' key ['=' bare item]) that are
 * skipped. Pure; any thread.
 */
#include "proto/digest.h"

#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/base64.h"

typedef enum { V_NONE, V_BYTES, V_INT } vkind_t;

typedef struct {
    const char *s;
    size_t i, n;
} rd_t;

static void ows(rd_t *r)
{
    while (r->i < r->n && (r->s[r->i] == ' ' || r->s[r->i] == '\t'))
        r->i++;
}

static int key_char(char c, int first)
{
    if ((c >= 'a' && c <= 'z') || c == '*')
        return 1;
    return !first && ((c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.');
}

/* A key: [start, end) in r->s; 0 when none. */
static int key(rd_t *r, size_t *start, size_t *end)
{
    *start = r->i;
    if (r->i >= r->n || !key_char(r->s[r->i], 1))
        return 0;
    while (r->i < r->n && key_char(r->s[r->i], 0))
        r->i++;
    *end = r->i;
    return 1;
}

/* A bare item after '=': a byte sequence (:b64:) into [*vs, *ve), or an integer into *iv,
 * or (for parameters) a token or a string, which is skipped. -1 when malformed. */
static int item(rd_t *r, vkind_t *kind, size_t *vs, size_t *ve, long *iv)
{
    const char *s = r->s;
    if (r->i < r->n && s[r->i] == ':') {
        *vs = ++r->i;
        while (r->i < r->n && s[r->i] != ':')
            r->i++;
        if (r->i >= r->n)
            return -1;
        *ve = r->i++;
        *kind = V_BYTES;
        return 0;
    }
    if (r->i < r->n && (s[r->i] == '-' || (s[r->i] >= '0' && s[r->i] <= '9'))) {
        int neg = s[r->i] == '-';
        long v = 0;
        size_t digits = 0;
        if (neg)
            r->i++;
        while (r->i < r->n && s[r->i] >= '0' && s[r->i] <= '9' && digits < 15) {
            v = v * 10 + (s[r->i++] - '0');
            digits++;
        }
        if (digits == 0 || (r->i < r->n && s[r->i] >= '0' && s[r->i] <= '9'))
            return -1;
        if (r->i < r->n && s[r->i] == '.')
            return -1;                      /* a decimal: no weight or digest is one */
        *iv = neg ? -v : v;
        *kind = V_INT;
        return 0;
    }
    if (r->i < r->n && s[r->i] == '"') {    /* a string (parameters only) */
        for (r->i++; r->i < r->n && s[r->i] != '"'; r->i++)
            if (s[r->i] == '\\')
                r->i++;
        if (r->i >= r->n)
            return -1;
        r->i++;
        *kind = V_NONE;
        return 0;
    }
    if (r->i < r->n && ((s[r->i] >= 'a' && s[r->i] <= 'z') || (s[r->i] >= 'A' &&
                                                                   s[r->i] <= 'Z') ||
                        s[r->i] == '*')) {
        while (r->i < r->n && s[r->i] > ' ' && s[r->i] < 0x7f && s[r->i] != ',' &&
               s[r->i] != ';' && s[r->i] != '"')
            r->i++;
        *kind = V_NONE;                     /* a token (parameters only) */
        return 0;
    }
    return -1;
}

/* Skips ;key[=item] parameters. -1 when malformed. */
static int params(rd_t *r)
{
    while (r->i < r->n && r->s[r->i] == ';') {
        size_t ks, ke, vs, ve;
        long iv;
        vkind_t k;
        r->i++;
        ows(r);
        if (!key(r, &ks, &ke))
            return -1;
        if (r->i < r->n && r->s[r->i] == '=') {
            r->i++;
            if (item(r, &k, &vs, &ve, &iv) != 0)
                return -1;
        }
    }
    return 0;
}

typedef int (*member_fn)(void *arg, const char *key, size_t klen, vkind_t kind,
                         const char *v, size_t vlen, long iv, tfp_err_t *err);

/* Walks the dictionary s, calling fn for each member. TFP_EPROTO naming what as the field. */
static tfp_status_t dictionary(const char *s, const char *what, member_fn fn, void *arg,
                               tfp_err_t *err)
{
    rd_t r = {.s = s, .i = 0, .n = s ? strlen(s) : 0};
    if (!s || r.n > TFP_DIGEST_MAX_INPUT)
        return tfp_err_set(err, TFP_EPROTO, "%s: missing or longer than %d bytes", what,
                           TFP_DIGEST_MAX_INPUT);
    ows(&r);
    if (r.i == r.n)
        return tfp_err_set(err, TFP_EPROTO, "%s: empty", what);
    for (;;) {
        size_t ks, ke, vs = 0, ve = 0;
        long iv = 0;
        vkind_t kind = V_NONE;
        if (!key(&r, &ks, &ke))
            return tfp_err_set(err, TFP_EPROTO, "%s: a member's name is not a lowercase key "
                               "at offset %zu", what, r.i);
        if (r.i < r.n && r.s[r.i] == '=') {
            r.i++;
            if (item(&r, &kind, &vs, &ve, &iv) != 0 || kind == V_NONE)
                return tfp_err_set(err, TFP_EPROTO, "%s: the value of '%.*s' is not a byte "
                                   "sequence (:base64:) or an integer", what,
                                   (int)(ke - ks < 32 ? ke - ks : 32), s + ks);
        }
        if (params(&r) != 0)
            return tfp_err_set(err, TFP_EPROTO, "%s: malformed parameters at offset %zu",
                               what, r.i);
        if (fn(arg, s + ks, ke - ks, kind, s + vs, ve - vs, iv, err) != 0)
            return TFP_EPROTO;
        ows(&r);
        if (r.i == r.n)
            return TFP_OK;
        if (r.s[r.i] != ',')
            return tfp_err_set(err, TFP_EPROTO, "%s: expected ',' at offset %zu", what, r.i);
        r.i++;
        ows(&r);
        if (r.i == r.n)
            return tfp_err_set(err, TFP_EPROTO, "%s: a trailing ','", what);
    }
}

static int is_sha256(const char *k, size_t n)
{
    return n == 7 && memcmp(k, "sha-256", 7) == 0;
}

static int digest_member(void *arg, const char *k, size_t kl, vkind_t kind, const char *v,
                         size_t vl, long iv, tfp_err_t *err)
{
    tfp_digest_t *d = arg;
    (void)iv;
    if (kind != V_BYTES) {
        tfp_err_set(err, TFP_EPROTO, "digest: the value of '%.*s' is not a byte sequence "
                    "(:base64:)", (int)(kl < 32 ? kl : 32), k);
        return -1;
    }
    if (!is_sha256(k, kl))
        return 0;                           /* another algorithm: not ours to check */
    if (d->has) {
        tfp_err_set(err, TFP_EPROTO, "digest: sha-256 given twice");
        return -1;
    }
    uint8_t *raw = NULL;
    size_t rl = 0;
    tfp_err_t e2;
    if (tfp_b64_decode(v, vl, TFP_DIGEST_LEN, &raw, &rl, &e2) != TFP_OK ||
        rl != TFP_DIGEST_LEN) {
        free(raw);
        tfp_err_set(err, TFP_EPROTO, "digest: sha-256 is not 32 bytes of base64");
        return -1;
    }
    memcpy(d->sha256, raw, TFP_DIGEST_LEN);
    free(raw);
    d->has = 1;
    return 0;
}

tfp_status_t tfp_digest_parse(const char *s, tfp_digest_t *out, tfp_err_t *err)
{
    tfp_digest_t d = {0};
    tfp_status_t st = dictionary(s, "digest", digest_member, &d, err);
    if (st == TFP_OK)
        *out = d;
    return st;
}

static int want_member(void *arg, const char *k, size_t kl, vkind_t kind, const char *v,
                       size_t vl, long iv, tfp_err_t *err)
{
    int *wanted = arg;
    (void)v;
    (void)vl;
    if (kind != V_INT || iv < 0 || iv > 10) {
        tfp_err_set(err, TFP_EPROTO, "want-digest: the weight of '%.*s' is not an integer "
                    "0..10", (int)(kl < 32 ? kl : 32), k);
        return -1;
    }
    if (is_sha256(k, kl))
        *wanted = iv > 0;
    return 0;
}

tfp_status_t tfp_digest_want_parse(const char *s, int *wanted, tfp_err_t *err)
{
    int w = 0;
    tfp_status_t st = dictionary(s, "want-digest", want_member, &w, err);
    if (st == TFP_OK)
        *wanted = w;
    return st;
}

void tfp_digest_sha256(const void *p, size_t n, uint8_t out[TFP_DIGEST_LEN])
{
    struct sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, n, p);
    sha256_digest(&h, TFP_DIGEST_LEN, out);
}

void tfp_digest_format(const uint8_t sha256[TFP_DIGEST_LEN], char *buf, size_t size)
{
    static const char b64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char enc[45];
    size_t k = 0;
    for (size_t i = 0; i < TFP_DIGEST_LEN; i += 3) {
        uint32_t v = (uint32_t)sha256[i] << 16;
        if (i + 1 < TFP_DIGEST_LEN)
            v |= (uint32_t)sha256[i + 1] << 8;
        if (i + 2 < TFP_DIGEST_LEN)
            v |= sha256[i + 2];
        enc[k++] = b64[(v >> 18) & 63];
        enc[k++] = b64[(v >> 12) & 63];
        enc[k++] = i + 1 < TFP_DIGEST_LEN ? b64[(v >> 6) & 63] : '=';
        enc[k++] = i + 2 < TFP_DIGEST_LEN ? b64[v & 63] : '=';
    }
    enc[k] = '\0';
    if (size)
        snprintf(buf, size, "sha-256=:%s:", enc);
}
