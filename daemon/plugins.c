/* plugins.c - loads route plugins (dlopen), adapts the route table's calls to the plugin
 * ABI of tfetch-plugin.h, and swaps plugins in and out while serving (SIGHUP).
 *
 * Each loaded plugin owns its host table (first in its record, so host->log finds the plugin)
 * and one record per route, which is the route's arg in the table. A handler sees a
 * tfpl_call_t that lives on the calling thread's stack and points at the route table's call.
 * A lookup holds the route (routes.h), counted in the plugin's `active`, until the call is
 * over: a reload takes a plugin's routes out of the table, waits for that count to fall to
 * zero and for its per-user states to be freed, and only then runs fini and dlcloses it.
 * Loading, reloading and freeing: the main thread. Handlers, hold and release: any worker
 * thread; they read only what loading wrote, and the atomic count.
 */
#include "config.h"
#include "daemon/plugins.h"
#include "daemon/log.h"
#include "daemon/sessions.h"
#include "daemon/tfetch-plugin.h"
#include "proto/ids.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The header's statuses are generated from the one table (tfetch-status.h); its dtypes are
 * written out, as it cannot include proto/dtype.h, so check those here. */
#define X(n, v, sz, s) _Static_assert((int)TFPL_##n == (int)TFP_##n, "dtype " #n);
TFP_DTYPE_MAP(X)
#undef X
_Static_assert(TFPL_MAX_RANK == TFP_MAX_RANK, "tfetch-plugin.h: TFPL_MAX_RANK");

#define KNOWN_ROUTE_FLAGS TFPL_ROUTE_STATELESS

typedef struct plugin plugin_t;

typedef struct {
    plugin_t *plugin;
    const tfpl_route_t *def;        /* NULL once the code is unloaded */
    char *name;                     /* def->name, copied: the table and a rollback use it */
    int reserved;                   /* a reload added the placeholder under this name */
} proute_t;

struct plugin {
    tfpl_host_t host;               /* first: host->log recovers the plugin from it */
    char *spec;                     /* the setting: "PATH [ARGS]" */
    char *path;
    const char *args;               /* in spec */
    char *name;                     /* def->name, copied */
    void *dl;
    const tfpl_plugin_t *def;       /* NULL once the code is unloaded */
    int started;                    /* init succeeded (or there is none): fini is due */
    proute_t *routes;               /* nroutes (def->nroutes) */
    size_t nroutes;
    size_t registered;              /* routes[0..registered) are in the table as its own */
    atomic_uint active;             /* holds on its routes: calls in or entering its handlers */
    int out;                        /* a reload is taking it out */
    plugin_t *next;                 /* loaded before this one */
};

struct tfd_plugins {
    tfd_routes_t *rs;
    plugin_t *last;                 /* most recently loaded */
    size_t n;
};

/* What a handler's call pointer points at. */
struct tfpl_call {
    tfd_call_t *c;
    const proute_t *route;
};

/* ---- the host table --------------------------------------------------------------------- */

static int status_known(int st)
{
    switch (st) {
#define X(n, v, h, s) case v:
    TFP_STATUS_MAP(X)
#undef X
        return 1;
    default:
        return 0;
    }
}

static void tensor_out(const tfp_tensor_t *t, tfpl_tensor_t *out)
{
    out->name = t->name;
    out->dtype = (int)t->dtype;
    out->rank = t->rank;
    out->shape = t->shape;
    out->data = t->data;
    out->nbytes = t->nbytes;
}

static size_t h_input_count(const tfpl_call_t *call) { return call->c->in->n; }

static int h_input_at(const tfpl_call_t *call, size_t i, tfpl_tensor_t *out)
{
    if (i >= call->c->in->n)
        return -1;
    tensor_out(&call->c->in->t[i], out);
    return 0;
}

static int h_input_find(const tfpl_call_t *call, const char *name, tfpl_tensor_t *out)
{
    const tfp_tensor_t *t = name ? tfp_doc_find(call->c->in, name) : NULL;
    if (!t)
        return -1;
    tensor_out(t, out);
    return 0;
}

static const char *h_input_meta(const tfpl_call_t *call, const char *key)
{
    return key ? tfp_doc_meta(call->c->in, key) : NULL;
}

static const char *h_user(const tfpl_call_t *call) { return call->c->user; }
static const char *h_request_id(const tfpl_call_t *call) { return call->c->request_id; }
static const char *h_route(const tfpl_call_t *call) { return call->c->route; }
static void *h_route_arg(const tfpl_call_t *call) { return call->route->def->arg; }
static void *h_state(tfpl_call_t *call) { return tfd_call_state(call->c); }

