/* ids.h - validation of the identifiers that arrive in URLs and headers.
 *
 * Tensor and route names: [A-Za-z0-9._-]{1,255}, not "." or "..".
 * User ids (Tfetch-User): [A-Za-z0-9._-]{1,128}.
 * Request ids (Tfetch-Request-Id): [A-Za-z0-9._:-]{1,128}.
 * Worker secrets (Tfetch-Worker-Secret): exactly 32 lowercase hex digits (128 bits).
 * Pure; any thread.
 */
#ifndef TFP_IDS_H
#define TFP_IDS_H

#include <stddef.h>
#include <stdint.h>
#include "proto/status.h"

#define TFP_MAX_TENSOR_NAME 255
#define TFP_MAX_USER_ID 128
#define TFP_MAX_REQUEST_ID 128
#define TFP_WORKER_SECRET_LEN 32

int tfp_name_valid(const char *s);          /* 1 if valid, 0 if not (NULL is invalid) */
int tfp_user_id_valid(const char *s);
int tfp_request_id_valid(const char *s);
int tfp_worker_secret_valid(const char *s);
/* Whether two worker secrets are equal, in time that does not depend on where they differ:
 * always TFP_WORKER_SECRET_LEN bytes compared. Either one not a valid secret: 0. */
int tfp_worker_secret_equal(const char *a, const char *b);

/* Parses a non-negative decimal integer (no sign, no spaces, at most max; leading zeros are
 * fine). 0 and *out set, or -1 and *out untouched. */
int tfp_parse_u64(const char *s, uint64_t max, uint64_t *out);
/* The value of one hex digit, either case; -1 for anything else. */
int tfp_hex_digit(char c);

#endif
