/* jsonw.h - a small append-only JSON writer for the daemon's and tools' JSON output
 * (listings, /v1/info, errors, --stats lines).
 *
 * The writer tracks nesting and commas itself; strings are escaped per RFC 8259 (quote and
 * backslash with a backslash, every control character as \u00XX) and invalid UTF-8 is
 * replaced by U+FFFD, one per offending byte, so output is always valid JSON. Allocation
 * failure is sticky: tfp_jw_finish then returns NULL; so does nesting deeper than 63 levels
 * or an end without a matching begin. Not thread-safe; one writer per thread.
 */
#ifndef TFP_JSONW_H
#define TFP_JSONW_H

#include <stddef.h>
#include <stdint.h>
#include "proto/status.h"
#include "proto/utf8.h"          /* the writer replaces what tfp_utf8_next refuses */

typedef struct {
    char *buf;
    size_t len, cap;
    int failed;
    int depth;
    unsigned char need_comma[64];   /* per nesting level */
    int after_key;
} tfp_jw_t;

void tfp_jw_init(tfp_jw_t *w);
void tfp_jw_obj_begin(tfp_jw_t *w);
void tfp_jw_obj_end(tfp_jw_t *w);
void tfp_jw_arr_begin(tfp_jw_t *w);
void tfp_jw_arr_end(tfp_jw_t *w);
void tfp_jw_key(tfp_jw_t *w, const char *key);
void tfp_jw_str(tfp_jw_t *w, const char *s);
void tfp_jw_strn(tfp_jw_t *w, const char *s, size_t n);
void tfp_jw_int(tfp_jw_t *w, int64_t v);
void tfp_jw_uint(tfp_jw_t *w, uint64_t v);
void tfp_jw_double(tfp_jw_t *w, double v);   /* non-finite values written as null */
void tfp_jw_bool(tfp_jw_t *w, int v);
void tfp_jw_null(tfp_jw_t *w);
/* Appends pre-rendered JSON text as one value (caller guarantees it is valid). */
void tfp_jw_raw(tfp_jw_t *w, const char *json, size_t n);
/* Returns the malloc'd NUL-terminated text (ownership to caller) and resets w; NULL if any
 * allocation failed. *len (if not NULL) gets the length. */
char *tfp_jw_finish(tfp_jw_t *w, size_t *len);
void tfp_jw_discard(tfp_jw_t *w);

/* The body of every error response: {"error": msg, "code": "TF_E..."} + "\n". malloc'd. */
char *tfp_error_json(tfp_status_t code, const char *msg, size_t *len);

#endif
