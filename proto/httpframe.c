/* httpframe.c - the framing decision of httpframe.h (RFC 9112 sections 2.2, 5, 6 and 7, read
 * strictly: where two readings are possible, the request is refused) and the percent-decoder.
 * Pure; any thread.
 */
#include "config.h"
#include "proto/httpframe.h"
#include "proto/ids.h"

#include <string.h>
#include <strings.h>

/* Shown names and values are cut to this many bytes in messages. */
#define SHOW 64

/* RFC 9110 5.6.2: tchar. */
static int is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return 1;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int name_is(const tfp_hfield_t *f, const char *name)
{
    return f->name_len == strlen(name) && strncasecmp(f->name, name, f->name_len) == 0;
}

static int show_len(size_t n) { return n > SHOW ? SHOW : (int)n; }

/* The header names tfetchd reads that must not be given twice: with two, one parser takes
 * the first and another the last. */
static const char *const SINGLE[] = {
    "Host", "Content-Length", "Content-Type", "Tfetch-User", "Tfetch-Request-Id",
    "Tfetch-Dtype", "Tfetch-Shape", "Authorization", "Tfetch-User-Principal",
    "Tfetch-Worker-Secret",
};
#define NSINGLE (sizeof SINGLE / sizeof SINGLE[0])

static tfp_status_t check_field(const tfp_hfield_t *f, tfp_err_t *err)
{
    int nl = show_len(f->name_len);

    if (f->flags & TFP_HF_FOLDED)
        return tfp_err_set(err, TFP_EBADREQ, "header '%.*s': a folded (obs-fold) line", nl,
                           f->name);
    if (f->flags & TFP_HF_BADEND)
        return tfp_err_set(err, TFP_EBADREQ, "header '%.*s': a NUL byte, or a line not ended "
                           "by CRLF", nl, f->name);
    if (f->name_len == 0)
        return tfp_err_set(err, TFP_EBADREQ, "a header line with an empty name");
    for (size_t i = 0; i < f->name_len; i++)
        if (!is_tchar((unsigned char)f->name[i]))
            return tfp_err_set(err, TFP_EBADREQ, "header name '%.*s' is not a token (a space "
                               "before the colon?)", nl, f->name);
    for (size_t i = 0; i < f->value_len; i++) {
        unsigned char c = (unsigned char)f->value[i];

        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return tfp_err_set(err, TFP_EBADREQ, "header '%.*s': control character 0x%02x in "
                               "its value", nl, f->name, c);
    }
    return TFP_OK;
}

/* Content-Length: 1*DIGIT, at most 2^63-1. */
static tfp_status_t content_length(const tfp_hfield_t *f, int64_t *out, tfp_err_t *err)
{
    uint64_t v = 0;

    if (f->value_len == 0)
        return tfp_err_set(err, TFP_EBADREQ, "Content-Length is empty");
    for (size_t i = 0; i < f->value_len; i++) {
        char c = f->value[i];

        if (c < '0' || c > '9')
            return tfp_err_set(err, TFP_EBADREQ, "Content-Length '%.*s' is not a number",
                               show_len(f->value_len), f->value);
        if (__builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, (uint64_t)(c - '0'), &v) || v > (uint64_t)INT64_MAX)
            return tfp_err_set(err, TFP_ETOOBIG, "Content-Length '%.*s' is above 2^63-1",
                               show_len(f->value_len), f->value);
    }
    *out = (int64_t)v;
    return TFP_OK;
}

/* The codings of every Transfer-Encoding field, in order, as one list (RFC 9110 5.3): chunked
 * once and last, nothing else; and each field exactly as a parser that compares the whole
 * value with "chunked" reads it (libmicrohttpd 0.9.75 does, after skipping the spaces before
 * it): no empty list element and no whitespace after the last coding. RFC 9110 5.6.1 lets a
 * recipient skip those, but a server that did would frame a chunked body that such a parser
 * in front of it (or behind it) waits on for a body of unknown length: two readings, so the
 * request is refused. */
