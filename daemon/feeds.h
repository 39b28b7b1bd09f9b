/* feeds.h - device feeds: named, typed, bounded queues between producers on any host and a
 * computation's per-device loops, and an outfeed that carries its results back
 * (doc/PROTOCOL.md, "Feeds"; DESIGN.md section 7).
 *
 * A feed has one FIFO queue per device, bounded in items and payload bytes. Producers
 * enqueue into one device's queue (per_device) or one round into every queue at once (split:
 * each device its rows; broadcast: the same item), committed under the feed's lock so no
 * device ever sees round N+1 before every device holds round N. A producer stream
 * (Tfetch-Producer, per device on device-addressed endpoints) numbers its items from 1: a
 * number already accepted is acknowledged without enqueueing, a gap refused. One consumer
 * attaches to a device queue at a time and holds a lease; delivered items stay queued until
 * it acknowledges them (cumulatively, by position), and when its lease runs out they are
 * delivered again, in order, to whoever attaches next. done lets the queues drain and then
 * answers end-of-data; reset drops everything queued and starts a new generation. The
 * outfeed is one ring per feed, its own sequence from 1, the last outfeed_items kept.
 *
 * Owns the feeds, their items (blob references) and their byte accounting against the
 * daemon-wide feed memory limit. Nothing here blocks: an operation that cannot proceed says
 * so with an event counter to wait on (tfd_feed_events); every change bumps the counters of
 * whom it may unblock and calls the wake callback with their key (tfd_feed_key) after the
 * feed's lock is released, so the caller can arm a waiter (daemon/waiters.c) race-free.
 *
 * Threads: thread-safe. MHD's threads and the UCX thread call it for requests, the main
 * thread ticks it (lease expiry); a registry lock above one lock per feed; the event
 * counters are atomics readable without either lock.
 */
#ifndef TFD_FEEDS_H
#define TFD_FEEDS_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/store.h"
#include "proto/feeddecl.h"
#include "proto/ids.h"
#include "proto/status.h"

typedef struct tfd_feeds tfd_feeds_t;
typedef struct tfd_feed tfd_feed_t;

#define TFD_FEED_PRODUCERS 1024        /* producer streams per feed (the daemon's choice) */

typedef struct {
    uint64_t memory;                /* payload bytes all feeds may hold, else 507 */
    unsigned max_feeds;             /* feeds in all, else 507 */
    unsigned feeds_per_user;        /* feeds one owner (user id) may declare, else 507 */
    unsigned max_producers;         /* producer streams remembered per feed, else 507 */
    /* Called after a change, without any feeds lock held, with the key of those it may
     * unblock. May be NULL. */
    void (*wake)(void *arg, const char *key);
    void *wake_arg;
} tfd_feeds_limits_t;

/* What waits: producers on a full queue, consumers on an empty device queue, outfeed
 * readers. Keys: "FEED/in", "FEED/pop/DEV", "FEED/out" (no tensor name contains '/'). */
enum { TFD_FEED_IN, TFD_FEED_POP, TFD_FEED_OUT };
#define TFD_FEED_KEY_SIZE (TFP_MAX_TENSOR_NAME + 16)
void tfd_feed_key(char *buf, const char *feed, int what, unsigned dev);

tfd_feeds_t *tfd_feeds_new(const tfd_feeds_limits_t *l);
/* New limits while serving (SIGHUP): what is held over them stays; new items and feeds are
 * refused until it fits. */
void tfd_feeds_set_limits(tfd_feeds_t *fs, uint64_t memory, unsigned max_feeds,
                          unsigned feeds_per_user);
void tfd_feeds_free(tfd_feeds_t *fs);           /* NULL is a no-op */

/* Declares name, owned by owner ("" for none). New: takes decl's contents (decl is left
 * cleared), *created 1, TFP_OK. The same declaration again: TFP_OK, *created 0 (decl
 * untouched). Different: TFP_ECONFLICT. Over max_feeds or feeds_per_user: TFP_ENOSPACE.
 * *out (may be NULL) gets a reference on TFP_OK. */
