/* api.h - what the daemon's endpoint handlers share: their view of the daemon (tfd_api_t:
 * the parts they serve requests from, nothing of the server's life), the per-request
 * context, and the helpers every handler uses (api_common.c: failures, bodies, JSON, blobs).
 * Internal to daemon/; the handlers live in api_tensors.c, api_calls.c, api_workers.c,
 * api_feeds.c and api_info.c, the table that runs them in router.c, the server's life in
 * server.c.
 *
 * Threads: handlers run on the transports' threads (MHD's pool, the UCX progress thread);
 * every part in tfd_api_t is thread-safe; a context belongs to one request.
 */
#ifndef TFD_API_H
#define TFD_API_H

#include <stdatomic.h>
#include <stdint.h>
#include "daemon/auth.h"
#include "daemon/conf.h"
#include "daemon/feeds.h"
#include "daemon/metrics.h"
#include "daemon/replay.h"
#include "daemon/routes.h"
#include "daemon/sessions.h"
#include "daemon/store.h"
#include "daemon/waiters.h"
#include "daemon/workers.h"
#include "proto/op.h"
#include "proto/ids.h"
#include "proto/jsonw.h"
#include "transports/req.h"

/* A setting SIGHUP may change while requests run (server.c's live_keys that sit in cfg):
 * read with this, as the reload stores it atomically. */
#define TFD_LIVE(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

struct tfd_upgrade;

/* The handlers' view of the daemon, set up by the server before its transports start. */
typedef struct {
    const tfd_config_t *cfg;
    tfd_store_t *store;
    tfd_waiters_t *waiters;
    tfd_metrics_t *metrics;
    tfd_routes_t *routes;                   /* exchange routes */
    tfd_sessions_t *sessions;
    tfd_replay_t *replay;
    tfd_workers_t *workers;                 /* worker processes */
    struct tfd_upgrade *upgrade;            /* the UCX side and its tokens */
    struct tfd_shm *shm;                    /* the same-host shm transport, or NULL */
    struct tfd_shmpool *shm_pool;           /* its ready regions for PUTs, or NULL */
    tfd_feeds_t *feeds;                     /* device feeds */
    /* Fills the gauges only the server knows (requests in flight, body memory held). */
    atomic_int *draining;                   /* 1 once SIGTERM began the drain (/readyz) */
    struct tfd_access_log *access_log;      /* NULL: off */
    struct tfd_auth *auth;                  /* bearer tokens and rights (off: allows all) */
    void (*gauges)(void *arg, tfd_gauges_t *g);
    void *gauges_arg;
    char protocol_text[TFP_PROTO_MAX_TEXT + 1];     /* cfg->protocol as Tfetch-Protocol says */
} tfd_api_t;

struct tfd_endpoint_spec;
struct tfd_feed_req;

