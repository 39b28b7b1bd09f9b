/* check_auth.c - end-to-end suite "authe2e": tfetchd with auth-tokens (port 0, the one
 * spawner in tests/fixtures.c), driven with curl and libtfetch. Every refusal: no token and
 * a malformed one (401 with WWW-Authenticate), an unknown token (401), another principal's
 * prefix and a name outside the prefix (403), a route without call, a worker registration
 * without serve, /metrics without admin, a token revoked by SIGHUP (401), a broken file on
 * SIGHUP (the old tokens kept), per-user state and replays isolated between principals that
 * send the same user id, the Shumai paths without shumai-principal (401), a UCX token
 * replayed by another principal or peer, a token revoked on an upgraded UCX connection; and
 * the upgrade offered with authentication on, libtfetch's rights over UCX, and the allowed
 * paths: filtered listings, /v1/info details for admin, the failure counters, the Shumai principal's rights, libtfetch with tf_client_set_token, the CLI with
 * --token and TFETCH_TOKEN. Each test starts its own daemon (Check forks per test).
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "client/tfetch.h"
#include "proto/auth.h"
#include "proto/upgrade.h"
#include "transports/hostid.h"

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static td_daemon_t D;
static char out[1 << 16];

static const char TOKENS[] =
    "# alice owns alice.*, calls accumulate only, is the admin\n"
    "tka-1f2e3d alice read:alice.* write:alice.* delete:alice.* call:accumulate admin:*\n"
    "tkb-9a8b bob read:bob.* write:bob.* call:* serve:bob.*\n"
    "tkc carol read:*   # reads everything, writes nothing\n";

static const char *token_file;

static void start_with(const char *tokens, const char *shumai)
{
    token_file = td_tmpfile(3, tokens, strlen(tokens));
    const char *args[] = {"--auth-tokens", token_file, shumai ? "--shumai-principal" : NULL,
                          shumai, NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
}

static void start(void) { start_with(TOKENS, NULL); }

static void stop_clean(void)
{
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}

/* curl -sS -D (headers to hdrs) with extra args; returns the status, the body in out. */
static char hdrs[8192];
static int curl(const char *args, const char *path)
{
    char cmd[8192], code[16];
    snprintf(cmd, sizeof cmd, "curl -sS -o /tmp/tf-auth-body-%d -D /tmp/tf-auth-head-%d "
             "-w '%%{http_code}' %s '%s%s'", (int)getpid(), (int)getpid(), args, D.base, path);
    int rc = td_run(cmd, code, sizeof code);
    ck_assert_msg(rc == 0, "curl failed (%d): %s", rc, cmd);
    snprintf(cmd, sizeof cmd, "cat /tmp/tf-auth-body-%d", (int)getpid());
    td_run(cmd, out, sizeof out);
    snprintf(cmd, sizeof cmd, "cat /tmp/tf-auth-head-%d; rm -f /tmp/tf-auth-head-%d "
             "/tmp/tf-auth-body-%d", (int)getpid(), (int)getpid(), (int)getpid());
    td_run(cmd, hdrs, sizeof hdrs);
    return atoi(code);
}

/* curl as token (NULL: none) with args. */
static int as(const char *token, const char *args, const char *path)
{
    char a[4096];
    if (token)
        snprintf(a, sizeof a, "-H 'Authorization: Bearer %s' %s", token, args);
    else
        snprintf(a, sizeof a, "%s", args);
    return curl(a, path);
}

static int put_f32(const char *token, const char *name)
{
    float v[2] = {1, 2};
    const char *f = td_tmpfile(0, v, sizeof v);
    char args[512], path[300];
    snprintf(args, sizeof args, "-X PUT --data-binary @%s -H 'Tfetch-Dtype: F32' "
             "-H 'Tfetch-Shape: 2'", f);
    snprintf(path, sizeof path, "/v1/tensors/%s", name);
    return as(token, args, path);
}

/* POSTs a raw I32 vector to a route as token and user, with request id rid (NULL: none). */
static int call_i32(const char *token, const char *route, const char *user, const char *rid,
                    int32_t a, int32_t b)
{
    int32_t v[2] = {a, b};
    const char *f = td_tmpfile(1, v, sizeof v);
    char args[1024], path[300];
    int k = snprintf(args, sizeof args, "-X POST --data-binary @%s -H 'Tfetch-Dtype: I32' "
                     "-H 'Tfetch-Shape: 2' -H 'Accept: application/json'", f);
    if (user)
        k += snprintf(args + k, sizeof args - (size_t)k, " -H 'Tfetch-User: %s'", user);
    if (rid)
        snprintf(args + k, sizeof args - (size_t)k, " -H 'Tfetch-Request-Id: %s'", rid);
    snprintf(path, sizeof path, "/v1/call/%s", route);
    return as(token, args, path);
}

