/* http_server.c - tfetchd's HTTP server side on libmicrohttpd.
 *
 * Owns the MHD daemon and one tfx_req_t per request (created on MHD's first callback, freed
 * in its completion notice). The request line and headers become the request's operation
 * once, on the first callback (tfp_http_op_parse); failures render as a status line and a
 * JSON error body {"error", "code"} (with Allow on a 405). Bodies land in one tfx_buf sized
 * from Content-Length; chunked bodies grow geometrically up to the accepted maximum.
 * Responses are queued after each callback returns, so handlers never call MHD themselves.
 * Suspension is guarded by a per-request mutex so that a wake-up arriving before MHD has
 * suspended the connection is not lost: handle simply runs again. Connections are
 * admitted, timed and cut off by the guard (http_guard.c), fed from MHD's accept policy and
 * connection notices and the answers queued; tfx_http_tick sweeps it. With a client CA, a request that sends no
 * Authorization header has its TLS peer verified (GnuTLS, on the connection's session) and
 * the verified certificate's subject goes into the operation.
 *
 * Threads: MHD's thread pool runs every callback; tfx_req_resume may come from any thread.
 */
#include "config.h"
#include "transports/http_server.h"
#include "transports/req_int.h"
#include "transports/buf.h"
#include "transports/clock.h"
#include "transports/http_frame.h"
#include "transports/http_guard.h"
#include "proto/cors.h"
#include "proto/http.h"
#include "proto/jsonw.h"

/* TLS 1.2 and 1.3 only, GnuTLS priority syntax (doc/PROTOCOL.md, TLS). The server picks the
 * cipher, AES-128-GCM first: NORMAL's order takes the client's first (AES-256-GCM from
 * OpenSSL), ~17% slower per byte with AES-NI for no protection a tensor needs (bench/README,
 * HTTPS), then the rest of NORMAL's ciphers. */
#define TFX_TLS_PRIORITIES "NORMAL:%SERVER_PRECEDENCE:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:" \
    "-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:+AES-128-CCM:+AES-256-CCM:" \
    "+AES-128-CBC:+AES-256-CBC"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
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
    tfx_guard_t *guard;             /* admission, head deadline, body rate (http_guard.h) */
    tfp_cors_t cors;                /* cors-origins (proto/cors.h); off when empty */
    uint16_t port;
};

enum { RUNNING, SUSPENDED };

#define CERT_RECHECK_S 300              /* a connection's client certificate verified again */

/* What is kept per connection (MHD's socket context). A connection is served by one of
 * MHD's threads at a time, so none of it is locked. */
typedef struct {
    tfx_guard_conn_t *gc;           /* the guard's entry (NULL: unguarded) */
    int cert;                       /* peer_subject's answer for its TLS session; 2: not yet */
    char *subj;                     /* with cert 1: the verified subject (malloc'd) */
    time_t cert_until;              /* with cert 1: the certificate's expiry */
    unsigned char *der;             /* the peer certificate that answer is for (malloc'd) */
    size_t der_len;
} conn_ctx_t;

/* An HTTP request: the generic part first (req_int.h), then what MHD needs. */
typedef struct {
    tfx_req_t base;
    tfx_http_t *srv;
    struct MHD_Connection *conn;
    struct MHD_Response *resp;      /* decided, not yet queued */
    int queued;
    tfx_guard_conn_t *gc;           /* its connection's guard entry (NULL: unguarded) */
    conn_ctx_t *cc;                 /* its connection's context (NULL: none) */
    int deferred;                   /* an answer decided at begin waits for the body to drain */
    tfp_cors_allow_t cors;          /* what its Origin gets (cors-origins) */
    const char *origin;             /* its Origin header, checked (proto/cors.c), with cors */
    /* suspension */
    pthread_mutex_t lock;
    int state;
    int wake_pending;
} http_req_t;

#define HR(r) ((http_req_t *)(r))

/* ---- the request line and headers --------------------------------------------------- */

