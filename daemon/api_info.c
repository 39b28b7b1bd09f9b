/* api_info.c - the endpoints about the server itself: GET /healthz, GET /metrics (the
 * Prometheus text), GET /readyz, GET /v1/info (what this tfetchd is and allows) and POST /v1/upgrade
 * (handed to daemon/upgrade.c).
 *
 * Threads: the transports' threads; see api.h.
 */
#include "config.h"
#include "daemon/api.h"
#include "daemon/auth.h"
#include "daemon/upgrade.h"
#include "transports/ucx_server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void api_handle_health(tfx_req_t *r, tfd_ctx_t *c)
{
    (void)c;
    tfx_respond(r, 200, "text/plain", "ok\n", 3, NULL, NULL);
}

/* Ready: listening, and not draining (SIGTERM turns this to 503 first: with drain-grace, for
 * that long while every other request is still served, so a load balancer stops sending new
 * work before the listener closes). */
void api_handle_ready(tfx_req_t *r, tfd_ctx_t *c)
{
    if (c->api->draining && atomic_load(c->api->draining)) {
        api_fail(r, c, TFP_EBUSY, "draining: tfetchd is shutting down");
        return;
    }
    tfx_respond(r, 200, "text/plain", "ready\n", 6, NULL, NULL);
}

void api_handle_upgrade(tfx_req_t *r, tfd_ctx_t *c)
{
    tfd_upgrade_handle(c->api->upgrade, r);
}

static void kv_uint(tfp_jw_t *w, const char *k, uint64_t v)
{
    tfp_jw_key(w, k);
    tfp_jw_uint(w, v);
}

static void kv_strs(tfp_jw_t *w, const char *k, const char *const *v, size_t n)
{
    tfp_jw_key(w, k);
    tfp_jw_arr_begin(w);
    for (size_t i = 0; i < n; i++)
        tfp_jw_str(w, v[i]);
    tfp_jw_arr_end(w);
}

static void info_route(const char *name, const tfd_route_ops_t *ops, void *arg)
{
    tfp_jw_t *w = arg;
    tfp_jw_obj_begin(w);
    tfp_jw_key(w, "name");
    tfp_jw_str(w, name);
    tfp_jw_key(w, "kind");
    tfp_jw_str(w, ops->kind ? ops->kind : "");
    tfp_jw_key(w, "stateful");
    tfp_jw_bool(w, !ops->stateless);
    tfp_jw_obj_end(w);
}

static void count_feed(const char *name, void *arg)
{
    (void)name;
    ++*(size_t *)arg;
}

