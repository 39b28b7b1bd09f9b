/* http.c - the HTTP path (tfi_http): a request's operation rendered onto an engine request
 * of transports/http_client (method, URL, request id, user and Accept headers, the rendered
 * body's segments sent from where they are, no concatenation), started on the client's
 * engine, and its response recorded and decoded when the engine completes it. The engine
 * (a libcurl multi handle) is also the client's one poll loop: tfi_wait sleeps on it, and
 * other transports end that sleep with tfi_wakeup.
 *
 * The engine's completions run on the thread driving the client, from inside tfx_hc's
 * dispatch (never inside a libcurl callback, so they may start and cancel requests). The
 * user's progress callback does run inside libcurl, and everything is refused there
 * (c->in_engine).
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

#include <nettle/sha2.h>

#include "client/internal.h"
#include "proto/httpcond.h"
#include "proto/digest.h"

tf_status_t tfi_from_hc(tfx_hc_status_t st)
{
    switch (st) {
    case TFX_HC_OK: return TF_OK;
    case TFX_HC_ENOMEM: return TF_ENOMEM;
    case TFX_HC_EINVAL: return TF_EINVAL;
    case TFX_HC_EURL: return TF_EURL;
    case TFX_HC_ECONNECT: return TF_ECONNECT;
    case TFX_HC_ETIMEDOUT: return TF_ETIMEDOUT;
    case TFX_HC_ECANCELED: return TF_ECANCELED;
    case TFX_HC_ETOOBIG: return TF_ETOOBIG;
    case TFX_HC_EPROTO: return TF_EPROTO;
    case TFX_HC_EIO:
    case TFX_HC_EAGAIN:
        break;
    }
    return TF_EIO;
}

static tf_status_t http_error(tf_result_t *res, const tfx_hc_resp_t *r)
{
    return tfi_error_body(res, r->status, r->body, r->body_len);
}

/* ---- engine requests ------------------------------------------------------------------------ */

static tfx_hc_req_t *acquire_req(tf_client_t *c)
{
    if (c->npool > 0)
        return c->pool[--c->npool];
    tfx_hc_req_t *req = NULL;
    return tfx_hc_req_new(&req) == TFX_HC_OK ? req : NULL;
}

static void release_req(tf_client_t *c, tfx_hc_req_t *req)
{
    tfx_hc_req_reset(req);
    if (c->npool < REQ_POOL_MAX && !c->closing)
        c->pool[c->npool++] = req;
    else
        tfx_hc_req_free(req);
}

static int progress_tramp(uint64_t dn, uint64_t dt, uint64_t un, uint64_t ut, void *ud)
{
    return tfi_progress(ud, dn, dt, un, ut);
}

static const char *method_of(const tfi_op_t *o)
{
    if (o->kind == TFI_OP_CALL)
        return o->method;
    switch (o->kind) {
    case TF_OP_PUT: return "PUT";
    case TF_OP_DELETE: return "DELETE";
    case TF_OP_EXCHANGE: return "POST";
    default: return "GET";
    }
}

/* What the reply should be: a document in the request's format, or JSON. */
static const char *accept_of(const tfi_op_t *op)
{
    switch (op->kind) {
    case TFI_OP_LIST:
    case TFI_OP_INFO:
        return MIME_JSON;
    case TF_OP_GET:
    case TF_OP_EXCHANGE:
        /* Stock Shumai sends no Accept; neither do we in its format. */
        return op->format == TF_FORMAT_SHUMAI ? NULL : MIME_SAFETENSORS;
    default:
        return NULL;
    }
}

/* The URL HTTP asks: the caller's, with the path of a listing or the server info, and the
 * long-poll's wait as a query. Recording TF_EURL when it is not an http(s) URL. */
