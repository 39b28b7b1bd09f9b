/* check_op.c - unit suite for proto/op.c and the HTTP request -> operation parser
 * (tfp_http_op_parse in proto/http.c): which operation each path and method name, the ids,
 * the wait, the body's description, and every refusal with its code, message and order.
 * Pure functions; no daemon.
 */
#include "config.h"
#include "tests/suites.h"
#include "proto/http.h"
#include "proto/op.h"

#include <stdio.h>
#include <string.h>

#define MAX_BODY 1000u

static tfp_http_req_t req(const char *method, const char *path)
{
    tfp_http_req_t in = {.method = method, .path = path, .content_length = -1,
                         .max_body = MAX_BODY};
    return in;
}

/* Parses in; asserts the status, the kind and (when want_msg) a message substring. */
static void parses_at(int line, const tfp_http_req_t *in, tfp_status_t want, tfp_op_kind_t kind,
                      const char *want_msg, tfp_op_t *op, tfp_op_err_t *e)
{
    tfp_status_t st = tfp_http_op_parse(in, op, e);
    ck_assert_msg(st == want, "line %d: %s %s: got %s, want %s (%s)", line, in->method,
                  in->path, tfp_status_name(st), tfp_status_name(want), e->msg);
    ck_assert_int_eq(e->code, want);
    ck_assert_msg(op->kind == kind, "line %d: kind %s, want %s", line, tfp_op_name(op->kind),
                  tfp_op_name(kind));
    if (want_msg)
        ck_assert_msg(strcmp(e->msg, want_msg) == 0, "line %d: message '%s', want '%s'", line,
                      e->msg, want_msg);
    if (want == TFP_OK)
        ck_assert_str_eq(e->msg, "");
}

#define PARSES(in, want, kind, msg) parses_at(__LINE__, in, want, kind, msg, &op, &e)

START_TEST(op_names)
{
    ck_assert_str_eq(tfp_op_name(TFP_OP_NONE), "none");
    ck_assert_str_eq(tfp_op_name(TFP_OP_TENSOR_GET), "tensor_get");
    ck_assert_str_eq(tfp_op_name(TFP_OP_SHUMAI_CALL), "shumai_call");
    ck_assert_str_eq(tfp_op_name(TFP_OP_COUNT), "?");
    ck_assert_str_eq(tfp_op_name(-1), "?");
    for (int k = 0; k < TFP_OP_COUNT; k++)
        ck_assert_str_ne(tfp_op_name(k), "?");
}
END_TEST

