/* keyhash.c - SipHash-1-3 (see keyhash.h). */
#include "config.h"
#include "proto/keyhash.h"
#include "proto/le.h"

#include <endian.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

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

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full

/* A little-endian word: one load (tfp_le64 is a byte loop the compiler keeps). */
static inline uint64_t word(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return le64toh(w);
}

static inline uint64_t lane(uint64_t acc, uint64_t in)
{
    acc += in * P2;
    acc = (acc << 31) | (acc >> 33);
    return acc * P1;
}

uint64_t tfp_bodyhash(const tfp_hashkey_t *key, const void *p, size_t len)
{
    const uint8_t *b = p;
    uint64_t v[4] = {key->k0 + P1 + P2, key->k1 + P2, key->k0 ^ key->k1, key->k1 - P1};
    size_t stripes = len / 32;
    for (size_t i = 0; i < stripes; i++, b += 32) {
        v[0] = lane(v[0], word(b));
        v[1] = lane(v[1], word(b + 8));
        v[2] = lane(v[2], word(b + 16));
        v[3] = lane(v[3], word(b + 24));
    }
    uint8_t fin[32 + 8 + 32];               /* the lanes, the length, the tail */
    size_t tail = len - stripes * 32;
    for (int i = 0; i < 4; i++)
        tfp_le64_put(fin + 8 * i, v[i]);
    tfp_le64_put(fin + 32, (uint64_t)len);
    memcpy(fin + 40, b, tail);
    return tfp_siphash(key, fin, 40 + tail, 1, 3);
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
