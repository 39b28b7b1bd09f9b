/* workers.c - worker processes serving routes over long-polls.
 *
 * One mutex guards everything: the workers, their queues of calls and their armed polls.
 * A call is owned by its caller's request; this module only holds a pointer to it between
 * queueing it and finishing it (tfd_call_finish), and every path that drops a worker finishes
 * its calls first, so the pointer never outlives the call. The route table entry of a worker
 * route carries the module itself as arg, never the worker, so a lookup racing a worker's
 * departure finds no dangling pointer: start simply reports the route gone.
 *
 * A worker's id and secret are 128 random bits each (getrandom), so neither can be guessed
 * from another worker's; the id names the worker, the secret proves a request comes from it:
 * every poll, answer and leave must present it, compared in constant time
 * (tfp_worker_secret_equal).
 */
#include "config.h"
#include "daemon/workers.h"
#include "daemon/waiters.h"
#include "transports/clock.h"
#include "transports/buf.h"
#include "proto/ids.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

typedef struct pending {
    struct pending *next;
    tfd_call_t *call;
    char id[TFD_CALL_ID_SIZE];
    int assigned;                   /* handed to the worker by a poll */
} pending_t;

typedef struct worker {
    struct worker *next;
    char id[TFD_WORKER_ID_SIZE];
    char secret[TFD_WORKER_SECRET_SIZE];
    char owner[TFP_MAX_USER_ID + 1];    /* the principal that registered it; "" auth off */
    char **routes;
    size_t nroutes;
    uint64_t last_seen_ms;
    pending_t *calls;               /* queued and assigned, oldest first */
    size_t queued;
    tfd_worker_poll_t *polls;       /* armed polls */
} worker_t;

struct tfd_workers {
    pthread_mutex_t lock;
    tfd_routes_t *routes;
    tfd_workers_limits_t lim;
    worker_t *list;
    unsigned count;
    uint64_t next_call;
    int stopping;
};

static worker_t *find_worker(tfd_workers_t *ws, const char *id)
{
    for (worker_t *w = ws->list; w; w = w->next)
        if (strcmp(w->id, id) == 0)
            return w;
    return NULL;
}

/* The worker id names, if secret is its own: *out, 0; -1 unknown id; -2 wrong secret.
 * Caller holds the lock. */
static int find_owned(tfd_workers_t *ws, const char *id, const char *secret, worker_t **out)
{
    worker_t *w = find_worker(ws, id);
    if (!w)
        return -1;
    if (!tfp_worker_secret_equal(w->secret, secret ? secret : ""))
        return -2;
    *out = w;
    return 0;
}

