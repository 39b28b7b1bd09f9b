/* check_ucxframe.c - the ucxframe suite: the UCX active-message header (proto/ucxframe.c).
 *
 * Every rule of the frame header is a loop case that breaks one field of a valid header and
 * checks that the encoder refuses it (TFP_EINVAL) and that the decoder refuses the same bytes
 * written by a checkless test encoder (TFP_EPROTO), both with the same message; byte-level
 * faults only a decoder can meet have their own cases. Golden bytes pin the wire format;
 * seeded random round trips and random byte flips check that what is accepted comes back
 * identical. Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "proto/op.h"
#include "proto/status.h"
#include "proto/shmframe.h"
#include "proto/answer.h"
#include "proto/http.h"
#include "proto/ucxframe.h"
#include "proto/upgrade.h"
#include "tests/fixtures.h"
#include "tests/suites.h"

#define BOOT "07424f66-80cc-4684-b9fd-2ab7faab3cd6"
#define NETNS "net:[4026531833]"
#define TOKEN "0123456789abcdef0123456789abcdef"

/* ---- helpers ------------------------------------------------------------------------- */

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
    case TFP_UF_FEED:                           /* a pop carrying its ack */
        strcpy(h->request_id, "req-4");
        strcpy(h->user, "alice");
        strcpy(h->name, "f");
        h->flags = TFP_UF_F_FEED;
        h->wait_ms = 100;
        h->feed.op = TFP_UF_FEED_POP;
        h->feed.flags = TFP_UF_FF_HAS_ACK;
        h->feed.ack = 3;
        strcpy(h->feed.dev, "0");
        strcpy(h->feed.consumer, "loop-1");
        break;
    case TFP_UF_PART:                           /* the second 1 MiB of a 3 MiB body */
        strcpy(h->request_id, "req-2");
        h->flags = TFP_UF_F_COND;
        h->body_len = 1 << 20;
        h->cond.flags = TFP_UF_CF_RANGE;
        h->cond.first = 1 << 20;
        h->cond.last = (2 << 20) - 1;
        h->cond.total = 3 << 20;
        break;
    }
}

/* A valid FEED request of feed op k (base's POP, reshaped). */
static void base_feed(tfp_uf_hdr_t *h, int k)
{
    base(h, TFP_UF_FEED);
    h->wait_ms = 0;
    memset(&h->feed, 0, sizeof h->feed);
    h->feed.op = (uint8_t)k;
    switch (k) {
    case TFP_UF_FEED_LIST: h->name[0] = 0; break;
    case TFP_UF_FEED_DECLARE: h->feed.flags = TFP_UF_FF_JSON; h->body_len = 90; break;
    case TFP_UF_FEED_INFEED:
        h->feed.seq = 7;
        strcpy(h->feed.producer, "prod-1");
        h->wait_ms = 500;
        h->body_len = 4096;
        break;
    case TFP_UF_FEED_POP:
        strcpy(h->feed.dev, "gpu0");
        strcpy(h->feed.consumer, "c");
        h->wait_ms = 1000;
        break;
    case TFP_UF_FEED_ACK:
        strcpy(h->feed.dev, "1");
        strcpy(h->feed.consumer, "c");
        h->feed.flags = TFP_UF_FF_HAS_ACK;
        h->feed.ack = UINT64_MAX / 2;
        break;
    case TFP_UF_FEED_DETACH:                    /* the ack is optional, as on POP */
        strcpy(h->feed.dev, "0");
        strcpy(h->feed.consumer, "c");
        h->feed.flags = TFP_UF_FF_HAS_ACK;
        h->feed.ack = 4;
        break;
    case TFP_UF_FEED_OUTFEED_PUSH: strcpy(h->feed.dev, "0"); h->body_len = 16; break;
    case TFP_UF_FEED_OUTFEED_GET: h->feed.after = 9; h->wait_ms = 10; break;
    default: break;                             /* STATS, DELETE, DONE, RESET: the name */
    }
}

/* A pop's REPLY: its item's numbers. */
static void base_feed_reply(tfp_uf_hdr_t *h)
{
    base(h, TFP_UF_REPLY);
    h->flags |= TFP_UF_F_FEED;
    h->http = 200;
    h->feed.op = TFP_UF_FEED_POP;
    h->feed.present = TFP_UF_FP_POSITION | TFP_UF_FP_SEQ | TFP_UF_FP_ROUND |
                      TFP_UF_FP_GENERATION;
    h->feed.position = 5;
    h->feed.seq = 6;
    h->feed.round = 5;
    h->feed.generation = 2;
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
           nmsg = strlen(h->msg), nup = strlen(h->user_principal), o = TFP_UF_FIXED;

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
    p[35] = (uint8_t)nup;
    put_le(p + 36, nmsg, 2);
    put_le(p + 38, h->http, 2);
    memcpy(p + o, h->request_id, nid);
    o += nid;
    memcpy(p + o, h->user, nuser);
    o += nuser;
    memcpy(p + o, h->name, nname);
    o += nname;
    memcpy(p + o, h->msg, nmsg);
    o += nmsg;
    memcpy(p + o, h->user_principal, nup);
    o += nup;
    if (h->flags & TFP_UF_F_FEED) {             /* the feed block, as unchecked */
        const tfp_uf_feed_t *f = &h->feed;
        const uint64_t v[] = {f->seq, f->ack, f->after, f->position, f->round,
                              f->generation, f->device, f->retry_after, f->resume_after};
        size_t nd = strlen(f->dev), np = strlen(f->producer), nc = strlen(f->consumer);
        memset(p + o, 0, TFP_UF_FEED_FIXED);
        p[o] = f->op;
        p[o + 1] = f->flags;
        put_le(p + o + 2, f->present, 2);
        p[o + 4] = (uint8_t)nd;
        p[o + 5] = (uint8_t)np;
        p[o + 6] = (uint8_t)nc;
        for (int i = 0; i < 9; i++)
            put_le(p + o + 8 + 8 * i, v[i], 8);
        o += TFP_UF_FEED_FIXED;
        memcpy(p + o, f->dev, nd);
        memcpy(p + o + nd, f->producer, np);
        memcpy(p + o + nd + np, f->consumer, nc);
        o += nd + np + nc;
    }
    if (h->flags & TFP_UF_F_COND) {             /* the conditions block, as unchecked */
        const tfp_uf_cond_t *c = &h->cond;
        const uint64_t v[] = {c->ttl_s, c->first, c->last, c->total};
        size_t nim = strlen(c->if_match), ninm = strlen(c->if_none_match),
               ne = strlen(c->etag);
        memset(p + o, 0, TFP_UF_COND_FIXED);
        p[o] = c->flags;
        p[o + 1] = (uint8_t)nim;
        p[o + 2] = (uint8_t)ninm;
        p[o + 3] = (uint8_t)ne;
        for (int i = 0; i < 4; i++)
            put_le(p + o + 8 + 8 * i, v[i], 8);
        o += TFP_UF_COND_FIXED;
        memcpy(p + o, c->if_match, nim);
        memcpy(p + o + nim, c->if_none_match, ninm);
        memcpy(p + o + nim + ninm, c->etag, ne);
        o += nim + ninm + ne;
    }
    if (h->flags & TFP_UF_F_BODY_PREFIX) {      /* the prefix_len body bytes it claims */
        memset(p + o, 'p', h->prefix_len);
        o += h->prefix_len;
    }
    return o;
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
    ck_assert_uint_eq(a->prefix_len, b->prefix_len);
    ck_assert_str_eq(a->request_id, b->request_id);
    ck_assert_str_eq(a->user, b->user);
    ck_assert_str_eq(a->name, b->name);
    ck_assert_str_eq(a->msg, b->msg);
    ck_assert_str_eq(a->user_principal, b->user_principal);
    if (a->flags & TFP_UF_F_FEED)
        ck_assert_mem_eq(&a->feed, &b->feed, sizeof a->feed);
    if (a->flags & TFP_UF_F_ANSWER)
        ck_assert_str_eq(a->answer, b->answer);
    ck_assert_mem_eq(a->timing, b->timing, sizeof a->timing);
    if (a->flags & TFP_UF_F_COND) {
        ck_assert_uint_eq(a->cond.flags, b->cond.flags);
        ck_assert_uint_eq(a->cond.ttl_s, b->cond.ttl_s);
        ck_assert_uint_eq(a->cond.first, b->cond.first);
        ck_assert_uint_eq(a->cond.last, b->cond.last);
        ck_assert_uint_eq(a->cond.total, b->cond.total);
        ck_assert_str_eq(a->cond.if_match, b->cond.if_match);
        ck_assert_str_eq(a->cond.if_none_match, b->cond.if_none_match);
        ck_assert_str_eq(a->cond.etag, b->cond.etag);
    }
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
    ck_assert_str_eq(tfp_uf_op_name(TFP_UF_FEED), "FEED");
    ck_assert_str_eq(tfp_uf_op_name(TFP_UF_PART), "PART");
    ck_assert_str_eq(tfp_uf_op_name(0), "?");
    ck_assert_str_eq(tfp_uf_op_name(11), "?");
    ck_assert_str_eq(tfp_uf_feed_op_name(TFP_UF_FEED_POP), "POP");
    ck_assert_str_eq(tfp_uf_feed_op_name(TFP_UF_FEED_RESET), "RESET");
    ck_assert_str_eq(tfp_uf_feed_op_name(TFP_UF_FEED_DETACH), "DETACH");
    ck_assert_str_eq(tfp_uf_feed_op_name(0), "?");
    ck_assert_str_eq(tfp_uf_feed_op_name(13), "?");
    ck_assert_int_eq(tfp_uf_op_is_reply(TFP_UF_REPLY), 1);
    ck_assert_int_eq(tfp_uf_op_is_reply(TFP_UF_HELLO_ACK), 1);
    ck_assert_int_eq(tfp_uf_op_is_reply(TFP_UF_GET), 0);
    ck_assert_int_eq(tfp_uf_op_is_reply(TFP_UF_HELLO), 0);
    ck_assert_int_eq(tfp_uf_op_is_reply(77), 0);
    /* the fixed header, its strings, the larger of a feed block and a cond block, an
     * answer lines block and a timing block */
    ck_assert_uint_eq(TFP_UF_MAX_HEADER,
                      40 + 128 + 128 + 128 + 255 + 512 + 40 + 255 + 255 + 2 + 256 + 16);
}
END_TEST

