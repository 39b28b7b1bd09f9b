/* check_cond.c - the cond suite: versions, conditions, lifetimes, ranges and listing pages
 * from libtfetch (tf_request_t's if_match / if_none_match / ttl_s, tf_result_t etag,
 * tf_request, tf_get_range, tf_list_page) against the real tfetchd.
 *
 * One table of cases, run once per row of `rows`: each row is a client transport policy
 * (http; ucx, strict; auto, which on one host reaches shm/memfd), and says what must carry
 * a plain put and what must carry a request with conditions. Every case is the same on
 * every row: a create-only put, a refused one (412 -> TF_EPRECOND, nothing changed), a
 * compare-and-swap and a stale one, a GET that finds its version unchanged
 * (TF_ENOTMODIFIED), one that waits for a newer version (?wait=), a conditional delete, a
 * TTL that expires, a byte range, and a listing read page by page. Needs $TFETCHD; the UCX
 * rows need a build with UCX.
 */
#include "config.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "client/tfetch.h"
#include "tests/fixtures.h"
#include "tests/suites.h"
#include "transports/clock.h"

static td_daemon_t D;

/* A transport row: the policy, and what carries a plain put and a conditional request
 * ("ucx/" and the like: a prefix). */
typedef struct {
    const char *name;
    tf_transport_t policy;
    int needs_ucx;
    const char *plain;                  /* what carries a put without conditions */
    const char *cond;                   /* what carries a request with conditions */
    const char *cond_put;               /* what carries a PUT with conditions or a TTL */
    int plain_etag;                     /* a plain put's reply names its version */
} row_t;

static const row_t rows[] = {
    {"http", TF_TRANSPORT_HTTP, 0, "http", "http", "http", 1},
    {"ucx", TF_TRANSPORT_UCX, 1, "ucx/", "ucx/", "ucx/", 1},
    /* On one host: gets and puts over shm/memfd, a PUT's conditions and TTL in its COMMIT;
     * a GET's conditions (304, a range: no mapped document) go over UCX. */
    {"auto", TF_TRANSPORT_AUTO, 1, "shm/memfd", "ucx/", "shm/memfd", 1},
};
#define NROWS (int)(sizeof(rows) / sizeof(rows[0]))

static int skip(const row_t *r)
{
    if (!getenv("TFETCHD")) {
        fprintf(stderr, "cond/%s: TFETCHD not set, skipped\n", r->name);
        return 1;
    }
#ifndef HAVE_UCX
    if (r->needs_ucx) {
        fprintf(stderr, "cond/%s: built without UCX, skipped\n", r->name);
        return 1;
    }
#endif
    return 0;
}

static void start(void)
{
    ck_assert_msg(td_start(&D, NULL) == 0, "tfetchd did not start");
}

static void stop(void)
{
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}

static tf_client_t *client(const row_t *r)
{
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_transport(c, r->policy), TF_OK);
    return c;
}

static const char *url(const char *name)
{
    return td_url(&D, "/v1/tensors/%s", name);
}

/* A one-tensor document holding four copies of v (copied). */
static tf_doc_t *doc_of(float v)
{
    float x[4] = {v, v, v, v};
    int64_t shape[1] = {4};
    tf_doc_t *d = tf_doc_new();
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(tf_doc_add(d, "x", TF_F32, 1, shape, x, sizeof x, TF_COPY), TF_OK);
    return d;
}

/* The value a stored document holds (its first element), fetched plainly. */
static float stored(tf_client_t *c, const char *name)
{
    tf_doc_t *d = NULL;
    ck_assert_int_eq(tf_get(c, url(name), 0, &d), TF_OK);
    float v = ((const float *)tf_doc_at(d, 0)->data)[0];
    tf_doc_free(d);
    return v;
}

static int starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* A put of value v under conditions; returns its status, *etag (64 bytes) the version the
 * server named. */
