/* check_proto.c - the proto suite: every codec and parser in proto/, driven with good and
 * hostile input.
 *
 * Each safetensors rejection class has its own case asserting the status and a distinctive
 * part of the message; valid edge cases and seeded random round trips check what must be
 * accepted. Also raw shapes, the JSON view, the JSON writer, the client-side JSON readers,
 * ids, and that the public status and dtype maps in client/tfetch.h agree with proto's.
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "client/tfetch.h"
#include "proto/doc.h"
#include "proto/dtype.h"
#include "proto/ids.h"
#include "proto/jsonread.h"
#include "proto/jsonview.h"
#include "proto/jsonw.h"
#include "proto/raw.h"
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

static tfp_status_t decode_json(const char *json, size_t jlen, size_t dlen,
                                const tfp_st_limits_t *lim, tfp_doc_t **doc, tfp_err_t *err,
                                uint8_t **keep)
{
    size_t len;
    uint8_t *b = mk(json, jlen, NULL, dlen, &len);
    tfp_status_t st = tfp_st_decode(b, len, lim, doc, err);

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

/* ---- status and dtype maps ----------------------------------------------------------- */

START_TEST(status_names)
{
    tfp_status_t st;

    ck_assert_str_eq(tfp_status_name(TFP_OK), "TF_OK");
    ck_assert_str_eq(tfp_status_name(TFP_EPROTO), "TF_EPROTO");
    ck_assert_str_eq(tfp_status_name(TFP_ELENGTH), "TF_ELENGTH");
    ck_assert_str_eq(tfp_status_name((tfp_status_t)-99), "TF_EUNKNOWN");
    ck_assert_str_eq(tfp_status_text(TFP_ENOTFOUND), "no such tensor");
    ck_assert_str_eq(tfp_status_text((tfp_status_t)7), "unknown status");
    ck_assert_int_eq(tfp_status_http(TFP_ENOTFOUND), 404);
    ck_assert_int_eq(tfp_status_http(TFP_ETOOBIG), 413);
    ck_assert_int_eq(tfp_status_http(TFP_OK), 200);
    ck_assert_int_eq(tfp_status_http((tfp_status_t)-99), 500);
    ck_assert_int_eq(tfp_status_from_name("TF_EBUSY", &st), 0);
    ck_assert_int_eq(st, TFP_EBUSY);
    ck_assert_int_eq(tfp_status_from_name("TF_NOPE", &st), -1);
    ck_assert_int_eq(tfp_status_from_name("EBUSY", &st), -1);
    ck_assert_int_eq(tfp_status_from_name(NULL, &st), -1);
#define X(n, v, h, s)                                                       \
    ck_assert_int_eq(tfp_status_from_name(tfp_status_name(TFP_##n), &st), 0); \
    ck_assert_int_eq(st, TFP_##n);
    TFP_STATUS_MAP(X)
#undef X
}
END_TEST

START_TEST(status_err_set)
{
    tfp_err_t err;
    char longname[600];

    ck_assert_int_eq(tfp_err_set(NULL, TFP_EPROTO, "x %d", 1), TFP_EPROTO);
    ck_assert_int_eq(tfp_err_set(&err, TFP_ERANGE, "dim %d of '%s'", 3, "w"), TFP_ERANGE);
    ck_assert_int_eq(err.code, TFP_ERANGE);
    ck_assert_str_eq(err.msg, "dim 3 of 'w'");
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    tfp_err_set(&err, TFP_EPROTO, "%s", longname);
    ck_assert_uint_eq(strlen(err.msg), sizeof err.msg - 1);
}
END_TEST

/* Public statuses and dtypes must equal proto's in value and text. */
START_TEST(status_map_matches_public)
{
    int n = 0;

#define X(name, v, h, s)                                                                 \
    ck_assert_int_eq((int)TFP_##name, (int)TF_##name);                                   \
    ck_assert_str_eq(tfp_status_text(TFP_##name), tf_strerror(TF_##name));               \
    ck_assert_str_eq(tfp_status_name(TFP_##name), tf_err_name(TF_##name));               \
    n++;
    TFP_STATUS_MAP(X)
#undef X
    ck_assert_int_eq(n, 17);
    n = 0;
#define X(name, v) ck_assert_int_eq((int)TFP_##name, (int)TF_##name); n++;
    TF_DTYPE_MAP(X)
#undef X
    ck_assert_int_eq(n, TFP_DTYPE_COUNT);
#define X(name, v, sz, s)                                                                \
    ck_assert_int_eq((int)TFP_##name, (int)TF_##name);                                   \
    ck_assert_uint_eq(tfp_dtype_size(TFP_##name), tf_dtype_size(TF_##name));             \
    ck_assert_str_eq(tfp_dtype_name(TFP_##name), tf_dtype_name(TF_##name));
    TFP_DTYPE_MAP(X)
#undef X
}
END_TEST

START_TEST(dtype_table)
{
    tfp_dtype_t dt;

#define X(n, v, sz, s)                                                    \
    ck_assert_str_eq(tfp_dtype_name(TFP_##n), s);                         \
    ck_assert_uint_eq(tfp_dtype_size(TFP_##n), sz);                       \
    ck_assert_int_eq(tfp_dtype_from_name(s, strlen(s), &dt), 0);          \
    ck_assert_int_eq(dt, TFP_##n);
    TFP_DTYPE_MAP(X)
#undef X
    ck_assert_ptr_null(tfp_dtype_name(TFP_DTYPE_COUNT));
    ck_assert_ptr_null(tfp_dtype_name((tfp_dtype_t)-1));
    ck_assert_uint_eq(tfp_dtype_size(TFP_DTYPE_COUNT), 0);
    ck_assert_int_eq(tfp_dtype_from_name("f32", 3, &dt), -1);
    ck_assert_int_eq(tfp_dtype_from_name("F3", 2, &dt), -1);
    ck_assert_int_eq(tfp_dtype_from_name("F32x", 4, &dt), -1);
    ck_assert_int_eq(tfp_dtype_from_name("F32x", 3, &dt), 0);   /* exactly len bytes */
    ck_assert_int_eq(dt, TFP_F32);
    ck_assert_int_eq(tfp_dtype_from_name(NULL, 0, &dt), -1);
}
END_TEST

/* ---- doc model ----------------------------------------------------------------------- */

START_TEST(doc_add_and_find)
{
    tfp_doc_t *doc = tfp_doc_new();
    uint64_t sh[2] = { 2, 3 }, big[2] = { UINT64_C(1) << 54, 0 };
    float d[6] = { 0 };
    char longname[TFP_MAX_NAME + 2];
    tfp_err_t err;

    ck_assert_ptr_nonnull(doc);
    ck_assert_int_eq(tfp_doc_add(doc, "w", TFP_F32, 2, sh, d, 24, &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_add(doc, "w", TFP_F32, 2, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "already"));
    ck_assert_int_eq(tfp_doc_add(doc, "", TFP_F32, 2, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "empty"));
    ck_assert_int_eq(tfp_doc_add(doc, "__metadata__", TFP_F32, 2, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_add(doc, "\xff", TFP_F32, 2, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "UTF-8"));
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ck_assert_int_eq(tfp_doc_add(doc, longname, TFP_U8, 0, NULL, d, 1, &err), TFP_EINVAL);
    longname[TFP_MAX_NAME] = '\0';
    ck_assert_int_eq(tfp_doc_add(doc, longname, TFP_U8, 0, NULL, d, 1, &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_add(doc, "x", TFP_F32, 2, sh, d, 23, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_add(doc, "x", TFP_F32, 9, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_add(doc, "x", TFP_F32, -1, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_add(doc, "x", TFP_DTYPE_COUNT, 2, sh, d, 24, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_add(doc, "x", TFP_F32, 2, big, d, 0, &err), TFP_ERANGE);
    ck_assert_int_eq(tfp_doc_add(doc, "z", TFP_F32, 2, NULL, d, 0, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_add(NULL, "z", TFP_F32, 0, NULL, d, 4, &err), TFP_EINVAL);
    ck_assert_uint_eq(doc->n, 2);
    ck_assert_ptr_eq(tfp_doc_find(doc, "w"), &doc->t[0]);
    ck_assert_ptr_eq(tfp_doc_find(doc, "w")->data, d);
    ck_assert_ptr_null(tfp_doc_find(doc, "nope"));
    ck_assert_uint_eq(tfp_doc_data_bytes(doc), 25);
    ck_assert_uint_eq(tfp_doc_data_bytes(NULL), 0);
    tfp_doc_free(doc);
    tfp_doc_free(NULL);
}
END_TEST

START_TEST(doc_meta)
{
    tfp_doc_t *doc = tfp_doc_new();
    tfp_err_t err;

    ck_assert_int_eq(tfp_doc_set_meta(doc, "k", "v1", &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_set_meta(doc, "k", "v2", &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_set_meta(doc, "", "empty key", &err), TFP_OK);
    ck_assert_uint_eq(doc->nmeta, 2);
    ck_assert_str_eq(tfp_doc_meta(doc, "k"), "v2");
    ck_assert_str_eq(tfp_doc_meta(doc, ""), "empty key");
    ck_assert_ptr_null(tfp_doc_meta(doc, "x"));
    ck_assert_int_eq(tfp_doc_set_meta(doc, "k", "\xc3", &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_set_meta(doc, "\xc3", "v", &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_doc_set_meta(doc, NULL, "v", &err), TFP_EINVAL);
    ck_assert_str_eq(tfp_doc_meta(doc, "k"), "v2");
    tfp_doc_free(doc);
}
END_TEST

START_TEST(shape_arithmetic)
{
    uint64_t c, b;
    uint64_t s1[3] = { 2, 3, 4 }, s0[3] = { UINT64_C(1) << 40, UINT64_C(1) << 40, 0 };
    uint64_t so[2] = { UINT64_C(1) << 32, UINT64_C(1) << 32 };
    uint64_t sb[2] = { UINT64_C(1) << 31, UINT64_C(1) << 31 };
    tfp_err_t err;

    ck_assert_int_eq(tfp_shape_count(3, s1, &c, &err), TFP_OK);
    ck_assert_uint_eq(c, 24);
    ck_assert_int_eq(tfp_shape_count(0, NULL, &c, &err), TFP_OK);
    ck_assert_uint_eq(c, 1);
    ck_assert_int_eq(tfp_shape_count(3, s0, &c, &err), TFP_OK);
    ck_assert_uint_eq(c, 0);
    ck_assert_int_eq(tfp_shape_count(2, so, &c, &err), TFP_ERANGE);
    ck_assert_int_eq(tfp_shape_count(9, s1, &c, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_shape_nbytes(TFP_F64, 3, s1, &b, &err), TFP_OK);
    ck_assert_uint_eq(b, 192);
    ck_assert_int_eq(tfp_shape_nbytes(TFP_F64, 2, sb, &b, &err), TFP_ERANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "byte size"));
    ck_assert_int_eq(tfp_shape_nbytes(TFP_U8, 2, sb, &b, &err), TFP_OK);
    ck_assert_int_eq(tfp_shape_nbytes(TFP_DTYPE_COUNT, 2, sb, &b, &err), TFP_EINVAL);
}
END_TEST

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

START_TEST(st_accept_integral_numbers)
{
    /* RFC 8259 spellings of integers are integers */
    tfp_doc_t *doc = ACCEPT("{\"w\":{\"dtype\":\"U8\",\"shape\":[2.0,1E0],\"data_offsets\":[0,2e0]}}",
                            2, NULL);

    ck_assert_uint_eq(doc->t[0].shape[0], 2);
    ck_assert_uint_eq(doc->t[0].shape[1], 1);
    tfp_doc_free(doc);
}
END_TEST

/* Every dtype through encode and decode. */
START_TEST(st_every_dtype)
{
    for (int d = 0; d < TFP_DTYPE_COUNT; d++) {
        uint8_t data[3 * 8], *buf;
        uint64_t sh[1] = { 3 };
        size_t len, esz = tfp_dtype_size((tfp_dtype_t)d);
        tfp_doc_t *doc = tfp_doc_new(), *back = NULL;
        char want[64];
        tfp_err_t err;

        for (size_t i = 0; i < sizeof data; i++)
            data[i] = (uint8_t)(i * 7 + d);
        ck_assert_int_eq(tfp_doc_add(doc, "t", (tfp_dtype_t)d, 1, sh, data, 3 * esz, &err),
                         TFP_OK);
        ck_assert_int_eq(tfp_st_encode(doc, &buf, &len, &err), TFP_OK);
        snprintf(want, sizeof want, "\"dtype\":\"%s\"", tfp_dtype_name((tfp_dtype_t)d));
        ck_assert_ptr_nonnull(memmem(buf, len, want, strlen(want)));
        ck_assert_int_eq(tfp_st_decode(buf, len, NULL, &back, &err), TFP_OK);
        ck_assert_int_eq(back->t[0].dtype, d);
        ck_assert_uint_eq(back->t[0].nbytes, 3 * esz);
        ck_assert_int_eq(memcmp(back->t[0].data, data, 3 * esz), 0);
        tfp_doc_free(back);
        tfp_doc_free(doc);
        free(buf);
    }
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
    for (size_t i = 0; i < a->nmeta; i++) {
        ck_assert_str_eq(a->meta[i].key, b->meta[i].key);
        ck_assert_str_eq(a->meta[i].value, b->meta[i].value);
    }
}

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

/* ---- raw bodies ----------------------------------------------------------------------- */

static void shape_ok(const char *s, int rank, const uint64_t *want)
{
    uint64_t sh[TFP_MAX_RANK];
    int r = -1;
    tfp_err_t err;

    ck_assert_msg(tfp_raw_parse_shape(s, &r, sh, &err) == TFP_OK, "'%s': %s", s, err.msg);
    ck_assert_msg(r == rank, "'%s': rank %d", s, r);
    for (int i = 0; i < rank; i++)
        ck_assert_uint_eq(sh[i], want[i]);
}

static void shape_bad(const char *s, const char *substr)
{
    uint64_t sh[TFP_MAX_RANK];
    int r = -7;
    tfp_err_t err;

    ck_assert_msg(tfp_raw_parse_shape(s, &r, sh, &err) == TFP_EBADREQ, "'%s' accepted", s);
    ck_assert_msg(strstr(err.msg, substr) != NULL, "'%s': '%s' lacks '%s'", s, err.msg, substr);
    ck_assert_int_eq(r, -7);
}

START_TEST(raw_shapes_good)
{
    const uint64_t d234[] = { 2, 3, 4 }, d23[] = { 2, 3 }, d0[] = { 0 },
                   big[] = { UINT64_C(1) << 53 }, d8[] = { 1, 2, 3, 4, 5, 6, 7, 8 };

    shape_ok("", 0, NULL);
    shape_ok("[]", 0, NULL);
    shape_ok(" [ ] ", 0, NULL);
    shape_ok("  ", 0, NULL);
    shape_ok("2,3,4", 3, d234);
    shape_ok("[2,3]", 2, d23);
    shape_ok(" 2 , 3 ", 2, d23);
    shape_ok("[ 2,\t3 ]", 2, d23);
    shape_ok("0", 1, d0);
    shape_ok("9007199254740992", 1, big);
    shape_ok("1,2,3,4,5,6,7,8", 8, d8);
}
END_TEST

START_TEST(raw_shapes_bad)
{
    shape_bad("2,,3", "dim 1 is empty");
    shape_bad("2,", "dim 1 is empty");
    shape_bad(",", "dim 0 is empty");
    shape_bad("-1", "unexpected '-'");
    shape_bad("+1", "unexpected '+'");
    shape_bad("1.5", "unexpected '.'");
    shape_bad("abc", "unexpected 'a'");
    shape_bad("2 3", "unexpected '3'");
    shape_bad("[2,3", "without a closing ']'");
    shape_bad("[", "without a closing ']'");
    shape_bad("2,3]", "unexpected ']'");
    shape_bad("[[2]]", "unexpected '['");
    shape_bad("1,2,3,4,5,6,7,8,9", "more than 8 dims");
    shape_bad("9007199254740993", "dim 0 exceeds 2^53");
    shape_bad("99999999999999999999999", "exceeds 2^53");
    shape_bad(NULL, "missing Tfetch-Shape");
}
END_TEST

START_TEST(raw_format_and_check)
{
    uint64_t sh[TFP_MAX_RANK] = { 2, 3, 4 };
    char buf[32];
    tfp_dtype_t dt;
    int rank;
    tfp_err_t err;

    ck_assert_int_eq(tfp_raw_format_shape(3, sh, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "2,3,4");
    ck_assert_int_eq(tfp_raw_format_shape(0, sh, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(tfp_raw_format_shape(3, sh, buf, 5), -1);
    ck_assert_int_eq(tfp_raw_format_shape(3, sh, buf, 6), 0);
    ck_assert_int_eq(tfp_raw_format_shape(9, sh, buf, sizeof buf), -1);

    ck_assert_int_eq(tfp_raw_check("F32", "2,2", 16, &dt, &rank, sh, &err), TFP_OK);
    ck_assert_int_eq(dt, TFP_F32);
    ck_assert_int_eq(rank, 2);
    ck_assert_int_eq(tfp_raw_check("BF16", "", 2, &dt, &rank, sh, &err), TFP_OK);
    ck_assert_int_eq(rank, 0);
    ck_assert_int_eq(tfp_raw_check("F32", "2,2", 12, &dt, &rank, sh, &err), TFP_EUNPROC);
    ck_assert_str_eq(err.msg, "body is 12 bytes but F32 x [2,2] needs 16");
    ck_assert_int_eq(tfp_raw_check("F33", "2", 8, &dt, &rank, sh, &err), TFP_EBADREQ);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown dtype 'F33'"));
    ck_assert_int_eq(tfp_raw_check(NULL, "2", 8, &dt, &rank, sh, &err), TFP_EBADREQ);
    ck_assert_ptr_nonnull(strstr(err.msg, "missing Tfetch-Dtype"));
    ck_assert_int_eq(tfp_raw_check("F32", "x", 8, &dt, &rank, sh, &err), TFP_EBADREQ);
    ck_assert_int_eq(tfp_raw_check("F64", "2147483648,2147483648", 0, &dt, &rank, sh, &err),
                     TFP_ERANGE);
}
END_TEST

/* ---- JSON view ------------------------------------------------------------------------ */

static char *view(tfp_doc_t *doc, uint64_t max)
{
    char *out = NULL;
    size_t len = 0;
    tfp_err_t err;

    ck_assert_msg(tfp_jsonview_render(doc, max, &out, &len, &err) == TFP_OK, "%s", err.msg);
    ck_assert_uint_eq(len, strlen(out));
    return out;
}

START_TEST(jsonview_examples)
{
    tfp_doc_t *doc = tfp_doc_new();
    uint64_t sh[2] = { 2, 2 }, z1[2] = { 2, 0 }, z2[2] = { 0, 2 };
    float f[4] = { 1, 2, 3, 4 };
    double d = 0.1;
    tfp_err_t err;
    char *out;

    tfp_doc_add(doc, "w", TFP_F32, 2, sh, f, 16, &err);
    out = view(doc, 100);
    ck_assert_str_eq(out, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data\":[[1,2],[3,4]]}}");
    free(out);
    tfp_doc_add(doc, "s", TFP_F64, 0, NULL, &d, 8, &err);
    tfp_doc_add(doc, "e1", TFP_I8, 2, z1, NULL, 0, &err);
    tfp_doc_add(doc, "e2", TFP_I8, 2, z2, NULL, 0, &err);
    tfp_doc_set_meta(doc, "k", "v\"", &err);
    out = view(doc, 100);
    ck_assert_str_eq(out, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data\":[[1,2],[3,4]]},"
                          "\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data\":0.10000000000000001},"
                          "\"e1\":{\"dtype\":\"I8\",\"shape\":[2,0],\"data\":[[],[]]},"
                          "\"e2\":{\"dtype\":\"I8\",\"shape\":[0,2],\"data\":[]},"
                          "\"__metadata__\":{\"k\":\"v\\\"\"}}");
    free(out);
    tfp_doc_free(doc);
}
END_TEST

START_TEST(jsonview_types)
{
    tfp_doc_t *doc = tfp_doc_new();
    uint64_t s3[1] = { 3 }, s4[1] = { 4 }, s2[1] = { 2 };
    float f[3] = { 0.1f, NAN, -INFINITY };
    uint16_t h[3] = { 0x3C00, 0x7C00, 0xFE00 }, bf[2] = { 0x3F80, 0x4049 };
    uint8_t e4[4] = { 0x38, 0x7E, 0x7F, 0x01 }, e5[4] = { 0x3C, 0x7C, 0xFC, 0x7D };
    uint8_t bl[2] = { 0, 1 };
    int8_t i8[2] = { -128, 127 };
    int16_t i16[2] = { -32768, 7 };
    int32_t i32[2] = { INT32_MIN, 1 };
    int64_t i64[2] = { INT64_MIN, INT64_MAX };
    uint16_t u16[2] = { 65535, 0 };
    uint32_t u32[2] = { UINT32_MAX, 0 };
    uint64_t u64[2] = { UINT64_MAX, 0 };
    uint8_t u8[2] = { 255, 0 };
    tfp_err_t err;
    char *out;

    tfp_doc_add(doc, "f32", TFP_F32, 1, s3, f, 12, &err);
    tfp_doc_add(doc, "f16", TFP_F16, 1, s3, h, 6, &err);
    tfp_doc_add(doc, "bf16", TFP_BF16, 1, s2, bf, 4, &err);
    tfp_doc_add(doc, "e4", TFP_F8_E4M3, 1, s4, e4, 4, &err);
    tfp_doc_add(doc, "e5", TFP_F8_E5M2, 1, s4, e5, 4, &err);
    tfp_doc_add(doc, "b", TFP_BOOL, 1, s2, bl, 2, &err);
    tfp_doc_add(doc, "i8", TFP_I8, 1, s2, i8, 2, &err);
    tfp_doc_add(doc, "i16", TFP_I16, 1, s2, i16, 4, &err);
    tfp_doc_add(doc, "i32", TFP_I32, 1, s2, i32, 8, &err);
    tfp_doc_add(doc, "i64", TFP_I64, 1, s2, i64, 16, &err);
    tfp_doc_add(doc, "u8", TFP_U8, 1, s2, u8, 2, &err);
    tfp_doc_add(doc, "u16", TFP_U16, 1, s2, u16, 4, &err);
    tfp_doc_add(doc, "u32", TFP_U32, 1, s2, u32, 8, &err);
    tfp_doc_add(doc, "u64", TFP_U64, 1, s2, u64, 16, &err);
    ck_assert_uint_eq(doc->n, 14);
    out = view(doc, 1000);
    ck_assert_str_eq(out,
        "{\"f32\":{\"dtype\":\"F32\",\"shape\":[3],\"data\":[0.100000001,\"NaN\",\"-Infinity\"]},"
        "\"f16\":{\"dtype\":\"F16\",\"shape\":[3],\"data\":[1,\"Infinity\",\"NaN\"]},"
        "\"bf16\":{\"dtype\":\"BF16\",\"shape\":[2],\"data\":[1,3.140625]},"
        "\"e4\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data\":[1,448,\"NaN\",0.001953125]},"
        "\"e5\":{\"dtype\":\"F8_E5M2\",\"shape\":[4],\"data\":[1,\"Infinity\",\"-Infinity\",\"NaN\"]},"
        "\"b\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data\":[false,true]},"
        "\"i8\":{\"dtype\":\"I8\",\"shape\":[2],\"data\":[-128,127]},"
        "\"i16\":{\"dtype\":\"I16\",\"shape\":[2],\"data\":[-32768,7]},"
        "\"i32\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[-2147483648,1]},"
        "\"i64\":{\"dtype\":\"I64\",\"shape\":[2],\"data\":[-9223372036854775808,9223372036854775807]},"
        "\"u8\":{\"dtype\":\"U8\",\"shape\":[2],\"data\":[255,0]},"
        "\"u16\":{\"dtype\":\"U16\",\"shape\":[2],\"data\":[65535,0]},"
        "\"u32\":{\"dtype\":\"U32\",\"shape\":[2],\"data\":[4294967295,0]},"
        "\"u64\":{\"dtype\":\"U64\",\"shape\":[2],\"data\":[18446744073709551615,0]}}");
    free(out);
    tfp_doc_free(doc);
}
END_TEST

START_TEST(jsonview_refuses_big)
{
    tfp_doc_t *doc = tfp_doc_new();
    uint64_t sh[2] = { 2, 2 }, wide[2] = { 1000000, 0 };
    float f[4] = { 0 };
    tfp_err_t err;
    char *out = NULL;
    size_t len;

    tfp_doc_add(doc, "w", TFP_F32, 2, sh, f, 16, &err);
    ck_assert_int_eq(tfp_jsonview_render(doc, 3, &out, &len, &err), TFP_ENOTACCEPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "4 elements are too many for JSON (at most 3)"));
    ck_assert_ptr_null(out);
    ck_assert_int_eq(tfp_jsonview_render(doc, 4, &out, &len, &err), TFP_OK);
    free(out);
    out = NULL;
    /* no elements, but a million empty arrays */
    tfp_doc_add(doc, "e", TFP_F32, 2, wide, NULL, 0, &err);
    ck_assert_int_eq(tfp_jsonview_render(doc, 1000, &out, &len, &err), TFP_ENOTACCEPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "nested arrays"));
    ck_assert_ptr_null(out);
    /* unbound data is refused, not read */
    doc->t[0].data = NULL;
    ck_assert_int_eq(tfp_jsonview_render(doc, UINT64_MAX, &out, &len, &err), TFP_EINVAL);
    tfp_doc_free(doc);
}
END_TEST

START_TEST(float_decoders)
{
    ck_assert(tfp_f16_to_f32(0x3C00) == 1.0f);
    ck_assert(tfp_f16_to_f32(0xC000) == -2.0f);
    ck_assert(tfp_f16_to_f32(0x7BFF) == 65504.0f);
    ck_assert(tfp_f16_to_f32(0x0001) == ldexpf(1, -24));
    ck_assert(tfp_f16_to_f32(0x03FF) == ldexpf(1023, -24));
    ck_assert(tfp_f16_to_f32(0x0400) == ldexpf(1, -14));
    ck_assert(tfp_f16_to_f32(0x3555) == 0.333251953125f);
    ck_assert(tfp_f16_to_f32(0x7C00) == INFINITY);
    ck_assert(tfp_f16_to_f32(0xFC00) == -INFINITY);
    ck_assert(isnan(tfp_f16_to_f32(0x7E00)));
    ck_assert(signbit(tfp_f16_to_f32(0x8000)) && tfp_f16_to_f32(0x8000) == 0);

    ck_assert(tfp_bf16_to_f32(0x3F80) == 1.0f);
    ck_assert(tfp_bf16_to_f32(0xC049) == -3.140625f);
    ck_assert(tfp_bf16_to_f32(0x7F80) == INFINITY);
    ck_assert(isnan(tfp_bf16_to_f32(0x7FC0)));
    ck_assert(tfp_bf16_to_f32(0x0001) == ldexpf(1, -133));

    ck_assert(tfp_f8e4m3_to_f32(0x38) == 1.0f);
    ck_assert(tfp_f8e4m3_to_f32(0x7E) == 448.0f);
    ck_assert(tfp_f8e4m3_to_f32(0xFE) == -448.0f);
    ck_assert(tfp_f8e4m3_to_f32(0x78) == 256.0f);       /* exp 15 is finite in the fn variant */
    ck_assert(isnan(tfp_f8e4m3_to_f32(0x7F)));
    ck_assert(isnan(tfp_f8e4m3_to_f32(0xFF)));
    ck_assert(tfp_f8e4m3_to_f32(0x01) == ldexpf(1, -9));
    ck_assert(tfp_f8e4m3_to_f32(0x08) == ldexpf(1, -6));
    ck_assert(signbit(tfp_f8e4m3_to_f32(0x80)));
    for (int v = 0; v < 256; v++) {
        if ((v & 0x7F) != 0x7F)
            ck_assert(isfinite(tfp_f8e4m3_to_f32((uint8_t)v)));
    }

    ck_assert(tfp_f8e5m2_to_f32(0x3C) == 1.0f);
    ck_assert(tfp_f8e5m2_to_f32(0x7B) == 57344.0f);
    ck_assert(tfp_f8e5m2_to_f32(0x7C) == INFINITY);
    ck_assert(tfp_f8e5m2_to_f32(0xFC) == -INFINITY);
    ck_assert(isnan(tfp_f8e5m2_to_f32(0x7D)));
    ck_assert(isnan(tfp_f8e5m2_to_f32(0xFF)));
    ck_assert(tfp_f8e5m2_to_f32(0x01) == ldexpf(1, -16));
}
END_TEST

/* ---- JSON writer ---------------------------------------------------------------------- */

static char *jw_str(const char *s, size_t n)
{
    tfp_jw_t w;
    char *out;

    tfp_jw_init(&w);
    tfp_jw_strn(&w, s, n);
    out = tfp_jw_finish(&w, NULL);
    ck_assert_ptr_nonnull(out);
    return out;
}

#define JW_EXPECT(in, want)                                 \
    do {                                                    \
        char *o_ = jw_str(in, sizeof(in) - 1);              \
        ck_assert_str_eq(o_, want);                         \
        free(o_);                                           \
    } while (0)

START_TEST(jsonw_escaping)
{
    JW_EXPECT("plain", "\"plain\"");
    JW_EXPECT("a\"b\\c/d", "\"a\\\"b\\\\c/d\"");
    JW_EXPECT("\n\t\r\b\f", "\"\\u000a\\u0009\\u000d\\u0008\\u000c\"");
    JW_EXPECT("\x01\x1f\x7f", "\"\\u0001\\u001f\x7f\"");
    JW_EXPECT("nul\0x", "\"nul\\u0000x\"");
    JW_EXPECT("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
}
END_TEST

START_TEST(jsonw_invalid_utf8)
{
    JW_EXPECT("a\xff" "b", "\"a\xef\xbf\xbd" "b\"");
    JW_EXPECT("\x80", "\"\xef\xbf\xbd\"");
    JW_EXPECT("\xc0\xaf", "\"\xef\xbf\xbd\xef\xbf\xbd\"");            /* overlong '/' */
    JW_EXPECT("\xed\xa0\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");   /* surrogate */
    JW_EXPECT("x\xe2\x82", "\"x\xef\xbf\xbd\xef\xbf\xbd\"");          /* truncated */
    JW_EXPECT("\xf4\x90\x80\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    ck_assert_int_eq(tfp_utf8_valid("caf\xc3\xa9", 5), 1);
    ck_assert_int_eq(tfp_utf8_valid("caf\xc3", 4), 0);
    ck_assert_int_eq(tfp_utf8_valid("\xf4\x8f\xbf\xbf", 4), 1);     /* U+10FFFF */
    ck_assert_int_eq(tfp_utf8_valid("\xe0\x80\x80", 3), 0);         /* overlong */
}
END_TEST

START_TEST(jsonw_structure)
{
    tfp_jw_t w;
    char *out;
    size_t len;

    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "a");
    tfp_jw_arr_begin(&w);
    tfp_jw_int(&w, -1);
    tfp_jw_uint(&w, UINT64_MAX);
    tfp_jw_double(&w, 0.5);
    tfp_jw_double(&w, NAN);
    tfp_jw_double(&w, 1e300);
    tfp_jw_obj_begin(&w);
    tfp_jw_obj_end(&w);
    tfp_jw_arr_begin(&w);
    tfp_jw_arr_end(&w);
    tfp_jw_arr_end(&w);
    tfp_jw_key(&w, "b\n");
    tfp_jw_bool(&w, 1);
    tfp_jw_key(&w, "c");
    tfp_jw_null(&w);
    tfp_jw_key(&w, "d");
    tfp_jw_raw(&w, "{\"x\":1}", 7);
    tfp_jw_key(&w, "e");
    tfp_jw_str(&w, NULL);
    tfp_jw_key(&w, "f");
    tfp_jw_int(&w, INT64_MIN);
    tfp_jw_obj_end(&w);
    out = tfp_jw_finish(&w, &len);
    ck_assert_str_eq(out, "{\"a\":[-1,18446744073709551615,0.5,null,1.0000000000000001e+300,{},[]],"
                          "\"b\\u000a\":true,\"c\":null,\"d\":{\"x\":1},\"e\":null,"
                          "\"f\":-9223372036854775808}");
    ck_assert_uint_eq(len, strlen(out));
    free(out);

    /* empty writer gives "", unbalanced or too deep fails */
    out = tfp_jw_finish(&w, &len);
    ck_assert_str_eq(out, "");
    ck_assert_uint_eq(len, 0);
    free(out);
    tfp_jw_init(&w);
    tfp_jw_obj_end(&w);
    ck_assert_ptr_null(tfp_jw_finish(&w, NULL));
    tfp_jw_init(&w);
    for (int i = 0; i < 100; i++)
        tfp_jw_arr_begin(&w);
    ck_assert_ptr_null(tfp_jw_finish(&w, NULL));
    tfp_jw_init(&w);
    tfp_jw_arr_begin(&w);
    tfp_jw_str(&w, "x");
    tfp_jw_discard(&w);
    ck_assert_ptr_null(w.buf);
}
END_TEST

START_TEST(jsonw_large)
{
    tfp_jw_t w;
    char *out;
    size_t len;

    tfp_jw_init(&w);
    tfp_jw_arr_begin(&w);
    for (int i = 0; i < 100000; i++)
        tfp_jw_int(&w, i);
    tfp_jw_arr_end(&w);
    out = tfp_jw_finish(&w, &len);
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(strncmp(out, "[0,1,2,", 7), 0);
    ck_assert_int_eq(strcmp(out + len - 7, ",99999]"), 0);
    free(out);
}
END_TEST

START_TEST(error_json)
{
    size_t len;
    char *s = tfp_error_json(TFP_ENOTFOUND, "no tensor 'x\"'", &len);

    ck_assert_str_eq(s, "{\"error\":\"no tensor 'x\\\"'\",\"code\":\"TF_ENOTFOUND\"}\n");
    ck_assert_uint_eq(len, strlen(s));
    free(s);
    s = tfp_error_json(TFP_EBUSY, NULL, NULL);
    ck_assert_str_eq(s, "{\"error\":\"server busy\",\"code\":\"TF_EBUSY\"}\n");
    free(s);
    s = tfp_error_json(TFP_EPROTO, "bad \xff byte\n", NULL);
    ck_assert_str_eq(s, "{\"error\":\"bad \xef\xbf\xbd byte\\u000a\",\"code\":\"TF_EPROTO\"}\n");
    free(s);
}
END_TEST

/* ---- JSON readers --------------------------------------------------------------------- */

static void json_ok(const char *s, size_t want_end)
{
    size_t end = 12345;
    tfp_err_t err;

    ck_assert_msg(tfp_json_check(s, strlen(s), &end, &err) == TFP_OK, "'%s': %s", s, err.msg);
    ck_assert_msg(end == want_end, "'%s': end %zu", s, end);
}

static void json_bad(const char *s, const char *substr)
{
    tfp_err_t err;

    ck_assert_msg(tfp_json_check(s, strlen(s), NULL, &err) == TFP_EPROTO, "'%s' accepted", s);
    ck_assert_msg(strstr(err.msg, substr) != NULL, "'%s': '%s' lacks '%s'", s, err.msg, substr);
}

START_TEST(json_check_strict)
{
    char deep[600];

    json_ok("0", 1);
    json_ok(" -0.5e+10 x", 9);
    json_ok("[1,\"a\",true,false,null,{\"k\":[]}] ", 32);
    json_ok("\"\\ud83d\\ude00\\n\\/\"", 18);
    json_ok("\"\xf0\x9f\x98\x80\"", 6);
    json_bad("", "unexpected end");
    json_ok("01", 1);               /* a value, then junk for the caller to refuse */
    json_bad("[01]", "expected ',' or ']'");
    json_bad("1.", "invalid number");
    json_bad("-", "invalid number");
    json_bad(".5", "expected a value");
    json_bad("+1", "expected a value");
    json_bad("1e", "invalid number");
    json_bad("\"\\u0000\"", "\\u0000 is not allowed");
    json_bad("\"\\udc00\"", "unpaired surrogate");
    json_bad("\"\\ud800\\u0041\"", "unpaired surrogate");
    json_bad("\"\\u12\"", "invalid \\u escape");
    json_bad("\"abc", "unterminated string");
    json_bad("\"a\x1f\"", "raw control character");
    json_bad("\"\xc3\x28\"", "not valid UTF-8");
    json_bad("[1,]", "expected a value");
    json_bad("{\"a\":1 \"b\":2}", "expected ',' or '}'");
    json_bad("nul", "expected a value");
    json_bad("1234567890123456789012345678901234567890123456789012345678901234",
             "number longer than 63");
    for (int i = 0; i < TFP_JSON_MAX_DEPTH; i++)
        deep[i] = '[';
    for (int i = 0; i < TFP_JSON_MAX_DEPTH; i++)
        deep[TFP_JSON_MAX_DEPTH + i] = ']';
    deep[2 * TFP_JSON_MAX_DEPTH] = '\0';
    json_ok(deep, 2 * TFP_JSON_MAX_DEPTH);
    memmove(deep + 1, deep, 2 * TFP_JSON_MAX_DEPTH + 1);
    deep[0] = '[';
    json_bad(deep, "nested deeper than 256");
}
END_TEST

START_TEST(find_dup)
{
    const char *k1[] = { "b", "a", "c" }, *k2[] = { "b", "a", "c", "a" };

    ck_assert_ptr_null(tfp_find_dup(k1, 3));
    ck_assert_str_eq(tfp_find_dup(k2, 4), "a");
    ck_assert_ptr_null(tfp_find_dup(k1, 0));
}
END_TEST

static int err_body(const char *s, tfp_status_t *code, char *msg, size_t msg_size)
{
    return tfp_parse_error_body(s, strlen(s), code, msg, msg_size);
}

START_TEST(error_body_parse)
{
    tfp_status_t code = TFP_OK;
    char msg[64], tiny[6];
    size_t len;
    char *s;

    ck_assert_int_eq(err_body("{\"error\":\"no such tensor 'w'\",\"code\":\"TF_ENOTFOUND\"}\n",
                              &code, msg, sizeof msg), 0);
    ck_assert_int_eq(code, TFP_ENOTFOUND);
    ck_assert_str_eq(msg, "no such tensor 'w'");
    ck_assert_int_eq(err_body("{\"code\":\"TF_EFUTURE\",\"error\":\"x\",\"extra\":[1]}", &code,
                              msg, sizeof msg), 0);
    ck_assert_int_eq(code, TFP_EINTERNAL);
    ck_assert_int_eq(err_body("{\"code\":\"TF_OK\",\"error\":\"x\"}", &code, msg, sizeof msg), 0);
    ck_assert_int_eq(code, TFP_EINTERNAL);
    /* truncation keeps characters whole */
    ck_assert_int_eq(err_body("{\"error\":\"abcd\\u00e9f\",\"code\":\"TF_EBUSY\"}", &code, tiny,
                              sizeof tiny), 0);
    ck_assert_str_eq(tiny, "abcd");
    ck_assert_int_eq(err_body("{\"error\":\"ab\",\"code\":\"TF_EBUSY\"}", &code, NULL, 0), 0);
    /* what tfp_error_json writes reads back */
    s = tfp_error_json(TFP_ETOOBIG, "header \"big\"\t", &len);
    ck_assert_int_eq(tfp_parse_error_body(s, len, &code, msg, sizeof msg), 0);
    ck_assert_int_eq(code, TFP_ETOOBIG);
    ck_assert_str_eq(msg, "header \"big\"\t");
    free(s);
}
END_TEST

START_TEST(error_body_malformed)
{
    tfp_status_t code = TFP_EBUSY;
    char msg[16] = "untouched";

    ck_assert_int_eq(err_body("", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("<html>502</html>", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("[\"error\"]", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":\"x\"}", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":1,\"code\":\"TF_EBUSY\"}", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":\"x\",\"code\":5}", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":\"x\",\"code\":\"TF_EBUSY\"} x", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":\"x\",\"code\":\"TF_EBUSY\"", &code, msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":\"x\",\"error\":\"y\",\"code\":\"TF_EBUSY\"}", &code,
                              msg, sizeof msg), -1);
    ck_assert_int_eq(err_body("{\"error\":\"x\\u0000y\",\"code\":\"TF_EBUSY\"}", &code, msg,
                              sizeof msg), -1);
    ck_assert_int_eq(tfp_parse_error_body(NULL, 0, &code, msg, sizeof msg), -1);
    ck_assert_int_eq(code, TFP_EBUSY);
    ck_assert_str_eq(msg, "untouched");
}
END_TEST

static tfp_status_t listing(const char *s, tfp_list_entry_t **e, size_t *n, tfp_err_t *err)
{
    return tfp_parse_listing(s, strlen(s), e, n, err);
}

START_TEST(listing_parse)
{
    tfp_list_entry_t *e = NULL;
    size_t n = 99;
    tfp_err_t err;

    ck_assert_int_eq(listing("{\"tensors\":[{\"name\":\"w\",\"bytes\":123,\"tensors\":"
                             "[{\"name\":\"w\",\"dtype\":\"F32\",\"shape\":[2,2]}]},"
                             "{\"name\":\"m\",\"bytes\":0,\"tensors\":[],\"future\":true},"
                             "{\"name\":\"p\",\"bytes\":9007199254740992,\"tensors\":"
                             "[{\"name\":\"a\",\"dtype\":\"BF16\",\"shape\":[]},"
                             "{\"name\":\"b\",\"dtype\":\"U8\",\"shape\":[0,3]}]}]}\n",
                             &e, &n, &err), TFP_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(e[0].name, "w");
    ck_assert_uint_eq(e[0].bytes, 123);
    ck_assert_uint_eq(e[0].ntensors, 1);
    ck_assert_str_eq(e[1].name, "m");
    ck_assert_uint_eq(e[1].ntensors, 0);
    ck_assert_uint_eq(e[2].bytes, UINT64_C(1) << 53);
    ck_assert_uint_eq(e[2].ntensors, 2);
    tfp_listing_free(e, n);

    ck_assert_int_eq(listing("{\"tensors\":[]}", &e, &n, &err), TFP_OK);
    ck_assert_uint_eq(n, 0);
    tfp_listing_free(e, n);
    tfp_listing_free(NULL, 0);
}
END_TEST

static void listing_bad(int line, const char *s, tfp_status_t want, const char *substr)
{
    tfp_list_entry_t *e = (tfp_list_entry_t *)&line;
    size_t n = 77;
    tfp_err_t err = { TFP_OK, "" };
    tfp_status_t st = listing(s, &e, &n, &err);

    ck_assert_msg(st == want, "line %d: got %s (%s)", line, tfp_status_name(st), err.msg);
    ck_assert_msg(strstr(err.msg, substr) != NULL, "line %d: '%s' lacks '%s'", line, err.msg,
                  substr);
    ck_assert_msg(e == (tfp_list_entry_t *)&line && n == 77, "line %d: output touched", line);
}

#define LISTING_BAD(s, substr) listing_bad(__LINE__, s, TFP_EPROTO, substr)

START_TEST(listing_malformed)
{
    LISTING_BAD("", "invalid JSON");
    LISTING_BAD("{\"tensors\":[}", "invalid JSON");
    LISTING_BAD("[]", "not an object with a \"tensors\" array");
    LISTING_BAD("{\"tensors\":{}}", "\"tensors\" array");
    LISTING_BAD("{}", "\"tensors\" array");
    LISTING_BAD("{\"tensors\":[1]}", "tensors[0] is not an object");
    LISTING_BAD("{\"tensors\":[{\"bytes\":1,\"tensors\":[]}]}", "tensors[0].name is not");
    LISTING_BAD("{\"tensors\":[{\"name\":\"\",\"bytes\":1,\"tensors\":[]}]}", "tensors[0].name");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":-1,\"tensors\":[]}]}",
                "tensors[0].bytes is not a non-negative integer");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1.5,\"tensors\":[]}]}", "bytes");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":\"1\",\"tensors\":[]}]}", "bytes");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1}]}", "tensors[0].tensors is not an array");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[],\"name\":\"b\"}]}",
                "duplicate key");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[]},{\"name\":\"b\","
                "\"bytes\":1,\"tensors\":[{\"name\":\"x\",\"dtype\":\"F99\",\"shape\":[]}]}]}",
                "tensors[1].tensors[0].dtype is not a known dtype");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[{\"dtype\":\"U8\","
                "\"shape\":[]}]}]}", "tensors[0].tensors[0].name is not a string");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[{\"name\":\"x\","
                "\"dtype\":\"U8\",\"shape\":[-1]}]}]}", "tensors[0].tensors[0].shape");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[{\"name\":\"x\","
                "\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1]}]}]}", "up to 8 dims");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[{\"name\":\"x\","
                "\"dtype\":\"U8\",\"shape\":{}}]}]}", "shape is not an array");
    LISTING_BAD("{\"tensors\":[{\"name\":\"a\",\"bytes\":1,\"tensors\":[7]}]}",
                "tensors[0].tensors[0] is not an object");
    LISTING_BAD("{\"tensors\":[]} []", "text after the value");
}
END_TEST

/* ---- ids ------------------------------------------------------------------------------ */

START_TEST(ids_validation)
{
    char s[300];

    ck_assert_int_eq(tfp_name_valid("w"), 1);
    ck_assert_int_eq(tfp_name_valid("layer.0_w-1"), 1);
    ck_assert_int_eq(tfp_name_valid("..."), 1);
    ck_assert_int_eq(tfp_name_valid(".a"), 1);
    ck_assert_int_eq(tfp_name_valid("."), 0);
    ck_assert_int_eq(tfp_name_valid(".."), 0);
    ck_assert_int_eq(tfp_name_valid(""), 0);
    ck_assert_int_eq(tfp_name_valid(NULL), 0);
    ck_assert_int_eq(tfp_name_valid("a/b"), 0);
    ck_assert_int_eq(tfp_name_valid("a b"), 0);
    ck_assert_int_eq(tfp_name_valid("a:b"), 0);
    ck_assert_int_eq(tfp_name_valid("caf\xc3\xa9"), 0);
    ck_assert_int_eq(tfp_name_valid("a%2f"), 0);
    memset(s, 'a', 255);
    s[255] = '\0';
    ck_assert_int_eq(tfp_name_valid(s), 1);
    s[255] = 'a', s[256] = '\0';
    ck_assert_int_eq(tfp_name_valid(s), 0);

    s[128] = '\0';
    ck_assert_int_eq(tfp_user_id_valid(s), 1);
    ck_assert_int_eq(tfp_request_id_valid(s), 1);
    s[128] = 'a', s[129] = '\0';
    ck_assert_int_eq(tfp_user_id_valid(s), 0);
    ck_assert_int_eq(tfp_request_id_valid(s), 0);
    ck_assert_int_eq(tfp_user_id_valid("alice.b_c-1"), 1);
    ck_assert_int_eq(tfp_user_id_valid("."), 1);
    ck_assert_int_eq(tfp_user_id_valid("a:b"), 0);
    ck_assert_int_eq(tfp_user_id_valid(""), 0);
    ck_assert_int_eq(tfp_user_id_valid(NULL), 0);
    ck_assert_int_eq(tfp_request_id_valid("req:42-a.b_c"), 1);
    ck_assert_int_eq(tfp_request_id_valid("a b"), 0);
    ck_assert_int_eq(tfp_request_id_valid(""), 0);
    ck_assert_int_eq(tfp_request_id_valid(NULL), 0);
}
END_TEST

START_TEST(ids_parse_u64)
{
    uint64_t v = 7;

    ck_assert_int_eq(tfp_parse_u64("0", 10, &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(tfp_parse_u64("1500", 60000, &v), 0);
    ck_assert_uint_eq(v, 1500);
    ck_assert_int_eq(tfp_parse_u64("18446744073709551615", UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    v = 7;
    ck_assert_int_eq(tfp_parse_u64("18446744073709551616", UINT64_MAX, &v), -1);
    ck_assert_int_eq(tfp_parse_u64("60001", 60000, &v), -1);
    ck_assert_int_eq(tfp_parse_u64("", 10, &v), -1);
    ck_assert_int_eq(tfp_parse_u64("-1", 10, &v), -1);
    ck_assert_int_eq(tfp_parse_u64("+1", 10, &v), -1);
    ck_assert_int_eq(tfp_parse_u64(" 1", 10, &v), -1);
    ck_assert_int_eq(tfp_parse_u64("1 ", 10, &v), -1);
    ck_assert_int_eq(tfp_parse_u64("0x1", 10, &v), -1);
    ck_assert_int_eq(tfp_parse_u64(NULL, 10, &v), -1);
    ck_assert_uint_eq(v, 7);
}
END_TEST

/* ---- the suite ------------------------------------------------------------------------ */

Suite *suite_proto(void)
{
    Suite *s = suite_create("proto");
    TCase *tc;

    tc = tcase_create("status");
    tcase_add_test(tc, status_names);
    tcase_add_test(tc, status_err_set);
    tcase_add_test(tc, status_map_matches_public);
    tcase_add_test(tc, dtype_table);
    suite_add_tcase(s, tc);

    tc = tcase_create("doc");
    tcase_add_test(tc, doc_add_and_find);
    tcase_add_test(tc, doc_meta);
    tcase_add_test(tc, shape_arithmetic);
    suite_add_tcase(s, tc);

    tc = tcase_create("st_reject");
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
    tcase_add_test(tc, st_accept_integral_numbers);
    tcase_add_test(tc, st_every_dtype);
    tcase_add_test(tc, st_encode_layout);
    tcase_add_test(tc, st_encode_empty);
    tcase_add_test(tc, st_random_round_trips);
    tcase_add_test(tc, st_shuffled_offsets);
    suite_add_tcase(s, tc);

    tc = tcase_create("raw");
    tcase_add_test(tc, raw_shapes_good);
    tcase_add_test(tc, raw_shapes_bad);
    tcase_add_test(tc, raw_format_and_check);
    suite_add_tcase(s, tc);

    tc = tcase_create("jsonview");
    tcase_add_test(tc, jsonview_examples);
    tcase_add_test(tc, jsonview_types);
    tcase_add_test(tc, jsonview_refuses_big);
    tcase_add_test(tc, float_decoders);
    suite_add_tcase(s, tc);

    tc = tcase_create("jsonw");
    tcase_add_test(tc, jsonw_escaping);
    tcase_add_test(tc, jsonw_invalid_utf8);
    tcase_add_test(tc, jsonw_structure);
    tcase_add_test(tc, jsonw_large);
    tcase_add_test(tc, error_json);
    suite_add_tcase(s, tc);

    tc = tcase_create("jsonread");
    tcase_add_test(tc, json_check_strict);
    tcase_add_test(tc, find_dup);
    tcase_add_test(tc, error_body_parse);
    tcase_add_test(tc, error_body_malformed);
    tcase_add_test(tc, listing_parse);
    tcase_add_test(tc, listing_malformed);
    suite_add_tcase(s, tc);

    tc = tcase_create("ids");
    tcase_add_test(tc, ids_validation);
    tcase_add_test(tc, ids_parse_u64);
    suite_add_tcase(s, tc);

    return s;
}
