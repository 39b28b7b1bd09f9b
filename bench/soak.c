/* soak.c - tfetch-soak: hours of mixed PUT/GET on one tfetchd, every byte checked.
 *
 * One libtfetch client drives --connections lanes (default 1000), each one request in flight
 * at a time over its own keep-alive connection (tf_fetch_start; each callback starts the
 * lane's next request), for --duration seconds (default 1800). Lane j sends as user
 * "soak-(j mod --users)" (default 100 users) and owns four keys, each of a fixed size (256 B
 * to 1 MiB), so the store's size is constant once every key is written. Every PUT carries
 * one U8 tensor whose bytes follow from (key, version) and metadata naming the key, version
 * and user; every GET regenerates the bytes and compares them all, and a GET of the lane's own
 * key must return the version last acknowledged: a lost, torn or crossed document is an
 * error. One GET in ten reads another lane's key (checked for consistency). At the end every
 * key is read back once more.
 *
 * Leaks are judged on the daemon's heap at rest. After --warmup seconds (default: a tenth of
 * the duration, at least 10 s), once every key is written, the lanes pause; when nothing is
 * in flight the daemon's tfetch_heap_in_use_bytes (/metrics: what malloc has handed out) is
 * read, and the lanes go on. At the end, with nothing in flight, it is read again: the store
 * holds the same keys at the same sizes and the same connections are open, so whatever the
 * heap gained is kept state that should not be there. Growth above --max-growth percent
 * (default 2) fails the run. RSS is no verdict: it swings with the bodies in flight and with
 * malloc's trimming (53-62 MiB within one 150 s run with no trend, and the floors of the first
 * and last quarter of a 60 s run 6.6 % apart with no leak), so it is only reported, sampled
 * about five times a second after warm-up; a daemon whose /metrics lacks the heap (no
 * mallinfo2) is judged on those RSS floors instead, with the same limit. Exit status 0 only
 * when no request failed, no byte was wrong and the growth held. A JSON summary line goes to
 * stdout, progress to stderr. One thread; the daemon is spawned by tests/fixtures.c unless
 * --url names one (--pid then gives its RSS).
 */
#include "config.h"
#include "bench/common.h"
#include "client/tfetch.h"
#include "tests/fixtures.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

const char *const bench_prog = "tfetch-soak";

#define KEYS 4

static struct {
    long connections, users, duration, warmup, max_growth, timeout_ms;
    const char *url;
    long pid;
    tf_transport_t transport;
} opt = {1000, 100, 1800, -1, 2, 120000, NULL, 0, TF_TRANSPORT_HTTP};

static struct {
    uint64_t puts, gets, cross_gets, bytes, failures, wrong;
    double t_end;
    int stopping;
    int paused;                 /* lanes do not start requests: the heap is read at rest */
} st;

typedef struct {
    int id;
    char user[32];
    uint32_t ver[KEYS];         /* the version last acknowledged */
    uint32_t maybe[KEYS];       /* a PUT that failed: the daemon may hold this one instead */
    uint32_t next_ver[KEYS];
    int written;                /* keys written once (the first phase) */
    int busy_key;               /* the request in flight: its key (own, or -1 - other lane) */
    int busy_put;
    int other_lane;
    tf_doc_t *in;
    uint64_t rnd;
} lane_t;

static lane_t *lanes;
static tf_client_t *cli;
static char base[256];

/* ---- the data ------------------------------------------------------------------------- */

static size_t key_size(int lane, int k)
{
    static const size_t sizes[] = {256, 256, 256, 256, 256, 256, 256, 4096, 4096, 65536};
    uint64_t h = (uint64_t)lane * 2654435761u + (uint64_t)k * 40503u;
    if (h % 50 == 7)
        return 1u << 20;                            /* 2 % of the keys: 1 MiB */
    return sizes[(h >> 8) % (sizeof sizes / sizeof sizes[0])];
}

static uint64_t seed_of(int lane, int k, uint32_t ver)
{
    return ((uint64_t)lane << 40) ^ ((uint64_t)k << 32) ^ ver;
}

static void key_name(char *buf, size_t cap, int lane, int k)
{
    snprintf(buf, cap, "soak-%d-%d", lane, k);
}

static uint64_t next_rnd(lane_t *l)
{
    l->rnd ^= l->rnd << 13;
    l->rnd ^= l->rnd >> 7;
    l->rnd ^= l->rnd << 17;
    return l->rnd;
}

