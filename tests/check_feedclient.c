/* check_feedclient.c - the feed API of libtfetch (client/feed.c and its backends) against the
 * real tfetchd (tests/fixtures.c, port 0): the host and sim backends end to end, prefetch,
 * release and cumulative acks (a released gap is not acknowledged; an unreleased item comes
 * again), the outfeed both ways, done (TF_EDONE after draining), reset (a new generation),
 * the asynchronous pops and pushes (callbacks exactly once, in order), the cuda backend's
 * no-device fall back, argument checks, and the tfetch feed commands.
 * The end-to-end cases run twice: over HTTP, then (TCase feedclient_ucx) with the client on
 * transport policy ucx, so every feed operation travels as a UCX FEED frame (and each check
 * of what carried it says so); then (TCase feedclient_ring) on policy auto, where the same-host
 * client's pops come from a ring in shared memory (shm/ring) and everything else over UCX;
 * plus, over UCX and over the ring, a consumer and a producer killed with SIGKILL in the
 * middle of their streams: nothing lost, nothing twice.
 * Each test starts its own daemon (Check forks per test).
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "client/tfetch.h"
#include "transports/clock.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

Suite *suite_feedclient(void);         /* registered in tests/suites.h */

static td_daemon_t D;
static tf_client_t *C;
static char FEED[128];
static int UCX;                         /* feedclient_ucx: policy ucx; feedclient_ring too */
static int RING;                        /* feedclient_ring: policy auto, pops by the ring */

static const char DECL[] = "{\"devices\":1,\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\","
                           "\"shape\":[4]}],\"max_items\":16,\"lease_ms\":2000}";

/* What carried the last request: UCX in the feedclient_ucx and _ring TCases, else HTTP. */
static void carried_right(const char *transport)
{
    if (UCX)
        ck_assert_msg(strncmp(transport, "ucx/", 4) == 0, "carried by '%s', not UCX", transport);
    else
        ck_assert_str_eq(transport, "http");
}

/* What carried the last pop: the ring in feedclient_ring, else as any request. */
static void popped_right(const char *transport)
{
    if (RING)
        ck_assert_str_eq(transport, "shm/ring");
    else
        carried_right(transport);
}

static void setup(void)
{
    const char *const args[] = {NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
    ck_assert_int_eq(tf_client_new(&C), TF_OK);
    ck_assert_int_eq(tf_client_set_transport(C, RING ? TF_TRANSPORT_AUTO
                                                : UCX ? TF_TRANSPORT_UCX : TF_TRANSPORT_HTTP),
                     TF_OK);
    snprintf(FEED, sizeof(FEED), "%s/v1/feeds/f", D.base);
    ck_assert_int_eq(tf_feed_declare(C, FEED, DECL, NULL), TF_OK);
    carried_right(tf_client_last(C)->transport);
}

static void setup_ucx(void)
{
    UCX = 1;
    setup();
}

static void setup_ring(void)
{
    UCX = RING = 1;
    setup();
}

static void teardown(void)
{
    tf_client_free(C);
    C = NULL;
    td_stop(&D, SIGTERM, 10000);
    td_cleanup();
}

/* An item: F32 x[4] = {v, v+1, v+2, v+3}. */
static tf_doc_t *item_doc(float v)
{
    float x[4] = {v, v + 1, v + 2, v + 3};
    int64_t shape[1] = {4};
    tf_doc_t *d = tf_doc_new();
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(tf_doc_add(d, "x", TF_F32, 1, shape, x, sizeof(x), TF_COPY), TF_OK);
    return d;
}

static void push(float v, uint64_t seq)
{
    tf_doc_t *d = item_doc(v);
    uint64_t round = 0;
    tf_status_t st = tf_infeed_push(C, FEED, 0, d, seq, 0, &round);
    ck_assert_msg(st == TF_OK, "push %g: %s: %s (fallback: %s)", (double)v, tf_strerror(st),
                  tf_client_last(C)->error, tf_client_last(C)->fallback);
    ck_assert_uint_gt(round, 0);
    carried_right(tf_client_last(C)->transport);
    tf_doc_free(d);
}

static float first_value(const tf_item_t *it)
{
    const tf_tensor_t *t = tf_doc_find(tf_item_doc(it), "x");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->nbytes, 16);
    float v;
    memcpy(&v, t->data, sizeof(v));
    return v;
}

/* A number from the feed's stats, device 0: "released":N. */
static long stat_of(const char *key)
{
    char *json = NULL;
    ck_assert_int_eq(tf_feed_stats(C, FEED, &json), TF_OK);
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *p = strstr(json, pat);
    ck_assert_msg(p != NULL, "no %s in %s", key, json);
    long v = strtol(p + strlen(pat), NULL, 10);
    tf_free(json);
    return v;
}

/* Runs the client until the feed's stat key reaches want, up to 5 s. (tf_client_run returns
 * at once with no request pending: each turn sleeps to give the daemon time.) */
static void await_stat(const char *key, long want)
{
    for (int i = 0; i < 500 && stat_of(key) < want; i++) {
        tf_client_run(C, 0);
        usleep(10000);
    }
}

/* Pops n items in order from a feed on backend be and checks each. */
static void pop_in_order(const char *be, int n)
{
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach(C, FEED, "0", be, &feed), TF_OK);
    ck_assert_str_eq(tf_feed_backend(feed), be);
    ck_assert_str_eq(tf_feed_transport(feed), "none");
    for (int i = 0; i < n; i++) {
        tf_item_t *it = NULL;
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        ck_assert_uint_eq(tf_item_position(it), (uint64_t)i + 1);
        ck_assert_uint_eq(tf_item_seq(it), (uint64_t)i + 1);
        ck_assert_uint_eq(tf_item_generation(it), 1);
        ck_assert(first_value(it) == (float)(10 * i));
        popped_right(tf_feed_transport(feed));
        tf_item_release(it);
    }
    tf_feed_detach(feed);
    ck_assert_int_eq(stat_of("released"), n);
    ck_assert_int_eq(stat_of("depth"), 0);
}

/* ---- end to end -------------------------------------------------------------------------- */

START_TEST(host_end_to_end)
{
    for (int i = 0; i < 5; i++)
        push((float)(10 * i), (uint64_t)i + 1);
    pop_in_order("host", 5);
}
END_TEST

START_TEST(sim_end_to_end)
{
    setenv("TFETCH_SIM_LATENCY_US", "2000", 1);
    for (int i = 0; i < 5; i++)
        push((float)(10 * i), (uint64_t)i + 1);
    pop_in_order("sim", 5);
}
END_TEST

/* A retried seq is acknowledged by the server, not enqueued twice: the feed sees it once. */
START_TEST(seq_retry_once)
{
    push(0, 1);
    push(0, 1);
    push(10, 2);
    pop_in_order("host", 2);
}
END_TEST

/* ---- prefetch and acks --------------------------------------------------------------------- */

START_TEST(prefetch_fills)
{
    for (int i = 0; i < 6; i++)
        push((float)(10 * i), 0);
    tf_feed_opts_t o = TF_FEED_OPTS_INIT;
    o.prefetch = 3;
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach_opts(C, FEED, "0", "sim", &o, &feed), TF_OK);
    tf_item_t *it = NULL;
    ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
    /* While the caller holds one, the feed brings the next three. */
    await_stat("delivered", 4);
    ck_assert_int_eq(stat_of("delivered"), 4);
    ck_assert_int_eq(stat_of("released"), 0);
    /* Without a pop waiting, they arrive and are copied: then ready at once (timeout 0). */
    tf_item_release(it);
    for (int i = 1; i < 4; i++) {
        tf_status_t st = TF_EAGAIN;
        for (int k = 0; k < 500 && (st = tf_infeed_pop(feed, 0, &it)) == TF_EAGAIN; k++) {
            usleep(10000);
            tf_client_run(C, 0);
        }
        ck_assert_int_eq(st, TF_OK);
        ck_assert(first_value(it) == (float)(10 * i));
        tf_item_release(it);
    }
    /* The releases ride on the next pop request (or the ring's ACK). */
    await_stat("released", 4);
    ck_assert_int_eq(stat_of("released"), 4);
    tf_feed_detach(feed);
}
END_TEST

/* An ack is cumulative through the first unreleased item: releasing 2 before 1 acks nothing. */
START_TEST(ack_is_cumulative)
{
    for (int i = 0; i < 3; i++)
        push((float)(10 * i), 0);
    tf_feed_opts_t o = TF_FEED_OPTS_INIT;
    o.flags = TF_FEED_NO_PREFETCH;
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach_opts(C, FEED, "0", "host", &o, &feed), TF_OK);
    tf_item_t *a = NULL, *b = NULL;
    ck_assert_int_eq(tf_infeed_pop(feed, 5000, &a), TF_OK);
    ck_assert_int_eq(tf_infeed_pop(feed, 5000, &b), TF_OK);
    ck_assert_uint_eq(tf_item_position(b), 2);
    tf_item_release(b);
    ck_assert_int_eq(tf_feed_ack(feed), TF_OK);
    ck_assert_int_eq(stat_of("released"), 0);
    tf_item_release(a);
    ck_assert_int_eq(tf_feed_ack(feed), TF_OK);
    ck_assert_int_eq(stat_of("released"), 2);
    ck_assert_int_eq(stat_of("delivered"), 2);  /* no prefetch: item 3 still waits */
    tf_feed_detach(feed);
}
END_TEST

