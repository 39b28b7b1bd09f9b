/* conf.c - defaults, config file (inih) and command-line flags for tfetchd.
 *
 * Every setting has one table entry: its name (the long flag and the config key), where it is
 * stored and how it is parsed, so flags, file keys and --help cannot drift apart.
 * Main thread only, at start-up.
 */
#include "config.h"
#include "daemon/conf.h"
#include "daemon/log.h"
#include "daemon/memlimit.h"
#include "proto/upgrade.h"

#include <errno.h>
#include <getopt.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

enum kind { K_STR, K_UINT, K_SIZE, K_LEVEL, K_LIST, K_BOOL };

typedef struct {
    const char *name;
    enum kind kind;
    size_t off;
    size_t size;                    /* K_STR: buffer size; K_UINT: sizeof field; K_LIST: a
                                     * tfd_strlist_t (repeatable) */
    const char *arg;                /* metavariable for --help */
    const char *help;
} opt_t;

#define F(field) offsetof(tfd_config_t, field), sizeof(((tfd_config_t *)0)->field)

static const opt_t opts[] = {
    {"listen", K_STR, F(listen), "ADDR", "numeric address to listen on (default 127.0.0.1)"},
    {"port", K_UINT, F(port), "N", "TCP port; 0 picks a free one (default 7070)"},
    {"threads", K_UINT, F(threads), "N", "HTTP worker threads (default: the CPU count, at least 2)"},
    {"max-body", K_SIZE, F(max_body), "SIZE", "largest request body, else 413 (default: store-memory)"},
    {"max-header", K_SIZE, F(max_header), "SIZE", "largest request header block, else 431 (default 16K)"},
    {"store-memory", K_SIZE, F(store_memory), "SIZE", "payload bytes the store may hold, else 507 (default: half of physical memory or of the cgroup's memory limit, whichever is smaller)"},
    {"max-connections", K_UINT, F(max_connections), "N", "open connections in total; at the limit one waiting for a request head, or the slowest transfer below min-upload-rate or min-download-rate, makes room, else a newcomer is closed at once (default 1024)"},
    {"max-per-ip", K_UINT, F(max_per_ip), "N", "open connections per client address; 0: no limit (default 256)"},
    {"idle-timeout", K_UINT, F(idle_timeout), "SEC", "close connections idle this long, and give up a UCX body whose next part is not in by then (default 60)"},
    {"header-timeout", K_UINT, F(header_timeout), "SEC", "close a connection whose request head is not complete this long after it opened or after its previous request; 0: none (default 10)"},
    {"conn-memory", K_SIZE, F(conn_memory), "SIZE", "buffer memory per connection (default 64K)"},
    {"json-max-elements", K_SIZE, F(json_max_elems), "N", "largest tensor rendered for Accept: application/json (default 65536)"},
    {"max-wait", K_SIZE, F(max_wait_ms), "MS", "cap on GET ?wait= (default 60000)"},
    {"max-waiters", K_UINT, F(max_waiters), "N", "waiting requests at once (long-polls, feed pops and pushes), else 503 (default 4096)"},
    {"store-evict", K_STR, F(store_evict), "none|lru", "when the store is full: none answers 507; lru drops the least recently used documents nobody is reading (default none)"},
    {"drain-timeout", K_UINT, F(drain_timeout), "SEC", "how long SIGTERM waits for transfers, and SIGHUP for calls in an unloading plugin (default 30)"},
    {"drain-grace", K_UINT, F(drain_grace), "SEC", "after SIGTERM, /readyz answers 503 this long while all else is served, then the drain starts (default 0)"},
    {"body-memory", K_SIZE, F(body_memory), "SIZE", "request bodies held outside the store (calls), else 503 (default 2G)"},
    {"min-upload-rate", K_SIZE, F(min_upload_rate), "SIZE", "bytes/s a request body must keep up, averaged over every rate-window, else 408 and the connection is closed; at the connection limit the slowest body below it makes room for a newcomer; 0: none (default 16K)"},
    {"min-download-rate", K_SIZE, F(min_download_rate), "SIZE", "bytes/s a client must take an answer at, averaged over every rate-window, else the connection is closed; at the connection limit the slowest reader below it makes room for a newcomer; 0: none (default 16K)"},
    {"rate-window", K_UINT, F(rate_window), "SEC", "the window min-upload-rate and min-download-rate are averaged over: a transfer is cut only after a whole window below its rate (default 10)"},
    {"session-ttl", K_UINT, F(session_ttl), "SEC", "seconds a user session lives unused (default 600)"},
    {"max-sessions", K_UINT, F(max_sessions), "N", "user sessions at once; the least recently used idle one is evicted (default 10000)"},
    {"session-user-memory", K_SIZE, F(session_user_memory), "SIZE", "state bytes one user session may hold (default 64M)"},
    {"session-memory", K_SIZE, F(session_memory), "SIZE", "state bytes all sessions may hold (default 1G)"},
    {"replay-window", K_UINT, F(replay_window), "SEC", "seconds an exchange answer is kept for retries with the same request id (default 300)"},
    {"replay-entries", K_UINT, F(replay_entries), "N", "answers kept for retries (default 65536)"},
    {"replay-memory", K_SIZE, F(replay_memory), "SIZE", "bytes of answers kept for retries (default 256M)"},
    {"worker-lease", K_UINT, F(worker_lease_ms), "MS", "a worker that neither polls nor answers this long is dropped (default 5000)"},
    {"max-workers", K_UINT, F(max_workers), "N", "worker processes at once (default 256)"},
    {"worker-queue", K_UINT, F(worker_queue), "N", "calls waiting per worker, else 503 (default 1024)"},
    {"feed-memory", K_SIZE, F(feed_memory), "SIZE", "payload bytes all device feeds may hold (queues and outfeeds), else 507 (default 2G)"},
    {"max-feeds", K_UINT, F(max_feeds), "N", "device feeds at once, else 507 (default 1024)"},
    {"feeds-per-user", K_UINT, F(feeds_per_user), "N", "device feeds one user id may declare, else 507 (default 64)"},
    {"ucx", K_BOOL, F(ucx), "on|off", "offer clients the upgrade to UCX (shared memory, RDMA, TCP) (default on)"},
    {"ucx-trusted", K_STR, F(ucx_trusted), "LIST", "with tls-cert, the links UCX (not encrypted) may still be offered on: same-host and/or address ranges such as 10.0.0.0/8, comma-separated; clients on this host (shared memory) always are (default: same-host)"},
    {"ucx-ports", K_STR, F(ucx_ports), "LO-HI", "the TCP ports UCX listens on, a range such as 7071-7079, so a firewall can open them beside the HTTP port (default: any free port)"},
    {"upgrade-token-ttl", K_UINT, F(upgrade_token_ttl_ms), "MS", "how long an upgrade token stays valid (default 10000)"},
    {"upgrade-tokens-per-client", K_UINT, F(upgrade_tokens_per_client), "N", "unused upgrade (UCX, shm) tokens one principal, or without auth-tokens one client address, may hold at once; over it its upgrades get 429 with Retry-After, everyone else's still succeed; 0: no limit (default 128, of 4096 in all)"},
    {"shm", K_BOOL, F(shm), "on|off", "offer same-host clients stored documents as shared memory they map read-only (default on; with auth-tokens, checked against the upgrading token's rights)"},
    {"shm-lease-memory", K_SIZE, F(shm_lease_memory), "SIZE", "bytes of shared memory same-host clients may hold at once: documents mapped or lent, staging buffers lent to same-host producers, feed rings (with a closed ring's slots that queued items still hold); over it they copy over UCX or HTTP, a staging buffer is refused (default 4G)"},
    {"shm-socket", K_STR, F(shm_socket), "PATH", "the same-host shared-memory socket as a file (mode 0660, group shm-socket-group), so that who may use it is the file's business, as with docker.sock (default: an abstract socket, private to the network namespace)"},
    {"shm-socket-group", K_STR, F(shm_socket_group), "GROUP", "the group that may connect to shm-socket, by name or number (default: tfetchd's own group)"},
    {"shm-ready-memory", K_SIZE, F(shm_ready_memory), "SIZE", "memory made ready ahead of time for same-host PUTs (memfds of the sizes PUTs asked for lately, pages faulted in off the request path, counted in store-memory): a steady stream of same-host PUTs writes at memory speed instead of faulting in fresh pages; 0: none (default: a quarter of store-memory, at most 4G)"},
    {"shm-lease-ms", K_UINT, F(shm_lease_ms), "MS", "a same-host mapping's lease ends this long after it opened, if neither a release nor the client's exit ended it; 0: never (default 600000)"},
    {"log-level", K_LEVEL, F(log_level), "LEVEL", "error, warning, notice, info or debug (default info)"},
    {"access-log", K_STR, F(access_log), "off|stderr|PATH", "one JSON line per request: to stderr (the journal under systemd) or appended to PATH, reopened on SIGHUP (default off)"},
    {"auth-tokens", K_STR, F(auth_tokens), "PATH", "require a bearer token (Authorization: Bearer) on every request but /healthz and /readyz: lines of TOKEN PRINCIPAL RIGHT... in PATH (mode 0600, or 0640 for a group only tfetchd is in: refused if others can read it), read again on SIGHUP (kept when broken, empty or cut short: replace it by rename); without it authentication is off (default: none)"},
    {"shumai-principal", K_STR, F(shumai_principal), "NAME", "with auth-tokens, serve the Shumai paths (which send no token) with the rights the token file gives NAME; without it they answer 401 (default: none)"},
    {"tls-cert", K_STR, F(tls_cert), "PATH", "serve HTTPS (TLS 1.2 and 1.3) with the PEM certificate chain in PATH; needs tls-key; with it the UCX upgrade is offered only as ucx-trusted says (default: none, plain HTTP)"},
    {"tls-key", K_STR, F(tls_key), "PATH", "the PEM private key for tls-cert (default: none)"},
    {"tls-client-ca", K_STR, F(tls_client_ca), "PATH", "ask clients for a certificate and trust those the PEM CA certificates in PATH signed: a verified certificate whose subject has a cert:SUBJECT line in auth-tokens acts as that line's principal when no bearer token is sent; needs tls-cert, tls-key and auth-tokens (default: none)"},
    {"cors-origins", K_STR, F(cors_origins), "ORIGINS", "let web pages from these origins (scheme://host[:port], separated by spaces or commas) call tfetchd from a browser: preflights answered, the origin echoed with credentials allowed; * allows any origin, never with credentials (default: none, CORS off)"},
    {"plugin", K_LIST, F(plugins), "PATH", "load routes from a plugin shared object (\"PATH [ARGS]\"); repeatable, up to 16; see tfetch-plugin(3)"},
};
#define NOPTS (sizeof opts / sizeof opts[0])

