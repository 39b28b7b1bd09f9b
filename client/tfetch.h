/* tfetch.h - libtfetch, the C client of tfetchd. Its one header (with tfetch-status.h).
 *
 * A tf_client_t is a long-lived handle: it keeps connections to each origin alive and reuses
 * them, and carries the defaults (user id, timeout) for the requests made through it. A
 * tf_doc_t is a document: one or more named tensors plus string metadata, the unit every
 * request sends or receives (safetensors on the wire).
 *
 * Requests are blocking calls (tf_get, tf_put, ...) or asynchronous ones (tf_fetch_start:
 * a tf_fetch_t, one request with one callback, like a libuv request). Both run on one engine:
 * a blocking call is "start, then drive until this request completes".
 *
 * Threads: a client may be used by one thread at a time (use one client per thread, or
 * serialise calls; tf_client_wakeup alone may come from any thread). Callbacks run only on the thread driving the client, inside
 * tf_fetch_test, tf_fetch_wait, tf_client_run, tf_fetch_cancel, tf_fetch_free,
 * tf_client_free or a blocking call. Nothing of the caller's runs in the background; a
 * client that upgraded to UCX owns one progress thread (the transport's own, started at its
 * first upgrade) that moves UCX traffic and wakes the driving thread. Docs are plain data,
 * owned by one thread at a time. Nothing here keeps global state besides libcurl's one-time
 * initialisation, done on the first tf_client_new.
 *
 * Ownership: every _free(NULL) is a no-op. Returned `const char *` strings are borrowed from
 * the object that returned them and live until it is freed or the next call on it. Data passed
 * to tf_doc_add is copied (TF_COPY) or borrowed (TF_BORROW: it must outlive the doc). Memory
 * the library allocates for the caller (tf_doc_encode, tf_doc_encode_header, tf_info) is
 * released with tf_free; listings with tf_list_free.
 *
 * Versioned structs: a struct the caller allocates and the library reads or fills
 * (tf_request_t, tf_transport_info_t) starts with `size_t size`, the struct's size as the
 * caller compiled it, so a library with more fields never reads or writes past an older
 * caller's struct. Set it with the type's _INIT macro (TF_REQUEST_INIT), or leave it 0: 0
 * means the fields of libtfetch 0.1 (tf_request_t's up to transport; tf_transport_info_t's
 * up to retry_ms). A field added later is used only when size covers it.
 */
#ifndef TFETCH_H
#define TFETCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header, and of the package: configure reads it from here
 * (configure.ac), so the two cannot differ. tf_version() is the library's at run time. */
#define TF_VERSION "0.1.0"
#define TF_MAX_RANK 8

/* One status type for everything, generated from the one table of codes, TF_STATUS_MAP
 * (X(name, value, http, text)) in tfetch-status.h, installed beside this header. Server-side
 * codes arrive on the wire as their names ("TF_ENOTFOUND") and keep the same values here; the
 * rest are decided by the client. */
#include "tfetch-status.h"
#include "tfetch-dtype.h"

typedef enum {
#define TF_STATUS_ENUM_(n, v, h, s) TF_##n = (v),
    TF_STATUS_MAP(TF_STATUS_ENUM_)
#undef TF_STATUS_ENUM_
} tf_status_t;

const char *tf_strerror(tf_status_t st);   /* static text, "unknown status" if unknown */
const char *tf_err_name(tf_status_t st);   /* static "TF_ENOTFOUND", "TF_EUNKNOWN" */

/* Element types, named as in safetensors. */
/* X(name, value) for every row of the one dtype table, tfetch-dtype.h (installed beside this
 * header; its TF_DTYPE_ROWS(X) also gives each type's width in bits). */
#define TF_DTYPE_ROW2_(X, n, v, b) X(n, v)
#define TF_DTYPE_MAP(X) TF_DTYPE_ROWS_(TF_DTYPE_ROW2_, X)

typedef enum {
#define X(n, v) TF_##n = (v),
    TF_DTYPE_MAP(X)
#undef X
} tf_dtype_t;

const char *tf_dtype_name(tf_dtype_t dt);             /* "F32"; NULL if out of range */
size_t tf_dtype_size(tf_dtype_t dt);     /* bytes per element; 0 if invalid or packed (F4) */
unsigned tf_dtype_bits(tf_dtype_t dt);   /* bits per element (4 for F4); 0 if invalid */
tf_status_t tf_dtype_from_name(const char *name, tf_dtype_t *out);

/* ---- the library -------------------------------------------------------------------------- */

/* The version of libtfetch running (static "0.1.0"), which may differ from TF_VERSION, the
 * version of the header a program was compiled with. */
const char *tf_version(void);
/* Releases memory the library allocated for the caller (tf_doc_encode, tf_doc_encode_header,
 * tf_info). NULL is a no-op. */
void tf_free(void *p);

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
/* Serialises to safetensors in one allocated buffer (tf_free it). */
tf_status_t tf_doc_encode(const tf_doc_t *doc, void **buf, size_t *len);
/* Serialises only the safetensors header (the 8-byte length and the JSON, padded); the
 * document is that header followed by each tensor's data in tf_doc_at order. Lets a caller
 * write or send a document without copying its tensors (writev). Allocated (tf_free it). */
tf_status_t tf_doc_encode_header(const tf_doc_t *doc, void **hdr, size_t *len);
/* Parses safetensors (strictly). TF_COPY copies buf; TF_BORROW keeps pointers into it. */
tf_status_t tf_doc_decode(const void *buf, size_t len, unsigned flags, tf_doc_t **out);
/* tf_doc_decode that also says what is wrong: on failure msg (msg_len bytes, may be NULL)
 * names the field, tensor or bytes at fault, as the server would. */
tf_status_t tf_doc_decode_msg(const void *buf, size_t len, unsigned flags, tf_doc_t **out,
                              char *msg, size_t msg_len);

/* ---- clients and requests -------------------------------------------------------------- */

typedef struct tf_client tf_client_t;

/* Where one request's time went, in milliseconds; -1 where a stage did not apply or is not
 * known (a server from before server timing names no server time). The stages connect,
 * upgrade, send, server, receive and decode follow one another, so their sum is at most
 * total; queue and handler are the parts of server the server named. */
typedef struct {
    double connect;                 /* resolving the name and connecting (HTTP; 0 when a
                                     * kept connection was reused) */
    double upgrade;                 /* choosing the path: negotiating UCX and shm first when
                                     * this request had to (0 when it did not) */
    double send;                    /* the request and its body leaving the client (UCX: until
                                     * its send completed; shm: a put's copy into the lent
                                     * memory) */
    double server;                  /* the server's own time on it, its answer said
                                     * (Server-Timing over HTTP, the reply frame over UCX and
                                     * shm): queue + handler */
    double queue;                   /* ... held waiting (a long-poll, a full queue, a worker) */
    double handler;                 /* ... its handler and the store */
    double receive;                 /* the answer's body arriving */
    double decode;                  /* decoding the answer into a document (shm: mapping it) */
    double total;                   /* the whole request: seconds, in ms */
} tf_stages_t;

