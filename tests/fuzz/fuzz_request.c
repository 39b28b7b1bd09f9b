/* fuzz_request.c - libFuzzer harness for the HTTP request path as tfetchd sees it: request
 * line, headers and body through tfp_http_op_parse and the real router and handlers
 * (daemon/router.c, daemon/api_*.c) over the daemon's real in-memory parts (store, waiters,
 * sessions, replay window, workers, built-in routes), with an in-memory transport in place
 * of MHD.
 *
 * An input is a script of up to MAX_REQS HTTP/1.1-like requests, one after the other:
 *     METHOD SP TARGET [SP anything] LF, then "Name: value" LF lines, an empty line, a body
 * (CR before LF is dropped; blank lines before a request are skipped). With Transfer-Encoding
 * the body is chunked (hex size line, data, LF; size 0 ends it) and each chunk arrives as
 * its own piece, else Content-Length bytes arrive at once; a body cut short by the end of
 * the input is a client that went away mid-upload (finish without an answer). The methods
 * SHMGET and SHMCOMMIT are a same-host GET or PUT instead (daemon/shm.c's path): TARGET and
 * the If-Match and If-None-Match lines make a shm message's string (proto/shmframe.h's
 * conditions, flag COND set when there is one), Tfetch-TTL its TTL, the body the document
 * lent in a sealed memfd; SHMCALL is a same-host exchange (CALL): TARGET is the route, the
 * Tfetch-User and Tfetch-Request-Id lines its User and Request-Id lines, the body lent; the
 * message's bytes go through tfp_sf_decode and, when it takes
 * them, tfd_shm_op and tfx_shm_call (transports/shm_server.c) run the op over the same
 * router, and an answer's memfd is checked (inside it, a safetensors document). In TARGET,
 * "$W" stands for the last worker id a registration answered and "$C" for the last call id
 * a poll handed out, so one input can run the worker protocol end to end. The line
 * "!CLOSE N" is no request: the client of the Nth request still open (suspended; newest
 * first) goes away, as a closed connection finishes it unanswered. This file mirrors
 * what transports/http_server.c does between MHD and the handlers: headers looked up by
 * name (first one wins, case-insensitive), the path %-decoded, the query's wait= read, the
 * header-size limit, the body grown as Content-Length says or geometrically when chunked,
 * an answer decided at begin skipping the body, a handler that suspends run again when
 * resumed. MHD's own parsing of the bytes is not in it.
 *
 * Checks: every handler call answers or suspends (never neither); an answer's status is an
 * HTTP status and an error's is its code's; every safetensors answer decodes, every JSON
 * answer (error bodies included) is strict JSON, every Shumai answer decodes, every raw
 * answer matches its Tfetch-Dtype and Tfetch-Shape. At the end the daemon drains as
 * tfd_server_drain does (workers and replay waiters woken), then every request still open
 * is finished unanswered, as a closed connection is; after that no store reservation,
 * body-memory charge or armed waiter may remain, and every part is freed, so LeakSanitizer
 * sees anything a request path leaked. The parts are made afresh for each input but for the
 * UCX side (off) and the waiters (whose timer thread would cost ten times a run), made once;
 * so the waiters' shutdown is not run here. Single-threaded but for that timer thread, which
 * may call tfx_req_resume (a run ends long before any wait does). Build and run: see
 * README.md beside it (make fuzz).
 */
#include "config.h"
#include "daemon/api.h"
#include "daemon/log.h"
#include "daemon/router.h"
#include "daemon/shm.h"
#include "daemon/upgrade.h"
#include "proto/http.h"
#include "proto/jsonread.h"
#include "proto/jsonw.h"
#include "proto/raw.h"
#include "proto/safetensors.h"
#include "proto/shumai.h"
#include "transports/req_int.h"
#include "transports/shm_server.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_REQS 16
#define MAX_HDRS 32
#define MAX_PIECES 64
#define MAX_SPINS 1000
#define CHUNKED_START (64u << 10)           /* as http_server.c */

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_request: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

