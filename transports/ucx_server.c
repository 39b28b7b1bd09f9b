/* ucx_server.c - tfetchd's UCX transport: a UCX worker, its progress thread, and tfx_req_t
 * for requests that arrive as active messages (the frame is read straight into the request's
 * operation; answers and failures go back as REPLY frames).
 *
 * The progress thread is the only one that touches UCX. It sleeps in epoll on the worker's
 * event fd (armed with ucp_worker_arm) and is woken by UCX or by tfx_ucx_base_wake when
 * another thread queues work (a resumed request). A worker that wedges (a client on this
 * host died while writing into its shared-memory FIFO, which nothing then reads past) is
 * replaced: every request on it ends unanswered, the new worker has a new address (handed
 * out by the next POST /v1/upgrade), and clients of the old one fall back to HTTP when their
 * requests time out. Active-message callbacks never call back
 * into UCX: they decode the frame, check the endpoint's HELLO, run the handlers' begin and
 * queue the request; the loop then receives rendezvous bodies straight into the accepted
 * buffer (ucp_am_recv_data_nbx; such receives are never abandoned, since freeing one that is
 * unfinished hangs the rendezvous), runs handle, and sends answers zero-copy from the
 * handlers' memory, releasing it when the send completes.
 *
 * An endpoint whose client went away (a receive or send on it failed; on one host, where UCX
 * runs without peer failure detection, the client's process is gone: its pid, from the
 * upgrade token, is checked every 100 ms while it has requests in flight) fails: each of its
 * requests ends unanswered at once (finish runs, so the store reservation, the body buffer
 * and a reply's blob go back). One whose receive or send UCX still holds stays behind as a
 * small husk, freed when UCX gives the operation back (or at stop); nothing writes into or
 * reads from its memory any more, since the peer that would is gone.
 *
 * Threads: the progress thread, plus tfx_req_resume from anywhere (queue under qlock).
 */
#include "config.h"
#include "transports/ucx_server.h"
#include "proto/strcopy.h"
#include "transports/req_int.h"
#include "transports/buf.h"
#include "transports/clock.h"
#include "transports/spare.h"
#include "proto/httpcond.h"
#include "proto/ids.h"
#include "proto/ucxframe.h"
#include "transports/ucx_common.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

enum { Q_NONE, Q_RECV, Q_READY, Q_SEND };
/* S_PARTS: between two parts of a body that comes in parts (proto/ucxframe.h), with no
 * receive of it held by UCX. */
enum { S_NEW, S_RECEIVING, S_PARTS, S_RUNNING, S_SUSPENDED, S_SENDING, S_DONE };

typedef struct ucx_req {
    tfx_req_t base;
    tfx_ucx_t *u;
    struct ucx_req *qnext;          /* in a queue */
    struct ucx_req *lprev, *lnext;  /* u->live */
    int queued_as;                  /* Q_*: what the loop does next; Q_NONE when in no queue */
    int state;                      /* S_* */
    int wake_pending;
    int ended;                      /* finish ran; no longer in u->live */
    int gone;                       /* its client went away: a husk in u->husks */
    ucp_ep_h ep;
    tfx_ucx_landing_t land;         /* the body's rendezvous (ucx_common.h) */
    /* The body in parts: parts.next is where the next part starts; landed counts the bytes
     * already in the buffer (prefix, eager parts, finished receives). A part whose
     * rendezvous arrives while the one before it still lands waits in land. */
    tfp_uf_parts_t parts;
    uint64_t landed;
    int grown;                      /* the body buffer holds parts.total bytes */
    int recv_out;                   /* a receive is queued or held by UCX */
    uint64_t part_ms;               /* when the last part arrived */
    uint8_t *prefix;                /* the body's first in.prefix_len bytes, from the AM
                                     * header, until the rendezvous puts the rest after them */
    /* the answer */
    size_t hdr_len;
    const void *body;
    size_t body_len;
    int body_json;                  /* a FEED reply's body is JSON text */
    void (*release)(void *);
    void *release_arg;
    tfp_uf_parts_t out_parts;       /* the answer's body: what has been sent */
    size_t send_off, send_len;      /* the piece of it the send in flight carries */
    /* Last, and not zeroed when a spare is reused (req_new): written whole before read. */
    tfp_uf_hdr_t in;                /* the request's frame, as decoded */
    uint8_t hdr[TFP_UF_MAX_HEADER]; /* the answer's frame, as encoded (hdr_len bytes) */
} ucx_req_t;

/* Ended requests kept for the next ones (transports/spare.h; the progress thread's own):
 * an 8 KiB calloc per request cost more than the rest of an 8-byte exchange's server side. */
#define SPARE_REQS 64

#define UR(r) ((ucx_req_t *)(r))

/* An admitted endpoint, and its client's pid when it runs on this host (0: not watched). */
typedef struct {
    ucp_ep_h ep;
    long pid;
    int busy;                       /* scratch: has requests in flight */
    tfp_cred_t cred;                /* what its token was issued to (verify_hello) */
    uint8_t token_hash[32];
} peer_t;

struct tfx_ucx {
    tfx_ucx_base_t base;            /* the worker: replaced when it wedges */
    tfx_handlers_t h;
    tfx_ucx_config_t cfg;
    pthread_t thread;
    pthread_mutex_t qlock;          /* remote: queued from other threads */
    ucx_req_t *rq_head, *rq_tail;
    atomic_int rq_any;              /* rq_head is not empty: the loop looks without the lock */
    ucx_req_t *lq_head, *lq_tail;   /* local: queued by the progress thread itself */
    ucx_req_t *live;
    ucx_req_t *husks;               /* ended requests whose operation UCX still holds */
    atomic_int stopping, draining;
    atomic_uint inflight;
    peer_t *peers;                  /* endpoints that presented a valid token */
    size_t npeers, cappeers;
    uint64_t last_peer_check_ms;
    tfx_spare_t spare;              /* ended requests to reuse */
    ucp_ep_h *to_close;             /* endpoints to close once out of the callbacks */
    size_t nclose, capclose;
    struct fail_ep {                /* endpoints to fail once out of the callbacks: */
        ucp_ep_h ep;                /* an operation on it failed, or its client said BYE */
        int bye;                    /* BYE: also close it once nothing of UCX's holds it */
    } *to_fail;
    size_t nfail, capfail;
    uint8_t *addr_all, *addr_net;   /* this UCX worker's addresses, fetched once at start */
    size_t addr_all_len, addr_net_len;
    pthread_mutex_t slock;
    tfx_ucx_stats_t st;
};

