/* keyhash.h - a keyed hash for tables indexed by strings that clients choose.
 *
 * A client picks its request ids, tensor names and user ids, so a table hashed with a fixed
 * function can be filled with keys that all land in one place, turning every lookup into a
 * walk (hash flooding). SipHash-1-3 with a secret 128-bit key (one per table, from
 * getrandom) makes that guess impossible without the key. Debian 12's nettle (3.8) has no
 * SipHash, hence our own, written from the paper (Aumasson and Bernstein, 2012) with the
 * 1-3 rounds that Rust's and Python's tables use. Pure; any thread.
 */
#ifndef TFP_KEYHASH_H
#define TFP_KEYHASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t k0, k1;
} tfp_hashkey_t;

/* A fresh secret key from getrandom(); 0, or -1 when the kernel gave no randomness (*key
 * then still holds a key made from the time and the address space: usable, not secret). */
int tfp_hashkey_new(tfp_hashkey_t *key);
/* SipHash-1-3 of len bytes at p under key. */
uint64_t tfp_keyhash(const tfp_hashkey_t *key, const void *p, size_t len);
/* A digest of a large body (len bytes at p) under key, at about memcpy speed: XXH3-128
 * (libxxhash's, or built for AVX2 where the CPU has it: the same value) seeded from the key,
 * then that digest and the length through SipHash-1-3. Not a PRF like tfp_keyhash: for
 * comparing bodies whose owner cannot see the key (the replay window, keyed by principal),
 * not for indexing tables. */
uint64_t tfp_bodyhash(const tfp_hashkey_t *key, const void *p, size_t len);
/* SipHash-c-d (2, 4: the paper's test vectors); key->k0 is bytes 0-7 of the key read
 * little-endian, k1 bytes 8-15. */
uint64_t tfp_siphash(const tfp_hashkey_t *key, const void *p, size_t len, unsigned c,
                     unsigned d);

#endif
