/* ucx_client.c - the client side of tfetch's UCX transport (see ucx_client.h).
 *
 * The progress thread owns the UCX worker, except while it lends it to the caller. The
 * caller's thread queues commands (connect, start, close) under `lock` and signals the
 * worker; the thread runs them, progresses UCX, and queues finished requests for the
 * caller, calling wake() so the caller's poll returns. A blocking call does better
 * (tfx_ucxc_drive): it takes the worker (`owner`, under `lock`; the thread gives it up
 * between two passes while `want` is set, and parks on its wake fd), sends its own request
 * and progresses UCX itself until the reply is in or a short budget is spent, then hands the
 * worker back, waking the thread only if something is left for it. Whoever owns the worker
 * runs the same code (run_cmds, the callbacks, deadlines), so every field marked "owner"
 * below is touched by one thread at a time, handed over under `lock`. Completions seen
 * while the caller drives are queued exactly as the thread queues them, without wake().
 * A request is finished only when both its send and its reply are done (its body segments
 * are borrowed until then), or when its connection is closed and UCX has given back every
 * operation. A request past its deadline breaks its connection: the endpoint is closed with
 * FORCE, which makes UCX complete every operation on it with an error; receives are never
 * abandoned while unfinished (that hangs the rendezvous).
 *
 * Nothing the thread does waits on the network: TCP connects are non-blocking (UCX's
 * TCP_CONN_NB, set in ucx_common.c) and the HELLO is sent like any request, so a filtered or
 * stalled peer costs a connect its timeout and nothing more. Teardown is bounded too: the
 * caller waits at most STOP_WAIT_MS for the thread; one stuck inside UCX beyond that is left
 * to finish and free everything itself (it no longer wakes or completes anything).
 */
#include "config.h"
#include "transports/ucx_client.h"
#include "proto/strcopy.h"
#include "proto/ucxaddr.h"
#include "transports/ucx_server.h"      /* the active message ids */
#include "transports/ucx_common.h"
#include "transports/buf.h"
#include "transports/clock.h"
#include "transports/spare.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

enum { CMD_CONNECT, CMD_START, CMD_CLOSE };

struct tfx_ucxc_conn {
    tfx_ucxc_t *u;
    ucp_ep_h ep;
    int same_host;
    atomic_int broken;
    int closed;                     /* the endpoint was closed */
    int refs;                       /* the caller's + one per live request (thread only) */
    char transport[48];
    char features[TFP_UF_MAX_MSG + 1];  /* what its HELLO_ACK offered (TFP_UF_FEATURES) */
    unsigned feature_bits;              /* ... those this build knows (tfp_uf_feature_bits) */
    atomic_long peer_pid;           /* the server's pid on this host, to notice its death */
    /* connect handshake (thread, then the caller under lock) */
    uint8_t hello[TFP_UF_MAX_HEADER];   /* the HELLO frame, until its send completes */
    uint64_t hello_seq;
    int hello_state;                /* 0 waiting, 1 accepted, -1 failed */
    uint64_t hello_deadline;        /* CLOCK_MONOTONIC ms: no HELLO_ACK by then is a failure */
    long hello_timeout_ms;          /* what that deadline was, for the message */
    int hello_timed_out;            /* hello_state -1 because that deadline passed */
    uint64_t linger_until;          /* thread: closed by the caller mid-handshake; closed
                                     * when the HELLO settles or at this time (0: not) */
    char why[256];
};

struct tfx_ucxc_req {
    tfx_ucxc_t *u;
    tfx_ucxc_conn_t *conn;
    void *ud;
    struct tfx_ucxc_req *prev, *next;   /* live (thread) */
    struct tfx_ucxc_req *qnext;         /* done queue */
    size_t hlen;
    uint8_t *phbuf;                     /* the frame and the body's prefix (BODY_PREFIX) */
    ucp_dt_iov_t *iov;
    size_t niov;
    uint64_t deadline_ms;
    uint64_t t0_ns;                 /* tfx_now_ns() when it started */
    long stall_ms;                  /* the stall window (wait included); 0: off */
    uint64_t stall_rate;
    uint64_t max_body;              /* a larger reply is refused before its receive */
    int phase;                      /* owner: what it waits for (PHASE_*), since ... */
    uint64_t phase_ms;              /* ... this time */
    int sending, receiving, replied;
    int orphan;                     /* handed back early; freed when UCX lets go of it */
    struct cmd *spare;              /* started DRIVEN and not sent yet (tfx_ucxc_t's
                                     * deferred): the command that posts it if the caller
                                     * cannot take the worker */
    tfx_ucx_landing_t land;         /* the reply body's rendezvous (ucx_common.h) */
    /* Bodies in parts (TFX_UCXC_PARTS to a server that takes them; proto/ucxframe.h): the
     * request's, sent one part after the other (part_due: the next waits for the owner's
     * pass), and the reply's, landed in place (landed: bytes in; a part whose rendezvous
     * arrives while the one before it lands waits in land). */
    int parts;
    int send_held;                  /* UCX holds a send of it (counted in sends_out) */
    int part_due;
    tfp_uf_parts_t out, in;
    int got_reply;                  /* its REPLY frame arrived (its body may still come) */
    uint64_t landed;
    ucp_dt_iov_t *piov;             /* a part's pieces, when it spans several */
    atomic_ullong up_done, down_done, down_total;   /* tfx_ucxc_req_progress */
    tfx_ucxc_result_t res;
    /* Last, and not zeroed when a spare is reused (req_new): written whole before read. */
    tfp_uf_hdr_t hdr;
    uint8_t hbuf[TFP_UF_MAX_HEADER];    /* hdr encoded (hlen bytes) */
};

/* Freed requests kept for the next ones (transports/spare.h): a fresh 8 KiB calloc per
 * request cost more than the rest of an 8-byte exchange's client side. */
#define SPARE_REQS 16

typedef struct cmd {
    struct cmd *next;
    int kind;
    tfx_ucxc_conn_t *conn;
    tfx_ucxc_req_t *req;
    /* connect */
    uint8_t *addr;
    size_t addr_len;
    char token[64];
    char identity[TFP_UF_MAX_MSG + 1];  /* "boot_id netns [PROOF]" */
    uint64_t deadline_ms;
} cmd_t;

struct tfx_ucxc {
    tfx_ucx_base_t base;
    ucp_worker_h worker;            /* = base.worker */
    int no_shm;                     /* started without shared-memory transports */
    atomic_uint sends_out;          /* request sends UCX has not completed, orphans not
                                     * counted (changed by the worker's holder only): while
                                     * any, the loop and drives yield (TFX_UCX_SEND_YIELD_NS) */
    pthread_t thread;
    void (*wake)(void *);
    void *wake_arg;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    cmd_t *cmd_head, *cmd_tail;
    atomic_int cmd_any;             /* cmd_head is not empty: a pass looks without the lock */
    tfx_ucxc_req_t *done_head, *done_tail;
    tfx_spare_t spare;              /* under lock: freed requests to reuse */
    tfx_ucxc_req_t *live;           /* owner */
    tfx_ucxc_conn_t **conns;        /* owner: connections with their handshakes */
    size_t nconns, capconns;
    atomic_uint lingering;          /* connections closed mid-handshake, waiting (changed
                                     * under lock by the worker's holder; a pass looks
                                     * without it) */
    atomic_uint closing;            /* endpoint closes UCX has not completed */
    uint64_t next_seq;
    int stopping;
    int thread_done;                /* the progress thread left its loop (under lock) */
    int abandoned;                  /* tfx_ucxc_free gave up waiting: the thread frees all */
    uint64_t last_pid_check_ms;     /* owner */
    uint64_t last_scan_ms;          /* owner: when a pass last looked at deadlines, stalls */
    unsigned rndv_waiting;          /* owner: replies whose rendezvous body awaits its start */
    unsigned parts_due;             /* owner: requests whose next part waits to be sent */
    atomic_uint progress_gen;       /* bumped when a part of a body goes or lands */
    /* Who drives the worker (under lock): the thread between a pass's hold and let_go, a
     * blocking caller inside tfx_ucxc_drive, or nobody. */
    int owner;                      /* OWN_* */
    int want;                       /* a caller waits for the worker: the thread yields */
    int caller_waits;               /* ... asleep on cond: let_go broadcasts */
    tfx_ucxc_req_t *deferred;       /* the caller's: started DRIVEN, not yet sent; sent by
                                     * tfx_ucxc_drive (the caller's until then) */
    tfx_ucxc_req_t *drive_req;      /* owner: the request the caller drives, or NULL */
    int drive_done;                 /* owner: it (or its early copy) was queued */
    /* This process's own worker address, parsed (proto/ucxaddr.h) at start: what a server's
     * address is held to before UCX reads it; NULL when ours does not parse (a UCX other
     * than 1.13's layout, or UCX_UNIFIED_MODE): then no remote address is trusted either. */
    tfp_ucxaddr_t *self_addr;
    atomic_long stall_ms;           /* tfx_ucxc_set_stall; 0: off */
    atomic_ullong stall_rate;
    atomic_ullong max_body;         /* tfx_ucxc_set_max_body; 0: no cap */
    char self_why[256];             /* why self_addr is NULL */
};

enum { OWN_NONE, OWN_THREAD, OWN_CALLER };

