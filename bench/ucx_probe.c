/* ucx_probe.c - ucx-probe, the experiments and fault tests behind bench/README.md's answers
 * about raw UCX: what the ceiling (ucx-raw, ucx_raw.c) does not do.
 *
 * The same request/ack over one endpoint as ucx-raw (ucx_common.c: the wire format, the
 * server, the measurement), with what ucx-raw leaves out: NET_ONLY worker addresses, sleeping
 * progress (UCP_FEATURE_WAKEUP, ucp_worker_get_efd/ucp_worker_arm), thread modes and a
 * progress thread that owns the client's worker (the main thread posting under a lock, or
 * handing its sends to the progress thread), one more UCX setting for both sides, and the
 * kill tests: a server that SIGKILLs itself on receiving a request (what does the client see,
 * what does a next request see, how does the endpoint close), and a client that SIGKILLs
 * itself 2 ms after posting one (what does the server's receive see). Also a server and a
 * client run by hand (--server, --client ADDR), on one host or two.
 *
 * Default run: a memcpy baseline, then every experiment (--experiments says the same); any
 * setup option, or --sizes/--chunked alone, runs that one setup instead. Each setup is a
 * server/client pair of forked processes, with a time limit.
 *
 * Threads: one, except the client's progress thread (--progress-thread): it owns the worker
 * and, with "queue", posts the main thread's sends; the main thread waits on a condition
 * variable. Callbacks write the client's atomics.
 *
 * Output: one JSON line per measurement or kill test on stdout, the human table on stderr
 * (--json: no table). Exit status 0 if everything ran, 1 if anything failed, 2 on a usage
 * error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <ucp/api/ucp.h>

#include "bench/common.h"

#include "bench/ucx_common.h"

#define MAX_CONFIGS 40
#define KILL_WAIT_MS_DEFAULT 10000L
#define MAX_SECONDS_DEFAULT 100     /* a plan's limit (--experiments: 400) */

static const char *const default_sizes = "8,64K,4M,64M,256M";
static const char *const default_chunked = "64M,256M";

const char *const bench_prog = "ucx-probe";

/* A server_hook_t: the kill-client test, from the server's side. Once the receive has failed
 * or --kill-wait-ms has passed since the request began: did it fail, and when? */
static int srv_report_client_kill(const server_view_t *s, const config_t *c, const opts_t *o)
{
    const char *outcome;
    double ms;

    if (!(s->recv_failed || (s->req_t > 0 && tfx_now_s() - s->req_t >
                                                 (double)o->kill_wait_ms / 1000)))
        return 0;
    outcome = s->recv_failed ? "recv-error"
                          : s->id <= 1 ? "no-request" /* only the HELLO came */
                          : s->got >= s->total ? "completed" : "hang";
    ms = ((s->recv_failed ? s->recv_fail_t : tfx_now_s()) - s->req_t) * 1e3;

    jprint("{\"bench\":\"ucx-client-kill\",");
    json_config(c);
    jprint(",\"bytes\":%" PRIu64 ",\"received\":%" PRIu64 ",\"outcome\":\"%s\","
           "\"recv_status\":\"%s\",\"after_ms\":%.1f,\"waited_ms\":%ld}\n", s->total, s->got,
           outcome, s->recv_failed ? ucs_status_string(s->recv_status) : "none", ms,
           o->kill_wait_ms);
    fflush(ucxb_json());
    if (!o->json_only)
        fprintf(stderr, "client-kill %-14s server: %s%s%s after %.1f ms (%" PRIu64 " of %" PRIu64
                " bytes)\n", c->name, outcome, s->recv_failed ? ": " : "",
                s->recv_failed ? ucs_status_string(s->recv_status) : "", ms, s->got, s->total);
    return 1;
}

/* Runs a server until a client says OP_QUIT (or idle_s passes without a message; 0: never).
 * Its worker address goes to addr_fd (length-prefixed) or, if addr_fd < 0, to addr_file or
 * stdout as hex. */
/* ---- client --------------------------------------------------------------------------- */

typedef struct {
    ucx_t u;
    const config_t *cfg;
    const opts_t *o;
    ucp_ep_h ep;
    ucs_thread_mode_t granted;
    char transport[64];
    char lanes[1024];           /* JSON array body */
    char am_send[160];          /* the protocol thresholds line */
    uint64_t next_id;
    /* the request in flight: prepared by the main thread, posted by cli_post */
    req_hdr_t *hdrs;
    size_t nhdrs;               /* capacity */
    size_t npieces;             /* messages of the request in flight */
    atomic_int job;             /* PT_QUEUE: the progress thread is to post it */
    atomic_int posted;          /* messages posted (-1: not yet) */
    /* written by callbacks (maybe on the progress thread) */
    atomic_int acked;
    ack_hdr_t ack;
    atomic_int sends_done;
    atomic_int send_status;     /* first error status of a send */
    atomic_int ep_failed;
    atomic_int ep_status;
    double ep_fail_t;
    double send_done_t;
    /* progress thread */
    pthread_t pt;
    int pt_running;
    atomic_int pt_stop;
    pthread_mutex_t wlock;      /* SERIALIZED + PT_LOCK: our own lock around worker calls */
    pthread_mutex_t mtx;        /* with cv: the main thread waits for callbacks */
    pthread_cond_t cv;
    /* the buffer sent */
    unsigned char *buf;
    size_t cap;
    unsigned long sleeps;
} client_t;

static void cli_wake(client_t *c)
{
    if (c->cfg->progress_thread == PT_NONE)
        return;
    pthread_mutex_lock(&c->mtx);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mtx);
}

