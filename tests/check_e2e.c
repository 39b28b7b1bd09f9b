/* check_e2e.c - end-to-end suite: the real tfetchd (port 0) driven by libtfetch and by the
 * curl command line. Every endpoint, every dtype, long-poll, limits (413/431/507), JSON errors,
 * malformed bodies, concurrency with checksummed data, and SIGTERM during a transfer.
 * Each test starts its own daemon (Check forks per test), so tests share nothing.
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "client/tfetch.h"
#include "transports/clock.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static td_daemon_t D;
static char out[1 << 16];

static void start(const char *const *args)
{
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
}

static void stop_clean(void)
{
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}

/* curl -s with extra args against a path; returns the HTTP status; the body lands in out. */
static int curl(const char *args, const char *path)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "curl -sS -o /tmp/tf-e2e-body-%d -w '%%{http_code}' %s '%s%s'",
             (int)getpid(), args, D.base, path);
    char code[16];
    int rc = td_run(cmd, code, sizeof code);
    ck_assert_msg(rc == 0, "curl failed (%d): %s", rc, cmd);
    snprintf(cmd, sizeof cmd, "cat /tmp/tf-e2e-body-%d", (int)getpid());
    td_run(cmd, out, sizeof out);
    return atoi(code);
}

static tf_client_t *client(void)
{
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    return c;
}

/* ---- curl ------------------------------------------------------------------------------ */

START_TEST(curl_raw_put_get_json_list_delete)
{
    start(NULL);
    float v[6] = {1, 2, 3, 4, 5, 6.5f};
    const char *f = td_tmpfile(0, v, sizeof v);
    char args[512];
    snprintf(args, sizeof args, "-X PUT --data-binary @%s -H 'Content-Type: application/octet-stream' "
             "-H 'Tfetch-Dtype: F32' -H 'Tfetch-Shape: 2,3'", f);
    ck_assert_int_eq(curl(args, "/v1/tensors/w"), 201);
    ck_assert_int_eq(curl(args, "/v1/tensors/w"), 204);        /* replaced */

    ck_assert_int_eq(curl("-H 'Accept: application/json'", "/v1/tensors/w"), 200);
    ck_assert_str_eq(out, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data\":[[1,2,3],[4,5,6.5]]}}");

    ck_assert_int_eq(curl("-H 'Accept: application/octet-stream'", "/v1/tensors/w"), 200);
    ck_assert_int_eq(memcmp(out, v, sizeof v), 0);

    /* Default: safetensors, readable by the library. */
    ck_assert_int_eq(curl("", "/v1/tensors/w"), 200);
    tf_doc_t *doc = NULL;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "curl -sS %s/v1/tensors/w -o /tmp/tf-e2e-st-%d", D.base, (int)getpid());
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    snprintf(cmd, sizeof cmd, "/tmp/tf-e2e-st-%d", (int)getpid());
    FILE *fp = fopen(cmd, "rb");
    ck_assert_ptr_nonnull(fp);
    static uint8_t st[4096];
    size_t n = fread(st, 1, sizeof st, fp);
    fclose(fp);
    ck_assert_int_eq(tf_doc_decode(st, n, TF_COPY, &doc), TF_OK);
    const tf_tensor_t *t = tf_doc_find(doc, "w");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, TF_F32);
    ck_assert_int_eq(t->rank, 2);
    ck_assert_int_eq(t->shape[0], 2);
    ck_assert_int_eq(t->shape[1], 3);
    ck_assert_int_eq(memcmp(t->data, v, sizeof v), 0);
    tf_doc_free(doc);

    ck_assert_int_eq(curl("", "/v1/tensors"), 200);
    ck_assert_msg(strstr(out, "{\"name\":\"w\",\"bytes\":") != NULL, "listing: %s", out);
    ck_assert_msg(strstr(out, "\"dtype\":\"F32\",\"shape\":[2,3]") != NULL, "listing: %s", out);

    ck_assert_int_eq(curl("-X DELETE", "/v1/tensors/w"), 204);
    ck_assert_int_eq(curl("-X DELETE", "/v1/tensors/w"), 404);
    ck_assert_msg(strstr(out, "\"code\":\"TF_ENOTFOUND\"") != NULL, "error body: %s", out);
    ck_assert_int_eq(curl("", "/v1/tensors/w"), 404);
    stop_clean();
}
END_TEST

START_TEST(curl_endpoints_and_errors)
{
    start(NULL);
    ck_assert_int_eq(curl("", "/healthz"), 200);
    ck_assert_str_eq(out, "ok\n");
    ck_assert_int_eq(curl("", "/v1/info"), 200);
    ck_assert_msg(strstr(out, "\"transports\":[\"http\"") != NULL, "info: %s", out);
    ck_assert_msg(strstr(out, "\"max_body\":") != NULL, "info: %s", out);
    ck_assert_int_eq(curl("", "/nope"), 404);
    ck_assert_msg(strstr(out, "\"code\":\"TF_ENOTFOUND\"") != NULL, "%s", out);
    ck_assert_int_eq(curl("-X POST -d x", "/v1/tensors"), 405);
    ck_assert_msg(strstr(out, "\"code\":\"TF_EMETHOD\"") != NULL, "%s", out);
    ck_assert_int_eq(curl("", "/v1/tensors/bad%2Fname"), 400);
    ck_assert_int_eq(curl("-H 'Tfetch-User: no spaces allowed'", "/v1/tensors"), 400);
    ck_assert_msg(strstr(out, "Tfetch-User") != NULL, "%s", out);
    ck_assert_int_eq(curl("-H 'Tfetch-Request-Id: bad id!'", "/v1/tensors"), 400);
    ck_assert_int_eq(curl("-X PUT -H 'Content-Type: text/plain' -d hi", "/v1/tensors/x"), 415);
    ck_assert_msg(strstr(out, "\"code\":\"TF_EMEDIATYPE\"") != NULL, "%s", out);
    /* Raw body whose size does not match its header. */
    ck_assert_int_eq(curl("-X PUT -H 'Content-Type: application/octet-stream' -H 'Tfetch-Dtype: F32' "
                          "-H 'Tfetch-Shape: 4' --data-binary abc", "/v1/tensors/x"), 422);
    ck_assert_msg(strstr(out, "body is 3 bytes but F32 x [4] needs 16") != NULL, "%s", out);
    ck_assert_int_eq(curl("-X PUT -H 'Transfer-Encoding: chunked' -H 'Tfetch-Dtype: F32' "
                          "-H 'Tfetch-Shape: 4' --data-binary abc", "/v1/tensors/x"), 422);
    ck_assert_msg(strstr(out, "body is 3 bytes but Tfetch-Dtype x Tfetch-Shape need 16") != NULL,
                  "%s", out);
    ck_assert_int_eq(curl("-X PUT -H 'Tfetch-Dtype: F99' -H 'Tfetch-Shape: 1' --data-binary abcd",
                          "/v1/tensors/x"), 400);
    ck_assert_int_eq(curl("-X PUT -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: -1' --data-binary a",
                          "/v1/tensors/x"), 400);
    /* Packed F4: two elements per byte; an odd count is not whole bytes. */
    ck_assert_int_eq(curl("-X PUT -H 'Tfetch-Dtype: F4' -H 'Tfetch-Shape: 4' --data-binary ab",
                          "/v1/tensors/f4"), 201);
    ck_assert_int_eq(curl("-X PUT -H 'Tfetch-Dtype: F4' -H 'Tfetch-Shape: 3' --data-binary ab",
                          "/v1/tensors/f4"), 400);
    ck_assert_msg(strstr(out, "do not fill whole bytes") != NULL, "%s", out);
    ck_assert_int_eq(curl("-X DELETE", "/v1/tensors/f4"), 204);
    /* Malformed safetensors: the message says what was wrong. */
    const char hdr[] = "{\"a\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    char bad[128] = {(char)(sizeof hdr - 1)};
    memcpy(bad + 8, hdr, sizeof hdr - 1);
    memcpy(bad + 8 + sizeof hdr - 1, "abcd", 4);
    const char *f = td_tmpfile(0, bad, 8 + sizeof hdr - 1 + 4);
    char args[256];
    snprintf(args, sizeof args, "-X PUT -H 'Content-Type: application/x-safetensors' --data-binary @%s", f);
    ck_assert_int_eq(curl(args, "/v1/tensors/x"), 400);
    ck_assert_msg(strstr(out, "\"code\":\"TF_EPROTO\"") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "F99") != NULL, "message should name the dtype: %s", out);
    ck_assert_int_eq(curl("-X PUT --data-binary short", "/v1/tensors/x"), 400);
    /* Nothing bad was stored. */
    ck_assert_int_eq(curl("", "/v1/tensors/x"), 404);
    /* Request ids are echoed; missing ones are made. */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "curl -sS -D - -o /dev/null -H 'Tfetch-Request-Id: abc-123' "
             "-H 'Tfetch-User: alice' %s/healthz", D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strcasestr(out, "Tfetch-Request-Id: abc-123") != NULL, "%s", out);
    ck_assert_msg(strcasestr(out, "Tfetch-User: alice") != NULL, "%s", out);
    ck_assert_msg(strcasestr(out, "Tfetch-Transport: http") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "curl -sS -D - -o /dev/null %s/healthz", D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strcasestr(out, "Tfetch-Request-Id: tfd-") != NULL, "%s", out);
    /* The metrics saw all of it. */
    ck_assert_int_eq(curl("", "/metrics"), 200);
    ck_assert_msg(strstr(out, "tfetch_requests_total{route=\"tensor_put\",status=\"415\",transport=\"http\"} 1") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "tfetch_errors_total{route=\"tensor_put\",code=\"TF_EPROTO\",transport=\"http\"}") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "tfetch_stored_tensors 0") != NULL, "%s", out);
    stop_clean();
}
END_TEST

START_TEST(curl_limits)
{
    const char *args[] = {"--max-body", "4K", "--store-memory", "8K", "--max-header", "2K", NULL};
    start(args);
    static uint8_t big[6000];
    const char *f = td_tmpfile(0, big, sizeof big);
    char a[512];
    /* 413 before the body is read: answered instead of 100-continue. */
    snprintf(a, sizeof a, "-X PUT -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 6000' --data-binary @%s", f);
    ck_assert_int_eq(curl(a, "/v1/tensors/big"), 413);
    ck_assert_msg(strstr(out, "\"code\":\"TF_ETOOBIG\"") != NULL, "%s", out);
    /* 413 for a chunked body that grows past the limit. */
    snprintf(a, sizeof a, "-X PUT -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/x-safetensors' "
             "--data-binary @%s", f);
    ck_assert_int_eq(curl(a, "/v1/tensors/big"), 413);
    /* 507 once the store is full. */
    const char *g = td_tmpfile(1, big, 3000);
    snprintf(a, sizeof a, "-X PUT -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 3000' --data-binary @%s", g);
    ck_assert_int_eq(curl(a, "/v1/tensors/a"), 201);
    ck_assert_int_eq(curl(a, "/v1/tensors/b"), 201);
    ck_assert_int_eq(curl(a, "/v1/tensors/c"), 507);
    ck_assert_msg(strstr(out, "\"code\":\"TF_ENOSPACE\"") != NULL, "%s", out);
    /* Replacing needs room for both copies while the upload runs. */
    ck_assert_int_eq(curl(a, "/v1/tensors/a"), 507);
    ck_assert_int_eq(curl("-X DELETE", "/v1/tensors/b"), 204);
    ck_assert_int_eq(curl(a, "/v1/tensors/a"), 204);
    ck_assert_int_eq(curl(a, "/v1/tensors/c"), 201);            /* room again */
    /* 431 for oversized headers. */
    char h[3000];
    memset(h, 'x', sizeof h);
    memcpy(h, "-H 'X-Pad: ", 11);
    strcpy(h + 2200, "'");
    ck_assert_int_eq(curl(h, "/healthz"), 431);
    /* JSON rendering limit. */
    const char *args2[] = {"--json-max-elements", "4", NULL};
    stop_clean();
    start(args2);
    snprintf(a, sizeof a, "-X PUT -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 5' --data-binary @%s", g);
    ck_assert_int_eq(curl("-X PUT -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 5' --data-binary 12345", "/v1/tensors/five"), 201);
    ck_assert_int_eq(curl("-H 'Accept: application/json'", "/v1/tensors/five"), 406);
    ck_assert_msg(strstr(out, "\"code\":\"TF_ENOTACCEPT\"") != NULL, "%s", out);
    stop_clean();
}
END_TEST

