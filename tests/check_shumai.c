/* check_shumai.c - the shumai suite: proto/shumai.{h,c}, the Shumai binary tensor format.
 *
 * Every rejection class of the decoder has a case asserting the status and a distinctive
 * part of the message; round trips go through the header encoder, the whole-message encoder
 * and the decoder; the provenance <-> user id mapping is checked against what Shumai's own
 * BigInt code prints (0, none, 8-digit ids with leading zeros, negative int64, INT64_MIN).
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "proto/doc.h"
#include "proto/shumai.h"
#include "tests/suites.h"

/* ---- helpers ------------------------------------------------------------------------- */

static void put64(uint8_t *p, int64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)((uint64_t)v >> (8 * i));
}

/* A message from explicit words (so tests can lie in any of them): the five words, ndim
 * shape words (shape_n of them; may differ from ndim), dlen data bytes, then props. */
static uint8_t *mk(int64_t ndim, int64_t prov, int64_t flags, int64_t tlen, int64_t plen,
                   const int64_t *shape, size_t shape_n, const void *data, size_t dlen,
                   const char *props, size_t *len)
{
    size_t pn = props ? strlen(props) : 0;
    size_t n = 40 + 8 * shape_n + dlen + pn;
    uint8_t *b = malloc(n + 1);

    ck_assert_ptr_nonnull(b);
    put64(b, ndim);
    put64(b + 8, prov);
    put64(b + 16, flags);
    put64(b + 24, tlen);
    put64(b + 32, plen);
    for (size_t i = 0; i < shape_n; i++)
        put64(b + 40 + 8 * i, shape[i]);
    if (dlen > 0) {
        if (data != NULL)
            memcpy(b + 40 + 8 * shape_n, data, dlen);
        else
            memset(b + 40 + 8 * shape_n, 0x3f, dlen);
    }
    if (pn > 0)
        memcpy(b + 40 + 8 * shape_n + dlen, props, pn);
    *len = n;
    return b;
}

static void reject_buf(int line, const uint8_t *b, size_t len, size_t max_props,
                       tfp_status_t want, const char *substr)
{
    tfp_shumai_msg_t msg;
    tfp_err_t err = { TFP_OK, "" };
    tfp_status_t st;

    memset(&msg, 0x5a, sizeof msg);
    st = tfp_shumai_decode(b, len, max_props, &msg, &err);
    ck_assert_msg(st == want, "line %d: got %s, want %s (%s)", line, tfp_status_name(st),
                  tfp_status_name(want), err.msg);
    ck_assert_msg(err.code == want, "line %d: err.code %d", line, (int)err.code);
    ck_assert_msg(strstr(err.msg, substr) != NULL, "line %d: message '%s' lacks '%s'", line,
                  err.msg, substr);
    for (size_t i = 0; i < sizeof msg; i++)
        ck_assert_msg(((uint8_t *)&msg)[i] == 0x5a, "line %d: output set on failure", line);
}

/* Builds with mk, expects a rejection, frees. */
#define REJECT(want, substr, ndim, prov, flags, tlen, plen, shape, shape_n, dlen, props) \
    do {                                                                               \
        size_t len_;                                                                   \
        uint8_t *b_ = mk(ndim, prov, flags, tlen, plen, shape, shape_n, NULL, dlen,    \
                         props, &len_);                                                \
        reject_buf(__LINE__, b_, len_, 0, want, substr);                               \
        free(b_);                                                                      \
    } while (0)

static const int64_t S23[] = { 2, 3 };
#define PROPS "{\"collectStats\":false}"

/* ---- decoding: accepted -------------------------------------------------------------- */

START_TEST(decode_tfetch_request)
{
    float data[6] = { 1, 2, 3, 4, 5, 6 };
    size_t len;
    uint8_t *b = mk(2, 0x1a2b3c4d, 0, 24, (int64_t)strlen(PROPS), S23, 2, data, 24, PROPS,
                    &len);
    tfp_shumai_msg_t msg;
    tfp_err_t err;
    const tfp_tensor_t *t;

    ck_assert_msg(tfp_shumai_decode(b, len, 0, &msg, &err) == TFP_OK, "%s", err.msg);
    ck_assert_uint_eq(msg.doc->n, 1);
    t = tfp_doc_find(msg.doc, "tensor");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, TFP_F32);
    ck_assert_int_eq(t->rank, 2);
    ck_assert_uint_eq(t->shape[0], 2);
    ck_assert_uint_eq(t->shape[1], 3);
    ck_assert_uint_eq(t->nbytes, 24);
    ck_assert_ptr_eq(t->data, b + 56);          /* borrowed, not copied */
    ck_assert_mem_eq(t->data, data, 24);
    ck_assert_int_eq(msg.provenance, 0x1a2b3c4d);
    ck_assert_uint_eq(msg.flags, 0);
    ck_assert_ptr_eq(msg.props, (const char *)b + 80);
    ck_assert_uint_eq(msg.props_len, strlen(PROPS));
    ck_assert_int_eq(memcmp(msg.props, PROPS, msg.props_len), 0);
    ck_assert_uint_eq(msg.doc->nmeta, 0);
    tfp_shumai_msg_clear(&msg);
    ck_assert_ptr_null(msg.doc);
    tfp_shumai_msg_clear(&msg);                 /* cleared twice: harmless */
    tfp_shumai_msg_clear(NULL);
    free(b);
}
END_TEST

