/* ucx_raw.c - ucx-raw, the raw UCX active-message ceiling for tfetch's UCX transport.
 *
 * No tfetch code: a client sends a request as one UCP active message (a small fixed header plus
 * N payload bytes) to a server, which receives it into a buffer it allocated and touched
 * beforehand (eager: copied from the data pointer; rendezvous: ucp_am_recv_data_nbx straight
 * into the buffer) and answers with a header-only ack. The client times request -> ack round
 * trips (warm-up first) and reports p50/p99 latency and payload/p50 throughput, next to a
 * memcpy baseline from the same run. A "chunked" variant sends a large payload as several
 * messages (default 4 MiB) all in flight at once, acked once when the last byte has landed.
 *
 * Connection is by worker address, as tfetch's upgrade does for same-host peers: the server
 * hands its ucp_worker_query() address blob to the client (through a pipe when this program
 * forks both, a file or hex string otherwise); the client creates its endpoint with
 * UCP_EP_PARAM_FIELD_REMOTE_ADDRESS and sends with UCP_AM_SEND_FLAG_REPLY, and the server
 * answers on the reply_ep that arrives with each message. The endpoint's lanes (from
 * ucp_ep_print_info) say which transports carried it: "ucx/sysv+cma", "ucx/tcp", ...
 *
 * Default run: a memcpy baseline, then server/client pairs (separate processes, forked) for
 * default UCX_TLS and UCX_TLS=tcp, with UCP_ERR_HANDLING_MODE_NONE, and UCX_TLS default with
 * UCP_ERR_HANDLING_MODE_PEER. --experiments runs the questions bench/README.md answers:
 * NET_ONLY worker addresses, sleeping progress (ucp_worker_get_efd/ucp_worker_arm), thread
 * modes with a progress thread, and a server, or a client, that dies (SIGKILL) mid-request.
 *
 * Correctness before speed: for each size the server first receives into a poisoned buffer and
 * checks every byte; before the last timed repetition it poisons the buffer again and checks it
 * after. A mismatch fails that measurement.
 *
 * Output: one JSON line per measurement on stdout, the human table on stderr (--json: no
 * table). Exit status 0 if everything ran, 1 if anything failed, 2 on a usage error.
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

#define MEMCPY_BYTES (64 * MIB)
#define MEMCPY_REPS 20
#define MAX_SIZES 16
#define MAX_CONFIGS 40
#define TIMEOUT_MS_DEFAULT 30000L
#define KILL_WAIT_MS_DEFAULT 10000L
#define PAIR_SLACK_S 30             /* a pair's limit: its own deadlines plus this */
#define MAX_SECONDS_DEFAULT 100     /* a plan's limit (--experiments: 400) */
#define ADDR_MAX 65536

#define AM_REQ 17
#define AM_ACK 18
#define HDR_MAGIC 0x74667578u       /* "tfux" */

static const char *const default_sizes = "8,64K,4M,64M,256M";
static const char *const default_chunked = "64M,256M";
/* Timed and warm-up repetitions by size (bench_by_size: <= 64 KiB, <= 4 MiB, <= 64 MiB, more). */
static const int reps_by_size[4] = {1000, 100, 20, 6};
static const int warmup_by_size[4] = {100, 10, 3, 1};

const char *const bench_prog = "ucx-raw";

enum { OP_HELLO = 1, OP_DATA, OP_POISON, OP_CHECK, OP_QUIT, OP_DIE };
enum { F_VERIFY = 1 };
enum { ST_OK = 0, ST_BAD_HDR = 1, ST_NO_MEM = 2, ST_MISMATCH = 3, ST_RECV_ERR = 4 };

/* Request header: what every AM_REQ carries. */
typedef struct {
    uint32_t magic;
    uint16_t op;
    uint16_t flags;
    uint64_t id;            /* request id; the chunks of one request share it */
    uint64_t total;         /* payload bytes of the whole request */
    uint64_t offset;        /* where this message's payload goes */
    uint64_t seed;          /* pattern seed (OP_CHECK, F_VERIFY) */
} req_hdr_t;

/* Ack header: the whole AM_ACK (no payload). */
typedef struct {
    uint32_t magic;
    int32_t status;         /* ST_* */
    uint64_t id;
    uint64_t bytes;         /* payload bytes the server received for this id */
    uint32_t nrndv;         /* messages that came by rendezvous */
    uint32_t neager;        /* messages that came eagerly */
    uint64_t cpu_ns;        /* the server process's CPU time so far */
    uint64_t sleeps;        /* times the server has slept in epoll so far */
} ack_hdr_t;

_Static_assert(sizeof(req_hdr_t) == 40, "request header layout");
_Static_assert(sizeof(ack_hdr_t) == 48, "ack header layout");

enum { TM_SINGLE, TM_SERIALIZED, TM_MULTI };
enum { PT_NONE, PT_LOCK, PT_QUEUE };

/* One server/client pair's setup. */
typedef struct {
    char name[40];
    const char *tls;        /* UCX_TLS for both; NULL: the environment's (default "all") */
    const char *opt_name;   /* one more UCX setting for both (ucp_config_modify), e.g. */
    const char *opt_value;  /* "USE_MT_MUTEX", "y"; NULL: none */
    int err_peer;           /* UCP_ERR_HANDLING_MODE_PEER instead of NONE */
    int net_only;           /* server address from UCP_WORKER_ADDRESS_FLAG_NET_ONLY */
    int wakeup;             /* UCP_FEATURE_WAKEUP; sleep in epoll on the worker's efd */
    int thread_mode;        /* TM_* for the client's worker */
    int progress_thread;    /* PT_*: client: a progress thread progresses the worker; the main
                             * thread posts (PT_LOCK) or hands the sends to it (PT_QUEUE) */
    int kill_test;          /* the server SIGKILLs itself on receiving the request */
    int kill_client;        /* the client SIGKILLs itself right after posting the request */
    int expect_fail;        /* the endpoint is expected not to connect (shown, not failed) */
    size_t sizes[MAX_SIZES];
    int nsizes;
    size_t chunked[MAX_SIZES];  /* sizes also sent in chunks */
    int nchunked;
} config_t;

typedef struct {
    int reps;               /* 0: by size */
    int warmup;             /* -1: by size */
    size_t chunk;
    long timeout_ms;
    long kill_wait_ms;
    int kill_close;         /* the kill test's endpoint close: 0 FORCE with PEER, flush with
                             * NONE (what UCX allows); 1 FORCE; 2 flush */
    int json_only;
    int info;               /* print ucp_ep_print_info / ucp_worker_print_info text */
    double memcpy_gbps;
    long max_seconds;       /* the whole plan's time limit; 0: by plan */
} opts_t;

typedef struct {
    const char *bench;
    const config_t *cfg;
    const char *variant;
    char transport[64];
    const char *proto;
    size_t bytes;
    size_t chunk;
    int reps;
    int warmup;
    double p50_us, p99_us, mean_us, gbps, mean_gbps, vs_memcpy;
    double cli_cpu_us, srv_cpu_us;      /* CPU time per timed request, each process */
    double loop_us;                     /* wall time of the timed loop per request */
    double cli_sleeps, srv_sleeps;      /* epoll sleeps per timed request */
} result_t;

