/* tfetch-dtype.h - the one table of tensor element types (installed beside tfetch.h).
 *
 * Every dtype is a row here, once: its name (which is also its safetensors spelling), its
 * value and its width in bits. tf_dtype_t (tfetch.h), the plugin ABI's TFPL_* (tfetch-plugin.h)
 * and proto's tfp_dtype_t with its names and sizes (proto/dtype.h) are generated from it, so
 * they cannot drift. Like tfetch-status.h it holds macros only (standard C, no declarations)
 * because installed headers include it and must stay self-contained. Values are wire and ABI
 * contracts: rows are only ever appended. Widths below 8 bits (F4, F6_*) are packed: a tensor
 * of them takes count x bits / 8 bytes, which must be whole (as in safetensors). The narrow
 * floats: F8_E4M3 is OCP's E4M3FN, F8_E8M0 the MX block scale (2^(e-127), 0xFF NaN), F4 is
 * E2M1 and F6_* are the MX six-bit floats, the FNUZ pair are the bias-8/16 variants with one
 * NaN (0x80) and no negative zero; C64 is two F32 (real, imaginary). Pure data.
 *
 * name is without a prefix and is the safetensors name.
 */
#ifndef TFETCH_DTYPE_H
#define TFETCH_DTYPE_H

/* The rows, each M(X, name, value, bits), so a header can hand X fewer columns (tfetch.h's
 * two-column TF_DTYPE_MAP). Use TF_DTYPE_ROWS(X), X(name, value, bits). */
#define TF_DTYPE_ROWS_(M, X)   \
    M(X, F64,          0,  64) \
    M(X, F32,          1,  32) \
    M(X, F16,          2,  16) \
    M(X, BF16,         3,  16) \
    M(X, F8_E4M3,      4,   8) \
    M(X, F8_E5M2,      5,   8) \
    M(X, I64,          6,  64) \
    M(X, I32,          7,  32) \
    M(X, I16,          8,  16) \
    M(X, I8,           9,   8) \
    M(X, U64,         10,  64) \
    M(X, U32,         11,  32) \
    M(X, U16,         12,  16) \
    M(X, U8,          13,   8) \
    M(X, BOOL,        14,   8) \
    M(X, F8_E8M0,     15,   8) \
    M(X, F4,          16,   4) \
    M(X, F6_E2M3,     17,   6) \
    M(X, F6_E3M2,     18,   6) \
    M(X, F8_E4M3FNUZ, 19,   8) \
    M(X, F8_E5M2FNUZ, 20,   8) \
    M(X, C64,         21,  64)
#define TF_DTYPE_ROW3_(X, n, v, b) X(n, v, b)
#define TF_DTYPE_ROWS(X) TF_DTYPE_ROWS_(TF_DTYPE_ROW3_, X)

#endif
