/* check_shmframe.c - the shmframe suite: the shm transport's messages (proto/shmframe.c):
 * round trips of every op, and each rule the decoder enforces on hostile bytes, the feed
 * ring's messages (RING's FEED/DEV/CONSUMER, ITEM's numbers) included.
 *
 * Single-threaded, no I/O.
 */
#include "config.h"

#include <string.h>

#include <check.h>

#include "proto/op.h"
#include "proto/shmframe.h"
#include "tests/suites.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

static tfp_sf_t msg(tfp_sf_op_t op, const char *str)
{
    tfp_sf_t m;
    memset(&m, 0, sizeof m);
    m.op = op;
    m.seq = 42;
    if (str) {
        m.str_len = strlen(str);
        memcpy(m.str, str, m.str_len + 1);
    }
    return m;
}

static size_t enc(const tfp_sf_t *m, uint8_t *buf)
{
    tfp_err_t err;
    size_t n = tfp_sf_encode(m, buf, TFP_SF_MAX, &err);
    ck_assert_msg(n > 0, "%s", err.msg);
    return n;
}

/* CALL: the route, user and request id round trip; each rule refuses a forged one (decoder)
 * and an invalid one (encoder); ALLOC takes flag CALL, no other op does; HELLO's OK REPLY
 * carries the capability bits. */
START_TEST(sf_call)
{
    uint8_t buf[TFP_SF_MAX];
    tfp_sf_t m = msg(TFP_SF_CALL, NULL), out;
    tfp_err_t err;
    char route[TFP_MAX_TENSOR_NAME + 1], user[TFP_MAX_USER_ID + 1];
    char rid[TFP_MAX_REQUEST_ID + 1];
    m.lease = 7;
    m.a = 4096;
    ck_assert_int_eq(tfp_sf_set_call(&m, "echo", "alice", "host:1:7", &err), TFP_OK);
    ck_assert_str_eq(m.str, "echo\nUser: alice\nRequest-Id: host:1:7");
    size_t n = enc(&m, buf);
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_OK);
    ck_assert_int_eq(out.op, TFP_SF_CALL);
    ck_assert_int_eq(tfp_sf_call_spec(&out, route, user, rid, &err), TFP_OK);
    ck_assert_str_eq(route, "echo");
    ck_assert_str_eq(user, "alice");
    ck_assert_str_eq(rid, "host:1:7");
    /* Each line is optional; the route alone is the plainest CALL. */
    static const char *const ok[] = {"echo", "echo\nUser: u", "echo\nRequest-Id: r-1"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        tfp_sf_t q = msg(TFP_SF_CALL, ok[i]);
        q.lease = 1;
        q.a = 1;
        n = enc(&q, buf);
        ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_OK);
        ck_assert_int_eq(tfp_sf_call_spec(&out, route, user, rid, &err), TFP_OK);
        ck_assert_str_eq(route, "echo");
    }
    /* Refused: a bad route, user or id, lines out of order or twice or unknown, no lease,
     * no length, b set, a flag. */
    static const char *const bad[] = {
        "", "../x", "echo\n", "echo\nUser: ", "echo\nUser: a b", "echo\nRequest-Id: a/b",
        "echo\nRequest-Id: r\nUser: u", "echo\nUser: u\nUser: v", "echo\nX: y", "echo\nuser: u",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tfp_sf_t q = msg(TFP_SF_CALL, bad[i]);
        q.lease = 1;
        q.a = 1;
        ck_assert_msg(tfp_sf_encode(&q, buf, sizeof buf, &err) == 0, "encoded '%s'", bad[i]);
        ck_assert_int_eq(err.code, TFP_EINVAL);
        /* the same bytes forged on the wire */
        tfp_sf_t ok1 = msg(TFP_SF_CALL, "echo");
        ok1.lease = 1;
        ok1.a = 1;
        size_t k = enc(&ok1, buf);
        size_t sl = strlen(bad[i]);
        buf[6] = (uint8_t)sl;
        buf[7] = 0;
        memcpy(buf + TFP_SF_FIXED, bad[i], sl);
        k = TFP_SF_FIXED + sl;
        ck_assert_msg(tfp_sf_decode(buf, k, &out, &err) == TFP_EPROTO, "decoded '%s'", bad[i]);
    }
    ck_assert_int_eq(tfp_sf_set_call(&m, "echo", "a b", NULL, &err), TFP_EINVAL);
    tfp_sf_t q = msg(TFP_SF_CALL, "echo");
    q.a = 1;                                        /* no lease */
    ck_assert_uint_eq(tfp_sf_encode(&q, buf, sizeof buf, &err), 0);
    q.lease = 1;
    q.a = 0;                                        /* no length */
    ck_assert_uint_eq(tfp_sf_encode(&q, buf, sizeof buf, &err), 0);
    q.a = 1;
    q.b = 1;
    ck_assert_uint_eq(tfp_sf_encode(&q, buf, sizeof buf, &err), 0);
    q.b = 0;
    q.flags = TFP_SF_F_CALL;
    ck_assert_uint_eq(tfp_sf_encode(&q, buf, sizeof buf, &err), 0);
    /* ALLOC with flag CALL; GET and COMMIT without it. */
    q = msg(TFP_SF_ALLOC, NULL);
    q.a = 100;
    q.flags = TFP_SF_F_CALL;
    n = enc(&q, buf);
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_OK);
    ck_assert_uint_eq(out.flags, TFP_SF_F_CALL);
    q = msg(TFP_SF_GET, "w");
    q.flags = TFP_SF_F_CALL;
    ck_assert_uint_eq(tfp_sf_encode(&q, buf, sizeof buf, &err), 0);
    /* HELLO's answer: the capabilities in a. */
    q = msg(TFP_SF_REPLY, NULL);
    q.a = TFP_SF_CAPS;
    n = enc(&q, buf);
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_OK);
    ck_assert_uint_eq(out.a & TFP_SF_CAP_CALL, TFP_SF_CAP_CALL);
}
END_TEST

