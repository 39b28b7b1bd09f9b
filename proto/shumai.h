/* shumai.h - the Shumai binary tensor format, as stock Shumai's sm.network.tfetch speaks it
 * (@shumai/shumai 0.0.13: shumai/io/encode.ts encodeBinary/decodeBinary, used by
 * shumai/network/tensor.ts).
 *
 * A message is one F32 tensor. Every integer is a little-endian int64:
 *     ndim, provenance, flags, tensor_len, props_len       40 bytes
 *     shape[ndim]                                         8 * ndim bytes
 *     float32 data, C order                               tensor_len bytes
 *     props, JSON text (tfetch sends {"collectStats":false})  props_len bytes
 * provenance is the sender's user id: Shumai writes BigInt('0x' + id) (id: 8 hex digits) into
 * a BigInt64Array, 0xffffffff when the tensor has none, and reads it back as
 * meta_data[1].toString(16). flags bit 0 is requires_grad; no other bit is defined.
 * Pure functions; any thread.
 */
#ifndef TFP_SHUMAI_H
#define TFP_SHUMAI_H

#include <stddef.h>
#include <stdint.h>
#include "proto/doc.h"

#define TFP_SHUMAI_FIXED_LEN 40                 /* the five words */
#define TFP_SHUMAI_MAX_HEADER (TFP_SHUMAI_FIXED_LEN + 8 * TFP_MAX_RANK)
#define TFP_SHUMAI_NO_PROVENANCE INT64_C(0xffffffff)
#define TFP_SHUMAI_REQUIRES_GRAD UINT64_C(1)    /* flags bit 0 */
#define TFP_SHUMAI_TENSOR_NAME "tensor"         /* the decoded tensor's name in the doc */
#define TFP_SHUMAI_DEFAULT_MAX_PROPS (1u << 20)
#define TFP_SHUMAI_USER_SIZE 18                 /* "-8000000000000000" and its NUL */

/* A decoded message. */
typedef struct {
    tfp_doc_t *doc;                 /* owned: one F32 tensor named "tensor", data in buf */
    int64_t provenance;             /* as sent; TFP_SHUMAI_NO_PROVENANCE for none */
    uint64_t flags;                 /* 0 or TFP_SHUMAI_REQUIRES_GRAD */
    const char *props;              /* borrowed span of buf; NULL when props_len is 0 */
    size_t props_len;
} tfp_shumai_msg_t;

/* Parses and validates a whole message of len bytes at buf (buf must outlive msg->doc).
 * max_props caps props_len (0: TFP_SHUMAI_DEFAULT_MAX_PROPS). Checks: at least 40 bytes;
 * ndim in 0..TFP_MAX_RANK; flags 0 or 1; tensor_len and props_len not negative; every dim
 * in 0..2^53; tensor_len == 4 x elements (overflow-checked); 40 + 8 ndim + tensor_len +
 * props_len == len exactly; props, when present, strict JSON (tfp_json_check) holding one
 * object, JSON whitespace allowed around it. Refusals: TFP_EPROTO (malformed), TFP_ERANGE
 * (a dim above 2^53, a size that overflows), TFP_ETOOBIG (props over max_props), TFP_ENOMEM,
 * TFP_EINVAL (no buf or no msg); err->msg names the field. *msg is set only on success. */
tfp_status_t tfp_shumai_decode(const uint8_t *buf, size_t len, size_t max_props,
                               tfp_shumai_msg_t *msg, tfp_err_t *err);
/* Frees msg->doc and zeroes msg. NULL is a no-op. */
void tfp_shumai_msg_clear(tfp_shumai_msg_t *msg);

/* Checks that props (n bytes; n == 0 means none and passes) is what the format carries:
 * strict JSON, one object, optional JSON whitespace around it. TFP_EPROTO otherwise. */
tfp_status_t tfp_shumai_props_check(const char *props, size_t n, tfp_err_t *err);

/* Checks that doc is what the format can carry: exactly one tensor, F32, data bound when it
 * has bytes. On success sets *t (borrowed from doc). Otherwise TFP_ENOTACCEPT naming what is
 * wrong, e.g. "Shumai's format carries only F32 tensors; 'ids' is I32" or "... exactly one
 * tensor; the document has 3 ('a', 'b', ...)". Metadata is not an error: it is not carried. */
tfp_status_t tfp_shumai_check_doc(const tfp_doc_t *doc, const tfp_tensor_t **t,
                                  tfp_err_t *err);

/* Total message length for an F32 tensor of this shape plus props_len bytes of props.
 * TFP_EINVAL for a rank outside 0..TFP_MAX_RANK; TFP_ERANGE for a dim above 2^53 or a size
 * that overflows a signed 64-bit word (the format's words are int64). */
tfp_status_t tfp_shumai_total_len(int rank, const uint64_t *shape, uint64_t props_len,
                                  uint64_t *total, tfp_err_t *err);

/* Writes the 40 + 8 rank header bytes for an F32 tensor of this shape into hdr (hdr_size
 * bytes; TFP_SHUMAI_MAX_HEADER always suffices) and sets *hdr_len. The caller then sends the
 * tensor's 4 x elements bytes straight from its own memory, then props_len bytes of props.
 * flags must be 0 or TFP_SHUMAI_REQUIRES_GRAD. Refusals as tfp_shumai_total_len, plus
 * TFP_EINVAL for bad flags or a hdr too small. Nothing is written on failure. */
tfp_status_t tfp_shumai_encode_header(int rank, const uint64_t *shape, int64_t provenance,
                                      uint64_t flags, uint64_t props_len, uint8_t *hdr,
                                      size_t hdr_size, size_t *hdr_len, tfp_err_t *err);

/* A whole message in one malloc'd buffer: header, t's bytes and props (n bytes, may be 0),
 * all copied. t must be F32 with data bound (TFP_ENOTACCEPT / TFP_EINVAL otherwise) and
 * props must pass tfp_shumai_props_check. For tests and small replies. */
tfp_status_t tfp_shumai_encode(const tfp_tensor_t *t, int64_t provenance, uint64_t flags,
                               const char *props, size_t n, uint8_t **buf, size_t *len,
                               tfp_err_t *err);

/* The user id Shumai prints for a provenance (meta_data[1].toString(16)): lowercase hex, no
 * leading zeros ("0" for 0), a '-' before the magnitude of a negative value. Returns 1 and
 * fills buf; returns 0 and sets buf to "" for TFP_SHUMAI_NO_PROVENANCE (no user id). Note
 * that a Shumai id "ffffffff" is indistinguishable from none: Shumai itself cannot tell. */
int tfp_shumai_provenance_to_user(int64_t provenance, char buf[TFP_SHUMAI_USER_SIZE]);

/* The provenance for a user id, as Shumai's encoder computes it: NULL or "" (no user id)
 * gives TFP_SHUMAI_NO_PROVENANCE; 1..16 hex digits (either case, leading zeros allowed) give
 * their value stored as an int64 (BigInt64Array wraps values of 2^63 and above to negative);
 * '-' and 1..16 hex digits with a magnitude in 1..2^63 give that negative value, so every
 * string tfp_shumai_provenance_to_user prints maps back. Anything else is TFP_EINVAL
 * ("user id 'alice' is not a hex number Shumai can carry"); *provenance set only on success. */
tfp_status_t tfp_shumai_user_to_provenance(const char *user, int64_t *provenance,
                                           tfp_err_t *err);

#endif
