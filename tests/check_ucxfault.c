/* check_ucxfault.c - the ucxfault suite: tfetchd's UCX side when its clients die. UCX clients
 * (the tfetch CLI, each a process of its own) are killed with SIGKILL in the middle of large
 * puts and gets, again and again; after each kill the daemon must give back what the request
 * held (the store reservation of a put, the blob a get was sending: `reserved` and `retired`
 * in /v1/info back to 0, no request left in flight) and keep answering new UCX clients, so a
 * stalled UCX progress thread fails the test too.
 *
 * Clients that leave politely are covered too: a raw UCX client (a UCP worker of the test's
 * own, speaking the frames) starts a large get or put and then sends BYE and closes its
 * endpoint with the transfer unfinished; the daemon must end those requests at once, give
 * back what they held, never answer on that endpoint, and keep serving. libtfetch itself
 * sends BYE when it lets a connection go (tfetch_ucx_byes_total counts them).
 *
 * Each test starts its own daemon ($TFETCHD, port 0, tests/fixtures.c) and needs
 * $TFETCH_CLI. Built without UCX the suite only says it is skipped.
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "client/tfetch.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "transports/clock.h"
#ifdef HAVE_UCX
#include "transports/ucx_common.h"        /* TFX_UCX_WEDGED_MS */
#include <ucp/api/ucp.h>
#include "proto/ucxframe.h"
#include "proto/upgrade.h"
#include "transports/hostid.h"
#include "transports/http_client.h"
#include "transports/ucx_server.h"
#endif

Suite *suite_ucxfault(void);           /* registered in tests/suites.h */

#ifdef HAVE_UCX
#define BIG (256u << 20)                /* bytes of the tensor put and got */
#define KILLS 5                         /* kills that must land mid-transfer, each test */
#define TRIES 40                        /* attempts allowed to get them */
#define SETTLE_MS 3000                  /* how long the daemon may take to give things back */

static td_daemon_t D;
static char big_path[128];

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* NULL when the test can run; else why not. */
static const char *why_skip(void)
{
    if (!getenv("TFETCHD"))
        return "TFETCHD is not set";
    if (!getenv("TFETCH_CLI"))
        return "TFETCH_CLI is not set";
    return NULL;
}

static const char *url(const char *name)
{
    static char b[4][256];
    static int k;
    char *p = b[k++ & 3];
    snprintf(p, 256, "%s/v1/tensors/%s", D.base, name);
    return p;
}

static tf_client_t *client(tf_transport_t policy)
{
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_transport(c, policy), TF_OK);
    tf_client_set_timeout(c, 5000);
    return c;
}

/* A number from /v1/info's "store" object ("reserved", "retired"). */
static long long store_field(const char *key)
{
    tf_client_t *h = client(TF_TRANSPORT_HTTP);
    char *json = NULL, pat[64];
    ck_assert_int_eq(tf_info(h, D.base, &json), TF_OK);
    tf_client_free(h);
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *store = strstr(json, "\"store\":");
    const char *p = store ? strstr(store, pat) : NULL;
    ck_assert_msg(p != NULL, "no %s in /v1/info: %s", key, json);
    long long v = strtoll(p + strlen(pat), NULL, 10);
    free(json);
    return v;
}