/* ---- queues ----------------------------------------------------------------------------- */

static void push(ucx_req_t **head, ucx_req_t **tail, ucx_req_t *q)
{
    q->qnext = NULL;
    if (*tail)
        (*tail)->qnext = q;
    else
        *head = q;
    *tail = q;
}

static ucx_req_t *pop(ucx_req_t **head, ucx_req_t **tail)
{
    ucx_req_t *q = *head;
    if (q) {
        *head = q->qnext;
        if (!*head)
            *tail = NULL;
    }
    return q;
}

/* On the progress thread. */
static void queue_local(ucx_req_t *q, int what)
{
    q->queued_as = what;
    push(&q->u->lq_head, &q->u->lq_tail, q);
}

/* ---- endpoints -------------------------------------------------------------------------- */

static peer_t *find_peer(tfx_ucx_t *u, ucp_ep_h ep)
{
    for (size_t i = 0; i < u->npeers; i++)
        if (u->peers[i].ep == ep)
            return &u->peers[i];
    return NULL;
}

static int is_authed(tfx_ucx_t *u, ucp_ep_h ep) { return find_peer(u, ep) != NULL; }

static void drop_peer(tfx_ucx_t *u, ucp_ep_h ep)
{
    peer_t *p = find_peer(u, ep);
    if (p)
        *p = u->peers[--u->npeers];
}

static void add_peer(tfx_ucx_t *u, ucp_ep_h ep, long pid, const tfp_op_who_t *who)
{
    peer_t *p = find_peer(u, ep);
    if (p) {
        p->pid = pid;
        p->cred = who->cred;
        memcpy(p->token_hash, who->token_hash, sizeof p->token_hash);
        return;
    }
    if (u->npeers == u->cappeers) {
        size_t ncap = u->cappeers ? u->cappeers * 2 : 16;
        peer_t *n = realloc(u->peers, ncap * sizeof *n);
        if (!n)
            return;
        u->peers = n;
        u->cappeers = ncap;
    }
    u->peers[u->npeers++] = (peer_t){.ep = ep, .pid = pid, .cred = who->cred};
    memcpy(u->peers[u->npeers - 1].token_hash, who->token_hash, sizeof p->token_hash);
}

/* 1 when pid names no live process (gone, or a zombie waiting for its parent). */
static int pid_gone(long pid)
{
    if (kill((pid_t)pid, 0) != 0)
        return errno == ESRCH;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');    /* "pid (comm) S ..." */
    return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

/* The pid a same-host client gave, if it can be watched: it must name a live process in
 * this network namespace (a client in another pid namespace gives a pid that means
 * something else here: not watched). A process whose namespace cannot be read (another
 * user's) is trusted. */
static long watchable_pid(long pid)
{
    if (pid <= 0 || pid > INT_MAX || pid_gone(pid))
        return 0;
    char path[64], mine[64], theirs[64];
    snprintf(path, sizeof path, "/proc/%ld/ns/net", pid);
    ssize_t a = readlink("/proc/self/ns/net", mine, sizeof mine - 1);
    ssize_t b = readlink(path, theirs, sizeof theirs - 1);
    if (b < 0)
        return errno == EACCES || errno == EPERM ? pid : 0;
    if (a < 0 || a != b || memcmp(mine, theirs, (size_t)a) != 0)
        return 0;
    return pid;
}

static void count(tfx_ucx_t *u, uint64_t *field)
{
    pthread_mutex_lock(&u->slock);
    (*field)++;
    pthread_mutex_unlock(&u->slock);
}

/* Drops an endpoint that spoke before presenting a token: closed by the loop, outside the
 * active-message callback. */
static void close_ep(tfx_ucx_t *u, ucp_ep_h ep)
{
    drop_peer(u, ep);
    for (size_t i = 0; i < u->nclose; i++)
        if (u->to_close[i] == ep)
            return;
    if (u->nclose == u->capclose) {
        size_t ncap = u->capclose ? u->capclose * 2 : 8;
        ucp_ep_h *n = realloc(u->to_close, ncap * sizeof *n);
        if (!n)
            return;
        u->to_close = n;
        u->capclose = ncap;
    }
    u->to_close[u->nclose++] = ep;
}

/* From a callback: ep's operations failed, or its client said BYE (bye); the loop fails ep
 * (fail_ep) and, after a BYE, closes it. */
static void ep_failed_later(tfx_ucx_t *u, ucp_ep_h ep, int bye)
{
    for (size_t i = 0; i < u->nfail; i++)
        if (u->to_fail[i].ep == ep) {
            u->to_fail[i].bye |= bye;
            return;
        }
    if (u->nfail == u->capfail) {
        size_t ncap = u->capfail ? u->capfail * 2 : 8;
        struct fail_ep *n = realloc(u->to_fail, ncap * sizeof *n);
        if (!n) {
            /* No room to remember it: its requests end at stop (or the pid check). */
            return;
        }
        u->to_fail = n;
        u->capfail = ncap;
    }
    u->to_fail[u->nfail++] = (struct fail_ep){.ep = ep, .bye = bye};
}

static void close_pending_eps(tfx_ucx_t *u)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    for (size_t i = 0; i < u->nclose; i++) {
        void *rq = ucp_ep_close_nbx(u->to_close[i], &p);
        if (rq && !UCS_PTR_IS_ERR(rq))
            ucp_request_free(rq);       /* completes on its own; nobody waits for it */
    }
    u->nclose = 0;
}

/* A small message (HELLO_ACK) sent and forgotten. */
typedef struct {
    uint8_t hdr[TFP_UF_MAX_HEADER];
} small_msg_t;

static void small_done(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    free(user_data);
    ucp_request_free(request);
}

static void send_small(tfx_ucx_t *u, ucp_ep_h ep, const tfp_uf_hdr_t *h)
{
    small_msg_t *m = malloc(sizeof *m);
    size_t len;
    tfp_err_t err;
    if (!m || tfp_uf_encode(h, m->hdr, sizeof m->hdr, &len, &err) != TFP_OK) {
        free(m);
        return;
    }
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.send = small_done, .user_data = m};
    void *rq = ucp_am_send_nbx(ep, TFX_UCX_AM_REPLY, m->hdr, len, NULL, 0, &p);
    if (!UCS_PTR_IS_PTR(rq))
        free(m);                        /* done at once, or failed */
    (void)u;
}

/* ---- tfx_req_t over UCX ----------------------------------------------------------------- */

/* ---- feeds over UCX: the FEED frame's block, to and from the request ---------------------- */

