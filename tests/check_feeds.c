/* check_feeds.c - unit suite for the feed queues (daemon/feeds.c), driven directly: ordering
 * under concurrent producers (threads), idempotent retries and gaps, the full-queue
 * decision, split rounds atomic across devices, lease expiry redelivering exactly once,
 * done stopping every consumer, reset, the outfeed ring, limits and wakes. No daemon.
 */
#include "config.h"
#include "tests/suites.h"
#include "daemon/feeds.h"
#include "transports/buf.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define DECL(json) decl_of(__LINE__, json)

static tfp_feed_decl_t decl_of(int line, const char *json)
{
    tfp_feed_decl_t d;
    tfp_err_t err;
    tfp_status_t st = tfp_feed_decl_parse(json, strlen(json), &d, &err);
    ck_assert_msg(st == TFP_OK, "line %d: %s", line, err.msg);
    return d;
}

/* Wakes seen, as "key;key;..." (the last few). */
static char woken[4096];
static pthread_mutex_t woken_lock = PTHREAD_MUTEX_INITIALIZER;
static void on_wake(void *arg, const char *key)
{
    (void)arg;
    pthread_mutex_lock(&woken_lock);
    if (strlen(woken) + strlen(key) + 2 < sizeof woken) {
        strcat(woken, key);
        strcat(woken, ";");
    }
    pthread_mutex_unlock(&woken_lock);
}

static tfd_feeds_t *feeds(uint64_t memory)
{
    tfd_feeds_limits_t l = {memory, 16, 4, 64, on_wake, NULL};
    tfd_feeds_t *fs = tfd_feeds_new(&l);
    ck_assert_ptr_nonnull(fs);
    woken[0] = '\0';
    return fs;
}

static tfd_feed_t *declare(tfd_feeds_t *fs, const char *name, const char *json)
{
    tfp_feed_decl_t d = DECL(json);
    tfd_feed_t *f = NULL;
    int created = -1;
    tfp_err_t err;
    ck_assert_int_eq(tfd_feeds_declare(fs, name, "u", &d, &f, &created, &err), TFP_OK);
    ck_assert_int_eq(created, 1);
    tfp_feed_decl_clear(&d);
    return f;
}

/* A blob whose payload is the number v (8 bytes). */
static tfd_blob_t *blob(uint64_t v)
{
    size_t cap;
    uint8_t *b = tfx_buf_alloc(8, &cap);
    ck_assert_ptr_nonnull(b);
    memcpy(b, &v, 8);
    tfd_blob_t *bl = tfd_blob_new(b, cap, b, 8, NULL);
    ck_assert_ptr_nonnull(bl);
    return bl;
}

static uint64_t value(const tfd_blob_t *b)
{
    uint64_t v;
    memcpy(&v, b->data, 8);
    return v;
}

/* Enqueues value v on dev (-1: a round), as producer p's seq; returns the status. */
static tfp_status_t push(tfd_feed_t *f, int dev, const char *p, uint64_t seq, uint64_t v,
                         tfd_infeed_res_t *res)
{
    tfd_blob_t *bs[TFP_FEED_MAX_DEVICES];
    unsigned n = dev < 0 ? tfd_feed_decl(f)->ndev : 1;
    for (unsigned i = 0; i < n; i++)
        bs[i] = blob(v);
    tfd_infeed_t in = {p, seq, dev, bs, 8, 0};
    tfd_infeed_res_t r;
    uint64_t ev;
    tfp_err_t err;
    tfp_status_t st = tfd_feed_infeed(f, &in, res ? res : &r, &ev, &err);
    for (unsigned i = 0; i < n; i++)
        tfd_blob_unref(bs[i]);
    return st;
}

/* Pops from dev as consumer c; on TFP_OK returns the item's value (and *pos), else ~0. */
static uint64_t pop(tfd_feed_t *f, unsigned dev, const char *c, tfp_status_t *st, uint64_t *pos)
{
    tfd_feed_item_t it;
    uint64_t ev;
    tfp_err_t err;
    *st = tfd_feed_pop(f, dev, c, "", NULL, 0, 0, NULL, &it, &ev, &err);
    if (*st != TFP_OK)
        return ~0ull;
    uint64_t v = value(it.blob);
    if (pos)
        *pos = it.position;
    tfd_blob_unref(it.blob);
    return v;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- producers ---------------------------------------------------------------------------- */

START_TEST(feeds_fifo_and_positions)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = declare(fs, "f", "{\"devices\":2,\"signature\":[{\"name\":\"x\",\"dtype\":"
                                     "\"U8\",\"shape\":[8]}]}");
    tfd_infeed_res_t r;
    ck_assert_int_eq(push(f, 0, NULL, 0, 10, &r), TFP_OK);
    ck_assert_int_eq(r.round, 1);
    ck_assert_int_eq(r.seq, 1);
    ck_assert_int_eq(r.generation, 1);
    ck_assert_int_eq(push(f, 0, NULL, 0, 11, &r), TFP_OK);
    ck_assert_int_eq(r.round, 2);
    ck_assert_int_eq(push(f, 1, NULL, 0, 20, &r), TFP_OK);
    ck_assert_int_eq(r.round, 1);                  /* per device queue positions */
    ck_assert_int_eq(push(f, -1, NULL, 0, 1, NULL), TFP_ECONFLICT);    /* not a round feed */
    ck_assert_msg(strstr(woken, "f/pop/0;") && strstr(woken, "f/pop/1;"), "%s", woken);
    tfp_status_t st;
    uint64_t pos;
    ck_assert_int_eq(pop(f, 0, "c", &st, &pos), 10);
    ck_assert_int_eq(pos, 1);
    ck_assert_int_eq(pop(f, 0, "c", &st, &pos), 11);
    ck_assert_int_eq(pos, 2);
    pop(f, 0, "c", &st, NULL);
    ck_assert_int_eq(st, TFP_EAGAIN);
    ck_assert_int_eq(pop(f, 1, "d", &st, NULL), 20);
    tfd_feed_stats_t s;
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].depth, 2);            /* delivered, not yet acked */
    ck_assert_int_eq(s.dev[0].delivered, 2);
    ck_assert_int_eq(s.dev[0].released, 0);
    ck_assert_str_eq(s.dev[0].consumer, "c");
    tfp_err_t err;
    ck_assert_int_eq(tfd_feed_ack(f, 0, "c", "", 1, &err), TFP_OK);
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].depth, 1);
    ck_assert_int_eq(s.dev[0].released, 1);
    ck_assert_int_eq(tfd_feed_ack(f, 0, "c", "", 99, &err), TFP_OK);     /* clamped to delivered */
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].released, 2);
    ck_assert_int_eq(s.dev[0].depth, 0);
    ck_assert_int_eq(tfd_feeds_bytes(fs), 8);          /* device 1's item */
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

