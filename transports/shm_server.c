/* shm_server.c - the shm transport's requests (see shm_server.h): a tfx_req_t that lives on
 * the calling thread's stack for one run of begin, handle and finish; a lent body; answers
 * rendered as a memfd, a status and an ETag.
 */
#include "config.h"
#include "transports/shm_server.h"
#include "transports/req_int.h"
#include "proto/strcopy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The PUT document's memfd while the request lends it: closed by the give-back unless a
 * handler took it (tfx_req_take_memfd). */
typedef struct shm_req shm_req_t;
typedef struct {
    tfx_shm_t m;
    shm_req_t *q;                   /* the request while it runs; NULL after */
} body_hold_t;

struct shm_req {
    tfx_req_t base;                 /* first: a tfx_req_t * is a shm_req_t * */
    tfx_shm_call_t *call;
    body_hold_t *body;              /* lent to the request and not yet given back */
    int woken;                      /* tfx_req_resume ran */
};

#define SR(r) ((shm_req_t *)(r))

/* The lending of a PUT's document is over: its memfd closed, unless taken. */
static void body_give_back(void *arg)
{
    body_hold_t *b = arg;
    if (b->q)
        b->q->body = NULL;
    tfx_shm_close(&b->m);
    free(b);
}

static int shm_take_memfd(tfx_req_t *r, int *fd, void **p, size_t *size)
{
    body_hold_t *b = SR(r)->body;
    if (!b || b->m.fd < 0)
        return 0;
    *fd = b->m.fd;
    *p = b->m.p;
    *size = b->m.size;
    b->m = (tfx_shm_t)TFX_SHM_NONE;    /* the give-back now only ends the lending */
    return 1;
}

/* Keeps the answer's typed fields, and its ETag apart (what every shm REPLY carries; the
 * others go as answer lines to a client that reads them: daemon/shm.c). */
static void take_etag(shm_req_t *q)
{
    q->call->ans = q->base.ans;
    if (tfp_answer_has(&q->base.ans, TFP_AF_ETAG))
        tfp_strcpy(q->call->etag, sizeof q->call->etag,
                   tfp_answer_str(&q->base.ans, TFP_AF_ETAG));
}

static void fail(shm_req_t *q, tfp_status_t code, const char *msg)
{
    int http = tfp_status_http(code);
    q->base.status = http > 0 ? (unsigned)http : 500;
    q->base.resp_len = 0;
    q->call->http = q->base.status;
    q->call->code = code;
    q->call->etag[0] = '\0';
    q->call->ans = q->base.ans;
    snprintf(q->call->msg, sizeof q->call->msg, "%s", msg);
}

static void shm_respond_error(tfx_req_t *r, tfp_status_t code, const char *msg)
{
    fail(SR(r), code, msg);
    SR(r)->call->declined = r->declined;
}

/* The answer's body lent as fd (offset, len), held by hold(hold_arg), if admit lets it. */
static void lend(shm_req_t *q, int fd, size_t offset, size_t len, void (*hold)(void *),
                 void *hold_arg)
{
    tfx_shm_call_t *call = q->call;
    char msg[TFP_SF_MAX_MSG];
    tfp_status_t st = call->admit ? call->admit(call->admit_arg, len, msg, sizeof msg) : TFP_OK;
    if (st != TFP_OK) {
        if (hold)
            hold(hold_arg);
        fail(q, st, msg);
        return;
    }
    call->fd = fd;
    call->offset = offset;
    call->len = len;
    call->hold = hold;
    call->hold_arg = hold_arg;
}

static void answered(shm_req_t *q, unsigned status)
{
    q->call->http = status;
    q->call->code = TFP_OK;
    take_etag(q);
}

static void close_copy(void *arg)
{
    tfx_shm_close(arg);
    free(arg);
}

/* A body that knows no backing: its bytes copied into a sealed memfd of their own. */
static void shm_respond(tfx_req_t *r, unsigned status, const char *content_type,
                        const void *body, size_t len, void (*release)(void *),
                        void *release_arg)
{
    shm_req_t *q = SR(r);
    (void)content_type;
    answered(q, status);
    if (len == 0) {
        if (release)
            release(release_arg);
        return;
    }
    tfp_err_t err = {TFP_ENOMEM, "shm: out of memory for an answer's copy"};
    tfx_shm_t *m = malloc(sizeof *m);
    if (m)
        *m = (tfx_shm_t)TFX_SHM_NONE;
    tfp_status_t st = m ? tfx_shm_create(len, "tfetch-answer", m, &err) : TFP_ENOMEM;
    if (st == TFP_OK) {
        memcpy(m->p, body, len);        /* then sealed: remapped read-only first */
        st = tfx_shm_seal(m, TFX_SHM_SEAL_WRITE | TFX_SHM_SEAL_SIZE, &err);
    }
    if (release)
        release(release_arg);
    if (st != TFP_OK) {
        if (m)
            close_copy(m);
        fail(q, err.code, err.msg);
        return;
    }
    lend(q, m->fd, 0, len, close_copy, m);
}

