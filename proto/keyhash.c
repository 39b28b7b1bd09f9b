/* keyhash.c - SipHash-1-3, and a keyed digest of large bodies over xxHash (see keyhash.h). */
#include "config.h"
#include "proto/keyhash.h"
#include "proto/le.h"
#include "proto/xxh3_avx2.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <xxhash.h>

static inline uint64_t rotl(uint64_t x, unsigned b) { return (x << b) | (x >> (64 - b)); }

/* One SipRound over the state v[4]. */
static inline void sipround(uint64_t v[4])
{
    v[0] += v[1];
    v[1] = rotl(v[1], 13) ^ v[0];
    v[0] = rotl(v[0], 32);
    v[2] += v[3];
    v[3] = rotl(v[3], 16) ^ v[2];
    v[0] += v[3];
    v[3] = rotl(v[3], 21) ^ v[0];
    v[2] += v[1];
    v[1] = rotl(v[1], 17) ^ v[2];
    v[2] = rotl(v[2], 32);
}

uint64_t tfp_siphash(const tfp_hashkey_t *key, const void *data, size_t len, unsigned c,
                     unsigned d)
{
    const uint8_t *p = data;
    uint64_t v[4] = {key->k0 ^ 0x736f6d6570736575ull, key->k1 ^ 0x646f72616e646f6dull,
                     key->k0 ^ 0x6c7967656e657261ull, key->k1 ^ 0x7465646279746573ull};
    size_t whole = len & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = tfp_le64(p + i);
        v[3] ^= m;
        for (unsigned r = 0; r < c; r++)
            sipround(v);
        v[0] ^= m;
    }
    /* The last 0-7 bytes, little-endian, with the length's low byte on top. */
    uint64_t b = (uint64_t)len << 56;
    for (size_t i = 0; i < (len & 7); i++)
        b |= (uint64_t)p[whole + i] << (8 * i);
    v[3] ^= b;
    for (unsigned r = 0; r < c; r++)
        sipround(v);
    v[0] ^= b;
    v[2] ^= 0xff;
    for (unsigned r = 0; r < d; r++)
        sipround(v);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

uint64_t tfp_keyhash(const tfp_hashkey_t *key, const void *p, size_t len)
{
    return tfp_siphash(key, p, len, 1, 3);
}

/* The fast part is xxHash's XXH3-128 (Debian's libxxhash, the reference implementation; or
 * the same function built for AVX2 where the CPU has it: xxh3_avx2.c), seeded from the key;
 * its digest and the length then go through SipHash-1-3 under the whole key, so the result
 * depends on the secret as a PRF's does on everything but XXH3's collisions, which the
 * body's owner cannot aim at without the seed. */
uint64_t tfp_bodyhash(const tfp_hashkey_t *key, const void *p, size_t len)
{
    uint64_t x[2];
    if (!tfp_xxh3_avx2(p, len, key->k0 ^ key->k1, x)) {
        XXH128_hash_t h = XXH3_128bits_withSeed(p, len, key->k0 ^ key->k1);
        x[0] = h.low64;
        x[1] = h.high64;
    }
    uint8_t fin[24];
    tfp_le64_put(fin, x[0]);
    tfp_le64_put(fin + 8, x[1]);
    tfp_le64_put(fin + 16, (uint64_t)len);
    return tfp_siphash(key, fin, sizeof fin, 1, 3);
}

int tfp_hashkey_new(tfp_hashkey_t *key)
{
    if (getrandom(key, sizeof *key, 0) == (ssize_t)sizeof *key)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    key->k0 = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)key;
    key->k1 = (uint64_t)ts.tv_sec * 0xbf58476d1ce4e5b9ull ^ (uint64_t)(uintptr_t)&ts;
    return -1;
}