static long metric(const char *reason)
{
    ck_assert_int_eq(as("tka-1f2e3d", "", "/metrics"), 200);
    char key[128];
    snprintf(key, sizeof key, "tfetch_auth_failures_total{reason=\"%s\"} ", reason);
    const char *p = strstr(out, key);
    ck_assert_msg(p != NULL, "no %s in /metrics", key);
    return atol(p + strlen(key));
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

START_TEST(test_missing_and_unknown_token)
{
    start();
    ck_assert_int_eq(put_f32("tka-1f2e3d", "alice.w"), 201);
    ck_assert_int_eq(as(NULL, "", "/v1/tensors/alice.w"), 401);
    ck_assert_msg(strstr(out, "TF_EUNAUTH"), "%s", out);
    ck_assert_msg(strstr(hdrs, "WWW-Authenticate: Bearer realm=\"tfetch\""), "%s", hdrs);
    ck_assert_int_eq(as("tka-1f2e3", "", "/v1/tensors/alice.w"), 401);     /* a prefix */
    ck_assert_msg(strstr(out, "unknown token") && !strstr(out, "tka"), "%s", out);
    ck_assert_int_eq(curl("-H 'Authorization: Basic YWxpY2U6eA=='", "/v1/tensors/alice.w"), 401);
    ck_assert_int_eq(curl("-H 'Authorization: Bearer'", "/v1/tensors/alice.w"), 401);
    ck_assert_int_eq(as(NULL, "", "/v1/tensors"), 401);
    ck_assert_int_eq(as(NULL, "", "/v1/info"), 401);
    ck_assert_int_eq(as(NULL, "", "/metrics"), 401);
    ck_assert_int_eq(as(NULL, "", "/v1/nothing-here"), 401);   /* no hint what exists */
    ck_assert_int_eq(as(NULL, "-X PUT -d x", "/v1/tensors/alice.w"), 401);
    ck_assert_int_eq(as(NULL, "", "/healthz"), 200);
    ck_assert_int_eq(as(NULL, "", "/readyz"), 200);
    ck_assert_int_eq(as("tka-1f2e3d", "", "/v1/tensors/alice.w"), 200);
    ck_assert_int_eq(metric("missing"), 8);
    ck_assert_int_eq(metric("unknown"), 1);
    ck_assert_int_eq(metric("forbidden"), 0);
    /* the token is never logged */
    char cmd[512], log[4096];
    snprintf(cmd, sizeof cmd, "grep -c 'tka-1f2e3\\|tkb-9a8b' %s || true", D.log_path);
    td_run(cmd, log, sizeof log);
    ck_assert_str_eq(log, "0\n");
    stop_clean();
}
END_TEST

START_TEST(test_rights_on_names)
{
    start();
    ck_assert_int_eq(put_f32("tka-1f2e3d", "alice.w"), 201);
    ck_assert_int_eq(put_f32("tkb-9a8b", "bob.w"), 201);
    /* another principal's prefix */
    ck_assert_int_eq(as("tkb-9a8b", "", "/v1/tensors/alice.w"), 403);
    ck_assert_msg(strstr(out, "TF_EFORBIDDEN") && strstr(out, "principal bob has no read right "
                  "on 'alice.w'"), "%s", out);
    ck_assert_int_eq(put_f32("tkb-9a8b", "alice.w"), 403);
    ck_assert_int_eq(as("tkb-9a8b", "-X DELETE", "/v1/tensors/alice.w"), 403);
    /* a name outside the prefix, even one nobody holds */
    ck_assert_int_eq(put_f32("tka-1f2e3d", "alicew"), 403);
    ck_assert_int_eq(put_f32("tka-1f2e3d", "shared"), 403);
    /* read without write or delete */
    ck_assert_int_eq(as("tkc", "", "/v1/tensors/alice.w"), 200);
    ck_assert_int_eq(put_f32("tkc", "carol.x"), 403);
    ck_assert_int_eq(as("tkc", "-X DELETE", "/v1/tensors/bob.w"), 403);
    ck_assert_int_eq(as("tkb-9a8b", "-X DELETE", "/v1/tensors/bob.w"), 403);  /* no delete */
    ck_assert_int_eq(as("tka-1f2e3d", "-X DELETE", "/v1/tensors/alice.w"), 204);
    ck_assert_int_eq(put_f32("tka-1f2e3d", "alice.w"), 201);
    /* listings show only what the principal may read */
    ck_assert_int_eq(as("tkb-9a8b", "", "/v1/tensors"), 200);
    ck_assert_msg(strstr(out, "\"bob.w\"") && !strstr(out, "alice.w"), "%s", out);
    ck_assert_int_eq(as("tka-1f2e3d", "", "/v1/tensors"), 200);
    ck_assert_msg(!strstr(out, "\"bob.w\"") && strstr(out, "alice.w"), "%s", out);
    ck_assert_int_eq(as("tkc", "", "/v1/tensors"), 200);
    ck_assert_msg(strstr(out, "\"bob.w\"") && strstr(out, "alice.w"), "%s", out);
    /* admin: /metrics, /v1/info's details */
    ck_assert_int_eq(as("tkb-9a8b", "", "/metrics"), 403);
    ck_assert_int_eq(as("tkb-9a8b", "", "/v1/info"), 200);
    ck_assert_msg(strstr(out, "\"auth\":\"bearer\"") && !strstr(out, "\"limits\""), "%s", out);
    ck_assert_int_eq(as("tka-1f2e3d", "", "/v1/info"), 200);
    ck_assert_msg(strstr(out, "\"limits\""), "%s", out);
    ck_assert_int_eq(metric("forbidden"), 9);
    stop_clean();
}
END_TEST

/* The access log names the principal (never the token). */
START_TEST(test_access_log_principal)
{
    token_file = td_tmpfile(3, TOKENS, strlen(TOKENS));
    char logp[128];
    snprintf(logp, sizeof logp, "/tmp/tf-auth-access-%d.log", (int)getpid());
    unlink(logp);
    const char *args[] = {"--auth-tokens", token_file, "--access-log", logp, NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
    ck_assert_int_eq(as("tkb-9a8b", "-H 'Tfetch-User: u7'", "/v1/tensors/alice.w"), 403);
    ck_assert_int_eq(as(NULL, "", "/v1/tensors/alice.w"), 401);
    stop_clean();
    char cmd[512], log[8192];
    snprintf(cmd, sizeof cmd, "cat %s; rm -f %s", logp, logp);
    td_run(cmd, log, sizeof log);
    ck_assert_msg(strstr(log, "\"user\":\"u7\",\"principal\":\"bob\"") &&
                  strstr(log, "\"status\":401") && !strstr(log, "tkb"), "%s", log);
}
END_TEST

START_TEST(test_call_and_serve)
{
    start();
    ck_assert_int_eq(call_i32("tkb-9a8b", "echo", NULL, NULL, 1, 2), 200);
    ck_assert_int_eq(call_i32("tka-1f2e3d", "echo", NULL, NULL, 1, 2), 403);   /* no call */
    ck_assert_msg(strstr(out, "no call right on 'echo'"), "%s", out);
    ck_assert_int_eq(call_i32("tkc", "accumulate", NULL, NULL, 1, 2), 403);
    ck_assert_int_eq(call_i32("tka-1f2e3d", "accumulate", NULL, NULL, 1, 2), 200);
    const char *reg = "-X POST -H 'Content-Type: application/json' -d '{\"routes\":[\"%s\"]}'";
    char args[512];
    snprintf(args, sizeof args, reg, "alice.r");
    ck_assert_int_eq(as("tka-1f2e3d", args, "/v1/workers"), 403);       /* no serve at all */
    snprintf(args, sizeof args, reg, "carol.r");
    ck_assert_int_eq(as("tkb-9a8b", args, "/v1/workers"), 403);         /* serve:bob.* only */
    ck_assert_msg(strstr(out, "no serve right on 'carol.r'"), "%s", out);
    ck_assert_int_eq(as(NULL, args, "/v1/workers"), 401);
    snprintf(args, sizeof args, reg, "bob.r");
    ck_assert_int_eq(as("tkb-9a8b", args, "/v1/workers"), 201);
    ck_assert_int_eq(as("tka-1f2e3d", "", "/v1/workers/x/next"), 403);
    stop_clean();
}
END_TEST

/* A worker is bound to the principal that registered it: another principal with serve on
 * the same routes and the worker's secret still cannot poll, answer or leave for it. */
START_TEST(test_worker_bound_to_principal)
{
    start_with("tkb bob serve:bob.* call:bob.*\ntkd dave serve:bob.*\n", NULL);
    ck_assert_int_eq(as("tkb", "-X POST -H 'Content-Type: application/json' "
                        "-d '{\"routes\":[\"bob.r\"]}'", "/v1/workers"), 201);
    char id[64] = "", secret[80] = "";
    const char *p = strstr(out, "\"worker\":\"");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(sscanf(p + 10, "%63[^\"]", id), 1);
    p = strstr(out, "\"secret\":\"");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(sscanf(p + 10, "%79[^\"]", secret), 1);
    char args[512], path[256];
    snprintf(args, sizeof args, "-H 'Tfetch-Worker-Secret: %s'", secret);
    snprintf(path, sizeof path, "/v1/workers/%s/next?wait=0", id);
    ck_assert_int_eq(as("tkd", args, path), 403);
    ck_assert_msg(strstr(out, "registered by another principal (not dave)"), "%s", out);
    snprintf(path, sizeof path, "/v1/workers/%s/calls/c1", id);
    char rargs[640];
    snprintf(rargs, sizeof rargs, "%s -X POST -H 'Content-Type: application/json' "
             "-d '{\"error\":\"x\",\"code\":\"TF_EINTERNAL\"}'", args);
    ck_assert_int_eq(as("tkd", rargs, path), 403);
    ck_assert_msg(strstr(out, "registered by another principal"), "%s", out);
    snprintf(path, sizeof path, "/v1/workers/%s", id);
    snprintf(rargs, sizeof rargs, "%s -X DELETE", args);
    ck_assert_int_eq(as("tkd", rargs, path), 403);
    /* bob, its registrant: served */
    snprintf(path, sizeof path, "/v1/workers/%s/next?wait=0", id);
    ck_assert_int_eq(as("tkb", args, path), 204);
    snprintf(path, sizeof path, "/v1/workers/%s", id);
    ck_assert_int_eq(as("tkb", rargs, path), 204);
    stop_clean();
}
END_TEST

#define FEED_DECL "-X PUT -H 'Content-Type: application/json' -d '{\"devices\":1," \
    "\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[2]}]}'"

/* Feeds with authentication on: produce, consume and read on feed patterns; the declaring
 * principal owns a feed and feeds-per-user counts per principal; listings are filtered. */
START_TEST(test_feeds_per_principal)
{
    static const char toks[] = "tka alice produce:alice.* read:alice.*\n"
                               "tkc carol consume:alice.* read:alice.*\n"
                               "tkb bob produce:bob.* consume:bob.* read:bob.*\n";
    token_file = td_tmpfile(3, toks, strlen(toks));
    const char *args[] = {"--auth-tokens", token_file, "--feeds-per-user", "1", NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
    ck_assert_int_eq(as("tka", FEED_DECL " -H 'Tfetch-User: u1'", "/v1/feeds/alice.f"), 201);
    ck_assert_msg(strstr(out, "\"owner\":\"alice\""), "%s", out);
    /* one feed per principal, whatever user it sends */
    ck_assert_int_eq(as("tka", FEED_DECL " -H 'Tfetch-User: u2'", "/v1/feeds/alice.g"), 507);
    ck_assert_int_eq(as("tkb", FEED_DECL " -H 'Tfetch-User: u1'", "/v1/feeds/bob.f"), 201);
    /* produce on another's feed; declare without produce */
    ck_assert_int_eq(as("tkb", FEED_DECL, "/v1/feeds/alice.h"), 403);
    ck_assert_int_eq(as("tkc", FEED_DECL, "/v1/feeds/alice.h"), 403);
    float v[2] = {1, 2};
    const char *f = td_tmpfile(0, v, sizeof v);
    char in[512];
    snprintf(in, sizeof in, "-X POST --data-binary @%s -H 'Content-Type: application/octet-stream'"
             " -H 'Tfetch-Dtype: F32' -H 'Tfetch-Shape: 2'", f);
    ck_assert_int_eq(as("tkb", in, "/v1/feeds/alice.f/devices/0/infeed"), 403);
    ck_assert_int_eq(as("tka", in, "/v1/feeds/alice.f/devices/0/infeed"), 201);
    /* pop: consume on the feed */
    const char *pop = "-X POST -H 'Tfetch-Consumer: c1'";
    ck_assert_int_eq(as("tka", pop, "/v1/feeds/alice.f/devices/0/pop"), 403);
    ck_assert_msg(strstr(out, "no consume right on 'alice.f'"), "%s", out);
    ck_assert_int_eq(as("tkb", pop, "/v1/feeds/alice.f/devices/0/pop"), 403);
    ck_assert_int_eq(as(NULL, pop, "/v1/feeds/alice.f/devices/0/pop"), 401);
    ck_assert_int_eq(as("tkc", pop, "/v1/feeds/alice.f/devices/0/pop"), 200);
    /* listings show only the feeds one may read */
    ck_assert_int_eq(as("tkb", "", "/v1/feeds"), 200);
    ck_assert_msg(strstr(out, "bob.f") && !strstr(out, "alice.f"), "%s", out);
    ck_assert_int_eq(as("tkc", "", "/v1/feeds"), 200);
    ck_assert_msg(!strstr(out, "bob.f") && strstr(out, "alice.f"), "%s", out);
    /* stats: read; delete: produce */
    ck_assert_int_eq(as("tkb", "", "/v1/feeds/alice.f"), 403);
    ck_assert_int_eq(as("tkc", "-X DELETE", "/v1/feeds/alice.f"), 403);
    ck_assert_int_eq(as("tka", "-X DELETE", "/v1/feeds/alice.f"), 204);
    stop_clean();
}
END_TEST

/* Tokens for the consumer tests: alice produces and consumes f*, bob consumes f* too, carol
 * administers them (and may read, never consume). */
static const char CONSUMERS[] = "tka alice produce:f* consume:f* read:f*\n"
                                "tkb bob consume:f* read:f*\n"
                                "tkc carol read:f* admin:f*\n";

/* alice declares f and pushes two items, then pops the first as consumer c1. */
static void consumer_c1_attached(void)
{
    ck_assert_int_eq(as("tka", FEED_DECL, "/v1/feeds/f"), 201);
    float v[2] = {1, 2};
    const char *f = td_tmpfile(0, v, sizeof v);
    char in[512];
    snprintf(in, sizeof in, "-X POST --data-binary @%s -H 'Content-Type: application/octet-stream'"
             " -H 'Tfetch-Dtype: F32' -H 'Tfetch-Shape: 2'", f);
    ck_assert_int_eq(as("tka", in, "/v1/feeds/f/devices/0/infeed"), 201);
    ck_assert_int_eq(as("tka", in, "/v1/feeds/f/devices/0/infeed"), 201);
    ck_assert_int_eq(as("tka", "-X POST -H 'Tfetch-Consumer: c1'", "/v1/feeds/f/devices/0/pop"),
                     200);
}

/* Nothing of alice's was acknowledged, and c1 is still hers: she pops item 2. */
static void c1_still_alices(void)
{
    ck_assert_int_eq(as("tka", "", "/v1/feeds/f"), 200);
    ck_assert_msg(strstr(out, "\"released\":0") && strstr(out, "\"consumer\":\"c1\""), "%s",
                  out);
    ck_assert_int_eq(as("tka", "-X POST -H 'Tfetch-Consumer: c1' -H 'Accept: application/json'",
                        "/v1/feeds/f/devices/0/pop"), 200);
    ck_assert_msg(strstr(hdrs, "Tfetch-Position: 2"), "%s", hdrs);
}

/* A consumer id belongs to the principal that attached it. bob, who may consume the feed
 * too, learns c1 neither from the stats nor from a 409, and naming it (pop, ack, detach) is
 * 403 naming nothing of alice; the stats show it to alice and to carol (admin). */
START_TEST(test_feed_consumer_is_the_principals)
{
    start_with(CONSUMERS, NULL);
    consumer_c1_attached();
    ck_assert_int_eq(as("tkb", "", "/v1/feeds/f"), 200);
    ck_assert_msg(!strstr(out, "c1") && strstr(out, "\"consumer\":\"(another principal's)\""),
                  "%s", out);
    ck_assert_int_eq(as("tkc", "", "/v1/feeds/f"), 200);
    ck_assert_msg(strstr(out, "\"consumer\":\"c1\""), "%s", out);
    ck_assert_int_eq(as("tkb", "-X POST -H 'Tfetch-Consumer: c2'", "/v1/feeds/f/devices/0/pop"),
                     409);
    ck_assert_msg(!strstr(out, "c1") && strstr(out, "another principal's consumer"), "%s", out);
    ck_assert_int_eq(as("tkb", "-X POST -H 'Tfetch-Consumer: c1'",
                        "/v1/feeds/f/devices/0/pop?ack=2"), 403);
    ck_assert_msg(strstr(out, "TF_EFORBIDDEN") && !strstr(out, "alice"), "%s", out);
    ck_assert_int_eq(as("tkb", "-X POST -H 'Tfetch-Consumer: c1'",
                        "/v1/feeds/f/devices/0/ack?through=2"), 403);
    ck_assert_msg(!strstr(out, "alice"), "%s", out);
    ck_assert_int_eq(as("tkb", "-X POST -H 'Tfetch-Consumer: c1'",
                        "/v1/feeds/f/devices/0/detach?ack=2"), 403);
    ck_assert_msg(!strstr(out, "alice"), "%s", out);
    c1_still_alices();
    stop_clean();
}
END_TEST

/* alice and bob both send user u1 and request id r1: neither sees the other's state. */
START_TEST(test_state_per_principal)
{
    start_with("tka alice call:accumulate\ntkb bob call:accumulate\n", NULL);
    ck_assert_int_eq(call_i32("tka", "accumulate", "u1", NULL, 1, 2), 200);
    ck_assert_int_eq(call_i32("tka", "accumulate", "u1", NULL, 1, 2), 200);
    ck_assert_msg(strstr(out, "[2,4]"), "%s", out);
    ck_assert_int_eq(call_i32("tkb", "accumulate", "u1", NULL, 10, 20), 200);
    ck_assert_msg(strstr(out, "[10,20]"), "bob sees alice's u1: %s", out);
    /* ending bob's u1 leaves alice's */
    ck_assert_int_eq(as("tkb", "-X DELETE -H 'Tfetch-User: u1'", "/v1/sessions/self"), 204);
    ck_assert_int_eq(call_i32("tka", "accumulate", "u1", NULL, 1, 1), 200);
    ck_assert_msg(strstr(out, "[3,5]"), "%s", out);
    /* the replay window */
    ck_assert_int_eq(call_i32("tka", "accumulate", "u2", "r1", 5, 5), 200);
    ck_assert_int_eq(call_i32("tkb", "accumulate", "u2", "r1", 7, 7), 200);
    ck_assert_msg(strstr(out, "[7,7]") && !strstr(hdrs, "Tfetch-Replayed"), "%s", out);
    ck_assert_int_eq(call_i32("tka", "accumulate", "u2", "r1", 5, 5), 200);
    ck_assert_msg(strstr(out, "[5,5]") && strstr(hdrs, "Tfetch-Replayed: 1"), "%s", hdrs);
    stop_clean();
}
END_TEST

/* call_i32 with Tfetch-User-Principal: of (the principal whose user `user` is). */
static int call_for(const char *token, const char *of, const char *user, int32_t a, int32_t b)
{
    int32_t v[2] = {a, b};
    const char *f = td_tmpfile(1, v, sizeof v);
    char args[1024];
    snprintf(args, sizeof args, "-X POST --data-binary @%s -H 'Tfetch-Dtype: I32' "
             "-H 'Tfetch-Shape: 2' -H 'Accept: application/json' -H 'Tfetch-User: %s' "
             "-H 'Tfetch-User-Principal: %s'", f, user, of);
    return as(token, args, "/v1/call/accumulate");
}

/* A principal's own users are every user id it sends; another principal's user (named by
 * Tfetch-User-Principal) takes forward on that principal, and its state is that principal's. */
START_TEST(test_forward)
{
    start_with("tkg gw call:accumulate forward:team.*\n"
               "tka alice call:accumulate\n"
               "tkt team.x call:accumulate\n", NULL);
    ck_assert_int_eq(call_i32("tka", "accumulate", "u1", NULL, 1, 2), 200);
    ck_assert_int_eq(call_for("tka", "alice", "u1", 1, 2), 200);       /* its own, named */
    ck_assert_msg(strstr(out, "[2,4]"), "%s", out);
    /* without forward: 403, whatever user */
    ck_assert_int_eq(call_for("tka", "team.x", "u1", 1, 2), 403);
    ck_assert_msg(strstr(out, "principal alice has no forward right on 'team.x'"), "%s", out);
    ck_assert_int_eq(call_i32("tkt", "accumulate", "u1", NULL, 5, 5), 200);
    /* the gateway acts for team.x's u1: team.x's state */
    ck_assert_int_eq(call_for("tkg", "team.x", "u1", 1, 1), 200);
    ck_assert_msg(strstr(out, "[6,6]"), "gateway did not reach team.x's u1: %s", out);
    ck_assert_int_eq(call_i32("tkt", "accumulate", "u1", NULL, 1, 1), 200);
    ck_assert_msg(strstr(out, "[7,7]"), "%s", out);
    /* forward:team.* does not cover alice; the gateway's own u1 is its own */
    ck_assert_int_eq(call_for("tkg", "alice", "u1", 1, 1), 403);
    ck_assert_msg(strstr(out, "no forward right on 'alice'"), "%s", out);
    ck_assert_int_eq(call_i32("tkg", "accumulate", "u1", NULL, 9, 9), 200);
    ck_assert_msg(strstr(out, "[9,9]"), "%s", out);
    /* hostile values; no token at all */
    ck_assert_int_eq(call_for("tkg", "a/b", "u1", 1, 1), 400);
    ck_assert_msg(strstr(out, "Tfetch-User-Principal must match"), "%s", out);
    ck_assert_int_eq(call_for(NULL, "team.x", "u1", 1, 1), 401);
    stop_clean();
}
END_TEST

START_TEST(test_sighup_reload)
{
    start();
    ck_assert_int_eq(as("tkc", "", "/v1/tensors"), 200);
    /* revoke carol */
    const char *next = "tka-1f2e3d alice read:alice.*\ntkb-9a8b bob read:bob.*\n";
    FILE *f = fopen(token_file, "w");
    ck_assert_ptr_nonnull(f);
    fputs(next, f);
    fclose(f);
    kill(D.pid, SIGHUP);
    int st = 0;
    for (int i = 0; i < 100 && (st = as("tkc", "", "/v1/tensors")) != 401; i++)
        sleep_ms(50);
    ck_assert_int_eq(st, 401);
    ck_assert_int_eq(as("tkb-9a8b", "", "/v1/tensors"), 200);
    /* a broken file keeps the tokens read before */
    f = fopen(token_file, "w");
    ck_assert_ptr_nonnull(f);
    fputs("tkb-9a8b bob read:bob.*\ntkz zed bogus:x\n", f);
    fclose(f);
    kill(D.pid, SIGHUP);
    char cmd[512], log[4096] = "";
    snprintf(cmd, sizeof cmd, "grep -c 'line 2: unknown right' %s || true", D.log_path);
    for (int i = 0; i < 100; i++) {
        td_run(cmd, log, sizeof log);
        if (atoi(log) > 0)
            break;
        sleep_ms(50);
    }
    ck_assert_int_gt(atoi(log), 0);
    ck_assert_int_eq(as("tka-1f2e3d", "", "/v1/tensors"), 200);    /* still there */
    ck_assert_int_eq(as("tkz", "", "/v1/tensors"), 401);
    stop_clean();
}
END_TEST

/* The times the daemon's log holds needle. */
static int logged(const char *needle)
{
    char cmd[512], log[64] = "";
    snprintf(cmd, sizeof cmd, "grep -c -F -e '%s' %s || true", needle, D.log_path);
    td_run(cmd, log, sizeof log);
    return atoi(log);
}

/* Sends SIGHUP and waits (5 s) until the daemon has read the token file again (its log
 * says so, done or refused). */
static void sighup_read(void)
{
    int before = logged("SIGHUP: auth-tokens");
    kill(D.pid, SIGHUP);
    for (int i = 0; i < 100 && logged("SIGHUP: auth-tokens") == before; i++)
        sleep_ms(50);
    ck_assert_msg(logged("SIGHUP: auth-tokens") > before, "SIGHUP: the token file not read");
}

/* Writes text over the token file in place (the way an editor may), mode kept. */
static void overwrite_tokens(const void *text, size_t len)
{
    FILE *f = fopen(token_file, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    fclose(f);
}

/* SIGHUP, then bob still writes and carol (tkc) still lists: the old table holds. */
static void reload_keeps_old(void)
{
    sighup_read();
    ck_assert_int_eq(put_f32("tkb-9a8b", "bob.x"), 204);
    ck_assert_int_eq(as("tkc", "", "/v1/tensors"), 200);
}

/* A SIGHUP that lands while the file is being written in place (empty, or cut in the middle
 * of a line) or on a garbled one keeps the table read before: every principal keeps its
 * rights, and the log says why. A cut that still parses (bob's write:bob.* cut to write:b)
 * would otherwise take bob's right away. */
START_TEST(test_sighup_partial_file_keeps_old)
{
    start();
    ck_assert_int_eq(put_f32("tkb-9a8b", "bob.x"), 201);
    overwrite_tokens("", 0);
    reload_keeps_old();
    ck_assert_int_eq(logged("no token or cert: line"), 1);
    static const char cut[] = "tka-1f2e3d alice read:alice.*\ntkb-9a8b bob read:bob.* write:b";
    overwrite_tokens(cut, strlen(cut));
    reload_keeps_old();
    ck_assert_int_eq(logged("the last line has no newline"), 1);
    static const char junk[] = "tkb-9a8b bob read:bob.*\n\x01\xff\x7f garbage\n";
    overwrite_tokens(junk, strlen(junk));
    reload_keeps_old();
    ck_assert_int_eq(logged("kept the tokens read before"), 3);
    /* and a whole file, renamed into place, is read */
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s.new", token_file);
    FILE *f = fopen(tmp, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fchmod(fileno(f), 0600), 0);
    fputs("tkb-9a8b bob read:bob.*\n", f);
    fclose(f);
    ck_assert_int_eq(rename(tmp, token_file), 0);
    sighup_read();
    ck_assert_int_eq(put_f32("tkb-9a8b", "bob.x"), 403);
    ck_assert_int_eq(as("tkc", "", "/v1/tensors"), 401);
    ck_assert_int_eq(logged("read again: 1 tokens"), 1);
    stop_clean();
}
END_TEST

/* tfetchd with the token file at mode (and, uid/gid not -1, that owner): 0 if it started. */
static int start_mode(mode_t mode, long uid, long gid, char *log, size_t log_size)
{
    token_file = td_tmpfile(3, TOKENS, strlen(TOKENS));
    ck_assert_int_eq(chmod(token_file, mode), 0);
    if (uid >= 0 || gid >= 0)
        ck_assert_int_eq(chown(token_file, (uid_t)uid, (gid_t)gid), 0);
    const char *args[] = {"--auth-tokens", token_file, NULL};
    td_opts_t o = {.args = args, .start_ms = 10000};
    int rc = td_start_opts(&D, &o);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cat %s", D.log_path);
    td_run(cmd, log, log_size);
    if (rc != 0) {
        unlink(D.log_path);
        td_cleanup();
    }
    return rc;
}

/* A token file other users may read (0644, 0666), a group may write, or another user owns
 * is refused at start (tfetchd exits, saying why) and on SIGHUP (the tokens read before
 * stay). Read by a group tfetchd is in (a dedicated tokens group): accepted. */
START_TEST(test_token_file_must_be_private)
{
    char log[8192];
    ck_assert_int_ne(start_mode(0644, -1, -1, log, sizeof log), 0);
    ck_assert_msg(strstr(log, "mode 0644 lets every user read or write the bearer tokens"), "%s",
                  log);
    ck_assert_int_ne(start_mode(0666, -1, -1, log, sizeof log), 0);
    ck_assert_msg(strstr(log, "mode 0666"), "%s", log);
    ck_assert_int_ne(start_mode(0620, -1, -1, log, sizeof log), 0);      /* group-writable */
    ck_assert_msg(strstr(log, "mode 0620"), "%s", log);
    if (geteuid() == 0) {       /* root can give the file away */
        ck_assert_int_ne(start_mode(0600, 65534, -1, log, sizeof log), 0);
        ck_assert_msg(strstr(log, "owned by uid 65534"), "%s", log);
        ck_assert_int_ne(start_mode(0640, -1, 65534, log, sizeof log), 0);
        ck_assert_msg(strstr(log, "mode 0640 lets another group read"), "%s", log);
    }
    /* its own group may read it */
    ck_assert_int_eq(start_mode(0640, -1, (long)getegid(), log, sizeof log), 0);
    ck_assert_int_eq(as("tkc", "", "/v1/tensors"), 200);
    /* SIGHUP: loosened, it is refused and the old tokens stay */
    overwrite_tokens("tkb-9a8b bob read:bob.*\n", 24);
    ck_assert_int_eq(chmod(token_file, 0644), 0);
    sighup_read();
    ck_assert_int_eq(as("tkc", "", "/v1/tensors"), 200);
    ck_assert_int_eq(logged("mode 0644 lets every user read"), 1);
    ck_assert_int_eq(chmod(token_file, 0600), 0);
    sighup_read();
    ck_assert_int_eq(as("tkc", "", "/v1/tensors"), 401);
    ck_assert_int_eq(logged("read again: 1 tokens"), 1);
    stop_clean();
}
END_TEST

/* GET /NAME (Shumai's path) with Shumai's bytes; returns the status. */
START_TEST(test_shumai_refused)
{
    start();
    ck_assert_int_eq(put_f32("tka-1f2e3d", "alice.w"), 201);
    ck_assert_int_eq(as(NULL, "", "/alice.w"), 401);
    ck_assert_msg(strstr(out, "shumai-principal"), "%s", out);
    ck_assert_int_eq(as("tkc", "", "/alice.w"), 200);     /* a client that can send one */
    stop_clean();
}
END_TEST

START_TEST(test_shumai_principal)
{
    start_with(TOKENS, "carol");
    ck_assert_int_eq(put_f32("tka-1f2e3d", "alice.w"), 201);
    ck_assert_int_eq(as(NULL, "", "/alice.w"), 200);      /* carol reads everything */
    ck_assert_int_eq(as(NULL, "-X POST --data-binary @/dev/null", "/echo"), 403);   /* no call */
    ck_assert_int_eq(as(NULL, "", "/v1/tensors/alice.w"), 401);     /* only Shumai's paths */
    ck_assert_int_eq(as("bogus", "", "/alice.w"), 401);
    stop_clean();
}
END_TEST

/* POST /v1/upgrade as token (NULL: none) for this host's identity; the status, the offer
 * parsed into *resp when 200 and upgraded. */
static int upgrade_for(const char *token, unsigned transports, tfp_up_resp_t *resp)
{
    tfp_up_req_t q = {.transports = transports, .policy = TFP_UP_POLICY_UCX};
    tfp_err_t err;
    ck_assert_int_eq(tfx_hostid_get(&q.host, &err), TFP_OK);
    char *json = NULL;
    size_t len = 0;
    ck_assert_int_eq(tfp_up_req_build(&q, &json, &len, &err), TFP_OK);
    const char *f = td_tmpfile(0, json, len);
    free(json);
    char args[512];
    snprintf(args, sizeof args, "-X POST -H 'Content-Type: application/json' --data-binary @%s", f);
    int st = as(token, args, "/v1/upgrade");
    if (resp) {
        memset(resp, 0, sizeof *resp);
        if (st == 200)
            ck_assert_int_eq(tfp_up_resp_parse(out, strlen(out), resp, &err), TFP_OK);
    }
    return st;
}

static int upgrade_as(const char *token, tfp_up_resp_t *resp)
{
    return upgrade_for(token, TFP_UP_T_UCX, resp);
}

static void rewrite_tokens(const char *text)
{
    FILE *f = fopen(token_file, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    kill(D.pid, SIGHUP);
}

/* The upgrade is offered with authentication on; the one-time token is issued to the
 * principal that asked. */
START_TEST(test_upgrade_authed)
{
    start();
    tfp_up_resp_t resp;
    ck_assert_int_eq(upgrade_as(NULL, NULL), 401);
    ck_assert_int_eq(upgrade_as("tkc", &resp), 200);
#ifdef HAVE_UCX
    ck_assert_msg(resp.upgraded == 1, "%s", resp.reason);
    ck_assert_msg(strstr(hdrs, "Tfetch-Upgrade: ucx"), "%s", hdrs);
#else
    ck_assert_msg(strstr(resp.reason, "without UCX"), "%s", resp.reason);
#endif
    tfp_up_resp_clear(&resp);
    stop_clean();
}
END_TEST

#ifdef HAVE_UCX
#include <sys/mman.h>

#include "proto/shmframe.h"
#include "transports/buf.h"
#include "transports/shm.h"
#include "transports/ucx_client.h"

/* HELLO with the upgrade token of resp, for host h, proving bearer (NULL: no proof). */
static tfp_status_t hello(tfx_ucxc_t *u, const tfp_up_resp_t *resp, const tfp_up_host_t *h,
                          const char *bearer, char *why, size_t why_size)
{
    char ident[256];
    tfp_err_t err;
    ck_assert_int_eq(tfp_up_ident_format(h, ident, sizeof ident, &err), TFP_OK);
    if (bearer) {
        uint8_t hash[TFP_AUTH_HASH_LEN];
        size_t n = strlen(ident);
        tfp_auth_hash(bearer, strlen(bearer), hash);
        ident[n] = ' ';
        tfp_auth_hello_proof(hash, resp->token, ident + n + 1);
    }
    tfx_ucxc_conn_t *conn = NULL;
    why[0] = '\0';
    tfp_status_t st = tfx_ucxc_connect(u, resp->worker_address, resp->worker_address_len,
                                       resp->same_host, resp->token, ident, 5000, &conn, why,
                                       why_size);
    if (st == TFP_OK)
        tfx_ucxc_conn_close(conn);
    return st;
}

/* A UCX token is bound to the principal it was issued to: presented by another principal
 * (another bearer token's proof), without a proof, or by another peer, it is refused. */
START_TEST(test_ucx_token_replay)
{
    if (!getenv("TFETCHD"))
        return;
    start();
    tfp_up_host_t me, other;
    tfp_err_t err;
    ck_assert_int_eq(tfx_hostid_get(&me, &err), TFP_OK);
    other = me;
    other.boot_id[0] = other.boot_id[0] == 'a' ? 'b' : 'a';
    tfx_ucxc_t *u = tfx_ucxc_new(NULL, NULL, &err);
    ck_assert_msg(u != NULL, "UCX: %s", err.msg);
    tfp_up_resp_t resp;
    char why[256];
    ck_assert_int_eq(upgrade_as("tka-1f2e3d", &resp), 200);
    ck_assert_msg(resp.upgraded == 1, "%s", resp.reason);
    /* bob replays alice's token */
    ck_assert_int_ne(hello(u, &resp, &me, "tkb-9a8b", why, sizeof why), TFP_OK);
    ck_assert_msg(strstr(why, "another principal"), "bob: %s", why);
    /* an old client without the proof */
    ck_assert_int_ne(hello(u, &resp, &me, NULL, why, sizeof why), TFP_OK);
    ck_assert_msg(strstr(why, "must carry its proof") && strstr(why, "'alice'"), "none: %s",
                  why);
    /* alice from another peer */
    ck_assert_int_ne(hello(u, &resp, &other, "tka-1f2e3d", why, sizeof why), TFP_OK);
    ck_assert_msg(strstr(why, "another peer"), "peer: %s", why);
    /* alice herself: accepted, once */
    ck_assert_int_eq(hello(u, &resp, &me, "tka-1f2e3d", why, sizeof why), TFP_OK);
    ck_assert_int_ne(hello(u, &resp, &me, "tka-1f2e3d", why, sizeof why), TFP_OK);
    tfp_up_resp_clear(&resp);
    tfx_ucxc_free(u);
    stop_clean();
}
END_TEST

/* libtfetch over UCX after an authenticated upgrade: the same rights as over HTTP, and a
 * token revoked by SIGHUP is refused (401) on the connection already upgraded, which stays
 * up. */
START_TEST(test_ucx_rights_and_revocation)
{
    if (!getenv("TFETCHD"))
        return;
    start();
    unsetenv("TFETCH_TOKEN");
    tf_client_t *c = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_transport(c, TF_TRANSPORT_UCX), TF_OK);
    ck_assert_int_eq(tf_client_set_token(c, "tka-1f2e3d"), TF_OK);
    tf_doc_t *in = tf_doc_new(), *got = NULL;
    float v[2] = {3, 4};
    int64_t shape[1] = {2};
    ck_assert_int_eq(tf_doc_add(in, "t", TF_F32, 1, shape, v, sizeof v, TF_BORROW), TF_OK);
    char url[256], bob[256];
    snprintf(url, sizeof url, "%s/v1/tensors/alice.ucx", D.base);
    snprintf(bob, sizeof bob, "%s/v1/tensors/bob.ucx", D.base);
    ck_assert_int_eq(tf_put(c, url, in), TF_OK);
    ck_assert_msg(strncmp(tf_client_last(c)->transport, "ucx/", 4) == 0, "%s",
                  tf_client_last(c)->transport);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_OK);
    tf_doc_free(got);
    got = NULL;
    ck_assert_int_eq(tf_put(c, bob, in), TF_EFORBIDDEN);       /* not alice's prefix */
    ck_assert_msg(strncmp(tf_client_last(c)->transport, "ucx/", 4) == 0, "%s",
                  tf_client_last(c)->transport);
    ck_assert_int_eq(tf_get(c, bob, 0, &got), TF_EFORBIDDEN);
    /* revoke alice: her UCX connection's requests are refused afterwards */
    rewrite_tokens("tkb-9a8b bob read:bob.*\n");
    int st = 0;
    for (int i = 0; i < 100 && (st = as("tka-1f2e3d", "", "/v1/tensors")) != 401; i++)
        sleep_ms(50);
    ck_assert_int_eq(st, 401);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_EUNAUTH);
    ck_assert_msg(strncmp(tf_client_last(c)->transport, "ucx/", 4) == 0, "%s",
                  tf_client_last(c)->transport);
    /* given back (the same token again): the same connection serves her again */
    rewrite_tokens("tka-1f2e3d alice read:alice.*\n");
    for (int i = 0; i < 100 && (st = as("tka-1f2e3d", "", "/v1/tensors")) != 200; i++)
        sleep_ms(50);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_OK);
    tf_doc_free(got);
    tf_client_free(c);
    tf_doc_free(in);
    stop_clean();
}
END_TEST

/* A UCX connection admitted as the holder of bearer (upgrade, HELLO with its proof). */
static tfx_ucxc_conn_t *ucx_conn_as(tfx_ucxc_t *u, const char *bearer)
{
    tfp_up_resp_t resp;
    tfp_up_host_t me;
    tfp_err_t err;
    ck_assert_int_eq(tfx_hostid_get(&me, &err), TFP_OK);
    ck_assert_int_eq(upgrade_as(bearer, &resp), 200);
    ck_assert_msg(resp.upgraded == 1, "%s", resp.reason);
    char ident[256], why[256];
    ck_assert_int_eq(tfp_up_ident_format(&me, ident, sizeof ident, &err), TFP_OK);
    uint8_t hash[TFP_AUTH_HASH_LEN];
    size_t n = strlen(ident);
    tfp_auth_hash(bearer, strlen(bearer), hash);
    ident[n] = ' ';
    tfp_auth_hello_proof(hash, resp.token, ident + n + 1);
    tfx_ucxc_conn_t *conn = NULL;
    ck_assert_msg(tfx_ucxc_connect(u, resp.worker_address, resp.worker_address_len,
                                   resp.same_host, resp.token, ident, 5000, &conn, why,
                                   sizeof why) == TFP_OK, "HELLO: %s", why);
    tfp_up_resp_clear(&resp);
    return conn;
}

/* Sends frame h with a body of len bytes over conn, runs meanwhile(arg) (unless NULL) once
 * it is on its way, and waits for its reply (5 s): the request, done (tfx_ucxc_req_free
 * it). */
static tfx_ucxc_req_t *ucx_send(tfx_ucxc_t *u, tfx_ucxc_conn_t *conn, tfp_uf_hdr_t *h,
                                const void *body, size_t len, void (*meanwhile)(void *),
                                void *arg)
{
    const void *segs[1] = {body};
    tfx_ucxc_req_t *r = NULL;
    ck_assert_int_eq(tfx_ucxc_start(conn, h, segs, &len, 1, 5000, 0, NULL, &r), TFP_OK);
    if (meanwhile)
        meanwhile(arg);
    tfx_ucxc_req_t *done = NULL;
    for (int i = 0; i < 500 && !(done = tfx_ucxc_next(u)); i++)
        sleep_ms(10);
    ck_assert_ptr_eq(done, r);
    tfx_ucxc_result_t *res = tfx_ucxc_req_result(done);
    ck_assert_msg(res->transport_status == TFP_OK, "%s", res->why);
    return done;
}

/* A safetensors document of one tensor x = the two values at v (dtype dt, 8 bytes): its
 * bytes (tf_free them) and *len. */
static void *pair_doc(tf_dtype_t dt, const void *v, size_t *len)
{
    int64_t shape[1] = {2};
    tf_doc_t *in = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(in, "x", dt, 1, shape, v, 8, TF_BORROW), TF_OK);
    void *body;
    ck_assert_int_eq(tf_doc_encode(in, &body, len), TF_OK);
    tf_doc_free(in);
    return body;
}

