/* server.c - tfetchd's life: the daemon's parts, the three transports, housekeeping and
 * drain.
 *
 * Start builds the parts in dependency order (store, waiters, metrics, routes and their
 * plugins, sessions, replay window, worker processes' table, device feeds), gives the
 * handlers their view of them (tfd_api_t), makes the router, then starts UCX (through the
 * upgrade, which admits its clients), the same-host shm socket and HTTP, all three with the
 * router's one set of handlers. One teardown undoes that in reverse and serves both a failed start and
 * tfd_server_free: transports first (no request runs after them), plugins after the
 * sessions whose states use their code. SIGHUP applies the live settings, plugins included
 * (plugins.c unloads one only after its calls and states are gone).
 *
 * Threads: the main thread starts, ticks, drains and frees; requests run on the transports'
 * threads (router.c).
 */
#include "config.h"
#include "daemon/server.h"
#include "daemon/auth.h"
#include "daemon/accesslog.h"
#include "daemon/api.h"
#include "daemon/log.h"
#include "daemon/plugins.h"
#include "daemon/router.h"
#include "daemon/upgrade.h"
#include "daemon/shm.h"
#include "transports/clock.h"
#include "transports/http_server.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct tfd_server {
    tfd_config_t cfg;
    tfd_store_t *store;
    tfd_waiters_t *waiters;
    tfd_metrics_t *metrics;
    tfd_routes_t *routes;
    tfd_plugins_t *plugins;                 /* loaded after the built-in routes */
    tfd_sessions_t *sessions;
    tfd_replay_t *replay;
    tfd_workers_t *workers;
    tfd_feeds_t *feeds;
    tfd_api_t api;                          /* the handlers' view of the parts above */
    tfd_router_t *router;
    tfd_upgrade_t *upgrade;                 /* the UCX transport and its tokens */
    tfd_shm_t *shm;                         /* the same-host shm transport, or NULL */
    tfd_shmpool_t *shm_pool;                /* its ready regions for PUTs, or NULL */
    tfx_http_t *http;
    tfd_access_log_t *access_log;           /* NULL: off */
    tfd_auth_t *auth;
    char *tls_cert, *tls_key;               /* PEM text of tls-cert and tls-key; NULL: HTTP */
    char *tls_client_ca;                    /* PEM text of tls-client-ca; NULL: no mTLS */
    atomic_int draining;                    /* /readyz: 503 from the first moment of drain */
    tfx_http_guard_stats_t guard_logged;    /* the guard's counters at its last log line */
    uint64_t guard_logged_at;               /* when that line was written (ms) */
};

/* How often at most the connection guard's closes are summed up in the log. */
#define GUARD_LOG_MS 10000u

/* The gauges only the server knows, for /metrics. */
static void gauges(void *arg, tfd_gauges_t *g)
{
    tfd_server_t *s = arg;
    tfx_http_t *http = __atomic_load_n(&s->http, __ATOMIC_ACQUIRE);    /* set once serving */
    g->inflight = http ? tfx_http_inflight(http) : 0;
    if (s->upgrade)
        g->inflight += tfd_upgrade_inflight(s->upgrade);     /* requests over UCX too */
    g->body_bytes = tfd_router_body_bytes(s->router);
    if (s->http) {
        tfx_http_guard_stats_t gs;
        tfx_http_guard_stats(s->http, &gs);
        g->connections = gs.open;
        g->conns_refused = gs.refused;
        g->conns_evicted = gs.evicted;
        g->head_timeouts = gs.head_timeouts;
        g->slow_bodies = gs.slow_bodies;
        g->slow_readers = gs.slow_readers;
        g->evicted_slow = gs.evicted_slow;
    }
}

/* The feeds' wake callback: their waiters are the long-poll waiters, and the same-host
 * rings when a consumer's queue may have something. */
static void wake_feed(void *arg, const char *key)
{
    tfd_server_t *s = arg;
    tfd_waiters_notify(s->waiters, key);
    if (strstr(key, "/pop/"))
        tfd_shm_feed_wake(__atomic_load_n(&s->shm, __ATOMIC_ACQUIRE));
}

