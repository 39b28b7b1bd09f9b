/* shm_server.h - the same-host shared-memory transport's side of the request interface
 * (transports/req.h): one operation asked over the shm socket (a GET, or a PUT's COMMIT of
 * a lent buffer) run through the same handlers as HTTP and UCX, on the calling thread (the
 * shm socket's, daemon/shm.c), so the router decides authentication and rights, the tensor
 * handlers the conditions, TTL and ETag, and the metrics and access log see it as "shm".
 *
 * What differs is the body. A PUT's document arrives already in a sealed memfd the daemon
 * lent (ALLOC): the request lends it to the handlers as they accept a body
 * (tfx_req_accept_body_into's lent buffer) and a handler that stores it takes the memfd over
 * (tfx_req_take_memfd). An answer's body leaves as a memfd: the body's own when it knows its
 * backing (tfx_body_t.share: a stored document's), else a sealed copy of its bytes. The
 * memfd's hold goes to the caller, which keeps it as a lease until the peer releases it
 * (the lending policy, with its bound, is daemon/shm.c's: admit).
 *
 * Threads: any one thread per call; the handlers run on it. A handler may not wait (a GET
 * over shm has no ?wait; a call to a worker route declines, tfx_req_decline): a request that
 * suspends without being resumed at once is answered 500.
 */
#ifndef TFX_SHM_SERVER_H
#define TFX_SHM_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include "proto/answer.h"
#include "proto/httpcond.h"
#include "proto/shmframe.h"
#include "transports/req.h"
#include "transports/shm.h"

typedef struct {
    /* in: a PUT's document at offset 0 of the sealed memfd body (fd -1: none), body_len
     * bytes; taken by the call whatever happens (the store keeps it, or it is closed) */
    tfx_shm_t body;
    size_t body_len;
    /* in: before an answer's body of len bytes is lent to the peer: TFP_OK to lend it (and
     * the caller counts it), else the status to answer with instead, msg saying why */
    tfp_status_t (*admit)(void *arg, uint64_t len, char *msg, size_t msg_size);
    void *admit_arg;
    /* out: the answer */
    unsigned http;                  /* the HTTP-equivalent status */
    tfp_status_t code;              /* TFP_OK, or the failure (msg says why) */
    int declined;                   /* code TFP_ENOTIMPL: nothing ran (tfx_req_decline: the
                                     * handler would have waited); the client may retry it
                                     * over another transport */
    char msg[TFP_SF_MAX_MSG + 1];
    char etag[TFP_ETAG_LEN];        /* the answer's ETag; "" none */
    tfp_answer_t ans;               /* all its typed fields (the server's time included) */
    int fd;                         /* the body's memfd (borrowed until hold runs); -1 none */
    size_t offset, len;             /* the body in it */
    void (*hold)(void *arg);        /* with fd: the caller's to run once the peer is done */
    void *hold_arg;
} tfx_shm_call_t;

/* Runs op (op_err: why the message could not be made sense of, NULL when it could) from the
 * peer named peer through h, and fills call's answer. */
void tfx_shm_call(const tfx_handlers_t *h, const tfp_op_t *op, const tfp_op_err_t *op_err,
                  const char *peer, tfx_shm_call_t *call);

#endif
