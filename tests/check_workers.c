/* check_workers.c - the workers suite: daemon/workers.c's worker route and its cancel, and
 * the router cancelling a worker call whose caller went away. tests/fuzz's fuzz_request
 * found it: the call was freed while the worker still held it, and the worker's next poll,
 * its answer or its departure then read or wrote the freed call.
 *
 * The router case runs requests through daemon/router.c's real handlers over the real parts,
 * with a minimal in-memory transport (transports/req_int.h) in place of MHD. Single-threaded.
 */
#include "config.h"
#include "tests/suites.h"
#include "daemon/api.h"
#include "daemon/router.h"
#include "daemon/upgrade.h"
#include "proto/jsonread.h"
#include "proto/safetensors.h"
#include "transports/buf.h"
#include "transports/req_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tfd_workers_limits_t limits = {60000, 4, 4};

/* One F32 [2] tensor "w" as a safetensors document (malloc'd, *len bytes). */
static uint8_t *one_tensor(size_t *len)
{
    static const float v[2] = {1, 2};
    static const uint64_t shape[1] = {2};
    tfp_doc_t *doc = tfp_doc_new();
    tfp_err_t err;
    uint8_t *buf;
    ck_assert_ptr_nonnull(doc);
    ck_assert_int_eq(tfp_doc_add(doc, "w", TFP_F32, 1, shape, v, sizeof v, &err), TFP_OK);
    ck_assert_int_eq(tfp_st_encode(doc, &buf, len, &err), TFP_OK);
    tfp_doc_free(doc);
    return buf;
}

/* The secret of the worker one_worker or the register request made (tfd_workers_* check it). */
static char sec[TFD_WORKER_SECRET_SIZE];

/* A worker registered for route "double" on fresh routes; its id in id, its secret in sec. */
static tfd_workers_t *one_worker(tfd_routes_t **rs, char id[TFD_WORKER_ID_SIZE])
{
    const char *routes[] = {"double"};
    tfp_err_t err;
    *rs = tfd_routes_new();
    ck_assert_ptr_nonnull(*rs);
    tfd_workers_t *ws = tfd_workers_new(*rs, &limits);
    ck_assert_ptr_nonnull(ws);
    ck_assert_int_eq(tfd_workers_register(ws, routes, 1, id, sec, &err), TFP_OK);
    return ws;
}

static int finished;

static void on_finish(tfd_call_t *c, void *arg)
{
    (void)c;
    (void)arg;
    finished++;
}

/* A call to "double" started on the worker route: PENDING. */
static tfd_call_t *start_call(tfd_routes_t *rs, tfd_route_ops_t *ops, const uint8_t *doc,
                              size_t len)
{
    ck_assert_int_eq(tfd_routes_find(rs, "double", ops), 0);
    ck_assert_ptr_nonnull(ops->cancel);
    tfd_call_t *call = tfd_call_new("double", "", "r-1", NULL);
    ck_assert_ptr_nonnull(call);
    call->in_bytes = doc;
    call->in_len = len;
    call->on_finish = on_finish;
    ck_assert_int_eq(ops->start(ops->arg, call), TFD_CALL_PENDING);
    return call;
}

START_TEST(cancel_forgets_a_queued_call)
{
    char id[TFD_WORKER_ID_SIZE];
    tfd_routes_t *rs;
    tfd_workers_t *ws = one_worker(&rs, id);
    tfd_route_ops_t ops;
    size_t len;
    uint8_t *doc = one_tensor(&len);
    tfd_call_t *call = start_call(rs, &ops, doc, len);
    finished = 0;
    ops.cancel(ops.arg, call);
    tfd_call_free(call);
    /* The worker's next poll finds nothing to do (it used to hand out the freed call). */
    tfd_worker_poll_t p = {0};
    ck_assert_int_eq(tfd_workers_poll(ws, id, sec, &p), 1);
    ck_assert_int_eq(p.state, TFD_POLL_EMPTY);
    tfd_workers_poll_done(ws, &p);
    /* Its queue has room again: max_queue more calls fit. */
    tfd_call_t *calls[4];
    for (int i = 0; i < 4; i++)
        calls[i] = start_call(rs, &ops, doc, len);
    for (int i = 0; i < 4; i++) {
        ops.cancel(ops.arg, calls[i]);
        tfd_call_free(calls[i]);
    }
    /* Dropping the worker has no call left to fail (it used to finish the freed ones). */
    tfd_workers_free(ws);
    ck_assert_int_eq(finished, 0);
    tfd_routes_free(rs);
    free(doc);
}
END_TEST