static ucs_status_t cli_ack_cb(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param)
{
    client_t *c = arg;

    (void)data;
    (void)length;
    (void)param;
    if (header_length == sizeof c->ack) {
        memcpy(&c->ack, header, sizeof c->ack);
        atomic_store(&c->acked, 1);
    } else {
        bench_errorf("client: ack header of %zu bytes", header_length);
    }
    cli_wake(c);
    return UCS_OK;
}

static void cli_send_cb(void *req, ucs_status_t st, void *user_data)
{
    client_t *c = user_data;
    int expect = UCS_OK;

    if (st != UCS_OK)
        atomic_compare_exchange_strong(&c->send_status, &expect, (int)st);
    ucp_request_free(req);
    c->send_done_t = tfx_now_s();
    atomic_fetch_add(&c->sends_done, 1);
    cli_wake(c);
}

static void cli_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    client_t *c = arg;

    (void)ep;
    c->ep_fail_t = tfx_now_s();
    atomic_store(&c->ep_status, (int)st);
    atomic_store(&c->ep_failed, 1);
    cli_wake(c);
}

/* Posts the c->npieces messages prepared in c->hdrs. The caller owns the worker (single
 * thread, our lock, UCX's lock in MULTI, or it is the progress thread). On a failed post,
 * records the status in send_status and stops. Sets c->posted. */
static void cli_post(client_t *c)
{
    int immediate = 0, err = UCS_OK, expect = UCS_OK;
    size_t i = post_hdrs(c->ep, c->hdrs, c->npieces, c->buf, cli_send_cb, c, &immediate, &err);

    if (err != UCS_OK)
        atomic_compare_exchange_strong(&c->send_status, &expect, err);
    if (immediate) {
        c->send_done_t = tfx_now_s();
        atomic_fetch_add(&c->sends_done, immediate);
    }
    atomic_store(&c->posted, (int)i);
}

static void *cli_progress_main(void *arg)
{
    client_t *c = arg;
    int ser = c->cfg->progress_thread == PT_LOCK && c->cfg->thread_mode != TM_MULTI;
    unsigned n;
    ucs_status_t st;
    struct epoll_event ev;

    while (!atomic_load(&c->pt_stop)) {
        if (ser)
            pthread_mutex_lock(&c->wlock);
        if (atomic_load(&c->job)) {             /* PT_QUEUE: post for the main thread */
            atomic_store(&c->job, 0);
            cli_post(c);
        }
        n = ucp_worker_progress(c->u.w);
        st = UCS_ERR_BUSY;
        if (!n && c->cfg->wakeup)
            st = ucp_worker_arm(c->u.w);
        if (ser)
            pthread_mutex_unlock(&c->wlock);
        if (st == UCS_OK && !atomic_load(&c->job) && !atomic_load(&c->pt_stop)) {
            /* ucp_worker_signal (after a post or a job) wakes it */
            while (epoll_wait(c->u.epfd, &ev, 1, 100) < 0 && errno == EINTR)
                ;
            c->sleeps++;
        }
    }
    return NULL;
}

static void cli_lock(client_t *c)
{
    if (c->cfg->progress_thread == PT_LOCK && c->cfg->thread_mode != TM_MULTI)
        pthread_mutex_lock(&c->wlock);
}

static void cli_unlock(client_t *c)
{
    if (c->cfg->progress_thread == PT_LOCK && c->cfg->thread_mode != TM_MULTI)
        pthread_mutex_unlock(&c->wlock);
    if (c->cfg->progress_thread != PT_NONE && c->cfg->wakeup)
        ucp_worker_signal(c->u.w);      /* the progress thread may be asleep */
}

/* Waits until the request in flight is acked and nsends sends are complete (0), the endpoint
 * fails or a send fails (-1), or the deadline passes (-2). With stop_on_error 0, keeps waiting
 * through errors until the deadline or the ack. */
static int cli_wait(client_t *c, int nsends, double deadline, int stop_on_error)
{
    unsigned long spins = 0;

    for (;;) {
        if (atomic_load(&c->acked) && atomic_load(&c->sends_done) >= nsends)
            return 0;
        if (stop_on_error && (atomic_load(&c->ep_failed) || atomic_load(&c->send_status)))
            return -1;
        if (c->cfg->progress_thread != PT_NONE) {
            struct timespec ts;
            if (tfx_now_s() > deadline)
                return -2;
            pthread_mutex_lock(&c->mtx);
            if (!(atomic_load(&c->acked) && atomic_load(&c->sends_done) >= nsends) &&
                !atomic_load(&c->ep_failed) && !atomic_load(&c->send_status)) {
                ts = tfx_deadline_rt(50);
                pthread_cond_timedwait(&c->cv, &c->mtx, &ts);
            }
            pthread_mutex_unlock(&c->mtx);
            continue;
        }
        if (ucp_worker_progress(c->u.w))
            continue;
        if (c->cfg->wakeup) {
            if (ucx_sleep(&c->u, 100, &c->sleeps) < 0)
                return -1;
            if (tfx_now_s() > deadline)
                return -2;
        } else if ((++spins & 0x3ff) == 0 && tfx_now_s() > deadline) {
            return -2;
        }
    }
}

/* Prepares a request of n bytes from c->buf (chunk 0: one message; else messages of chunk
 * bytes, all in flight) in c->hdrs; returns its id, 0 if out of memory. */
static uint64_t cli_prepare(client_t *c, uint16_t op, uint16_t flags, size_t n, size_t chunk,
                            uint64_t seed)
{
    uint64_t id = ++c->next_id;
    size_t pieces = prepare_hdrs(&c->hdrs, &c->nhdrs, id, op, flags, n, chunk, seed);

    if (!pieces)
        return 0;
    c->npieces = pieces;
    atomic_store(&c->acked, 0);
    atomic_store(&c->sends_done, 0);
    atomic_store(&c->posted, -1);
    return id;
}

