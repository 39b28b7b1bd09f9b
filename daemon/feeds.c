/* feeds.c - the feed queues of feeds.h.
 *
 * The registry is a name-sorted list under one mutex; each feed has its own mutex over its
 * device queues, producer streams and outfeed ring, and a reference count (the registry
 * holds one until delete). A device queue is a singly linked list from the oldest
 * unreleased item (position released + 1) to the newest (published), with a cursor at the
 * first undelivered one; a lease expiry moves the cursor back to the head. A broadcast
 * round's items share one blob and one byte charge (struct share); every other item charges
 * its own bytes. Wakes are collected under the feed's lock and delivered after it.
 *
 * Threads: any; see feeds.h.
 */
#include "config.h"
#include "daemon/feeds.h"
#include "transports/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double tfd_feed_lat_buckets[TFD_FEED_NLAT] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                                    0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                    1, 5};

/* The charge a broadcast round's items share. */
struct share {
    unsigned refs;
    uint64_t bytes;
};

typedef struct item {
    struct item *next;
    tfd_blob_t *blob;
    struct share *share;            /* broadcast: the round's; else NULL (own charge) */
    uint64_t position, seq, round, bytes, enq_ns;
    int delivered_once;
} item_t;

typedef struct {
    item_t *head, *tail, *cursor;   /* cursor: first undelivered (NULL: none) */
    uint64_t published, delivered, released, bytes, high_water;
    char consumer[TFP_MAX_USER_ID + 1];
    char consumer_by[TFP_MAX_USER_ID + 1];  /* the principal that attached it ("": auth off) */
    uint64_t lease_until_ms;
    /* The last rewind took back positions through rewound_through from rewound_for: what that
     * consumer acknowledges up to there is released even though it is undelivered again (it
     * processed them; its acks after a detach, a lapsed lease or a ring closing are not lost).
     * Cleared when another consumer attaches. */
    char rewound_for[TFP_MAX_USER_ID + 1];
    char rewound_by[TFP_MAX_USER_ID + 1];   /* rewound_for's principal */
    uint64_t rewound_through;
    uint64_t detaches;              /* detaches that ended a lease, and resets: pops waiting
                                     * under an earlier count end */
    uint64_t redeliveries, items_in, items_out, bytes_in, bytes_out, starved_ns, last_round;
    uint64_t lat[TFD_FEED_NLAT + 1], lat_count;
    double lat_sum;
} devq_t;

/* A producer stream: the last seq accepted (dev -1 for rounds). */
typedef struct {
    char id[TFP_MAX_USER_ID + 1];
    int dev;
    int out;                        /* 1: an outfeed stream */
    uint64_t last, last_round;
} stream_t;

typedef struct {
    tfd_blob_t *blob;
    uint64_t seq, generation, bytes;
    unsigned dev;
} out_t;

struct tfd_feed {
    atomic_int refs;
    tfd_feeds_t *fs;
    struct tfd_feed *next;          /* registry list */
    char name[TFP_MAX_TENSOR_NAME + 1];
    char owner[TFP_MAX_USER_ID + 1];
    tfp_feed_decl_t decl;
    pthread_mutex_t lock;
    int deleted, done;
    uint64_t generation, rounds, dropped, blocked_ns;
    devq_t *q;                      /* decl.ndev */
    stream_t *streams;
    size_t nstreams, capstreams;
    out_t *ring;                    /* decl.outfeed_items slots */
    size_t ring_head, ring_n;       /* oldest slot, count */
    uint64_t out_last;              /* last outfeed seq */
    uint64_t out_bytes;
    atomic_uint_fast64_t ev_in, ev_out, ev_pop[TFP_FEED_MAX_DEVICES];
    int ahead_waits;                /* a push ahead of its stream may be waiting: the next
                                     * stream advance wakes producers (ev_in) */
};

struct tfd_feeds {
    tfd_feeds_limits_t lim;
    pthread_mutex_t lock;
    tfd_feed_t *head;
    unsigned count;
    atomic_uint_fast64_t bytes;
};

/* Whom a change may unblock, delivered after the feed's lock. */
typedef struct {
    uint64_t pop;                   /* device bit mask */
    int in, out;
} wakes_t;

void tfd_feed_key(char *buf, const char *feed, int what, unsigned dev)
{
    if (what == TFD_FEED_POP)
        snprintf(buf, TFD_FEED_KEY_SIZE, "%s/pop/%u", feed, dev);
    else
        snprintf(buf, TFD_FEED_KEY_SIZE, "%s/%s", feed, what == TFD_FEED_IN ? "in" : "out");
}

/* Caller holds f->lock. */
static void wake_pop(tfd_feed_t *f, wakes_t *w, int dev)
{
    for (unsigned d = 0; d < f->decl.ndev; d++)
        if (dev < 0 || (unsigned)dev == d) {
            atomic_fetch_add(&f->ev_pop[d], 1);
            w->pop |= 1ull << d;
        }
}

static void wake_in(tfd_feed_t *f, wakes_t *w)
{
    atomic_fetch_add(&f->ev_in, 1);
    w->in = 1;
}

static void wake_out(tfd_feed_t *f, wakes_t *w)
{
    atomic_fetch_add(&f->ev_out, 1);
    w->out = 1;
}

