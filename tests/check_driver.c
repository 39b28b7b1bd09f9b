/* check_driver.c - tf_driver_t (client/driver.c): a client driven by a thread of its own.
 *
 * Against the real tfetchd (when $TFETCHD names it; make check sets it): a thousand
 * exchanges submitted from two threads at once, each completed exactly once with its own
 * reply and tag, the caller woken through notify (never more often than completions
 * arrive); per-request user ids (tf_request_t user) kept apart by the accumulate route;
 * refusals that complete rather than vanish; inline requests (TF_DRIVER_INLINE) completed
 * before tf_driver_submit returns, without a notify; tf_driver_wait; and a driver freed with
 * a long-poll in flight, which must return at once and leak nothing.
 */
#include "config.h"

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/tfetch.h"
#include "tests/fixtures.h"
#include "tests/suites.h"
#include "transports/clock.h"

#define MANY 1000

static atomic_int notified;

static void count_notify(void *ud)
{
    (void)ud;
    atomic_fetch_add(&notified, 1);
}

static tf_doc_t *f32_doc(int n, float base)
{
    float v[16];
    int64_t shape[1] = {n};
    for (int i = 0; i < n; i++)
        v[i] = base + (float)i;
    tf_doc_t *d = tf_doc_new();
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(tf_doc_add(d, "x", TF_F32, 1, shape, v, (size_t)n * 4, TF_COPY), TF_OK);
    return d;
}

static tf_driver_t *driver_for(tf_notify_fn notify, const char *user)
{
    tf_client_t *c;
    tf_driver_t *d = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    if (user)
        ck_assert_int_eq(tf_client_set_user(c, user), TF_OK);
    ck_assert_int_eq(tf_driver_new(c, notify, NULL, &d), TF_OK);
    return d;
}

/* Reaps until `want` completions arrived (waiting on tf_driver_wait), calling fn on each. */
static void reap_all(tf_driver_t *d, int want, void (*fn)(const tf_completion_t *, void *),
                     void *ud)
{
    int got = 0;
    uint64_t t0 = tfx_now_ms();
    while (got < want) {
        ck_assert_msg(tfx_now_ms() - t0 < 120000, "only %d of %d completions", got, want);
        if (tf_driver_wait(d, 1000) != TF_OK)
            continue;
        tf_completion_t done = TF_COMPLETION_INIT;
        while (tf_driver_reap(d, &done) == TF_OK) {
            fn(&done, ud);
            tf_doc_free(done.doc);
            got++;
        }
    }
}

/* ---- many in flight, from two threads --------------------------------------------------- */

typedef struct {
    tf_driver_t *d;
    const char *url;
    tf_doc_t **in;
    int first, n;
} feeder_t;

static void *feed(void *arg)
{
    feeder_t *f = arg;
    for (int i = f->first; i < f->first + f->n; i++) {
        tf_request_t rq = TF_REQUEST_INIT;
        rq.op = TF_OP_EXCHANGE;
        rq.url = f->url;
        rq.in = f->in[i];
        if (tf_driver_submit(f->d, &rq, (uint64_t)i, 0) != TF_OK)
            return "submit failed";
    }
    return NULL;
}

typedef struct {
    tf_doc_t **in;
    int seen[MANY];
    int good;
    char why[400];
} tally_t;

static void tally(const tf_completion_t *done, void *ud)
{
    tally_t *t = ud;
    ck_assert_uint_lt(done->tag, MANY);
    int i = (int)done->tag;
    t->seen[i]++;
    const tf_tensor_t *a = done->doc ? tf_doc_find(done->doc, "x") : NULL;
    const tf_tensor_t *b = tf_doc_find(t->in[i], "x");
    if (done->status != TF_OK)
        snprintf(t->why, sizeof(t->why), "%d: %s %.256s", i, tf_err_name(done->status),
                 done->result.error);
    else if (!a || a->nbytes != b->nbytes || memcmp(a->data, b->data, a->nbytes) != 0)
        snprintf(t->why, sizeof(t->why), "%d: the reply is not what was sent", i);
    else if (strcmp(done->result.op, "call") != 0 || !done->result.transport[0])
        snprintf(t->why, sizeof(t->why), "%d: result op '%s' transport '%s'", i,
                 done->result.op, done->result.transport);
    else
        t->good++;
}