/* CALL accumulate [a, a] over conn as user, of principal `of` (NULL: the caller's own):
 * the reply's HTTP status; its first value in *sum (200), its msg in msg. */
static int ucx_call_for(tfx_ucxc_t *u, tfx_ucxc_conn_t *conn, const char *of, const char *user,
                        int32_t a, int32_t *sum, char *msg, size_t msg_size)
{
    int32_t v[2] = {a, a};
    size_t len;
    void *body = pair_doc(TF_I32, v, &len);
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_CALL, 0);
    static int k;
    snprintf(h.request_id, sizeof h.request_id, "fwd-%d", ++k);
    snprintf(h.name, sizeof h.name, "accumulate");
    snprintf(h.user, sizeof h.user, "%s", user);
    if (of)
        snprintf(h.user_principal, sizeof h.user_principal, "%s", of);
    tfx_ucxc_req_t *done = ucx_send(u, conn, &h, body, len, NULL, NULL);
    tfx_ucxc_result_t *res = tfx_ucxc_req_result(done);
    snprintf(msg, msg_size, "%s", res->reply.msg);
    int http = res->reply.http;
    if (http == 200) {
        tf_doc_t *got = NULL;
        ck_assert_int_eq(tf_doc_decode(res->body, res->body_len, 0, &got), TF_OK);
        *sum = ((const int32_t *)tf_doc_find(got, "x")->data)[0];
        tf_doc_free(got);
    }
    tfx_buf_free(res->body, res->body_cap);
    res->body = NULL;
    tfx_ucxc_req_free(done);
    tf_free(body);
    return http;
}