static int h_set_state(tfpl_call_t *call, void *state, size_t bytes, void (*destroy)(void *))
{
    return tfd_call_set_state(call->c, state, bytes, destroy);
}

/* An output the plugin described wrongly is the plugin's bug: 500, not the client's 400. */
static int bad_output(tfpl_call_t *call, const char *name, const char *why)
{
    return tfd_call_fail(call->c, TFP_EINTERNAL, "route '%s' produced an invalid output '%s': %s",
                         call->c->route, name ? name : "(null)", why);
}

/* Checks an output's description; sets *nbytes to what dtype x shape make. */
static int check_output(tfpl_call_t *call, const char *name, int dtype, int rank,
                        const uint64_t *shape, uint64_t *nbytes)
{
    tfp_err_t err;
    if (!name)
        return bad_output(call, name, "no name");
    if (dtype < 0 || dtype >= TFP_DTYPE_COUNT)
        return bad_output(call, name, "unknown dtype");
    if (tfp_shape_nbytes((tfp_dtype_t)dtype, rank, shape, nbytes, &err) != TFP_OK)
        return err.code == TFP_ENOMEM ? tfd_call_fail(call->c, TFP_ENOMEM, "out of memory")
                                      : bad_output(call, name, err.msg);
    if (*nbytes > SIZE_MAX)
        return tfd_call_fail(call->c, TFP_ENOMEM, "output '%s' is too large", name);
    return TFP_OK;
}

/* Adds an output whose bytes the call owns or borrows; maps description errors to 500. */
static int add_output(tfpl_call_t *call, const char *name, int dtype, int rank,
                      const uint64_t *shape, const void *data, uint64_t nbytes, int how)
{
    tfp_status_t st = tfd_call_output(call->c, name, (tfp_dtype_t)dtype, rank, shape, data,
                                      nbytes, how);
    if (st == TFP_OK || st == TFP_ENOMEM)
        return st;
    char why[sizeof call->c->msg];
    snprintf(why, sizeof why, "%s", call->c->msg);
    return bad_output(call, name, why);
}

static int h_output_add(tfpl_call_t *call, const char *name, int dtype, int rank,
                        const uint64_t *shape, const void *data, uint64_t nbytes)
{
    uint64_t want;
    if (check_output(call, name, dtype, rank, shape, &want) != TFP_OK)
        return call->c->status;
    if (nbytes != want) {
        char why[128];
        snprintf(why, sizeof why, "%llu bytes given, its dtype and shape make %llu",
                 (unsigned long long)nbytes, (unsigned long long)want);
        return bad_output(call, name, why);
    }
    if (nbytes && !data)
        return bad_output(call, name, "no data");
    return add_output(call, name, dtype, rank, shape, data, nbytes, TFD_OUT_COPY);
}

static void *h_output_alloc(tfpl_call_t *call, const char *name, int dtype, int rank,
                            const uint64_t *shape)
{
    uint64_t nbytes;
    if (check_output(call, name, dtype, rank, shape, &nbytes) != TFP_OK)
        return NULL;
    void *p = tfd_call_alloc(call->c, (size_t)nbytes);      /* owned by the call from here */
    if (!p) {
        tfd_call_fail(call->c, TFP_ENOMEM, "out of memory for output '%s'", name);
        return NULL;
    }
    if (add_output(call, name, dtype, rank, shape, p, nbytes, TFD_OUT_REF) != TFP_OK)
        return NULL;
    return p;
}

static int h_output_meta(tfpl_call_t *call, const char *key, const char *value)
{
    tfp_err_t err;
    if (!key || !value)
        return bad_output(call, key, "metadata without a key or value");
    if (tfp_doc_set_meta(call->c->out, key, value, &err) == TFP_OK)
        return TFP_OK;
    if (err.code == TFP_ENOMEM)
        return tfd_call_fail(call->c, TFP_ENOMEM, "out of memory");
    return tfd_call_fail(call->c, TFP_EINTERNAL, "route '%s' set invalid metadata '%s': %s",
                         call->c->route, key, err.msg);
}

static int h_fail(tfpl_call_t *call, int status, const char *fmt, ...)
{
    char msg[sizeof call->c->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt ? fmt : "", ap);
    va_end(ap);
    if (status == TFPL_OK || !status_known(status))
        return tfd_call_fail(call->c, TFP_EINTERNAL, "route '%s' failed with status %d: %s",
                             call->c->route, status, msg);
    return tfd_call_fail(call->c, (tfp_status_t)status, "%s", msg);
}

