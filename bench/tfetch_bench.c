/* tfetch_bench.c - tfetch-bench, the benchmark harness of tfetch.
 *
 * One run, one process, one thread: first a memcpy baseline (64 MiB, one thread, into a buffer
 * already touched), then PUT and GET over HTTP of one-tensor documents of each requested size,
 * driven through the public libtfetch API (client/tfetch.h) and libc only, each with warm-up
 * and N timed repetitions, reporting p50/p99 latency, throughput (payload bytes / p50 time, and
 * the mean throughput) and the ratio of that throughput to the same run's memcpy. Then
 * exchanges (POST /v1/call/echo, the daemon's built-in echo route) of each exchange size: one
 * at a time (blocking tf_fetch with in and out), and with --inflight requests kept in flight
 * on one client through the async API (tf_fetch_start; each completion starts the next), the
 * latter reporting per-request latency (start to callback) and req/s and GB/s over the wall
 * time. The target is either a running daemon (--url) or a tfetchd this program spawns on a
 * free loopback port and stops (SIGTERM, waitpid) at the end. Before timing, one PUT and one
 * GET per size (one exchange per exchange size) are compared byte for byte, and the last timed
 * GET or exchange reply is compared again, so a fast wrong answer is an error, never a figure.
 * Output: one JSON line per measurement on stdout, the human table on stderr (--json: JSON
 * lines only). Exit status 0 if every measurement succeeded, 1 if any failed, 2 on a usage
 * error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/common.h"
#include "tests/fixtures.h"
#include "client/tfetch.h"

#define MEMCPY_BYTES (64 * MIB)
#define MEMCPY_REPS_DEFAULT 20
#define TIMEOUT_MS_DEFAULT 120000L
#define DAEMON_START_MS 15000
#define DAEMON_STOP_MS 10000
#define MAX_SIZES 32
#define MAX_DAEMON_ARGS 32
#define TENSOR_NAME "data"
#define INFLIGHT_DEFAULT 64
#define MAX_INFLIGHT 4096
#define ECHO_PATH "/v1/call/echo"

static const char *const default_sizes = "8,64K,4M,64M,256M";
static const char *const default_xsizes = "8,4M";
/* Timed and warm-up repetitions by size (bench_by_size: <= 64 KiB, <= 4 MiB, <= 64 MiB, more). */
static const int reps_by_size[4] = {200, 50, 10, 4};
static const int warmup_by_size[4] = {20, 5, 2, 1};

const char *const bench_prog = "tfetch-bench";

typedef struct {
    const char *url;                            /* --url; NULL: spawn tfetchd */
    const char *tfetchd;                        /* path (or name on PATH) of tfetchd */
    const char *daemon_args[MAX_DAEMON_ARGS];   /* --tfetchd-arg, appended to its argv */
    int ndaemon_args;
    size_t sizes[MAX_SIZES];
    int nsizes;
    size_t xsizes[MAX_SIZES];                   /* exchange sizes */
    int nxsizes;                                /* 0: no exchanges */
    int inflight;                               /* 0: no async exchanges */
    int inflight_reps;                          /* 0: by size */
    int reps;                                   /* 0: by size */
    int warmup;                                 /* -1: by size */
    int memcpy_reps;
    long timeout_ms;
    int json_only;
    char transports[64];                        /* --transports: "http,ucx" */
} opts_t;

/* One measurement: what the JSON line and the table row say. */
typedef struct {
    const char *bench;          /* "memcpy", "put", "get", "exchange" */
    int inflight;               /* exchange: requests in flight (1, or --inflight); else 0 */
    double wall_s;              /* exchange: wall time of the timed requests */
    double req_per_s;           /* exchange: 1 / p50 with 1 in flight, else reps / wall_s */
    char transport[32];
    size_t bytes;               /* payload bytes per operation */
    uint64_t wire_bytes;        /* body bytes on the wire (last rep), 0 for memcpy */
    int reps;
    int warmup;
    double p50_us;
    double p99_us;
    double mean_us;
    double gbps;                /* bytes / p50; exchange in flight: bytes * reps / wall_s */
    double mean_gbps;           /* bytes * reps / total time (sum of the latencies) */
    double vs_memcpy;           /* gbps / this run's memcpy gbps */
} result_t;

typedef struct {
    td_daemon_t td;             /* the shared spawner's (tests/fixtures.c) */
    int died;                   /* it ended on its own during the run */
} daemon_t;

enum { OP_PUT, OP_GET, OP_EXCHANGE };

static volatile sig_atomic_t g_daemon_pid;     /* for the signal handler */
static char g_log_path[256];                    /* for the signal handler */
static volatile unsigned char g_sink;          /* keeps memcpy results observable */
static int g_table_started;

/* ---- small helpers -------------------------------------------------------------------- */

static void report_failure(const tf_client_t *c, const char *verb, const char *what,
                           tf_status_t st)
{
    const tf_result_t *r = tf_client_last(c);
    bench_errorf("%s %s: %s (%s), HTTP %d%s%s", verb, what, tf_err_name(st), tf_strerror(st),
                 r ? r->http_status : 0, r && r->error[0] ? ": " : "", r ? r->error : "");
}