START_TEST(decode_scalar_empty_and_no_props)
{
    static const int64_t zero[] = { 4, 0, 7 };
    float one = 2.5f;
    tfp_shumai_msg_t msg;
    tfp_err_t err;
    size_t len;
    uint8_t *b;

    /* rank 0: one element, no shape words, no props, requires_grad, no provenance */
    b = mk(0, TFP_SHUMAI_NO_PROVENANCE, 1, 4, 0, NULL, 0, &one, 4, NULL, &len);
    ck_assert_uint_eq(len, 44);
    ck_assert_msg(tfp_shumai_decode(b, len, 0, &msg, &err) == TFP_OK, "%s", err.msg);
    ck_assert_int_eq(msg.doc->t[0].rank, 0);
    ck_assert_uint_eq(msg.doc->t[0].nbytes, 4);
    ck_assert_uint_eq(msg.flags, TFP_SHUMAI_REQUIRES_GRAD);
    ck_assert_int_eq(msg.provenance, TFP_SHUMAI_NO_PROVENANCE);
    ck_assert_ptr_null(msg.props);
    ck_assert_uint_eq(msg.props_len, 0);
    tfp_shumai_msg_clear(&msg);
    free(b);

    /* a zero dim: no data at all, other dims whatever they are */
    b = mk(3, 5, 0, 0, 2, zero, 3, NULL, 0, "{}", &len);
    ck_assert_msg(tfp_shumai_decode(b, len, 0, &msg, &err) == TFP_OK, "%s", err.msg);
    ck_assert_int_eq(msg.doc->t[0].rank, 3);
    ck_assert_uint_eq(msg.doc->t[0].nbytes, 0);
    ck_assert_uint_eq(msg.props_len, 2);
    tfp_shumai_msg_clear(&msg);
    free(b);
}
END_TEST

START_TEST(decode_rank_eight)
{
    static const int64_t s8[8] = { 1, 2, 1, 2, 1, 2, 1, 2 };
    tfp_shumai_msg_t msg;
    tfp_err_t err;
    size_t len;
    uint8_t *b = mk(8, 0, 0, 64, 0, s8, 8, NULL, 64, NULL, &len);

    ck_assert_msg(tfp_shumai_decode(b, len, 0, &msg, &err) == TFP_OK, "%s", err.msg);
    ck_assert_int_eq(msg.doc->t[0].rank, 8);
    ck_assert_ptr_eq(msg.doc->t[0].data, b + 40 + 64);
    tfp_shumai_msg_clear(&msg);
    free(b);
}
END_TEST

START_TEST(decode_props_whitespace_and_nesting)
{
    static const char *ok[] = { "{}", " {\"a\":[1,2,{\"b\":null}]}\n", "\t{ \"stats\" : {} }\r\n",
                                "{\"x\":\"\\u00e9\"}" };
    float d = 0;

    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        tfp_shumai_msg_t msg;
        tfp_err_t err;
        size_t len;
        uint8_t *b = mk(0, 1, 0, 4, (int64_t)strlen(ok[i]), NULL, 0, &d, 4, ok[i], &len);

        ck_assert_msg(tfp_shumai_decode(b, len, 0, &msg, &err) == TFP_OK, "'%s': %s", ok[i],
                      err.msg);
        ck_assert_uint_eq(msg.props_len, strlen(ok[i]));
        tfp_shumai_msg_clear(&msg);
        free(b);
    }
}
END_TEST

/* ---- decoding: every rejection class ------------------------------------------------- */

START_TEST(reject_short)
{
    uint8_t b[40] = { 0 };

    for (size_t n = 0; n < 40; n++)
        reject_buf(__LINE__, b, n, 0, TFP_EPROTO, "shorter than the 40-byte header");
    reject_buf(__LINE__, NULL, 0, 0, TFP_EPROTO, "0 bytes is shorter");
}
END_TEST