static tf_status_t render_url(tf_fetch_t *f, char **out)
{
    const tfi_op_t *op = &f->op;
    const char *path = op->kind == TFI_OP_LIST   ? "/v1/tensors"
                       : op->kind == TFI_OP_INFO ? "/v1/info"
                                                 : NULL;
    char query[2 * TFP_MAX_TENSOR_NAME + 64];
    size_t q = 0;
    query[0] = '\0';
    if (op->wait_ms > 0)
        q += (size_t)snprintf(query, sizeof(query), "wait=%ld", op->wait_ms);
    if (op->kind == TFI_OP_LIST) {      /* name characters only: nothing to escape */
        if (op->list.prefix[0])
            q += (size_t)snprintf(query + q, sizeof(query) - q, "%sprefix=%s", q ? "&" : "",
                                  op->list.prefix);
        if (op->list.after[0])
            q += (size_t)snprintf(query + q, sizeof(query) - q, "%safter=%s", q ? "&" : "",
                                  op->list.after);
        if (op->list.limit)
            q += (size_t)snprintf(query + q, sizeof(query) - q, "%slimit=%llu", q ? "&" : "",
                                  (unsigned long long)op->list.limit);
    }
    tfx_hc_status_t xst = tfx_hc_url_build(op->url, path, q ? query : NULL, out);
    if (xst == TFX_HC_OK)
        return TF_OK;
    if (xst == TFX_HC_ENOMEM)
        return tfi_rfail(&f->result, TF_ENOMEM, NULL);
    return tfi_rfail(&f->result, TF_EURL, "bad URL: %s", op->url);
}

/* The op's conditions, lifetime and range as headers (values checked at start). 0, or -1
 * when out of memory. */
static int render_cond(tfx_hc_req_t *req, const tfi_op_t *op)
{
    int bad = 0;
    char v[64];
    if (op->cond.if_match[0])
        bad |= tfx_hc_req_add_header(req, "If-Match", op->cond.if_match) != TFX_HC_OK;
    if (op->cond.if_none_match[0])
        bad |= tfx_hc_req_add_header(req, "If-None-Match", op->cond.if_none_match) !=
               TFX_HC_OK;
    if (op->cond.ttl_s) {
        snprintf(v, sizeof(v), "%llu", (unsigned long long)op->cond.ttl_s);
        bad |= tfx_hc_req_add_header(req, "Tfetch-TTL", v) != TFX_HC_OK;
    }
    if (op->cond.range) {
        if (op->cond.last == UINT64_MAX)
            snprintf(v, sizeof(v), "bytes=%llu-", (unsigned long long)op->cond.first);
        else
            snprintf(v, sizeof(v), "bytes=%llu-%llu", (unsigned long long)op->cond.first,
                     (unsigned long long)op->cond.last);
        bad |= tfx_hc_req_add_header(req, "Range", v) != TFX_HC_OK;
    }
    return bad ? -1 : 0;
}

/* Renders f's operation on f->req: method, URL, ids, Accept, the body's type and segments,
 * timeout (0: none), cap, progress. */
/* A verified get's body against the Repr-Digest the server sent: TF_OK, or TF_EDIGEST. */
static tf_status_t verify_body(tf_result_t *res, const tfx_hc_resp_t *r, int sink_fd)
{
    tfp_digest_t want;
    tfp_err_t err;
    uint8_t got[TFP_DIGEST_LEN];
    const char *repr = tfx_hc_resp_header(r, "Repr-Digest");
    if (!repr[0])
        return tfi_rfail(res, TF_EDIGEST, "the server sent no Repr-Digest to verify the "
                         "document against (a server from before digests?)");
    if (tfp_digest_parse(repr, &want, &err) != TFP_OK || !want.has)
        return tfi_rfail(res, TF_EDIGEST, "the server's Repr-Digest has no sha-256: %s",
                         want.has ? err.msg : "another algorithm only");
    if (!r->sunk)
        tfi_doc_sha256(r->body, r->body_len, got);
    else if (tfi_fd_sha256(sink_fd, r->body_len, got) != 0)  /* streamed into the caller's file */
        return tfi_rfail(res, TF_EIO, "cannot read back the file the reply went to, to verify "
                         "its digest");
    else
        tfi_received_sha256(got);
    if (memcmp(got, want.sha256, TFP_DIGEST_LEN) != 0) {
        char field[TFP_DIGEST_FIELD_MAX];
        tfp_digest_format(got, field, sizeof(field));
        return tfi_rfail(res, TF_EDIGEST, "the %zu bytes received do not match the server's "
                         "Repr-Digest (they are %s): not taken", r->body_len, field);
    }
    return TF_OK;
}

