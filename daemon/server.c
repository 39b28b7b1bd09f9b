/* server.c - tfetchd's HTTP API: routing, the helpers every handler shares, and the server's
 * life (start, tick, drain, free).
 *
 * Every request gets a context in begin (route, ids, timing), is routed when its headers are
 * in (rejections cost nothing: no body is read), handled when its body is complete (by the
 * api_*.c handlers), and accounted in finish. Request bodies are charged before their buffers
 * grow: PUTs against the store's limit, everything else against body-memory.
 *
 * Threads: handlers run on the transport's workers; tick and drain on the main thread.
 */
#include "config.h"
#include "daemon/server.h"
#include "daemon/api.h"
#include "daemon/log.h"
#include "daemon/upgrade.h"
#include "proto/raw.h"
#include "proto/safetensors.h"
#include "proto/shumai.h"
#include "transports/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- shared helpers --------------------------------------------------------------------- */

void api_fail(tfx_req_t *r, ctx_t *c, tfp_status_t code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->code = code;
    tfx_respond_error(r, code, "%s", msg);
}

void api_respond_text(tfx_req_t *r, unsigned status, const char *ctype, char *text, size_t len)
{
    tfx_respond(r, status, ctype, text, len, free, text);
}

void api_respond_json(tfx_req_t *r, ctx_t *c, tfp_jw_t *w)
{
    size_t len;
    char *text = tfp_jw_finish(w, &len);
    if (!text) {
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        return;
    }
    api_respond_text(r, 200, "application/json", text, len);
}

void api_respond_blob(tfx_req_t *r, unsigned status, const char *ctype, tfd_blob_t *b)
{
    tfx_respond(r, status, ctype, b->data, b->len, tfd_blob_release, b);
}

tfd_blob_t *api_text_blob(char *text, size_t len)
{
    size_t cap;
    uint8_t *buf = tfx_buf_alloc(len, &cap);
    if (!buf) {
        free(text);
        return NULL;
    }
    memcpy(buf, text, len);
    free(text);
    return tfd_blob_new(buf, cap, buf, len, NULL);
}

tfd_blob_t *api_encode_blob(tfp_doc_t *doc, tfp_err_t *err)
{
    uint8_t *hdr;
    size_t hdr_len;
    if (tfp_st_encode_header(doc, &hdr, &hdr_len, err) != TFP_OK)
        return NULL;
    uint64_t total = hdr_len + tfp_doc_data_bytes(doc);
    size_t cap;
    uint8_t *buf = total <= SIZE_MAX ? tfx_buf_alloc((size_t)total, &cap) : NULL;
    if (!buf) {
        free(hdr);
        tfp_err_set(err, TFP_ENOMEM, "out of memory for a %llu-byte answer",
                    (unsigned long long)total);
        return NULL;
    }
    memcpy(buf, hdr, hdr_len);
    free(hdr);
    for (size_t i = 0; i < doc->n; i++)     /* offsets follow doc order from 0 */
        if (doc->t[i].nbytes)
            memcpy(buf + hdr_len + doc->t[i].offset, doc->t[i].data, (size_t)doc->t[i].nbytes);
    tfp_doc_t *index = NULL;
    if (tfp_st_decode(buf, (size_t)total, NULL, &index, err) != TFP_OK) {
        tfx_buf_free(buf, cap);                 /* cannot happen: we just encoded it */
        return NULL;
    }
    tfd_blob_t *b = tfd_blob_new(buf, cap, buf, (size_t)total, index);
    if (!b)
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
    return b;
}

/* ---- bodies ----------------------------------------------------------------------------- */

int api_begin_doc(tfx_req_t *r, ctx_t *c, const char *raw_name, uint64_t max)
{
    const tfp_op_body_t *body = &c->op->body;
    if (body->kind == TFP_BODY_RAW) {
        tfp_err_t err;
        tfp_doc_t *doc = tfp_doc_new();
        if (!doc || tfp_doc_add(doc, raw_name, body->dtype, body->rank, body->shape, NULL,
                                body->nbytes, &err) != TFP_OK ||
            tfp_st_encode_header(doc, &c->raw_hdr, &c->raw_hdr_len, &err) != TFP_OK) {
            tfp_doc_free(doc);
            api_fail(r, c, doc ? err.code : TFP_ENOMEM, "%s", doc ? err.msg : "out of memory");
            return -1;
        }
        tfp_doc_free(doc);
    }
    tfx_req_accept_body(r, c->raw_hdr_len, body->kind == TFP_BODY_RAW ? body->nbytes : max);
    return 0;
}