/* nbytes random bytes as 2 * nbytes lowercase hex digits and a NUL. 0, or -1. */
static int random_hex(char *out, size_t nbytes)
{
    unsigned char b[32];
    if (nbytes > sizeof b)
        return -1;
    for (size_t got = 0; got < nbytes;) {
        ssize_t n = getrandom(b + got, nbytes - got, 0);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[2 * nbytes] = '\0';
    return 0;
}

static worker_t *worker_for_route(tfd_workers_t *ws, const char *route)
{
    for (worker_t *w = ws->list; w; w = w->next)
        for (size_t i = 0; i < w->nroutes; i++)
            if (strcmp(w->routes[i], route) == 0)
                return w;
    return NULL;
}

/* Fails a call with 503 and finishes it. Caller holds the lock; the call's on_finish only
 * resumes its request. */
static void fail_call(pending_t *p, const char *why)
{
    tfd_call_fail(p->call, TFP_EBUSY, "%s", why);
    tfd_call_finish(p->call);
    free(p);
}

static void wake_poll(tfd_worker_poll_t *p, int state)
{
    p->state = state;
    tfx_req_resume(p->req);
}

/* Drops w: unregisters its routes, fails its calls, wakes its polls. Caller holds the lock. */
static void drop_worker(tfd_workers_t *ws, worker_t *w, const char *why)
{
    for (worker_t **pw = &ws->list; *pw; pw = &(*pw)->next)
        if (*pw == w) {
            *pw = w->next;
            break;
        }
    ws->count--;
    for (size_t i = 0; i < w->nroutes; i++) {
        tfd_routes_remove(ws->routes, w->routes[i], ws);
        free(w->routes[i]);
    }
    free(w->routes);
    char msg[256];
    snprintf(msg, sizeof msg, "the worker serving this route %s", why);
    while (w->calls) {
        pending_t *p = w->calls;
        w->calls = p->next;
        fail_call(p, msg);
    }
    while (w->polls) {
        tfd_worker_poll_t *p = w->polls;
        w->polls = p->next;
        wake_poll(p, TFD_POLL_GONE);
    }
    free(w);
}

/* ---- the route ops --------------------------------------------------------------------- */

/* Gives the oldest unassigned call of w to poll p. Caller holds the lock. 1 if it did. */
static int hand_out(worker_t *w, tfd_worker_poll_t *p)
{
    for (pending_t *c = w->calls; c; c = c->next) {
        if (c->assigned)
            continue;
        uint8_t *copy = malloc(c->call->in_len ? c->call->in_len : 1);
        if (!copy)
            return 0;
        memcpy(copy, c->call->in_bytes, c->call->in_len);
        c->assigned = 1;
        w->queued--;
        p->body = copy;
        p->len = c->call->in_len;
        snprintf(p->call_id, sizeof p->call_id, "%s", c->id);
        snprintf(p->route, sizeof p->route, "%s", c->call->route);
        snprintf(p->user, sizeof p->user, "%s", c->call->user);
        snprintf(p->request_id, sizeof p->request_id, "%s", c->call->request_id);
        p->state = TFD_POLL_GOT;
        return 1;
    }
    return 0;
}

static int worker_start(void *arg, tfd_call_t *call)
{
    tfd_workers_t *ws = arg;
    pthread_mutex_lock(&ws->lock);
    worker_t *w = worker_for_route(ws, call->route);
    if (!w || ws->stopping) {
        pthread_mutex_unlock(&ws->lock);
        tfd_call_fail(call, TFP_EBUSY, "the worker serving route '%s' is gone", call->route);
        return TFD_CALL_DONE;
    }
    if (w->queued >= ws->lim.max_queue) {
        pthread_mutex_unlock(&ws->lock);
        tfd_call_fail(call, TFP_EBUSY, "the worker serving route '%s' has %zu calls waiting",
                      call->route, w->queued);
        return TFD_CALL_DONE;
    }
    if (!call->in_bytes) {
        pthread_mutex_unlock(&ws->lock);
        tfd_call_fail(call, TFP_EINTERNAL, "no request document to forward");
        return TFD_CALL_DONE;
    }
    pending_t *p = calloc(1, sizeof *p);
    if (!p) {
        pthread_mutex_unlock(&ws->lock);
        tfd_call_fail(call, TFP_ENOMEM, "out of memory");
        return TFD_CALL_DONE;
    }
    p->call = call;
    snprintf(p->id, sizeof p->id, "c%llu", (unsigned long long)++ws->next_call);
    pending_t **tail = &w->calls;
    while (*tail)
        tail = &(*tail)->next;
    *tail = p;
    w->queued++;
    /* An armed poll takes it at once. */
    tfd_worker_poll_t *poll = w->polls;
    if (poll && hand_out(w, poll)) {
        w->polls = poll->next;
        tfx_req_resume(poll->req);
    }
    pthread_mutex_unlock(&ws->lock);
    return TFD_CALL_PENDING;
}

/* The caller went away: forgets the call wherever it waits (queued or in a worker's hands),
 * so nothing here touches it again; the worker's answer, if it comes, finds no call (404).
 * Taking the lock also waits out a finish running on another thread. */
static void worker_cancel(void *arg, tfd_call_t *call)
{
    tfd_workers_t *ws = arg;
    pthread_mutex_lock(&ws->lock);
    for (worker_t *w = ws->list; w; w = w->next)
        for (pending_t **pp = &w->calls; *pp; pp = &(*pp)->next)
            if ((*pp)->call == call) {
                pending_t *p = *pp;
                *pp = p->next;
                if (!p->assigned)
                    w->queued--;
                free(p);
                goto out;
            }
out:
    pthread_mutex_unlock(&ws->lock);
}

/* ---- the API --------------------------------------------------------------------------- */

tfd_workers_t *tfd_workers_new(tfd_routes_t *routes, const tfd_workers_limits_t *lim)
{
    tfd_workers_t *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    pthread_mutex_init(&ws->lock, NULL);
    ws->routes = routes;
    ws->lim = *lim;
    return ws;
}

void tfd_workers_free(tfd_workers_t *ws)
{
    if (!ws)
        return;
    tfd_workers_shutdown(ws);
    pthread_mutex_destroy(&ws->lock);
    free(ws);
}

tfp_status_t tfd_workers_register(tfd_workers_t *ws, const char *const *routes, size_t n,
                                  char id[TFD_WORKER_ID_SIZE],
                                  char secret[TFD_WORKER_SECRET_SIZE], tfp_err_t *err)
{
    static const tfd_route_ops_t proto_ops = {.start = worker_start, .cancel = worker_cancel,
                                             .kind = "worker", .stateless = 1};
    tfd_route_ops_t ops = proto_ops;
    ops.arg = ws;
    if (n == 0)
        return tfp_err_set(err, TFP_EBADREQ, "a worker must serve at least one route");
    worker_t *w = calloc(1, sizeof *w);
    if (!w || !(w->routes = calloc(n, sizeof *w->routes))) {
        free(w);
        return tfp_err_set(err, TFP_ENOMEM, "out of memory");
    }
    w->id[0] = 'w';
    if (random_hex(w->id + 1, 16) != 0 || random_hex(w->secret, TFP_WORKER_SECRET_LEN / 2) != 0) {
        free(w->routes);
        free(w);
        return tfp_err_set(err, TFP_EINTERNAL, "no randomness for a worker id (getrandom)");
    }
    pthread_mutex_lock(&ws->lock);
    tfp_status_t st = TFP_OK;
    if (ws->stopping) {
        st = tfp_err_set(err, TFP_EBUSY, "the server is shutting down");
    } else if (ws->count >= ws->lim.max_workers) {
        st = tfp_err_set(err, TFP_EBUSY, "too many workers (%u)", ws->lim.max_workers);
    } else {
        for (size_t i = 0; i < n && st == TFP_OK; i++) {
            int rc = tfd_routes_add(ws->routes, routes[i], &ops);
            if (rc == 0 && !(w->routes[w->nroutes] = strdup(routes[i]))) {
                tfd_routes_remove(ws->routes, routes[i], ws);
                rc = -3;
            }
            if (rc == 0)
                w->nroutes++;
            else if (rc == -1)
                st = tfp_err_set(err, TFP_EUNPROC, "route '%s' is already served", routes[i]);
            else if (rc == -2)
                st = tfp_err_set(err, TFP_EBADREQ, "route name '%.64s' is not valid", routes[i]);
            else
                st = tfp_err_set(err, TFP_ENOMEM, "out of memory");
        }
    }
    if (st != TFP_OK) {
        for (size_t i = 0; i < w->nroutes; i++) {
            tfd_routes_remove(ws->routes, w->routes[i], ws);
            free(w->routes[i]);
        }
        free(w->routes);
        free(w);
        pthread_mutex_unlock(&ws->lock);
        return st;
    }
    w->last_seen_ms = tfx_now_ms();
    w->next = ws->list;
    ws->list = w;
    ws->count++;
    memcpy(id, w->id, TFD_WORKER_ID_SIZE);
    memcpy(secret, w->secret, TFD_WORKER_SECRET_SIZE);
    pthread_mutex_unlock(&ws->lock);
    return TFP_OK;
}

void tfd_workers_set_owner(tfd_workers_t *ws, const char *id, const char *principal)
{
    pthread_mutex_lock(&ws->lock);
    worker_t *w = find_worker(ws, id);
    if (w)
        snprintf(w->owner, sizeof w->owner, "%s", principal ? principal : "");
    pthread_mutex_unlock(&ws->lock);
}

int tfd_workers_owned_by_other(tfd_workers_t *ws, const char *id, const char *principal)
{
    pthread_mutex_lock(&ws->lock);
    worker_t *w = find_worker(ws, id);
    int other = w && w->owner[0] && strcmp(w->owner, principal ? principal : "") != 0;
    pthread_mutex_unlock(&ws->lock);
    return other;
}

int tfd_workers_unregister(tfd_workers_t *ws, const char *id, const char *secret)
{
    pthread_mutex_lock(&ws->lock);
    worker_t *w = NULL;
    int rc = find_owned(ws, id, secret, &w);
    if (rc == 0)
        drop_worker(ws, w, "unregistered");
    pthread_mutex_unlock(&ws->lock);
    return rc;
}

int tfd_workers_poll(tfd_workers_t *ws, const char *id, const char *secret,
                     tfd_worker_poll_t *p)
{
    int rc;
    pthread_mutex_lock(&ws->lock);
    worker_t *w = NULL;
    int own = find_owned(ws, id, secret, &w);
    if (own == -1) {
        p->state = TFD_POLL_GONE;
        rc = -1;
    } else if (own == -2) {
        rc = -2;
    } else {
        w->last_seen_ms = tfx_now_ms();
        if (hand_out(w, p)) {
            rc = 1;
        } else if (p->deadline_ms <= w->last_seen_ms) {
            p->state = TFD_POLL_EMPTY;
            rc = 1;
        } else {
            p->state = TFD_POLL_ARMED;
            p->next = w->polls;
            w->polls = p;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&ws->lock);
    return rc;
}

/* Unlinks p from whichever worker holds it armed. Caller holds the lock. */
static void disarm(tfd_workers_t *ws, tfd_worker_poll_t *p)
{
    for (worker_t *w = ws->list; w; w = w->next)
        for (tfd_worker_poll_t **pp = &w->polls; *pp; pp = &(*pp)->next)
            if (*pp == p) {
                *pp = p->next;
                return;
            }
}

void tfd_workers_poll_done(tfd_workers_t *ws, tfd_worker_poll_t *p)
{
    pthread_mutex_lock(&ws->lock);
    if (p->state == TFD_POLL_ARMED)
        disarm(ws, p);
    p->state = TFD_POLL_IDLE;
    pthread_mutex_unlock(&ws->lock);
    free(p->body);
    p->body = NULL;
}

int tfd_workers_reply(tfd_workers_t *ws, const char *id, const char *secret,
                      const char *call_id, tfp_status_t st, const char *msg, tfp_doc_t *doc,
                      uint8_t *base, size_t cap)
{
    pthread_mutex_lock(&ws->lock);
    worker_t *w = NULL;
    int own = find_owned(ws, id, secret, &w);
    pending_t *p = NULL;
    if (own == 0) {
        w->last_seen_ms = tfx_now_ms();
        for (pending_t **pp = &w->calls; *pp; pp = &(*pp)->next)
            if (strcmp((*pp)->id, call_id) == 0 && (*pp)->assigned) {
                p = *pp;
                *pp = p->next;
                break;
            }
    }
    if (!p) {
        pthread_mutex_unlock(&ws->lock);
        tfp_doc_free(doc);
        tfx_buf_free(base, cap);
        return own == -2 ? -2 : -1;
    }
    tfd_call_t *call = p->call;
    free(p);
    if (st != TFP_OK) {
        tfd_call_fail(call, st, "%s", msg && *msg ? msg : tfp_status_text(st));
    } else {
        tfd_call_adopt(call, base, cap);
        base = NULL;
        for (size_t i = 0; doc && i < doc->n && call->status == TFP_OK; i++) {
            const tfp_tensor_t *t = &doc->t[i];
            tfd_call_output(call, t->name, t->dtype, t->rank, t->shape, t->data, t->nbytes,
                            TFD_OUT_REF);
        }
        tfp_err_t err;
        for (size_t i = 0; doc && i < doc->nmeta && call->status == TFP_OK; i++)
            if (tfp_doc_set_meta(call->out, doc->meta[i].key, doc->meta[i].value, &err) != TFP_OK)
                tfd_call_fail(call, err.code, "%s", err.msg);
    }
    tfd_call_finish(call);
    pthread_mutex_unlock(&ws->lock);
    tfp_doc_free(doc);
    tfx_buf_free(base, cap);
    return 0;
}

void tfd_workers_tick(tfd_workers_t *ws)
{
    uint64_t now = tfx_now_ms();
    pthread_mutex_lock(&ws->lock);
    worker_t *w = ws->list;
    while (w) {
        worker_t *next = w->next;
        /* Polls past their deadline come back empty (and renew the lease when they do). */
        tfd_worker_poll_t **pp = &w->polls;
        while (*pp) {
            tfd_worker_poll_t *p = *pp;
            if (p->deadline_ms <= now) {
                *pp = p->next;
                wake_poll(p, TFD_POLL_EMPTY);
            } else {
                pp = &p->next;
            }
        }
        if (!w->polls && now - w->last_seen_ms > ws->lim.lease_ms) {
            char why[96];
            snprintf(why, sizeof why, "stopped answering (no poll for %u ms)", ws->lim.lease_ms);
            drop_worker(ws, w, why);
        }
        w = next;
    }
    pthread_mutex_unlock(&ws->lock);
}

void tfd_workers_shutdown(tfd_workers_t *ws)
{
    pthread_mutex_lock(&ws->lock);
    ws->stopping = 1;
    while (ws->list)
        drop_worker(ws, ws->list, "is gone: the server is shutting down");
    pthread_mutex_unlock(&ws->lock);
}

unsigned tfd_workers_count(tfd_workers_t *ws)
{
    pthread_mutex_lock(&ws->lock);
    unsigned n = ws->count;
    pthread_mutex_unlock(&ws->lock);
    return n;
}
