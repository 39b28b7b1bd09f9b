/* router.c - the endpoint table and the transports' handlers that run it.
 *
 * Every request gets a context in begin: its row of the table (by operation), its ids
 * (echoed as response headers), and then either the refusal its transport recorded, or its
 * body accepted as the row allows and the row's begin. handle runs the row's handler once
 * the body is complete (again after each resume), finish the row's finish, then returns the
 * body charges and records the metrics. Bodies are charged before their buffers grow: a
 * PUT's against the store's limit, every other against body-memory.
 *
 * Threads: the transports' threads (MHD's pool, the UCX progress thread); a context belongs
 * to one request; the counters are atomic.
 */
#include "config.h"
#include "daemon/router.h"
#include "proto/strcopy.h"
#include "daemon/accesslog.h"
#include "daemon/auth.h"
#include "daemon/log.h"
#include "daemon/upgrade.h"
#include "proto/shmframe.h"
#include "transports/clock.h"
#include "transports/spare.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* ---- the endpoint table ------------------------------------------------------------------ */

/* What a row's body field allows. */
enum {
    EP_DOC = 1,                     /* a document (safetensors, raw, Shumai) up to max-body */
    EP_JSON = 2,                    /* a JSON document up to the row's json_max */
    EP_TO_STORE = 4,                /* the document is charged to the store (a raw tensor
                                     * takes the operation's name), not to body-memory */
    EP_FEED_RAW = 8                 /* a raw tensor takes the feed signature's one name */
};

/* One operation's endpoint: its name in the metrics, what body it takes, and its handlers
 * (begin: the body is accepted, before it arrives; handle: the body is in; finish: the
 * request is over). begin and finish may be NULL. Which HTTP methods reach an operation is
 * HTTP's business and lives with its paths (proto/http.c); UCX names operations directly. */
struct tfd_endpoint_spec {
    tfd_endpoint_t id;              /* its name in the metrics */
    unsigned body;                  /* EP_* */
    uint32_t json_max;
    void (*begin)(tfx_req_t *r, tfd_ctx_t *c);
    void (*handle)(tfx_req_t *r, tfd_ctx_t *c);
    void (*finish)(tfx_req_t *r, tfd_ctx_t *c);
};

#define MAX_REGISTRATION (64u << 10)
#define MAX_UPGRADE 4096u

static void begin_wait(tfd_ctx_t *c, uint64_t cap)
{
    uint64_t ms = c->op->wait_ms < cap ? c->op->wait_ms : cap;
    c->waiter.deadline_ms = ms ? tfx_now_ms() + ms : 0;
    c->poll.deadline_ms = c->waiter.deadline_ms;
}

static void begin_get(tfx_req_t *r, tfd_ctx_t *c)
{
    (void)r;
    begin_wait(c, TFD_LIVE(c->api->cfg->max_wait_ms));
}

static void begin_poll(tfx_req_t *r, tfd_ctx_t *c)
{
    (void)r;
    begin_wait(c, c->api->cfg->worker_lease_ms / 2);
}

static void handle_none(tfx_req_t *r, tfd_ctx_t *c)
{
    api_fail(r, c, TFP_ENOTFOUND, "no such operation");
}

