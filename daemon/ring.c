/* ring.c - a device feed's same-host ring, the daemon's side (see ring.h).
 *
 * Owns the ring's memfd and mapping and a reference to its feed. Slots are a bit mask (at
 * most 64). Credit is counted in items: sent never passes asked. The queue's own rules
 * (order, leases, generations, done) stay feeds.c's: the ring only pops, acknowledges,
 * renews and detaches as the consumer, and tells the consumer what it learnt. shm.c's
 * thread only.
 */
#include "config.h"
#include "daemon/ring.h"
#include "daemon/log.h"
#include "transports/clock.h"
#include "transports/shm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HEADER_ROOM 16384u          /* a slot's bytes beyond the item's payload */
#define PAGE 4096u

struct tfd_ring_acct {
    atomic_int refs;
    _Atomic uint64_t bytes;
};

tfd_ring_acct_t *tfd_ring_acct_new(void)
{
    tfd_ring_acct_t *a = calloc(1, sizeof *a);
    if (a)
        atomic_init(&a->refs, 1);
    return a;
}

void tfd_ring_acct_unref(tfd_ring_acct_t *a)
{
    if (a && atomic_fetch_sub(&a->refs, 1) == 1)
        free(a);
}

uint64_t tfd_ring_acct_bytes(const tfd_ring_acct_t *a)
{
    return a ? atomic_load(&a->bytes) : 0;
}

/* The slots' memory and who holds each slot. It outlives the ring while bodies received
 * into its slots live (their blobs hold a reference), so a ring may close under them. */
typedef struct {
    atomic_int refs;                /* the ring's, and one per slot lent to a body */
    tfd_ring_acct_t *acct;          /* counts m.size until the slots are freed; or NULL */
    tfx_shm_t m;                    /* the slots, read-write here */
    unsigned nslots;
    uint64_t slot_bytes;
    pthread_mutex_t lock;           /* the bits: shm's thread and the request threads */
    uint64_t lent;                  /* bit i: slot i holds a body received into it (lent to a
                                     * request, then its item's blob) */
    uint64_t client;                /* bit i: slot i was handed to the consumer (ITEM) and
                                     * not given back (FREE) */
} mem_t;

/* What a body received into a slot holds: its blob's give_back_arg. */
typedef struct {
    mem_t *mem;
    unsigned slot;
} lend_t;

struct tfd_ring {
    tfd_feed_t *f;
    unsigned dev;
    char consumer[TFP_MAX_USER_ID + 1];
    char by[TFP_MAX_USER_ID + 1];   /* the consumer's principal ("": authentication off) */
    mem_t *mem;                     /* the slots, their geometry and holders */
    uint64_t asked, sent;           /* credit, in items */
    uint64_t generation;            /* the last one told */
    int told_generation, told_done;
    int first;                      /* the first pop rewinds: nothing was delivered here */
    int empty;                      /* the last pop found the queue empty ... */
    uint64_t empty_ev;              /* ... at this pop event count */
    uint64_t renew_ms;              /* the lease is renewed then */
    uint64_t acked;                 /* the consumer's last ACK, this generation */
    int ack_pending;                /* not applied yet: the lease had lapsed (the queue gave
                                     * the items back); applied once a pop attaches again */
};

static int send_item(tfd_ring_t *r, int sock, tfp_status_t status, const char *msg,
                     uint64_t position, uint64_t a, uint64_t b, const tfd_feed_item_t *it,
                     int fd)
{
    tfp_sf_t m;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_ITEM;
    m.status = status;
    if (status != TFP_OK) {
        m.str_len = strlen(msg) < TFP_SF_MAX_MSG ? strlen(msg) : TFP_SF_MAX_MSG;
        memcpy(m.str, msg, m.str_len);
        m.str[m.str_len] = '\0';
    } else {
        m.lease = position;
        m.a = a;
        m.b = b;
        tfp_sf_item_set(&m, it ? it->seq : 0, it ? it->round : 0, r->generation);
    }
    uint8_t buf[TFP_SF_MAX];
    tfp_err_t err;
    size_t len = tfp_sf_encode(&m, buf, sizeof buf, &err);
    if (!len) {
        tfd_log(LOG_ERR, "ring: cannot encode an ITEM: %s", err.msg);
        return -1;
    }
    return tfx_shm_send(sock, buf, len, fd >= 0 ? &fd : NULL, fd >= 0, &err) == TFP_OK ? 0 : -1;
}

/* Slots beyond the consumer's for what its device queue may hold: a push that finds a free
 * slot is received straight into it (tfd_ring_lend), where without one it lands in the heap
 * and this thread copies it into a slot when the consumer frees one, a memcpy of every item
 * that competes with producer and consumer for the cores (4 MiB items, 1 GB/s of demand, two
 * cores: the consumer's waits between steps went from p99 3.7 ms to 0.13-0.34 ms, its
 * starvation from 0.034-0.041 to 0.013-0.017; bench/README.md). As many as the
 * queue holds (max_items, or what max_bytes allows of full items), within the slot limit and
 * half the shared memory left, so one ring does not take what other consumers' rings need;
 * 0 if none fit. */