/* Without f->lock. */
static void flush(tfd_feed_t *f, const wakes_t *w)
{
    const tfd_feeds_limits_t *l = &f->fs->lim;
    char key[TFD_FEED_KEY_SIZE];
    if (!l->wake)
        return;
    for (unsigned d = 0; d < f->decl.ndev; d++)
        if (w->pop & (1ull << d)) {
            tfd_feed_key(key, f->name, TFD_FEED_POP, d);
            l->wake(l->wake_arg, key);
        }
    if (w->in) {
        tfd_feed_key(key, f->name, TFD_FEED_IN, 0);
        l->wake(l->wake_arg, key);
    }
    if (w->out) {
        tfd_feed_key(key, f->name, TFD_FEED_OUT, 0);
        l->wake(l->wake_arg, key);
    }
}

static int charge(tfd_feeds_t *fs, uint64_t bytes)
{
    uint64_t was = atomic_fetch_add(&fs->bytes, bytes);
    if (was + bytes > __atomic_load_n(&fs->lim.memory, __ATOMIC_RELAXED)) {
        atomic_fetch_sub(&fs->bytes, bytes);
        return -1;
    }
    return 0;
}

static void uncharge(tfd_feeds_t *fs, uint64_t bytes)
{
    atomic_fetch_sub(&fs->bytes, bytes);
}

static void item_free(tfd_feed_t *f, item_t *it)
{
    if (it->share) {
        if (--it->share->refs == 0) {
            uncharge(f->fs, it->share->bytes);
            free(it->share);
        }
    } else {
        uncharge(f->fs, it->bytes);
    }
    tfd_blob_unref(it->blob);
    free(it);
}

/* Drops every item of q; returns how many. */
static uint64_t queue_clear(tfd_feed_t *f, devq_t *q)
{
    uint64_t n = 0;
    while (q->head) {
        item_t *it = q->head;
        q->head = it->next;
        item_free(f, it);
        n++;
    }
    q->tail = q->cursor = NULL;
    q->bytes = 0;
    return n;
}

static void ring_clear(tfd_feed_t *f)
{
    for (size_t i = 0; i < f->ring_n; i++) {
        out_t *o = &f->ring[(f->ring_head + i) % f->decl.outfeed_items];
        uncharge(f->fs, o->bytes);
        tfd_blob_unref(o->blob);
    }
    f->ring_n = 0;
    f->out_bytes = 0;
}

/* ---- the registry ------------------------------------------------------------------------- */

void tfd_feeds_set_limits(tfd_feeds_t *fs, uint64_t memory, unsigned max_feeds,
                          unsigned feeds_per_user)
{
    pthread_mutex_lock(&fs->lock);
    __atomic_store_n(&fs->lim.memory, memory, __ATOMIC_RELAXED);    /* charge reads it bare */
    fs->lim.max_feeds = max_feeds;
    fs->lim.feeds_per_user = feeds_per_user;
    pthread_mutex_unlock(&fs->lock);
}

tfd_feeds_t *tfd_feeds_new(const tfd_feeds_limits_t *l)
{
    tfd_feeds_t *fs = calloc(1, sizeof *fs);
    if (!fs)
        return NULL;
    fs->lim = *l;
    pthread_mutex_init(&fs->lock, NULL);
    atomic_init(&fs->bytes, 0);
    return fs;
}

static void feed_free(tfd_feed_t *f)
{
    for (unsigned d = 0; d < f->decl.ndev; d++)
        queue_clear(f, &f->q[d]);
    ring_clear(f);
    free(f->q);
    free(f->ring);
    free(f->streams);
    tfp_feed_decl_clear(&f->decl);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

void tfd_feed_unref(tfd_feed_t *f)
{
    if (f && atomic_fetch_sub(&f->refs, 1) == 1)
        feed_free(f);
}

void tfd_feeds_free(tfd_feeds_t *fs)
{
    if (!fs)
        return;
    while (fs->head) {
        tfd_feed_t *f = fs->head;
        fs->head = f->next;
        tfd_feed_unref(f);
    }
    pthread_mutex_destroy(&fs->lock);
    free(fs);
}

static tfd_feed_t *feed_new(tfd_feeds_t *fs, const char *name, const char *owner,
                            tfp_feed_decl_t *decl)
{
    tfd_feed_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    if (!(f->q = calloc(decl->ndev, sizeof *f->q)) ||
        !(f->ring = calloc((size_t)decl->outfeed_items, sizeof *f->ring))) {
        free(f->q);
        free(f);
        return NULL;
    }
    atomic_init(&f->refs, 1);
    f->fs = fs;
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->owner, sizeof f->owner, "%s", owner ? owner : "");
    f->decl = *decl;
    memset(decl, 0, sizeof *decl);
    f->generation = 1;
    pthread_mutex_init(&f->lock, NULL);
    atomic_init(&f->ev_in, 0);
    atomic_init(&f->ev_out, 0);
    for (unsigned d = 0; d < TFP_FEED_MAX_DEVICES; d++)
        atomic_init(&f->ev_pop[d], 0);
    return f;
}