/* A FEED reply's block: the answer's typed fields that have a place in it (proto/answer.h:
 * position, seq, round, generation, device, Retry-After); an outfeed 410's resume_after rides
 * in its JSON body, as over HTTP. */
static void feed_reply_block(ucx_req_t *q, tfp_uf_hdr_t *h)
{
    h->flags |= TFP_UF_F_FEED;
    h->feed.op = q->in.feed.op;
    h->feed.flags = q->body_json && h->body_len ? TFP_UF_FF_JSON : 0;
    tfp_answer_to_feed(&q->base.ans, &h->feed);
}

/* The operation a FEED frame asks for: its kind, the device token, the stream ids and
 * positions (the decoder checked every rule of the block). */
static void feed_frame_op(tfx_ucx_t *u, tfx_req_t *r, const tfp_uf_hdr_t *h)
{
    static const tfp_op_kind_t kinds[] = {
        [TFP_UF_FEED_LIST] = TFP_OP_FEED_LIST, [TFP_UF_FEED_DECLARE] = TFP_OP_FEED_DECLARE,
        [TFP_UF_FEED_STATS] = TFP_OP_FEED_STATS, [TFP_UF_FEED_DELETE] = TFP_OP_FEED_DELETE,
        [TFP_UF_FEED_INFEED] = TFP_OP_FEED_INFEED, [TFP_UF_FEED_POP] = TFP_OP_FEED_POP,
        [TFP_UF_FEED_ACK] = TFP_OP_FEED_ACK, [TFP_UF_FEED_DETACH] = TFP_OP_FEED_DETACH,
        [TFP_UF_FEED_OUTFEED_PUSH] = TFP_OP_FEED_OUTFEED_PUSH,
        [TFP_UF_FEED_OUTFEED_GET] = TFP_OP_FEED_OUTFEED_GET,
        [TFP_UF_FEED_DONE] = TFP_OP_FEED_DONE, [TFP_UF_FEED_RESET] = TFP_OP_FEED_RESET};
    tfp_op_t *op = &r->op;
    const tfp_uf_feed_t *f = &h->feed;
    op->kind = kinds[f->op];
    memcpy(op->sub, f->dev, sizeof op->sub);
    memcpy(op->feed.producer, f->producer, sizeof op->feed.producer);
    memcpy(op->feed.consumer, f->consumer, sizeof op->feed.consumer);
    op->feed.seq = f->seq;
    op->feed.ack = f->ack;
    op->feed.has_ack = (f->flags & TFP_UF_FF_HAS_ACK) != 0;
    op->feed.rewind = (f->flags & TFP_UF_FF_REWIND) != 0;
    op->feed.after = f->after;
    if (f->op == TFP_UF_FEED_DECLARE) {
        op->body.kind = TFP_BODY_JSON;
        op->body.media = TFP_MEDIA_JSON;
    } else if (f->flags & TFP_UF_FF_STAGED) {
        op->body.kind = TFP_BODY_STAGED;        /* the decoder checked: 24 bytes */
        op->body.media = TFP_MEDIA_NONE;
    } else if (h->body_len) {
        op->body.kind = TFP_BODY_SAFETENSORS;
        tfp_op_check_length(op, u->cfg.max_body, &r->op_err);
    }
}

/* A reply's conditions block, to a request that sent one: the answer's ETag, and the
 * Content-Range HTTP would send as the handler's header (kept for such a request:
 * keep_headers; checked as a client checks it: one that would not encode is left out). */
static void cond_reply_block(ucx_req_t *q, tfp_uf_hdr_t *h)
{
    tfp_uf_cond_t *c = &h->cond;
    const tfp_answer_t *ans = &q->base.ans;
    const char *etag = tfp_answer_str(ans, TFP_AF_ETAG);
    if (etag[0] && strlen(etag) <= TFP_UF_MAX_ETAG && tfp_etag_valid(etag))
        tfp_strcpy(c->etag, sizeof c->etag, etag);
    for (const tfx_hdr_t *x = q->base.hdrs; x; x = x->next) {
        uint64_t a, b, t;
        if (strcasecmp(x->name, "Content-Range") == 0 &&
                 tfp_content_range_parse(x->value, &a, &b, &t) == 0) {
            c->flags |= TFP_UF_CF_RANGE;
            c->first = a;
            c->last = b;
            c->total = t;
        }
    }
    if (c->etag[0] || c->flags)
        h->flags |= TFP_UF_F_COND;
}

/* Encodes the REPLY frame: status, the HTTP-equivalent status, msg. */
static void make_reply(ucx_req_t *q, unsigned http, tfp_status_t code, const char *msg,
                       size_t body_len)
{
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_REPLY, q->in.seq);
    h.status = code;
    h.http = (uint16_t)http;
    h.body_len = body_len;
    h.flags = body_len ? TFP_UF_F_REPLY_HAS_BODY : 0;
    tfp_strcpy(h.request_id, sizeof h.request_id, q->in.request_id);
    if (msg)
        tfp_strcpy(h.msg, sizeof h.msg, msg);
    if (q->in.op == TFP_UF_FEED)
        feed_reply_block(q, &h);
    if (q->in.flags & TFP_UF_F_COND)
        cond_reply_block(q, &h);
    /* asked: the server's time, and the fields without a place above */
    tfp_answer_to_reply(&q->base.ans, q->in.flags & (TFP_UF_F_ANSWER | TFP_UF_F_TIMING), &h);
    /* A client that asked for parts gets a large body in parts, its progress seen. */
    size_t first = body_len;
    if ((q->in.flags & TFP_UF_F_PARTS) && body_len > TFP_UF_PART_BYTES) {
        h.flags |= TFP_UF_F_PARTS;
        first = TFP_UF_PART_BYTES;
    }
    tfp_err_t err;
    if (tfp_uf_encode(&h, q->hdr, sizeof q->hdr, &q->hdr_len, &err) != TFP_OK) {
        h.msg[0] = '\0';                /* a message that does not encode is left out */
        tfp_uf_encode(&h, q->hdr, sizeof q->hdr, &q->hdr_len, &err);
    }
    (void)tfp_uf_parts_begin(&q->out_parts, &h, first, &err);  /* holds: first <= body_len */
    q->send_off = 0;
    q->send_len = first;
}