/* Every op's base header, and the optional-empty forms, go through unchanged. */
START_TEST(uf_roundtrip_ops)
{
    uint8_t buf[TFP_UF_MAX_HEADER], again[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h, d;
    tfp_err_t err;
    size_t len, len2;

    for (int op = TFP_UF_HELLO; op <= TFP_UF_PART; op++) {
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
    /* a HELLO proving its principal (proto/auth.h): 64 lowercase hex after the identity */
    base(&h, TFP_UF_HELLO);
    strcpy(h.msg, BOOT " " NETNS " " TOKEN TOKEN);
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

/* The answer lines block (flag ANSWER): empty in a request (it asks), lines in a REPLY,
 * beside a feed or a cond block; refused on other ops, and when it is not lines. */
START_TEST(uf_answer_block)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h, d;
    tfp_err_t err;
    size_t len;

    base(&h, TFP_UF_GET);
    h.flags |= TFP_UF_F_ANSWER | TFP_UF_F_COND;
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    base(&h, TFP_UF_REPLY);
    h.flags |= TFP_UF_F_ANSWER;
    snprintf(h.answer, sizeof h.answer, "Server-Timing: handler;dur=0.012\nX-New: 1\n");
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    tfp_answer_t a = {0};
    tfp_answer_from_reply(&d, &a);
    ck_assert_uint_eq(a.present, 1u << TFP_AF_SRV_HANDLER);
    ck_assert_uint_eq(a.num[TFP_AF_SRV_HANDLER], 12);
    /* the longest: every string at its bound, and 256 bytes of lines */
    memset(h.answer, 'a', TFP_UF_MAX_ANSWER);
    memcpy(h.answer, "A: ", 3);
    h.answer[TFP_UF_MAX_ANSWER - 1] = '\n';
    h.answer[TFP_UF_MAX_ANSWER] = '\0';
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    /* refused */
    base(&h, TFP_UF_PUT);                   /* a request's: the digest headers */
    h.flags |= TFP_UF_F_ANSWER;
    snprintf(h.answer, sizeof h.answer, "Repr-Digest: sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm"
             "5NMpJWZG3hSuFU=:\n");
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    snprintf(h.answer, sizeof h.answer, "Repr-Digest sha-256\n");     /* not a line */
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_EINVAL);
    base(&h, TFP_UF_BYE);
    h.flags |= TFP_UF_F_ANSWER;
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_EINVAL);
    base(&h, TFP_UF_REPLY);
    h.flags |= TFP_UF_F_ANSWER;
    snprintf(h.answer, sizeof h.answer, "A: 1\n");
    len = encode_ok(&h, buf);
    buf[len - 4] = ' ';                                     /* "A  1\n": not a line */
    ck_assert_int_eq(tfp_uf_decode(buf, len, &d, &err), TFP_EPROTO);
    buf[len - 4] = ':';
    buf[len - 1] = 'x';                                     /* no "\n" at its end */
    ck_assert_int_eq(tfp_uf_decode(buf, len, &d, &err), TFP_EPROTO);
    buf[len - 1] = '\n';
    ck_assert_int_eq(tfp_uf_decode(buf, len - 1, &d, &err), TFP_EPROTO);    /* short */
}
END_TEST

/* The server's time as the timing block: asked by a request's flag (no bytes), answered as
 * 16 bytes at the end of a REPLY, beside the answer lines and the body prefix's place; the
 * typed answer goes in and comes out the same, the time then left out of the lines. */
START_TEST(uf_timing_block)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h, d;
    tfp_err_t err;
    size_t len, plain;

    base(&h, TFP_UF_CALL);
    plain = encode_ok(&h, buf);
    h.flags |= TFP_UF_F_TIMING;             /* a request asks: not one byte more */
    ck_assert_uint_eq(encode_ok(&h, buf), plain);
    decode_ok(buf, plain, &d);
    same_hdr(&h, &d);
    h.timing[0] = 1;                        /* numbers in a request: refused */
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "timing"));
    base(&h, TFP_UF_BYE);
    h.flags |= TFP_UF_F_TIMING;
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_EINVAL);

    tfp_answer_t a = {0}, b = {0};
    tfp_answer_set_u64(&a, TFP_AF_SRV_RECV, 3);
    tfp_answer_set_u64(&a, TFP_AF_SRV_HANDLER, 70000000000ull);    /* over 32 bits: capped */
    tfp_answer_set_u64(&a, TFP_AF_SRV_TOTAL, 9);
    ck_assert_int_eq(tfp_answer_set_str(&a, TFP_AF_REPR_DIGEST, "sha-256=:47DEQpj8HBSa+/TImW+"
                                        "5JCeuQeRkm5NMpJWZG3hSuFU=:"), 0);
    base(&h, TFP_UF_REPLY);
    plain = encode_ok(&h, buf);
    tfp_answer_to_reply(&a, TFP_UF_F_TIMING | TFP_UF_F_ANSWER, &h);
    ck_assert_uint_eq(h.flags & (TFP_UF_F_TIMING | TFP_UF_F_ANSWER),
                      TFP_UF_F_TIMING | TFP_UF_F_ANSWER);
    ck_assert_ptr_null(strstr(h.answer, "T:"));             /* the time: the block's */
    ck_assert_ptr_nonnull(strstr(h.answer, "Repr-Digest: "));
    ck_assert_uint_eq(h.timing[1], TFP_UF_TIMING_NONE);      /* queue: not measured */
    ck_assert_uint_eq(h.timing[2], TFP_UF_TIMING_NONE - 1);
    len = encode_ok(&h, buf);
    ck_assert_uint_eq(len, plain + 2 + strlen(h.answer) + TFP_UF_TIMING_LEN);
    ck_assert_uint_eq(buf[len - 16], 3);                    /* recv, little-endian, last */
    decode_ok(buf, len, &d);
    same_hdr(&h, &d);
    tfp_answer_from_reply(&d, &b);
    ck_assert_uint_eq(b.present, (1u << TFP_AF_SRV_RECV) | (1u << TFP_AF_SRV_HANDLER) |
                                 (1u << TFP_AF_SRV_TOTAL) | (1u << TFP_AF_REPR_DIGEST));
    ck_assert_uint_eq(b.num[TFP_AF_SRV_RECV], 3);
    ck_assert_uint_eq(b.num[TFP_AF_SRV_HANDLER], TFP_UF_TIMING_NONE - 1);
    ck_assert_uint_eq(b.num[TFP_AF_SRV_TOTAL], 9);
    ck_assert_int_eq(tfp_uf_decode(buf, len - 1, &d, &err), TFP_EPROTO);    /* short */
    ck_assert_ptr_nonnull(strstr(err.msg, "timing"));
    /* which request a REPLY is for, before it is decoded in that request's place */
    uint64_t seq = 0;
    ck_assert_int_eq(tfp_uf_peek_reply(buf, len, &seq), 1);
    ck_assert_uint_eq(seq, h.seq);
    ck_assert_int_eq(tfp_uf_peek_reply(buf, TFP_UF_FIXED - 1, &seq), 0);
    buf[5] = TFP_UF_CALL;
    ck_assert_int_eq(tfp_uf_peek_reply(buf, len, &seq), 0);
    buf[5] = TFP_UF_REPLY;
    buf[0] ^= 1;
    ck_assert_int_eq(tfp_uf_peek_reply(buf, len, &seq), 0);
    ck_assert_int_eq(tfp_uf_peek_reply(NULL, len, &seq), 0);
    /* A request that asked ANSWER alone (a client before TIMING) gets its time as a line. */
    base(&h, TFP_UF_REPLY);
    tfp_answer_to_reply(&a, TFP_UF_F_ANSWER, &h);
    ck_assert_uint_eq(h.flags & TFP_UF_F_TIMING, 0);
    ck_assert_ptr_nonnull(strstr(h.answer, "T: 3,-,"));
    /* ... and one that asked nothing, nothing. */
    base(&h, TFP_UF_REPLY);
    tfp_answer_to_reply(&a, 0, &h);
    ck_assert_uint_eq(h.flags & (TFP_UF_F_TIMING | TFP_UF_F_ANSWER), 0);
    ck_assert_uint_eq(encode_ok(&h, buf), plain);
}
END_TEST

