/* server.c - tfetchd's HTTP API v1 for tensors.
 *
 * Every request gets a context in begin (route, ids, timing), is routed when its headers are
 * in (rejections cost nothing: no body is read), handled when its body is complete, and
 * accounted in finish. PUT bodies land in one buffer sized from Content-Length; a raw
 * (octet-stream) PUT reserves room in front of the body for its safetensors header, so the
 * stored document is contiguous without copying the payload. GETs answer from the stored
 * blob itself (zero copy, reference-counted).
 *
 * Threads: handlers run on the transport's workers; the store, waiters and metrics are
 * thread-safe; a context belongs to one request.
 */
#include "config.h"
#include "daemon/server.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/store.h"
#include "daemon/waiters.h"
#include "proto/http.h"
#include "proto/ids.h"
#include "proto/jsonview.h"
#include "proto/jsonw.h"
#include "proto/raw.h"
#include "proto/safetensors.h"
#include "transports/buf.h"
#include "transports/http_server.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

struct tfd_server {
    tfd_config_t cfg;
    tfx_http_t *http;
    tfd_store_t *store;
    tfd_waiters_t *waiters;
    tfd_metrics_t *metrics;
    char id_prefix[17];
    atomic_uint_fast64_t next_id;
};

typedef struct {
    tfd_server_t *srv;
    tfd_route_t route;
    tfp_path_t path;
    uint64_t start_ns;
    tfp_status_t code;              /* the error answered, TFP_OK if none */
    char name[TFP_MAX_TENSOR_NAME + 1];
    char request_id[TFP_MAX_REQUEST_ID + 1];
    char user[TFP_MAX_USER_ID + 1];
    /* GET ?wait= */
    tfd_waiter_t waiter;
    /* PUT */
    int raw;
    uint8_t *raw_hdr;
    size_t raw_hdr_len;
    uint64_t raw_nbytes;
    uint64_t reserved;
} ctx_t;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fail(tfx_req_t *r, ctx_t *c, tfp_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(tfx_req_t *r, ctx_t *c, tfp_status_t code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->code = code;
    tfx_respond_error(r, code, "%s", msg);
}

static void respond_text(tfx_req_t *r, unsigned status, const char *ctype, char *text,
                         size_t len)
{
    tfx_respond(r, status, ctype, text, len, free, text);
}

/* ---- GET -------------------------------------------------------------------------------- */

static void serve_blob(tfx_req_t *r, ctx_t *c, tfd_blob_t *b)
{
    tfd_server_t *s = c->srv;
    tfp_media_t want = tfp_accept_pick(tfx_req_header(r, "Accept"));
    const tfp_doc_t *doc = b->doc;

    if (want == TFP_MEDIA_OCTET) {
        if (doc->n != 1) {
            fail(r, c, TFP_ENOTACCEPT, "'%s' holds %zu tensors; application/octet-stream "
                 "carries exactly one (ask for application/x-safetensors)", c->name, doc->n);
            goto unref;
        }
        const tfp_tensor_t *t = &doc->t[0];
        char shape[TFP_MAX_RANK * 21 + 1];
        tfp_raw_format_shape(t->rank, t->shape, shape, sizeof shape);
        tfx_req_add_header(r, "Tfetch-Dtype", tfp_dtype_name(t->dtype));
        tfx_req_add_header(r, "Tfetch-Shape", shape);
        tfx_req_add_header(r, "Tfetch-Name", t->name);
        tfx_respond(r, 200, "application/octet-stream", t->data, (size_t)t->nbytes,
                    tfd_blob_release, b);
        return;
    }
    if (want == TFP_MEDIA_JSON) {
        char *json;
        size_t len;
        tfp_err_t err;
        if (tfp_jsonview_render(doc, s->cfg.json_max_elems, &json, &len, &err) != TFP_OK) {
            fail(r, c, err.code, "%s", err.msg);
            goto unref;
        }
        tfd_blob_unref(b);
        respond_text(r, 200, "application/json", json, len);
        return;
    }
    if (want == TFP_MEDIA_OTHER) {
        fail(r, c, TFP_ENOTACCEPT, "Accept lists nothing tfetchd produces: use "
             "application/x-safetensors, application/octet-stream or application/json");
        goto unref;
    }
    tfx_respond(r, 200, "application/x-safetensors", b->data, b->len, tfd_blob_release, b);
    return;
unref:
    tfd_blob_unref(b);
}

static int tensor_present(void *arg)
{
    ctx_t *c = arg;
    tfd_blob_t *b = tfd_store_get(c->srv->store, c->name);
    tfd_blob_unref(b);
    return b != NULL;
}

static void handle_get(tfx_req_t *r, ctx_t *c)
{
    tfd_server_t *s = c->srv;
    tfd_blob_t *b = tfd_store_get(s->store, c->name);
    if (b) {
        serve_blob(r, c, b);
        return;
    }
    switch (c->waiter.state) {
    case TFD_WAIT_SHUTDOWN:
        fail(r, c, TFP_EBUSY, "the server is shutting down");
        return;
    case TFD_WAIT_EXPIRED:
        fail(r, c, TFP_ENOTFOUND, "no tensor named '%s' (waited %llu ms)", c->name,
             (unsigned long long)(c->waiter.deadline_ms - c->start_ns / 1000000u));
        return;
    default:
        break;
    }
    if (c->waiter.deadline_ms == 0) {
        fail(r, c, TFP_ENOTFOUND, "no tensor named '%s'", c->name);
        return;
    }
    int armed = tfd_waiters_arm(s->waiters, &c->waiter, tensor_present, c);
    if (armed == 1) {
        tfx_req_suspend(r);
    } else if (armed == 0) {
        c->waiter.state = TFD_WAIT_WOKEN;
        b = tfd_store_get(s->store, c->name);
        if (b)
            serve_blob(r, c, b);
        else                                        /* deleted again: wait once more */
            tfx_req_suspend(r), tfx_req_resume(r);
    } else if (armed == -1) {
        fail(r, c, TFP_EBUSY, "too many waiting requests (max-waiters %u)", s->cfg.max_waiters);
    } else {
        fail(r, c, TFP_EBUSY, "the server is shutting down");
    }
}

/* ---- PUT -------------------------------------------------------------------------------- */

/* Headers in: decide the body's format and size, reserve store space. */
static void begin_put(tfx_req_t *r, ctx_t *c)
{
    tfd_server_t *s = c->srv;
    tfp_err_t err;
    int64_t cl = tfx_req_content_length(r);
    const char *dtype = tfx_req_header(r, "Tfetch-Dtype");
    const char *shape = tfx_req_header(r, "Tfetch-Shape");
    tfp_media_t ct = tfp_media_parse(tfx_req_header(r, "Content-Type"));

    if (ct == TFP_MEDIA_OTHER || ct == TFP_MEDIA_JSON || ct == TFP_MEDIA_ANY) {
        fail(r, c, TFP_EMEDIATYPE, "Content-Type must be application/x-safetensors, or "
             "application/octet-stream with Tfetch-Dtype and Tfetch-Shape");
        return;
    }
    if (cl >= 0 && (uint64_t)cl > s->cfg.max_body) {
        fail(r, c, TFP_ETOOBIG, "body of %lld bytes exceeds the limit of %llu bytes",
             (long long)cl, (unsigned long long)s->cfg.max_body);
        return;
    }
    if (dtype || shape) {
        if (ct == TFP_MEDIA_SAFETENSORS) {
            fail(r, c, TFP_EBADREQ, "Tfetch-Dtype/Tfetch-Shape describe a raw body; "
                 "a safetensors body carries its own header");
            return;
        }
        if (!dtype || !shape) {
            fail(r, c, TFP_EBADREQ, "a raw body needs both Tfetch-Dtype and Tfetch-Shape");
            return;
        }
        tfp_dtype_t dt;
        int rank;
        uint64_t dims[TFP_MAX_RANK];
        uint64_t len = cl >= 0 ? (uint64_t)cl : TFP_RAW_LEN_UNKNOWN;
        if (tfp_raw_check(dtype, shape, len, &dt, &rank, dims, &err) != TFP_OK) {
            fail(r, c, err.code, "%s", err.msg);
            return;
        }
        if (tfp_shape_nbytes(dt, rank, dims, &c->raw_nbytes, &err) != TFP_OK) {
            fail(r, c, err.code, "%s", err.msg);
            return;
        }
        if (c->raw_nbytes > s->cfg.max_body) {
            fail(r, c, TFP_ETOOBIG, "a %s tensor of shape [%s] is %llu bytes, above the "
                 "limit of %llu", dtype, shape, (unsigned long long)c->raw_nbytes,
                 (unsigned long long)s->cfg.max_body);
            return;
        }
        tfp_doc_t *doc = tfp_doc_new();
        if (!doc || tfp_doc_add(doc, c->name, dt, rank, dims, NULL, c->raw_nbytes, &err) != TFP_OK ||
            tfp_st_encode_header(doc, &c->raw_hdr, &c->raw_hdr_len, &err) != TFP_OK) {
            tfp_doc_free(doc);
            fail(r, c, doc ? err.code : TFP_ENOMEM, "%s", doc ? err.msg : "out of memory");
            return;
        }
        tfp_doc_free(doc);
        c->raw = 1;
    }
    uint64_t need = c->raw ? c->raw_hdr_len + c->raw_nbytes : (cl >= 0 ? (uint64_t)cl : 0);
    if (need && tfd_store_reserve(s->store, c->name, need) != 0) {
        fail(r, c, TFP_ENOSPACE, "storing %llu bytes would exceed the store's limit of %llu "
             "bytes", (unsigned long long)need, (unsigned long long)s->cfg.store_memory);
        return;
    }
    c->reserved = need;
    tfx_req_accept_body(r, c->raw ? c->raw_hdr_len : 0, c->raw ? c->raw_nbytes : s->cfg.max_body);
}

static void handle_put(tfx_req_t *r, ctx_t *c)
{
    tfd_server_t *s = c->srv;
    tfp_err_t err;
    size_t len;
    tfx_req_body(r, &len);
    if (c->raw && len != c->raw_nbytes) {
        fail(r, c, TFP_EUNPROC, "body is %zu bytes but Tfetch-Dtype x Tfetch-Shape need %llu",
             len, (unsigned long long)c->raw_nbytes);
        return;
    }
    size_t cap;
    uint8_t *base = tfx_req_take_body(r, &cap);
    size_t headroom = c->raw ? c->raw_hdr_len : 0;
    if (!base) {                                    /* empty body */
        base = tfx_buf_alloc(headroom, &cap);
        if (!base) {
            fail(r, c, TFP_ENOMEM, "out of memory");
            return;
        }
    }
    if (c->raw)
        memcpy(base, c->raw_hdr, c->raw_hdr_len);
    size_t doc_len = headroom + len;
    tfp_doc_t *doc = NULL;
    if (tfp_st_decode(base, doc_len, NULL, &doc, &err) != TFP_OK) {
        tfx_buf_free(base, cap);
        fail(r, c, err.code, "%s", err.msg);
        return;
    }
    tfd_blob_t *b = tfd_blob_new(base, cap, base, doc_len, doc);
    if (!b) {
        fail(r, c, TFP_ENOMEM, "out of memory");
        return;
    }
    int rc = tfd_store_put(s->store, c->name, b, c->reserved);
    c->reserved = 0;
    if (rc < 0) {
        tfd_blob_unref(b);
        fail(r, c, TFP_ENOSPACE, "storing %zu bytes would exceed the store's limit of %llu "
             "bytes", doc_len, (unsigned long long)s->cfg.store_memory);
        return;
    }
    tfd_waiters_notify(s->waiters, c->name);
    tfx_respond(r, rc == 1 ? 204 : 201, NULL, "", 0, NULL, NULL);
}

/* ---- listing, info, metrics ------------------------------------------------------------- */

static void list_one(const char *name, const tfd_blob_t *b, void *arg)
{
    tfp_jw_t *w = arg;
    tfp_jw_obj_begin(w);
    tfp_jw_key(w, "name");
    tfp_jw_str(w, name);
    tfp_jw_key(w, "bytes");
    tfp_jw_uint(w, b->len);
    tfp_jw_key(w, "tensors");
    tfp_jw_arr_begin(w);
    for (size_t i = 0; i < b->doc->n; i++) {
        const tfp_tensor_t *t = &b->doc->t[i];
        tfp_jw_obj_begin(w);
        tfp_jw_key(w, "name");
        tfp_jw_str(w, t->name);
        tfp_jw_key(w, "dtype");
        tfp_jw_str(w, tfp_dtype_name(t->dtype));
        tfp_jw_key(w, "shape");
        tfp_jw_arr_begin(w);
        for (int d = 0; d < t->rank; d++)
            tfp_jw_uint(w, t->shape[d]);
        tfp_jw_arr_end(w);
        tfp_jw_obj_end(w);
    }
    tfp_jw_arr_end(w);
    tfp_jw_obj_end(w);
}

static void respond_json(tfx_req_t *r, ctx_t *c, tfp_jw_t *w)
{
    size_t len;
    char *text = tfp_jw_finish(w, &len);
    if (!text) {
        fail(r, c, TFP_ENOMEM, "out of memory");
        return;
    }
    respond_text(r, 200, "application/json", text, len);
}

static void handle_list(tfx_req_t *r, ctx_t *c)
{
    tfp_jw_t w;
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "tensors");
    tfp_jw_arr_begin(&w);
    tfd_store_each(c->srv->store, list_one, &w);
    tfp_jw_arr_end(&w);
    tfp_jw_obj_end(&w);
    respond_json(r, c, &w);
}

