/* utf8.c - the UTF-8 decoder and checks of utf8.h. Pure; any thread. */
#include "proto/utf8.h"

size_t tfp_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    uint32_t v, min;
    size_t need;
    unsigned char c;

    if (n == 0)
        return 0;
    c = s[0];
    if (c < 0x80) {
        if (cp != NULL)
            *cp = c;
        return 1;
    }
    if (c < 0xC2)
        return 0;                   /* continuation byte or overlong 2-byte lead */
    if (c < 0xE0) {
        need = 1, v = c & 0x1F, min = 0x80;
    } else if (c < 0xF0) {
        need = 2, v = c & 0x0F, min = 0x800;
    } else if (c < 0xF5) {
        need = 3, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < need + 1)
        return 0;
    for (size_t i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    if (cp != NULL)
        *cp = v;
    return need + 1;
}

int tfp_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    while (i < n) {
        size_t k;

        if (p[i] < 0x80) {
            i++;
            continue;
        }
        k = tfp_utf8_next(p + i, n - i, NULL);
        if (k == 0)
            return 0;
        i += k;
    }
    return 1;
}

size_t tfp_utf8_cut(const char *s, size_t len, size_t max)
{
    size_t n;

    if (len <= max)
        return len;
    n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}
