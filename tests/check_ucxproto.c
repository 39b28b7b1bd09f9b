/* check_ucxproto.c - the ucxproto suite: the UCX active-message header (proto/ucxframe.c),
 * the POST /v1/upgrade JSON and base64 (proto/upgrade.c), and the host identity reader
 * (transports/hostid.c).
 *
 * Every rule of the frame header is a loop case that breaks one field of a valid header and
 * checks that the encoder refuses it (TFP_EINVAL) and that the decoder refuses the same bytes
 * written by a checkless test encoder (TFP_EPROTO), both with the same message; byte-level
 * faults only a decoder can meet have their own cases. Golden bytes and golden JSON pin the
 * wire formats; seeded random round trips and random byte flips check that what is accepted
 * comes back identical. Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "proto/status.h"
#include "proto/ucxframe.h"
#include "proto/upgrade.h"
#include "tests/suites.h"
#include "transports/hostid.h"

#define BOOT "07424f66-80cc-4684-b9fd-2ab7faab3cd6"
#define NETNS "net:[4026531833]"
#define TOKEN "0123456789abcdef0123456789abcdef"

/* ---- helpers ------------------------------------------------------------------------- */

/* xorshift64*: reproducible randomness for the round trips. */
static uint64_t rnd_state;

static uint64_t rnd(void)
{
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return rnd_state * UINT64_C(2685821657736338717);
}

static size_t rnd_below(size_t n)
{
    return (size_t)(rnd() % n);
}

