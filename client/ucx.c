/* ucx.c - the UCX path, the client's transport reached by an upgrade (tfi_ucx): each
 * origin's connection (transports/ucx_client, made with the server's answer to POST
 * /v1/upgrade), a request UCX can carry sent over it, its completion drained and recorded
 * like an HTTP response, a transport failure turned into a retry over HTTP (policy auto) or
 * a failure, and the transport's teardown when the client is freed. The only file of
 * client/ that knows UCX: built without it, tfi_ucx is NULL and the client behaves as one
 * whose UCX cannot start.
 *
 * The transport (a UCX context, worker and progress thread) starts at the client's first
 * upgrade. Completions come back through tfx_ucxc_next, which the driving thread drains
 * after every wait of the HTTP engine (the UCX progress thread ends that wait with
 * tfi_wakeup). A tf_fetch_t holds either an engine request (HTTP) or a UCX request
 * (f->treq), never both.
 */
#include "config.h"

#include "client/internal.h"
#include "proto/strcopy.h"

#ifdef HAVE_UCX
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/safetensors.h"
#include "proto/ucxframe.h"
#include "transports/buf.h"
#include "transports/ucx_client.h"

#define UCX_CONNECT_TIMEOUT_MS 2000L    /* the UCX endpoint and its HELLO */
/* How long a request waits for a new connection's HELLO to be answered before it goes on
 * without it (the connection keeps trying beside it, up to UCX_CONNECT_TIMEOUT_MS): on one
 * host an answer takes 1-3 ms, across a LAN a few more; a firewall that drops UCX's ports
 * never answers, and no request may wait out a timeout to find that out. */
#define UCX_CONFIRM_MS 50L
#define CLOSE_DRAIN_MS 1000L            /* tf_client_free waits this long for UCX requests */
/* A blocking call drives the worker itself: busily for DRIVE_SPIN_US (a small round trip
 * over shared memory takes 1-3 us when the server is awake; waking a sleeping thread costs
 * 10-30 us here, bench/README.md, issue 9), then asleep on the worker's event fd, which
 * leaves the CPU to the server on a busy machine, for DRIVE_WAIT_MS in all; a request
 * still out then completes through the progress thread while the client sleeps as usual,
 * so HTTP transfers and feeds wait DRIVE_WAIT_MS at most. */
#define DRIVE_SPIN_US 50L
#define DRIVE_WAIT_MS 20L

/* ---- connections --------------------------------------------------------------------------- */

/* From the UCX progress thread: a completion is queued; end the driving thread's wait. */
static void ucx_wake(void *arg)
{
    tfi_wakeup(arg);
}

/* o's connection, made: it carries o's requests from now on. */
static void adopt(origin_t *o, tfx_ucxc_conn_t *conn, long server_pid)
{
    if (server_pid > 0)
        tfx_ucxc_conn_watch_pid(conn, server_pid);
    o->conn = conn;
    tfp_strcpy(o->transport, sizeof(o->transport), tfx_ucxc_conn_transport(conn));
    tfi_up_connected(o);
}

/* Whether UCX may use shared memory with o's server: not when the server runs as another
 * uid (its shm socket says which, SO_PEERCRED). UCX's same-host transports all need to
 * attach the peer's memory (sysv shmat, posix files, cma's process_vm_readv), which the
 * kernel refuses across uids: UCX would fail the connection after logging errors on both
 * sides, so the client's UCX goes without them (TCP on one host) and the bytes of gets and
 * puts go over the daemon's own shm socket (shm/memfd), which needs no such rights. */
static int other_uid(const origin_t *o, const tfp_up_resp_t *resp, uid_t *uid)
{
    return resp->same_host && tfi_shm_peer_uid(o, uid) == 0 && *uid != geteuid();
}

/* Starts the transport at the first upgrade, then connects o presenting the server's
 * one-time token; waits UCX_CONFIRM_MS for the answer, then leaves it pending. */