/* libmicrohttpd's messages: warnings, rate-limited by kind like every log line (a client
 * that opens connections to the HTTPS port and never shakes hands is worth one each). */
static void http_log(void *arg, const char *fmt, va_list ap)
{
    (void)arg;
    tfd_vlog(LOG_WARNING, "http: ", fmt, ap);
}

/* Frees whatever start made, in reverse order. */
static void teardown(tfd_server_t *s)
{
    tfx_http_stop(s->http);
    tfd_upgrade_free(s->upgrade);           /* stops UCX */
    tfd_shm_t *shm = s->shm;                /* no feed wakes it from here on */
    __atomic_store_n(&s->shm, NULL, __ATOMIC_RELEASE);
    tfd_shm_free(shm);                      /* ends its leases: before the store */
    tfd_shmpool_free(s->shm_pool);          /* its regions' bytes go back to the store */
    tfd_router_free(s->router);
    tfd_workers_free(s->workers);
    tfd_feeds_free(s->feeds);
    tfd_replay_free(s->replay);
    tfd_sessions_free(s->sessions);
    tfd_plugins_free(s->plugins);           /* after the sessions: their states use its code */
    tfd_routes_free(s->routes);
    tfd_metrics_free(s->metrics);
    tfd_waiters_free(s->waiters);
    tfd_store_free(s->store);
    tfd_access_log_free(s->access_log);
    tfd_auth_free(s->auth);
    free(s->tls_cert);
    free(s->tls_client_ca);
    if (s->tls_key) {                       /* key material: not left in freed memory */
        explicit_bzero(s->tls_key, strlen(s->tls_key));
        free(s->tls_key);
    }
    free(s);
}

/* The whole of a PEM file as a NUL-terminated string (MHD wants the text), or NULL with
 * err naming the setting and the file. */
static char *read_pem(const char *key, const char *path, tfp_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        tfp_err_set(err, TFP_EINVAL, "%s %s: %s", key, path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            tfp_err_set(err, TFP_ENOMEM, "out of memory");
            return NULL;
        }
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n < cap - 1 || cap > (1u << 20))
            break;
        char *nb = realloc(buf, cap * 2);
        if (!nb)
            free(buf);
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f) || n == cap - 1;
    fclose(f);
    buf[n] = '\0';
    if (bad || strstr(buf, "-----BEGIN ") == NULL || memchr(buf, '\0', n)) {
        tfp_err_set(err, TFP_EINVAL, "%s %s: not a PEM file%s", key, path,
                    bad ? " (unreadable or over 1 MiB)" : "");
        explicit_bzero(buf, n);
        free(buf);
        return NULL;
    }
    return buf;
}

/* Documents a same-host client mapped (moved into a memfd at their first shm GET) live in
 * shmem, which has huge pages only where the host allows them. Says so when it does not: a
 * UCX GET of such a document copies out of 4 KiB pages (64 MiB over cma: 6.6 GB/s here
 * against 15 from anonymous huge pages). Documents put over shm are collapsed into 2 MiB
 * pages where the kernel can (tfx_shm_collapse; the ready memory's start line says). */
static void say_shmem_pages(void)
{
    char mode[32];
    if (tfd_shmem_huge(mode, sizeof mode) == 0)
        tfd_log(LOG_INFO, "store: %s is %s: documents mapped by a same-host client sit in "
                "4 KiB pages: UCX GETs of them run about half as fast as with 'advise' "
                "(README, Transports)", TFD_SHMEM_ENABLED, mode);
}

/* Same-host PUTs write into regions made ready ahead of time (daemon/shmpool.h): says how
 * much and in which pages. Without one (no thread) PUTs fault their pages in as they write. */
static void start_shm_pool(tfd_server_t *s, const tfd_config_t *cfg)
{
    char why[128];
    if (!(s->shm_pool = tfd_shmpool_new(s->store, cfg->shm_ready_memory, why, sizeof why))) {
        tfd_log(LOG_WARNING, "shm: no ready memory for PUTs: %s", why);
        return;
    }
    tfd_shm_set_pool(s->shm, s->shm_pool);
    s->api.shm_pool = s->shm_pool;
    if (cfg->shm_ready_memory)
        tfd_log(LOG_INFO, "shm: up to %llu MiB made ready ahead of same-host PUTs, in %s",
                (unsigned long long)(cfg->shm_ready_memory >> 20),
                tfd_shmpool_pages(s->shm_pool));
}

