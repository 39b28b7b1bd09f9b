/* feed_bench.c - tfetch-feed-bench: device feeds against what people use as a queue today
 * (bench/README.md, "Feeds"), side by side in one run, one producer thread and one consumer
 * thread per measurement, each with its own connection:
 *
 *   feed   a tfetchd feed through libtfetch (tf_infeed_push with Tfetch-Seq and Prefer: wait;
 *          tf_feed_attach + tf_infeed_pop, prefetch 4, release after the step), policy auto:
 *          the item built in a staging buffer the daemon lends (tf_doc_new_staging; a packed
 *          one where it cannot: another host), pushes over the client's UCX connection that
 *          name it (the daemon copies it into a ring slot), pops from the same-host ring
 *          (shm/ring; over UCX with --base, another host)
 *   feedk  the same with the item built in the producer's own memory (tf_doc_new_packed):
 *          the daemon receives it by UCX rendezvous, the kernel's copy (cma), at 4 MiB
 *   feedp  the same feed with a producer that keeps 4 (--pipeline) pushes in flight
 *          (tf_infeed_push_start, consecutive seqs; the server queues them in seq order)
 *   feedb  the same feed with the producer's item borrowed (tf_doc_add TF_BORROW: its header
 *          and tensor apart, sent in pieces through the daemon's FIFO) instead of built in
 *          one buffer, at 4 MiB
 *   feedu  the same feed with the consumer on policy ucx: every pop a UCX request (the path
 *          before the ring, and the one across hosts), at 4 MiB
 *   split  a feed of two devices, fanout split: each round (the size) cut in two halves, one
 *          per device; one consumer thread attached to both devices' rings pops the two
 *          halves in turn, at 4 MiB (the producer as feed's)
 *   bcast  the same with fanout broadcast: each device gets the whole round
 *   store  tfetchd's store used as a queue: PUT q<i>, GET q<i> with a long poll, DELETE
 *   redis  a Redis list: RPUSH / BLPOP, speaking RESP by hand over a unix socket to a
 *          redis-server the bench starts and stops (no client library: two commands, and the
 *          reply read straight into the consumer's buffer, as hiredis would copy it)
 *   tcp    a plain loopback TCP connection: a length, then the bytes, read into a buffer
 *   ring   the ceiling: a memfd ring of 8 slots shared by the two threads (the producer
 *          copies an item into a slot; the consumer reads it in place and frees the slot
 *          after its step), plus memcpy alone: 4 MiB into a memfd of AHEAD slots in turn
 *          (the queue's memory: the targets' memcpy) and between the same two buffers (in
 *          cache)
 *
 * Every queue is bounded (8 items ahead of the consumer: the feed's max_items, the ring's
 * slots, an in-flight counter for store and redis, the socket buffers for tcp). Two kinds of
 * run: throughput (no compute: items/s, GB/s) for each size, and starvation (the consumer
 * computes STEP ms per item, spinning; the fraction of its wall time spent waiting for the
 * next item, i.e. between the end of one step and the next item, in the steady state from
 * item AHEAD on, with each item's wait as median, p99 and most, and the start's waits
 * apart). Each figure is the median
 * of three runs (one with --quick), printed with their range. Both are timed from the consumer's first item to its last, so that a
 * method's setup (connections, the feed's attach, a ring's memory faulted in) is not averaged
 * into its rate; the setup, from the method's open to the first item, is its own column. Prints a
 * table and the targets as PASS/MISS (never fails on a miss). Threads: main
 * (consumer) and one producer per run.
 *
 *   tfetch-feed-bench [--sizes LIST] [--bytes N] [--pipeline N] [--methods LIST] [--quick]
 *                     [--base URL]
 *
 * --pipeline N: feedp's pushes in flight (default 4). --methods feedu,ring: only those rows
 * (a profile of one path; the targets whose rows did not run are not printed).
 *
 * --base URL uses a tfetchd already running there (another host, another network
 * namespace) instead of starting one: then only the feeds, split, bcast and store run,
 * both ends here.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/common.h"
#include "client/tfetch.h"
#include "tests/fixtures.h"

const char *const bench_prog = "tfetch-feed-bench";

#define AHEAD 8                         /* items a producer may be ahead of the consumer */

static td_daemon_t D;
static char redis_sock[108];
static pid_t redis_pid;

/* ---- one measurement ------------------------------------------------------------------------ */

typedef struct method method_t;
typedef struct {
    const method_t *m;
    size_t size;
    long n;
    double step_s;                      /* consumer compute per item */
    unsigned char *src;                 /* the producer's item */
    void *st;                           /* the method's shared state */
    atomic_long consumed;               /* for the methods bounded by a counter */
    double first_s;                     /* when the consumer had its first item */
    double last_s;                      /* and its last: what came after (detach, closing
                                         * connections) is not the method's rate */
    double step_end;                    /* when its last step ended */
    long settle;                        /* the start: items 1..settle (AHEAD; 0 for short runs) */
    double steady_s;                    /* when it had item settle: the steady state from here */
    double start_wait;                  /* its waits before that */
    double *waits;                      /* each later item's wait, for their spread */
    long nwaits;
    int perr;                           /* the producer failed */
    char transport[32];
} run_t;

struct method {
    const char *name;
    int (*open)(run_t *r);              /* 0, or -1 (the method is skipped) */
    int (*produce)(run_t *r);           /* pushes r->n items; 0 or -1 */
    int (*consume)(run_t *r, double *wait_s);  /* the whole consumer loop; 0 or -1 */
    void (*close)(run_t *r);
};

static void spin(double s)
{
    double t = tfx_now_s() + s;
    while (tfx_now_s() < t)
        ;
}