/* After a failed request: the messages posted still refer to hdrs and buf, so let them
 * complete, until the deadline (a send to a dead peer may never complete). */
static void cli_drain(client_t *c, double deadline)
{
    while ((atomic_load(&c->posted) < 0 ||
            atomic_load(&c->sends_done) < atomic_load(&c->posted)) && tfx_now_s() < deadline) {
        if (c->cfg->progress_thread == PT_NONE)
            ucp_worker_progress(c->u.w);
        else
            usleep(1000);
    }
}

/* Sends one request (see cli_prepare) and waits for its ack. Returns 0 and *ack, or -1 with
 * the reason printed. */
static int cli_request(client_t *c, uint16_t op, uint16_t flags, size_t n, size_t chunk,
                       uint64_t seed, ack_hdr_t *ack)
{
    uint64_t id = cli_prepare(c, op, flags, n, chunk, seed);
    int rc;

    if (!id)
        return -1;
    if (c->cfg->progress_thread == PT_QUEUE) {
        atomic_store(&c->job, 1);
        if (c->cfg->wakeup)
            ucp_worker_signal(c->u.w);
    } else {
        cli_lock(c);
        cli_post(c);
        cli_unlock(c);
    }
    rc = cli_wait(c, (int)c->npieces, tfx_now_s() + (double)c->o->timeout_ms / 1000, 1);
    if (rc != 0) {
        if (rc == -2)
            bench_errorf("client: no ack within %ld ms (op %u, %zu bytes)", c->o->timeout_ms, op,
                         n);
        else
            bench_errorf("client: request failed: %s", atomic_load(&c->ep_failed)
                         ? ucs_status_string((ucs_status_t)atomic_load(&c->ep_status))
                         : ucs_status_string((ucs_status_t)atomic_load(&c->send_status)));
        cli_drain(c, tfx_now_s() + 2);
        return -1;
    }
    *ack = c->ack;
    return check_ack(ack, id, op, n);
}

/* A request_fn_t for ucxb_measure. */
static int cli_request_fn(void *c, uint16_t op, uint16_t flags, size_t n, size_t chunk,
                          uint64_t seed, ack_hdr_t *ack)
{
    return cli_request(c, op, flags, n, chunk, seed, ack);
}

static void cli_describe_ep(client_t *c)
{
    cli_lock(c);
    describe_ep(c->ep, c->cfg->name, c->o->info, c->transport, sizeof c->transport, c->lanes,
                sizeof c->lanes, c->am_send, sizeof c->am_send);
    cli_unlock(c);
}

static int cli_connect(client_t *c, const void *addr, size_t addr_len)
{
    ucp_worker_attr_t wa;

    memset(&wa, 0, sizeof wa);
    wa.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
    c->granted = ucp_worker_query(c->u.w, &wa) == UCS_OK ? wa.thread_mode
                                                         : UCS_THREAD_MODE_SINGLE;
    (void)addr_len;
    return connect_ep(c->u.w, c->cfg, addr, c->o->info, cli_ack_cb, cli_ep_err_cb, c, &c->ep);
}

static void cli_close(client_t *c, int force)
{
    if (c->pt_running) {
        atomic_store(&c->pt_stop, 1);
        if (c->cfg->wakeup)
            ucp_worker_signal(c->u.w);
        pthread_join(c->pt, NULL);
        c->pt_running = 0;
    }
    close_ep(c->u.w, c->ep, force);
    c->ep = NULL;
}

static const char *status_name(int st)
{
    return st == UCS_OK ? "OK" : ucs_status_string((ucs_status_t)st);
}

/* The server dies (SIGKILL) on receiving a request of n bytes (before it takes the data of a
 * rendezvous); what does the client see, and when? Then: what does a new request see? */