#define STOP_WAIT_MS 500L           /* tfx_ucxc_free waits this long for the thread */
#define LINGER_MS 300L              /* a close waits this long for a handshake in flight */
#define CLOSE_WAIT_MS 200L          /* the worker's end waits this long for its closes */
#define TAKE_SPIN_NS 20000u         /* a caller spins this long for the worker, then sleeps */
#define TAKE_MAX_MS 100u            /* ... and gives up after this (a thread stuck in UCX) */

/* ---- on whichever thread owns the worker --------------------------------------------------- */

static void conn_unref(tfx_ucxc_conn_t *c)
{
    tfx_ucxc_t *u = c->u;
    pthread_mutex_lock(&u->lock);
    int last = --c->refs == 0;
    if (last)
        for (size_t i = 0; i < u->nconns; i++)
            if (u->conns[i] == c) {
                u->conns[i] = u->conns[--u->nconns];
                break;
            }
    pthread_mutex_unlock(&u->lock);
    if (last)
        free(c);
}

static void bye_sent(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    free(user_data);
    ucp_request_free(request);
}

/* Tells an admitted server that this endpoint is going (BYE), so that it ends at once what
 * it still holds of ours (a reservation for a put, a blob for a get) rather than when it
 * notices the endpoint is dead. Sent and forgotten: the close after it flushes it out, or,
 * with FORCE, cancels it (the server then finds out from the endpoint's failure). */
static void send_bye(tfx_ucxc_conn_t *c)
{
    tfx_ucxc_t *u = c->u;
    pthread_mutex_lock(&u->lock);
    int admitted = c->hello_state == 1;
    pthread_mutex_unlock(&u->lock);
    if (!admitted)
        return;
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_BYE, ++u->next_seq);
    uint8_t *buf = malloc(TFP_UF_MAX_HEADER);
    size_t len;
    tfp_err_t err;
    if (!buf || tfp_uf_encode(&h, buf, TFP_UF_MAX_HEADER, &len, &err) != TFP_OK) {
        free(buf);
        return;
    }
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                                             UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
                             .cb.send = bye_sent, .user_data = buf};
    void *rq = ucp_am_send_nbx(c->ep, TFX_UCX_AM_REQUEST, buf, len, NULL, 0, &p);
    if (!UCS_PTR_IS_PTR(rq))
        free(buf);                  /* sent at once, or failed */
}

/* A close's end (the request itself was released when posted: UCX still calls this). */
static void ep_closed(void *request, ucs_status_t status, void *user_data)
{
    tfx_ucxc_t *u = user_data;
    (void)request;
    (void)status;
    atomic_fetch_sub(&u->closing, 1);
}

/* FORCE (operations complete with an error at once) needs peer failure detection, so
 * between hosts only; on one host UCX 1.13 refuses it, and the endpoint is flushed and
 * closed in the background instead; the worker's end waits a little for those (cleanup).
 * bye: the connection is healthy and closed on purpose: the server is told first
 * (send_bye). */
static void close_ep(tfx_ucxc_conn_t *c, int bye)
{
    if (c->closed || !c->ep)
        return;
    if (bye && !atomic_load(&c->broken))
        send_bye(c);
    c->closed = 1;
    atomic_store(&c->broken, 1);
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                                             UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .flags = c->same_host ? 0 : UCP_EP_CLOSE_FLAG_FORCE,
                             .cb.send = ep_closed, .user_data = c->u};
    atomic_fetch_add(&c->u->closing, 1);
    void *rq = ucp_ep_close_nbx(c->ep, &p);
    if (UCS_PTR_IS_PTR(rq))
        ucp_request_free(rq);
    else
        atomic_fetch_sub(&c->u->closing, 1);    /* closed at once, or failed */
}

/* Moves a request whose operations are all done to the done queue. */
static void queue_done(tfx_ucxc_t *u, tfx_ucxc_req_t *r)
{
    pthread_mutex_lock(&u->lock);
    r->qnext = NULL;
    if (u->done_tail)
        u->done_tail->qnext = r;
    else
        u->done_head = r;
    u->done_tail = r;
    /* Under the lock: tfx_ucxc_free may be letting go. A caller driving the worker drains
     * the queue itself when it hands the worker back: no wake-up. */
    if (u->wake && u->owner != OWN_CALLER)
        u->wake(u->wake_arg);
    pthread_mutex_unlock(&u->lock);
}

/* r's outcome is queued (r itself, or its early copy): the caller driving it may stop. */
static void note_done(tfx_ucxc_t *u, const tfx_ucxc_req_t *r)
{
    if (r == u->drive_req)
        u->drive_done = 1;
}

static void maybe_complete(tfx_ucxc_req_t *r)
{
    tfx_ucxc_t *u = r->u;
    if (r->sending || r->receiving || (!r->replied && r->res.transport_status == TFP_OK))
        return;
    if (r->orphan) {                /* its caller already has a failure; UCX is done now */
        if (r->prev)
            r->prev->next = r->next;
        else
            u->live = r->next;
        if (r->next)
            r->next->prev = r->prev;
        tfx_buf_free(r->res.body, r->res.body_cap);
        free(r->iov);
        free(r->piov);
        free(r->phbuf);
        free(r);
        return;
    }
    if (r->prev)
        r->prev->next = r->next;
    else
        u->live = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
    r->res.seconds = tfx_since_s(r->t0_ns);
    conn_unref(r->conn);
    r->conn = NULL;
    note_done(u, r);
    queue_done(u, r);
}

/* A request of u's, zeroed but for its frame (hdr, hbuf): a spare one when there is one. */
static tfx_ucxc_req_t *req_new(tfx_ucxc_t *u)
{
    pthread_mutex_lock(&u->lock);
    tfx_ucxc_req_t *r = tfx_spare_take(&u->spare);
    pthread_mutex_unlock(&u->lock);
    if (!r && !(r = malloc(sizeof *r)))
        return NULL;
    memset(r, 0, offsetof(tfx_ucxc_req_t, hdr));
    r->u = u;
    return r;
}

/* A failed request whose operations UCX may never give back (without peer failure detection,
 * on one host, a dead peer's operations neither complete nor can be force-closed, measured):
 * the caller gets a copy of the failure now; the original stays with UCX as an orphan and is
 * freed if its operations ever finish. On one host the peer pulls the request's bytes itself
 * (CMA) and eager data was copied at send time, so the caller may reuse its memory. */
static void hand_back_early(tfx_ucxc_req_t *r)
{
    tfx_ucxc_t *u = r->u;
    if (r->orphan || !(r->sending || r->receiving))
        return;
    tfx_ucxc_req_t *copy = req_new(u);
    if (!copy)
        return;                     /* it completes if UCX ever lets go */
    copy->ud = r->ud;
    copy->hdr = r->hdr;
    copy->res = r->res;
    copy->res.body = NULL;
    copy->res.body_len = 0;
    copy->res.body_cap = 0;
    copy->res.seconds = tfx_since_s(r->t0_ns);
    if (r->send_held)               /* its send may never complete: stop waiting for it */
        atomic_fetch_sub_explicit(&u->sends_out, 1, memory_order_relaxed);
    r->orphan = 1;
    conn_unref(r->conn);            /* the orphan keeps no connection alive */
    r->conn = NULL;
    note_done(u, r);
    queue_done(u, copy);
}

static void fail_req(tfx_ucxc_req_t *r, tfp_status_t st, const char *why)
{
    if (r->res.transport_status == TFP_OK && !r->replied) {
        r->res.transport_status = st;
        tfp_strcpy(r->res.why, sizeof r->res.why, why);
    }
}

/* 1 (and r failed with TFP_ETOOBIG) when a reply body of len bytes passes r's cap. */
static int too_big(tfx_ucxc_req_t *r, size_t len)
{
    if (!r->max_body || len <= r->max_body)
        return 0;
    char why[160];
    snprintf(why, sizeof why, "the reply body announces %zu bytes, more than this client "
             "takes (max body %llu bytes)", len, (unsigned long long)r->max_body);
    fail_req(r, TFP_ETOOBIG, why);
    return 1;
}

/* Breaks a connection: every request on it fails. With peer failure detection (between
 * hosts) UCX gives their operations back; on one host it may not, so they are handed back
 * early (hand_back_early). */
static void break_conn(tfx_ucxc_conn_t *c, tfp_status_t st, const char *why, int bye)
{
    tfx_ucxc_t *u = c->u;
    int same_host = c->same_host;
    for (tfx_ucxc_req_t *r = u->live, *n; r; r = n) {
        n = r->next;
        if (r->conn == c)
            fail_req(r, st, why);
    }
    pthread_mutex_lock(&u->lock);
    if (c->hello_state == 0) {      /* a caller may be settling it: under the lock, woken */
        c->hello_state = -1;
        tfp_strcpy(c->why, sizeof c->why, why);
        pthread_cond_broadcast(&u->cond);
    }
    c->refs++;                      /* keep c while its requests let go of it */
    pthread_mutex_unlock(&u->lock);
    close_ep(c, bye);
    for (tfx_ucxc_req_t *r = u->live, *n; r; r = n) {
        n = r->next;
        if (r->conn == c)
            maybe_complete(r);
    }
    if (same_host)
        for (tfx_ucxc_req_t *r = u->live, *n; r; r = n) {
            n = r->next;
            if (r->conn == c)
                hand_back_early(r);
        }
    conn_unref(c);
}

