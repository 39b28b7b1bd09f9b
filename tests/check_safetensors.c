/* check_safetensors.c - the safetensors suite: the safetensors codec (proto/safetensors.c),
 * driven with good and hostile input.
 *
 * Each rejection class has its own case asserting the status and a distinctive part of the
 * message; valid edge cases and seeded random round trips check what must be accepted, and
 * the encoder's layout is pinned.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "proto/doc.h"
#include "proto/dtype.h"
#include "proto/jsonw.h"
#include "proto/safetensors.h"
#include "proto/status.h"
#include "tests/suites.h"

/* ---- helpers ------------------------------------------------------------------------- */

/* A safetensors buffer: 8-byte LE length, jlen bytes of header, dlen bytes of data. */
static uint8_t *mk(const char *json, size_t jlen, const void *data, size_t dlen, size_t *len)
{
    uint8_t *b = malloc(8 + jlen + dlen + 1);

    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)jlen >> (8 * i));
    memcpy(b + 8, json, jlen);
    if (dlen > 0) {
        if (data != NULL)
            memcpy(b + 8 + jlen, data, dlen);
        else
            memset(b + 8 + jlen, 0xAB, dlen);
    }
    *len = 8 + jlen + dlen;
    return b;
}

static int paths_agree(const uint8_t *b, size_t len, const tfp_st_limits_t *lim,
                       tfp_status_t st, const tfp_doc_t *doc, const tfp_err_t *err);
static int scanned;                 /* the last decode_json's header was read by the scan */

/* Decodes through tfp_st_decode, after checking that its two paths agree (paths_agree). */
static tfp_status_t decode_json(const char *json, size_t jlen, size_t dlen,
                                const tfp_st_limits_t *lim, tfp_doc_t **doc, tfp_err_t *err,
                                uint8_t **keep)
{
    size_t len;
    uint8_t *b = mk(json, jlen, NULL, dlen, &len);
    tfp_status_t st = tfp_st_decode(b, len, lim, doc, err);

    scanned = paths_agree(b, len, lim, st, *doc, err);

    if (keep != NULL)
        *keep = b;
    else
        free(b);
    return st;
}

static void reject_at(int line, const char *json, size_t jlen, size_t dlen,
                      const tfp_st_limits_t *lim, tfp_status_t want, const char *substr)
{
    tfp_doc_t *doc = NULL;
    tfp_err_t err = { TFP_OK, "" };
    tfp_status_t st = decode_json(json, jlen, dlen, lim, &doc, &err, NULL);

    ck_assert_msg(st == want, "line %d: got %s, want %s (%s)", line, tfp_status_name(st),
                  tfp_status_name(want), err.msg);
    ck_assert_msg(err.code == want, "line %d: err.code %d", line, (int)err.code);
    ck_assert_msg(strstr(err.msg, substr) != NULL, "line %d: message '%s' lacks '%s'", line,
                  err.msg, substr);
    ck_assert_msg(doc == NULL, "line %d: output set on failure", line);
}

#define REJECT(json, dlen, want, substr) \
    reject_at(__LINE__, json, strlen(json), dlen, NULL, want, substr)
#define REJECT_LIM(json, dlen, lim, want, substr) \
    reject_at(__LINE__, json, strlen(json), dlen, lim, want, substr)

static tfp_doc_t *accept_at(int line, const char *json, size_t jlen, size_t dlen,
                            uint8_t **buf)
{
    tfp_doc_t *doc = NULL;
    tfp_err_t err = { TFP_OK, "" };
    tfp_status_t st = decode_json(json, jlen, dlen, NULL, &doc, &err, buf);

    ck_assert_msg(st == TFP_OK, "line %d: got %s (%s)", line, tfp_status_name(st), err.msg);
    ck_assert_ptr_nonnull(doc);
    return doc;
}

#define ACCEPT(json, dlen, bufp) accept_at(__LINE__, json, strlen(json), dlen, bufp)

/* The tensor entry for name with dtype, shape text and offsets. */
#define ENTRY(name, dt, shape, b, e) \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

/* ---- safetensors: rejections, one class per case -------------------------------------- */

START_TEST(st_reject_short)
{
    tfp_doc_t *doc = NULL;
    tfp_err_t err;
    uint8_t b[8] = { 2, 0, 0, 0, 0, 0, 0, 0 };

    ck_assert_int_eq(tfp_st_decode(b, 7, NULL, &doc, &err), TFP_EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "shorter than the 8-byte header length"));
    ck_assert_int_eq(tfp_st_decode(b, 0, NULL, &doc, &err), TFP_EPROTO);
    ck_assert_int_eq(tfp_st_decode(NULL, 0, NULL, &doc, &err), TFP_EPROTO);
    ck_assert_ptr_null(doc);
    ck_assert_int_eq(tfp_st_decode(b, 8, NULL, NULL, &err), TFP_EINVAL);
}
END_TEST

START_TEST(st_reject_header_over_limit)
{
    tfp_st_limits_t lim = { 16, 0 };
    tfp_doc_t *doc = NULL;
    tfp_err_t err;
    uint8_t b[16] = { 0 };

    REJECT_LIM("{\"__metadata__\":{}}", 0, &lim, TFP_ETOOBIG, "exceeds the limit of 16 bytes");
    /* the default cap: a claimed 16 MiB + 1 header is refused before its bytes are needed */
    b[0] = 1, b[1] = 0, b[2] = 0, b[3] = 1;
    ck_assert_int_eq(tfp_st_decode(b, sizeof b, NULL, &doc, &err), TFP_ETOOBIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "16777217"));
    /* a header exactly at the limit is fine */
    lim.max_header = 2;
    ck_assert_int_eq(decode_json("{}", 2, 0, &lim, &doc, &err, NULL), TFP_OK);
    tfp_doc_free(doc);
    REJECT_LIM("{} ", 0, &lim, TFP_ETOOBIG, "limit");
}
END_TEST

START_TEST(st_reject_header_past_end)
{
    tfp_doc_t *doc = NULL;
    tfp_err_t err;
    uint8_t b[12] = { 5, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ' };

    ck_assert_int_eq(tfp_st_decode(b, sizeof b, NULL, &doc, &err), TFP_EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "header length 5 exceeds the 4 bytes that follow"));
    b[0] = 0xff, b[7] = 0x7f;                  /* huge: caught by the cap first */
    ck_assert_int_eq(tfp_st_decode(b, sizeof b, NULL, &doc, &err), TFP_ETOOBIG);
    ck_assert_ptr_null(doc);
}
END_TEST

START_TEST(st_reject_not_object)
{
    REJECT("[]", 0, TFP_EPROTO, "not a JSON object");
    REJECT("\"x\"", 0, TFP_EPROTO, "not a JSON object");
    REJECT("", 0, TFP_EPROTO, "not a JSON object");
    REJECT(" {}", 0, TFP_EPROTO, "does not start with '{'");
    REJECT("\xef\xbb\xbf{}", 0, TFP_EPROTO, "does not start with '{'");   /* BOM */
}
END_TEST

