/* check_shme2e.c - the shme2e suite: same-host GETs over shared memory (shm/memfd) against
 * the real tfetchd: the tensors point into a read-only mapping nobody can write, a replace or
 * delete never changes what a reader holds, leases counted in /metrics and ended by
 * tf_doc_free, by the client's death and by expiry, the lease bound (over it: UCX, saying
 * why), and the policies that keep it off.
 *
 * Each test starts its own daemon ($TFETCHD, port 0). Needs UCX (shm rides on the upgrade);
 * skipped with a message without it.
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "client/tfetch.h"
#include "proto/shmframe.h"
#include "proto/upgrade.h"
#include "transports/hostid.h"
#include "transports/shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static td_daemon_t D;
static const char *bearer;              /* the token curl sends (auth tests), or NULL */

/* "-H 'Authorization: Bearer TOKEN'" for curl, or "". */
static const char *auth_header(void)
{
    static char h[256];
    if (!bearer)
        return "";
    snprintf(h, sizeof h, "-H 'Authorization: Bearer %s'", bearer);
    return h;
}

static int ready(const char *test)
{
#ifndef HAVE_UCX
    fprintf(stderr, "%s: built without UCX (shm rides on the upgrade), skipped\n", test);
    return 0;
#else
    if (getenv("TFETCHD"))
        return 1;
    fprintf(stderr, "%s: TFETCHD not set, skipped\n", test);
    return 0;
#endif
}

static void start(const char *const *args)
{
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
}

static void stop(void)
{
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}

static const char *url(const char *name)
{
    static char bufs[4][512];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, 512, "%s/v1/tensors/%s", D.base, name);
    return b;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A value of /metrics (a line "name V"), or -1. */
static long long metric(const char *name)
{
    static char out[1 << 16];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "curl -s %s %s/metrics", auth_header(), D.base);
    if (td_run(cmd, out, sizeof out) != 0)
        return -1;
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(out, key);
    return p ? atoll(p + strlen(key)) : -1;
}

/* Waits up to 5 s for a metric to reach v. */
static int metric_becomes(const char *name, long long v)
{
    for (int i = 0; i < 500; i++) {
        if (metric(name) == v)
            return 1;
        sleep_ms(10);
    }
    return 0;
}

/* n bytes (a U8 tensor "t") filled with v, stored at name over HTTP. */
static void put_u8(tf_client_t *c, const char *name, size_t n, uint8_t v)
{
    uint8_t *data = malloc(n);
    memset(data, v, n);
    int64_t shape[1] = {(int64_t)n};
    tf_doc_t *doc = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(doc, "t", TF_U8, 1, shape, data, n, TF_BORROW), TF_OK);
    ck_assert_int_eq(tf_put(c, url(name), doc), TF_OK);
    tf_doc_free(doc);
    free(data);
}

static tf_client_t *client(tf_transport_t policy)
{
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_transport(c, policy), TF_OK);
    return c;
}