START_TEST(feeds_seq_idempotent_and_gaps)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = declare(fs, "f", "{\"devices\":2,\"signature\":[{\"name\":\"x\",\"dtype\":"
                                     "\"U8\",\"shape\":[8]}]}");
    tfd_infeed_res_t r;
    ck_assert_int_eq(push(f, 0, "p", 1, 1, &r), TFP_OK);
    ck_assert_int_eq(r.dup, 0);
    ck_assert_int_eq(push(f, 0, "p", 1, 1, &r), TFP_OK);       /* the retry */
    ck_assert_int_eq(r.dup, 1);
    ck_assert_int_eq(r.seq, 1);
    ck_assert_int_eq(r.round, 1);
    ck_assert_int_eq(push(f, 0, "p", 3, 3, &r), TFP_ECONFLICT);  /* gap ... */
    ck_assert_int_eq(r.ahead, 1);                   /* ... worth waiting for */
    ck_assert_int_eq(push(f, 0, "p", 2 + TFD_FEED_SEQ_AHEAD, 9, &r), TFP_ECONFLICT);
    ck_assert_int_eq(r.ahead, 0);                   /* too far ahead: refused outright */
    ck_assert_int_eq(push(f, 0, "p", 1 + TFD_FEED_SEQ_AHEAD, 9, &r), TFP_ECONFLICT);
    ck_assert_int_eq(r.ahead, 1);
    /* the stream's advance moves the producers' counter: a waiting push tries again */
    uint64_t ev = tfd_feed_events(f, TFD_FEED_IN, 0);
    ck_assert_int_eq(push(f, 0, "p", 2, 2, &r), TFP_OK);
    ck_assert_uint_gt(tfd_feed_events(f, TFD_FEED_IN, 0), ev);
    ev = tfd_feed_events(f, TFD_FEED_IN, 0);
    ck_assert_int_eq(push(f, 0, "q", 1, 100, &r), TFP_OK);     /* nobody was ahead since */
    ck_assert_uint_eq(tfd_feed_events(f, TFD_FEED_IN, 0), ev);
    ck_assert_int_eq(push(f, 0, "q", 1, 100, &r), TFP_OK);
    ck_assert_int_eq(r.dup, 1);
    ck_assert_int_eq(push(f, 0, "p", 1, 1, &r), TFP_OK);       /* older: still a duplicate */
    ck_assert_int_eq(r.dup, 1);
    /* another stream (q, above), and the same producer on another device, start at 1 */
    ck_assert_int_eq(push(f, 1, "p", 1, 200, &r), TFP_OK);
    ck_assert_int_eq(r.dup, 0);
    tfd_feed_stats_t s;
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].depth, 3);
    ck_assert_int_eq(s.dev[1].depth, 1);
    tfp_status_t st;
    ck_assert_int_eq(pop(f, 0, "c", &st, NULL), 1);
    ck_assert_int_eq(pop(f, 0, "c", &st, NULL), 2);
    ck_assert_int_eq(pop(f, 0, "c", &st, NULL), 100);
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

START_TEST(feeds_full_items_and_bytes)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = declare(fs, "f", "{\"signature\":[{\"name\":\"x\",\"dtype\":\"U8\","
                                     "\"shape\":[8]}],\"max_items\":2}");
    ck_assert_int_eq(push(f, 0, "p", 1, 1, NULL), TFP_OK);
    ck_assert_int_eq(push(f, 0, "p", 2, 2, NULL), TFP_OK);
    tfd_blob_t *b = blob(3);
    tfd_infeed_t in = {"p", 3, 0, &b, 8, 0};
    tfd_infeed_res_t r;
    uint64_t ev = 0;
    tfp_err_t err;
    ck_assert_int_eq(tfd_feed_infeed(f, &in, &r, &ev, &err), TFP_EFULL);
    ck_assert_uint_eq(ev, tfd_feed_events(f, TFD_FEED_IN, 0));
    /* delivered but unacked still counts against max_items */
    tfp_status_t st;
    ck_assert_int_eq(pop(f, 0, "c", &st, NULL), 1);
    ck_assert_int_eq(tfd_feed_infeed(f, &in, &r, &ev, &err), TFP_EFULL);
    woken[0] = '\0';
    ck_assert_int_eq(tfd_feed_ack(f, 0, "c", "", 1, &err), TFP_OK);
    ck_assert_uint_ne(ev, tfd_feed_events(f, TFD_FEED_IN, 0));   /* a waiter would wake */
    ck_assert_msg(strstr(woken, "f/in;") != NULL, "%s", woken);
    ck_assert_int_eq(tfd_feed_infeed(f, &in, &r, &ev, &err), TFP_OK);
    ck_assert_int_eq(r.seq, 3);
    tfd_blob_unref(b);
    tfd_feed_unref(f);

    /* bytes: 3 items of 8 fit 24 bytes, a 4th does not */
    f = declare(fs, "g", "{\"signature\":[{\"name\":\"x\",\"dtype\":\"U8\",\"shape\":[8]}],"
                         "\"max_bytes\":24}");
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(push(f, 0, NULL, 0, 1, NULL), TFP_OK);
    ck_assert_int_eq(push(f, 0, NULL, 0, 1, NULL), TFP_EFULL);
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