/* A valid header of each op. */
static void base(tfp_uf_hdr_t *h, tfp_uf_op_t op)
{
    tfp_uf_init(h, op, 42);
    switch (op) {
    case TFP_UF_HELLO:
        strcpy(h->name, TOKEN);
        strcpy(h->msg, BOOT " " NETNS);
        break;
    case TFP_UF_HELLO_ACK:
    case TFP_UF_BYE:
        break;
    case TFP_UF_GET:
        strcpy(h->request_id, "req-1");
        strcpy(h->user, "alice");
        strcpy(h->name, "w");
        h->wait_ms = 100;
        break;
    case TFP_UF_PUT:
        strcpy(h->request_id, "req-2");
        strcpy(h->user, "alice");
        strcpy(h->name, "w");
        h->body_len = 1000;
        break;
    case TFP_UF_DELETE:
        strcpy(h->request_id, "req-3");
        strcpy(h->name, "w");
        break;
    case TFP_UF_CALL:
        strcpy(h->request_id, "host:1:7");
        strcpy(h->user, "bob");
        strcpy(h->name, "echo");
        h->body_len = 64;
        break;
    case TFP_UF_REPLY:
        strcpy(h->request_id, "req-1");
        h->flags = TFP_UF_F_REPLY_HAS_BODY;
        h->body_len = 1000;
        break;
    }
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

/* Writes h with no checks at all (string lengths from strlen), as a hostile peer could. */
static size_t raw_encode(const tfp_uf_hdr_t *h, uint8_t *p)
{
    size_t nid = strlen(h->request_id), nuser = strlen(h->user), nname = strlen(h->name),
           nmsg = strlen(h->msg), o = TFP_UF_FIXED;

    memset(p, 0, TFP_UF_FIXED);
    put_le(p, TFP_UF_MAGIC, 4);
    p[4] = TFP_UF_VERSION;
    p[5] = (uint8_t)h->op;
    put_le(p + 6, h->flags, 2);
    put_le(p + 8, h->seq, 8);
    put_le(p + 16, (uint32_t)(int32_t)h->status, 4);
    put_le(p + 20, h->wait_ms, 4);
    put_le(p + 24, h->body_len, 8);
    p[32] = (uint8_t)nid;
    p[33] = (uint8_t)nuser;
    p[34] = (uint8_t)nname;
    put_le(p + 36, nmsg, 2);
    put_le(p + 38, h->http, 2);
    memcpy(p + o, h->request_id, nid);
    o += nid;
    memcpy(p + o, h->user, nuser);
    o += nuser;
    memcpy(p + o, h->name, nname);
    o += nname;
    memcpy(p + o, h->msg, nmsg);
    return o + nmsg;
}

static void same_hdr(const tfp_uf_hdr_t *a, const tfp_uf_hdr_t *b)
{
    ck_assert_int_eq(a->op, b->op);
    ck_assert_uint_eq(a->flags, b->flags);
    ck_assert_uint_eq(a->seq, b->seq);
    ck_assert_int_eq(a->status, b->status);
    ck_assert_uint_eq(a->wait_ms, b->wait_ms);
    ck_assert_uint_eq(a->http, b->http);
    ck_assert_uint_eq(a->body_len, b->body_len);
    ck_assert_str_eq(a->request_id, b->request_id);
    ck_assert_str_eq(a->user, b->user);
    ck_assert_str_eq(a->name, b->name);
    ck_assert_str_eq(a->msg, b->msg);
}

/* Decoding must fail with want and a message containing substr, leaving *out untouched. */
static void decode_rejects_at(int line, const uint8_t *buf, size_t len, tfp_status_t want,
                              const char *substr)
{
    tfp_uf_hdr_t out, canary;
    tfp_err_t err = { TFP_OK, "" };
    tfp_status_t st;

    memset(&out, 0xA5, sizeof out);
    memcpy(&canary, &out, sizeof out);
    st = tfp_uf_decode(buf, len, &out, &err);
    ck_assert_msg(st == want, "line %d: got %s, want %s (%s)", line, tfp_status_name(st),
                  tfp_status_name(want), err.msg);
    ck_assert_int_eq(err.code, want);
    ck_assert_msg(strstr(err.msg, substr) != NULL, "line %d: message '%s' lacks '%s'", line,
                  err.msg, substr);
    ck_assert_msg(memcmp(&out, &canary, sizeof out) == 0, "line %d: output set on failure",
                  line);
}

#define DECODE_REJECTS(buf, len, want, substr) \
    decode_rejects_at(__LINE__, buf, len, want, substr)

static size_t encode_ok(const tfp_uf_hdr_t *h, uint8_t *buf)
{
    tfp_err_t err = { TFP_OK, "" };
    size_t len = 0;
    tfp_status_t st = tfp_uf_encode(h, buf, TFP_UF_MAX_HEADER, &len, &err);

    ck_assert_msg(st == TFP_OK, "encode %s: %s", tfp_uf_op_name((int)h->op), err.msg);
    ck_assert_uint_ge(len, TFP_UF_FIXED);
    ck_assert_uint_le(len, TFP_UF_MAX_HEADER);
    return len;
}

static void decode_ok(const uint8_t *buf, size_t len, tfp_uf_hdr_t *out)
{
    tfp_err_t err = { TFP_OK, "" };
    tfp_status_t st = tfp_uf_decode(buf, len, out, &err);

    ck_assert_msg(st == TFP_OK, "decode: %s", err.msg);
}

/* ---- frame: golden bytes, names, round trips ----------------------------------------- */

START_TEST(uf_golden_get)
{
    static const uint8_t want[] = {
        'T', 'F', 'U', '1', 2, 3, 0, 0,
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
        0, 0, 0, 0, 0x44, 0x33, 0x22, 0x11,
        0, 0, 0, 0, 0, 0, 0, 0,
        2, 1, 1, 0, 0, 0, 0, 0,
        'r', '1', 'u', 'w',
    };
    uint8_t buf[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h, d;
    size_t len;

    tfp_uf_init(&h, TFP_UF_GET, UINT64_C(0x0102030405060708));
    strcpy(h.request_id, "r1");
    strcpy(h.user, "u");
    strcpy(h.name, "w");
    h.wait_ms = 0x11223344;
    len = encode_ok(&h, buf);
    ck_assert_uint_eq(len, sizeof want);
    ck_assert_mem_eq(buf, want, sizeof want);
    decode_ok(want, sizeof want, &d);
    same_hdr(&h, &d);
}
END_TEST

START_TEST(uf_golden_reply)
{
    static const uint8_t want[] = {
        0x54, 0x46, 0x55, 0x31, 2, 7, 0, 0,
        0xff, 0, 0, 0, 0, 0, 0, 0x80,
        0xfb, 0xff, 0xff, 0xff, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0,
        1, 0, 0, 0, 2, 0, 0x94, 0x01,
        'x', 'n', 'o',
    };
    uint8_t buf[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h, d;

    tfp_uf_init(&h, TFP_UF_REPLY, UINT64_C(0x80000000000000ff));
    h.status = TFP_ENOTFOUND;
    h.http = 404;
    strcpy(h.request_id, "x");
    strcpy(h.msg, "no");
    ck_assert_uint_eq(encode_ok(&h, buf), sizeof want);
    ck_assert_mem_eq(buf, want, sizeof want);
    decode_ok(want, sizeof want, &d);
    same_hdr(&h, &d);
    ck_assert_int_eq(d.status, TFP_ENOTFOUND);
}
END_TEST

START_TEST(uf_op_names)
{
    ck_assert_str_eq(tfp_uf_op_name(TFP_UF_HELLO), "HELLO");
    ck_assert_str_eq(tfp_uf_op_name(TFP_UF_HELLO_ACK), "HELLO_ACK");
    ck_assert_str_eq(tfp_uf_op_name(TFP_UF_GET), "GET");
    ck_assert_str_eq(tfp_uf_op_name(TFP_UF_PUT), "PUT");
    ck_assert_str_eq(tfp_uf_op_name(TFP_UF_DELETE), "DELETE");
    ck_assert_str_eq(tfp_uf_op_name(TFP_UF_CALL), "CALL");
    ck_assert_str_eq(tfp_uf_op_name(TFP_UF_REPLY), "REPLY");
    ck_assert_str_eq(tfp_uf_op_name(TFP_UF_BYE), "BYE");
    ck_assert_str_eq(tfp_uf_op_name(0), "?");
    ck_assert_str_eq(tfp_uf_op_name(9), "?");
    ck_assert_int_eq(tfp_uf_op_is_reply(TFP_UF_REPLY), 1);
    ck_assert_int_eq(tfp_uf_op_is_reply(TFP_UF_HELLO_ACK), 1);
    ck_assert_int_eq(tfp_uf_op_is_reply(TFP_UF_GET), 0);
    ck_assert_int_eq(tfp_uf_op_is_reply(TFP_UF_HELLO), 0);
    ck_assert_int_eq(tfp_uf_op_is_reply(77), 0);
    ck_assert_uint_eq(TFP_UF_MAX_HEADER, 40 + 128 + 128 + 255 + 512);
}
END_TEST

/* Every op's base header, and the optional-empty forms, go through unchanged. */
START_TEST(uf_roundtrip_ops)
{
    uint8_t buf[TFP_UF_MAX_HEADER], again[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h, d;
    tfp_err_t err;
    size_t len, len2;

    for (int op = TFP_UF_HELLO; op <= TFP_UF_BYE; op++) {
        base(&h, (tfp_uf_op_t)op);
        ck_assert_int_eq(tfp_uf_check(&h, &err), TFP_OK);
        len = encode_ok(&h, buf);
        decode_ok(buf, len, &d);
        same_hdr(&h, &d);
        len2 = encode_ok(&d, again);
        ck_assert_uint_eq(len, len2);
        ck_assert_mem_eq(buf, again, len);
    }
    /* the optional fields present */
    base(&h, TFP_UF_HELLO);
    strcpy(h.request_id, "hello-1");
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    base(&h, TFP_UF_BYE);
    strcpy(h.request_id, "bye:1");
    strcpy(h.user, "u");
    strcpy(h.name, "n");
    strcpy(h.msg, "shutting down \xe2\x80\x94 bye");
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    /* a REPLY without a body, an error REPLY with a message, HELLO_ACK refusing */
    base(&h, TFP_UF_REPLY);
    h.flags = 0;
    h.body_len = 0;
    strcpy(h.name, "w");
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    h.status = TFP_EBUSY;
    h.http = 503;                               /* replies carry the HTTP-equivalent status */
    strcpy(h.msg, "server busy: 64 requests in flight");
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    h.http = 100;
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    base(&h, TFP_UF_HELLO_ACK);
    h.status = TFP_EBADREQ;
    h.http = 599;
    strcpy(h.msg, "token expired");
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    /* extremes of the numeric fields */
    base(&h, TFP_UF_GET);
    h.seq = UINT64_MAX;
    h.wait_ms = UINT32_MAX;
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    base(&h, TFP_UF_PUT);
    h.body_len = UINT64_MAX;
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
}
END_TEST

/* The longest header there is: every string at its bound. */
START_TEST(uf_max_header)
{
    uint8_t buf[TFP_UF_MAX_HEADER + 8];
    tfp_uf_hdr_t h, d;
    tfp_err_t err;
    size_t len = 0;

    base(&h, TFP_UF_REPLY);
    memset(h.request_id, 'i', TFP_MAX_REQUEST_ID);
    h.request_id[TFP_MAX_REQUEST_ID] = '\0';
    memset(h.user, 'u', TFP_MAX_USER_ID);
    h.user[TFP_MAX_USER_ID] = '\0';
    memset(h.name, 'n', TFP_MAX_TENSOR_NAME);
    h.name[TFP_MAX_TENSOR_NAME] = '\0';
    for (int i = 0; i < TFP_UF_MAX_MSG; i += 2)
        memcpy(h.msg + i, "\xc3\xa9", 2);       /* 256 x U+00E9 */
    h.msg[TFP_UF_MAX_MSG] = '\0';
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_OK);
    ck_assert_uint_eq(len, TFP_UF_MAX_HEADER);
    decode_ok(buf, len, &d);
    same_hdr(&h, &d);
    /* one byte short of room: refused, nothing written */
    memset(buf, 0x5A, sizeof buf);
    len = 7;
    ck_assert_int_eq(tfp_uf_encode(&h, buf, TFP_UF_MAX_HEADER - 1, &len, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "is too small"));
    ck_assert_uint_eq(len, 7);
    ck_assert_uint_eq(buf[0], 0x5A);
}
END_TEST

START_TEST(uf_null_args)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h;
    tfp_err_t err;
    size_t len;

    base(&h, TFP_UF_GET);
    ck_assert_int_eq(tfp_uf_encode(NULL, buf, sizeof buf, &len, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_uf_encode(&h, NULL, sizeof buf, &len, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, NULL, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, NULL), TFP_OK);
    ck_assert_int_eq(tfp_uf_decode(buf, len, NULL, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_uf_decode(NULL, 10, &h, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_uf_decode(NULL, 0, &h, &err), TFP_EPROTO);
    ck_assert_int_eq(tfp_uf_decode(buf, 3, &h, NULL), TFP_EPROTO);
    ck_assert_int_eq(tfp_uf_check(NULL, &err), TFP_EINVAL);
    tfp_uf_init(NULL, TFP_UF_GET, 1);           /* no-op */
}
END_TEST

/* ---- frame: every rule, refused by the encoder and by the decoder --------------------- */

static void fill(char *dst, char c, size_t n)
{
    memset(dst, c, n);
    dst[n] = '\0';
}

/* Breaks one rule of a base header; returns the message part both sides must report, and
 * sets *encode_only when the broken struct cannot be written as bytes (no terminator). */
static const char *rule(int k, tfp_uf_hdr_t *h, int *encode_only)
{
    *encode_only = 0;
    switch (k) {
    case 0: base(h, TFP_UF_GET); h->op = (tfp_uf_op_t)0; return "unknown op 0";
    case 1: base(h, TFP_UF_GET); h->op = (tfp_uf_op_t)9; return "unknown op 9";
    case 2: base(h, TFP_UF_GET); h->flags = 2; return "flags 0x0002 has unknown bits";
    case 3: base(h, TFP_UF_REPLY); h->flags = 0x8001; return "flags 0x8001 has unknown bits";
    case 4: base(h, TFP_UF_GET); h->request_id[0] = 0;
        return "request id is missing (required on GET)";
    case 5: base(h, TFP_UF_REPLY); h->request_id[0] = 0;
        return "request id is missing (required on REPLY)";
    case 6: base(h, TFP_UF_PUT); strcpy(h->request_id, "a b");
        return "request id is not [A-Za-z0-9._:-]{1,128}";
    case 7: base(h, TFP_UF_CALL); strcpy(h->request_id, "x/y"); return "request id is not";
    case 8: base(h, TFP_UF_GET); strcpy(h->user, "a:b");
        return "user is not [A-Za-z0-9._-]{1,128}";
    case 9: base(h, TFP_UF_HELLO); strcpy(h->user, "alice");
        return "user must be empty on HELLO";
    case 10: base(h, TFP_UF_GET); h->name[0] = 0; return "name is missing (required on GET)";
    case 11: base(h, TFP_UF_PUT); h->name[0] = 0; return "name is missing (required on PUT)";
    case 12: base(h, TFP_UF_DELETE); h->name[0] = 0;
        return "name is missing (required on DELETE)";
    case 13: base(h, TFP_UF_CALL); h->name[0] = 0; return "name is missing (required on CALL)";
    case 14: base(h, TFP_UF_GET); strcpy(h->name, "."); return "name is not [A-Za-z0-9._-]";
    case 15: base(h, TFP_UF_GET); strcpy(h->name, ".."); return "name is not";
    case 16: base(h, TFP_UF_REPLY); strcpy(h->name, "a/b"); return "name is not";
    case 17: base(h, TFP_UF_HELLO); strcpy(h->name, "0123456789ABCDEF0123456789abcdef");
        return "HELLO token is not 32 lowercase hex characters";
    case 18: base(h, TFP_UF_HELLO); h->name[31] = 0; return "HELLO token is not 32";
    case 19: base(h, TFP_UF_HELLO); strcat(h->name, "0"); return "HELLO token is not 32";
    case 20: base(h, TFP_UF_HELLO); h->name[0] = 0; return "HELLO token is not 32";
    case 21: base(h, TFP_UF_HELLO); h->name[5] = 'g'; return "HELLO token is not 32";
    case 22: base(h, TFP_UF_GET); strcpy(h->msg, "bad \xff byte");
        return "msg is not valid UTF-8";
    case 23: base(h, TFP_UF_REPLY); strcpy(h->msg, "\xc0\x80"); return "msg is not valid UTF-8";
    case 24: base(h, TFP_UF_REPLY); strcpy(h->msg, "\xed\xa0\x80"); return "msg is not valid";
    case 25: base(h, TFP_UF_REPLY); strcpy(h->msg, "cut \xe2\x82"); return "msg is not valid";
    case 26: base(h, TFP_UF_HELLO); h->msg[0] = 0; return "HELLO msg is not \"boot_id netns\"";
    case 27: base(h, TFP_UF_HELLO); h->msg[0] = 'A'; return "HELLO msg is not \"boot_id netns\"";
    case 28: base(h, TFP_UF_HELLO); strcpy(h->msg, BOOT "  " NETNS); return "HELLO msg is not";
    case 29: base(h, TFP_UF_HELLO); strcpy(h->msg, BOOT); return "HELLO msg is not";
    case 30: base(h, TFP_UF_HELLO); strcpy(h->msg, BOOT " net:[12x]"); return "netns";
    case 31: base(h, TFP_UF_REPLY); h->status = (tfp_status_t)-99;
        return "status -99 is not a known status";
    case 32: base(h, TFP_UF_REPLY); h->status = (tfp_status_t)1;
        return "status 1 is not a known status";
    case 33: base(h, TFP_UF_HELLO_ACK); h->status = (tfp_status_t)-17;
        return "status -17 is not a known status";
    case 34: base(h, TFP_UF_GET); h->status = TFP_EPROTO;
        return "status -4 on a request (GET) must be 0";
    case 35: base(h, TFP_UF_BYE); h->status = TFP_EINVAL; return "on a request (BYE) must be 0";
    case 36: base(h, TFP_UF_HELLO); h->status = TFP_EBUSY; return "on a request (HELLO)";
    case 37: base(h, TFP_UF_PUT); h->wait_ms = 5; return "wait_ms 5 on PUT (only GET waits)";
    case 38: base(h, TFP_UF_REPLY); h->http = 1;
        return "REPLY carries HTTP status 1, not 100..599";
    case 39: base(h, TFP_UF_HELLO); h->wait_ms = 1; return "wait_ms 1 on HELLO";
    case 40: base(h, TFP_UF_GET); h->body_len = 1; return "body_len 1 on GET (which has no body)";
    case 41: base(h, TFP_UF_DELETE); h->body_len = 7; return "body_len 7 on DELETE";
    case 42: base(h, TFP_UF_HELLO); h->body_len = 1; return "body_len 1 on HELLO";
    case 43: base(h, TFP_UF_HELLO_ACK); h->body_len = 1; return "body_len 1 on HELLO_ACK";
    case 44: base(h, TFP_UF_BYE); h->body_len = UINT64_MAX;
        return "body_len 18446744073709551615 on BYE";
    case 45: base(h, TFP_UF_GET); h->flags = TFP_UF_F_REPLY_HAS_BODY;
        return "flag REPLY_HAS_BODY on GET";
    case 46: base(h, TFP_UF_PUT); h->flags = TFP_UF_F_REPLY_HAS_BODY;
        return "flag REPLY_HAS_BODY on PUT";
    case 47: base(h, TFP_UF_REPLY); h->flags = 0;
        return "flag REPLY_HAS_BODY is clear but body_len is 1000";
    case 48: base(h, TFP_UF_REPLY); h->body_len = 0;
        return "flag REPLY_HAS_BODY is set but body_len is 0";
    case 49: base(h, TFP_UF_REPLY); h->status = TFP_ENOTFOUND; h->body_len = 5;
        return "body_len 5 on a failed REPLY (TF_ENOTFOUND)";
    case 50: base(h, TFP_UF_GET); memset(h->request_id, 'a', sizeof h->request_id);
        *encode_only = 1;
        return "a string field is not NUL-terminated";
    case 51: base(h, TFP_UF_GET); memset(h->msg, 'a', sizeof h->msg);
        *encode_only = 1;
        return "a string field is not NUL-terminated";
    case 52: base(h, TFP_UF_GET); fill(h->user, 'u', TFP_MAX_USER_ID);
        h->user[3] = '\x01';
        return "user is not";
    case 53: base(h, TFP_UF_DELETE); fill(h->name, 'n', TFP_MAX_TENSOR_NAME);
        h->name[254] = '*';
        return "name is not";
    case 54: base(h, TFP_UF_HELLO_ACK); h->http = 600;
        return "HELLO_ACK carries HTTP status 600, not 100..599";
    case 55: base(h, TFP_UF_REPLY); h->http = 99; return "REPLY carries HTTP status 99";
    case 56: base(h, TFP_UF_REPLY); h->http = UINT16_MAX;
        return "REPLY carries HTTP status 65535, not 100..599";
    case 57: base(h, TFP_UF_GET); h->http = 200; return "http 200 on a request (GET) must be 0";
    case 58: base(h, TFP_UF_PUT); h->http = 201; return "http 201 on a request (PUT) must be 0";
    case 59: base(h, TFP_UF_HELLO); h->http = 100; return "http 100 on a request (HELLO)";
    case 60: base(h, TFP_UF_REPLY); h->wait_ms = 200;
        return "wait_ms 200 on REPLY (only GET waits)";
    case 61: base(h, TFP_UF_HELLO_ACK); h->wait_ms = 1;
        return "wait_ms 1 on HELLO_ACK (only GET waits)";
    }
    return NULL;
}

#define N_RULES 62

START_TEST(uf_rule_refused)
{
    uint8_t buf[TFP_UF_MAX_HEADER + 64];
    tfp_uf_hdr_t h;
    tfp_err_t err = { TFP_OK, "" };
    int encode_only;
    const char *want = rule(_i, &h, &encode_only);
    size_t len = 99;

    ck_assert_ptr_nonnull(want);
    ck_assert_int_eq(tfp_uf_check(&h, &err), TFP_EINVAL);
    ck_assert_msg(strstr(err.msg, want) != NULL, "rule %d: check says '%s', want '%s'", _i,
                  err.msg, want);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_EINVAL);
    ck_assert_int_eq(err.code, TFP_EINVAL);
    ck_assert_uint_eq(len, 99);
    ck_assert_msg(strstr(err.msg, want) != NULL, "rule %d: encode says '%s', want '%s'", _i,
                  err.msg, want);
    ck_assert_msg(strncmp(err.msg, "ucx frame: ", 11) == 0, "rule %d: '%s'", _i, err.msg);
    if (encode_only)
        return;
    len = raw_encode(&h, buf);
    decode_rejects_at(_i, buf, len, TFP_EPROTO, want);
}
END_TEST

/* Each base header is valid, so each rule case breaks exactly what it says. */
START_TEST(uf_rules_cover_ops)
{
    int encode_only;
    tfp_uf_hdr_t h;

    ck_assert_ptr_null(rule(N_RULES, &h, &encode_only));
}
END_TEST

/* ---- frame: faults only bytes can have ----------------------------------------------- */

static size_t base_bytes(tfp_uf_op_t op, uint8_t *buf)
{
    tfp_uf_hdr_t h;

    base(&h, op);
    return encode_ok(&h, buf);
}

START_TEST(uf_reject_short)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    size_t len = base_bytes(TFP_UF_BYE, buf);

    ck_assert_uint_eq(len, TFP_UF_FIXED);
    DECODE_REJECTS(buf, 0, TFP_EPROTO, "0 bytes is shorter than the 40-byte fixed header");
    DECODE_REJECTS(buf, 39, TFP_EPROTO, "39 bytes is shorter than the 40-byte");
    DECODE_REJECTS(buf, 1, TFP_EPROTO, "shorter");
}
END_TEST

START_TEST(uf_reject_magic_version)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    size_t len = base_bytes(TFP_UF_GET, buf);

    buf[3] = '2';
    DECODE_REJECTS(buf, len, TFP_EPROTO, "bad magic 0x32554654 (want 0x31554654, \"TFU1\")");
    memcpy(buf, "1UFT", 4);                     /* big-endian writer */
    DECODE_REJECTS(buf, len, TFP_EPROTO, "bad magic");
    memcpy(buf, "TFU1", 4);
    buf[4] = 0;
    DECODE_REJECTS(buf, len, TFP_EPROTO, "version 0 is not 2");
    buf[4] = 1;                                 /* version 1: wait_ms carried the HTTP status */
    DECODE_REJECTS(buf, len, TFP_EPROTO, "version 1 is not 2");
    buf[4] = 3;
    DECODE_REJECTS(buf, len, TFP_EPROTO, "version 3 is not 2");
    buf[4] = 2;
    buf[5] = 255;
    DECODE_REJECTS(buf, len, TFP_EPROTO, "unknown op 255");
    buf[5] = TFP_UF_GET;
    decode_ok(buf, len, &(tfp_uf_hdr_t){ 0 });
}
END_TEST

START_TEST(uf_reject_reserved)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    size_t len = base_bytes(TFP_UF_GET, buf);

    buf[35] = 1;
    DECODE_REJECTS(buf, len, TFP_EPROTO, "reserved byte is 1, not 0");
    buf[35] = 0;
    buf[39] = 1;                                /* the http field, on a request */
    DECODE_REJECTS(buf, len, TFP_EPROTO, "http 256 on a request (GET) must be 0");
    buf[39] = 0;
    buf[38] = 0x80;
    DECODE_REJECTS(buf, len, TFP_EPROTO, "http 128 on a request (GET) must be 0");
    buf[38] = 0;
    buf[7] = 0x80;
    DECODE_REJECTS(buf, len, TFP_EPROTO, "flags 0x8000 has unknown bits");
}
END_TEST

START_TEST(uf_reject_lengths)
{
    uint8_t buf[TFP_UF_MAX_HEADER + 1024];
    size_t len = base_bytes(TFP_UF_GET, buf);

    memset(buf + len, 'a', sizeof buf - len);
    DECODE_REJECTS(buf, len + 1, TFP_EPROTO, "bytes, but the header says");
    DECODE_REJECTS(buf, len - 1, TFP_EPROTO, "bytes, but the header says");
    buf[32] = 129;
    DECODE_REJECTS(buf, sizeof buf, TFP_EPROTO, "request id length 129 is over 128");
    buf[32] = 5;
    buf[33] = 200;
    DECODE_REJECTS(buf, sizeof buf, TFP_EPROTO, "user length 200 is over 128");
    buf[33] = 5;
    put_le(buf + 36, 513, 2);
    DECODE_REJECTS(buf, sizeof buf, TFP_EPROTO, "msg length 513 is over 512");
    put_le(buf + 36, 0xffff, 2);
    DECODE_REJECTS(buf, sizeof buf, TFP_EPROTO, "msg length 65535 is over 512");
    put_le(buf + 36, 0, 2);
    buf[34] = 255;                              /* name_len at its byte maximum: too long */
    DECODE_REJECTS(buf, len, TFP_EPROTO, "but the header says 305");
}
END_TEST

START_TEST(uf_reject_nul_in_strings)
{
    static const char *const field[] = { "request id", "user", "name", "msg" };
    uint8_t buf[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h;
    size_t len, at[4];

    base(&h, TFP_UF_GET);
    strcpy(h.msg, "hi");
    len = encode_ok(&h, buf);
    at[0] = TFP_UF_FIXED;
    at[1] = at[0] + strlen(h.request_id);
    at[2] = at[1] + strlen(h.user);
    at[3] = at[2] + strlen(h.name);
    for (int f = 0; f < 4; f++) {
        char want[64];
        uint8_t saved = buf[at[f]];

        buf[at[f]] = 0;
        snprintf(want, sizeof want, "ucx frame: %s contains a NUL byte", field[f]);
        decode_rejects_at(f, buf, len, TFP_EPROTO, want);
        buf[at[f]] = saved;
    }
    decode_ok(buf, len, &h);
}
END_TEST

/* ---- frame: random ------------------------------------------------------------------- */

static void rnd_id(char *dst, size_t max, const char *alphabet)
{
    size_t n = 1 + rnd_below(max), k = strlen(alphabet);

    for (size_t i = 0; i < n; i++)
        dst[i] = alphabet[rnd_below(k)];
    dst[n] = '\0';
}

#define NAME_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"

/* Random well-formed UTF-8 of at most max bytes, no NUL. */
static void rnd_utf8(char *dst, size_t max)
{
    static const char *const pieces[] = { "a", "Z", " ", "\"", "\\", "\x01", "\x7f",
                                          "\xc3\xa9", "\xdf\xbf", "\xe2\x82\xac",
                                          "\xef\xbf\xbd", "\xf0\x9f\x98\x80",
                                          "\xf4\x8f\xbf\xbf" };
    size_t n = 0, target = rnd_below(max + 1);

    while (n < target) {
        const char *p = pieces[rnd_below(sizeof pieces / sizeof pieces[0])];
        size_t k = strlen(p);

        if (n + k > max)
            break;
        memcpy(dst + n, p, k);
        n += k;
    }
    dst[n] = '\0';
}

static const tfp_status_t ALL_STATUS[] = {
#define X(n, v, h, s) TFP_##n,
    TFP_STATUS_MAP(X)
#undef X
};

static void rnd_hdr(tfp_uf_hdr_t *h)
{
    tfp_uf_op_t op = (tfp_uf_op_t)(TFP_UF_HELLO + (int)rnd_below(8));

    tfp_uf_init(h, op, rnd());
    if (op == TFP_UF_HELLO || op == TFP_UF_HELLO_ACK || op == TFP_UF_BYE) {
        if (rnd() & 1)
            rnd_id(h->request_id, TFP_MAX_REQUEST_ID, NAME_CHARS ":");
    } else {
        rnd_id(h->request_id, TFP_MAX_REQUEST_ID, NAME_CHARS ":");
    }
    if (op != TFP_UF_HELLO && (rnd() & 1))
        rnd_id(h->user, TFP_MAX_USER_ID, NAME_CHARS);
    if (op == TFP_UF_HELLO) {
        for (int i = 0; i < TFP_UP_TOKEN_LEN; i++)
            h->name[i] = "0123456789abcdef"[rnd_below(16)];
        h->name[TFP_UP_TOKEN_LEN] = '\0';
        snprintf(h->msg, sizeof h->msg, "%08x-%04x-%04x-%04x-%012llx net:[%llu]",
                 (unsigned)rnd(), (unsigned)(rnd() & 0xffff), (unsigned)(rnd() & 0xffff),
                 (unsigned)(rnd() & 0xffff),
                 (unsigned long long)(rnd() & UINT64_C(0xffffffffffff)),
                 (unsigned long long)rnd());
    } else {
        if (op == TFP_UF_GET || op == TFP_UF_PUT || op == TFP_UF_DELETE || op == TFP_UF_CALL ||
            (rnd() & 1)) {
            do
                rnd_id(h->name, rnd() & 1 ? 8 : TFP_MAX_TENSOR_NAME, NAME_CHARS);
            while (strcmp(h->name, ".") == 0 || strcmp(h->name, "..") == 0);
        }
        if (rnd() & 1)
            rnd_utf8(h->msg, TFP_UF_MAX_MSG);
    }
    if (tfp_uf_op_is_reply(op))
        h->status = (rnd() & 1) ? TFP_OK
                                : ALL_STATUS[rnd_below(sizeof ALL_STATUS / sizeof ALL_STATUS[0])];
    if (op == TFP_UF_GET && (rnd() & 1))
        h->wait_ms = (uint32_t)rnd();
    if (tfp_uf_op_is_reply(op) && (rnd() & 1))
        h->http = (uint16_t)(100 + rnd_below(500));     /* the HTTP-equivalent status */
    if (op == TFP_UF_PUT || op == TFP_UF_CALL)
        h->body_len = rnd() >> rnd_below(64);
    if (op == TFP_UF_REPLY && h->status == TFP_OK && (rnd() & 1)) {
        h->body_len = 1 + (rnd() >> (1 + rnd_below(63)));
        h->flags = TFP_UF_F_REPLY_HAS_BODY;
    }
}

START_TEST(uf_random_roundtrip)
{
    uint8_t buf[TFP_UF_MAX_HEADER], again[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h, d;

    rnd_state = UINT64_C(0x9E3779B97F4A7C15);
    for (int i = 0; i < 20000; i++) {
        size_t len, len2;

        rnd_hdr(&h);
        len = encode_ok(&h, buf);
        decode_ok(buf, len, &d);
        same_hdr(&h, &d);
        len2 = encode_ok(&d, again);
        ck_assert_uint_eq(len, len2);
        ck_assert_mem_eq(buf, again, len);
    }
}
END_TEST

/* Flipped bytes: either a clean rejection, or a header that encodes back to the same bytes. */
START_TEST(uf_random_corruption)
{
    uint8_t buf[TFP_UF_MAX_HEADER + 4], again[TFP_UF_MAX_HEADER];
    int accepted = 0, rejected = 0;
    tfp_uf_hdr_t h, d;

    rnd_state = UINT64_C(0x243F6A8885A308D3);
    for (int i = 0; i < 20000; i++) {
        tfp_err_t err = { TFP_OK, "" };
        size_t len, len2 = 0;
        tfp_status_t st;

        rnd_hdr(&h);
        len = encode_ok(&h, buf);
        for (int k = 1 + (int)rnd_below(3); k > 0; k--)
            buf[rnd_below(len)] ^= (uint8_t)(1u << rnd_below(8));
        if (rnd_below(8) == 0)
            len = rnd_below(len + 4);           /* truncate or overrun */
        st = tfp_uf_decode(buf, len, &d, &err);
        if (st != TFP_OK) {
            ck_assert_int_eq(st, TFP_EPROTO);
            ck_assert_int_eq(err.code, TFP_EPROTO);
            ck_assert_msg(strncmp(err.msg, "ucx frame: ", 11) == 0, "message '%s'", err.msg);
            rejected++;
            continue;
        }
        ck_assert_int_eq(tfp_uf_encode(&d, again, sizeof again, &len2, &err), TFP_OK);
        ck_assert_uint_eq(len, len2);
        ck_assert_mem_eq(buf, again, len);
        accepted++;
    }
    ck_assert_int_gt(accepted, 100);
    ck_assert_int_gt(rejected, 100);
}
END_TEST

/* ---- host identity ------------------------------------------------------------------- */

START_TEST(up_host_validators)
{
    ck_assert_int_eq(tfp_up_boot_id_valid(BOOT), 1);
    ck_assert_int_eq(tfp_up_boot_id_valid("00000000-0000-0000-0000-000000000000"), 1);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424F66-80cc-4684-b9fd-2ab7faab3cd6"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424f66-80cc-4684-b9fd-2ab7faab3cd"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424f66-80cc-4684-b9fd-2ab7faab3cd66"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424f6680cc-4684-b9fd-2ab7faab3cd6a"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424f66-80cc-4684-b9fd-2ab7faab3cd6\n"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424f66-80cc-4684-b9fd-2ab7-aab3cd6"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424f66-80cc-4684-b9fd-2ab7faab3cg6"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid(""), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid(NULL), 0);

    ck_assert_int_eq(tfp_up_netns_valid(NETNS), 1);
    ck_assert_int_eq(tfp_up_netns_valid("net:[0]"), 1);
    ck_assert_int_eq(tfp_up_netns_valid("net:[18446744073709551615]"), 1);
    ck_assert_int_eq(tfp_up_netns_valid("net:[184467440737095516150]"), 0);     /* 21 digits */
    ck_assert_int_eq(tfp_up_netns_valid("net:[]"), 0);
    ck_assert_int_eq(tfp_up_netns_valid("net:[12a]"), 0);
    ck_assert_int_eq(tfp_up_netns_valid("net:[12] "), 0);
    ck_assert_int_eq(tfp_up_netns_valid("net:[12"), 0);
    ck_assert_int_eq(tfp_up_netns_valid("mnt:[4026531840]"), 0);
    ck_assert_int_eq(tfp_up_netns_valid("net:[-1]"), 0);
    ck_assert_int_eq(tfp_up_netns_valid(NULL), 0);

    ck_assert_int_eq(tfp_up_token_valid(TOKEN), 1);
    ck_assert_int_eq(tfp_up_token_valid("0123456789ABCDEF0123456789abcdef"), 0);
    ck_assert_int_eq(tfp_up_token_valid("0123456789abcdef0123456789abcde"), 0);
    ck_assert_int_eq(tfp_up_token_valid("0123456789abcdef0123456789abcdef0"), 0);
    ck_assert_int_eq(tfp_up_token_valid(""), 0);
    ck_assert_int_eq(tfp_up_token_valid(NULL), 0);
}
END_TEST

static tfp_up_host_t host_of(const char *boot, const char *netns, int64_t pid)
{
    tfp_up_host_t h;

    memset(&h, 0, sizeof h);
    snprintf(h.boot_id, sizeof h.boot_id, "%s", boot);
    snprintf(h.netns, sizeof h.netns, "%s", netns);
    h.pid = pid;
    return h;
}

START_TEST(up_host_check_same_ident)
{
    tfp_up_host_t a = host_of(BOOT, NETNS, 1234), b = a, p;
    char buf[TFP_UP_MAX_IDENT + 1];
    tfp_err_t err;

    ck_assert_int_eq(tfp_up_host_check(&a, &err), TFP_OK);
    b.pid = 1;
    ck_assert_int_eq(tfp_up_host_same(&a, &b), 1);
    b.netns[6] = '9';
    ck_assert_int_eq(tfp_up_host_same(&a, &b), 0);
    b = a;
    b.boot_id[0] = '1';
    ck_assert_int_eq(tfp_up_host_same(&a, &b), 0);
    ck_assert_int_eq(tfp_up_host_same(&a, NULL), 0);
    b = host_of("", "", 1);
    ck_assert_int_eq(tfp_up_host_same(&b, &b), 0);

    b = a;
    b.pid = 0;
    ck_assert_int_eq(tfp_up_host_check(&b, &err), TFP_EINVAL);
    ck_assert_str_eq(err.msg, "host identity: pid 0 is not in 1..2147483647");
    b.pid = INT64_C(2147483648);
    ck_assert_int_eq(tfp_up_host_check(&b, &err), TFP_EINVAL);
    b = a;
    b.boot_id[8] = 'x';
    ck_assert_int_eq(tfp_up_host_check(&b, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "boot_id is not a 36-character lowercase uuid"));
    b = a;
    memset(b.netns, '1', sizeof b.netns);
    ck_assert_int_eq(tfp_up_host_check(&b, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "netns is not \"net:[N]\""));
    ck_assert_int_eq(tfp_up_host_check(NULL, &err), TFP_EINVAL);

    ck_assert_int_eq(tfp_up_ident_format(&a, buf, sizeof buf, &err), TFP_OK);
    ck_assert_str_eq(buf, BOOT " " NETNS);
    ck_assert_int_eq(tfp_up_ident_parse(buf, strlen(buf), &p, &err), TFP_OK);
    ck_assert_str_eq(p.boot_id, BOOT);
    ck_assert_str_eq(p.netns, NETNS);
    ck_assert_int_eq(p.pid, 0);
    ck_assert_int_eq(tfp_up_host_same(&a, &p), 1);
    ck_assert_int_eq(tfp_up_ident_format(&a, buf, strlen(BOOT " " NETNS), &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "too small"));
    ck_assert_int_eq(tfp_up_ident_format(NULL, buf, sizeof buf, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_up_ident_format(&a, NULL, sizeof buf, &err), TFP_EINVAL);
    b = a;
    b.boot_id[0] = 'Q';
    ck_assert_int_eq(tfp_up_ident_format(&b, buf, sizeof buf, &err), TFP_EINVAL);
    b = a;
    strcpy(b.netns, "net:[1");
    ck_assert_int_eq(tfp_up_ident_format(&b, buf, sizeof buf, &err), TFP_EINVAL);
    /* a maximal identity fits TFP_UP_MAX_IDENT */
    b = host_of(BOOT, "net:[18446744073709551615]", 1);
    ck_assert_int_eq(tfp_up_ident_format(&b, buf, sizeof buf, &err), TFP_OK);
    ck_assert_uint_le(strlen(buf), TFP_UP_MAX_IDENT);
}
END_TEST

START_TEST(up_ident_parse_rejects)
{
    static const struct {
        const char *s;
        const char *want;
    } bad[] = {
        { "", "no space after 36 characters" },
        { BOOT, "no space after 36 characters" },
        { BOOT NETNS, "no space after 36 characters" },
        { BOOT "\t" NETNS, "no space after 36 characters" },
        { "07424F66-80cc-4684-b9fd-2ab7faab3cd6 " NETNS, "boot_id is not" },
        { BOOT " ", "netns is not" },
        { BOOT "  " NETNS, "netns is not" },
        { BOOT " " NETNS " ", "netns is not" },
        { BOOT " net:[1111111111111111111111111111111111]", "netns is not" },
    };
    tfp_up_host_t out, canary;
    tfp_err_t err;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&out, 0x33, sizeof out);
        canary = out;
        ck_assert_int_eq(tfp_up_ident_parse(bad[i].s, strlen(bad[i].s), &out, &err),
                         TFP_EPROTO);
        ck_assert_msg(strstr(err.msg, bad[i].want) != NULL, "case %zu: '%s'", i, err.msg);
        ck_assert_mem_eq(&out, &canary, sizeof out);
    }
    /* a NUL inside the netns part */
    ck_assert_int_eq(tfp_up_ident_parse(BOOT " net:[1]\0]", 46, &out, &err), TFP_EPROTO);
    ck_assert_int_eq(tfp_up_ident_parse(NULL, 0, &out, &err), TFP_EINVAL);
}
END_TEST

/* ---- upgrade request ----------------------------------------------------------------- */

#define REQ_GOLDEN "{\"transports\":[\"ucx\"],\"host\":{\"boot_id\":\"" BOOT "\",\"netns\":\"" \
    NETNS "\",\"pid\":1234},\"policy\":\"auto\"}"

START_TEST(up_req_golden_roundtrip)
{
    tfp_up_req_t req, got;
    char *json = NULL;
    size_t len = 0;
    tfp_err_t err;

    memset(&req, 0, sizeof req);
    req.transports = TFP_UP_T_UCX;
    req.host = host_of(BOOT, NETNS, 1234);
    req.policy = TFP_UP_POLICY_AUTO;
    ck_assert_int_eq(tfp_up_req_build(&req, &json, &len, &err), TFP_OK);
    ck_assert_str_eq(json, REQ_GOLDEN);
    ck_assert_uint_eq(len, strlen(REQ_GOLDEN));
    ck_assert_int_eq(tfp_up_req_parse(json, len, &got, &err), TFP_OK);
    ck_assert_uint_eq(got.transports, TFP_UP_T_UCX);
    ck_assert_str_eq(got.host.boot_id, BOOT);
    ck_assert_str_eq(got.host.netns, NETNS);
    ck_assert_int_eq(got.host.pid, 1234);
    ck_assert_int_eq(got.policy, TFP_UP_POLICY_AUTO);
    free(json);

    req.policy = TFP_UP_POLICY_UCX;
    req.host.pid = TFP_UP_MAX_PID;
    ck_assert_int_eq(tfp_up_req_build(&req, &json, NULL, &err), TFP_OK);
    ck_assert_int_eq(tfp_up_req_parse(json, strlen(json), &got, &err), TFP_OK);
    ck_assert_int_eq(got.policy, TFP_UP_POLICY_UCX);
    ck_assert_int_eq(got.host.pid, TFP_UP_MAX_PID);
    free(json);

    /* whitespace anywhere JSON allows it, members in any order */
    {
        const char *text = " \n{ \"policy\" : \"ucx\" ,\"host\":{\"pid\":7,\"netns\":\"net:[1]\","
                           "\"boot_id\":\"" BOOT "\"},\r\n\t\"transports\" : [ \"ucx\" ] }\n ";

        ck_assert_int_eq(tfp_up_req_parse(text, strlen(text), &got, &err), TFP_OK);
        ck_assert_int_eq(got.host.pid, 7);
        ck_assert_str_eq(got.host.netns, "net:[1]");
    }
}
END_TEST

START_TEST(up_req_random_roundtrip)
{
    rnd_state = UINT64_C(0xB7E151628AED2A6B);
    for (int i = 0; i < 2000; i++) {
        tfp_up_req_t req, got;
        tfp_err_t err;
        char *json;
        size_t len;

        memset(&req, 0, sizeof req);
        req.transports = TFP_UP_T_UCX;
        snprintf(req.host.boot_id, sizeof req.host.boot_id, "%08x-%04x-%04x-%04x-%012llx",
                 (unsigned)rnd(), (unsigned)(rnd() & 0xffff), (unsigned)(rnd() & 0xffff),
                 (unsigned)(rnd() & 0xffff),
                 (unsigned long long)(rnd() & UINT64_C(0xffffffffffff)));
        snprintf(req.host.netns, sizeof req.host.netns, "net:[%llu]",
                 (unsigned long long)(rnd() >> rnd_below(64)));
        req.host.pid = 1 + (int64_t)rnd_below(TFP_UP_MAX_PID);
        req.policy = (rnd() & 1) ? TFP_UP_POLICY_UCX : TFP_UP_POLICY_AUTO;
        ck_assert_int_eq(tfp_up_req_build(&req, &json, &len, &err), TFP_OK);
        ck_assert_int_eq(tfp_up_req_parse(json, len, &got, &err), TFP_OK);
        ck_assert_uint_eq(got.transports, req.transports);
        ck_assert_str_eq(got.host.boot_id, req.host.boot_id);
        ck_assert_str_eq(got.host.netns, req.host.netns);
        ck_assert_int_eq(got.host.pid, req.host.pid);
        ck_assert_int_eq(got.policy, req.policy);
        free(json);
    }
}
END_TEST

START_TEST(up_req_build_refuses)
{
    tfp_up_req_t req;
    char *json = (char *)"untouched";
    tfp_err_t err;

    memset(&req, 0, sizeof req);
    req.transports = TFP_UP_T_UCX;
    req.host = host_of(BOOT, NETNS, 1234);
    ck_assert_int_eq(tfp_up_req_build(NULL, &json, NULL, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_up_req_build(&req, NULL, NULL, &err), TFP_EINVAL);
    req.transports = 0;
    ck_assert_int_eq(tfp_up_req_build(&req, &json, NULL, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "transports 0x0 is empty or has unknown bits"));
    req.transports = TFP_UP_T_UCX | 0x4;
    ck_assert_int_eq(tfp_up_req_build(&req, &json, NULL, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "transports 0x5"));
    req.transports = TFP_UP_T_UCX;
    req.policy = (tfp_up_policy_t)7;
    ck_assert_int_eq(tfp_up_req_build(&req, &json, NULL, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown policy 7"));
    req.policy = TFP_UP_POLICY_AUTO;
    req.host.pid = -1;
    ck_assert_int_eq(tfp_up_req_build(&req, &json, NULL, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "pid -1 is not in"));
    req.host = host_of("x", NETNS, 1);
    ck_assert_int_eq(tfp_up_req_build(&req, &json, NULL, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "boot_id"));
    ck_assert_str_eq(json, "untouched");
}
END_TEST

#define HOST_JSON "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":1234}"
#define REQ(t, h, p) "{\"transports\":" t ",\"host\":" h ",\"policy\":" p "}"

static const struct {
    const char *body;
    tfp_status_t want;
    const char *substr;
} REQ_BAD[] = {
    { "", TFP_EPROTO, "upgrade request: invalid JSON at byte 0: unexpected end of text" },
    { "{", TFP_EPROTO, "upgrade request: invalid JSON" },
    { "[]", TFP_EPROTO, "upgrade request: not a JSON object" },
    { "\"ucx\"", TFP_EPROTO, "not a JSON object" },
    { REQ_GOLDEN " x", TFP_EPROTO, "text after the JSON value at byte" },
    { REQ_GOLDEN "{}", TFP_EPROTO, "text after the JSON value" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON ",\"policy\":\"auto\",\"extra\":1}",
      TFP_EPROTO, "upgrade request: unknown key \"extra\"" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON ",\"policy\":\"auto\",\"\\u0001k\":1}",
      TFP_EPROTO, "unknown key \"?k\"" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON ",\"policy\":\"auto\",\"policy\":\"ucx\"}",
      TFP_EPROTO, "upgrade request: duplicate key \"policy\"" },
    { "{\"host\":" HOST_JSON ",\"policy\":\"auto\"}", TFP_EPROTO,
      "upgrade request: missing \"transports\"" },
    { "{\"transports\":[\"ucx\"],\"policy\":\"auto\"}", TFP_EPROTO, "missing \"host\"" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON "}", TFP_EPROTO, "missing \"policy\"" },
    { REQ("\"ucx\"", HOST_JSON, "\"auto\""), TFP_EPROTO, "\"transports\" is not an array" },
    { REQ("{}", HOST_JSON, "\"auto\""), TFP_EPROTO, "\"transports\" is not an array" },
    { REQ("[]", HOST_JSON, "\"auto\""), TFP_EPROTO, "\"transports\" is empty" },
    { REQ("[1]", HOST_JSON, "\"auto\""), TFP_EPROTO, "transports[0] is not a string" },
    { REQ("[\"ucx\",null]", HOST_JSON, "\"auto\""), TFP_EPROTO, "transports[1] is not a string" },
    { REQ("[\"shm\"]", HOST_JSON, "\"auto\""), TFP_EPROTO,
      "transports[0] \"shm\" is not a known transport (ucx)" },
    { REQ("[\"UCX\"]", HOST_JSON, "\"auto\""), TFP_EPROTO, "is not a known transport" },
    { REQ("[\"ucx\",\"ucx\"]", HOST_JSON, "\"auto\""), TFP_EPROTO,
      "transports[1] \"ucx\" is listed twice" },
    { REQ("[\"ucx\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"]", HOST_JSON, "\"auto\""),
      TFP_EPROTO, "\"transports\" lists more than 8 names" },
    { REQ("[1,2,3,4,5,6,7,8,9]", HOST_JSON, "\"auto\""), TFP_EPROTO, "lists more than 8" },
    { REQ("[\"ucx\",[],[],[],[],[],[],[]]", HOST_JSON, "\"auto\""), TFP_EPROTO,
      "transports[1] is not a string" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON ",\"policy\":\"auto\",\"k"
      "0123456789012345678901234567890123456789012345678901234567890123456789\":1}",
      TFP_EPROTO, "unknown key \"k012345678901234567890123456789012345678901234567890...\"" },
    { REQ("[\"ucx\"]", "[]", "\"auto\""), TFP_EPROTO, "\"host\" is not an object" },
    { REQ("[\"ucx\"]", "null", "\"auto\""), TFP_EPROTO, "\"host\" is not an object" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\"}", "\"auto\""),
      TFP_EPROTO, "upgrade request: host: missing \"pid\"" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":1,\"uid\":0}",
          "\"auto\""), TFP_EPROTO, "upgrade request: host: unknown key \"uid\"" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":1,\"pid\":2}",
          "\"auto\""), TFP_EPROTO, "host: duplicate key \"pid\"" },
    { REQ("[\"ucx\"]", "{\"boot_id\":1,\"netns\":\"" NETNS "\",\"pid\":1}", "\"auto\""),
      TFP_EPROTO, "host.boot_id is not a 36-character lowercase uuid" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "0\",\"netns\":\"" NETNS "\",\"pid\":1}",
          "\"auto\""), TFP_EPROTO, "host.boot_id is not" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"07424f66-80cc-4684-b9fd-2ab7faab3cd\",\"netns\":\""
          NETNS "\",\"pid\":1}", "\"auto\""), TFP_EPROTO, "host.boot_id is not" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"net:[1] \",\"pid\":1}", "\"auto\""),
      TFP_EPROTO, "host.netns is not \"net:[N]\"" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"net:[1111111111111111111111111111"
          "11111111111]\",\"pid\":1}", "\"auto\""), TFP_EPROTO, "host.netns is not" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":[],\"pid\":1}", "\"auto\""),
      TFP_EPROTO, "host.netns is not" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":0}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer in 1..2147483647" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":-5}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":1.5}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":2147483648}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":1e300}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":\"12\"}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":true}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer" },
    { REQ("[\"ucx\"]", HOST_JSON, "\"http\""), TFP_EPROTO,
      "\"policy\" is not \"auto\" or \"ucx\"" },
    { REQ("[\"ucx\"]", HOST_JSON, "\"AUTO\""), TFP_EPROTO, "\"policy\" is not" },
    { REQ("[\"ucx\"]", HOST_JSON, "1"), TFP_EPROTO, "\"policy\" is not" },
    { REQ("[\"ucx\"]", HOST_JSON, "null"), TFP_EPROTO, "\"policy\" is not" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON ",\"policy\":\"au\\u0000to\"}",
      TFP_EPROTO, "\\u0000 is not allowed" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON ",\"policy\":\"auto\xff\"}",
      TFP_EPROTO, "not valid UTF-8" },
    { "{\"transports\":[\"ucx\"],\"transports\":[\"ucx\"],\"host\":" HOST_JSON
      ",\"policy\":\"auto\"}", TFP_EPROTO, "duplicate key \"transports\"" },
};