START_TEST(reject_arguments)
{
    uint8_t b[44] = { 0 };
    tfp_err_t err;

    ck_assert_int_eq(tfp_shumai_decode(b, sizeof b, 0, NULL, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_shumai_decode(NULL, 44, 0, NULL, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "no buffer"));
}
END_TEST

START_TEST(reject_ndim)
{
    REJECT(TFP_EPROTO, "ndim -1 is outside 0..8", -1, 0, 0, 0, 0, NULL, 0, 0, NULL);
    REJECT(TFP_EPROTO, "ndim 9 is outside 0..8", 9, 0, 0, 0, 0, NULL, 0, 0, NULL);
    REJECT(TFP_EPROTO, "ndim -9223372036854775808", INT64_MIN, 0, 0, 0, 0, NULL, 0, 0, NULL);
    REJECT(TFP_EPROTO, "ndim 4294967298", INT64_C(4294967298), 0, 0, 0, 0, NULL, 0, 0, NULL);
}
END_TEST

START_TEST(reject_flags)
{
    REJECT(TFP_EPROTO, "flags 0x2 sets bits other than requires_grad", 0, 0, 2, 4, 0, NULL, 0,
           4, NULL);
    REJECT(TFP_EPROTO, "flags 0xffffffffffffffff", 0, 0, -1, 4, 0, NULL, 0, 4, NULL);
    REJECT(TFP_EPROTO, "flags 0x8000000000000001", 0, 0, INT64_MIN + 1, 4, 0, NULL, 0, 4, NULL);
}
END_TEST

START_TEST(reject_negative_lengths)
{
    REJECT(TFP_EPROTO, "tensor_len -4 is negative", 0, 0, 0, -4, 0, NULL, 0, 4, NULL);
    REJECT(TFP_EPROTO, "props_len -1 is negative", 0, 0, 0, 4, -1, NULL, 0, 4, NULL);
    REJECT(TFP_EPROTO, "props_len -9223372036854775808 is negative", 0, 0, 0, 4, INT64_MIN,
           NULL, 0, 4, NULL);
}
END_TEST

START_TEST(reject_shape_past_end)
{
    /* ndim 3 but only two shape words (and nothing else) follow */
    REJECT(TFP_EPROTO, "56 bytes cannot hold the 3-dim shape (64 bytes", 3, 0, 0, 0, 0, S23, 2,
           0, NULL);
    REJECT(TFP_EPROTO, "40 bytes cannot hold the 8-dim shape", 8, 0, 0, 0, 0, NULL, 0, 0, NULL);
}
END_TEST

START_TEST(reject_dims)
{
    static const int64_t neg[] = { 2, -3 };
    static const int64_t big[] = { (INT64_C(1) << 53) + 1, 0 };
    static const int64_t huge[] = { INT64_MAX, 1 };
    static const int64_t ovf[] = { INT64_C(1) << 53, INT64_C(1) << 53 };
    static const int64_t ovf2[] = { INT64_C(1) << 31, INT64_C(1) << 31 };

    REJECT(TFP_EPROTO, "shape[1] is negative (-3)", 2, 0, 0, 24, 0, neg, 2, 24, NULL);
    /* a 0 dim does not excuse another dim above 2^53 */
    REJECT(TFP_ERANGE, "shape[0] (9007199254740993) exceeds 2^53", 2, 0, 0, 0, 0, big, 2, 0,
           NULL);
    REJECT(TFP_ERANGE, "shape[0] (9223372036854775807) exceeds 2^53", 2, 0, 0, 0, 0, huge, 2,
           0, NULL);
    /* 2^106 elements: the count overflows */
    REJECT(TFP_ERANGE, "F32 x [9007199254740992,9007199254740992] is more bytes than an int64",
           2, 0, 0, 0, 0, ovf, 2, 0, NULL);
    /* 2^62 elements fit 64 bits, but 2^64 bytes do not */
    REJECT(TFP_ERANGE, "F32 x [2147483648,2147483648] is more bytes", 2, 0, 0, 0, 0, ovf2, 2, 0,
           NULL);
}
END_TEST

START_TEST(reject_tensor_len_mismatch)
{
    REJECT(TFP_EPROTO, "tensor_len 20 does not match F32 x [2,3] = 24 bytes", 2, 0, 0, 20, 4,
           S23, 2, 20, "{}  ");
    REJECT(TFP_EPROTO, "tensor_len 28 does not match F32 x [2,3] = 24 bytes", 2, 0, 0, 28, 0,
           S23, 2, 28, NULL);
    REJECT(TFP_EPROTO, "tensor_len 0 does not match F32 x [] = 4 bytes", 0, 0, 0, 0, 0, NULL,
           0, 0, NULL);
}
END_TEST

START_TEST(reject_total_len_mismatch)
{
    /* truncated data */
    REJECT(TFP_EPROTO, "the message is 76 bytes but its header says 56 + 24 tensor + 0 props",
           2, 0, 0, 24, 0, S23, 2, 20, NULL);
    /* trailing bytes beyond props */
    REJECT(TFP_EPROTO, "the message is 83 bytes but its header says 56 + 24 tensor + 2 props",
           2, 0, 0, 24, 2, S23, 2, 24, "{}x");
    /* props_len larger than what is left */
    REJECT(TFP_EPROTO, "header says 56 + 24 tensor + 100 props", 2, 0, 0, 24, 100, S23, 2, 24,
           "{}");
    /* props_len so large that the sum overflows */
    REJECT(TFP_EPROTO, "+ 9223372036854775807 props", 2, 0, 0, 24, INT64_MAX, S23, 2, 24,
           NULL);
}
END_TEST

START_TEST(reject_props_too_big)
{
    size_t len;
    uint8_t *b = mk(0, 0, 0, 4, 9, NULL, 0, NULL, 4, "{\"a\":123}", &len);

    reject_buf(__LINE__, b, len, 8, TFP_ETOOBIG, "props_len 9 exceeds the limit of 8 bytes");
    free(b);
}
END_TEST

START_TEST(reject_props_json)
{
    static const struct {
        const char *props, *why;
    } bad[] = {
        { "[1,2]", "props is not a JSON object" },
        { "\"x\"", "props is not a JSON object" },
        { "null", "props is not a JSON object" },
        { "   ", "props is not a JSON object" },
        { "{\"a\":}", "props: invalid JSON at byte" },
        { "{\"a\":1", "props: invalid JSON" },
        { "{'a':1}", "props: invalid JSON" },
        { "{\"a\":01}", "props: invalid JSON" },
        { "{\"a\":1}}", "props: byte 0x7d at 7 after the JSON object" },
        { "{} {}", "props: byte 0x7b at 3 after the JSON object" },
        { "{\"a\":\"\xff\"}", "props: invalid JSON" },
        { "{\"a\":\"\\u0000\"}", "props: invalid JSON" },
    };

    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t len, pn = strlen(bad[i].props);
        uint8_t *b = mk(0, 0, 0, 4, (int64_t)pn, NULL, 0, NULL, 4, bad[i].props, &len);

        reject_buf(__LINE__, b, len, 0, TFP_EPROTO, bad[i].why);
        free(b);
    }
    {   /* a raw NUL inside the props span */
        size_t len;
        uint8_t *b = mk(0, 0, 0, 4, 4, NULL, 0, NULL, 4, "{}  ", &len);

        b[len - 1] = '\0';
        reject_buf(__LINE__, b, len, 0, TFP_EPROTO, "props: byte 0x00 at 3");
        free(b);
    }
}
END_TEST