static int ucx_connect(tf_client_t *c, origin_t *o, const tfp_up_resp_t *resp)
{
    tfp_err_t err;
    char ident[TFP_UP_MAX_IDENT + 1 + 1 + TFP_AUTH_PROOF_LEN];
    char why[256] = "";
    uid_t uid = 0;
    int no_shm = other_uid(o, resp, &uid);

    if (!c->up_state && !(c->up_state = tfx_ucxc_new_tuned(ucx_wake, c, no_shm, &err))) {
        snprintf(c->up_dead, sizeof(c->up_dead), "UCX does not start in this process: %.120s",
                 err.msg);
        tfi_up_failed(o, "%s", c->up_dead);
        return -1;
    }
    if (no_shm && !tfx_ucxc_no_shm(c->up_state)) {
        tfi_up_failed(o, "tfetchd runs as uid %u, another than this process's, and this "
                      "client's UCX started with shared memory for an earlier server",
                      (unsigned)uid);
        return -1;
    }
    if (tfp_up_ident_format(&c->host, ident, sizeof(ident), &err) != TFP_OK) {
        tfi_up_failed(o, "cannot tell this host's identity: %s", err.msg);
        return -1;
    }
    if (c->token) {                 /* the token is bound to our principal: prove it */
        uint8_t h[TFP_AUTH_HASH_LEN];
        size_t n = strlen(ident);
        tfp_auth_hash(c->token, strlen(c->token), h);
        ident[n] = ' ';
        tfp_auth_hello_proof(h, resp->token, ident + n + 1);
    }
    tfx_ucxc_conn_t *conn = NULL;
    tfp_status_t st = tfx_ucxc_connect_start(c->up_state, resp->worker_address,
                                             resp->worker_address_len, resp->same_host,
                                             resp->token, ident, UCX_CONFIRM_MS,
                                             UCX_CONNECT_TIMEOUT_MS, &conn, why, sizeof(why));
    long pid = resp->same_host ? (long)resp->server_pid : 0;
    if (st == TFP_EAGAIN) {
        o->pending = conn;
        o->pending_pid = pid;
        snprintf(o->why, sizeof(o->why), "UCX is still connecting (its HELLO unanswered after "
                 "%ld ms; it goes on trying beside this request)", UCX_CONFIRM_MS);
        return 1;
    }
    if (st != TFP_OK) {
        tfi_up_failed(o, "cannot connect over UCX: %s", why[0] ? why : tfp_status_text(st));
        return -1;
    }
    adopt(o, conn, pid);
    return 0;
}

static int ucx_settle(tf_client_t *c, origin_t *o, long wait_ms)
{
    (void)c;
    if (!o->pending)
        return o->conn ? 0 : -1;
    char why[256] = "";
    tfp_status_t st = tfx_ucxc_conn_settle(o->pending, wait_ms, why, sizeof(why));
    if (st == TFP_EAGAIN)
        return 1;
    tfx_ucxc_conn_t *conn = o->pending;
    o->pending = NULL;
    if (st != TFP_OK) {
        tfx_ucxc_conn_close(conn);
        tfi_up_failed(o, "cannot connect over UCX: %s", why[0] ? why : tfp_status_text(st));
        return -1;
    }
    adopt(o, conn, o->pending_pid);
    return 0;
}

static int ucx_broken(const origin_t *o)
{
    return tfx_ucxc_conn_broken(o->conn);
}

static int ucx_has_feature(const origin_t *o, const char *word)
{
    return o->conn && tfx_ucxc_conn_feature(o->conn, word);
}

/* Closes o's connection: its unfinished requests complete with a transport failure. */
static void ucx_disconnect(origin_t *o)
{
    if (o->pending) {
        tfx_ucxc_conn_close(o->pending);
        o->pending = NULL;
    }
    if (o->conn) {
        tfx_ucxc_conn_close(o->conn);
        o->conn = NULL;
        o->transport[0] = '\0';
    }
}

/* ---- requests over UCX --------------------------------------------------------------------- */
/* A request UCX can carry is one active message: its operation rendered as a tfp_uf frame
 * (op, request id, user, name, wait) and the rendered body's segments (the encoded
 * safetensors header plus each tensor's bytes), lent to the transport until it completes.
 * Completions come back through tfx_ucxc_next, drained by the driving thread after every
 * wait of the engine (the progress thread wakes it), and are recorded as HTTP's would be:
 * the server's status, its HTTP status (the frame's http), its message, the reply decoded
 * in place. A transport failure drops the connection (with a backoff) and, under policy
 * auto, sends the request again over HTTP with the same id and body. */

