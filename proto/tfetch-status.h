/* tfetch-status.h - the one table of tfetch status codes (installed beside tfetch.h).
 *
 * Every status code of every layer is a row here, once: its name, its value, the HTTP status
 * a server answers it with and its text. Nothing else in the tree lists a code: the public
 * tf_status_t and tf_strerror (tfetch.h), the plugin ABI's TFPL_* (tfetch-plugin.h), proto's
 * tfp_status_t with its names, texts and HTTP codes (proto/status.h) and the transports'
 * outcomes are all generated from these macros, so they cannot drift. The file holds macros
 * only (no declarations, no code, standard C only) because two installed headers include it
 * and must stay self-contained for their users: `#include <tfetch.h>` or
 * `#include <tfetch-plugin.h>` is all a user writes, and both find this file beside them in
 * the include directory. It lives in proto/, the bottom layer, so that proto, transports,
 * client and daemon may all include it without breaking the layering. Values and names are
 * wire and ABI contracts: rows are only ever appended. Pure data; any thread.
 *
 * Each row is X(name, value, http, text); name is without the TF_ prefix.
 *   TF_STATUS_WIRE_MAP(X)   codes a server may send (as "TF_<name>" on the wire), 0..-31
 *   TF_STATUS_LOCAL_MAP(X)  codes decided by a client and never sent (http 0), from -32
 *   TF_STATUS_MAP(X)        both: every code (tf_status_t)
 * Paste the name (TF_##n, "TF_" #n) rather than pass it on bare: some names (ENOMEM, EIO...)
 * are also <errno.h> macros.
 */
#ifndef TFETCH_STATUS_H
#define TFETCH_STATUS_H

/*       name          value http  text */
#define TF_STATUS_WIRE_MAP(X)                                           \
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
    X(ELENGTH,     -16, 411, "length required")                       \
    X(ECONFLICT,   -17, 409, "conflict")                              \
    X(EDONE,       -18, 410, "end of data")                           \
    X(EGONE,       -19, 410, "no longer available")                   \
    X(EFULL,       -20, 429, "queue is full")                         \
    X(ENOTIMPL,    -21, 501, "not implemented")                       \
    X(EREQTIME,    -22, 408, "request timeout")                       \
    X(EUNAUTH,     -23, 401, "authentication required")               \
    X(EFORBIDDEN,  -24, 403, "forbidden")                             \
    X(EPRECOND,    -25, 412, "precondition failed")                   \
    X(EVERSION,    -26, 400, "protocol version mismatch")              \
    X(EDIGEST,     -27, 400, "digest mismatch")

#define TF_STATUS_LOCAL_MAP(X)                                          \
    X(ECONNECT,    -32,   0, "cannot connect")                          \
    X(ETIMEDOUT,   -33,   0, "timed out")                               \
    X(EIO,         -34,   0, "transfer failed")                         \
    X(EHTTP,       -35,   0, "unexpected HTTP status")                  \
    X(ECANCELED,   -36,   0, "canceled")                                \
    X(EURL,        -37,   0, "bad URL")                                 \
    X(EAGAIN,      -38,   0, "not finished yet")                        \
    X(ENOTMODIFIED,-39,   0, "not modified")

#define TF_STATUS_MAP(X) TF_STATUS_WIRE_MAP(X) TF_STATUS_LOCAL_MAP(X)

#endif
