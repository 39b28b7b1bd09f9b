/* check_ucx.c - libtfetch over UCX against the real tfetchd: the upgrade (HTTP first, then UCX
 * from the next request on; strict and http policies; a server that does not offer it),
 * every operation and dtype over UCX, a 256 MiB tensor, a thousand exchanges in flight,
 * cancel and free with UCX requests pending, the admission of UCX endpoints (one-time,
 * short-lived, peer-bound tokens; frames without one), and faults (the daemon killed
 * mid-request, a connection lost and the request retried over HTTP with the same id).
 *
 * Each test starts its own daemon ($TFETCHD, port 0). Built without UCX, only the client's
 * answers without it are checked (auto falls back, ucx fails, both saying why); the rest is
 * skipped with a message. Runs in one process too (CK_FORK=no): every test frees what it made.
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "client/tfetch.h"

#include <pthread.h>
#include <dirent.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_UCX
#include <ucp/api/ucp.h>
#include "proto/ucxframe.h"
#include "proto/upgrade.h"
#include "transports/clock.h"
#include "transports/hostid.h"
#include "transports/http_client.h"
#include "transports/ucx_client.h"
#include "transports/ucx_server.h"
#endif

Suite *suite_ucx(void);                /* registered in tests/suites.h */

static td_daemon_t D;

/* ---- helpers ------------------------------------------------------------------------------ */

#ifdef HAVE_UCX
static double now_s(void)
{
    return tfx_now_s();
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}
#endif

/* 1 when $TFETCHD is set (make check sets it); else says why the test is skipped. */
static int have_daemon(const char *test)
{
    if (getenv("TFETCHD"))
        return 1;
    fprintf(stderr, "%s: TFETCHD not set, skipped\n", test);
    return 0;
}

/* With --shm off: this suite is about UCX, and same-host GETs under auto would otherwise
 * go over shared memory (the shme2e suite tests that). */
static void start(const char *const *args)
{
    const char *all[32];
    size_t n = 0;
    for (; args && args[n] && n < 29; n++)
        all[n] = args[n];
    all[n++] = "--shm";
    all[n++] = "off";
    all[n] = NULL;
    ck_assert_msg(td_start(&D, all) == 0, "tfetchd did not start");
}

static void stop(void)
{
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}

static tf_client_t *client(tf_transport_t policy)
{
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_transport(c, policy), TF_OK);
    return c;
}

static const char *url(const char *fmt, const char *name)
{
    static char bufs[4][512];
    static int k;
    char *b = bufs[k++ & 3];
    int n = snprintf(b, 512, "%s", D.base);
    snprintf(b + n, 512 - (size_t)n, fmt, name);
    return b;
}

/* A one-tensor F32 document "name" of n values base, base + 1, ... (copied). */
static tf_doc_t *f32_doc(const char *name, int n, float base)
{
    float v[64];
    ck_assert_int_le(n, 64);
    for (int i = 0; i < n; i++)
        v[i] = base + (float)i;
    int64_t shape[1] = {n};
    tf_doc_t *doc = tf_doc_new();
    ck_assert_ptr_nonnull(doc);
    ck_assert_int_eq(tf_doc_add(doc, name, TF_F32, 1, shape, v, (size_t)n * sizeof(float),
                                TF_COPY), TF_OK);
    return doc;
}

#ifdef HAVE_UCX
/* Same tensors (names, dtypes, shapes, bytes) in the same order. */
static int docs_equal(const tf_doc_t *a, const tf_doc_t *b)
{
    if (!a || !b || tf_doc_count(a) != tf_doc_count(b))
        return 0;
    for (size_t i = 0; i < tf_doc_count(a); i++) {
        const tf_tensor_t *x = tf_doc_at(a, i), *y = tf_doc_at(b, i);
        if (strcmp(x->name, y->name) != 0 || x->dtype != y->dtype || x->rank != y->rank ||
            x->nbytes != y->nbytes ||
            memcmp(x->shape, y->shape, sizeof(x->shape[0]) * (size_t)x->rank) != 0 ||
            (x->nbytes && memcmp(x->data, y->data, x->nbytes) != 0))
            return 0;
    }
    return 1;
}

/* The transport string of a request that went over shared memory on this host. */
static void assert_shm(const char *transport)
{
    ck_assert_msg(strncmp(transport, "ucx/", 4) == 0 &&
                      (strstr(transport, "sysv") || strstr(transport, "posix")),
                  "expected UCX over shared memory, got '%s'", transport);
}

static void assert_ucx_result(const tf_result_t *r)
{
    assert_shm(r->transport);
    ck_assert_msg(r->fallback[0] == '\0', "unexpected fallback: %s", r->fallback);
}

/* Number of times needle occurs in the file at path. */
static int count_in_file(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle))
            n++;
    fclose(f);
    return n;
}
#endif

/* ---- without UCX: the client says why ------------------------------------------------------ */

#ifndef HAVE_UCX
START_TEST(noucx_auto_falls_back_ucx_fails)
{
    if (!have_daemon("noucx_auto_falls_back_ucx_fails"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    tf_doc_t *d = f32_doc("w", 4, 1);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "w"), d), TF_OK);
        ck_assert_str_eq(tf_client_last(c)->transport, "http");
    }
    ck_assert_msg(strstr(tf_client_last(c)->fallback, "without UCX"), "fallback: %s",
                  tf_client_last(c)->fallback);
    tf_transport_info_t ti = TF_TRANSPORT_INFO_INIT;
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    ck_assert_str_eq(ti.transport, "http");
    ck_assert_msg(strstr(ti.reason, "without UCX"), "reason: %s", ti.reason);
    ck_assert_int_eq(tf_client_upgrade(c, D.base), TF_ECONNECT);
    ck_assert_msg(strstr(tf_client_last(c)->error, "without UCX"), "error: %s",
                  tf_client_last(c)->error);
    ck_assert_int_eq(tf_client_set_transport(c, TF_TRANSPORT_UCX), TF_OK);
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "w"), d), TF_ECONNECT);
    ck_assert_msg(strstr(tf_client_last(c)->error, "without UCX"), "error: %s",
                  tf_client_last(c)->error);
    /* list and info are HTTP's, whatever the policy */
    char *json = NULL;
    ck_assert_int_eq(tf_info(c, D.base, &json), TF_OK);
    free(json);
    tf_doc_free(d);
    tf_client_free(c);
    stop();
}
END_TEST
#else

/* ---- the upgrade ----------------------------------------------------------------------------- */

/* Skips (1) when the daemon's UCX did not start here: /v1/info says why. */
static int ucx_unavailable(tf_client_t *c, const char *test)
{
    char *json = NULL;
    ck_assert_int_eq(tf_info(c, D.base, &json), TF_OK);
    int off = strstr(json, "\"ucx\":{\"compiled\":true,\"enabled\":true") == NULL;
    if (off)
        fprintf(stderr, "%s: tfetchd's UCX is not available here (%s), skipped\n", test, json);
    free(json);
    return off;
}

START_TEST(ucx_upgrade_after_first_request)
{
    if (!have_daemon("ucx_upgrade_after_first_request"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    /* Lazy: no negotiation before the server offered UCX (eager, the default, is
     * ucx_first_request_upgrades_same_host). */
    ck_assert_int_eq(tf_client_set_upgrade_policy(c, TF_UPGRADE_LAZY), TF_OK);
    tf_transport_info_t ti = TF_TRANSPORT_INFO_INIT;
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    ck_assert_str_eq(ti.transport, "http");
    ck_assert_int_eq(ti.offered, -1);
    tf_doc_t *d = f32_doc("w", 8, 1), *got = NULL;
    ck_assert_int_eq(tf_client_upgrade(c, "mailto:x"), TF_EURL);
    /* The first request goes over HTTP and learns that the server offers UCX. */
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "w"), d), TF_OK);
    const tf_result_t *r = tf_client_last(c);
    ck_assert_str_eq(r->transport, "http");
    ck_assert_int_eq(r->http_status, 201);
    ck_assert_msg(strstr(r->fallback, "not offered UCX yet"), "fallback: %s", r->fallback);
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    ck_assert_int_eq(ti.offered, 1);
    /* Every following one goes over UCX, shared memory on one host. */
    ck_assert_int_eq(tf_client_set_request_id(c, "second-1"), TF_OK);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "w"), 0, &got), TF_OK);
    r = tf_client_last(c);
    assert_ucx_result(r);
    ck_assert_int_eq(r->http_status, 200);
    ck_assert_str_eq(r->request_id, "second-1");
    ck_assert_str_eq(r->op, "get");
    ck_assert_uint_gt(r->bytes_received, 32);
    ck_assert(r->seconds > 0.0);
    ck_assert(docs_equal(got, d));
    tf_doc_free(got);
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    assert_shm(ti.transport);
    ck_assert_str_eq(ti.reason, "");
    ck_assert_int_eq(ti.retry_ms, 0);
    /* Any URL of the same origin names it; another origin is unknown. */
    ck_assert_int_eq(tf_client_transport_info(c, url("/v1/tensors/%s", "w"), &ti), TF_OK);
    assert_shm(ti.transport);
    ck_assert_int_eq(tf_client_transport_info(c, "http://127.0.0.1:1/", &ti), TF_OK);
    ck_assert_str_eq(ti.transport, "http");
    ck_assert_int_eq(ti.offered, -1);
    ck_assert_int_eq(tf_client_transport_info(c, "ftp://x/", &ti), TF_EURL);
    ck_assert_int_eq(tf_client_upgrade(c, D.base), TF_OK);          /* already connected */
    ck_assert_str_eq(tf_client_last(c)->op, "upgrade");
    assert_shm(tf_client_last(c)->transport);
    tf_client_free(c);
    /* tf_client_upgrade: UCX from the very first request under auto. */
    c = client(TF_TRANSPORT_AUTO);
    ck_assert_int_eq(tf_client_upgrade(c, url("/v1/tensors/%s", "w")), TF_OK);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "w"), 0, &got), TF_OK);
    assert_ucx_result(tf_client_last(c));
    tf_doc_free(got);
    /* list, info and the Shumai format stay on HTTP and say so. */
    tf_entry_t *e = NULL;
    size_t n = 0;
    ck_assert_int_eq(tf_list(c, D.base, &e, &n), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "http");
    ck_assert_msg(strstr(tf_client_last(c)->fallback, "HTTP"), "%s",
                  tf_client_last(c)->fallback);
    tf_list_free(e, n);
    ck_assert_int_eq(tf_client_set_format(c, TF_FORMAT_SHUMAI), TF_OK);
    ck_assert_int_eq(tf_fetch(c, url("/%s", "echo"), d, &got), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "http");
    ck_assert_msg(strstr(tf_client_last(c)->fallback, "Shumai"), "%s",
                  tf_client_last(c)->fallback);
    tf_doc_free(got);
    tf_doc_free(d);
    tf_client_free(c);
    stop();
}
END_TEST

/* Strict: the first request negotiates at once; http never upgrades. */
START_TEST(ucx_policies)
{
    if (!have_daemon("ucx_policies"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_UCX);
    if (ucx_unavailable(c, "ucx_policies")) {
        tf_client_free(c);
        stop();
        return;
    }
    tf_doc_t *d = f32_doc("p", 4, 0), *got = NULL;
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "p"), d), TF_OK);
    assert_ucx_result(tf_client_last(c));
    /* A request may choose its own policy. */
    tf_request_t rq = {.op = TF_OP_GET, .url = url("/v1/tensors/%s", "p"),
                       .transport = TF_TRANSPORT_HTTP};
    tf_fetch_t *f = NULL;
    ck_assert_int_eq(tf_fetch_start(c, &rq, NULL, NULL, &f), TF_OK);
    ck_assert_int_eq(tf_fetch_wait(f, 10000), TF_OK);
    ck_assert_str_eq(tf_fetch_result(f)->transport, "http");
    ck_assert_str_eq(tf_fetch_result(f)->fallback, "");
    got = tf_fetch_take_doc(f);
    ck_assert(docs_equal(got, d));
    tf_doc_free(got);
    tf_fetch_free(f);
    rq.transport = (tf_transport_t)42;
    ck_assert_int_eq(tf_fetch_start(c, &rq, NULL, NULL, &f), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_transport(c, TF_TRANSPORT_DEFAULT), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_transport(NULL, TF_TRANSPORT_AUTO), TF_EINVAL);
    tf_client_free(c);

    /* http stays http, with no fallback reason: nothing fell back. */
    c = client(TF_TRANSPORT_HTTP);
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "p"), 0, &got), TF_OK);
        ck_assert_str_eq(tf_client_last(c)->transport, "http");
        ck_assert_str_eq(tf_client_last(c)->fallback, "");
        tf_doc_free(got);
    }
    tf_transport_info_t ti = TF_TRANSPORT_INFO_INIT;
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    ck_assert_str_eq(ti.transport, "http");
    ck_assert_int_eq(ti.offered, 1);
    tf_client_free(c);

    /* TFETCH_TRANSPORT sets a new client's policy. */
    setenv("TFETCH_TRANSPORT", "http", 1);
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    unsetenv("TFETCH_TRANSPORT");
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "p"), 0, &got), TF_OK);
        ck_assert_str_eq(tf_client_last(c)->transport, "http");
        tf_doc_free(got);
    }
    tf_client_free(c);
    setenv("TFETCH_TRANSPORT", "ucx", 1);
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    unsetenv("TFETCH_TRANSPORT");
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "p"), 0, &got), TF_OK);
    assert_shm(tf_client_last(c)->transport);
    tf_doc_free(got);
    tf_client_free(c);
    tf_doc_free(d);
    stop();
}
END_TEST

typedef struct {
    tf_client_t *c;
    tf_fetch_t *second;
    int calls;
    tf_status_t st;
    tf_result_t res;
} chain_t;

static void chained_cb(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                       void *ud)
{
    chain_t *ch = ud;
    (void)f;
    ch->calls++;
    ch->st = st;
    ch->res = *r;
    tf_doc_free(doc);
}

static void first_cb(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                     void *ud)
{
    chain_t *ch = ud;
    (void)f;
    (void)r;
    ck_assert_int_eq(st, TF_OK);
    tf_doc_free(doc);
    /* Inside a callback nothing negotiates: this one goes over HTTP and says why. */
    tf_request_t rq = {.op = TF_OP_GET, .url = url("/v1/tensors/%s", "cb")};
    ck_assert_int_eq(tf_fetch_start(ch->c, &rq, chained_cb, ch, &ch->second), TF_OK);
}

/* The default upgrade policy (eager): a fresh client's first request to a server on this
 * host negotiates first, so it already travels over UCX or shared memory. */
START_TEST(ucx_first_request_upgrades_same_host)
{
    if (!have_daemon("ucx_first_request_upgrades_same_host"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    if (ucx_unavailable(c, "ucx_first_request_upgrades_same_host")) {
        tf_client_free(c);
        stop();
        return;
    }
    tf_client_free(c);                  /* tf_info made a request: a fresh client */
    c = client(TF_TRANSPORT_AUTO);
    tf_doc_t *d = f32_doc("e", 8, 1), *got = NULL;
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "e"), d), TF_OK);
    const tf_result_t *r = tf_client_last(c);
    ck_assert_msg(strncmp(r->transport, "ucx/", 4) == 0 || strncmp(r->transport, "shm/", 4) == 0,
                  "first put: %s (fallback: %s)", r->transport, r->fallback);
    tf_client_free(c);
    c = client(TF_TRANSPORT_AUTO);      /* and a fresh client's first get */
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "e"), 0, &got), TF_OK);
    r = tf_client_last(c);
    ck_assert_msg(strncmp(r->transport, "shm/", 4) == 0 || strncmp(r->transport, "ucx/", 4) == 0,
                  "first get: %s (fallback: %s)", r->transport, r->fallback);
    tf_doc_free(got);
    tf_doc_free(d);
    tf_client_free(c);
    stop();
}
END_TEST

