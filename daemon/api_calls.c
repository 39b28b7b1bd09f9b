/* api_calls.c - exchange: POST /v1/call/{route}, Shumai's GET/POST /{name}, and
 * DELETE /v1/sessions/self.
 *
 * A call runs once its body is complete: the body is decoded (safetensors, raw or Shumai),
 * a retry with a known request id is answered from the replay window instead of running
 * again, the caller's session is opened for stateful routes, and the route runs. Routes that
 * answer later (workers) leave the request suspended, holding no thread, until
 * tfd_call_finish resumes it; a request that ends first (its client went away) has the
 * route cancel the call before freeing it. Runs on the transports' threads; see api.h.
 */
#include "config.h"
#include "daemon/api.h"
#include "proto/strcopy.h"
#include "daemon/log.h"
#include "proto/safetensors.h"
#include "proto/shumai.h"
#include "transports/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Shumai ---------------------------------------------------------------------------- */

/* The reply Shumai expects: one F32 tensor carrying the caller's provenance. */
static tfd_blob_t *shumai_blob(tfd_ctx_t *c, const tfp_doc_t *doc, tfp_err_t *err)
{
    const tfp_tensor_t *t;
    if (tfp_shumai_check_doc(doc, &t, err) != TFP_OK)
        return NULL;
    uint8_t hdr[TFP_SHUMAI_MAX_HEADER];
    size_t hdr_len;
    if (tfp_shumai_encode_header(t->rank, t->shape, c->shumai_provenance,
                                 c->shumai_flags & TFP_SHUMAI_REQUIRES_GRAD, 0, hdr, sizeof hdr,
                                 &hdr_len, err) != TFP_OK)
        return NULL;
    size_t cap;
    uint8_t *buf = tfx_buf_alloc(hdr_len + (size_t)t->nbytes, &cap);
    if (!buf) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return NULL;
    }
    memcpy(buf, hdr, hdr_len);
    if (t->nbytes)
        memcpy(buf + hdr_len, t->data, (size_t)t->nbytes);
    tfd_blob_t *b = tfd_blob_new(buf, cap, buf, hdr_len + (size_t)t->nbytes, NULL);
    if (!b)
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
    return b;
}

void api_handle_shumai_get(tfx_req_t *r, tfd_ctx_t *c)
{
    tfd_blob_t *b = tfd_store_get(c->api->store, c->name);
    if (!b) {
        api_fail(r, c, TFP_ENOTFOUND, "no tensor named '%s'", c->name);
        return;
    }
    tfp_err_t err;
    c->shumai_provenance = TFP_SHUMAI_NO_PROVENANCE;
    if (c->user[0] && tfp_shumai_user_to_provenance(c->user, &c->shumai_provenance, &err) != TFP_OK)
        c->shumai_provenance = TFP_SHUMAI_NO_PROVENANCE;
    tfd_blob_t *reply = shumai_blob(c, b->doc, &err);
    tfd_blob_unref(b);
    if (!reply) {
        api_fail(r, c, err.code == TFP_ENOTACCEPT ? TFP_EUNPROC : err.code, "'%s': %s", c->name,
                 err.msg);
        return;
    }
    api_respond_blob(r, 200, "application/octet-stream", reply);
}

/* ---- calls ----------------------------------------------------------------------------- */

static void on_call_finished(tfd_call_t *call, void *arg)
{
    tfx_req_t *r = arg;
    tfd_ctx_t *c = tfx_req_ctx(r);
    atomic_store(&c->call_done, 1);
    tfx_req_resume(r);
}

/* 1 when doc, encoded, is byte for byte the call's request document (base, len): every
 * tensor where the request had it (a route that answers with its inputs, as echo), the
 * same header. */
static int same_as_request(tfp_doc_t *doc, const uint8_t *base, size_t len)
{
    uint8_t *hdr;
    size_t hdr_len;
    tfp_err_t err;
    if (!doc || !base || tfp_st_encode_header(doc, &hdr, &hdr_len, &err) != TFP_OK)
        return 0;
    int same = hdr_len <= len && hdr_len + tfp_doc_data_bytes(doc) == len &&
               memcmp(hdr, base, hdr_len) == 0;
    free(hdr);
    for (size_t i = 0; same && i < doc->n; i++)
        same = !doc->t[i].nbytes || doc->t[i].data == base + hdr_len + doc->t[i].offset;
    return same;
}

