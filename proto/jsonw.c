/* jsonw.c - the append-only JSON writer and the error body.
 *
 * A tfp_jw_t owns its growing buffer until tfp_jw_finish hands it to the caller. Strings are
 * escaped per RFC 8259 (quote, backslash and every control character as \u00XX) and invalid
 * UTF-8 is replaced byte by byte with U+FFFD, so the output is valid JSON whatever it is fed.
 * Allocation failure, nesting deeper than the writer's 63 levels, or an unbalanced end mark
 * the writer failed; tfp_jw_finish then returns NULL. No globals; one writer per thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/jsonw.h"
#include "proto/strcopy.h"
#include "proto/utf8.h"

#define MAX_DEPTH ((int)sizeof(((tfp_jw_t *)0)->need_comma) - 1)

void tfp_jw_init(tfp_jw_t *w)
{
    memset(w, 0, sizeof *w);
}

/* Appends n bytes, keeping a NUL after the text. */
static void put(tfp_jw_t *w, const char *s, size_t n)
{
    if (w->failed)
        return;
    if (n >= w->cap - w->len || w->buf == NULL) {
        size_t need, ncap = w->cap ? w->cap : 256;
        char *p;

        if (__builtin_add_overflow(w->len, n + 1, &need))
            goto mark_failed;
        while (ncap < need) {
            if (ncap > SIZE_MAX / 2)
                goto mark_failed;
            ncap *= 2;
        }
        p = realloc(w->buf, ncap);
        if (p == NULL)
            goto mark_failed;
        w->buf = p;
        w->cap = ncap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
    return;

mark_failed:
    w->failed = 1;
}

static void put_char(tfp_jw_t *w, char c)
{
    put(w, &c, 1);
}

/* Separator before a value: nothing after a key, a comma after a sibling. */
static void pre_value(tfp_jw_t *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (w->need_comma[w->depth])
        put_char(w, ',');
    w->need_comma[w->depth] = 1;
}

static void put_escaped(tfp_jw_t *w, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0;           /* run: start of the pending plain bytes */

    put_char(w, '"');
    while (i < n) {
        unsigned char c = p[i];
        size_t k = 1;

        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0x80) {
            k = tfp_utf8_next(p + i, n - i, NULL);
            if (k != 0) {
                i += k;
                continue;
            }
        }
        put(w, s + run, i - run);
        if (c == '"') {
            put(w, "\\\"", 2);
        } else if (c == '\\') {
            put(w, "\\\\", 2);
        } else if (c < 0x20) {
            char e[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
            put(w, e, sizeof e);
        } else {
            put(w, "\xEF\xBF\xBD", 3);      /* U+FFFD for a byte that starts no character */
        }
        i++;
        run = i;
    }
    put(w, s + run, n - run);
    put_char(w, '"');
}

static void begin(tfp_jw_t *w, char c)
{
    pre_value(w);
    if (w->depth >= MAX_DEPTH) {
        w->failed = 1;
        return;
    }
    put_char(w, c);
    w->depth++;
    w->need_comma[w->depth] = 0;
}

static void end(tfp_jw_t *w, char c)
{
    if (w->depth <= 0 || w->after_key) {
        w->failed = 1;
        return;
    }
    w->depth--;
    put_char(w, c);
}

void tfp_jw_obj_begin(tfp_jw_t *w)
{
    begin(w, '{');
}

void tfp_jw_obj_end(tfp_jw_t *w)
{
    end(w, '}');
}

void tfp_jw_arr_begin(tfp_jw_t *w)
{
    begin(w, '[');
}

void tfp_jw_arr_end(tfp_jw_t *w)
{
    end(w, ']');
}

void tfp_jw_key(tfp_jw_t *w, const char *key)
{
    if (w->need_comma[w->depth])
        put_char(w, ',');
    w->need_comma[w->depth] = 1;
    put_escaped(w, key != NULL ? key : "", key != NULL ? strlen(key) : 0);
    put_char(w, ':');
    w->after_key = 1;
}

void tfp_jw_str(tfp_jw_t *w, const char *s)
{
    if (s == NULL) {
        tfp_jw_null(w);
        return;
    }
    tfp_jw_strn(w, s, strlen(s));
}

void tfp_jw_strn(tfp_jw_t *w, const char *s, size_t n)
{
    pre_value(w);
    put_escaped(w, s, n);
}

/* The decimal digits of v, minus sign first when neg, written backwards from end: what
 * "%llu" (or "%lld" of -v) prints, without snprintf's ~700 instructions a number (three
 * numbers in every tensor of every safetensors header). Returns the first byte. */
static char *put_digits(char *end, uint64_t v, int neg)
{
    char *p = tfp_u64_digits(end, v);
    if (neg)
        *--p = '-';
    return p;
}

void tfp_jw_int(tfp_jw_t *w, int64_t v)
{
    char b[24];
    uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;     /* INT64_MIN included */
    char *p = put_digits(b + sizeof b, mag, v < 0);

    pre_value(w);
    put(w, p, (size_t)(b + sizeof b - p));
}

void tfp_jw_uint(tfp_jw_t *w, uint64_t v)
{
    char b[24];
    char *p = put_digits(b + sizeof b, v, 0);

    pre_value(w);
    put(w, p, (size_t)(b + sizeof b - p));
}

void tfp_jw_double(tfp_jw_t *w, double v)
{
    char b[32];
    int k;

    if (!isfinite(v)) {
        tfp_jw_null(w);
        return;
    }
    k = snprintf(b, sizeof b, "%.17g", v);
    for (int i = 0; i < k; i++) {
        if (b[i] == ',')
            b[i] = '.';                 /* a locale's decimal comma is not JSON */
    }
    pre_value(w);
    put(w, b, (size_t)k);
}

void tfp_jw_bool(tfp_jw_t *w, int v)
{
    pre_value(w);
    if (v)
        put(w, "true", 4);
    else
        put(w, "false", 5);
}

void tfp_jw_null(tfp_jw_t *w)
{
    pre_value(w);
    put(w, "null", 4);
}

void tfp_jw_raw(tfp_jw_t *w, const char *json, size_t n)
{
    pre_value(w);
    put(w, json, n);
}

char *tfp_jw_finish(tfp_jw_t *w, size_t *len)
{
    char *out;

    if (!w->failed && w->buf == NULL)
        put(w, "", 0);
    if (w->failed) {
        tfp_jw_discard(w);
        return NULL;
    }
    out = w->buf;
    if (len != NULL)
        *len = w->len;
    tfp_jw_init(w);
    return out;
}

void tfp_jw_discard(tfp_jw_t *w)
{
    free(w->buf);
    tfp_jw_init(w);
}

char *tfp_error_json(tfp_status_t code, const char *msg, size_t *len)
{
    tfp_jw_t w;

    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "error");
    tfp_jw_str(&w, msg != NULL ? msg : tfp_status_text(code));
    tfp_jw_key(&w, "code");
    tfp_jw_str(&w, tfp_status_name(code));
    tfp_jw_obj_end(&w);
    put_char(&w, '\n');
    return tfp_jw_finish(&w, len);
}
