/* internal.h - libtfetch's private types, shared by the files of client/ (not installed).
 *
 * A tf_doc wraps a proto document (names, shapes, metadata) plus the storage that keeps its
 * tensors' bytes alive: per-tensor copies (TF_COPY) and/or one whole buffer the tensors point
 * into (a received response body, or a copied encoded document). The public tf_tensor_t
 * views are kept in a parallel array so tf_doc_at can hand out stable pointers.
 *
 * A tf_client (client.c) owns its transports (a table of functions each: http.c's, and
 * ucx.c's when built with UCX), the origins it has seen (upgrade.c) and the requests in
 * flight; a tf_fetch (fetch.c) is one request, carried by one transport at a time, its
 * outcome recorded and its reply decoded by result.c. No file but ucx.c knows UCX.
 * Same threading as the public objects: one thread at a time per doc or client.
 */
#ifndef TF_CLIENT_INTERNAL_H
#define TF_CLIENT_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "client/tfetch.h"
#include "proto/answer.h"
#include "proto/auth.h"
#include "proto/digest.h"
#include "proto/doc.h"
#include "proto/ids.h"
#include "proto/shmframe.h"
#include "proto/status.h"
#include "proto/ucxframe.h"
#include "proto/upgrade.h"
#include "transports/clock.h"
#include "transports/http_client.h"

#define REQ_POOL_MAX 256
#define TFI_MAX_COND 255                /* an If-Match / If-None-Match value's bytes */
#define MIME_SAFETENSORS "application/x-safetensors"
#define MIME_JSON "application/json"
#define MIME_RAW "application/octet-stream"

struct tf_doc {
    tfp_doc_t *d;                   /* the model; tensor data pointers are borrowed */
    tf_tensor_t *views;             /* views[i] mirrors d->t[i] */
    void **copies;                  /* copies[i]: TF_COPY storage for tensor i, or NULL */
    size_t cap;                     /* capacity of views and copies */
    void *buf;                      /* whole buffer the tensors point into, or NULL */
    size_t buf_cap;                 /* 0: buf is malloc'd; else a tfx_buf_alloc buffer's
                                     * capacity (a UCX reply in reused memory) */
    void (*release)(void *);        /* run by tf_doc_free last (an shm mapping: unmap and
                                     * end its lease), or NULL */
    void *release_arg;
    void *shm_lent;                 /* tf_doc_new_shm: the lent buffer (shm.c) while the
                                     * caller may still write it; NULL otherwise */
    void *staged;                   /* tf_doc_new_staging: its staging buffer (shm.c), for
                                     * the life of the doc; NULL otherwise */
    int frozen;                     /* built in place: no tensor or metadata can be added */
    int owns_bytes;                 /* received: the tensors' bytes are this document's to
                                     * write (its own buffer, or a copy-on-write mapping);
                                     * tf_doc_writable gives them. 0 for a feed item in a
                                     * same-host ring's slot (mapped read-only) */
    size_t packed;                  /* tf_doc_new_packed, tf_doc_new_staging: its
                                     * safetensors bytes are packed_p[0, packed), header
                                     * and data in one piece; 0 otherwise */
    const void *packed_p;
    const void *raw;                /* received: the document's bytes as the server sent them
                                     * (raw_len), when they lie in one piece; else NULL.
                                     * Read at completion only (fetch.c's sink_doc) */
    size_t raw_len;
};

/* Operations besides the public tf_op_t, for tf_list and tf_info: their reply is kept as
 * text rather than decoded as a document. */
enum { TFI_OP_LIST = 100, TFI_OP_INFO = 101, TFI_OP_UPGRADE = 102, TFI_OP_CALL = 103 };

/* A request of the feed API (feed.c), TFI_OP_CALL: one feed operation, said once, as the
 * feed block of a UCX FEED frame (proto/ucxframe.h: its op, device, stream ids, positions);
 * each transport renders it: UCX as that frame, HTTP as the method, path, query and headers
 * tfp_uf_feed_http derives from it. A body that is a document (safetensors) or JSON text,
 * and a reply kept whole: a safetensors reply becomes f->doc, anything else f->text, the
 * typed answer f->reply. Everything is copied at start but doc and json, which are
 * borrowed until completion. */