/* A feed operation said once (the FEED frame's block) and rendered for HTTP
 * (tfp_uf_feed_http) is, read back by the server's HTTP parser, the same operation the
 * frame asks: one table of cases, every feed op with its fields. */
static void query_value(const char *q, const char *key, const char **out, char *buf, size_t n)
{
    size_t k = strlen(key);
    for (const char *p = q; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL)
        if (strncmp(p, key, k) == 0 && p[k] == '=') {
            size_t v = strcspn(p + k + 1, "&");
            ck_assert_uint_lt(v, n);
            memcpy(buf, p + k + 1, v);
            buf[v] = '\0';
            *out = buf;
        }
}

START_TEST(uf_feed_http)
{
    static const struct {
        int op;
        tfp_op_kind_t kind;
        const char *dev, *consumer;
        uint64_t seq, ack, after;
        int flags;
        uint32_t wait;
    } cases[] = {
        {TFP_UF_FEED_DECLARE, TFP_OP_FEED_DECLARE, "", "", 0, 0, 0, 0, 0},
        {TFP_UF_FEED_STATS, TFP_OP_FEED_STATS, "", "", 0, 0, 0, 0, 0},
        {TFP_UF_FEED_DELETE, TFP_OP_FEED_DELETE, "", "", 0, 0, 0, 0, 0},
        {TFP_UF_FEED_INFEED, TFP_OP_FEED_INFEED, "1", "", 7, 0, 0, 0, 250},
        {TFP_UF_FEED_INFEED, TFP_OP_FEED_INFEED, "", "", 0, 0, 0, 0, 0},
        {TFP_UF_FEED_POP, TFP_OP_FEED_POP, "gpu0", "c-1", 0, 9, 0, TFP_UF_FF_HAS_ACK |
         TFP_UF_FF_REWIND, 100},
        {TFP_UF_FEED_POP, TFP_OP_FEED_POP, "0", "c-1", 0, 0, 0, 0, 0},
        {TFP_UF_FEED_ACK, TFP_OP_FEED_ACK, "0", "c-1", 0, 4, 0, TFP_UF_FF_HAS_ACK, 0},
        {TFP_UF_FEED_DETACH, TFP_OP_FEED_DETACH, "0", "c-1", 0, 4, 0, TFP_UF_FF_HAS_ACK, 0},
        {TFP_UF_FEED_DETACH, TFP_OP_FEED_DETACH, "0", "c-1", 0, 0, 0, 0, 0},
        {TFP_UF_FEED_OUTFEED_PUSH, TFP_OP_FEED_OUTFEED_PUSH, "2", "", 0, 0, 0, 0, 0},
        {TFP_UF_FEED_OUTFEED_GET, TFP_OP_FEED_OUTFEED_GET, "", "", 0, 0, 12, 0, 30},
        {TFP_UF_FEED_DONE, TFP_OP_FEED_DONE, "", "", 0, 0, 0, 0, 0},
        {TFP_UF_FEED_RESET, TFP_OP_FEED_RESET, "", "", 0, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tfp_uf_feed_t f;
        memset(&f, 0, sizeof f);
        f.op = (uint8_t)cases[i].op;
        f.flags = (uint8_t)cases[i].flags;
        f.seq = cases[i].seq;
        f.ack = cases[i].ack;
        f.after = cases[i].after;
        snprintf(f.dev, sizeof f.dev, "%s", cases[i].dev);
        snprintf(f.consumer, sizeof f.consumer, "%s", cases[i].consumer);
        tfp_uf_feed_http_t h;
        ck_assert_int_eq(tfp_uf_feed_http(&f, cases[i].wait, &h), TFP_OK);
        char path[512], q[256] = "", wait[24], ack[24], through[24], after[24], rewind[8];
        const char *qs = strchr(h.path, '?');
        snprintf(path, sizeof path, "/v1/feeds/f%.*s", (int)(qs ? qs - h.path :
                                                            (long)strlen(h.path)), h.path);
        if (qs)
            snprintf(q, sizeof q, "%s", qs + 1);
        int body = cases[i].op == TFP_UF_FEED_DECLARE || cases[i].op == TFP_UF_FEED_INFEED ||
                   cases[i].op == TFP_UF_FEED_OUTFEED_PUSH;
        tfp_http_req_t in = {.method = h.method, .path = path, .content_length = body ? 64 : -1,
                             .content_type = cases[i].op == TFP_UF_FEED_DECLARE
                                                 ? "application/json"
                                                 : body ? "application/x-safetensors" : NULL,
                             .max_body = 1 << 20};
        query_value(q, "wait", &in.wait, wait, sizeof wait);
        query_value(q, "ack", &in.ack, ack, sizeof ack);
        query_value(q, "through", &in.through, through, sizeof through);
        query_value(q, "after", &in.after, after, sizeof after);
        query_value(q, "rewind", &in.rewind, rewind, sizeof rewind);
        for (size_t k = 0; k < h.nheaders; k++) {
            const char **slot = strcmp(h.hname[k], "Tfetch-Seq") == 0      ? &in.seq
                              : strcmp(h.hname[k], "Tfetch-Consumer") == 0 ? &in.consumer
                              : strcmp(h.hname[k], "Tfetch-Producer") == 0 ? &in.producer
                              : strcmp(h.hname[k], "Prefer") == 0           ? &in.prefer
                                                                             : NULL;
            ck_assert_msg(slot != NULL, "header %s", h.hname[k]);
            *slot = h.hvalue[k];
        }
        tfp_op_t op;
        tfp_op_err_t e;
        ck_assert_msg(tfp_http_op_parse(&in, &op, &e) == TFP_OK, "case %zu: %s %s?%s: %s", i,
                      h.method, path, q, e.msg);
        ck_assert_int_eq(op.kind, cases[i].kind);
        ck_assert_str_eq(op.name, "f");
        ck_assert_str_eq(op.sub, cases[i].dev);
        ck_assert_str_eq(op.feed.consumer, cases[i].consumer);
        ck_assert_uint_eq(op.feed.seq, cases[i].seq);
        ck_assert_uint_eq(op.feed.ack, cases[i].ack);
        ck_assert_int_eq(op.feed.has_ack, (cases[i].flags & TFP_UF_FF_HAS_ACK) != 0);
        ck_assert_int_eq(op.feed.rewind, (cases[i].flags & TFP_UF_FF_REWIND) != 0);
        ck_assert_uint_eq(op.feed.after, cases[i].after);
        ck_assert_uint_eq(op.wait_ms, cases[i].wait);
    }
    tfp_uf_feed_t bad;
    memset(&bad, 0, sizeof bad);
    tfp_uf_feed_http_t h;
    ck_assert_int_eq(tfp_uf_feed_http(&bad, 0, &h), TFP_EINVAL);
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
    /* A reply carries no user principal (requests only), so it is one user id short. */
    ck_assert_uint_eq(len, TFP_UF_MAX_HEADER - TFP_UF_MAX_BLOCK - TFP_MAX_USER_ID - 2 -
                               TFP_UF_MAX_ANSWER - TFP_UF_TIMING_LEN);
    decode_ok(buf, len, &d);
    same_hdr(&h, &d);
    /* the same strings on a PUT with the longest conditions: the longest */
    tfp_uf_hdr_t c = h;
    c.op = TFP_UF_PUT;
    c.status = TFP_OK;
    c.http = 0;
    c.body_len = 1;
    c.flags = TFP_UF_F_COND;
    memset(c.user_principal, 'q', TFP_MAX_USER_ID);
    c.user_principal[TFP_MAX_USER_ID] = '\0';
    memset(c.cond.if_match, 'm', TFP_UF_MAX_COND);
    c.cond.if_match[0] = c.cond.if_match[TFP_UF_MAX_COND - 1] = '"';
    c.cond.if_match[TFP_UF_MAX_COND] = '\0';
    memcpy(c.cond.if_none_match, c.cond.if_match, sizeof c.cond.if_match);
    c.cond.ttl_s = TFP_MAX_TTL_S;
    ck_assert_int_eq(tfp_uf_encode(&c, buf, sizeof buf, &len, &err), TFP_OK);
    ck_assert_uint_eq(len, TFP_UF_MAX_HEADER - 2 - TFP_UF_MAX_ANSWER - TFP_UF_TIMING_LEN);
    decode_ok(buf, len, &d);
    same_hdr(&c, &d);
    ck_assert_str_eq(d.cond.if_match, c.cond.if_match);
    ck_assert_uint_eq(d.cond.ttl_s, TFP_MAX_TTL_S);
    /* the same strings on an infeed with the longest device and producer */
    h.op = TFP_UF_FEED;
    h.flags = TFP_UF_F_FEED;
    h.body_len = 1;
    h.feed.op = TFP_UF_FEED_INFEED;
    memset(h.feed.dev, 'd', TFP_MAX_TENSOR_NAME);
    h.feed.dev[TFP_MAX_TENSOR_NAME] = '\0';
    memset(h.feed.producer, 'p', TFP_MAX_USER_ID);
    h.feed.producer[TFP_MAX_USER_ID] = '\0';
    memset(h.user_principal, 'q', TFP_MAX_USER_ID);     /* a request may name whose user */
    h.user_principal[TFP_MAX_USER_ID] = '\0';
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_OK);
    ck_assert_uint_eq(len, TFP_UF_MAX_HEADER - TFP_UF_MAX_BLOCK + TFP_UF_MAX_FEED - 2 -
                               TFP_UF_MAX_ANSWER - TFP_UF_TIMING_LEN);
    decode_ok(buf, len, &d);
    same_hdr(&h, &d);
    /* the same strings on a GET with the longest conditions: the longest */
    h.op = TFP_UF_GET;
    h.flags = TFP_UF_F_COND;
    h.body_len = 0;
    memset(&h.feed, 0, sizeof h.feed);
    for (int i = 0; i + 3 <= TFP_UF_MAX_COND; i += 3) {      /* 85 tags of one letter */
        memcpy(h.cond.if_match + i, "\"a\"", 3);
        memcpy(h.cond.if_none_match + i, "\"b\"", 3);
    }
    h.cond.if_match[TFP_UF_MAX_COND] = h.cond.if_none_match[TFP_UF_MAX_COND] = '\0';
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "entity tags"));  /* over 8 tags: refused */
    memset(h.cond.if_match, 0, sizeof h.cond.if_match);
    memset(h.cond.if_none_match, 0, sizeof h.cond.if_none_match);
    h.cond.if_match[0] = h.cond.if_none_match[0] = '"';   /* one long tag each */
    memset(h.cond.if_match + 1, 'm', TFP_UF_MAX_COND - 2);
    memset(h.cond.if_none_match + 1, 'n', TFP_UF_MAX_COND - 2);
    h.cond.if_match[TFP_UF_MAX_COND - 1] = h.cond.if_none_match[TFP_UF_MAX_COND - 1] = '"';
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_OK);
    /* (the bound leaves room for a reply's answer lines too) */
    ck_assert_uint_eq(len, TFP_UF_MAX_HEADER - 2 - TFP_UF_MAX_ANSWER - TFP_UF_TIMING_LEN);
    decode_ok(buf, len, &d);
    same_hdr(&h, &d);
    h = c;
    /* one byte short of room: refused, nothing written */
    memset(buf, 0x5A, sizeof buf);
    len = 7;
    ck_assert_int_eq(tfp_uf_encode(&h, buf, TFP_UF_MAX_HEADER - 2 - TFP_UF_MAX_ANSWER -
                                   TFP_UF_TIMING_LEN - 1, &len, &err), TFP_EINVAL);
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
    case 1: base(h, TFP_UF_GET); h->op = (tfp_uf_op_t)11; return "unknown op 11";
    case 2: base(h, TFP_UF_GET); h->flags = 4; return "flags 0x0004 has unknown bits";
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
    case 33: base(h, TFP_UF_HELLO_ACK); h->status = (tfp_status_t)-31;    /* no such row */
        return "status -31 is not a known status";
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
    /* the principal's proof after the identity: exactly 64 lowercase hex digits */
    case 62: base(h, TFP_UF_HELLO); strcpy(h->msg, BOOT " " NETNS " " TOKEN);
        return "optional 64-hex-digit proof";
    case 63: base(h, TFP_UF_HELLO); strcpy(h->msg, BOOT " " NETNS " " TOKEN
                                           "0123456789ABCDEF0123456789abcdef");
        return "optional 64-hex-digit proof";
    case 64: base(h, TFP_UF_HELLO); strcpy(h->msg, BOOT " " NETNS " ");
        return "optional 64-hex-digit proof";
    /* a body's prefix in the header: only on requests with a body, 1..2048 bytes, and less
     * than the body */
    case 65: base(h, TFP_UF_PUT); h->flags = TFP_UF_F_BODY_PREFIX; return "flag BODY_PREFIX";
    case 66: base(h, TFP_UF_GET); h->flags = TFP_UF_F_BODY_PREFIX; h->prefix_len = 4;
        return "flag BODY_PREFIX on GET";
    case 67: base(h, TFP_UF_REPLY); h->flags |= TFP_UF_F_BODY_PREFIX; h->prefix_len = 4;
        return "flag BODY_PREFIX on REPLY";
    case 68: base(h, TFP_UF_PUT); h->flags = TFP_UF_F_BODY_PREFIX; h->prefix_len = 1000;
        return "flag BODY_PREFIX";              /* the whole body: nothing left for the data */
    case 69: base(h, TFP_UF_PUT); h->flags = TFP_UF_F_BODY_PREFIX; h->body_len = 1 << 20;
        h->prefix_len = TFP_UF_MAX_PREFIX + 1;
        return "flag BODY_PREFIX";
    case 70: base(h, TFP_UF_PUT); h->prefix_len = 5; *encode_only = 1;
        return "prefix_len 5 without flag BODY_PREFIX";
    }
    return NULL;
}