/* The consumer's step: computes (spins) for the step's time. */
static void step(run_t *r)
{
    spin(r->step_s);
    r->step_end = tfx_now_s();
}

/* The consumer has item i: the first one ends the setup (connections, attach, a ring's
 * memory); for every later one, all the time since the last step ended counts as waiting
 * (what the consumer did between steps, releasing the last item and driving its client
 * included: a copy the library runs there is time the step did not compute). Waits up to
 * item AHEAD are the start's: the producer thread begins on the consumer's core and the
 * scheduler moves it away only after a few steps (on this 2-core VM the raw ring's first
 * seven items waited ~4 ms each, its later ones none), so they are kept apart from the
 * steady state, which starts at item AHEAD (*wait_s). */
static void got_item(run_t *r, long i, double *wait_s)
{
    double now = tfx_now_s();
    if (i == 0)
        r->first_s = now;
    else if (i <= r->settle)
        r->start_wait += now - r->step_end;
    else {
        *wait_s += now - r->step_end;
        if (r->waits && r->nwaits < r->n)
            r->waits[r->nwaits++] = now - r->step_end;
    }
    if (i == r->settle)
        r->steady_s = now;
    r->last_s = now;
}

static void wait_ahead(run_t *r, long i)
{
    while (i - atomic_load(&r->consumed) >= AHEAD)
        usleep(50);
}

/* ---- ring ------------------------------------------------------------------------------------ */

typedef struct {
    unsigned char *slots;
    _Atomic uint64_t *head, *tail;      /* in the memfd's first page */
    void *map;
    size_t maplen;
} ring_t;

/* len bytes of shared memory (a memfd, as tfetchd's rings are), faulted in before any run,
 * as the daemon's own ring is (daemon/ring.c): a figure that paid first touch would measure
 * this host's page faults (14 us per 4 KiB shmem page here), not the copy. NULL if it
 * cannot be made. */
static unsigned char *memfd_map(const char *name, size_t len)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return NULL;
    void *p = ftruncate(fd, (off_t)len) == 0
                  ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_POPULATE_WRITE
    if (madvise(p, len, MADV_POPULATE_WRITE) != 0)
#endif
        memset(p, 0, len);
    return p;
}

static int ring_open(run_t *r)
{
    ring_t *g = calloc(1, sizeof(*g));
    if (!g)
        return -1;
    g->maplen = 4096 + AHEAD * r->size;
    if (!(g->map = memfd_map("tfetch-bench-ring", g->maplen))) {
        free(g);
        return -1;
    }
    g->head = g->map;
    g->tail = (_Atomic uint64_t *)((char *)g->map + 64);
    g->slots = (unsigned char *)g->map + 4096;
    r->st = g;
    return 0;
}

static int ring_produce(run_t *r)
{
    ring_t *g = r->st;
    for (long i = 0; i < r->n; i++) {
        while (atomic_load(g->head) - atomic_load(g->tail) >= AHEAD)
            sched_yield();
        memcpy(g->slots + (i % AHEAD) * r->size, r->src, r->size);
        atomic_store(g->head, (uint64_t)i + 1);
    }
    return 0;
}

static int ring_consume(run_t *r, double *wait_s)
{
    ring_t *g = r->st;
    volatile unsigned char sink = 0;
    for (long i = 0; i < r->n; i++) {
        while (atomic_load(g->head) <= (uint64_t)i)
            sched_yield();
        got_item(r, i, wait_s);
        sink ^= g->slots[(i % AHEAD) * r->size + r->size - 1];
        step(r);
        atomic_store(g->tail, (uint64_t)i + 1);
    }
    (void)sink;
    return 0;
}

static void ring_close(run_t *r)
{
    ring_t *g = r->st;
    munmap(g->map, g->maplen);
    free(g);
}

/* ---- tcp -------------------------------------------------------------------------------------- */

typedef struct {
    int pfd, cfd;
    unsigned char *buf;
} tcp_t;

static int full_write(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int full_read(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int tcp_open(run_t *r)
{
    tcp_t *t = calloc(1, sizeof(*t));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (!t || l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) != 0)
        return -1;
    t->pfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(t->pfd, (struct sockaddr *)&a, sizeof(a)) != 0 || (t->cfd = accept(l, NULL, NULL)) < 0)
        return -1;
    close(l);
    int one = 1;
    setsockopt(t->pfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    t->buf = malloc(r->size);
    r->st = t;
    return t->buf ? 0 : -1;
}

static int tcp_produce(run_t *r)
{
    tcp_t *t = r->st;
    for (long i = 0; i < r->n; i++) {
        uint64_t len = r->size;
        if (full_write(t->pfd, &len, sizeof(len)) != 0 || full_write(t->pfd, r->src, r->size) != 0)
            return -1;
    }
    return 0;
}

static int tcp_consume(run_t *r, double *wait_s)
{
    tcp_t *t = r->st;
    for (long i = 0; i < r->n; i++) {
        uint64_t len;
        if (full_read(t->cfd, &len, sizeof(len)) != 0 || len != r->size ||
            full_read(t->cfd, t->buf, len) != 0)
            return -1;
        got_item(r, i, wait_s);
        step(r);
    }
    return 0;
}

static void tcp_close(run_t *r)
{
    tcp_t *t = r->st;
    close(t->pfd);
    close(t->cfd);
    free(t->buf);
    free(t);
}

/* ---- redis (RESP by hand) ---------------------------------------------------------------------- */

static int redis_connect(void)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", redis_sock);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Reads one CRLF-terminated line (without it) into buf. */
static int read_line(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) {
        if (full_read(fd, buf + n, 1) != 0)
            return -1;
        if (n > 0 && buf[n - 1] == '\r' && buf[n] == '\n') {
            buf[n - 1] = '\0';
            return 0;
        }
        n++;
    }
    return -1;
}