START_TEST(st_reject_invalid_json)
{
    REJECT("{", 0, TFP_EPROTO, "invalid JSON at byte 1");
    REJECT("{\"a\":}", 0, TFP_EPROTO, "expected a value");
    REJECT("{\"a\" 1}", 0, TFP_EPROTO, "expected ':'");
    REJECT("{\"a\":1,}", 0, TFP_EPROTO, "expected a string key");
    REJECT("{'a':1}", 0, TFP_EPROTO, "expected a string key");
    REJECT("{\"a\":01}", 0, TFP_EPROTO, "expected ',' or '}'");
    REJECT("{\"a\":[1 2]}", 0, TFP_EPROTO, "expected ',' or ']'");
    REJECT("{\"a\":tru}", 0, TFP_EPROTO, "expected a value");
    REJECT("{\"a\":\"\\x\"}", 0, TFP_EPROTO, "invalid escape");
    REJECT("{\"a\":\"\\ud800\"}", 0, TFP_EPROTO, "unpaired surrogate");
    REJECT("{\"a\\u0000b\":1}", 0, TFP_EPROTO, "\\u0000 is not allowed");
    REJECT("{\"a\":\"x\ty\"}", 0, TFP_EPROTO, "raw control character");
    REJECT("{\x01\"a\":1}", 0, TFP_EPROTO, "expected a string key");   /* cJSON would skip it */
    reject_at(__LINE__, "{\"a\x00\":1}", 8, 0, NULL, TFP_EPROTO, "raw control character");
}
END_TEST

START_TEST(st_reject_not_utf8)
{
    REJECT("{\"w\xff\":{}}", 0, TFP_EPROTO, "not valid UTF-8");
    REJECT("{\"__metadata__\":{\"k\":\"\xc0\xaf\"}}", 0, TFP_EPROTO, "not valid UTF-8");
    REJECT("{\"w\xed\xa0\x80\":{}}", 0, TFP_EPROTO, "not valid UTF-8");   /* a surrogate */
    REJECT("{\xc3\xa9:1}", 0, TFP_EPROTO, "expected a string key");
}
END_TEST

START_TEST(st_reject_trailing_bytes)
{
    REJECT("{}x", 0, TFP_EPROTO, "byte 0x78 at 2 after the JSON object");
    REJECT("{}  \n", 0, TFP_EPROTO, "only spaces may pad it");
    REJECT("{}\t", 0, TFP_EPROTO, "only spaces");
    REJECT("{} {}", 0, TFP_EPROTO, "after the JSON object");
    reject_at(__LINE__, "{}\0\0", 4, 0, NULL, TFP_EPROTO, "byte 0x00 at 2");
}
END_TEST

START_TEST(st_reject_duplicate_keys)
{
    REJECT("{" ENTRY("w", "U8", "[1]", 0, 1) "," ENTRY("w", "U8", "[1]", 1, 2) "}", 2,
           TFP_EPROTO, "duplicate key 'w' in header");
    /* the same key spelled differently is still the same key */
    REJECT("{" ENTRY("w", "U8", "[1]", 0, 1) "," ENTRY("\\u0077", "U8", "[1]", 1, 2) "}", 2,
           TFP_EPROTO, "duplicate key 'w'");
    REJECT("{\"__metadata__\":{},\"__metadata__\":{}}", 0, TFP_EPROTO,
           "duplicate key '__metadata__' in header");
}
END_TEST

START_TEST(st_reject_duplicate_meta_keys)
{
    REJECT("{\"__metadata__\":{\"a\":\"1\",\"b\":\"2\",\"a\":\"3\"}}", 0, TFP_EPROTO,
           "duplicate key 'a' in __metadata__");
}
END_TEST

START_TEST(st_reject_duplicate_entry_keys)
{
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1,
           TFP_EPROTO, "tensor 'w': duplicate key 'dtype'");
}
END_TEST

START_TEST(st_reject_unknown_entry_key)
{
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":1}}", 1,
           TFP_EPROTO, "tensor 'w': unknown key 'extra'");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"Shape\":[1],\"data_offsets\":[0,1]}}", 1,
           TFP_EPROTO, "unknown key 'Shape'");
}
END_TEST

START_TEST(st_reject_missing_fields)
{
    REJECT("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, TFP_EPROTO,
           "tensor 'w': missing \"dtype\"");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, TFP_EPROTO,
           "tensor 'w': missing \"shape\"");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, TFP_EPROTO,
           "tensor 'w': missing \"data_offsets\"");
    REJECT("{\"w\":{}}", 0, TFP_EPROTO, "missing \"dtype\"");
}
END_TEST

START_TEST(st_reject_entry_not_object)
{
    REJECT("{\"w\":[1]}", 0, TFP_EPROTO, "tensor 'w': entry is not an object");
    REJECT("{\"w\":null}", 0, TFP_EPROTO, "tensor 'w': entry is not an object");
}
END_TEST

START_TEST(st_reject_dtype)
{
    REJECT("{" ENTRY("w", "F128", "[1]", 0, 16) "}", 16, TFP_EPROTO,
           "tensor 'w': unknown dtype 'F128'");
    REJECT("{" ENTRY("w", "f32", "[1]", 0, 4) "}", 4, TFP_EPROTO, "unknown dtype 'f32'");
    REJECT("{" ENTRY("w", "", "[1]", 0, 4) "}", 4, TFP_EPROTO, "unknown dtype ''");
    REJECT("{\"w\":{\"dtype\":1,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, TFP_EPROTO,
           "tensor 'w': dtype is not a string");
    REJECT("{\"w\":{\"dtype\":[\"U8\"],\"shape\":[1],\"data_offsets\":[0,1]}}", 1, TFP_EPROTO,
           "dtype is not a string");
}
END_TEST

START_TEST(st_reject_shape_not_array)
{
    REJECT("{" ENTRY("w", "U8", "1", 0, 1) "}", 1, TFP_EPROTO, "tensor 'w': shape is not an array");
    REJECT("{" ENTRY("w", "U8", "{}", 0, 1) "}", 1, TFP_EPROTO, "shape is not an array");
    REJECT("{" ENTRY("w", "U8", "null", 0, 1) "}", 1, TFP_EPROTO, "shape is not an array");
}
END_TEST

START_TEST(st_reject_shape_rank)
{
    REJECT("{" ENTRY("w", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) "}", 1, TFP_EPROTO,
           "tensor 'w': shape has rank 9, more than 8");
}
END_TEST

START_TEST(st_reject_shape_dims)
{
    REJECT("{" ENTRY("w", "U8", "[2,-1]", 0, 1) "}", 1, TFP_EPROTO,
           "tensor 'w': shape[1] is negative");
    REJECT("{" ENTRY("w", "U8", "[1.5]", 0, 1) "}", 1, TFP_EPROTO,
           "tensor 'w': shape[0] is not an integer");
    REJECT("{" ENTRY("w", "U8", "[1e-1]", 0, 1) "}", 1, TFP_EPROTO, "is not an integer");
    REJECT("{" ENTRY("w", "U8", "[\"2\"]", 0, 2) "}", 2, TFP_EPROTO,
           "tensor 'w': shape[0] is not a number");
    REJECT("{" ENTRY("w", "U8", "[[2]]", 0, 2) "}", 2, TFP_EPROTO, "shape[0] is not a number");
    REJECT("{" ENTRY("w", "U8", "[true]", 0, 1) "}", 1, TFP_EPROTO, "shape[0] is not a number");
    REJECT("{" ENTRY("w", "U8", "[0,9007199254740994]", 0, 0) "}", 0, TFP_EPROTO,
           "shape[1] exceeds 2^53");
    REJECT("{" ENTRY("w", "U8", "[0,1e300]", 0, 0) "}", 0, TFP_EPROTO, "shape[1] exceeds 2^53");
}
END_TEST