START_TEST(cancel_forgets_a_call_in_the_workers_hands)
{
    char id[TFD_WORKER_ID_SIZE];
    tfd_routes_t *rs;
    tfd_workers_t *ws = one_worker(&rs, id);
    tfd_route_ops_t ops;
    size_t len;
    uint8_t *doc = one_tensor(&len);
    tfd_call_t *call = start_call(rs, &ops, doc, len);
    tfd_worker_poll_t p = {0};
    ck_assert_int_eq(tfd_workers_poll(ws, id, sec, &p), 1);
    ck_assert_int_eq(p.state, TFD_POLL_GOT);
    ck_assert_uint_eq(p.len, len);
    char call_id[TFD_CALL_ID_SIZE];
    memcpy(call_id, p.call_id, sizeof call_id);
    tfd_workers_poll_done(ws, &p);
    finished = 0;
    ops.cancel(ops.arg, call);
    tfd_call_free(call);
    /* The worker's answer finds no call in hand (it used to fill in the freed call). */
    size_t cap;
    uint8_t *base = tfx_buf_alloc(len, &cap);
    ck_assert_ptr_nonnull(base);
    memcpy(base, doc, len);
    tfp_doc_t *out;
    tfp_err_t err;
    ck_assert_int_eq(tfp_st_decode(base, len, NULL, &out, &err), TFP_OK);
    ck_assert_int_eq(tfd_workers_reply(ws, id, sec, call_id, TFP_OK, NULL, out, base, cap), -1);
    ck_assert_int_eq(finished, 0);
    /* Cancelling a call that has finished (its worker left) is harmless. */
    call = start_call(rs, &ops, doc, len);
    ck_assert_int_eq(tfd_workers_unregister(ws, id, sec), 0);
    ck_assert_int_eq(finished, 1);
    ops.cancel(ops.arg, call);
    tfd_call_free(call);
    tfd_workers_free(ws);
    tfd_routes_free(rs);
    free(doc);
}
END_TEST

/* ---- through the router --------------------------------------------------------------- */

typedef struct {
    tfx_req_t base;                         /* first: req_int.h */
    int woken;
} t_req_t;

static char last_body[512];                 /* the last answer's body, NUL-terminated */

static void t_respond(tfx_req_t *r, unsigned status, const char *ctype, const void *body,
                      size_t len, void (*release)(void *), void *arg)
{
    (void)r;
    (void)status;
    (void)ctype;
    snprintf(last_body, sizeof last_body, "%.*s", (int)len, (const char *)body);
    if (release)
        release(arg);
}

static void t_respond_error(tfx_req_t *r, tfp_status_t code, const char *msg)
{
    (void)r;
    (void)code;
    (void)msg;
}

static void t_resume(tfx_req_t *r) { ((t_req_t *)r)->woken = 1; }

static const tfx_req_ops_t t_ops = {"http", t_respond, t_respond_error, t_resume, NULL, NULL, 0, 0};

typedef struct {
    tfd_config_t cfg;
    tfd_api_t api;
    tfd_router_t *rt;
    tfx_handlers_t h;
} t_daemon_t;

static void t_gauges(void *arg, tfd_gauges_t *g)
{
    (void)arg;
    (void)g;
}

/* The parts server.c makes, without the transports. */
static void daemon_up(t_daemon_t *d)
{
    tfd_config_defaults(&d->cfg);
    d->cfg.store_memory = 1u << 20;
    tfd_sessions_limits_t sl = {60, 4, 1u << 16, 1u << 18};
    tfd_replay_limits_t rl = {60, 16, 1u << 20};
    d->api = (tfd_api_t){.cfg = &d->cfg, .gauges = t_gauges};
    d->api.store = tfd_store_new(d->cfg.store_memory);
    d->api.waiters = tfd_waiters_new(8);
    d->api.metrics = tfd_metrics_new();
    d->api.routes = tfd_routes_new();
    d->api.sessions = tfd_sessions_new(&sl);
    d->api.replay = tfd_replay_new(&rl);
    d->api.workers = tfd_workers_new(d->api.routes, &limits);
    d->api.upgrade = tfd_upgrade_start(0, 1000, d->cfg.max_body, NULL, 0, NULL);
    ck_assert(d->api.store && d->api.waiters && d->api.metrics && d->api.routes &&
              d->api.sessions && d->api.replay && d->api.workers && d->api.upgrade);
    d->rt = tfd_router_new(&d->api);
    ck_assert_ptr_nonnull(d->rt);
    d->h = tfd_router_handlers(d->rt);
}