tfp_status_t tfd_feeds_declare(tfd_feeds_t *fs, const char *name, const char *owner,
                               tfp_feed_decl_t *decl, tfd_feed_t **out, int *created,
                               tfp_err_t *err);
/* A new reference to the feed named, or NULL. */
tfd_feed_t *tfd_feeds_get(tfd_feeds_t *fs, const char *name);
void tfd_feed_unref(tfd_feed_t *f);             /* NULL is a no-op */
/* Deletes the feed: its items are dropped, every waiter woken (operations then answer
 * TFP_ENOTFOUND). 0, or -1 if there is none. */
int tfd_feeds_delete(tfd_feeds_t *fs, const char *name);
/* Calls fn with each feed's name in name order, under the registry lock. */
void tfd_feeds_each(tfd_feeds_t *fs, void (*fn)(const char *name, void *arg), void *arg);
/* Expires consumer leases (their delivered items become undelivered again). The main
 * thread calls it a few times a second. */
void tfd_feeds_tick(tfd_feeds_t *fs);

/* The declaration (immutable while a reference is held), the name, the owner. */
const tfp_feed_decl_t *tfd_feed_decl(const tfd_feed_t *f);
const char *tfd_feed_name(const tfd_feed_t *f);
/* The event counter of what (TFD_FEED_*; dev for TFD_FEED_POP): it changes whenever what
 * waits there may proceed. Lock-free. */
uint64_t tfd_feed_events(const tfd_feed_t *f, int what, unsigned dev);

/* ---- producers ---------------------------------------------------------------------------- */

typedef struct {
    const char *producer;           /* the stream's id (seq given) */
    uint64_t seq;                   /* 0: no sequence number, always enqueued */
    int dev;                        /* per_device: the device; -1: a round to every device */
    tfd_blob_t *const *blobs;       /* dev >= 0: blobs[0]; -1: blobs[0..ndev), one per device
                                     * (broadcast: the same blob ndev times) */
    uint64_t bytes;                 /* payload bytes of each device's item */
    uint64_t generation;            /* 0: any; else the feed must still be in it (a push that
                                     * waited across a reset is refused, not enqueued) */
} tfd_infeed_t;

typedef struct {
    uint64_t seq;                   /* the producer's seq, or the position (round) if none */
    uint64_t round;                 /* per_device: the item's position in its queue */
    uint64_t generation;            /* the feed's, whatever the outcome */
    int dup;                        /* 1: seq was accepted before; nothing enqueued */
    int ahead;                      /* with TFP_ECONFLICT: a gap of at most
                                     * TFD_FEED_SEQ_AHEAD, worth waiting out (*ev) */
} tfd_infeed_res_t;

/* How far ahead of its stream a seq may be and wait for the pushes before it (a producer
 * with several pushes in flight, completing out of order). */
#define TFD_FEED_SEQ_AHEAD 64u

/* Enqueues one item (per_device) or one round (split, broadcast), or nothing. TFP_OK (*res;
 * the queues took their own references to the blobs); TFP_EFULL when a target queue lacks
 * room (*ev: the TFD_FEED_IN counter to wait on); TFP_ECONFLICT for a sequence gap (with
 * res->ahead and *ev when the gap is small enough to wait for: the counter moves when the
 * stream does), a done feed, the wrong fanout or another generation than in->generation;
 * TFP_ENOSPACE over the feed memory or the producer streams; TFP_ENOTFOUND once deleted. err
 * says why. */
tfp_status_t tfd_feed_infeed(tfd_feed_t *f, const tfd_infeed_t *in, tfd_infeed_res_t *res,
                             uint64_t *ev, tfp_err_t *err);

/* ---- consumers ---------------------------------------------------------------------------- */