static tf_doc_t *make_doc(int lane, int k, uint32_t ver, const char *user)
{
    static unsigned char *scratch;
    size_t n = key_size(lane, k);
    char name[64], v[16];
    int64_t shape[1] = {(int64_t)n};
    if (!scratch && !(scratch = malloc(1u << 20)))
        return NULL;
    bench_fill_pattern(scratch, n, seed_of(lane, k, ver));
    key_name(name, sizeof name, lane, k);
    snprintf(v, sizeof v, "%" PRIu32, ver);
    tf_doc_t *d = tf_doc_new();
    if (!d || tf_doc_add(d, "d", TF_U8, 1, shape, scratch, n, TF_COPY) != TF_OK ||
        tf_doc_set_meta(d, "key", name) != TF_OK || tf_doc_set_meta(d, "ver", v) != TF_OK ||
        tf_doc_set_meta(d, "user", user) != TF_OK) {
        tf_doc_free(d);
        return NULL;
    }
    return d;
}

/* The version a document of (lane, k) holds if every byte is right; -1 if anything is off. */
static long check_doc(const tf_doc_t *d, int lane, int k)
{
    static unsigned char *want;
    char name[64], user[32];
    const tf_tensor_t *t = d ? tf_doc_find(d, "d") : NULL;
    const char *mk = d ? tf_doc_meta(d, "key") : NULL, *mv = d ? tf_doc_meta(d, "ver") : NULL;
    const char *mu = d ? tf_doc_meta(d, "user") : NULL;
    key_name(name, sizeof name, lane, k);
    snprintf(user, sizeof user, "soak-%ld", lane % opt.users);
    if (!t || !mk || !mv || !mu || strcmp(mk, name) != 0 || strcmp(mu, user) != 0 ||
        t->dtype != TF_U8 || t->nbytes != key_size(lane, k) || tf_doc_count(d) != 1)
        return -1;
    char *end;
    unsigned long ver = strtoul(mv, &end, 10);
    if (*end || end == mv)
        return -1;
    if (!want && !(want = malloc(1u << 20)))
        return -1;
    bench_fill_pattern(want, t->nbytes, seed_of(lane, k, (uint32_t)ver));
    return memcmp(want, t->data, t->nbytes) == 0 ? (long)ver : -1;
}

/* ---- the lanes ------------------------------------------------------------------------ */

static void start_next(lane_t *l);

static void done(tf_fetch_t *f, tf_status_t status, tf_doc_t *doc, const tf_result_t *r,
                 void *arg)
{
    lane_t *l = arg;
    int k = l->busy_key;
    (void)f;
    if (l->busy_put) {
        tf_doc_free(l->in);
        l->in = NULL;
        if (status == TF_OK) {
            st.puts++;
            l->ver[k] = l->next_ver[k];
            l->maybe[k] = l->ver[k];
        } else {
            st.failures++;
            l->maybe[k] = l->next_ver[k];   /* it may or may not have landed */
            fprintf(stderr, "tfetch-soak: PUT lane %d key %d: %s (HTTP %d): %s\n", l->id, k,
                    tf_err_name(status), r->http_status, r->error);
        }
        st.bytes += r->bytes_sent;
    } else if (status != TF_OK && !(k < 0 && status == TF_ENOTFOUND)) {
        st.failures++;
        fprintf(stderr, "tfetch-soak: GET lane %d key %d: %s (HTTP %d): %s\n", l->id, k,
                tf_err_name(status), r->http_status, r->error);
    } else if (status == TF_OK) {
        int lane = k >= 0 ? l->id : l->other_lane, key = k >= 0 ? k : -1 - k;
        long v = check_doc(doc, lane, key);
        st.gets++;
        st.bytes += r->bytes_received;
        if (k < 0)
            st.cross_gets++;
        if (v < 0 || (k >= 0 && (uint32_t)v != l->ver[k] && (uint32_t)v != l->maybe[k])) {
            st.wrong++;
            fprintf(stderr, "tfetch-soak: WRONG DATA: lane %d read soak-%d-%d: %s (expected "
                    "version %" PRIu32 ")\n", l->id, lane, key,
                    v < 0 ? "torn, crossed or malformed" : "an old version", l->ver[k >= 0 ? k : 0]);
        } else if (k >= 0) {
            l->ver[k] = l->maybe[k] = (uint32_t)v;      /* settles a failed PUT */
        }
    }
    tf_doc_free(doc);
    start_next(l);
}