static int redis_start(void)
{
    snprintf(redis_sock, sizeof(redis_sock), "/tmp/tfetch-bench-redis-%d.sock", (int)getpid());
    unlink(redis_sock);
    redis_pid = fork();
    if (redis_pid < 0)
        return -1;
    if (redis_pid == 0) {
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) {
            dup2(nul, 1);
            dup2(nul, 2);
        }
        execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", redis_sock,
               "--save", "", "--appendonly", "no", "--daemonize", "no",
               "--client-query-buffer-limit", "1gb", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 100; i++) {
        int fd = redis_connect();
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        int st;
        if (waitpid(redis_pid, &st, WNOHANG) == redis_pid) {
            redis_pid = 0;
            return -1;
        }
        usleep(50000);
    }
    return -1;
}

static void redis_stop(void)
{
    if (redis_pid > 0) {
        kill(redis_pid, SIGTERM);
        waitpid(redis_pid, NULL, 0);
        redis_pid = 0;
    }
    unlink(redis_sock);
}

typedef struct {
    int pfd, cfd;
    unsigned char *buf;
} redis_t;

static int redis_open(run_t *r)
{
    if (redis_pid <= 0)
        return -1;
    redis_t *t = calloc(1, sizeof(*t));
    if (!t || (t->pfd = redis_connect()) < 0 || (t->cfd = redis_connect()) < 0 ||
        !(t->buf = malloc(r->size)))
        return -1;
    r->st = t;
    return 0;
}

static int redis_produce(run_t *r)
{
    redis_t *t = r->st;
    char hdr[96], line[64];
    for (long i = 0; i < r->n; i++) {
        wait_ahead(r, i);
        int k = snprintf(hdr, sizeof(hdr), "*3\r\n$5\r\nRPUSH\r\n$1\r\nq\r\n$%zu\r\n", r->size);
        if (full_write(t->pfd, hdr, (size_t)k) != 0 || full_write(t->pfd, r->src, r->size) != 0 ||
            full_write(t->pfd, "\r\n", 2) != 0 || read_line(t->pfd, line, sizeof(line)) != 0 ||
            line[0] != ':')
            return -1;
    }
    return 0;
}

static int redis_consume(run_t *r, double *wait_s)
{
    redis_t *t = r->st;
    static const char cmd[] = "*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n";
    char line[64];
    for (long i = 0; i < r->n; i++) {
        if (full_write(t->cfd, cmd, sizeof(cmd) - 1) != 0 ||
            read_line(t->cfd, line, sizeof(line)) != 0 || strcmp(line, "*2") != 0 ||
            read_line(t->cfd, line, sizeof(line)) != 0 ||         /* $1 */
            read_line(t->cfd, line, sizeof(line)) != 0 ||         /* q */
            read_line(t->cfd, line, sizeof(line)) != 0 || line[0] != '$' ||
            strtoull(line + 1, NULL, 10) != r->size || full_read(t->cfd, t->buf, r->size) != 0 ||
            full_read(t->cfd, line, 2) != 0)
            return -1;
        got_item(r, i, wait_s);
        atomic_fetch_add(&r->consumed, 1);
        step(r);
    }
    return 0;
}

static void redis_close(run_t *r)
{
    redis_t *t = r->st;
    close(t->pfd);
    close(t->cfd);
    free(t->buf);
    free(t);
}

/* ---- tfetchd: store and feed ----------------------------------------------------------------- */

/* The producer's item, built in one buffer as a producer that fills its batches in place
 * would: in a staging buffer of the daemon at url when c is given and it lends one (the feed
 * methods but feedk and feedb), else in this process's memory (tf_doc_new_packed; store,
 * feedk, and feeds on another host), pushed in one piece. feedb: borrowed, in pieces. */
static tf_doc_t *item_doc(run_t *r, tf_client_t *c, const char *url)
{
    tf_doc_t *d = NULL;
    int64_t shape[1] = {(int64_t)r->size};
    tf_tensor_spec_t spec = {"x", TF_U8, 1, shape};
    if (strcmp(r->m->name, "feedb") == 0) {    /* borrowed: header and tensor apart */
        d = tf_doc_new();
        if (d && tf_doc_add(d, "x", TF_U8, 1, shape, r->src, r->size, TF_BORROW) != TF_OK) {
            tf_doc_free(d);
            d = NULL;
        }
        return d;
    }
    int staged = c && strcmp(r->m->name, "feedk") != 0 &&
                 tf_doc_new_staging(c, url, &spec, 1, &d) == TF_OK;
    if (!staged && tf_doc_new_packed(&spec, 1, &d) != TF_OK)
        return NULL;
    memcpy(tf_doc_writable(d, 0), r->src, r->size);
    return d;
}

static int store_open(run_t *r)
{
    static int gen;
    r->st = (void *)(intptr_t)++gen;
    return 0;
}

static void store_url(run_t *r, long i, char *u, size_t cap)
{
    snprintf(u, cap, "%s/v1/tensors/q%d-%ld", D.base, (int)(intptr_t)r->st, i);
}

static int store_produce(run_t *r)
{
    tf_client_t *c = NULL;
    tf_doc_t *d = item_doc(r, NULL, NULL);
    int rc = 0;
    char u[160];
    if (!d || tf_client_new(&c) != TF_OK)
        rc = -1;
    for (long i = 0; rc == 0 && i < r->n; i++) {
        wait_ahead(r, i);
        store_url(r, i, u, sizeof(u));
        if (tf_put(c, u, d) != TF_OK)
            rc = -1;
    }
    tf_doc_free(d);
    tf_client_free(c);
    return rc;
}