/* ---- concurrency -------------------------------------------------------------------------- */

#define NPROD 4
#define PER_PROD 300

typedef struct {
    tfd_feed_t *f;
    int id;
} prod_arg_t;

static void *producer(void *arg)
{
    prod_arg_t *a = arg;
    char name[16];
    snprintf(name, sizeof name, "p%d", a->id);
    for (uint64_t s = 1; s <= PER_PROD; s++) {
        tfp_status_t st;
        while ((st = push(a->f, 0, name, s, (uint64_t)a->id << 32 | s, NULL)) == TFP_EFULL)
            sleep_ms(0);
        if (st != TFP_OK)
            return (void *)1;
        if (s % 50 == 0 && push(a->f, 0, name, s, 0, NULL) != TFP_OK)      /* a retry */
            return (void *)2;
    }
    return NULL;
}

START_TEST(feeds_concurrent_producers_keep_order)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = declare(fs, "f", "{\"signature\":[{\"name\":\"x\",\"dtype\":\"U8\","
                                     "\"shape\":[8]}],\"max_items\":4}");
    pthread_t t[NPROD];
    prod_arg_t args[NPROD];
    for (int i = 0; i < NPROD; i++) {
        args[i] = (prod_arg_t){f, i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, producer, &args[i]), 0);
    }
    uint64_t next[NPROD] = {0}, got = 0, ack = 0;
    while (got < NPROD * PER_PROD) {
        tfd_feed_item_t it;
        uint64_t ev;
        tfp_err_t err;
        tfp_status_t st = tfd_feed_pop(f, 0, "c", "", &ack, 0, 0, NULL, &it, &ev, &err);
        if (st == TFP_EAGAIN) {
            sleep_ms(0);
            continue;
        }
        ck_assert_int_eq(st, TFP_OK);
        uint64_t v = value(it.blob);
        int p = (int)(v >> 32);
        ck_assert_int_lt(p, NPROD);
        ck_assert_uint_eq(v & 0xffffffffu, next[p] + 1);      /* in order, none twice */
        ck_assert_uint_eq(it.seq, next[p] + 1);
        next[p]++;
        ack = it.position;
        tfd_blob_unref(it.blob);
        got++;
    }
    for (int i = 0; i < NPROD; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        ck_assert_ptr_null(rc);
        ck_assert_uint_eq(next[i], PER_PROD);
    }
    tfd_feed_stats_t s;
    tfd_feed_stats(f, &s);
    ck_assert_uint_eq(s.dev[0].published, NPROD * PER_PROD);
    ck_assert_uint_le(s.dev[0].high_water, 4);
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

#define NDEV 4
#define ROUNDS 400

typedef struct {
    tfd_feed_t *f;
    unsigned dev;
    int bad;
} cons_arg_t;

static void *round_consumer(void *arg)
{
    cons_arg_t *a = arg;
    char name[16];
    snprintf(name, sizeof name, "c%u", a->dev);
    uint64_t ack = 0, want = 1;
    while (want <= ROUNDS) {
        tfd_feed_item_t it;
        uint64_t ev;
        tfp_err_t err;
        tfp_status_t st = tfd_feed_pop(a->f, a->dev, name, "", &ack, 0, 0, NULL, &it, &ev, &err);
        if (st == TFP_EAGAIN) {
            sleep_ms(0);
            continue;
        }
        if (st != TFP_OK || it.round != want || value(it.blob) != it.round * 100 + a->dev)
            a->bad = 1;
        /* every other device holds this round already */
        tfd_feed_stats_t s;
        tfd_feed_stats(a->f, &s);
        for (unsigned d = 0; d < NDEV; d++)
            if (s.dev[d].published < it.round)
                a->bad = 2;
        ack = it.position;
        tfd_blob_unref(it.blob);
        want++;
    }
    return NULL;
}

START_TEST(feeds_split_rounds_are_atomic)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = declare(fs, "f", "{\"devices\":4,\"fanout\":\"split\",\"signature\":"
                                     "[{\"name\":\"x\",\"dtype\":\"U8\",\"shape\":[32]}],"
                                     "\"max_items\":3}");
    pthread_t t[NDEV];
    cons_arg_t args[NDEV];
    for (unsigned d = 0; d < NDEV; d++) {
        args[d] = (cons_arg_t){f, d, 0};
        ck_assert_int_eq(pthread_create(&t[d], NULL, round_consumer, &args[d]), 0);
    }
    ck_assert_int_eq(push(f, 0, NULL, 0, 0, NULL), TFP_ECONFLICT);   /* rounds only */
    for (uint64_t r = 1; r <= ROUNDS; r++) {
        tfd_blob_t *bs[NDEV];
        for (unsigned d = 0; d < NDEV; d++)
            bs[d] = blob(r * 100 + d);
        tfd_infeed_t in = {"p", r, -1, bs, 8, 0};
        tfd_infeed_res_t res;
        uint64_t ev;
        tfp_err_t err;
        tfp_status_t st;
        while ((st = tfd_feed_infeed(f, &in, &res, &ev, &err)) == TFP_EFULL)
            sleep_ms(0);
        ck_assert_int_eq(st, TFP_OK);
        ck_assert_uint_eq(res.round, r);
        for (unsigned d = 0; d < NDEV; d++)
            tfd_blob_unref(bs[d]);
    }
    for (unsigned d = 0; d < NDEV; d++) {
        pthread_join(t[d], NULL);
        ck_assert_msg(args[d].bad == 0, "device %u saw a bad round (%d)", d, args[d].bad);
    }
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