static const struct tfd_endpoint_spec endpoints[TFP_OP_COUNT] = {
    [TFP_OP_NONE] = {TFD_EP_OTHER, 0, 0, NULL, handle_none, NULL},
    [TFP_OP_HEALTH] = {TFD_EP_HEALTH, 0, 0, NULL, api_handle_health, NULL},
    [TFP_OP_READY] = {TFD_EP_READY, 0, 0, NULL, api_handle_ready, NULL},
    [TFP_OP_METRICS] = {TFD_EP_METRICS, 0, 0, NULL, api_handle_metrics, NULL},
    [TFP_OP_INFO] = {TFD_EP_INFO, 0, 0, NULL, api_handle_info, NULL},
    [TFP_OP_TENSOR_LIST] = {TFD_EP_LIST, 0, 0, NULL, api_handle_list, NULL},
    [TFP_OP_TENSOR_GET] = {TFD_EP_TENSOR_GET, 0, 0, begin_get, api_handle_get,
                           api_finish_get},
    [TFP_OP_TENSOR_PUT] = {TFD_EP_TENSOR_PUT, EP_DOC | EP_TO_STORE, 0, api_begin_put,
                           api_handle_put, NULL},
    [TFP_OP_TENSOR_DELETE] = {TFD_EP_TENSOR_DELETE, 0, 0, NULL, api_handle_delete, NULL},
    [TFP_OP_CALL] = {TFD_EP_CALL, EP_DOC, 0, NULL, api_handle_call, api_finish_call},
    [TFP_OP_SESSION_END] = {TFD_EP_SESSION, 0, 0, NULL, api_handle_session_end, NULL},
    [TFP_OP_WORKER_REGISTER] = {TFD_EP_WORKER, EP_JSON, MAX_REGISTRATION, NULL,
                                api_handle_register, NULL},
    [TFP_OP_WORKER_LEAVE] = {TFD_EP_WORKER, 0, 0, NULL, api_handle_leave, NULL},
    [TFP_OP_WORKER_POLL] = {TFD_EP_WORKER_POLL, 0, 0, begin_poll, api_handle_poll,
                            api_finish_poll},
    [TFP_OP_WORKER_REPLY] = {TFD_EP_WORKER, EP_DOC | EP_JSON, MAX_REGISTRATION, NULL,
                             api_handle_reply, NULL},
    [TFP_OP_UPGRADE] = {TFD_EP_UPGRADE, EP_JSON, MAX_UPGRADE, NULL, api_handle_upgrade, NULL},
    [TFP_OP_SHUMAI_GET] = {TFD_EP_SHUMAI_GET, 0, 0, NULL, api_handle_shumai_get, NULL},
    [TFP_OP_SHUMAI_CALL] = {TFD_EP_SHUMAI_CALL, EP_DOC, 0, NULL, api_handle_call,
                            api_finish_call},
    [TFP_OP_FEED_LIST] = {TFD_EP_FEED, 0, 0, NULL, api_handle_feed_list, NULL},
    [TFP_OP_FEED_DECLARE] = {TFD_EP_FEED, EP_JSON, MAX_REGISTRATION, NULL,
                             api_handle_feed_declare, NULL},
    [TFP_OP_FEED_STATS] = {TFD_EP_FEED, 0, 0, NULL, api_handle_feed_stats, api_finish_feed},
    [TFP_OP_FEED_DELETE] = {TFD_EP_FEED, 0, 0, NULL, api_handle_feed_delete, NULL},
    [TFP_OP_FEED_INFEED] = {TFD_EP_FEED_INFEED, EP_DOC | EP_FEED_RAW, 0, begin_get,
                            api_handle_feed_infeed, api_finish_feed},
    [TFP_OP_FEED_POP] = {TFD_EP_FEED_POP, 0, 0, begin_get, api_handle_feed_pop,
                         api_finish_feed},
    [TFP_OP_FEED_ACK] = {TFD_EP_FEED, 0, 0, NULL, api_handle_feed_ack, api_finish_feed},
    [TFP_OP_FEED_DETACH] = {TFD_EP_FEED, 0, 0, NULL, api_handle_feed_detach, api_finish_feed},
    [TFP_OP_FEED_OUTFEED_PUSH] = {TFD_EP_FEED_OUTFEED, EP_DOC, 0, NULL,
                                  api_handle_feed_outfeed_push, api_finish_feed},
    [TFP_OP_FEED_OUTFEED_GET] = {TFD_EP_FEED_OUTFEED, 0, 0, begin_get,
                                 api_handle_feed_outfeed_get, api_finish_feed},
    [TFP_OP_FEED_DONE] = {TFD_EP_FEED, 0, 0, NULL, api_handle_feed_done, api_finish_feed},
    [TFP_OP_FEED_RESET] = {TFD_EP_FEED, 0, 0, NULL, api_handle_feed_reset, api_finish_feed},
};

/* ---- the transports' handlers ------------------------------------------------------------ */

struct tfd_router {
    const tfd_api_t *api;
    char id_prefix[17];                     /* of the request ids the server makes up */
    atomic_uint_fast64_t next_id;
    atomic_uint_fast64_t body_bytes;        /* request bodies held outside the store */
    pthread_mutex_t spare_lock;
    tfx_spare_t spare;                      /* finished requests' contexts, to reuse */
};