static int store_consume(run_t *r, double *wait_s)
{
    tf_client_t *c = NULL;
    char u[160];
    if (tf_client_new(&c) != TF_OK)
        return -1;
    int rc = 0;
    for (long i = 0; rc == 0 && i < r->n; i++) {
        tf_doc_t *d = NULL;
        store_url(r, i, u, sizeof(u));
        if (tf_get(c, u, 10000, &d) != TF_OK) {
            rc = -1;
            break;
        }
        got_item(r, i, wait_s);
        snprintf(r->transport, sizeof(r->transport), "%s", tf_client_last(c)->transport);
        step(r);
        tf_doc_free(d);
        if (tf_delete(c, u) != TF_OK)
            rc = -1;
        atomic_fetch_add(&r->consumed, 1);
    }
    tf_client_free(c);
    return rc;
}

static void store_close(run_t *r)
{
    (void)r;
}

typedef struct {
    char url[160];
    int ucx;                            /* feedu: the consumer on policy ucx */
    int round;                          /* split, bcast: pushes are rounds for every device */
    int half;                           /* split: each device gets half of a round */
} feedst_t;

/* Declares a fresh feed of ndev devices with fanout (one item of r->size bytes per push;
 * split: each device gets half) for this measurement. Named by this process and a count, so
 * that runs against one daemon (--base) never meet an earlier run's feed. */
static int declare_open(run_t *r, unsigned ndev, const char *fanout)
{
    static int gen;
    feedst_t *f = calloc(1, sizeof(*f));
    tf_client_t *c = NULL;
    char decl[320];
    if (!f || tf_client_new(&c) != TF_OK) {
        free(f);
        return -1;
    }
    snprintf(f->url, sizeof(f->url), "%s/v1/feeds/b%ld-%d", D.base, (long)getpid(), ++gen);
    f->round = ndev > 1;
    f->half = strcmp(fanout, "split") == 0;
    size_t part = f->half ? r->size / ndev : r->size;
    snprintf(decl, sizeof(decl), "{\"devices\":%u,\"fanout\":\"%s\",\"signature\":[{"
             "\"name\":\"x\",\"dtype\":\"U8\",\"shape\":[%zu]}],\"max_items\":%d,"
             "\"max_bytes\":%zu}", ndev, fanout, r->size, AHEAD, (size_t)AHEAD * part + 4096);
    tf_status_t st = tf_feed_declare(c, f->url, decl, NULL);
    if (st != TF_OK)
        bench_errorf("declare: %s", tf_client_last(c)->error);
    tf_client_free(c);
    r->st = f;
    return st == TF_OK ? 0 : -1;
}

static int feed_open(run_t *r) { return declare_open(r, 1, "per_device"); }

static int feedu_open(run_t *r)
{
    if (feed_open(r) != 0)
        return -1;
    ((feedst_t *)r->st)->ucx = 1;
    return 0;
}

static int feed_produce(run_t *r)
{
    feedst_t *f = r->st;
    tf_client_t *c = NULL;
    int rc = tf_client_new(&c) == TF_OK ? 0 : -1;
    tf_doc_t *d = rc == 0 ? item_doc(r, c, f->url) : NULL;
    if (!d)
        rc = -1;
    for (long i = 0; rc == 0 && i < r->n; i++) {
        tf_status_t st = tf_infeed_push(c, f->url, f->round ? -1 : 0, d, (uint64_t)i + 1,
                                        10000, NULL);
        if (st != TF_OK) {
            bench_errorf("infeed push: %s", tf_client_last(c)->error);
            rc = -1;
        }
    }
    tf_doc_free(d);
    tf_client_free(c);
    return rc;
}

/* feedp: the same producer with `pipeline` pushes in flight (tf_infeed_push_start; each
 * completion starts the next), consecutive seqs that may complete out of order. */
static int pipeline = 4;

typedef struct {
    tf_client_t *c;
    const char *url;
    tf_doc_t *d;
    long next, n;
    int err;
} pipe_t;

static void pipe_next(pipe_t *p);

static void on_piped(tf_client_t *c, tf_status_t st, uint64_t round, const tf_result_t *res,
                     void *ud)
{
    (void)c;
    (void)round;
    pipe_t *p = ud;
    if (st != TF_OK) {
        if (!p->err)
            bench_errorf("infeed push: %s", res->error);
        p->err = 1;
        return;
    }
    pipe_next(p);
}

static void pipe_next(pipe_t *p)
{
    if (p->err || p->next >= p->n)
        return;
    uint64_t seq = (uint64_t)++p->next;
    if (tf_infeed_push_start(p->c, p->url, 0, p->d, seq, 10000, on_piped, p) != TF_OK) {
        bench_errorf("infeed push start: %s", tf_client_last(p->c)->error);
        p->err = 1;
    }
}

static int feedp_produce(run_t *r)
{
    feedst_t *f = r->st;
    pipe_t p = {.url = f->url, .n = r->n};
    if (tf_client_new(&p.c) != TF_OK)
        return -1;
    if (!(p.d = item_doc(r, p.c, f->url))) {
        tf_client_free(p.c);
        return -1;
    }
    for (int k = 0; k < pipeline; k++)
        pipe_next(&p);
    while (tf_client_pending(p.c) > 0)
        tf_client_run(p.c, -1);
    tf_client_free(p.c);
    tf_doc_free(p.d);
    return p.err || p.next < p.n ? -1 : 0;
}