/* The answer to a call whose outputs are its request document, byte for byte (echo), as
 * safetensors: the request's own buffer, no copy. A sealed memfd (shm) is taken from the
 * request and lent by the transport as it is; a heap buffer (HTTP, UCX) goes to the answer's
 * blob. NULL when it is not so, or the answer is to be another form (Accept), or a memfd
 * cannot be taken (the answer is then encoded as any). */
static tfd_blob_t *body_as_blob(tfx_req_t *r, tfd_ctx_t *c);

static tfd_blob_t *request_as_answer(tfx_req_t *r, tfd_ctx_t *c)
{
    if (!tfp_op_accepts_safetensors(c->op) || !c->call_base ||
        !same_as_request(c->call->out, c->call_base, c->call_len))
        return NULL;
    int heap = !c->body_give_back;
    tfd_blob_t *b = body_as_blob(r, c);
    if (!b && heap)
        tfd_call_fail(c->call, TFP_ENOMEM, "out of memory");  /* call->out is gone */
    return b;
}

/* The request's body as a blob, no copy: the heap buffer itself, or the sealed memfd taken
 * from the request. NULL when it cannot be (a heap buffer is then freed). */
static tfd_blob_t *body_as_blob(tfx_req_t *r, tfd_ctx_t *c)
{
    if (!c->body_give_back) {
        /* A body the heap holds (HTTP, UCX): the answer takes the buffer itself, where
         * encoding the route's document would copy every byte of it once more. */
        tfd_blob_t *b = tfd_blob_new(c->call_base, c->call_cap, c->call_base, c->call_len,
                                     NULL);
        c->call_base = NULL;                    /* the blob's now (freed with it on failure) */
        c->call_cap = 0;
        return b;
    }
    tfd_blob_t *b = tfd_blob_new(NULL, 0, c->call_base, c->call_len, NULL);
    int fd;
    void *p;
    size_t size;
    if (!b || !tfx_req_take_memfd(r, &fd, &p, &size)) {
        tfd_blob_unref(b);
        return NULL;
    }
    c->body_give_back(c->body_give_back_arg);   /* the lending is over; the memfd is ours */
    c->body_give_back = NULL;
    c->call_base = NULL;                        /* the blob's now: call_in points into it */
    c->call_cap = 0;
    b->share_fd = fd;
    b->share_p = p;
    b->share_size = size;
    return b;
}

/* Answers with the finished call's outputs, or its failure (code and message), and
 * remembers the answer for retries. */
static void respond_call(tfx_req_t *r, tfd_ctx_t *c)
{
    tfd_call_t *call = c->call;
    tfd_replay_answer_t ans = {.status = 200, .code = TFP_OK};
    int shumai = c->op->body.kind == TFP_BODY_SHUMAI;
    tfp_err_t err;

    snprintf(ans.content_type, sizeof ans.content_type, "%s",
             shumai ? "application/octet-stream" : "application/x-safetensors");
    if (call->status == TFP_OK && !shumai)
        ans.is_request = (ans.body = request_as_answer(r, c)) != NULL;
    if (call->status == TFP_OK && !ans.body && call->out) {
        ans.body = shumai ? shumai_blob(c, call->out, &err) : api_encode_blob(call->out, &err);
        if (!ans.body)
            tfd_call_fail(call, err.code == TFP_ENOTACCEPT ? TFP_EUNPROC : err.code,
                          "route '%s' answered what the request's format cannot carry: %s",
                          call->route, err.msg);
    }
    if (call->status != TFP_OK) {
        ans.code = call->status;
        ans.status = (unsigned)tfp_status_http(call->status);
        ans.content_type[0] = '\0';
        tfp_strcpy(ans.msg, sizeof ans.msg, call->msg);
        c->code = call->status;
    }
    if (c->replay_owner) {
        if (ans.body || ans.code != TFP_OK)
            tfd_replay_complete(c->api->replay, c->state_key, c->request_id, c->name, &ans);
        else
            tfd_replay_abandon(c->api->replay, c->state_key, c->request_id);
        c->replay_owner = 0;
    }
    if (ans.code != TFP_OK)
        tfx_respond_error(r, ans.code, "%s", ans.msg);
    else if (!ans.body)
        api_fail(r, c, TFP_ENOMEM, "out of memory");
    else if (ans.body->doc)
        api_serve_blob(r, c, ans.body);             /* honours Accept: JSON, raw */
    else
        api_respond_blob(r, ans.status, ans.content_type, ans.body);
}