tfp_status_t tfd_feeds_declare(tfd_feeds_t *fs, const char *name, const char *owner,
                               tfp_feed_decl_t *decl, tfd_feed_t **out, int *created,
                               tfp_err_t *err)
{
    tfp_status_t st = TFP_OK;
    tfd_feed_t **pp, *f = NULL;
    unsigned mine = 0;
    owner = owner ? owner : "";
    pthread_mutex_lock(&fs->lock);
    for (pp = &fs->head; *pp && strcmp((*pp)->name, name) < 0; pp = &(*pp)->next)
        ;
    if (*pp && strcmp((*pp)->name, name) == 0) {
        f = *pp;
        if (!tfp_feed_decl_equal(&f->decl, decl)) {
            st = tfp_err_set(err, TFP_ECONFLICT, "feed '%s' is declared differently; delete "
                             "it first to declare it anew", name);
            goto done;
        }
        *created = 0;
        goto found;
    }
    for (tfd_feed_t *g = fs->head; g; g = g->next)
        mine += strcmp(g->owner, owner) == 0;
    if (fs->count >= fs->lim.max_feeds) {
        st = tfp_err_set(err, TFP_ENOSPACE, "there are already %u feeds (max-feeds)",
                         fs->count);
        goto done;
    }
    if (mine >= fs->lim.feeds_per_user) {
        st = tfp_err_set(err, TFP_ENOSPACE, "user '%s' already has %u feeds (feeds-per-user)",
                         owner[0] ? owner : "(none)", mine);
        goto done;
    }
    if (!(f = feed_new(fs, name, owner, decl))) {
        st = tfp_err_set(err, TFP_ENOMEM, "out of memory");
        goto done;
    }
    f->next = *pp;
    *pp = f;
    fs->count++;
    *created = 1;
found:
    if (out) {
        atomic_fetch_add(&f->refs, 1);
        *out = f;
    }
done:
    pthread_mutex_unlock(&fs->lock);
    return st;
}

tfd_feed_t *tfd_feeds_get(tfd_feeds_t *fs, const char *name)
{
    tfd_feed_t *f;
    pthread_mutex_lock(&fs->lock);
    for (f = fs->head; f && strcmp(f->name, name) != 0; f = f->next)
        ;
    if (f)
        atomic_fetch_add(&f->refs, 1);
    pthread_mutex_unlock(&fs->lock);
    return f;
}

int tfd_feeds_delete(tfd_feeds_t *fs, const char *name)
{
    tfd_feed_t **pp, *f;
    pthread_mutex_lock(&fs->lock);
    for (pp = &fs->head; *pp && strcmp((*pp)->name, name) != 0; pp = &(*pp)->next)
        ;
    f = *pp;
    if (f) {
        *pp = f->next;
        fs->count--;
    }
    pthread_mutex_unlock(&fs->lock);
    if (!f)
        return -1;
    wakes_t w = {0};
    pthread_mutex_lock(&f->lock);
    f->deleted = 1;
    for (unsigned d = 0; d < f->decl.ndev; d++)
        queue_clear(f, &f->q[d]);
    ring_clear(f);
    wake_pop(f, &w, -1);
    wake_in(f, &w);
    wake_out(f, &w);
    pthread_mutex_unlock(&f->lock);
    flush(f, &w);
    tfd_feed_unref(f);                          /* the registry's reference */
    return 0;
}

void tfd_feeds_each(tfd_feeds_t *fs, void (*fn)(const char *name, void *arg), void *arg)
{
    pthread_mutex_lock(&fs->lock);
    for (tfd_feed_t *f = fs->head; f; f = f->next)
        fn(f->name, arg);
    pthread_mutex_unlock(&fs->lock);
}

/* References to every feed (for work outside the registry lock). */
static tfd_feed_t **all_feeds(tfd_feeds_t *fs, size_t *n)
{
    pthread_mutex_lock(&fs->lock);
    tfd_feed_t **v = fs->count ? malloc(fs->count * sizeof *v) : NULL;
    size_t k = 0;
    for (tfd_feed_t *f = v ? fs->head : NULL; f; f = f->next) {
        atomic_fetch_add(&f->refs, 1);
        v[k++] = f;
    }
    pthread_mutex_unlock(&fs->lock);
    *n = k;
    return v;
}

/* Caller holds f->lock: ends q's consumer's lease if it ran out. */
/* Every item delivered and not released becomes undelivered again, in order. */
static void rewind_q(tfd_feed_t *f, unsigned d, wakes_t *w)
{
    devq_t *q = &f->q[d];
    if (q->delivered > q->released) {
        snprintf(q->rewound_for, sizeof q->rewound_for, "%s", q->consumer);
        snprintf(q->rewound_by, sizeof q->rewound_by, "%s", q->consumer_by);
        if (q->delivered > q->rewound_through)
            q->rewound_through = q->delivered;
        q->redeliveries += q->delivered - q->released;
        q->delivered = q->released;
        q->cursor = q->head;
        wake_pop(f, w, (int)d);
    }
}

static void expire(tfd_feed_t *f, unsigned d, uint64_t now, wakes_t *w)
{
    devq_t *q = &f->q[d];
    if (!q->consumer[0] || q->lease_until_ms > now)
        return;
    rewind_q(f, d, w);
    q->consumer[0] = '\0';
}

