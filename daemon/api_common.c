/* api_common.c - what every endpoint handler shares: failures (recorded for the metrics),
 * answers from malloc'd text, JSON writers and blobs, safetensors blobs made from a document,
 * and request bodies (accepting the document the operation describes, then decoding it).
 *
 * Threads: the transports' threads, each call for its own request.
 */
#include "config.h"
#include "daemon/api.h"
#include "daemon/shm.h"
#include "proto/strcopy.h"
#include "proto/safetensors.h"
#include "proto/shumai.h"
#include "transports/buf.h"
#include "transports/shm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- answers ---------------------------------------------------------------------------- */

void api_fail(tfx_req_t *r, tfd_ctx_t *c, tfp_status_t code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->code = code;
    tfx_respond_error(r, code, "%s", msg);
}

void api_set_user(tfd_ctx_t *c, const char *user)
{
    if (user != c->user)
        tfp_strcpy(c->user, sizeof c->user, user);
    const tfp_op_who_t *w = &c->op->who;
    if (w->principal[0])            /* a forwarded user (router.c checked forward) is keyed
                                     * under its own principal */
        snprintf(c->state_key, sizeof c->state_key, "%s/%s",
                 w->user_principal[0] ? w->user_principal : w->principal, c->user);
    else
        tfp_strcpy(c->state_key, sizeof c->state_key, c->user);
}

int api_forbid(tfx_req_t *r, tfd_ctx_t *c, tfp_right_t right, const char *name)
{
    tfd_auth_count_failure(c->api->auth, TFD_AUTH_FORBIDDEN);
    if (name)
        api_fail(r, c, TFP_EFORBIDDEN, "principal %s has no %s right on '%s'",
                 c->op->who.principal, tfp_right_name(right), name);
    else
        api_fail(r, c, TFP_EFORBIDDEN, "principal %s has no %s right", c->op->who.principal,
                 tfp_right_name(right));
    return -1;
}

void api_respond_text(tfx_req_t *r, unsigned status, const char *ctype, char *text, size_t len)
{
    tfx_respond(r, status, ctype, text, len, free, text);
}

void api_respond_json(tfx_req_t *r, tfd_ctx_t *c, tfp_jw_t *w)
{
    size_t len;
    char *text = tfp_jw_finish(w, &len);
    if (!text) {
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        return;
    }
    api_respond_text(r, 200, "application/json", text, len);
}

/* tfx_body_t's share for a stored blob: its sealed memfd (tfd_store_share). */
static tfp_status_t share_blob(void *store, void *blob, int *fd, size_t *offset, size_t *size)
{
    int rc = tfd_store_share(store, blob, fd, offset, size);
    return rc == 0 ? TFP_OK : rc == -2 ? TFP_ENOSPACE : TFP_ENOMEM;
}

/* tfx_body_t's share for an answer's blob (a call's outputs): its own memfd, the tfx_buf
 * it lies in sealed where it is, or a copy (tfd_blob_share). Only shm asks. */
static tfp_status_t share_own(void *unused, void *blob, int *fd, size_t *offset, size_t *size)
{
    (void)unused;
    return tfd_blob_share(blob, fd, offset, size) == 0 ? TFP_OK : TFP_ENOMEM;
}

void api_respond_blob(tfx_req_t *r, unsigned status, const char *ctype, tfd_blob_t *b)
{
    tfx_body_t body = {b->data, b->len, tfd_blob_release, b, share_own, NULL};
    tfx_respond_body(r, status, ctype, &body);
}

void api_respond_stored(tfx_req_t *r, tfd_ctx_t *c, unsigned status, const char *ctype,
                        tfd_blob_t *b)
{
    tfx_body_t body = {b->data, b->len, tfd_blob_release, b, share_blob, c->api->store};
    tfx_respond_body(r, status, ctype, &body);
}

tfd_blob_t *api_body_blob(tfx_req_t *r, tfd_ctx_t *c, uint8_t *base, size_t cap, size_t len,
                          tfp_doc_t *doc)
{
    void (*give_back)(void *) = c->body_give_back;
    int fd;
    void *p;
    size_t size;
    c->body_give_back = NULL;
    if (!give_back)
        return tfd_blob_new(base, cap, base, len, doc);
    if (!tfx_req_take_memfd(r, &fd, &p, &size))
        return tfd_blob_new_lent(base, cap, base, len, doc, give_back, c->body_give_back_arg);
    give_back(c->body_give_back_arg);       /* the lending is over; the memfd is ours */
    tfd_blob_t *b = tfd_blob_new(NULL, 0, base, len, doc);
    if (!b) {
        tfx_shm_t m = {fd, p, size, 0};
        tfx_shm_close(&m);
        return NULL;
    }
    b->share_fd = fd;                       /* the blob owns the sealed memfd now */
    b->share_p = p;
    b->share_size = size;
    return b;
}