static tfx_ucxc_req_t *find_req(tfx_ucxc_t *u, uint64_t seq)
{
    for (tfx_ucxc_req_t *r = u->live; r; r = r->next)
        if (r->hdr.seq == seq && !r->orphan)
            return r;
    return NULL;
}

/* A part of a body went or landed: the caller's wait ends, so that it reports progress
 * (one driving the worker itself looks when it hands it back). */
static void note_progress(tfx_ucxc_t *u)
{
    atomic_fetch_add(&u->progress_gen, 1);
    pthread_mutex_lock(&u->lock);
    if (u->wake && u->owner != OWN_CALLER)
        u->wake(u->wake_arg);
    pthread_mutex_unlock(&u->lock);
}

/* A send of r (its frame and body, or one part of the body) is done. */
static void sent(tfx_ucxc_req_t *r, ucs_status_t status)
{
    tfx_ucxc_t *u = r->u;
    if (status == UCS_OK && !r->orphan && !tfp_uf_parts_done(&r->out)) {
        /* The next part goes once this one is across: the owner's next pass sends it. */
        atomic_store(&r->up_done, r->out.next);
        r->part_due = 1;
        u->parts_due++;
        note_progress(u);
        return;
    }
    r->sending = 0;
    r->res.t_sent = tfx_since_s(r->t0_ns);
    if (status != UCS_OK)
        fail_req(r, TFP_EINTERNAL, ucs_status_string(status));
    else
        atomic_store(&r->up_done, r->hdr.body_len);
    maybe_complete(r);
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    tfx_ucxc_req_t *r = user_data;
    ucp_request_free(request);
    if (!r->orphan)                 /* an orphan's was uncounted when it was handed back */
        atomic_fetch_sub_explicit(&r->u->sends_out, 1, memory_order_relaxed);
    r->send_held = 0;
    sent(r, status);
}

/* The body's bytes [off, off + len) (the frame's prefix counted) as a send buffer: the one
 * piece they lie in (contiguous), all of the pieces, or those they span (r->piov). */
static const void *body_range(tfx_ucxc_req_t *r, uint64_t off, uint64_t len, size_t *count,
                              ucp_datatype_t *dt)
{
    *dt = ucp_dt_make_contig(1);
    *count = (size_t)len;
    size_t i = 0;
    uint64_t at = 0;
    while (i < r->niov && at + r->iov[i].length <= off)
        at += r->iov[i++].length;
    if (len == 0 || i == r->niov)
        return NULL;
    if (off + len <= at + r->iov[i].length)
        return (const uint8_t *)r->iov[i].buffer + (off - at);
    *dt = ucp_dt_make_iov();
    if (off == 0 && len == r->hdr.body_len) {
        *count = r->niov;
        return r->iov;
    }
    if (!r->piov && !(r->piov = calloc(r->niov, sizeof *r->piov)))
        return NULL;
    size_t n = 0;
    for (uint64_t left = len; left && i < r->niov; i++, n++) {
        uint64_t skip = n == 0 ? off - at : 0;
        uint64_t k = r->iov[i].length - skip < left ? r->iov[i].length - skip : left;
        r->piov[n].buffer = (uint8_t *)r->iov[i].buffer + skip;
        r->piov[n].length = (size_t)k;
        left -= k;
    }
    *count = n;
    return r->piov;
}

/* Sends the body's bytes [off, off + len) after the frame hdr (hlen bytes). */
static void send_range(tfx_ucxc_req_t *r, const void *hdr, size_t hlen, uint64_t off,
                       uint64_t len)
{
    tfx_ucxc_t *u = r->u;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA |
                                             UCP_OP_ATTR_FIELD_FLAGS |
                                             UCP_OP_ATTR_FIELD_DATATYPE,
                             .cb.send = send_cb, .user_data = r,
                             .flags = UCP_AM_SEND_FLAG_REPLY};
    size_t count = 0;
    const void *body = body_range(r, off, len, &count, &p.datatype);
    if (len && !body) {
        fail_req(r, TFP_ENOMEM, "out of memory");
        r->sending = 0;
        maybe_complete(r);
        return;
    }
    void *rq = ucp_am_send_nbx(r->conn->ep, TFX_UCX_AM_REQUEST, hdr, hlen, body, count, &p);
    if (UCS_PTR_IS_PTR(rq)) {
        r->send_held = 1;
        atomic_fetch_add_explicit(&u->sends_out, 1, memory_order_relaxed);
        return;
    }
    sent(r, UCS_PTR_STATUS(rq));        /* sent at once, or failed */
}

/* The next part of r's body, due since the last one went. */
static void send_part(tfx_ucxc_req_t *r)
{
    r->part_due = 0;
    if (r->orphan || !r->conn || r->conn->closed || atomic_load(&r->conn->broken) ||
        r->replied || r->got_reply) {
        /* answered already (a refusal at its first part), or going nowhere: no more parts */
        if (!r->replied && !r->got_reply)
            fail_req(r, TFP_EINTERNAL, "the UCX connection closed while the body was sent");
        r->sending = 0;
        maybe_complete(r);
        return;
    }
    tfp_uf_hdr_t ph;
    tfp_err_t err;
    uint64_t off = r->out.next;
    tfp_uf_parts_next(&r->out, TFP_UF_PART_BYTES, &ph);
    if (tfp_uf_encode(&ph, r->hbuf, sizeof r->hbuf, &r->hlen, &err) != TFP_OK) {
        fail_req(r, TFP_EINTERNAL, err.msg);    /* cannot happen: its fields are ours */
        r->sending = 0;
        maybe_complete(r);
        return;
    }
    send_range(r, r->hbuf, r->hlen, off, ph.body_len);
}

/* The part that waited for the one before it (if one did) is the next to receive: the
 * owner's pass starts it, or, r having failed, releases it (start_rndv). */
static void next_part(tfx_ucxc_req_t *r)
{
    if (tfx_ucx_landing_advance(&r->land)) {
        r->receiving = 1;
        r->u->rndv_waiting++;
    }
}

/* length more bytes of the reply's body are in: the reply is complete when they are all in,
 * else the next part's receive starts if it is here already. */
static void landed(tfx_ucxc_req_t *r, size_t length)
{
    r->landed += length;
    atomic_store(&r->down_done, r->landed);
    if (r->landed < r->in.total) {
        next_part(r);
        note_progress(r->u);
        return;
    }
    r->res.body_len = (size_t)r->in.total;
    r->replied = 1;
}

static void recv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    tfx_ucxc_req_t *r = user_data;
    ucp_request_free(request);
    r->receiving = 0;
    if (status != UCS_OK)
        fail_req(r, TFP_EINTERNAL, ucs_status_string(status));
    if (r->res.transport_status == TFP_OK)
        landed(r, length);
    else
        next_part(r);                   /* released by the owner's pass */
    maybe_complete(r);
}

static void start_rndv(tfx_ucxc_t *u, tfx_ucxc_req_t *r)
{
    void *desc = r->land.desc;
    r->land.desc = NULL;
    if (r->orphan || r->conn->closed || r->res.transport_status != TFP_OK) {
        ucp_am_data_release(u->worker, desc);
        r->receiving = 0;
        maybe_complete(r);
        return;
    }
    if (too_big(r, r->land.len)) {                    /* never allocated nor received */
        ucp_am_data_release(u->worker, desc);
        r->receiving = 0;
        maybe_complete(r);
        return;
    }
    /* A large reply lands in reused memory whose pages are already faulted in (buf.h's
     * cache, fed when a document received here is freed): a fresh 64 MiB buffer per GET
     * made the copy pay first touch, half the GET's time. */
    if (!r->res.body)
        r->res.body = tfx_buf_alloc((size_t)r->in.total, &r->res.body_cap);
    if (!r->res.body) {
        ucp_am_data_release(u->worker, desc);
        fail_req(r, TFP_ENOMEM, "out of memory for the reply");
        r->receiving = 0;
        maybe_complete(r);
        return;
    }
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA |
                                             UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                             .cb.recv_am = recv_cb, .user_data = r};
    void *rq = ucp_am_recv_data_nbx(u->worker, desc, r->res.body + r->land.off, r->land.len,
                                    &p);
    if (UCS_PTR_IS_ERR(rq)) {
        fail_req(r, TFP_EINTERNAL, ucs_status_string(UCS_PTR_STATUS(rq)));
        r->receiving = 0;
        maybe_complete(r);
    }
}

/* Names the transports of the connection's lanes from ucp_ep_print_info's report. */
static void describe(tfx_ucxc_conn_t *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    snprintf(c->transport, sizeof c->transport, "ucx");
    if (!f)
        return;
    ucp_ep_print_info(c->ep, f);
    fclose(f);
    static const char *names[] = {"sysv", "posix", "cma", "xpmem", "knem", "cuda_ipc",
                                  "rc_mlx5", "rc_verbs", "dc_mlx5", "ud_mlx5", "ud_verbs",
                                  "tcp", "self"};
    size_t k = strlen(c->transport);
    char sep = '/';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char pat[32];
        snprintf(pat, sizeof pat, "%s/", names[i]);
        if (text && strstr(text, pat) && k + strlen(names[i]) + 2 < sizeof c->transport) {
            k += (size_t)snprintf(c->transport + k, sizeof c->transport - k, "%c%s", sep,
                                  names[i]);
            sep = '+';
        }
    }
    free(text);
}

static ucs_status_t on_request_reply(tfx_ucxc_t *u, tfx_ucxc_req_t *r, void *data,
                                     size_t length, const ucp_am_recv_param_t *param);

