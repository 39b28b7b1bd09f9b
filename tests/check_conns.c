/* check_conns.c - connections and workers under attack: the HTTP connection guard
 * (transports/http_guard.c) on a driven clock, then the real tfetchd: the head deadline a
 * trickled header cannot reset, prompt refusal beyond the connection limit (and the per-
 * address cap), a health probe served during a slowloris attack, a too-slow body answered
 * 408, the daemon's peak memory for a chunked upload in tiny chunks, and worker secrets (a
 * client that knows a worker's id but not its secret can neither poll, answer nor delete).
 * Each daemon test starts its own tfetchd (Check forks per test).
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "transports/http_guard.h"
#include "proto/ids.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static td_daemon_t D;
static char out[1 << 16];

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

/* ---- sockets ------------------------------------------------------------------------------ */

/* Whether the peer of fd has closed (EOF or reset) within ms; data that arrives first is
 * read and kept in buf (NUL-terminated) when buf is given. */
static int peer_closed(int fd, int ms, char *buf, size_t cap)
{
    size_t have = 0;
    uint64_t end = now_ms() + (uint64_t)ms;
    for (;;) {
        int left = (int)(end > now_ms() ? end - now_ms() : 0);
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, left) <= 0)
            return 0;
        char tmp[4096];
        ssize_t n = recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return 1;
        if (n > 0 && buf && have + 1 < cap) {
            size_t k = (size_t)n < cap - 1 - have ? (size_t)n : cap - 1 - have;
            memcpy(buf + have, tmp, k);
            have += k;
            buf[have] = '\0';
        }
    }
}

/* A TCP connection to the daemon from source address src (127.0.0.x; NULL: any). */
static int connect_from(const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (src) {
        inet_pton(AF_INET, src, &a.sin_addr);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    }
    a.sin_port = htons((uint16_t)D.port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_msg(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s",
                  strerror(errno));
    return fd;
}

static int send_str(int fd, const char *s)
{
    size_t n = strlen(s);
    return send(fd, s, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

static void send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        ck_assert_msg(k > 0, "send: %s", strerror(errno));
        c += k;
        n -= (size_t)k;
    }
}

/* GET path on a fresh connection from src; the status, or -1 when the connection closed or
 * timeout_ms passed without a whole answer. *ms gets how long it took. */
static int probe(const char *src, const char *path, int timeout_ms, double *ms)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int fd = connect_from(src);
    char req[256], buf[4096];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    int status = -1;
    buf[0] = '\0';
    if (send_str(fd, req) == 0 && peer_closed(fd, timeout_ms, buf, sizeof buf) &&
        strncmp(buf, "HTTP/1.1 ", 9) == 0)
        status = atoi(buf + 9);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    close(fd);
    return status;
}

