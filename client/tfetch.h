/* tfetch.h - libtfetch, the C client of tfetchd. The only installed header.
 *
 * A tf_client_t is a long-lived handle: it keeps connections to each origin alive and reuses
 * them, and carries the defaults (user id, timeout) for the requests made through it. A
 * tf_doc_t is a document: one or more named tensors plus string metadata, the unit every
 * request sends or receives (safetensors on the wire).
 *
 * Threads: a client may be used by one thread at a time (use one client per thread, or
 * serialise calls). Docs are plain data, owned by one thread at a time. Nothing here keeps
 * global state besides libcurl's one-time initialisation, done on the first tf_client_new.
 *
 * Ownership: every _free(NULL) is a no-op. Returned `const char *` strings are borrowed from
 * the object that returned them and live until it is freed or the next call on it. Data passed
 * to tf_doc_add is copied (TF_COPY) or borrowed (TF_BORROW: it must outlive the doc).
 */
#ifndef TFETCH_H
#define TFETCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TF_VERSION "0.1.0"
#define TF_MAX_RANK 8

/* One status type for everything. Server-side codes arrive on the wire as their names
 * ("TF_ENOTFOUND") and keep the same values here; the rest are decided by the client. */
#define TF_STATUS_MAP(X)                                                   \
    X(OK,            0, "success")                                         \
    X(ENOMEM,       -1, "out of memory")                                   \
    X(EINVAL,       -2, "invalid argument")                                \
    X(EBADREQ,      -3, "bad request")                                     \
    X(EPROTO,       -4, "malformed message")                               \
    X(ENOTFOUND,    -5, "no such tensor")                                  \
    X(EMETHOD,      -6, "method not allowed")                              \
    X(ENOTACCEPT,   -7, "cannot render in the accepted format")            \
    X(ETOOBIG,      -8, "payload too large")                               \
    X(EMEDIATYPE,   -9, "unsupported media type")                          \
    X(EUNPROC,     -10, "unprocessable tensor")                            \
    X(EHEADERS,    -11, "request headers too large")                       \
    X(EBUSY,       -12, "server busy")                                     \
    X(ENOSPACE,    -13, "store is full")                                   \
    X(EINTERNAL,   -14, "internal error")                                  \
    X(ERANGE,      -15, "value out of range")                              \
    X(ELENGTH,     -16, "length required")                                 \
    X(ECONNECT,    -32, "cannot connect")                                  \
    X(ETIMEDOUT,   -33, "timed out")                                       \
    X(EIO,         -34, "transfer failed")                                 \
    X(EHTTP,       -35, "unexpected HTTP status")                          \
    X(ECANCELED,   -36, "canceled")                                        \
    X(EURL,        -37, "bad URL")

typedef enum {
#define X(n, v, s) TF_##n = (v),
    TF_STATUS_MAP(X)
#undef X
} tf_status_t;

const char *tf_strerror(tf_status_t st);   /* static text, "unknown status" if unknown */
const char *tf_err_name(tf_status_t st);   /* static "TF_ENOTFOUND", "TF_EUNKNOWN" */

/* Element types, named as in safetensors. */
#define TF_DTYPE_MAP(X)                                                    \
    X(F64, 0) X(F32, 1) X(F16, 2) X(BF16, 3) X(F8_E4M3, 4) X(F8_E5M2, 5)   \
    X(I64, 6) X(I32, 7) X(I16, 8) X(I8, 9)                                 \
    X(U64, 10) X(U32, 11) X(U16, 12) X(U8, 13) X(BOOL, 14)

typedef enum {
#define X(n, v) TF_##n = (v),
    TF_DTYPE_MAP(X)
#undef X
} tf_dtype_t;

const char *tf_dtype_name(tf_dtype_t dt);             /* "F32"; NULL if out of range */
size_t tf_dtype_size(tf_dtype_t dt);                  /* bytes per element; 0 if invalid */
tf_status_t tf_dtype_from_name(const char *name, tf_dtype_t *out);

/* ---- documents ------------------------------------------------------------------------ */

typedef struct tf_doc tf_doc_t;

typedef struct {
    const char *name;
    tf_dtype_t dtype;
    int rank;
    int64_t shape[TF_MAX_RANK];
    const void *data;       /* C order, little-endian */
    size_t nbytes;
} tf_tensor_t;

enum { TF_COPY = 0, TF_BORROW = 1 };

tf_doc_t *tf_doc_new(void);                           /* NULL on allocation failure */
void tf_doc_free(tf_doc_t *doc);
/* Adds a tensor. nbytes must equal dtype size x product(shape); names are unique. */
tf_status_t tf_doc_add(tf_doc_t *doc, const char *name, tf_dtype_t dtype, int rank,
                       const int64_t *shape, const void *data, size_t nbytes,
                       unsigned flags);