static volatile unsigned char g_sink;
/* The JSON lines' stream: the original stdout. UCX 1.13 writes its log lines ("UCX ERROR ...")
 * to stdout unless UCX_LOG_FILE says otherwise, so main points fd 1 at stderr and keeps the
 * real stdout here. */
static FILE *g_json;

/* printf to g_json, the JSON lines' stream. */
__attribute__((format(printf, 1, 2))) static void jprint(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfprintf(g_json, fmt, ap);
    va_end(ap);
}
static int g_table_started;

/* ---- small helpers -------------------------------------------------------------------- */

/* 0 if p[0..n) is bench_fill_pattern(seed), else -1. */
static int check_pattern(const unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = (seed * 0x9E3779B97F4A7C15ull) | 1, y;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(&y, p + i, 8);
        if (y != x)
            return -1;
    }
    for (; i < n; i++)
        if (p[i] != (unsigned char)(x >> (8 * (i % 8))))
            return -1;
    return 0;
}

/* Page-aligned, written (so no page fault is timed). */
static unsigned char *alloc_touched(size_t n, int byte)
{
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    memset(p, byte, n);
    return p;
}

static void free_touched(unsigned char *p, size_t n)
{
    if (p)
        munmap(p, n ? n : 1);
}

static void summarise(double *t, int n, size_t bytes, double memcpy_gbps, result_t *r)
{
    double p50, p99, sum;

    bench_percentiles(t, n, &p50, &p99, &sum);
    r->reps = n;
    r->bytes = bytes;
    r->p50_us = p50 * 1e6;
    r->p99_us = p99 * 1e6;
    r->mean_us = sum / n * 1e6;
    r->gbps = p50 > 0 ? (double)bytes / p50 / 1e9 : 0;
    r->mean_gbps = sum > 0 ? (double)bytes * n / sum / 1e9 : 0;
    r->vs_memcpy = memcpy_gbps > 0 ? r->gbps / memcpy_gbps : 0;
}

