/* ucx_common.h - what tfetch's UCX server and client sides both set up and run: a context, a
 * worker in single-thread mode with one active-message handler, the event fd a progress
 * thread sleeps on, and the progress loop itself.
 *
 * Open and close run on the thread that creates the worker; tfx_ucx_loop_run is the body of
 * each side's progress thread, the only thread that then touches the worker (it may even
 * replace it: tfx_ucx_base_renew), unless the side lends it: with the loop's hold and let_go
 * hooks another thread may drive the worker between two passes (the client's blocking
 * calls do, ucx_client.c), and the loop then waits on the wake fd alone until woken. Other
 * threads reach the loop only through tfx_ucx_base_wake (our own eventfd, which ends its
 * sleep) and the side's hooks.
 */
#ifndef TFX_UCX_COMMON_H
#define TFX_UCX_COMMON_H

#include <stdint.h>
#include <ucp/api/ucp.h>
#include "proto/status.h"

typedef struct {
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd;                        /* the worker's event fd */
    int wakefd;                     /* an eventfd other threads write to wake the loop */
    int epfd;                       /* an epoll set holding efd and wakefd */
    unsigned am_id;                 /* the handler, kept for tfx_ucx_base_renew */
    ucs_thread_mode_t thread_mode;  /* the worker's, kept for tfx_ucx_base_renew */
    ucp_am_recv_callback_t am_cb;
    void *am_arg;
    size_t max_am_header;           /* the largest AM header the worker sends (0: unknown) */
    char memory_types[64];          /* what this UCX can move, asked at run time: "host",
                                     * or e.g. "host,cuda,cuda-managed" for a CUDA-enabled
                                     * build (Debian's UCX 1.13 knows host memory only) */
} tfx_ucx_base_t;

/* The memory types ctx supports (ucp_context_query), comma-separated in out: "host" when
 * the query fails. Any thread. */
void tfx_ucx_memory_types(ucp_context_h ctx, char *out, size_t size);

/* What a side asks of UCX's configuration beyond the environment's (NULL members: as
 * configured). */
typedef struct {
    int no_shm;                     /* no shared-memory transports (UCX_TLS=^sm): a peer of
                                     * another uid cannot attach ours, nor we its (sysv shmat,
                                     * posix, cma all need the same uid or ptrace rights);
                                     * ignored when UCX_TLS is set in the environment */
    const char *tcp_ports;          /* "LO-HI": the tcp transport listens on a port in that
                                     * range (UCX_TCP_PORT_RANGE), so a firewall can open it */
} tfx_ucx_tune_t;

/* Creates context and worker (name shows in UCX's logs) and registers cb for am_id. The
 * worker is SINGLE-threaded, or with serialized set SERIALIZED (several threads drive it,
 * one at a time, handing it over under a lock of their own: the client). tune may be NULL. */
tfp_status_t tfx_ucx_base_open(tfx_ucx_base_t *b, const char *name, unsigned am_id,
                               ucp_am_recv_callback_t cb, void *arg, int serialized,
                               const tfx_ucx_tune_t *tune, tfp_err_t *err);
void tfx_ucx_base_close(tfx_ucx_base_t *b);
/* On the progress thread: destroys the worker (every endpoint and operation on it goes) and
 * makes a new one with the same handler; its address differs. TFP_OK, or err set (the base
 * then has no worker: b->worker is NULL). */
tfp_status_t tfx_ucx_base_renew(tfx_ucx_base_t *b, tfp_err_t *err);
/* Any thread: ends the loop's sleep. */
void tfx_ucx_base_wake(tfx_ucx_base_t *b);
/* Arms the worker and sleeps up to timeout_ms for an event or a wake. Returns 1 at once if
 * the worker says it has events (arm: BUSY), else 0 after the sleep. */
int tfx_ucx_base_sleep(tfx_ucx_base_t *b, int timeout_ms);
/* Sleeps up to timeout_ms on the wake fd alone (not the worker's: another thread drives it
 * and sees its events), then drains it. */
void tfx_ucx_base_park(tfx_ucx_base_t *b, int timeout_ms);
/* After work, a progress loop keeps polling this long before it sleeps: waking a sleeping
 * thread costs tens of microseconds here, more than a whole small round trip over shared
 * memory (1-3 us), so replies that follow quickly are caught without a wake-up. */
#define TFX_UCX_SPIN_NS 200000L

