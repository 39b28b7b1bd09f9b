/* ucx_common.h - what tfetch's UCX server and client sides both set up and run: a context, a
 * worker in single-thread mode with one active-message handler, the event fd a progress
 * thread sleeps on, and the progress loop itself.
 *
 * Open and close run on the thread that creates the worker; tfx_ucx_loop_run is the body of
 * each side's progress thread, the only thread that then touches the worker. Other threads
 * reach the loop only through ucp_worker_signal (which ends its sleep) and the side's hooks.
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
    int epfd;                       /* an epoll set holding efd */
} tfx_ucx_base_t;

/* Creates context and worker (name shows in UCX's logs) and registers cb for am_id. */
tfp_status_t tfx_ucx_base_open(tfx_ucx_base_t *b, const char *name, unsigned am_id,
                               ucp_am_recv_callback_t cb, void *arg, tfp_err_t *err);
void tfx_ucx_base_close(tfx_ucx_base_t *b);
/* Arms the worker and sleeps up to timeout_ms for an event (returns at once if busy). */
void tfx_ucx_base_sleep(tfx_ucx_base_t *b, int timeout_ms);
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
    void *arg;
} tfx_ucx_loop_t;

/* The progress loop: progress the worker until it has nothing, run the side's work; after
 * work spin TFX_UCX_SPIN_NS, then arm the worker and sleep on its event fd (a signal or
 * traffic wakes it) up to sleep_ms. Returns once stopping and (drained or drain_max_ns
 * passed), checked after every pass, so a stop is seen within one pass of its signal. */
void tfx_ucx_loop_run(tfx_ucx_base_t *b, const tfx_ucx_loop_t *l);

#endif
