/* dtype.h - the element types a tensor can have.
 *
 * Generated from the one table, tfetch-dtype.h, as tf_dtype_t (client/tfetch.h) and the plugin
 * ABI's TFPL_* are. Names are the safetensors spellings ("F32", "BF16", "F8_E4M3"). Types
 * narrower than a byte (F4, F6_*) are packed: use tfp_dtype_bits and tfp_shape_nbytes
 * (proto/doc.h), not tfp_dtype_size, for them. Pure functions; any thread.
 */
#ifndef TFP_DTYPE_H
#define TFP_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/tfetch-dtype.h"

/* X(name, value, bits, "name") for every row of the one table (tfetch-dtype.h). */
#define TFP_DTYPE_ROW4_(X, n, v, b) X(n, v, b, #n)
#define TFP_DTYPE_MAP(X) TF_DTYPE_ROWS_(TFP_DTYPE_ROW4_, X)

typedef enum {
#define X(n, v, sz, s) TFP_##n = (v),
    TFP_DTYPE_MAP(X)
#undef X
    TFP_DTYPE_COUNT
} tfp_dtype_t;

/* Static name, or NULL for an out-of-range value. */
const char *tfp_dtype_name(tfp_dtype_t dt);
/* 1 for a known dtype value, 0 otherwise. */
int tfp_dtype_valid(tfp_dtype_t dt);
/* Bits per element (4 for F4); 0 for an out-of-range value. */
unsigned tfp_dtype_bits(tfp_dtype_t dt);
/* Bytes per element; 0 for an out-of-range value and for the packed sub-byte types. */
size_t tfp_dtype_size(tfp_dtype_t dt);
/* Exact, case-sensitive match of len bytes at s; 0 and *out set, or -1. */
int tfp_dtype_from_name(const char *s, size_t len, tfp_dtype_t *out);

#endif