/* Requests timed with --inflight in flight: enough for a p99 of the whole pipeline. */
static int default_inflight_reps(size_t n, int inflight)
{
    int k;

    if (n <= 64 * KIB)
        k = 10000;
    else if (n <= 4 * MIB)
        k = 640;
    else if (n <= 64 * MIB)
        k = 64;
    else
        k = 16;
    return k > 4 * inflight ? k : 4 * inflight;
}

/* Fills the timing fields of r from n samples (seconds); sorts t. */
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

/* ---- output --------------------------------------------------------------------------- */

static void emit(const opts_t *o, const result_t *r)
{
    char sz[32], rps[32], inflight[16];

    printf("{\"bench\":\"%s\",\"transport\":\"%s\",\"bytes\":%zu,\"wire_bytes\":%" PRIu64
           ",\"reps\":%d,\"warmup\":%d,\"p50_us\":%.3f,\"p99_us\":%.3f,\"mean_us\":%.3f"
           ",\"gbps\":%.6g,\"mean_gbps\":%.6g,\"vs_memcpy\":%.6g",
           r->bench, r->transport, r->bytes, r->wire_bytes, r->reps, r->warmup, r->p50_us,
           r->p99_us, r->mean_us, r->gbps, r->mean_gbps, r->vs_memcpy);
    if (r->inflight > 0)
        printf(",\"inflight\":%d,\"wall_s\":%.6f,\"req_per_s\":%.1f", r->inflight, r->wall_s,
               r->req_per_s);
    printf("}\n");
    fflush(stdout);
    if (o->json_only)
        return;
    if (!g_table_started) {
        fprintf(stderr, "%-8s %4s %-9s %-10s %5s %12s %12s %9s %9s %8s %10s\n", "bench", "infl",
                "transport", "size", "reps", "p50 us", "p99 us", "GB/s", "GB/s mean",
                "x memcpy", "req/s");
        g_table_started = 1;
    }
    if (r->req_per_s > 0)
        snprintf(rps, sizeof rps, "%.0f", r->req_per_s);
    else if (r->wire_bytes > 0 && r->p50_us > 0)
        snprintf(rps, sizeof rps, "%.0f", 1e6 / r->p50_us);
    else
        snprintf(rps, sizeof rps, "-");
    if (r->inflight > 0)
        snprintf(inflight, sizeof inflight, "%d", r->inflight);
    else
        snprintf(inflight, sizeof inflight, "%s", r->wire_bytes > 0 ? "1" : "-");
    fprintf(stderr, "%-8s %4s %-9s %-10s %5d %12.1f %12.1f %9.3f %9.3f %8.3f %10s\n", r->bench,
            inflight, r->transport, bench_fmt_size(r->bytes, sz, sizeof sz), r->reps, r->p50_us,
            r->p99_us, r->gbps, r->mean_gbps, r->vs_memcpy, rps);
    fflush(stderr);
}

/* ---- memcpy baseline ------------------------------------------------------------------ */

static int bench_memcpy(const opts_t *o, result_t *r)
{
    size_t n = MEMCPY_BYTES;
    unsigned char *src = malloc(n), *dst = malloc(n);
    double *t = calloc((size_t)o->memcpy_reps, sizeof *t);
    int i, rc = -1;

    if (!src || !dst || !t) {
        bench_errorf("memcpy: out of memory");
        goto out;
    }
    bench_fill_pattern(src, n, 1);
    memset(dst, 0, n);                          /* touched: no page faults in the timing */
    memcpy(dst, src, n);                        /* warm-up */
    for (i = 0; i < o->memcpy_reps; i++) {
        double t0;
        src[(size_t)i * 4099 % n] ^= 1;
        t0 = tfx_now_s();
        memcpy(dst, src, n);
        t[i] = tfx_now_s() - t0;
        g_sink ^= dst[(size_t)i * 8191 % n];
    }
    memset(r, 0, sizeof *r);
    r->bench = "memcpy";
    snprintf(r->transport, sizeof r->transport, "none");
    r->warmup = 1;
    summarise(t, o->memcpy_reps, n, 0, r);
    r->vs_memcpy = 1.0;
    rc = 0;
out:
    free(t);
    free(dst);
    free(src);
    return rc;
}

/* ---- the daemon ----------------------------------------------------------------------- */

