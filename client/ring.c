/* ring.c - a feed's same-host ring, the consumer's side ("shm/ring"; daemon/ring.h is the
 * daemon's, proto/shmframe.h the messages).
 *
 * A feed attached through a client whose origin is on this host (an shm connection after
 * the upgrade, policy auto) asks for a ring: a token for a second connection (TOKEN on the
 * origin's), HELLO with it, RING for its device queue. The answer's memfd is checked (its
 * own size, its seals) and mapped read-only once; from then on the daemon puts items into
 * its slots (received there, or copied) as the feed's credit allows and says so (ITEM), and
 * an item's document is decoded in place: its tensors point into the slot, which stays the
 * consumer's until tf_doc_free gives it back (FREE, sent with the feed's next ACK and
 * CREDIT in one sendmmsg). Items larger than a slot come as a sealed memfd of their own,
 * mapped the same way.
 *
 * Owns the connection, the mapping, a reader thread and the messages it received and the
 * feed has not taken. The reader thread only receives (blocking) and queues, then wakes
 * the client's driving thread (tfi_wakeup); everything else - taking messages, sending
 * CREDIT, ACK and FREE - runs on the thread driving the client (tf_doc_free, on any
 * thread, only marks the slot). The ring is reference counted: the feed's reference and one
 * per document still mapping a slot, so a document may outlive the ring's close; the socket
 * is closed with the last reference (a slot freed after the close is never sent).
 */
#include "config.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/ring.h"
#include "proto/safetensors.h"
#include "proto/shmframe.h"
#include "transports/shm.h"

#define RING_TIMEOUT_MS 2000L           /* HELLO and RING's answers */

typedef struct msg {
    struct msg *next;
    tfp_sf_t m;
    int fd;                             /* a memfd that came with it, or -1 */
} msg_t;

struct tfi_ring {
    tf_client_t *c;
    int sock;
    tfx_shm_t map;                      /* the slots, read-only */
    unsigned nslots;
    uint64_t slot_bytes;
    atomic_int refs;
    pthread_t reader;
    pthread_mutex_t lock;               /* the queue and broken */
    msg_t *head, *tail;
    int broken;                         /* the reader stopped: why says why */
    char why[200];
    uint64_t asked;
    atomic_uint_fast64_t to_free;       /* bit i: slot i + 1 was given back (tf_doc_free) and
                                         * FREE is still to be sent, with the next sync */
};

/* What a document mapping a slot or a memfd of its own holds until tf_doc_free. */
typedef struct {
    tfi_ring_t *r;
    unsigned slot;                      /* 1-based; 0: a memfd of its own (map) */
    tfx_shm_t map;
} slot_ref_t;

