/* client.c - tf_client_t and its requests: the asynchronous ones (tf_fetch_start, _test,
 * _wait, _cancel, tf_client_run) and the blocking calls built on them (tf_get, tf_put,
 * tf_delete, tf_fetch, tf_list, tf_info).
 *
 * A client owns one HTTP engine (transports/http_client: a libcurl multi handle whose
 * connection cache keeps up to N connections to each origin alive) and a pool of idle engine
 * requests (each keeps its curl easy handle for reuse). A tf_fetch_t is one request: it
 * borrows an engine request while it runs and keeps its outcome (tf_result_t, the decoded
 * reply) until its callback has run and, for a held handle, until tf_fetch_free. Every
 * blocking call is "start a tf_fetch_t without a callback, drive the engine until it
 * completes, take the reply", so there is one engine and two ways to drive it. Request
 * bodies are sent straight from the document's tensors (header + one segment per tensor, no
 * concatenation); response bodies become the storage of the returned document (decoded in
 * place, no copy). Bodies are safetensors, or Shumai's format (one F32 tensor, proto's
 * codec), per request.
 *
 * Callbacks run on the thread driving the client, from inside tfx_hc's dispatch (never inside
 * a libcurl callback, so they may start and cancel requests); the client counts how deep it
 * is in callbacks to refuse what would re-enter the engine (blocking calls, wait, run, free).
 * The user's progress callback does run inside libcurl, and everything is refused there.
 * One thread at a time per client.
 *
 * UCX (when built with it): each origin the client talks to has a record (whether its
 * responses offer UCX, its connection, why there is none, a backoff). A request UCX can carry
 * is sent over the origin's connection, negotiated when the request starts if the policy
 * allows (POST /v1/upgrade on a private engine, then transports/ucx_client's connect); its
 * completion comes back through tfx_ucxc_next, which the driving thread drains after every
 * wait of the HTTP engine (the UCX progress thread ends that wait with tfx_hc_wakeup), and is
 * recorded like an HTTP response before the same completion path runs the callback. A UCX
 * transport failure drops the connection and, under policy auto, restarts the request over
 * HTTP with the same request id. tf_fetch_t holds either an engine request (HTTP) or a UCX
 * request, never both.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "client/internal.h"
#include "proto/ids.h"
#include "proto/jsonread.h"
#include "proto/raw.h"
#include "proto/safetensors.h"
#include "proto/shumai.h"
#include "proto/ucxframe.h"
#include "proto/upgrade.h"
#include "transports/hostid.h"
#include "transports/http_client.h"
#ifdef HAVE_UCX
#include "transports/ucx_client.h"
#endif

#define DEFAULT_TIMEOUT_MS 60000L
#define MAX_CONNECTIONS_CAP 4096L
#define REQ_POOL_MAX 256
#define MIME_SAFETENSORS "application/x-safetensors"
#define MIME_JSON "application/json"
#define MIME_RAW "application/octet-stream"
#define UPGRADE_TIMEOUT_MS 2000L        /* POST /v1/upgrade */
#define UCX_CONNECT_TIMEOUT_MS 2000L    /* the UCX endpoint and its HELLO */
#define BACKOFF_MIN_MS 1000L            /* after a failed upgrade, doubling ... */
#define BACKOFF_MAX_MS 60000L           /* ... up to this */
#define CLOSE_DRAIN_MS 5000L            /* tf_client_free waits this long for UCX requests */

/* Operations besides the public tf_op_t, for tf_list and tf_info: their reply is kept as
 * text rather than decoded as a document. */
enum { OP_LIST = 100, OP_INFO = 101, OP_UPGRADE = 102 };

/* What the client knows of one origin (scheme://host:port): whether its server offers UCX,
 * its UCX connection, and why there is none. Kept for the client's life. */
typedef struct origin {
    struct origin *next;
    char *key;                      /* "http://127.0.0.1:8000" (tfx_hc_url_split) */
    int offered;                    /* the last response's Tfetch-Upgrade: 1 ucx, 0 no, -1 ? */
    char why[160];                  /* why there is no UCX connection; "" when none known */
    uint64_t retry_at;              /* CLOCK_MONOTONIC ms: no upgrade attempt before */
    long backoff_ms;                /* the wait after the next failure; 0 after a success */
    int want_upgrade;               /* a request inside a callback asked: negotiate when the
                                     * client is next driven */
    tf_transport_t want_policy;
#ifdef HAVE_UCX
    tfx_ucxc_conn_t *conn;          /* the connection, or NULL */
    uint64_t conn_gen;              /* counts connections made, to tell them apart */
    char transport[32];             /* what carries conn: "ucx/sysv+cma" */
#endif
} origin_t;

struct tf_client {
    tfx_hc_t *hc;
    tfx_hc_req_t *pool[REQ_POOL_MAX];  /* idle engine requests, reset */
    size_t npool;
    tf_fetch_t *live;               /* every handle not yet freed (pending or held) */
    size_t npending;                /* started and not completed (over either transport) */
    tf_transport_t transport;       /* the policy: never TF_TRANSPORT_DEFAULT */
    origin_t *origins;
#ifdef HAVE_UCX
    tfx_ucxc_t *ucx;                /* started at the first upgrade */
    char ucx_dead[160];             /* why UCX cannot start in this process; "" if it can */
    size_t nucx;                    /* requests in flight over UCX */
    int want_upgrades;              /* some origin has want_upgrade set */
    tfp_up_host_t host;             /* this host's identity, read once */
    int have_host;
#endif
    int in_cb;                      /* depth of fetch callbacks running */
    int in_engine;                  /* inside libcurl (the progress callback) */
    int closing;                    /* tf_client_free is canceling what is pending */
    char *user;                     /* Tfetch-User, or NULL */
    char next_rid[TFP_MAX_REQUEST_ID + 1];  /* "" when the client makes one */
    char rid_prefix[17];            /* 16 random hex digits */
    uint64_t rid_seq;
    long timeout_ms;
    uint64_t max_body;
    tf_format_t format;
    tf_progress_fn progress;
    void *progress_ud;
    tf_result_t last;
};

struct tf_fetch {
    tf_client_t *c;                 /* NULL once the client is freed */
    tf_fetch_t *prev, *next;        /* c->live */
    tfx_hc_req_t *req;              /* while running */
    tf_fetch_cb cb;
    void *ud;
    int op;                         /* tf_op_t or OP_LIST / OP_INFO */
    tf_format_t format;             /* resolved: never TF_FORMAT_DEFAULT */
    int held;                       /* the caller has the handle: freed by tf_fetch_free */
    int done;                       /* completed; the callback has run or is running */
    int freeing;                    /* tf_fetch_free was called */
    int holds;                      /* frames using f (its callback, a wait): free after */
    char *url;                      /* the URL requested */
    void *hdr;                      /* the encoded body header, while running */
    tf_result_t result;
    tf_doc_t *doc;                  /* the reply, until given to the callback or taken */
    char *text;                     /* OP_LIST / OP_INFO: the reply body */
    size_t text_len;
    /* what the request is, kept for a retry over HTTP */
    const tf_doc_t *in;             /* borrowed until the callback has run */
    long wait_ms;
    long total_ms;                  /* the whole request's time limit, wait included; 0 none */
    tf_transport_t policy;          /* resolved: never TF_TRANSPORT_DEFAULT */
    origin_t *origin;               /* the URL's origin (owned by the client), or NULL */
    char name[TFP_MAX_TENSOR_NAME + 1];  /* the tensor or route, when UCX can carry it */
    struct timespec t0;             /* when it started */
    int tried_ucx;                  /* went over UCX first (then maybe HTTP) */
#ifdef HAVE_UCX
    tfx_ucxc_req_t *ureq;           /* while in flight over UCX */
    uint64_t conn_gen;              /* the connection it went over */
    const void **segs;              /* the body's segments, lent to UCX until completion */
    size_t *lens;
    int canceled;                   /* canceled while over UCX: completes with TF_ECANCELED */
#endif
};

/* ---- handle ------------------------------------------------------------------------------ */