/* ---- the daemon's parts ------------------------------------------------------------------- */

static tfd_config_t cfg;
static tfd_upgrade_t *upgrade;              /* UCX off: made once */
static tfd_waiters_t *waiters;              /* made once: its timer thread costs 10x a run */
static tfd_api_t api;
static tfd_router_t *router;
static tfx_handlers_t handlers;
static unsigned open_reqs;
static char last_worker[TFD_WORKER_ID_SIZE], last_call[TFD_CALL_ID_SIZE];

static void gauges(void *arg, tfd_gauges_t *g)
{
    (void)arg;
    g->inflight = open_reqs;
    g->body_bytes = tfd_router_body_bytes(router);
}

/* The feeds' wake callback, as server.c's: their waiters are the long-poll waiters. */
static void wake_feed(void *arg, const char *key)
{
    tfd_waiters_notify(arg, key);
}

/* What server.c's make_parts builds, with limits small enough that a fuzz input reaches
 * them. */
static void parts_new(void)
{
    tfd_sessions_limits_t sl = {cfg.session_ttl, cfg.max_sessions, cfg.session_user_memory,
                                cfg.session_memory};
    tfd_replay_limits_t rl = {cfg.replay_window, cfg.replay_entries, cfg.replay_memory};
    tfd_workers_limits_t wl = {cfg.worker_lease_ms, cfg.max_workers, cfg.worker_queue};
    tfd_feeds_limits_t fl = {cfg.feed_memory, cfg.max_feeds, cfg.feeds_per_user,
                             TFD_FEED_PRODUCERS, wake_feed, waiters};
    api = (tfd_api_t){.cfg = &cfg, .waiters = waiters, .upgrade = upgrade, .gauges = gauges};
    if (!(api.store = tfd_store_new(cfg.store_memory)) || !(api.metrics = tfd_metrics_new()) || !(api.routes = tfd_routes_new()) ||
        tfd_builtin_routes_add(api.routes) != 0 || !(api.sessions = tfd_sessions_new(&sl)) ||
        !(api.replay = tfd_replay_new(&rl)) ||
        !(api.workers = tfd_workers_new(api.routes, &wl)) || !(api.feeds = tfd_feeds_new(&fl)) ||
        !(router = tfd_router_new(&api)))
        fail("out of memory making the daemon's parts", NULL);
    handlers = tfd_router_handlers(router);
    last_worker[0] = last_call[0] = '\0';
}

/* server.c's teardown, less the transports. */
static void parts_free(void)
{
    tfd_router_free(router);
    tfd_feeds_free(api.feeds);
    tfd_workers_free(api.workers);
    tfd_replay_free(api.replay);
    tfd_sessions_free(api.sessions);
    tfd_routes_free(api.routes);
    tfd_metrics_free(api.metrics);
    tfd_store_free(api.store);
    router = NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tfd_config_defaults(&cfg);
    cfg.max_body = 1u << 20;
    cfg.store_memory = 4u << 20;
    cfg.body_memory = 4u << 20;
    cfg.json_max_elems = 4096;
    cfg.max_waiters = 8;
    cfg.max_sessions = 4;
    cfg.session_user_memory = 64u << 10;
    cfg.session_memory = 256u << 10;
    cfg.replay_entries = 16;
    cfg.replay_memory = 1u << 20;
    cfg.max_workers = 4;
    cfg.worker_queue = 4;
    cfg.ucx = 0;
    tfd_log_set_level(getenv("FUZZ_LOG") ? LOG_DEBUG : -1);
    upgrade = tfd_upgrade_start(0, cfg.upgrade_token_ttl_ms, cfg.max_body, NULL, 0, NULL);
    waiters = tfd_waiters_new(cfg.max_waiters);
    if (!upgrade || !waiters)
        fail("out of memory starting the upgrade side and the waiters", NULL);
    return 0;
}

/* ---- a request as the wire carried it ----------------------------------------------------- */