/* 1 if every byte of p[0..n) is v. */
static int all(const uint8_t *p, size_t n, uint8_t v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

/* A same-host get maps the stored document copy-on-write: the caller may write into it
 * (tf_doc_writable), a write copies only the page it touches, and neither the store nor
 * another reader of the same name ever sees it. */
START_TEST(shm_get_maps_copy_on_write)
{
    if (!ready("shm_get_maps_copy_on_write"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    const size_t big = (size_t)3 << 20, small = 100;
    put_u8(c, "big", big, 7);
    put_u8(c, "small", small, 8);
    ck_assert_int_eq(tf_client_upgrade(c, D.base), TF_OK);
    tf_doc_t *a = NULL, *b = NULL;
    ck_assert_int_eq(tf_get(c, url("big"), 0, &a), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert_str_eq(tf_client_last(c)->fallback, "");
    ck_assert_int_eq(tf_get(c, url("small"), 0, &b), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    const tf_tensor_t *t = tf_doc_find(a, "t");
    ck_assert_uint_eq(t->nbytes, big);
    ck_assert(all(t->data, big, 7));
    ck_assert(all(tf_doc_find(b, "t")->data, small, 8));
    /* Writable where it lies, copy-on-write: the store and a second reader keep 7s. */
    uint8_t *w = tf_doc_writable(a, 0);
    ck_assert_ptr_eq(w, t->data);
    tf_doc_t *a2 = NULL;
    ck_assert_int_eq(tf_get(c, url("big"), 0, &a2), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    memset(w + 4096, 1, 8192);                      /* two pages, mid-document */
    ck_assert_uint_eq(w[4096], 1);
    ck_assert(all(tf_doc_find(a2, "t")->data, big, 7));
    tf_doc_free(a2);
    tf_client_t *h = client(TF_TRANSPORT_HTTP);
    ck_assert_int_eq(tf_get(h, url("big"), 0, &a2), TF_OK);
    ck_assert(all(tf_doc_find(a2, "t")->data, big, 7));
    tf_doc_free(a2);
    tf_client_free(h);
    ck_assert_int_eq(metric("tfetch_shm_leases"), 2);
    ck_assert_int_ge(metric("tfetch_shm_leased_bytes"), (long long)big + (long long)small);
    tf_doc_free(a);
    tf_doc_free(b);
    ck_assert(metric_becomes("tfetch_shm_leases", 0));
    ck_assert_int_eq(metric("tfetch_shm_leased_bytes"), 0);
    /* A missing name is answered over shm too. */
    tf_doc_t *none = NULL;
    ck_assert_int_eq(tf_get(c, url("nothing"), 0, &none), TF_ENOTFOUND);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert_int_eq(tf_client_last(c)->http_status, 404);
    tf_client_free(c);
    stop();
}
END_TEST

START_TEST(shm_replace_delete_while_mapped)
{
    if (!ready("shm_replace_delete_while_mapped"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    const size_t n = (size_t)4 << 20;
    put_u8(c, "w", n, 1);
    ck_assert_int_eq(tf_client_upgrade(c, D.base), TF_OK);
    tf_doc_t *held = NULL;
    ck_assert_int_eq(tf_get(c, url("w"), 0, &held), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    const uint8_t *seen = tf_doc_find(held, "t")->data;
    put_u8(c, "w", n, 2);                           /* replace: a new memfd */
    tf_doc_t *now = NULL;
    ck_assert_int_eq(tf_get(c, url("w"), 0, &now), TF_OK);
    ck_assert(all(tf_doc_find(now, "t")->data, n, 2));
    ck_assert(all(seen, n, 1));                     /* the reader's bytes unchanged */
    ck_assert_int_eq(tf_delete(c, url("w")), TF_OK);
    put_u8(c, "w", n, 3);                           /* the memory may be reused: not ours */
    ck_assert(all(seen, n, 1));
    tf_doc_free(now);
    tf_doc_free(held);
    ck_assert(metric_becomes("tfetch_shm_leases", 0));
    tf_client_free(c);
    stop();
}
END_TEST

/* How many of the daemon's descriptors are memfds named name. */
static int daemon_memfds(const char *name)
{
    char dir[64], want[128];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)D.pid);
    snprintf(want, sizeof want, "/memfd:%s ", name);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char path[320], target[256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len > 0) {
            target[len] = '\0';
            n += strncmp(target, want, strlen(want)) == 0;
        }
    }
    closedir(d);
    return n;
}

/* Waits up to 5 s for the daemon to hold n memfds named name. */
static int daemon_memfds_become(const char *name, int n)
{
    for (int i = 0; i < 500; i++) {
        if (daemon_memfds(name) == n)
            return 1;
        sleep_ms(10);
    }
    return 0;
}

/* A document PUT over HTTP or UCX lives in the daemon's anonymous memory (huge pages for a
 * UCX GET out of it), in no memfd, until a same-host client maps it: that first GET moves it
 * into a sealed memfd of its own, once whatever the GETs after, and the store still counts
 * it once. UCX and HTTP GETs read it as before. */
START_TEST(shm_get_moves_a_put_document)
{
    if (!ready("shm_get_moves_a_put_document"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_AUTO), *u = client(TF_TRANSPORT_UCX);
    tf_client_t *h = client(TF_TRANSPORT_HTTP);
    const size_t n = (size_t)12 << 20;
    put_u8(h, "h", n, 3);
    ck_assert_str_eq(tf_client_last(h)->transport, "http");
    put_u8(u, "u", n, 4);
    ck_assert_msg(strncmp(tf_client_last(u)->transport, "ucx/", 4) == 0, "%s",
                  tf_client_last(u)->transport);
    ck_assert_int_eq(daemon_memfds("tfetch-doc"), 0);
    long long stored = metric("tfetch_stored_bytes");
    ck_assert_int_gt(stored, 2 * (long long)n);
    ck_assert_int_eq(tf_client_upgrade(c, D.base), TF_OK);
    tf_doc_t *a = NULL, *a2 = NULL, *b = NULL, *v = NULL;
    ck_assert_int_eq(tf_get(c, url("h"), 0, &a), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert(all(tf_doc_find(a, "t")->data, n, 3));
    ck_assert_int_eq(daemon_memfds("tfetch-doc"), 1);
    ck_assert_int_eq(tf_get(c, url("h"), 0, &a2), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert(all(tf_doc_find(a2, "t")->data, n, 3));
    ck_assert_int_eq(daemon_memfds("tfetch-doc"), 1);
    ck_assert_int_eq(tf_get(c, url("u"), 0, &b), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert(all(tf_doc_find(b, "t")->data, n, 4));
    ck_assert_int_eq(daemon_memfds("tfetch-doc"), 2);
    ck_assert_int_eq(metric("tfetch_shm_gets_total"), 3);
    ck_assert_int_eq(metric("tfetch_stored_bytes"), stored);
    ck_assert_int_eq(tf_get(u, url("h"), 0, &v), TF_OK);         /* moved: UCX reads it too */
    ck_assert_msg(strncmp(tf_client_last(u)->transport, "ucx/", 4) == 0, "%s",
                  tf_client_last(u)->transport);
    ck_assert(all(tf_doc_find(v, "t")->data, n, 3));
    tf_doc_free(v);
    ck_assert_int_eq(tf_delete(u, url("h")), TF_OK);
    ck_assert(all(tf_doc_find(a, "t")->data, n, 3));
    tf_doc_free(a);
    tf_doc_free(a2);
    tf_doc_free(b);
    ck_assert(metric_becomes("tfetch_shm_leases", 0));
    ck_assert(daemon_memfds_become("tfetch-doc", 1));            /* h's went with h */
    tf_client_free(h);
    tf_client_free(u);
    tf_client_free(c);
    stop();
}
END_TEST

/* A client that dies holding mappings: its connection closes, its leases end. */
START_TEST(shm_client_killed_frees_leases)
{
    if (!ready("shm_client_killed_frees_leases"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    put_u8(c, "k", (size_t)3 << 20, 5);
    tf_client_free(c);
    int ready_pipe[2];
    ck_assert_int_eq(pipe(ready_pipe), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        tf_client_t *k = NULL;
        tf_doc_t *d[3];
        if (tf_client_new(&k) != TF_OK || tf_client_upgrade(k, D.base) != TF_OK)
            _exit(2);
        for (int i = 0; i < 3; i++)
            if (tf_get(k, url("k"), 0, &d[i]) != TF_OK ||
                strcmp(tf_client_last(k)->transport, "shm/memfd") != 0)
                _exit(3);
        (void)!write(ready_pipe[1], "x", 1);
        pause();                                    /* killed holding all three */
        _exit(0);
    }
    close(ready_pipe[1]);
    char x;
    ck_assert_int_eq(read(ready_pipe[0], &x, 1), 1);
    close(ready_pipe[0]);
    ck_assert_int_eq(metric("tfetch_shm_leases"), 3);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    ck_assert(metric_becomes("tfetch_shm_leases", 0));
    ck_assert_int_eq(metric("tfetch_shm_leased_bytes"), 0);
    ck_assert_int_eq(metric("tfetch_shm_connections"), 0);
    stop();
}
END_TEST

/* Over the lease bound the GET is copied over UCX instead, saying why; expiry ends leases. */
START_TEST(shm_lease_bound_and_expiry)
{
    if (!ready("shm_lease_bound_and_expiry"))
        return;
    const char *args[] = {"--shm-lease-memory", "5M", "--shm-lease-ms", "300", NULL};
    start(args);
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    put_u8(c, "a", (size_t)3 << 20, 1);
    ck_assert_int_eq(tf_client_upgrade(c, D.base), TF_OK);
    tf_doc_t *a = NULL, *b = NULL;
    ck_assert_int_eq(tf_get(c, url("a"), 0, &a), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert_int_eq(tf_get(c, url("a"), 0, &b), TF_OK);   /* 6 MiB would be over 5 */
    ck_assert_msg(strncmp(tf_client_last(c)->transport, "ucx/", 4) == 0, "%s",
                  tf_client_last(c)->transport);
    ck_assert_msg(strstr(tf_client_last(c)->fallback, "lease bound"), "%s",
                  tf_client_last(c)->fallback);
    ck_assert(all(tf_doc_find(b, "t")->data, (size_t)3 << 20, 1));
    tf_doc_free(b);
    /* Held past shm-lease-ms: the daemon ends the lease (the mapping stays valid here). */
    ck_assert(metric_becomes("tfetch_shm_leases", 0));
    ck_assert_int_eq(metric("tfetch_shm_lease_expirations_total"), 1);
    ck_assert(all(tf_doc_find(a, "t")->data, (size_t)3 << 20, 1));
    tf_doc_free(a);                                 /* its RELEASE names an ended lease */
    ck_assert_int_eq(tf_get(c, url("a"), 0, &b), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    tf_doc_free(b);
    tf_client_free(c);
    stop();
}
END_TEST

/* Policies http and ucx never use shm; --shm off offers none. */
START_TEST(shm_policies)
{
    if (!ready("shm_policies"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_UCX);
    put_u8(c, "p", 64, 1);
    /* what tfetch doctor reads: this host, the shm connection, the server's uid and range */
    tf_transport_info_t ti = TF_TRANSPORT_INFO_INIT;
    ck_assert_int_eq(tf_client_upgrade(c, D.base), TF_OK);
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    ck_assert_int_eq(ti.same_host, 1);
    ck_assert_str_eq(ti.shm, "shm/memfd");
    ck_assert_str_eq(ti.shm_reason, "");
    ck_assert_int_eq(ti.server_uid, (long)getuid());
    ck_assert_uint_eq(ti.protocol_min, 1);
    ck_assert_uint_eq(ti.protocol_max, 2);
    tf_doc_t *d = NULL;
    ck_assert_int_eq(tf_get(c, url("p"), 0, &d), TF_OK);
    ck_assert_str_ne(tf_client_last(c)->transport, "shm/memfd");
    tf_doc_free(d);
    ck_assert_int_eq(tf_client_set_transport(c, TF_TRANSPORT_HTTP), TF_OK);
    ck_assert_int_eq(tf_get(c, url("p"), 0, &d), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "http");
    tf_doc_free(d);
    tf_client_free(c);
    stop();
    const char *off[] = {"--shm", "off", NULL};
    start(off);
    c = client(TF_TRANSPORT_AUTO);
    put_u8(c, "p", 64, 1);
    ck_assert_int_eq(tf_client_upgrade(c, D.base), TF_OK);
    ck_assert_int_eq(tf_client_transport_info(c, D.base, &ti), TF_OK);
    ck_assert_int_eq(ti.same_host, 1);
    ck_assert_str_eq(ti.shm, "");
    ck_assert_msg(strstr(ti.shm_reason, "offers no shm"), "%s", ti.shm_reason);
    ck_assert_int_eq(tf_get(c, url("p"), 0, &d), TF_OK);
    ck_assert_msg(strncmp(tf_client_last(c)->transport, "ucx/", 4) == 0, "%s",
                  tf_client_last(c)->transport);
    tf_doc_free(d);
    ck_assert_int_eq(metric("tfetch_shm_enabled"), 0);
    tf_client_free(c);
    stop();
}
END_TEST

/* PUT over shm: an ordinary document (one copy into the lent buffer), then one built in
 * place (none); both read back over HTTP and over shm. */
START_TEST(shm_put_both_ways)
{
    if (!ready("shm_put_both_ways"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    ck_assert_int_eq(tf_client_upgrade(c, D.base), TF_OK);
    put_u8(c, "p1", (size_t)3 << 20, 4);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert_int_eq(tf_client_last(c)->http_status, 201);
    put_u8(c, "p1", 1000, 5);
    ck_assert_int_eq(tf_client_last(c)->http_status, 204);     /* replaced */
    int64_t shape[2] = {512, 1024};
    tf_tensor_spec_t specs[2] = {{"a", TF_F32, 2, shape}, {"b", TF_U8, 1, shape}};
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_doc_new_shm(c, url("p2"), specs, 2, &doc), TF_OK);
    float *a = tf_doc_writable(doc, 0);
    uint8_t *b = tf_doc_writable(doc, 1);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_null(tf_doc_writable(doc, 2));
    for (size_t i = 0; i < 512 * 1024; i++)
        a[i] = (float)i;
    memset(b, 9, 512);
    ck_assert_int_eq(tf_doc_add(doc, "c", TF_U8, 1, shape, b, 512, TF_COPY), TF_EINVAL);
    ck_assert_int_eq(tf_doc_set_meta(doc, "k", "v"), TF_EINVAL);
    ck_assert_int_eq(tf_put(c, url("p2"), doc), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert_ptr_null(tf_doc_writable(doc, 0));               /* read-only from now on */
    ck_assert(tf_doc_find(doc, "a")->data == a);              /* at the same address */
    ck_assert(((const float *)tf_doc_find(doc, "a")->data)[1000] == 1000.0f);
    long pg = sysconf(_SC_PAGESIZE);
    ck_assert_int_ne(mprotect((void *)((uintptr_t)a & ~(uintptr_t)(pg - 1)), (size_t)pg,
                              PROT_READ | PROT_WRITE), 0);
    tf_client_t *h = client(TF_TRANSPORT_HTTP);
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_get(h, url("p2"), 0, &got), TF_OK);
    ck_assert(((const float *)tf_doc_find(got, "a")->data)[512 * 1024 - 1] == 524287.0f);
    ck_assert(all(tf_doc_find(got, "b")->data, 512, 9));
    tf_doc_free(got);
    ck_assert_int_eq(tf_get(h, url("p1"), 0, &got), TF_OK);
    ck_assert(all(tf_doc_find(got, "t")->data, 1000, 5));
    tf_doc_free(got);
    ck_assert_int_eq(tf_get(c, url("p2"), 0, &got), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert(all(tf_doc_find(got, "b")->data, 512, 9));
    tf_doc_free(got);
    tf_doc_free(doc);
    ck_assert_int_eq(metric("tfetch_shm_puts_total"), 3);
    /* A document built in place and freed unsent gives its buffer back. */
    ck_assert_int_eq(tf_doc_new_shm(c, url("p3"), specs, 1, &doc), TF_OK);
    tf_doc_free(doc);
    ck_assert(metric_becomes("tfetch_store_reserved_bytes", 0));
    /* Over HTTP the same kind of document is an ordinary one. */
    ck_assert_int_eq(tf_doc_new_shm(c, url("p4"), specs, 2, &doc), TF_OK);
    memset(tf_doc_writable(doc, 1), 3, 512);
    ck_assert_int_eq(tf_put(h, url("p4"), doc), TF_OK);
    ck_assert_str_eq(tf_client_last(h)->transport, "http");
    tf_doc_free(doc);
    ck_assert_int_eq(tf_get(h, url("p4"), 0, &got), TF_OK);
    ck_assert(all(tf_doc_find(got, "b")->data, 512, 3));
    tf_doc_free(got);
    tf_client_free(h);
    tf_client_free(c);
    stop();
}
END_TEST

/* Waits up to 10 s for a metric to be above v; its value then, or -1. */
static long long metric_above(const char *name, long long v)
{
    for (int i = 0; i < 1000; i++) {
        long long m = metric(name);
        if (m > v)
            return m;
        sleep_ms(10);
    }
    return -1;
}

/* Whether this process's kernel collapses a memfd into 2 MiB pages (tfx_shm_collapse): what
 * the daemon's ready regions then are made of. */
static int host_collapses(void)
{
    tfx_shm_t m;
    tfp_err_t err;
    if (tfx_shm_create((size_t)2 << 20, "probe", &m, &err) != TFP_OK)
        return 0;
    int e = tfx_shm_collapse(&m, 0);
    tfx_shm_close(&m);
    return e == 0;
}

/* Repeated same-host PUTs of one size write into memory made ready while the last one was
 * in use (daemon/shmpool.h), in 2 MiB pages where the kernel collapses memfds: the first is fresh, the next ones ready, the bytes right; the
 * ready memory counts in the store but not as an upload's, and gives way to a document
 * that needs it (here an HTTP PUT that fits only without it). */
START_TEST(shm_put_ready_memory)
{
    if (!ready("shm_put_ready_memory"))
        return;
    static const char *const args[] = {"--store-memory", "48M", "--shm-ready-memory", "16M",
                                       NULL};
    start(args);
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    ck_assert_int_eq(tf_client_upgrade(c, D.base), TF_OK);
    put_u8(c, "r", (size_t)4 << 20, 1);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert_int_eq(metric("tfetch_shm_put_regions_total{kind=\"fresh\"}"), 1);
    long long ready_bytes = metric_above("tfetch_shm_ready_bytes", 0);
    ck_assert_int_gt(ready_bytes, 4 << 20);                 /* the document's size */
    ck_assert_int_eq(metric("tfetch_store_reserved_bytes"), 0);
    ck_assert_int_eq(metric("tfetch_shm_ready_huge_total"), host_collapses() ? 1 : 0);
    put_u8(c, "r", (size_t)4 << 20, 2);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert_int_eq(metric("tfetch_shm_put_regions_total{kind=\"ready\"}"), 1);
    tf_client_t *h = client(TF_TRANSPORT_HTTP);
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_get(h, url("r"), 0, &got), TF_OK);
    ck_assert(all(tf_doc_find(got, "t")->data, (size_t)4 << 20, 2));
    tf_doc_free(got);
    ck_assert_int_eq(metric_above("tfetch_shm_ready_bytes", 0), ready_bytes);
    /* 4 MiB stored + 4 ready + 41 > 48: fits only once the ready memory gives way. */
    put_u8(h, "big", (size_t)41 << 20, 3);
    ck_assert_int_eq(tf_client_last(h)->http_status, 201);
    ck_assert_int_eq(metric("tfetch_shm_ready_bytes"), 0);
    tf_client_free(h);
    tf_client_free(c);
    stop();
}
END_TEST

/* A malformed document committed from shared memory is refused; nothing is stored. */
START_TEST(shm_put_malformed_refused)
{
    if (!ready("shm_put_malformed_refused"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    int64_t shape[1] = {100};
    tf_tensor_spec_t spec = {"a", TF_U8, 1, shape};
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_doc_new_shm(c, url("bad"), &spec, 1, &doc), TF_OK);
    uint8_t *data = tf_doc_writable(doc, 0);
    long pg = sysconf(_SC_PAGESIZE);
    uint8_t *base = (uint8_t *)((uintptr_t)data & ~(uintptr_t)(pg - 1));
    ck_assert_int_eq(base[8], '{');
    base[8] = 'X';                                  /* the header's JSON, broken */
    ck_assert_int_eq(tf_put(c, url("bad"), doc), TF_EPROTO);   /* as HTTP answers it */
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert_int_eq(tf_client_last(c)->http_status, 400);
    tf_doc_free(doc);
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_get(c, url("bad"), 0, &got), TF_ENOTFOUND);
    ck_assert(metric_becomes("tfetch_store_reserved_bytes", 0));
    ck_assert_int_eq(metric("tfetch_stored_tensors"), 0);
    tf_client_free(c);
    stop();
}
END_TEST

/* ---- a hostile client, speaking the protocol itself ---------------------------------------- */

/* POST /v1/upgrade listing shm: the socket and its token. */
static void raw_upgrade(char *sock, char *token)
{
    tfp_up_req_t q = {.transports = TFP_UP_T_UCX | TFP_UP_T_SHM};
    tfp_err_t err;
    ck_assert_int_eq(tfx_hostid_get(&q.host, &err), TFP_OK);
    char *json;
    size_t len;
    ck_assert_int_eq(tfp_up_req_build(&q, &json, &len, &err), TFP_OK);
    char cmd[2048];
    static char out[1 << 17];
    snprintf(cmd, sizeof cmd, "curl -s %s -H 'Content-Type: application/json' --data-binary "
             "'%s' %s/v1/upgrade", auth_header(), json, D.base);
    free(json);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    tfp_up_resp_t r;
    ck_assert_msg(tfp_up_resp_parse(out, strlen(out), &r, &err) == TFP_OK, "%s: %s", err.msg, out);
    ck_assert_str_ne(r.shm_socket, "");
    strcpy(sock, r.shm_socket);
    strcpy(token, r.shm_token);
    tfp_up_resp_clear(&r);
}

static void raw_send(int fd, tfp_sf_t *m, int give_fd)
{
    uint8_t buf[TFP_SF_MAX];
    tfp_err_t err;
    size_t n = tfp_sf_encode(m, buf, sizeof buf, &err);
    ck_assert_uint_gt(n, 0);
    ck_assert_int_eq(tfx_shm_send(fd, buf, n, give_fd >= 0 ? &give_fd : NULL, give_fd >= 0,
                                  &err), TFP_OK);
}

/* The reply to what was sent; *fd the descriptor it carried (-1: none). */
static tfp_sf_t raw_reply(int fd, int *got_fd)
{
    uint8_t buf[TFP_SF_MAX];
    size_t len, nfds;
    int fds[1] = {-1};
    tfp_err_t err;
    ck_assert_int_eq(tfx_shm_recv(fd, buf, sizeof buf, &len, fds, 1, &nfds, &err), TFP_OK);
    tfp_sf_t r;
    ck_assert_uint_gt(len, 0);
    ck_assert_int_eq(tfp_sf_decode(buf, len, &r, &err), TFP_OK);
    *got_fd = nfds ? fds[0] : -1;
    return r;
}

static tfp_sf_t sf(tfp_sf_op_t op, const char *str)
{
    tfp_sf_t m;
    memset(&m, 0, sizeof m);
    m.op = op;
    m.seq = 1;
    if (str) {
        m.str_len = strlen(str);
        memcpy(m.str, str, m.str_len + 1);
    }
    return m;
}

/* op (COMMIT or CALL, string str) of the buffer lease holding len bytes, sent while the
 * client still maps it writable: refused (the daemon cannot seal it), with no descriptor. */
static void refused_unsealable(int fd, tfp_sf_op_t op, const char *str, uint64_t lease,
                               size_t len)
{
    int got;
    tfp_sf_t m = sf(op, str);
    m.lease = lease;
    m.a = len;
    raw_send(fd, &m, -1);
    tfp_sf_t r = raw_reply(fd, &got);
    ck_assert_int_eq(r.status, TFP_EBADREQ);
    ck_assert_ptr_nonnull(strstr(r.str, "sealed"));
    ck_assert_int_eq(got, -1);
}

START_TEST(shm_hostile_client)
{
    if (!ready("shm_hostile_client"))
        return;
    start(NULL);
    tf_client_t *c = client(TF_TRANSPORT_HTTP);
    put_u8(c, "h", 100, 6);
    tf_client_free(c);
    char sock[TFP_UP_MAX_SHM_SOCKET + 1], token[TFP_UP_TOKEN_LEN + 1];
    raw_upgrade(sock, token);
    tfp_err_t err;
    int fd, got;
    /* Anything before a valid HELLO: refused and closed. */
    fd = tfx_shm_connect(sock, &err);
    ck_assert_int_ge(fd, 0);
    tfp_sf_t m = sf(TFP_SF_HELLO, "00000000000000000000000000000000");
    raw_send(fd, &m, -1);
    tfp_sf_t r = raw_reply(fd, &got);
    ck_assert_int_eq(r.status, TFP_EUNAUTH);
    close(fd);
    fd = tfx_shm_connect(sock, &err);
    m = sf(TFP_SF_GET, "h");
    raw_send(fd, &m, -1);
    r = raw_reply(fd, &got);
    ck_assert_int_eq(r.status, TFP_EUNAUTH);
    close(fd);
    /* The token once; then a GET's memfd cannot be mapped or made writable. */
    fd = tfx_shm_connect(sock, &err);
    m = sf(TFP_SF_HELLO, token);
    raw_send(fd, &m, -1);
    r = raw_reply(fd, &got);
    ck_assert_int_eq(r.status, TFP_OK);
    m = sf(TFP_SF_GET, "h");
    raw_send(fd, &m, -1);
    r = raw_reply(fd, &got);
    ck_assert_int_eq(r.status, TFP_OK);
    ck_assert_int_ge(got, 0);
    size_t size;
    ck_assert_int_eq(tfx_shm_check(got, r.a + r.b, TFX_SHM_SEAL_WRITE, &size, &err), TFP_OK);
    ck_assert(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, got, 0) == MAP_FAILED);
    ck_assert_int_lt(pwrite(got, "x", 1, 0), 0);
    ck_assert_int_ne(ftruncate(got, 0), 0);
    close(got);
    /* A lent buffer kept mapped writable at COMMIT: refused, nothing stored. */
    m = sf(TFP_SF_ALLOC, NULL);
    m.a = 4096;
    raw_send(fd, &m, -1);
    r = raw_reply(fd, &got);
    ck_assert_int_eq(r.status, TFP_OK);
    ck_assert_int_ge(got, 0);
    ck_assert_int_ne(ftruncate(got, 1), 0);         /* sealed in size: cannot SIGBUS them */
    tfx_shm_t w;
    ck_assert_int_eq(tfx_shm_map(got, 4096, 1, &w, &err), TFP_OK);
    tf_doc_t *d = tf_doc_new();
    int64_t shape[1] = {4};
    ck_assert_int_eq(tf_doc_add(d, "t", TF_U8, 1, shape, "abcd", 4, TF_COPY), TF_OK);
    void *enc;
    size_t elen;
    ck_assert_int_eq(tf_doc_encode(d, &enc, &elen), TF_OK);
    memcpy(w.p, enc, elen);
    tf_free(enc);
    tf_doc_free(d);
    refused_unsealable(fd, TFP_SF_COMMIT, "evil", r.lease, elen);
    tfx_shm_close(&w);
    /* A descriptor sent to the daemon: the connection is closed. */
    m = sf(TFP_SF_GET, "h");
    raw_send(fd, &m, 0);
    char b;
    ck_assert_int_eq(recv(fd, &b, 1, 0), 0);
    close(fd);
    c = client(TF_TRANSPORT_HTTP);
    tf_doc_t *none = NULL;
    ck_assert_int_eq(tf_get(c, url("evil"), 0, &none), TF_ENOTFOUND);
    tf_client_free(c);
    ck_assert(metric_becomes("tfetch_store_reserved_bytes", 0));
    ck_assert(metric_becomes("tfetch_shm_leases", 0));
    stop();
}
END_TEST

/* 1 if the daemon's log holds text. */
static int log_has(const char *text)
{
    FILE *f = fopen(D.log_path, "r");
    char line[2048];
    int found = 0;
    if (!f)
        return 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

/* A HELLO (version a) on a new connection; its reply in *r. The connected fd. */
static int hello_v(uint64_t a, tfp_sf_t *r)
{
    char sock[TFP_UP_MAX_SHM_SOCKET + 1], token[TFP_UP_TOKEN_LEN + 1];
    raw_upgrade(sock, token);
    tfp_err_t err;
    int fd = tfx_shm_connect(sock, &err), got;
    ck_assert_int_ge(fd, 0);
    tfp_sf_t m = sf(TFP_SF_HELLO, token);
    m.a = a;
    raw_send(fd, &m, -1);
    *r = raw_reply(fd, &got);
    ck_assert_int_eq(r->status, TFP_OK);
    ck_assert_int_eq(got, -1);
    return fd;
}

/* The document of one U8 tensor "t" of n bytes of v, encoded (tf_free it). */
static void *u8_doc(size_t n, uint8_t v, size_t *len)
{
    uint8_t *data = malloc(n);
    memset(data, v, n);
    int64_t shape[1] = {(int64_t)n};
    tf_doc_t *d = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(d, "t", TF_U8, 1, shape, data, n, TF_COPY), TF_OK);
    void *enc;
    ck_assert_int_eq(tf_doc_encode(d, &enc, len), TF_OK);
    tf_doc_free(d);
    free(data);
    return enc;
}

/* CALL, the exchange over shm. The daemon names it in HELLO's answer to a V2 client only;
 * a CALL of no lent buffer, or of one still mapped writable, is refused (the connection
 * lives); a malformed CALL (an invalid route name) or a CALL on a connection that never
 * said V2 closes the connection with a log line saying why, and the daemon serves on.
 * Through libtfetch an exchange of 256 KiB goes over shm/memfd (echo: the same tensor back,
 * the request's own memfd), blocking and async (tf_fetch_start, four in flight), a missing
 * route answers 404 over shm too, a small one stays on UCX; nothing is left lent or reserved
 * afterwards. */
START_TEST(shm_call)
{
    if (!ready("shm_call"))
        return;
    start(NULL);
    tfp_sf_t r, m;
    int got;
    /* A 0.1.0 client's HELLO gets no capabilities; a V2 one gets CALL. */
    int fd = hello_v(0, &r);
    ck_assert_uint_eq(r.a, 0);
    m = sf(TFP_SF_ALLOC, NULL);
    m.a = 4096;
    m.flags = TFP_SF_F_CALL;
    raw_send(fd, &m, -1);               /* never told: closed */
    char b;
    ck_assert_int_eq(recv(fd, &b, 1, 0), 0);
    close(fd);
    fd = hello_v(TFP_SF_HELLO_V2, &r);
    ck_assert_uint_eq(r.a & TFP_SF_CAP_CALL, TFP_SF_CAP_CALL);
    /* A CALL of no buffer lent: refused, the connection lives. */
    m = sf(TFP_SF_CALL, "echo");
    m.lease = 12345;
    m.a = 100;
    raw_send(fd, &m, -1);
    r = raw_reply(fd, &got);
    ck_assert_int_eq(r.status, TFP_EBADREQ);
    ck_assert_ptr_nonnull(strstr(r.str, "no buffer lent"));
    /* A buffer still mapped writable at CALL: refused, the route never runs. */
    size_t elen;
    void *enc = u8_doc(64, 3, &elen);
    m = sf(TFP_SF_ALLOC, NULL);
    m.a = elen;
    m.flags = TFP_SF_F_CALL;
    raw_send(fd, &m, -1);
    r = raw_reply(fd, &got);
    ck_assert_int_eq(r.status, TFP_OK);
    ck_assert_int_ge(got, 0);
    tfp_err_t err;
    tfx_shm_t w;
    ck_assert_int_eq(tfx_shm_map(got, elen, 1, &w, &err), TFP_OK);
    memcpy(w.p, enc, elen);
    refused_unsealable(fd, TFP_SF_CALL, "echo", r.lease, elen);
    tfx_shm_close(&w);
    /* Unmapped: the same document is echoed back in its own sealed memfd. */
    m = sf(TFP_SF_ALLOC, NULL);
    m.a = elen;
    m.flags = TFP_SF_F_CALL;
    raw_send(fd, &m, -1);
    r = raw_reply(fd, &got);
    ck_assert_int_eq(r.status, TFP_OK);
    ck_assert_int_eq(tfx_shm_map(got, elen, 1, &w, &err), TFP_OK);
    memcpy(w.p, enc, elen);
    tfx_shm_close(&w);
    m = sf(TFP_SF_CALL, NULL);
    ck_assert_int_eq(tfp_sf_set_call(&m, "echo", "alice", "shm-call-1", &err), TFP_OK);
    m.lease = r.lease;
    m.a = elen;
    raw_send(fd, &m, -1);
    r = raw_reply(fd, &got);
    ck_assert_int_eq(r.status, TFP_OK);
    ck_assert_uint_eq(r.http, 200);
    ck_assert_int_ge(got, 0);
    size_t size;
    tfx_shm_t a;
    ck_assert_int_eq(tfx_shm_check(got, 1, TFX_SHM_SEAL_WRITE, &size, &err), TFP_OK);
    ck_assert_int_eq(tfx_shm_map(got, size, TFX_SHM_MAP_READ, &a, &err), TFP_OK);
    ck_assert_uint_eq(r.b, elen);
    ck_assert_int_eq(memcmp(a.p + r.a, enc, elen), 0);
    tfx_shm_close(&a);
    m = sf(TFP_SF_RELEASE, NULL);
    m.lease = r.lease;
    raw_send(fd, &m, -1);
    /* A malformed CALL (bypassing the encoder): an invalid route name. Closed, and said. */
    m = sf(TFP_SF_CALL, "echo");
    m.lease = 1;
    m.a = 1;
    uint8_t buf[TFP_SF_MAX];
    size_t n = tfp_sf_encode(&m, buf, sizeof buf, &err);
    ck_assert_uint_gt(n, 0);
    memcpy(buf + TFP_SF_FIXED, "../x", 4);
    ck_assert_int_eq(tfx_shm_send(fd, buf, n, NULL, 0, &err), TFP_OK);
    ck_assert_int_eq(recv(fd, &b, 1, 0), 0);
    close(fd);
    for (int i = 0; i < 100 && !log_has("CALL of an invalid route name; connection closed"); i++)
        sleep_ms(20);
    ck_assert(log_has("shm: CALL of an invalid route name; connection closed"));
    tf_free(enc);
    /* libtfetch: a large exchange over shm, a small one over UCX; the daemon lives. */
    tf_client_t *c = client(TF_TRANSPORT_AUTO);
    char call_url[512];
    snprintf(call_url, sizeof call_url, "%s/v1/call/echo", D.base);
    size_t big = 256 << 10;
    uint8_t *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (uint8_t)(i * 13);
    int64_t shape[1] = {(int64_t)big};
    tf_doc_t *in = tf_doc_new(), *out = NULL;
    ck_assert_int_eq(tf_doc_add(in, "x", TF_U8, 1, shape, data, big, TF_BORROW), TF_OK);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(tf_fetch(c, call_url, in, &out) == TF_OK, "%s",
                      tf_client_last(c)->error);
        ck_assert_msg(i == 0 || strcmp(tf_client_last(c)->transport, "shm/memfd") == 0,
                      "%s (%s)", tf_client_last(c)->transport, tf_client_last(c)->fallback);
        /* ... and says where its time went, as every transport does */
        const tf_stages_t *sg = &tf_client_last(c)->stages;
        ck_assert_msg(sg->send >= 0 && sg->server >= 0 && sg->receive >= 0 && sg->decode >= 0,
                      "stages send %g server %g receive %g decode %g", sg->send, sg->server,
                      sg->receive, sg->decode);
        ck_assert(sg->send + sg->server + sg->receive + sg->decode <= sg->total + 0.01);
        ck_assert_uint_eq(tf_doc_count(out), 1);
        ck_assert_uint_eq(tf_doc_at(out, 0)->nbytes, big);
        ck_assert_int_eq(memcmp(tf_doc_at(out, 0)->data, data, big), 0);
        tf_doc_free(out);
        out = NULL;
    }
    /* The async API takes the same path: four in flight, each over shm/memfd. */
    tf_fetch_t *fs[4];
    tf_request_t rq = {.size = sizeof(tf_request_t), .op = TF_OP_EXCHANGE, .url = call_url,
                       .in = in};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(tf_fetch_start(c, &rq, NULL, NULL, &fs[i]), TF_OK);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(tf_fetch_wait(fs[i], 10000), TF_OK);
        const tf_result_t *fr = tf_fetch_result(fs[i]);
        ck_assert_int_eq(fr->status, TF_OK);
        ck_assert_str_eq(fr->transport, "shm/memfd");
        out = tf_fetch_take_doc(fs[i]);
        ck_assert_int_eq(memcmp(tf_doc_at(out, 0)->data, data, big), 0);
        tf_doc_free(out);
        out = NULL;
        tf_fetch_free(fs[i]);
    }
    snprintf(call_url, sizeof call_url, "%s/v1/call/nosuch", D.base);
    ck_assert_int_eq(tf_fetch(c, call_url, in, &out), TF_ENOTFOUND);
    ck_assert_str_eq(tf_client_last(c)->transport, "shm/memfd");
    ck_assert_int_eq(tf_client_last(c)->http_status, 404);
    tf_doc_free(in);
    snprintf(call_url, sizeof call_url, "%s/v1/call/echo", D.base);
    shape[0] = 8;
    in = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(in, "x", TF_U8, 1, shape, data, 8, TF_BORROW), TF_OK);
    ck_assert_int_eq(tf_fetch(c, call_url, in, &out), TF_OK);
    ck_assert_str_ne(tf_client_last(c)->transport, "shm/memfd");
    tf_doc_free(out);
    tf_doc_free(in);
    free(data);
    tf_client_free(c);
    ck_assert(metric_becomes("tfetch_shm_calls_total", 8));
    ck_assert(metric_becomes("tfetch_shm_leases", 0));
    ck_assert(metric_becomes("tfetch_shm_leased_bytes", 0));
    ck_assert(metric_becomes("tfetch_store_reserved_bytes", 0));
    stop();
}
END_TEST

/* Rewrites the daemon's token file with text and asks it to reload (SIGHUP). */
static void new_tokens(const char *file, const char *text)
{
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    kill(D.pid, SIGHUP);
}

/* HELLO on a new connection with a token from an upgrade as `bearer`: the connected fd. */
static int raw_hello(void)
{
    char sock[TFP_UP_MAX_SHM_SOCKET + 1], token[TFP_UP_TOKEN_LEN + 1];
    raw_upgrade(sock, token);
    tfp_err_t err;
    int fd = tfx_shm_connect(sock, &err), got;
    ck_assert_int_ge(fd, 0);
    tfp_sf_t m = sf(TFP_SF_HELLO, token);
    raw_send(fd, &m, -1);
    tfp_sf_t r = raw_reply(fd, &got);
    ck_assert_int_eq(r.status, TFP_OK);
    return fd;
}

/* One request on fd; its reply's status (a descriptor that came is closed; lease in *lease). */
static tfp_status_t raw_call(int fd, tfp_sf_op_t op, const char *name, uint64_t a,
                             uint64_t lease_in, uint64_t *lease, char *msg, size_t msg_size)
{
    tfp_sf_t m = sf(op, name), r;
    m.a = a;
    m.lease = lease_in;
    int got;
    raw_send(fd, &m, -1);
    r = raw_reply(fd, &got);
    if (got >= 0)
        close(got);
    if (lease)
        *lease = r.lease;
    if (msg)
        snprintf(msg, msg_size, "%.512s", r.str);
    return (tfp_status_t)r.status;
}

/* With authentication on, shm is offered and its connection acts as the principal of the
 * upgrade that issued its token: a GET needs read on the name, ALLOC write on some name,
 * COMMIT write on the name; a refused COMMIT gives its reservation back; a token revoked by
 * SIGHUP fails the connection's next request (401). libtfetch with a token gets and puts
 * over shm/memfd, and is refused outside its rights. */
START_TEST(shm_auth_rights)
{
    if (!ready("shm_auth_rights"))
        return;
    const char *tokens = "tka-1f2e alice read:alice.* write:alice.* admin:*\n"
                         "tkb-9a8b bob read:bob.* write:bob.*\n"
                         "tkr-5c5c reader read:alice.*\n";
    const char *file = td_tmpfile(3, tokens, strlen(tokens));
    const char *args[] = {"--auth-tokens", file, NULL};
    start(args);
    /* bob's tensor, over HTTP */
    tf_client_t *b = client(TF_TRANSPORT_HTTP);
    ck_assert_int_eq(tf_client_set_token(b, "tkb-9a8b"), TF_OK);
    put_u8(b, "bob.t", 100, 3);
    /* alice through libtfetch: shm for her own names, 403 for bob's */
    tf_client_t *a = client(TF_TRANSPORT_AUTO);
    ck_assert_int_eq(tf_client_set_token(a, "tka-1f2e"), TF_OK);
    ck_assert_int_eq(tf_client_upgrade(a, D.base), TF_OK);
    put_u8(a, "alice.t", (size_t)1 << 20, 4);
    ck_assert_str_eq(tf_client_last(a)->transport, "shm/memfd");
    tf_doc_t *d = NULL;
    ck_assert_int_eq(tf_get(a, url("alice.t"), 0, &d), TF_OK);
    ck_assert_str_eq(tf_client_last(a)->transport, "shm/memfd");
    ck_assert(all(tf_doc_find(d, "t")->data, (size_t)1 << 20, 4));
    tf_doc_free(d);
    d = NULL;
    ck_assert_int_eq(tf_get(a, url("bob.t"), 0, &d), TF_EFORBIDDEN);
    ck_assert_int_eq(tf_client_last(a)->http_status, 403);
    tf_client_free(a);

    /* the shm protocol itself, as alice */
    bearer = "tka-1f2e";
    int fd = raw_hello();
    char msg[600];
    uint64_t lease = 0;
    ck_assert_int_eq(raw_call(fd, TFP_SF_GET, "alice.t", 0, 0, &lease, msg, sizeof msg), TFP_OK);
    tfp_sf_t rel = sf(TFP_SF_RELEASE, NULL);
    rel.lease = lease;
    raw_send(fd, &rel, -1);             /* no reply */
    ck_assert_int_eq(raw_call(fd, TFP_SF_GET, "bob.t", 0, 0, NULL, msg, sizeof msg),
                     TFP_EFORBIDDEN);
    ck_assert_msg(strstr(msg, "principal alice has no read right on 'bob.t'"), "%s", msg);
    /* a buffer lent to alice committed under bob's name: refused, reservation back */
    ck_assert_int_eq(raw_call(fd, TFP_SF_ALLOC, NULL, 4096, 0, &lease, msg, sizeof msg), TFP_OK);
    ck_assert_int_eq(metric("tfetch_store_reserved_bytes"), 4096);
    ck_assert_int_eq(raw_call(fd, TFP_SF_COMMIT, "bob.z", 100, lease, NULL, msg, sizeof msg),
                     TFP_EFORBIDDEN);
    ck_assert_msg(strstr(msg, "no write right on 'bob.z'"), "%s", msg);
    ck_assert(metric_becomes("tfetch_store_reserved_bytes", 0));
    int fd_alice = fd;
    /* reader (read only): GET yes, ALLOC no */
    bearer = "tkr-5c5c";
    fd = raw_hello();
    ck_assert_int_eq(raw_call(fd, TFP_SF_GET, "alice.t", 0, 0, NULL, NULL, 0), TFP_OK);
    ck_assert_int_eq(raw_call(fd, TFP_SF_ALLOC, NULL, 4096, 0, NULL, msg, sizeof msg),
                     TFP_EFORBIDDEN);
    ck_assert_msg(strstr(msg, "principal reader has no write right"), "%s", msg);
    close(fd);
    /* alice revoked (SIGHUP): her connection's next request is 401 */
    new_tokens(file, "tkb-9a8b bob read:bob.* write:bob.* admin:*\n");
    tfp_status_t st = TFP_OK;
    for (int i = 0; i < 200; i++) {
        st = raw_call(fd_alice, TFP_SF_GET, "alice.t", 0, 0, NULL, msg, sizeof msg);
        if (st != TFP_OK)
            break;
        sleep_ms(20);
    }
    ck_assert_int_eq(st, TFP_EUNAUTH);
    close(fd_alice);
    bearer = "tkb-9a8b";
    ck_assert(metric_becomes("tfetch_shm_leases", 0));
    bearer = NULL;
    tf_client_free(b);
    stop();
}
END_TEST

/* ---- a feed's ring, spoken by a hostile client ---------------------------------------------- */

/* The next ITEM on a ring's connection (a descriptor that came is closed). */
static tfp_sf_t raw_item(int fd)
{
    int got;
    tfp_sf_t r = raw_reply(fd, &got);
    ck_assert_int_eq(r.op, TFP_SF_ITEM);
    if (got >= 0)
        close(got);
    return r;
}

/* 1 once the daemon closed fd (within 5 s). */
static int closed_by_daemon(int fd)
{
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char b[TFP_SF_MAX];
    for (;;) {
        ssize_t n = recv(fd, b, sizeof b, 0);
        /* A daemon that closed with something of ours unread shows as ECONNRESET (once)
         * rather than end of file: closed all the same. A timeout is not. */
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return 1;
        if (n < 0)
            return 0;
    }
}

/* A ring's connection as alice, from a TOKEN on fd: its memfd in *mem (size *size). */
static uint64_t ring_slots;            /* what the last RING's answer gave */

static int raw_ring(int fd, const char *spec, uint64_t slots, tfp_status_t want, int *mem,
                    char *msg, size_t msg_size)
{
    tfp_sf_t m = sf(TFP_SF_TOKEN, NULL), r;
    int got;
    raw_send(fd, &m, -1);
    r = raw_reply(fd, &got);
    ck_assert_int_eq(r.status, TFP_OK);
    char token[TFP_UP_TOKEN_LEN + 1];
    ck_assert_uint_eq(r.str_len, TFP_UP_TOKEN_LEN);
    memcpy(token, r.str, sizeof token);
    char sock[TFP_UP_MAX_SHM_SOCKET + 1], unused[TFP_UP_TOKEN_LEN + 1];
    raw_upgrade(sock, unused);
    tfp_err_t err;
    int rf = tfx_shm_connect(sock, &err);
    ck_assert_int_ge(rf, 0);
    m = sf(TFP_SF_HELLO, token);
    raw_send(rf, &m, -1);
    r = raw_reply(rf, &got);
    ck_assert_int_eq(r.status, TFP_OK);
    m = sf(TFP_SF_RING, spec);
    m.a = slots;
    raw_send(rf, &m, -1);
    r = raw_reply(rf, &got);
    if (msg)
        snprintf(msg, msg_size, "%.512s", r.str);
    ck_assert_msg(r.status == (int32_t)want, "RING %s: %d %s", spec, (int)r.status, r.str);
    ring_slots = r.a;
    if (mem)
        *mem = got;
    else if (got >= 0)
        close(got);
    return rf;
}

/* The ring's protocol from a client that does not play by it: a ring needs consume on the
 * feed; its memfd cannot be resized under the daemon; credit that shrinks, a FREE of a slot
 * it does not hold, or any other request on a ring's connection closes it, and the items it
 * held go to the next consumer at once; TOKENs are bounded per connection; a token revoked
 * by SIGHUP ends an open ring. */
START_TEST(shm_ring_hostile)
{
    if (!ready("shm_ring_hostile"))
        return;
    const char *tokens = "tka-1f2e alice produce:* consume:f* admin:*\n"
                         "tkr-5c5c reader read:* produce:*\n";
    const char *file = td_tmpfile(3, tokens, strlen(tokens));
    /* Lease memory for rings of a few 20 KiB slots: too little (half of it) for slots for
     * the queue's items as well, so a ring has what its consumer asked, and no more. */
    const char *args[] = {"--auth-tokens", file, "--shm-lease-memory", "96K", NULL};
    start(args);
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "curl -sf -X PUT -H 'Authorization: Bearer tka-1f2e' --data "
             "'{\"signature\":[{\"name\":\"x\",\"dtype\":\"U8\",\"shape\":[4]}],"
             "\"lease_ms\":60000}' %s/v1/feeds/f", D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "printf 'ab%dd' | curl -sf -H 'Authorization: Bearer tka-1f2e' "
                 "-H 'Content-Type: application/octet-stream' -H 'Tfetch-Dtype: U8' "
                 "-H 'Tfetch-Shape: 4' --data-binary @- %s/v1/feeds/f/devices/0/infeed", i,
                 D.base);
        ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    }
    /* reader has no consume right: refused, as a pop over HTTP is */
    bearer = "tkr-5c5c";
    int fd = raw_hello();
    char msg[600];
    int rf = raw_ring(fd, "f/0/r", 2, TFP_EFORBIDDEN, NULL, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "principal reader has no consume right on 'f'"), "%s", msg);
    close(rf);
    close(fd);
    /* alice: no such feed, no such device */
    bearer = "tka-1f2e";
    fd = raw_hello();
    close(raw_ring(fd, "g/0/a", 2, TFP_EFORBIDDEN, NULL, NULL, 0));
    close(raw_ring(fd, "f2/0/a", 2, TFP_ENOTFOUND, NULL, NULL, 0));
    close(raw_ring(fd, "f/7/a", 2, TFP_ENOTFOUND, NULL, NULL, 0));
    /* her ring: the memfd is sealed in size; two items come as credit allows */
    int mem = -1;
    rf = raw_ring(fd, "f/0/a", 2, TFP_OK, &mem, NULL, 0);
    ck_assert_int_ge(mem, 0);
    ck_assert_uint_eq(ring_slots, 2);
    ck_assert_int_ne(ftruncate(mem, 0), 0);
    /* ... and written by the daemon alone: no writable mapping, no write(2), not even
     * through the descriptor reopened read-write */
    ck_assert(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0) == MAP_FAILED);
    ck_assert_int_lt(pwrite(mem, "x", 1, 0), 0);
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", mem);
    int rw = open(proc, O_RDWR);
    if (rw >= 0) {
        ck_assert_int_lt(pwrite(rw, "x", 1, 0), 0);
        ck_assert(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0) == MAP_FAILED);
        close(rw);
    }
    void *ro = mmap(NULL, 4096, PROT_READ, MAP_SHARED, mem, 0);
    ck_assert(ro != MAP_FAILED);
    ck_assert_int_ne(mprotect(ro, 4096, PROT_READ | PROT_WRITE), 0);
    munmap(ro, 4096);
    close(mem);
    ck_assert_int_eq(metric("tfetch_shm_rings"), 1);
    tfp_sf_t m = sf(TFP_SF_CREDIT, NULL);
    m.seq = 0;
    m.a = 2;
    raw_send(rf, &m, -1);
    tfp_sf_t it = raw_item(rf);
    ck_assert_uint_eq(it.lease, 1);
    it = raw_item(rf);
    ck_assert_uint_eq(it.lease, 2);
    /* a FREE of a slot it does not hold (slot 2 holds item 2; there is no slot 5) */
    m = sf(TFP_SF_FREE, NULL);
    m.seq = 0;
    m.a = 5;
    raw_send(rf, &m, -1);
    ck_assert(closed_by_daemon(rf));
    close(rf);
    ck_assert(metric_becomes("tfetch_shm_rings", 0));
    /* the next consumer gets items 1 and 2 again at once (the lease was a minute) */
    rf = raw_ring(fd, "f/0/b", 2, TFP_OK, NULL, NULL, 0);
    m = sf(TFP_SF_CREDIT, NULL);
    m.seq = 0;
    m.a = 3;
    raw_send(rf, &m, -1);
    ck_assert_uint_eq(raw_item(rf).lease, 1);
    ck_assert_uint_eq(raw_item(rf).lease, 2);
    ck_assert_uint_eq(raw_item(rf).lease, 3);           /* no slot left: a memfd of its own */
    ck_assert_int_eq(metric("tfetch_shm_ring_overflow_total"), 1);
    m.a = 2;                                            /* credit that shrinks */
    raw_send(rf, &m, -1);
    ck_assert(closed_by_daemon(rf));
    close(rf);
    /* a request other than the ring's on its connection */
    rf = raw_ring(fd, "f/0/c", 1, TFP_OK, NULL, NULL, 0);
    ck_assert_uint_eq(ring_slots, 2);       /* one for the queue: half the memory allows 2 */
    m = sf(TFP_SF_GET, "w");
    raw_send(rf, &m, -1);
    ck_assert(closed_by_daemon(rf));
    close(rf);
    /* RING after another request on a connection: refused */
    ck_assert_int_eq(raw_call(fd, TFP_SF_RING, "f/0/d", 1, 0, NULL, msg, sizeof msg),
                     TFP_EBADREQ);
    /* TOKENs: 16 unused at once per connection, then refused */
    int fd2 = raw_hello();
    tfp_status_t st = TFP_OK;
    int n = 0;
    for (; n < 40 && st == TFP_OK; n++)
        st = raw_call(fd2, TFP_SF_TOKEN, NULL, 0, 0, NULL, msg, sizeof msg);
    ck_assert_int_eq(st, TFP_EBUSY);
    ck_assert_int_eq(n, 17);
    close(fd2);
    close(fd);
    /* alice's token revoked by SIGHUP while her ring is open: its next wake ends it (EUNAUTH),
     * before any item is sent */
    fd = raw_hello();
    rf = raw_ring(fd, "f/0/e", 2, TFP_OK, NULL, NULL, 0);
    new_tokens(file, "tkr-5c5c reader read:* produce:* admin:*\n");
    bearer = "tkr-5c5c";
    tfp_sf_t info = {0};
    for (int i = 0; i < 200; i++) {     /* the reload is the main thread's: until it lands */
        char cmd2[512], out2[4096];
        snprintf(cmd2, sizeof cmd2, "curl -s -o /dev/null -w '%%{http_code}' "
                 "-H 'Authorization: Bearer tka-1f2e' %s/v1/info", D.base);
        if (td_run(cmd2, out2, sizeof out2) == 0 && strcmp(out2, "401") == 0)
            break;
        sleep_ms(20);
    }
    m = sf(TFP_SF_CREDIT, NULL);
    m.seq = 0;
    m.a = 1;
    /* Any wake of the ring checks the token (its lease renewal too), so on a loaded machine
     * the daemon may have ended it already and this send fail: the EUNAUTH it sent first is
     * read either way. */
    uint8_t cb[TFP_SF_MAX];
    tfp_err_t cerr;
    size_t cn = tfp_sf_encode(&m, cb, sizeof cb, &cerr);
    ck_assert_uint_gt(cn, 0);
    (void)tfx_shm_send(rf, cb, cn, NULL, 0, &cerr);
    /* And if it closed with our CREDIT unread, our socket reports ECONNRESET once, before
     * the messages still queued for us: read again. */
    uint8_t ib[TFP_SF_MAX];
    size_t ilen = 0, infds = 0;
    int ifds[1] = {-1};
    tfp_status_t ist = TFP_EIO;
    for (int i = 0; i < 3 && ist != TFP_OK; i++)
        ist = tfx_shm_recv(rf, ib, sizeof ib, &ilen, ifds, 1, &infds, &cerr);
    ck_assert_msg(ist == TFP_OK, "%s", cerr.msg);
    ck_assert_int_eq(tfp_sf_decode(ib, ilen, &info, &cerr), TFP_OK);
    ck_assert_int_eq(info.op, TFP_SF_ITEM);
    ck_assert_int_eq(info.status, TFP_EUNAUTH);
    ck_assert_uint_eq(info.lease, 0);
    ck_assert(closed_by_daemon(rf));
    close(rf);
    close(fd);
    ck_assert(metric_becomes("tfetch_shm_rings", 0));
    ck_assert(metric_becomes("tfetch_shm_ring_bytes", 0));
    bearer = NULL;
    stop();
}
END_TEST

Suite *suite_shme2e(void)
{
    Suite *s = suite_create("shme2e");
    TCase *tc = tcase_create("shme2e");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, shm_get_maps_copy_on_write);
    tcase_add_test(tc, shm_replace_delete_while_mapped);
    tcase_add_test(tc, shm_get_moves_a_put_document);
    tcase_add_test(tc, shm_client_killed_frees_leases);
    tcase_add_test(tc, shm_lease_bound_and_expiry);
    tcase_add_test(tc, shm_policies);
    tcase_add_test(tc, shm_put_both_ways);
    tcase_add_test(tc, shm_put_ready_memory);
    tcase_add_test(tc, shm_put_malformed_refused);
    tcase_add_test(tc, shm_hostile_client);
    tcase_add_test(tc, shm_call);
    tcase_add_test(tc, shm_auth_rights);
    tcase_add_test(tc, shm_ring_hostile);
    suite_add_tcase(s, tc);
    return s;
}