static void h_log(const tfpl_host_t *host, int level, const char *fmt, ...)
{
    const plugin_t *p = (const plugin_t *)host;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt ? fmt : "", ap);
    va_end(ap);
    if (level < LOG_ERR)
        level = LOG_ERR;
    if (level > LOG_DEBUG)
        level = LOG_DEBUG;
    tfd_log(level, "plugin %s: %s", p->name ? p->name : p->path, msg);
}

static const char *h_dtype_name(int dt)
{
    return dt >= 0 && dt < TFP_DTYPE_COUNT ? tfp_dtype_name((tfp_dtype_t)dt) : NULL;
}

static size_t h_dtype_size(int dt)
{
    return dt >= 0 && dt < TFP_DTYPE_COUNT ? tfp_dtype_size((tfp_dtype_t)dt) : 0;
}

static const char *h_status_name(int st) { return tfp_status_name((tfp_status_t)st); }

static const tfpl_host_t host_template = {
    .abi = TFPL_ABI,
    .size = sizeof(tfpl_host_t),
    .input_count = h_input_count,
    .input_at = h_input_at,
    .input_find = h_input_find,
    .input_meta = h_input_meta,
    .user = h_user,
    .request_id = h_request_id,
    .route = h_route,
    .route_arg = h_route_arg,
    .state = h_state,
    .set_state = h_set_state,
    .output_add = h_output_add,
    .output_alloc = h_output_alloc,
    .output_meta = h_output_meta,
    .fail = h_fail,
    .log = h_log,
    .dtype_name = h_dtype_name,
    .dtype_size = h_dtype_size,
    .status_name = h_status_name,
};

/* ---- the route table's side ------------------------------------------------------------- */

static int plugin_start(void *arg, tfd_call_t *c)
{
    const proute_t *r = arg;
    struct tfpl_call call = {c, r};
    int rc = r->def->handler(&r->plugin->host, &call);
    if (c->status != TFP_OK || rc == TFPL_OK)       /* a recorded error wins */
        return TFD_CALL_DONE;
    if (status_known(rc))
        tfd_call_fail(c, (tfp_status_t)rc, "route '%s' failed: %s", c->route,
                      tfp_status_text((tfp_status_t)rc));
    else
        tfd_call_fail(c, TFP_EINTERNAL, "route '%s' returned %d, which is not a tfetch status",
                      c->route, rc);
    return TFD_CALL_DONE;
}

static void plugin_hold(void *arg)
{
    proute_t *r = arg;
    atomic_fetch_add(&r->plugin->active, 1);
}

/* The last touch of the plugin by a call: the reload may free it right after. */
static void plugin_release(void *arg)
{
    proute_t *r = arg;
    atomic_fetch_sub(&r->plugin->active, 1);
}

static tfd_route_ops_t route_ops(proute_t *r)
{
    return (tfd_route_ops_t){.start = plugin_start, .arg = r, .kind = "plugin",
                             .stateless = (r->def->flags & TFPL_ROUTE_STATELESS) != 0,
                             .hold = plugin_hold, .release = plugin_release};
}

/* What a plugin's route answers while a reload swaps it (its arg is the set). */
static int reloading_start(void *arg, tfd_call_t *c)
{
    (void)arg;
    tfd_call_fail(c, TFP_EBUSY, "route '%s' is being reloaded (SIGHUP); try again", c->route);
    return TFD_CALL_DONE;
}

static tfd_route_ops_t placeholder(tfd_plugins_t *ps)
{
    return (tfd_route_ops_t){.start = reloading_start, .arg = ps, .kind = "plugin",
                             .stateless = 1};
}

/* ---- loading ---------------------------------------------------------------------------- */

tfd_plugins_t *tfd_plugins_new(tfd_routes_t *rs)
{
    tfd_plugins_t *ps = calloc(1, sizeof *ps);
    if (ps)
        ps->rs = rs;
    return ps;
}

size_t tfd_plugins_count(const tfd_plugins_t *ps) { return ps ? ps->n : 0; }

static void unregister(tfd_plugins_t *ps, plugin_t *p)
{
    while (p->registered > 0) {
        p->registered--;
        tfd_routes_remove(ps->rs, p->routes[p->registered].name, &p->routes[p->registered]);
    }
}

/* Runs fini (when due) and closes the code; the record (spec, route names) stays. */
static void close_code(plugin_t *p)
{
    if (p->started && p->def->fini)
        p->def->fini(&p->host);
    p->started = 0;
    if (p->dl)
        dlclose(p->dl);
    p->dl = NULL;
    p->def = NULL;
    for (size_t i = 0; i < p->nroutes; i++)
        p->routes[i].def = NULL;
}