/* An item never released comes again. While its consumer holds the lease another is refused;
 * once it detaches, the next consumer gets the item at once (not after the lease, 2 s: the
 * pop below waits 1 s at most). */
START_TEST(unreleased_comes_again)
{
    push(0, 0);
    push(10, 0);
    tf_feed_opts_t o = TF_FEED_OPTS_INIT;
    o.flags = TF_FEED_NO_PREFETCH;
    o.consumer = "loop-a";
    tf_feed_t *feed = NULL, *other = NULL;
    ck_assert_int_eq(tf_feed_attach_opts(C, FEED, "0", "host", &o, &feed), TF_OK);
    tf_item_t *it = NULL;
    ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
    o.consumer = "loop-b";
    if (!RING) {            /* (a ring pops for its consumer as items come: not tried here) */
        ck_assert_int_eq(tf_feed_attach_opts(C, FEED, "0", "host", &o, &other), TF_OK);
        ck_assert_int_eq(tf_infeed_pop(other, 200, &it), TF_ECONFLICT);
        tf_feed_detach(other);
    }
    tf_feed_detach(feed);               /* the step died: never released */
    ck_assert_int_eq(tf_feed_attach_opts(C, FEED, "0", "host", &o, &feed), TF_OK);
    tf_status_t st = tf_infeed_pop(feed, 1000, &it);
    ck_assert_msg(st == TF_OK, "pop after the detach: %s: %s", tf_strerror(st),
                  tf_client_last(C)->error);
    ck_assert(first_value(it) == 0.0f);
    tf_item_release(it);
    tf_feed_detach(feed);
    ck_assert_int_ge(stat_of("redeliveries"), 1);
}
END_TEST

/* A detach does not wait out the long poll of the pop the feed keeps waiting on the server
 * (over UCX that request cannot be canceled from the client; the detach ends it there), and
 * the consumer's lease, which that pop held for its whole wait, ends with it. */
static void on_pop_recorded(tf_feed_t *feed, tf_status_t st, tf_item_t *it, void *ud)
{
    (void)feed;
    *(tf_status_t *)ud = st;
    tf_item_release(it);
}

/* The attached consumer's id in the feed's stats ("" for none). */
static void consumer_of(char *out, size_t cap)
{
    char *json = NULL;
    ck_assert_int_eq(tf_feed_stats(C, FEED, &json), TF_OK);
    const char *p = strstr(json, "\"consumer\":");
    ck_assert_ptr_nonnull(p);
    p += strlen("\"consumer\":");
    out[0] = '\0';
    if (*p == '"')
        sscanf(p + 1, "%63[^\"]", out);
    (void)cap;
    tf_free(json);
}

START_TEST(detach_ends_a_waiting_pop)
{
    if (RING)
        return;                         /* no pop requests: the ring's own test closes it */
    tf_feed_opts_t o = TF_FEED_OPTS_INIT;
    o.poll_ms = 30000;
    o.consumer = "loop-a";
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach_opts(C, FEED, "0", "host", &o, &feed), TF_OK);
    tf_status_t popped = TF_EAGAIN;
    ck_assert_int_eq(tf_infeed_pop_start(feed, 30000, on_pop_recorded, &popped), TF_OK);
    char who[64] = "";
    for (int i = 0; i < 500 && strcmp(who, "loop-a") != 0; i++) {
        tf_client_run(C, 0);            /* sends the pop, which waits up to 30 s */
        usleep(10000);
        consumer_of(who, sizeof(who));
    }
    ck_assert_str_eq(who, "loop-a");
    double t0 = tfx_now_s();
    tf_feed_detach(feed);
    double took = tfx_now_s() - t0;
    ck_assert_msg(took < 10, "detach took %.1f s: it waited out the pop's long poll", took);
    ck_assert_int_eq(popped, TF_ECANCELED);
    consumer_of(who, sizeof(who));
    ck_assert_str_eq(who, "");          /* the lease ended with the detach */
    push(3, 0);
    o.consumer = "loop-b";
    ck_assert_int_eq(tf_feed_attach_opts(C, FEED, "0", "host", &o, &feed), TF_OK);
    tf_item_t *it = NULL;
    tf_status_t st = tf_infeed_pop(feed, 1000, &it);
    ck_assert_msg(st == TF_OK, "a new consumer after the detach: %s: %s", tf_strerror(st),
                  tf_client_last(C)->error);
    ck_assert(first_value(it) == 3.0f);
    tf_item_release(it);
    tf_feed_detach(feed);
}
END_TEST

/* ---- done, reset, timeouts ----------------------------------------------------------------- */

START_TEST(done_after_drain)
{
    push(0, 0);
    push(10, 0);
    ck_assert_int_eq(tf_feed_done(C, FEED), TF_OK);
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach(C, FEED, "0", "sim", &feed), TF_OK);
    tf_item_t *it = NULL;
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        tf_item_release(it);
    }
    ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_EDONE);
    ck_assert_int_eq(tf_infeed_pop(feed, 0, &it), TF_EDONE);  /* and it stays so */
    tf_feed_detach(feed);
    ck_assert_int_eq(stat_of("released"), 2);
}
END_TEST

START_TEST(empty_times_out)
{
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach(C, FEED, "0", NULL, &feed), TF_OK);
    ck_assert_str_eq(tf_feed_backend(feed), "host");
    tf_item_t *it = NULL;
    ck_assert_int_eq(tf_infeed_pop(feed, 0, &it), TF_EAGAIN);
    ck_assert_int_eq(tf_infeed_pop(feed, 150, &it), TF_EAGAIN);
    push(5, 0);                         /* then it comes */
    ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
    ck_assert(first_value(it) == 5.0f);
    tf_item_release(it);
    tf_feed_detach(feed);
}
END_TEST

START_TEST(reset_new_generation)
{
    push(0, 0);
    push(10, 0);
    tf_feed_opts_t o = TF_FEED_OPTS_INIT;
    o.flags = TF_FEED_NO_PREFETCH;
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach_opts(C, FEED, "0", "host", &o, &feed), TF_OK);
    tf_item_t *old = NULL, *it = NULL;
    ck_assert_int_eq(tf_infeed_pop(feed, 5000, &old), TF_OK);
    uint64_t g = 0;
    ck_assert_int_eq(tf_feed_reset(C, FEED, &g), TF_OK);
    ck_assert_uint_eq(g, 2);
    push(77, 0);
    ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
    ck_assert_uint_eq(tf_item_generation(it), 2);
    ck_assert_uint_eq(tf_item_position(it), 1);
    ck_assert(first_value(it) == 77.0f);
    tf_item_release(old);               /* of generation 1: harmless */
    tf_item_release(it);
    ck_assert_int_eq(tf_feed_ack(feed), TF_OK);
    ck_assert_int_eq(stat_of("released"), 1);
    tf_feed_detach(feed);
}
END_TEST

/* ---- the outfeed ---------------------------------------------------------------------------- */

START_TEST(outfeed_both_ways)
{
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach(C, FEED, "0", "sim", &feed), TF_OK);
    for (int i = 0; i < 3; i++) {
        tf_doc_t *d = item_doc((float)i);
        uint64_t seq = 0;
        ck_assert_int_eq(tf_outfeed_push(feed, d, &seq), TF_OK);
        carried_right(tf_feed_transport(feed));
        ck_assert_uint_eq(seq, (uint64_t)i + 1);
        tf_doc_free(d);
    }
    tf_feed_detach(feed);
    for (uint64_t after = 0; after < 3; after++) {
        tf_doc_t *d = NULL;
        uint64_t seq = 0;
        int dev = -2;
        ck_assert_int_eq(tf_outfeed_get(C, FEED, after, 1000, &d, &seq, &dev), TF_OK);
        carried_right(tf_client_last(C)->transport);
        ck_assert_uint_eq(seq, after + 1);
        ck_assert_int_eq(dev, 0);
        float v;
        memcpy(&v, tf_doc_find(d, "x")->data, sizeof(v));
        ck_assert(v == (float)after);
        tf_doc_free(d);
    }
    tf_doc_t *d = NULL;
    uint64_t seq = 0;
    ck_assert_int_eq(tf_outfeed_get(C, FEED, 3, 100, &d, &seq, NULL), TF_EAGAIN);
    ck_assert_ptr_null(d);
}
END_TEST

/* ---- asynchronous pops and pushes ------------------------------------------------------------ */