int api_body_doc(tfx_req_t *r, ctx_t *c, uint8_t **base_out, size_t *cap_out, size_t *len_out,
                 tfp_doc_t **doc_out)
{
    tfp_err_t err;
    size_t len;
    tfx_req_body(r, &len);
    tfp_body_kind_t kind = c->op->body.kind;
    if (kind == TFP_BODY_RAW && len != c->op->body.nbytes) {
        api_fail(r, c, TFP_EUNPROC, "body is %zu bytes but Tfetch-Dtype x Tfetch-Shape need %llu",
                 len, (unsigned long long)c->op->body.nbytes);
        return -1;
    }
    size_t cap;
    uint8_t *base = tfx_req_take_body(r, &cap);
    if (!base && !(base = tfx_buf_alloc(c->raw_hdr_len, &cap))) {     /* empty body */
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        return -1;
    }
    if (kind == TFP_BODY_RAW)
        memcpy(base, c->raw_hdr, c->raw_hdr_len);
    size_t doc_len = c->raw_hdr_len + len;
    tfp_doc_t *doc = NULL;
    if (kind == TFP_BODY_SHUMAI) {
        tfp_shumai_msg_t msg;
        if (tfp_shumai_decode(base, doc_len, 0, &msg, &err) != TFP_OK)
            goto bad;
        doc = msg.doc;
        c->shumai_provenance = msg.provenance;
        c->shumai_flags = msg.flags;
        char user[TFP_SHUMAI_USER_SIZE];
        if (tfp_shumai_provenance_to_user(msg.provenance, user))
            snprintf(c->user, sizeof c->user, "%s", user);   /* Shumai's id is the user id */
    } else if (tfp_st_decode(base, doc_len, NULL, &doc, &err) != TFP_OK) {
        goto bad;
    }
    *base_out = base;
    *cap_out = cap;
    *len_out = doc_len;
    *doc_out = doc;
    return 0;
bad:
    tfx_buf_free(base, cap);
    api_fail(r, c, err.code, "%s", err.msg);
    return -1;
}

/* ---- info, metrics ---------------------------------------------------------------------- */

static void kv_uint(tfp_jw_t *w, const char *k, uint64_t v)
{
    tfp_jw_key(w, k);
    tfp_jw_uint(w, v);
}

static void kv_strs(tfp_jw_t *w, const char *k, const char *const *v, size_t n)
{
    tfp_jw_key(w, k);
    tfp_jw_arr_begin(w);
    for (size_t i = 0; i < n; i++)
        tfp_jw_str(w, v[i]);
    tfp_jw_arr_end(w);
}

static void info_route(const char *name, const tfd_route_ops_t *ops, void *arg)
{
    tfp_jw_t *w = arg;
    tfp_jw_obj_begin(w);
    tfp_jw_key(w, "name");
    tfp_jw_str(w, name);
    tfp_jw_key(w, "kind");
    tfp_jw_str(w, ops->kind ? ops->kind : "");
    tfp_jw_key(w, "stateful");
    tfp_jw_bool(w, !ops->stateless);
    tfp_jw_obj_end(w);
}

static void handle_info(tfx_req_t *r, ctx_t *c)
{
    tfd_server_t *s = c->srv;
    const tfd_config_t *cfg = &s->cfg;
    tfd_store_stats_t st;
    tfd_store_stats(s->store, &st);
    tfp_jw_t w;
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "name");
    tfp_jw_str(&w, "tfetchd");
    tfp_jw_key(&w, "version");
    tfp_jw_str(&w, PACKAGE_VERSION);
    tfp_jw_key(&w, "api");
    tfp_jw_str(&w, "v1");
    const char *why;
    int ucx = tfd_upgrade_enabled(s->upgrade, &why);
    tfp_jw_key(&w, "transports");
    tfp_jw_arr_begin(&w);
    tfp_jw_str(&w, "http");
    if (ucx)
        tfp_jw_str(&w, "ucx");
    tfp_jw_arr_end(&w);
    tfp_jw_key(&w, "ucx");
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "compiled");
#ifdef HAVE_UCX
    tfp_jw_bool(&w, 1);