/* A PART of a reply's body: checked against the parts so far (proto/ucxframe.c), then landed
 * in place, eagerly or by a receive the owner's pass starts. One out of place fails its
 * request (its later parts are dropped: the request is gone); one of no request in flight
 * is dropped. */
static ucs_status_t on_reply_part(tfx_ucxc_t *u, const tfp_uf_hdr_t *h, void *data,
                                  size_t length, const ucp_am_recv_param_t *param)
{
    tfx_ucxc_req_t *r = find_req(u, h->seq);
    if (!r || !r->got_reply || r->replied || !r->res.body ||
        r->res.transport_status != TFP_OK)
        return UCS_OK;
    tfp_err_t err = {TFP_OK, ""};
    uint64_t first = h->cond.first;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    int now = 0;                        /* a rendezvous to receive now */
    if (tfp_uf_parts_take(&r->in, h, length, &err) != TFP_OK ||
        (rndv && (now = tfx_ucx_landing_arrive(&r->land, r->receiving || r->land.desc != NULL,
                                               data, length, first)) < 0)) {
        fail_req(r, TFP_EPROTO, err.code != TFP_OK ? err.msg : "ucx frame: a PART before "
                 "the one before it landed");
        maybe_complete(r);
        return UCS_OK;
    }
    if (!rndv) {
        memcpy(r->res.body + first, data, length);
        if (r->receiving || r->land.desc) {
            r->landed += length;        /* the reply completes when the receive does */
        } else {
            landed(r, length);
            maybe_complete(r);
        }
        return UCS_OK;
    }
    if (now) {                          /* else it waits for the part before it */
        r->receiving = 1;
        u->rndv_waiting++;
    }
    return UCS_INPROGRESS;
}

static ucs_status_t on_reply(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    tfx_ucxc_t *u = arg;
    tfp_uf_hdr_t h;
    tfp_err_t err;
    uint64_t seq;
    if (tfp_uf_peek_reply(header, header_length, &seq)) {
        /* A REPLY is decoded in its request's place (no 2.7 KiB copy per request); a
         * request that has its reply already is not touched. */
        tfx_ucxc_req_t *r = find_req(u, seq);
        if (!r || r->replied || r->receiving || r->got_reply ||
            tfp_uf_decode(header, header_length, &r->res.reply, &err) != TFP_OK ||
            tfp_uf_parts_begin(&r->in, &r->res.reply, length, &err) != TFP_OK ||
            (!r->parts && !tfp_uf_parts_done(&r->in)))
            return UCS_OK;                              /* not ours: drop */
        return on_request_reply(u, r, data, length, param);
    }
    if (tfp_uf_decode(header, header_length, &h, &err) != TFP_OK)
        return UCS_OK;                                  /* not ours: drop */
    if (h.op == TFP_UF_PART)
        return on_reply_part(u, &h, data, length, param);
    if (h.op != TFP_UF_HELLO_ACK)
        return UCS_OK;
    pthread_mutex_lock(&u->lock);
    for (size_t i = 0; i < u->nconns; i++) {
        tfx_ucxc_conn_t *c = u->conns[i];
        if (c->hello_seq == h.seq && c->hello_state == 0) {
            if (h.status == TFP_OK) {
                describe(c);        /* by the worker's owner */
                tfp_strcpy(c->features, sizeof c->features, h.msg);
                c->feature_bits = tfp_uf_feature_bits(h.msg);
            }
            else
                snprintf(c->why, sizeof c->why, "the server refused the HELLO: %.200s",
                         h.msg);
            c->hello_state = h.status == TFP_OK ? 1 : -1;
            pthread_cond_broadcast(&u->cond);
        }
    }
    pthread_mutex_unlock(&u->lock);
    return UCS_OK;
}

/* r's REPLY frame arrived (decoded into r->res.reply), and its body with it or after it. */
static ucs_status_t on_request_reply(tfx_ucxc_t *u, tfx_ucxc_req_t *r, void *data,
                                     size_t length, const ucp_am_recv_param_t *param)
{
    r->got_reply = 1;
    if (r->in.total == 0) {
        r->replied = 1;
        maybe_complete(r);
        return UCS_OK;
    }
    atomic_store(&r->down_total, r->in.total);
    if (!tfp_uf_parts_done(&r->in)) {
        /* In parts: the whole body's buffer now, each part landing in its place. */
        r->res.t_reply = tfx_since_s(r->t0_ns);
        if (too_big(r, (size_t)r->in.total)) {
            maybe_complete(r);
            return UCS_OK;
        }
        if (!(r->res.body = tfx_buf_alloc((size_t)r->in.total, &r->res.body_cap))) {
            fail_req(r, TFP_ENOMEM, "out of memory for the reply");
            maybe_complete(r);
            return UCS_OK;
        }
        if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
            memcpy(r->res.body, data, length);
            landed(r, length);
            return UCS_OK;
        }
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        r->res.t_reply = tfx_since_s(r->t0_ns);     /* its body comes after */
        r->land.desc = data;
        u->rndv_waiting++;
        r->land.len = length;
        r->land.off = 0;
        r->receiving = 1;
        return UCS_INPROGRESS;                          /* received by the loop */
    }
    if (too_big(r, length)) {
        maybe_complete(r);
        return UCS_OK;
    }
    r->res.body = tfx_buf_malloc(length);
    if (!r->res.body) {
        fail_req(r, TFP_ENOMEM, "out of memory for the reply");
    } else {
        memcpy(r->res.body, data, length);
        r->res.body_len = length;
        r->replied = 1;
    }
    maybe_complete(r);
    return UCS_OK;
}

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    tfx_ucxc_conn_t *c = arg;
    (void)ep;
    char why[128];
    snprintf(why, sizeof why, "the UCX connection failed: %s", ucs_status_string(status));
    break_conn(c, TFP_EINTERNAL, why, 0);
}

static void hello_sent(void *request, ucs_status_t status, void *user_data)
{
    tfx_ucxc_conn_t *c = user_data;
    (void)status;                   /* a failure shows as no HELLO_ACK by the deadline */
    ucp_request_free(request);
    conn_unref(c);
}

static void do_connect(tfx_ucxc_t *u, cmd_t *cm)
{
    tfx_ucxc_conn_t *c = cm->conn;
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)cm->addr,
        /* PEER mode makes UCX 1.13 pick only TCP on one host (measured); keep it for others. */
        .err_mode = c->same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ep_error, .arg = c},
    };
    ucs_status_t st = ucp_ep_create(u->worker, &ep, &c->ep);
    if (st != UCS_OK) {
        c->ep = NULL;
        pthread_mutex_lock(&u->lock);
        c->hello_state = -1;
        snprintf(c->why, sizeof c->why, "cannot create the UCX endpoint: %s",
                 ucs_status_string(st));
        pthread_cond_broadcast(&u->cond);
        pthread_mutex_unlock(&u->lock);
        return;
    }
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_HELLO, ++u->next_seq);
    tfp_strcpy(h.name, sizeof h.name, cm->token);
    tfp_strcpy(h.msg, sizeof h.msg, cm->identity);
    c->hello_seq = h.seq;
    size_t hlen;
    tfp_err_t err;
    if (tfp_uf_encode(&h, c->hello, sizeof c->hello, &hlen, &err) != TFP_OK) {
        pthread_mutex_lock(&u->lock);
        c->hello_state = -1;
        snprintf(c->why, sizeof c->why, "HELLO: %.200s", err.msg);
        pthread_cond_broadcast(&u->cond);
        pthread_mutex_unlock(&u->lock);
        return;
    }
    /* Not waited for: a peer that is filtered or stalled never completes it, and the caller
     * gives up at its deadline (closing the connection, which ends the send). c->hello lives
     * until then: the send holds a reference to c. */
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                                             UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
                             .cb.send = hello_sent, .user_data = c};
    void *rq = ucp_am_send_nbx(c->ep, TFX_UCX_AM_REQUEST, c->hello, hlen, NULL, 0, &p);
    if (UCS_PTR_IS_PTR(rq)) {
        pthread_mutex_lock(&u->lock);
        c->refs++;                  /* dropped by hello_sent */
        pthread_mutex_unlock(&u->lock);
    } else if (UCS_PTR_IS_ERR(rq)) {
        pthread_mutex_lock(&u->lock);
        c->hello_state = -1;
        snprintf(c->why, sizeof c->why, "HELLO: %s", ucs_status_string(UCS_PTR_STATUS(rq)));
        pthread_cond_broadcast(&u->cond);
        pthread_mutex_unlock(&u->lock);
    }
}

/* A body in pieces whose last is large and whose others are small (a document's header and
 * its one tensor, borrowed) goes as one contiguous piece when the server takes it: the others
 * at the end of the AM header (flag BODY_PREFIX), the last as the AM data, by rendezvous. In
 * pieces (iov) UCX 1.13 pushes it through the peer's FIFO instead: two copies, but on two
 * cores at once. Measured on one host (bench/README.md, "PUT of borrowed tensors"), one piece
 * against pieces: 1.1-1.3x faster at 1 MiB, 1.4-1.7x at 4, 1.0-1.5x at 6, about even at 8,
 * slower from 12 MiB on, where the single copy of a source in 4 KiB pages falls behind the
 * pipeline; so up to 8 MiB. Returns the prefix's bytes, or 0 to send the pieces as they are. */
