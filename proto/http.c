/* http.c - an HTTP request's line and headers -> the operation it asks for (op.h): path
 * routing, media types, ids, wait, and the description of a document body. Pure; any thread.
 */
#include "config.h"
#include "proto/http.h"
#include "proto/ids.h"
#include "proto/raw.h"

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

tfp_media_t tfp_accept_pick(const char *accept)
{
    if (!accept)
        return TFP_MEDIA_NONE;
    const char *p = accept;
    int any_listed = 0;
    while (*p) {
        size_t item = strcspn(p, ",");
        size_t type = strcspn(p, ";,");
        tfp_media_t m = classify(p, type < item ? type : item);
        if (m != TFP_MEDIA_NONE)
            any_listed = 1;
        if (m == TFP_MEDIA_SAFETENSORS || m == TFP_MEDIA_OCTET || m == TFP_MEDIA_JSON ||
            m == TFP_MEDIA_ANY)
            return m;
        p += item;
        if (*p == ',')
            p++;
    }
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

static tfp_path_t classify_path(const char *path, tfp_path_info_t *o)
{
    const char *rest;
    if (strcmp(path, "/healthz") == 0)
        return TFP_PATH_HEALTHZ;
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
    default: return TFP_OP_NONE;
    }
}

/* The methods a path allows; NULL for any (Shumai's exchange: whatever carries a body). */
static const char *allowed(tfp_path_t p, tfp_op_kind_t k)
{
    switch (p) {
    case TFP_PATH_HEALTHZ:
    case TFP_PATH_METRICS:
    case TFP_PATH_INFO:
    case TFP_PATH_TENSORS: return "GET,HEAD";
    case TFP_PATH_TENSOR: return "GET,HEAD,PUT,DELETE";
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
    return TFP_OK;
}

static tfp_status_t take_wait(const tfp_http_req_t *in, tfp_op_t *op, tfp_op_err_t *e)
{
    if (in->wait && tfp_parse_u64(in->wait, UINT64_MAX / 2, &op->wait_ms) != 0)
        return tfp_op_fail(e, TFP_EBADREQ, "wait must be a number of milliseconds, got '%.32s'",
                           in->wait);
    return TFP_OK;
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
        return take_doc_body(in, op, e);
    case TFP_OP_WORKER_REPLY:                       /* an answer, or a JSON error */
        if (op->body.media != TFP_MEDIA_JSON)
            return take_doc_body(in, op, e);
        op->body.kind = TFP_BODY_JSON;
        return TFP_OK;
    case TFP_OP_WORKER_REGISTER:
    case TFP_OP_UPGRADE:
        op->body.kind = TFP_BODY_JSON;
        return TFP_OK;
    default:
        return TFP_OK;
    }
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
    if ((op->kind == TFP_OP_TENSOR_GET || op->kind == TFP_OP_WORKER_POLL) &&
        (st = take_wait(in, op, e)) != TFP_OK)
        return st;
    return take_body(in, op, e);
}
