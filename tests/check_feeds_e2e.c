/* check_feeds_e2e.c - end-to-end suite for device feeds: the real tfetchd (port 0, the one
 * spawner in tests/fixtures.c) driven over HTTP with plain sockets, as any producer or
 * consumer would (not through libtfetch's feed API): declaring (201/200/409), infeed, pop
 * and ack, signature mismatches (422), full queues (429, Prefer: wait), seq retries, split
 * and broadcast rounds, done (410), reset, the outfeed with two readers and 410 for what was
 * trimmed, lease expiry, a consumer process that dies holding an item, metrics and info.
 * Each test starts its own daemon (Check forks per test), so tests share nothing.
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "client/tfetch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static td_daemon_t D;

static void start(void)
{
    ck_assert_msg(td_start(&D, NULL) == 0, "tfetchd did not start");
}

static void stop_clean(void)
{
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- a plain HTTP/1.1 client: one request per connection ---------------------------------- */

typedef struct {
    int status;
    char head[8192];                /* the status line and headers */
    uint8_t body[1 << 16];
    size_t len;
} resp_t;

static resp_t R;

/* Sends method path with extra header lines hdrs ("Name: v\r\n..."; may be NULL) and body;
 * reads the whole answer into *out. Returns the status. */
static int request_to(resp_t *out, const char *method, const char *path, const char *hdrs,
                      const void *body, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)D.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char head[4096];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                     "close\r\nContent-Length: %zu\r\n%s\r\n", method, path, len,
                     hdrs ? hdrs : "");
    ck_assert(n > 0 && (size_t)n < sizeof head);
    ck_assert_int_eq(send(fd, head, (size_t)n, MSG_NOSIGNAL), n);
    if (len)
        ck_assert_int_eq(send(fd, body, len, MSG_NOSIGNAL), (ssize_t)len);
    static char buf[sizeof out->head + sizeof out->body];
    size_t got = 0;
    ssize_t k;
    while (got < sizeof buf && (k = recv(fd, buf + got, sizeof buf - got, 0)) > 0)
        got += (size_t)k;
    close(fd);
    char *end = memmem(buf, got, "\r\n\r\n", 4);
    ck_assert_msg(end != NULL, "no header block in %zu bytes", got);
    size_t hl = (size_t)(end - buf) + 2;
    ck_assert(hl < sizeof out->head);
    memcpy(out->head, buf, hl);
    out->head[hl] = '\0';
    out->len = got - hl - 2;
    memcpy(out->body, end + 4, out->len);
    out->body[out->len < sizeof out->body ? out->len : sizeof out->body - 1] = 0;
    out->status = atoi(out->head + 9);
    return out->status;
}

static int request(const char *method, const char *path, const char *hdrs, const void *body,
                   size_t len)
{
    return request_to(&R, method, path, hdrs, body, len);
}