/* Requests the daemon is serving, the one asking included (/metrics). */
static long inflight(void)
{
    char cmd[256], out[65536];
    snprintf(cmd, sizeof cmd, "curl -s -m 5 '%s/metrics'", D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    const char *p = strstr(out, "\ntfetch_inflight_requests ");
    ck_assert_msg(p != NULL, "no tfetch_inflight_requests in /metrics");
    return strtol(p + strlen("\ntfetch_inflight_requests "), NULL, 10);
}

/* Waits until store_field(key) is 0 and only the asking request is in flight. */
static void assert_settles(const char *key, int kill_no)
{
    uint64_t deadline = tfx_now_ms() + SETTLE_MS;
    for (;;) {
        long long v = store_field(key);
        long n = inflight();
        if (v == 0 && n <= 1)
            return;
        if (tfx_now_ms() > deadline) {
            td_show_log(&D);
            ck_abort_msg("after round %d: %s is %lld and %ld requests are in flight, %d ms on",
                         kill_no, key, v, n - 1, SETTLE_MS);
        }
        sleep_ms(20);
    }
}

/* A fresh UCX client (a process, strict policy, time-limited) puts and gets a small tensor:
 * the daemon's UCX side still answers. Asked once a wedged worker would have been replaced
 * (a client that dies while writing into the worker's shared-memory FIFO wedges it; one
 * that arrives in the meantime is not answered, and falls back or fails). */
static void assert_ucx_answers(int kill_no)
{
    sleep_ms(2 * TFX_UCX_WEDGED_MS);
    char cmd[1024];
    const char *cli = getenv("TFETCH_CLI");
    const char *in = td_tmpfile(0, "abcdefgh", 8);
    snprintf(cmd, sizeof cmd, "timeout -s KILL 10 %s -q --stats --transport ucx --timeout 3000 "
             "put --dtype U8 --shape 8 '%s' %s 2>&1 >/dev/null", cli, url("small"), in);
    char out[4096];
    int rc = td_run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0 && strstr(out, "\"transport\":\"ucx/"),
                  "after kill %d no UCX answer (exit %d): %s", kill_no, rc, out);
    snprintf(cmd, sizeof cmd, "timeout -s KILL 10 %s -q --stats --transport ucx --timeout 3000 "
             "get '%s' /dev/null 2>&1", cli, url("small"));
    rc = td_run(cmd, out, sizeof out);
    ck_assert_msg(rc == 0 && strstr(out, "\"transport\":\"ucx/"),
                  "after kill %d no UCX answer to a get (exit %d): %s", kill_no, rc, out);
}

static void write_big(void)
{
    snprintf(big_path, sizeof big_path, "/tmp/tf-ucxfault-%d.bin", (int)getpid());
    uint8_t *v = malloc(BIG);
    ck_assert_ptr_nonnull(v);
    memset(v, 0x5a, BIG);
    FILE *f = fopen(big_path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(v, 1, BIG, f), BIG);
    ck_assert_int_eq(fclose(f), 0);
    free(v);
}

static void setup(void)
{
    ck_assert_msg(td_start(&D, NULL) == 0, "tfetchd did not start");
    write_big();
}

static void teardown(void)
{
    unlink(big_path);
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}

/* Starts the CLI over UCX (strict): put BIG bytes from big_path, or get into /dev/null. */
static pid_t spawn_cli(int put, const char *name)
{
    const char *cli = getenv("TFETCH_CLI");
    char shape[32];
    snprintf(shape, sizeof shape, "%u", BIG);
    const char *u = url(name);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        signal(SIGTERM, SIG_DFL);
        if (put)
            execl(cli, cli, "-q", "--transport", "ucx", "put", "--dtype", "U8", "--shape", shape,
                  u, big_path, (char *)NULL);
        else
            execl(cli, cli, "-q", "--transport", "ucx", "get", u, "/dev/null", (char *)NULL);
        _exit(127);
    }
    return kid;
}

/* SIGKILL and reap: 1 if it was still running (the kill, not an exit, ended it). */
static int kill_cli(pid_t kid)
{
    kill(kid, SIGKILL);
    int st;
    ck_assert_int_eq(waitpid(kid, &st, 0), kid);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
}

/* 1 if the tensor is stored (over HTTP). */
static int stored(const char *name)
{
    tf_client_t *h = client(TF_TRANSPORT_HTTP);
    tf_doc_t *d = NULL;
    tf_status_t st = tf_get(h, url(name), 0, &d);
    tf_doc_free(d);
    tf_client_free(h);
    ck_assert_msg(st == TF_OK || st == TF_ENOTFOUND, "GET %s: %s", name, tf_strerror(st));
    return st == TF_OK;
}

/* Kills UCX puts of BIG bytes once the daemon holds their reservation (the body on its way),
 * until KILLS of them died before the document was whole. After each: the reservation goes
 * back, nothing is left in flight, and a new UCX client is served. */
START_TEST(ucxfault_kill_mid_put)
{
    const char *why = why_skip();
    if (why) {
        fprintf(stderr, "ucxfault_kill_mid_put: skipped: %s\n", why);
        return;
    }
    setup();
    int mid = 0, tries = 0;
    while (mid < KILLS && tries++ < TRIES) {
        pid_t kid = spawn_cli(1, "big");
        uint64_t deadline = tfx_now_ms() + 20000;
        while (store_field("reserved") == 0 && tfx_now_ms() < deadline)
            ;                           /* the body is on its way once it is reserved */
        int killed = kill_cli(kid);
        if (killed && !stored("big"))
            mid++;
        assert_settles("reserved", tries);
        assert_ucx_answers(tries);
        tf_client_t *h = client(TF_TRANSPORT_HTTP);
        tf_delete(h, url("big"));
        tf_client_free(h);
    }
    fprintf(stderr, "ucxfault_kill_mid_put: %d of %d kills landed mid-put\n", mid, tries);
    ck_assert_int_eq(mid, KILLS);
    teardown();
}
END_TEST