typedef struct {
    int calls[8];
    tf_status_t st[8];
    float v[8];
    int order[8];
    int n;
    uint64_t seq[8];
} record_t;

static int rec_index;

static void on_pop(tf_feed_t *feed, tf_status_t st, tf_item_t *it, void *ud)
{
    record_t *r = ud;
    int i = rec_index++;
    r->calls[i]++;
    r->st[i] = st;
    r->order[r->n++] = i;
    if (st == TF_OK) {
        r->v[i] = first_value(it);
        tf_item_release(it);
    }
}

static void on_push(tf_feed_t *feed, tf_status_t st, uint64_t seq, void *ud)
{
    record_t *r = ud;
    r->calls[r->n] = 1;
    r->st[r->n] = st;
    r->seq[r->n++] = seq;
}

START_TEST(async_pops_in_order)
{
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach(C, FEED, "0", "sim", &feed), TF_OK);
    record_t r = {0};
    rec_index = 0;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(tf_infeed_pop_start(feed, 10000, on_pop, &r), TF_OK);
    ck_assert_uint_ge(tf_client_pending(C), 3);
    for (int i = 0; i < 3; i++)
        push((float)(10 * i), 0);
    ck_assert_int_eq(tf_client_run(C, 10000), TF_OK);
    ck_assert_int_eq(r.n, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(r.calls[i], 1);
        ck_assert_int_eq(r.st[i], TF_OK);
        ck_assert(r.v[i] == (float)(10 * i));
    }
    /* A pending pop canceled by detach: its callback runs once, TF_ECANCELED. */
    ck_assert_int_eq(tf_infeed_pop_start(feed, -1, on_pop, &r), TF_OK);
    tf_feed_detach(feed);
    ck_assert_int_eq(r.n, 4);
    ck_assert_int_eq(r.calls[3], 1);
    ck_assert_int_eq(r.st[3], TF_ECANCELED);
}
END_TEST

START_TEST(async_pushes_in_order)
{
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach(C, FEED, "0", "sim", &feed), TF_OK);
    record_t r = {0};
    tf_doc_t *d[4];
    for (int i = 0; i < 4; i++) {
        d[i] = item_doc((float)i);
        ck_assert_int_eq(tf_outfeed_push_start(feed, d[i], on_push, &r), TF_OK);
    }
    ck_assert_int_eq(tf_client_run(C, 10000), TF_OK);
    ck_assert_int_eq(r.n, 4);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(r.st[i], TF_OK);
        ck_assert_uint_eq(r.seq[i], (uint64_t)i + 1);
        tf_doc_free(d[i]);
    }
    tf_feed_detach(feed);
    /* The outfeed kept their order. */
    for (uint64_t after = 0; after < 4; after++) {
        tf_doc_t *o = NULL;
        uint64_t seq = 0;
        ck_assert_int_eq(tf_outfeed_get(C, FEED, after, 1000, &o, &seq, NULL), TF_OK);
        float v;
        memcpy(&v, tf_doc_find(o, "x")->data, sizeof(v));
        ck_assert(v == (float)after);
        tf_doc_free(o);
    }
}
END_TEST

/* A producer keeps 12 pushes of one stream in flight (tf_infeed_push_start), the second one
 * started first: every push is accepted, and the queue holds them in seq order. */
typedef struct {
    int calls;
    tf_status_t st;
    uint64_t round;
    char transport[32];
} inflight_t;

static void on_infeed_pushed(tf_client_t *c, tf_status_t st, uint64_t round,
                             const tf_result_t *r, void *ud)
{
    inflight_t *p = ud;
    ck_assert_ptr_eq(c, C);
    p->calls++;
    p->st = st;
    p->round = round;
    snprintf(p->transport, sizeof(p->transport), "%s", r->transport);
    if (st != TF_OK)
        fprintf(stderr, "push: %s: %s\n", tf_strerror(st), r->error);
}

START_TEST(infeed_pushes_in_flight)
{
    enum { N = 12 };
    inflight_t p[N + 1];
    tf_doc_t *d[N + 1];
    memset(p, 0, sizeof(p));
    for (int k = 0; k < N; k++) {
        uint64_t seq = k == 0 ? 2 : k == 1 ? 1 : (uint64_t)k + 1;
        d[seq] = item_doc((float)(10 * seq));
        ck_assert_int_eq(tf_infeed_push_start(C, FEED, 0, d[seq], seq, 10000,
                                              on_infeed_pushed, &p[seq]), TF_OK);
    }
    ck_assert_uint_ge(tf_client_pending(C), 1);
    ck_assert_int_eq(tf_client_run(C, 20000), TF_OK);
    for (uint64_t seq = 1; seq <= N; seq++) {
        ck_assert_int_eq(p[seq].calls, 1);
        ck_assert_int_eq(p[seq].st, TF_OK);
        ck_assert_uint_eq(p[seq].round, seq);       /* its position: queued in seq order */
        carried_right(p[seq].transport);
        tf_doc_free(d[seq]);
    }
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach(C, FEED, "0", "host", &feed), TF_OK);
    for (uint64_t seq = 1; seq <= N; seq++) {
        tf_item_t *it = NULL;
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        ck_assert_uint_eq(tf_item_seq(it), seq);
        ck_assert(first_value(it) == (float)(10 * seq));
        tf_item_release(it);
    }
    tf_feed_detach(feed);
    /* Refused at the start: no callback. */
    tf_doc_t *one = item_doc(1);
    ck_assert_int_eq(tf_infeed_push_start(C, FEED, 0, one, 1, 0, NULL, NULL), TF_EINVAL);
    ck_assert_int_eq(tf_infeed_push_start(C, FEED, 0, NULL, 1, 0, on_infeed_pushed, &p[0]),
                     TF_EINVAL);
    ck_assert_int_eq(tf_infeed_push_start(C, "http://127.0.0.1:1/nope", 0, one, 1, 0,
                                          on_infeed_pushed, &p[0]), TF_EURL);
    ck_assert_int_eq(p[0].calls, 0);
    tf_doc_free(one);
}
END_TEST

/* ---- the cuda backend without a device ----------------------------------------------------- */

/* This machine has cudart (when built --with-cuda) but no driver: "no device", and the fall
 * back to host when allowed. Built without CUDA the same calls say so, the same way. */
START_TEST(cuda_falls_back)
{
    tf_feed_t *feed = NULL;
    tf_status_t st = tf_feed_attach(C, FEED, "0", "cuda", &feed);
    if (st == TF_OK) {
        /* A real GPU (the device check): the items land in device memory. */
        push(3, 0);
        tf_item_t *it = NULL;
        ck_assert_str_eq(tf_feed_backend(feed), "cuda");
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        ck_assert_uint_eq(tf_doc_find(tf_item_doc(it), "x")->nbytes, 16);
        tf_item_release(it);
        tf_feed_detach(feed);
        return;
    }
    ck_assert_int_eq(st, TF_ENOTIMPL);
    ck_assert_ptr_null(feed);
#ifdef HAVE_CUDA
    ck_assert_msg(strstr(tf_client_last(C)->error, "no CUDA device") != NULL, "%s",
                  tf_client_last(C)->error);
#else
    ck_assert_msg(strstr(tf_client_last(C)->error, "without CUDA") != NULL, "%s",
                  tf_client_last(C)->error);
#endif
    tf_feed_opts_t o = TF_FEED_OPTS_INIT;
    o.flags = TF_FEED_FALLBACK_HOST;
    ck_assert_int_eq(tf_feed_attach_opts(C, FEED, "0", "cuda", &o, &feed), TF_OK);
    ck_assert_str_eq(tf_feed_backend(feed), "host");
    push(3, 0);
    tf_item_t *it = NULL;
    ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
    ck_assert(first_value(it) == 3.0f);
    tf_item_release(it);
    tf_feed_detach(feed);
}
END_TEST

/* ---- arguments ------------------------------------------------------------------------------ */

START_TEST(bad_arguments)
{
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach(C, "http://127.0.0.1:1/v1/tensors/x", "0", NULL, &feed),
                     TF_EURL);
    ck_assert_int_eq(tf_feed_attach(C, "not a url", "0", NULL, &feed), TF_EURL);
    ck_assert_int_eq(tf_feed_attach(C, FEED, "0", "tpu", &feed), TF_EINVAL);
    ck_assert_int_eq(tf_feed_attach(C, FEED, "a/b", NULL, &feed), TF_EINVAL);
    ck_assert_int_eq(tf_feed_attach(C, FEED, NULL, NULL, &feed), TF_EINVAL);
    char url[160];
    snprintf(url, sizeof(url), "%s/v1/feeds/nosuch", D.base);
    ck_assert_int_eq(tf_feed_attach(C, url, "0", NULL, &feed), TF_ENOTFOUND);
    ck_assert_ptr_null(feed);
    tf_feed_opts_t o = TF_FEED_OPTS_INIT;
    o.prefetch = 65;
    ck_assert_int_eq(tf_feed_attach_opts(C, FEED, "0", NULL, &o, &feed), TF_EINVAL);
    o.prefetch = 0;
    o.consumer = "bad id!";
    ck_assert_int_eq(tf_feed_attach_opts(C, FEED, "0", NULL, &o, &feed), TF_EINVAL);
    /* A different declaration of the same feed. */
    ck_assert_int_eq(tf_feed_declare(C, FEED, "{\"signature\":[{\"name\":\"y\",\"dtype\":\"F32\","
                                              "\"shape\":[1]}]}", NULL), TF_ECONFLICT);
    /* A wrong item is refused by the signature. */
    float y = 1;
    int64_t shape[1] = {1};
    tf_doc_t *d = tf_doc_new();
    tf_doc_add(d, "y", TF_F32, 1, shape, &y, sizeof(y), TF_COPY);
    ck_assert_int_eq(tf_infeed_push(C, FEED, 0, d, 0, 0, NULL), TF_EUNPROC);
    tf_doc_free(d);
    tf_feed_detach(NULL);
    tf_item_release(NULL);
}
END_TEST

