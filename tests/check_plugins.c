/* check_plugins.c - the plugin suite: daemon/plugins.c loading the example plugin
 * (plugins/scale.c) and the test plugins (tests/plugins/) into a route table and running
 * calls against them; the refusals (missing file, no entry point, other ABI, refused host,
 * failing init, route clashes); the plugin settings; and the real tfetchd serving a plugin's
 * routes to curl, and refusing to start with a bad one.
 *
 * The shared objects are found through TFETCH_TEST_PLUGIN (scale.so) and
 * TFETCH_TEST_PLUGIN_DIR (the test plugins), which `make check` sets; by hand, run it from
 * the build directory after `make check` built them.
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "daemon/conf.h"
#include "daemon/plugins.h"
#include "daemon/routes.h"
#include "daemon/sessions.h"
#include "proto/safetensors.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *scale_so(void)
{
    const char *p = getenv("TFETCH_TEST_PLUGIN");
    return p && *p ? p : "plugins/.libs/scale.so";
}

/* The path of test plugin name ("testplug", "badabi", ...); static storage, 4 slots. */
static const char *test_so(const char *name)
{
    static char bufs[4][1024];
    static int k;
    char *b = bufs[k++ & 3];
    const char *dir = getenv("TFETCH_TEST_PLUGIN_DIR");
    snprintf(b, 1024, "%s/%s.so", dir && *dir ? dir : "tests/plugins/.libs", name);
    return b;
}

/* ---- a route table with plugins, without the server -------------------------------------- */

static struct {
    tfd_routes_t *rs;
    tfd_plugins_t *ps;
    tfd_sessions_t *ss;
} E;

static void env_new(uint64_t user_bytes)
{
    tfd_sessions_limits_t lim = {600, 16, user_bytes, 1u << 20};
    E.rs = tfd_routes_new();
    ck_assert_ptr_nonnull(E.rs);
    ck_assert_int_eq(tfd_builtin_routes_add(E.rs), 0);
    E.ps = tfd_plugins_new(E.rs);
    E.ss = tfd_sessions_new(&lim);
    ck_assert_ptr_nonnull(E.ps);
    ck_assert_ptr_nonnull(E.ss);
}

/* The daemon's order: sessions (plugin states) first, then the plugins, then the table. */
static void env_free(void)
{
    tfd_sessions_free(E.ss);
    tfd_plugins_free(E.ps);
    tfd_routes_free(E.rs);
    memset(&E, 0, sizeof E);
}

static void load_ok(const char *spec)
{
    tfp_err_t err = {0};
    ck_assert_msg(tfd_plugins_load(E.ps, spec, &err) == 0, "%s: %s", spec, err.msg);
}

/* Loads spec, which must fail with a message containing want (and, if want2, that too). */
static void load_fails(const char *spec, const char *want, const char *want2)
{
    tfp_err_t err = {0};
    size_t before = tfd_plugins_count(E.ps);
    ck_assert_msg(tfd_plugins_load(E.ps, spec, &err) == -1, "%s loaded", spec);
    ck_assert_msg(strstr(err.msg, want) != NULL, "'%s' lacks '%s'", err.msg, want);
    if (want2)
        ck_assert_msg(strstr(err.msg, want2) != NULL, "'%s' lacks '%s'", err.msg, want2);
    ck_assert_uint_eq(tfd_plugins_count(E.ps), before);
}

static int has_route(const char *name)
{
    tfd_route_ops_t ops;
    if (tfd_routes_find(E.rs, name, &ops) != 0)
        return 0;
    tfd_route_ops_release(&ops);
    return 1;
}

/* Runs route on in as user, the way api_calls.c does; the caller frees the call. */
static tfd_call_t *run(const char *route, const char *user, const tfp_doc_t *in)
{
    tfd_route_ops_t ops;
    ck_assert_msg(tfd_routes_find(E.rs, route, &ops) == 0, "no route %s", route);
    tfd_call_t *c = tfd_call_new(route, user, "req-1", in);
    ck_assert_ptr_nonnull(c);
    c->sessions = E.ss;
    if (!ops.stateless)
        ck_assert_ptr_nonnull(c->session = tfd_sessions_acquire(E.ss, c->user));
    ck_assert_int_eq(ops.start(ops.arg, c), TFD_CALL_DONE);
    tfd_sessions_release(E.ss, c->session);
    c->session = NULL;
    tfd_route_ops_release(&ops);
    return c;
}

