/* answer.c - the typed answer's table and its renderings (see answer.h). Pure; any thread. */
#include "config.h"
#include "proto/answer.h"
#include "proto/ids.h"
#include "proto/strcopy.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

const tfp_af_row_t tfp_answer_fields[TFP_AF_COUNT] = {
#define X(id, h, k, uf, m) [TFP_AF_##id] = {h, (k) == TFP_AK_STR, k, uf, m, sizeof(h) - 1},
    TFP_ANSWER_MAP(X)
#undef X
};

/* ASCII case-insensitive equality of a[0..n) and b[0..n): header names and tokens, on every
 * header the HTTP client engine receives (glibc's strncasecmp goes through the locale). */
static int ieq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if ((unsigned)(x - 'A') < 26u)
            x |= 0x20;
        if ((unsigned)(y - 'A') < 26u)
            y |= 0x20;
        if (x != y)
            return 0;
    }
    return 1;
}

/* name[0..n) is the header h (hn bytes), any case. */
static int is_header(const char *name, size_t n, const char *h, size_t hn)
{
    return hn == n && ieq(name, h, n);
}

/* The largest duration a Server-Timing entry carries: a day, in microseconds. */
#define MAX_DUR_US (86400ull * 1000000ull)

/* Where string field f's value lives in tfp_answer_t.str (two string fields). */
static int str_slot(tfp_af_t f)
{
    return f == TFP_AF_REPR_DIGEST;
}
_Static_assert(TFP_AF_ETAG != TFP_AF_REPR_DIGEST, "two string fields, two slots");

const char *tfp_answer_str(const tfp_answer_t *a, tfp_af_t f)
{
    return tfp_answer_has(a, f) && tfp_answer_fields[f].is_str ? a->str[str_slot(f)] : "";
}

void tfp_answer_set_u64(tfp_answer_t *a, tfp_af_t f, uint64_t v)
{
    if ((unsigned)f >= TFP_AF_COUNT || tfp_answer_fields[f].is_str)
        return;
    a->num[f] = v;
    a->present |= 1u << f;
}

/* Whether v is a valid value of string field f: an ETag is one strong tag, quoted. */
static int str_valid(tfp_af_t f, const char *v)
{
    size_t n = strlen(v);
    if (n > TFP_AF_MAX_STR)
        return 0;
    if (f == TFP_AF_REPR_DIGEST) {
        tfp_digest_t d;
        tfp_err_t err;
        return tfp_digest_parse(v, &d, &err) == TFP_OK && d.has;
    }
    tfp_etags_t l;
    return n >= 2 && n <= TFP_ETAG_LEN - 1 && v[0] == '"' && tfp_etags_parse(v, 0, &l) == 0 &&
           !l.any && l.n + l.foreign == 1;
}

int tfp_answer_set_str(tfp_answer_t *a, tfp_af_t f, const char *v)
{
    if ((unsigned)f >= TFP_AF_COUNT || !tfp_answer_fields[f].is_str || !str_valid(f, v))
        return -1;
    memcpy(a->str[str_slot(f)], v, strlen(v) + 1);
    a->present |= 1u << f;
    return 0;
}

int tfp_answer_has(const tfp_answer_t *a, tfp_af_t f)
{
    return (unsigned)f < TFP_AF_COUNT && (a->present & (1u << f)) != 0;
}

/* v's decimal digits written at p (room for 20): the end of them. */
static char *put_u64(char *p, uint64_t v)
{
    char digits[24], *e = digits + sizeof digits, *d = tfp_u64_digits(e, v);
    memcpy(p, d, (size_t)(e - d));
    return p + (e - d);
}

size_t tfp_answer_header_value(const tfp_answer_t *a, tfp_af_t f, char *buf, size_t size)
{
    /* by hand, not snprintf: every UCX and shm reply renders these (strcopy.h's reason) */
    char tmp[TFP_AF_MAX_STR + 48], *p = tmp;
    if (!tfp_answer_has(a, f) || size == 0)
        return 0;
    const tfp_af_row_t *r = &tfp_answer_fields[f];
    if (r->is_str) {
        size_t n = strlen(a->str[str_slot(f)]);
        memcpy(p, a->str[str_slot(f)], n);
        p += n;
    } else if (r->kind == TFP_AK_DUR) {         /* "metric;dur=MS.UUU" */
        size_t m = strlen(r->metric);
        uint64_t us = a->num[f] % 1000;
        memcpy(p, r->metric, m);
        memcpy(p + m, ";dur=", 5);
        p = put_u64(p + m + 5, a->num[f] / 1000);
        *p++ = '.';
        *p++ = (char)('0' + us / 100);
        *p++ = (char)('0' + us / 10 % 10);
        *p++ = (char)('0' + us % 10);
    } else {
        p = put_u64(p, a->num[f]);
    }
    size_t n = (size_t)(p - tmp);
    if (n >= size)
        return 0;
    memcpy(buf, tmp, n);
    buf[n] = '\0';
    return n;
}