static unsigned queue_slots(const tfp_feed_decl_t *d, unsigned nslots, uint64_t slot,
                            uint64_t max_bytes)
{
    uint64_t extra = d->max_items;
    if (d->item_bytes > 0 && d->max_bytes / d->item_bytes < extra)
        extra = d->max_bytes / d->item_bytes;
    if (extra > TFP_SF_MAX_SLOTS - nslots)
        extra = TFP_SF_MAX_SLOTS - nslots;
    uint64_t room = max_bytes / 2 / slot;
    if (room < nslots + extra)
        extra = room > nslots ? room - nslots : 0;
    return (unsigned)extra;
}

tfp_status_t tfd_ring_open(tfd_feeds_t *fs, const char *feed, const char *devtok,
                           const char *consumer, const char *by, unsigned nslots,
                           uint64_t slot_bytes, uint64_t max_bytes, tfd_ring_acct_t *acct,
                           tfd_ring_t **out, int *fd, tfp_err_t *err)
{
    tfd_feed_t *f = tfd_feeds_get(fs, feed);
    if (!f)
        return tfp_err_set(err, TFP_ENOTFOUND, "no feed named '%s'", feed);
    const tfp_feed_decl_t *d = tfd_feed_decl(f);
    int dev = tfp_feed_dev_index(d, devtok);
    if (dev < 0) {
        tfd_feed_unref(f);
        return tfp_err_set(err, TFP_ENOTFOUND, "feed '%s' has no device '%s'", feed, devtok);
    }
    tfp_status_t own = tfd_feed_consumer_check(f, (unsigned)dev, consumer, by, err);
    if (own != TFP_OK) {
        tfd_feed_unref(f);
        return own;
    }
    uint64_t slot = slot_bytes ? slot_bytes : d->item_bytes + HEADER_ROOM;
    slot = (slot + PAGE - 1) / PAGE * PAGE;
    if (nslots == 0 || nslots > TFP_SF_MAX_SLOTS || slot > TFP_SF_MAX_SLOT ||
        slot * nslots > max_bytes) {
        tfd_feed_unref(f);
        return tfp_err_set(err, TFP_EFULL, "a ring of %u slots of %llu bytes is over the "
                           "shared memory left (shm-lease-memory: %llu bytes free)", nslots,
                           (unsigned long long)slot, (unsigned long long)max_bytes);
    }
    nslots += queue_slots(d, nslots, slot, max_bytes);
    tfd_ring_t *r = calloc(1, sizeof *r);
    mem_t *mem = calloc(1, sizeof *mem);
    if (!r || !mem) {
        free(r);
        free(mem);
        tfd_feed_unref(f);
        return tfp_err_set(err, TFP_ENOMEM, "out of memory");
    }
    mem->m = (tfx_shm_t)TFX_SHM_NONE;
    /* Only this mapping writes it, ever: the consumer cannot resize it under us, nor write
     * into it through any descriptor. */
    if (tfx_shm_create(slot * nslots, "tfetch-ring", &mem->m, err) != TFP_OK ||
        tfx_shm_seal(&mem->m, TFX_SHM_SEAL_SIZE | TFX_SHM_SEAL_WRITERS, err) != TFP_OK) {
        tfx_shm_close(&mem->m);
        free(mem);
        free(r);
        tfd_feed_unref(f);
        return err->code;
    }
#ifdef MADV_POPULATE_WRITE
    /* Fault every page in now, once, rather than under the first items. Best effort. */
    (void)madvise(mem->m.p, mem->m.size, MADV_POPULATE_WRITE);
#endif
    atomic_init(&mem->refs, 1);
    if (acct) {
        atomic_fetch_add(&acct->refs, 1);
        atomic_fetch_add(&acct->bytes, (uint64_t)mem->m.size);
        mem->acct = acct;
    }
    mem->nslots = nslots;
    mem->slot_bytes = slot;
    pthread_mutex_init(&mem->lock, NULL);
    r->mem = mem;
    r->f = f;
    r->dev = (unsigned)dev;
    snprintf(r->consumer, sizeof r->consumer, "%s", consumer);
    snprintf(r->by, sizeof r->by, "%s", by);
    r->first = 1;
    *out = r;
    *fd = r->mem->m.fd;
    return TFP_OK;
}

int tfd_ring_serves(const tfd_ring_t *r, const tfd_feed_t *f, unsigned dev)
{
    return r->f == f && r->dev == dev;
}
const char *tfd_ring_feed(const tfd_ring_t *r) { return tfd_feed_name(r->f); }