/* A response header's value (static copy), or NULL. */
static const char *header(const resp_t *r, const char *name)
{
    static char v[256];
    size_t n = strlen(name);
    for (const char *p = strstr(r->head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n"))
        if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') {
            const char *s = p + 3 + n;
            s += strspn(s, " ");
            size_t l = strcspn(s, "\r");
            snprintf(v, sizeof v, "%.*s", (int)(l < sizeof v ? l : sizeof v - 1), s);
            return v;
        }
    return NULL;
}

static long hnum(const resp_t *r, const char *name)
{
    const char *v = header(r, name);
    ck_assert_msg(v != NULL, "no %s header in:\n%s", name, r->head);
    return atol(v);
}

static const char *path(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *path(const char *fmt, ...)
{
    static char p[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, sizeof p, fmt, ap);
    va_end(ap);
    return p;
}

#define BODY_HAS(s) ck_assert_msg(strstr((const char *)R.body, s) != NULL, "body: %s", R.body)

static void declare(const char *feed, const char *json)
{
    int st = request("PUT", path("/v1/feeds/%s", feed), "Content-Type: application/json\r\n",
                     json, strlen(json));
    ck_assert_msg(st == 201, "declare %s: %d %s", feed, st, R.body);
}

/* Infeeds n floats as a raw F32 tensor of the given shape ("2,3"), with extra headers. */
static int infeed_raw(const char *p, const float *v, size_t n, const char *shape,
                      const char *extra)
{
    char h[1024];
    snprintf(h, sizeof h, "Content-Type: application/octet-stream\r\nTfetch-Dtype: F32\r\n"
             "Tfetch-Shape: %s\r\n%s", shape, extra ? extra : "");
    return request("POST", p, h, v, n * sizeof *v);
}

/* The one tensor of the safetensors answer in R, its data copied into out (n floats). */
static void answer_floats(const char *name, float *out, size_t n)
{
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_doc_decode(R.body, R.len, TF_COPY, &doc), TF_OK);
    const tf_tensor_t *t = tf_doc_find(doc, name);
    ck_assert_msg(t != NULL, "no tensor '%s' in the answer", name);
    ck_assert_int_eq(t->nbytes, n * sizeof *out);
    memcpy(out, t->data, t->nbytes);
    tf_doc_free(doc);
}

#define POP(feed, dev, consumer, query)                                                     \
    request("POST", path("/v1/feeds/%s/devices/%s/pop%s", feed, dev, query),               \
            "Tfetch-Consumer: " consumer "\r\n", NULL, 0)

#define SIG23 "\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[2,3]}]"

/* ---- declaring ---------------------------------------------------------------------------- */

START_TEST(feeds_e2e_declare)
{
    start();
    const char *j = "{\"devices\":2," SIG23 "}";
    declare("f", j);
    BODY_HAS("\"name\":\"f\"");
    BODY_HAS("\"fanout\":\"per_device\"");
    BODY_HAS("\"generation\":1");
    ck_assert_int_eq(request("PUT", "/v1/feeds/f", NULL, j, strlen(j)), 200);
    const char *other = "{\"devices\":3," SIG23 "}";
    ck_assert_int_eq(request("PUT", "/v1/feeds/f", NULL, other, strlen(other)), 409);
    BODY_HAS("\"code\":\"TF_ECONFLICT\"");
    ck_assert_int_eq(request("PUT", "/v1/feeds/g", NULL, "{\"devices\":2}", 13), 400);
    BODY_HAS("signature must list");
    ck_assert_int_eq(request("PUT", "/v1/feeds/g", NULL, "{", 1), 400);
    ck_assert_int_eq(request("PUT", "/v1/feeds/bad%20name", NULL, j, strlen(j)), 400);
    ck_assert_int_eq(request("GET", "/v1/feeds/f", NULL, NULL, 0), 200);
    BODY_HAS("\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[2,3]}]");
    BODY_HAS("\"outfeed\":{\"first_seq\":1,\"last_seq\":0}");
    declare("a", j);
    ck_assert_int_eq(request("GET", "/v1/feeds", NULL, NULL, 0), 200);
    ck_assert_str_eq((const char *)R.body, "{\"feeds\":[\"a\",\"f\"]}");
    ck_assert_int_eq(request("GET", "/v1/feeds/nope", NULL, NULL, 0), 404);
    BODY_HAS("no feed named 'nope'");
    ck_assert_int_eq(request("POST", "/v1/feeds/f", NULL, NULL, 0), 405);
    ck_assert_int_eq(request("GET", "/v1/feeds/f/devices/0/pop", NULL, NULL, 0), 405);
    ck_assert_int_eq(request("DELETE", "/v1/feeds/a", NULL, NULL, 0), 204);
    ck_assert_int_eq(request("DELETE", "/v1/feeds/a", NULL, NULL, 0), 404);
    ck_assert_int_eq(request("GET", "/v1/info", NULL, NULL, 0), 200);
    BODY_HAS("\"feeds\"");
    BODY_HAS("\"feed_memory\":");
    stop_clean();
}
END_TEST

/* ---- producers and consumers -------------------------------------------------------------- */

START_TEST(feeds_e2e_infeed_pop_ack)
{
    start();
    declare("f", "{\"devices\":[\"gpu0\",\"gpu1\"]," SIG23 "}");
    float v[6] = {1, 2, 3, 4, 5, 6}, w[6];
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/gpu0/infeed", v, 6, "2,3", NULL), 201);
    ck_assert_str_eq((const char *)R.body, "{\"seq\":1,\"round\":1,\"generation\":1}");
    /* a safetensors body too; the device by index */
    tf_doc_t *doc = tf_doc_new();
    int64_t shape[2] = {2, 3};
    v[0] = 7;
    ck_assert_int_eq(tf_doc_add(doc, "x", TF_F32, 2, shape, v, sizeof v, TF_COPY), TF_OK);
    void *st;
    size_t st_len;
    ck_assert_int_eq(tf_doc_encode(doc, &st, &st_len), TF_OK);
    ck_assert_int_eq(request("POST", "/v1/feeds/f/devices/0/infeed",
                             "Content-Type: application/x-safetensors\r\n", st, st_len), 201);
    ck_assert_str_eq((const char *)R.body, "{\"seq\":2,\"round\":2,\"generation\":1}");
    /* mismatches: 422 naming the difference */
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "3,2", NULL), 422);
    BODY_HAS("tensor 'x' has shape [3,2]; the signature says [2,3]");
    ck_assert_int_eq(tf_doc_add(doc, "y", TF_F32, 2, shape, v, sizeof v, TF_COPY), TF_OK);
    tf_free(st);
    ck_assert_int_eq(tf_doc_encode(doc, &st, &st_len), TF_OK);
    ck_assert_int_eq(request("POST", "/v1/feeds/f/devices/0/infeed", NULL, st, st_len), 422);
    BODY_HAS("tensor 'y' is not in the signature");
    tf_free(st);
    tf_doc_free(doc);
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/infeed", v, 6, "2,3", NULL), 409);  /* a round */
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/gpu7/infeed", v, 6, "2,3", NULL), 404);
    ck_assert_int_eq(infeed_raw("/v1/feeds/g/devices/0/infeed", v, 6, "2,3", NULL), 404);

    /* pop: the item and its positions; the queue keeps it until acked */
    ck_assert_int_eq(request("POST", "/v1/feeds/f/devices/0/pop", NULL, NULL, 0), 400);
    BODY_HAS("Tfetch-Consumer is required");
    ck_assert_int_eq(POP("f", "0", "c1", ""), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Position"), 1);
    ck_assert_int_eq(hnum(&R, "Tfetch-Seq"), 1);
    ck_assert_int_eq(hnum(&R, "Tfetch-Round"), 1);
    ck_assert_int_eq(hnum(&R, "Tfetch-Generation"), 1);
    answer_floats("x", w, 6);
    ck_assert_float_eq(w[0], 1);
    ck_assert_float_eq(w[5], 6);
    ck_assert_int_eq(POP("f", "0", "c2", ""), 409);     /* one consumer per device queue */
    BODY_HAS("attached to consumer 'c1'");
    ck_assert_int_eq(POP("f", "0", "c1", "?ack=1"), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Position"), 2);
    answer_floats("x", w, 6);
    ck_assert_float_eq(w[0], 7);
    ck_assert_int_eq(POP("f", "0", "c1", ""), 204);
    ck_assert_int_eq(R.len, 0);
    ck_assert_int_eq(request("GET", "/v1/feeds/f", NULL, NULL, 0), 200);
    BODY_HAS("{\"name\":\"gpu0\",\"depth\":1,\"bytes\":24,\"high_water\":2,\"published\":2,"
             "\"delivered\":2,\"released\":1,\"consumer\":\"c1\",\"redeliveries\":0");
    ck_assert_int_eq(request("POST", "/v1/feeds/f/devices/0/ack?through=2",
                             "Tfetch-Consumer: c2\r\n", NULL, 0), 409);
    ck_assert_int_eq(request("POST", "/v1/feeds/f/devices/0/ack",
                             "Tfetch-Consumer: c1\r\n", NULL, 0), 400);
    ck_assert_int_eq(request("POST", "/v1/feeds/f/devices/0/ack?through=2",
                             "Tfetch-Consumer: c1\r\n", NULL, 0), 204);
    ck_assert_int_eq(request("GET", "/v1/feeds/f", NULL, NULL, 0), 200);
    BODY_HAS("\"depth\":0,\"bytes\":0");
    /* the JSON view of an item */
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/1/infeed", v, 6, "2,3", NULL), 201);
    ck_assert_int_eq(request("POST", "/v1/feeds/f/devices/1/pop",
                             "Tfetch-Consumer: c\r\nAccept: application/json\r\n", NULL, 0), 200);
    BODY_HAS("{\"x\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data\":[[7,2,3],[4,5,6]]}}");
    stop_clean();
}
END_TEST

START_TEST(feeds_e2e_seq_retry)
{
    start();
    declare("f", "{" SIG23 "}");
    float v[6] = {0};
    const char *h1 = "Tfetch-Seq: 1\r\nTfetch-Producer: loader-0\r\n";
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3", h1), 201);
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3", h1), 200);
    ck_assert_str_eq((const char *)R.body, "{\"seq\":1,\"round\":1,\"generation\":1}");
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3",
                                "Tfetch-Seq: 3\r\nTfetch-Producer: loader-0\r\n"), 409);
    BODY_HAS("sequence gap: expected 2");
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3",
                                "Tfetch-Seq: 0\r\n"), 400);
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3",
                                "Tfetch-Seq: 1\r\nTfetch-Producer: bad/id\r\n"), 400);
    /* without Tfetch-Producer the stream is the user id */
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3",
                                "Tfetch-Seq: 1\r\nTfetch-User: alice\r\n"), 201);
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3",
                                "Tfetch-Seq: 1\r\nTfetch-Producer: alice\r\n"), 200);
    ck_assert_int_eq(request("GET", "/v1/feeds/f", NULL, NULL, 0), 200);
    BODY_HAS("\"depth\":2,");
    stop_clean();
}
END_TEST

