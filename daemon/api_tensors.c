/* api_tensors.c - GET/PUT/DELETE /v1/tensors/{name} and the listing.
 *
 * PUT bodies land in one buffer sized from Content-Length; a raw (octet-stream) PUT reserves
 * room in front of the body for its safetensors header, so the stored document is contiguous
 * without copying the payload. GETs answer from the stored blob itself (zero copy,
 * reference-counted); ?wait= long-polls through the waiters without holding a thread.
 * Runs on the transports' threads; see api.h.
 */
#include "config.h"
#include "daemon/api.h"
#include "proto/strcopy.h"
#include "proto/jsonview.h"
#include "proto/raw.h"
#include "transports/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

/* Answers with doc in the form Accept asks for when that is not safetensors: JSON, or one
 * tensor's raw bytes (borrowed from doc: release(arg) runs once they are sent), or a 406.
 * Returns 1 if it answered; 0 (release not called) when safetensors is wanted. */
static int respond_view(tfx_req_t *r, tfd_ctx_t *c, const tfp_doc_t *doc,
                        void (*release)(void *), void *arg)
{
    tfp_media_t want = c->op->accept;
    if (want == TFP_MEDIA_OCTET) {
        if (doc->n != 1) {
            api_fail(r, c, TFP_ENOTACCEPT, "the answer holds %zu tensors; "
                     "application/octet-stream carries exactly one (ask for "
                     "application/x-safetensors)", doc->n);
            goto release;
        }
        const tfp_tensor_t *t = &doc->t[0];
        char shape[TFP_MAX_RANK * 21 + 1];
        tfp_raw_format_shape(t->rank, t->shape, shape, sizeof shape);
        tfx_req_add_header(r, "Tfetch-Dtype", tfp_dtype_name(t->dtype));
        tfx_req_add_header(r, "Tfetch-Shape", shape);
        tfx_req_add_header(r, "Tfetch-Name", t->name);
        tfx_respond(r, 200, "application/octet-stream", t->data, (size_t)t->nbytes, release, arg);
        return 1;
    }
    if (want == TFP_MEDIA_JSON) {
        char *json;
        size_t len;
        tfp_err_t err;
        if (tfp_jsonview_render(doc, TFD_LIVE(c->api->cfg->json_max_elems), &json, &len, &err) != TFP_OK)
            api_fail(r, c, err.code, "%s", err.msg);
        else
            api_respond_text(r, 200, "application/json", json, len);
        goto release;
    }
    if (want == TFP_MEDIA_OTHER) {
        api_fail(r, c, TFP_ENOTACCEPT, "Accept lists nothing tfetchd produces: use "
                 "application/x-safetensors, application/octet-stream or application/json");
        goto release;
    }
    return 0;
release:
    if (release)
        release(arg);
    return 1;
}

void api_serve_blob(tfx_req_t *r, tfd_ctx_t *c, tfd_blob_t *b)
{
    if (!respond_view(r, c, b->doc, tfd_blob_release, b))
        api_respond_blob(r, 200, "application/x-safetensors", b);
}

/* The versions of ours in an ETag list, for a store condition (other epochs never match). */
static size_t our_versions(const tfp_etags_t *l, uint64_t epoch, uint64_t *v)
{
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        if (l->tag[i].epoch == epoch)
            v[n++] = l->tag[i].version;
    return n;
}

/* The request's If-Match / If-None-Match as a store condition over v[2][TFP_ETAGS_MAX]; NULL
 * when it has none. */
static const tfd_store_cond_t *store_cond(const tfd_ctx_t *c, tfd_store_cond_t *cond,
                                          uint64_t v[2][TFP_ETAGS_MAX])
{
    const tfp_etags_t *im = &c->op->cond.if_match, *inm = &c->op->cond.if_none_match;
    uint64_t epoch = tfd_store_epoch(c->api->store);
    if (!im->present && !inm->present)
        return NULL;
    *cond = (tfd_store_cond_t){.present = im->any, .absent = inm->any};
    if (im->present && !im->any) {
        cond->versions = v[0];
        cond->n = our_versions(im, epoch, v[0]);
    }
    if (inm->present && !inm->any) {
        cond->not_versions = v[1];
        cond->n_not = our_versions(inm, epoch, v[1]);
    }
    return cond;
}