static const char *pt_name(int pt)
{
    return pt == PT_QUEUE ? "queue" : pt == PT_LOCK ? "lock" : "none";
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *tm_name(int tm)
{
    return tm == TM_MULTI ? "multi" : tm == TM_SERIALIZED ? "serialized" : "single";
}

static ucs_thread_mode_t tm_ucs(int tm)
{
    return tm == TM_MULTI ? UCS_THREAD_MODE_MULTI
         : tm == TM_SERIALIZED ? UCS_THREAD_MODE_SERIALIZED : UCS_THREAD_MODE_SINGLE;
}

static const char *ucs_tm_name(ucs_thread_mode_t tm)
{
    return tm == UCS_THREAD_MODE_MULTI ? "multi"
         : tm == UCS_THREAD_MODE_SERIALIZED ? "serialized" : "single";
}

/* ---- output --------------------------------------------------------------------------- */

static void json_config(const config_t *c)
{
    if (c->opt_name)
        jprint("\"ucx_%s\":\"%s\",", c->opt_name, c->opt_value);
    jprint("\"config\":\"%s\",\"tls\":\"%s\",\"err_mode\":\"%s\",\"net_only\":%d,\"wakeup\":%d,"
           "\"thread_mode\":\"%s\",\"progress_thread\":\"%s\"", c->name,
           c->tls ? c->tls : "default", c->err_peer ? "peer" : "none", c->net_only, c->wakeup,
           tm_name(c->thread_mode), pt_name(c->progress_thread));
}

static void emit(const opts_t *o, const result_t *r)
{
    char sz[32], cpu[32];

    jprint("{\"bench\":\"%s\",", r->bench);
    if (r->cfg) {
        json_config(r->cfg);
        jprint(",\"variant\":\"%s\",\"transport\":\"%s\",\"proto\":\"%s\",\"chunk\":%zu,"
               "\"cli_cpu_us\":%.3f,\"srv_cpu_us\":%.3f,\"loop_us\":%.3f,\"cli_sleeps\":%.3f,"
               "\"srv_sleeps\":%.3f,", r->variant, r->transport, r->proto, r->chunk,
               r->cli_cpu_us, r->srv_cpu_us, r->loop_us, r->cli_sleeps, r->srv_sleeps);
    } else {
        jprint("\"transport\":\"%s\",", r->transport);
    }
    jprint("\"bytes\":%zu,\"reps\":%d,\"warmup\":%d,\"p50_us\":%.3f,\"p99_us\":%.3f,"
           "\"mean_us\":%.3f,\"gbps\":%.6g,\"mean_gbps\":%.6g,\"vs_memcpy\":%.6g}\n",
           r->bytes, r->reps, r->warmup, r->p50_us, r->p99_us, r->mean_us, r->gbps,
           r->mean_gbps, r->vs_memcpy);
    fflush(g_json);
    if (o->json_only)
        return;
    if (!g_table_started) {
        fprintf(stderr, "%-14s %-8s %-13s %-6s %-8s %5s %10s %10s %8s %8s %9s\n", "config",
                "variant", "transport", "proto", "size", "reps", "p50 us", "p99 us",
                "GB/s p50", "x memcpy", "cpu% c/s");
        g_table_started = 1;
    }
    if (r->cfg && r->loop_us > 0)
        snprintf(cpu, sizeof cpu, "%.0f/%.0f", 100 * r->cli_cpu_us / r->loop_us,
                 100 * r->srv_cpu_us / r->loop_us);
    else
        snprintf(cpu, sizeof cpu, "-");
    fprintf(stderr, "%-14s %-8s %-13s %-6s %-8s %5d %10.2f %10.2f %8.3f %8.3f %9s\n",
            r->cfg ? r->cfg->name : r->bench, r->cfg ? r->variant : "-", r->transport,
            r->cfg ? r->proto : "-", bench_fmt_size(r->bytes, sz, sizeof sz), r->reps, r->p50_us,
            r->p99_us, r->gbps, r->vs_memcpy, cpu);
    fflush(stderr);
}

static int bench_memcpy(result_t *r)
{
    size_t n = MEMCPY_BYTES;
    unsigned char *src = alloc_touched(n, 1), *dst = alloc_touched(n, 2);
    double t[MEMCPY_REPS];
    int i, rc = -1;

    if (!src || !dst) {
        bench_errorf("memcpy baseline: out of memory");
        goto out;
    }
    memcpy(dst, src, n);
    for (i = 0; i < MEMCPY_REPS; i++) {
        double t0 = bench_now_s();
        memcpy(dst, src, n);
        t[i] = bench_now_s() - t0;
        g_sink ^= dst[(size_t)i * 4099 % n];
    }
    memset(r, 0, sizeof *r);
    r->bench = "memcpy";
    snprintf(r->transport, sizeof r->transport, "none");
    summarise(t, MEMCPY_REPS, n, 0, r);
    r->vs_memcpy = 1.0;
    rc = 0;
out:
    free_touched(src, n);
    free_touched(dst, n);
    return rc;
}

/* ---- UCX setup shared by both sides --------------------------------------------------- */

typedef struct {
    ucp_context_h ctx;
    ucp_worker_h w;
    int efd;                    /* ucp_worker_get_efd (wakeup) */
    int epfd;                   /* an epoll set holding efd */
} ucx_t;

static int ucx_open(ucx_t *u, const config_t *c, int thread_mode, const char *who)
{
    ucp_config_t *conf = NULL;
    ucp_params_t pp;
    ucp_worker_params_t wp;
    ucs_status_t st;
    struct epoll_event ev;

    memset(u, 0, sizeof *u);
    u->efd = u->epfd = -1;
    st = ucp_config_read(NULL, NULL, &conf);
    if (st != UCS_OK) {
        bench_errorf("%s: ucp_config_read: %s", who, ucs_status_string(st));
        return -1;
    }
    if (c->tls && (st = ucp_config_modify(conf, "TLS", c->tls)) != UCS_OK) {
        bench_errorf("%s: UCX_TLS=%s: %s", who, c->tls, ucs_status_string(st));
        ucp_config_release(conf);
        return -1;
    }
    if (c->opt_name && (st = ucp_config_modify(conf, c->opt_name, c->opt_value)) != UCS_OK) {
        bench_errorf("%s: UCX_%s=%s: %s", who, c->opt_name, c->opt_value, ucs_status_string(st));
        ucp_config_release(conf);
        return -1;
    }
    memset(&pp, 0, sizeof pp);
    pp.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    pp.features = UCP_FEATURE_AM | (c->wakeup ? UCP_FEATURE_WAKEUP : 0);
    pp.mt_workers_shared = 0;
    st = ucp_init(&pp, conf, &u->ctx);
    ucp_config_release(conf);
    if (st != UCS_OK) {
        bench_errorf("%s: ucp_init: %s", who, ucs_status_string(st));
        return -1;
    }
    memset(&wp, 0, sizeof wp);
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = tm_ucs(thread_mode);
    st = ucp_worker_create(u->ctx, &wp, &u->w);
    if (st != UCS_OK) {
        bench_errorf("%s: ucp_worker_create: %s", who, ucs_status_string(st));
        ucp_cleanup(u->ctx);
        u->ctx = NULL;
        return -1;
    }
    if (c->wakeup) {
        st = ucp_worker_get_efd(u->w, &u->efd);
        if (st != UCS_OK) {
            bench_errorf("%s: ucp_worker_get_efd: %s", who, ucs_status_string(st));
            return -1;
        }
        u->epfd = epoll_create1(EPOLL_CLOEXEC);
        memset(&ev, 0, sizeof ev);
        ev.events = EPOLLIN;
        if (u->epfd < 0 || epoll_ctl(u->epfd, EPOLL_CTL_ADD, u->efd, &ev) != 0) {
            bench_errorf("%s: epoll: %s", who, strerror(errno));
            return -1;
        }
    }
    return 0;
}

static void ucx_close(ucx_t *u)
{
    if (u->epfd >= 0)
        close(u->epfd);
    if (u->w)
        ucp_worker_destroy(u->w);
    if (u->ctx)
        ucp_cleanup(u->ctx);
    memset(u, 0, sizeof *u);
    u->efd = u->epfd = -1;
}

/* Sleeps on the worker's efd if nothing is pending (wakeup mode): 1 slept or armed-and-woke,
 * 0 must progress more, -1 error. */
static int ucx_sleep(ucx_t *u, int timeout_ms, unsigned long *sleeps)
{
    struct epoll_event ev;
    ucs_status_t st = ucp_worker_arm(u->w);
    int n;

    if (st == UCS_ERR_BUSY)
        return 0;
    if (st != UCS_OK) {
        bench_errorf("ucp_worker_arm: %s", ucs_status_string(st));
        return -1;
    }
    do
        n = epoll_wait(u->epfd, &ev, 1, timeout_ms);
    while (n < 0 && errno == EINTR);
    if (sleeps)
        (*sleeps)++;
    return 1;
}

/* ---- server --------------------------------------------------------------------------- */

typedef struct {
    ucx_t u;
    const config_t *cfg;
    unsigned char *buf;
    size_t cap;
    uint64_t cur_id;            /* request being assembled */
    uint64_t total;
    uint64_t got;
    uint32_t nrndv, neager;
    int32_t status;
    int verify;
    uint64_t seed;
    int ack_ready;              /* ack is due on reply_ep */
    ack_hdr_t ack;
    ucp_ep_h reply_ep;
    void *ack_req;              /* an ack send not complete yet */
    int quit;
    int printed_ep;
    int info;
    unsigned long sleeps;
    double req_t;               /* when the request being assembled began */
    int recv_failed;            /* a receive completed with an error: the peer is gone */
    ucs_status_t recv_status;
    double recv_fail_t;
} server_t;

static void srv_recv_failed(server_t *s, ucs_status_t st)
{
    if (!s->recv_failed) {
        s->recv_failed = 1;
        s->recv_status = st;
        s->recv_fail_t = bench_now_s();
    }
    if (s->status == ST_OK)
        s->status = ST_RECV_ERR;
}

static void srv_finish_if_done(server_t *s)
{
    if (s->got < s->total || s->ack_ready)
        return;
    if (s->status == ST_OK && s->verify && check_pattern(s->buf, s->total, s->seed) != 0)
        s->status = ST_MISMATCH;
    s->ack.magic = HDR_MAGIC;
    s->ack.status = s->status;
    s->ack.id = s->cur_id;
    s->ack.bytes = s->got;
    s->ack.nrndv = s->nrndv;
    s->ack.neager = s->neager;
    s->ack.cpu_ns = (uint64_t)(cpu_s() * 1e9);
    s->ack.sleeps = s->sleeps;
    s->ack_ready = 1;
}

static void srv_recv_cb(void *req, ucs_status_t st, size_t length, void *user_data)
{
    server_t *s = user_data;

    if (st != UCS_OK) {
        /* the length may not be known: fail the whole request now */
        srv_recv_failed(s, st);
        s->got = s->total;
    } else {
        s->got += length;
    }
    ucp_request_free(req);
    srv_finish_if_done(s);
}

/* Makes buf hold at least n bytes, written with 0xA5 (untimed: the first request of a size). */
static int srv_reserve(server_t *s, size_t n)
{
    if (n <= s->cap)
        return 0;
    free_touched(s->buf, s->cap);
    s->cap = 0;
    if (!(s->buf = alloc_touched(n, 0xA5)))
        return -1;
    s->cap = n;
    return 0;
}

/* A new request: resets the assembly and, for control ops, does the op. */
static void srv_begin(server_t *s, const req_hdr_t *h)
{
    s->req_t = bench_now_s();
    s->cur_id = h->id;
    s->total = h->total;
    s->got = 0;
    s->nrndv = s->neager = 0;
    s->status = ST_OK;
    s->verify = (h->flags & F_VERIFY) != 0;
    s->seed = h->seed;
    if (h->op == OP_DATA && srv_reserve(s, h->total) != 0)
        s->status = ST_NO_MEM;
}

static ucs_status_t srv_req_cb(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param)
{
    server_t *s = arg;
    req_hdr_t h;
    ucp_request_param_t rp;
    void *r;

    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
        s->reply_ep = param->reply_ep;
    if (header_length != sizeof h) {
        bench_errorf("server: request header of %zu bytes", header_length);
        return UCS_OK;
    }
    memcpy(&h, header, sizeof h);
    if (h.magic != HDR_MAGIC) {
        bench_errorf("server: bad magic");
        return UCS_OK;
    }
    if (h.op == OP_DIE) {
        /* The kill test: die here, with the request (and, for rendezvous, its data) not taken. */
        raise(SIGKILL);
    }
    if (h.id != s->cur_id)
        srv_begin(s, &h);
    switch (h.op) {
    case OP_HELLO:
        break;
    case OP_QUIT:
        s->quit = 1;
        break;
    case OP_POISON:
        if (srv_reserve(s, h.total) != 0)
            s->status = ST_NO_MEM;
        else
            memset(s->buf, 0xA5, h.total);
        s->total = 0;
        break;
    case OP_CHECK:
        if (h.total > s->cap || check_pattern(s->buf, h.total, h.seed) != 0)
            s->status = ST_MISMATCH;
        s->total = 0;
        break;
    case OP_DATA:
        if (s->status != ST_OK || h.offset > s->cap || length > s->cap - h.offset) {
            if (s->status == ST_OK)
                s->status = ST_BAD_HDR;
            s->got += length;
            srv_finish_if_done(s);
            return UCS_OK;      /* rendezvous: drops it; the sender completes with UCS_OK */
        }
        if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
            s->nrndv++;
            memset(&rp, 0, sizeof rp);
            rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                              UCP_OP_ATTR_FIELD_MEMORY_TYPE;
            rp.cb.recv_am = srv_recv_cb;
            rp.user_data = s;
            rp.memory_type = UCS_MEMORY_TYPE_HOST;
            /* The request is freed in srv_recv_cb, never before it completes: freeing an
             * unfinished ucp_am_recv_data_nbx request hangs the rendezvous (UCX 1.13). */
            r = ucp_am_recv_data_nbx(s->u.w, data, s->buf + h.offset, length, &rp);
            if (UCS_PTR_IS_ERR(r)) {
                srv_recv_failed(s, UCS_PTR_STATUS(r));
                s->got += length;
            } else if (r == NULL) {
                s->got += length;
            }
        } else {
            s->neager++;
            memcpy(s->buf + h.offset, data, length);
            s->got += length;
        }
        break;
    default:
        s->status = ST_BAD_HDR;
        break;
    }
    srv_finish_if_done(s);
    return UCS_OK;
}