START_TEST(sf_round_trips)
{
    uint8_t buf[TFP_SF_MAX];
    tfp_sf_t in[6], out;
    tfp_err_t err;
    in[0] = msg(TFP_SF_HELLO, TOKEN);
    in[1] = msg(TFP_SF_GET, "layer.0.w");
    in[2] = msg(TFP_SF_ALLOC, NULL);
    in[2].a = (uint64_t)1 << 30;
    in[3] = msg(TFP_SF_COMMIT, "w");
    in[3].lease = 7;
    in[3].a = 100;
    in[4] = msg(TFP_SF_RELEASE, NULL);
    in[4].lease = 9;
    in[5] = msg(TFP_SF_REPLY, NULL);
    in[5].lease = 3;
    in[5].a = 4096;
    in[5].b = 77;
    for (int i = 0; i < 6; i++) {
        size_t n = enc(&in[i], buf);
        ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_OK);
        ck_assert_int_eq(out.op, in[i].op);
        ck_assert_uint_eq(out.seq, 42);
        ck_assert_uint_eq(out.lease, in[i].lease);
        ck_assert_uint_eq(out.a, in[i].a);
        ck_assert_uint_eq(out.b, in[i].b);
        ck_assert_str_eq(out.str, in[i].str);
    }
    tfp_sf_t e = msg(TFP_SF_REPLY, "no such tensor");
    e.status = TFP_ENOTFOUND;
    size_t n = enc(&e, buf);
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_OK);
    ck_assert_int_eq(out.status, TFP_ENOTFOUND);
    ck_assert_str_eq(out.str, "no such tensor");
}
END_TEST

/* What the encoder refuses (so no peer of ours sends it). */
START_TEST(sf_encode_refuses)
{
    uint8_t buf[TFP_SF_MAX];
    tfp_err_t err;
    tfp_sf_t m = msg(TFP_SF_HELLO, "short");
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    ck_assert_int_eq(err.code, TFP_EINVAL);
    m = msg(TFP_SF_GET, "../x");
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m = msg(TFP_SF_ALLOC, NULL);                    /* size 0 */
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m = msg(TFP_SF_RELEASE, NULL);                  /* no lease */
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m = msg(TFP_SF_GET, "w");
    m.status = TFP_EIO;                             /* a request with a status */
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m = msg(TFP_SF_REPLY, "x");
    m.status = 12345;
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m = msg(TFP_SF_GET, "w");
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, 10, &err), 0);     /* no room */
}
END_TEST

