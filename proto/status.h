/* status.h - proto's view of the status codes: tfp_status_t, its names, texts, HTTP codes.
 *
 * The codes themselves are rows of proto/tfetch-status.h, the one table that the public
 * tf_status_t (client/tfetch.h) and the plugin ABI (daemon/tfetch-plugin.h) are generated
 * from too, so a TFP_ code always has the value, name and text of its TF_ twin. tfp_status_t
 * holds every code, the client-side ones included (transports report ECONNECT, ETIMEDOUT...
 * with it); TFP_STATUS_MAP lists only those a server may send. Pure data, no state; any
 * thread.
 */
#ifndef TFP_STATUS_H
#define TFP_STATUS_H

#include "proto/tfetch-status.h"

/* The codes a server may send, X(name, value, http, text); the only ones tfp_status_from_name
 * knows and a frame may carry. */
#define TFP_STATUS_MAP(X) TF_STATUS_WIRE_MAP(X)

typedef enum {
#define X(n, v, h, s) TFP_##n = (v),
    TF_STATUS_MAP(X)
#undef X
} tfp_status_t;

/* "TF_EPROTO" for TFP_EPROTO; "TF_EUNKNOWN" for a value not in the table. Static strings. */
const char *tfp_status_name(tfp_status_t st);
const char *tfp_status_text(tfp_status_t st);
/* The HTTP status a server answers st with; 500 for a code no server sends. */
int tfp_status_http(tfp_status_t st);
/* Looks up a wire name ("TF_ENOTFOUND"); returns 0 and sets *out, or -1 if unknown or a
 * client-side name (no server sends those). */
int tfp_status_from_name(const char *name, tfp_status_t *out);

/* Every parser reports through one of these: a code and a message naming what was wrong. */
typedef struct {
    tfp_status_t code;
    char msg[256];
} tfp_err_t;

/* Sets err (if not NULL) and returns code. printf-style. */
tfp_status_t tfp_err_set(tfp_err_t *err, tfp_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