/* A Server-Timing dur (milliseconds: digits, then at most 9 decimals) in microseconds (the
 * decimals past the third dropped): 0, or -1. */
static int parse_dur(const char *s, size_t n, uint64_t *us)
{
    uint64_t ms = 0, frac = 0;
    size_t i = 0, digits = 0, decimals = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        if (ms > MAX_DUR_US / 1000)
            return -1;
        ms = ms * 10 + (uint64_t)(s[i] - '0');
    }
    if (digits == 0)
        return -1;
    if (i < n && s[i] == '.') {
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++, decimals++)
            if (decimals < 3)
                frac = frac * 10 + (uint64_t)(s[i] - '0');
        if (decimals == 0 || decimals > 9)
            return -1;
        for (size_t k = decimals; k < 3; k++)
            frac *= 10;
    }
    if (i != n || ms * 1000 + frac > MAX_DUR_US)
        return -1;
    *us = ms * 1000 + frac;
    return 0;
}

/* The row whose Server-Timing metric is name[0..n), or TFP_AF_COUNT. */
static unsigned metric_row(const char *name, size_t n)
{
    for (unsigned f = 0; f < TFP_AF_COUNT; f++) {
        const char *m = tfp_answer_fields[f].metric;
        if (m && strlen(m) == n && ieq(m, name, n))
            return f;
    }
    return TFP_AF_COUNT;
}

static size_t trim(const char **s, size_t n)
{
    while (n && (**s == ' ' || **s == '\t')) {
        (*s)++;
        n--;
    }
    while (n && ((*s)[n - 1] == ' ' || (*s)[n - 1] == '\t'))
        n--;
    return n;
}

/* A Server-Timing list (RFC-style "metric;dur=1.23;desc=..., metric2"): entries of our
 * metrics into a. 1, 0 (none of ours), or -1 (one of ours malformed: nothing set). */
static int parse_timing(tfp_answer_t *a, const char *v)
{
    uint64_t got[TFP_AF_COUNT];
    uint32_t set = 0;
    int ours = 0;
    while (*v) {
        size_t n = 0;
        int quoted = 0;
        for (; v[n] && (quoted || v[n] != ','); n++)
            if (v[n] == '"')
                quoted = !quoted;
        const char *e = v;
        size_t en = trim(&e, n);
        v += n + (v[n] == ',');
        size_t nn = 0;
        while (nn < en && e[nn] != ';')
            nn++;
        const char *name = e;
        unsigned f = metric_row(name, trim(&name, nn));
        if (f == TFP_AF_COUNT)
            continue;                   /* another server's metric */
        int have = 0;
        for (size_t i = nn; i < en;) {  /* its parameters: ";dur=X" among them */
            size_t j = i + 1;
            while (j < en && e[j] != ';')
                j++;
            const char *p = e + i + 1;
            size_t pn = trim(&p, j - i - 1);
            uint64_t us;
            if (pn > 4 && ieq(p, "dur=", 4)) {
                if (have || parse_dur(p + 4, pn - 4, &us) != 0)
                    return -1;
                got[f] = us;                /* set once the whole list is good */
                set |= 1u << f;
                have = 1;
            }
            i = j;
        }
        if (!have)
            return -1;
        ours = 1;
    }
    for (unsigned f = 0; f < TFP_AF_COUNT; f++)
        if (set & (1u << f))
            tfp_answer_set_u64(a, (tfp_af_t)f, got[f]);
    return ours;
}

int tfp_answer_header_parse(tfp_answer_t *a, const char *name, const char *value)
{
    size_t n = strlen(name);
    if (is_header(name, n, "Server-Timing", 13))
        return parse_timing(a, value);
    for (unsigned f = 0; f < TFP_AF_COUNT; f++) {
        if (!is_header(name, n, tfp_answer_fields[f].header, tfp_answer_fields[f].header_len))
            continue;
        if (tfp_answer_fields[f].is_str)
            return tfp_answer_set_str(a, (tfp_af_t)f, value) == 0 ? 1 : -1;
        uint64_t v;
        if (tfp_parse_u64(value, UINT64_MAX, &v) != 0)
            return -1;
        tfp_answer_set_u64(a, (tfp_af_t)f, v);
        return 1;
    }
    return 0;
}

/* The feed block's number a present bit names, or NULL. */
static uint64_t *feed_num(tfp_uf_feed_t *f, uint16_t bit)
{
    switch (bit) {
    case TFP_UF_FP_POSITION: return &f->position;
    case TFP_UF_FP_SEQ: return &f->seq;
    case TFP_UF_FP_ROUND: return &f->round;
    case TFP_UF_FP_GENERATION: return &f->generation;
    case TFP_UF_FP_DEVICE: return &f->device;
    case TFP_UF_FP_RETRY_AFTER: return &f->retry_after;
    case TFP_UF_FP_RESUME_AFTER: return &f->resume_after;
    default: return NULL;
    }
}