static const char *header(const tfx_req_t *r, const char *name)
{
    return MHD_lookup_connection_value(HR(r)->conn, MHD_HEADER_KIND, name);
}

static int64_t content_length(const tfx_req_t *r)
{
    /* With Transfer-Encoding, MHD ignores (and does not check) Content-Length. */
    if (header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        return -1;
    const char *cl = header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
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

static enum MHD_Result sum_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    size_t *sum = cls;
    *sum += (key ? strlen(key) : 0) + (value ? strlen(value) : 0);
    return MHD_YES;
}

/* Sum of header names and values received. */
static size_t header_bytes(const tfx_req_t *r)
{
    size_t sum = 0;
    MHD_get_connection_values(HR(r)->conn, MHD_HEADER_KIND, sum_header, &sum);
    return sum;
}

/* The peer's certificate chain (leaf first) of r's TLS session: its session in *ss, the
 * chain's length in *n; NULL (and *n 0) when there is none. */
static const gnutls_datum_t *peer_chain(const tfx_req_t *r, gnutls_session_t *ss, unsigned *n)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(HR(r)->conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    *n = 0;
    *ss = ci ? (gnutls_session_t)ci->tls_session : NULL;
    const gnutls_datum_t *chain = *ss ? gnutls_certificate_get_peers(*ss, n) : NULL;
    if (!chain)
        *n = 0;
    return *n ? chain : NULL;
}

/* The client certificate chain of session ss: 1 with the leaf's subject DN (RFC 4514) in subj
 * when it verifies against the client CAs (chain, dates, and a key purpose that allows a TLS
 * client), and in *until how long that verdict holds: until the first certificate of the
 * chain expires (the CA behind it is tfetchd's own, read at start), CERT_RECHECK_S at most;
 * -1 when it does not verify, or a certificate does not parse, or the subject does not fit. */
static int verify_subject(gnutls_session_t ss, const gnutls_datum_t *chain, unsigned n,
                          char *subj, size_t cap, time_t *until)
{
    gnutls_typed_vdata_st purpose = {.type = GNUTLS_DT_KEY_PURPOSE_OID,
                                     .data = (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT};
    unsigned status = 1;
    if (gnutls_certificate_verify_peers(ss, &purpose, 1, &status) != GNUTLS_E_SUCCESS ||
        status != 0)
        return -1;
    *until = time(NULL) + CERT_RECHECK_S;
    int rc = 1;
    for (unsigned i = 0; rc == 1 && i < n; i++) {
        gnutls_x509_crt_t crt;
        if (gnutls_x509_crt_init(&crt) != GNUTLS_E_SUCCESS)
            return -1;
        rc = gnutls_x509_crt_import(crt, &chain[i], GNUTLS_X509_FMT_DER) == GNUTLS_E_SUCCESS
                 ? 1 : -1;
        time_t t = rc == 1 ? gnutls_x509_crt_get_expiration_time(crt) : (time_t)-1;
        if (t == (time_t)-1)
            rc = -1;
        else if (t < *until)
            *until = t;
        gnutls_datum_t dn = {NULL, 0};
        if (rc == 1 && i == 0) {                /* the leaf: whose subject it is */
            rc = gnutls_x509_crt_get_dn3(crt, &dn, 0) == GNUTLS_E_SUCCESS && dn.size > 0 &&
                         dn.size < cap && !memchr(dn.data, '\0', dn.size)
                     ? 1 : -1;
            if (rc == 1) {
                memcpy(subj, dn.data, dn.size);
                subj[dn.size] = '\0';
            }
            gnutls_free(dn.data);
        }
        gnutls_x509_crt_deinit(crt);
    }
    return rc;
}

/* verify_subject, once per connection and certificate: verifying took ~0.5 ms a request (an
 * ECDSA chain check), while a session's peer certificate changes only by a renegotiation,
 * which is caught by comparing it with the one verified. Checked again once a certificate
 * of the chain has expired, and every CERT_RECHECK_S. */
static int peer_subject(const tfx_req_t *r, char *subj, size_t cap)
{
    conn_ctx_t *cc = HR(r)->cc;
    gnutls_session_t ss;
    unsigned n;
    const gnutls_datum_t *chain = peer_chain(r, &ss, &n);
    const gnutls_datum_t *leaf = chain ? &chain[0] : NULL;
    size_t len = leaf ? leaf->size : 0;
    if (cc && cc->cert != 2 && len == cc->der_len &&
        (len == 0 || memcmp(leaf->data, cc->der, len) == 0) &&
        (cc->cert != 1 || time(NULL) <= cc->cert_until)) {
        if (cc->cert == 1)
            snprintf(subj, cap, "%s", cc->subj);
        return cc->cert;
    }
    time_t until = 0;
    int rc = chain ? verify_subject(ss, chain, n, subj, cap, &until) : 0;
    if (cc) {
        free(cc->subj);
        free(cc->der);
        cc->subj = rc == 1 ? strdup(subj) : NULL;
        cc->der = len ? malloc(len) : NULL;
        if (cc->der)
            memcpy(cc->der, leaf->data, len);
        cc->der_len = len;
        /* no memory for the copies: verify again next time */
        cc->cert = (rc == 1 && !cc->subj) || (len && !cc->der) ? 2 : rc;
        cc->cert_until = until;
    }
    return rc;
}

/* The operation the request line and headers ask for, into r->op (or why not, r->op_err). */
static void parse_op(tfx_req_t *r, const char *method, const char *url)
{
    char subj[2048];
    int cert = 0;                   /* a bearer token decides: a certificate only without one */
    if (HR(r)->srv->cfg.tls_client_ca_pem && !header(r, "Authorization"))
        cert = peer_subject(r, subj, sizeof subj);
    tfp_http_req_t in = {
        .method = method,
        .path = url,
        .wait = MHD_lookup_connection_value(HR(r)->conn, MHD_GET_ARGUMENT_KIND, "wait"),
        .prefix = MHD_lookup_connection_value(HR(r)->conn, MHD_GET_ARGUMENT_KIND, "prefix"),
        .after = MHD_lookup_connection_value(HR(r)->conn, MHD_GET_ARGUMENT_KIND, "after"),
        .limit = MHD_lookup_connection_value(HR(r)->conn, MHD_GET_ARGUMENT_KIND, "limit"),
        .if_match = header(r, MHD_HTTP_HEADER_IF_MATCH),
        .if_none_match = header(r, MHD_HTTP_HEADER_IF_NONE_MATCH),
        .if_range = header(r, MHD_HTTP_HEADER_IF_RANGE),
        .range = header(r, MHD_HTTP_HEADER_RANGE),
        .content_length = content_length(r),
        .chunked = header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL,
        .content_type = header(r, MHD_HTTP_HEADER_CONTENT_TYPE),
        .accept = header(r, MHD_HTTP_HEADER_ACCEPT),
        .dtype = header(r, "Tfetch-Dtype"),
        .shape = header(r, "Tfetch-Shape"),
        .user = header(r, "Tfetch-User"),
        .user_principal = header(r, "Tfetch-User-Principal"),
        .authorization = header(r, "Authorization"),
        .cert_subject = cert > 0 ? subj : NULL,
        .cert_bad = cert < 0,
        .request_id = header(r, "Tfetch-Request-Id"),
        .ttl = header(r, "Tfetch-TTL"),
        .worker_secret = header(r, "Tfetch-Worker-Secret"),
        .seq = header(r, "Tfetch-Seq"),
        .producer = header(r, "Tfetch-Producer"),
        .consumer = header(r, "Tfetch-Consumer"),
        .prefer = header(r, "Prefer"),
        .ack = MHD_lookup_connection_value(HR(r)->conn, MHD_GET_ARGUMENT_KIND, "ack"),
        .through = MHD_lookup_connection_value(HR(r)->conn, MHD_GET_ARGUMENT_KIND, "through"),
        .rewind = MHD_lookup_connection_value(HR(r)->conn, MHD_GET_ARGUMENT_KIND, "rewind"),
        .max_body = HR(r)->srv->cfg.max_body,
        .protocol = header(r, "Tfetch-Protocol"),
        .content_digest = header(r, "Content-Digest"),
        .repr_digest = header(r, "Repr-Digest"),
        .want_content_digest = header(r, "Want-Content-Digest"),
        .want_repr_digest = header(r, "Want-Repr-Digest"),
        .ours = HR(r)->srv->cfg.protocol,
    };
    tfp_http_op_parse(&in, &r->op, &r->op_err);
}

/* ---- bodies ------------------------------------------------------------------------------ */

/* Makes room for `more` bytes after what has arrived: one allocation when the length is
 * known, geometric growth (in place, without copying large buffers) for chunked bodies. */
static tfp_status_t reserve_body(tfx_req_t *r, size_t more)
{
    uint64_t need = r->headroom + r->body_len + more;
    if (r->buf && need <= r->cap)
        return TFP_OK;
    int64_t cl = content_length(r);
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
    return tfx_req_grow_body(r, want);
}

/* Bodies that fail (too big, no memory) are drained and answered once complete: MHD cannot
 * queue a response in the middle of an upload, and closing with unread bytes would reset the
 * connection before the client reads the answer. A sender that keeps going far past what we
 * wanted, or that trickles below the rate floor, is disconnected instead (returns -1). */
#define DRAIN_MAX (64ull << 20)

static int take_upload(tfx_req_t *r, const char *data, size_t n)
{
    r->body_seen += n;
    if (tfx_guard_body(HR(r)->srv->guard, HR(r)->gc, n, tfx_now_ms()) != 0)
        return -1;                                  /* too slow: answered 408 and shut */
    if (HR(r)->deferred || r->body_failed || !r->accept_body)
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
    if (header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        return 1;
    return content_length(r) > 0;
}

/* ---- responses --------------------------------------------------------------------------- */

/* What a browser on another origin may send and read (cors-origins): the headers tfetchd
 * reads and answers with, beside the CORS-safelisted ones. */
#define CORS_METHODS "GET, HEAD, PUT, POST, DELETE"
#define CORS_REQ_HEADERS "Authorization, Content-Type, Accept, Tfetch-User, Tfetch-Request-Id, " \
    "Tfetch-Dtype, Tfetch-Shape, Tfetch-TTL, Tfetch-Seq, Tfetch-Producer, Tfetch-Consumer, " \
    "If-Match, If-None-Match, If-Range, Range, Prefer"
#define CORS_EXPOSED "ETag, Content-Disposition, Content-Range, Accept-Ranges, Tfetch-Request-Id, " \
    "Tfetch-Dtype, Tfetch-Shape, Tfetch-Name, Tfetch-Replayed, Tfetch-Seq, Tfetch-Position, " \
    "Tfetch-Round"

/* Access-Control-Allow-Origin and its companions on an answer to an allowed Origin: "*"
 * without credentials, or the Origin itself (it matched a listed one exactly) with them. */
static void cors_headers(const http_req_t *hr, struct MHD_Response *resp)
{
    if (hr->cors == TFP_CORS_NONE) {
        if (hr->srv->cors.n)            /* the answer depends on Origin: tell caches */
            MHD_add_response_header(resp, "Vary", "Origin");
        return;
    }
    if (hr->cors == TFP_CORS_ANY) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    } else {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", hr->origin);
        MHD_add_response_header(resp, "Access-Control-Allow-Credentials", "true");
        MHD_add_response_header(resp, "Vary", "Origin");
    }
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", CORS_EXPOSED);
}

/* A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method) from an allowed
 * origin: answered here, before the router (a preflight carries no credentials), 204 with
 * what may be sent. 1 if it was one; anything else takes the usual way (OPTIONS: 405). */
static int answer_preflight(http_req_t *hr, const char *method)
{
    tfx_req_t *r = &hr->base;
    if (strcmp(method, "OPTIONS") != 0 || hr->cors == TFP_CORS_NONE ||
        !header(r, "Access-Control-Request-Method"))
        return 0;
    tfx_req_add_header(r, "Access-Control-Allow-Methods", CORS_METHODS);
    tfx_req_add_header(r, "Access-Control-Allow-Headers", CORS_REQ_HEADERS);
    tfx_req_add_header(r, "Access-Control-Max-Age", "600");
    if (hr->cors == TFP_CORS_ORIGIN)
        tfx_req_add_header(r, "Vary", "Access-Control-Request-Method, "
                           "Access-Control-Request-Headers");
    tfx_respond(r, 204, NULL, "", 0, NULL, NULL);
    return 1;
}

/* tfx_req_answer_headers' add: a typed field as its header. */
static void add_header(void *resp, const char *name, const char *value)
{
    MHD_add_response_header(resp, name, value);
}

static void http_respond(tfx_req_t *r, unsigned status, const char *content_type,
                         const void *body, size_t len, void (*release)(void *), void *release_arg)
{
    http_req_t *hr = HR(r);
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
    if (atomic_load(&hr->srv->draining))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    for (tfx_hdr_t *h = r->hdrs; h; h = h->next)
        MHD_add_response_header(resp, h->name, h->value);
    cors_headers(hr, resp);
    tfx_req_answer_headers(r, add_header, resp);
    hr->resp = resp;
}

/* The answer when even the error's body cannot be allocated. */
static const char oom_json[] = "{\"error\":\"out of memory\",\"code\":\"TF_ENOMEM\"}\n";

static void http_respond_error(tfx_req_t *r, tfp_status_t code, const char *msg)
{
    if (code == TFP_EMETHOD && r->op_err.code == TFP_EMETHOD && r->op_err.allow)
        tfx_req_add_header(r, "Allow", r->op_err.allow);
    size_t len = 0;
    char *body = tfp_error_json(code, msg, &len);
    if (!body) {
        r->status = 500;
        r->resp_len = sizeof oom_json - 1;
        http_respond(r, 500, "application/json", oom_json, sizeof oom_json - 1, NULL, NULL);
        return;
    }
    r->resp_len = len;
    http_respond(r, r->status, "application/json", body, len, free, body);
}

static enum MHD_Result queue_pending(http_req_t *hr)
{
    if (!hr->resp)
        return MHD_YES;
    enum MHD_Result ok = MHD_queue_response(hr->conn, hr->base.status, hr->resp);
    MHD_destroy_response(hr->resp);
    hr->resp = NULL;
    hr->queued = 1;
    if (ok == MHD_YES)                  /* written from now on: the reader's rate counts */
        tfx_guard_send(hr->srv->guard, hr->gc, tfx_now_ms());
    return ok;
}

/* ---- suspension -------------------------------------------------------------------------- */

static void http_resume(tfx_req_t *r)
{
    http_req_t *hr = HR(r);
    struct MHD_Connection *conn = NULL;
    pthread_mutex_lock(&hr->lock);
    if (hr->state == SUSPENDED) {
        hr->state = RUNNING;
        conn = hr->conn;
    } else {
        hr->wake_pending = 1;
    }
    pthread_mutex_unlock(&hr->lock);
    /* Outside the lock, and hr untouched after: once resumed, the connection's thread may
     * answer and free hr (on_completed) at once. Still suspended until this call, so the
     * connection is alive, and RUNNING keeps any other resume from calling it twice. */
    if (conn)
        MHD_resume_connection(conn);
}

/* Runs handle until it responds or suspends with no wake-up pending. */
static void run_handle(http_req_t *hr)
{
    tfx_req_t *r = &hr->base;
    for (;;) {
        r->want_suspend = 0;
        tfx_req_handling(r);
        hr->srv->h.handle(r, hr->srv->h.arg);
        if (!r->want_suspend || r->answered)
            return;
        pthread_mutex_lock(&hr->lock);
        if (hr->wake_pending) {
            hr->wake_pending = 0;
            pthread_mutex_unlock(&hr->lock);
            continue;
        }
        hr->state = SUSPENDED;
        MHD_suspend_connection(hr->conn);
        pthread_mutex_unlock(&hr->lock);
        return;
    }
}

static const tfx_req_ops_t http_ops = {
    .name = "http",
    .respond = http_respond,
    .respond_error = http_respond_error,
    .resume = http_resume,
};

/* ---- the connection guard (http_guard.h) -------------------------------------------- */

/* The head is in: the guard stops its deadline and, when a body follows, starts the rate
 * windows. */
static void guard_head(http_req_t *hr)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(hr->conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    hr->cc = ci ? ci->socket_context : NULL;
    hr->gc = hr->cc ? hr->cc->gc : NULL;
    tfx_guard_head(hr->srv->guard, hr->gc, body_pending(&hr->base), tfx_now_ms());
}

/* MHD's accept policy: at our limit, make room or refuse at once (MHD closes it). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addr;
    (void)addrlen;
    tfx_http_t *s = cls;
    return tfx_guard_admit(s->guard, tfx_now_ms()) ? MHD_YES : MHD_NO;
}

/* MHD's connection notices: the guard's entry lives from start to close (MHD reports the
 * close before it closes the socket). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    tfx_http_t *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_ctx_t *cc = calloc(1, sizeof *cc);
        if (cc) {
            cc->cert = 2;
            cc->gc = ci ? tfx_guard_open(s->guard, ci->connect_fd, tfx_now_ms()) : NULL;
        }
        *socket_context = cc;       /* no memory: unguarded, verified per request */
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_ctx_t *cc = *socket_context;
        if (cc) {
            tfx_guard_close(s->guard, cc->gc);
            free(cc->subj);
            free(cc->der);
            free(cc);
        }
        *socket_context = NULL;
    }
}