#define N_RULES 71

START_TEST(uf_rule_refused)
{
    uint8_t buf[TFP_UF_MAX_HEADER + TFP_UF_MAX_PREFIX + 64];
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

/* Byte 35 is the user principal's length (it was a reserved 0, so a frame without one is
 * what it always was): the string follows msg; only on GET, PUT, DELETE, CALL and FEED, with
 * a user, shaped like a user id. */
START_TEST(uf_user_principal)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h, got;
    tfp_err_t err;
    size_t len, n;

    base(&h, TFP_UF_CALL);
    snprintf(h.user, sizeof h.user, "u1");
    size_t plain = encode_ok(&h, buf);
    snprintf(h.user_principal, sizeof h.user_principal, "team.x");
    len = encode_ok(&h, buf);
    ck_assert_uint_eq(len, plain + 6);
    ck_assert_uint_eq(buf[35], 6);
    ck_assert_mem_eq(buf + len - 6, "team.x", 6);
    decode_ok(buf, len, &got);
    ck_assert_str_eq(got.user_principal, "team.x");
    uint8_t raw[TFP_UF_MAX_HEADER];
    ck_assert_uint_eq(raw_encode(&h, raw), len);
    ck_assert_mem_eq(raw, buf, len);
    /* one byte short, or a length over 128 */
    DECODE_REJECTS(buf, len - 1, TFP_EPROTO, "but the header says");
    buf[35] = 129;
    DECODE_REJECTS(buf, len, TFP_EPROTO, "user principal length 129 is over 128");
    buf[35] = 6;
    buf[len - 1] = '/';
    DECODE_REJECTS(buf, len, TFP_EPROTO, "user principal is not [A-Za-z0-9._-]{1,128}");
    buf[len - 1] = '\0';
    DECODE_REJECTS(buf, len, TFP_EPROTO, "user principal contains a NUL byte");
    /* without a user; on ops that carry no user's request */
    h.user[0] = '\0';
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &n, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "user principal without a user"));
    n = raw_encode(&h, raw);
    DECODE_REJECTS(raw, n, TFP_EPROTO, "user principal without a user");
    const tfp_uf_op_t others[] = {TFP_UF_HELLO, TFP_UF_HELLO_ACK, TFP_UF_REPLY, TFP_UF_BYE};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        base(&h, others[i]);
        snprintf(h.user_principal, sizeof h.user_principal, "team.x");
        if (others[i] != TFP_UF_HELLO)
            snprintf(h.user, sizeof h.user, "u1");
        n = raw_encode(&h, raw);
        DECODE_REJECTS(raw, n, TFP_EPROTO, "user principal on");
    }
    const tfp_uf_op_t ok[] = {TFP_UF_GET, TFP_UF_PUT, TFP_UF_DELETE, TFP_UF_FEED};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        base(&h, ok[i]);
        snprintf(h.user, sizeof h.user, "u1");
        snprintf(h.user_principal, sizeof h.user_principal, "%s", "p");
        len = encode_ok(&h, buf);
        decode_ok(buf, len, &got);
        ck_assert_str_eq(got.user_principal, "p");
    }
}
END_TEST

START_TEST(uf_reject_reserved)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    size_t len = base_bytes(TFP_UF_GET, buf);

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