START_TEST(curl_expect_100_continue)
{
    start(NULL);
    static uint8_t body[2 << 20];
    for (size_t i = 0; i < sizeof body; i++)
        body[i] = (uint8_t)(i * 7);
    const char *f = td_tmpfile(0, body, sizeof body);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "curl -sS -v -o /dev/null -X PUT -H 'Expect: 100-continue' "
             "-H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: %zu' --data-binary @%s %s/v1/tensors/e 2>&1",
             sizeof body, f, D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "HTTP/1.1 100 Continue") != NULL, "no 100 Continue: %s", out);
    ck_assert_msg(strstr(out, "HTTP/1.1 201") != NULL, "%s", out);
    stop_clean();
}
END_TEST

/* ---- libtfetch ------------------------------------------------------------------------- */

static void fill(void *p, size_t n, unsigned seed)
{
    uint8_t *b = p;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b[i] = (uint8_t)x;
    }
}

START_TEST(lib_every_dtype_round_trip)
{
    start(NULL);
    tf_client_t *c = client();
    tf_doc_t *in = tf_doc_new();
    static uint8_t data[64][4 * 3 * 8];
    int ndt = 0;
    while (tf_dtype_name((tf_dtype_t)ndt) != NULL)
        ndt++;
    ck_assert_int_ge(ndt, 22);          /* through C64 */
    for (int dt = 0; dt < ndt; dt++) {
        int64_t shape[2] = {4, 3};
        size_t n = 12 * tf_dtype_bits((tf_dtype_t)dt) / 8;     /* F4, F6_*: packed */
        fill(data[dt], n, (unsigned)dt);
        if (dt == TF_BOOL)
            for (size_t i = 0; i < n; i++)
                data[dt][i] &= 1;
        ck_assert_int_eq(tf_doc_add(in, tf_dtype_name((tf_dtype_t)dt), (tf_dtype_t)dt, 2, shape,
                                    data[dt], n, TF_BORROW), TF_OK);
    }
    double scalar = 3.25;
    ck_assert_int_eq(tf_doc_add(in, "scalar", TF_F64, 0, NULL, &scalar, 8, TF_BORROW), TF_OK);
    int64_t zshape[2] = {0, 5};
    ck_assert_int_eq(tf_doc_add(in, "empty", TF_F32, 2, zshape, NULL, 0, TF_BORROW), TF_OK);
    ck_assert_int_eq(tf_doc_set_meta(in, "format", "pt"), TF_OK);

    char url[256];
    snprintf(url, sizeof url, "%s/v1/tensors/all", D.base);
    ck_assert_int_eq(tf_put(c, url, in), TF_OK);
    ck_assert_int_eq(tf_client_last(c)->http_status, 201);
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_OK);
    ck_assert_uint_eq(tf_doc_count(got), (size_t)ndt + 2);
    for (int dt = 0; dt < ndt; dt++) {
        const tf_tensor_t *t = tf_doc_find(got, tf_dtype_name((tf_dtype_t)dt));
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(t->dtype, dt);
        ck_assert_int_eq(t->rank, 2);
        ck_assert_int_eq(t->shape[0], 4);
        ck_assert_int_eq(t->shape[1], 3);
        ck_assert_uint_eq(t->nbytes, 12 * tf_dtype_bits((tf_dtype_t)dt) / 8);
        ck_assert_int_eq(memcmp(t->data, data[dt], t->nbytes), 0);
    }
    const tf_tensor_t *s = tf_doc_find(got, "scalar");
    ck_assert_int_eq(s->rank, 0);
    ck_assert_int_eq(memcmp(s->data, &scalar, 8), 0);
    ck_assert_uint_eq(tf_doc_find(got, "empty")->nbytes, 0);
    ck_assert_str_eq(tf_doc_meta(got, "format"), "pt");
    tf_doc_free(got);

    /* Shumai-style tf_fetch: no input = GET. */
    got = NULL;
    ck_assert_int_eq(tf_fetch(c, url, NULL, &got), TF_OK);
    ck_assert_uint_eq(tf_doc_count(got), (size_t)ndt + 2);
    tf_doc_free(got);

    tf_entry_t *e = NULL;
    size_t ne = 0;
    ck_assert_int_eq(tf_list(c, D.base, &e, &ne), TF_OK);
    ck_assert_uint_eq(ne, 1);
    ck_assert_str_eq(e[0].name, "all");
    ck_assert_uint_eq(e[0].ntensors, (size_t)ndt + 2);
    tf_list_free(e, ne);

    char *info = NULL;
    ck_assert_int_eq(tf_info(c, D.base, &info), TF_OK);
    ck_assert_ptr_nonnull(strstr(info, "\"name\":\"tfetchd\""));
    free(info);

    ck_assert_int_eq(tf_delete(c, url), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_ENOTFOUND);
    ck_assert_int_eq(tf_client_last(c)->http_status, 404);
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "no tensor named 'all'"));
    tf_doc_free(in);
    tf_client_free(c);
    stop_clean();
}
END_TEST

START_TEST(lib_ids_are_sent_and_echoed)
{
    start(NULL);
    tf_client_t *c = client();
    /* The ids in HTTP headers: a first request that does not negotiate UCX first. */
    ck_assert_int_eq(tf_client_set_upgrade_policy(c, TF_UPGRADE_LAZY), TF_OK);
    ck_assert_int_eq(tf_client_set_user(c, "bad user"), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_user(c, "alice"), TF_OK);
    ck_assert_int_eq(tf_client_set_request_id(c, "req-42"), TF_OK);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/tensors/none", D.base);
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_ENOTFOUND);
    ck_assert_str_eq(tf_client_last(c)->request_id, "req-42");
    ck_assert_str_eq(tf_client_last(c)->transport, "http");
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_ENOTFOUND);      /* next one gets a fresh id */
    ck_assert_str_ne(tf_client_last(c)->request_id, "req-42");
    ck_assert_uint_gt(strlen(tf_client_last(c)->request_id), 0);
    tf_client_free(c);
    stop_clean();
}
END_TEST

typedef struct {
    const char *url;
    int delay_ms;
} delayed_put_t;

static void *put_later(void *arg)
{
    delayed_put_t *p = arg;
    struct timespec ts = {p->delay_ms / 1000, (p->delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    tf_client_t *c = client();
    tf_doc_t *d = tf_doc_new();
    int32_t v = 77;
    tf_doc_add(d, "v", TF_I32, 0, NULL, &v, 4, TF_COPY);
    tf_status_t st = tf_put(c, p->url, d);
    tf_doc_free(d);
    tf_client_free(c);
    return (void *)(intptr_t)st;
}

START_TEST(lib_long_poll)
{
    start(NULL);
    tf_client_t *c = client();
    /* Over HTTP: a same-host client would upgrade at once, and its UCX thread would make
     * the forks below those of a multi-threaded process (TSan refuses their threads). */
    ck_assert_int_eq(tf_client_set_transport(c, TF_TRANSPORT_HTTP), TF_OK);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/tensors/later", D.base);
    /* Times out: 404 after about the wait. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_get(c, url, 300, &got), TF_ENOTFOUND);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    ck_assert_msg(waited >= 0.29, "returned after %.3f s, before the wait ran out", waited);

    /* Many waiters, woken by one PUT; none holds a thread (more waiters than workers). */
    enum { N = 8 };
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            tf_client_t *k = NULL;
            tf_doc_t *g = NULL;
            if (tf_client_new(&k) != TF_OK)
                _exit(2);
            tf_status_t st = tf_get(k, url, 20000, &g);
            int ok = st == TF_OK && tf_doc_count(g) == 1 &&
                     *(const int32_t *)tf_doc_find(g, "v")->data == 77;
            _exit(ok ? 0 : 1);
        }
    }
    delayed_put_t p = {url, 400};
    pthread_t th;
    pthread_create(&th, NULL, put_later, &p);
    void *rv;
    pthread_join(th, &rv);
    ck_assert_int_eq((int)(intptr_t)rv, TF_OK);
    for (int i = 0; i < N; i++) {
        int st;
        ck_assert_int_eq(waitpid(kids[i], &st, 0), kids[i]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "waiter %d failed", i);
    }
    tf_client_free(c);
    stop_clean();
}
END_TEST

