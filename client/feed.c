/* feed.c - a feed's consumer side (tf_feed_t: attach, pop, release and acknowledge, push to
 * the outfeed, detach) as one state machine over a device backend (feed.h), and the blocking
 * producer and operator calls (declare, infeed push, done, stats, outfeed get).
 *
 * A feed owns: the items it received and has not seen released (position order; each
 * copying, ready or held by the caller), the caller's pops waiting (a FIFO: they complete in
 * the order they were started), its outfeed pushes (a FIFO, one request at a time so the
 * outfeed keeps their order), at most one pop request in flight, and the backend's state.
 * One pop request at a time is what makes the cumulative acknowledgement safe: when a pop is
 * sent, every item the server delivered before it has arrived, so "released through P"
 * never covers an item still on the wire. Prefetch is how many items the feed keeps copying
 * or ready ahead of the caller: the next pop is sent as soon as the last one answered while
 * fewer are queued.
 *
 * Every request goes through the client's engine (fetch.c's generic call, TFI_OP_CALL);
 * the feed is a source of the client (tfi_source_t), drained whenever the client is driven:
 * it polls its copies' events, hands ready items to waiting pops, starts the next pop and the
 * next push. All of it on the thread driving the client; backends wake that thread from
 * their own (tfi_wakeup) when a copy completes.
 */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "client/feed.h"
#include "client/ring.h"
#include "proto/jsonread.h"
#include "proto/shmframe.h"

#define DEFAULT_PREFETCH 2
#define MAX_PREFETCH 64
#define DEFAULT_POLL_MS 1000L
#define FEEDS_PREFIX "/v1/feeds/"

enum { ITEM_COPYING, ITEM_READY, ITEM_HELD };

struct tf_item {
    tf_feed_t *feed;
    tf_item_t *prev, *next;         /* feed->items */
    uint64_t position, seq, round, generation;
    int state;
    int stale;                      /* of an older generation: released without an ack */
    tfi_copy_t x;
};

typedef struct waiter {
    struct waiter *next;
    tf_pop_cb cb;
    void *ud;
    uint64_t deadline_ms;           /* tfx_now_ms; 0: none */
} waiter_t;

typedef struct push {
    struct push *next;
    tfi_copy_t x;
    tf_fetch_t *f;                  /* its request, once the copy completed */
    tf_push_cb cb;
    void *ud;
} push_t;

struct tf_feed {
    tfi_source_t src;               /* first: the client's drive loop drains it */
    tf_client_t *c;
    char *url;                      /* http://host:port/v1/feeds/NAME */
    char name[TFP_MAX_TENSOR_NAME + 1];     /* NAME, for the UCX frames */
    char transport[32];             /* what carried the last pop or push ("http", "ucx/...") */
    char dev[TFP_MAX_TENSOR_NAME + 1];
    char consumer[TFP_MAX_USER_ID + 1];
    const tfi_feed_backend_t *be;
    void *be_state;
    int prefetch;
    long poll_ms;
    tf_item_t *head, *tail;         /* received, not released */
    size_t nqueued;                 /* copying or ready */
    size_t ncopying;
    waiter_t *wh, *wt;
    size_t nwaiters;
    push_t *ph, *pt;
    tf_fetch_t *pop;                /* the pop request in flight */
    uint64_t pop_ack;               /* the ack it carries (0: none) */
    int rewind;                     /* until a pop is answered: ask for ?rewind=1, so what an
                                     * earlier run under this consumer id was given and never
                                     * released comes again instead of being acked unseen */
    int popping;                    /* a first pop was asked for: prefetch from then on */
    uint64_t generation;
    int have_generation;
    uint64_t delivered;             /* the highest position received in this generation */
    uint64_t acked;                 /* the server was told: released through this */
    tf_status_t done;               /* TF_EDONE once the server said so, else TF_OK */
    tf_status_t err;                /* a failed pop, for the next waiting pop */
    char errmsg[256];
    tf_result_t err_res;            /* its outcome, for tf_client_last */
    int busy;                       /* inside pump */
    int detaching;
    int no_prefetch;                /* TF_FEED_NO_PREFETCH */
    /* Same host: items come from a ring in shared memory (client/ring.h), not requests. */
    tfi_ring_t *ring;
    int ring_tried;
    uint64_t ring_got;              /* items the ring delivered (credit is counted so) */
    uint64_t ring_acked;            /* released through this, told the ring (an ACK datagram:
                                     * not yet confirmed, so acked, which tf_feed_ack
                                     * confirms, stays apart) */
    char ring_why[256];             /* why there is no ring */
};

#ifndef HAVE_CUDA
const tfi_feed_backend_t *const tfi_feed_cuda = NULL;
#endif

/* ---- helpers -------------------------------------------------------------------------------- */

tf_status_t tfi_feed_doc_like(const tf_doc_t *like, void *const *data, tf_doc_t **out)
{
    tf_doc_t *d = tf_doc_new();
    if (!d)
        return TF_ENOMEM;
    for (size_t i = 0; i < tf_doc_count(like); i++) {
        const tf_tensor_t *t = tf_doc_at(like, i);
        tf_status_t st = tf_doc_add(d, t->name, t->dtype, t->rank, t->shape, data[i],
                                    t->nbytes, TF_BORROW);
        if (st != TF_OK) {
            tf_doc_free(d);
            return st;
        }
    }
    for (size_t i = 0; i < like->d->nmeta; i++) {
        if (tf_doc_set_meta(d, like->d->meta[i].key, like->d->meta[i].value) != TF_OK) {
            tf_doc_free(d);
            return TF_ENOMEM;
        }
    }
    *out = d;
    return TF_OK;
}