void tfd_feeds_tick(tfd_feeds_t *fs)
{
    size_t n;
    tfd_feed_t **v = all_feeds(fs, &n);
    uint64_t now = tfx_now_ms();
    for (size_t i = 0; i < n; i++) {
        tfd_feed_t *f = v[i];
        wakes_t w = {0};
        pthread_mutex_lock(&f->lock);
        for (unsigned d = 0; !f->deleted && d < f->decl.ndev; d++)
            expire(f, d, now, &w);
        pthread_mutex_unlock(&f->lock);
        flush(f, &w);
        tfd_feed_unref(f);
    }
    free(v);
}

const tfp_feed_decl_t *tfd_feed_decl(const tfd_feed_t *f) { return &f->decl; }
const char *tfd_feed_name(const tfd_feed_t *f) { return f->name; }

uint64_t tfd_feed_events(const tfd_feed_t *f, int what, unsigned dev)
{
    tfd_feed_t *m = (tfd_feed_t *)f;            /* atomic loads of a const object */
    if (what == TFD_FEED_POP)
        return dev < TFP_FEED_MAX_DEVICES ? atomic_load(&m->ev_pop[dev]) : 0;
    return atomic_load(what == TFD_FEED_IN ? &m->ev_in : &m->ev_out);
}

uint64_t tfd_feeds_bytes(tfd_feeds_t *fs) { return atomic_load(&fs->bytes); }

/* ---- producer streams --------------------------------------------------------------------- */

/* Caller holds f->lock. The stream, or NULL if there is none (create: make one; NULL then
 * means the table is full or memory ran out). */
static stream_t *stream_find(tfd_feed_t *f, const char *id, int dev, int out, int create)
{
    for (size_t i = 0; i < f->nstreams; i++) {
        stream_t *s = &f->streams[i];
        if (s->dev == dev && s->out == out && strcmp(s->id, id) == 0)
            return s;
    }
    if (!create || f->nstreams >= f->fs->lim.max_producers)
        return NULL;
    if (f->nstreams == f->capstreams) {
        size_t cap = f->capstreams ? f->capstreams * 2 : 8;
        stream_t *ns = realloc(f->streams, cap * sizeof *ns);
        if (!ns)
            return NULL;
        f->streams = ns;
        f->capstreams = cap;
    }
    stream_t *s = &f->streams[f->nstreams++];
    memset(s, 0, sizeof *s);
    snprintf(s->id, sizeof s->id, "%s", id);
    s->dev = dev;
    s->out = out;
    return s;
}

/* Checks seq against its stream: 0 go on (*sp the stream, or NULL without seq), 1 already
 * accepted, -1 refused (err set; -2 when seq is a gap ahead by at most TFD_FEED_SEQ_AHEAD,
 * which an infeed may wait out). Caller holds f->lock. */
static int seq_check(tfd_feed_t *f, const char *id, int dev, int out, uint64_t seq,
                     stream_t **sp, tfp_status_t *st, tfp_err_t *err)
{
    *sp = NULL;
    if (!seq)
        return 0;
    stream_t *s = stream_find(f, id ? id : "", dev, out, 0);
    uint64_t last = s ? s->last : 0;
    if (seq <= last) {
        *sp = s;
        return 1;
    }
    if (seq > last + 1) {
        *st = tfp_err_set(err, TFP_ECONFLICT, "sequence gap: expected %llu (producer '%s'), "
                          "got %llu", (unsigned long long)last + 1, id ? id : "",
                          (unsigned long long)seq);
        return seq - last <= TFD_FEED_SEQ_AHEAD ? -2 : -1;
    }
    if (!s && !(s = stream_find(f, id ? id : "", dev, out, 1))) {
        *st = tfp_err_set(err, TFP_ENOSPACE, "feed '%s' already tracks %u producer streams",
                          f->name, f->fs->lim.max_producers);
        return -1;
    }
    *sp = s;
    return 0;
}

/* ---- producers ---------------------------------------------------------------------------- */

static int has_room(const tfd_feed_t *f, const devq_t *q, uint64_t bytes)
{
    uint64_t depth = q->published - q->released;
    if (depth == 0)
        return 1;                   /* an item always fits an empty queue (checked at declare) */
    return depth < f->decl.max_items && q->bytes + bytes <= f->decl.max_bytes;
}

static void enqueue(tfd_feed_t *f, unsigned d, item_t *it)
{
    devq_t *q = &f->q[d];
    it->position = ++q->published;
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    if (!q->cursor)
        q->cursor = it;
    q->bytes += it->bytes;
    q->items_in++;
    q->bytes_in += it->bytes;
    if (q->published - q->released > q->high_water)
        q->high_water = q->published - q->released;
}