static int feed_consume(run_t *r, double *wait_s)
{
    feedst_t *f = r->st;
    tf_client_t *c = NULL;
    tf_feed_t *feed = NULL;
    tf_feed_opts_t o = TF_FEED_OPTS_INIT;
    o.prefetch = 4;
    if (tf_client_new(&c) != TF_OK ||
        (f->ucx && tf_client_set_transport(c, TF_TRANSPORT_UCX) != TF_OK) ||
        tf_feed_attach_opts(c, f->url, "0", "host", &o, &feed) != TF_OK) {
        tf_client_free(c);
        return -1;
    }
    int rc = 0;
    volatile unsigned char sink = 0;
    for (long i = 0; i < r->n; i++) {
        tf_item_t *it = NULL;
        if (tf_infeed_pop(feed, 10000, &it) != TF_OK) {
            bench_errorf("pop: %s", tf_client_last(c)->error);
            rc = -1;
            break;
        }
        got_item(r, i, wait_s);
        const tf_tensor_t *t = tf_doc_find(tf_item_doc(it), "x");
        if (!t || t->nbytes != r->size) {
            rc = -1;
            tf_item_release(it);
            break;
        }
        sink ^= ((const unsigned char *)t->data)[r->size - 1];
        step(r);
        tf_item_release(it);
        tf_client_run(c, 0);            /* one pass: the prefetch moves on during a step */
    }
    (void)sink;
    snprintf(r->transport, sizeof(r->transport), "%s", tf_feed_transport(feed));
    tf_feed_detach(feed);
    tf_client_free(c);
    return rc;
}

/* Deletes the run's feed: three runs of every row declare more feeds than a user may hold
 * (feeds-per-user, 64), and a daemon named by --base keeps what is not deleted. */
static void feed_close(run_t *r)
{
    feedst_t *f = r->st;
    tf_client_t *c = NULL;
    if (f && tf_client_new(&c) == TF_OK && tf_delete(c, f->url) != TF_OK)
        bench_errorf("delete %s: %s", f->url, tf_client_last(c)->error);
    tf_client_free(c);
    free(f);
}

/* ---- split: one round cut in two, a ring per device ------------------------------------------ */

static int split_open(run_t *r) { return declare_open(r, 2, "split"); }
static int bcast_open(run_t *r) { return declare_open(r, 2, "broadcast"); }

/* One thread attached to both devices, as a process feeding two devices would be: each round
 * is its two parts (split: halves; broadcast: the whole, twice), popped in turn; a round's
 * wait runs from the first pop to the second. */
static int rounds_consume(run_t *r, double *wait_s)
{
    feedst_t *f = r->st;
    tf_client_t *c = NULL;
    tf_feed_t *feed[2] = {NULL, NULL};
    tf_feed_opts_t o = TF_FEED_OPTS_INIT;
    o.prefetch = 4;
    int rc = tf_client_new(&c) == TF_OK ? 0 : -1;
    for (int k = 0; rc == 0 && k < 2; k++)
        if (tf_feed_attach_opts(c, f->url, k ? "1" : "0", "host", &o, &feed[k]) != TF_OK)
            rc = -1;
    volatile unsigned char sink = 0;
    for (long i = 0; rc == 0 && i < r->n; i++) {
        tf_item_t *it[2] = {NULL, NULL};
        for (int k = 0; rc == 0 && k < 2; k++) {
            if (tf_infeed_pop(feed[k], 10000, &it[k]) != TF_OK) {
                bench_errorf("pop: %s", tf_client_last(c)->error);
                rc = -1;
                break;
            }
            const tf_tensor_t *t = tf_doc_find(tf_item_doc(it[k]), "x");
            if (!t || t->nbytes != (f->half ? r->size / 2 : r->size))
                rc = -1;
            else
                sink ^= ((const unsigned char *)t->data)[t->nbytes - 1];
        }
        if (rc == 0) {
            got_item(r, i, wait_s);
            step(r);
        }
        for (int k = 0; k < 2; k++)
            if (it[k])
                tf_item_release(it[k]);
        tf_client_run(c, 0);
    }
    (void)sink;
    if (feed[0])
        snprintf(r->transport, sizeof(r->transport), "%s", tf_feed_transport(feed[0]));
    for (int k = 0; k < 2; k++)
        if (feed[k])
            tf_feed_detach(feed[k]);
    tf_client_free(c);
    return rc;
}

static const method_t METHODS[] = {
    {"feed", feed_open, feed_produce, feed_consume, feed_close},
    {"feedp", feed_open, feedp_produce, feed_consume, feed_close},
    {"feedk", feed_open, feed_produce, feed_consume, feed_close},
    {"feedb", feed_open, feed_produce, feed_consume, feed_close},
    {"feedu", feedu_open, feed_produce, feed_consume, feed_close},
    {"split", split_open, feed_produce, rounds_consume, feed_close},
    {"bcast", bcast_open, feed_produce, rounds_consume, feed_close},
    {"store", store_open, store_produce, store_consume, store_close},
    {"redis", redis_open, redis_produce, redis_consume, redis_close},
    {"tcp", tcp_open, tcp_produce, tcp_consume, tcp_close},
    {"ring", ring_open, ring_produce, ring_consume, ring_close},
};
#define NMETHODS (sizeof(METHODS) / sizeof(METHODS[0]))

static void *producer(void *arg)
{
    run_t *r = arg;
    r->perr = r->m->produce(r) != 0;
    return NULL;
}