typedef struct {
    char *method, *target;
    char *name[MAX_HDRS], *value[MAX_HDRS];
    int nh;
    const uint8_t *piece[MAX_PIECES];
    size_t piece_len[MAX_PIECES];
    int npieces;
    int cut;                                /* the input ended inside the body */
} wire_t;

static char *dup_span(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        fail("out of memory", NULL);
    memcpy(s, p, n);
    s[n] = '\0';                            /* a NUL inside cuts it short, as in MHD's strings */
    return s;
}

/* The next line at *p (without its LF and a CR before it); advances past the LF. */
static int next_line(const uint8_t **p, const uint8_t *end, const uint8_t **line, size_t *n)
{
    if (*p >= end)
        return -1;
    const uint8_t *lf = memchr(*p, '\n', (size_t)(end - *p));
    const uint8_t *stop = lf ? lf : end;
    *line = *p;
    *n = (size_t)(stop - *p);
    if (*n && (*line)[*n - 1] == '\r')
        (*n)--;
    *p = lf ? lf + 1 : end;
    return 0;
}

static void wire_free(wire_t *w)
{
    free(w->method);
    free(w->target);
    for (int i = 0; i < w->nh; i++) {
        free(w->name[i]);
        free(w->value[i]);
    }
}

/* MHD_lookup_connection_value: the first header of that name, case-insensitive. */
static const char *header(const wire_t *w, const char *name)
{
    for (int i = 0; i < w->nh; i++)
        if (strcasecmp(w->name[i], name) == 0)
            return w->value[i];
    return NULL;
}

/* As http_server.c's content_length. */
static int64_t content_length(const wire_t *w)
{
    if (header(w, "Transfer-Encoding"))
        return -1;
    const char *cl = header(w, "Content-Length");
    if (!cl)
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(cl, &end, 10);
    if (errno || end == cl || v > INT64_MAX)
        return -1;
    return (int64_t)v;
}

static void add_piece(wire_t *w, const uint8_t *p, size_t n)
{
    if (w->npieces < MAX_PIECES) {
        w->piece[w->npieces] = p;
        w->piece_len[w->npieces++] = n;
    } else {                                /* fold the rest into the last piece */
        w->piece_len[w->npieces - 1] = (size_t)(p + n - w->piece[w->npieces - 1]);
    }
}

/* Reads the chunked body at *p into pieces. */
static void read_chunked(wire_t *w, const uint8_t **p, const uint8_t *end)
{
    const uint8_t *line;
    size_t n;
    for (;;) {
        if (next_line(p, end, &line, &n) != 0) {
            w->cut = 1;
            return;
        }
        char hex[17];
        size_t k = 0;
        while (k < n && k < 16 && line[k] != ';') {
            hex[k] = (char)line[k];
            k++;
        }
        hex[k] = '\0';
        unsigned long long size = strtoull(hex, NULL, 16);
        if (size == 0) {                    /* the last chunk, then trailer lines */
            while (next_line(p, end, &line, &n) == 0 && n > 0)
                ;
            return;
        }
        if (size > (uint64_t)(end - *p)) {
            if (end > *p)
                add_piece(w, *p, (size_t)(end - *p));
            *p = end;
            w->cut = 1;
            return;
        }
        add_piece(w, *p, (size_t)size);
        *p += size;
        if (*p < end && **p == '\r')
            (*p)++;
        if (*p < end && **p == '\n')
            (*p)++;
    }
}