typedef struct {
    const char *url;                /* the feed's URL: http://HOST:PORT/v1/feeds/NAME */
    const tf_doc_t *doc;            /* the body as safetensors, or NULL */
    const char *json;               /* the body as JSON (when doc is NULL), or NULL */
    long wait_ms;                   /* how long the server may hold it: added to the limit */
    long timeout_ms;                /* 0: the client's; > 0: ms; < 0: none */
    const char *what;               /* tf_result_t op: "feed" when NULL */
    int background;                 /* the library's own request (a feed's prefetch): not
                                     * counted in tf_client_pending, so tf_client_run does
                                     * not wait for it */
    /* The operation (feed.op: TFP_UF_FEED_*, never 0) and its feed's name; wait_ms above
     * is the frame's wait and HTTP's (?wait= or Prefer: wait=). */
    tfp_uf_feed_t feed;
    const char *feed_name;
} tfi_call_t;

/* The typed answer a reply carried (proto/answer.h: its ETag, a feed's position, seq,
 * round, generation and device, Retry-After), whatever the transport: HTTP's headers, UCX's
 * frame blocks and shm's REPLY each fill the same tfp_answer_t through the answer's table
 * (tfi_take_answer); only valid values are set (tfp_answer_has). */
typedef struct {
    tfp_answer_t answer;
    uint64_t total;                 /* a range request: the whole document's size */
    int has_total;
} tfi_reply_t;

/* The number field f of a reply's answer: 1 and *v when it came, else 0 (*v 0). */
static inline int tfi_reply_u64(const tfi_reply_t *rp, tfp_af_t f, uint64_t *v)
{
    int has = tfp_answer_has(&rp->answer, f);
    *v = has ? rp->answer.num[f] : 0;
    return has;
}

typedef struct origin origin_t;

/* What a request asks for, built once from its URL and tf_request_t when it starts (fetch.c)
 * and kept until it completes; each transport renders it its own way (http.c: a method, a
 * URL and headers; ucx.c: a frame), so a retry over HTTP is the same request. The body is
 * rendered once too, in the request's format (result.c), as segments that borrow the
 * document's tensors. */
typedef struct {
    int kind;                       /* tf_op_t or TFI_OP_LIST / TFI_OP_INFO */
    tf_format_t format;             /* resolved: never TF_FORMAT_DEFAULT */
    char *url;                      /* the caller's URL (a copy) */
    int query;                      /* the URL has a query */
    char name[TFP_MAX_TENSOR_NAME + 1];  /* what the path names: the tensor of
                                     * /v1/tensors/NAME (get, put, delete) or the route of
                                     * /v1/call/NAME (exchange); "" when neither */
    long wait_ms;                   /* get: long-poll up to wait_ms (0: no) */
    char user[TFP_MAX_USER_ID + 1]; /* the client's user id when it started; "" for none */
    char auth[TFP_AUTH_MAX_TOKEN + 8];  /* "Bearer TOKEN" when it started; "" for none */
    char request_id[TFP_MAX_REQUEST_ID + 1];
    const tf_doc_t *body;           /* put, exchange: borrowed until completion; else NULL */
    void *hdr;                      /* the rendered body: its encoded header (malloc'd), */
    const void **segs;              /* then segs[0..nsegs) (segs[0] is hdr), lent to the */
    size_t *lens;                   /* transport until the request completes */
    size_t nsegs;
    uint64_t body_len;              /* sum of lens */
    /* tf_fetch_start_fd: a put's body read from a file, a get's reply written to one */
    int body_fd;                    /* put: the file (its bytes from 0 to body_fd_len), or -1 */
    uint64_t body_fd_len;
    void *body_map;                 /* its read-only mapping while rendered (UCX sends
                                     * from it; HTTP and shm read the file), or NULL */
    int sink_fd;                    /* get: where the reply document goes, or -1 */
    /* TFI_OP_CALL only: */
    char *method;                   /* copied; NULL for the other kinds */
    char **hdrs;                    /* name, value, name, value... (copied) */
    size_t nhdrs;                   /* names in hdrs */
    const char *json;               /* the JSON body, borrowed; NULL when none */
    char what[16];                  /* tf_result_t op */
    tfp_uf_feed_t feed;             /* its FEED frame (feed.op 0: none; ucx.c) */
    long feed_wait_ms;              /* the frame's wait */
    char digest[TFP_DIGEST_FIELD_MAX];  /* a verified put's Repr-Digest ("" none), made
                                     * once as it starts and sent by every transport */
    uint8_t staged[TFP_SF_STAGED_LEN];  /* a staged body (ucx.c), sent instead of a doc
                                     * from tf_doc_new_staging over its own connection */
    /* Conditions, lifetime and range (tf_request_t, tf_get_range): each transport renders
     * them or declines an op that has them (tfi_op_has_cond). */
    struct {
        char if_match[TFI_MAX_COND + 1];        /* "" when none */
        char if_none_match[TFI_MAX_COND + 1];   /* "" when none */
        uint64_t ttl_s;                         /* put: 0 for ever */
        int range;                              /* tf_get_range: a byte range, raw reply */
        uint64_t first, last;                   /* its bytes; last UINT64_MAX: to the end */
    } cond;
    struct {                                    /* TFI_OP_LIST: one page (tf_list_page) */
        char prefix[TFP_MAX_TENSOR_NAME + 1], after[TFP_MAX_TENSOR_NAME + 1];
        uint64_t limit;                         /* 0: no limit */
    } list;
} tfi_op_t;