static tfp_uf_op_t frame_op(int op)
{
    switch (op) {
    case TF_OP_PUT: return TFP_UF_PUT;
    case TF_OP_DELETE: return TFP_UF_DELETE;
    case TF_OP_EXCHANGE: return TFP_UF_CALL;
    default: return TFP_UF_GET;
    }
}

/* A feed call (TFI_OP_CALL with its FEED frame, feed.c): the frame's block as feed.c built
 * it, the wait, a JSON body (a declaration) as one segment. Checked here, so a frame the
 * server would drop never reaches the wire (the request goes over HTTP instead). */
static tf_status_t feed_frame(tf_fetch_t *f, tfp_uf_hdr_t *h, const void **seg, size_t *len)
{
    const tfi_op_t *op = &f->op;
    tfp_err_t err;

    h->op = TFP_UF_FEED;
    h->flags = TFP_UF_F_FEED;
    h->feed = op->feed;
    if (op->feed_wait_ms > 0)
        h->wait_ms = op->feed_wait_ms > (long)UINT32_MAX ? UINT32_MAX : (uint32_t)op->feed_wait_ms;
    if (op->json) {
        *seg = op->json;
        *len = strlen(op->json);
        h->body_len = *len;
        h->feed.flags |= TFP_UF_FF_JSON;
    } else if ((h->feed.op == TFP_UF_FEED_INFEED || h->feed.op == TFP_UF_FEED_OUTFEED_PUSH) &&
               tfi_shm_staged(f->origin, op->body, f->op.staged)) {
        /* The document lies in this server's staging buffer: say where (it copies it). */
        *seg = f->op.staged;
        *len = TFP_SF_STAGED_LEN;
        h->body_len = *len;
        h->feed.flags |= TFP_UF_FF_STAGED;
    }
    if (tfp_uf_check(h, &err) != TFP_OK)
        return tfi_rfail(&f->result, TF_EINVAL, "feed request has no UCX frame: %s", err.msg);
    return TF_OK;
}

/* A get's, put's or delete's conditions block, to a server that takes one: its conditions,
 * TTL and range; an empty one still asks for the reply's (its ETag). */
static void cond_frame(const tf_fetch_t *f, tfp_uf_hdr_t *h)
{
    const tfi_op_t *op = &f->op;
    if ((op->kind != TF_OP_GET && op->kind != TF_OP_PUT && op->kind != TF_OP_DELETE) ||
        !ucx_has_feature(f->origin, TFP_UF_FEATURE_COND))
        return;
    h->flags |= TFP_UF_F_COND;
    tfp_strcpy(h->cond.if_match, sizeof(h->cond.if_match), op->cond.if_match);
    tfp_strcpy(h->cond.if_none_match, sizeof(h->cond.if_none_match), op->cond.if_none_match);
    h->cond.ttl_s = op->cond.ttl_s;
    if (op->cond.range) {
        h->cond.flags = TFP_UF_CF_RANGE;
        h->cond.first = op->cond.first;
        h->cond.last = op->cond.last;
    }
}

/* Renders f's operation as a frame (op, request id, user, name, wait) and sends it over its
 * origin's connection with the body's segments. On failure f->result says why. */
