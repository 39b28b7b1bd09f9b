/* ids.c - validation of tensor names, route names, user ids and request ids, and the one
 * strict decimal parser used for numbers in URLs and headers.
 *
 * Pure functions over NUL-terminated strings; no state; any thread.
 */
#include <string.h>

#include "proto/ids.h"

/* Each byte's class, one load per character (every request's ids are checked at both ends):
 * ID_CHAR for [A-Za-z0-9._-], ID_COLON for ':' (request ids only). */
enum { ID_CHAR = 1, ID_COLON = 2 };
#define R4(c) [c] = ID_CHAR, [c + 1] = ID_CHAR, [c + 2] = ID_CHAR, [c + 3] = ID_CHAR
static const unsigned char id_class[256] = {
    R4('0'), R4('4'), ['8'] = ID_CHAR, ['9'] = ID_CHAR,
    R4('A'), R4('E'), R4('I'), R4('M'), R4('Q'), R4('U'), ['Y'] = ID_CHAR, ['Z'] = ID_CHAR,
    R4('a'), R4('e'), R4('i'), R4('m'), R4('q'), R4('u'), ['y'] = ID_CHAR, ['z'] = ID_CHAR,
    ['.'] = ID_CHAR, ['_'] = ID_CHAR, ['-'] = ID_CHAR, [':'] = ID_COLON};
#undef R4

/* 1 if s is 1..max characters, each of a class in ok. */
static int valid(const char *s, size_t max, int colon_ok)
{
    unsigned ok = ID_CHAR | (colon_ok ? ID_COLON : 0);
    size_t n = 0;

    if (s == NULL)
        return 0;
    for (; s[n] != '\0'; n++) {
        if (n >= max || !(id_class[(unsigned char)s[n]] & ok))
            return 0;
    }
    return n > 0;
}

int tfp_name_valid(const char *s)
{
    if (!valid(s, TFP_MAX_TENSOR_NAME, 0))
        return 0;
    return strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

int tfp_user_id_valid(const char *s)
{
    return valid(s, TFP_MAX_USER_ID, 0);
}

int tfp_request_id_valid(const char *s)
{
    return valid(s, TFP_MAX_REQUEST_ID, 1);
}

int tfp_worker_secret_valid(const char *s)
{
    if (!s)
        return 0;
    size_t i = 0;
    for (; s[i] && i <= TFP_WORKER_SECRET_LEN; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return i == TFP_WORKER_SECRET_LEN;
}

int tfp_worker_secret_equal(const char *a, const char *b)
{
    if (!tfp_worker_secret_valid(a) || !tfp_worker_secret_valid(b))
        return 0;
    unsigned char diff = 0;
    for (size_t i = 0; i < TFP_WORKER_SECRET_LEN; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

int tfp_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int tfp_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;

    if (s == NULL || *s == '\0')
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (__builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v) || v > max)
            return -1;
    }
    if (out != NULL)
        *out = v;
    return 0;
}