START_TEST(feeds_broadcast_charges_once)
{
    tfd_feeds_t *fs = feeds(20);                 /* room for two 8-byte payloads */
    tfd_feed_t *f = declare(fs, "f", "{\"devices\":4,\"fanout\":\"broadcast\",\"signature\":"
                                     "[{\"name\":\"x\",\"dtype\":\"U8\",\"shape\":[8]}]}");
    tfd_blob_t *b = blob(7);
    tfd_blob_t *bs[4] = {b, b, b, b};
    tfd_infeed_t in = {NULL, 0, -1, bs, 8, 0};
    tfd_infeed_res_t res;
    uint64_t ev;
    tfp_err_t err;
    ck_assert_int_eq(tfd_feed_infeed(f, &in, &res, &ev, &err), TFP_OK);
    ck_assert_uint_eq(tfd_feeds_bytes(fs), 8);
    ck_assert_int_eq(tfd_feed_infeed(f, &in, &res, &ev, &err), TFP_OK);
    ck_assert_int_eq(tfd_feed_infeed(f, &in, &res, &ev, &err), TFP_ENOSPACE);
    tfp_status_t st;
    uint64_t pos;
    for (unsigned d = 0; d < 4; d++) {
        ck_assert_int_eq(pop(f, d, "c", &st, &pos), 7);
        ck_assert_int_eq(tfd_feed_ack(f, d, "c", "", pos, &err), TFP_OK);
        ck_assert_uint_eq(tfd_feeds_bytes(fs), d < 3 ? 16 : 8);  /* freed by the last */
    }
    tfd_blob_unref(b);
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

/* Feed "f" of U8[8] items (extra: more declaration members, e.g. ",\"lease_ms\":60") with
 * items of value 1..n pushed to device 0. */
static tfd_feed_t *u8_feed(tfd_feeds_t *fs, const char *extra, uint64_t n)
{
    char decl[256];
    snprintf(decl, sizeof decl, "{\"signature\":[{\"name\":\"x\",\"dtype\":\"U8\","
             "\"shape\":[8]}]%s}", extra);
    tfd_feed_t *f = declare(fs, "f", decl);
    for (uint64_t v = 1; v <= n; v++)
        ck_assert_int_eq(push(f, 0, NULL, 0, v, NULL), TFP_OK);
    return f;
}

/* ---- consumers ---------------------------------------------------------------------------- */

/* A consumer restarted under the same id while its lease is live: rewind=1 on its first pop
 * delivers again what its last run had and never released; without it the next cumulative
 * ack would release those items unseen (lost). */
START_TEST(feeds_rewind_redelivers_to_a_restarted_consumer)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = u8_feed(fs, "", 4);
    tfp_status_t st;
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 1);      /* the first run prefetches 1..3 */
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 2);
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 3);
    /* The second run had released through 1 before the first died; it rewinds. */
    tfd_feed_item_t it;
    uint64_t ev, ack = 1;
    tfp_err_t err;
    ck_assert_int_eq(tfd_feed_pop(f, 0, "a", "", &ack, 1, 0, NULL, &it, &ev, &err), TFP_OK);
    ck_assert_int_eq(value(it.blob), 2);
    ck_assert_int_eq(it.position, 2);
    tfd_blob_unref(it.blob);
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 3);
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 4);
    tfd_feed_stats_t s;
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].redeliveries, 2);
    /* Another consumer cannot rewind (or pop) while a's lease is live. */
    ck_assert_int_eq(tfd_feed_pop(f, 0, "b", "", NULL, 1, 0, NULL, &it, &ev, &err), TFP_ECONFLICT);
    /* Nothing delivered and not released: rewind changes nothing. */
    ack = 4;
    ck_assert_int_eq(tfd_feed_pop(f, 0, "a", "", &ack, 1, 0, NULL, &it, &ev, &err), TFP_EAGAIN);
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].redeliveries, 2);
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

/* A consumer's ack of items it had, arriving after the queue took them back (its ring
 * closed, it detached, its lease lapsed), still releases them: the items are not delivered
 * again to it, and the queue does not hold them until some later ack. Only that consumer's:
 * another's ack, or one beyond what was ever delivered, releases nothing more. */
START_TEST(feeds_ack_after_a_rewind_is_kept)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = u8_feed(fs, ",\"lease_ms\":60", 6);
    tfp_status_t st;
    for (uint64_t v = 1; v <= 4; v++)
        ck_assert_int_eq(pop(f, 0, "a", &st, NULL), v);
    tfd_feed_item_t it;
    uint64_t ev, ack = 4;
    tfp_err_t err;
    ck_assert_int_eq(tfd_feed_detach(f, 0, "a", "", NULL, &err), TFP_OK);     /* 1..4 taken back */
    ck_assert_int_eq(tfd_feed_pop(f, 0, "a", "", &ack, 1, 0, NULL, &it, &ev, &err), TFP_OK);
    ck_assert_int_eq(it.position, 5);           /* not 1 again */
    tfd_blob_unref(it.blob);
    tfd_feed_stats_t s;
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].released, 4);
    ck_assert_int_eq(s.dev[0].delivered, 5);
    /* a lapsed lease, then the ack alone (the ring's way) once attached again */
    sleep_ms(100);
    tfd_feeds_tick(fs);
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 5);
    ck_assert_int_eq(tfd_feed_ack(f, 0, "a", "", 6, &err), TFP_OK);   /* 6: never delivered */
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].released, 5);
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 6);
    /* another consumer after a's lease: a's old positions are not b's to ack */
    sleep_ms(100);
    tfd_feeds_tick(fs);
    ack = 6;
    ck_assert_int_eq(tfd_feed_pop(f, 0, "b", "", &ack, 0, 0, NULL, &it, &ev, &err), TFP_OK);
    ck_assert_int_eq(it.position, 6);           /* redelivered to b, not released */
    tfd_blob_unref(it.blob);
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].released, 5);
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