START_TEST(st_reject_count_overflow)
{
    /* 2^32 x 2^32 elements: the element count does not fit in 64 bits */
    REJECT("{" ENTRY("w", "U8", "[4294967296,4294967296]", 0, 0) "}", 0, TFP_ERANGE,
           "tensor 'w': U8 x [4294967296,4294967296]: element count overflows");
}
END_TEST

START_TEST(st_reject_bytes_overflow)
{
    /* 2^62 elements fit, 2^62 x 8 bytes do not */
    REJECT("{" ENTRY("w", "F64", "[2147483648,2147483648]", 0, 0) "}", 0, TFP_ERANGE,
           "byte size of F64 x 4611686018427387904 elements overflows");
}
END_TEST

START_TEST(st_reject_offsets_shape)
{
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":1}}", 1, TFP_EPROTO,
           "tensor 'w': data_offsets is not [begin, end]");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1, TFP_EPROTO,
           "data_offsets is not [begin, end]");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}", 1, TFP_EPROTO,
           "data_offsets is not [begin, end]");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,\"1\"]}}", 1, TFP_EPROTO,
           "tensor 'w': data_offsets[1] is not an integer in 0..2^53");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 1, TFP_EPROTO,
           "data_offsets[0] is not an integer");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,0.5]}}", 1, TFP_EPROTO,
           "data_offsets[1] is not an integer");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":{\"0\":1}}}", 1, TFP_EPROTO,
           "data_offsets is not [begin, end]");
}
END_TEST

START_TEST(st_reject_offsets_reversed)
{
    REJECT("{" ENTRY("w", "U8", "[0]", 4, 0) "}", 4, TFP_EPROTO,
           "tensor 'w': data_offsets [4, 0] end before they begin");
}
END_TEST

START_TEST(st_reject_offsets_size_mismatch)
{
    REJECT("{" ENTRY("w", "F32", "[2,2]", 0, 12) "}", 12, TFP_EPROTO,
           "tensor 'w': data_offsets [0, 12] do not match F32 x [2,2] = 16 bytes");
    REJECT("{" ENTRY("s", "F64", "[]", 0, 4) "}", 4, TFP_EPROTO,
           "tensor 's': data_offsets [0, 4] do not match F64 x [] = 8 bytes");
}
END_TEST