START_TEST(lib_long_poll_answered_on_shutdown)
{
    start(NULL);
    pid_t kid = fork();
    if (kid == 0) {
        tf_client_t *k = NULL;
        tf_doc_t *g = NULL;
        char url[256];
        snprintf(url, sizeof url, "%s/v1/tensors/never", D.base);
        if (tf_client_new(&k) != TF_OK)
            _exit(2);
        _exit(tf_get(k, url, 60000, &g) == TF_EBUSY ? 0 : 1);
    }
    /* SIGTERM once the daemon holds the long poll (not after a fixed time: a daemon under
     * valgrind on a loaded machine took longer than 300 ms to get there). */
    int waiting = 0;
    for (int i = 0; i < 400 && !waiting; i++) {
        curl("", "/metrics");
        waiting = strstr(out, "\ntfetch_waiting_requests 1\n") != NULL;
        if (!waiting) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    ck_assert_msg(waiting, "the long poll never reached the daemon");
    ck_assert_int_eq(td_stop(&D, SIGTERM, 5000), 0);
    int st;
    ck_assert_int_eq(waitpid(kid, &st, 0), kid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the waiter did not get a 503");
}
END_TEST

/* SIGTERM while a slow upload is in flight: the upload completes, then the daemon exits 0. */
START_TEST(sigterm_finishes_inflight_transfer)
{
    start(NULL);
    static uint8_t body[256 << 10];
    fill(body, sizeof body, 9);
    const char *f = td_tmpfile(0, body, sizeof body);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "curl -sS -o /dev/null -w '%%{http_code}' --limit-rate 256K -X PUT "
             "-H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: %zu' --data-binary @%s %s/v1/tensors/slow",
             sizeof body, f, D.base);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    /* SIGTERM once the upload is in flight (not before curl connected: on a loaded machine
     * that can take longer than any fixed sleep). */
    for (int i = 0; i < 250; i++) {
        if (curl("", "/metrics") == 200 && strstr(out, "\ntfetch_inflight_requests 2\n"))
            break;                  /* the upload and this scrape */
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    kill(D.pid, SIGTERM);
    char code[16] = "";
    ck_assert_ptr_nonnull(fgets(code, sizeof code, p));
    pclose(p);
    ck_assert_str_eq(code, "201");
    stop_clean();
}
END_TEST

/* GET /v1/tensors pages: prefix, after, limit, and "next" when a page is full. */
START_TEST(curl_list_prefix_and_pages)
{
    start(NULL);
    const char *names[] = {"a1", "a2", "b1"};
    for (int i = 0; i < 3; i++) {
        char path[64];
        snprintf(path, sizeof path, "/v1/tensors/%s", names[i]);
        ck_assert_int_eq(curl("-X PUT -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 1' --data-binary x",
                              path), 201);
    }
    ck_assert_int_eq(curl("", "/v1/tensors?prefix=a"), 200);
    ck_assert_msg(strstr(out, "\"a1\"") && strstr(out, "\"a2\"") && !strstr(out, "\"b1\"") &&
                  !strstr(out, "\"next\""), "%s", out);
    ck_assert_int_eq(curl("", "/v1/tensors?limit=1"), 200);
    ck_assert_msg(strstr(out, "\"a1\"") && !strstr(out, "\"a2\"") &&
                  strstr(out, "\"next\":\"a1\""), "%s", out);
    ck_assert_int_eq(curl("", "/v1/tensors?limit=1&after=a1"), 200);
    ck_assert_msg(strstr(out, "\"a2\"") && strstr(out, "\"next\":\"a2\""), "%s", out);
    ck_assert_int_eq(curl("", "/v1/tensors?limit=5&after=a2"), 200);    /* the last page */
    ck_assert_msg(strstr(out, "\"b1\"") && !strstr(out, "\"a2\"") && !strstr(out, "\"next\""),
                  "%s", out);
    ck_assert_int_eq(curl("", "/v1/tensors?prefix=a&after=a2"), 200);
    ck_assert_str_eq(out, "{\"tensors\":[]}");
    ck_assert_int_eq(curl("", "/v1/tensors?limit=0"), 400);
    ck_assert_int_eq(curl("", "/v1/tensors?prefix=%2F"), 400);
    stop_clean();
}
END_TEST

/* The ETag curl saw in the headers in out, into tag (with its quotes). */
static void etag_of(char *tag, size_t n)
{
    const char *p = strcasestr(out, "\nETag: ");
    ck_assert_msg(p != NULL, "no ETag in: %s", out);
    p += 7;
    size_t k = strcspn(p, "\r\n");
    ck_assert_uint_lt(k, n);
    memcpy(tag, p, k);
    tag[k] = '\0';
}

/* ETags, conditional requests and ranges, as HTTP caches, CAS users and the Hugging Face
 * header reader (a Range GET of the first bytes) use them. */
START_TEST(curl_etag_conditional_and_range)
{
    start(NULL);
    char cmd[1024], tag[64], tag2[64];
    ck_assert_int_eq(curl("-X PUT -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 16' --data-binary "
                          "0123456789abcdef", "/v1/tensors/w"), 201);
    snprintf(cmd, sizeof cmd, "curl -sS -D - -o /tmp/tf-e2e-w.st %s/v1/tensors/w", D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    etag_of(tag, sizeof tag);
    ck_assert_msg(strcasestr(out, "Accept-Ranges: bytes") != NULL, "%s", out);
    /* The first 8 bytes (the header length), as huggingface.js reads them. */
    snprintf(cmd, sizeof cmd, "curl -sS -D - -o /tmp/tf-e2e-w.8 -H 'Range: bytes=0-7' %s/v1/tensors/w "
             "&& cmp -n 8 /tmp/tf-e2e-w.st /tmp/tf-e2e-w.8 && test $(stat -c %%s /tmp/tf-e2e-w.8) = 8",
             D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, " 206") && strcasestr(out, "Content-Range: bytes 0-7/"), "%s", out);
    snprintf(cmd, sizeof cmd, "curl -sS -o /dev/null -w '%%{http_code}' -H 'Range: bytes=-4' "
             "%s/v1/tensors/w", D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_str_eq(out, "206");
    ck_assert_int_eq(curl("-H 'Range: bytes=100000-'", "/v1/tensors/w"), 416);
    ck_assert_msg(strstr(out, "TF_ERANGE"), "%s", out);
    ck_assert_int_eq(curl("-H 'Range: bytes=0-1,4-5'", "/v1/tensors/w"), 200);  /* whole */
    /* If-Range with another tag: the whole document. */
    ck_assert_int_eq(curl("-H 'Range: bytes=0-7' -H 'If-Range: \"0000000000000000-1\"'",
                          "/v1/tensors/w"), 200);
    /* If-None-Match: 304 while unchanged. */
    snprintf(cmd, sizeof cmd, "-H 'If-None-Match: %s'", tag);
    ck_assert_int_eq(curl(cmd, "/v1/tensors/w"), 304);
    ck_assert_int_eq(curl("-H 'If-None-Match: \"x\"'", "/v1/tensors/w"), 200);
    /* Compare-and-swap: a stale If-Match changes nothing, the current one replaces. */
    ck_assert_int_eq(curl("-X PUT -H 'If-Match: \"0000000000000000-1\"' -H 'Tfetch-Dtype: U8' "
                          "-H 'Tfetch-Shape: 1' --data-binary x", "/v1/tensors/w"), 412);
    ck_assert_msg(strstr(out, "TF_EPRECOND"), "%s", out);
    ck_assert_int_eq(curl("-X PUT -H 'If-None-Match: *' -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 1' "
                          "--data-binary x", "/v1/tensors/w"), 412);       /* create-only */
    snprintf(cmd, sizeof cmd, "curl -sS -D - -o /dev/null -X PUT -H 'If-Match: %s' -H "
             "'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 2' --data-binary yz %s/v1/tensors/w", tag, D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, " 204"), "%s", out);
    etag_of(tag2, sizeof tag2);
    ck_assert_str_ne(tag, tag2);
    snprintf(cmd, sizeof cmd, "-X PUT -H 'If-Match: %s' -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 1' "
             "--data-binary q", tag);
    ck_assert_int_eq(curl(cmd, "/v1/tensors/w"), 412);                       /* lost the race */
    ck_assert_int_eq(curl("-H 'Accept: application/json'", "/v1/tensors/w"), 200);
    ck_assert_str_eq(out, "{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data\":[121,122]}}");
    ck_assert_int_eq(curl("-X PUT -H 'If-Match: nope' --data-binary q", "/v1/tensors/w"), 400);
    /* Long-poll for a change: If-None-Match + ?wait: 304 if none came, the new one if it did. */
    snprintf(cmd, sizeof cmd, "-H 'If-None-Match: %s'", tag2);
    ck_assert_int_eq(curl(cmd, "/v1/tensors/w?wait=300"), 304);
    snprintf(cmd, sizeof cmd, "(sleep 0.5; curl -sS -o /dev/null -X PUT -H 'Tfetch-Dtype: U8' "
             "-H 'Tfetch-Shape: 3' --data-binary abc %s/v1/tensors/w) & curl -sS -H 'If-None-Match: %s' "
             "-H 'Accept: application/json' '%s/v1/tensors/w?wait=10000'; wait", D.base, tag2, D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_str_eq(out, "{\"w\":{\"dtype\":\"U8\",\"shape\":[3],\"data\":[97,98,99]}}");
    /* Conditional DELETE. */
    snprintf(cmd, sizeof cmd, "-X DELETE -H 'If-Match: %s'", tag2);
    ck_assert_int_eq(curl(cmd, "/v1/tensors/w"), 412);
    ck_assert_int_eq(curl("-X DELETE -H 'If-Match: *'", "/v1/tensors/w"), 204);
    ck_assert_int_eq(curl("-X DELETE -H 'If-Match: *'", "/v1/tensors/w"), 412);
    stop_clean();
}
END_TEST

/* Waits up to 30 s (a daemon under valgrind is slow) for the file at path to hold needle,
 * leaving its text in out. A line is logged after its answer is sent, so a client can read
 * the log before the line is there. 1 if it came. */
static int file_has(const char *path, const char *needle)
{
    for (int i = 0; i < 600; i++) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
        if (f)
            fclose(f);
        out[n] = '\0';
        if (strstr(out, needle))
            return 1;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* --access-log FILE: one JSON line per request, with who, what and how it went; SIGHUP
 * reopens the file after a rotation. */
START_TEST(access_log_lines_and_sighup_reopen)
{
    char path[64], moved[80], cmd[512];
    snprintf(path, sizeof path, "/tmp/tf-e2e-access-%d.log", (int)getpid());
    snprintf(moved, sizeof moved, "%s.1", path);
    unlink(path);
    const char *args[] = {"--access-log", path, NULL};
    start(args);
    ck_assert_int_eq(curl("-H 'Tfetch-User: alice' -H 'Tfetch-Request-Id: acc-1'",
                          "/v1/tensors/missing"), 404);
    ck_assert_int_eq(curl("", "/healthz"), 200);
    snprintf(cmd, sizeof cmd, "cat %s", path);
    ck_assert_msg(file_has(path, "\"op\":\"health\""), "%s", out);
    ck_assert_msg(strstr(out, "\"client\":\"127.0.0.1\",\"transport\":\"http\",\"op\":"
                          "\"tensor_get\",\"name\":\"missing\",\"user\":\"alice\","
                          "\"request_id\":\"acc-1\",\"status\":404,\"code\":\"TF_ENOTFOUND\"")
                  && strstr(out, "\"op\":\"health\"") && strstr(out, "\"completed\":true"),
                  "%s", out);
    ck_assert_int_eq(rename(path, moved), 0);
    kill(D.pid, SIGHUP);
    for (int i = 0; i < 100 && access(path, F_OK) != 0; i++) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    ck_assert_int_eq(curl("", "/readyz"), 200);
    ck_assert_msg(file_has(path, "\"op\":\"ready\""), "%s", out);
    ck_assert_msg(strstr(out, "\"op\":\"ready\"") && !strstr(out, "tensor_get"), "%s", out);
    stop_clean();
    unlink(path);
    unlink(moved);
}
END_TEST

/* Opt-in store policies: Tfetch-TTL on PUT, and store-evict lru instead of 507. */
START_TEST(store_ttl_and_lru_over_http)
{
    const char *args[] = {"--store-memory", "300", "--store-evict", "lru", NULL};
    start(args);
    char body[128];
    snprintf(body, sizeof body, "-X PUT -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 100' "
             "--data-binary @%s", td_tmpfile(0, "0123456789012345678901234567890123456789"
                                                "0123456789012345678901234567890123456789"
                                                "01234567890123456789", 100));
    ck_assert_int_eq(curl(body, "/v1/tensors/a"), 201);
    ck_assert_int_eq(curl(body, "/v1/tensors/b"), 201);     /* ~180 bytes each: a goes */
    ck_assert_int_eq(curl("", "/v1/tensors/a"), 404);
    ck_assert_int_eq(curl("", "/v1/tensors/b"), 200);
    ck_assert_int_eq(curl("", "/metrics"), 200);
    ck_assert_msg(strstr(out, "\ntfetch_store_evictions_total 1\n"), "%s", out);
    /* A TTL: gone after it, counted. */
    char ttl[300];
    snprintf(ttl, sizeof ttl, "-H 'Tfetch-TTL: 1' %s", body);
    ck_assert_int_eq(curl(ttl, "/v1/tensors/t"), 201);
    ck_assert_int_eq(curl("", "/v1/tensors/t"), 200);
    struct timespec ts = {1, 300 * 1000000L};
    nanosleep(&ts, NULL);
    ck_assert_int_eq(curl("", "/v1/tensors/t"), 404);
    ck_assert_int_eq(curl("", "/metrics"), 200);
    ck_assert_msg(strstr(out, "\ntfetch_store_expirations_total 1\n"), "%s", out);
    ck_assert_int_eq(curl("-X PUT -H 'Tfetch-TTL: 0' --data-binary x", "/v1/tensors/t"), 400);
    ck_assert_int_eq(curl("-X PUT -H 'Tfetch-TTL: soon' --data-binary x", "/v1/tensors/t"), 400);
    stop_clean();
    const char *bad[] = {"--store-evict", "fifo", NULL};
    ck_assert_int_ne(td_start(&D, bad), 0);                 /* refused at start */
    td_cleanup();
}
END_TEST

/* SIGHUP reads the config file again: the live settings apply at once, the others are named
 * as needing a restart, and a file that no longer parses changes nothing. */
START_TEST(sighup_reloads_live_settings)
{
    char conf[64], alog[64], cmd[512];
    snprintf(conf, sizeof conf, "/tmp/tf-e2e-reload-%d.conf", (int)getpid());
    snprintf(alog, sizeof alog, "/tmp/tf-e2e-reload-%d.log", (int)getpid());
    unlink(alog);
    FILE *f = fopen(conf, "w");
    fputs("store-memory = 300\n", f);
    fclose(f);
    const char *args[] = {"--config", conf, NULL};
    start(args);
    const char *put = "-X PUT -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 200' --data-binary @/tmp/tf-e2e-200";
    ck_assert_int_eq(td_run("head -c 200 /dev/zero > /tmp/tf-e2e-200", NULL, 0), 0);
    ck_assert_int_eq(curl(put, "/v1/tensors/a"), 201);
    ck_assert_int_eq(curl(put, "/v1/tensors/b"), 507);
    const char *decl = "-X PUT -H 'Content-Type: application/json' --data "
                       "'{\"devices\":1,\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\","
                       "\"shape\":[2]}]}'";
    ck_assert_int_eq(curl(decl, "/v1/feeds/f1"), 201);
    ck_assert_int_eq(curl(decl, "/v1/feeds/f2"), 201);
    f = fopen(conf, "w");
    fprintf(f, "store-memory = 1M\naccess-log = %s\nmax-body = 2G\nmax-feeds = 2\n"
            "max-wait = 200\nsession-memory = 5M\nreplay-window = 7\ndrain-timeout = 9\n", alog);
    fclose(f);
    kill(D.pid, SIGHUP);
    snprintf(cmd, sizeof cmd, "for i in $(seq 600); do grep -q 'SIGHUP: settings read again' %s "
             "&& exit 0; sleep 0.05; done; exit 1", D.log_path);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    ck_assert_int_eq(curl(put, "/v1/tensors/b"), 201);         /* the new limit */
    ck_assert_msg(file_has(alog, "\"op\":\"tensor_put\""), "%s", out);   /* logging now */
    ck_assert_ptr_null(strstr(strstr(out, "tensor_put") + 1, "tensor_put"));   /* just once */
    snprintf(cmd, sizeof cmd, "grep -c 'max-body changed, but takes effect only after a restart' %s",
             D.log_path);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_str_eq(out, "1\n");
    /* Limits of the feeds, long-polls, sessions and replay apply live too, and say so. */
    snprintf(cmd, sizeof cmd, "grep -c -E 'SIGHUP: (max-feeds|max-wait|session-memory|"
             "replay-window|drain-timeout) applied' %s", D.log_path);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_str_eq(out, "5\n");
    ck_assert_int_eq(curl(decl, "/v1/feeds/f3"), 507);                 /* max-feeds 2 */
    ck_assert_msg(strstr(out, "max-feeds"), "%s", out);
    ck_assert_int_eq(curl("", "/v1/info"), 200);
    ck_assert_msg(strstr(out, "\"max_feeds\":2,") && strstr(out, "\"max_wait_ms\":200,") &&
                  strstr(out, "\"session_memory\":5242880,") &&
                  strstr(out, "\"replay_window_s\":7,"), "%s", out);
    double t0 = tfx_now_s();        /* ?wait= is capped by the new max-wait */
    ck_assert_int_eq(curl("", "/v1/tensors/never?wait=20000"), 404);
    ck_assert_msg(tfx_now_s() - t0 < 10.0, "a 20 s wait was not capped at 200 ms");
    /* A broken file: nothing changes. */
    f = fopen(conf, "w");
    fputs("store-memory = lots\n", f);
    fclose(f);
    kill(D.pid, SIGHUP);
    snprintf(cmd, sizeof cmd, "for i in $(seq 600); do grep -q 'no longer load' %s && exit 0; "
             "sleep 0.05; done; exit 1", D.log_path);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    ck_assert_int_eq(curl(put, "/v1/tensors/c"), 201);         /* still 1M */
    stop_clean();
    unlink(conf);
    unlink(alog);
    unlink("/tmp/tf-e2e-200");
}
END_TEST

/* /readyz is 200 while serving and 503 from the moment SIGTERM arrives; with drain-grace
 * every other request is still served meanwhile (a new connection works), then it exits. */
START_TEST(readyz_turns_503_on_sigterm_during_grace)
{
    const char *args[] = {"--drain-grace", "3", NULL};
    start(args);
    ck_assert_int_eq(curl("", "/readyz"), 200);
    ck_assert_str_eq(out, "ready\n");
    ck_assert_int_eq(curl("", "/healthz"), 200);
    kill(D.pid, SIGTERM);
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    ck_assert_int_eq(curl("", "/readyz"), 503);
    ck_assert_msg(strstr(out, "\"code\":\"TF_EBUSY\"") && strstr(out, "draining"), "%s", out);
    ck_assert_int_eq(curl("", "/healthz"), 200);             /* alive, still serving */
    ck_assert_int_eq(curl("-X PUT -H 'Tfetch-Dtype: U8' -H 'Tfetch-Shape: 1' --data-binary a",
                          "/v1/tensors/late"), 201);
    stop_clean();
}
END_TEST

/* ---- the tfetch CLI -------------------------------------------------------------------- */

static const char *cli(void)
{
    const char *p = getenv("TFETCH_CLI");
    return p ? p : "./cli/tfetch";
}

/* With no policy given, the CLI upgrades a server on this host before its one request (a
 * one-shot process would never see the server's offer), and remembers a failed upgrade per
 * origin for this user, so the next process goes straight to HTTP. */
START_TEST(cli_upgrades_by_default_and_keeps_no_cache)
{
    char cmd[2048], cache[64];
    snprintf(cache, sizeof cache, "/tmp/tf-e2e-cache-%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    td_run(cmd, NULL, 0);
#ifdef HAVE_UCX
    if (!getenv("TFETCHD_WRAPPER")) {           /* a daemon under valgrind may miss HELLO */
        start(NULL);
        snprintf(cmd, sizeof cmd, "env -u TFETCH_TRANSPORT XDG_CACHE_HOME=%s %s -q put --dtype U8 "
                 "--shape 4 %s/v1/tensors/u %s && env -u TFETCH_TRANSPORT XDG_CACHE_HOME=%s %s "
                 "--stats get --raw %s/v1/tensors/u 2>&1 >/dev/null", cache, cli(), D.base,
                 td_tmpfile(0, "abcd", 4), cache, cli(), D.base);
        ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
        /* Upgraded: on this host a get then goes over shared memory. */
        ck_assert_msg(strstr(out, "\"transport\":\"shm/memfd\""), "same host, no flag: %s", out);
        /* A big tensor (4 MiB), put and got by fresh processes with no flag and no cache. */
        static char big[4u << 20];
        memset(big, 7, sizeof big);
        const char *bigf = td_tmpfile(1, big, sizeof big);
        snprintf(cmd, sizeof cmd, "rm -rf %s; env -u TFETCH_TRANSPORT -u TFETCH_UPGRADE "
                 "XDG_CACHE_HOME=%s %s -q --stats put --dtype U8 --shape %u %s/v1/tensors/big %s "
                 "2>&1 && env -u TFETCH_TRANSPORT -u TFETCH_UPGRADE XDG_CACHE_HOME=%s %s --stats "
                 "get --raw %s/v1/tensors/big 2>&1 >/dev/null", cache, cache, cli(),
                 (unsigned)sizeof big, D.base, bigf, cache, cli(), D.base);
        ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
        ck_assert_msg(strstr(out, "\"op\":\"put\",\"transport\":\"ucx/") ||
                      strstr(out, "\"op\":\"put\",\"transport\":\"shm/"), "big put: %s", out);
        ck_assert_msg(strstr(out, "\"op\":\"get\",\"transport\":\"shm/memfd\""), "big get: %s",
                      out);
        /* TFETCH_UPGRADE=lazy: the one request goes over HTTP, saying why. */
        snprintf(cmd, sizeof cmd, "env -u TFETCH_TRANSPORT TFETCH_UPGRADE=lazy XDG_CACHE_HOME=%s "
                 "%s --stats get --raw %s/v1/tensors/big 2>&1 >/dev/null", cache, cli(), D.base);
        ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
        ck_assert_msg(strstr(out, "\"transport\":\"http\"") && strstr(out, "lazy"), "lazy: %s",
                      out);
        snprintf(cmd, sizeof cmd, "TFETCH_UPGRADE=bogus %s get %s/v1/tensors/big 2>&1", cli(),
                 D.base);
        ck_assert_int_eq(td_run(cmd, out, sizeof out), 1);
        ck_assert_msg(strstr(out, "TFETCH_UPGRADE='bogus' is not eager or lazy"), "%s", out);
        stop_clean();
    }
#endif
    /* A server that refuses the upgrade: each process says why, and the tool keeps no cache
     * of its own (one used to say "upgrade policy lazy" for an hour after a typo). */
    const char *off[] = {"--ucx", "off", NULL};
    start(off);
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "env -u TFETCH_TRANSPORT -u TFETCH_UPGRADE XDG_CACHE_HOME=%s "
                 "%s --stats rm %s/v1/tensors/none 2>&1; ls -A %s 2>/dev/null | wc -l", cache,
                 cli(), D.base, cache);
        td_run(cmd, out, sizeof out);
        ck_assert_msg(strstr(out, "does not offer UCX") && !strstr(out, "lazy"), "%s", out);
        ck_assert_msg(strstr(out, "\n0\n") != NULL, "a cache was written: %s", out);
    }
    stop_clean();
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    td_run(cmd, NULL, 0);
}
END_TEST

/* The CLI as people use curl: bare names on a default server ($TFETCH_URL, the config file),
 * output through a temporary file, no binary to a terminal, errors that say what is wrong. */
START_TEST(cli_names_files_terminal_and_errors)
{
    start(NULL);
    char cmd[2048], env[600];
    const char *raw = td_tmpfile(0, "abcdefgh", 8);
    snprintf(env, sizeof env, "env TFETCH_URL=%s/ %s", D.base, cli());
    snprintf(cmd, sizeof cmd, "%s -q put --dtype U8 --shape 8 n %s && %s get n /tmp/tf-e2e-n.st "
             "&& %s get --raw -q n /tmp/tf-e2e-n.raw && cmp %s /tmp/tf-e2e-n.raw && "
             "ls /tmp/tf-e2e-n.st.tfetch-* 2>/dev/null | wc -l", env, raw, env, env, raw);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_str_eq(out, "0\n");                            /* no temporary left behind */
    struct stat sb;
    ck_assert_int_eq(stat("/tmp/tf-e2e-n.st", &sb), 0);
    mode_t um = umask(0);
    umask(um);
    ck_assert_int_eq(sb.st_mode & 0777, 0666 & ~um);          /* as open(2) would make it */
    /* A failed get leaves an existing file as it was. */
    snprintf(cmd, sizeof cmd, "echo keep > /tmp/tf-e2e-keep && %s get missing /tmp/tf-e2e-keep "
             "2>/dev/null; echo $? $(cat /tmp/tf-e2e-keep)", env);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_str_eq(out, "2 keep\n");
    /* A device is written in place, never renamed over (that would replace /dev/null). */
    snprintf(cmd, sizeof cmd, "%s get n /dev/null && test -c /dev/null", env);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    /* ls without BASE, from the config file when TFETCH_URL is unset. */
    snprintf(cmd, sizeof cmd, "d=$(mktemp -d) && mkdir $d/tfetch && printf '# mine\\nurl = %s\\n' "
             "> $d/tfetch/config && env -u TFETCH_URL XDG_CONFIG_HOME=$d %s ls; rm -rf $d",
             D.base, cli());
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\nn ") != NULL, "%s", out);
    /* Not to a terminal unless asked with '-'. */
    snprintf(cmd, sizeof cmd, "script -qec \"%s get n\" /dev/null; echo rc=$?", env);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "not writing a binary safetensors document to a terminal") &&
                  strstr(out, "rc=1"), "%s", out);
    snprintf(cmd, sizeof cmd, "script -qec \"%s get --raw -q n -\" /dev/null", env);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "abcdefgh") != NULL, "%s", out);
    /* Errors that say what is wrong. */
    snprintf(cmd, sizeof cmd, "%s -q put n2 %s 2>&1", env, raw);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "header length") && strstr(out, "give --dtype and --shape"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s get %s/v1/info /dev/null 2>&1", cli(), D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 4);
    ck_assert_msg(strstr(out, "the reply is application/json, not a tensor document"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s get a/b 2>&1", env);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "neither a URL"), "%s", out);
    unlink("/tmp/tf-e2e-n.st");
    unlink("/tmp/tf-e2e-n.raw");
    unlink("/tmp/tf-e2e-keep");
    stop_clean();
}
END_TEST

START_TEST(cli_put_get_ls_rm_and_exit_codes)
{
    start(NULL);
    char cmd[1024];
    uint16_t v[4] = {1, 2, 300, 4000};
    const char *f = td_tmpfile(0, v, sizeof v);
    const char *back = "/tmp/tf-e2e-cli-back.bin";

    snprintf(cmd, sizeof cmd, "%s -q put --dtype U16 --shape 2,2 %s/v1/tensors/u %s", cli(), D.base, f);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    /* --raw writes the bytes back; --stats prints one JSON line on stderr. */
    snprintf(cmd, sizeof cmd, "%s --stats -r cli-1 get --raw %s/v1/tensors/u 2>&1 >%s", cli(), D.base, back);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\"op\":\"get\"") && strstr(out, "\"transport\":\"") &&
                  strstr(out, "\"request_id\":\"cli-1\"") &&
                  (strstr(out, "\"http_status\":200") || strstr(out, "\"transport\":\"ucx/")) &&
                  strstr(out, "\"bytes\":"), "stats: %s", out);
    snprintf(cmd, sizeof cmd, "cmp %s %s", f, back);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    /* A document round trip: get as safetensors, put under another name, compare raw. */
    snprintf(cmd, sizeof cmd, "%s get %s/v1/tensors/u /tmp/tf-e2e-cli.st && %s -q put %s/v1/tensors/u2 "
             "/tmp/tf-e2e-cli.st && curl -sS -H 'Accept: application/json' %s/v1/tensors/u2",
             cli(), D.base, cli(), D.base, D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_str_eq(out, "{\"u\":{\"dtype\":\"U16\",\"shape\":[2,2],\"data\":[[1,2],[300,4000]]}}");
    snprintf(cmd, sizeof cmd, "%s ls %s", cli(), D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "u2") != NULL, "ls: %s", out);
    snprintf(cmd, sizeof cmd, "%s info %s", cli(), D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"name\":\"tfetchd\""));
    snprintf(cmd, sizeof cmd, "%s -q rm %s/v1/tensors/u", cli(), D.base);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    /* Exit codes: 2 not found, 3 rejected, 1 usage, 5 no server. */
    snprintf(cmd, sizeof cmd, "%s get %s/v1/tensors/u /dev/null 2>/dev/null", cli(), D.base);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 2);
    snprintf(cmd, sizeof cmd, "%s -q put --dtype U16 --shape 3 %s/v1/tensors/u %s 2>/dev/null", cli(), D.base, f);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 1);                  /* caught before sending */
    snprintf(cmd, sizeof cmd, "%s -q put --dtype U16 --shape 4 %s/v1/tensors/bad%%21name %s 2>&1", cli(), D.base, f);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 3);           /* refused by the server */
    ck_assert_msg(strstr(out, "TF_EBADREQ") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s frobnicate %s 2>/dev/null", cli(), D.base);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 1);
    snprintf(cmd, sizeof cmd, "TFETCH_TRANSPORT=bogus %s ls %s 2>&1", cli(), D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 1);          /* refused, not read as auto */
    ck_assert_msg(strstr(out, "TFETCH_TRANSPORT='bogus' is not auto, http or ucx") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "printf junk | %s -q put %s/v1/tensors/j 2>/dev/null", cli(), D.base);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 1);
    stop_clean();
    snprintf(cmd, sizeof cmd, "%s get %s/v1/tensors/u /dev/null 2>/dev/null", cli(), D.base);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 5);
    unlink(back);
    unlink("/tmp/tf-e2e-cli.st");
}
END_TEST