static tf_status_t prepare(tf_fetch_t *f, long timeout)
{
    tf_client_t *c = f->c;
    const tfi_op_t *op = &f->op;
    tfx_hc_req_t *req = f->req;
    const char *accept = accept_of(op);
    char *url = NULL;
    int bad = 0;
    tf_status_t st;

    if ((st = render_url(f, &url)) != TF_OK)
        return st;
    bad |= tfx_hc_req_set_method(req, method_of(op)) != TFX_HC_OK;
    bad |= tfx_hc_req_set_url(req, url) != TFX_HC_OK;
    free(url);
    bad |= tfx_hc_req_add_header(req, "Tfetch-Request-Id", op->request_id) != TFX_HC_OK;
    bad |= tfx_hc_req_add_header(req, "Tfetch-Protocol", c->protocol_text) != TFX_HC_OK;
    if (op->user[0])
        bad |= tfx_hc_req_add_header(req, "Tfetch-User", op->user) != TFX_HC_OK;
    if (op->auth[0])
        bad |= tfx_hc_req_add_header(req, "Authorization", op->auth) != TFX_HC_OK;
    if (accept)
        bad |= tfx_hc_req_add_header(req, "Accept", accept) != TFX_HC_OK;
    bad |= render_cond(req, op) != 0;
    if (op->body || op->body_fd >= 0)
        bad |= tfx_hc_req_add_header(req, "Content-Type", op->format == TF_FORMAT_SHUMAI ?
                                                              MIME_RAW : MIME_SAFETENSORS) !=
               TFX_HC_OK;
    for (size_t i = 0; i < op->nhdrs; i++)
        bad |= tfx_hc_req_add_header(req, op->hdrs[2 * i], op->hdrs[2 * i + 1]) != TFX_HC_OK;
    if (c->verify && op->kind == TF_OP_GET)
        bad |= tfx_hc_req_add_header(req, "Want-Repr-Digest", "sha-256=1") != TFX_HC_OK;
    if (op->digest[0])                  /* a verified put's (fetch.c) */
        bad |= tfx_hc_req_add_header(req, "Repr-Digest", op->digest) != TFX_HC_OK;
    if (op->body_fd >= 0)           /* a file's bytes, read as they are sent */
        bad |= tfx_hc_req_add_body_fd(req, op->body_fd, 0, (size_t)op->body_fd_len) !=
               TFX_HC_OK;
    for (size_t i = 0; op->body_fd < 0 && i < op->nsegs; i++)
        bad |= tfx_hc_req_add_body(req, op->segs[i], op->lens[i]) != TFX_HC_OK;
    tfx_hc_req_set_sink(req, op->sink_fd, MIME_SAFETENSORS);
    if (op->json) {
        bad |= tfx_hc_req_add_header(req, "Content-Type", MIME_JSON) != TFX_HC_OK;
        bad |= tfx_hc_req_add_body(req, op->json, strlen(op->json)) != TFX_HC_OK;
    } else if (op->kind == TFI_OP_CALL && !op->body && strcmp(op->method, "GET") != 0 &&
               strcmp(op->method, "DELETE") != 0) {
        bad |= tfx_hc_req_add_body(req, "", 0) != TFX_HC_OK;    /* an empty POST body */
    }
    if (bad)
        return tfi_rfail(&f->result, TF_ENOMEM, NULL);
    tfx_hc_req_set_timeout(req, timeout);
    tfx_hc_req_set_low_speed(req, (long)c->stall_rate, tfi_stall_seconds(f));
    if (c->max_body > 0)
        tfx_hc_req_set_max_body(req, c->max_body > SIZE_MAX ? SIZE_MAX : (size_t)c->max_body);
    if (c->progress)
        tfx_hc_req_set_progress(req, progress_tramp, c);
    return TF_OK;
}