/* 1 if op carries a condition, a lifetime or a range (what only HTTP renders today). */
static inline int tfi_op_has_cond(const tfi_op_t *op)
{
    return op->cond.if_match[0] || op->cond.if_none_match[0] || op->cond.ttl_s ||
           op->cond.range;
}

/* A transport of the client: how a request travels once the client has chosen it. One table
 * of functions per transport, as redis' connection.h has per connection type: http.c's
 * (tfi_http, always there) and, when built with UCX, ucx.c's (tfi_ucx, NULL otherwise),
 * reached by an upgrade. The client lists them in c->transports, HTTP first, drives them in
 * that order and closes them in the reverse one. A new transport is a new file with its
 * table, added to that list in tf_client_new. All run on the thread driving the client. */
typedef struct tfi_transport {
    const char *name;
    /* Creates the transport's per-client state (NULL: none needed). 0, or -1. */
    int (*open)(tf_client_t *c);
    /* Sends f, which it then carries (f->via). TF_OK, or a status with f->result saying why
     * (f then carries nothing). */
    tf_status_t (*start)(tf_client_t *c, tf_fetch_t *f);
    /* Stops f, which it carries: f completes now with TF_ECANCELED or, when the transport
     * still holds f's buffers, once it gives them back. */
    void (*cancel)(tf_client_t *c, tf_fetch_t *f);
    /* Completes what it has finished, without waiting (callbacks run here). */
    void (*drain)(tf_client_t *c);
    /* Optional: drives f, which it carries, on the calling thread for a short while, at most
     * ms (-1: its own bound), instead of the client's sleep. 1 if it did (completions are
     * ready to drain; the caller drains before it waits again), 0 if the client should
     * sleep as usual (tfi_wait). Never runs callbacks. */
    int (*wait)(tf_client_t *c, tf_fetch_t *f, long ms);
    /* Requests in flight over it. */
    size_t (*running)(const tf_client_t *c);
    /* tf_client_free: completes what it still carries (canceled) and frees its state. */
    void (*close)(tf_client_t *c);

    /* Transports reached by an upgrade (NULL for HTTP): one connection per origin. */
    /* Connects o with the server's answer to POST /v1/upgrade, starting the transport in
     * this process first if needed (when it cannot start, c->up_dead says why): 0 with
     * o->conn and o->transport set; 1 when the connection is made but not yet confirmed
     * within a few tens of milliseconds (o->pending, o->why saying so: settle decides it
     * later, and nothing waits for it meanwhile); or -1 with o->why set (tfi_up_failed). */
    int (*connect)(tf_client_t *c, origin_t *o, const tfp_up_resp_t *resp);
    /* o->pending: waits up to wait_ms (0: looks) for its confirmation. 0 once it is o->conn,
     * 1 while still pending, -1 when it failed (o->why, a backoff). */
    int (*settle)(tf_client_t *c, origin_t *o, long wait_ms);
    /* 1 once o's connection failed (a request timed out, the peer went away). */
    int (*broken)(const origin_t *o);
    /* Closes o's connection: its unfinished requests complete with a transport failure. */
    void (*disconnect)(origin_t *o);
    /* 1 if o's server offered the feature word when o connected (TFP_UF_FEATURE_*). */
    int (*has_feature)(const origin_t *o, const char *word);
} tfi_transport_t;