static tfp_status_t transfer_codings(const tfp_http_frame_t *in, tfp_err_t *err)
{
    size_t codings = 0, chunked = 0;
    int chunked_last = 0;
    const char *unknown = NULL;
    size_t unknown_len = 0;

    for (size_t k = 0; k < in->nfields; k++) {
        const tfp_hfield_t *f = &in->fields[k];
        size_t i = 0;

        if (!name_is(f, "Transfer-Encoding"))
            continue;
        if (f->value_len == 0)          /* an empty field beside another: no coding at all */
            return tfp_err_set(err, TFP_EBADREQ, "a Transfer-Encoding field names no coding");
        if (f->value_len && (f->value[f->value_len - 1] == ' ' ||
                             f->value[f->value_len - 1] == '\t'))
            return tfp_err_set(err, TFP_EBADREQ, "Transfer-Encoding '%.*s' ends in whitespace",
                               show_len(f->value_len), f->value);
        while (i < f->value_len) {
            size_t b, e;

            while (i < f->value_len && (f->value[i] == ' ' || f->value[i] == '\t'))
                i++;
            b = i;
            while (i < f->value_len && f->value[i] != ',')
                i++;
            e = i;
            while (e > b && (f->value[e - 1] == ' ' || f->value[e - 1] == '\t'))
                e--;
            if (e == b)
                return tfp_err_set(err, TFP_EBADREQ, "Transfer-Encoding '%.*s' has an empty "
                                   "list element", show_len(f->value_len), f->value);
            if (i < f->value_len && i + 1 == f->value_len)
                return tfp_err_set(err, TFP_EBADREQ, "Transfer-Encoding '%.*s' has an empty "
                                   "list element", show_len(f->value_len), f->value);
            if (i < f->value_len)
                i++;                        /* the comma */
            codings++;
            if (e - b == 7 && strncasecmp(f->value + b, "chunked", 7) == 0) {
                chunked++;
                chunked_last = 1;
            } else {
                chunked_last = 0;
                if (unknown == NULL) {
                    unknown = f->value + b;
                    unknown_len = e - b;
                }
            }
        }
    }
    if (codings == 0)
        return tfp_err_set(err, TFP_EBADREQ, "Transfer-Encoding names no coding");
    if (chunked > 1)
        return tfp_err_set(err, TFP_EBADREQ, "Transfer-Encoding gives chunked twice");
    if (chunked == 1 && !chunked_last)
        return tfp_err_set(err, TFP_EBADREQ, "Transfer-Encoding: chunked is not the last "
                           "coding");
    if (unknown != NULL)
        return tfp_err_set(err, TFP_ENOTIMPL, "transfer coding '%.*s' is not implemented "
                           "(only chunked is)", show_len(unknown_len), unknown);
    return TFP_OK;
}

tfp_status_t tfp_http_frame_check(const tfp_http_frame_t *in, tfp_http_framing_t *out,
                                  tfp_err_t *err)
{
    size_t count[NSINGLE] = { 0 }, te = 0;
    const tfp_hfield_t *cl = NULL;
    tfp_status_t st;
    int http10;

    if (in->version != NULL && strcmp(in->version, "HTTP/1.0") == 0)
        http10 = 1;
    else if (in->version != NULL && strcmp(in->version, "HTTP/1.1") == 0)
        http10 = 0;
    else
        return tfp_err_set(err, TFP_EBADREQ, "HTTP version '%.16s' is not HTTP/1.0 or "
                           "HTTP/1.1", in->version ? in->version : "");
    if (in->line_flags & TFP_HF_NUL)
        return tfp_err_set(err, TFP_EBADREQ, "a NUL byte (raw or %%00) in the request target");
    if (in->line_flags & (TFP_HF_BADEND | TFP_HF_FOLDED))
        return tfp_err_set(err, TFP_EBADREQ, "the request line is not ended by CRLF");
    for (size_t k = 0; k < in->nargs; k++) {
        const tfp_hfield_t *a = &in->args[k];

        if (memchr(a->name, '\0', a->name_len) || (a->value && memchr(a->value, '\0',
                                                                       a->value_len)))
            return tfp_err_set(err, TFP_EBADREQ, "a NUL byte (%%00) in the query");
    }
    for (size_t k = 0; k < in->nfields; k++) {
        const tfp_hfield_t *f = &in->fields[k];

        if ((st = check_field(f, err)) != TFP_OK)
            return st;
        for (size_t s = 0; s < NSINGLE; s++)
            if (name_is(f, SINGLE[s]) && ++count[s] > 1)
                return tfp_err_set(err, TFP_EBADREQ, "header %s given twice", SINGLE[s]);
        if (name_is(f, "Content-Length"))
            cl = f;
        else if (name_is(f, "Transfer-Encoding"))
            te++;
    }
    if (!http10 && count[0] == 0)
        return tfp_err_set(err, TFP_EBADREQ, "an HTTP/1.1 request without Host");
    out->content_length = -1;
    out->chunked = 0;
    if (te) {
        if (cl != NULL)
            return tfp_err_set(err, TFP_EBADREQ, "both Transfer-Encoding and Content-Length");
        if (http10)
            return tfp_err_set(err, TFP_EBADREQ, "Transfer-Encoding in an HTTP/1.0 request");
        if ((st = transfer_codings(in, err)) != TFP_OK)
            return st;
        out->chunked = 1;
    } else if (cl != NULL && (st = content_length(cl, &out->content_length, err)) != TFP_OK) {
        return st;
    }
    return TFP_OK;
}


size_t tfp_url_unescape(char *s)
{
    size_t r = 0, w = 0;

    while (s[r] != '\0') {
        int hi, lo;

        if (s[r] == '%' && (hi = tfp_hex_digit(s[r + 1])) >= 0 &&
            (lo = tfp_hex_digit(s[r + 2])) >= 0) {
            s[w++] = (char)(hi * 16 + lo);
            r += 3;
        } else {
            s[w++] = s[r++];
        }
    }
    s[w] = '\0';
    return w;
}