/* Undoes whatever of open_plugin got done; its routes must be out of the table. */
static void free_plugin(plugin_t *p)
{
    close_code(p);
    for (size_t i = 0; i < p->nroutes; i++)
        free(p->routes[i].name);
    free(p->routes);
    free(p->name);
    free(p->path);
    free(p->spec);
    free(p);
}

static void unload(tfd_plugins_t *ps, plugin_t *p)
{
    unregister(ps, p);
    free_plugin(p);
}

/* Checks the description the plugin returned. 0, or -1 with err set. */
static int check_def(const plugin_t *p, tfp_err_t *err)
{
    const tfpl_plugin_t *d = p->def;
    if (d->abi != TFPL_ABI) {
        tfp_err_set(err, TFP_EINVAL, "plugin %s was built for plugin ABI %u, but this tfetchd "
                    "speaks ABI %d: rebuild it against this tfetchd's tfetch-plugin.h",
                    p->path, d->abi, TFPL_ABI);
        return -1;
    }
    if (!d->name || !*d->name) {
        tfp_err_set(err, TFP_EINVAL, "plugin %s has no name", p->path);
        return -1;
    }
    if (d->nroutes == 0 || !d->routes) {
        tfp_err_set(err, TFP_EINVAL, "plugin %s (%s) declares no routes", p->path, d->name);
        return -1;
    }
    for (size_t i = 0; i < d->nroutes; i++) {
        const tfpl_route_t *r = &d->routes[i];
        if (!tfp_name_valid(r->name)) {
            tfp_err_set(err, TFP_EINVAL, "plugin %s (%s): route %zu has an invalid name '%.64s' "
                        "(routes match [A-Za-z0-9._-]{1,255})", p->path, d->name, i,
                        r->name ? r->name : "(null)");
            return -1;
        }
        if (!r->handler) {
            tfp_err_set(err, TFP_EINVAL, "plugin %s (%s): route '%s' has no handler", p->path,
                        d->name, r->name);
            return -1;
        }
        if (r->flags & ~(unsigned)KNOWN_ROUTE_FLAGS) {
            tfp_err_set(err, TFP_EINVAL, "plugin %s (%s): route '%s' has flags 0x%x this tfetchd "
                        "does not know", p->path, d->name, r->name,
                        r->flags & ~(unsigned)KNOWN_ROUTE_FLAGS);
            return -1;
        }
    }
    return 0;
}

static void route_taken(const plugin_t *p, const char *route, tfp_err_t *err)
{
    tfp_err_set(err, TFP_EINVAL, "plugin %s (%s): route '%s' is already taken (by a built-in "
                "route, another plugin or this one)", p->path, p->name, route);
}

/* Registers p's routes. 0, or -1 with err set (those registered stay for unload). */
static int register_routes(tfd_plugins_t *ps, plugin_t *p, tfp_err_t *err)
{
    for (size_t i = 0; i < p->nroutes; i++) {
        tfd_route_ops_t ops = route_ops(&p->routes[i]);
        int rc = tfd_routes_add(ps->rs, p->routes[i].name, &ops);
        if (rc == -1) {
            route_taken(p, p->routes[i].name, err);
            return -1;
        }
        if (rc != 0) {
            tfp_err_set(err, rc == -3 ? TFP_ENOMEM : TFP_EINVAL, "plugin %s (%s): cannot add "
                        "route '%s'", p->path, p->name, p->routes[i].name);
            return -1;
        }
        p->registered++;
    }
    return 0;
}

/* The loaded plugin (in ps or in the list `also`) whose code is p's. */
static plugin_t *same_code(const tfd_plugins_t *ps, plugin_t *const *also, size_t nalso,
                           const plugin_t *p)
{
    for (plugin_t *q = ps->last; q; q = q->next)
        if (q->dl == p->dl)
            return q;
    for (size_t i = 0; i < nalso; i++)
        if (also[i]->dl == p->dl)
            return also[i];
    return NULL;
}

/* Opens spec up to its init; its routes are not registered. NULL with err set, or, when
 * late is given and the file is the code of a plugin a reload takes out, NULL with *late
 * set to that plugin (the file can only be opened again once that one is unloaded). Plugins
 * in `also` count as loaded. */