#define TFI_MAX_TRANSPORTS 4

extern const tfi_transport_t tfi_http;
extern const tfi_transport_t *const tfi_ucx;    /* NULL when built without UCX */
/* The same-host shm transport (shm.c): reached with the UCX upgrade when the server names
 * an shm socket; carries GETs, PUTs and large exchanges under policy auto. */
extern const tfi_transport_t tfi_shm;
/* Connects o's shm socket with the upgrade's answer: 0 (o->shm), or -1 with why. */
int tfi_shm_connect(tf_client_t *c, origin_t *o, const tfp_up_resp_t *resp, char *why,
                    size_t why_size);
void tfi_shm_disconnect(origin_t *o);
/* The uid the server's process runs as, from its shm socket (SO_PEERCRED, or the socket
 * file's owner when the file's mode keeps us out): 0 and *uid, or -1 when not known. */
int tfi_shm_peer_uid(const origin_t *o, uid_t *uid);
/* o's connection was made: no backoff, no reason left (upgrade.c). */
void tfi_up_connected(origin_t *o);
/* Notes the server range a response named (v: its Tfetch-Protocol, "" when absent: version
 * 1) and checks it against the client's: TF_OK, or the status recorded in res (TF_EVERSION
 * naming both ranges and the feature; TF_EPROTO for a malformed value). */
tf_status_t tfi_origin_protocol(const tf_client_t *c, origin_t *o, const char *v,
                                const char *feature, tf_result_t *res);
/* ucx.c: the memory types the client's UCX can move (tfx_ucxc_memory), or NULL when it has
 * not started in this client (or tfetch was built without UCX). */
const char *tfi_ucx_memory(const tf_client_t *c);
/* A one-time token for another connection to o's shm socket (named in *name), as o's
 * principal: 0, or -1 with why (a failed connection is closed). Calling thread; a round
 * trip. */
int tfi_shm_token(origin_t *o, char name[TFP_UP_MAX_SHM_SOCKET + 1],
                  char token[TFP_UP_TOKEN_LEN + 1], char *why, size_t why_size);           /* o->shm NULL is a no-op */
/* 1 with ref set (proto/shmframe.h) when doc lies in a staging buffer of o's current shm
 * connection (tf_doc_new_staging), so a push over o's UCX connection may name it instead of
 * carrying it; else 0. */
int tfi_shm_staged(const origin_t *o, const tf_doc_t *doc, uint8_t ref[TFP_SF_STAGED_LEN]);
/* 1 if f can go over its origin's shm connection. */
int tfi_shm_can(const tf_fetch_t *f);
/* An exchange shm would carry but cannot (the server takes no CALL, or declined the route
 * before): says why in f's fallback, unless one is said already. */
void tfi_shm_note(tf_fetch_t *f);

/* What the client knows of one origin (scheme://host:port): whether its server offers UCX,
 * its connection over the transport an upgrade reaches, and why there is none. Kept for the
 * client's life. */
