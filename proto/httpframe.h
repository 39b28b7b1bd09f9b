/* httpframe.h - is an HTTP/1.x request's framing unambiguous? The decision, over the request
 * line and the raw list of header fields (duplicates kept, in arrival order) as the transport
 * received them, that a request is taken, refused with 400, or refused with 501 for a
 * transfer coding tfetchd does not implement; made before any handler runs, so a request
 * whose body length two parsers could read differently (request smuggling), or whose ids or
 * names a NUL would cut, never runs. Also the percent-decoding of a request target. Bytes
 * from the network: validated here, never trusted. Pure; any thread.
 */
#ifndef TFP_HTTPFRAME_H
#define TFP_HTTPFRAME_H

#include <stddef.h>
#include <stdint.h>
#include "proto/status.h"

/* What the transport saw of one line (a header field, or the request line) that its parser
 * hid from the name and value it hands on. */
#define TFP_HF_FOLDED 1u            /* an obs-fold continuation line was joined into it */
#define TFP_HF_BADEND 2u            /* no CRLF right after the value: a bare LF, or a NUL that
                                     * hid the rest of the line */
#define TFP_HF_NUL 4u               /* a NUL in the request target (raw or %00) */

/* One header field (or one query parameter), as received: not NUL-terminated. */
typedef struct {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
    unsigned flags;                 /* TFP_HF_* */
} tfp_hfield_t;

typedef struct {
    const char *version;            /* "HTTP/1.1" */
    unsigned line_flags;            /* TFP_HF_* of the request line */
    const tfp_hfield_t *fields;     /* the header fields, duplicates kept, in order */
    size_t nfields;
    const tfp_hfield_t *args;       /* the query's parameters, percent-decoded */
    size_t nargs;
} tfp_http_frame_t;

/* How the body is framed, once the framing is taken. */
typedef struct {
    int64_t content_length;         /* -1: no Content-Length */
    int chunked;                    /* Transfer-Encoding: chunked */
} tfp_http_framing_t;

/* TFP_OK with *out set, or the first thing wrong, with err set:
 *   TFP_EBADREQ (400): a version other than HTTP/1.0 or HTTP/1.1; a flagged line (bare LF,
 *     NUL, obs-fold); a header name that is not a token (a space before the colon); a control
 *     character in a value; a NUL in a query parameter; Content-Length twice (equal or not)
 *     or not digits; Transfer-Encoding with Content-Length, in HTTP/1.0, empty, with an
 *     empty list element or whitespace after its last coding, or with chunked twice or not
 *     last; HTTP/1.1 without Host; Host, Content-Type, Tfetch-User, Tfetch-Request-Id,
 *     Tfetch-Dtype, Tfetch-Shape, Authorization, Tfetch-User-Principal or
 *     Tfetch-Worker-Secret twice;
 *   TFP_ENOTIMPL (501): a transfer coding other than chunked (gzip, identity, ...);
 *   TFP_ETOOBIG (413): a Content-Length above 2^63-1. */
tfp_status_t tfp_http_frame_check(const tfp_http_frame_t *in, tfp_http_framing_t *out,
                                  tfp_err_t *err);

/* Percent-decodes the NUL-terminated s in place (%XX, either case; a '%' not followed by two
 * hex digits stays as it is) and returns the decoded length. %00 decodes to a NUL inside the
 * result, so a caller must go by the length, not by strlen. s[length] is set to NUL. */
size_t tfp_url_unescape(char *s);

#endif