/* Until the daemon holds n suspended requests (its /metrics), up to 30 s: the daemon may run
 * under valgrind. */
static void await_waiting(unsigned n)
{
    char want[64];
    snprintf(want, sizeof want, "\ntfetch_waiting_requests %u\n", n);
    for (int i = 0; i < 600; i++) {
        if (request("GET", "/metrics", NULL, NULL, 0) == 200 &&
            strstr((const char *)R.body, want))
            return;
        sleep_ms(50);
    }
    ck_abort_msg("the daemon never held %u waiting requests", n);
}

/* Pushes F32 [2,3] {v0, 0...} to in with headers from a child process, which exits 0 when
 * the answer is want (and its body holds body, when given), else with the answer's status
 * class (2 for 201, 4 for 409, ...). */
static pid_t push_in_child(const char *in, float v0, const char *headers, int want,
                           const char *body)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        float v[6] = {v0};
        int st = infeed_raw(in, v, 6, "2,3", headers);
        _exit(st == want && (!body || strstr((const char *)R.body, body)) ? 0 : st / 100);
    }
    return pid;
}

/* Waits for a push_in_child and checks that it got what it wanted. */
static void child_got_it(pid_t pid, const char *what)
{
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "%s: not the answer expected (exit %d: the status class, 2 = enqueued)", what,
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* A producer's pushes may arrive out of order: one ahead of its stream (by at most 64) waits
 * with Prefer: wait for those before it and is queued after them; without a wait, or
 * further ahead, or when the missing one never comes, it is the 409 gap. */
START_TEST(feeds_e2e_seq_ahead_waits)
{
    start();
    declare("f", "{" SIG23 "}");
    const char *in = "/v1/feeds/f/devices/0/infeed";
    float v[6] = {0};
    const char *ahead2 = "Tfetch-Seq: 2\r\nTfetch-Producer: p\r\nPrefer: wait=10000\r\n";
    pid_t pid = push_in_child(in, 2, ahead2, 201, "\"seq\":2,\"round\":2");
    await_waiting(1);                               /* seq 2 is waiting now */
    ck_assert_int_eq(request("GET", "/v1/feeds/f", NULL, NULL, 0), 200);
    BODY_HAS("\"depth\":0,");
    v[0] = 1;
    ck_assert_int_eq(infeed_raw(in, v, 6, "2,3", "Tfetch-Seq: 1\r\nTfetch-Producer: p\r\n"),
                     201);
    child_got_it(pid, "the push ahead");
    float w[6];
    ck_assert_int_eq(POP("f", "0", "c", ""), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Seq"), 1);
    answer_floats("x", w, 6);
    ck_assert_float_eq(w[0], 1);
    ck_assert_int_eq(POP("f", "0", "c", "?ack=1"), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Seq"), 2);
    answer_floats("x", w, 6);
    ck_assert_float_eq(w[0], 2);
    /* pushes that wait count among the waiters (max-waiters): one more is 503 at once */
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    const char *const few[] = {"--max-waiters", "1", NULL};
    ck_assert_msg(td_start(&D, few) == 0, "tfetchd did not start");
    declare("f", "{" SIG23 "}");
    pid = push_in_child(in, 2, ahead2, 201, NULL);
    await_waiting(1);
    ck_assert_int_eq(infeed_raw(in, v, 6, "2,3", "Tfetch-Seq: 3\r\nTfetch-Producer: p\r\n"
                                                  "Prefer: wait=10000\r\n"), 503);
    BODY_HAS("too many waiting requests");
    ck_assert_int_eq(infeed_raw(in, v, 6, "2,3", "Tfetch-Seq: 1\r\nTfetch-Producer: p\r\n"),
                     201);
    child_got_it(pid, "the push ahead");
    /* no wait: the gap at once; too far ahead: at once even with a wait */
    const char *p4 = "Tfetch-Seq: 4\r\nTfetch-Producer: p\r\n";
    ck_assert_int_eq(infeed_raw(in, v, 6, "2,3", p4), 409);
    BODY_HAS("sequence gap: expected 3");
    uint64_t t0 = now_ms();
    ck_assert_int_eq(infeed_raw(in, v, 6, "2,3", "Tfetch-Seq: 67\r\nTfetch-Producer: p\r\n"
                                                  "Prefer: wait=5000\r\n"), 409);
    ck_assert_uint_lt(now_ms() - t0, 4000);
    /* ahead, and the missing one never comes: 409 when the wait ends */
    t0 = now_ms();
    ck_assert_int_eq(infeed_raw(in, v, 6, "2,3", "Tfetch-Seq: 66\r\nTfetch-Producer: p\r\n"
                                                  "Prefer: wait=300\r\n"), 409);
    ck_assert_uint_ge(now_ms() - t0, 250);
    BODY_HAS("sequence gap: expected 3");
    ck_assert_int_eq(request("GET", "/v1/feeds/f", NULL, NULL, 0), 200);
    BODY_HAS("\"published\":2,");
    stop_clean();
}
END_TEST

/* A reset while pushes wait (ahead of their stream, or for room) ends their wait with 409:
 * they belong to the old generation, and enqueued in the new one they would take seqs the
 * producer is about to push again (its own would then be dropped as duplicates). */
START_TEST(feeds_e2e_reset_ends_producer_waits)
{
    start();
    declare("f", "{" SIG23 ",\"max_items\":1}");
    const char *in = "/v1/feeds/f/devices/0/infeed";
    float v[6] = {0};
    v[0] = 1;
    ck_assert_int_eq(infeed_raw(in, v, 6, "2,3", "Tfetch-Seq: 1\r\nTfetch-Producer: p\r\n"),
                     201);
    const char *reset = "was reset while this push waited";
    pid_t ahead = push_in_child(in, 3, "Tfetch-Seq: 3\r\nTfetch-Producer: p\r\n"
                                       "Prefer: wait=10000\r\n", 409, reset);
    pid_t full = push_in_child(in, 9, "Tfetch-Producer: q\r\nPrefer: wait=10000\r\n", 409,
                               reset);
    await_waiting(2);                               /* both wait now */
    ck_assert_int_eq(request("POST", "/v1/feeds/f/reset", NULL, NULL, 0), 200);
    child_got_it(ahead, "the push ahead");
    child_got_it(full, "the push waiting for room");
    /* the producer starts over: its seqs are its own again */
    v[0] = 100;
    ck_assert_int_eq(infeed_raw(in, v, 6, "2,3", "Tfetch-Seq: 1\r\nTfetch-Producer: p\r\n"),
                     201);
    ck_assert_int_eq(POP("f", "0", "c", ""), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Generation"), 2);
    float w[6];
    answer_floats("x", w, 6);
    ck_assert_float_eq(w[0], 100);
    ck_assert_int_eq(request("GET", "/v1/feeds/f", NULL, NULL, 0), 200);
    BODY_HAS("\"published\":1,");
    stop_clean();
}
END_TEST

START_TEST(feeds_e2e_full_429_and_wait)
{
    start();
    declare("f", "{" SIG23 ",\"max_items\":1}");
    float v[6] = {0};
    const char *in = "/v1/feeds/f/devices/0/infeed";
    ck_assert_int_eq(infeed_raw(in, v, 6, "2,3", NULL), 201);
    ck_assert_int_eq(infeed_raw(in, v, 6, "2,3", NULL), 429);
    BODY_HAS("\"code\":\"TF_EFULL\"");
    ck_assert_str_eq(header(&R, "Retry-After"), "1");
    uint64_t t0 = now_ms();
    ck_assert_int_eq(infeed_raw(in, v, 6, "2,3", "Prefer: wait=300\r\n"), 429);
    ck_assert_uint_ge(now_ms() - t0, 250);
    ck_assert_int_eq(infeed_raw(in, v, 6, "2,3", "Prefer: wait=nope\r\n"), 400);

    /* a blocked producer proceeds once the consumer acks */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        v[0] = 42;
        int st = infeed_raw(in, v, 6, "2,3", "Prefer: respond-async, wait=10000\r\n");
        _exit(st == 201 ? 0 : 1);
    }
    sleep_ms(300);
    ck_assert_int_eq(POP("f", "0", "c", ""), 200);
    t0 = now_ms();
    ck_assert_int_eq(POP("f", "0", "c", "?ack=1&wait=5000"), 200);       /* the waiter's item */
    ck_assert_uint_lt(now_ms() - t0, 4000);
    float w[6];
    answer_floats("x", w, 6);
    ck_assert_float_eq(w[0], 42);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the waiting producer failed");
    ck_assert_int_eq(request("GET", "/metrics", NULL, NULL, 0), 200);
    BODY_HAS("tfetch_feed_producer_blocked_seconds_total{feed=\"f\"}");
    stop_clean();
}
END_TEST

START_TEST(feeds_e2e_pop_waits)
{
    start();
    declare("f", "{" SIG23 "}");
    uint64_t t0 = now_ms();
    ck_assert_int_eq(POP("f", "0", "c", "?wait=300"), 204);
    ck_assert_uint_ge(now_ms() - t0, 250);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        sleep_ms(300);
        float v[6] = {9};
        _exit(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3", NULL) == 201 ? 0 : 1);
    }
    t0 = now_ms();
    ck_assert_int_eq(POP("f", "0", "c", "?wait=10000"), 200);
    ck_assert_uint_lt(now_ms() - t0, 5000);
    float w[6];
    answer_floats("x", w, 6);
    ck_assert_float_eq(w[0], 9);
    int status;
    waitpid(pid, &status, 0);
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    ck_assert_int_eq(POP("f", "0", "c", "?wait=abc"), 400);
    stop_clean();
}
END_TEST

/* ---- rounds ------------------------------------------------------------------------------- */

START_TEST(feeds_e2e_split_and_broadcast)
{
    start();
    declare("s", "{\"devices\":2,\"fanout\":\"split\",\"signature\":[{\"name\":\"x\","
                 "\"dtype\":\"F32\",\"shape\":[4,2]}]}");
    float v[8] = {0, 1, 2, 3, 4, 5, 6, 7}, w[4];
    ck_assert_int_eq(infeed_raw("/v1/feeds/s/devices/0/infeed", v, 8, "4,2", NULL), 409);
    ck_assert_int_eq(infeed_raw("/v1/feeds/s/infeed", v, 8, "4,2", "Tfetch-Seq: 1\r\n"), 201);
    ck_assert_str_eq((const char *)R.body, "{\"seq\":1,\"round\":1,\"generation\":1}");
    ck_assert_int_eq(infeed_raw("/v1/feeds/s/infeed", v, 8, "4,2", "Tfetch-Seq: 1\r\n"), 200);
    ck_assert_int_eq(POP("s", "1", "c1", ""), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Round"), 1);
    answer_floats("x", w, 4);                       /* device 1: rows 2..3 */
    ck_assert_float_eq(w[0], 4);
    ck_assert_float_eq(w[3], 7);
    ck_assert_int_eq(POP("s", "0", "c0", ""), 200);
    answer_floats("x", w, 4);
    ck_assert_float_eq(w[0], 0);
    ck_assert_float_eq(w[3], 3);
    ck_assert_int_eq(POP("s", "0", "c0", ""), 204);  /* the retry enqueued nothing */

    declare("b", "{\"devices\":3,\"fanout\":\"broadcast\"," SIG23 "}");
    float u[6] = {5, 4, 3, 2, 1, 0}, x[6];
    ck_assert_int_eq(infeed_raw("/v1/feeds/b/infeed", u, 6, "2,3", NULL), 201);
    ck_assert_int_eq(infeed_raw("/v1/feeds/b/infeed", u, 6, "2,3", NULL), 201);
    ck_assert_str_eq((const char *)R.body, "{\"seq\":2,\"round\":2,\"generation\":1}");
    for (int d = 0; d < 3; d++)
        for (int round = 1; round <= 2; round++) {
            ck_assert_int_eq(request("POST", path("/v1/feeds/b/devices/%d/pop", d),
                                     "Tfetch-Consumer: c\r\n", NULL, 0), 200);
            ck_assert_int_eq(hnum(&R, "Tfetch-Round"), round);
            answer_floats("x", x, 6);
            ck_assert_int_eq(memcmp(x, u, sizeof u), 0);
        }
    stop_clean();
}
END_TEST

/* ---- lifecycle ---------------------------------------------------------------------------- */

START_TEST(feeds_e2e_done_410)
{
    start();
    declare("f", "{\"devices\":2," SIG23 "}");
    float v[6] = {0};
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3", NULL), 201);
    pid_t pid = fork();                             /* a consumer long-polling device 1 */
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        resp_t *r = malloc(sizeof *r);
        int st = request_to(r, "POST", "/v1/feeds/f/devices/1/pop?wait=20000",
                            "Tfetch-Consumer: c1\r\n", NULL, 0);
        _exit(st == 410 && strstr((char *)r->body, "TF_EDONE") ? 0 : 1);
    }
    sleep_ms(300);
    uint64_t t0 = now_ms();
    ck_assert_int_eq(request("POST", "/v1/feeds/f/done", NULL, NULL, 0), 200);
    BODY_HAS("\"done\":true");
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3", NULL), 409);
    ck_assert_int_eq(POP("f", "0", "c0", ""), 200);           /* drains first */
    ck_assert_int_eq(POP("f", "0", "c0", "?wait=5000"), 410);
    BODY_HAS("\"code\":\"TF_EDONE\"");
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "device 1's loop did not stop");
    ck_assert_uint_lt(now_ms() - t0, 5000);
    stop_clean();
}
END_TEST

START_TEST(feeds_e2e_reset)
{
    start();
    declare("f", "{\"devices\":2," SIG23 "}");
    float v[6] = {0};
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3",
                                "Tfetch-Seq: 1\r\nTfetch-Producer: p\r\n"), 201);
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3",
                                "Tfetch-Seq: 2\r\nTfetch-Producer: p\r\n"), 201);
    ck_assert_int_eq(POP("f", "0", "c", ""), 200);
    pid_t pid = fork();                             /* a consumer long-polling device 1 */
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        resp_t *r = malloc(sizeof *r);
        int st = request_to(r, "POST", "/v1/feeds/f/devices/1/pop?wait=20000",
                            "Tfetch-Consumer: c1\r\n", NULL, 0);
        _exit(st == 204 && atol(header(r, "Tfetch-Generation")) == 2 ? 0 : 1);
    }
    sleep_ms(300);
    uint64_t t0 = now_ms();
    ck_assert_int_eq(request("POST", "/v1/feeds/f/reset", NULL, NULL, 0), 200);
    ck_assert_str_eq((const char *)R.body, "{\"generation\":2,\"dropped\":2}");
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the waiting pop did not end");
    ck_assert_uint_lt(now_ms() - t0, 5000);
    ck_assert_int_eq(POP("f", "0", "d", ""), 204);        /* consumer slots cleared */
    ck_assert_int_eq(hnum(&R, "Tfetch-Generation"), 2);
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3",
                                "Tfetch-Seq: 1\r\nTfetch-Producer: p\r\n"), 201);  /* anew */
    ck_assert_str_eq((const char *)R.body, "{\"seq\":1,\"round\":1,\"generation\":2}");
    ck_assert_int_eq(POP("f", "0", "d", ""), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Position"), 1);
    ck_assert_int_eq(hnum(&R, "Tfetch-Generation"), 2);
    ck_assert_int_eq(request("GET", "/v1/feeds/f", NULL, NULL, 0), 200);
    BODY_HAS("\"dropped\":2");
    stop_clean();
}
END_TEST