START_TEST(driver_thousand_from_two_threads)
{
    if (!getenv("TFETCHD"))
        return;
    td_daemon_t dm;
    ck_assert_int_eq(td_start(&dm, NULL), 0);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/call/echo", dm.base);
    atomic_store(&notified, 0);
    tf_driver_t *d = driver_for(count_notify, "driver-many");
    tally_t *t = calloc(1, sizeof(*t));
    tf_doc_t **in = calloc(MANY, sizeof(*in));
    ck_assert(t && in);
    for (int i = 0; i < MANY; i++)
        in[i] = f32_doc(1 + i % 16, (float)i * 100.0f);
    t->in = in;
    feeder_t f1 = {d, url, in, 0, MANY / 2}, f2 = {d, url, in, MANY / 2, MANY / 2};
    pthread_t th1, th2;
    ck_assert_int_eq(pthread_create(&th1, NULL, feed, &f1), 0);
    ck_assert_int_eq(pthread_create(&th2, NULL, feed, &f2), 0);
    void *r1, *r2;
    pthread_join(th1, &r1);
    pthread_join(th2, &r2);
    ck_assert_ptr_null(r1);
    ck_assert_ptr_null(r2);
    reap_all(d, MANY, tally, t);
    for (int i = 0; i < MANY; i++)
        ck_assert_msg(t->seen[i] == 1, "tag %d completed %d times", i, t->seen[i]);
    ck_assert_msg(t->good == MANY, "%d of %d good; %s", t->good, MANY, t->why);
    int n = atomic_load(&notified);
    ck_assert_int_ge(n, 1);
    ck_assert_int_le(n, MANY);
    tf_completion_t done = TF_COMPLETION_INIT;
    ck_assert_int_eq(tf_driver_reap(d, &done), TF_EAGAIN);
    tf_driver_free(d);
    for (int i = 0; i < MANY; i++)
        tf_doc_free(in[i]);
    free(in);
    free(t);
    ck_assert_int_eq(td_stop(&dm, SIGTERM, 10000), 0);
    td_cleanup();
}
END_TEST

/* ---- per-request users, refusals, inline, wait ------------------------------------------ */

typedef struct {
    int n;
    tf_status_t st[32];
    uint64_t tag[32];
    float first[32];
    char error[32][256];
} seen_t;

static void record(const tf_completion_t *done, void *ud)
{
    seen_t *s = ud;
    ck_assert_int_lt(s->n, 32);
    s->st[s->n] = done->status;
    s->tag[s->n] = done->tag;
    snprintf(s->error[s->n], sizeof(s->error[0]), "%s", done->result.error);
    const tf_tensor_t *x = done->doc ? tf_doc_find(done->doc, "x") : NULL;
    s->first[s->n] = x ? ((const float *)x->data)[0] : -1.0f;
    s->n++;
}

/* The accumulate route keeps a sum per user: two users' requests through one client, each
 * naming its user in tf_request_t, must not see each other's sums. */