/* tls-cert and tls-key: both or neither; tls-client-ca only with them and auth-tokens (the
 * file that maps a certificate to a principal). 0, or -1 with err set. */
static int load_tls(tfd_server_t *s, tfp_err_t *err)
{
    const tfd_config_t *cfg = &s->cfg;
    if (cfg->tls_client_ca[0] && (!cfg->tls_cert[0] || !cfg->tls_key[0])) {
        tfp_err_set(err, TFP_EINVAL, "tls-client-ca is set without tls-cert and tls-key: client "
                    "certificates need HTTPS");
        return -1;
    }
    if (cfg->tls_client_ca[0] && !cfg->auth_tokens[0]) {
        tfp_err_set(err, TFP_EINVAL, "tls-client-ca is set without auth-tokens: the cert: lines "
                    "there say which principal a client certificate is");
        return -1;
    }
    if (!cfg->tls_cert[0] && !cfg->tls_key[0])
        return 0;
    if (!cfg->tls_cert[0] || !cfg->tls_key[0]) {
        tfp_err_set(err, TFP_EINVAL, "%s is set without %s: HTTPS needs both",
                    cfg->tls_cert[0] ? "tls-cert" : "tls-key",
                    cfg->tls_cert[0] ? "tls-key" : "tls-cert");
        return -1;
    }
    if (!(s->tls_cert = read_pem("tls-cert", cfg->tls_cert, err)) ||
        !(s->tls_key = read_pem("tls-key", cfg->tls_key, err)))
        return -1;
    if (cfg->tls_client_ca[0] && !(s->tls_client_ca = read_pem("tls-client-ca", cfg->tls_client_ca,
                                                                err)))
        return -1;
    return 0;
}

/* The parts the handlers serve requests from. 0, or -1 with err set. */
static int make_parts(tfd_server_t *s, tfp_err_t *err)
{
    const tfd_config_t *cfg = &s->cfg;
    tfd_sessions_limits_t sl = {cfg->session_ttl, cfg->max_sessions, cfg->session_user_memory,
                                cfg->session_memory};
    tfd_replay_limits_t rl = {cfg->replay_window, cfg->replay_entries, cfg->replay_memory};
    tfd_workers_limits_t wl = {cfg->worker_lease_ms, cfg->max_workers, cfg->worker_queue};
    tfd_feeds_limits_t fl = {cfg->feed_memory, cfg->max_feeds, cfg->feeds_per_user,
                             TFD_FEED_PRODUCERS, wake_feed, NULL};
    if (!(s->store = tfd_store_new(cfg->store_memory)) ||
        !(s->waiters = tfd_waiters_new(cfg->max_waiters)) ||
        !(s->metrics = tfd_metrics_new()) ||
        !(s->routes = tfd_routes_new()) ||
        tfd_builtin_routes_add(s->routes) != 0) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return -1;
    }
    if (strcmp(cfg->store_evict, "lru") == 0) {
        tfd_store_set_evict_lru(s->store, 1);
    } else if (cfg->store_evict[0] && strcmp(cfg->store_evict, "none") != 0) {
        tfp_err_set(err, TFP_EINVAL, "store-evict must be none or lru, not '%s'",
                    cfg->store_evict);
        return -1;
    }
    const char *why = NULL;
    if (!(s->access_log = tfd_access_log_open(cfg->access_log, &why))) {
        tfp_err_set(err, TFP_EINVAL, "access-log %s: %s", cfg->access_log, why);
        return -1;
    }
    if (!(s->auth = tfd_auth_new(cfg->auth_tokens, cfg->shumai_principal, err)))
        return -1;
    size_t ncerts = 0, nlines = tfd_auth_count(s->auth, &ncerts);
    if (tfd_auth_on(s->auth))
        tfd_log(LOG_NOTICE, "auth-tokens %s: %zu tokens, %zu certificate subjects; every request "
                "but /healthz and /readyz needs one", cfg->auth_tokens, nlines - ncerts, ncerts);
    else if (strcmp(cfg->listen, "127.0.0.1") != 0 && strcmp(cfg->listen, "::1") != 0 &&
             strncmp(cfg->listen, "127.", 4) != 0)
        tfd_log(LOG_WARNING, "listening on %s without authentication: anyone who reaches the "
                "port reads, writes and deletes every tensor (set auth-tokens)", cfg->listen);
    if (!(s->plugins = tfd_plugins_start(s->routes, cfg, err)))
        return -1;
    fl.wake_arg = s;
    if (!(s->sessions = tfd_sessions_new(&sl)) ||
        !(s->replay = tfd_replay_new(&rl)) ||
        !(s->workers = tfd_workers_new(s->routes, &wl)) ||
        !(s->feeds = tfd_feeds_new(&fl))) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return -1;
    }
    s->api = (tfd_api_t){
        .cfg = &s->cfg,
        .store = s->store,
        .waiters = s->waiters,
        .metrics = s->metrics,
        .routes = s->routes,
        .sessions = s->sessions,
        .replay = s->replay,
        .workers = s->workers,
        .draining = &s->draining,
        .access_log = s->access_log,
        .auth = s->auth,
        .feeds = s->feeds,
        .gauges = gauges,
        .gauges_arg = s,
    };
    if (tfp_proto_format(cfg->protocol, s->api.protocol_text, sizeof s->api.protocol_text,
                         err) != TFP_OK)
        return -1;
    return 0;
}

