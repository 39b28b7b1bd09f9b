/* ucx_client.h - the client side of tfetch's UCX transport.
 *
 * A tfx_ucxc_t owns a UCX context, a worker and the progress thread that drives them.
 * The caller's thread hands it work (connect, requests) through a queue and gets completions
 * back through another queue, announced by a wake-up function it supplies (libtfetch passes
 * curl_multi_wakeup, so one poll loop sleeps on both HTTP and UCX). A connection is one UCX
 * endpoint to a server's worker address, admitted by a HELLO carrying the upgrade token. A
 * request is one active message (a tfp_uf frame plus the body segments, sent without
 * concatenating them); its reply lands in a buffer the client allocates (rendezvous for large
 * ones). A request that does not complete in time breaks its connection: every request on it
 * fails (so the caller can retry over HTTP) and the endpoint is closed.
 *
 * A blocking caller need not wait for the progress thread: a request started with
 * TFX_UCXC_DRIVEN is sent by tfx_ucxc_drive on the caller's thread, which takes the worker
 * from the progress thread, progresses it (busily, then asleep on its event fd) until the
 * reply is in or a bounded wait ends, and hands it back: no thread hand-off on the way out or back. Completions of other
 * requests it sees on the way are queued for tfx_ucxc_next as always.
 *
 * Threads: any one thread at a time calls these functions for a given tfx_ucxc_t (the
 * thread driving the client); the progress thread is internal.
 */
#ifndef TFX_UCX_CLIENT_H
#define TFX_UCX_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include "proto/status.h"
#include "proto/ucxframe.h"

typedef struct tfx_ucxc tfx_ucxc_t;
typedef struct tfx_ucxc_conn tfx_ucxc_conn_t;
typedef struct tfx_ucxc_req tfx_ucxc_req_t;

/* Starts the context, worker and progress thread. wake(arg) is called from the progress
 * thread whenever a completion is queued. no_shm: without UCX's shared-memory transports
 * (for a server of another uid, which could not attach them). NULL with err set if UCX
 * cannot start. tfx_ucxc_new is tfx_ucxc_new_tuned with no_shm 0. */
tfx_ucxc_t *tfx_ucxc_new(void (*wake)(void *arg), void *wake_arg, tfp_err_t *err);
tfx_ucxc_t *tfx_ucxc_new_tuned(void (*wake)(void *arg), void *wake_arg, int no_shm,
                               tfp_err_t *err);
/* The no_shm it was started with. */
int tfx_ucxc_no_shm(const tfx_ucxc_t *u);
/* Closes every connection (requests fail with TFP_EBUSY... and are completed), stops the
 * thread, frees. Completions not yet taken are dropped: call after draining. NULL: no-op.
 * Bounded: a thread that has not stopped within 0.5 s (stuck inside UCX) is left to free
 * everything itself; it wakes and completes nothing any more. Endpoint closes get 0.2 s
 * more to finish before the worker goes. */
void tfx_ucxc_free(tfx_ucxc_t *u);
/* The memory types this client's UCX can move ("host", "host,cuda,..."; ucx_common.h). */
const char *tfx_ucxc_memory(const tfx_ucxc_t *u);

/* Connects to a server worker address and presents token (HELLO with identity "boot_id
 * netns"); the server has timeout_ms to answer. same_host selects UCX's error handling: none
 * on one host (PEER mode makes UCX fall back to TCP there), peer failure detection across
 * hosts. Blocks until the answer: TFP_OK and *out, or a status with why filled (refused
 * token, unreachable, timeout) and no connection. */
tfp_status_t tfx_ucxc_connect(tfx_ucxc_t *u, const uint8_t *addr, size_t addr_len,
                              int same_host, const char *token, const char *identity,
                              long timeout_ms, tfx_ucxc_conn_t **out, char *why,
                              size_t why_size);
/* tfx_ucxc_connect that waits only up to confirm_ms (-1: the whole timeout) for the
 * answer: TFP_OK and *out when it came; TFP_EAGAIN and *out, still connecting, when it did
 * not yet (the caller settles it later with tfx_ucxc_conn_settle, or closes it); else a
 * failure and no connection. */
tfp_status_t tfx_ucxc_connect_start(tfx_ucxc_t *u, const uint8_t *addr, size_t addr_len,
                                    int same_host, const char *token, const char *identity,
                                    long confirm_ms, long timeout_ms, tfx_ucxc_conn_t **out,
                                    char *why, size_t why_size);
/* A connection tfx_ucxc_connect left connecting: waits up to wait_ms (0: only looks) for
 * its HELLO's answer. TFP_OK (usable), TFP_EAGAIN (still connecting: why says so), or a
 * failure with why (refused, or no answer by its deadline); a failed connection stays the
 * caller's to close. */
tfp_status_t tfx_ucxc_conn_settle(tfx_ucxc_conn_t *c, long wait_ms, char *why, size_t why_size);
/* 1 if the connection's server offered the feature word in its HELLO_ACK
 * (TFP_UF_FEATURE_*, proto/ucxframe.h). */
int tfx_ucxc_conn_feature(const tfx_ucxc_conn_t *c, const char *word);
/* What carries the connection, e.g. "ucx/sysv+cma" or "ucx/tcp" (borrowed). */
const char *tfx_ucxc_conn_transport(const tfx_ucxc_conn_t *c);
/* The server runs on this host as pid: the connection breaks within ~100 ms of its death
 * (UCX itself cannot tell on one host). */