START_TEST(up_req_parse_refuses)
{
    tfp_up_req_t out, canary;
    tfp_err_t err = { TFP_OK, "" };
    tfp_status_t st;

    memset(&out, 0x77, sizeof out);
    canary = out;
    st = tfp_up_req_parse(REQ_BAD[_i].body, strlen(REQ_BAD[_i].body), &out, &err);
    ck_assert_msg(st == REQ_BAD[_i].want, "case %d: got %s (%s)", _i, tfp_status_name(st),
                  err.msg);
    ck_assert_int_eq(err.code, st);
    ck_assert_msg(strstr(err.msg, REQ_BAD[_i].substr) != NULL, "case %d: '%s' lacks '%s'", _i,
                  err.msg, REQ_BAD[_i].substr);
    ck_assert_msg(strncmp(err.msg, "upgrade request", 15) == 0, "case %d: '%s'", _i, err.msg);
    ck_assert_mem_eq(&out, &canary, sizeof out);
}
END_TEST

START_TEST(up_req_parse_oversize)
{
    size_t n = TFP_UP_MAX_REQ_JSON + 1, glen = strlen(REQ_GOLDEN);
    char *big = malloc(n + 1);
    tfp_up_req_t out;
    tfp_err_t err;

    ck_assert_ptr_nonnull(big);
    /* the golden request padded with trailing whitespace: valid JSON, one byte too long */
    memcpy(big, REQ_GOLDEN, glen);
    memset(big + glen, ' ', n - glen);
    big[n] = '\0';
    ck_assert_int_eq(tfp_up_req_parse(big, n, &out, &err), TFP_ETOOBIG);
    ck_assert_str_eq(err.msg, "upgrade request: body of 4097 bytes is over the 4096-byte limit");
    ck_assert_int_eq(tfp_up_req_parse(big, n - 1, &out, &err), TFP_OK);
    free(big);
    ck_assert_int_eq(tfp_up_req_parse(NULL, 0, &out, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_up_req_parse(REQ_GOLDEN, glen, NULL, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_up_req_parse(REQ_GOLDEN, glen, &out, NULL), TFP_OK);
    ck_assert_int_eq(tfp_up_req_parse("{}", 2, &out, NULL), TFP_EPROTO);
    ck_assert_int_eq(tfp_up_req_parse("{", 1, &out, NULL), TFP_EPROTO);
}
END_TEST

/* ---- upgrade response ---------------------------------------------------------------- */

static void ucx_resp(tfp_up_resp_t *r, uint8_t *addr, size_t n)
{
    memset(r, 0, sizeof *r);
    r->upgraded = 1;
    strcpy(r->token, TOKEN);
    r->expires_ms = 10000;
    r->worker_address = addr;
    r->worker_address_len = n;
    r->same_host = 1;
    r->server_pid = 4321;
}

START_TEST(up_resp_golden_roundtrip)
{
    uint8_t addr[] = { 'f', 'o', 'o', 'b', 'a' };
    tfp_up_resp_t r, got;
    char *json;
    size_t len;
    tfp_err_t err;

    ucx_resp(&r, addr, sizeof addr);
    ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_OK);
    ck_assert_str_eq(json, "{\"transport\":\"ucx\",\"token\":\"" TOKEN "\",\"expires_ms\":10000,"
                           "\"worker_address\":\"Zm9vYmE=\",\"same_host\":true,"
                           "\"server_pid\":4321}");
    ck_assert_int_eq(tfp_up_resp_parse(json, len, &got, &err), TFP_OK);
    ck_assert_int_eq(got.upgraded, 1);
    ck_assert_str_eq(got.token, TOKEN);
    ck_assert_uint_eq(got.expires_ms, 10000);
    ck_assert_uint_eq(got.worker_address_len, sizeof addr);
    ck_assert_mem_eq(got.worker_address, addr, sizeof addr);
    ck_assert_int_eq(got.same_host, 1);
    ck_assert_int_eq(got.server_pid, 4321);
    ck_assert_str_eq(got.reason, "");
    tfp_up_resp_clear(&got);
    ck_assert_ptr_null(got.worker_address);
    free(json);

    memset(&r, 0, sizeof r);
    strcpy(r.reason, "UCX disabled by configuration \xe2\x80\x94 \"quoted\" \\ \x01");
    ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_OK);
    ck_assert_str_eq(json, "{\"transport\":\"http\",\"reason\":\"UCX disabled by configuration "
                           "\xe2\x80\x94 \\\"quoted\\\" \\\\ \\u0001\"}");
    memset(&got, 0x55, sizeof got);
    ck_assert_int_eq(tfp_up_resp_parse(json, len, &got, &err), TFP_OK);
    ck_assert_int_eq(got.upgraded, 0);
    ck_assert_str_eq(got.reason, r.reason);
    ck_assert_ptr_null(got.worker_address);
    ck_assert_str_eq(got.token, "");
    ck_assert_int_eq(got.server_pid, 0);
    tfp_up_resp_clear(&got);
    tfp_up_resp_clear(NULL);
    free(json);

    /* a maximal worker address, and same_host false */
    {
        uint8_t *big = malloc(TFP_UP_MAX_ADDR);

        ck_assert_ptr_nonnull(big);
        for (size_t i = 0; i < TFP_UP_MAX_ADDR; i++)
            big[i] = (uint8_t)(i * 7 + (i >> 8));
        ucx_resp(&r, big, TFP_UP_MAX_ADDR);
        r.same_host = 0;
        r.expires_ms = TFP_UP_MAX_EXPIRES_MS;
        ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_OK);
        ck_assert_uint_le(len, TFP_UP_MAX_RESP_JSON);
        ck_assert_int_eq(tfp_up_resp_parse(json, len, &got, &err), TFP_OK);
        ck_assert_uint_eq(got.worker_address_len, TFP_UP_MAX_ADDR);
        ck_assert_mem_eq(got.worker_address, big, TFP_UP_MAX_ADDR);
        ck_assert_int_eq(got.same_host, 0);
        ck_assert_uint_eq(got.expires_ms, TFP_UP_MAX_EXPIRES_MS);
        tfp_up_resp_clear(&got);
        free(json);
        free(big);
    }
}
END_TEST

