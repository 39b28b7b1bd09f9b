/* api.h - what the daemon's HTTP API handlers share: the server's parts, the per-request
 * context, and the helpers every handler uses (errors, bodies, JSON, blobs). Internal to
 * daemon/; the handlers live in api_tensors.c, api_calls.c and api_workers.c, the routing in
 * server.c.
 *
 * Threads: handlers run on the HTTP transport's workers; everything in tfd_server is
 * thread-safe; a context belongs to one request.
 */
#ifndef TFD_API_H
#define TFD_API_H

#include <stdatomic.h>
#include <stdint.h>
#include "daemon/conf.h"
#include "daemon/metrics.h"
#include "daemon/plugins.h"
#include "daemon/replay.h"
#include "daemon/routes.h"
#include "daemon/sessions.h"
#include "daemon/store.h"
#include "daemon/waiters.h"
#include "daemon/workers.h"
#include "proto/http.h"
#include "proto/ids.h"
#include "proto/jsonw.h"
#include "transports/http_server.h"

struct tfd_server {
    tfd_config_t cfg;
    tfx_http_t *http;
    tfd_store_t *store;
    tfd_waiters_t *waiters;
    tfd_metrics_t *metrics;
    tfd_routes_t *routes;
    tfd_sessions_t *sessions;
    tfd_replay_t *replay;
    tfd_workers_t *workers;
    struct tfd_upgrade *upgrade;
    tfd_plugins_t *plugins;                 /* loaded after the built-in routes */
    char id_prefix[17];
    atomic_uint_fast64_t next_id;
    atomic_uint_fast64_t body_bytes;        /* request bodies held outside the store */
};
typedef struct tfd_server tfd_server_t;

struct tfd_endpoint;

typedef struct {
    tfd_server_t *srv;
    const tfp_op_t *op;             /* what the request asks for (the transport's) */
    const struct tfd_endpoint *ep;  /* its row in the endpoint table */
    uint64_t start_ns;
    tfp_status_t code;              /* the error answered, TFP_OK if none */
    const char *name;               /* = op->name */
    char request_id[TFP_MAX_REQUEST_ID + 1];
    int request_id_from_client;
    char user[TFP_MAX_USER_ID + 1];
    /* body */
    uint8_t *raw_hdr;               /* TFP_BODY_RAW: the safetensors header placed in front */
    size_t raw_hdr_len;
    uint64_t charged;               /* body bytes approved by on_body_grow */
    uint64_t reserved;              /* PUT: store reservation still held */
    uint64_t body_charged;          /* other bodies: charged to srv->body_bytes */
    /* GET ?wait= and worker polls */
    tfd_waiter_t waiter;
    /* calls */
    tfd_call_t *call;
    tfp_doc_t *call_in;
    uint8_t *call_base;             /* the body buffer call_in points into */
    size_t call_cap, call_len;
    tfd_blob_t *call_st;            /* a Shumai request re-encoded as safetensors */
    atomic_int call_done;
    int replay_owner;               /* this request must complete the replay entry */
    int replay_waiting;
    int64_t shumai_provenance;
    uint64_t shumai_flags;
    /* worker polls */
    tfd_worker_poll_t poll;
} ctx_t;

/* Answers r with a JSON error and records the code for the metrics. */
void api_fail(tfx_req_t *r, ctx_t *c, tfp_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Responds with malloc'd text (freed after sending). */
void api_respond_text(tfx_req_t *r, unsigned status, const char *ctype, char *text, size_t len);
/* Finishes w and responds 200 application/json. */
void api_respond_json(tfx_req_t *r, ctx_t *c, tfp_jw_t *w);
/* Responds with a blob's bytes (takes the reference). */
void api_respond_blob(tfx_req_t *r, unsigned status, const char *ctype, tfd_blob_t *b);

/* In begin: accepts the document body the operation describes (safetensors, raw, Shumai),
 * at most max bytes; a raw body gets its safetensors header made, naming the tensor
 * raw_name. 0, or -1 after answering. */
int api_begin_doc(tfx_req_t *r, ctx_t *c, const char *raw_name, uint64_t max);
/* In handle: the body as a decoded document. Takes the body buffer: *base and *cap (a tfx_buf)
 * hold the document's bytes at offset 0, *len of them. 0, or -1 after answering. */
int api_body_doc(tfx_req_t *r, ctx_t *c, uint8_t **base, size_t *cap, size_t *len,
                 tfp_doc_t **doc);
/* Encodes doc as safetensors into a new blob (one copy of the data), indexed (b->doc).
 * NULL on failure (err says why). */
tfd_blob_t *api_encode_blob(tfp_doc_t *doc, tfp_err_t *err);
/* Answers 200 with a safetensors blob (b->doc indexes it) in the form Accept asks for:
 * safetensors, JSON, or one tensor's raw bytes (or 406). Takes the reference. */
void api_serve_blob(tfx_req_t *r, ctx_t *c, tfd_blob_t *b);
/* Wraps malloc'd bytes in a blob. */
tfd_blob_t *api_text_blob(char *text, size_t len);

/* Handlers. begin_* run when headers are in, handle_* when the body is complete. */
void api_begin_put(tfx_req_t *r, ctx_t *c);
void api_handle_get(tfx_req_t *r, ctx_t *c);
void api_finish_get(tfx_req_t *r, ctx_t *c);
void api_handle_put(tfx_req_t *r, ctx_t *c);
void api_handle_delete(tfx_req_t *r, ctx_t *c);
void api_handle_list(tfx_req_t *r, ctx_t *c);

void api_handle_call(tfx_req_t *r, ctx_t *c);
void api_handle_session_end(tfx_req_t *r, ctx_t *c);
void api_handle_shumai_get(tfx_req_t *r, ctx_t *c);
void api_finish_call(tfx_req_t *r, ctx_t *c);

void api_handle_register(tfx_req_t *r, ctx_t *c);
void api_handle_leave(tfx_req_t *r, ctx_t *c);
void api_handle_poll(tfx_req_t *r, ctx_t *c);
void api_handle_reply(tfx_req_t *r, ctx_t *c);
void api_finish_poll(tfx_req_t *r, ctx_t *c);

#endif
