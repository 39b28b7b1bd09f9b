/* check_xport.c - the xport suite: one table of tensor operations run over the three
 * transports - HTTP, UCX and same-host shared memory (shm/memfd) - against one real tfetchd,
 * each spoken on its own wire (curl; UCX frames through transports/ucx_client.h; shm
 * messages on the unix socket), so the conditions and the TTL are the protocols' own, not a
 * library's. Every case must give the same status on every transport: a new PUT 201, a
 * replace 204, If-None-Match: * on an existing name 412, If-Match on the current ETag 204
 * and on a stale one 412, a GET 200, a missing name 404, a PUT's TTL that expires the name.
 * A same-host PUT returns the ETag a GET then shows; same-host requests are counted in
 * tfetch_requests_total and tfetch_errors_total, and written to the access log, under
 * transport "shm", row for row as HTTP's and UCX's. Exchanges too (POST /v1/call/ROUTE, UCX
 * CALL, shm CALL): echo answers 200 with the very document sent (over shm: in the request's
 * own memfd, sealed), a missing route 404, a malformed document 400, each the same on
 * every transport and counted as route "call".
 *
 * Needs UCX (shm rides on the upgrade) and $TFETCHD; skipped with a message without them.
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "client/tfetch.h"
#include "proto/answer.h"
#include "proto/shmframe.h"
#include "proto/upgrade.h"
#include "transports/hostid.h"
#include "transports/shm.h"
#include "transports/http_client.h"
#include "transports/shm_server.h"
#ifdef HAVE_UCX
#include "proto/ucxframe.h"
#include "transports/ucx_client.h"
#endif

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_UCX

static td_daemon_t D;

enum { T_HTTP, T_UCX, T_SHM, T_COUNT };
static const char *const tname[T_COUNT] = {"http", "ucx", "shm"};

/* The connections of one test: the upgrade's UCX endpoint and shm socket. */
typedef struct {
    tfx_ucxc_t *u;
    tfx_ucxc_conn_t *conn;
    int shm;                        /* the shm socket, HELLO done */
    uint64_t seq;
    unsigned ucx_ids;
} conns_t;

/* One answer, whatever carried it. */
typedef struct {
    unsigned http;
    char etag[TFP_ETAG_LEN];        /* "" when none came (UCX carries none yet) */
    tfp_answer_t ans;               /* its typed fields, read as libtfetch reads them */
} answer_t;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A safetensors document of one U8 tensor of n bytes of v (tf_free it). */
static void *doc_bytes(size_t n, uint8_t v, size_t *len)
{
    uint8_t *data = malloc(n);
    ck_assert_ptr_nonnull(data);
    memset(data, v, n);
    int64_t shape[1] = {(int64_t)n};
    tf_doc_t *d = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(d, "t", TF_U8, 1, shape, data, n, TF_COPY), TF_OK);
    void *enc = NULL;
    ck_assert_int_eq(tf_doc_encode(d, &enc, len), TF_OK);
    tf_doc_free(d);
    free(data);
    return enc;
}

/* ---- HTTP: curl ----------------------------------------------------------------------------- */

/* Runs curl with args, the response headers dumped: the status and the ETag. */
static answer_t http_run(const char *args)
{
    static char out[1 << 16];
    char cmd[2048];
    answer_t a = {0, "", {0}};
    snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -D - %s", args);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(sscanf(out, "HTTP/%*s %u", &a.http) == 1, "no status line: %s", out);
    const char *e = strstr(out, "\nETag: ");
    if (e) {
        e += 7;
        size_t n = strcspn(e, "\r\n");
        ck_assert_uint_lt(n, sizeof a.etag);
        memcpy(a.etag, e, n);
        a.etag[n] = '\0';
    }
    return a;
}

static answer_t http_put(const char *name, const void *doc, size_t len, const char *im,
                         const char *inm, unsigned ttl)
{
    char args[1536], h[600] = "";
    const char *file = td_tmpfile(0, doc, len);
    if (im)
        snprintf(h + strlen(h), sizeof h - strlen(h), " -H 'If-Match: %s'", im);
    if (inm)
        snprintf(h + strlen(h), sizeof h - strlen(h), " -H 'If-None-Match: %s'", inm);
    if (ttl)
        snprintf(h + strlen(h), sizeof h - strlen(h), " -H 'Tfetch-TTL: %u'", ttl);
    snprintf(args, sizeof args, "-X PUT -H 'Content-Type: application/x-safetensors'%s "
             "--data-binary @%s %s/v1/tensors/%s", h, file, D.base, name);
    return http_run(args);
}

static answer_t http_get(const char *name, const char *inm)
{
    char args[1024], h[400] = "";
    if (inm)
        snprintf(h, sizeof h, "-H 'If-None-Match: %s' ", inm);
    snprintf(args, sizeof args, "%s%s/v1/tensors/%s", h, D.base, name);
    return http_run(args);
}

static answer_t http_call(const char *route, const void *doc, size_t len)
{
    char args[1536];
    const char *file = td_tmpfile(0, doc, len);
    snprintf(args, sizeof args, "-X POST -H 'Content-Type: application/x-safetensors' "
             "--data-binary @%s %s/v1/call/%s", file, D.base, route);
    return http_run(args);
}

/* ---- UCX: frames ---------------------------------------------------------------------------- */

