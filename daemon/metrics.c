/* metrics.c - fixed-size counter tables (endpoint x status, endpoint x code, endpoint x bucket) of
 * relaxed atomics, rendered on demand. No locks; any thread.
 */
#include "config.h"
#include "daemon/metrics.h"
#include "transports/ucx_server.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#ifdef HAVE_MALLINFO2
#include <malloc.h>
#endif
#include <sys/resource.h>
#include <unistd.h>

#define NSTATUS 600
#define NCODES 64
static const double buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define NBUCKETS (sizeof buckets / sizeof buckets[0])

typedef atomic_uint_fast64_t ctr_t;

struct tfd_metrics {
    ctr_t requests[TFD_TR_COUNT][TFD_EP_COUNT][NSTATUS];
    ctr_t errors[TFD_TR_COUNT][TFD_EP_COUNT][NCODES];
    ctr_t bytes_in[TFD_EP_COUNT], bytes_out[TFD_EP_COUNT];
    ctr_t hist[TFD_EP_COUNT][NBUCKETS + 1];
    ctr_t lat_sum_ns[TFD_EP_COUNT];
};

const char *tfd_endpoint_name(tfd_endpoint_t ep)
{
    static const char *names[] = {
#define X(n, s) s,
        TFD_ENDPOINT_MAP(X)
#undef X
    };
    return (unsigned)ep < TFD_EP_COUNT ? names[ep] : "other";
}

static const char *const transports[TFD_TR_COUNT] = {"http", "ucx", "shm"};

tfd_transport_t tfd_metrics_transport(const char *name)
{
    for (int t = 1; t < TFD_TR_COUNT; t++)
        if (strcmp(name, transports[t]) == 0)
            return (tfd_transport_t)t;
    return TFD_TR_HTTP;
}

tfd_metrics_t *tfd_metrics_new(void) { return calloc(1, sizeof(tfd_metrics_t)); }
void tfd_metrics_free(tfd_metrics_t *m) { free(m); }

static void add(ctr_t *c, uint64_t v) { atomic_fetch_add_explicit(c, v, memory_order_relaxed); }
static uint64_t get(ctr_t *c) { return atomic_load_explicit(c, memory_order_relaxed); }

void tfd_metrics_record(tfd_metrics_t *m, tfd_endpoint_t ep, tfd_transport_t tr,
                        unsigned status, tfp_status_t code, uint64_t bytes_in,
                        uint64_t bytes_out, double seconds)
{
    if ((unsigned)ep >= TFD_EP_COUNT)
        ep = TFD_EP_OTHER;
    if ((unsigned)tr >= TFD_TR_COUNT)
        tr = TFD_TR_HTTP;
    add(&m->requests[tr][ep][status < NSTATUS ? status : 0], 1);
    if (code != TFP_OK && -(int)code > 0 && -(int)code < NCODES)
        add(&m->errors[tr][ep][-(int)code], 1);
    add(&m->bytes_in[ep], bytes_in);
    add(&m->bytes_out[ep], bytes_out);
    size_t b = 0;
    while (b < NBUCKETS && seconds > buckets[b])
        b++;
    add(&m->hist[ep][b], 1);
    add(&m->lat_sum_ns[ep], seconds > 0 ? (uint64_t)(seconds * 1e9) : 0);
}

typedef struct {
    char *buf;
    size_t len, cap;
    int failed;
} out_t;

