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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HEADER_ROOM 16384u          /* a slot's bytes beyond the item's payload */
#define PAGE 4096u

struct tfd_ring {
    tfd_feed_t *f;
    unsigned dev;
    char consumer[TFP_MAX_USER_ID + 1];
    tfx_shm_t m;                    /* the slots, read-write here */
    unsigned nslots;
    uint64_t slot_bytes;
    uint64_t busy;                  /* bit i: slot i holds an item the consumer maps */
    uint64_t asked, sent;           /* credit, in items */
    uint64_t generation;            /* the last one told */
    int told_generation, told_done;
    int first;                      /* the first pop rewinds: nothing was delivered here */
    int empty;                      /* the last pop found the queue empty ... */
    uint64_t empty_ev;              /* ... at this pop event count */
    uint64_t renew_ms;              /* the lease is renewed then */
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

tfp_status_t tfd_ring_open(tfd_feeds_t *fs, const char *feed, const char *devtok,
                           const char *consumer, unsigned nslots, uint64_t slot_bytes,
                           uint64_t max_bytes, tfd_ring_t **out, int *fd, tfp_err_t *err)
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
    uint64_t slot = slot_bytes ? slot_bytes : d->item_bytes + HEADER_ROOM;
    slot = (slot + PAGE - 1) / PAGE * PAGE;
    if (nslots == 0 || nslots > TFP_SF_MAX_SLOTS || slot > TFP_SF_MAX_SLOT ||
        slot * nslots > max_bytes) {
        tfd_feed_unref(f);
        return tfp_err_set(err, TFP_EFULL, "a ring of %u slots of %llu bytes is over the "
                           "shared memory left (shm-lease-memory: %llu bytes free)", nslots,
                           (unsigned long long)slot, (unsigned long long)max_bytes);
    }
    tfd_ring_t *r = calloc(1, sizeof *r);
    if (!r) {
        tfd_feed_unref(f);
        return tfp_err_set(err, TFP_ENOMEM, "out of memory");
    }
    r->m = (tfx_shm_t)TFX_SHM_NONE;
    /* Only this mapping writes it, ever: the consumer cannot resize it under us, nor write
     * into it through any descriptor. */
    if (tfx_shm_create(slot * nslots, "tfetch-ring", &r->m, err) != TFP_OK ||
        tfx_shm_seal(&r->m, TFX_SHM_SEAL_SIZE | TFX_SHM_SEAL_WRITERS, err) != TFP_OK) {
        tfx_shm_close(&r->m);
        free(r);
        tfd_feed_unref(f);
        return err->code;
    }
#ifdef MADV_POPULATE_WRITE
    /* Fault every page in now, once, rather than under the first items. Best effort. */
    (void)madvise(r->m.p, r->m.size, MADV_POPULATE_WRITE);
#endif
    r->f = f;
    r->dev = (unsigned)dev;
    snprintf(r->consumer, sizeof r->consumer, "%s", consumer);
    r->nslots = nslots;
    r->slot_bytes = slot;
    r->first = 1;
    *out = r;
    *fd = r->m.fd;
    return TFP_OK;
}

uint64_t tfd_ring_bytes(const tfd_ring_t *r) { return r->m.size; }
const char *tfd_ring_feed(const tfd_ring_t *r) { return tfd_feed_name(r->f); }

void tfd_ring_end(tfd_ring_t *r, int sock, tfp_status_t status, const char *msg)
{
    (void)send_item(r, sock, status, msg, 0, 0, 0, NULL, -1);
}
unsigned tfd_ring_slots(const tfd_ring_t *r) { return r->nslots; }
uint64_t tfd_ring_slot_bytes(const tfd_ring_t *r) { return r->slot_bytes; }

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
        if (m->a > r->nslots || !(r->busy & bit))
            return -1;
        r->busy &= ~bit;
        return 0;
    }
    case TFP_SF_ACK:
        /* Of an older generation: those items went with the reset. A lease lost meanwhile
         * (the consumer id taken over) is the next pop's to find. */
        if (r->told_generation && m->b == r->generation &&
            tfd_feed_ack(r->f, r->dev, r->consumer, m->a, &err) != TFP_OK)
            tfd_log(LOG_INFO, "ring: ack of feed '%s': %s", tfd_feed_name(r->f), err.msg);
        return 0;
    default:
        return -1;
    }
}

/* The first free slot, or -1. */
static int free_slot(const tfd_ring_t *r)
{
    for (unsigned i = 0; i < r->nslots; i++)
        if (!(r->busy & ((uint64_t)1 << i)))
            return (int)i;
    return -1;
}

/* Sends one popped item: into a free slot when it fits, else as a memfd of its own. */
static int deliver(tfd_ring_t *r, int sock, const tfd_feed_item_t *it, tfd_ring_stats_t *st)
{
    const tfd_blob_t *b = it->blob;
    int slot = b->len <= r->slot_bytes ? free_slot(r) : -1;
    if (slot >= 0) {
        uint64_t off = (uint64_t)slot * r->slot_bytes;
        memcpy(r->m.p + off, b->data, b->len);
        r->busy |= (uint64_t)1 << slot;
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
        tfp_status_t s = tfd_feed_pop(r->f, r->dev, r->consumer, NULL, r->first, 0, &it,
                                      &wait_ev, &err);
        r->empty = 0;
        if (s == TFP_OK || s == TFP_EAGAIN) {
            r->first = 0;
            r->renew_ms = 0;                /* the pop renewed the lease: tick re-arms */
            if (!r->told_generation || it.generation != r->generation) {
                r->generation = it.generation;
                r->told_generation = 1;
                r->told_done = 0;
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
            (void)tfd_feed_ack(r->f, r->dev, r->consumer, 0, &err);
        r->renew_ms = now + every;
    }
    return r->renew_ms - now;
}

void tfd_ring_free(tfd_ring_t *r)
{
    if (!r)
        return;
    if (!r->first)
        tfd_feed_detach(r->f, r->dev, r->consumer);
    tfx_shm_close(&r->m);
    tfd_feed_unref(r->f);
    free(r);
}