struct origin {
    origin_t *next;
    char *key;                      /* "http://127.0.0.1:8000" (tfx_hc_url_split) */
    int offered;                    /* the last response's Tfetch-Upgrade: 1 ucx, 0 no, -1 ? */
    int local;                      /* its host is this host: 1, 0, -1 not looked at yet */
    char why[160];                  /* why there is no UCX connection; "" when none known */
    uint64_t retry_at;              /* CLOCK_MONOTONIC ms: no upgrade attempt before */
    long backoff_ms;                /* the wait after the next failure; 0 after a success */
    int want_upgrade;               /* a request inside a callback asked: negotiate when the
                                     * client is next driven */
    tf_transport_t want_policy;
    void *conn;                     /* the connection (c->up's: tfx_ucxc_conn_t), or NULL */
    void *pending;                  /* one made but not yet confirmed (its HELLO unanswered),
                                     * or NULL: requests go on without it until it settles */
    long pending_pid;               /* its server's pid on this host (0: another host) */
    uint64_t conn_gen;              /* counts connections made, to tell them apart */
    char transport[32];             /* what carries conn: "ucx/sysv+cma" */
    void *shm;                      /* the same-host shm connection (shm.c), or NULL */
    uint64_t caller_driven;         /* requests whose UCX round trip the caller's thread
                                     * drove (tf_transport_info_t) */
    char shm_why[160];              /* why there is none, when the upgrade said why */
    int shm_failed;                 /* the server offered shm and connecting to it failed */
    int server_uid_known;           /* server_uid was read: the shm socket's peer credentials,
                                     * or the owner of a socket file we may not connect to */
    uid_t server_uid;
    tfp_proto_range_t protocol;     /* the versions its server speaks, from its last answer
                                     * (a version-1 server names none); {0, 0}: no answer yet */
    int same_host;                  /* the last upgrade answer's same_host; -1: none yet */
    tf_stages_t last_stages;        /* the last completed request's (tf_transport_info_t) */
    char last_transport[32];
    char last_fallback[160];
};

/* A source of completions besides the transports, drained with them whenever the client is
 * driven (a feed, feed.c: its device copies and its pop and push callbacks). running counts
 * what it has pending that would complete by itself (drive keeps driving while it is not 0).
 * Registered for the source's life. */
typedef struct tfi_source tfi_source_t;
struct tfi_source {
    tfi_source_t *next;
    void (*drain)(tfi_source_t *s);
    size_t (*running)(const tfi_source_t *s);
};

struct tf_client {
    tfx_hc_t *hc;                   /* the HTTP engine (http.c) */
    tfx_hc_req_t *pool[REQ_POOL_MAX];  /* idle engine requests, reset */
    size_t npool;
    const tfi_transport_t *transports[TFI_MAX_TRANSPORTS];  /* tfi_http first */
    size_t ntransports;
    const tfi_transport_t *up;      /* what an upgrade reaches (tfi_ucx), or NULL */
    void *up_state;                 /* its per-client state, started at the first upgrade */
    void *shm_state;                /* tfi_shm's (shm.c) */
    size_t nup;                     /* requests in flight over it */
    unsigned up_progress;           /* its progress count when last reported (ucx.c) */
    char up_dead[160];              /* why it cannot start in this process; "" if it can */
    tf_fetch_t *live;               /* every handle not yet freed (pending or held) */
    tfi_source_t *sources;          /* feeds attached through this client */
    size_t npending;                /* started and not completed (over either transport) */
    tf_transport_t transport;       /* the policy: never TF_TRANSPORT_DEFAULT */
    tf_upgrade_t upgrade;           /* when policy auto negotiates (upgrade.c) */
    char env_bad[96];               /* TFETCH_TRANSPORT held no policy: why; "" if fine */
    int verify;                     /* tf_client_set_verify: digests on gets and puts */
    tfp_proto_range_t protocol;     /* the versions this client speaks (TFETCH_PROTOCOL_MIN
                                     * may raise the minimum: a skew test's planted bump) */
    char protocol_text[TFP_PROTO_MAX_TEXT + 1];     /* as Tfetch-Protocol says it */
    origin_t *origins;
    int want_upgrades;              /* some origin has want_upgrade set */
    tfp_up_host_t host;             /* this host's identity, read once */
    int have_host;
    int in_cb;                      /* depth of fetch callbacks running */
    int in_engine;                  /* inside libcurl (the progress callback) */
    int closing;                    /* tf_client_free is canceling what is pending */
    atomic_int woken;               /* tf_client_wakeup was called (any thread); tf_client_run
                                     * consumes it */
    char *user;                     /* Tfetch-User, or NULL */
    char *token;                    /* the bearer token (Authorization), or NULL */
    char *ca_file;                  /* https: the CA certificates trusted, or NULL: the
                                     * system's (tf_client_set_ca_file) */
    char *cert_file, *key_file;     /* https: the client certificate and its key, or NULL:
                                     * none (tf_client_set_cert; key NULL: in cert_file) */
    char next_rid[TFP_MAX_REQUEST_ID + 1];  /* "" when the client makes one */
    char rid_prefix[17];            /* 16 random hex digits */
    uint64_t rid_seq;
    long timeout_ms;
    uint64_t max_body;
    uint64_t stall_rate;            /* stall detection: below this many bytes/s ... */
    long stall_ms;                  /* ... for this long fails a request; 0: off */
    tf_format_t format;
    tf_progress_fn progress;
    void *progress_ud;
    tf_result_t last;
    struct {                        /* the last URL a request split (fetch.c), all owned: */
        char *url;                  /* NULL when none */
        char *key, *path;           /* tfx_hc_url_split's origin and path of url */
        int query;
    } split;
};

