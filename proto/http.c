/* http.c - an HTTP request's line and headers -> the operation it asks for (op.h): path
 * routing, media types, ids, wait, and the description of a document body. Pure; any thread.
 */
#include "config.h"
#include "proto/http.h"
#include "proto/auth.h"
#include "proto/ids.h"
#include "proto/raw.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Media type token at s (up to ';', ',' or end), spaces trimmed. */
static tfp_media_t classify(const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    static const struct { const char *t; tfp_media_t m; } types[] = {
        {"application/x-safetensors", TFP_MEDIA_SAFETENSORS},
        {"application/octet-stream", TFP_MEDIA_OCTET},
        {"application/json", TFP_MEDIA_JSON},
        {"application/x-www-form-urlencoded", TFP_MEDIA_FORM},
        {"*/*", TFP_MEDIA_ANY},
        {"application/*", TFP_MEDIA_ANY},
    };
    if (n == 0)
        return TFP_MEDIA_NONE;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strlen(types[i].t) == n && strncasecmp(s, types[i].t, n) == 0)
            return types[i].m;
    return TFP_MEDIA_OTHER;
}

tfp_media_t tfp_media_parse(const char *ct)
{
    if (!ct)
        return TFP_MEDIA_NONE;
    return classify(ct, strcspn(ct, ";"));
}

/* The q parameter among an Accept item's parameters (p..end, after the type), in
 * thousandths: q=0 is 0, q=0.5 is 500; absent or malformed: 1000 (RFC 9110 12.4.2). */
static unsigned item_q(const char *p, const char *end)
{
    while (p < end) {
        p += strspn(p, "; \t");
        size_t n = strcspn(p, ";,");
        if (p + n > end)
            n = (size_t)(end - p);
        if (n >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
            const char *v = p + 2, *ve = p + n;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            unsigned q = 0, scale = 1000;
            if (v < ve && (*v == '0' || *v == '1')) {
                q = (unsigned)(*v++ - '0') * 1000;
                if (v < ve && *v == '.')
                    for (v++; v < ve && scale > 1 && *v >= '0' && *v <= '9'; v++)
                        q += (unsigned)(*v - '0') * (scale /= 10);
                if (v == ve && q <= 1000)
                    return q;
            }
            return 1000;
        }
        p += n;
    }
    return 1000;
}

tfp_media_t tfp_accept_pick(const char *accept)
{
    if (!accept)
        return TFP_MEDIA_NONE;
    const char *p = accept;
    int any_listed = 0, st_refused = 0;
    unsigned best_q = 0;
    tfp_media_t best = TFP_MEDIA_NONE;
    while (*p) {
        size_t item = strcspn(p, ",");
        size_t type = strcspn(p, ";,");
        tfp_media_t m = classify(p, type < item ? type : item);
        if (m != TFP_MEDIA_NONE)
            any_listed = 1;
        if (m == TFP_MEDIA_SAFETENSORS || m == TFP_MEDIA_OCTET || m == TFP_MEDIA_JSON ||
            m == TFP_MEDIA_ANY) {
            unsigned q = type < item ? item_q(p + type, p + item) : 1000;
            if (q == 0 && m == TFP_MEDIA_SAFETENSORS)
                st_refused = 1;
            if (q > best_q) {           /* ties: the first listed */
                best_q = q;
                best = m;
            }
        }
        p += item;
        if (*p == ',')
            p++;
    }
    /* "anything but safetensors": the wildcard must not mean the default, safetensors. */
    if (best == TFP_MEDIA_ANY && st_refused)
        best = TFP_MEDIA_JSON;
    if (best != TFP_MEDIA_NONE)
        return best;
    return any_listed ? TFP_MEDIA_OTHER : TFP_MEDIA_NONE;
}

/* Copies one path segment (up to '/' or the end) into dst if it is a valid name. Returns
 * the rest of the path (at the '/' or the NUL), or NULL if the segment is not a valid name. */
static const char *segment(const char *p, char *dst, size_t size)
{
    size_t n = strcspn(p, "/");
    if (n == 0 || n >= size)
        return NULL;
    memcpy(dst, p, n);
    dst[n] = '\0';
    return tfp_name_valid(dst) ? p + n : NULL;
}

