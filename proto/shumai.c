/* shumai.c - the Shumai binary tensor format: decoding, header encoding, and the mapping
 * between Shumai's provenance word and tfetch user ids.
 *
 * The decoder owns nothing after it returns: the doc it builds points into the caller's
 * buffer, and the props span is the caller's bytes. Every word comes from the network and is
 * checked before it is used; every refusal names the field. Props are held to RFC 8259 by
 * tfp_json_check (no tree is built: only "is it one object" matters here). The encoder writes
 * only the header, so a reply's tensor bytes can go out from wherever they already live.
 * Pure functions; any thread.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/ids.h"
#include "proto/le.h"
#include "proto/jsonread.h"
#include "proto/raw.h"
#include "proto/shumai.h"

#define MAX_DIM (UINT64_C(1) << 53)
#define SHAPE_TEXT (TFP_MAX_RANK * 21)

static void shape_text(int rank, const uint64_t *shape, char buf[SHAPE_TEXT])
{
    if (tfp_raw_format_shape(rank, shape, buf, SHAPE_TEXT) != 0)
        buf[0] = '\0';
}

static int json_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Bytes of an F32 tensor of this shape, refusing what the int64 words cannot hold. */
static tfp_status_t f32_bytes(int rank, const uint64_t *shape, uint64_t *nbytes,
                              tfp_err_t *err)
{
    char text[SHAPE_TEXT];
    tfp_err_t inner;
    uint64_t n;

    if (rank < 0 || rank > TFP_MAX_RANK)
        return tfp_err_set(err, TFP_EINVAL, "rank %d is outside 0..%d", rank, TFP_MAX_RANK);
    if (rank > 0 && shape == NULL)
        return tfp_err_set(err, TFP_EINVAL, "rank %d with no shape", rank);
    for (int i = 0; i < rank; i++) {
        if (shape[i] > MAX_DIM)
            return tfp_err_set(err, TFP_ERANGE, "shape[%d] (%llu) exceeds 2^53", i,
                               (unsigned long long)shape[i]);
    }
    shape_text(rank, shape, text);
    if (tfp_shape_nbytes(TFP_F32, rank, shape, &n, &inner) != TFP_OK || n > INT64_MAX)
        return tfp_err_set(err, TFP_ERANGE, "F32 x [%s] is more bytes than an int64 holds",
                           text);
    *nbytes = n;
    return TFP_OK;
}

/* ---- props ----------------------------------------------------------------------------- */

tfp_status_t tfp_shumai_props_check(const char *props, size_t n, tfp_err_t *err)
{
    tfp_err_t inner;
    size_t i = 0, end;

    if (n == 0)
        return TFP_OK;
    if (props == NULL)
        return tfp_err_set(err, TFP_EINVAL, "props of %zu bytes with no buffer", n);
    while (i < n && json_ws(props[i]))
        i++;
    if (i == n || props[i] != '{')
        return tfp_err_set(err, TFP_EPROTO, "props is not a JSON object");
    if (tfp_json_check(props, n, &end, &inner) != TFP_OK)
        return tfp_err_set(err, TFP_EPROTO, "props: %s", inner.msg);
    for (i = end; i < n; i++) {
        if (!json_ws(props[i]))
            return tfp_err_set(err, TFP_EPROTO,
                               "props: byte 0x%02x at %zu after the JSON object",
                               (unsigned char)props[i], i);
    }
    return TFP_OK;
}

/* ---- decoding -------------------------------------------------------------------------- */

/* The five words, checked one by one. */
static tfp_status_t check_words(const uint8_t *buf, size_t len, int *rank, int64_t *prov,
                                uint64_t *flags, uint64_t *tensor_len, uint64_t *props_len,
                                tfp_err_t *err)
{
    int64_t ndim = (int64_t)tfp_le64(buf);
    int64_t fl = (int64_t)tfp_le64(buf + 16);
    int64_t tl = (int64_t)tfp_le64(buf + 24);
    int64_t pl = (int64_t)tfp_le64(buf + 32);

    if (ndim < 0 || ndim > TFP_MAX_RANK)
        return tfp_err_set(err, TFP_EPROTO, "ndim %lld is outside 0..%d", (long long)ndim,
                           TFP_MAX_RANK);
    if ((uint64_t)fl & ~TFP_SHUMAI_REQUIRES_GRAD)
        return tfp_err_set(err, TFP_EPROTO,
                           "flags 0x%llx sets bits other than requires_grad (bit 0)",
                           (unsigned long long)fl);
    if (tl < 0)
        return tfp_err_set(err, TFP_EPROTO, "tensor_len %lld is negative", (long long)tl);
    if (pl < 0)
        return tfp_err_set(err, TFP_EPROTO, "props_len %lld is negative", (long long)pl);
    if (len - TFP_SHUMAI_FIXED_LEN < 8 * (size_t)ndim)
        return tfp_err_set(err, TFP_EPROTO,
                           "%zu bytes cannot hold the %d-dim shape (%zu bytes with the header)",
                           len, (int)ndim, (size_t)TFP_SHUMAI_FIXED_LEN + 8 * (size_t)ndim);
    *rank = (int)ndim;
    *prov = (int64_t)tfp_le64(buf + 8);
    *flags = (uint64_t)fl;
    *tensor_len = (uint64_t)tl;
    *props_len = (uint64_t)pl;
    return TFP_OK;
}