/* Which memory UCX can move is asked of UCX at run time, on both sides, never assumed: the
 * server's in /v1/info, the client's in its transport info once UCX started in it. Debian's
 * UCX knows host memory (a CUDA-enabled build adds cuda: either way host comes first). */
START_TEST(ucx_memory_types_reported)
{
    if (!have_daemon("ucx_memory_types_reported"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    if (ucx_unavailable(c, "ucx_memory_types_reported")) {
        tf_client_free(c);
        stop();
        return;
    }
    char *json = NULL;
    ck_assert_int_eq(tf_info(c, D.base, &json), TF_OK);
    ck_assert_msg(strstr(json, "\"memory_types\":[\"host\""), "%s", json);
    free(json);
    tf_client_free(c);
    c = client(TF_TRANSPORT_UCX);
    tf_transport_info_t ti = TF_TRANSPORT_INFO_INIT;
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    ck_assert_str_eq(ti.ucx_memory, "");        /* UCX has not started in this client */
    ck_assert_int_eq(tf_client_upgrade(c, D.base), TF_OK);
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    ck_assert_msg(strncmp(ti.ucx_memory, "host", 4) == 0, "ucx_memory '%s'", ti.ucx_memory);
    tf_client_free(c);
    stop();
}
END_TEST

START_TEST(ucx_callback_does_not_negotiate)
{
    if (!have_daemon("ucx_callback_does_not_negotiate"))
        return;
    start(NULL);
    chain_t ch = {.c = client(TF_TRANSPORT_AUTO)};
    /* Lazy, so that the first request does not negotiate and the callback's would have to. */
    ck_assert_int_eq(tf_client_set_upgrade_policy(ch.c, TF_UPGRADE_LAZY), TF_OK);
    tf_doc_t *d = f32_doc("cb", 3, 0);
    tf_request_t rq = {.op = TF_OP_PUT, .url = url("/v1/tensors/%s", "cb"), .in = d};
    ck_assert_int_eq(tf_fetch_start(ch.c, &rq, first_cb, &ch, NULL), TF_OK);
    ck_assert_int_eq(tf_client_run(ch.c, 10000), TF_OK);
    ck_assert_int_eq(ch.calls, 1);
    ck_assert_int_eq(ch.st, TF_OK);
    ck_assert_str_eq(ch.res.transport, "http");
    ck_assert_msg(strstr(ch.res.fallback, "inside a callback"), "fallback: %s",
                  ch.res.fallback);
    tf_fetch_free(ch.second);
    /* Outside, the next request negotiates. */
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_get(ch.c, url("/v1/tensors/%s", "cb"), 0, &got), TF_OK);
    assert_ucx_result(tf_client_last(ch.c));
    tf_doc_free(got);
    tf_doc_free(d);
    tf_client_free(ch.c);
    stop();
}
END_TEST

/* tfetchd --ucx off: auto falls back and says the server does not offer UCX; ucx fails. */
START_TEST(ucx_server_without_ucx)
{
    if (!have_daemon("ucx_server_without_ucx"))
        return;
    const char *args[] = {"--ucx", "off", NULL};
    start(args);
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    tf_doc_t *d = f32_doc("off", 4, 0), *got = NULL;
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "off"), d), TF_OK);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "off"), 0, &got), TF_OK);
        const tf_result_t *r = tf_client_last(c);
        ck_assert_str_eq(r->transport, "http");
        ck_assert_msg(strstr(r->fallback, "server does not offer UCX"), "fallback: %s",
                      r->fallback);
        tf_doc_free(got);
    }
    tf_transport_info_t ti = TF_TRANSPORT_INFO_INIT;
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    ck_assert_str_eq(ti.transport, "http");
    ck_assert_int_eq(ti.offered, 0);
    ck_assert_msg(strstr(ti.reason, "server"), "reason: %s", ti.reason);
    tf_client_free(c);

    /* Asking explicitly: refused, with the server's reason. */
    c = client(TF_TRANSPORT_AUTO);
    ck_assert_int_eq(tf_client_upgrade(c, D.base), TF_ECONNECT);
    ck_assert_msg(strstr(tf_client_last(c)->error, "--ucx off"), "%s", tf_client_last(c)->error);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "off"), 0, &got), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "http");
    ck_assert_msg(strstr(tf_client_last(c)->fallback, "--ucx off"), "%s",
                  tf_client_last(c)->fallback);
    tf_doc_free(got);
    tf_client_free(c);
    /* Strict: the negotiation is refused, with the server's reason, and nothing is sent. */
    c = client(TF_TRANSPORT_UCX);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "off"), 0, &got), TF_ECONNECT);
    const tf_result_t *r = tf_client_last(c);
    ck_assert_msg(strstr(r->error, "policy ucx") && strstr(r->error, "does not offer UCX") &&
                      strstr(r->error, "--ucx off"), "error: %s", r->error);
    /* Within the backoff it fails at once, with the same reason. */
    double t0 = now_s();
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "off"), d), TF_ECONNECT);
    ck_assert(now_s() - t0 < 0.5);
    ck_assert_msg(strstr(tf_client_last(c)->error, "--ucx off"), "error: %s",
                  tf_client_last(c)->error);
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    ck_assert_int_gt(ti.retry_ms, 0);
    ck_assert_int_le(ti.retry_ms, 1000);
    /* An asynchronous start fails the same way, and its callback never runs. */
    tf_request_t rq = {.op = TF_OP_GET, .url = url("/v1/tensors/%s", "off")};
    tf_fetch_t *f = NULL;
    ck_assert_int_eq(tf_fetch_start(c, &rq, NULL, NULL, &f), TF_ECONNECT);
    ck_assert_ptr_null(f);
    ck_assert_uint_eq(tf_client_pending(c), 0);
    /* list and info are HTTP's whatever the policy. */
    char *json = NULL;
    ck_assert_int_eq(tf_info(c, D.base, &json), TF_OK);
    ck_assert_msg(strstr(json, "--ucx off"), "%s", json);
    free(json);
    tf_client_free(c);
    tf_doc_free(d);
    stop();
}
END_TEST

static const char *cli(void)
{
    const char *p = getenv("TFETCH_CLI");
    return p ? p : "./cli/tfetch";
}

/* tfetch --transport and --stats. With no policy given the CLI upgrades a server on this
 * host before its first request (the library alone would send the first ones of a batch
 * over HTTP until the server's offer arrived), so every job of the batch goes over UCX. */
START_TEST(ucx_cli_transport)
{
    if (!have_daemon("ucx_cli_transport"))
        return;
    start(NULL);
    char in[64], cmd[4096], out[8192];
    float v[4] = {1, 2, 3, 4};
    snprintf(in, sizeof in, "%s", td_tmpfile(0, v, sizeof v));
    snprintf(cmd, sizeof cmd,
             "%s -q --stats put --dtype F32 --shape 4 %s %s %s %s %s %s 2>&1 >/dev/null", cli(),
             url("/v1/tensors/%s", "c1"), in, url("/v1/tensors/%s", "c2"), in,
             url("/v1/tensors/%s", "c3"), in);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    char *second = strstr(out, "\n{"), *third = second ? strstr(second + 1, "\n{") : NULL;
    ck_assert_msg(strncmp(out, "{\"op\":\"put\",\"transport\":\"ucx/", 29) == 0 &&
                      second && third && strstr(second, "\"transport\":\"ucx/") &&
                      strstr(third, "\"transport\":\"ucx/") &&
                      strstr(third, "\"fallback\":\"\""), "stats: %s", out);
    /* An explicit --transport auto negotiates before the first request. */
    snprintf(cmd, sizeof cmd, "%s --transport auto --stats get --raw %s 2>&1 >/dev/null",
             cli(), url("/v1/tensors/%s", "c3"));
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\"transport\":\"ucx/") && strstr(out, "\"fallback\":\"\""),
                  "stats: %s", out);
    snprintf(cmd, sizeof cmd, "TFETCH_TRANSPORT=auto %s --stats get --raw %s 2>&1 >/dev/null",
             cli(), url("/v1/tensors/%s", "c3"));
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\"transport\":\"ucx/"), "stats: %s", out);
    snprintf(cmd, sizeof cmd, "%s --transport ucx --stats rm %s 2>&1", cli(),
             url("/v1/tensors/%s", "c1"));
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\"transport\":\"ucx/"), "stats: %s", out);
    snprintf(cmd, sizeof cmd, "%s --transport http --stats rm %s 2>&1", cli(),
             url("/v1/tensors/%s", "c2"));
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\"transport\":\"http\"") && strstr(out, "\"fallback\":\"\""),
                  "stats: %s", out);
    snprintf(cmd, sizeof cmd, "%s --transport fast ls %s 2>&1", cli(), D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "--transport"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s --help", cli());
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "--transport POLICY"), "%s", out);
    stop();
    /* Strict against a server without UCX: exit status 5, saying why. */
    const char *args[] = {"--ucx", "off", NULL};
    start(args);
    snprintf(cmd, sizeof cmd, "%s --transport ucx get %s 2>&1 >/dev/null", cli(),
             url("/v1/tensors/%s", "x"));
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 5);
    ck_assert_msg(strstr(out, "does not offer UCX"), "%s", out);
    /* auto: HTTP, saying why */
    snprintf(cmd, sizeof cmd, "%s --transport auto --stats rm %s 2>&1 >/dev/null", cli(),
             url("/v1/tensors/%s", "x"));
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 2);
    ck_assert_msg(strstr(out, "\"transport\":\"http\"") &&
                      strstr(out, "\"fallback\":\"the server does not offer UCX"), "%s", out);
    stop();
}
END_TEST

/* ---- every operation over UCX ----------------------------------------------------------------- */

/* A client already upgraded to UCX on D. */
static tf_client_t *ucx_client(void)
{
    tf_client_t *c = client(TF_TRANSPORT_UCX);
    char *json = NULL;
    ck_assert_int_eq(tf_info(c, D.base, &json), TF_OK);
    free(json);
    return c;
}

static tf_doc_t *exchange(tf_client_t *c, const char *route, const tf_doc_t *in,
                          tf_status_t want)
{
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_fetch(c, url("/v1/call/%s", route), in, &got), want);
    assert_shm(tf_client_last(c)->transport);
    return got;
}

START_TEST(ucx_every_op)
{
    if (!have_daemon("ucx_every_op"))
        return;
    start(NULL);
    tf_client_t *c = ucx_client();
    tf_doc_t *d = f32_doc("w", 6, 1), *d2 = f32_doc("w", 6, 100), *got = NULL;
    ck_assert_int_eq(tf_doc_set_meta(d, "note", "over ucx"), TF_OK);
    /* put: 201 new, 204 replaced */
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "w"), d), TF_OK);
    assert_ucx_result(tf_client_last(c));
    ck_assert_int_eq(tf_client_last(c)->http_status, 201);
    ck_assert_str_eq(tf_client_last(c)->op, "put");
    ck_assert_uint_gt(tf_client_last(c)->bytes_sent, 24);
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "w"), d2), TF_OK);
    ck_assert_int_eq(tf_client_last(c)->http_status, 204);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "w"), 0, &got), TF_OK);
    ck_assert(docs_equal(got, d2));
    tf_doc_free(got);
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "w"), d), TF_OK);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "w"), 0, &got), TF_OK);
    ck_assert(docs_equal(got, d));
    ck_assert_str_eq(tf_doc_meta(got, "note"), "over ucx");
    tf_doc_free(got);
    got = NULL;
    /* what HTTP also sees */
    tf_client_t *h = client(TF_TRANSPORT_HTTP);
    ck_assert_int_eq(tf_get(h, url("/v1/tensors/%s", "w"), 0, &got), TF_OK);
    ck_assert(docs_equal(got, d));
    tf_doc_free(got);
    got = NULL;
    /* errors: the server's status, HTTP status and message */
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "nope"), 0, &got), TF_ENOTFOUND);
    ck_assert_ptr_null(got);
    ck_assert_int_eq(tf_client_last(c)->http_status, 404);
    ck_assert_msg(strstr(tf_client_last(c)->error, "nope"), "%s", tf_client_last(c)->error);
    assert_shm(tf_client_last(c)->transport);
    ck_assert_int_eq(tf_get(h, url("/v1/tensors/%s", "nope"), 0, &got), TF_ENOTFOUND);
    ck_assert_int_eq(tf_fetch(c, url("/v1/call/%s", "no-such-route"), d, &got), TF_ENOTFOUND);
    ck_assert_int_eq(tf_client_last(c)->http_status, 404);
    /* delete: 204, then 404 */
    ck_assert_int_eq(tf_delete(c, url("/v1/tensors/%s", "w")), TF_OK);
    ck_assert_int_eq(tf_client_last(c)->http_status, 204);
    assert_ucx_result(tf_client_last(c));
    ck_assert_int_eq(tf_delete(c, url("/v1/tensors/%s", "w")), TF_ENOTFOUND);
    ck_assert_int_eq(tf_get(h, url("/v1/tensors/%s", "w"), 0, &got), TF_ENOTFOUND);

    /* exchange: echo returns tensors and metadata */
    tf_doc_t *multi = tf_doc_new();
    int64_t s2[2] = {2, 3};
    int32_t iv[6] = {1, -2, 3, -4, 5, -6};
    uint8_t bv[1] = {7};
    ck_assert_int_eq(tf_doc_add(multi, "a", TF_I32, 2, s2, iv, sizeof iv, TF_BORROW), TF_OK);
    ck_assert_int_eq(tf_doc_add(multi, "b", TF_U8, 0, NULL, bv, 1, TF_BORROW), TF_OK);
    ck_assert_int_eq(tf_doc_set_meta(multi, "k", "v"), TF_OK);
    got = exchange(c, "echo", multi, TF_OK);
    ck_assert(docs_equal(got, multi));
    ck_assert_str_eq(tf_doc_meta(got, "k"), "v");
    ck_assert_str_eq(tf_client_last(c)->op, "call");
    ck_assert_int_eq(tf_client_last(c)->http_status, 200);
    tf_doc_free(got);

    /* accumulate: per user; the user id travels in the frame */
    tf_doc_t *one = f32_doc("acc", 3, 1);   /* 1 2 3 */
    ck_assert_int_eq(tf_client_set_user(c, "alice"), TF_OK);
    tf_doc_free(exchange(c, "accumulate", one, TF_OK));
    got = exchange(c, "accumulate", one, TF_OK);
    const float *sum = tf_doc_find(got, "acc")->data;
    ck_assert(sum[0] == 2 && sum[1] == 4 && sum[2] == 6);
    tf_doc_free(got);
    ck_assert_int_eq(tf_client_set_user(c, "bob"), TF_OK);
    got = exchange(c, "accumulate", one, TF_OK);
    sum = tf_doc_find(got, "acc")->data;
    ck_assert(sum[0] == 1 && sum[1] == 2 && sum[2] == 3);
    tf_doc_free(got);
    /* the same over HTTP: alice's state is alice's whichever transport carries her calls */
    ck_assert_int_eq(tf_client_set_user(h, "alice"), TF_OK);
    ck_assert_int_eq(tf_fetch(h, url("/v1/call/%s", "accumulate"), one, &got), TF_OK);
    sum = tf_doc_find(got, "acc")->data;
    ck_assert(sum[0] == 3 && sum[1] == 6 && sum[2] == 9);
    tf_doc_free(got);
    /* a retry with the same request id gets the first answer, and the route does not run */
    ck_assert_int_eq(tf_client_set_user(c, "alice"), TF_OK);
    ck_assert_int_eq(tf_client_set_request_id(c, "acc-replay-1"), TF_OK);
    got = exchange(c, "accumulate", one, TF_OK);
    ck_assert_str_eq(tf_client_last(c)->request_id, "acc-replay-1");
    sum = tf_doc_find(got, "acc")->data;
    ck_assert(sum[0] == 4 && sum[1] == 8 && sum[2] == 12);
    tf_doc_free(got);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(tf_client_set_request_id(c, "acc-replay-1"), TF_OK);
        got = exchange(c, "accumulate", one, TF_OK);
        sum = tf_doc_find(got, "acc")->data;
        ck_assert(sum[0] == 4 && sum[1] == 8 && sum[2] == 12);
        tf_doc_free(got);
    }
    /* ... also when the retry comes over HTTP (a fallback keeps the id) */
    ck_assert_int_eq(tf_client_set_request_id(h, "acc-replay-1"), TF_OK);
    ck_assert_int_eq(tf_fetch(h, url("/v1/call/%s", "accumulate"), one, &got), TF_OK);
    sum = tf_doc_find(got, "acc")->data;
    ck_assert(sum[0] == 4 && sum[1] == 8 && sum[2] == 12);
    tf_doc_free(got);
    got = exchange(c, "accumulate", one, TF_OK);     /* a new id runs it */
    sum = tf_doc_find(got, "acc")->data;
    ck_assert(sum[0] == 5 && sum[1] == 10 && sum[2] == 15);
    tf_doc_free(got);
    /* a name sent again with another shape: 422, sums unchanged */
    tf_doc_t *bad = f32_doc("acc", 2, 1);
    got = exchange(c, "accumulate", bad, TF_EUNPROC);
    ck_assert_ptr_null(got);
    ck_assert_int_eq(tf_client_last(c)->http_status, 422);
    ck_assert_msg(tf_client_last(c)->error[0], "no message");
    tf_doc_free(bad);
    /* the response cap applies over UCX too */
    tf_client_set_max_body(c, 16);
    ck_assert_int_eq(tf_fetch(c, url("/v1/call/%s", "echo"), multi, &got), TF_ETOOBIG);
    ck_assert_ptr_null(got);
    tf_client_set_max_body(c, 0);

    tf_doc_free(one);
    tf_doc_free(multi);
    tf_doc_free(d);
    tf_doc_free(d2);
    tf_client_free(h);
    tf_client_free(c);
    stop();
}
END_TEST

