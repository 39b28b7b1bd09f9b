/* jsonread.h - parsers for the JSON a client reads from tfetchd: error bodies and the tensor
 * listing. Bytes come from the network, so everything is validated; nothing is trusted.
 * Pure; any thread.
 */
#ifndef TFP_JSONREAD_H
#define TFP_JSONREAD_H

#include <stddef.h>
#include <stdint.h>
#include "proto/status.h"

/* Parses {"error": "...", "code": "TF_E..."}. On success copies the message (truncated to
 * msg_size-1) and sets *code (TFP_EINTERNAL for an unknown code name). Returns 0, or -1 if
 * the body is not such an object. */
int tfp_parse_error_body(const char *body, size_t len, tfp_status_t *code, char *msg,
                         size_t msg_size);

/* One entry of GET /v1/tensors. */
typedef struct {
    char *name;                     /* owned */
    uint64_t bytes;                 /* stored document size */
    size_t ntensors;
} tfp_list_entry_t;

/* Parses the listing {"tensors": [{"name": ..., "bytes": N, "tensors": [...]}, ...]}. */
tfp_status_t tfp_parse_listing(const char *body, size_t len, tfp_list_entry_t **entries,
                               size_t *n, tfp_err_t *err);
void tfp_listing_free(tfp_list_entry_t *entries, size_t n);

#endif