START_TEST(st_reject_overlap)
{
    REJECT("{" ENTRY("a", "U8", "[8]", 0, 8) "," ENTRY("b", "U8", "[8]", 4, 12) "}", 12,
           TFP_EPROTO, "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
    REJECT("{" ENTRY("a", "U8", "[8]", 0, 8) "," ENTRY("b", "U8", "[8]", 0, 8) "}", 8,
           TFP_EPROTO, "overlap tensor");
    /* a zero-size tensor inside another one is not at a boundary */
    REJECT("{" ENTRY("a", "U8", "[8]", 0, 8) "," ENTRY("z", "U8", "[0]", 4, 4) "}", 8,
           TFP_EPROTO, "tensor 'z': data_offsets [4, 4] overlap tensor 'a'");
}
END_TEST

START_TEST(st_reject_hole)
{
    REJECT("{" ENTRY("a", "U8", "[4]", 0, 4) "," ENTRY("b", "U8", "[4]", 8, 12) "}", 12,
           TFP_EPROTO, "data section bytes [4, 8) belong to no tensor");
    REJECT("{" ENTRY("a", "U8", "[4]", 4, 8) "}", 8, TFP_EPROTO,
           "bytes [0, 4) belong to no tensor (a hole before tensor 'a')");
}
END_TEST

START_TEST(st_reject_past_end)
{
    REJECT("{" ENTRY("a", "U8", "[4]", 0, 4) "," ENTRY("b", "U8", "[4]", 4, 8) "}", 6,
           TFP_EPROTO, "tensor 'b': data_offsets [4, 8] run past the end of the 6-byte data section");
    REJECT("{" ENTRY("z", "U8", "[0]", 9, 9) "}", 0, TFP_EPROTO, "run past the end");
}
END_TEST

START_TEST(st_reject_uncovered)
{
    REJECT("{" ENTRY("a", "U8", "[4]", 0, 4) "}", 6, TFP_EPROTO,
           "tensors cover 4 bytes but the data section has 6: 2 trailing bytes");
    REJECT("{}", 3, TFP_EPROTO, "3 trailing bytes belong to no tensor");
    REJECT("{\"__metadata__\":{}}", 1, TFP_EPROTO, "1 trailing bytes");
}
END_TEST

START_TEST(st_reject_metadata)
{
    REJECT("{\"__metadata__\":[]}", 0, TFP_EPROTO, "__metadata__ is not an object");
    REJECT("{\"__metadata__\":\"x\"}", 0, TFP_EPROTO, "__metadata__ is not an object");
    REJECT("{\"__metadata__\":{\"k\":1}}", 0, TFP_EPROTO, "__metadata__['k'] is not a string");
    REJECT("{\"__metadata__\":{\"k\":null}}", 0, TFP_EPROTO, "__metadata__['k'] is not a string");
    REJECT("{\"__metadata__\":{\"k\":{\"a\":\"b\"}}}", 0, TFP_EPROTO, "is not a string");
}
END_TEST

START_TEST(st_reject_too_many_tensors)
{
    tfp_st_limits_t lim = { 0, 2 };
    const char *three = "{\"__metadata__\":{}," ENTRY("a", "U8", "[1]", 0, 1) ","
        ENTRY("b", "U8", "[1]", 1, 2) "," ENTRY("c", "U8", "[1]", 2, 3) "}";
    tfp_doc_t *doc;

    REJECT_LIM(three, 3, &lim, TFP_ETOOBIG, "header lists 3 tensors, more than the limit of 2");
    lim.max_tensors = 3;                 /* __metadata__ is not a tensor */
    ck_assert_int_eq(decode_json(three, strlen(three), 3, &lim, &doc, NULL, NULL), TFP_OK);
    tfp_doc_free(doc);
}
END_TEST

START_TEST(st_reject_bad_names)
{
    char *json = malloc(TFP_MAX_NAME + 128);
    size_t k;

    REJECT("{" ENTRY("", "U8", "[1]", 0, 1) "}", 1, TFP_EPROTO, "tensor name is empty");
    k = (size_t)sprintf(json, "{\"");
    memset(json + k, 'n', TFP_MAX_NAME + 1);
    k += TFP_MAX_NAME + 1;
    sprintf(json + k, "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}");
    REJECT(json, 1, TFP_EPROTO, "tensor name of 1025 bytes exceeds 1024");
    /* exactly TFP_MAX_NAME is fine */
    k = (size_t)sprintf(json, "{\"");
    memset(json + k, 'n', TFP_MAX_NAME);
    k += TFP_MAX_NAME;
    sprintf(json + k, "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}");
    tfp_doc_free(ACCEPT(json, 1, NULL));
    /* long names are cut in messages */
    k = (size_t)sprintf(json, "{\"");
    memset(json + k, 'n', 300);
    k += 300;
    sprintf(json + k, "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,2]}}");
    REJECT(json, 2, TFP_EPROTO, "nnn...': data_offsets [0, 2] do not match U8 x [1] = 1 bytes");
    free(json);
}
END_TEST

/* ---- safetensors: valid edge cases ----------------------------------------------------- */

START_TEST(st_accept_scalar)
{
    double v = 2.5;
    size_t len;
    const char *json = "{" ENTRY("s", "F64", "[]", 0, 8) "}";
    uint8_t *b = mk(json, strlen(json), &v, 8, &len);
    tfp_doc_t *doc = NULL;
    tfp_err_t err;
    double got;

    ck_assert_int_eq(tfp_st_decode(b, len, NULL, &doc, &err), TFP_OK);
    ck_assert_uint_eq(doc->n, 1);
    ck_assert_int_eq(doc->t[0].rank, 0);
    ck_assert_int_eq(doc->t[0].dtype, TFP_F64);
    ck_assert_uint_eq(doc->t[0].nbytes, 8);
    memcpy(&got, doc->t[0].data, 8);
    ck_assert(got == 2.5);
    tfp_doc_free(doc);
    free(b);
}
END_TEST

START_TEST(st_accept_zero_size)
{
    uint8_t *b;
    tfp_doc_t *doc = ACCEPT("{" ENTRY("z0", "F32", "[0]", 0, 0) ","
                            ENTRY("a", "U8", "[4]", 0, 4) ","
                            ENTRY("z1", "F64", "[3,0,2]", 4, 4) ","
                            ENTRY("b", "U8", "[2,2]", 4, 8) ","
                            ENTRY("z2", "I16", "[0,5]", 8, 8) ","
                            ENTRY("z3", "BOOL", "[0]", 8, 8) "}", 8, &b);

    ck_assert_uint_eq(doc->n, 6);
    ck_assert_str_eq(doc->t[0].name, "z0");
    ck_assert_uint_eq(doc->t[0].nbytes, 0);
    ck_assert_uint_eq(doc->t[2].rank, 3);
    ck_assert_uint_eq(doc->t[2].shape[1], 0);
    ck_assert_uint_eq(doc->t[4].offset, 8);
    ck_assert_ptr_eq(doc->t[1].data + 4, doc->t[3].data);
    tfp_doc_free(doc);
    free(b);
    /* only zero-size tensors, no data */
    doc = ACCEPT("{" ENTRY("z", "F32", "[0,0]", 0, 0) "," ENTRY("y", "U8", "[0]", 0, 0) "}", 0,
                 NULL);
    ck_assert_uint_eq(doc->n, 2);
    tfp_doc_free(doc);
    /* a zero dim with huge other dims counts zero bytes */
    doc = ACCEPT("{" ENTRY("z", "F64", "[9007199254740992,9007199254740992,0]", 0, 0) "}", 0,
                 NULL);
    ck_assert_uint_eq(doc->t[0].shape[0], UINT64_C(1) << 53);
    tfp_doc_free(doc);
}
END_TEST

START_TEST(st_accept_out_of_order)
{
    uint8_t data[12];
    size_t len;
    const char *json = "{" ENTRY("c", "U8", "[4]", 8, 12) "," ENTRY("a", "U8", "[4]", 0, 4) ","
        ENTRY("b", "U16", "[2]", 4, 8) "}";
    uint8_t *b;
    tfp_doc_t *doc = NULL;
    tfp_err_t err;

    for (int i = 0; i < 12; i++)
        data[i] = (uint8_t)i;
    b = mk(json, strlen(json), data, sizeof data, &len);
    ck_assert_int_eq(tfp_st_decode(b, len, NULL, &doc, &err), TFP_OK);
    ck_assert_uint_eq(doc->n, 3);
    ck_assert_str_eq(doc->t[0].name, "c");          /* header order, not offset order */
    ck_assert_str_eq(doc->t[1].name, "a");
    ck_assert_str_eq(doc->t[2].name, "b");
    ck_assert_uint_eq(doc->t[0].offset, 8);
    ck_assert_int_eq(doc->t[0].data[0], 8);
    ck_assert_int_eq(doc->t[1].data[0], 0);
    ck_assert_int_eq(doc->t[2].data[0], 4);
    tfp_doc_free(doc);
    free(b);
}
END_TEST

START_TEST(st_accept_empty)
{
    tfp_doc_t *doc = ACCEPT("{}", 0, NULL);

    ck_assert_uint_eq(doc->n, 0);
    ck_assert_uint_eq(doc->nmeta, 0);
    tfp_doc_free(doc);
    doc = ACCEPT("{ }", 0, NULL);
    tfp_doc_free(doc);
    doc = ACCEPT("{\"__metadata__\":{}}", 0, NULL);
    ck_assert_uint_eq(doc->nmeta, 0);
    tfp_doc_free(doc);
}
END_TEST

START_TEST(st_accept_padding_and_whitespace)
{
    tfp_doc_t *doc = ACCEPT("{" ENTRY("w", "U8", "[2]", 0, 2) "}      ", 2, NULL);

    ck_assert_uint_eq(doc->n, 1);
    tfp_doc_free(doc);
    doc = ACCEPT("{\n  \"w\" : {\"dtype\" : \"U8\",\r\n\t\"shape\":[ 2 ], \"data_offsets\":[0,2]}\n} ",
                 2, NULL);
    ck_assert_uint_eq(doc->t[0].shape[0], 2);
    tfp_doc_free(doc);
}
END_TEST

START_TEST(st_accept_metadata_and_names)
{
    tfp_doc_t *doc = ACCEPT("{\"__metadata__\":{\"format\":\"pt\",\"note\":\"a\\\"b\\n\\u00e9\"},"
                            ENTRY("caf\\u00e9", "U8", "[1]", 0, 1) ","
                            ENTRY("\\ud83d\\ude00", "U8", "[1]", 1, 2) ","
                            ENTRY("x y/z", "U8", "[1]", 2, 3) "}", 3, NULL);

    ck_assert_uint_eq(doc->nmeta, 2);
    ck_assert_str_eq(tfp_doc_meta(doc, "format"), "pt");
    ck_assert_str_eq(tfp_doc_meta(doc, "note"), "a\"b\n\xc3\xa9");
    ck_assert_str_eq(doc->t[0].name, "caf\xc3\xa9");
    ck_assert_str_eq(doc->t[1].name, "\xf0\x9f\x98\x80");
    ck_assert_str_eq(doc->t[2].name, "x y/z");
    tfp_doc_free(doc);
}
END_TEST

START_TEST(st_refuse_non_integer_spellings)
{
    /* As the reference reader: shapes and offsets must be written as integers. "2.0", "1E0",
     * "2e0" and "-0" are refused, and 2^53+1 is not read as 2^53. */
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[2.0,1],\"data_offsets\":[0,2]}}", 2, TFP_EPROTO,
           "tensor 'w': shape[0] is not an integer");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[2,1E0],\"data_offsets\":[0,2]}}", 2, TFP_EPROTO,
           "tensor 'w': shape[1] is not an integer");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2e0]}}", 2, TFP_EPROTO,
           "tensor 'w': data_offsets[1] is not an integer");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[-0],\"data_offsets\":[0,0]}}", 0, TFP_EPROTO,
           "tensor 'w': shape[0] is negative");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[-0,2]}}", 2, TFP_EPROTO,
           "tensor 'w': data_offsets[0] is not an integer");
    REJECT("{" ENTRY("w", "U8", "[0,9007199254740993]", 0, 0) "}", 0, TFP_EPROTO,
           "shape[1] exceeds 2^53");
    REJECT("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[9007199254740993,9007199254740993]}}",
           0, TFP_EPROTO, "data_offsets[0] is not an integer in 0..2^53");
    /* the plain spellings still pass */
    tfp_doc_t *doc = ACCEPT("{\"w\":{\"dtype\":\"U8\",\"shape\":[2,1],\"data_offsets\":[0,2]}}",
                            2, NULL);
    ck_assert_uint_eq(doc->t[0].shape[0], 2);
    ck_assert_uint_eq(doc->t[0].shape[1], 1);
    tfp_doc_free(doc);
}
END_TEST

