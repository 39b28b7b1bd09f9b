/* jsonread.h - parsers for the JSON a client reads from tfetchd: error bodies and the tensor
 * listing. Bytes come from the network, so everything is validated; nothing is trusted.
 * Pure; any thread.
 */
#ifndef TFP_JSONREAD_H
#define TFP_JSONREAD_H

#include <stddef.h>
#include <stdint.h>
#include "proto/jsoncheck.h"         /* tfp_json_check, tfp_find_dup */
#include "proto/status.h"

/* Parses {"error": "...", "code": "TF_E..."}. On success copies the message (truncated to
 * msg_size-1, not splitting a UTF-8 character) and sets *code (TFP_EINTERNAL for an unknown
 * code name, and for "TF_OK"). Returns 0, or -1 if the body is not such an object: both
 * members must be strings; other members are ignored; strict JSON, no duplicate keys.
 * Nothing is written on -1. */
int tfp_parse_error_body(const char *body, size_t len, tfp_status_t *code, char *msg,
                         size_t msg_size);

/* One entry of GET /v1/tensors. */
typedef struct {
    char *name;                     /* owned */
    uint64_t bytes;                 /* stored document size */
    size_t ntensors;
} tfp_list_entry_t;

/* Parses the listing {"tensors": [{"name": ..., "bytes": N, "tensors": [...]}, ...]}.
 * Each entry needs a non-empty "name", "bytes" an integer in 0..2^53 and "tensors" an array
 * of {"name": string, "dtype": a known dtype, "shape": up to 8 integers}; ntensors is that
 * array's length. Other members are ignored. TFP_EPROTO (naming the bad member, e.g.
 * "listing: tensors[1].bytes is not a non-negative integer") or TFP_ENOMEM; outputs are set
 * only on success (*entries NULL when *n is 0); free with tfp_listing_free. */
tfp_status_t tfp_parse_listing(const char *body, size_t len, tfp_list_entry_t **entries,
                               size_t *n, tfp_err_t *err);
void tfp_listing_free(tfp_list_entry_t *entries, size_t n);
/* A listing page's "next" member (the last name of a page that has more after it): TFP_OK
 * with next (TFP_MAX_TENSOR_NAME + 1 bytes) the name, or "" when the member is absent (the
 * last page); TFP_EPROTO when it is there and not a valid name (tfp_name_valid), or the body
 * is not a JSON object. next is set only on TFP_OK. */
tfp_status_t tfp_parse_listing_next(const char *body, size_t len, char *next, tfp_err_t *err);

/* Parses a worker registration {"routes": ["name", ...]}: 1..max valid names (tfp_name_valid),
 * no other keys. *routes is a malloc'd array of malloc'd strings (tfp_strings_free). */
tfp_status_t tfp_parse_worker_routes(const char *body, size_t len, size_t max, char ***routes,
                                     size_t *n, tfp_err_t *err);
void tfp_strings_free(char **v, size_t n);
/* Parses the answer to a worker registration {"worker": ID, "secret": S, "lease_ms": N}.
 * secret (TFP_WORKER_SECRET_LEN + 1 bytes) gets "" from a server that sends none (older
 * than worker secrets); one that is there must be valid (tfp_worker_secret_valid). */
tfp_status_t tfp_parse_worker_reg(const char *body, size_t len, char *id, size_t id_size,
                                  char *secret, uint64_t *lease_ms, tfp_err_t *err);

/* Reads the integer member key (0..2^53) of a JSON object, other members ignored (a feed's
 * replies: {"seq": S, ...}, {"resume_after": S, ...}). Strict JSON, no duplicate keys.
 * TFP_OK and *out, or TFP_EPROTO / TFP_ENOMEM (*out untouched). */
tfp_status_t tfp_parse_uint_member(const char *body, size_t len, const char *key,
                                   uint64_t *out, tfp_err_t *err);

#endif