/* Kills UCX gets of a BIG-byte tensor while the daemon is serving them, deleting the tensor
 * first so the blob being sent is held only by the get: once the client is gone the blob is
 * released (retired 0) and nothing is left in flight; a new UCX client is served. */
START_TEST(ucxfault_kill_mid_get)
{
    const char *why = why_skip();
    if (why) {
        fprintf(stderr, "ucxfault_kill_mid_get: skipped: %s\n", why);
        return;
    }
    setup();
    int mid = 0, tries = 0;
    while (mid < KILLS && tries++ < TRIES) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s -q --transport http put --dtype U8 --shape %u '%s' %s",
                 getenv("TFETCH_CLI"), BIG, url("g"), big_path);
        ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
        pid_t kid = spawn_cli(0, "g");
        uint64_t deadline = tfx_now_ms() + 20000;
        while (inflight() < 2 && tfx_now_ms() < deadline)
            ;                           /* the get is being served */
        kill(kid, SIGSTOP);             /* hold it mid-transfer while the tensor goes */
        tf_client_t *h = client(TF_TRANSPORT_HTTP);
        ck_assert_int_eq(tf_delete(h, url("g")), TF_OK);
        tf_client_free(h);
        long long held = store_field("retired");
        if (kill_cli(kid) && held > 0)
            mid++;
        assert_settles("retired", tries);
        assert_ucx_answers(tries);
    }
    fprintf(stderr, "ucxfault_kill_mid_get: %d of %d kills landed mid-get\n", mid, tries);
    ck_assert_int_eq(mid, KILLS);
    teardown();
}
END_TEST

/* ---- BYE with transfers unfinished: a raw UCX client ---------------------------------------- */

#define BYE_BIG (64u << 20)             /* bytes of the tensor the raw client gets or puts */
#define BYE_ROUNDS 4

typedef struct {
    ucp_context_h ctx;
    ucp_worker_h w;
    int acks_ok, replies;
    void *held;                         /* a rendezvous reply body, never received */
    tfp_uf_hdr_t last;                  /* the last REPLY's frame */
} raw_t;

static ucs_status_t raw_on_reply(void *arg, const void *header, size_t header_length,
                                 void *data, size_t length, const ucp_am_recv_param_t *param)
{
    raw_t *r = arg;
    tfp_uf_hdr_t h;
    tfp_err_t err;
    (void)length;
    if (tfp_uf_decode(header, header_length, &h, &err) != TFP_OK)
        return UCS_OK;
    if (h.op == TFP_UF_HELLO_ACK) {
        r->acks_ok += h.status == TFP_OK;
        return UCS_OK;
    }
    r->replies++;
    r->last = h;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) && !r->held) {
        r->held = data;                 /* the daemon's send stays unfinished */
        return UCS_INPROGRESS;
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

static void raw_done(raw_t *r)
{
    if (r->held)
        ucp_am_data_release(r->w, r->held);
    ucp_worker_destroy(r->w);
    ucp_cleanup(r->ctx);
}

static void raw_progress(raw_t *r, long ms)
{
    uint64_t end = tfx_now_ms() + (uint64_t)ms;
    while (tfx_now_ms() < end)
        if (!ucp_worker_progress(r->w))
            sleep_ms(1);
}

static void hc_done(tfx_hc_req_t *req, tfx_hc_status_t st, void *ud)
{
    (void)req;
    *(tfx_hc_status_t *)ud = st;
}

/* POST /v1/upgrade for this host; the offer into *resp. */
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
    memset(resp, 0, sizeof *resp);
    ck_assert_int_eq(tfp_up_resp_parse((const char *)r->body, r->body_len, resp, &err), TFP_OK);
    ck_assert_int_eq(resp->upgraded, 1);
    tfx_hc_req_free(req);
    tfx_hc_free(hc);
    free(json);
}