/* Truncating a valid message anywhere, or flipping any header byte, must never crash and
 * never accept a message whose words disagree with its length. */
START_TEST(reject_every_truncation)
{
    float data[6] = { 0 };
    size_t len;
    uint8_t *b = mk(2, 7, 1, 24, (int64_t)strlen(PROPS), S23, 2, data, 24, PROPS, &len);

    for (size_t n = 0; n < len; n++) {
        tfp_shumai_msg_t msg;
        tfp_err_t err;
        uint8_t *c = malloc(n ? n : 1);

        memcpy(c, b, n);
        ck_assert_msg(tfp_shumai_decode(c, n, 0, &msg, &err) != TFP_OK, "accepted %zu bytes", n);
        free(c);
    }
    for (size_t i = 0; i < 56; i++) {
        for (int bit = 0; bit < 8; bit++) {
            tfp_shumai_msg_t msg;
            tfp_err_t err;

            b[i] ^= (uint8_t)(1u << bit);
            if (tfp_shumai_decode(b, len, 0, &msg, &err) == TFP_OK) {
                /* only the provenance word and the requires_grad bit are free */
                ck_assert_msg((i >= 8 && i < 16) || (i == 16 && bit == 0),
                              "byte %zu bit %d flipped and still accepted", i, bit);
                tfp_shumai_msg_clear(&msg);
            }
            b[i] ^= (uint8_t)(1u << bit);
        }
    }
    free(b);
}
END_TEST

/* ---- encoding ------------------------------------------------------------------------ */

START_TEST(encode_header_layout)
{
    static const uint64_t shape[] = { 2, 3 };
    uint8_t hdr[TFP_SHUMAI_MAX_HEADER];
    uint64_t total;
    size_t n = 0;
    tfp_err_t err;
    uint8_t want[56];

    ck_assert_int_eq(TFP_SHUMAI_MAX_HEADER, 104);
    ck_assert_int_eq(tfp_shumai_encode_header(2, shape, -2, 1, 21, hdr, sizeof hdr, &n, &err),
                     TFP_OK);
    ck_assert_uint_eq(n, 56);
    put64(want, 2);
    put64(want + 8, -2);
    put64(want + 16, 1);
    put64(want + 24, 24);
    put64(want + 32, 21);
    put64(want + 40, 2);
    put64(want + 48, 3);
    ck_assert_mem_eq(hdr, want, 56);
    ck_assert_int_eq(tfp_shumai_total_len(2, shape, 21, &total, &err), TFP_OK);
    ck_assert_uint_eq(total, 56 + 24 + 21);
    ck_assert_int_eq(tfp_shumai_total_len(0, NULL, 0, &total, &err), TFP_OK);
    ck_assert_uint_eq(total, 44);
}
END_TEST