/* What happened to the last request made through a client. */
typedef struct {
    tf_status_t status;
    int http_status;                /* 0 if no response arrived */
    char request_id[129];           /* the id the server echoed (or the one sent) */
    char transport[32];             /* what carried it: "http", "ucx/sysv+cma", ... */
    char op[16];                    /* "get", "put", "delete", "list", "info", "call",
                                     * "upgrade" (tf_client_upgrade) */
    uint64_t bytes_sent;            /* request body bytes */
    uint64_t bytes_received;        /* response body bytes */
    double seconds;                 /* wall time of the request */
    char error[256];                /* the server's or client's message; "" on success */
    char fallback[160];             /* why it went over HTTP although the transport policy
                                     * allowed UCX; "" when it did not fall back (it went
                                     * over UCX, or the policy is http) */
    /* After 0.1 (a tf_completion_t of size 664 ends before it): */
    char etag[64];                  /* the version the server named (its ETag, quotes
                                     * included: "\"0123456789abcdef-7\""): of the document
                                     * a get read (or found unchanged: TF_ENOTMODIFIED), or a
                                     * put stored; "" when it named none. HTTP, UCX and
                                     * shm/memfd all carry it */
    /* After 0.1.0 (its tf_completion_t ends before it): */
    tf_stages_t stages;             /* where its time went (tfetch --stats, --explain) */
} tf_result_t;

/* Progress of the current transfer; return non-zero to abort it (TF_ECANCELED). Over HTTP
 * as the bytes move; over shm/memfd as a put's file (tf_fetch_start_fd) is read into the
 * lent memory and a get's reply written to its file; over UCX, which moves a body in one
 * piece, when a body starts and when it has arrived. */
typedef int (*tf_progress_fn)(uint64_t down_now, uint64_t down_total, uint64_t up_now,
                              uint64_t up_total, void *user_data);

tf_status_t tf_client_new(tf_client_t **out);
/* Cancels the requests still pending (their callbacks run, with TF_ECANCELED), then frees.
 * Handles still held stay valid for tf_fetch_result, tf_fetch_take_doc and tf_fetch_free.
 * Does nothing when called from inside a callback. */
void tf_client_free(tf_client_t *c);
/* The user id sent as Tfetch-User on every request (NULL: none). Validated. A server that
 * calls another server forwards the id it received by setting it here. */
tf_status_t tf_client_set_user(tf_client_t *c, const char *user_id);
/* The bearer token sent as "Authorization: Bearer TOKEN" on every request (NULL: none), for
 * a tfetchd with auth-tokens set. Validated (an RFC 6750 b64token, at most 512 characters);
 * the client keeps a copy and never logs it. The environment's TFETCH_TOKEN is the default.
 * A UCX connection runs as the principal whose token upgraded it: setting another token
 * closes the client's UCX connections (requests still on them fail) and the next request
 * upgrades again with the new one. */
tf_status_t tf_client_set_token(tf_client_t *c, const char *token);
/* https: trust the PEM CA certificates in path instead of the system's store (NULL: the
 * system's again). The server's certificate and host name are always verified; there is no
 * insecure mode. TF_EINVAL when path cannot be read. The environment's TFETCH_CA_FILE is
 * the default. A failed verification fails the request with TF_ECONNECT and says why. */
tf_status_t tf_client_set_ca_file(tf_client_t *c, const char *path);
/* https: present the PEM client certificate in cert_pem_path, with the PEM private key in
 * key_pem_path (NULL: the key is in the certificate's file), to a server that asks for one:
 * a tfetchd with tls-client-ca serves a request that sends no bearer token as the principal
 * its token file maps the certificate's subject to (a token, when set, decides instead).
 * cert_pem_path NULL: none (key_pem_path must be NULL too). For requests started from now
 * on. TF_EINVAL when a file cannot be read. The environment's TFETCH_CERT and TFETCH_KEY
 * are the default. */
tf_status_t tf_client_set_cert(tf_client_t *c, const char *cert_pem_path, const char *key_pem_path);
/* The request id for the next request only (NULL: the client makes one). Reusing the id of a
 * request on retry lets the server recognise the retry. */
tf_status_t tf_client_set_request_id(tf_client_t *c, const char *request_id);
/* Whole-request timeout in milliseconds (0: none, the default: a stalled peer is caught by
 * tf_client_set_stall instead, so a slow but moving transfer is never cut). Connect timeout
 * 10 s. */
void tf_client_set_timeout(tf_client_t *c, long timeout_ms);
void tf_client_set_progress(tf_client_t *c, tf_progress_fn fn, void *user_data);
/* Refuses response bodies larger than max bytes (TF_ETOOBIG), as soon as the announced
 * length or the bytes received pass it; 0: no cap. Default: this machine's physical memory,
 * at least 2 GiB (a reply is held in memory; a tfetchd's store is half of its host's). */
void tf_client_set_max_body(tf_client_t *c, uint64_t max);
/* Stall detection: a request fails with TF_ETIMEDOUT ("stalled") once its transfer moves
 * fewer than min_bytes_per_s bytes a second for stall_ms in a row, waiting for the answer
 * included (a long-poll's wait is added to the window). Over HTTP, curl's low-speed limit;
 * over UCX, no reply within the window once the request is sent (a body in flight gets
 * its size at 1 MiB/s more). Default 1024 bytes/s for 10000 ms. stall_ms 0: off.
 * TF_EINVAL for a negative stall_ms, or a rate of 0 (or above LONG_MAX) with stall_ms > 0. */
tf_status_t tf_client_set_stall(tf_client_t *c, uint64_t min_bytes_per_s, long stall_ms);
/* The outcome of the last blocking request, or why the last tf_fetch_start failed
 * (borrowed; valid until the next request or free). Asynchronous requests report through
 * their callback and tf_fetch_result instead. */
const tf_result_t *tf_client_last(const tf_client_t *c);
/* At most n connections (1..4096; default 16) to each origin. Requests beyond that wait,
 * queued, for a free connection (HTTP/1.1 cannot pipeline). TF_EINVAL when out of range. */
tf_status_t tf_client_set_max_connections(tf_client_t *c, long n);

/* Body formats. TF_FORMAT_SAFETENSORS (the default): application/x-safetensors, any
 * document. TF_FORMAT_SHUMAI: stock Shumai's sm.network.tfetch body, one F32 tensor (named
 * "tensor" when received): little-endian int64 ndim, provenance (the user id when it is 1-16
 * hex digits, else 0xffffffff), flags, tensor bytes, props bytes; int64 shape[ndim]; the F32
 * data; props JSON. Gets and exchanges only (no put). A response is decoded by its
 * Content-Type when that says safetensors or raw (Tfetch-Dtype), else in the request's format. */
typedef enum {
    TF_FORMAT_DEFAULT = 0,          /* in a tf_request_t: the client's format */
    TF_FORMAT_SAFETENSORS = 1,
    TF_FORMAT_SHUMAI = 2,
} tf_format_t;
/* The format of the client's requests from now on (TF_EINVAL for another value). */
tf_status_t tf_client_set_format(tf_client_t *c, tf_format_t format);