/* Checks url is http(s)://host:port/v1/feeds/NAME (no query) and copies it. */
static tf_status_t feed_url(tf_client_t *c, const char *url, char **out, int op)
{
    char *origin = NULL, *path = NULL;
    int query = 0;
    tfx_hc_status_t xst = tfx_hc_url_split(url, &origin, &path, &query);
    if (xst == TFX_HC_ENOMEM)
        return tfi_refuse(c, op, TF_ENOMEM, NULL);
    int ok = xst == TFX_HC_OK && !query && strncmp(path, FEEDS_PREFIX, strlen(FEEDS_PREFIX)) == 0 &&
             tfp_name_valid(path + strlen(FEEDS_PREFIX)) &&
             !strchr(path + strlen(FEEDS_PREFIX), '/');
    free(origin);
    free(path);
    if (!ok)
        return tfi_refuse(c, op, TF_EURL, "bad feed URL (expected http://HOST:PORT/v1/feeds/NAME)");
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    if (!(*out = strndup(url, n)))
        return tfi_refuse(c, op, TF_ENOMEM, NULL);
    return TF_OK;
}

/* The feed's name in a URL feed_url accepted (its last path segment). */
static const char *name_of(const char *url)
{
    const char *p = strstr(url, FEEDS_PREFIX);
    return p ? p + strlen(FEEDS_PREFIX) : "";
}

/* A call's operation: the feed op, the feed and device (dev may be NULL). */
static void ucx_op(tfi_call_t *call, int op, const char *name, const char *dev)
{
    call->feed.op = (uint8_t)op;
    call->feed_name = name;
    if (dev)
        snprintf(call->feed.dev, sizeof(call->feed.dev), "%s", dev);
}

/* A call this consumer makes on its device queue (pop, ack, detach): the consumer, and the
 * acknowledgement through ack when ack is not 0. */
static void consumer_call(tfi_call_t *call, tf_feed_t *feed, int op, uint64_t ack)
{
    ucx_op(call, op, feed->name, feed->dev);
    snprintf(call->feed.consumer, sizeof(call->feed.consumer), "%s", feed->consumer);
    if (ack) {
        call->feed.flags |= TFP_UF_FF_HAS_ACK;
        call->feed.ack = ack;
    }
}

static void note_transport(tf_feed_t *feed, const tf_result_t *r)
{
    snprintf(feed->transport, sizeof(feed->transport), "%s", r->transport);
}

const char *tf_feed_transport(const tf_feed_t *feed)
{
    return !feed ? NULL : feed->transport[0] ? feed->transport : "none";
}

static void make_consumer(char out[TFP_MAX_USER_ID + 1])
{
    uint8_t r[8] = {0};
    if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
        uint64_t x = tfx_now_ns() ^ (uint64_t)(uintptr_t)out;
        memcpy(r, &x, sizeof(r));
    }
    int o = snprintf(out, TFP_MAX_USER_ID + 1, "tf-");
    for (int i = 0; i < 8; i++)
        o += snprintf(out + o, (size_t)(TFP_MAX_USER_ID + 1 - o), "%02x", r[i]);
}

/* Released through this: every item of this generation at or below it was released. */
static uint64_t ack_through(const tf_feed_t *feed)
{
    for (const tf_item_t *it = feed->head; it; it = it->next)
        if (!it->stale)
            return it->position - 1;
    return feed->delivered;
}

/* ---- items ---------------------------------------------------------------------------------- */

static void item_unlink(tf_feed_t *feed, tf_item_t *it)
{
    if (it->prev)
        it->prev->next = it->next;
    else
        feed->head = it->next;
    if (it->next)
        it->next->prev = it->prev;
    else
        feed->tail = it->prev;
    it->prev = it->next = NULL;
}

/* Frees an item and its copy (waiting for the copy to complete, as a device must). */
static void item_free(tf_feed_t *feed, tf_item_t *it)
{
    if (it->state == ITEM_COPYING)
        feed->ncopying--;
    if (it->state != ITEM_HELD)
        feed->nqueued--;
    item_unlink(feed, it);
    feed->be->release(feed->be_state, &it->x);
    tf_doc_free(it->x.dev);
    tf_doc_free(it->x.host);
    free(it);
}

void tf_item_release(tf_item_t *it)
{
    if (!it)
        return;
    item_free(it->feed, it);
}

const tf_doc_t *tf_item_doc(const tf_item_t *it)
{
    return !it ? NULL : it->x.dev ? it->x.dev : it->x.host;
}

uint64_t tf_item_position(const tf_item_t *it) { return it ? it->position : 0; }
uint64_t tf_item_seq(const tf_item_t *it) { return it ? it->seq : 0; }
uint64_t tf_item_round(const tf_item_t *it) { return it ? it->round : 0; }
uint64_t tf_item_generation(const tf_item_t *it) { return it ? it->generation : 0; }

/* A new generation (the feed was reset): what is queued is gone on the server too; what the
 * caller holds stays valid but is acknowledged no more; positions start again. */
static void new_generation(tf_feed_t *feed, uint64_t g)
{
    for (tf_item_t *it = feed->head, *next; it; it = next) {
        next = it->next;
        if (it->state == ITEM_HELD)
            it->stale = 1;
        else
            item_free(feed, it);
    }
    feed->generation = g;
    feed->have_generation = 1;
    feed->delivered = feed->acked = feed->ring_acked = 0;
    feed->done = TF_OK;
}

/* ---- the pop request -------------------------------------------------------------------------- */

static void set_err(tf_feed_t *feed, tf_status_t st, const char *msg)
{
    feed->err = st;
    snprintf(feed->errmsg, sizeof(feed->errmsg), "%s", msg && msg[0] ? msg : tf_strerror(st));
    tfi_new_result(feed->c, &feed->err_res, TFI_OP_CALL, NULL);
    snprintf(feed->err_res.op, sizeof(feed->err_res.op), "feed_pop");
    tfi_rfail(&feed->err_res, st, "%s", feed->errmsg);
}