static void start_next(lane_t *l)
{
    char name[64], url[384];
    int put;
    if (st.stopping || st.paused || tfx_now_s() >= st.t_end)
        return;
    tf_request_t rq = TF_REQUEST_INIT;
    l->busy_key = (int)(next_rnd(l) % KEYS);
    if (l->written < KEYS) {
        l->busy_key = l->written++;
        put = 1;
    } else {
        put = next_rnd(l) % 2 == 0;
    }
    l->busy_put = put;
    if (put) {
        int k = l->busy_key;
        l->next_ver[k] = l->ver[k] + 1 > l->maybe[k] ? l->ver[k] + 1 : l->maybe[k] + 1;
        if (!(l->in = make_doc(l->id, k, l->next_ver[k], l->user))) {
            st.failures++;
            return;
        }
        key_name(name, sizeof name, l->id, k);
        rq.op = TF_OP_PUT;
        rq.in = l->in;
    } else {
        rq.op = TF_OP_GET;
        if (opt.connections > 1 && next_rnd(l) % 10 == 0) {
            l->other_lane = (int)(next_rnd(l) % (uint64_t)opt.connections);
            key_name(name, sizeof name, l->other_lane, l->busy_key);
            l->busy_key = -1 - l->busy_key;
        } else {
            key_name(name, sizeof name, l->id, l->busy_key);
        }
    }
    snprintf(url, sizeof url, "%s/v1/tensors/%s", base, name);
    rq.url = url;
    tf_client_set_user(cli, l->user);
    if (tf_fetch_start(cli, &rq, done, l, NULL) != TF_OK) {
        st.failures++;
        fprintf(stderr, "tfetch-soak: cannot start a request: %s\n", tf_client_last(cli)->error);
        tf_doc_free(l->in);
        l->in = NULL;
    }
}

/* ---- the daemon's memory -------------------------------------------------------------- */

/* The lowest of n samples (n > 0). */
static long floor_kib(const long *v, size_t n)
{
    long lo = v[0];
    for (size_t i = 1; i < n; i++)
        if (v[i] < lo)
            lo = v[i];
    return lo;
}