void tfd_config_defaults(tfd_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->listen, sizeof cfg->listen, "127.0.0.1");
    cfg->protocol = tfp_proto_ours();
    cfg->port = TFD_DEFAULT_PORT;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cfg->threads = n > 2 ? (unsigned)n : 2;
    cfg->max_header = 16u << 10;
    /* The store gets half of what this process may use: the machine's memory, or less when
     * its cgroup (a container, a systemd MemoryMax=) is limited; a body may be as large as
     * the store can hold (a 5 GB shard goes in). */
    tfd_memlimit_t ml;
    tfd_memlimit_read("", 0, &ml);
    cfg->store_memory = ml.bytes ? ml.bytes / 2 : 4ull << 30;
    snprintf(cfg->store_memory_source, sizeof cfg->store_memory_source, "half of %s",
             ml.bytes ? ml.source : "an unknown memory size (4G)");
    cfg->max_body = cfg->store_memory;
    cfg->max_connections = 1024;
    cfg->max_per_ip = 256;
    cfg->idle_timeout = 60;
    cfg->header_timeout = 10;
    cfg->conn_memory = 64u << 10;     /* MHD clears it per request: bigger costs small GETs */
    cfg->json_max_elems = 65536;
    cfg->max_wait_ms = 60000;       /* suspended requests are not idle-timed: keep this short */
    cfg->body_memory = 2ull << 30;
    cfg->min_upload_rate = 16u << 10;
    cfg->min_download_rate = 16u << 10;
    cfg->rate_window = 10;
    cfg->session_ttl = 600;
    cfg->max_sessions = 10000;
    cfg->session_user_memory = 64u << 20;
    cfg->session_memory = 1ull << 30;
    cfg->replay_window = 300;
    cfg->replay_entries = 65536;
    cfg->replay_memory = 256u << 20;
    cfg->worker_lease_ms = 5000;
    cfg->ucx = 1;
    cfg->upgrade_token_ttl_ms = 10000;
    cfg->upgrade_tokens_per_client = 128;
    cfg->shm = 1;
    cfg->shm_lease_memory = 4ull << 30;
    cfg->shm_lease_ms = 600000;
    cfg->max_workers = 256;
    cfg->worker_queue = 1024;
    cfg->feed_memory = 2ull << 30;
    cfg->max_feeds = 1024;
    cfg->feeds_per_user = 64;
    cfg->max_waiters = 4096;
    cfg->drain_timeout = 30;
    cfg->log_level = LOG_INFO;
}