static tf_status_t put(tf_client_t *c, const row_t *r, const char *name, float v,
                       const char *if_match, const char *if_none_match, uint64_t ttl_s,
                       char *etag)
{
    tf_doc_t *d = doc_of(v);
    tf_request_t rq = TF_REQUEST_INIT;
    rq.op = TF_OP_PUT;
    rq.url = url(name);
    rq.in = d;
    rq.if_match = if_match;
    rq.if_none_match = if_none_match;
    rq.ttl_s = ttl_s;
    tf_status_t st = tf_request(c, &rq, NULL);
    const tf_result_t *res = tf_client_last(c);
    if (if_match || if_none_match || ttl_s)
        ck_assert_msg(starts(res->transport, r->cond_put), "%s: a conditional put went over %s",
                      r->name, res->transport);
    else
        ck_assert_msg(starts(res->transport, r->plain), "%s: a plain put went over %s",
                      r->name, res->transport);
    if (etag)
        snprintf(etag, 64, "%s", res->etag);
    tf_doc_free(d);
    return st;
}

/* Create-only, compare-and-swap, and what a refusal leaves. */
START_TEST(cond_put_conditions)
{
    const row_t *r = &rows[_i];
    if (skip(r))
        return;
    start();
    tf_client_t *c = client(r);
    char e1[64], e2[64], e3[64], e[64];

    ck_assert_int_eq(put(c, r, "w", 1.0f, NULL, "*", 0, e1), TF_OK);    /* create-only */
    ck_assert_int_eq(tf_client_last(c)->http_status, 201);
    ck_assert_msg(e1[0] == '"', "no ETag on a created document: '%s'", e1);
    ck_assert_int_eq(put(c, r, "w", 2.0f, NULL, "*", 0, e), TF_EPRECOND);  /* it exists */
    ck_assert_int_eq(tf_client_last(c)->http_status, 412);
    ck_assert(stored(c, "w") == 1.0f);                                   /* unchanged */

    ck_assert_int_eq(put(c, r, "w", 3.0f, e1, NULL, 0, e2), TF_OK);      /* swap e1 -> e2 */
    ck_assert_str_ne(e1, e2);
    ck_assert(stored(c, "w") == 3.0f);
    ck_assert_int_eq(put(c, r, "w", 4.0f, e1, NULL, 0, e), TF_EPRECOND);  /* e1 is stale */
    ck_assert(stored(c, "w") == 3.0f);
    ck_assert_int_eq(put(c, r, "w", 5.0f, "*", NULL, 0, e3), TF_OK);     /* exists: done */
    ck_assert_int_eq(put(c, r, "nobody", 5.0f, "*", NULL, 0, e), TF_EPRECOND);

    /* A conditional delete: a stale version is refused, the current one deletes. */
    tf_request_t rq = TF_REQUEST_INIT;
    rq.op = TF_OP_DELETE;
    rq.url = url("w");
    rq.if_match = e2;
    ck_assert_int_eq(tf_request(c, &rq, NULL), TF_EPRECOND);
    rq.if_match = e3;
    ck_assert_int_eq(tf_request(c, &rq, NULL), TF_OK);
    tf_doc_t *d = NULL;
    ck_assert_int_eq(tf_get(c, url("w"), 0, &d), TF_ENOTFOUND);

    tf_client_free(c);
    stop();
}
END_TEST