/* Runs route as user and checks it failed with code and a message containing want. */
static void run_fails_as(const char *user, const char *route, const tfp_doc_t *in,
                         tfp_status_t code, const char *want)
{
    tfd_call_t *c = run(route, user, in);
    ck_assert_msg(c->status == code, "%s: status %d, want %d (%s)", route, c->status, code,
                  c->msg);
    ck_assert_msg(strstr(c->msg, want) != NULL, "'%s' lacks '%s'", c->msg, want);
    tfd_call_free(c);
}

static void run_fails(const char *route, const tfp_doc_t *in, tfp_status_t code, const char *want)
{
    run_fails_as("alice", route, in, code, want);
}

static tfp_doc_t *doc_new(void)
{
    tfp_doc_t *d = tfp_doc_new();
    ck_assert_ptr_nonnull(d);
    return d;
}

static void doc_add(tfp_doc_t *d, const char *name, tfp_dtype_t dt, int rank,
                    const uint64_t *shape, const void *data, uint64_t nbytes)
{
    tfp_err_t err;
    ck_assert_int_eq(tfp_doc_add(d, name, dt, rank, shape, data, nbytes, &err), TFP_OK);
}

static void doc_meta(tfp_doc_t *d, const char *key, const char *value)
{
    tfp_err_t err;
    ck_assert_int_eq(tfp_doc_set_meta(d, key, value, &err), TFP_OK);
}

/* The F32 values of out's tensor name (n of them). */
static void want_f32(const tfp_doc_t *out, const char *name, const float *want, size_t n)
{
    const tfp_tensor_t *t = tfp_doc_find(out, name);
    ck_assert_msg(t != NULL, "no output %s", name);
    ck_assert_int_eq(t->dtype, TFP_F32);
    ck_assert_uint_eq(t->nbytes, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, t->data + i * sizeof v, sizeof v);
        ck_assert_msg(v == want[i], "%s[%zu] = %g, want %g", name, i, v, want[i]);
    }
}

/* count's answer: a scalar I64. */
static int64_t count_of(const tfd_call_t *c)
{
    ck_assert_msg(c->status == TFP_OK, "count failed: %s", c->msg);
    const tfp_tensor_t *t = tfp_doc_find(c->out, "count");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, TFP_I64);
    ck_assert_int_eq(t->rank, 0);
    int64_t v;
    memcpy(&v, t->data, sizeof v);
    return v;
}

static int64_t count_call(const char *user)
{
    tfp_doc_t *in = doc_new();
    tfd_call_t *c = run("count", user, in);
    int64_t v = count_of(c);
    tfd_call_free(c);
    tfp_doc_free(in);
    return v;
}