static void make_rid_prefix(char out[17])
{
    uint8_t r[8];
    ssize_t got = getrandom(r, sizeof(r), GRND_NONBLOCK);
    if (got != (ssize_t)sizeof(r)) {
        /* No entropy yet (early boot): the ids still only need to be unique. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                     ((uint64_t)getpid() << 16) ^ (uint64_t)(uintptr_t)out;
        memcpy(r, &x, sizeof(r));
    }
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
}

/* TFETCH_TRANSPORT=auto|http|ucx; anything else (or nothing): auto. */
static tf_transport_t transport_from_env(void)
{
    const char *v = getenv("TFETCH_TRANSPORT");
    if (v && strcasecmp(v, "http") == 0)
        return TF_TRANSPORT_HTTP;
    if (v && strcasecmp(v, "ucx") == 0)
        return TF_TRANSPORT_UCX;
    return TF_TRANSPORT_AUTO;
}

tf_status_t tf_client_new(tf_client_t **out)
{
    if (!out)
        return TF_EINVAL;
    tf_client_t *c = calloc(1, sizeof(*c));
    if (!c)
        return TF_ENOMEM;
    if (tfx_hc_new(&c->hc) != TFX_HC_OK) {
        free(c);
        return TF_ENOMEM;
    }
    c->timeout_ms = DEFAULT_TIMEOUT_MS;
    c->format = TF_FORMAT_SAFETENSORS;
    c->transport = transport_from_env();
    make_rid_prefix(c->rid_prefix);
    snprintf(c->last.transport, sizeof(c->last.transport), "http");
    *out = c;
    return TF_OK;
}

static void close_ucx(tf_client_t *c);

void tf_client_free(tf_client_t *c)
{
    if (!c || c->in_cb || c->in_engine || c->closing)
        return;
    c->closing = 1;
    /* Cancels every pending request: their callbacks run now (UCX ones once the transport
     * has given their buffers back), and return their engine requests to the pool. */
    close_ucx(c);
    tfx_hc_free(c->hc);
    for (size_t i = 0; i < c->npool; i++)
        tfx_hc_req_free(c->pool[i]);
    /* Held handles outlive the client, detached. */
    for (tf_fetch_t *f = c->live, *next; f; f = next) {
        next = f->next;
        f->c = NULL;
        f->origin = NULL;
        f->prev = f->next = NULL;
    }
    for (origin_t *o = c->origins, *next; o; o = next) {
        next = o->next;
        free(o->key);
        free(o);
    }
    free(c->user);
    free(c);
}

tf_status_t tf_client_set_user(tf_client_t *c, const char *user_id)
{
    if (!c)
        return TF_EINVAL;
    if (!user_id) {
        free(c->user);
        c->user = NULL;
        return TF_OK;
    }
    if (!tfp_user_id_valid(user_id))
        return TF_EINVAL;
    char *u = strdup(user_id);
    if (!u)
        return TF_ENOMEM;
    free(c->user);
    c->user = u;
    return TF_OK;
}

tf_status_t tf_client_set_request_id(tf_client_t *c, const char *request_id)
{
    if (!c)
        return TF_EINVAL;
    if (!request_id) {
        c->next_rid[0] = '\0';
        return TF_OK;
    }
    if (!tfp_request_id_valid(request_id) || strlen(request_id) >= sizeof(c->next_rid))
        return TF_EINVAL;
    snprintf(c->next_rid, sizeof(c->next_rid), "%s", request_id);
    return TF_OK;
}

void tf_client_set_timeout(tf_client_t *c, long timeout_ms)
{
    if (c)
        c->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
}

void tf_client_set_progress(tf_client_t *c, tf_progress_fn fn, void *user_data)
{
    if (c) {
        c->progress = fn;
        c->progress_ud = user_data;
    }
}

void tf_client_set_max_body(tf_client_t *c, uint64_t max)
{
    if (c)
        c->max_body = max;
}

tf_status_t tf_client_set_max_connections(tf_client_t *c, long n)
{
    if (!c || n < 1 || n > MAX_CONNECTIONS_CAP || c->in_engine)
        return TF_EINVAL;
    return tfx_hc_set_max_host_connections(c->hc, n) == TFX_HC_OK ? TF_OK : TF_EINVAL;
}

static int format_valid(tf_format_t f)
{
    return f == TF_FORMAT_SAFETENSORS || f == TF_FORMAT_SHUMAI;
}

tf_status_t tf_client_set_format(tf_client_t *c, tf_format_t format)
{
    if (!c || !format_valid(format))
        return TF_EINVAL;
    c->format = format;
    return TF_OK;
}

static int transport_valid(tf_transport_t t)
{
    return t == TF_TRANSPORT_AUTO || t == TF_TRANSPORT_HTTP || t == TF_TRANSPORT_UCX;
}

tf_status_t tf_client_set_transport(tf_client_t *c, tf_transport_t transport)
{
    if (!c || !transport_valid(transport))
        return TF_EINVAL;
    c->transport = transport;
    return TF_OK;
}

const tf_result_t *tf_client_last(const tf_client_t *c)
{
    return c ? &c->last : NULL;
}

size_t tf_client_pending(const tf_client_t *c)
{
    return c ? c->npending : 0;
}

/* ---- outcomes ---------------------------------------------------------------------------- */

static const char *op_name(int op)
{
    switch (op) {
    case TF_OP_GET: return "get";
    case TF_OP_PUT: return "put";
    case TF_OP_DELETE: return "delete";
    case TF_OP_EXCHANGE: return "call";
    case OP_LIST: return "list";
    case OP_INFO: return "info";
    case OP_UPGRADE: return "upgrade";
    default: return "fetch";
    }
}

/* A fresh record for a request of op: the request id it will carry is the one given, else
 * the client's next id (used up), else a new one. */
static void new_result(tf_client_t *c, tf_result_t *r, int op, const char *rid)
{
    memset(r, 0, sizeof(*r));
    r->status = TF_EAGAIN;
    snprintf(r->op, sizeof(r->op), "%s", op_name(op));
    snprintf(r->transport, sizeof(r->transport), "http");
    if (rid && tfp_request_id_valid(rid)) {
        snprintf(r->request_id, sizeof(r->request_id), "%s", rid);
    } else if (c->next_rid[0] && !rid) {
        snprintf(r->request_id, sizeof(r->request_id), "%s", c->next_rid);
        c->next_rid[0] = '\0';
    } else {
        snprintf(r->request_id, sizeof(r->request_id), "%s-%" PRIu64, c->rid_prefix,
                 ++c->rid_seq);
    }
}

/* Records a failure in r (message printf-style, or the status text when fmt is NULL). */
static tf_status_t rfail(tf_result_t *r, tf_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static tf_status_t rfail(tf_result_t *r, tf_status_t st, const char *fmt, ...)
{
    r->status = st;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->error, sizeof(r->error), fmt, ap);
        va_end(ap);
    } else {
        snprintf(r->error, sizeof(r->error), "%s", tf_strerror(st));
    }
    return st;
}

/* Refuses a blocking call before it starts: tf_client_last says why. */
static tf_status_t refuse(tf_client_t *c, int op, tf_status_t st, const char *msg)
{
    new_result(c, &c->last, op, NULL);
    return rfail(&c->last, st, "%s", msg ? msg : tf_strerror(st));
}

static tf_status_t from_transport(tfx_hc_status_t st)
{
    switch (st) {
    case TFX_HC_OK: return TF_OK;
    case TFX_HC_ENOMEM: return TF_ENOMEM;
    case TFX_HC_EINVAL: return TF_EINVAL;
    case TFX_HC_EURL: return TF_EURL;
    case TFX_HC_ECONNECT: return TF_ECONNECT;
    case TFX_HC_ETIMEDOUT: return TF_ETIMEDOUT;
    case TFX_HC_ECANCELED: return TF_ECANCELED;
    case TFX_HC_ETOOBIG: return TF_ETOOBIG;
    case TFX_HC_EIO:
    case TFX_HC_EAGAIN:
        break;
    }
    return TF_EIO;
}

/* Copies up to n bytes of a body into the message, printable ASCII only, one line. */
static void body_excerpt(char *dst, size_t size, const uint8_t *body, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < size; i++) {
        unsigned char ch = body[i];
        if (ch == '\n' || ch == '\r')
            break;
        dst[o++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    dst[o] = '\0';
}

/* Turns a non-2xx response (HTTP status, body) into a status: the server's JSON error when
 * it sent one. */
static tf_status_t error_body(tf_result_t *res, long status, const uint8_t *body, size_t len)
{
    tfp_status_t code = TFP_EINTERNAL;
    char msg[sizeof(res->error)];

    if (body && len &&
        tfp_parse_error_body((const char *)body, len, &code, msg, sizeof(msg)) == 0) {
        tf_status_t st = tfi_from_proto(code);
        if (st == TF_OK)
            st = TF_EHTTP;
        return rfail(res, st, "%s", msg[0] ? msg : tf_strerror(st));
    }
    char excerpt[160] = "";
    if (body)
        body_excerpt(excerpt, sizeof(excerpt), body, len);
    if (excerpt[0])
        return rfail(res, TF_EHTTP, "HTTP %ld: %s", status, excerpt);
    return rfail(res, TF_EHTTP, "HTTP %ld", status);
}

static tf_status_t http_error(tf_result_t *res, const tfx_hc_resp_t *r)
{
    return error_body(res, r->status, r->body, r->body_len);
}

/* ---- Shumai's wire format ------------------------------------------------------------------ */
/* The codec is proto's (proto/shumai.h); here is only what a client adds: the provenance it
 * sends, the props stock Shumai sends, and what a reply's header becomes in the document. */

static const char shumai_props[] = "{\"collectStats\":false}";

/* The provenance Shumai expects: the user id read as a hex number when it is one (Shumai's
 * own ids are 8 hex digits), else none. */
static int64_t shumai_provenance(const char *user)
{
    int64_t prov;
    tfp_err_t err;
    if (!user || tfp_shumai_user_to_provenance(user, &prov, &err) != TFP_OK)
        return TFP_SHUMAI_NO_PROVENANCE;
    return prov;
}

/* Refuses what Shumai's format cannot carry: anything but one F32 tensor. */
static tf_status_t shumai_check(tf_result_t *res, const tf_doc_t *doc)
{
    tfp_err_t err;
    if (tfp_shumai_check_doc(doc->d, NULL, &err) != TFP_OK)
        return rfail(res, TF_EINVAL, "%s", err.msg);
    return TF_OK;
}

/* Records what a reply's Shumai header said as metadata: "shumai.user" (the provenance as
 * the user id Shumai prints; absent for none), "shumai.requires_grad" ("true" when set) and
 * "shumai.props" (the props JSON, when any). */
static tf_status_t shumai_meta(tfp_doc_t *d, const tfp_shumai_msg_t *m)
{
    tfp_err_t err;
    char user[TFP_SHUMAI_USER_SIZE];
    if (tfp_shumai_provenance_to_user(m->provenance, user) &&
        tfp_doc_set_meta(d, "shumai.user", user, &err) == TFP_ENOMEM)
        return TF_ENOMEM;
    if ((m->flags & TFP_SHUMAI_REQUIRES_GRAD) &&
        tfp_doc_set_meta(d, "shumai.requires_grad", "true", &err) == TFP_ENOMEM)
        return TF_ENOMEM;
    if (m->props_len > 0) {
        char *p = strndup(m->props, m->props_len);
        if (!p)
            return TF_ENOMEM;
        tfp_status_t st = tfp_doc_set_meta(d, "shumai.props", p, &err);
        free(p);
        if (st == TFP_ENOMEM)
            return TF_ENOMEM;
    }
    return TF_OK;
}

/* Parses a Shumai body into a one-tensor document named "tensor" pointing into body. */
static tf_status_t shumai_decode(tf_result_t *res, const uint8_t *body, size_t len,
                                 tfp_doc_t **out)
{
    tfp_shumai_msg_t m;
    tfp_err_t err;
    tfp_status_t pst = tfp_shumai_decode(body, len, 0, &m, &err);
    if (pst == TFP_ENOMEM)
        return rfail(res, TF_ENOMEM, NULL);
    if (pst != TFP_OK)
        return rfail(res, TF_EPROTO, "bad shumai response: %s", err.msg);
    if (shumai_meta(m.doc, &m) != TF_OK) {
        tfp_shumai_msg_clear(&m);
        return rfail(res, TF_ENOMEM, NULL);
    }
    *out = m.doc;
    return TF_OK;
}

/* ---- engine requests ------------------------------------------------------------------------ */

static tfx_hc_req_t *acquire_req(tf_client_t *c)
{
    if (c->npool > 0)
        return c->pool[--c->npool];
    tfx_hc_req_t *req = NULL;
    return tfx_hc_req_new(&req) == TFX_HC_OK ? req : NULL;
}

static void release_req(tf_client_t *c, tfx_hc_req_t *req)
{
    tfx_hc_req_reset(req);
    if (c->npool < REQ_POOL_MAX && !c->closing)
        c->pool[c->npool++] = req;
    else
        tfx_hc_req_free(req);
}

static int progress_tramp(uint64_t dn, uint64_t dt, uint64_t un, uint64_t ut, void *ud)
{
    tf_client_t *c = ud;
    if (!c->progress)
        return 0;
    c->in_engine++;
    int rc = c->progress(dn, dt, un, ut, c->progress_ud);
    c->in_engine--;
    return rc;
}

/* Adds the document as a safetensors body: its header, then each tensor's bytes, borrowed. */
static tf_status_t add_safetensors_body(tf_fetch_t *f, const tf_doc_t *doc)
{
    size_t hlen = 0;
    tf_status_t st = tf_doc_encode_header(doc, &f->hdr, &hlen);
    if (st != TF_OK)
        return rfail(&f->result, st, "cannot encode the document: %s", tf_strerror(st));
    if (tfx_hc_req_add_body(f->req, f->hdr, hlen) != TFX_HC_OK)
        return rfail(&f->result, TF_ENOMEM, NULL);
    for (size_t i = 0; i < tf_doc_count(doc); i++) {
        const tf_tensor_t *t = tf_doc_at(doc, i);
        if (t->nbytes && tfx_hc_req_add_body(f->req, t->data, t->nbytes) != TFX_HC_OK)
            return rfail(&f->result, TF_ENOMEM, NULL);
    }
    return TF_OK;
}

/* Adds the document's one F32 tensor as a Shumai body: words and shape, data, props. */
static tf_status_t add_shumai_body(tf_fetch_t *f, const tf_doc_t *doc)
{
    const tfp_tensor_t *t = NULL;
    tfp_err_t err;
    size_t hlen = 0;
    if (tfp_shumai_check_doc(doc->d, &t, &err) != TFP_OK)
        return rfail(&f->result, TF_EINVAL, "%s", err.msg);
    if (!(f->hdr = malloc(TFP_SHUMAI_MAX_HEADER)))
        return rfail(&f->result, TF_ENOMEM, NULL);
    if (tfp_shumai_encode_header(t->rank, t->shape, shumai_provenance(f->c->user), 0,
                                 sizeof(shumai_props) - 1, f->hdr, TFP_SHUMAI_MAX_HEADER, &hlen,
                                 &err) != TFP_OK)
        return rfail(&f->result, TF_EINVAL, "cannot encode for shumai: %s", err.msg);
    if (tfx_hc_req_add_body(f->req, f->hdr, hlen) != TFX_HC_OK ||
        (t->nbytes && tfx_hc_req_add_body(f->req, t->data, (size_t)t->nbytes) != TFX_HC_OK) ||
        tfx_hc_req_add_body(f->req, shumai_props, sizeof(shumai_props) - 1) != TFX_HC_OK)
        return rfail(&f->result, TF_ENOMEM, NULL);
    return TF_OK;
}

static const char *method_of(int op)
{
    switch (op) {
    case TF_OP_PUT: return "PUT";
    case TF_OP_DELETE: return "DELETE";
    case TF_OP_EXCHANGE: return "POST";
    default: return "GET";
    }
}

/* What the reply should be: a document in the request's format, or JSON. */
static const char *accept_of(const tf_fetch_t *f)
{
    switch (f->op) {
    case OP_LIST:
    case OP_INFO:
        return MIME_JSON;
    case TF_OP_GET:
    case TF_OP_EXCHANGE:
        /* Stock Shumai sends no Accept; neither do we in its format. */
        return f->format == TF_FORMAT_SHUMAI ? NULL : MIME_SAFETENSORS;
    default:
        return NULL;
    }
}

/* Describes the request on f->req: method, URL, ids, body, timeout (0: none), cap,
 * progress. */
static tf_status_t prepare(tf_fetch_t *f, long timeout)
{
    tf_client_t *c = f->c;
    tfx_hc_req_t *req = f->req;
    const char *accept = accept_of(f);
    int bad = 0;

    bad |= tfx_hc_req_set_method(req, method_of(f->op)) != TFX_HC_OK;
    bad |= tfx_hc_req_set_url(req, f->url) != TFX_HC_OK;
    bad |= tfx_hc_req_add_header(req, "Tfetch-Request-Id", f->result.request_id) != TFX_HC_OK;
    if (c->user)
        bad |= tfx_hc_req_add_header(req, "Tfetch-User", c->user) != TFX_HC_OK;
    if (accept)
        bad |= tfx_hc_req_add_header(req, "Accept", accept) != TFX_HC_OK;
    if (f->in)
        bad |= tfx_hc_req_add_header(req, "Content-Type", f->format == TF_FORMAT_SHUMAI ?
                                                              MIME_RAW : MIME_SAFETENSORS) !=
               TFX_HC_OK;
    if (bad)
        return rfail(&f->result, TF_ENOMEM, NULL);
    if (f->in) {
        free(f->hdr);
        f->hdr = NULL;
        tf_status_t st = f->format == TF_FORMAT_SHUMAI ? add_shumai_body(f, f->in)
                                                       : add_safetensors_body(f, f->in);
        if (st != TF_OK)
            return st;
    }
    tfx_hc_req_set_timeout(req, timeout);
    if (c->max_body > 0)
        tfx_hc_req_set_max_body(req, c->max_body > SIZE_MAX ? SIZE_MAX : (size_t)c->max_body);
    if (c->progress)
        tfx_hc_req_set_progress(req, progress_tramp, c);
    return TF_OK;
}

/* The full URL of the request, recording TF_EURL when it is not an http(s) URL. */
static tf_status_t build_url(tf_fetch_t *f, const char *url, long wait_ms)
{
    const char *path = f->op == OP_LIST ? "/v1/tensors" : f->op == OP_INFO ? "/v1/info" : NULL;
    char query[40];
    if (wait_ms > 0)
        snprintf(query, sizeof(query), "wait=%ld", wait_ms);
    tfx_hc_status_t xst = tfx_hc_url_build(url, path, wait_ms > 0 ? query : NULL, &f->url);
    if (xst == TFX_HC_OK)
        return TF_OK;
    if (xst == TFX_HC_ENOMEM)
        return rfail(&f->result, TF_ENOMEM, NULL);
    return rfail(&f->result, TF_EURL, "bad URL: %s", url ? url : "(null)");
}

/* ---- decoding replies ------------------------------------------------------------------- */

/* The last path segment of url (without query or fragment) into buf; "" if none. */
static void last_segment(const char *url, char *buf, size_t size)
{
    const char *end = url + strcspn(url, "?#");
    const char *p = end;
    while (p > url && p[-1] != '/')
        p--;
    size_t n = (size_t)(end - p);
    if (n >= size)
        n = size - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
}

static int media_is(const char *content_type, const char *mime)
{
    size_t n = strlen(mime);
    return strncasecmp(content_type, mime, n) == 0 &&
           (content_type[n] == '\0' || content_type[n] == ';' || content_type[n] == ' ');
}

/* A raw single-tensor response: the body is the tensor, described by the Tfetch-Dtype and
 * Tfetch-Shape headers; the tensor is named after the URL's last path segment. */
static tf_status_t decode_raw(tf_result_t *res, const char *url, const tfx_hc_resp_t *r,
                              tfp_doc_t **out)
{
    tfp_dtype_t dt;
    int rank = 0;
    uint64_t shape[TFP_MAX_RANK];
    tfp_err_t err;
    char name[TFP_MAX_TENSOR_NAME + 1];

    if (tfp_raw_check(r->dtype, r->shape, r->body_len, &dt, &rank, shape, &err) != TFP_OK)
        return rfail(res, TF_EPROTO, "bad raw response: %s", err.msg);
    last_segment(url, name, sizeof(name));
    if (!tfp_name_valid(name))
        snprintf(name, sizeof(name), "tensor");
    tfp_doc_t *d = tfp_doc_new();
    if (!d)
        return rfail(res, TF_ENOMEM, NULL);
    if (tfp_doc_add(d, name, dt, rank, shape, r->body, r->body_len, &err) != TFP_OK) {
        tfp_doc_free(d);
        return rfail(res, TF_EPROTO, "bad raw response: %s", err.msg);
    }
    *out = d;
    return TF_OK;
}

/* Decodes the response in req into f->doc, which takes over the body buffer. The
 * Content-Type decides when it names safetensors or a raw tensor; else the request's
 * format does. */
static tf_status_t decode_doc(tf_fetch_t *f, tfx_hc_req_t *req)
{
    const tfx_hc_resp_t *r = tfx_hc_req_response(req);
    tfp_doc_t *d = NULL;
    tfp_err_t err;
    tf_status_t st;

    if (!r->body || r->body_len == 0)
        return rfail(&f->result, TF_EPROTO, "empty response body");
    if (media_is(r->content_type, MIME_RAW) && r->dtype[0]) {
        if ((st = decode_raw(&f->result, f->url, r, &d)) != TF_OK)
            return st;
    } else if (f->format == TF_FORMAT_SHUMAI && !media_is(r->content_type, MIME_SAFETENSORS)) {
        if ((st = shumai_decode(&f->result, r->body, r->body_len, &d)) != TF_OK)
            return st;
    } else if (tfp_st_decode(r->body, r->body_len, NULL, &d, &err) != TFP_OK) {
        return rfail(&f->result, TF_EPROTO, "bad safetensors response: %s", err.msg);
    }
    /* The decoded tensors point into the body: hand the buffer to the document. */
    uint8_t *body = tfx_hc_req_take_body(req, NULL);
    st = tfi_doc_wrap(d, body, &f->doc);
    if (st != TF_OK) {
        tfp_doc_free(d);
        free(body);
        return rfail(&f->result, st, NULL);
    }
    return TF_OK;
}

/* 1 if a Tfetch-Upgrade value lists ucx (a comma-separated list of tokens). */
static int offers_ucx(const char *v)
{
    for (const char *p = v; *p;) {
        p += strspn(p, " \t,");
        size_t n = strcspn(p, " \t,");
        if (n == 3 && strncasecmp(p, "ucx", 3) == 0)
            return 1;
        p += n;
    }
    return 0;
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* What is left of f's time limit in ms (at least 1), or 0 when it has none. */
static long remaining_ms(const tf_fetch_t *f)
{
    if (f->total_ms <= 0)
        return 0;
    long left = f->total_ms - (long)(seconds_since(&f->t0) * 1000.0);
    return left > 0 ? left : 1;
}

/* Records a completed request in f->result and decodes its reply: TF_OK for a 2xx response
 * (whose body becomes f->doc or f->text), else the transport's or the server's error. */
static void finish(tf_fetch_t *f, tfx_hc_req_t *req, tfx_hc_status_t done)
{
    const tfx_hc_resp_t *r = tfx_hc_req_response(req);
    tf_result_t *res = &f->result;

    res->http_status = (int)r->status;
    if (f->origin && r->status > 0)
        f->origin->offered = offers_ucx(r->upgrade);
    if (r->transport[0])
        snprintf(res->transport, sizeof(res->transport), "%s", r->transport);
    if (r->request_id[0])
        snprintf(res->request_id, sizeof(res->request_id), "%s", r->request_id);
    res->bytes_sent = r->bytes_sent;
    res->bytes_received = r->body_len;
    res->seconds = f->tried_ucx ? seconds_since(&f->t0) : r->seconds;

    if (done != TFX_HC_OK) {
        const char *why = tfx_hc_req_error(req);
        rfail(res, from_transport(done), "%s", why[0] ? why : tfx_hc_strerror(done));
        return;
    }
    if (r->status < 200 || r->status > 299) {
        http_error(res, r);
        return;
    }
    res->status = TF_OK;
    if (f->op == TF_OP_GET || f->op == TF_OP_EXCHANGE) {
        decode_doc(f, req);
    } else if (f->op == OP_LIST || f->op == OP_INFO) {
        f->text = (char *)tfx_hc_req_take_body(req, &f->text_len);
        if (!f->text && !(f->text = strdup("")))
            rfail(res, TF_ENOMEM, NULL);
    }
}

/* ---- handles ------------------------------------------------------------------------------ */

static void link_fetch(tf_client_t *c, tf_fetch_t *f)
{
    f->prev = NULL;
    f->next = c->live;
    if (c->live)
        c->live->prev = f;
    c->live = f;
}

static void unlink_fetch(tf_client_t *c, tf_fetch_t *f)
{
    if (f->prev)
        f->prev->next = f->next;
    else
        c->live = f->next;
    if (f->next)
        f->next->prev = f->prev;
    f->prev = f->next = NULL;
}

static void destroy(tf_fetch_t *f)
{
    if (f->c)
        unlink_fetch(f->c, f);
    tf_doc_free(f->doc);
    free(f->text);
    free(f->url);
    free(f->hdr);
    free(f);
}

/* Frees f once nobody needs it: completed, not held by a frame, and not (or no longer)
 * held by the caller. */
static void settle(tf_fetch_t *f)
{
    if (f->done && f->holds == 0 && (!f->held || f->freeing))
        destroy(f);
}

/* Completes f, whose outcome is recorded: runs its callback, frees what it no longer needs. */
static void complete_fetch(tf_client_t *c, tf_fetch_t *f)
{
    free(f->hdr);
    f->hdr = NULL;
    f->done = 1;
    c->npending--;
    if (f->cb) {
        tf_doc_t *doc = f->doc;
        f->doc = NULL;
        f->holds++;
        c->in_cb++;
        f->cb(f, f->result.status, doc, &f->result, f->ud);
        c->in_cb--;
        f->holds--;
    }
    settle(f);
}

/* The HTTP engine's completion: record, decode, give the engine request back, complete. */
static void on_req_done(tfx_hc_req_t *req, tfx_hc_status_t xst, void *ud)
{
    tf_fetch_t *f = ud;
    tf_client_t *c = f->c;

    finish(f, req, xst);
    f->req = NULL;
    release_req(c, req);
    complete_fetch(c, f);
}

/* Starts f over HTTP (timeout 0: none). On failure f->result says why and f holds no engine
 * request. */
static tf_status_t start_http(tf_client_t *c, tf_fetch_t *f, long timeout)
{
    tf_status_t st;
    snprintf(f->result.transport, sizeof(f->result.transport), "http");
    if (!(f->req = acquire_req(c)))
        return rfail(&f->result, TF_ENOMEM, NULL);
    if ((st = prepare(f, timeout)) != TF_OK)
        goto release;
    tfx_hc_status_t xst = tfx_hc_start(c->hc, f->req, on_req_done, f);
    if (xst != TFX_HC_OK) {
        st = rfail(&f->result, from_transport(xst), "cannot start the request: %s",
                   tfx_hc_strerror(xst));
        goto release;
    }
    return TF_OK;

release:
    release_req(c, f->req);
    f->req = NULL;
    return st;
}

/* ---- origins and the upgrade to UCX ------------------------------------------------------ */
/* Every request notes its origin (scheme://host:port); every HTTP response from it says
 * whether its server offers UCX (Tfetch-Upgrade). Under policy auto a request UCX can carry
 * negotiates once the server offered it; under policy ucx at once. Negotiating is
 * synchronous, at the start of a request and never inside a callback: POST /v1/upgrade on a
 * private engine (so no other request's callback runs meanwhile), then a UCX connection
 * presenting the one-time token, both with short timeouts. A failure is remembered with its
 * reason and a backoff; a connection is kept for the client's life unless it fails. */

#ifdef HAVE_UCX
static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}
#endif

static origin_t *origin_find(const tf_client_t *c, const char *key)
{
    for (origin_t *o = c->origins; o; o = o->next)
        if (strcmp(o->key, key) == 0)
            return o;
    return NULL;
}

/* The client's record of an origin, made on first sight; NULL when out of memory. */
static origin_t *origin_get(tf_client_t *c, const char *key)
{
    origin_t *o = origin_find(c, key);
    if (o)
        return o;
    if (!(o = calloc(1, sizeof(*o))))
        return NULL;
    if (!(o->key = strdup(key))) {
        free(o);
        return NULL;
    }
    o->offered = -1;
    o->next = c->origins;
    c->origins = o;
    return o;
}

/* Notes f's origin and, when UCX could carry f, the tensor or route it names (f->name).
 * Returns why UCX cannot carry f, or NULL. */
static const char *analyse_url(tf_client_t *c, tf_fetch_t *f, const char *url)
{
    char *key = NULL, *path = NULL;
    int query = 0;
    const char *why = NULL;

    if (tfx_hc_url_split(url, &key, &path, &query) != TFX_HC_OK)
        return "out of memory";
    f->origin = origin_get(c, key);
    if (f->op == OP_LIST || f->op == OP_INFO) {
        why = "listings and server info travel over HTTP";
    } else if (f->format != TF_FORMAT_SAFETENSORS) {
        why = "the Shumai format travels over HTTP";
    } else if (query) {
        why = "URLs with a query travel over HTTP";
    } else {
        const char *prefix = f->op == TF_OP_EXCHANGE ? "/v1/call/" : "/v1/tensors/";
        size_t n = strlen(prefix);
        if (strncmp(path, prefix, n) == 0 && tfp_name_valid(path + n) &&
            strlen(path + n) < sizeof(f->name))
            snprintf(f->name, sizeof(f->name), "%s", path + n);
        else
            why = f->op == TF_OP_EXCHANGE
                      ? "only exchanges with /v1/call/ROUTE travel over UCX"
                      : "only requests to /v1/tensors/NAME travel over UCX";
    }
    if (!why && !f->origin)
        why = "out of memory";
    free(key);
    free(path);
    return why;
}

/* UCX cannot carry f (for the reason why): under policy auto it goes over HTTP, the reason
 * recorded as its fallback; under policy ucx it fails (TF_ECONNECT). */
static tf_status_t no_ucx(tf_fetch_t *f, const char *why)
{
    if (f->policy == TF_TRANSPORT_UCX)
        return rfail(&f->result, TF_ECONNECT, "no UCX connection (transport policy ucx): %s",
                     why);
    snprintf(f->result.fallback, sizeof(f->result.fallback), "%s", why);
    return TF_OK;
}

#ifdef HAVE_UCX
/* From the UCX progress thread: a completion is queued; end the driving thread's wait. */
static void ucx_wake(void *arg)
{
    tfx_hc_wakeup(arg);
}

/* Records why o has no UCX connection, and when to try again (the backoff doubles). */
static void up_failed(origin_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void up_failed(origin_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->why, sizeof(o->why), fmt, ap);
    va_end(ap);
    if (o->backoff_ms <= 0)
        o->backoff_ms = BACKOFF_MIN_MS;
    else if ((o->backoff_ms *= 2) > BACKOFF_MAX_MS)
        o->backoff_ms = BACKOFF_MAX_MS;
    o->retry_at = now_ms() + (uint64_t)o->backoff_ms;
}

/* Closes o's connection: its unfinished requests complete with a transport failure. */
static void drop_conn(origin_t *o)
{
    if (o->conn) {
        tfx_ucxc_conn_close(o->conn);
        o->conn = NULL;
        o->transport[0] = '\0';
    }
}

static void up_done(tfx_hc_req_t *req, tfx_hc_status_t st, void *ud)
{
    (void)req;
    *(tfx_hc_status_t *)ud = st;
}

/* Records what a non-200 answer to POST /v1/upgrade says. */
static void up_http_error(origin_t *o, const tfx_hc_resp_t *r)
{
    tfp_status_t code;
    char msg[128] = "";
    if (r->body && r->body_len)
        tfp_parse_error_body((const char *)r->body, r->body_len, &code, msg, sizeof(msg));
    if (r->status == 404 || r->status == 405)
        up_failed(o, "the server does not offer UCX (POST /v1/upgrade: HTTP %ld)", r->status);
    else
        up_failed(o, "the upgrade failed: HTTP %ld%s%s", r->status, msg[0] ? ": " : "", msg);
}

/* POST origin/v1/upgrade: 0 and *resp filled when the server offers a connection, else -1
 * with o->why set. */
static int ask_upgrade(tf_client_t *c, origin_t *o, tf_transport_t policy, tfp_up_resp_t *resp)
{
    tfp_up_req_t q = {.transports = TFP_UP_T_UCX, .host = c->host,
                      .policy = policy == TF_TRANSPORT_UCX ? TFP_UP_POLICY_UCX
                                                           : TFP_UP_POLICY_AUTO};
    tfx_hc_status_t done = TFX_HC_EAGAIN;
    tfx_hc_t *hc = NULL;
    tfx_hc_req_t *req = NULL;
    char *json = NULL, *url = NULL;
    size_t len = 0;
    tfp_err_t err;
    int rc = -1;

    if (tfp_up_req_build(&q, &json, &len, &err) != TFP_OK) {
        up_failed(o, "cannot ask for an upgrade: %s", err.msg);
        return -1;
    }
    size_t ulen = strlen(o->key) + sizeof("/v1/upgrade");
    if (!(url = malloc(ulen)) || tfx_hc_new(&hc) != TFX_HC_OK ||
        tfx_hc_req_new(&req) != TFX_HC_OK) {
        up_failed(o, "out of memory");
        goto out;
    }
    snprintf(url, ulen, "%s/v1/upgrade", o->key);
    if (tfx_hc_req_set_method(req, "POST") != TFX_HC_OK ||
        tfx_hc_req_set_url(req, url) != TFX_HC_OK ||
        tfx_hc_req_add_header(req, "Content-Type", MIME_JSON) != TFX_HC_OK ||
        tfx_hc_req_add_header(req, "Accept", MIME_JSON) != TFX_HC_OK ||
        tfx_hc_req_add_body(req, json, len) != TFX_HC_OK) {
        up_failed(o, "out of memory");
        goto out;
    }
    tfx_hc_req_set_timeout(req, UPGRADE_TIMEOUT_MS);
    tfx_hc_req_set_max_body(req, TFP_UP_MAX_RESP_JSON);
    if (tfx_hc_start(hc, req, up_done, &done) != TFX_HC_OK) {
        up_failed(o, "cannot ask for an upgrade: out of memory");
        goto out;
    }
    tfx_hc_drive(hc, req, -1);          /* the request's own timeout bounds it */
    const tfx_hc_resp_t *r = tfx_hc_req_response(req);
    if (r->status > 0)
        o->offered = offers_ucx(r->upgrade);
    if (done != TFX_HC_OK) {
        const char *why = tfx_hc_req_error(req);
        up_failed(o, "POST /v1/upgrade failed: %s", why[0] ? why : tfx_hc_strerror(done));
    } else if (r->status != 200) {
        up_http_error(o, r);
    } else if (tfp_up_resp_parse((const char *)r->body, r->body_len, resp, &err) != TFP_OK) {
        up_failed(o, "bad answer to POST /v1/upgrade: %s", err.msg);
    } else if (!resp->upgraded) {
        o->offered = 0;
        up_failed(o, "the server does not offer UCX: %s", resp->reason);
    } else {
        rc = 0;
    }
out:
    tfx_hc_req_free(req);
    tfx_hc_free(hc);
    free(url);
    free(json);
    return rc;
}

/* Negotiates and connects o: 0 with o->conn, or -1 with o->why (and a backoff). */
static int upgrade(tf_client_t *c, origin_t *o, tf_transport_t policy)
{
    tfp_up_resp_t resp;
    tfp_err_t err;
    char ident[TFP_UP_MAX_IDENT + 1];
    char why[256] = "";
    int rc = -1;

    if (!c->have_host) {
        if (tfx_hostid_get(&c->host, &err) != TFP_OK) {
            up_failed(o, "cannot tell this host's identity: %s", err.msg);
            return -1;
        }
        c->have_host = 1;
    }
    memset(&resp, 0, sizeof(resp));
    if (ask_upgrade(c, o, policy, &resp) != 0)
        return -1;
    if (!c->ucx && !(c->ucx = tfx_ucxc_new(ucx_wake, c->hc, &err))) {
        snprintf(c->ucx_dead, sizeof(c->ucx_dead), "UCX does not start in this process: %.120s",
                 err.msg);
        up_failed(o, "%s", c->ucx_dead);
        goto clear;
    }
    if (tfp_up_ident_format(&c->host, ident, sizeof(ident), &err) != TFP_OK) {
        up_failed(o, "cannot tell this host's identity: %s", err.msg);
        goto clear;
    }
    tfx_ucxc_conn_t *conn = NULL;
    tfp_status_t st = tfx_ucxc_connect(c->ucx, resp.worker_address, resp.worker_address_len,
                                       resp.same_host, resp.token, ident,
                                       UCX_CONNECT_TIMEOUT_MS, &conn, why, sizeof(why));
    if (st != TFP_OK) {
        up_failed(o, "cannot connect over UCX: %s", why[0] ? why : tfp_status_text(st));
        goto clear;
    }
    if (resp.same_host)
        tfx_ucxc_conn_watch_pid(conn, (long)resp.server_pid);
    o->conn = conn;
    o->conn_gen++;
    snprintf(o->transport, sizeof(o->transport), "%s", tfx_ucxc_conn_transport(conn));
    o->why[0] = '\0';
    o->backoff_ms = 0;
    o->retry_at = 0;
    rc = 0;
clear:
    tfp_up_resp_clear(&resp);
    return rc;
}
#endif

/* Negotiates for the origins that requests started inside callbacks found unconnected.
 * Called when the client is driven, outside callbacks. */
static void upgrade_wanted(tf_client_t *c)
{
#ifdef HAVE_UCX
    if (!c->want_upgrades || c->in_cb || c->in_engine || c->closing)
        return;
    c->want_upgrades = 0;
    for (origin_t *o = c->origins; o; o = o->next) {
        if (!o->want_upgrade)
            continue;
        o->want_upgrade = 0;
        if (!o->conn && !c->ucx_dead[0] && !(o->retry_at && now_ms() < o->retry_at))
            upgrade(c, o, o->want_policy);
    }
#else
    (void)c;
#endif
}

/* Decides how f travels: *via_ucx = 1 over its origin's UCX connection (made now when that
 * is needed and allowed), else 0 with the reason in f->result.fallback. Under policy ucx,
 * what would fall back fails instead: the status is returned and recorded in f->result. */
static tf_status_t choose(tf_client_t *c, tf_fetch_t *f, const char *url, int *via_ucx)
{
    *via_ucx = 0;
    const char *why = analyse_url(c, f, url);
    if (f->policy == TF_TRANSPORT_HTTP)
        return TF_OK;
    if (why) {
        /* Not a fallback: UCX never carries these, whatever the policy. */
        snprintf(f->result.fallback, sizeof(f->result.fallback), "%s", why);
        return TF_OK;
    }
#ifndef HAVE_UCX
    return no_ucx(f, "this libtfetch was built without UCX");
#else
    origin_t *o = f->origin;
    int strict = f->policy == TF_TRANSPORT_UCX;
    if (o->conn && tfx_ucxc_conn_broken(o->conn)) {
        drop_conn(o);
        up_failed(o, "the UCX connection failed");
    }
    if (o->conn) {
        *via_ucx = 1;
        return TF_OK;
    }
    if (c->ucx_dead[0])
        return no_ucx(f, c->ucx_dead);
    if (!strict && strncmp(o->key, "https:", 6) == 0)
        return no_ucx(f, "the server is reached over https, and UCX is not encrypted");
    if (!strict && o->offered < 0)
        return no_ucx(f, "the server has not offered UCX yet (a first request goes over HTTP)");
    if (!strict && o->offered == 0)
        return no_ucx(f, strncmp(o->why, "the server does not offer UCX", 29) == 0
                             ? o->why : "the server does not offer UCX");
    if (o->retry_at && now_ms() < o->retry_at)
        return no_ucx(f, o->why);
    if (c->in_cb || c->in_engine) {
        /* Negotiating blocks: not inside a callback. The client does it when next driven. */
        if (!o->want_upgrade) {
            o->want_upgrade = 1;
            o->want_policy = f->policy;
            c->want_upgrades = 1;
        }
        return no_ucx(f, "the UCX connection is not made yet (a request started inside a "
                         "callback does not wait for it)");
    }
    if (upgrade(c, o, f->policy) != 0)
        return no_ucx(f, o->why);
    *via_ucx = 1;
    return TF_OK;
#endif
}

tf_status_t tf_client_upgrade(tf_client_t *c, const char *url)
{
    char *key = NULL, *path = NULL;
    int query;
    if (!c)
        return TF_EINVAL;
    if (c->in_cb || c->in_engine || c->closing)
        return refuse(c, OP_UPGRADE, TF_EINVAL,
                      "tf_client_upgrade is not allowed inside a callback");
    tfx_hc_status_t xst = tfx_hc_url_split(url, &key, &path, &query);
    if (xst != TFX_HC_OK)
        return refuse(c, OP_UPGRADE, xst == TFX_HC_ENOMEM ? TF_ENOMEM : TF_EURL,
                      xst == TFX_HC_ENOMEM ? NULL : "bad URL");
    origin_t *o = origin_get(c, key);
    free(key);
    free(path);
    if (!o)
        return refuse(c, OP_UPGRADE, TF_ENOMEM, NULL);
#ifndef HAVE_UCX
    return refuse(c, OP_UPGRADE, TF_ECONNECT, "this libtfetch was built without UCX");
#else
    if (o->conn && tfx_ucxc_conn_broken(o->conn)) {
        drop_conn(o);
        up_failed(o, "the UCX connection failed");
    }
    new_result(c, &c->last, OP_UPGRADE, NULL);
    if (!o->conn) {
        const char *why = c->ucx_dead[0]                           ? c->ucx_dead
                          : o->retry_at && now_ms() < o->retry_at ? o->why
                          : upgrade(c, o, TF_TRANSPORT_UCX) != 0  ? o->why
                                                                  : NULL;
        if (why)
            return rfail(&c->last, TF_ECONNECT, "%s", why);
    }
    c->last.status = TF_OK;
    snprintf(c->last.transport, sizeof(c->last.transport), "%s", o->transport);
    return TF_OK;
#endif
}

tf_status_t tf_client_transport_info(tf_client_t *c, const char *url, tf_transport_info_t *out)
{
    char *key = NULL, *path = NULL;
    int query;
    if (!c || !out)
        return TF_EINVAL;
    tfx_hc_status_t xst = tfx_hc_url_split(url, &key, &path, &query);
    if (xst != TFX_HC_OK)
        return xst == TFX_HC_ENOMEM ? TF_ENOMEM : TF_EURL;
    const origin_t *o = origin_find(c, key);
    free(key);
    free(path);
    memset(out, 0, sizeof(*out));
    snprintf(out->transport, sizeof(out->transport), "http");
    out->offered = o ? o->offered : -1;
#ifdef HAVE_UCX
    if (o && o->conn && !tfx_ucxc_conn_broken(o->conn)) {
        snprintf(out->transport, sizeof(out->transport), "%s", o->transport);
        return TF_OK;
    }
    uint64_t now = now_ms();
    if (o && o->retry_at > now)
        out->retry_ms = (long)(o->retry_at - now);
    if (c->ucx_dead[0])
        snprintf(out->reason, sizeof(out->reason), "%s", c->ucx_dead);
    else if (o && o->conn)
        snprintf(out->reason, sizeof(out->reason), "the UCX connection failed");
    else if (o && o->why[0])
        snprintf(out->reason, sizeof(out->reason), "%s", o->why);
    else if (o && o->offered == 0)
        snprintf(out->reason, sizeof(out->reason), "the server does not offer UCX");
#else
    snprintf(out->reason, sizeof(out->reason), "this libtfetch was built without UCX");
#endif
    return TF_OK;
}

/* ---- requests over UCX --------------------------------------------------------------------- */
/* A request UCX can carry is one active message: a tfp_uf frame (op, request id, user, name,
 * wait) and the document as its encoded safetensors header plus each tensor's bytes, lent to
 * the transport until it completes. Completions come back through tfx_ucxc_next, drained by
 * the driving thread after every wait of the engine (the progress thread wakes it), and are
 * recorded as HTTP's would be: the server's status, its HTTP status (the frame's http), its
 * message, the reply decoded in place. A transport failure drops the connection (with a
 * backoff) and, under policy auto, sends the request again over HTTP with the same id. */

static size_t ucx_running(const tf_client_t *c)
{
#ifdef HAVE_UCX
    return c->nucx;
#else
    (void)c;
    return 0;
#endif
}

#ifdef HAVE_UCX
static tfp_uf_op_t frame_op(int op)
{
    switch (op) {
    case TF_OP_PUT: return TFP_UF_PUT;
    case TF_OP_DELETE: return TFP_UF_DELETE;
    case TF_OP_EXCHANGE: return TFP_UF_CALL;
    default: return TFP_UF_GET;
    }
}

static void free_segs(tf_fetch_t *f)
{
    free(f->segs);
    free(f->lens);
    f->segs = NULL;
    f->lens = NULL;
}

/* Sends f over its origin's connection. On failure f->result says why. */
static tf_status_t start_ucx(tf_client_t *c, tf_fetch_t *f)
{
    origin_t *o = f->origin;
    tfp_uf_hdr_t h;
    size_t nsegs = 0;

    tfp_uf_init(&h, frame_op(f->op), 0);
    snprintf(h.request_id, sizeof(h.request_id), "%s", f->result.request_id);
    if (c->user)
        snprintf(h.user, sizeof(h.user), "%s", c->user);
    snprintf(h.name, sizeof(h.name), "%s", f->name);
    if (f->op == TF_OP_GET && f->wait_ms > 0)
        h.wait_ms = f->wait_ms > (long)UINT32_MAX ? UINT32_MAX : (uint32_t)f->wait_ms;
    if (f->in) {
        size_t hlen = 0, n = tf_doc_count(f->in) + 1;
        tf_status_t st = tf_doc_encode_header(f->in, &f->hdr, &hlen);
        if (st != TF_OK)
            return rfail(&f->result, st, "cannot encode the document: %s", tf_strerror(st));
        f->segs = calloc(n, sizeof(*f->segs));
        f->lens = calloc(n, sizeof(*f->lens));
        if (!f->segs || !f->lens) {
            free_segs(f);
            return rfail(&f->result, TF_ENOMEM, NULL);
        }
        f->segs[nsegs] = f->hdr;
        f->lens[nsegs++] = hlen;
        h.body_len = hlen;
        for (size_t i = 0; i + 1 < n; i++) {
            const tf_tensor_t *t = tf_doc_at(f->in, i);
            if (t->nbytes) {
                f->segs[nsegs] = t->data;
                f->lens[nsegs++] = t->nbytes;
                h.body_len += t->nbytes;
            }
        }
    }
    tfp_status_t st = tfx_ucxc_start(o->conn, &h, f->segs, f->lens, nsegs, remaining_ms(f), f,
                                     &f->ureq);
    if (st != TFP_OK) {
        free_segs(f);
        f->ureq = NULL;
        return rfail(&f->result, TF_EIO, "cannot send over UCX (%s): %s", o->transport,
                     tfp_status_text(st));
    }
    f->conn_gen = o->conn_gen;
    f->tried_ucx = 1;
    snprintf(f->result.transport, sizeof(f->result.transport), "%s", o->transport);
    c->nucx++;
    return TF_OK;
}

/* 1 if a transport failure's text says it ran out of time. */
static int is_timeout(const char *why)
{
    return strstr(why, "timed out") || strstr(why, "timeout") || strstr(why, "Timeout") ||
           strstr(why, "no UCX reply within");
}

/* The transport failed f (why): drop the connection it went over, then retry over HTTP
 * (policy auto, time permitting) or fail. */
static void ucx_failed(tf_client_t *c, tf_fetch_t *f, const char *why)
{
    origin_t *o = f->origin;
    tf_result_t *res = &f->result;
    if (o && o->conn && o->conn_gen == f->conn_gen) {
        drop_conn(o);
        up_failed(o, "the UCX connection failed: %s", why);
    }
    if (f->policy != TF_TRANSPORT_AUTO) {
        rfail(res, is_timeout(why) ? TF_ETIMEDOUT : TF_EIO,
              "over %s: %s (transport policy ucx: not retried over HTTP)", res->transport, why);
        complete_fetch(c, f);
        return;
    }
    long timeout = 0;
    if (f->total_ms > 0) {
        timeout = f->total_ms - (long)(seconds_since(&f->t0) * 1000.0);
        if (timeout <= 0) {
            rfail(res, TF_ETIMEDOUT, "timed out over %s: %s", res->transport, why);
            complete_fetch(c, f);
            return;
        }
    }
    snprintf(res->fallback, sizeof(res->fallback), "UCX failed (%.120s); retried over HTTP",
             why);
    if (start_http(c, f, timeout) != TF_OK)
        complete_fetch(c, f);
}

/* Records a UCX reply in f as an HTTP response would be, decoding a document. */
static void ucx_reply(tf_client_t *c, tf_fetch_t *f, const tfx_ucxc_result_t *u,
                      uint8_t **body)
{
    tf_result_t *res = &f->result;
    tf_status_t st = tfi_from_proto(u->reply.status);
    tfp_err_t err;
    tfp_doc_t *d = NULL;

    res->http_status = (int)u->reply.http;
    if (u->reply.request_id[0])
        snprintf(res->request_id, sizeof(res->request_id), "%s", u->reply.request_id);
    res->bytes_received = u->body_len;
    if (st != TF_OK) {
        rfail(res, st, "%s", u->reply.msg[0] ? u->reply.msg : tf_strerror(st));
        return;
    }
    if (res->http_status < 200 || res->http_status > 299) {
        /* An answer passed on as it was given (a worker's error): its body says what. */
        error_body(res, res->http_status, *body, u->body_len);
        return;
    }
    if (c->max_body > 0 && u->body_len > c->max_body) {
        rfail(res, TF_ETOOBIG, "the response body (%zu bytes) exceeds the cap of %" PRIu64
              " bytes", u->body_len, c->max_body);
        return;
    }
    res->status = TF_OK;
    if (f->op != TF_OP_GET && f->op != TF_OP_EXCHANGE)
        return;
    if (!*body || u->body_len == 0) {
        rfail(res, TF_EPROTO, "empty response body");
    } else if (tfp_st_decode(*body, u->body_len, NULL, &d, &err) != TFP_OK) {
        rfail(res, TF_EPROTO, "bad safetensors response: %s", err.msg);
    } else if ((st = tfi_doc_wrap(d, *body, &f->doc)) != TF_OK) {
        tfp_doc_free(d);
        rfail(res, st, NULL);
    } else {
        *body = NULL;                   /* the document's storage now */
    }
}

/* A UCX request of f completed. */
static void ucx_done(tf_client_t *c, tf_fetch_t *f, tfx_ucxc_req_t *ur)
{
    tfx_ucxc_result_t *u = tfx_ucxc_req_result(ur);
    uint8_t *body = u->body;
    u->body = NULL;
    f->ureq = NULL;
    c->nucx--;
    free_segs(f);
    f->result.bytes_sent = u->bytes_sent;
    f->result.seconds = seconds_since(&f->t0);
    if (f->canceled || c->closing) {
        rfail(&f->result, TF_ECANCELED, "request canceled");
    } else if (u->transport_status != TFP_OK) {
        char why[sizeof(u->why)];
        snprintf(why, sizeof(why), "%s",
                 u->why[0] ? u->why : tfp_status_text(u->transport_status));
        free(body);
        tfx_ucxc_req_free(ur);
        ucx_failed(c, f, why);
        return;
    } else {
        ucx_reply(c, f, u, &body);
    }
    free(body);
    tfx_ucxc_req_free(ur);
    complete_fetch(c, f);
}
#endif

/* Cancels f if it is in flight over UCX: it completes, with TF_ECANCELED, once the
 * transport gives its buffers back. 1 if it was, 0 if f is not over UCX. */
static int ucx_cancel(tf_fetch_t *f)
{
#ifdef HAVE_UCX
    if (f->ureq) {
        f->canceled = 1;
        return 1;
    }
#else
    (void)f;
#endif
    return 0;
}

/* Completes the requests UCX finished (their callbacks run here). */
static void ucx_drain(tf_client_t *c)
{
#ifdef HAVE_UCX
    tfx_ucxc_req_t *ur;
    while (c->ucx && (ur = tfx_ucxc_next(c->ucx)))
        ucx_done(c, tfx_ucxc_req_user_data(ur), ur);
#else
    (void)c;
#endif
}

/* tf_client_free: closes every UCX connection, completes their requests (canceled), stops
 * the transport. */
static void close_ucx(tf_client_t *c)
{
#ifdef HAVE_UCX
    if (!c->ucx)
        return;
    for (origin_t *o = c->origins; o; o = o->next)
        drop_conn(o);
    uint64_t t0 = now_ms();
    for (;;) {
        ucx_drain(c);
        if (c->nucx == 0 || now_ms() - t0 >= (uint64_t)CLOSE_DRAIN_MS)
            break;
        tfx_hc_wait(c->hc, 100);
    }
    tfx_ucxc_free(c->ucx);
    c->ucx = NULL;
    /* What the transport never gave back: stopped now, it no longer reads the buffers. A
     * callback may free other handles, so the search starts over after each one. */
    while (c->nucx > 0) {
        tf_fetch_t *f = c->live;
        while (f && !f->ureq)
            f = f->next;
        if (!f)
            break;
        f->ureq = NULL;
        c->nucx--;
        free_segs(f);
        rfail(&f->result, TF_ECANCELED, "request canceled (the client was freed)");
        f->result.seconds = seconds_since(&f->t0);
        complete_fetch(c, f);
    }
#else
    (void)c;
#endif
}

/* Checks a request description before anything is allocated; failures land in res. */
static tf_status_t check_request(const tf_client_t *c, const tf_request_t *rq, int op,
                                 tf_format_t format, tf_transport_t policy, tf_result_t *res)
{
    if (c->closing)
        return rfail(res, TF_EINVAL, "the client is being freed");
    if (c->in_engine)
        return rfail(res, TF_EINVAL, "no libtfetch calls inside a progress callback");
    if (!format_valid(format))
        return rfail(res, TF_EINVAL, "unknown format %d", (int)format);
    if (!transport_valid(policy))
        return rfail(res, TF_EINVAL, "unknown transport %d", (int)policy);
    if (rq->request_id && (!tfp_request_id_valid(rq->request_id) ||
                           strlen(rq->request_id) > TFP_MAX_REQUEST_ID))
        return rfail(res, TF_EINVAL, "bad request id (expected [A-Za-z0-9._:-]{1,128})");
    int needs_doc = op == TF_OP_PUT || op == TF_OP_EXCHANGE;
    if (needs_doc && !rq->in)
        return rfail(res, TF_EINVAL, "%s needs a document to send", op_name(op));
    if (!needs_doc && rq->in)
        return rfail(res, TF_EINVAL, "%s sends no document", op_name(op));
    if (rq->wait_ms < 0 || (rq->wait_ms > 0 && op != TF_OP_GET))
        return rfail(res, TF_EINVAL, "wait_ms must be >= 0, and applies to get only");
    if (format == TF_FORMAT_SHUMAI && op == TF_OP_PUT)
        return rfail(res, TF_EINVAL,
                     "the shumai format has no put (exchange, or use the safetensors format)");
    if (format == TF_FORMAT_SHUMAI && op == TF_OP_EXCHANGE)
        return shumai_check(res, rq->in);
    return TF_OK;
}

/* The whole request's time limit in ms, a long-poll's wait included; 0: none. */
static long request_timeout(const tf_client_t *c, const tf_request_t *rq)
{
    long t = rq->timeout_ms == 0 ? c->timeout_ms : rq->timeout_ms > 0 ? rq->timeout_ms : 0;
    if (t > 0 && rq->wait_ms > 0)
        t = rq->wait_ms > LONG_MAX - t ? LONG_MAX : t + rq->wait_ms;
    return t;
}

/* tf_fetch_start for any operation, the internal ones included. */
static tf_status_t start_fetch(tf_client_t *c, const tf_request_t *rq, int op, tf_fetch_cb cb,
                               void *ud, tf_fetch_t **out)
{
    tf_result_t res;
    tf_fetch_t *f;
    tf_status_t st;
    tf_format_t format = rq->format != TF_FORMAT_DEFAULT ? rq->format : c->format;
    tf_transport_t policy = rq->transport != TF_TRANSPORT_DEFAULT ? rq->transport : c->transport;
    int via_ucx = 0;

    new_result(c, &res, op, rq->request_id);
    if ((st = check_request(c, rq, op, format, policy, &res)) != TF_OK)
        goto refuse;
    if (!(f = calloc(1, sizeof(*f)))) {
        st = rfail(&res, TF_ENOMEM, NULL);
        goto refuse;
    }
    f->c = c;
    f->cb = cb;
    f->ud = ud;
    f->op = op;
    f->format = format;
    f->policy = policy;
    f->held = out != NULL;
    f->result = res;
    f->in = rq->in;
    f->wait_ms = rq->wait_ms;
    f->total_ms = request_timeout(c, rq);
    clock_gettime(CLOCK_MONOTONIC, &f->t0);
    if ((st = build_url(f, rq->url, rq->wait_ms)) != TF_OK)
        goto free_fetch;
    if ((st = choose(c, f, rq->url, &via_ucx)) != TF_OK)
        goto free_fetch;
#ifdef HAVE_UCX
    if (via_ucx && (st = start_ucx(c, f)) != TF_OK) {
        if (f->policy == TF_TRANSPORT_UCX)
            goto free_fetch;
        /* Under policy auto the request goes over HTTP instead, saying why. */
        snprintf(f->result.fallback, sizeof(f->result.fallback), "%.159s", f->result.error);
        f->result.error[0] = '\0';
        f->result.status = TF_EAGAIN;
        via_ucx = 0;
    }
#endif
    if (!via_ucx && (st = start_http(c, f, remaining_ms(f))) != TF_OK)
        goto free_fetch;
    link_fetch(c, f);
    c->npending++;
    if (out)
        *out = f;
    return TF_OK;

free_fetch:
    res = f->result;
    free(f->url);
    free(f->hdr);
    free(f);
refuse:
    c->last = res;
    return st;
}

tf_status_t tf_fetch_start(tf_client_t *c, const tf_request_t *rq, tf_fetch_cb cb,
                           void *user_data, tf_fetch_t **out)
{
    if (!c)
        return TF_EINVAL;
    if (!rq)
        return refuse(c, -1, TF_EINVAL, "no request description");
    int op = (int)rq->op;
    if (op < TF_OP_GET || op > TF_OP_EXCHANGE)
        return refuse(c, -1, TF_EINVAL, "unknown operation");
    if (!cb && !out)
        return refuse(c, op, TF_EINVAL, "a request needs a callback or a handle");
    return start_fetch(c, rq, op, cb, user_data, out);
}

static long ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)(t.tv_sec - t0->tv_sec) * 1000L + (long)(t.tv_nsec - t0->tv_nsec) / 1000000L;
}

