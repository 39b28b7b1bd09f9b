/* check_async.c - the asynchronous libtfetch API: tf_fetch_start and its callback rules,
 * tf_fetch_test / _wait / _cancel / _free, tf_client_run, many requests in flight over a
 * capped number of connections, the blocking calls riding the same engine, tf_client_wakeup
 * from another thread, and the Shumai body format, all against small servers started in the
 * test on port 0. One test drives a thousand exchanges through the real tfetchd's echo
 * route, when $TFETCHD names it.
 *
 * The test server is one thread running a poll() loop over its connections (keep-alive,
 * several at once): it either echoes each request's body back (with its Content-Type and
 * request id) or answers every request with one canned response. It counts requests and
 * connections and records the first request; the test reads those after stopping it.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/tfetch.h"
#include "tests/fixtures.h"
#include "transports/clock.h"
#include "tests/suites.h"

Suite *suite_async(void);              /* registered in tests/suites.h */

/* ---- helpers ------------------------------------------------------------------------------ */

/* A one-tensor document: F32 "x" of n values starting at base (copied). */
static tf_doc_t *f32_doc(const char *name, int n, float base)
{
    float v[64];
    ck_assert_int_le(n, 64);
    for (int i = 0; i < n; i++)
        v[i] = base + (float)i * 0.5f;
    int64_t shape[1] = {n};
    tf_doc_t *doc = tf_doc_new();
    ck_assert_ptr_nonnull(doc);
    ck_assert_int_eq(tf_doc_add(doc, name, TF_F32, 1, shape, v, (size_t)n * sizeof(float),
                                TF_COPY), TF_OK);
    return doc;
}

/* Same tensors (names, dtypes, shapes, bytes) in the same order. */
static int docs_equal(const tf_doc_t *a, const tf_doc_t *b)
{
    if (!a || !b || tf_doc_count(a) != tf_doc_count(b))
        return 0;
    for (size_t i = 0; i < tf_doc_count(a); i++) {
        const tf_tensor_t *x = tf_doc_at(a, i), *y = tf_doc_at(b, i);
        if (strcmp(x->name, y->name) != 0 || x->dtype != y->dtype || x->rank != y->rank ||
            x->nbytes != y->nbytes || memcmp(x->shape, y->shape, sizeof(x->shape[0]) *
                                                                     (size_t)x->rank) != 0 ||
            (x->nbytes && memcmp(x->data, y->data, x->nbytes) != 0))
            return 0;
    }
    return 1;
}

/* A listener that never accepts: requests to it stay in flight until they time out. */
static int silent_listener(char *url, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(fd, 64), 0);
    socklen_t len = sizeof(a);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    snprintf(url, size, "http://127.0.0.1:%d/v1/tensors/w", ntohs(a.sin_port));
    return fd;
}

/* What a callback saw. */
typedef struct {
    int calls;
    tf_status_t st;
    tf_doc_t *doc;
    tf_result_t res;
    tf_fetch_t *f;
} rec_t;

static void record_cb(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                      void *ud)
{
    rec_t *x = ud;
    x->calls++;
    x->st = st;
    x->f = f;
    x->res = *r;
    tf_doc_free(x->doc);
    x->doc = doc;
}

static void rec_clear(rec_t *x)
{
    tf_doc_free(x->doc);
    memset(x, 0, sizeof(*x));
}

/* ---- the test server ---------------------------------------------------------------------- */

#define SRV_MAX_CONNS 64

enum { SRV_ECHO, SRV_CANNED };

typedef struct {
    int fd;
    char *buf;
    size_t len, cap;
} sconn_t;

typedef struct {
    int lfd;
    int port;
    int wake[2];                    /* written to stop the thread */
    pthread_t thread;
    int mode;
    char *canned;                   /* SRV_CANNED: the whole response */
    size_t canned_len;
    /* what happened; read after srv_stop */
    int served;
    int conns_now, conns_max, conns_total;
    char first_head[8192];
    uint8_t *first_body;
    size_t first_body_len;
} srv_t;

/* The value of header name in a request head ("" if absent), trimmed. */
static void header_value(const char *head, const char *name, char *out, size_t size)
{
    size_t n = strlen(name);
    out[0] = '\0';
    for (const char *p = strstr(head, "\r\n"); p; p = strstr(p, "\r\n")) {
        p += 2;
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ')
                v++;
            size_t k = strcspn(v, "\r\n");
            if (k >= size)
                k = size - 1;
            memcpy(out, v, k);
            out[k] = '\0';
            return;
        }
    }
}

static void send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k <= 0)
            return;
        c += k;
        n -= (size_t)k;
    }
}