struct tf_fetch {
    tf_client_t *c;                 /* NULL once the client is freed */
    tf_fetch_t *prev, *next;        /* c->live */
    const tfi_transport_t *via;     /* what carries it while it runs, else NULL */
    tfx_hc_req_t *req;              /* over HTTP: the engine request */
    void *treq;                     /* over an upgraded transport: its request */
    tf_fetch_cb cb;
    void *ud;
    tfi_op_t op;                    /* what it asks for */
    int held;                       /* the caller has the handle: freed by tf_fetch_free */
    int done;                       /* completed; the callback has run or is running */
    int freeing;                    /* tf_fetch_free was called */
    int holds;                      /* frames using f (its callback, a wait): free after */
    tf_result_t result;
    tf_doc_t *doc;                  /* the reply, until given to the callback or taken */
    char *text;                     /* TFI_OP_LIST / TFI_OP_INFO: the reply body */
    size_t text_len;
    tfi_reply_t reply;              /* the reply's typed answer (every kind of request) */
    long total_ms;                  /* the whole request's time limit, wait included; 0 none */
    long hold_ms;                   /* how long the server may hold it (a long-poll's wait):
                                     * added to the stall window */
    tf_transport_t policy;          /* resolved: never TF_TRANSPORT_DEFAULT */
    origin_t *origin;               /* the URL's origin (owned by the client), or NULL */
    uint64_t t0_ns;                 /* when it started (tfx_now_ns) */
    uint64_t t_done_ns;             /* when its transport finished with it (decoded); 0:
                                     * tfi_stages_finish reads the clock */
    uint64_t conn_gen;              /* the connection it went over */
    int canceled;                   /* canceled while the transport holds its buffers:
                                     * completes with TF_ECANCELED */
    int background;                 /* not counted in c->npending (tfi_call_t) */
    int blocking;                   /* started by a blocking call, which waits for it at
                                     * once: the transport may leave sending to its wait */
    int drove;                      /* its transport's wait drove it once already */
    double rt_ms;                   /* a transport that knows only its round trip (shm): its
                                     * ms, the server's time in it; -1 otherwise */
};

/* The stall window of f in whole seconds (curl's low-speed time): the client's stall time
 * plus the server's hold, rounded up; 0 when stall detection is off. */
long tfi_stall_seconds(const tf_fetch_t *f);

/* Internal functions use the tfi_ prefix: they cross files inside libtfetch but are not
 * exported (the library exports only ^tf_). */

/* Wraps a decoded proto doc whose data points into buf (taken over when not NULL: freed
 * with the doc). On failure neither d nor buf is freed. */
tf_status_t tfi_doc_wrap(tfp_doc_t *d, void *buf, tf_doc_t **out);
/* The safetensors header of tensors[0..n) (*hdr malloc'd, *hlen bytes) and the bytes of
 * their data (*data): TF_EINVAL for an invalid layout, TF_ENOMEM. */
tf_status_t tfi_layout_header(const tf_tensor_spec_t *tensors, size_t n, void **hdr,
                              size_t *hlen, size_t *data);
/* tf_fetch_start for a caller that waits for the request at once (tf_fetch_wait), as a
 * blocking call does: its transport may leave the sending to that wait (UCX: no hand-off to
 * the progress thread and back). driver.c's inline requests. */