/* The gid a group setting names, by name or number: 0 and *gid ("": (gid_t)-1, tfetchd's
 * own), or -1 with why. */
static int group_id(const char *name, gid_t *gid, char *why, size_t why_size)
{
    *gid = (gid_t)-1;
    if (!name[0])
        return 0;
    char *end;
    errno = 0;
    unsigned long n = strtoul(name, &end, 10);
    if (!*end && !errno && n < (unsigned long)(gid_t)-1) {
        *gid = (gid_t)n;
        return 0;
    }
    struct group gr, *res = NULL;
    char *buf = NULL;
    int e = ERANGE;
    for (size_t size = 4096; e == ERANGE && size <= (1u << 24); size *= 4) {   /* big groups */
        char *nb = realloc(buf, size);
        if (!nb) {
            e = ENOMEM;
            break;
        }
        buf = nb;
        e = getgrnam_r(name, &gr, buf, size, &res);
    }
    if (res)
        *gid = gr.gr_gid;
    else
        snprintf(why, why_size, "no group '%s'%s%s", name, e ? ": " : "", e ? strerror(e) : "");
    free(buf);
    return res ? 0 : -1;
}

tfd_server_t *tfd_server_start(const tfd_config_t *cfg, tfp_err_t *err)
{
    tfd_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    if (load_tls(s, err) != 0 || make_parts(s, err) != 0)
        goto fail;
    if (!(s->router = tfd_router_new(&s->api))) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        goto fail;
    }
    tfx_handlers_t h = tfd_router_handlers(s->router);
    tfp_netlist_t trusted;
    if (tfp_netlist_parse(cfg->ucx_trusted, &trusted, err) != TFP_OK) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        tfp_err_set(err, TFP_EINVAL, "ucx-trusted: %s", msg);
        goto fail;
    }
    s->upgrade = tfd_upgrade_start((int)cfg->ucx, cfg->upgrade_token_ttl_ms, cfg->max_body,
                                   cfg->ucx_ports, cfg->idle_timeout, &h);
    if (!s->upgrade) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        goto fail;
    }
    tfd_upgrade_set_protocol(s->upgrade, cfg->protocol);
    tfd_upgrade_set_token_quota(s->upgrade, cfg->upgrade_tokens_per_client);
    if (s->tls_cert)        /* UCX would carry the bytes in the clear: trusted links only */
        tfd_upgrade_set_tls(s->upgrade, &trusted, cfg->ucx_trusted);
    else if (cfg->ucx_trusted[0])
        tfd_log(LOG_WARNING, "ucx-trusted is set but tls-cert is not: without TLS nothing is "
                "encrypted and every client is offered UCX");
    s->api.upgrade = s->upgrade;            /* before any request: HTTP is not up yet */
    if (tfd_upgrade_enabled(s->upgrade, NULL))
        say_shmem_pages();
    if (cfg->shm) {
        char why[256];
        gid_t gid = (gid_t)-1;
        if (group_id(cfg->shm_socket_group, &gid, why, sizeof why) != 0) {
            tfp_err_set(err, TFP_EINVAL, "shm-socket-group: %s", why);
            goto fail;
        }
        if (!(s->shm = tfd_shm_start(s->store, s->waiters, cfg->max_body,
                                     cfg->shm_lease_memory, cfg->shm_lease_ms,
                                     cfg->upgrade_token_ttl_ms, cfg->shm_socket, gid, why,
                                     sizeof why))) {
            if (cfg->shm_socket[0]) {           /* asked for by name: not to be ignored */
                tfp_err_set(err, TFP_EINVAL, "shm-socket %s: %s", cfg->shm_socket, why);
                goto fail;
            }
            tfd_log(LOG_WARNING, "shm: not offered: %s", why);
        } else if (cfg->shm_socket[0]) {
            tfd_log(LOG_INFO, "shm: same-host clients connect to %s (mode 0660, group %s)",
                    cfg->shm_socket, cfg->shm_socket_group[0] ? cfg->shm_socket_group
                                                                : "tfetchd's");
        }
        if (s->shm) {
            tfd_shm_set_auth(s->shm, s->auth);  /* each request checked as over HTTP */
            tfd_shm_set_handlers(s->shm, &h);   /* GET and COMMIT: the router's ops */
            tfd_shm_set_feeds(s->shm, s->feeds);
            start_shm_pool(s, cfg);
        }
        tfd_upgrade_set_shm(s->upgrade, s->shm);
        s->api.shm = s->shm;
    }
    tfx_http_config_t hc = {
        .listen_addr = cfg->listen,
        .port = (uint16_t)cfg->port,
        .threads = cfg->threads,
        .max_connections = cfg->max_connections,
        .max_per_ip = cfg->max_per_ip,
        .idle_timeout_s = cfg->idle_timeout,
        .header_timeout_s = cfg->header_timeout,
        .conn_memory = (size_t)cfg->conn_memory,
        .max_header_bytes = (size_t)cfg->max_header,
        .min_upload_rate = cfg->min_upload_rate,
        .min_download_rate = cfg->min_download_rate,
        .rate_window_s = cfg->rate_window,
        .max_body = cfg->max_body,
        .protocol = cfg->protocol,
        .tls_cert_pem = s->tls_cert,
        .tls_key_pem = s->tls_key,
        .tls_client_ca_pem = s->tls_client_ca,
        .cors_origins = cfg->cors_origins,
        .log = http_log,
    };
    /* Stored atomically: /metrics (gauges) may be asked on MHD's threads before it is set. */
    tfx_http_t *http = tfx_http_start(&hc, &h, err);
    if (!http && s->tls_cert) {                 /* name the files the operator gave */
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        tfp_err_set(err, err->code, "tls-cert %s, tls-key %s%s%s: %s", cfg->tls_cert,
                    cfg->tls_key, s->tls_client_ca ? ", tls-client-ca " : "",
                    s->tls_client_ca ? cfg->tls_client_ca : "", msg);
    }
    if (!http)
        goto fail;
    if (s->tls_cert)
        tfd_log(LOG_NOTICE, "HTTPS on: tls-cert %s; UCX (not encrypted) is offered to clients "
                "on this host%s%s", cfg->tls_cert, cfg->ucx_trusted[0] ? " and to ucx-trusted " : "",
                cfg->ucx_trusted);
    if (s->tls_client_ca)
        tfd_log(LOG_NOTICE, "client certificates asked for: tls-client-ca %s; a verified one "
                "acts as its cert: line's principal", cfg->tls_client_ca);
    __atomic_store_n(&s->http, http, __ATOMIC_RELEASE);
    return s;