/* Transports. Requests start over HTTP; a client whose policy allows it upgrades each
 * origin (scheme, host, port) that offers it (the Tfetch-Upgrade response header) to UCX
 * (shared memory and CMA on one host; RDMA or TCP between hosts) and sends every following
 * request UCX can carry over it, with no change to the caller's code: get, put, delete and
 * exchange in the safetensors format to URLs of the form /v1/tensors/NAME and /v1/call/NAME
 * (list, info, the Shumai format and other URLs always travel over HTTP). Every result says
 * what carried the request (tf_result_t transport, e.g. "ucx/sysv+cma" or "http") and, when
 * it went over HTTP although UCX was allowed, why (tf_result_t fallback).
 * On one host (the same kernel and network namespace), policy auto goes further: a get or
 * put of /v1/tensors/NAME travels over shared memory ("shm/memfd"): a get maps the stored
 * document copy-on-write and its tensors point into that mapping (nothing is copied; the
 * document holds a lease until tf_doc_free, and no replace or delete on the server changes
 * its bytes), a put writes into memory the server stores as it is (tf_doc_new_shm: not even
 * that copy). When the server refuses (its bound on mapped bytes) or the socket fails, the
 * request goes over UCX or HTTP, the reason in tf_result_t fallback.
 *   TF_TRANSPORT_AUTO (the default): upgrade when both sides can, else HTTP. When it is
 *     worth it (the origin's host is this host: localhost, a loopback address or one of
 *     this host's own addresses; or the request's body is 1 MiB or more), the first
 *     request to an origin negotiates before it starts (the upgrade policy, below);
 *     otherwise it goes over HTTP and, once a response offered UCX, the next request
 *     negotiates (POST /v1/upgrade; then the same-host shm socket, when offered, and a
 *     UCX connection; tf_client_upgrade negotiates before the first request). No request
 *     waits for UCX past 50 ms: a connection whose HELLO is not answered by then goes on
 *     connecting beside the request, which goes over shm/memfd or HTTP ("UCX is still
 *     connecting"), and carries the requests after it once it is up (or fails by its own
 *     2 s deadline). A server of another uid gets a UCX without shared memory (ucx/tcp:
 *     UCX's shared memory needs the same uid); its gets and puts go over shm/memfd. A failed
 *     upgrade is retried after a backoff (1 s doubling to 5 min), but not one that failed
 *     because nothing listened at the URL; a request whose UCX connection fails is retried
 *     once over HTTP with the same request id, time permitting.
 *   TF_TRANSPORT_HTTP: HTTP only.
 *   TF_TRANSPORT_UCX: strict: requests UCX can carry fail (TF_ECONNECT when no connection
 *     can be made, TF_EIO / TF_ETIMEDOUT when it fails mid-request) rather than fall back;
 *     the first request to an origin negotiates at once.
 * Negotiation happens when a request starts, on the calling thread, never inside a
 * callback: a request started inside a callback uses the connection already made, or HTTP
 * (under TF_TRANSPORT_UCX it then fails with TF_ECONNECT), and the client negotiates the
 * next time it is driven outside callbacks. tf_client_new reads the
 * environment variable TFETCH_TRANSPORT (auto, http or ucx, in any case; another value is
 * refused: every request fails, saying so, until the program sets a policy). */
typedef enum {
    TF_TRANSPORT_DEFAULT = 0,       /* in a tf_request_t: the client's */
    TF_TRANSPORT_AUTO = 1,
    TF_TRANSPORT_HTTP = 2,
    TF_TRANSPORT_UCX = 3,
} tf_transport_t;
/* The policy of the client's requests from now on (TF_EINVAL for another value). */
tf_status_t tf_client_set_transport(tf_client_t *c, tf_transport_t transport);

/* When policy TF_TRANSPORT_AUTO negotiates with an origin that has not offered UCX yet.
 *   TF_UPGRADE_EAGER (the default): before the first request to it, when that is worth a
 *     round trip or two: a server on this host (shared memory), or a body of 1 MiB or more.
 *   TF_UPGRADE_LAZY: only once one of its responses offered UCX (the first request to an
 *     origin goes over HTTP, its fallback saying so).
 * HTTP only is TF_TRANSPORT_HTTP; TF_TRANSPORT_UCX always negotiates at once. tf_client_new
 * reads TFETCH_UPGRADE (eager or lazy, in any case; another value is refused as a bad
 * TFETCH_TRANSPORT is). TF_EINVAL for another value. */
typedef enum {
    TF_UPGRADE_EAGER = 1,
    TF_UPGRADE_LAZY = 2,
} tf_upgrade_t;
tf_status_t tf_client_set_upgrade_policy(tf_client_t *c, tf_upgrade_t upgrade);

/* Digest verification (RFC 9530, sha-256): on (1), each put sends the Repr-Digest of its
 * body, which the server checks before storing (a mismatch: TF_EDIGEST, nothing stored), and
 * each get asks for the stored document's and checks what arrived against it (a mismatch,
 * or a server that sends none: TF_EDIGEST, never the data). Over every transport: HTTP, UCX
 * and same-host shared memory (against an older tfetchd whose UCX takes no digests, over
 * HTTP, the fallback saying so). Off (0) by default; tf_client_new reads TFETCH_VERIFY (1 or
 * 0). TF_EINVAL for another value. */
tf_status_t tf_client_set_verify(tf_client_t *c, int on);

/* Negotiates the upgrade of url's origin now, as the first request under TF_TRANSPORT_UCX
 * would, whether or not the server has offered it: for callers that know they will talk to
 * a tfetchd and want UCX from their first request under TF_TRANSPORT_AUTO. Blocks (a few
 * ms on one host; at most about 4 s). TF_OK once connected (or already); TF_ECONNECT when
 * no connection can be made now (also during the backoff after a failure), the reason in
 * tf_client_last's error and tf_client_transport_info; TF_EURL; TF_EINVAL inside a callback.
 * Requests under TF_TRANSPORT_AUTO then fall back to HTTP as usual. */
tf_status_t tf_client_upgrade(tf_client_t *c, const char *url);

/* What a client knows of one origin's transports. A versioned struct (see the top): set size
 * (TF_TRANSPORT_INFO_INIT) or leave it 0 for the 0.1 fields; on return it is the number of
 * bytes the library filled. */