static answer_t ucx_call(conns_t *k, tfp_uf_hdr_t *h, const void *doc, size_t len)
{
    snprintf(h->request_id, sizeof h->request_id, "xport-%u", ++k->ucx_ids);
    h->flags |= TFP_UF_F_ANSWER;        /* the reply's answer lines: the server's time */
    const void *segs[1] = {doc};
    size_t lens[1] = {len};
    h->body_len = len;
    tfx_ucxc_req_t *r = NULL;
    ck_assert_int_eq(tfx_ucxc_start(k->conn, h, doc ? segs : NULL, doc ? lens : NULL,
                                    doc ? 1 : 0, 10000, TFX_UCXC_DRIVEN, NULL, &r), TFP_OK);
    int done;
    while ((done = tfx_ucxc_drive(k->u, r, 50, 10000)) == 0)
        ;
    tfx_ucxc_req_t *got = tfx_ucxc_next(k->u);
    ck_assert_ptr_eq(got, r);
    tfx_ucxc_result_t *res = tfx_ucxc_req_result(got);
    ck_assert_msg(res->transport_status == TFP_OK, "UCX: %s", res->why);
    answer_t a = {res->reply.http, "", {0}};
    tfp_answer_from_reply(&res->reply, &a.ans);
    tfx_ucxc_req_free(got);
    return a;
}

static answer_t ucx_put(conns_t *k, const char *name, const void *doc, size_t len,
                        const char *im, const char *inm, unsigned ttl)
{
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_PUT, 0);
    snprintf(h.name, sizeof h.name, "%s", name);
    if (im || inm || ttl) {
        h.flags |= TFP_UF_F_COND;
        snprintf(h.cond.if_match, sizeof h.cond.if_match, "%s", im ? im : "");
        snprintf(h.cond.if_none_match, sizeof h.cond.if_none_match, "%s", inm ? inm : "");
        h.cond.ttl_s = ttl;
    }
    return ucx_call(k, &h, doc, len);
}

static answer_t ucx_get(conns_t *k, const char *name, const char *inm)
{
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_GET, 0);
    snprintf(h.name, sizeof h.name, "%s", name);
    if (inm) {
        h.flags |= TFP_UF_F_COND;
        snprintf(h.cond.if_none_match, sizeof h.cond.if_none_match, "%s", inm);
    }
    return ucx_call(k, &h, NULL, 0);
}

static answer_t ucx_exchange(conns_t *k, const char *route, const void *doc, size_t len)
{
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_CALL, 0);
    snprintf(h.name, sizeof h.name, "%s", route);
    return ucx_call(k, &h, doc, len);
}

/* ---- shm: messages -------------------------------------------------------------------------- */

static void shm_send(conns_t *k, tfp_sf_t *m)
{
    uint8_t buf[TFP_SF_MAX];
    tfp_err_t err;
    m->seq = ++k->seq;
    size_t n = tfp_sf_encode(m, buf, sizeof buf, &err);
    ck_assert_msg(n > 0, "%s", err.msg);
    ck_assert_int_eq(tfx_shm_send(k->shm, buf, n, NULL, 0, &err), TFP_OK);
}

/* The reply to the last message sent; *fd the descriptor it carried (-1: none). */
static tfp_sf_t shm_reply(conns_t *k, int *fd)
{
    uint8_t buf[TFP_SF_MAX];
    size_t len, nfds;
    int fds[1] = {-1};
    tfp_err_t err;
    tfp_sf_t r;
    ck_assert_int_eq(tfx_shm_recv(k->shm, buf, sizeof buf, &len, fds, 1, &nfds, &err), TFP_OK);
    ck_assert_int_eq(tfp_sf_decode(buf, len, &r, &err), TFP_OK);
    ck_assert_int_eq(r.op, TFP_SF_REPLY);
    ck_assert_uint_eq(r.seq, k->seq);
    *fd = nfds ? fds[0] : -1;
    return r;
}

static answer_t shm_answer(const tfp_sf_t *r)
{
    answer_t a = {r->http, "", {0}};
    tfp_answer_from_sf_reply(r, &a.ans);        /* its ETag, then its answer lines */
    if (r->status == TFP_OK && tfp_answer_has(&a.ans, TFP_AF_ETAG))
        snprintf(a.etag, sizeof a.etag, "%s", tfp_answer_str(&a.ans, TFP_AF_ETAG));
    ck_assert_int_eq(tfp_status_http((tfp_status_t)r->status) == (int)r->http ||
                     r->status == TFP_OK, 1);
    return a;
}

/* ALLOC (flags: 0, or TFP_SF_F_CALL for a call's request) of len bytes, doc written into it
 * and unmapped (so the daemon can seal it): the buffer's lease. */
static uint64_t shm_lend(conns_t *k, uint32_t flags, const void *doc, size_t len)
{
    tfp_sf_t m;
    tfp_err_t err;
    int fd;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_ALLOC;
    m.flags = flags;
    m.a = len;
    shm_send(k, &m);
    tfp_sf_t r = shm_reply(k, &fd);
    ck_assert_int_eq(r.status, TFP_OK);
    ck_assert_int_ge(fd, 0);
    tfx_shm_t w;
    ck_assert_int_eq(tfx_shm_map(fd, len, TFX_SHM_MAP_FILL, &w, &err), TFP_OK);
    memcpy(w.p, doc, len);
    tfx_shm_close(&w);                  /* unmapped and closed: the daemon can seal it */
    return r.lease;
}

