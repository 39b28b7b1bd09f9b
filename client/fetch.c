/* fetch.c - a request's life: tf_fetch_start (checking the description, choosing the
 * transport), driving the client (tf_fetch_test, _wait, tf_client_run), canceling and
 * freeing handles, completion (the callback runs exactly once), and the blocking calls built
 * on it (tf_get, tf_put, tf_delete, tf_fetch, tf_list, tf_info).
 *
 * A tf_fetch_t is one request: it borrows an engine request (http.c) or a UCX request (ucx.c)
 * while it runs and keeps its outcome (tf_result_t, the decoded reply) until its callback has
 * run and, for a held handle, until tf_fetch_free. Every blocking call is "start a tf_fetch_t
 * without a callback, drive the client until it completes, take the reply", so there is one
 * engine and two ways to drive it.
 *
 * Callbacks run on the thread driving the client; the client counts how deep it is in
 * callbacks to refuse what would re-enter the engine (blocking calls, wait, run, free). One
 * thread at a time per client.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/internal.h"
#include "proto/httpcond.h"
#include "proto/jsonread.h"
#include "proto/op.h"
#include "proto/strcopy.h"

/* What is left of f's time limit in ms (at least 1), or 0 when it has none. */
long tfi_remaining_ms(const tf_fetch_t *f)
{
    if (f->total_ms <= 0)
        return 0;
    long left = f->total_ms - (long)(tfx_since_s(f->t0_ns) * 1000.0);
    return left > 0 ? left : 1;
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

/* Frees what the operation copied (not the borrowed document). */
static void op_free(tfi_op_t *op)
{
    tfi_body_free(op);
    free(op->url);
    free(op->method);
    for (size_t i = 0; i < 2 * op->nhdrs; i++)
        free(op->hdrs[i]);
    free(op->hdrs);
    op->url = op->method = NULL;
    op->hdrs = NULL;
    op->nhdrs = 0;
}

static void destroy(tf_fetch_t *f)
{
    if (f->c)
        unlink_fetch(f->c, f);
    tf_doc_free(f->doc);
    free(f->text);
    op_free(&f->op);
    free(f);
}

/* Frees f once nobody needs it: completed, not held by a frame, and not (or no longer)
 * held by the caller. */
static void settle(tf_fetch_t *f)
{
    if (f->done && f->holds == 0 && (!f->held || f->freeing))
        destroy(f);
}

int tfi_progress(tf_client_t *c, uint64_t dn, uint64_t dt, uint64_t un, uint64_t ut)
{
    if (!c->progress)
        return 0;
    c->in_engine++;
    int rc = c->progress(dn, dt, un, ut, c->progress_ud);
    c->in_engine--;
    return rc;
}

static int write_all(int fd, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        size_t k = n - done > (1u << 26) ? (1u << 26) : n - done;
        ssize_t w = write(fd, (const char *)p + done, k);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

/* A get of tf_fetch_start_fd that a transport answered with a document in memory (a
 * same-host mapping, a UCX reply): written to the caller's file now, in slices (reported as
 * progress), and freed. HTTP wrote its body there as it arrived. */
static void sink_doc(tf_client_t *c, tf_fetch_t *f)
{
    tf_doc_t *doc = f->doc;
    void *hdr = NULL;
    size_t hlen = 0;
    uint64_t total = f->result.bytes_received, done = 0;
    f->doc = NULL;
    if (!doc->raw && tf_doc_encode_header(doc, &hdr, &hlen) != TF_OK) {
        tfi_rfail(&f->result, TF_ENOMEM, NULL);
        goto free_doc;
    }
    /* The bytes as the server sent them when they lie in one piece (the stored document,
     * as HTTP writes it), else the header re-encoded and each tensor's bytes. */
    size_t n = doc->raw ? 1 : tf_doc_count(doc) + 1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *p = doc->raw ? doc->raw : i == 0 ? hdr : tf_doc_at(doc, i - 1)->data;
        size_t len = doc->raw ? doc->raw_len : i == 0 ? hlen : tf_doc_at(doc, i - 1)->nbytes;
        for (size_t off = 0; rc == 0 && off < len;) {
            size_t k = len - off > (64u << 20) ? (64u << 20) : len - off;
            rc = write_all(f->op.sink_fd, p + off, k);
            off += k;
            done += k;
            if (rc == 0 && tfi_progress(c, done, total > done ? total : done, 0, 0)) {
                tfi_rfail(&f->result, TF_ECANCELED, "canceled by the progress callback");
                goto free_hdr;
            }
        }
    }
    if (rc != 0)
        tfi_rfail(&f->result, TF_EIO, "cannot write the reply: %s", strerror(errno));
free_hdr:
    tf_free(hdr);
free_doc:
    tf_doc_free(doc);
}

/* Completes f, whose outcome is recorded: runs its callback, frees what it no longer needs. */
void tfi_complete_fetch(tf_client_t *c, tf_fetch_t *f)
{
    tfi_verify_received(f);
    tfi_stages_finish(f);
    tfi_body_free(&f->op);
    if (f->op.sink_fd >= 0 && f->doc && f->result.status == TF_OK)
        sink_doc(c, f);
    f->done = 1;
    if (!f->background)
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

/* An If-Match / If-None-Match value: "*" or a list of entity tags (proto/httpcond.c, the
 * server's own parser), short enough for the op. */
static int cond_valid(const char *v)
{
    tfp_etags_t tags;
    return strlen(v) <= TFI_MAX_COND && tfp_etags_parse(v, 1, &tags) == 0 &&
           tags.n + tags.foreign + (size_t)tags.any > 0;
}

/* The conditions and lifetime of a request (tf_request_t, after 0.1). */
static tf_status_t check_cond(const tf_request_t *rq, int op, tf_result_t *res)
{
    int tensor_op = op == TF_OP_GET || op == TF_OP_PUT || op == TF_OP_DELETE;
    if ((rq->if_match || rq->if_none_match) && !tensor_op)
        return tfi_rfail(res, TF_EINVAL, "if_match and if_none_match apply to get, put and "
                                         "delete only");
    if (rq->if_match && !cond_valid(rq->if_match))
        return tfi_rfail(res, TF_EINVAL, "bad if_match (expected \"*\" or an ETag such as "
                                         "\"0123456789abcdef-1\", quotes included)");
    if (rq->if_none_match && !cond_valid(rq->if_none_match))
        return tfi_rfail(res, TF_EINVAL, "bad if_none_match (expected \"*\" or an ETag, quotes "
                                         "included)");
    if (rq->ttl_s && op != TF_OP_PUT)
        return tfi_rfail(res, TF_EINVAL, "ttl_s applies to put only");
    if (rq->ttl_s > TFP_MAX_TTL_S)
        return tfi_rfail(res, TF_EINVAL, "ttl_s must be at most %u seconds (a year)",
                         (unsigned)TFP_MAX_TTL_S);
    return TF_OK;
}

/* Checks a request description before anything is allocated; failures land in res. */
static tf_status_t check_request(const tf_client_t *c, const tf_request_t *rq, int op,
                                 tf_format_t format, tf_transport_t policy, int fd,
                                 tf_result_t *res)
{
    if (c->closing)
        return tfi_rfail(res, TF_EINVAL, "the client is being freed");
    if (c->in_engine)
        return tfi_rfail(res, TF_EINVAL, "no libtfetch calls inside a progress callback");
    if (!tfi_format_valid(format))
        return tfi_rfail(res, TF_EINVAL, "unknown format %d", (int)format);
    if (!tfi_transport_valid(policy))
        return tfi_rfail(res, TF_EINVAL, "unknown transport %d", (int)policy);
    if (c->env_bad[0] && rq->transport == TF_TRANSPORT_DEFAULT)
        return tfi_rfail(res, TF_EINVAL, "%s", c->env_bad);
    if (rq->request_id && (!tfp_request_id_valid(rq->request_id) ||
                           strlen(rq->request_id) > TFP_MAX_REQUEST_ID))
        return tfi_rfail(res, TF_EINVAL, "bad request id (expected [A-Za-z0-9._:-]{1,128})");
    if (rq->user && !tfp_user_id_valid(rq->user))
        return tfi_rfail(res, TF_EINVAL, "bad user id (expected [A-Za-z0-9._-]{1,128})");
    if (op == TFI_OP_CALL)
        return TF_OK;                   /* tfi_call_start checked it */
    if (fd >= 0 && op != TF_OP_GET && op != TF_OP_PUT)
        return tfi_rfail(res, TF_EINVAL, "only a get or a put goes to or from a file");
    if (fd >= 0 && format != TF_FORMAT_SAFETENSORS)
        return tfi_rfail(res, TF_EINVAL, "a file holds a safetensors document");
    if (fd >= 0 && rq->in)
        return tfi_rfail(res, TF_EINVAL, "a put from a file sends no other document");
    int needs_doc = (op == TF_OP_PUT && fd < 0) || op == TF_OP_EXCHANGE;
    if (needs_doc && !rq->in)
        return tfi_rfail(res, TF_EINVAL, "%s needs a document to send", tfi_op_name(op));
    if (!needs_doc && rq->in && fd < 0)
        return tfi_rfail(res, TF_EINVAL, "%s sends no document", tfi_op_name(op));
    if (rq->wait_ms < 0 || (rq->wait_ms > 0 && op != TF_OP_GET))
        return tfi_rfail(res, TF_EINVAL, "wait_ms must be >= 0, and applies to get only");
    tf_status_t cst = check_cond(rq, op, res);
    if (cst != TF_OK)
        return cst;
    if (format == TF_FORMAT_SHUMAI && op == TF_OP_PUT)
        return tfi_rfail(
            res, TF_EINVAL,
            "the shumai format has no put (exchange, or use the safetensors format)");
    if (format == TF_FORMAT_SHUMAI && op == TF_OP_EXCHANGE)
        return tfi_shumai_check(res, rq->in);
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

/* Builds f's operation from the URL and the request: the URL's origin (noted by the
 * client) and the tensor or route its path names, the user and request id it carries, the
 * body. Records TF_EURL when the URL is not an absolute http(s) URL. */
/* A feed call's method and headers into op (TFI_OP_CALL), as HTTP renders its feed block
 * (tfp_uf_feed_http; its path is in the URL already, call_url). */
static tf_status_t build_call(tfi_op_t *op, const tfi_call_t *call)
{
    tfp_uf_feed_http_t h;
    op->wait_ms = 0;                    /* the URL carries any wait itself */
    op->json = call->doc ? NULL : call->json;
    tfp_strcpy(op->what, sizeof(op->what), call->what ? call->what : "feed");
    op->feed = call->feed;
    op->feed_wait_ms = call->wait_ms > 0 ? call->wait_ms : 0;
    if (call->feed_name)
        tfp_strcpy(op->name, sizeof(op->name), call->feed_name);
    if (tfp_uf_feed_http(&call->feed, (uint32_t)op->feed_wait_ms, &h) != TFP_OK)
        return TF_EINVAL;
    if (!(op->method = strdup(h.method)))
        return TF_ENOMEM;
    if (h.nheaders == 0)
        return TF_OK;
    if (!(op->hdrs = calloc(2 * h.nheaders, sizeof(*op->hdrs))))
        return TF_ENOMEM;
    for (size_t i = 0; i < h.nheaders; i++) {
        op->nhdrs = i + 1;
        op->hdrs[2 * i] = strdup(h.hname[i]);
        op->hdrs[2 * i + 1] = strdup(h.hvalue[i]);
        if (!op->hdrs[2 * i] || !op->hdrs[2 * i + 1])
            return TF_ENOMEM;
    }
    return TF_OK;
}

/* What a blocking call asks beyond a tf_request_t: a byte range (tf_get_range), a listing
 * page (tf_list_page). */
typedef struct {
    int range;
    uint64_t first, last;                   /* last UINT64_MAX: to the end */
    const tf_list_opts_t *list;             /* checked, prefix and after never NULL */
} extra_t;

/* tfx_hc_url_split of url, through a one-URL cache on the client: requests in a loop go to
 * one URL, and libcurl's parse of it was ~9.6k instructions of the ~54k an 8-byte exchange
 * costs the client. *key and *path are borrowed from c->split until the next call. Only the
 * thread using the client calls this (tfetch.h: one thread at a time), so no lock; a URL
 * that does not split is not kept. */
void tfi_split_forget(tf_client_t *c)
{
    free(c->split.url);
    free(c->split.key);
    free(c->split.path);
    memset(&c->split, 0, sizeof c->split);
}

static tfx_hc_status_t split_url(tf_client_t *c, const char *url, const char **key,
                                 const char **path, int *query)
{
    if (!url || !c->split.url || strcmp(url, c->split.url) != 0) {
        char *k = NULL, *p = NULL, *u;
        int q = 0;
        tfx_hc_status_t xst = tfx_hc_url_split(url, &k, &p, &q);
        if (xst != TFX_HC_OK)
            return xst;
        if (!(u = strdup(url))) {
            free(k);
            free(p);
            return TFX_HC_ENOMEM;
        }
        tfi_split_forget(c);
        c->split.url = u;
        c->split.key = k;
        c->split.path = p;
        c->split.query = q;
    }
    *key = c->split.key;
    *path = c->split.path;
    *query = c->split.query;
    return TFX_HC_OK;
}

static tf_status_t build_op(tf_client_t *c, tf_fetch_t *f, const tf_request_t *rq, int kind,
                            tf_format_t format, const tfi_call_t *call, const extra_t *x)
{
    tfi_op_t *op = &f->op;
    const char *key = NULL, *path = NULL;

    op->kind = kind;
    op->format = format;
    op->body = rq->in;
    op->wait_ms = rq->wait_ms;
    tfp_strcpy(op->cond.if_match, sizeof(op->cond.if_match), rq->if_match ? rq->if_match : "");
    tfp_strcpy(op->cond.if_none_match, sizeof(op->cond.if_none_match),
               rq->if_none_match ? rq->if_none_match : "");
    op->cond.ttl_s = rq->ttl_s;
    if (x) {
        op->cond.range = x->range;
        op->cond.first = x->first;
        op->cond.last = x->last;
        if (x->list) {
            tfp_strcpy(op->list.prefix, sizeof(op->list.prefix), x->list->prefix);
            tfp_strcpy(op->list.after, sizeof(op->list.after), x->list->after);
            op->list.limit = x->list->limit;
        }
    }
    tfp_strcpy(op->request_id, sizeof(op->request_id), f->result.request_id);
    tfp_strcpy(op->user, sizeof(op->user), rq->user ? rq->user : c->user ? c->user : "");
    if (c->token)
        snprintf(op->auth, sizeof(op->auth), "Bearer %s", c->token);
    tfx_hc_status_t xst = split_url(c, rq->url, &key, &path, &op->query);
    if (xst == TFX_HC_ENOMEM || (xst == TFX_HC_OK && !(op->url = strdup(rq->url))))
        return tfi_rfail(&f->result, TF_ENOMEM, NULL);
    if (xst != TFX_HC_OK)
        return tfi_rfail(&f->result, TF_EURL, "bad URL: %s", rq->url ? rq->url : "(null)");
    f->origin = tfi_origin_get(c, key);
    if (call && build_call(op, call) != TF_OK)
        return tfi_rfail(&f->result, TF_ENOMEM, NULL);
    const char *prefix = kind == TF_OP_EXCHANGE ? "/v1/call/" : "/v1/tensors/";
    size_t n = strlen(prefix);
    if ((kind >= TF_OP_GET && kind <= TF_OP_EXCHANGE) && strncmp(path, prefix, n) == 0 &&
        tfp_name_valid(path + n) && strlen(path + n) < sizeof(op->name))
        tfp_strcpy(op->name, sizeof(op->name), path + n);
    return TF_OK;
}

/* tf_fetch_start for any operation, the internal ones included. */
/* The file of tf_fetch_start_fd in f's operation: a get's reply goes to it; a put's body
 * is read from it, whole (a regular file, its size now). */
static tf_status_t attach_fd(tf_fetch_t *f, int op, int fd)
{
    struct stat st;
    if (op == TF_OP_GET) {
        f->op.sink_fd = fd;
        return TF_OK;
    }
    if (fstat(fd, &st) != 0)
        return tfi_rfail(&f->result, TF_EINVAL, "the body's file: %s", strerror(errno));
    if (!S_ISREG(st.st_mode) || st.st_size <= 0)
        return tfi_rfail(&f->result, TF_EINVAL,
                         "a put from a file needs a regular file, not empty");
    f->op.body_fd = fd;
    f->op.body_fd_len = (uint64_t)st.st_size;
    return TF_OK;
}

static tf_status_t start_fetch(tf_client_t *c, const tf_request_t *rq, int op,
                               const tfi_call_t *call, const extra_t *x, int blocking,
                               int fd, tf_fetch_cb cb, void *ud, tf_fetch_t **out)
{
    tf_result_t res;
    tf_fetch_t *f;
    tf_status_t st;
    tf_format_t format = rq->format != TF_FORMAT_DEFAULT ? rq->format : c->format;
    tf_transport_t policy = rq->transport != TF_TRANSPORT_DEFAULT ? rq->transport : c->transport;
    const tfi_transport_t *via = &tfi_http;

    tfi_new_result(c, &res, op, rq->request_id);
    if (call)
        tfp_strcpy(res.op, sizeof(res.op), call->what ? call->what : "feed");
    if ((st = check_request(c, rq, op, format, policy, fd, &res)) != TF_OK)
        goto refuse;
    if (!(f = calloc(1, sizeof(*f)))) {
        st = tfi_rfail(&res, TF_ENOMEM, NULL);
        goto refuse;
    }
    f->c = c;
    f->cb = cb;
    f->ud = ud;
    f->policy = policy;
    f->held = out != NULL;
    f->blocking = blocking;
    f->result = res;
    f->total_ms = request_timeout(c, rq);
    f->hold_ms = rq->wait_ms > 0 ? rq->wait_ms : 0;
    f->t0_ns = tfx_now_ns();
    f->op.body_fd = f->op.sink_fd = -1;
    if ((st = build_op(c, f, rq, op, format, call, x)) != TF_OK)
        goto free_fetch;
    if (fd >= 0 && (st = attach_fd(f, op, fd)) != TF_OK)
        goto free_fetch;
    f->rt_ms = -1;
    f->result.stages.upgrade = 0;       /* tfi_choose times it when it negotiates */
    st = tfi_choose(c, f, &via);
    if (st != TF_OK)
        goto free_fetch;
    if ((st = tfi_body_render(&f->op, &f->result)) != TF_OK)
        goto free_fetch;
    if (c->verify && f->op.kind == TF_OP_PUT && tfi_body_digest(&f->op) != 0) {
        st = tfi_rfail(&f->result, TF_EIO, "cannot read the body's file to digest it");
        goto free_fetch;
    }
    st = via->start(c, f);
    if (st != TF_OK && via != &tfi_http && f->policy != TF_TRANSPORT_UCX) {
        /* Under policy auto the request goes over HTTP instead, saying why. */
        snprintf(f->result.fallback, sizeof(f->result.fallback), "%.159s", f->result.error);
        f->result.error[0] = '\0';
        f->result.status = TF_EAGAIN;
        st = tfi_http.start(c, f);
    }
    if (st != TF_OK)
        goto free_fetch;
    link_fetch(c, f);
    f->background = call && call->background;
    if (!f->background)
        c->npending++;
    if (out)
        *out = f;
    return TF_OK;

free_fetch:
    res = f->result;
    op_free(&f->op);
    free(f);
refuse:
    c->last = res;
    return st;
}

/* The caller's tf_request_t (shorter from an older header, or longer from a newer one) into
 * *r, checked: TF_OK with *op, else the refusal recorded in c's last result. */
static tf_status_t request_in(tf_client_t *c, const tf_request_t *rq, tf_request_t *r, int *op)
{
    if (!rq)
        return tfi_refuse(c, -1, TF_EINVAL, "no request description");
    if (tfi_struct_in(r, sizeof(*r), rq, rq->size, TFI_REQUEST_SIZE_0_1) != TF_OK)
        return tfi_refuse(c, -1, TF_EINVAL,
                          rq->size > sizeof(*r)
                              ? "tf_request_t sets a field this libtfetch does not know"
                              : "bad tf_request_t size (set it with TF_REQUEST_INIT, or 0)");
    *op = (int)r->op;
    if (*op < TF_OP_GET || *op > TF_OP_EXCHANGE)
        return tfi_refuse(c, -1, TF_EINVAL, "unknown operation");
    return TF_OK;
}

/* tf_fetch_start; driven: the caller waits for it at once (tfi_fetch_start_driven). */
static tf_status_t fetch_start(tf_client_t *c, const tf_request_t *rq, tf_fetch_cb cb,
                               void *user_data, tf_fetch_t **out, int driven, int fd)
{
    if (!c)
        return TF_EINVAL;
    tf_request_t r;
    int op;
    tf_status_t st = request_in(c, rq, &r, &op);
    if (st != TF_OK)
        return st;
    if (!cb && !out)
        return tfi_refuse(c, op, TF_EINVAL, "a request needs a callback or a handle");
    return start_fetch(c, &r, op, NULL, NULL, driven, fd, cb, user_data, out);
}

tf_status_t tf_fetch_start(tf_client_t *c, const tf_request_t *rq, tf_fetch_cb cb,
                           void *user_data, tf_fetch_t **out)
{
    return fetch_start(c, rq, cb, user_data, out, 0, -1);
}

tf_status_t tf_fetch_start_fd(tf_client_t *c, const tf_request_t *rq, int fd, tf_fetch_cb cb,
                              void *user_data, tf_fetch_t **out)
{
    if (c && fd < 0)
        return tfi_refuse(c, -1, TF_EINVAL, "no file descriptor");
    return fetch_start(c, rq, cb, user_data, out, 0, fd);
}

tf_status_t tfi_fetch_start_driven(tf_client_t *c, const tf_request_t *rq, tf_fetch_cb cb,
                                   void *user_data, tf_fetch_t **out)
{
    return fetch_start(c, rq, cb, user_data, out, 1, -1);
}

/* The tf_request_t a feed call rides on: its URL (the feed's, and the path and query HTTP
 * renders its operation with: *url, malloc'd), body document and time limit. TF_OK, or
 * TF_EINVAL for a call that is no feed operation, TF_ENOMEM. */
static tf_status_t call_request(const tfi_call_t *call, tf_request_t *rq, char **url)
{
    tfp_uf_feed_http_t h;
    long wait = call->wait_ms > 0 ? call->wait_ms : 0;
    if (!call->url || tfp_uf_feed_http(&call->feed, (uint32_t)wait, &h) != TFP_OK)
        return TF_EINVAL;
    size_t n = strlen(call->url), k = strlen(h.path);
    if (!(*url = malloc(n + k + 1)))
        return TF_ENOMEM;
    memcpy(*url, call->url, n);
    memcpy(*url + n, h.path, k + 1);
    *rq = (tf_request_t){.url = *url, .in = call->doc, .timeout_ms = call->timeout_ms,
                         .wait_ms = wait, .format = TF_FORMAT_SAFETENSORS,
                         .transport = TF_TRANSPORT_DEFAULT};
    return TF_OK;
}

tf_status_t tfi_call_start(tf_client_t *c, const tfi_call_t *call, tf_fetch_cb cb, void *ud,
                           tf_fetch_t **out)
{
    tf_request_t rq;
    char *url = NULL;
    if (!cb && !out)
        return tfi_refuse(c, TFI_OP_CALL, TF_EINVAL, "a request needs a callback or a handle");
    tf_status_t st = call ? call_request(call, &rq, &url) : TF_EINVAL;
    if (st != TF_OK)
        return tfi_refuse(c, TFI_OP_CALL, st, st == TF_ENOMEM ? NULL : "bad internal call");
    st = start_fetch(c, &rq, TFI_OP_CALL, call, NULL, 0, -1, cb, ud, out);
    free(url);
    return st;
}

/* Drives the client's transports until f completes (or, f NULL, until nothing is pending)
 * or timeout_ms passes (-1: no limit; 0: one pass without waiting). */
static void drive_loop(tf_client_t *c, const tf_fetch_t *f, const int *flag, long timeout_ms)
{
    uint64_t t0 = tfx_now_ms();
    for (;;) {
        tfi_upgrade_wanted(c);
        size_t running = 0;
        for (size_t i = 0; i < c->ntransports; i++)
            c->transports[i]->drain(c);
        for (tfi_source_t *s = c->sources, *next; s; s = next) {
            next = s->next;             /* a drain may remove its own source */
            s->drain(s);
        }
        if (flag ? *flag : f ? f->done : c->npending == 0)
            return;
        if (!f && atomic_exchange(&c->woken, 0))
            return;                     /* tf_client_wakeup: the driver has work to start */
        for (size_t i = 0; i < c->ntransports; i++)
            running += c->transports[i]->running(c);
        for (const tfi_source_t *s = c->sources; s; s = s->next)
            running += s->running(s);
        if (running == 0)
            return;                     /* nothing left that could complete it */
        long wait = -1;
        if (timeout_ms >= 0) {
            wait = timeout_ms - (long)(tfx_now_ms() - t0);
            if (wait <= 0)
                return;
        }
        /* Waiting for one request: its transport may drive it on this thread first (UCX:
         * no hand-off to its progress thread and back); then drain it like any other. */
        if (f && f->via && f->via->wait && f->via->wait(c, (tf_fetch_t *)f, wait))
            continue;
        tfi_wait(c, wait);
    }
}

static void drive(tf_client_t *c, const tf_fetch_t *f, long timeout_ms)
{
    drive_loop(c, f, NULL, timeout_ms);
}

void tfi_drive_until(tf_client_t *c, const int *flag, long timeout_ms)
{
    drive_loop(c, NULL, flag, timeout_ms);
}

void tfi_source_add(tf_client_t *c, tfi_source_t *s)
{
    s->next = c->sources;
    c->sources = s;
}

void tfi_source_remove(tf_client_t *c, tfi_source_t *s)
{
    for (tfi_source_t **p = &c->sources; *p; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            s->next = NULL;
            return;
        }
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
    f->holds++;
    if (f->via)
        f->via->cancel(f->c, f);
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
    if (!f->done && f->c && !f->c->in_engine && f->via) {
        f->holds++;
        f->via->cancel(f->c, f);
        f->holds--;
    }
    settle(f);
}

tf_status_t tf_client_run(tf_client_t *c, long timeout_ms)
{
    if (!c || c->in_cb || c->in_engine)
        return TF_EINVAL;
    /* One pass at least: what runs in the background (a feed's prefetch) progresses too. */
    drive(c, NULL, timeout_ms < 0 ? -1 : timeout_ms);
    return c->npending == 0 ? TF_OK : TF_EAGAIN;
}

/* ---- the blocking calls --------------------------------------------------------------------- */

/* Starts rq without a callback and drives the engine until it completes. tf_client_last
 * then holds its outcome. *out is the completed handle (to free) whenever it started. */
static tf_status_t blocking_call(tf_client_t *c, const tf_request_t *rq, int op,
                                 const tfi_call_t *call, const extra_t *x, tf_fetch_t **out)
{
    if (c->in_cb || c->in_engine)
        return tfi_refuse(c, op, TF_EINVAL,
                          "blocking calls are not allowed inside a callback (start a request)");
    tf_fetch_t *f = NULL;
    tf_status_t st = start_fetch(c, rq, op, call, x, 1, -1, NULL, NULL, &f);
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

static tf_status_t blocking(tf_client_t *c, const tf_request_t *rq, int op, tf_fetch_t **out)
{
    return blocking_call(c, rq, op, NULL, NULL, out);
}

tf_status_t tfi_call(tf_client_t *c, const tfi_call_t *call, tf_fetch_t **out)
{
    tf_request_t rq;
    char *url = NULL;
    tf_status_t st = call ? call_request(call, &rq, &url) : TF_EINVAL;
    if (st != TF_OK)
        return tfi_refuse(c, TFI_OP_CALL, st, st == TF_ENOMEM ? NULL : "bad internal call");
    st = blocking_call(c, &rq, TFI_OP_CALL, call, NULL, out);
    free(url);
    return st;
}

tf_status_t tf_get(tf_client_t *c, const char *url, long wait_ms, tf_doc_t **out)
{
    if (!c)
        return TF_EINVAL;
    if (!out)
        return tfi_refuse(c, TF_OP_GET, TF_EINVAL, NULL);
    tf_request_t rq = {.op = TF_OP_GET, .url = url, .wait_ms = wait_ms};
    tf_fetch_t *f = NULL;
    tf_status_t st = blocking(c, &rq, TF_OP_GET, &f);
    if (st == TF_OK)
        *out = tf_fetch_take_doc(f);
    tf_fetch_free(f);
    return st;
}

tf_status_t tf_request(tf_client_t *c, const tf_request_t *rq, tf_doc_t **out)
{
    if (!c)
        return TF_EINVAL;
    tf_request_t r;
    int op;
    tf_status_t st = request_in(c, rq, &r, &op);
    if (st != TF_OK)
        return st;
    tf_fetch_t *f = NULL;
    st = blocking(c, &r, op, &f);
    if (st == TF_OK && out)
        *out = tf_fetch_take_doc(f);
    tf_fetch_free(f);
    return st;
}

/* The largest offset a Range header carries: proto/httpcond.c reads at most 19 digits. */
#define RANGE_MAX 9999999999999999999ull

tf_status_t tf_get_range(tf_client_t *c, const char *url, uint64_t offset, uint64_t length,
                         void **buf, size_t *len, uint64_t *total)
{
    if (!c)
        return TF_EINVAL;
    if (!buf || !len)
        return tfi_refuse(c, TF_OP_GET, TF_EINVAL, NULL);
    if (offset > RANGE_MAX)
        return tfi_refuse(c, TF_OP_GET, TF_ERANGE, "offset past any document");
    extra_t x = {.range = 1, .first = offset, .last = UINT64_MAX};
    if (length && length - 1 <= RANGE_MAX - offset)
        x.last = offset + length - 1;
    tf_request_t rq = {.op = TF_OP_GET, .url = url};
    tf_fetch_t *f = NULL;
    tf_status_t st = blocking_call(c, &rq, TF_OP_GET, NULL, &x, &f);
    if (f && f->reply.has_total && total && (st == TF_OK || st == TF_ERANGE))
        *total = f->reply.total;
    if (st == TF_OK) {
        *buf = f->text;
        *len = f->text_len;
        f->text = NULL;
    }
    tf_fetch_free(f);
    return st;
}

tf_status_t tf_put(tf_client_t *c, const char *url, const tf_doc_t *in)
{
    if (!c)
        return TF_EINVAL;
    if (!in)
        return tfi_refuse(c, TF_OP_PUT, TF_EINVAL, NULL);
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
        tfi_refuse(c, -1, TF_EINVAL, "tf_fetch needs a document to send or a place for one");
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
        tfp_strcpy(c->last.error, sizeof(c->last.error), tf_strerror(st));
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
        return tfi_refuse(c, TFI_OP_LIST, TF_EINVAL, NULL);
    tf_request_t rq = {.url = base};
    tf_fetch_t *f = NULL;
    tf_status_t st = blocking(c, &rq, TFI_OP_LIST, &f);
    if (st != TF_OK)
        goto free_fetch;
    tfp_status_t pst = tfp_parse_listing(f->text, f->text_len, &pe, &pn, &err);
    if (pst == TFP_ENOMEM) {
        st = fail(c, TF_ENOMEM, NULL);
        goto free_fetch;
    }
    if (pst != TFP_OK) {
        st = fail(c, TF_EPROTO, "bad listing: %s", f->text_len ? err.msg : "empty body");
        goto free_fetch;
    }
    st = copy_listing(c, pe, pn, entries, n);
    tfp_listing_free(pe, pn);
free_fetch:
    tf_fetch_free(f);
    return st;
}

/* prefix and after: name characters [A-Za-z0-9._-], at most a name's length. */
static int list_chars(const char *s)
{
    size_t n = strlen(s);
    if (n > TFP_MAX_TENSOR_NAME)
        return 0;
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* The listing in f's reply, and its next page's first name (NULL when it is the last). */
static tf_status_t read_page(tf_client_t *c, const tf_fetch_t *f, tf_entry_t **entries,
                             size_t *n, char **next)
{
    tfp_list_entry_t *pe = NULL;
    size_t pn = 0;
    char nx[TFP_MAX_TENSOR_NAME + 1];
    tfp_err_t err;
    tfp_status_t pst = tfp_parse_listing(f->text, f->text_len, &pe, &pn, &err);
    if (pst == TFP_OK && next)
        pst = tfp_parse_listing_next(f->text, f->text_len, nx, &err);
    if (pst == TFP_ENOMEM)
        goto oom;
    if (pst != TFP_OK) {
        tfp_listing_free(pe, pn);
        return fail(c, TF_EPROTO, "bad listing: %s", f->text_len ? err.msg : "empty body");
    }
    char *copy = NULL;
    if (next && nx[0] && !(copy = strdup(nx)))
        goto oom;
    tf_status_t st = copy_listing(c, pe, pn, entries, n);
    tfp_listing_free(pe, pn);
    if (st != TF_OK) {
        free(copy);
        return st;
    }
    if (next)
        *next = copy;
    return TF_OK;

oom:
    tfp_listing_free(pe, pn);
    return fail(c, TF_ENOMEM, NULL);
}

tf_status_t tf_list_page(tf_client_t *c, const char *base, const tf_list_opts_t *opts,
                         tf_entry_t **entries, size_t *n, char **next)
{
    static const tf_list_opts_t all = TF_LIST_OPTS_INIT;
    tf_list_opts_t o;
    if (!c)
        return TF_EINVAL;
    if (!entries || !n)
        return tfi_refuse(c, TFI_OP_LIST, TF_EINVAL, NULL);
    if (!opts)
        opts = &all;
    if (tfi_struct_in(&o, sizeof(o), opts, opts->size, sizeof(o)) != TF_OK)
        return tfi_refuse(c, TFI_OP_LIST, TF_EINVAL,
                          "bad tf_list_opts_t size (set it with TF_LIST_OPTS_INIT, or 0)");
    if (!o.prefix)
        o.prefix = "";
    if (!o.after)
        o.after = "";
    if (!list_chars(o.prefix) || !list_chars(o.after))
        return tfi_refuse(c, TFI_OP_LIST, TF_EINVAL,
                          "prefix and after are name characters [A-Za-z0-9._-], at most 255");
    if (o.limit > 1000000)
        return tfi_refuse(c, TFI_OP_LIST, TF_EINVAL, "limit is at most 1000000");
    extra_t x = {.list = &o};
    tf_request_t rq = {.url = base};
    tf_fetch_t *f = NULL;
    tf_status_t st = blocking_call(c, &rq, TFI_OP_LIST, NULL, &x, &f);
    if (st == TF_OK)
        st = read_page(c, f, entries, n, next);
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
        return tfi_refuse(c, TFI_OP_INFO, TF_EINVAL, NULL);
    tf_request_t rq = {.url = base};
    tf_fetch_t *f = NULL;
    tf_status_t st = blocking(c, &rq, TFI_OP_INFO, &f);
    if (st == TF_OK) {
        *json = f->text;
        f->text = NULL;
    }
    tf_fetch_free(f);
    return st;
}