/* A consumer that detaches gives back at once what it held (after its own ack), so another
 * attaches without waiting out the lease; its pop that was waiting ends instead of attaching
 * it again; a detach from a consumer that holds nothing changes nothing. */
START_TEST(feeds_detach_ends_the_lease_and_the_wait)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = u8_feed(fs, ",\"lease_ms\":60000", 3);
    tfp_status_t st;
    tfp_err_t err;
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 1);
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 2);
    pop(f, 0, "b", &st, NULL);
    ck_assert_int_eq(st, TFP_ECONFLICT);        /* a's lease holds for a minute */
    uint64_t ack = 1;
    ck_assert_int_eq(tfd_feed_detach(f, 0, "c", "", &ack, &err), TFP_OK);    /* not c's */
    tfd_feed_stats_t s;
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].released, 0);
    ck_assert_int_eq(s.dev[0].delivered, 2);
    ck_assert_int_eq(tfd_feed_detach(f, 0, "a", "", &ack, &err), TFP_OK);
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].released, 1);
    ck_assert_int_eq(s.dev[0].delivered, 1);    /* 2 is undelivered again */
    ck_assert_int_eq(s.dev[0].redeliveries, 1);
    ck_assert_int_eq(pop(f, 0, "b", &st, NULL), 2);       /* b at once */
    ck_assert_int_eq(pop(f, 0, "b", &st, NULL), 3);
    /* b's pop finds the queue empty and waits, tied to b's attachment */
    tfd_feed_item_t it;
    uint64_t ev, attach = 0;
    ck_assert_int_eq(tfd_feed_pop(f, 0, "b", "", NULL, 0, 0, &attach, &it, &ev, &err), TFP_EAGAIN);
    ck_assert_uint_ne(attach, 0);
    ck_assert_int_eq(tfd_feed_pop(f, 0, "b", "", NULL, 0, 0, &attach, &it, &ev, &err), TFP_EAGAIN);
    uint64_t before = tfd_feed_events(f, TFD_FEED_POP, 0);
    ck_assert_int_eq(tfd_feed_detach(f, 0, "b", "", NULL, &err), TFP_OK);
    ck_assert_uint_gt(tfd_feed_events(f, TFD_FEED_POP, 0), before);     /* the wait wakes */
    ck_assert_int_eq(tfd_feed_pop(f, 0, "b", "", NULL, 0, 0, &attach, &it, &ev, &err),
                     TFP_ECANCELED);
    ck_assert_ptr_null(it.blob);
    ck_assert_ptr_nonnull(strstr(err.msg, "detached"));
    /* which left b detached: a attaches, and gets 2 and 3 again */
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 2);
    /* a pop waiting across a reset ends, without an item of the new generation: a's ack of
     * the old one (through 3) then releases nothing of the new */
    attach = 0;
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 3);
    ck_assert_int_eq(tfd_feed_pop(f, 0, "a", "", NULL, 0, 0, &attach, &it, &ev, &err), TFP_EAGAIN);
    uint64_t gen, dropped;
    tfd_feed_reset(f, &gen, &dropped);
    ck_assert_int_eq(push(f, 0, NULL, 0, 42, NULL), TFP_OK);
    ck_assert_int_eq(tfd_feed_pop(f, 0, "a", "", NULL, 0, 0, &attach, &it, &ev, &err),
                     TFP_ECANCELED);
    ck_assert_ptr_null(it.blob);
    ck_assert_uint_eq(it.generation, gen);
    ack = 3;
    ck_assert_int_eq(tfd_feed_detach(f, 0, "a", "", &ack, &err), TFP_OK);
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].released, 0);
    ck_assert_int_eq(s.dev[0].depth, 1);
    ck_assert_int_eq(pop(f, 0, "b", &st, NULL), 42);      /* the new generation's, whole */
    ck_assert_int_eq(tfd_feed_detach(f, 9, "a", "", NULL, &err), TFP_ENOTFOUND);
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

/* A consumer id belongs to the principal that attached it: another principal naming it
 * is refused (403) on pop, ack and detach, and told nothing of the owner; a 409 for a queue
 * held by another principal's consumer does not name that consumer; once the lease lapsed,
 * the old owner's rewound positions are still not the other's to acknowledge. The
 * principal "" (authentication off) is one principal like any. */