/* A new endpoint to the daemon, admitted (HELLO with a fresh token, HELLO_ACK OK). */
static ucp_ep_h raw_admitted(raw_t *r)
{
    tfp_up_host_t me;
    tfp_err_t err;
    ck_assert_int_eq(tfx_hostid_get(&me, &err), TFP_OK);
    char ident[TFP_UP_MAX_IDENT + 1];
    ck_assert_int_eq(tfp_up_ident_format(&me, ident, sizeof ident, &err), TFP_OK);
    tfp_up_resp_t resp;
    post_upgrade(&me, &resp);
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                          .address = (const ucp_address_t *)resp.worker_address,
                          .err_mode = UCP_ERR_HANDLING_MODE_NONE};
    ucp_ep_h h = NULL;
    ck_assert_int_eq(ucp_ep_create(r->w, &ep, &h), UCS_OK);
    tfp_uf_hdr_t hello;
    tfp_uf_init(&hello, TFP_UF_HELLO, 1);
    snprintf(hello.name, sizeof hello.name, "%s", resp.token);
    snprintf(hello.msg, sizeof hello.msg, "%s", ident);
    tfp_up_resp_clear(&resp);
    int before = r->acks_ok;
    void *rq = NULL;
    uint8_t buf[TFP_UF_MAX_HEADER];
    size_t len;
    ck_assert_int_eq(tfp_uf_encode(&hello, buf, sizeof buf, &len, &err), TFP_OK);
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER};
    rq = ucp_am_send_nbx(h, TFX_UCX_AM_REQUEST, buf, len, NULL, 0, &p);
    ck_assert(!UCS_PTR_IS_ERR(rq));
    for (int i = 0; i < 100 && r->acks_ok == before; i++)
        raw_progress(r, 50);
    if (UCS_PTR_IS_PTR(rq))
        ucp_request_free(rq);
    ck_assert_int_eq(r->acks_ok, before + 1);
    return h;
}

/* Sends one frame (and body) without waiting; the request, or NULL when it went at once. */
static void *raw_send(ucp_ep_h ep, const tfp_uf_hdr_t *h, const void *body, size_t len,
                      uint8_t *hbuf)
{
    size_t hlen;
    tfp_err_t err;
    ck_assert_int_eq(tfp_uf_encode(h, hbuf, TFP_UF_MAX_HEADER, &hlen, &err), TFP_OK);
    if (h->flags & TFP_UF_F_BODY_PREFIX) {  /* the body's first bytes after the frame */
        memcpy(hbuf + hlen, body, h->prefix_len);     /* (hbuf has room for them) */
        hlen += h->prefix_len;
        body = (const uint8_t *)body + h->prefix_len;
        len -= h->prefix_len;
    }
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_REPLY};
    void *rq = ucp_am_send_nbx(ep, TFX_UCX_AM_REQUEST, hbuf, hlen, body, len, &p);
    ck_assert(!UCS_PTR_IS_ERR(rq));
    return UCS_PTR_IS_PTR(rq) ? rq : NULL;
}

/* BYE, then the endpoint closed with whatever is still in flight on it. */
static void raw_bye_close(raw_t *r, ucp_ep_h ep, void *pending)
{
    tfp_uf_hdr_t bye;
    tfp_uf_init(&bye, TFP_UF_BYE, 99);
    uint8_t hbuf[TFP_UF_MAX_HEADER];
    void *rq = raw_send(ep, &bye, NULL, 0, hbuf);
    raw_progress(r, 100);               /* the BYE goes out */
    if (rq)
        ucp_request_free(rq);
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *c = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(c)) {
        for (int i = 0; i < 1000 && ucp_request_check_status(c) == UCS_INPROGRESS; i++)
            ucp_worker_progress(r->w);
        ucp_request_free(c);
    }
    if (pending)
        ucp_request_free(pending);      /* completes (cancelled) on its own */
}

/* A number from /metrics. */
static long long metric(const char *name)
{
    long long v = td_metric(&D, name);
    ck_assert_msg(v >= 0, "no %s in /metrics", name);
    return v;
}

/* A raw client gets a BYE_BIG tensor, holds the reply's rendezvous unreceived, the tensor is
 * deleted (only the get holds its blob), then BYE and close: the blob goes back (retired 0),
 * nothing is left in flight, and UCX clients are served; BYE_ROUNDS times on one daemon. */