fail:
    teardown(s);
    return NULL;
}

uint16_t tfd_server_port(const tfd_server_t *s) { return tfx_http_port(s->http); }

void tfd_server_reopen_logs(tfd_server_t *s)
{
    if (tfd_access_log_reopen(s->access_log) != 0)
        tfd_log(LOG_WARNING, "access-log %s: cannot reopen: %s (still writing the old file)",
                s->cfg.access_log, strerror(errno));
}

/* The settings tfd_server_reload applies while serving. */
static const char *const live_keys[] = {
    "log-level", "access-log", "store-memory", "store-evict", "auth-tokens",
    "drain-timeout", "drain-grace", "max-wait", "max-waiters", "json-max-elements",
    "session-ttl", "max-sessions", "session-user-memory", "session-memory",
    "replay-window", "replay-entries", "replay-memory",
    "feed-memory", "max-feeds", "feeds-per-user", "plugin"};

/* A live limit the request threads read: stored atomically (they load it so, TFD_LIVE). */
#define SET_LIVE(s, n, field) __atomic_store_n(&(s)->cfg.field, (n)->field, __ATOMIC_RELAXED)

static int is(const char *key, const char *a) { return strcmp(key, a) == 0; }

typedef struct {
    tfd_server_t *s;
    const tfd_config_t *next;
    int (*idle)(void);              /* the caller's, while a plugin reload waits */
    unsigned applied;
    int auth_done;                  /* auth-tokens named another file: read already */
} reload_t;

