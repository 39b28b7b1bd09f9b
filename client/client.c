/* client.c - tf_client_t and the blocking requests: tf_get, tf_put, tf_delete, tf_list,
 * tf_info and tf_fetch.
 *
 * A client owns one HTTP engine (transports/http_client: a libcurl multi handle whose
 * connection cache keeps connections to each origin alive) and one reusable request. Every
 * blocking call is "start the request on the engine, drive the engine until it completes",
 * so an async API is a thin layer over the same engine. Request bodies are sent straight from
 * the document's tensors (header + one segment per tensor, no concatenation); response bodies
 * become the storage of the returned document (decoded in place, no copy). The client also
 * keeps the user id, the request id for the next request, the timeout and the outcome of the
 * last request (tf_client_last). One thread at a time per client.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "client/internal.h"
#include "proto/ids.h"
#include "proto/jsonread.h"
#include "proto/raw.h"
#include "proto/safetensors.h"
#include "transports/http_client.h"

#define DEFAULT_TIMEOUT_MS 60000L
#define MIME_SAFETENSORS "application/x-safetensors"
#define MIME_JSON "application/json"
#define MIME_RAW "application/octet-stream"

struct tf_client {
    tfx_hc_t *hc;
    tfx_hc_req_t *req;                 /* reused by every blocking call */
    char *user;                     /* Tfetch-User, or NULL */
    char next_rid[TFP_MAX_REQUEST_ID + 1];  /* "" when the client makes one */
    char rid_prefix[17];            /* 16 random hex digits */
    uint64_t rid_seq;
    long timeout_ms;
    uint64_t max_body;
    tf_progress_fn progress;
    void *progress_ud;
    tf_result_t last;
};

/* ---- handle ------------------------------------------------------------------------------ */

static void make_rid_prefix(char out[17])
{
    uint8_t r[8];
    ssize_t got = getrandom(r, sizeof(r), GRND_NONBLOCK);
    if (got != (ssize_t)sizeof(r)) {
        /* No entropy yet (early boot): the ids still only need to be unique. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                     ((uint64_t)getpid() << 16) ^ (uint64_t)(uintptr_t)out;
        memcpy(r, &x, sizeof(r));
    }
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
}

tf_status_t tf_client_new(tf_client_t **out)
{
    if (!out)
        return TF_EINVAL;
    tf_client_t *c = calloc(1, sizeof(*c));
    if (!c)
        return TF_ENOMEM;
    if (tfx_hc_new(&c->hc) != TFX_HC_OK)
        goto free_client;
    if (tfx_hc_req_new(&c->req) != TFX_HC_OK)
        goto free_engine;
    c->timeout_ms = DEFAULT_TIMEOUT_MS;
    make_rid_prefix(c->rid_prefix);
    snprintf(c->last.transport, sizeof(c->last.transport), "http");
    *out = c;
    return TF_OK;

free_engine:
    tfx_hc_free(c->hc);
free_client:
    free(c);
    return TF_ENOMEM;
}

void tf_client_free(tf_client_t *c)
{
    if (!c)
        return;
    tfx_hc_req_free(c->req);
    tfx_hc_free(c->hc);
    free(c->user);
    free(c);
}

tf_status_t tf_client_set_user(tf_client_t *c, const char *user_id)
{
    if (!c)
        return TF_EINVAL;
    if (!user_id) {
        free(c->user);
        c->user = NULL;
        return TF_OK;
    }
    if (!tfp_user_id_valid(user_id))
        return TF_EINVAL;
    char *u = strdup(user_id);
    if (!u)
        return TF_ENOMEM;
    free(c->user);
    c->user = u;
    return TF_OK;
}

tf_status_t tf_client_set_request_id(tf_client_t *c, const char *request_id)
{
    if (!c)
        return TF_EINVAL;
    if (!request_id) {
        c->next_rid[0] = '\0';
        return TF_OK;
    }
    if (!tfp_request_id_valid(request_id) || strlen(request_id) >= sizeof(c->next_rid))
        return TF_EINVAL;
    snprintf(c->next_rid, sizeof(c->next_rid), "%s", request_id);
    return TF_OK;
}

void tf_client_set_timeout(tf_client_t *c, long timeout_ms)
{
    if (c)
        c->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
}

void tf_client_set_progress(tf_client_t *c, tf_progress_fn fn, void *user_data)
{
    if (c) {
        c->progress = fn;
        c->progress_ud = user_data;
    }
}

void tf_client_set_max_body(tf_client_t *c, uint64_t max)
{
    if (c)
        c->max_body = max;
}

const tf_result_t *tf_client_last(const tf_client_t *c)
{
    return c ? &c->last : NULL;
}

/* ---- the outcome of a request ------------------------------------------------------------ */

/* Starts a new tf_client_last record for op and picks the request id it will carry. */
static void begin(tf_client_t *c, const char *op)
{
    memset(&c->last, 0, sizeof(c->last));
    c->last.status = TF_OK;
    snprintf(c->last.op, sizeof(c->last.op), "%s", op);
    snprintf(c->last.transport, sizeof(c->last.transport), "http");
    if (c->next_rid[0]) {
        snprintf(c->last.request_id, sizeof(c->last.request_id), "%s", c->next_rid);
        c->next_rid[0] = '\0';
    } else {
        snprintf(c->last.request_id, sizeof(c->last.request_id), "%s-%" PRIu64,
                 c->rid_prefix, ++c->rid_seq);
    }
}

/* Records a failure (message printf-style, or the status text when fmt is NULL). */
static tf_status_t fail(tf_client_t *c, tf_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static tf_status_t fail(tf_client_t *c, tf_status_t st, const char *fmt, ...)
{
    c->last.status = st;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->last.error, sizeof(c->last.error), fmt, ap);
        va_end(ap);
    } else {
        snprintf(c->last.error, sizeof(c->last.error), "%s", tf_strerror(st));
    }
    return st;
}

static tf_status_t from_transport(tfx_hc_status_t st)
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
    case TFX_HC_EIO:
    case TFX_HC_EAGAIN:
        break;
    }
    return TF_EIO;
}