#define PREFIX_MIN_LAST 8192            /* smaller bodies go eagerly either way */
#define PREFIX_MAX_LAST ((size_t)8 << 20)
static size_t prefix_of(const tfx_ucxc_conn_t *c, const tfx_ucxc_req_t *r)
{
    size_t last = r->niov ? r->iov[r->niov - 1].length : 0;
    if (!tfx_ucxc_conn_feature(c, TFP_UF_FEATURE_BODY_PREFIX) || r->niov < 2 ||
        last < PREFIX_MIN_LAST || last > PREFIX_MAX_LAST)
        return 0;
    size_t pre = 0;
    for (size_t i = 0; i + 1 < r->niov; i++)
        if ((pre += r->iov[i].length) > TFP_UF_MAX_PREFIX)
            return 0;
    return pre;
}

static void do_start(tfx_ucxc_t *u, tfx_ucxc_req_t *r)
{
    tfx_ucxc_conn_t *c = r->conn;
    r->prev = NULL;
    r->next = u->live;
    if (u->live)
        u->live->prev = r;
    u->live = r;
    r->t0_ns = tfx_now_ns();
    if (atomic_load(&c->broken) || c->closed) {
        fail_req(r, TFP_EBUSY, "the UCX connection is broken");
        maybe_complete(r);
        return;
    }
    r->hdr.seq = ++u->next_seq;
    size_t pre = prefix_of(c, r);
    if (pre) {
        r->hdr.flags |= TFP_UF_F_BODY_PREFIX;
        r->hdr.prefix_len = (uint32_t)pre;
    }
    /* Parts asked for: the reply may come in parts, and a large body goes in them. */
    r->parts = r->parts && tfx_ucxc_conn_feature(c, TFP_UF_FEATURE_PARTS) &&
               (r->hdr.op == TFP_UF_GET || r->hdr.op == TFP_UF_PUT || r->hdr.op == TFP_UF_CALL);
    if (r->parts)
        r->hdr.flags |= TFP_UF_F_PARTS;
    tfp_err_t err;
    tfp_status_t est = tfp_uf_encode(&r->hdr, r->hbuf, sizeof r->hbuf, &r->hlen, &err);
    if (est == TFP_OK && pre && r->hlen + pre > u->base.max_am_header) {
        /* more header than this worker sends (a long name on a small-MTU transport) */
        r->hdr.flags &= (uint16_t)~TFP_UF_F_BODY_PREFIX;
        r->hdr.prefix_len = 0;
        pre = 0;
        est = tfp_uf_encode(&r->hdr, r->hbuf, sizeof r->hbuf, &r->hlen, &err);
    }
    if (est != TFP_OK) {
        fail_req(r, TFP_EINVAL, err.msg);
        maybe_complete(r);
        return;
    }
    /* The body after the frame (and its prefix): the first part of a large one, or all. */
    uint64_t first = r->hdr.body_len - pre;
    if (r->parts && first > TFP_UF_PART_BYTES)
        first = TFP_UF_PART_BYTES;
    tfp_uf_hdr_t sent_hdr = r->hdr;
    sent_hdr.prefix_len = (uint32_t)pre;
    (void)tfp_uf_parts_begin(&r->out, &sent_hdr, first, &err);  /* holds: it adds up */
    const void *hdr = r->hbuf;
    if (pre) {                      /* the frame, then the pieces before the last */
        if (!(r->phbuf = malloc(r->hlen + pre))) {
            fail_req(r, TFP_ENOMEM, "out of memory");
            maybe_complete(r);
            return;
        }
        memcpy(r->phbuf, r->hbuf, r->hlen);
        size_t o = r->hlen;
        for (size_t i = 0; i + 1 < r->niov; i++) {
            memcpy(r->phbuf + o, r->iov[i].buffer, r->iov[i].length);
            o += r->iov[i].length;
        }
        hdr = r->phbuf;
        r->hlen = o;
    }
    /* A body in one piece goes as one: UCX 1.13 sends a large body of several pieces (iov)
     * as fragments through the peer's FIFO (two copies, and waits for room), one in one
     * piece by rendezvous, which a peer on this host reads straight from it (cma). With a
     * prefix the rest is the last piece. */
    r->sending = 1;
    send_range(r, hdr, r->hlen, pre, first);
}

/* On one host there is no peer failure detection (see connect): every 100 ms, a connection
 * with requests in flight whose server process is gone is broken at once, instead of at
 * the requests' deadlines. */