/* A received item: queued, its copy started. */
static void take_item(tf_feed_t *feed, const tfi_reply_t *rp, tf_doc_t *doc)
{
    uint64_t generation, position, seq, round;
    if (tfi_reply_u64(rp, TFP_AF_GENERATION, &generation) &&
        (!feed->have_generation || generation != feed->generation))
        new_generation(feed, generation);
    if (!tfi_reply_u64(rp, TFP_AF_POSITION, &position) || position == 0) {
        tf_doc_free(doc);
        set_err(feed, TF_EPROTO, "pop reply without a valid Tfetch-Position");
        return;
    }
    if (position <= feed->delivered) {
        tf_doc_free(doc);               /* given again after a rewind: the feed has it */
        return;
    }
    tf_item_t *it = calloc(1, sizeof(*it));
    if (!it) {
        tf_doc_free(doc);
        set_err(feed, TF_ENOMEM, NULL);
        return;
    }
    it->feed = feed;
    it->position = position;
    (void)tfi_reply_u64(rp, TFP_AF_SEQ, &seq);
    (void)tfi_reply_u64(rp, TFP_AF_ROUND, &round);
    it->seq = seq;
    it->round = round;
    it->generation = feed->generation;
    it->x.host = doc;
    if (position > feed->delivered)
        feed->delivered = position;
    it->prev = feed->tail;
    if (feed->tail)
        feed->tail->next = it;
    else
        feed->head = it;
    feed->tail = it;
    feed->nqueued++;
    it->state = ITEM_COPYING;
    feed->ncopying++;
    tf_status_t st = feed->be->in_start(feed->be_state, &it->x);
    if (st != TF_OK) {
        /* Left unacknowledged: the queue gives it again after the lease. */
        item_free(feed, it);
        set_err(feed, st, "cannot start the copy to the device");
    }
}

static void on_pop_done(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                        void *ud)
{
    tf_feed_t *feed = ud;
    uint64_t generation;
    feed->pop = NULL;
    note_transport(feed, r);
    int answered = st == TF_OK || st == TF_EDONE;
    if (answered && feed->pop_ack > feed->acked)
        feed->acked = feed->pop_ack;
    if (answered)
        feed->rewind = 0;
    if (st == TF_OK && doc)
        take_item(feed, &f->reply, doc);
    else if (st == TF_OK && tfi_reply_u64(&f->reply, TFP_AF_GENERATION, &generation) &&
             feed->have_generation && generation != feed->generation)
        new_generation(feed, generation);               /* a 204 after a reset */
    else if (st == TF_EDONE)
        feed->done = TF_EDONE;
    else if (st != TF_OK && !feed->detaching) {
        set_err(feed, st, r->error);
        feed->err_res = *r;             /* the pop request's own outcome */
    }
    tf_fetch_free(f);
}

/* Sends the next pop, long-polling up to wait_ms, carrying the acknowledgement due. */
static void start_pop(tf_feed_t *feed, long wait_ms)
{
    uint64_t ack = ack_through(feed);
    tfi_call_t call = {.url = feed->url, .wait_ms = wait_ms, .what = "feed_pop",
                       .background = 1};
    feed->pop_ack = ack > feed->acked ? ack : 0;
    consumer_call(&call, feed, TFP_UF_FEED_POP, feed->pop_ack);
    if (feed->rewind)
        call.feed.flags |= TFP_UF_FF_REWIND;
    tf_status_t st = tfi_call_start(feed->c, &call, on_pop_done, feed, &feed->pop);
    if (st != TF_OK) {
        feed->pop = NULL;
        set_err(feed, st, tf_client_last(feed->c)->error);
    }
}

/* ---- the same-host ring ------------------------------------------------------------------- */

/* Opens the feed's ring when its server is on this host (policy auto, the origin's shm
 * connection): items then come from shared memory, not from pop requests. When that is not
 * possible, why is kept and pops go over UCX or HTTP. */
static void try_ring(tf_feed_t *feed)
{
    feed->ring_tried = 1;
    origin_t *o = NULL;
    if (feed->c->transport != TF_TRANSPORT_AUTO) {
        snprintf(feed->ring_why, sizeof(feed->ring_why), "the transport policy is not auto");
        return;
    }
    if (tfi_origin_of(feed->c, feed->url, TFI_OP_CALL, &o) != TF_OK || !o->shm) {
        snprintf(feed->ring_why, sizeof(feed->ring_why), "no shared memory with the server "
                 "(another host, or no upgrade)");
        return;
    }
    /* What is prefetched, held by the caller and copying; a tool taking one item at a time
     * (TF_FEED_NO_PREFETCH) needs two. */
    int n = feed->no_prefetch ? 2 : feed->prefetch + 2;
    if (n > TFP_SF_MAX_SLOTS)
        n = TFP_SF_MAX_SLOTS;
    if (tfi_ring_open(feed->c, o, feed->name, feed->dev, feed->consumer, (unsigned)n,
                      &feed->ring, feed->ring_why, sizeof(feed->ring_why)) != TF_OK)
        feed->ring = NULL;
}

/* Pops go over requests from here on; what the ring gave and the caller did not release
 * comes again (rewind), and take_item drops the copies of what the feed still has. */
static void ring_end(tf_feed_t *feed, const char *why)
{
    tfi_ring_close(feed->ring);
    feed->ring = NULL;
    snprintf(feed->ring_why, sizeof(feed->ring_why), "%s", why);
    feed->rewind = 1;
}

/* Takes what the ring said: 1 if anything. */
static int ring_drain(tf_feed_t *feed)
{
    int any = 0;
    tfi_ring_msg_t m;
    while (feed->ring && tfi_ring_take(feed->ring, &m)) {
        any = 1;
        switch (m.kind) {
        case TFI_RING_ITEM:
            feed->ring_got++;
            snprintf(feed->transport, sizeof(feed->transport), "shm/ring");
            take_item(feed, &m.reply, m.doc);
            break;
        case TFI_RING_GENERATION:
            if (!feed->have_generation ||
                m.reply.answer.num[TFP_AF_GENERATION] != feed->generation)
                new_generation(feed, m.reply.answer.num[TFP_AF_GENERATION]);
            break;
        case TFI_RING_DONE:
            feed->done = TF_EDONE;
            break;
        case TFI_RING_ERROR:
            set_err(feed, m.status, m.why);
            ring_end(feed, m.why);
            break;
        default:                        /* BROKEN: requests take over */
            ring_end(feed, m.why);
            break;
        }
    }
    return any;
}

/* Tells the ring what the feed wants (credit, as a pop request would be sent), what the
 * caller released (the acknowledgement) and which slots it gave back, in one send. */
