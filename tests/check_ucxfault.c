/* check_ucxfault.c - the ucxfault suite: tfetchd's UCX side when its clients die. UCX clients
 * (the tfetch CLI, each a process of its own) are killed with SIGKILL in the middle of large
 * puts and gets, again and again; after each kill the daemon must give back what the request
 * held (the store reservation of a put, the blob a get was sending: `reserved` and `retired`
 * in /v1/info back to 0, no request left in flight) and keep answering new UCX clients, so a
 * stalled UCX progress thread fails the test too.
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
            ck_abort_msg("after kill %d: %s is %lld and %ld requests are in flight, %d ms on",
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
#else
    tcase_add_test(tc, ucxfault_no_ucx);
#endif
    suite_add_tcase(s, tc);
    return s;
}