typedef struct {
    int calls;
    tf_status_t st;
    tf_doc_t *doc;
    tf_result_t res;
} rec_t;

static void rec_cb(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r, void *ud)
{
    rec_t *x = ud;
    (void)f;
    x->calls++;
    x->st = st;
    x->res = *r;
    tf_doc_free(x->doc);
    x->doc = doc;
}

/* Long-polls, cancel and free with UCX requests in flight. */
START_TEST(ucx_long_poll_cancel_free)
{
    if (!have_daemon("ucx_long_poll_cancel_free"))
        return;
    start(NULL);
    tf_client_t *c = ucx_client();
    tf_doc_t *d = f32_doc("later", 4, 3);
    /* A GET that waits for the tensor, completed by a PUT on the same connection. */
    rec_t g = {0}, p = {0};
    tf_request_t rg = {.op = TF_OP_GET, .url = url("/v1/tensors/%s", "later"), .wait_ms = 5000};
    ck_assert_int_eq(tf_fetch_start(c, &rg, rec_cb, &g, NULL), TF_OK);
    ck_assert_uint_eq(tf_client_pending(c), 1);
    ck_assert_int_eq(tf_client_run(c, 200), TF_EAGAIN);
    ck_assert_int_eq(g.calls, 0);
    tf_request_t rp = {.op = TF_OP_PUT, .url = url("/v1/tensors/%s", "later"), .in = d};
    ck_assert_int_eq(tf_fetch_start(c, &rp, rec_cb, &p, NULL), TF_OK);
    ck_assert_uint_eq(tf_client_pending(c), 2);
    double t0 = now_s();
    ck_assert_int_eq(tf_client_run(c, 10000), TF_OK);
    ck_assert(now_s() - t0 < 3.0);
    ck_assert_int_eq(p.calls, 1);
    ck_assert_int_eq(p.st, TF_OK);
    ck_assert_int_eq(g.calls, 1);
    ck_assert_int_eq(g.st, TF_OK);
    assert_ucx_result(&g.res);
    ck_assert(docs_equal(g.doc, d));
    tf_doc_free(g.doc);
    /* A long poll that runs out: 404. */
    rg.url = url("/v1/tensors/%s", "never");
    rg.wait_ms = 300;
    memset(&g, 0, sizeof g);
    ck_assert_int_eq(tf_fetch_start(c, &rg, rec_cb, &g, NULL), TF_OK);
    ck_assert_int_eq(tf_client_run(c, 10000), TF_OK);
    ck_assert_int_eq(g.st, TF_ENOTFOUND);
    ck_assert_int_eq(g.res.http_status, 404);
    assert_shm(g.res.transport);

    /* Cancel: the callback runs, with TF_ECANCELED, once UCX hands the request back. */
    rg.wait_ms = 800;
    memset(&g, 0, sizeof g);
    tf_fetch_t *f = NULL;
    ck_assert_int_eq(tf_fetch_start(c, &rg, rec_cb, &g, &f), TF_OK);
    ck_assert_int_eq(tf_fetch_cancel(f), TF_OK);
    ck_assert_int_eq(g.calls, 0);
    ck_assert_int_eq(tf_fetch_test(f), TF_EAGAIN);
    ck_assert_int_eq(tf_fetch_wait(f, 10000), TF_ECANCELED);
    ck_assert_int_eq(g.calls, 1);
    ck_assert_int_eq(g.st, TF_ECANCELED);
    ck_assert_ptr_null(g.doc);
    ck_assert_int_eq(tf_fetch_cancel(f), TF_OK);    /* after completion: harmless */
    ck_assert_int_eq(g.calls, 1);
    tf_fetch_free(f);
    /* Freeing a handle in flight cancels it; the callback still runs exactly once. */
    memset(&g, 0, sizeof g);
    ck_assert_int_eq(tf_fetch_start(c, &rg, rec_cb, &g, &f), TF_OK);
    tf_fetch_free(f);
    ck_assert_int_eq(tf_client_run(c, 10000), TF_OK);
    ck_assert_int_eq(g.calls, 1);
    ck_assert_int_eq(g.st, TF_ECANCELED);

    /* Freeing the client with UCX requests pending: their callbacks run (canceled), soon. */
    rg.wait_ms = 20000;
    memset(&g, 0, sizeof g);
    rec_t held = {0};
    ck_assert_int_eq(tf_fetch_start(c, &rg, rec_cb, &g, NULL), TF_OK);
    ck_assert_int_eq(tf_fetch_start(c, &rg, rec_cb, &held, &f), TF_OK);
    ck_assert_int_eq(tf_client_run(c, 100), TF_EAGAIN);
    t0 = now_s();
    tf_client_free(c);
    ck_assert_msg(now_s() - t0 < 3.0, "tf_client_free took %.3f s", now_s() - t0);
    ck_assert_int_eq(g.calls, 1);
    ck_assert_int_eq(g.st, TF_ECANCELED);
    ck_assert_int_eq(held.calls, 1);
    ck_assert_int_eq(tf_fetch_result(f)->status, TF_ECANCELED);
    ck_assert_int_eq(tf_fetch_test(f), TF_ECANCELED);
    tf_fetch_free(f);
    tf_doc_free(d);
    stop();
}
END_TEST

START_TEST(ucx_every_dtype_round_trips)
{
    if (!have_daemon("ucx_every_dtype_round_trips"))
        return;
    start(NULL);
    tf_client_t *c = ucx_client();
    static const tf_dtype_t all[] = {TF_F64, TF_F32, TF_F16, TF_BF16, TF_F8_E4M3, TF_F8_E5M2,
                                     TF_I64, TF_I32, TF_I16, TF_I8, TF_U64, TF_U32, TF_U16,
                                     TF_U8, TF_BOOL};
    tf_doc_t *every = tf_doc_new();
    uint8_t buf[16][7 * 5 * 8];
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
        tf_dtype_t dt = all[k];
        size_t es = tf_dtype_size(dt);
        int64_t shape[2] = {7, 5};
        for (size_t i = 0; i < sizeof buf[k]; i++)
            buf[k][i] = dt == TF_BOOL ? (uint8_t)(i % 2) : (uint8_t)(i * 31 + k);
        tf_doc_t *one = tf_doc_new();
        ck_assert_int_eq(tf_doc_add(one, tf_dtype_name(dt), dt, 2, shape, buf[k], 35 * es,
                                    TF_BORROW), TF_OK);
        ck_assert_int_eq(tf_doc_add(every, tf_dtype_name(dt), dt, 2, shape, buf[k], 35 * es,
                                    TF_BORROW), TF_OK);
        ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", tf_dtype_name(dt)), one), TF_OK);
        assert_ucx_result(tf_client_last(c));
        tf_doc_t *got = NULL;
        ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", tf_dtype_name(dt)), 0, &got), TF_OK);
        ck_assert_msg(docs_equal(got, one), "%s", tf_dtype_name(dt));
        tf_doc_free(got);
        tf_doc_free(one);
    }
    /* scalars, empty tensors and many tensors in one document */
    double scalar = 2.5;
    int64_t zero[3] = {4, 0, 2};
    ck_assert_int_eq(tf_doc_add(every, "scalar", TF_F64, 0, NULL, &scalar, 8, TF_BORROW), TF_OK);
    ck_assert_int_eq(tf_doc_add(every, "empty", TF_F32, 3, zero, NULL, 0, TF_BORROW), TF_OK);
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "every"), every), TF_OK);
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "every"), 0, &got), TF_OK);
    ck_assert(docs_equal(got, every));
    tf_doc_free(got);
    got = exchange(c, "echo", every, TF_OK);
    ck_assert(docs_equal(got, every));
    tf_doc_free(got);
    tf_doc_free(every);
    tf_client_free(c);
    stop();
}
END_TEST

#define BIG_BYTES (256u << 20)

/* A 256 MiB tensor there and back over UCX, checked word for word. */
START_TEST(ucx_big_tensor)
{
    if (!have_daemon("ucx_big_tensor"))
        return;
    const char *args[] = {"--max-body", "1073741824", NULL};
    start(args);
    tf_client_t *c = ucx_client();
    uint64_t *v = malloc(BIG_BYTES);
    ck_assert_ptr_nonnull(v);
    size_t n = BIG_BYTES / 8;
    for (size_t i = 0; i < n; i++)
        v[i] = i * 0x9e3779b97f4a7c15ull;
    int64_t shape[1] = {(int64_t)n};
    tf_doc_t *d = tf_doc_new(), *got = NULL;
    ck_assert_int_eq(tf_doc_add(d, "big", TF_U64, 1, shape, v, BIG_BYTES, TF_BORROW), TF_OK);
    double t0 = now_s();
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "big"), d), TF_OK);
    double put_s = now_s() - t0;
    assert_ucx_result(tf_client_last(c));
    ck_assert_uint_ge(tf_client_last(c)->bytes_sent, BIG_BYTES);
    t0 = now_s();
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "big"), 0, &got), TF_OK);
    double get_s = now_s() - t0;
    assert_ucx_result(tf_client_last(c));
    ck_assert_uint_ge(tf_client_last(c)->bytes_received, BIG_BYTES);
    const tf_tensor_t *t = tf_doc_find(got, "big");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->nbytes, BIG_BYTES);
    const uint64_t *w = t->data;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += w[i] != i * 0x9e3779b97f4a7c15ull;
    ck_assert_uint_eq(bad, 0);
    fprintf(stderr, "ucx_big_tensor: 256 MiB over %s: put %.3f s (%.2f GB/s), get %.3f s "
            "(%.2f GB/s)\n", tf_client_last(c)->transport, put_s, BIG_BYTES / put_s / 1e9,
            get_s, BIG_BYTES / get_s / 1e9);
    tf_doc_free(got);
    ck_assert_int_eq(tf_delete(c, url("/v1/tensors/%s", "big")), TF_OK);
    tf_doc_free(d);
    free(v);
    tf_client_free(c);
    stop();
}
END_TEST

/* What a progress function saw: reports with some but not all of a body across, and whether
 * the counts ever went back. */
typedef struct {
    int calls, mid_up, mid_down, backwards;
    uint64_t up, down, up_total, down_total;
} seen_t;

static int seen_progress(uint64_t dn, uint64_t dt, uint64_t un, uint64_t ut, void *ud)
{
    seen_t *s = ud;
    s->calls++;
    if ((ut == s->up_total && un < s->up) || (dt == s->down_total && dn < s->down))
        s->backwards++;
    s->mid_up += un > 0 && un < ut;
    s->mid_down += dn > 0 && dn < dt;
    s->up = un;
    s->up_total = ut;
    s->down = dn;
    s->down_total = dt;
    return 0;
}

/* A client with a progress function gets its large bodies moved in parts over UCX (doc
 * "Bodies in parts"), so the function sees them on the way, both ways, for a put, a get and
 * an exchange; parts cut across the document's pieces (header, three tensors) land intact.
 * The same client without the function moves them in one piece, and they land intact too. */
START_TEST(ucx_parts_progress)
{
    if (!have_daemon("ucx_parts_progress"))
        return;
    start(NULL);
    tf_client_t *c = ucx_client();
    seen_t s = {0};
    tf_client_set_progress(c, seen_progress, &s);
    size_t sizes[3] = {10u << 20, 20u << 20, (10u << 20) + 3};
    uint8_t *v[3];
    tf_doc_t *d = tf_doc_new(), *got = NULL;
    for (int k = 0; k < 3; k++) {
        ck_assert_ptr_nonnull(v[k] = malloc(sizes[k]));
        for (size_t i = 0; i < sizes[k]; i++)
            v[k][i] = (uint8_t)(i * 13u + (unsigned)k);
        int64_t shape[1] = {(int64_t)sizes[k]};
        char name[8];
        snprintf(name, sizeof name, "t%d", k);
        ck_assert_int_eq(tf_doc_add(d, name, TF_U8, 1, shape, v[k], sizes[k], TF_BORROW),
                         TF_OK);
    }
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "parts"), d), TF_OK);
    assert_ucx_result(tf_client_last(c));
    ck_assert_msg(s.mid_up >= 1 && s.backwards == 0, "put: %d reports midway, %d back",
                  s.mid_up, s.backwards);
    ck_assert_uint_eq(s.up, s.up_total);
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "parts"), 0, &got), TF_OK);
    assert_ucx_result(tf_client_last(c));
    ck_assert_msg(s.mid_down >= 1 && s.backwards == 0, "get: %d reports midway, %d back",
                  s.mid_down, s.backwards);
    ck_assert_int_eq(docs_equal(d, got), 1);
    tf_doc_free(got);
    got = NULL;
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(tf_fetch(c, url("/v1/call/%s", "echo"), d, &got), TF_OK);
    assert_ucx_result(tf_client_last(c));
    ck_assert_msg(s.mid_up >= 1 && s.mid_down >= 1, "exchange: %d up and %d down midway",
                  s.mid_up, s.mid_down);
    ck_assert_int_eq(docs_equal(d, got), 1);
    tf_doc_free(got);
    got = NULL;
    /* no progress function: one piece each way, the same bytes */
    tf_client_set_progress(c, NULL, NULL);
    v[1][5] ^= 0xff;
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "parts"), d), TF_OK);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "parts"), 0, &got), TF_OK);
    assert_ucx_result(tf_client_last(c));
    ck_assert_int_eq(docs_equal(d, got), 1);
    tf_doc_free(got);
    tf_doc_free(d);
    for (int k = 0; k < 3; k++)
        free(v[k]);
    tf_client_free(c);
    stop();
}
END_TEST

/* A document built in one buffer (tf_doc_new_packed) goes over UCX in one piece, by
 * rendezvous straight from that buffer: it arrives intact, and the buffer, rewritten, goes
 * again with its new bytes (the same buffer reused, as a producer does). */