static int cli_kill_test(client_t *c, size_t n)
{
    double t0, deadline, t_send = -1, t_ep = -1;
    ack_hdr_t ack;
    const char *outcome, *probe;
    char sz[32], probe_buf[96], close_buf[128];
    int nsends, send_st, ep_st, immediate, outstanding;

    /* a full round trip first, so that the endpoint is wired up */
    if (cli_request(c, OP_HELLO, 0, 0, 0, 0, &ack) != 0)
        return -1;
    if (!cli_prepare(c, OP_DIE, 0, n, 0, 0))
        return -1;
    c->send_done_t = -1;
    t0 = tfx_now_s();
    cli_post(c);
    nsends = atomic_load(&c->posted);
    immediate = atomic_load(&c->sends_done) >= 1;  /* ucp_am_send_nbx returned NULL */
    deadline = t0 + (double)c->o->kill_wait_ms / 1000;
    /* wait for the ack that cannot come: until the endpoint fails (PEER) or the deadline */
    while (cli_wait(c, nsends, deadline, 1) == 0 && !atomic_load(&c->ep_failed) &&
           tfx_now_s() < deadline)
        ;
    if (atomic_load(&c->ep_failed))
        t_ep = c->ep_fail_t - t0;
    /* after an endpoint error, a little longer so the send's own completion shows */
    if (t_ep >= 0 && atomic_load(&c->sends_done) < nsends)
        cli_wait(c, nsends, tfx_now_s() + 1, 0);
    if (atomic_load(&c->sends_done) >= 1 || atomic_load(&c->send_status))
        t_send = c->send_done_t - t0;
    send_st = atomic_load(&c->send_status);
    ep_st = atomic_load(&c->ep_status);
    if (atomic_load(&c->acked))
        outcome = "acked?!";
    else if (t_ep >= 0)
        outcome = "error-callback";
    else if (atomic_load(&c->send_status))
        outcome = "send-error";
    else
        outcome = "hang";

    /* a new 8 B request on the same endpoint, 2 s to answer */
    {
        int before_ep = atomic_load(&c->ep_failed), rc;
        if (!cli_prepare(c, OP_HELLO, 0, 0, 0, 0))
            return -1;
        atomic_store(&c->send_status, UCS_OK);
        cli_post(c);
        rc = cli_wait(c, atomic_load(&c->posted), tfx_now_s() + 2, 1);
        if (atomic_load(&c->posted) < 1 || atomic_load(&c->send_status))
            snprintf(probe_buf, sizeof probe_buf, "send error: %s",
                     status_name(atomic_load(&c->send_status)));
        else if (rc == 0)
            snprintf(probe_buf, sizeof probe_buf, "acked?!");
        else if (!before_ep && atomic_load(&c->ep_failed))
            snprintf(probe_buf, sizeof probe_buf, "ep error: %s",
                     status_name(atomic_load(&c->ep_status)));
        else
            snprintf(probe_buf, sizeof probe_buf, "no answer in 2 s (send %s)",
                     atomic_load(&c->sends_done) >= 1 ? "completed" : "pending");
        probe = probe_buf;
    }
    /* sends not complete yet: the killed request's and the probe's */
    outstanding = (nsends - (t_send >= 0 ? nsends : 0)) +
                  (atomic_load(&c->posted) - atomic_load(&c->sends_done));

    /* then close the endpoint (--kill-close), 3 s at most */
    {
        ucp_request_param_t cp;
        double tc = tfx_now_s(), until = tc + 3, tdone;
        int force = c->o->kill_close ? c->o->kill_close == 1 : c->cfg->err_peer;
        int done0 = atomic_load(&c->sends_done);
        ucs_status_t cst;
        void *r;

        atomic_store(&c->send_status, UCS_OK);
        memset(&cp, 0, sizeof cp);
        cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        cp.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
        r = ucp_ep_close_nbx(c->ep, &cp);
        c->ep = NULL;
        if (UCS_PTR_IS_ERR(r)) {
            cst = UCS_PTR_STATUS(r);
        } else if (r == NULL) {
            cst = UCS_OK;
        } else {
            while ((cst = ucp_request_check_status(r)) == UCS_INPROGRESS && tfx_now_s() < until)
                ucp_worker_progress(c->u.w);
            if (cst != UCS_INPROGRESS)
                ucp_request_free(r);
        }
        tdone = tfx_now_s();
        while (tfx_now_s() < tdone + 0.2)   /* let completions of cancelled sends arrive */
            ucp_worker_progress(c->u.w);
        if (cst == UCS_INPROGRESS)
            snprintf(close_buf, sizeof close_buf, "%s close: still in progress after 3 s",
                     force ? "force" : "flush");
        else
            snprintf(close_buf, sizeof close_buf, "%s close: %s %s%.1f ms",
                     force ? "force" : "flush", status_name(cst),
                     r && !UCS_PTR_IS_ERR(r) ? "after " : "at once, ", (tdone - tc) * 1e3);
        snprintf(close_buf + strlen(close_buf), sizeof close_buf - strlen(close_buf),
                 "; %d of %d pending sends completed (%s)",
                 atomic_load(&c->sends_done) - done0, outstanding,
                 status_name(atomic_load(&c->send_status)));
    }

    jprint("{\"bench\":\"ucx-kill\",");
    json_config(c->cfg);
    jprint(",\"transport\":\"%s\",\"bytes\":%zu,\"outcome\":\"%s\",\"ep_error\":\"%s\","
           "\"ep_error_ms\":%.1f,\"send_status\":\"%s\",\"send_done_ms\":%.1f,"
           "\"send_immediate\":%d,\"waited_ms\":%ld,\"next_request\":\"%s\",\"close\":\"%s\"}\n",
           c->transport, n, outcome, t_ep >= 0 ? status_name(ep_st) : "none",
           t_ep >= 0 ? t_ep * 1e3 : -1, t_send >= 0 ? status_name(send_st) : "pending",
           t_send >= 0 ? t_send * 1e3 : -1, immediate, c->o->kill_wait_ms, probe, close_buf);
    fflush(ucxb_json());
    if (!c->o->json_only) {
        fprintf(stderr, "kill %-14s %-13s %-7s: %s; ep error: %s", c->cfg->name,
                c->transport, bench_fmt_size(n, sz, sizeof sz), outcome,
                t_ep >= 0 ? status_name(ep_st) : "none");
        if (t_ep >= 0)
            fprintf(stderr, " after %.1f ms", t_ep * 1e3);
        fprintf(stderr, "; send: %s", t_send >= 0 ? status_name(send_st) : "still pending");
        if (immediate)
            fprintf(stderr, " at once");
        else if (t_send >= 0)
            fprintf(stderr, " after %.1f ms", t_send * 1e3);
        fprintf(stderr, " (waited %ld ms); next request: %s; %s\n", c->o->kill_wait_ms, probe,
                close_buf);
    }
    return 0;
}