START_TEST(encode_header_refusals)
{
    static const uint64_t shape[] = { 2, 3 };
    static const uint64_t big[] = { (UINT64_C(1) << 53) + 1 };
    static const uint64_t ovf[] = { UINT64_C(1) << 31, UINT64_C(1) << 31 };
    static const uint64_t edge[] = { UINT64_C(1) << 30, UINT64_C(1) << 31 };
    uint8_t hdr[TFP_SHUMAI_MAX_HEADER], zero[TFP_SHUMAI_MAX_HEADER] = { 0 };
    uint64_t total;
    size_t n = 99;
    tfp_err_t err;

    memset(hdr, 0, sizeof hdr);
    ck_assert_int_eq(tfp_shumai_encode_header(2, shape, 0, 2, 0, hdr, sizeof hdr, &n, &err),
                     TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "flags 0x2: only requires_grad"));
    ck_assert_int_eq(tfp_shumai_encode_header(2, shape, 0, 0, 0, hdr, 55, &n, &err),
                     TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "header needs 56 bytes, 55 given"));
    ck_assert_int_eq(tfp_shumai_encode_header(9, shape, 0, 0, 0, hdr, sizeof hdr, &n, &err),
                     TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "rank 9 is outside 0..8"));
    ck_assert_int_eq(tfp_shumai_encode_header(-1, shape, 0, 0, 0, hdr, sizeof hdr, &n, &err),
                     TFP_EINVAL);
    ck_assert_int_eq(tfp_shumai_encode_header(2, NULL, 0, 0, 0, hdr, sizeof hdr, &n, &err),
                     TFP_EINVAL);
    ck_assert_int_eq(tfp_shumai_encode_header(1, big, 0, 0, 0, hdr, sizeof hdr, &n, &err),
                     TFP_ERANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "shape[0] (9007199254740993) exceeds 2^53"));
    ck_assert_int_eq(tfp_shumai_encode_header(2, ovf, 0, 0, 0, hdr, sizeof hdr, &n, &err),
                     TFP_ERANGE);
    ck_assert_int_eq(tfp_shumai_encode_header(2, shape, 0, 0, UINT64_MAX, hdr, sizeof hdr, &n,
                                              &err), TFP_ERANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "props_len 18446744073709551615"));
    ck_assert_mem_eq(hdr, zero, sizeof hdr);    /* nothing written on failure */
    ck_assert_uint_eq(n, 99);
    /* 2^63 bytes of tensor: one more than an int64 word holds */
    ck_assert_int_eq(tfp_shumai_total_len(2, edge, 0, &total, &err), TFP_ERANGE);
    /* a tensor of 2^63 - 8 bytes (fits a word) plus 2^63 - 1 bytes of props: past 2^64 */
    {
        static const uint64_t most[] = { 2, (UINT64_C(1) << 30) - 1, (UINT64_C(1) << 30) + 1 };

        ck_assert_int_eq(tfp_shumai_total_len(3, most, 0, &total, &err), TFP_OK);
        ck_assert_uint_eq(total, 64 + (UINT64_C(1) << 63) - 8);
        ck_assert_int_eq(tfp_shumai_total_len(3, most, INT64_MAX, &total, &err), TFP_ERANGE);
        ck_assert_ptr_nonnull(strstr(err.msg, "overflows 64 bits"));
    }
}
END_TEST

START_TEST(round_trip_header_then_data)
{
    /* the zero-copy path: header from the encoder, data and props appended by the caller */
    static const uint64_t shape[] = { 3, 1, 2 };
    float data[6] = { -1.5f, 0, 1e30f, 3, 4, 5 };
    const char *props = "{\"stats\":{}}";
    uint8_t hdr[TFP_SHUMAI_MAX_HEADER], *b;
    size_t hn, pn = strlen(props);
    uint64_t total;
    tfp_shumai_msg_t msg;
    tfp_err_t err;

    ck_assert_int_eq(tfp_shumai_encode_header(3, shape, 0xabcdef, 0, pn, hdr, sizeof hdr, &hn,
                                              &err), TFP_OK);
    ck_assert_int_eq(tfp_shumai_total_len(3, shape, pn, &total, &err), TFP_OK);
    b = malloc(total);
    memcpy(b, hdr, hn);
    memcpy(b + hn, data, sizeof data);
    memcpy(b + hn + sizeof data, props, pn);
    ck_assert_msg(tfp_shumai_decode(b, total, 0, &msg, &err) == TFP_OK, "%s", err.msg);
    ck_assert_int_eq(msg.doc->t[0].rank, 3);
    ck_assert_uint_eq(msg.doc->t[0].shape[2], 2);
    ck_assert_mem_eq(msg.doc->t[0].data, data, sizeof data);
    ck_assert_int_eq(msg.provenance, 0xabcdef);
    ck_assert_uint_eq(msg.props_len, pn);
    tfp_shumai_msg_clear(&msg);
    free(b);
}
END_TEST