static void shm_respond_body(tfx_req_t *r, unsigned status, const char *content_type,
                             const tfx_body_t *body)
{
    shm_req_t *q = SR(r);
    int fd;
    size_t off, size;
    if (!body->share || body->len == 0) {
        shm_respond(r, status, content_type, body->data, body->len, body->release,
                    body->release_arg);
        return;
    }
    tfp_status_t st = body->share(body->share_arg, body->release_arg, &fd, &off, &size);
    if (st != TFP_OK) {
        if (body->release)
            body->release(body->release_arg);
        fail(q, st, st == TFP_ENOSPACE ? "no room under the store's limit for the "
                                         "document's shared copy"
                                       : "no shared memory for the document");
        return;
    }
    answered(q, status);
    lend(q, fd, off, body->len, body->release, body->release_arg);
}

static void shm_resume(tfx_req_t *r)
{
    SR(r)->woken = 1;
}

static const tfx_req_ops_t shm_ops = {
    .name = "shm",
    .respond = shm_respond,
    .respond_error = shm_respond_error,
    .resume = shm_resume,
    .respond_body = shm_respond_body,
    .take_memfd = shm_take_memfd,
    .no_headers = 1,
    .no_wait = 1,
};

/* After begin: the PUT's document lent to the request as the body it accepted, or given
 * back (none accepted, or refused). */
static void lend_body(shm_req_t *q, size_t len)
{
    tfx_req_t *r = &q->base;
    body_hold_t *b = q->body;
    char msg[160];
    if (!b)
        return;
    if (r->answered || !r->accept_body) {
        body_give_back(b);
        return;
    }
    if (r->headroom != 0 || len > r->max_body) {
        body_give_back(b);
        snprintf(msg, sizeof msg, r->headroom ? "shm: a body that needs room in front (a raw "
                 "tensor) cannot come over shm" : "a document of %zu bytes is over the %llu "
                 "this request takes", len, (unsigned long long)r->max_body);
        tfx_respond_error(r, r->headroom ? TFP_EBADREQ : TFP_ETOOBIG, "%s", msg);
        return;
    }
    r->buf = b->m.p;
    r->cap = b->m.size;
    r->give_back = body_give_back;
    r->give_back_arg = b;
    r->body_seen = len;
    tfp_status_t st = tfx_req_grow_body(r, len);
    if (st != TFP_OK) {
        tfx_respond_error(r, st, "%s", st == TFP_ENOSPACE ? "no room in the store for the "
                          "document" : "no memory for the document");
        return;
    }
    r->body_len = len;
}

void tfx_shm_call(const tfx_handlers_t *h, const tfp_op_t *op, const tfp_op_err_t *op_err,
                  const char *peer, tfx_shm_call_t *call)
{
    shm_req_t q;
    memset(&q, 0, sizeof q);
    q.base.ops = &shm_ops;
    q.base.h = h;
    q.base.op = *op;
    if (op_err)
        q.base.op_err = *op_err;
    snprintf(q.base.peer, sizeof q.base.peer, "%s", peer ? peer : "");
    q.call = call;
    tfx_req_arrived(&q.base);
    memset(&call->ans, 0, sizeof call->ans);
    call->fd = -1;
    call->declined = 0;
    call->hold = NULL;
    call->etag[0] = '\0';
    call->msg[0] = '\0';
    if (call->body.fd >= 0) {
        if ((q.body = malloc(sizeof *q.body))) {
            q.body->m = call->body;
            q.body->q = &q;
        } else {
            tfx_shm_close(&call->body);
            if (q.base.op_err.code == TFP_OK)
                tfp_op_fail(&q.base.op_err, TFP_ENOMEM, "out of memory");
        }
        call->body = (tfx_shm_t)TFX_SHM_NONE;
    }
    h->begin(&q.base, h->arg);
    lend_body(&q, call->body_len);
    tfx_req_handling(&q.base);
    if (!q.base.answered)
        h->handle(&q.base, h->arg);
    while (!q.base.answered && q.base.want_suspend && q.woken) {
        q.base.want_suspend = 0;
        q.woken = 0;
        tfx_req_handling(&q.base);
        h->handle(&q.base, h->arg);
    }
    if (!q.base.answered)
        tfx_respond_error(&q.base, TFP_EINTERNAL, "shm: a request that waits cannot be "
                          "served over shm");
    h->finish(&q.base, 1, h->arg);
    if (q.body)
        q.body->q = NULL;           /* kept by a lent blob: no request to tell any more */
    tfx_req_release(&q.base);
}