/* A GET whose version is unchanged, one that waits for a newer one, and If-Match on a GET. */
START_TEST(cond_get_versions)
{
    const row_t *r = &rows[_i];
    if (skip(r))
        return;
    start();
    tf_client_t *c = client(r), *w = client(r);
    char e1[64], e2[64];
    ck_assert_int_eq(put(c, r, "g", 1.0f, NULL, "*", 0, e1), TF_OK);

    tf_request_t rq = TF_REQUEST_INIT;
    rq.op = TF_OP_GET;
    rq.url = url("g");
    rq.if_none_match = e1;
    tf_doc_t *d = NULL;
    ck_assert_int_eq(tf_request(c, &rq, &d), TF_ENOTMODIFIED);
    ck_assert_ptr_null(d);
    ck_assert_int_eq(tf_client_last(c)->http_status, 304);
    ck_assert_str_eq(tf_client_last(c)->etag, e1);
    ck_assert_msg(starts(tf_client_last(c)->transport, r->cond), "%s: over %s", r->name,
                  tf_client_last(c)->transport);

    /* Waiting for a newer version: none comes, so the wait runs out (not modified). */
    rq.wait_ms = 300;
    uint64_t t0 = tfx_now_ms();
    ck_assert_int_eq(tf_request(c, &rq, &d), TF_ENOTMODIFIED);
    ck_assert_uint_ge(tfx_now_ms() - t0, 250);

    /* One comes while the GET waits: the GET returns it, with its version. */
    rq.wait_ms = 20000;
    tf_fetch_t *f = NULL;
    ck_assert_int_eq(tf_fetch_start(c, &rq, NULL, NULL, &f), TF_OK);
    ck_assert_int_eq(tf_fetch_wait(f, 200), TF_EAGAIN);                  /* it waits */
    ck_assert_int_eq(put(w, r, "g", 2.0f, e1, NULL, 0, e2), TF_OK);
    t0 = tfx_now_ms();
    ck_assert_int_eq(tf_fetch_wait(f, 15000), TF_OK);
    ck_assert_uint_lt(tfx_now_ms() - t0, 10000);
    d = tf_fetch_take_doc(f);
    ck_assert_ptr_nonnull(d);
    ck_assert(((const float *)tf_doc_at(d, 0)->data)[0] == 2.0f);
    ck_assert_str_eq(tf_fetch_result(f)->etag, e2);
    tf_doc_free(d);
    tf_fetch_free(f);

    /* If-Match on a GET: only that version. */
    tf_request_t g = TF_REQUEST_INIT;
    g.op = TF_OP_GET;
    g.url = url("g");
    g.if_match = e1;
    ck_assert_int_eq(tf_request(c, &g, &d), TF_EPRECOND);
    g.if_match = e2;
    ck_assert_int_eq(tf_request(c, &g, &d), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->etag, e2);
    tf_doc_free(d);

    tf_client_free(w);
    tf_client_free(c);
    stop();
}
END_TEST

/* A document put with a TTL is there, then gone as if deleted. */
START_TEST(cond_ttl)
{
    const row_t *r = &rows[_i];
    if (skip(r))
        return;
    start();
    tf_client_t *c = client(r);
    char e[64];
    ck_assert_int_eq(put(c, r, "keep", 1.0f, NULL, NULL, 0, e), TF_OK);
    ck_assert_msg((e[0] != '\0') == r->plain_etag, "%s: a plain put's etag '%s'", r->name, e);
    /* t0 before the put: the second counts from when the daemon stored it, which is after
     * (taken after the put and a GET, a slow machine's 500 ms between made a lived second
     * look short). */
    uint64_t t0 = tfx_now_ms();
    ck_assert_int_eq(put(c, r, "brief", 1.0f, NULL, NULL, 1, NULL), TF_OK);
    ck_assert(stored(c, "brief") == 1.0f);
    tf_doc_t *d = NULL;
    tf_status_t st = TF_OK;
    while (tfx_now_ms() - t0 < 10000 && (st = tf_get(c, url("brief"), 0, &d)) == TF_OK) {
        tf_doc_free(d);
        d = NULL;
        usleep(100 * 1000);             /* polled until gone, within a deadline */
    }
    ck_assert_int_eq(st, TF_ENOTFOUND);
    ck_assert_uint_ge(tfx_now_ms() - t0, 900);  /* not at once: it lived its second */
    ck_assert(stored(c, "keep") == 1.0f);       /* one without a TTL stays */
    tf_client_free(c);
    stop();
}
END_TEST

