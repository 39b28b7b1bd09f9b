/* plugins.c - loads route plugins (dlopen) and adapts the route table's calls to the plugin
 * ABI of tfetch-plugin.h.
 *
 * Each loaded plugin owns its host table (first in its record, so host->log finds the plugin)
 * and one record per route, which is the route's arg in the table. A handler sees a
 * tfpl_call_t that lives on the calling thread's stack and points at the route table's call.
 * Loading and unloading: main thread, no call running. Handlers: any worker thread; nothing
 * here is written after loading.
 */
#include "config.h"
#include "daemon/plugins.h"
#include "daemon/log.h"
#include "daemon/tfetch-plugin.h"
#include "proto/ids.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    const tfpl_route_t *def;
} proute_t;

struct plugin {
    tfpl_host_t host;               /* first: host->log recovers the plugin from it */
    char *path;
    void *dl;
    const tfpl_plugin_t *def;
    int started;                    /* init succeeded (or there is none): fini is due */
    proute_t *routes;               /* def->nroutes */
    size_t registered;              /* routes[0..registered) are in the table */
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
    tfd_log(level, "plugin %s: %s", p->def && p->def->name ? p->def->name : p->path, msg);
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
        tfd_routes_remove(ps->rs, p->routes[p->registered].def->name, &p->routes[p->registered]);
    }
}

/* Undoes whatever of load got done. */
static void unload(tfd_plugins_t *ps, plugin_t *p)
{
    unregister(ps, p);
    if (p->started && p->def->fini)
        p->def->fini(&p->host);
    if (p->dl)
        dlclose(p->dl);
    free(p->routes);
    free(p->path);
    free(p);
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

/* Registers p's routes. 0, or -1 with err set (those registered stay for unload). */
static int register_routes(tfd_plugins_t *ps, plugin_t *p, tfp_err_t *err)
{
    const tfpl_plugin_t *d = p->def;
    for (size_t i = 0; i < d->nroutes; i++) {
        const tfpl_route_t *r = &d->routes[i];
        tfd_route_ops_t ops = {.start = plugin_start, .arg = &p->routes[i], .kind = "plugin",
                               .stateless = (r->flags & TFPL_ROUTE_STATELESS) != 0};
        int rc = tfd_routes_add(ps->rs, r->name, &ops);
        if (rc == -1) {
            tfp_err_set(err, TFP_EINVAL, "plugin %s (%s): route '%s' is already taken (by a "
                        "built-in route, another plugin or this one)", p->path, d->name, r->name);
            return -1;
        }
        if (rc != 0) {
            tfp_err_set(err, rc == -3 ? TFP_ENOMEM : TFP_EINVAL, "plugin %s (%s): cannot add "
                        "route '%s'", p->path, d->name, r->name);
            return -1;
        }
        p->registered++;
    }
    return 0;
}

int tfd_plugins_load(tfd_plugins_t *ps, const char *spec, tfp_err_t *err)
{
    size_t plen = strcspn(spec, " \t");
    const char *args = spec + plen + strspn(spec + plen, " \t");
    if (plen == 0) {
        tfp_err_set(err, TFP_EINVAL, "plugin setting '%s' names no file", spec);
        return -1;
    }
    plugin_t *p = calloc(1, sizeof *p);
    if (!p || !(p->path = strndup(spec, plen))) {
        free(p);
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return -1;
    }
    p->host = host_template;

    dlerror();
    p->dl = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
    if (!p->dl) {
        const char *why = dlerror();
        tfp_err_set(err, TFP_EINVAL, "cannot load plugin %s: %s", p->path, why ? why : "?");
        goto unload;
    }
    for (plugin_t *q = ps->last; q; q = q->next)
        if (q->dl == p->dl) {
            tfp_err_set(err, TFP_EINVAL, "plugin %s is already loaded (as %s)", p->path,
                        q->path);
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
    if (!(p->routes = calloc(p->def->nroutes, sizeof *p->routes))) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        goto unload;
    }
    for (size_t i = 0; i < p->def->nroutes; i++)
        p->routes[i] = (proute_t){p, &p->def->routes[i]};

    if (p->def->init) {
        int rc = p->def->init(&p->host, args);
        if (rc != 0) {
            tfp_err_set(err, TFP_EINVAL, "plugin %s (%s) refused to start (init returned %d; "
                        "its reason is logged above)", p->path, p->def->name, rc);
            goto unload;
        }
    } else if (*args) {
        tfp_err_set(err, TFP_EINVAL, "plugin %s (%s) takes no arguments, but was given '%s'",
                    p->path, p->def->name, args);
        goto unload;
    }
    p->started = 1;
    if (register_routes(ps, p, err) != 0)
        goto unload;

    char names[256] = "";
    size_t k = 0;
    for (size_t i = 0; i < p->def->nroutes && k < sizeof names; i++)
        k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "",
                              p->def->routes[i].name);
    const char *version = p->def->version ? p->def->version : "";
    tfd_log(LOG_INFO, "plugin %s%s%s loaded from %s: routes %s", p->def->name,
            *version ? " " : "", version, p->path, names);
    p->next = ps->last;
    ps->last = p;
    ps->n++;
    return 0;
unload:
    unload(ps, p);
    return -1;
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