static void ring_unref(tfi_ring_t *r)
{
    if (atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    tfx_shm_close(&r->map);
    close(r->sock);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static int send_msg(int sock, const tfp_sf_t *m)
{
    uint8_t buf[TFP_SF_MAX];
    tfp_err_t err;
    size_t len = tfp_sf_encode(m, buf, sizeof buf, &err);
    return len && tfx_shm_send(sock, buf, len, NULL, 0, &err) == TFP_OK ? 0 : -1;
}

/* Receives one message within ms: 0 with *m (and *fd, or -1), or -1 with why. */
static int recv_msg(int sock, long ms, tfp_sf_t *m, int *fd, char *why, size_t why_size)
{
    struct pollfd p = {.fd = sock, .events = POLLIN};
    *fd = -1;
    int n = poll(&p, 1, (int)ms);
    if (n <= 0) {
        snprintf(why, why_size, n == 0 ? "no answer over the ring's socket within %ld ms"
                                       : "poll on the ring's socket failed", ms);
        return -1;
    }
    uint8_t buf[TFP_SF_MAX];
    size_t len, nfds;
    tfp_err_t err;
    if (tfx_shm_recv(sock, buf, sizeof buf, &len, fd, 1, &nfds, &err) != TFP_OK || len == 0) {
        snprintf(why, why_size, "%s", len == 0 ? "the daemon closed the ring" : err.msg);
        return -1;
    }
    if (nfds == 0)
        *fd = -1;
    if (tfp_sf_decode(buf, len, m, &err) != TFP_OK) {
        snprintf(why, why_size, "a bad message on the ring: %s", err.msg);
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        return -1;
    }
    return 0;
}

/* A request and its REPLY (seq 1, 2, ...): 0 with *r (and *fd), or -1 with why. */
static int ask(int sock, tfp_sf_t *q, uint64_t seq, tfp_sf_t *r, int *fd, char *why,
               size_t why_size)
{
    q->seq = seq;
    if (send_msg(sock, q) != 0) {
        snprintf(why, why_size, "cannot send over the ring's socket");
        return -1;
    }
    if (recv_msg(sock, RING_TIMEOUT_MS, r, fd, why, why_size) != 0)
        return -1;
    if (r->op != TFP_SF_REPLY || r->seq != seq) {
        snprintf(why, why_size, "the daemon answered out of turn");
        if (*fd >= 0)
            close(*fd);
        return -1;
    }
    if (r->status != TFP_OK) {
        snprintf(why, why_size, "%s", r->str);
        if (*fd >= 0)
            close(*fd);
        return -1;
    }
    return 0;
}

static void *reader(void *arg)
{
    tfi_ring_t *r = arg;
    for (;;) {
        msg_t *x = calloc(1, sizeof *x);
        char why[200] = "";
        if (!x)
            snprintf(why, sizeof why, "out of memory");
        else if (recv_msg(r->sock, -1, &x->m, &x->fd, why, sizeof why) == 0 &&
                 x->m.op != TFP_SF_ITEM) {
            snprintf(why, sizeof why, "the daemon sent something other than an ITEM");
            if (x->fd >= 0)
                close(x->fd);
        }
        pthread_mutex_lock(&r->lock);
        if (why[0]) {
            r->broken = 1;
            snprintf(r->why, sizeof r->why, "%s", why);
        } else {
            if (r->tail)
                r->tail->next = x;
            else
                r->head = x;
            r->tail = x;
        }
        pthread_mutex_unlock(&r->lock);
        tfi_wakeup(r->c);
        if (why[0]) {
            free(x);
            return NULL;
        }
    }
}

tf_status_t tfi_ring_open(tf_client_t *c, origin_t *o, const char *feed, const char *dev,
                          const char *consumer, unsigned nslots, tfi_ring_t **out, char *why,
                          size_t why_size)
{
    char name[TFP_UP_MAX_SHM_SOCKET + 1], token[TFP_UP_TOKEN_LEN + 1];
    tfp_err_t err;
    if (tfi_shm_token(o, name, token, why, why_size) != 0)
        return TF_EIO;
    int sock = tfx_shm_connect(name, &err);
    if (sock < 0) {
        snprintf(why, why_size, "%s", err.msg);
        return TF_EIO;
    }
    tfp_sf_t q, a;
    int fd = -1;
    memset(&q, 0, sizeof q);
    q.op = TFP_SF_HELLO;
    q.str_len = TFP_UP_TOKEN_LEN;
    memcpy(q.str, token, sizeof token);
    if (ask(sock, &q, 1, &a, &fd, why, why_size) != 0)
        goto fail_sock;
    if (fd >= 0)
        close(fd);
    memset(&q, 0, sizeof q);
    q.op = TFP_SF_RING;
    int n = snprintf(q.str, sizeof q.str, "%s/%s/%s", feed, dev, consumer);
    q.str_len = n > 0 ? (size_t)n : 0;
    q.a = nslots;
    if (ask(sock, &q, 2, &a, &fd, why, why_size) != 0)
        goto fail_sock;
    /* Trust nothing the daemon said about the memory: its own size and seals. */
    size_t size;
    if (fd < 0 || a.a == 0 || a.a > TFP_SF_MAX_SLOTS || a.b == 0 || a.b > TFP_SF_MAX_SLOT ||
        tfx_shm_check(fd, (size_t)(a.a * a.b), TFX_SHM_SEAL_SIZE | TFX_SHM_SEAL_WRITERS, &size,
                      &err) != TFP_OK) {
        snprintf(why, why_size, "a bad ring: %s", fd < 0 ? "no memfd" : err.msg);
        if (fd >= 0)
            close(fd);
        goto fail_sock;
    }
    tfi_ring_t *r = calloc(1, sizeof *r);
    if (!r) {
        close(fd);
        snprintf(why, why_size, "out of memory");
        goto fail_sock;
    }
    if (tfx_shm_map(fd, size, TFX_SHM_MAP_READ, &r->map, &err) != TFP_OK) {
        free(r);
        snprintf(why, why_size, "%s", err.msg);
        goto fail_sock;
    }
#ifdef MADV_POPULATE_READ
    (void)madvise(r->map.p, r->map.size, MADV_POPULATE_READ);  /* faulted once, here */
#endif
    r->c = c;
    r->sock = sock;
    r->nslots = (unsigned)a.a;
    r->slot_bytes = a.b;
    atomic_init(&r->refs, 1);
    pthread_mutex_init(&r->lock, NULL);
    if (pthread_create(&r->reader, NULL, reader, r) != 0) {
        snprintf(why, why_size, "no thread for the ring");
        ring_unref(r);
        return TF_ENOMEM;
    }
    *out = r;
    return TF_OK;
fail_sock:
    close(sock);
    return TF_EIO;
}

/* tf_doc_free of an item's document: the slot goes back (or its own memfd is unmapped). Its
 * FREE goes with the feed's next sync, in one send with the ACK and CREDIT that follow a
 * release: a datagram wakes tfetchd's thread, ~19 us on this VM, and the consumer paid three
 * of them between two steps. After a close it is never sent, as it should be. */
static void slot_release(void *arg)
{
    slot_ref_t *x = arg;
    if (x->slot) {
        atomic_fetch_or(&x->r->to_free, (uint_fast64_t)1 << (x->slot - 1));
    } else {
        tfx_shm_close(&x->map);
    }
    ring_unref(x->r);
    free(x);
}

/* The document of an OK item m (fd: its own memfd, or -1 for a slot): TF_OK and *out, or a
 * status with why. */
static tf_status_t item_doc(tfi_ring_t *r, const tfp_sf_t *m, int fd, tf_doc_t **out,
                            char *why, size_t why_size)
{
    tfp_err_t err;
    slot_ref_t *x = calloc(1, sizeof *x);
    if (!x) {
        if (fd >= 0)
            close(fd);
        snprintf(why, why_size, "out of memory");
        return TF_ENOMEM;
    }
    x->map = (tfx_shm_t)TFX_SHM_NONE;
    const uint8_t *p;
    if (fd < 0) {
        /* In a slot: it starts at one and ends inside it. */
        uint64_t slot = m->a / r->slot_bytes;
        if (m->a % r->slot_bytes || slot >= r->nslots || m->b > r->slot_bytes) {
            free(x);
            snprintf(why, why_size, "an item at %llu+%llu is not inside one slot",
                     (unsigned long long)m->a, (unsigned long long)m->b);
            return TF_EPROTO;
        }
        x->slot = (unsigned)slot + 1;
        p = r->map.p + m->a;
    } else {
        size_t size;
        int ok = tfx_shm_check(fd, 1, TFX_SHM_SEAL_WRITE, &size, &err) == TFP_OK &&
                 tfp_sf_check_span(m->a, m->b, size, &err) == TFP_OK;
        if (!ok)
            close(fd);                      /* else tfx_shm_map takes it, failing or not */
        /* An item in a memfd of its own is this document's alone: copy-on-write, as a
         * same-host get's. */
        if (!ok || tfx_shm_map(fd, size, TFX_SHM_MAP_COPY_ON_WRITE, &x->map, &err) != TFP_OK) {
            free(x);
            snprintf(why, why_size, "a bad item memfd: %.200s", err.msg);
            return TF_EPROTO;
        }
        p = x->map.p + m->a;
    }
    tfp_doc_t *d = NULL;
    if (tfp_st_decode(p, (size_t)m->b, NULL, &d, &err) != TFP_OK ||
        tfi_doc_wrap(d, NULL, out) != TF_OK) {
        tfp_doc_free(d);
        snprintf(why, why_size, "a bad item: %.200s", d ? "out of memory" : err.msg);
        x->r = r;
        atomic_fetch_add(&r->refs, 1);
        slot_release(x);                    /* the slot is the daemon's again */
        return d ? TF_ENOMEM : TF_EPROTO;
    }
    x->r = r;
    atomic_fetch_add(&r->refs, 1);
    (*out)->release = slot_release;
    (*out)->release_arg = x;
    /* An item in its own memfd is copy-on-write, the caller's to write. One in a slot is
     * not: the ring is mapped read-only (the daemon writes it; a private copy of a slot's
     * page would go stale when the slot is reused). */
    (*out)->owns_bytes = x->slot == 0;
    return TF_OK;
}

int tfi_ring_take(tfi_ring_t *r, tfi_ring_msg_t *out)
{
    pthread_mutex_lock(&r->lock);
    msg_t *x = r->head;
    if (x) {
        r->head = x->next;
        if (!r->head)
            r->tail = NULL;
    }
    int broken = r->broken;
    pthread_mutex_unlock(&r->lock);
    memset(out, 0, sizeof *out);
    if (!x) {
        if (!broken)
            return 0;
        out->kind = TFI_RING_BROKEN;
        out->status = TF_EIO;
        snprintf(out->why, sizeof out->why, "the ring failed: %s", r->why);
        return 1;
    }
    const tfp_sf_t *m = &x->m;
    tfi_reply_t *rp = &out->reply;
    if (m->status == TFP_EDONE) {
        out->kind = TFI_RING_DONE;
        out->status = TF_EDONE;
    } else if (m->status != TFP_OK) {
        out->kind = TFI_RING_ERROR;
        out->status = tfi_from_proto((tfp_status_t)m->status);
        snprintf(out->why, sizeof out->why, "%.250s", m->str);
    } else {
        tfp_err_t err;
        uint64_t seq = 0, round = 0, generation = 0;
        (void)tfp_sf_item_get(m, &seq, &round, &generation, &err);  /* checked */
        tfp_answer_set_u64(&rp->answer, TFP_AF_GENERATION, generation);
        out->kind = TFI_RING_GENERATION;
        if (m->lease) {
            tfp_answer_set_u64(&rp->answer, TFP_AF_POSITION, m->lease);
            tfp_answer_set_u64(&rp->answer, TFP_AF_SEQ, seq);
            tfp_answer_set_u64(&rp->answer, TFP_AF_ROUND, round);
            out->kind = TFI_RING_ITEM;
            out->status = item_doc(r, m, x->fd, &out->doc, out->why, sizeof out->why);
            x->fd = -1;                     /* item_doc took it */
            if (out->status != TF_OK)
                out->kind = TFI_RING_ERROR;
        }
    }
    if (x->fd >= 0)
        close(x->fd);
    free(x);
    return 1;
}

uint64_t tfi_ring_asked(const tfi_ring_t *r) { return r->asked; }

/* Appends one message without a string (FIXED bytes) to a sync's batch. */
static int batch_add(uint8_t (*buf)[TFP_SF_FIXED], size_t *len, size_t *n, uint8_t op,
                     uint64_t a, uint64_t b)
{
    tfp_sf_t m;
    tfp_err_t err;
    memset(&m, 0, sizeof m);
    m.op = op;
    m.a = a;
    m.b = b;
    if (!(len[*n] = tfp_sf_encode(&m, buf[*n], sizeof buf[*n], &err)))
        return -1;
    (*n)++;
    return 0;
}

int tfi_ring_sync(tfi_ring_t *r, uint64_t credit, uint64_t ack, uint64_t generation)
{
    enum { MAX = TFP_SF_MAX_SLOTS + 2 };
    uint8_t buf[MAX][TFP_SF_FIXED];
    size_t len[MAX], n = 0;
    int rc = 0;
    uint_fast64_t bits = atomic_exchange(&r->to_free, 0);
    for (unsigned i = 0; bits && rc == 0; i++, bits >>= 1)
        if (bits & 1)
            rc = batch_add(buf, len, &n, TFP_SF_FREE, i + 1, 0);
    if (ack && rc == 0)
        rc = batch_add(buf, len, &n, TFP_SF_ACK, ack, generation);
    if (credit > r->asked && rc == 0)
        rc = batch_add(buf, len, &n, TFP_SF_CREDIT, credit, 0);
    if (rc != 0)
        return -1;
    if (n == 0)
        return 0;
    const void *bufs[MAX];
    tfp_err_t err;
    for (size_t k = 0; k < n; k++)
        bufs[k] = buf[k];
    if (tfx_shm_send_many(r->sock, bufs, len, n, &err) != TFP_OK)
        return -1;
    if (credit > r->asked)
        r->asked = credit;
    return 0;
}

void tfi_ring_close(tfi_ring_t *r)
{
    if (!r)
        return;
    shutdown(r->sock, SHUT_RDWR);           /* the reader sees the end; the daemon detaches */
    pthread_join(r->reader, NULL);
    for (msg_t *x = r->head, *next; x; x = next) {
        next = x->next;
        if (x->fd >= 0)
            close(x->fd);
        free(x);
    }
    r->head = r->tail = NULL;
    ring_unref(r);
}