/* Drives the engine until f completes (or, f NULL, until nothing is pending) or timeout_ms
 * passes (-1: no limit; 0: one pass without waiting). */
static void drive(tf_client_t *c, const tf_fetch_t *f, long timeout_ms)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        upgrade_wanted(c);
        tfx_hc_poll(c->hc, 0);
        ucx_drain(c);
        if (f ? f->done : c->npending == 0)
            return;
        if (tfx_hc_running(c->hc) == 0 && ucx_running(c) == 0)
            return;                     /* nothing left that could complete it */
        long wait = -1;
        if (timeout_ms >= 0) {
            wait = timeout_ms - ms_since(&t0);
            if (wait <= 0)
                return;
        }
        tfx_hc_wait(c->hc, wait);
    }
}

tf_status_t tf_fetch_test(tf_fetch_t *f)
{
    if (!f)
        return TF_EINVAL;
    tf_client_t *c = f->c;
    if (!f->done && c && !c->in_cb && !c->in_engine) {
        f->holds++;
        drive(c, f, 0);
        f->holds--;
    }
    tf_status_t st = f->done ? f->result.status : TF_EAGAIN;
    settle(f);
    return st;
}

tf_status_t tf_fetch_wait(tf_fetch_t *f, long timeout_ms)
{
    if (!f)
        return TF_EINVAL;
    tf_client_t *c = f->c;
    if (c && (c->in_cb || c->in_engine))
        return TF_EINVAL;
    if (!f->done && c) {
        f->holds++;
        drive(c, f, timeout_ms < 0 ? -1 : timeout_ms);
        f->holds--;
    }
    tf_status_t st = f->done ? f->result.status : TF_EAGAIN;
    settle(f);
    return st;
}

