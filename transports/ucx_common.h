/* ucx_common.h - what tfetch's UCX server and client sides both set up: a context, a worker
 * in single-thread mode with one active-message handler, and the event fd a progress thread
 * sleeps on. Used by the thread that will own the worker.
 */
#ifndef TFX_UCX_COMMON_H
#define TFX_UCX_COMMON_H

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

#endif
