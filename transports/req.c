/* req.c - the transport-independent half of tfx_req_t: accessors, the body buffer, response
 * headers, the one-answer rule, and dispatch to the transport's functions. Threads: as req.h.
 */
#include "config.h"
#include "transports/req_int.h"
#include "transports/buf.h"
#include "transports/clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tfx_req_transport(const tfx_req_t *r) { return r->ops->name; }
const char *tfx_req_peer(const tfx_req_t *r) { return r->peer; }
const tfp_op_t *tfx_req_op(const tfx_req_t *r) { return &r->op; }
tfp_op_who_t *tfx_req_op_who(tfx_req_t *r) { return &r->op.who; }
const tfp_op_err_t *tfx_req_op_error(const tfx_req_t *r) { return &r->op_err; }
void tfx_req_set_ctx(tfx_req_t *r, void *ctx) { r->ctx = ctx; }
void *tfx_req_ctx(const tfx_req_t *r) { return r->ctx; }
unsigned tfx_req_status(const tfx_req_t *r) { return r->status; }
uint64_t tfx_req_response_bytes(const tfx_req_t *r) { return r->resp_len; }
uint64_t tfx_req_body_bytes(const tfx_req_t *r) { return r->body_seen; }

void tfx_req_resume(tfx_req_t *r) { r->ops->resume(r); }
tfp_answer_t *tfx_req_answer(tfx_req_t *r) { return &r->ans; }

void tfx_req_answer_headers(const tfx_req_t *r,
                            void (*add)(void *arg, const char *name, const char *value),
                            void *arg)
{
    char v[TFP_AF_MAX_STR + 40], timing[256];
    size_t tl = 0;
    for (unsigned f = 0; f < TFP_AF_COUNT; f++) {
        if (!tfp_answer_has(&r->ans, (tfp_af_t)f))
            continue;
        size_t n = tfp_answer_header_value(&r->ans, (tfp_af_t)f, v, sizeof v);
        if (!n)
            continue;
        if (tfp_answer_fields[f].kind != TFP_AK_DUR) {
            add(arg, tfp_answer_fields[f].header, v);
        } else if (tl + n + 3 < sizeof timing) {    /* one Server-Timing list, by hand */
            if (tl) {
                memcpy(timing + tl, ", ", 2);
                tl += 2;
            }
            memcpy(timing + tl, v, n + 1);
            tl += n;
        }
    }
    if (tl)
        add(arg, "Server-Timing", timing);
}
void tfx_req_suspend(tfx_req_t *r)
{
    r->want_suspend = 1;
    if (!r->t_suspend)
        r->t_suspend = tfx_now_ns();
}

void tfx_req_arrived(tfx_req_t *r)
{
    if (!r->t_arrive)
        r->t_arrive = tfx_now_ns();
}

void tfx_req_handling(tfx_req_t *r)
{
    uint64_t now = tfx_now_ns();
    if (!r->t_handle)
        r->t_handle = now;
    if (r->t_suspend) {
        r->wait_ns += now - r->t_suspend;
        r->t_suspend = 0;
    }
}

/* The server's time on r so far, in its answer (Server-Timing): recv (head to handle), queue
 * (suspended), handler (the rest of handle's time), tf (head to now). A request refused
 * before handle ran has recv and tf only. */
static void stamp_timing(tfx_req_t *r)
{
    if (!r->t_arrive)
        return;
    uint64_t now = tfx_now_ns();
    uint64_t wait = r->wait_ns + (r->t_suspend ? now - r->t_suspend : 0);
    tfp_answer_t *a = &r->ans;
    uint64_t handled = r->t_handle ? r->t_handle : now;
    tfp_answer_set_u64(a, TFP_AF_SRV_RECV, (handled - r->t_arrive) / 1000);
    if (r->t_handle) {
        uint64_t in_handle = now - r->t_handle;
        tfp_answer_set_u64(a, TFP_AF_SRV_QUEUE, wait / 1000);
        tfp_answer_set_u64(a, TFP_AF_SRV_HANDLER,
                           (in_handle > wait ? in_handle - wait : 0) / 1000);
    }
    tfp_answer_set_u64(a, TFP_AF_SRV_TOTAL, (now - r->t_arrive) / 1000);
}
int tfx_req_may_wait(const tfx_req_t *r) { return !r->ops->no_wait; }
int tfx_req_declined(const tfx_req_t *r) { return r->declined; }

void tfx_req_decline(tfx_req_t *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!r->answered)
        r->declined = 1;
    tfx_respond_error(r, TFP_ENOTIMPL, "%s", msg);
}

void tfx_req_accept_body(tfx_req_t *r, size_t headroom, uint64_t max)
{
    r->accept_body = 1;
    r->headroom = headroom;
    r->max_body = max;
}

const uint8_t *tfx_req_body(const tfx_req_t *r, size_t *len)
{
    *len = r->buf ? (size_t)r->body_len : 0;
    return r->buf ? r->buf + r->headroom : NULL;
}