void tfx_ucxc_conn_watch_pid(tfx_ucxc_conn_t *c, long pid);
/* 1 once the connection failed (a request timed out, the peer went away). */
int tfx_ucxc_conn_broken(const tfx_ucxc_conn_t *c);
/* Closes the connection; its unfinished requests complete with TFP_EBUSY. One whose HELLO
 * is still unanswered closes once that settles (0.3 s at most, not past its deadline;
 * tfx_ucxc_free waits for it): UCX 1.13 breaks, on both sides, when a tcp endpoint or its
 * worker goes mid-wireup (tfetchd died of it). */
void tfx_ucxc_conn_close(tfx_ucxc_conn_t *c);

/* Stall detection for requests started from now on (0 ms: off, the default): a request
 * whose reply has not begun within stall_ms (plus its frame's wait_ms) after its send
 * completed breaks its connection ("stalled"); a send or a reply body in flight gets its
 * size at max(rate, 1 MiB/s) more. Any thread. */
void tfx_ucxc_set_stall(tfx_ucxc_t *u, uint64_t rate, long stall_ms);
/* For requests started from now on: a reply body announced larger than max (0: no cap)
 * is not received; the request completes with transport_status TFP_ETOOBIG and why set,
 * the connection intact. Any thread. */
void tfx_ucxc_set_max_body(tfx_ucxc_t *u, uint64_t max);

/* Request sends UCX has not completed yet, but those of requests handed back early (a dead
 * peer's may never complete): while any, the client yields rather than sleeps. Any thread. */
unsigned tfx_ucxc_sends_out(tfx_ucxc_t *u);

/* Result of a completed request (valid until tfx_ucxc_req_free). */
typedef struct {
    tfp_status_t transport_status;  /* TFP_OK when a reply arrived; else why not */
    char why[256];                  /* transport failure text */
    tfp_uf_hdr_t reply;             /* the server's REPLY frame (status, HTTP status in http) */
    uint8_t *body;                  /* the reply body, or NULL: tfx_buf_free(body, body_cap) */
    size_t body_len;
    size_t body_cap;                /* 0: malloc'd (free() releases it too); else the capacity
                                     * of a reused tfx_buf_alloc buffer (transports/buf.h) */
    uint64_t bytes_sent;
    double seconds;
    double t_sent;                  /* seconds from the start: the request's send completed */
    double t_reply;                 /* ... its REPLY frame arrived when its body came after
                                     * it (rendezvous); 0: the body came with it */
} tfx_ucxc_result_t;

/* tfx_ucxc_start's flags. DRIVEN: the caller drives this request itself next
 * (tfx_ucxc_drive, before any other call for this tfx_ucxc_t); it is not sent until then. */
#define TFX_UCXC_DRIVEN 1
/* PARTS: to a server that takes them, a large body goes, and the reply's comes, in parts
 * (proto/ucxframe.h), so that tfx_ucxc_req_progress moves while they travel; otherwise, or
 * without this flag, each goes as one rendezvous. */
#define TFX_UCXC_PARTS 2
/* Starts a request: hdr (op, seq ignored: the client numbers requests), the body as nsegs
 * borrowed segments (they must live until completion), a timeout for the whole exchange.
 * On TFP_OK the request completes exactly once, later, and is returned by tfx_ucxc_next. */
tfp_status_t tfx_ucxc_start(tfx_ucxc_conn_t *c, const tfp_uf_hdr_t *hdr,
                            const void *const *segs, const size_t *lens, size_t nsegs,
                            long timeout_ms, int flags, void *user_data, tfx_ucxc_req_t **out);
/* Drives the worker on the calling thread for r (sending it first if DRIVEN; it returns at
 * the first part of a body in parts that goes or lands, for the caller to report): takes it from
 * the progress thread, progresses it busily for spin_us, then sleeping on the worker's
 * event fd, until r completes or wait_ms pass, and gives it back. 1 if r completed
 * (tfx_ucxc_next returns it, after any completion queued before it); 0 if not yet (it
 * completes as usual, through the progress thread and wake()); -1, at once, when r was
 * sent by the thread and completions are queued: r's own may be among them (and r freed),
 * so drain them first, then call again if r is still out. Completions of other requests
 * are queued on the way without wake(): drain after the call. */
int tfx_ucxc_drive(tfx_ucxc_t *u, tfx_ucxc_req_t *r, long spin_us, long wait_ms);
/* The next completed request, or NULL. */
tfx_ucxc_req_t *tfx_ucxc_next(tfx_ucxc_t *u);
/* How far r's bodies have gone: bytes of its body across, bytes of the reply's body in and
 * the reply body's size (0 until its REPLY frame is in). Any thread, while r is not freed.
 * Without parts a body moves in one piece: 0 until it is all across. */
void tfx_ucxc_req_progress(tfx_ucxc_req_t *r, uint64_t *sent, uint64_t *received,
                           uint64_t *reply_total);
/* Bumped each time a part of a body goes or lands (and the wake function runs): a caller
 * looks at its requests' progress when it changed. Any thread. */
unsigned tfx_ucxc_progress_gen(tfx_ucxc_t *u);
void *tfx_ucxc_req_user_data(const tfx_ucxc_req_t *r);
tfx_ucxc_result_t *tfx_ucxc_req_result(tfx_ucxc_req_t *r);
void tfx_ucxc_req_free(tfx_ucxc_req_t *r);

#endif