/* Matches "prefix/" at the start of path; returns what follows, or NULL. */
static const char *prefixed(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(path, prefix, n) == 0 && path[n] == '/' ? path + n + 1 : NULL;
}

/* What follows /v1/feeds/: F, F/infeed|outfeed|done|reset,
 * F/devices/D/infeed|pop|ack|detach|outfeed. */
static tfp_path_t classify_feed(const char *rest, tfp_path_info_t *o)
{
    static const struct { const char *tail; tfp_path_t p; } whole[] = {
        {"", TFP_PATH_FEED}, {"/infeed", TFP_PATH_FEED_INFEED},
        {"/outfeed", TFP_PATH_FEED_OUTFEED}, {"/done", TFP_PATH_FEED_DONE},
        {"/reset", TFP_PATH_FEED_RESET},
    }, dev[] = {
        {"/infeed", TFP_PATH_FEED_DEV_INFEED}, {"/pop", TFP_PATH_FEED_DEV_POP},
        {"/ack", TFP_PATH_FEED_DEV_ACK}, {"/detach", TFP_PATH_FEED_DEV_DETACH},
        {"/outfeed", TFP_PATH_FEED_DEV_OUTFEED},
    };
    if (!(rest = segment(rest, o->name, sizeof o->name)))
        return TFP_PATH_BAD_NAME;
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
        if (strcmp(rest, whole[i].tail) == 0)
            return whole[i].p;
    if (!(rest = prefixed(rest, "/devices")))
        return TFP_PATH_UNKNOWN;
    if (!(rest = segment(rest, o->sub, sizeof o->sub)))
        return TFP_PATH_BAD_NAME;
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (strcmp(rest, dev[i].tail) == 0)
            return dev[i].p;
    return TFP_PATH_UNKNOWN;
}

static tfp_path_t classify_path(const char *path, tfp_path_info_t *o)
{
    const char *rest;
    if (strcmp(path, "/healthz") == 0)
        return TFP_PATH_HEALTHZ;
    if (strcmp(path, "/readyz") == 0)
        return TFP_PATH_READYZ;
    if (strcmp(path, "/metrics") == 0)
        return TFP_PATH_METRICS;
    if (strcmp(path, "/v1/info") == 0)
        return TFP_PATH_INFO;
    if (strcmp(path, "/v1/tensors") == 0 || strcmp(path, "/v1/tensors/") == 0)
        return TFP_PATH_TENSORS;
    if (strcmp(path, "/v1/sessions/self") == 0)
        return TFP_PATH_SESSION_SELF;
    if (strcmp(path, "/v1/workers") == 0)
        return TFP_PATH_WORKERS;
    if (strcmp(path, "/v1/upgrade") == 0)
        return TFP_PATH_UPGRADE;
    if (strcmp(path, "/v1/feeds") == 0 || strcmp(path, "/v1/feeds/") == 0)
        return TFP_PATH_FEEDS;
    if ((rest = prefixed(path, "/v1/feeds")))
        return classify_feed(rest, o);
    if ((rest = prefixed(path, "/v1/tensors"))) {
        rest = segment(rest, o->name, sizeof o->name);
        return rest && !*rest ? TFP_PATH_TENSOR : TFP_PATH_BAD_NAME;
    }
    if ((rest = prefixed(path, "/v1/call"))) {
        rest = segment(rest, o->name, sizeof o->name);
        return rest && !*rest ? TFP_PATH_CALL : TFP_PATH_BAD_NAME;
    }
    if ((rest = prefixed(path, "/v1/workers"))) {
        rest = segment(rest, o->name, sizeof o->name);
        if (!rest)
            return TFP_PATH_BAD_NAME;
        if (!*rest)
            return TFP_PATH_WORKER;
        if (strcmp(rest, "/next") == 0)
            return TFP_PATH_WORKER_NEXT;
        if ((rest = prefixed(rest, "/calls"))) {
            rest = segment(rest, o->sub, sizeof o->sub);
            return rest && !*rest ? TFP_PATH_WORKER_REPLY : TFP_PATH_BAD_NAME;
        }
        return TFP_PATH_UNKNOWN;
    }
    if (strncmp(path, "/v1/", 4) == 0 || strcmp(path, "/v1") == 0)
        return TFP_PATH_UNKNOWN;
    /* Shumai: a single valid name segment. */
    if (path[0] == '/' && (rest = segment(path + 1, o->name, sizeof o->name)) && !*rest)
        return TFP_PATH_SHUMAI;
    return TFP_PATH_UNKNOWN;
}