/* ---- outfeed ------------------------------------------------------------------------------ */

START_TEST(feeds_e2e_outfeed_readers)
{
    start();
    declare("f", "{\"devices\":2," SIG23 ",\"outfeed_items\":2}");
    float loss[1];
    for (int i = 1; i <= 3; i++) {
        loss[0] = (float)i / 10;
        char h[256];
        snprintf(h, sizeof h, "Content-Type: application/octet-stream\r\nTfetch-Dtype: F32\r\n"
                 "Tfetch-Shape: 1\r\nTfetch-Seq: %d\r\nTfetch-Producer: step\r\n",
                 (i + 1) / 2);              /* a stream per (producer, device) */
        ck_assert_int_eq(request("POST", path("/v1/feeds/f/devices/%d/outfeed", i % 2), h,
                                 loss, sizeof loss), 201);
        ck_assert_str_eq((const char *)R.body, path("{\"seq\":%d}", i));
    }
    /* reader A from the start: the first was trimmed */
    ck_assert_int_eq(request("GET", "/v1/feeds/f/outfeed?after=0", NULL, NULL, 0), 410);
    BODY_HAS("\"code\":\"TF_EGONE\"");
    BODY_HAS("\"resume_after\":1");
    ck_assert_int_eq(request("GET", "/v1/feeds/f/outfeed?after=1", NULL, NULL, 0), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Seq"), 2);
    ck_assert_int_eq(hnum(&R, "Tfetch-Device"), 0);
    ck_assert_int_eq(hnum(&R, "Tfetch-Generation"), 1);
    float w[1];
    answer_floats("tensor", w, 1);
    ck_assert_float_eq_tol(w[0], 0.2f, 1e-6);
    /* reader B, its own cursor */
    ck_assert_int_eq(request("GET", "/v1/feeds/f/outfeed?after=2", NULL, NULL, 0), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Seq"), 3);
    ck_assert_int_eq(hnum(&R, "Tfetch-Device"), 1);
    ck_assert_int_eq(request("GET", "/v1/feeds/f/outfeed?after=3&wait=200", NULL, NULL, 0), 204);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        sleep_ms(300);
        float l = 0.4f;
        _exit(request("POST", "/v1/feeds/f/devices/1/outfeed",
                      "Content-Type: application/octet-stream\r\nTfetch-Dtype: F32\r\n"
                      "Tfetch-Shape: 1\r\n", &l, sizeof l) == 201 ? 0 : 1);
    }
    ck_assert_int_eq(request("GET", "/v1/feeds/f/outfeed?after=3&wait=10000", NULL, NULL, 0), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Seq"), 4);
    int status;
    waitpid(pid, &status, 0);
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    ck_assert_int_eq(request("GET", "/v1/feeds/f/outfeed?after=x", NULL, NULL, 0), 400);
    ck_assert_int_eq(request("GET", "/v1/feeds/f", NULL, NULL, 0), 200);
    BODY_HAS("\"outfeed\":{\"first_seq\":3,\"last_seq\":4}");
    stop_clean();
}
END_TEST

/* ---- leases ------------------------------------------------------------------------------- */

START_TEST(feeds_e2e_lease_expiry)
{
    start();
    declare("f", "{" SIG23 ",\"lease_ms\":300}");
    float v[6] = {1};
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3", NULL), 201);
    ck_assert_int_eq(POP("f", "0", "a", ""), 200);
    ck_assert_int_eq(POP("f", "0", "b", ""), 409);
    sleep_ms(800);
    ck_assert_int_eq(POP("f", "0", "b", ""), 200);            /* redelivered */
    ck_assert_int_eq(hnum(&R, "Tfetch-Position"), 1);
    ck_assert_int_eq(POP("f", "0", "b", ""), 204);            /* once */
    ck_assert_int_eq(request("POST", "/v1/feeds/f/devices/0/ack?through=1",
                             "Tfetch-Consumer: a\r\n", NULL, 0), 409);
    ck_assert_int_eq(request("GET", "/v1/feeds/f", NULL, NULL, 0), 200);
    BODY_HAS("\"consumer\":\"b\",\"redeliveries\":1");
    ck_assert_int_eq(request("GET", "/metrics", NULL, NULL, 0), 200);
    BODY_HAS("tfetch_feed_redeliveries_total{feed=\"f\",device=\"0\"} 1");
    stop_clean();
}
END_TEST

/* rewind=1: a consumer restarted under the same id gets again what it was given and never
 * acknowledged; rewind belongs to pop only, and only 1 or 0. */
START_TEST(feeds_e2e_rewind)
{
    start();
    declare("f", "{" SIG23 "}");
    for (int i = 1; i <= 4; i++) {
        float v[6] = {(float)i};
        ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3", NULL), 201);
    }
    for (int i = 1; i <= 3; i++) {
        ck_assert_int_eq(POP("f", "0", "a", ""), 200);
        ck_assert_int_eq(hnum(&R, "Tfetch-Position"), i);
    }
    ck_assert_int_eq(POP("f", "0", "a", "?ack=1&rewind=1"), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Position"), 2);
    float w[6];
    answer_floats("x", w, 6);
    ck_assert_float_eq(w[0], 2);
    ck_assert_int_eq(POP("f", "0", "a", "?rewind=0"), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Position"), 3);
    ck_assert_int_eq(POP("f", "0", "b", "?rewind=1"), 409);    /* a's lease */
    ck_assert_int_eq(POP("f", "0", "a", "?rewind=yes"), 400);
    BODY_HAS("rewind must be 1 or 0");
    ck_assert_int_eq(request("POST", "/v1/feeds/f/devices/0/ack?through=1&rewind=1",
                             "Tfetch-Consumer: a\r\n", NULL, 0), 400);
    ck_assert_int_eq(request("GET", "/v1/feeds/f", NULL, NULL, 0), 200);
    BODY_HAS("\"redeliveries\":2");
    stop_clean();
}
END_TEST

START_TEST(feeds_e2e_consumer_killed)
{
    start();
    declare("f", "{" SIG23 ",\"lease_ms\":300}");
    for (int i = 1; i <= 2; i++) {
        float v[6] = {(float)i};
        ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/0/infeed", v, 6, "2,3", NULL), 201);
    }
    pid_t pid = fork();                 /* pops item 1, then dies mid-step without an ack */
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        resp_t *r = malloc(sizeof *r);
        if (request_to(r, "POST", "/v1/feeds/f/devices/0/pop", "Tfetch-Consumer: doomed\r\n",
                       NULL, 0) != 200)
            _exit(1);
        kill(getpid(), SIGKILL);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status), "the consumer did not die as planned");
    uint64_t t0 = now_ms();
    while (POP("f", "0", "next", "") == 409 && now_ms() - t0 < 5000)   /* its lease holds */
        sleep_ms(50);
    ck_assert_int_eq(R.status, 200);
    ck_assert_uint_ge(now_ms() - t0, 100);
    ck_assert_int_eq(hnum(&R, "Tfetch-Position"), 1);
    float w[6];
    answer_floats("x", w, 6);
    ck_assert_float_eq(w[0], 1);
    ck_assert_int_eq(POP("f", "0", "next", "?ack=1"), 200);
    ck_assert_int_eq(hnum(&R, "Tfetch-Position"), 2);
    ck_assert_int_eq(POP("f", "0", "next", "?ack=2"), 204);    /* nothing lost, none twice */
    stop_clean();
}
END_TEST

START_TEST(feeds_e2e_metrics)
{
    start();
    declare("f", "{\"devices\":2," SIG23 "}");
    float v[6] = {0};
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/1/infeed", v, 6, "2,3", NULL), 201);
    ck_assert_int_eq(infeed_raw("/v1/feeds/f/devices/1/infeed", v, 6, "2,3", NULL), 201);
    ck_assert_int_eq(POP("f", "1", "c", ""), 200);
    ck_assert_int_eq(request("GET", "/metrics", NULL, NULL, 0), 200);
    static const char *const want[] = {
        "tfetch_feed_depth_items{feed=\"f\",device=\"1\"} 2",
        "tfetch_feed_depth_bytes{feed=\"f\",device=\"1\"} 48",
        "tfetch_feed_high_water_items{feed=\"f\",device=\"1\"} 2",
        "tfetch_feed_items_in_total{feed=\"f\",device=\"1\"} 2",
        "tfetch_feed_items_out_total{feed=\"f\",device=\"1\"} 1",
        "tfetch_feed_bytes_in_total{feed=\"f\",device=\"1\"} 48",
        "tfetch_feed_bytes_out_total{feed=\"f\",device=\"1\"} 24",
        "tfetch_feed_consumer_starved_seconds_total{feed=\"f\",device=\"0\"} 0",
        "tfetch_feed_redeliveries_total{feed=\"f\",device=\"1\"} 0",
        "tfetch_feed_latency_seconds_count{feed=\"f\",device=\"1\"} 1",
        "tfetch_feed_latency_seconds_bucket{feed=\"f\",device=\"1\",le=\"+Inf\"} 1",
        "tfetch_feed_round_skew{feed=\"f\",device=\"1\"} 1",
        "tfetch_feed_bytes 48",
        "tfetch_requests_total{route=\"feed_pop\",status=\"200\",transport=\"http\"} 1",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr((const char *)R.body, want[i]) != NULL, "no '%s' in /metrics",
                      want[i]);
    stop_clean();
}
END_TEST

Suite *suite_feeds_e2e(void)
{
    Suite *s = suite_create("feeds_e2e");
    TCase *tc = tcase_create("http");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, feeds_e2e_declare);
    tcase_add_test(tc, feeds_e2e_infeed_pop_ack);
    tcase_add_test(tc, feeds_e2e_seq_retry);
    tcase_add_test(tc, feeds_e2e_seq_ahead_waits);
    tcase_add_test(tc, feeds_e2e_reset_ends_producer_waits);
    tcase_add_test(tc, feeds_e2e_full_429_and_wait);
    tcase_add_test(tc, feeds_e2e_pop_waits);
    tcase_add_test(tc, feeds_e2e_split_and_broadcast);
    tcase_add_test(tc, feeds_e2e_done_410);
    tcase_add_test(tc, feeds_e2e_reset);
    tcase_add_test(tc, feeds_e2e_outfeed_readers);
    tcase_add_test(tc, feeds_e2e_lease_expiry);
    tcase_add_test(tc, feeds_e2e_consumer_killed);
    tcase_add_test(tc, feeds_e2e_rewind);
    tcase_add_test(tc, feeds_e2e_metrics);
    suite_add_tcase(s, tc);
    return s;
}