void tfx_req_accept_body_into(tfx_req_t *r, size_t headroom, uint64_t max, uint8_t *buf,
                              size_t cap, void (*give_back)(void *arg), void *arg)
{
    tfx_req_accept_body(r, headroom, max);
    r->buf = buf;
    r->cap = cap;
    r->give_back = give_back;
    r->give_back_arg = arg;
}

/* Returns a lent buffer to its lender: the request no longer uses it. */
static void give_back(tfx_req_t *r)
{
    void (*fn)(void *) = r->give_back;
    r->give_back = NULL;
    r->buf = NULL;
    r->cap = 0;
    fn(r->give_back_arg);
}

uint8_t *tfx_req_take_body(tfx_req_t *r, size_t *cap)
{
    uint8_t *b = r->buf;
    *cap = r->cap;
    r->buf = NULL;
    r->cap = 0;
    return b;
}

int tfx_req_take_lent(tfx_req_t *r, void (**fn)(void *), void **arg)
{
    if (!r->give_back)
        return 0;
    *fn = r->give_back;
    *arg = r->give_back_arg;
    r->give_back = NULL;
    return 1;
}

tfp_status_t tfx_req_grow_body(tfx_req_t *r, uint64_t total)
{
    if (total > SIZE_MAX)
        return TFP_ENOMEM;
    if (r->h->body_grow) {
        tfp_status_t st = r->h->body_grow(r, total, r->h->arg);
        if (st != TFP_OK)
            return st;
    }
    if (r->give_back) {
        if (total <= r->cap)
            return TFP_OK;                  /* the lent buffer holds it */
        /* Larger than lent: into a tfx_buf, with what arrived so far. */
        size_t used = r->headroom + (size_t)r->body_len, ncap;
        uint8_t *nb = tfx_buf_alloc((size_t)total, &ncap);
        if (!nb)
            return TFP_ENOMEM;
        memcpy(nb, r->buf, used);
        give_back(r);
        r->buf = nb;
        r->cap = ncap;
        return TFP_OK;
    }
    /* In place where it can: a copy would hold the old and the new buffer at once. */
    size_t cap = r->cap;
    uint8_t *nb = tfx_buf_grow(r->buf, &cap, r->buf ? r->headroom + (size_t)r->body_len : 0,
                               (size_t)total);
    if (!nb)
        return TFP_ENOMEM;
    r->buf = nb;
    r->cap = cap;
    return TFP_OK;
}

void tfx_req_add_header(tfx_req_t *r, const char *name, const char *value)
{
    if (r->ops->no_headers && !r->keep_headers)
        return;                             /* nothing would send it */
    tfx_hdr_t *h = calloc(1, sizeof *h);
    if (!h)
        return;
    h->name = strdup(name);
    h->value = strdup(value);
    if (!h->name || !h->value) {
        free(h->name);
        free(h->value);
        free(h);
        return;
    }
    h->next = r->hdrs;
    r->hdrs = h;
}

void tfx_req_release(tfx_req_t *r)
{
    while (r->hdrs) {
        tfx_hdr_t *n = r->hdrs->next;
        free(r->hdrs->name);
        free(r->hdrs->value);
        free(r->hdrs);
        r->hdrs = n;
    }
    if (r->give_back)
        give_back(r);
    tfx_buf_free(r->buf, r->cap);
    r->buf = NULL;
    r->cap = 0;
}

void tfx_respond(tfx_req_t *r, unsigned status, const char *content_type, const void *body,
                 size_t len, void (*release)(void *), void *release_arg)
{
    if (r->answered) {                              /* a second answer: keep the first */
        if (release)
            release(release_arg);
        return;
    }
    r->answered = 1;
    r->status = status;
    r->resp_len = len;
    stamp_timing(r);
    r->ops->respond(r, status, content_type, body, len, release, release_arg);
}

void tfx_respond_body(tfx_req_t *r, unsigned status, const char *content_type,
                      const tfx_body_t *body)
{
    if (!r->ops->respond_body) {
        tfx_respond(r, status, content_type, body->data, body->len, body->release,
                    body->release_arg);
        return;
    }
    if (r->answered) {                              /* a second answer: keep the first */
        if (body->release)
            body->release(body->release_arg);
        return;
    }
    r->answered = 1;
    r->status = status;
    r->resp_len = body->len;
    stamp_timing(r);
    r->ops->respond_body(r, status, content_type, body);
}

int tfx_req_take_memfd(tfx_req_t *r, int *fd, void **p, size_t *size)
{
    return r->ops->take_memfd ? r->ops->take_memfd(r, fd, p, size) : 0;
}

void tfx_respond_error(tfx_req_t *r, tfp_status_t code, const char *fmt, ...)
{
    if (r->answered)                                /* a second answer: keep the first */
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int http = tfp_status_http(code);
    r->answered = 1;
    r->status = http > 0 ? (unsigned)http : 500;
    r->resp_len = 0;
    stamp_timing(r);
    r->ops->respond_error(r, code, msg);
}