tfp_path_t tfp_path_parse(const char *path, tfp_path_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->kind = path ? classify_path(path, out) : TFP_PATH_UNKNOWN;
    if (out->kind == TFP_PATH_UNKNOWN || out->kind == TFP_PATH_BAD_NAME)
        out->name[0] = out->sub[0] = '\0';
    return out->kind;
}

/* ---- request -> operation ------------------------------------------------------------- */

static int method_is(const tfp_http_req_t *in, const char *m)
{
    return in->method && strcmp(in->method, m) == 0;
}

/* Shumai: "GET /{name} fetches; POST (or any method with a body) /{name} is an exchange". */
static int shumai_has_body(const tfp_http_req_t *in)
{
    return in->content_length > 0 || (in->content_length < 0 && in->chunked) ||
           method_is(in, "POST");
}

/* The operation the path and method point at: a refused request is counted there too. */
static tfp_op_kind_t kind_of(tfp_path_t p, const tfp_http_req_t *in)
{
    switch (p) {
    case TFP_PATH_HEALTHZ: return TFP_OP_HEALTH;
    case TFP_PATH_READYZ: return TFP_OP_READY;
    case TFP_PATH_METRICS: return TFP_OP_METRICS;
    case TFP_PATH_INFO: return TFP_OP_INFO;
    case TFP_PATH_TENSORS: return TFP_OP_TENSOR_LIST;
    case TFP_PATH_TENSOR:
        if (method_is(in, "PUT"))
            return TFP_OP_TENSOR_PUT;
        if (method_is(in, "DELETE"))
            return TFP_OP_TENSOR_DELETE;
        return TFP_OP_TENSOR_GET;
    case TFP_PATH_CALL: return TFP_OP_CALL;
    case TFP_PATH_SESSION_SELF: return TFP_OP_SESSION_END;
    case TFP_PATH_WORKERS: return TFP_OP_WORKER_REGISTER;
    case TFP_PATH_WORKER: return TFP_OP_WORKER_LEAVE;
    case TFP_PATH_WORKER_NEXT: return TFP_OP_WORKER_POLL;
    case TFP_PATH_WORKER_REPLY: return TFP_OP_WORKER_REPLY;
    case TFP_PATH_UPGRADE: return TFP_OP_UPGRADE;
    case TFP_PATH_SHUMAI: return shumai_has_body(in) ? TFP_OP_SHUMAI_CALL : TFP_OP_SHUMAI_GET;
    case TFP_PATH_FEEDS: return TFP_OP_FEED_LIST;
    case TFP_PATH_FEED:
        if (method_is(in, "PUT"))
            return TFP_OP_FEED_DECLARE;
        if (method_is(in, "DELETE"))
            return TFP_OP_FEED_DELETE;
        return TFP_OP_FEED_STATS;
    case TFP_PATH_FEED_INFEED:
    case TFP_PATH_FEED_DEV_INFEED: return TFP_OP_FEED_INFEED;
    case TFP_PATH_FEED_OUTFEED: return TFP_OP_FEED_OUTFEED_GET;
    case TFP_PATH_FEED_DONE: return TFP_OP_FEED_DONE;
    case TFP_PATH_FEED_RESET: return TFP_OP_FEED_RESET;
    case TFP_PATH_FEED_DEV_POP: return TFP_OP_FEED_POP;
    case TFP_PATH_FEED_DEV_ACK: return TFP_OP_FEED_ACK;
    case TFP_PATH_FEED_DEV_DETACH: return TFP_OP_FEED_DETACH;
    case TFP_PATH_FEED_DEV_OUTFEED: return TFP_OP_FEED_OUTFEED_PUSH;
    default: return TFP_OP_NONE;
    }
}