/* Two tensors in one document: octet-stream cannot carry it (406), safetensors can. */
START_TEST(lib_multi_tensor_doc_formats)
{
    start(NULL);
    tf_client_t *c = client();
    tf_doc_t *in = tf_doc_new();
    int64_t s1[1] = {3};
    int8_t a[3] = {-1, 0, 1};
    uint16_t h[3] = {0x3c00, 0xc000, 0x7c00};           /* F16: 1, -2, +inf */
    tf_doc_add(in, "a", TF_I8, 1, s1, a, sizeof a, TF_COPY);
    tf_doc_add(in, "h", TF_F16, 1, s1, h, sizeof h, TF_COPY);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/tensors/pair", D.base);
    ck_assert_int_eq(tf_put(c, url, in), TF_OK);
    ck_assert_int_eq(curl("-H 'Accept: application/octet-stream'", "/v1/tensors/pair"), 406);
    ck_assert_int_eq(curl("-H 'Accept: application/json'", "/v1/tensors/pair"), 200);
    ck_assert_str_eq(out, "{\"a\":{\"dtype\":\"I8\",\"shape\":[3],\"data\":[-1,0,1]},"
                          "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data\":[1,-2,\"Infinity\"]}}");
    ck_assert_int_eq(curl("-I", "/v1/tensors/pair"), 200);                /* HEAD */
    ck_assert_int_eq(curl("-H 'Accept: text/html'", "/v1/tensors/pair"), 406);
    tf_doc_free(in);
    tf_client_free(c);
    stop_clean();
}
END_TEST