static void srv_ack_cb(void *req, ucs_status_t st, void *user_data)
{
    server_t *s = user_data;

    if (st != UCS_OK)
        bench_errorf("server: ack send: %s", ucs_status_string(st));
    ucp_request_free(req);
    s->ack_req = NULL;
}

static void print_ep_info(const char *who, ucp_ep_h ep)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    if (!f)
        return;
    ucp_ep_print_info(ep, f);
    fclose(f);
    fprintf(stderr, "--- %s: ucp_ep_print_info ---\n%s---\n", who, text ? text : "");
    free(text);
}

/* Sends the due ack if the previous one has completed. */
static int srv_send_ack(server_t *s)
{
    ucp_request_param_t p;
    void *r;

    if (!s->ack_ready || s->ack_req || !s->reply_ep)
        return 0;
    if (s->status == ST_RECV_ERR) {
        /* The receive failed, so the peer is most likely gone, and with
         * UCP_ERR_HANDLING_MODE_PEER UCX 1.13 has then released the reply endpoint:
         * ucp_am_send_nbx on it crashed (SIGSEGV). No ack, and forget the endpoint. */
        bench_errorf("server: a receive failed (%s); no ack", ucs_status_string(s->recv_status));
        s->ack_ready = 0;
        s->reply_ep = NULL;
        return 0;
    }
    if (s->info && !s->printed_ep) {
        print_ep_info("server reply_ep", s->reply_ep);
        s->printed_ep = 1;
    }
    memset(&p, 0, sizeof p);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = srv_ack_cb;
    p.user_data = s;
    s->ack_ready = 0;
    r = ucp_am_send_nbx(s->reply_ep, AM_ACK, &s->ack, sizeof s->ack, NULL, 0, &p);
    if (UCS_PTR_IS_ERR(r)) {
        bench_errorf("server: ack send: %s", ucs_status_string(UCS_PTR_STATUS(r)));
        return -1;
    }
    s->ack_req = r;
    return 0;
}

/* The kill-client test, from the server's side: did the receive fail, and when? */
static void srv_report_client_kill(const server_t *s, const opts_t *o)
{
    const char *outcome = s->recv_failed ? "recv-error"
                          : s->cur_id <= 1 ? "no-request" /* only the HELLO came */
                          : s->got >= s->total ? "completed" : "hang";
    double ms = ((s->recv_failed ? s->recv_fail_t : bench_now_s()) - s->req_t) * 1e3;

    jprint("{\"bench\":\"ucx-client-kill\",");
    json_config(s->cfg);
    jprint(",\"bytes\":%" PRIu64 ",\"received\":%" PRIu64 ",\"outcome\":\"%s\","
           "\"recv_status\":\"%s\",\"after_ms\":%.1f,\"waited_ms\":%ld}\n", s->total, s->got,
           outcome, s->recv_failed ? ucs_status_string(s->recv_status) : "none", ms,
           o->kill_wait_ms);
    fflush(g_json);
    if (!o->json_only)
        fprintf(stderr, "client-kill %-14s server: %s%s%s after %.1f ms (%" PRIu64 " of %" PRIu64
                " bytes)\n", s->cfg->name, outcome, s->recv_failed ? ": " : "",
                s->recv_failed ? ucs_status_string(s->recv_status) : "", ms, s->got, s->total);
}

/* Runs a server until a client says OP_QUIT (or idle_s passes without a message; 0: never).
 * Its worker address goes to addr_fd (length-prefixed) or, if addr_fd < 0, to addr_file or
 * stdout as hex. */
static int run_server(const config_t *c, const opts_t *o, int addr_fd, const char *addr_file,
                      double idle_s)
{
    server_t s;
    ucp_worker_attr_t wa;
    ucp_am_handler_param_t hp;
    ucs_status_t st;
    uint32_t len32;
    double last = bench_now_s();
    unsigned long spins = 0;
    int rc = 1;
    size_t i;

    memset(&s, 0, sizeof s);
    s.cfg = c;
    s.info = o->info;
    s.cur_id = UINT64_MAX;
    if (ucx_open(&s.u, c, TM_SINGLE, "server") != 0)
        goto out;
    memset(&hp, 0, sizeof hp);
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = AM_REQ;
    hp.cb = srv_req_cb;
    hp.arg = &s;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    if ((st = ucp_worker_set_am_recv_handler(s.u.w, &hp)) != UCS_OK) {
        bench_errorf("server: ucp_worker_set_am_recv_handler: %s", ucs_status_string(st));
        goto out;
    }
    memset(&wa, 0, sizeof wa);
    wa.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS |
                    (c->net_only ? UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS : 0);
    wa.address_flags = c->net_only ? UCP_WORKER_ADDRESS_FLAG_NET_ONLY : 0;
    if ((st = ucp_worker_query(s.u.w, &wa)) != UCS_OK) {
        bench_errorf("server: ucp_worker_query: %s", ucs_status_string(st));
        goto out;
    }
    if (o->info)
        ucp_worker_print_info(s.u.w, stderr);
    if (addr_fd >= 0) {
        len32 = (uint32_t)wa.address_length;
        if (write(addr_fd, &len32, sizeof len32) != (ssize_t)sizeof len32 ||
            write(addr_fd, wa.address, wa.address_length) != (ssize_t)wa.address_length) {
            bench_errorf("server: writing the address: %s", strerror(errno));
            ucp_worker_release_address(s.u.w, wa.address);
            goto out;
        }
        close(addr_fd);
    } else {
        FILE *f = addr_file ? fopen(addr_file, "w") : g_json;
        if (!f) {
            bench_errorf("server: %s: %s", addr_file, strerror(errno));
            ucp_worker_release_address(s.u.w, wa.address);
            goto out;
        }
        for (i = 0; i < wa.address_length; i++)
            fprintf(f, "%02x", ((const unsigned char *)wa.address)[i]);
        fputc('\n', f);
        if (f != g_json)
            fclose(f);
        else
            fflush(g_json);
    }
    ucp_worker_release_address(s.u.w, wa.address);

    while (!(s.quit && !s.ack_ready && !s.ack_req)) {
        unsigned n = ucp_worker_progress(s.u.w);
        if (srv_send_ack(&s) != 0)
            goto out;
        if (c->kill_client && (s.recv_failed || (s.req_t > 0 &&
                               bench_now_s() - s.req_t > (double)o->kill_wait_ms / 1000))) {
            srv_report_client_kill(&s, o);
            rc = 0;
            goto out;
        }
        if (n) {
            last = bench_now_s();
            continue;
        }
        if (c->wakeup) {
            if (ucx_sleep(&s.u, 1000, &s.sleeps) < 0)
                goto out;
        }
        if (idle_s > 0 && (c->wakeup || (++spins & 0xffff) == 0) && bench_now_s() - last > idle_s) {
            bench_errorf("server: no message for %.0f s, giving up", idle_s);
            goto out;
        }
    }
    rc = 0;
out:
    /* The reply endpoints are UCX's; the worker takes them down with it. */
    ucx_close(&s.u);
    free_touched(s.buf, s.cap);
    return rc;
}

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
    c->send_done_t = bench_now_s();
    atomic_fetch_add(&c->sends_done, 1);
    cli_wake(c);
}