/* A user id forwarded over UCX (the frame's user principal) needs forward on that
 * principal, exactly as Tfetch-User-Principal over HTTP: without it 403 (checked before the
 * call right); with it the call reaches that principal's user's state. */
START_TEST(test_ucx_forward)
{
    if (!getenv("TFETCHD"))
        return;
    start_with("tkg gw call:accumulate forward:team.*\n"
               "tka alice call:accumulate\n"
               "tkt team.x call:accumulate\n", NULL);
    tfp_err_t err;
    tfx_ucxc_t *u = tfx_ucxc_new(NULL, NULL, &err);
    ck_assert_msg(u != NULL, "UCX: %s", err.msg);
    tfx_ucxc_conn_t *alice = ucx_conn_as(u, "tka"), *gw = ucx_conn_as(u, "tkg"),
                    *team = ucx_conn_as(u, "tkt");
    char msg[600];
    int32_t sum = 0;
    ck_assert_int_eq(ucx_call_for(u, team, NULL, "u1", 5, &sum, msg, sizeof msg), 200);
    ck_assert_int_eq(sum, 5);
    /* without forward: 403, and team.x's u1 is untouched */
    ck_assert_int_eq(ucx_call_for(u, alice, "team.x", "u1", 1, &sum, msg, sizeof msg), 403);
    ck_assert_msg(strstr(msg, "principal alice has no forward right on 'team.x'"), "%s", msg);
    /* forward:team.* does not cover alice */
    ck_assert_int_eq(ucx_call_for(u, gw, "alice", "u1", 1, &sum, msg, sizeof msg), 403);
    ck_assert_msg(strstr(msg, "principal gw has no forward right on 'alice'"), "%s", msg);
    /* with it: team.x's u1 */
    ck_assert_int_eq(ucx_call_for(u, gw, "team.x", "u1", 1, &sum, msg, sizeof msg), 200);
    ck_assert_int_eq(sum, 6);
    ck_assert_int_eq(ucx_call_for(u, team, NULL, "u1", 1, &sum, msg, sizeof msg), 200);
    ck_assert_int_eq(sum, 7);
    /* its own principal named: its own user, no forward needed */
    ck_assert_int_eq(ucx_call_for(u, alice, "alice", "u1", 2, &sum, msg, sizeof msg), 200);
    ck_assert_int_eq(sum, 2);
    /* the gateway's own u1 is its own */
    ck_assert_int_eq(ucx_call_for(u, gw, NULL, "u1", 9, &sum, msg, sizeof msg), 200);
    ck_assert_int_eq(sum, 9);
    tfx_ucxc_conn_close(alice);
    tfx_ucxc_conn_close(gw);
    tfx_ucxc_conn_close(team);
    tfx_ucxc_free(u);
    stop_clean();
}
END_TEST