/* Answers one complete request (head of hlen bytes, then blen body bytes). */
static void srv_answer(srv_t *s, int fd, const char *head, size_t hlen, const uint8_t *body,
                       size_t blen)
{
    if (s->served++ == 0) {
        size_t k = hlen < sizeof(s->first_head) - 1 ? hlen : sizeof(s->first_head) - 1;
        memcpy(s->first_head, head, k);
        s->first_head[k] = '\0';
        s->first_body = malloc(blen + 1);
        if (blen)
            memcpy(s->first_body, body, blen);
        s->first_body_len = blen;
    }
    if (s->mode == SRV_CANNED) {
        send_all(fd, s->canned, s->canned_len);
        return;
    }
    char ct[128], rid[160], out[512];
    header_value(head, "Content-Type", ct, sizeof(ct));
    header_value(head, "Tfetch-Request-Id", rid, sizeof(rid));
    int n = snprintf(out, sizeof(out),
                     "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTfetch-Request-Id: %s\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     ct[0] ? ct : "application/x-safetensors", rid, blen);
    send_all(fd, out, (size_t)n);
    send_all(fd, body, blen);
}

/* Answers every complete request in the connection's buffer. */
static void srv_process(srv_t *s, sconn_t *c)
{
    for (;;) {
        char *end = c->len ? memmem(c->buf, c->len, "\r\n\r\n", 4) : NULL;
        if (!end)
            return;
        size_t hlen = (size_t)(end - c->buf) + 4;
        char saved = c->buf[hlen - 1];
        c->buf[hlen - 1] = '\0';
        char cl[32];
        header_value(c->buf, "Content-Length", cl, sizeof(cl));
        c->buf[hlen - 1] = saved;
        size_t blen = (size_t)strtoull(cl, NULL, 10);
        if (c->len < hlen + blen)
            return;
        char *head = strndup(c->buf, hlen);
        srv_answer(s, c->fd, head, hlen, (uint8_t *)c->buf + hlen, blen);
        free(head);
        memmove(c->buf, c->buf + hlen + blen, c->len - hlen - blen);
        c->len -= hlen + blen;
    }
}

static void *srv_main(void *arg)
{
    srv_t *s = arg;
    sconn_t conns[SRV_MAX_CONNS];
    struct pollfd p[SRV_MAX_CONNS + 2];
    int n = 0;

    for (;;) {
        p[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        p[1] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        for (int i = 0; i < n; i++)
            p[2 + i] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
        if (poll(p, (nfds_t)(2 + n), -1) < 0)
            continue;
        if (p[0].revents)
            break;
        for (int i = n - 1; i >= 0; i--) {
            if (!p[2 + i].revents)
                continue;
            sconn_t *c = &conns[i];
            if (c->cap - c->len < 65536) {
                c->cap = c->cap * 2 + 65536;
                c->buf = realloc(c->buf, c->cap);
            }
            ssize_t k = read(c->fd, c->buf + c->len, c->cap - c->len);
            if (k <= 0) {
                close(c->fd);
                free(c->buf);
                conns[i] = conns[--n];
                s->conns_now--;
                continue;
            }
            c->len += (size_t)k;
            srv_process(s, c);
        }
        if (p[1].revents & POLLIN) {
            int fd = accept(s->lfd, NULL, NULL);
            if (fd >= 0 && n == SRV_MAX_CONNS) {
                close(fd);
            } else if (fd >= 0) {
                int one = 1;        /* header and body go in two sends: no Nagle delay */
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                conns[n++] = (sconn_t){.fd = fd};
                s->conns_total++;
                if (++s->conns_now > s->conns_max)
                    s->conns_max = s->conns_now;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        close(conns[i].fd);
        free(conns[i].buf);
    }
    return NULL;
}

/* Starts a server; SRV_CANNED answers status, extra headers and body to every request. */
static srv_t *srv_start(int mode, int status, const char *headers, const void *body,
                        size_t len)
{
    srv_t *s = calloc(1, sizeof(*s));
    ck_assert_ptr_nonnull(s);
    s->mode = mode;
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(s->lfd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(s->lfd, 128), 0);
    socklen_t alen = sizeof(a);
    ck_assert_int_eq(getsockname(s->lfd, (struct sockaddr *)&a, &alen), 0);
    s->port = ntohs(a.sin_port);
    ck_assert_int_eq(pipe(s->wake), 0);
    if (mode == SRV_CANNED) {
        char head[1024];
        int hl = snprintf(head, sizeof(head), "HTTP/1.1 %d X\r\n%sContent-Length: %zu\r\n\r\n",
                          status, headers ? headers : "", len);
        s->canned = malloc((size_t)hl + len + 1);
        memcpy(s->canned, head, (size_t)hl);
        if (len)
            memcpy(s->canned + hl, body, len);
        s->canned_len = (size_t)hl + len;
    }
    ck_assert_int_eq(pthread_create(&s->thread, NULL, srv_main, s), 0);
    return s;
}

static void srv_stop(srv_t *s)
{
    ck_assert_int_eq(write(s->wake[1], "x", 1), 1);
    pthread_join(s->thread, NULL);
    close(s->wake[0]);
    close(s->wake[1]);
    close(s->lfd);
}

static void srv_free(srv_t *s)
{
    free(s->canned);
    free(s->first_body);
    free(s);
}

static void srv_url(const srv_t *s, const char *path, char *url, size_t size)
{
    snprintf(url, size, "http://127.0.0.1:%d%s", s->port, path);
}

/* A canned safetensors reply holding doc. */
static srv_t *srv_canned_doc(const tf_doc_t *doc)
{
    void *body;
    size_t len;
    ck_assert_int_eq(tf_doc_encode(doc, &body, &len), TF_OK);
    srv_t *s = srv_start(SRV_CANNED, 200, "Content-Type: application/x-safetensors\r\n", body,
                         len);
    free(body);
    return s;
}

/* ---- callbacks run exactly once ------------------------------------------------------------ */

START_TEST(async_get_callback_once)
{
    tf_doc_t *want = f32_doc("w", 6, 1.0f);
    srv_t *s = srv_canned_doc(want);
    char url[128];
    srv_url(s, "/v1/tensors/w", url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    rec_t r = {0};
    tf_fetch_t *f = NULL;
    tf_request_t rq = {.op = TF_OP_GET, .url = url, .request_id = "get-1"};

    ck_assert_int_eq(tf_fetch_start(c, &rq, record_cb, &r, &f), TF_OK);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(r.calls, 0);                  /* never inside the start */
    ck_assert_uint_eq(tf_client_pending(c), 1);
    ck_assert_int_eq(tf_fetch_result(f)->status, TF_EAGAIN);
    ck_assert_str_eq(tf_fetch_result(f)->request_id, "get-1");
    ck_assert_int_eq(tf_fetch_wait(f, 10000), TF_OK);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_ptr_eq(r.f, f);
    ck_assert_int_eq(r.st, TF_OK);
    ck_assert(docs_equal(r.doc, want));
    ck_assert_str_eq(r.res.op, "get");
    ck_assert_str_eq(r.res.transport, "http");
    ck_assert_str_eq(r.res.request_id, "get-1");
    ck_assert_int_eq(r.res.http_status, 200);
    ck_assert_uint_gt(r.res.bytes_received, 0);
    ck_assert(r.res.seconds >= 0.0);
    ck_assert_str_eq(r.res.error, "");
    ck_assert_uint_eq(tf_client_pending(c), 0);
    /* Completed: every later look agrees, and nothing runs twice. */
    ck_assert_int_eq(tf_fetch_wait(f, -1), TF_OK);
    ck_assert_int_eq(tf_fetch_test(f), TF_OK);
    ck_assert_int_eq(tf_client_run(c, 100), TF_OK);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_int_eq(tf_fetch_result(f)->status, TF_OK);
    ck_assert_ptr_null(tf_fetch_take_doc(f));      /* the callback got it */
    tf_fetch_free(f);
    tf_client_free(c);
    srv_stop(s);
    ck_assert_int_eq(s->served, 1);
    ck_assert_ptr_nonnull(strstr(s->first_head, "Tfetch-Request-Id: get-1\r\n"));
    srv_free(s);
    rec_clear(&r);
    tf_doc_free(want);
}
END_TEST

START_TEST(async_errors_callback_once)
{
    static const char err[] = "{\"error\":\"no such tensor: w\",\"code\":\"TF_ENOTFOUND\"}";
    srv_t *s = srv_start(SRV_CANNED, 404, "Content-Type: application/json\r\n", err,
                         sizeof(err) - 1);
    char url[128], refused[128];
    srv_url(s, "/v1/tensors/w", url, sizeof(url));
    snprintf(refused, sizeof(refused), "http://127.0.0.1:%d/v1/tensors/w", td_closed_port());
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    rec_t r1 = {0}, r2 = {0};
    tf_request_t rq1 = {.op = TF_OP_GET, .url = url};
    tf_request_t rq2 = {.op = TF_OP_DELETE, .url = refused};

    /* fire and forget: no handle, the callback is the only report */
    ck_assert_int_eq(tf_fetch_start(c, &rq1, record_cb, &r1, NULL), TF_OK);
    ck_assert_int_eq(tf_fetch_start(c, &rq2, record_cb, &r2, NULL), TF_OK);
    ck_assert_uint_eq(tf_client_pending(c), 2);
    ck_assert_int_eq(tf_client_run(c, 20000), TF_OK);
    ck_assert_uint_eq(tf_client_pending(c), 0);
    ck_assert_int_eq(r1.calls, 1);
    ck_assert_int_eq(r1.st, TF_ENOTFOUND);
    ck_assert_ptr_null(r1.doc);
    ck_assert_int_eq(r1.res.status, TF_ENOTFOUND);
    ck_assert_int_eq(r1.res.http_status, 404);
    ck_assert_str_eq(r1.res.error, "no such tensor: w");
    ck_assert_int_eq(r2.calls, 1);
    ck_assert_int_eq(r2.st, TF_ECONNECT);
    ck_assert_str_eq(r2.res.op, "delete");
    ck_assert_int_eq(r2.res.http_status, 0);
    ck_assert_uint_gt(strlen(r2.res.error), 0);
    ck_assert_int_eq(tf_client_run(c, 0), TF_OK);
    ck_assert_int_eq(r1.calls + r2.calls, 2);
    tf_client_free(c);
    srv_stop(s);
    srv_free(s);
}
END_TEST

START_TEST(async_timeout_callback_once)
{
    char url[128];
    int lfd = silent_listener(url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    rec_t r = {0}, rd = {0};
    tf_fetch_t *f = NULL;
    tf_request_t rq = {.op = TF_OP_GET, .url = url, .timeout_ms = 300};

    ck_assert_int_eq(tf_fetch_start(c, &rq, record_cb, &r, &f), TF_OK);
    ck_assert_int_eq(tf_fetch_wait(f, 50), TF_EAGAIN);         /* not yet */
    ck_assert_int_eq(r.calls, 0);
    ck_assert_int_eq(tf_fetch_wait(f, 10000), TF_ETIMEDOUT);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_int_eq(r.st, TF_ETIMEDOUT);
    ck_assert(r.res.seconds >= 0.25 && r.res.seconds < 5.0);
    tf_fetch_free(f);

    /* the client's timeout applies when the request names none */
    tf_client_set_timeout(c, 200);
    rq.timeout_ms = 0;
    ck_assert_int_eq(tf_fetch_start(c, &rq, record_cb, &rd, NULL), TF_OK);
    ck_assert_int_eq(tf_client_run(c, 10000), TF_OK);
    ck_assert_int_eq(rd.calls, 1);
    ck_assert_int_eq(rd.st, TF_ETIMEDOUT);
    tf_client_free(c);
    close(lfd);
}
END_TEST

START_TEST(async_cancel_exactly_once)
{
    char url[128];
    int lfd = silent_listener(url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    rec_t r = {0}, other = {0};
    tf_fetch_t *f = NULL, *g = NULL;
    tf_request_t rq = {.op = TF_OP_GET, .url = url};

    ck_assert_int_eq(tf_fetch_start(c, &rq, record_cb, &r, &f), TF_OK);
    ck_assert_int_eq(tf_fetch_start(c, &rq, record_cb, &other, &g), TF_OK);
    ck_assert_int_eq(tf_fetch_test(f), TF_EAGAIN);
    ck_assert_int_eq(tf_fetch_cancel(f), TF_OK);
    ck_assert_int_eq(r.calls, 1);                   /* before tf_fetch_cancel returned */
    ck_assert_int_eq(r.st, TF_ECANCELED);
    ck_assert_int_eq(r.res.status, TF_ECANCELED);
    ck_assert_uint_gt(strlen(r.res.error), 0);
    ck_assert_int_eq(tf_fetch_cancel(f), TF_OK);   /* again: harmless */
    ck_assert_int_eq(tf_fetch_wait(f, 0), TF_ECANCELED);
    ck_assert_int_eq(tf_fetch_test(f), TF_ECANCELED);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_int_eq(other.calls, 0);              /* the other one is untouched */
    ck_assert_uint_eq(tf_client_pending(c), 1);
    ck_assert_int_eq(tf_fetch_cancel(NULL), TF_EINVAL);
    tf_fetch_free(f);
    /* freeing a running request cancels it: its callback runs once, now */
    tf_fetch_free(g);
    ck_assert_int_eq(other.calls, 1);
    ck_assert_int_eq(other.st, TF_ECANCELED);
    ck_assert_uint_eq(tf_client_pending(c), 0);
    tf_client_free(c);
    close(lfd);
}
END_TEST

START_TEST(async_cancel_after_completion_harmless)
{
    tf_doc_t *want = f32_doc("w", 4, 2.0f);
    srv_t *s = srv_canned_doc(want);
    char url[128];
    srv_url(s, "/v1/tensors/w", url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    rec_t r = {0};
    tf_fetch_t *f = NULL;
    tf_request_t rq = {.op = TF_OP_GET, .url = url};
    ck_assert_int_eq(tf_fetch_start(c, &rq, record_cb, &r, &f), TF_OK);
    ck_assert_int_eq(tf_fetch_wait(f, 10000), TF_OK);
    ck_assert_int_eq(tf_fetch_cancel(f), TF_OK);
    ck_assert_int_eq(tf_fetch_cancel(f), TF_OK);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_int_eq(r.st, TF_OK);
    ck_assert_int_eq(tf_fetch_result(f)->status, TF_OK);
    ck_assert_int_eq(tf_fetch_wait(f, 0), TF_OK);
    tf_fetch_free(f);
    tf_client_free(c);
    srv_stop(s);
    srv_free(s);
    rec_clear(&r);
    tf_doc_free(want);
}
END_TEST

/* ---- starting ------------------------------------------------------------------------------- */

START_TEST(async_start_errors_never_call_back)
{
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    tf_doc_t *doc = f32_doc("x", 2, 0.0f);
    rec_t r = {0};
    tf_fetch_t *f = NULL;
    const char *url = "http://127.0.0.1:1/v1/tensors/x";
    struct {
        tf_request_t rq;
        tf_status_t st;
    } bad[] = {
        {{.op = TF_OP_GET, .url = "not a url"}, TF_EURL},
        {{.op = TF_OP_GET, .url = NULL}, TF_EURL},
        {{.op = TF_OP_GET, .url = "ftp://127.0.0.1/x"}, TF_EURL},
        {{.op = (tf_op_t)0, .url = url}, TF_EINVAL},
        {{.op = (tf_op_t)99, .url = url}, TF_EINVAL},
        {{.op = TF_OP_PUT, .url = url}, TF_EINVAL},              /* no document */
        {{.op = TF_OP_EXCHANGE, .url = url}, TF_EINVAL},
        {{.op = TF_OP_GET, .url = url, .in = NULL, .wait_ms = -1}, TF_EINVAL},
        {{.op = TF_OP_DELETE, .url = url, .wait_ms = 10}, TF_EINVAL},
        {{.op = TF_OP_GET, .url = url, .format = (tf_format_t)7}, TF_EINVAL},
        {{.op = TF_OP_GET, .url = url, .request_id = "bad id"}, TF_EINVAL},
        {{.op = TF_OP_PUT, .url = url, .in = NULL, .format = TF_FORMAT_SHUMAI}, TF_EINVAL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        f = NULL;
        ck_assert_msg(tf_fetch_start(c, &bad[i].rq, record_cb, &r, &f) == bad[i].st,
                      "case %zu", i);
        ck_assert_ptr_null(f);
        ck_assert_int_eq(tf_client_last(c)->status, bad[i].st);
        ck_assert_msg(strlen(tf_client_last(c)->error) > 0, "case %zu has no message", i);
    }
    /* a document where none goes */
    tf_request_t get_with_doc = {.op = TF_OP_GET, .url = url, .in = doc};
    ck_assert_int_eq(tf_fetch_start(c, &get_with_doc, record_cb, &r, NULL), TF_EINVAL);
    /* neither callback nor handle */
    tf_request_t ok = {.op = TF_OP_GET, .url = url};
    ck_assert_int_eq(tf_fetch_start(c, &ok, NULL, NULL, NULL), TF_EINVAL);
    ck_assert_int_eq(tf_fetch_start(c, NULL, record_cb, &r, NULL), TF_EINVAL);
    ck_assert_int_eq(tf_fetch_start(NULL, &ok, record_cb, &r, NULL), TF_EINVAL);
    ck_assert_uint_eq(tf_client_pending(c), 0);
    ck_assert_int_eq(tf_client_run(c, 100), TF_OK);
    ck_assert_int_eq(r.calls, 0);

    /* NULL handles are refused or ignored, never crash */
    ck_assert_int_eq(tf_fetch_test(NULL), TF_EINVAL);
    ck_assert_int_eq(tf_fetch_wait(NULL, 0), TF_EINVAL);
    ck_assert_ptr_null(tf_fetch_result(NULL));
    ck_assert_ptr_null(tf_fetch_take_doc(NULL));
    tf_fetch_free(NULL);
    ck_assert_int_eq(tf_client_run(NULL, 0), TF_EINVAL);
    ck_assert_uint_eq(tf_client_pending(NULL), 0);
    ck_assert_int_eq(tf_client_set_max_connections(c, 0), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_max_connections(c, 100000), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_max_connections(NULL, 4), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_max_connections(c, 4), TF_OK);
    ck_assert_int_eq(tf_client_set_format(c, TF_FORMAT_DEFAULT), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_format(c, (tf_format_t)3), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_format(c, TF_FORMAT_SHUMAI), TF_OK);
    ck_assert_int_eq(tf_client_set_format(c, TF_FORMAT_SAFETENSORS), TF_OK);
    tf_doc_free(doc);
    tf_client_free(c);
}
END_TEST

/* tf_fetch_test drives the engine: polling alone completes a request. */
START_TEST(async_test_polls_to_completion)
{
    tf_doc_t *want = f32_doc("w", 3, 5.0f);
    srv_t *s = srv_canned_doc(want);
    char url[128];
    srv_url(s, "/v1/tensors/w", url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    rec_t r = {0};
    tf_fetch_t *f = NULL;
    tf_request_t rq = {.op = TF_OP_GET, .url = url};
    ck_assert_int_eq(tf_fetch_start(c, &rq, record_cb, &r, &f), TF_OK);
    tf_status_t st = TF_EAGAIN;
    for (int i = 0; i < 20000 && st == TF_EAGAIN; i++) {
        st = tf_fetch_test(f);
        if (st == TF_EAGAIN)
            usleep(500);
    }
    ck_assert_int_eq(st, TF_OK);
    ck_assert_int_eq(r.calls, 1);
    ck_assert(docs_equal(r.doc, want));
    tf_fetch_free(f);
    tf_client_free(c);
    srv_stop(s);
    srv_free(s);
    rec_clear(&r);
    tf_doc_free(want);
}
END_TEST

/* Promise style: no callback, the reply waits in the handle. */
START_TEST(async_promise_without_callback)
{
    tf_doc_t *in = f32_doc("x", 8, -3.0f);
    srv_t *s = srv_start(SRV_ECHO, 0, NULL, NULL, 0);
    char url[128];
    srv_url(s, "/v1/call/echo", url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    tf_fetch_t *f = NULL;
    tf_request_t rq = {.op = TF_OP_EXCHANGE, .url = url, .in = in};
    ck_assert_int_eq(tf_fetch_start(c, &rq, NULL, NULL, &f), TF_OK);
    ck_assert_ptr_null(tf_fetch_take_doc(f));     /* not yet */
    ck_assert_int_eq(tf_fetch_wait(f, 10000), TF_OK);
    const tf_result_t *res = tf_fetch_result(f);
    ck_assert_str_eq(res->op, "call");
    ck_assert_int_eq(res->http_status, 200);
    ck_assert_uint_gt(res->bytes_sent, 0);
    ck_assert_uint_eq(res->bytes_sent, res->bytes_received);
    tf_doc_t *out = tf_fetch_take_doc(f);
    ck_assert(docs_equal(out, in));
    ck_assert_ptr_null(tf_fetch_take_doc(f));     /* once */
    tf_doc_free(out);
    tf_fetch_free(f);
    /* a reply never taken is freed with the handle */
    ck_assert_int_eq(tf_fetch_start(c, &rq, NULL, NULL, &f), TF_OK);
    ck_assert_int_eq(tf_fetch_wait(f, 10000), TF_OK);
    tf_fetch_free(f);
    tf_client_free(c);
    srv_stop(s);
    ck_assert_int_eq(s->served, 2);
    ck_assert_ptr_nonnull(strstr(s->first_head, "POST /v1/call/echo HTTP/1.1\r\n"));
    ck_assert_ptr_nonnull(strcasestr(s->first_head, "\r\nContent-Type: application/x-safetensors"));
    srv_free(s);
    tf_doc_free(in);
}
END_TEST

/* ---- callback rules ------------------------------------------------------------------------ */

typedef struct {
    tf_client_t *c;
    const char *url;
    int left;                       /* requests still to start from callbacks */
    int calls;
    int ok;
} chain_t;

static void chain_cb(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                     void *ud)
{
    chain_t *ch = ud;
    ch->calls++;
    ch->ok += st == TF_OK;
    tf_doc_free(doc);
    if (ch->left > 0) {
        ch->left--;
        tf_request_t rq = {.op = TF_OP_GET, .url = ch->url};
        ck_assert_int_eq(tf_fetch_start(ch->c, &rq, chain_cb, ch, NULL), TF_OK);
    }
}

START_TEST(async_start_from_callback)
{
    tf_doc_t *want = f32_doc("w", 2, 1.0f);
    srv_t *s = srv_canned_doc(want);
    char url[128];
    srv_url(s, "/v1/tensors/w", url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    chain_t ch = {.c = c, .url = url, .left = 9};
    tf_request_t rq = {.op = TF_OP_GET, .url = url};
    ck_assert_int_eq(tf_fetch_start(c, &rq, chain_cb, &ch, NULL), TF_OK);
    ck_assert_int_eq(tf_client_run(c, 20000), TF_OK);
    ck_assert_int_eq(ch.calls, 10);
    ck_assert_int_eq(ch.ok, 10);
    ck_assert_int_eq(ch.left, 0);
    tf_client_free(c);
    srv_stop(s);
    ck_assert_int_eq(s->served, 10);
    ck_assert_int_eq(s->conns_total, 1);           /* one kept-alive connection */
    srv_free(s);
    tf_doc_free(want);
}
END_TEST

static void count_cb(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                     void *ud)
{
    (*(int *)ud)++;
    tf_doc_free(doc);
}

typedef struct {
    tf_client_t *c;
    tf_fetch_t *self;               /* the held handle, freed from inside its callback */
    tf_fetch_t *other;              /* a pending one: waiting on it is refused */
    const char *url;
    tf_status_t get_st, run_st, wait_st, test_st, start_st;
    int calls;
    int started_calls;              /* callbacks of the request started inside */
    char get_error[256];
} rules_t;

static void rules_cb(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                     void *ud)
{
    rules_t *x = ud;
    tf_doc_t *got = NULL;
    x->calls++;
    tf_doc_free(doc);
    x->get_st = tf_get(x->c, x->url, 0, &got);     /* blocking: refused */
    snprintf(x->get_error, sizeof(x->get_error), "%s", tf_client_last(x->c)->error);
    x->run_st = tf_client_run(x->c, 0);
    x->wait_st = tf_fetch_wait(x->other, 0);
    x->test_st = tf_fetch_test(x->other);          /* looks, does not drive */
    tf_client_free(x->c);                          /* refused: does nothing */
    tf_request_t rq = {.op = TF_OP_GET, .url = x->url};
    x->start_st = tf_fetch_start(x->c, &rq, count_cb, &x->started_calls, NULL);
    ck_assert_ptr_eq(f, x->self);
    ck_assert_ptr_eq(tf_fetch_result(f), r);
    tf_fetch_free(f);                              /* freed once the callback returns */
    ck_assert_int_eq(r->status, st);               /* still valid inside */
}

START_TEST(async_callback_rules)
{
    tf_doc_t *want = f32_doc("w", 2, 1.0f);
    srv_t *s = srv_canned_doc(want);
    char url[128], hang[128];
    srv_url(s, "/v1/tensors/w", url, sizeof(url));
    int lfd = silent_listener(hang, sizeof(hang));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    rules_t x = {.c = c, .url = url};
    rec_t ro = {0};
    tf_request_t rq_other = {.op = TF_OP_GET, .url = hang};
    ck_assert_int_eq(tf_fetch_start(c, &rq_other, record_cb, &ro, &x.other), TF_OK);
    tf_request_t rq = {.op = TF_OP_GET, .url = url};
    ck_assert_int_eq(tf_fetch_start(c, &rq, rules_cb, &x, &x.self), TF_OK);

    ck_assert_int_eq(tf_fetch_wait(x.self, 10000), TF_OK);   /* and f is gone now */
    ck_assert_int_eq(x.calls, 1);
    ck_assert_int_eq(x.get_st, TF_EINVAL);
    ck_assert_ptr_nonnull(strstr(x.get_error, "callback"));
    ck_assert_int_eq(x.run_st, TF_EINVAL);
    ck_assert_int_eq(x.wait_st, TF_EINVAL);
    ck_assert_int_eq(x.test_st, TF_EAGAIN);
    ck_assert_int_eq(x.start_st, TF_OK);
    /* the request started inside runs like any other; the client was not freed */
    ck_assert_uint_eq(tf_client_pending(c), 2);
    ck_assert_int_eq(tf_client_run(c, 300), TF_EAGAIN);      /* other still hangs */
    ck_assert_int_eq(x.started_calls, 1);
    ck_assert_uint_eq(tf_client_pending(c), 1);
    ck_assert_int_eq(ro.calls, 0);
    /* freeing the client cancels what is pending; a held handle outlives it */
    tf_client_free(c);
    ck_assert_int_eq(ro.calls, 1);
    ck_assert_int_eq(ro.st, TF_ECANCELED);
    ck_assert_int_eq(tf_fetch_result(x.other)->status, TF_ECANCELED);
    ck_assert_int_eq(tf_fetch_wait(x.other, 100), TF_ECANCELED);
    ck_assert_int_eq(tf_fetch_test(x.other), TF_ECANCELED);
    ck_assert_int_eq(tf_fetch_cancel(x.other), TF_OK);
    tf_fetch_free(x.other);
    close(lfd);
    srv_stop(s);
    srv_free(s);
    tf_doc_free(want);
}
END_TEST

typedef struct {
    tf_client_t *c;
    const char *url;
    int calls;
    tf_status_t start_st, run_st;
} prog_t;

static int progress_tries(uint64_t dn, uint64_t dt, uint64_t un, uint64_t ut, void *ud)
{
    prog_t *p = ud;
    tf_request_t rq = {.op = TF_OP_GET, .url = p->url};
    if (p->calls++ == 0) {
        p->start_st = tf_fetch_start(p->c, &rq, count_cb, &p->calls, NULL);
        p->run_st = tf_client_run(p->c, 0);
    }
    return 0;
}

/* The progress callback runs inside libcurl: nothing may be started or driven there. */
START_TEST(async_progress_callback_rules)
{
    tf_doc_t *want = f32_doc("w", 2, 1.0f);
    srv_t *s = srv_canned_doc(want);
    char url[128];
    srv_url(s, "/v1/tensors/w", url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    prog_t p = {.c = c, .url = url, .start_st = TF_OK, .run_st = TF_OK};
    tf_client_set_progress(c, progress_tries, &p);
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_OK);
    ck_assert_int_gt(p.calls, 0);
    ck_assert_int_eq(p.start_st, TF_EINVAL);
    ck_assert_int_eq(p.run_st, TF_EINVAL);
    ck_assert_uint_eq(tf_client_pending(c), 0);
    ck_assert(docs_equal(doc, want));
    tf_doc_free(doc);
    tf_client_free(c);
    srv_stop(s);
    srv_free(s);
    tf_doc_free(want);
}
END_TEST

/* A blocking call drives the same engine: other requests complete meanwhile, and
 * tf_client_last describes the blocking call alone. */
START_TEST(async_blocking_call_drives_others)
{
    tf_doc_t *in = f32_doc("x", 4, 1.0f);
    srv_t *s = srv_start(SRV_ECHO, 0, NULL, NULL, 0);
    char url[128];
    srv_url(s, "/v1/call/echo", url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    int calls = 0;
    tf_request_t rq = {.op = TF_OP_EXCHANGE, .url = url, .in = in, .request_id = "bg"};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(tf_fetch_start(c, &rq, count_cb, &calls, NULL), TF_OK);
    ck_assert_int_eq(tf_client_set_request_id(c, "fg"), TF_OK);
    tf_doc_t *out = NULL;
    ck_assert_int_eq(tf_fetch(c, url, in, &out), TF_OK);
    ck_assert(docs_equal(out, in));
    tf_doc_free(out);
    ck_assert_str_eq(tf_client_last(c)->request_id, "fg");
    ck_assert_str_eq(tf_client_last(c)->op, "call");
    ck_assert_int_eq(tf_client_run(c, 10000), TF_OK);
    ck_assert_int_eq(calls, 5);
    ck_assert_str_eq(tf_client_last(c)->request_id, "fg");
    tf_client_free(c);
    srv_stop(s);
    ck_assert_int_eq(s->served, 6);
    srv_free(s);
    tf_doc_free(in);
}
END_TEST

START_TEST(async_run_timeout_and_pending)
{
    char url[128];
    int lfd = silent_listener(url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    int calls = 0;
    tf_request_t rq = {.op = TF_OP_GET, .url = url};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(tf_fetch_start(c, &rq, count_cb, &calls, NULL), TF_OK);
    ck_assert_int_eq(tf_client_run(c, 0), TF_EAGAIN);
    ck_assert_int_eq(tf_client_run(c, 150), TF_EAGAIN);
    ck_assert_uint_eq(tf_client_pending(c), 3);
    ck_assert_int_eq(calls, 0);
    tf_client_free(c);                      /* cancels all three, once each */
    ck_assert_int_eq(calls, 3);
    close(lfd);
}
END_TEST

/* tf_client_wakeup from another thread ends a tf_client_run that would wait much longer;
 * one made before the run is kept (the next run returns after one pass); the requests stay
 * pending and complete later, once each. */
typedef struct {
    tf_client_t *c;
    int delay_ms;
} waker_t;

static void *waker(void *arg)
{
    waker_t *w = arg;
    usleep((useconds_t)w->delay_ms * 1000);
    tf_client_wakeup(w->c);
    return NULL;
}

START_TEST(async_wakeup_ends_run)
{
    char url[128];
    int lfd = silent_listener(url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    tf_client_wakeup(NULL);                 /* a no-op */
    int calls = 0;
    tf_request_t rq = {.op = TF_OP_GET, .url = url};
    ck_assert_int_eq(tf_fetch_start(c, &rq, count_cb, &calls, NULL), TF_OK);

    /* From another thread, during the run. */
    waker_t w = {.c = c, .delay_ms = 100};
    pthread_t th;
    uint64_t t0 = tfx_now_ms();
    ck_assert_int_eq(pthread_create(&th, NULL, waker, &w), 0);
    ck_assert_int_eq(tf_client_run(c, 20000), TF_EAGAIN);
    uint64_t took = tfx_now_ms() - t0;
    pthread_join(th, NULL);
    ck_assert_uint_ge(took, 90);
    ck_assert_uint_lt(took, 5000);
    ck_assert_uint_eq(tf_client_pending(c), 1);

    /* Before the run: kept, and counted once however many. */
    tf_client_wakeup(c);
    tf_client_wakeup(c);
    t0 = tfx_now_ms();
    ck_assert_int_eq(tf_client_run(c, 20000), TF_EAGAIN);
    ck_assert_uint_lt(tfx_now_ms() - t0, 5000);
    t0 = tfx_now_ms();
    ck_assert_int_eq(tf_client_run(c, 200), TF_EAGAIN);   /* consumed: waits its time */
    ck_assert_uint_ge(tfx_now_ms() - t0, 190);
    ck_assert_int_eq(calls, 0);
    tf_client_free(c);
    ck_assert_int_eq(calls, 1);
    close(lfd);
}
END_TEST

/* ---- many in flight ------------------------------------------------------------------------ */

#define MANY 1000

typedef struct {
    tf_doc_t *in[MANY];
    int calls[MANY];
    int good[MANY];
    char why[512];
} many_t;

typedef struct {
    many_t *m;
    int i;
} slot_t;

static void many_cb(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                    void *ud)
{
    slot_t *s = ud;
    many_t *m = s->m;
    char want_rid[32];
    snprintf(want_rid, sizeof(want_rid), "many-%d", s->i);
    m->calls[s->i]++;
    if (st != TF_OK)
        snprintf(m->why, sizeof(m->why), "request %d: %s (%s)", s->i, tf_err_name(st),
                 r->error);
    else if (!docs_equal(doc, m->in[s->i]))
        snprintf(m->why, sizeof(m->why), "request %d: the reply is not what was sent", s->i);
    else if (strcmp(r->request_id, want_rid) != 0)
        snprintf(m->why, sizeof(m->why), "request %d: request id %s", s->i, r->request_id);
    else
        m->good[s->i] = 1;
    tf_doc_free(doc);
}

/* Starts MANY exchanges at once to url, each with its own payload and request id, drives them
 * to completion from this one thread and checks every reply against its request. */
static void many_exchanges(tf_client_t *c, const char *url, long run_ms)
{
    many_t *m = calloc(1, sizeof(*m));
    slot_t *slots = calloc(MANY, sizeof(*slots));
    ck_assert(m && slots);
    for (int i = 0; i < MANY; i++) {
        char name[32], rid[32];
        snprintf(name, sizeof(name), "t%d", i);
        snprintf(rid, sizeof(rid), "many-%d", i);
        m->in[i] = f32_doc(name, 1 + i % 16, (float)i * 100.0f);
        slots[i] = (slot_t){.m = m, .i = i};
        tf_request_t rq = {.op = TF_OP_EXCHANGE, .url = url, .in = m->in[i], .request_id = rid};
        ck_assert_int_eq(tf_fetch_start(c, &rq, many_cb, &slots[i], NULL), TF_OK);
    }
    ck_assert_uint_eq(tf_client_pending(c), MANY);
    ck_assert_int_eq(tf_client_run(c, run_ms), TF_OK);
    int good = 0;
    for (int i = 0; i < MANY; i++) {
        ck_assert_msg(m->calls[i] == 1, "request %d: %d callbacks", i, m->calls[i]);
        good += m->good[i];
    }
    ck_assert_msg(good == MANY, "%d of %d good; %s", good, MANY, m->why);
    for (int i = 0; i < MANY; i++)
        tf_doc_free(m->in[i]);
    free(slots);
    free(m);
}

START_TEST(async_thousand_exchanges_in_flight)
{
    srv_t *s = srv_start(SRV_ECHO, 0, NULL, NULL, 0);
    char url[128];
    srv_url(s, "/v1/call/echo", url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    many_exchanges(c, url, 60000);
    tf_client_free(c);
    srv_stop(s);
    ck_assert_int_eq(s->served, MANY);
    ck_assert_int_le(s->conns_max, 16);            /* the default cap per origin */
    ck_assert_int_gt(s->conns_max, 1);             /* and more than one was used */
    srv_free(s);
}
END_TEST

START_TEST(async_max_connections)
{
    srv_t *s = srv_start(SRV_ECHO, 0, NULL, NULL, 0);
    char url[128];
    srv_url(s, "/v1/call/echo", url, sizeof(url));
    tf_doc_t *in = f32_doc("x", 4, 0.0f);
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_max_connections(c, 3), TF_OK);
    int calls = 0;
    tf_request_t rq = {.op = TF_OP_EXCHANGE, .url = url, .in = in};
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(tf_fetch_start(c, &rq, count_cb, &calls, NULL), TF_OK);
    ck_assert_int_eq(tf_client_run(c, 30000), TF_OK);
    ck_assert_int_eq(calls, 200);
    tf_client_free(c);
    srv_stop(s);
    ck_assert_int_eq(s->served, 200);
    ck_assert_int_le(s->conns_total, 3);
    srv_free(s);
    tf_doc_free(in);
}
END_TEST

/* The real daemon's echo route, a thousand exchanges in flight from one thread. Runs only when
 * $TFETCHD names the daemon (make check sets it). */
START_TEST(async_daemon_echo_thousand)
{
    if (!getenv("TFETCHD")) {
        fputs("async_daemon_echo_thousand: TFETCHD not set, skipped\n", stderr);
        return;
    }
    td_daemon_t d;
    ck_assert_int_eq(td_start(&d, NULL), 0);
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/call/echo", d.base);
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_user(c, "async-echo"), TF_OK);
    many_exchanges(c, url, 120000);
    tf_client_free(c);
    ck_assert_int_eq(td_stop(&d, SIGTERM, 10000), 0);
    td_cleanup();
}
END_TEST

/* The tfetch CLI's batches (--parallel, get --dir, put pairs, call, rm) against the real daemon.
 * Runs only when $TFETCHD names the daemon; $TFETCH_CLI names the tool (else ./cli/tfetch). */

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

/* Reads a safetensors file into a document (copied). */
static tf_doc_t *read_doc(const char *path)
{
    static uint8_t buf[65536];
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_doc_decode(buf, n, TF_COPY, &doc), TF_OK);
    return doc;
}

START_TEST(async_cli_batches)
{
    if (!getenv("TFETCHD")) {
        fputs("async_cli_batches: TFETCHD not set, skipped\n", stderr);
        return;
    }
    const char *cli = getenv("TFETCH_CLI") ? getenv("TFETCH_CLI") : "./cli/tfetch";
    td_daemon_t d;
    ck_assert_int_eq(td_start(&d, NULL), 0);
    char dir[] = "/tmp/tf-async-cli-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char cmd[8192], out[4096], f[3][256], u[3][256];
    float v[3][4];
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 4; k++)
            v[i][k] = (float)(10 * i + k);
        snprintf(f[i], sizeof(f[i]), "%s/in%d.bin", dir, i);
        snprintf(u[i], sizeof(u[i]), "%s/v1/tensors/t%d", d.base, i);
        write_file(f[i], v[i], sizeof(v[i]));
    }
    /* three puts at once */
    snprintf(cmd, sizeof(cmd), "%s -q -P 3 put --dtype F32 --shape 4 %s %s %s %s %s %s", cli,
             u[0], f[0], u[1], f[1], u[2], f[2]);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    /* three gets at once into a directory, one stats line each, in argument order */
    snprintf(cmd, sizeof(cmd), "%s --stats -P 3 get -d %s/out %s %s %s 2>&1 >/dev/null", cli,
             dir, u[0], u[1], u[2]);
    ck_assert_int_eq(td_run(cmd, out, sizeof(out)), 0);
    const char *p = out;
    for (int i = 0; i < 3; i++) {
        p = strstr(p, "{\"op\":\"get\"");
        ck_assert_msg(p != NULL, "stats line %d missing: %s", i, out);
        p++;
    }
    char path[512];
    tf_doc_t *got[3];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/out/t%d.safetensors", dir, i);
        got[i] = read_doc(path);
        char name[8];
        snprintf(name, sizeof(name), "t%d", i);
        const tf_tensor_t *t = tf_doc_find(got[i], name);
        ck_assert_ptr_nonnull(t);
        ck_assert_mem_eq(t->data, v[i], sizeof(v[i]));
    }
    /* two exchanges at once, each reply named after its input */
    snprintf(cmd, sizeof(cmd), "%s -P 2 call -d %s/rep %s/v1/call/echo %s/out/t0.safetensors "
             "%s/v1/call/echo %s/out/t1.safetensors", cli, dir, d.base, dir, d.base, dir);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/rep/t%d.safetensors", dir, i);
        tf_doc_t *echoed = read_doc(path);
        ck_assert(docs_equal(echoed, got[i]));
        tf_doc_free(echoed);
    }
    for (int i = 0; i < 3; i++)
        tf_doc_free(got[i]);
    /* one exchange to stdout, in Shumai's format through the daemon's Shumai route */
    snprintf(cmd, sizeof(cmd), "%s -f shumai -u 0a1b2c3d --raw -q --dtype F32 --shape 4 call "
             "%s/echo %s > %s/shumai.raw && cmp %s/shumai.raw %s", cli, d.base, f[2], dir, dir,
             f[2]);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    /* several removals: the exit status is the first failure's (2: not found) */
    snprintf(cmd, sizeof(cmd), "%s -q -P 3 rm %s %s/v1/tensors/none %s 2>/dev/null", cli, u[0],
             d.base, u[1]);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 2);
    snprintf(cmd, sizeof(cmd), "%s -q rm %s", cli, u[2]);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    /* usage errors, caught before any request */
    char bad[5][1024];
    snprintf(bad[0], sizeof(bad[0]), "get %s %s %s", u[0], u[1], u[2]);  /* no --dir */
    snprintf(bad[1], sizeof(bad[1]), "-f shumai put %s %s", u[0], f[0]); /* Shumai: no put */
    snprintf(bad[2], sizeof(bad[2]), "get -d %s %s %s", dir, u[0], u[0]); /* one name twice */
    snprintf(bad[3], sizeof(bad[3]), "-P 0 rm %s", u[0]);
    snprintf(bad[4], sizeof(bad[4]), "put %s %s %s", u[0], f[0], u[1]);  /* not pairs */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(cmd, sizeof(cmd), "%s %s 2>/dev/null", cli, bad[i]);
        ck_assert_msg(td_run(cmd, NULL, 0) == 1, "%s", cmd);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    ck_assert_int_eq(td_stop(&d, SIGTERM, 10000), 0);
    td_cleanup();
}
END_TEST

/* ---- Shumai's format ----------------------------------------------------------------------- */

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* A Shumai message: a 2x3 F32 tensor of 0.5 .. 3.0, the given provenance and props. */
static size_t shumai_msg(uint8_t *buf, uint64_t prov, uint64_t flags, const char *props)
{
    size_t plen = strlen(props);
    put64(buf, 2);
    put64(buf + 8, prov);
    put64(buf + 16, flags);
    put64(buf + 24, 24);
    put64(buf + 32, plen);
    put64(buf + 40, 2);
    put64(buf + 48, 3);
    float v[6] = {0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f};
    memcpy(buf + 56, v, sizeof(v));
    memcpy(buf + 80, props, plen);
    return 80 + plen;
}

START_TEST(shumai_get_decodes)
{
    uint8_t body[256];
    size_t len = shumai_msg(body, 0x0a1b2c3d, 1, "{\"collectStats\":false}");
    srv_t *s = srv_start(SRV_CANNED, 200, "Content-Type: application/octet-stream\r\n", body,
                         len);
    char url[128];
    srv_url(s, "/weights", url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_format(c, TF_FORMAT_SHUMAI), TF_OK);
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_OK);
    ck_assert_uint_eq(tf_doc_count(doc), 1);
    const tf_tensor_t *t = tf_doc_find(doc, "tensor");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, TF_F32);
    ck_assert_int_eq(t->rank, 2);
    ck_assert_int_eq(t->shape[0], 2);
    ck_assert_int_eq(t->shape[1], 3);
    ck_assert_mem_eq(t->data, body + 56, 24);
    ck_assert_str_eq(tf_doc_meta(doc, "shumai.user"), "a1b2c3d");
    ck_assert_str_eq(tf_doc_meta(doc, "shumai.requires_grad"), "true");
    ck_assert_str_eq(tf_doc_meta(doc, "shumai.props"), "{\"collectStats\":false}");
    tf_doc_free(doc);
    tf_client_free(c);
    srv_stop(s);
    /* stock Shumai sends no Accept of its own; neither does the client in its format */
    ck_assert_ptr_null(strcasestr(s->first_head, "x-safetensors"));
    srv_free(s);

    /* per request: the format of one GET, the client's staying safetensors */
    s = srv_start(SRV_CANNED, 200, "Content-Type: application/octet-stream\r\n", body, len);
    srv_url(s, "/weights", url, sizeof(url));
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    tf_fetch_t *f = NULL;
    tf_request_t rq = {.op = TF_OP_GET, .url = url, .format = TF_FORMAT_SHUMAI};
    ck_assert_int_eq(tf_fetch_start(c, &rq, NULL, NULL, &f), TF_OK);
    ck_assert_int_eq(tf_fetch_wait(f, 10000), TF_OK);
    doc = tf_fetch_take_doc(f);
    ck_assert_ptr_nonnull(tf_doc_find(doc, "tensor"));
    tf_doc_free(doc);
    tf_fetch_free(f);
    /* the same body read as safetensors is refused */
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_EPROTO);
    tf_client_free(c);
    srv_stop(s);
    srv_free(s);
}
END_TEST

START_TEST(shumai_exchange_encodes)
{
    srv_t *s = srv_start(SRV_ECHO, 0, NULL, NULL, 0);
    char url[128];
    srv_url(s, "/v1/call/echo", url, sizeof(url));
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {3, 2};
    tf_doc_t *in = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(in, "act", TF_F32, 2, shape, v, sizeof(v), TF_BORROW), TF_OK);
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_format(c, TF_FORMAT_SHUMAI), TF_OK);
    ck_assert_int_eq(tf_client_set_user(c, "0a1b2c3d"), TF_OK);
    tf_doc_t *out = NULL;
    ck_assert_int_eq(tf_fetch(c, url, in, &out), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->op, "call");
    /* the echo is decoded as Shumai: one tensor named "tensor", the user id back */
    const tf_tensor_t *t = tf_doc_find(out, "tensor");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->rank, 2);
    ck_assert_int_eq(t->shape[0], 3);
    ck_assert_mem_eq(t->data, v, sizeof(v));
    ck_assert_str_eq(tf_doc_meta(out, "shumai.user"), "a1b2c3d");
    tf_doc_free(out);
    tf_client_free(c);
    srv_stop(s);

    /* what went on the wire, word by word */
    static const char props[] = "{\"collectStats\":false}";
    ck_assert_ptr_nonnull(strstr(s->first_head, "POST /v1/call/echo HTTP/1.1\r\n"));
    ck_assert_ptr_nonnull(strcasestr(s->first_head, "\r\nContent-Type: application/octet-stream\r\n"));
    ck_assert_uint_eq(s->first_body_len, 40 + 16 + sizeof(v) + sizeof(props) - 1);
    const uint8_t *b = s->first_body;
    ck_assert_uint_eq(get64(b), 2);
    ck_assert_uint_eq(get64(b + 8), 0x0a1b2c3d);
    ck_assert_uint_eq(get64(b + 16), 0);
    ck_assert_uint_eq(get64(b + 24), sizeof(v));
    ck_assert_uint_eq(get64(b + 32), sizeof(props) - 1);
    ck_assert_uint_eq(get64(b + 40), 3);
    ck_assert_uint_eq(get64(b + 48), 2);
    ck_assert_mem_eq(b + 56, v, sizeof(v));
    ck_assert_mem_eq(b + 56 + sizeof(v), props, sizeof(props) - 1);
    srv_free(s);

    /* a user id that is not hex travels as "no provenance" */
    s = srv_start(SRV_ECHO, 0, NULL, NULL, 0);
    srv_url(s, "/v1/call/echo", url, sizeof(url));
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_user(c, "alice"), TF_OK);
    tf_request_t rq = {.op = TF_OP_EXCHANGE, .url = url, .in = in, .format = TF_FORMAT_SHUMAI};
    tf_fetch_t *f = NULL;
    ck_assert_int_eq(tf_fetch_start(c, &rq, NULL, NULL, &f), TF_OK);
    ck_assert_int_eq(tf_fetch_wait(f, 10000), TF_OK);
    out = tf_fetch_take_doc(f);
    ck_assert_ptr_null(tf_doc_meta(out, "shumai.user"));
    tf_doc_free(out);
    tf_fetch_free(f);
    tf_client_free(c);
    srv_stop(s);
    ck_assert_uint_eq(get64(s->first_body + 8), 0xffffffffu);
    srv_free(s);
    tf_doc_free(in);
}
END_TEST

START_TEST(shumai_refusals)
{
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_format(c, TF_FORMAT_SHUMAI), TF_OK);
    const char *url = "http://127.0.0.1:1/v1/call/echo";
    int32_t iv[2] = {1, 2};
    float fv[2] = {1, 2};
    int64_t shape[1] = {2};
    tf_doc_t *ints = tf_doc_new(), *two = tf_doc_new(), *none = tf_doc_new(), *out = NULL;
    ck_assert_int_eq(tf_doc_add(ints, "ids", TF_I32, 1, shape, iv, sizeof(iv), TF_COPY), TF_OK);
    ck_assert_int_eq(tf_doc_add(two, "a", TF_F32, 1, shape, fv, sizeof(fv), TF_COPY), TF_OK);
    ck_assert_int_eq(tf_doc_add(two, "b", TF_F32, 1, shape, fv, sizeof(fv), TF_COPY), TF_OK);

    ck_assert_int_eq(tf_fetch(c, url, ints, &out), TF_EINVAL);
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "F32"));
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "ids"));
    ck_assert_int_eq(tf_fetch(c, url, two, &out), TF_EINVAL);
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "one tensor"));
    ck_assert_int_eq(tf_fetch(c, url, none, &out), TF_EINVAL);
    ck_assert_int_eq(tf_put(c, url, two), TF_EINVAL);
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "put"));
    ck_assert_ptr_null(out);
    /* refused before anything was sent: a connection error would say otherwise */
    ck_assert_int_eq(tf_client_last(c)->http_status, 0);
    tf_doc_free(ints);
    tf_doc_free(two);
    tf_doc_free(none);
    tf_client_free(c);
}
END_TEST