static void cli_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    client_t *c = arg;

    (void)ep;
    c->ep_fail_t = bench_now_s();
    atomic_store(&c->ep_status, (int)st);
    atomic_store(&c->ep_failed, 1);
    cli_wake(c);
}

/* Posts the c->npieces messages prepared in c->hdrs. The caller owns the worker (single
 * thread, our lock, UCX's lock in MULTI, or it is the progress thread). On a failed post,
 * records the status in send_status and stops. Sets c->posted. */
static void cli_post(client_t *c)
{
    ucp_request_param_t p;
    size_t i;
    void *r;

    memset(&p, 0, sizeof p);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p.cb.send = cli_send_cb;
    p.user_data = c;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    for (i = 0; i < c->npieces; i++) {
        const req_hdr_t *h = &c->hdrs[i];
        int payload = h->op == OP_DATA || h->op == OP_DIE;
        size_t len = h->total - h->offset;

        if (c->npieces > 1 && i + 1 < c->npieces)
            len = c->hdrs[i + 1].offset - h->offset;
        r = ucp_am_send_nbx(c->ep, AM_REQ, h, sizeof *h, payload ? c->buf + h->offset : NULL,
                            payload ? len : 0, &p);
        if (UCS_PTR_IS_ERR(r)) {
            int expect = UCS_OK;
            atomic_compare_exchange_strong(&c->send_status, &expect, (int)UCS_PTR_STATUS(r));
            break;
        }
        if (r == NULL) {
            c->send_done_t = bench_now_s();
            atomic_fetch_add(&c->sends_done, 1);
        }
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
            if (bench_now_s() > deadline)
                return -2;
            pthread_mutex_lock(&c->mtx);
            if (!(atomic_load(&c->acked) && atomic_load(&c->sends_done) >= nsends) &&
                !atomic_load(&c->ep_failed) && !atomic_load(&c->send_status)) {
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 50 * 1000 * 1000;
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
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
            if (bench_now_s() > deadline)
                return -2;
        } else if ((++spins & 0x3ff) == 0 && bench_now_s() > deadline) {
            return -2;
        }
    }
}

/* Prepares a request of n bytes from c->buf (chunk 0: one message; else messages of chunk
 * bytes, all in flight) in c->hdrs; returns its id, 0 if out of memory. */
static uint64_t cli_prepare(client_t *c, uint16_t op, uint16_t flags, size_t n, size_t chunk,
                            uint64_t seed)
{
    size_t pieces = chunk && n > chunk ? (n + chunk - 1) / chunk : 1, i;
    uint64_t id = ++c->next_id;

    if (pieces > c->nhdrs) {
        req_hdr_t *h = realloc(c->hdrs, pieces * sizeof *h);
        if (!h) {
            bench_errorf("client: out of memory");
            return 0;
        }
        c->hdrs = h;
        c->nhdrs = pieces;
    }
    for (i = 0; i < pieces; i++) {
        req_hdr_t *h = &c->hdrs[i];
        memset(h, 0, sizeof *h);
        h->magic = HDR_MAGIC;
        h->op = op;
        h->flags = flags;
        h->id = id;
        h->total = n;
        h->offset = pieces > 1 ? i * chunk : 0;
        h->seed = seed;
    }
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
            atomic_load(&c->sends_done) < atomic_load(&c->posted)) && bench_now_s() < deadline) {
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
    rc = cli_wait(c, (int)c->npieces, bench_now_s() + (double)c->o->timeout_ms / 1000, 1);
    if (rc != 0) {
        if (rc == -2)
            bench_errorf("client: no ack within %ld ms (op %u, %zu bytes)", c->o->timeout_ms, op,
                         n);
        else
            bench_errorf("client: request failed: %s", atomic_load(&c->ep_failed)
                         ? ucs_status_string((ucs_status_t)atomic_load(&c->ep_status))
                         : ucs_status_string((ucs_status_t)atomic_load(&c->send_status)));
        cli_drain(c, bench_now_s() + 2);
        return -1;
    }
    *ack = c->ack;
    if (ack->magic != HDR_MAGIC || ack->id != id) {
        bench_errorf("client: ack for request %" PRIu64 ", expected %" PRIu64, ack->id, id);
        return -1;
    }
    if (ack->status != ST_OK) {
        bench_errorf("client: server says %s (op %u, %zu bytes)",
                     ack->status == ST_MISMATCH ? "the data differs from what was sent"
                     : ack->status == ST_NO_MEM ? "out of memory"
                     : ack->status == ST_RECV_ERR ? "receive failed" : "bad request", op, n);
        return -1;
    }
    if (op == OP_DATA && ack->bytes != n) {
        bench_errorf("client: server received %" PRIu64 " of %zu bytes", ack->bytes, n);
        return -1;
    }
    return 0;
}

/* Appends word to the comma-separated list if it is not there yet. */
static void list_add(char *list, size_t cap, const char *word)
{
    size_t wl = strlen(word), n = strlen(list);
    const char *p = list;

    while (*p) {
        size_t k = strcspn(p, ",");
        if (k == wl && !strncmp(p, word, wl))
            return;
        p += k + (p[k] == ',');
    }
    snprintf(list + n, cap - n, "%s%s", n ? "," : "", word);
}

/* Appends s to the JSON text at out (cap bytes, *len used) as a string, quotes made safe. */
static void json_append_str(char *out, size_t cap, size_t *len, const char *str)
{
    size_t n = *len;

    if (n + 4 >= cap)
        return;
    if (n)
        out[n++] = ',';
    out[n++] = '"';
    for (; *str && n + 2 < cap; str++)
        out[n++] = *str == '"' || *str == '\\' ? '\'' : *str;
    out[n++] = '"';
    out[n] = '\0';
    *len = n;
}

