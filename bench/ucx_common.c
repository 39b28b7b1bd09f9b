/* ucx_common.c - the parts ucx-raw and ucx-probe share; see ucx_common.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench/ucx_common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define MEMCPY_BYTES (64 * MIB)
#define MEMCPY_REPS 20

/* Timed and warm-up repetitions by size (bench_by_size: <= 64 KiB, <= 4 MiB, <= 64 MiB, more). */
static const int reps_by_size[4] = {1000, 100, 20, 6};
static const int warmup_by_size[4] = {100, 10, 3, 1};

static volatile unsigned char g_sink;
/* The JSON lines' stream: the original stdout (ucxb_json_init). */
static FILE *g_json;
static int g_table_started;

int ucxb_json_init(void)
{
    int fd = dup(STDOUT_FILENO);

    if (fd < 0 || !(g_json = fdopen(fd, "w")) || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        bench_errorf("setting up stdout: %s", strerror(errno));
        return -1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    return 0;
}

FILE *ucxb_json(void)
{
    return g_json;
}

void jprint(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfprintf(g_json, fmt, ap);
    va_end(ap);
}

/* ---- small helpers -------------------------------------------------------------------- */

/* 0 if p[0..n) is bench_fill_pattern(seed), else -1. */
int check_pattern(const unsigned char *p, size_t n, uint64_t seed)
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
unsigned char *alloc_touched(size_t n, int byte)
{
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    memset(p, byte, n);
    return p;
}

void free_touched(unsigned char *p, size_t n)
{
    if (p)
        munmap(p, n ? n : 1);
}

void summarise(double *t, int n, size_t bytes, double memcpy_gbps, result_t *r)
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

double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *tm_name(int tm)
{
    return tm == TM_MULTI ? "multi" : tm == TM_SERIALIZED ? "serialized" : "single";
}

ucs_thread_mode_t tm_ucs(int tm)
{
    return tm == TM_MULTI ? UCS_THREAD_MODE_MULTI
         : tm == TM_SERIALIZED ? UCS_THREAD_MODE_SERIALIZED : UCS_THREAD_MODE_SINGLE;
}

const char *ucs_tm_name(ucs_thread_mode_t tm)
{
    return tm == UCS_THREAD_MODE_MULTI ? "multi"
         : tm == UCS_THREAD_MODE_SERIALIZED ? "serialized" : "single";
}


/* ---- output --------------------------------------------------------------------------- */

void json_config(const config_t *c)
{
    if (c->opt_name)
        jprint("\"ucx_%s\":\"%s\",", c->opt_name, c->opt_value);
    jprint("\"config\":\"%s\",\"tls\":\"%s\",\"err_mode\":\"%s\",\"net_only\":%d,\"wakeup\":%d,"
           "\"thread_mode\":\"%s\",\"progress_thread\":\"%s\"", c->name,
           c->tls ? c->tls : "default", c->err_peer ? "peer" : "none", c->net_only, c->wakeup,
           tm_name(c->thread_mode), pt_name(c->progress_thread));
}

void emit(const opts_t *o, const result_t *r)
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

int bench_memcpy(result_t *r)
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
        double t0 = tfx_now_s();
        memcpy(dst, src, n);
        t[i] = tfx_now_s() - t0;
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


int ucx_open(ucx_t *u, const config_t *c, int thread_mode, const char *who)
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

void ucx_close(ucx_t *u)
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
int ucx_sleep(ucx_t *u, int timeout_ms, unsigned long *sleeps)
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
        s->recv_fail_t = tfx_now_s();
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
    s->req_t = tfx_now_s();
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

void print_ep_info(const char *who, ucp_ep_h ep)
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

int run_server(const config_t *c, const opts_t *o, int addr_fd, const char *addr_file,
               double idle_s, server_hook_t hook)
{
    server_t s;
    ucp_worker_attr_t wa;
    ucp_am_handler_param_t hp;
    ucs_status_t st;
    uint32_t len32;
    double last = tfx_now_s();
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
        if (hook) {
            server_view_t v = {s.cur_id, s.total, s.got, s.req_t, s.recv_failed,
                               s.recv_status, s.recv_fail_t};
            if (hook(&v, c, o)) {
                rc = 0;
                goto out;
            }
        }
        if (n) {
            last = tfx_now_s();
            continue;
        }
        if (c->wakeup) {
            if (ucx_sleep(&s.u, 1000, &s.sleeps) < 0)
                goto out;
        }
        if (idle_s > 0 && (c->wakeup || (++spins & 0xffff) == 0) && tfx_now_s() - last > idle_s) {
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
void parse_ep_info(const char *text, char *lanes, size_t lcap, char *am_send,
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


/* ---- the client side: what every client does the same way ---------------------------- */

size_t prepare_hdrs(req_hdr_t **hdrs, size_t *cap, uint64_t id, uint16_t op, uint16_t flags,
                    size_t n, size_t chunk, uint64_t seed)
{
    size_t pieces = chunk && n > chunk ? (n + chunk - 1) / chunk : 1, i;

    if (pieces > *cap) {
        req_hdr_t *h = realloc(*hdrs, pieces * sizeof *h);
        if (!h) {
            bench_errorf("client: out of memory");
            return 0;
        }
        *hdrs = h;
        *cap = pieces;
    }
    for (i = 0; i < pieces; i++) {
        req_hdr_t *h = &(*hdrs)[i];
        memset(h, 0, sizeof *h);
        h->magic = HDR_MAGIC;
        h->op = op;
        h->flags = flags;
        h->id = id;
        h->total = n;
        h->offset = pieces > 1 ? i * chunk : 0;
        h->seed = seed;
    }
    return pieces;
}

size_t post_hdrs(ucp_ep_h ep, const req_hdr_t *hdrs, size_t npieces, const unsigned char *buf,
                 ucp_send_nbx_callback_t cb, void *user_data, int *immediate, int *err)
{
    ucp_request_param_t p;
    size_t i;
    void *r;

    memset(&p, 0, sizeof p);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p.cb.send = cb;
    p.user_data = user_data;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    for (i = 0; i < npieces; i++) {
        const req_hdr_t *h = &hdrs[i];
        int payload = h->op == OP_DATA || h->op == OP_DIE;
        size_t len = h->total - h->offset;

        if (npieces > 1 && i + 1 < npieces)
            len = hdrs[i + 1].offset - h->offset;
        r = ucp_am_send_nbx(ep, AM_REQ, h, sizeof *h, payload ? buf + h->offset : NULL,
                            payload ? len : 0, &p);
        if (UCS_PTR_IS_ERR(r)) {
            *err = (int)UCS_PTR_STATUS(r);
            break;
        }
        if (r == NULL)
            (*immediate)++;
    }
    return i;
}

int check_ack(const ack_hdr_t *ack, uint64_t id, uint16_t op, size_t n)
{
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

void emit_ep(const config_t *c, const opts_t *o, ucs_thread_mode_t granted,
             const char *transport, double connect_ms, const char *lanes, const char *am_send)
{
    jprint("{\"bench\":\"ucx-ep\",");
    json_config(c);
    jprint(",\"thread_mode_granted\":\"%s\",\"transport\":\"%s\",\"connect_ms\":%.3f,"
           "\"lanes\":[%s],\"am_send\":\"%s\"}\n", ucs_tm_name(granted), transport, connect_ms,
           lanes, am_send);
    fflush(g_json);
    if (!o->json_only)
        fprintf(stderr, "%s: %s (thread mode %s; am_send %s)\n", c->name, transport,
                ucs_tm_name(granted), am_send);
}

int ucxb_measure(const config_t *cfg, const opts_t *o, request_fn_t req, void *c,
                 const unsigned long *sleeps, const char *transport, size_t n, size_t chunk,
                 const char *variant)
{
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
    if (req(c, OP_POISON, 0, n, 0, 0, &ack) != 0 ||
        req(c, OP_DATA, F_VERIFY, n, chunk, n, &ack) != 0) {
        bench_errorf("%s %s %s: the verification request failed", cfg->name, variant,
                     bench_fmt_size(n, sz, sizeof sz));
        free(t);
        return -1;
    }
    for (i = 0; i < warmup; i++)
        if (req(c, OP_DATA, 0, n, chunk, n, &ack) != 0)
            goto fail;
    /* CPU and sleeps: over the whole timed loop, each process (the server's from its acks) */
    first = ack;
    s0 = (sleeps ? *sleeps : 0);
    c0 = cpu_s();
    w0 = tfx_now_s();
    for (i = 0; i < reps; i++) {
        double t0;
        /* the last timed one lands in a poisoned buffer and is checked after */
        if (i == reps - 1 && req(c, OP_POISON, 0, n, 0, 0, &ack) != 0)
            goto fail;
        t0 = tfx_now_s();
        if (req(c, OP_DATA, 0, n, chunk, n, &ack) != 0)
            goto fail;
        t[i] = tfx_now_s() - t0;
        nrndv += ack.nrndv;
        neager += ack.neager;
    }
    wall = tfx_now_s() - w0;
    c1 = cpu_s();
    s1 = (sleeps ? *sleeps : 0);
    last = ack;
    if (req(c, OP_CHECK, 0, n, 0, n, &ack) != 0) {
        bench_errorf("%s %s %s: the last timed request's data was wrong", cfg->name, variant,
                     bench_fmt_size(n, sz, sizeof sz));
        free(t);
        return -1;
    }
    memset(&r, 0, sizeof r);
    r.bench = "ucx-am";
    r.cfg = cfg;
    r.variant = variant;
    snprintf(r.transport, sizeof r.transport, "%s", transport);
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
    bench_errorf("%s %s %s: a timed request failed", cfg->name, variant,
                 bench_fmt_size(n, sz, sizeof sz));
    free(t);
    return -1;
}


/* ---- pairs: a server and a client, forked ---------------------------------------------- */

int read_full(int fd, void *buf, size_t n, int timeout_ms)
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
int wait_child(pid_t pid, double deadline, int *status)
{
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid)
            return 0;
        if (w < 0 && errno != EINTR)
            return -1;
        if (tfx_now_s() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, status, 0);
            return -1;
        }
        usleep(2000);
    }
}

void child_setup(void)
{
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
}


int fork_server(const config_t *c, const opts_t *o, double idle_s, server_hook_t hook,
                pid_t *spid, unsigned char **addr, uint32_t *len)
{
    int pfd[2], status;

    *addr = NULL;
    *len = 0;
    fflush(g_json);
    fflush(stderr);
    if (pipe(pfd) != 0) {
        bench_errorf("pipe: %s", strerror(errno));
        return -1;
    }
    *spid = fork();
    if (*spid < 0) {
        bench_errorf("fork: %s", strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (*spid == 0) {
        int rc;
        child_setup();
        close(pfd[0]);
        rc = run_server(c, o, pfd[1], NULL, idle_s, hook);
        fflush(g_json);
        fflush(stderr);
        _exit(rc);
    }
    close(pfd[1]);
    if (read_full(pfd[0], len, sizeof *len, 30000) != 0 || *len == 0 || *len > ADDR_MAX ||
        !(*addr = malloc(*len)) || read_full(pfd[0], *addr, *len, 30000) != 0) {
        bench_errorf("%s: no worker address from the server", c->name);
        close(pfd[0]);
        kill(*spid, SIGKILL);
        waitpid(*spid, &status, 0);
        free(*addr);
        *addr = NULL;
        return -1;
    }
    close(pfd[0]);
    return 0;
}

/* ---- plans ---------------------------------------------------------------------------- */

config_t *add_config(config_t *plan, int *n, const char *name, const char *tls,
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


void describe_ep(ucp_ep_h ep, const char *name, int info, char *tr, size_t tcap, char *lanes,
                 size_t lcap, char *am_send, size_t acap)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    snprintf(tr, tcap, "ucx/?");
    if (!f)
        return;
    ucp_ep_print_info(ep, f);
    fclose(f);
    if (text) {
        parse_ep_info(text, lanes, lcap, am_send, acap, tr, tcap);
        if (info)
            fprintf(stderr, "--- client ep (%s): ucp_ep_print_info ---\n%s---\n", name, text);
    }
    free(text);
}

int connect_ep(ucp_worker_h w, const config_t *c, const void *addr, int info,
               ucp_am_recv_callback_t ack_cb, ucp_err_handler_cb_t err_cb, void *arg,
               ucp_ep_h *out)
{
    ucp_ep_params_t ep;
    ucp_am_handler_param_t hp;
    ucs_status_t st;

    *out = NULL;
    memset(&hp, 0, sizeof hp);
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = AM_ACK;
    hp.cb = ack_cb;
    hp.arg = arg;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    if ((st = ucp_worker_set_am_recv_handler(w, &hp)) != UCS_OK) {
        bench_errorf("client: ucp_worker_set_am_recv_handler: %s", ucs_status_string(st));
        return -1;
    }
    if (info)
        ucp_worker_print_info(w, stderr);
    memset(&ep, 0, sizeof ep);
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = addr;
    ep.err_mode = c->err_peer ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    if (c->err_peer) {
        ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep.err_handler.cb = err_cb;
        ep.err_handler.arg = arg;
    }
    if ((st = ucp_ep_create(w, &ep, out)) != UCS_OK) {
        bench_errorf("client: ucp_ep_create: %s", ucs_status_string(st));
        *out = NULL;
        return -1;
    }
    return 0;
}

void close_ep(ucp_worker_h w, ucp_ep_h ep, int force)
{
    ucp_request_param_t p;
    void *r;
    double deadline = tfx_now_s() + 2;

    if (!ep)
        return;
    memset(&p, 0, sizeof p);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    r = ucp_ep_close_nbx(ep, &p);
    if (r && !UCS_PTR_IS_ERR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS && tfx_now_s() < deadline)
            ucp_worker_progress(w);
        if (ucp_request_check_status(r) == UCS_INPROGRESS)
            bench_errorf("client: endpoint close still in progress after 2 s; leaving it");
        else
            ucp_request_free(r);
    }
}

size_t config_max_size(const config_t *c)
{
    size_t maxn = 8;
    int i;

    for (i = 0; i < c->nsizes; i++)
        if (c->sizes[i] > maxn)
            maxn = c->sizes[i];
    for (i = 0; i < c->nchunked; i++)
        if (c->chunked[i] > maxn)
            maxn = c->chunked[i];
    return maxn;
}

int run_plan(const config_t *plan, int nplan, const opts_t *o, double run_deadline,
             int (*pair)(const config_t *c, const opts_t *o, double run_deadline))
{
    int i, failures = 0;

    for (i = 0; i < nplan; i++) {
        if (tfx_now_s() >= run_deadline) {
            bench_errorf("time limit reached (--max-seconds): %d setup(s) not run", nplan - i);
            failures += nplan - i;
            break;
        }
        if (!o->json_only)
            fprintf(stderr, "== %s\n", plan[i].name);
        failures += pair(&plan[i], o, run_deadline);
    }
    if (failures)
        bench_errorf("%d failure(s)", failures);
    return failures ? 1 : 0;
}