static void ring_ask(tf_feed_t *feed)
{
    uint64_t target = feed->nwaiters > feed->nqueued ? feed->nwaiters - feed->nqueued : 0;
    if (!feed->no_prefetch && feed->nqueued < (size_t)feed->prefetch &&
        (uint64_t)feed->prefetch - feed->nqueued > target)
        target = (uint64_t)feed->prefetch - feed->nqueued;
    uint64_t outstanding = tfi_ring_asked(feed->ring) - feed->ring_got, credit = 0;
    if (feed->popping && !feed->detaching && feed->done == TF_OK && feed->err == TF_OK &&
        target > outstanding)
        credit = feed->ring_got + target;
    uint64_t through = ack_through(feed);
    if (through <= feed->acked || through <= feed->ring_acked)
        through = 0;
    if (tfi_ring_sync(feed->ring, credit, through, feed->generation) != 0)
        ring_end(feed, "the ring's connection failed");
    else if (through)
        feed->ring_acked = through;
}

/* ---- the state machine ---------------------------------------------------------------------- */

static void complete_waiter(tf_feed_t *feed, tf_status_t st, tf_item_t *it)
{
    waiter_t *w = feed->wh;
    feed->wh = w->next;
    if (!feed->wh)
        feed->wt = NULL;
    feed->nwaiters--;
    feed->c->npending--;
    if (st != TF_OK && st != TF_EAGAIN && st != TF_EDONE && st != TF_ECANCELED)
        feed->c->last = feed->err_res;
    feed->c->in_cb++;
    w->cb(feed, st, it, w->ud);
    feed->c->in_cb--;
    free(w);
}

/* The item the next pop gets: the oldest one not handed out. */
static tf_item_t *queue_head(tf_feed_t *feed)
{
    for (tf_item_t *it = feed->head; it; it = it->next)
        if (it->state != ITEM_HELD)
            return it;
    return NULL;
}

/* Completes the head waiter if it can be: 1 if it did. */
static int serve_waiter(tf_feed_t *feed)
{
    if (!feed->wh)
        return 0;
    tf_item_t *it = queue_head(feed);
    if (it && it->state == ITEM_READY) {
        it->state = ITEM_HELD;
        feed->nqueued--;
        complete_waiter(feed, TF_OK, it);
        return 1;
    }
    if (!it && feed->err != TF_OK) {
        tf_status_t st = feed->err;
        feed->err = TF_OK;
        complete_waiter(feed, st, NULL);
        return 1;
    }
    if (!it && feed->done != TF_OK && !feed->pop) {
        complete_waiter(feed, feed->done, NULL);
        return 1;
    }
    if (feed->wh->deadline_ms && tfx_now_ms() >= feed->wh->deadline_ms) {
        complete_waiter(feed, TF_EAGAIN, NULL);
        return 1;
    }
    return 0;
}

/* Polls the copies still running. */
static void poll_copies(tf_feed_t *feed)
{
    if (feed->ncopying == 0)
        return;
    for (tf_item_t *it = feed->head, *next; it; it = next) {
        next = it->next;
        if (it->state != ITEM_COPYING)
            continue;
        int r = feed->be->ready(feed->be_state, &it->x);
        if (r == 0)
            continue;
        feed->ncopying--;
        it->state = ITEM_READY;
        if (r < 0) {
            it->state = ITEM_READY;     /* counted as queued until freed */
            item_free(feed, it);
            set_err(feed, TF_EIO, "the copy to the device failed");
        }
    }
}

static void on_push_done(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                         void *ud);

/* Completes the head push (its request's outcome, or a failure before it). */
static void complete_push(tf_feed_t *feed, tf_status_t st, uint64_t seq)
{
    push_t *p = feed->ph;
    feed->ph = p->next;
    if (!feed->ph)
        feed->pt = NULL;
    feed->be->release(feed->be_state, &p->x);
    feed->c->npending--;
    feed->c->in_cb++;
    p->cb(feed, st, seq, p->ud);
    feed->c->in_cb--;
    free(p);
}

/* Starts the head push's request once its copy to the host completed: 1 if something
 * changed. */
static int next_push(tf_feed_t *feed)
{
    push_t *p = feed->ph;
    if (!p || p->f)
        return 0;
    int r = feed->be->ready(feed->be_state, &p->x);
    if (r == 0)
        return 0;
    if (r < 0 || feed->detaching) {
        complete_push(feed, r < 0 ? TF_EIO : TF_ECANCELED, 0);
        return 1;
    }
    tfi_call_t call = {.url = feed->url, .doc = p->x.host ? p->x.host : p->x.src,
                       .what = "feed_outfeed", .background = 1};
    ucx_op(&call, TFP_UF_FEED_OUTFEED_PUSH, feed->name, feed->dev);
    tf_status_t st = tfi_call_start(feed->c, &call, on_push_done, feed, &p->f);
    if (st != TF_OK) {
        p->f = NULL;
        complete_push(feed, st, 0);
    }
    return 1;
}

static void on_push_done(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                         void *ud)
{
    tf_feed_t *feed = ud;
    uint64_t seq = 0;
    tfp_err_t err;
    tf_doc_free(doc);
    note_transport(feed, r);
    if (st == TF_OK && (!f->text || tfp_parse_uint_member(f->text, f->text_len, "seq", &seq,
                                                          &err) != TFP_OK)) {
        st = TF_EPROTO;
        tfi_rfail(&feed->c->last, st, "bad outfeed reply (expected {\"seq\": N})");
    } else if (st != TF_OK) {
        feed->c->last = *r;
    }
    feed->ph->f = NULL;
    complete_push(feed, st, seq);
    tf_fetch_free(f);
}

/* Everything the feed can do now without waiting. Re-entered from a callback it runs, it
 * returns at once (the outer pass goes on). */
static void pump(tf_feed_t *feed)
{
    if (feed->busy)
        return;
    feed->busy = 1;
    for (;;) {
        int progress = 0;
        poll_copies(feed);
        while (serve_waiter(feed))
            progress = 1;
        while (next_push(feed))
            progress = 1;
        int want = feed->nwaiters > feed->nqueued ||
                   (!feed->no_prefetch && feed->nqueued < (size_t)feed->prefetch);
        if (feed->popping && !feed->ring_tried && !feed->pop && !feed->detaching)
            try_ring(feed);
        if (feed->ring) {
            if (ring_drain(feed))
                progress = 1;
            if (feed->ring)
                ring_ask(feed);
        } else if (feed->popping && !feed->pop && !feed->detaching && feed->done == TF_OK &&
                   feed->err == TF_OK && want) {
            long wait = feed->poll_ms;
            if (feed->wh && feed->wh->deadline_ms && feed->nqueued == 0) {
                uint64_t now = tfx_now_ms();
                long left = feed->wh->deadline_ms > now ? (long)(feed->wh->deadline_ms - now) : 0;
                if (left < wait)
                    wait = left;
            }
            start_pop(feed, wait);
            progress = 1;
        }
        if (!progress)
            break;
    }
    feed->busy = 0;
}