/* Every path and method the API serves, to its operation and names. */
START_TEST(op_kinds)
{
    static const struct {
        const char *method, *path;
        tfp_op_kind_t kind;
        const char *name, *sub;
    } cases[] = {
        {"GET", "/healthz", TFP_OP_HEALTH, "", ""},
        {"HEAD", "/healthz", TFP_OP_HEALTH, "", ""},
        {"GET", "/readyz", TFP_OP_READY, "", ""},
        {"GET", "/metrics", TFP_OP_METRICS, "", ""},
        {"GET", "/v1/info", TFP_OP_INFO, "", ""},
        {"GET", "/v1/tensors", TFP_OP_TENSOR_LIST, "", ""},
        {"GET", "/v1/tensors/", TFP_OP_TENSOR_LIST, "", ""},
        {"GET", "/v1/tensors/w.0", TFP_OP_TENSOR_GET, "w.0", ""},
        {"HEAD", "/v1/tensors/w", TFP_OP_TENSOR_GET, "w", ""},
        {"PUT", "/v1/tensors/w", TFP_OP_TENSOR_PUT, "w", ""},
        {"DELETE", "/v1/tensors/w", TFP_OP_TENSOR_DELETE, "w", ""},
        {"POST", "/v1/call/echo", TFP_OP_CALL, "echo", ""},
        {"DELETE", "/v1/sessions/self", TFP_OP_SESSION_END, "", ""},
        {"POST", "/v1/workers", TFP_OP_WORKER_REGISTER, "", ""},
        {"DELETE", "/v1/workers/w-1", TFP_OP_WORKER_LEAVE, "w-1", ""},
        {"GET", "/v1/workers/w-1/next", TFP_OP_WORKER_POLL, "w-1", ""},
        {"POST", "/v1/workers/w-1/calls/c7", TFP_OP_WORKER_REPLY, "w-1", "c7"},
        {"POST", "/v1/upgrade", TFP_OP_UPGRADE, "", ""},
        {"GET", "/weights", TFP_OP_SHUMAI_GET, "weights", ""},
        {"HEAD", "/weights", TFP_OP_SHUMAI_GET, "weights", ""},
        {"POST", "/step", TFP_OP_SHUMAI_CALL, "step", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tfp_http_req_t in = req(cases[i].method, cases[i].path);
        tfp_op_t op;
        tfp_op_err_t e;
        parses_at((int)i, &in, TFP_OK, cases[i].kind, NULL, &op, &e);
        ck_assert_str_eq(op.name, cases[i].name);
        ck_assert_str_eq(op.sub, cases[i].sub);
        ck_assert_ptr_null(e.allow);
        ck_assert_str_eq(op.who.user, "");
        ck_assert_str_eq(op.who.request_id, "");
        ck_assert_uint_eq(op.wait_ms, 0);
    }
}
END_TEST

/* Paths that name nothing, or a bad name: refused, counted as no operation. */
START_TEST(op_unknown_and_bad_names)
{
    tfp_op_t op;
    tfp_op_err_t e;
    tfp_http_req_t in = req("GET", "/v1/nothing");
    PARSES(&in, TFP_ENOTFOUND, TFP_OP_NONE, "no route for GET /v1/nothing");
    in = req("PUT", "/a/b");
    PARSES(&in, TFP_ENOTFOUND, TFP_OP_NONE, "no route for PUT /a/b");
    in = req("GET", "/v1/workers/w/bogus");
    PARSES(&in, TFP_ENOTFOUND, TFP_OP_NONE, "no route for GET /v1/workers/w/bogus");
    in = req("GET", NULL);
    PARSES(&in, TFP_ENOTFOUND, TFP_OP_NONE, "no route for GET ");
    static const char bad[] = "names (of tensors, routes, workers, calls) must match "
                              "[A-Za-z0-9._-]{1,255} and not be '.' or '..'";
    in = req("GET", "/v1/tensors/..");
    PARSES(&in, TFP_EBADREQ, TFP_OP_NONE, bad);
    in = req("POST", "/v1/call/");
    PARSES(&in, TFP_EBADREQ, TFP_OP_NONE, bad);
    in = req("POST", "/v1/workers/w/calls/a*b");
    PARSES(&in, TFP_EBADREQ, TFP_OP_NONE, bad);
    ck_assert_str_eq(op.name, "");
}
END_TEST

/* A wrong method: 405 with the methods allowed, counted under the path's operation. */
START_TEST(op_methods)
{
    static const struct {
        const char *method, *path;
        tfp_op_kind_t kind;
        const char *allow;
    } cases[] = {
        {"POST", "/healthz", TFP_OP_HEALTH, "GET,HEAD"},
        {"PUT", "/readyz", TFP_OP_READY, "GET,HEAD"},
        {"PUT", "/metrics", TFP_OP_METRICS, "GET,HEAD"},
        {"DELETE", "/v1/info", TFP_OP_INFO, "GET,HEAD"},
        {"POST", "/v1/tensors", TFP_OP_TENSOR_LIST, "GET,HEAD"},
        {"POST", "/v1/tensors/w", TFP_OP_TENSOR_GET, "GET,HEAD,PUT,DELETE"},
        {"PATCH", "/v1/tensors/w", TFP_OP_TENSOR_GET, "GET,HEAD,PUT,DELETE"},
        {"GET", "/v1/call/echo", TFP_OP_CALL, "POST"},
        {"GET", "/v1/sessions/self", TFP_OP_SESSION_END, "DELETE"},
        {"GET", "/v1/workers", TFP_OP_WORKER_REGISTER, "POST"},
        {"GET", "/v1/workers/w", TFP_OP_WORKER_LEAVE, "DELETE"},
        {"POST", "/v1/workers/w/next", TFP_OP_WORKER_POLL, "GET"},
        {"HEAD", "/v1/workers/w/next", TFP_OP_WORKER_POLL, "GET"},
        {"GET", "/v1/workers/w/calls/c", TFP_OP_WORKER_REPLY, "POST"},
        {"GET", "/v1/upgrade", TFP_OP_UPGRADE, "POST"},
        {"DELETE", "/weights", TFP_OP_SHUMAI_GET, "GET,HEAD,POST"},
        {"PUT", "/weights", TFP_OP_SHUMAI_GET, "GET,HEAD,POST"},
        {"GETGETGETGETGETGETGET", "/healthz", TFP_OP_HEALTH, "GET,HEAD"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tfp_http_req_t in = req(cases[i].method, cases[i].path);
        tfp_op_t op;
        tfp_op_err_t e;
        char want[256];
        snprintf(want, sizeof want, "%s is not allowed on %s (allowed: %s)", cases[i].method,
                 cases[i].path, cases[i].allow);
        parses_at((int)i, &in, TFP_EMETHOD, cases[i].kind, want, &op, &e);
        ck_assert_str_eq(e.allow, cases[i].allow);
    }
}
END_TEST

START_TEST(op_ids)
{
    tfp_op_t op;
    tfp_op_err_t e;
    tfp_http_req_t in = req("GET", "/v1/tensors/w");
    in.request_id = "host:1:7";
    in.user = "alice";
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    ck_assert_str_eq(op.who.request_id, "host:1:7");
    ck_assert_str_eq(op.who.user, "alice");
    in.request_id = "a b";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_GET,
           "Tfetch-Request-Id must match [A-Za-z0-9._:-]{1,128}");
    ck_assert_str_eq(op.who.request_id, "");
    ck_assert_str_eq(op.who.user, "");              /* not taken after the failure */
    in.request_id = "";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_GET, NULL);
    in.request_id = NULL;
    in.user = "a:b";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_GET, "Tfetch-User must match [A-Za-z0-9._-]{1,128}");
    ck_assert_str_eq(op.who.user, "");
    /* ids come first: before the path, the method, the wait and the body */
    in = req("POST", "/v1/nothing");
    in.user = "";
    PARSES(&in, TFP_EBADREQ, TFP_OP_NONE, "Tfetch-User must match [A-Za-z0-9._-]{1,128}");
    in = req("POST", "/healthz");
    in.request_id = "x/y";
    PARSES(&in, TFP_EBADREQ, TFP_OP_HEALTH, NULL);
    ck_assert_ptr_null(e.allow);
}
END_TEST