uint32_t tfp_answer_uf_lines_mask(void)
{
    uint32_t m = 0;
    for (unsigned i = 0; i < TFP_AF_COUNT; i++)
        if (!tfp_answer_fields[i].uf_present && i != TFP_AF_ETAG)
            m |= 1u << i;
    return m;
}

/* The timing fields in the order of the "T:" line (tfp_answer_lines). */
static const tfp_af_t timing_order[] = {TFP_AF_SRV_RECV, TFP_AF_SRV_QUEUE, TFP_AF_SRV_HANDLER,
                                        TFP_AF_SRV_TOTAL};
#define NTIMING (sizeof timing_order / sizeof timing_order[0])

/* "T: RECV,QUEUE,HANDLER,TOTAL\n" into buf (microseconds; "-" for one absent): the server's
 * time in a UCX or shm REPLY. HTTP's Server-Timing list says the same in 70-odd bytes, and
 * in a UCX REPLY that length cost an 8-byte exchange 0.6 us (a reply past the size UCX's
 * shared-memory FIFO carries inline). Its length, or 0 when it does not fit in size. */
static size_t timing_line(const tfp_answer_t *a, char *buf, size_t size)
{
    char line[8 + NTIMING * 24], *p = line;
    memcpy(p, "T: ", 3);
    p += 3;
    for (size_t i = 0; i < NTIMING; i++) {
        if (i)
            *p++ = ',';
        if (!tfp_answer_has(a, timing_order[i])) {
            *p++ = '-';
            continue;
        }
        p = put_u64(p, a->num[timing_order[i]]);
    }
    *p++ = '\n';
    size_t n = (size_t)(p - line);
    if (n >= size)
        return 0;
    memcpy(buf, line, n);
    buf[n] = '\0';
    return n;
}

/* A "T:" line's value (timing_line) into a: 1, or -1 when malformed (nothing set then). */
static int parse_timing_line(tfp_answer_t *a, const char *v)
{
    uint64_t got[NTIMING];
    uint32_t set = 0;
    for (size_t i = 0; i < NTIMING; i++) {
        size_t n = strcspn(v, ",");
        if ((v[n] == ',') != (i + 1 < NTIMING))
            return -1;
        if (n == 1 && v[0] == '-') {
            ;
        } else {
            char num[24];
            if (n == 0 || n >= sizeof num)
                return -1;
            memcpy(num, v, n);
            num[n] = '\0';
            if (tfp_parse_u64(num, MAX_DUR_US, &got[i]) != 0)
                return -1;
            set |= 1u << i;
        }
        v += n + (v[n] == ',');
    }
    for (size_t i = 0; i < NTIMING; i++)
        if (set & (1u << i))
            tfp_answer_set_u64(a, timing_order[i], got[i]);
    return 1;
}

size_t tfp_answer_lines(const tfp_answer_t *a, uint32_t mask, char *buf, size_t size)
{
    size_t len = 0;
    char v[TFP_AF_MAX_STR + 48];
    if (size == 0)
        return 0;
    buf[0] = '\0';
    if (mask & a->present & TFP_AF_TIMING_MASK) {    /* the server's time: one short line */
        len = timing_line(a, buf, size);
        mask &= ~TFP_AF_TIMING_MASK;
    }
    for (unsigned f = 0; f < TFP_AF_COUNT; f++) {
        size_t vn;
        if (!(mask & (1u << f)) || !(vn = tfp_answer_header_value(a, (tfp_af_t)f, v, sizeof v)))
            continue;
        const char *h = tfp_answer_fields[f].header;
        size_t hn = strlen(h);
        if (len + hn + 2 + vn + 1 >= size)
            continue;                   /* does not fit: left out */
        memcpy(buf + len, h, hn);
        memcpy(buf + len + hn, ": ", 2);
        memcpy(buf + len + hn + 2, v, vn);
        len += hn + 2 + vn;
        buf[len++] = '\n';
        buf[len] = '\0';
    }
    return len;
}

static int is_tchar(char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
        return 1;
    default:
        return 0;
    }
}

int tfp_answer_lines_valid(const char *s, size_t n)
{
    if (n > TFP_ANSWER_MAX_LINES)
        return 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && is_tchar(s[j]))
            j++;
        if (j == i || j + 1 >= n || s[j] != ':' || s[j + 1] != ' ')
            return 0;
        for (j += 2; j < n && s[j] != '\n'; j++)
            if ((unsigned char)s[j] < 0x20 || (unsigned char)s[j] > 0x7e)
                return 0;
        if (j == n)
            return 0;                   /* every line ends with "\n" */
        i = j + 1;
    }
    return 1;
}