static void feed_drain(tfi_source_t *s)
{
    pump((tf_feed_t *)s);
}

static size_t feed_running(const tfi_source_t *s)
{
    const tf_feed_t *feed = (const tf_feed_t *)s;
    size_t n = feed->ncopying;
    if (feed->ph && !feed->ph->f)
        n++;
    if (feed->ring && feed->nwaiters)
        n++;                            /* the ring's reader thread wakes the client */
    return n;
}

/* Any thread: a backend's copy completed. */
static void feed_wake(void *ud)
{
    tfi_wakeup(ud);
}

/* ---- attach and detach ------------------------------------------------------------------- */

static const tfi_feed_backend_t *backend_named(const char *name)
{
    if (!name || strcmp(name, "host") == 0)
        return &tfi_feed_host;
    if (strcmp(name, "sim") == 0)
        return &tfi_feed_sim;
    if (strcmp(name, "cuda") == 0)
        return tfi_feed_cuda ? tfi_feed_cuda : &tfi_feed_host;  /* checked by the caller */
    return NULL;
}

/* Opens the backend, falling back to host where allowed. */
static tf_status_t open_backend(tf_feed_t *feed, const char *name, const tf_feed_opts_t *o)
{
    char why[200] = "";
    const tfi_feed_backend_t *be = backend_named(name);
    if (!be)
        return tfi_refuse(feed->c, TFI_OP_CALL, TF_EINVAL,
                          "unknown feed backend (host, sim or cuda)");
    tfi_feed_env_t env = {.stream = o->stream, .device = o->cuda_device, .wake = feed_wake,
                          .wake_ud = feed->c};
    tf_status_t st;
    if (name && strcmp(name, "cuda") == 0 && !tfi_feed_cuda) {
        st = TF_ENOTIMPL;
        snprintf(why, sizeof(why), "this libtfetch was built without CUDA (--with-cuda)");
    } else {
        st = be->open(&env, &feed->be_state, why, sizeof(why));
    }
    if (st == TF_ENOTIMPL && name && strcmp(name, "host") != 0 &&
        (o->flags & TF_FEED_FALLBACK_HOST)) {
        be = &tfi_feed_host;
        st = be->open(&env, &feed->be_state, why, sizeof(why));
    }
    if (st != TF_OK)
        return tfi_refuse(feed->c, TFI_OP_CALL, st, why[0] ? why : tf_strerror(st));
    feed->be = be;
    return TF_OK;
}

tf_status_t tf_feed_attach_opts(tf_client_t *c, const char *url, const char *device,
                                const char *backend, const tf_feed_opts_t *opts,
                                tf_feed_t **out)
{
    tf_feed_opts_t o;
    tf_status_t st;
    if (!c)
        return TF_EINVAL;
    if (!out || !device || !tfp_name_valid(device) || strlen(device) > TFP_MAX_TENSOR_NAME ||
        strchr(device, '/'))
        return tfi_refuse(c, TFI_OP_CALL, TF_EINVAL, "bad feed device (an index or a name)");
    tf_feed_opts_t zero = {0};
    if (!opts)
        opts = &zero;
    if (tfi_struct_in(&o, sizeof(o), opts, opts->size, sizeof(tf_feed_opts_t)) != TF_OK)
        return tfi_refuse(c, TFI_OP_CALL, TF_EINVAL, "bad tf_feed_opts_t size");
    if (o.prefetch < 0 || o.prefetch > MAX_PREFETCH || o.poll_ms < 0)
        return tfi_refuse(c, TFI_OP_CALL, TF_EINVAL, "bad prefetch (1..64) or poll_ms");
    if (o.consumer && (!tfp_user_id_valid(o.consumer) || strlen(o.consumer) > TFP_MAX_USER_ID))
        return tfi_refuse(c, TFI_OP_CALL, TF_EINVAL,
                          "bad consumer id (expected [A-Za-z0-9._-]{1,128})");
    tf_feed_t *feed = calloc(1, sizeof(*feed));
    if (!feed)
        return tfi_refuse(c, TFI_OP_CALL, TF_ENOMEM, NULL);
    feed->c = c;
    feed->rewind = 1;
    feed->prefetch = o.prefetch ? o.prefetch : DEFAULT_PREFETCH;
    feed->poll_ms = o.poll_ms ? o.poll_ms : DEFAULT_POLL_MS;
    feed->no_prefetch = (o.flags & TF_FEED_NO_PREFETCH) != 0;
    snprintf(feed->dev, sizeof(feed->dev), "%s", device);
    if (o.consumer)
        snprintf(feed->consumer, sizeof(feed->consumer), "%s", o.consumer);
    else
        make_consumer(feed->consumer);
    if ((st = feed_url(c, url, &feed->url, TFI_OP_CALL)) != TF_OK)
        goto free_feed;
    /* The feed must exist: its stats say so. */
    snprintf(feed->name, sizeof(feed->name), "%s", name_of(feed->url));
    tfi_call_t call = {.url = feed->url, .what = "feed_stats"};
    ucx_op(&call, TFP_UF_FEED_STATS, feed->name, NULL);
    tf_fetch_t *f = NULL;
    st = tfi_call(c, &call, &f);
    tf_fetch_free(f);
    if (st != TF_OK)
        goto free_feed;
    if ((st = open_backend(feed, backend, &o)) != TF_OK)
        goto free_feed;
    feed->src.drain = feed_drain;
    feed->src.running = feed_running;
    tfi_source_add(c, &feed->src);
    *out = feed;
    return TF_OK;

free_feed:
    free(feed->url);
    free(feed);
    return st;
}