/* While a plugin reload waits for calls to finish: the housekeeping the main loop would do,
 * then the caller's (watchdog; non-zero when the daemon is told to stop). */
static int reload_idle(void *arg)
{
    reload_t *rl = arg;
    tfd_server_tick(rl->s);
    return rl->idle ? rl->idle() : 0;
}

static void reload_one(const char *key, void *arg)
{
    reload_t *rl = arg;
    tfd_server_t *s = rl->s;
    const tfd_config_t *n = rl->next;
    int live = 0;
    for (size_t i = 0; i < sizeof live_keys / sizeof live_keys[0]; i++)
        live |= strcmp(key, live_keys[i]) == 0;
    if (!live) {
        tfd_log(LOG_WARNING, "SIGHUP: %s changed, but takes effect only after a restart", key);
        return;
    }
    const char *why = NULL;
    if (strcmp(key, "log-level") == 0) {
        tfd_log_set_level(n->log_level);
        s->cfg.log_level = n->log_level;
    } else if (strcmp(key, "access-log") == 0) {
        if (tfd_access_log_set(s->access_log, n->access_log, &why) != 0) {
            tfd_log(LOG_ERR, "SIGHUP: access-log %s: %s (kept %s)", n->access_log, why,
                    s->cfg.access_log[0] ? s->cfg.access_log : "off");
            return;
        }
        memcpy(s->cfg.access_log, n->access_log, sizeof s->cfg.access_log);
    } else if (strcmp(key, "store-memory") == 0) {
        tfd_store_set_max(s->store, n->store_memory);   /* the store owns the live value */
    } else if (strcmp(key, "store-evict") == 0) {
        if (strcmp(n->store_evict, "lru") != 0 && n->store_evict[0] &&
            strcmp(n->store_evict, "none") != 0) {
            tfd_log(LOG_ERR, "SIGHUP: store-evict must be none or lru, not '%s' (kept)",
                    n->store_evict);
            return;
        }
        tfd_store_set_evict_lru(s->store, strcmp(n->store_evict, "lru") == 0);
        memcpy(s->cfg.store_evict, n->store_evict, sizeof s->cfg.store_evict);
    } else if (is(key, "drain-timeout") || is(key, "drain-grace")) {
        s->cfg.drain_timeout = n->drain_timeout;    /* read by the main thread, this one */
        s->cfg.drain_grace = n->drain_grace;
    } else if (is(key, "max-wait") || is(key, "json-max-elements")) {
        SET_LIVE(s, n, max_wait_ms);
        SET_LIVE(s, n, json_max_elems);
    } else if (is(key, "max-waiters")) {
        tfd_waiters_set_max(s->waiters, n->max_waiters);
        SET_LIVE(s, n, max_waiters);
    } else if (is(key, "session-ttl") || is(key, "max-sessions") ||
               is(key, "session-user-memory") || is(key, "session-memory")) {
        tfd_sessions_limits_t sl = {n->session_ttl, n->max_sessions, n->session_user_memory,
                                    n->session_memory};
        tfd_sessions_set_limits(s->sessions, &sl);
        SET_LIVE(s, n, session_ttl);
        SET_LIVE(s, n, max_sessions);
        SET_LIVE(s, n, session_user_memory);
        SET_LIVE(s, n, session_memory);
    } else if (strncmp(key, "replay-", 7) == 0) {
        tfd_replay_limits_t lim = {n->replay_window, n->replay_entries, n->replay_memory};
        tfd_replay_set_limits(s->replay, &lim);
        SET_LIVE(s, n, replay_window);
        SET_LIVE(s, n, replay_entries);
        SET_LIVE(s, n, replay_memory);
    } else if (is(key, "feed-memory") || is(key, "max-feeds") || is(key, "feeds-per-user")) {
        tfd_feeds_set_limits(s->feeds, n->feed_memory, n->max_feeds, n->feeds_per_user);
        SET_LIVE(s, n, feed_memory);
        SET_LIVE(s, n, max_feeds);
        SET_LIVE(s, n, feeds_per_user);
    } else if (is(key, "plugin")) {
        /* All or nothing; waits (drain-timeout at most) for calls in the handlers of the
         * plugins that go, and for their per-user states to be freed, before unloading. */
        tfp_err_t e = {0};
        unsigned ms = n->drain_timeout < UINT_MAX / 1000u ? n->drain_timeout * 1000u : UINT_MAX;
        tfd_plugins_wait_t w = {ms, reload_idle, rl};
        if (tfd_plugins_reload(s->plugins, n, s->sessions, &w, &e) != 0) {
            tfd_log(LOG_ERR, "SIGHUP: plugin: %s (kept the %zu plugins loaded before)", e.msg,
                    tfd_plugins_count(s->plugins));
            return;
        }
        s->cfg.plugins = n->plugins;
    } else if (strcmp(key, "auth-tokens") == 0) {
        tfp_err_t e = {0};
        rl->auth_done = 1;
        if (tfd_auth_reload(s->auth, n->auth_tokens, &e) != 0) {
            tfd_log(LOG_ERR, "SIGHUP: %s (kept the tokens of %s)", e.msg,
                    s->cfg.auth_tokens[0] ? s->cfg.auth_tokens : "none: authentication off");
            return;
        }
        memcpy(s->cfg.auth_tokens, n->auth_tokens, sizeof s->cfg.auth_tokens);
    }
    tfd_log(LOG_NOTICE, "SIGHUP: %s applied", key);
    rl->applied++;
}