/* ---- exchange, sessions, retries ------------------------------------------------------ */

/* POSTs a raw I32 vector to a route as user (NULL: none) with request id rid (NULL: none);
 * returns the HTTP status; out holds the body (JSON view requested). */
static int call_i32(const char *route, const char *user, const char *rid, const int32_t *v,
                    size_t n)
{
    const char *f = td_tmpfile(2, v, n * sizeof *v);
    char args[1024];
    int k = snprintf(args, sizeof args, "-X POST --data-binary @%s -H 'Tfetch-Dtype: I32' "
                     "-H 'Tfetch-Shape: %zu' -H 'Accept: application/json'", f, n);
    if (user)
        k += snprintf(args + k, sizeof args - (size_t)k, " -H 'Tfetch-User: %s'", user);
    if (rid)
        snprintf(args + k, sizeof args - (size_t)k, " -H 'Tfetch-Request-Id: %s'", rid);
    char path[128];
    snprintf(path, sizeof path, "/v1/call/%s", route);
    return curl(args, path);
}

START_TEST(exchange_echo_curl_and_lib)
{
    start(NULL);
    int32_t v[3] = {7, -8, 9};
    ck_assert_int_eq(call_i32("echo", NULL, NULL, v, 3), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[3],\"data\":[7,-8,9]}}");
    ck_assert_int_eq(call_i32("nope", NULL, NULL, v, 3), 404);
    ck_assert_msg(strstr(out, "no route named 'nope'") != NULL, "%s", out);
    ck_assert_int_eq(curl("", "/v1/call/echo"), 405);
    /* A safetensors document comes back byte for byte (the answer is the request's own
     * buffer), and still as JSON to a client that asks for JSON. */
    static const char st[] = "\x38\x00\x00\x00\x00\x00\x00\x00"
                             "{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}   "
                             "\x01\x02\x03\x04";
    const char *sf = td_tmpfile(3, st, sizeof st - 1);
    char args[512], cmd[1024];
    snprintf(args, sizeof args, "-X POST --data-binary @%s -H 'Content-Type: "
             "application/x-safetensors'", sf);
    ck_assert_int_eq(curl(args, "/v1/call/echo"), 200);
    snprintf(cmd, sizeof cmd, "cmp %s /tmp/tf-e2e-body-%d", sf, (int)getpid());
    ck_assert_msg(td_run(cmd, NULL, 0) == 0, "echo's answer is not the request's bytes");
    snprintf(args, sizeof args, "-X POST --data-binary @%s -H 'Content-Type: "
             "application/x-safetensors' -H 'Accept: application/json'", sf);
    ck_assert_int_eq(curl(args, "/v1/call/echo"), 200);
    ck_assert_str_eq(out, "{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data\":[1,2,3,4]}}");

    /* libtfetch: a multi-tensor document with metadata comes back as sent. */
    tf_client_t *c = client();
    tf_doc_t *in = tf_doc_new(), *got = NULL;
    int64_t shape[2] = {2, 2};
    double a[4] = {1.5, 2.5, -3, 1e300};
    uint8_t b[5] = {1, 2, 3, 4, 5};
    int64_t bs[1] = {5};
    tf_doc_add(in, "a", TF_F64, 2, shape, a, sizeof a, TF_BORROW);
    tf_doc_add(in, "b", TF_U8, 1, bs, b, sizeof b, TF_BORROW);
    tf_doc_set_meta(in, "step", "12");
    char url[256];
    snprintf(url, sizeof url, "%s/v1/call/echo", D.base);
    ck_assert_int_eq(tf_fetch(c, url, in, &got), TF_OK);
    ck_assert_uint_eq(tf_doc_count(got), 2);
    ck_assert_int_eq(memcmp(tf_doc_find(got, "a")->data, a, sizeof a), 0);
    ck_assert_int_eq(memcmp(tf_doc_find(got, "b")->data, b, sizeof b), 0);
    ck_assert_str_eq(tf_doc_meta(got, "step"), "12");
    tf_doc_free(got);
    tf_doc_free(in);
    tf_client_free(c);
    stop_clean();
}
END_TEST

START_TEST(accumulate_per_user_isolation_and_end)
{
    start(NULL);
    int32_t one[2] = {1, 10}, two[2] = {2, 20};
    /* Two users interleaving get their own sums. */
    ck_assert_int_eq(call_i32("accumulate", "alice", NULL, one, 2), 200);
    ck_assert_int_eq(call_i32("accumulate", "bob", NULL, two, 2), 200);
    ck_assert_int_eq(call_i32("accumulate", "alice", NULL, one, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[2,20]}}");
    ck_assert_int_eq(call_i32("accumulate", "bob", NULL, two, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[4,40]}}");
    /* Requests without a user id share the anonymous session. */
    ck_assert_int_eq(call_i32("accumulate", NULL, NULL, one, 2), 200);
    ck_assert_int_eq(call_i32("accumulate", NULL, NULL, one, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[2,20]}}");
    /* A shape or dtype change is refused and leaves the sum alone. */
    int32_t three[3] = {1, 1, 1};
    ck_assert_int_eq(call_i32("accumulate", "alice", NULL, three, 3), 422);
    ck_assert_msg(strstr(out, "\"code\":\"TF_EUNPROC\"") != NULL, "%s", out);
    ck_assert_int_eq(call_i32("accumulate", "alice", NULL, one, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[3,30]}}");
    /* Ending alice's session restarts her sum and leaves bob's. */
    ck_assert_int_eq(curl("-X DELETE -H 'Tfetch-User: alice'", "/v1/sessions/self"), 204);
    ck_assert_int_eq(curl("-X DELETE -H 'Tfetch-User: alice'", "/v1/sessions/self"), 404);
    ck_assert_int_eq(call_i32("accumulate", "alice", NULL, one, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[1,10]}}");
    ck_assert_int_eq(call_i32("accumulate", "bob", NULL, two, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[6,60]}}");
    stop_clean();
}
END_TEST