START_TEST(ucx_packed_doc_put)
{
    if (!have_daemon("ucx_packed_doc_put"))
        return;
    const char *args[] = {"--max-body", "1073741824", NULL};
    start(args);
    tf_client_t *c = ucx_client();
    size_t n = (64u << 20) / 8;
    int64_t shape[1] = {(int64_t)n};
    tf_tensor_spec_t spec = {"v", TF_U64, 1, shape};
    tf_doc_t *d = NULL, *got = NULL;
    ck_assert_int_eq(tf_doc_new_packed(&spec, 1, &d), TF_OK);
    uint64_t *v = tf_doc_writable(d, 0);
    ck_assert_ptr_nonnull(v);
    const char *names[2] = {"packed0", "packed1"};
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < n; i++)
            v[i] = i * 0x9e3779b97f4a7c15ull + (uint64_t)round;
        ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", names[round]), d), TF_OK);
        assert_ucx_result(tf_client_last(c));
        ck_assert_uint_ge(tf_client_last(c)->bytes_sent, n * 8);
    }
    for (int round = 0; round < 2; round++) {
        ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", names[round]), 0, &got), TF_OK);
        const tf_tensor_t *t = tf_doc_find(got, "v");
        ck_assert_ptr_nonnull(t);
        ck_assert_uint_eq(t->nbytes, n * 8);
        const uint64_t *w = t->data;
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += w[i] != i * 0x9e3779b97f4a7c15ull + (uint64_t)round;
        ck_assert_uint_eq(bad, 0);
        tf_doc_free(got);
    }
    /* small ones go eagerly, in one piece too */
    tf_doc_free(d);
    int64_t s3[1] = {3};
    tf_tensor_spec_t small = {"s", TF_I32, 1, s3};
    ck_assert_int_eq(tf_doc_new_packed(&small, 1, &d), TF_OK);
    int32_t *sv = tf_doc_writable(d, 0);
    sv[0] = 7;
    sv[1] = -8;
    sv[2] = 9;
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "small"), d), TF_OK);
    assert_ucx_result(tf_client_last(c));
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "small"), 0, &got), TF_OK);
    ck_assert_mem_eq(tf_doc_find(got, "s")->data, sv, 12);
    tf_doc_free(got);
    tf_doc_free(d);
    tf_client_free(c);
    stop();
}
END_TEST

/* A document of borrowed tensors (its header and the tensors' bytes lie apart) whose last
 * tensor is large and whose header and other tensors fit TFP_UF_MAX_PREFIX goes as one
 * contiguous piece after those first bytes (BODY_PREFIX: the server offered it in its
 * HELLO_ACK), for PUT and exchange alike, and arrives intact; any other shape goes in pieces
 * as before. tfetch_ucx_body_prefix_total counts the first kind only. */
static void put_and_check(tf_client_t *c, const char *name, tf_doc_t *d, long long want_more)
{
    long long before = td_metric(&D, "tfetch_ucx_body_prefix_total");
    ck_assert_int_ge(before, 0);
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", name), d), TF_OK);
    assert_ucx_result(tf_client_last(c));
    ck_assert_int_eq(td_metric(&D, "tfetch_ucx_body_prefix_total"), before + want_more);
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", name), 0, &got), TF_OK);
    ck_assert_uint_eq(tf_doc_count(got), tf_doc_count(d));
    for (size_t i = 0; i < tf_doc_count(d); i++) {
        const tf_tensor_t *a = tf_doc_at(d, i), *b = tf_doc_find(got, a->name);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_eq(a->nbytes, b->nbytes);
        ck_assert_mem_eq(a->data, b->data, a->nbytes);
    }
    tf_doc_free(got);
}

START_TEST(ucx_borrowed_doc_prefixed)
{
    if (!have_daemon("ucx_borrowed_doc_prefixed"))
        return;
    const char *args[] = {"--max-body", "1073741824", NULL};
    start(args);
    tf_client_t *c = ucx_client();
    size_t big = 4u << 20;
    uint8_t *v = malloc(big), *small = malloc(4096);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(small);
    for (size_t i = 0; i < big; i++)
        v[i] = (uint8_t)(i * 131 + (i >> 13));
    for (size_t i = 0; i < 4096; i++)
        small[i] = (uint8_t)(255 - i);
    /* one tensor: the header, then its bytes */
    int64_t sbig[1] = {(int64_t)big}, s12[1] = {12}, s4k[1] = {4096}, s8[1] = {8};
    tf_doc_t *d = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(d, "v", TF_U8, 1, sbig, v, big, TF_BORROW), TF_OK);
    ck_assert_int_eq(tf_doc_set_meta(d, "k", "meta"), TF_OK);
    put_and_check(c, "one", d, 1);
    tf_doc_free(d);
    /* small tensors first, the large one last */
    d = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(d, "a", TF_U8, 1, s12, small, 12, TF_BORROW), TF_OK);
    ck_assert_int_eq(tf_doc_add(d, "b", TF_U8, 1, s8, small + 100, 8, TF_COPY), TF_OK);
    ck_assert_int_eq(tf_doc_add(d, "v", TF_U8, 1, sbig, v, big, TF_BORROW), TF_OK);
    put_and_check(c, "three", d, 1);
    tf_doc_free(d);
    /* more than TFP_UF_MAX_PREFIX before the last: in pieces */
    d = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(d, "a", TF_U8, 1, s4k, small, 4096, TF_BORROW), TF_OK);
    ck_assert_int_eq(tf_doc_add(d, "v", TF_U8, 1, sbig, v, big, TF_BORROW), TF_OK);
    put_and_check(c, "pieces", d, 0);
    tf_doc_free(d);
    /* the large one first: in pieces */
    d = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(d, "v", TF_U8, 1, sbig, v, big, TF_BORROW), TF_OK);
    ck_assert_int_eq(tf_doc_add(d, "a", TF_U8, 1, s12, small, 12, TF_BORROW), TF_OK);
    put_and_check(c, "last-small", d, 0);
    tf_doc_free(d);
    /* a small body goes eagerly, as it was */
    d = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(d, "a", TF_U8, 1, s12, small, 12, TF_BORROW), TF_OK);
    put_and_check(c, "tiny", d, 0);
    /* an exchange: the request prefixed, the echo the same bytes */
    tf_doc_free(d);
    d = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(d, "v", TF_U8, 1, sbig, v, big, TF_BORROW), TF_OK);
    long long before = td_metric(&D, "tfetch_ucx_body_prefix_total");
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_fetch(c, url("/v1/call/%s", "echo"), d, &got), TF_OK);
    assert_ucx_result(tf_client_last(c));
    ck_assert_int_eq(td_metric(&D, "tfetch_ucx_body_prefix_total"), before + 1);
    ck_assert_uint_eq(tf_doc_find(got, "v")->nbytes, big);
    ck_assert_mem_eq(tf_doc_find(got, "v")->data, v, big);
    tf_doc_free(got);
    tf_doc_free(d);
    free(v);
    free(small);
    tf_client_free(c);
    stop();
    /* A prefixed call the daemon has no body memory for: refused (503) when the receive
     * would start, its prefix already taken (it goes with the request), and again. */
    const char *tight[] = {"--body-memory", "65536", NULL};
    start(tight);
    c = ucx_client();
    size_t mid = 1u << 20;
    v = calloc(1, mid);
    ck_assert_ptr_nonnull(v);
    int64_t smid[1] = {(int64_t)mid};
    d = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(d, "v", TF_U8, 1, smid, v, mid, TF_BORROW), TF_OK);
    got = NULL;
    for (int i = 0; i < 3; i++) {
        tf_status_t st = tf_fetch(c, url("/v1/call/%s", "echo"), d, &got);
        ck_assert_msg(st == TF_EBUSY, "%s: %s", tf_err_name(st), tf_client_last(c)->error);
        assert_ucx_result(tf_client_last(c));
    }
    ck_assert_int_ge(td_metric(&D, "tfetch_ucx_body_prefix_total"), 3);
    tf_doc_free(d);
    free(v);
    tf_client_free(c);
    stop();
}
END_TEST

/* A large reply over UCX lands in reused memory: once its document is freed the buffer stays
 * mapped and faulted in (libtfetch keeps it for the next reply of that size), and the next
 * GET of the size lands in it, with the new bytes. Without the cache each reply was fresh
 * memory (unmapped at tf_doc_free), and the copy into it paid first touch. */
#define REUSE_BYTES (8u << 20)

static void fill_reuse(uint32_t *v, uint32_t salt)
{
    for (size_t i = 0; i < REUSE_BYTES / 4; i++)
        v[i] = (uint32_t)i * 2654435761u ^ salt;
}

static int pages_resident(const void *data, size_t len)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)data & ~(uintptr_t)(pg - 1);
    size_t n = ((uintptr_t)data + len - a + (size_t)pg - 1) / (size_t)pg;
    unsigned char *vec = malloc(n);
    ck_assert_ptr_nonnull(vec);
    int rc = mincore((void *)a, n * (size_t)pg, vec);     /* -1 ENOMEM: not mapped */
    size_t in = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        in += vec[i] & 1;
    free(vec);
    return rc == 0 && in == n;
}

START_TEST(ucx_reply_buffers_reused)
{
    if (!have_daemon("ucx_reply_buffers_reused"))
        return;
    start(NULL);
    tf_client_t *c = ucx_client();
    uint32_t *v = malloc(REUSE_BYTES);
    ck_assert_ptr_nonnull(v);
    int64_t shape[1] = {REUSE_BYTES / 4};
    const void *first = NULL;
    for (uint32_t round = 0; round < 3; round++) {
        fill_reuse(v, round * 0x01010101u);
        tf_doc_t *d = tf_doc_new(), *got = NULL;
        ck_assert_int_eq(tf_doc_add(d, "r", TF_U32, 1, shape, v, REUSE_BYTES, TF_BORROW), TF_OK);
        ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "reuse"), d), TF_OK);
        ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "reuse"), 0, &got), TF_OK);
        assert_ucx_result(tf_client_last(c));
        const tf_tensor_t *t = tf_doc_find(got, "r");
        ck_assert_ptr_nonnull(t);
        ck_assert_uint_eq(t->nbytes, REUSE_BYTES);
        ck_assert_msg(memcmp(t->data, v, REUSE_BYTES) == 0, "round %u: stale or wrong bytes",
                      round);
        if (round == 0)
            first = t->data;
        else
            ck_assert_ptr_eq(t->data, first);      /* the same memory, with the new bytes */
        tf_doc_free(got);
        ck_assert_msg(pages_resident(first, REUSE_BYTES),
                      "round %u: a freed reply buffer was unmapped, not kept for reuse", round);
        tf_doc_free(d);
    }
    /* Held, it is not handed out twice: a second reply while the first is alive goes
     * elsewhere, and both are intact. */
    tf_doc_t *a = NULL, *b = NULL;
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "reuse"), 0, &a), TF_OK);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "reuse"), 0, &b), TF_OK);
    ck_assert_ptr_ne(tf_doc_find(a, "r")->data, tf_doc_find(b, "r")->data);
    ck_assert_int_eq(memcmp(tf_doc_find(a, "r")->data, v, REUSE_BYTES), 0);
    ck_assert_int_eq(memcmp(tf_doc_find(b, "r")->data, v, REUSE_BYTES), 0);
    tf_doc_free(a);
    tf_doc_free(b);
    free(v);
    tf_client_free(c);
    stop();
}
END_TEST

#define IN_FLIGHT 1000

typedef struct {
    int calls, ok, ucx;
    int match[IN_FLIGHT];
} many_t;

typedef struct {
    many_t *m;
    int i;
} slot_t;

static void many_cb(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                    void *ud)
{
    slot_t *s = ud;
    (void)f;
    s->m->calls++;
    if (st == TF_OK) {
        s->m->ok++;
        const tf_tensor_t *t = tf_doc_find(doc, "x");
        const float *v = t ? t->data : NULL;
        s->m->match[s->i] = v && t->nbytes == 16 && v[0] == (float)s->i &&
                            v[3] == (float)s->i + 3;
    }
    if (strncmp(r->transport, "ucx/", 4) == 0)
        s->m->ucx++;
    tf_doc_free(doc);
}

/* IN_FLIGHT echo exchanges started at once on c, run to completion; returns the seconds. */
static double thousand(tf_client_t *c, many_t *m, slot_t *slots, tf_doc_t **docs)
{
    memset(m, 0, sizeof *m);
    double t0 = now_s();
    for (int i = 0; i < IN_FLIGHT; i++) {
        slots[i] = (slot_t){m, i};
        tf_request_t rq = {.op = TF_OP_EXCHANGE, .url = url("/v1/call/%s", "echo"),
                           .in = docs[i]};
        ck_assert_int_eq(tf_fetch_start(c, &rq, many_cb, &slots[i], NULL), TF_OK);
    }
    ck_assert_uint_le(tf_client_pending(c), IN_FLIGHT);
    ck_assert_int_eq(tf_client_run(c, 120000), TF_OK);
    double s = now_s() - t0;
    ck_assert_int_eq(m->calls, IN_FLIGHT);
    ck_assert_int_eq(m->ok, IN_FLIGHT);
    for (int i = 0; i < IN_FLIGHT; i++)
        ck_assert_msg(m->match[i], "exchange %d came back wrong", i);
    return s;
}

START_TEST(ucx_thousand_in_flight)
{
    if (!have_daemon("ucx_thousand_in_flight"))
        return;
    start(NULL);
    static many_t m;
    static slot_t slots[IN_FLIGHT];
    static tf_doc_t *docs[IN_FLIGHT];
    for (int i = 0; i < IN_FLIGHT; i++)
        docs[i] = f32_doc("x", 4, (float)i);
    tf_client_t *c = ucx_client();
    ck_assert_int_eq(tf_client_set_user(c, "many"), TF_OK);
    double s_ucx = thousand(c, &m, slots, docs);
    ck_assert_int_eq(m.ucx, IN_FLIGHT);
    tf_client_free(c);
    /* the same over HTTP, for the figure */
    c = client(TF_TRANSPORT_HTTP);
    double s_http = thousand(c, &m, slots, docs);
    ck_assert_int_eq(m.ucx, 0);
    tf_client_free(c);
    fprintf(stderr, "ucx_thousand_in_flight: %d exchanges started at once: UCX %.3f s "
            "(%.0f/s), HTTP %.3f s (%.0f/s)\n", IN_FLIGHT, s_ucx, IN_FLIGHT / s_ucx, s_http,
            IN_FLIGHT / s_http);
    for (int i = 0; i < IN_FLIGHT; i++)
        tf_doc_free(docs[i]);
    stop();
}
END_TEST

/* ---- admission: tokens -------------------------------------------------------------------- */

static void hc_done(tfx_hc_req_t *req, tfx_hc_status_t st, void *ud)
{
    (void)req;
    *(tfx_hc_status_t *)ud = st;
}

/* POST /v1/upgrade claiming identity h; the server's offer into *resp. */
static void post_upgrade(const tfp_up_host_t *h, tfp_up_resp_t *resp)
{
    tfp_up_req_t q = {.transports = TFP_UP_T_UCX, .host = *h, .policy = TFP_UP_POLICY_UCX};
    char *json = NULL, u[256];
    size_t len = 0;
    tfp_err_t err;
    ck_assert_int_eq(tfp_up_req_build(&q, &json, &len, &err), TFP_OK);
    tfx_hc_t *hc = NULL;
    tfx_hc_req_t *req = NULL;
    ck_assert_int_eq(tfx_hc_new(&hc), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_new(&req), TFX_HC_OK);
    snprintf(u, sizeof u, "%s/v1/upgrade", D.base);
    ck_assert_int_eq(tfx_hc_req_set_method(req, "POST"), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_set_url(req, u), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_add_header(req, "Content-Type", "application/json"), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_add_body(req, json, len), TFX_HC_OK);
    tfx_hc_req_set_timeout(req, 10000);
    tfx_hc_status_t st = TFX_HC_EAGAIN;
    ck_assert_int_eq(tfx_hc_start(hc, req, hc_done, &st), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_drive(hc, req, -1), TFX_HC_OK);
    ck_assert_int_eq(st, TFX_HC_OK);
    const tfx_hc_resp_t *r = tfx_hc_req_response(req);
    ck_assert_int_eq(r->status, 200);
    ck_assert_str_eq(tfx_hc_resp_header(r, "Tfetch-Upgrade"), "ucx");
    memset(resp, 0, sizeof *resp);
    ck_assert_int_eq(tfp_up_resp_parse((const char *)r->body, r->body_len, resp, &err), TFP_OK);
    ck_assert_int_eq(resp->upgraded, 1);
    tfx_hc_req_free(req);
    tfx_hc_free(hc);
    free(json);
}