#else
    tfp_jw_bool(&w, 0);
#endif
    tfp_jw_key(&w, "enabled");
    tfp_jw_bool(&w, ucx);
    if (!ucx) {
        tfp_jw_key(&w, "reason");
        tfp_jw_str(&w, why);
    }
    tfp_jw_obj_end(&w);
    static const char *const formats[] = {"application/x-safetensors",
                                          "application/octet-stream", "application/json",
                                          "shumai"};
    kv_strs(&w, "formats", formats, sizeof formats / sizeof formats[0]);
    tfp_jw_key(&w, "dtypes");
    tfp_jw_arr_begin(&w);
    for (int d = 0; d < TFP_DTYPE_COUNT; d++)
        tfp_jw_str(&w, tfp_dtype_name((tfp_dtype_t)d));
    tfp_jw_arr_end(&w);
    static const char *const features[] = {"long-poll", "raw-body", "json-view", "exchange",
                                           "sessions", "idempotent-retry", "workers",
                                           "shumai"};
    kv_strs(&w, "features", features, sizeof features / sizeof features[0]);
    tfp_jw_key(&w, "routes");
    tfp_jw_arr_begin(&w);
    tfd_routes_each(s->routes, info_route, &w);
    tfp_jw_arr_end(&w);
    tfp_jw_key(&w, "limits");
    tfp_jw_obj_begin(&w);
    kv_uint(&w, "max_body", cfg->max_body);
    kv_uint(&w, "max_header", cfg->max_header);
    kv_uint(&w, "store_memory", cfg->store_memory);
    kv_uint(&w, "body_memory", cfg->body_memory);
    kv_uint(&w, "max_connections", cfg->max_connections);
    kv_uint(&w, "max_per_ip", cfg->max_per_ip);
    kv_uint(&w, "idle_timeout_s", cfg->idle_timeout);
    kv_uint(&w, "json_max_elements", cfg->json_max_elems);
    kv_uint(&w, "max_wait_ms", cfg->max_wait_ms);
    kv_uint(&w, "max_waiters", cfg->max_waiters);
    kv_uint(&w, "max_rank", TFP_MAX_RANK);
    kv_uint(&w, "session_ttl_s", cfg->session_ttl);
    kv_uint(&w, "max_sessions", cfg->max_sessions);
    kv_uint(&w, "session_user_memory", cfg->session_user_memory);
    kv_uint(&w, "session_memory", cfg->session_memory);
    kv_uint(&w, "replay_window_s", cfg->replay_window);
    kv_uint(&w, "worker_lease_ms", cfg->worker_lease_ms);
    kv_uint(&w, "upgrade_token_ttl_ms", cfg->upgrade_token_ttl_ms);
    tfp_jw_obj_end(&w);
    tfp_jw_key(&w, "store");
    tfp_jw_obj_begin(&w);
    kv_uint(&w, "tensors", st.count);
    kv_uint(&w, "bytes", st.bytes);
    kv_uint(&w, "retired", st.retired);
    kv_uint(&w, "reserved", st.reserved);
    tfp_jw_obj_end(&w);
    tfp_jw_obj_end(&w);
    api_respond_json(r, c, &w);
}