static void on_signal(int sig)
{
    pid_t pid = (pid_t)g_daemon_pid;

    if (pid > 0)
        kill(pid, SIGTERM);
    if (g_log_path[0])
        unlink(g_log_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Describes a wait status; returns 1 if it is a clean exit (0, or death by our SIGTERM). */
static int describe_exit(int status, char *buf, size_t cap)
{
    if (WIFEXITED(status)) {
        snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
        return WEXITSTATUS(status) == 0;
    }
    if (WIFSIGNALED(status)) {
        snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
        return WTERMSIG(status) == SIGTERM;
    }
    snprintf(buf, cap, "ended with wait status %d", status);
    return 0;
}

/* Non-zero if the daemon is still running; otherwise reaps it and says how it ended (its
 * log is shown when it is stopped). */
static int daemon_alive(daemon_t *d)
{
    int status;
    char how[96];

    if (d->td.pid <= 0)
        return 1;                               /* not ours: assume it is */
    if (waitpid(d->td.pid, &status, WNOHANG) != d->td.pid)
        return 1;
    describe_exit(status, how, sizeof how);
    bench_errorf("tfetchd (pid %ld) %s during the run", (long)d->td.pid, how);
    d->td.pid = 0;
    d->died = 1;
    g_daemon_pid = 0;
    return 0;
}

static int daemon_start(daemon_t *d, const opts_t *o, char *base, size_t cap)
{
    const char *argv[8 + MAX_DAEMON_ARGS];
    td_opts_t to = {.bin = o->tfetchd, .args = argv, .own_config = 1,
                    .start_ms = DAEMON_START_MS, .log_prefix = "/tmp/tfetch-bench-tfetchd"};
    int argc = 0, i;

    memset(d, 0, sizeof *d);
    d->td.out_fd = -1;
    if (strchr(o->tfetchd, '/') && access(o->tfetchd, X_OK) != 0) {
        bench_errorf("no runnable tfetchd at %s (%s): build it with make, or pass --tfetchd PATH, "
                     "$TFETCHD or --url URL", o->tfetchd, strerror(errno));
        return -1;
    }
    argv[argc++] = "--max-body";
    argv[argc++] = "1G";
    argv[argc++] = "--store-memory";
    argv[argc++] = "4G";
    for (i = 0; i < o->ndaemon_args; i++)
        argv[argc++] = o->daemon_args[i];
    argv[argc] = NULL;
    if (td_start_opts(&d->td, &to) != 0) {
        bench_errorf("%s did not print 'listening on http://ADDR:PORT' within %d ms",
                     o->tfetchd, DAEMON_START_MS);
        return -1;                              /* the caller shows the log */
    }
    g_daemon_pid = d->td.pid;
    snprintf(g_log_path, sizeof g_log_path, "%s", d->td.log_path);
    snprintf(base, cap, "%s", d->td.base);
    return 0;
}

/* SIGTERM, then SIGKILL after DAEMON_STOP_MS. Returns 0 if it ended cleanly (exit 0, or
 * death by our SIGTERM); shows and keeps its log otherwise, or if show. */
static int daemon_stop(daemon_t *d, int show)
{
    int clean = !d->died, rc;

    if (d->td.pid > 0) {
        pid_t pid = d->td.pid;
        rc = td_stop(&d->td, SIGTERM, DAEMON_STOP_MS);
        g_daemon_pid = 0;
        if (rc < 0) {
            bench_errorf("tfetchd (pid %ld) ignored SIGTERM for %d ms; killed it", (long)pid,
                         DAEMON_STOP_MS);
            clean = 0;
        } else if (rc != 0 && rc != 128 + SIGTERM) {
            bench_errorf("tfetchd (pid %ld) %s %d when stopped", (long)pid,
                         rc > 128 ? "was killed by signal" : "exited with status",
                         rc > 128 ? rc - 128 : rc);
            clean = 0;
        }
    } else {
        td_stop(&d->td, SIGTERM, 0);            /* closes its stdout */
    }
    if (d->td.log_path[0]) {
        g_log_path[0] = '\0';
        if (!clean || show) {
            td_show_log(&d->td);
            bench_errorf("tfetchd's log kept at %s", d->td.log_path);
        } else {
            unlink(d->td.log_path);
        }
        d->td.log_path[0] = '\0';
    }
    return clean ? 0 : -1;
}

/* ---- PUT and GET ---------------------------------------------------------------------- */

/* 0 if doc is exactly one U8 tensor [n] holding want; otherwise says why in why. */
static int verify_doc(const tf_doc_t *doc, const unsigned char *want, size_t n, char *why,
                      size_t cap)
{
    const tf_tensor_t *t = doc && tf_doc_count(doc) == 1 ? tf_doc_find(doc, TENSOR_NAME) : NULL;
    const unsigned char *got;
    size_t i;

    if (!doc) {
        snprintf(why, cap, "no document returned");
        return -1;
    }
    if (!t) {
        snprintf(why, cap, "expected one tensor '%s', got %zu tensors", TENSOR_NAME,
                 tf_doc_count(doc));
        return -1;
    }
    if (t->dtype != TF_U8 || t->rank != 1 || t->shape[0] != (int64_t)n || t->nbytes != n) {
        snprintf(why, cap, "expected U8 [%zu] (%zu bytes), got %s rank %d [%" PRId64
                 "] (%zu bytes)", n, n, tf_dtype_name(t->dtype) ? tf_dtype_name(t->dtype) : "?",
                 t->rank, t->rank > 0 ? t->shape[0] : -1, t->nbytes);
        return -1;
    }
    got = t->data;
    if (n > 0 && got == NULL) {
        snprintf(why, cap, "tensor data is NULL");
        return -1;
    }
    if (memcmp(got, want, n) == 0)
        return 0;
    for (i = 0; i < n && got[i] == want[i]; i++)
        ;
    snprintf(why, cap, "bytes differ from offset %zu (got 0x%02x, expected 0x%02x)", i, got[i],
             want[i]);
    return -1;
}

/* One timed request; a GET's or an exchange's reply is kept in *keep if keep is given, else
 * freed. */
static tf_status_t timed_op(tf_client_t *c, int op, const char *url, const tf_doc_t *doc,
                            double *secs, tf_doc_t **keep)
{
    tf_doc_t *got = NULL;
    tf_status_t st;
    double t0 = tfx_now_s();

    if (op == OP_PUT)
        st = tf_put(c, url, doc);
    else if (op == OP_GET)
        st = tf_get(c, url, 0, &got);
    else
        st = tf_fetch(c, url, doc, &got);       /* in and out: an exchange */
    *secs = tfx_now_s() - t0;
    if (keep && st == TF_OK)
        *keep = got;
    else
        tf_doc_free(got);
    return st;
}

/* Warm-up then reps timed requests, one at a time; fills r. For a GET or an exchange, the last
 * reply is verified. */
static int bench_op(tf_client_t *c, int op, const char *url, const tf_doc_t *doc,
                          const unsigned char *want, size_t n, int warmup, int reps,
                          double memcpy_gbps, result_t *r)
{
    static const char *const names[] = {"put", "get", "exchange"};
    static const char *const verbs[] = {"PUT", "GET", "exchange (POST)"};
    const char *name = names[op], *verb = verbs[op];
    int keeps = op != OP_PUT;
    double *t = calloc((size_t)reps, sizeof *t), dummy, start;
    const tf_result_t *last;
    tf_doc_t *got = NULL;
    tf_status_t st;
    char what[640], sz[32], why[256];
    int i, rc = -1;

    snprintf(what, sizeof what, "%s (%s)", url, bench_fmt_size(n, sz, sizeof sz));
    if (!t) {
        bench_errorf("%s: out of memory", what);
        return -1;
    }
    for (i = 0; i < warmup; i++) {
        st = timed_op(c, op, url, doc, &dummy, NULL);
        if (st != TF_OK) {
            report_failure(c, verb, what, st);
            goto out;
        }
    }
    start = tfx_now_s();
    for (i = 0; i < reps; i++) {
        tf_doc_free(got);
        got = NULL;
        st = timed_op(c, op, url, doc, &t[i], keeps && i == reps - 1 ? &got : NULL);
        if (st != TF_OK) {
            report_failure(c, verb, what, st);
            goto out;
        }
    }
    start = tfx_now_s() - start;              /* now the wall time of the timed reps */
    last = tf_client_last(c);
    if (keeps && verify_doc(got, want, n, why, sizeof why) != 0) {
        bench_errorf("%s %s: the last timed %s returned wrong data: %s", verb, what, name, why);
        goto out;
    }
    memset(r, 0, sizeof *r);
    r->bench = name;
    snprintf(r->transport, sizeof r->transport, "%s",
             last && last->transport[0] ? last->transport : "unknown");
    r->wire_bytes = last ? (op == OP_GET ? last->bytes_received : last->bytes_sent) : 0;
    r->warmup = warmup;
    summarise(t, reps, n, memcpy_gbps, r);
    if (op == OP_EXCHANGE) {
        r->inflight = 1;
        r->wall_s = start;
        r->req_per_s = r->p50_us > 0 ? 1e6 / r->p50_us : 0;
    }
    rc = 0;
out:
    tf_doc_free(got);
    free(t);
    return rc;
}

/* PUT and GET of one U8 tensor of n bytes under /v1/tensors/bench-N. Returns failures. */
static int bench_size(const opts_t *o, tf_client_t *c, const char *base, size_t n,
                            double memcpy_gbps)
{
    char url[512], what[640], sz[32], why[256];
    int64_t shape[1] = {(int64_t)n};
    int reps = o->reps > 0 ? o->reps : bench_by_size(n, reps_by_size);
    int warmup = o->warmup >= 0 ? o->warmup : bench_by_size(n, warmup_by_size);
    unsigned char *buf = malloc(n);
    tf_doc_t *doc = NULL, *got = NULL, *packed = NULL;
    tf_status_t st;
    result_t r;
    int failures = 2;

    snprintf(url, sizeof url, "%s/v1/tensors/bench-%zu", base, n);
    snprintf(what, sizeof what, "%s (%s)", url, bench_fmt_size(n, sz, sizeof sz));
    if (!buf || !(doc = tf_doc_new())) {
        bench_errorf("%s: out of memory", what);
        goto out;
    }
    bench_fill_pattern(buf, n, n);              /* touched before anything is timed */
    st = tf_doc_add(doc, TENSOR_NAME, TF_U8, 1, shape, buf, n, TF_BORROW);
    if (st != TF_OK) {
        bench_errorf("%s: tf_doc_add: %s", what, tf_strerror(st));
        goto out;
    }

    /* Correctness first: what one PUT stored, one GET must return byte for byte. */
    st = tf_put(c, url, doc);
    if (st != TF_OK) {
        report_failure(c, "first PUT of", what, st);
        goto out;
    }
    st = tf_get(c, url, 0, &got);
    if (st != TF_OK) {
        report_failure(c, "first GET of", what, st);
        goto out;
    }
    if (verify_doc(got, buf, n, why, sizeof why) != 0) {
        bench_errorf("GET %s: the first GET after PUT returned wrong data: %s", what, why);
        goto out;
    }
    tf_doc_free(got);
    got = NULL;

    failures = 0;
    if (bench_op(c, OP_PUT, url, doc, buf, n, warmup, reps, memcpy_gbps, &r) == 0)
        emit(o, &r);
    else
        failures++;
    if (bench_op(c, OP_GET, url, doc, buf, n, warmup, reps, memcpy_gbps, &r) == 0)
        emit(o, &r);
    else
        failures++;
    /* put1: the same PUT of a document built in one buffer (tf_doc_new_packed), sent in one
     * piece (over UCX a same-host daemon reads it straight from there) instead of gathered
     * from the header and the tensor's own memory. */
    tf_tensor_spec_t spec = {TENSOR_NAME, TF_U8, 1, shape};
    if (tf_doc_new_packed(&spec, 1, &packed) != TF_OK) {
        bench_errorf("%s: tf_doc_new_packed: out of memory", what);
        failures++;
    } else {
        memcpy(tf_doc_writable(packed, 0), buf, n);
        if (bench_op(c, OP_PUT, url, packed, buf, n, warmup, reps, memcpy_gbps, &r) == 0) {
            r.bench = "put1";
            emit(o, &r);
        } else {
            failures++;
        }
    }

    st = tf_delete(c, url);                     /* leave the store as we found it */
    if (st != TF_OK)
        report_failure(c, "DELETE", what, st);
out:
    tf_doc_free(got);
    tf_doc_free(doc);
    tf_doc_free(packed);
    free(buf);
    return failures;
}

/* ---- exchanges ------------------------------------------------------------------------ */

/* A pipeline of exchanges kept `inflight` deep on one client through the async API: each
 * completion (callback) starts the next request until `total` have been started. */
typedef struct xpipe xpipe_t;

typedef struct {
    xpipe_t *p;
    double t0;                  /* when tf_fetch_start was called */
    double secs;                /* start to callback */
} xreq_t;

struct xpipe {
    tf_client_t *c;
    tf_request_t rq;
    const unsigned char *want;
    size_t n;
    int total, started, done;
    xreq_t *reqs;               /* [total], in start order */
    tf_doc_t *last;             /* the reply of the request that completed last */
    int failed;
    char error[768];            /* the first failure */
    char transport[32];
    uint64_t wire_bytes;        /* request body bytes of the last request */
};

/* Cheap enough to run on every reply inside the timing: one U8 tensor of n bytes whose first
 * and last (up to) 64 bytes are right. The last reply is compared in full afterwards. */
static int quick_check(const tf_doc_t *doc, const unsigned char *want, size_t n, char *why,
                       size_t cap)
{
    const tf_tensor_t *t = doc && tf_doc_count(doc) == 1 ? tf_doc_find(doc, TENSOR_NAME) : NULL;
    size_t k = n < 64 ? n : 64;
    const unsigned char *got;

    if (!t || t->dtype != TF_U8 || t->nbytes != n || (n > 0 && !t->data))
        return verify_doc(doc, want, n, why, cap);     /* says what is wrong */
    got = t->data;
    if (memcmp(got, want, k) != 0 || memcmp(got + n - k, want + n - k, k) != 0)
        return verify_doc(doc, want, n, why, cap);
    return 0;
}

static void xpipe_fail(xpipe_t *p, const char *fmt, ...)
{
    va_list ap;

    if (p->failed++)
        return;                                 /* keep the first */
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof p->error, fmt, ap);
    va_end(ap);
}

static void on_exchange(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *res,
                        void *user_data);

static void xpipe_start_one(xpipe_t *p)
{
    xreq_t *x = &p->reqs[p->started];
    const tf_result_t *r;
    tf_status_t st;

    x->p = p;
    x->t0 = tfx_now_s();
    st = tf_fetch_start(p->c, &p->rq, on_exchange, x, NULL);
    if (st != TF_OK) {
        r = tf_client_last(p->c);
        xpipe_fail(p, "tf_fetch_start of request %d: %s (%s)%s%s", p->started + 1,
                   tf_err_name(st), tf_strerror(st), r && r->error[0] ? ": " : "",
                   r ? r->error : "");
        return;
    }
    p->started++;
}

static void on_exchange(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *res,
                        void *user_data)
{
    xreq_t *x = user_data;
    xpipe_t *p = x->p;
    char why[256];

    (void)f;
    x->secs = tfx_now_s() - x->t0;
    p->done++;
    if (st != TF_OK) {
        xpipe_fail(p, "request %d: %s (%s), HTTP %d%s%s", (int)(x - p->reqs) + 1,
                   tf_err_name(st), tf_strerror(st), res ? res->http_status : 0,
                   res && res->error[0] ? ": " : "", res ? res->error : "");
        tf_doc_free(doc);
        return;
    }
    if (quick_check(doc, p->want, p->n, why, sizeof why) != 0) {
        xpipe_fail(p, "request %d returned wrong data: %s", (int)(x - p->reqs) + 1, why);
        tf_doc_free(doc);
        return;
    }
    if (p->done == p->total) {
        tf_doc_free(p->last);
        p->last = doc;                          /* verified in full once the clock stops */
        if (res) {
            snprintf(p->transport, sizeof p->transport, "%s", res->transport);
            p->wire_bytes = res->bytes_sent;
        }
    } else {
        tf_doc_free(doc);
    }
    if (!p->failed && p->started < p->total)
        xpipe_start_one(p);                     /* keep the pipeline full */
}

/* Runs total exchanges, inflight at a time; *wall is from the first start to the last
 * completion. 0 on success, else the failure is in p->error. */
static int xpipe_run(xpipe_t *p, int total, int inflight, double *wall)
{
    double t0;
    tf_status_t st;
    int k;

    p->total = total;
    p->started = p->done = p->failed = 0;
    p->error[0] = '\0';
    tf_doc_free(p->last);
    p->last = NULL;
    memset(p->reqs, 0, (size_t)total * sizeof *p->reqs);
    t0 = tfx_now_s();
    for (k = 0; k < inflight && k < total && !p->failed; k++)
        xpipe_start_one(p);
    st = tf_client_run(p->c, -1);
    *wall = tfx_now_s() - t0;
    if (st != TF_OK)
        xpipe_fail(p, "tf_client_run: %s (%s)", tf_err_name(st), tf_strerror(st));
    if (!p->failed && p->done != total)
        xpipe_fail(p, "%d of %d requests completed", p->done, total);
    return p->failed ? -1 : 0;
}

/* inflight exchanges kept in flight through the async API: warm-up (two rounds) untimed,
 * then reps timed ones. Latency per request from tf_fetch_start to its callback; throughput
 * over the wall time. */
static int bench_inflight(const opts_t *o, tf_client_t *c, const char *url, const tf_doc_t *doc,
                                const unsigned char *want, size_t n, int reps, double memcpy_gbps,
                                result_t *r)
{
    xpipe_t p;
    char what[640], sz[32], why[256];
    int inflight = o->inflight, warmup = 2 * o->inflight, i, rc = -1;
    double *t = calloc((size_t)reps, sizeof *t), wall;
    tf_status_t st;

    memset(&p, 0, sizeof p);
    p.c = c;
    p.rq.op = TF_OP_EXCHANGE;
    p.rq.url = url;
    p.rq.in = doc;
    p.want = want;
    p.n = n;
    p.reqs = calloc((size_t)(reps > warmup ? reps : warmup), sizeof *p.reqs);
    snprintf(what, sizeof what, "%s (%s, %d in flight)", url, bench_fmt_size(n, sz, sizeof sz),
             inflight);
    if (!t || !p.reqs) {
        bench_errorf("%s: out of memory", what);
        goto out;
    }
    /* HTTP/1.1 does not pipeline: one connection per request in flight. */
    st = tf_client_set_max_connections(c, inflight);
    if (st != TF_OK) {
        bench_errorf("%s: tf_client_set_max_connections(%d): %s", what, inflight, tf_strerror(st));
        goto out;
    }
    if (xpipe_run(&p, warmup, inflight, &wall) != 0) {
        bench_errorf("exchange %s, warm-up: %s", what, p.error);
        goto out;
    }
    if (xpipe_run(&p, reps, inflight, &wall) != 0) {
        bench_errorf("exchange %s: %s", what, p.error);
        goto out;
    }
    if (verify_doc(p.last, want, n, why, sizeof why) != 0) {
        bench_errorf("exchange %s: the last reply returned wrong data: %s", what, why);
        goto out;
    }
    for (i = 0; i < reps; i++)
        t[i] = p.reqs[i].secs;
    memset(r, 0, sizeof *r);
    r->bench = "exchange";
    snprintf(r->transport, sizeof r->transport, "%s", p.transport[0] ? p.transport : "unknown");
    r->wire_bytes = p.wire_bytes;
    r->warmup = warmup;
    summarise(t, reps, n, memcpy_gbps, r);
    r->inflight = inflight;
    r->wall_s = wall;
    r->req_per_s = wall > 0 ? reps / wall : 0;
    r->gbps = wall > 0 ? (double)n * reps / wall / 1e9 : 0;   /* each way */
    r->vs_memcpy = memcpy_gbps > 0 ? r->gbps / memcpy_gbps : 0;
    rc = 0;
out:
    tf_client_set_max_connections(c, 16);       /* the library's default again */
    tf_doc_free(p.last);
    free(p.reqs);
    free(t);
    return rc;
}

/* Exchanges of one U8 tensor of n bytes with the echo route: one at a time, then --inflight
 * at a time. Returns failures. */
static int bench_xsize(const opts_t *o, tf_client_t *c, const char *base, size_t n,
                             double memcpy_gbps)
{
    char url[512], what[640], sz[32], why[256];
    int64_t shape[1] = {(int64_t)n};
    int reps = o->reps > 0 ? o->reps : bench_by_size(n, reps_by_size);
    int warmup = o->warmup >= 0 ? o->warmup : bench_by_size(n, warmup_by_size);
    int xreps = o->inflight_reps > 0 ? o->inflight_reps : default_inflight_reps(n, o->inflight);
    unsigned char *buf = malloc(n);
    tf_doc_t *doc = NULL, *got = NULL;
    tf_status_t st;
    result_t r;
    int failures = o->inflight > 0 ? 2 : 1;

    snprintf(url, sizeof url, "%s%s", base, ECHO_PATH);
    snprintf(what, sizeof what, "%s (%s)", url, bench_fmt_size(n, sz, sizeof sz));
    if (!buf || !(doc = tf_doc_new())) {
        bench_errorf("%s: out of memory", what);
        goto out;
    }
    bench_fill_pattern(buf, n, n ^ 0x5eed);     /* touched before anything is timed */
    st = tf_doc_add(doc, TENSOR_NAME, TF_U8, 1, shape, buf, n, TF_BORROW);
    if (st != TF_OK) {
        bench_errorf("%s: tf_doc_add: %s", what, tf_strerror(st));
        goto out;
    }

    /* Correctness first: the echo must be what was sent, byte for byte. */
    st = tf_fetch(c, url, doc, &got);
    if (st != TF_OK) {
        report_failure(c, "first exchange with", what, st);
        goto out;
    }
    if (verify_doc(got, buf, n, why, sizeof why) != 0) {
        bench_errorf("exchange %s: the first reply was wrong: %s", what, why);
        goto out;
    }

    failures = 0;
    if (bench_op(c, OP_EXCHANGE, url, doc, buf, n, warmup, reps, memcpy_gbps, &r) == 0)
        emit(o, &r);
    else
        failures++;
    if (o->inflight > 0) {
        if (bench_inflight(o, c, url, doc, buf, n, xreps, memcpy_gbps, &r) == 0)
            emit(o, &r);
        else
            failures++;
    }
out:
    tf_doc_free(got);
    tf_doc_free(doc);
    free(buf);
    return failures;
}

/* ---- main ----------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: tfetch-bench [options]\n"
        "Measures memcpy, then PUT and GET of one-tensor documents over HTTP via libtfetch,\n"
        "then exchanges with the daemon's echo route (POST /v1/call/echo), one at a time and\n"
        "--inflight at a time through the async API.\n"
        "JSON lines (one per measurement) go to stdout, the human table to stderr.\n"
        "\n"
        "  --url URL           benchmark the daemon at URL (http://HOST:PORT) instead of\n"
        "                      spawning one\n"
        "  --tfetchd PATH      the tfetchd to spawn (default: $TFETCHD, else ./daemon/tfetchd);\n"
        "                      run as: PATH --port 0 --listen 127.0.0.1 --max-body 1G\n"
        "                      --store-memory 4G [--tfetchd-arg ...]\n"
        "  --tfetchd-arg ARG   append ARG to the spawned tfetchd's arguments (repeatable)\n"
        "  --sizes LIST        document sizes, comma-separated, K/M/G binary suffixes\n"
        "                      (default %s)\n"
        "  --exchange-sizes LIST  exchange sizes, as --sizes (default %s; none: no\n"
        "                      exchanges)\n"
        "  --inflight N        exchanges kept in flight on one client, one connection each\n"
        "                      (default %d; 0: only one at a time)\n"
        "  --inflight-reps N   timed exchanges with --inflight in flight (default by size:\n"
        "                      10000 up to 64K, 640 up to 4M, 64 up to 64M, 16 above; at\n"
        "                      least 4 x --inflight); 2 x --inflight untimed ones first\n"
        "  --reps N            timed repetitions per size, one at a time (default by size:\n"
        "                      200 up to 64K, 50 up to 4M, 10 up to 64M, 4 above)\n"
        "  --warmup N          untimed repetitions first (default by size: 20, 5, 2, 1)\n"
        "  --memcpy-reps N     memcpy baseline repetitions (default %d)\n"
        "  --timeout-ms MS     per-request timeout (default %ld; 0: none)\n"
        "  --transports LIST   transports to measure, in order: http, ucx (default\n"
        "                      http,ucx; ucx is skipped, saying why, when the daemon or the\n"
        "                      library cannot upgrade)\n"
        "  --json              JSON lines only (no table)\n"
        "  -h, --help          this text\n",
        default_sizes, default_xsizes, INFLIGHT_DEFAULT, MEMCPY_REPS_DEFAULT,
        TIMEOUT_MS_DEFAULT);
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    const char *env = getenv("TFETCHD");
    long v;
    int i;

    memset(o, 0, sizeof *o);
    o->tfetchd = env && *env ? env : "./daemon/tfetchd";
    o->warmup = -1;
    o->memcpy_reps = MEMCPY_REPS_DEFAULT;
    o->timeout_ms = TIMEOUT_MS_DEFAULT;
    o->inflight = INFLIGHT_DEFAULT;
    bench_parse_sizes(default_sizes, o->sizes, &o->nsizes, MAX_SIZES, 0);
    bench_parse_sizes(default_xsizes, o->xsizes, &o->nxsizes, MAX_SIZES, 0);
    snprintf(o->transports, sizeof o->transports, "http,ucx");

    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = strcmp(a, "--url") == 0 || strcmp(a, "--tfetchd") == 0 ||
                    strcmp(a, "--tfetchd-arg") == 0 || strcmp(a, "--sizes") == 0 ||
                    strcmp(a, "--reps") == 0 || strcmp(a, "--warmup") == 0 ||
                    strcmp(a, "--memcpy-reps") == 0 || strcmp(a, "--timeout-ms") == 0 ||
                    strcmp(a, "--exchange-sizes") == 0 || strcmp(a, "--inflight") == 0 ||
                    strcmp(a, "--inflight-reps") == 0 || strcmp(a, "--transports") == 0;

        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--json") == 0) {
            o->json_only = 1;
            continue;
        }
        if (strcmp(a, "--transports") == 0 && val) {
            snprintf(o->transports, sizeof o->transports, "%s", val);
            i++;
            continue;
        }
        if (!takes) {
            bench_errorf("unknown option '%s' (try --help)", a);
            return -1;
        }
        if (!val) {
            bench_errorf("%s needs a value", a);
            return -1;
        }
        i++;
        if (strcmp(a, "--url") == 0) {
            o->url = val;
        } else if (strcmp(a, "--tfetchd") == 0) {
            o->tfetchd = val;
        } else if (strcmp(a, "--tfetchd-arg") == 0) {
            if (o->ndaemon_args == MAX_DAEMON_ARGS) {
                bench_errorf("too many --tfetchd-arg (at most %d)", MAX_DAEMON_ARGS);
                return -1;
            }
            o->daemon_args[o->ndaemon_args++] = val;
        } else if (strcmp(a, "--sizes") == 0) {
            if (bench_parse_sizes(val, o->sizes, &o->nsizes, MAX_SIZES, 0) != 0) {
                bench_errorf("bad --sizes '%s' (e.g. 8,64K,4M; at most %d)", val, MAX_SIZES);
                return -1;
            }
        } else if (strcmp(a, "--exchange-sizes") == 0) {
            if (strcmp(val, "none") == 0) {
                o->nxsizes = 0;
            } else if (bench_parse_sizes(val, o->xsizes, &o->nxsizes, MAX_SIZES, 0) != 0) {
                bench_errorf("bad --exchange-sizes '%s' (e.g. 8,4M, or none; at most %d)", val,
                             MAX_SIZES);
                return -1;
            }
        } else if (strcmp(a, "--inflight") == 0) {
            if (bench_parse_long(val, 0, MAX_INFLIGHT, &v) != 0) {
                bench_errorf("bad %s '%s' (0..%d)", a, val, MAX_INFLIGHT);
                return -1;
            }
            o->inflight = (int)v;
        } else if (strcmp(a, "--timeout-ms") == 0) {
            if (bench_parse_long(val, 0, 24L * 3600 * 1000, &v) != 0) {
                bench_errorf("bad %s '%s'", a, val);
                return -1;
            }
            o->timeout_ms = v;
        } else {
            if (bench_parse_long(val, strcmp(a, "--warmup") == 0 ? 0 : 1, 1000000, &v) != 0) {
                bench_errorf("bad %s '%s'", a, val);
                return -1;
            }
            if (strcmp(a, "--reps") == 0)
                o->reps = (int)v;
            else if (strcmp(a, "--inflight-reps") == 0)
                o->inflight_reps = (int)v;
            else if (strcmp(a, "--warmup") == 0)
                o->warmup = (int)v;
            else
                o->memcpy_reps = (int)v;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    daemon_t d = {.td = {.pid = 0, .out_fd = -1}};
    char base[256];
    tf_client_t *c = NULL;
    tf_status_t st;
    result_t mc;
    int i, failures = 0;

    if (parse_args(argc, argv, &o) != 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);

    /* The baseline first, before a daemon shares the CPUs. */
    if (bench_memcpy(&o, &mc) != 0)
        return 1;
    emit(&o, &mc);

    if (o.url) {
        size_t len = strlen(o.url);
        while (len > 0 && o.url[len - 1] == '/')
            len--;
        snprintf(base, sizeof base, "%.*s", (int)len, o.url);
    } else if (daemon_start(&d, &o, base, sizeof base) != 0) {
        daemon_stop(&d, 1);
        return 1;
    } else if (!o.json_only) {
        fprintf(stderr, "tfetchd %s (pid %ld) at %s\n", o.tfetchd, (long)d.td.pid, base);
    }

    char list[64];
    snprintf(list, sizeof list, "%s", o.transports);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int ucx = strcmp(t, "ucx") == 0;
        if (!ucx && strcmp(t, "http") != 0) {
            bench_errorf("unknown transport '%s' in --transports (http, ucx)", t);
            failures++;
            continue;
        }
        st = tf_client_new(&c);
        if (st != TF_OK) {
            bench_errorf("tf_client_new: %s", tf_strerror(st));
            failures++;
            goto stop;
        }
        tf_client_set_timeout(c, o.timeout_ms);
        tf_client_set_transport(c, ucx ? TF_TRANSPORT_UCX : TF_TRANSPORT_HTTP);
        if (ucx && tf_client_upgrade(c, base) != TF_OK) {
            fprintf(stderr, "ucx: skipped: %s\n", tf_client_last(c)->error);
            tf_client_free(c);
            continue;
        }
        for (i = 0; i < o.nsizes; i++) {
            failures += bench_size(&o, c, base, o.sizes[i], mc.gbps);
            if (!daemon_alive(&d)) {
                failures += 2 * (o.nsizes - i - 1) + (o.inflight > 0 ? 2 : 1) * o.nxsizes;
                tf_client_free(c);
                goto stop;
            }
        }
        for (i = 0; i < o.nxsizes; i++) {
            failures += bench_xsize(&o, c, base, o.xsizes[i], mc.gbps);
            if (!daemon_alive(&d)) {
                failures += (o.inflight > 0 ? 2 : 1) * (o.nxsizes - i - 1);
                break;
            }
        }
        tf_client_free(c);
    }
stop:
    if (daemon_stop(&d, 0) != 0)
        failures++;
    if (failures)
        bench_errorf("%d measurement(s) failed", failures);
    return failures ? 1 : 0;
}