/* Connects with token and the identity of h; TFP_OK or the refusal, its reason in why. */
static tfp_status_t try_hello(tfx_ucxc_t *u, const tfp_up_resp_t *resp, const char *token,
                              const tfp_up_host_t *h, char *why, size_t why_size)
{
    char ident[TFP_UP_MAX_IDENT + 1];
    tfp_err_t err;
    ck_assert_int_eq(tfp_up_ident_format(h, ident, sizeof ident, &err), TFP_OK);
    tfx_ucxc_conn_t *conn = NULL;
    why[0] = '\0';
    tfp_status_t st = tfx_ucxc_connect(u, resp->worker_address, resp->worker_address_len,
                                       resp->same_host, token, ident, 5000, &conn, why,
                                       why_size);
    if (st == TFP_OK) {
        ck_assert_ptr_nonnull(conn);
        tfx_ucxc_conn_close(conn);
    }
    return st;
}

START_TEST(ucx_hello_tokens)
{
    if (!have_daemon("ucx_hello_tokens"))
        return;
    const char *args[] = {"--upgrade-token-ttl", "200", NULL};
    start(args);
    tfp_up_host_t me, other;
    tfp_err_t err;
    ck_assert_int_eq(tfx_hostid_get(&me, &err), TFP_OK);
    other = me;
    other.boot_id[0] = other.boot_id[0] == 'a' ? 'b' : 'a';     /* another host */
    tfx_ucxc_t *u = tfx_ucxc_new(NULL, NULL, &err);
    ck_assert_msg(u != NULL, "UCX: %s", err.msg);
    tfp_up_resp_t resp;
    char why[256];

    /* a real token, used once: accepted; used again: refused */
    post_upgrade(&me, &resp);
    ck_assert_int_eq(resp.same_host, 1);
    ck_assert_int_eq(resp.expires_ms, 200);
    ck_assert_int_eq(try_hello(u, &resp, resp.token, &me, why, sizeof why), TFP_OK);
    ck_assert_int_ne(try_hello(u, &resp, resp.token, &me, why, sizeof why), TFP_OK);
    ck_assert_msg(strstr(why, "refused") && strstr(why, "already used"), "reused: %s", why);
    tfp_up_resp_clear(&resp);
    /* expired: past --upgrade-token-ttl */
    post_upgrade(&me, &resp);
    sleep_ms(400);
    ck_assert_int_ne(try_hello(u, &resp, resp.token, &me, why, sizeof why), TFP_OK);
    ck_assert_msg(strstr(why, "refused") && strstr(why, "expired"), "expired: %s", why);
    tfp_up_resp_clear(&resp);
    /* another peer presenting my token */
    post_upgrade(&me, &resp);
    ck_assert_int_ne(try_hello(u, &resp, resp.token, &other, why, sizeof why), TFP_OK);
    ck_assert_msg(strstr(why, "refused") && strstr(why, "another peer"), "foreign: %s", why);
    tfp_up_resp_clear(&resp);
    /* a token the server never issued */
    post_upgrade(&me, &resp);
    ck_assert_int_ne(try_hello(u, &resp, "0123456789abcdef0123456789abcdef", &me, why,
                               sizeof why), TFP_OK);
    ck_assert_msg(strstr(why, "refused") && strstr(why, "unknown"), "wrong: %s", why);
    /* no token at all: not even sent (the frame requires one; see ucx_raw_frames for the
     * server's side) */
    ck_assert_int_ne(try_hello(u, &resp, "", &me, why, sizeof why), TFP_OK);
    ck_assert_msg(why[0], "missing: no reason");
    tfp_up_resp_clear(&resp);
    tfx_ucxc_free(u);
    /* The daemon logged each refusal. */
    ck_assert_int_eq(count_in_file(D.log_path, "HELLO refused"), 4);
    ck_assert_int_eq(count_in_file(D.log_path, "another peer"), 1);
    stop();
}
END_TEST

static void flag_wake(void *arg) { atomic_store((atomic_int *)arg, 1); }

/* A UCX client of the transport itself (no libtfetch), upgraded and connected to the daemon
 * as libtfetch would be; its wake-ups set *woken. */
static tfx_ucxc_t *transport_connect(atomic_int *woken, tfp_up_resp_t *resp,
                                     tfx_ucxc_conn_t **conn)
{
    tfp_err_t err;
    tfx_ucxc_t *u = tfx_ucxc_new(flag_wake, woken, &err);
    ck_assert_msg(u != NULL, "UCX: %s", err.msg);
    tfp_up_host_t me;
    ck_assert_int_eq(tfx_hostid_get(&me, &err), TFP_OK);
    post_upgrade(&me, resp);
    char ident[TFP_UP_MAX_IDENT + 1], why[256];
    ck_assert_int_eq(tfp_up_ident_format(&me, ident, sizeof ident, &err), TFP_OK);
    ck_assert_int_eq(tfx_ucxc_connect(u, resp->worker_address, resp->worker_address_len,
                                      resp->same_host, resp->token, ident, 5000, conn, why,
                                      sizeof why), TFP_OK);
    return u;
}

/* tfx_ucxc_drive for a request the progress thread has already finished (its reply came in
 * before the caller's wait took the worker): -1 at once, to drain first, rather than
 * driving for a reply that is already queued until the wait runs out (and without reading
 * the request, which the thread may have handed back early and freed). A DRIVEN request is
 * the caller's own and is sent and driven whatever is queued. */
START_TEST(ucx_drive_after_the_thread_finished)
{
    if (!have_daemon("ucx_drive_after_the_thread_finished"))
        return;
    start(NULL);
    atomic_int woken = 0;
    tfp_up_resp_t resp;
    tfx_ucxc_conn_t *conn = NULL;
    tfx_ucxc_t *u = transport_connect(&woken, &resp, &conn);
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_GET, 0);
    snprintf(h.name, sizeof h.name, "x");
    snprintf(h.request_id, sizeof h.request_id, "drive-1");
    /* sent by the thread; its reply queued before anyone drives */
    tfx_ucxc_req_t *r = NULL, *got;
    atomic_store(&woken, 0);
    ck_assert_int_eq(tfx_ucxc_start(conn, &h, NULL, NULL, 0, 5000, 0, NULL, &r), TFP_OK);
    for (int i = 0; i < 5000 && !atomic_load(&woken); i++)
        sleep_ms(1);
    ck_assert_msg(atomic_load(&woken), "no completion within 5 s");
    ck_assert_int_eq(tfx_ucxc_drive(u, r, 50, 2000), -1);
    ck_assert_ptr_eq(got = tfx_ucxc_next(u), r);
    ck_assert_msg(tfx_ucxc_req_result(got)->transport_status == TFP_OK, "%s",
                  tfx_ucxc_req_result(got)->why);
    ck_assert_int_eq(tfx_ucxc_req_result(got)->reply.http, 404);    /* no such name */
    ck_assert_ptr_null(tfx_ucxc_next(u));
    tfx_ucxc_req_free(got);
    /* a DRIVEN one behind a queued completion: driven all the same */
    tfx_ucxc_req_t *r1 = NULL, *r2 = NULL;
    atomic_store(&woken, 0);
    ck_assert_int_eq(tfx_ucxc_start(conn, &h, NULL, NULL, 0, 5000, 0, NULL, &r1), TFP_OK);
    for (int i = 0; i < 5000 && !atomic_load(&woken); i++)
        sleep_ms(1);
    ck_assert_msg(atomic_load(&woken), "no completion within 5 s");
    ck_assert_int_eq(tfx_ucxc_start(conn, &h, NULL, NULL, 0, 5000, TFX_UCXC_DRIVEN, NULL,
                                    &r2), TFP_OK);
    ck_assert_int_eq(tfx_ucxc_drive(u, r2, 50, 5000), 1);
    ck_assert_ptr_eq(got = tfx_ucxc_next(u), r1);
    tfx_ucxc_req_free(got);
    ck_assert_ptr_eq(got = tfx_ucxc_next(u), r2);
    ck_assert_int_eq(tfx_ucxc_req_result(got)->reply.http, 404);
    tfx_ucxc_req_free(got);
    tfx_ucxc_conn_close(conn);
    tfp_up_resp_clear(&resp);
    tfx_ucxc_free(u);
    stop();
}
END_TEST

/* ---- admission: frames without a token, raw UCX ---------------------------------------------- */

typedef struct {
    ucp_context_h ctx;
    ucp_worker_h w;
    int acks, acks_ok, replies;
    char ack_msg[TFP_UF_MAX_MSG + 1];   /* the last HELLO_ACK's */
    unsigned last_http;                 /* the last REPLY's */
} raw_t;

static ucs_status_t raw_on_reply(void *arg, const void *header, size_t header_length,
                                 void *data, size_t length, const ucp_am_recv_param_t *param)
{
    raw_t *r = arg;
    tfp_uf_hdr_t h;
    tfp_err_t err;
    (void)data;
    (void)length;
    (void)param;
    if (tfp_uf_decode(header, header_length, &h, &err) != TFP_OK)
        return UCS_OK;
    if (h.op == TFP_UF_HELLO_ACK) {
        r->acks++;
        r->acks_ok += h.status == TFP_OK;
        snprintf(r->ack_msg, sizeof r->ack_msg, "%s", h.msg);
    } else {
        r->replies++;
        r->last_http = h.http;
    }
    return UCS_OK;
}

static void raw_open(raw_t *r)
{
    memset(r, 0, sizeof *r);
    ucp_config_t *cfg;
    ck_assert_int_eq(ucp_config_read(NULL, NULL, &cfg), UCS_OK);
    ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ck_assert_int_eq(ucp_init(&pp, cfg, &r->ctx), UCS_OK);
    ucp_config_release(cfg);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ck_assert_int_eq(ucp_worker_create(r->ctx, &wp, &r->w), UCS_OK);
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = TFX_UCX_AM_REPLY, .cb = raw_on_reply, .arg = r};
    ck_assert_int_eq(ucp_worker_set_am_recv_handler(r->w, &hp), UCS_OK);
}

static ucp_ep_h raw_ep(raw_t *r, const tfp_up_resp_t *resp)
{
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                          .address = (const ucp_address_t *)resp->worker_address,
                          .err_mode = UCP_ERR_HANDLING_MODE_NONE};
    ucp_ep_h h = NULL;
    ck_assert_int_eq(ucp_ep_create(r->w, &ep, &h), UCS_OK);
    return h;
}

/* Sends one active message (header, and data of dlen bytes) and progresses until it is
 * out. */
static void raw_send_data(raw_t *r, ucp_ep_h ep, const void *hdr, size_t len, const void *data,
                          size_t dlen)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER};
    void *rq = ucp_am_send_nbx(ep, TFX_UCX_AM_REQUEST, hdr, len, data, dlen, &p);
    ck_assert(!UCS_PTR_IS_ERR(rq));
    if (UCS_PTR_IS_PTR(rq)) {
        while (ucp_request_check_status(rq) == UCS_INPROGRESS)
            ucp_worker_progress(r->w);
        ucp_request_free(rq);
    }
}

static void raw_send(raw_t *r, ucp_ep_h ep, const void *hdr, size_t len)
{
    raw_send_data(r, ep, hdr, len, NULL, 0);
}

/* Progresses for ms milliseconds (replies are counted by raw_on_reply). */
static void raw_progress(raw_t *r, long ms)
{
    double end = now_s() + (double)ms / 1000.0;
    while (now_s() < end)
        if (!ucp_worker_progress(r->w))
            sleep_ms(1);
}

static void raw_close(raw_t *r, ucp_ep_h ep)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *rq = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(rq)) {
        while (ucp_request_check_status(rq) == UCS_INPROGRESS)
            ucp_worker_progress(r->w);
        ucp_request_free(rq);
    }
}

static size_t encode(const tfp_uf_hdr_t *h, uint8_t *buf)
{
    size_t len = 0;
    tfp_err_t err;
    ck_assert_msg(tfp_uf_encode(h, buf, TFP_UF_MAX_HEADER, &len, &err) == TFP_OK, "%s",
                  err.msg);
    return len;
}

/* A GET frame for tensor "t". */
static size_t get_frame(uint8_t *buf)
{
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_GET, 77);
    snprintf(h.request_id, sizeof h.request_id, "raw-get");
    snprintf(h.name, sizeof h.name, "t");
    return encode(&h, buf);
}

START_TEST(ucx_raw_frames)
{
    if (!have_daemon("ucx_raw_frames"))
        return;
    start(NULL);
    tfp_up_host_t me;
    tfp_err_t err;
    ck_assert_int_eq(tfx_hostid_get(&me, &err), TFP_OK);
    char ident[TFP_UP_MAX_IDENT + 1];
    ck_assert_int_eq(tfp_up_ident_format(&me, ident, sizeof ident, &err), TFP_OK);
    tfp_up_resp_t resp;
    post_upgrade(&me, &resp);
    raw_t r;
    raw_open(&r);
    uint8_t get[TFP_UF_MAX_HEADER], hello[TFP_UF_MAX_HEADER], bare[TFP_UF_MAX_HEADER];
    size_t get_len = get_frame(get);

    /* A request before any HELLO: dropped, no answer. */
    ucp_ep_h ep = raw_ep(&r, &resp);
    raw_send(&r, ep, get, get_len);
    raw_progress(&r, 300);
    ck_assert_int_eq(r.replies, 0);
    raw_close(&r, ep);

    /* A HELLO without a token (name_len 0, the token's bytes cut out): no HELLO_ACK, and
     * the endpoint stays unadmitted. */
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_HELLO, 5);
    snprintf(h.name, sizeof h.name, "%s", resp.token);
    snprintf(h.msg, sizeof h.msg, "%s", ident);
    size_t hello_len = encode(&h, hello);
    ck_assert_uint_eq(hello[34], TFP_UP_TOKEN_LEN);          /* name_len */
    memcpy(bare, hello, TFP_UF_FIXED);
    bare[34] = 0;
    memcpy(bare + TFP_UF_FIXED, hello + TFP_UF_FIXED + TFP_UP_TOKEN_LEN,
           hello_len - TFP_UF_FIXED - TFP_UP_TOKEN_LEN);
    ep = raw_ep(&r, &resp);
    raw_send(&r, ep, bare, hello_len - TFP_UP_TOKEN_LEN);
    raw_progress(&r, 300);
    ck_assert_int_eq(r.acks, 0);
    raw_send(&r, ep, get, get_len);
    raw_progress(&r, 300);
    ck_assert_int_eq(r.replies, 0);
    raw_close(&r, ep);

    /* The same harness with the real token: admitted, and the GET is answered (404). */
    ep = raw_ep(&r, &resp);
    raw_send(&r, ep, hello, hello_len);
    for (int i = 0; i < 50 && r.acks == 0; i++)
        raw_progress(&r, 100);
    ck_assert_int_eq(r.acks, 1);
    ck_assert_int_eq(r.acks_ok, 1);
    ck_assert(tfp_uf_has_feature(r.ack_msg, TFP_UF_FEATURE_BODY_PREFIX));
    raw_send(&r, ep, get, get_len);
    for (int i = 0; i < 50 && r.replies == 0; i++)
        raw_progress(&r, 100);
    ck_assert_int_eq(r.replies, 1);

    /* A PUT whose body starts in the header (BODY_PREFIX): the document's header there, its
     * 16 bytes of data as the message's data; stored whole. */
    tf_doc_t *d = tf_doc_new();
    int64_t s16[1] = {16};
    uint8_t v16[16];
    for (int i = 0; i < 16; i++)
        v16[i] = (uint8_t)(3 * i + 1);
    ck_assert_int_eq(tf_doc_add(d, "x", TF_U8, 1, s16, v16, 16, TF_COPY), TF_OK);
    void *dh = NULL;
    size_t dhl = 0;
    ck_assert_int_eq(tf_doc_encode_header(d, &dh, &dhl), TF_OK);
    tfp_uf_init(&h, TFP_UF_PUT, 78);
    snprintf(h.request_id, sizeof h.request_id, "raw-put");
    snprintf(h.name, sizeof h.name, "pre");
    h.body_len = dhl + 16;
    h.flags = TFP_UF_F_BODY_PREFIX;
    h.prefix_len = (uint32_t)dhl;
    uint8_t put[TFP_UF_MAX_HEADER + TFP_UF_MAX_PREFIX];
    size_t put_len = encode(&h, put);
    memcpy(put + put_len, dh, dhl);
    raw_send_data(&r, ep, put, put_len + dhl, v16, 16);
    for (int i = 0; i < 50 && r.replies == 1; i++)
        raw_progress(&r, 100);
    ck_assert_int_eq(r.replies, 2);
    ck_assert_uint_eq(r.last_http, 201);
    tf_client_t *c = client(TF_TRANSPORT_HTTP);
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "pre"), 0, &got), TF_OK);
    ck_assert_mem_eq(tf_doc_find(got, "x")->data, v16, 16);
    tf_doc_free(got);
    /* The same frame claiming one byte more than prefix and data make: dropped unanswered,
     * and the endpoint still served. */
    h.body_len = dhl + 17;
    h.seq = 79;
    put_len = encode(&h, put);
    memcpy(put + put_len, dh, dhl);
    raw_send_data(&r, ep, put, put_len + dhl, v16, 16);
    raw_progress(&r, 300);
    ck_assert_int_eq(r.replies, 2);
    raw_send(&r, ep, get, get_len);
    for (int i = 0; i < 50 && r.replies == 2; i++)
        raw_progress(&r, 100);
    ck_assert_int_eq(r.replies, 3);
    tf_free(dh);
    tf_doc_free(d);
    tf_client_free(c);
    raw_close(&r, ep);

    ucp_worker_destroy(r.w);
    ucp_cleanup(r.ctx);
    tfp_up_resp_clear(&resp);
    stop();
}
END_TEST