START_TEST(ucxfault_bye_mid_get)
{
    const char *why = why_skip();
    if (why) {
        fprintf(stderr, "ucxfault_bye_mid_get: skipped: %s\n", why);
        return;
    }
    setup();
    for (int round = 1; round <= BYE_ROUNDS; round++) {
        char cmd[1024];
        /* the first BYE_BIG bytes of the BIG file: truncate a copy */
        char part[160];
        snprintf(part, sizeof part, "%s.part", big_path);
        snprintf(cmd, sizeof cmd, "head -c %u %s > %s && %s -q --transport http put --dtype U8 "
                 "--shape %u '%s' %s", BYE_BIG, big_path, part, getenv("TFETCH_CLI"), BYE_BIG,
                 url("bg"), part);
        ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
        unlink(part);
        raw_t r;
        raw_open(&r);
        ucp_ep_h ep = raw_admitted(&r);
        tfp_uf_hdr_t get;
        tfp_uf_init(&get, TFP_UF_GET, 2);
        snprintf(get.request_id, sizeof get.request_id, "bye-get-%d", round);
        snprintf(get.name, sizeof get.name, "bg");
        uint8_t hbuf[TFP_UF_MAX_HEADER];
        void *rq = raw_send(ep, &get, NULL, 0, hbuf);
        for (int i = 0; i < 200 && !r.held; i++)
            raw_progress(&r, 20);
        ck_assert_msg(r.held != NULL, "round %d: no rendezvous reply to the get", round);
        tf_client_t *h = client(TF_TRANSPORT_HTTP);
        ck_assert_int_eq(tf_delete(h, url("bg")), TF_OK);
        tf_client_free(h);
        ck_assert_int_gt(store_field("retired"), 0);       /* held by the get's send */
        raw_bye_close(&r, ep, rq);
        assert_settles("retired", round);
        raw_done(&r);
        assert_ucx_answers(round);
    }
    ck_assert_int_ge(metric("tfetch_ucx_byes_total"), BYE_ROUNDS);
    teardown();
}
END_TEST

/* A raw client starts a BYE_BIG put (every other round with the document's header in the
 * message header: BODY_PREFIX) and says BYE at once, closing with the body unfinished:
 * the reservation goes back (whether the daemon had begun the receive or not), nothing is
 * left in flight, and UCX clients are served; BYE_ROUNDS times on one daemon. */
START_TEST(ucxfault_bye_mid_put)
{
    const char *why = why_skip();
    if (why) {
        fprintf(stderr, "ucxfault_bye_mid_put: skipped: %s\n", why);
        return;
    }
    setup();
    uint8_t *body = malloc(BYE_BIG + 128);
    ck_assert_ptr_nonnull(body);
    /* a safetensors document: 8-byte header length, JSON header, then the bytes */
    char json[128];
    int jl = snprintf(json, sizeof json,
                      "{\"t\":{\"dtype\":\"U8\",\"shape\":[%u],\"data_offsets\":[0,%u]}}",
                      BYE_BIG, BYE_BIG);
    while (jl % 8)
        json[jl++] = ' ';               /* padded to 8 bytes, as writers do */
    uint64_t hl = (uint64_t)jl;
    memcpy(body, &hl, 8);
    memcpy(body + 8, json, (size_t)jl);
    memset(body + 8 + jl, 0x11, BYE_BIG);
    size_t len = 8 + (size_t)jl + BYE_BIG;
    for (int round = 1; round <= BYE_ROUNDS; round++) {
        raw_t r;
        raw_open(&r);
        ucp_ep_h ep = raw_admitted(&r);
        tfp_uf_hdr_t put;
        tfp_uf_init(&put, TFP_UF_PUT, 2);
        snprintf(put.request_id, sizeof put.request_id, "bye-put-%d", round);
        snprintf(put.name, sizeof put.name, "bp");
        put.body_len = len;
        if (round % 2 == 0) {           /* the document's header in the message header */
            put.flags = TFP_UF_F_BODY_PREFIX;
            put.prefix_len = 8 + (uint32_t)jl;
        }
        uint8_t hbuf[TFP_UF_MAX_HEADER + TFP_UF_MAX_PREFIX];
        void *rq = raw_send(ep, &put, body, len, hbuf);
        raw_bye_close(&r, ep, rq);
        assert_settles("reserved", round);
        raw_done(&r);
        assert_ucx_answers(round);
    }
    free(body);
    ck_assert_int_ge(metric("tfetch_ucx_byes_total"), BYE_ROUNDS);
    teardown();
}
END_TEST

/* ---- bodies in parts from a raw client ---------------------------------------------------- */

#define PARTS_BIG (3u << 20)            /* the tensor's bytes: three parts of at least 1 MiB */

