/* cjson.c - the strict parse and the checked getters of cjson.h, over cJSON. Pure; any
 * thread (see cjson.h for cJSON's one global).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/cjson.h"
#include "proto/jsoncheck.h"

size_t tfp_cj_skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

/* ---- exact numbers -------------------------------------------------------------------
 * cJSON keeps a number only as a double: 2^53+1 becomes 2^53 and "2.0" looks like 2. So the
 * text of every number that is not a plain integer of at most 2^53 (the ones a double holds
 * exactly) is kept in the item's valuestring, which cJSON leaves NULL for numbers and frees
 * with the item. The text has passed tfp_json_check, and cJSON's tree lists values in text
 * order, so the n-th number token is the n-th number item of a depth-first walk. */

#define EXACT_MAX (UINT64_C(1) << 53)

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int in_number(char c)
{
    return is_digit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

/* The next number token at or after *at in s[0..n) (checked JSON): 1 with its start and
 * length, *at past it; 0 when there is none. Strings are skipped, with their escapes. */
static int next_number(const char *s, size_t n, size_t *at, size_t *start, size_t *len)
{
    size_t i = *at;

    while (i < n) {
        if (s[i] == '"') {
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\')
                    i++;
            i++;
        } else if (s[i] == '-' || is_digit(s[i])) {
            *start = i;
            while (i < n && in_number(s[i]))
                i++;
            *len = i - *start;
            *at = i;
            return 1;
        } else {
            i++;
        }
    }
    *at = i;
    return 0;
}

/* A plain integer (digits only, no sign, fraction or exponent) of at most EXACT_MAX? */
static int plain_exact(const char *p, size_t len)
{
    uint64_t v = 0;

    if (len == 0 || len > 16)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit(p[i]))
            return 0;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    return v <= EXACT_MAX;
}

/* Walks item and what follows it (depth first, in text order); 0, or -1 out of memory. */
static int keep_number_texts(cJSON *item, const char *s, size_t n, size_t *at)
{
    for (; item != NULL; item = item->next) {
        size_t start, len;

        if (cJSON_IsNumber(item) && item->valuestring == NULL &&
            next_number(s, n, at, &start, &len) && !plain_exact(s + start, len)) {
            char *t = cJSON_malloc(len + 1);

            if (t == NULL)
                return -1;
            memcpy(t, s + start, len);
            t[len] = '\0';
            item->valuestring = t;
        }
        if (item->child != NULL && keep_number_texts(item->child, s, n, at) != 0)
            return -1;
    }
    return 0;
}

tfp_status_t tfp_cj_parse(const char *s, size_t n, unsigned flags, cJSON **out, size_t *end,
                          tfp_err_t *err)
{
    size_t stop;
    cJSON *root;
    tfp_status_t st;

    st = tfp_json_check(s, n, &stop, err);
    if (st != TFP_OK)
        return st;
    if ((flags & TFP_CJ_WHOLE) && tfp_cj_skip_ws(s, n, stop) != n)
        return tfp_err_set(err, TFP_EPROTO, "invalid JSON at byte %zu: text after the value",
                           tfp_cj_skip_ws(s, n, stop));
    root = cJSON_ParseWithLength(s, stop);
    if (root == NULL)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory parsing JSON");
    size_t at = 0;
    if (keep_number_texts(root, s, stop, &at) != 0) {
        cJSON_Delete(root);
        return tfp_err_set(err, TFP_ENOMEM, "out of memory parsing JSON");
    }
    if (flags & TFP_CJ_NODUP) {
        int dup = tfp_cj_dup(root, 1, NULL);

        if (dup != 0) {
            cJSON_Delete(root);
            return dup < 0 ? tfp_err_set(err, TFP_ENOMEM, "out of memory parsing JSON")
                           : tfp_err_set(err, TFP_EPROTO, "duplicate key in JSON object");
        }
    }
    if (end != NULL)
        *end = stop;
    *out = root;
    return TFP_OK;
}

int tfp_cj_dup(const cJSON *item, int deep, const char **dup)
{
    const cJSON *c;
    const char **keys, *found;
    size_t n = 0, i = 0;

    for (c = item->child; c != NULL; c = c->next) {
        if (deep) {
            int sub = tfp_cj_dup(c, 1, dup);

            if (sub != 0)
                return sub;
        }
        n++;
    }
    if (!cJSON_IsObject(item) || n < 2)
        return 0;
    keys = malloc(n * sizeof *keys);
    if (keys == NULL)
        return -1;
    for (c = item->child; c != NULL; c = c->next)
        keys[i++] = c->string;
    found = tfp_find_dup(keys, n);
    free(keys);
    if (found != NULL && dup != NULL)
        *dup = found;
    return found != NULL;
}

/* By the double: right for the plain integers up to 2^53 (exact) and for numbers spelt with
 * a fraction or an exponent ("2.0", "1E2") below 2^53; at or above it a double may be a
 * rounding (9007199254740993.0 reads as 2^53), so those are refused as too high. */
static int double_uint(double d, int plain, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (!(d >= (double)lo))
        return TFP_CJ_ELOW;
    if (d > (double)hi || (!plain && d >= (double)EXACT_MAX))
        return TFP_CJ_EHIGH;
    if (d != (double)(uint64_t)d)
        return TFP_CJ_EFRAC;
    *out = (uint64_t)d;
    return 0;
}

static int get_uint(const cJSON *item, uint64_t lo, uint64_t hi, int strict, uint64_t *out)
{
    const char *t, *p;
    uint64_t v = 0;

    if (!cJSON_IsNumber(item))
        return TFP_CJ_ENOTNUM;
    t = item->valuestring;
    if (t == NULL)                          /* a plain integer of at most 2^53 */
        return double_uint(item->valuedouble, 1, lo, hi, out);
    for (p = t; *p >= '0' && *p <= '9'; p++)
        ;
    if (p == t || *p != '\0') {             /* a sign, a fraction or an exponent */
        if (!strict)
            return double_uint(item->valuedouble, 0, lo, hi, out);
        if (t[0] == '-')
            return TFP_CJ_ELOW;             /* "-0" too: the reference reader refuses it */
        return item->valuedouble > (double)hi ? TFP_CJ_EHIGH : TFP_CJ_EFRAC;
    }
    for (p = t; *p != '\0'; p++) {          /* digits only: read exactly */
        if (__builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v))
            return TFP_CJ_EHIGH;            /* above 2^64-1 */
    }
    if (v < lo)
        return TFP_CJ_ELOW;
    if (v > hi)
        return TFP_CJ_EHIGH;
    *out = v;
    return 0;
}

int tfp_cj_uint(const cJSON *item, uint64_t lo, uint64_t hi, uint64_t *out)
{
    return get_uint(item, lo, hi, 0, out);
}

int tfp_cj_count(const cJSON *item, uint64_t lo, uint64_t hi, uint64_t *out)
{
    return get_uint(item, lo, hi, 1, out);
}

int tfp_cj_str(const cJSON *item, char *dst, size_t max)
{
    size_t n;

    if (!cJSON_IsString(item))
        return -1;
    n = strlen(item->valuestring);
    if (n > max)
        return -1;
    memcpy(dst, item->valuestring, n + 1);
    return 0;
}

tfp_status_t tfp_cj_prefix(tfp_err_t *err, tfp_status_t code, const char *what)
{
    char inner[sizeof err->msg];

    if (err == NULL)
        return code;
    memcpy(inner, err->msg, sizeof inner);
    inner[sizeof inner - 1] = '\0';
    return tfp_err_set(err, code, "%s: %s", what, inner);
}