/* The index of an answer just encoded from doc into buf (hdr_len header bytes, then the data
 * section in doc order): the doc tfp_st_decode would give for buf - doc's names, dtypes,
 * shapes, offsets and metadata in doc's order, data pointing into buf - built from doc
 * itself instead of parsing our own JSON back (that re-decode was ~14k instructions of an
 * 8-byte echo's ~60k). A header past the decoder's default limits still goes through the
 * decoder, so such an answer is refused as before. */
static tfp_status_t index_encoded(const tfp_doc_t *doc, const uint8_t *buf, size_t hdr_len,
                                  tfp_doc_t **out, tfp_err_t *err)
{
    if (hdr_len - 8 > TFP_ST_DEFAULT_MAX_HEADER || doc->n > TFP_ST_DEFAULT_MAX_TENSORS)
        return tfp_st_decode(buf, hdr_len + (size_t)tfp_doc_data_bytes(doc), NULL, out, err);
    tfp_doc_t *index = tfp_doc_new();
    tfp_status_t st = TFP_OK;
    if (!index)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory");
    for (size_t i = 0; i < doc->nmeta && st == TFP_OK; i++)
        st = tfp_doc_append_meta(index, doc->meta[i].key, doc->meta[i].value, err);
    for (size_t i = 0; i < doc->n && st == TFP_OK; i++) {
        const tfp_tensor_t *t = &doc->t[i];
        st = tfp_doc_append(index, t->name, t->dtype, t->rank, t->shape,
                            buf + hdr_len + t->offset, t->nbytes, err);
        if (st == TFP_OK)
            index->t[i].offset = t->offset;
    }
    if (st != TFP_OK) {
        tfp_doc_free(index);
        return st;
    }
    *out = index;
    return TFP_OK;
}

tfd_blob_t *api_encode_blob(tfp_doc_t *doc, tfp_err_t *err)
{
    return api_encode_blob_for(doc, NULL, NULL, 0, err);
}

tfd_blob_t *api_encode_blob_for(tfp_doc_t *doc, struct tfd_shm *shm, const tfd_feed_t *f,
                                unsigned dev, tfp_err_t *err)
{
    uint8_t *hdr;
    size_t hdr_len;
    if (tfp_st_encode_header(doc, &hdr, &hdr_len, err) != TFP_OK)
        return NULL;
    uint64_t total = hdr_len + tfp_doc_data_bytes(doc);
    size_t cap;
    uint8_t *buf = NULL;
    void (*give_back)(void *) = NULL;
    void *arg = NULL;
    if (shm && total <= SIZE_MAX &&
        tfd_shm_lend(shm, f, dev, (size_t)total, &buf, &cap, &give_back, &arg) != 0)
        buf = NULL;
    if (!buf && total <= SIZE_MAX)
        buf = tfx_buf_alloc((size_t)total, &cap);
    if (!buf) {
        free(hdr);
        tfp_err_set(err, TFP_ENOMEM, "out of memory for a %llu-byte answer",
                    (unsigned long long)total);
        return NULL;
    }
    memcpy(buf, hdr, hdr_len);
    free(hdr);
    for (size_t i = 0; i < doc->n; i++)     /* offsets follow doc order from 0 */
        if (doc->t[i].nbytes)
            memcpy(buf + hdr_len + doc->t[i].offset, doc->t[i].data, (size_t)doc->t[i].nbytes);
    tfp_doc_t *index = NULL;
    if (index_encoded(doc, buf, hdr_len, &index, err) != TFP_OK) {
        if (give_back)
            give_back(arg);
        else
            tfx_buf_free(buf, cap);
        return NULL;
    }
    tfd_blob_t *b = give_back ? tfd_blob_new_lent(buf, cap, buf, (size_t)total, index,
                                                  give_back, arg)
                              : tfd_blob_new(buf, cap, buf, (size_t)total, index);
    if (!b)
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
    return b;
}

/* ---- bodies ----------------------------------------------------------------------------- */

int api_begin_doc(tfx_req_t *r, tfd_ctx_t *c, const char *raw_name, uint64_t max)
{
    const tfp_op_body_t *body = &c->op->body;
    if (body->kind == TFP_BODY_RAW) {
        tfp_err_t err;
        tfp_doc_t *doc = tfp_doc_new();
        if (!doc || tfp_doc_add(doc, raw_name, body->dtype, body->rank, body->shape, NULL,
                                body->nbytes, &err) != TFP_OK ||
            tfp_st_encode_header(doc, &c->raw_hdr, &c->raw_hdr_len, &err) != TFP_OK) {
            tfp_doc_free(doc);
            api_fail(r, c, doc ? err.code : TFP_ENOMEM, "%s", doc ? err.msg : "out of memory");
            return -1;
        }
        tfp_doc_free(doc);
    }
    uint64_t limit = body->kind == TFP_BODY_RAW ? body->nbytes : max;
    if (c->lender && c->lender->begin(r, c, limit))
        return 0;                       /* straight into a same-host ring's slot */
    tfx_req_accept_body(r, c->raw_hdr_len, limit);
    return 0;
}