static void check_peers(tfx_ucxc_t *u, uint64_t now)
{
    if (!u->live || now - u->last_pid_check_ms < 100)
        return;
    u->last_pid_check_ms = now;
    tfx_ucxc_conn_t *dead[16];
    size_t ndead = 0;
    pthread_mutex_lock(&u->lock);
    for (size_t i = 0; i < u->nconns && ndead < 16; i++) {
        tfx_ucxc_conn_t *c = u->conns[i];
        long pid = atomic_load(&c->peer_pid);
        if (pid > 0 && !c->closed && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            dead[ndead++] = c;
    }
    pthread_mutex_unlock(&u->lock);
    for (size_t i = 0; i < ndead; i++) {           /* only this thread frees connections */
        char why[96];
        snprintf(why, sizeof why, "the server process (pid %ld) is gone",
                 atomic_load(&dead[i]->peer_pid));
        break_conn(dead[i], TFP_EINTERNAL, why, 0);
    }
}

/* Stall detection (tfx_ucxc_set_stall): 1 when r has been in one phase longer than its
 * window allows. UCX reports no progress within a send or a rendezvous receive, so those
 * phases get their size's worth of time at the rate (at least 1 MiB/s) on top. */
enum { PHASE_NONE, PHASE_SEND, PHASE_REPLY, PHASE_RECV };
#define STALL_MIN_RATE ((uint64_t)1 << 20)
static int stalled(tfx_ucxc_req_t *r, uint64_t now)
{
    if (!r->stall_ms || r->orphan || !r->conn || r->conn->closed)
        return 0;
    int phase = r->sending ? PHASE_SEND : r->receiving || r->land.desc ? PHASE_RECV :
                !r->replied && r->res.transport_status == TFP_OK ? PHASE_REPLY : PHASE_NONE;
    if (phase != r->phase) {
        r->phase = phase;
        r->phase_ms = now;
        return 0;
    }
    if (phase == PHASE_NONE)
        return 0;
    uint64_t rate = r->stall_rate > STALL_MIN_RATE ? r->stall_rate : STALL_MIN_RATE;
    uint64_t bytes = phase == PHASE_SEND ? r->res.bytes_sent : phase == PHASE_RECV ?
                     r->land.len : 0;
    uint64_t window = (uint64_t)r->stall_ms + bytes / rate * 1000u +
                      (phase == PHASE_REPLY ? r->hdr.wait_ms : 0);
    return now - r->phase_ms >= window;
}

void tfx_ucxc_set_max_body(tfx_ucxc_t *u, uint64_t max)
{
    atomic_store(&u->max_body, max);
}

void tfx_ucxc_set_stall(tfx_ucxc_t *u, uint64_t rate, long stall_ms)
{
    atomic_store(&u->stall_rate, rate);
    atomic_store(&u->stall_ms, stall_ms > 0 ? stall_ms : 0);
}

static void close_now(tfx_ucxc_conn_t *c)
{
    break_conn(c, TFP_EBUSY, "the connection was closed", 1);
    conn_unref(c);
}

/* 1 while c's HELLO is unanswered: UCX's wireup is still under way on its endpoint. */
static int mid_handshake(tfx_ucxc_conn_t *c)
{
    tfx_ucxc_t *u = c->u;
    pthread_mutex_lock(&u->lock);
    int mid = c->ep && !c->closed && c->hello_state == 0;
    pthread_mutex_unlock(&u->lock);
    return mid;
}

/* The caller closed c. One still in its handshake lingers (LINGER_MS at most, never past its
 * HELLO's deadline) until the HELLO settles: an endpoint closed, or a worker destroyed, while
 * UCX 1.13's tcp wireup is in flight trips UCX on both sides (the server's reverse connect
 * fails with a wireup message queued: SIGSEGV or an assertion in tfetchd's UCX thread, and an
 * assertion in this process's ucp_worker_destroy). */
static void close_or_linger(tfx_ucxc_t *u, tfx_ucxc_conn_t *c)
{
    if (!mid_handshake(c)) {
        close_now(c);
        return;
    }
    uint64_t until = tfx_now_ms() + (uint64_t)LINGER_MS;
    pthread_mutex_lock(&u->lock);
    c->linger_until = until < c->hello_deadline ? until : c->hello_deadline;
    u->lingering++;
    pthread_mutex_unlock(&u->lock);
}

/* Closes the lingering connections whose handshake settled or whose time is up: how many. */
static unsigned close_settled(tfx_ucxc_t *u)
{
    if (!atomic_load(&u->lingering))
        return 0;                       /* every pass asks: no lock, no clock for nothing */
    for (unsigned n = 0;; n++) {
        tfx_ucxc_conn_t *due = NULL;
        uint64_t now = tfx_now_ms();
        pthread_mutex_lock(&u->lock);
        for (size_t i = 0; u->lingering && !due && i < u->nconns; i++) {
            tfx_ucxc_conn_t *c = u->conns[i];
            if (c->linger_until && (c->hello_state != 0 || now >= c->linger_until)) {
                c->linger_until = 0;
                u->lingering--;
                due = c;
            }
        }
        pthread_mutex_unlock(&u->lock);
        if (!due)
            return n;
        close_now(due);
    }
}

/* Runs queued commands and expired deadlines. Returns how much it did. */
static unsigned run_cmds(tfx_ucxc_t *u)
{
    unsigned n = 0;
    cmd_t *list = NULL;
    if (atomic_load(&u->cmd_any)) {        /* every pass asks: the lock only when posted */
        pthread_mutex_lock(&u->lock);
        list = u->cmd_head;
        u->cmd_head = u->cmd_tail = NULL;
        atomic_store(&u->cmd_any, 0);
        pthread_mutex_unlock(&u->lock);
    }
    while (list) {
        cmd_t *cm = list;
        list = cm->next;
        n++;
        pthread_mutex_lock(&u->lock);
        int abandoned = u->abandoned;
        pthread_mutex_unlock(&u->lock);
        if (abandoned) {            /* the caller let go: start nothing more */
            if (cm->kind == CMD_START)
                tfx_ucxc_req_free(cm->req);
            free(cm->addr);
            free(cm);
            continue;
        }
        switch (cm->kind) {
        case CMD_CONNECT: do_connect(u, cm); break;
        case CMD_START: do_start(u, cm->req); break;
        case CMD_CLOSE: close_or_linger(u, cm->conn); break;
        }
        free(cm->addr);
        free(cm);
    }
    n += close_settled(u);
    if (u->parts_due) {                 /* a body's next part waits to be sent */
        tfx_ucxc_req_t *r = u->live;
        while (r && !r->part_due)
            r = r->next;
        if (r) {
            u->parts_due--;
            send_part(r);
            n++;
        } else {
            u->parts_due = 0;
        }
    }
    if (u->rndv_waiting) {              /* a reply's body waits for its receive to start */
        tfx_ucxc_req_t *r = u->live;
        while (r && !r->land.desc)
            r = r->next;
        if (r) {
            u->rndv_waiting--;
            start_rndv(u, r);
            n++;
        } else {
            u->rndv_waiting = 0;        /* its request went (an orphan's, released) */
        }
    }
    /* Deadlines, stalls and dead peers are counted in milliseconds: a pass looks at the
     * requests in flight once a millisecond, not on every pass (with 64 in flight the walk
     * was a sixth of the client's time). */
    uint64_t now = tfx_now_ms();
    if (now == u->last_scan_ms)
        return n;
    u->last_scan_ms = now;
    check_peers(u, now);
    for (tfx_ucxc_req_t *r = u->live, *next; r; r = next) {
        next = r->next;
        if (stalled(r, now)) {
            char why[160];
            snprintf(why, sizeof why, "stalled: no progress of the UCX request within "
                     "%llu ms (%s)", (unsigned long long)(now - r->phase_ms),
                     r->phase == PHASE_SEND ? "sending" : r->phase == PHASE_RECV ?
                     "receiving the reply" : "waiting for the reply");
            break_conn(r->conn, TFP_EINTERNAL, why, 0);
            n++;
            break;
        }
        if (r->deadline_ms && now >= r->deadline_ms && !r->orphan && r->conn &&
            !r->conn->closed) {
            char why[128];
            snprintf(why, sizeof why, "no UCX reply within %llu ms",
                     (unsigned long long)(r->deadline_ms - r->t0_ns / 1000000u));
            break_conn(r->conn, TFP_EINTERNAL, why, 0);
            n++;
            break;
        }
    }
    return n;
}

static unsigned loop_run(void *arg) { return run_cmds(arg); }
static int loop_sending(void *arg) { return tfx_ucxc_sends_out(arg) > 0; }

/* The thread's pass may touch the worker: nobody else has it, nor waits for it. */
static int loop_hold(void *arg)
{
    tfx_ucxc_t *u = arg;
    pthread_mutex_lock(&u->lock);
    int ok = u->owner == OWN_NONE && !u->want;
    if (ok)
        u->owner = OWN_THREAD;
    pthread_mutex_unlock(&u->lock);
    return ok;
}

static void loop_let_go(void *arg)
{
    tfx_ucxc_t *u = arg;
    pthread_mutex_lock(&u->lock);
    u->owner = OWN_NONE;
    if (u->caller_waits)
        pthread_cond_broadcast(&u->cond);
    pthread_mutex_unlock(&u->lock);
}

static int loop_stopping(void *arg)
{
    tfx_ucxc_t *u = arg;
    pthread_mutex_lock(&u->lock);
    int stopping = u->stopping;
    pthread_mutex_unlock(&u->lock);
    return stopping;
}

/* Commands posted before the stop still run (a close among them), and connections closed
 * mid-handshake settle, unless the caller has let go (abandoned): then nothing more is
 * started. */
static int loop_drained(void *arg)
{
    tfx_ucxc_t *u = arg;
    pthread_mutex_lock(&u->lock);
    int drained = (u->cmd_head == NULL && u->lingering == 0) || u->abandoned;
    pthread_mutex_unlock(&u->lock);
    return drained;
}

static void cleanup(tfx_ucxc_t *u);

/* The progress thread: the shared loop (ucx_common.h), waking at least every 50 ms for the
 * requests' deadlines and the 100 ms check for a dead server (check_peers). Once out of it,
 * it tells tfx_ucxc_free, or, when that gave up waiting, frees everything itself. */
static void *progress_main(void *arg)
{
    tfx_ucxc_t *u = arg;
    const tfx_ucx_loop_t loop = {.run = loop_run, .stopping = loop_stopping,
                                 .drained = loop_drained, .drain_max_ns = 2000000000u,
                                 .sleep_ms = 50, .hold = loop_hold, .let_go = loop_let_go,
                                 .sending = loop_sending, .arg = u};

    tfx_ucx_loop_run(&u->base, &loop);
    pthread_mutex_lock(&u->lock);
    u->thread_done = 1;
    int abandoned = u->abandoned;
    pthread_cond_broadcast(&u->cond);
    pthread_mutex_unlock(&u->lock);
    if (abandoned)
        cleanup(u);
    return NULL;
}

/* ---- the caller's side -------------------------------------------------------------------- */

static void post(tfx_ucxc_t *u, cmd_t *cm)
{
    pthread_mutex_lock(&u->lock);
    cm->next = NULL;
    if (u->cmd_tail)
        u->cmd_tail->next = cm;
    else
        u->cmd_head = cm;
    u->cmd_tail = cm;
    atomic_store(&u->cmd_any, 1);
    pthread_mutex_unlock(&u->lock);
    tfx_ucx_base_wake(&u->base);
}

/* Parses this worker's own address (every transport) into u->self_addr, or says why not.
 * Called before the progress thread starts: the worker is ours alone. */
static void parse_self_address(tfx_ucxc_t *u)
{
    ucp_worker_attr_t a = {.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS |
                                         UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS,
                           .address_flags = 0};
    tfp_err_t err;

    if (ucp_worker_query(u->worker, &a) != UCS_OK) {
        snprintf(u->self_why, sizeof u->self_why, "cannot read this process's UCX address");
        return;
    }
    u->self_addr = malloc(sizeof *u->self_addr);
    if (!u->self_addr)
        snprintf(u->self_why, sizeof u->self_why, "out of memory");
    else if (tfp_ucxaddr_parse((const uint8_t *)a.address, a.address_length, u->self_addr, &err) != TFP_OK) {
        snprintf(u->self_why, sizeof u->self_why, "this process's UCX writes addresses in a "
                 "layout tfetch cannot check (not UCX 1.13's, or UCX_UNIFIED_MODE=y): %.80s",
                 err.msg);
        free(u->self_addr);
        u->self_addr = NULL;
    }
    ucp_worker_release_address(u->worker, a.address);
}

tfx_ucxc_t *tfx_ucxc_new(void (*wake)(void *arg), void *wake_arg, tfp_err_t *err)
{
    return tfx_ucxc_new_tuned(wake, wake_arg, 0, err);
}

tfx_ucxc_t *tfx_ucxc_new_tuned(void (*wake)(void *arg), void *wake_arg, int no_shm,
                               tfp_err_t *err)
{
    tfx_ucxc_t *u = calloc(1, sizeof *u);
    if (!u) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return NULL;
    }
    tfx_spare_init(&u->spare, SPARE_REQS);
    u->wake = wake;
    u->wake_arg = wake_arg;
    pthread_mutex_init(&u->lock, NULL);
    pthread_cond_init(&u->cond, NULL);
    tfx_ucx_tune_t tune = {.no_shm = no_shm};
    u->no_shm = no_shm;
    if (tfx_ucx_base_open(&u->base, "libtfetch", TFX_UCX_AM_REPLY, on_reply, u, 1, &tune,
                          err) != TFP_OK)
        goto free_u;
    u->worker = u->base.worker;
    parse_self_address(u);
    if (pthread_create(&u->thread, NULL, progress_main, u) != 0) {
        tfp_err_set(err, TFP_EINTERNAL, "cannot start the UCX progress thread");
        tfx_ucx_base_close(&u->base);
        goto free_u;
    }
    return u;
free_u:
    free(u->self_addr);
    pthread_mutex_destroy(&u->lock);
    pthread_cond_destroy(&u->cond);
    free(u);
    return NULL;
}