/* Asks for a staging buffer of size bytes over a new shm connection admitted as bearer: its
 * lease, the buffer mapped writable in *map (sealed: it cannot be resized), the connection
 * in *fd. want: the answer expected; when not TFP_OK, 0 and *fd the connection. */
static uint64_t shm_stage(const char *bearer, size_t size, tfp_status_t want, void **map,
                          int *fd)
{
    tfp_up_resp_t resp;
    ck_assert_int_eq(upgrade_for(bearer, TFP_UP_T_UCX | TFP_UP_T_SHM, &resp), 200);
    ck_assert_str_ne(resp.shm_socket, "");
    tfp_err_t err;
    ck_assert_int_ge(*fd = tfx_shm_connect(resp.shm_socket, &err), 0);
    tfp_sf_t m, r;
    uint8_t buf[TFP_SF_MAX];
    int mfd = -1;
    for (int k = 0; k < 2; k++) {       /* HELLO with the token, then STAGE */
        memset(&m, 0, sizeof m);
        m.op = k ? TFP_SF_STAGE : TFP_SF_HELLO;
        m.seq = (uint64_t)k + 1;
        m.a = k ? size : 0;
        m.str_len = k ? 0 : strlen(resp.shm_token);
        memcpy(m.str, resp.shm_token, k ? 0 : m.str_len + 1);
        size_t n = tfp_sf_encode(&m, buf, sizeof buf, &err), nfds;
        ck_assert_uint_gt(n, 0);
        ck_assert_int_eq(tfx_shm_send(*fd, buf, n, NULL, 0, &err), TFP_OK);
        ck_assert_int_eq(tfx_shm_recv(*fd, buf, sizeof buf, &n, &mfd, 1, &nfds, &err), TFP_OK);
        ck_assert_int_eq(tfp_sf_decode(buf, n, &r, &err), TFP_OK);
        ck_assert_msg(r.status == (k ? want : TFP_OK), "%s", r.str);
    }
    tfp_up_resp_clear(&resp);
    if (want != TFP_OK)
        return 0;
    ck_assert_int_ge(mfd, 0);
    ck_assert_uint_ne(r.lease, 0);
    ck_assert_int_ne(ftruncate(mfd, 1), 0);         /* sealed: no SIGBUS for the daemon */
    ck_assert_int_eq(errno, EPERM);
    *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    ck_assert(*map != MAP_FAILED);
    close(mfd);
    return r.lease;
}