START_TEST(round_trip_whole_message)
{
    static const int64_t provs[] = { 0, 1, TFP_SHUMAI_NO_PROVENANCE, -1, INT64_MIN, INT64_MAX,
                                     0x0a1b2c3d };
    uint32_t seed = 12345;

    for (int iter = 0; iter < 200; iter++) {
        uint64_t shape[TFP_MAX_RANK], count = 1;
        int rank = (int)(seed % (TFP_MAX_RANK + 1));
        float *data;
        tfp_doc_t *doc = tfp_doc_new();
        const tfp_tensor_t *t;
        const char *props = iter % 3 == 0 ? NULL : iter % 3 == 1 ? PROPS : "{\"k\":[true]}";
        size_t pn = props ? strlen(props) : 0, len;
        int64_t prov = provs[iter % 7];
        uint64_t flags = (uint64_t)(iter & 1);
        uint8_t *b;
        tfp_shumai_msg_t msg;
        tfp_err_t err;

        for (int d = 0; d < rank; d++) {
            seed = seed * 1103515245u + 12345u;
            shape[d] = (seed >> 16) % 4;            /* zero dims too */
            count *= shape[d];
        }
        seed = seed * 1103515245u + 12345u;
        data = malloc(count ? count * 4 : 1);
        for (uint64_t k = 0; k < count; k++)
            data[k] = (float)k * 0.25f - 3.0f;
        ck_assert_int_eq(tfp_doc_add(doc, "w", TFP_F32, rank, shape, data, count * 4, &err),
                         TFP_OK);
        ck_assert_msg(tfp_shumai_check_doc(doc, &t, &err) == TFP_OK, "%s", err.msg);
        ck_assert_msg(tfp_shumai_encode(t, prov, flags, props, pn, &b, &len, &err) == TFP_OK,
                      "%s", err.msg);
        ck_assert_uint_eq(len, 40 + 8 * (size_t)rank + count * 4 + pn);
        ck_assert_msg(tfp_shumai_decode(b, len, 0, &msg, &err) == TFP_OK, "iter %d: %s", iter,
                      err.msg);
        ck_assert_int_eq(msg.doc->t[0].rank, rank);
        for (int d = 0; d < rank; d++)
            ck_assert_uint_eq(msg.doc->t[0].shape[d], shape[d]);
        ck_assert_uint_eq(msg.doc->t[0].nbytes, count * 4);
        if (count > 0)
            ck_assert_mem_eq(msg.doc->t[0].data, data, count * 4);
        ck_assert_int_eq(msg.provenance, prov);
        ck_assert_uint_eq(msg.flags, flags);
        ck_assert_uint_eq(msg.props_len, pn);
        if (pn > 0)
            ck_assert_mem_eq(msg.props, props, pn);
        tfp_shumai_msg_clear(&msg);
        free(b);
        free(data);
        tfp_doc_free(doc);
    }
}
END_TEST

START_TEST(encode_refusals)
{
    static const uint64_t shape[] = { 2 };
    float data[2] = { 1, 2 };
    tfp_tensor_t t = { .name = (char *)"x", .dtype = TFP_F32, .rank = 1, .shape = { 2 },
                       .nbytes = 8, .data = (const uint8_t *)data };
    uint8_t *b = (uint8_t *)&t;
    size_t len = 7;
    tfp_err_t err;

    (void)shape;
    ck_assert_int_eq(tfp_shumai_encode(&t, 0, 0, "[1]", 3, &b, &len, &err), TFP_EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "props is not a JSON object"));
    ck_assert_int_eq(tfp_shumai_encode(&t, 0, 0, "{", 1, &b, &len, &err), TFP_EPROTO);
    ck_assert_int_eq(tfp_shumai_encode(&t, 0, 3, NULL, 0, &b, &len, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_shumai_encode(NULL, 0, 0, NULL, 0, &b, &len, &err), TFP_EINVAL);
    t.nbytes = 4;
    ck_assert_int_eq(tfp_shumai_encode(&t, 0, 0, NULL, 0, &b, &len, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "tensor has 4 bytes, F32 x shape needs 8"));
    t.nbytes = 8;
    t.data = NULL;
    ck_assert_int_eq(tfp_shumai_encode(&t, 0, 0, NULL, 0, &b, &len, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "no data bound"));
    t.data = (const uint8_t *)data;
    t.dtype = TFP_F64;
    t.nbytes = 16;
    ck_assert_int_eq(tfp_shumai_encode(&t, 0, 0, NULL, 0, &b, &len, &err), TFP_ENOTACCEPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "carries only F32 tensors; 'x' is F64"));
    ck_assert_ptr_eq(b, (uint8_t *)&t);         /* outputs untouched */
    ck_assert_uint_eq(len, 7);
}
END_TEST