/* A request's context is 1.4 KiB, past malloc's per-thread cache: the router keeps some for
 * reuse (transports/spare.h), under a lock each transport's threads share. */
#define SPARE_CTXS 64

static tfd_ctx_t *ctx_new(tfd_router_t *rt)
{
    pthread_mutex_lock(&rt->spare_lock);
    tfd_ctx_t *c = tfx_spare_take(&rt->spare);
    pthread_mutex_unlock(&rt->spare_lock);
    if (!c)
        return calloc(1, sizeof *c);
    memset(c, 0, sizeof *c);
    return c;
}

static void ctx_free(tfd_router_t *rt, tfd_ctx_t *c)
{
    pthread_mutex_lock(&rt->spare_lock);
    int kept = tfx_spare_put(&rt->spare, c);
    pthread_mutex_unlock(&rt->spare_lock);
    if (!kept)
        free(c);
}

/* Approves a body buffer growing to total bytes. */
static tfp_status_t on_body_grow(tfx_req_t *r, uint64_t total, void *arg)
{
    tfd_router_t *rt = arg;
    tfd_ctx_t *c = tfx_req_ctx(r);
    if (!c)
        return TFP_EINTERNAL;
    if (total <= c->charged)
        return TFP_OK;
    uint64_t delta = total - c->charged;
    if (c->ep->body & EP_TO_STORE) {
        if (tfd_store_reserve(rt->api->store, delta) != 0)
            return TFP_ENOSPACE;
        c->reserved += delta;
    } else {
        uint64_t was = atomic_fetch_add(&rt->body_bytes, delta);
        if (was + delta > rt->api->cfg->body_memory) {
            atomic_fetch_sub(&rt->body_bytes, delta);
            return TFP_EBUSY;
        }
        c->body_charged += delta;
    }
    c->charged = total;
    return TFP_OK;
}

/* Takes the user and request ids (making one up when the client chose none) and echoes them
 * with the transport, as response headers. */
static void take_ids(tfd_router_t *rt, tfx_req_t *r, tfd_ctx_t *c)
{
    const tfp_op_who_t *who = &c->op->who;
    if (who->request_id[0]) {
        tfp_strcpy(c->request_id, sizeof c->request_id, who->request_id);
        c->request_id_from_client = 1;
    } else {
        uint64_t n = atomic_fetch_add(&rt->next_id, 1);
        snprintf(c->request_id, sizeof c->request_id, "tfd-%s-%llu", rt->id_prefix,
                 (unsigned long long)n);
    }
    tfx_req_add_header(r, "Tfetch-Request-Id", c->request_id);
    tfx_req_add_header(r, "Tfetch-Transport", tfx_req_transport(r));
    /* HTTP only: UCX and shm answers travel on a connection the upgrade's range admitted, and
     * a header is three allocations on their hot path. */
    if (strcmp(tfx_req_transport(r), "http") == 0)
        tfx_req_add_header(r, "Tfetch-Protocol", c->api->protocol_text);
    /* Not to a principal known by its certificate alone: its upgrade is refused (upgrade.c). */
    if (who->cred != TFP_CRED_CERT && tfd_upgrade_offered_to(c->api->upgrade, tfx_req_peer(r)))
        tfx_req_add_header(r, "Tfetch-Upgrade", "ucx");
    if (who->user[0]) {
        tfp_strcpy(c->user, sizeof c->user, who->user);
        tfx_req_add_header(r, "Tfetch-User", c->user);
    }
}

/* ---- authentication and rights ------------------------------------------------------------ */

/* What an operation needs: nothing, a known token, or a right on a name (NULL: on any). */
typedef enum { NEED_NOTHING, NEED_TOKEN, NEED_RIGHT } need_t;

