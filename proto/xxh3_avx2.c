/* xxh3_avx2.c - XXH3-128 compiled for AVX2 (xxhash.h inline), for tfp_bodyhash.
 *
 * Debian's libxxhash is built for the x86-64 baseline, SSE2: a 16 MiB body took 2.0 ms to
 * digest on our VMs, where the same function built for AVX2 takes 0.8 ms (the replay window
 * digests every call that names a request id, on the request's path). XXH3's value does not
 * depend on the vector width it was computed with (check_ids holds the two to each other).
 * This file alone is built for AVX2, and only run where the CPU says it has it. Pure; any
 * thread.
 */
#include "config.h"
#include "proto/xxh3_avx2.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("avx2")
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

int tfp_xxh3_avx2(const void *p, size_t len, uint64_t seed, uint64_t out[2])
{
    if (!__builtin_cpu_supports("avx2"))   /* a word libgcc read from CPUID at load */
        return 0;
    XXH128_hash_t h = XXH3_128bits_withSeed(p, len, seed);
    out[0] = h.low64;
    out[1] = h.high64;
    return 1;
}
#else
int tfp_xxh3_avx2(const void *p, size_t len, uint64_t seed, uint64_t out[2])
{
    (void)p, (void)len, (void)seed, (void)out;
    return 0;
}
#endif