START_TEST(up_resp_random_roundtrip)
{
    uint8_t addr[700];

    rnd_state = UINT64_C(0x3C6EF372FE94F82B);
    for (int i = 0; i < 2000; i++) {
        tfp_up_resp_t r, got;
        tfp_err_t err;
        char *json;
        size_t len;

        if (rnd() & 1) {
            size_t n = 1 + rnd_below(sizeof addr);

            for (size_t k = 0; k < n; k++)
                addr[k] = (uint8_t)rnd();
            ucx_resp(&r, addr, n);
            for (int k = 0; k < TFP_UP_TOKEN_LEN; k++)
                r.token[k] = "0123456789abcdef"[rnd_below(16)];
            r.expires_ms = 1 + rnd_below(TFP_UP_MAX_EXPIRES_MS);
            r.same_host = (int)(rnd() & 1);
            r.server_pid = 1 + (int64_t)rnd_below(TFP_UP_MAX_PID);
        } else {
            memset(&r, 0, sizeof r);
            do
                rnd_utf8(r.reason, TFP_UP_MAX_REASON);
            while (r.reason[0] == '\0');
        }
        ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_OK);
        ck_assert_msg(tfp_up_resp_parse(json, len, &got, &err) == TFP_OK, "%s: %s", json,
                      err.msg);
        ck_assert_int_eq(got.upgraded, r.upgraded);
        if (r.upgraded) {
            ck_assert_str_eq(got.token, r.token);
            ck_assert_uint_eq(got.expires_ms, r.expires_ms);
            ck_assert_uint_eq(got.worker_address_len, r.worker_address_len);
            ck_assert_mem_eq(got.worker_address, r.worker_address, r.worker_address_len);
            ck_assert_int_eq(got.same_host, r.same_host);
            ck_assert_int_eq(got.server_pid, r.server_pid);
        } else {
            ck_assert_str_eq(got.reason, r.reason);
        }
        tfp_up_resp_clear(&got);
        free(json);
    }
}
END_TEST