typedef struct {
    size_t size;                    /* sizeof(tf_transport_info_t), or 0: the 0.1 fields */
    char transport[32];             /* what carries the next request UCX can carry:
                                     * "ucx/..." when connected, else "http" */
    char reason[160];               /* why not UCX (the last failure, or the server's
                                     * refusal); "" when connected or nothing is known */
    int offered;                    /* 1: the server's last response offered UCX; 0: it did
                                     * not; -1: no response seen yet */
    long retry_ms;                  /* after a failure: ms before the next attempt; else 0 */
    /* After 0.1: */
    uint64_t caller_driven;         /* requests to this origin whose UCX round trip the
                                     * calling thread drove itself, start to reply (blocking
                                     * calls: no progress thread in between) */
    char ucx_memory[64];            /* the memory types this process's UCX can move, asked
                                     * of UCX at run time ("host"; a CUDA-enabled UCX adds
                                     * "cuda", ...); "" before UCX started here */
    /* After 0.1.0 (the protocol range): */
    int same_host;                  /* 1: the server is on this host (its upgrade answer said
                                     * so); 0: on another; -1: not known (no upgrade yet) */
    char shm[32];                   /* "shm/memfd" while the same-host shared-memory
                                     * connection is up, else "" */
    char shm_reason[160];           /* why there is none, when the upgrade found out; "" */
    long server_uid;                /* the server's uid (the shm socket's peer credentials,
                                     * or its socket file's owner); -1: not known */
    unsigned protocol_min;          /* the protocol versions the server speaks, from its last */
    unsigned protocol_max;          /* answer (1, 1: it named none); 0, 0: no answer yet */
    /* After the protocol range (server timing): */
    tf_stages_t last_stages;        /* the stages of the last request to this origin that
                                     * completed (all -1 before any) */
    char last_transport[32];        /* what carried it ("" before any) */
    char last_fallback[160];        /* why it went over HTTP rather than a faster path the
                                     * policy allowed; "" when it did not fall back */
} tf_transport_info_t;
#define TF_TRANSPORT_INFO_INIT { .size = sizeof(tf_transport_info_t) }
/* Fills *out for the origin of url (any URL of that server). TF_EURL for a bad URL;
 * TF_EINVAL when out->size is neither 0 nor at least the 0.1 struct's. */
tf_status_t tf_client_transport_info(tf_client_t *c, const char *url, tf_transport_info_t *out);

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
/* Which names a listing page holds, in name order. A versioned struct (see the top):
 * TF_LIST_OPTS_INIT, or size 0 for these fields. */
typedef struct {
    size_t size;                    /* sizeof(tf_list_opts_t), or 0 */
    const char *prefix;             /* only names that start so (NULL or "": all); name
                                     * characters [A-Za-z0-9._-], at most 255 */
    const char *after;              /* only names after this one (NULL: from the first): the
                                     * previous page's next */
    uint64_t limit;                 /* at most this many (1..1000000); 0: no limit */
} tf_list_opts_t;
#define TF_LIST_OPTS_INIT { .size = sizeof(tf_list_opts_t) }
/* One page of GET base/v1/tensors (?prefix=, ?after=, ?limit=; opts NULL: every name, as
 * tf_list). *next (may be NULL) is the name to pass as opts->after for the following page
 * (allocated: tf_free it), or NULL when this page is the last. TF_EINVAL for a bad prefix,
 * after or limit; TF_EPROTO for a reply that is not a listing. Outputs set only on TF_OK. */
tf_status_t tf_list_page(tf_client_t *c, const char *base, const tf_list_opts_t *opts,
                         tf_entry_t **entries, size_t *n, char **next);
/* Bytes [offset, offset + length) of the stored document at url (its safetensors bytes: a
 * Range request; length 0: to the end). TF_OK, *buf (allocated, tf_free it), *len (fewer
 * than length when the document ends first) and, when total is not NULL, the document's
 * whole size; TF_ERANGE when offset is at or past its end (*total still set);
 * TF_ENOTFOUND. Over HTTP or UCX. Outputs set only on TF_OK (and *total on TF_ERANGE). */
tf_status_t tf_get_range(tf_client_t *c, const char *url, uint64_t offset, uint64_t length,
                         void **buf, size_t *len, uint64_t *total);
/* GET base/v1/info as JSON text (allocated, NUL-terminated; tf_free it). */
tf_status_t tf_info(tf_client_t *c, const char *base, char **json);

/* ---- asynchronous requests ------------------------------------------------------------- */

/* What a request does. EXCHANGE POSTs a document to a route (http://host:port/v1/call/NAME)
 * and decodes the reply; its tf_result_t op is "call". */
typedef enum {
    TF_OP_GET = 1,                  /* url -> doc */
    TF_OP_PUT = 2,                  /* in -> url */
    TF_OP_DELETE = 3,
    TF_OP_EXCHANGE = 4,             /* in -> url -> doc */
} tf_op_t;

/* One request, described. Zero-initialise it (designated initialisers, or TF_REQUEST_INIT)
 * and set what applies; everything is read during tf_fetch_start except in, which is borrowed
 * until the callback has run (its tensors are sent from where they are, not copied). A
 * versioned struct (see the top): size 0 reads the 0.1 fields. */
typedef struct {
    size_t size;                    /* sizeof(tf_request_t), or 0: the 0.1 fields */
    tf_op_t op;
    const char *url;                /* http://host:port/v1/tensors/NAME, /v1/call/ROUTE, ... */
    const tf_doc_t *in;             /* PUT and EXCHANGE: the document to send; else NULL */
    long wait_ms;                   /* GET: long-poll up to wait_ms for the tensor (0: no) */
    long timeout_ms;                /* 0: the client's; > 0: this many ms; < 0: none */
    tf_format_t format;             /* TF_FORMAT_DEFAULT: the client's */
    const char *request_id;         /* NULL: the client's next id (see set_request_id) */
    tf_transport_t transport;       /* TF_TRANSPORT_DEFAULT: the client's policy */
    /* After 0.1: */
    const char *user;               /* Tfetch-User for this request only, validated as
                                     * tf_client_set_user's (NULL: the client's): a server
                                     * that forwards calls for many users through one client
                                     * keeps each caller's id */
    /* After 0.1, conditions (tf_request(3)): a tf_result_t etag, or "*"; NULL: none. HTTP
     * and UCX carry them (shm/memfd does not: a same-host request with any of them goes
     * over UCX; a server whose UCX takes none, over HTTP). */
    const char *if_match;           /* GET, PUT, DELETE: only while the stored version is
                                     * this one ("*": while the name exists); a put or
                                     * delete is then a compare-and-swap. Otherwise nothing
                                     * changes and the request fails with TF_EPRECOND */
    const char *if_none_match;      /* PUT, DELETE: "*": only if the name does not exist
                                     * (a create-only put), else TF_EPRECOND. GET: an etag:
                                     * TF_ENOTMODIFIED (no document) while the stored
                                     * version is still that one; with wait_ms the server
                                     * waits up to wait_ms for a newer one */
    uint64_t ttl_s;                 /* PUT: the document lives ttl_s seconds (1..31622400),
                                     * then is gone as if deleted; 0: for ever */
} tf_request_t;
#define TF_REQUEST_INIT { .size = sizeof(tf_request_t) }

/* Runs rq to completion on the calling thread, as the blocking calls do (tf_fetch_start,
 * then tf_fetch_wait): the blocking form of any request, conditions included. TF_OK and,
 * for a GET or EXCHANGE, *out (may be NULL for the other ops; then the reply is freed);
 * else the request's status (TF_EPRECOND for a condition that did not hold,
 * TF_ENOTMODIFIED for a GET whose if_none_match still names the stored version). *out set
 * only on TF_OK. tf_client_last says what happened, its etag included. */