/* Every dtype through encode and decode (8 elements: whole bytes for the packed types too). */
START_TEST(st_every_dtype)
{
    for (int d = 0; d < TFP_DTYPE_COUNT; d++) {
        uint8_t data[8 * 8], *buf;
        uint64_t sh[1] = { 8 }, nb;
        size_t len;
        tfp_doc_t *doc = tfp_doc_new(), *back = NULL;
        char want[64];
        tfp_err_t err;

        ck_assert_int_eq(tfp_shape_nbytes((tfp_dtype_t)d, 1, sh, &nb, &err), TFP_OK);
        ck_assert_uint_eq(nb, tfp_dtype_bits((tfp_dtype_t)d));      /* 8 x bits / 8 */
        for (size_t i = 0; i < sizeof data; i++)
            data[i] = (uint8_t)(i * 7 + d);
        ck_assert_int_eq(tfp_doc_add(doc, "t", (tfp_dtype_t)d, 1, sh, data, nb, &err), TFP_OK);
        ck_assert_int_eq(tfp_st_encode(doc, &buf, &len, &err), TFP_OK);
        snprintf(want, sizeof want, "\"dtype\":\"%s\"", tfp_dtype_name((tfp_dtype_t)d));
        ck_assert_ptr_nonnull(memmem(buf, len, want, strlen(want)));
        ck_assert_int_eq(tfp_st_decode(buf, len, NULL, &back, &err), TFP_OK);
        ck_assert_int_eq(back->t[0].dtype, d);
        ck_assert_uint_eq(back->t[0].nbytes, nb);
        ck_assert_int_eq(memcmp(back->t[0].data, data, nb), 0);
        tfp_doc_free(back);
        tfp_doc_free(doc);
        free(buf);
    }
}
END_TEST

/* The packed types (as the reference reader sizes them: F4 [2] is 1 byte, F6 [4] 3 bytes),
 * the newer 8-bit floats and C64; elements that do not fill whole bytes are refused. */
START_TEST(st_packed_and_new_dtypes)
{
    tfp_doc_t *doc = ACCEPT("{" ENTRY("a", "F4", "[2]", 0, 1) "," ENTRY("b", "F6_E2M3", "[4]", 1, 4)
                            "," ENTRY("c", "F6_E3M2", "[4]", 4, 7) "," ENTRY("d", "C64", "[2]", 7, 23)
                            "," ENTRY("e", "F8_E8M0", "[4]", 23, 27)
                            "," ENTRY("f", "F8_E4M3FNUZ", "[4]", 27, 31)
                            "," ENTRY("g", "F8_E5M2FNUZ", "[4]", 31, 35) "}", 35, NULL);

    ck_assert_uint_eq(doc->n, 7);
    ck_assert_int_eq(doc->t[0].dtype, TFP_F4);
    ck_assert_uint_eq(doc->t[0].nbytes, 1);
    ck_assert_int_eq(doc->t[3].dtype, TFP_C64);
    ck_assert_uint_eq(doc->t[3].nbytes, 16);
    tfp_doc_free(doc);
    REJECT("{" ENTRY("a", "F4", "[3]", 0, 2) "}", 2, TFP_EPROTO,     /* found by fuzz_safetensors */
           "tensor 'a': F4 x [3]: 3 elements of F4 (4 bits each) do not fill whole bytes");
}
END_TEST

/* ---- safetensors: encoder -------------------------------------------------------------- */

START_TEST(st_encode_layout)
{
    tfp_doc_t *doc = tfp_doc_new();
    uint64_t sh[2] = { 2, 2 };
    float f[4] = { 1, 2, 3, 4 };
    uint8_t u[3] = { 9, 8, 7 }, *buf, *hdr;
    size_t len, hlen;
    uint64_t n = 0;
    tfp_err_t err;
    const char *expect = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                         "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[16,19]}}";

    ck_assert_int_eq(tfp_doc_add(doc, "w", TFP_F32, 2, sh, f, 16, &err), TFP_OK);
    sh[0] = 3;
    ck_assert_int_eq(tfp_doc_add(doc, "b", TFP_U8, 1, sh, u, 3, &err), TFP_OK);
    ck_assert_int_eq(tfp_st_encode_header(doc, &hdr, &hlen, &err), TFP_OK);
    ck_assert_uint_eq(hlen % 8, 0);
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | hdr[i];
    ck_assert_uint_eq(n, hlen - 8);
    ck_assert_int_eq(memcmp(hdr + 8, expect, strlen(expect)), 0);
    for (size_t i = 8 + strlen(expect); i < hlen; i++)
        ck_assert_int_eq(hdr[i], ' ');
    ck_assert_ptr_null(memmem(hdr, hlen, "__metadata__", 12));
    ck_assert_uint_eq(doc->t[1].offset, 16);
    ck_assert_int_eq(tfp_st_encode(doc, &buf, &len, &err), TFP_OK);
    ck_assert_uint_eq(len, hlen + 19);
    ck_assert_int_eq(memcmp(buf, hdr, hlen), 0);
    ck_assert_int_eq(memcmp(buf + hlen, f, 16), 0);
    ck_assert_int_eq(memcmp(buf + hlen + 16, u, 3), 0);
    free(buf);
    free(hdr);

    ck_assert_int_eq(tfp_doc_set_meta(doc, "format", "pt", &err), TFP_OK);
    ck_assert_int_eq(tfp_st_encode_header(doc, &hdr, &hlen, &err), TFP_OK);
    {
        const char *head = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":";

        ck_assert_int_eq(memcmp(hdr + 8, head, strlen(head)), 0);
    }
    free(hdr);

    /* a doc whose fields were changed by hand is refused, not encoded wrong */
    doc->t[0].nbytes = 15;
    ck_assert_int_eq(tfp_st_encode_header(doc, &hdr, &hlen, &err), TFP_EINVAL);
    doc->t[0].nbytes = 16;
    doc->t[0].data = NULL;
    ck_assert_int_eq(tfp_st_encode(doc, &buf, &len, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "no data bound"));
    tfp_doc_free(doc);
}
END_TEST