/* Hostile bytes: each rule of the decoder, on an otherwise valid message. */
START_TEST(sf_decode_refuses)
{
    uint8_t buf[TFP_SF_MAX + 16], bad[TFP_SF_MAX + 16];
    tfp_sf_t out, m = msg(TFP_SF_GET, "w");
    tfp_err_t err;
    size_t n = enc(&m, buf);
    out.seq = 999;
    ck_assert_int_eq(tfp_sf_decode(buf, TFP_SF_FIXED - 1, &out, &err), TFP_EPROTO);
    ck_assert_int_eq(tfp_sf_decode(buf, n - 1, &out, &err), TFP_EPROTO);   /* short string */
    memcpy(bad, buf, n);
    bad[n] = 'x';
    ck_assert_int_eq(tfp_sf_decode(bad, n + 1, &out, &err), TFP_EPROTO);   /* trailing */
    memcpy(bad, buf, n);
    bad[0] ^= 1;
    ck_assert_int_eq(tfp_sf_decode(bad, n, &out, &err), TFP_EPROTO);       /* magic */
    memcpy(bad, buf, n);
    bad[4] = 2;
    ck_assert_int_eq(tfp_sf_decode(bad, n, &out, &err), TFP_EPROTO);       /* version */
    memcpy(bad, buf, n);
    bad[5] = 99;
    ck_assert_int_eq(tfp_sf_decode(bad, n, &out, &err), TFP_EPROTO);       /* op */
    memcpy(bad, buf, n);
    bad[21] = 1;
    ck_assert_int_eq(tfp_sf_decode(bad, n, &out, &err), TFP_EPROTO);       /* reserved */
    memcpy(bad, buf, n);
    bad[TFP_SF_FIXED] = 0;
    ck_assert_int_eq(tfp_sf_decode(bad, n, &out, &err), TFP_EPROTO);       /* NUL */
    memcpy(bad, buf, n);
    bad[16] = 1;
    ck_assert_int_eq(tfp_sf_decode(bad, n, &out, &err), TFP_EPROTO);       /* status */
    memcpy(bad, buf, n);
    bad[24] = 1;
    ck_assert_int_eq(tfp_sf_decode(bad, n, &out, &err), TFP_EPROTO);       /* a lease */
    memcpy(bad, buf, n);
    bad[6] = 0xff;
    bad[7] = 0xff;                                  /* a string longer than any */
    ck_assert_int_eq(tfp_sf_decode(bad, n, &out, &err), TFP_EPROTO);
    ck_assert_uint_eq(out.seq, 999);                /* untouched on failure */
    /* A REPLY's message must be UTF-8. */
    tfp_sf_t r = msg(TFP_SF_REPLY, "ab");
    r.status = TFP_ENOTFOUND;
    n = enc(&r, buf);
    buf[TFP_SF_FIXED] = 0xff;
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_EPROTO);
    /* A failed REPLY carries no lease. */
    r = msg(TFP_SF_REPLY, NULL);
    n = enc(&r, buf);
    buf[16] = (uint8_t)TFP_ENOTFOUND;
    buf[17] = buf[18] = buf[19] = 0xff;
    buf[24] = 5;
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_EPROTO);
}
END_TEST