/* The value of one /metrics line ("name{labels}"), read over a fresh connection. */
static long long metric(const char *line)
{
    static char buf[1 << 16];
    buf[0] = '\0';
    /* A few tries: a connection refused at the limit is closed unanswered. */
    for (int i = 0; i < 20 && strncmp(buf, "HTTP/1.1 200", 12) != 0; i++) {
        if (i)
            sleep_ms(100);
        int fd = connect_from(NULL);
        if (send_str(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") ||
            !peer_closed(fd, 3000, buf, sizeof buf))
            buf[0] = '\0';
        close(fd);
    }
    char pat[256];
    snprintf(pat, sizeof pat, "\n%s ", line);
    const char *p = strstr(buf, pat);
    ck_assert_msg(p != NULL, "no %s in /metrics: %.300s", line, buf);
    return atoll(p + strlen(pat));
}

static void start(const char *const *args)
{
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
}

static void stop_clean(void)
{
    ck_assert_int_eq(td_stop(&D, SIGTERM, 20000), 0);
    td_cleanup();
}

/* ---- the guard on a driven clock ------------------------------------------------------ */

/* A connected pair: the guard gets [0], the test watches [1]. */
static void pair(int sv[2])
{
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

static int shut(int peer)
{
    return peer_closed(peer, 0, NULL, 0);
}

START_TEST(guard_evicts_the_longest_waiting_or_refuses)
{
    tfx_guard_config_t cfg = {2, 0, 0, 0, 0};
    tfx_guard_t *g = tfx_guard_new(&cfg);
    int a[2], b[2], c[2];
    pair(a);
    pair(b);
    pair(c);
    ck_assert_int_eq(tfx_guard_admit(g, 0), 1);
    tfx_guard_conn_t *ca = tfx_guard_open(g, a[0], 0);
    ck_assert_int_eq(tfx_guard_admit(g, 10), 1);
    tfx_guard_conn_t *cb = tfx_guard_open(g, b[0], 10);
    ck_assert_int_eq(tfx_guard_count(g), 2);
    /* At the limit: the longest waiting (a) gives way. */
    ck_assert_int_eq(tfx_guard_admit(g, 20), 1);
    ck_assert(shut(a[1]));
    ck_assert(!shut(b[1]));
    ck_assert_int_eq(tfx_guard_count(g), 1);
    tfx_guard_conn_t *cc = tfx_guard_open(g, c[0], 20);
    /* Both busy: nobody waits, so a newcomer is refused and nothing is shut. */
    tfx_guard_head(g, cb, 0, 30);
    tfx_guard_head(g, cc, 1, 30);
    ck_assert_int_eq(tfx_guard_admit(g, 40), 0);
    ck_assert(!shut(b[1]) && !shut(c[1]));
    /* b's request ends: kept alive, it waits again and may give way. */
    tfx_guard_idle(g, cb, 50);
    ck_assert_int_eq(tfx_guard_admit(g, 60), 1);
    ck_assert(shut(b[1]));
    ck_assert(!shut(c[1]));
    tfx_guard_stats_t st;
    tfx_guard_stats(g, &st);
    ck_assert_uint_eq(st.evicted, 2);
    ck_assert_uint_eq(st.refused, 1);
    tfx_guard_close(g, ca);
    tfx_guard_close(g, cb);
    tfx_guard_close(g, cc);
    ck_assert_int_eq(tfx_guard_count(g), 0);
    tfx_guard_free(g);
    for (int i = 0; i < 2; i++) {
        close(a[i]);
        close(b[i]);
        close(c[i]);
    }
}
END_TEST

START_TEST(guard_head_deadline_from_open_and_from_each_answer)
{
    tfx_guard_config_t cfg = {16, 2000, 0, 0, 0};
    tfx_guard_t *g = tfx_guard_new(&cfg);
    int a[2], b[2];
    pair(a);
    pair(b);
    tfx_guard_conn_t *ca = tfx_guard_open(g, a[0], 0);
    tfx_guard_conn_t *cb = tfx_guard_open(g, b[0], 0);
    tfx_guard_head(g, cb, 0, 500);              /* b's head came in time */
    tfx_guard_sweep(g, 1999);
    ck_assert(!shut(a[1]));
    tfx_guard_sweep(g, 2000);
    ck_assert(shut(a[1]));
    tfx_guard_sweep(g, 5000);                   /* busy: no deadline of ours */
    ck_assert(!shut(b[1]));
    tfx_guard_busy(g, cb);
    tfx_guard_idle(g, cb, 6000);                /* answered; the next head is due by 8000 */
    tfx_guard_sweep(g, 7999);
    ck_assert(!shut(b[1]));
    tfx_guard_sweep(g, 8000);
    ck_assert(shut(b[1]));
    tfx_guard_stats_t st;
    tfx_guard_stats(g, &st);
    ck_assert_uint_eq(st.head_timeouts, 2);
    ck_assert_int_eq(tfx_guard_count(g), 0);
    tfx_guard_close(g, ca);
    tfx_guard_close(g, cb);
    tfx_guard_free(g);
    for (int i = 0; i < 2; i++) {
        close(a[i]);
        close(b[i]);
    }
}
END_TEST

START_TEST(guard_body_rate_windows_answer_408)
{
    tfx_guard_config_t cfg = {16, 0, 1000, 0, 0};   /* 1000 B/s: 10000 B per 10 s window */
    tfx_guard_t *g = tfx_guard_new(&cfg);
    int a[2], b[2], c[2];
    pair(a);
    pair(b);
    pair(c);
    char buf[1024];
    /* a trickles: caught when a byte arrives after its first window. */
    tfx_guard_conn_t *ca = tfx_guard_open(g, a[0], 0);
    tfx_guard_head(g, ca, 1, 0);
    ck_assert_int_eq(tfx_guard_body(g, ca, 500, 5000), 0);
    ck_assert_int_eq(tfx_guard_body(g, ca, 100, 10000), -1);
    ck_assert(peer_closed(a[1], 100, buf, sizeof buf));
    ck_assert_msg(strncmp(buf, "HTTP/1.1 408 ", 13) == 0, "%s", buf);
    ck_assert_msg(strstr(buf, "\"code\":\"TF_EREQTIME\"") != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, "Connection: close") != NULL, "%s", buf);
    /* b passes a window, then stalls: the sweep catches the silent one. */
    tfx_guard_conn_t *cb = tfx_guard_open(g, b[0], 0);
    tfx_guard_head(g, cb, 1, 0);
    ck_assert_int_eq(tfx_guard_body(g, cb, 20000, 9000), 0);
    tfx_guard_sweep(g, 10000);                  /* window 1 passed: the next runs from here */
    tfx_guard_sweep(g, 19999);
    ck_assert(!shut(b[1]));
    tfx_guard_sweep(g, 20000);
    ck_assert(peer_closed(b[1], 100, buf, sizeof buf));
    ck_assert_msg(strncmp(buf, "HTTP/1.1 408 ", 13) == 0, "%s", buf);
    /* c keeps up (2000 B/s for a minute) and is left alone, also by the sweep. */
    tfx_guard_conn_t *cc = tfx_guard_open(g, c[0], 0);
    tfx_guard_head(g, cc, 1, 0);
    for (uint64_t t = 1000; t <= 60000; t += 1000) {
        ck_assert_int_eq(tfx_guard_body(g, cc, 2000, t), 0);
        tfx_guard_sweep(g, t);
    }
    tfx_guard_busy(g, cc);                      /* complete: no more windows */
    tfx_guard_sweep(g, 200000);
    ck_assert(!shut(c[1]));
    tfx_guard_stats_t st;
    tfx_guard_stats(g, &st);
    ck_assert_uint_eq(st.slow_bodies, 2);
    tfx_guard_close(g, ca);
    tfx_guard_close(g, cb);
    tfx_guard_close(g, cc);
    tfx_guard_free(g);
    for (int i = 0; i < 2; i++) {
        close(a[i]);
        close(b[i]);
        close(c[i]);
    }
}
END_TEST

/* A body whose bytes wait unread in the server's socket is the server's delay, not the
 * client's (starved threads, as a loaded CI machine's soak showed: a 256-byte PUT answered
 * 408): neither the window nor eviction at the limit holds it against the client. Once
 * read, a silent client is cut at the next window's end as before. */
START_TEST(guard_spares_a_body_the_server_has_not_read)
{
    tfx_guard_config_t cfg = {1, 0, 1000, 0, 10000};   /* 1000 B/s; one connection at most */
    tfx_guard_t *g = tfx_guard_new(&cfg);
    int a[2];
    pair(a);
    char buf[1024];
    tfx_guard_conn_t *ca = tfx_guard_open(g, a[0], 0);
    tfx_guard_head(g, ca, 1, 0);
    ck_assert_int_eq(send(a[1], "body", 4, 0), 4);       /* sent, not yet read by us */
    tfx_guard_sweep(g, 15000);
    ck_assert_msg(!shut(a[1]), "a client whose bytes the server did not read was cut");
    ck_assert_int_eq(tfx_guard_admit(g, 15000), 0);      /* no room made at its expense */
    ck_assert(!shut(a[1]));
    ck_assert_int_eq(recv(a[0], buf, sizeof buf, 0), 4); /* the server reads them... */
    ck_assert_int_eq(tfx_guard_body(g, ca, 4, 15001), 0);
    tfx_guard_sweep(g, 24999);                           /* ...and the client says no more */
    ck_assert(!shut(a[1]));
    tfx_guard_sweep(g, 25000);                           /* a window from the spared one */
    ck_assert(peer_closed(a[1], 100, buf, sizeof buf));
    ck_assert_msg(strncmp(buf, "HTTP/1.1 408 ", 13) == 0, "%s", buf);
    tfx_guard_stats_t st;
    tfx_guard_stats(g, &st);
    ck_assert_uint_eq(st.slow_bodies, 1);
    ck_assert_uint_eq(st.evicted_slow, 0);
    tfx_guard_close(g, ca);
    tfx_guard_free(g);
    close(a[0]);
    close(a[1]);
}
END_TEST

START_TEST(guard_evicts_the_slowest_transfer_below_its_floor)
{
    tfx_guard_config_t cfg = {3, 0, 1000, 0, 10000};    /* bodies: 1000 B/s */
    tfx_guard_t *g = tfx_guard_new(&cfg);
    int a[2], b[2], c[2], d[2], e[2];
    pair(a);
    pair(b);
    pair(c);
    pair(d);
    pair(e);
    char buf[1024];
    /* a trickles (50 B/s), b keeps up (2500 B/s), c has just opened. */
    tfx_guard_conn_t *ca = tfx_guard_open(g, a[0], 0);
    tfx_guard_conn_t *cb = tfx_guard_open(g, b[0], 0);
    tfx_guard_head(g, ca, 1, 0);
    tfx_guard_head(g, cb, 1, 0);
    ck_assert_int_eq(tfx_guard_body(g, ca, 100, 1900), 0);
    ck_assert_int_eq(tfx_guard_body(g, cb, 5000, 1900), 0);
    tfx_guard_conn_t *cc = tfx_guard_open(g, c[0], 1500);
    /* At the limit: c waited 500 ms (not its grace): the slowest body below its floor goes,
     * with a 408 that says why; b and c stay. */
    ck_assert_int_eq(tfx_guard_admit(g, 2000), 1);
    ck_assert(peer_closed(a[1], 100, buf, sizeof buf));
    ck_assert_msg(strncmp(buf, "HTTP/1.1 408 ", 13) == 0, "%s", buf);
    ck_assert_msg(strstr(buf, "connection limit") != NULL, "%s", buf);
    ck_assert(!shut(b[1]) && !shut(c[1]));
    tfx_guard_conn_t *cd = tfx_guard_open(g, d[0], 2000);
    /* A trickling body younger than the grace period is not judged yet: with b above its
     * floor, the oldest head (c) gives way, however briefly it has waited. */
    tfx_guard_head(g, cd, 1, 2000);
    ck_assert_int_eq(tfx_guard_admit(g, 2400), 1);
    ck_assert(shut(c[1]));
    ck_assert(!shut(b[1]) && !shut(d[1]));
    tfx_guard_conn_t *ce = tfx_guard_open(g, e[0], 2500);
    tfx_guard_head(g, ce, 0, 2600);                     /* e is handled (busy) */
    /* b above its floor, d still in its grace, e busy, nobody waits: refused. */
    ck_assert_int_eq(tfx_guard_admit(g, 2900), 0);
    ck_assert(!shut(b[1]) && !shut(d[1]) && !shut(e[1]));
    /* Once d has run its grace below the floor, it makes room. */
    ck_assert_int_eq(tfx_guard_admit(g, 3100), 1);
    ck_assert(shut(d[1]));
    ck_assert(!shut(b[1]) && !shut(e[1]));
    tfx_guard_stats_t st;
    tfx_guard_stats(g, &st);
    ck_assert_uint_eq(st.evicted_slow, 2);
    ck_assert_uint_eq(st.evicted, 1);
    ck_assert_uint_eq(st.refused, 1);
    ck_assert_uint_eq(st.slow_bodies, 0);
    tfx_guard_close(g, ca);
    tfx_guard_close(g, cb);
    tfx_guard_close(g, cc);
    tfx_guard_close(g, cd);
    tfx_guard_close(g, ce);
    tfx_guard_free(g);
    int *all[] = {a, b, c, d, e};
    for (int k = 0; k < 5; k++)
        for (int i = 0; i < 2; i++)
            close(all[k][i]);
}
END_TEST

/* A loopback TCP connection: sv[0] the server's end (non-blocking), sv[1] the client's;
 * both buffers small so that what the client has not read holds the sender back. */
static void tcp_pair(int sv[2])
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t al = sizeof a;
    ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(l, 1), 0);
    ck_assert_int_eq(getsockname(l, (struct sockaddr *)&a, &al), 0);
    sv[1] = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    ck_assert_int_eq(connect(sv[1], (struct sockaddr *)&a, sizeof a), 0);
    sv[0] = accept4(l, NULL, NULL, SOCK_NONBLOCK);
    ck_assert_int_ge(sv[0], 0);
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);   /* no autotuning */
    close(l);
}