static tf_status_t ucx_start(tf_client_t *c, tf_fetch_t *f)
{
    const tfi_op_t *op = &f->op;
    origin_t *o = f->origin;
    tfp_uf_hdr_t h;
    const void *jseg = NULL;
    size_t jlen = 0;

    tfp_uf_init(&h, frame_op(op->kind), 0);
    tfp_strcpy(h.request_id, sizeof(h.request_id), op->request_id);
    tfp_strcpy(h.user, sizeof(h.user), op->user);
    tfp_strcpy(h.name, sizeof(h.name), op->name);
    if (op->kind == TF_OP_GET && op->wait_ms > 0)
        h.wait_ms = op->wait_ms > (long)UINT32_MAX ? UINT32_MAX : (uint32_t)op->wait_ms;
    h.body_len = op->body_len;
    cond_frame(f, &h);
    if (op->kind == TFI_OP_CALL && feed_frame(f, &h, &jseg, &jlen) != TF_OK)
        return TF_EINVAL;
    /* The server's time: its timing block, or from a server before it, the answer lines. */
    if (ucx_has_feature(o, TFP_UF_FEATURE_TIMING))
        h.flags |= TFP_UF_F_TIMING;
    else if (ucx_has_feature(o, TFP_UF_FEATURE_ANSWER))
        h.flags |= TFP_UF_F_ANSWER;
    /* The digest headers HTTP sends (section 2.5) ride the answer lines both ways. */
    int want = c->verify && op->kind == TF_OP_GET;
    if ((want || op->digest[0]) && ucx_has_feature(o, TFP_UF_FEATURE_DIGEST)) {
        h.flags |= TFP_UF_F_ANSWER;
        if (want)
            snprintf(h.answer, sizeof(h.answer), "Want-Repr-Digest: sha-256=1\n");
        else
            snprintf(h.answer, sizeof(h.answer), "Repr-Digest: %s\n", op->digest);
    }
    tfx_ucxc_req_t *ur = NULL;
    /* A blocking call sends it itself, from its wait (ucx_wait). A transfer whose progress
     * is drawn goes in parts, which UCX reports as they go (one rendezvous reports none). */
    int flags = f->blocking ? TFX_UCXC_DRIVEN : 0;
    if (c->progress && !f->background && !jseg)
        flags |= TFX_UCXC_PARTS;
    tfx_ucxc_set_stall(c->up_state, c->stall_rate, c->stall_ms);
    tfx_ucxc_set_max_body(c->up_state, c->max_body);
    tfp_status_t st = jseg ? tfx_ucxc_start(o->conn, &h, &jseg, &jlen, 1, tfi_remaining_ms(f),
                                            flags, f, &ur)
                           : tfx_ucxc_start(o->conn, &h, op->segs, op->lens, op->nsegs,
                                            tfi_remaining_ms(f), flags, f, &ur);
    if (st == TFP_EBUSY)            /* broken since tfi_choose looked (upgrade.c's words) */
        return tfi_rfail(&f->result, TF_EIO, "the UCX connection failed (%s) as the request "
                         "started%s", o->transport, f->policy == TF_TRANSPORT_UCX
                         ? " (transport policy ucx: not retried over HTTP)" : "");
    if (st != TFP_OK)
        return tfi_rfail(&f->result, TF_EIO, "cannot send over UCX (%s): %s", o->transport,
                         tfp_status_text(st));
    f->treq = ur;
    f->conn_gen = o->conn_gen;
    f->via = tfi_ucx;
    tfp_strcpy(f->result.transport, sizeof(f->result.transport), o->transport);
    c->nup++;
    if (op->body_len && !f->background)     /* the bar starts; ucx_done ends it */
        (void)tfi_progress(c, 0, 0, 0, op->body_len);
    return TF_OK;
}

/* 1 if a transport failure's text says it ran out of time. */
static int is_timeout(const char *why)
{
    return strstr(why, "timed out") || strstr(why, "timeout") || strstr(why, "Timeout") ||
           strstr(why, "no UCX reply within") || strstr(why, "stalled");
}

/* The transport failed f (why): drop the connection it went over, then retry over HTTP
 * (policy auto, time permitting) or fail. */
static void ucx_failed(tf_client_t *c, tf_fetch_t *f, const char *why)
{
    origin_t *o = f->origin;
    tf_result_t *res = &f->result;
    if (o && o->conn && o->conn_gen == f->conn_gen) {
        ucx_disconnect(o);
        tfi_up_failed(o, "the UCX connection failed: %s", why);
    }
    if (f->policy != TF_TRANSPORT_AUTO) {
        tfi_rfail(res, is_timeout(why) ? TF_ETIMEDOUT : TF_EIO,
                  "over %s: %s (transport policy ucx: not retried over HTTP)", res->transport, why);
        tfi_complete_fetch(c, f);
        return;
    }
    if (f->total_ms > 0) {
        long timeout = f->total_ms - (long)(tfx_since_s(f->t0_ns) * 1000.0);
        if (timeout <= 0) {
            tfi_rfail(res, TF_ETIMEDOUT, "timed out over %s: %s", res->transport, why);
            tfi_complete_fetch(c, f);
            return;
        }
    }
    snprintf(res->fallback, sizeof(res->fallback), "UCX failed (%.120s); retried over HTTP",
             why);
    if (tfi_http.start(c, f) != TF_OK)
        tfi_complete_fetch(c, f);
}

