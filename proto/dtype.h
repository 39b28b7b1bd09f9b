/* dtype.h - the element types a tensor can have.
 *
 * The order and values match tf_dtype_t in client/tfetch.h. Names are the safetensors
 * spellings ("F32", "BF16", "F8_E4M3"). Pure functions; any thread.
 */
#ifndef TFP_DTYPE_H
#define TFP_DTYPE_H

#include <stddef.h>

#define TFP_DTYPE_MAP(X)      \
    X(F64,     0, 8, "F64")   \
    X(F32,     1, 4, "F32")   \
    X(F16,     2, 2, "F16")   \
    X(BF16,    3, 2, "BF16")  \
    X(F8_E4M3, 4, 1, "F8_E4M3") \
    X(F8_E5M2, 5, 1, "F8_E5M2") \
    X(I64,     6, 8, "I64")   \
    X(I32,     7, 4, "I32")   \
    X(I16,     8, 2, "I16")   \
    X(I8,      9, 1, "I8")    \
    X(U64,    10, 8, "U64")   \
    X(U32,    11, 4, "U32")   \
    X(U16,    12, 2, "U16")   \
    X(U8,     13, 1, "U8")    \
    X(BOOL,   14, 1, "BOOL")

typedef enum {
#define X(n, v, sz, s) TFP_##n = (v),
    TFP_DTYPE_MAP(X)
#undef X
    TFP_DTYPE_COUNT
} tfp_dtype_t;

/* Static name, or NULL for an out-of-range value. */
const char *tfp_dtype_name(tfp_dtype_t dt);
/* Bytes per element; 0 for an out-of-range value. */
size_t tfp_dtype_size(tfp_dtype_t dt);
/* Exact, case-sensitive match of len bytes at s; 0 and *out set, or -1. */
int tfp_dtype_from_name(const char *s, size_t len, tfp_dtype_t *out);

#endif
