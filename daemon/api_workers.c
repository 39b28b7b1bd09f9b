/* api_workers.c - the worker protocol over HTTP (see workers.h and doc/PROTOCOL.md):
 *
 *   POST   /v1/workers                    {"routes": [...]} -> 201 {"worker": ID, "secret": S,
 *                                         "lease_ms": N}
 *   GET    /v1/workers/{id}/next?wait=MS  200 + the call's safetensors document (headers
 *                                         Tfetch-Call, Tfetch-Route, Tfetch-Call-User,
 *                                         Tfetch-Call-Request-Id), or 204 when none came
 *   POST   /v1/workers/{id}/calls/{call}  the answer: safetensors, or a JSON error body
 *                                         {"error", "code"} passed on to the caller -> 204
 *   DELETE /v1/workers/{id}               leave; calls in its hands fail with 503 -> 204
 *
 * The last three must carry the worker's secret (Tfetch-Worker-Secret): an unknown id is
 * 404, a known one with a wrong or missing secret 403 TF_EFORBIDDEN (ids are random, so
 * telling that one exists reveals nothing a caller did not already hold). With
 * authentication on, a worker is bound to the principal that registered it (which needs
 * serve on each route): another principal's poll, answer or leave is 403 even with the
 * worker's secret.
 *
 * Runs on the transports' threads; see api.h.
 */
#include "config.h"
#include "daemon/api.h"
#include "proto/jsonread.h"
#include "proto/safetensors.h"
#include "transports/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUTES_PER_WORKER 256

void api_handle_register(tfx_req_t *r, tfd_ctx_t *c)
{
    size_t len;
    const uint8_t *body = tfx_req_body(r, &len);
    char **routes = NULL;
    size_t n = 0;
    tfp_err_t err;
    if (tfp_parse_worker_routes((const char *)body, len, MAX_ROUTES_PER_WORKER, &routes, &n,
                                &err) != TFP_OK) {
        api_fail(r, c, err.code, "worker registration: %s", err.msg);
        return;
    }
    for (size_t i = 0; i < n; i++)          /* serve, route by route */
        if (!tfd_auth_allows(c->api->auth, &c->op->who, 0, TFP_RIGHT_SERVE, routes[i])) {
            api_forbid(r, c, TFP_RIGHT_SERVE, routes[i]);
            tfp_strings_free(routes, n);
            return;
        }
    char id[TFD_WORKER_ID_SIZE], secret[TFD_WORKER_SECRET_SIZE];
    tfp_status_t st = tfd_workers_register(c->api->workers, (const char *const *)routes, n, id,
                                           secret, &err);
    tfp_strings_free(routes, n);
    if (st != TFP_OK) {
        api_fail(r, c, st, "%s", err.msg);
        return;
    }
    tfd_workers_set_owner(c->api->workers, id, c->op->who.principal);
    tfp_jw_t w;
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "worker");
    tfp_jw_str(&w, id);
    tfp_jw_key(&w, "secret");
    tfp_jw_str(&w, secret);
    tfp_jw_key(&w, "lease_ms");
    tfp_jw_uint(&w, c->api->cfg->worker_lease_ms);
    tfp_jw_obj_end(&w);
    char *text = tfp_jw_finish(&w, &len);
    if (!text) {
        tfd_workers_unregister(c->api->workers, id, secret);
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        return;
    }
    api_respond_text(r, 201, "application/json", text, len);
}

/* The answer to a request naming a worker with a wrong or missing secret. */
static void forbidden(tfx_req_t *r, tfd_ctx_t *c)
{
    api_fail(r, c, TFP_EFORBIDDEN, "%s for worker '%s' (the secret its registration returned)",
             c->op->worker_secret[0] ? "wrong Tfetch-Worker-Secret" : "no Tfetch-Worker-Secret",
             c->name);
}