/* The ring's messages: each one's fields round trip; each rule refuses a forged one. */
START_TEST(sf_ring_ops)
{
    uint8_t buf[TFP_SF_MAX];
    tfp_sf_t m, out;
    tfp_err_t err;
    char feed[TFP_MAX_TENSOR_NAME + 1], dev[TFP_MAX_TENSOR_NAME + 1];
    char consumer[TFP_MAX_USER_ID + 1];
    /* RING names FEED/DEV/CONSUMER, 1..64 slots, a slot size or 0 */
    m = msg(TFP_SF_RING, "batches/gpu0/train-loop");
    m.a = 6;
    size_t n = enc(&m, buf);
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_OK);
    ck_assert_int_eq(tfp_sf_ring_spec(out.str, feed, dev, consumer, &err), TFP_OK);
    ck_assert_str_eq(feed, "batches");
    ck_assert_str_eq(dev, "gpu0");
    ck_assert_str_eq(consumer, "train-loop");
    const char *specs[] = {"batches/gpu0", "batches/gpu0/", "/gpu0/x", "a/b/c/d", "a/b/bad id",
                           "../b/c", "a//c", ""};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        m = msg(TFP_SF_RING, specs[i]);
        m.a = 1;
        ck_assert_msg(tfp_sf_encode(&m, buf, sizeof buf, &err) == 0, "%s", specs[i]);
        ck_assert_int_eq(tfp_sf_ring_spec(specs[i], NULL, NULL, NULL, &err), TFP_EPROTO);
    }
    m = msg(TFP_SF_RING, "f/0/c");
    m.a = TFP_SF_MAX_SLOTS + 1;                     /* too many slots */
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m.a = 0;                                        /* none */
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m.a = 1;
    m.b = TFP_SF_MAX_SLOT + 1;                      /* a slot too large */
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    /* TOKEN: nothing; CREDIT: a count; FREE: a slot 1..64; ACK: through and generation */
    m = msg(TFP_SF_TOKEN, NULL);
    ck_assert_uint_gt(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m.a = 1;
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m = msg(TFP_SF_CREDIT, NULL);
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m.a = 3;
    ck_assert_uint_gt(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m = msg(TFP_SF_FREE, NULL);
    m.a = TFP_SF_MAX_SLOTS + 1;
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m.a = 0;
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m.a = TFP_SF_MAX_SLOTS;
    ck_assert_uint_gt(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m = msg(TFP_SF_ACK, NULL);
    m.a = 10;
    m.b = 2;
    ck_assert_uint_gt(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m.lease = 1;
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    /* ITEM: the daemon's; its numbers round trip exactly */
    m = msg(TFP_SF_ITEM, NULL);
    m.lease = 7;
    m.a = 8192;
    m.b = 100;
    tfp_sf_item_set(&m, 18446744073709551615ull, 3, 2);
    n = enc(&m, buf);
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_OK);
    uint64_t seq, round, gen;
    ck_assert_int_eq(tfp_sf_item_get(&out, &seq, &round, &gen, &err), TFP_OK);
    ck_assert_uint_eq(seq, 18446744073709551615ull);
    ck_assert_uint_eq(round, 3);
    ck_assert_uint_eq(gen, 2);
    ck_assert_uint_eq(out.lease, 7);
    const char *nums[] = {"1 2", "1 2 3 4", "1  2 3", "1 2 3 ", "-1 2 3", "1 2 x",
                          "18446744073709551616 0 0", ""};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        tfp_sf_t f = msg(TFP_SF_ITEM, nums[i]);
        f.lease = 1;
        f.b = 1;
        ck_assert_msg(tfp_sf_encode(&f, buf, sizeof buf, &err) == 0, "'%s'", nums[i]);
    }
    m.b = 0;                                        /* an item of no bytes */
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m.lease = m.a = 0;                              /* a generation notice: no numbers */
    ck_assert_uint_gt(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m.a = 1;
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m = msg(TFP_SF_ITEM, "feed 'f' is done");       /* the end, with a message */
    m.status = TFP_EDONE;
    n = enc(&m, buf);
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_OK);
    ck_assert_int_eq(out.status, TFP_EDONE);
    m.lease = 3;                                    /* ... and no numbers */
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
}
END_TEST

/* STAGE asks for a size and nothing else; a staged body's numbers (the 24 bytes a push over
 * UCX carries instead of its document) are checked for shape before any lookup. */
START_TEST(sf_staged)
{
    uint8_t buf[TFP_SF_MAX];
    tfp_sf_t m = msg(TFP_SF_STAGE, NULL), out;
    tfp_err_t err;
    m.a = 4 << 20;
    size_t n = enc(&m, buf);
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_OK);
    ck_assert_int_eq(out.op, TFP_SF_STAGE);
    ck_assert_uint_eq(out.a, 4 << 20);
    m.lease = 3;                                    /* fields besides the size */
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    ck_assert_msg(strstr(err.msg, "STAGE with fields besides its size"), "%s", err.msg);
    buf[24] = 3;                                    /* the same in bytes */
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_EPROTO);
    m = msg(TFP_SF_STAGE, NULL);                    /* size 0, and over 2^46 */
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m.a = TFP_SF_MAX_SIZE + 1;
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    ck_assert_msg(strstr(err.msg, "STAGE of"), "%s", err.msg);

    uint8_t ref[TFP_SF_STAGED_LEN];
    tfp_sf_staged_t r = {0x1122334455667788ull, 64, 4096}, got = {0, 0, 0};
    tfp_sf_staged_encode(&r, ref);
    ck_assert_uint_eq(ref[0], 0x88);                /* little-endian */
    ck_assert_uint_eq(ref[8], 64);
    ck_assert_uint_eq(ref[17], 0x10);
    ck_assert_int_eq(tfp_sf_staged_decode(ref, sizeof ref, &got, &err), TFP_OK);
    ck_assert_uint_eq(got.lease, r.lease);
    ck_assert_uint_eq(got.offset, 64);
    ck_assert_uint_eq(got.length, 4096);
    got.lease = 5;
    ck_assert_int_eq(tfp_sf_staged_decode(ref, sizeof ref - 1, &got, &err), TFP_EBADREQ);
    ck_assert_int_eq(tfp_sf_staged_decode(ref, sizeof ref + 1, &got, &err), TFP_EBADREQ);
    const tfp_sf_staged_t bad[] = {
        {0, 0, 10},                                 /* no lease */
        {1, 0, 0},                                  /* nothing */
        {1, 0, TFP_SF_MAX_SIZE + 1},                /* larger than any buffer */
        {1, TFP_SF_MAX_SIZE, 1},                    /* past 2^46 */
        {1, UINT64_MAX, 2},                         /* offset + length wraps */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tfp_sf_staged_encode(&bad[i], ref);
        ck_assert_int_eq(tfp_sf_staged_decode(ref, sizeof ref, &got, &err), TFP_EBADREQ);
        ck_assert_msg(strstr(err.msg, "a staged body names"), "%zu: %s", i, err.msg);
    }
    ck_assert_uint_eq(got.lease, 5);                /* untouched on failure */
}
END_TEST