/* Looks the request id up in the replay window. 1 when the request was answered or
 * suspended, 0 to go on and run the call. */
static int replayed(tfx_req_t *r, tfd_ctx_t *c)
{
    if (!c->request_id_from_client)
        return 0;
    tfd_replay_answer_t ans;
    /* The body as it arrived (a Shumai or safetensors document, or a raw tensor after the
     * header made for it: the same bytes give the same digest). */
    uint64_t digest = tfd_replay_digest(c->api->replay, c->call_base, c->call_len);
    switch (tfd_replay_begin(c->api->replay, c->state_key, c->request_id, c->name, digest, r,
                             &ans)) {
    case TFD_REPLAY_NEW:
        c->replay_owner = 1;
        return 0;
    case TFD_REPLAY_DONE:
        tfx_req_add_header(r, "Tfetch-Replayed", "1");
        if (ans.code == TFP_OK && ans.is_request) {
            /* An echo: its answer was its request's bytes, and this retry's body has their
             * digest, so it is answered with its own body (the window kept none). */
            tfp_err_t err;
            const uint8_t *base = c->call_base;
            int lent = c->body_give_back != NULL;  /* a heap buffer goes with a failure */
            if (base && !(ans.body = body_as_blob(r, c)) && lent)
                ans.body = tfd_blob_copy(base, c->call_len, 0, &err);
            if (!ans.body) {
                api_fail(r, c, TFP_ENOMEM, "out of memory");
                return 1;
            }
        }
        if (ans.code != TFP_OK)
            tfx_respond_error(r, ans.code, "%s", ans.msg);  /* counted once, when it ran */
        else if (ans.body->doc)
            api_serve_blob(r, c, ans.body);
        else
            api_respond_blob(r, ans.status, ans.content_type, ans.body);
        return 1;
    case TFD_REPLAY_WAIT:
        c->replay_waiting = 1;
        if (!tfx_req_may_wait(r)) {
            tfx_req_decline(r, "request id '%s' is running already; a request over this "
                            "transport cannot wait for it", c->request_id);
            return 1;
        }
        tfx_req_suspend(r);
        return 1;
    case TFD_REPLAY_CONFLICT:
        api_fail(r, c, TFP_EUNPROC, "request id '%s' was already used for another route",
                 c->request_id);
        return 1;
    case TFD_REPLAY_MISMATCH:                       /* as the IETF Idempotency-Key draft */
        api_fail(r, c, TFP_EUNPROC, "request id '%s' was already used with a different body: "
                 "a retry must resend the same request (use a new id for a new one)",
                 c->request_id);
        return 1;
    default:                                        /* full: run without a retry guarantee */
        tfd_log(LOG_WARNING, "replay window full: request %s runs without retry protection",
                c->request_id);
        return 0;
    }
}

/* Lets go of the route found for the call (a plugin's may be unloading: SIGHUP waits for
 * this), once its start answered or its pending call is over. */
static void route_done(tfd_ctx_t *c)
{
    if (c->call_held) {
        c->call_held = 0;
        tfd_route_ops_release(&c->call_ops);
    }
}