typedef struct {
    const tfd_api_t *api;
    const tfp_op_t *op;             /* what the request asks for (the transport's) */
    const struct tfd_endpoint_spec *ep;  /* its row in the endpoint table */
    uint64_t start_ns;
    tfp_status_t code;              /* the error answered, TFP_OK if none */
    const char *name;               /* = op->name */
    char request_id[TFP_MAX_REQUEST_ID + 1];
    int request_id_from_client;
    char user[TFP_MAX_USER_ID + 1];
    /* the key of the user's state (sessions, replay): the user id, or with authentication
     * on "PRINCIPAL/USER" (neither holds a '/'), so principals never share state */
    char state_key[2 * (TFP_MAX_USER_ID + 1)];
    int shumai;                     /* a Shumai path: may be served as shumai-principal */
    int info_details;               /* /v1/info: all of it (authentication off, or admin) */
    /* body */
    uint8_t *raw_hdr;               /* TFP_BODY_RAW: the safetensors header placed in front */
    size_t raw_hdr_len;
    uint64_t charged;               /* body bytes approved by the router's body_grow */
    uint64_t reserved;              /* PUT: store reservation still held */
    uint64_t body_charged;          /* other bodies: charged to the router's body memory */
    const struct api_lender *lender; /* who may lend this body its memory (the router sets
                                     * api_feed_lender for an infeed), or NULL: the heap */
    void (*body_give_back)(void *); /* api_body_doc's base is lent (a feed ring's slot, from
                                     * api_feed_begin_lent): this returns it, not tfx_buf_free */
    void *body_give_back_arg;
    /* GET ?wait= and worker polls */
    tfd_waiter_t waiter;
    /* calls */
    tfd_call_t *call;
    tfp_doc_t *call_in;
    uint8_t *call_base;             /* the body buffer call_in points into */
    size_t call_cap, call_len;
    tfd_blob_t *call_st;            /* a Shumai request re-encoded as safetensors */
    atomic_int call_done;
    tfd_route_ops_t call_ops;       /* the route's, held from its lookup (routes.h) */
    int call_held;                  /* call_ops not released yet */
    int call_pending;               /* its start answered PENDING: call_ops.cancel is due */
    int replay_owner;               /* this request must complete the replay entry */
    int replay_waiting;
    int64_t shumai_provenance;
    uint64_t shumai_flags;
    /* worker polls */
    tfd_worker_poll_t poll;
    /* feeds (api_feeds.c) */
    struct tfd_feed_req *feed;
} tfd_ctx_t;

