/* http_server.c - tfetchd's HTTP server side on libmicrohttpd.
 *
 * Owns the MHD daemon and one tfx_req_t per request (created on MHD's first callback, freed
 * in its completion notice). Bodies land in one tfx_buf sized from Content-Length; chunked
 * bodies grow geometrically up to the accepted maximum. Responses are queued after each
 * callback returns, so handlers never call MHD themselves. Suspension is guarded by a per-
 * request mutex so that a wake-up arriving before MHD has suspended the connection is not
 * lost: handle simply runs again.
 *
 * Threads: MHD's worker pool runs every callback; tfx_req_resume may come from any thread.
 */
#include "config.h"
#include "transports/http_server.h"
#include "transports/buf.h"
#include "proto/jsonw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define CHUNKED_START (64u << 10)

struct tfx_http {
    struct MHD_Daemon *mhd;
    tfx_http_handlers_t h;
    tfx_http_config_t cfg;
    atomic_uint inflight;
    atomic_int draining;
    MHD_socket quiesced_fd;         /* closed after MHD_stop_daemon (workers may still race it) */
    uint16_t port;
};

typedef struct hdr {
    struct hdr *next;
    char *name, *value;
} hdr_t;

enum { RUNNING, SUSPENDED };

struct tfx_req {
    tfx_http_t *srv;
    struct MHD_Connection *conn;
    const char *method, *path;      /* MHD-owned, valid for the request */
    void *ctx;

    /* body */
    int accept_body;
    size_t headroom;
    uint64_t max_body;
    uint8_t *buf;
    size_t cap;                     /* of buf */
    uint64_t body_len;
    uint64_t body_seen;             /* including discarded bytes */
    tfp_status_t body_failed;       /* why the body is being drained, or TFP_OK */
    uint64_t start_ms;
    int deferred;                   /* an answer decided at begin waits for the body to drain */

    /* response */
    hdr_t *hdrs;
    struct MHD_Response *resp;
    unsigned status;
    uint64_t resp_len;
    int queued;

    /* suspension */
    pthread_mutex_t lock;
    int state;
    int want_suspend;
    int wake_pending;
};

/* ---- request accessors ------------------------------------------------------------------ */

const char *tfx_req_method(const tfx_req_t *r) { return r->method; }
const char *tfx_req_path(const tfx_req_t *r) { return r->path; }
void tfx_req_set_ctx(tfx_req_t *r, void *ctx) { r->ctx = ctx; }
void *tfx_req_ctx(const tfx_req_t *r) { return r->ctx; }
unsigned tfx_req_status(const tfx_req_t *r) { return r->status; }
uint64_t tfx_req_response_bytes(const tfx_req_t *r) { return r->resp_len; }
uint64_t tfx_req_body_bytes(const tfx_req_t *r) { return r->body_seen; }

const char *tfx_req_header(const tfx_req_t *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *tfx_req_query(const tfx_req_t *r, const char *key)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

int64_t tfx_req_content_length(const tfx_req_t *r)
{
    /* With Transfer-Encoding, MHD ignores (and does not check) Content-Length. */
    if (MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        return -1;
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!cl)
        return -1;
    /* MHD has already rejected a malformed Content-Length with 400. */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(cl, &end, 10);
    if (errno || end == cl || v > INT64_MAX)
        return -1;
    return (int64_t)v;
}

const char *tfx_req_peer(const tfx_req_t *r)
{
    static __thread char buf[INET6_ADDRSTRLEN];
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    buf[0] = '\0';
    if (!ci || !ci->client_addr)
        return buf;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, sizeof buf);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, sizeof buf);
    return buf;
}

static enum MHD_Result sum_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    size_t *sum = cls;
    *sum += (key ? strlen(key) : 0) + (value ? strlen(value) : 0);
    return MHD_YES;
}

size_t tfx_req_header_bytes(const tfx_req_t *r)
{
    size_t sum = 0;
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, sum_header, &sum);
    return sum;
}

/* ---- bodies ------------------------------------------------------------------------------ */

