/* doc.c - tf_doc_t, libtfetch's document: named tensors plus string metadata.
 *
 * A thin owner around proto's tfp_doc_t. It owns the bytes the model only borrows: one copy
 * per tensor added with TF_COPY, or one whole buffer (a received response body, or the copy
 * made by tf_doc_decode(TF_COPY)) that decoded tensors point into, so receiving never copies
 * tensor data. Encoding and decoding are proto's strict safetensors codec. A doc is plain
 * data used by one thread at a time.
 */
#include "config.h"

#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"
#include "proto/safetensors.h"
#include "transports/buf.h"

_Static_assert(TF_MAX_RANK == TFP_MAX_RANK, "public and proto ranks differ");

/* Zero-byte tensors point here rather than at NULL, so memcpy never sees a NULL source. */
static const uint8_t empty_data[1];

tf_doc_t *tf_doc_new(void)
{
    tf_doc_t *doc = calloc(1, sizeof(*doc));
    if (!doc)
        return NULL;
    doc->d = tfp_doc_new();
    if (!doc->d) {
        free(doc);
        return NULL;
    }
    return doc;
}

void tf_doc_free(tf_doc_t *doc)
{
    if (!doc)
        return;
    if (doc->copies) {
        for (size_t i = 0; i < doc->d->n; i++)
            free(doc->copies[i]);
    }
    free(doc->copies);
    free(doc->views);
    tfp_doc_free(doc->d);
    if (doc->buf_cap && !tfi_clients_live())
        tfx_buf_free_uncached(doc->buf, doc->buf_cap);  /* nobody left to reuse it */
    else
        tfx_buf_free(doc->buf, doc->buf_cap);           /* cap 0: free() */
    if (doc->release)
        doc->release(doc->release_arg);     /* after everything that points into it */
    free(doc);
}

/* Makes room for n views and copies. */
static int reserve(tf_doc_t *doc, size_t n)
{
    if (n <= doc->cap)
        return 0;
    size_t cap = doc->cap ? doc->cap : 4;
    while (cap < n)
        cap *= 2;
    tf_tensor_t *v = realloc(doc->views, cap * sizeof(*v));
    if (!v)
        return -1;
    doc->views = v;
    void **c = realloc(doc->copies, cap * sizeof(*c));
    if (!c)
        return -1;
    memset(c + doc->cap, 0, (cap - doc->cap) * sizeof(*c));
    doc->copies = c;
    doc->cap = cap;
    return 0;
}

/* Refreshes the public view of tensor i from the model. */
static void sync_view(tf_doc_t *doc, size_t i)
{
    const tfp_tensor_t *t = &doc->d->t[i];
    tf_tensor_t *v = &doc->views[i];
    memset(v, 0, sizeof(*v));
    v->name = t->name;
    v->dtype = (tf_dtype_t)t->dtype;
    v->rank = t->rank;
    for (int k = 0; k < t->rank && k < TF_MAX_RANK; k++)
        v->shape[k] = (int64_t)t->shape[k];
    v->data = t->data ? (const void *)t->data : (const void *)empty_data;
    v->nbytes = (size_t)t->nbytes;
}

tf_status_t tf_doc_add(tf_doc_t *doc, const char *name, tf_dtype_t dtype, int rank,
                       const int64_t *shape, const void *data, size_t nbytes,
                       unsigned flags)
{
    uint64_t ushape[TF_MAX_RANK] = {0};
    uint64_t want = 0;
    tfp_err_t err;
    if (doc && doc->frozen)
        return TF_EINVAL;                   /* its bytes are laid out in shared memory */
    void *copy = NULL;

    if (!doc || !name || (flags != TF_COPY && flags != TF_BORROW))
        return TF_EINVAL;
    if (rank < 0 || rank > TF_MAX_RANK || (rank > 0 && !shape))
        return TF_EINVAL;
    if (!tf_dtype_name(dtype) || (!data && nbytes > 0))
        return TF_EINVAL;
    for (int k = 0; k < rank; k++) {
        if (shape[k] < 0)
            return TF_EINVAL;
        ushape[k] = (uint64_t)shape[k];
    }
    tfp_status_t pst = tfp_shape_nbytes((tfp_dtype_t)dtype, rank, ushape, &want, &err);
    if (pst != TFP_OK)
        return tfi_from_proto(pst);
    if (want != (uint64_t)nbytes)
        return TF_EINVAL;
    if (tfp_doc_find(doc->d, name))
        return TF_EINVAL;
    if (reserve(doc, doc->d->n + 1) != 0)
        return TF_ENOMEM;
    if (flags == TF_COPY && nbytes > 0) {
        copy = malloc(nbytes);
        if (!copy)
            return TF_ENOMEM;
        memcpy(copy, data, nbytes);
        data = copy;
    }
    if (nbytes == 0)
        data = empty_data;
    pst = tfp_doc_add(doc->d, name, (tfp_dtype_t)dtype, rank, ushape, data, nbytes, &err);
    if (pst != TFP_OK) {
        free(copy);
        return tfi_from_proto(pst);
    }
    size_t i = doc->d->n - 1;
    doc->copies[i] = copy;
    sync_view(doc, i);
    return TF_OK;
}