/* The methods a path allows; NULL for any (Shumai's exchange: whatever carries a body). */
static const char *allowed(tfp_path_t p, tfp_op_kind_t k)
{
    switch (p) {
    case TFP_PATH_HEALTHZ:
    case TFP_PATH_READYZ:
    case TFP_PATH_METRICS:
    case TFP_PATH_INFO:
    case TFP_PATH_TENSORS:
    case TFP_PATH_FEEDS:
    case TFP_PATH_FEED_OUTFEED: return "GET,HEAD";
    case TFP_PATH_TENSOR:
    case TFP_PATH_FEED: return "GET,HEAD,PUT,DELETE";
    case TFP_PATH_FEED_INFEED:
    case TFP_PATH_FEED_DONE:
    case TFP_PATH_FEED_RESET:
    case TFP_PATH_FEED_DEV_INFEED:
    case TFP_PATH_FEED_DEV_POP:
    case TFP_PATH_FEED_DEV_ACK:
    case TFP_PATH_FEED_DEV_DETACH:
    case TFP_PATH_FEED_DEV_OUTFEED:
    case TFP_PATH_CALL:
    case TFP_PATH_WORKERS:
    case TFP_PATH_WORKER_REPLY:
    case TFP_PATH_UPGRADE: return "POST";
    case TFP_PATH_SESSION_SELF:
    case TFP_PATH_WORKER: return "DELETE";
    case TFP_PATH_WORKER_NEXT: return "GET";
    case TFP_PATH_SHUMAI: return k == TFP_OP_SHUMAI_CALL ? NULL : "GET,HEAD,POST";
    default: return NULL;
    }
}

static int method_in(const char *method, const char *list)
{
    char l[64], tok[24];
    snprintf(l, sizeof l, ",%s,", list);
    snprintf(tok, sizeof tok, ",%.16s,", method ? method : "");
    return strstr(l, tok) != NULL;
}

static tfp_status_t take_ids(const tfp_http_req_t *in, tfp_op_t *op, tfp_op_err_t *e)
{
    /* Credentials are never refused here: with authentication off they are ignored, with it
     * on the router answers 401 for a bad one (after the path is known, for the metrics). */
    const char *tok;
    size_t tok_len;
    op->who.cred = (tfp_cred_t)tfp_bearer_parse(in->authorization, &tok, &tok_len);
    if (op->who.cred == TFP_CRED_BEARER) {
        tfp_auth_hash(tok, tok_len, op->who.token_hash);
    } else if (op->who.cred == TFP_CRED_NONE && in->cert_subject) {
        op->who.cred = TFP_CRED_CERT;           /* no token: the client certificate */
        tfp_auth_cert_hash(in->cert_subject, op->who.token_hash);
    } else if (op->who.cred == TFP_CRED_NONE && in->cert_bad) {
        op->who.cred = TFP_CRED_CERT_BAD;
    }
    if (in->request_id) {
        if (!tfp_request_id_valid(in->request_id))
            return tfp_op_fail(e, TFP_EBADREQ,
                               "Tfetch-Request-Id must match [A-Za-z0-9._:-]{1,128}");
        snprintf(op->who.request_id, sizeof op->who.request_id, "%s", in->request_id);
    }
    if (in->user) {
        if (!tfp_user_id_valid(in->user))
            return tfp_op_fail(e, TFP_EBADREQ, "Tfetch-User must match [A-Za-z0-9._-]{1,128}");
        snprintf(op->who.user, sizeof op->who.user, "%s", in->user);
    }
    if (in->user_principal) {
        if (!tfp_user_id_valid(in->user_principal))
            return tfp_op_fail(e, TFP_EBADREQ,
                               "Tfetch-User-Principal must match [A-Za-z0-9._-]{1,128}");
        snprintf(op->who.user_principal, sizeof op->who.user_principal, "%s",
                 in->user_principal);
    }
    if (in->worker_secret) {
        if (!tfp_worker_secret_valid(in->worker_secret))
            return tfp_op_fail(e, TFP_EBADREQ, "Tfetch-Worker-Secret must be 32 lowercase "
                               "hexadecimal digits");
        memcpy(op->worker_secret, in->worker_secret, TFP_WORKER_SECRET_LEN + 1);
    }
    return TFP_OK;
}

/* A name's characters, up to a name's length; empty allowed (a prefix of every name). */
static int name_chars(const char *s)
{
    size_t n = strlen(s);
    if (n > TFP_MAX_TENSOR_NAME)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
            return 0;
    return 1;
}