void tfx_req_accept_body(tfx_req_t *r, size_t headroom, uint64_t max)
{
    r->accept_body = 1;
    r->headroom = headroom;
    r->max_body = max;
}

const uint8_t *tfx_req_body(const tfx_req_t *r, size_t *len)
{
    *len = r->buf ? (size_t)r->body_len : 0;
    return r->buf ? r->buf + r->headroom : NULL;
}

uint8_t *tfx_req_take_body(tfx_req_t *r, size_t *cap)
{
    uint8_t *b = r->buf;
    *cap = r->cap;
    r->buf = NULL;
    r->cap = 0;
    return b;
}

/* Makes room for `more` bytes after what has arrived: one allocation when the length is
 * known, geometric growth (copying) only for chunked bodies. The daemon's body_grow hook
 * approves every growth first (memory accounting). TFP_OK or why not. */
static tfp_status_t reserve_body(tfx_req_t *r, size_t more)
{
    uint64_t need = r->headroom + r->body_len + more;
    if (r->buf && need <= r->cap)
        return TFP_OK;
    int64_t cl = tfx_req_content_length(r);
    uint64_t want;
    if (!r->buf && cl >= 0)
        want = r->headroom + (uint64_t)cl;
    else {
        want = r->cap ? (uint64_t)r->cap * 2 : r->headroom + CHUNKED_START;
        if (want > r->headroom + r->max_body)
            want = r->headroom + r->max_body;
    }
    if (want < need)
        want = need;
    if (want > SIZE_MAX)
        return TFP_ENOMEM;
    if (r->srv->h.body_grow) {
        tfp_status_t st = r->srv->h.body_grow(r, want, r->srv->h.arg);
        if (st != TFP_OK)
            return st;
    }
    size_t cap;
    uint8_t *nb = tfx_buf_alloc((size_t)want, &cap);
    if (!nb)
        return TFP_ENOMEM;
    if (r->buf) {
        memcpy(nb + r->headroom, r->buf + r->headroom, (size_t)r->body_len);
        tfx_buf_free(r->buf, r->cap);
    }
    r->buf = nb;
    r->cap = cap;
    return TFP_OK;
}

/* Bodies that fail (too big, no memory) are drained and answered once complete: MHD cannot
 * queue a response in the middle of an upload, and closing with unread bytes would reset the
 * connection before the client reads the answer. A sender that keeps going far past what we
 * wanted, or that trickles below the rate floor, is disconnected instead (returns -1). */
#define DRAIN_MAX (64ull << 20)
#define RATE_GRACE_MS 10000u

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int take_upload(tfx_req_t *r, const char *data, size_t n)
{
    r->body_seen += n;
    uint64_t rate = r->srv->cfg.min_upload_rate;
    uint64_t el = now_ms() - r->start_ms;
    if (rate && el > RATE_GRACE_MS && r->body_seen * 1000u / el < rate)
        return -1;
    if (r->deferred || r->body_failed || !r->accept_body)
        return r->body_seen - r->body_len > DRAIN_MAX ? -1 : 0;   /* discard */
    if (r->body_len + n > r->max_body) {
        r->body_failed = TFP_ETOOBIG;
        return 0;
    }
    tfp_status_t st = reserve_body(r, n);
    if (st != TFP_OK) {
        r->body_failed = st;
        return 0;
    }
    memcpy(r->buf + r->headroom + r->body_len, data, n);
    r->body_len += n;
    return 0;
}

static void answer_failed_body(tfx_req_t *r)
{
    if (r->body_failed == TFP_ETOOBIG)
        tfx_respond_error(r, TFP_ETOOBIG, "request body exceeds the limit of %llu bytes",
                          (unsigned long long)r->max_body);
    else if (r->body_failed == TFP_ENOMEM)
        tfx_respond_error(r, TFP_ENOMEM, "cannot allocate memory for a %llu-byte request body",
                          (unsigned long long)r->body_seen);
    else
        tfx_respond_error(r, r->body_failed, "no room for a %llu-byte request body: %s",
                          (unsigned long long)r->body_seen, tfp_status_text(r->body_failed));
}

