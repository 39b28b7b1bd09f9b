/* le.h - little-endian integers in byte buffers: the one place the wire formats (the UCX
 * frame, the shm messages, safetensors' and Shumai's length prefixes, tensor elements)
 * read and write them. Byte by byte, so any alignment and any host order are fine; the
 * compiler turns the fixed widths into single loads and stores.
 */
#ifndef TFP_LE_H
#define TFP_LE_H

#include <stddef.h>
#include <stdint.h>

/* The n-byte (1..8) little-endian integer at p. */
static inline uint64_t tfp_le_get(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i > 0; i--)
        v = v << 8 | p[i - 1];
    return v;
}

/* Writes the low n bytes (1..8) of v at p, little-endian. */
static inline void tfp_le_put(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

static inline uint32_t tfp_le32(const uint8_t *p) { return (uint32_t)tfp_le_get(p, 4); }
static inline uint64_t tfp_le64(const uint8_t *p) { return tfp_le_get(p, 8); }
static inline void tfp_le32_put(uint8_t *p, uint32_t v) { tfp_le_put(p, v, 4); }
static inline void tfp_le64_put(uint8_t *p, uint64_t v) { tfp_le_put(p, v, 8); }

#endif
