/* check_framing.c - the framing suite: the real tfetchd (port 0) fed raw bytes over a
 * socket, one request smuggling attempt at a time (two Content-Length, a space before the
 * colon, obs-fold, Transfer-Encoding with Content-Length or with a coding other than chunked,
 * no Host or two, bare LF, HTTP/1.0 with chunked, NUL in a header, duplicate or folded ids,
 * %00 in a path). Each must get its status (400, or 501 for an unknown coding) with our JSON
 * error body at once, the connection closed, and the DELETE smuggled behind it must not run:
 * the tensor it names is still there. Well-formed pipelining keeps working.
 * Each test starts its own daemon (Check forks per test), so tests share nothing.
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "transports/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static td_daemon_t D;

static void start(const char *const *args)
{
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
}

static void stop_clean(void)
{
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}

/* What came back on one connection. */
typedef struct {
    char buf[16384];
    size_t len;
    int closed;                     /* the server closed it (EOF or reset) */
    uint64_t ms;                    /* from the send to the close (or the timeout) */
} reply_t;

/* Sends len bytes on a fresh connection and reads until the server closes it or wait_ms
 * pass. */
static void exchange(const void *req, size_t len, int wait_ms, reply_t *out)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)D.port) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    uint64_t t0, deadline;

    memset(out, 0, sizeof *out);
    ck_assert_int_ge(fd, 0);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    t0 = tfx_now_ms();
    ck_assert_int_eq(send(fd, req, len, MSG_NOSIGNAL), (ssize_t)len);
    deadline = t0 + (uint64_t)wait_ms;
    while (tfx_now_ms() < deadline && out->len < sizeof out->buf - 1) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        ssize_t got;

        if (poll(&p, 1, 50) <= 0)
            continue;
        got = recv(fd, out->buf + out->len, sizeof out->buf - 1 - out->len, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            out->closed = 1;
            break;
        }
        out->len += (size_t)got;
    }
    out->ms = tfx_now_ms() - t0;
    out->buf[out->len] = '\0';
    close(fd);
}

/* The status of the first response in r, or 0. */
static int status_of(const reply_t *r)
{
    int st = 0;

    if (sscanf(r->buf, "HTTP/1.%*c %d", &st) != 1)
        return 0;
    return st;
}

/* How many responses r holds (status lines; bodies may hold NULs: searched by length). */
static int responses(const reply_t *r)
{
    int n = 0;

    for (size_t i = 0; i + 10 <= r->len; i++)
        if (memcmp(r->buf + i, "HTTP/1.", 7) == 0 && r->buf[i + 8] == ' ' &&
            r->buf[i + 9] >= '1' && r->buf[i + 9] <= '5')
            n++;
    return n;
}

static int request(const char *req, int wait_ms, reply_t *r)
{
    exchange(req, strlen(req), wait_ms, r);
    return status_of(r);
}

#define VICTIM_PUT                                                                           \
    "PUT /v1/tensors/victim HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\n" \
    "Tfetch-Dtype: U8\r\nTfetch-Shape: 4\r\nContent-Length: 4\r\nConnection: close\r\n\r\nabcd"
#define SMUGGLED "DELETE /v1/tensors/victim HTTP/1.1\r\nHost: t\r\n\r\n"

static void put_victim(void)
{
    reply_t r;
    int st = request(VICTIM_PUT, 10000, &r);

    ck_assert_msg(st == 201 || st == 204, "PUT victim: %s", r.buf);
}