void api_handle_call(tfx_req_t *r, tfd_ctx_t *c)
{
    const tfd_api_t *s = c->api;
    if (c->call) {                                  /* resumed */
        if (atomic_load(&c->call_done))
            respond_call(r, c);
        else
            tfx_req_suspend(r);                     /* spurious wake-up */
        return;
    }
    if (!c->call_in &&
        api_body_doc(r, c, &c->call_base, &c->call_cap, &c->call_len, &c->call_in) != 0)
        return;
    if (replayed(r, c))
        return;

    tfd_route_ops_t ops;
    if (tfd_routes_find(s->routes, c->name, &ops) != 0) {
        api_fail(r, c, TFP_ENOTFOUND, "no route named '%s'", c->name);
        goto abandon;
    }
    c->call_ops = ops;
    c->call_held = 1;
    if (!tfx_req_may_wait(r) && strcmp(ops.kind, "worker") == 0) {
        tfx_req_decline(r, "route '%s' answers later, from a worker, and a request over this "
                        "transport cannot wait: it goes over UCX or HTTP", c->name);
        goto release;
    }
    tfd_call_t *call = tfd_call_new(c->name, c->state_key, c->request_id, c->call_in);
    if (!call) {
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        goto release;
    }
    call->in_bytes = c->call_base;
    call->in_len = c->call_len;
    if (c->op->body.kind == TFP_BODY_SHUMAI) {
        /* Workers read safetensors: re-encode the one tensor for them. */
        tfp_err_t err;
        if (strcmp(ops.kind, "worker") == 0 && !(c->call_st = api_encode_blob(c->call_in, &err))) {
            tfd_call_free(call);
            api_fail(r, c, err.code, "%s", err.msg);
            goto release;
        }
        call->in_bytes = c->call_st ? c->call_st->data : NULL;
        call->in_len = c->call_st ? c->call_st->len : 0;
    }
    call->on_finish = on_call_finished;
    call->on_finish_arg = r;
    call->sessions = s->sessions;
    c->call = call;
    if (!ops.stateless) {
        call->session = tfd_sessions_acquire(s->sessions, c->state_key);
        if (!call->session) {
            route_done(c);
            tfd_call_fail(call, TFP_EBUSY, "too many user sessions (max-sessions %u, all in use)",
                          TFD_LIVE(s->cfg->max_sessions));
            respond_call(r, c);
            return;
        }
    }
    int rc = ops.start(ops.arg, call);
    if (rc == TFD_CALL_DONE) {
        tfd_sessions_release(s->sessions, call->session);
        call->session = NULL;
        route_done(c);
        respond_call(r, c);
    } else {
        c->call_pending = 1;
        tfx_req_suspend(r);
    }
    return;
release:
    route_done(c);
abandon:
    if (c->replay_owner) {
        tfd_replay_abandon(s->replay, c->state_key, c->request_id);
        c->replay_owner = 0;
    }
}

void api_finish_call(tfx_req_t *r, tfd_ctx_t *c)
{
    const tfd_api_t *s = c->api;
    if (c->replay_waiting)
        tfd_replay_forget_waiter(s->replay, r);
    tfd_blob_unref(c->call_st);
    if (c->replay_owner)
        tfd_replay_abandon(s->replay, c->state_key, c->request_id);
    if (c->call) {
        /* A pending call may still sit with its route (the client went away first): the
         * route lets go of it before it is freed. */
        if (c->call_pending && c->call_ops.cancel)
            c->call_ops.cancel(c->call_ops.arg, c->call);
        tfd_sessions_release(s->sessions, c->call->session);
        tfd_call_free(c->call);
    }
    route_done(c);
    tfp_doc_free(c->call_in);
    if (c->body_give_back) {                    /* a same-host call's memfd (shm) */
        c->body_give_back(c->body_give_back_arg);
        c->body_give_back = NULL;
    } else {
        tfx_buf_free(c->call_base, c->call_cap);
    }
}

void api_handle_session_end(tfx_req_t *r, tfd_ctx_t *c)
{
    if (tfd_sessions_end(c->api->sessions, c->state_key) == 0)
        tfx_respond(r, 204, NULL, "", 0, NULL, NULL);
    else
        api_fail(r, c, TFP_ENOTFOUND, "user '%s' has no session", c->user[0] ? c->user : "");
}