/* GET /v1/tensors?prefix=P&after=NAME&limit=N: a page of the listing. */
static tfp_status_t take_list(const tfp_http_req_t *in, tfp_op_t *op, tfp_op_err_t *e)
{
    if (in->prefix && !name_chars(in->prefix))
        return tfp_op_fail(e, TFP_EBADREQ, "prefix must be name characters [A-Za-z0-9._-], "
                           "at most 255");
    if (in->after && !name_chars(in->after))
        return tfp_op_fail(e, TFP_EBADREQ, "after must be a name [A-Za-z0-9._-]{0,255}");
    if (in->limit && (tfp_parse_u64(in->limit, 1000000, &op->list.limit) != 0 ||
                      op->list.limit == 0))
        return tfp_op_fail(e, TFP_EBADREQ, "limit must be a number from 1 to 1000000, got "
                           "'%.32s'", in->limit);
    snprintf(op->list.prefix, sizeof op->list.prefix, "%s", in->prefix ? in->prefix : "");
    snprintf(op->list.after, sizeof op->list.after, "%s", in->after ? in->after : "");
    return TFP_OK;
}

/* If-Match / If-None-Match (malformed: 400, never ignored: they guard writes), If-Range and
 * Range (malformed: ignored, the whole document is sent). */
static tfp_status_t take_cond(const tfp_http_req_t *in, tfp_op_t *op, tfp_op_err_t *e)
{
    if (tfp_etags_parse(in->if_match, 0, &op->cond.if_match) != 0)
        return tfp_op_fail(e, TFP_EBADREQ, "If-Match must be * or a list of at most %d quoted "
                           "entity tags", TFP_ETAGS_MAX);
    if (tfp_etags_parse(in->if_none_match, 1, &op->cond.if_none_match) != 0)
        return tfp_op_fail(e, TFP_EBADREQ, "If-None-Match must be * or a list of at most %d "
                           "quoted entity tags", TFP_ETAGS_MAX);
    if (op->kind != TFP_OP_TENSOR_GET)
        return TFP_OK;
    tfp_range_parse(in->range, &op->cond.range);
    if (in->if_range && op->cond.range.kind != TFP_RANGE_NONE &&
        (tfp_etags_parse(in->if_range, 0, &op->cond.if_range) != 0 ||
         op->cond.if_range.any || op->cond.if_range.n + op->cond.if_range.foreign != 1))
        op->cond.range.kind = TFP_RANGE_NONE;   /* a date, or not one strong tag: send it all */
    return TFP_OK;
}

static tfp_status_t take_wait(const tfp_http_req_t *in, tfp_op_t *op, tfp_op_err_t *e)
{
    if (in->wait && tfp_parse_u64(in->wait, UINT64_MAX / 2, &op->wait_ms) != 0)
        return tfp_op_fail(e, TFP_EBADREQ, "wait must be a number of milliseconds, got '%.32s'",
                           in->wait);
    return TFP_OK;
}

/* Prefer's wait preference (RFC 7240's syntax; the value is milliseconds here): 1 and *ms,
 * 0 when absent, -1 when its value is not a number. Other preferences are ignored. */
static int prefer_wait(const char *p, uint64_t *ms)
{
    while (p && *p) {
        p += strspn(p, " \t,");
        size_t n = strcspn(p, ",");
        size_t tok = strcspn(p, ";,");
        if (tok > n)
            tok = n;
        if (tok >= 4 && strncasecmp(p, "wait", 4) == 0) {
            const char *v = p + 4;
            v += strspn(v, " \t");
            if (*v == '=') {
                v++;
                v += strspn(v, " \t");
                char num[24];
                size_t len = strcspn(v, " \t;,");
                if (len == 0 || len >= sizeof num)
                    return -1;
                memcpy(num, v, len);
                num[len] = '\0';
                return tfp_parse_u64(num, UINT64_MAX / 2, ms) == 0 ? 1 : -1;
            }
        }
        p += n;
    }
    return 0;
}

static tfp_status_t take_position(const char *v, const char *what, uint64_t *out, int *has,
                                  tfp_op_err_t *e)
{
    if (!v)
        return TFP_OK;
    if (tfp_parse_u64(v, UINT64_MAX / 2, out) != 0)
        return tfp_op_fail(e, TFP_EBADREQ, "%s must be a position (a non-negative integer), "
                           "got '%.32s'", what, v);
    if (has)
        *has = 1;
    return TFP_OK;
}