/* If-None-Match names b's version: a GET answers 304, or with ?wait waits for a new one. */
static int unchanged(const tfd_ctx_t *c, const tfd_blob_t *b)
{
    const tfp_etags_t *inm = &c->op->cond.if_none_match;
    return inm->present && tfp_etags_match(inm, tfd_store_epoch(c->api->store), b->version);
}

/* Content-Disposition for a stored document's GET: a download (wget, a browser) is saved as
 * NAME.safetensors, NAME.raw (one tensor's bytes) or NAME.json, by the form served. Names are
 * [A-Za-z0-9._-] (proto/ids.c), so they go in the quoted filename as they are. */
static void add_disposition(tfx_req_t *r, const tfd_ctx_t *c, const tfp_doc_t *doc)
{
    const char *ext;
    switch (c->op->accept) {
    case TFP_MEDIA_OCTET:
        if (doc->n != 1)
            return;                         /* a 406 follows */
        ext = "raw";
        break;
    case TFP_MEDIA_JSON:
        ext = "json";
        break;
    case TFP_MEDIA_OTHER:
        return;                             /* a 406 follows */
    default:
        ext = "safetensors";
        break;
    }
    char v[TFP_MAX_TENSOR_NAME + 64];
    snprintf(v, sizeof v, "attachment; filename=\"%s.%s\"", c->name, ext);
    tfx_req_add_header(r, "Content-Disposition", v);
}

/* A stored document, answered under the request's conditions: ETag and Accept-Ranges with
 * the safetensors form; 412 when If-Match fails, 304 when If-None-Match holds, 206 for one
 * satisfiable Range (If-Range permitting; zero copy, a slice of the blob), 416 otherwise. */
static void serve_stored(tfx_req_t *r, tfd_ctx_t *c, tfd_blob_t *b)
{
    const tfp_op_t *op = c->op;
    uint64_t epoch = tfd_store_epoch(c->api->store);
    if (!tfp_op_accepts_safetensors(op)) {
        add_disposition(r, c, b->doc);
        api_serve_blob(r, c, b);            /* a view: its own representation, no tag */
        return;
    }
    char etag[TFP_ETAG_LEN], cr[80];
    tfp_etag_format(etag, epoch, b->version);
    if (op->cond.if_match.present && !tfp_etags_match(&op->cond.if_match, epoch, b->version)) {
        tfd_blob_unref(b);
        api_fail(r, c, TFP_EPRECOND, "If-Match does not match the stored version of '%s'",
                 c->name);
        return;
    }
    (void)tfp_answer_set_str(tfx_req_answer(r), TFP_AF_ETAG, etag);
    if (unchanged(c, b)) {
        tfd_blob_unref(b);
        tfx_respond(r, 304, NULL, "", 0, NULL, NULL);
        return;
    }
    tfx_req_add_header(r, "Accept-Ranges", "bytes");
    add_disposition(r, c, b->doc);
    if (op->digest.want) {          /* of the whole document, a range's answer included */
        uint8_t sha[TFP_DIGEST_LEN];
        char field[TFP_DIGEST_FIELD_MAX];
        tfd_blob_sha256(b, sha);
        tfp_digest_format(sha, field, sizeof field);
        (void)tfp_answer_set_str(tfx_req_answer(r), TFP_AF_REPR_DIGEST, field);  /* typed:
                                     * every transport carries it (proto/answer.h) */
    }
    const tfp_range_t *rg = &op->cond.range;
    if (rg->kind != TFP_RANGE_NONE &&
        (!op->cond.if_range.present || tfp_etags_match(&op->cond.if_range, epoch, b->version))) {
        uint64_t off, len;
        if (tfp_range_resolve(rg, b->len, &off, &len) != 0) {
            size_t total = b->len;
            snprintf(cr, sizeof cr, "bytes */%zu", total);
            tfx_req_add_header(r, "Content-Range", cr);
            tfd_blob_unref(b);
            api_fail(r, c, TFP_ERANGE, "the range is outside the %zu-byte document", total);
            return;
        }
        snprintf(cr, sizeof cr, "bytes %llu-%llu/%zu", (unsigned long long)off,
                 (unsigned long long)(off + len - 1), b->len);
        tfx_req_add_header(r, "Content-Range", cr);
        tfx_respond(r, 206, "application/x-safetensors", b->data + off, (size_t)len,
                    tfd_blob_release, b);
        return;
    }
    api_respond_stored(r, c, 200, "application/x-safetensors", b);
}