/* Tfetch-Protocol: taken when well formed, refused when malformed (TFP_EBADREQ) or when it
 * shares no version with the server's range (TFP_EVERSION, both ranges and the operation
 * named); a client naming none speaks version 1; health, readiness, metrics and info answer
 * every version; no server range given: no check. */
START_TEST(op_protocol)
{
    tfp_op_t op;
    tfp_op_err_t e;
    tfp_http_req_t in = req("GET", "/v1/tensors/w");
    in.protocol = "1-2";
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    ck_assert_uint_eq(op.who.protocol.min, 1);
    ck_assert_uint_eq(op.who.protocol.max, 2);
    in.protocol = NULL;
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    ck_assert_uint_eq(op.who.protocol.min, 0);
    static const char *const bad[] = {"", "0-2", "2-1", "1-", "-2", "1 -2", "01-2", "1-2x",
                                      "65536", "1-99999999999", "1,2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        in.protocol = bad[i];
        PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_GET, NULL);
        ck_assert_msg(strncmp(e.msg, "Tfetch-Protocol: ", 17) == 0, "'%s': %s", bad[i], e.msg);
    }
    in.ours = (tfp_proto_range_t){2, 3};
    in.protocol = "1-1";
    PARSES(&in, TFP_EVERSION, TFP_OP_TENSOR_GET,
           "protocol version mismatch on GET tensor_get: this server speaks 2..3, the client "
           "1..1; the client is too old and must be upgraded");
    in.protocol = NULL;                     /* names none: version 1 */
    PARSES(&in, TFP_EVERSION, TFP_OP_TENSOR_GET, NULL);
    in.protocol = "4-9";
    PARSES(&in, TFP_EVERSION, TFP_OP_TENSOR_GET,
           "protocol version mismatch on GET tensor_get: this server speaks 2..3, the client "
           "4..9; the server is too old and must be upgraded");
    in.protocol = "1-2";
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    in.protocol = "3";
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    in = req("PUT", "/v1/tensors/w");
    in.ours = (tfp_proto_range_t){2, 2};
    in.content_length = 8;
    in.content_type = "application/x-safetensors";
    PARSES(&in, TFP_EVERSION, TFP_OP_TENSOR_PUT, NULL);
    ck_assert_ptr_nonnull(strstr(e.msg, "on PUT tensor_put"));
    static const char *const open_paths[] = {"/healthz", "/readyz", "/metrics", "/v1/info"};
    static const tfp_op_kind_t open_kinds[] = {TFP_OP_HEALTH, TFP_OP_READY, TFP_OP_METRICS,
                                               TFP_OP_INFO};
    for (size_t i = 0; i < 4; i++) {
        in = req("GET", open_paths[i]);
        in.ours = (tfp_proto_range_t){2, 2};
        PARSES(&in, TFP_OK, open_kinds[i], NULL);
    }
    in = req("POST", "/v1/upgrade");
    in.ours = (tfp_proto_range_t){2, 2};
    PARSES(&in, TFP_EVERSION, TFP_OP_UPGRADE, NULL);
}
END_TEST