typedef struct {
    int ok;
    double items_s, gb_s, starved, setup_ms;
    double wait_p50_us, wait_p99_us, wait_max_ms;   /* per item, with a step */
    double start_ms;                    /* the waits of items 1..AHEAD, with a step */
    char transport[32];
} result_t;

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static result_t measure(const method_t *m, size_t size, long n, double step_s,
                        unsigned char *src)
{
    result_t res = {0};
    run_t r = {.m = m, .size = size, .n = n, .step_s = step_s, .src = src,
               .settle = step_s > 0 && n > 2 * AHEAD ? AHEAD : 0};
    if (step_s > 0 && !(r.waits = malloc((size_t)n * sizeof(double))))
        return res;
    double t0 = tfx_now_s(), wait = 0;
    if (m->open(&r) != 0) {
        free(r.waits);
        return res;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, producer, &r) != 0) {
        m->close(&r);
        free(r.waits);
        return res;
    }
    int crc = m->consume(&r, &wait);
    if (crc != 0 && strcmp(m->name, "tcp") == 0)
        shutdown(((tcp_t *)r.st)->pfd, SHUT_RDWR);
    pthread_join(th, NULL);
    m->close(&r);
    /* Whether the wait is many small ones (the path's cost per item) or a few long ones
     * (the producer fell behind, or this VM stalled): its median, 99th percentile and most. */
    if (r.nwaits > 0) {
        qsort(r.waits, (size_t)r.nwaits, sizeof(double), by_double);
        res.wait_p50_us = r.waits[r.nwaits / 2] * 1e6;
        res.wait_p99_us = r.waits[(r.nwaits * 99) / 100] * 1e6;
        res.wait_max_ms = r.waits[r.nwaits - 1] * 1e3;
    }
    free(r.waits);
    if (crc != 0 || r.perr)
        return res;
    /* Running, not starting: from the first item to the last, n - 1 items; the setup before
     * the first item is reported on its own. */
    double wall = r.last_s - r.first_s;
    if (n < 2 || r.first_s <= 0 || wall <= 0)
        return res;
    res.ok = 1;
    res.setup_ms = (r.first_s - t0) * 1e3;
    res.items_s = (double)(n - 1) / wall;
    res.gb_s = res.items_s * (double)size / 1e9;
    /* Starvation in the steady state (from item settle); the start's waits on their own. */
    double steady = r.last_s - r.steady_s;
    res.starved = steady > 0 ? wait / steady : 0;
    res.start_ms = r.start_wait * 1e3;
    snprintf(res.transport, sizeof(res.transport), "%s", r.transport[0] ? r.transport : "-");
    return res;
}

/* Every figure is the median of runs runs (RUNS; --quick, a smoke test: one): one stall of
 * this VM (tens of ms) moves a single run's rate or starvation fraction by several
 * hundredths. */
#define RUNS 3
static int runs = RUNS;

static int by_starved(const void *a, const void *b)
{
    double x = ((const result_t *)a)->starved, y = ((const result_t *)b)->starved;
    return (x > y) - (x < y);
}

static int by_rate(const void *a, const void *b)
{
    double x = ((const result_t *)a)->gb_s, y = ((const result_t *)b)->gb_s;
    return (x > y) - (x < y);
}

/* RUNS runs of m: the median (by starvation with a step, else by rate) and the range of
 * that figure. .ok 0 if any run failed. */
static result_t measure_runs(const method_t *m, size_t size, long n, double step_s,
                             unsigned char *src, double *lo, double *hi)
{
    result_t r[RUNS];
    for (int t = 0; t < runs; t++)
        if (!(r[t] = measure(m, size, n, step_s, src)).ok)
            return r[t];
    qsort(r, (size_t)runs, sizeof(r[0]), step_s > 0 ? by_starved : by_rate);
    *lo = step_s > 0 ? r[0].starved : r[0].gb_s;
    *hi = step_s > 0 ? r[runs - 1].starved : r[runs - 1].gb_s;
    return r[runs / 2];
}

/* memcpy of a SIZE-byte source into a memfd of nslots slots in turn, in GB/s. nslots 1: the
 * same two buffers every time, which at 4 MiB stay in this machine's caches (L2 2 MiB a core,
 * L3 32 MiB here); nslots AHEAD: the queue's memory, a fresh destination for each item as a
 * ring of AHEAD slots (or any queue of AHEAD items) gives it, which is what moving items
 * costs. */
static double memcpy_gb_s(size_t size, int nslots)
{
    size_t len = size * (size_t)nslots;
    unsigned char *a = malloc(size), *b = a ? memfd_map("tfetch-bench-copy", len) : NULL;
    double gb = 0;
    if (b) {
        memset(a, 1, size);
        long n = (long)((256 * MIB) / size) + 1;
        double t0 = tfx_now_s();
        for (long i = 0; i < n; i++) {
            a[i % size] = (unsigned char)i;
            memcpy(b + (size_t)(i % nslots) * size, a, size);
        }
        gb = (double)n * (double)size / 1e9 / (tfx_now_s() - t0);
        volatile unsigned char sink = b[(size_t)((n - 1) % nslots) * size];  /* used */
        (void)sink;
    }
    if (b)
        munmap(b, len);
    free(a);
    return gb;
}

/* The median of three: the figures the targets divide by are no noisier than the rows. */
static double memcpy_median(size_t size, int nslots)
{
    double g[3];
    for (int i = 0; i < 3; i++)
        g[i] = memcpy_gb_s(size, nslots);
    qsort(g, 3, sizeof g[0], by_double);
    return g[1];
}

/* A counter from our tfetchd's /metrics, or -1. */
/* With --base: the methods that only need the daemon (the others start their own). */
static const char *only;               /* --methods: comma-separated names, or NULL: all */

static int wanted(const method_t *m)
{
    if (!only)
        return 1;
    size_t n = strlen(m->name);
    for (const char *p = only; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, m->name, n) == 0)
            return 1;
        p += len + (e != NULL);
    }
    return 0;
}

static int at_remote(const method_t *m)
{
    return strncmp(m->name, "feed", 4) == 0 || strcmp(m->name, "store") == 0 ||
           strcmp(m->name, "split") == 0 || strcmp(m->name, "bcast") == 0;
}