static int tensor_present(void *arg)
{
    tfd_ctx_t *c = arg;
    tfd_blob_t *b = tfd_store_get(c->api->store, c->name);
    int ready = b && !unchanged(c, b);      /* with If-None-Match: a new version */
    tfd_blob_unref(b);
    return ready;
}

void api_handle_get(tfx_req_t *r, tfd_ctx_t *c)
{
    const tfd_api_t *s = c->api;
    tfd_blob_t *b = tfd_store_get(s->store, c->name);
    /* With ?wait and If-None-Match naming the stored version, wait for a new one (304 when
     * none came); otherwise answer what is there. */
    if (b && (!unchanged(c, b) || c->waiter.deadline_ms == 0 ||
              c->waiter.state == TFD_WAIT_EXPIRED || c->waiter.state == TFD_WAIT_SHUTDOWN)) {
        serve_stored(r, c, b);
        return;
    }
    tfd_blob_unref(b);
    b = NULL;
    switch (c->waiter.state) {
    case TFD_WAIT_SHUTDOWN:
        api_fail(r, c, TFP_EBUSY, "the server is shutting down");
        return;
    case TFD_WAIT_EXPIRED:
        api_fail(r, c, TFP_ENOTFOUND, "no tensor named '%s' (waited %llu ms)", c->name,
                 (unsigned long long)(c->waiter.deadline_ms - c->start_ns / 1000000u));
        return;
    default:
        break;
    }
    if (c->waiter.deadline_ms == 0) {
        api_fail(r, c, TFP_ENOTFOUND, "no tensor named '%s'", c->name);
        return;
    }
    int armed = tfd_waiters_arm(s->waiters, &c->waiter, tensor_present, c);
    if (armed == 1) {
        tfx_req_suspend(r);
    } else if (armed == 0) {
        c->waiter.state = TFD_WAIT_WOKEN;
        b = tfd_store_get(s->store, c->name);
        if (b && !unchanged(c, b)) {
            serve_stored(r, c, b);
        } else {                                    /* deleted again: wait once more */
            tfd_blob_unref(b);
            tfx_req_suspend(r);
            tfx_req_resume(r);
        }
    } else if (armed == -1) {
        api_fail(r, c, TFP_EBUSY, "too many waiting requests (max-waiters %u)",
                 TFD_LIVE(s->cfg->max_waiters));
    } else {
        api_fail(r, c, TFP_EBUSY, "the server is shutting down");
    }
}

void api_finish_get(tfx_req_t *r, tfd_ctx_t *c)
{
    (void)r;
    tfd_waiters_disarm(c->api->waiters, &c->waiter);
}

/* The body is accepted: reserve store space for it. */
void api_begin_put(tfx_req_t *r, tfd_ctx_t *c)
{
    const tfd_api_t *s = c->api;
    const tfp_op_body_t *body = &c->op->body;
    uint64_t need = body->kind == TFP_BODY_RAW ? c->raw_hdr_len + body->nbytes
                                               : (body->length >= 0 ? (uint64_t)body->length : 0);
    if (need && tfd_store_reserve(s->store, need) != 0) {
        api_fail(r, c, TFP_ENOSPACE, "storing %llu bytes would exceed the store's limit of "
                 "%llu bytes", (unsigned long long)need, (unsigned long long)tfd_store_max(s->store));
        return;
    }
    c->reserved = need;
    c->charged = need;              /* on_body_grow reserves only what goes beyond */
}