START_TEST(op_wait)
{
    tfp_op_t op;
    tfp_op_err_t e;
    tfp_http_req_t in = req("GET", "/v1/tensors/w");
    in.wait = "2500";
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    ck_assert_uint_eq(op.wait_ms, 2500);
    in.wait = "0";
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    ck_assert_uint_eq(op.wait_ms, 0);
    in.wait = "9223372036854775807";                /* UINT64_MAX / 2: uncapped here */
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    ck_assert_uint_eq(op.wait_ms, UINT64_MAX / 2);
    in.wait = "9223372036854775808";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_GET, NULL);
    in.wait = "-1";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_GET, "wait must be a number of milliseconds, got '-1'");
    in.wait = "123456789012345678901234567890123456789";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_GET, "wait must be a number of milliseconds, got "
           "'12345678901234567890123456789012'");
    in = req("GET", "/v1/workers/w/next");
    in.wait = "10";
    PARSES(&in, TFP_OK, TFP_OP_WORKER_POLL, NULL);
    ck_assert_uint_eq(op.wait_ms, 10);
    in.wait = "soon";
    PARSES(&in, TFP_EBADREQ, TFP_OP_WORKER_POLL, NULL);
    /* only GETs wait: elsewhere the query is not looked at */
    in = req("DELETE", "/v1/tensors/w");
    in.wait = "soon";
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_DELETE, NULL);
    ck_assert_uint_eq(op.wait_ms, 0);
    /* the method is checked before the wait */
    in = req("POST", "/v1/workers/w/next");
    in.wait = "soon";
    PARSES(&in, TFP_EMETHOD, TFP_OP_WORKER_POLL, NULL);
}
END_TEST

/* GET /v1/tensors?prefix=&after=&limit=: a page of the listing. */
START_TEST(op_list_page)
{
    tfp_op_t op;
    tfp_op_err_t e;
    tfp_http_req_t in = req("GET", "/v1/tensors");
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_LIST, NULL);
    ck_assert_str_eq(op.list.prefix, "");
    ck_assert_uint_eq(op.list.limit, 0);
    in.prefix = "layer.1";
    in.after = "layer.10.w";
    in.limit = "50";
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_LIST, NULL);
    ck_assert_str_eq(op.list.prefix, "layer.1");
    ck_assert_str_eq(op.list.after, "layer.10.w");
    ck_assert_uint_eq(op.list.limit, 50);
    in.limit = "0";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_LIST, "limit must be a number from 1 to 1000000, got '0'");
    in.limit = "1000001";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_LIST, NULL);
    in.limit = NULL;
    in.prefix = "a/b";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_LIST, "prefix must be name characters [A-Za-z0-9._-], at most 255");
    in.prefix = "";                 /* empty: every name */
    in.after = "x\001";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_LIST, "after must be a name [A-Za-z0-9._-]{0,255}");
}
END_TEST

START_TEST(op_accept)
{
    tfp_op_t op;
    tfp_op_err_t e;
    tfp_http_req_t in = req("GET", "/v1/tensors/w");
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    ck_assert_int_eq(op.accept, TFP_MEDIA_NONE);
    in.accept = "text/html, application/json;q=0.9";
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    ck_assert_int_eq(op.accept, TFP_MEDIA_JSON);
    in.accept = "text/html";
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    ck_assert_int_eq(op.accept, TFP_MEDIA_OTHER);
}
END_TEST

static const char media_msg[] = "Content-Type must be application/x-safetensors, or "
                                "application/octet-stream with Tfetch-Dtype and Tfetch-Shape";

START_TEST(op_doc_bodies)
{
    tfp_op_t op;
    tfp_op_err_t e;
    tfp_http_req_t in = req("PUT", "/v1/tensors/w");
    in.content_type = "application/x-safetensors";
    in.content_length = 100;
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_PUT, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_SAFETENSORS);
    ck_assert_int_eq(op.body.media, TFP_MEDIA_SAFETENSORS);
    ck_assert_int_eq(op.body.length, 100);
    in.content_type = NULL;                         /* no Content-Type: safetensors */
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_PUT, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_SAFETENSORS);
    in.content_type = "application/x-www-form-urlencoded";      /* curl's default */
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_PUT, NULL);
    in.content_type = "text/plain";
    PARSES(&in, TFP_EMEDIATYPE, TFP_OP_TENSOR_PUT, media_msg);
    in.content_type = "*/*";
    PARSES(&in, TFP_EMEDIATYPE, TFP_OP_TENSOR_PUT, media_msg);
    in.content_type = "application/json";
    PARSES(&in, TFP_EMEDIATYPE, TFP_OP_TENSOR_PUT, media_msg);
    in.content_length = MAX_BODY + 1;               /* the type is checked before the size */
    PARSES(&in, TFP_EMEDIATYPE, TFP_OP_TENSOR_PUT, media_msg);
    in.content_type = NULL;
    PARSES(&in, TFP_ETOOBIG, TFP_OP_TENSOR_PUT,
           "body of 1001 bytes exceeds the limit of 1000 bytes");
    in.content_length = MAX_BODY;
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_PUT, NULL);
    in.content_length = -1;                         /* chunked: the transport enforces it */
    in.chunked = 1;
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_PUT, NULL);
    ck_assert_int_eq(op.body.length, -1);
    /* calls take the same bodies */
    in = req("POST", "/v1/call/echo");
    in.content_type = "text/plain";
    PARSES(&in, TFP_EMEDIATYPE, TFP_OP_CALL, media_msg);
    /* bodyless operations: a Content-Type is not looked at */
    in = req("GET", "/v1/tensors/w");
    in.content_type = "text/plain";
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_NONE);
}
END_TEST