void api_handle_info(tfx_req_t *r, tfd_ctx_t *c)
{
    const tfd_api_t *s = c->api;
    const tfd_config_t *cfg = s->cfg;
    tfd_store_stats_t st;
    tfd_store_stats(s->store, &st);
    tfp_jw_t w;
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "name");
    tfp_jw_str(&w, "tfetchd");
    tfp_jw_key(&w, "version");
    tfp_jw_str(&w, PACKAGE_VERSION);
    tfp_jw_key(&w, "api");
    tfp_jw_str(&w, "v1");
    tfp_jw_key(&w, "protocol");
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "min");
    tfp_jw_uint(&w, cfg->protocol.min);
    tfp_jw_key(&w, "max");
    tfp_jw_uint(&w, cfg->protocol.max);
    tfp_jw_obj_end(&w);
    const char *why;
    int ucx = tfd_upgrade_enabled(s->upgrade, &why);
    tfp_jw_key(&w, "transports");
    tfp_jw_arr_begin(&w);
    tfp_jw_str(&w, "http");
    if (ucx)
        tfp_jw_str(&w, "ucx");
    tfp_jw_arr_end(&w);
    tfp_jw_key(&w, "ucx");
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "compiled");
    tfp_jw_bool(&w, TFX_UCX_BUILT);
    tfp_jw_key(&w, "enabled");
    tfp_jw_bool(&w, ucx);
    if (!ucx) {
        tfp_jw_key(&w, "reason");
        tfp_jw_str(&w, why);
    }
    const char *mt = tfd_upgrade_memory_types(s->upgrade);
    if (mt) {                   /* comma-separated names, as UCX spells them */
        tfp_jw_key(&w, "memory_types");
        tfp_jw_arr_begin(&w);
        for (const char *p = mt; *p;) {
            size_t n = strcspn(p, ",");
            char name[32];
            snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), p);
            tfp_jw_str(&w, name);
            p += n + (p[n] == ',');
        }
        tfp_jw_arr_end(&w);
    }
    const char *trusted = tfd_upgrade_trusted(s->upgrade);
    if (ucx && trusted) {       /* TLS on: offered to this host and these links only */
        tfp_jw_key(&w, "trusted");
        tfp_jw_str(&w, trusted);
    }
    if (ucx && cfg->ucx_ports[0]) {     /* what a firewall must open (tfetch doctor) */
        tfp_jw_key(&w, "ports");
        tfp_jw_str(&w, cfg->ucx_ports);
    }
    tfp_jw_obj_end(&w);
    tfp_jw_key(&w, "shm");      /* the same-host path, and who may reach it */
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "enabled");
    tfp_jw_bool(&w, s->shm != NULL);
    tfp_jw_key(&w, "socket");
    tfp_jw_str(&w, cfg->shm_socket[0] ? cfg->shm_socket : "abstract");
    tfp_jw_obj_end(&w);
    static const char *const formats[] = {"application/x-safetensors",
                                          "application/octet-stream", "application/json",
                                          "shumai"};
    kv_strs(&w, "formats", formats, sizeof formats / sizeof formats[0]);
    tfp_jw_key(&w, "dtypes");
    tfp_jw_arr_begin(&w);
    for (int d = 0; d < TFP_DTYPE_COUNT; d++)
        tfp_jw_str(&w, tfp_dtype_name((tfp_dtype_t)d));
    tfp_jw_arr_end(&w);
    static const char *const features[] = {"long-poll", "raw-body", "json-view", "exchange",
                                           "sessions", "idempotent-retry", "workers",
                                           "shumai", "feeds"};
    kv_strs(&w, "features", features, sizeof features / sizeof features[0]);
    tfp_jw_key(&w, "auth");
    tfp_jw_str(&w, tfd_auth_on(s->auth) ? "bearer" : "off");
    tfp_jw_key(&w, "tls");
    tfp_jw_str(&w, s->cfg->tls_cert[0] && s->cfg->tls_key[0] ? "on" : "off");
    if (!c->info_details) {         /* authentication on, no admin right: the rest is not
                                     * everyone's business */
        tfp_jw_obj_end(&w);
        api_respond_json(r, c, &w);
        return;
    }
    tfp_jw_key(&w, "routes");
    tfp_jw_arr_begin(&w);
    tfd_routes_each(s->routes, info_route, &w);
    tfp_jw_arr_end(&w);
    tfp_jw_key(&w, "limits");
    tfp_jw_obj_begin(&w);
    kv_uint(&w, "max_body", cfg->max_body);
    kv_uint(&w, "max_header", cfg->max_header);
    kv_uint(&w, "store_memory", tfd_store_max(s->store));
    tfp_jw_key(&w, "store_memory_source");
    tfp_jw_str(&w, cfg->store_memory_source);
    kv_uint(&w, "body_memory", cfg->body_memory);
    kv_uint(&w, "max_connections", cfg->max_connections);
    kv_uint(&w, "max_per_ip", cfg->max_per_ip);
    kv_uint(&w, "idle_timeout_s", cfg->idle_timeout);
    kv_uint(&w, "header_timeout_s", cfg->header_timeout);
    kv_uint(&w, "min_upload_rate", cfg->min_upload_rate);
    kv_uint(&w, "min_download_rate", cfg->min_download_rate);
    kv_uint(&w, "rate_window_s", cfg->rate_window);
    kv_uint(&w, "json_max_elements", TFD_LIVE(cfg->json_max_elems));
    kv_uint(&w, "max_wait_ms", TFD_LIVE(cfg->max_wait_ms));
    kv_uint(&w, "max_waiters", TFD_LIVE(cfg->max_waiters));
    kv_uint(&w, "max_rank", TFP_MAX_RANK);
    kv_uint(&w, "session_ttl_s", TFD_LIVE(cfg->session_ttl));
    kv_uint(&w, "max_sessions", TFD_LIVE(cfg->max_sessions));
    kv_uint(&w, "session_user_memory", TFD_LIVE(cfg->session_user_memory));
    kv_uint(&w, "session_memory", TFD_LIVE(cfg->session_memory));
    kv_uint(&w, "replay_window_s", TFD_LIVE(cfg->replay_window));
    kv_uint(&w, "worker_lease_ms", cfg->worker_lease_ms);
    kv_uint(&w, "upgrade_token_ttl_ms", cfg->upgrade_token_ttl_ms);
    kv_uint(&w, "feed_memory", TFD_LIVE(cfg->feed_memory));
    kv_uint(&w, "max_feeds", TFD_LIVE(cfg->max_feeds));
    kv_uint(&w, "feeds_per_user", TFD_LIVE(cfg->feeds_per_user));
    tfp_jw_obj_end(&w);
    tfp_jw_key(&w, "store");
    tfp_jw_obj_begin(&w);
    kv_uint(&w, "tensors", st.count);
    kv_uint(&w, "bytes", st.bytes);
    kv_uint(&w, "retired", st.retired);
    kv_uint(&w, "reserved", st.reserved);
    tfp_jw_obj_end(&w);
    size_t nfeeds = 0;
    tfd_feeds_each(s->feeds, count_feed, &nfeeds);
    tfp_jw_key(&w, "feeds");
    tfp_jw_obj_begin(&w);
    kv_uint(&w, "count", nfeeds);
    kv_uint(&w, "bytes", tfd_feeds_bytes(s->feeds));
    tfp_jw_obj_end(&w);
    tfp_jw_obj_end(&w);
    api_respond_json(r, c, &w);
}