/* ---- faults --------------------------------------------------------------------------------- */

/* tfetchd killed (SIGKILL) with requests in flight over UCX, under policy auto and ucx:
 * each completes, failed, within its time limit; the next request fails fast; the client
 * frees at once. big: a 64 MiB put in flight too (a rendezvous the dead peer never ends). */
static void killed_mid_request(int big)
{
    for (int strict = 0; strict < 2; strict++) {
        start(NULL);
        tf_client_t *c = ucx_client();
        if (!strict)
            ck_assert_int_eq(tf_client_set_transport(c, TF_TRANSPORT_AUTO), TF_OK);
        tf_client_set_timeout(c, 1500);
        size_t nbig = 64u << 20;
        uint8_t *v = calloc(1, nbig);
        ck_assert_ptr_nonnull(v);
        int64_t shape[1] = {(int64_t)nbig};
        tf_doc_t *d = tf_doc_new(), *small = f32_doc("s", 4, 0);
        ck_assert_int_eq(tf_doc_add(d, "big", TF_U8, 1, shape, v, nbig, TF_BORROW), TF_OK);
        rec_t g = {0}, p = {0}, x = {0};
        tf_request_t rg = {.op = TF_OP_GET, .url = url("/v1/tensors/%s", "never"),
                           .wait_ms = 1000};
        tf_request_t rp = {.op = TF_OP_PUT, .url = url("/v1/tensors/%s", "big"), .in = d};
        tf_request_t rx = {.op = TF_OP_EXCHANGE, .url = url("/v1/call/%s", "echo"),
                           .in = small};
        ck_assert_int_eq(tf_fetch_start(c, &rg, rec_cb, &g, NULL), TF_OK);
        if (big)
            ck_assert_int_eq(tf_fetch_start(c, &rp, rec_cb, &p, NULL), TF_OK);
        kill(D.pid, SIGKILL);
        waitpid(D.pid, NULL, 0);
        tf_status_t sx = tf_fetch_start(c, &rx, rec_cb, &x, NULL);
        if (sx != TF_OK) {
            /* The client may already have seen the server's death (it watches the pid):
             * under ucx the start itself then fails, saying why. */
            /* (ECONNECT once it knows; EIO when the send itself found the endpoint dead) */
            ck_assert_msg(strict && (sx == TF_ECONNECT || sx == TF_EIO) &&
                          tf_client_last(c)->error[0], "%s", tf_err_name(sx));
            x.calls = 1;
            x.st = sx;
            x.res = *tf_client_last(c);
        }
        double t0 = now_s();
        ck_assert_msg(tf_client_run(c, 10000) == TF_OK, "%zu requests still pending after 10 s",
                      tf_client_pending(c));
        double took = now_s() - t0;
        ck_assert_msg(took < 4.0, "took %.3f s", took);
        rec_t *all[2] = {&g, &x};
        for (int k = 0; k < 2; k++) {
            rec_t *r = all[k];
            ck_assert_int_eq(r->calls, 1);
            ck_assert_msg(r->st == TF_ETIMEDOUT || r->st == TF_EIO || r->st == TF_ECONNECT,
                          "%s: %s", tf_err_name(r->st), r->res.error);
            ck_assert_msg(r->res.error[0], "no message");
            if (strict)
                ck_assert_msg(strstr(r->res.error, "policy ucx"), "%s", r->res.error);
            tf_doc_free(r->doc);
        }
        if (big)
            ck_assert_int_eq(p.calls, 1);       /* it may have completed before the kill */
        fprintf(stderr, "ucx_daemon_killed (%s%s): get %s after %.3f s: %s\n",
                strict ? "ucx" : "auto", big ? ", 64 MiB put" : "", tf_err_name(g.st), took,
                g.res.error);
        /* the next request fails fast: HTTP cannot connect, or (strict) the backoff */
        tf_doc_t *got = NULL;
        t0 = now_s();
        tf_status_t st = tf_get(c, url("/v1/tensors/%s", "big"), 0, &got);
        ck_assert_msg(st == TF_ECONNECT, "%s: %s", tf_err_name(st), tf_client_last(c)->error);
        ck_assert(now_s() - t0 < 1.0);
        tf_transport_info_t ti = TF_TRANSPORT_INFO_INIT;
        ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
        ck_assert_str_eq(ti.transport, "http");
        ck_assert_msg(strstr(ti.reason, "UCX connection failed"), "%s", ti.reason);
        t0 = now_s();
        tf_client_free(c);
        ck_assert(now_s() - t0 < 1.0);
        tf_doc_free(small);
        tf_doc_free(d);
        free(v);
        unlink(D.log_path);
        D.pid = 0;
        td_cleanup();
    }
}

START_TEST(ucx_daemon_killed_mid_request)
{
    if (have_daemon("ucx_daemon_killed_mid_request"))
        killed_mid_request(0);
}
END_TEST

START_TEST(ucx_daemon_killed_mid_put)
{
    if (have_daemon("ucx_daemon_killed_mid_put"))
        killed_mid_request(1);
}
END_TEST

/* A client (the tfetch CLI, a process of its own: UCX does not survive fork) killed by
 * SIGKILL at points during a 256 MiB UCX put: tfetchd goes on serving, over UCX and HTTP,
 * and the store holds only complete documents (the old one, or the whole new one). */
START_TEST(ucx_client_killed_mid_put)
{
    if (!have_daemon("ucx_client_killed_mid_put"))
        return;
    const char *cli = getenv("TFETCH_CLI");
    if (!cli) {
        fprintf(stderr, "ucx_client_killed_mid_put: skipped: TFETCH_CLI is not set\n");
        return;
    }
    start(NULL);
    tf_client_t *c = ucx_client();
    tf_doc_t *old = f32_doc("w", 8, 1), *got = NULL;
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "w"), old), TF_OK);
    assert_shm(tf_client_last(c)->transport);
    char path[128];
    snprintf(path, sizeof path, "/tmp/tf-ucx-big-%d.bin", (int)getpid());
    size_t n = 256u << 20;
    uint8_t *v = malloc(n);
    ck_assert_ptr_nonnull(v);
    memset(v, 0x5a, n);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(v, 1, n, f), n);
    fclose(f);
    free(v);
    int kept_old = 0, got_new = 0, over_ucx = 0;
    long delays_ms[] = {60, 120, 180, 260};
    for (size_t k = 0; k < sizeof delays_ms / sizeof delays_ms[0]; k++) {
        pid_t kid = fork();
        if (kid == 0) {
            signal(SIGTERM, SIG_DFL);
            char shape[32];
            snprintf(shape, sizeof shape, "%zu", n);
            execl(cli, cli, "-q", "--transport", "ucx", "put", "--dtype", "U8", "--shape", shape,
                  url("/v1/tensors/%s", "w"), path, (char *)NULL);
            _exit(127);
        }
        sleep_ms(delays_ms[k]);
        kill(kid, SIGKILL);
        int st;
        waitpid(kid, &st, 0);
        /* The daemon answers over HTTP and what it stores is whole. Whether its UCX path
         * still answers is reported, not asserted: now and then a client killed mid-put
         * leaves the shared-memory path stalled (see doc/PROTOCOL.md section 8), and a
         * stalled UCX worker can block a client's own teardown, so it is asked from a
         * separate, time-limited process. */
        tf_client_t *a = client(TF_TRANSPORT_HTTP);
        tf_client_set_timeout(a, 5000);
        ck_assert_int_eq(tf_get(a, url("/v1/tensors/%s", "w"), 0, &got), TF_OK);
        tf_client_free(a);
        char cmd[512];
        snprintf(cmd, sizeof cmd, "timeout -s KILL 8 %s -q --transport ucx --timeout 3000 get "
                 "'%s' /dev/null 2>/dev/null", cli, url("/v1/tensors/%s", "w"));
        if (system(cmd) == 0)
            over_ucx++;
        const tf_tensor_t *t = tf_doc_find(got, "w");
        ck_assert_ptr_nonnull(t);
        if (t->dtype == TF_F32) {
            ck_assert(docs_equal(got, old));            /* the old document, untouched */
            kept_old++;
        } else {
            ck_assert_uint_eq(t->nbytes, n);            /* the new one, complete */
            for (size_t i = 0; i < t->nbytes; i += 4096)
                ck_assert_uint_eq(((const uint8_t *)t->data)[i], 0x5a);
            got_new++;
            tf_client_t *h = client(TF_TRANSPORT_HTTP);
            ck_assert_int_eq(tf_put(h, url("/v1/tensors/%s", "w"), old), TF_OK);
            tf_client_free(h);
        }
        tf_doc_free(got);
        got = NULL;
        tf_client_t *h = client(TF_TRANSPORT_HTTP);
        char *json = NULL;
        ck_assert_int_eq(tf_info(h, D.base, &json), TF_OK);
        free(json);
        tf_client_free(h);
    }
    fprintf(stderr, "ucx_client_killed_mid_put: %d kills left the old document, %d came after "
            "the new one was whole; UCX answered after %d of them\n", kept_old,
            got_new, over_ucx);
    unlink(path);
    tf_doc_free(old);
    tf_client_free(c);
    stop();
}
END_TEST

/* The daemon dies and another takes its port: a request whose UCX connection breaks goes
 * again over HTTP with the same request id, and the origin upgrades anew after the backoff. */
START_TEST(ucx_connection_lost_retried_over_http)
{
    if (!have_daemon("ucx_connection_lost_retried_over_http"))
        return;
    start(NULL);
    tf_client_t *c = ucx_client();
    ck_assert_int_eq(tf_client_set_transport(c, TF_TRANSPORT_AUTO), TF_OK);
    tf_doc_t *d = f32_doc("x", 4, 7), *got = NULL;
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "x"), d), TF_OK);
    assert_shm(tf_client_last(c)->transport);
    char port[16];
    snprintf(port, sizeof port, "%u", D.port);
    kill(D.pid, SIGKILL);
    waitpid(D.pid, NULL, 0);
    unlink(D.log_path);
    const char *args[] = {"--port", port, NULL};
    start(args);
    ck_assert_uint_eq(D.port, (unsigned)atoi(port));
    /* Two requests over the dead connection: the short one's deadline breaks it, and the
     * long one is retried over HTTP at once, keeping its id. */
    rec_t shortr = {0}, longr = {0};
    tf_request_t rs = {.op = TF_OP_EXCHANGE, .url = url("/v1/call/%s", "echo"), .in = d,
                       .timeout_ms = 200, .request_id = "short-1"};
    tf_request_t rl = {.op = TF_OP_EXCHANGE, .url = url("/v1/call/%s", "echo"), .in = d,
                       .timeout_ms = 20000, .request_id = "long-1"};
    ck_assert_int_eq(tf_fetch_start(c, &rs, rec_cb, &shortr, NULL), TF_OK);
    ck_assert_int_eq(tf_fetch_start(c, &rl, rec_cb, &longr, NULL), TF_OK);
    double t0 = now_s();
    ck_assert_int_eq(tf_client_run(c, 30000), TF_OK);
    ck_assert_msg(now_s() - t0 < 5.0, "took %.3f s", now_s() - t0);
    ck_assert_int_eq(longr.calls, 1);
    ck_assert_msg(longr.st == TF_OK, "%s: %s", tf_err_name(longr.st), longr.res.error);
    ck_assert_str_eq(longr.res.transport, "http");
    ck_assert_str_eq(longr.res.request_id, "long-1");
    /* Usually it went out over UCX and was retried. But the short one's start puts a request
     * in flight, and with one the client checks the server's pid (every 100 ms): when that
     * finds the old daemon gone before the long one starts, or while it starts (a slow run,
     * under TSan), the long one goes straight over HTTP, saying the connection failed. */
    ck_assert_msg(strstr(longr.res.fallback, "retried over HTTP") ||
                      strstr(longr.res.fallback, "the UCX connection failed"),
                  "%s", longr.res.fallback);
    ck_assert(docs_equal(longr.doc, d));
    tf_doc_free(longr.doc);
    ck_assert_int_eq(shortr.calls, 1);
    tf_doc_free(shortr.doc);
    /* Within the backoff: HTTP, saying why; after it, UCX again (to the new daemon). */
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "x"), d), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "http");
    ck_assert_msg(strstr(tf_client_last(c)->fallback, "UCX connection failed"), "%s",
                  tf_client_last(c)->fallback);
    tf_doc_free(got);
    tf_transport_info_t ti = TF_TRANSPORT_INFO_INIT;
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    ck_assert_int_gt(ti.retry_ms, 0);
    sleep_ms(ti.retry_ms + 50);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "x"), 0, &got), TF_OK);
    assert_ucx_result(tf_client_last(c));
    tf_doc_free(got);
    tf_doc_free(d);
    tf_client_free(c);
    stop();
}
END_TEST

/* ---- blocking calls drive the worker themselves (issue 9) ---------------------------------- */

static uint64_t driven(tf_client_t *c)
{
    tf_transport_info_t ti = TF_TRANSPORT_INFO_INIT;
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    return ti.caller_driven;
}

/* Every blocking call over UCX, and tf_fetch_wait, sends and sees its reply on the calling
 * thread (caller_driven counts them); requests driven by tf_client_run do not. Fails if the
 * fast path is not taken. An older caller's struct (0.1 size) is not written past. */