static long rss_kib(long pid)
{
    char path[64], line[256];
    long kib = -1;
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* The daemon's heap in use with nothing in flight: the least of three reads a quarter second
 * apart, after half a second for the daemon to finish with the last requests. -1 if its
 * /metrics does not say. */
static long long heap_at_rest(const td_daemon_t *d)
{
    long long lo = -1;
    usleep(500000);
    for (int i = 0; i < 3; i++) {
        if (i)
            usleep(250000);
        long long v = td_metric(d, "tfetch_heap_in_use_bytes");
        if (v >= 0 && (lo < 0 || v < lo))
            lo = v;
    }
    return lo;
}

static int all_written(void)
{
    for (long j = 0; j < opt.connections; j++)
        if (lanes[j].written < KEYS)
            return 0;
    return 1;
}

/* ---- main ----------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: tfetch-soak [--connections N] [--users N] [--duration S] [--warmup S]\n"
            "                   [--max-growth PCT] [--transport http|auto] [--url URL --pid PID]\n"
            "defaults: 1000 connections, 100 users, 1800 s, warm-up a tenth (>= 10 s), 2 %%\n");
    exit(2);
}

static volatile sig_atomic_t interrupted;
static void on_int(int sig)
{
    (void)sig;
    interrupted = 1;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long *dst = NULL, lo = 0, hi = 0;
        if (!strcmp(a, "--connections"))
            dst = &opt.connections, lo = 1, hi = 4096;
        else if (!strcmp(a, "--users"))
            dst = &opt.users, lo = 1, hi = 100000;
        else if (!strcmp(a, "--duration"))
            dst = &opt.duration, lo = 1, hi = 7 * 86400;
        else if (!strcmp(a, "--warmup"))
            dst = &opt.warmup, lo = 0, hi = 86400;
        else if (!strcmp(a, "--max-growth"))
            dst = &opt.max_growth, lo = 0, hi = 1000;
        else if (!strcmp(a, "--pid"))
            dst = &opt.pid, lo = 1, hi = 1L << 30;
        else if (!strcmp(a, "--url") && v)
            opt.url = v, i++;
        else if (!strcmp(a, "--transport") && v) {
            if (!strcmp(v, "http"))
                opt.transport = TF_TRANSPORT_HTTP;
            else if (!strcmp(v, "auto"))
                opt.transport = TF_TRANSPORT_AUTO;
            else
                usage();
            i++;
        } else
            usage();
        if (dst) {
            if (!v || bench_parse_long(v, lo, hi, dst) != 0)
                usage();
            i++;
        }
    }
    if (opt.warmup < 0)
        opt.warmup = opt.duration / 10 > 10 ? opt.duration / 10 : 10;
    if (opt.warmup >= opt.duration)
        opt.warmup = opt.duration / 2;

    /* Two descriptors a connection (ours and the daemon's, if spawned), plus room. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_int);

    td_daemon_t d = {0};
    long pid = opt.pid;
    if (opt.url) {
        snprintf(base, sizeof base, "%s", opt.url);
        snprintf(d.base, sizeof d.base, "%s", opt.url);
    } else {
        char conns[32];
        snprintf(conns, sizeof conns, "%ld", opt.connections + 64);
        const char *args[] = {"--max-connections", conns, "--max-per-ip", "0",
                              "--store-memory", "4G", "--idle-timeout", "600", NULL};
        td_opts_t o = {.args = args, .log_prefix = "/tmp/tfetchd-soak"};
        if (td_start_opts(&d, &o) != 0)
            return 1;
        snprintf(base, sizeof base, "%s", d.base);
        pid = d.pid;
    }
    if (tf_client_new(&cli) != TF_OK || tf_client_set_transport(cli, opt.transport) != TF_OK ||
        tf_client_set_max_connections(cli, opt.connections) != TF_OK) {
        bench_errorf("cannot make the client");
        return 1;
    }
    tf_client_set_timeout(cli, opt.timeout_ms);
    lanes = calloc((size_t)opt.connections, sizeof *lanes);
    if (!lanes)
        return 1;

    double t0 = tfx_now_s(), t_warm = t0 + (double)opt.warmup, next_report = t0 + 10;
    st.t_end = t0 + (double)opt.duration;
    for (long j = 0; j < opt.connections; j++) {
        lane_t *l = &lanes[j];
        l->id = (int)j;
        l->rnd = 0x9E3779B97F4A7C15ull ^ ((uint64_t)j << 17) ^ (uint64_t)j;
        snprintf(l->user, sizeof l->user, "soak-%ld", j % opt.users);
        start_next(l);
    }
    long rss_max = 0, rss_first = rss_kib(pid);
    long *rss_at = NULL;
    size_t n_rss = 0, cap_rss = 0;
    uint64_t last_ops = 0;
    long long heap_warm = -1;
    int warm_read = 0;
    for (;;) {
        if (tf_client_pending(cli) == 0) {
            if (!st.paused)
                break;
            heap_warm = heap_at_rest(&d);
            fprintf(stderr, "tfetch-soak: %5.0f s: daemon heap at rest after warm-up: %lld KiB\n",
                    tfx_now_s() - t0, heap_warm / 1024);
            st.paused = 0;
            for (long j = 0; j < opt.connections; j++)
                start_next(&lanes[j]);
            continue;
        }
        tf_client_run(cli, 200);
        double now = tfx_now_s();
        if (!warm_read && now >= t_warm && all_written())
            warm_read = st.paused = 1;
        long rss = rss_kib(pid);
        if (rss > rss_max)
            rss_max = rss;
        if (now >= t_warm && rss > 0 && !st.stopping) {
            if (n_rss == cap_rss) {
                size_t cap = cap_rss ? 2 * cap_rss : 1024;
                long *grown = realloc(rss_at, cap * sizeof *grown);
                if (grown)
                    rss_at = grown, cap_rss = cap;
            }
            if (n_rss < cap_rss)
                rss_at[n_rss++] = rss;
        }
        if (interrupted && !st.stopping) {
            st.stopping = 1;
            fprintf(stderr, "tfetch-soak: interrupted: finishing the requests in flight\n");
        }
        if (now >= next_report) {
            uint64_t ops = st.puts + st.gets;
            fprintf(stderr, "tfetch-soak: %5.0f s: %" PRIu64 " PUT %" PRIu64 " GET (%.0f/s), "
                    "%" PRIu64 " failed, %" PRIu64 " wrong, daemon RSS %ld KiB\n", now - t0,
                    st.puts, st.gets, (double)(ops - last_ops) / 10.0, st.failures, st.wrong, rss);
            last_ops = ops;
            next_report += 10;
        }
    }
    long rss_end = rss_kib(pid);
    double elapsed = tfx_now_s() - t0;
    long long heap_end = heap_warm >= 0 ? heap_at_rest(&d) : -1;

    /* Every key read back once more: nothing lost. */
    uint64_t lost = 0;
    tf_client_set_max_connections(cli, 16);
    for (long j = 0; j < opt.connections; j++)
        for (int k = 0; k < KEYS && k < lanes[j].written; k++) {
            char name[64], url[384];
            tf_doc_t *doc = NULL;
            key_name(name, sizeof name, (int)j, k);
            snprintf(url, sizeof url, "%s/v1/tensors/%s", base, name);
            tf_status_t s = tf_get(cli, url, 0, &doc);
            long v = s == TF_OK ? check_doc(doc, (int)j, k) : -1;
            if (v < 0 || ((uint32_t)v != lanes[j].ver[k] && (uint32_t)v != lanes[j].maybe[k])) {
                lost++;
                fprintf(stderr, "tfetch-soak: LOST: soak-%ld-%d: %s, version %ld, expected %"
                        PRIu32 "\n", j, k, tf_err_name(s), v, lanes[j].ver[k]);
            }
            tf_doc_free(doc);
        }
    tf_client_free(cli);
    for (long j = 0; j < opt.connections; j++)
        tf_doc_free(lanes[j].in);
    free(lanes);

    /* The floors of the first and the last quarter of the samples after warm-up. */
    size_t quarter = n_rss / 4;
    long rss_warm = quarter ? floor_kib(rss_at, quarter) : -1;
    long rss_late = quarter ? floor_kib(rss_at + n_rss - quarter, quarter) : -1;
    free(rss_at);
    int by_heap = heap_warm > 0 && heap_end >= 0;
    double rss_growth = rss_warm > 0 ? 100.0 * (double)(rss_late - rss_warm) / (double)rss_warm : 0;
    double growth = by_heap ? 100.0 * (double)(heap_end - heap_warm) / (double)heap_warm : rss_growth;
    int grew = (by_heap || rss_warm > 0) && growth >= (double)opt.max_growth;
    int stop_rc = 0;
    if (!opt.url && (stop_rc = td_stop(&d, SIGTERM, 60000)) != 0)
        td_show_log(&d);
    printf("{\"bench\":\"soak\",\"connections\":%ld,\"users\":%ld,\"seconds\":%.1f,\"puts\":%" PRIu64
           ",\"gets\":%" PRIu64 ",\"cross_gets\":%" PRIu64 ",\"req_per_s\":%.0f,\"bytes\":%" PRIu64
           ",\"failures\":%" PRIu64 ",\"wrong\":%" PRIu64 ",\"lost\":%" PRIu64
           ",\"heap_warm_kib\":%lld,\"heap_end_kib\":%lld,\"rss_start_kib\":%ld,\"rss_warm_kib\":%ld,"
           "\"rss_late_kib\":%ld,\"rss_end_kib\":%ld,\"rss_max_kib\":%ld,\"rss_growth_pct\":%.2f,"
           "\"growth_pct\":%.2f,\"growth_of\":\"%s\",\"daemon_exit\":%d}\n", opt.connections,
           opt.users, elapsed, st.puts, st.gets, st.cross_gets, (double)(st.puts + st.gets) / elapsed,
           st.bytes, st.failures, st.wrong, lost, heap_warm / 1024, heap_end / 1024, rss_first,
           rss_warm, rss_late, rss_end, rss_max, rss_growth, growth, by_heap ? "heap" : "rss", stop_rc);
    if (by_heap)
        fprintf(stderr, "tfetch-soak: daemon heap at rest %lld KiB after warm-up, %lld KiB at the "
                "end (%+.2f %%, limit %ld %%)%s; RSS floors %ld and %ld KiB (%+.2f %%, not judged)\n",
                heap_warm / 1024, heap_end / 1024, growth, opt.max_growth,
                grew ? ": GREW TOO MUCH" : "", rss_warm, rss_late, rss_growth);
    else
        fprintf(stderr, "tfetch-soak: the daemon's /metrics has no tfetch_heap_in_use_bytes: "
                "judged on RSS floors, %ld KiB after warm-up, %ld KiB at the end (%+.2f %%, limit "
                "%ld %%)%s\n", rss_warm, rss_late, growth, opt.max_growth,
                grew ? ": GREW TOO MUCH" : "");
    fprintf(stderr, "tfetch-soak: %" PRIu64 " requests in %.0f s, %" PRIu64 " failed, %" PRIu64
            " wrong, %" PRIu64 " lost\n", st.puts + st.gets, elapsed, st.failures, st.wrong, lost);
    return st.failures || st.wrong || lost || grew || stop_rc || interrupted ? 1 : 0;
}