/* A test hook (TFETCHD_TEST_CORRUPT=put, tests/digest.test): the bytes of every PUT are
 * taken as if changed on the way, whatever carried them (the digest computed of them
 * differs), so a verified PUT's mismatch can be shown over UCX and shm, where no proxy can
 * sit between the two sides. */
static int corrupt_puts(void)
{
    static atomic_int v = -1;       /* read once; threads racing to read it agree */
    int got = atomic_load_explicit(&v, memory_order_relaxed);
    if (got < 0) {
        const char *e = getenv("TFETCHD_TEST_CORRUPT");
        got = e && strcmp(e, "put") == 0;
        atomic_store_explicit(&v, got, memory_order_relaxed);
    }
    return got;
}

/* A PUT's Repr-Digest and Content-Digest (sha-256, RFC 9530) against the bytes received
 * (a raw body's own, without the header the daemon put before them): 0 when they match or
 * none was sent (a safetensors body's is then kept as the version's digest), else -1 with
 * 400 TF_EDIGEST answered and nothing to be stored. */
static int check_digests(tfx_req_t *r, tfd_ctx_t *c, tfd_blob_t *b)
{
    const tfp_digest_t *dg[2] = {&c->op->digest.repr, &c->op->digest.content};
    static const char *const names[2] = {"Repr-Digest", "Content-Digest"};
    if (!dg[0]->has && !dg[1]->has)
        return 0;
    size_t skip = c->op->body.kind == TFP_BODY_RAW ? c->raw_hdr_len : 0;
    uint8_t got[TFP_DIGEST_LEN];
    tfp_digest_sha256(b->data + skip, b->len - skip, got);
    if (corrupt_puts())
        got[0] ^= 0x01;
    for (int i = 0; i < 2; i++) {
        if (dg[i]->has && memcmp(dg[i]->sha256, got, TFP_DIGEST_LEN) != 0) {
            char field[TFP_DIGEST_FIELD_MAX];
            tfp_digest_format(got, field, sizeof field);
            api_fail(r, c, TFP_EDIGEST, "%s does not match the %zu bytes received (they are "
                     "%s): nothing was stored", names[i], b->len - skip, field);
            return -1;
        }
    }
    if (skip == 0)
        tfd_blob_set_sha256(b, got);
    return 0;
}

void api_handle_put(tfx_req_t *r, tfd_ctx_t *c)
{
    const tfd_api_t *s = c->api;
    uint8_t *base;
    size_t cap, len;
    tfp_doc_t *doc;
    if (api_body_doc(r, c, &base, &cap, &len, &doc) != 0)
        return;
    tfd_blob_t *b = api_body_blob(r, c, base, cap, len, doc);
    if (!b) {
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        return;
    }
    if (check_digests(r, c, b) != 0) {
        tfd_blob_unref(b);
        return;
    }
    if (c->op->ttl_s)
        b->expires_ms = tfx_now_ms() + c->op->ttl_s * 1000u;
    tfd_store_cond_t cond;
    uint64_t v[2][TFP_ETAGS_MAX], version = 0;
    int rc = tfd_store_put_if(s->store, c->name, b, c->reserved, store_cond(c, &cond, v),
                              &version);
    c->reserved = 0;
    if (rc == -2) {
        tfd_blob_unref(b);
        api_fail(r, c, TFP_EPRECOND, "the condition (If-Match / If-None-Match) does not hold "
                 "for '%s': nothing was stored", c->name);
        return;
    }
    if (rc < 0) {
        tfd_blob_unref(b);
        api_fail(r, c, TFP_ENOSPACE, "storing %zu bytes would exceed the store's limit of %llu "
                 "bytes", len, (unsigned long long)tfd_store_max(s->store));
        return;
    }
    tfd_waiters_notify(s->waiters, c->name);
    char etag[TFP_ETAG_LEN];
    tfp_etag_format(etag, tfd_store_epoch(s->store), version);
    (void)tfp_answer_set_str(tfx_req_answer(r), TFP_AF_ETAG, etag);
    tfx_respond(r, rc == 1 ? 204 : 201, NULL, "", 0, NULL, NULL);
}