START_TEST(st_encode_empty)
{
    tfp_doc_t *doc = tfp_doc_new(), *back = NULL;
    uint8_t *buf;
    size_t len;
    tfp_err_t err;

    ck_assert_int_eq(tfp_st_encode(doc, &buf, &len, &err), TFP_OK);
    ck_assert_uint_eq(len, 16);
    ck_assert_int_eq(memcmp(buf + 8, "{}      ", 8), 0);
    ck_assert_int_eq(tfp_st_decode(buf, len, NULL, &back, &err), TFP_OK);
    ck_assert_uint_eq(back->n, 0);
    tfp_doc_free(back);
    tfp_doc_free(doc);
    free(buf);
}
END_TEST

/* ---- safetensors: random round trips -------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * UINT64_C(2685821657736338717);
}

static unsigned rndn(unsigned n)
{
    return (unsigned)(rnd() % n);
}

static void random_name(char *buf, size_t size, int i)
{
    static const char *const alpha[] = { "a", "Z", "9", ".", "_", "-", " ", "\xc3\xa9",
                                         "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\"", "\\",
                                         "\n", "/" };
    size_t k = (size_t)snprintf(buf, size, "%d", i);
    unsigned n = rndn(12);

    for (unsigned j = 0; j < n; j++) {
        const char *a = alpha[rndn(sizeof alpha / sizeof alpha[0])];

        if (k + strlen(a) + 1 >= size)
            break;
        memcpy(buf + k, a, strlen(a) + 1);
        k += strlen(a);
    }
}

static void same_docs(const tfp_doc_t *a, const tfp_doc_t *b)
{
    ck_assert_uint_eq(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        ck_assert_str_eq(a->t[i].name, b->t[i].name);
        ck_assert_int_eq(a->t[i].dtype, b->t[i].dtype);
        ck_assert_int_eq(a->t[i].rank, b->t[i].rank);
        for (int d = 0; d < a->t[i].rank; d++)
            ck_assert_uint_eq(a->t[i].shape[d], b->t[i].shape[d]);
        ck_assert_uint_eq(a->t[i].nbytes, b->t[i].nbytes);
        if (a->t[i].nbytes > 0)
            ck_assert_int_eq(memcmp(a->t[i].data, b->t[i].data, a->t[i].nbytes), 0);
    }
    ck_assert_uint_eq(a->nmeta, b->nmeta);
    ck_assert_int_eq(a->nmeta || a->meta_object, b->nmeta || b->meta_object);  /* one there */
    for (size_t i = 0; i < a->nmeta; i++) {
        ck_assert_str_eq(a->meta[i].key, b->meta[i].key);
        ck_assert_str_eq(a->meta[i].value, b->meta[i].value);
    }
}

/* a and b are the same doc, each tensor at the same offset and data pointer. */
static void same_placement(const tfp_doc_t *a, const tfp_doc_t *b)
{
    same_docs(a, b);
    for (size_t i = 0; i < a->n; i++) {
        ck_assert_uint_eq(a->t[i].offset, b->t[i].offset);
        ck_assert_ptr_eq(a->t[i].data, b->t[i].data);
    }
}

/* What tfp_st_decode gave (st, doc, err) for b, checked against each path alone: the cJSON
 * tree gives the same doc or the same refusal; the direct scan gives the same doc or
 * declines, and declines whatever the decoder refuses. 1 if the scan read it. */
static int paths_agree(const uint8_t *b, size_t len, const tfp_st_limits_t *lim,
                       tfp_status_t st, const tfp_doc_t *doc, const tfp_err_t *err)
{
    tfp_doc_t *tree = NULL, *scan = NULL;
    tfp_err_t terr = { TFP_OK, "" }, serr = { TFP_OK, "" };
    tfp_status_t tst = tfp_st_decode_path(b, len, lim, TFP_ST_PATH_TREE, &tree, &terr);
    tfp_status_t sst = tfp_st_decode_path(b, len, lim, TFP_ST_PATH_SCAN, &scan, &serr);

    ck_assert_int_eq(tst, st);
    if (st != TFP_OK) {
        ck_assert_str_eq(terr.msg, err->msg);
        /* refused before either path runs (the length prefix), or declined by the scan */
        ck_assert_msg(sst == st || sst == TFP_EAGAIN, "scan: %s", tfp_status_name(sst));
        ck_assert_ptr_null(scan);
        return 0;
    }
    same_placement(doc, tree);
    if (sst == TFP_EAGAIN) {
        tfp_doc_free(tree);
        ck_assert_ptr_null(scan);
        ck_assert_int_eq(serr.code, TFP_EAGAIN);
        return 0;
    }
    ck_assert_int_eq(sst, TFP_OK);
    same_placement(tree, scan);         /* the tree's: doc is the scan's own when it reads */
    tfp_doc_free(tree);
    tfp_doc_free(scan);
    return 1;
}

/* An empty "__metadata__" object is kept by both decoder paths and written back by the
 * encoder (echo returns what it got); a document without one gets none. */
START_TEST(st_empty_metadata_round_trips)
{
    static const char with[] = "{\"__metadata__\":{},\"x\":{\"dtype\":\"U8\",\"shape\":[1],"
                               "\"data_offsets\":[0,1]}}";
    static const char without[] = "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],"
                                  "\"data_offsets\":[0,1]}}";
    const char *jsons[2] = {with, without};
    uint8_t v = 9;
    for (int k = 0; k < 2; k++) {
        size_t len;
        uint8_t *b = mk(jsons[k], strlen(jsons[k]), &v, 1, &len);
        for (int path = 0; path < 2; path++) {
            tfp_doc_t *doc = NULL;
            tfp_err_t err;
            ck_assert_int_eq(tfp_st_decode_path(b, len, NULL, path ? TFP_ST_PATH_SCAN
                                                : TFP_ST_PATH_TREE, &doc, &err), TFP_OK);
            ck_assert_int_eq(doc->meta_object, k == 0);
            ck_assert_uint_eq(doc->nmeta, 0);
            uint8_t *out;
            size_t olen;
            ck_assert_int_eq(tfp_st_encode(doc, &out, &olen, &err), TFP_OK);
            ck_assert_int_eq(memmem(out, olen, "\"__metadata__\":{}", 17) != NULL, k == 0);
            free(out);
            tfp_doc_free(doc);
        }
        free(b);
    }
}
END_TEST

/* Writes doc's header by hand with entries in the order perm[], keeping the offsets the
 * encoder assigned, and appends the data section of buf. */
static uint8_t *permuted(const tfp_doc_t *doc, const size_t *perm, const uint8_t *data,
                         size_t dlen, size_t *len)
{
    tfp_jw_t w;
    char *json;
    size_t jlen;
    uint8_t *out;

    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    for (size_t k = 0; k < doc->n; k++) {
        const tfp_tensor_t *t = &doc->t[perm[k]];

        tfp_jw_key(&w, t->name);
        tfp_jw_obj_begin(&w);
        tfp_jw_key(&w, "data_offsets");      /* keys in another order too */
        tfp_jw_arr_begin(&w);
        tfp_jw_uint(&w, t->offset);
        tfp_jw_uint(&w, t->offset + t->nbytes);
        tfp_jw_arr_end(&w);
        tfp_jw_key(&w, "shape");
        tfp_jw_arr_begin(&w);
        for (int d = 0; d < t->rank; d++)
            tfp_jw_uint(&w, t->shape[d]);
        tfp_jw_arr_end(&w);
        tfp_jw_key(&w, "dtype");
        tfp_jw_str(&w, tfp_dtype_name(t->dtype));
        tfp_jw_obj_end(&w);
    }
    tfp_jw_obj_end(&w);
    json = tfp_jw_finish(&w, &jlen);
    ck_assert_ptr_nonnull(json);
    out = mk(json, jlen, data, dlen, len);
    free(json);
    return out;
}

