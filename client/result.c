/* result.c - what a request's outcome and reply become: the tf_result_t record (op, request
 * id, failures and their messages, the server's JSON errors), decoding a reply into a
 * document (safetensors, a raw tensor, or Shumai's format), and the Shumai wire format's
 * client side.
 *
 * Pure functions over a request's record and a response; called on the thread driving the
 * client.
 */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include <nettle/sha2.h>

#include "client/internal.h"
#include "proto/strcopy.h"
#include "proto/jsonread.h"
#include "proto/raw.h"
#include "proto/safetensors.h"
#include "proto/shumai.h"

/* ---- outcomes ---------------------------------------------------------------------------- */

const char *tfi_op_name(int op)
{
    switch (op) {
    case TF_OP_GET: return "get";
    case TF_OP_PUT: return "put";
    case TF_OP_DELETE: return "delete";
    case TF_OP_EXCHANGE: return "call";
    case TFI_OP_LIST: return "list";
    case TFI_OP_INFO: return "info";
    case TFI_OP_UPGRADE: return "upgrade";
    case TFI_OP_CALL: return "feed";
    default: return "fetch";
    }
}

/* A fresh record for a request of op: the request id it will carry is the one given, else
 * the client's next id (used up), else a new one. */
void tfi_new_result(tf_client_t *c, tf_result_t *r, int op, const char *rid)
{
    memset(r, 0, sizeof(*r));
    r->stages = (tf_stages_t){-1, -1, -1, -1, -1, -1, -1, -1, -1};
    r->status = TF_EAGAIN;
    tfp_strcpy(r->op, sizeof(r->op), tfi_op_name(op));
    tfp_strcpy(r->transport, sizeof(r->transport), "http");
    if (rid && tfp_request_id_valid(rid)) {
        tfp_strcpy(r->request_id, sizeof(r->request_id), rid);
    } else if (c->next_rid[0] && !rid) {
        tfp_strcpy(r->request_id, sizeof(r->request_id), c->next_rid);
        c->next_rid[0] = '\0';
    } else {
        /* prefix-N, without snprintf: this runs for every request. The prefix, '-' and 20
         * digits always fit. */
        _Static_assert(sizeof(c->rid_prefix) + 1 + 20 <= sizeof(r->request_id),
                       "a made request id fits");
        char num[21];
        num[20] = '\0';
        const char *d = tfp_u64_digits(num + 20, ++c->rid_seq);
        size_t np = tfp_strcpy(r->request_id, sizeof(c->rid_prefix), c->rid_prefix);
        r->request_id[np] = '-';
        memcpy(r->request_id + np + 1, d, (size_t)(num + sizeof num - d));  /* with the NUL */
    }
}

int tfi_fd_sha256(int fd, uint64_t len, uint8_t sha[TFP_DIGEST_LEN])
{
    static __thread uint8_t buf[1 << 16];
    struct sha256_ctx h;
    sha256_init(&h);
    for (uint64_t off = 0; off < len;) {
        size_t want = len - off < sizeof buf ? (size_t)(len - off) : sizeof buf;
        ssize_t n = pread(fd, buf, want, (off_t)off);
        if (n <= 0)
            return -1;
        sha256_update(&h, (size_t)n, buf);
        off += (uint64_t)n;
    }
    sha256_digest(&h, TFP_DIGEST_LEN, sha);
    return 0;
}

int tfi_body_digest(tfi_op_t *op)
{
    struct sha256_ctx h;
    uint8_t sha[TFP_DIGEST_LEN];
    if (op->body_fd >= 0) {
        if (tfi_fd_sha256(op->body_fd, op->body_fd_len, sha) != 0)
            return -1;
    } else {
        sha256_init(&h);
        for (size_t i = 0; i < op->nsegs; i++)
            sha256_update(&h, op->lens[i], op->segs[i]);
        sha256_digest(&h, TFP_DIGEST_LEN, sha);
    }
    tfp_digest_format(sha, op->digest, sizeof op->digest);
    return 0;
}