tf_status_t tf_feed_attach(tf_client_t *c, const char *url, const char *device,
                           const char *backend, tf_feed_t **out)
{
    return tf_feed_attach_opts(c, url, device, backend, NULL, out);
}

tf_status_t tf_feed_set_prefetch(tf_feed_t *feed, int depth)
{
    if (!feed || depth < 1 || depth > MAX_PREFETCH)
        return TF_EINVAL;
    feed->prefetch = depth;
    return TF_OK;
}

const char *tf_feed_backend(const tf_feed_t *feed)
{
    return feed ? feed->be->name : NULL;
}

/* A consumer's synchronous call (ack, detach) that carries its acknowledgement when one is
 * due. Once answered, that much counts as acknowledged. */
static tf_status_t acking_call(tf_feed_t *feed, int op, const char *what, long timeout_ms)
{
    uint64_t ack = ack_through(feed);
    if (ack <= feed->acked)
        ack = 0;
    tfi_call_t call = {.url = feed->url, .what = what, .timeout_ms = timeout_ms};
    consumer_call(&call, feed, op, ack);
    tf_fetch_t *f = NULL;
    tf_status_t st = tfi_call(feed->c, &call, &f);
    tf_fetch_free(f);
    if (st == TF_OK && ack > feed->acked)
        feed->acked = ack;
    return st;
}

tf_status_t tf_feed_ack(tf_feed_t *feed)
{
    if (!feed)
        return TF_EINVAL;
    if (ack_through(feed) <= feed->acked)
        return TF_OK;
    return acking_call(feed, TFP_UF_FEED_ACK, "feed_ack", 0);
}

/* 1 when the feed's server takes a consumer's detach: over UCX when its HELLO_ACK offered it
 * (an older server drops the frame unanswered); over HTTP always (an older one answers 404,
 * and the final ack goes instead). */
static int server_detaches(tf_feed_t *feed)
{
    origin_t *o = NULL;
    if (tfi_origin_of(feed->c, feed->url, TFI_OP_CALL, &o) != TF_OK)
        return 0;
    if (!o->conn)
        return 1;
    return tfi_ucx && tfi_ucx->has_feature(o, TFP_UF_FEATURE_FEED_DETACH);
}

/* Tells the server this consumer leaves the device queue: it releases through the feed's
 * acknowledgement, what it held goes back to the queue for whoever attaches next, and its
 * pop waiting there ends. Safe with that pop in flight: the pop's item, if it brings one, lies
 * beyond every position the client received, and a pop waiting across a reset ends without
 * an item of the new generation (the old generation's ack could release it). A short limit:
 * a server that does not answer does not hold the caller. */
#define DETACH_TIMEOUT_MS 5000
static tf_status_t send_detach(tf_feed_t *feed)
{
    return acking_call(feed, TFP_UF_FEED_DETACH, "feed_detach", DETACH_TIMEOUT_MS);
}

void tf_feed_detach(tf_feed_t *feed)
{
    if (!feed || feed->c->in_cb || feed->c->in_engine)
        return;
    tf_client_t *c = feed->c;
    feed->busy = 1;                     /* no pump: nothing starts from here on */
    while (feed->wh)
        complete_waiter(feed, TF_ECANCELED, NULL);
    feed->detaching = 1;
    if (feed->pop)
        tf_fetch_cancel(feed->pop);     /* over HTTP its callback runs now */
    tf_result_t last = c->last;
    /* Over UCX it completes later. The detach ends it on the server (204); wait for it then,
     * so no request of the feed is left on a connection the caller may close next (a server
     * replying on an endpoint whose client closed it is not safe across hosts). An item it
     * brings is never acknowledged: it comes again. Without the detach (a server that
     * predates it, or one that did not answer) the pop ends within its long poll, and the
     * acknowledgement goes alone after it. */
    tf_status_t dst = TF_EINVAL;
    if (!feed->ring && feed->popping && server_detaches(feed))
        dst = send_detach(feed);
    int never = 0;
    while (feed->pop)
        tfi_drive_until(c, &never, 50);
    while (feed->ph) {
        push_t *p = feed->ph;
        if (!p->f) {
            complete_push(feed, TF_ECANCELED, 0);
            continue;
        }
        tf_fetch_cancel(p->f);
        /* Over UCX the transport reads the document until the request completes: wait. */
        while (feed->ph == p && p->f)
            tfi_drive_until(c, &never, 50);
    }
    feed->busy = 0;
    if (dst != TF_OK)
        tf_feed_ack(feed);              /* best effort */
    c->last = last;
    tfi_ring_close(feed->ring);         /* the daemon detaches: unreleased items go back */
    feed->ring = NULL;
    while (feed->head)
        item_free(feed, feed->head);
    tfi_source_remove(c, &feed->src);
    feed->be->close(feed->be_state);
    free(feed->url);
    free(feed);
}

/* ---- pops ------------------------------------------------------------------------------------- */

tf_status_t tf_infeed_pop_start(tf_feed_t *feed, long timeout_ms, tf_pop_cb cb, void *ud)
{
    if (!feed || !cb || feed->detaching)
        return TF_EINVAL;
    waiter_t *w = calloc(1, sizeof(*w));
    if (!w)
        return TF_ENOMEM;
    w->cb = cb;
    w->ud = ud;
    w->deadline_ms = timeout_ms >= 0 ? tfx_now_ms() + (uint64_t)timeout_ms : 0;
    if (timeout_ms == 0)
        w->deadline_ms = tfx_now_ms();  /* only what is ready */
    if (feed->wt)
        feed->wt->next = w;
    else
        feed->wh = w;
    feed->wt = w;
    feed->nwaiters++;
    feed->c->npending++;
    feed->popping = 1;
    pump(feed);
    return TF_OK;
}

typedef struct {
    int done;
    tf_status_t st;
    tf_item_t *item;
} pop_wait_t;

static void on_blocking_pop(tf_feed_t *feed, tf_status_t st, tf_item_t *it, void *ud)
{
    pop_wait_t *pw = ud;
    pw->done = 1;
    pw->st = st;
    pw->item = it;
}