/* GET's and COMMIT's conditions (flag COND, lines after the name), COMMIT's TTL, a REPLY's
 * HTTP status and ETag: round trips, and each rule refusing a forged message. */
START_TEST(sf_conditions)
{
    uint8_t buf[TFP_SF_MAX];
    tfp_sf_t m = msg(TFP_SF_COMMIT, NULL), out;
    tfp_err_t err;
    char name[TFP_MAX_TENSOR_NAME + 1];
    tfp_etags_t im, inm;
    m.lease = 7;
    m.a = 100;
    m.b = 3600;                                     /* TTL */
    ck_assert_int_eq(tfp_sf_set_target(&m, "w", "\"00000000000000ab-3\"", "*", &err), TFP_OK);
    ck_assert_uint_eq(m.flags, TFP_SF_F_COND);
    size_t n = enc(&m, buf);
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_OK);
    ck_assert_uint_eq(out.flags, TFP_SF_F_COND);
    ck_assert_uint_eq(out.b, 3600);
    ck_assert_int_eq(tfp_sf_target(&out, name, &im, &inm, &err), TFP_OK);
    ck_assert_str_eq(name, "w");
    ck_assert(im.present && !im.any && im.n == 1 && im.tag[0].epoch == 0xab &&
              im.tag[0].version == 3);
    ck_assert(inm.present && inm.any);
    /* none: no flag, the name alone, as an older client sends it */
    m = msg(TFP_SF_GET, NULL);
    ck_assert_int_eq(tfp_sf_set_target(&m, "w", NULL, "", &err), TFP_OK);
    ck_assert_uint_eq(m.flags, 0);
    ck_assert_str_eq(m.str, "w");
    /* refused: each on its own */
    static const struct { unsigned flags; const char *str; } bad[] = {
        {TFP_SF_F_COND, "w"},                                   /* the flag, no conditions */
        {0, "w\nIf-None-Match: *"},                             /* conditions, no flag */
        {TFP_SF_F_COND, "w\nIf-Match: nope"},                   /* not an ETag list */
        {TFP_SF_F_COND, "w\nIf-Match: *\nIf-Match: *"},          /* twice */
        {TFP_SF_F_COND, "w\nRange: bytes=0-1"},                 /* not a condition */
        {TFP_SF_F_COND, "w\nIf-Match: "},                       /* empty */
        {TFP_SF_F_COND, "\nIf-Match: *"},                       /* no name */
        {2, "w"},                                               /* an unknown flag */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tfp_sf_t b = msg(i % 2 ? TFP_SF_GET : TFP_SF_COMMIT, bad[i].str);
        if (b.op == TFP_SF_COMMIT) {
            b.lease = 1;
            b.a = 1;
        }
        b.flags = bad[i].flags;
        ck_assert_msg(tfp_sf_encode(&b, buf, sizeof buf, &err) == 0, "encoded bad[%zu]", i);
    }
    /* the decoder sees the forged bytes: flags at 20, the string after 48 */
    m = msg(TFP_SF_GET, "w");
    n = enc(&m, buf);
    buf[20] = TFP_SF_F_COND;                        /* the flag, no conditions */
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_EPROTO);
    /* a TTL over the bound, and one on a GET */
    m = msg(TFP_SF_COMMIT, "w");
    m.lease = 1;
    m.a = 1;
    m.b = TFP_MAX_TTL_S + 1;
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m = msg(TFP_SF_GET, "w");
    m.b = 5;
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    /* flags on any other op, an HTTP status outside a REPLY or out of range */
    m = msg(TFP_SF_ALLOC, NULL);
    m.a = 10;
    m.flags = TFP_SF_F_COND;
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    m.flags = 0;
    m.http = 200;
    ck_assert_uint_eq(tfp_sf_encode(&m, buf, sizeof buf, &err), 0);
    tfp_sf_t r = msg(TFP_SF_REPLY, "\"00000000000000ab-4\"");
    r.http = 600;
    ck_assert_uint_eq(tfp_sf_encode(&r, buf, sizeof buf, &err), 0);
    /* a REPLY's HTTP status and ETag round trip */
    r.http = 201;
    n = enc(&r, buf);
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_OK);
    ck_assert_uint_eq(out.http, 201);
    char etag[TFP_ETAG_LEN];
    ck_assert_int_eq(tfp_sf_reply_etag(&out, etag, &err), TFP_OK);
    ck_assert_str_eq(etag, "\"00000000000000ab-4\"");
    buf[21] = 0x7f;                                 /* http 0x7fc9: out of range */
    ck_assert_int_eq(tfp_sf_decode(buf, n, &out, &err), TFP_EPROTO);
    r = msg(TFP_SF_REPLY, NULL);                    /* an older server: no ETag */
    ck_assert_int_eq(tfp_sf_reply_etag(&r, etag, &err), TFP_EPROTO);
    r = msg(TFP_SF_REPLY, "W/\"x\"");               /* a weak tag is none */
    ck_assert_int_eq(tfp_sf_reply_etag(&r, etag, &err), TFP_EPROTO);
}
END_TEST