/* TFETCH_TEST_CORRUPT=get (tests/digest.test): every document received is taken as if its
 * bytes had been changed on the way, whatever carried it: the digest computed of them
 * differs from the one they had. */
static int corrupt_gets(void)
{
    static atomic_int v = -1;       /* read once; threads racing to read it agree */
    int got = atomic_load_explicit(&v, memory_order_relaxed);
    if (got < 0) {
        const char *e = getenv("TFETCH_TEST_CORRUPT");
        got = e && strcmp(e, "get") == 0;
        atomic_store_explicit(&v, got, memory_order_relaxed);
    }
    return got;
}

void tfi_received_sha256(uint8_t sha[TFP_DIGEST_LEN])
{
    if (corrupt_gets())
        sha[0] ^= 0x01;
}

void tfi_doc_sha256(const void *p, size_t n, uint8_t sha[TFP_DIGEST_LEN])
{
    tfp_digest_sha256(p, n, sha);
    tfi_received_sha256(sha);
}

/* A verified get's document that came over UCX or shm against the Repr-Digest the answer
 * named (HTTP's is checked as it completes, http.c): TF_OK, or TF_EDIGEST recorded and
 * the document dropped, never taken as data. */
static void verify_doc(tf_fetch_t *f)
{
    tf_result_t *res = &f->result;
    const tfp_answer_t *a = &f->reply.answer;
    tfp_digest_t want;
    tfp_err_t err;
    uint8_t got[TFP_DIGEST_LEN];
    if (!tfp_answer_has(a, TFP_AF_REPR_DIGEST))
        tfi_rfail(res, TF_EDIGEST, "the server sent no Repr-Digest to verify the document "
                  "against (a server from before digests?)");
    else if (!f->doc->raw)
        tfi_rfail(res, TF_EDIGEST, "the document did not arrive in one piece: it cannot be "
                  "verified");
    else if (tfp_digest_parse(tfp_answer_str(a, TFP_AF_REPR_DIGEST), &want, &err) == TFP_OK &&
             (tfi_doc_sha256(f->doc->raw, f->doc->raw_len, got),
              memcmp(got, want.sha256, TFP_DIGEST_LEN) == 0))
        return;
    else {
        char field[TFP_DIGEST_FIELD_MAX];
        tfp_digest_format(got, field, sizeof field);
        tfi_rfail(res, TF_EDIGEST, "the %zu bytes received over %s do not match the server's "
                  "Repr-Digest (they are %s): not taken", f->doc->raw_len, res->transport,
                  field);
    }
    tf_doc_free(f->doc);
    f->doc = NULL;
}

void tfi_verify_received(tf_fetch_t *f)
{
    if (f->c && f->c->verify && f->op.kind == TF_OP_GET && f->result.status == TF_OK &&
        f->doc && strncmp(f->result.transport, "http", 4) != 0)
        verify_doc(f);
}

void tfi_stages_finish(tf_fetch_t *f)
{
    tf_stages_t *s = &f->result.stages;
    const tfp_answer_t *a = &f->reply.answer;
    double total = (double)((f->t_done_ns ? f->t_done_ns : tfx_now_ns()) - f->t0_ns) / 1e6;
    if (f->result.seconds < total / 1000.0)     /* the decoding after the answer included */
        f->result.seconds = total / 1000.0;
    s->total = total;
    if (tfp_answer_has(a, TFP_AF_SRV_HANDLER)) {
        s->queue = tfp_answer_has(a, TFP_AF_SRV_QUEUE) ? a->num[TFP_AF_SRV_QUEUE] / 1000.0 : 0;
        s->handler = a->num[TFP_AF_SRV_HANDLER] / 1000.0;
        s->server = s->queue + s->handler;
    }
    if (f->rt_ms >= 0)                  /* the round trip but the server's time */
        s->receive = f->rt_ms > s->server ? f->rt_ms - (s->server > 0 ? s->server : 0) : 0;
    /* Our clock and the server's meet only in durations: a send the transport saw complete
     * after the server began (UCX's rendezvous is acknowledged late) is cut to fit. */
    double sum = 0;
    const double *parts[] = {&s->connect, &s->upgrade, &s->send, &s->server, &s->receive,
                             &s->decode};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        sum += *parts[i] > 0 ? *parts[i] : 0;
    if (sum > total && s->send > 0)
        s->send = s->send > sum - total ? s->send - (sum - total) : 0;
    origin_t *o = f->origin;
    if (o) {
        o->last_stages = *s;
        tfp_strcpy(o->last_transport, sizeof o->last_transport, f->result.transport);
        tfp_strcpy(o->last_fallback, sizeof o->last_fallback, f->result.fallback);
    }
}