tf_status_t tf_fetch_cancel(tf_fetch_t *f)
{
    if (!f)
        return TF_EINVAL;
    if (f->done || !f->c)
        return TF_OK;
    if (f->c->in_engine)
        return TF_EINVAL;
    if (ucx_cancel(f))
        return TF_OK;
    f->holds++;
    tfx_hc_cancel(f->c->hc, f->req);
    f->holds--;
    settle(f);
    return TF_OK;
}

const tf_result_t *tf_fetch_result(const tf_fetch_t *f)
{
    return f ? &f->result : NULL;
}

tf_doc_t *tf_fetch_take_doc(tf_fetch_t *f)
{
    if (!f)
        return NULL;
    tf_doc_t *doc = f->doc;
    f->doc = NULL;
    return doc;
}

void tf_fetch_free(tf_fetch_t *f)
{
    if (!f || f->freeing)
        return;
    f->freeing = 1;
    if (!f->done && f->c && !f->c->in_engine && !ucx_cancel(f)) {
        f->holds++;
        tfx_hc_cancel(f->c->hc, f->req);
        f->holds--;
    }
    settle(f);
}

tf_status_t tf_client_run(tf_client_t *c, long timeout_ms)
{
    if (!c || c->in_cb || c->in_engine)
        return TF_EINVAL;
    if (c->npending > 0)
        drive(c, NULL, timeout_ms < 0 ? -1 : timeout_ms);
    return c->npending == 0 ? TF_OK : TF_EAGAIN;
}