/* Nothing a server sends reaches UCX unchecked: UCX 1.13 reads a worker address without
 * its length and asserts on what it does not expect (a SIGABRT of the whole client). The
 * address must parse exactly (proto/ucxaddr.h) and match our own UCX's sizes. */
static tfp_status_t check_address(const tfx_ucxc_t *u, const uint8_t *addr, size_t addr_len,
                                  char *why, size_t why_size)
{
    tfp_ucxaddr_t *remote;
    tfp_err_t err;
    tfp_status_t st;

    if (!u->self_addr) {
        snprintf(why, why_size, "%s", u->self_why);
        return TFP_EPROTO;
    }
    if (!(remote = malloc(sizeof *remote))) {
        snprintf(why, why_size, "out of memory");
        return TFP_ENOMEM;
    }
    st = tfp_ucxaddr_parse(addr, addr_len, remote, &err);
    if (st == TFP_OK)
        st = tfp_ucxaddr_match(remote, u->self_addr, &err);
    if (st != TFP_OK)
        snprintf(why, why_size, "%s", err.msg);      /* "UCX worker address: ..." */
    free(remote);
    return st;
}

tfp_status_t tfx_ucxc_connect(tfx_ucxc_t *u, const uint8_t *addr, size_t addr_len,
                              int same_host, const char *token, const char *identity,
                              long timeout_ms, tfx_ucxc_conn_t **out, char *why,
                              size_t why_size)
{
    tfp_status_t st = tfx_ucxc_connect_start(u, addr, addr_len, same_host, token, identity, -1,
                                             timeout_ms, out, why, why_size);
    if (st == TFP_EAGAIN) {         /* not reached: the whole timeout was waited for */
        tfx_ucxc_conn_close(*out);
        *out = NULL;
        st = TFP_EBUSY;
    }
    return st;
}

tfp_status_t tfx_ucxc_connect_start(tfx_ucxc_t *u, const uint8_t *addr, size_t addr_len,
                                    int same_host, const char *token, const char *identity,
                                    long confirm_ms, long timeout_ms, tfx_ucxc_conn_t **out,
                                    char *why, size_t why_size)
{
    tfp_status_t cst = check_address(u, addr, addr_len, why, why_size);
    if (cst != TFP_OK)
        return cst;
    tfx_ucxc_conn_t *c = calloc(1, sizeof *c);
    cmd_t *cm = calloc(1, sizeof *cm);
    if (!c || !cm || !(cm->addr = malloc(addr_len ? addr_len : 1))) {
        free(c);
        if (cm)
            free(cm->addr);
        free(cm);
        snprintf(why, why_size, "out of memory");
        return TFP_ENOMEM;
    }
    c->u = u;
    c->same_host = same_host;
    c->refs = 1;                    /* the caller's */
    atomic_init(&c->broken, 0);
    atomic_init(&c->peer_pid, 0);
    memcpy(cm->addr, addr, addr_len);
    cm->addr_len = addr_len;
    cm->kind = CMD_CONNECT;
    cm->conn = c;
    tfp_strcpy(cm->token, sizeof cm->token, token ? token : "");
    tfp_strcpy(cm->identity, sizeof cm->identity, identity ? identity : "");
    cm->deadline_ms = tfx_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 2000);
    uint64_t deadline = cm->deadline_ms;

    /* Registered with the thread before the command runs, so the ACK finds it. */
    pthread_mutex_lock(&u->lock);
    if (u->nconns == u->capconns) {
        size_t ncap = u->capconns ? u->capconns * 2 : 8;
        tfx_ucxc_conn_t **n = realloc(u->conns, ncap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&u->lock);
            free(c);
            free(cm->addr);
            free(cm);
            snprintf(why, why_size, "out of memory");
            return TFP_ENOMEM;
        }
        u->conns = n;
        u->capconns = ncap;
    }
    u->conns[u->nconns++] = c;
    pthread_mutex_unlock(&u->lock);
    post(u, cm);

    c->hello_deadline = deadline;
    c->hello_timeout_ms = timeout_ms > 0 ? timeout_ms : 2000;
    long wait = confirm_ms < 0 || confirm_ms > c->hello_timeout_ms ? c->hello_timeout_ms
                                                                   : confirm_ms;
    tfp_status_t st = tfx_ucxc_conn_settle(c, wait, why, why_size);
    if (st == TFP_OK || st == TFP_EAGAIN)
        *out = c;                   /* EAGAIN: still connecting; the caller settles it */
    else
        tfx_ucxc_conn_close(c);
    return st;
}

tfp_status_t tfx_ucxc_conn_settle(tfx_ucxc_conn_t *c, long wait_ms, char *why, size_t why_size)
{
    tfx_ucxc_t *u = c->u;
    uint64_t until = tfx_now_ms() + (uint64_t)(wait_ms > 0 ? wait_ms : 0);
    if (until > c->hello_deadline)
        until = c->hello_deadline;
    pthread_mutex_lock(&u->lock);
    for (uint64_t now; c->hello_state == 0 && (now = tfx_now_ms()) < until;) {
        struct timespec ts = tfx_deadline_rt(until - now < 20 ? until - now : 20);
        pthread_cond_timedwait(&u->cond, &u->lock, &ts);
    }
    if (c->hello_state == 0 && tfx_now_ms() >= c->hello_deadline) {
        c->hello_state = -1;
        c->hello_timed_out = 1;
        snprintf(c->why, sizeof c->why, "no answer to HELLO within %ld ms (UCX unreachable? "
                 "a firewall that lets only the HTTP port through: tfetchd's ucx-ports)",
                 c->hello_timeout_ms);
    }
    int state = c->hello_state;
    snprintf(why, why_size, "%s", state == 0 ? "UCX is still connecting" : c->why);
    pthread_mutex_unlock(&u->lock);
    return state == 1 ? TFP_OK : state == 0 ? TFP_EAGAIN
                              : c->hello_timed_out ? TFP_EBUSY : TFP_EBADREQ;
}

int tfx_ucxc_conn_feature(const tfx_ucxc_conn_t *c, const char *word)
{
    unsigned bit = tfp_uf_feature_bit(word);
    return c && (bit ? (c->feature_bits & bit) != 0 : tfp_uf_has_feature(c->features, word));
}

const char *tfx_ucxc_conn_transport(const tfx_ucxc_conn_t *c) { return c->transport; }

void tfx_ucxc_conn_watch_pid(tfx_ucxc_conn_t *c, long pid)
{
    atomic_store(&c->peer_pid, pid);
}

int tfx_ucxc_conn_broken(const tfx_ucxc_conn_t *c) { return atomic_load(&c->broken); }

void tfx_ucxc_conn_close(tfx_ucxc_conn_t *c)
{
    if (!c)
        return;
    cmd_t *cm = calloc(1, sizeof *cm);
    if (!cm) {
        atomic_store(&c->broken, 1);    /* leaks the endpoint rather than racing the thread */
        return;
    }
    cm->kind = CMD_CLOSE;
    cm->conn = c;
    post(c->u, cm);
}

/* A deferred request the caller could not send itself goes the usual way. */
static void post_deferred(tfx_ucxc_t *u, tfx_ucxc_req_t *r)
{
    cmd_t *cm = r->spare;
    r->spare = NULL;
    post(u, cm);
}

tfp_status_t tfx_ucxc_start(tfx_ucxc_conn_t *c, const tfp_uf_hdr_t *hdr,
                            const void *const *segs, const size_t *lens, size_t nsegs,
                            long timeout_ms, int flags, void *user_data, tfx_ucxc_req_t **out)
{
    if (atomic_load(&c->broken))
        return TFP_EBUSY;
    tfx_ucxc_req_t *r = req_new(c->u);
    cmd_t *cm = calloc(1, sizeof *cm);
    if (!r || !cm || !(r->iov = calloc(nsegs ? nsegs : 1, sizeof *r->iov))) {
        tfx_ucxc_req_free(r);
        free(cm);
        return TFP_ENOMEM;
    }
    r->conn = c;
    r->ud = user_data;
    r->hdr = *hdr;
    r->parts = (flags & TFX_UCXC_PARTS) != 0;
    size_t total = 0;
    for (size_t i = 0; i < nsegs; i++) {
        if (!lens[i])
            continue;
        r->iov[r->niov].buffer = (void *)segs[i];
        r->iov[r->niov].length = lens[i];
        r->niov++;
        total += lens[i];
    }
    r->hdr.body_len = total;
    r->res.bytes_sent = total;
    r->deadline_ms = timeout_ms > 0 ? tfx_now_ms() + (uint64_t)timeout_ms : 0;
    r->stall_ms = atomic_load(&c->u->stall_ms);
    r->stall_rate = atomic_load(&c->u->stall_rate);
    r->max_body = atomic_load(&c->u->max_body);
    pthread_mutex_lock(&c->u->lock);
    c->refs++;                      /* dropped by the owner when r completes */
    pthread_mutex_unlock(&c->u->lock);
    *out = r;
    cm->kind = CMD_START;
    cm->req = r;
    if (flags & TFX_UCXC_DRIVEN) {
        r->spare = cm;
        if (c->u->deferred)         /* never driven (against the contract): not stranded */
            post_deferred(c->u, c->u->deferred);
        c->u->deferred = r;
        return TFP_OK;
    }
    post(c->u, cm);
    return TFP_OK;
}

/* Takes the worker for the calling thread: at once when nobody has it, else it asks the
 * thread to yield (want) and waits for the end of its pass, spinning TAKE_SPIN_NS, then
 * sleeping. 0 if it did not get it within TAKE_MAX_MS or the thread is stopping. */