void tfi_take_answer(tf_fetch_t *f, const tfp_answer_t *a)
{
    f->reply.answer = *a;
    if (tfp_answer_has(a, TFP_AF_ETAG))     /* valid by construction (tfp_answer_set_str) */
        tfp_strcpy(f->result.etag, sizeof(f->result.etag), tfp_answer_str(a, TFP_AF_ETAG));
}

tf_status_t tfi_rfail(tf_result_t *r, tf_status_t st, const char *fmt, ...)
{
    r->status = st;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->error, sizeof(r->error), fmt, ap);
        va_end(ap);
    } else {
        tfp_strcpy(r->error, sizeof(r->error), tf_strerror(st));
    }
    return st;
}

/* Refuses a blocking call before it starts: tf_client_last says why. */
tf_status_t tfi_refuse(tf_client_t *c, int op, tf_status_t st, const char *msg)
{
    tfi_new_result(c, &c->last, op, NULL);
    return tfi_rfail(&c->last, st, "%s", msg ? msg : tf_strerror(st));
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
tf_status_t tfi_error_body(tf_result_t *res, long status, const uint8_t *body, size_t len)
{
    tfp_status_t code = TFP_EINTERNAL;
    char msg[sizeof(res->error)];

    if (body && len &&
        tfp_parse_error_body((const char *)body, len, &code, msg, sizeof(msg)) == 0) {
        tf_status_t st = tfi_from_proto(code);
        if (st == TF_OK)
            st = TF_EHTTP;
        return tfi_rfail(res, st, "%s", msg[0] ? msg : tf_strerror(st));
    }
    char excerpt[160] = "";
    if (body)
        body_excerpt(excerpt, sizeof(excerpt), body, len);
    if (excerpt[0])
        return tfi_rfail(res, TF_EHTTP, "HTTP %ld: %s", status, excerpt);
    return tfi_rfail(res, TF_EHTTP, "HTTP %ld", status);
}

/* ---- Shumai's wire format ------------------------------------------------------------------ */
/* The codec is proto's (proto/shumai.h); here is only what a client adds: the provenance it
 * sends, the props stock Shumai sends, and what a reply's header becomes in the document. */

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
tf_status_t tfi_shumai_check(tf_result_t *res, const tf_doc_t *doc)
{
    tfp_err_t err;
    if (tfp_shumai_check_doc(doc->d, NULL, &err) != TFP_OK)
        return tfi_rfail(res, TF_EINVAL, "%s", err.msg);
    return TF_OK;
}

static const char shumai_props[] = "{\"collectStats\":false}";

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
        return tfi_rfail(res, TF_ENOMEM, NULL);
    if (pst != TFP_OK)
        return tfi_rfail(res, TF_EPROTO, "bad shumai response: %s", err.msg);
    if (shumai_meta(m.doc, &m) != TF_OK) {
        tfp_shumai_msg_clear(&m);
        return tfi_rfail(res, TF_ENOMEM, NULL);
    }
    *out = m.doc;
    return TF_OK;
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

    if (tfp_raw_check(tfx_hc_resp_header(r, "Tfetch-Dtype"), tfx_hc_resp_header(r, "Tfetch-Shape"),
                      r->body_len, &dt, &rank, shape, &err) != TFP_OK)
        return tfi_rfail(res, TF_EPROTO, "bad raw response: %s", err.msg);
    last_segment(url, name, sizeof(name));
    if (!tfp_name_valid(name))
        snprintf(name, sizeof(name), "tensor");
    tfp_doc_t *d = tfp_doc_new();
    if (!d)
        return tfi_rfail(res, TF_ENOMEM, NULL);
    if (tfp_doc_add(d, name, dt, rank, shape, r->body, r->body_len, &err) != TFP_OK) {
        tfp_doc_free(d);
        if (err.code == TFP_ENOMEM)
            return tfi_rfail(res, TF_ENOMEM, NULL);
        return tfi_rfail(res, TF_EPROTO, "bad raw response: %s", err.msg);
    }
    *out = d;
    return TF_OK;
}