START_TEST(up_resp_build_refuses)
{
    static const struct {
        int field;
        const char *want;
    } bad[] = {
        { 0, "token is not 32 lowercase hex characters" },
        { 1, "token is not 32" },
        { 2, "expires_ms 0 is not in 1..600000" },
        { 3, "expires_ms 600001 is not in 1..600000" },
        { 4, "worker address of 0 bytes is not 1..65536" },
        { 5, "worker address of 65537 bytes is not 1..65536" },
        { 6, "worker address of 3 bytes" },
        { 7, "same_host 2 is not 0 or 1" },
        { 8, "server_pid 0 is not in 1..2147483647" },
        { 9, "server_pid 2147483648 is not in" },
        { 10, "upgraded 2 is not 0 or 1" },
        { 11, "reason is not 1..512 bytes of UTF-8" },
        { 12, "reason is not 1..512 bytes of UTF-8" },
        { 13, "reason is not 1..512 bytes of UTF-8" },
        { 14, "token is not 32" },
    };
    uint8_t addr[3] = { 1, 2, 3 };
    tfp_up_resp_t r;
    char *json = (char *)"untouched";
    tfp_err_t err;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ucx_resp(&r, addr, sizeof addr);
        switch (bad[i].field) {
        case 0: r.token[0] = 'A'; break;
        case 1: r.token[31] = '\0'; break;
        case 2: r.expires_ms = 0; break;
        case 3: r.expires_ms = TFP_UP_MAX_EXPIRES_MS + 1; break;
        case 4: r.worker_address_len = 0; break;
        case 5: r.worker_address_len = TFP_UP_MAX_ADDR + 1; break;
        case 6: r.worker_address = NULL; break;
        case 7: r.same_host = 2; break;
        case 8: r.server_pid = 0; break;
        case 9: r.server_pid = INT64_C(2147483648); break;
        case 10: r.upgraded = 2; break;
        case 11: r.upgraded = 0; break;                     /* empty reason */
        case 12: r.upgraded = 0; strcpy(r.reason, "bad \xfe"); break;
        case 13: r.upgraded = 0; memset(r.reason, 'r', sizeof r.reason); break;
        case 14: memset(r.token, 'a', sizeof r.token); break;
        }
        ck_assert_int_eq(tfp_up_resp_build(&r, &json, NULL, &err), TFP_EINVAL);
        ck_assert_msg(strstr(err.msg, bad[i].want) != NULL, "case %zu: '%s' lacks '%s'", i,
                      err.msg, bad[i].want);
    }
    ck_assert_str_eq(json, "untouched");
    ck_assert_int_eq(tfp_up_resp_build(NULL, &json, NULL, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_up_resp_build(&r, NULL, NULL, &err), TFP_EINVAL);
    /* a 512-byte reason is fine */
    memset(&r, 0, sizeof r);
    fill(r.reason, 'r', TFP_UP_MAX_REASON);
    ck_assert_int_eq(tfp_up_resp_build(&r, &json, NULL, &err), TFP_OK);
    free(json);
}
END_TEST