/* A feed call's body kept as text (NUL-terminated; "" for none), as http.c keeps it. */
static void feed_text(tf_fetch_t *f, uint8_t **body, size_t *cap, size_t len)
{
    if (!*body)
        len = 0;
    char *t;
    if (*cap) {                     /* a reused large buffer: text is malloc'd, as http.c's */
        if ((t = malloc(len + 1)))
            memcpy(t, *body, len);
    } else {
        t = *body ? realloc(*body, len + 1) : malloc(1);
    }
    if (!t) {
        tfi_rfail(&f->result, TF_ENOMEM, NULL);
        return;
    }
    if (*cap)
        tfx_buf_free(*body, *cap);
    *body = NULL;
    *cap = 0;
    t[len] = '\0';
    f->text = t;
    f->text_len = len;
}

/* A range get's reply (tf_get_range), as http.c's finish_range takes it: the bytes asked
 * for in f->text, the document's size in f->reply. The reply's block must say it holds
 * exactly those bytes. */
static void range_reply(tf_fetch_t *f, const tfx_ucxc_result_t *u, uint8_t **body,
                        size_t *cap)
{
    const tfp_uf_cond_t *b = &u->reply.cond;
    int has = (u->reply.flags & TFP_UF_F_COND) && (b->flags & TFP_UF_CF_RANGE);
    if (has) {
        f->reply.has_total = 1;
        f->reply.total = b->total;
    }
    if (f->result.status != TF_OK)
        return;
    if (!has || b->first != f->op.cond.first || b->first == UINT64_MAX ||
        b->last - b->first + 1 != u->body_len || u->reply.http != 206) {
        tfi_rfail(&f->result, TF_EPROTO, "the server's reply does not hold the range asked "
                  "for (HTTP %u, %zu bytes)", (unsigned)u->reply.http, u->body_len);
        return;
    }
    feed_text(f, body, cap, u->body_len);
}

/* Records a UCX reply in f as an HTTP response would be, decoding a document. *body (of
 * capacity *cap, as tfx_ucxc_result_t's) is taken, and set to NULL, when f keeps it. */
static void ucx_reply(tf_client_t *c, tf_fetch_t *f, const tfx_ucxc_result_t *u,
                      uint8_t **body, size_t *cap)
{
    tf_result_t *res = &f->result;
    tf_status_t st = tfi_from_proto(u->reply.status);
    tfp_err_t err;
    tfp_status_t pst;
    tfp_doc_t *d = NULL;
    int call = f->op.kind == TFI_OP_CALL;

    tfp_answer_t ans = {0};
    tfp_answer_from_reply(&u->reply, &ans);     /* the typed fields the frame carried */
    tfi_take_answer(f, &ans);
    res->http_status = (int)u->reply.http;
    if (u->reply.request_id[0])
        tfp_strcpy(res->request_id, sizeof(res->request_id), u->reply.request_id);
    res->bytes_received = u->body_len;
    if (st == TF_OK && u->reply.http == 304 && f->op.kind == TF_OP_GET &&
        f->op.cond.if_none_match[0]) {
        tfi_rfail(res, TF_ENOTMODIFIED, "not modified: the stored version is still %s",
                  res->etag[0] ? res->etag : f->op.cond.if_none_match);
        return;
    }
    if (f->op.cond.range) {
        if (st != TF_OK)
            tfi_rfail(res, st, "%s", u->reply.msg[0] ? u->reply.msg : tf_strerror(st));
        else
            res->status = TF_OK;
        range_reply(f, u, body, cap);
        return;
    }
    if (st != TF_OK) {
        tfi_rfail(res, st, "%s", u->reply.msg[0] ? u->reply.msg : tf_strerror(st));
        return;
    }
    if (res->http_status < 200 || res->http_status > 299) {
        /* An answer passed on as it was given (a worker's error): its body says what. */
        tfi_error_body(res, res->http_status, *body, u->body_len);
        if (call && *body)          /* the feed API reads some error bodies (410) */
            feed_text(f, body, cap, u->body_len);
        return;
    }
    if (c->max_body > 0 && u->body_len > c->max_body) {
        tfi_rfail(res, TF_ETOOBIG, "the response body (%zu bytes) exceeds the cap of %" PRIu64
                  " bytes", u->body_len, c->max_body);
        return;
    }
    res->status = TF_OK;
    if (call && (u->body_len == 0 || (u->reply.feed.flags & TFP_UF_FF_JSON))) {
        feed_text(f, body, cap, u->body_len);
        return;
    }
    if (f->op.kind != TF_OP_GET && f->op.kind != TF_OP_EXCHANGE && !call)
        return;
    if (!*body || u->body_len == 0) {
        tfi_rfail(res, TF_EPROTO, "empty response body");
    } else if ((pst = tfp_st_decode(*body, u->body_len, NULL, &d, &err)) != TFP_OK) {
        if (pst == TFP_ENOMEM)
            tfi_rfail(res, TF_ENOMEM, NULL);      /* not a bad response */
        else
            tfi_rfail(res, TF_EPROTO, "bad safetensors response: %s", err.msg);
    } else if ((st = tfi_doc_wrap(d, *body, &f->doc)) != TF_OK) {
        tfp_doc_free(d);
        tfi_rfail(res, st, NULL);
    } else {
        f->doc->buf_cap = *cap;         /* tf_doc_free gives a reused buffer back */
        f->doc->raw = *body;
        f->doc->raw_len = u->body_len;
        *body = NULL;                   /* the document's storage now */
        *cap = 0;
    }
}