static need_t needs(const tfp_op_t *op, tfp_right_t *right, const char **name)
{
    *name = op->name;
    switch (op->kind) {
    case TFP_OP_HEALTH:
    case TFP_OP_READY:
        return NEED_NOTHING;
    case TFP_OP_METRICS:
        *right = TFP_RIGHT_ADMIN;
        *name = "metrics";
        return NEED_RIGHT;
    case TFP_OP_TENSOR_GET:
    case TFP_OP_SHUMAI_GET:
    case TFP_OP_FEED_STATS:
    case TFP_OP_FEED_OUTFEED_GET:
        *right = TFP_RIGHT_READ;
        return NEED_RIGHT;
    case TFP_OP_TENSOR_PUT:
        *right = TFP_RIGHT_WRITE;
        return NEED_RIGHT;
    case TFP_OP_TENSOR_DELETE:
        *right = TFP_RIGHT_DELETE;
        return NEED_RIGHT;
    case TFP_OP_CALL:
    case TFP_OP_SHUMAI_CALL:
        *right = TFP_RIGHT_CALL;
        return NEED_RIGHT;
    case TFP_OP_WORKER_REGISTER:        /* each route: api_handle_register, once parsed */
    case TFP_OP_WORKER_LEAVE:           /* a worker's own: its secret too */
    case TFP_OP_WORKER_POLL:
    case TFP_OP_WORKER_REPLY:
        *right = TFP_RIGHT_SERVE;
        *name = NULL;
        return NEED_RIGHT;
    case TFP_OP_FEED_DECLARE:
    case TFP_OP_FEED_DELETE:
    case TFP_OP_FEED_INFEED:
    case TFP_OP_FEED_DONE:
    case TFP_OP_FEED_RESET:
        *right = TFP_RIGHT_PRODUCE;
        return NEED_RIGHT;
    case TFP_OP_FEED_POP:
    case TFP_OP_FEED_ACK:
    case TFP_OP_FEED_DETACH:
    case TFP_OP_FEED_OUTFEED_PUSH:
        *right = TFP_RIGHT_CONSUME;
        return NEED_RIGHT;
    default:            /* NONE, INFO (details: admin), TENSOR_LIST and FEED_LIST (filtered),
                         * SESSION_END (the principal's own), UPGRADE (the token goes to
                         * the principal: upgrade.c) */
        return NEED_TOKEN;
    }
}

/* What a 401 says: no credential, or which one was not accepted. */
static const char *unauth_why(tfd_auth_result_t res, tfp_cred_t cred)
{
    if (res == TFD_AUTH_MISSING)
        return "this server needs Authorization: Bearer TOKEN";
    if (cred == TFP_CRED_CERT_BAD)
        return "the client certificate does not verify against tls-client-ca";
    if (cred == TFP_CRED_CERT)
        return "the client certificate's subject has no cert: line in the token file";
    return "unknown token";
}

tfp_status_t tfd_router_check(tfd_auth_t *a, tfp_op_who_t *who, const tfp_right_t *rights,
                              size_t nrights, const char *name, char *msg, size_t msg_size)
{
    if (!a || !tfd_auth_on(a))
        return TFP_OK;
    tfd_auth_result_t res = tfd_auth_identify(a, who, 0);
    if (res != TFD_AUTH_OK) {
        tfd_auth_count_failure(a, res);
        snprintf(msg, msg_size, "%s", unauth_why(res, who->cred));
        return TFP_EUNAUTH;
    }
    char names[64] = "";
    for (size_t i = 0; i < nrights; i++) {
        if (tfd_auth_allows(a, who, 0, rights[i], name))
            return TFP_OK;
        size_t n = strlen(names);
        snprintf(names + n, sizeof names - n, "%s%s", i ? " or " : "",
                 tfp_right_name(rights[i]));
    }
    tfd_auth_count_failure(a, TFD_AUTH_FORBIDDEN);
    if (name)       /* as api_forbid says it */
        snprintf(msg, msg_size, "principal %s has no %s right on '%.200s'", who->principal,
                 names, name);
    else
        snprintf(msg, msg_size, "principal %s has no %s right", who->principal, names);
    return TFP_EFORBIDDEN;
}