static void kv_uint(tfp_jw_t *w, const char *k, uint64_t v)
{
    tfp_jw_key(w, k);
    tfp_jw_uint(w, v);
}

static void handle_info(tfx_req_t *r, ctx_t *c)
{
    const tfd_config_t *cfg = &c->srv->cfg;
    uint64_t count, bytes, reserved, max;
    tfd_store_stats(c->srv->store, &count, &bytes, &reserved, &max);
    tfp_jw_t w;
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "name");
    tfp_jw_str(&w, "tfetchd");
    tfp_jw_key(&w, "version");
    tfp_jw_str(&w, PACKAGE_VERSION);
    tfp_jw_key(&w, "api");
    tfp_jw_str(&w, "v1");
    tfp_jw_key(&w, "transports");
    tfp_jw_arr_begin(&w);
    tfp_jw_str(&w, "http");
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
    tfp_jw_bool(&w, 0);
    tfp_jw_key(&w, "reason");
    tfp_jw_str(&w, "the UCX upgrade is not implemented in this version");
    tfp_jw_obj_end(&w);
    tfp_jw_key(&w, "formats");
    tfp_jw_arr_begin(&w);
    tfp_jw_str(&w, "application/x-safetensors");
    tfp_jw_str(&w, "application/octet-stream");
    tfp_jw_str(&w, "application/json");
    tfp_jw_arr_end(&w);
    tfp_jw_key(&w, "dtypes");
    tfp_jw_arr_begin(&w);
    for (int d = 0; d < TFP_DTYPE_COUNT; d++)
        tfp_jw_str(&w, tfp_dtype_name((tfp_dtype_t)d));
    tfp_jw_arr_end(&w);
    tfp_jw_key(&w, "features");
    tfp_jw_arr_begin(&w);
    tfp_jw_str(&w, "long-poll");
    tfp_jw_str(&w, "raw-body");
    tfp_jw_str(&w, "json-view");
    tfp_jw_arr_end(&w);
    tfp_jw_key(&w, "limits");
    tfp_jw_obj_begin(&w);
    kv_uint(&w, "max_body", cfg->max_body);
    kv_uint(&w, "max_header", cfg->max_header);
    kv_uint(&w, "store_memory", cfg->store_memory);
    kv_uint(&w, "max_connections", cfg->max_connections);
    kv_uint(&w, "max_per_ip", cfg->max_per_ip);
    kv_uint(&w, "idle_timeout_s", cfg->idle_timeout);
    kv_uint(&w, "json_max_elements", cfg->json_max_elems);
    kv_uint(&w, "max_wait_ms", cfg->max_wait_ms);
    kv_uint(&w, "max_waiters", cfg->max_waiters);
    kv_uint(&w, "max_rank", TFP_MAX_RANK);
    tfp_jw_obj_end(&w);
    tfp_jw_key(&w, "store");
    tfp_jw_obj_begin(&w);
    kv_uint(&w, "tensors", count);
    kv_uint(&w, "bytes", bytes);
    kv_uint(&w, "reserved", reserved);
    tfp_jw_obj_end(&w);
    tfp_jw_obj_end(&w);
    respond_json(r, c, &w);
}