/* Runs the client side of config c against the server whose worker address is addr. */
static int run_client(const config_t *c, const opts_t *o, const void *addr, size_t addr_len)
{
    client_t cl;
    ack_hdr_t ack;
    size_t maxn = config_max_size(c);
    int i, failures = 0;
    double t0;

    memset(&cl, 0, sizeof cl);
    cl.cfg = c;
    cl.o = o;
    pthread_mutex_init(&cl.wlock, NULL);
    pthread_mutex_init(&cl.mtx, NULL);
    pthread_cond_init(&cl.cv, NULL);
    if (!(cl.buf = alloc_touched(maxn, 0))) {
        bench_errorf("client: out of memory (%zu bytes)", maxn);
        return 1;
    }
    cl.cap = maxn;
    if (ucx_open(&cl.u, c, c->thread_mode, "client") != 0) {
        failures++;
        goto out;
    }
    if (cli_connect(&cl, addr, addr_len) != 0) {
        jprint("{\"bench\":\"ucx-ep\",");
        json_config(c);
        jprint(",\"transport\":\"none\",\"error\":\"ucp_ep_create failed\"}\n");
        fflush(ucxb_json());
        if (!o->json_only)
            fprintf(stderr, "%s: no endpoint (ucp_ep_create failed)%s\n", c->name,
                    c->expect_fail ? ", as expected" : "");
        failures += !c->expect_fail;
        goto out;
    }
    if (c->progress_thread != PT_NONE) {
        if (pthread_create(&cl.pt, NULL, cli_progress_main, &cl) != 0) {
            bench_errorf("client: pthread_create failed");
            failures++;
            goto out;
        }
        cl.pt_running = 1;
    }
    t0 = tfx_now_s();
    if (cli_request(&cl, OP_HELLO, 0, 0, 0, 0, &ack) != 0) {
        bench_errorf("%s: the first round trip failed", c->name);
        failures++;
        goto out;
    }
    cli_describe_ep(&cl);
    emit_ep(c, o, cl.granted, cl.transport, (tfx_now_s() - t0) * 1e3, cl.lanes, cl.am_send);
    if (c->kill_client) {
        /* post the request, give it 2 ms to get going, die; the server reports */
        double t1;
        bench_fill_pattern(cl.buf, c->sizes[0], c->sizes[0]);
        if (!cli_prepare(&cl, OP_DATA, 0, c->sizes[0], 0, c->sizes[0]))
            _exit(1);
        cli_post(&cl);
        for (t1 = tfx_now_s(); tfx_now_s() - t1 < 0.002;)
            ucp_worker_progress(cl.u.w);
        fflush(ucxb_json());
        fflush(stderr);
        raise(SIGKILL);
    }
    if (c->kill_test) {
        bench_fill_pattern(cl.buf, c->sizes[0], c->sizes[0]);
        if (cli_kill_test(&cl, c->sizes[0]) != 0) {
            failures++;
        } else {
            /* and the worker: does destroying it hang with a dead peer? (SIGALRM if so) */
            double td = tfx_now_s();
            fflush(ucxb_json());
            alarm(5);
            ucx_close(&cl.u);
            alarm(0);
            jprint("{\"bench\":\"ucx-kill-teardown\",");
            json_config(c);
            jprint(",\"worker_destroy_ms\":%.1f}\n", (tfx_now_s() - td) * 1e3);
            if (!o->json_only)
                fprintf(stderr, "kill %-14s worker destroyed in %.1f ms\n", c->name,
                        (tfx_now_s() - td) * 1e3);
        }
        fflush(ucxb_json());
        fflush(stderr);
        _exit(failures ? 1 : 0);
    }
    for (i = 0; i < c->nsizes; i++) {
        bench_fill_pattern(cl.buf, c->sizes[i], c->sizes[i]);
        if (ucxb_measure(c, o, cli_request_fn, &cl, &cl.sleeps, cl.transport, c->sizes[i], 0,
                         "single") != 0)
            failures++;
    }
    for (i = 0; i < c->nchunked; i++) {
        if (c->chunked[i] <= o->chunk)
            continue;
        bench_fill_pattern(cl.buf, c->chunked[i], c->chunked[i]);
        if (ucxb_measure(c, o, cli_request_fn, &cl, &cl.sleeps, cl.transport, c->chunked[i],
                         o->chunk, "chunked") != 0)
            failures++;
    }
    if (cli_request(&cl, OP_QUIT, 0, 0, 0, 0, &ack) != 0)
        failures++;
out:
    cli_close(&cl, 0);
    ucx_close(&cl.u);
    free_touched(cl.buf, cl.cap);
    free(cl.hdrs);
    return failures ? 1 : 0;
}

static double pair_limit_s(const config_t *c, const opts_t *o)
{
    if (c->kill_test || c->kill_client)
        return (double)(o->kill_wait_ms + 2 * o->timeout_ms) / 1000 + PAIR_SLACK_S;
    return 120 + PAIR_SLACK_S;
}