static plugin_t *open_plugin(tfd_plugins_t *ps, const char *spec, plugin_t *const *also,
                             size_t nalso, plugin_t **late, tfp_err_t *err)
{
    size_t plen = strcspn(spec, " \t");
    if (plen == 0) {
        tfp_err_set(err, TFP_EINVAL, "plugin setting '%s' names no file", spec);
        return NULL;
    }
    plugin_t *p = calloc(1, sizeof *p);
    if (!p || !(p->spec = strdup(spec)) || !(p->path = strndup(spec, plen))) {
        if (p)
            free(p->spec);
        free(p);
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return NULL;
    }
    p->args = p->spec + plen + strspn(p->spec + plen, " \t");
    p->host = host_template;
    atomic_init(&p->active, 0);

    dlerror();
    p->dl = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
    if (!p->dl) {
        const char *why = dlerror();
        tfp_err_set(err, TFP_EINVAL, "cannot load plugin %s: %s", p->path, why ? why : "?");
        goto unload;
    }
    plugin_t *q = same_code(ps, also, nalso, p);
    if (q && late && q->out) {
        *late = q;
        goto unload;
    }
    if (q) {
        tfp_err_set(err, TFP_EINVAL, "plugin %s is already loaded (as %s)", p->path, q->path);
        goto unload;
    }
    dlerror();
    const tfpl_plugin_t *(*entry)(unsigned) =
        (const tfpl_plugin_t *(*)(unsigned))dlsym(p->dl, TFPL_ENTRY_SYMBOL);
    if (!entry) {
        tfp_err_set(err, TFP_EINVAL, "%s is not a tfetch plugin: it has no %s function",
                    p->path, TFPL_ENTRY_SYMBOL);
        goto unload;
    }
    p->def = entry(TFPL_ABI);
    if (!p->def) {
        tfp_err_set(err, TFP_EINVAL, "plugin %s does not support this tfetchd's plugin ABI %d "
                    "(%s returned NULL)", p->path, TFPL_ABI, TFPL_ENTRY_SYMBOL);
        goto unload;
    }
    if (check_def(p, err) != 0)
        goto unload;
    if (!(p->name = strdup(p->def->name)) ||
        !(p->routes = calloc(p->def->nroutes, sizeof *p->routes))) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        goto unload;
    }
    for (size_t i = 0; i < p->def->nroutes; i++, p->nroutes++) {
        p->routes[i] = (proute_t){p, &p->def->routes[i], strdup(p->def->routes[i].name), 0};
        if (!p->routes[i].name) {
            tfp_err_set(err, TFP_ENOMEM, "out of memory");
            goto unload;
        }
    }
    if (p->def->init) {
        int rc = p->def->init(&p->host, p->args);
        if (rc != 0) {
            tfp_err_set(err, TFP_EINVAL, "plugin %s (%s) refused to start (init returned %d; "
                        "its reason is logged above)", p->path, p->name, rc);
            goto unload;
        }
    } else if (*p->args) {
        tfp_err_set(err, TFP_EINVAL, "plugin %s (%s) takes no arguments, but was given '%s'",
                    p->path, p->name, p->args);
        goto unload;
    }
    p->started = 1;
    return p;
unload:
    free_plugin(p);
    return NULL;
}

/* "a, b, c": p's route names, cut at cap. */
static void route_names(const plugin_t *p, char *names, size_t cap)
{
    size_t k = 0;
    names[0] = '\0';
    for (size_t i = 0; i < p->nroutes && k < cap; i++)
        k += (size_t)snprintf(names + k, cap - k, "%s%s", i ? ", " : "", p->routes[i].name);
}

static void log_loaded(const plugin_t *p, int level)
{
    char names[256];
    route_names(p, names, sizeof names);
    const char *version = p->def->version ? p->def->version : "";
    tfd_log(level, "plugin %s%s%s loaded from %s: routes %s", p->name, *version ? " " : "",
            version, p->path, names);
}

static void link_plugin(tfd_plugins_t *ps, plugin_t *p)
{
    p->next = ps->last;
    ps->last = p;
    ps->n++;
}

int tfd_plugins_load(tfd_plugins_t *ps, const char *spec, tfp_err_t *err)
{
    plugin_t *p = open_plugin(ps, spec, NULL, 0, NULL, err);
    if (!p)
        return -1;
    if (register_routes(ps, p, err) != 0) {
        unload(ps, p);
        return -1;
    }
    log_loaded(p, LOG_INFO);
    link_plugin(ps, p);
    return 0;
}

tfd_plugins_t *tfd_plugins_start(tfd_routes_t *rs, const tfd_config_t *cfg, tfp_err_t *err)
{
    tfd_plugins_t *ps = tfd_plugins_new(rs);
    if (!ps) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return NULL;
    }
    for (unsigned i = 0; i < cfg->plugins.n; i++)
        if (tfd_plugins_load(ps, cfg->plugins.v[i], err) != 0) {
            tfd_plugins_free(ps);
            return NULL;
        }
    return ps;
}