/* A safetensors document of one U8 tensor of n bytes (byte i = i * 7 + salt); its size. */
static uint8_t *u8_doc(uint32_t n, int salt, size_t *len)
{
    char json[128];
    int jl = snprintf(json, sizeof json,
                      "{\"t\":{\"dtype\":\"U8\",\"shape\":[%u],\"data_offsets\":[0,%u]}}", n, n);
    while (jl % 8)
        json[jl++] = ' ';
    uint8_t *b = malloc(8 + (size_t)jl + n);
    ck_assert_ptr_nonnull(b);
    uint64_t hl = (uint64_t)jl;
    memcpy(b, &hl, 8);
    memcpy(b + 8, json, (size_t)jl);
    for (uint32_t i = 0; i < n; i++)
        b[8 + jl + i] = (uint8_t)(i * 7u + (unsigned)salt);
    *len = 8 + (size_t)jl + n;
    return b;
}

/* raw_send, then progress until UCX is done with the send (a sender of parts sends the next
 * only then). */
static void raw_send_wait(raw_t *r, ucp_ep_h ep, const tfp_uf_hdr_t *h, const void *body,
                          size_t len)
{
    uint8_t hbuf[TFP_UF_MAX_HEADER];
    void *rq = raw_send(ep, h, body, len, hbuf);
    for (int i = 0; rq && i < 5000 && ucp_request_check_status(rq) == UCS_INPROGRESS; i++)
        raw_progress(r, 1);
    if (rq) {
        ck_assert_int_ne(ucp_request_check_status(rq), UCS_INPROGRESS);
        ucp_request_free(rq);
    }
}

/* The first frame of a put of doc (len bytes) in parts, with its first `first` bytes. */
static void raw_put_first(raw_t *r, ucp_ep_h ep, uint64_t seq, const char *id,
                          const uint8_t *doc, size_t len, size_t first, tfp_uf_parts_t *t)
{
    tfp_uf_hdr_t put;
    tfp_err_t err;
    tfp_uf_init(&put, TFP_UF_PUT, seq);
    snprintf(put.request_id, sizeof put.request_id, "%s", id);
    snprintf(put.name, sizeof put.name, "parts");
    put.flags = TFP_UF_F_PARTS;
    put.body_len = len;
    ck_assert_int_eq(tfp_uf_parts_begin(t, &put, first, &err), TFP_OK);
    raw_send_wait(r, ep, &put, doc, first);
}

/* Waits up to ms for a reply beyond `before`; 1 if one came. */
static int raw_reply_within(raw_t *r, int before, long ms)
{
    for (long waited = 0; r->replies == before && waited < ms; waited += 10)
        raw_progress(r, 10);
    return r->replies > before;
}

/* A raw client's put in parts (proto/ucxframe.h, "Bodies in parts"): in order it lands whole;
 * a part out of place fails its endpoint and gives the reservation back; a body that stops
 * is answered 408 after the idle timeout; a part of no request is dropped and the endpoint
 * goes on. */