START_TEST(op_raw_bodies)
{
    tfp_op_t op;
    tfp_op_err_t e;
    tfp_http_req_t in = req("PUT", "/v1/tensors/w");
    in.content_type = "application/octet-stream";
    in.dtype = "F32";
    in.shape = "2, 3";
    in.content_length = 24;
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_PUT, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_RAW);
    ck_assert_int_eq(op.body.dtype, TFP_F32);
    ck_assert_int_eq(op.body.rank, 2);
    ck_assert_uint_eq(op.body.shape[0], 2);
    ck_assert_uint_eq(op.body.shape[1], 3);
    ck_assert_uint_eq(op.body.nbytes, 24);
    in.content_length = -1;                         /* chunked: checked once it is in */
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_PUT, NULL);
    in.content_length = 23;
    PARSES(&in, TFP_EUNPROC, TFP_OP_TENSOR_PUT, NULL);
    in.content_length = 24;
    in.shape = NULL;
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_PUT, NULL);
    in.shape = "2,x";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_PUT, NULL);
    in.shape = "2,3";
    in.dtype = "F33";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_PUT, NULL);
    in.dtype = "F32";
    in.content_type = "application/x-safetensors";
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_PUT, "Tfetch-Dtype/Tfetch-Shape describe a raw "
           "body; a safetensors body carries its own header");
    /* sizes: the announced length first, then dtype x shape */
    in.content_type = "application/octet-stream";
    in.content_length = MAX_BODY + 1;
    PARSES(&in, TFP_ETOOBIG, TFP_OP_TENSOR_PUT,
           "body of 1001 bytes exceeds the limit of 1000 bytes");
    in.content_length = -1;
    in.shape = "[ 20, 30 ]";
    PARSES(&in, TFP_ETOOBIG, TFP_OP_TENSOR_PUT,
           "a F32 tensor of shape [[ 20, 30 ]] is 2400 bytes, above the limit of 1000");
    in.shape = "4294967296,4294967296";
    PARSES(&in, TFP_ERANGE, TFP_OP_TENSOR_PUT, NULL);
    /* The tensor takes the path's name: not one safetensors reserves (found by fuzz_raw;
     * the daemon used to accept it here and fail it later, in the handler). */
    in = req("PUT", "/v1/tensors/__metadata__");
    in.content_type = "application/octet-stream";
    in.dtype = "U8";
    in.shape = "4";
    in.content_length = 4;
    PARSES(&in, TFP_EBADREQ, TFP_OP_TENSOR_PUT, "a raw body's tensor is named after the path, "
           "and safetensors reserves '__metadata__': send a safetensors body");
    in.dtype = in.shape = NULL;                     /* a safetensors document may use the name */
    in.content_type = "application/x-safetensors";
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_PUT, NULL);
}
END_TEST