static void outf(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outf(out_t *o, const char *fmt, ...)
{
    if (o->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->failed = 1;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t ncap = (o->cap + (size_t)n + 1) * 2;
        char *nb = realloc(o->buf, ncap);
        if (!nb) {
            o->failed = 1;
            return;
        }
        o->buf = nb;
        o->cap = ncap;
    }
}

/* What was built, and the process as Prometheus' client libraries name it (process_*), read
 * from /proc at scrape time: a dashboard sees restarts, CPU, memory and descriptors without a
 * node exporter. A value /proc does not give is left out rather than reported as 0. */
static void render_process(out_t *o)
{
    const char *ucx = TFX_UCX_BUILT ? "yes" : "no";
#ifdef HAVE_SYSTEMD
    const char *sd = "yes";
#else
    const char *sd = "no";
#endif
    outf(o, "# HELP tfetch_build_info The tfetchd build: version and the optional parts.\n"
            "# TYPE tfetch_build_info gauge\n"
            "tfetch_build_info{version=\"%s\",ucx=\"%s\",systemd=\"%s\"} 1\n",
         PACKAGE_VERSION, ucx, sd);

    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    /* After the command's closing parenthesis: field 3 (state) onwards. */
    const char *p = strrchr(buf, ')');
    unsigned long long ut, st, start, vsize;
    long long rss;
    if (p && tick > 0 && page > 0 &&
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
                      "%*d %*d %llu %llu %lld", &ut, &st, &start, &vsize, &rss) == 5) {
        double boot = 0;
        FILE *sf = fopen("/proc/stat", "r");
        char line[256];
        while (sf && fgets(line, sizeof line, sf))
            if (sscanf(line, "btime %lf", &boot) == 1)
                break;
        if (sf)
            fclose(sf);
        outf(o, "# HELP process_cpu_seconds_total User and system CPU time spent.\n"
                "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.2f\n"
                "# HELP process_virtual_memory_bytes Virtual memory size.\n"
                "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes %llu\n"
                "# HELP process_resident_memory_bytes Resident memory size.\n"
                "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %lld\n",
             (double)(ut + st) / (double)tick, vsize, rss * (long long)page);
        if (boot > 0)
            outf(o, "# HELP process_start_time_seconds Start time since the epoch.\n"
                    "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n",
                 boot + (double)start / (double)tick);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        unsigned long fds = 0;
        for (struct dirent *e; (e = readdir(d));)
            fds += e->d_name[0] != '.';
        closedir(d);
        outf(o, "# HELP process_open_fds Open file descriptors.\n"
                "# TYPE process_open_fds gauge\nprocess_open_fds %lu\n", fds - 1);  /* d's own */
    }
#ifdef HAVE_MALLINFO2
    /* What malloc has handed out and not had back: unlike RSS it does not move with trimming
     * and fragmentation, so a leak shows in it at once (tfetch-soak compares it at rest).
     * Left out when glibc's malloc is not the one in use (valgrind, a sanitizer): 0 then. */
    struct mallinfo2 mi = mallinfo2();
    if (mi.uordblks + mi.hblkhd > 0)
        outf(o, "# HELP tfetch_heap_in_use_bytes Bytes malloc has handed out and not had back.\n"
             "# TYPE tfetch_heap_in_use_bytes gauge\ntfetch_heap_in_use_bytes %zu\n",
             mi.uordblks + mi.hblkhd);
#endif
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        outf(o, "# HELP process_max_fds The limit on open file descriptors.\n"
                "# TYPE process_max_fds gauge\nprocess_max_fds %llu\n",
             (unsigned long long)rl.rlim_cur);
}

/* A per-device series of every feed: HELP, TYPE, then one line per (feed, device). */
#define FEED_DEV_SERIES(o, g, metric, type, help, expr)                                    \
    do {                                                                                   \
        outf(o, "# HELP " metric " " help "\n# TYPE " metric " " type "\n");              \
        for (size_t i_ = 0; i_ < (g)->nfeeds; i_++) {                                      \
            const tfd_feed_stats_t *f = (g)->feeds[i_];                                    \
            for (unsigned d = 0; d < f->ndev; d++) {                                       \
                const tfd_feed_dev_stats_t *q = &f->dev[d];                                \
                (void)q;                                                                   \
                outf(o, metric "{feed=\"%s\",device=\"%u\"} %s\n", f->name, d, expr);     \
            }                                                                              \
        }                                                                                  \
    } while (0)

static const char *u64s(char *buf, uint64_t v)
{
    snprintf(buf, 24, "%llu", (unsigned long long)v);
    return buf;
}

static const char *secs(char *buf, uint64_t ns)
{
    snprintf(buf, 24, "%.9g", (double)ns / 1e9);
    return buf;
}