START_TEST(scale_multiplies_and_refuses)
{
    env_new(1u << 20);
    load_ok(scale_so());
    tfd_route_ops_t ops;
    ck_assert_int_eq(tfd_routes_find(E.rs, "scale", &ops), 0);
    ck_assert_str_eq(ops.kind, "plugin");
    ck_assert_int_eq(ops.stateless, 1);
    tfd_route_ops_release(&ops);
    ck_assert_int_eq(tfd_routes_find(E.rs, "count", &ops), 0);
    ck_assert_int_eq(ops.stateless, 0);
    tfd_route_ops_release(&ops);
    ck_assert(has_route("echo"));

    /* factor from metadata; F32 and F64 tensors */
    float x[4] = {1, 2, 3, -4};
    double y[2] = {0.5, 1e300};
    uint64_t s4[1] = {4}, s21[2] = {2, 1};
    tfp_doc_t *in = doc_new();
    doc_add(in, "x", TFP_F32, 1, s4, x, sizeof x);
    doc_add(in, "y", TFP_F64, 2, s21, y, sizeof y);
    doc_meta(in, "factor", "3");
    tfd_call_t *c = run("scale", "alice", in);
    ck_assert_msg(c->status == TFP_OK, "%s", c->msg);
    ck_assert_uint_eq(c->out->n, 2);
    want_f32(c->out, "x", (float[]){3, 6, 9, -12}, 4);
    const tfp_tensor_t *t = tfp_doc_find(c->out, "y");
    ck_assert_int_eq(t->rank, 2);
    ck_assert_uint_eq(t->shape[0], 2);
    double yv[2];
    memcpy(yv, t->data, sizeof yv);
    ck_assert(yv[0] == 1.5 && yv[1] == 3e300);
    ck_assert_str_eq(tfp_doc_meta(c->out, "factor"), "3");
    tfd_call_free(c);
    tfp_doc_free(in);

    /* factor as a scalar tensor, which is not answered */
    double half = 0.5;
    in = doc_new();
    doc_add(in, "x", TFP_F32, 1, s4, x, sizeof x);
    doc_add(in, "factor", TFP_F64, 0, NULL, &half, sizeof half);
    c = run("scale", "", in);
    ck_assert_msg(c->status == TFP_OK, "%s", c->msg);
    ck_assert_uint_eq(c->out->n, 1);
    want_f32(c->out, "x", (float[]){0.5f, 1, 1.5f, -2}, 4);
    tfd_call_free(c);
    tfp_doc_free(in);

    /* the default factor, 2 */
    in = doc_new();
    doc_add(in, "x", TFP_F32, 1, s4, x, sizeof x);
    c = run("scale", "", in);
    want_f32(c->out, "x", (float[]){2, 4, 6, -8}, 4);
    ck_assert_str_eq(tfp_doc_meta(c->out, "factor"), "2");
    tfd_call_free(c);

    /* refusals: other dtypes (422), a bad metadata factor (400), a bad factor tensor (422) */
    int32_t iv[4] = {1, 2, 3, 4};
    tfp_doc_t *bad = doc_new();
    doc_add(bad, "i", TFP_I32, 1, s4, iv, sizeof iv);
    run_fails("scale", bad, TFP_EUNPROC, "tensor 'i' is I32; scale multiplies F32 and F64");
    tfp_doc_free(bad);
    doc_meta(in, "factor", "lots");
    run_fails("scale", in, TFP_EBADREQ, "metadata factor must be a finite number");
    tfp_doc_free(in);
    in = doc_new();
    doc_add(in, "factor", TFP_I32, 1, s4, iv, sizeof iv);
    run_fails("scale", in, TFP_EUNPROC, "tensor 'factor' must hold one F32 or F64 value");
    tfp_doc_free(in);
    env_free();
}
END_TEST

START_TEST(count_keeps_per_user_state)
{
    env_new(1u << 20);
    load_ok(scale_so());
    ck_assert_int_eq(count_call("alice"), 1);
    ck_assert_int_eq(count_call("alice"), 2);
    ck_assert_int_eq(count_call("bob"), 1);
    ck_assert_int_eq(count_call(""), 1);
    ck_assert_int_eq(count_call("alice"), 3);
    ck_assert_int_eq(count_call("bob"), 2);
    /* Ending alice's session destroys her state (through the plugin's destructor). */
    ck_assert_int_eq(tfd_sessions_end(E.ss, "alice"), 0);
    ck_assert_int_eq(count_call("alice"), 1);
    ck_assert_int_eq(count_call("bob"), 3);
    tfd_sessions_stats_t st;
    tfd_sessions_stats(E.ss, &st);
    ck_assert_uint_eq(st.sessions, 3);
    env_free();                         /* bob's and alice's states are freed before dlclose */

    /* A session quota below the state's size: 507, and nothing kept. */
    env_new(4);
    load_ok(scale_so());
    tfp_doc_t *in = doc_new();
    run_fails("count", in, TFP_ENOSPACE, "no room for the state of user 'alice'");
    run_fails("count", in, TFP_ENOSPACE, "no room");
    tfp_doc_free(in);
    env_free();
}
END_TEST

START_TEST(arguments_reach_init)
{
    env_new(1u << 20);
    char spec[1200];
    snprintf(spec, sizeof spec, "%s \t factor=-0.25", scale_so());
    load_ok(spec);
    float x[2] = {4, 8};
    uint64_t s2[1] = {2};
    tfp_doc_t *in = doc_new();
    doc_add(in, "x", TFP_F32, 1, s2, x, sizeof x);
    tfd_call_t *c = run("scale", "", in);
    want_f32(c->out, "x", (float[]){-1, -2}, 2);
    tfd_call_free(c);
    tfp_doc_free(in);
    env_free();

    /* init refusing its arguments stops the load; nothing stays registered */
    env_new(1u << 20);
    snprintf(spec, sizeof spec, "%s factor=abc", scale_so());
    load_fails(spec, "refused to start", "init returned");
    snprintf(spec, sizeof spec, "%s colour=blue", scale_so());
    load_fails(spec, "refused to start", NULL);
    ck_assert(!has_route("scale") && !has_route("count"));
    load_fails("  ", "names no file", NULL);
    env_free();
}
END_TEST