static int run_pair(const config_t *c, const opts_t *o, double run_deadline)
{
    pid_t spid, cpid;
    uint32_t len = 0;
    unsigned char *addr = NULL;
    int status = 0, failures = 0, client_ok = 0;
    double deadline = tfx_now_s() + pair_limit_s(c, o);

    if (deadline > run_deadline)
        deadline = run_deadline;
    if (fork_server(c, o, pair_limit_s(c, o), c->kill_client ? srv_report_client_kill : NULL,
                    &spid, &addr, &len) != 0)
        return 1;
    cpid = fork();
    if (cpid < 0) {
        bench_errorf("fork: %s", strerror(errno));
        kill(spid, SIGKILL);
        waitpid(spid, &status, 0);
        free(addr);
        return 1;
    }
    if (cpid == 0) {
        int rc;
        child_setup();
        rc = run_client(c, o, addr, len);
        fflush(ucxb_json());
        fflush(stderr);
        _exit(rc);
    }
    free(addr);
    if (wait_child(cpid, deadline, &status) != 0) {
        bench_errorf("%s: the client did not finish in time (killed)", c->name);
        failures++;
    } else if (c->kill_client && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
        /* as planned; the server says what it saw */
    } else if (WIFSIGNALED(status)) {
        bench_errorf("%s: the client was killed by signal %d (%s)", c->name, WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        if (c->kill_test) {
            jprint("{\"bench\":\"ucx-kill\",");
            json_config(c);
            jprint(",\"bytes\":%zu,\"outcome\":\"client-killed-by-signal-%d%s\"}\n", c->sizes[0],
                   WTERMSIG(status), WTERMSIG(status) == SIGALRM ? " (teardown hung 5 s)" : "");
            fflush(ucxb_json());
        }
        failures++;
    } else if (WEXITSTATUS(status) != 0) {
        failures++;
    } else {
        client_ok = 1;
    }
    /* a client that finished well told the server to quit; otherwise it is not waited for */
    if (c->kill_client) {
        if (wait_child(spid, tfx_now_s() + (double)o->kill_wait_ms / 1000 + 10, &status) != 0) {
            bench_errorf("%s: the server did not report (killed)", c->name);
            failures++;
        } else if (WIFSIGNALED(status)) {
            bench_errorf("%s: the server died by signal %d (%s)", c->name, WTERMSIG(status),
                         strsignal(WTERMSIG(status)));
            jprint("{\"bench\":\"ucx-client-kill\",");
            json_config(c);
            jprint(",\"bytes\":%zu,\"outcome\":\"server-died-by-signal-%d\"}\n", c->sizes[0],
                   WTERMSIG(status));
            fflush(ucxb_json());
            failures++;
        } else if (WEXITSTATUS(status) != 0) {
            failures++;
        }
        return failures;
    }
    if (wait_child(spid, tfx_now_s() + (c->kill_test || !client_ok || c->expect_fail ? 1 : 10),
                   &status) != 0) {
        if (!c->kill_test && client_ok && !c->expect_fail) {
            bench_errorf("%s: the server did not exit (killed)", c->name);
            failures++;
        }
    } else if (c->kill_test) {
        if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
            bench_errorf("%s: the server should have died by SIGKILL", c->name);
            failures++;
        }
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        bench_errorf("%s: the server failed (wait status %d)", c->name, status);
        failures++;
    }
    return failures;
}

static int plan_experiments(config_t *plan)
{
    int n = 0;
    config_t *c;
    static const char *const kill_tls[2] = {NULL, "tcp"};
    int i, e, k;

    /* (a) PEER error handling with shared memory only: no transport qualifies */
    c = add_config(plan, &n, "shmonly-peer", "sysv,posix,cma", 1, "8", "");
    c->expect_fail = 1;
    /* (b) NET_ONLY worker address */
    c = add_config(plan, &n, "netonly", NULL, 0, "8,64M", "");
    c->net_only = 1;
    /* (c) sleeping progress on the worker's efd, both sides */
    add_config(plan, &n, "busy", NULL, 0, "8,64K,64M", "");
    c = add_config(plan, &n, "wakeup", NULL, 0, "8,64K,64M", "");
    c->wakeup = 1;
    c = add_config(plan, &n, "wakeup-posix", "posix,cma", 0, "8,64M", "");
    c->wakeup = 1;
    c = add_config(plan, &n, "wakeup-tcp", "tcp", 0, "8,64M", "");
    c->wakeup = 1;
    /* (e) thread modes; a progress thread owning the worker */
    c = add_config(plan, &n, "tm-serialized", NULL, 0, "8,64M", "");
    c->thread_mode = TM_SERIALIZED;
    c = add_config(plan, &n, "tm-multi", NULL, 0, "8,64M", "");
    c->thread_mode = TM_MULTI;
    c = add_config(plan, &n, "pt-lock-multi", NULL, 0, "8,64M", "");
    c->thread_mode = TM_MULTI;
    c->progress_thread = PT_LOCK;
    c = add_config(plan, &n, "pt-lock-m-mutex", NULL, 0, "8,64M", "");
    c->thread_mode = TM_MULTI;
    c->progress_thread = PT_LOCK;
    c->opt_name = "USE_MT_MUTEX";
    c->opt_value = "y";
    c = add_config(plan, &n, "pt-lock-ser", NULL, 0, "8,64M", "");
    c->thread_mode = TM_SERIALIZED;
    c->progress_thread = PT_LOCK;
    c = add_config(plan, &n, "pt-queue", NULL, 0, "8,64M", "");
    c->progress_thread = PT_QUEUE;
    c = add_config(plan, &n, "pt-lock-m-wake", NULL, 0, "8,64M", "");
    c->thread_mode = TM_MULTI;
    c->progress_thread = PT_LOCK;
    c->wakeup = 1;
    c = add_config(plan, &n, "pt-queue-wake", NULL, 0, "8,64M", "");
    c->progress_thread = PT_QUEUE;
    c->wakeup = 1;
    /* (d) the client dies mid-request (the server's view) */
    for (i = 0; i < 2; i++)
        for (e = 0; e < 2; e++) {
            char name[40];
            snprintf(name, sizeof name, "ckill-%s-%s", i ? "tcp" : "shm", e ? "peer" : "none");
            c = add_config(plan, &n, name, kill_tls[i], e, "64M", "");
            c->kill_client = 1;
        }
    /* (d) the server dies mid-request */
    for (i = 0; i < 2; i++)
        for (e = 0; e < 2; e++)
            for (k = 0; k < 2; k++) {
                char name[40];
                snprintf(name, sizeof name, "kill-%s-%s", i ? "tcp" : "shm", e ? "peer" : "none");
                c = add_config(plan, &n, name, kill_tls[i], e, k ? "64M" : "8", "");
                c->kill_test = 1;
            }
    return n;
}