tf_status_t tf_request(tf_client_t *c, const tf_request_t *rq, tf_doc_t **out);

/* A request in flight: started by tf_fetch_start, completed exactly once. */
typedef struct tf_fetch tf_fetch_t;

/* Runs exactly once per started request, on the thread driving the client, when it succeeds,
 * fails, times out or is canceled (status TF_ECANCELED). doc is the decoded reply of a GET or
 * EXCHANGE that succeeded, else NULL; the callback owns it (tf_doc_free it, or keep it).
 * result (op, transport, bytes, seconds, request id, HTTP status, message) is borrowed from
 * f. Inside the callback: starting requests, tf_fetch_cancel, tf_fetch_free, tf_fetch_test
 * and the client setters are fine; blocking calls, tf_fetch_wait and tf_client_run return
 * TF_EINVAL; tf_client_free does nothing. */
typedef void (*tf_fetch_cb)(tf_fetch_t *f, tf_status_t status, tf_doc_t *doc,
                            const tf_result_t *result, void *user_data);

/* Starts a request and returns at once. On TF_OK, cb runs exactly once later; on an error it
 * never runs, and tf_client_last(c) says why (TF_EINVAL also for a bad rq->size, or a struct
 * longer than this library's that sets a field it does not know). out == NULL: fire and
 * forget (f is freed after cb returns; cb is required). out != NULL: *out is the handle,
 * valid until tf_fetch_free (even after completion; cb may be NULL, the reply then waits in
 * the handle). Any number of requests may be in flight on one client. */
tf_status_t tf_fetch_start(tf_client_t *c, const tf_request_t *rq, tf_fetch_cb cb,
                           void *user_data, tf_fetch_t **out);
/* Drives the client once without waiting (inside a callback, only looks) and returns f's
 * final status once it has completed (its callback has run), TF_EAGAIN while it has not. */
tf_status_t tf_fetch_test(tf_fetch_t *f);
/* Drives the client until f completes or timeout_ms passes (-1: no limit; 0: as
 * tf_fetch_test); other requests' callbacks may run meanwhile. Returns f's final status, or
 * TF_EAGAIN if it is still running; TF_EINVAL inside a callback. */
tf_status_t tf_fetch_wait(tf_fetch_t *f, long timeout_ms);
/* Cancels f: if it is still running its callback runs now, with TF_ECANCELED, before this
 * returns. A request in flight over UCX cannot be stopped midway (its buffers are lent to
 * the transport until it completes): its callback runs with TF_ECANCELED once it completes,
 * from a later tf_fetch_test, tf_fetch_wait, tf_client_run, blocking call or tf_client_free,
 * and the reply is discarded. After completion a harmless no-op. TF_OK; TF_EINVAL for NULL. */
tf_status_t tf_fetch_cancel(tf_fetch_t *f);
/* The request's outcome (borrowed from f). Before completion status is TF_EAGAIN. */
const tf_result_t *tf_fetch_result(const tf_fetch_t *f);
/* The reply document of a request started without a callback, once (then NULL). */
tf_doc_t *tf_fetch_take_doc(tf_fetch_t *f);
/* Releases a handle from tf_fetch_start(..., &f): cancels it first if it is still running
 * (its callback runs with TF_ECANCELED). From inside f's own callback it is freed when the
 * callback returns. NULL is a no-op. */
void tf_fetch_free(tf_fetch_t *f);

/* Drives the client until no request is pending (TF_OK) or timeout_ms passes (TF_EAGAIN;
 * -1: no limit; 0: one pass without waiting); always one pass at least, which also moves
 * what the library runs by itself (a feed's prefetch). TF_EINVAL inside a callback. */
tf_status_t tf_client_run(tf_client_t *c, long timeout_ms);
/* Requests started on c and not yet completed. */
size_t tf_client_pending(const tf_client_t *c);
/* The one call any thread may make on a client another thread is driving (while c exists):
 * makes a tf_client_run in progress on c return soon (TF_EAGAIN when requests are still
 * pending), or, when none is in progress, the next one return after one pass. For a thread
 * that drives a client on behalf of others (an event loop, a language binding): it wakes the
 * driver to start requests it was handed. Waits in tf_fetch_wait and blocking calls are woken
 * but go on waiting. Never lost; several wakeups before a run count as one. */
void tf_client_wakeup(tf_client_t *c);

/* ---- big documents: a reply written to a file, a body read from one --------------------- */

/* tf_fetch_start for documents larger than memory is comfortable with. TF_OP_GET: the reply
 * document is written to fd (a file, a pipe) instead of being returned (the callback's doc
 * is NULL, result bytes_received says how much): over HTTP as it arrives, holding none of
 * it; over shm/memfd from the mapping of the stored document; over UCX once received. Not
 * decoded on the way over HTTP: check the file (tf_doc_decode of a mapping of it) before
 * trusting it; a failed request may have written part of it. TF_OP_PUT (rq->in NULL): the
 * body is the safetensors document in the regular file fd, from byte 0 to its size now,
 * never held whole in memory: over HTTP read as it is sent, over shm/memfd read straight
 * into the memory the server lends (one copy, the kernel's), over UCX sent from a
 * read-only mapping of the file. The server checks it as any upload. fd is borrowed until
 * the callback has run. TF_EINVAL for another op, a format other than safetensors, or a
 * put's fd that is not a non-empty regular file; otherwise as tf_fetch_start. */
tf_status_t tf_fetch_start_fd(tf_client_t *c, const tf_request_t *rq, int fd, tf_fetch_cb cb,
                              void *user_data, tf_fetch_t **out);

/* ---- a client driven by a thread of its own: event loops and language bindings ---------- */

/* A tf_driver_t owns a client and one thread that drives it: any thread submits requests
 * (copied, queued, started by the driver thread) and takes their outcomes back as
 * completions, never touching the client itself. It is the shape an event loop or another
 * language's runtime needs (Bun, Node, asyncio) when it can neither run callbacks on a
 * foreign thread nor block: it is told, through `notify`, when completions are waiting, and
 * takes them on its own thread with tf_driver_reap. Nothing is polled. */
typedef struct tf_driver tf_driver_t;

/* Called on the driver thread when a completion is queued and none was waiting (the caller
 * had reaped everything): at most once until the caller next finds the queue empty in
 * tf_driver_reap. It must return quickly and must not call into the driver or its client
 * (post a task to the caller's loop, write to an eventfd, signal a condition). Never called
 * after tf_driver_free has begun. */
typedef void (*tf_notify_fn)(void *user_data);

/* One completed request, filled by tf_driver_reap. A versioned struct (see the top): set
 * size (TF_COMPLETION_INIT). */
typedef struct {
    size_t size;                    /* sizeof(tf_completion_t) as the caller compiled it */
    uint64_t tag;                   /* the caller's, from tf_driver_submit */
    tf_status_t status;             /* the request's outcome (result.status) */
    tf_doc_t *doc;                  /* the reply of a get or exchange that succeeded, else
                                     * NULL: the caller's (tf_doc_free) */
    tf_result_t result;             /* op, transport, fallback, HTTP status, message, ... */
} tf_completion_t;
#define TF_COMPLETION_INIT { .size = sizeof(tf_completion_t) }

