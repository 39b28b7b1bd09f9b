/* cors.h - cross-origin requests (CORS): the cors-origins setting and the Origin header.
 *
 * tfetchd answers browsers from other origins only when told to: cors-origins is "*" (any
 * origin, never with credentials) or a list of origins (scheme://host[:port], separated by
 * spaces or commas), each echoed back when it is the request's Origin exactly, with
 * credentials allowed. The Origin header is checked here before it is compared or echoed:
 * "null" or scheme://host[:port] in printable ASCII, at most TFP_CORS_ORIGIN_MAX bytes.
 * Pure; any thread.
 */
#ifndef TFP_CORS_H
#define TFP_CORS_H

#include <stddef.h>
#include "proto/status.h"

#define TFP_CORS_MAX 32                 /* origins in the list */
#define TFP_CORS_ORIGIN_MAX 255         /* bytes in one origin */

typedef struct {
    int any;                            /* "*": every origin, without credentials */
    size_t n;
    char origin[TFP_CORS_MAX][TFP_CORS_ORIGIN_MAX + 1];
} tfp_cors_t;

/* What a request's Origin gets. */
typedef enum {
    TFP_CORS_NONE,                      /* no Origin, a malformed one, or not allowed */
    TFP_CORS_ANY,                       /* Access-Control-Allow-Origin: * (no credentials) */
    TFP_CORS_ORIGIN                     /* the Origin echoed, credentials allowed */
} tfp_cors_allow_t;

/* Parses the setting (NULL or "": CORS off) into *out. TFP_OK, or TFP_EINVAL with err
 * naming the entry at fault ("*" mixed with origins, a path, a bad scheme or port...). */
tfp_status_t tfp_cors_parse(const char *setting, tfp_cors_t *out, tfp_err_t *err);
/* 1 if s is a well-formed origin ("null", or http(s)://host[:port] without a path). */
int tfp_cors_origin_valid(const char *s);
/* What the request's Origin header (NULL: none) gets under cors. */
tfp_cors_allow_t tfp_cors_check(const tfp_cors_t *cors, const char *origin);

#endif