static void ucx_respond(tfx_req_t *r, unsigned status, const char *content_type,
                        const void *body, size_t len, void (*release)(void *), void *release_arg)
{
    ucx_req_t *q = UR(r);
    q->body_json = content_type && strncmp(content_type, "application/json", 16) == 0;
    make_reply(q, status, TFP_OK, NULL, len);
    q->body = body;
    q->body_len = len;
    q->release = release;
    q->release_arg = release_arg;
    queue_local(q, Q_SEND);
}

static void ucx_respond_error(tfx_req_t *r, tfp_status_t code, const char *msg)
{
    ucx_req_t *q = UR(r);
    make_reply(q, r->status, code, msg, 0);
    q->body = NULL;
    q->body_len = 0;
    queue_local(q, Q_SEND);
}

static void ucx_resume(tfx_req_t *r)
{
    ucx_req_t *q = UR(r);
    tfx_ucx_t *u = q->u;
    pthread_mutex_lock(&u->qlock);
    if (q->state == S_SUSPENDED) {
        q->state = S_RUNNING;
        q->queued_as = Q_READY;
        push(&u->rq_head, &u->rq_tail, q);
        atomic_store(&u->rq_any, 1);
        pthread_mutex_unlock(&u->qlock);
        tfx_ucx_base_wake(&u->base);
        return;
    }
    q->wake_pending = 1;
    pthread_mutex_unlock(&u->qlock);
}

static const tfx_req_ops_t ucx_ops = {
    .name = "ucx",
    .respond = ucx_respond,
    .respond_error = ucx_respond_error,
    .resume = ucx_resume,
    .no_headers = 1,
};

/* ---- request life ----------------------------------------------------------------------- */

static void unlink_from(ucx_req_t **head, ucx_req_t *q)
{
    if (q->lprev)
        q->lprev->lnext = q->lnext;
    else
        *head = q->lnext;
    if (q->lnext)
        q->lnext->lprev = q->lprev;
    q->lprev = q->lnext = NULL;
}

/* The request is over: the answer's memory goes back, finish runs, the body buffer is
 * freed. The struct itself stays with the caller. */
static void end_req(ucx_req_t *q, int completed)
{
    tfx_ucx_t *u = q->u;
    if (q->ended)
        return;
    q->ended = 1;
    if (q->release) {
        q->release(q->release_arg);
        q->release = NULL;
    }
    u->h.finish(&q->base, completed, u->h.arg);
    unlink_from(&u->live, q);
    tfx_req_release(&q->base);
    atomic_fetch_sub(&u->inflight, 1);
}

/* A request for a frame that arrived: a spare one when there is one. The progress thread's. */
static ucx_req_t *req_new(tfx_ucx_t *u)
{
    ucx_req_t *q = tfx_spare_take(&u->spare);
    if (!q) {
        if ((q = calloc(1, sizeof *q)))
            q->u = u;
        return q;
    }
    memset(q, 0, offsetof(ucx_req_t, in));
    q->u = u;
    return q;
}

static void req_put(ucx_req_t *q)
{
    if (!q)
        return;
    tfx_ucx_t *u = q->u;
    free(q->prefix);
    if (!tfx_spare_put(&u->spare, q))
        free(q);
}

static void free_req(ucx_req_t *q, int completed)
{
    end_req(q, completed);
    req_put(q);
}

/* A husk that UCX or a queue no longer holds. */
static void free_husk(ucx_req_t *q)
{
    unlink_from(&q->u->husks, q);
    req_put(q);
}

/* Its client went away: q ends unanswered now; the struct goes when nothing holds it. */
static void end_gone(ucx_req_t *q)
{
    tfx_ucx_t *u = q->u;
    if (q->land.desc) {
        ucp_am_data_release(u->base.worker, q->land.desc);
        q->land.desc = NULL;
    }
    if (q->land.next_desc) {
        ucp_am_data_release(u->base.worker, q->land.next_desc);
        q->land.next_desc = NULL;
    }
    q->base.answered = 1;
    end_req(q, 0);
    q->gone = 1;
    q->lnext = u->husks;
    if (u->husks)
        u->husks->lprev = q;
    u->husks = q;
    pthread_mutex_lock(&u->qlock);
    int queued = q->queued_as != Q_NONE;
    pthread_mutex_unlock(&u->qlock);
    if (!queued && q->state != S_RECEIVING && q->state != S_SENDING)
        free_husk(q);
}

/* ep's client went away: every request on it ends unanswered (finish logs each one). */
static void fail_ep(tfx_ucx_t *u, ucp_ep_h ep)
{
    drop_peer(u, ep);
    for (ucx_req_t *q = u->live, *next; q; q = next) {
        next = q->lnext;
        if (q->ep == ep)
            end_gone(q);
    }
}

/* 1 when UCX still holds an operation of an ended request on ep (a husk's receive or send):
 * closing ep then could complete it into freed memory, so ep is left to the worker. */
static int held_by_husk(tfx_ucx_t *u, ucp_ep_h ep)
{
    for (const ucx_req_t *q = u->husks; q; q = q->lnext)
        if (q->ep == ep)
            return 1;
    return 0;
}

/* A part of the answer went: the next one is queued for the loop to send (1), or there is
 * none (0). One part at a time, so the client lands each before the next comes. */
static int send_next_part(ucx_req_t *q)
{
    if (tfp_uf_parts_done(&q->out_parts))
        return 0;
    tfp_uf_hdr_t ph;
    tfp_err_t err;
    q->send_off = (size_t)q->out_parts.next;
    tfp_uf_parts_next(&q->out_parts, TFP_UF_PART_BYTES, &ph);
    q->send_len = (size_t)ph.body_len;
    if (tfp_uf_encode(&ph, q->hdr, sizeof q->hdr, &q->hdr_len, &err) != TFP_OK)
        return 0;                           /* cannot happen: its fields are ours */
    queue_local(q, Q_SEND);
    return 1;
}

static void send_done(void *request, ucs_status_t status, void *user_data)
{
    ucx_req_t *q = user_data;
    ucp_request_free(request);
    if (q->gone) {
        free_husk(q);
        return;
    }
    if (status == UCS_OK && send_next_part(q))
        return;
    q->state = S_DONE;
    if (status != UCS_OK)
        ep_failed_later(q->u, q->ep, 0);
    free_req(q, status == UCS_OK);
}

static void do_send(ucx_req_t *q)
{
    q->state = S_SENDING;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.send = send_done, .user_data = q};
    void *rq = ucp_am_send_nbx(q->ep, TFX_UCX_AM_REPLY, q->hdr, q->hdr_len,
                               q->body ? (const uint8_t *)q->body + q->send_off : NULL,
                               q->send_len, &p);
    if (rq == NULL && send_next_part(q))
        return;                             /* sent at once: on to the next part */
    if (UCS_PTR_IS_PTR(rq))
        return;                         /* send_done frees q */
    q->state = S_DONE;
    free_req(q, rq == NULL);
}