int tfd_parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')                /* "1GiB", "1GB" */
        end++;
    if (*end == 'B')
        end++;
    if (*end)
        return -1;
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_level(const char *s)
{
    static const struct { const char *n; int l; } lv[] = {
        {"error", LOG_ERR}, {"warning", LOG_WARNING}, {"notice", LOG_NOTICE},
        {"info", LOG_INFO}, {"debug", LOG_DEBUG},
    };
    for (size_t i = 0; i < sizeof lv / sizeof lv[0]; i++)
        if (strcasecmp(s, lv[i].n) == 0)
            return lv[i].l;
    return -1;
}

/* Applies one setting; prints why on failure. where is "--flag" or "file:line". */
static int apply(tfd_config_t *cfg, const opt_t *o, const char *val, const char *where)
{
    char *field = (char *)cfg + o->off;
    uint64_t v;
    if (o->off == offsetof(tfd_config_t, store_memory))
        cfg->store_memory_given = 1;
    else if (o->off == offsetof(tfd_config_t, max_body))
        cfg->max_body_given = 1;
    else if (o->off == offsetof(tfd_config_t, shm_ready_memory))
        cfg->shm_ready_memory_given = 1;
    switch (o->kind) {
    case K_STR:
        if (strlen(val) >= o->size) {
            fprintf(stderr, "tfetchd: %s: %s is too long\n", where, o->name);
            return -1;
        }
        memcpy(field, val, strlen(val) + 1);
        return 0;
    case K_UINT:
        if (tfd_parse_size(val, &v) != 0 || v > (o->size == 4 ? UINT32_MAX : UINT64_MAX) ||
            (strcmp(o->name, "port") == 0 && v > 65535)) {
            fprintf(stderr, "tfetchd: %s: %s wants a non-negative integer, got '%s'\n", where,
                    o->name, val);
            return -1;
        }
        *(unsigned *)field = (unsigned)v;
        return 0;
    case K_SIZE:
        if (tfd_parse_size(val, &v) != 0) {
            fprintf(stderr, "tfetchd: %s: %s wants a size such as 512K, 64M or 1G, got '%s'\n",
                    where, o->name, val);
            return -1;
        }
        *(uint64_t *)field = v;
        return 0;
    case K_LEVEL: {
        int l = parse_level(val);
        if (l < 0) {
            fprintf(stderr, "tfetchd: %s: log-level wants error, warning, notice, info or "
                            "debug, got '%s'\n", where, val);
            return -1;
        }
        *(int *)field = l;
        return 0;
    }
    case K_BOOL: {
        static const char *yes[] = {"on", "yes", "true", "1"}, *no[] = {"off", "no", "false", "0"};
        for (size_t i = 0; i < 4; i++)
            if (strcasecmp(val, yes[i]) == 0 || strcasecmp(val, no[i]) == 0) {
                *(unsigned *)field = strcasecmp(val, yes[i]) == 0;
                return 0;
            }
        fprintf(stderr, "tfetchd: %s: %s wants on or off, got '%s'\n", where, o->name, val);
        return -1;
    }
    case K_LIST: {
        tfd_strlist_t *list = (tfd_strlist_t *)field;
        if (!*val) {
            fprintf(stderr, "tfetchd: %s: %s wants a value\n", where, o->name);
            return -1;
        }
        if (list->n == TFD_MAX_PLUGINS) {
            fprintf(stderr, "tfetchd: %s: at most %d %s settings\n", where, TFD_MAX_PLUGINS,
                    o->name);
            return -1;
        }
        if (strlen(val) >= sizeof list->v[0]) {
            fprintf(stderr, "tfetchd: %s: %s is too long\n", where, o->name);
            return -1;
        }
        memcpy(list->v[list->n++], val, strlen(val) + 1);
        return 0;
    }
    }
    return -1;
}