/* ---- FEED frames and the feed block --------------------------------------------------- */

/* Every feed op's request and a reply with every number go through unchanged. */
START_TEST(uf_feed_roundtrip)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h, d;

    for (int k = TFP_UF_FEED_LIST; k <= TFP_UF_FEED_LAST; k++) {
        base_feed(&h, k);
        decode_ok(buf, encode_ok(&h, buf), &d);
        same_hdr(&h, &d);
    }
    base_feed(&h, TFP_UF_FEED_DETACH);          /* a detach without an ack */
    h.feed.flags = 0;
    h.feed.ack = 0;
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    base_feed_reply(&h);
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    ck_assert_uint_eq(d.feed.position, 5);
    ck_assert_uint_eq(d.feed.generation, 2);
    h.feed.present = TFP_UF_FP_ALL;             /* every number, at its extreme */
    h.feed.device = 63;
    h.feed.retry_after = 1;
    h.feed.resume_after = UINT64_MAX;
    h.feed.flags = TFP_UF_FF_JSON;
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    /* a failed feed REPLY: no body, the numbers still (429's Retry-After) */
    base(&h, TFP_UF_REPLY);
    h.flags = TFP_UF_F_FEED;
    h.body_len = 0;
    h.status = TFP_EFULL;
    h.http = 429;
    h.feed.op = TFP_UF_FEED_INFEED;
    h.feed.present = TFP_UF_FP_RETRY_AFTER;
    h.feed.retry_after = 1;
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
}
END_TEST

/* Golden bytes of a small feed block: an ack through 2 on device "1" by consumer "c". */
START_TEST(uf_feed_golden)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h;

    tfp_uf_init(&h, TFP_UF_FEED, 1);
    strcpy(h.request_id, "r");
    strcpy(h.name, "f");
    h.flags = TFP_UF_F_FEED;
    h.feed.op = TFP_UF_FEED_ACK;
    h.feed.flags = TFP_UF_FF_HAS_ACK;
    h.feed.ack = 2;
    strcpy(h.feed.dev, "1");
    strcpy(h.feed.consumer, "c");
    size_t len = encode_ok(&h, buf);
    ck_assert_uint_eq(len, 40 + 2 + 80 + 2);
    ck_assert_uint_eq(buf[5], 9);               /* op FEED */
    ck_assert_uint_eq(buf[6], 0x00);
    ck_assert_uint_eq(buf[7], 0x01);            /* flag FEED: 0x0100 */
    const uint8_t *f = buf + 42;
    static const uint8_t want[8] = {7, 1, 0, 0, 1, 0, 1, 0};
    ck_assert_mem_eq(f, want, 8);
    ck_assert_uint_eq(f[16], 2);                /* ack, little-endian at 16 */
    ck_assert_uint_eq(f[80], '1');
    ck_assert_uint_eq(f[81], 'c');
}
END_TEST

/* Breaks one feed rule of a valid FEED frame (or feed REPLY). */
static const char *feed_rule(int k, tfp_uf_hdr_t *h)
{
    switch (k) {
    case 0: base(h, TFP_UF_FEED); h->flags = 0; return "FEED without its feed block";
    case 1: base(h, TFP_UF_GET); h->flags = TFP_UF_F_FEED; return "flag FEED on GET";
    case 2: base(h, TFP_UF_PUT); h->flags = TFP_UF_F_FEED; return "flag FEED on PUT";
    case 3: base(h, TFP_UF_FEED); h->feed.op = 0; return "unknown feed op 0";
    case 4: base(h, TFP_UF_FEED); h->feed.op = 13; return "unknown feed op 13";
    case 5: base(h, TFP_UF_FEED); h->feed.flags |= 0x80; return "feed flags 0x81 has unknown";
    case 6: base(h, TFP_UF_FEED); h->feed.position = 1; return "FEED POP carries reply fields";
    case 7: base(h, TFP_UF_FEED); h->feed.present = 1; return "carries reply fields";
    case 8: base(h, TFP_UF_FEED); h->name[0] = 0; return "FEED POP needs a feed name";
    case 9: base_feed(h, TFP_UF_FEED_LIST); strcpy(h->name, "f");
        return "FEED LIST takes no feed name";
    case 10: base(h, TFP_UF_FEED); h->feed.dev[0] = 0; return "FEED POP needs a device";
    case 11: base_feed(h, TFP_UF_FEED_ACK); h->feed.dev[0] = 0; return "FEED ACK needs a device";
    case 12: base_feed(h, TFP_UF_FEED_OUTFEED_PUSH); h->feed.dev[0] = 0;
        return "FEED OUTFEED_PUSH needs a device";
    case 13: base_feed(h, TFP_UF_FEED_STATS); strcpy(h->feed.dev, "0");
        return "FEED STATS takes no device";
    case 14: base(h, TFP_UF_FEED); strcpy(h->feed.dev, "a/b"); return "feed device is not";
    case 15: base(h, TFP_UF_FEED); strcpy(h->feed.dev, ".."); return "feed device is not";
    case 16: base(h, TFP_UF_FEED); strcpy(h->feed.producer, "p");
        return "FEED POP takes no producer";
    case 17: base_feed(h, TFP_UF_FEED_INFEED); strcpy(h->feed.producer, "p q");
        return "feed producer is not";
    case 18: base(h, TFP_UF_FEED); h->feed.consumer[0] = 0; return "FEED POP needs a consumer";
    case 19: base_feed(h, TFP_UF_FEED_INFEED); strcpy(h->feed.consumer, "c");
        return "FEED INFEED takes no consumer";
    case 20: base(h, TFP_UF_FEED); strcpy(h->feed.consumer, "c:1");
        return "feed consumer is not";
    case 21: base(h, TFP_UF_FEED); h->feed.seq = 1; return "FEED POP takes no seq";
    case 22: base_feed(h, TFP_UF_FEED_INFEED); h->feed.flags = TFP_UF_FF_HAS_ACK;
        return "FEED INFEED: ack and its flag HAS_ACK disagree";
    case 23: base_feed(h, TFP_UF_FEED_ACK); h->feed.flags = 0; return "FEED ACK: ack and";
    case 24: base(h, TFP_UF_FEED); h->feed.flags = 0; return "FEED POP: ack and its flag";
    case 25: base(h, TFP_UF_FEED); h->feed.after = 1; return "FEED POP takes no after";
    case 26: base_feed(h, TFP_UF_FEED_INFEED); h->feed.seq = UINT64_MAX / 2 + 1;
        return "feed seq, ack or after is above 2^63-1";
    case 27: base_feed(h, TFP_UF_FEED_OUTFEED_GET); h->feed.after = UINT64_MAX;
        return "above 2^63-1";
    case 28: base_feed(h, TFP_UF_FEED_DONE); h->wait_ms = 5;
        return "wait_ms 5 on FEED DONE (which does not wait)";
    case 29: base_feed(h, TFP_UF_FEED_DECLARE); h->feed.flags = 0;
        return "FEED DECLARE: a declaration is a JSON body";
    case 30: base_feed(h, TFP_UF_FEED_DECLARE); h->body_len = 0;
        return "FEED DECLARE: a declaration is a JSON body";
    case 31: base_feed(h, TFP_UF_FEED_INFEED); h->feed.flags = TFP_UF_FF_JSON;
        return "FEED INFEED: only DECLARE has a JSON body";
    case 32: base_feed(h, TFP_UF_FEED_RESET); h->body_len = 3;
        return "body_len 3 on FEED RESET (which has no body)";
    case 33: base(h, TFP_UF_FEED); h->body_len = 3; return "body_len 3 on FEED POP";
    case 34: base_feed_reply(h); strcpy(h->feed.dev, "0");
        return "a feed REPLY carries request fields";
    case 35: base_feed_reply(h); h->feed.ack = 1; return "a feed REPLY carries request fields";
    case 36: base_feed_reply(h); h->feed.flags = TFP_UF_FF_HAS_ACK;
        return "a feed REPLY carries request fields";
    case 37: base_feed_reply(h); h->feed.present |= 0x80;
        return "feed present 0x008f has unknown bits";
    case 38: base_feed_reply(h); h->feed.device = 1;
        return "feed REPLY sets a number its present bits do not flag (bit 4)";
    case 39: base_feed_reply(h); h->flags = TFP_UF_F_FEED; h->body_len = 0;
        h->feed.flags = TFP_UF_FF_JSON;
        return "feed flag JSON on a REPLY without a body";
    case 40: base_feed_reply(h); h->feed.op = 0; return "unknown feed op 0";
    case 41: base(h, TFP_UF_HELLO_ACK); h->flags = TFP_UF_F_FEED; h->feed.op = 1;
        return "flag FEED on HELLO_ACK";
    case 42: base_feed(h, TFP_UF_FEED_DETACH); h->feed.dev[0] = 0;
        return "FEED DETACH needs a device";
    case 43: base_feed(h, TFP_UF_FEED_DETACH); h->feed.consumer[0] = 0;
        return "FEED DETACH needs a consumer";
    case 44: base_feed(h, TFP_UF_FEED_DETACH); h->feed.flags |= TFP_UF_FF_REWIND;
        return "FEED DETACH: only POP may rewind";
    case 45: base_feed(h, TFP_UF_FEED_DETACH); h->wait_ms = 10;
        return "wait_ms 10 on FEED DETACH (which does not wait)";
    case 46: base(h, TFP_UF_FEED); h->feed.flags |= TFP_UF_FF_STAGED;
        h->body_len = TFP_SF_STAGED_LEN; return "FEED POP: flag STAGED is for INFEED";
    case 47: base_feed(h, TFP_UF_FEED_INFEED); h->feed.flags = TFP_UF_FF_STAGED;
        h->body_len = TFP_SF_STAGED_LEN + 1; return "FEED INFEED: flag STAGED is for INFEED";
    case 48: base_feed(h, TFP_UF_FEED_OUTFEED_PUSH); h->feed.flags = TFP_UF_FF_STAGED;
        h->body_len = 0; return "FEED OUTFEED_PUSH: flag STAGED is for INFEED";
    case 49: base_feed_reply(h); h->feed.flags = TFP_UF_FF_STAGED;
        return "a feed REPLY carries request fields";
    }
    return NULL;
}