static void render_feeds(out_t *o, const tfd_gauges_t *g)
{
    char b[24];
    outf(o, "# HELP tfetch_feeds Device feeds declared.\n# TYPE tfetch_feeds gauge\n"
            "tfetch_feeds %zu\n# HELP tfetch_feed_bytes Payload bytes all feeds hold.\n"
            "# TYPE tfetch_feed_bytes gauge\ntfetch_feed_bytes %llu\n", g->nfeeds,
         (unsigned long long)g->feed_bytes);
    FEED_DEV_SERIES(o, g, "tfetch_feed_depth_items", "gauge",
                    "Items in a device queue (delivered but unacknowledged included).",
                    u64s(b, q->depth));
    FEED_DEV_SERIES(o, g, "tfetch_feed_depth_bytes", "gauge", "Payload bytes in a device queue.",
                    u64s(b, q->bytes));
    FEED_DEV_SERIES(o, g, "tfetch_feed_high_water_items", "gauge",
                    "The deepest a device queue has been.", u64s(b, q->high_water));
    FEED_DEV_SERIES(o, g, "tfetch_feed_items_in_total", "counter", "Items enqueued.",
                    u64s(b, q->items_in));
    FEED_DEV_SERIES(o, g, "tfetch_feed_items_out_total", "counter",
                    "Items delivered to consumers (redeliveries included).", u64s(b, q->items_out));
    FEED_DEV_SERIES(o, g, "tfetch_feed_bytes_in_total", "counter", "Payload bytes enqueued.",
                    u64s(b, q->bytes_in));
    FEED_DEV_SERIES(o, g, "tfetch_feed_bytes_out_total", "counter",
                    "Payload bytes delivered to consumers.", u64s(b, q->bytes_out));
    FEED_DEV_SERIES(o, g, "tfetch_feed_consumer_starved_seconds_total", "counter",
                    "Time pops waited on an empty device queue.", secs(b, q->starved_ns));
    FEED_DEV_SERIES(o, g, "tfetch_feed_redeliveries_total", "counter",
                    "Items delivered again after a consumer's lease ran out.",
                    u64s(b, q->redeliveries));
    outf(o, "# HELP tfetch_feed_round_skew Rounds a device's consumer is ahead of the slowest "
            "device's.\n# TYPE tfetch_feed_round_skew gauge\n");
    for (size_t i = 0; i < g->nfeeds; i++) {
        const tfd_feed_stats_t *f = g->feeds[i];
        uint64_t min = UINT64_MAX;
        for (unsigned d = 0; d < f->ndev; d++)
            if (f->dev[d].last_round < min)
                min = f->dev[d].last_round;
        for (unsigned d = 0; d < f->ndev; d++)
            outf(o, "tfetch_feed_round_skew{feed=\"%s\",device=\"%u\"} %llu\n", f->name, d,
                 (unsigned long long)(f->dev[d].last_round - min));
    }
    outf(o, "# HELP tfetch_feed_latency_seconds Time from enqueue to first delivery.\n"
            "# TYPE tfetch_feed_latency_seconds histogram\n");
    for (size_t i = 0; i < g->nfeeds; i++) {
        const tfd_feed_stats_t *f = g->feeds[i];
        for (unsigned d = 0; d < f->ndev; d++) {
            const tfd_feed_dev_stats_t *q = &f->dev[d];
            uint64_t cum = 0;
            for (size_t k = 0; k < TFD_FEED_NLAT; k++) {
                cum += q->lat[k];
                outf(o, "tfetch_feed_latency_seconds_bucket{feed=\"%s\",device=\"%u\",le=\"%g\"} "
                     "%llu\n", f->name, d, tfd_feed_lat_buckets[k], (unsigned long long)cum);
            }
            outf(o, "tfetch_feed_latency_seconds_bucket{feed=\"%s\",device=\"%u\",le=\"+Inf\"} "
                 "%llu\ntfetch_feed_latency_seconds_sum{feed=\"%s\",device=\"%u\"} %.9f\n"
                 "tfetch_feed_latency_seconds_count{feed=\"%s\",device=\"%u\"} %llu\n", f->name,
                 d, (unsigned long long)q->lat_count, f->name, d, q->lat_sum, f->name, d,
                 (unsigned long long)q->lat_count);
        }
    }
    outf(o, "# HELP tfetch_feed_producer_blocked_seconds_total Time producers waited on a full "
            "queue (Prefer: wait).\n# TYPE tfetch_feed_producer_blocked_seconds_total counter\n");
    for (size_t i = 0; i < g->nfeeds; i++)
        outf(o, "tfetch_feed_producer_blocked_seconds_total{feed=\"%s\"} %s\n",
             g->feeds[i]->name, secs(b, g->feeds[i]->blocked_ns));
    outf(o, "# HELP tfetch_feed_dropped_total Items dropped by resets.\n"
            "# TYPE tfetch_feed_dropped_total counter\n");
    for (size_t i = 0; i < g->nfeeds; i++)
        outf(o, "tfetch_feed_dropped_total{feed=\"%s\"} %llu\n", g->feeds[i]->name,
             (unsigned long long)g->feeds[i]->dropped);
    outf(o, "# HELP tfetch_feed_generation A feed's generation (reset adds one).\n"
            "# TYPE tfetch_feed_generation gauge\n");
    for (size_t i = 0; i < g->nfeeds; i++)
        outf(o, "tfetch_feed_generation{feed=\"%s\"} %llu\n", g->feeds[i]->name,
             (unsigned long long)g->feeds[i]->generation);
}