START_TEST(sf_span)
{
    tfp_err_t err;
    ck_assert_int_eq(tfp_sf_check_span(0, 10, 10, &err), TFP_OK);
    ck_assert_int_eq(tfp_sf_check_span(4096, 1, 8192, &err), TFP_OK);
    ck_assert_int_eq(tfp_sf_check_span(0, 0, 10, &err), TFP_EPROTO);
    ck_assert_int_eq(tfp_sf_check_span(5, 6, 10, &err), TFP_EPROTO);
    ck_assert_int_eq(tfp_sf_check_span(11, 0, 10, &err), TFP_EPROTO);
    ck_assert_int_eq(tfp_sf_check_span(UINT64_MAX, 2, 10, &err), TFP_EPROTO);
    ck_assert_int_eq(tfp_sf_check_span(2, UINT64_MAX, 10, &err), TFP_EPROTO);
}
END_TEST

Suite *suite_shmframe(void)
{
    Suite *s = suite_create("shmframe");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, sf_round_trips);
    tcase_add_test(tc, sf_encode_refuses);
    tcase_add_test(tc, sf_decode_refuses);
    tcase_add_test(tc, sf_ring_ops);
    tcase_add_test(tc, sf_span);
    tcase_add_test(tc, sf_conditions);
    tcase_add_test(tc, sf_staged);
    tcase_add_test(tc, sf_call);
    suite_add_tcase(s, tc);
    return s;
}
