/* jsoncheck.c - the strict JSON gate in front of cJSON (jsoncheck.h): RFC 8259 held byte
 * by byte before cJSON (which is lax) builds a tree, so every proto parser sees the same
 * strict language, and the duplicate keys cJSON keeps silently. Depends on nothing but
 * proto/utf8.h and proto/status.h: cjson.c calls it, and the parsers call cjson.c. No state;
 * any thread.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/jsoncheck.h"
#include "proto/utf8.h"

#define MAX_NUMBER_CHARS 63         /* cJSON 1.7.15 copies at most 63 chars of a number */

/* ---- the strict checker -------------------------------------------------------------- */

static tfp_status_t bad(tfp_err_t *err, size_t at, const char *what)
{
    return tfp_err_set(err, TFP_EPROTO, "invalid JSON at byte %zu: %s", at, what);
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

static int hex4(const char *s, size_t n, size_t i, unsigned *out)
{
    unsigned v = 0;

    if (i > n || n - i < 4)
        return -1;
    for (int k = 0; k < 4; k++) {
        char c = s[i + k];

        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* s[*pos] is '"'; on success *pos is just past the closing quote. */
static tfp_status_t scan_string(const char *s, size_t n, size_t *pos, tfp_err_t *err)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = *pos + 1;

    for (;;) {
        unsigned cp, lo;
        size_t k;

        if (i >= n)
            return bad(err, *pos, "unterminated string");
        if (u[i] == '"')
            break;
        if (u[i] < 0x20)
            return bad(err, i, "raw control character in string");
        if (u[i] >= 0x80) {
            k = tfp_utf8_next(u + i, n - i, NULL);
            if (k == 0)
                return bad(err, i, "not valid UTF-8");
            i += k;
            continue;
        }
        if (u[i] != '\\') {
            i++;
            continue;
        }
        if (i + 1 >= n)
            return bad(err, i, "unterminated string");
        switch (s[i + 1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            i += 2;
            continue;
        case 'u':
            break;
        default:
            return bad(err, i, "invalid escape");
        }
        if (hex4(s, n, i + 2, &cp) != 0)
            return bad(err, i, "invalid \\u escape");
        if (cp == 0)
            return bad(err, i, "\\u0000 is not allowed");
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return bad(err, i, "unpaired surrogate escape");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (i + 7 >= n || s[i + 6] != '\\' || s[i + 7] != 'u' ||
                hex4(s, n, i + 8, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
                return bad(err, i, "unpaired surrogate escape");
            i += 12;
            continue;
        }
        i += 6;
    }
    *pos = i + 1;
    return TFP_OK;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static tfp_status_t scan_number(const char *s, size_t n, size_t *pos, tfp_err_t *err)
{
    size_t i = *pos;

    if (s[i] == '-')
        i++;
    if (i < n && s[i] == '0') {
        i++;
    } else if (i < n && s[i] >= '1' && s[i] <= '9') {
        while (i < n && is_digit(s[i]))
            i++;
    } else {
        return bad(err, *pos, "invalid number");
    }
    if (i < n && s[i] == '.') {
        i++;
        if (i >= n || !is_digit(s[i]))
            return bad(err, *pos, "invalid number");
        while (i < n && is_digit(s[i]))
            i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= n || !is_digit(s[i]))
            return bad(err, *pos, "invalid number");
        while (i < n && is_digit(s[i]))
            i++;
    }
    if (i - *pos > MAX_NUMBER_CHARS)
        return bad(err, *pos, "number longer than 63 characters");
    *pos = i;
    return TFP_OK;
}

static int literal(const char *s, size_t n, size_t i, const char *word)
{
    size_t k = strlen(word);

    return n - i >= k && memcmp(s + i, word, k) == 0;
}

/* After '{' or ',' inside an object: a key, then ':'. */
static tfp_status_t scan_key(const char *s, size_t n, size_t *pos, tfp_err_t *err)
{
    size_t i = skip_ws(s, n, *pos);
    tfp_status_t st;

    if (i >= n || s[i] != '"')
        return bad(err, i, "expected a string key");
    st = scan_string(s, n, &i, err);
    if (st != TFP_OK)
        return st;
    i = skip_ws(s, n, i);
    if (i >= n || s[i] != ':')
        return bad(err, i, "expected ':' after key");
    *pos = i + 1;
    return TFP_OK;
}

tfp_status_t tfp_json_check(const char *s, size_t n, size_t *end, tfp_err_t *err)
{
    char stack[TFP_JSON_MAX_DEPTH];             /* '{' or '[' per open container */
    int depth = 0;
    size_t i = 0;
    tfp_status_t st;

    if (s == NULL)
        return bad(err, 0, "no text");
    for (;;) {
        /* a value starts here */
        i = skip_ws(s, n, i);
        if (i >= n)
            return bad(err, i, "unexpected end of text");
        if (s[i] == '{' || s[i] == '[') {
            char open = s[i];

            if (depth >= TFP_JSON_MAX_DEPTH)
                return tfp_err_set(err, TFP_EPROTO,
                                   "invalid JSON at byte %zu: nested deeper than %d", i,
                                   TFP_JSON_MAX_DEPTH);
            stack[depth++] = open;
            i = skip_ws(s, n, i + 1);
            if (i < n && s[i] == (open == '{' ? '}' : ']')) {
                depth--;
                i++;
            } else if (open == '{') {
                st = scan_key(s, n, &i, err);
                if (st != TFP_OK)
                    return st;
                continue;
            } else {
                continue;
            }
        } else if (s[i] == '"') {
            st = scan_string(s, n, &i, err);
            if (st != TFP_OK)
                return st;
        } else if (s[i] == '-' || is_digit(s[i])) {
            st = scan_number(s, n, &i, err);
            if (st != TFP_OK)
                return st;
        } else if (literal(s, n, i, "true")) {
            i += 4;
        } else if (literal(s, n, i, "false")) {
            i += 5;
        } else if (literal(s, n, i, "null")) {
            i += 4;
        } else {
            return bad(err, i, "expected a value");
        }
        /* after a value: close containers, or a comma then the next member */
        for (;;) {
            if (depth == 0) {
                if (end != NULL)
                    *end = i;
                return TFP_OK;
            }
            i = skip_ws(s, n, i);
            if (i >= n)
                return bad(err, i, "unexpected end of text");
            if (s[i] == ',') {
                i++;
                if (stack[depth - 1] == '{') {
                    st = scan_key(s, n, &i, err);
                    if (st != TFP_OK)
                        return st;
                }
                break;
            }
            if (s[i] != (stack[depth - 1] == '{' ? '}' : ']'))
                return bad(err, i, stack[depth - 1] == '{' ? "expected ',' or '}'"
                                                           : "expected ',' or ']'");
            depth--;
            i++;
        }
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char *tfp_find_dup(const char **keys, size_t n)
{
    if (n < 2)
        return NULL;
    qsort(keys, n, sizeof *keys, cmp_str);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(keys[i - 1], keys[i]) == 0)
            return keys[i];
    }
    return NULL;
}

/* ---- error bodies -------------------------------------------------------------------- */

/* Copies at most size-1 bytes, not splitting a UTF-8 character. */