static const opt_t *find_opt(const char *name)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strcmp(opts[i].name, name) == 0)
            return &opts[i];
    return NULL;
}

typedef struct {
    tfd_config_t *cfg;
    const char *path;
    int failed;
} ini_ctx_t;

static int on_ini(void *user, const char *section, const char *name, const char *value)
{
    ini_ctx_t *c = user;
    char where[600];
    snprintf(where, sizeof where, "%s", c->path);
    if (section[0] && strcmp(section, "tfetchd") != 0) {
        fprintf(stderr, "tfetchd: %s: unknown section [%s]\n", where, section);
        c->failed = 1;
        return 0;
    }
    const opt_t *o = find_opt(name);
    if (!o) {
        fprintf(stderr, "tfetchd: %s: unknown setting '%s'\n", where, name);
        c->failed = 1;
        return 0;
    }
    if (apply(c->cfg, o, value, where) != 0) {
        c->failed = 1;
        return 0;
    }
    return 1;
}

static int load_file(tfd_config_t *cfg, const char *path, int required)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        if (!required && errno == ENOENT)
            return 0;
        fprintf(stderr, "tfetchd: cannot read config file %s: %s\n", path, strerror(errno));
        return -1;
    }
    ini_ctx_t c = {cfg, path, 0};
    int rc = ini_parse_file(f, on_ini, &c);
    fclose(f);
    if (c.failed)
        return -1;
    if (rc != 0) {
        fprintf(stderr, "tfetchd: %s:%d: syntax error\n", path, rc);
        return -1;
    }
    snprintf(cfg->config_file, sizeof cfg->config_file, "%s", path);
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: tfetchd [OPTION]...\n"
            "Serve tensors over HTTP: GET/PUT/DELETE /v1/tensors/NAME, GET /v1/tensors,\n"
            "/v1/info, /healthz, /metrics. Prints 'listening on http://ADDR:PORT' on stdout\n"
            "when ready (https:// with tls-cert). SIGTERM stops accepting, finishes transfers\n"
            "in flight and exits 0.\n\n");
    /* The help column starts two spaces after the longest "--name ARG", so none collide. */
    int w = (int)strlen("--version");
    for (size_t i = 0; i < NOPTS; i++) {
        int n = (int)(strlen(opts[i].name) + strlen(opts[i].arg) + 3);
        w = n > w ? n : w;
    }
    fprintf(out, "  -c, %-*sconfig file (default %s, if it exists)\n", w + 2, "--config FILE",
            TFD_DEFAULT_CONFIG);
    for (size_t i = 0; i < NOPTS; i++) {
        char lhs[64];
        snprintf(lhs, sizeof lhs, "--%s %s", opts[i].name, opts[i].arg);
        fprintf(out, "      %-*s%s\n", w + 2, lhs, opts[i].help);
    }
    fprintf(out, "  -h, %-*sshow this help and exit\n", w + 2, "--help");
    fprintf(out, "  -V, %-*sshow the version and exit\n\n", w + 2, "--version");
    fprintf(out,
            "Config file keys are the long option names (`max-body = 1G`), optionally under a\n"
            "[tfetchd] section; flags override the file (--plugin flags replace the file's\n"
            "plugin lines). See tfetchd(8), tfetchd.conf(5).\n\n"
            "Without --auth-tokens there is no authentication: a --listen address other than\n"
            "loopback exposes every tensor and route to anyone who can reach it; with tokens,\n"
            "add --tls-cert and --tls-key so that they do not cross the network in the clear.\n");
}