/* Starts a thread that drives c, which the driver owns from now on (configure it first:
 * user, token, transport, timeout; it is freed by tf_driver_free, also when this fails).
 * notify (may be NULL: then poll with tf_driver_wait) and user_data as above. TF_EINVAL for
 * c NULL; TF_ENOMEM; TF_EIO when no thread can be started. *out set only on TF_OK. */
tf_status_t tf_driver_new(tf_client_t *c, tf_notify_fn notify, void *user_data,
                          tf_driver_t **out);
/* From any thread: queues rq (url, request_id, user, if_match and if_none_match copied;
 * rq->in borrowed until its
 * completion is reaped) for the driver to start; tag comes back in its completion. Exactly
 * one completion per TF_OK, whatever happens (a request tf_fetch_start refuses completes
 * with that status and tf_client_last's message); none on an error return: TF_EINVAL (rq or
 * d NULL, a bad rq->size, after tf_driver_free began), TF_ENOMEM. */
tf_status_t tf_driver_submit(tf_driver_t *d, const tf_request_t *rq, uint64_t tag,
                            unsigned flags);
/* tf_driver_submit's flags. TF_DRIVER_INLINE: when the driver has nothing in flight, start
 * the request on the calling thread and drive it there for up to 1 ms (no thread hand-off:
 * a small request to a same-host server completes in microseconds); if it completed, its
 * completion is waiting for tf_driver_reap when this returns (notify is not called for
 * it), else the driver thread takes it over. The calling thread may block that long, and,
 * the first time a server is reached (or after a failed upgrade's backoff), for the
 * upgrade's negotiation (a few ms on one host, at most about 4 s). */
#define TF_DRIVER_INLINE 1u
/* From any thread: takes the oldest completion into *out (TF_OK), or TF_EAGAIN when none is
 * waiting (and re-arms notify). TF_EINVAL for a bad out->size. */
tf_status_t tf_driver_reap(tf_driver_t *d, tf_completion_t *out);
/* From any thread: waits up to timeout_ms (-1: no limit) until a completion is waiting:
 * TF_OK, or TF_EAGAIN. For callers without a notify function (a thread of their own). */
tf_status_t tf_driver_wait(tf_driver_t *d, long timeout_ms);
/* Stops the driver: requests in flight are canceled (their replies freed), completions not
 * reaped are dropped (their docs freed), the thread joined, the client freed. Call it from
 * a thread that is not the driver's (not from notify), once no other thread submits. NULL
 * is a no-op. */
void tf_driver_free(tf_driver_t *d);

/* ---- same host: documents built in shared memory ----------------------------------------- */

/* A tensor's layout, for a document built in place: name, dtype and shape (rank values). */
typedef struct {
    const char *name;
    tf_dtype_t dtype;
    int rank;
    const int64_t *shape;
} tf_tensor_spec_t;

/* Builds a document directly in memory the tfetchd at url (a /v1/tensors/NAME URL on this
 * host) lends for it (shm/memfd), so that its tf_put copies nothing: the server seals that
 * memory, checks it as any upload, and stores it as it is. tensors[0..n) give the layout
 * (unique names; no metadata). Upgrades url's origin first when needed (blocking, as
 * tf_client_upgrade). TF_OK and *out, a document whose tensors' bytes (zeroed) lie in that
 * memory: write them through tf_doc_writable, then tf_put(c, url, *out) over the same
 * client. The put commits it once; after that (and after a failed one) the document is
 * read-only and stays valid until tf_doc_free; tensors and metadata cannot be added to it.
 * Sent any other way (another client or server, policy http or ucx) it is an ordinary
 * document. TF_ENOTIMPL when this origin offers no shared memory (another host, the
 * server's shm off, authentication on; tf_client_last says why); TF_ENOSPACE, TF_ETOOBIG as
 * a put of that size would be answered; TF_EINVAL for bad arguments or inside a callback.
 * *out set only on TF_OK. */
tf_status_t tf_doc_new_shm(tf_client_t *c, const char *url, const tf_tensor_spec_t *tensors,
                           size_t n, tf_doc_t **out);
/* Tensor i's bytes, for writing, where the caller may write them; NULL where a write would
 * fault or is not the caller's to make. Writable: every received document (tf_get,
 * tf_fetch, feed items, tf_doc_decode TF_COPY; a same-host get's mapping is copy-on-write,
 * so a write copies the page it touches and never reaches the server's copy), a
 * tf_doc_new_packed or tf_doc_new_staging document (while no request sends it), a
 * tf_doc_new_shm document until its put. NULL: a feed item in a same-host ring's slot
 * (the ring is mapped read-only), a tf_doc_new_shm document after its put, a document of
 * tf_doc_new/tf_doc_add or TF_BORROW, i out of range. See tf_doc_writable(3). */
void *tf_doc_writable(const tf_doc_t *doc, size_t i);
/* Builds a document in one buffer of this process: its safetensors header, then tensors[0..n)
 * (zeroed), in one piece, so that sending it needs no gathering: over UCX a large one goes
 * as one contiguous message, which a server on this host copies straight from this buffer
 * (one copy, the kernel's; a document whose header and tensors lie apart goes in pieces,
 * through the shared-memory FIFO: two copies, and a wait for room whenever the server is
 * slow to drain it). Reuse it for every push or put of that layout: write the tensors
 * through tf_doc_writable between requests, never while one that sends it is in flight.
 * Tensors and metadata cannot be added. TF_EINVAL for an invalid layout, TF_ENOMEM. */
tf_status_t tf_doc_new_packed(const tf_tensor_spec_t *tensors, size_t n, tf_doc_t **out);
/* Builds a document, as tf_doc_new_packed, in a staging buffer the tfetchd at url (on this
 * host) lends this client for its pushes (shm/memfd): memory that stays this process's,
 * writable and reused. A tf_infeed_push or tf_outfeed_push of it (and their _start forms)
 * over the same client and server then sends only where it lies, and the server copies it
 * from there into the feed's queue (into a same-host consumer's ring slot when one is free):
 * one user-space memcpy on the server instead of the kernel's copy out of this process
 * (process_vm_readv), and nothing for this process to do. The server checks the copy, never
 * the buffer, so writing the tensors while a push is in flight can tear only that item.
 * Write them through tf_doc_writable between pushes. Sent any other way (another client or
 * server, over HTTP, after the daemon restarted) it is an ordinary packed document. The
 * buffer counts in the server's shm-lease-memory until tf_doc_free (at most 16 per client
 * connection). TF_ENOTIMPL when this origin offers no shared memory (another host, the
 * server's shm off, transport policy http; tf_client_last says why); TF_EFULL over
 * shm-lease-memory; TF_ETOOBIG over max-body; TF_EFORBIDDEN for a principal without produce
 * or consume on any name; TF_EINVAL for a bad layout or inside a callback. *out set only on
 * TF_OK. */
tf_status_t tf_doc_new_staging(tf_client_t *c, const char *url,
                               const tf_tensor_spec_t *tensors, size_t n, tf_doc_t **out);