/* Consumers belong to principals. Every call below names the consumer and, as by, the
 * principal that asks ("" with authentication off: then everyone is the same one). A
 * consumer id attached by one principal (its lease live), or whose rewound positions it may
 * still acknowledge, is refused to every other with TFP_EFORBIDDEN, naming nothing of the
 * owner; a TFP_ECONFLICT for a queue attached to another principal's consumer does not name
 * that consumer. */

typedef struct {
    tfd_blob_t *blob;               /* a new reference */
    uint64_t position, seq, round, generation;
} tfd_feed_item_t;

/* Attaches consumer to device dev's queue (or renews its lease, to at least hold_until_ms),
 * releases every delivered item at position <= *ack (ack may be NULL), with rewind makes
 * every delivered item not released undelivered again (a consumer that restarted under the
 * same id lost what its last run had prefetched: without it the next cumulative ack would
 * release those unseen), then delivers the next undelivered item. TFP_OK (*item);
 * TFP_EAGAIN when there is none (*ev: the TFD_FEED_POP counter of dev; item->generation set,
 * item->blob NULL); TFP_EDONE when the feed is done and nothing is undelivered;
 * TFP_ECONFLICT while another consumer's lease is live; TFP_EFORBIDDEN when consumer is
 * another principal's; TFP_ENOTFOUND once deleted.
 *
 * attach ties a pop that waits to the attachment it began under: 0 on its first call (set
 * here), the same value on its calls after a wait. When the consumer detached in between
 * (tfd_feed_detach), or the feed was reset, TFP_ECANCELED (item->generation set): the pop
 * ends without attaching it again (nor delivering it an item of the new generation, which
 * an acknowledgement of the old one could release). NULL: no such tie (the ring's pops,
 * which never wait). */
tfp_status_t tfd_feed_pop(tfd_feed_t *f, unsigned dev, const char *consumer, const char *by,
                          const uint64_t *ack, int rewind, uint64_t hold_until_ms, uint64_t *attach,
                          tfd_feed_item_t *item, uint64_t *ev, tfp_err_t *err);
/* Whether by may use consumer on dev's queue now: TFP_OK, or TFP_EFORBIDDEN (another
 * principal's) or TFP_ENOTFOUND with err. For a same-host ring, asked as it opens. */
tfp_status_t tfd_feed_consumer_check(tfd_feed_t *f, unsigned dev, const char *consumer,
                                     const char *by, tfp_err_t *err);
/* Releases every delivered item at position <= through and renews the lease. TFP_OK,
 * TFP_ECONFLICT if consumer is not the one attached, TFP_EFORBIDDEN if it is another
 * principal's (see "Consumers belong to principals" above), TFP_ENOTFOUND once deleted. */
tfp_status_t tfd_feed_ack(tfd_feed_t *f, unsigned dev, const char *consumer, const char *by,
                          uint64_t through, tfp_err_t *err);

/* Ends consumer's lease on dev's queue now, if it holds it (a consumer that says so, a
 * same-host ring whose connection closed): first releases through *ack as tfd_feed_ack does
 * (ack may be NULL), then what it was delivered and did not release goes to whoever attaches
 * next, in order, and its pops that wait end (TFP_ECANCELED from tfd_feed_pop). A consumer
 * that holds no lease changes nothing but its own releases. TFP_OK, TFP_EFORBIDDEN (another
 * principal's consumer), or TFP_ENOTFOUND. */
tfp_status_t tfd_feed_detach(tfd_feed_t *f, unsigned dev, const char *consumer,
                             const char *by, const uint64_t *ack, tfp_err_t *err);

/* ---- lifecycle ---------------------------------------------------------------------------- */

/* End of data: producers are refused from now on; consumers drain, then TFP_EDONE. */
void tfd_feed_done(tfd_feed_t *f);
/* Drops every queued item (*dropped of them), clears done, producer streams and consumers,
 * and starts generation *generation. The outfeed's items stay. */
void tfd_feed_reset(tfd_feed_t *f, uint64_t *generation, uint64_t *dropped);

/* ---- outfeed ------------------------------------------------------------------------------ */