size_t tf_doc_count(const tf_doc_t *doc);
const tf_tensor_t *tf_doc_at(const tf_doc_t *doc, size_t i);       /* NULL if out of range */
const tf_tensor_t *tf_doc_find(const tf_doc_t *doc, const char *name);
tf_status_t tf_doc_set_meta(tf_doc_t *doc, const char *key, const char *value);
const char *tf_doc_meta(const tf_doc_t *doc, const char *key);     /* NULL if absent */
/* Serialises to safetensors in one malloc'd buffer (free() it). */
tf_status_t tf_doc_encode(const tf_doc_t *doc, void **buf, size_t *len);
/* Serialises only the safetensors header (the 8-byte length and the JSON, padded); the
 * document is that header followed by each tensor's data in tf_doc_at order. Lets a caller
 * write or send a document without copying its tensors (writev). malloc'd (free() it). */
tf_status_t tf_doc_encode_header(const tf_doc_t *doc, void **hdr, size_t *len);
/* Parses safetensors (strictly). TF_COPY copies buf; TF_BORROW keeps pointers into it. */
tf_status_t tf_doc_decode(const void *buf, size_t len, unsigned flags, tf_doc_t **out);

/* ---- clients and requests -------------------------------------------------------------- */

typedef struct tf_client tf_client_t;

/* What happened to the last request made through a client. */
typedef struct {
    tf_status_t status;
    int http_status;                /* 0 if no response arrived */
    char request_id[129];           /* the id the server echoed (or the one sent) */
    char transport[32];             /* what carried it: "http" */
    char op[16];                    /* "get", "put", "delete", "list", "info", "call" */
    uint64_t bytes_sent;            /* request body bytes */
    uint64_t bytes_received;        /* response body bytes */
    double seconds;                 /* wall time of the request */
    char error[256];                /* the server's or client's message; "" on success */
} tf_result_t;

/* Progress of the current transfer; return non-zero to abort it (TF_ECANCELED). */
typedef int (*tf_progress_fn)(uint64_t down_now, uint64_t down_total, uint64_t up_now,
                              uint64_t up_total, void *user_data);

tf_status_t tf_client_new(tf_client_t **out);
void tf_client_free(tf_client_t *c);
/* The user id sent as Tfetch-User on every request (NULL: none). Validated. A server that
 * calls another server forwards the id it received by setting it here. */
tf_status_t tf_client_set_user(tf_client_t *c, const char *user_id);
/* The request id for the next request only (NULL: the client makes one). Reusing the id of a
 * request on retry lets the server recognise the retry. */
tf_status_t tf_client_set_request_id(tf_client_t *c, const char *request_id);
/* Whole-request timeout in milliseconds (0: none; default 60000). Connect timeout 10 s. */
void tf_client_set_timeout(tf_client_t *c, long timeout_ms);
void tf_client_set_progress(tf_client_t *c, tf_progress_fn fn, void *user_data);
/* Refuses response bodies larger than max bytes (TF_ETOOBIG; 0: no cap, the default). */
void tf_client_set_max_body(tf_client_t *c, uint64_t max);
/* The outcome of the last request (borrowed; valid until the next request or free). */
const tf_result_t *tf_client_last(const tf_client_t *c);

/* Shumai's tfetch: in == NULL: GET url into *out; out == NULL: PUT in to url;
 * both: exchange (POST in, the reply into *out). */
tf_status_t tf_fetch(tf_client_t *c, const char *url, const tf_doc_t *in, tf_doc_t **out);

/* Explicit operations. url names the tensor: http://host:port/v1/tensors/NAME.
 * wait_ms > 0 long-polls until the tensor exists (up to wait_ms). */
tf_status_t tf_get(tf_client_t *c, const char *url, long wait_ms, tf_doc_t **out);
tf_status_t tf_put(tf_client_t *c, const char *url, const tf_doc_t *in);
tf_status_t tf_delete(tf_client_t *c, const char *url);

/* GET base/v1/tensors. base is http://host:port (a trailing path is ignored). */
typedef struct {
    char *name;
    uint64_t bytes;                 /* stored document size */
    size_t ntensors;
} tf_entry_t;
tf_status_t tf_list(tf_client_t *c, const char *base, tf_entry_t **entries, size_t *n);
void tf_list_free(tf_entry_t *entries, size_t n);
/* GET base/v1/info as JSON text (malloc'd, NUL-terminated; free() it). */
tf_status_t tf_info(tf_client_t *c, const char *base, char **json);

#ifdef __cplusplus
}
#endif
#endif