START_TEST(feeds_consumer_belongs_to_its_principal)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = u8_feed(fs, ",\"lease_ms\":1000", 3);
    tfd_feed_item_t it;
    uint64_t ev, ack = 2;
    tfp_err_t err;
    ck_assert_int_eq(tfd_feed_pop(f, 0, "c1", "alice", NULL, 0, 0, NULL, &it, &ev, &err),
                     TFP_OK);
    tfd_blob_unref(it.blob);
    ck_assert_int_eq(tfd_feed_pop(f, 0, "c1", "alice", NULL, 0, 0, NULL, &it, &ev, &err),
                     TFP_OK);
    tfd_blob_unref(it.blob);
    ck_assert_int_eq(tfd_feed_pop(f, 0, "c1", "bob", &ack, 0, 0, NULL, &it, &ev, &err),
                     TFP_EFORBIDDEN);
    ck_assert_ptr_null(strstr(err.msg, "alice"));
    ck_assert_ptr_nonnull(strstr(err.msg, "another principal"));
    ck_assert_int_eq(tfd_feed_ack(f, 0, "c1", "bob", 2, &err), TFP_EFORBIDDEN);
    ck_assert_int_eq(tfd_feed_detach(f, 0, "c1", "bob", &ack, &err), TFP_EFORBIDDEN);
    ck_assert_int_eq(tfd_feed_detach(f, 0, "c1", "", &ack, &err), TFP_EFORBIDDEN);
    ck_assert_int_eq(tfd_feed_consumer_check(f, 0, "c1", "bob", &err), TFP_EFORBIDDEN);
    ck_assert_int_eq(tfd_feed_consumer_check(f, 0, "c1", "alice", &err), TFP_OK);
    /* bob under his own id: the queue is taken, by whom is not said */
    ck_assert_int_eq(tfd_feed_pop(f, 0, "c2", "bob", NULL, 0, 0, NULL, &it, &ev, &err),
                     TFP_ECONFLICT);
    ck_assert_msg(!strstr(err.msg, "c1") && strstr(err.msg, "another principal's"), "%s",
                  err.msg);
    /* alice's own other consumer is told which */
    ck_assert_int_eq(tfd_feed_pop(f, 0, "c3", "alice", NULL, 0, 0, NULL, &it, &ev, &err),
                     TFP_ECONFLICT);
    ck_assert_ptr_nonnull(strstr(err.msg, "'c1'"));
    tfd_feed_stats_t s;
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].released, 0);     /* nothing of alice's was acknowledged */
    ck_assert_str_eq(s.dev[0].consumer, "c1");
    ck_assert_str_eq(s.dev[0].consumer_by, "alice");
    /* her lease lapses: 1 and 2 are taken back, and her acks of them still count; bob under
     * her id can neither attach with an ack of them nor acknowledge them by detaching */
    sleep_ms(1100);
    tfd_feeds_tick(fs);
    ck_assert_int_eq(tfd_feed_pop(f, 0, "c1", "bob", &ack, 0, 0, NULL, &it, &ev, &err),
                     TFP_EFORBIDDEN);
    ck_assert_int_eq(tfd_feed_detach(f, 0, "c1", "bob", &ack, &err), TFP_EFORBIDDEN);
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].released, 0);
    /* under his own id he attaches, and gets 1 again: alice's acks are void from here on */
    ck_assert_int_eq(tfd_feed_pop(f, 0, "c2", "bob", NULL, 0, 0, NULL, &it, &ev, &err),
                     TFP_OK);
    ck_assert_int_eq(it.position, 1);
    tfd_blob_unref(it.blob);
    ck_assert_int_eq(tfd_feed_ack(f, 0, "c2", "bob", 1, &err), TFP_OK);
    ck_assert_int_eq(tfd_feed_detach(f, 0, "c2", "bob", NULL, &err), TFP_OK);
    /* detached, c1 is anyone's again */
    ck_assert_int_eq(tfd_feed_pop(f, 0, "c1", "bob", NULL, 0, 0, NULL, &it, &ev, &err),
                     TFP_OK);
    ck_assert_int_eq(it.position, 2);
    tfd_blob_unref(it.blob);
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

START_TEST(feeds_lease_expiry_redelivers_once)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = u8_feed(fs, ",\"lease_ms\":60", 3);
    tfp_status_t st;
    tfp_err_t err;
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 1);
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 2);
    pop(f, 0, "b", &st, NULL);
    ck_assert_int_eq(st, TFP_ECONFLICT);          /* a's lease is live */
    sleep_ms(100);
    woken[0] = '\0';
    tfd_feeds_tick(fs);
    ck_assert_msg(strstr(woken, "f/pop/0;") != NULL, "%s", woken);
    tfd_feed_stats_t s;
    tfd_feed_stats(f, &s);
    ck_assert_str_eq(s.dev[0].consumer, "");
    ck_assert_int_eq(s.dev[0].redeliveries, 2);
    ck_assert_int_eq(s.dev[0].delivered, 0);
    ck_assert_int_eq(tfd_feed_ack(f, 0, "a", "", 2, &err), TFP_ECONFLICT);   /* a lost them */
    uint64_t pos;
    ck_assert_int_eq(pop(f, 0, "b", &st, &pos), 1);
    ck_assert_int_eq(pos, 1);
    ck_assert_int_eq(pop(f, 0, "b", &st, NULL), 2);
    ck_assert_int_eq(pop(f, 0, "b", &st, NULL), 3);
    pop(f, 0, "b", &st, NULL);
    ck_assert_int_eq(st, TFP_EAGAIN);             /* each once more, no more */
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.dev[0].redeliveries, 2);
    ck_assert_int_eq(s.dev[0].items_out, 5);
    /* an expired lease is also noticed without the tick */
    sleep_ms(100);
    ck_assert_int_eq(pop(f, 0, "c", &st, NULL), 1);
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