static void daemon_down(t_daemon_t *d)
{
    tfd_router_free(d->rt);
    tfd_upgrade_free(d->api.upgrade);
    tfd_workers_free(d->api.workers);
    tfd_replay_free(d->api.replay);
    tfd_sessions_free(d->api.sessions);
    tfd_routes_free(d->api.routes);
    tfd_metrics_free(d->api.metrics);
    tfd_waiters_free(d->api.waiters);
    tfd_store_free(d->api.store);
}

/* A request for kind on name with a body of kind bk, through begin and handle. */
static t_req_t *request(t_daemon_t *d, tfp_op_kind_t kind, const char *name, tfp_body_kind_t bk,
                        const void *body, size_t len)
{
    t_req_t *q = calloc(1, sizeof *q);
    ck_assert_ptr_nonnull(q);
    tfx_req_t *r = &q->base;
    r->ops = &t_ops;
    r->h = &d->h;
    r->op.kind = kind;
    snprintf(r->op.name, sizeof r->op.name, "%s", name);
    r->op.body.kind = bk;
    r->op.body.length = (int64_t)len;
    d->h.begin(r, d->h.arg);
    if (!r->answered && len) {
        ck_assert(r->accept_body);
        ck_assert_int_eq(tfx_req_grow_body(r, len), TFP_OK);
        memcpy(r->buf + r->headroom, body, len);
        r->body_len = len;
    }
    if (!r->answered)
        d->h.handle(r, d->h.arg);
    return q;
}

/* The request is over: answered (completed) or its client went away. */
static void done(t_daemon_t *d, t_req_t *q, int completed)
{
    d->h.finish(&q->base, completed, d->h.arg);
    tfx_req_release(&q->base);
    free(q);
}

START_TEST(router_cancels_the_call_of_a_caller_gone)
{
    t_daemon_t d;
    daemon_up(&d);
    static const char reg[] = "{\"routes\":[\"double\"]}";
    t_req_t *q = request(&d, TFP_OP_WORKER_REGISTER, "", TFP_BODY_JSON, reg, sizeof reg - 1);
    ck_assert_uint_eq(q->base.status, 201);
    done(&d, q, 1);
    char id[TFD_WORKER_ID_SIZE];
    uint64_t lease;
    tfp_err_t err;
    ck_assert_int_eq(tfp_parse_worker_reg(last_body, strlen(last_body), id, sizeof id, sec,
                                          &lease, &err), TFP_OK);
    size_t len;
    uint8_t *doc = one_tensor(&len);
    for (int in_hand = 0; in_hand < 2; in_hand++) {
        t_req_t *call = request(&d, TFP_OP_CALL, "double", TFP_BODY_SAFETENSORS, doc, len);
        ck_assert(!call->base.answered);
        ck_assert(call->base.want_suspend);
        tfd_worker_poll_t p = {0};
        char call_id[TFD_CALL_ID_SIZE] = "";
        if (in_hand) {
            ck_assert_int_eq(tfd_workers_poll(d.api.workers, id, sec, &p), 1);
            ck_assert_int_eq(p.state, TFD_POLL_GOT);
            memcpy(call_id, p.call_id, sizeof call_id);
            tfd_workers_poll_done(d.api.workers, &p);
        }
        /* The caller goes away while its call waits for the worker. */
        done(&d, call, 0);
        if (in_hand) {
            /* The worker's answer finds no call (it used to fill in the freed one). */
            ck_assert_int_eq(tfd_workers_reply(d.api.workers, id, sec, call_id, TFP_EUNPROC, "no",
                                               NULL, NULL, 0), -1);
        } else {
            /* The worker's poll finds nothing (it used to hand out the freed call). */
            ck_assert_int_eq(tfd_workers_poll(d.api.workers, id, sec, &p), 1);
            ck_assert_int_eq(p.state, TFD_POLL_EMPTY);
            tfd_workers_poll_done(d.api.workers, &p);
        }
    }
    ck_assert_int_eq(tfd_workers_unregister(d.api.workers, id, sec), 0);
    tfd_store_stats_t st;
    tfd_store_stats(d.api.store, &st);
    ck_assert_uint_eq(st.reserved, 0);
    ck_assert_uint_eq(tfd_router_body_bytes(d.rt), 0);
    daemon_down(&d);
    free(doc);
}
END_TEST

Suite *suite_workers(void)
{
    Suite *s = suite_create("workers");
    TCase *tc = tcase_create("cancel");
    tcase_add_test(tc, cancel_forgets_a_queued_call);
    tcase_add_test(tc, cancel_forgets_a_call_in_the_workers_hands);
    tcase_add_test(tc, router_cancels_the_call_of_a_caller_gone);
    suite_add_tcase(s, tc);
    return s;
}
