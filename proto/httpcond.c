/* httpcond.c - ETag lists and byte ranges (see httpcond.h). Pure; any thread. */
#include "config.h"
#include "proto/httpcond.h"

#include <stdio.h>
#include <string.h>

static const char *skip_ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* Our tag's inside (between the quotes, n bytes): 16 hex digits, '-', 1..20 decimal digits. */
static int ours(const char *s, size_t n, uint64_t *epoch, uint64_t *version)
{
    uint64_t e = 0, v = 0;
    if (n < 18 || n > 37 || s[16] != '-')
        return 0;
    for (size_t i = 0; i < 16; i++) {
        char c = s[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16;
        if (d == 16)
            return 0;
        e = e << 4 | d;
    }
    for (size_t i = 17; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || v > (UINT64_MAX - 9) / 10)
            return 0;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *epoch = e;
    *version = v;
    return 1;
}

int tfp_etags_parse(const char *value, int weak_ok, tfp_etags_t *out)
{
    memset(out, 0, sizeof *out);
    if (!value)
        return 0;
    out->present = 1;
    const char *p = skip_ows(value);
    if (*p == '*' && *skip_ows(p + 1) == '\0') {
        out->any = 1;
        return 0;
    }
    for (int first = 1;; first = 0) {
        p = skip_ows(p);
        if (!first) {
            if (*p == '\0')
                return 0;
            if (*p != ',')
                return -1;
            p = skip_ows(p + 1);
            if (*p == ',' || *p == '\0')        /* empty list elements are allowed */
                continue;
        }
        int weak = 0;
        if (p[0] == 'W' && p[1] == '/') {
            weak = 1;
            p += 2;
        }
        if (*p != '"')
            return -1;
        const char *q = p + 1;
        /* etagc = %x21 / %x23-7E / obs-text */
        while (*q && *q != '"' && ((unsigned char)*q == 0x21 || (unsigned char)*q >= 0x23) &&
               *q != 0x7F)
            q++;
        if (*q != '"')
            return -1;
        if (out->n + out->foreign >= TFP_ETAGS_MAX)
            return -1;
        uint64_t e, v;
        if ((!weak || weak_ok) && ours(p + 1, (size_t)(q - p - 1), &e, &v)) {
            out->tag[out->n].epoch = e;
            out->tag[out->n].version = v;
            out->n++;
        } else {
            out->foreign++;
        }
        p = q + 1;
    }
}

int tfp_etags_match(const tfp_etags_t *l, uint64_t epoch, uint64_t version)
{
    if (l->any)
        return 1;
    for (size_t i = 0; i < l->n; i++)
        if (l->tag[i].epoch == epoch && l->tag[i].version == version)
            return 1;
    return 0;
}

int tfp_etag_valid(const char *value)
{
    tfp_etags_t l;
    return value && tfp_etags_parse(value, 1, &l) == 0 && !l.any && l.n + l.foreign == 1 &&
           strchr(value, ',') == NULL;
}

void tfp_etag_format(char *buf, uint64_t epoch, uint64_t version)
{
    snprintf(buf, TFP_ETAG_LEN, "\"%016llx-%llu\"", (unsigned long long)epoch,
             (unsigned long long)version);
}

/* Decimal digits at *p (at most 19, so no overflow); advances *p. -1 if none. */
static int digits(const char **p, uint64_t *out)
{
    uint64_t v = 0;
    int n = 0;
    while (**p >= '0' && **p <= '9') {
        if (++n > 19)
            return -1;
        v = v * 10 + (uint64_t)(**p - '0');
        (*p)++;
    }
    *out = v;
    return n ? 0 : -1;
}

void tfp_range_parse(const char *value, tfp_range_t *out)
{
    memset(out, 0, sizeof *out);
    if (!value)
        return;
    const char *p = skip_ows(value);
    if (strncmp(p, "bytes=", 6) != 0)
        return;
    p = skip_ows(p + 6);
    tfp_range_t r = {0};
    if (*p == '-') {
        p++;
        if (digits(&p, &r.a) != 0)
            return;
        r.kind = TFP_RANGE_SUFFIX;
    } else {
        if (digits(&p, &r.a) != 0 || *p != '-')
            return;
        p++;
        if (*p >= '0' && *p <= '9') {
            if (digits(&p, &r.b) != 0 || r.b < r.a)
                return;
            r.kind = TFP_RANGE_FROM_TO;
        } else {
            r.kind = TFP_RANGE_FROM;
        }
    }
    if (*skip_ows(p) != '\0')               /* a second range, or junk: serve it whole */
        return;
    *out = r;
}

int tfp_range_resolve(const tfp_range_t *r, uint64_t total, uint64_t *off, uint64_t *len)
{
    switch (r->kind) {
    case TFP_RANGE_FROM_TO:
    case TFP_RANGE_FROM:
        if (r->a >= total)
            return -1;
        *off = r->a;
        *len = (r->kind == TFP_RANGE_FROM || r->b >= total ? total - 1 : r->b) - r->a + 1;
        return 0;
    case TFP_RANGE_SUFFIX:
        if (r->a == 0 || total == 0)
            return -1;
        *len = r->a < total ? r->a : total;
        *off = total - *len;
        return 0;
    default:
        *off = 0;
        *len = total;
        return 0;
    }
}

int tfp_content_range_parse(const char *value, uint64_t *first, uint64_t *last,
                            uint64_t *total)
{
    uint64_t a = UINT64_MAX, b = UINT64_MAX, t;
    if (!value)
        return -1;
    const char *p = skip_ows(value);
    if (strncmp(p, "bytes ", 6) != 0)
        return -1;
    p = skip_ows(p + 6);
    if (*p == '*') {
        p++;
    } else if (digits(&p, &a) != 0 || *p++ != '-' || digits(&p, &b) != 0 || b < a) {
        return -1;
    }
    if (*p++ != '/' || digits(&p, &t) != 0 || *skip_ows(p) != '\0')
        return -1;
    if (a != UINT64_MAX && b >= t)
        return -1;
    *first = a;
    *last = b;
    *total = t;
    return 0;
}