#define N_FEED_RULES 50

START_TEST(uf_feed_rule_refused)
{
    uint8_t buf[TFP_UF_MAX_HEADER + 512];
    tfp_uf_hdr_t h;
    tfp_err_t err = { TFP_OK, "" };
    const char *want = feed_rule(_i, &h);
    size_t len = 99;

    ck_assert_ptr_nonnull(want);
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_EINVAL);
    ck_assert_uint_eq(len, 99);
    ck_assert_msg(strstr(err.msg, want) != NULL, "feed rule %d: encode says '%s', want '%s'",
                  _i, err.msg, want);
    len = raw_encode(&h, buf);
    decode_rejects_at(100 + _i, buf, len, TFP_EPROTO, want);
}
END_TEST

START_TEST(uf_feed_rules_cover)
{
    tfp_uf_hdr_t h;
    tfp_err_t err;

    ck_assert_ptr_null(feed_rule(N_FEED_RULES, &h));
    base(&h, TFP_UF_FEED);
    ck_assert_int_eq(tfp_uf_check(&h, &err), TFP_OK);
    base_feed_reply(&h);
    ck_assert_int_eq(tfp_uf_check(&h, &err), TFP_OK);
    /* a staged body: 24 bytes on either push */
    base_feed(&h, TFP_UF_FEED_INFEED);
    h.feed.flags = TFP_UF_FF_STAGED;
    h.body_len = TFP_SF_STAGED_LEN;
    ck_assert_int_eq(tfp_uf_check(&h, &err), TFP_OK);
    base_feed(&h, TFP_UF_FEED_OUTFEED_PUSH);
    h.feed.flags = TFP_UF_FF_STAGED;
    h.body_len = TFP_SF_STAGED_LEN;
    ck_assert_int_eq(tfp_uf_check(&h, &err), TFP_OK);
    h.flags |= TFP_UF_F_BODY_PREFIX;                /* ... but never with a prefix */
    h.prefix_len = 8;
    ck_assert_int_ne(tfp_uf_check(&h, &err), TFP_OK);
    ck_assert_msg(strstr(err.msg, "flag STAGED is for INFEED and OUTFEED_PUSH"), "%s", err.msg);
}
END_TEST

/* What only bytes can get wrong in the feed block. */
START_TEST(uf_feed_reject_bytes)
{
    uint8_t buf[TFP_UF_MAX_HEADER + 64];
    tfp_uf_hdr_t h;
    base(&h, TFP_UF_FEED);
    size_t len = encode_ok(&h, buf);
    size_t fb = TFP_UF_FIXED + strlen(h.request_id) + strlen(h.user) + strlen(h.name);

    DECODE_REJECTS(buf, fb + 79, TFP_EPROTO, "is too short for the feed block");
    DECODE_REJECTS(buf, fb, TFP_EPROTO, "is too short for the feed block");
    DECODE_REJECTS(buf, len - 1, TFP_EPROTO, "(40 + strings + feed block)");
    DECODE_REJECTS(buf, len + 1, TFP_EPROTO, "(40 + strings + feed block)");
    buf[fb + 7] = 1;
    DECODE_REJECTS(buf, len, TFP_EPROTO, "feed reserved byte is 1, not 0");
    buf[fb + 7] = 0;
    buf[fb + 6] = 129;
    DECODE_REJECTS(buf, sizeof buf, TFP_EPROTO, "feed producer or consumer length is over 128");
    buf[fb + 6] = (uint8_t)strlen(h.feed.consumer);
    buf[fb + 5] = 200;
    DECODE_REJECTS(buf, sizeof buf, TFP_EPROTO, "feed producer or consumer length is over 128");
    buf[fb + 5] = 0;
    buf[fb + 80] = 0;                           /* the device's first byte */
    DECODE_REJECTS(buf, len, TFP_EPROTO, "feed device contains a NUL byte");
    buf[fb + 80] = '0';
    buf[fb + 81] = 0;                           /* the consumer's */
    DECODE_REJECTS(buf, len, TFP_EPROTO, "feed consumer contains a NUL byte");
    buf[fb + 81] = 'l';
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
        ck_assert_uint_eq(len, len2 + d.prefix_len);   /* a flipped flag may claim a prefix */
        ck_assert_mem_eq(buf, again, len2);
        accepted++;
    }
    ck_assert_int_gt(accepted, 100);
    ck_assert_int_gt(rejected, 100);
}
END_TEST

/* A body's first bytes at the end of the AM header (flag BODY_PREFIX): encoded as the frame
 * alone, the caller appends them; decoded from what follows the frame. */
START_TEST(uf_body_prefix)
{
    uint8_t buf[TFP_UF_MAX_HEADER + TFP_UF_MAX_PREFIX];
    tfp_uf_hdr_t h, d;
    const int ops[] = {TFP_UF_PUT, TFP_UF_CALL, TFP_UF_FEED};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        if (ops[i] == TFP_UF_FEED)
            base_feed(&h, TFP_UF_FEED_INFEED);
        else
            base(&h, (tfp_uf_op_t)ops[i]);
        h.body_len = 1 << 20;
        h.flags |= TFP_UF_F_BODY_PREFIX;
        h.prefix_len = i == 2 ? TFP_UF_MAX_PREFIX : 88;
        size_t len = encode_ok(&h, buf);
        size_t plain = len;
        h.prefix_len = 0;                       /* the frame alone is the same */
        h.flags &= (uint16_t)~TFP_UF_F_BODY_PREFIX;
        ck_assert_uint_eq(encode_ok(&h, buf), plain);
        h.flags |= TFP_UF_F_BODY_PREFIX;
        h.prefix_len = i == 2 ? TFP_UF_MAX_PREFIX : 88;
        encode_ok(&h, buf);
        memset(buf + len, 0xab, h.prefix_len);
        decode_ok(buf, len + h.prefix_len, &d);
        same_hdr(&h, &d);
        ck_assert_uint_eq(d.prefix_len, h.prefix_len);
        /* the flag with nothing after the frame, or too much */
        DECODE_REJECTS(buf, len, TFP_EPROTO, "flag BODY_PREFIX, but 0 bytes follow");
        if (h.prefix_len == TFP_UF_MAX_PREFIX)
            DECODE_REJECTS(buf, len + h.prefix_len + 1, TFP_EPROTO, "flag BODY_PREFIX, but "
                           "2049 bytes follow");
    }
    /* without the flag, bytes after the frame are refused as before */
    base(&h, TFP_UF_PUT);
    size_t len = encode_ok(&h, buf);
    DECODE_REJECTS(buf, len + 3, TFP_EPROTO, "but the header says");
}
END_TEST

/* What a HELLO_ACK offers: words in its msg, the unknown ones ignored. */
/* ---- the conditions block ------------------------------------------------------------- */

/* A valid GET with conditions and a range, and its reply. */
static void base_cond(tfp_uf_hdr_t *h)
{
    base(h, TFP_UF_GET);
    h->flags = TFP_UF_F_COND;
    strcpy(h->cond.if_match, "\"0123456789abcdef-1\"");
    strcpy(h->cond.if_none_match, "W/\"x\", \"0123456789abcdef-2\"");
    h->cond.flags = TFP_UF_CF_RANGE;
    h->cond.first = 8;
    h->cond.last = UINT64_MAX;
}

static void base_cond_reply(tfp_uf_hdr_t *h)
{
    base(h, TFP_UF_REPLY);
    h->http = 206;
    h->flags |= TFP_UF_F_COND;
    strcpy(h->cond.etag, "\"0123456789abcdef-2\"");
    h->cond.flags = TFP_UF_CF_RANGE;
    h->cond.first = 8;
    h->cond.last = 15;
    h->cond.total = 100;
}

