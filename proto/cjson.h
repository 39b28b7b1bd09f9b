/* cjson.h - proto's one seam onto cJSON: strict parsing, duplicate keys, exact integers,
 * bounded strings, message prefixes.
 *
 * cJSON is lax (it takes "01", raw control characters, \u0000) and keeps duplicate keys, and
 * its numbers are doubles; every proto parser (safetensors headers, the client's JSON, the
 * upgrade bodies) needs the same strict reading, so it lives here once: text passes
 * tfp_json_check (jsoncheck.h) before cJSON builds a tree, and values come out through checked
 * getters; a number keeps its text where a double is not exact (tfp_cj_uint). cJSON stays
 * inside proto: only proto's .c files include this header, and no tree outlives the call
 * that parsed it. Pure; any thread. One caveat, from cJSON 1.7.15: every
 * parse resets a global error slot (global_error) even on success; it is never read here, so
 * the race is benign, but ThreadSanitizer will name it.
 */
#ifndef TFP_CJSON_H
#define TFP_CJSON_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "proto/status.h"

/* tfp_cj_parse flags. */
#define TFP_CJ_WHOLE 1u             /* only JSON whitespace may follow the value */
#define TFP_CJ_NODUP 4u             /* no object, at any depth, may repeat a key */

/* Holds s[0..n) to RFC 8259 (tfp_json_check) and parses its first value into *out (free with
 * cJSON_Delete); *end (if not NULL) gets the offset just past the value, for a caller that
 * judges what follows itself. TFP_EPROTO with tfp_json_check's message, or "invalid JSON at
 * byte N: text after the value" and "duplicate key in JSON object" for the flags; TFP_ENOMEM
 * ("out of memory parsing JSON"). *out is set only on success. */
tfp_status_t tfp_cj_parse(const char *s, size_t n, unsigned flags, cJSON **out, size_t *end,
                          tfp_err_t *err);

/* The offset of the first byte at or after i in s[0..n) that is not JSON whitespace. */
size_t tfp_cj_skip_ws(const char *s, size_t n, size_t i);

/* 1 if an object repeats a key (*dup, if not NULL, names one), 0 if not, -1 out of memory.
 * deep: every object under item too (those first); else item's own members only. */
int tfp_cj_dup(const cJSON *item, int deep, const char **dup);

/* An integer number in lo..hi (any hi up to 2^64-1) into *out: 0, or TFP_CJ_ENOTNUM,
 * TFP_CJ_ELOW (below lo: negative, for lo 0), TFP_CJ_EHIGH (above hi), TFP_CJ_EFRAC (not an
 * integer), checked in that order. *out is set only on 0. A plain integer is read exactly
 * from its text (tfp_cj_parse keeps the text of every number a double may not hold: 2^53+1
 * is 2^53+1, never rounded); one spelt with a fraction or an exponent ("1E2", "2.0") counts
 * by its value, and only up to 2^53 (above that it is TFP_CJ_EHIGH). */
#define TFP_CJ_ENOTNUM (-1)
#define TFP_CJ_ELOW (-2)
#define TFP_CJ_EFRAC (-3)
#define TFP_CJ_EHIGH (-4)
int tfp_cj_uint(const cJSON *item, uint64_t lo, uint64_t hi, uint64_t *out);
/* The same for a count written as an integer, as the reference safetensors reader takes
 * shapes and offsets: digits only, so "2.0", "2e0" and "1.5" are TFP_CJ_EFRAC and any minus
 * sign ("-0" too) is TFP_CJ_ELOW. */
int tfp_cj_count(const cJSON *item, uint64_t lo, uint64_t hi, uint64_t *out);

/* A string of at most max bytes copied with its NUL into dst (max + 1 bytes), or -1. */
int tfp_cj_str(const cJSON *item, char *dst, size_t max);

/* Re-sets err (if not NULL) to "what: <its message>" with code, and returns code. */
tfp_status_t tfp_cj_prefix(tfp_err_t *err, tfp_status_t code, const char *what);

#endif