/* ---- the tfetch feed commands ---------------------------------------------------------------- */

START_TEST(cli_feed)
{
    const char *cli = getenv("TFETCH_CLI");
    if (!cli)
        cli = "./cli/tfetch";
    char cmd[1024], out[4096];
    tf_doc_t *d = item_doc(42);
    void *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(tf_doc_encode(d, &buf, &len), TF_OK);
    const char *in = td_tmpfile(0, buf, len);
    tf_free(buf);
    tf_doc_free(d);
    const char *decl = td_tmpfile(1, DECL, strlen(DECL));
    snprintf(cmd, sizeof(cmd), "%s feed declare %s %s", cli, FEED, decl);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"generation\""));
    snprintf(cmd, sizeof(cmd), "%s -q feed push --device 0 --seq 1 %s %s", cli, FEED, in);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 0);
    snprintf(cmd, sizeof(cmd), "%s -q feed pop --wait 2000 --raw %s | od -An -tf4", cli, FEED);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "42") && strstr(out, "45"), "%s", out);
    snprintf(cmd, sizeof(cmd), "%s -q feed pop --wait 100 %s >/dev/null 2>&1", cli, FEED);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 2);           /* nothing: not found */
    snprintf(cmd, sizeof(cmd), "%s feed done %s", cli, FEED);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 0);
    snprintf(cmd, sizeof(cmd), "%s -q feed pop --wait 2000 %s >/dev/null 2>&1", cli, FEED);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 3);           /* done: 410 */
    snprintf(cmd, sizeof(cmd), "%s feed stats %s", cli, FEED);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "\"released\":1") && strstr(out, "\"done\":true"), "%s", out);
    snprintf(cmd, sizeof(cmd), "%s -q feed outfeed --after 0 --wait 100 %s 2>/dev/null", cli,
             FEED);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 2);
    snprintf(cmd, sizeof(cmd), "%s feed stats --seq 3 %s 2>/dev/null", cli, FEED);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 1);           /* --seq: push only */
    snprintf(cmd, sizeof(cmd), "%s get --device 0 %s 2>/dev/null", cli, FEED);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 1);           /* feed options: feed only */
}
END_TEST

/* ---- the outfeed's retention ----------------------------------------------------------------- */

/* A receiver that fell behind the retention is told where to resume (410, resume_after). */
START_TEST(outfeed_gone_resumes)
{
    const char decl[] = "{\"devices\":1,\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\","
                        "\"shape\":[4]}],\"outfeed_items\":2}";
    char url[160];
    snprintf(url, sizeof(url), "%s/v1/feeds/g", D.base);
    ck_assert_int_eq(tf_feed_declare(C, url, decl, NULL), TF_OK);
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach(C, url, "0", "host", &feed), TF_OK);
    for (int i = 0; i < 4; i++) {
        tf_doc_t *d = item_doc((float)i);
        ck_assert_int_eq(tf_outfeed_push(feed, d, NULL), TF_OK);
        tf_doc_free(d);
    }
    tf_feed_detach(feed);
    tf_doc_t *d = NULL;
    uint64_t seq = 0;
    ck_assert_int_eq(tf_outfeed_get(C, url, 0, 0, &d, &seq, NULL), TF_EGONE);
    carried_right(tf_client_last(C)->transport);
    ck_assert_uint_eq(seq, 2);              /* items 3 and 4 are kept */
    ck_assert_int_eq(tf_outfeed_get(C, url, seq, 0, &d, &seq, NULL), TF_OK);
    ck_assert_uint_eq(seq, 3);
    tf_doc_free(d);
}
END_TEST

/* ---- the same-host ring ---------------------------------------------------------------------- */

/* The mapping of /proc/self/maps that holds p: its permissions and path, or 0. */
static int mapping_of(const void *p, char perms[8], char path[256])
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        path[0] = '\0';
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255[^\n]", &lo, &hi, perms, path) >= 3 &&
            (uintptr_t)p >= lo && (uintptr_t)p < hi)
            found = 1;
    }
    fclose(f);
    return found;
}

/* 1 if the daemon's /metrics has the line "NAME VALUE". */
static int metric_is(const char *line)
{
    static char out[1 << 16];
    char cmd[256], want[128];
    snprintf(cmd, sizeof(cmd), "curl -s %s/metrics", D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 0);
    snprintf(want, sizeof(want), "\n%s\n", line);
    return strstr(out, want) != NULL;
}

/* The value of /metrics line NAME (no labels), or -1. */
static long metric_value(const char *name)
{
    static char out[1 << 16];
    char cmd[256], key[128];
    snprintf(cmd, sizeof(cmd), "curl -s %s/metrics", D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 0);
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *p = strstr(out, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

/* Attaches to device dev of the feed at url with the host backend and opens its ring (the
 * first pop opens it; nothing is queued yet, so it answers TF_EAGAIN). */
static tf_feed_t *attach_ring(const char *url, const char *dev)
{
    tf_feed_t *feed = NULL;
    tf_item_t *it = NULL;
    ck_assert_int_eq(tf_feed_attach(C, url, dev, "host", &feed), TF_OK);
    ck_assert_int_eq(tf_infeed_pop(feed, 0, &it), TF_EAGAIN);
    return feed;
}

/* A popped item's tensors are in the ring: a memfd shared read-only with the daemon, which
 * copied the item there once; /metrics counts the ring and its items. */
START_TEST(ring_items_in_shared_memory)
{
    for (int i = 0; i < 3; i++)
        push((float)(10 * i), 0);
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach(C, FEED, "0", "host", &feed), TF_OK);
    for (int i = 0; i < 3; i++) {
        tf_item_t *it = NULL;
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        ck_assert_str_eq(tf_feed_transport(feed), "shm/ring");
        ck_assert(first_value(it) == (float)(10 * i));
        char perms[8], path[256];
        const void *data = tf_doc_find(tf_item_doc(it), "x")->data;
        ck_assert(mapping_of(data, perms, path));
        ck_assert_msg(strstr(path, "tfetch-ring") != NULL, "item data in '%s'", path);
        ck_assert_msg(perms[0] == 'r' && perms[1] == '-' && perms[3] == 's', "mapped %s",
                      perms);
        ck_assert_ptr_null(tf_doc_writable(tf_item_doc(it), 0)); /* says so */
        tf_item_release(it);
    }
    ck_assert(metric_is("tfetch_shm_rings 1"));
    ck_assert(metric_is("tfetch_shm_ring_items_total 3"));
    tf_feed_detach(feed);
    ck_assert_int_eq(stat_of("released"), 3);
}
END_TEST

/* Items pushed over UCX while the ring is attached are received straight into its free
 * slots and sent from there: no copy through the daemon (tfetch_shm_ring_in_place_total),
 * in order, intact; their slots are used again once released and acknowledged. */
START_TEST(ring_received_in_place)
{
    tf_feed_t *feed = attach_ring(FEED, "0");
    tf_item_t *it = NULL;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 6; i++)
            push((float)(100 * round + 10 * i), 0);
        for (int i = 0; i < 6; i++) {
            ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
            ck_assert_str_eq(tf_feed_transport(feed), "shm/ring");
            ck_assert(first_value(it) == (float)(100 * round + 10 * i));
            char perms[8], path[256];
            ck_assert(mapping_of(tf_doc_find(tf_item_doc(it), "x")->data, perms, path));
            ck_assert_msg(strstr(path, "tfetch-ring") != NULL, "item data in '%s'", path);
            tf_item_release(it);
        }
        ck_assert_int_eq(tf_feed_ack(feed), TF_OK);
    }
    /* The ring has slots for the queue's items too (prefetch 2 + 2, and max_items 16): every
     * push found a free slot, six at a time, and went out from it; none was copied (with
     * the four slots the consumer asked for, one kept spare, three a round would be). */
    ck_assert_int_eq(metric_value("tfetch_shm_ring_lent_total"), 18);
    ck_assert_int_eq(metric_value("tfetch_shm_ring_in_place_total"), 18);
    ck_assert_int_eq(metric_value("tfetch_shm_ring_items_total"), 0);
    tf_feed_detach(feed);
    ck_assert_int_eq(stat_of("released"), 18);
}
END_TEST