static tfp_status_t check_shape(const uint8_t *p, int rank, uint64_t dims[TFP_MAX_RANK],
                                tfp_err_t *err)
{
    for (int i = 0; i < rank; i++) {
        int64_t d = (int64_t)tfp_le64(p + 8 * i);

        if (d < 0)
            return tfp_err_set(err, TFP_EPROTO, "shape[%d] is negative (%lld)", i,
                               (long long)d);
        if ((uint64_t)d > MAX_DIM)
            return tfp_err_set(err, TFP_ERANGE, "shape[%d] (%lld) exceeds 2^53", i,
                               (long long)d);
        dims[i] = (uint64_t)d;
    }
    return TFP_OK;
}

tfp_status_t tfp_shumai_decode(const uint8_t *buf, size_t len, size_t max_props,
                               tfp_shumai_msg_t *msg, tfp_err_t *err)
{
    uint64_t dims[TFP_MAX_RANK], tensor_len = 0, props_len = 0, want = 0, total, flags = 0;
    size_t hdr_len;
    char text[SHAPE_TEXT];
    const char *props;
    int64_t prov = 0;
    tfp_doc_t *doc;
    tfp_status_t st;
    int rank = 0;

    if (msg == NULL || (buf == NULL && len > 0))
        return tfp_err_set(err, TFP_EINVAL, "no buffer or no output");
    if (max_props == 0)
        max_props = TFP_SHUMAI_DEFAULT_MAX_PROPS;
    if (len < TFP_SHUMAI_FIXED_LEN)
        return tfp_err_set(err, TFP_EPROTO, "%zu bytes is shorter than the %d-byte header",
                           len, TFP_SHUMAI_FIXED_LEN);
    st = check_words(buf, len, &rank, &prov, &flags, &tensor_len, &props_len, err);
    if (st != TFP_OK)
        return st;
    hdr_len = TFP_SHUMAI_FIXED_LEN + 8 * (size_t)rank;
    st = check_shape(buf + TFP_SHUMAI_FIXED_LEN, rank, dims, err);
    if (st != TFP_OK)
        return st;
    shape_text(rank, dims, text);
    st = f32_bytes(rank, dims, &want, err);
    if (st != TFP_OK)
        return st;
    if (tensor_len != want)
        return tfp_err_set(err, TFP_EPROTO, "tensor_len %llu does not match F32 x [%s] = %llu bytes",
                           (unsigned long long)tensor_len, text, (unsigned long long)want);
    if (__builtin_add_overflow(tensor_len, props_len, &total) ||
        __builtin_add_overflow(total, (uint64_t)hdr_len, &total) || total != len)
        return tfp_err_set(err, TFP_EPROTO,
                           "the message is %zu bytes but its header says %zu + %llu tensor + %llu props",
                           len, hdr_len, (unsigned long long)tensor_len,
                           (unsigned long long)props_len);
    if (props_len > max_props)
        return tfp_err_set(err, TFP_ETOOBIG, "props_len %llu exceeds the limit of %zu bytes",
                           (unsigned long long)props_len, max_props);
    props = props_len ? (const char *)buf + hdr_len + tensor_len : NULL;
    st = tfp_shumai_props_check(props, (size_t)props_len, err);
    if (st != TFP_OK)
        return st;

    doc = tfp_doc_new();
    if (doc == NULL)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory decoding a Shumai message");
    st = tfp_doc_append(doc, TFP_SHUMAI_TENSOR_NAME, TFP_F32, rank, dims, buf + hdr_len,
                        tensor_len, err);
    if (st != TFP_OK) {
        tfp_doc_free(doc);
        return st;
    }
    msg->doc = doc;
    msg->provenance = prov;
    msg->flags = flags;
    msg->props = props;
    msg->props_len = (size_t)props_len;
    return TFP_OK;
}

