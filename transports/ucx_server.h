/* ucx_server.h - tfetchd's UCX side: requests arriving as UCX active messages, served by the
 * same handlers as HTTP (transports/req.h).
 *
 * A client that upgraded (POST /v1/upgrade) connects to this UCX worker's address and must first
 * send HELLO with the one-time token it was given; messages from an endpoint that has not
 * done so are dropped and the endpoint is closed. A request is an active message whose
 * header is a tfp_uf frame (proto/ucxframe.h), read straight into the request's operation
 * (no path or headers), and whose data is the safetensors document; answers and failures
 * are REPLY frames (status, HTTP-equivalent status, message);
 * large bodies arrive by rendezvous straight into the buffer the handlers accept, and answers
 * are sent from the handlers' memory (a stored blob) without copying.
 *
 * A client that goes away takes its requests with it: a failed endpoint (UCX's error, or on
 * one host, where UCX has no peer failure detection, the death of the client's process,
 * checked every 100 ms) ends every request on it unanswered, as a closed HTTP connection
 * does: finish runs (the store reservation and body memory go back), suspended requests are
 * dropped, and sends in flight release what they held.
 *
 * Threads: one progress thread owns the UCX worker and runs the handlers of UCX requests;
 * tfx_req_resume from any thread queues the request back to it.
 *
 * Built without UCX (no HAVE_UCX), the same calls exist as stubs below: tfx_ucx_start says
 * so and returns NULL, and the rest take that NULL. The daemon needs no #ifdef of its own.
 */
#ifndef TFX_UCX_SERVER_H
#define TFX_UCX_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include "proto/status.h"
#include "transports/req.h"

/* Active message ids. */
#define TFX_UCX_AM_REQUEST 11
#define TFX_UCX_AM_REPLY 12

typedef struct tfx_ucx tfx_ucx_t;

typedef struct {
    /* Checks a HELLO: the token and the identity ("boot_id netns") the client claims.
     * 0 to accept, and *peer_pid set to the client's pid when it shares this host (the pid
     * it gave when it asked for the token; 0: unknown or another host); otherwise fills why.
     * The credential the token was issued to (cred and token_hash of *who; zeroed first)
     * is kept with the endpoint and copied into every request's op->who, so the handlers
     * authenticate each request over UCX as they do over HTTP. Runs on the progress thread. */
    int (*verify_hello)(const char *token, const char *identity, long *peer_pid,
                        tfp_op_who_t *who, char *why, size_t why_size, void *arg);
    void *verify_arg;
    uint64_t max_body;              /* the largest request document (larger: 413 at once) */
    const char *tcp_ports;          /* "LO-HI" for the tcp transport's listener; NULL: any */
    uint64_t part_wait_ms;          /* a body in parts whose next part is not in by then is
                                     * answered 408 (0: 60 s) */
} tfx_ucx_config_t;

typedef struct {
    uint64_t hellos, hellos_refused, dropped, requests;
    uint64_t renewals;              /* workers replaced because they wedged */
    uint64_t byes;                  /* endpoints their clients closed with BYE */
    uint64_t prefixed;              /* requests whose body's first bytes came in the header */
    uint64_t bad_parts;             /* PART frames out of place (their endpoint failed) */
} tfx_ucx_stats_t;

#ifdef HAVE_UCX
#define TFX_UCX_BUILT 1                     /* this build has the UCX transport */

/* Creates the UCX context and worker and starts the progress thread. NULL with err set when
 * UCX cannot start (the daemon then serves HTTP only and says why). */
tfx_ucx_t *tfx_ucx_start(const tfx_ucx_config_t *cfg, const tfx_handlers_t *h, tfp_err_t *err);
/* The UCX worker address for a client: all transports (same host) or network ones only.
 * malloc'd. 0, or -1. */
int tfx_ucx_address(tfx_ucx_t *u, int net_only, uint8_t **addr, size_t *len);
/* Refuses new requests (503); those in flight go on. */
void tfx_ucx_quiesce(tfx_ucx_t *u);
unsigned tfx_ucx_inflight(tfx_ucx_t *u);
/* The memory types this server's UCX can move ("host", "host,cuda,..."; ucx_common.h). */
const char *tfx_ucx_server_memory(const tfx_ucx_t *u);
void tfx_ucx_stats(tfx_ucx_t *u, tfx_ucx_stats_t *st);
/* Stops the progress thread and frees everything. No request may be suspended. */
void tfx_ucx_stop(tfx_ucx_t *u);

#else  /* built without UCX: what the daemon calls, doing nothing */
#define TFX_UCX_BUILT 0

static inline tfx_ucx_t *tfx_ucx_start(const tfx_ucx_config_t *cfg, const tfx_handlers_t *h,
                                       tfp_err_t *err)
{
    (void)cfg;
    (void)h;
    tfp_err_set(err, TFP_ENOTIMPL, "this tfetchd was built without UCX");
    return NULL;
}
static inline int tfx_ucx_address(tfx_ucx_t *u, int net_only, uint8_t **addr, size_t *len)
{
    (void)u;
    (void)net_only;
    *addr = NULL;
    *len = 0;
    return -1;
}
static inline void tfx_ucx_quiesce(tfx_ucx_t *u) { (void)u; }
static inline unsigned tfx_ucx_inflight(tfx_ucx_t *u) { (void)u; return 0; }
static inline const char *tfx_ucx_server_memory(const tfx_ucx_t *u) { (void)u; return NULL; }
static inline void tfx_ucx_stats(tfx_ucx_t *u, tfx_ucx_stats_t *st)
{
    (void)u;
    *st = (tfx_ucx_stats_t){0, 0, 0, 0, 0, 0, 0};
}
static inline void tfx_ucx_stop(tfx_ucx_t *u) { (void)u; }

#endif

#endif