/* A producer's staging buffer belongs to the daemon that lent it. Restarted on the same
 * port, the daemon knows no such buffer: the client, upgrading to the new daemon, connects
 * its shm socket (another name) in place of the old one, so the document goes as its bytes
 * and every push still lands. */
START_TEST(ring_staged_after_restart)
{
    int64_t shape[1] = {4};
    tf_tensor_spec_t spec = {"x", TF_F32, 1, shape};
    tf_doc_t *d = NULL;
    ck_assert_int_eq(tf_doc_new_staging(C, FEED, &spec, 1, &d), TF_OK);
    float *x = tf_doc_writable(d, 0);
    x[0] = 1;
    ck_assert_int_eq(tf_infeed_push(C, FEED, 0, d, 0, 0, NULL), TF_OK);
    ck_assert_int_eq(metric_value("tfetch_shm_staged_pushes_total"), 1);
    char port[16];
    snprintf(port, sizeof port, "%u", D.port);
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    const char *const args[] = {"--port", port, NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start again on port %s", port);
    ck_assert_str_eq(FEED + strlen(D.base), "/v1/feeds/f");     /* the same origin */
    ck_assert_int_eq(tf_feed_declare(C, FEED, DECL, NULL), TF_OK);
    tf_status_t st = TF_EIO;
    for (int i = 0; i < 100 && (st = tf_client_upgrade(C, D.base)) != TF_OK; i++)
        usleep(50 * 1000);              /* the old connection's backoff */
    ck_assert_int_eq(st, TF_OK);
    for (int i = 2; i <= 3; i++) {
        x[0] = (float)i;
        st = tf_infeed_push(C, FEED, 0, d, 0, 0, NULL);
        ck_assert_msg(st == TF_OK, "push %d: %s", i, tf_client_last(C)->error);
        carried_right(tf_client_last(C)->transport);
    }
    ck_assert_int_eq(metric_value("tfetch_shm_staged_pushes_total"), 0);
    tf_doc_free(d);
    /* a buffer from the new daemon is staged again */
    ck_assert_int_eq(tf_doc_new_staging(C, FEED, &spec, 1, &d), TF_OK);
    ck_assert_int_eq(tf_infeed_push(C, FEED, 0, d, 0, 0, NULL), TF_OK);
    ck_assert_int_eq(metric_value("tfetch_shm_staged_pushes_total"), 1);
    tf_doc_free(d);
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach(C, FEED, "0", "host", &feed), TF_OK);
    for (int i = 2; i <= 4; i++) {
        tf_item_t *it = NULL;
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        ck_assert(first_value(it) == (float)(i == 4 ? 0 : i));
        tf_item_release(it);
    }
    tf_feed_detach(feed);
}
END_TEST

/* A consumer that releases each item gives its slot back (FREE goes with the feed's next
 * sync, batched with ACK and CREDIT): many more items than the ring has slots all come in
 * its slots, none as a memfd of its own (the overflow when no slot is free). */
START_TEST(ring_frees_reach_the_daemon)
{
    tf_feed_t *feed = attach_ring(FEED, "0");
    tf_item_t *it = NULL;
    for (int i = 0; i < 60; i++) {                  /* 20 slots: prefetch 2 + 2, 16 queued */
        push((float)i, 0);
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        ck_assert_str_eq(tf_feed_transport(feed), "shm/ring");
        ck_assert(first_value(it) == (float)i);
        tf_item_release(it);
    }
    ck_assert_int_eq(metric_value("tfetch_shm_ring_overflow_total"), 0);
    tf_feed_detach(feed);
    ck_assert_int_eq(stat_of("released"), 60);
}
END_TEST

/* /metrics line name once it reads want (polled up to 5 s: the daemon closes a ring when it
 * reads the connection's end); its last value. */
static long metric_settles(const char *name, long want)
{
    long v = -1;
    for (int i = 0; i < 100 && (v = metric_value(name)) != want; i++)
        usleep(50 * 1000);
    return v;
}

/* A ring that closes while an item received into its slot is still queued (delivered, not
 * released: it goes to the next consumer) keeps its memory, and that memory still counts in
 * shm-lease-memory (tfetch_shm_ring_bytes) until the item is gone: a consumer reconnecting
 * again and again could otherwise leave ring after ring behind outside the bound. */
START_TEST(ring_closed_under_a_queued_item_still_counts)
{
    tf_feed_t *feed = attach_ring(FEED, "0");
    tf_item_t *it = NULL;
    push(7, 0);
    ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
    ck_assert(first_value(it) == 7);
    ck_assert_int_eq(metric_value("tfetch_shm_ring_lent_total"), 1);
    long bytes = metric_value("tfetch_shm_ring_bytes");
    ck_assert_int_gt(bytes, 0);
    tf_feed_detach(feed);                           /* not released: queued again */
    ck_assert_int_eq(metric_settles("tfetch_shm_rings", 0), 0);
    ck_assert_int_eq(metric_value("tfetch_shm_ring_bytes"), bytes);
    /* The next consumer gets it (copied into its own ring), releases it: both rings' memory
     * is gone once it is acknowledged and that ring closed. */
    feed = attach_ring(FEED, "0");
    ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
    ck_assert(first_value(it) == 7);
    ck_assert_int_gt(metric_value("tfetch_shm_ring_bytes"), bytes);
    tf_item_release(it);
    ck_assert_int_eq(tf_feed_ack(feed), TF_OK);
    tf_feed_detach(feed);
    ck_assert_int_eq(metric_settles("tfetch_shm_ring_bytes", 0), 0);
    ck_assert_int_eq(stat_of("released"), 1);
}
END_TEST

/* A same-host producer's item built in a staging buffer (tf_doc_new_staging: a memfd the
 * daemon lends, writable here): each push over UCX names it and the daemon copies it from
 * there into a free slot of the ring (tfetch_shm_staged_pushes_total); the copy is taken at
 * the push, so writing the buffer for the next item changes no item queued. Pushed over
 * HTTP (another client) the same document travels as its bytes; pushed to the outfeed it is
 * staged too. The buffer counts in tfetch_shm_stagings until tf_doc_free. */
START_TEST(ring_staged_push_copied)
{
    tf_feed_t *feed = attach_ring(FEED, "0");
    int64_t shape[1] = {4};
    tf_tensor_spec_t spec = {"x", TF_F32, 1, shape};
    tf_doc_t *d = NULL;
    ck_assert_int_eq(tf_doc_new_staging(C, FEED, &spec, 1, &d), TF_OK);
    ck_assert(metric_is("tfetch_shm_stagings 1"));
    float *x = tf_doc_writable(d, 0);
    char perms[8], path[256];
    ck_assert(mapping_of(x, perms, path));
    ck_assert_msg(strstr(path, "tfetch-stage") != NULL, "staged in '%s'", path);
    ck_assert_msg(perms[1] == 'w' && perms[3] == 's', "mapped %s", perms);
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 4; k++)
            x[k] = (float)(10 * i + k);
        ck_assert_int_eq(tf_infeed_push(C, FEED, 0, d, 0, 0, NULL), TF_OK);
        carried_right(tf_client_last(C)->transport);
    }
    tf_client_t *h = NULL;
    ck_assert_int_eq(tf_client_new(&h), TF_OK);
    ck_assert_int_eq(tf_client_set_transport(h, TF_TRANSPORT_HTTP), TF_OK);
    for (int k = 0; k < 4; k++)
        x[k] = (float)(30 + k);
    ck_assert_int_eq(tf_infeed_push(h, FEED, 0, d, 0, 0, NULL), TF_OK);
    ck_assert_str_eq(tf_client_last(h)->transport, "http");
    tf_client_free(h);
    for (int k = 0; k < 4; k++)
        x[k] = -1;
    ck_assert_int_eq(metric_value("tfetch_shm_staged_pushes_total"), 3);
    for (int i = 0; i < 4; i++) {
        tf_item_t *it = NULL;
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        const float *got = tf_doc_find(tf_item_doc(it), "x")->data;
        for (int k = 0; k < 4; k++)
            ck_assert_msg(got[k] == (float)(10 * i + k), "item %d [%d] = %g", i, k,
                          (double)got[k]);
        ck_assert(mapping_of(got, perms, path));
        ck_assert_msg(strstr(path, "tfetch-ring") != NULL, "item %d in '%s'", i, path);
        tf_item_release(it);
    }
    ck_assert_int_eq(metric_value("tfetch_shm_ring_in_place_total"), 4);
    /* the outfeed the same way: a result pushed from the buffer, copied at the push */
    for (int k = 0; k < 4; k++)
        x[k] = (float)(50 + k);
    uint64_t oseq = 0;
    ck_assert_int_eq(tf_outfeed_push(feed, d, &oseq), TF_OK);
    x[0] = -1;
    ck_assert_int_eq(metric_value("tfetch_shm_staged_pushes_total"), 4);
    tf_doc_t *o = NULL;
    uint64_t got_seq = 0;
    ck_assert_int_eq(tf_outfeed_get(C, FEED, 0, 1000, &o, &got_seq, NULL), TF_OK);
    ck_assert_uint_eq(got_seq, oseq);
    ck_assert(((const float *)tf_doc_find(o, "x")->data)[0] == 50.0f);
    tf_doc_free(o);
    tf_doc_free(d);
    ck_assert_int_eq(metric_settles("tfetch_shm_stagings", 0), 0);
    ck_assert_int_eq(metric_value("tfetch_shm_staged_bytes"), 0);
    tf_feed_detach(feed);
}
END_TEST