void tfp_shumai_msg_clear(tfp_shumai_msg_t *msg)
{
    if (msg == NULL)
        return;
    tfp_doc_free(msg->doc);
    memset(msg, 0, sizeof *msg);
}

/* ---- checking and encoding ------------------------------------------------------------- */

tfp_status_t tfp_shumai_check_doc(const tfp_doc_t *doc, const tfp_tensor_t **t,
                                  tfp_err_t *err)
{
    const tfp_tensor_t *x;

    if (doc == NULL)
        return tfp_err_set(err, TFP_EINVAL, "no document");
    if (doc->n == 0)
        return tfp_err_set(err, TFP_ENOTACCEPT,
                           "Shumai's format carries exactly one tensor; the document has none");
    if (doc->n > 1)
        return tfp_err_set(err, TFP_ENOTACCEPT,
                           "Shumai's format carries exactly one tensor; the document has %zu ('%.64s', '%.64s'%s)",
                           doc->n, doc->t[0].name, doc->t[1].name, doc->n > 2 ? ", ..." : "");
    x = &doc->t[0];
    if (x->dtype != TFP_F32)
        return tfp_err_set(err, TFP_ENOTACCEPT,
                           "Shumai's format carries only F32 tensors; '%.64s' is %s", x->name,
                           tfp_dtype_name(x->dtype) ? tfp_dtype_name(x->dtype) : "unknown");
    if (x->nbytes > 0 && x->data == NULL)
        return tfp_err_set(err, TFP_EINVAL, "tensor '%.64s' has no data bound", x->name);
    if (t != NULL)
        *t = x;
    return TFP_OK;
}

tfp_status_t tfp_shumai_total_len(int rank, const uint64_t *shape, uint64_t props_len,
                                  uint64_t *total, tfp_err_t *err)
{
    uint64_t n, sum;
    tfp_status_t st;

    st = f32_bytes(rank, shape, &n, err);
    if (st != TFP_OK)
        return st;
    if (props_len > INT64_MAX)
        return tfp_err_set(err, TFP_ERANGE, "props_len %llu is more than an int64 holds",
                           (unsigned long long)props_len);
    if (__builtin_add_overflow(n, props_len, &sum) ||
        __builtin_add_overflow(sum, (uint64_t)(TFP_SHUMAI_FIXED_LEN + 8 * rank), &sum))
        return tfp_err_set(err, TFP_ERANGE, "message length overflows 64 bits");
    if (total != NULL)
        *total = sum;
    return TFP_OK;
}

tfp_status_t tfp_shumai_encode_header(int rank, const uint64_t *shape, int64_t provenance,
                                      uint64_t flags, uint64_t props_len, uint8_t *hdr,
                                      size_t hdr_size, size_t *hdr_len, tfp_err_t *err)
{
    uint64_t nbytes;
    size_t need;
    tfp_status_t st;

    st = tfp_shumai_total_len(rank, shape, props_len, NULL, err);
    if (st != TFP_OK)
        return st;
    if (flags & ~TFP_SHUMAI_REQUIRES_GRAD)
        return tfp_err_set(err, TFP_EINVAL, "flags 0x%llx: only requires_grad (bit 0) is defined",
                           (unsigned long long)flags);
    need = TFP_SHUMAI_FIXED_LEN + 8 * (size_t)rank;
    if (hdr == NULL || hdr_size < need)
        return tfp_err_set(err, TFP_EINVAL, "header needs %zu bytes, %zu given", need,
                           hdr == NULL ? (size_t)0 : hdr_size);
    f32_bytes(rank, shape, &nbytes, err);
    tfp_le64_put(hdr, (uint64_t)rank);
    tfp_le64_put(hdr + 8, (uint64_t)provenance);
    tfp_le64_put(hdr + 16, flags);
    tfp_le64_put(hdr + 24, nbytes);
    tfp_le64_put(hdr + 32, props_len);
    for (int i = 0; i < rank; i++)
        tfp_le64_put(hdr + TFP_SHUMAI_FIXED_LEN + 8 * i, shape[i]);
    if (hdr_len != NULL)
        *hdr_len = need;
    return TFP_OK;
}

