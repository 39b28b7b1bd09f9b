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
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
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
    ck_assert_int_eq(plugin_routes, 7);
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

/* ---- reloading (SIGHUP), without the server ------------------------------------------------ */

/* A config naming these plugin settings (NULL-terminated). Static storage. */
static const tfd_config_t *specs(const char *first, ...)
{
    static tfd_config_t cfg;
    va_list ap;
    memset(&cfg.plugins, 0, sizeof cfg.plugins);
    va_start(ap, first);
    for (const char *sp = first; sp; sp = va_arg(ap, const char *))
        snprintf(cfg.plugins.v[cfg.plugins.n++], sizeof cfg.plugins.v[0], "%s", sp);
    va_end(ap);
    return &cfg;
}

/* "PATH ARGS" of plugin path (4 slots). */
static const char *with_args(const char *path, const char *args)
{
    static char bufs[4][1200];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, 1200, "%s %s", path, args);
    return b;
}

static int reload_ok(const tfd_config_t *cfg, const tfd_plugins_wait_t *w)
{
    tfp_err_t err = {0};
    int rc = tfd_plugins_reload(E.ps, cfg, E.ss, w, &err);
    ck_assert_msg(rc == 0, "reload: %s", err.msg);
    return rc;
}

/* Reloads cfg, which must fail with a message containing want; nothing changes. */
static void reload_fails(const tfd_config_t *cfg, const tfd_plugins_wait_t *w, const char *want)
{
    tfp_err_t err = {0};
    size_t before = tfd_plugins_count(E.ps);
    ck_assert_msg(tfd_plugins_reload(E.ps, cfg, E.ss, w, &err) == -1, "reload did not fail");
    ck_assert_msg(strstr(err.msg, want) != NULL, "'%s' lacks '%s'", err.msg, want);
    ck_assert_uint_eq(tfd_plugins_count(E.ps), before);
}

/* scale's answer to x = {1, 2}: the factor it used. */
static double scale_factor(void)
{
    float x[2] = {1, 2};
    uint64_t s2[1] = {2};
    tfp_doc_t *in = doc_new();
    doc_add(in, "x", TFP_F32, 1, s2, x, sizeof x);
    tfd_call_t *c = run("scale", "", in);
    ck_assert_msg(c->status == TFP_OK, "%s", c->msg);
    double f = atof(tfp_doc_meta(c->out, "factor"));
    tfd_call_free(c);
    tfp_doc_free(in);
    return f;
}