/* Pushes three rounds of item_doc(100 * round) to a fresh feed of two devices with fanout
 * (split or broadcast), and checks that each device pops its part of every round (split: its
 * two rows; broadcast: all four), in order: from its ring on this host, or, for device 0 when
 * http0, by pop requests of a client on plain HTTP. Returns how many parts were received into
 * a slot (tfetch_shm_ring_lent_total) and copies how many were copied into a ring afterwards
 * (tfetch_shm_ring_items_total). */
static long rounds_in_rings(const char *fanout, int http0, long *copies)
{
    char url[160], decl[256];
    int split = strcmp(fanout, "split") == 0;
    snprintf(url, sizeof(url), "%s/v1/feeds/%s", D.base, fanout);
    snprintf(decl, sizeof(decl), "{\"devices\":2,\"fanout\":\"%s\",\"signature\":[{\"name\":"
             "\"x\",\"dtype\":\"F32\",\"shape\":[4]}],\"max_items\":16,\"lease_ms\":2000}",
             fanout);
    ck_assert_int_eq(tf_feed_declare(C, url, decl, NULL), TF_OK);
    tf_client_t *h = NULL;
    tf_feed_t *feed[2] = {NULL, attach_ring(url, "1")};
    if (http0) {
        ck_assert_int_eq(tf_client_new(&h), TF_OK);
        ck_assert_int_eq(tf_client_set_transport(h, TF_TRANSPORT_HTTP), TF_OK);
        ck_assert_int_eq(tf_feed_attach(h, url, "0", "host", &feed[0]), TF_OK);
    } else {
        feed[0] = attach_ring(url, "0");
    }
    tf_item_t *it = NULL;
    long lent0 = metric_value("tfetch_shm_ring_lent_total");
    long items0 = metric_value("tfetch_shm_ring_items_total");
    for (int round = 0; round < 3; round++) {
        tf_doc_t *d = item_doc((float)(100 * round));
        ck_assert_int_eq(tf_infeed_push(C, url, -1, d, 0, 0, NULL), TF_OK);
        tf_doc_free(d);
        for (int k = 0; k < 2; k++) {
            int ring = k || !http0;
            ck_assert_int_eq(tf_infeed_pop(feed[k], 5000, &it), TF_OK);
            ck_assert_str_eq(tf_feed_transport(feed[k]), ring ? "shm/ring" : "http");
            const tf_tensor_t *t = tf_doc_find(tf_item_doc(it), "x");
            ck_assert_ptr_nonnull(t);
            ck_assert_uint_eq(t->nbytes, split ? 8 : 16);
            float v[4];
            memcpy(v, t->data, (size_t)t->nbytes);
            for (size_t j = 0; j < t->nbytes / sizeof(float); j++)
                ck_assert(v[j] == (float)(100 * round + (split ? 2 * k : 0) + (int)j));
            char perms[8], path[256];
            ck_assert(mapping_of(t->data, perms, path));
            ck_assert_msg((strstr(path, "tfetch-ring") != NULL) == ring, "item data in '%s'",
                          path);
            tf_item_release(it);
        }
    }
    for (int k = 0; k < 2; k++)
        tf_feed_detach(feed[k]);
    tf_client_free(h);
    *copies = metric_value("tfetch_shm_ring_items_total") - items0;
    return metric_value("tfetch_shm_ring_lent_total") - lent0;
}

/* rounds_in_rings(fanout, http0) received lent parts into a slot, sent in_place of them
 * from the slot they were received into, and copied copies into a ring. */
static void expect_rounds(const char *fanout, int http0, long lent, long in_place, long copies)
{
    long copied, got = rounds_in_rings(fanout, http0, &copied);
    ck_assert_int_eq(got, lent);
    ck_assert_int_eq(metric_value("tfetch_shm_ring_in_place_total"), in_place);
    ck_assert_int_eq(copied, copies);
}

/* A split feed's rounds on one host: each device's rows are written once, straight into a
 * free slot of the ring attached to that device, and sent from there (lent == in place, no
 * second copy into the ring). Each ring has slots for its queue's items too: every part
 * found one. */
START_TEST(ring_split_written_in_place)
{
    expect_rounds("split", 0, 6, 6, 0);
}
END_TEST

/* A broadcast round on one host is received into a slot of the first device's ring (read
 * there in place) and copied from there into the other's: one copy per round, where from
 * the heap each ring would get one (lent 0, 6 copies). */
START_TEST(ring_broadcast_received_in_place)
{
    expect_rounds("broadcast", 0, 3, 3, 3);
}
END_TEST

/* With only device 1's ring on this host, a broadcast round is received into that ring's
 * slot, and device 0's consumer, popping over HTTP, is sent the same bytes from there: no
 * copy into any ring. */
START_TEST(ring_broadcast_shared_with_a_request)
{
    expect_rounds("broadcast", 1, 3, 3, 0);
}
END_TEST

#define RAW_F32 "-H 'Content-Type: application/octet-stream' -H 'Tfetch-Dtype: F32' " \
    "-H 'Tfetch-Shape: 4'"
#define RAW_I32 "-H 'Content-Type: application/octet-stream' -H 'Tfetch-Dtype: I32' " \
    "-H 'Tfetch-Shape: 4'"

/* curl POSTs file to device 0's infeed with headers; the HTTP status. */
static int curl_push(const char *file, const char *headers)
{
    char cmd[512], out[64];
    snprintf(cmd, sizeof(cmd), "curl -s -o /dev/null -w '%%{http_code}' -X POST %s "
             "--data-binary @%s %s/devices/0/infeed", headers, file, FEED);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 0);
    return atoi(out);
}

/* Pushes over HTTP land in a slot as well: by libtfetch on plain HTTP, by curl as a
 * safetensors file (with a length, or chunked) and as raw bytes (Tfetch-Dtype/Shape: its
 * header is made in front of it in the slot). Each is received into a free slot and sent from there: lent == in place,
 * and nothing copied (one at a time, so a slot is always free for the next). */