/* Establishes the principal (401 without a known token). 0, or -1 after answering. */
static int authenticate(tfx_req_t *r, tfd_ctx_t *c)
{
    tfd_auth_t *a = c->api->auth;
    const tfp_op_t *op = c->op;
    tfp_right_t right;
    const char *name;
    c->shumai = op->kind == TFP_OP_SHUMAI_GET || op->kind == TFP_OP_SHUMAI_CALL;
    c->info_details = !tfd_auth_on(a);
    if (!tfd_auth_on(a) || needs(op, &right, &name) == NEED_NOTHING) {
        tfx_req_op_who(r)->user_principal[0] = '\0';     /* forwarding means nothing here */
        api_set_user(c, c->user);
        return 0;
    }
    tfd_auth_result_t res = tfd_auth_identify(a, tfx_req_op_who(r), c->shumai);
    tfp_op_who_t *who = tfx_req_op_who(r);
    if (strcmp(who->user_principal, who->principal) == 0)
        who->user_principal[0] = '\0';                  /* its own user */
    if (res != TFD_AUTH_OK) {
        tfd_auth_count_failure(a, res);
        tfx_req_add_header(r, "WWW-Authenticate", "Bearer realm=\"tfetch\"");
        if (res == TFD_AUTH_MISSING && c->shumai)
            api_fail(r, c, TFP_EUNAUTH, "the Shumai paths need shumai-principal set on the "
                     "server (authentication is on)");
        else
            api_fail(r, c, TFP_EUNAUTH, "%s", unauth_why(res, who->cred));
        return -1;
    }
    api_set_user(c, c->user);
    c->info_details = tfd_auth_allows(a, &op->who, c->shumai, TFP_RIGHT_ADMIN, "info");
    return 0;
}

/* Checks the right the operation needs (403 without it), and forward on the principal of a
 * forwarded user id. 0, or -1 after answering. */
static int authorize(tfx_req_t *r, tfd_ctx_t *c)
{
    tfd_auth_t *a = c->api->auth;
    tfp_right_t right;
    const char *name;
    need_t need;
    if (!tfd_auth_on(a) || (need = needs(c->op, &right, &name)) == NEED_NOTHING)
        return 0;
    const char *of = c->op->who.user_principal;
    if (of[0] && !tfd_auth_allows(a, &c->op->who, c->shumai, TFP_RIGHT_FORWARD, of))
        return api_forbid(r, c, TFP_RIGHT_FORWARD, of);
    if (need != NEED_RIGHT)
        return 0;
    if (tfd_auth_allows(a, &c->op->who, c->shumai, right, name))
        return 0;
    return api_forbid(r, c, right, name);
}

/* Accepts the body the operation describes, as its endpoint allows. 0, or -1 after
 * answering. */
static int begin_body(tfx_req_t *r, tfd_ctx_t *c)
{
    if (c->op->kind == TFP_OP_FEED_INFEED)
        c->lender = &api_feed_lender;           /* a same-host ring's slot, where one is free */
    switch (c->op->body.kind) {
    case TFP_BODY_NONE:
        return 0;
    case TFP_BODY_JSON:
        if (c->ep->body & EP_JSON)
            tfx_req_accept_body(r, 0, c->ep->json_max);
        return 0;
    case TFP_BODY_STAGED:               /* where the document lies: api_body_doc copies it */
        if (c->ep->body & EP_DOC)
            tfx_req_accept_body(r, 0, TFP_SF_STAGED_LEN);
        return 0;
    default: {
        if (!(c->ep->body & EP_DOC))
            return 0;
        char sig[TFP_FEED_MAX_SIG_NAME + 1];
        const char *raw = (c->ep->body & EP_TO_STORE) ? c->name : "tensor";
        if ((c->ep->body & EP_FEED_RAW) && c->op->body.kind == TFP_BODY_RAW &&
            api_feed_raw_name(c, sig, sizeof sig))
            raw = sig;
        return api_begin_doc(r, c, raw, c->api->cfg->max_body);
    }
    }
}

