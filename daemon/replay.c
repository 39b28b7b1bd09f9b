/* replay.c - the idempotency window: a uthash map of "user\nid" -> entry, in insertion order
 * (oldest first, which is also the eviction order), under one mutex. Waiting retries are
 * resumed when the first call completes; they then look up again and find the answer.
 */
#include "config.h"
#include "daemon/replay.h"
#include "transports/clock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* An allocation failure inside uthash leaves the element out (hh.tbl == NULL) instead of
 * calling exit(-1). */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

typedef struct waiter {
    struct waiter *next;
    tfx_req_t *req;
} waiter_t;

typedef struct {
    char *key;
    char *route;
    int done;
    time_t at;
    tfd_replay_answer_t ans;
    uint64_t bytes;                 /* what the answer holds, counted against max_bytes */
    waiter_t *waiters;
    UT_hash_handle hh;
} entry_t;

struct tfd_replay {
    pthread_mutex_t lock;
    tfd_replay_limits_t lim;
    entry_t *map;
    uint64_t entries, bytes, hits, running;
};

/* "user\nid", malloc'd. Two copies rather than snprintf: this runs twice for every request
 * that carries an id (begin, then complete), and snprintf was ~900 instructions of it. */
static char *make_key(const char *user, const char *id)
{
    size_t nu = strlen(user), ni = strlen(id);
    char *k = malloc(nu + ni + 2);
    if (k) {
        memcpy(k, user, nu);
        k[nu] = '\n';
        memcpy(k + nu + 1, id, ni + 1);
    }
    return k;
}

tfd_replay_t *tfd_replay_new(const tfd_replay_limits_t *lim)
{
    tfd_replay_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    pthread_mutex_init(&r->lock, NULL);
    r->lim = *lim;
    return r;
}

static void wake(entry_t *e)
{
    while (e->waiters) {
        waiter_t *w = e->waiters;
        e->waiters = w->next;
        tfx_req_resume(w->req);
        free(w);
    }
}

static void drop(tfd_replay_t *r, entry_t *e)
{
    HASH_DEL(r->map, e);
    r->entries--;
    r->bytes -= e->bytes;
    if (!e->done)
        r->running--;
    wake(e);
    tfd_blob_unref(e->ans.body);
    free(e->key);
    free(e->route);
    free(e);
}