tfp_status_t tfd_feed_infeed(tfd_feed_t *f, const tfd_infeed_t *in, tfd_infeed_res_t *res,
                             uint64_t *ev, tfp_err_t *err)
{
    const tfp_feed_decl_t *dc = &f->decl;
    tfp_status_t st = TFP_OK;
    wakes_t w = {0};
    int round = in->dev < 0;
    unsigned first = round ? 0 : (unsigned)in->dev, n = round ? dc->ndev : 1;
    item_t *items[TFP_FEED_MAX_DEVICES] = {0};
    struct share *share = NULL;
    stream_t *s;

    *res = (tfd_infeed_res_t){0};
    pthread_mutex_lock(&f->lock);
    res->generation = f->generation;
    if (f->deleted) {
        st = tfp_err_set(err, TFP_ENOTFOUND, "feed '%s' was deleted", f->name);
        goto done;
    }
    if (in->generation && in->generation != f->generation) {
        st = tfp_err_set(err, TFP_ECONFLICT, "feed '%s' was reset while this push waited "
                         "(generation %llu, now %llu): not enqueued", f->name,
                         (unsigned long long)in->generation,
                         (unsigned long long)f->generation);
        goto done;
    }
    if (round != (dc->fanout != TFP_FANOUT_PER_DEVICE) || (!round && first >= dc->ndev)) {
        st = tfp_err_set(err, TFP_ECONFLICT, round ? "feed '%s' is per_device: infeed to "
                         "/devices/{dev}/infeed" : "feed '%s' takes rounds for every device: "
                         "infeed to /v1/feeds/{feed}/infeed", f->name);
        goto done;
    }
    if (f->done) {
        st = tfp_err_set(err, TFP_ECONFLICT, "feed '%s' is done: no more items until reset",
                         f->name);
        goto done;
    }
    int sc = seq_check(f, in->producer, round ? -1 : in->dev, 0, in->seq, &s, &st, err);
    if (sc == -2) {                 /* the pushes before it may still be on their way */
        f->ahead_waits = 1;
        *ev = atomic_load(&f->ev_in);
        res->ahead = 1;
        goto done;
    }
    if (sc < 0)
        goto done;
    if (sc == 1) {
        *res = (tfd_infeed_res_t){in->seq, in->seq == s->last ? s->last_round : 0,
                                  f->generation, 1, 0};
        goto done;
    }
    for (unsigned d = first; d < first + n; d++)
        if (!has_room(f, &f->q[d], in->bytes)) {
            *ev = atomic_load(&f->ev_in);
            st = tfp_err_set(err, TFP_EFULL, "device queue %u of feed '%s' is full (%llu "
                             "items, %llu bytes)", d, f->name,
                             (unsigned long long)(f->q[d].published - f->q[d].released),
                             (unsigned long long)f->q[d].bytes);
            goto done;
        }
    int bcast = dc->fanout == TFP_FANOUT_BROADCAST;
    uint64_t total = bcast ? in->bytes : in->bytes * n;
    if (bcast && !(share = malloc(sizeof *share))) {
        st = tfp_err_set(err, TFP_ENOMEM, "out of memory");
        goto done;
    }
    for (unsigned k = 0; k < n; k++)
        if (!(items[k] = calloc(1, sizeof *items[k]))) {
            st = tfp_err_set(err, TFP_ENOMEM, "out of memory");
            goto done;
        }
    if (charge(f->fs, total) != 0) {
        st = tfp_err_set(err, TFP_ENOSPACE, "feeds would hold more than feed-memory (%llu "
                         "bytes)", (unsigned long long)__atomic_load_n(&f->fs->lim.memory, __ATOMIC_RELAXED));
        goto done;
    }
    uint64_t now = tfx_now_ns(), rno = round ? ++f->rounds : 0;
    if (share)
        *share = (struct share){n, total};
    for (unsigned k = 0; k < n; k++) {
        item_t *it = items[k];
        it->blob = tfd_blob_ref(in->blobs[round ? k : 0]);
        it->share = share;
        it->bytes = in->bytes;
        it->enq_ns = now;
        enqueue(f, first + k, it);
        it->round = round ? rno : it->position;
        it->seq = in->seq ? in->seq : it->round;
        items[k] = NULL;
    }
    share = NULL;
    uint64_t rn = round ? rno : f->q[first].published;
    if (s) {
        s->last = in->seq;
        s->last_round = rn;
        if (f->ahead_waits) {
            f->ahead_waits = 0;
            wake_in(f, &w);
        }
    }
    *res = (tfd_infeed_res_t){in->seq ? in->seq : rn, rn, f->generation, 0, 0};
    wake_pop(f, &w, round ? -1 : (int)first);
done:
    pthread_mutex_unlock(&f->lock);
    for (unsigned k = 0; k < n; k++)
        free(items[k]);
    free(share);
    flush(f, &w);
    return st;
}

/* ---- consumers ---------------------------------------------------------------------------- */

/* Caller holds f->lock: releases q's items through position p that were delivered to
 * consumer (never one it cannot have had: an ack ahead of delivery releases nothing more). */
static void release_through(tfd_feed_t *f, unsigned d, const char *consumer, uint64_t p,
                            wakes_t *w)
{
    devq_t *q = &f->q[d];
    uint64_t had = q->delivered;
    if (q->rewound_through > had && strcmp(q->rewound_for, consumer) == 0)
        had = q->rewound_through;
    if (p > had)
        p = had;
    int any = 0;
    while (q->head && q->head->position <= p) {
        item_t *it = q->head;
        q->head = it->next;
        if (!q->head)
            q->tail = NULL;
        if (q->cursor == it)
            q->cursor = it->next;
        q->bytes -= it->bytes;
        q->released = it->position;
        item_free(f, it);
        any = 1;
    }
    if (q->delivered < q->released)
        q->delivered = q->released;
    if (any)
        wake_in(f, w);
}

/* Caller holds f->lock: TFP_EFORBIDDEN when consumer is another principal's: the one
 * attached under that id, or the one whose rewound positions that id still acknowledges. The
 * answer names nothing of the owner. With authentication off every principal is "". */