/* An infeed push to device 0 of feed over conn whose body is a staged one naming (lease,
 * offset, length), meanwhile(arg) run as in ucx_send: the reply's HTTP status, its message
 * in msg. */
static int ucx_staged_push_and(tfx_ucxc_t *u, tfx_ucxc_conn_t *conn, const char *feed,
                               uint64_t lease, uint64_t offset, uint64_t length, char *msg,
                               size_t msg_size, void (*meanwhile)(void *), void *arg)
{
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_FEED, 0);
    static int k;
    snprintf(h.request_id, sizeof h.request_id, "st-%d", ++k);
    snprintf(h.name, sizeof h.name, "%s", feed);
    h.flags = TFP_UF_F_FEED;
    h.feed.op = TFP_UF_FEED_INFEED;
    h.feed.flags = TFP_UF_FF_STAGED;
    snprintf(h.feed.dev, sizeof h.feed.dev, "0");
    uint8_t ref[TFP_SF_STAGED_LEN];
    tfp_sf_staged_t sr = {lease, offset, length};
    tfp_sf_staged_encode(&sr, ref);
    h.body_len = sizeof ref;
    tfx_ucxc_req_t *done = ucx_send(u, conn, &h, ref, sizeof ref, meanwhile, arg);
    tfx_ucxc_result_t *res = tfx_ucxc_req_result(done);
    snprintf(msg, msg_size, "%s", res->reply.msg);
    int http = res->reply.http;
    tfx_buf_free(res->body, res->body_cap);
    res->body = NULL;
    tfx_ucxc_req_free(done);
    return http;
}

static int ucx_staged_push(tfx_ucxc_t *u, tfx_ucxc_conn_t *conn, const char *feed,
                           uint64_t lease, uint64_t offset, uint64_t length, char *msg,
                           size_t msg_size)
{
    return ucx_staged_push_and(u, conn, feed, lease, offset, length, msg, msg_size, NULL,
                               NULL);
}

/* A staged body (what a same-host push over UCX sends instead of its document) is good only
 * for the principal whose shm connection the buffer was lent on, inside the buffer, while
 * that connection lasts: bob naming alice's buffer, a guessed id, a span past its end or a
 * buffer whose connection closed are refused, and nothing of hers reaches his feed. What is
 * queued is the copy taken at the push: alice writing her buffer afterwards changes nothing
 * queued. */
START_TEST(test_staged_body_is_the_principals)
{
    start_with("tka alice produce:alice.* consume:alice.* read:alice.*\n"
               "tkb bob produce:bob.* consume:bob.* read:bob.*\n"
               "tkc carol read:alice.*\n", NULL);
    /* a staging buffer is for a principal that may push somewhere */
    void *map;
    int sfd;
    ck_assert_uint_eq(shm_stage("tkc", 4096, TFP_EFORBIDDEN, &map, &sfd), 0);
    close(sfd);
    ck_assert_int_eq(as("tka", FEED_DECL, "/v1/feeds/alice.f"), 201);
    ck_assert_int_eq(as("tkb", FEED_DECL, "/v1/feeds/bob.f"), 201);
    /* alice's item, written into her staging buffer */
    float v[2] = {7, 8};
    size_t len;
    void *body = pair_doc(TF_F32, v, &len);
    uint64_t lease = shm_stage("tka", 4096, TFP_OK, &map, &sfd);
    memcpy(map, body, len);
    tf_free(body);
    tfp_err_t err;
    tfx_ucxc_t *u = tfx_ucxc_new(NULL, NULL, &err);
    ck_assert_msg(u != NULL, "UCX: %s", err.msg);
    tfx_ucxc_conn_t *alice = ucx_conn_as(u, "tka"), *bob = ucx_conn_as(u, "tkb");
    char msg[600];
    ck_assert_int_eq(ucx_staged_push(u, alice, "alice.f", lease, 0, len, msg, sizeof msg), 201);
    memset(map, 0xff, 4096);            /* after the push: the queued copy is not this */
    /* bob names her buffer, on his own feed: as if it did not exist */
    ck_assert_int_eq(ucx_staged_push(u, bob, "bob.f", lease, 0, len, msg, sizeof msg), 404);
    ck_assert_msg(strstr(msg, "no staging buffer"), "%s", msg);
    /* a guessed id; a span past the buffer's end (4096 bytes) */
    ck_assert_int_eq(ucx_staged_push(u, alice, "alice.f", lease ^ 1, 0, len, msg, sizeof msg),
                     404);
    ck_assert_int_eq(ucx_staged_push(u, alice, "alice.f", lease, 4000, 97, msg, sizeof msg),
                     400);
    ck_assert_msg(strstr(msg, "in a staging buffer of 4096 bytes"), "%s", msg);
    /* the bytes it names are checked as any body: 0xff... announces a header of 2^64-1 */
    ck_assert_int_eq(ucx_staged_push(u, alice, "alice.f", lease, 0, len, msg, sizeof msg), 413);
    /* her shm connection closes: the buffer is no more */
    close(sfd);
    int st = 0;
    for (int i = 0; i < 100 && (st = ucx_staged_push(u, alice, "alice.f", lease, 0, len, msg,
                                                     sizeof msg)) != 404; i++)
        sleep_ms(20);
    ck_assert_int_eq(st, 404);
    munmap(map, 4096);
    /* one item queued, alice's [7, 8]; nothing on bob's feed */
    const char *pop = "-X POST -H 'Tfetch-Consumer: c1' -H 'Accept: application/json'";
    ck_assert_int_eq(as("tka", pop, "/v1/feeds/alice.f/devices/0/pop"), 200);
    ck_assert_msg(strstr(out, "[7,8]") || strstr(out, "[7.0,8.0]"), "%s", out);
    ck_assert_int_eq(as("tka", pop, "/v1/feeds/alice.f/devices/0/pop?wait=0"), 204);
    ck_assert_int_eq(as("tkb", pop, "/v1/feeds/bob.f/devices/0/pop?wait=0"), 204);
    tfx_ucxc_conn_close(alice);
    tfx_ucxc_conn_close(bob);
    tfx_ucxc_free(u);
    stop_clean();
}
END_TEST

/* A feed request over UCX as conn's principal: op (TFP_UF_FEED_POP, ACK, DETACH) on f's
 * device 0 as consumer c1, with ack (pop, detach) or through (ack) 2. The reply's HTTP
 * status, its message in msg. */
static int ucx_feed_as(tfx_ucxc_t *u, tfx_ucxc_conn_t *conn, uint8_t op, char *msg,
                       size_t msg_size)
{
    tfp_uf_hdr_t h;
    tfp_uf_init(&h, TFP_UF_FEED, 0);
    static int k;
    snprintf(h.request_id, sizeof h.request_id, "fc-%d", ++k);
    snprintf(h.name, sizeof h.name, "f");
    h.flags = TFP_UF_F_FEED;
    h.feed.op = op;
    snprintf(h.feed.dev, sizeof h.feed.dev, "0");
    snprintf(h.feed.consumer, sizeof h.feed.consumer, "c1");
    h.feed.ack = 2;
    h.feed.flags = TFP_UF_FF_HAS_ACK;
    tfx_ucxc_req_t *done = ucx_send(u, conn, &h, NULL, 0, NULL, NULL);
    tfx_ucxc_result_t *res = tfx_ucxc_req_result(done);
    snprintf(msg, msg_size, "%s", res->reply.msg);
    int http = res->reply.http;
    tfx_buf_free(res->body, res->body_cap);
    res->body = NULL;
    tfx_ucxc_req_free(done);
    return http;
}

/* RING for spec over a new shm connection admitted as bearer: the answer's status, its
 * message in msg. */