START_TEST(feeds_done_stops_every_consumer)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = declare(fs, "f", "{\"devices\":3,\"signature\":[{\"name\":\"x\",\"dtype\":"
                                     "\"U8\",\"shape\":[8]}]}");
    ck_assert_int_eq(push(f, 0, NULL, 0, 5, NULL), TFP_OK);
    woken[0] = '\0';
    tfd_feed_done(f);
    ck_assert_msg(strstr(woken, "f/pop/0;") && strstr(woken, "f/pop/1;") &&
                  strstr(woken, "f/pop/2;") && strstr(woken, "f/in;"), "%s", woken);
    ck_assert_int_eq(push(f, 1, NULL, 0, 6, NULL), TFP_ECONFLICT);
    tfp_status_t st;
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 5);       /* drains first */
    pop(f, 0, "a", &st, NULL);
    ck_assert_int_eq(st, TFP_EDONE);
    pop(f, 1, "b", &st, NULL);
    ck_assert_int_eq(st, TFP_EDONE);
    pop(f, 2, "c", &st, NULL);
    ck_assert_int_eq(st, TFP_EDONE);
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

START_TEST(feeds_reset_starts_a_generation)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = declare(fs, "f", "{\"devices\":2,\"signature\":[{\"name\":\"x\",\"dtype\":"
                                     "\"U8\",\"shape\":[8]}]}");
    ck_assert_int_eq(push(f, 0, "p", 1, 1, NULL), TFP_OK);
    ck_assert_int_eq(push(f, 0, "p", 2, 2, NULL), TFP_OK);
    ck_assert_int_eq(push(f, 1, "p", 1, 3, NULL), TFP_OK);
    tfp_status_t st;
    ck_assert_int_eq(pop(f, 0, "a", &st, NULL), 1);
    tfd_feed_done(f);
    uint64_t gen, dropped;
    tfd_feed_reset(f, &gen, &dropped);
    ck_assert_int_eq(gen, 2);
    ck_assert_int_eq(dropped, 3);
    ck_assert_uint_eq(tfd_feeds_bytes(fs), 0);
    tfd_feed_stats_t s;
    tfd_feed_stats(f, &s);
    ck_assert_int_eq(s.done, 0);
    ck_assert_int_eq(s.dropped, 3);
    ck_assert_str_eq(s.dev[0].consumer, "");
    tfd_infeed_res_t r;
    ck_assert_int_eq(push(f, 0, "p", 1, 9, &r), TFP_OK);     /* streams start over */
    ck_assert_int_eq(r.dup, 0);
    ck_assert_int_eq(r.generation, 2);
    tfp_err_t err;
    ck_assert_int_eq(tfd_feed_ack(f, 0, "a", "", 1, &err), TFP_ECONFLICT);   /* slot cleared */
    uint64_t pos;
    ck_assert_int_eq(pop(f, 0, "b", &st, &pos), 9);
    ck_assert_int_eq(pos, 1);
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

/* ---- outfeed, limits, delete -------------------------------------------------------------- */