START_TEST(ucxfault_parts)
{
    const char *why = why_skip();
    if (why) {
        fprintf(stderr, "ucxfault_parts: skipped: %s\n", why);
        return;
    }
    const char *args[] = {"--idle-timeout", "1", NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
    write_big();
    size_t len;
    uint8_t *doc = u8_doc(PARTS_BIG, 3, &len);
    const size_t MiB = 1u << 20;
    tfp_uf_parts_t t;
    tfp_uf_hdr_t ph;
    raw_t r;
    raw_open(&r);

    /* in order: 1 MiB in the first frame, then 1 MiB, then the rest */
    ucp_ep_h ep = raw_admitted(&r);
    int before = r.replies;
    raw_put_first(&r, ep, 2, "parts-ok", doc, len, MiB, &t);
    for (int k = 0; !tfp_uf_parts_done(&t); k++) {
        uint64_t off = t.next;
        tfp_uf_parts_next(&t, MiB, &ph);
        raw_send_wait(&r, ep, &ph, doc + off, (size_t)ph.body_len);
    }
    ck_assert_msg(raw_reply_within(&r, before, 5000), "no reply to a put in parts");
    ck_assert_int_eq(r.last.status, TFP_OK);
    ck_assert_int_eq(r.last.http, 201);
    tf_client_t *h = client(TF_TRANSPORT_HTTP);
    tf_doc_t *got = NULL;
    ck_assert_int_eq(tf_get(h, url("parts"), 0, &got), TF_OK);
    ck_assert_uint_eq(tf_doc_at(got, 0)->nbytes, PARTS_BIG);
    ck_assert_mem_eq(tf_doc_at(got, 0)->data, doc + len - PARTS_BIG, PARTS_BIG);
    tf_doc_free(got);

    /* a gap: the endpoint fails, unanswered, and the reservation goes back */
    long long bad = metric("tfetch_ucx_bad_parts_total");
    ucp_ep_h gap = raw_admitted(&r);
    before = r.replies;
    raw_put_first(&r, gap, 2, "parts-gap", doc, len, MiB, &t);
    t.next += MiB;                      /* skips a MiB */
    uint64_t off = t.next;
    tfp_uf_parts_next(&t, MiB, &ph);
    raw_send_wait(&r, gap, &ph, doc + off, (size_t)ph.body_len);
    assert_settles("reserved", 1);
    ck_assert_int_eq(metric("tfetch_ucx_bad_parts_total"), bad + 1);
    ck_assert_msg(!raw_reply_within(&r, before, 300), "a failed endpoint was answered");

    /* a body that stops after its first part: 408 once the idle timeout (1 s) is over */
    ucp_ep_h stall = raw_admitted(&r);
    before = r.replies;
    uint64_t t0 = tfx_now_ms();
    raw_put_first(&r, stall, 2, "parts-stall", doc, len, MiB, &t);
    ck_assert_msg(raw_reply_within(&r, before, 5000), "no answer to a body that stopped");
    ck_assert_int_eq(r.last.status, TFP_EREQTIME);
    ck_assert_int_eq(r.last.http, 408);
    ck_assert_msg(strstr(r.last.msg, "no part of it"), "%s", r.last.msg);
    ck_assert_uint_ge(tfx_now_ms() - t0, 900);
    assert_settles("reserved", 2);
    /* a part that comes after the answer, and one of no request: dropped; the endpoint
     * still serves */
    long long dropped = metric("tfetch_ucx_dropped_total");
    off = t.next;
    tfp_uf_parts_next(&t, MiB, &ph);
    raw_send_wait(&r, stall, &ph, doc + off, (size_t)ph.body_len);
    ph.seq = 77;
    raw_send_wait(&r, stall, &ph, doc + off, (size_t)ph.body_len);
    raw_progress(&r, 100);
    ck_assert_int_eq(metric("tfetch_ucx_dropped_total"), dropped + 2);
    before = r.replies;
    raw_put_first(&r, stall, 3, "parts-again", doc, len, MiB, &t);
    while (!tfp_uf_parts_done(&t)) {
        off = t.next;
        tfp_uf_parts_next(&t, 2 * MiB, &ph);
        raw_send_wait(&r, stall, &ph, doc + off, (size_t)ph.body_len);
    }
    ck_assert_msg(raw_reply_within(&r, before, 5000), "no reply after the dropped parts");
    ck_assert_int_eq(r.last.http, 204);     /* replaced what parts-ok stored */
    ck_assert_int_eq(metric("tfetch_ucx_bad_parts_total"), bad + 1);

    raw_bye_close(&r, ep, NULL);
    raw_bye_close(&r, stall, NULL);
    raw_done(&r);
    assert_ucx_answers(3);
    tf_client_free(h);
    free(doc);
    teardown();
}
END_TEST

/* libtfetch says BYE when it lets a connection go (tf_client_free), so the daemon forgets
 * the endpoint at once. */
/* One GET of w over a raw endpoint, its frame's conditions block as given (flags 0: none);
 * the reply's frame into *out. */
static void raw_get(raw_t *r, ucp_ep_h ep, uint16_t flags, const char *if_none_match,
                    tfp_uf_hdr_t *out)
{
    static uint64_t seq = 10;
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_GET, ++seq);
    snprintf(h.request_id, sizeof h.request_id, "cond-%llu", (unsigned long long)seq);
    snprintf(h.name, sizeof h.name, "w");
    h.flags = flags;
    snprintf(h.cond.if_none_match, sizeof h.cond.if_none_match, "%s", if_none_match);
    uint8_t hbuf[TFP_UF_MAX_HEADER];
    int before = r->replies;
    void *rq = raw_send(ep, &h, NULL, 0, hbuf);
    for (int i = 0; i < 200 && r->replies == before; i++)
        raw_progress(r, 25);
    if (rq)
        ucp_request_free(rq);
    ck_assert_int_eq(r->replies, before + 1);
    ck_assert_uint_eq(r->last.seq, seq);
    *out = r->last;
}