START_TEST(check_doc_refusals)
{
    static const uint64_t s2[] = { 2 };
    int32_t ints[2] = { 1, 2 };
    float fl[2] = { 1, 2 };
    const tfp_tensor_t *t = NULL;
    tfp_doc_t *doc = tfp_doc_new();
    tfp_err_t err;

    ck_assert_int_eq(tfp_shumai_check_doc(NULL, &t, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_shumai_check_doc(doc, &t, &err), TFP_ENOTACCEPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "exactly one tensor; the document has none"));

    ck_assert_int_eq(tfp_doc_add(doc, "ids", TFP_I32, 1, s2, ints, 8, &err), TFP_OK);
    ck_assert_int_eq(tfp_shumai_check_doc(doc, &t, &err), TFP_ENOTACCEPT);
    ck_assert_str_eq(err.msg, "Shumai's format carries only F32 tensors; 'ids' is I32");
    ck_assert_int_eq(tfp_status_http(err.code), 406);

    ck_assert_int_eq(tfp_doc_add(doc, "w", TFP_F32, 1, s2, fl, 8, &err), TFP_OK);
    ck_assert_int_eq(tfp_shumai_check_doc(doc, &t, &err), TFP_ENOTACCEPT);
    ck_assert_str_eq(err.msg,
                     "Shumai's format carries exactly one tensor; the document has 2 ('ids', 'w')");
    ck_assert_int_eq(tfp_doc_add(doc, "b", TFP_F32, 1, s2, fl, 8, &err), TFP_OK);
    ck_assert_int_eq(tfp_shumai_check_doc(doc, &t, &err), TFP_ENOTACCEPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "has 3 ('ids', 'w', ...)"));
    ck_assert_ptr_null(t);
    tfp_doc_free(doc);

    /* one F32 tensor with metadata: fine (the metadata is not carried) */
    doc = tfp_doc_new();
    ck_assert_int_eq(tfp_doc_add(doc, "w", TFP_F32, 1, s2, fl, 8, &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_set_meta(doc, "k", "v", &err), TFP_OK);
    ck_assert_int_eq(tfp_shumai_check_doc(doc, &t, &err), TFP_OK);
    ck_assert_ptr_eq(t, &doc->t[0]);
    ck_assert_int_eq(tfp_shumai_check_doc(doc, NULL, &err), TFP_OK);
    doc->t[0].data = NULL;
    ck_assert_int_eq(tfp_shumai_check_doc(doc, &t, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "'w' has no data bound"));
    tfp_doc_free(doc);
}
END_TEST

START_TEST(props_check_direct)
{
    tfp_err_t err;

    ck_assert_int_eq(tfp_shumai_props_check(NULL, 0, &err), TFP_OK);
    ck_assert_int_eq(tfp_shumai_props_check(PROPS, strlen(PROPS), &err), TFP_OK);
    ck_assert_int_eq(tfp_shumai_props_check(NULL, 3, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_shumai_props_check("{}x", 2, &err), TFP_OK);    /* only n bytes */
    ck_assert_int_eq(tfp_shumai_props_check("{}x", 3, &err), TFP_EPROTO);
}
END_TEST

/* ---- provenance <-> user id ---------------------------------------------------------- */

/* What BigInt(v).toString(16) prints, for every case below, checked by hand against
 * node: (-1n).toString(16) == "-1", (-(2n**63n)).toString(16) == "-8000000000000000". */
START_TEST(provenance_to_user)
{
    static const struct {
        int64_t prov;
        const char *user;
    } cases[] = {
        { 0, "0" },
        { 1, "1" },
        { 0xf, "f" },
        { 0x0a1b2c3d, "a1b2c3d" },              /* Shumai id "0a1b2c3d": the 0 is gone */
        { 0x00000001, "1" },                    /* id "00000001" */
        { 0xdeadbeef, "deadbeef" },
        { 0xfffffffe, "fffffffe" },
        { INT64_C(0x100000000), "100000000" },
        { INT64_C(0x7fffffffffffffff), "7fffffffffffffff" },
        { -1, "-1" },
        { -0x10, "-10" },
        { INT64_C(-0x123456789abcdef), "-123456789abcdef" },
        { INT64_MIN, "-8000000000000000" },
    };
    char buf[TFP_SHUMAI_USER_SIZE];

    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t back = 42;
        tfp_err_t err;

        memset(buf, 'X', sizeof buf);
        ck_assert_int_eq(tfp_shumai_provenance_to_user(cases[i].prov, buf), 1);
        ck_assert_str_eq(buf, cases[i].user);
        ck_assert_msg(tfp_shumai_user_to_provenance(buf, &back, &err) == TFP_OK, "%s: %s", buf,
                      err.msg);
        ck_assert_int_eq(back, cases[i].prov);
    }
    memset(buf, 'X', sizeof buf);
    ck_assert_int_eq(tfp_shumai_provenance_to_user(TFP_SHUMAI_NO_PROVENANCE, buf), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(TFP_SHUMAI_NO_PROVENANCE, 4294967295);
}
END_TEST

START_TEST(user_to_provenance)
{
    static const struct {
        const char *user;
        int64_t prov;
    } cases[] = {
        { "0a1b2c3d", 0x0a1b2c3d },             /* what tfetch's _unique_id looks like */
        { "00000000", 0 },
        { "ffffffff", TFP_SHUMAI_NO_PROVENANCE }, /* Shumai cannot tell it from none either */
        { "DEADBEEF", 0xdeadbeef },             /* BigInt('0xDEADBEEF') */
        { "0000000000000001", 1 },              /* 16 digits */
        { "ffffffffffffffff", -1 },             /* BigInt64Array wraps 2^64-1 to -1 */
        { "8000000000000000", INT64_MIN },
        { "-8000000000000000", INT64_MIN },
        { "-00ff", -255 },
        { NULL, TFP_SHUMAI_NO_PROVENANCE },
        { "", TFP_SHUMAI_NO_PROVENANCE },
    };
    static const char *bad[] = { "alice", "0x1f", "12345678901234567", "-", "-0", "--1", "+1",
                                 "-8000000000000001", "-ffffffffffffffff", "1 ", " 1", "g",
                                 "12.3", "a_b", "-00000000000000000" };

    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t p = 42;
        tfp_err_t err;

        ck_assert_msg(tfp_shumai_user_to_provenance(cases[i].user, &p, &err) == TFP_OK,
                      "'%s': %s", cases[i].user ? cases[i].user : "(null)", err.msg);
        ck_assert_msg(p == cases[i].prov, "'%s' -> %lld", cases[i].user ? cases[i].user : "",
                      (long long)p);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int64_t p = 42;
        tfp_err_t err;

        ck_assert_msg(tfp_shumai_user_to_provenance(bad[i], &p, &err) == TFP_EINVAL,
                      "'%s' accepted", bad[i]);
        ck_assert_msg(strstr(err.msg, "is not a hex number Shumai can carry") != NULL, "%s",
                      err.msg);
        ck_assert_int_eq(p, 42);
    }
    {
        tfp_err_t err;
        int64_t p;

        tfp_shumai_user_to_provenance("alice", &p, &err);
        ck_assert_str_eq(err.msg, "user id 'alice' is not a hex number Shumai can carry");
        ck_assert_int_eq(tfp_shumai_user_to_provenance("1", NULL, &err), TFP_EINVAL);
    }
}
END_TEST