void tfd_replay_free(tfd_replay_t *r)
{
    if (!r)
        return;
    entry_t *e, *tmp;
    HASH_ITER(hh, r->map, e, tmp)
        drop(r, e);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* Forgets the oldest finished answers until the bounds hold. Caller holds the lock. */
static void trim(tfd_replay_t *r)
{
    entry_t *e, *tmp;
    HASH_ITER(hh, r->map, e, tmp) {
        if (r->entries <= r->lim.max_entries && r->bytes <= r->lim.max_bytes)
            break;
        if (e->done)
            drop(r, e);
    }
}

int tfd_replay_begin(tfd_replay_t *r, const char *user, const char *id, const char *route,
                     tfx_req_t *req, tfd_replay_answer_t *ans)
{
    char *key = make_key(user, id);
    if (!key)
        return TFD_REPLAY_FULL;
    int rc;
    pthread_mutex_lock(&r->lock);
    entry_t *e = NULL;
    HASH_FIND_STR(r->map, key, e);
    if (e && strcmp(e->route, route) != 0) {
        rc = TFD_REPLAY_CONFLICT;
    } else if (e && e->done) {
        *ans = e->ans;
        ans->body = e->ans.body ? tfd_blob_ref(e->ans.body) : NULL;
        r->hits++;
        rc = TFD_REPLAY_DONE;
    } else if (e) {
        waiter_t *w = malloc(sizeof *w);
        if (w) {
            w->req = req;
            w->next = e->waiters;
            e->waiters = w;
            rc = TFD_REPLAY_WAIT;
        } else {
            rc = TFD_REPLAY_FULL;
        }
    } else if (r->running >= r->lim.max_entries) {
        rc = TFD_REPLAY_FULL;
    } else if (!(e = calloc(1, sizeof *e)) || !(e->route = strdup(route))) {
        free(e);
        rc = TFD_REPLAY_FULL;
    } else {
        e->key = key;
        e->at = (time_t)tfx_now_s();
        HASH_ADD_KEYPTR(hh, r->map, e->key, strlen(e->key), e);
        if (!e->hh.tbl) {
            free(e->route);
            free(e);
            rc = TFD_REPLAY_FULL;
        } else {
            key = NULL;
            r->entries++;
            r->running++;
            trim(r);
            rc = TFD_REPLAY_NEW;
        }
    }
    pthread_mutex_unlock(&r->lock);
    free(key);
    return rc;
}

static entry_t *find_running(tfd_replay_t *r, const char *user, const char *id)
{
    char *key = make_key(user, id);
    entry_t *e = NULL;
    if (key)
        HASH_FIND_STR(r->map, key, e);
    free(key);
    return e && !e->done ? e : NULL;
}

void tfd_replay_complete(tfd_replay_t *r, const char *user, const char *id,
                         const tfd_replay_answer_t *ans)
{
    pthread_mutex_lock(&r->lock);
    entry_t *e = find_running(r, user, id);
    if (e) {
        e->done = 1;
        r->running--;
        e->at = (time_t)tfx_now_s();
        e->ans = *ans;
        e->ans.body = ans->body ? tfd_blob_ref(ans->body) : NULL;
        e->bytes = ans->body ? ans->body->len : strlen(ans->msg);
        r->bytes += e->bytes;
        wake(e);
        trim(r);
    }
    pthread_mutex_unlock(&r->lock);
}

void tfd_replay_abandon(tfd_replay_t *r, const char *user, const char *id)
{
    pthread_mutex_lock(&r->lock);
    entry_t *e = find_running(r, user, id);
    if (e)
        drop(r, e);
    pthread_mutex_unlock(&r->lock);
}

void tfd_replay_forget_waiter(tfd_replay_t *r, tfx_req_t *req)
{
    pthread_mutex_lock(&r->lock);
    for (entry_t *e = r->map; e; e = e->hh.next) {
        for (waiter_t **pw = &e->waiters; *pw; pw = &(*pw)->next) {
            if ((*pw)->req == req) {
                waiter_t *w = *pw;
                *pw = w->next;
                free(w);
                goto out;
            }
        }
    }
out:
    pthread_mutex_unlock(&r->lock);
}

void tfd_replay_set_limits(tfd_replay_t *r, const tfd_replay_limits_t *lim)
{
    pthread_mutex_lock(&r->lock);
    r->lim = *lim;
    trim(r);                    /* lower bounds hold at once for finished answers */
    pthread_mutex_unlock(&r->lock);
}

void tfd_replay_sweep(tfd_replay_t *r)
{
    pthread_mutex_lock(&r->lock);
    time_t cutoff = (time_t)tfx_now_s() - (time_t)r->lim.window_s;
    entry_t *e, *tmp;
    HASH_ITER(hh, r->map, e, tmp) {
        if (e->done && e->at <= cutoff)
            drop(r, e);
    }
    pthread_mutex_unlock(&r->lock);
}

void tfd_replay_wake_all(tfd_replay_t *r)
{
    pthread_mutex_lock(&r->lock);
    for (entry_t *e = r->map; e; e = e->hh.next)
        wake(e);
    pthread_mutex_unlock(&r->lock);
}

void tfd_replay_stats(tfd_replay_t *r, uint64_t *entries, uint64_t *bytes, uint64_t *hits)
{
    pthread_mutex_lock(&r->lock);
    *entries = r->entries;
    *bytes = r->bytes;
    *hits = r->hits;
    pthread_mutex_unlock(&r->lock);
}