size_t tf_doc_count(const tf_doc_t *doc)
{
    return doc ? doc->d->n : 0;
}

const tf_tensor_t *tf_doc_at(const tf_doc_t *doc, size_t i)
{
    if (!doc || i >= doc->d->n)
        return NULL;
    return &doc->views[i];
}

const tf_tensor_t *tf_doc_find(const tf_doc_t *doc, const char *name)
{
    if (!doc || !name)
        return NULL;
    const tfp_tensor_t *t = tfp_doc_find(doc->d, name);
    if (!t)
        return NULL;
    return &doc->views[t - doc->d->t];
}

tf_status_t tf_doc_set_meta(tf_doc_t *doc, const char *key, const char *value)
{
    tfp_err_t err;
    if (!doc || !key || !value || doc->frozen)
        return TF_EINVAL;
    return tfi_from_proto(tfp_doc_set_meta(doc->d, key, value, &err));
}

const char *tf_doc_meta(const tf_doc_t *doc, const char *key)
{
    if (!doc || !key)
        return NULL;
    return tfp_doc_meta(doc->d, key);
}

tf_status_t tf_doc_encode_header(const tf_doc_t *doc, void **hdr, size_t *len)
{
    uint8_t *h = NULL;
    size_t hlen = 0;
    tfp_err_t err;

    if (!doc || !hdr || !len)
        return TF_EINVAL;
    /* Assigning offsets is the only change the encoder makes: a cache, not content. */
    tfp_status_t pst = tfp_st_encode_header(doc->d, &h, &hlen, &err);
    if (pst != TFP_OK)
        return tfi_from_proto(pst);
    *hdr = h;
    *len = hlen;
    return TF_OK;
}

tf_status_t tf_doc_encode(const tf_doc_t *doc, void **buf, size_t *len)
{
    void *hdr = NULL;
    size_t hlen = 0;

    if (!doc || !buf || !len)
        return TF_EINVAL;
    tf_status_t st = tf_doc_encode_header(doc, &hdr, &hlen);
    if (st != TF_OK)
        return st;
    uint64_t data = tfp_doc_data_bytes(doc->d);
    if (data > SIZE_MAX - hlen) {
        st = TF_ERANGE;
        goto free_hdr;
    }
    uint8_t *out = malloc(hlen + (size_t)data);
    if (!out) {
        st = TF_ENOMEM;
        goto free_hdr;
    }
    memcpy(out, hdr, hlen);
    size_t at = hlen;
    for (size_t i = 0; i < doc->d->n; i++) {
        const tfp_tensor_t *t = &doc->d->t[i];
        if (t->nbytes)
            memcpy(out + at, t->data, (size_t)t->nbytes);
        at += (size_t)t->nbytes;
    }
    *buf = out;
    *len = at;

free_hdr:
    free(hdr);
    return st;
}

tf_status_t tfi_doc_wrap(tfp_doc_t *d, void *buf, tf_doc_t **out)
{
    tf_doc_t *doc = calloc(1, sizeof(*doc));
    if (!doc)
        return TF_ENOMEM;
    if (reserve(doc, d->n ? d->n : 1) != 0) {
        free(doc->views);
        free(doc->copies);
        free(doc);
        return TF_ENOMEM;
    }
    doc->d = d;
    doc->buf = buf;
    doc->owns_bytes = buf != NULL;
    for (size_t i = 0; i < d->n; i++)
        sync_view(doc, i);
    *out = doc;
    return TF_OK;
}