/* Bytes of the stored document: a range from the start, one past the end, and the whole. */
START_TEST(cond_range)
{
    const row_t *r = &rows[_i];
    if (skip(r))
        return;
    start();
    tf_client_t *c = client(r);
    ck_assert_int_eq(put(c, r, "rg", 7.0f, NULL, NULL, 0, NULL), TF_OK);
    tf_doc_t *d = doc_of(7.0f);
    void *enc = NULL;
    size_t enc_len = 0;
    ck_assert_int_eq(tf_doc_encode(d, &enc, &enc_len), TF_OK);

    void *buf = NULL;
    size_t len = 0;
    uint64_t total = 0;
    ck_assert_int_eq(tf_get_range(c, url("rg"), 0, 8, &buf, &len, &total), TF_OK);
    ck_assert_uint_eq(len, 8);
    ck_assert_uint_eq(total, enc_len);
    ck_assert(memcmp(buf, enc, 8) == 0);        /* the safetensors header's length */
    ck_assert_int_eq(tf_client_last(c)->http_status, 206);
    ck_assert_msg(starts(tf_client_last(c)->transport, r->cond), "%s: a range over %s",
                  r->name, tf_client_last(c)->transport);
    tf_free(buf);

    ck_assert_int_eq(tf_get_range(c, url("rg"), enc_len - 16, 0, &buf, &len, NULL), TF_OK);
    ck_assert_uint_eq(len, 16);                 /* to the end: the tensor's bytes */
    ck_assert(memcmp(buf, (const char *)enc + enc_len - 16, 16) == 0);
    tf_free(buf);

    total = 0;
    ck_assert_int_eq(tf_get_range(c, url("rg"), enc_len, 4, &buf, &len, &total), TF_ERANGE);
    ck_assert_uint_eq(total, enc_len);
    ck_assert_int_eq(tf_get_range(c, url("none"), 0, 4, &buf, &len, NULL), TF_ENOTFOUND);
    tf_free(enc);
    tf_doc_free(d);
    tf_client_free(c);
    stop();
}
END_TEST