/* Reads ucp_ep_print_info text (UCX 1.13). The lines that matter look like
 *   #                 lane[0]:  3:sysv/memory.0 md[2]    -> md[2]/sysv/sysdev[255] am am_bw#0
 *   #                 lane[1]:  5:cma/memory.0 md[4]     -> md[4]/cma/sysdev[255] rma_bw#0
 *   #                 am_send: 0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)
 * i.e. "lane[i]: <rsc>:<tl>/<dev> md[..] -> md[..]/<tl>/sysdev[..] <usage words>", the usage
 * words being am, am_bw#k, rma_bw#k, rma, amo, keepalive, wireup, ... Fills lanes (a JSON
 * array body, one string per lane line), am_send (that line), and tr: "ucx/" + the transports
 * of the "am" lanes, then "+" each transport of an rma_bw/am_bw lane not already named
 * ("ucx/sysv+cma", "ucx/posix+cma", "ucx/tcp"). */
static void parse_ep_info(const char *text, char *lanes, size_t lcap, char *am_send,
                          size_t acap, char *tr, size_t tcap)
{
    char am[28] = "", bulk[28] = "", extra[28] = "";
    const char *line = text;
    size_t lo = 0;

    lanes[0] = '\0';
    am_send[0] = '\0';
    while (line && *line) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[512], tl[32] = "", *lp, *p, *save = NULL, *tok;
        int is_am = 0, is_bulk = 0;

        if (len >= sizeof buf)
            len = sizeof buf - 1;
        memcpy(buf, line, len);
        buf[len] = '\0';
        line = nl ? nl + 1 : NULL;
        while (len > 0 && (buf[len - 1] == ' ' || buf[len - 1] == '\t'))
            buf[--len] = '\0';
        if ((p = strstr(buf, "am_send:"))) {
            p += strlen("am_send:");
            snprintf(am_send, acap, "%s", p + strspn(p, " "));
            continue;
        }
        if (!(lp = strstr(buf, "lane[")))
            continue;
        json_append_str(lanes, lcap, &lo, lp);
        /* <rsc index>:<tl>/<dev> */
        if (!(p = strchr(lp, ':')) || !(p = strchr(p + 1, ':')))
            continue;
        p++;
        snprintf(tl, sizeof tl, "%.*s", (int)strcspn(p, "/ "), p);
        /* usage words: after the remote "md[..]/tl/sysdev[..]" */
        if (!(p = strstr(p, "->")) || !(p = strchr(p + 3, ' ')))
            continue;
        for (tok = strtok_r(p, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
            if (!strcmp(tok, "am"))
                is_am = 1;
            else if (!strncmp(tok, "rma_bw", 6) || !strncmp(tok, "am_bw", 5))
                is_bulk = 1;
        }
        if (is_am)
            list_add(am, sizeof am, tl);
        if (is_bulk)
            list_add(bulk, sizeof bulk, tl);
    }
    for (line = bulk; *line;) {
        size_t k = strcspn(line, ","), el = strlen(extra), wl;
        char word[32];

        snprintf(word, sizeof word, "%.*s", (int)k, line);
        line += k + (line[k] == ',');
        wl = strlen(word);
        /* names are distinct enough for strstr: sysv, posix, cma, tcp, ... */
        if (!strstr(am, word) && el + 1 + wl < sizeof extra) {
            extra[el] = '+';
            memcpy(extra + el + 1, word, wl + 1);
        }
    }
    snprintf(tr, tcap, "ucx/%s%s", am[0] ? am : "?", extra);
}

static void cli_describe_ep(client_t *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    snprintf(c->transport, sizeof c->transport, "ucx/?");
    if (!f)
        return;
    cli_lock(c);
    ucp_ep_print_info(c->ep, f);
    cli_unlock(c);
    fclose(f);
    if (text) {
        parse_ep_info(text, c->lanes, sizeof c->lanes, c->am_send, sizeof c->am_send,
                      c->transport, sizeof c->transport);
        if (c->o->info)
            fprintf(stderr, "--- client ep (%s): ucp_ep_print_info ---\n%s---\n", c->cfg->name,
                    text);
    }
    free(text);
}

static int cli_connect(client_t *c, const void *addr, size_t addr_len)
{
    ucp_ep_params_t ep;
    ucp_am_handler_param_t hp;
    ucp_worker_attr_t wa;
    ucs_status_t st;

    memset(&hp, 0, sizeof hp);
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = AM_ACK;
    hp.cb = cli_ack_cb;
    hp.arg = c;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    if ((st = ucp_worker_set_am_recv_handler(c->u.w, &hp)) != UCS_OK) {
        bench_errorf("client: ucp_worker_set_am_recv_handler: %s", ucs_status_string(st));
        return -1;
    }
    memset(&wa, 0, sizeof wa);
    wa.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
    c->granted = ucp_worker_query(c->u.w, &wa) == UCS_OK ? wa.thread_mode
                                                         : UCS_THREAD_MODE_SINGLE;
    if (c->o->info)
        ucp_worker_print_info(c->u.w, stderr);
    memset(&ep, 0, sizeof ep);
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = addr;
    ep.err_mode = c->cfg->err_peer ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    if (c->cfg->err_peer) {
        ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep.err_handler.cb = cli_ep_err_cb;
        ep.err_handler.arg = c;
    }
    (void)addr_len;
    if ((st = ucp_ep_create(c->u.w, &ep, &c->ep)) != UCS_OK) {
        bench_errorf("client: ucp_ep_create: %s", ucs_status_string(st));
        c->ep = NULL;
        return -1;
    }
    return 0;
}

static void cli_close(client_t *c, int force)
{
    ucp_request_param_t p;
    void *r;
    double deadline = bench_now_s() + 2;

    if (c->pt_running) {
        atomic_store(&c->pt_stop, 1);
        if (c->cfg->wakeup)
            ucp_worker_signal(c->u.w);
        pthread_join(c->pt, NULL);
        c->pt_running = 0;
    }
    if (c->ep) {
        memset(&p, 0, sizeof p);
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
        r = ucp_ep_close_nbx(c->ep, &p);
        if (r && !UCS_PTR_IS_ERR(r)) {
            while (ucp_request_check_status(r) == UCS_INPROGRESS && bench_now_s() < deadline)
                ucp_worker_progress(c->u.w);
            if (ucp_request_check_status(r) == UCS_INPROGRESS)
                bench_errorf("client: endpoint close still in progress after 2 s; leaving it");
            else
                ucp_request_free(r);
        }
        c->ep = NULL;
    }
}