static void handle_metrics(tfx_req_t *r, ctx_t *c)
{
    tfd_server_t *s = c->srv;
    tfd_gauges_t g = {0};
    tfd_store_stats(s->store, &g.stored_count, &g.stored_bytes, &g.store_reserved, &g.store_max);
    g.inflight = tfx_http_inflight(s->http);
    g.waiters = tfd_waiters_count(s->waiters);
    size_t len;
    char *text = tfd_metrics_render(s->metrics, &g, &len);
    if (!text) {
        fail(r, c, TFP_ENOMEM, "out of memory");
        return;
    }
    respond_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

/* ---- routing ---------------------------------------------------------------------------- */

static int method_is(tfx_req_t *r, const char *m) { return strcmp(tfx_req_method(r), m) == 0; }

/* 1 if the method is in the comma-separated list, else answers 405 with Allow. */
static int allow(tfx_req_t *r, ctx_t *c, const char *allowed)
{
    char list[64], tok[24];
    snprintf(list, sizeof list, ",%s,", allowed);
    snprintf(tok, sizeof tok, ",%.16s,", tfx_req_method(r));
    if (strstr(list, tok))
        return 1;
    tfx_req_add_header(r, "Allow", allowed);
    fail(r, c, TFP_EMETHOD, "%s is not allowed on %s (allowed: %s)", tfx_req_method(r),
         tfx_req_path(r), allowed);
    return 0;
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
    } else {
        uint64_t n = atomic_fetch_add(&c->srv->next_id, 1);
        snprintf(c->request_id, sizeof c->request_id, "tfd-%s-%llu", c->srv->id_prefix,
                 (unsigned long long)n);
    }
    tfx_req_add_header(r, "Tfetch-Request-Id", c->request_id);
    tfx_req_add_header(r, "Tfetch-Transport", "http");
    if (rid && !tfp_request_id_valid(rid)) {
        fail(r, c, TFP_EBADREQ, "Tfetch-Request-Id must match [A-Za-z0-9._:-]{1,128}");
        return -1;
    }
    if (user) {
        if (!tfp_user_id_valid(user)) {
            fail(r, c, TFP_EBADREQ, "Tfetch-User must match [A-Za-z0-9._-]{1,128}");
            return -1;
        }
        snprintf(c->user, sizeof c->user, "%s", user);
        tfx_req_add_header(r, "Tfetch-User", c->user);
    }
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
    c->waiter.name = c->name;
    c->waiter.req = r;
    tfx_req_set_ctx(r, c);
    c->path = tfp_path_parse(tfx_req_path(r), c->name, sizeof c->name);
    c->route = route_of(c->path, r);
    if (take_ids(r, c) != 0)
        return;

    switch (c->path) {
    case TFP_PATH_UNKNOWN:
        fail(r, c, TFP_ENOTFOUND, "no route for %s %s", tfx_req_method(r), tfx_req_path(r));
        return;
    case TFP_PATH_BAD_NAME:
        fail(r, c, TFP_EBADREQ, "tensor names must match [A-Za-z0-9._-]{1,255} "
             "(and not be '.' or '..')");
        return;
    case TFP_PATH_HEALTHZ:
    case TFP_PATH_METRICS:
    case TFP_PATH_INFO:
    case TFP_PATH_TENSORS:
        allow(r, c, "GET,HEAD");
        return;
    case TFP_PATH_TENSOR:
        if (!allow(r, c, "GET,HEAD,PUT,DELETE"))
            return;
        if (method_is(r, "PUT")) {
            begin_put(r, c);
        } else if (method_is(r, "GET") || method_is(r, "HEAD")) {
            const char *wait = tfx_req_query(r, "wait");
            uint64_t ms = 0;
            if (wait && tfp_parse_u64(wait, UINT64_MAX / 2, &ms) != 0) {
                fail(r, c, TFP_EBADREQ, "wait must be a number of milliseconds, got '%.32s'",
                     wait);
                return;
            }
            if (ms > s->cfg.max_wait_ms)
                ms = s->cfg.max_wait_ms;
            c->waiter.deadline_ms = ms ? tfd_now_ms() + ms : 0;
        }
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
    case TFD_ROUTE_LIST: handle_list(r, c); return;
    case TFD_ROUTE_TENSOR_GET: handle_get(r, c); return;
    case TFD_ROUTE_TENSOR_PUT: handle_put(r, c); return;
    case TFD_ROUTE_TENSOR_DELETE:
        if (tfd_store_delete(c->srv->store, c->name) == 0)
            tfx_respond(r, 204, NULL, "", 0, NULL, NULL);
        else
            fail(r, c, TFP_ENOTFOUND, "no tensor named '%s'", c->name);
        return;
    default:
        fail(r, c, TFP_ENOTFOUND, "no route for %s", tfx_req_path(r));
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
    if (c->reserved)
        tfd_store_unreserve(s->store, c->reserved);
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
    s->store = tfd_store_new(cfg->store_memory);
    s->waiters = tfd_waiters_new(cfg->max_waiters);
    s->metrics = tfd_metrics_new();
    if (!s->store || !s->waiters || !s->metrics) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        goto free_parts;
    }
    tfx_http_config_t hc = {
        .listen_addr = cfg->listen,
        .port = (uint16_t)cfg->port,
        .threads = cfg->threads,
        .max_connections = cfg->max_connections,
        .max_per_ip = cfg->max_per_ip,
        .idle_timeout_s = cfg->idle_timeout,
        .conn_memory = (size_t)cfg->conn_memory,
        .max_header_bytes = (size_t)cfg->max_header,
    };
    tfx_http_handlers_t h = {on_begin, on_handle, on_finish, s};
    s->http = tfx_http_start(&hc, &h, err);
    if (!s->http)
        goto free_parts;
    return s;
free_parts:
    tfd_metrics_free(s->metrics);
    tfd_waiters_free(s->waiters);
    tfd_store_free(s->store);
    free(s);
    return NULL;
}

uint16_t tfd_server_port(const tfd_server_t *s) { return tfx_http_port(s->http); }

unsigned tfd_server_drain(tfd_server_t *s, unsigned timeout_s)
{
    tfx_http_quiesce(s->http);
    tfd_waiters_shutdown(s->waiters);
    uint64_t deadline = tfd_now_ms() + (uint64_t)timeout_s * 1000u;
    unsigned n;
    while ((n = tfx_http_inflight(s->http)) > 0 && tfd_now_ms() < deadline) {
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
    tfd_waiters_free(s->waiters);
    tfd_metrics_free(s->metrics);
    tfd_store_free(s->store);
    free(s);
}