#define UCX_RESP(tok, exp, addr, same, pid)                                               \
    "{\"transport\":\"ucx\",\"token\":" tok ",\"expires_ms\":" exp ",\"worker_address\":" \
    addr ",\"same_host\":" same ",\"server_pid\":" pid "}"
#define GOOD_TOK "\"" TOKEN "\""

static const struct {
    const char *body;
    tfp_status_t want;
    const char *substr;
} RESP_BAD[] = {
    { "", TFP_EPROTO, "upgrade response: invalid JSON" },
    { "[{}]", TFP_EPROTO, "upgrade response: not a JSON object" },
    { "{}", TFP_EPROTO, "upgrade response: missing \"transport\"" },
    { "{\"reason\":\"x\"}", TFP_EPROTO, "missing \"transport\"" },
    { "{\"transport\":\"tcp\"}", TFP_EPROTO, "\"transport\" is not \"ucx\" or \"http\"" },
    { "{\"transport\":1}", TFP_EPROTO, "\"transport\" is not \"ucx\" or \"http\"" },
    { "{\"transport\":\"HTTP\",\"reason\":\"x\"}", TFP_EPROTO, "\"transport\" is not" },
    { "{\"transport\":\"http\"}", TFP_EPROTO, "upgrade response: missing \"reason\"" },
    { "{\"transport\":\"http\",\"reason\":\"\"}", TFP_EPROTO,
      "\"reason\" is not 1..512 bytes of UTF-8" },
    { "{\"transport\":\"http\",\"reason\":7}", TFP_EPROTO, "\"reason\" is not 1..512" },
    { "{\"transport\":\"http\",\"reason\":\"x\",\"token\":" GOOD_TOK "}", TFP_EPROTO,
      "unknown key \"token\"" },
    { "{\"transport\":\"http\",\"reason\":\"x\",\"reason\":\"y\"}", TFP_EPROTO,
      "duplicate key \"reason\"" },
    { "{\"transport\":\"http\",\"transport\":\"ucx\",\"reason\":\"x\"}", TFP_EPROTO,
      "duplicate key \"transport\"" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "true", "1") " 1", TFP_EPROTO,
      "text after the JSON value" },
    { "{\"transport\":\"ucx\",\"token\":" GOOD_TOK ",\"expires_ms\":10000,\"worker_address\":"
      "\"AQID\",\"same_host\":true}", TFP_EPROTO, "missing \"server_pid\"" },
    { "{\"transport\":\"ucx\",\"token\":" GOOD_TOK ",\"expires_ms\":10000,\"worker_address\":"
      "\"AQID\",\"same_host\":true,\"server_pid\":1,\"reason\":\"x\"}", TFP_EPROTO,
      "unknown key \"reason\"" },
    { "{\"transport\":\"ucx\",\"token\":" GOOD_TOK ",\"expires_ms\":10000,\"worker_address\":"
      "\"AQID\",\"same_host\":true,\"server_pid\":1,\"listener\":\"x\"}", TFP_EPROTO,
      "unknown key \"listener\"" },
    { UCX_RESP("\"0123456789ABCDEF0123456789abcdef\"", "10000", "\"AQID\"", "true", "1"),
      TFP_EPROTO, "\"token\" is not 32 lowercase hex characters" },
    { UCX_RESP("\"" TOKEN "0\"", "10000", "\"AQID\"", "true", "1"), TFP_EPROTO,
      "\"token\" is not 32" },
    { UCX_RESP("\"abc\"", "10000", "\"AQID\"", "true", "1"), TFP_EPROTO, "\"token\" is not 32" },
    { UCX_RESP("null", "10000", "\"AQID\"", "true", "1"), TFP_EPROTO, "\"token\" is not 32" },
    { UCX_RESP(GOOD_TOK, "0", "\"AQID\"", "true", "1"), TFP_EPROTO,
      "\"expires_ms\" is not an integer in 1..600000" },
    { UCX_RESP(GOOD_TOK, "600001", "\"AQID\"", "true", "1"), TFP_EPROTO, "\"expires_ms\" is not" },
    { UCX_RESP(GOOD_TOK, "10.5", "\"AQID\"", "true", "1"), TFP_EPROTO, "\"expires_ms\" is not" },
    { UCX_RESP(GOOD_TOK, "\"10000\"", "\"AQID\"", "true", "1"), TFP_EPROTO,
      "\"expires_ms\" is not" },
    { UCX_RESP(GOOD_TOK, "-1", "\"AQID\"", "true", "1"), TFP_EPROTO, "\"expires_ms\" is not" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "1", "1"), TFP_EPROTO,
      "\"same_host\" is not true or false" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "\"true\"", "1"), TFP_EPROTO,
      "\"same_host\" is not" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "null", "1"), TFP_EPROTO, "\"same_host\" is not" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "false", "0"), TFP_EPROTO,
      "\"server_pid\" is not an integer in 1..2147483647" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "false", "2147483648"), TFP_EPROTO,
      "\"server_pid\" is not" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "false", "1E2"), TFP_OK, "" },
    { UCX_RESP(GOOD_TOK, "10000", "1", "true", "1"), TFP_EPROTO,
      "\"worker_address\" is not a string" },
    { UCX_RESP(GOOD_TOK, "10000", "\"\"", "true", "1"), TFP_EPROTO,
      "\"worker_address\" is empty" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQI\"", "true", "1"), TFP_EPROTO,
      "upgrade response: \"worker_address\": base64: length 3 is not a multiple of 4" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQ I\"", "true", "1"), TFP_EPROTO,
      "\"worker_address\": base64: invalid character at offset 2" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQ==\\n\"", "true", "1"), TFP_EPROTO,
      "\"worker_address\": base64: length 5" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AR==\"", "true", "1"), TFP_EPROTO,
      "\"worker_address\": base64: non-zero padding bits at offset 1" },
    { UCX_RESP(GOOD_TOK, "10000", "\"A-_B\"", "true", "1"), TFP_EPROTO,
      "base64: invalid character at offset 1" },
};