/* ---- main ----------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: ucx-probe [options]               the experiments (--experiments: the same)\n"
        "       ucx-probe SETUP-OPTIONS [options]  one setup, forked server+client\n"
        "       ucx-probe --server [--addr-file F] [setup options]\n"
        "       ucx-probe --client ADDR|@FILE [setup options] [options]\n"
        "Raw UCX active-message request/ack experiments and kill tests (the ceiling: ucx-raw).\n"
        "JSON lines go to stdout, the human table to stderr.\n"
        "\n"
        "Experiments: NET_ONLY, sleeping progress, thread modes and progress threads, and\n"
        "  kill tests (server and client, shm and tcp, error mode none and peer).\n"
        "  Any setup option below, or --sizes/--chunked alone, runs that one setup instead.\n"
        "\n"
        "Setup options:\n"
        "  --tls LIST          UCX_TLS for both sides (e.g. tcp, sysv,cma)\n"
        "  --err-mode none|peer  the client endpoint's error handling mode\n"
        "  --net-only          the server's address with UCP_WORKER_ADDRESS_FLAG_NET_ONLY\n"
        "  --wakeup            UCP_FEATURE_WAKEUP; both sides sleep on ucp_worker_get_efd\n"
        "  --thread-mode single|serialized|multi   the client worker's thread mode\n"
        "  --progress-thread lock|queue   client: a thread progresses the worker; the main\n"
        "                      thread posts the sends itself (lock: under our mutex, or UCX's\n"
        "                      lock with --thread-mode multi) or hands them to it (queue)\n"
        "  --kill-test         the server SIGKILLs itself on the (first size's) request\n"
        "  --kill-client       the client SIGKILLs itself 2 ms after posting that request;\n"
        "                      the server reports what it saw within --kill-wait-ms\n"
        "Options:\n"
        "  --sizes LIST        payload sizes (default %s; K/M/G binary)\n"
        "  --chunked LIST      sizes also sent as chunks in flight (default %s; none)\n"
        "  --chunk SIZE        chunk size (default 4M)\n"
        "  --reps N, --warmup N  timed/untimed repetitions (default by size)\n"
        "  --timeout-ms MS     per request (default %ld)\n"
        "  --kill-wait-ms MS   how long the kill test waits for an error (default %ld)\n"
        "  --kill-close force|flush   how the kill test closes its endpoint (default: force\n"
        "                      with --err-mode peer, flush with none)\n"
        "  --max-seconds S     time limit for all setups together; setups not started by then\n"
        "                      fail (default %d; the experiments: 400)\n"
        "  --info              print ucp_worker_print_info and ucp_ep_print_info text\n"
        "  --json              JSON lines only\n",
        default_sizes, default_chunked, TIMEOUT_MS_DEFAULT, KILL_WAIT_MS_DEFAULT,
        MAX_SECONDS_DEFAULT);
}

static int read_addr(const char *arg, unsigned char **out, size_t *len)
{
    char *text = NULL;
    size_t cap = 0, n, i;
    unsigned char *a;

    if (arg[0] == '@') {
        FILE *f = fopen(arg + 1, "r");
        ssize_t k;
        if (!f) {
            bench_errorf("%s: %s", arg + 1, strerror(errno));
            return -1;
        }
        k = getline(&text, &cap, f);
        fclose(f);
        if (k <= 0) {
            free(text);
            bench_errorf("%s: empty", arg + 1);
            return -1;
        }
    } else if (!(text = strdup(arg))) {
        return -1;
    }
    n = strcspn(text, "\r\n");
    if (n == 0 || n % 2 || !(a = malloc(n / 2))) {
        bench_errorf("bad address (hex expected)");
        free(text);
        return -1;
    }
    for (i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(text + 2 * i, "%2x", &v) != 1) {
            bench_errorf("bad address (hex expected)");
            free(a);
            free(text);
            return -1;
        }
        a[i] = (unsigned char)v;
    }
    free(text);
    *out = a;
    *len = n / 2;
    return 0;
}

int main(int argc, char **argv)
{
    static config_t plan[MAX_CONFIGS];
    opts_t o;
    config_t one;
    result_t mc;
    const char *sizes = default_sizes, *chunked = default_chunked, *client_addr = NULL;
    const char *addr_file = NULL;
    int server = 0, experiments = 0, setup = 0, sizes_given = 0, chunked_given = 0;
    int i, nplan = 0;
    double run_deadline;
    long v;

    memset(&o, 0, sizeof o);
    o.warmup = -1;
    o.chunk = 4 * MIB;
    o.timeout_ms = TIMEOUT_MS_DEFAULT;
    o.kill_wait_ms = KILL_WAIT_MS_DEFAULT;
    memset(&one, 0, sizeof one);
    snprintf(one.name, sizeof one.name, "one");

    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VAL()                                          \
        do {                                                \
            if (!val) {                                     \
                bench_errorf("%s needs a value", a);              \
                return 2;                                   \
            }                                               \
            i++;                                            \
        } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            o.json_only = 1;
        } else if (!strcmp(a, "--info")) {
            o.info = 1;
        } else if (!strcmp(a, "--experiments")) {
            experiments = 1;
        } else if (!strcmp(a, "--server")) {
            server = 1;
        } else if (!strcmp(a, "--client")) {
            NEED_VAL();
            client_addr = val;
        } else if (!strcmp(a, "--addr-file")) {
            NEED_VAL();
            addr_file = val;
        } else if (!strcmp(a, "--tls")) {
            NEED_VAL();
            one.tls = val;
            setup = 1;
        } else if (!strcmp(a, "--err-mode")) {
            NEED_VAL();
            if (strcmp(val, "none") && strcmp(val, "peer")) {
                bench_errorf("--err-mode none|peer");
                return 2;
            }
            one.err_peer = !strcmp(val, "peer");
            setup = 1;
        } else if (!strcmp(a, "--net-only")) {
            one.net_only = setup = 1;
        } else if (!strcmp(a, "--wakeup")) {
            one.wakeup = setup = 1;
        } else if (!strcmp(a, "--progress-thread")) {
            NEED_VAL();
            if (!strcmp(val, "lock"))
                one.progress_thread = PT_LOCK;
            else if (!strcmp(val, "queue"))
                one.progress_thread = PT_QUEUE;
            else {
                bench_errorf("--progress-thread lock|queue");
                return 2;
            }
            setup = 1;
        } else if (!strcmp(a, "--kill-test")) {
            one.kill_test = setup = 1;
        } else if (!strcmp(a, "--kill-client")) {
            one.kill_client = setup = 1;
        } else if (!strcmp(a, "--kill-close")) {
            NEED_VAL();
            if (strcmp(val, "force") && strcmp(val, "flush")) {
                bench_errorf("--kill-close force|flush");
                return 2;
            }
            o.kill_close = !strcmp(val, "force") ? 1 : 2;
        } else if (!strcmp(a, "--thread-mode")) {
            NEED_VAL();
            if (!strcmp(val, "single"))
                one.thread_mode = TM_SINGLE;
            else if (!strcmp(val, "serialized"))
                one.thread_mode = TM_SERIALIZED;
            else if (!strcmp(val, "multi"))
                one.thread_mode = TM_MULTI;
            else {
                bench_errorf("--thread-mode single|serialized|multi");
                return 2;
            }
            setup = 1;
        } else if (!strcmp(a, "--sizes")) {
            NEED_VAL();
            sizes = val;
            sizes_given = 1;
        } else if (!strcmp(a, "--chunked")) {
            NEED_VAL();
            chunked = val;
            chunked_given = 1;
        } else if (!strcmp(a, "--chunk")) {
            NEED_VAL();
            if (bench_parse_size(val, &o.chunk) != 0) {
                bench_errorf("bad --chunk '%s'", val);
                return 2;
            }
        } else if (!strcmp(a, "--max-seconds")) {
            NEED_VAL();
            if (bench_parse_long(val, 1, 86400, &v) != 0) {
                bench_errorf("bad --max-seconds '%s'", val);
                return 2;
            }
            o.max_seconds = v;
        } else if (!strcmp(a, "--reps") || !strcmp(a, "--warmup") ||
                   !strcmp(a, "--timeout-ms") || !strcmp(a, "--kill-wait-ms")) {
            NEED_VAL();
            if (bench_parse_long(val, !strcmp(a, "--reps") ? 1 : 0, 100000000L, &v) != 0) {
                bench_errorf("bad %s '%s'", a, val);
                return 2;
            }
            if (!strcmp(a, "--reps"))
                o.reps = (int)v;
            else if (!strcmp(a, "--warmup"))
                o.warmup = (int)v;
            else if (!strcmp(a, "--timeout-ms"))
                o.timeout_ms = v ? v : 24L * 3600 * 1000;
            else
                o.kill_wait_ms = v;
        } else {
            bench_errorf("unknown option '%s' (try --help)", a);
            return 2;
        }
#undef NEED_VAL
    }
    {
        size_t tmp[MAX_SIZES];
        int nt;
        if (bench_parse_sizes(sizes, tmp, &nt, MAX_SIZES, 1) != 0 || nt == 0 ||
            bench_parse_sizes(chunked, tmp, &nt, MAX_SIZES, 1) != 0) {
            bench_errorf("bad --sizes/--chunked (e.g. 8,64K,4M; at most %d)", MAX_SIZES);
            return 2;
        }
    }
    if (one.progress_thread == PT_LOCK && one.thread_mode == TM_SINGLE)
        one.thread_mode = TM_SERIALIZED;    /* two threads, one at a time: that is SERIALIZED */
    if (one.kill_test || one.kill_client)
        one.progress_thread = PT_NONE;
    if (one.kill_test && one.kill_client) {
        bench_errorf("--kill-test and --kill-client: one at a time");
        return 2;
    }
    if (one.tls && !strcmp(one.tls, "default"))
        one.tls = NULL;
    bench_parse_sizes(sizes, one.sizes, &one.nsizes, MAX_SIZES, 1);
    bench_parse_sizes(chunked, one.chunked, &one.nchunked, MAX_SIZES, 1);
    if ((one.kill_test || one.kill_client) && !sizes_given) {
        one.sizes[0] = 64 * MIB;
        one.nsizes = 1;
    }
    signal(SIGPIPE, SIG_IGN);
    if (ucxb_json_init() != 0)
        return 1;

    if (server)
        return run_server(&one, &o, -1, addr_file, 0,
                          one.kill_client ? srv_report_client_kill : NULL);

    if (bench_memcpy(&mc) != 0)
        return 1;
    o.memcpy_gbps = mc.gbps;
    emit(&o, &mc);

    if (client_addr) {
        unsigned char *addr;
        size_t len;
        int rc;
        if (read_addr(client_addr, &addr, &len) != 0)
            return 2;
        rc = run_client(&one, &o, addr, len);
        free(addr);
        return rc;
    }
    if (setup || sizes_given || chunked_given) {
        if (!setup)
            snprintf(one.name, sizeof one.name, "%s", one.tls ? one.tls : "default");
        plan[0] = one;
        nplan = 1;
        experiments = 0;
    } else {
        nplan = plan_experiments(plan);
        experiments = 1;
    }
    run_deadline = tfx_now_s() + (double)(o.max_seconds ? o.max_seconds
                                            : experiments ? 400 : MAX_SECONDS_DEFAULT);
    return run_plan(plan, nplan, &o, run_deadline, run_pair);
}