START_TEST(sessions_ttl_quota_eviction)
{
    /* A TTL of 3 s, not 1: under load (valgrind, a busy CI) two curl calls a second apart
     * let a session expire between them, and the counts below come out wrong. */
    const char *args[] = {"--session-ttl", "3", "--max-sessions", "2",
                          "--session-user-memory", "4K", NULL};
    start(args);
    int32_t one[2] = {1, 1};
    ck_assert_int_eq(call_i32("accumulate", "u1", NULL, one, 2), 200);
    ck_assert_int_eq(call_i32("accumulate", "u1", NULL, one, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[2,2]}}");
    /* TTL: after it, the sum starts again. */
    struct timespec ts = {4, 300 * 1000000L};
    nanosleep(&ts, NULL);
    ck_assert_int_eq(call_i32("accumulate", "u1", NULL, one, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[1,1]}}");
    /* Quota per user: a state above 4K is refused with 507. */
    static int32_t big[2048];
    ck_assert_int_eq(call_i32("accumulate", "u2", NULL, big, 2048), 507);
    ck_assert_msg(strstr(out, "quota") != NULL, "%s", out);
    /* Count: a third user evicts the least recently used idle session. */
    ck_assert_int_eq(call_i32("accumulate", "u2", NULL, one, 2), 200);
    ck_assert_int_eq(call_i32("accumulate", "u3", NULL, one, 2), 200);
    ck_assert_int_eq(curl("", "/metrics"), 200);
    ck_assert_msg(strstr(out, "tfetch_session_evictions_total 1") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "tfetch_session_expirations_total 1") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "tfetch_sessions 2") != NULL, "%s", out);
    ck_assert_int_eq(call_i32("accumulate", "u1", NULL, one, 2), 200);   /* u1 was evicted */
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[1,1]}}");
    stop_clean();
}
END_TEST

START_TEST(retry_with_request_id_runs_once)
{
    start(NULL);
    int32_t one[2] = {5, 6};
    char cmd[1024];
    /* The same request id twice: one execution, the same answer, marked as replayed. */
    const char *f = td_tmpfile(2, one, sizeof one);
    snprintf(cmd, sizeof cmd, "curl -sS -D - -o /dev/null -X POST --data-binary @%s -H 'Tfetch-Dtype: I32' "
             "-H 'Tfetch-Shape: 2' -H 'Tfetch-User: dana' -H 'Tfetch-Request-Id: step-1' "
             "%s/v1/call/accumulate", f, D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strcasestr(out, "Tfetch-Replayed") == NULL, "%s", out);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strcasestr(out, "Tfetch-Replayed: 1") != NULL, "%s", out);
    ck_assert_int_eq(call_i32("accumulate", "dana", "step-2", one, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[10,12]}}");
    /* The answer comes back as it was, in the format this retry asks for (JSON here: made
     * from the kept answer's index), and the route does not run again. */
    ck_assert_int_eq(call_i32("accumulate", "dana", "step-2", one, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[10,12]}}");
    ck_assert_int_eq(call_i32("accumulate", "dana", "step-1", one, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[5,6]}}");
    ck_assert_int_eq(call_i32("accumulate", "dana", "step-3", one, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[15,18]}}");
    /* Same id from another user is another request. */
    ck_assert_int_eq(call_i32("accumulate", "erin", "step-1", one, 2), 200);
    ck_assert_str_eq(out, "{\"tensor\":{\"dtype\":\"I32\",\"shape\":[2],\"data\":[5,6]}}");
    /* Reusing an id for another route is refused. */
    ck_assert_int_eq(call_i32("echo", "dana", "step-1", one, 2), 422);
    ck_assert_msg(strstr(out, "already used") != NULL, "%s", out);
    ck_assert_int_eq(curl("", "/metrics"), 200);
    ck_assert_msg(strstr(out, "tfetch_replay_hits_total 3") != NULL, "%s", out);
    /* An echo's answer is its request's bytes: the window keeps none of a 1 MiB one, and a
     * retry (the same bytes, by digest) gets its own body back, marked replayed; a retry
     * with other bytes is refused as before. */
    long long kept = td_metric(&D, "tfetch_replay_bytes");
    static uint8_t doc[(1u << 20) + 128];
    const char *hj = "{\"t\":{\"dtype\":\"U8\",\"shape\":[1048576],"
                     "\"data_offsets\":[0,1048576]}}";
    size_t hl = strlen(hj), pad = (8 - hl % 8) % 8;
    uint64_t n = hl + pad;
    memcpy(doc, &n, 8);
    memcpy(doc + 8, hj, hl);
    memset(doc + 8 + hl, ' ', pad);
    for (size_t i = 0; i < (1u << 20); i++)
        doc[8 + n + i] = (uint8_t)(i * 31u);
    size_t dlen = 8 + n + (1u << 20);
    char sf[128];
    snprintf(sf, sizeof sf, "%s", td_tmpfile(4, doc, dlen));
    snprintf(cmd, sizeof cmd, "curl -sS -D /tmp/tf-e2e-hdr-%d -o /tmp/tf-e2e-echo-%d -X POST "
             "--data-binary @%s -H 'Content-Type: application/x-safetensors' -H "
             "'Tfetch-User: dana' -H 'Tfetch-Request-Id: echo-1' %s/v1/call/echo && cmp %s "
             "/tmp/tf-e2e-echo-%d && grep -ci 'Tfetch-Replayed: 1' /tmp/tf-e2e-hdr-%d",
             (int)getpid(), (int)getpid(), sf, D.base, sf, (int)getpid(), (int)getpid());
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 1);      /* grep: not replayed */
    ck_assert_int_lt(td_metric(&D, "tfetch_replay_bytes") - kept, 4096);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);      /* the same bytes, replayed */
    doc[dlen - 1] ^= 1;
    snprintf(sf, sizeof sf, "%s", td_tmpfile(4, doc, dlen));
    snprintf(cmd, sizeof cmd, "curl -sS -o /dev/null -w '%%{http_code}' -X POST --data-binary "
             "@%s -H 'Content-Type: application/x-safetensors' -H 'Tfetch-User: dana' -H "
             "'Tfetch-Request-Id: echo-1' %s/v1/call/echo", sf, D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_str_eq(out, "422");
    stop_clean();
}
END_TEST

/* Shumai's wire format against the daemon (the real Shumai client runs in tests/shumai.test). */
START_TEST(shumai_wire_get_and_exchange)
{
    start(NULL);
    float v[6] = {1, 2, 3, 4, 5, 6};
    const char *f = td_tmpfile(0, v, sizeof v);
    char args[512];
    snprintf(args, sizeof args, "-X PUT --data-binary @%s -H 'Tfetch-Dtype: F32' -H 'Tfetch-Shape: 2,3'", f);
    ck_assert_int_eq(curl(args, "/v1/tensors/w"), 201);
    int32_t iv[2] = {1, 2};
    f = td_tmpfile(0, iv, sizeof iv);
    snprintf(args, sizeof args, "-X PUT --data-binary @%s -H 'Tfetch-Dtype: I32' -H 'Tfetch-Shape: 2'", f);
    ck_assert_int_eq(curl(args, "/v1/tensors/ids"), 201);

    /* GET /w: Shumai bytes: ndim 2, provenance none, flags 0, 24 data bytes, no props. */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "curl -sS %s/w -o /tmp/tf-e2e-body-%d", D.base, (int)getpid());
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    snprintf(cmd, sizeof cmd, "/tmp/tf-e2e-body-%d", (int)getpid());
    FILE *fp = fopen(cmd, "rb");
    ck_assert_ptr_nonnull(fp);
    int64_t words[7];
    float data[6];
    ck_assert_uint_eq(fread(words, 8, 7, fp), 7);
    ck_assert_uint_eq(fread(data, 4, 6, fp), 6);
    ck_assert_int_eq(fgetc(fp), EOF);
    fclose(fp);
    ck_assert_int_eq(words[0], 2);
    ck_assert_int_eq(words[1], 0xffffffff);
    ck_assert_int_eq(words[2], 0);
    ck_assert_int_eq(words[3], 24);
    ck_assert_int_eq(words[4], 0);
    ck_assert_int_eq(words[5], 2);
    ck_assert_int_eq(words[6], 3);
    ck_assert_int_eq(memcmp(data, v, sizeof v), 0);
    /* Non-F32 data is refused, not converted. */
    ck_assert_int_eq(curl("", "/ids"), 422);
    ck_assert_msg(strstr(out, "F32") != NULL, "%s", out);
    ck_assert_int_eq(curl("", "/missing"), 404);

    /* POST /echo with provenance 0xa1b2c3d4 and props: the reply echoes the provenance. */
    uint8_t msg[40 + 8 + 8 + 22];
    int64_t hdr[6] = {1, 0xa1b2c3d4, 1, 8, 22, 2};
    float x[2] = {0.5f, -1.5f};
    memcpy(msg, hdr, sizeof hdr);
    memcpy(msg + 48, x, sizeof x);
    memcpy(msg + 56, "{\"collectStats\":false}", 22);
    f = td_tmpfile(1, msg, sizeof msg);
    snprintf(cmd, sizeof cmd, "curl -sS -X POST --data-binary @%s -H 'Content-Type: application/octet-stream' "
             "%s/echo -o /tmp/tf-e2e-body-%d", f, D.base, (int)getpid());
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    snprintf(cmd, sizeof cmd, "/tmp/tf-e2e-body-%d", (int)getpid());
    fp = fopen(cmd, "rb");
    ck_assert_ptr_nonnull(fp);
    int64_t rw[6];
    float rx[2];
    ck_assert_uint_eq(fread(rw, 8, 6, fp), 6);
    ck_assert_uint_eq(fread(rx, 4, 2, fp), 2);
    fclose(fp);
    ck_assert_int_eq(rw[0], 1);
    ck_assert_int_eq(rw[1], 0xa1b2c3d4);
    ck_assert_int_eq(rw[2], 1);                                  /* requires_grad kept */
    ck_assert_int_eq(rw[3], 8);
    ck_assert_int_eq(rw[5], 2);
    ck_assert_int_eq(memcmp(rx, x, sizeof x), 0);
    /* The provenance is the user id: accumulate keeps it per Shumai id. */
    snprintf(cmd, sizeof cmd, "curl -sS -o /dev/null -X POST --data-binary @%s %s/accumulate", f, D.base);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    ck_assert_int_eq(call_i32("accumulate", "a1b2c3d4", NULL, iv, 2), 422);  /* F32 sum there */
    /* A malformed Shumai body gets a clear 400. */
    msg[0] = 99;
    f = td_tmpfile(1, msg, sizeof msg);
    snprintf(args, sizeof args, "-X POST --data-binary @%s", f);
    ck_assert_int_eq(curl(args, "/echo"), 400);
    ck_assert_msg(strstr(out, "ndim") != NULL, "%s", out);
    stop_clean();
}
END_TEST