/* One side's part in the progress loop. All hooks run on the progress thread. */
typedef struct {
    /* The side's own work after UCX's (queues, commands, deadlines); returns how much it did. */
    unsigned (*run)(void *arg);
    /* Non-zero once the side was asked to stop (another thread set it, then signalled). */
    int (*stopping)(void *arg);
    /* Once stopping: non-zero when nothing is left that the loop must finish first. */
    int (*drained)(void *arg);
    /* Once stopping, the loop ends after this long even if not drained (sends to a peer that
     * died may never complete); 0: wait for drained. */
    uint64_t drain_max_ns;
    /* The longest sleep: how late, at worst, run() sees a deadline of its own. */
    int sleep_ms;
    /* The worker is wedged: for TFX_UCX_WEDGED_MS it said it had events (ucp_worker_arm:
     * BUSY) while progress found none. Seen when a peer on this host died in the middle of
     * writing into the worker's shared-memory FIFO (UCX 1.13): the slot it took is never
     * filled, and nothing behind it is ever read. The side replaces the worker
     * (tfx_ucx_base_renew) or gives up on it. Optional; without it the loop only stops
     * spinning (it sleeps 1 ms at a time). */
    void (*wedged)(void *arg);
    /* Optional, both or neither: the worker is lent to other threads between passes. hold
     * runs before each pass: 1 when the loop may touch the worker until its let_go, 0 when
     * another thread has it (or wants it): the loop then parks (tfx_ucx_base_park, up to
     * sleep_ms) and tries again; the lender wakes it when it hands back work. let_go runs
     * after each pass, and before the loop sleeps on an armed worker. */
    int (*hold)(void *arg);
    void (*let_go)(void *arg);
    /* Optional: non-zero while the side has sends UCX has not completed. The loop then does
     * not sleep on the worker's event fd as long as usual (TFX_UCX_SEND_YIELD_NS). */
    int (*sending)(void *arg);
    void *arg;
} tfx_ucx_loop_t;
/* A send to a peer on this host may wait for room in the peer's shared-memory FIFO (a large
 * body whose pieces go as fragments), and UCX 1.13 signals no event when the peer makes
 * room: a thread that slept on the worker's event fd would sleep its whole timeout (10 ms
 * for a blocking call, 50 ms for the client's loop) with the send stalled, and on a busy host
 * it did, again and again (bench/README.md, "Feeds: a push stalled"). While a side has sends
 * out it yields the CPU instead of sleeping (the peer may need this very core) for this long
 * after its last work, and after that sleeps 1 ms at a time. */
#define TFX_UCX_SEND_YIELD_NS 2000000L
#define TFX_UCX_WEDGED_MS 500

/* The progress loop: progress the worker until it has nothing, run the side's work; after
 * work spin TFX_UCX_SPIN_NS, then arm the worker and sleep on its event fd and the wake fd
 * (traffic or tfx_ucx_base_wake ends it) up to sleep_ms; a worker that stays wedged goes to
 * the side's wedged hook. Returns once stopping and (drained or drain_max_ns
 * passed), checked after every pass, so a stop is seen within one pass of its signal. */
void tfx_ucx_loop_run(tfx_ucx_base_t *b, const tfx_ucx_loop_t *l);

/* Where a rendezvous body, or one part of a body in parts (proto/ucxframe.h), lands: the
 * descriptor whose receive is to start (len bytes at off in the body), and the next part's,
 * arrived while the one before it still lands. A sender of parts sends one after the other,
 * so one waits at most; a second is the peer's fault. The worker owner's. */
typedef struct {
    void *desc;
    size_t len;
    uint64_t off;
    void *next_desc;
    size_t next_len;
    uint64_t next_off;
} tfx_ucx_landing_t;

/* A part's rendezvous arrived: 1 when it is the one to receive now, 0 when it waits for the
 * one before it (busy: still landing), -1 when one waits already. */
static inline int tfx_ucx_landing_arrive(tfx_ucx_landing_t *l, int busy, void *desc,
                                         size_t len, uint64_t off)
{
    if (busy && l->next_desc)
        return -1;
    if (busy) {
        l->next_desc = desc;
        l->next_len = len;
        l->next_off = off;
        return 0;
    }
    l->desc = desc;
    l->len = len;
    l->off = off;
    return 1;
}

/* The one before landed: 1 when the waiting part is now the one to receive, 0 when none
 * waits. */
static inline int tfx_ucx_landing_advance(tfx_ucx_landing_t *l)
{
    if (!l->next_desc)
        return 0;
    l->desc = l->next_desc;
    l->len = l->next_len;
    l->off = l->next_off;
    l->next_desc = NULL;
    return 1;
}

#endif