/* A UCX request of f completed. */
static void ucx_done(tf_client_t *c, tf_fetch_t *f, tfx_ucxc_req_t *ur)
{
    tfx_ucxc_result_t *u = tfx_ucxc_req_result(ur);
    uint8_t *body = u->body;
    size_t cap = u->body_cap;
    u->body = NULL;
    u->body_cap = 0;
    f->treq = NULL;
    f->via = NULL;
    c->nup--;
    f->result.bytes_sent = u->bytes_sent;
    uint64_t t_dec = tfx_now_ns();      /* the answer is in: decoding starts */
    f->result.seconds = (double)(t_dec - f->t0_ns) / 1e9;
    if (f->canceled || c->closing) {
        tfi_rfail(&f->result, TF_ECANCELED, "request canceled");
    } else if (u->transport_status == TFP_ETOOBIG) {     /* refused by the cap: not a failure */
        tfi_rfail(&f->result, TF_ETOOBIG, "%s", u->why);
    } else if (u->transport_status != TFP_OK) {
        char why[sizeof(u->why)];
        snprintf(why, sizeof(why), "%s",
                 u->why[0] ? u->why : tfp_status_text(u->transport_status));
        tfx_buf_free(body, cap);
        tfx_ucxc_req_free(ur);
        ucx_failed(c, f, why);
        return;
    } else {
        tf_stages_t *sg = &f->result.stages;
        sg->connect = 0;                /* the connection was there (its making: upgrade) */
        sg->send = u->t_sent * 1000.0;
        sg->receive = u->t_reply > 0 && u->seconds > u->t_reply
                          ? (u->seconds - u->t_reply) * 1000.0 : 0;    /* its body after */
        ucx_reply(c, f, u, &body, &cap);
        f->t_done_ns = tfx_now_ns();
        sg->decode = (double)(f->t_done_ns - t_dec) / 1e6;
        /* The bar the caller draws shows it whole now (parts reported on the way). */
        if (f->result.status == TF_OK && !f->background)
            (void)tfi_progress(c, f->result.bytes_received, f->result.bytes_received,
                               f->result.bytes_sent, f->result.bytes_sent);
    }
    tfx_buf_free(body, cap);
    tfx_ucxc_req_free(ur);
    tfi_complete_fetch(c, f);
}

/* ---- the transport ------------------------------------------------------------------------ */

/* The transport holds f's buffers until it completes: f completes then, with TF_ECANCELED. */
static void ucx_cancel(tf_client_t *c, tf_fetch_t *f)
{
    (void)c;
    f->canceled = 1;
}