START_TEST(ucx_blocking_calls_drive_the_worker)
{
    if (!have_daemon("ucx_blocking_calls_drive_the_worker"))
        return;
    start(NULL);
    tf_client_t *c = ucx_client();
    tf_doc_t *d = f32_doc("x", 4, 1), *got = NULL;
    uint64_t n0 = driven(c);
    for (int i = 0; i < 20; i++) {
        ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "x"), d), TF_OK);
        assert_ucx_result(tf_client_last(c));
        ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "x"), 0, &got), TF_OK);
        assert_ucx_result(tf_client_last(c));
        ck_assert(docs_equal(got, d));
        tf_doc_free(got);
        got = exchange(c, "echo", d, TF_OK);
        ck_assert(docs_equal(got, d));
        tf_doc_free(got);
    }
    /* Three calls each time; a round trip on one host is far below the 200 us budget, but a
     * loaded machine may deschedule a few: most must have been driven. */
    uint64_t n1 = driven(c);
    ck_assert_msg(n1 - n0 >= 45, "only %llu of 60 blocking calls were driven by the caller",
                  (unsigned long long)(n1 - n0));
    rec_t r = {0};
    tf_fetch_t *f = NULL;
    tf_request_t rq = {.op = TF_OP_GET, .url = url("/v1/tensors/%s", "x")};
    /* A started fetch is sent by the progress thread, which may also see its reply before
     * the caller's wait takes the worker (a loaded machine, 7 of 10 once in CI): that
     * is allowed, so the wait must drive 5, however many tries that takes up to 50. */
    int waited = 0, tries = 0;
    while (waited < 5 && tries < 50) {
        ck_assert_int_eq(tf_fetch_start(c, &rq, rec_cb, &r, &f), TF_OK);
        uint64_t before = driven(c);
        ck_assert_int_eq(tf_fetch_wait(f, 5000), TF_OK);
        waited += driven(c) > before;
        tf_fetch_free(f);
        tries++;
    }
    ck_assert_int_eq(r.calls, tries);
    ck_assert_msg(waited >= 5, "tf_fetch_wait drove only %d of %d", waited, tries);
    if (tries > 5)
        printf("ucx_blocking_calls_drive_the_worker: tf_fetch_wait drove %d of %d\n", waited,
               tries);
    uint64_t n2 = driven(c);
    ck_assert_int_eq(tf_fetch_start(c, &rq, rec_cb, &r, NULL), TF_OK);
    ck_assert_int_eq(tf_client_run(c, 5000), TF_OK);
    ck_assert_int_eq(r.calls, tries + 1);
    ck_assert_uint_eq(driven(c), n2);           /* the async path is the progress thread's */
    tf_doc_free(r.doc);
    /* A 0.1 caller's struct ends at retry_ms. */
    unsigned char old[sizeof(tf_transport_info_t)];
    memset(old, 0xab, sizeof old);
    size_t size01 = offsetof(tf_transport_info_t, retry_ms) + sizeof(long);
    memcpy(old, &size01, sizeof size01);
    ck_assert_int_eq(tf_client_transport_info(c, D.base, (tf_transport_info_t *)(void *)old),
                     TF_OK);
    for (size_t i = size01; i < sizeof old; i++)
        ck_assert_uint_eq(old[i], 0xab);
    tf_doc_free(d);
    tf_client_free(c);
    stop();
}
END_TEST

typedef struct {
    rec_t rec;
    pthread_t thread;               /* where the callback ran */
    int phase;                      /* *phase when it ran */
    const int *phasep;
    tf_client_t *c;
    const tf_doc_t *doc;
    rec_t chained;                  /* a request the callback started */
    int chain;
} where_t;

static void where_cb(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                     void *ud)
{
    where_t *w = ud;
    rec_cb(f, st, doc, r, &w->rec);
    w->thread = pthread_self();
    w->phase = *w->phasep;
    if (w->chain) {
        /* A request started inside a callback, while a blocking call may be driving. */
        tf_request_t rq = {.op = TF_OP_EXCHANGE, .url = url("/v1/call/%s", "echo"),
                           .in = w->doc};
        ck_assert_int_eq(tf_fetch_start(w->c, &rq, rec_cb, &w->chained, NULL), TF_OK);
    }
}

/* Completions of other requests that a blocking call sees while it drives the worker run
 * their callbacks on the driving thread, once each, outside UCX (a callback may start a
 * request), during the blocking call or in a later tf_client_run: never on another thread. */
START_TEST(ucx_driving_delivers_others_on_the_driver)
{
    if (!have_daemon("ucx_driving_delivers_others_on_the_driver"))
        return;
    start(NULL);
    tf_client_t *c = ucx_client();
    tf_doc_t *d = f32_doc("y", 4, 2), *got = NULL;
    int phase = 0;
    for (int round = 0; round < 20; round++) {
        /* An exchange, and a long-poll GET that the blocking PUT below completes. */
        char name[32];
        snprintf(name, sizeof name, "late%d", round);
        where_t ex = {.phasep = &phase, .c = c, .doc = d, .chain = 1};
        where_t lp = {.phasep = &phase, .c = c, .doc = d};
        tf_request_t rx = {.op = TF_OP_EXCHANGE, .url = url("/v1/call/%s", "echo"), .in = d};
        tf_request_t rg = {.op = TF_OP_GET, .url = url("/v1/tensors/%s", name),
                           .wait_ms = 5000};
        ck_assert_int_eq(tf_fetch_start(c, &rx, where_cb, &ex, NULL), TF_OK);
        ck_assert_int_eq(tf_fetch_start(c, &rg, where_cb, &lp, NULL), TF_OK);
        phase = 1;
        ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", name), d), TF_OK);
        assert_ucx_result(tf_client_last(c));
        ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", name), 0, &got), TF_OK);
        tf_doc_free(got);
        phase = 2;
        ck_assert_int_eq(tf_client_run(c, 10000), TF_OK);
        where_t *all[2] = {&ex, &lp};
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(all[k]->rec.calls, 1);
            ck_assert_msg(all[k]->rec.st == TF_OK, "%s", all[k]->rec.res.error);
            ck_assert(pthread_equal(all[k]->thread, pthread_self()));
            ck_assert(all[k]->phase == 1 || all[k]->phase == 2);
            ck_assert(docs_equal(all[k]->rec.doc, d));
            tf_doc_free(all[k]->rec.doc);
        }
        ck_assert_int_eq(ex.chained.calls, 1);
        ck_assert_int_eq(ex.chained.st, TF_OK);
        tf_doc_free(ex.chained.doc);
        phase = 0;
    }
    tf_doc_free(d);
    tf_client_free(c);
    stop();
}
END_TEST

typedef struct {
    pid_t pid;
    long after_ms;
    int sig;
} killer_t;

static void *killer_main(void *arg)
{
    killer_t *k = arg;
    sleep_ms(k->after_ms);
    kill(k->pid, k->sig);
    return NULL;
}

/* The daemon killed while blocking calls drive the worker back to back: under ucx the call
 * in flight fails within ~2 s, saying why, and the next ones fail at once; under auto they
 * go over HTTP (which then cannot connect). Nothing hangs, and the client frees quickly. */
START_TEST(ucx_daemon_killed_while_driving)
{
    if (!have_daemon("ucx_daemon_killed_while_driving"))
        return;
    for (int strict = 0; strict < 2; strict++) {
        start(NULL);
        tf_client_t *c = ucx_client();
        if (!strict)
            ck_assert_int_eq(tf_client_set_transport(c, TF_TRANSPORT_AUTO), TF_OK);
        tf_client_set_timeout(c, 3000);
        tf_doc_t *d = f32_doc("z", 4, 3), *got = NULL;
        killer_t k = {.pid = D.pid, .after_ms = 30 + 17 * strict, .sig = SIGKILL};
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, killer_main, &k), 0);
        double t0 = now_s(), failed_at = 0;
        tf_status_t st = TF_OK;
        int ok = 0;
        while (now_s() - t0 < 8.0) {
            double t1 = now_s();
            st = tf_fetch(c, url("/v1/call/%s", "echo"), d, &got);
            if (st != TF_OK) {
                failed_at = now_s();
                ck_assert_msg(failed_at - t1 < 3.5, "the failing call took %.3f s",
                              failed_at - t1);
                break;
            }
            ok++;
            tf_doc_free(got);
            got = NULL;
        }
        pthread_join(t, NULL);
        waitpid(D.pid, NULL, 0);
        ck_assert_msg(st != TF_OK, "still answered %d calls after the kill", ok);
        ck_assert_msg(st == TF_EIO || st == TF_ECONNECT || st == TF_ETIMEDOUT, "%s: %s",
                      tf_err_name(st), tf_client_last(c)->error);
        ck_assert_msg(tf_client_last(c)->error[0], "no message");
        if (strict)
            ck_assert_msg(strstr(tf_client_last(c)->error, "policy ucx") ||
                              st == TF_ECONNECT, "%s", tf_client_last(c)->error);
        double t2 = now_s();
        st = tf_fetch(c, url("/v1/call/%s", "echo"), d, &got);
        ck_assert_int_ne(st, TF_OK);
        ck_assert_msg(now_s() - t2 < 3.5, "the next call took %.3f s", now_s() - t2);
        t2 = now_s();
        tf_client_free(c);
        ck_assert_msg(now_s() - t2 < 2.0, "tf_client_free took %.3f s", now_s() - t2);
        tf_doc_free(d);
        unlink(D.log_path);
        td_cleanup();
    }
}
END_TEST

/* A blocking call whose server stops answering (SIGSTOP) times out at the client's limit
 * over ucx, and the connection is dropped; a tf_fetch_wait that gives up early leaves its
 * request to the progress thread, which a cancel then completes when the server answers;
 * tf_client_free with such a request in flight is bounded. */
/* 1 when every thread of pid is stopped ('T' or 't' in /proc/PID/task/TID/stat). */
static int all_stopped(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int all = 1, seen = 0;
    for (struct dirent *e; all && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char stat[sizeof path + sizeof e->d_name + 8];
        snprintf(stat, sizeof stat, "%s/%s/stat", path, e->d_name);
        FILE *f = fopen(stat, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        const char *close = strrchr(buf, ')');      /* "tid (comm) S ..." */
        all = close && close[1] == ' ' && (close[2] == 'T' || close[2] == 't');
        seen++;
    }
    closedir(d);
    return all && seen > 0;
}

/* kill(SIGSTOP) returns before every thread of the target has stopped: waits (up to 5 s)
 * until /proc says they all have. */
static void stop_process(pid_t pid)
{
    kill(pid, SIGSTOP);
    for (int i = 0; i < 500 && !all_stopped(pid); i++)
        sleep_ms(10);
    ck_assert_msg(all_stopped(pid), "tfetchd (pid %d) did not stop", (int)pid);
}

/* A send the client hands back early (its same-host server died with it in flight, and
 * UCX may never complete it) stops counting as out: while sends are out the client yields
 * instead of sleeping, and a leaked count kept it at that for good. The server is stopped
 * first, so the 16 MiB body's rendezvous is surely still out when it dies. */
START_TEST(ucx_orphaned_send_uncounted)
{
    if (!have_daemon("ucx_orphaned_send_uncounted"))
        return;
    start(NULL);
    atomic_int woken = 0;
    tfp_up_resp_t resp;
    tfx_ucxc_conn_t *conn = NULL;
    tfx_ucxc_t *u = transport_connect(&woken, &resp, &conn);
    tfx_ucxc_conn_watch_pid(conn, (long)D.pid);
    size_t n = 16u << 20;
    uint8_t *body = calloc(1, n);
    ck_assert_ptr_nonnull(body);
    const void *segs[1] = {body};
    size_t lens[1] = {n};
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_PUT, 0);
    snprintf(h.name, sizeof h.name, "orphan");
    snprintf(h.request_id, sizeof h.request_id, "orphan-1");
    stop_process(D.pid);
    tfx_ucxc_req_t *r = NULL, *got;
    ck_assert_int_eq(tfx_ucxc_start(conn, &h, segs, lens, 1, 20000, 0, NULL, &r), TFP_OK);
    for (int i = 0; i < 5000 && tfx_ucxc_sends_out(u) == 0; i++)
        sleep_ms(1);
    ck_assert_uint_eq(tfx_ucxc_sends_out(u), 1);
    kill(D.pid, SIGKILL);
    waitpid(D.pid, NULL, 0);
    for (int i = 0; i < 5000 && !atomic_load(&woken); i++)
        sleep_ms(1);
    ck_assert_msg(atomic_load(&woken), "no completion within 5 s of the server's death");
    ck_assert_ptr_nonnull(got = tfx_ucxc_next(u));
    ck_assert_int_ne(tfx_ucxc_req_result(got)->transport_status, TFP_OK);
    ck_assert_uint_eq(tfx_ucxc_sends_out(u), 0);
    tfx_ucxc_req_free(got);
    tfx_ucxc_conn_close(conn);
    tfp_up_resp_clear(&resp);
    tfx_ucxc_free(u);
    free(body);
    unlink(D.log_path);
    D.pid = 0;
    td_cleanup();
}
END_TEST

/* Stall detection (issue 30): with no whole-request timeout, a server stopped (SIGSTOP)
 * before it answers is noticed within the stall window, over HTTP and over UCX (policy
 * ucx: not retried), with an error that says "stalled"; a long-poll's wait is not a stall.
 * Without stall detection each of these waited for ever (the old 60 s default gone too). */
START_TEST(stall_detected_http_and_ucx)
{
    if (!have_daemon("stall_detected_http_and_ucx"))
        return;
    start(NULL);
    static const tf_transport_t policies[] = {TF_TRANSPORT_HTTP, TF_TRANSPORT_UCX};
    tf_doc_t *d = f32_doc("s", 4, 1), *got = NULL;
    for (int i = 0; i < 2; i++) {
        tf_client_t *c = policies[i] == TF_TRANSPORT_UCX ? ucx_client() : client(TF_TRANSPORT_HTTP);
        tf_client_set_timeout(c, 0);
        ck_assert_int_eq(tf_client_set_stall(c, 1024, 1500), TF_OK);
        ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "s"), d), TF_OK);
        /* A long-poll longer than the window, answered in time: not a stall. */
        double t0 = now_s();
        ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "absent"), 2500, &got), TF_ENOTFOUND);
        ck_assert_msg(now_s() - t0 >= 2.4, "the long-poll ended after %.3f s", now_s() - t0);
        stop_process(D.pid);
        t0 = now_s();
        tf_status_t st = tf_get(c, url("/v1/tensors/%s", "s"), 0, &got);
        double took = now_s() - t0;
        kill(D.pid, SIGCONT);
        ck_assert_msg(st == TF_ETIMEDOUT, "%s: %s", tf_err_name(st), tf_client_last(c)->error);
        ck_assert_msg(strstr(tf_client_last(c)->error, "stalled"), "%s",
                      tf_client_last(c)->error);
        ck_assert_msg(took >= 1.4 && took < 5.0, "policy %d: took %.3f s", (int)policies[i],
                      took);
        tf_client_free(c);
    }
    ck_assert_int_eq(tf_client_set_stall(NULL, 1, 1), TF_EINVAL);
    tf_client_t *c = client(TF_TRANSPORT_HTTP);
    ck_assert_int_eq(tf_client_set_stall(c, 0, 1000), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_stall(c, 1, -1), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_stall(c, 0, 0), TF_OK);             /* off */
    tf_client_free(c);
    tf_doc_free(d);
    unlink(D.log_path);
    td_cleanup();
}
END_TEST

/* The response-size cap over UCX: a reply announced larger than the cap is refused before
 * it is received (nothing allocated), TF_ETOOBIG saying so, and the connection stays up. */