/* Runs handle until it answers or suspends with no wake-up pending. */
static void run_handle(ucx_req_t *q)
{
    tfx_ucx_t *u = q->u;
    tfx_req_t *r = &q->base;
    for (;;) {
        q->state = S_RUNNING;
        r->want_suspend = 0;
        tfx_req_handling(r);
        u->h.handle(r, u->h.arg);
        if (r->answered || !r->want_suspend)
            return;
        pthread_mutex_lock(&u->qlock);
        if (q->wake_pending) {
            q->wake_pending = 0;
            pthread_mutex_unlock(&u->qlock);
            continue;
        }
        q->state = S_SUSPENDED;
        pthread_mutex_unlock(&u->qlock);
        return;
    }
}

/* Every byte of the body is in: the request runs. */
static void body_landed(ucx_req_t *q)
{
    q->base.body_len = q->parts.total;
    q->base.body_seen = q->base.body_len;
    queue_local(q, Q_READY);
}

static void recv_done(void *request, ucs_status_t status, size_t length, void *user_data)
{
    ucx_req_t *q = user_data;
    ucp_request_free(request);
    if (q->gone) {
        free_husk(q);
        return;
    }
    if (status != UCS_OK) {
        /* The client is gone (or its endpoint failed): answering on that endpoint crashes
         * UCX 1.13 (measured), so the request ends here, unanswered, and so do the others
         * on that endpoint (fail_ep, from the loop). */
        ep_failed_later(q->u, q->ep, 0);
        q->state = S_DONE;
        q->base.answered = 1;
        free_req(q, 0);
        return;
    }
    q->recv_out = 0;
    q->landed += length;
    if (q->landed < q->parts.total) {       /* more parts to come */
        q->state = S_PARTS;
        if (tfx_ucx_landing_advance(&q->land)) {    /* the next one is here already */
            q->recv_out = 1;
            queue_local(q, Q_RECV);
        }
        return;
    }
    body_landed(q);
}

/* The buffer for the whole body (parts.total bytes), with the prefix from the AM header in
 * place. 0, or -1 answered (no room). */
static int grow_body(ucx_req_t *q, const uint8_t *prefix)
{
    tfx_req_t *r = &q->base;
    size_t pre = q->in.prefix_len;
    if (q->grown)
        return 0;
    tfp_status_t st = tfx_req_grow_body(r, r->headroom + q->parts.total);
    if (st != TFP_OK) {
        tfx_respond_error(r, st, "no room for a %llu-byte request body: %s",
                          (unsigned long long)q->parts.total, tfp_status_text(st));
        return -1;
    }
    if (pre)
        memcpy(r->buf + r->headroom, prefix, pre);
    q->grown = 1;
    return 0;
}

/* Starts the rendezvous receive into the accepted buffer. */
static void do_recv(ucx_req_t *q)
{
    tfx_ucx_t *u = q->u;
    tfx_req_t *r = &q->base;
    void *desc = q->land.desc;
    q->land.desc = NULL;
    if (!q->grown) {
        int rc = grow_body(q, q->prefix);
        free(q->prefix);
        q->prefix = NULL;
        if (rc != 0) {
            q->recv_out = 0;
            ucp_am_data_release(u->base.worker, desc);
            return;
        }
    }
    q->state = S_RECEIVING;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA |
                                             UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                             .cb.recv_am = recv_done, .user_data = q};
    void *rq = ucp_am_recv_data_nbx(u->base.worker, desc, r->buf + r->headroom + q->land.off,
                                    q->land.len, &p);
    if (UCS_PTR_IS_ERR(rq)) {
        q->recv_out = 0;
        tfx_respond_error(r, TFP_EPROTO, "cannot receive the body: %s",
                          ucs_status_string(UCS_PTR_STATUS(rq)));
    }
}

/* A request's conditions block, into the op as HTTP's If-Match, If-None-Match, Tfetch-TTL
 * and Range fill it (proto/http.c take_cond; the decoder checked the syntax: If-Match
 * compares strongly, so a weak tag there never matches). */
static void cond_frame_op(tfx_req_t *r, const tfp_uf_cond_t *c)
{
    tfp_op_t *op = &r->op;
    if (c->if_match[0])
        tfp_etags_parse(c->if_match, 0, &op->cond.if_match);
    if (c->if_none_match[0])
        tfp_etags_parse(c->if_none_match, 1, &op->cond.if_none_match);
    op->ttl_s = c->ttl_s;
    if (c->flags & TFP_UF_CF_RANGE) {
        op->cond.range.kind = c->last == UINT64_MAX ? TFP_RANGE_FROM : TFP_RANGE_FROM_TO;
        op->cond.range.a = c->first;
        op->cond.range.b = c->last == UINT64_MAX ? 0 : c->last;
    }
}

/* The operation a request frame (GET, PUT, DELETE, CALL or FEED) asks for, into r->op. */
static void frame_op(tfx_ucx_t *u, tfx_req_t *r, const tfp_uf_hdr_t *h, const peer_t *p)
{
    tfp_op_t *op = &r->op;
    op->kind = h->op == TFP_UF_PUT ? TFP_OP_TENSOR_PUT
             : h->op == TFP_UF_DELETE ? TFP_OP_TENSOR_DELETE
             : h->op == TFP_UF_CALL ? TFP_OP_CALL : TFP_OP_TENSOR_GET;
    memcpy(op->name, h->name, sizeof op->name);     /* the decoder checked every string */
    memcpy(op->who.user, h->user, sizeof op->who.user);
    /* Whose user it is (a gateway forwarding another principal's user): checked by the
     * router exactly as HTTP's Tfetch-User-Principal (forward on that principal). The
     * caller's own principal is never taken from the frame: it is the endpoint's. */
    memcpy(op->who.user_principal, h->user_principal, sizeof op->who.user_principal);
    memcpy(op->who.request_id, h->request_id, sizeof op->who.request_id);
    op->who.cred = p->cred;                         /* the endpoint's, from its HELLO */
    memcpy(op->who.token_hash, p->token_hash, sizeof op->who.token_hash);
    op->wait_ms = h->wait_ms;
    op->body.media = h->body_len ? TFP_MEDIA_SAFETENSORS : TFP_MEDIA_NONE;
    op->body.length = h->body_len > INT64_MAX ? INT64_MAX : (int64_t)h->body_len;
    op->accept = TFP_MEDIA_NONE;
    if (op->kind == TFP_OP_TENSOR_PUT || op->kind == TFP_OP_CALL) {
        op->body.kind = TFP_BODY_SAFETENSORS;
        tfp_op_check_length(op, u->cfg.max_body, &r->op_err);
    }
    if (h->flags & TFP_UF_F_COND) {
        cond_frame_op(r, &h->cond);
        r->keep_headers = 1;            /* its reply's block reads Content-Range */
    }
    if (h->op == TFP_UF_FEED)
        feed_frame_op(u, r, h);
    if ((h->flags & TFP_UF_F_ANSWER) && h->answer[0] && r->op_err.code == TFP_OK)
        (void)tfp_op_digest_lines(op, h->answer, strlen(h->answer), &r->op_err);
}