START_TEST(up_resp_parse_refuses)
{
    tfp_up_resp_t out, canary;
    tfp_err_t err = { TFP_OK, "" };
    tfp_status_t st;

    memset(&out, 0x66, sizeof out);
    canary = out;
    st = tfp_up_resp_parse(RESP_BAD[_i].body, strlen(RESP_BAD[_i].body), &out, &err);
    ck_assert_msg(st == RESP_BAD[_i].want, "case %d: got %s (%s)", _i, tfp_status_name(st),
                  err.msg);
    if (st == TFP_OK) {
        tfp_up_resp_clear(&out);
        return;
    }
    ck_assert_int_eq(err.code, st);
    ck_assert_msg(strstr(err.msg, RESP_BAD[_i].substr) != NULL, "case %d: '%s' lacks '%s'", _i,
                  err.msg, RESP_BAD[_i].substr);
    ck_assert_msg(strncmp(err.msg, "upgrade response", 16) == 0, "case %d: '%s'", _i, err.msg);
    ck_assert_mem_eq(&out, &canary, sizeof out);
}
END_TEST

START_TEST(up_resp_parse_oversize)
{
    tfp_up_resp_t r, out;
    tfp_err_t err;
    size_t alen = TFP_UP_MAX_ADDR + 3, len;
    uint8_t *addr = calloc(1, alen);
    char *b64, *body;

    ck_assert_ptr_nonnull(addr);
    /* an address one group past the bound: ETOOBIG from base64, named */
    b64 = tfp_up_b64_encode(addr, alen, NULL);
    ck_assert_ptr_nonnull(b64);
    body = malloc(strlen(b64) + 256);
    ck_assert_ptr_nonnull(body);
    len = (size_t)sprintf(body, UCX_RESP(GOOD_TOK, "1", "\"%s\"", "true", "1"), b64);
    ck_assert_int_eq(tfp_up_resp_parse(body, len, &out, &err), TFP_ETOOBIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"worker_address\": base64: decodes to 65539 bytes, "
                                          "more than 65536"));
    free(body);
    free(b64);
    /* a body over the byte bound */
    body = malloc(TFP_UP_MAX_RESP_JSON + 2);
    ck_assert_ptr_nonnull(body);
    ucx_resp(&r, addr, 1);
    {
        char *json;
        size_t jlen;

        ck_assert_int_eq(tfp_up_resp_build(&r, &json, &jlen, &err), TFP_OK);
        memcpy(body, json, jlen);
        memset(body + jlen, '\n', TFP_UP_MAX_RESP_JSON + 1 - jlen);
        free(json);
    }
    ck_assert_int_eq(tfp_up_resp_parse(body, TFP_UP_MAX_RESP_JSON + 1, &out, &err),
                     TFP_ETOOBIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "upgrade response: body of 131073 bytes is over"));
    ck_assert_int_eq(tfp_up_resp_parse(body, TFP_UP_MAX_RESP_JSON, &out, &err), TFP_OK);
    tfp_up_resp_clear(&out);
    free(body);
    free(addr);
    ck_assert_int_eq(tfp_up_resp_parse(NULL, 0, &out, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_up_resp_parse("{}", 2, NULL, &err), TFP_EINVAL);
}
END_TEST

/* ---- base64 -------------------------------------------------------------------------- */