/* ---- workers: serving routes from this process ------------------------------------------ */

/* A worker registers routes with a tfetchd and answers their calls (POST /v1/call/{route}
 * by anyone), the C form of Shumai's `serve`. It has its own connections (no tf_client) and
 * runs its handler on the thread that calls tf_worker_serve. If the worker stops polling
 * and answering for the server's lease (tf_worker_lease_ms, 5 s by default), the server
 * drops it and its callers get 503: a handler must answer within the lease. */
typedef struct tf_worker tf_worker_t;

/* What a call carries besides its tensors (borrowed for the handler's duration). */
typedef struct {
    const char *route;
    const char *user;               /* the caller's user id, "" if none */
    const char *request_id;         /* the caller's request id */
    const char *call_id;            /* the server's id for this call */
} tf_call_t;

/* Answers one call: return TF_OK and set *out to a new document (the library sends and frees
 * it; NULL answers an empty document), or return a server-side error status (TF_EUNPROC,
 * TF_EBADREQ, TF_EINTERNAL, ...) with a message in errmsg (errmsg_size bytes) that the caller
 * receives. `in` is borrowed for the call. */
typedef tf_status_t (*tf_worker_fn)(const tf_call_t *call, const tf_doc_t *in, tf_doc_t **out,
                                    char *errmsg, size_t errmsg_size, void *user_data);

/* Registers routes[0..n) at base (http://host:port) to be answered by fn. Fails with the
 * server's status (e.g. TF_EUNPROC when a route is already served). The environment's
 * TFETCH_TOKEN, when set, is sent as the bearer token (it needs serve on the routes). */
tf_status_t tf_worker_new(const char *base, const char *const *routes, size_t n,
                          tf_worker_fn fn, void *user_data, tf_worker_t **out);
/* Serves calls for up to timeout_ms (< 0: until tf_worker_stop). Returns TF_OK when stopped or
 * timed out, or the error that ended serving (the server unreachable for longer than the
 * lease). If the server dropped the worker (its lease ran out), it registers again. */
tf_status_t tf_worker_serve(tf_worker_t *w, long timeout_ms);
/* Makes tf_worker_serve return after the current poll (at most half the lease). Safe to call
 * from a signal handler or another thread. */
void tf_worker_stop(tf_worker_t *w);
/* The id the server gave this worker (borrowed). */
const char *tf_worker_id(const tf_worker_t *w);
/* The server's lease in milliseconds. */
long tf_worker_lease_ms(const tf_worker_t *w);
/* Unregisters (its pending calls fail with 503) and frees. NULL is a no-op. */
void tf_worker_free(tf_worker_t *w);

/* ---- device feeds ---------------------------------------------------------------------- */

/* A feed (doc/PROTOCOL.md, "Feeds") is a named set of bounded, ordered per-device queues on
 * a tfetchd: producers push items (documents matching the feed's declared signature), the
 * compute process pops them one device queue at a time and pushes per-step results to the
 * feed's outfeed. Feed URLs name the feed: http://host:port/v1/feeds/NAME.
 *
 * The consumer side is a tf_feed_t, attached to one device queue of a feed through a client
 * (borrowed: it must outlive the feed, and the feed is used by the client's thread). It keeps
 * up to `prefetch` items in flight or ready ahead of the caller, each one moved by the feed's
 * backend to where the computation reads it before it is handed out:
 *   "host" (or NULL): the tensors stay in host memory, in the received body;
 *   "sim":  host memory too, but every copy goes through a thread that imitates a device's
 *           asynchronous copies and completion events (with delays), so the state machine
 *           the cuda backend uses runs without a GPU;
 *   "cuda": (built with ./configure --with-cuda) each item is staged in pinned memory and
 *           copied with cudaMemcpyAsync on the caller's stream into device buffers; an item
 *           is handed out once its copy's event completed, so its tensors' data pointers
 *           are device pointers. Without a usable device (no driver, no GPU) attaching fails
 *           with TF_ENOTIMPL ("no CUDA device ...") unless the caller allowed a fall back to
 *           host (TF_FEED_FALLBACK_HOST); tf_feed_backend says what runs.
 * Requests are made through the client's engine: prefetching progresses whenever the client
 * is driven (tf_infeed_pop, tf_client_run, any blocking call), so a loop that computes on the
 * host can call tf_client_run(c, 0) during a step; copies to the device progress on their
 * own. Feeds travel over HTTP.
 *
 * An item is the queue's until it is acknowledged: tf_item_release marks it done, and the
 * feed acknowledges cumulatively, through the highest position up to which every item it
 * delivered was released, on its next pop request (or tf_feed_ack, or tf_feed_detach). A
 * consumer that dies gets its unacknowledged items again, in order, after its lease. */
typedef struct tf_feed tf_feed_t;
typedef struct tf_item tf_item_t;

#define TF_FEED_FALLBACK_HOST 1u        /* cuda without a device: run the host backend */
#define TF_FEED_NO_PREFETCH 2u          /* pop only when asked (one item at a time; a tool) */

/* How to attach. A versioned struct (see the top): TF_FEED_OPTS_INIT, or size 0 for these
 * fields. Zeroes are the defaults. */
typedef struct {
    size_t size;                    /* sizeof(tf_feed_opts_t), or 0 */
    int prefetch;                   /* items in flight or ready ahead of the caller, 1..64
                                     * (0: 2) */
    long poll_ms;                   /* the long-poll of each pop request (0: 1000) */
    const char *consumer;           /* Tfetch-Consumer id, [A-Za-z0-9._-]{1,128} (NULL: a
                                     * random one); a restarted consumer that reuses its id
                                     * keeps its slot without waiting for the lease */
    void *stream;                   /* cuda: the cudaStream_t for the copies (NULL: a stream
                                     * of the feed's own) */
    int cuda_device;                /* cuda: the device ordinal */
    unsigned flags;                 /* TF_FEED_FALLBACK_HOST, TF_FEED_NO_PREFETCH */
} tf_feed_opts_t;
#define TF_FEED_OPTS_INIT { .size = sizeof(tf_feed_opts_t) }

/* Attaches to device queue `device` (an index "0".."n-1" or a declared name) of the feed at
 * url with a backend ("host", "sim", "cuda"; NULL: "host"). Checks the feed exists (GET
 * url): TF_ENOTFOUND when it does not. The first pop claims the queue's consumer slot.
 * TF_EINVAL for bad arguments or an unknown backend; TF_ENOTIMPL for a backend this build
 * lacks or, without TF_FEED_FALLBACK_HOST, for cuda without a device. *out set only on TF_OK.
 * Not inside a callback. tf_client_last(c) says why it failed. */
tf_status_t tf_feed_attach(tf_client_t *c, const char *url, const char *device,
                           const char *backend, tf_feed_t **out);
tf_status_t tf_feed_attach_opts(tf_client_t *c, const char *url, const char *device,
                                const char *backend, const tf_feed_opts_t *opts,
                                tf_feed_t **out);