/* A staged body: the document it names copied out of its staging buffer into a ring's slot
 * (the request's lender) or new memory. The buffer stays the client's, who may write it even now:
 * only the copy is read from here on. NULL after answering. */
static uint8_t *staged_body(tfx_req_t *r, tfd_ctx_t *c, size_t *cap, size_t *len)
{
    size_t n;
    const uint8_t *body = tfx_req_body(r, &n);
    tfp_sf_staged_t ref;
    tfp_err_t err;
    const uint8_t *src;
    tfd_stage_t *g;
    if (tfp_sf_staged_decode(body, n, &ref, &err) != TFP_OK ||
        tfd_shm_staged_get(c->api->shm, c->op->who.principal, &ref, &src, &g, &err) != TFP_OK) {
        api_fail(r, c, err.code, "%s", err.msg);
        return NULL;
    }
    uint8_t *base = NULL;
    if (ref.length > c->api->cfg->max_body)
        api_fail(r, c, TFP_ETOOBIG, "a document of %llu bytes is over max-body (%llu)",
                 (unsigned long long)ref.length, (unsigned long long)c->api->cfg->max_body);
    else if (!(c->lender && c->lender->lend(c, ref.length, &base, cap, &c->body_give_back,
                                             &c->body_give_back_arg)) &&
             !(base = tfx_buf_alloc((size_t)ref.length, cap)))
        api_fail(r, c, TFP_ENOMEM, "out of memory");
    if (base) {
        memcpy(base, src, (size_t)ref.length);
        *len = (size_t)ref.length;
    }
    tfd_shm_staged_put(c->api->shm, g, base != NULL);
    return base;
}

int api_body_doc(tfx_req_t *r, tfd_ctx_t *c, uint8_t **base_out, size_t *cap_out, size_t *len_out,
                 tfp_doc_t **doc_out)
{
    tfp_err_t err;
    size_t len;
    tfx_req_body(r, &len);
    tfp_body_kind_t kind = c->op->body.kind;
    if (kind == TFP_BODY_RAW && len != c->op->body.nbytes) {
        api_fail(r, c, TFP_EUNPROC, "body is %zu bytes but Tfetch-Dtype x Tfetch-Shape need %llu",
                 len, (unsigned long long)c->op->body.nbytes);
        return -1;
    }
    size_t cap;
    uint8_t *base;
    if (kind == TFP_BODY_STAGED) {
        if (!(base = staged_body(r, c, &cap, &len)))
            return -1;
    } else {
        base = tfx_req_take_body(r, &cap);
        /* A feed ring's slot the body was received into: given back, never tfx_buf_free'd. */
        if (base && tfx_req_take_lent(r, &c->body_give_back, &c->body_give_back_arg) &&
            kind != TFP_BODY_SAFETENSORS && kind != TFP_BODY_RAW) {
            c->body_give_back(c->body_give_back_arg);   /* cannot happen: lent for those */
            c->body_give_back = NULL;
            api_fail(r, c, TFP_EINTERNAL, "a lent body of the wrong kind");
            return -1;
        }
    }
    if (!base && !(base = tfx_buf_alloc(c->raw_hdr_len, &cap))) {     /* empty body */
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        return -1;
    }
    if (kind == TFP_BODY_RAW)
        memcpy(base, c->raw_hdr, c->raw_hdr_len);
    size_t doc_len = c->raw_hdr_len + len;
    tfp_doc_t *doc = NULL;
    if (kind == TFP_BODY_SHUMAI) {
        tfp_shumai_msg_t msg;
        if (tfp_shumai_decode(base, doc_len, 0, &msg, &err) != TFP_OK)
            goto bad;
        doc = msg.doc;
        c->shumai_provenance = msg.provenance;
        c->shumai_flags = msg.flags;
        char user[TFP_SHUMAI_USER_SIZE];
        if (tfp_shumai_provenance_to_user(msg.provenance, user))
            api_set_user(c, user);          /* Shumai's id is the user id */
    } else if (tfp_st_decode(base, doc_len, NULL, &doc, &err) != TFP_OK) {
        goto bad;
    }
    *base_out = base;
    *cap_out = cap;
    *len_out = doc_len;
    *doc_out = doc;
    return 0;
bad:
    if (c->body_give_back) {
        c->body_give_back(c->body_give_back_arg);
        c->body_give_back = NULL;
    } else {
        tfx_buf_free(base, cap);
    }
    api_fail(r, c, err.code, "%s", err.msg);
    return -1;
}