/* Will a body follow the headers? */
static int body_pending(const tfx_req_t *r)
{
    if (MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        return 1;
    int64_t cl = tfx_req_content_length(r);
    return cl > 0;
}

/* ---- responses --------------------------------------------------------------------------- */

void tfx_req_add_header(tfx_req_t *r, const char *name, const char *value)
{
    hdr_t *h = calloc(1, sizeof *h);
    if (!h)
        return;
    h->name = strdup(name);
    h->value = strdup(value);
    if (!h->name || !h->value) {
        free(h->name);
        free(h->value);
        free(h);
        return;
    }
    h->next = r->hdrs;
    r->hdrs = h;
}

static void free_headers(tfx_req_t *r)
{
    while (r->hdrs) {
        hdr_t *n = r->hdrs->next;
        free(r->hdrs->name);
        free(r->hdrs->value);
        free(r->hdrs);
        r->hdrs = n;
    }
}

void tfx_respond(tfx_req_t *r, unsigned status, const char *content_type, const void *body,
                 size_t len, void (*release)(void *), void *release_arg)
{
    if (r->resp || r->queued) {                     /* a second answer: keep the first */
        if (release)
            release(release_arg);
        return;
    }
    struct MHD_Response *resp;
    if (release)
        resp = MHD_create_response_from_buffer_with_free_callback_cls(len, (void *)body,
                                                                      release, release_arg);
    else
        resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        if (release)
            release(release_arg);
        return;                                     /* MHD closes the connection */
    }
    if (content_type)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (atomic_load(&r->srv->draining))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    for (hdr_t *h = r->hdrs; h; h = h->next)
        MHD_add_response_header(resp, h->name, h->value);
    r->resp = resp;
    r->status = status;
    r->resp_len = len;
}

void tfx_respond_error(tfx_req_t *r, tfp_status_t code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t len = 0;
    char *body = tfp_error_json(code, msg, &len);
    if (!body) {
        static const char oom[] = "{\"error\":\"out of memory\",\"code\":\"TF_ENOMEM\"}\n";
        tfx_respond(r, 500, "application/json", oom, sizeof oom - 1, NULL, NULL);
        return;
    }
    int http = tfp_status_http(code);
    tfx_respond(r, http > 0 ? (unsigned)http : 500, "application/json", body, len, free, body);
}

static enum MHD_Result queue_pending(tfx_req_t *r)
{
    if (!r->resp)
        return MHD_YES;
    enum MHD_Result ok = MHD_queue_response(r->conn, r->status, r->resp);
    MHD_destroy_response(r->resp);
    r->resp = NULL;
    r->queued = 1;
    return ok;
}

/* ---- suspension -------------------------------------------------------------------------- */

void tfx_req_suspend(tfx_req_t *r) { r->want_suspend = 1; }

void tfx_req_resume(tfx_req_t *r)
{
    pthread_mutex_lock(&r->lock);
    if (r->state == SUSPENDED) {
        r->state = RUNNING;
        MHD_resume_connection(r->conn);
    } else {
        r->wake_pending = 1;
    }
    pthread_mutex_unlock(&r->lock);
}

/* Runs handle until it responds or suspends with no wake-up pending. */
static void run_handle(tfx_req_t *r)
{
    for (;;) {
        r->want_suspend = 0;
        r->srv->h.handle(r, r->srv->h.arg);
        if (!r->want_suspend || r->resp)
            return;
        pthread_mutex_lock(&r->lock);
        if (r->wake_pending) {
            r->wake_pending = 0;
            pthread_mutex_unlock(&r->lock);
            continue;
        }
        r->state = SUSPENDED;
        MHD_suspend_connection(r->conn);
        pthread_mutex_unlock(&r->lock);
        return;
    }
}

/* ---- MHD callbacks ----------------------------------------------------------------------- */