static void handle_metrics(tfx_req_t *r, ctx_t *c)
{
    tfd_server_t *s = c->srv;
    tfd_gauges_t g = {0};
    tfd_store_stats_t st;
    tfd_store_stats(s->store, &st);
    g.stored_count = st.count;
    g.stored_bytes = st.bytes;
    g.store_retired = st.retired;
    g.store_reserved = st.reserved;
    g.store_max = st.max_bytes;
    g.inflight = tfx_http_inflight(s->http);
    g.waiters = tfd_waiters_count(s->waiters);
    g.body_bytes = atomic_load(&s->body_bytes);
    tfd_sessions_stats(s->sessions, &g.sessions);
    tfd_replay_stats(s->replay, &g.replay_entries, &g.replay_bytes, &g.replay_hits);
    g.workers = tfd_workers_count(s->workers);
    tfd_upgrade_stats_t us;
    tfd_upgrade_stats(s->upgrade, &us);
    g.ucx_enabled = tfd_upgrade_enabled(s->upgrade, NULL);
    g.upgrades_issued = us.issued;
    g.hellos_accepted = us.accepted;
    g.hellos_refused = us.refused;
    g.ucx_dropped = us.dropped;
    g.ucx_requests = us.requests;
    size_t len;
    char *text = tfd_metrics_render(s->metrics, &g, &len);
    if (!text) {
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        return;
    }
    api_respond_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

/* ---- the endpoint table ------------------------------------------------------------------ */

/* What a row's body field allows. */
enum {
    EP_DOC = 1,                     /* a document (safetensors, raw, Shumai) up to max-body */
    EP_JSON = 2,                    /* a JSON document up to the row's json_max */
    EP_TO_STORE = 4                 /* the document is charged to the store (a raw tensor
                                     * takes the operation's name), not to body-memory */
};

/* One operation's endpoint: its name in the metrics and logs, what body it takes, and its
 * handlers (begin: the body is accepted, before it arrives; handle: the body is in; finish:
 * the request is over). begin and finish may be NULL. */
struct tfd_endpoint {
    tfd_route_t metric;
    unsigned body;                  /* EP_* */
    uint32_t json_max;
    void (*begin)(tfx_req_t *r, ctx_t *c);
    void (*handle)(tfx_req_t *r, ctx_t *c);
    void (*finish)(tfx_req_t *r, ctx_t *c);
};

#define MAX_REGISTRATION (64u << 10)
#define MAX_UPGRADE 4096u

static void begin_wait(ctx_t *c, uint64_t cap)
{
    uint64_t ms = c->op->wait_ms < cap ? c->op->wait_ms : cap;
    c->waiter.deadline_ms = ms ? tfd_now_ms() + ms : 0;
    c->poll.deadline_ms = c->waiter.deadline_ms;
}

static void begin_get(tfx_req_t *r, ctx_t *c)
{
    (void)r;
    begin_wait(c, c->srv->cfg.max_wait_ms);
}

static void begin_poll(tfx_req_t *r, ctx_t *c)
{
    (void)r;
    begin_wait(c, c->srv->cfg.worker_lease_ms / 2);
}

static void handle_none(tfx_req_t *r, ctx_t *c)
{
    api_fail(r, c, TFP_ENOTFOUND, "no such operation");
}

static void handle_health(tfx_req_t *r, ctx_t *c)
{
    (void)c;
    tfx_respond(r, 200, "text/plain", "ok\n", 3, NULL, NULL);
}

static void handle_upgrade(tfx_req_t *r, ctx_t *c)
{
    tfd_upgrade_handle(c->srv->upgrade, r);
}

static const struct tfd_endpoint endpoints[TFP_OP_COUNT] = {
    [TFP_OP_NONE] = {TFD_ROUTE_OTHER, 0, 0, NULL, handle_none, NULL},
    [TFP_OP_HEALTH] = {TFD_ROUTE_HEALTH, 0, 0, NULL, handle_health, NULL},
    [TFP_OP_METRICS] = {TFD_ROUTE_METRICS, 0, 0, NULL, handle_metrics, NULL},
    [TFP_OP_INFO] = {TFD_ROUTE_INFO, 0, 0, NULL, handle_info, NULL},
    [TFP_OP_TENSOR_LIST] = {TFD_ROUTE_LIST, 0, 0, NULL, api_handle_list, NULL},
    [TFP_OP_TENSOR_GET] = {TFD_ROUTE_TENSOR_GET, 0, 0, begin_get, api_handle_get,
                           api_finish_get},
    [TFP_OP_TENSOR_PUT] = {TFD_ROUTE_TENSOR_PUT, EP_DOC | EP_TO_STORE, 0, api_begin_put,
                           api_handle_put, NULL},
    [TFP_OP_TENSOR_DELETE] = {TFD_ROUTE_TENSOR_DELETE, 0, 0, NULL, api_handle_delete, NULL},
    [TFP_OP_CALL] = {TFD_ROUTE_CALL, EP_DOC, 0, NULL, api_handle_call, api_finish_call},
    [TFP_OP_SESSION_END] = {TFD_ROUTE_SESSION, 0, 0, NULL, api_handle_session_end, NULL},
    [TFP_OP_WORKER_REGISTER] = {TFD_ROUTE_WORKER, EP_JSON, MAX_REGISTRATION, NULL,
                                api_handle_register, NULL},
    [TFP_OP_WORKER_LEAVE] = {TFD_ROUTE_WORKER, 0, 0, NULL, api_handle_leave, NULL},
    [TFP_OP_WORKER_POLL] = {TFD_ROUTE_WORKER_POLL, 0, 0, begin_poll, api_handle_poll,
                            api_finish_poll},
    [TFP_OP_WORKER_REPLY] = {TFD_ROUTE_WORKER, EP_DOC | EP_JSON, MAX_REGISTRATION, NULL,
                             api_handle_reply, NULL},
    [TFP_OP_UPGRADE] = {TFD_ROUTE_UPGRADE, EP_JSON, MAX_UPGRADE, NULL, handle_upgrade, NULL},
    [TFP_OP_SHUMAI_GET] = {TFD_ROUTE_SHUMAI_GET, 0, 0, NULL, api_handle_shumai_get, NULL},
    [TFP_OP_SHUMAI_CALL] = {TFD_ROUTE_SHUMAI_CALL, EP_DOC, 0, NULL, api_handle_call,
                            api_finish_call},
};

/* ---- the transports' handlers ------------------------------------------------------------ */

/* Approves a body buffer growing to total bytes. */
static tfp_status_t on_body_grow(tfx_req_t *r, uint64_t total, void *arg)
{
    tfd_server_t *s = arg;
    ctx_t *c = tfx_req_ctx(r);
    if (!c)
        return TFP_EINTERNAL;
    if (total <= c->charged)
        return TFP_OK;
    uint64_t delta = total - c->charged;
    if (c->ep->body & EP_TO_STORE) {
        if (tfd_store_reserve(s->store, delta) != 0)
            return TFP_ENOSPACE;
        c->reserved += delta;
    } else {
        uint64_t was = atomic_fetch_add(&s->body_bytes, delta);
        if (was + delta > s->cfg.body_memory) {
            atomic_fetch_sub(&s->body_bytes, delta);
            return TFP_EBUSY;
        }
        c->body_charged += delta;
    }
    c->charged = total;
    return TFP_OK;
}

/* Takes the user and request ids (making one up when the client chose none) and echoes them
 * with the transport, as response headers. */
static void take_ids(tfx_req_t *r, ctx_t *c)
{
    const tfp_op_who_t *who = &c->op->who;
    if (who->request_id[0]) {
        snprintf(c->request_id, sizeof c->request_id, "%s", who->request_id);
        c->request_id_from_client = 1;
    } else {
        uint64_t n = atomic_fetch_add(&c->srv->next_id, 1);
        snprintf(c->request_id, sizeof c->request_id, "tfd-%s-%llu", c->srv->id_prefix,
                 (unsigned long long)n);
    }
    tfx_req_add_header(r, "Tfetch-Request-Id", c->request_id);
    tfx_req_add_header(r, "Tfetch-Transport", tfx_req_transport(r));
    if (tfd_upgrade_enabled(c->srv->upgrade, NULL))
        tfx_req_add_header(r, "Tfetch-Upgrade", "ucx");
    if (who->user[0]) {
        snprintf(c->user, sizeof c->user, "%s", who->user);
        tfx_req_add_header(r, "Tfetch-User", c->user);
    }
}

/* Accepts the body the operation describes, as its endpoint allows. 0, or -1 after
 * answering. */
static int begin_body(tfx_req_t *r, ctx_t *c)
{
    switch (c->op->body.kind) {
    case TFP_BODY_NONE:
        return 0;
    case TFP_BODY_JSON:
        if (c->ep->body & EP_JSON)
            tfx_req_accept_body(r, 0, c->ep->json_max);
        return 0;
    default:
        if (!(c->ep->body & EP_DOC))
            return 0;
        return api_begin_doc(r, c, (c->ep->body & EP_TO_STORE) ? c->name : "tensor",
                             c->srv->cfg.max_body);
    }
}

static void on_begin(tfx_req_t *r, void *arg)
{
    tfd_server_t *s = arg;
    ctx_t *c = calloc(1, sizeof *c);
    if (!c) {
        tfx_respond_error(r, TFP_ENOMEM, "out of memory");
        return;
    }
    const tfp_op_t *op = tfx_req_op(r);
    c->srv = s;
    c->op = op;
    c->ep = &endpoints[(unsigned)op->kind < TFP_OP_COUNT ? op->kind : TFP_OP_NONE];
    c->start_ns = now_ns();
    c->name = op->name;
    c->waiter.name = op->name;
    c->waiter.req = r;
    c->poll.req = r;
    tfx_req_set_ctx(r, c);
    take_ids(r, c);
    const tfp_op_err_t *e = tfx_req_op_error(r);
    if (e->code != TFP_OK) {
        api_fail(r, c, e->code, "%s", e->msg);
        return;
    }
    if (begin_body(r, c) != 0)
        return;
    if (c->ep->begin)
        c->ep->begin(r, c);
}

static void on_handle(tfx_req_t *r, void *arg)
{
    (void)arg;
    ctx_t *c = tfx_req_ctx(r);
    if (c)
        c->ep->handle(r, c);
}

static void on_finish(tfx_req_t *r, int completed, void *arg)
{
    tfd_server_t *s = arg;
    ctx_t *c = tfx_req_ctx(r);
    if (!c)
        return;
    if (c->ep->finish)
        c->ep->finish(r, c);
    if (c->reserved)
        tfd_store_unreserve(s->store, c->reserved);
    if (c->body_charged)
        atomic_fetch_sub(&s->body_bytes, c->body_charged);
    double secs = (double)(now_ns() - c->start_ns) / 1e9;
    unsigned status = tfx_req_status(r);
    uint64_t out = completed ? tfx_req_response_bytes(r) : 0;
    const char *what = tfp_op_name(c->op->kind);
    tfd_metrics_record(s->metrics, c->ep->metric, status, c->code, tfx_req_body_bytes(r), out,
                       secs);
    if (!completed)
        tfd_log(LOG_INFO, "%s %s '%s': connection closed before the response was sent (status "
                "%u, request %s)", tfx_req_transport(r), what, c->name, status, c->request_id);
    tfd_log(LOG_DEBUG, "%s %s '%s' %u %llu+%llu bytes %.6fs user=%s request=%s",
            tfx_req_transport(r), what, c->name, status,
            (unsigned long long)tfx_req_body_bytes(r), (unsigned long long)out, secs,
            c->user[0] ? c->user : "-", c->request_id);
    free(c->raw_hdr);
    free(c);
    tfx_req_set_ctx(r, NULL);
}

/* ---- lifecycle -------------------------------------------------------------------------- */

tfd_server_t *tfd_server_start(const tfd_config_t *cfg, tfp_err_t *err)
{
    tfd_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
        rnd = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32);
    snprintf(s->id_prefix, sizeof s->id_prefix, "%016llx", (unsigned long long)rnd);
    atomic_init(&s->next_id, 1);
    atomic_init(&s->body_bytes, 0);
    tfd_sessions_limits_t sl = {cfg->session_ttl, cfg->max_sessions, cfg->session_user_memory,
                                cfg->session_memory};
    tfd_replay_limits_t rl = {cfg->replay_window, cfg->replay_entries, cfg->replay_memory};
    tfd_workers_limits_t wl = {cfg->worker_lease_ms, cfg->max_workers, cfg->worker_queue};
    s->store = tfd_store_new(cfg->store_memory);
    s->waiters = tfd_waiters_new(cfg->max_waiters);
    s->metrics = tfd_metrics_new();
    s->routes = tfd_routes_new();
    s->sessions = tfd_sessions_new(&sl);
    s->replay = tfd_replay_new(&rl);
    s->workers = s->routes ? tfd_workers_new(s->routes, &wl) : NULL;
    if (!s->store || !s->waiters || !s->metrics || !s->routes || !s->sessions || !s->replay ||
        !s->workers || tfd_builtin_routes_add(s->routes) != 0) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        goto free_parts;
    }
    if (!(s->plugins = tfd_plugins_start(s->routes, cfg, err)))
        goto free_parts;
    tfx_http_config_t hc = {
        .listen_addr = cfg->listen,
        .port = (uint16_t)cfg->port,
        .threads = cfg->threads,
        .max_connections = cfg->max_connections,
        .max_per_ip = cfg->max_per_ip,
        .idle_timeout_s = cfg->idle_timeout,
        .conn_memory = (size_t)cfg->conn_memory,
        .max_header_bytes = (size_t)cfg->max_header,
        .min_upload_rate = cfg->min_upload_rate,
        .max_body = cfg->max_body,
    };
    tfx_handlers_t h = {on_begin, on_handle, on_finish, on_body_grow, s};
    s->upgrade = tfd_upgrade_start((int)cfg->ucx, cfg->upgrade_token_ttl_ms, cfg->max_body, &h);
    if (!s->upgrade) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        goto free_parts;
    }
    s->http = tfx_http_start(&hc, &h, err);
    if (!s->http)
        goto free_parts;
    return s;