START_TEST(uf_cond_roundtrip)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h, d;

    base_cond(&h);
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    base(&h, TFP_UF_PUT);                       /* create-only, with a lifetime */
    h.flags = TFP_UF_F_COND;
    strcpy(h.cond.if_none_match, "*");
    h.cond.ttl_s = TFP_UF_MAX_TTL;
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    base(&h, TFP_UF_DELETE);                    /* an empty block: "send me the ETag" */
    h.flags = TFP_UF_F_COND;
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    base_cond_reply(&h);
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
    base(&h, TFP_UF_REPLY);                     /* a 416: the total alone */
    h.flags = TFP_UF_F_COND;
    h.body_len = 0;
    h.status = TFP_ERANGE;
    h.http = 416;
    h.cond.flags = TFP_UF_CF_RANGE;
    h.cond.first = h.cond.last = UINT64_MAX;
    h.cond.total = 100;
    decode_ok(buf, encode_ok(&h, buf), &d);
    same_hdr(&h, &d);
}
END_TEST

/* Golden bytes: a PUT with If-Match "a" and a TTL of 60 s. */
START_TEST(uf_cond_golden)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h;

    tfp_uf_init(&h, TFP_UF_PUT, 1);
    strcpy(h.request_id, "r");
    strcpy(h.name, "w");
    h.flags = TFP_UF_F_COND;
    strcpy(h.cond.if_match, "\"a\"");
    h.cond.ttl_s = 60;
    size_t len = encode_ok(&h, buf);
    ck_assert_uint_eq(len, 40 + 2 + 40 + 3);
    ck_assert_uint_eq(buf[6], 0x00);
    ck_assert_uint_eq(buf[7], 0x02);            /* flag COND: 0x0200 */
    const uint8_t *c = buf + 42;
    static const uint8_t want[8] = {0, 3, 0, 0, 0, 0, 0, 0};
    ck_assert_mem_eq(c, want, 8);
    ck_assert_uint_eq(c[8], 60);                /* ttl, little-endian at 8 */
    ck_assert_mem_eq(c + 40, "\"a\"", 3);
}
END_TEST

/* Breaks one rule of the conditions block; each must be refused both ways. */
static const char *cond_rule(int k, tfp_uf_hdr_t *h)
{
    switch (k) {
    case 0: base_cond(h); h->op = TFP_UF_CALL; h->wait_ms = 0; h->body_len = 1;
        return "flag COND on CALL";
    case 1: base_cond(h); h->cond.flags |= 0x80; return "unknown bits";
    case 2: base_cond(h); strcpy(h->cond.if_match, "abc"); return "entity tags";
    case 3: base_cond(h); strcpy(h->cond.if_none_match, "\"a\" \"b\""); return "entity tags";
    case 4: base_cond(h); h->cond.ttl_s = 5; return "PUT only";
    case 5: base(h, TFP_UF_PUT); h->flags = TFP_UF_F_COND; h->cond.ttl_s = TFP_UF_MAX_TTL + 1;
        return "at most";
    case 6: base_cond(h); h->cond.first = 9; h->cond.last = 8; return "first <= last";
    case 7: base(h, TFP_UF_PUT); h->flags = TFP_UF_F_COND; h->cond.flags = TFP_UF_CF_RANGE;
        return "GET only";
    case 8: base_cond(h); h->cond.flags = 0; return "GET only";    /* numbers without RANGE */
    case 9: base_cond(h); strcpy(h->cond.etag, "\"e\""); return "reply fields";
    case 10: base_cond(h); h->cond.total = 1; return "reply fields";
    case 11: base_cond_reply(h); strcpy(h->cond.if_match, "*"); return "request fields";
    case 12: base_cond_reply(h); h->cond.ttl_s = 1; return "request fields";
    case 13: base_cond_reply(h); strcpy(h->cond.etag, "e"); return "one entity tag";
    case 14: base_cond_reply(h); h->cond.last = 100; return "within its total";
    case 15: base_cond_reply(h); h->cond.first = 16; return "within its total";
    case 16: base_cond_reply(h); h->cond.flags = 0; return "without flag RANGE";
    case 17: base_cond_reply(h); h->cond.flags = 0; h->cond.first = h->cond.last =
        h->cond.total = 0; h->cond.etag[0] = '\0'; return "without an etag or a range";
    case 18: base_feed_reply(h); h->flags |= TFP_UF_F_COND; strcpy(h->cond.etag, "\"e\"");
        return "COND and FEED";
    }
    return NULL;
}
#define N_COND_RULES 19

START_TEST(uf_cond_rule_refused)
{
    uint8_t buf[TFP_UF_MAX_HEADER + 64];
    tfp_uf_hdr_t h;
    tfp_err_t err;
    size_t len = 0;
    const char *want = cond_rule(_i, &h);

    ck_assert_ptr_nonnull(want);
    ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_EINVAL);
    ck_assert_msg(strstr(err.msg, want) != NULL, "rule %d: '%s' lacks '%s'", _i, err.msg, want);
    /* the same frame, written raw, is refused by the decoder */
    len = raw_encode(&h, buf);
    DECODE_REJECTS(buf, len, TFP_EPROTO, want);
}
END_TEST

/* What only raw bytes can get wrong in the block: its length, reserved bytes, a long etag,
 * a NUL inside a string. */
START_TEST(uf_cond_reject_bytes)
{
    uint8_t buf[TFP_UF_MAX_HEADER + 64];
    tfp_uf_hdr_t h;
    base_cond_reply(&h);
    size_t len = encode_ok(&h, buf);
    size_t cb = len - TFP_UF_COND_FIXED - strlen(h.cond.etag);
    DECODE_REJECTS(buf, cb + 10, TFP_EPROTO, "too short for the cond block");
    DECODE_REJECTS(buf, len - 1, TFP_EPROTO, "the header says");
    buf[cb + 5] = 1;
    DECODE_REJECTS(buf, len, TFP_EPROTO, "reserved");
    buf[cb + 5] = 0;
    buf[cb + 3] = TFP_UF_MAX_ETAG + 1;
    DECODE_REJECTS(buf, len, TFP_EPROTO, "etag length");
    buf[cb + 3] = (uint8_t)strlen(h.cond.etag);
    buf[cb + TFP_UF_COND_FIXED + 2] = '\0';
    DECODE_REJECTS(buf, len, TFP_EPROTO, "NUL");
}
END_TEST

START_TEST(uf_features)
{
    ck_assert_int_eq(tfp_uf_has_feature(TFP_UF_FEATURES, TFP_UF_FEATURE_BODY_PREFIX), 1);
    ck_assert_int_eq(tfp_uf_has_feature(TFP_UF_FEATURES, TFP_UF_FEATURE_COND), 1);
    ck_assert_int_eq(tfp_uf_has_feature(TFP_UF_FEATURES, TFP_UF_FEATURE_PARTS), 1);
    ck_assert_uint_ne(tfp_uf_feature_bit(TFP_UF_FEATURE_PARTS), 0);
    ck_assert_int_eq(tfp_uf_has_feature("x body-prefix y", "body-prefix"), 1);
    ck_assert_int_eq(tfp_uf_has_feature("  body-prefix", "body-prefix"), 1);
    ck_assert_int_eq(tfp_uf_has_feature("body-prefixes", "body-prefix"), 0);
    ck_assert_int_eq(tfp_uf_has_feature("body", "body-prefix"), 0);
    ck_assert_int_eq(tfp_uf_has_feature("", "body-prefix"), 0);
    ck_assert_int_eq(tfp_uf_has_feature("a b", ""), 0);
}
END_TEST

/* ---- bodies in parts ------------------------------------------------------------------- */

/* The frames of a body in parts: flag PARTS where it may go, a PART's fields, each refused
 * with what it breaks, encoder and decoder alike. */
START_TEST(uf_part_rules)
{
    uint8_t buf[TFP_UF_MAX_HEADER + 64];
    tfp_uf_hdr_t h, d;
    tfp_err_t err;
    size_t len;

    /* flag PARTS on a GET, PUT, CALL and REPLY */
    tfp_uf_op_t ok[] = {TFP_UF_GET, TFP_UF_PUT, TFP_UF_CALL, TFP_UF_REPLY};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        base(&h, ok[i]);
        h.flags |= TFP_UF_F_PARTS;
        decode_ok(buf, encode_ok(&h, buf), &d);
        same_hdr(&h, &d);
    }
    tfp_uf_op_t refused[] = {TFP_UF_DELETE, TFP_UF_FEED, TFP_UF_HELLO, TFP_UF_BYE, TFP_UF_PART};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        base(&h, refused[i]);
        h.flags |= TFP_UF_F_PARTS;
        ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_EINVAL);
        DECODE_REJECTS(buf, raw_encode(&h, buf), TFP_EPROTO, "PART");
    }
    /* a PART: its range holds its bytes, within the total, and nothing else */