START_TEST(driver_user_per_request)
{
    if (!getenv("TFETCHD"))
        return;
    td_daemon_t dm;
    ck_assert_int_eq(td_start(&dm, NULL), 0);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/call/accumulate", dm.base);
    tf_driver_t *d = driver_for(NULL, "driver-default");
    tf_doc_t *one = f32_doc(1, 1.0f), *ten = f32_doc(1, 10.0f);
    const char *users[4] = {"driver-alice", "driver-bob", "driver-alice", NULL};
    tf_doc_t *docs[4] = {one, ten, one, ten};
    seen_t s = {0};
    for (int i = 0; i < 4; i++) {
        tf_request_t rq = TF_REQUEST_INIT;
        rq.op = TF_OP_EXCHANGE;
        rq.url = url;
        rq.in = docs[i];
        rq.user = users[i];
        ck_assert_int_eq(tf_driver_submit(d, &rq, (uint64_t)i, 0), TF_OK);
        reap_all(d, 1, record, &s);        /* one at a time: the sums' order is known */
    }
    /* alice 1, bob 10, alice 1+1, the client's default user 10 */
    ck_assert_int_eq(s.n, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(s.st[i] == TF_OK, "%d: %s %s", i, tf_err_name(s.st[i]), s.error[i]);
    ck_assert_float_eq(s.first[0], 1.0f);
    ck_assert_float_eq(s.first[1], 10.0f);
    ck_assert_float_eq(s.first[2], 2.0f);
    ck_assert_float_eq(s.first[3], 10.0f);
    tf_driver_free(d);
    tf_doc_free(one);
    tf_doc_free(ten);
    ck_assert_int_eq(td_stop(&dm, SIGTERM, 10000), 0);
    td_cleanup();
}
END_TEST

/* What tf_fetch_start refuses completes (with the refusal) instead of vanishing; what
 * tf_driver_submit refuses never completes. */
START_TEST(driver_refusals_complete)
{
    tf_driver_t *d = driver_for(NULL, NULL);
    tf_request_t rq = TF_REQUEST_INIT;
    rq.op = TF_OP_GET;
    rq.url = "not a url";
    ck_assert_int_eq(tf_driver_submit(d, &rq, 7, 0), TF_OK);
    rq.url = "http://127.0.0.1:1/v1/tensors/x";
    rq.user = "bad user id";
    ck_assert_int_eq(tf_driver_submit(d, &rq, 8, 0), TF_OK);
    rq.user = NULL;
    rq.op = (tf_op_t)99;
    ck_assert_int_eq(tf_driver_submit(d, &rq, 9, 0), TF_OK);
    seen_t s = {0};
    reap_all(d, 3, record, &s);
    ck_assert_int_eq(s.tag[0], 7);
    ck_assert_int_eq(s.st[0], TF_EURL);
    ck_assert_int_eq(s.tag[1], 8);
    ck_assert_int_eq(s.st[1], TF_EINVAL);
    ck_assert_msg(strstr(s.error[1], "user id") != NULL, "%s", s.error[1]);
    ck_assert_int_eq(s.tag[2], 9);
    ck_assert_int_eq(s.st[2], TF_EINVAL);
    /* refused by tf_driver_submit itself: no completion */
    ck_assert_int_eq(tf_driver_submit(d, NULL, 10, 0), TF_EINVAL);
    tf_request_t big = TF_REQUEST_INIT;
    ck_assert_int_eq(tf_driver_submit(d, &big, 11, 0), TF_OK);    /* op 0: completes */
    reap_all(d, 1, record, &s);
    ck_assert_int_eq(s.tag[3], 11);
    ck_assert_int_eq(tf_driver_wait(d, 50), TF_EAGAIN);
    tf_completion_t small = {.size = 8};
    ck_assert_int_eq(tf_driver_reap(d, &small), TF_EINVAL);
    /* A completion of the 0.1 layout (664 bytes, the Bun package's) is filled up to there,
     * and not a byte past it (the etag added since is not written). */
    ck_assert_int_eq(tf_driver_submit(d, &big, 12, 0), TF_OK);
    union {
        tf_completion_t c;
        unsigned char b[sizeof(tf_completion_t)];
    } old;
    memset(&old, 0xA5, sizeof old);
    old.c.size = 664;
    ck_assert_int_eq(tf_driver_wait(d, 10000), TF_OK);
    ck_assert_int_eq(tf_driver_reap(d, &old.c), TF_OK);
    ck_assert_uint_eq(old.c.tag, 12);
    ck_assert_uint_eq(old.c.size, 664);
    for (size_t i = 664; i < sizeof old; i++)
        ck_assert_uint_eq(old.b[i], 0xA5);
    tf_driver_free(d);
    tf_driver_free(NULL);
    ck_assert_int_eq(tf_driver_new(NULL, NULL, NULL, &d), TF_EINVAL);
}
END_TEST

/* Once the client is connected, an inline request to a same-host server completes on the
 * calling thread: its completion is there when tf_driver_submit returns, and notify is not
 * called for it. */
START_TEST(driver_inline_completes_in_submit)
{
    if (!getenv("TFETCHD"))
        return;
    td_daemon_t dm;
    ck_assert_int_eq(td_start(&dm, NULL), 0);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/call/echo", dm.base);
    atomic_store(&notified, 0);
    tf_driver_t *d = driver_for(count_notify, NULL);
    tf_doc_t *in = f32_doc(4, 3.0f);
    tf_request_t rq = TF_REQUEST_INIT;
    rq.op = TF_OP_EXCHANGE;
    rq.url = url;
    rq.in = in;
    seen_t s = {0};
    ck_assert_int_eq(tf_driver_submit(d, &rq, 1, 0), TF_OK);   /* negotiates, on the driver */
    reap_all(d, 1, record, &s);
    ck_assert_int_eq(s.st[0], TF_OK);
    /* notify runs after the completion is queued, outside the driver's lock: the reap
     * above may come first (seen in CI), so give it a moment. */
    for (int i = 0; i < 1000 && atomic_load(&notified) < 1; i++)
        nanosleep(&(struct timespec){0, 1000000L}, NULL);
    int before = atomic_load(&notified);
    ck_assert_int_ge(before, 1);
    int inline_done = 0;
    for (int i = 0; i < 20; i++) {
        ck_assert_int_eq(tf_driver_submit(d, &rq, 100 + (uint64_t)i, TF_DRIVER_INLINE), TF_OK);
        tf_completion_t done = TF_COMPLETION_INIT;
        if (tf_driver_reap(d, &done) == TF_OK) {
            ck_assert_int_eq(done.status, TF_OK);
            ck_assert_uint_eq(done.tag, 100 + (uint64_t)i);
            ck_assert_msg(strncmp(done.result.transport, "ucx/", 4) == 0, "%s",
                          done.result.transport);
            tf_doc_free(done.doc);
            inline_done++;
        } else {
            reap_all(d, 1, record, &s);      /* took longer than 1 ms: the driver's */
        }
    }
    /* a loaded machine may push some past 1 ms (then the driver's, notified), never all */
    ck_assert_int_ge(inline_done, 1);
    ck_assert_int_eq(atomic_load(&notified), before + (20 - inline_done));
    tf_driver_free(d);
    tf_doc_free(in);
    ck_assert_int_eq(td_stop(&dm, SIGTERM, 10000), 0);
    td_cleanup();
}
END_TEST

/* Freed with a long-poll in flight: returns at once (the request canceled), leaks nothing. */
START_TEST(driver_free_cancels)
{
    if (!getenv("TFETCHD"))
        return;
    td_daemon_t dm;
    ck_assert_int_eq(td_start(&dm, NULL), 0);
    tf_driver_t *d = driver_for(count_notify, NULL);
    tf_request_t rq = TF_REQUEST_INIT;
    rq.op = TF_OP_GET;
    rq.url = td_url(&dm, "/v1/tensors/never");
    rq.wait_ms = 30000;
    ck_assert_int_eq(tf_driver_submit(d, &rq, 1, 0), TF_OK);
    ck_assert_int_eq(tf_driver_wait(d, 300), TF_EAGAIN);
    uint64_t t0 = tfx_now_ms();
    tf_driver_free(d);
    ck_assert_uint_lt(tfx_now_ms() - t0, 5000);
    ck_assert_int_eq(td_stop(&dm, SIGTERM, 10000), 0);
    td_cleanup();
}
END_TEST

/* The Bun package (js/src/lib.ts) reads and writes these structs by offset, through bun:ffi:
 * a change here must change it too. It passes the sizes of their 0.1 layouts (a request of
 * 80 bytes, a completion of 664), which the library takes as versioned structs: the fields
 * added since (conditions, etag) start where those end. */
START_TEST(driver_struct_layout_js)
{
    ck_assert_uint_eq(offsetof(tf_request_t, if_match), 80);
    ck_assert_uint_eq(offsetof(tf_result_t, etag), 664 - 32);
    ck_assert_uint_eq(offsetof(tf_request_t, op), 8);
    ck_assert_uint_eq(offsetof(tf_request_t, url), 16);
    ck_assert_uint_eq(offsetof(tf_request_t, in), 24);
    ck_assert_uint_eq(offsetof(tf_request_t, wait_ms), 32);
    ck_assert_uint_eq(offsetof(tf_request_t, timeout_ms), 40);
    ck_assert_uint_eq(offsetof(tf_request_t, format), 48);
    ck_assert_uint_eq(offsetof(tf_request_t, request_id), 56);
    ck_assert_uint_eq(offsetof(tf_request_t, transport), 64);
    ck_assert_uint_eq(offsetof(tf_request_t, user), 72);
    ck_assert_uint_ge(sizeof(tf_completion_t), 664);
    ck_assert_uint_eq(offsetof(tf_completion_t, tag), 8);
    ck_assert_uint_eq(offsetof(tf_completion_t, status), 16);
    ck_assert_uint_eq(offsetof(tf_completion_t, doc), 24);
    ck_assert_uint_eq(offsetof(tf_completion_t, result), 32);
    ck_assert_uint_eq(offsetof(tf_result_t, http_status), 4);
    ck_assert_uint_eq(offsetof(tf_result_t, request_id), 8);
    ck_assert_uint_eq(offsetof(tf_result_t, transport), 137);
    ck_assert_uint_eq(offsetof(tf_result_t, op), 169);
    ck_assert_uint_eq(offsetof(tf_result_t, bytes_sent), 192);
    ck_assert_uint_eq(offsetof(tf_result_t, bytes_received), 200);
    ck_assert_uint_eq(offsetof(tf_result_t, seconds), 208);
    ck_assert_uint_eq(offsetof(tf_result_t, error), 216);
    ck_assert_uint_eq(offsetof(tf_result_t, fallback), 472);
    ck_assert_uint_eq(offsetof(tf_tensor_t, dtype), 8);
    ck_assert_uint_eq(offsetof(tf_tensor_t, rank), 12);
    ck_assert_uint_eq(offsetof(tf_tensor_t, shape), 16);
    ck_assert_uint_eq(offsetof(tf_tensor_t, data), 80);
    ck_assert_uint_eq(offsetof(tf_tensor_t, nbytes), 88);
}
END_TEST

Suite *suite_driver(void)
{
    Suite *s = suite_create("driver");
    TCase *tc = tcase_create("driver");
    tcase_add_test(tc, driver_thousand_from_two_threads);
    tcase_add_test(tc, driver_user_per_request);
    tcase_add_test(tc, driver_refusals_complete);
    tcase_add_test(tc, driver_inline_completes_in_submit);
    tcase_add_test(tc, driver_free_cancels);
    tcase_add_test(tc, driver_struct_layout_js);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);
    return s;
}