/* ---- worker routes ------------------------------------------------------------------- */

/* double: F32 x2, answering with the caller's ids as metadata; refuse: a 422 with a message;
 * slow: never answers in time. */
static tf_status_t worker_fn(const tf_call_t *call, const tf_doc_t *in, tf_doc_t **reply,
                             char *errmsg, size_t errmsg_size, void *ud)
{
    (void)ud;
    if (strcmp(call->route, "refuse") == 0) {
        snprintf(errmsg, errmsg_size, "refused by the worker for %s", call->user);
        return TF_EUNPROC;
    }
    if (strcmp(call->route, "slow") == 0) {
        FILE *f = fopen(getenv("TF_TEST_MARK"), "w");
        if (f)
            fclose(f);
        sleep(30);
    }
    const tf_tensor_t *t = tf_doc_at(in, 0);
    if (!t || t->dtype != TF_F32)
        return TF_EUNPROC;
    size_t n = t->nbytes / 4;
    float *v = malloc(t->nbytes ? t->nbytes : 1);
    for (size_t i = 0; i < n; i++)
        v[i] = ((const float *)t->data)[i] * 2;
    tf_doc_t *d = tf_doc_new();
    tf_doc_add(d, t->name, TF_F32, t->rank, t->shape, v, t->nbytes, TF_COPY);
    free(v);
    tf_doc_set_meta(d, "user", call->user);
    tf_doc_set_meta(d, "request", call->request_id);
    *reply = d;
    return TF_OK;
}

static pid_t start_worker(const char *const *routes, size_t n)
{
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL);       /* Check's handler would signal the whole group */
        tf_worker_t *w = NULL;
        if (tf_worker_new(D.base, routes, n, worker_fn, NULL, &w) != TF_OK)
            _exit(3);
        tf_status_t st = tf_worker_serve(w, 60000);
        tf_worker_free(w);
        _exit(st == TF_OK ? 0 : 4);
    }
    /* Wait until the routes show up. */
    for (int i = 0; i < 200; i++) {
        curl("", "/v1/info");
        if (strstr(out, "\"kind\":\"worker\""))
            return pid;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    ck_abort_msg("the worker did not register");
    return -1;
}

/* A worker's route answers later, which a same-host CALL over shm cannot wait for: the
 * daemon declines it before anything runs, and the client sends the call over UCX (or HTTP)
 * instead, its fallback saying why; later calls of that route go there at once, saying why
 * too. The worker sees each call once. A built-in route of the same size goes over shm/memfd. */
START_TEST(worker_route_declined_over_shm)
{
    start(NULL);
    const char *routes[] = {"double"};
    pid_t wpid = start_worker(routes, 1);
    tf_client_t *c = client();
    size_t n = 1 << 16;                     /* 256 KiB of F32: CALL would go over shm */
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)i;
    int64_t shape[1] = {(int64_t)n};
    tf_doc_t *in = tf_doc_new(), *got = NULL;
    ck_assert_int_eq(tf_doc_add(in, "x", TF_F32, 1, shape, v, n * sizeof *v, TF_BORROW), TF_OK);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/call/echo", D.base);
    ck_assert_int_eq(tf_fetch(c, url, in, &got), TF_OK);
    int shm = strcmp(tf_client_last(c)->transport, "shm/memfd") == 0;
    tf_doc_free(got);
    got = NULL;
    snprintf(url, sizeof url, "%s/v1/call/double", D.base);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(tf_fetch(c, url, in, &got) == TF_OK, "%s", tf_client_last(c)->error);
        ck_assert(((const float *)tf_doc_find(got, "x")->data)[n - 1] == 2.0f * (float)(n - 1));
        tf_doc_free(got);
        got = NULL;
        ck_assert_str_ne(tf_client_last(c)->transport, "shm/memfd");
        if (shm)                            /* declined once, and said each time */
            ck_assert_msg(strstr(tf_client_last(c)->fallback, "answers later") != NULL,
                          "fallback: '%s'", tf_client_last(c)->fallback);
    }
    if (shm) {                              /* one decline, answered 501 by the router */
        curl("", "/metrics");
        ck_assert_ptr_nonnull(strstr(out, "tfetch_requests_total{route=\"call\",status=\"501\","
                                          "transport=\"shm\"} 1"));
    }
    tf_doc_free(in);
    free(v);
    tf_client_free(c);
    kill(wpid, SIGTERM);
    int st;
    waitpid(wpid, &st, 0);
    stop_clean();
}
END_TEST

START_TEST(worker_routes_serve_calls)
{
    const char *args[] = {"--worker-lease", "1000", NULL};
    start(args);
    const char *routes[] = {"double", "refuse"};
    pid_t wpid = start_worker(routes, 2);
    tf_client_t *c = client();
    tf_client_set_user(c, "frank");
    tf_client_set_request_id(c, "job-9");
    tf_doc_t *in = tf_doc_new(), *got = NULL;
    float v[3] = {1, 2.5f, -4};
    int64_t shape[1] = {3};
    tf_doc_add(in, "x", TF_F32, 1, shape, v, sizeof v, TF_BORROW);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/call/double", D.base);
    ck_assert_int_eq(tf_fetch(c, url, in, &got), TF_OK);
    const float *r = tf_doc_find(got, "x")->data;
    ck_assert(r[0] == 2 && r[1] == 5 && r[2] == -8);
    ck_assert_str_eq(tf_doc_meta(got, "user"), "frank");
    ck_assert_str_eq(tf_doc_meta(got, "request"), "job-9");
    tf_doc_free(got);
    got = NULL;
    /* The worker's error reaches the caller as it was given. */
    snprintf(url, sizeof url, "%s/v1/call/refuse", D.base);
    ck_assert_int_eq(tf_fetch(c, url, in, &got), TF_EUNPROC);
    ck_assert_int_eq(tf_client_last(c)->http_status, 422);
    ck_assert_str_eq(tf_client_last(c)->error, "refused by the worker for frank");
    /* Many calls in a row through one worker. */
    snprintf(url, sizeof url, "%s/v1/call/double", D.base);
    for (int i = 0; i < 50; i++) {
        v[0] = (float)i;
        ck_assert_int_eq(tf_fetch(c, url, in, &got), TF_OK);
        ck_assert(((const float *)tf_doc_find(got, "x")->data)[0] == 2.0f * (float)i);
        tf_doc_free(got);
        got = NULL;
    }
    /* The worker leaves: its routes go, callers get 404. */
    kill(wpid, SIGTERM);
    int st;
    waitpid(wpid, &st, 0);
    struct timespec ts = {1, 500 * 1000000L};
    nanosleep(&ts, NULL);                   /* the lease runs out */
    ck_assert_int_eq(tf_fetch(c, url, in, &got), TF_ENOTFOUND);
    tf_doc_free(in);
    tf_client_free(c);
    stop_clean();
}
END_TEST

START_TEST(worker_killed_mid_request_gives_503)
{
    const char *args[] = {"--worker-lease", "1000", NULL};
    start(args);
    char mark[128];
    snprintf(mark, sizeof mark, "/tmp/tf-e2e-mark-%d", (int)getpid());
    unlink(mark);
    setenv("TF_TEST_MARK", mark, 1);
    const char *routes[] = {"slow"};
    pid_t wpid = start_worker(routes, 1);
    /* Kill the worker once the call is in its hands. */
    pid_t killer = fork();
    if (killer == 0) {
        for (int i = 0; i < 500 && access(mark, F_OK) != 0; i++) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        kill(wpid, SIGKILL);
        _exit(0);
    }
    tf_client_t *c = client();
    tf_doc_t *in = tf_doc_new(), *got = NULL;
    float v[1] = {1};
    int64_t shape[1] = {1};
    tf_doc_add(in, "x", TF_F32, 1, shape, v, sizeof v, TF_BORROW);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/call/slow", D.base);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(tf_fetch(c, url, in, &got), TF_EBUSY);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    ck_assert_int_eq(tf_client_last(c)->http_status, 503);
    ck_assert_msg(strstr(tf_client_last(c)->error, "stopped answering") != NULL, "%s",
                  tf_client_last(c)->error);
    ck_assert_msg(secs < 5.0, "the caller waited %.2f s for a dead worker", secs);
    ck_assert_int_eq(access(mark, F_OK), 0);            /* the worker had the call */
    int st;
    waitpid(killer, &st, 0);
    waitpid(wpid, &st, 0);
    ck_assert(WIFSIGNALED(st));
    unlink(mark);
    tf_doc_free(in);
    tf_client_free(c);
    stop_clean();
}
END_TEST

START_TEST(worker_protocol_refusals)
{
    start(NULL);
    ck_assert_int_eq(curl("-X POST -H 'Content-Type: application/json' -d '{\"routes\":[]}'", "/v1/workers"), 400);
    ck_assert_int_eq(curl("-X POST -H 'Content-Type: application/json' -d '{\"routes\":[\"echo\"]}'", "/v1/workers"), 422);
    ck_assert_msg(strstr(out, "already served") != NULL, "%s", out);
    ck_assert_int_eq(curl("-X POST -H 'Content-Type: application/json' -d '{\"routes\":[\"a/b\"]}'", "/v1/workers"), 400);
    ck_assert_int_eq(curl("-X POST -H 'Content-Type: application/json' -d 'nope'", "/v1/workers"), 400);
    ck_assert_int_eq(curl("", "/v1/workers/nobody/next?wait=10"), 404);
    ck_assert_int_eq(curl("-X POST -H 'Content-Type: application/json' -d '{\"error\":\"x\",\"code\":\"TF_EUNPROC\"}'",
                          "/v1/workers/nobody/calls/c1"), 404);
    ck_assert_int_eq(curl("-X DELETE", "/v1/workers/nobody"), 404);
    stop_clean();
}
END_TEST

/* ---- concurrency ----------------------------------------------------------------------- */

enum { WRITERS = 4, ROUNDS = 25, ELEMS = 16384 };

typedef struct {
    int id;
    int failures;
    char msg[256];
} worker_t;

/* Payload: [writer id, round, then data derived from both]; a reader can check any copy. */
static void make_payload(uint32_t *p, uint32_t id, uint32_t round)
{
    p[0] = id;
    p[1] = round;
    for (uint32_t i = 2; i < ELEMS; i++)
        p[i] = (id * 2654435761u) ^ (round * 40503u) ^ (i * 2246822519u);
}