int tfp_answer_lines_parse(tfp_answer_t *a, const char *s, size_t n)
{
    char name[64], value[TFP_ANSWER_MAX_LINES + 1];
    if (!tfp_answer_lines_valid(s, n))
        return -1;
    for (size_t i = 0; i < n;) {
        const char *colon = memchr(s + i, ':', n - i), *end = memchr(s + i, '\n', n - i);
        size_t nn = (size_t)(colon - (s + i)), vn = (size_t)(end - colon - 2);
        if (nn < sizeof name) {
            memcpy(name, s + i, nn);
            name[nn] = '\0';
            memcpy(value, colon + 2, vn);
            value[vn] = '\0';
            if (strcmp(name, "T") == 0)
                (void)parse_timing_line(a, value);              /* malformed: skipped */
            else
                (void)tfp_answer_header_parse(a, name, value);  /* malformed: skipped */
        }
        i = (size_t)(end - s) + 1;
    }
    return 0;
}

void tfp_answer_to_feed(const tfp_answer_t *a, tfp_uf_feed_t *f)
{
    for (unsigned i = 0; i < TFP_AF_COUNT; i++) {
        uint16_t bit = tfp_answer_fields[i].uf_present;
        uint64_t *p = feed_num(f, bit);
        if (p && tfp_answer_has(a, (tfp_af_t)i)) {
            *p = a->num[i];
            f->present |= bit;
        }
    }
}

void tfp_answer_from_feed(const tfp_uf_feed_t *f, tfp_answer_t *a)
{
    tfp_uf_feed_t c = *f;
    for (unsigned i = 0; i < TFP_AF_COUNT; i++) {
        uint16_t bit = tfp_answer_fields[i].uf_present;
        uint64_t *p = feed_num(&c, bit);
        if (p && (f->present & bit))
            tfp_answer_set_u64(a, (tfp_af_t)i, *p);
    }
}

void tfp_answer_to_reply(const tfp_answer_t *a, uint16_t asked, tfp_uf_hdr_t *h)
{
    uint32_t lines = tfp_answer_uf_lines_mask();
    if (asked & TFP_UF_F_TIMING) {      /* the server's time as numbers, not a "T:" line */
        h->flags |= TFP_UF_F_TIMING;
        for (unsigned i = 0; i < NTIMING; i++) {
            uint64_t us = a->num[timing_order[i]];
            h->timing[i] = !tfp_answer_has(a, timing_order[i]) ? TFP_UF_TIMING_NONE
                           : us < TFP_UF_TIMING_NONE ? (uint32_t)us : TFP_UF_TIMING_NONE - 1;
        }
        lines &= ~TFP_AF_TIMING_MASK;
    }
    if (asked & TFP_UF_F_ANSWER) {
        h->flags |= TFP_UF_F_ANSWER;
        tfp_answer_lines(a, lines, h->answer, sizeof h->answer);
    }
}

void tfp_answer_from_reply(const tfp_uf_hdr_t *h, tfp_answer_t *a)
{
    if (h->flags & TFP_UF_F_FEED)
        tfp_answer_from_feed(&h->feed, a);
    if ((h->flags & TFP_UF_F_COND) && h->cond.etag[0])
        (void)tfp_answer_set_str(a, TFP_AF_ETAG, h->cond.etag);
    if (h->flags & TFP_UF_F_ANSWER)
        (void)tfp_answer_lines_parse(a, h->answer, strlen(h->answer));
    for (unsigned i = 0; (h->flags & TFP_UF_F_TIMING) && i < NTIMING; i++)
        if (h->timing[i] != TFP_UF_TIMING_NONE)
            tfp_answer_set_u64(a, timing_order[i], h->timing[i]);
}

void tfp_answer_from_sf_reply(const tfp_sf_t *m, tfp_answer_t *a)
{
    char etag[TFP_ETAG_LEN];
    tfp_err_t err;
    const char *nl = m->op == TFP_SF_REPLY && m->status == TFP_OK ? memchr(m->str, '\n',
                                                                           m->str_len) : NULL;
    if (!nl) {
        if (tfp_sf_reply_etag(m, etag, &err) == TFP_OK)
            (void)tfp_answer_set_str(a, TFP_AF_ETAG, etag);
        return;
    }
    size_t n = (size_t)(nl - m->str);           /* the ETag line, then the answer lines */
    if (n > 0 && n < TFP_ETAG_LEN) {
        memcpy(etag, m->str, n);
        etag[n] = '\0';
        (void)tfp_answer_set_str(a, TFP_AF_ETAG, etag);
    }
    (void)tfp_answer_lines_parse(a, nl + 1, m->str_len - n - 1);
}