/* RELEASE of an answer's lease (no reply). */
static void shm_release(conns_t *k, uint64_t lease)
{
    tfp_sf_t m;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_RELEASE;
    m.lease = lease;
    shm_send(k, &m);
    k->seq--;
}

static answer_t shm_put(conns_t *k, const char *name, const void *doc, size_t len,
                        const char *im, const char *inm, unsigned ttl)
{
    tfp_sf_t m;
    tfp_err_t err;
    int fd;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_COMMIT;
    m.lease = shm_lend(k, 0, doc, len);
    m.a = len;
    m.b = ttl;
    ck_assert_int_eq(tfp_sf_set_target(&m, name, im, inm, &err), TFP_OK);
    shm_send(k, &m);
    tfp_sf_t r = shm_reply(k, &fd);
    ck_assert_int_eq(fd, -1);
    return shm_answer(&r);
}

static int shm_want_digest;             /* the next GETs ask for the Repr-Digest */

static answer_t shm_get(conns_t *k, const char *name, const char *inm)
{
    tfp_sf_t m;
    tfp_err_t err;
    int fd;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_GET;
    ck_assert_int_eq(tfp_sf_set_target(&m, name, NULL, inm, &err), TFP_OK);
    if (shm_want_digest)
        ck_assert_int_eq(tfp_sf_add_line(&m, "Want-Repr-Digest", "sha-256=1", &err), TFP_OK);
    shm_send(k, &m);
    tfp_sf_t r = shm_reply(k, &fd);
    ck_assert_int_eq(fd >= 0, r.http == 200);      /* a memfd exactly with a 200 */
    if (fd >= 0) {
        size_t size;
        ck_assert_int_eq(tfx_shm_check(fd, 1, TFX_SHM_SEAL_WRITE, &size, &err), TFP_OK);
        ck_assert_int_eq(tfp_sf_check_span(r.a, r.b, size, &err), TFP_OK);
        close(fd);
        shm_release(k, r.lease);
    }
    return shm_answer(&r);
}

/* An exchange over shm: ALLOC (flag CALL), the document written, CALL. An OK answer's memfd
 * must hold exactly what echo gives back: the document sent. */
static answer_t shm_exchange(conns_t *k, const char *route, const void *doc, size_t len)
{
    tfp_sf_t m;
    tfp_err_t err;
    int fd;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_CALL;
    m.lease = shm_lend(k, TFP_SF_F_CALL, doc, len);
    m.a = len;
    ck_assert_int_eq(tfp_sf_set_call(&m, route, "xport-user", NULL, &err), TFP_OK);
    shm_send(k, &m);
    tfp_sf_t r = shm_reply(k, &fd);
    ck_assert_int_eq(fd >= 0, r.status == TFP_OK);
    if (fd >= 0) {
        size_t size;
        tfx_shm_t a;
        ck_assert_int_eq(tfx_shm_check(fd, 1, TFX_SHM_SEAL_WRITE, &size, &err), TFP_OK);
        ck_assert_int_eq(tfp_sf_check_span(r.a, r.b, size, &err), TFP_OK);
        ck_assert_int_eq(tfx_shm_map(fd, size, TFX_SHM_MAP_READ, &a, &err), TFP_OK);
        ck_assert_uint_eq(r.b, len);
        ck_assert_int_eq(memcmp(a.p + r.a, doc, len), 0);
        tfx_shm_close(&a);
        shm_release(k, r.lease);
    }
    return shm_answer(&r);
}

/* ---- the table ------------------------------------------------------------------------------ */

static answer_t put_on(conns_t *k, int t, const char *name, const void *doc, size_t len,
                       const char *im, const char *inm, unsigned ttl)
{
    return t == T_HTTP ? http_put(name, doc, len, im, inm, ttl)
         : t == T_UCX ? ucx_put(k, name, doc, len, im, inm, ttl)
                      : shm_put(k, name, doc, len, im, inm, ttl);
}

static answer_t get_on(conns_t *k, int t, const char *name, const char *inm)
{
    return t == T_HTTP ? http_get(name, inm) : t == T_UCX ? ucx_get(k, name, inm)
                                              : shm_get(k, name, inm);
}

static answer_t call_on(conns_t *k, int t, const char *route, const void *doc, size_t len)
{
    return t == T_HTTP ? http_call(route, doc, len) : t == T_UCX ? ucx_exchange(k, route, doc, len)
                                                     : shm_exchange(k, route, doc, len);
}

enum { IM_NONE, IM_CURRENT, IM_STALE, IM_ANY };
enum { OP_GET, OP_PUT, OP_CALL };
#define BAD_DOC "bad"                   /* an exchange's body: not a safetensors document */
#define INM_CURRENT "current"           /* If-None-Match: the name's ETag now */

typedef struct {
    const char *what;
    int put;                        /* OP_*: PUT, GET or an exchange */
    const char *name;               /* prefixed with the transport's name; a call's route */
    int im;                         /* IM_*: If-Match */
    const char *inm;                /* If-None-Match, or NULL */
    unsigned ttl;
    unsigned want;
} case_t;