START_TEST(st_random_round_trips)
{
    int scans = 0;

    rng_state = UINT64_C(0x9E3779B97F4A7C15);
    for (int iter = 0; iter < 400; iter++) {
        tfp_doc_t *doc = tfp_doc_new(), *back = NULL, *back2 = NULL;
        unsigned nt = rndn(7), nm = rndn(4);
        uint8_t *store[8] = { 0 }, *buf, *buf2, *pbuf;
        size_t len, len2, plen, perm[8];
        tfp_err_t err;

        for (unsigned i = 0; i < nt; i++) {
            tfp_dtype_t dt = (tfp_dtype_t)rndn(TFP_DTYPE_COUNT);
            int rank = (int)rndn(5);
            uint64_t sh[TFP_MAX_RANK], nbytes;
            char name[64];

            for (int d = 0; d < rank; d++)
                sh[d] = rndn(7) == 0 ? 0 : 1 + rndn(4);
            if (tfp_dtype_bits(dt) % 8 != 0) {      /* packed: whole bytes only */
                rank = rank ? rank : 1;
                sh[0] = 8 * rndn(3);
            }
            ck_assert_int_eq(tfp_shape_nbytes(dt, rank, sh, &nbytes, &err), TFP_OK);
            store[i] = malloc(nbytes + 1);
            for (uint64_t b = 0; b < nbytes; b++)
                store[i][b] = (uint8_t)rnd();
            random_name(name, sizeof name, (int)i);
            ck_assert_int_eq(tfp_doc_add(doc, name, dt, rank, sh, store[i], nbytes, &err),
                             TFP_OK);
        }
        for (unsigned i = 0; i < nm; i++) {
            char k[64], v[64];

            random_name(k, sizeof k, (int)i);
            random_name(v, sizeof v, (int)rndn(1000));
            ck_assert_int_eq(tfp_doc_set_meta(doc, k, v, &err), TFP_OK);
        }
        ck_assert_int_eq(tfp_st_encode(doc, &buf, &len, &err), TFP_OK);
        ck_assert_msg(tfp_st_decode(buf, len, NULL, &back, &err) == TFP_OK, "iter %d: %s",
                      iter, err.msg);
        same_docs(doc, back);
        scans += paths_agree(buf, len, NULL, TFP_OK, back, &err);
        ck_assert_uint_eq((size_t)(back->n ? back->t[0].data - buf : 0) % 8, 0);

        /* re-encoding the decoded doc gives the same bytes */
        ck_assert_int_eq(tfp_st_encode(back, &buf2, &len2, &err), TFP_OK);
        ck_assert_uint_eq(len, len2);
        ck_assert_int_eq(memcmp(buf, buf2, len), 0);

        /* the same tensors listed in a shuffled order decode in that order */
        for (size_t i = 0; i < doc->n; i++)
            perm[i] = i;
        for (size_t i = doc->n; i > 1; i--) {
            size_t j = rndn((unsigned)i), tmp = perm[i - 1];

            perm[i - 1] = perm[j];
            perm[j] = tmp;
        }
        {
            size_t hdr = 8 + (size_t)buf[0] + ((size_t)buf[1] << 8) + ((size_t)buf[2] << 16);

            pbuf = permuted(doc, perm, buf + hdr, len - hdr, &plen);
        }
        ck_assert_msg(tfp_st_decode(pbuf, plen, NULL, &back2, &err) == TFP_OK, "iter %d: %s",
                      iter, err.msg);
        paths_agree(pbuf, plen, NULL, TFP_OK, back2, &err);
        ck_assert_uint_eq(back2->n, doc->n);
        for (size_t i = 0; i < doc->n; i++) {
            const tfp_tensor_t *a = &doc->t[perm[i]], *b = &back2->t[i];

            ck_assert_str_eq(a->name, b->name);
            ck_assert_int_eq(a->dtype, b->dtype);
            ck_assert_uint_eq(a->nbytes, b->nbytes);
            if (a->nbytes > 0)
                ck_assert_int_eq(memcmp(a->data, b->data, a->nbytes), 0);
        }
        tfp_doc_free(back2);
        free(pbuf);
        tfp_doc_free(back);
        free(buf2);
        free(buf);
        tfp_doc_free(doc);
        for (unsigned i = 0; i < nt; i++)
            free(store[i]);
    }
    /* both paths ran: plain names are scanned, those with escapes or UTF-8 go to the tree */
    ck_assert_msg(scans > 10 && scans < 390, "%d of 400 scanned", scans);   /* 29 */
}
END_TEST

/* A hand-written doc whose entries, sorted by offset, are c, a, z, b. */
START_TEST(st_shuffled_offsets)
{
    uint8_t *b;
    tfp_doc_t *doc = ACCEPT("{" ENTRY("b", "I32", "[2]", 12, 20) ","
                            ENTRY("z", "F16", "[0]", 12, 12) ","
                            ENTRY("c", "U8", "[4]", 0, 4) ","
                            ENTRY("a", "F64", "[]", 4, 12) "}", 20, &b);
    const char *order[] = { "b", "z", "c", "a" };
    const uint64_t offs[] = { 12, 12, 0, 4 };

    for (int i = 0; i < 4; i++) {
        ck_assert_str_eq(doc->t[i].name, order[i]);
        ck_assert_uint_eq(doc->t[i].offset, offs[i]);
        ck_assert_ptr_eq(doc->t[i].data, doc->t[2].data + offs[i]);
    }
    tfp_doc_free(doc);
    free(b);
}
END_TEST

/* ---- the direct scan ------------------------------------------------------------------- */