START_TEST(refuses_what_is_not_a_plugin)
{
    env_new(1u << 20);
    load_fails("/nonexistent/tfetch/x.so", "cannot load plugin /nonexistent/tfetch/x.so", NULL);
    load_fails(test_so("noentry"), "is not a tfetch plugin", "tfpl_plugin_entry");
    load_fails(test_so("badabi"), "was built for plugin ABI 2", "speaks ABI 1");
    load_fails(test_so("refuse"), "does not support this tfetchd's plugin ABI 1", NULL);
    char spec[1200];
    snprintf(spec, sizeof spec, "%s fail", test_so("testplug"));
    load_fails(spec, "plugin", "(testplug) refused to start");
    ck_assert(!has_route("tp_probe"));
    ck_assert_uint_eq(tfd_plugins_count(E.ps), 0);
    load_ok(test_so("testplug"));
    ck_assert(has_route("tp_probe"));
    env_free();
}
END_TEST

static void count_plugin_routes(const char *name, const tfd_route_ops_t *ops, void *arg)
{
    (void)name;
    if (strcmp(ops->kind, "plugin") == 0)
        (*(int *)arg)++;
}

START_TEST(route_clashes_fail_the_whole_plugin)
{
    env_new(1u << 20);
    static const tfd_route_ops_t taken = {.kind = "builtin", .stateless = 1};
    ck_assert_int_eq(tfd_routes_add(E.rs, "count", &taken), 0);
    load_fails(scale_so(), "route 'count' is already taken", "(scale)");
    ck_assert(!has_route("scale"));         /* registered before the clash, then removed */
    ck_assert_int_eq(tfd_routes_remove(E.rs, "count", NULL), 0);
    load_ok(scale_so());
    load_fails(scale_so(), "is already loaded", NULL);
    load_ok(test_so("testplug"));
    int plugin_routes = 0;
    tfd_routes_each(E.rs, count_plugin_routes, &plugin_routes);
    ck_assert_int_eq(plugin_routes, 6);
    ck_assert_uint_eq(tfd_plugins_count(E.ps), 2);
    env_free();
}
END_TEST