char *tfd_metrics_render(tfd_metrics_t *m, const tfd_gauges_t *g, size_t *len)
{
    out_t o = {malloc(16384), 0, 16384, 0};
    if (!o.buf)
        return NULL;
    o.buf[0] = '\0';

    outf(&o, "# HELP tfetch_requests_total Requests answered, by route, HTTP status and "
             "transport.\n# TYPE tfetch_requests_total counter\n");
    for (int t = 0; t < TFD_TR_COUNT; t++)
        for (int r = 0; r < TFD_EP_COUNT; r++)
            for (int s = 0; s < NSTATUS; s++) {
                uint64_t v = get(&m->requests[t][r][s]);
                if (v)
                    outf(&o, "tfetch_requests_total{route=\"%s\",status=\"%d\",transport=\"%s\"} "
                         "%llu\n", tfd_endpoint_name(r), s, transports[t], (unsigned long long)v);
            }
    outf(&o, "# HELP tfetch_errors_total Error answers, by route, error code and transport.\n"
             "# TYPE tfetch_errors_total counter\n");
    for (int t = 0; t < TFD_TR_COUNT; t++)
        for (int r = 0; r < TFD_EP_COUNT; r++)
            for (int c = 1; c < NCODES; c++) {
                uint64_t v = get(&m->errors[t][r][c]);
                if (v)
                    outf(&o, "tfetch_errors_total{route=\"%s\",code=\"%s\",transport=\"%s\"} "
                         "%llu\n", tfd_endpoint_name(r), tfp_status_name((tfp_status_t)-c),
                         transports[t], (unsigned long long)v);
            }
    outf(&o, "# HELP tfetch_received_bytes_total Request body bytes received, by route.\n"
             "# TYPE tfetch_received_bytes_total counter\n");
    for (int r = 0; r < TFD_EP_COUNT; r++)
        outf(&o, "tfetch_received_bytes_total{route=\"%s\"} %llu\n", tfd_endpoint_name(r),
             (unsigned long long)get(&m->bytes_in[r]));
    outf(&o, "# HELP tfetch_sent_bytes_total Response body bytes sent, by route.\n"
             "# TYPE tfetch_sent_bytes_total counter\n");
    for (int r = 0; r < TFD_EP_COUNT; r++)
        outf(&o, "tfetch_sent_bytes_total{route=\"%s\"} %llu\n", tfd_endpoint_name(r),
             (unsigned long long)get(&m->bytes_out[r]));
    outf(&o, "# HELP tfetch_request_duration_seconds Time from request headers to completion.\n"
             "# TYPE tfetch_request_duration_seconds histogram\n");
    for (int r = 0; r < TFD_EP_COUNT; r++) {
        uint64_t cum = 0;
        for (size_t b = 0; b < NBUCKETS; b++) {
            cum += get(&m->hist[r][b]);
            outf(&o, "tfetch_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n",
                 tfd_endpoint_name(r), buckets[b], (unsigned long long)cum);
        }
        cum += get(&m->hist[r][NBUCKETS]);
        outf(&o, "tfetch_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n"
                 "tfetch_request_duration_seconds_sum{route=\"%s\"} %.9f\n"
                 "tfetch_request_duration_seconds_count{route=\"%s\"} %llu\n",
             tfd_endpoint_name(r), (unsigned long long)cum, tfd_endpoint_name(r),
             (double)get(&m->lat_sum_ns[r]) / 1e9, tfd_endpoint_name(r), (unsigned long long)cum);
    }
    outf(&o,
         "# HELP tfetch_store_retired_bytes Replaced or deleted documents still being read.\n"
         "# TYPE tfetch_store_retired_bytes gauge\ntfetch_store_retired_bytes %llu\n"
         "# HELP tfetch_body_bytes Request bodies held outside the store.\n"
         "# TYPE tfetch_body_bytes gauge\ntfetch_body_bytes %llu\n"
         "# HELP tfetch_sessions User sessions open.\n"
         "# TYPE tfetch_sessions gauge\ntfetch_sessions %llu\n"
         "# HELP tfetch_session_bytes State bytes held by sessions.\n"
         "# TYPE tfetch_session_bytes gauge\ntfetch_session_bytes %llu\n"
         "# HELP tfetch_session_evictions_total Sessions evicted to stay within limits.\n"
         "# TYPE tfetch_session_evictions_total counter\ntfetch_session_evictions_total %llu\n"
         "# HELP tfetch_session_expirations_total Sessions ended by their TTL.\n"
         "# TYPE tfetch_session_expirations_total counter\ntfetch_session_expirations_total %llu\n"
         "# HELP tfetch_session_rejections_total State or sessions refused over quota.\n"
         "# TYPE tfetch_session_rejections_total counter\ntfetch_session_rejections_total %llu\n"
         "# HELP tfetch_replay_entries Answers remembered for retries.\n"
         "# TYPE tfetch_replay_entries gauge\ntfetch_replay_entries %llu\n"
         "# HELP tfetch_replay_bytes Bytes of remembered answers.\n"
         "# TYPE tfetch_replay_bytes gauge\ntfetch_replay_bytes %llu\n"
         "# HELP tfetch_replay_hits_total Retries answered from memory.\n"
         "# TYPE tfetch_replay_hits_total counter\ntfetch_replay_hits_total %llu\n"
         "# HELP tfetch_workers Worker processes serving routes.\n"
         "# TYPE tfetch_workers gauge\ntfetch_workers %u\n"
         "# HELP tfetch_ucx_enabled 1 when the UCX upgrade is offered.\n"
         "# TYPE tfetch_ucx_enabled gauge\ntfetch_ucx_enabled %d\n"
         "# HELP tfetch_upgrades_total Upgrade tokens issued (POST /v1/upgrade).\n"
         "# TYPE tfetch_upgrades_total counter\ntfetch_upgrades_total %llu\n"
         "# HELP tfetch_ucx_hellos_total UCX endpoints that presented a token, by outcome.\n"
         "# TYPE tfetch_ucx_hellos_total counter\n"
         "tfetch_ucx_hellos_total{result=\"accepted\"} %llu\n"
         "tfetch_ucx_hellos_total{result=\"refused\"} %llu\n"
         "# HELP tfetch_ucx_dropped_total UCX messages dropped (malformed, or before HELLO).\n"
         "# TYPE tfetch_ucx_dropped_total counter\ntfetch_ucx_dropped_total %llu\n"
         "# HELP tfetch_ucx_requests_total Requests that arrived over UCX.\n"
         "# TYPE tfetch_ucx_requests_total counter\ntfetch_ucx_requests_total %llu\n"
         "# HELP tfetch_ucx_byes_total UCX endpoints their clients closed with BYE.\n"
         "# TYPE tfetch_ucx_byes_total counter\ntfetch_ucx_byes_total %llu\n"
         "# HELP tfetch_ucx_body_prefix_total UCX requests whose document came as one piece "
         "after its first bytes in the message header (a header and a tensor that lie apart).\n"
         "# TYPE tfetch_ucx_body_prefix_total counter\ntfetch_ucx_body_prefix_total %llu\n"
         "# HELP tfetch_ucx_bad_parts_total PART frames of a body in parts that came out of "
         "place (another request's, a gap, past the total): each failed its endpoint.\n"
         "# TYPE tfetch_ucx_bad_parts_total counter\ntfetch_ucx_bad_parts_total %llu\n",
         (unsigned long long)g->store_retired, (unsigned long long)g->body_bytes,
         (unsigned long long)g->sessions.sessions, (unsigned long long)g->sessions.bytes,
         (unsigned long long)g->sessions.evictions, (unsigned long long)g->sessions.expirations,
         (unsigned long long)g->sessions.rejections, (unsigned long long)g->replay_entries,
         (unsigned long long)g->replay_bytes, (unsigned long long)g->replay_hits, g->workers,
         g->ucx_enabled, (unsigned long long)g->upgrades_issued,
         (unsigned long long)g->hellos_accepted, (unsigned long long)g->hellos_refused,
         (unsigned long long)g->ucx_dropped, (unsigned long long)g->ucx_requests,
         (unsigned long long)g->ucx_byes, (unsigned long long)g->ucx_prefixed,
         (unsigned long long)g->ucx_bad_parts);
    outf(&o,
         "# HELP tfetch_shm_enabled 1 when same-host clients are offered shared memory.\n"
         "# TYPE tfetch_shm_enabled gauge\ntfetch_shm_enabled %d\n"
         "# HELP tfetch_shm_connections Same-host shm connections open.\n"
         "# TYPE tfetch_shm_connections gauge\ntfetch_shm_connections %llu\n"
         "# HELP tfetch_shm_leases Documents same-host clients hold mapped (open leases).\n"
         "# TYPE tfetch_shm_leases gauge\ntfetch_shm_leases %llu\n"
         "# HELP tfetch_shm_leased_bytes Bytes of the documents those leases hold.\n"
         "# TYPE tfetch_shm_leased_bytes gauge\ntfetch_shm_leased_bytes %llu\n"
         "# HELP tfetch_shm_lease_expirations_total Leases ended by shm-lease-ms.\n"
         "# TYPE tfetch_shm_lease_expirations_total counter\n"
         "tfetch_shm_lease_expirations_total %llu\n"
         "# HELP tfetch_shm_gets_total GETs answered with a memfd.\n"
         "# TYPE tfetch_shm_gets_total counter\ntfetch_shm_gets_total %llu\n"
         "# HELP tfetch_shm_puts_total Documents stored from a memfd the client wrote.\n"
         "# TYPE tfetch_shm_puts_total counter\ntfetch_shm_puts_total %llu\n"
         "# HELP tfetch_shm_calls_total Exchanges (calls) answered with a memfd.\n"
         "# TYPE tfetch_shm_calls_total counter\ntfetch_shm_calls_total %llu\n"
         "# HELP tfetch_shm_refused_total shm requests refused (not found, lease bound, token).\n"
         "# TYPE tfetch_shm_refused_total counter\ntfetch_shm_refused_total %llu\n",
         g->shm_enabled, (unsigned long long)g->shm.connections,
         (unsigned long long)g->shm.leases, (unsigned long long)g->shm.leased_bytes,
         (unsigned long long)g->shm.expired, (unsigned long long)g->shm.gets,
         (unsigned long long)g->shm.puts, (unsigned long long)g->shm.calls,
         (unsigned long long)g->shm.refused);
    outf(&o,
         "# HELP tfetch_shm_rings Feeds' same-host rings open now (one per attached consumer).\n"
         "# TYPE tfetch_shm_rings gauge\ntfetch_shm_rings %llu\n"
         "# HELP tfetch_shm_ring_bytes Shared memory the rings hold, closed rings' slots "
         "that queued items still hold included (in the shm-lease-memory bound).\n"
         "# TYPE tfetch_shm_ring_bytes gauge\ntfetch_shm_ring_bytes %llu\n"
         "# HELP tfetch_shm_ring_items_total Feed items copied into a ring's slot.\n"
         "# TYPE tfetch_shm_ring_items_total counter\ntfetch_shm_ring_items_total %llu\n"
         "# HELP tfetch_shm_ring_overflow_total Feed items sent to a ring as a memfd of their "
         "own (larger than a slot, or every slot taken).\n"
         "# TYPE tfetch_shm_ring_overflow_total counter\ntfetch_shm_ring_overflow_total %llu\n"
         "# HELP tfetch_shm_ring_lent_total Infeed bodies received straight into a ring's "
         "slot (HTTP or UCX), and split rounds' rows written into one.\n"
         "# TYPE tfetch_shm_ring_lent_total counter\ntfetch_shm_ring_lent_total %llu\n"
         "# HELP tfetch_shm_ring_in_place_total Feed items sent from the slot they were "
         "received into (no copy through the daemon).\n"
         "# TYPE tfetch_shm_ring_in_place_total counter\ntfetch_shm_ring_in_place_total %llu\n",
         (unsigned long long)g->shm.rings, (unsigned long long)g->shm.ring_bytes,
         (unsigned long long)g->shm.ring_items, (unsigned long long)g->shm.ring_overflow,
         (unsigned long long)g->shm.ring_lent, (unsigned long long)g->shm.ring_in_place);
    outf(&o,
         "# HELP tfetch_shm_stagings Staging buffers lent to same-host producers now.\n"
         "# TYPE tfetch_shm_stagings gauge\ntfetch_shm_stagings %llu\n"
         "# HELP tfetch_shm_staged_bytes Their memory (in the shm-lease-memory bound).\n"
         "# TYPE tfetch_shm_staged_bytes gauge\ntfetch_shm_staged_bytes %llu\n"
         "# HELP tfetch_shm_staged_pushes_total Pushes whose document the daemon copied out "
         "of a staging buffer.\n"
         "# TYPE tfetch_shm_staged_pushes_total counter\ntfetch_shm_staged_pushes_total %llu\n",
         (unsigned long long)g->shm.stagings, (unsigned long long)g->shm.staged_bytes,
         (unsigned long long)g->shm.staged_pushes);
    outf(&o,
         "# HELP tfetch_shm_ready_bytes Memory made ready for same-host PUTs (regions whose "
         "pages are faulted in; counted in the store's memory).\n"
         "# TYPE tfetch_shm_ready_bytes gauge\ntfetch_shm_ready_bytes %llu\n"
         "# HELP tfetch_shm_ready_max_bytes Its bound (shm-ready-memory).\n"
         "# TYPE tfetch_shm_ready_max_bytes gauge\ntfetch_shm_ready_max_bytes %llu\n"
         "# HELP tfetch_shm_put_regions_total Regions lent to same-host PUTs and calls: ready "
         "(pages already there) or fresh (made on the request path).\n"
         "# TYPE tfetch_shm_put_regions_total counter\n"
         "tfetch_shm_put_regions_total{kind=\"ready\"} %llu\n"
         "tfetch_shm_put_regions_total{kind=\"fresh\"} %llu\n"
         "# HELP tfetch_shm_ready_huge_total Ready regions made of 2 MiB pages by collapsing "
         "(MADV_COLLAPSE, where shmem_enabled gives none).\n"
         "# TYPE tfetch_shm_ready_huge_total counter\ntfetch_shm_ready_huge_total %llu\n",
         (unsigned long long)g->shm_pool.ready_bytes, (unsigned long long)g->shm_pool.max_bytes,
         (unsigned long long)g->shm_pool.hits, (unsigned long long)g->shm_pool.misses,
         (unsigned long long)g->shm_pool.huge);
    outf(&o,
         "# HELP tfetch_auth_failures_total Requests refused by authentication (missing or "
         "unknown bearer token or client certificate: 401) or authorization (forbidden: 403).\n"
         "# TYPE tfetch_auth_failures_total counter\n"
         "tfetch_auth_failures_total{reason=\"missing\"} %llu\n"
         "tfetch_auth_failures_total{reason=\"unknown\"} %llu\n"
         "tfetch_auth_failures_total{reason=\"forbidden\"} %llu\n",
         (unsigned long long)g->auth_failures[0], (unsigned long long)g->auth_failures[1],
         (unsigned long long)g->auth_failures[2]);
    outf(&o,
         "# HELP tfetch_stored_tensors Documents in the store.\n"
         "# TYPE tfetch_stored_tensors gauge\ntfetch_stored_tensors %llu\n"
         "# HELP tfetch_stored_bytes Payload bytes in the store.\n"
         "# TYPE tfetch_stored_bytes gauge\ntfetch_stored_bytes %llu\n"
         "# HELP tfetch_store_reserved_bytes Bytes reserved by uploads in progress.\n"
         "# TYPE tfetch_store_reserved_bytes gauge\ntfetch_store_reserved_bytes %llu\n"
         "# HELP tfetch_store_limit_bytes The store's memory limit.\n"
         "# TYPE tfetch_store_limit_bytes gauge\ntfetch_store_limit_bytes %llu\n"
         "# HELP tfetch_inflight_requests Requests being served.\n"
         "# TYPE tfetch_inflight_requests gauge\ntfetch_inflight_requests %u\n"
         "# HELP tfetch_waiting_requests Requests suspended: long-polling GETs, feed pops and "
         "pushes that wait.\n"
         "# TYPE tfetch_waiting_requests gauge\ntfetch_waiting_requests %u\n",
         (unsigned long long)g->stored_count, (unsigned long long)g->stored_bytes,
         (unsigned long long)g->store_reserved, (unsigned long long)g->store_max, g->inflight,
         g->waiters);
    outf(&o,
         "# HELP tfetch_store_evictions_total Documents dropped to make room (store-evict lru).\n"
         "# TYPE tfetch_store_evictions_total counter\ntfetch_store_evictions_total %llu\n"
         "# HELP tfetch_store_expirations_total Documents dropped when their Tfetch-TTL ran out.\n"
         "# TYPE tfetch_store_expirations_total counter\ntfetch_store_expirations_total %llu\n",
         (unsigned long long)g->store_evictions, (unsigned long long)g->store_expirations);
    outf(&o,
         "# HELP tfetch_http_connections HTTP connections open (counted against the limit).\n"
         "# TYPE tfetch_http_connections gauge\ntfetch_http_connections %u\n"
         "# HELP tfetch_http_connections_closed_total HTTP connections closed by the server's "
         "defences, by reason.\n"
         "# TYPE tfetch_http_connections_closed_total counter\n"
         "tfetch_http_connections_closed_total{reason=\"refused\"} %llu\n"
         "tfetch_http_connections_closed_total{reason=\"evicted\"} %llu\n"
         "tfetch_http_connections_closed_total{reason=\"header_timeout\"} %llu\n"
         "tfetch_http_connections_closed_total{reason=\"slow_body\"} %llu\n"
         "tfetch_http_connections_closed_total{reason=\"slow_reader\"} %llu\n"
         "tfetch_http_connections_closed_total{reason=\"evicted_slow\"} %llu\n",
         g->connections, (unsigned long long)g->conns_refused,
         (unsigned long long)g->conns_evicted, (unsigned long long)g->head_timeouts,
         (unsigned long long)g->slow_bodies, (unsigned long long)g->slow_readers,
         (unsigned long long)g->evicted_slow);
    render_process(&o);
    render_feeds(&o, g);
    if (o.failed) {
        free(o.buf);
        return NULL;
    }
    *len = o.len;
    return o.buf;
}