void tfd_config_changed(const tfd_config_t *a, const tfd_config_t *b,
                        void (*fn)(const char *key, void *arg), void *arg)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (memcmp((const char *)a + opts[i].off, (const char *)b + opts[i].off,
                   opts[i].size) != 0)
            fn(opts[i].name, arg);
}

int tfd_config_load(tfd_config_t *cfg, int argc, char **argv)
{
    struct option lo[NOPTS + 4];
    for (size_t i = 0; i < NOPTS; i++)
        lo[i] = (struct option){opts[i].name, required_argument, NULL, 1000 + (int)i};
    lo[NOPTS] = (struct option){"config", required_argument, NULL, 'c'};
    lo[NOPTS + 1] = (struct option){"help", no_argument, NULL, 'h'};
    lo[NOPTS + 2] = (struct option){"version", no_argument, NULL, 'V'};
    lo[NOPTS + 3] = (struct option){NULL, 0, NULL, 0};

    /* First pass: find --config, --help, --version; the file applies before other flags. */
    const char *config = NULL;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:hV", lo, NULL)) != -1) {
        if (c == 'c')
            config = optarg;
        else if (c == 'h') {
            usage(stdout);
            return 1;
        } else if (c == 'V') {
            printf("tfetchd %s\n", PACKAGE_VERSION);
            return 1;
        }
    }
    if (load_file(cfg, config ? config : TFD_DEFAULT_CONFIG, config != NULL) != 0)
        return -1;
    tfp_err_t perr;
    const char *pmin = getenv("TFETCH_PROTOCOL_MIN");
    if (pmin && tfp_proto_raise_min(&cfg->protocol, pmin, &perr) != TFP_OK) {
        fprintf(stderr, "tfetchd: %s\n", perr.msg);
        return -1;
    }

    opterr = 1;
    optind = 1;
    int listed[NOPTS] = {0};        /* a repeatable flag replaces the file's list */
    while ((c = getopt_long(argc, argv, "c:hV", lo, NULL)) != -1) {
        if (c >= 1000 && c < 1000 + (int)NOPTS) {
            const opt_t *o = &opts[c - 1000];
            char where[80];
            snprintf(where, sizeof where, "--%s", o->name);
            if (o->kind == K_LIST && !listed[c - 1000]) {
                ((tfd_strlist_t *)((char *)cfg + o->off))->n = 0;
                listed[c - 1000] = 1;
            }
            if (apply(cfg, o, optarg, where) != 0)
                return -1;
        } else if (c != 'c') {
            fprintf(stderr, "Try 'tfetchd --help'.\n");
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tfetchd: unexpected argument '%s'\nTry 'tfetchd --help'.\n",
                argv[optind]);
        return -1;
    }
    if (cfg->threads == 0 || cfg->threads > 256) {
        fprintf(stderr, "tfetchd: --threads must be 1..256\n");
        return -1;
    }
    if (cfg->max_connections == 0) {
        fprintf(stderr, "tfetchd: --max-connections must be at least 1\n");
        return -1;
    }
    if (cfg->worker_lease_ms < 200) {
        fprintf(stderr, "tfetchd: --worker-lease must be at least 200 ms\n");
        return -1;
    }
    if (cfg->max_sessions == 0 || cfg->max_workers == 0 || cfg->worker_queue == 0) {
        fprintf(stderr, "tfetchd: --max-sessions, --max-workers and --worker-queue must be at "
                        "least 1\n");
        return -1;
    }
    if (cfg->rate_window == 0 || cfg->rate_window > 3600) {
        fprintf(stderr, "tfetchd: --rate-window must be 1..3600 seconds\n");
        return -1;
    }
    unsigned port_lo, port_hi;
    char tail;
    if (cfg->ucx_ports[0] &&
        (sscanf(cfg->ucx_ports, "%u-%u%c", &port_lo, &port_hi, &tail) != 2 || port_lo == 0 ||
         port_lo > port_hi || port_hi > 65535)) {
        fprintf(stderr, "tfetchd: --ucx-ports wants a port range such as 7071-7079, got "
                        "'%s'\n", cfg->ucx_ports);
        return -1;
    }
    if (cfg->shm_socket[0] &&
        (cfg->shm_socket[0] != '/' || !tfp_up_shm_socket_valid(cfg->shm_socket))) {
        fprintf(stderr, "tfetchd: --shm-socket wants an absolute path of at most %d bytes of "
                        "[A-Za-z0-9._-] and '/', without empty or .. components, got '%s'\n",
                TFP_UP_MAX_SHM_SOCKET, cfg->shm_socket);
        return -1;
    }
    if (cfg->conn_memory < 8192) {
        fprintf(stderr, "tfetchd: --conn-memory must be at least 8K\n");
        return -1;
    }
    if (cfg->store_memory_given)
        snprintf(cfg->store_memory_source, sizeof cfg->store_memory_source,
                 "the store-memory setting");
    if (!cfg->max_body_given)
        cfg->max_body = cfg->store_memory;
    if (!cfg->shm_ready_memory_given)
        cfg->shm_ready_memory = cfg->store_memory / 4 < (4ull << 30) ? cfg->store_memory / 4
                                                                      : 4ull << 30;
    tfd_log_set_level(cfg->log_level);
    return 0;
}