static int victim_status(void)
{
    reply_t r;

    return request("GET /v1/tensors/victim HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                   10000, &r);
}

/* Sends raw (len bytes: NULs allowed) with SMUGGLED after it, and asserts: status want,
 * our JSON error body with code, Connection: close, the connection closed promptly, one
 * response only, and the victim still there. */
static void refused_at(int line, const char *what, const char *raw, size_t len, int want,
                       const char *code)
{
    static char req[8192];
    reply_t r;

    ck_assert_uint_lt(len + sizeof SMUGGLED, sizeof req);
    memcpy(req, raw, len);
    memcpy(req + len, SMUGGLED, sizeof SMUGGLED - 1);
    exchange(req, len + sizeof SMUGGLED - 1, 10000, &r);
    ck_assert_msg(status_of(&r) == want, "line %d, %s: got %d, want %d: %s", line, what,
                  status_of(&r), want, r.buf);
    ck_assert_msg(strstr(r.buf, code) != NULL, "line %d, %s: no %s in %s", line, what, code,
                  r.buf);
    ck_assert_msg(strstr(r.buf, "Content-Type: application/json") != NULL, "line %d, %s: %s",
                  line, what, r.buf);
    ck_assert_msg(strstr(r.buf, "Connection: close") != NULL, "line %d, %s: %s", line, what,
                  r.buf);
    ck_assert_msg(r.closed, "line %d, %s: the connection stayed open (%llu ms): %s", line,
                  what, (unsigned long long)r.ms, r.buf);
    ck_assert_msg(responses(&r) == 1, "line %d, %s: %d responses: %s", line, what,
                  responses(&r), r.buf);
    ck_assert_msg(victim_status() == 200, "line %d, %s: the smuggled DELETE ran", line, what);
}

#define REFUSED(what, raw, want, code) refused_at(__LINE__, what, raw, sizeof raw - 1, want, code)
#define BAD(what, raw) REFUSED(what, raw, 400, "\"code\":\"TF_EBADREQ\"")

/* A PUT of an empty U8 tensor up to the framing headers (which follow). */
#define PUT0 "PUT /v1/tensors/e HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\n" \
             "Tfetch-Dtype: U8\r\nTfetch-Shape: 0\r\n"

START_TEST(framing_body_length)
{
    start(NULL);
    put_victim();
    BAD("two Content-Length", PUT0 "Content-Length: 0\r\nContent-Length: 47\r\n\r\n");
    BAD("two equal Content-Length", PUT0 "Content-Length: 0\r\nContent-Length: 0\r\n\r\n");
    BAD("Content-Length : N", PUT0 "Content-Length : 47\r\n\r\n");
    BAD("folded Content-Length", PUT0 "Content-Length: 0\r\n 47\r\n\r\n");
    BAD("folded Content-Length, empty first line", PUT0 "Content-Length:\r\n 0\r\nX: 1\r\n\r\n");
    BAD("Transfer-Encoding with Content-Length",
        PUT0 "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n");
    BAD("Content-Length with Transfer-Encoding",
        PUT0 "Content-Length: 52\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    BAD("chunked twice", PUT0 "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n");
    BAD("chunked in two headers",
        PUT0 "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    BAD("chunked not last", PUT0 "Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n");
    BAD("HTTP/1.0 with chunked",
        "PUT /v1/tensors/e HTTP/1.0\r\nContent-Type: application/octet-stream\r\n"
        "Tfetch-Dtype: U8\r\nTfetch-Shape: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    stop_clean();
}
END_TEST

START_TEST(framing_unknown_coding_501_at_once)
{
    static const char *const codings[] = { "gzip", "identity", "gzip, chunked", "deflate" };

    start(NULL);
    put_victim();
    for (size_t i = 0; i < sizeof codings / sizeof codings[0]; i++) {
        char raw[512];
        int n = snprintf(raw, sizeof raw, PUT0 "Transfer-Encoding: %s\r\n\r\n", codings[i]);

        refused_at(__LINE__, codings[i], raw, (size_t)n, 501, "\"code\":\"TF_ENOTIMPL\"");
    }
    /* at once: not after the idle timeout */
    reply_t r;
    ck_assert_int_eq(request(PUT0 "Transfer-Encoding: gzip\r\n\r\n", 10000, &r), 501);
    ck_assert_msg(r.ms < 3000, "501 took %llu ms", (unsigned long long)r.ms);
    stop_clean();
}
END_TEST

/* A Transfer-Encoding that libmicrohttpd does not read as chunked (it compares the whole
 * value) while a lenient reader would: refused at once, not a 408 after waiting for a body
 * neither side can frame. */
START_TEST(framing_loose_chunked_400_at_once)
{
    static const char *const codings[] = { "chunked ", ",chunked", "chunked\t", "chunked,",
                                           ", chunked", "chunked , " };

    start(NULL);
    put_victim();
    for (size_t i = 0; i < sizeof codings / sizeof codings[0]; i++) {
        char raw[512];
        int n = snprintf(raw, sizeof raw, PUT0 "Transfer-Encoding: %s\r\n\r\n0\r\n\r\n",
                         codings[i]);
        reply_t r;

        refused_at(__LINE__, codings[i], raw, (size_t)n, 400, "\"code\":\"TF_EBADREQ\"");
        n = snprintf(raw, sizeof raw, PUT0 "Transfer-Encoding: %s\r\n\r\n", codings[i]);
        ck_assert_int_eq(request(raw, 10000, &r), 400);
        ck_assert_msg(r.ms < 3000, "'%s': 400 took %llu ms", codings[i],
                      (unsigned long long)r.ms);
    }
    /* Two tokens: one reader would take the first, another the last. */
    BAD("two Authorization", "DELETE /v1/tensors/victim HTTP/1.1\r\nHost: t\r\n"
        "Authorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n");
    stop_clean();
}
END_TEST

START_TEST(framing_host_lines_names)
{
    start(NULL);
    put_victim();
    BAD("HTTP/1.1 without Host", "GET /healthz HTTP/1.1\r\nX: 1\r\n\r\n");
    BAD("two Host", "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
    BAD("bare LF after the request line", "GET /healthz HTTP/1.1\nHost: t\r\n\r\n");
    BAD("bare LF after a header", "GET /healthz HTTP/1.1\r\nHost: t\nX: 1\r\n\r\n");
    BAD("space in a header name", "GET /healthz HTTP/1.1\r\nHost: t\r\nX A: 1\r\n\r\n");
    BAD("tab before the colon", "GET /healthz HTTP/1.1\r\nHost: t\r\nX-A\t: 1\r\n\r\n");
    BAD("HTTP/1.2", "GET /healthz HTTP/1.2\r\nHost: t\r\n\r\n");
    stop_clean();
}
END_TEST

START_TEST(framing_ids_and_nul)
{
    start(NULL);
    put_victim();
    BAD("NUL in Tfetch-User", "DELETE /v1/tensors/victim HTTP/1.1\r\nHost: t\r\n"
        "Tfetch-User: alice\0evil\r\nX: 1\r\n\r\n");
    BAD("NUL in the last header", "DELETE /v1/tensors/victim HTTP/1.1\r\nHost: t\r\n"
        "Tfetch-User: alice\0evil\r\n\r\n");
    BAD("NUL in Tfetch-Request-Id", "DELETE /v1/tensors/victim HTTP/1.1\r\nHost: t\r\n"
        "Tfetch-Request-Id: r1\0r2\r\n\r\n");
    BAD("two Tfetch-User", "DELETE /v1/tensors/victim HTTP/1.1\r\nHost: t\r\n"
        "Tfetch-User: alice\r\nTfetch-User: bob\r\n\r\n");
    BAD("two Tfetch-Request-Id", "DELETE /v1/tensors/victim HTTP/1.1\r\nHost: t\r\n"
        "Tfetch-Request-Id: a\r\nTfetch-Request-Id: b\r\n\r\n");
    BAD("folded Tfetch-User", "DELETE /v1/tensors/victim HTTP/1.1\r\nHost: t\r\n"
        "Tfetch-User:\r\n alice\r\n\r\n");
    BAD("folded Tfetch-Request-Id", "DELETE /v1/tensors/victim HTTP/1.1\r\nHost: t\r\n"
        "Tfetch-Request-Id: a\r\n\tb\r\nX: 1\r\n\r\n");
    stop_clean();
}
END_TEST

START_TEST(framing_nul_in_path)
{
    start(NULL);
    put_victim();
    BAD("%00 in a tensor path", "DELETE /v1/tensors/victim%00x HTTP/1.1\r\nHost: t\r\n\r\n");
    BAD("%00 at the end", "DELETE /v1/tensors/victim%00 HTTP/1.1\r\nHost: t\r\n\r\n");
    BAD("%00 after an escape", "DELETE /v1/tensors/vict%69m%00x HTTP/1.1\r\nHost: t\r\n\r\n");
    BAD("%00 before a query", "DELETE /v1/tensors/victim%00x?wait=1 HTTP/1.1\r\nHost: t\r\n\r\n");
    BAD("raw NUL in a tensor path", "DELETE /v1/tensors/victim\0x HTTP/1.1\r\nHost: t\r\n\r\n");
    BAD("%00 in a call path", "POST /v1/call/victim%00x HTTP/1.1\r\nHost: t\r\n"
        "Content-Length: 0\r\n\r\n");
    BAD("%00 in a Shumai path", "GET /victim%00x HTTP/1.1\r\nHost: t\r\n\r\n");
    BAD("%00 in another path", "GET /healthz%00 HTTP/1.1\r\nHost: t\r\n\r\n");
    BAD("%01 in a path", "GET /v1/tensors/victim%01 HTTP/1.1\r\nHost: t\r\n\r\n");
    BAD("%00 in the query", "GET /v1/tensors/victim?wait=1%00x HTTP/1.1\r\nHost: t\r\n\r\n");
    stop_clean();
}
END_TEST

START_TEST(framing_oversized_put_413_at_once)
{
    reply_t r;
    /* max-body's default is the store's memory (half of this machine's): a fixed cap. */
    const char *const args[] = {"--max-body", "1G", NULL};

    start(args);
    /* 1 TB declared, no body sent: answered now, not after a drain that never comes */
    ck_assert_int_eq(request(PUT0 "Content-Length: 1000000000000\r\n\r\n", 10000, &r), 413);
    ck_assert_msg(strstr(r.buf, "\"code\":\"TF_ETOOBIG\"") != NULL, "%s", r.buf);
    ck_assert_msg(r.closed && r.ms < 3000, "closed %d after %llu ms", r.closed,
                  (unsigned long long)r.ms);
    /* a raw tensor whose shape says more than the limit */
    ck_assert_int_eq(request("PUT /v1/tensors/big HTTP/1.1\r\nHost: t\r\n"
                             "Tfetch-Dtype: F32\r\nTfetch-Shape: 1000000000\r\n"
                             "Content-Length: 4000000000\r\n\r\n", 10000, &r), 413);
    ck_assert_msg(r.closed && r.ms < 3000, "closed %d after %llu ms", r.closed,
                  (unsigned long long)r.ms);
    stop_clean();
}
END_TEST

START_TEST(framing_well_formed_still_served)
{
    reply_t r;

    start(NULL);
    put_victim();
    /* pipelined keep-alive requests, percent-escapes, a query, HTTP/1.0 without Host, the
     * Host header in any case, spaces and tabs around a value */
    const char *two = "GET /v1/tensors/vict%69m HTTP/1.1\r\nHost: t\r\n"
                      "Accept: application/octet-stream\r\n\r\n"
                      "GET /v1/tensors/victim?wait=0 HTTP/1.1\r\nhost: t\r\nX-A:  \tv \r\n"
                      "Accept: application/octet-stream\r\nConnection: close\r\n\r\n";
    exchange(two, strlen(two), 10000, &r);
    ck_assert_msg(responses(&r) == 2 && status_of(&r) == 200 &&
                  strstr(strstr(r.buf, "abcd") + 4, "HTTP/1.1 200") != NULL, "%s", r.buf);
    ck_assert_int_eq(request("GET /v1/tensors/victim HTTP/1.0\r\n\r\n", 10000, &r), 200);
    ck_assert_int_eq(request("GET /v1/tensors/victim? HTTP/1.1\r\nHost: t\r\n"
                             "Connection: close\r\n\r\n", 10000, &r), 200);
    ck_assert_int_eq(request("GET /v1/tensors/vi%63tim?wait=0&x=%41 HTTP/1.1\r\nHost: t\r\n"
                             "Connection: close\r\n\r\n", 10000, &r), 200);
    /* a chunked PUT and a PUT by length, pipelined */
    const char *puts = "PUT /v1/tensors/c HTTP/1.1\r\nHost: t\r\n"
                       "Content-Type: application/octet-stream\r\nTfetch-Dtype: U8\r\n"
                       "Tfetch-Shape: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n"
                       "PUT /v1/tensors/d HTTP/1.1\r\nHost: t\r\n"
                       "Content-Type: application/octet-stream\r\nTfetch-Dtype: U8\r\n"
                       "Tfetch-Shape: 2\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi";
    exchange(puts, strlen(puts), 10000, &r);
    ck_assert_msg(responses(&r) == 2 && status_of(&r) == 201, "%s", r.buf);
    ck_assert_msg(strstr(r.buf + 10, "HTTP/1.1 201") != NULL, "%s", r.buf);
    /* a smuggled-looking body that is only a body is stored, not run */
    ck_assert_int_eq(victim_status(), 200);
    stop_clean();
}
END_TEST

Suite *suite_framing(void)
{
    Suite *s = suite_create("framing");
    TCase *tc = tcase_create("framing");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, framing_body_length);
    tcase_add_test(tc, framing_unknown_coding_501_at_once);
    tcase_add_test(tc, framing_loose_chunked_400_at_once);
    tcase_add_test(tc, framing_host_lines_names);
    tcase_add_test(tc, framing_ids_and_nul);
    tcase_add_test(tc, framing_nul_in_path);
    tcase_add_test(tc, framing_oversized_put_413_at_once);
    tcase_add_test(tc, framing_well_formed_still_served);
    suite_add_tcase(s, tc);
    return s;
}
