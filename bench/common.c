/* common.c - small helpers shared by the benchmark programs; see common.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench/common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void bench_errorf(const char *fmt, ...)
{
    va_list ap;
    fputs(bench_prog, stderr);
    fputs(": ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

const char *bench_fmt_size(size_t n, char *buf, size_t cap)
{
    if (n >= GIB && n % GIB == 0)
        snprintf(buf, cap, "%zu GiB", n / GIB);
    else if (n >= MIB && n % MIB == 0)
        snprintf(buf, cap, "%zu MiB", n / MIB);
    else if (n >= KIB && n % KIB == 0)
        snprintf(buf, cap, "%zu KiB", n / KIB);
    else
        snprintf(buf, cap, "%zu B", n);
    return buf;
}

int bench_parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v, mult = 1;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (end == s || errno != 0 || v == 0 || *s == '-')
        return -1;
    if (*end == 'k' || *end == 'K')
        mult = KIB;
    else if (*end == 'm' || *end == 'M')
        mult = MIB;
    else if (*end == 'g' || *end == 'G')
        mult = GIB;
    if (mult != 1)
        end++;
    if (mult != 1 && (strcmp(end, "iB") == 0 || strcmp(end, "ib") == 0))
        end += 2;
    else if (strcmp(end, "B") == 0 || strcmp(end, "b") == 0)
        end++;
    if (*end != '\0' || v > SIZE_MAX / mult)
        return -1;
    *out = (size_t)(v * mult);
    return 0;
}

int bench_parse_sizes(const char *list, size_t *sizes, int *n, int max, int allow_empty)
{
    char *copy, *save = NULL, *tok;
    int rc = 0;

    *n = 0;
    if (allow_empty && (!*list || strcmp(list, "none") == 0))
        return 0;
    if (!(copy = strdup(list)))
        return -1;
    for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == max || bench_parse_size(tok, &sizes[*n]) != 0) {
            rc = -1;
            break;
        }
        (*n)++;
    }
    free(copy);
    if (rc == 0 && *n == 0 && !allow_empty)
        rc = -1;
    return rc;
}

int bench_parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int bench_by_size(size_t n, const int tier[4])
{
    if (n <= 64 * KIB)
        return tier[0];
    if (n <= 4 * MIB)
        return tier[1];
    if (n <= 64 * MIB)
        return tier[2];
    return tier[3];
}

void bench_fill_pattern(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = (seed * 0x9E3779B97F4A7C15ull) | 1;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++)
        p[i] = (unsigned char)(x >> (8 * (i % 8)));
}

int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_percentiles(double *t, int n, double *p50, double *p99, double *sum)
{
    double s = 0;
    int i, k99;

    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    for (i = 0; i < n; i++)
        s += t[i];
    k99 = (int)((99L * n + 99) / 100) - 1;      /* nearest rank: ceil(0.99 n) - 1 */
    *p50 = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
    *p99 = t[k99];
    *sum = s;
}