static tfp_status_t owned(tfd_feed_t *f, unsigned d, const char *consumer, const char *by,
                          tfp_err_t *err)
{
    const devq_t *q = &f->q[d];
    int theirs = (q->consumer[0] && strcmp(q->consumer, consumer) == 0 &&
                  strcmp(q->consumer_by, by) != 0) ||
                 (q->rewound_through && strcmp(q->rewound_for, consumer) == 0 &&
                  strcmp(q->rewound_by, by) != 0);
    if (theirs)
        return tfp_err_set(err, TFP_EFORBIDDEN, "consumer '%s' of device queue %u of feed '%s' "
                           "belongs to another principal", consumer, d, f->name);
    return TFP_OK;
}

static tfp_status_t attached(tfd_feed_t *f, unsigned d, const char *consumer, const char *by,
                             uint64_t now, tfp_err_t *err)
{
    const devq_t *q = &f->q[d];
    tfp_status_t st = owned(f, d, consumer, by, err);
    if (st != TFP_OK || !q->consumer[0] || strcmp(q->consumer, consumer) == 0)
        return st;
    /* Another principal's consumer id is not told: it would let its holder act as it. */
    int own = strcmp(q->consumer_by, by) == 0;
    return tfp_err_set(err, TFP_ECONFLICT, "device queue %u of feed '%s' is attached to "
                       "%s%s%s (lease for %llu ms more)", d, f->name,
                       own ? "consumer '" : "another principal's consumer",
                       own ? q->consumer : "", own ? "'" : "",
                       (unsigned long long)(q->lease_until_ms - now));
}

tfp_status_t tfd_feed_consumer_check(tfd_feed_t *f, unsigned dev, const char *consumer,
                                     const char *by, tfp_err_t *err)
{
    pthread_mutex_lock(&f->lock);
    tfp_status_t st = dev < f->decl.ndev ? owned(f, dev, consumer, by, err)
                      : tfp_err_set(err, TFP_ENOTFOUND, "feed '%s' has no such device", f->name);
    pthread_mutex_unlock(&f->lock);
    return st;
}

static void record_latency(devq_t *q, uint64_t ns)
{
    double s = (double)ns / 1e9;
    size_t b = 0;
    while (b < TFD_FEED_NLAT && s > tfd_feed_lat_buckets[b])
        b++;
    q->lat[b]++;
    q->lat_count++;
    q->lat_sum += s;
}

tfp_status_t tfd_feed_pop(tfd_feed_t *f, unsigned dev, const char *consumer, const char *by,
                          const uint64_t *ack, int rewind, uint64_t hold_until_ms, uint64_t *attach,
                          tfd_feed_item_t *item, uint64_t *ev, tfp_err_t *err)
{
    tfp_status_t st;
    wakes_t w = {0};
    uint64_t now = tfx_now_ms();
    pthread_mutex_lock(&f->lock);
    if (f->deleted || dev >= f->decl.ndev) {
        st = tfp_err_set(err, TFP_ENOTFOUND, f->deleted ? "feed '%s' was deleted"
                         : "feed '%s' has no such device", f->name);
        goto done;
    }
    devq_t *q = &f->q[dev];
    if (attach && *attach && *attach != q->detaches + 1) {
        *item = (tfd_feed_item_t){NULL, 0, 0, 0, f->generation};
        st = tfp_err_set(err, TFP_ECANCELED, "consumer '%s' detached from device queue %u "
                         "of feed '%s'", consumer, dev, f->name);
        goto done;
    }
    if (attach)
        *attach = q->detaches + 1;
    expire(f, dev, now, &w);
    if ((st = attached(f, dev, consumer, by, now, err)) != TFP_OK)
        goto done;
    if (q->rewound_through && strcmp(q->rewound_for, consumer) != 0)
        q->rewound_through = 0;         /* another consumer: the old one's acks are void */
    snprintf(q->consumer, sizeof q->consumer, "%s", consumer);
    snprintf(q->consumer_by, sizeof q->consumer_by, "%s", by);
    q->lease_until_ms = now + f->decl.lease_ms;
    if (hold_until_ms > q->lease_until_ms)
        q->lease_until_ms = hold_until_ms;
    if (ack)
        release_through(f, dev, consumer, *ack, &w);
    if (rewind)
        rewind_q(f, dev, &w);
    item_t *it = q->cursor;
    if (it) {
        q->cursor = it->next;
        q->delivered = it->position;
        q->items_out++;
        q->bytes_out += it->bytes;
        q->last_round = it->round;
        if (!it->delivered_once) {
            it->delivered_once = 1;
            record_latency(q, tfx_now_ns() - it->enq_ns);
        }
        *item = (tfd_feed_item_t){tfd_blob_ref(it->blob), it->position, it->seq, it->round,
                                  f->generation};
    } else if (f->done) {
        st = tfp_err_set(err, TFP_EDONE, "feed '%s' is done and device queue %u is drained",
                         f->name, dev);
    } else {
        *ev = atomic_load(&f->ev_pop[dev]);
        *item = (tfd_feed_item_t){NULL, 0, 0, 0, f->generation};
        st = TFP_EAGAIN;
        tfp_err_set(err, TFP_EAGAIN, "device queue %u of feed '%s' is empty", dev, f->name);
    }
done:
    pthread_mutex_unlock(&f->lock);
    flush(f, &w);
    return st;
}