START_TEST(b64_vectors)
{
    static const char *const plain[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
    static const char *const enc[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=",
                                       "Zm9vYmFy" };
    tfp_err_t err;

    for (int i = 0; i < 7; i++) {
        size_t n = strlen(plain[i]), olen = 99;
        char *e = tfp_up_b64_encode(plain[i], n, &olen);
        uint8_t *d = NULL;
        size_t dlen = 99;

        ck_assert_ptr_nonnull(e);
        ck_assert_str_eq(e, enc[i]);
        ck_assert_uint_eq(olen, strlen(enc[i]));
        ck_assert_uint_eq(tfp_up_b64_len(n), olen);
        ck_assert_int_eq(tfp_up_b64_decode(e, olen, 64, &d, &dlen, &err), TFP_OK);
        ck_assert_ptr_nonnull(d);
        ck_assert_uint_eq(dlen, n);
        if (n > 0)
            ck_assert_mem_eq(d, plain[i], n);
        free(d);
        free(e);
    }
    /* every byte value, and the whole alphabet */
    {
        uint8_t all[256], *d;
        size_t dlen;
        char *e;

        for (int i = 0; i < 256; i++)
            all[i] = (uint8_t)i;
        e = tfp_up_b64_encode(all, sizeof all, NULL);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(strncmp(e, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8g", 44), 0);
        ck_assert_int_eq(strcmp(e + strlen(e) - 8, "/P3+/w=="), 0);
        ck_assert_int_eq(tfp_up_b64_decode(e, strlen(e), 256, &d, &dlen, &err), TFP_OK);
        ck_assert_uint_eq(dlen, 256);
        ck_assert_mem_eq(d, all, 256);
        free(d);
        free(e);
        ck_assert_int_eq(tfp_up_b64_decode("+/+/", 4, 3, &d, &dlen, &err), TFP_OK);
        ck_assert_uint_eq(d[0], 0xfb);
        ck_assert_uint_eq(d[1], 0xff);
        ck_assert_uint_eq(d[2], 0xbf);
        free(d);
    }
    ck_assert_ptr_null(tfp_up_b64_encode(NULL, 1, NULL));
    {
        char *e = tfp_up_b64_encode(NULL, 0, NULL);

        ck_assert_ptr_nonnull(e);
        ck_assert_str_eq(e, "");
        free(e);
    }
}
END_TEST

START_TEST(b64_strict)
{
    static const struct {
        const char *s;
        tfp_status_t want;
        const char *substr;
    } bad[] = {
        { "Z", TFP_EPROTO, "length 1 is not a multiple of 4" },
        { "Zg", TFP_EPROTO, "length 2 is not a multiple of 4" },
        { "Zg=", TFP_EPROTO, "length 3" },
        { "Zm9vY", TFP_EPROTO, "length 5" },
        { "Zg==\n", TFP_EPROTO, "length 5" },
        { "Zm 9", TFP_EPROTO, "invalid character at offset 2" },
        { "Zm9v\nZm9v", TFP_EPROTO, "length 9" },
        { "Zm9v\r\nZm", TFP_EPROTO, "invalid character at offset 4" },
        { "Zm-_", TFP_EPROTO, "invalid character at offset 2" },
        { "Zg==Zg==", TFP_EPROTO, "invalid character at offset 2" },
        { "Z===", TFP_EPROTO, "invalid character at offset 1" },
        { "====", TFP_EPROTO, "invalid character at offset 0" },
        { "=Zm9", TFP_EPROTO, "invalid character at offset 0" },
        { "Zh==", TFP_EPROTO, "non-zero padding bits at offset 1" },
        { "Zm9=", TFP_EPROTO, "non-zero padding bits at offset 2" },
        { "Zm8=", TFP_OK, "" },
        { "Zm\xc3\xa9", TFP_EPROTO, "invalid character at offset 2" },
        { "Zm9v", TFP_OK, "" },
    };
    tfp_err_t err;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *d = (uint8_t *)"x";
        size_t dlen = 77;
        tfp_status_t st = tfp_up_b64_decode(bad[i].s, strlen(bad[i].s), 100, &d, &dlen, &err);

        ck_assert_msg(st == bad[i].want, "case %zu '%s': %s (%s)", i, bad[i].s,
                      tfp_status_name(st), err.msg);
        if (st == TFP_OK) {
            free(d);
            continue;
        }
        ck_assert_msg(strstr(err.msg, bad[i].substr) != NULL, "case %zu: '%s'", i, err.msg);
        ck_assert_int_eq(strncmp(err.msg, "base64: ", 8), 0);
        ck_assert_uint_eq(dlen, 77);
    }
    /* a NUL inside the text is just an invalid character */
    {
        uint8_t *d;
        size_t dlen;

        ck_assert_int_eq(tfp_up_b64_decode("Zm\0v", 4, 100, &d, &dlen, &err), TFP_EPROTO);
        ck_assert_ptr_nonnull(strstr(err.msg, "offset 2"));
        ck_assert_int_eq(tfp_up_b64_decode(NULL, 4, 100, &d, &dlen, &err), TFP_EINVAL);
        ck_assert_int_eq(tfp_up_b64_decode("Zm9v", 4, 100, NULL, &dlen, &err), TFP_EINVAL);
        ck_assert_int_eq(tfp_up_b64_decode("Zm9v", 4, 100, &d, NULL, &err), TFP_EINVAL);
    }
}
END_TEST

START_TEST(b64_bounds_and_random)
{
    uint8_t src[300], *d;
    size_t dlen;
    tfp_err_t err;

    ck_assert_uint_eq(tfp_up_b64_len(0), 0);
    ck_assert_uint_eq(tfp_up_b64_len(1), 4);
    ck_assert_uint_eq(tfp_up_b64_len(3), 4);
    ck_assert_uint_eq(tfp_up_b64_len(4), 8);
    ck_assert_uint_eq(tfp_up_b64_len(65536), 87384);
    /* max is on decoded bytes: exactly max passes, one more is ETOOBIG */
    ck_assert_int_eq(tfp_up_b64_decode("Zm9v", 4, 3, &d, &dlen, &err), TFP_OK);
    free(d);
    ck_assert_int_eq(tfp_up_b64_decode("Zm9v", 4, 2, &d, &dlen, &err), TFP_ETOOBIG);
    ck_assert_str_eq(err.msg, "base64: decodes to 3 bytes, more than 2");
    ck_assert_int_eq(tfp_up_b64_decode("Zm8=", 4, 2, &d, &dlen, &err), TFP_OK);
    free(d);
    ck_assert_int_eq(tfp_up_b64_decode("", 0, 0, &d, &dlen, &err), TFP_OK);
    ck_assert_ptr_nonnull(d);
    ck_assert_uint_eq(dlen, 0);
    free(d);

    rnd_state = UINT64_C(0xA4093822299F31D0);
    for (int i = 0; i < 3000; i++) {
        size_t n = rnd_below(sizeof src + 1), elen;
        char *e;

        for (size_t k = 0; k < n; k++)
            src[k] = (uint8_t)rnd();
        e = tfp_up_b64_encode(src, n, &elen);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(elen, tfp_up_b64_len(n));
        ck_assert_int_eq(tfp_up_b64_decode(e, elen, n, &d, &dlen, &err), TFP_OK);
        ck_assert_uint_eq(dlen, n);
        if (n > 0)
            ck_assert_mem_eq(d, src, n);
        free(d);
        /* one flipped character: refused, or decodes to different bytes that encode back to
         * exactly that text (one spelling per byte string) */
        if (elen > 0) {
            size_t at = rnd_below(elen);
            char *again;

            e[at] = (char)(e[at] ^ (1 << rnd_below(7)));
            if (tfp_up_b64_decode(e, elen, n, &d, &dlen, &err) == TFP_OK) {
                again = tfp_up_b64_encode(d, dlen, NULL);
                ck_assert_ptr_nonnull(again);
                ck_assert_str_eq(again, e);
                ck_assert(dlen != n || memcmp(d, src, n) != 0);
                free(again);
                free(d);
            } else {
                ck_assert(err.code == TFP_EPROTO || err.code == TFP_ETOOBIG);
            }
        }
        free(e);
    }
}
END_TEST

/* ---- host identity from /proc -------------------------------------------------------- */

START_TEST(hostid_real)
{
    tfp_up_host_t h, again;
    tfp_err_t err = { TFP_OK, "" };
    char buf[64] = "";
    FILE *f;

    ck_assert_msg(tfx_hostid_get(&h, &err) == TFP_OK, "%s", err.msg);
    ck_assert_int_eq(tfp_up_host_check(&h, &err), TFP_OK);
    ck_assert_int_eq(h.pid, (int64_t)getpid());
    f = fopen("/proc/sys/kernel/random/boot_id", "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(buf, sizeof buf, f));
    fclose(f);
    ck_assert_int_eq(strncmp(buf, h.boot_id, TFP_UP_BOOT_ID_LEN), 0);
    ck_assert_int_eq(tfx_hostid_get(&again, &err), TFP_OK);
    ck_assert_int_eq(tfp_up_host_same(&h, &again), 1);
    ck_assert_int_eq(tfx_hostid_get(NULL, &err), TFP_EINVAL);
}
END_TEST

/* A fake /proc: dir/sys/kernel/random/boot_id holding boot, dir/self/ns/net -> link. */
static void fake_proc(const char *dir, const char *boot, const char *link)
{
    char p[512];
    FILE *f;

    snprintf(p, sizeof p, "%s/sys", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/sys/kernel", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/sys/kernel/random", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/self", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/self/ns", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/sys/kernel/random/boot_id", dir);
    unlink(p);
    if (boot != NULL) {
        f = fopen(p, "w");
        ck_assert_ptr_nonnull(f);
        fputs(boot, f);
        fclose(f);
    }
    snprintf(p, sizeof p, "%s/self/ns/net", dir);
    unlink(p);
    if (link != NULL)
        ck_assert_int_eq(symlink(link, p), 0);
}

static void rm_fake_proc(const char *dir)
{
    static const char *const parts[] = { "sys/kernel/random/boot_id", "self/ns/net",
                                         "sys/kernel/random", "sys/kernel", "sys", "self/ns",
                                         "self", "" };
    char p[512];

    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, parts[i]);
        remove(p);
    }
}

START_TEST(hostid_fake_proc)
{
    static const struct {
        const char *boot, *link, *want;
    } cases[] = {
        { BOOT "\n", NETNS, NULL },
        { BOOT, "net:[1]", NULL },
        { NULL, NETNS, "cannot open" },
        { BOOT "\n", NULL, "cannot read link" },
        { "", NETNS, "does not hold a 36-character lowercase uuid" },
        { BOOT "\n\n", NETNS, "does not hold a 36-character" },
        { BOOT "x\n", NETNS, "does not hold" },
        { "07424F66-80CC-4684-B9FD-2AB7FAAB3CD6\n", NETNS, "does not hold" },
        { BOOT "\n", "net:[1", "does not point at \"net:[N]\"" },
        { BOOT "\n", "net:[11111111111111111111111111111111111111111]", "does not point at" },
        { BOOT "\n", "/tmp/x", "does not point at" },
    };
    char dir[] = "/tmp/tfetch-hostid-XXXXXX";

    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tfp_up_host_t h, canary;
        tfp_err_t err = { TFP_OK, "" };
        tfp_status_t st;

        fake_proc(dir, cases[i].boot, cases[i].link);
        memset(&h, 0x11, sizeof h);
        canary = h;
        st = tfx_hostid_read(dir, &h, &err);
        if (cases[i].want == NULL) {
            ck_assert_msg(st == TFP_OK, "case %zu: %s", i, err.msg);
            ck_assert_str_eq(h.boot_id, BOOT);
            ck_assert_str_eq(h.netns, cases[i].link);
            ck_assert_int_eq(h.pid, (int64_t)getpid());
            continue;
        }
        ck_assert_msg(st == TFP_EINTERNAL, "case %zu: %s (%s)", i, tfp_status_name(st), err.msg);
        ck_assert_msg(strstr(err.msg, cases[i].want) != NULL, "case %zu: '%s'", i, err.msg);
        ck_assert_ptr_nonnull(strstr(err.msg, dir));
        ck_assert_mem_eq(&h, &canary, sizeof h);
    }
    /* boot_id a directory: it opens, but reading it fails */
    {
        char p[512];
        tfp_up_host_t h;
        tfp_err_t err;

        fake_proc(dir, NULL, NETNS);
        snprintf(p, sizeof p, "%s/sys/kernel/random/boot_id", dir);
        ck_assert_int_eq(mkdir(p, 0700), 0);
        ck_assert_int_eq(tfx_hostid_read(dir, &h, &err), TFP_EINTERNAL);
        ck_assert_msg(strstr(err.msg, "cannot read") != NULL, "'%s'", err.msg);
        ck_assert_int_eq(rmdir(p), 0);
    }
    rm_fake_proc(dir);
    {
        char *longroot = malloc(5000);
        tfp_up_host_t h;
        tfp_err_t err;

        ck_assert_ptr_nonnull(longroot);
        memset(longroot, 'a', 4999);
        longroot[4999] = '\0';
        ck_assert_int_eq(tfx_hostid_read(longroot, &h, &err), TFP_EINVAL);
        ck_assert_ptr_nonnull(strstr(err.msg, "too long"));
        free(longroot);

        ck_assert_int_eq(tfx_hostid_read(NULL, &h, &err), TFP_EINVAL);
        ck_assert_int_eq(tfx_hostid_read("/nonexistent-tfetch", &h, &err), TFP_EINTERNAL);
        ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent-tfetch/sys/kernel/random/boot_id"));
    }
}
END_TEST

/* ---- suite --------------------------------------------------------------------------- */

Suite *suite_ucxproto(void)
{
    Suite *s = suite_create("ucxproto");
    TCase *tc;

    tc = tcase_create("ucxframe");
    tcase_add_test(tc, uf_golden_get);
    tcase_add_test(tc, uf_golden_reply);
    tcase_add_test(tc, uf_op_names);
    tcase_add_test(tc, uf_roundtrip_ops);
    tcase_add_test(tc, uf_max_header);
    tcase_add_test(tc, uf_null_args);
    tcase_add_loop_test(tc, uf_rule_refused, 0, N_RULES);
    tcase_add_test(tc, uf_rules_cover_ops);
    tcase_add_test(tc, uf_reject_short);
    tcase_add_test(tc, uf_reject_magic_version);
    tcase_add_test(tc, uf_reject_reserved);
    tcase_add_test(tc, uf_reject_lengths);
    tcase_add_test(tc, uf_reject_nul_in_strings);
    tcase_add_test(tc, uf_random_roundtrip);
    tcase_add_test(tc, uf_random_corruption);
    suite_add_tcase(s, tc);

    tc = tcase_create("upgrade");
    tcase_add_test(tc, up_host_validators);
    tcase_add_test(tc, up_host_check_same_ident);
    tcase_add_test(tc, up_ident_parse_rejects);
    tcase_add_test(tc, up_req_golden_roundtrip);
    tcase_add_test(tc, up_req_random_roundtrip);
    tcase_add_test(tc, up_req_build_refuses);
    tcase_add_loop_test(tc, up_req_parse_refuses, 0,
                        (int)(sizeof REQ_BAD / sizeof REQ_BAD[0]));
    tcase_add_test(tc, up_req_parse_oversize);
    tcase_add_test(tc, up_resp_golden_roundtrip);
    tcase_add_test(tc, up_resp_random_roundtrip);
    tcase_add_test(tc, up_resp_build_refuses);
    tcase_add_loop_test(tc, up_resp_parse_refuses, 0,
                        (int)(sizeof RESP_BAD / sizeof RESP_BAD[0]));
    tcase_add_test(tc, up_resp_parse_oversize);
    suite_add_tcase(s, tc);

    tc = tcase_create("base64");
    tcase_add_test(tc, b64_vectors);
    tcase_add_test(tc, b64_strict);
    tcase_add_test(tc, b64_bounds_and_random);
    suite_add_tcase(s, tc);

    tc = tcase_create("hostid");
    tcase_add_test(tc, hostid_real);
    tcase_add_test(tc, hostid_fake_proc);
    suite_add_tcase(s, tc);
    return s;
}