/* Answers r with a JSON error and records the code for the metrics. */
void api_fail(tfx_req_t *r, tfd_ctx_t *c, tfp_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Sets the request's user id and the key of its state (state_key) from it. */
void api_set_user(tfd_ctx_t *c, const char *user);
/* Answers 403 (principal, right, name; name NULL: on any name), counts it. Returns -1. */
int api_forbid(tfx_req_t *r, tfd_ctx_t *c, tfp_right_t right, const char *name);
/* Responds with malloc'd text (freed after sending). */
void api_respond_text(tfx_req_t *r, unsigned status, const char *ctype, char *text, size_t len);
/* Finishes w and responds 200 application/json. */
void api_respond_json(tfx_req_t *r, tfd_ctx_t *c, tfp_jw_t *w);
/* Responds with a blob's bytes (takes the reference). */
void api_respond_blob(tfx_req_t *r, unsigned status, const char *ctype, tfd_blob_t *b);
/* The same for a blob got from the store: a same-host peer (shm) gets its sealed memfd
 * (tfd_store_share) rather than its bytes. */
void api_respond_stored(tfx_req_t *r, tfd_ctx_t *c, unsigned status, const char *ctype,
                        tfd_blob_t *b);
/* A blob of the body api_body_doc gave (base, cap, len, doc; taken, also on failure): a lent
 * body stays lent (tfd_blob_new_lent), one that lies in a sealed memfd (a same-host PUT's)
 * becomes the blob's shared copy as it is. NULL when out of memory. */
tfd_blob_t *api_body_blob(tfx_req_t *r, tfd_ctx_t *c, uint8_t *base, size_t cap, size_t len,
                          tfp_doc_t *doc);

/* In begin: accepts the document body the operation describes (safetensors, raw, Shumai),
 * at most max bytes; a raw body gets its safetensors header made, naming the tensor
 * raw_name. An infeed's may go straight into a ring's slot (api_feed_begin_lent). 0, or -1
 * after answering. */
int api_begin_doc(tfx_req_t *r, tfd_ctx_t *c, const char *raw_name, uint64_t max);
/* In handle: the body as a decoded document. Takes the body buffer: *base and *cap (a tfx_buf)
 * hold the document's bytes at offset 0, *len of them. A staged body (TFP_BODY_STAGED) is
 * the document copied out of the staging buffer it names (into a ring's slot when an
 * infeed's ring has one free, as api_feed_begin_lent): the copy is what is checked and
 * kept. 0, or -1 after answering. */
int api_body_doc(tfx_req_t *r, tfd_ctx_t *c, uint8_t **base, size_t *cap, size_t *len,
                 tfp_doc_t **doc);
/* Encodes doc as safetensors into a new blob (one copy of the data), indexed (b->doc).
 * NULL on failure (err says why). */
tfd_blob_t *api_encode_blob(tfp_doc_t *doc, tfp_err_t *err);
/* The same, written into a free slot of the same-host ring attached to feed f's device dev
 * when shm has one to lend (tfd_shm_lend): the ring then sends the item from where it lies,
 * without copying it again. Else (or shm NULL) into new memory, as api_encode_blob. */
tfd_blob_t *api_encode_blob_for(tfp_doc_t *doc, struct tfd_shm *shm, const tfd_feed_t *f,
                                unsigned dev, tfp_err_t *err);
/* Answers 200 with a safetensors blob (b->doc indexes it) in the form Accept asks for:
 * safetensors, JSON, or one tensor's raw bytes (or 406). Takes the reference. */
void api_serve_blob(tfx_req_t *r, tfd_ctx_t *c, tfd_blob_t *b);
/* Handlers, run by the endpoint table (router.c). begin_* run once the body is accepted
 * (before it arrives), handle_* when it is complete, finish_* when the request is over. */
void api_handle_health(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_ready(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_metrics(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_info(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_upgrade(tfx_req_t *r, tfd_ctx_t *c);

void api_begin_put(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_get(tfx_req_t *r, tfd_ctx_t *c);
void api_finish_get(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_put(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_delete(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_list(tfx_req_t *r, tfd_ctx_t *c);

void api_handle_call(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_session_end(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_shumai_get(tfx_req_t *r, tfd_ctx_t *c);
void api_finish_call(tfx_req_t *r, tfd_ctx_t *c);

void api_handle_register(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_leave(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_poll(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_reply(tfx_req_t *r, tfd_ctx_t *c);
void api_finish_poll(tfx_req_t *r, tfd_ctx_t *c);

/* Feeds (api_feeds.c). api_feed_raw_name: the name a raw infeed body's one tensor takes
 * (the signature's only entry) into buf; 0 when there is no such feed or entry. */
int api_feed_raw_name(const tfd_ctx_t *c, char *buf, size_t size);
/* In api_begin_doc, for an infeed: a push (HTTP or UCX) of a safetensors item of known
 * length, or of a raw one (after the header api_begin_doc made), to a device queue with a
 * same-host ring attached is received straight into a free slot of that ring (the consumer
 * then gets it with no copy through the daemon), max bytes at most (a raw body's exact size).
 * 1 when the body was accepted so, else 0 (the caller accepts it as usual). */
int api_feed_begin_lent(tfx_req_t *r, tfd_ctx_t *c, uint64_t max);
/* The ring slot api_feed_begin_lent takes, for an infeed body of len bytes: per_device the
 * device's ring, a broadcast round the first ring with a free slot. 1 with *buf, *cap and
 * the give-back (tfd_shm_lend), else 0 (not an infeed, no ring, no slot). */
int api_feed_lend(tfd_ctx_t *c, uint64_t len, uint8_t **buf, size_t *cap,
                  void (**give_back)(void *), void **arg);
/* Memory a request's body may be received into instead of the heap, reached through
 * tfd_ctx_t.lender, so the body helpers (api_common.c) need not know who lends it. */
typedef struct api_lender {
    int (*begin)(tfx_req_t *r, tfd_ctx_t *c, uint64_t max);     /* api_feed_begin_lent */
    int (*lend)(tfd_ctx_t *c, uint64_t len, uint8_t **buf, size_t *cap,
                void (**give_back)(void *), void **arg);        /* api_feed_lend */
} api_lender_t;
extern const api_lender_t api_feed_lender;
void api_handle_feed_list(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_feed_declare(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_feed_stats(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_feed_delete(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_feed_infeed(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_feed_pop(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_feed_ack(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_feed_detach(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_feed_outfeed_push(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_feed_outfeed_get(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_feed_done(tfx_req_t *r, tfd_ctx_t *c);
void api_handle_feed_reset(tfx_req_t *r, tfd_ctx_t *c);
void api_finish_feed(tfx_req_t *r, tfd_ctx_t *c);

#endif