static const case_t cases[] = {
    {"PUT of a new name", 1, "a", IM_NONE, NULL, 0, 201},
    {"PUT that replaces", 1, "a", IM_NONE, NULL, 0, 204},
    {"PUT If-None-Match: * on an existing name", 1, "a", IM_NONE, "*", 0, 412},
    {"PUT If-None-Match: * on a new name", 1, "b", IM_NONE, "*", 0, 201},
    {"PUT If-Match: the current ETag", 1, "a", IM_CURRENT, NULL, 0, 204},
    {"PUT If-Match: a stale ETag", 1, "a", IM_STALE, NULL, 0, 412},
    {"PUT If-Match: * on a missing name", 1, "c", IM_ANY, NULL, 0, 412},
    {"GET", 0, "a", IM_NONE, NULL, 0, 200},
    {"GET If-None-Match: the current ETag", 0, "a", IM_NONE, INM_CURRENT, 0, 304},
    {"GET If-None-Match: a stale ETag", 0, "a", IM_NONE, "\"0000000000000000-1\"", 0, 200},
    {"GET of a missing name", 0, "zz", IM_NONE, NULL, 0, 404},
    {"PUT with a TTL of 1 s", 1, "t", IM_NONE, NULL, 1, 201},
    {"GET before the TTL ran out", 0, "t", IM_NONE, NULL, 0, 200},
    {"exchange with echo", OP_CALL, "echo", IM_NONE, NULL, 0, 200},
    {"exchange with a missing route", OP_CALL, "nosuch", IM_NONE, NULL, 0, 404},
    {"exchange of a malformed document", OP_CALL, "echo", IM_NONE, BAD_DOC, 0, 400},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* The name's ETag as a GET over HTTP gives it. */
static void current_etag(const char *name, char etag[TFP_ETAG_LEN])
{
    answer_t a = http_get(name, NULL);
    ck_assert_uint_eq(a.http, 200);
    ck_assert_str_ne(a.etag, "");
    memcpy(etag, a.etag, TFP_ETAG_LEN);
}

static void connect_all(conns_t *k)
{
    tfp_up_req_t q = {.transports = TFP_UP_T_UCX | TFP_UP_T_SHM};
    tfp_err_t err;
    ck_assert_int_eq(tfx_hostid_get(&q.host, &err), TFP_OK);
    char *json, cmd[2048], ident[TFP_UP_MAX_IDENT + 1], why[256];
    static char out[1 << 17];
    size_t len;
    ck_assert_int_eq(tfp_up_req_build(&q, &json, &len, &err), TFP_OK);
    snprintf(cmd, sizeof cmd, "curl -s -H 'Content-Type: application/json' --data-binary "
             "'%s' %s/v1/upgrade", json, D.base);
    free(json);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    tfp_up_resp_t r;
    ck_assert_msg(tfp_up_resp_parse(out, strlen(out), &r, &err) == TFP_OK, "%s: %s", err.msg,
                  out);
    ck_assert_str_ne(r.shm_socket, "");
    memset(k, 0, sizeof *k);
    k->u = tfx_ucxc_new(NULL, NULL, &err);
    ck_assert_msg(k->u != NULL, "UCX: %s", err.msg);
    ck_assert_int_eq(tfp_up_ident_format(&q.host, ident, sizeof ident, &err), TFP_OK);
    ck_assert_int_eq(tfx_ucxc_connect(k->u, r.worker_address, r.worker_address_len,
                                      r.same_host, r.token, ident, 5000, &k->conn, why,
                                      sizeof why), TFP_OK);
    k->shm = tfx_shm_connect(r.shm_socket, &err);
    ck_assert_int_ge(k->shm, 0);
    tfp_sf_t m;
    int fd;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_HELLO;
    m.a = TFP_SF_HELLO_V3;              /* reads the REPLY's HTTP status and answer lines */
    m.str_len = strlen(r.shm_token);
    memcpy(m.str, r.shm_token, m.str_len + 1);
    shm_send(k, &m);
    ck_assert_int_eq(shm_reply(k, &fd).status, TFP_OK);
    tfp_up_resp_clear(&r);
}

static void disconnect_all(conns_t *k)
{
    close(k->shm);
    tfx_ucxc_conn_close(k->conn);
    tfx_ucxc_free(k->u);
}

/* Lines of the access log holding every one of the words. */
static int log_lines(const char *path, const char *w1, const char *w2, const char *w3)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        n += strstr(line, w1) && strstr(line, w2) && strstr(line, w3);
    fclose(f);
    return n;
}

/* The value of one labelled row of /metrics, 0 when absent. */
static long long metric_row(const char *row)
{
    static char out[1 << 17];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "curl -s %s/metrics", D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    const char *p = strstr(out, row);
    return p ? atoll(p + strlen(row)) : 0;
}

