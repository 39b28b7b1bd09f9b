/* status.h - the status codes that cross the wire.
 *
 * One X-macro names every error a server can answer with: the wire code ("TF_EPROTO"), the
 * HTTP status it maps to and a short text. The public header client/tfetch.h carries the same
 * names and values (plus client-side ones); tests/check_proto.c checks that they agree.
 * Pure data, no state; any thread.
 */
#ifndef TFP_STATUS_H
#define TFP_STATUS_H

/*        name        value http  text */
#define TFP_STATUS_MAP(X)                                               \
    X(OK,            0, 200, "success")                                 \
    X(ENOMEM,       -1, 500, "out of memory")                           \
    X(EINVAL,       -2, 400, "invalid argument")                        \
    X(EBADREQ,      -3, 400, "bad request")                             \
    X(EPROTO,       -4, 400, "malformed message")                       \
    X(ENOTFOUND,    -5, 404, "no such tensor")                          \
    X(EMETHOD,      -6, 405, "method not allowed")                      \
    X(ENOTACCEPT,   -7, 406, "cannot render in the accepted format")    \
    X(ETOOBIG,      -8, 413, "payload too large")                       \
    X(EMEDIATYPE,   -9, 415, "unsupported media type")                  \
    X(EUNPROC,     -10, 422, "unprocessable tensor")                    \
    X(EHEADERS,    -11, 431, "request headers too large")               \
    X(EBUSY,       -12, 503, "server busy")                             \
    X(ENOSPACE,    -13, 507, "store is full")                           \
    X(EINTERNAL,   -14, 500, "internal error")                          \
    X(ERANGE,      -15, 416, "value out of range")                      \
    X(ELENGTH,     -16, 411, "length required")

typedef enum {
#define X(n, v, h, s) TFP_##n = (v),
    TFP_STATUS_MAP(X)
#undef X
} tfp_status_t;

/* "TF_EPROTO" for TFP_EPROTO; "TF_EUNKNOWN" for a value not in the map. Static strings. */
const char *tfp_status_name(tfp_status_t st);
const char *tfp_status_text(tfp_status_t st);
int tfp_status_http(tfp_status_t st);
/* Looks up a wire name ("TF_ENOTFOUND"); returns 0 and sets *out, or -1 if unknown. */
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
