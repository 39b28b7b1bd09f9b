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

int api_begin_body(tfx_req_t *r, ctx_t *c, const char *raw_name, uint64_t max)
{
    tfp_err_t err;
    int64_t cl = tfx_req_content_length(r);
    const char *dtype = tfx_req_header(r, "Tfetch-Dtype");
    const char *shape = tfx_req_header(r, "Tfetch-Shape");
    tfp_media_t ct = tfp_media_parse(tfx_req_header(r, "Content-Type"));

    if (ct == TFP_MEDIA_OTHER || ct == TFP_MEDIA_ANY || ct == TFP_MEDIA_JSON) {
        api_fail(r, c, TFP_EMEDIATYPE, "Content-Type must be application/x-safetensors, or "
                 "application/octet-stream with Tfetch-Dtype and Tfetch-Shape");
        return -1;
    }
    if (cl >= 0 && (uint64_t)cl > max) {
        api_fail(r, c, TFP_ETOOBIG, "body of %lld bytes exceeds the limit of %llu bytes",
                 (long long)cl, (unsigned long long)max);
        return -1;
    }
    c->body_kind = BODY_SAFETENSORS;
    if (c->path.kind == TFP_PATH_SHUMAI && !dtype && !shape && ct != TFP_MEDIA_SAFETENSORS)
        c->body_kind = BODY_SHUMAI;
    if (dtype || shape) {
        if (ct == TFP_MEDIA_SAFETENSORS) {
            api_fail(r, c, TFP_EBADREQ, "Tfetch-Dtype/Tfetch-Shape describe a raw body; "
                     "a safetensors body carries its own header");
            return -1;
        }
        tfp_dtype_t dt;
        int rank;
        uint64_t dims[TFP_MAX_RANK];
        uint64_t len = cl >= 0 ? (uint64_t)cl : TFP_RAW_LEN_UNKNOWN;
        if (tfp_raw_check(dtype, shape, len, &dt, &rank, dims, &err) != TFP_OK ||
            tfp_shape_nbytes(dt, rank, dims, &c->raw_nbytes, &err) != TFP_OK) {
            api_fail(r, c, err.code, "%s", err.msg);
            return -1;
        }
        if (c->raw_nbytes > max) {
            api_fail(r, c, TFP_ETOOBIG, "a %s tensor of shape [%s] is %llu bytes, above the "
                     "limit of %llu", dtype, shape, (unsigned long long)c->raw_nbytes,
                     (unsigned long long)max);
            return -1;
        }
        tfp_doc_t *doc = tfp_doc_new();
        if (!doc || tfp_doc_add(doc, raw_name, dt, rank, dims, NULL, c->raw_nbytes, &err) != TFP_OK ||
            tfp_st_encode_header(doc, &c->raw_hdr, &c->raw_hdr_len, &err) != TFP_OK) {
            tfp_doc_free(doc);
            api_fail(r, c, doc ? err.code : TFP_ENOMEM, "%s", doc ? err.msg : "out of memory");
            return -1;
        }
        tfp_doc_free(doc);
        c->body_kind = BODY_RAW;
    }
    tfx_req_accept_body(r, c->raw_hdr_len, c->body_kind == BODY_RAW ? c->raw_nbytes : max);
    return 0;
}