/* Decodes the response in req into f->doc, which takes over the body buffer. The
 * Content-Type decides when it names safetensors or a raw tensor; else the request's
 * format does. */
tf_status_t tfi_decode_doc(tf_fetch_t *f, tfx_hc_req_t *req)
{
    const tfx_hc_resp_t *r = tfx_hc_req_response(req);
    tfp_doc_t *d = NULL;
    tfp_err_t err;
    tfp_status_t pst;
    tf_status_t st;

    const char *ct = tfx_hc_resp_header(r, "Content-Type");
    if (!r->body || r->body_len == 0)
        return tfi_rfail(&f->result, TF_EPROTO, "empty response body");
    if (media_is(ct, MIME_RAW) && tfx_hc_resp_header(r, "Tfetch-Dtype")[0]) {
        if ((st = decode_raw(&f->result, f->op.url, r, &d)) != TF_OK)
            return st;
    } else if (f->op.format == TF_FORMAT_SHUMAI && !media_is(ct, MIME_SAFETENSORS)) {
        if ((st = shumai_decode(&f->result, r->body, r->body_len, &d)) != TF_OK)
            return st;
    } else if (media_is(ct, "application/json") || media_is(ct, "text/plain") ||
               media_is(ct, "text/html")) {
        /* Not a document at all (e.g. the URL is /v1/info, or a proxy's page): say so rather
         * than read its first bytes as a header length. */
        return tfi_rfail(&f->result, TF_EPROTO, "the reply is %.40s, not a tensor document "
                         "(is the URL a /v1/tensors/NAME or /v1/call/ROUTE?)", ct);
    } else if ((pst = tfp_st_decode(r->body, r->body_len, NULL, &d, &err)) != TFP_OK) {
        /* Out of memory while decoding is not a bad response. */
        if (pst == TFP_ENOMEM)
            return tfi_rfail(&f->result, TF_ENOMEM, NULL);
        return tfi_rfail(&f->result, TF_EPROTO, "bad safetensors response: %s", err.msg);
    }
    /* The decoded tensors point into the body: hand the buffer to the document. */
    uint8_t *body = tfx_hc_req_take_body(req, NULL);
    st = tfi_doc_wrap(d, body, &f->doc);
    if (st != TF_OK) {
        tfp_doc_free(d);
        free(body);
        return tfi_rfail(&f->result, st, NULL);
    }
    return TF_OK;
}

/* ---- request bodies ------------------------------------------------------------------------ */

/* The document as a safetensors body: its header, then each tensor's bytes, borrowed. */
static tf_status_t render_safetensors(tfi_op_t *op, tf_result_t *res)
{
    if (op->body->packed) {                 /* already its bytes, in one piece */
        op->segs[op->nsegs] = op->body->packed_p;
        op->lens[op->nsegs++] = op->body->packed;
        return TF_OK;
    }
    size_t hlen = 0;
    tf_status_t st = tf_doc_encode_header(op->body, &op->hdr, &hlen);
    if (st != TF_OK)
        return tfi_rfail(res, st, "cannot encode the document: %s", tf_strerror(st));
    op->segs[op->nsegs] = op->hdr;
    op->lens[op->nsegs++] = hlen;
    for (size_t i = 0; i < tf_doc_count(op->body); i++) {
        const tf_tensor_t *t = tf_doc_at(op->body, i);
        if (t->nbytes) {
            op->segs[op->nsegs] = t->data;
            op->lens[op->nsegs++] = t->nbytes;
        }
    }
    return TF_OK;
}