/* ---- the blocking calls --------------------------------------------------------------------- */

/* Starts rq without a callback and drives the engine until it completes. tf_client_last
 * then holds its outcome. *out is the completed handle (to free) whenever it started. */
static tf_status_t blocking(tf_client_t *c, const tf_request_t *rq, int op, tf_fetch_t **out)
{
    if (c->in_cb || c->in_engine)
        return refuse(c, op, TF_EINVAL,
                      "blocking calls are not allowed inside a callback (start a request)");
    tf_fetch_t *f = NULL;
    tf_status_t st = start_fetch(c, rq, op, NULL, NULL, &f);
    if (st != TF_OK)
        return st;
    f->holds++;
    drive(c, f, -1);
    f->holds--;
    if (!f->done)                       /* cannot happen: the engine completes what it runs */
        tf_fetch_cancel(f);
    c->last = f->result;
    *out = f;
    return f->result.status;
}

tf_status_t tf_get(tf_client_t *c, const char *url, long wait_ms, tf_doc_t **out)
{
    if (!c)
        return TF_EINVAL;
    if (!out)
        return refuse(c, TF_OP_GET, TF_EINVAL, NULL);
    tf_request_t rq = {.op = TF_OP_GET, .url = url, .wait_ms = wait_ms};
    tf_fetch_t *f = NULL;
    tf_status_t st = blocking(c, &rq, TF_OP_GET, &f);
    if (st == TF_OK)
        *out = tf_fetch_take_doc(f);
    tf_fetch_free(f);
    return st;
}