/* Moves up to n bytes from the server's end to the client, which reads them all when read
 * is 1, or nothing. Returns the bytes written. */
static size_t push(int sv[2], size_t n, int read)
{
    static char chunk[65536], sink[65536];
    size_t sent = 0;
    uint64_t t0 = now_ms();
    while (sent < n && now_ms() - t0 < 5000) {
        size_t k = n - sent < sizeof chunk ? n - sent : sizeof chunk;
        ssize_t w = send(sv[0], chunk, k, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0)
            sent += (size_t)w;
        else if (!read)
            break;                                  /* full: the reader takes nothing */
        if (read)
            while (recv(sv[1], sink, sizeof sink, MSG_DONTWAIT) > 0)
                ;
    }
    if (read)
        for (uint64_t t1 = now_ms(); now_ms() - t1 < 500;)
            if (recv(sv[1], sink, sizeof sink, MSG_DONTWAIT) <= 0)
                sleep_ms(5);
    return sent;
}

START_TEST(guard_cuts_and_evicts_slow_readers)
{
    /* Answers: 1 MB/s over 1 s windows; bodies: no floor. */
    tfx_guard_config_t cfg = {2, 0, 0, 1000000, 1000};
    tfx_guard_t *g = tfx_guard_new(&cfg);
    int fast[2], slow[2], late[2];
    tcp_pair(fast);
    tcp_pair(slow);
    tfx_guard_conn_t *cf = tfx_guard_open(g, fast[0], 0);
    tfx_guard_conn_t *cs = tfx_guard_open(g, slow[0], 0);
    tfx_guard_head(g, cf, 0, 0);
    tfx_guard_head(g, cs, 0, 0);
    tfx_guard_send(g, cf, 0);
    tfx_guard_send(g, cs, 0);
    /* fast takes 3 MB in its first window; slow takes what its buffers hold, then nothing. */
    ck_assert_uint_eq(push(fast, 3000000, 1), 3000000);
    size_t held = push(slow, 3000000, 0);
    ck_assert_msg(held < 1000000, "the reader's buffers took %zu bytes", held);
    tfx_guard_sweep(g, 999);
    ck_assert(!shut(fast[1]) && !shut(slow[1]));
    tfx_guard_sweep(g, 1000);
    ck_assert(shut(slow[1]));                           /* below 1 MB/s over the window */
    ck_assert(!shut(fast[1]));
    tfx_guard_stats_t st;
    tfx_guard_stats(g, &st);
    ck_assert_uint_eq(st.slow_readers, 1);
    /* At the limit, a reader below its floor gives way, judged on its average since the
     * answer began (1.5 MB/s for fast until it stalls: then 3 MB over 4 s is below). */
    tcp_pair(late);
    tfx_guard_conn_t *cl = tfx_guard_open(g, late[0], 1000);
    tfx_guard_head(g, cl, 0, 1100);                     /* busy, not sending */
    ck_assert_int_eq(tfx_guard_admit(g, 2000), 0);      /* fast averages 1.5 MB/s */
    ck_assert(!shut(fast[1]));
    ck_assert_int_eq(tfx_guard_admit(g, 4000), 1);      /* 0.75 MB/s */
    ck_assert(shut(fast[1]));
    ck_assert(!shut(late[1]));
    tfx_guard_stats(g, &st);
    ck_assert_uint_eq(st.evicted_slow, 1);
    ck_assert_uint_eq(st.refused, 1);
    tfx_guard_close(g, cf);
    tfx_guard_close(g, cs);
    tfx_guard_close(g, cl);
    tfx_guard_free(g);
    for (int i = 0; i < 2; i++) {
        close(fast[i]);
        close(slow[i]);
        close(late[i]);
    }
}
END_TEST

/* ---- the daemon: deadlines and limits ------------------------------------------------------- */