tf_status_t tfi_fetch_start_driven(tf_client_t *c, const tf_request_t *rq, tf_fetch_cb cb,
                                   void *user_data, tf_fetch_t **out);
/* 1 while some client is alive: a freed reply buffer is kept for reuse only then. */
int tfi_clients_live(void);

/* The proto status with the same name (the values are equal by construction). */
static inline tf_status_t tfi_from_proto(tfp_status_t st)
{
    return (tf_status_t)st;
}

/* library.c: versioned structs (see tfetch.h). The size of the 0.1 layout of each: where its
 * last 0.1 field ends (fields added later go after it). */
#define TFI_REQUEST_SIZE_0_1 (offsetof(tf_request_t, transport) + sizeof(tf_transport_t))
#define TFI_TRANSPORT_INFO_SIZE_0_1 (offsetof(tf_transport_info_t, retry_ms) + sizeof(long))
#define TFI_RESULT_SIZE_0_1 (offsetof(tf_result_t, fallback) + 160)
#define TFI_COMPLETION_SIZE_0_1 (offsetof(tf_completion_t, result) + TFI_RESULT_SIZE_0_1)
/* Reads a caller's versioned struct src of size bytes (0: min) into dst, this library's
 * struct of dst_size bytes: what the caller's lacks is zero. TF_EINVAL when size is below min,
 * or when the caller's struct is longer and a byte past dst_size is not zero (a field this
 * library does not know, set). */
tf_status_t tfi_struct_in(void *dst, size_t dst_size, const void *src, size_t size,
                          size_t min);
/* How many bytes of this library's struct (have bytes) go into a caller's of size bytes (0:
 * min); 0 when size is below min. */
size_t tfi_struct_out_size(size_t size, size_t have, size_t min);

/* client.c: the handle */
int tfi_format_valid(tf_format_t f);
int tfi_transport_valid(tf_transport_t t);

/* result.c: outcomes, decoding replies, Shumai's wire format */
const char *tfi_op_name(int op);
/* A fresh record for a request of op: the request id it will carry is the one given, else
 * the client's next id (used up), else a new one. */