/* Changes the prefetch depth (1..64) from now on. */
tf_status_t tf_feed_set_prefetch(tf_feed_t *feed, int depth);
/* The backend running ("host" after a fall back from "cuda"; static). */
const char *tf_feed_backend(const tf_feed_t *feed);
/* What carried the feed's last pop or outfeed push: "http", "ucx/sysv+cma", "ucx/tcp"...;
 * "none" before the first. Feed requests go over the client's UCX connection to the origin
 * when it has one (tf_client_set_transport), as tensor requests do. Borrowed. */
const char *tf_feed_transport(const tf_feed_t *feed);
/* Sends the pending acknowledgement now, if any (blocking; not inside a callback). */
tf_status_t tf_feed_ack(tf_feed_t *feed);
/* Cancels what is in flight (pending pop and push callbacks run with TF_ECANCELED), tells
 * the server the consumer leaves (POST .../detach: what was released is acknowledged, and
 * what it was delivered and never released goes to the next consumer that attaches, at once;
 * best effort, with an older server the acknowledgement alone and the rest after the
 * lease), frees the items still held and the feed. Not inside a callback of this feed's
 * client (then it does nothing). NULL is a no-op. */
void tf_feed_detach(tf_feed_t *feed);

/* The next item of the device queue, waiting up to timeout_ms (0: only what is ready; -1: no
 * limit). TF_OK and *item (release it with tf_item_release); TF_EAGAIN: none within the
 * time; TF_EDONE: the feed is done and this queue drained; TF_ECONFLICT: another consumer
 * holds the queue; TF_ENOTFOUND: the feed is gone; or the transport's error. Items come in
 * queue order, each once (while this consumer holds the slot). Once the feed saw a reset (a
 * new generation, on its next pop request's reply) items of the old one it had prefetched
 * are dropped, never handed out. Not inside a callback. */
tf_status_t tf_infeed_pop(tf_feed_t *feed, long timeout_ms, tf_item_t **item);
/* The same, asynchronous: returns at once; on TF_OK cb runs exactly once, on the thread
 * driving the client (tf_client_run, a blocking call, tf_infeed_pop), with the item or why
 * there is none (TF_EAGAIN when timeout_ms passed; TF_ECANCELED at detach); on an error it
 * never runs. Pops complete in the order they were started. The item is the callback's. */
typedef void (*tf_pop_cb)(tf_feed_t *feed, tf_status_t status, tf_item_t *item,
                          void *user_data);
tf_status_t tf_infeed_pop_start(tf_feed_t *feed, long timeout_ms, tf_pop_cb cb,
                                void *user_data);

/* An item's tensors (borrowed from the item): host pointers, or device pointers for the cuda
 * backend. */
const tf_doc_t *tf_item_doc(const tf_item_t *item);
uint64_t tf_item_position(const tf_item_t *item);  /* in its device queue, from 1 */
uint64_t tf_item_seq(const tf_item_t *item);       /* the producer's Tfetch-Seq */
uint64_t tf_item_round(const tf_item_t *item);
uint64_t tf_item_generation(const tf_item_t *item);
/* Marks the item done and frees it: the queue forgets it once the feed acknowledges it.
 * NULL is a no-op. */
void tf_item_release(tf_item_t *item);

/* Pushes a document to the feed's outfeed from this device (tensors in device memory for
 * the cuda backend: copied to host first, on the feed's stream). Blocking; TF_OK and, when
 * seq is not NULL, the outfeed's sequence number of the item. */
tf_status_t tf_outfeed_push(tf_feed_t *feed, const tf_doc_t *doc, uint64_t *seq);
/* The same, asynchronous: doc is borrowed until cb has run (exactly once on TF_OK, with the
 * sequence number on success; never on an error). */
typedef void (*tf_push_cb)(tf_feed_t *feed, tf_status_t status, uint64_t seq,
                           void *user_data);
tf_status_t tf_outfeed_push_start(tf_feed_t *feed, const tf_doc_t *doc, tf_push_cb cb,
                                  void *user_data);

/* ---- feeds: producers, receivers, operators (blocking calls on a client) ---------------- */

/* Declares the feed at url (PUT) with a JSON declaration (doc/PROTOCOL.md): TF_OK when new
 * or the same again; TF_ECONFLICT when it differs. *stats, when not NULL, is the feed's
 * stats JSON (tf_free it). */
tf_status_t tf_feed_declare(tf_client_t *c, const char *url, const char *json, char **stats);
/* Pushes one item to device queue dev (per_device feeds), or, dev < 0, one round to every
 * device (split and broadcast feeds). seq > 0 makes it idempotent (Tfetch-Seq of the
 * client's user id's stream): a retry of an accepted seq is acknowledged, not enqueued.
 * When the queue is full the server holds it up to wait_ms (0: it answers TF_EFULL at once).
 * *round, when not NULL, is the item's round. */
tf_status_t tf_infeed_push(tf_client_t *c, const char *url, int dev, const tf_doc_t *doc,
                           uint64_t seq, long wait_ms, uint64_t *round);
/* The same, asynchronous: returns at once; on TF_OK cb runs exactly once, on the thread
 * driving the client, with the outcome (round on success; result says why otherwise); on an
 * error it never runs. doc is borrowed until then. A producer may keep several pushes in
 * flight, seqs consecutive: they may reach the server out of order, and a push ahead of its
 * stream by at most 64 waits (within wait_ms, so give one) for those before it. Items are
 * queued in seq order. Over HTTP keep no more in flight than tf_client_set_max_connections
 * (each needs a connection). A push that waited across a reset is TF_ECONFLICT. */
typedef void (*tf_infeed_push_cb)(tf_client_t *c, tf_status_t status, uint64_t round,
                                  const tf_result_t *result, void *user_data);
tf_status_t tf_infeed_push_start(tf_client_t *c, const char *url, int dev, const tf_doc_t *doc,
                                 uint64_t seq, long wait_ms, tf_infeed_push_cb cb,
                                 void *user_data);
/* Marks the feed done: consumers drain it, then get TF_EDONE. */
tf_status_t tf_feed_done(tf_client_t *c, const char *url);
/* Starts a new generation of the feed: every queued item is dropped (counted), done, the
 * producers' seqs and the consumer slots cleared. *generation, when not NULL, is the new
 * one. Attached feeds see it on their next pop (items of the old generation are never
 * handed out). */
tf_status_t tf_feed_reset(tf_client_t *c, const char *url, uint64_t *generation);
/* The feed's stats JSON (GET url; tf_free it). */
tf_status_t tf_feed_stats(tf_client_t *c, const char *url, char **json);
/* Reads the first outfeed item after sequence number `after`, waiting up to wait_ms: TF_OK,
 * *doc and *seq (and *device when not NULL); TF_EAGAIN when none came; TF_EGONE when item
 * after+1 is no longer kept: *seq is then where to resume (read after it). */
tf_status_t tf_outfeed_get(tf_client_t *c, const char *url, uint64_t after, long wait_ms,
                           tf_doc_t **doc, uint64_t *seq, int *device);

#ifdef __cplusplus
}
#endif
#endif