START_TEST(shumai_bad_reply)
{
    uint8_t body[256];
    size_t len = shumai_msg(body, 1, 0, "{}");
    put64(body + 24, 28);                         /* claims more data than it has */
    srv_t *s = srv_start(SRV_CANNED, 200, "Content-Type: application/octet-stream\r\n", body,
                         len);
    char url[128];
    srv_url(s, "/x", url, sizeof(url));
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_format(c, TF_FORMAT_SHUMAI), TF_OK);
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_EPROTO);
    ck_assert_ptr_null(doc);
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "shumai"));
    ck_assert_int_eq(tf_client_last(c)->http_status, 200);
    tf_client_free(c);
    srv_stop(s);
    srv_free(s);
}
END_TEST

/* These count the requests a scripted server on loopback serves: the library must not
 * negotiate an upgrade before the first one (TFETCH_UPGRADE=lazy). */
static void async_lazy(void)
{
    setenv("TFETCH_UPGRADE", "lazy", 1);
}

Suite *suite_async(void)
{
    Suite *s = suite_create("async");

    TCase *once = tcase_create("once");
    tcase_add_checked_fixture(once, async_lazy, NULL);
    tcase_add_test(once, async_get_callback_once);
    tcase_add_test(once, async_errors_callback_once);
    tcase_add_test(once, async_timeout_callback_once);
    tcase_add_test(once, async_cancel_exactly_once);
    tcase_add_test(once, async_cancel_after_completion_harmless);
    tcase_set_timeout(once, 60);
    suite_add_tcase(s, once);

    TCase *drive = tcase_create("drive");
    tcase_add_checked_fixture(drive, async_lazy, NULL);
    tcase_add_test(drive, async_start_errors_never_call_back);
    tcase_add_test(drive, async_test_polls_to_completion);
    tcase_add_test(drive, async_promise_without_callback);
    tcase_add_test(drive, async_start_from_callback);
    tcase_add_test(drive, async_callback_rules);
    tcase_add_test(drive, async_progress_callback_rules);
    tcase_add_test(drive, async_blocking_call_drives_others);
    tcase_add_test(drive, async_run_timeout_and_pending);
    tcase_add_test(drive, async_wakeup_ends_run);
    tcase_set_timeout(drive, 60);
    suite_add_tcase(s, drive);

    TCase *many = tcase_create("many");
    tcase_add_checked_fixture(many, async_lazy, NULL);
    tcase_add_test(many, async_thousand_exchanges_in_flight);
    tcase_add_test(many, async_max_connections);
    tcase_add_test(many, async_daemon_echo_thousand);
    tcase_add_test(many, async_cli_batches);
    tcase_set_timeout(many, 300);
    suite_add_tcase(s, many);

    TCase *shumai = tcase_create("shumai");
    tcase_add_checked_fixture(shumai, async_lazy, NULL);
    tcase_add_test(shumai, shumai_get_decodes);
    tcase_add_test(shumai, shumai_exchange_encodes);
    tcase_add_test(shumai, shumai_refusals);
    tcase_add_test(shumai, shumai_bad_reply);
    tcase_set_timeout(shumai, 60);
    suite_add_tcase(s, shumai);
    return s;
}