const tfd_config_t *tfd_server_config(const tfd_server_t *s)
{
    return &s->cfg;
}

unsigned tfd_server_reload(tfd_server_t *s, const tfd_config_t *next, int (*idle)(void))
{
    reload_t rl = {s, next, idle, 0, 0};
    tfd_config_t now = s->cfg;
    now.store_memory = tfd_store_max(s->store);     /* as last applied */
    tfd_config_changed(&now, next, reload_one, &rl);
    /* The same token file is read again on every SIGHUP (tokens added or revoked). */
    if (!rl.auth_done && tfd_auth_on(s->auth) &&
        strcmp(s->cfg.auth_tokens, next->auth_tokens) == 0) {
        tfp_err_t e = {0};
        if (tfd_auth_reload(s->auth, next->auth_tokens, &e) != 0) {
            tfd_log(LOG_ERR, "SIGHUP: %s (kept the tokens read before)", e.msg);
        } else {
            size_t ncerts = 0, nlines = tfd_auth_count(s->auth, &ncerts);
            tfd_log(LOG_NOTICE, "SIGHUP: auth-tokens %s read again: %zu tokens, %zu certificate "
                    "subjects", next->auth_tokens, nlines - ncerts, ncerts);
            rl.applied++;
        }
    }
    return rl.applied;
}