/* The feed operations' stream ids, positions and Prefer: wait. */
static tfp_status_t take_feed(const tfp_http_req_t *in, tfp_op_t *op, tfp_op_err_t *e)
{
    tfp_op_feed_t *f = &op->feed;
    tfp_op_kind_t k = op->kind;
    int pushes = k == TFP_OP_FEED_INFEED || k == TFP_OP_FEED_OUTFEED_PUSH;
    int consumes = k == TFP_OP_FEED_POP || k == TFP_OP_FEED_ACK || k == TFP_OP_FEED_DETACH;
    if (pushes && in->seq && (tfp_parse_u64(in->seq, UINT64_MAX / 2, &f->seq) != 0 || !f->seq))
        return tfp_op_fail(e, TFP_EBADREQ, "Tfetch-Seq must be a sequence number from 1, got "
                           "'%.32s'", in->seq);
    if (pushes && in->producer) {
        if (!tfp_user_id_valid(in->producer))
            return tfp_op_fail(e, TFP_EBADREQ, "Tfetch-Producer must match "
                               "[A-Za-z0-9._-]{1,128}");
        snprintf(f->producer, sizeof f->producer, "%s", in->producer);
    }
    if (consumes) {
        if (!in->consumer)
            return tfp_op_fail(e, TFP_EBADREQ, "a consumer names itself: Tfetch-Consumer is "
                               "required");
        if (!tfp_user_id_valid(in->consumer))
            return tfp_op_fail(e, TFP_EBADREQ, "Tfetch-Consumer must match "
                               "[A-Za-z0-9._-]{1,128}");
        snprintf(f->consumer, sizeof f->consumer, "%s", in->consumer);
    }
    if (pushes) {
        int w = prefer_wait(in->prefer, &op->wait_ms);
        if (w < 0)
            return tfp_op_fail(e, TFP_EBADREQ, "Prefer: wait= must be a number of "
                               "milliseconds");
    }
    tfp_status_t st = TFP_OK;
    if (in->rewind && k != TFP_OP_FEED_POP)
        return tfp_op_fail(e, TFP_EBADREQ, "rewind= belongs to pop only");
    if (in->rewind && strcmp(in->rewind, "1") != 0 && strcmp(in->rewind, "0") != 0)
        return tfp_op_fail(e, TFP_EBADREQ, "rewind must be 1 or 0, got '%.32s'", in->rewind);
    f->rewind = in->rewind && in->rewind[0] == '1';
    if (k == TFP_OP_FEED_POP || k == TFP_OP_FEED_DETACH)
        st = take_position(in->ack, "ack", &f->ack, &f->has_ack, e);
    else if (k == TFP_OP_FEED_ACK) {
        if (!in->through)
            return tfp_op_fail(e, TFP_EBADREQ, "ack needs ?through=POSITION");
        st = take_position(in->through, "through", &f->ack, &f->has_ack, e);
    } else if (k == TFP_OP_FEED_OUTFEED_GET)
        st = take_position(in->after, "after", &f->after, NULL, e);
    return st;
}

/* A document body: safetensors, a raw tensor (Tfetch-Dtype and Tfetch-Shape) or, on
 * Shumai's path, a Shumai message. */
