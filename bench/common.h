/* common.h - small helpers shared by the benchmark programs (tfetch-bench, ucx-raw, ucx-probe).
 *
 * An error printer prefixed with the program's name, size formatting and
 * parsing ("8", "64K", "4MiB", "1G"; lists "8,64K,4M"), integer option parsing, the size-tiered
 * default repetition counts, the xorshift64 payload pattern both programs agree on, and the
 * p50/p99/sum of a set of timings. No libtfetch or UCX code: libc only. Each program defines
 * bench_prog (the prefix of its error messages) and keeps its own defaults and result types.
 */
#ifndef TFETCH_BENCH_COMMON_H
#define TFETCH_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "transports/clock.h"     /* tfx_now_s(): the one monotonic clock */

#define KIB ((size_t)1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)

/* The program's name, defined once by each program: bench_errorf's "NAME: " prefix. */
extern const char *const bench_prog;

/* "PROG: " + the formatted message + newline, on stderr. */
__attribute__((format(printf, 1, 2))) void bench_errorf(const char *fmt, ...);

/* "8 B", "64 KiB", "4 MiB", "1 GiB" (the largest unit that divides n); returns buf. */
const char *bench_fmt_size(size_t n, char *buf, size_t cap);

/* "8", "64K", "64KiB", "4M", "1G" (binary multiples), no zero. 0, or -1 if malformed. */
int bench_parse_size(const char *s, size_t *out);

/* A comma-separated list of sizes into sizes[0..*n), at most max of them. allow_empty: "" or
 * "none" gives an empty list; otherwise an empty list is an error. 0, or -1. */
int bench_parse_sizes(const char *list, size_t *sizes, int *n, int max, int allow_empty);

/* A decimal long in [min, max], nothing after it. 0, or -1. */
int bench_parse_long(const char *s, long min, long max, long *out);

/* tier[0] for n <= 64 KiB, tier[1] for <= 4 MiB, tier[2] for <= 64 MiB, else tier[3]: the
 * default repetition and warm-up counts by size (each program has its own tiers). */
int bench_by_size(size_t n, const int tier[4]);

/* A size- and position-dependent pattern (xorshift64 over 8-byte words), so a misplaced or
 * stale byte shows. */
void bench_fill_pattern(unsigned char *p, size_t n, uint64_t seed);

/* qsort comparison of doubles, ascending. */
int bench_cmp_double(const void *a, const void *b);

/* Sorts t[0..n) (n > 0) and gives its median, its nearest-rank 99th percentile
 * (t[ceil(0.99 n) - 1]) and its sum. */
void bench_percentiles(double *t, int n, double *p50, double *p99, double *sum);

#endif