tfp_status_t tfp_shumai_encode(const tfp_tensor_t *t, int64_t provenance, uint64_t flags,
                               const char *props, size_t n, uint8_t **buf, size_t *len,
                               tfp_err_t *err)
{
    uint8_t hdr[TFP_SHUMAI_MAX_HEADER], *out;
    uint64_t want, total;
    size_t hdr_len;
    tfp_status_t st;

    if (t == NULL || buf == NULL || len == NULL)
        return tfp_err_set(err, TFP_EINVAL, "no tensor or no output");
    if (t->dtype != TFP_F32)
        return tfp_err_set(err, TFP_ENOTACCEPT,
                           "Shumai's format carries only F32 tensors; '%.64s' is %s",
                           t->name ? t->name : "", tfp_dtype_name(t->dtype) ?
                           tfp_dtype_name(t->dtype) : "unknown");
    st = tfp_shumai_props_check(props, n, err);
    if (st != TFP_OK)
        return st;
    st = tfp_shumai_total_len(t->rank, t->shape, n, &total, err);
    if (st != TFP_OK)
        return st;
    f32_bytes(t->rank, t->shape, &want, err);
    if (want != t->nbytes)
        return tfp_err_set(err, TFP_EINVAL, "tensor has %llu bytes, F32 x shape needs %llu",
                           (unsigned long long)t->nbytes, (unsigned long long)want);
    if (want > 0 && t->data == NULL)
        return tfp_err_set(err, TFP_EINVAL, "tensor has no data bound");
    if (total > SIZE_MAX)
        return tfp_err_set(err, TFP_ERANGE, "a %llu-byte message does not fit in memory",
                           (unsigned long long)total);
    st = tfp_shumai_encode_header(t->rank, t->shape, provenance, flags, n, hdr, sizeof hdr,
                                  &hdr_len, err);
    if (st != TFP_OK)
        return st;
    out = malloc(total ? (size_t)total : 1);
    if (out == NULL)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory encoding a %llu-byte message",
                           (unsigned long long)total);
    memcpy(out, hdr, hdr_len);
    if (want > 0)
        memcpy(out + hdr_len, t->data, (size_t)want);
    if (n > 0)
        memcpy(out + hdr_len + want, props, n);
    *buf = out;
    *len = (size_t)total;
    return TFP_OK;
}

/* ---- provenance <-> user id ------------------------------------------------------------ */

int tfp_shumai_provenance_to_user(int64_t provenance, char buf[TFP_SHUMAI_USER_SIZE])
{
    static const char hex[] = "0123456789abcdef";
    char tmp[16];
    uint64_t mag;
    size_t k = 0, o = 0;

    buf[0] = '\0';
    if (provenance == TFP_SHUMAI_NO_PROVENANCE)
        return 0;
    /* magnitude without negating INT64_MIN */
    mag = provenance < 0 ? (uint64_t)0 - (uint64_t)provenance : (uint64_t)provenance;
    do {
        tmp[k++] = hex[mag & 0xf];
        mag >>= 4;
    } while (mag != 0);
    if (provenance < 0)
        buf[o++] = '-';
    while (k > 0)
        buf[o++] = tmp[--k];
    buf[o] = '\0';
    return 1;
}


tfp_status_t tfp_shumai_user_to_provenance(const char *user, int64_t *provenance,
                                           tfp_err_t *err)
{
    const char *p = user;
    uint64_t v = 0;
    size_t digits = 0;
    int neg = 0;

    if (provenance == NULL)
        return tfp_err_set(err, TFP_EINVAL, "no output");
    if (user == NULL || user[0] == '\0') {
        *provenance = TFP_SHUMAI_NO_PROVENANCE;
        return TFP_OK;
    }
    if (*p == '-') {
        neg = 1;
        p++;
    }
    for (; *p != '\0'; p++, digits++) {
        int d = tfp_hex_digit(*p);

        if (d < 0 || digits == 16)
            goto bad;
        v = (v << 4) | (uint64_t)d;
    }
    if (digits == 0)
        goto bad;
    if (neg) {
        if (v == 0 || v > (UINT64_C(1) << 63))
            goto bad;
        *provenance = (int64_t)((uint64_t)0 - v);    /* two's complement, INT64_MIN too */
        return TFP_OK;
    }
    *provenance = (int64_t)v;                        /* wraps as BigInt64Array does */
    return TFP_OK;
bad:
    return tfp_err_set(err, TFP_EINVAL, "user id '%.40s%s' is not a hex number Shumai can carry",
                       user, strlen(user) > 40 ? "..." : "");
}
