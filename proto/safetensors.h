/* safetensors.h - strict safetensors encode/decode.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON (an object: tensor name ->
 * {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional "__metadata__" object of
 * string -> string), optionally padded with trailing spaces, then the data section. The
 * decoder accepts exactly what the format allows and rejects everything else with an error
 * that names the problem. Pure functions; any thread.
 */
#ifndef TFP_SAFETENSORS_H
#define TFP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "proto/doc.h"

typedef struct {
    uint64_t max_header;            /* cap on N; default TFP_ST_DEFAULT_MAX_HEADER */
    size_t max_tensors;             /* cap on entries; default TFP_ST_DEFAULT_MAX_TENSORS */
} tfp_st_limits_t;                  /* a 0 field means its default */

#define TFP_ST_DEFAULT_MAX_HEADER  (16u << 20)
#define TFP_ST_DEFAULT_MAX_TENSORS 100000u

/* Parses and validates a whole safetensors document of len bytes at buf (on failure *out is
 * NULL). On success *out
 * describes every tensor with data pointers into buf (buf must outlive the doc), offsets
 * relative to the data section, and tensors listed in header order. limits may be NULL
 * (defaults). Rejections (TFP_EPROTO, TFP_ETOOBIG for the header and tensor-count caps,
 * TFP_ERANGE for overflowing sizes, TFP_ENOMEM) say what was wrong in err->msg.
 * Besides the safetensors rules, names and keys must not contain NUL (\u0000) and tensor
 * names are 1..TFP_MAX_NAME bytes. The data section must be tiled exactly: sorted by
 * offsets, each tensor begins where the previous one ended (so a zero-size tensor may sit
 * at any tensor boundary, as in the reference implementation). */
tfp_status_t tfp_st_decode(const uint8_t *buf, size_t len, const tfp_st_limits_t *limits,
                           tfp_doc_t **out, tfp_err_t *err);

/* tfp_st_decode with its path chosen, for tests and the fuzzer: TFP_ST_PATH_BOTH is
 * tfp_st_decode (the direct scan, and the cJSON tree for whatever the scan declines);
 * TFP_ST_PATH_TREE the tree alone; TFP_ST_PATH_SCAN the scan alone, TFP_EAGAIN where it
 * declines (the header is not one it reads: that says nothing about its validity). */
enum { TFP_ST_PATH_BOTH, TFP_ST_PATH_TREE, TFP_ST_PATH_SCAN };
tfp_status_t tfp_st_decode_path(const uint8_t *buf, size_t len, const tfp_st_limits_t *limits,
                                int path, tfp_doc_t **out, tfp_err_t *err);

/* Builds the header for doc: the 8-byte length plus JSON padded with spaces so that the data
 * section starts at a multiple of 8. Assigns each tensor's offset in doc order (the data
 * section is the tensors' bytes concatenated in that order). *hdr is malloc'd.
 * "__metadata__" comes first, and only when the doc has metadata. TFP_EINVAL if a tensor's
 * nbytes does not match its dtype x shape. */
tfp_status_t tfp_st_encode_header(tfp_doc_t *doc, uint8_t **hdr, size_t *hdr_len,
                                  tfp_err_t *err);

/* Header plus every tensor's bytes copied into one malloc'd buffer (tests, small docs).
 * TFP_EINVAL if a tensor with bytes has no data bound. */
tfp_status_t tfp_st_encode(tfp_doc_t *doc, uint8_t **buf, size_t *len, tfp_err_t *err);

#endif