tfp_status_t tfd_feed_ack(tfd_feed_t *f, unsigned dev, const char *consumer, const char *by,
                          uint64_t through, tfp_err_t *err)
{
    tfp_status_t st = TFP_OK;
    wakes_t w = {0};
    uint64_t now = tfx_now_ms();
    pthread_mutex_lock(&f->lock);
    if (f->deleted || dev >= f->decl.ndev) {
        st = tfp_err_set(err, TFP_ENOTFOUND, f->deleted ? "feed '%s' was deleted"
                         : "feed '%s' has no such device", f->name);
        goto done;
    }
    devq_t *q = &f->q[dev];
    expire(f, dev, now, &w);
    if ((st = owned(f, dev, consumer, by, err)) != TFP_OK)
        goto done;
    if (strcmp(q->consumer, consumer) != 0) {
        st = tfp_err_set(err, TFP_ECONFLICT, "consumer '%s' is not attached to device queue %u "
                         "of feed '%s' (its lease ran out, or the feed was reset)", consumer,
                         dev, f->name);
        goto done;
    }
    if (now + f->decl.lease_ms > q->lease_until_ms)
        q->lease_until_ms = now + f->decl.lease_ms;
    release_through(f, dev, consumer, through, &w);
done:
    pthread_mutex_unlock(&f->lock);
    flush(f, &w);
    return st;
}