static int take_worker(tfx_ucxc_t *u)
{
    uint64_t t0 = 0;
    pthread_mutex_lock(&u->lock);
    while (u->owner != OWN_NONE) {
        uint64_t now = tfx_now_ns();
        if (!t0)
            t0 = now;
        if (u->stopping || u->thread_done || now - t0 >= (uint64_t)TAKE_MAX_MS * 1000000u) {
            u->want = 0;
            pthread_mutex_unlock(&u->lock);
            return 0;
        }
        u->want = 1;
        if (now - t0 < TAKE_SPIN_NS) {
            pthread_mutex_unlock(&u->lock);
            sched_yield();
            pthread_mutex_lock(&u->lock);
            continue;
        }
        u->caller_waits = 1;
        struct timespec ts = tfx_deadline_rt(5);
        pthread_cond_timedwait(&u->cond, &u->lock, &ts);
        u->caller_waits = 0;
    }
    u->want = 0;
    u->owner = OWN_CALLER;
    pthread_mutex_unlock(&u->lock);
    return 1;
}

/* Hands the worker back; the thread is woken only when something is left for it (requests
 * in flight, commands): otherwise it stays parked until its next tick or post. */
static void give_worker(tfx_ucxc_t *u)
{
    pthread_mutex_lock(&u->lock);
    int work = u->live != NULL || u->cmd_head != NULL;
    u->owner = OWN_NONE;
    pthread_mutex_unlock(&u->lock);
    if (work)
        tfx_ucx_base_wake(&u->base);
}

/* Progresses the worker and runs what the owner runs (rendezvous receives, deadlines, a dead
 * server) until nothing is left to do now or r completed. */
static void drive_pass(tfx_ucxc_t *u)
{
    while (ucp_worker_progress(u->worker) && !u->drive_done)
        ;
    if (!u->drive_done)
        run_cmds(u);
}

int tfx_ucxc_drive(tfx_ucxc_t *u, tfx_ucxc_req_t *r, long spin_us, long wait_ms)
{
    /* Only a deferred request is the caller's for sure: one the thread sent may have been
     * handed back early and freed since, its copy queued. So r is not read unless deferred,
     * or until the done queue, looked at while holding the worker, is empty. */
    int deferred = r == u->deferred;
    if (deferred)
        u->deferred = NULL;
    if (!take_worker(u)) {
        if (deferred)
            post_deferred(u, r);
        return 0;
    }
    if (!deferred) {
        pthread_mutex_lock(&u->lock);
        int queued = u->done_head != NULL;
        pthread_mutex_unlock(&u->lock);
        if (queued) {               /* perhaps r's own outcome: nothing to drive then */
            give_worker(u);
            return -1;
        }
    }
    u->drive_req = r;
    u->drive_done = 0;
    run_cmds(u);                    /* what was posted before goes first */
    if (deferred) {
        free(r->spare);
        r->spare = NULL;
        do_start(u, r);
    }
    uint64_t t0 = tfx_now_ns();
    uint64_t spin_end = t0 + (uint64_t)(spin_us > 0 ? spin_us : 0) * 1000u;
    uint64_t wait_end = t0 + (uint64_t)(wait_ms > 0 ? wait_ms : 0) * 1000000u;
    unsigned gen = tfx_ucxc_progress_gen(u);
    while (!u->drive_done) {
        drive_pass(u);
        uint64_t now = tfx_now_ns();
        /* A part of a body went or landed: the caller reports it; the thread goes on. */
        if (u->drive_done || now >= wait_end || tfx_ucxc_progress_gen(u) != gen)
            break;
        if (now < spin_end)
            continue;
        /* A send still out may wait for room no event announces: yield the core to the
         * peer for a while, then sleep 1 ms at a time (TFX_UCX_SEND_YIELD_NS). */
        int sending = tfx_ucxc_sends_out(u) > 0;
        if (sending && now - t0 < (uint64_t)TFX_UCX_SEND_YIELD_NS) {
            sched_yield();
            continue;
        }
        /* The reply is slow (the server was asleep, or the machine is busy): sleep on the
         * worker's event fd, leaving the CPU to the server, at most until the next deadline
         * check is due (10 ms) or the wait ends. */
        ucs_status_t st = ucp_worker_arm(u->worker);
        if (st == UCS_ERR_BUSY)
            continue;
        uint64_t left_ms = (wait_end - now) / 1000000u + 1;
        int cap = sending || st != UCS_OK ? 1 : 10;
        struct pollfd pf = {.fd = u->base.efd, .events = POLLIN};
        poll(&pf, 1, (int)(left_ms < (uint64_t)cap ? left_ms : (uint64_t)cap));
    }
    int done = u->drive_done;
    u->drive_req = NULL;
    u->drive_done = 0;
    give_worker(u);
    return done;
}

tfx_ucxc_req_t *tfx_ucxc_next(tfx_ucxc_t *u)
{
    pthread_mutex_lock(&u->lock);
    tfx_ucxc_req_t *r = u->done_head;
    if (r) {
        u->done_head = r->qnext;
        if (!u->done_head)
            u->done_tail = NULL;
    }
    pthread_mutex_unlock(&u->lock);
    return r;
}

void *tfx_ucxc_req_user_data(const tfx_ucxc_req_t *r) { return r->ud; }

unsigned tfx_ucxc_sends_out(tfx_ucxc_t *u)
{
    return atomic_load_explicit(&u->sends_out, memory_order_relaxed);
}

tfx_ucxc_result_t *tfx_ucxc_req_result(tfx_ucxc_req_t *r) { return &r->res; }

void tfx_ucxc_req_progress(tfx_ucxc_req_t *r, uint64_t *sent, uint64_t *received,
                           uint64_t *reply_total)
{
    *sent = atomic_load(&r->up_done);
    *received = atomic_load(&r->down_done);
    *reply_total = atomic_load(&r->down_total);
}

unsigned tfx_ucxc_progress_gen(tfx_ucxc_t *u) { return atomic_load(&u->progress_gen); }

void tfx_ucxc_req_free(tfx_ucxc_req_t *r)
{
    if (!r)
        return;
    free(r->spare);
    tfx_buf_free(r->res.body, r->res.body_cap);
    free(r->iov);
    free(r->piov);
    free(r->phbuf);
    tfx_ucxc_t *u = r->u;
    pthread_mutex_lock(&u->lock);
    int kept = tfx_spare_put(&u->spare, r);
    pthread_mutex_unlock(&u->lock);
    if (!kept)
        free(r);
}

/* Once the thread is out of its loop: closes what is left (UCX returns every operation
 * while the worker goes) and frees everything. */
static void cleanup(tfx_ucxc_t *u)
{
    for (size_t i = 0; i < u->nconns; i++)
        close_ep(u->conns[i], 1);
    for (int i = 0; i < 100 && u->live; i++)
        ucp_worker_progress(u->worker);
    /* Closes in flight (a flush) finish before the worker goes: UCX 1.13 destroying a worker
     * with a wireup message still queued on a tcp endpoint fails an assertion (abort). */
    for (uint64_t until = tfx_now_ms() + (uint64_t)CLOSE_WAIT_MS;
         atomic_load(&u->closing) && tfx_now_ms() < until;)
        if (!ucp_worker_progress(u->worker))
            tfx_ucx_base_sleep(&u->base, 1);
    tfx_ucx_base_close(&u->base);
    while (u->live) {
        tfx_ucxc_req_t *r = u->live;
        u->live = r->next;
        tfx_ucxc_req_free(r);
    }
    tfx_ucxc_req_t *r;
    while ((r = tfx_ucxc_next(u)))
        tfx_ucxc_req_free(r);
    tfx_spare_free_all(&u->spare);
    for (size_t i = 0; i < u->nconns; i++)
        free(u->conns[i]);
    free(u->conns);
    free(u->self_addr);
    pthread_mutex_destroy(&u->lock);
    pthread_cond_destroy(&u->cond);
    free(u);
}

/* Stops the thread, waiting STOP_WAIT_MS at most: a thread still inside UCX then (a call that
 * blocks on the network) is left to finish, and frees everything itself when it does; it
 * wakes and completes nothing any more, so the caller may go. */
const char *tfx_ucxc_memory(const tfx_ucxc_t *u) { return u->base.memory_types; }
int tfx_ucxc_no_shm(const tfx_ucxc_t *u) { return u->no_shm; }

void tfx_ucxc_free(tfx_ucxc_t *u)
{
    if (!u)
        return;
    uint64_t deadline = tfx_now_ms() + (uint64_t)STOP_WAIT_MS;
    pthread_mutex_lock(&u->lock);
    u->stopping = 1;
    pthread_mutex_unlock(&u->lock);
    tfx_ucx_base_wake(&u->base);
    pthread_mutex_lock(&u->lock);
    while (!u->thread_done && tfx_now_ms() < deadline) {
        struct timespec ts = tfx_deadline_rt(20);
        pthread_cond_timedwait(&u->cond, &u->lock, &ts);
    }
    if (!u->thread_done) {
        u->abandoned = 1;
        u->wake = NULL;
        pthread_mutex_unlock(&u->lock);
        pthread_detach(u->thread);
        return;
    }
    pthread_mutex_unlock(&u->lock);
    pthread_join(u->thread, NULL);
    cleanup(u);
}