START_TEST(host_table_contract)
{
    env_new(64);
    load_ok(test_so("testplug"));
    /* A second reference keeps the test plugin mapped after tfd_plugins_free, so its
     * counters can be read afterwards. */
    void *dl = dlopen(test_so("testplug"), RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(dl);
    int *destroyed = dlsym(dl, "tp_destroyed"), *finis = dlsym(dl, "tp_finis");
    ck_assert(destroyed && finis);
    int destroyed0 = *destroyed, finis0 = *finis;

    float x[4] = {1, 2, 3, 4};
    uint64_t s22[2] = {2, 2};
    tfp_doc_t *in = doc_new();
    doc_add(in, "x", TFP_F32, 2, s22, x, sizeof x);
    doc_meta(in, "k", "v");
    tfd_call_t *c = run("tp_probe", "carol", in);
    ck_assert_msg(c->status == TFP_OK, "%s", c->msg);
    const tfp_tensor_t *t = tfp_doc_find(c->out, "counts");
    int64_t counts[3];
    memcpy(counts, t->data, sizeof counts);
    ck_assert_int_eq(counts[0], 1);         /* inputs */
    ck_assert_int_eq(counts[1], 7);         /* route arg */
    ck_assert_int_eq(counts[2], 1);         /* host ABI */
    ck_assert_str_eq(tfp_doc_meta(c->out, "user"), "carol");
    ck_assert_str_eq(tfp_doc_meta(c->out, "request"), "req-1");
    ck_assert_str_eq(tfp_doc_meta(c->out, "route"), "tp_probe");
    want_f32(c->out, "in.x", x, 4);
    ck_assert_int_eq(tfp_doc_find(c->out, "in.x")->rank, 2);
    tfd_call_free(c);
    tfp_doc_free(in);

    /* statuses: returned, failed, unknown; a recorded error wins */
    in = doc_new();
    doc_meta(in, "status", "-10");
    run_fails("tp_status", in, TFP_EUNPROC, "route 'tp_status' failed: unprocessable tensor");
    doc_meta(in, "status", "42");
    run_fails("tp_status", in, TFP_EINTERNAL, "returned 42, which is not a tfetch status");
    doc_meta(in, "status", "0");
    doc_meta(in, "fail", "-13");
    run_fails("tp_status", in, TFP_ENOSPACE, "tp_status failed as asked (-13)");
    doc_meta(in, "fail", "0");
    run_fails("tp_status", in, TFP_EINTERNAL, "failed with status 0: tp_status failed as asked");
    doc_meta(in, "fail", "-99");
    run_fails("tp_status", in, TFP_EINTERNAL, "failed with status -99");
    tfp_doc_free(in);

    /* outputs described wrongly are the plugin's fault: 500 */
    static const char *const hows[] = {"nbytes", "dtype", "rank", "name", "twice", "ignored"};
    for (size_t i = 0; i < sizeof hows / sizeof hows[0]; i++) {
        in = doc_new();
        doc_meta(in, "how", hows[i]);
        run_fails("tp_badout", in, TFP_EINTERNAL, "route 'tp_badout' produced an invalid output");
        tfp_doc_free(in);
    }

    /* per-user state: kept, resized within quota, refused over it (old state kept) */
    in = doc_new();
    for (unsigned want = 1; want <= 2; want++) {
        c = run("tp_state", "dave", in);
        ck_assert_msg(c->status == TFP_OK, "%s", c->msg);
        unsigned n;
        memcpy(&n, tfp_doc_find(c->out, "n")->data, sizeof n);
        ck_assert_uint_eq(n, want);
        tfd_call_free(c);
    }
    doc_meta(in, "bytes", "1000");
    run_fails_as("dave", "tp_state", in, TFP_ENOSPACE, "over quota");
    ck_assert_int_eq(*destroyed, destroyed0);       /* the slot kept its state */
    run_fails_as("frank", "tp_state", in, TFP_ENOSPACE, "over quota");
    ck_assert_int_eq(*destroyed, destroyed0 + 1);   /* a new state is destroyed at once */
    tfp_doc_free(in);
    in = doc_new();
    c = run("tp_state", "dave", in);
    unsigned n;
    memcpy(&n, tfp_doc_find(c->out, "n")->data, sizeof n);
    ck_assert_uint_eq(n, 3);
    tfd_call_free(c);
    c = run("tp_state", "erin", in);        /* another user: a fresh state */
    memcpy(&n, tfp_doc_find(c->out, "n")->data, sizeof n);
    ck_assert_uint_eq(n, 1);
    tfd_call_free(c);
    tfp_doc_free(in);
    ck_assert_int_eq(tfd_sessions_end(E.ss, "dave"), 0);
    ck_assert_int_eq(*destroyed, destroyed0 + 2);
    env_free();                             /* erin's state, then fini */
    ck_assert_int_eq(*destroyed, destroyed0 + 3);
    ck_assert_int_eq(*finis, finis0 + 1);
    dlclose(dl);
}
END_TEST

/* ---- settings ----------------------------------------------------------------------------- */

static int load_conf(const char *file_text, const char *const *flags, tfd_config_t *cfg)
{
    char path[] = "/tmp/tfetchd-conf-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, file_text, strlen(file_text)), (ssize_t)strlen(file_text));
    close(fd);
    char *argv[48] = {"tfetchd", "--config", path};
    int argc = 3;
    for (int i = 0; flags && flags[i] && argc < 47; i++)
        argv[argc++] = (char *)flags[i];
    argv[argc] = NULL;
    tfd_config_defaults(cfg);
    int rc = tfd_config_load(cfg, argc, argv);
    unlink(path);
    return rc;
}

START_TEST(plugin_settings)
{
    static tfd_config_t cfg;
    ck_assert_int_eq(load_conf("", NULL, &cfg), 0);
    ck_assert_uint_eq(cfg.plugins.n, 0);
    ck_assert_int_eq(load_conf("plugin = /a.so\n[tfetchd]\nplugin = /b.so x=1 y=2\n", NULL,
                               &cfg), 0);
    ck_assert_uint_eq(cfg.plugins.n, 2);
    ck_assert_str_eq(cfg.plugins.v[0], "/a.so");
    ck_assert_str_eq(cfg.plugins.v[1], "/b.so x=1 y=2");
    /* flags replace the file's list */
    const char *const two[] = {"--plugin", "/c.so", "--plugin=/d.so", NULL};
    ck_assert_int_eq(load_conf("plugin = /a.so\n", two, &cfg), 0);
    ck_assert_uint_eq(cfg.plugins.n, 2);
    ck_assert_str_eq(cfg.plugins.v[0], "/c.so");
    ck_assert_str_eq(cfg.plugins.v[1], "/d.so");
    /* at most TFD_MAX_PLUGINS; not empty */
    const char *many[2 * TFD_MAX_PLUGINS + 3];
    int k = 0;
    for (int i = 0; i <= TFD_MAX_PLUGINS; i++) {
        many[k++] = "--plugin";
        many[k++] = "/x.so";
    }
    many[k] = NULL;
    ck_assert_int_eq(load_conf("", many, &cfg), -1);
    many[2 * TFD_MAX_PLUGINS] = NULL;
    ck_assert_int_eq(load_conf("", many, &cfg), 0);
    ck_assert_uint_eq(cfg.plugins.n, TFD_MAX_PLUGINS);
    ck_assert_int_eq(load_conf("plugin =\n", NULL, &cfg), -1);
}
END_TEST

/* ---- the real daemon ---------------------------------------------------------------------- */

static td_daemon_t D;

/* POSTs a raw tensor to /v1/call/route as user; returns the HTTP status, the body in *resp
 * (malloc'd, *len bytes). */
static int post_raw(const char *route, const char *user, const char *dtype, const char *shape,
                    const void *body, size_t body_len, uint8_t **resp, size_t *len)
{
    const char *f = td_tmpfile(1, body, body_len);
    ck_assert_ptr_nonnull(f);
    char out_path[128], cmd[2048], code[16];
    snprintf(out_path, sizeof out_path, "/tmp/tf-plugins-resp-%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "curl -sS -o %s -w '%%{http_code}' -X POST --data-binary @%s "
             "-H 'Content-Type: application/octet-stream' -H 'Tfetch-Dtype: %s' "
             "-H 'Tfetch-Shape: %s' -H 'Tfetch-User: %s' '%s'", out_path, f, dtype, shape,
             user, td_url(&D, "/v1/call/%s", route));
    ck_assert_int_eq(td_run(cmd, code, sizeof code), 0);
    FILE *fp = fopen(out_path, "rb");
    ck_assert_ptr_nonnull(fp);
    uint8_t *buf = malloc(1 << 16);
    *len = fread(buf, 1, (1 << 16) - 1, fp);
    buf[*len] = 0;
    fclose(fp);
    unlink(out_path);
    *resp = buf;
    return atoi(code);
}

/* Decodes a safetensors answer; the doc borrows buf. */
static tfp_doc_t *decode(const uint8_t *buf, size_t len)
{
    tfp_doc_t *doc = NULL;
    tfp_err_t err;
    ck_assert_msg(tfp_st_decode(buf, len, NULL, &doc, &err) == TFP_OK, "%s", err.msg);
    return doc;
}

static int64_t e2e_count(const char *user)
{
    uint8_t *resp;
    size_t len;
    uint8_t zero = 0;
    ck_assert_int_eq(post_raw("count", user, "U8", "1", &zero, 1, &resp, &len), 200);
    tfp_doc_t *doc = decode(resp, len);
    const tfp_tensor_t *t = tfp_doc_find(doc, "count");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, TFP_I64);
    ck_assert_int_eq(t->rank, 0);
    int64_t v;
    memcpy(&v, t->data, sizeof v);
    tfp_doc_free(doc);
    free(resp);
    return v;
}