static tfp_status_t take_doc_body(const tfp_http_req_t *in, tfp_op_t *op, tfp_op_err_t *e)
{
    tfp_op_body_t *b = &op->body;
    tfp_err_t err;
    tfp_status_t st;

    if (b->media == TFP_MEDIA_OTHER || b->media == TFP_MEDIA_ANY || b->media == TFP_MEDIA_JSON)
        return tfp_op_fail(e, TFP_EMEDIATYPE, "Content-Type must be application/x-safetensors, "
                           "or application/octet-stream with Tfetch-Dtype and Tfetch-Shape");
    if ((st = tfp_op_check_length(op, in->max_body, e)) != TFP_OK)
        return st;
    if (!in->dtype && !in->shape) {
        b->kind = op->kind == TFP_OP_SHUMAI_CALL && b->media != TFP_MEDIA_SAFETENSORS
                      ? TFP_BODY_SHUMAI : TFP_BODY_SAFETENSORS;
        return TFP_OK;
    }
    if (b->media == TFP_MEDIA_SAFETENSORS)
        return tfp_op_fail(e, TFP_EBADREQ, "Tfetch-Dtype/Tfetch-Shape describe a raw body; "
                           "a safetensors body carries its own header");
    /* A raw PUT's tensor takes the path's name, which safetensors may not reserve. */
    if (op->kind == TFP_OP_TENSOR_PUT && strcmp(op->name, "__metadata__") == 0)
        return tfp_op_fail(e, TFP_EBADREQ, "a raw body's tensor is named after the path, and "
                           "safetensors reserves '__metadata__': send a safetensors body");
    uint64_t len = b->length >= 0 ? (uint64_t)b->length : TFP_RAW_LEN_UNKNOWN;
    if (tfp_raw_check(in->dtype, in->shape, len, &b->dtype, &b->rank, b->shape, &err) != TFP_OK ||
        tfp_shape_nbytes(b->dtype, b->rank, b->shape, &b->nbytes, &err) != TFP_OK)
        return tfp_op_fail(e, err.code, "%s", err.msg);
    if (b->nbytes > in->max_body)
        return tfp_op_fail(e, TFP_ETOOBIG, "a %s tensor of shape [%s] is %llu bytes, above the "
                           "limit of %llu", in->dtype, in->shape, (unsigned long long)b->nbytes,
                           (unsigned long long)in->max_body);
    b->kind = TFP_BODY_RAW;
    return TFP_OK;
}

static tfp_status_t take_body(const tfp_http_req_t *in, tfp_op_t *op, tfp_op_err_t *e)
{
    switch (op->kind) {
    case TFP_OP_TENSOR_PUT:
    case TFP_OP_CALL:
    case TFP_OP_SHUMAI_CALL:
    case TFP_OP_FEED_INFEED:
    case TFP_OP_FEED_OUTFEED_PUSH:
        return take_doc_body(in, op, e);
    case TFP_OP_WORKER_REPLY:                       /* an answer, or a JSON error */
        if (op->body.media != TFP_MEDIA_JSON)
            return take_doc_body(in, op, e);
        op->body.kind = TFP_BODY_JSON;
        return TFP_OK;
    case TFP_OP_WORKER_REGISTER:
    case TFP_OP_UPGRADE:
    case TFP_OP_FEED_DECLARE:
        op->body.kind = TFP_BODY_JSON;
        return TFP_OK;
    default:
        return TFP_OK;
    }
}