static tfp_status_t shm_ring_as(const char *bearer, const char *spec, char *msg,
                                size_t msg_size)
{
    tfp_up_resp_t resp;
    ck_assert_int_eq(upgrade_for(bearer, TFP_UP_T_UCX | TFP_UP_T_SHM, &resp), 200);
    ck_assert_str_ne(resp.shm_socket, "");
    tfp_err_t err;
    int fd = tfx_shm_connect(resp.shm_socket, &err);
    ck_assert_int_ge(fd, 0);
    tfp_sf_t m, r;
    uint8_t buf[TFP_SF_MAX];
    int mfd = -1;
    for (int k = 0; k < 2; k++) {       /* HELLO with the token, then RING */
        memset(&m, 0, sizeof m);
        m.op = k ? TFP_SF_RING : TFP_SF_HELLO;
        m.seq = (uint64_t)k + 1;
        m.a = k ? 1 : 0;
        const char *str = k ? spec : resp.shm_token;
        m.str_len = strlen(str);
        memcpy(m.str, str, m.str_len + 1);
        size_t n = tfp_sf_encode(&m, buf, sizeof buf, &err), nfds;
        ck_assert_uint_gt(n, 0);
        ck_assert_int_eq(tfx_shm_send(fd, buf, n, NULL, 0, &err), TFP_OK);
        ck_assert_int_eq(tfx_shm_recv(fd, buf, sizeof buf, &n, &mfd, 1, &nfds, &err), TFP_OK);
        ck_assert_int_eq(tfp_sf_decode(buf, n, &r, &err), TFP_OK);
        if (!k)
            ck_assert_msg(r.status == TFP_OK, "%s", r.str);
    }
    if (mfd >= 0)
        close(mfd);
    close(fd);
    tfp_up_resp_clear(&resp);
    snprintf(msg, msg_size, "%s", r.str);
    return (tfp_status_t)r.status;
}

/* test_feed_consumer_is_the_principals over UCX and the same-host ring: bob naming alice's
 * consumer c1 in a pop, an ack or a detach over UCX, or in a RING, is refused 403 naming
 * nothing of her, and her items stay unacknowledged. */
START_TEST(test_feed_consumer_is_the_principals_ucx_shm)
{
    start_with(CONSUMERS, NULL);
    consumer_c1_attached();
    tfp_err_t err;
    tfx_ucxc_t *u = tfx_ucxc_new(NULL, NULL, &err);
    ck_assert_msg(u != NULL, "UCX: %s", err.msg);
    tfx_ucxc_conn_t *bob = ucx_conn_as(u, "tkb");
    char msg[600];
    static const uint8_t ops[] = {TFP_UF_FEED_POP, TFP_UF_FEED_ACK, TFP_UF_FEED_DETACH};
    for (size_t i = 0; i < sizeof ops; i++) {
        ck_assert_int_eq(ucx_feed_as(u, bob, ops[i], msg, sizeof msg), 403);
        ck_assert_msg(strstr(msg, "another principal") && !strstr(msg, "alice"), "%s", msg);
    }
    ck_assert_int_eq(shm_ring_as("tkb", "f/0/c1", msg, sizeof msg), TFP_EFORBIDDEN);
    ck_assert_msg(strstr(msg, "another principal") && !strstr(msg, "alice"), "%s", msg);
    c1_still_alices();
    /* her own ring under c1 is hers to open */
    ck_assert_int_eq(shm_ring_as("tka", "f/0/c1", msg, sizeof msg), TFP_OK);
    tfx_ucxc_conn_close(bob);
    tfx_ucxc_free(u);
    stop_clean();
}
END_TEST

/* One principal that asks for upgrades and never connects (nobody: a token with no right
 * that matters) runs into its own quota of unused tokens: 429 with Retry-After, naming only
 * itself; alice and bob still upgrade. The shm socket's TOKENs count the same way. */
START_TEST(test_upgrade_quota_per_principal)
{
    static const char toks[] = "tkn nobody read:nothing\n"
                               "tka alice produce:f* consume:f* read:f*\n"
                               "tkb bob read:*\n";
    token_file = td_tmpfile(3, toks, strlen(toks));
    const char *args[] = {"--auth-tokens", token_file, "--upgrade-tokens-per-client", "4", NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
    tfp_up_resp_t resp;
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(upgrade_as("tkn", &resp), 200);
        ck_assert_msg(resp.upgraded == 1, "%s", resp.reason);
        tfp_up_resp_clear(&resp);
    }
    ck_assert_int_eq(upgrade_as("tkn", NULL), 429);
    ck_assert_msg(strstr(out, "TF_EFULL") && strstr(out, "principal nobody holds 4 unused "
                  "upgrade tokens"), "%s", out);
    ck_assert_msg(strstr(hdrs, "Retry-After: "), "%s", hdrs);
    int after = atoi(strstr(hdrs, "Retry-After: ") + 13);
    ck_assert_msg(after >= 1 && after <= 10, "%s", hdrs);   /* upgrade-token-ttl: 10 s */
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(upgrade_as(i % 2 ? "tka" : "tkb", &resp), 200);
        ck_assert_msg(resp.upgraded == 1, "%s", resp.reason);
        ck_assert_ptr_null(strstr(out, "nobody"));
        tfp_up_resp_clear(&resp);
    }
    /* the shm socket's TOKENs: alice's fourth unused one is her last */
    ck_assert_int_eq(upgrade_for("tka", TFP_UP_T_UCX | TFP_UP_T_SHM, &resp), 200);
    ck_assert_str_ne(resp.shm_token, "");
    tfp_err_t err;
    int fd = tfx_shm_connect(resp.shm_socket, &err);
    ck_assert_int_ge(fd, 0);
    tfp_status_t st = TFP_OK;
    int n = 0;
    char msg[TFP_SF_MAX_STR + 1] = "";
    for (int k = 0; k < 8 && st == TFP_OK; k++) {
        tfp_sf_t m, r;
        memset(&m, 0, sizeof m);
        m.op = k ? TFP_SF_TOKEN : TFP_SF_HELLO;
        m.seq = (uint64_t)k + 1;
        if (!k) {
            m.str_len = strlen(resp.shm_token);
            memcpy(m.str, resp.shm_token, m.str_len + 1);
        }
        uint8_t buf[TFP_SF_MAX];
        size_t len = tfp_sf_encode(&m, buf, sizeof buf, &err), nfds;
        int mfd = -1;
        ck_assert_uint_gt(len, 0);
        ck_assert_int_eq(tfx_shm_send(fd, buf, len, NULL, 0, &err), TFP_OK);
        ck_assert_int_eq(tfx_shm_recv(fd, buf, sizeof buf, &len, &mfd, 1, &nfds, &err), TFP_OK);
        ck_assert_int_eq(tfp_sf_decode(buf, len, &r, &err), TFP_OK);
        st = (tfp_status_t)r.status;
        snprintf(msg, sizeof msg, "%s", r.str);
        n += k && st == TFP_OK;
    }
    ck_assert_int_eq(st, TFP_EFULL);
    ck_assert_msg(strstr(msg, "upgrade-tokens-per-client"), "%s", msg);
    ck_assert_int_eq(n, 4);
    close(fd);
    tfp_up_resp_clear(&resp);
    /* bob's shm token still comes */
    ck_assert_int_eq(upgrade_for("tkb", TFP_UP_T_UCX | TFP_UP_T_SHM, &resp), 200);
    ck_assert_str_ne(resp.shm_token, "");
    tfp_up_resp_clear(&resp);
    stop_clean();
}
END_TEST

/* Without authentication the quota is per client address: 127.0.0.1 at its quota gets 429,
 * 127.0.0.2 still upgrades. */
START_TEST(test_upgrade_quota_per_address)
{
    const char *args[] = {"--upgrade-tokens-per-client", "2", NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
    tfp_up_req_t q = {.transports = TFP_UP_T_UCX, .policy = TFP_UP_POLICY_UCX};
    tfp_err_t err;
    ck_assert_int_eq(tfx_hostid_get(&q.host, &err), TFP_OK);
    char *json = NULL;
    size_t len = 0;
    ck_assert_int_eq(tfp_up_req_build(&q, &json, &len, &err), TFP_OK);
    const char *f = td_tmpfile(0, json, len);
    free(json);
    char args1[512], args2[512];
    snprintf(args1, sizeof args1, "-X POST -H 'Content-Type: application/json' "
             "--data-binary @%s --interface 127.0.0.1", f);
    snprintf(args2, sizeof args2, "-X POST -H 'Content-Type: application/json' "
             "--data-binary @%s --interface 127.0.0.2", f);
    ck_assert_int_eq(as(NULL, args1, "/v1/upgrade"), 200);
    ck_assert_int_eq(as(NULL, args1, "/v1/upgrade"), 200);
    ck_assert_int_eq(as(NULL, args1, "/v1/upgrade"), 429);
    ck_assert_msg(strstr(out, "client 127.0.0.1 holds 2 unused"), "%s", out);
    ck_assert_msg(strstr(hdrs, "Retry-After: "), "%s", hdrs);
    ck_assert_int_eq(as(NULL, args2, "/v1/upgrade"), 200);
    ck_assert_msg(strstr(out, "\"transport\":\"ucx\",\"token\":\""), "%s", out);
    stop_clean();
}
END_TEST

/* What test_staged_release_during_copy does while its push is on its way: waits ns, then
 * closes the buffer's shm connection and unmaps it. */
typedef struct {
    int fd;
    void *map;
    size_t len;
    long ns;
} closing_t;

static void close_later(void *arg)
{
    closing_t *cl = arg;
    struct timespec ts = {0, cl->ns};
    nanosleep(&ts, NULL);
    close(cl->fd);                      /* the buffer's connection ends, maybe mid-copy */
    munmap(cl->map, cl->len);
}

/* A staging buffer released while a push is being copied out of it (its connection closes
 * mid-copy) stays mapped until that copy ends (the copy holds a reference: without it the
 * daemon reads an unmapped buffer and dies), and its bytes leave the shm-lease-memory count
 * once: after many such races nothing is counted. The close lands at a different moment of
 * the 32 MiB copy each round. */
START_TEST(test_staged_release_during_copy)
{
    start_with("tka alice produce:alice.* consume:alice.* read:alice.* admin:*\n", NULL);
    ck_assert_int_eq(as("tka", "-X PUT -H 'Content-Type: application/json' -d "
                        "'{\"devices\":1,\"signature\":[{\"name\":\"x\",\"dtype\":\"U8\","
                        "\"shape\":[33554432]}]}'", "/v1/feeds/alice.f"), 201);
    size_t size = (size_t)32 << 20;
    uint8_t *item = calloc(1, size + 4096);
    int64_t shape[1] = {(int64_t)size};
    tf_doc_t *doc = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(doc, "x", TF_U8, 1, shape, item, size, TF_BORROW), TF_OK);
    void *body;
    size_t len;
    ck_assert_int_eq(tf_doc_encode(doc, &body, &len), TF_OK);
    tf_doc_free(doc);
    tfp_err_t err;
    tfx_ucxc_t *u = tfx_ucxc_new(NULL, NULL, &err);
    ck_assert_msg(u != NULL, "UCX: %s", err.msg);
    tfx_ucxc_conn_t *alice = ucx_conn_as(u, "tka");
    int ok = 0;
    for (int round = 0; round < 40; round++) {
        void *map;
        int sfd;
        uint64_t lease = shm_stage("tka", len, TFP_OK, &map, &sfd);
        memcpy(map, body, len);
        closing_t cl = {sfd, map, len, (round % 20) * 100000L};     /* 0..1.9 ms */
        char msg[600];
        int http = ucx_staged_push_and(u, alice, "alice.f", lease, 0, len, msg, sizeof msg,
                                       close_later, &cl);
        ck_assert_msg(http == 201 || http == 404, "round %d: %d %s", round, http, msg);
        ok += http == 201;
        ck_assert_int_eq(as("tka", "-X POST", "/v1/feeds/alice.f/reset"), 200);
    }
    fprintf(stderr, "test_staged_release_during_copy: %d of 40 pushes found their buffer "
            "(the others came after its close)\n", ok);
    /* every buffer gone, and counted out once */
    int st = 0;
    for (int i = 0; i < 100; i++) {
        st = as("tka", "", "/metrics");
        if (st == 200 && strstr(out, "\ntfetch_shm_stagings 0\n") &&
            strstr(out, "\ntfetch_shm_staged_bytes 0\n"))
            break;
        sleep_ms(20);
    }
    ck_assert_int_eq(st, 200);
    ck_assert_msg(strstr(out, "\ntfetch_shm_stagings 0\n") &&
                  strstr(out, "\ntfetch_shm_staged_bytes 0\n"), "%s", out);
    tfx_ucxc_conn_close(alice);
    tfx_ucxc_free(u);
    tf_free(body);
    free(item);
    stop_clean();
}
END_TEST