static long count_for(size_t size, size_t bytes, long lo, long hi)
{
    long n = (long)(bytes / size);
    return n < lo ? lo : n > hi ? hi : n;
}

static void target(const char *what, double got, double want, int ge)
{
    int pass = ge ? got >= want : got <= want;
    printf("%s  %s: %.3f (target %s %.3f)\n", pass ? "PASS" : "MISS", what, got, ge ? ">=" : "<=",
           want);
}

/* who's GB/s over the memcpy into the queue's memory (mc) as a target, and its ratio to the
 * memcpy between two cached buffers (mc_hot) beside it. */
static void memcpy_target(const char *who, double gb, double mc, double mc_hot)
{
    char what[96];
    snprintf(what, sizeof(what), "%s / memcpy at 4 MiB (into the queue's memory)", who);
    target(what, gb / mc, 0.5, 1);
    if (mc_hot > 0 && gb > 0)
        printf("      (against a memcpy between the same two buffers, in cache: %.3f)\n",
               gb / mc_hot);
}

int main(int argc, char **argv)
{
    size_t sizes[16] = {4 * KIB, 64 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB};
    int nsizes = 6;
    size_t bytes = 512 * MIB;
    int quick = 0;
    const char *remote = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            if (bench_parse_sizes(argv[++i], sizes, &nsizes, 16, 0) != 0)
                return 2;
        } else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc) {
            if (bench_parse_size(argv[++i], &bytes) != 0)
                return 2;
        } else if (strcmp(argv[i], "--base") == 0 && i + 1 < argc) {
            remote = argv[++i];
        } else if (strcmp(argv[i], "--pipeline") == 0 && i + 1 < argc) {
            pipeline = atoi(argv[++i]);
            if (pipeline < 1 || pipeline > 64) {
                fprintf(stderr, "%s: --pipeline takes 1..64\n", argv[0]);
                return 2;
            }
        } else if (strcmp(argv[i], "--methods") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
            runs = 1;
            bytes = 32 * MIB;
        } else {
            fprintf(stderr, "usage: %s [--sizes LIST] [--bytes N] [--pipeline N] "
                    "[--methods LIST] [--quick] [--base URL]\n",
                    argv[0]);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    const char *const dargs[] = {"--max-body", "1G", NULL};
    if (remote) {
        snprintf(D.base, sizeof(D.base), "%s", remote);
    } else if (td_start(&D, dargs) != 0) {
        bench_errorf("tfetchd did not start");
        return 1;
    }
    int want_redis = 0;
    for (size_t k = 0; k < NMETHODS; k++)
        want_redis |= strcmp(METHODS[k].name, "redis") == 0 && wanted(&METHODS[k]);
    if (remote || !want_redis)
        ;                               /* redis, tcp and the ring are this host's: not run */
    else if (redis_start() != 0)
        bench_errorf("redis-server did not start (is it installed?): redis is skipped");
    size_t big = 0;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > big)
            big = sizes[i];
    unsigned char *src = malloc(big > 4 * MIB ? big : 4 * MIB);
    if (!src)
        return 1;
    bench_fill_pattern(src, big > 4 * MIB ? big : 4 * MIB, 7);
    int rc = 0;

    printf("# every figure: the median of %d runs, and the range of the %d\n", runs, runs);
    printf("# throughput: one producer, one consumer, no compute; items/s and GB/s from the "
           "consumer's first item to its last; setup: until its first item (connections, "
           "attach, the ring's memory)\n");
    printf("%-6s %9s %12s %8s %11s %9s  %s\n", "method", "size", "items/s", "GB/s", "range",
           "setup ms", "transport");
    double feed4 = 0, feedp4 = 0, ring4 = 0, redis4 = 0, store4 = 0;
    for (int s = 0; s < nsizes; s++) {
        char sb[32];
        for (size_t k = 0; k < NMETHODS; k++) {
            const method_t *m = &METHODS[k];
            int all = strcmp(m->name, "feed") == 0 || strcmp(m->name, "feedp") == 0 ||
                      strcmp(m->name, "ring") == 0;
            if ((remote && !at_remote(m)) || !wanted(m))
                continue;
            if (!all && sizes[s] != 4 * MIB)
                continue;               /* the others at 4 MiB only */
            long n = count_for(sizes[s], bytes, quick ? 3 * AHEAD : 32, quick ? 200 : 4000);
            if (strcmp(m->name, "store") == 0 || strcmp(m->name, "redis") == 0)
                n = n > 64 ? 64 : n;
            int split = strcmp(m->name, "split") == 0, bcast = strcmp(m->name, "bcast") == 0;
            int pushes = !remote && (strncmp(m->name, "feed", 4) == 0 || split || bcast);
            long long lent0 = pushes ? td_metric(&D, "tfetch_shm_ring_lent_total") : -1;
            long long staged0 = pushes ? td_metric(&D, "tfetch_shm_staged_pushes_total") : -1;
            double lo, hi;
            result_t res = measure_runs(m, sizes[s], n, 0, src, &lo, &hi);
            long long lent = lent0 >= 0 ? td_metric(&D, "tfetch_shm_ring_lent_total") - lent0 : -1;
            long long staged = staged0 >= 0
                                   ? td_metric(&D, "tfetch_shm_staged_pushes_total") - staged0
                                   : -1;
            if (!res.ok) {
                printf("%-6s %9s %12s %8s\n", m->name, bench_fmt_size(sizes[s], sb, sizeof(sb)),
                       "skipped", "-");
                if (strcmp(m->name, "redis") != 0)
                    rc = 1;
                continue;
            }
            printf("%-6s %9s %12.0f %8.2f %5.2f-%-5.2f %9.1f  %s", m->name,
                   bench_fmt_size(sizes[s], sb, sizeof(sb)), res.items_s, res.gb_s, lo, hi,
                   res.setup_ms, res.transport);
            if (lent >= 0)              /* pushes received straight into a ring slot */
                printf(" (%lld of %ld %s into a slot, %lld staged)", lent,
                       runs * (split ? 2 * n : n), split ? "halves" : bcast ? "rounds" : "pushes",
                       staged);
            printf("\n");
            fflush(stdout);
            if (sizes[s] == 4 * MIB) {
                double *slot = strcmp(m->name, "feed") == 0    ? &feed4
                               : strcmp(m->name, "feedp") == 0 ? &feedp4
                               : strcmp(m->name, "ring") == 0  ? &ring4
                               : strcmp(m->name, "redis") == 0 ? &redis4
                               : strcmp(m->name, "store") == 0 ? &store4
                                                               : NULL;
                if (slot)
                    *slot = res.gb_s;
            }
        }
    }
    /* The targets' memcpy: into the queue's memory (AHEAD slots in turn); the same two
     * buffers (in cache) beside it. */
    double mc = memcpy_median(4 * MIB, AHEAD), mc_hot = memcpy_median(4 * MIB, 1);
    printf("%-6s %9s %12.0f %8.2f %21s  into a memfd of %d slots in turn (the queue's memory)\n",
           "memcpy", "4 MiB", mc * 1e9 / (double)(4 * MIB), mc, "", AHEAD);
    printf("%-6s %9s %12.0f %8.2f %21s  the same two buffers every time (in cache)\n",
           "memcpy", "4 MiB", mc_hot * 1e9 / (double)(4 * MIB), mc_hot, "");

    printf("\n# starvation: 4 MiB items, the consumer computes STEP ms per item; the fraction "
           "of its wall time from its first item to its last spent waiting (from the end of a "
           "step to the next item) in the steady state, from item %d on; each of those items' "
           "wait: median, 99th percentile, most; start: the waits of items 1..%d, as the "
           "producer gets going\n", AHEAD, AHEAD);
    printf("%-6s %8s %10s %10s %11s %8s %9s %9s %9s %8s %9s\n", "method", "step", "demand",
           "starved", "range", "GB/s", "setup ms", "wait p50", "p99", "max", "start ms");
    double feed_starved_1g = -1, feedp_starved_1g = -1, ring_starved_1g = -1;
    const double steps[2] = {0.004, 0.002};     /* 1 GB/s and 2 GB/s of demand */
    for (int k = 0; k < 2; k++) {
        for (size_t j = 0; j < NMETHODS; j++) {
            const method_t *m = &METHODS[j];
            if ((remote && !at_remote(m)) || !wanted(m))
                continue;
            long n = quick ? 20 : 150;
            if (strcmp(m->name, "store") == 0 || strcmp(m->name, "redis") == 0)
                n = quick ? 20 : 60;
            double lo, hi;
            result_t r = measure_runs(m, 4 * MIB, n, steps[k], src, &lo, &hi);
            const result_t *res = &r;
            if (!res->ok) {
                printf("%-6s %6.0fms %10s %10s\n", m->name, steps[k] * 1e3, "-", "skipped");
                continue;
            }
            printf("%-6s %6.0fms %7.2fGB/s %10.3f %.3f-%.3f %8.2f %9.1f %7.0fus %7.0fus "
                   "%6.1fms %9.1f\n", m->name, steps[k] * 1e3, (double)(4 * MIB) / steps[k] / 1e9,
                   res->starved, lo, hi, res->gb_s, res->setup_ms, res->wait_p50_us,
                   res->wait_p99_us, res->wait_max_ms, res->start_ms);
            fflush(stdout);
            if (k == 0 && strcmp(m->name, "feed") == 0)
                feed_starved_1g = res->starved;
            if (k == 0 && strcmp(m->name, "feedp") == 0)
                feedp_starved_1g = res->starved;
            if (k == 0 && strcmp(m->name, "ring") == 0)
                ring_starved_1g = res->starved;
        }
    }

    printf("\n# targets (issue 11; speed is reported, never asserted)\n");
    if (ring4 > 0)
        target("feed / raw ring at 4 MiB", feed4 / ring4, 0.6, 1);
    if (mc > 0)
        memcpy_target("feed", feed4, mc, mc_hot);
    if (feed_starved_1g >= 0)
        target("feed starvation at 1 GB/s demand (4 MiB, 4 ms steps)", feed_starved_1g, 0.02, 0);
    if (feed_starved_1g >= 0 && ring_starved_1g >= 0)
        printf("      (the raw ring's own starvation in this run: %.3f)\n", ring_starved_1g);
    if (redis4 > 0)
        target("feed / redis at 4 MiB", feed4 / redis4, 5, 1);
    else if (want_redis && !remote)
        printf("SKIP  feed / redis at 4 MiB: no redis-server\n");
    if (store4 > 0)
        target("feed / store as a queue at 4 MiB", feed4 / store4, 3, 1);
    /* the same with the producer keeping `pipeline` pushes in flight */
    if (ring4 > 0 && feedp4 > 0)
        target("feedp / raw ring at 4 MiB", feedp4 / ring4, 0.6, 1);
    if (mc > 0 && feedp4 > 0)
        memcpy_target("feedp", feedp4, mc, mc_hot);
    if (feedp_starved_1g >= 0)
        target("feedp starvation at 1 GB/s demand", feedp_starved_1g, 0.02, 0);
    if (redis4 > 0 && feedp4 > 0)
        target("feedp / redis at 4 MiB", feedp4 / redis4, 5, 1);

    redis_stop();
    if (!remote)
        td_stop(&D, SIGTERM, 10000);
    free(src);
    return rc;
}