START_TEST(daemon_serves_plugin_routes)
{
    char spec[1200];
    snprintf(spec, sizeof spec, "%s factor=3", scale_so());
    const char *const args[] = {"--plugin", spec, NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start with %s", spec);

    float x[4] = {1, -2, 0.5f, 100};
    uint8_t *resp;
    size_t len;
    ck_assert_int_eq(post_raw("scale", "alice", "F32", "4", x, sizeof x, &resp, &len), 200);
    tfp_doc_t *doc = decode(resp, len);
    ck_assert_uint_eq(doc->n, 1);
    want_f32(doc, "tensor", (float[]){3, -6, 1.5f, 300}, 4);
    ck_assert_str_eq(tfp_doc_meta(doc, "factor"), "3");
    tfp_doc_free(doc);
    free(resp);

    int32_t iv[2] = {1, 2};
    ck_assert_int_eq(post_raw("scale", "alice", "I32", "2", iv, sizeof iv, &resp, &len), 422);
    ck_assert_msg(strstr((char *)resp, "tensor 'tensor' is I32") &&
                  strstr((char *)resp, "TF_EUNPROC"), "%s", (char *)resp);
    free(resp);

    /* count: per user, isolated */
    ck_assert_int_eq(e2e_count("alice"), 1);
    ck_assert_int_eq(e2e_count("alice"), 2);
    ck_assert_int_eq(e2e_count("bob"), 1);
    ck_assert_int_eq(e2e_count("alice"), 3);
    ck_assert_int_eq(e2e_count("bob"), 2);

    char body[1 << 14];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "curl -sS '%s'", td_url(&D, "/v1/info"));
    ck_assert_int_eq(td_run(cmd, body, sizeof body), 0);
    ck_assert_msg(strstr(body, "{\"name\":\"count\",\"kind\":\"plugin\",\"stateful\":true}") &&
                  strstr(body, "{\"name\":\"scale\",\"kind\":\"plugin\",\"stateful\":false}"),
                  "%s", body);
    /* Live plugin states at SIGTERM: freed before the plugin is unloaded, exit 0. */
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}
END_TEST