void api_handle_metrics(tfx_req_t *r, tfd_ctx_t *c)
{
    const tfd_api_t *s = c->api;
    tfd_gauges_t g = {0};
    tfd_store_stats_t st;
    tfd_store_stats(s->store, &st);
    g.stored_count = st.count;
    g.stored_bytes = st.bytes;
    g.store_retired = st.retired;
    g.store_reserved = st.reserved;
    g.store_max = st.max_bytes;
    g.store_evictions = st.evictions;
    g.store_expirations = st.expirations;
    s->gauges(s->gauges_arg, &g);                  /* requests in flight, body memory */
    g.waiters = tfd_waiters_count(s->waiters);
    tfd_sessions_stats(s->sessions, &g.sessions);
    tfd_replay_stats(s->replay, &g.replay_entries, &g.replay_bytes, &g.replay_hits);
    g.workers = tfd_workers_count(s->workers);
    tfd_upgrade_stats_t us;
    tfd_upgrade_stats(s->upgrade, &us);
    g.ucx_enabled = tfd_upgrade_enabled(s->upgrade, NULL);
    g.upgrades_issued = us.issued;
    g.hellos_accepted = us.accepted;
    g.hellos_refused = us.refused;
    g.ucx_dropped = us.dropped;
    g.ucx_requests = us.requests;
    g.ucx_byes = us.byes;
    g.ucx_prefixed = us.prefixed;
    g.ucx_bad_parts = us.bad_parts;
    tfd_shm_stats(s->shm, &g.shm);
    tfd_shmpool_stats(s->shm_pool, &g.shm_pool);
    g.shm_enabled = s->shm != NULL;
    tfd_auth_failures(s->auth, g.auth_failures);
    size_t len, nfeeds;
    tfd_feed_stats_t **feeds = tfd_feeds_stats_all(s->feeds, &nfeeds);
    g.feeds = feeds;
    g.nfeeds = nfeeds;
    g.feed_bytes = tfd_feeds_bytes(s->feeds);
    char *text = tfd_metrics_render(s->metrics, &g, &len);
    tfd_feeds_stats_free(feeds, nfeeds);
    if (!text) {
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        return;
    }
    api_respond_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}