free_parts:
    tfd_upgrade_free(s->upgrade);
    tfd_workers_free(s->workers);
    tfd_replay_free(s->replay);
    tfd_sessions_free(s->sessions);
    tfd_plugins_free(s->plugins);       /* after the sessions: their states use its code */
    tfd_routes_free(s->routes);
    tfd_metrics_free(s->metrics);
    tfd_waiters_free(s->waiters);
    tfd_store_free(s->store);
    free(s);
    return NULL;
}

uint16_t tfd_server_port(const tfd_server_t *s) { return tfx_http_port(s->http); }

void tfd_server_tick(tfd_server_t *s)
{
    tfd_workers_tick(s->workers);
    tfd_sessions_sweep(s->sessions);
    tfd_replay_sweep(s->replay);
}

unsigned tfd_server_drain(tfd_server_t *s, unsigned timeout_s, void (*tick)(void))
{
    tfx_http_quiesce(s->http);
    tfd_upgrade_quiesce(s->upgrade);
    tfd_waiters_shutdown(s->waiters);
    tfd_workers_shutdown(s->workers);
    tfd_replay_wake_all(s->replay);
    uint64_t start = tfd_now_ms();
    uint64_t deadline = start + (uint64_t)timeout_s * 1000u;
    uint64_t idle_since = 0;
    unsigned n;
    /* Wait for requests in flight; then give keep-alive connections (told "Connection:
     * close" from now on) a moment to go before closing whatever is left. UCX requests get
     * at most 2 s: an answer to a client that died never completes (no peer failure
     * detection on one host), and the transport gives those up when it stops. */
    for (;;) {
        uint64_t now = tfd_now_ms();
        n = tfx_http_inflight(s->http);
        if (now - start < 2000)
            n += tfd_upgrade_inflight(s->upgrade);
        if (n == 0 && tfx_http_connections(s->http) == 0)
            break;
        if (n == 0 && !idle_since)
            idle_since = now;
        if (n != 0)
            idle_since = 0;
        if ((idle_since && now - idle_since >= 1000) || now >= deadline)
            break;
        if (tick)
            tick();
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return n;
}

void tfd_server_free(tfd_server_t *s)
{
    if (!s)
        return;
    tfx_http_stop(s->http);
    tfd_upgrade_free(s->upgrade);
    tfd_workers_free(s->workers);
    tfd_replay_free(s->replay);
    tfd_sessions_free(s->sessions);
    tfd_plugins_free(s->plugins);       /* after the sessions: their states use its code */
    tfd_routes_free(s->routes);
    tfd_waiters_free(s->waiters);
    tfd_metrics_free(s->metrics);
    tfd_store_free(s->store);
    free(s);
}