/* A PART of a request's body: checked against the parts so far (proto/ucxframe.c), then
 * landed in place, eagerly or by a receive the loop starts. One that breaks the rules fails
 * the endpoint, as a broken connection would; one for a request answered already (refused
 * at begin, or given up waiting) is dropped. */
static ucs_status_t on_part(tfx_ucx_t *u, ucp_ep_h ep, const tfp_uf_hdr_t *h, void *data,
                           size_t length, int rndv)
{
    ucx_req_t *q = u->live;
    while (q && !(q->ep == ep && q->in.seq == h->seq))
        q = q->lnext;
    if (!q || !q->grown || q->base.answered || tfp_uf_parts_done(&q->parts)) {
        count(u, &u->st.dropped);
        return UCS_OK;
    }
    tfp_err_t err;
    uint64_t first = h->cond.first;
    int now = 0;                        /* a rendezvous to receive now */
    if (tfp_uf_parts_take(&q->parts, h, length, &err) != TFP_OK ||
        (rndv && (now = tfx_ucx_landing_arrive(&q->land, q->recv_out, data, length,
                                               first)) < 0)) {
        count(u, &u->st.bad_parts);
        ep_failed_later(u, ep, 0);
        return UCS_OK;
    }
    q->part_ms = tfx_now_coarse_ms();
    tfx_req_t *r = &q->base;
    if (!rndv) {
        memcpy(r->buf + r->headroom + first, data, length);
        q->landed += length;
        if (q->landed == q->parts.total && !q->recv_out)
            body_landed(q);
        return UCS_OK;
    }
    if (now) {                          /* else it waits for the part before it */
        q->recv_out = 1;
        queue_local(q, Q_RECV);
    }
    return UCS_INPROGRESS;
}

static ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    tfx_ucx_t *u = arg;
    ucp_ep_h ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    tfp_err_t err;
    /* The request's own frame is decoded in place (no 2.7 KiB copy per request); NULL: out
     * of memory, answered below from a frame read on the stack. */
    ucx_req_t *q = req_new(u);
    tfp_uf_hdr_t oom_h;
    tfp_uf_hdr_t *hp = q ? &q->in : &oom_h;
    const tfp_uf_hdr_t *h = hp;

    tfp_uf_parts_t parts;
    if (!ep || tfp_uf_decode(header, header_length, hp, &err) != TFP_OK ||
        tfp_uf_op_is_reply(h->op) ||
        (h->op != TFP_UF_PART && tfp_uf_parts_begin(&parts, h, length, &err) != TFP_OK)) {
        req_put(q);
        count(u, &u->st.dropped);
        if (ep && !is_authed(u, ep))
            close_ep(u, ep);
        return UCS_OK;                  /* dropping a rendezvous descriptor releases it */
    }
    if (h->op == TFP_UF_HELLO) {
        char why[256] = "";
        tfp_uf_hdr_t ack;
        tfp_uf_init(&ack, TFP_UF_HELLO_ACK, h->seq);
        long pid = 0;
        tfp_op_who_t who = {0};
        if (u->cfg.verify_hello(h->name, h->msg, &pid, &who, why, sizeof why,
                                u->cfg.verify_arg) == 0) {
            add_peer(u, ep, watchable_pid(pid), &who);
            count(u, &u->st.hellos);
            tfp_strcpy(ack.msg, sizeof ack.msg, TFP_UF_FEATURES);   /* what it takes */
        } else {
            ack.status = TFP_EBADREQ;
            tfp_strcpy(ack.msg, sizeof ack.msg, why[0] ? why : "token refused");
            count(u, &u->st.hellos_refused);
        }
        send_small(u, ep, &ack);
        req_put(q);                     /* h is q's frame: read before */
        return UCS_OK;
    }
    const peer_t *peer = find_peer(u, ep);
    int bye = h->op == TFP_UF_BYE;
    if (!peer || bye)
        req_put(q);                     /* h is no longer read */
    if (!peer) {
        count(u, &u->st.dropped);
        close_ep(u, ep);
        return UCS_OK;
    }
    if (!bye && h->op == TFP_UF_PART) {     /* (after a BYE h is freed) */
        ucs_status_t ret = on_part(u, ep, h, data, length, rndv);
        req_put(q);                     /* h was q's frame */
        return ret;
    }
    if (bye) {
        /* The client is closing its endpoint: what it still had in flight will never be
         * read or answered. The loop ends those requests (fail_ep: reservations, bodies and
         * blobs go back, nothing more is sent on ep) and then closes ep. Frames after BYE
         * come from an unadmitted endpoint and are dropped. */
        drop_peer(u, ep);
        ep_failed_later(u, ep, 1);
        count(u, &u->st.byes);
        return UCS_OK;
    }

    if (!q) {
        /* Answered at once (500, TF_ENOMEM) rather than left to the client's timeout; the
         * body, a rendezvous descriptor or not, is dropped when this returns UCS_OK. */
        tfp_uf_hdr_t rep;
        tfp_uf_init(&rep, TFP_UF_REPLY, h->seq);
        rep.status = TFP_ENOMEM;
        rep.http = 500;
        tfp_strcpy(rep.request_id, sizeof rep.request_id, h->request_id);
        snprintf(rep.msg, sizeof rep.msg, "out of memory");
        send_small(u, ep, &rep);
        return UCS_OK;
    }
    q->ep = ep;
    tfx_req_t *r = &q->base;
    r->ops = &ucx_ops;
    r->h = &u->h;
    tfx_req_arrived(r);
    frame_op(u, r, h, peer);
    q->lnext = u->live;
    if (u->live)
        u->live->lprev = q;
    u->live = q;
    atomic_fetch_add(&u->inflight, 1);
    count(u, &u->st.requests);
    if (h->prefix_len)
        count(u, &u->st.prefixed);

    if (atomic_load(&u->draining))
        tfx_respond_error(r, TFP_EBUSY, "the server is shutting down");
    else
        u->h.begin(r, u->h.arg);
    if (r->answered)
        return UCS_OK;                  /* refused at begin: the body is dropped */
    if (h->body_len && r->accept_body) {
        if (h->body_len > r->max_body) {
            tfx_respond_error(r, TFP_ETOOBIG, "request body exceeds the limit of %llu bytes",
                              (unsigned long long)r->max_body);
            return UCS_OK;
        }
        /* With flag BODY_PREFIX the body's first bytes end the AM header. */
        const uint8_t *prefix = (const uint8_t *)header + header_length - h->prefix_len;
        q->parts = parts;
        q->landed = h->prefix_len;
        q->land.off = h->prefix_len;
        q->part_ms = tfx_now_coarse_ms();
        /* A body in parts has its whole buffer now: a part may land eagerly. */
        if (!tfp_uf_parts_done(&parts) && grow_body(q, prefix) != 0)
            return UCS_OK;
        if (rndv) {
            if (!q->grown && h->prefix_len) {
                if (!(q->prefix = malloc(h->prefix_len))) {
                    tfx_respond_error(r, TFP_ENOMEM, "out of memory");
                    return UCS_OK;
                }
                memcpy(q->prefix, prefix, h->prefix_len);
            }
            q->land.desc = data;
            q->land.len = length;
            q->recv_out = 1;
            queue_local(q, Q_RECV);
            return UCS_INPROGRESS;      /* the descriptor is ours until do_recv */
        }
        if (grow_body(q, prefix) != 0)
            return UCS_OK;
        memcpy(r->buf + r->headroom + h->prefix_len, data, length);
        q->landed += length;
        if (q->landed < parts.total) {
            q->state = S_PARTS;
            return UCS_OK;
        }
        body_landed(q);
        return UCS_OK;
    }
    queue_local(q, Q_READY);
    return UCS_OK;
}