START_TEST(xport_one_table)
{
    if (!getenv("TFETCHD")) {
        fprintf(stderr, "xport_one_table: TFETCHD not set, skipped\n");
        return;
    }
    char logp[128];
    snprintf(logp, sizeof logp, "/tmp/tf-xport-access-%d.log", (int)getpid());
    unlink(logp);
    const char *args[] = {"--access-log", logp, NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
    conns_t k;
    connect_all(&k);
    size_t len;
    void *doc = doc_bytes(1000, 7, &len);
    unsigned got[T_COUNT][NCASES];
    for (int t = 0; t < T_COUNT; t++) {
        for (size_t i = 0; i < NCASES; i++) {
            const case_t *c = &cases[i];
            char name[64], etag[TFP_ETAG_LEN] = "";
            if (c->put == OP_CALL) {
                static const char bad[] = "\x10\0\0\0\0\0\0\0{\"t\": 1}";
                int b = c->inm != NULL;         /* BAD_DOC */
                answer_t a = call_on(&k, t, c->name, b ? (const void *)bad : doc,
                                     b ? sizeof bad - 1 : len);
                got[t][i] = a.http;
                ck_assert_msg(a.http == c->want, "%s over %s: %u, not %u", c->what,
                              tname[t], a.http, c->want);
                continue;
            }
            snprintf(name, sizeof name, "%s.%s", tname[t], c->name);
            const char *im = NULL;
            if (c->im == IM_CURRENT) {
                current_etag(name, etag);
                im = etag;
            } else if (c->im == IM_STALE) {
                im = "\"0000000000000000-1\"";
            } else if (c->im == IM_ANY) {
                im = "*";
            }
            const char *inm = c->inm;
            char cur[TFP_ETAG_LEN];
            if (inm && strcmp(inm, INM_CURRENT) == 0) {
                current_etag(name, cur);
                inm = cur;
            }
            answer_t a = c->put ? put_on(&k, t, name, doc, len, im, inm, c->ttl)
                                : get_on(&k, t, name, inm);
            got[t][i] = a.http;
            ck_assert_msg(a.http == c->want, "%s over %s: %u, not %u", c->what, tname[t],
                          a.http, c->want);
            /* A PUT that stored returns the ETag a GET then shows (UCX: not carried yet). */
            if (c->put && (a.http == 201 || a.http == 204) && t != T_UCX) {
                current_etag(name, etag);
                ck_assert_msg(strcmp(a.etag, etag) == 0, "%s over %s: ETag '%s', GET says "
                              "'%s'", c->what, tname[t], a.etag, etag);
            }
        }
    }
    /* The same answer for every case on every transport. */
    for (size_t i = 0; i < NCASES; i++)
        ck_assert_msg(got[T_HTTP][i] == got[T_UCX][i] && got[T_UCX][i] == got[T_SHM][i],
                      "%s: http %u, ucx %u, shm %u", cases[i].what, got[T_HTTP][i],
                      got[T_UCX][i], got[T_SHM][i]);
    /* The TTL expires the name on each: within 5 s, a GET finds none. */
    for (int t = 0; t < T_COUNT; t++) {
        char name[64];
        snprintf(name, sizeof name, "%s.t", tname[t]);
        unsigned st = 0;
        for (int i = 0; i < 100 && (st = get_on(&k, t, name, NULL).http) == 200; i++)
            sleep_ms(50);
        ck_assert_msg(st == 404, "%s: the TTL did not expire the name (%u)", tname[t], st);
    }
    /* Counted and logged under each transport, row for row. */
    for (int t = 0; t < T_COUNT; t++) {
        char row[160], tr[32];
        static const unsigned put_statuses[] = {201, 204, 412};
        static const long long put_counts[] = {3, 2, 3};
        for (size_t i = 0; i < 3; i++) {
            snprintf(row, sizeof row, "tfetch_requests_total{route=\"tensor_put\",status="
                     "\"%u\",transport=\"%s\"} ", put_statuses[i], tname[t]);
            ck_assert_msg(metric_row(row) == put_counts[i], "%s: %lld", row, metric_row(row));
        }
        snprintf(row, sizeof row, "tfetch_errors_total{route=\"tensor_put\",code="
                 "\"TF_EPRECOND\",transport=\"%s\"} ", tname[t]);
        ck_assert_msg(metric_row(row) == 3, "%s: %lld", row, metric_row(row));
        snprintf(row, sizeof row, "tfetch_requests_total{route=\"tensor_get\",status="
                 "\"404\",transport=\"%s\"} ", tname[t]);
        ck_assert_msg(metric_row(row) >= 2, "%s: %lld", row, metric_row(row));
        snprintf(tr, sizeof tr, "\"transport\":\"%s\"", tname[t]);
        ck_assert_int_eq(log_lines(logp, tr, "\"op\":\"tensor_put\"", "\"status\":412"), 3);
        ck_assert_int_eq(log_lines(logp, tr, "\"op\":\"tensor_put\"", "\"status\":201"), 3);
        ck_assert_int_ge(log_lines(logp, tr, "\"op\":\"tensor_get\"", "\"status\":200"), 1);
        static const unsigned call_statuses[] = {200, 404, 400};
        for (size_t i = 0; i < 3; i++) {
            snprintf(row, sizeof row, "tfetch_requests_total{route=\"call\",status=\"%u\","
                     "transport=\"%s\"} ", call_statuses[i], tname[t]);
            ck_assert_msg(metric_row(row) == 1, "%s: %lld", row, metric_row(row));
        }
        ck_assert_int_eq(log_lines(logp, tr, "\"op\":\"call\"", "\"status\":200"), 1);
    }
    tf_free(doc);
    disconnect_all(&k);
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
    unlink(logp);
}
END_TEST

/* ---- every typed answer field, as libtfetch's engines read it ----------------------------- */

static void hc_done(tfx_hc_req_t *req, tfx_hc_status_t st, void *ud)
{
    (void)req;
    *(tfx_hc_status_t *)ud = st;
}

/* HTTP through the client's engine (transports/http_client.c): the answer its generic header
 * reading parsed through proto/answer's table, as libtfetch gets it. */
static answer_t hc_call(const char *method, const char *path, const char *h1, const char *v1,
                        const void *body, size_t len)
{
    tfx_hc_t *hc = NULL;
    tfx_hc_req_t *req = NULL;
    char url[512];
    ck_assert_int_eq(tfx_hc_new(&hc), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_new(&req), TFX_HC_OK);
    snprintf(url, sizeof url, "%s%s", D.base, path);
    ck_assert_int_eq(tfx_hc_req_set_method(req, method), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_set_url(req, url), TFX_HC_OK);
    if (h1)
        ck_assert_int_eq(tfx_hc_req_add_header(req, h1, v1), TFX_HC_OK);
    if (body) {
        ck_assert_int_eq(tfx_hc_req_add_header(req, "Content-Type",
                                               "application/x-safetensors"), TFX_HC_OK);
        ck_assert_int_eq(tfx_hc_req_add_body(req, body, len), TFX_HC_OK);
    }
    tfx_hc_req_set_timeout(req, 10000);
    tfx_hc_status_t st = TFX_HC_EAGAIN;
    ck_assert_int_eq(tfx_hc_start(hc, req, hc_done, &st), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_drive(hc, req, -1), TFX_HC_OK);
    ck_assert_int_eq(st, TFX_HC_OK);
    const tfx_hc_resp_t *r = tfx_hc_req_response(req);
    answer_t a = {(unsigned)r->status, "", r->answer};
    tfx_hc_req_free(req);
    tfx_hc_free(hc);
    return a;
}

/* A FEED frame over UCX. */
static answer_t ucx_feed(conns_t *k, int op, const char *feed, const char *dev,
                         const char *consumer, const void *doc, size_t len, uint64_t after)
{
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_FEED, 0);
    h.flags |= TFP_UF_F_FEED;
    h.feed.op = (uint8_t)op;
    h.feed.after = after;
    snprintf(h.name, sizeof h.name, "%s", feed);
    snprintf(h.feed.dev, sizeof h.feed.dev, "%s", dev ? dev : "");
    snprintf(h.feed.consumer, sizeof h.feed.consumer, "%s", consumer ? consumer : "");
    return ucx_call(k, &h, doc, len);
}