/* accumulate [a, b] over UCX (strict) as c's principal and user; the result's first value. */
static int32_t ucx_accumulate(tf_client_t *c, int32_t a, int32_t b)
{
    int32_t v[2] = {a, b};
    int64_t shape[1] = {2};
    tf_doc_t *in = tf_doc_new(), *got = NULL;
    ck_assert_int_eq(tf_doc_add(in, "x", TF_I32, 1, shape, v, sizeof v, TF_BORROW), TF_OK);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/call/accumulate", D.base);
    ck_assert_int_eq(tf_fetch(c, url, in, &got), TF_OK);
    ck_assert_msg(strncmp(tf_client_last(c)->transport, "ucx/", 4) == 0, "%s",
                  tf_client_last(c)->transport);
    const tf_tensor_t *t = tf_doc_find(got, "x");
    ck_assert_ptr_nonnull(t);
    int32_t r = ((const int32_t *)t->data)[0];
    tf_doc_free(got);
    tf_doc_free(in);
    return r;
}

/* Over UCX the frame's user is a user of the connection's own principal (the one its
 * HELLO's token was issued to) unless the frame names another: a gateway with forward,
 * sending a user id over UCX without naming team.x,
 * reaches its own u1, never team.x's: only the frame's user principal forwards
 * (test_ucx_forward), and the caller's own principal is the endpoint's, never the frame's. */
START_TEST(test_ucx_user_is_own_principal)
{
    if (!getenv("TFETCHD"))
        return;
    start_with("tkg gw call:accumulate forward:*\n"
               "tkt team.x call:accumulate\n", NULL);
    unsetenv("TFETCH_TOKEN");
    ck_assert_int_eq(call_i32("tkt", "accumulate", "u1", NULL, 100, 100), 200);
    tf_client_t *g = NULL;
    ck_assert_int_eq(tf_client_new(&g), TF_OK);
    ck_assert_int_eq(tf_client_set_transport(g, TF_TRANSPORT_UCX), TF_OK);
    ck_assert_int_eq(tf_client_set_token(g, "tkg"), TF_OK);
    ck_assert_int_eq(tf_client_set_user(g, "u1"), TF_OK);
    ck_assert_int_eq(ucx_accumulate(g, 5, 5), 5);           /* gw's own u1: new state */
    ck_assert_int_eq(ucx_accumulate(g, 5, 5), 10);
    ck_assert_int_eq(call_i32("tkt", "accumulate", "u1", NULL, 0, 0), 200);
    ck_assert_msg(strstr(out, "[100,100]"), "team.x's u1 was reached over UCX: %s", out);
    tf_client_free(g);
    stop_clean();
}
END_TEST
#endif

START_TEST(test_libtfetch_and_cli)
{
    start();
    tf_client_t *c = NULL;
    unsetenv("TFETCH_TOKEN");
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    tf_doc_t *in = tf_doc_new(), *got = NULL;
    float v[2] = {3, 4};
    int64_t shape[1] = {2};
    ck_assert_int_eq(tf_doc_add(in, "t", TF_F32, 1, shape, v, sizeof v, TF_BORROW), TF_OK);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/tensors/alice.lib", D.base);
    ck_assert_int_eq(tf_put(c, url, in), TF_EUNAUTH);
    ck_assert_int_eq(tf_client_set_token(c, "bad token"), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_token(c, "tkb-9a8b"), TF_OK);
    ck_assert_int_eq(tf_put(c, url, in), TF_EFORBIDDEN);
    ck_assert_int_eq(tf_client_set_token(c, "tka-1f2e3d"), TF_OK);
    ck_assert_int_eq(tf_put(c, url, in), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_OK);
    ck_assert_uint_eq(tf_doc_count(got), 1);
    tf_doc_free(got);
    ck_assert_int_eq(tf_client_set_token(c, NULL), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_EUNAUTH);
    tf_client_free(c);
    /* TFETCH_TOKEN is the default */
    setenv("TFETCH_TOKEN", "tkc", 1);
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_OK);
    tf_doc_free(got);
    tf_client_free(c);
    setenv("TFETCH_TOKEN", "not a token", 1);
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_token(c, "tkc"), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &got), TF_OK);
    tf_doc_free(got);
    tf_client_free(c);
    unsetenv("TFETCH_TOKEN");
    tf_doc_free(in);

    /* the CLI: --token, TFETCH_TOKEN; a bad token is refused without being printed */
    const char *cli = getenv("TFETCH_CLI") ? getenv("TFETCH_CLI") : "./cli/tfetch";
    char cmd[1024], o[4096];
    snprintf(cmd, sizeof cmd, "%s --token tka-1f2e3d ls %s >/dev/null 2>&1; echo $?", cli, D.base);
    td_run(cmd, o, sizeof o);
    ck_assert_str_eq(o, "0\n");
    snprintf(cmd, sizeof cmd, "%s ls %s >/dev/null 2>&1; echo $?", cli, D.base);
    td_run(cmd, o, sizeof o);
    ck_assert_str_ne(o, "0\n");
    snprintf(cmd, sizeof cmd, "TFETCH_TOKEN=tkc %s ls %s 2>&1", cli, D.base);
    ck_assert_int_eq(td_run(cmd, o, sizeof o), 0);
    ck_assert_msg(strstr(o, "alice.lib"), "%s", o);
    snprintf(cmd, sizeof cmd, "%s --token 'sec ret' ls %s 2>&1; echo $?", cli, D.base);
    td_run(cmd, o, sizeof o);
    ck_assert_msg(strstr(o, "bad --token") && !strstr(o, "sec ret"), "%s", o);
    stop_clean();
}
END_TEST

/* Off without a token file: everything as before, and a warning for a non-loopback
 * listener is the daemon's (tfetchd.conf(5)); with a broken file it does not start. */
START_TEST(test_broken_file_refused_at_start)
{
    const char *f = td_tmpfile(3, "tk alice reed:x\n", 16);
    const char *args[] = {"--auth-tokens", f, NULL};
    td_opts_t o = {.args = args, .start_ms = 10000};
    ck_assert_int_ne(td_start_opts(&D, &o), 0);
    char cmd[512], log[4096];
    snprintf(cmd, sizeof cmd, "cat %s", D.log_path);
    td_run(cmd, log, sizeof log);
    ck_assert_msg(strstr(log, "line 1: unknown right 'reed'"), "%s", log);
    unlink(D.log_path);
    td_cleanup();
}
END_TEST

Suite *suite_authe2e(void)
{
    Suite *s = suite_create("authe2e");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_missing_and_unknown_token);
    tcase_add_test(tc, test_rights_on_names);
    tcase_add_test(tc, test_access_log_principal);
    tcase_add_test(tc, test_call_and_serve);
    tcase_add_test(tc, test_state_per_principal);
    tcase_add_test(tc, test_forward);
    tcase_add_test(tc, test_feeds_per_principal);
    tcase_add_test(tc, test_feed_consumer_is_the_principals);
    tcase_add_test(tc, test_worker_bound_to_principal);
    tcase_add_test(tc, test_sighup_reload);
    tcase_add_test(tc, test_sighup_partial_file_keeps_old);
    tcase_add_test(tc, test_token_file_must_be_private);
    tcase_add_test(tc, test_shumai_refused);
    tcase_add_test(tc, test_shumai_principal);
    tcase_add_test(tc, test_upgrade_authed);
#ifdef HAVE_UCX
    tcase_add_test(tc, test_ucx_token_replay);
    tcase_add_test(tc, test_ucx_rights_and_revocation);
    tcase_add_test(tc, test_ucx_user_is_own_principal);
    tcase_add_test(tc, test_ucx_forward);
    tcase_add_test(tc, test_staged_body_is_the_principals);
    tcase_add_test(tc, test_staged_release_during_copy);
    tcase_add_test(tc, test_feed_consumer_is_the_principals_ucx_shm);
    tcase_add_test(tc, test_upgrade_quota_per_principal);
    tcase_add_test(tc, test_upgrade_quota_per_address);
#endif
    tcase_add_test(tc, test_libtfetch_and_cli);
    tcase_add_test(tc, test_broken_file_refused_at_start);
    suite_add_tcase(s, tc);
    return s;
}