START_TEST(trickled_head_is_closed_at_the_deadline)
{
    const char *args[] = {"--header-timeout", "2", "--idle-timeout", "60", NULL};
    start(args);
    /* A complete head in time is served, on a kept-alive connection twice. */
    int fd = connect_from(NULL);
    ck_assert_int_eq(send_str(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
    char buf[4096];
    ck_assert(!peer_closed(fd, 1000, buf, sizeof buf));
    ck_assert_msg(strncmp(buf, "HTTP/1.1 200", 12) == 0, "%s", buf);
    close(fd);
    /* One header byte every 200 ms: each resets the idle timer, none the head deadline. */
    fd = connect_from(NULL);
    uint64_t t0 = now_ms();
    ck_assert_int_eq(send_str(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n"), 0);
    int closed = 0;
    while (!closed && now_ms() - t0 < 8000) {
        if (send_str(fd, "X") != 0)
            closed = 1;
        else
            closed = peer_closed(fd, 200, NULL, 0);
    }
    double secs = (double)(now_ms() - t0) / 1e3;
    ck_assert_msg(closed, "a trickled head kept its connection for %.1f s", secs);
    ck_assert_msg(secs >= 1.5 && secs < 5.0, "closed after %.2f s (header-timeout 2)", secs);
    close(fd);
    stop_clean();
}
END_TEST

/* Opens a long-poll (busy for wait_ms) from src; returns its socket. */
static int long_poll(const char *src, int wait_ms)
{
    int fd = connect_from(src);
    char req[256];
    snprintf(req, sizeof req, "GET /v1/tensors/none?wait=%d HTTP/1.1\r\nHost: x\r\n\r\n",
             wait_ms);
    ck_assert_int_eq(send_str(fd, req), 0);
    return fd;
}

START_TEST(over_the_limit_refused_at_once)
{
    const char *args[] = {"--max-connections", "4", "--max-per-ip", "3", NULL};
    start(args);
    int busy[4];
    /* Answered after 5 s, then idle: not before the probes below are done (were it idle
     * then, a probe would evict it and be served), however slow the machine. */
    busy[0] = long_poll("127.0.0.2", 5000);
    for (int i = 1; i < 3; i++)
        busy[i] = long_poll("127.0.0.2", 20000);
    /* Accepted, all three (they may still sit in the backlog: a probe accepted before one of
     * them would take its place): the gauge counts them and the metrics request itself. */
    for (int i = 0; i < 100 && metric("tfetch_http_connections") < 4; i++)
        sleep_ms(50);
    /* The per-address cap: a fourth from 127.0.0.2 is closed at once. */
    double ms;
    ck_assert_int_eq(probe("127.0.0.2", "/healthz", 3000, &ms), -1);
    ck_assert_msg(ms < 1000, "refused after %.0f ms", ms);
    busy[3] = long_poll("127.0.0.3", 20000);
    sleep_ms(300);                               /* all four are in and suspended */
    /* The limit, with every connection busy: a newcomer is closed at once, not left in the
     * listen backlog. */
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(probe("127.0.0.4", "/healthz", 3000, &ms), -1);
        ck_assert_msg(ms < 1000, "a client over the limit waited %.0f ms", ms);
    }
    /* The short long-poll is answered; its connection, kept alive and idle, gives way to a
     * newcomer. (A suspended one is not polled, so closing it frees nothing until it ends.) */
    char buf[1024];
    ck_assert(!peer_closed(busy[0], 8000, buf, sizeof buf));
    ck_assert_msg(strncmp(buf, "HTTP/1.1 404", 12) == 0, "%s", buf);
    ck_assert_int_eq(probe("127.0.0.4", "/healthz", 3000, &ms), 200);
    ck_assert(peer_closed(busy[0], 1000, NULL, 0));
    ck_assert_int_eq(metric("tfetch_http_connections_closed_total{reason=\"refused\"}"), 3);
    ck_assert_int_ge(metric("tfetch_http_connections_closed_total{reason=\"evicted\"}"), 1);
    for (int i = 0; i < 4; i++)
        close(busy[i]);
    stop_clean();
}
END_TEST

/* The slowloris attack: 8 connections from each of 127.0.0.2-5 (the per-address cap), each
 * sending one header byte every 500 ms and coming back 100 ms after being closed. */
#define ATTACKERS 32
typedef struct {
    atomic_int stop;
    int fd[ATTACKERS];
    uint64_t first_closed_ms[ATTACKERS];        /* when its first connection was closed */
    unsigned reconnects;
} attack_t;

static void *attack(void *arg)
{
    attack_t *a = arg;
    uint64_t closed_at[ATTACKERS] = {0};
    while (!atomic_load(&a->stop)) {
        for (int i = 0; i < ATTACKERS && !atomic_load(&a->stop); i++) {
            if (a->fd[i] < 0) {
                if (now_ms() - closed_at[i] < 100)
                    continue;
                char src[32];
                snprintf(src, sizeof src, "127.0.0.%d", 2 + i / 8);
                a->fd[i] = connect_from(src);
                send_str(a->fd[i], "GET /healthz HTTP/1.1\r\nHost: x\r\n");
                a->reconnects++;
            } else if (send_str(a->fd[i], "X") != 0 || peer_closed(a->fd[i], 0, NULL, 0)) {
                close(a->fd[i]);
                a->fd[i] = -1;
                closed_at[i] = now_ms();
                if (!a->first_closed_ms[i])
                    a->first_closed_ms[i] = closed_at[i];
            }
        }
        sleep_ms(500 / 4);                       /* each one sends about every 500 ms */
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

START_TEST(probe_served_during_slowloris)
{
    const char *args[] = {"--max-connections", "32", "--max-per-ip", "8",
                          "--header-timeout", "3", "--idle-timeout", "60", NULL};
    start(args);
    attack_t a = {0};
    uint64_t t0 = now_ms();
    for (int i = 0; i < ATTACKERS; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", 2 + i / 8);
        a.fd[i] = connect_from(src);
        ck_assert_int_eq(send_str(a.fd[i], "GET /healthz HTTP/1.1\r\nHost: x\r\n"), 0);
    }
    pthread_t th;
    pthread_create(&th, NULL, attack, &a);
    sleep_ms(500);                              /* the table is full of laggards */
    double lat[64];
    int n = 0, failed = 0;
    while (n < 64 && now_ms() - t0 < 6500) {
        double ms;
        if (probe("127.0.0.1", "/healthz", 2000, &ms) != 200)
            failed++;
        lat[n++] = ms;
        sleep_ms(80);
    }
    atomic_store(&a.stop, 1);
    pthread_join(th, NULL);
    qsort(lat, (size_t)n, sizeof lat[0], cmp_double);
    fprintf(stderr, "slowloris: %d probes, median %.1f ms, max %.1f ms, %u reconnects\n", n,
            lat[n / 2], lat[n - 1], a.reconnects);
    ck_assert_msg(failed == 0, "%d of %d probes failed during the attack", failed, n);
    ck_assert_msg(lat[n / 2] < 100.0, "median probe %.1f ms during the attack", lat[n / 2]);
    ck_assert_msg(lat[n - 1] < 1000.0, "slowest probe %.1f ms during the attack", lat[n - 1]);
    /* The head deadline closed every first-generation laggard (3 s, swept every 250 ms). */
    for (int i = 0; i < ATTACKERS; i++) {
        ck_assert_msg(a.first_closed_ms[i] != 0, "laggard %d was never closed", i);
        ck_assert_msg(a.first_closed_ms[i] - t0 < 5000, "laggard %d closed after %llu ms", i,
                      (unsigned long long)(a.first_closed_ms[i] - t0));
    }
    ck_assert_int_ge(metric("tfetch_http_connections_closed_total{reason=\"header_timeout\"}"),
                     1);
    for (int i = 0; i < ATTACKERS; i++)
        if (a.fd[i] >= 0)
            close(a.fd[i]);
    stop_clean();
}
END_TEST

START_TEST(too_slow_body_gets_408)
{
    const char *args[] = {"--min-upload-rate", "1K", NULL};
    start(args);
    int fd = connect_from(NULL);
    ck_assert_int_eq(send_str(fd, "PUT /v1/tensors/slow HTTP/1.1\r\nHost: x\r\n"
                                  "Content-Type: application/octet-stream\r\n"
                                  "Tfetch-Dtype: U8\r\nTfetch-Shape: 1000000\r\n"
                                  "Content-Length: 1000000\r\n\r\n"), 0);
    static char some[100];
    send_all(fd, some, sizeof some);
    uint64_t t0 = now_ms();
    char buf[4096];
    ck_assert(peer_closed(fd, 15000, buf, sizeof buf));
    double secs = (double)(now_ms() - t0) / 1e3;
    ck_assert_msg(strncmp(buf, "HTTP/1.1 408 ", 13) == 0, "after %.1f s: %s", secs, buf);
    ck_assert_msg(strstr(buf, "TF_EREQTIME") != NULL, "%s", buf);
    ck_assert_msg(secs > 9.0 && secs < 12.0, "cut off after %.1f s (window 10 s)", secs);
    close(fd);
    ck_assert_int_eq(metric("tfetch_http_connections_closed_total{reason=\"slow_body\"}"), 1);
    /* The store reservation went with it. */
    sleep_ms(300);
    ck_assert_int_eq(metric("tfetch_store_reserved_bytes"), 0);
    stop_clean();
}
END_TEST

/* ---- slow bodies and slow readers at the limit ------------------------------------------ */

/* SLOW_N connections (more than the daemon's 32) that each hold a slot as slowly as they can:
 * a body sent a byte every 250 ms, or a 16 MiB answer read a byte every 250 ms through a
 * 4 KiB receive buffer. One closed or refused comes back 50 ms later (a body sees its 408). */
#define SLOW_N 40
typedef struct {
    atomic_int stop;
    int reader;                 /* 0: slow bodies; 1: slow readers */
    int fd[SLOW_N];
    unsigned reconnects;
} slow_t;

static int slow_open(int reader, int i)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    int small = 4096;
    if (reader)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)D.port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[512];
    if (reader)
        snprintf(req, sizeof req, "GET /v1/tensors/big HTTP/1.1\r\nHost: x\r\n\r\n");
    else
        snprintf(req, sizeof req, "PUT /v1/tensors/slow%d HTTP/1.1\r\nHost: x\r\n"
                 "Content-Type: application/octet-stream\r\nTfetch-Dtype: U8\r\n"
                 "Tfetch-Shape: 1000000\r\nContent-Length: 1000000\r\n\r\nX", i);
    send_str(fd, req);
    return fd;
}

/* One step of connection i: a byte sent or read; 1 when the daemon has closed it. */
static int slow_step(int reader, int fd)
{
    char c;
    if (!reader)
        return send_str(fd, "X") != 0 || peer_closed(fd, 0, NULL, 0);
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

static void *slow_attack(void *arg)
{
    slow_t *a = arg;
    uint64_t closed_at[SLOW_N] = {0};
    int oldest = 0;
    while (!atomic_load(&a->stop)) {
        /* A reader the daemon has closed cannot tell (its answer's rest still arrives from
         * the orphaned socket): readers come back in turn, one every 250 ms, so that fresh
         * ones keep knocking. */
        if (a->reader && a->fd[oldest] >= 0) {
            close(a->fd[oldest]);
            a->fd[oldest] = -1;
            closed_at[oldest] = 0;
            oldest = (oldest + 1) % SLOW_N;
        }
        for (int i = 0; i < SLOW_N; i++) {
            if (a->fd[i] < 0 && now_ms() - closed_at[i] >= 50) {
                a->fd[i] = slow_open(a->reader, i);
                a->reconnects++;
            } else if (a->fd[i] >= 0 && slow_step(a->reader, a->fd[i])) {
                close(a->fd[i]);
                a->fd[i] = -1;
                closed_at[i] = now_ms();
            }
        }
        sleep_ms(250);
    }
    return NULL;
}

/* With every slot held by slow transfers (rate windows of 60 s: none is cut by its window
 * during the test), health probes are still answered, each at once: at the limit, the
 * slowest transfer below its floor makes room. */
static void probes_beat_slow_transfers(int reader)
{
    const char *args[] = {"--max-connections", "32", "--rate-window", "60",
                          "--min-download-rate", "256K", "--idle-timeout", "60", NULL};
    start(args);
    if (reader) {
        static char doc[16 << 20];
        int fd = connect_from(NULL);
        char head[256];
        snprintf(head, sizeof head, "PUT /v1/tensors/big HTTP/1.1\r\nHost: x\r\n"
                 "Content-Type: application/octet-stream\r\nTfetch-Dtype: U8\r\n"
                 "Tfetch-Shape: %zu\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                 sizeof doc, sizeof doc);
        send_all(fd, head, strlen(head));
        send_all(fd, doc, sizeof doc);
        char buf[1024];
        ck_assert(peer_closed(fd, 10000, buf, sizeof buf));
        ck_assert_msg(strncmp(buf, "HTTP/1.1 201", 12) == 0, "%s", buf);
        close(fd);
    }
    slow_t a = {.reader = reader};
    for (int i = 0; i < SLOW_N; i++)
        a.fd[i] = -1;
    pthread_t th;
    pthread_create(&th, NULL, slow_attack, &a);
    /* The table fills, and its transfers run past the grace period (1 s). (Asking /metrics
     * now would be refused: nothing could make room yet.) */
    sleep_ms(2500);
    double lat[40];
    int n = 0, failed = 0;
    while (n < 40) {
        double ms;
        if (probe("127.0.0.1", "/healthz", 2000, &ms) != 200)
            failed++;
        lat[n++] = ms;
        sleep_ms(100);
    }
    atomic_store(&a.stop, 1);
    pthread_join(th, NULL);
    for (int i = 0; i < SLOW_N; i++)
        if (a.fd[i] >= 0)
            close(a.fd[i]);
    sleep_ms(300);                              /* the daemon sees them go */
    long long evicted = metric("tfetch_http_connections_closed_total{reason=\"evicted_slow\"}");
    qsort(lat, (size_t)n, sizeof lat[0], cmp_double);
    fprintf(stderr, "slow %s: %d probes, %d failed, median %.1f ms, max %.1f ms, %u "
            "connections, %lld evicted\n", reader ? "readers" : "bodies", n, failed,
            lat[n / 2], lat[n - 1], a.reconnects, evicted);
    /* By design a newcomer may still be refused at the instant every slot holds an attacker
     * younger than the eviction grace (1 s; the attackers reconnect as they are evicted).
     * Without eviction 33-40 of 40 fail; two are allowed. Under valgrind (TF_VALGRIND, set
     * by scripts/tf-dev), which runs this server in the probing process at a fraction of its
     * speed, 3-13 of 40 were seen: there only the evictions below are held (the timing is
     * make check's to assert, the memory valgrind's). */
    int allowed = getenv("TF_VALGRIND") ? 20 : 2;
    ck_assert_msg(failed <= allowed, "%d of %d probes failed while slow %s held the slots",
                  failed, n, reader ? "readers" : "bodies");
    ck_assert_msg(lat[n - 1] < 1000.0, "slowest probe %.1f ms", lat[n - 1]);
    ck_assert_int_ge(evicted, reader ? 1 : n);     /* readers also free slots by leaving */
    stop_clean();
}

START_TEST(probe_served_while_slow_bodies_hold_every_slot)
{
    probes_beat_slow_transfers(0);
}
END_TEST

START_TEST(probe_served_while_slow_readers_hold_every_slot)
{
    probes_beat_slow_transfers(1);
}
END_TEST

/* Slow but moving transfers above the floors complete however long they take; a reader
 * that stalls is cut at the end of its window. */
START_TEST(slow_but_moving_transfers_complete)
{
    const char *args[] = {"--min-upload-rate", "8K", "--min-download-rate", "256K",
                          "--rate-window", "1", NULL};
    start(args);
    /* 96 KiB up at about 24 KiB/s: four seconds, four windows. */
    int fd = connect_from(NULL);
    const size_t up = 96 << 10;
    char head[256];
    snprintf(head, sizeof head, "PUT /v1/tensors/up HTTP/1.1\r\nHost: x\r\n"
             "Content-Type: application/octet-stream\r\nTfetch-Dtype: U8\r\nTfetch-Shape: %zu\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n", up, up);
    send_all(fd, head, strlen(head));
    static char block[4096];
    uint64_t t0 = now_ms();
    for (size_t sent = 0; sent < up; sent += sizeof block) {
        send_all(fd, block, sizeof block);
        sleep_ms(160);
    }
    char buf[4096];
    ck_assert(peer_closed(fd, 5000, buf, sizeof buf));
    ck_assert_msg(strncmp(buf, "HTTP/1.1 201", 12) == 0, "after %.1f s: %s",
                  (double)(now_ms() - t0) / 1e3, buf);
    ck_assert_uint_ge(now_ms() - t0, 3500);
    close(fd);
    /* 8 MiB down at about 2 MiB/s through a small receive buffer: about four seconds, the
     * first two or three with the answer still being written (the rest sits in the socket
     * buffers). */
    static char doc[8 << 20];
    fd = connect_from(NULL);
    snprintf(head, sizeof head, "PUT /v1/tensors/big HTTP/1.1\r\nHost: x\r\n"
             "Content-Type: application/octet-stream\r\nTfetch-Dtype: U8\r\nTfetch-Shape: %zu\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n", sizeof doc, sizeof doc);
    send_all(fd, head, strlen(head));
    send_all(fd, doc, sizeof doc);
    ck_assert(peer_closed(fd, 10000, buf, sizeof buf));
    ck_assert_msg(strncmp(buf, "HTTP/1.1 201", 12) == 0, "%s", buf);
    close(fd);
    fd = slow_open(1, 0);
    int stalled = slow_open(1, 1);                  /* asks, then never reads */
    size_t got = 0;
    t0 = now_ms();
    while (got <= sizeof doc && now_ms() - t0 < 30000) {
        if (got > (now_ms() - t0) * 2048) {         /* 2 MiB/s at most */
            sleep_ms(1);
            continue;
        }
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, 100);
        ssize_t k = recv(fd, block, sizeof block, MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN))
            break;
        if (k > 0)
            got += (size_t)k;
    }
    double secs = (double)(now_ms() - t0) / 1e3;
    ck_assert_msg(got > sizeof doc, "a moving reader got %zu bytes in %.1f s", got, secs);
    ck_assert_msg(secs > 3.0, "read in %.1f s: not slow", secs);
    close(fd);
    ck_assert_int_eq(metric("tfetch_http_connections_closed_total{reason=\"slow_reader\"}"), 1);
    close(stalled);
    stop_clean();
}
END_TEST

/* ---- SIGTERM's drain ---------------------------------------------------------------------- */

/* A newcomer during the drain: refused by the kernel, or closed, or answered 503, within a
 * second; never left waiting. Returns how long it took (ms). */
static double newcomer_turned_away(void)
{
    uint64_t t0 = now_ms();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)D.port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        ck_assert_msg(errno == ECONNREFUSED || errno == ECONNRESET, "connect: %s",
                      strerror(errno));
    } else {
        char buf[4096] = "";
        send_str(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
        ck_assert_msg(peer_closed(fd, 3000, buf, sizeof buf),
                      "a newcomer waited %llu ms during the drain: %s",
                      (unsigned long long)(now_ms() - t0), buf);
        ck_assert_msg(!buf[0] || strncmp(buf, "HTTP/1.1 503", 12) == 0, "%s", buf);
    }
    close(fd);
    return (double)(now_ms() - t0);
}

START_TEST(drain_turns_newcomers_away_at_once_and_finishes_transfers)
{
    const char *args[] = {"--drain-timeout", "30", NULL};
    start(args);
    static char doc[8 << 20];
    int fd = connect_from(NULL);
    char head[256];
    snprintf(head, sizeof head, "PUT /v1/tensors/big HTTP/1.1\r\nHost: x\r\n"
             "Content-Type: application/octet-stream\r\nTfetch-Dtype: U8\r\nTfetch-Shape: %zu\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n", sizeof doc, sizeof doc);
    send_all(fd, head, strlen(head));
    send_all(fd, doc, sizeof doc);
    char buf[4096];
    ck_assert(peer_closed(fd, 10000, buf, sizeof buf));
    ck_assert_msg(strncmp(buf, "HTTP/1.1 201", 12) == 0, "%s", buf);
    close(fd);
    /* A transfer in flight (read slowly, through a small buffer), and a connection open but
     * with no request yet. */
    int inflight = slow_open(1, 0);
    static char block[65536];
    size_t got = 0;
    while (got < 65536) {
        ssize_t k = recv(inflight, block, sizeof block, 0);
        ck_assert_int_gt(k, 0);
        got += (size_t)k;
    }
    int early = connect_from(NULL);
    sleep_ms(100);
    ck_assert_int_eq(kill(D.pid, SIGTERM), 0);
    /* The main loop sees the signal at its next tick (250 ms; longer on a loaded machine):
     * until then /healthz is still served. */
    for (uint64_t t0 = now_ms(); now_ms() - t0 < 10000;) {
        int nf = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)D.port)};
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
        int served = 0;
        buf[0] = '\0';
        if (connect(nf, (struct sockaddr *)&sa, sizeof sa) == 0 &&
            send_str(nf, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") == 0 &&
            peer_closed(nf, 3000, buf, sizeof buf))
            served = strncmp(buf, "HTTP/1.1 200", 12) == 0;
        close(nf);
        if (!served)
            break;                                  /* the drain has begun */
        sleep_ms(50);
    }
    double worst = 0;
    for (int i = 0; i < 5; i++) {
        double ms = newcomer_turned_away();
        worst = ms > worst ? ms : worst;
        sleep_ms(100);
    }
    ck_assert_msg(worst < 1000, "a newcomer took %.0f ms to be turned away", worst);
    /* The connection opened before: its first request is answered 503 and closed. */
    ck_assert_int_eq(send_str(early, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
    buf[0] = '\0';
    ck_assert(peer_closed(early, 2000, buf, sizeof buf));
    ck_assert_msg(strncmp(buf, "HTTP/1.1 503", 12) == 0, "%s", buf);
    ck_assert_msg(strstr(buf, "Connection: close") != NULL, "%s", buf);
    close(early);
    /* The transfer in flight completes. */
    for (;;) {
        ssize_t k = recv(inflight, block, sizeof block, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    ck_assert_uint_gt(got, sizeof doc);
    close(inflight);
    stop_clean();
}
END_TEST

/* ---- memory -------------------------------------------------------------------------------- */

static long vmhwm_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = atol(line + 6);
    fclose(f);
    return kb;
}

START_TEST(chunked_upload_in_tiny_chunks_peaks_near_its_size)
{
    start(NULL);
    const size_t total = 64u << 20;
    long base = vmhwm_kb(D.pid);
    int fd = connect_from(NULL);
    char hdr[256];
    int hl = snprintf(hdr, sizeof hdr, "{\"x\":{\"dtype\":\"U8\",\"shape\":[%zu],"
                      "\"data_offsets\":[0,%zu]}}", total, total);
    char head[512];
    int n = snprintf(head, sizeof head, "PUT /v1/tensors/big HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: application/x-safetensors\r\nTransfer-Encoding: chunked\r\n"
                     "\r\n%x\r\n", 8 + hl);
    send_all(fd, head, (size_t)n);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    send_all(fd, len8, 8);
    send_all(fd, hdr, (size_t)hl);
    send_all(fd, "\r\n", 2);
    /* 64-byte chunks, many to a write. */
    static char block[4096 * 70];
    for (size_t i = 0; i < 4096; i++) {
        memcpy(block + i * 70, "40\r\n", 4);
        memset(block + i * 70 + 4, 'a' + (int)(i % 26), 64);
        memcpy(block + i * 70 + 68, "\r\n", 2);
    }
    for (size_t k = 0; k < total / (64 * 4096); k++)
        send_all(fd, block, sizeof block);
    send_all(fd, "0\r\n\r\n", 5);
    char buf[4096];
    ck_assert(!peer_closed(fd, 60000, buf, sizeof buf) || buf[0]);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 201", 12) == 0, "%s", buf);
    close(fd);
    long peak = vmhwm_kb(D.pid);
    double ratio = (double)(peak - base) * 1024.0 / (double)total;
    fprintf(stderr, "chunked 64 MiB in 64-byte chunks: VmHWM %ld -> %ld KiB (%.2fx)\n", base,
            peak, ratio);
#ifdef __SANITIZE_THREAD__
    if (0)                              /* TSan's shadow memory multiplies every RSS figure */
#endif
    ck_assert_msg(peak - base < (long)(total / 1024) * 3 / 2 + 8192,
                  "peak RSS grew by %ld KiB for a %zu KiB upload (%.2fx)", peak - base,
                  total / 1024, ratio);
    stop_clean();
}
END_TEST

/* ---- worker secrets ------------------------------------------------------------------------- */

/* curl -s with extra args against a path; returns the HTTP status; the body lands in out. */
static int curl(const char *args, const char *path)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "curl -sS -o /tmp/tf-conns-body-%d -w '%%{http_code}' %s '%s%s'",
             (int)getpid(), args, D.base, path);
    char code[16];
    int rc = td_run(cmd, code, sizeof code);
    ck_assert_msg(rc == 0, "curl failed (%d): %s", rc, cmd);
    snprintf(cmd, sizeof cmd, "cat /tmp/tf-conns-body-%d", (int)getpid());
    out[0] = '\0';
    td_run(cmd, out, sizeof out);
    return atoi(code);
}

/* The string value of "key" in the JSON object in out, into v. */
static void json_str(const char *key, char *v, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(out, pat);
    ck_assert_msg(p != NULL, "no %s in %s", key, out);
    p += strlen(pat);
    size_t n = strcspn(p, "\"");
    ck_assert_uint_lt(n, cap);
    memcpy(v, p, n);
    v[n] = '\0';
}

static void reg(const char *route, char id[64], char secret[64])
{
    char args[256];
    snprintf(args, sizeof args, "-X POST -H 'Content-Type: application/json' "
             "-d '{\"routes\":[\"%s\"]}'", route);
    ck_assert_int_eq(curl(args, "/v1/workers"), 201);
    json_str("worker", id, 64);
    json_str("secret", secret, 64);
}

START_TEST(worker_ids_are_random_and_secrets_checked)
{
    start(NULL);
    char id1[64], s1[64], id2[64], s2[64];
    reg("r1", id1, s1);
    reg("r2", id2, s2);
    /* 128 random bits each: "w" + 32 hex digits, unrelated to each other. */
    ck_assert_uint_eq(strlen(id1), 33);
    ck_assert(tfp_worker_secret_valid(id1 + 1) && tfp_worker_secret_valid(id2 + 1));
    ck_assert(tfp_worker_secret_valid(s1) && tfp_worker_secret_valid(s2));
    int same = 0;
    for (int i = 1; i < 33; i++)
        same += id1[i] == id2[i];
    ck_assert_msg(same < 20, "ids %s and %s share %d digits", id1, id2, same);
    ck_assert_str_ne(s1, s2);

    /* A caller waits on r1 (in the background). */
    char cmd[1024], path[256];
    snprintf(cmd, sizeof cmd, "curl -sS -o /tmp/tf-conns-call-%d -w '%%{http_code}' -X POST "
             "-H 'Content-Type: application/octet-stream' -H 'Tfetch-Dtype: U8' "
             "-H 'Tfetch-Shape: 3' --data-binary abc '%s/v1/call/r1' > /tmp/tf-conns-callst-%d "
             "& echo $!", (int)getpid(), D.base, (int)getpid());
    char pidtxt[32];
    ck_assert_int_eq(td_run(cmd, pidtxt, sizeof pidtxt), 0);
    sleep_ms(300);

    /* The thief knows the id, not the secret: no poll, whether with none, another worker's
     * or a made-up one; the call stays queued. */
    char hdr[128];
    snprintf(path, sizeof path, "/v1/workers/%s/next?wait=10", id1);
    ck_assert_int_eq(curl("", path), 403);
    ck_assert_msg(strstr(out, "TF_EFORBIDDEN") != NULL, "%s", out);
    snprintf(hdr, sizeof hdr, "-H 'Tfetch-Worker-Secret: %s'", s2);
    ck_assert_int_eq(curl(hdr, path), 403);
    ck_assert_int_eq(curl("-H 'Tfetch-Worker-Secret: 00000000000000000000000000000000'", path),
                     403);
    ck_assert_int_eq(curl("-H 'Tfetch-Worker-Secret: nope'", path), 400);
    /* The worker itself gets the call. */
    snprintf(hdr, sizeof hdr, "-D /tmp/tf-conns-hdr-%d -H 'Tfetch-Worker-Secret: %s'",
             (int)getpid(), s1);
    ck_assert_int_eq(curl(hdr, path), 200);
    char hdrs[4096];
    snprintf(cmd, sizeof cmd, "cat /tmp/tf-conns-hdr-%d", (int)getpid());
    td_run(cmd, hdrs, sizeof hdrs);
    const char *cid = strstr(hdrs, "Tfetch-Call: ");
    ck_assert_msg(cid != NULL, "%s", hdrs);
    char call[32];
    snprintf(call, sizeof call, "%.*s", (int)strcspn(cid + 13, "\r\n"), cid + 13);

    /* The thief cannot answer it... */
    snprintf(path, sizeof path, "/v1/workers/%s/calls/%s", id1, call);
    const char *forged = "-X POST -H 'Content-Type: application/json' "
                         "-d '{\"error\":\"forged\",\"code\":\"TF_EUNPROC\"}'";
    ck_assert_int_eq(curl(forged, path), 403);
    snprintf(cmd, sizeof cmd, "%s -H 'Tfetch-Worker-Secret: %s'", forged, s2);
    ck_assert_int_eq(curl(cmd, path), 403);
    /* ...the worker can, and the caller gets the worker's answer. */
    snprintf(cmd, sizeof cmd, "-X POST -H 'Content-Type: application/json' -H "
             "'Tfetch-Worker-Secret: %s' -d '{\"error\":\"genuine\",\"code\":\"TF_EUNPROC\"}'", s1);
    ck_assert_int_eq(curl(cmd, path), 204);
    snprintf(cmd, sizeof cmd, "while kill -0 %d 2>/dev/null; do sleep 0.05; done; "
             "cat /tmp/tf-conns-callst-%d; cat /tmp/tf-conns-call-%d", atoi(pidtxt),
             (int)getpid(), (int)getpid());
    td_run(cmd, out, sizeof out);
    ck_assert_msg(strncmp(out, "422", 3) == 0 && strstr(out, "genuine") != NULL, "%s", out);

    /* Nor delete it; an unknown id stays 404 whatever the secret. */
    snprintf(path, sizeof path, "/v1/workers/%s", id1);
    ck_assert_int_eq(curl("-X DELETE", path), 403);
    snprintf(hdr, sizeof hdr, "-X DELETE -H 'Tfetch-Worker-Secret: %s'", s2);
    ck_assert_int_eq(curl(hdr, path), 403);
    ck_assert_int_eq(curl(hdr, "/v1/workers/w00000000000000000000000000000000"), 404);
    snprintf(hdr, sizeof hdr, "-X DELETE -H 'Tfetch-Worker-Secret: %s'", s1);
    ck_assert_int_eq(curl(hdr, path), 204);
    snprintf(hdr, sizeof hdr, "-X DELETE -H 'Tfetch-Worker-Secret: %s'", s2);
    snprintf(path, sizeof path, "/v1/workers/%s", id2);
    ck_assert_int_eq(curl(hdr, path), 204);
    snprintf(cmd, sizeof cmd, "rm -f /tmp/tf-conns-*-%d", (int)getpid());
    td_run(cmd, NULL, 0);
    stop_clean();
}
END_TEST

START_TEST(worker_secret_compare)
{
    const char *a = "0123456789abcdef0123456789abcdef";
    ck_assert(tfp_worker_secret_valid(a));
    ck_assert(!tfp_worker_secret_valid("0123456789abcdef0123456789abcde"));
    ck_assert(!tfp_worker_secret_valid("0123456789abcdef0123456789abcdef0"));
    ck_assert(!tfp_worker_secret_valid("0123456789ABCDEF0123456789abcdef"));
    ck_assert(!tfp_worker_secret_valid(""));
    ck_assert(!tfp_worker_secret_valid(NULL));
    ck_assert(tfp_worker_secret_equal(a, "0123456789abcdef0123456789abcdef"));
    ck_assert(!tfp_worker_secret_equal(a, "0123456789abcdef0123456789abcdee"));
    ck_assert(!tfp_worker_secret_equal(a, "1123456789abcdef0123456789abcdef"));
    ck_assert(!tfp_worker_secret_equal(a, ""));
    ck_assert(!tfp_worker_secret_equal("", ""));
}
END_TEST

Suite *suite_conns(void)
{
    Suite *s = suite_create("conns");
    TCase *tc = tcase_create("guard");
    tcase_add_test(tc, guard_evicts_the_longest_waiting_or_refuses);
    tcase_add_test(tc, guard_head_deadline_from_open_and_from_each_answer);
    tcase_add_test(tc, guard_body_rate_windows_answer_408);
    tcase_add_test(tc, guard_spares_a_body_the_server_has_not_read);
    tcase_add_test(tc, guard_evicts_the_slowest_transfer_below_its_floor);
    tcase_add_test(tc, guard_cuts_and_evicts_slow_readers);
    tcase_add_test(tc, worker_secret_compare);
    suite_add_tcase(s, tc);
    tc = tcase_create("daemon");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, trickled_head_is_closed_at_the_deadline);
    tcase_add_test(tc, over_the_limit_refused_at_once);
    tcase_add_test(tc, probe_served_during_slowloris);
    tcase_add_test(tc, too_slow_body_gets_408);
    tcase_add_test(tc, chunked_upload_in_tiny_chunks_peaks_near_its_size);
    tcase_add_test(tc, worker_ids_are_random_and_secrets_checked);
    suite_add_tcase(s, tc);
    tc = tcase_create("slow");                  /* slow bodies and readers at the limit */
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, probe_served_while_slow_bodies_hold_every_slot);
    tcase_add_test(tc, probe_served_while_slow_readers_hold_every_slot);
    tcase_add_test(tc, slow_but_moving_transfers_complete);
    tcase_add_test(tc, drain_turns_newcomers_away_at_once_and_finishes_transfers);
    suite_add_tcase(s, tc);
    return s;
}