START_TEST(op_shumai_and_worker_bodies)
{
    tfp_op_t op;
    tfp_op_err_t e;
    /* Shumai: any method with a body is an exchange; its body is a Shumai message unless it
     * says otherwise */
    tfp_http_req_t in = req("POST", "/step");
    PARSES(&in, TFP_OK, TFP_OP_SHUMAI_CALL, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_SHUMAI);
    in = req("PUT", "/step");
    in.content_length = 10;
    in.content_type = "application/octet-stream";
    PARSES(&in, TFP_OK, TFP_OP_SHUMAI_CALL, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_SHUMAI);
    in = req("DELETE", "/step");
    in.chunked = 1;
    PARSES(&in, TFP_OK, TFP_OP_SHUMAI_CALL, NULL);
    in = req("GET", "/step");
    in.content_length = 0;
    PARSES(&in, TFP_OK, TFP_OP_SHUMAI_GET, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_NONE);
    in = req("POST", "/step");
    in.content_type = "application/x-safetensors";
    PARSES(&in, TFP_OK, TFP_OP_SHUMAI_CALL, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_SAFETENSORS);
    in.content_type = "application/octet-stream";
    in.dtype = "U8";
    in.shape = "3";
    PARSES(&in, TFP_OK, TFP_OP_SHUMAI_CALL, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_RAW);
    /* a worker's answer: a document or a JSON error */
    in = req("POST", "/v1/workers/w/calls/c");
    in.content_type = "application/json; charset=utf-8";
    PARSES(&in, TFP_OK, TFP_OP_WORKER_REPLY, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_JSON);
    in.content_type = "application/x-safetensors";
    PARSES(&in, TFP_OK, TFP_OP_WORKER_REPLY, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_SAFETENSORS);
    in.content_type = "text/plain";
    PARSES(&in, TFP_EMEDIATYPE, TFP_OP_WORKER_REPLY, media_msg);
    /* registrations and upgrades are JSON, whatever they say */
    in = req("POST", "/v1/workers");
    in.content_type = "text/plain";
    PARSES(&in, TFP_OK, TFP_OP_WORKER_REGISTER, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_JSON);
    in = req("POST", "/v1/upgrade");
    in.content_length = MAX_BODY * 10;
    PARSES(&in, TFP_OK, TFP_OP_UPGRADE, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_JSON);
}
END_TEST

START_TEST(op_check_length)
{
    tfp_op_t op = {0};
    tfp_op_err_t e = {TFP_OK, "", NULL};
    op.body.length = -1;
    ck_assert_int_eq(tfp_op_check_length(&op, 0, &e), TFP_OK);
    op.body.length = 5;
    ck_assert_int_eq(tfp_op_check_length(&op, 5, &e), TFP_OK);
    ck_assert_int_eq(e.code, TFP_OK);
    ck_assert_int_eq(tfp_op_check_length(&op, 4, &e), TFP_ETOOBIG);
    ck_assert_str_eq(e.msg, "body of 5 bytes exceeds the limit of 4 bytes");
    ck_assert_int_eq(tfp_op_fail(&e, TFP_EBUSY, "%d", 7), TFP_EBUSY);
    ck_assert_int_eq(e.code, TFP_EBUSY);
    ck_assert_str_eq(e.msg, "7");
}
END_TEST

/* Long methods and paths: messages are cut at the buffer, never overrun. */
START_TEST(op_long_fields)
{
    static char path[5000], method[300];
    tfp_op_t op;
    tfp_op_err_t e;
    memset(path, 'a', sizeof path - 1);
    path[0] = '/';
    memset(method, 'M', sizeof method - 1);
    tfp_http_req_t in = req(method, path);
    PARSES(&in, TFP_ENOTFOUND, TFP_OP_NONE, NULL);
    ck_assert_uint_eq(strlen(e.msg), TFP_OP_MAX_MSG - 1);
    char name[300];
    memset(name, 'n', 255);
    name[255] = '\0';
    snprintf(path, sizeof path, "/v1/tensors/%s", name);
    in = req("POST", path);
    PARSES(&in, TFP_EMETHOD, TFP_OP_TENSOR_GET, NULL);
    ck_assert_ptr_nonnull(strstr(e.msg, "(allowed: GET,HEAD,PUT,DELETE)"));
    in = req("GET", path);
    PARSES(&in, TFP_OK, TFP_OP_TENSOR_GET, NULL);
    ck_assert_str_eq(op.name, name);
}
END_TEST