START_TEST(reload_adds_removes_and_restarts_plugins)
{
    env_new(1u << 20);
    const char *scale3 = with_args(scale_so(), "factor=3");
    load_ok(scale3);
    ck_assert_int_eq(count_call("alice"), 1);
    ck_assert(!has_route("tp_probe"));

    /* Added: its routes answer; scale, named the same way, is left alone (its state too). */
    reload_ok(specs(scale3, test_so("testplug"), NULL), NULL);
    ck_assert_uint_eq(tfd_plugins_count(E.ps), 2);
    tfp_doc_t *in = doc_new();
    tfd_call_t *c = run("tp_probe", "carol", in);
    ck_assert_msg(c->status == TFP_OK, "%s", c->msg);
    tfd_call_free(c);
    ck_assert_int_eq(count_call("alice"), 2);
    ck_assert(scale_factor() == 3);
    /* Nothing to do: a no-op. */
    reload_ok(specs(scale3, test_so("testplug"), NULL), NULL);

    /* Other arguments: stopped (its states freed) and started again from a fresh copy of
     * its code, so the default factor is back to 2 without arguments. */
    reload_ok(specs(test_so("testplug"), with_args(scale_so(), "factor=5"), NULL), NULL);
    ck_assert(scale_factor() == 5);
    ck_assert_int_eq(count_call("alice"), 1);
    reload_ok(specs(test_so("testplug"), scale_so(), NULL), NULL);
    ck_assert(scale_factor() == 2);
    ck_assert_int_eq(count_call("alice"), 1);

    /* Removed: its routes are gone; the states its routes kept are destroyed by its own
     * destructor before its fini (a second reference keeps the counters readable). */
    void *dl = dlopen(test_so("testplug"), RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(dl);
    int *destroyed = dlsym(dl, "tp_destroyed"), *finis = dlsym(dl, "tp_finis");
    int *bad_finis = dlsym(dl, "tp_bad_finis");
    ck_assert(destroyed && finis && bad_finis);
    int destroyed0 = *destroyed, finis0 = *finis;
    c = run("tp_state", "dave", in);
    ck_assert_msg(c->status == TFP_OK, "%s", c->msg);
    tfd_call_free(c);
    c = run("tp_state", "erin", in);
    tfd_call_free(c);
    reload_ok(specs(scale_so(), NULL), NULL);
    ck_assert(!has_route("tp_probe") && !has_route("tp_state") && !has_route("tp_sleep"));
    ck_assert(has_route("scale") && has_route("echo"));
    ck_assert_uint_eq(tfd_plugins_count(E.ps), 1);
    ck_assert_int_eq(*destroyed, destroyed0 + 2);
    ck_assert_int_eq(*finis, finis0 + 1);
    ck_assert_int_eq(*bad_finis, 0);
    tfd_sessions_stats_t st;
    tfd_sessions_stats(E.ss, &st);
    ck_assert_uint_eq(st.bytes, 8);         /* alice's count, 8 bytes; dave's, erin's gone */
    dlclose(dl);

    /* Everything out, then back in. */
    reload_ok(specs(NULL), NULL);
    ck_assert_uint_eq(tfd_plugins_count(E.ps), 0);
    ck_assert(!has_route("scale") && !has_route("count") && has_route("echo"));
    reload_ok(specs(test_so("testplug"), scale3, NULL), NULL);
    ck_assert(scale_factor() == 3 && has_route("tp_probe"));
    tfp_doc_free(in);
    env_free();
}
END_TEST

START_TEST(reload_failures_change_nothing)
{
    env_new(1u << 20);
    const char *scale3 = with_args(scale_so(), "factor=3");
    load_ok(scale3);
    load_ok(test_so("testplug"));
    ck_assert_int_eq(count_call("alice"), 1);
    /* A new plugin that is refused: the others stay, removals are not done either. */
    reload_fails(specs(scale3, test_so("testplug"), test_so("badabi"), NULL), NULL,
                 "was built for plugin ABI 2");
    reload_fails(specs(scale3, "/nonexistent/tfetch/x.so", NULL), NULL,
                 "cannot load plugin /nonexistent/tfetch/x.so");
    reload_fails(specs(scale3, test_so("noentry"), NULL), NULL, "is not a tfetch plugin");
    reload_fails(specs(scale3, with_args(test_so("testplug"), "fail"), NULL), NULL,
                 "(testplug) refused to start");
    reload_fails(specs(scale3, test_so("testplug"), with_args(scale_so(), "factor=4"), NULL),
                 NULL, "is already loaded");
    ck_assert(has_route("tp_probe") && has_route("tp_sleep"));
    ck_assert_int_eq(count_call("alice"), 2);           /* not even its states were touched */
    ck_assert(scale_factor() == 3);
    /* New arguments its init refuses: started again with the old ones (states gone). */
    reload_fails(specs(with_args(scale_so(), "factor=abc"), test_so("testplug"), NULL), NULL,
                 "(scale) refused to start");
    ck_assert(scale_factor() == 3);
    ck_assert_int_eq(count_call("alice"), 1);
    ck_assert(has_route("tp_probe"));
    /* A route name taken meanwhile (by a built-in, here) fails the plugin that wants it. */
    reload_ok(specs(scale3, NULL), NULL);
    static const tfd_route_ops_t taken = {.kind = "builtin", .stateless = 1};
    ck_assert_int_eq(tfd_routes_add(E.rs, "tp_state", &taken), 0);
    reload_fails(specs(scale3, test_so("testplug"), NULL), NULL,
                 "route 'tp_state' is already taken");
    ck_assert(!has_route("tp_probe"));
    ck_assert_int_eq(tfd_routes_remove(E.rs, "tp_state", NULL), 0);
    reload_ok(specs(scale3, test_so("testplug"), NULL), NULL);
    ck_assert(has_route("tp_state"));
    env_free();
}
END_TEST

/* A call held inside tp_sleep on a thread of its own, as an HTTP thread would run it. */
typedef struct {
    pthread_t thread;
    char path[128];
    tfd_call_t *call;
    tfp_doc_t *in;
    int started;
} held_t;

static void *held_run(void *arg)
{
    held_t *h = arg;
    tfd_route_ops_t ops;
    if (tfd_routes_find(E.rs, "tp_sleep", &ops) != 0)
        return NULL;
    h->call = tfd_call_new("tp_sleep", "", "req-held", h->in);
    if (h->call)
        h->started = ops.start(ops.arg, h->call) == TFD_CALL_DONE;
    tfd_route_ops_release(&ops);
    return NULL;
}

/* Starts a call that blocks in tp_sleep until held_let_go; returns once it is inside. */
static void held_start(held_t *h, const char *tag)
{
    memset(h, 0, sizeof *h);
    snprintf(h->path, sizeof h->path, "/tmp/tf-plugins-held-%d-%s", (int)getpid(), tag);
    char in_path[160];
    snprintf(in_path, sizeof in_path, "%s.in", h->path);
    unlink(h->path);
    unlink(in_path);
    uint64_t len = strlen(h->path);
    h->in = doc_new();
    doc_add(h->in, "path", TFP_U8, 1, &len, h->path, len);
    ck_assert_int_eq(pthread_create(&h->thread, NULL, held_run, h), 0);
    for (int i = 0; i < 1000 && access(in_path, F_OK) != 0; i++)
        usleep(10000);
    ck_assert_msg(access(in_path, F_OK) == 0, "tp_sleep was not entered");
    unlink(in_path);
}

static void held_let_go(const held_t *h)
{
    FILE *f = fopen(h->path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
}

/* Joins the call: it finished inside the handler, and answered slept = 1. */
static void held_join(held_t *h)
{
    ck_assert_int_eq(pthread_join(h->thread, NULL), 0);
    ck_assert_msg(h->started && h->call && h->call->status == TFP_OK, "%s",
                  h->call ? h->call->msg : "no call");
    const tfp_tensor_t *t = tfp_doc_find(h->call->out, "slept");
    ck_assert(t && t->nbytes == 1 && t->data[0] == 1);
    tfd_call_free(h->call);
    tfp_doc_free(h->in);
    unlink(h->path);
}

static struct {
    int idles;
    held_t *let_go_at;              /* let the held call go at this many idles */
    int let_go_after;
    int give_up;                    /* non-zero: idle says to give up */
    tfp_status_t placeholder;       /* what tp_probe answered meanwhile */
    char msg[256];
} W;

static int idle(void *arg)
{
    (void)arg;
    if (W.idles++ == 0) {               /* while the reload waits: tp_probe is a placeholder */
        tfp_doc_t *in = doc_new();
        tfd_call_t *c = run("tp_probe", "", in);
        W.placeholder = c->status;
        snprintf(W.msg, sizeof W.msg, "%s", c->msg);
        tfd_call_free(c);
        tfp_doc_free(in);
    }
    if (W.let_go_at && W.idles == W.let_go_after)
        held_let_go(W.let_go_at);
    return W.give_up;
}

START_TEST(reload_waits_for_calls_in_handlers)
{
    env_new(1u << 20);
    load_ok(scale_so());
    load_ok(test_so("testplug"));
    held_t h;
    tfd_plugins_wait_t w = {10000, idle, NULL};

    /* Removed while a call is inside its handler: the reload waits for it (meanwhile its
     * routes answer 503), then unloads. */
    memset(&W, 0, sizeof W);
    held_start(&h, "a");
    W.let_go_at = &h;
    W.let_go_after = 5;
    reload_ok(specs(scale_so(), NULL), &w);
    ck_assert_int_ge(W.idles, 5);
    ck_assert_int_eq(W.placeholder, TFP_EBUSY);
    ck_assert_msg(strstr(W.msg, "route 'tp_probe' is being reloaded"), "%s", W.msg);
    ck_assert(!has_route("tp_probe") && !has_route("tp_sleep"));
    held_join(&h);

    /* The wait times out: nothing changes, and the call still finishes. */
    reload_ok(specs(scale_so(), test_so("testplug"), NULL), &w);
    memset(&W, 0, sizeof W);
    held_start(&h, "b");
    tfd_plugins_wait_t brief = {200, idle, NULL};
    reload_fails(specs(scale_so(), NULL), &brief, "1 calls still running in its handlers");
    ck_assert(has_route("tp_probe"));
    tfp_doc_t *in = doc_new();
    tfd_call_t *c = run("tp_probe", "", in);
    ck_assert_msg(c->status == TFP_OK, "%s", c->msg);
    tfd_call_free(c);
    /* ... or the wait is told to give up (the daemon is stopping). */
    memset(&W, 0, sizeof W);
    W.give_up = 1;
    reload_fails(specs(scale_so(), NULL), &w, "gave up waiting");
    ck_assert(has_route("tp_sleep"));
    /* New arguments its init refuses, while a call is held: once the call is out the old
     * copy is unloaded, the new one refuses, and the old setting is started again. */
    memset(&W, 0, sizeof W);
    W.let_go_at = &h;
    W.let_go_after = 3;
    reload_fails(specs(scale_so(), with_args(test_so("testplug"), "fail"), NULL), &w,
                 "refused to start");
    ck_assert_int_ge(W.idles, 3);
    held_join(&h);
    c = run("tp_probe", "", in);
    ck_assert_msg(c->status == TFP_OK, "%s", c->msg);
    tfd_call_free(c);
    tfp_doc_free(in);
    env_free();
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

/* ---- the real daemon, reloading (SIGHUP) ----------------------------------------------------- */

static char conf_path[64];

static void write_conf(const char *text)
{
    FILE *f = fopen(conf_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* How many lines of the daemon's log contain needle. */
static int log_count(const char *needle)
{
    char cmd[1024], out[32];
    snprintf(cmd, sizeof cmd, "grep -c -F -e '%s' %s", needle, D.log_path);
    td_run(cmd, out, sizeof out);
    return atoi(out);
}

/* Waits (up to 30 s) until the daemon's log has n lines containing needle. */
static void wait_log(const char *needle, int n)
{
    for (int i = 0; i < 600 && log_count(needle) < n; i++)
        usleep(50000);
    if (log_count(needle) < n)
        td_show_log(&D);
    ck_assert_msg(log_count(needle) >= n, "the log never said '%s' %d times", needle, n);
}

static int sighups;

/* Writes the config, sends SIGHUP and waits until the daemon has read it. */
static void reload_with(const char *text)
{
    write_conf(text);
    ck_assert_int_eq(kill(D.pid, SIGHUP), 0);
    wait_log("SIGHUP: settings read again", ++sighups);
}

/* POSTs one U8 tensor to route; returns the HTTP status (the body in resp, freed here). */
static int call_status(const char *route)
{
    uint8_t *resp, zero = 0;
    size_t len;
    int code = post_raw(route, "alice", "U8", "1", &zero, 1, &resp, &len);
    free(resp);
    return code;
}

/* scale's factor for x = {1}, over HTTP. */
static double e2e_factor(void)
{
    float x = 1;
    uint8_t *resp;
    size_t len;
    ck_assert_int_eq(post_raw("scale", "alice", "F32", "1", &x, sizeof x, &resp, &len), 200);
    tfp_doc_t *doc = decode(resp, len);
    double f = atof(tfp_doc_meta(doc, "factor"));
    tfp_doc_free(doc);
    free(resp);
    return f;
}

/* A config with these plugin lines (and drain-timeout 30), as text. */
static const char *conf_text(const char *a, const char *b, const char *c)
{
    static char text[4096];
    int n = snprintf(text, sizeof text, "drain-timeout = 30\n");
    const char *v[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (v[i])
            n += snprintf(text + n, sizeof text - (size_t)n, "plugin = %s\n", v[i]);
    return text;
}

static void start_with_conf(const char *text)
{
    snprintf(conf_path, sizeof conf_path, "/tmp/tf-plugins-reload-%d.conf", (int)getpid());
    write_conf(text);
    sighups = 0;
    const char *const args[] = {"--config", conf_path, NULL};
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
}

static void stop_with_conf(void)
{
    ck_assert_int_eq(log_count("while"), 0);      /* testplug: "fini while N states are alive" */
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    unlink(conf_path);
    td_cleanup();
}

/* SIGHUP loads a plugin added to the config, unloads one removed from it (404 after), starts
 * one whose arguments changed again, and keeps everything as it was when one is refused. */
START_TEST(sighup_loads_and_unloads_plugins)
{
    const char *scale3 = with_args(scale_so(), "factor=3");
    start_with_conf(conf_text(scale3, NULL, NULL));
    ck_assert(e2e_factor() == 3);
    ck_assert_int_eq(call_status("tp_probe"), 404);
    ck_assert_int_eq(e2e_count("alice"), 1);

    reload_with(conf_text(scale3, test_so("testplug"), NULL));
    ck_assert_int_eq(call_status("tp_probe"), 200);
    ck_assert_int_eq(log_count("<5>plugin testplug loaded from"), 1);
    ck_assert_int_eq(log_count("<5>SIGHUP: plugin applied"), 1);
    ck_assert_int_eq(e2e_count("alice"), 2);          /* scale was left alone */
    uint8_t *resp;
    size_t len;
    char body[1 << 14], cmd[512];
    snprintf(cmd, sizeof cmd, "curl -sS '%s'", td_url(&D, "/v1/info"));
    ck_assert_int_eq(td_run(cmd, body, sizeof body), 0);
    ck_assert_msg(strstr(body, "{\"name\":\"tp_probe\",\"kind\":\"plugin\",\"stateful\":false}"),
                  "%s", body);

    /* Refused: a bad ABI, a missing file, an init that refuses new arguments. */
    reload_with(conf_text(scale3, test_so("testplug"), test_so("badabi")));
    ck_assert_int_eq(log_count("<3>SIGHUP: plugin: plugin "), 1);
    ck_assert_int_eq(log_count("badabi.so was built for plugin ABI 2"), 1);
    reload_with(conf_text(scale3, "/nonexistent/tfetch-plugin.so", NULL));
    ck_assert_int_eq(log_count("cannot load plugin /nonexistent/tfetch-plugin.so"), 1);
    ck_assert_int_eq(call_status("tp_probe"), 200);    /* not removed either */
    ck_assert_int_eq(e2e_count("alice"), 3);
    reload_with(conf_text(with_args(scale_so(), "factor=zz"), test_so("testplug"), NULL));
    ck_assert_int_eq(log_count("(scale) refused to start"), 1);
    ck_assert_int_eq(log_count("kept the 2 plugins loaded before"), 3);
    ck_assert(e2e_factor() == 3);                       /* started again, factor 3 */
    ck_assert_int_eq(call_status("tp_probe"), 200);

    /* Other arguments: a fresh start (no arguments: the default factor, 2). */
    reload_with(conf_text(test_so("testplug"), scale_so(), NULL));
    ck_assert(e2e_factor() == 2);
    ck_assert_int_eq(e2e_count("alice"), 1);

    /* Removed, with states its routes keep: freed by its destructors, then unloaded. */
    ck_assert_int_eq(post_raw("tp_state", "bob", "U8", "1", "x", 1, &resp, &len), 200);
    free(resp);
    reload_with(conf_text(scale_so(), NULL, NULL));
    ck_assert_int_eq(log_count("<5>plugin testplug unloaded"), 1);
    ck_assert_int_eq(call_status("tp_probe"), 404);
    ck_assert_int_eq(call_status("tp_state"), 404);
    ck_assert(e2e_factor() == 2);
    reload_with(conf_text(NULL, NULL, NULL));
    ck_assert_int_eq(post_raw("scale", "alice", "F32", "1", "abcd", 4, &resp, &len), 404);
    free(resp);
    reload_with(conf_text(test_so("testplug"), NULL, NULL));
    ck_assert_int_eq(call_status("tp_probe"), 200);
    stop_with_conf();
}
END_TEST

/* A background curl of tp_sleep, which blocks in the handler until its path exists. */
typedef struct {
    char path[128];
} bg_t;

static void bg_start(bg_t *b, const char *tag)
{
    snprintf(b->path, sizeof b->path, "/tmp/tf-plugins-bg-%d-%s", (int)getpid(), tag);
    char cmd[2048], in_path[160];
    snprintf(in_path, sizeof in_path, "%s.in", b->path);
    snprintf(cmd, sizeof cmd, "rm -f %s %s %s.code; printf %%s '%s' > %s.req", b->path, in_path,
             b->path, b->path, b->path);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    snprintf(cmd, sizeof cmd, "curl -sS -o %s.body -w '%%{http_code}' -X POST --data-binary "
             "@%s.req -H 'Content-Type: application/octet-stream' -H 'Tfetch-Dtype: U8' "
             "-H 'Tfetch-Shape: %zu' '%s' > %s.code 2>&1 &", b->path, b->path, strlen(b->path),
             td_url(&D, "/v1/call/tp_sleep"), b->path);
    ck_assert_int_eq(td_run(cmd, NULL, 0), 0);
    for (int i = 0; i < 600 && access(in_path, F_OK) != 0; i++)
        usleep(50000);
    ck_assert_msg(access(in_path, F_OK) == 0, "tp_sleep was not entered");
}

/* Lets the call go and returns its HTTP status once curl is done. */
static int bg_finish(const bg_t *b)
{
    char cmd[2048], out[64] = "";
    snprintf(cmd, sizeof cmd, "touch %s; for i in $(seq 600); do c=$(cat %s.code 2>/dev/null); "
             "[ -n \"$c\" ] && break; sleep 0.05; done; cat %s.code; rm -f %s %s.in %s.req "
             "%s.body %s.code", b->path, b->path, b->path, b->path, b->path, b->path, b->path,
             b->path);
    td_run(cmd, out, sizeof out);
    return atoi(out);
}

/* SIGHUP removes a plugin while a call runs in its handler: its routes answer 503 while it
 * waits, the call completes, then the plugin is unloaded (404). With a short drain-timeout
 * the wait gives up and the plugin stays. */
START_TEST(sighup_waits_for_a_call_in_a_removed_plugin)
{
    start_with_conf(conf_text(scale_so(), test_so("testplug"), NULL));
    bg_t b;
    bg_start(&b, "a");
    write_conf(conf_text(scale_so(), NULL, NULL));
    ck_assert_int_eq(kill(D.pid, SIGHUP), 0);
    wait_log("plugin testplug: waiting up to 30000 ms for 1 calls", 1);
    ck_assert_int_eq(call_status("tp_probe"), 503);     /* being reloaded */
    ck_assert(e2e_factor() == 2);                       /* the others serve meanwhile */
    ck_assert_int_eq(bg_finish(&b), 200);
    wait_log("SIGHUP: settings read again", ++sighups);
    ck_assert_int_eq(log_count("<5>plugin testplug unloaded"), 1);
    ck_assert_int_eq(call_status("tp_probe"), 404);
    ck_assert_int_eq(call_status("tp_sleep"), 404);

    /* drain-timeout 1: the call outlasts it, nothing changes. */
    reload_with(conf_text(scale_so(), test_so("testplug"), NULL));
    bg_start(&b, "b");
    char text[2048];
    snprintf(text, sizeof text, "drain-timeout = 1\nplugin = %s\n", scale_so());
    reload_with(text);
    ck_assert_int_eq(log_count("(testplug): 1 calls still running in its handlers after 1000 "
                               "ms (kept the 2 plugins loaded before)"), 1);
    ck_assert_int_eq(call_status("tp_probe"), 200);
    ck_assert_int_eq(bg_finish(&b), 200);
    ck_assert_int_eq(call_status("tp_sleep"), 400);     /* not a path: its own answer */
    stop_with_conf();
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
    tcase_add_test(tc, reload_adds_removes_and_restarts_plugins);
    tcase_add_test(tc, reload_failures_change_nothing);
    tcase_add_test(tc, reload_waits_for_calls_in_handlers);
    tcase_add_test(tc, plugin_settings);
    suite_add_tcase(s, tc);
    tc = tcase_create("daemon");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, daemon_serves_plugin_routes);
    tcase_add_test(tc, daemon_refuses_to_start_with_a_bad_plugin);
    tcase_add_test(tc, sighup_loads_and_unloads_plugins);
    tcase_add_test(tc, sighup_waits_for_a_call_in_a_removed_plugin);
    suite_add_tcase(s, tc);
    return s;
}