static int payload_ok(const uint32_t *p)
{
    uint32_t want[ELEMS];
    make_payload(want, p[0], p[1]);
    return memcmp(want, p, sizeof want) == 0;
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    tf_client_t *c = NULL;
    if (tf_client_new(&c) != TF_OK) {
        w->failures++;
        return NULL;
    }
    static __thread uint32_t buf[ELEMS];
    char shared[256], own[256];
    snprintf(shared, sizeof shared, "%s/v1/tensors/shared", D.base);
    snprintf(own, sizeof own, "%s/v1/tensors/own%d", D.base, w->id);
    for (int r = 0; r < ROUNDS; r++) {
        make_payload(buf, (uint32_t)w->id, (uint32_t)r);
        tf_doc_t *d = tf_doc_new();
        int64_t shape[1] = {ELEMS};
        tf_doc_add(d, "x", TF_U32, 1, shape, buf, sizeof buf, TF_BORROW);
        if (tf_put(c, (r & 1) ? shared : own, d) != TF_OK) {
            w->failures++;
            snprintf(w->msg, sizeof w->msg, "put: %.200s", tf_client_last(c)->error);
        }
        tf_doc_free(d);
        tf_doc_t *g = NULL;
        tf_status_t st = tf_get(c, shared, 0, &g);
        if (st == TF_OK) {
            const tf_tensor_t *t = tf_doc_find(g, "x");
            if (!t || t->nbytes != sizeof buf || !payload_ok(t->data)) {
                w->failures++;
                snprintf(w->msg, sizeof w->msg, "torn or mixed read of shared");
            }
        } else if (st != TF_ENOTFOUND) {
            w->failures++;
            snprintf(w->msg, sizeof w->msg, "get shared: %s", tf_strerror(st));
        }
        tf_doc_free(g);
        g = NULL;
        if (!(r & 1)) {
            if (tf_get(c, own, 0, &g) != TF_OK) {
                w->failures++;
            } else {
                const tf_tensor_t *t = tf_doc_find(g, "x");
                const uint32_t *p = t ? t->data : NULL;
                if (!p || p[0] != (uint32_t)w->id || p[1] != (uint32_t)r || !payload_ok(p)) {
                    w->failures++;
                    snprintf(w->msg, sizeof w->msg, "own tensor lost or mixed up");
                }
            }
            tf_doc_free(g);
        }
    }
    tf_client_free(c);
    return NULL;
}

START_TEST(concurrent_clients_nothing_lost_or_torn)
{
    start(NULL);
    pthread_t th[WRITERS];
    worker_t w[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        w[i] = (worker_t){.id = i};
        pthread_create(&th[i], NULL, worker, &w[i]);
    }
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(w[i].failures == 0, "worker %d: %d failures (%s)", i, w[i].failures, w[i].msg);
    }
    /* Every own tensor holds its writer's last even round. */
    tf_client_t *c = client();
    for (int i = 0; i < WRITERS; i++) {
        char url[256];
        snprintf(url, sizeof url, "%s/v1/tensors/own%d", D.base, i);
        tf_doc_t *g = NULL;
        ck_assert_int_eq(tf_get(c, url, 0, &g), TF_OK);
        const uint32_t *p = tf_doc_find(g, "x")->data;
        ck_assert_uint_eq(p[0], (uint32_t)i);
        ck_assert_uint_eq(p[1], ROUNDS - 1 - ((ROUNDS - 1) & 1));
        tf_doc_free(g);
    }
    tf_client_free(c);
    stop_clean();
}
END_TEST

/* Garbage on the socket: the daemon answers or closes, and goes on serving. */
START_TEST(hostile_requests_do_not_hurt)
{
    start(NULL);
    char cmd[1024];
    const char *junk[] = {
        "GARBAGE\\r\\n\\r\\n",
        "GET / HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: -5\\r\\n\\r\\n",
        "PUT /v1/tensors/a HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 99999999999999999999\\r\\n\\r\\n",
        "PUT /v1/tensors/a HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 100\\r\\n\\r\\nshort",
        "PUT /v1/tensors/a HTTP/1.1\\r\\nHost: x\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\nzz\\r\\n",
    };
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        snprintf(cmd, sizeof cmd, "printf '%s' | timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%u; "
                 "cat >&3; timeout 1 cat <&3' >/dev/null 2>&1; true", junk[i], D.port);
        td_run(cmd, NULL, 0);
    }
    ck_assert_int_eq(curl("", "/healthz"), 200);
    ck_assert_int_eq(curl("", "/v1/tensors/a"), 404);             /* no half upload stored */
    ck_assert_int_eq(curl("", "/metrics"), 200);
    ck_assert_msg(strstr(out, "tfetch_store_reserved_bytes 0") != NULL, "reservation leaked: %s", out);
    stop_clean();
}
END_TEST

/* tf_fetch_start_fd (issue 31, big documents): what it refuses before anything starts, and
 * a document put from a file and got into one over HTTP, byte for byte, the callback's doc
 * NULL; a get that fails writes nothing. bigfile.test runs the CLI on it with a big shard. */
typedef struct {
    int done;
    tf_status_t st;
    int had_doc;
    uint64_t received;
} fd_done_t;

static void on_fd_done(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                       void *ud)
{
    fd_done_t *d = ud;
    (void)f;
    d->done = 1;
    d->st = st;
    d->had_doc = doc != NULL;
    d->received = r->bytes_received;
    tf_doc_free(doc);
}

static tf_status_t fd_request(tf_client_t *c, tf_op_t op, const char *url, int fd,
                              fd_done_t *d)
{
    tf_request_t rq = TF_REQUEST_INIT;
    rq.op = op;
    rq.url = url;
    rq.transport = TF_TRANSPORT_HTTP;
    memset(d, 0, sizeof *d);
    tf_status_t st = tf_fetch_start_fd(c, &rq, fd, on_fd_done, d, NULL);
    if (st == TF_OK)
        ck_assert_int_eq(tf_client_run(c, 20000), TF_OK);
    return st;
}

START_TEST(lib_fetch_start_fd_files_in_and_out)
{
    start(NULL);
    tf_client_t *c = client();
    char url[256], in_path[64], out_path[64];
    snprintf(url, sizeof url, "%s/v1/tensors/filed", D.base);
    snprintf(in_path, sizeof in_path, "/tmp/tf-e2e-fd-in-%d", (int)getpid());
    snprintf(out_path, sizeof out_path, "/tmp/tf-e2e-fd-out-%d", (int)getpid());

    /* The file: an encoded document with a few MiB of data. */
    static uint8_t data[3 << 20];
    fill(data, sizeof data, 7);
    int64_t shape[1] = {(int64_t)sizeof data};
    tf_doc_t *doc = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(doc, "w", TF_U8, 1, shape, data, sizeof data, TF_BORROW), TF_OK);
    void *enc = NULL;
    size_t enc_len = 0;
    ck_assert_int_eq(tf_doc_encode(doc, &enc, &enc_len), TF_OK);
    int ifd = open(in_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(ifd, 0);
    ck_assert_int_eq(write(ifd, enc, enc_len), (ssize_t)enc_len);

    /* Refused before anything starts: no fd, another op, a doc besides the file, a format
     * the file is not, a put from something that is not a regular file. */
    tf_request_t rq = TF_REQUEST_INIT;
    rq.op = TF_OP_PUT;
    rq.url = url;
    fd_done_t d;
    ck_assert_int_eq(tf_fetch_start_fd(c, &rq, -1, on_fd_done, &d, NULL), TF_EINVAL);
    rq.in = doc;
    ck_assert_int_eq(tf_fetch_start_fd(c, &rq, ifd, on_fd_done, &d, NULL), TF_EINVAL);
    rq.in = NULL;
    rq.op = TF_OP_DELETE;
    ck_assert_int_eq(tf_fetch_start_fd(c, &rq, ifd, on_fd_done, &d, NULL), TF_EINVAL);
    rq.op = TF_OP_GET;
    rq.format = TF_FORMAT_SHUMAI;
    ck_assert_int_eq(tf_fetch_start_fd(c, &rq, ifd, on_fd_done, &d, NULL), TF_EINVAL);
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    ck_assert_int_eq(fd_request(c, TF_OP_PUT, url, pipefd[0], &d), TF_EINVAL);
    ck_assert_msg(strstr(tf_client_last(c)->error, "regular file"), "%s",
                  tf_client_last(c)->error);
    close(pipefd[0]);
    close(pipefd[1]);

    /* In from the file, out into another: the same bytes. */
    ck_assert_int_eq(fd_request(c, TF_OP_PUT, url, ifd, &d), TF_OK);
    ck_assert_int_eq(d.st, TF_OK);
    int ofd = open(out_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(ofd, 0);
    ck_assert_int_eq(fd_request(c, TF_OP_GET, url, ofd, &d), TF_OK);
    ck_assert_int_eq(d.st, TF_OK);
    ck_assert_int_eq(d.had_doc, 0);
    ck_assert_uint_eq(d.received, enc_len);
    struct stat st;
    ck_assert_int_eq(fstat(ofd, &st), 0);
    ck_assert_int_eq((size_t)st.st_size, enc_len);
    uint8_t *back = malloc(enc_len);
    ck_assert_int_eq(pread(ofd, back, enc_len, 0), (ssize_t)enc_len);
    ck_assert_int_eq(memcmp(back, enc, enc_len), 0);
    free(back);

    /* A get that fails (404) writes nothing: its error body is read, not written. */
    ck_assert_int_eq(ftruncate(ofd, 0), 0);
    ck_assert_int_eq(lseek(ofd, 0, SEEK_SET), 0);
    snprintf(url, sizeof url, "%s/v1/tensors/absent", D.base);
    ck_assert_int_eq(fd_request(c, TF_OP_GET, url, ofd, &d), TF_OK);
    ck_assert_int_eq(d.st, TF_ENOTFOUND);
    ck_assert_int_eq(fstat(ofd, &st), 0);
    ck_assert_int_eq(st.st_size, 0);

    close(ofd);
    close(ifd);
    unlink(in_path);
    unlink(out_path);
    tf_free(enc);
    tf_doc_free(doc);
    tf_client_free(c);
    stop_clean();
}
END_TEST

Suite *suite_e2e(void)
{
    Suite *s = suite_create("e2e");
    TCase *tc = tcase_create("curl");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, curl_raw_put_get_json_list_delete);
    tcase_add_test(tc, curl_endpoints_and_errors);
    tcase_add_test(tc, curl_limits);
    tcase_add_test(tc, curl_expect_100_continue);
    tcase_add_test(tc, hostile_requests_do_not_hurt);
    suite_add_tcase(s, tc);
    tc = tcase_create("libtfetch");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, lib_every_dtype_round_trip);
    tcase_add_test(tc, lib_ids_are_sent_and_echoed);
    tcase_add_test(tc, lib_long_poll);
    tcase_add_test(tc, lib_long_poll_answered_on_shutdown);
    tcase_add_test(tc, sigterm_finishes_inflight_transfer);
    tcase_add_test(tc, readyz_turns_503_on_sigterm_during_grace);
    tcase_add_test(tc, access_log_lines_and_sighup_reopen);
    tcase_add_test(tc, store_ttl_and_lru_over_http);
    tcase_add_test(tc, sighup_reloads_live_settings);
    tcase_add_test(tc, curl_list_prefix_and_pages);
    tcase_add_test(tc, curl_etag_conditional_and_range);
    tcase_add_test(tc, concurrent_clients_nothing_lost_or_torn);
    tcase_add_test(tc, lib_multi_tensor_doc_formats);
    tcase_add_test(tc, lib_fetch_start_fd_files_in_and_out);
    suite_add_tcase(s, tc);
    tc = tcase_create("exchange");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, exchange_echo_curl_and_lib);
    tcase_add_test(tc, accumulate_per_user_isolation_and_end);
    tcase_add_test(tc, sessions_ttl_quota_eviction);
    tcase_add_test(tc, retry_with_request_id_runs_once);
    tcase_add_test(tc, shumai_wire_get_and_exchange);
    suite_add_tcase(s, tc);
    tc = tcase_create("workers");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, worker_routes_serve_calls);
    tcase_add_test(tc, worker_route_declined_over_shm);
    tcase_add_test(tc, worker_killed_mid_request_gives_503);
    tcase_add_test(tc, worker_protocol_refusals);
    suite_add_tcase(s, tc);
    tc = tcase_create("cli");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, cli_put_get_ls_rm_and_exit_codes);
    tcase_add_test(tc, cli_names_files_terminal_and_errors);
    tcase_add_test(tc, cli_upgrades_by_default_and_keeps_no_cache);
    suite_add_tcase(s, tc);
    return s;
}