/* The next request of the script, or -1 when none is left. */
static int read_request(const uint8_t **p, const uint8_t *end, wire_t *w)
{
    const uint8_t *line;
    size_t n;
    memset(w, 0, sizeof *w);
    do {
        if (next_line(p, end, &line, &n) != 0)
            return -1;
    } while (n == 0);
    const uint8_t *sp = memchr(line, ' ', n);
    size_t mlen = sp ? (size_t)(sp - line) : n;
    w->method = dup_span(line, mlen);
    if (sp) {
        const uint8_t *t = sp + 1, *stop = line + n;
        const uint8_t *sp2 = memchr(t, ' ', (size_t)(stop - t));
        w->target = dup_span(t, (size_t)((sp2 ? sp2 : stop) - t));
    } else {
        w->target = dup_span((const uint8_t *)"/", 1);
    }
    while (next_line(p, end, &line, &n) == 0 && n > 0) {
        const uint8_t *colon = memchr(line, ':', n);
        if (!colon || w->nh == MAX_HDRS)
            continue;
        const uint8_t *v = colon + 1, *vend = line + n;
        while (v < vend && (*v == ' ' || *v == '\t'))
            v++;
        while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t'))
            vend--;
        w->name[w->nh] = dup_span(line, (size_t)(colon - line));
        w->value[w->nh++] = dup_span(v, (size_t)(vend - v));
    }
    if (header(w, "Transfer-Encoding")) {
        read_chunked(w, p, end);
    } else {
        int64_t cl = content_length(w);
        if (cl > 0) {
            size_t have = (size_t)(end - *p);
            size_t take = (uint64_t)cl < have ? (size_t)cl : have;
            if (take)
                add_piece(w, *p, take);
            *p += take;
            w->cut = take < (uint64_t)cl;
        }
    }
    return 0;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* MHD_http_unescape: %XX becomes the byte (a %00 ends the string), anything else stays. */
static void unescape(char *s)
{
    char *out = s;
    for (char *in = s; *in; in++) {
        int hi, lo;
        if (in[0] == '%' && (hi = hex_value(in[1])) >= 0 && (lo = hex_value(in[2])) >= 0) {
            *out++ = (char)(hi * 16 + lo);
            in += 2;
        } else {
            *out++ = *in;
        }
    }
    *out = '\0';
}

/* The target with $W and $C replaced, split into the decoded path and the query's wait. */
static void split_target(const char *target, char **path, char **wait)
{
    size_t cap = strlen(target) * (TFD_WORKER_ID_SIZE + TFD_CALL_ID_SIZE) + 1, n = 0;
    char *t = malloc(cap);
    if (!t)
        fail("out of memory", NULL);
    for (const char *s = target; *s; s++) {
        const char *sub = NULL;
        if (s[0] == '$' && s[1] == 'W')
            sub = last_worker;
        else if (s[0] == '$' && s[1] == 'C')
            sub = last_call;
        if (sub) {
            memcpy(t + n, sub, strlen(sub));
            n += strlen(sub);
            s++;
        } else {
            t[n++] = *s;
        }
    }
    t[n] = '\0';
    *wait = NULL;
    char *q = strchr(t, '?');
    if (q) {
        *q++ = '\0';
        for (char *arg = strtok(q, "&"); arg; arg = strtok(NULL, "&")) {
            char *eq = strchr(arg, '=');
            if (eq)
                *eq++ = '\0';
            for (char *c = arg; *c; c++)
                if (*c == '+')
                    *c = ' ';
            unescape(arg);
            if (strcmp(arg, "wait") == 0 && !*wait && eq) {
                for (char *c = eq; *c; c++)
                    if (*c == '+')
                        *c = ' ';
                unescape(eq);
                *wait = strdup(eq);
            }
        }
    }
    unescape(t);
    *path = t;
}

/* ---- the in-memory transport -------------------------------------------------------------- */

typedef struct fz_req {
    tfx_req_t base;                         /* first: req_int.h */
    struct fz_req *next;                    /* open requests */
    atomic_int wake;
    int64_t content_length;
    int suspended;
} fz_req_t;

static fz_req_t *open_list;

static const char *resp_header(const tfx_req_t *r, const char *name)
{
    for (const tfx_hdr_t *h = r->hdrs; h; h = h->next)
        if (strcasecmp(h->name, name) == 0)
            return h->value;
    return NULL;
}

static void check_json(const void *body, size_t len, const char *what)
{
    size_t end;
    tfp_err_t err;
    if (tfp_json_check(body, len, &end, &err) != TFP_OK)
        fail(what, err.msg);
    for (size_t i = end; i < len; i++) {
        char c = ((const char *)body)[i];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t')
            fail(what, "bytes after the JSON value");
    }
}

/* Whatever the daemon answers must be what it says it is. */
static void check_answer(tfx_req_t *r, unsigned status, const char *ctype, const void *body,
                         size_t len)
{
    tfp_err_t err;
    if (status < 200 || status > 599)
        fail("answer with a status outside 200..599", NULL);
    if (len && !body)
        fail("answer with a length and no body", NULL);
    if (!ctype || (status != 200 && status != 201))
        return;
    if (strcmp(ctype, "application/x-safetensors") == 0) {
        tfp_doc_t *doc = NULL;
        if (tfp_st_decode(body, len, NULL, &doc, &err) != TFP_OK)
            fail("a safetensors answer does not decode", err.msg);
        tfp_doc_free(doc);
    } else if (strcmp(ctype, "application/json") == 0) {
        check_json(body, len, "a JSON answer is not strict JSON");
    } else if (strcmp(ctype, "application/octet-stream") == 0) {
        const char *dt = resp_header(r, "Tfetch-Dtype");
        if (dt) {
            tfp_dtype_t d;
            int rank;
            uint64_t shape[TFP_MAX_RANK];
            if (tfp_raw_check(dt, resp_header(r, "Tfetch-Shape"), len, &d, &rank, shape,
                              &err) != TFP_OK)
                fail("a raw answer does not match its Tfetch-Dtype and Tfetch-Shape", err.msg);
        } else {
            tfp_shumai_msg_t msg;
            if (tfp_shumai_decode(body, len, 0, &msg, &err) != TFP_OK)
                fail("a Shumai answer does not decode", err.msg);
            tfp_shumai_msg_clear(&msg);
        }
    }
}

/* Remembers the ids a later request of the script may name ($W, $C). */
static void note_ids(tfx_req_t *r, unsigned status, const void *body, size_t len)
{
    if (r->op.kind == TFP_OP_WORKER_REGISTER && status == 201) {
        static const char key[] = "\"worker\":\"";
        char *text = strndup(body, len), *at = text ? strstr(text, key) : NULL;
        if (!at)
            fail("a registration answer names no worker", text);
        at += sizeof key - 1;
        size_t n = strcspn(at, "\"");
        if (n >= sizeof last_worker)
            fail("a worker id longer than TFD_WORKER_ID_SIZE", at);
        memcpy(last_worker, at, n);
        last_worker[n] = '\0';
        free(text);
    }
    const char *call = resp_header(r, "Tfetch-Call");
    if (r->op.kind == TFP_OP_WORKER_POLL && status == 200) {
        if (!call || strlen(call) >= sizeof last_call)
            fail("a poll answer without a call id of at most TFD_CALL_ID_SIZE", call);
        snprintf(last_call, sizeof last_call, "%s", call);
    }
}

static void fz_respond(tfx_req_t *r, unsigned status, const char *content_type,
                       const void *body, size_t len, void (*release)(void *), void *release_arg)
{
    check_answer(r, status, content_type, body, len);
    note_ids(r, status, body, len);
    if (release)                            /* sent */
        release(release_arg);
}

static void fz_respond_error(tfx_req_t *r, tfp_status_t code, const char *msg)
{
    int http = tfp_status_http(code);
    if (http < 400 || http > 599 || r->status != (unsigned)http)
        fail("an error answered with a status that is not its code's", tfp_status_text(code));
    if (!msg[0])
        fail("an error answered without a message", tfp_status_text(code));
    size_t len;
    char *body = tfp_error_json(code, msg, &len);
    if (!body)
        fail("out of memory", NULL);
    check_json(body, len, "an error body is not strict JSON");
    r->resp_len = len;
    free(body);
}

static void fz_resume(tfx_req_t *r)
{
    atomic_store(&((fz_req_t *)r)->wake, 1);
}

static const tfx_req_ops_t fz_ops = {
    .name = "http",
    .respond = fz_respond,
    .respond_error = fz_respond_error,
    .resume = fz_resume,
};

/* As http_server.c's reserve_body. */
static tfp_status_t reserve_body(fz_req_t *q, size_t more)
{
    tfx_req_t *r = &q->base;
    uint64_t need = r->headroom + r->body_len + more;
    if (r->buf && need <= r->cap)
        return TFP_OK;
    uint64_t want;
    if (!r->buf && q->content_length >= 0) {
        want = r->headroom + (uint64_t)q->content_length;
    } else {
        want = r->cap ? (uint64_t)r->cap * 2 : r->headroom + CHUNKED_START;
        if (want > r->headroom + r->max_body)
            want = r->headroom + r->max_body;
    }
    if (want < need)
        want = need;
    return tfx_req_grow_body(r, want);
}

/* As http_server.c's take_upload, less the rate floor and the drain cap. */
static void take_upload(fz_req_t *q, const uint8_t *data, size_t n)
{
    tfx_req_t *r = &q->base;
    r->body_seen += n;
    if (r->body_failed || !r->accept_body)
        return;
    if (r->body_len + n > r->max_body) {
        r->body_failed = TFP_ETOOBIG;
        return;
    }
    tfp_status_t st = reserve_body(q, n);
    if (st != TFP_OK) {
        r->body_failed = st;
        return;
    }
    memcpy(r->buf + r->headroom + r->body_len, data, n);
    r->body_len += n;
}

/* As http_server.c's answer_failed_body. */
static void answer_failed_body(tfx_req_t *r)
{
    if (r->body_failed == TFP_ETOOBIG)
        tfx_respond_error(r, TFP_ETOOBIG, "request body exceeds the limit of %llu bytes",
                          (unsigned long long)r->max_body);
    else
        tfx_respond_error(r, r->body_failed, "no room for a %llu-byte request body: %s",
                          (unsigned long long)r->body_seen, tfp_status_text(r->body_failed));
}

/* As http_server.c's run_handle: until it answers, or suspends with no wake-up pending. */
static void run_handle(fz_req_t *q)
{
    tfx_req_t *r = &q->base;
    for (int spins = 0;; spins++) {
        if (spins == MAX_SPINS)
            fail("a handler suspends and wakes itself forever", tfp_op_name(r->op.kind));
        r->want_suspend = 0;
        handlers.handle(r, handlers.arg);
        if (r->answered) {
            q->suspended = 0;
            return;
        }
        if (!r->want_suspend)
            fail("a handler neither answered nor suspended", tfp_op_name(r->op.kind));
        if (atomic_exchange(&q->wake, 0))
            continue;
        q->suspended = 1;
        return;
    }
}

/* The request is over (completed: its answer went out): finish, free. */
static void close_request(fz_req_t *q, int completed)
{
    handlers.finish(&q->base, completed, handlers.arg);
    if (tfx_req_ctx(&q->base))
        fail("finish left the request's context set", NULL);
    tfx_req_release(&q->base);
    open_reqs--;
    free(q);
}

/* Runs every open request that was woken, until none is; closes those that answered. */
static void pump(void)
{
    int ran;
    do {
        ran = 0;
        for (fz_req_t **pp = &open_list; *pp;) {
            fz_req_t *q = *pp;
            if (atomic_exchange(&q->wake, 0)) {
                run_handle(q);
                ran = 1;
            }
            if (q->base.answered) {
                *pp = q->next;
                close_request(q, 1);
            } else {
                pp = &q->next;
            }
        }
    } while (ran);
}

static void run_request(const wire_t *w)
{
    fz_req_t *q = calloc(1, sizeof *q);
    if (!q)
        fail("out of memory", NULL);
    tfx_req_t *r = &q->base;
    r->ops = &fz_ops;
    r->h = &handlers;
    q->content_length = content_length(w);
    open_reqs++;

    char *path, *wait;
    split_target(w->target, &path, &wait);
    tfp_http_req_t in = {
        .method = w->method,
        .path = path,
        .wait = wait,
        .content_length = q->content_length,
        .chunked = header(w, "Transfer-Encoding") != NULL,
        .content_type = header(w, "Content-Type"),
        .accept = header(w, "Accept"),
        .dtype = header(w, "Tfetch-Dtype"),
        .shape = header(w, "Tfetch-Shape"),
        .user = header(w, "Tfetch-User"),
        .request_id = header(w, "Tfetch-Request-Id"),
        .max_body = cfg.max_body,
    };
    tfp_http_op_parse(&in, &r->op, &r->op_err);
    free(path);
    free(wait);

    size_t hbytes = 0;
    for (int i = 0; i < w->nh; i++)
        hbytes += strlen(w->name[i]) + strlen(w->value[i]);
    if (hbytes > cfg.max_header)
        tfx_respond_error(r, TFP_EHEADERS, "request headers exceed %zu bytes",
                          (size_t)cfg.max_header);
    else
        handlers.begin(r, handlers.arg);
    int early = r->answered;
    for (int i = 0; i < w->npieces; i++) {
        if (early)
            r->body_seen += w->piece_len[i];    /* drained */
        else
            take_upload(q, w->piece[i], w->piece_len[i]);
    }
    if (w->cut) {                               /* the client went away mid-upload */
        close_request(q, 0);
        return;
    }
    if (!early) {
        if (r->body_failed)
            answer_failed_body(r);
        else
            run_handle(q);
    }
    if (r->answered) {
        close_request(q, 1);
    } else {
        q->next = open_list;
        open_list = q;
    }
    pump();
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A same-host GET, COMMIT or CALL (see the top): the message as the socket would carry it. */
static void run_shm(const wire_t *w)
{
    int commit = strcmp(w->method, "SHMCOMMIT") == 0;
    int is_call = strcmp(w->method, "SHMCALL") == 0;
    const char *im = header(w, "If-Match"), *inm = header(w, "If-None-Match");
    const char *ttl = header(w, "Tfetch-TTL");
    const char *user = header(w, "Tfetch-User"), *rid = header(w, "Tfetch-Request-Id");
    uint8_t buf[TFP_SF_MAX];
    size_t len = 0;
    for (int i = 0; i < w->npieces; i++)
        len += w->piece_len[i];
    int n = is_call ? snprintf((char *)buf + TFP_SF_FIXED, sizeof buf - TFP_SF_FIXED,
                            "%s%s%s%s%s", w->target, user ? "\nUser: " : "", user ? user : "",
                            rid ? "\nRequest-Id: " : "", rid ? rid : "")
                 : snprintf((char *)buf + TFP_SF_FIXED, sizeof buf - TFP_SF_FIXED,
                            "%s%s%s%s%s", w->target, im ? "\nIf-Match: " : "", im ? im : "",
                            inm ? "\nIf-None-Match: " : "", inm ? inm : "");
    if (is_call) {
        im = inm = ttl = NULL;
        commit = 1;                         /* a lent body, as COMMIT's */
    }
    if (n < 0 || (size_t)n >= sizeof buf - TFP_SF_FIXED || w->cut)
        return;
    memset(buf, 0, TFP_SF_FIXED);
    put_le(buf, TFP_SF_MAGIC, 4);
    buf[4] = TFP_SF_VERSION;
    buf[5] = is_call ? TFP_SF_CALL : commit ? TFP_SF_COMMIT : TFP_SF_GET;
    put_le(buf + 6, (uint64_t)n, 2);
    put_le(buf + 8, 1, 8);
    put_le(buf + 20, (im || inm) ? TFP_SF_F_COND : 0, 4);
    put_le(buf + 24, commit, 8);
    put_le(buf + 32, commit ? len : 0, 8);
    put_le(buf + 40, commit && ttl ? strtoull(ttl, NULL, 10) : 0, 8);
    tfp_sf_t q;
    tfp_err_t err;
    if (tfp_sf_decode(buf, TFP_SF_FIXED + (size_t)n, &q, &err) != TFP_OK)
        return;                             /* the daemon closes such a connection */
    tfp_op_t op;
    tfp_op_who_t who;
    memset(&who, 0, sizeof who);
    tfd_shm_op(&who, &q, &op);
    tfx_shm_call_t call = {.body = TFX_SHM_NONE, .body_len = len};
    if (commit) {                           /* the document in the memfd lent for it */
        size_t off = 0;
        if (tfx_shm_create(len, "fuzz-put", &call.body, &err) != TFP_OK)
            fail("no memfd", err.msg);
        for (int i = 0; i < w->npieces; i++) {
            memcpy(call.body.p + off, w->piece[i], w->piece_len[i]);
            off += w->piece_len[i];
        }
        if (tfx_shm_seal(&call.body, TFX_SHM_SEAL_WRITE | TFX_SHM_SEAL_SIZE, &err) != TFP_OK)
            fail("cannot seal the memfd", err.msg);
    }
    tfx_shm_call(&handlers, &op, NULL, "shm", &call);
    if (call.http < 100 || call.http > 599)
        fail("a shm answer without an HTTP status", NULL);
    if (call.code != TFP_OK && tfp_status_http(call.code) > 0 &&
        call.http != (unsigned)tfp_status_http(call.code))
        fail("a shm failure whose status is not its code's", call.msg);
    if (call.fd >= 0) {
        size_t size;
        tfx_shm_t m;
        tfp_doc_t *doc = NULL;
        if (tfx_shm_check(call.fd, 1, TFX_SHM_SEAL_WRITE, &size, &err) != TFP_OK ||
            tfp_sf_check_span(call.offset, call.len, size, &err) != TFP_OK ||
            tfx_shm_map(dup(call.fd), size, TFX_SHM_MAP_READ, &m, &err) != TFP_OK)
            fail("a shm answer's memfd", err.msg);
        if (tfp_st_decode(m.p + call.offset, call.len, NULL, &doc, &err) != TFP_OK)
            fail("a shm answer that is no safetensors document", err.msg);
        tfp_doc_free(doc);
        tfx_shm_close(&m);
    }
    if (call.hold)
        call.hold(call.hold_arg);
}

/* "!CLOSE N": the client of the Nth open (suspended) request, newest first, goes away. */
static void drop_open(int n)
{
    fz_req_t **pp = &open_list;
    while (*pp && n-- > 0)
        pp = &(*pp)->next;
    if (!*pp)
        return;
    fz_req_t *q = *pp;
    *pp = q->next;
    close_request(q, 0);
    pump();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data, *end = data + size;
    wire_t w;
    parts_new();
    for (int i = 0; i < MAX_REQS && read_request(&p, end, &w) == 0; i++) {
        if (strcmp(w.method, "!CLOSE") == 0)
            drop_open(atoi(w.target));
        else if (strncmp(w.method, "SHM", 3) == 0)
            run_shm(&w);
        else
            run_request(&w);
        wire_free(&w);
    }
    /* Drain as tfd_server_drain does (but for the waiters, which outlive the input: their
     * GETs go as closed connections), then close what is left as closed connections. */
    tfd_workers_shutdown(api.workers);
    tfd_replay_wake_all(api.replay);
    pump();
    while (open_list) {
        fz_req_t *q = open_list;
        open_list = q->next;
        close_request(q, 0);
    }
    tfd_store_stats_t st;
    tfd_store_stats(api.store, &st);
    if (st.reserved != 0)
        fail("store space still reserved after every request ended", NULL);
    if (tfd_router_body_bytes(router) != 0)
        fail("body memory still charged after every request ended", NULL);
    if (open_reqs != 0)
        fail("a request was never finished", NULL);
    if (tfd_waiters_count(waiters) != 0)
        fail("a waiter still armed after every request ended", NULL);
    parts_free();
    return 0;
}