void tfd_plugins_free(tfd_plugins_t *ps)
{
    if (!ps)
        return;
    while (ps->last) {
        plugin_t *p = ps->last;
        ps->last = p->next;
        unload(ps, p);
    }
    free(ps);
}

/* ---- reloading (SIGHUP) -------------------------------------------------------------------- */

/* One reload: the plugins it opens, in the order the settings name them. */
typedef struct {
    tfd_plugins_t *ps;
    tfd_sessions_t *sessions;
    const tfd_plugins_wait_t *w;
    plugin_t *in[TFD_MAX_PLUGINS];          /* opened, routes not yet in the table */
    size_t nin;
    const char *late[TFD_MAX_PLUGINS];      /* specs whose file an outgoing plugin holds */
    plugin_t *holder[TFD_MAX_PLUGINS];      /* ... that plugin */
    size_t nlate;
    int stubbed;                            /* outgoing routes are placeholders */
} reload_t;

/* Whether two settings name the same file with the same arguments. */
static int same_spec(const char *a, const char *b)
{
    size_t la = strcspn(a, " \t"), lb = strcspn(b, " \t");
    if (la != lb || strncmp(a, b, la) != 0)
        return 0;
    return strcmp(a + la + strspn(a + la, " \t"), b + lb + strspn(b + lb, " \t")) == 0;
}

/* Whether name is free once the plugins being taken out are gone: no route has it, or one
 * of theirs (their own ops, or the placeholder they left). */
static int free_soon(tfd_plugins_t *ps, const char *name)
{
    tfd_route_ops_t ops;
    if (tfd_routes_find(ps->rs, name, &ops) != 0)
        return 1;                                   /* free */
    int out = (ops.start == reloading_start && ops.arg == ps) ||
              (ops.start == plugin_start && ((proute_t *)ops.arg)->plugin->out);
    tfd_route_ops_release(&ops);
    return out;
}

/* Checks that p's route names are free once the outgoing plugins are gone: not in the
 * table, not another incoming plugin's, not p's twice. 0, or -1 with err set. */
static int check_names(reload_t *rl, const plugin_t *p, tfp_err_t *err)
{
    for (size_t i = 0; i < p->nroutes; i++) {
        const char *name = p->routes[i].name;
        int taken = !free_soon(rl->ps, name);
        for (size_t j = 0; j < i && !taken; j++)
            taken = strcmp(p->routes[j].name, name) == 0;
        for (size_t k = 0; k < rl->nin && !taken; k++)
            for (size_t j = 0; rl->in[k] != p && j < rl->in[k]->nroutes && !taken; j++)
                taken = strcmp(rl->in[k]->routes[j].name, name) == 0;
        if (taken) {
            route_taken(p, name, err);
            return -1;
        }
    }
    return 0;
}

/* Unloads an outgoing plugin's code (its calls and states are gone), and says so. */
static void unload_code(plugin_t *q)
{
    char names[256];
    route_names(q, names, sizeof names);
    close_code(q);
    tfd_log(LOG_NOTICE, "plugin %s unloaded (%s): routes %s", q->name, q->spec, names);
}

/* Opens spec as an incoming plugin (or notes it as late). 0, or -1 with err set. */
static int open_incoming(reload_t *rl, const char *spec, int may_be_late, tfp_err_t *err)
{
    plugin_t *late = NULL;
    plugin_t *p = open_plugin(rl->ps, spec, rl->in, rl->nin, may_be_late ? &late : NULL, err);
    if (!p && late) {
        rl->late[rl->nlate] = spec;
        rl->holder[rl->nlate++] = late;
        return 0;
    }
    if (!p)
        return -1;
    rl->in[rl->nin++] = p;
    return check_names(rl, p, err);
}

/* Puts the placeholder in place of every outgoing plugin's routes: new calls get 503, and
 * nothing new holds them. */