/* ---- the progress thread ---------------------------------------------------------------- */

/* A body in parts whose next part has not come within part_wait_ms is given up (408), as
 * HTTP closes a connection that sends nothing; its reservation and buffer go back when the
 * answer is sent, and parts that come later are dropped. 1 if q was. */
static unsigned give_up_stopped_body(tfx_ucx_t *u, ucx_req_t *q, uint64_t now)
{
    /* Only fields of this thread's first: a body not yet whole has never run its handler,
     * so no other thread touches its request (a suspended one's state is written by its
     * resumer). */
    if (!q->grown || q->recv_out || q->landed >= q->parts.total || q->base.answered ||
        now - q->part_ms < u->cfg.part_wait_ms)
        return 0;
    q->state = S_RUNNING;
    tfx_respond_error(&q->base, TFP_EREQTIME, "the body stopped: no part of it for %llu ms "
                      "(%llu of %llu bytes in)", (unsigned long long)(now - q->part_ms),
                      (unsigned long long)q->landed, (unsigned long long)q->parts.total);
    return 1;
}

/* On one host UCX cannot tell that a client died: every 100 ms, the endpoints with requests
 * in flight whose client process is gone fail (and every 5 s the idle ones are forgotten);
 * in the same walk, bodies in parts that stopped are given up. */
static unsigned check_peers(tfx_ucx_t *u)
{
    uint64_t now = tfx_now_coarse_ms();     /* every pass of the loop asks */
    if (now - u->last_peer_check_ms < 100)
        return 0;
    int all = now / 5000 != u->last_peer_check_ms / 5000;
    u->last_peer_check_ms = now;
    for (size_t i = 0; i < u->npeers; i++)
        u->peers[i].busy = 0;
    unsigned n = 0;
    for (ucx_req_t *q = u->live; q; q = q->lnext) {
        peer_t *p = find_peer(u, q->ep);
        if (p)
            p->busy = 1;
        n += give_up_stopped_body(u, q, now);
    }
    for (size_t i = 0; i < u->npeers;) {
        peer_t *p = &u->peers[i];
        if (p->pid > 0 && (p->busy || all) && pid_gone(p->pid)) {
            fail_ep(u, p->ep);              /* drops peers[i]: look at i again */
            n++;
            continue;
        }
        i++;
    }
    return n;
}

/* Runs what the callbacks and other threads queued. Returns how many it ran. */
static unsigned run_queues(tfx_ucx_t *u)
{
    unsigned n = 0;
    if (atomic_load(&u->rq_any)) {             /* the lock only when a resume queued one */
        pthread_mutex_lock(&u->qlock);
        while (u->rq_head) {
            ucx_req_t *q = pop(&u->rq_head, &u->rq_tail);
            push(&u->lq_head, &u->lq_tail, q);
        }
        atomic_store(&u->rq_any, 0);
        pthread_mutex_unlock(&u->qlock);
    }
    while (u->nfail) {
        struct fail_ep f = u->to_fail[--u->nfail];
        fail_ep(u, f.ep);
        if (f.bye && !held_by_husk(u, f.ep))
            close_ep(u, f.ep);
        n++;
    }
    if (u->nclose) {
        close_pending_eps(u);
        n++;
    }
    n += check_peers(u);
    ucx_req_t *q;
    while ((q = pop(&u->lq_head, &u->lq_tail))) {
        n++;
        pthread_mutex_lock(&u->qlock);
        int what = q->queued_as;
        q->queued_as = Q_NONE;
        pthread_mutex_unlock(&u->qlock);
        if (q->gone) {
            free_husk(q);
            continue;
        }
        switch (what) {
        case Q_RECV: do_recv(q); break;
        case Q_READY:
            if (!q->base.answered)
                run_handle(q);
            break;
        case Q_SEND: do_send(q); break;
        default: break;
        }
    }
    return n;
}

static unsigned loop_run(void *arg) { return run_queues(arg); }

static int query_address(ucp_worker_h w, int net_only, uint8_t **out, size_t *len);

/* The worker wedged (ucx_common.h): every request on it ends unanswered, its endpoints go,
 * and a new worker (new addresses) takes its place. Without one, UCX is off until restart:
 * upgrades then fail (no address) and clients stay on HTTP. */
