/* doc.h - the tensor document model: one or more named tensors plus string metadata.
 *
 * A tfp_doc_t describes tensors whose bytes live elsewhere (the buffer a decoder parsed,
 * or the caller's memory): each tensor's data pointer is borrowed. The doc owns its names,
 * shapes and metadata strings. Not thread-safe; a doc is owned by one thread at a time.
 */
#ifndef TFP_DOC_H
#define TFP_DOC_H

#include <stddef.h>
#include <stdint.h>
#include "proto/dtype.h"
#include "proto/status.h"

#define TFP_MAX_RANK 8
#define TFP_MAX_NAME 1024           /* bytes of one tensor name or metadata key */

typedef struct {
    char *name;                     /* owned, NUL-terminated */
    tfp_dtype_t dtype;
    int rank;                       /* 0..TFP_MAX_RANK */
    uint64_t shape[TFP_MAX_RANK];
    uint64_t offset;                /* from the start of the data section */
    uint64_t nbytes;
    const uint8_t *data;            /* borrowed; NULL until bound */
} tfp_tensor_t;

typedef struct {
    char *key;                      /* owned */
    char *value;                    /* owned */
} tfp_meta_t;

typedef struct {
    size_t n, cap;
    tfp_tensor_t *t;
    size_t nmeta, capmeta;
    tfp_meta_t *meta;
    int meta_object;                /* 1: it had a "__metadata__" object even with no keys
                                     * (decoded as such; encoded back, so what echoes a
                                     * document returns what it got) */
} tfp_doc_t;

tfp_doc_t *tfp_doc_new(void);
void tfp_doc_free(tfp_doc_t *doc);                /* NULL is a no-op */

/* Element count and byte size of a shape, with overflow checks (TFP_ERANGE on overflow;
 * a shape with a 0 dim counts 0 elements whatever its other dims). TFP_EINVAL for a rank
 * outside 0..TFP_MAX_RANK or an unknown dtype, and for packed sub-byte elements (F4, F6_*)
 * that do not fill whole bytes (count x bits must be a multiple of 8, as in safetensors). */
tfp_status_t tfp_shape_count(int rank, const uint64_t *shape, uint64_t *count, tfp_err_t *err);
tfp_status_t tfp_shape_nbytes(tfp_dtype_t dt, int rank, const uint64_t *shape,
                              uint64_t *nbytes, tfp_err_t *err);

/* Appends a tensor (name copied, data borrowed). Checks the name is valid UTF-8 without NUL,
 * 1..TFP_MAX_NAME bytes, not "__metadata__", not already present; the rank; and that nbytes
 * matches dtype x shape. offset is left 0 (assigned by the encoder). Dims above 2^53 are
 * refused (TFP_ERANGE): JSON readers cannot represent them exactly. Other refusals are
 * TFP_EINVAL. */
tfp_status_t tfp_doc_add(tfp_doc_t *doc, const char *name, tfp_dtype_t dt, int rank,
                         const uint64_t *shape, const void *data, uint64_t nbytes,
                         tfp_err_t *err);
/* Sets (or replaces) a metadata key; both strings copied. The key must be valid UTF-8 of at
 * most TFP_MAX_NAME bytes, the value valid UTF-8. */
tfp_status_t tfp_doc_set_meta(tfp_doc_t *doc, const char *key, const char *value,
                              tfp_err_t *err);
/* As tfp_doc_add and tfp_doc_set_meta, but without the O(n) scan for an existing name or key
 * (added with the implementation): for decoders, which check a whole header for duplicates
 * at once. The caller guarantees uniqueness; everything else is still checked. */
tfp_status_t tfp_doc_append(tfp_doc_t *doc, const char *name, tfp_dtype_t dt, int rank,
                            const uint64_t *shape, const void *data, uint64_t nbytes,
                            tfp_err_t *err);
tfp_status_t tfp_doc_append_meta(tfp_doc_t *doc, const char *key, const char *value,
                                 tfp_err_t *err);
const tfp_tensor_t *tfp_doc_find(const tfp_doc_t *doc, const char *name);
const char *tfp_doc_meta(const tfp_doc_t *doc, const char *key);

/* Total bytes of all tensors' data. */
uint64_t tfp_doc_data_bytes(const tfp_doc_t *doc);

#endif