/* MHD's own limit sits above ours, so that it never stops accepting (which would leave
 * newcomers in the listen backlog): room for connections being closed and for the few
 * admitted at once by several threads. */
static unsigned mhd_connection_limit(const tfx_http_config_t *cfg)
{
    unsigned extra = cfg->max_connections / 4;
    if (extra < 64)
        extra = 64;
    return cfg->max_connections + extra;
}

void tfx_http_tick(tfx_http_t *s)
{
    tfx_guard_sweep(s->guard, tfx_now_ms());
}

void tfx_http_guard_stats(const tfx_http_t *s, tfx_http_guard_stats_t *out)
{
    tfx_guard_stats_t st;
    tfx_guard_stats(s->guard, &st);
    *out = (tfx_http_guard_stats_t){tfx_guard_count(s->guard), st.refused, st.evicted,
                                    st.head_timeouts, st.slow_bodies, st.slow_readers,
                                    st.evicted_slow};
}

/* ---- MHD callbacks ----------------------------------------------------------------------- */

static int expects_continue(const tfx_req_t *r)
{
    const char *e = header(r, MHD_HTTP_HEADER_EXPECT);
    return e && strcasecmp(e, "100-continue") == 0;
}

/* The client's address, for the access log. */
static void peer_address(struct MHD_Connection *conn, char *buf, size_t n)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    buf[0] = '\0';
    if (!ci || !ci->client_addr)
        return;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)n);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)n);
}