static void renew_worker(void *arg)
{
    tfx_ucx_t *u = arg;
    while (u->live)
        end_gone(u->live);
    u->npeers = u->nclose = u->nfail = 0;
    tfp_err_t err;
    uint8_t *all = NULL, *net = NULL;
    size_t all_len = 0, net_len = 0;
    if (tfx_ucx_base_renew(&u->base, &err) != TFP_OK ||
        query_address(u->base.worker, 0, &all, &all_len) != 0 ||
        query_address(u->base.worker, 1, &net, &net_len) != 0) {
        free(all);
        all = NULL;
        all_len = 0;
    }
    /* What the old worker held is gone with it. */
    while (u->husks)
        free_husk(u->husks);
    pthread_mutex_lock(&u->slock);
    free(u->addr_all);
    free(u->addr_net);
    u->addr_all = all;
    u->addr_net = all ? net : NULL;
    u->addr_all_len = all_len;
    u->addr_net_len = all ? net_len : 0;
    u->st.renewals++;
    pthread_mutex_unlock(&u->slock);
    if (!all)
        free(net);
}

static int loop_stopping(void *arg) { return atomic_load(&((tfx_ucx_t *)arg)->stopping); }

static int loop_drained(void *arg) { return atomic_load(&((tfx_ucx_t *)arg)->inflight) == 0; }

/* The progress thread: the shared loop (ucx_common.h). Once stopped it finishes the replies in
 * flight, but sends to a client that died may never complete: it gives up after 2 s. */
static void *progress_main(void *arg)
{
    tfx_ucx_t *u = arg;
    const tfx_ucx_loop_t loop = {.run = loop_run, .stopping = loop_stopping,
                                 .drained = loop_drained, .drain_max_ns = 2000000000u,
                                 .sleep_ms = 100, .wedged = renew_worker, .arg = u};

    tfx_ucx_loop_run(&u->base, &loop);
    return NULL;
}

/* ---- lifecycle -------------------------------------------------------------------------- */

/* Copies the worker's address (all transports, or network ones only) into *out. */
static int query_address(ucp_worker_h w, int net_only, uint8_t **out, size_t *len)
{
    ucp_worker_attr_t a = {.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS |
                                         UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS,
                           .address_flags = net_only ? UCP_WORKER_ADDRESS_FLAG_NET_ONLY : 0};
    if (ucp_worker_query(w, &a) != UCS_OK)
        return -1;
    *out = malloc(a.address_length);
    if (*out)
        memcpy(*out, a.address, a.address_length);
    *len = a.address_length;
    ucp_worker_release_address(w, a.address);
    return *out ? 0 : -1;
}

tfx_ucx_t *tfx_ucx_start(const tfx_ucx_config_t *cfg, const tfx_handlers_t *h, tfp_err_t *err)
{
    tfx_ucx_t *u = calloc(1, sizeof *u);
    if (!u) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return NULL;
    }
    tfx_spare_init(&u->spare, SPARE_REQS);
    u->h = *h;
    u->cfg = *cfg;
    if (!u->cfg.part_wait_ms)
        u->cfg.part_wait_ms = 60000;
    pthread_mutex_init(&u->qlock, NULL);
    pthread_mutex_init(&u->slock, NULL);
    atomic_init(&u->stopping, 0);
    atomic_init(&u->draining, 0);
    atomic_init(&u->inflight, 0);

    tfx_ucx_tune_t tune = {.tcp_ports = cfg->tcp_ports};
    if (tfx_ucx_base_open(&u->base, "tfetchd", TFX_UCX_AM_REQUEST, on_am, u, 0, &tune, err) !=
        TFP_OK)
        goto free_u;
    if (query_address(u->base.worker, 0, &u->addr_all, &u->addr_all_len) != 0 ||
        query_address(u->base.worker, 1, &u->addr_net, &u->addr_net_len) != 0) {
        tfp_err_set(err, TFP_EINTERNAL, "cannot read the UCX worker's address");
        goto close_base;
    }
    if (pthread_create(&u->thread, NULL, progress_main, u) != 0) {
        tfp_err_set(err, TFP_EINTERNAL, "cannot start the UCX progress thread");
        goto close_base;
    }
    return u;
close_base:
    free(u->addr_all);
    free(u->addr_net);
    tfx_ucx_base_close(&u->base);
free_u:
    pthread_mutex_destroy(&u->qlock);
    pthread_mutex_destroy(&u->slock);
    free(u);
    return NULL;
}

int tfx_ucx_address(tfx_ucx_t *u, int net_only, uint8_t **addr, size_t *len)
{
    pthread_mutex_lock(&u->slock);              /* renew_worker replaces them */
    const uint8_t *src = net_only ? u->addr_net : u->addr_all;
    size_t n = net_only ? u->addr_net_len : u->addr_all_len;
    uint8_t *copy = src ? malloc(n) : NULL;
    if (copy)
        memcpy(copy, src, n);
    pthread_mutex_unlock(&u->slock);
    if (!copy)
        return -1;
    *addr = copy;
    *len = n;
    return 0;
}

void tfx_ucx_quiesce(tfx_ucx_t *u) { atomic_store(&u->draining, 1); }

unsigned tfx_ucx_inflight(tfx_ucx_t *u) { return atomic_load(&u->inflight); }
const char *tfx_ucx_server_memory(const tfx_ucx_t *u) { return u->base.memory_types; }

void tfx_ucx_stats(tfx_ucx_t *u, tfx_ucx_stats_t *st)
{
    pthread_mutex_lock(&u->slock);
    *st = u->st;
    pthread_mutex_unlock(&u->slock);
}

void tfx_ucx_stop(tfx_ucx_t *u)
{
    if (!u)
        return;
    atomic_store(&u->draining, 1);
    atomic_store(&u->stopping, 1);
    tfx_ucx_base_wake(&u->base);
    pthread_join(u->thread, NULL);
    /* Whatever is left never finished (its client died). Release held descriptors, let the
     * worker cancel what UCX still has, then account for the rest and free it. */
    for (ucx_req_t *q = u->live; q; q = q->lnext)
        if (q->land.desc) {
            ucp_am_data_release(u->base.worker, q->land.desc);
            q->land.desc = NULL;
        }
    close_pending_eps(u);
    tfx_ucx_base_close(&u->base);       /* the worker first: it may still call back */
    while (u->live)
        free_req(u->live, 0);
    while (u->husks)
        free_husk(u->husks);
    tfx_spare_free_all(&u->spare);
    free(u->peers);
    free(u->to_close);
    free(u->to_fail);
    free(u->addr_all);
    free(u->addr_net);
    pthread_mutex_destroy(&u->qlock);
    pthread_mutex_destroy(&u->slock);
    free(u);
}