/* One size, one variant: verify, warm up, time. 0 ok. */
static int cli_bench(client_t *c, size_t n, size_t chunk, const char *variant)
{
    const opts_t *o = c->o;
    int reps = o->reps > 0 ? o->reps : bench_by_size(n, reps_by_size);
    int warmup = o->warmup >= 0 ? o->warmup : bench_by_size(n, warmup_by_size);
    double *t = calloc((size_t)reps, sizeof *t);
    double c0, c1, w0, wall;
    unsigned long s0, s1;
    ack_hdr_t ack, first, last;
    result_t r;
    uint32_t nrndv = 0, neager = 0;
    int i;
    char sz[32];

    if (!t)
        return -1;
    /* correctness first: into a poisoned buffer, every byte checked */
    if (cli_request(c, OP_POISON, 0, n, 0, 0, &ack) != 0 ||
        cli_request(c, OP_DATA, F_VERIFY, n, chunk, n, &ack) != 0) {
        bench_errorf("%s %s %s: the verification request failed", c->cfg->name, variant,
                     bench_fmt_size(n, sz, sizeof sz));
        free(t);
        return -1;
    }
    for (i = 0; i < warmup; i++)
        if (cli_request(c, OP_DATA, 0, n, chunk, n, &ack) != 0)
            goto fail;
    /* CPU and sleeps: over the whole timed loop, each process (the server's from its acks) */
    first = ack;
    s0 = c->sleeps;
    c0 = cpu_s();
    w0 = bench_now_s();
    for (i = 0; i < reps; i++) {
        double t0;
        /* the last timed one lands in a poisoned buffer and is checked after */
        if (i == reps - 1 && cli_request(c, OP_POISON, 0, n, 0, 0, &ack) != 0)
            goto fail;
        t0 = bench_now_s();
        if (cli_request(c, OP_DATA, 0, n, chunk, n, &ack) != 0)
            goto fail;
        t[i] = bench_now_s() - t0;
        nrndv += ack.nrndv;
        neager += ack.neager;
    }
    wall = bench_now_s() - w0;
    c1 = cpu_s();
    s1 = c->sleeps;
    last = ack;
    if (cli_request(c, OP_CHECK, 0, n, 0, n, &ack) != 0) {
        bench_errorf("%s %s %s: the last timed request's data was wrong", c->cfg->name, variant,
                     bench_fmt_size(n, sz, sizeof sz));
        free(t);
        return -1;
    }
    memset(&r, 0, sizeof r);
    r.bench = "ucx-am";
    r.cfg = c->cfg;
    r.variant = variant;
    snprintf(r.transport, sizeof r.transport, "%s", c->transport);
    r.proto = nrndv && neager ? "mixed" : nrndv ? "rndv" : "eager";
    r.chunk = chunk;
    r.warmup = warmup;
    r.cli_cpu_us = (c1 - c0) / reps * 1e6;
    r.srv_cpu_us = (double)(last.cpu_ns - first.cpu_ns) * 1e-9 / reps * 1e6;
    r.cli_sleeps = (double)(s1 - s0) / reps;
    r.srv_sleeps = (double)(last.sleeps - first.sleeps) / reps;
    r.loop_us = wall / reps * 1e6;
    summarise(t, reps, n, o->memcpy_gbps, &r);
    emit(o, &r);
    free(t);
    return 0;
fail:
    bench_errorf("%s %s %s: a timed request failed", c->cfg->name, variant,
                 bench_fmt_size(n, sz, sizeof sz));
    free(t);
    return -1;
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
    t0 = bench_now_s();
    cli_post(c);
    nsends = atomic_load(&c->posted);
    immediate = atomic_load(&c->sends_done) >= 1;  /* ucp_am_send_nbx returned NULL */
    deadline = t0 + (double)c->o->kill_wait_ms / 1000;
    /* wait for the ack that cannot come: until the endpoint fails (PEER) or the deadline */
    while (cli_wait(c, nsends, deadline, 1) == 0 && !atomic_load(&c->ep_failed) &&
           bench_now_s() < deadline)
        ;
    if (atomic_load(&c->ep_failed))
        t_ep = c->ep_fail_t - t0;
    /* after an endpoint error, a little longer so the send's own completion shows */
    if (t_ep >= 0 && atomic_load(&c->sends_done) < nsends)
        cli_wait(c, nsends, bench_now_s() + 1, 0);
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
        rc = cli_wait(c, atomic_load(&c->posted), bench_now_s() + 2, 1);
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
        double tc = bench_now_s(), until = tc + 3, tdone;
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
            while ((cst = ucp_request_check_status(r)) == UCS_INPROGRESS && bench_now_s() < until)
                ucp_worker_progress(c->u.w);
            if (cst != UCS_INPROGRESS)
                ucp_request_free(r);
        }
        tdone = bench_now_s();
        while (bench_now_s() < tdone + 0.2)   /* let completions of cancelled sends arrive */
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
    fflush(g_json);
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
    size_t maxn = 8;
    int i, failures = 0;
    double t0;

    memset(&cl, 0, sizeof cl);
    cl.cfg = c;
    cl.o = o;
    pthread_mutex_init(&cl.wlock, NULL);
    pthread_mutex_init(&cl.mtx, NULL);
    pthread_cond_init(&cl.cv, NULL);
    for (i = 0; i < c->nsizes; i++)
        if (c->sizes[i] > maxn)
            maxn = c->sizes[i];
    for (i = 0; i < c->nchunked; i++)
        if (c->chunked[i] > maxn)
            maxn = c->chunked[i];
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
        fflush(g_json);
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
    t0 = bench_now_s();
    if (cli_request(&cl, OP_HELLO, 0, 0, 0, 0, &ack) != 0) {
        bench_errorf("%s: the first round trip failed", c->name);
        failures++;
        goto out;
    }
    cli_describe_ep(&cl);
    jprint("{\"bench\":\"ucx-ep\",");
    json_config(c);
    jprint(",\"thread_mode_granted\":\"%s\",\"transport\":\"%s\",\"connect_ms\":%.3f,"
           "\"lanes\":[%s],\"am_send\":\"%s\"}\n", ucs_tm_name(cl.granted), cl.transport,
           (bench_now_s() - t0) * 1e3, cl.lanes, cl.am_send);
    fflush(g_json);
    if (!o->json_only)
        fprintf(stderr, "%s: %s (thread mode %s; am_send %s)\n", c->name, cl.transport,
                ucs_tm_name(cl.granted), cl.am_send);
    if (c->kill_client) {
        /* post the request, give it 2 ms to get going, die; the server reports */
        double t1;
        bench_fill_pattern(cl.buf, c->sizes[0], c->sizes[0]);
        if (!cli_prepare(&cl, OP_DATA, 0, c->sizes[0], 0, c->sizes[0]))
            _exit(1);
        cli_post(&cl);
        for (t1 = bench_now_s(); bench_now_s() - t1 < 0.002;)
            ucp_worker_progress(cl.u.w);
        fflush(g_json);
        fflush(stderr);
        raise(SIGKILL);
    }
    if (c->kill_test) {
        bench_fill_pattern(cl.buf, c->sizes[0], c->sizes[0]);
        if (cli_kill_test(&cl, c->sizes[0]) != 0) {
            failures++;
        } else {
            /* and the worker: does destroying it hang with a dead peer? (SIGALRM if so) */
            double td = bench_now_s();
            fflush(g_json);
            alarm(5);
            ucx_close(&cl.u);
            alarm(0);
            jprint("{\"bench\":\"ucx-kill-teardown\",");
            json_config(c);
            jprint(",\"worker_destroy_ms\":%.1f}\n", (bench_now_s() - td) * 1e3);
            if (!o->json_only)
                fprintf(stderr, "kill %-14s worker destroyed in %.1f ms\n", c->name,
                        (bench_now_s() - td) * 1e3);
        }
        fflush(g_json);
        fflush(stderr);
        _exit(failures ? 1 : 0);
    }
    for (i = 0; i < c->nsizes; i++) {
        bench_fill_pattern(cl.buf, c->sizes[i], c->sizes[i]);
        if (cli_bench(&cl, c->sizes[i], 0, "single") != 0)
            failures++;
    }
    for (i = 0; i < c->nchunked; i++) {
        if (c->chunked[i] <= o->chunk)
            continue;
        bench_fill_pattern(cl.buf, c->chunked[i], c->chunked[i]);
        if (cli_bench(&cl, c->chunked[i], o->chunk, "chunked") != 0)
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

/* ---- pairs: a server and a client, forked ---------------------------------------------- */

static int read_full(int fd, void *buf, size_t n, int timeout_ms)
{
    size_t got = 0;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};

    while (got < n) {
        ssize_t k;
        int pr = poll(&pfd, 1, timeout_ms);
        if (pr <= 0)
            return -1;
        k = read(fd, (char *)buf + got, n - got);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

/* Waits for pid until deadline (then SIGKILLs it); returns its wait status, -1 if killed. */
static int wait_child(pid_t pid, double deadline, int *status)
{
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid)
            return 0;
        if (w < 0 && errno != EINTR)
            return -1;
        if (bench_now_s() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, status, 0);
            return -1;
        }
        usleep(2000);
    }
}