tfp_status_t tfd_feed_detach(tfd_feed_t *f, unsigned dev, const char *consumer,
                             const char *by, const uint64_t *ack, tfp_err_t *err)
{
    tfp_status_t st = TFP_OK;
    wakes_t w = {0};
    pthread_mutex_lock(&f->lock);
    if (f->deleted || dev >= f->decl.ndev) {
        st = tfp_err_set(err, TFP_ENOTFOUND, f->deleted ? "feed '%s' was deleted"
                         : "feed '%s' has no such device", f->name);
        goto done;
    }
    devq_t *q = &f->q[dev];
    if ((st = owned(f, dev, consumer, by, err)) != TFP_OK)
        goto done;
    int mine = strcmp(q->consumer, consumer) == 0;
    /* Its own releases count even after its lease ran out, until another consumer attached
     * (release_through keeps to what was taken back from it). */
    if (ack && (mine || !q->consumer[0]))
        release_through(f, dev, consumer, *ack, &w);
    if (mine) {
        rewind_q(f, dev, &w);
        q->consumer[0] = '\0';
        q->detaches++;
        wake_pop(f, &w, (int)dev);
    }
done:
    pthread_mutex_unlock(&f->lock);
    flush(f, &w);
    return st;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

void tfd_feed_done(tfd_feed_t *f)
{
    wakes_t w = {0};
    pthread_mutex_lock(&f->lock);
    if (!f->deleted && !f->done) {
        f->done = 1;
        wake_pop(f, &w, -1);
        wake_in(f, &w);
    }
    pthread_mutex_unlock(&f->lock);
    flush(f, &w);
}

void tfd_feed_reset(tfd_feed_t *f, uint64_t *generation, uint64_t *dropped)
{
    wakes_t w = {0};
    uint64_t n = 0;
    pthread_mutex_lock(&f->lock);
    for (unsigned d = 0; d < f->decl.ndev; d++) {
        devq_t *q = &f->q[d];
        n += queue_clear(f, q);
        q->published = q->delivered = q->released = q->rewound_through = 0;
        q->consumer[0] = '\0';
        q->lease_until_ms = 0;
        q->last_round = 0;
        q->detaches++;              /* a pop waiting across it ends (204), never attaching
                                     * its consumer to the new generation */
    }
    f->nstreams = 0;
    f->done = 0;
    f->rounds = 0;
    f->dropped += n;
    f->generation++;
    *generation = f->generation;
    *dropped = n;
    wake_pop(f, &w, -1);
    wake_in(f, &w);
    pthread_mutex_unlock(&f->lock);
    flush(f, &w);
}

/* ---- outfeed ------------------------------------------------------------------------------ */

tfp_status_t tfd_feed_outfeed_push(tfd_feed_t *f, unsigned dev, const char *producer,
                                   uint64_t seq, tfd_blob_t *blob, uint64_t bytes,
                                   uint64_t *out_seq, int *dup, tfp_err_t *err)
{
    tfp_status_t st = TFP_OK;
    wakes_t w = {0};
    stream_t *s;
    *dup = 0;
    pthread_mutex_lock(&f->lock);
    if (f->deleted || dev >= f->decl.ndev) {
        st = tfp_err_set(err, TFP_ENOTFOUND, f->deleted ? "feed '%s' was deleted"
                         : "feed '%s' has no such device", f->name);
        goto done;
    }
    int sc = seq_check(f, producer, (int)dev, 1, seq, &s, &st, err);
    if (sc < 0)
        goto done;
    if (sc == 1) {
        *dup = 1;
        *out_seq = seq == s->last ? s->last_round : 0;
        goto done;
    }
    if (charge(f->fs, bytes) != 0) {
        st = tfp_err_set(err, TFP_ENOSPACE, "feeds would hold more than feed-memory (%llu "
                         "bytes)", (unsigned long long)__atomic_load_n(&f->fs->lim.memory, __ATOMIC_RELAXED));
        goto done;
    }
    size_t cap = (size_t)f->decl.outfeed_items;
    if (f->ring_n == cap) {                     /* drop the oldest */
        out_t *o = &f->ring[f->ring_head];
        uncharge(f->fs, o->bytes);
        f->out_bytes -= o->bytes;
        tfd_blob_unref(o->blob);
        f->ring_head = (f->ring_head + 1) % cap;
        f->ring_n--;
    }
    out_t *o = &f->ring[(f->ring_head + f->ring_n) % cap];
    *o = (out_t){tfd_blob_ref(blob), ++f->out_last, f->generation, bytes, dev};
    f->ring_n++;
    f->out_bytes += bytes;
    if (s) {
        s->last = seq;
        s->last_round = o->seq;
    }
    *out_seq = o->seq;
    wake_out(f, &w);
done:
    pthread_mutex_unlock(&f->lock);
    flush(f, &w);
    return st;
}

tfp_status_t tfd_feed_outfeed_get(tfd_feed_t *f, uint64_t after, tfd_outfeed_item_t *item,
                                  uint64_t *ev, uint64_t *resume_after, tfp_err_t *err)
{
    tfp_status_t st = TFP_OK;
    pthread_mutex_lock(&f->lock);
    uint64_t first = f->out_last - f->ring_n + 1;
    if (f->deleted) {
        st = tfp_err_set(err, TFP_ENOTFOUND, "feed '%s' was deleted", f->name);
    } else if (after >= f->out_last) {
        *ev = atomic_load(&f->ev_out);
        st = tfp_err_set(err, TFP_EAGAIN, "no outfeed item after %llu yet",
                         (unsigned long long)after);
    } else if (after + 1 < first) {
        *resume_after = first - 1;
        st = tfp_err_set(err, TFP_EGONE, "outfeed item %llu of feed '%s' is no longer kept "
                         "(the oldest kept is %llu): resume after %llu",
                         (unsigned long long)after + 1, f->name, (unsigned long long)first,
                         (unsigned long long)first - 1);
    } else {
        const out_t *o = &f->ring[(f->ring_head + (after + 1 - first)) % f->decl.outfeed_items];
        *item = (tfd_outfeed_item_t){tfd_blob_ref(o->blob), o->seq, o->generation, o->dev};
    }
    pthread_mutex_unlock(&f->lock);
    return st;
}

/* ---- statistics --------------------------------------------------------------------------- */

void tfd_feed_add_blocked(tfd_feed_t *f, uint64_t ns)
{
    pthread_mutex_lock(&f->lock);
    f->blocked_ns += ns;
    pthread_mutex_unlock(&f->lock);
}

void tfd_feed_add_starved(tfd_feed_t *f, unsigned dev, uint64_t ns)
{
    pthread_mutex_lock(&f->lock);
    if (dev < f->decl.ndev)
        f->q[dev].starved_ns += ns;
    pthread_mutex_unlock(&f->lock);
}

void tfd_feed_stats(tfd_feed_t *f, tfd_feed_stats_t *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&f->lock);
    uint64_t now = tfx_now_ms();
    snprintf(st->name, sizeof st->name, "%s", f->name);
    snprintf(st->owner, sizeof st->owner, "%s", f->owner);
    st->fanout = f->decl.fanout;
    st->ndev = f->decl.ndev;
    st->generation = f->generation;
    st->dropped = f->dropped;
    st->blocked_ns = f->blocked_ns;
    st->done = f->done;
    st->out_last = f->out_last;
    st->out_first = f->out_last - f->ring_n + 1;
    st->out_items = f->ring_n;
    st->out_bytes = f->out_bytes;
    for (unsigned d = 0; d < f->decl.ndev; d++) {
        const devq_t *q = &f->q[d];
        tfd_feed_dev_stats_t *o = &st->dev[d];
        o->depth = q->published - q->released;
        o->bytes = q->bytes;
        o->high_water = q->high_water;
        o->published = q->published;
        o->delivered = q->delivered;
        o->released = q->released;
        if (q->consumer[0] && q->lease_until_ms > now) {
            snprintf(o->consumer, sizeof o->consumer, "%s", q->consumer);
            snprintf(o->consumer_by, sizeof o->consumer_by, "%s", q->consumer_by);
        }
        o->redeliveries = q->redeliveries;
        o->items_in = q->items_in;
        o->items_out = q->items_out;
        o->bytes_in = q->bytes_in;
        o->bytes_out = q->bytes_out;
        o->starved_ns = q->starved_ns;
        o->last_round = q->last_round;
        memcpy(o->lat, q->lat, sizeof o->lat);
        o->lat_count = q->lat_count;
        o->lat_sum = q->lat_sum;
    }
    pthread_mutex_unlock(&f->lock);
}

tfd_feed_stats_t **tfd_feeds_stats_all(tfd_feeds_t *fs, size_t *n)
{
    size_t k;
    tfd_feed_t **v = all_feeds(fs, &k);
    tfd_feed_stats_t **out = k ? calloc(k, sizeof *out) : NULL;
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        if (out && (out[m] = malloc(sizeof *out[m])))
            tfd_feed_stats(v[i], out[m++]);
        tfd_feed_unref(v[i]);
    }
    free(v);
    *n = m;
    if (!m) {
        free(out);
        return NULL;
    }
    return out;
}

void tfd_feeds_stats_free(tfd_feed_stats_t **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}