/* A blocking caller waits for f: it drives the worker itself (sending f first, when it
 * started it), once per request, for DRIVE_WAIT_MS at most (and at most ms); what is
 * still out then completes through the progress thread while the client sleeps as usual.
 * Completions it saw are drained next, on this thread, by the client's loop. */
static int ucx_wait(tf_client_t *c, tf_fetch_t *f, long ms)
{
    if (!f->treq || f->drove || !c->up_state)
        return 0;
    f->drove = 1;
    long wait = ms >= 0 && ms < DRIVE_WAIT_MS ? ms : DRIVE_WAIT_MS;
    int done = tfx_ucxc_drive(c->up_state, f->treq, DRIVE_SPIN_US, wait);
    if (done < 0)
        f->drove = 0;               /* drain what is queued first; f may be among it */
    else if (done && f->origin)
        f->origin->caller_driven++;
    return 1;
}

/* The progress of the transfers in flight whose bodies go in parts, to the progress
 * function, when a part went or landed since the last look. A body that moves in one piece
 * reports at its start (ucx_start) and its end (ucx_done). */
static void ucx_report(tf_client_t *c)
{
    unsigned gen = tfx_ucxc_progress_gen(c->up_state);
    if (!c->progress || gen == c->up_progress)
        return;
    c->up_progress = gen;
    for (tf_fetch_t *f = c->live; f; f = f->next) {
        if (!f->treq || f->via != tfi_ucx || f->background || f->done)
            continue;
        uint64_t up, down, down_total;
        tfx_ucxc_req_progress(f->treq, &up, &down, &down_total);
        if (tfi_progress(c, down, down_total, up, f->op.body_len))
            f->canceled = 1;            /* completes canceled (the transport holds it) */
    }
}

/* Completes the requests UCX finished (their callbacks run here). */
static void ucx_drain(tf_client_t *c)
{
    tfx_ucxc_req_t *ur;
    while (c->up_state && (ur = tfx_ucxc_next(c->up_state)))
        ucx_done(c, tfx_ucxc_req_user_data(ur), ur);
    if (c->up_state)
        ucx_report(c);
}

static size_t ucx_running(const tf_client_t *c)
{
    return c->nup;
}

/* tf_client_free: closes every UCX connection, completes their requests (canceled), stops
 * the transport. */
static void ucx_close(tf_client_t *c)
{
    if (!c->up_state)
        return;
    for (origin_t *o = c->origins; o; o = o->next)
        ucx_disconnect(o);
    uint64_t t0 = tfx_now_ms();
    for (;;) {
        ucx_drain(c);
        if (c->nup == 0 || tfx_now_ms() - t0 >= (uint64_t)CLOSE_DRAIN_MS)
            break;
        tfi_wait(c, 100);
    }
    tfx_ucxc_free(c->up_state);
    c->up_state = NULL;
    /* What the transport never gave back: stopped now, it no longer reads the buffers. A
     * callback may free other handles, so the search starts over after each one. */
    while (c->nup > 0) {
        tf_fetch_t *f = c->live;
        while (f && !f->treq)
            f = f->next;
        if (!f)
            break;
        f->treq = NULL;
        f->via = NULL;
        c->nup--;
        tfi_rfail(&f->result, TF_ECANCELED, "request canceled (the client was freed)");
        f->result.seconds = tfx_since_s(f->t0_ns);
        tfi_complete_fetch(c, f);
    }
}

static const tfi_transport_t ucx_transport = {
    .name = "ucx",
    .start = ucx_start,
    .cancel = ucx_cancel,
    .drain = ucx_drain,
    .wait = ucx_wait,
    .running = ucx_running,
    .close = ucx_close,
    .connect = ucx_connect,
    .settle = ucx_settle,
    .broken = ucx_broken,
    .disconnect = ucx_disconnect,
    .has_feature = ucx_has_feature,
};

const tfi_transport_t *const tfi_ucx = &ucx_transport;

const char *tfi_ucx_memory(const tf_client_t *c)
{
    return c->up_state ? tfx_ucxc_memory(c->up_state) : NULL;
}
#else
const tfi_transport_t *const tfi_ucx = NULL;

const char *tfi_ucx_memory(const tf_client_t *c)
{
    (void)c;
    return NULL;
}
#endif