static void on_begin(tfx_req_t *r, void *arg)
{
    tfd_router_t *rt = arg;
    tfd_ctx_t *c = ctx_new(rt);
    if (!c) {
        tfx_respond_error(r, TFP_ENOMEM, "out of memory");
        return;
    }
    const tfp_op_t *op = tfx_req_op(r);
    c->api = rt->api;
    c->op = op;
    c->ep = &endpoints[(unsigned)op->kind < TFP_OP_COUNT ? op->kind : TFP_OP_NONE];
    c->start_ns = tfx_now_ns();
    c->name = op->name;
    c->waiter.name = op->name;
    c->waiter.req = r;
    c->poll.req = r;
    tfx_req_set_ctx(r, c);
    take_ids(rt, r, c);
    if (authenticate(r, c) != 0)
        return;
    const tfp_op_err_t *e = tfx_req_op_error(r);
    if (e->code != TFP_OK) {
        api_fail(r, c, e->code, "%s", e->msg);
        return;
    }
    if (authorize(r, c) != 0)
        return;
    if (begin_body(r, c) != 0)
        return;
    if (c->ep->begin)
        c->ep->begin(r, c);
}

static void on_handle(tfx_req_t *r, void *arg)
{
    (void)arg;
    tfd_ctx_t *c = tfx_req_ctx(r);
    if (c)
        c->ep->handle(r, c);
}

static void on_finish(tfx_req_t *r, int completed, void *arg)
{
    tfd_router_t *rt = arg;
    tfd_ctx_t *c = tfx_req_ctx(r);
    if (!c)
        return;
    if (c->ep->finish)
        c->ep->finish(r, c);
    if (c->reserved)
        tfd_store_unreserve(rt->api->store, c->reserved);
    if (c->body_charged)
        atomic_fetch_sub(&rt->body_bytes, c->body_charged);
    double secs = tfx_since_s(c->start_ns);
    unsigned status = tfx_req_status(r);
    uint64_t out = completed ? tfx_req_response_bytes(r) : 0;
    const char *what = tfp_op_name(c->op->kind);
    tfd_metrics_record(rt->api->metrics, c->ep->id,
                       tfd_metrics_transport(tfx_req_transport(r)), status, c->code,
                       tfx_req_body_bytes(r), out, secs);
    tfd_access_log_write(rt->api->access_log, &(tfd_access_t){
        .client = tfx_req_peer(r), .transport = tfx_req_transport(r), .op = what,
        .name = c->name, .user = c->user, .principal = c->op->who.principal,
        .request_id = c->request_id, .status = status,
        .code = c->code != TFP_OK ? tfp_status_name(c->code) : NULL,
        .bytes_in = tfx_req_body_bytes(r), .bytes_out = out, .seconds = secs,
        .completed = completed});
    if (!completed)
        tfd_log(LOG_INFO, "%s %s '%s': connection closed before the response was sent (status "
                "%u, request %s)", tfx_req_transport(r), what, c->name, status, c->request_id);
    tfd_log(LOG_DEBUG, "%s %s '%s' %u %llu+%llu bytes %.6fs user=%s request=%s",
            tfx_req_transport(r), what, c->name, status,
            (unsigned long long)tfx_req_body_bytes(r), (unsigned long long)out, secs,
            c->user[0] ? c->user : "-", c->request_id);
    free(c->raw_hdr);
    ctx_free(rt, c);
    tfx_req_set_ctx(r, NULL);
}

tfd_router_t *tfd_router_new(const tfd_api_t *api)
{
    tfd_router_t *rt = calloc(1, sizeof *rt);
    if (!rt)
        return NULL;
    rt->api = api;
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
        rnd = tfx_now_ns() ^ ((uint64_t)getpid() << 32);
    snprintf(rt->id_prefix, sizeof rt->id_prefix, "%016llx", (unsigned long long)rnd);
    atomic_init(&rt->next_id, 1);
    atomic_init(&rt->body_bytes, 0);
    pthread_mutex_init(&rt->spare_lock, NULL);
    tfx_spare_init(&rt->spare, SPARE_CTXS);
    return rt;
}

void tfd_router_free(tfd_router_t *rt)
{
    if (!rt)
        return;
    tfx_spare_free_all(&rt->spare);
    pthread_mutex_destroy(&rt->spare_lock);
    free(rt);
}

tfx_handlers_t tfd_router_handlers(tfd_router_t *rt)
{
    tfx_handlers_t h = {on_begin, on_handle, on_finish, on_body_grow, rt};
    return h;
}

uint64_t tfd_router_body_bytes(const tfd_router_t *rt)
{
    return atomic_load(&rt->body_bytes);
}