/* Runs tfetchd with --plugin spec; returns its exit status, its output in out. */
static int daemon_with(const char *spec, char *out, size_t cap)
{
    const char *bin = getenv("TFETCHD");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' --config /dev/null --listen 127.0.0.1 --port 0 "
             "--plugin '%s' </dev/null 2>&1", bin && *bin ? bin : "./daemon/tfetchd", spec);
    return td_run(cmd, out, cap);
}

START_TEST(daemon_refuses_to_start_with_a_bad_plugin)
{
    char out[4096];
    ck_assert_int_eq(daemon_with(test_so("badabi"), out, sizeof out), 1);
    ck_assert_msg(strstr(out, "cannot start") && strstr(out, "built for plugin ABI 2"), "%s", out);
    ck_assert_msg(!strstr(out, "listening on"), "%s", out);
    ck_assert_int_eq(daemon_with(test_so("noentry"), out, sizeof out), 1);
    ck_assert_msg(strstr(out, "is not a tfetch plugin"), "%s", out);
    ck_assert_int_eq(daemon_with("/nonexistent/plugin.so", out, sizeof out), 1);
    ck_assert_msg(strstr(out, "cannot load plugin /nonexistent/plugin.so"), "%s", out);
    char spec[1200];
    snprintf(spec, sizeof spec, "%s factor=x", scale_so());
    ck_assert_int_eq(daemon_with(spec, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "plugin scale: unknown argument 'factor=x'") &&
                  strstr(out, "refused to start"), "%s", out);
}
END_TEST

Suite *suite_plugins(void)
{
    Suite *s = suite_create("plugins");
    TCase *tc = tcase_create("load");
    tcase_add_test(tc, scale_multiplies_and_refuses);
    tcase_add_test(tc, count_keeps_per_user_state);
    tcase_add_test(tc, arguments_reach_init);
    tcase_add_test(tc, refuses_what_is_not_a_plugin);
    tcase_add_test(tc, route_clashes_fail_the_whole_plugin);
    tcase_add_test(tc, host_table_contract);
    tcase_add_test(tc, plugin_settings);
    suite_add_tcase(s, tc);
    tc = tcase_create("daemon");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, daemon_serves_plugin_routes);
    tcase_add_test(tc, daemon_refuses_to_start_with_a_bad_plugin);
    suite_add_tcase(s, tc);
    return s;
}