static void stub_outgoing(reload_t *rl)
{
    tfd_route_ops_t stub = placeholder(rl->ps);
    for (plugin_t *q = rl->ps->last; q; q = q->next) {
        if (!q->out)
            continue;
        for (size_t i = 0; i < q->registered; i++)
            tfd_routes_replace(rl->ps->rs, q->routes[i].name, &q->routes[i], &stub);
        q->registered = 0;
    }
    rl->stubbed = 1;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits until no call runs in an outgoing plugin's handlers and their per-user states are
 * freed (by their own destructors, while their code is still there). 0, or -1 with err set
 * when the time is up or the wait's idle says to give up. */
static int quiesce(reload_t *rl, tfp_err_t *err)
{
    const tfd_plugins_wait_t *w = rl->w;
    long waited = 0, limit = (long)w->timeout_ms;
    int said = 0;
    for (;;) {
        unsigned calls = 0, busy = 0;
        const plugin_t *stuck = NULL;
        for (plugin_t *q = rl->ps->last; q; q = q->next)
            if (q->out && atomic_load(&q->active)) {
                calls += atomic_load(&q->active);
                stuck = q;
            }
        for (plugin_t *q = rl->ps->last; q && !calls && rl->sessions; q = q->next)
            for (size_t i = 0; q->out && i < q->nroutes; i++)
                if (!(q->routes[i].def->flags & TFPL_ROUTE_STATELESS)) {
                    unsigned b = tfd_sessions_drop_route(rl->sessions, q->routes[i].name);
                    if (b)
                        stuck = q;
                    busy += b;
                }
        if (!calls && !busy)
            return 0;
        if (!said) {
            tfd_log(LOG_NOTICE, "plugin %s: waiting up to %u ms for %u calls in its handlers "
                    "and %u sessions holding its states before unloading it", stuck->name,
                    w->timeout_ms, calls, busy);
            said = 1;
        }
        if (waited >= limit) {
            if (calls)
                tfp_err_set(err, TFP_EBUSY, "plugin %s (%s): %u calls still running in its "
                            "handlers after %u ms", stuck->path, stuck->name, calls,
                            w->timeout_ms);
            else
                tfp_err_set(err, TFP_EBUSY, "plugin %s (%s): %u sessions holding its states "
                            "still in use after %u ms", stuck->path, stuck->name, busy,
                            w->timeout_ms);
            return -1;
        }
        if (w->idle && w->idle(w->arg)) {
            tfp_err_set(err, TFP_EBUSY, "plugin %s (%s): gave up waiting for %u calls in its "
                        "handlers (the daemon is stopping)", stuck->path, stuck->name,
                        calls + busy);
            return -1;
        }
        nap_ms(20);
        waited += 20;
    }
}

/* Takes p's route names for it: each gets the placeholder, unless it has it already (an
 * outgoing plugin had the name). 0, or -1 with err set and the names it took given back. */
static int claim_names(tfd_plugins_t *ps, plugin_t *p, tfp_err_t *err)
{
    tfd_route_ops_t stub = placeholder(ps);
    for (size_t i = 0; i < p->nroutes; i++) {
        tfd_route_ops_t ops;
        int rc = -1;
        if (tfd_routes_find(ps->rs, p->routes[i].name, &ops) == 0) {
            tfd_route_ops_release(&ops);
            if (ops.start == reloading_start && ops.arg == ps)
                continue;
        } else {
            rc = tfd_routes_add(ps->rs, p->routes[i].name, &stub);
        }
        if (rc != 0) {
            if (rc == -3)
                tfp_err_set(err, TFP_ENOMEM, "out of memory");
            else
                route_taken(p, p->routes[i].name, err);
            for (size_t j = 0; j < i; j++)
                if (p->routes[j].reserved) {
                    tfd_routes_remove(ps->rs, p->routes[j].name, ps);
                    p->routes[j].reserved = 0;
                }
            return -1;
        }
        p->routes[i].reserved = 1;
    }
    return 0;
}

/* Puts p's routes in place of the placeholders of its names, each in one step. */
static void publish(tfd_plugins_t *ps, plugin_t *p)
{
    for (size_t i = 0; i < p->nroutes; i++) {
        tfd_route_ops_t ops = route_ops(&p->routes[i]);
        tfd_routes_replace(ps->rs, p->routes[i].name, ps, &ops);    /* ours: cannot fail */
        p->routes[i].reserved = 0;
    }
    p->registered = p->nroutes;
}

/* Puts the outgoing plugin q back, after its code was unloaded: opened again from its
 * setting, its routes in place of its placeholders. On failure its routes are gone. */
static void reopen_outgoing(reload_t *rl, plugin_t **link, plugin_t *q)
{
    tfd_plugins_t *ps = rl->ps;
    tfp_err_t err = {0};
    plugin_t *p = open_plugin(ps, q->spec, NULL, 0, NULL, &err);
    if (p && claim_names(ps, p, &err) != 0) {
        free_plugin(p);                             /* never published: no call ran */
        p = NULL;
    }
    if (p)
        publish(ps, p);
    for (size_t i = 0; i < q->nroutes; i++)
        tfd_routes_remove(ps->rs, q->routes[i].name, ps);      /* placeholders left over */
    if (!p) {
        tfd_log(LOG_ERR, "plugin %s (%s) could not be started again with its old settings, so "
                "its routes are gone: %s", q->path, q->name, err.msg);
        *link = q->next;
        ps->n--;
        free_plugin(q);
        return;
    }
    tfd_log(LOG_NOTICE, "plugin %s started again from %s", p->name, p->spec);
    p->next = q->next;
    *link = p;
    free_plugin(q);
}

/* Undoes a reload that failed: closes what it opened and puts the outgoing plugins back. */
static void undo(reload_t *rl)
{
    tfd_plugins_t *ps = rl->ps;
    for (size_t k = 0; k < rl->nin; k++) {      /* before any outgoing opens its file again */
        plugin_t *p = rl->in[k];
        for (size_t i = 0; i < p->nroutes; i++)
            if (p->routes[i].reserved)
                tfd_routes_remove(ps->rs, p->routes[i].name, ps);
        free_plugin(p);
    }
    rl->nin = 0;
    for (plugin_t **link = &ps->last, *q; (q = *link);) {
        if (!q->out) {
            link = &q->next;
            continue;
        }
        q->out = 0;
        if (!q->dl) {
            reopen_outgoing(rl, link, q);
            continue;
        }
        for (size_t i = 0; rl->stubbed && i < q->nroutes; i++) {
            tfd_route_ops_t ops = route_ops(&q->routes[i]);
            tfd_routes_replace(ps->rs, q->routes[i].name, ps, &ops);
        }
        q->registered = q->nroutes;
        link = &q->next;
    }
}

/* Publishes the incoming plugins (their routes replace the placeholders at once) and
 * unloads the outgoing ones, whose calls and states are gone. */
static void commit(reload_t *rl)
{
    tfd_plugins_t *ps = rl->ps;
    for (size_t k = 0; k < rl->nin; k++)
        publish(ps, rl->in[k]);
    for (plugin_t **link = &ps->last, *q; (q = *link);) {
        if (!q->out) {
            link = &q->next;
            continue;
        }
        for (size_t i = 0; i < q->nroutes; i++)
            tfd_routes_remove(ps->rs, q->routes[i].name, ps);  /* not taken over: 404 */
        if (q->dl)
            unload_code(q);
        *link = q->next;
        ps->n--;
        free_plugin(q);
    }
    for (size_t k = 0; k < rl->nin; k++) {
        log_loaded(rl->in[k], LOG_NOTICE);
        link_plugin(ps, rl->in[k]);
    }
    rl->nin = 0;
}

int tfd_plugins_reload(tfd_plugins_t *ps, const tfd_config_t *cfg, tfd_sessions_t *sessions,
                       const tfd_plugins_wait_t *w, tfp_err_t *err)
{
    static const tfd_plugins_wait_t no_wait = {0};
    reload_t rl = {.ps = ps, .sessions = sessions, .w = w ? w : &no_wait};
    const char *specs[TFD_MAX_PLUGINS];
    size_t nspecs = 0, nout = 0;
    for (plugin_t *q = ps->last; q; q = q->next)
        q->out = 1;
    for (unsigned i = 0; i < cfg->plugins.n; i++) {
        plugin_t *q = ps->last;
        while (q && !(q->out && same_spec(q->spec, cfg->plugins.v[i])))
            q = q->next;
        if (q)
            q->out = 0;                             /* stays as it is */
        else
            specs[nspecs++] = cfg->plugins.v[i];
    }
    for (plugin_t *q = ps->last; q; q = q->next)
        nout += (size_t)q->out;
    if (!nout && !nspecs)
        return 0;

    /* New files are opened (and started) first, while everything still serves. */
    for (size_t i = 0; i < nspecs; i++)
        if (open_incoming(&rl, specs[i], 1, err) != 0)
            goto undo;
    if (nout) {
        stub_outgoing(&rl);
        if (quiesce(&rl, err) != 0)
            goto undo;
    }
    /* A file an outgoing plugin holds (other arguments): that one goes first, so the new
     * one starts from a fresh copy of the code, as at start-up. */
    for (size_t i = 0; i < rl.nlate; i++) {
        if (rl.holder[i]->dl)                       /* named twice: refused just below */
            unload_code(rl.holder[i]);
        if (open_incoming(&rl, rl.late[i], 0, err) != 0)
            goto undo;
    }
    for (size_t k = 0; k < rl.nin; k++)
        if (claim_names(ps, rl.in[k], err) != 0)
            goto undo;
    commit(&rl);
    return 0;
undo:
    undo(&rl);
    return -1;
}