/* Appends blob (bytes of payload; the ring takes its own reference) from device dev, as
 * producer's seq (0: none); the oldest item beyond outfeed_items is dropped. TFP_OK with
 * *out_seq (*dup 1: seq accepted before, nothing appended, *out_seq 0), TFP_ECONFLICT for a
 * gap, TFP_ENOSPACE over the feed memory, TFP_ENOTFOUND once deleted. */
tfp_status_t tfd_feed_outfeed_push(tfd_feed_t *f, unsigned dev, const char *producer,
                                   uint64_t seq, tfd_blob_t *blob, uint64_t bytes,
                                   uint64_t *out_seq, int *dup, tfp_err_t *err);

typedef struct {
    tfd_blob_t *blob;               /* a new reference */
    uint64_t seq, generation;
    unsigned dev;
} tfd_outfeed_item_t;

/* The first item with seq > after: TFP_OK (*item); TFP_EAGAIN when there is none yet (*ev:
 * the TFD_FEED_OUT counter); TFP_EGONE when after + 1 was dropped (*resume_after: the
 * oldest kept - 1); TFP_ENOTFOUND once deleted. */
tfp_status_t tfd_feed_outfeed_get(tfd_feed_t *f, uint64_t after, tfd_outfeed_item_t *item,
                                  uint64_t *ev, uint64_t *resume_after, tfp_err_t *err);

/* ---- statistics --------------------------------------------------------------------------- */

/* Enqueue-to-first-delivery latency buckets (seconds, upper bounds; +Inf after the last). */
#define TFD_FEED_NLAT 14
extern const double tfd_feed_lat_buckets[TFD_FEED_NLAT];

/* What a feed's stats show in place of another principal's consumer id (api_feeds.c): not a
 * valid id, so it cannot be used as one. */
#define TFD_FEED_CONSUMER_HIDDEN "(another principal's)"

typedef struct {
    uint64_t depth, bytes, high_water;          /* items queued (delivered or not), bytes */
    uint64_t published, delivered, released;    /* positions, this generation */
    char consumer[TFP_MAX_USER_ID + 1];         /* "" when none is attached */
    char consumer_by[TFP_MAX_USER_ID + 1];      /* its principal ("": auth off) */
    uint64_t redeliveries;
    uint64_t items_in, items_out, bytes_in, bytes_out;      /* since declared */
    uint64_t starved_ns;            /* pops waiting on this empty queue */
    uint64_t last_round;            /* the round of the last item delivered */
    uint64_t lat[TFD_FEED_NLAT + 1], lat_count;
    double lat_sum;
} tfd_feed_dev_stats_t;

typedef struct {
    char name[TFP_MAX_TENSOR_NAME + 1];
    char owner[TFP_MAX_USER_ID + 1];
    tfp_fanout_t fanout;
    unsigned ndev;
    uint64_t generation, dropped, blocked_ns;
    int done;
    uint64_t out_first, out_last, out_items, out_bytes;
    tfd_feed_dev_stats_t dev[TFP_FEED_MAX_DEVICES];
} tfd_feed_stats_t;

/* Producers' time suspended on a full queue; consumers' time suspended on an empty one. */
void tfd_feed_add_blocked(tfd_feed_t *f, uint64_t ns);
void tfd_feed_add_starved(tfd_feed_t *f, unsigned dev, uint64_t ns);
/* A snapshot into *st. */
void tfd_feed_stats(tfd_feed_t *f, tfd_feed_stats_t *st);
/* Snapshots of every feed (malloc'd array of *n malloc'd entries; tfd_feeds_stats_free).
 * NULL with *n 0 when there are none or memory ran out. */
tfd_feed_stats_t **tfd_feeds_stats_all(tfd_feeds_t *fs, size_t *n);
void tfd_feeds_stats_free(tfd_feed_stats_t **v, size_t n);
/* Payload bytes all feeds hold. */
uint64_t tfd_feeds_bytes(tfd_feeds_t *fs);

#endif
