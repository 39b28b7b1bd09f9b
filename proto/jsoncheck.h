/* jsoncheck.h - the strict JSON gate every proto parser's text passes before cJSON builds a
 * tree. Pure; any thread.
 */
#ifndef TFP_JSONCHECK_H
#define TFP_JSONCHECK_H

#include <stddef.h>
#include "proto/status.h"

/* Strict RFC 8259 check, run before cJSON sees any bytes (added with the implementation;
 * cJSON itself is lax: it takes any byte <= 0x20 as whitespace, raw control characters in
 * strings, "01", and turns \u0000 into a silent truncation). Checks that s[0..n) starts, after
 * optional JSON whitespace, with exactly one JSON value: well-formed UTF-8; no raw control
 * characters; valid escapes with paired surrogates; no \u0000 (values become C strings);
 * numbers in RFC form and at most 63 characters (cJSON's limit); nesting at most
 * TFP_JSON_MAX_DEPTH. On success sets *end to the offset just past the value (what follows is
 * the caller's to judge) and returns TFP_OK; otherwise TFP_EPROTO with err->msg like
 * "invalid JSON at byte 17: expected ':' after key". */
#define TFP_JSON_MAX_DEPTH 256
tfp_status_t tfp_json_check(const char *s, size_t n, size_t *end, tfp_err_t *err);

/* Sorts keys[0..n) into strcmp order (in place) and returns a key that occurs more than once,
 * or NULL if all are distinct. For duplicate-key checks: cJSON keeps duplicates silently. */
const char *tfp_find_dup(const char **keys, size_t n);

#endif