/* Copies up to n bytes of a body into the message, printable ASCII only, one line. */
static void body_excerpt(char *dst, size_t size, const uint8_t *body, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < size; i++) {
        unsigned char ch = body[i];
        if (ch == '\n' || ch == '\r')
            break;
        dst[o++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    dst[o] = '\0';
}

/* Turns a non-2xx response into a status: the server's JSON error when it sent one. */
static tf_status_t http_error(tf_client_t *c, const tfx_hc_resp_t *r)
{
    tfp_status_t code = TFP_EINTERNAL;
    char msg[sizeof(c->last.error)];

    if (r->body && r->body_len &&
        tfp_parse_error_body((const char *)r->body, r->body_len, &code, msg,
                             sizeof(msg)) == 0) {
        tf_status_t st = tfi_from_proto(code);
        if (st == TF_OK)
            st = TF_EHTTP;
        return fail(c, st, "%s", msg[0] ? msg : tf_strerror(st));
    }
    char excerpt[160] = "";
    if (r->body)
        body_excerpt(excerpt, sizeof(excerpt), r->body, r->body_len);
    if (excerpt[0])
        return fail(c, TF_EHTTP, "HTTP %ld: %s", r->status, excerpt);
    return fail(c, TF_EHTTP, "HTTP %ld", r->status);
}

/* ---- one blocking request ---------------------------------------------------------------- */

static int progress_tramp(uint64_t dn, uint64_t dt, uint64_t un, uint64_t ut, void *ud)
{
    tf_client_t *c = ud;
    return c->progress(dn, dt, un, ut, c->progress_ud);
}

static void on_done(tfx_hc_req_t *req, tfx_hc_status_t st, void *ud)
{
    *(tfx_hc_status_t *)ud = st;
}

/* Adds the document as the request body: its header, then each tensor's bytes, borrowed.
 * *hdr (the encoded header) must outlive the request. */
static tf_status_t add_doc_body(tf_client_t *c, tfx_hc_req_t *req, const tf_doc_t *doc,
                                void **hdr)
{
    size_t hlen = 0;
    tf_status_t st = tf_doc_encode_header(doc, hdr, &hlen);
    if (st != TF_OK)
        return fail(c, st, "cannot encode the document: %s", tf_strerror(st));
    if (tfx_hc_req_add_body(req, *hdr, hlen) != TFX_HC_OK)
        return fail(c, TF_ENOMEM, NULL);
    for (size_t i = 0; i < tf_doc_count(doc); i++) {
        const tf_tensor_t *t = tf_doc_at(doc, i);
        if (t->nbytes && tfx_hc_req_add_body(req, t->data, t->nbytes) != TFX_HC_OK)
            return fail(c, TF_ENOMEM, NULL);
    }
    return TF_OK;
}

static tf_status_t set_headers(tf_client_t *c, tfx_hc_req_t *req, const char *accept,
                               int has_body)
{
    int bad = 0;
    bad |= tfx_hc_req_add_header(req, "Tfetch-Request-Id", c->last.request_id) != TFX_HC_OK;
    if (c->user)
        bad |= tfx_hc_req_add_header(req, "Tfetch-User", c->user) != TFX_HC_OK;
    if (accept)
        bad |= tfx_hc_req_add_header(req, "Accept", accept) != TFX_HC_OK;
    if (has_body)
        bad |= tfx_hc_req_add_header(req, "Content-Type", MIME_SAFETENSORS) != TFX_HC_OK;
    return bad ? fail(c, TF_ENOMEM, NULL) : TF_OK;
}

/* Describes a request on req: method url, with doc as the body when not NULL, the client's
 * ids, timeout (lengthened by extra_ms, for long polls), cap and progress callback. On
 * success *hdr holds the encoded document header, to free after completion. */
static tf_status_t prepare(tf_client_t *c, tfx_hc_req_t *req, const char *method,
                           const char *url, const tf_doc_t *doc, const char *accept,
                           long extra_ms, void **hdr)
{
    tf_status_t st;

    tfx_hc_req_reset(req);
    if (tfx_hc_req_set_method(req, method) != TFX_HC_OK ||
        tfx_hc_req_set_url(req, url) != TFX_HC_OK)
        return fail(c, TF_ENOMEM, NULL);
    if ((st = set_headers(c, req, accept, doc != NULL)) != TF_OK)
        return st;
    if (doc && (st = add_doc_body(c, req, doc, hdr)) != TF_OK)
        return st;
    long timeout = c->timeout_ms;
    if (timeout > 0 && extra_ms > 0)
        timeout = extra_ms > LONG_MAX - timeout ? LONG_MAX : timeout + extra_ms;
    tfx_hc_req_set_timeout(req, timeout);
    if (c->max_body > 0)
        tfx_hc_req_set_max_body(req, c->max_body > SIZE_MAX ? SIZE_MAX : (size_t)c->max_body);
    if (c->progress)
        tfx_hc_req_set_progress(req, progress_tramp, c);
    return TF_OK;
}

/* Records a completed request in c->last and turns its outcome into a status: TF_OK for a
 * 2xx response (whose body stays in req), else the transport's or the server's error. */
static tf_status_t finish(tf_client_t *c, tfx_hc_req_t *req, tfx_hc_status_t done)
{
    const tfx_hc_resp_t *r = tfx_hc_req_response(req);
    c->last.http_status = (int)r->status;
    if (r->transport[0])
        snprintf(c->last.transport, sizeof(c->last.transport), "%s", r->transport);
    if (r->request_id[0])
        snprintf(c->last.request_id, sizeof(c->last.request_id), "%s", r->request_id);
    c->last.bytes_sent = r->bytes_sent;
    c->last.bytes_received = r->body_len;
    c->last.seconds = r->seconds;

    if (done != TFX_HC_OK) {
        const char *why = tfx_hc_req_error(req);
        return fail(c, from_transport(done), "%s", why[0] ? why : tfx_hc_strerror(done));
    }
    if (r->status < 200 || r->status > 299)
        return http_error(c, r);
    return TF_OK;
}

/* The blocking request: prepare, start on the engine, drive the engine until it completes.
 * Returns TF_OK for a 2xx response, whose body stays in c->req. */
static tf_status_t perform(tf_client_t *c, const char *method, const char *url,
                           const tf_doc_t *doc, const char *accept, long extra_ms)
{
    void *hdr = NULL;
    tfx_hc_status_t done = TFX_HC_EAGAIN;
    tf_status_t st;

    if ((st = prepare(c, c->req, method, url, doc, accept, extra_ms, &hdr)) != TF_OK)
        goto free_hdr;
    tfx_hc_status_t xst = tfx_hc_start(c->hc, c->req, on_done, &done);
    if (xst != TFX_HC_OK) {
        st = fail(c, from_transport(xst), "cannot start the request: %s", tfx_hc_strerror(xst));
        goto free_hdr;
    }
    tfx_hc_drive(c->hc, c->req, -1);
    st = finish(c, c->req, done);

free_hdr:
    free(hdr);
    return st;
}

/* Builds the URL for a request, recording TF_EURL when it is not an http(s) URL. */
static tf_status_t build_url(tf_client_t *c, const char *url, const char *path,
                             const char *query, char **out)
{
    tfx_hc_status_t xst = tfx_hc_url_build(url, path, query, out);
    if (xst == TFX_HC_OK)
        return TF_OK;
    if (xst == TFX_HC_ENOMEM)
        return fail(c, TF_ENOMEM, NULL);
    return fail(c, TF_EURL, "bad URL: %s", url ? url : "(null)");
}

/* The last path segment of url (without query or fragment) into buf; "" if none. */
static void last_segment(const char *url, char *buf, size_t size)
{
    const char *end = url + strcspn(url, "?#");
    const char *p = end;
    while (p > url && p[-1] != '/')
        p--;
    size_t n = (size_t)(end - p);
    if (n >= size)
        n = size - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
}

static int media_is(const char *content_type, const char *mime)
{
    size_t n = strlen(mime);
    return strncasecmp(content_type, mime, n) == 0 &&
           (content_type[n] == '\0' || content_type[n] == ';' || content_type[n] == ' ');
}

/* A raw single-tensor response: the body is the tensor, described by the Tfetch-Dtype and
 * Tfetch-Shape headers; the tensor is named after the URL's last path segment. */
static tf_status_t decode_raw(tf_client_t *c, const char *url, const tfx_hc_resp_t *r,
                              tfp_doc_t **out)
{
    tfp_dtype_t dt;
    int rank = 0;
    uint64_t shape[TFP_MAX_RANK];
    tfp_err_t err;
    char name[TFP_MAX_TENSOR_NAME + 1];

    if (tfp_raw_check(r->dtype, r->shape, r->body_len, &dt, &rank, shape, &err) != TFP_OK)
        return fail(c, TF_EPROTO, "bad raw response: %s", err.msg);
    last_segment(url, name, sizeof(name));
    if (!tfp_name_valid(name))
        snprintf(name, sizeof(name), "tensor");
    tfp_doc_t *d = tfp_doc_new();
    if (!d)
        return fail(c, TF_ENOMEM, NULL);
    if (tfp_doc_add(d, name, dt, rank, shape, r->body, r->body_len, &err) != TFP_OK) {
        tfp_doc_free(d);
        return fail(c, TF_EPROTO, "bad raw response: %s", err.msg);
    }
    *out = d;
    return TF_OK;
}

/* Decodes the response in req into a document that takes over the body buffer. */
static tf_status_t decode_response(tf_client_t *c, tfx_hc_req_t *req, const char *url,
                                   tf_doc_t **out)
{
    const tfx_hc_resp_t *r = tfx_hc_req_response(req);
    tfp_doc_t *d = NULL;
    tfp_err_t err;
    tf_status_t st;

    if (!r->body || r->body_len == 0)
        return fail(c, TF_EPROTO, "empty response body");
    if (media_is(r->content_type, MIME_RAW) && r->dtype[0]) {
        st = decode_raw(c, url, r, &d);
        if (st != TF_OK)
            return st;
    } else if (tfp_st_decode(r->body, r->body_len, NULL, &d, &err) != TFP_OK) {
        return fail(c, TF_EPROTO, "bad safetensors response: %s", err.msg);
    }
    /* The decoded tensors point into the body: hand the buffer to the document. */
    uint8_t *body = tfx_hc_req_take_body(req, NULL);
    st = tfi_doc_wrap(d, body, out);
    if (st != TF_OK) {
        tfp_doc_free(d);
        free(body);
        return fail(c, st, NULL);
    }
    return TF_OK;
}

/* ---- the operations ---------------------------------------------------------------------- */

tf_status_t tf_get(tf_client_t *c, const char *url, long wait_ms, tf_doc_t **out)
{
    char *full = NULL;
    char query[40];
    tf_status_t st;

    if (!c)
        return TF_EINVAL;
    begin(c, "get");
    if (!out || wait_ms < 0)
        return fail(c, TF_EINVAL, NULL);
    if (wait_ms > 0)
        snprintf(query, sizeof(query), "wait=%ld", wait_ms);
    if ((st = build_url(c, url, NULL, wait_ms > 0 ? query : NULL, &full)) != TF_OK)
        return st;
    st = perform(c, "GET", full, NULL, MIME_SAFETENSORS, wait_ms);
    if (st == TF_OK)
        st = decode_response(c, c->req, full, out);
    free(full);
    return st;
}

tf_status_t tf_put(tf_client_t *c, const char *url, const tf_doc_t *in)
{
    char *full = NULL;
    tf_status_t st;

    if (!c)
        return TF_EINVAL;
    begin(c, "put");
    if (!in)
        return fail(c, TF_EINVAL, NULL);
    if ((st = build_url(c, url, NULL, NULL, &full)) != TF_OK)
        return st;
    st = perform(c, "PUT", full, in, NULL, 0);
    free(full);
    return st;
}

tf_status_t tf_delete(tf_client_t *c, const char *url)
{
    char *full = NULL;
    tf_status_t st;

    if (!c)
        return TF_EINVAL;
    begin(c, "delete");
    if ((st = build_url(c, url, NULL, NULL, &full)) != TF_OK)
        return st;
    st = perform(c, "DELETE", full, NULL, NULL, 0);
    free(full);
    return st;
}

/* POST in to url and decode the reply: an exchange with the route the URL names. */
static tf_status_t call(tf_client_t *c, const char *url, const tf_doc_t *in, tf_doc_t **out)
{
    char *full = NULL;
    tf_status_t st;

    begin(c, "call");
    if ((st = build_url(c, url, NULL, NULL, &full)) != TF_OK)
        return st;
    st = perform(c, "POST", full, in, MIME_SAFETENSORS, 0);
    if (st == TF_OK)
        st = decode_response(c, c->req, full, out);
    free(full);
    return st;
}

tf_status_t tf_fetch(tf_client_t *c, const char *url, const tf_doc_t *in, tf_doc_t **out)
{
    if (!c)
        return TF_EINVAL;
    if (!in && !out) {
        begin(c, "fetch");
        return fail(c, TF_EINVAL, "tf_fetch needs a document to send or a place for one");
    }
    if (!in)
        return tf_get(c, url, 0, out);
    if (!out)
        return tf_put(c, url, in);
    return call(c, url, in, out);
}

tf_status_t tf_list(tf_client_t *c, const char *base, tf_entry_t **entries, size_t *n)
{
    char *full = NULL;
    tfp_list_entry_t *pe = NULL;
    size_t pn = 0;
    tfp_err_t err;
    tf_status_t st;

    if (!c)
        return TF_EINVAL;
    begin(c, "list");
    if (!entries || !n)
        return fail(c, TF_EINVAL, NULL);
    if ((st = build_url(c, base, "/v1/tensors", NULL, &full)) != TF_OK)
        return st;
    if ((st = perform(c, "GET", full, NULL, MIME_JSON, 0)) != TF_OK)
        goto free_url;
    const tfx_hc_resp_t *r = tfx_hc_req_response(c->req);
    if (!r->body || tfp_parse_listing((const char *)r->body, r->body_len, &pe, &pn, &err) !=
                        TFP_OK) {
        st = fail(c, TF_EPROTO, "bad listing: %s", r->body ? err.msg : "empty body");
        goto free_url;
    }
    tf_entry_t *e = NULL;
    if (pn > 0) {
        e = calloc(pn, sizeof(*e));
        if (!e) {
            st = fail(c, TF_ENOMEM, NULL);
            goto free_listing;
        }
    }
    for (size_t i = 0; i < pn; i++) {
        e[i].name = strdup(pe[i].name ? pe[i].name : "");
        if (!e[i].name) {
            tf_list_free(e, i);
            st = fail(c, TF_ENOMEM, NULL);
            goto free_listing;
        }
        e[i].bytes = pe[i].bytes;
        e[i].ntensors = pe[i].ntensors;
    }
    *entries = e;
    *n = pn;

free_listing:
    tfp_listing_free(pe, pn);
free_url:
    free(full);
    return st;
}

void tf_list_free(tf_entry_t *entries, size_t n)
{
    if (!entries)
        return;
    for (size_t i = 0; i < n; i++)
        free(entries[i].name);
    free(entries);
}

tf_status_t tf_info(tf_client_t *c, const char *base, char **json)
{
    char *full = NULL;
    tf_status_t st;

    if (!c)
        return TF_EINVAL;
    begin(c, "info");
    if (!json)
        return fail(c, TF_EINVAL, NULL);
    if ((st = build_url(c, base, "/v1/info", NULL, &full)) != TF_OK)
        return st;
    if ((st = perform(c, "GET", full, NULL, MIME_JSON, 0)) == TF_OK) {
        char *body = (char *)tfx_hc_req_take_body(c->req, NULL);
        if (!body)
            body = strdup("");
        if (!body)
            st = fail(c, TF_ENOMEM, NULL);
        else
            *json = body;
    }
    free(full);
    return st;
}