/* The conditions block (flag COND) is answered only to a request that sent one: a client of
 * before, which refuses a frame with an unknown flag, never gets one. One that sends one,
 * even empty, gets the stored version's ETag, and with If-None-Match a 304. */
START_TEST(ucxfault_cond_only_when_asked)
{
    const char *why = why_skip();
    if (why) {
        fprintf(stderr, "ucxfault_cond_only_when_asked: skipped: %s\n", why);
        return;
    }
    ck_assert_msg(td_start(&D, NULL) == 0, "tfetchd did not start");
    tf_client_t *c = client(TF_TRANSPORT_HTTP);
    tf_doc_t *d = tf_doc_new();
    int64_t shape[1] = {4};
    uint8_t v[4] = {1, 2, 3, 4};
    ck_assert_int_eq(tf_doc_add(d, "w", TF_U8, 1, shape, v, sizeof v, TF_COPY), TF_OK);
    ck_assert_int_eq(tf_put(c, url("w"), d), TF_OK);
    char etag[64];
    snprintf(etag, sizeof etag, "%s", tf_client_last(c)->etag);
    ck_assert_msg(etag[0] == '"', "no ETag over HTTP: '%s'", etag);

    raw_t r;
    raw_open(&r);
    ucp_ep_h ep = raw_admitted(&r);
    tfp_uf_hdr_t rep;
    raw_get(&r, ep, 0, "", &rep);                       /* a client of before */
    ck_assert_int_eq(rep.status, TFP_OK);
    ck_assert_uint_eq(rep.http, 200);
    ck_assert_uint_eq(rep.flags & TFP_UF_F_COND, 0);
    raw_get(&r, ep, TFP_UF_F_COND, "", &rep);            /* an empty block: the version */
    ck_assert_uint_eq(rep.http, 200);
    ck_assert_uint_eq(rep.flags & TFP_UF_F_COND, TFP_UF_F_COND);
    ck_assert_str_eq(rep.cond.etag, etag);
    raw_get(&r, ep, TFP_UF_F_COND, etag, &rep);          /* unchanged: 304, no body */
    ck_assert_int_eq(rep.status, TFP_OK);
    ck_assert_uint_eq(rep.http, 304);
    ck_assert_uint_eq(rep.body_len, 0);
    ck_assert_str_eq(rep.cond.etag, etag);
    raw_bye_close(&r, ep, NULL);
    raw_done(&r);
    tf_doc_free(d);
    tf_client_free(c);
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}
END_TEST

START_TEST(ucxfault_client_says_bye)
{
    const char *why = why_skip();
    if (why) {
        fprintf(stderr, "ucxfault_client_says_bye: skipped: %s\n", why);
        return;
    }
    ck_assert_msg(td_start(&D, NULL) == 0, "tfetchd did not start");
    ck_assert_int_eq(metric("tfetch_ucx_byes_total"), 0);
    tf_client_t *c = client(TF_TRANSPORT_UCX);
    tf_doc_t *d = NULL;
    ck_assert_int_eq(tf_get(c, url("none"), 0, &d), TF_ENOTFOUND);
    tf_doc_free(d);
    tf_client_free(c);
    uint64_t deadline = tfx_now_ms() + SETTLE_MS;
    while (metric("tfetch_ucx_byes_total") < 1 && tfx_now_ms() < deadline)
        sleep_ms(20);
    ck_assert_int_eq(metric("tfetch_ucx_byes_total"), 1);
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}
END_TEST
#else
START_TEST(ucxfault_no_ucx)
{
    fputs("ucxfault: built without UCX: skipped\n", stderr);
}
END_TEST
#endif

Suite *suite_ucxfault(void)
{
    Suite *s = suite_create("ucxfault");
    TCase *tc = tcase_create("kill");
#ifdef HAVE_UCX
    tcase_add_test(tc, ucxfault_kill_mid_put);
    tcase_add_test(tc, ucxfault_kill_mid_get);
    tcase_set_timeout(tc, 300);
    TCase *bye = tcase_create("bye");
    tcase_add_test(bye, ucxfault_bye_mid_get);
    tcase_add_test(bye, ucxfault_bye_mid_put);
    tcase_add_test(bye, ucxfault_client_says_bye);
    tcase_add_test(bye, ucxfault_cond_only_when_asked);
    tcase_add_test(bye, ucxfault_parts);
    tcase_set_timeout(bye, 300);
    suite_add_tcase(s, bye);
#else
    tcase_add_test(tc, ucxfault_no_ucx);
#endif
    suite_add_tcase(s, tc);
    return s;
}