/* One log line, every GUARD_LOG_MS at most, for the connections the guard closed since the
 * last one (an attack shows as a line every 10 s, not one per connection). */
static void log_guard(tfd_server_t *s)
{
    uint64_t now = tfx_now_ms();
    if (now - s->guard_logged_at < GUARD_LOG_MS && s->guard_logged_at)
        return;
    tfx_http_guard_stats_t g, *o = &s->guard_logged;
    tfx_http_guard_stats(s->http, &g);
    if (g.refused != o->refused || g.evicted != o->evicted || g.evicted_slow != o->evicted_slow ||
        g.slow_bodies != o->slow_bodies || g.slow_readers != o->slow_readers ||
        g.head_timeouts != o->head_timeouts)
        tfd_log(LOG_WARNING, "http: closed %llu slow transfers at the connection limit "
                "(%u open), %llu bodies below min-upload-rate (408), %llu readers below "
                "min-download-rate, %llu heads past header-timeout, %llu idle for newcomers; "
                "refused %llu newcomers (in the last %llu s)",
                (unsigned long long)(g.evicted_slow - o->evicted_slow), g.open,
                (unsigned long long)(g.slow_bodies - o->slow_bodies),
                (unsigned long long)(g.slow_readers - o->slow_readers),
                (unsigned long long)(g.head_timeouts - o->head_timeouts),
                (unsigned long long)(g.evicted - o->evicted),
                (unsigned long long)(g.refused - o->refused),
                (unsigned long long)((now - s->guard_logged_at + 999) / 1000));
    else if (s->guard_logged_at)
        return;                             /* nothing new: the next change logs at once */
    *o = g;
    s->guard_logged_at = now;
}

void tfd_server_tick(tfd_server_t *s)
{
    tfx_http_tick(s->http);                 /* head deadlines, body and answer rates */
    log_guard(s);
    tfd_log_flush(0);                       /* counts of repeated lines suppressed */
    tfd_workers_tick(s->workers);
    tfd_store_sweep(s->store);
    tfd_feeds_tick(s->feeds);
    tfd_sessions_sweep(s->sessions);
    tfd_replay_sweep(s->replay);
}

unsigned tfd_server_drain(tfd_server_t *s, unsigned timeout_s, void (*tick)(void))
{
    /* Not ready from now on; with a grace period, keep serving everything else meanwhile so
     * a balancer that polls /readyz moves new work elsewhere before the listener closes. */
    atomic_store(&s->draining, 1);
    for (uint64_t until = tfx_now_ms() + (uint64_t)s->cfg.drain_grace * 1000u;
         tfx_now_ms() < until;) {
        if (tick)
            tick();
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    tfx_http_quiesce(s->http);
    tfd_upgrade_quiesce(s->upgrade);
    tfd_waiters_shutdown(s->waiters);
    tfd_workers_shutdown(s->workers);
    tfd_replay_wake_all(s->replay);
    uint64_t start = tfx_now_ms();
    uint64_t deadline = start + (uint64_t)timeout_s * 1000u;
    uint64_t idle_since = 0;
    unsigned n;
    /* Wait for requests in flight; then give keep-alive connections (told "Connection:
     * close" from now on) a moment to go before closing whatever is left. UCX requests get
     * at most 2 s: an answer to a client that died never completes (no peer failure
     * detection on one host), and the transport gives those up when it stops. */
    for (;;) {
        uint64_t now = tfx_now_ms();
        n = tfx_http_inflight(s->http);
        if (now - start < 2000)
            n += tfd_upgrade_inflight(s->upgrade);
        if (n == 0 && tfx_http_connections(s->http) == 0)
            break;
        if (n == 0 && !idle_since)
            idle_since = now;
        if (n != 0)
            idle_since = 0;
        if ((idle_since && now - idle_since >= 1000) || now >= deadline)
            break;
        if (tick)
            tick();
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return n;
}

void tfd_server_free(tfd_server_t *s)
{
    if (s)
        teardown(s);
    tfd_log_flush(1);                       /* what was suppressed, before the process ends */
}