static void child_setup(void)
{
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
}

static double pair_limit_s(const config_t *c, const opts_t *o)
{
    if (c->kill_test || c->kill_client)
        return (double)(o->kill_wait_ms + 2 * o->timeout_ms) / 1000 + PAIR_SLACK_S;
    return 120 + PAIR_SLACK_S;
}

static int run_pair(const config_t *c, const opts_t *o, double run_deadline)
{
    int pfd[2];
    pid_t spid, cpid;
    uint32_t len = 0;
    unsigned char *addr = NULL;
    int status = 0, failures = 0, client_ok = 0;
    double deadline = bench_now_s() + pair_limit_s(c, o);

    if (deadline > run_deadline)
        deadline = run_deadline;

    fflush(g_json);
    fflush(stderr);
    if (pipe(pfd) != 0) {
        bench_errorf("pipe: %s", strerror(errno));
        return 1;
    }
    spid = fork();
    if (spid < 0) {
        bench_errorf("fork: %s", strerror(errno));
        return 1;
    }
    if (spid == 0) {
        int rc;
        child_setup();
        close(pfd[0]);
        rc = run_server(c, o, pfd[1], NULL, pair_limit_s(c, o));
        fflush(g_json);
        fflush(stderr);
        _exit(rc);
    }
    close(pfd[1]);
    if (read_full(pfd[0], &len, sizeof len, 30000) != 0 || len == 0 || len > ADDR_MAX ||
        !(addr = malloc(len)) || read_full(pfd[0], addr, len, 30000) != 0) {
        bench_errorf("%s: no worker address from the server", c->name);
        close(pfd[0]);
        kill(spid, SIGKILL);
        waitpid(spid, &status, 0);
        free(addr);
        return 1;
    }
    close(pfd[0]);
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
        fflush(g_json);
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
            fflush(g_json);
        }
        failures++;
    } else if (WEXITSTATUS(status) != 0) {
        failures++;
    } else {
        client_ok = 1;
    }
    /* a client that finished well told the server to quit; otherwise it is not waited for */
    if (c->kill_client) {
        if (wait_child(spid, bench_now_s() + (double)o->kill_wait_ms / 1000 + 10, &status) != 0) {
            bench_errorf("%s: the server did not report (killed)", c->name);
            failures++;
        } else if (WIFSIGNALED(status)) {
            bench_errorf("%s: the server died by signal %d (%s)", c->name, WTERMSIG(status),
                         strsignal(WTERMSIG(status)));
            jprint("{\"bench\":\"ucx-client-kill\",");
            json_config(c);
            jprint(",\"bytes\":%zu,\"outcome\":\"server-died-by-signal-%d\"}\n", c->sizes[0],
                   WTERMSIG(status));
            fflush(g_json);
            failures++;
        } else if (WEXITSTATUS(status) != 0) {
            failures++;
        }
        return failures;
    }
    if (wait_child(spid, bench_now_s() + (c->kill_test || !client_ok || c->expect_fail ? 1 : 10),
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

/* ---- plans ---------------------------------------------------------------------------- */

static config_t *add_config(config_t *plan, int *n, const char *name, const char *tls,
                            int err_peer, const char *sizes, const char *chunked)
{
    config_t *c = &plan[(*n)++];

    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->tls = tls;
    c->err_peer = err_peer;
    bench_parse_sizes(sizes, c->sizes, &c->nsizes, MAX_SIZES, 1);
    bench_parse_sizes(chunked, c->chunked, &c->nchunked, MAX_SIZES, 1);
    return c;
}

static int plan_default(config_t *plan, const char *sizes, const char *chunked)
{
    int n = 0;

    add_config(plan, &n, "shm", NULL, 0, sizes, chunked);
    add_config(plan, &n, "tcp", "tcp", 0, sizes, chunked);
    add_config(plan, &n, "shm-errpeer", NULL, 1, "8,64M", "64M");
    add_config(plan, &n, "tcp-errpeer", "tcp", 1, "8,64M", "");
    return n;
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
        "usage: ucx-raw [options]                 fork server+client pairs (the default plan)\n"
        "       ucx-raw --experiments [options]   the README's question experiments\n"
        "       ucx-raw --server [--addr-file F] [setup options]\n"
        "       ucx-raw --client ADDR|@FILE [setup options] [options]\n"
        "Raw UCX active-message request/ack round trips: the ceiling for tfetch's UCX transport.\n"
        "JSON lines go to stdout, the human table to stderr.\n"
        "\n"
        "Plans: default = shm (UCX_TLS from the environment, default all), tcp (UCX_TLS=tcp),\n"
        "  shm-errpeer and tcp-errpeer (UCP_ERR_HANDLING_MODE_PEER: 8 B, 64 MiB).\n"
        "  Any setup option below runs that one setup instead.\n"
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
        "                      fail (default %d; --experiments: 400)\n"
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
    int i, nplan = 0, failures = 0;
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
    {
        int fd = dup(STDOUT_FILENO);
        if (fd < 0 || !(g_json = fdopen(fd, "w")) || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
            bench_errorf("setting up stdout: %s", strerror(errno));
            return 1;
        }
        setvbuf(stdout, NULL, _IOLBF, 0);
    }

    if (server)
        return run_server(&one, &o, -1, addr_file, 0);

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
        if (!setup && !experiments) {       /* sizes only: the default plan with these sizes */
            nplan = plan_default(plan, sizes, chunked);
        }
    } else if (experiments) {
        nplan = plan_experiments(plan);
    } else {
        nplan = plan_default(plan, sizes, chunked);
    }
    if (experiments && setup)
        bench_errorf("--experiments ignored: a setup option was given");
    run_deadline = bench_now_s() + (double)(o.max_seconds ? o.max_seconds
                                            : experiments && !setup ? 400 : MAX_SECONDS_DEFAULT);
    for (i = 0; i < nplan; i++) {
        if (bench_now_s() >= run_deadline) {
            bench_errorf("time limit reached (--max-seconds): %d setup(s) not run", nplan - i);
            failures += nplan - i;
            break;
        }
        if (!o.json_only)
            fprintf(stderr, "== %s\n", plan[i].name);
        failures += run_pair(&plan[i], &o, run_deadline);
    }
    if (failures)
        bench_errorf("%d failure(s)", failures);
    return failures ? 1 : 0;
}