/* A listing read a page at a time by prefix, each page's next leading to the following. */
START_TEST(cond_list_pages)
{
    const row_t *r = &rows[_i];
    if (skip(r))
        return;
    start();
    tf_client_t *c = client(r);
    const char *names[] = {"a0", "a1", "a2", "b0"};
    for (size_t i = 0; i < 4; i++)
        ck_assert_int_eq(put(c, r, names[i], 1.0f, NULL, NULL, 0, NULL), TF_OK);

    tf_list_opts_t o = TF_LIST_OPTS_INIT;
    o.prefix = "a";
    o.limit = 2;
    tf_entry_t *e = NULL;
    size_t n = 0;
    char *next = NULL;
    ck_assert_int_eq(tf_list_page(c, D.base, &o, &e, &n, &next), TF_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(e[0].name, "a0");
    ck_assert_str_eq(e[1].name, "a1");
    ck_assert_ptr_nonnull(next);
    ck_assert_str_eq(next, "a1");
    tf_list_free(e, n);

    o.after = next;
    char *next2 = (char *)"unset";
    ck_assert_int_eq(tf_list_page(c, D.base, &o, &e, &n, &next2), TF_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(e[0].name, "a2");
    ck_assert_ptr_null(next2);                  /* the last page */
    tf_list_free(e, n);
    tf_free(next);

    ck_assert_int_eq(tf_list_page(c, D.base, NULL, &e, &n, NULL), TF_OK);    /* all */
    ck_assert_uint_eq(n, 4);
    tf_list_free(e, n);
    tf_client_free(c);
    stop();
}
END_TEST

/* A driver (tf_driver_submit) copies the conditions with the request: the caller's strings
 * may be gone by the time its thread starts it. */
START_TEST(cond_driver)
{
    const row_t *r = &rows[_i];
    if (skip(r))
        return;
    start();
    tf_client_t *c = client(r);
    ck_assert_int_eq(put(c, r, "dr", 1.0f, NULL, NULL, 0, NULL), TF_OK);
    tf_client_t *dc = client(r);
    tf_driver_t *d = NULL;
    ck_assert_int_eq(tf_driver_new(dc, NULL, NULL, &d), TF_OK);
    tf_doc_t *doc = doc_of(2.0f);
    for (int i = 0; i < 8; i++) {
        char *cond = strdup("*");               /* create-only: "dr" exists, so refused */
        tf_request_t rq = TF_REQUEST_INIT;
        rq.op = TF_OP_PUT;
        rq.url = url("dr");
        rq.in = doc;
        rq.if_none_match = cond;
        ck_assert_int_eq(tf_driver_submit(d, &rq, (uint64_t)i, 0), TF_OK);
        free(cond);
        char *other = strdup("\"q\"");          /* most likely where cond was */
        tf_completion_t done = TF_COMPLETION_INIT;
        ck_assert_int_eq(tf_driver_wait(d, 20000), TF_OK);
        ck_assert_int_eq(tf_driver_reap(d, &done), TF_OK);
        ck_assert_msg(done.status == TF_EPRECOND, "%s: %s", r->name, done.result.error);
        ck_assert_int_eq(done.result.http_status, 412);
        free(other);
    }
    ck_assert(stored(c, "dr") == 1.0f);
    tf_driver_free(d);
    tf_doc_free(doc);
    tf_client_free(c);
    stop();
}
END_TEST

/* ---- the tfetch command ------------------------------------------------------------------- */

static const char *cli(void)
{
    const char *p = getenv("TFETCH_CLI");
    return p ? p : "./cli/tfetch";
}

/* Runs `tfetch --transport POLICY ARGS` (stderr with stdout into out, when given); returns
 * its exit status. */
static int run_cli(const row_t *r, char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int run_cli(const row_t *r, char *out, size_t cap, const char *fmt, ...)
{
    char args[1024], cmd[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s --transport %s %s 2>&1", cli(), r->name, args);
    return td_run(cmd, out, cap);
}

/* The "etag" of a --stats line, unescaped (quotes kept) into etag (64 bytes). */
static void stats_etag(const char *out, char *etag)
{
    const char *p = strstr(out, "\"etag\":\"");
    ck_assert_msg(p != NULL, "no etag in: %s", out);
    p += 8;
    size_t n = 0;
    for (; *p && !(p[0] == '"' && p[-1] != '\\') && n < 63; p++)
        if (*p != '\\')
            etag[n++] = *p;
    etag[n] = '\0';
}

/* The CLI's flags: exit codes 3 (a refused condition) and 7 (nothing newer), nothing written
 * on failure, --range's bytes, a TTL, ls pages. */
START_TEST(cond_cli)
{
    const row_t *r = &rows[_i];
    if (skip(r))
        return;
    start();
    static char out[8192];
    char e[64], path[300];
    tf_doc_t *d = doc_of(3.0f);
    void *enc = NULL;
    size_t enc_len = 0;
    ck_assert_int_eq(tf_doc_encode(d, &enc, &enc_len), TF_OK);
    const char *in = td_tmpfile(0, enc, enc_len);
    const char *u = url("c");
    snprintf(path, sizeof path, "%s.out", in);
    unlink(path);

    ck_assert_int_eq(run_cli(r, out, sizeof out, "-q put --if-none-match %s %s", u, in), 0);
    ck_assert_int_eq(run_cli(r, out, sizeof out, "-q put --if-none-match %s %s", u, in), 3);
    ck_assert_msg(strstr(out, "412") != NULL, "%s", out);
    ck_assert_int_eq(run_cli(r, out, sizeof out, "-s -q put --if-match '*' %s %s", u, in), 0);
    stats_etag(out, e);
    ck_assert_msg(e[0] == '"', "%s: no etag from put --stats: %s", r->name, out);
    ck_assert_int_eq(run_cli(r, out, sizeof out, "-q put --if-match '\"0-1\"' %s %s", u, in),
                     3);
    ck_assert_int_eq(run_cli(r, out, sizeof out, "-q put --if-match '%s' --ttl 3600 %s %s", e,
                             u, in), 0);

    /* Nothing newer than the current version: exit 7, no file written. */
    ck_assert_int_eq(run_cli(r, out, sizeof out, "-s -q get --if-match '*' %s /dev/null", u),
                     0);
    stats_etag(out, e);
    ck_assert_int_eq(run_cli(r, out, sizeof out, "-q get --wait-newer '%s' --wait 200 %s %s", e,
                             u, path), 7);
    ck_assert_int_ne(access(path, F_OK), 0);

    /* --range: the document's first 8 bytes, as they are stored. */
    ck_assert_int_eq(run_cli(r, out, sizeof out, "-q get --range 0-7 %s %s", u, path), 0);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char b[16];
    ck_assert_uint_eq(fread(b, 1, sizeof b, f), 8);
    fclose(f);
    ck_assert(memcmp(b, enc, 8) == 0);
    unlink(path);
    ck_assert_int_eq(run_cli(r, out, sizeof out, "-q get --range 9999- %s %s", u, path), 3);
    ck_assert_int_ne(access(path, F_OK), 0);

    /* ls pages */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(run_cli(r, out, sizeof out, "-q put %s %s", url(i ? i == 1 ? "q1" : "q2"
                                                                           : "q0"), in), 0);
    ck_assert_int_eq(run_cli(r, out, sizeof out, "ls --json --prefix q --limit 2 %s", D.base), 0);
    ck_assert_msg(strstr(out, "\"q1\"") && !strstr(out, "\"q2\"") &&
                  strstr(out, "\"next\":\"q1\""), "%s", out);
    ck_assert_int_eq(run_cli(r, out, sizeof out, "ls --json --prefix q --limit 2 --after q1 %s",
                             D.base), 0);
    ck_assert_msg(strstr(out, "\"q2\"") && !strstr(out, "\"q1\"") && !strstr(out, "next"),
                  "%s", out);

    /* A conditional rm, and a TTL that runs out. */
    ck_assert_int_eq(run_cli(r, out, sizeof out, "-q rm --if-match '\"0-1\"' %s", u), 3);
    ck_assert_int_eq(run_cli(r, out, sizeof out, "-q put --ttl 1 %s %s", url("brief"), in), 0);
    int rc = 0;
    uint64_t t0 = tfx_now_ms();
    while (tfx_now_ms() - t0 < 10000 &&
           (rc = run_cli(r, out, sizeof out, "-q get %s /dev/null", url("brief"))) == 0)
        usleep(100 * 1000);                     /* polled until gone, within a deadline */
    ck_assert_int_eq(rc, 2);
    tf_free(enc);
    tf_doc_free(d);
    stop();
}
END_TEST

/* ---- a lying server ------------------------------------------------------------------------- */

/* Serves one connection on 127.0.0.1 (port 0; its port returned) from a child process:
 * reads the request head, answers answer_len bytes of `answer` as they are, closes. */
static int lying_server(const char *answer, size_t answer_len, pid_t *pid)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    ck_assert_int_ge(ls, 0);
    ck_assert_int_eq(bind(ls, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(ls, 4), 0);
    ck_assert_int_eq(getsockname(ls, (struct sockaddr *)&a, &alen), 0);
    *pid = fork();
    ck_assert_int_ge(*pid, 0);
    if (*pid == 0) {
        int c = accept(ls, NULL, NULL);
        char req[8192];
        size_t n = 0;
        ssize_t k;
        while (n < sizeof req - 1 && (k = read(c, req + n, sizeof req - 1 - n)) > 0) {
            n += (size_t)k;
            req[n] = '\0';
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        if (write(c, answer, answer_len) < 0)
            _exit(1);
        close(c);
        _exit(0);
    }
    close(ls);
    return ntohs(a.sin_port);
}

/* A 206 that does not hold the bytes asked for, or a malformed ETag: refused, or no
 * version, never taken as it came. */
START_TEST(cond_lying_server)
{
    static const char *const lies[] = {
        /* the range asked (0-7) is not the one sent */
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 4-11/80\r\n"
        "Content-Length: 8\r\n\r\n12345678",
        /* more bytes than the range it names */
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-3/80\r\n"
        "Content-Length: 8\r\n\r\n12345678",
        /* no Content-Range at all */
        "HTTP/1.1 206 Partial Content\r\nContent-Length: 8\r\n\r\n12345678",
        /* a range past its own total */
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-7/4\r\n"
        "Content-Length: 8\r\n\r\n12345678",
    };
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_transport(c, TF_TRANSPORT_HTTP), TF_OK);
    char u[128];
    for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
        pid_t pid;
        snprintf(u, sizeof u, "http://127.0.0.1:%d/v1/tensors/x", lying_server(lies[i], strlen(lies[i]), &pid));
        void *buf = (void *)1;
        size_t len = 99;
        ck_assert_int_eq(tf_get_range(c, u, 0, 8, &buf, &len, NULL), TF_EPROTO);
        ck_assert_ptr_eq(buf, (void *)1);           /* outputs untouched */
        ck_assert_uint_eq(len, 99);
        waitpid(pid, NULL, 0);
    }
    /* A malformed ETag on a good answer: the document, and no version. */
    void *enc = NULL;
    size_t enc_len = 0;
    tf_doc_t *d = doc_of(1.0f), *got = NULL;
    ck_assert_int_eq(tf_doc_encode(d, &enc, &enc_len), TF_OK);
    char answer[512];
    int h = snprintf(answer, sizeof answer, "HTTP/1.1 200 OK\r\nETag: not-a-tag\r\n"
                     "Content-Type: application/x-safetensors\r\nContent-Length: %zu\r\n\r\n",
                     enc_len);
    ck_assert_uint_lt((size_t)h + enc_len, sizeof answer);
    memcpy(answer + h, enc, enc_len);
    pid_t pid;
    snprintf(u, sizeof u, "http://127.0.0.1:%d/v1/tensors/x",
             lying_server(answer, (size_t)h + enc_len, &pid));
    ck_assert_int_eq(tf_get(c, u, 0, &got), TF_OK);
    ck_assert_str_eq(tf_client_last(c)->etag, "");
    waitpid(pid, NULL, 0);
    tf_doc_free(got);
    tf_doc_free(d);
    tf_free(enc);
    tf_client_free(c);
}
END_TEST

/* What the library refuses before sending anything. */
START_TEST(cond_refused_locally)
{
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    tf_doc_t *d = doc_of(1.0f), *out = NULL;
    tf_request_t rq = TF_REQUEST_INIT;
    rq.op = TF_OP_PUT;
    rq.url = "http://127.0.0.1:9/v1/tensors/x";
    rq.in = d;
    rq.if_match = "abc";                        /* not an entity tag */
    ck_assert_int_eq(tf_request(c, &rq, NULL), TF_EINVAL);
    rq.if_match = "\"a\"\r\nX-Evil: 1";         /* no header injection */
    ck_assert_int_eq(tf_request(c, &rq, NULL), TF_EINVAL);
    rq.if_match = NULL;
    rq.ttl_s = 366ull * 24 * 3600 + 1;          /* over a year */
    ck_assert_int_eq(tf_request(c, &rq, NULL), TF_EINVAL);
    tf_request_t g = TF_REQUEST_INIT;
    g.op = TF_OP_GET;
    g.url = rq.url;
    g.ttl_s = 5;                                /* a get has no lifetime */
    ck_assert_int_eq(tf_request(c, &g, &out), TF_EINVAL);
    tf_list_opts_t o = TF_LIST_OPTS_INIT;
    o.prefix = "a&limit=1";                     /* no query injection */
    tf_entry_t *e = NULL;
    size_t n = 0;
    ck_assert_int_eq(tf_list_page(c, "http://127.0.0.1:9", &o, &e, &n, NULL), TF_EINVAL);
    tf_doc_free(d);
    tf_client_free(c);
}
END_TEST

Suite *suite_cond(void)
{
    Suite *s = suite_create("cond");
    TCase *tc = tcase_create("cond");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, cond_put_conditions, 0, NROWS);
    tcase_add_loop_test(tc, cond_get_versions, 0, NROWS);
    tcase_add_loop_test(tc, cond_ttl, 0, NROWS);
    tcase_add_loop_test(tc, cond_range, 0, NROWS);
    tcase_add_loop_test(tc, cond_list_pages, 0, NROWS);
    tcase_add_loop_test(tc, cond_cli, 0, NROWS);
    tcase_add_loop_test(tc, cond_driver, 0, NROWS);
    tcase_add_test(tc, cond_refused_locally);
    tcase_add_test(tc, cond_lying_server);
    suite_add_tcase(s, tc);
    return s;
}
