/* routes.c - the route table and the call object routes work on.
 *
 * The table is a uthash map under a rwlock; lookups copy the ops out, so a route removed
 * meanwhile is never dereferenced through the table. An owner whose arg can go away while
 * serving (plugins) counts the holds lookups take under the lock and frees arg only once the
 * route is gone and they are released; the others keep their arg alive until the daemon
 * stops. Calls own their output buffers. Thread-safe table; a call is one request's.
 */
#include "config.h"
#include "daemon/routes.h"
#include "daemon/sessions.h"
#include "proto/ids.h"
#include "transports/buf.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* An allocation failure inside uthash leaves the element out (hh.tbl == NULL) instead of
 * calling exit(-1). */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

/* ---- calls ------------------------------------------------------------------------------ */

tfd_call_t *tfd_call_new(const char *route, const char *user, const char *request_id,
                         const tfp_doc_t *in)
{
    tfd_call_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->out = tfp_doc_new();
    if (!c->out) {
        free(c);
        return NULL;
    }
    c->route = route;
    c->user = user ? user : "";
    c->request_id = request_id ? request_id : "";
    c->in = in;
    c->status = TFP_OK;
    return c;
}

void tfd_call_free(tfd_call_t *c)
{
    if (!c)
        return;
    tfp_doc_free(c->out);
    for (size_t i = 0; i < c->n_out_bufs; i++)
        free(c->out_bufs[i]);
    free(c->out_bufs);
    tfx_buf_free(c->adopted, c->adopted_cap);
    free(c);
}

void tfd_call_adopt(tfd_call_t *c, uint8_t *base, size_t cap)
{
    tfx_buf_free(c->adopted, c->adopted_cap);
    c->adopted = base;
    c->adopted_cap = cap;
}

void *tfd_call_alloc(tfd_call_t *c, size_t bytes)
{
    if (c->n_out_bufs == c->cap_out_bufs) {
        size_t ncap = c->cap_out_bufs ? c->cap_out_bufs * 2 : 4;
        void **nb = realloc(c->out_bufs, ncap * sizeof *nb);
        if (!nb)
            return NULL;
        c->out_bufs = nb;
        c->cap_out_bufs = ncap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p)
        c->out_bufs[c->n_out_bufs++] = p;
    return p;
}

tfp_status_t tfd_call_output(tfd_call_t *c, const char *name, tfp_dtype_t dt, int rank,
                             const uint64_t *shape, const void *data, uint64_t nbytes, int how)
{
    tfp_err_t err;
    const void *src = data;
    if (how == TFD_OUT_COPY && nbytes) {
        if (nbytes > SIZE_MAX)
            return tfd_call_fail(c, TFP_ENOMEM, "output '%s' is too large", name);
        void *p = tfd_call_alloc(c, (size_t)nbytes);
        if (!p)
            return tfd_call_fail(c, TFP_ENOMEM, "out of memory for output '%s'", name);
        memcpy(p, data, (size_t)nbytes);
        src = p;
    }
    if (tfp_doc_add(c->out, name, dt, rank, shape, src, nbytes, &err) != TFP_OK)
        return tfd_call_fail(c, err.code, "%s", err.msg);
    return TFP_OK;
}

tfp_status_t tfd_call_fail(tfd_call_t *c, tfp_status_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    c->status = code;
    return code;
}

void tfd_call_finish(tfd_call_t *c)
{
    if (c->on_finish)
        c->on_finish(c, c->on_finish_arg);
}

void *tfd_call_state(tfd_call_t *c)
{
    return c->session ? tfd_session_state(c->sessions, c->session, c->route) : NULL;
}

int tfd_call_set_state(tfd_call_t *c, void *state, size_t bytes, void (*destroy)(void *))
{
    if (!c->session) {
        if (destroy && state)
            destroy(state);
        return -1;
    }
    return tfd_session_set_state(c->sessions, c->session, c->route, state, bytes, destroy);
}

/* ---- the table -------------------------------------------------------------------------- */

typedef struct {
    char *name;
    tfd_route_ops_t ops;
    UT_hash_handle hh;
} entry_t;

struct tfd_routes {
    pthread_rwlock_t lock;
    entry_t *table;
};

tfd_routes_t *tfd_routes_new(void)
{
    tfd_routes_t *rs = calloc(1, sizeof *rs);
    if (rs)
        pthread_rwlock_init(&rs->lock, NULL);
    return rs;
}

void tfd_routes_free(tfd_routes_t *rs)
{
    if (!rs)
        return;
    entry_t *e, *tmp;
    HASH_ITER(hh, rs->table, e, tmp) {
        HASH_DEL(rs->table, e);
        free(e->name);
        free(e);
    }
    pthread_rwlock_destroy(&rs->lock);
    free(rs);
}

int tfd_routes_add(tfd_routes_t *rs, const char *name, const tfd_route_ops_t *ops)
{
    if (!tfp_name_valid(name))
        return -2;
    entry_t *e = calloc(1, sizeof *e);
    if (!e || !(e->name = strdup(name))) {
        free(e);
        return -3;
    }
    e->ops = *ops;
    pthread_rwlock_wrlock(&rs->lock);
    entry_t *old = NULL;
    HASH_FIND_STR(rs->table, name, old);
    int added = 0;
    if (!old) {
        HASH_ADD_KEYPTR(hh, rs->table, e->name, strlen(e->name), e);
        added = e->hh.tbl != NULL;
    }
    pthread_rwlock_unlock(&rs->lock);
    if (!added) {
        free(e->name);
        free(e);
        return old ? -1 : -3;
    }
    return 0;
}

int tfd_routes_remove(tfd_routes_t *rs, const char *name, const void *arg)
{
    pthread_rwlock_wrlock(&rs->lock);
    entry_t *e = NULL;
    HASH_FIND_STR(rs->table, name, e);
    if (e && e->ops.arg == arg)
        HASH_DEL(rs->table, e);
    else
        e = NULL;
    pthread_rwlock_unlock(&rs->lock);
    if (!e)
        return -1;
    free(e->name);
    free(e);
    return 0;
}

int tfd_routes_replace(tfd_routes_t *rs, const char *name, const void *arg,
                       const tfd_route_ops_t *ops)
{
    pthread_rwlock_wrlock(&rs->lock);
    entry_t *e = NULL;
    HASH_FIND_STR(rs->table, name, e);
    if (e && e->ops.arg == arg)
        e->ops = *ops;
    else
        e = NULL;
    pthread_rwlock_unlock(&rs->lock);
    return e ? 0 : -1;
}

int tfd_routes_find(tfd_routes_t *rs, const char *name, tfd_route_ops_t *ops)
{
    pthread_rwlock_rdlock(&rs->lock);
    entry_t *e = NULL;
    HASH_FIND_STR(rs->table, name, e);
    if (e) {
        *ops = e->ops;
        if (ops->hold)
            ops->hold(ops->arg);            /* under the lock: before any remove can return */
    }
    pthread_rwlock_unlock(&rs->lock);
    return e ? 0 : -1;
}

void tfd_route_ops_release(const tfd_route_ops_t *ops)
{
    if (ops->release)
        ops->release(ops->arg);
}

void tfd_routes_each(tfd_routes_t *rs, void (*fn)(const char *, const tfd_route_ops_t *, void *),
                     void *arg)
{
    pthread_rwlock_rdlock(&rs->lock);
    for (entry_t *e = rs->table; e; e = e->hh.next)
        fn(e->name, &e->ops, arg);
    pthread_rwlock_unlock(&rs->lock);
}