#define PART_REFUSED(stmt, want)                                                              \
    do {                                                                                      \
        base(&h, TFP_UF_PART);                                                                \
        stmt;                                                                                 \
        ck_assert_int_eq(tfp_uf_encode(&h, buf, sizeof buf, &len, &err), TFP_EINVAL);         \
        ck_assert_msg(strstr(err.msg, want), "'%s' lacks '%s'", err.msg, want);               \
        DECODE_REJECTS(buf, raw_encode(&h, buf), TFP_EPROTO, want);                           \
    } while (0)
    PART_REFUSED(h.cond.last = h.cond.total, "within the total");
    PART_REFUSED(h.body_len = 5, "within the total");
    PART_REFUSED((h.cond.first = 9, h.cond.last = 8), "within the total");
    PART_REFUSED(h.body_len = 0, "at least one byte");
    PART_REFUSED(h.cond.flags = 0, "only its range");
    PART_REFUSED(strcpy(h.cond.etag, "\"e\""), "only its range");
    PART_REFUSED(h.cond.ttl_s = 5, "only its range");
    PART_REFUSED(strcpy(h.name, "w"), "flag COND alone");
    PART_REFUSED(strcpy(h.user, "u"), "flag COND alone");
    PART_REFUSED(strcpy(h.msg, "m"), "flag COND alone");
    PART_REFUSED(h.flags |= TFP_UF_F_REPLY_HAS_BODY, "flag COND alone");
    PART_REFUSED(h.flags = 0, "flag COND alone");
    PART_REFUSED(h.request_id[0] = 0, "request id is missing");
    PART_REFUSED(h.wait_ms = 1, "wait_ms");
    PART_REFUSED(h.status = TFP_EBUSY, "must be 0");
#undef PART_REFUSED
}
END_TEST

/* A body in parts, sent with tfp_uf_parts_next and taken with tfp_uf_parts_take, and every
 * way a part can be out of place. */
START_TEST(uf_parts_sequence)
{
    const uint64_t MiB = 1 << 20;
    tfp_uf_hdr_t first, p;
    tfp_uf_parts_t tx, rx, keep;
    tfp_err_t err;

    base(&first, TFP_UF_PUT);
    first.flags |= TFP_UF_F_PARTS | TFP_UF_F_BODY_PREFIX;
    first.body_len = 5 * MiB + 7;
    first.prefix_len = 100;
    /* without flag PARTS the frame's bytes must be the whole body */
    first.flags &= (uint16_t)~TFP_UF_F_PARTS;
    ck_assert_int_eq(tfp_uf_parts_begin(&rx, &first, 2 * MiB - 100, &err), TFP_EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "no flag PARTS"));
    ck_assert_int_eq(tfp_uf_parts_begin(&rx, &first, first.body_len - 100, &err), TFP_OK);
    ck_assert_int_eq(tfp_uf_parts_done(&rx), 1);
    first.flags |= TFP_UF_F_PARTS;
    ck_assert_int_eq(tfp_uf_parts_begin(&rx, &first, first.body_len, &err), TFP_EPROTO);
    ck_assert_int_eq(tfp_uf_parts_begin(&rx, &first, 1000, &err), TFP_EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "at least"));
    /* 2 MiB in the first frame, then 2 MiB, then 1 MiB + 7 */
    ck_assert_int_eq(tfp_uf_parts_begin(&rx, &first, 2 * MiB - 100, &err), TFP_OK);
    ck_assert_int_eq(tfp_uf_parts_done(&rx), 0);
    ck_assert_int_eq(tfp_uf_parts_begin(&tx, &first, 2 * MiB - 100, &err), TFP_OK);
    uint64_t sizes[] = {2 * MiB};
    for (int i = 0; i < 1; i++) {
        uint8_t buf[TFP_UF_MAX_HEADER];
        tfp_uf_hdr_t d;
        tfp_uf_parts_next(&tx, sizes[i], &p);
        decode_ok(buf, encode_ok(&p, buf), &d);     /* what goes on the wire is valid */
        same_hdr(&p, &d);
        keep = rx;
        /* out of place: another request's, a gap, data not as long as the frame says */
        d.seq++;
        ck_assert_int_eq(tfp_uf_parts_take(&rx, &d, d.body_len, &err), TFP_EPROTO);
        ck_assert_ptr_nonnull(strstr(err.msg, "another request"));
        d.seq--;
        strcpy(d.request_id, "other");
        ck_assert_int_eq(tfp_uf_parts_take(&rx, &d, d.body_len, &err), TFP_EPROTO);
        strcpy(d.request_id, p.request_id);
        ck_assert_int_eq(tfp_uf_parts_take(&rx, &d, d.body_len - 1, &err), TFP_EPROTO);
        ck_assert_ptr_nonnull(strstr(err.msg, "comes next"));
        tfp_uf_hdr_t gap = d;
        gap.cond.first++;
        gap.cond.last++;
        ck_assert_int_eq(tfp_uf_parts_take(&rx, &gap, gap.body_len, &err), TFP_EPROTO);
        ck_assert_uint_eq(rx.next, keep.next);     /* a refused part changes nothing */
        ck_assert_int_eq(tfp_uf_parts_take(&rx, &d, d.body_len, &err), TFP_OK);
        ck_assert_int_eq(tfp_uf_parts_take(&rx, &d, d.body_len, &err), TFP_EPROTO);
    }
    ck_assert_uint_eq(rx.next, 4 * MiB);
    /* a small part before the last is refused; the last may be small */
    tfp_uf_parts_t small = tx;
    tfp_uf_parts_next(&small, 1000, &p);
    ck_assert_int_eq(tfp_uf_parts_take(&rx, &p, p.body_len, &err), TFP_EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "before the last"));
    tfp_uf_parts_next(&tx, UINT64_MAX, &p);         /* what is left: 1 MiB + 7 */
    ck_assert_uint_eq(p.body_len, MiB + 7);
    ck_assert_int_eq(tfp_uf_parts_take(&rx, &p, p.body_len, &err), TFP_OK);
    ck_assert_int_eq(tfp_uf_parts_done(&rx), 1);
    ck_assert_int_eq(tfp_uf_parts_take(&rx, &p, p.body_len, &err), TFP_EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "after the body's last byte"));
    /* a total that differs from the first frame's */
    ck_assert_int_eq(tfp_uf_parts_begin(&rx, &first, 2 * MiB - 100, &err), TFP_OK);
    base(&p, TFP_UF_PART);
    p.seq = first.seq;
    strcpy(p.request_id, first.request_id);
    p.cond.first = 2 * MiB;
    p.cond.last = 3 * MiB - 1;
    p.cond.total = 9 * MiB;
    ck_assert_int_eq(tfp_uf_parts_take(&rx, &p, p.body_len, &err), TFP_EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "comes next"));
}
END_TEST

/* ---- suite --------------------------------------------------------------------------- */

Suite *suite_ucxframe(void)
{
    Suite *s = suite_create("ucxframe");
    TCase *tc;

    tc = tcase_create("ucxframe");
    tcase_add_test(tc, uf_golden_get);
    tcase_add_test(tc, uf_golden_reply);
    tcase_add_test(tc, uf_op_names);
    tcase_add_test(tc, uf_roundtrip_ops);
    tcase_add_test(tc, uf_max_header);
    tcase_add_test(tc, uf_answer_block);
    tcase_add_test(tc, uf_timing_block);
    tcase_add_test(tc, uf_feed_http);
    tcase_add_test(tc, uf_null_args);
    tcase_add_loop_test(tc, uf_rule_refused, 0, N_RULES);
    tcase_add_test(tc, uf_rules_cover_ops);
    tcase_add_test(tc, uf_reject_short);
    tcase_add_test(tc, uf_reject_magic_version);
    tcase_add_test(tc, uf_reject_reserved);
    tcase_add_test(tc, uf_user_principal);
    tcase_add_test(tc, uf_reject_lengths);
    tcase_add_test(tc, uf_reject_nul_in_strings);
    tcase_add_test(tc, uf_feed_roundtrip);
    tcase_add_test(tc, uf_feed_golden);
    tcase_add_loop_test(tc, uf_feed_rule_refused, 0, N_FEED_RULES);
    tcase_add_test(tc, uf_feed_rules_cover);
    tcase_add_test(tc, uf_feed_reject_bytes);
    tcase_add_test(tc, uf_body_prefix);
    tcase_add_test(tc, uf_features);
    tcase_add_test(tc, uf_cond_roundtrip);
    tcase_add_test(tc, uf_cond_golden);
    tcase_add_loop_test(tc, uf_cond_rule_refused, 0, N_COND_RULES);
    tcase_add_test(tc, uf_cond_reject_bytes);
    tcase_add_test(tc, uf_part_rules);
    tcase_add_test(tc, uf_parts_sequence);
    tcase_add_test(tc, uf_random_roundtrip);
    tcase_add_test(tc, uf_random_corruption);
    suite_add_tcase(s, tc);
    return s;
}