tf_status_t tf_put(tf_client_t *c, const char *url, const tf_doc_t *in)
{
    if (!c)
        return TF_EINVAL;
    if (!in)
        return refuse(c, TF_OP_PUT, TF_EINVAL, NULL);
    tf_request_t rq = {.op = TF_OP_PUT, .url = url, .in = in};
    tf_fetch_t *f = NULL;
    tf_status_t st = blocking(c, &rq, TF_OP_PUT, &f);
    tf_fetch_free(f);
    return st;
}

tf_status_t tf_delete(tf_client_t *c, const char *url)
{
    if (!c)
        return TF_EINVAL;
    tf_request_t rq = {.op = TF_OP_DELETE, .url = url};
    tf_fetch_t *f = NULL;
    tf_status_t st = blocking(c, &rq, TF_OP_DELETE, &f);
    tf_fetch_free(f);
    return st;
}

tf_status_t tf_fetch(tf_client_t *c, const char *url, const tf_doc_t *in, tf_doc_t **out)
{
    if (!c)
        return TF_EINVAL;
    if (!in && !out) {
        refuse(c, -1, TF_EINVAL, "tf_fetch needs a document to send or a place for one");
        return TF_EINVAL;
    }
    if (!in)
        return tf_get(c, url, 0, out);
    if (!out)
        return tf_put(c, url, in);
    tf_request_t rq = {.op = TF_OP_EXCHANGE, .url = url, .in = in};
    tf_fetch_t *f = NULL;
    tf_status_t st = blocking(c, &rq, TF_OP_EXCHANGE, &f);
    if (st == TF_OK)
        *out = tf_fetch_take_doc(f);
    tf_fetch_free(f);
    return st;
}