START_TEST(ring_http_push_in_place)
{
    tf_feed_t *feed = attach_ring(FEED, "0");
    tf_item_t *it = NULL;
    tf_client_t *h = NULL;
    ck_assert_int_eq(tf_client_new(&h), TF_OK);
    ck_assert_int_eq(tf_client_set_transport(h, TF_TRANSPORT_HTTP), TF_OK);
    char file[] = "/tmp/tfetch-ring-XXXXXX";
    int fd = mkstemp(file);
    ck_assert_int_ge(fd, 0);
    for (int i = 0; i < 8; i++) {
        tf_doc_t *d = item_doc((float)(10 * i));
        if (i % 4 == 0) {
            uint64_t round = 0;
            ck_assert_int_eq(tf_infeed_push(h, FEED, 0, d, 0, 0, &round), TF_OK);
            ck_assert_str_eq(tf_client_last(h)->transport, "http");
        } else {
            void *buf = NULL;
            size_t len = 0;
            int chunked = i % 4 == 2, raw = i % 4 == 3;     /* raw last: the I32 below */
            ck_assert_int_eq(tf_doc_encode(d, &buf, &len), TF_OK);
            const tf_tensor_t *x = tf_doc_find(d, "x");
            ck_assert_int_eq(ftruncate(fd, 0), 0);
            if (raw)
                ck_assert_int_eq(pwrite(fd, x->data, x->nbytes, 0), (ssize_t)x->nbytes);
            else
                ck_assert_int_eq(pwrite(fd, buf, len, 0), (ssize_t)len);
            tf_free(buf);
            ck_assert_int_eq(curl_push(file, raw ? RAW_F32
                                       : chunked ? "-H 'Content-Type: application/x-safetensors'"
                                                   " -H 'Transfer-Encoding: chunked'"
                                                 : "-H 'Content-Type: "
                                                   "application/x-safetensors'"), 201);
        }
        tf_doc_free(d);
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        ck_assert_str_eq(tf_feed_transport(feed), "shm/ring");
        ck_assert(first_value(it) == (float)(10 * i));
        tf_item_release(it);
        ck_assert_int_eq(tf_feed_ack(feed), TF_OK);
    }
    /* A chunked body that outgrows its slot (a header past the slot's room) moves to memory
     * of its own with what had arrived: accepted, intact, and, larger than a slot, sent to
     * the consumer as a memfd of its own. */
    {
        tf_doc_t *d = item_doc(70);
        char *pad = malloc(40000);
        ck_assert_ptr_nonnull(pad);
        memset(pad, 'p', 39999);
        pad[39999] = '\0';
        ck_assert_int_eq(tf_doc_set_meta(d, "pad", pad), TF_OK);
        free(pad);
        char big[] = "/tmp/tfetch-ring-big-XXXXXX";
        int bfd = mkstemp(big);
        ck_assert_int_ge(bfd, 0);
        void *buf = NULL;
        size_t len = 0;
        ck_assert_int_eq(tf_doc_encode(d, &buf, &len), TF_OK);
        ck_assert_int_eq(pwrite(bfd, buf, len, 0), (ssize_t)len);
        tf_free(buf);
        close(bfd);
        ck_assert_int_eq(curl_push(big, "-H 'Content-Type: application/x-safetensors'"
                                        " -H 'Transfer-Encoding: chunked'"), 201);
        unlink(big);
        tf_doc_free(d);
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        ck_assert(first_value(it) == 70.0f);
        tf_item_release(it);
        ck_assert_int_eq(tf_feed_ack(feed), TF_OK);
        ck_assert_int_eq(metric_value("tfetch_shm_ring_lent_total"), 9);
        ck_assert_int_eq(metric_value("tfetch_shm_ring_in_place_total"), 8);
        ck_assert_int_eq(metric_value("tfetch_shm_ring_overflow_total"), 1);
    }
    /* Raw bodies received into a slot and then refused (I32, the signature says F32) give
     * their slots back: after six, more than the ring has slots, a good push still lands in
     * one. */
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(curl_push(file, RAW_I32), 422);
    tf_doc_t *d = item_doc(60);
    ck_assert_int_eq(tf_infeed_push(h, FEED, 0, d, 0, 0, NULL), TF_OK);
    tf_doc_free(d);
    ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
    ck_assert(first_value(it) == 60.0f);
    tf_item_release(it);
    close(fd);
    unlink(file);
    tf_client_free(h);
    ck_assert_int_eq(metric_value("tfetch_shm_ring_lent_total"), 16);
    ck_assert_int_eq(metric_value("tfetch_shm_ring_in_place_total"), 9);
    ck_assert_int_eq(metric_value("tfetch_shm_ring_items_total"), 0);
    tf_feed_detach(feed);
}
END_TEST

/* Bodies received into slots but refused (a signature mismatch) give their slots back:
 * twenty-five of them on a ring of twenty slots (prefetch 2 + 2, max_items 16) leave every
 * slot free for the good items after; and items
 * received into a ring that closes before they are delivered reach the next consumer, copied
 * from the closed ring's memory, intact. */
START_TEST(ring_slots_given_back)
{
    tf_feed_t *feed = attach_ring(FEED, "0");
    tf_item_t *it = NULL;
    float bad[3] = {1, 2, 3};
    int64_t shape[1] = {3};
    tf_doc_t *d = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(d, "x", TF_F32, 1, shape, bad, sizeof(bad), TF_COPY), TF_OK);
    for (int i = 0; i < 25; i++)
        ck_assert_int_eq(tf_infeed_push(C, FEED, 0, d, 0, 0, NULL), TF_EUNPROC);
    tf_doc_free(d);
    for (int i = 0; i < 3; i++)
        push((float)(10 * i), 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        ck_assert(first_value(it) == (float)(10 * i));
        tf_item_release(it);
    }
    /* every bad body gave its slot back at once: the three good ones found slots too */
    ck_assert(metric_is("tfetch_shm_ring_lent_total 28"));
    /* two more in its slots, then the ring closes before the consumer took them */
    push(30, 0);
    push(40, 0);
    tf_feed_detach(feed);
    tf_feed_opts_t o = TF_FEED_OPTS_INIT;
    o.consumer = "heir";
    ck_assert_int_eq(tf_feed_attach_opts(C, FEED, "0", "host", &o, &feed), TF_OK);
    for (int i = 2; i < 5; i++) {
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        ck_assert_str_eq(tf_feed_transport(feed), "shm/ring");
        ck_assert_msg(first_value(it) == (float)(10 * i), "item %d is %g", i,
                      (double)first_value(it));
        tf_item_release(it);
    }
    tf_feed_detach(feed);
    ck_assert_int_eq(stat_of("released"), 5);
    ck_assert(metric_is("tfetch_shm_rings 0"));
}
END_TEST

/* An item larger than a slot (its metadata is free: here 40 KiB of it, the slots having room
 * for 16 KiB of header) comes as a memfd of its own, intact, between two that fit. */
START_TEST(ring_item_over_a_slot)
{
    push(0, 0);
    tf_doc_t *d = item_doc(10);
    char *big = malloc(40000);
    memset(big, 'm', 39999);
    big[39999] = '\0';
    ck_assert_int_eq(tf_doc_set_meta(d, "note", big), TF_OK);
    ck_assert_int_eq(tf_infeed_push(C, FEED, 0, d, 0, 0, NULL), TF_OK);
    tf_doc_free(d);
    push(20, 0);
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach(C, FEED, "0", "host", &feed), TF_OK);
    for (int i = 0; i < 3; i++) {
        tf_item_t *it = NULL;
        ck_assert_int_eq(tf_infeed_pop(feed, 5000, &it), TF_OK);
        ck_assert_str_eq(tf_feed_transport(feed), "shm/ring");
        ck_assert(first_value(it) == (float)(10 * i));
        const char *note = tf_doc_meta(tf_item_doc(it), "note");
        if (i == 1)
            ck_assert(note && strcmp(note, big) == 0);
        else
            ck_assert_ptr_null(note);
        tf_item_release(it);
    }
    free(big);
    ck_assert(metric_is("tfetch_shm_ring_overflow_total 1"));
    tf_feed_detach(feed);
    ck_assert_int_eq(stat_of("released"), 3);
}
END_TEST

/* ---- processes killed with SIGKILL (over UCX) ------------------------------------------------ */
/* The children fork before this process has a client (a forked UCX thread would not run in
 * them), so these tests have their own fixture: the daemon, and the feed declared by a client
 * freed before any fork. */

static void setup_kill_decl(const char *decl)
{
    const char *const args[] = {NULL};
    UCX = 1;
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
    snprintf(FEED, sizeof(FEED), "%s/v1/feeds/f", D.base);
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_feed_declare(c, FEED, decl, NULL), TF_OK);
    tf_client_free(c);
}

static void setup_kill(void)
{
    setup_kill_decl(DECL);
}

/* Over the ring, with a lease of a minute: an heir under another id gets the dead consumer's
 * items only because its ring's connection closing detached it (the lease would hold them
 * past the heir's 10 s of retries). */
static void setup_kill_ring(void)
{
    RING = 1;
    setup_kill_decl("{\"devices\":1,\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\","
                    "\"shape\":[4]}],\"max_items\":16,\"lease_ms\":60000}");
}

/* A client on the TCase's policy for these tests: ucx, or auto for the ring. */
static tf_client_t *ucx_client(void)
{
    tf_client_t *c = NULL;
    if (tf_client_new(&c) != TF_OK ||
        tf_client_set_transport(c, RING ? TF_TRANSPORT_AUTO : TF_TRANSPORT_UCX) != TF_OK)
        return NULL;
    return c;
}

/* 1 if the last pop came the TCase's way: the ring, or UCX. */
static int popped_our_way(const tf_feed_t *feed)
{
    const char *t = tf_feed_transport(feed);
    return RING ? strcmp(t, "shm/ring") == 0 : strncmp(t, "ucx/", 4) == 0;
}

/* Pops every item there is (until 1.5 s of nothing) over UCX as consumer id, checking that
 * they are the values base, base+10, ... in order; returns how many. */
static int drain_in_order(tf_client_t *c, const char *id, float base)
{
    tf_feed_opts_t o = TF_FEED_OPTS_INIT;
    o.consumer = id;
    tf_feed_t *feed = NULL;
    ck_assert_int_eq(tf_feed_attach_opts(c, FEED, "0", "host", &o, &feed), TF_OK);
    int n = 0;
    uint64_t t0 = (uint64_t)time(NULL);
    for (;;) {
        tf_item_t *it = NULL;
        tf_status_t st = tf_infeed_pop(feed, 1500, &it);
        if (st == TF_ECONFLICT && (uint64_t)time(NULL) - t0 < 10) {   /* a lease still holds */
            usleep(100000);
            continue;
        }
        if (st == TF_EAGAIN)
            break;
        ck_assert_int_eq(st, TF_OK);
        ck_assert_msg(popped_our_way(feed), "popped over %s", tf_feed_transport(feed));
        ck_assert_msg(first_value(it) == base + (float)(10 * n), "item %d is %g", n,
                      (double)first_value(it));
        tf_item_release(it);
        n++;
    }
    tf_feed_detach(feed);
    return n;
}