static int expects_continue(const tfx_req_t *r)
{
    const char *e = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    return e && strcasecmp(e, "100-continue") == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    tfx_http_t *s = cls;
    tfx_req_t *r = *con_cls;

    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->srv = s;
        r->conn = conn;
        r->method = method;
        r->path = url;
        pthread_mutex_init(&r->lock, NULL);
        *con_cls = r;
        r->start_ms = now_ms();
        atomic_fetch_add(&s->inflight, 1);
        if (atomic_load(&s->draining))
            tfx_respond_error(r, TFP_EBUSY, "the server is shutting down");
        else if (s->cfg.max_header_bytes && tfx_req_header_bytes(r) > s->cfg.max_header_bytes)
            tfx_respond_error(r, TFP_EHEADERS, "request headers exceed %zu bytes",
                              s->cfg.max_header_bytes);
        else
            s->h.begin(r, s->h.arg);
        /* An early answer to a client that did not ask "Expect: 100-continue" waits until its
         * body is drained: closing on unread bytes would reset the connection first. */
        if (r->resp && body_pending(r) && !expects_continue(r)) {
            r->deferred = 1;
            return MHD_YES;
        }
        return queue_pending(r);
    }
    if (*upload_data_size) {
        int rc = take_upload(r, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return rc == 0 ? MHD_YES : MHD_NO;
    }
    if (r->deferred)
        ;                                           /* r->resp was decided at begin */
    else if (r->body_failed)
        answer_failed_body(r);
    else
        run_handle(r);
    return queue_pending(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    tfx_http_t *s = cls;
    tfx_req_t *r = *con_cls;
    if (!r)
        return;
    s->h.finish(r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK, s->h.arg);
    if (r->resp)
        MHD_destroy_response(r->resp);
    free_headers(r);
    tfx_buf_free(r->buf, r->cap);
    pthread_mutex_destroy(&r->lock);
    free(r);
    *con_cls = NULL;
    atomic_fetch_sub(&s->inflight, 1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    fputs("<4>http: ", stderr);
    vfprintf(stderr, fmt, ap);
    size_t n = strlen(fmt);
    if (n == 0 || fmt[n - 1] != '\n')
        fputc('\n', stderr);
}

/* ---- lifecycle --------------------------------------------------------------------------- */

tfx_http_t *tfx_http_start(const tfx_http_config_t *cfg, const tfx_http_handlers_t *h,
                           tfp_err_t *err)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    /* poll(), not epoll: MHD 0.9.75's quiesce with a thread pool on epoll can abort the
     * process (it removes the listen socket from each worker's epoll set and panics on
     * ENOENT). No TURBO: it skips shutdown(SHUT_WR) before closing, which turns an early
     * answer into a connection reset. */
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, cfg->listen_addr, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(cfg->port);
    } else if (inet_pton(AF_INET6, cfg->listen_addr, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(cfg->port);
        flags |= MHD_USE_IPv6;
    } else {
        tfp_err_set(err, TFP_EINVAL, "listen address '%s' is not a numeric IPv4 or IPv6 address",
                    cfg->listen_addr);
        return NULL;
    }

    tfx_http_t *s = calloc(1, sizeof *s);
    if (!s) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return NULL;
    }
    s->h = *h;
    s->cfg = *cfg;
    atomic_init(&s->inflight, 0);
    atomic_init(&s->draining, 0);
    s->quiesced_fd = MHD_INVALID_SOCKET;

    s->mhd = MHD_start_daemon(
        flags, cfg->port, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(cfg->threads ? cfg->threads : 1),
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->conn_memory,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_END);
    if (!s->mhd) {
        tfp_err_set(err, TFP_EINTERNAL, "cannot listen on %s port %u (address in use or not local?)",
                    cfg->listen_addr, (unsigned)cfg->port);
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    return s;
}

uint16_t tfx_http_port(const tfx_http_t *s) { return s->port; }

unsigned tfx_http_inflight(const tfx_http_t *s) { return atomic_load(&s->inflight); }

unsigned tfx_http_connections(const tfx_http_t *s)
{
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return di ? di->num_connections : 0;
}

void tfx_http_quiesce(tfx_http_t *s)
{
    atomic_store(&s->draining, 1);
    s->quiesced_fd = MHD_quiesce_daemon(s->mhd);
}

void tfx_http_stop(tfx_http_t *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->mhd);
    if (s->quiesced_fd != MHD_INVALID_SOCKET)
        close(s->quiesced_fd);
    free(s);
}