/* A decoded path with a control character: a name it cut or a line it could end. */
static int has_control(const char *path)
{
    for (const unsigned char *p = (const unsigned char *)path; p && *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return 1;
    return 0;
}

/* The client's protocol range, and whether it meets the server's. The operations a newcomer
 * finds out with (health, readiness, metrics, info) answer every version. */
static tfp_status_t take_protocol(const tfp_http_req_t *in, tfp_op_t *op, tfp_op_err_t *e)
{
    tfp_err_t err;
    if (in->protocol &&
        tfp_proto_parse(in->protocol, strlen(in->protocol), &op->who.protocol, &err) != TFP_OK)
        return tfp_op_fail(e, TFP_EBADREQ, "Tfetch-Protocol: %s", err.msg);
    if (in->ours.min == 0 || op->kind == TFP_OP_HEALTH || op->kind == TFP_OP_READY ||
        op->kind == TFP_OP_METRICS || op->kind == TFP_OP_INFO)
        return TFP_OK;
    tfp_proto_range_t peer = in->protocol ? op->who.protocol : tfp_proto_unnamed();
    char feature[96];
    snprintf(feature, sizeof feature, "%.16s %.64s", in->method ? in->method : "",
             tfp_op_name(op->kind));
    if (tfp_proto_check(in->ours, peer, "server", "client", feature, NULL, &err) != TFP_OK)
        return tfp_op_fail(e, err.code, "%s", err.msg);
    return TFP_OK;
}

/* RFC 9530's fields: the digests a PUT carries, the one a GET asks for. */
static tfp_status_t take_digest(const tfp_http_req_t *in, tfp_op_t *op, tfp_op_err_t *e)
{
    tfp_err_t err;
    if (op->kind == TFP_OP_TENSOR_PUT) {
        if (in->content_digest && tfp_digest_parse(in->content_digest, &op->digest.content,
                                                   &err) != TFP_OK)
            return tfp_op_fail(e, TFP_EBADREQ, "Content-Digest: %s", err.msg);
        if (in->repr_digest && tfp_digest_parse(in->repr_digest, &op->digest.repr, &err) !=
                                   TFP_OK)
            return tfp_op_fail(e, TFP_EBADREQ, "Repr-Digest: %s", err.msg);
    } else if (op->kind == TFP_OP_TENSOR_GET) {
        int w = 0;
        if (in->want_repr_digest &&
            tfp_digest_want_parse(in->want_repr_digest, &w, &err) != TFP_OK)
            return tfp_op_fail(e, TFP_EBADREQ, "Want-Repr-Digest: %s", err.msg);
        op->digest.want |= w;
        if (in->want_content_digest &&
            tfp_digest_want_parse(in->want_content_digest, &w, &err) != TFP_OK)
            return tfp_op_fail(e, TFP_EBADREQ, "Want-Content-Digest: %s", err.msg);
        op->digest.want |= w;
    }
    return TFP_OK;
}

tfp_status_t tfp_http_op_parse(const tfp_http_req_t *in, tfp_op_t *op, tfp_op_err_t *e)
{
    tfp_path_info_t pi;
    tfp_status_t st;

    memset(op, 0, sizeof *op);
    e->code = TFP_OK;
    e->msg[0] = '\0';
    e->allow = NULL;
    tfp_path_parse(in->path, &pi);
    op->kind = kind_of(pi.kind, in);
    op->body.media = tfp_media_parse(in->content_type);
    op->body.length = in->content_length;
    op->accept = tfp_accept_pick(in->accept);
    if ((st = take_ids(in, op, e)) != TFP_OK)
        return st;
    if (has_control(in->path))
        return tfp_op_fail(e, TFP_EBADREQ, "the path holds a control character (%%00-%%1F or "
                           "%%7F, raw or percent-encoded)");
    if (pi.kind == TFP_PATH_UNKNOWN)
        return tfp_op_fail(e, TFP_ENOTFOUND, "no route for %s %s", in->method ? in->method : "",
                           in->path ? in->path : "");
    if (pi.kind == TFP_PATH_BAD_NAME)
        return tfp_op_fail(e, TFP_EBADREQ, "names (of tensors, routes, workers, calls) must "
                           "match [A-Za-z0-9._-]{1,255} and not be '.' or '..'");
    const char *allow = allowed(pi.kind, op->kind);
    if (allow && !method_in(in->method, allow)) {
        tfp_op_fail(e, TFP_EMETHOD, "%s is not allowed on %s (allowed: %s)",
                    in->method ? in->method : "", in->path, allow);
        e->allow = allow;
        return TFP_EMETHOD;
    }
    memcpy(op->name, pi.name, sizeof op->name);
    memcpy(op->sub, pi.sub, sizeof op->sub);
    if ((st = take_protocol(in, op, e)) != TFP_OK)
        return st;
    if ((st = take_digest(in, op, e)) != TFP_OK)
        return st;
    if ((op->kind == TFP_OP_TENSOR_GET || op->kind == TFP_OP_WORKER_POLL ||
         op->kind == TFP_OP_FEED_POP || op->kind == TFP_OP_FEED_OUTFEED_GET) &&
        (st = take_wait(in, op, e)) != TFP_OK)
        return st;
    if (op->kind == TFP_OP_TENSOR_LIST && (st = take_list(in, op, e)) != TFP_OK)
        return st;
    if ((op->kind == TFP_OP_TENSOR_GET || op->kind == TFP_OP_TENSOR_PUT ||
         op->kind == TFP_OP_TENSOR_DELETE) && (st = take_cond(in, op, e)) != TFP_OK)
        return st;
    if (op->kind == TFP_OP_TENSOR_PUT && in->ttl &&
        (tfp_parse_u64(in->ttl, TFP_MAX_TTL_S, &op->ttl_s) != 0 || op->ttl_s == 0))
        return tfp_op_fail(e, TFP_EBADREQ, "Tfetch-TTL must be a number of seconds from 1 to "
                           "%u, got '%.32s'", TFP_MAX_TTL_S, in->ttl);
    if ((st = take_feed(in, op, e)) != TFP_OK)
        return st;
    return take_body(in, op, e);
}