void tfd_ring_end(tfd_ring_t *r, int sock, tfp_status_t status, const char *msg)
{
    (void)send_item(r, sock, status, msg, 0, 0, 0, NULL, -1);
}
unsigned tfd_ring_slots(const tfd_ring_t *r) { return r->mem->nslots; }
uint64_t tfd_ring_slot_bytes(const tfd_ring_t *r) { return r->mem->slot_bytes; }

int tfd_ring_message(tfd_ring_t *r, const tfp_sf_t *m)
{
    tfp_err_t err;
    switch (m->op) {
    case TFP_SF_CREDIT:
        if (m->a < r->asked)
            return -1;
        r->asked = m->a;
        return 0;
    case TFP_SF_FREE: {
        uint64_t bit = (uint64_t)1 << (m->a - 1);       /* 1..TFP_SF_MAX_SLOTS: checked */
        int held;
        pthread_mutex_lock(&r->mem->lock);
        held = m->a <= r->mem->nslots && (r->mem->client & bit);
        r->mem->client &= ~bit;
        pthread_mutex_unlock(&r->mem->lock);
        return held ? 0 : -1;
    }
    case TFP_SF_ACK:
        /* Of an older generation: those items went with the reset. */
        if (!r->told_generation || m->b != r->generation || m->a <= r->acked)
            return 0;
        r->acked = m->a;
        /* A lease that lapsed (a stalled daemon) is taken again by the next pop: the ack is
         * applied then, not lost (items it released would come again, and stay). */
        r->ack_pending = tfd_feed_ack(r->f, r->dev, r->consumer, r->by, m->a, &err) != TFP_OK;
        if (r->ack_pending)
            tfd_log(LOG_INFO, "ring: ack of feed '%s' held until the consumer is attached "
                    "again: %s", tfd_feed_name(r->f), err.msg);
        return 0;
    default:
        return -1;
    }
}

/* Under mem->lock: 1 if slot i is neither lent nor the consumer's. */
static int is_free(const mem_t *mem, unsigned i)
{
    return !((mem->lent | mem->client) & ((uint64_t)1 << i));
}

/* Under mem->lock: the first free slot, or -1. */
static int free_slot(const mem_t *mem)
{
    for (unsigned i = 0; i < mem->nslots; i++)
        if (is_free(mem, i))
            return (int)i;
    return -1;
}

static void mem_unref(mem_t *mem)
{
    if (atomic_fetch_sub(&mem->refs, 1) != 1)
        return;
    if (mem->acct) {
        atomic_fetch_sub(&mem->acct->bytes, (uint64_t)mem->m.size);
        tfd_ring_acct_unref(mem->acct);
    }
    tfx_shm_close(&mem->m);
    pthread_mutex_destroy(&mem->lock);
    free(mem);
}

/* A body received into a slot is no longer needed (its blob is freed, or the request ended
 * without one): the slot is free once the consumer, too, gave it back. Any thread. */
static void slot_give_back(void *arg)
{
    lend_t *l = arg;
    pthread_mutex_lock(&l->mem->lock);
    l->mem->lent &= ~((uint64_t)1 << l->slot);
    pthread_mutex_unlock(&l->mem->lock);
    mem_unref(l->mem);
    free(l);
}

int tfd_ring_lend(tfd_ring_t *r, size_t len, uint8_t **buf, size_t *cap,
                  void (**give_back)(void *arg), void **arg)
{
    if (len == 0 || len > r->mem->slot_bytes)
        return -1;
    lend_t *l = malloc(sizeof *l);
    if (!l)
        return -1;
    mem_t *mem = r->mem;
    pthread_mutex_lock(&mem->lock);
    int slot = free_slot(mem), spare = 0;
    for (unsigned i = 0; slot >= 0 && i < mem->nslots; i++)
        spare += (int)(i != (unsigned)slot && is_free(mem, i));
    if (slot >= 0 && spare > 0)             /* one left for items that need a copy */
        mem->lent |= (uint64_t)1 << slot;
    else
        slot = -1;
    pthread_mutex_unlock(&mem->lock);
    if (slot < 0) {
        free(l);
        return -1;
    }
    atomic_fetch_add(&mem->refs, 1);
    l->mem = mem;
    l->slot = (unsigned)slot;
    *buf = mem->m.p + (uint64_t)slot * mem->slot_bytes;
    *cap = (size_t)mem->slot_bytes;
    *give_back = slot_give_back;
    *arg = l;
    return 0;
}

/* Sends one popped item: from the slot it was received into (no copy), else copied into a
 * free slot when it fits, else as a memfd of its own. */