/* A call's 2xx reply: a document when it is one, else its text ("" for none). */
static void finish_call(tf_fetch_t *f, tfx_hc_req_t *req, const tfx_hc_resp_t *r)
{
    const char *ct = tfx_hc_resp_header(r, "Content-Type");
    int is_doc = r->body_len > 0 &&
                 (strncasecmp(ct, MIME_SAFETENSORS, strlen(MIME_SAFETENSORS)) == 0 ||
                  (tfx_hc_resp_header(r, "Tfetch-Dtype")[0] &&
                   strncasecmp(ct, MIME_RAW, strlen(MIME_RAW)) == 0));
    if (is_doc) {
        tfi_decode_doc(f, req);
        return;
    }
    f->text = (char *)tfx_hc_req_take_body(req, &f->text_len);
    if (!f->text && !(f->text = strdup("")))
        tfi_rfail(&f->result, TF_ENOMEM, NULL);
}

/* A range request's reply (tf_get_range): the bytes asked for in f->text, their place in
 * f->reply. A 206 must say (Content-Range) that it holds exactly the bytes from the offset
 * asked; a 200 holds the whole document, cut here; a 416 says the document's size. */
static void finish_range(tf_fetch_t *f, tfx_hc_req_t *req, const tfx_hc_resp_t *r)
{
    tf_result_t *res = &f->result;
    tfi_reply_t *rp = &f->reply;
    uint64_t a, b, t;
    const char *crange = tfx_hc_resp_header(r, "Content-Range");
    int cr = tfp_content_range_parse(crange, &a, &b, &t) == 0;
    if (r->status == 416 && cr && a == UINT64_MAX) {
        rp->has_total = 1;
        rp->total = t;
    }
    if (r->status < 200 || r->status > 299) {
        http_error(res, r);
        return;
    }
    if (r->status == 206) {
        if (!cr || a != f->op.cond.first || a == UINT64_MAX || b - a + 1 != r->body_len) {
            tfi_rfail(res, TF_EPROTO, "the server's 206 does not hold the range asked for "
                      "(Content-Range '%.60s', %zu bytes)", crange, r->body_len);
            return;
        }
    } else {                            /* 200: the whole document; keep the part asked for */
        t = r->body_len;
        if (f->op.cond.first >= t) {
            rp->has_total = 1;
            rp->total = t;
            tfi_rfail(res, TF_ERANGE, "the range is outside the %llu-byte document",
                      (unsigned long long)t);
            return;
        }
    }
    rp->has_total = 1;
    rp->total = t;
    res->status = TF_OK;
    size_t len = 0;
    uint8_t *body = tfx_hc_req_take_body(req, &len);
    if (!body && !(body = calloc(1, 1))) {
        tfi_rfail(res, TF_ENOMEM, NULL);
        return;
    }
    if (r->status != 206) {             /* cut [first, last] out of the whole */
        uint64_t end = f->op.cond.last >= len - 1 ? len - 1 : f->op.cond.last;
        size_t n = (size_t)(end - f->op.cond.first + 1);
        memmove(body, body + f->op.cond.first, n);
        len = n;
    }
    f->text = (char *)body;
    f->text_len = len;
}

/* Records a completed request in f->result and decodes its reply: TF_OK for a 2xx response
 * (whose body becomes f->doc or f->text), else the transport's or the server's error. */