/* The document's one F32 tensor as a Shumai body: words and shape, data, props. */
static tf_status_t render_shumai(tfi_op_t *op, tf_result_t *res)
{
    const tfp_tensor_t *t = NULL;
    tfp_err_t err;
    size_t hlen = 0;
    if (tfp_shumai_check_doc(op->body->d, &t, &err) != TFP_OK)
        return tfi_rfail(res, TF_EINVAL, "%s", err.msg);
    if (!(op->hdr = malloc(TFP_SHUMAI_MAX_HEADER)))
        return tfi_rfail(res, TF_ENOMEM, NULL);
    if (tfp_shumai_encode_header(t->rank, t->shape,
                                 shumai_provenance(op->user[0] ? op->user : NULL), 0,
                                 sizeof(shumai_props) - 1, op->hdr, TFP_SHUMAI_MAX_HEADER, &hlen,
                                 &err) != TFP_OK)
        return tfi_rfail(res, TF_EINVAL, "cannot encode for shumai: %s", err.msg);
    op->segs[op->nsegs] = op->hdr;
    op->lens[op->nsegs++] = hlen;
    if (t->nbytes) {
        op->segs[op->nsegs] = t->data;
        op->lens[op->nsegs++] = (size_t)t->nbytes;
    }
    op->segs[op->nsegs] = shumai_props;
    op->lens[op->nsegs++] = sizeof(shumai_props) - 1;
    return TF_OK;
}

/* A put's body from a file (tf_fetch_start_fd): one segment, its read-only mapping, which
 * only UCX reads (HTTP and shm read the file itself, so its pages are not held here). */
static tf_status_t render_file(tfi_op_t *op, tf_result_t *res)
{
    op->segs = calloc(1, sizeof(*op->segs));
    op->lens = calloc(1, sizeof(*op->lens));
    if (!op->segs || !op->lens) {
        tfi_body_free(op);
        return tfi_rfail(res, TF_ENOMEM, NULL);
    }
    void *p = mmap(NULL, (size_t)op->body_fd_len, PROT_READ, MAP_SHARED, op->body_fd, 0);
    if (p == MAP_FAILED) {
        tfi_body_free(op);
        return tfi_rfail(res, TF_EIO, "cannot map the body's file");
    }
    op->body_map = p;
    op->segs[0] = p;
    op->lens[0] = (size_t)op->body_fd_len;
    op->nsegs = 1;
    op->body_len = op->body_fd_len;
    return TF_OK;
}

tf_status_t tfi_body_render(tfi_op_t *op, tf_result_t *res)
{
    if (op->body_fd >= 0 && !op->body)
        return render_file(op, res);
    if (!op->body)
        return TF_OK;
    size_t n = tf_doc_count(op->body) + 3;     /* header, tensors; Shumai: 3 in all */
    op->segs = calloc(n, sizeof(*op->segs));
    op->lens = calloc(n, sizeof(*op->lens));
    if (!op->segs || !op->lens) {
        tfi_body_free(op);
        return tfi_rfail(res, TF_ENOMEM, NULL);
    }
    tf_status_t st = op->format == TF_FORMAT_SHUMAI ? render_shumai(op, res)
                                                    : render_safetensors(op, res);
    if (st != TF_OK) {
        tfi_body_free(op);
        return st;
    }
    op->body_len = 0;
    for (size_t i = 0; i < op->nsegs; i++)
        op->body_len += op->lens[i];
    return TF_OK;
}

void tfi_body_free(tfi_op_t *op)
{
    if (op->body_map)
        munmap(op->body_map, (size_t)op->body_fd_len);
    op->body_map = NULL;
    free(op->hdr);
    free(op->segs);
    free(op->lens);
    op->hdr = NULL;
    op->segs = NULL;
    op->lens = NULL;
    op->nsegs = 0;
    op->body_len = 0;
}