/* What encoders write is read by the scan (and checked against the tree: decode_json). */
START_TEST(st_scan_reads_common_headers)
{
    static const char *const ok[] = {      /* the first three list no tensor; every other
                                            * data section is 8 bytes */
        "{}",
        "{ }",
        "{\"__metadata__\":{}}",
        "{\"__metadata__\":{\"format\":\"pt\",\"step\":\"12\"}," ENTRY("x", "F32", "[2]", 0, 8) "}",
        "{" ENTRY("x", "F32", "[2]", 0, 8) "}      ",
        "{" ENTRY("s", "F64", "[]", 0, 8) "}",
        "{" ENTRY("b", "U8", "[4]", 4, 8) "," ENTRY("a", "I32", "[1]", 0, 4) "}",
        "{" ENTRY("z", "U8", "[0,3]", 0, 0) "," ENTRY("a", "F64", "[1,1,1,1,1,1,1,1]", 0, 8) "}",
        "{\"w\":{\"data_offsets\":[0,8],\"shape\":[2],\"dtype\":\"F32\"}}",
        /* Python's json.dumps, and other spacing */
        "{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
        "{\n  \"x\" : {\"dtype\" : \"F32\",\r\n\t\"shape\":[ 2 ], \"data_offsets\":[0,8]}\n} ",
        "{\"a name/with.dots-and spaces_9\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        "{" ENTRY("x", "U8", "[8]", 0, 8) ",\"__metadata__\":{\"k\":\"\"}}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        tfp_doc_t *doc = ACCEPT(ok[i], i < 3 ? 0 : 8, NULL);

        ck_assert_msg(scanned, "not scanned: %s", ok[i]);
        tfp_doc_free(doc);
    }
    /* our own encoder's output, with metadata */
    {
        tfp_doc_t *doc = tfp_doc_new(), *back = NULL;
        uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8}, *buf;
        uint64_t sh[1] = { 8 };
        size_t len;
        tfp_err_t err;

        ck_assert_int_eq(tfp_doc_add(doc, "x", TFP_U8, 1, sh, data, 8, &err), TFP_OK);
        ck_assert_int_eq(tfp_doc_set_meta(doc, "k", "v", &err), TFP_OK);
        ck_assert_int_eq(tfp_st_encode(doc, &buf, &len, &err), TFP_OK);
        ck_assert_int_eq(tfp_st_decode_path(buf, len, NULL, TFP_ST_PATH_SCAN, &back, &err),
                         TFP_OK);
        same_docs(doc, back);
        tfp_doc_free(back);
        tfp_doc_free(doc);
        free(buf);
    }
}
END_TEST

/* Valid headers the scan leaves to the tree: the decoder still accepts them, the same way. */
START_TEST(st_scan_declines_the_rest)
{
    static const char *const rest[] = {
        "{" ENTRY("caf\\u00e9", "U8", "[8]", 0, 8) "}",                  /* an escape */
        "{" ENTRY("caf\xc3\xa9", "U8", "[8]", 0, 8) "}",                 /* UTF-8 */
        "{" ENTRY("x", "U8", "[8]", 0, 8) ",\"__metadata__\":{\"k\":\"a\\nb\"}}",
        "{" ENTRY("x", "U8", "[8]", 0, 8) ",\"__metadata__\":{\"k\":\"\xe2\x82\xac\"}}",
    };
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++) {
        tfp_doc_t *doc = ACCEPT(rest[i], 8, NULL);

        ck_assert_msg(!scanned, "scanned: %s", rest[i]);
        tfp_doc_free(doc);
    }
    /* 17 tensors, and 17 metadata keys: more than the scan keeps on its stack */
    char json[4096];
    size_t k = (size_t)snprintf(json, sizeof json, "{");
    for (int i = 0; i < 17; i++)
        k += (size_t)snprintf(json + k, sizeof json - k, "%s\"t%d\":{\"dtype\":\"U8\","
                              "\"shape\":[1],\"data_offsets\":[%d,%d]}", i ? "," : "", i, i,
                              i + 1);
    snprintf(json + k, sizeof json - k, "}");
    tfp_doc_t *doc = ACCEPT(json, 17, NULL);
    ck_assert(!scanned);
    ck_assert_uint_eq(doc->n, 17);
    tfp_doc_free(doc);
    k = (size_t)snprintf(json, sizeof json, "{");
    for (int i = 0; i < 16; i++)
        k += (size_t)snprintf(json + k, sizeof json - k, "%s\"t%d\":{\"dtype\":\"U8\","
                              "\"shape\":[1],\"data_offsets\":[%d,%d]}", i ? "," : "", i, i,
                              i + 1);
    snprintf(json + k, sizeof json - k, "}");
    doc = ACCEPT(json, 16, NULL);     /* 16: scanned */
    ck_assert(scanned);
    tfp_doc_free(doc);
    k = (size_t)snprintf(json, sizeof json, "{\"__metadata__\":{");
    for (int i = 0; i < 17; i++)
        k += (size_t)snprintf(json + k, sizeof json - k, "%s\"k%d\":\"v\"", i ? "," : "", i);
    snprintf(json + k, sizeof json - k, "}}");
    doc = ACCEPT(json, 0, NULL);
    ck_assert(!scanned);
    ck_assert_uint_eq(doc->nmeta, 17);
    tfp_doc_free(doc);
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

Suite *suite_safetensors(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc;

    tc = tcase_create("st_reject");
    tcase_add_test(tc, st_scan_reads_common_headers);
    tcase_add_test(tc, st_empty_metadata_round_trips);
    tcase_add_test(tc, st_scan_declines_the_rest);
    tcase_add_test(tc, st_reject_short);
    tcase_add_test(tc, st_reject_header_over_limit);
    tcase_add_test(tc, st_reject_header_past_end);
    tcase_add_test(tc, st_reject_not_object);
    tcase_add_test(tc, st_reject_invalid_json);
    tcase_add_test(tc, st_reject_not_utf8);
    tcase_add_test(tc, st_reject_trailing_bytes);
    tcase_add_test(tc, st_reject_duplicate_keys);
    tcase_add_test(tc, st_reject_duplicate_meta_keys);
    tcase_add_test(tc, st_reject_duplicate_entry_keys);
    tcase_add_test(tc, st_reject_unknown_entry_key);
    tcase_add_test(tc, st_reject_missing_fields);
    tcase_add_test(tc, st_reject_entry_not_object);
    tcase_add_test(tc, st_reject_dtype);
    tcase_add_test(tc, st_reject_shape_not_array);
    tcase_add_test(tc, st_reject_shape_rank);
    tcase_add_test(tc, st_reject_shape_dims);
    tcase_add_test(tc, st_reject_count_overflow);
    tcase_add_test(tc, st_reject_bytes_overflow);
    tcase_add_test(tc, st_reject_offsets_shape);
    tcase_add_test(tc, st_reject_offsets_reversed);
    tcase_add_test(tc, st_reject_offsets_size_mismatch);
    tcase_add_test(tc, st_reject_overlap);
    tcase_add_test(tc, st_reject_hole);
    tcase_add_test(tc, st_reject_past_end);
    tcase_add_test(tc, st_reject_uncovered);
    tcase_add_test(tc, st_reject_metadata);
    tcase_add_test(tc, st_reject_too_many_tensors);
    tcase_add_test(tc, st_reject_bad_names);
    suite_add_tcase(s, tc);

    tc = tcase_create("st_accept");
    tcase_add_test(tc, st_accept_scalar);
    tcase_add_test(tc, st_accept_zero_size);
    tcase_add_test(tc, st_accept_out_of_order);
    tcase_add_test(tc, st_accept_empty);
    tcase_add_test(tc, st_accept_padding_and_whitespace);
    tcase_add_test(tc, st_accept_metadata_and_names);
    tcase_add_test(tc, st_refuse_non_integer_spellings);
    tcase_add_test(tc, st_every_dtype);
    tcase_add_test(tc, st_packed_and_new_dtypes);
    tcase_add_test(tc, st_encode_layout);
    tcase_add_test(tc, st_encode_empty);
    tcase_add_test(tc, st_random_round_trips);
    tcase_add_test(tc, st_shuffled_offsets);
    suite_add_tcase(s, tc);

    return s;
}