static void finish(tf_fetch_t *f, tfx_hc_req_t *req, tfx_hc_status_t done)
{
    const tfx_hc_resp_t *r = tfx_hc_req_response(req);
    tf_result_t *res = &f->result;

    const char *v;
    res->http_status = (int)r->status;
    if (f->origin && r->status > 0)
        f->origin->offered = tfi_offers_ucx(tfx_hc_resp_header(r, "Tfetch-Upgrade"));
    if ((v = tfx_hc_resp_header(r, "Tfetch-Transport"))[0])
        snprintf(res->transport, sizeof(res->transport), "%s", v);
    if ((v = tfx_hc_resp_header(r, "Tfetch-Request-Id"))[0])
        snprintf(res->request_id, sizeof(res->request_id), "%s", v);
    res->bytes_sent = r->bytes_sent;
    res->bytes_received = r->body_len;
    if (r->t_total > 0) {               /* libcurl's timings (transports/http_client.h) */
        tf_stages_t *sg = &res->stages;
        /* The request on its way (its body sent, the server's receiving it) up to the answer's
         * head, but the server's own time; then the answer's body. */
        double server = 0;
        if (tfp_answer_has(&r->answer, TFP_AF_SRV_HANDLER))
            server = (double)(r->answer.num[TFP_AF_SRV_HANDLER] +
                              r->answer.num[TFP_AF_SRV_QUEUE]) / 1e6;
        double ready = r->t_pretransfer > r->t_connect ? r->t_pretransfer : r->t_connect;
        sg->connect = r->t_connect * 1000.0;
        sg->send = r->t_head > ready + server ? (r->t_head - ready - server) * 1000.0 : 0;
        sg->receive = r->t_head > 0 && r->t_total > r->t_head
                          ? (r->t_total - r->t_head) * 1000.0 : 0;
    }
    /* The whole request's wall time: an upgrade negotiated before it, or a UCX try that
     * fell back, is part of it (and takes part of its timeout). */
    res->seconds = tfx_since_s(f->t0_ns);

    if (done != TFX_HC_OK) {
        const char *why = tfx_hc_req_error(req);
        tfi_rfail(res, tfi_from_hc(done), "%s", why[0] ? why : tfx_hc_strerror(done));
        return;
    }
    /* A server that speaks none of our versions: its answer is not trusted as data (its
     * /v1/info is what tells a newcomer why, so that one is). */
    if (f->origin && r->status > 0 && f->op.kind != TFI_OP_INFO) {
        char feature[96];
        snprintf(feature, sizeof(feature), "%s %.80s", method_of(&f->op), f->op.name);
        if (tfi_origin_protocol(f->c, f->origin, tfx_hc_resp_header(r, "Tfetch-Protocol"),
                                feature, res) != TF_OK)
            return;
    }
    tfi_take_answer(f, &r->answer);     /* its typed fields: a malformed one is none */
    if (r->status == 304 && f->op.kind == TF_OP_GET && f->op.cond.if_none_match[0]) {
        tfi_rfail(res, TF_ENOTMODIFIED, "not modified: the stored version is still %s",
                  res->etag[0] ? res->etag : f->op.cond.if_none_match);
        return;
    }
    if (f->op.cond.range) {
        finish_range(f, req, r);
        return;
    }
    if (r->status < 200 || r->status > 299) {
        http_error(res, r);
        if (f->op.kind == TFI_OP_CALL)  /* the feed API reads some error bodies (410) */
            f->text = (char *)tfx_hc_req_take_body(req, &f->text_len);
        return;
    }
    if (f->c->verify && f->op.kind == TF_OP_GET && r->status == 200 &&
        verify_body(res, r, f->op.sink_fd) != TF_OK)
        return;
    res->status = TF_OK;
    if (f->op.kind == TFI_OP_CALL)
        finish_call(f, req, r);
    else if (f->op.kind == TF_OP_GET && r->sunk) {
        /* written to the caller's file as it arrived: the caller checks it there (another
         * body was kept, decoded below, and written out at completion, or refused) */
    } else if (f->op.kind == TF_OP_GET || f->op.kind == TF_OP_EXCHANGE) {
        tfi_decode_doc(f, req);
    } else if (f->op.kind == TFI_OP_LIST || f->op.kind == TFI_OP_INFO) {
        f->text = (char *)tfx_hc_req_take_body(req, &f->text_len);
        if (!f->text && !(f->text = strdup("")))
            tfi_rfail(res, TF_ENOMEM, NULL);
    }
}

