/* fuzz_httpop.c - libFuzzer harness for tfp_http_op_parse (proto/http.c), the one place an
 * HTTP request's line and headers become the operation tfetchd runs.
 *
 * An input is up to twelve lines: method, path, the query's wait, Content-Length ("-" for
 * chunked, empty for none), Content-Type, Accept, Tfetch-Dtype, Tfetch-Shape, Tfetch-User,
 * Tfetch-Request-Id, max-body, Tfetch-Protocol (against a server speaking 2..3, so that
 * both a too-old and a too-new client occur), Repr-Digest and Want-Repr-Digest; a missing line is an absent field, so short inputs test
 * absent headers. The parse must refuse with a status and a message, or accept with no
 * message; TFP_EMETHOD (and only it) names the methods allowed; an accepted operation's
 * names and ids are valid, and its raw body's size fits max-body and makes a document with
 * the name the daemon gives its tensor (the path's for a PUT). The first two lines are also
 * an answer's header, name and value, through the typed answer's table (proto/answer.h):
 * one it takes renders back to the same field, and its UCX place carries it there and back
 * unchanged. The whole input is also a REPLY's answer lines (UCX, shm), whose parse must
 * render back to the same fields. Owns nothing between inputs;
 * single-threaded. Build and run: see README.md beside it (make fuzz).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/answer.h"
#include "proto/http.h"
#include "proto/ids.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NFIELDS 14

static void fail(const char *what, const tfp_op_err_t *e)
{
    fprintf(stderr, "fuzz_httpop: %s (%s)\n", what, e->msg);
    abort();
}

/* What api_begin_doc does with an accepted raw body: one tensor named after the path (PUT)
 * or "tensor" (calls), which must make a document. */
static void raw_document(const tfp_op_t *op, const tfp_op_err_t *e)
{
    tfp_doc_t *doc = tfp_doc_new();
    tfp_err_t err;
    if (doc == NULL)
        return;
    const char *name = op->kind == TFP_OP_TENSOR_PUT ? op->name : "tensor";
    if (tfp_doc_add(doc, name, op->body.dtype, op->body.rank, op->body.shape, NULL,
                    op->body.nbytes, &err) != TFP_OK) {
        fprintf(stderr, "fuzz_httpop: %s\n", err.msg);
        fail("an accepted raw body makes no document", e);
    }
    tfp_doc_free(doc);
}

static void answer_fail(const char *what)
{
    fprintf(stderr, "fuzz_httpop: answer: %s\n", what);
    abort();
}

/* name: value as a received answer header: through the table and back. */
static void answer_round_trip(const char *name, const char *value)
{
    tfp_answer_t a, b, c;
    tfp_uf_feed_t f;
    char v[TFP_AF_MAX_STR + 24];
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    memset(&f, 0, sizeof f);
    int got = tfp_answer_header_parse(&a, name, value);
    if (got != 1) {
        if (a.present)
            answer_fail("a refused header set a field");
        return;
    }
    for (unsigned i = 0; i < TFP_AF_COUNT; i++) {
        if (!tfp_answer_has(&a, (tfp_af_t)i))
            continue;
        if (!tfp_answer_header_value(&a, (tfp_af_t)i, v, sizeof v))
            answer_fail("a field set renders no header");
        if (tfp_answer_header_parse(&b, tfp_answer_fields[i].header, v) != 1)
            answer_fail("a rendered header does not parse back");
    }
    if (memcmp(&a, &b, sizeof a) != 0)
        answer_fail("the header's round trip changed the answer");
    tfp_answer_to_feed(&a, &f);
    tfp_answer_from_feed(&f, &c);
    for (unsigned i = 0; i < TFP_AF_COUNT; i++)
        if (tfp_answer_fields[i].uf_present &&
            (tfp_answer_has(&a, (tfp_af_t)i) != tfp_answer_has(&c, (tfp_af_t)i) ||
             (tfp_answer_has(&a, (tfp_af_t)i) && a.num[i] != c.num[i])))
            answer_fail("the UCX frame's round trip changed a field");
    /* The server's time through a REPLY's timing block, encoded and decoded: each duration
     * the same (one past the block's 32 bits comes back at its cap), the rest untouched. */
    tfp_uf_hdr_t h, d;
    tfp_answer_t t;
    uint8_t buf[TFP_UF_MAX_HEADER];
    size_t len;
    tfp_err_t err;
    memset(&t, 0, sizeof t);
    tfp_uf_init(&h, TFP_UF_REPLY, 1);
    memcpy(h.request_id, "r1", 3);
    tfp_answer_to_reply(&a, TFP_UF_F_TIMING, &h);
    if (tfp_uf_encode(&h, buf, sizeof buf, &len, &err) != TFP_OK ||
        tfp_uf_decode(buf, len, &d, &err) != TFP_OK)
        answer_fail("a timing block does not encode and decode");
    tfp_answer_from_reply(&d, &t);
    for (unsigned i = 0; i < TFP_AF_COUNT; i++) {
        int timing = (TFP_AF_TIMING_MASK >> i) & 1;
        uint64_t want = a.num[i] < TFP_UF_TIMING_NONE ? a.num[i] : TFP_UF_TIMING_NONE - 1;
        if (tfp_answer_has(&t, (tfp_af_t)i) != (timing && tfp_answer_has(&a, (tfp_af_t)i)) ||
            (tfp_answer_has(&t, (tfp_af_t)i) && t.num[i] != want))
            answer_fail("the timing block's round trip changed a field");
    }
}