/* Ambiguous framing (proto/httpframe.h): answered before any handler runs, with the
 * connection closed, so nothing after these headers is read as another request. */
static int refuse_framing(http_req_t *hr, const char *url, const char *version)
{
    tfp_err_t err;

    if (tfx_http_frame_check(hr->conn, url, version, &err) == TFP_OK)
        return 0;
    tfx_req_add_header(&hr->base, MHD_HTTP_HEADER_CONNECTION, "close");
    tfx_respond_error(&hr->base, err.code, "%s", err.msg);
    return 1;
}

/* A request whose state could not be allocated: marked with this one static object, its
 * body is drained and it is answered a static 500 with the connection closed (no state of its
 * own is needed, so one object serves them all). */
static http_req_t no_memory;
static enum MHD_Result answer_no_memory(struct MHD_Connection *conn, size_t *upload_data_size)
{
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(sizeof oom_json - 1,
                                                                (void *)oom_json,
                                                                MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(conn, 500, resp);
    MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    tfx_http_t *s = cls;
    http_req_t *hr = *con_cls;

    if (hr == &no_memory)
        return answer_no_memory(conn, upload_data_size);
    if (!hr) {
        hr = calloc(1, sizeof *hr);
        if (!hr) {
            *con_cls = &no_memory;              /* answered once its body is drained */
            return MHD_YES;
        }
        tfx_req_t *r = &hr->base;
        r->ops = &http_ops;
        r->h = &s->h;
        hr->srv = s;
        hr->conn = conn;
        pthread_mutex_init(&hr->lock, NULL);
        *con_cls = hr;
        tfx_req_arrived(r);
        peer_address(conn, r->peer, sizeof r->peer);
        atomic_fetch_add(&s->inflight, 1);
        guard_head(hr);
        parse_op(r, method, url);
        hr->origin = header(r, "Origin");
        hr->cors = tfp_cors_check(&s->cors, hr->origin);
        if (atomic_load(&s->draining))
            tfx_respond_error(r, TFP_EBUSY, "the server is shutting down");
        else if (s->cfg.max_header_bytes && header_bytes(r) > s->cfg.max_header_bytes)
            tfx_respond_error(r, TFP_EHEADERS, "request headers exceed %zu bytes",
                              s->cfg.max_header_bytes);
        else if (refuse_framing(hr, url, version))
            return queue_pending(hr);               /* at once; MHD then closes */
        else if (!answer_preflight(hr, method))
            s->h.begin(r, s->h.arg);
        /* An early answer to a client that did not ask "Expect: 100-continue" waits until its
         * body is drained: closing on unread bytes would reset the connection first. Not
         * for a body larger than any we drain: that answer goes at once. */
        if (hr->resp && body_pending(r) && !expects_continue(r) &&
            content_length(r) <= (int64_t)DRAIN_MAX) {
            hr->deferred = 1;
            return MHD_YES;
        }
        if (hr->resp)
            tfx_guard_busy(s->guard, hr->gc);      /* answering now: no body rate, no 408 */
        return queue_pending(hr);
    }
    tfx_req_t *r = &hr->base;
    if (*upload_data_size) {
        int rc = take_upload(r, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return rc == 0 ? MHD_YES : MHD_NO;
    }
    tfx_guard_busy(s->guard, hr->gc);
    if (hr->deferred)
        ;                                           /* the answer was decided at begin */
    else if (r->body_failed)
        answer_failed_body(r);
    else
        run_handle(hr);
    return queue_pending(hr);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    tfx_http_t *s = cls;
    http_req_t *hr = *con_cls;
    if (!hr || hr == &no_memory) {
        *con_cls = NULL;
        return;
    }
    tfx_guard_idle(s->guard, hr->gc, tfx_now_ms());     /* kept alive: the next head's wait */
    s->h.finish(&hr->base, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK, s->h.arg);
    if (hr->resp)
        MHD_destroy_response(hr->resp);
    tfx_req_release(&hr->base);
    pthread_mutex_destroy(&hr->lock);
    free(hr);
    *con_cls = NULL;
    atomic_fetch_sub(&s->inflight, 1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    const tfx_http_config_t *cfg = cls;
    if (cfg->log) {
        cfg->log(cfg->log_arg, fmt, ap);
        return;
    }
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

    int tls = cfg->tls_cert_pem && cfg->tls_key_pem;
    if (tls) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            tfp_err_set(err, TFP_EINVAL, "this libmicrohttpd was built without TLS");
            return NULL;
        }
        flags |= MHD_USE_TLS;
    }

    tfx_http_t *s = calloc(1, sizeof *s);
    if (!s) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return NULL;
    }
    s->h = *h;
    s->cfg = *cfg;
    if (tfp_cors_parse(cfg->cors_origins, &s->cors, err) != TFP_OK) {
        free(s);
        return NULL;
    }
    s->cfg.cors_origins = NULL;             /* parsed: the caller's string is not kept */
    atomic_init(&s->inflight, 0);
    atomic_init(&s->draining, 0);
    s->quiesced_fd = MHD_INVALID_SOCKET;
    tfx_guard_config_t gcfg = {cfg->max_connections, cfg->header_timeout_s * 1000u,
                               cfg->min_upload_rate, cfg->min_download_rate,
                               cfg->rate_window_s * 1000u};
    if (!(s->guard = tfx_guard_new(&gcfg))) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        free(s);
        return NULL;
    }

    s->mhd = MHD_start_daemon(
        flags, cfg->port, on_accept, s, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, &s->cfg,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(cfg->threads ? cfg->threads : 1),
        MHD_OPTION_CONNECTION_LIMIT, mhd_connection_limit(cfg),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->conn_memory,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_UNESCAPE_CALLBACK, tfx_http_unescape, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        /* TLS: the options are ignored unless MHD_USE_TLS is in flags; with no TLS the list
         * ends at the first MHD_OPTION_END. */
        tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, cfg->tls_cert_pem,
        MHD_OPTION_HTTPS_MEM_KEY, cfg->tls_key_pem,
        MHD_OPTION_HTTPS_PRIORITIES, TFX_TLS_PRIORITIES,
        /* a client certificate is asked for (not required: a bearer token may be sent) */
        cfg->tls_client_ca_pem ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END,
        cfg->tls_client_ca_pem,
        MHD_OPTION_END);
    if (!s->mhd && tls) {
        tfp_err_set(err, TFP_EINVAL, "cannot start HTTPS on %s port %u (certificate, key or "
                    "client CA not valid PEM, or the key does not match)", cfg->listen_addr,
                    (unsigned)cfg->port);
        tfx_guard_free(s->guard);
        free(s);
        return NULL;
    }
    if (!s->mhd) {
        tfp_err_set(err, TFP_EINTERNAL, "cannot listen on %s port %u (address in use or not local?)",
                    cfg->listen_addr, (unsigned)cfg->port);
        tfx_guard_free(s->guard);
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

/* The connections the kernel accepted on fd that MHD has not taken yet (the listen backlog at
 * the instant of the drain): handed to MHD, so that each is answered 503 with "Connection:
 * close" at its first request instead of waiting in a queue nobody reads. */
static void take_backlog(tfx_http_t *s, int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)
        return;
    for (unsigned i = 0; i < 4096; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int c = accept4(fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0)
            return;                 /* EAGAIN: none left (or a worker took it: it is served) */
        (void)MHD_add_connection(s->mhd, c, (struct sockaddr *)&ss, len);  /* closes on error */
    }
}

void tfx_http_quiesce(tfx_http_t *s)
{
    atomic_store(&s->draining, 1);
    s->quiesced_fd = MHD_quiesce_daemon(s->mhd);
    if (s->quiesced_fd == MHD_INVALID_SOCKET)
        return;
    take_backlog(s, s->quiesced_fd);
    /* Stop listening: a newcomer is refused by the kernel at once (a reset), not left in the
     * backlog until its own timeout. shutdown, not close: the descriptor stays ours (an MHD
     * worker that has not seen the quiesce yet may still poll it) until tfx_http_stop. */
    (void)shutdown(s->quiesced_fd, SHUT_RDWR);
}

void tfx_http_stop(tfx_http_t *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->mhd);
    if (s->quiesced_fd != MHD_INVALID_SOCKET)
        close(s->quiesced_fd);
    tfx_guard_free(s->guard);                   /* after MHD reported every close */
    free(s);
}
