/* ring.h - a device feed's same-host ring, the daemon's side (DESIGN.md section 7;
 * proto/shmframe.h RING, CREDIT, ACK, FREE, ITEM; doc/PROTOCOL.md "Feeds on one host").
 *
 * One consumer process on this host attached to one device queue over a connection of the
 * shm transport (daemon/shm.c). The ring is one memfd of n fixed slots, sealed against
 * resizes, mapped read-write here and read-only by the consumer, and faulted in once, so the
 * pages are reused item after item (fresh pages cost more than the copy on our machines).
 * As the consumer grants credit (how many items it asked for in all) the ring pops the queue
 * under the consumer's id, which holds the queue's lease while the connection lives, puts
 * each item's document into a slot (where it was received, below, or a copy into a free
 * one) and says so with an ITEM message; an item larger
 * than a slot, or one that finds every slot taken, goes as a sealed memfd of its own. FREE
 * gives a slot back; ACK releases positions in the queue (tfd_feed_ack), as HTTP's ?ack=
 * does. Closing the ring detaches the consumer, so what it was given and never released
 * goes, in order, to whoever attaches next. Nothing the consumer could write into its
 * mapping is ever read back here.
 *
 * A producer's UCX push to a device queue with a ring attached is received straight into a
 * free slot (tfd_ring_lend: api_feeds.c asks for one as the request begins); when that item
 * comes to be delivered to this ring, it is sent from where it lies, with no copy at all
 * through the daemon. A slot is free when neither a received body (until its item is
 * acknowledged and freed) nor the consumer (until FREE) holds it.
 *
 * Threads: only shm.c's thread touches a ring, except tfd_ring_lend and the give-back it
 * returns (the slots' bits under their own lock).
 */
#ifndef TFD_RING_H
#define TFD_RING_H

#include <stdint.h>
#include "daemon/feeds.h"
#include "proto/shmframe.h"

typedef struct tfd_ring tfd_ring_t;

typedef struct {
    uint64_t items;                 /* items copied into a slot */
    uint64_t in_place;              /* items sent from the slot their body was received into */
    uint64_t overflow;              /* items sent as a memfd of their own */
} tfd_ring_stats_t;

/* The shared memory a server's rings hold, from a ring's opening until its slots are freed:
 * a ring that closed keeps its slots while bodies received into them live (items still
 * queued, for this device or, broadcast, for the others), and they still count, so that a
 * consumer that reconnects cannot leave memory behind outside the bound. Reference-counted
 * (the server's, and each ring's slots'), so it outlives whichever goes last; any thread. */
typedef struct tfd_ring_acct tfd_ring_acct_t;
tfd_ring_acct_t *tfd_ring_acct_new(void);
void tfd_ring_acct_unref(tfd_ring_acct_t *a);
uint64_t tfd_ring_acct_bytes(const tfd_ring_acct_t *a);

/* A ring for consumer, of principal by ("": authentication off), on feed's device devtok
 * (TFP_EFORBIDDEN when that consumer id is another principal's, feeds.h): nslots (1..TFP_SF_MAX_SLOTS) of slot_bytes
 * each (0: the feed's item bytes plus room for the header, page-rounded), at most max_bytes
 * in all, counted in acct (may be NULL) until its slots are freed. TFP_OK with *out and *fd
 * (the memfd, borrowed: valid while the ring lives), else TFP_ENOTFOUND (no such feed or
 * device), TFP_EFULL (over max_bytes) or TFP_ENOMEM, with err. */
tfp_status_t tfd_ring_open(tfd_feeds_t *fs, const char *feed, const char *devtok,
                           const char *consumer, const char *by, unsigned nslots,
                           uint64_t slot_bytes, uint64_t max_bytes, tfd_ring_acct_t *acct,
                           tfd_ring_t **out, int *fd, tfp_err_t *err);
unsigned tfd_ring_slots(const tfd_ring_t *r);
uint64_t tfd_ring_slot_bytes(const tfd_ring_t *r);
/* Lends a free slot (one is always kept for items that need a copy) for a body of len
 * bytes to be received into, so the item reaches the consumer with no copy through the
 * daemon: 0 with *buf (*cap bytes; written by the daemon alone, the ring being sealed
 * against every other writer) and *give_back(*arg), which frees the slot - run it once the
 * body is no longer needed (its blob's give_back); -1 when no slot is free or len does not
 * fit. The slot's memory outlives the ring. Any thread, under the caller's guarantee that r
 * is not freed meanwhile (daemon/shm.c's ring registry). */
int tfd_ring_lend(tfd_ring_t *r, size_t len, uint8_t **buf, size_t *cap,
                  void (**give_back)(void *arg), void **arg);
/* The feed and device queue r serves. */
int tfd_ring_serves(const tfd_ring_t *r, const tfd_feed_t *f, unsigned dev);
/* A CREDIT, ACK or FREE from the consumer: 0, or -1 when it breaks the ring's rules (credit
 * that shrinks, a slot not taken): close the connection. */
int tfd_ring_message(tfd_ring_t *r, const tfp_sf_t *m);
/* Sends what credit and slots allow over sock: 0, or -1 when the ring is over (the feed was
 * deleted, another consumer holds the queue: said in an ITEM; or sock failed). Cheap when
 * nothing changed. *st counts what was sent. */
int tfd_ring_fill(tfd_ring_t *r, int sock, tfd_ring_stats_t *st);
/* The feed's name (borrowed, as long as r lives). */
const char *tfd_ring_feed(const tfd_ring_t *r);
/* Ends the ring for the consumer: an ITEM with status and msg; the caller closes the
 * connection. */
void tfd_ring_end(tfd_ring_t *r, int sock, tfp_status_t status, const char *msg);
/* Keeps the consumer's lease alive while the connection is: the ms until it is due next. */
uint64_t tfd_ring_tick(tfd_ring_t *r, uint64_t now_ms);
/* Detaches the consumer, unmaps, frees. NULL is a no-op. */
void tfd_ring_free(tfd_ring_t *r);

#endif