/* The whole input as a UCX or shm REPLY's answer lines: what parses renders back to lines
 * that parse to the same answer. */
static void lines_round_trip(const uint8_t *data, size_t size)
{
    tfp_answer_t a, b;
    char lines[TFP_ANSWER_MAX_LINES + 1];
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    if (tfp_answer_lines_parse(&a, (const char *)data, size) != 0) {
        if (a.present)
            answer_fail("refused lines set a field");
        return;
    }
    size_t n = tfp_answer_lines(&a, ~0u, lines, sizeof lines);
    if (!tfp_answer_lines_valid(lines, n) || tfp_answer_lines_parse(&b, lines, n) != 0)
        answer_fail("rendered lines do not parse back");
    for (unsigned i = 0; i < TFP_AF_COUNT; i++)
        if (tfp_answer_has(&a, (tfp_af_t)i) &&
            (!tfp_answer_has(&b, (tfp_af_t)i) ||
             (!tfp_answer_fields[i].is_str && a.num[i] != b.num[i])))
            answer_fail("the lines' round trip changed a field");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lines_round_trip(data, size);
    char *text = malloc(size + 1), *f[NFIELDS] = {0};
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *p = text;
    for (int i = 0; i < NFIELDS && p; i++) {
        f[i] = p;
        p = strchr(p, '\n');
        if (p)
            *p++ = '\0';
    }
    tfp_http_req_t in = {
        .method = f[0], .path = f[1], .wait = f[2], .content_length = -1,
        .content_type = f[4], .accept = f[5], .dtype = f[6], .shape = f[7], .user = f[8],
        .request_id = f[9], .max_body = 1u << 20, .protocol = f[11],
        .ours = {2, 3}, .repr_digest = f[12], .want_repr_digest = f[13],
    };
    if (f[3] && f[3][0] == '-')
        in.chunked = 1;
    else if (f[3] && f[3][0])
        in.content_length = (int64_t)(strtoull(f[3], NULL, 10) & INT64_MAX);
    if (f[10])
        in.max_body = strtoull(f[10], NULL, 10);

    if (f[0] && f[1])
        answer_round_trip(f[0], f[1]);
    tfp_op_t op;
    tfp_op_err_t e;
    tfp_status_t st = tfp_http_op_parse(&in, &op, &e);
    if (st != e.code)
        fail("status and error code differ", &e);
    if ((unsigned)op.kind >= TFP_OP_COUNT)
        fail("kind out of range", &e);
    if ((st == TFP_EMETHOD) != (e.allow != NULL))
        fail("allow set without a 405, or a 405 without it", &e);
    if (st != TFP_OK) {
        if (e.msg[0] == '\0')
            fail("refusal without a message", &e);
    } else {
        if (e.msg[0] != '\0')
            fail("message on success", &e);
        if (op.kind == TFP_OP_NONE)
            fail("accepted no operation", &e);
        if ((op.name[0] && !tfp_name_valid(op.name)) || (op.sub[0] && !tfp_name_valid(op.sub)))
            fail("invalid name accepted", &e);
        if ((op.who.user[0] && !tfp_user_id_valid(op.who.user)) ||
            (op.who.request_id[0] && !tfp_request_id_valid(op.who.request_id)))
            fail("invalid id accepted", &e);
        /* The operations a newcomer finds out with answer every version (http.c). */
        int any_version = op.kind == TFP_OP_HEALTH || op.kind == TFP_OP_READY ||
                          op.kind == TFP_OP_METRICS || op.kind == TFP_OP_INFO;
        if (op.who.protocol.min && !tfp_proto_valid(op.who.protocol))
            fail("an invalid protocol range accepted", &e);
        if (op.who.protocol.min && !any_version &&
            (op.who.protocol.max < in.ours.min || op.who.protocol.min > in.ours.max))
            fail("a protocol range outside the server's accepted", &e);
        if ((op.digest.repr.has || op.digest.content.has) && op.kind != TFP_OP_TENSOR_PUT)
            fail("a digest taken on another operation than a PUT", &e);
        if (op.body.kind == TFP_BODY_RAW && op.body.nbytes > in.max_body)
            fail("raw body above max-body accepted", &e);
        if (op.body.kind == TFP_BODY_RAW)
            raw_document(&op, &e);
        if (op.body.length >= 0 && (uint64_t)op.body.length > in.max_body &&
            op.body.kind != TFP_BODY_NONE && op.body.kind != TFP_BODY_JSON)
            fail("document above max-body accepted", &e);
    }
    free(text);
    return 0;
}
