/* replay.c - the idempotency window: a uthash map of "user\nid" -> entry, in insertion order
 * (oldest first, which is also the eviction order), under one mutex. Waiting retries are
 * resumed when the first call completes; they then look up again and find the answer.
 */
#include "config.h"
#include "daemon/replay.h"
#include "proto/ids.h"
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

/* A remembered answer, compact: the window holds 65536 of them by default, so the answer to a
 * small call is its bytes in this one allocation, not the blob it was sent from (that blob,
 * its buffer and its parsed index cost ~1.2 KB per 8-byte echo, and keeping 65536 of them
 * alive cost every call 1.5 us and the 99th percentile 15 us in bench/README.md's
 * measurement). A retry is rare: it pays for a blob made again from the bytes. */
#define INLINE_MAX 4096u
typedef struct {
    unsigned status;
    tfp_status_t code;
    int indexed;                    /* the bytes are a safetensors document (blob->doc) */
    tfd_blob_t *blob;               /* an answer over INLINE_MAX: a reference */
    size_t len;                     /* else its bytes, after the strings */
    const char *content_type, *msg; /* in text */
    char text[];                    /* content type, NUL, message, NUL, bytes */
} answer_t;

/* One allocation per entry: the key ("user\nid") and the route follow the struct. */
typedef struct {
    UT_hash_handle hh;
    int done;
    time_t born;                    /* when it was added: the map's order, oldest first */
    time_t at;                      /* when it was added, then when it completed */
    answer_t *ans;                  /* once done */
    uint64_t bytes;                 /* what the answer holds, counted against max_bytes */
    waiter_t *waiters;
    const char *route;              /* in text, after the key */
    char text[];                    /* key, NUL, route, NUL */
} entry_t;

struct tfd_replay {
    pthread_mutex_t lock;
    tfd_replay_limits_t lim;
    entry_t *map;
    uint64_t entries, bytes, hits, running;
};

/* "user\nid" into buf (KEY_MAX bytes): its length, or 0 when it does not fit (never cut: two
 * cut keys could be one). Looking up copies nothing to the heap: this runs twice for every
 * call that carries an id (begin, then complete). The user part is a state key, "principal/
 * user" at most (api.h), the id a request id (proto/ids.h). */
#define KEY_MAX (2 * (TFP_MAX_USER_ID + 1) + 1 + TFP_MAX_REQUEST_ID + 1)
static size_t make_key(char *buf, const char *user, const char *id)
{
    size_t nu = strlen(user), ni = strlen(id);
    if (nu + 1 + ni + 1 > KEY_MAX)
        return 0;
    memcpy(buf, user, nu);
    buf[nu] = '\n';
    memcpy(buf + nu + 1, id, ni + 1);
    return nu + 1 + ni;
}

static entry_t *find(tfd_replay_t *r, const char *user, const char *id)
{
    char key[KEY_MAX];
    size_t n = make_key(key, user, id);
    entry_t *e = NULL;
    if (n)
        HASH_FIND(hh, r->map, key, n, e);
    return e;
}

static answer_t *answer_keep(const tfd_replay_answer_t *a)
{
    size_t nc = strlen(a->content_type), nm = strlen(a->msg);
    int inl = a->body && a->body->len <= INLINE_MAX;
    size_t len = inl ? a->body->len : 0;
    answer_t *k = malloc(sizeof *k + nc + 1 + nm + 1 + len);
    if (!k)
        return NULL;
    k->status = a->status;
    k->code = a->code;
    k->indexed = a->body && a->body->doc;
    k->blob = a->body && !inl ? tfd_blob_ref(a->body) : NULL;
    k->len = len;
    memcpy(k->text, a->content_type, nc + 1);
    memcpy(k->text + nc + 1, a->msg, nm + 1);
    k->content_type = k->text;
    k->msg = k->text + nc + 1;
    if (len)
        memcpy(k->text + nc + 1 + nm + 1, a->body->data, len);
    return k;
}