void api_handle_delete(tfx_req_t *r, tfd_ctx_t *c)
{
    tfd_store_cond_t cond;
    uint64_t v[2][TFP_ETAGS_MAX];
    int rc = tfd_store_delete_if(c->api->store, c->name, store_cond(c, &cond, v));
    if (rc == -2)
        api_fail(r, c, TFP_EPRECOND, "the condition (If-Match / If-None-Match) does not hold "
                 "for '%s': nothing was deleted", c->name);
    else if (rc == 0)
        tfx_respond(r, 204, NULL, "", 0, NULL, NULL);
    else
        api_fail(r, c, TFP_ENOTFOUND, "no tensor named '%s'", c->name);
}

/* One page of the listing being written: the query, and how far it got. */
typedef struct {
    tfp_jw_t *w;
    const tfp_op_t *op;
    uint64_t n;
    char last[TFP_MAX_TENSOR_NAME + 1];     /* the last name written */
    int more;                       /* a matching name came after the page was full */
    tfd_auth_t *auth;               /* only names the principal may read are listed */
} list_page_t;

static void list_one(const char *name, const tfd_blob_t *b, void *arg)
{
    list_page_t *pg = arg;
    tfp_jw_t *w = pg->w;
    size_t plen = strlen(pg->op->list.prefix);

    if (pg->more || strncmp(name, pg->op->list.prefix, plen) != 0 ||
        (pg->op->list.after[0] && strcmp(name, pg->op->list.after) <= 0) ||
        !tfd_auth_allows(pg->auth, &pg->op->who, 0, TFP_RIGHT_READ, name))
        return;
    if (pg->op->list.limit && pg->n == pg->op->list.limit) {
        pg->more = 1;
        return;
    }
    pg->n++;
    tfp_strcpy(pg->last, sizeof pg->last, name);
    tfp_jw_obj_begin(w);
    tfp_jw_key(w, "name");
    tfp_jw_str(w, name);
    tfp_jw_key(w, "bytes");
    tfp_jw_uint(w, b->len);
    tfp_jw_key(w, "tensors");
    tfp_jw_arr_begin(w);
    for (size_t i = 0; i < b->doc->n; i++) {
        const tfp_tensor_t *t = &b->doc->t[i];
        tfp_jw_obj_begin(w);
        tfp_jw_key(w, "name");
        tfp_jw_str(w, t->name);
        tfp_jw_key(w, "dtype");
        tfp_jw_str(w, tfp_dtype_name(t->dtype));
        tfp_jw_key(w, "shape");
        tfp_jw_arr_begin(w);
        for (int d = 0; d < t->rank; d++)
            tfp_jw_uint(w, t->shape[d]);
        tfp_jw_arr_end(w);
        tfp_jw_obj_end(w);
    }
    tfp_jw_arr_end(w);
    tfp_jw_obj_end(w);
}

void api_handle_list(tfx_req_t *r, tfd_ctx_t *c)
{
    tfp_jw_t w;
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "tensors");
    tfp_jw_arr_begin(&w);
    list_page_t pg = {.w = &w, .op = c->op, .auth = c->api->auth};
    tfd_store_each(c->api->store, list_one, &pg);
    tfp_jw_arr_end(&w);
    if (pg.more) {                  /* the page is full: "next" is the after= of the next one */
        tfp_jw_key(&w, "next");
        tfp_jw_str(&w, pg.last);
    }
    tfp_jw_obj_end(&w);
    api_respond_json(r, c, &w);
}