/* Removes a blocking pop's waiter that did not complete (its time ran out). */
static void drop_waiter(tf_feed_t *feed, void *ud)
{
    for (waiter_t **p = &feed->wh, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
        if ((*p)->ud != ud)
            continue;
        waiter_t *w = *p;
        *p = w->next;
        if (feed->wt == w)
            feed->wt = prev;
        feed->nwaiters--;
        feed->c->npending--;
        free(w);
        return;
    }
}

tf_status_t tf_infeed_pop(tf_feed_t *feed, long timeout_ms, tf_item_t **item)
{
    if (!feed || !item)
        return TF_EINVAL;
    tf_client_t *c = feed->c;
    if (c->in_cb || c->in_engine)
        return tfi_refuse(c, TFI_OP_CALL, TF_EINVAL,
                          "blocking calls are not allowed inside a callback");
    pop_wait_t pw = {0};
    tf_status_t st = tf_infeed_pop_start(feed, timeout_ms, on_blocking_pop, &pw);
    if (st != TF_OK)
        return st;
    if (!pw.done)
        tfi_drive_until(c, &pw.done, timeout_ms < 0 ? -1 : timeout_ms);
    if (!pw.done) {
        drop_waiter(feed, &pw);
        return TF_EAGAIN;
    }
    if (pw.st == TF_OK)
        *item = pw.item;
    return pw.st;
}

/* ---- the outfeed ---------------------------------------------------------------------------- */

tf_status_t tf_outfeed_push_start(tf_feed_t *feed, const tf_doc_t *doc, tf_push_cb cb,
                                  void *ud)
{
    if (!feed || !doc || !cb || feed->detaching)
        return TF_EINVAL;
    push_t *p = calloc(1, sizeof(*p));
    if (!p)
        return TF_ENOMEM;
    p->cb = cb;
    p->ud = ud;
    p->x.src = doc;
    tf_status_t st = feed->be->out_start(feed->be_state, &p->x);
    if (st != TF_OK) {
        free(p);
        return tfi_refuse(feed->c, TFI_OP_CALL, st, "cannot start the copy from the device");
    }
    if (feed->pt)
        feed->pt->next = p;
    else
        feed->ph = p;
    feed->pt = p;
    feed->c->npending++;
    pump(feed);
    return TF_OK;
}

typedef struct {
    int done;
    tf_status_t st;
    uint64_t seq;
} push_wait_t;

static void on_blocking_push(tf_feed_t *feed, tf_status_t st, uint64_t seq, void *ud)
{
    push_wait_t *pw = ud;
    pw->done = 1;
    pw->st = st;
    pw->seq = seq;
}

tf_status_t tf_outfeed_push(tf_feed_t *feed, const tf_doc_t *doc, uint64_t *seq)
{
    if (!feed)
        return TF_EINVAL;
    if (feed->c->in_cb || feed->c->in_engine)
        return tfi_refuse(feed->c, TFI_OP_CALL, TF_EINVAL,
                          "blocking calls are not allowed inside a callback");
    push_wait_t pw = {0};
    tf_status_t st = tf_outfeed_push_start(feed, doc, on_blocking_push, &pw);
    if (st != TF_OK)
        return st;
    tfi_drive_until(feed->c, &pw.done, -1);
    if (!pw.done)                       /* cannot happen: a push always completes */
        return TF_EIO;
    if (pw.st == TF_OK && seq)
        *seq = pw.seq;
    return pw.st;
}

/* ---- producers, receivers, operators ---------------------------------------------------------- */

/* Points call at the feed of url (*full: its URL, checked; free it after the start) and its
 * name (name: TFP_MAX_TENSOR_NAME + 1 bytes, live until the start). */
static tf_status_t feed_target(tf_client_t *c, tfi_call_t *call, const char *url, char *name,
                               char **full)
{
    tf_status_t st = feed_url(c, url, full, TFI_OP_CALL);
    if (st != TF_OK)
        return st;
    snprintf(name, TFP_MAX_TENSOR_NAME + 1, "%s", name_of(*full));
    call->url = *full;
    if (call->feed.op)                  /* (every call has one) */
        call->feed_name = name;
    return TF_OK;
}

/* A blocking call on the feed of url; the reply's handle in *out when given. */
static tf_status_t feed_call(tf_client_t *c, tfi_call_t *call, const char *url,
                             tf_fetch_t **out)
{
    char name[TFP_MAX_TENSOR_NAME + 1], *full = NULL;
    tf_status_t st = feed_target(c, call, url, name, &full);
    if (st != TF_OK)
        return st;
    tf_fetch_t *f = NULL;
    st = tfi_call(c, call, &f);
    free(full);
    call->url = call->feed_name = NULL;     /* they were this call's */
    if (out)
        *out = f;
    else
        tf_fetch_free(f);
    return st;
}

/* Hands a call's text reply to the caller (tf_free it). */
static void take_text(tf_fetch_t *f, char **out)
{
    if (out) {
        *out = f->text;
        f->text = NULL;
    }
}

tf_status_t tf_feed_declare(tf_client_t *c, const char *url, const char *json, char **stats)
{
    if (!c)
        return TF_EINVAL;
    if (!json)
        return tfi_refuse(c, TFI_OP_CALL, TF_EINVAL, "no declaration");
    tfi_call_t call = {.json = json, .what = "feed_declare",
                       .feed = {.op = TFP_UF_FEED_DECLARE}};
    tf_fetch_t *f = NULL;
    tf_status_t st = feed_call(c, &call, url, &f);
    if (st == TF_OK)
        take_text(f, stats);
    tf_fetch_free(f);
    return st;
}

/* An infeed push's request: its device (dev < 0: a round to every device), seq and wait. */
static tf_status_t infeed_call(tf_client_t *c, int dev, const tf_doc_t *doc, uint64_t seq,
                               long wait_ms, tfi_call_t *call)
{
    if (!doc || wait_ms < 0)
        return tfi_refuse(c, TFI_OP_CALL, TF_EINVAL, "no document, or a negative wait");
    *call = (tfi_call_t){.doc = doc, .wait_ms = wait_ms, .what = "feed_push",
                         .feed = {.op = TFP_UF_FEED_INFEED, .seq = seq}};
    if (dev >= 0)
        snprintf(call->feed.dev, sizeof(call->feed.dev), "%d", dev);
    return TF_OK;
}