/* A tensor op over UCX whose reply carries its conditions block (an empty one asks for it). */
static answer_t ucx_tensor(conns_t *k, tfp_uf_op_t op, const char *name, const void *doc,
                           size_t len, const char *lines)
{
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, op, 0);
    h.flags |= TFP_UF_F_COND | TFP_UF_F_ANSWER;
    snprintf(h.answer, sizeof h.answer, "%s", lines ? lines : "");
    snprintf(h.name, sizeof h.name, "%s", name);
    return ucx_call(k, &h, doc, len);
}

#define AF(x) (1u << TFP_AF_##x)
enum { A_PUT, A_GET, A_GET_DIGEST, A_INFEED, A_INFEED_FULL, A_POP, A_OUTFEED_PUSH,
       A_OUTFEED_GET };

/* One table: each case, the answer's fields it must bring (no more), its status, and the
 * transports that carry the op (shm: tensors only; feeds have their own same-host rings). */
typedef struct {
    const char *what;
    int op;
    uint32_t fields;
    unsigned http;
    int shm;
} field_case_t;

static const field_case_t field_cases[] = {
    {"PUT of a new name", A_PUT, AF(ETAG), 201, 1},
    {"GET", A_GET, AF(ETAG), 200, 1},
    {"GET asking for the Repr-Digest", A_GET_DIGEST, AF(ETAG) | AF(REPR_DIGEST), 200, 1},
    {"infeed push", A_INFEED, AF(GENERATION), 201, 0},
    {"infeed push to a full queue", A_INFEED_FULL, AF(RETRY_AFTER), 429, 0},
    {"pop", A_POP, AF(POSITION) | AF(SEQ) | AF(ROUND) | AF(GENERATION), 200, 0},
    {"outfeed push", A_OUTFEED_PUSH, 0, 201, 0},
    {"outfeed get", A_OUTFEED_GET, AF(SEQ) | AF(DEVICE) | AF(GENERATION), 200, 0},
};
#define NFIELD_CASES (sizeof field_cases / sizeof field_cases[0])

