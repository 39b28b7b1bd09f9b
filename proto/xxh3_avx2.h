/* xxh3_avx2.h - XXH3-128 built for AVX2, for tfp_bodyhash (see xxh3_avx2.c). */
#ifndef TFP_XXH3_AVX2_H
#define TFP_XXH3_AVX2_H

#include <stddef.h>
#include <stdint.h>

/* XXH3_128bits_withSeed of len bytes at p into out[0] (low 64 bits) and out[1] (high): 1 when
 * computed (an x86-64 CPU with AVX2, a build that has it), else 0 (out untouched). */
int tfp_xxh3_avx2(const void *p, size_t len, uint64_t seed, uint64_t out[2]);

#endif