/* Records a failure of a completed blocking call in tf_client_last. */
static tf_status_t fail(tf_client_t *c, tf_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static tf_status_t fail(tf_client_t *c, tf_status_t st, const char *fmt, ...)
{
    c->last.status = st;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->last.error, sizeof(c->last.error), fmt, ap);
        va_end(ap);
    } else {
        snprintf(c->last.error, sizeof(c->last.error), "%s", tf_strerror(st));
    }
    return st;
}

/* Copies the listing into the public entries. */
static tf_status_t copy_listing(tf_client_t *c, const tfp_list_entry_t *pe, size_t pn,
                                tf_entry_t **entries, size_t *n)
{
    tf_entry_t *e = NULL;
    if (pn > 0 && !(e = calloc(pn, sizeof(*e))))
        return fail(c, TF_ENOMEM, NULL);
    for (size_t i = 0; i < pn; i++) {
        e[i].name = strdup(pe[i].name ? pe[i].name : "");
        if (!e[i].name) {
            tf_list_free(e, i);
            return fail(c, TF_ENOMEM, NULL);
        }
        e[i].bytes = pe[i].bytes;
        e[i].ntensors = pe[i].ntensors;
    }
    *entries = e;
    *n = pn;
    return TF_OK;
}

tf_status_t tf_list(tf_client_t *c, const char *base, tf_entry_t **entries, size_t *n)
{
    tfp_list_entry_t *pe = NULL;
    size_t pn = 0;
    tfp_err_t err;

    if (!c)
        return TF_EINVAL;
    if (!entries || !n)
        return refuse(c, OP_LIST, TF_EINVAL, NULL);
    tf_request_t rq = {.url = base};
    tf_fetch_t *f = NULL;
    tf_status_t st = blocking(c, &rq, OP_LIST, &f);
    if (st != TF_OK)
        goto free_fetch;
    if (tfp_parse_listing(f->text, f->text_len, &pe, &pn, &err) != TFP_OK) {
        st = fail(c, TF_EPROTO, "bad listing: %s", f->text_len ? err.msg : "empty body");
        goto free_fetch;
    }
    st = copy_listing(c, pe, pn, entries, n);
    tfp_listing_free(pe, pn);
free_fetch:
    tf_fetch_free(f);
    return st;
}

void tf_list_free(tf_entry_t *entries, size_t n)
{
    if (!entries)
        return;
    for (size_t i = 0; i < n; i++)
        free(entries[i].name);
    free(entries);
}

tf_status_t tf_info(tf_client_t *c, const char *base, char **json)
{
    if (!c)
        return TF_EINVAL;
    if (!json)
        return refuse(c, OP_INFO, TF_EINVAL, NULL);
    tf_request_t rq = {.url = base};
    tf_fetch_t *f = NULL;
    tf_status_t st = blocking(c, &rq, OP_INFO, &f);
    if (st == TF_OK) {
        *json = f->text;
        f->text = NULL;
    }
    tf_fetch_free(f);
    return st;
}