static answer_t field_case_on(conns_t *k, int t, const field_case_t *c, const void *doc,
                              size_t len)
{
    char name[64], feed[64], p[256];
    snprintf(name, sizeof name, "ans.%s", tname[t]);
    snprintf(feed, sizeof feed, "ans-%s", tname[t]);
    switch (c->op) {
    case A_PUT:
        snprintf(p, sizeof p, "/v1/tensors/%s", name);
        return t == T_HTTP ? hc_call("PUT", p, NULL, NULL, doc, len)
             : t == T_UCX ? ucx_tensor(k, TFP_UF_PUT, name, doc, len, NULL)
                          : shm_put(k, name, doc, len, NULL, NULL, 0);
    case A_GET:
        snprintf(p, sizeof p, "/v1/tensors/%s", name);
        return t == T_HTTP ? hc_call("GET", p, NULL, NULL, NULL, 0)
             : t == T_UCX ? ucx_tensor(k, TFP_UF_GET, name, NULL, 0, NULL) : shm_get(k, name, NULL);
    case A_GET_DIGEST: {
        snprintf(p, sizeof p, "/v1/tensors/%s", name);
        if (t == T_HTTP)
            return hc_call("GET", p, "Want-Repr-Digest", "sha-256=1", NULL, 0);
        if (t == T_UCX)
            return ucx_tensor(k, TFP_UF_GET, name, NULL, 0, "Want-Repr-Digest: sha-256=1\n");
        shm_want_digest = 1;
        answer_t a = shm_get(k, name, NULL);
        shm_want_digest = 0;
        return a;
    }
    case A_INFEED:
    case A_INFEED_FULL:
        snprintf(p, sizeof p, "/v1/feeds/%s/devices/0/infeed", feed);
        return t == T_HTTP ? hc_call("POST", p, NULL, NULL, doc, len)
                           : ucx_feed(k, TFP_UF_FEED_INFEED, feed, "0", NULL, doc, len, 0);
    case A_POP:
        snprintf(p, sizeof p, "/v1/feeds/%s/devices/0/pop", feed);
        return t == T_HTTP ? hc_call("POST", p, "Tfetch-Consumer", "c1", NULL, 0)
                           : ucx_feed(k, TFP_UF_FEED_POP, feed, "0", "c1", NULL, 0, 0);
    case A_OUTFEED_PUSH:
        snprintf(p, sizeof p, "/v1/feeds/%s/devices/0/outfeed", feed);
        return t == T_HTTP ? hc_call("POST", p, NULL, NULL, doc, len)
                           : ucx_feed(k, TFP_UF_FEED_OUTFEED_PUSH, feed, "0", NULL, doc, len, 0);
    default:
        snprintf(p, sizeof p, "/v1/feeds/%s/outfeed?after=0", feed);
        return t == T_HTTP ? hc_call("GET", p, NULL, NULL, NULL, 0)
                           : ucx_feed(k, TFP_UF_FEED_OUTFEED_GET, feed, "", NULL, NULL, 0, 0);
    }
}

/* Every field of the typed answer reaches the client over HTTP, UCX and shm alike: the same
 * table of cases on each transport, and the fields each brings compared, values included. */
START_TEST(xport_answer_fields)
{
    if (!getenv("TFETCHD")) {
        fprintf(stderr, "xport_answer_fields: TFETCHD not set, skipped\n");
        return;
    }
    ck_assert_msg(td_start(&D, NULL) == 0, "tfetchd did not start");
    conns_t k;
    connect_all(&k);
    size_t len;
    void *doc = doc_bytes(4, 9, &len);
    uint32_t all = TFP_AF_TIMING_MASK;          /* every answer brings the server's time */
    for (size_t i = 0; i < NFIELD_CASES; i++)
        all |= field_cases[i].fields;
    ck_assert_msg(all == (1u << TFP_AF_COUNT) - 1, "a field no case brings: add a case");
    for (int t = 0; t < T_SHM; t++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "curl -sf -o /dev/null -X PUT -H 'Content-Type: "
                 "application/json' --data-binary '{\"devices\":1,\"max_items\":1,"
                 "\"signature\":[{\"name\":\"t\",\"dtype\":\"U8\",\"shape\":[4]}]}' "
                 "%s/v1/feeds/ans-%s", D.base, tname[t]);
        ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    }
    answer_t got[T_COUNT][NFIELD_CASES];
    for (int t = 0; t < T_COUNT; t++)
        for (size_t i = 0; i < NFIELD_CASES; i++) {
            const field_case_t *c = &field_cases[i];
            if (t == T_SHM && !c->shm)
                continue;
            answer_t a = field_case_on(&k, t, c, doc, len);
            got[t][i] = a;
            ck_assert_msg(a.http == c->http, "%s over %s: HTTP %u, not %u", c->what, tname[t],
                          a.http, c->http);
            /* ... and the server's time on it, every time */
            uint32_t want = c->fields | TFP_AF_TIMING_MASK;
            ck_assert_msg(a.ans.present == want, "%s over %s: fields %#x, not %#x",
                          c->what, tname[t], a.ans.present, want);
            const uint64_t *n = a.ans.num;
            ck_assert_msg(n[TFP_AF_SRV_RECV] + n[TFP_AF_SRV_QUEUE] + n[TFP_AF_SRV_HANDLER] <=
                          n[TFP_AF_SRV_TOTAL] + 2, "%s over %s: server stages past its total",
                          c->what, tname[t]);
            ck_assert_msg(n[TFP_AF_SRV_TOTAL] < 10000000, "%s over %s: %llu us", c->what,
                          tname[t], (unsigned long long)n[TFP_AF_SRV_TOTAL]);
        }
    /* The same values on every transport (each its own feed and name: the same history);
     * an ETag names its own name's version: only its form is the same. */
    for (size_t i = 0; i < NFIELD_CASES; i++)
        for (int t = T_UCX; t < T_COUNT; t++) {
            if (t == T_SHM && !field_cases[i].shm)
                continue;
            for (unsigned f = 0; f < TFP_AF_COUNT; f++)
                if (tfp_answer_fields[f].kind == TFP_AK_NUM &&
                    tfp_answer_has(&got[t][i].ans, f))
                    ck_assert_msg(got[t][i].ans.num[f] == got[T_HTTP][i].ans.num[f],
                                  "%s: %s over %s %llu, over http %llu", field_cases[i].what,
                                  tfp_answer_fields[f].header, tname[t],
                                  (unsigned long long)got[t][i].ans.num[f],
                                  (unsigned long long)got[T_HTTP][i].ans.num[f]);
        }
    /* curl sees the server's time as one Server-Timing header, RFC-style entries */
    static char out[1 << 16];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -D - %s/v1/tensors/ans.http", D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    const char *st = strstr(out, "\nServer-Timing: ");
    ck_assert_msg(st != NULL, "no Server-Timing in:\n%s", out);
    char line[256];
    size_t ln = strcspn(st + 16, "\r\n");
    ck_assert_uint_lt(ln, sizeof line);
    memcpy(line, st + 16, ln);
    line[ln] = '\0';
    ck_assert_msg(strstr(line, "handler;dur=") && strstr(line, "tf;dur="), "%s", line);
    tfp_answer_t timing = {0};
    ck_assert_int_eq(tfp_answer_header_parse(&timing, "Server-Timing", line), 1);
    ck_assert_uint_eq(timing.present, TFP_AF_TIMING_MASK);
    /* The same document's digest, whatever carried it */
    for (int t = T_UCX; t < T_COUNT; t++)
        ck_assert_str_eq(tfp_answer_str(&got[t][A_GET_DIGEST].ans, TFP_AF_REPR_DIGEST),
                         tfp_answer_str(&got[T_HTTP][A_GET_DIGEST].ans, TFP_AF_REPR_DIGEST));
    /* A GET names the version the PUT before it stored, on each transport. */
    for (int t = 0; t < T_COUNT; t++)
        ck_assert_str_eq(tfp_answer_str(&got[t][A_GET].ans, TFP_AF_ETAG),
                         tfp_answer_str(&got[t][A_PUT].ans, TFP_AF_ETAG));
    tf_free(doc);
    disconnect_all(&k);
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}
END_TEST