void tfi_new_result(tf_client_t *c, tf_result_t *r, int op, const char *rid);
/* Records a failure in r (message printf-style, or the status text when fmt is NULL). */
tf_status_t tfi_rfail(tf_result_t *r, tf_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Completes f->result.stages (the transport filled what it measured: connect, send,
 * receive, decode): total, the server's parts from the answer, and notes them as the
 * origin's last (tf_transport_info_t). Run once, as f completes. */
void tfi_stages_finish(tf_fetch_t *f);
/* SHA-256 of a file's bytes 0..len, read in slices. 0, or -1 when it cannot be read. */
int tfi_fd_sha256(int fd, uint64_t len, uint8_t sha[TFP_DIGEST_LEN]);
/* A verified put's Repr-Digest, of its rendered segments or its file, into op->digest. 0,
 * or -1 when the file cannot be read. */
int tfi_body_digest(tfi_op_t *op);
/* SHA-256 of a received document's bytes, through tfi_received_sha256. */
void tfi_doc_sha256(const void *p, size_t n, uint8_t sha[TFP_DIGEST_LEN]);
/* The test hook of tests/digest.test, on a received document's digest: with
 * TFETCH_TEST_CORRUPT=get it is changed, as if the bytes had been; else left. */
void tfi_received_sha256(uint8_t sha[TFP_DIGEST_LEN]);
/* A verified get completed over UCX or shm: its document checked against the answer's
 * Repr-Digest, or dropped with TF_EDIGEST. Run as f completes, before its file is written. */
void tfi_verify_received(tf_fetch_t *f);
/* Records the typed answer a reply carried, over whichever transport: f->reply.answer, and
 * what the result shows of it (its ETag). Every transport's completion calls it once. */
void tfi_take_answer(tf_fetch_t *f, const tfp_answer_t *a);
/* Refuses a blocking call before it starts: tf_client_last says why. */
tf_status_t tfi_refuse(tf_client_t *c, int op, tf_status_t st, const char *msg);
/* Turns a non-2xx response (HTTP status, body) into a status: the server's JSON error when
 * it sent one. */
/* The public status for an HTTP engine status (client/http.c); unknown ones are TF_EIO. */
tf_status_t tfi_from_hc(tfx_hc_status_t st);
tf_status_t tfi_error_body(tf_result_t *res, long status, const uint8_t *body, size_t len);
/* Refuses what Shumai's format cannot carry: anything but one F32 tensor. */
tf_status_t tfi_shumai_check(tf_result_t *res, const tf_doc_t *doc);
/* Decodes the response in req into f->doc, which takes over the body buffer. */
tf_status_t tfi_decode_doc(tf_fetch_t *f, tfx_hc_req_t *req);
/* Renders op->body in op->format as op's segments. On failure res says why. */
tf_status_t tfi_body_render(tfi_op_t *op, tf_result_t *res);
/* Frees the rendered body (the segments, not the document). */
void tfi_body_free(tfi_op_t *op);

/* http.c: the HTTP path; its engine is the client's one poll loop */
/* Sleeps until the engine has work or another transport calls tfi_wakeup (ms -1: no limit). */
void tfi_wait(tf_client_t *c, long ms);
/* Ends tfi_wait early. Any thread. */
void tfi_wakeup(tf_client_t *c);
tf_status_t tfi_set_max_connections(tf_client_t *c, long n);

/* fetch.c: the request's life */
/* Frees the client's cached URL split (c->split); the client stays usable. */
void tfi_split_forget(tf_client_t *c);
/* What is left of f's time limit in ms (at least 1), or 0 when it has none. */
long tfi_remaining_ms(const tf_fetch_t *f);
/* Completes f, whose outcome is recorded: runs its callback, frees what it no longer needs. */
void tfi_complete_fetch(tf_client_t *c, tf_fetch_t *f);
/* Reports a transfer's progress to the client's progress function (if any), for the
 * transports that move a body outside libcurl (shm, UCX); as libcurl's, a non-zero return
 * asks to abort. */
int tfi_progress(tf_client_t *c, uint64_t down_now, uint64_t down_total, uint64_t up_now,
                 uint64_t up_total);

/* Starts a TFI_OP_CALL request (see tfi_call_t), with the rules of tf_fetch_start: on TF_OK
 * cb runs exactly once (f->reply, f->doc, f->text hold the reply); on an error it never
 * runs and tf_client_last says why. */
tf_status_t tfi_call_start(tf_client_t *c, const tfi_call_t *call, tf_fetch_cb cb, void *ud,
                           tf_fetch_t **out);
/* Starts a call and drives the client until it completes (refused inside a callback);
 * tf_client_last then holds its outcome. *out is the completed handle (tf_fetch_free it)
 * whenever it started. */
tf_status_t tfi_call(tf_client_t *c, const tfi_call_t *call, tf_fetch_t **out);

/* Drives the client (transports and sources) until *flag is non-zero or timeout_ms passes
 * (-1: no limit), or nothing is left that could set it. */
void tfi_drive_until(tf_client_t *c, const int *flag, long timeout_ms);
void tfi_source_add(tf_client_t *c, tfi_source_t *s);
void tfi_source_remove(tf_client_t *c, tfi_source_t *s);

/* upgrade.c: origins and the per-origin upgrade policy */
/* The client's record of an origin ("http://host:port"), made on first sight; NULL when out
 * of memory. */
origin_t *tfi_origin_get(tf_client_t *c, const char *key);
tf_status_t tfi_origin_of(tf_client_t *c, const char *url, int op, origin_t **out);
/* 1 if a Tfetch-Upgrade value lists ucx (a comma-separated list of tokens). */
int tfi_offers_ucx(const char *v);
/* Negotiates for the origins that requests started inside callbacks found unconnected. */
void tfi_upgrade_wanted(tf_client_t *c);
/* Decides how f travels: *via is tfi_http or the origin's upgraded transport (connected). */
tf_status_t tfi_choose(tf_client_t *c, tf_fetch_t *f, const tfi_transport_t **via);
/* Records why o has no UCX connection, and when to try again (the backoff doubles). */
void tfi_up_failed(origin_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