/* The feed paths: each operation, its names, the device token. */
START_TEST(op_feed_kinds)
{
    static const struct {
        const char *method, *path;
        tfp_op_kind_t kind;
        const char *name, *sub;
    } cases[] = {
        {"GET", "/v1/feeds", TFP_OP_FEED_LIST, "", ""},
        {"GET", "/v1/feeds/", TFP_OP_FEED_LIST, "", ""},
        {"PUT", "/v1/feeds/f", TFP_OP_FEED_DECLARE, "f", ""},
        {"GET", "/v1/feeds/f", TFP_OP_FEED_STATS, "f", ""},
        {"HEAD", "/v1/feeds/f", TFP_OP_FEED_STATS, "f", ""},
        {"DELETE", "/v1/feeds/f", TFP_OP_FEED_DELETE, "f", ""},
        {"POST", "/v1/feeds/f/infeed", TFP_OP_FEED_INFEED, "f", ""},
        {"POST", "/v1/feeds/f/devices/gpu0/infeed", TFP_OP_FEED_INFEED, "f", "gpu0"},
        {"POST", "/v1/feeds/f/devices/3/outfeed", TFP_OP_FEED_OUTFEED_PUSH, "f", "3"},
        {"GET", "/v1/feeds/f/outfeed", TFP_OP_FEED_OUTFEED_GET, "f", ""},
        {"POST", "/v1/feeds/f/done", TFP_OP_FEED_DONE, "f", ""},
        {"POST", "/v1/feeds/f/reset", TFP_OP_FEED_RESET, "f", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tfp_http_req_t in = req(cases[i].method, cases[i].path);
        tfp_op_t op;
        tfp_op_err_t e;
        parses_at((int)i, &in, TFP_OK, cases[i].kind, NULL, &op, &e);
        ck_assert_str_eq(op.name, cases[i].name);
        ck_assert_str_eq(op.sub, cases[i].sub);
        ck_assert_uint_eq(op.feed.seq, 0);
        ck_assert_int_eq(op.feed.has_ack, 0);
    }
    tfp_op_t op;
    tfp_op_err_t e;
    tfp_http_req_t in = req("PUT", "/v1/feeds/f");
    PARSES(&in, TFP_OK, TFP_OP_FEED_DECLARE, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_JSON);
    in = req("POST", "/v1/feeds/f/devices/0/pop");
    in.consumer = "c-1";
    PARSES(&in, TFP_OK, TFP_OP_FEED_POP, NULL);
    ck_assert_str_eq(op.feed.consumer, "c-1");
    ck_assert_str_eq(op.sub, "0");
    in = req("POST", "/v1/feeds/f/devices/0/ack");
    in.consumer = "c-1";
    in.through = "7";
    PARSES(&in, TFP_OK, TFP_OP_FEED_ACK, NULL);
    ck_assert_int_eq(op.feed.has_ack, 1);
    ck_assert_uint_eq(op.feed.ack, 7);
    in = req("POST", "/v1/feeds/f/devices/gpu1/detach");
    in.consumer = "c-1";
    PARSES(&in, TFP_OK, TFP_OP_FEED_DETACH, NULL);
    ck_assert_str_eq(op.sub, "gpu1");
    ck_assert_int_eq(op.feed.has_ack, 0);       /* the ack is optional */
    in.ack = "12";
    PARSES(&in, TFP_OK, TFP_OP_FEED_DETACH, NULL);
    ck_assert_int_eq(op.feed.has_ack, 1);
    ck_assert_uint_eq(op.feed.ack, 12);
    /* unknown tails and bad names */
    in = req("POST", "/v1/feeds/f/nothing");
    PARSES(&in, TFP_ENOTFOUND, TFP_OP_NONE, NULL);
    in = req("POST", "/v1/feeds/f/devices/0/nothing");
    PARSES(&in, TFP_ENOTFOUND, TFP_OP_NONE, NULL);
    in = req("POST", "/v1/feeds/f/devices/0");
    PARSES(&in, TFP_ENOTFOUND, TFP_OP_NONE, NULL);
    in = req("POST", "/v1/feeds/../infeed");
    PARSES(&in, TFP_EBADREQ, TFP_OP_NONE, NULL);
    in = req("POST", "/v1/feeds/f/devices/a*b/pop");
    PARSES(&in, TFP_EBADREQ, TFP_OP_NONE, NULL);
    /* methods */
    in = req("GET", "/v1/feeds/f/devices/0/pop");
    PARSES(&in, TFP_EMETHOD, TFP_OP_FEED_POP, NULL);
    ck_assert_str_eq(e.allow, "POST");
    in = req("POST", "/v1/feeds/f/outfeed");
    PARSES(&in, TFP_EMETHOD, TFP_OP_FEED_OUTFEED_GET, NULL);
    ck_assert_str_eq(e.allow, "GET,HEAD");
    in = req("POST", "/v1/feeds");
    PARSES(&in, TFP_EMETHOD, TFP_OP_FEED_LIST, NULL);
}
END_TEST

/* The feed headers and query values: Tfetch-Seq, -Producer, -Consumer, Prefer, ack, through,
 * after, wait; each refusal with its message. */
START_TEST(op_feed_fields)
{
    tfp_op_t op;
    tfp_op_err_t e;
    tfp_http_req_t in = req("POST", "/v1/feeds/f/devices/0/infeed");
    in.content_length = 4;
    in.content_type = "application/x-safetensors";
    in.seq = "12";
    in.producer = "loader.3";
    in.prefer = "respond-async, wait=250";
    PARSES(&in, TFP_OK, TFP_OP_FEED_INFEED, NULL);
    ck_assert_uint_eq(op.feed.seq, 12);
    ck_assert_str_eq(op.feed.producer, "loader.3");
    ck_assert_uint_eq(op.wait_ms, 250);
    ck_assert_int_eq(op.body.kind, TFP_BODY_SAFETENSORS);
    in.prefer = "Wait = 9;x=1";
    PARSES(&in, TFP_OK, TFP_OP_FEED_INFEED, NULL);
    ck_assert_uint_eq(op.wait_ms, 9);
    in.prefer = "handling=lenient";
    PARSES(&in, TFP_OK, TFP_OP_FEED_INFEED, NULL);
    ck_assert_uint_eq(op.wait_ms, 0);
    in.wait = "100";                                /* ?wait= is not an infeed's */
    PARSES(&in, TFP_OK, TFP_OP_FEED_INFEED, NULL);
    ck_assert_uint_eq(op.wait_ms, 0);
    in.prefer = "wait=";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_INFEED, "Prefer: wait= must be a number of milliseconds");
    in.prefer = "wait=-1";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_INFEED, NULL);
    in.prefer = NULL;
    in.seq = "0";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_INFEED, "Tfetch-Seq must be a sequence number from 1, "
           "got '0'");
    in.seq = "1x";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_INFEED, NULL);
    in.seq = NULL;
    in.producer = "a b";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_INFEED, "Tfetch-Producer must match "
           "[A-Za-z0-9._-]{1,128}");
    in.producer = NULL;
    in.content_type = "application/json";
    PARSES(&in, TFP_EMEDIATYPE, TFP_OP_FEED_INFEED, NULL);
    in.content_type = "application/octet-stream";
    in.dtype = "F32";
    in.shape = "1";
    PARSES(&in, TFP_OK, TFP_OP_FEED_INFEED, NULL);
    ck_assert_int_eq(op.body.kind, TFP_BODY_RAW);

    in = req("POST", "/v1/feeds/f/devices/0/pop");
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_POP, "a consumer names itself: Tfetch-Consumer is "
           "required");
    in.consumer = "bad id";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_POP, "Tfetch-Consumer must match "
           "[A-Za-z0-9._-]{1,128}");
    in.consumer = "c";
    in.wait = "500";
    in.ack = "3";
    in.seq = "5";                                   /* not a pop's: ignored */
    PARSES(&in, TFP_OK, TFP_OP_FEED_POP, NULL);
    ck_assert_uint_eq(op.wait_ms, 500);
    ck_assert_int_eq(op.feed.has_ack, 1);
    ck_assert_uint_eq(op.feed.ack, 3);
    ck_assert_uint_eq(op.feed.seq, 0);
    in.ack = "-3";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_POP, "ack must be a position (a non-negative integer), "
           "got '-3'");
    in.ack = NULL;
    in.wait = "soon";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_POP, NULL);

    in = req("POST", "/v1/feeds/f/devices/0/ack");
    in.consumer = "c";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_ACK, "ack needs ?through=POSITION");
    in.through = "x";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_ACK, NULL);

    in = req("POST", "/v1/feeds/f/devices/0/detach");
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_DETACH, "a consumer names itself: Tfetch-Consumer is "
           "required");
    in.consumer = "c";
    in.ack = "1.5";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_DETACH, "ack must be a position (a non-negative "
           "integer), got '1.5'");
    in.ack = NULL;
    in.rewind = "1";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_DETACH, "rewind= belongs to pop only");
    in = req("GET", "/v1/feeds/f/devices/0/detach");
    PARSES(&in, TFP_EMETHOD, TFP_OP_FEED_DETACH, NULL);
    ck_assert_str_eq(e.allow, "POST");

    in = req("GET", "/v1/feeds/f/outfeed");
    in.after = "41";
    in.wait = "10";
    PARSES(&in, TFP_OK, TFP_OP_FEED_OUTFEED_GET, NULL);
    ck_assert_uint_eq(op.feed.after, 41);
    ck_assert_uint_eq(op.wait_ms, 10);
    in.after = "";
    PARSES(&in, TFP_EBADREQ, TFP_OP_FEED_OUTFEED_GET, NULL);
}
END_TEST

Suite *suite_op(void)
{
    Suite *s = suite_create("op");
    TCase *tc = tcase_create("http");
    tcase_add_test(tc, op_names);
    tcase_add_test(tc, op_kinds);
    tcase_add_test(tc, op_unknown_and_bad_names);
    tcase_add_test(tc, op_methods);
    tcase_add_test(tc, op_ids);
    tcase_add_test(tc, op_protocol);
    tcase_add_test(tc, op_wait);
    tcase_add_test(tc, op_list_page);
    tcase_add_test(tc, op_accept);
    tcase_add_test(tc, op_doc_bodies);
    tcase_add_test(tc, op_raw_bodies);
    tcase_add_test(tc, op_shumai_and_worker_bodies);
    tcase_add_test(tc, op_check_length);
    tcase_add_test(tc, op_long_fields);
    tcase_add_test(tc, op_feed_kinds);
    tcase_add_test(tc, op_feed_fields);
    suite_add_tcase(s, tc);
    return s;
}