/* 1 (after answering 403) if the worker is another principal's. */
static int not_ours(tfx_req_t *r, tfd_ctx_t *c)
{
    if (!tfd_workers_owned_by_other(c->api->workers, c->name, c->op->who.principal))
        return 0;
    tfd_auth_count_failure(c->api->auth, TFD_AUTH_FORBIDDEN);
    api_fail(r, c, TFP_EFORBIDDEN, "worker '%s' was registered by another principal (not %s)",
             c->name, c->op->who.principal);
    return 1;
}

void api_handle_poll(tfx_req_t *r, tfd_ctx_t *c)
{
    tfd_worker_poll_t *p = &c->poll;
    if (p->state == TFD_POLL_IDLE && not_ours(r, c))
        return;
    if (p->state == TFD_POLL_IDLE || p->state == TFD_POLL_ARMED) {
        int rc = tfd_workers_poll(c->api->workers, c->name, c->op->worker_secret, p);
        if (rc == 0) {
            tfx_req_suspend(r);
            return;
        }
        if (rc == -2) {
            forbidden(r, c);
            return;
        }
    }
    switch (p->state) {
    case TFD_POLL_GOT:
        tfx_req_add_header(r, "Tfetch-Call", p->call_id);
        tfx_req_add_header(r, "Tfetch-Route", p->route);
        if (p->user[0])
            tfx_req_add_header(r, "Tfetch-Call-User", p->user);
        tfx_req_add_header(r, "Tfetch-Call-Request-Id", p->request_id);
        tfx_respond(r, 200, "application/x-safetensors", p->body, p->len, free, p->body);
        p->body = NULL;
        return;
    case TFD_POLL_EMPTY:
        tfx_respond(r, 204, NULL, "", 0, NULL, NULL);
        return;
    case TFD_POLL_ARMED:                            /* woken early: poll again */
        tfx_req_suspend(r);
        return;
    default:
        api_fail(r, c, TFP_ENOTFOUND, "no worker '%s' (its lease ran out, or the server is "
                 "stopping): register again", c->name);
        return;
    }
}

void api_handle_reply(tfx_req_t *r, tfd_ctx_t *c)
{
    tfd_workers_t *ws = c->api->workers;
    int rc;
    if (not_ours(r, c))
        return;
    if (c->op->body.kind == TFP_BODY_JSON) {
        size_t len;
        const uint8_t *body = tfx_req_body(r, &len);
        tfp_status_t code;
        char msg[256];
        if (tfp_parse_error_body((const char *)body, len, &code, msg, sizeof msg) != 0 ||
            code == TFP_OK) {
            api_fail(r, c, TFP_EPROTO, "a worker's error answer is {\"error\": \"...\", "
                     "\"code\": \"TF_E...\"}");
            return;
        }
        rc = tfd_workers_reply(ws, c->name, c->op->worker_secret, c->op->sub, code, msg, NULL,
                               NULL, 0);
    } else {
        uint8_t *base;
        size_t cap, len;
        tfp_doc_t *doc;
        if (api_body_doc(r, c, &base, &cap, &len, &doc) != 0)
            return;
        rc = tfd_workers_reply(ws, c->name, c->op->worker_secret, c->op->sub, TFP_OK, NULL, doc,
                               base, cap);
    }
    if (rc == 0)
        tfx_respond(r, 204, NULL, "", 0, NULL, NULL);
    else if (rc == -2)
        forbidden(r, c);
    else
        api_fail(r, c, TFP_ENOTFOUND, "worker '%s' has no call '%s' in hand (it timed out, "
                 "or its caller's lease ended)", c->name, c->op->sub);
}

void api_handle_leave(tfx_req_t *r, tfd_ctx_t *c)
{
    if (not_ours(r, c))
        return;
    int rc = tfd_workers_unregister(c->api->workers, c->name, c->op->worker_secret);
    if (rc == 0)
        tfx_respond(r, 204, NULL, "", 0, NULL, NULL);
    else if (rc == -2)
        forbidden(r, c);
    else
        api_fail(r, c, TFP_ENOTFOUND, "no worker '%s'", c->name);
}

void api_finish_poll(tfx_req_t *r, tfd_ctx_t *c)
{
    (void)r;
    tfd_workers_poll_done(c->api->workers, &c->poll);
}