#endif

/* ---- transports/shm_server.c alone, under handlers of the test's own ----------------------- */

static unsigned t_finished;
static const char *t_body;              /* what handle answers with: bytes without a backing */

static void t_begin(tfx_req_t *r, void *arg)
{
    (void)r;
    (void)arg;
}

static void t_handle(tfx_req_t *r, void *arg)
{
    (void)arg;
    ck_assert_int_eq(tfp_answer_set_str(tfx_req_answer(r), TFP_AF_ETAG,
                                        "\"00000000000000ab-9\""), 0);
    tfx_respond(r, 200, "application/json", t_body, strlen(t_body), NULL, NULL);
}

static void t_finish(tfx_req_t *r, int completed, void *arg)
{
    (void)arg;
    ck_assert_int_eq(completed, 1);
    ck_assert_uint_eq(tfx_req_status(r), t_finished ? 429 : 200);
    t_finished++;
}

static tfp_status_t t_refuse(void *arg, uint64_t len, char *msg, size_t msg_size)
{
    (void)arg;
    snprintf(msg, msg_size, "over the bound by %llu", (unsigned long long)len);
    return TFP_EFULL;
}

/* An answer whose body knows no memfd goes to the peer as a sealed copy of its own, with
 * its ETag; the lending policy (admit) may refuse it, and the status says so. */
START_TEST(xport_shm_answer_copy)
{
    tfx_handlers_t h = {t_begin, t_handle, t_finish, NULL, NULL};
    tfp_op_t op;
    memset(&op, 0, sizeof op);
    op.kind = TFP_OP_INFO;
    t_body = "{\"tfetch\":1}";
    t_finished = 0;
    tfx_shm_call_t call = {.body = TFX_SHM_NONE};
    tfx_shm_call(&h, &op, NULL, "shm", &call);
    ck_assert_uint_eq(t_finished, 1);
    ck_assert_int_eq(call.code, TFP_OK);
    ck_assert_uint_eq(call.http, 200);
    ck_assert_str_eq(call.etag, "\"00000000000000ab-9\"");
    ck_assert_int_ge(call.fd, 0);
    ck_assert_uint_eq(call.len, strlen(t_body));
    size_t size;
    tfp_err_t err;
    ck_assert_int_eq(tfx_shm_check(call.fd, call.len, TFX_SHM_SEAL_WRITE, &size, &err), TFP_OK);
    char got[32] = "";
    ck_assert_int_eq(pread(call.fd, got, call.len, (off_t)call.offset), (ssize_t)call.len);
    ck_assert_str_eq(got, t_body);
    ck_assert_ptr_nonnull(call.hold);
    call.hold(call.hold_arg);
    /* refused by the lending policy: no memfd, the status the policy gave */
    tfx_shm_call_t no = {.body = TFX_SHM_NONE, .admit = t_refuse};
    tfx_shm_call(&h, &op, NULL, "shm", &no);
    ck_assert_uint_eq(t_finished, 2);
    ck_assert_int_eq(no.code, TFP_EFULL);
    ck_assert_uint_eq(no.http, 429);
    ck_assert_int_eq(no.fd, -1);
    ck_assert_ptr_null(no.hold);
    ck_assert_str_eq(no.msg, "over the bound by 12");
}
END_TEST

#ifndef HAVE_UCX

START_TEST(xport_one_table)
{
    fprintf(stderr, "xport_one_table: built without UCX (shm rides on the upgrade), skipped\n");
}
END_TEST

START_TEST(xport_answer_fields)
{
    fprintf(stderr, "xport_answer_fields: built without UCX, skipped\n");
}
END_TEST

#endif

Suite *suite_xport(void)
{
    Suite *s = suite_create("xport");
    TCase *tc = tcase_create("xport");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, xport_one_table);
    tcase_add_test(tc, xport_shm_answer_copy);
    tcase_add_test(tc, xport_answer_fields);
    suite_add_tcase(s, tc);
    return s;
}
