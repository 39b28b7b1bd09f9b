/* ring.h - a feed's same-host ring, the consumer's side (client/ring.c; the daemon's is
 * daemon/ring.h). Internal to libtfetch: feed.c's only user.
 */
#ifndef TFI_RING_H
#define TFI_RING_H

#include "client/internal.h"

typedef struct tfi_ring tfi_ring_t;

enum {
    TFI_RING_ITEM,                      /* reply (position, seq, round, generation), doc */
    TFI_RING_GENERATION,                /* no item: the feed was reset (reply.generation) */
    TFI_RING_DONE,                      /* the feed is done and the queue drained */
    TFI_RING_ERROR,                     /* status, why: the daemon ended the ring, or an item
                                         * it sent was unusable */
    TFI_RING_BROKEN,                    /* the connection failed or ended (why) */
};

typedef struct {
    int kind;                           /* TFI_RING_* */
    tfi_reply_t reply;
    tf_doc_t *doc;                      /* ITEM: its document, the caller's (tf_doc_free
                                         * gives the slot back) */
    tf_status_t status;
    char why[256];
} tfi_ring_msg_t;

/* Opens a ring of nslots (1..64) for consumer on feed's device dev over a new connection
 * to o's shm socket (o->shm set). Calling thread; a few local round trips. TF_OK with *out;
 * else a status with why (nothing kept). */
tf_status_t tfi_ring_open(tf_client_t *c, origin_t *o, const char *feed, const char *dev,
                          const char *consumer, unsigned nslots, tfi_ring_t **out, char *why,
                          size_t why_size);
/* The next thing the daemon said, if any: 1 with *m, 0 when nothing is waiting. */
int tfi_ring_take(tfi_ring_t *r, tfi_ring_msg_t *m);
/* Tells the daemon, in one send: the slots whose documents were freed since the last sync
 * (FREE), the queue's items released through ack of generation (ACK; ack 0: none), and that
 * items up to credit in all are wanted (CREDIT; only when it grows). 0, or -1 (the socket
 * failed). */
int tfi_ring_sync(tfi_ring_t *r, uint64_t credit, uint64_t ack, uint64_t generation);
uint64_t tfi_ring_asked(const tfi_ring_t *r);
/* Ends the ring (the daemon detaches the consumer); documents still mapping slots stay
 * valid until freed. NULL is a no-op. */
void tfi_ring_close(tfi_ring_t *r);

#endif
