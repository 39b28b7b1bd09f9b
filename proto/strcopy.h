/* strcopy.h - a bounded string copy and decimal digits for the request path.
 *
 * snprintf(dst, cap, "%s", src) runs glibc's whole format machinery, ~100 ns here; a request
 * over UCX made a dozen such copies on the client and the daemon (8% of the client's time in
 * an 8-byte exchange, bench/README.md). glibc 2.36 has no strlcpy. Header-only; any thread.
 */
#ifndef TFP_STRCOPY_H
#define TFP_STRCOPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Copies src (not NULL) into dst (cap bytes), cut to fit and always NUL-terminated when cap
 * > 0; returns strlen(src), so a result >= cap says it was cut, as snprintf's does. */
static inline size_t tfp_strcpy(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (cap) {
        size_t k = n < cap ? n : cap - 1;
        memmove(dst, src, k);
        dst[k] = '\0';
    }
    return n;
}

/* The decimal digits of v, what "%llu" prints, written backwards so that they end at end
 * (no NUL; 20 bytes before end are enough for any v). Returns the first digit. */
static inline char *tfp_u64_digits(char *end, uint64_t v)
{
    char *p = end;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return p;
}

#endif