int api_body_doc(tfx_req_t *r, ctx_t *c, uint8_t **base_out, size_t *cap_out, size_t *len_out,
                 tfp_doc_t **doc_out)
{
    tfp_err_t err;
    size_t len;
    tfx_req_body(r, &len);
    if (c->body_kind == BODY_RAW && len != c->raw_nbytes) {
        api_fail(r, c, TFP_EUNPROC, "body is %zu bytes but Tfetch-Dtype x Tfetch-Shape need %llu",
                 len, (unsigned long long)c->raw_nbytes);
        return -1;
    }
    size_t cap;
    uint8_t *base = tfx_req_take_body(r, &cap);
    if (!base && !(base = tfx_buf_alloc(c->raw_hdr_len, &cap))) {     /* empty body */
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        return -1;
    }
    if (c->body_kind == BODY_RAW)
        memcpy(base, c->raw_hdr, c->raw_hdr_len);
    size_t doc_len = c->raw_hdr_len + len;
    tfp_doc_t *doc = NULL;
    if (c->body_kind == BODY_SHUMAI) {
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
    if (c->route == TFD_ROUTE_TENSOR_PUT) {
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

/* ---- routing ---------------------------------------------------------------------------- */

static int method_is(tfx_req_t *r, const char *m) { return strcmp(tfx_req_method(r), m) == 0; }

/* 1 if the method is in the comma-separated list, else answers 405 with Allow. */
int allow_method(tfx_req_t *r, ctx_t *c, const char *allowed)
{
    char list[64], tok[24];
    snprintf(list, sizeof list, ",%s,", allowed);
    snprintf(tok, sizeof tok, ",%.16s,", tfx_req_method(r));
    if (strstr(list, tok))
        return 1;
    tfx_req_add_header(r, "Allow", allowed);
    api_fail(r, c, TFP_EMETHOD, "%s is not allowed on %s (allowed: %s)", tfx_req_method(r),
             tfx_req_path(r), allowed);
    return 0;
}

/* Shumai: "GET /{name} fetches; POST (or any method with a body) /{name} is an exchange". */
static int shumai_has_body(tfx_req_t *r)
{
    int64_t cl = tfx_req_content_length(r);
    return cl > 0 || (cl < 0 && tfx_req_header(r, "Transfer-Encoding")) || method_is(r, "POST");
}

static tfd_route_t route_of(tfp_path_t p, tfx_req_t *r)
{
    switch (p) {
    case TFP_PATH_HEALTHZ: return TFD_ROUTE_HEALTH;
    case TFP_PATH_METRICS: return TFD_ROUTE_METRICS;
    case TFP_PATH_INFO: return TFD_ROUTE_INFO;
    case TFP_PATH_TENSORS: return TFD_ROUTE_LIST;
    case TFP_PATH_TENSOR:
        if (method_is(r, "PUT"))
            return TFD_ROUTE_TENSOR_PUT;
        if (method_is(r, "DELETE"))
            return TFD_ROUTE_TENSOR_DELETE;
        return TFD_ROUTE_TENSOR_GET;
    case TFP_PATH_CALL: return TFD_ROUTE_CALL;
    case TFP_PATH_SESSION_SELF: return TFD_ROUTE_SESSION;
    case TFP_PATH_WORKERS:
    case TFP_PATH_WORKER:
    case TFP_PATH_WORKER_REPLY: return TFD_ROUTE_WORKER;
    case TFP_PATH_WORKER_NEXT: return TFD_ROUTE_WORKER_POLL;
    case TFP_PATH_UPGRADE: return TFD_ROUTE_UPGRADE;
    case TFP_PATH_SHUMAI: return shumai_has_body(r) ? TFD_ROUTE_SHUMAI_CALL : TFD_ROUTE_SHUMAI_GET;
    default: return TFD_ROUTE_OTHER;
    }
}

/* Validates and echoes Tfetch-User and Tfetch-Request-Id. 0, or -1 after answering 400. */
static int take_ids(tfx_req_t *r, ctx_t *c)
{
    const char *rid = tfx_req_header(r, "Tfetch-Request-Id");
    const char *user = tfx_req_header(r, "Tfetch-User");
    if (rid && tfp_request_id_valid(rid)) {
        snprintf(c->request_id, sizeof c->request_id, "%s", rid);
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
    if (rid && !tfp_request_id_valid(rid)) {
        api_fail(r, c, TFP_EBADREQ, "Tfetch-Request-Id must match [A-Za-z0-9._:-]{1,128}");
        return -1;
    }
    if (user) {
        if (!tfp_user_id_valid(user)) {
            api_fail(r, c, TFP_EBADREQ, "Tfetch-User must match [A-Za-z0-9._-]{1,128}");
            return -1;
        }
        snprintf(c->user, sizeof c->user, "%s", user);
        tfx_req_add_header(r, "Tfetch-User", c->user);
    }
    return 0;
}

/* ?wait=MS for GETs, capped by max-wait. 0, or -1 after answering 400. */
static int take_wait(tfx_req_t *r, ctx_t *c, uint64_t cap)
{
    const char *wait = tfx_req_query(r, "wait");
    uint64_t ms = 0;
    if (wait && tfp_parse_u64(wait, UINT64_MAX / 2, &ms) != 0) {
        api_fail(r, c, TFP_EBADREQ, "wait must be a number of milliseconds, got '%.32s'", wait);
        return -1;
    }
    if (ms > cap)
        ms = cap;
    c->waiter.deadline_ms = ms ? tfd_now_ms() + ms : 0;
    c->poll.deadline_ms = c->waiter.deadline_ms;
    return 0;
}

static void on_begin(tfx_req_t *r, void *arg)
{
    tfd_server_t *s = arg;
    ctx_t *c = calloc(1, sizeof *c);
    if (!c) {
        tfx_respond_error(r, TFP_ENOMEM, "out of memory");
        return;
    }
    c->srv = s;
    c->start_ns = now_ns();
    c->name = c->path.name;
    c->waiter.name = c->path.name;
    c->waiter.req = r;
    c->poll.req = r;
    tfx_req_set_ctx(r, c);
    tfp_path_parse(tfx_req_path(r), &c->path);
    c->route = route_of(c->path.kind, r);
    if (take_ids(r, c) != 0)
        return;

    switch (c->path.kind) {
    case TFP_PATH_UNKNOWN:
        api_fail(r, c, TFP_ENOTFOUND, "no route for %s %s", tfx_req_method(r), tfx_req_path(r));
        return;
    case TFP_PATH_BAD_NAME:
        api_fail(r, c, TFP_EBADREQ, "names (of tensors, routes, workers, calls) must match "
                 "[A-Za-z0-9._-]{1,255} and not be '.' or '..'");
        return;
    case TFP_PATH_HEALTHZ:
    case TFP_PATH_METRICS:
    case TFP_PATH_INFO:
    case TFP_PATH_TENSORS:
        allow_method(r, c, "GET,HEAD");
        return;
    case TFP_PATH_TENSOR:
        if (!allow_method(r, c, "GET,HEAD,PUT,DELETE"))
            return;
        if (method_is(r, "PUT"))
            api_begin_put(r, c);
        else if (method_is(r, "GET") || method_is(r, "HEAD"))
            take_wait(r, c, s->cfg.max_wait_ms);
        return;
    case TFP_PATH_CALL:
        if (allow_method(r, c, "POST"))
            api_begin_call(r, c);
        return;
    case TFP_PATH_SESSION_SELF:
        allow_method(r, c, "DELETE");
        return;
    case TFP_PATH_SHUMAI:
        if (c->route == TFD_ROUTE_SHUMAI_CALL)
            api_begin_call(r, c);
        else
            allow_method(r, c, "GET,HEAD,POST");
        return;
    case TFP_PATH_WORKER_NEXT:
        if (allow_method(r, c, "GET"))
            take_wait(r, c, s->cfg.worker_lease_ms / 2);
        return;
    case TFP_PATH_WORKERS:
    case TFP_PATH_WORKER:
    case TFP_PATH_WORKER_REPLY:
        api_begin_workers(r, c);
        return;
    case TFP_PATH_UPGRADE:
        if (allow_method(r, c, "POST"))
            tfx_req_accept_body(r, 0, 4096);
        return;
    }
}

static void on_handle(tfx_req_t *r, void *arg)
{
    ctx_t *c = tfx_req_ctx(r);
    if (!c)
        return;
    switch (c->route) {
    case TFD_ROUTE_HEALTH:
        tfx_respond(r, 200, "text/plain", "ok\n", 3, NULL, NULL);
        return;
    case TFD_ROUTE_METRICS: handle_metrics(r, c); return;
    case TFD_ROUTE_INFO: handle_info(r, c); return;
    case TFD_ROUTE_LIST: api_handle_list(r, c); return;
    case TFD_ROUTE_TENSOR_GET: api_handle_get(r, c); return;
    case TFD_ROUTE_TENSOR_PUT: api_handle_put(r, c); return;
    case TFD_ROUTE_TENSOR_DELETE: api_handle_delete(r, c); return;
    case TFD_ROUTE_CALL:
    case TFD_ROUTE_SHUMAI_CALL: api_handle_call(r, c); return;
    case TFD_ROUTE_SHUMAI_GET: api_handle_shumai_get(r, c); return;
    case TFD_ROUTE_SESSION: api_handle_session_end(r, c); return;
    case TFD_ROUTE_WORKER:
    case TFD_ROUTE_WORKER_POLL: api_handle_workers(r, c); return;
    case TFD_ROUTE_UPGRADE: tfd_upgrade_handle(c->srv->upgrade, r); return;
    default:
        api_fail(r, c, TFP_ENOTFOUND, "no route for %s", tfx_req_path(r));
        return;
    }
}

static void on_finish(tfx_req_t *r, int completed, void *arg)
{
    tfd_server_t *s = arg;
    ctx_t *c = tfx_req_ctx(r);
    if (!c)
        return;
    tfd_waiters_disarm(s->waiters, &c->waiter);
    api_finish_workers(r, c);
    api_finish_call(r, c);
    if (c->reserved)
        tfd_store_unreserve(s->store, c->reserved);
    if (c->body_charged)
        atomic_fetch_sub(&s->body_bytes, c->body_charged);
    double secs = (double)(now_ns() - c->start_ns) / 1e9;
    unsigned status = tfx_req_status(r);
    uint64_t out = completed ? tfx_req_response_bytes(r) : 0;
    tfd_metrics_record(s->metrics, c->route, status, c->code, tfx_req_body_bytes(r), out, secs);
    if (!completed)
        tfd_log(LOG_INFO, "%s %s: connection closed before the response was sent (status %u, "
                "request %s)", tfx_req_method(r), tfx_req_path(r), status, c->request_id);
    tfd_log(LOG_DEBUG, "%s %s %u %llu+%llu bytes %.6fs user=%s request=%s", tfx_req_method(r),
            tfx_req_path(r), status, (unsigned long long)tfx_req_body_bytes(r),
            (unsigned long long)out, secs, c->user[0] ? c->user : "-", c->request_id);
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
    };
    tfx_handlers_t h = {on_begin, on_handle, on_finish, on_body_grow, s};
    s->upgrade = tfd_upgrade_start((int)cfg->ucx, cfg->upgrade_token_ttl_ms, &h);
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