/* Pushes the items 0, 10, ..., 50, then a child process attaches over UCX as consumer id
 * (prefetch 3) and pops two items; with release_first it releases and acknowledges the first
 * before it pops the second. It holds what it has (the step never ends) and prefetches until
 * it is killed with SIGKILL. */
static void consumer_killed_mid_step(const char *id, int release_first)
{
    tf_client_t *c = ucx_client();
    ck_assert_ptr_nonnull(c);
    C = c;
    for (int i = 0; i < 6; i++)
        push((float)(10 * i), (uint64_t)i + 1);
    tf_client_free(c);
    C = NULL;
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        tf_client_t *k = ucx_client();
        tf_feed_opts_t o = TF_FEED_OPTS_INIT;
        o.consumer = id;
        o.prefetch = 3;
        tf_feed_t *feed = NULL;
        tf_item_t *a = NULL, *b = NULL;
        if (!k || tf_feed_attach_opts(k, FEED, "0", "host", &o, &feed) != TF_OK ||
            tf_infeed_pop(feed, 5000, &a) != TF_OK)
            _exit(1);
        if (release_first) {
            tf_item_release(a);
            if (tf_feed_ack(feed) != TF_OK)
                _exit(1);
        }
        if (tf_infeed_pop(feed, 5000, &b) != TF_OK || !popped_our_way(feed))
            _exit(1);
        (void)b;
        if (write(fds[1], "k", 1) != 1)
            _exit(1);
        for (;;)
            tf_client_run(k, 100);      /* mid-step, prefetching, until killed */
    }
    close(fds[1]);
    char ch;
    ck_assert_int_eq(read(fds[0], &ch, 1), 1);
    close(fds[0]);
    usleep(200000);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status), "the consumer did not die as planned (%d)", status);
    C = ucx_client();
    ck_assert_ptr_nonnull(C);
}

/* A consumer that popped over UCX (with prefetch: several delivered, unacknowledged) dies
 * mid-step: after its lease another consumer gets every item, the dead one's first. */
START_TEST(ucx_consumer_killed)
{
    consumer_killed_mid_step("doomed", 0);
    ck_assert_int_eq(drain_in_order(C, "heir", 0), 6);     /* nothing lost, nothing twice */
    ck_assert_int_ge(stat_of("redeliveries"), 1);
    ck_assert_int_eq(stat_of("released"), 6);
}
END_TEST

/* A training loop relaunched under the same consumer id while its last run's lease still
 * holds (examples/train_loop always attaches as "train-loop"): the last run had released and
 * acknowledged item 0, held item 1 and prefetched more. The new run's first pop rewinds, so
 * it gets item 1 and every one after it, in order; without the rewind its cumulative ack
 * would release the prefetched items unseen. */
START_TEST(ucx_consumer_relaunched_same_id)
{
    consumer_killed_mid_step("loop", 1);
    ck_assert_int_eq(drain_in_order(C, "loop", 10), 5);    /* items 1..5, none lost */
    ck_assert_int_ge(stat_of("redeliveries"), 1);
    ck_assert_int_eq(stat_of("released"), 6);
}
END_TEST

/* A producer pushing with Tfetch-Seq over UCX is killed mid-stream; its restart resends from
 * the last seq it saw acknowledged plus one (the one in flight may or may not have been
 * enqueued): the duplicate is acknowledged, not enqueued, so the consumer sees each once. */
START_TEST(ucx_producer_killed)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        C = ucx_client();
        if (!C)
            _exit(1);
        for (uint64_t seq = 1; seq <= 14; seq++) {
            tf_doc_t *d = item_doc((float)(10 * (seq - 1)));
            uint64_t round = 0;
            if (tf_infeed_push(C, FEED, 0, d, seq, 0, &round) != TF_OK ||
                strncmp(tf_client_last(C)->transport, "ucx/", 4) != 0)
                _exit(1);
            tf_doc_free(d);
            if (write(fds[1], &seq, sizeof(seq)) != (ssize_t)sizeof(seq))
                _exit(1);
        }
        for (;;)
            pause();
    }
    close(fds[1]);
    uint64_t last = 0, seq;
    while (last < 5 && read(fds[0], &seq, sizeof(seq)) == (ssize_t)sizeof(seq))
        last = seq;
    ck_assert_int_eq(kill(pid, SIGKILL), 0);     /* somewhere in its pushes 6..14 */
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    while (read(fds[0], &seq, sizeof(seq)) == (ssize_t)sizeof(seq))
        last = seq;                     /* what it saw acknowledged before it died */
    close(fds[0]);
    /* The producer restarts and connects again. The daemon may still be busy with the dead
     * one's endpoint (under ASan its HELLO went unanswered for 2 s, 1 run in 4, also before
     * this session's changes): a restarted producer retries, as this one does. */
    tf_status_t up = TF_ECONNECT;
    for (int i = 0; i < 40 && up != TF_OK; i++) {
        C = ucx_client();
        ck_assert_ptr_nonnull(C);
        if ((up = tf_client_upgrade(C, D.base)) != TF_OK) {
            tf_client_free(C);
            C = NULL;
            usleep(250000);
        }
    }
    ck_assert_msg(up == TF_OK, "the restarted producer never connected over UCX");
    for (seq = last + 1; seq <= 15; seq++)
        push((float)(10 * (seq - 1)), seq);
    push(10 * 14, 15);                  /* a retry of the last one: acknowledged, not queued */
    ck_assert_int_eq(drain_in_order(C, "reader", 0), 15);
}
END_TEST

/* The end-to-end cases every TCase of a transport runs. */
static void add_end_to_end(TCase *tc)
{
    tcase_add_test(tc, host_end_to_end);
    tcase_add_test(tc, sim_end_to_end);
    tcase_add_test(tc, seq_retry_once);
    tcase_add_test(tc, prefetch_fills);
    tcase_add_test(tc, ack_is_cumulative);
    tcase_add_test(tc, unreleased_comes_again);
    tcase_add_test(tc, detach_ends_a_waiting_pop);
    tcase_add_test(tc, done_after_drain);
    tcase_add_test(tc, empty_times_out);
    tcase_add_test(tc, reset_new_generation);
    tcase_add_test(tc, async_pops_in_order);
    tcase_add_test(tc, infeed_pushes_in_flight);
}

/* A TCase of s with its fixture (the daemon per test) and a minute per test. */
static TCase *new_case(Suite *s, const char *name, void (*fixture)(void))
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, fixture, teardown);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return tc;
}

Suite *suite_feedclient(void)
{
    Suite *s = suite_create("feedclient");
    TCase *tc = new_case(s, "feedclient", setup);
    add_end_to_end(tc);
    tcase_add_test(tc, outfeed_both_ways);
    tcase_add_test(tc, async_pushes_in_order);
    tcase_add_test(tc, cuda_falls_back);
    tcase_add_test(tc, bad_arguments);
    tcase_add_test(tc, cli_feed);
    tcase_add_test(tc, outfeed_gone_resumes);
    /* The same end to end over UCX (policy ucx: every feed request is a FEED frame). */
    tc = new_case(s, "feedclient_ucx", setup_ucx);
    add_end_to_end(tc);
    tcase_add_test(tc, outfeed_both_ways);
    tcase_add_test(tc, async_pushes_in_order);
    tcase_add_test(tc, outfeed_gone_resumes);
    tc = new_case(s, "feedclient_kill", setup_kill);
    tcase_add_test(tc, ucx_consumer_killed);
    tcase_add_test(tc, ucx_consumer_relaunched_same_id);
    tcase_add_test(tc, ucx_producer_killed);
    /* The same end to end on one host with policy auto: pops come from the ring. */
    tc = new_case(s, "feedclient_ring", setup_ring);
    add_end_to_end(tc);
    tcase_add_test(tc, ring_items_in_shared_memory);
    tcase_add_test(tc, ring_received_in_place);
    tcase_add_test(tc, ring_staged_push_copied);
    tcase_add_test(tc, ring_staged_after_restart);
    tcase_add_test(tc, ring_frees_reach_the_daemon);
    tcase_add_test(tc, ring_closed_under_a_queued_item_still_counts);
    tcase_add_test(tc, ring_split_written_in_place);
    tcase_add_test(tc, ring_broadcast_received_in_place);
    tcase_add_test(tc, ring_broadcast_shared_with_a_request);
    tcase_add_test(tc, ring_http_push_in_place);
    tcase_add_test(tc, ring_slots_given_back);
    tcase_add_test(tc, ring_item_over_a_slot);
    tc = new_case(s, "feedclient_ring_kill", setup_kill_ring);
    tcase_add_test(tc, ucx_consumer_killed);
    tcase_add_test(tc, ucx_consumer_relaunched_same_id);
    return s;
}