START_TEST(feeds_outfeed_ring)
{
    tfd_feeds_t *fs = feeds(1 << 20);
    tfd_feed_t *f = declare(fs, "f", "{\"devices\":2,\"signature\":[{\"name\":\"x\",\"dtype\":"
                                     "\"U8\",\"shape\":[8]}],\"outfeed_items\":3}");
    tfd_outfeed_item_t it;
    uint64_t ev, resume, seq;
    int dup;
    tfp_err_t err;
    ck_assert_int_eq(tfd_feed_outfeed_get(f, 0, &it, &ev, &resume, &err), TFP_EAGAIN);
    for (uint64_t v = 1; v <= 5; v++) {       /* "w" on each device is its own stream */
        tfd_blob_t *b = blob(v * 10);
        uint64_t s = (v + 1) / 2;
        ck_assert_int_eq(tfd_feed_outfeed_push(f, (unsigned)v % 2, "w", s, b, 8, &seq, &dup,
                                               &err), TFP_OK);
        ck_assert_uint_eq(seq, v);
        ck_assert_int_eq(dup, 0);
        ck_assert_int_eq(tfd_feed_outfeed_push(f, (unsigned)v % 2, "w", s, b, 8, &seq, &dup,
                                               &err), TFP_OK);
        ck_assert_int_eq(dup, 1);
        ck_assert_uint_eq(seq, v);
        tfd_blob_unref(b);
    }
    ck_assert_int_eq(tfd_feed_outfeed_push(f, 0, "w", 9, NULL, 8, &seq, &dup, &err),
                     TFP_ECONFLICT);
    ck_assert_uint_eq(tfd_feeds_bytes(fs), 24);
    ck_assert_int_eq(tfd_feed_outfeed_get(f, 0, &it, &ev, &resume, &err), TFP_EGONE);
    ck_assert_uint_eq(resume, 2);
    ck_assert_int_eq(tfd_feed_outfeed_get(f, 2, &it, &ev, &resume, &err), TFP_OK);
    ck_assert_uint_eq(it.seq, 3);
    ck_assert_uint_eq(value(it.blob), 30);
    ck_assert_uint_eq(it.dev, 1);
    tfd_blob_unref(it.blob);
    ck_assert_int_eq(tfd_feed_outfeed_get(f, 4, &it, &ev, &resume, &err), TFP_OK);
    ck_assert_uint_eq(it.seq, 5);
    tfd_blob_unref(it.blob);
    ck_assert_int_eq(tfd_feed_outfeed_get(f, 5, &it, &ev, &resume, &err), TFP_EAGAIN);
    ck_assert_uint_eq(ev, tfd_feed_events(f, TFD_FEED_OUT, 0));
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

START_TEST(feeds_declare_and_limits)
{
    tfd_feeds_t *fs = feeds(16);
    const char *j = "{\"signature\":[{\"name\":\"x\",\"dtype\":\"U8\",\"shape\":[8]}]}";
    tfd_feed_t *f = declare(fs, "a", j);
    tfp_feed_decl_t d = DECL("{\"signature\":[{\"name\":\"x\",\"dtype\":\"U8\",\"shape\":[8]}],"
                             "\"max_items\":8,\"fanout\":\"per_device\"}");
    int created = -1;
    tfp_err_t err;
    ck_assert_int_eq(tfd_feeds_declare(fs, "a", "u", &d, NULL, &created, &err), TFP_OK);
    ck_assert_int_eq(created, 0);                 /* the same, defaults spelled out */
    tfp_feed_decl_clear(&d);
    d = DECL("{\"signature\":[{\"name\":\"x\",\"dtype\":\"U8\",\"shape\":[9]}]}");
    ck_assert_int_eq(tfd_feeds_declare(fs, "a", "u", &d, NULL, &created, &err), TFP_ECONFLICT);
    /* feeds per user: 4 */
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "b%d", i);
        tfd_feed_unref(declare(fs, name, j));
    }
    tfp_feed_decl_clear(&d);
    d = DECL(j);
    ck_assert_int_eq(tfd_feeds_declare(fs, "z", "u", &d, NULL, &created, &err), TFP_ENOSPACE);
    ck_assert_int_eq(tfd_feeds_declare(fs, "z", "v", &d, NULL, &created, &err), TFP_OK);
    ck_assert_int_eq(created, 1);
    /* feed memory: 16 bytes */
    ck_assert_int_eq(push(f, 0, NULL, 0, 1, NULL), TFP_OK);
    ck_assert_int_eq(push(f, 0, NULL, 0, 2, NULL), TFP_OK);
    ck_assert_int_eq(push(f, 0, NULL, 0, 3, NULL), TFP_ENOSPACE);
    tfd_blob_t *b = blob(0);
    uint64_t seq;
    int dup;
    ck_assert_int_eq(tfd_feed_outfeed_push(f, 0, NULL, 0, b, 8, &seq, &dup, &err), TFP_ENOSPACE);
    tfd_blob_unref(b);
    /* delete: held references see it gone, waiters are woken */
    woken[0] = '\0';
    ck_assert_int_eq(tfd_feeds_delete(fs, "a"), 0);
    ck_assert_int_eq(tfd_feeds_delete(fs, "a"), -1);
    ck_assert_msg(strstr(woken, "a/pop/0;") && strstr(woken, "a/in;") && strstr(woken, "a/out;"),
                  "%s", woken);
    ck_assert_ptr_null(tfd_feeds_get(fs, "a"));
    ck_assert_uint_eq(tfd_feeds_bytes(fs), 0);
    tfp_status_t st;
    pop(f, 0, "c", &st, NULL);
    ck_assert_int_eq(st, TFP_ENOTFOUND);
    ck_assert_int_eq(push(f, 0, NULL, 0, 1, NULL), TFP_ENOTFOUND);
    tfd_feed_unref(f);
    size_t n;
    tfd_feed_stats_t **all = tfd_feeds_stats_all(fs, &n);
    ck_assert_int_eq(n, 4);
    ck_assert_str_eq(all[0]->name, "b0");
    ck_assert_str_eq(all[3]->name, "z");
    tfd_feeds_stats_free(all, n);
    tfd_feeds_free(fs);
}
END_TEST

START_TEST(feeds_producer_streams_bounded)
{
    tfd_feeds_limits_t l = {1 << 20, 4, 4, 2, NULL, NULL};
    tfd_feeds_t *fs = tfd_feeds_new(&l);
    tfd_feed_t *f = declare(fs, "f", "{\"signature\":[{\"name\":\"x\",\"dtype\":\"U8\","
                                     "\"shape\":[8]}],\"max_items\":100}");
    ck_assert_int_eq(push(f, 0, "p1", 1, 1, NULL), TFP_OK);
    ck_assert_int_eq(push(f, 0, "p2", 1, 1, NULL), TFP_OK);
    ck_assert_int_eq(push(f, 0, "p3", 1, 1, NULL), TFP_ENOSPACE);
    ck_assert_int_eq(push(f, 0, "p1", 2, 1, NULL), TFP_OK);     /* known streams go on */
    ck_assert_int_eq(push(f, 0, NULL, 0, 1, NULL), TFP_OK);     /* and unnumbered items */
    tfd_feed_unref(f);
    tfd_feeds_free(fs);
}
END_TEST

Suite *suite_feeds(void)
{
    Suite *s = suite_create("feeds");
    TCase *tc = tcase_create("queues");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, feeds_fifo_and_positions);
    tcase_add_test(tc, feeds_seq_idempotent_and_gaps);
    tcase_add_test(tc, feeds_full_items_and_bytes);
    tcase_add_test(tc, feeds_concurrent_producers_keep_order);
    tcase_add_test(tc, feeds_split_rounds_are_atomic);
    tcase_add_test(tc, feeds_broadcast_charges_once);
    tcase_add_test(tc, feeds_lease_expiry_redelivers_once);
    tcase_add_test(tc, feeds_consumer_belongs_to_its_principal);
    tcase_add_test(tc, feeds_ack_after_a_rewind_is_kept);
    tcase_add_test(tc, feeds_detach_ends_the_lease_and_the_wait);
    tcase_add_test(tc, feeds_rewind_redelivers_to_a_restarted_consumer);
    tcase_add_test(tc, feeds_done_stops_every_consumer);
    tcase_add_test(tc, feeds_reset_starts_a_generation);
    tcase_add_test(tc, feeds_outfeed_ring);
    tcase_add_test(tc, feeds_declare_and_limits);
    tcase_add_test(tc, feeds_producer_streams_bounded);
    suite_add_tcase(s, tc);
    return s;
}
