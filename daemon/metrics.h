/* metrics.h - tfetchd's counters, rendered in the Prometheus text format at /metrics.
 *
 * Requests by API endpoint and status, errors by endpoint and wire code, body bytes in and
 * out by endpoint, and a latency histogram per endpoint; gauges (stored bytes, inflight,
 * waiters) and the device feeds' snapshots (labels feed and device) are passed in at render
 * time. The endpoints' names are the values of the "route"
 * label, a contract with dashboards: they never change (several operations may share one:
 * "worker"). Counters are relaxed atomics: any thread records, any thread renders.
 */
#ifndef TFD_METRICS_H
#define TFD_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include "proto/status.h"
#include "daemon/feeds.h"
#include "daemon/sessions.h"
#include "daemon/shm.h"

/* API endpoints, as the metrics name them (not exchange routes: see routes.h). */
#define TFD_ENDPOINT_MAP(X)           \
    X(TENSOR_GET, "tensor_get")       \
    X(TENSOR_PUT, "tensor_put")       \
    X(TENSOR_DELETE, "tensor_delete") \
    X(LIST, "list")                   \
    X(INFO, "info")                   \
    X(HEALTH, "healthz")              \
    X(READY, "readyz")                \
    X(METRICS, "metrics")             \
    X(CALL, "call")                   \
    X(SESSION, "session")             \
    X(SHUMAI_GET, "shumai_get")       \
    X(SHUMAI_CALL, "shumai_call")     \
    X(WORKER, "worker")               \
    X(WORKER_POLL, "worker_poll")     \
    X(UPGRADE, "upgrade")             \
    X(FEED, "feed")                   \
    X(FEED_INFEED, "feed_infeed")     \
    X(FEED_POP, "feed_pop")           \
    X(FEED_OUTFEED, "feed_outfeed")   \
    X(OTHER, "other")

typedef enum {
#define X(n, s) TFD_EP_##n,
    TFD_ENDPOINT_MAP(X)
#undef X
    TFD_EP_COUNT
} tfd_endpoint_t;

const char *tfd_endpoint_name(tfd_endpoint_t ep);

typedef struct tfd_metrics tfd_metrics_t;

typedef struct {
    uint64_t stored_count, stored_bytes, store_retired, store_reserved, store_max;
    uint64_t store_evictions, store_expirations;
    unsigned inflight, waiters, workers;
    uint64_t body_bytes;
    tfd_sessions_stats_t sessions;
    uint64_t replay_entries, replay_bytes, replay_hits;
    int ucx_enabled;
    uint64_t upgrades_issued, hellos_accepted, hellos_refused, ucx_dropped, ucx_requests;
    uint64_t ucx_byes, ucx_prefixed, ucx_bad_parts;
    tfd_shm_stats_t shm;            /* the same-host shm transport (daemon/shm.h) */
    tfd_shmpool_stats_t shm_pool;   /* its ready regions for PUTs (daemon/shmpool.h) */
    int shm_enabled;
    uint64_t auth_failures[3];      /* requests refused: no token, unknown token, forbidden */
    /* the HTTP connection guard (transports/http_guard.h) */
    unsigned connections;
    uint64_t conns_refused, conns_evicted, head_timeouts, slow_bodies;
    uint64_t slow_readers, evicted_slow;
    tfd_feed_stats_t *const *feeds;         /* one snapshot per device feed */
    size_t nfeeds;
    uint64_t feed_bytes;
} tfd_gauges_t;

/* The transport a request came by, a label of tfetch_requests_total and _errors_total. */
typedef enum { TFD_TR_HTTP, TFD_TR_UCX, TFD_TR_SHM, TFD_TR_COUNT } tfd_transport_t;
/* tfx_req_transport's name ("http", "ucx", "shm") as a tfd_transport_t (HTTP if unknown). */
tfd_transport_t tfd_metrics_transport(const char *name);

tfd_metrics_t *tfd_metrics_new(void);
void tfd_metrics_free(tfd_metrics_t *m);
/* One finished request: its endpoint, transport, HTTP status, wire error code (TFP_OK if
 * none), body bytes received and sent, and seconds from first byte of headers to
 * completion. */
void tfd_metrics_record(tfd_metrics_t *m, tfd_endpoint_t ep, tfd_transport_t tr,
                        unsigned status, tfp_status_t code, uint64_t bytes_in,
                        uint64_t bytes_out, double seconds);
/* Renders everything; malloc'd text. */
char *tfd_metrics_render(tfd_metrics_t *m, const tfd_gauges_t *g, size_t *len);

#endif