static int deliver(tfd_ring_t *r, int sock, const tfd_feed_item_t *it, tfd_ring_stats_t *st)
{
    const tfd_blob_t *b = it->blob;
    mem_t *mem = r->mem;
    if (b->give_back == slot_give_back && ((const lend_t *)b->give_back_arg)->mem == mem &&
        b->data == b->base) {
        unsigned slot = ((const lend_t *)b->give_back_arg)->slot;
        pthread_mutex_lock(&mem->lock);
        mem->client |= (uint64_t)1 << slot;
        pthread_mutex_unlock(&mem->lock);
        st->in_place++;
        return send_item(r, sock, TFP_OK, NULL, it->position, (uint64_t)(b->data - mem->m.p),
                         b->len, it, -1);
    }
    pthread_mutex_lock(&mem->lock);
    int slot = b->len <= mem->slot_bytes ? free_slot(mem) : -1;
    if (slot >= 0)
        mem->client |= (uint64_t)1 << slot;
    pthread_mutex_unlock(&mem->lock);
    if (slot >= 0) {
        uint64_t off = (uint64_t)slot * mem->slot_bytes;
        memcpy(mem->m.p + off, b->data, b->len);
        st->items++;
        return send_item(r, sock, TFP_OK, NULL, it->position, off, b->len, it, -1);
    }
    int fd;
    size_t off, size;
    if (tfd_blob_share(it->blob, &fd, &off, &size) != 0) {
        send_item(r, sock, TFP_ENOMEM, "no shared memory for an item larger than a slot or "
                  "past the free slots", 0, 0, 0, NULL, -1);
        return -1;
    }
    st->overflow++;
    return send_item(r, sock, TFP_OK, NULL, it->position, off, b->len, it, fd);
}

int tfd_ring_fill(tfd_ring_t *r, int sock, tfd_ring_stats_t *st)
{
    while (r->sent < r->asked) {
        uint64_t ev = tfd_feed_events(r->f, TFD_FEED_POP, r->dev);
        if (r->empty && ev == r->empty_ev)
            return 0;                       /* nothing changed since it was empty */
        tfd_feed_item_t it;
        tfp_err_t err;
        uint64_t wait_ev = 0;
        tfp_status_t s = tfd_feed_pop(r->f, r->dev, r->consumer, r->by, NULL, r->first, 0, NULL, &it,
                                      &wait_ev, &err);
        r->empty = 0;
        if (s == TFP_OK || s == TFP_EAGAIN) {
            r->first = 0;
            r->renew_ms = 0;                /* the pop renewed the lease: tick re-arms */
            if (r->ack_pending && it.generation == r->generation &&
                tfd_feed_ack(r->f, r->dev, r->consumer, r->by, r->acked, &err) == TFP_OK)
                r->ack_pending = 0;
            if (!r->told_generation || it.generation != r->generation) {
                r->generation = it.generation;
                r->told_generation = 1;
                r->told_done = 0;
                r->acked = 0;
                r->ack_pending = 0;
                if (s == TFP_EAGAIN &&
                    send_item(r, sock, TFP_OK, NULL, 0, 0, 0, NULL, -1) != 0) {
                    return -1;
                }
            }
        }
        if (s == TFP_EAGAIN) {
            r->empty = 1;
            r->empty_ev = wait_ev;
            return 0;
        }
        if (s == TFP_EDONE) {
            r->empty = 1;
            r->empty_ev = ev;
            if (r->told_done)
                return 0;
            r->told_done = 1;
            return send_item(r, sock, TFP_EDONE, err.msg, 0, 0, 0, NULL, -1);
        }
        if (s != TFP_OK) {
            send_item(r, sock, s, err.msg, 0, 0, 0, NULL, -1);
            return -1;
        }
        int rc = deliver(r, sock, &it, st);
        tfd_blob_unref(it.blob);            /* the queue keeps its own until the ack */
        if (rc != 0)
            return -1;
        r->sent++;
    }
    return 0;
}

uint64_t tfd_ring_tick(tfd_ring_t *r, uint64_t now)
{
    uint64_t every = tfd_feed_decl(r->f)->lease_ms / 3;
    if (every == 0)
        every = 1;
    if (!r->renew_ms)
        r->renew_ms = now + every;
    if (now >= r->renew_ms) {
        tfp_err_t err;
        /* Through 0 releases nothing and renews the lease; refused when none is held. */
        if (!r->first)
            (void)tfd_feed_ack(r->f, r->dev, r->consumer, r->by, 0, &err);
        r->renew_ms = now + every;
    }
    return r->renew_ms - now;
}

void tfd_ring_free(tfd_ring_t *r)
{
    if (!r)
        return;
    tfp_err_t err;
    if (!r->first)
        (void)tfd_feed_detach(r->f, r->dev, r->consumer, r->by, NULL, &err);
    mem_unref(r->mem);                      /* bodies received into its slots keep it */
    tfd_feed_unref(r->f);
    free(r);
}