/* The round in an infeed push's reply, or TF_EPROTO (recorded in *r). */
static tf_status_t infeed_round(const tf_fetch_t *f, tf_result_t *r, uint64_t *round)
{
    tfp_err_t err;
    uint64_t v = 0;
    if (!f->text || tfp_parse_uint_member(f->text, f->text_len, "round", &v, &err) != TFP_OK)
        return tfi_rfail(r, TF_EPROTO, "bad infeed reply (expected {\"round\": N})");
    if (round)
        *round = v;
    return TF_OK;
}

tf_status_t tf_infeed_push(tf_client_t *c, const char *url, int dev, const tf_doc_t *doc,
                           uint64_t seq, long wait_ms, uint64_t *round)
{
    if (!c)
        return TF_EINVAL;
    tfi_call_t call;
    tf_status_t st = infeed_call(c, dev, doc, seq, wait_ms, &call);
    if (st != TF_OK)
        return st;
    tf_fetch_t *f = NULL;
    st = feed_call(c, &call, url, &f);
    if (st == TF_OK && round)
        st = infeed_round(f, &c->last, round);
    tf_fetch_free(f);
    return st;
}

typedef struct {
    tf_infeed_push_cb cb;
    void *ud;
} push_start_t;

static void on_infeed_pushed(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc,
                             const tf_result_t *r, void *ud)
{
    push_start_t *ps = ud;
    tf_result_t res = *r;
    uint64_t round = 0;
    tf_doc_free(doc);
    if (st == TF_OK)
        st = infeed_round(f, &res, &round);
    ps->cb(f->c, st, round, &res, ps->ud);
    free(ps);
}

tf_status_t tf_infeed_push_start(tf_client_t *c, const char *url, int dev, const tf_doc_t *doc,
                                 uint64_t seq, long wait_ms, tf_infeed_push_cb cb,
                                 void *user_data)
{
    if (!c)
        return TF_EINVAL;
    if (!cb)
        return tfi_refuse(c, TFI_OP_CALL, TF_EINVAL, "no callback");
    tfi_call_t call;
    tf_status_t st = infeed_call(c, dev, doc, seq, wait_ms, &call);
    if (st != TF_OK)
        return st;
    char name[TFP_MAX_TENSOR_NAME + 1], *full = NULL;
    if ((st = feed_target(c, &call, url, name, &full)) != TF_OK)
        return st;
    push_start_t *ps = malloc(sizeof *ps);
    if (!ps) {
        free(full);
        return tfi_refuse(c, TFI_OP_CALL, TF_ENOMEM, NULL);
    }
    *ps = (push_start_t){cb, user_data};
    st = tfi_call_start(c, &call, on_infeed_pushed, ps, NULL);
    free(full);
    if (st != TF_OK)
        free(ps);
    return st;
}

tf_status_t tf_feed_done(tf_client_t *c, const char *url)
{
    if (!c)
        return TF_EINVAL;
    tfi_call_t call = {.what = "feed_done", .feed = {.op = TFP_UF_FEED_DONE}};
    return feed_call(c, &call, url, NULL);
}

tf_status_t tf_feed_reset(tf_client_t *c, const char *url, uint64_t *generation)
{
    if (!c)
        return TF_EINVAL;
    tfi_call_t call = {.what = "feed_reset",
                       .feed = {.op = TFP_UF_FEED_RESET}};
    tf_fetch_t *f = NULL;
    tfp_err_t err;
    tf_status_t st = feed_call(c, &call, url, &f);
    if (st == TF_OK && generation &&
        (!f->text ||
         tfp_parse_uint_member(f->text, f->text_len, "generation", generation, &err) != TFP_OK))
        st = tfi_rfail(&c->last, TF_EPROTO, "bad reset reply (expected {\"generation\": G})");
    tf_fetch_free(f);
    return st;
}

tf_status_t tf_feed_stats(tf_client_t *c, const char *url, char **json)
{
    if (!c)
        return TF_EINVAL;
    if (!json)
        return tfi_refuse(c, TFI_OP_CALL, TF_EINVAL, NULL);
    tfi_call_t call = {.what = "feed_stats", .feed = {.op = TFP_UF_FEED_STATS}};
    tf_fetch_t *f = NULL;
    tf_status_t st = feed_call(c, &call, url, &f);
    if (st == TF_OK)
        take_text(f, json);
    tf_fetch_free(f);
    return st;
}

tf_status_t tf_outfeed_get(tf_client_t *c, const char *url, uint64_t after, long wait_ms,
                           tf_doc_t **doc, uint64_t *seq, int *device)
{
    if (!c)
        return TF_EINVAL;
    if (!doc || !seq || wait_ms < 0)
        return tfi_refuse(c, TFI_OP_CALL, TF_EINVAL, NULL);
    tfi_call_t call = {.wait_ms = wait_ms, .what = "feed_outfeed",
                       .feed = {.op = TFP_UF_FEED_OUTFEED_GET, .after = after}};
    tf_fetch_t *f = NULL;
    tfp_err_t err;
    tf_status_t st = feed_call(c, &call, url, &f);
    if (st == TF_EGONE && f && f->text &&
        tfp_parse_uint_member(f->text, f->text_len, "resume_after", seq, &err) != TFP_OK)
        st = tfi_rfail(&c->last, TF_EPROTO, "outfeed 410 without \"resume_after\"");
    if (st == TF_OK && !f->doc) {
        st = f->result.http_status == 204 ? TF_EAGAIN : TF_EPROTO;
        if (st == TF_EPROTO)
            tfi_rfail(&c->last, st, "outfeed reply is not a document");
    } else if (st == TF_OK) {
        uint64_t dv;
        if (!tfi_reply_u64(&f->reply, TFP_AF_SEQ, seq)) {
            st = tfi_rfail(&c->last, TF_EPROTO, "outfeed reply without Tfetch-Seq");
        } else {
            if (device)
                *device = tfi_reply_u64(&f->reply, TFP_AF_DEVICE, &dv) && dv < 65536 ? (int)dv
                                                                                    : -1;
            *doc = tf_fetch_take_doc(f);
        }
    }
    tf_fetch_free(f);
    return st;
}