/* Every 16-bit pattern spread across the word, both ways. */
START_TEST(provenance_round_trip_sweep)
{
    char buf[TFP_SHUMAI_USER_SIZE];

    for (int shift = 0; shift < 64; shift += 4) {
        for (uint32_t v = 0; v < 0x10000; v += 97) {
            int64_t prov = (int64_t)((uint64_t)v << shift), back;
            tfp_err_t err;

            if (tfp_shumai_provenance_to_user(prov, buf) == 0) {
                ck_assert_int_eq(prov, TFP_SHUMAI_NO_PROVENANCE);
                continue;
            }
            ck_assert_int_eq(tfp_shumai_user_to_provenance(buf, &back, &err), TFP_OK);
            ck_assert_int_eq(back, prov);
            ck_assert_msg(buf[0] != '0' || buf[1] == '\0', "leading zero in '%s'", buf);
        }
    }
}
END_TEST

Suite *suite_shumai(void)
{
    Suite *s = suite_create("shumai");
    TCase *tc = tcase_create("decode");

    tcase_add_test(tc, decode_tfetch_request);
    tcase_add_test(tc, decode_scalar_empty_and_no_props);
    tcase_add_test(tc, decode_rank_eight);
    tcase_add_test(tc, decode_props_whitespace_and_nesting);
    tcase_add_test(tc, reject_short);
    tcase_add_test(tc, reject_arguments);
    tcase_add_test(tc, reject_ndim);
    tcase_add_test(tc, reject_flags);
    tcase_add_test(tc, reject_negative_lengths);
    tcase_add_test(tc, reject_shape_past_end);
    tcase_add_test(tc, reject_dims);
    tcase_add_test(tc, reject_tensor_len_mismatch);
    tcase_add_test(tc, reject_total_len_mismatch);
    tcase_add_test(tc, reject_props_too_big);
    tcase_add_test(tc, reject_props_json);
    tcase_add_test(tc, reject_every_truncation);
    suite_add_tcase(s, tc);

    tc = tcase_create("encode");
    tcase_add_test(tc, encode_header_layout);
    tcase_add_test(tc, encode_header_refusals);
    tcase_add_test(tc, round_trip_header_then_data);
    tcase_add_test(tc, round_trip_whole_message);
    tcase_add_test(tc, encode_refusals);
    tcase_add_test(tc, check_doc_refusals);
    tcase_add_test(tc, props_check_direct);
    suite_add_tcase(s, tc);

    tc = tcase_create("provenance");
    tcase_add_test(tc, provenance_to_user);
    tcase_add_test(tc, user_to_provenance);
    tcase_add_test(tc, provenance_round_trip_sweep);
    suite_add_tcase(s, tc);
    return s;
}