tf_status_t tf_doc_decode_msg(const void *buf, size_t len, unsigned flags, tf_doc_t **out,
                              char *msg, size_t msg_len)
{
    tfp_doc_t *d = NULL;
    tfp_err_t err;
    uint8_t *copy = NULL;
    const uint8_t *src = buf;

    if (msg && msg_len)
        msg[0] = '\0';
    if ((!buf && len) || !out || (flags != TF_COPY && flags != TF_BORROW))
        return TF_EINVAL;
    if (!buf) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "empty input: a document has at least 8 bytes");
        return TF_EPROTO;
    }
    if (flags == TF_COPY) {
        copy = malloc(len ? len : 1);
        if (!copy)
            return TF_ENOMEM;
        memcpy(copy, buf, len);
        src = copy;
    }
    tfp_status_t pst = tfp_st_decode(src, len, NULL, &d, &err);
    if (pst != TFP_OK) {
        free(copy);
        if (msg && msg_len)
            snprintf(msg, msg_len, "%s", err.msg);
        return tfi_from_proto(pst);
    }
    tf_status_t st = tfi_doc_wrap(d, copy, out);
    if (st != TF_OK) {
        tfp_doc_free(d);
        free(copy);
    }
    return st;
}

tf_status_t tf_doc_decode(const void *buf, size_t len, unsigned flags, tf_doc_t **out)
{
    return tf_doc_decode_msg(buf, len, flags, out, NULL, 0);
}

/* ---- documents in one buffer ---------------------------------------------------------------- */

/* The bytes tensor spec t takes: 0 with *nbytes, or -1 when it is invalid or too large. */
static int spec_bytes(const tf_tensor_spec_t *t, size_t *nbytes)
{
    unsigned bits = tf_dtype_bits(t->dtype);
    if (!t->name || !bits || t->rank < 0 || t->rank > TF_MAX_RANK || (t->rank && !t->shape))
        return -1;
    uint64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->shape[i] < 0 || (t->shape[i] && n > UINT64_MAX / 8 / (uint64_t)t->shape[i]))
            return -1;
        n *= (uint64_t)t->shape[i];
    }
    *nbytes = (size_t)((n * bits + 7) / 8);
    return 0;
}

tf_status_t tfi_layout_header(const tf_tensor_spec_t *tensors, size_t n, void **hdr,
                              size_t *hlen, size_t *data)
{
    /* The header of a document whose tensors borrow zero pages (never touched). */
    size_t most = 1;
    *data = 0;
    for (size_t i = 0; i < n; i++) {
        size_t nb;
        if (spec_bytes(&tensors[i], &nb) != 0 || nb > SIZE_MAX - *data)
            return TF_EINVAL;
        *data += nb;
        most = nb > most ? nb : most;
    }
    void *zero = mmap(NULL, most, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (zero == MAP_FAILED)
        return TF_ENOMEM;
    tf_doc_t *layout = tf_doc_new();
    tf_status_t st = layout ? TF_OK : TF_ENOMEM;
    for (size_t i = 0; st == TF_OK && i < n; i++) {
        size_t nb;
        spec_bytes(&tensors[i], &nb);
        st = tf_doc_add(layout, tensors[i].name, tensors[i].dtype, tensors[i].rank,
                        tensors[i].shape, zero, nb, TF_BORROW);
    }
    if (st == TF_OK)
        st = tf_doc_encode_header(layout, hdr, hlen);
    tf_doc_free(layout);
    munmap(zero, most);
    return st;
}

tf_status_t tf_doc_new_packed(const tf_tensor_spec_t *tensors, size_t n, tf_doc_t **out)
{
    if (!out || (n && !tensors))
        return TF_EINVAL;
    void *hdr = NULL;
    size_t hlen = 0, data = 0, cap = 0;
    tf_status_t st = tfi_layout_header(tensors, n, &hdr, &hlen, &data);
    if (st != TF_OK)
        return st;
    uint8_t *buf = data <= SIZE_MAX - hlen ? tfx_buf_alloc(hlen + data, &cap) : NULL;
    if (!buf) {
        free(hdr);
        return TF_ENOMEM;
    }
    memcpy(buf, hdr, hlen);
    free(hdr);
    memset(buf + hlen, 0, data);            /* a reused buffer holds someone's old bytes */
    tfp_doc_t *d = NULL;
    tfp_err_t err;
    tf_doc_t *doc = NULL;
    tfp_status_t pst = tfp_st_decode(buf, hlen + data, NULL, &d, &err);
    if (pst != TFP_OK || tfi_doc_wrap(d, buf, &doc) != TF_OK) {
        tfp_doc_free(d);
        tfx_buf_free(buf, cap);
        return pst != TFP_OK && pst != TFP_ENOMEM ? TF_EINVAL : TF_ENOMEM;  /* past limits */
    }
    doc->buf_cap = cap;
    doc->packed = hlen + data;
    doc->packed_p = buf;
    doc->frozen = 1;
    *out = doc;
    return TF_OK;
}