/* The HTTP engine's completion: record, decode, give the engine request back, complete. */
static void on_req_done(tfx_hc_req_t *req, tfx_hc_status_t xst, void *ud)
{
    tf_fetch_t *f = ud;
    tf_client_t *c = f->c;

    uint64_t t_done = tfx_now_ns();
    finish(f, req, xst);
    f->result.stages.decode = (double)(tfx_now_ns() - t_done) / 1e6;
    f->req = NULL;
    f->via = NULL;
    release_req(c, req);
    tfi_complete_fetch(c, f);
}

/* Starts f over HTTP, within what is left of its time limit. On failure f->result says why
 * and f holds no engine request. */
static tf_status_t http_start(tf_client_t *c, tf_fetch_t *f)
{
    tf_status_t st;
    snprintf(f->result.transport, sizeof(f->result.transport), "http");
    f->rt_ms = -1;                      /* a fallback's: its own stages from here */
    f->result.stages.send = f->result.stages.receive = f->result.stages.decode = -1;
    if (!(f->req = acquire_req(c)))
        return tfi_rfail(&f->result, TF_ENOMEM, NULL);
    if ((st = prepare(f, tfi_remaining_ms(f))) != TF_OK)
        goto release;
    tfx_hc_status_t xst = tfx_hc_start(c->hc, f->req, on_req_done, f);
    if (xst != TFX_HC_OK) {
        st = tfi_rfail(&f->result, tfi_from_hc(xst), "cannot start the request: %s",
                       tfx_hc_strerror(xst));
        goto release;
    }
    f->via = &tfi_http;
    return TF_OK;

release:
    release_req(c, f->req);
    f->req = NULL;
    return st;
}

/* ---- the transport ------------------------------------------------------------------------ */

static int http_open(tf_client_t *c)
{
    return tfx_hc_new(&c->hc) == TFX_HC_OK ? 0 : -1;
}

/* The engine completes a canceled request at once: its callback runs inside. */
static void http_cancel(tf_client_t *c, tf_fetch_t *f)
{
    tfx_hc_cancel(c->hc, f->req);
}

static void http_drain(tf_client_t *c)
{
    tfx_hc_poll(c->hc, 0);
}

static size_t http_running(const tf_client_t *c)
{
    return tfx_hc_running(c->hc);
}

/* Frees the engine (what is pending completes, canceled, and gives its engine request back
 * to the pool), then the pool. */
static void http_close(tf_client_t *c)
{
    tfx_hc_free(c->hc);
    c->hc = NULL;
    for (size_t i = 0; i < c->npool; i++)
        tfx_hc_req_free(c->pool[i]);
    c->npool = 0;
}

const tfi_transport_t tfi_http = {
    .name = "http",
    .open = http_open,
    .start = http_start,
    .cancel = http_cancel,
    .drain = http_drain,
    .running = http_running,
    .close = http_close,
};

void tfi_wait(tf_client_t *c, long ms)
{
    tfx_hc_wait(c->hc, ms);
}

void tfi_wakeup(tf_client_t *c)
{
    tfx_hc_wakeup(c->hc);
}

tf_status_t tfi_set_max_connections(tf_client_t *c, long n)
{
    return tfx_hc_set_max_host_connections(c->hc, n) == TFX_HC_OK ? TF_OK : TF_EINVAL;
}
