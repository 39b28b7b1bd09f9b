/* raw.h - raw single-tensor bodies: application/octet-stream plus Tfetch-Dtype and
 * Tfetch-Shape headers, for curl one-liners.
 *
 * Tfetch-Shape is a comma-separated list of decimal dims ("2,3,4"); the empty string or "[]"
 * means a rank-0 scalar; "[2,3]" (brackets) is accepted too; spaces around items are allowed.
 * Pure functions; any thread.
 */
#ifndef TFP_RAW_H
#define TFP_RAW_H

#include <stddef.h>
#include <stdint.h>
#include "proto/doc.h"

/* Parses a shape header (NUL-terminated). Rejects junk, signs, empty items, more than
 * TFP_MAX_RANK dims, dims above 2^53 (TFP_EBADREQ, naming the header; NULL: "missing"). */
tfp_status_t tfp_raw_parse_shape(const char *s, int *rank, uint64_t shape[TFP_MAX_RANK],
                                 tfp_err_t *err);
/* Writes "2,3,4" ("" for rank 0) into buf; returns 0, or -1 if it does not fit. */
int tfp_raw_format_shape(int rank, const uint64_t *shape, char *buf, size_t size);

/* Validates a raw body: dtype name, shape and that body_len equals dtype x shape bytes
 * (pass TFP_RAW_LEN_UNKNOWN to skip that check while the length is not known yet, as for a
 * chunked upload). On success fills *dt, *rank, shape. Refusals: TFP_EBADREQ for a missing or
 * bad header, TFP_ERANGE when dtype x shape overflows, TFP_EUNPROC when body_len does not
 * match. */
#define TFP_RAW_LEN_UNKNOWN UINT64_MAX
tfp_status_t tfp_raw_check(const char *dtype_hdr, const char *shape_hdr, uint64_t body_len,
                           tfp_dtype_t *dt, int *rank, uint64_t shape[TFP_MAX_RANK],
                           tfp_err_t *err);

#endif