START_TEST(ucx_reply_cap)
{
    if (!have_daemon("ucx_reply_cap"))
        return;
    start(NULL);
    tf_client_t *c = ucx_client();
    tf_doc_t *d = tf_doc_new(), *got = NULL;
    uint8_t *bytes = calloc(1, 1u << 20);                          /* 1 MiB: rendezvous */
    int64_t shape[1] = {1 << 20};
    ck_assert_int_eq(tf_doc_add(d, "big", TF_U8, 1, shape, bytes, 1u << 20, TF_COPY), TF_OK);
    free(bytes);
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "big"), d), TF_OK);
    assert_ucx_result(tf_client_last(c));
    tf_client_set_max_body(c, 64 * 1024);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "big"), 0, &got), TF_ETOOBIG);
    ck_assert_msg(strstr(tf_client_last(c)->error, "announces"), "%s",
                  tf_client_last(c)->error);
    ck_assert_ptr_null(got);
    tf_client_set_max_body(c, 0);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "big"), 0, &got), TF_OK);
    assert_ucx_result(tf_client_last(c));                       /* the same connection */
    tf_doc_free(got);
    tf_doc_free(d);
    tf_client_free(c);
    unlink(D.log_path);
    td_cleanup();
}
END_TEST

START_TEST(ucx_driving_timeout_cancel_free)
{
    if (!have_daemon("ucx_driving_timeout_cancel_free"))
        return;
    start(NULL);
    tf_client_t *c = ucx_client();
    tf_doc_t *d = f32_doc("w", 4, 4), *got = NULL;
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "w"), d), TF_OK);
    assert_ucx_result(tf_client_last(c));
    /* Timeout while the caller drives (policy ucx: not retried). */
    tf_client_set_timeout(c, 300);
    stop_process(D.pid);
    double t0 = now_s();
    tf_status_t st = tf_get(c, url("/v1/tensors/%s", "w"), 0, &got);
    double took = now_s() - t0;
    kill(D.pid, SIGCONT);
    ck_assert_msg(st == TF_ETIMEDOUT, "%s: %s", tf_err_name(st), tf_client_last(c)->error);
    ck_assert_msg(took >= 0.25 && took < 2.0, "took %.3f s", took);
    tf_client_set_timeout(c, 10000);
    /* Reconnects after the backoff. */
    tf_transport_info_t ti = TF_TRANSPORT_INFO_INIT;
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    sleep_ms(ti.retry_ms + 50);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "w"), 0, &got), TF_OK);
    assert_ucx_result(tf_client_last(c));
    tf_doc_free(got);
    /* tf_fetch_wait gives up before the long-poll ends; a cancel completes it (canceled)
     * once the server answers; the wait then drives it again. */
    rec_t r = {0};
    tf_fetch_t *f = NULL;
    tf_request_t rq = {.op = TF_OP_GET, .url = url("/v1/tensors/%s", "missing"),
                       .wait_ms = 300};
    ck_assert_int_eq(tf_fetch_start(c, &rq, rec_cb, &r, &f), TF_OK);
    ck_assert_int_eq(tf_fetch_wait(f, 20), TF_EAGAIN);
    ck_assert_int_eq(tf_fetch_cancel(f), TF_OK);
    t0 = now_s();
    ck_assert_int_eq(tf_fetch_wait(f, 5000), TF_ECANCELED);
    ck_assert_msg(now_s() - t0 < 2.0, "took %.3f s", now_s() - t0);
    ck_assert_int_eq(r.calls, 1);
    tf_fetch_free(f);
    /* Freed with a long-poll in flight, just after a wait drove it. */
    rec_t r2 = {0};
    rq.wait_ms = 5000;
    ck_assert_int_eq(tf_fetch_start(c, &rq, rec_cb, &r2, &f), TF_OK);
    ck_assert_int_eq(tf_fetch_wait(f, 1), TF_EAGAIN);
    t0 = now_s();
    tf_client_free(c);
    ck_assert_msg(now_s() - t0 < 2.0, "tf_client_free took %.3f s", now_s() - t0);
    ck_assert_int_eq(r2.calls, 1);
    ck_assert_int_eq(r2.st, TF_ECANCELED);
    tf_fetch_free(f);
    tf_doc_free(d);
    stop();
}
END_TEST
#endif

#ifdef HAVE_UCX
/* A document with an empty "__metadata__" object sent to echo comes back with it, over HTTP
 * and over UCX: echo returns what it got (the object is kept when decoded and encoded back,
 * in the daemon and in libtfetch alike). */
START_TEST(echo_keeps_empty_metadata)
{
    if (!have_daemon("echo_keeps_empty_metadata"))
        return;
    start(NULL);
    static const char hdr[] = "{\"__metadata__\":{},\"x\":{\"dtype\":\"U8\",\"shape\":[1],"
                              "\"data_offsets\":[0,1]}}";
    uint8_t body[8 + sizeof hdr + 8];
    size_t hlen = (sizeof hdr - 1 + 7) / 8 * 8;
    uint64_t le = hlen;
    memcpy(body, &le, 8);
    memset(body + 8, ' ', hlen);
    memcpy(body + 8, hdr, sizeof hdr - 1);
    body[8 + hlen] = 42;
    tf_doc_t *in = NULL;
    ck_assert_int_eq(tf_doc_decode(body, 8 + hlen + 1, 0, &in), TF_OK);
    tf_client_t *cs[2] = {client(TF_TRANSPORT_HTTP), ucx_client()};
    for (int k = 0; k < 2; k++) {
        tf_doc_t *got = NULL;
        ck_assert_int_eq(tf_fetch(cs[k], url("/v1/call/%s", "echo"), in, &got), TF_OK);
        ck_assert_msg(strncmp(tf_client_last(cs[k])->transport, k ? "ucx/" : "http", 4) == 0,
                      "%s", tf_client_last(cs[k])->transport);
        void *enc;
        size_t len;
        ck_assert_int_eq(tf_doc_encode(got, &enc, &len), TF_OK);
        ck_assert_msg(memmem(enc, len, "\"__metadata__\":{}", 17) != NULL, "%s: %.*s",
                      tf_client_last(cs[k])->transport, (int)len, (const char *)enc);
        tf_free(enc);
        tf_doc_free(got);
        tf_client_free(cs[k]);
    }
    tf_doc_free(in);
    /* and over HTTP as curl sends it, the reply's bytes */
    const char *f = td_tmpfile(0, body, 8 + hlen + 1);
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "curl -sS --data-binary @%s -H 'Content-Type: "
             "application/x-safetensors' %s/v1/call/echo | grep -c -a '\"__metadata__\":{}'",
             f, D.base);
    td_run(cmd, out, sizeof out);
    ck_assert_msg(atoi(out) == 1, "%s", out);
    stop();
}
END_TEST

/* One client of the transport, in a process of its own (UCX does not survive fork; and one
 * that aborts must not take the test with it): connects over tcp only (no_shm: what a client
 * of another uid gets, as the deployed daemon runs) and waits delay_ms, its handshake most
 * likely still under way; then, graceful, closes the connection and frees the worker, or
 * else _exit()s with its worker, endpoint and wireup as they are (what SIGKILL leaves: the
 * kernel closes its sockets). Exits 0, or 1 when it could not connect. */
static void client_mid_handshake(const tfp_up_resp_t *resp, const char *ident, long delay_ms,
                                 int graceful)
{
    tfp_err_t err;
    char why[256];
    tfx_ucxc_t *u = tfx_ucxc_new_tuned(NULL, NULL, 1, &err);
    if (!u)
        _exit(1);
    tfx_ucxc_conn_t *conn = NULL;
    tfp_status_t st = tfx_ucxc_connect_start(u, resp->worker_address, resp->worker_address_len,
                                             resp->same_host, resp->token, ident, 0, 2000,
                                             &conn, why, sizeof why);
    if (st != TFP_OK && st != TFP_EAGAIN)
        _exit(1);
    sleep_ms(delay_ms);
    if (graceful) {
        tfx_ucxc_conn_close(conn);
        tfx_ucxc_free(u);
    }
    _exit(0);
}

/* 40 clients_mid_handshake (graceful or not) at different points of the wireup, one after
 * the other, tfetchd alive after each; then a put and a get over UCX still work. Returns how
 * many clients a signal killed. */
static int clients_mid_handshake(int graceful)
{
    tfp_up_host_t me;
    tfp_err_t err;
    char ident[TFP_UP_MAX_IDENT + 1];
    ck_assert_int_eq(tfx_hostid_get(&me, &err), TFP_OK);
    ck_assert_int_eq(tfp_up_ident_format(&me, ident, sizeof ident, &err), TFP_OK);
    int aborted = 0;
    for (int i = 0; i < 40; i++) {
        tfp_up_resp_t resp;
        post_upgrade(&me, &resp);
        pid_t kid = fork();
        ck_assert_int_ge(kid, 0);
        if (kid == 0)
            client_mid_handshake(&resp, ident, i % 8, graceful);
        tfp_up_resp_clear(&resp);
        int ws = 0;
        ck_assert_int_eq(waitpid(kid, &ws, 0), kid);
        ck_assert_msg(!WIFEXITED(ws) || WEXITSTATUS(ws) == 0, "client %d could not connect", i);
        aborted += WIFSIGNALED(ws);
        ck_assert_msg(waitpid(D.pid, &ws, WNOHANG) == 0, "tfetchd died after %d %sclients "
                      "(%s %d; %d clients aborted)", i + 1, graceful ? "" : "killed ",
                      WIFSIGNALED(ws) ? "signal" : "exit",
                      WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws), aborted);
    }
    tf_client_t *c = ucx_client();
    tf_doc_t *in = f32_doc("w", 8, 1), *got = NULL;
    ck_assert_int_eq(tf_put(c, url("/v1/tensors/%s", "w"), in), TF_OK);
    ck_assert_int_eq(tf_get(c, url("/v1/tensors/%s", "w"), 0, &got), TF_OK);
    ck_assert_msg(strncmp(tf_client_last(c)->transport, "ucx/", 4) == 0, "%s",
                  tf_client_last(c)->transport);
    ck_assert(docs_equal(got, in));
    tf_doc_free(got);
    tf_doc_free(in);
    tf_client_free(c);
    ck_assert_msg(waitpid(D.pid, NULL, WNOHANG) == 0, "tfetchd died");
    return aborted;
}

/* Whether the UCX that runs here is one whose tcp transport dies when a peer vanishes
 * mid-wireup (1.13 and older: ucp_request_send_state_ff asserts on a queued wireup REQUEST
 * or REPLY when the failed endpoint's pending queue is purged; or uct_tcp_iface_progress
 * reads a receive buffer a callback released). TFETCH_TEST_UCX_KILLED=1 runs the test
 * that shows it anyway. */
static int ucx_dies_with_wireup_peer(void)
{
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    const char *force = getenv("TFETCH_TEST_UCX_KILLED");
    if (force && force[0] == '1')
        return 0;
    if (major > 1 || (major == 1 && minor > 13))
        return 0;
    fprintf(stderr, "ucx_killed_mid_handshake: skipped: UCX %u.%u.%u's tcp transport aborts "
            "tfetchd when a client dies mid-wireup (a known UCX bug, tfetchd(8) BUGS; "
            "TFETCH_TEST_UCX_KILLED=1 runs it)\n", major, minor, release);
    return 1;
}

/* Clients that die (no close, no free: what SIGKILL leaves) while their UCX handshake is
 * under way, 40 of them at different points of the wireup. Nothing a client does may take
 * tfetchd down: it serves on, over UCX too. With UCX 1.13 tfetchd dies within ~2-15 such
 * clients (SIGABRT in UCX's progress thread), so the test is skipped there. */
START_TEST(ucx_killed_mid_handshake)
{
    if (!have_daemon("ucx_killed_mid_handshake") || ucx_dies_with_wireup_peer())
        return;
    start(NULL);
    clients_mid_handshake(0);
    stop();
}
END_TEST

/* Clients that close their connection, and go, while its UCX handshake is still under way.
 * UCX 1.13 breaks when a worker goes mid-wireup over tcp: the client aborted in
 * ucp_worker_destroy (a wireup REQ still queued), and tfetchd died (SIGSEGV in uct_tcp's
 * receive, or an assertion on a wireup REP left queued on its reverse connect). The client's
 * close now lets the handshake settle (LINGER_MS) and its closes finish before the worker
 * goes: every client here ends normally, and tfetchd serves on, over UCX too. */
START_TEST(ucx_closed_mid_handshake)
{
    if (!have_daemon("ucx_closed_mid_handshake"))
        return;
    start(NULL);
    int aborted = clients_mid_handshake(1);
    ck_assert_msg(aborted == 0, "%d of 40 clients were killed by a signal", aborted);
    stop();
}
END_TEST
#endif

Suite *suite_ucx(void)
{
    Suite *s = suite_create("ucx");
#ifndef HAVE_UCX
    fputs("ucx: libtfetch was built without UCX: only its answers without it are tested\n",
          stderr);
    TCase *no = tcase_create("noucx");
    tcase_add_test(no, noucx_auto_falls_back_ucx_fails);
    tcase_set_timeout(no, 60);
    suite_add_tcase(s, no);
#else
    TCase *up = tcase_create("upgrade");
    tcase_add_test(up, ucx_upgrade_after_first_request);
    tcase_add_test(up, ucx_policies);
    tcase_add_test(up, ucx_first_request_upgrades_same_host);
    tcase_add_test(up, ucx_memory_types_reported);
    tcase_add_test(up, ucx_callback_does_not_negotiate);
    tcase_add_test(up, ucx_server_without_ucx);
    tcase_add_test(up, ucx_cli_transport);
    tcase_set_timeout(up, 60);
    suite_add_tcase(s, up);

    TCase *ops = tcase_create("ops");
    tcase_add_test(ops, ucx_every_op);
    tcase_add_test(ops, echo_keeps_empty_metadata);
    tcase_add_test(ops, ucx_long_poll_cancel_free);
    tcase_add_test(ops, ucx_every_dtype_round_trips);
    tcase_add_test(ops, ucx_big_tensor);
    tcase_add_test(ops, ucx_parts_progress);
    tcase_add_test(ops, ucx_packed_doc_put);
    tcase_add_test(ops, ucx_borrowed_doc_prefixed);
    tcase_add_test(ops, ucx_reply_buffers_reused);
    tcase_add_test(ops, ucx_thousand_in_flight);
    tcase_set_timeout(ops, 300);
    suite_add_tcase(s, ops);

    TCase *adm = tcase_create("admission");
    tcase_add_test(adm, ucx_hello_tokens);
    tcase_add_test(adm, ucx_raw_frames);
    tcase_set_timeout(adm, 60);
    suite_add_tcase(s, adm);

    TCase *drv = tcase_create("driven");
    tcase_add_test(drv, ucx_blocking_calls_drive_the_worker);
    tcase_add_test(drv, ucx_drive_after_the_thread_finished);
    tcase_add_test(drv, ucx_driving_delivers_others_on_the_driver);
    tcase_add_test(drv, ucx_daemon_killed_while_driving);
    tcase_add_test(drv, ucx_driving_timeout_cancel_free);
    tcase_add_test(drv, stall_detected_http_and_ucx);
    tcase_add_test(drv, ucx_reply_cap);
    tcase_add_test(drv, ucx_orphaned_send_uncounted);
    tcase_set_timeout(drv, 120);
    suite_add_tcase(s, drv);

    TCase *faults = tcase_create("faults");
    tcase_add_test(faults, ucx_daemon_killed_mid_request);
    tcase_add_test(faults, ucx_daemon_killed_mid_put);
    tcase_add_test(faults, ucx_client_killed_mid_put);
    tcase_add_test(faults, ucx_connection_lost_retried_over_http);
    tcase_set_timeout(faults, 120);
    suite_add_tcase(s, faults);

    TCase *hs = tcase_create("handshake");
    tcase_add_test(hs, ucx_closed_mid_handshake);
    tcase_add_test(hs, ucx_killed_mid_handshake);
    tcase_set_timeout(hs, 120);
    suite_add_tcase(s, hs);
#endif
    return s;
}