static void answer_free(answer_t *k)
{
    if (k)
        tfd_blob_unref(k->blob);
    free(k);
}

/* The remembered answer again, its body a new reference (or a failure if it cannot be made). */
static void answer_give(const answer_t *k, tfd_replay_answer_t *a)
{
    tfp_err_t err;
    memset(a, 0, sizeof *a);
    a->status = k->status;
    a->code = k->code;
    snprintf(a->content_type, sizeof a->content_type, "%s", k->content_type);
    snprintf(a->msg, sizeof a->msg, "%s", k->msg);
    if (k->code != TFP_OK)
        return;
    a->body = k->blob ? tfd_blob_ref(k->blob)
                      : tfd_blob_copy((const uint8_t *)k->msg + strlen(k->msg) + 1, k->len,
                                      k->indexed, &err);
    if (!a->body) {
        a->code = err.code;
        a->status = (unsigned)tfp_status_http(err.code);
        snprintf(a->msg, sizeof a->msg, "cannot replay the answer: %.200s", err.msg);
    }
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
    answer_free(e->ans);
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
    char key[KEY_MAX];
    size_t nk = make_key(key, user, id);
    if (!nk)
        return TFD_REPLAY_FULL;             /* too long to remember: run without */
    int rc;
    pthread_mutex_lock(&r->lock);
    entry_t *e = NULL;
    HASH_FIND(hh, r->map, key, nk, e);
    if (e && strcmp(e->route, route) != 0) {
        rc = TFD_REPLAY_CONFLICT;
    } else if (e && e->done) {
        answer_give(e->ans, ans);
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
    } else {
        size_t nr = strlen(route);
        if (!(e = calloc(1, sizeof *e + nk + 1 + nr + 1))) {
            rc = TFD_REPLAY_FULL;
            goto out;
        }
        memcpy(e->text, key, nk + 1);
        memcpy(e->text + nk + 1, route, nr + 1);
        e->route = e->text + nk + 1;
        e->born = e->at = (time_t)tfx_now_s();
        HASH_ADD(hh, r->map, text, nk, e);
        if (!e->hh.tbl) {
            free(e);
            rc = TFD_REPLAY_FULL;
        } else {
            r->entries++;
            r->running++;
            trim(r);
            rc = TFD_REPLAY_NEW;
        }
    }
out:
    pthread_mutex_unlock(&r->lock);
    return rc;
}

static entry_t *find_running(tfd_replay_t *r, const char *user, const char *id)
{
    entry_t *e = find(r, user, id);
    return e && !e->done ? e : NULL;
}

void tfd_replay_complete(tfd_replay_t *r, const char *user, const char *id,
                         const tfd_replay_answer_t *ans)
{
    answer_t *k = answer_keep(ans);         /* before the lock: it may copy 4 KiB */
    pthread_mutex_lock(&r->lock);
    entry_t *e = find_running(r, user, id);
    if (e && !k) {
        drop(r, e);                         /* out of memory: forgotten, as if abandoned */
    } else if (e) {
        e->done = 1;
        r->running--;
        e->at = (time_t)tfx_now_s();
        e->ans = k;
        k = NULL;
        e->bytes = ans->body ? ans->body->len : strlen(ans->msg);
        r->bytes += e->bytes;
        wake(e);
        trim(r);
    }
    pthread_mutex_unlock(&r->lock);
    answer_free(k);
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

/* The map is in the order entries were added and an answer completes after it was added, so
 * the first entry added after the cutoff ends the walk: a sweep costs what it forgets, not
 * the whole window (65536 entries by default, walked under the lock four times a second). */
void tfd_replay_sweep(tfd_replay_t *r)
{
    pthread_mutex_lock(&r->lock);
    time_t cutoff = (time_t)tfx_now_s() - (time_t)r->lim.window_s;
    entry_t *e, *tmp;
    HASH_ITER(hh, r->map, e, tmp) {
        if (e->born > cutoff)
            break;
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
