/* replay.c - the idempotency window: an index of "user\nid" -> entry (open addressing, a
 * keyed hash) and a list of the entries in the order they were added (oldest first, which is
 * also the eviction order), under one mutex. Waiting retries are resumed when the first call
 * completes; they then look up again and find the answer.
 */
#include "config.h"
#include "daemon/replay.h"
#include "proto/ids.h"
#include "proto/keyhash.h"
#include "transports/clock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct waiter {
    struct waiter *next;
    tfx_req_t *req;
} waiter_t;

/* One allocation per entry: the key ("user\nid"), the route and, once the call is done, the
 * answer follow the struct. The window holds 65536 of them by default, and a call pays for
 * what it touches: a new call takes the place of the oldest, whose memory is cold by then.
 * So an answer of at most INLINE_MAX bytes lives in the entry as bytes (the blob it was sent
 * from, its buffer and its parsed index were ~1.2 KB per 8-byte echo, three more cold
 * allocations to free); a retry is rare and pays for a blob made again. Larger answers keep
 * a reference to their blob. */
#define INLINE_MAX 4096u
typedef struct entry {
    struct entry *older, *newer;    /* the order they were added: oldest first */
    uint64_t hash;                  /* of the key */
    uint64_t digest;                /* of the body it was first sent with */
    uint32_t nkey;                  /* key bytes, without the NUL */
    int done;
    time_t born;                    /* when it was added */
    time_t at;                      /* when it was added, then when it completed */
    waiter_t *waiters;
    uint64_t bytes;                 /* what the answer holds, counted against max_bytes */
    /* the answer, once done */
    unsigned status;
    tfp_status_t code;
    int indexed;                    /* the bytes are a safetensors document (blob->doc) */
    int is_request;                 /* the answer was the request's own body: none kept */
    tfd_blob_t *blob;               /* an answer over INLINE_MAX: a reference */
    size_t len;                     /* else its bytes, after the strings */
    char text[];                    /* key NUL route NUL [content type NUL message NUL bytes] */
} entry_t;

/* The index: open addressing with linear probing, at most half full, the key's hash beside
 * its entry so that a probe reads one cache line, not a chain of cold entries (uthash's
 * chains, about four entries long at 65536, cost every call ~0.5 us in misses). */
typedef struct {
    uint64_t hash;
    entry_t *e;                     /* NULL: empty */
} slot_t;

struct tfd_replay {
    pthread_mutex_t lock;
    tfd_replay_limits_t lim;
    tfp_hashkey_t hkey;             /* secret: clients choose the ids */
    slot_t *slots;
    size_t mask;                    /* slots - 1, a power of two less one */
    entry_t *oldest, *newest;
    uint64_t entries, bytes, hits, running;
};

#define SLOTS_MIN 64u

static const char *entry_route(const entry_t *e) { return e->text + e->nkey + 1; }

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

/* The slot holding key, or the empty slot where it would go. */
static size_t probe(const tfd_replay_t *r, uint64_t h, const char *key, size_t nk)
{
    size_t i = (size_t)h & r->mask;
    for (; r->slots[i].e; i = (i + 1) & r->mask) {
        const entry_t *e = r->slots[i].e;
        if (r->slots[i].hash == h && e->nkey == nk && memcmp(e->text, key, nk) == 0)
            break;
    }
    return i;
}

/* The slot of an entry that is in the index. */
static size_t slot_of(const tfd_replay_t *r, const entry_t *e)
{
    size_t i = (size_t)e->hash & r->mask;
    while (r->slots[i].e != e)
        i = (i + 1) & r->mask;
    return i;
}

/* Empties slot i, moving back the entries after it that probed past it (no tombstones). */
static void slot_clear(tfd_replay_t *r, size_t i)
{
    size_t j = i;
    for (;;) {
        j = (j + 1) & r->mask;
        if (!r->slots[j].e)
            break;
        size_t home = (size_t)r->slots[j].hash & r->mask;
        /* Slot j's entry may move to i unless its home lies cyclically in (i, j]. */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            r->slots[i] = r->slots[j];
            i = j;
        }
    }
    r->slots[i].e = NULL;
}

/* Room for one more entry at most half full: 0, or -1 when a bigger index cannot be had. */
static int reserve(tfd_replay_t *r)
{
    size_t n = r->mask + 1;
    if (r->slots && (r->entries + 1) * 2 <= n)
        return 0;
    size_t nn = r->slots ? n * 2 : SLOTS_MIN;
    slot_t *ns = calloc(nn, sizeof *ns);
    if (!ns)
        return -1;
    slot_t *old = r->slots;
    r->slots = ns;
    r->mask = nn - 1;
    /* From the old slots, by the hashes they hold: a sequential read, no entry touched
     * (walking the entries instead cost a cold miss each, 65536 of them under the lock). */
    for (size_t k = 0; old && k < n; k++) {
        if (!old[k].e)
            continue;
        size_t i = (size_t)old[k].hash & r->mask;
        while (r->slots[i].e)
            i = (i + 1) & r->mask;
        r->slots[i] = old[k];
    }
    free(old);
    return 0;
}

static void list_unlink(tfd_replay_t *r, entry_t *e)
{
    if (e->older)
        e->older->newer = e->newer;
    else
        r->oldest = e->newer;
    if (e->newer)
        e->newer->older = e->older;
    else
        r->newest = e->older;
}

/* Puts e where old was (list and slot i), e.g. the same call with its answer. */
static void replace(tfd_replay_t *r, size_t i, entry_t *old, entry_t *e)
{
    e->older = old->older;
    e->newer = old->newer;
    if (e->older)
        e->older->newer = e;
    else
        r->oldest = e;
    if (e->newer)
        e->newer->older = e;
    else
        r->newest = e;
    r->slots[i].e = e;
}

static void entry_free(entry_t *e)
{
    if (e)
        tfd_blob_unref(e->blob);
    free(e);
}

/* The remembered answer again, its body a new reference (or a failure if it cannot be made). */
static void answer_give(const entry_t *e, tfd_replay_answer_t *a)
{
    tfp_err_t err;
    const char *ct = entry_route(e) + strlen(entry_route(e)) + 1;
    const char *msg = ct + strlen(ct) + 1;
    memset(a, 0, sizeof *a);
    a->status = e->status;
    a->code = e->code;
    a->is_request = e->is_request;
    snprintf(a->content_type, sizeof a->content_type, "%s", ct);
    snprintf(a->msg, sizeof a->msg, "%s", msg);
    if (e->code != TFP_OK || e->is_request)
        return;
    a->body = e->blob ? tfd_blob_ref(e->blob)
                      : tfd_blob_copy((const uint8_t *)msg + strlen(msg) + 1, e->len,
                                      e->indexed, &err);
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
    tfp_hashkey_new(&r->hkey);
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
    slot_clear(r, slot_of(r, e));
    list_unlink(r, e);
    r->entries--;
    r->bytes -= e->bytes;
    if (!e->done)
        r->running--;
    wake(e);
    entry_free(e);
}

void tfd_replay_free(tfd_replay_t *r)
{
    if (!r)
        return;
    while (r->oldest)
        drop(r, r->oldest);
    free(r->slots);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* Forgets the oldest finished answers until the bounds hold. Caller holds the lock. */
static void trim(tfd_replay_t *r)
{
    entry_t *e = r->oldest;
    while (e && (r->entries > r->lim.max_entries || r->bytes > r->lim.max_bytes)) {
        entry_t *next = e->newer;
        if (e->done)
            drop(r, e);
        e = next;
    }
}

uint64_t tfd_replay_digest(const tfd_replay_t *r, const void *body, size_t len)
{
    return tfp_bodyhash(&r->hkey, body, len);
}

int tfd_replay_begin(tfd_replay_t *r, const char *user, const char *id, const char *route,
                     uint64_t digest, tfx_req_t *req, tfd_replay_answer_t *ans)
{
    char key[KEY_MAX];
    size_t nk = make_key(key, user, id);
    if (!nk)
        return TFD_REPLAY_FULL;             /* too long to remember: run without */
    uint64_t h = tfp_keyhash(&r->hkey, key, nk);
    int rc;
    pthread_mutex_lock(&r->lock);
    entry_t *e = r->slots ? r->slots[probe(r, h, key, nk)].e : NULL;
    if (e && strcmp(entry_route(e), route) != 0) {
        rc = TFD_REPLAY_CONFLICT;
    } else if (e && e->digest != digest) {
        rc = TFD_REPLAY_MISMATCH;
    } else if (e && e->done) {
        answer_give(e, ans);
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
        /* Room for it: the oldest finished leave first (the index then need not grow). */
        r->entries++;
        trim(r);
        r->entries--;
        if (reserve(r) != 0) {
            free(e);
            rc = TFD_REPLAY_FULL;
            goto out;
        }
        memcpy(e->text, key, nk + 1);
        memcpy(e->text + nk + 1, route, nr + 1);
        e->nkey = (uint32_t)nk;
        e->hash = h;
        e->digest = digest;
        e->born = e->at = (time_t)tfx_now_s();
        r->slots[probe(r, h, key, nk)] = (slot_t){h, e};
        e->older = r->newest;
        if (r->newest)
            r->newest->newer = e;
        else
            r->oldest = e;
        r->newest = e;
        r->entries++;
        r->running++;
        rc = TFD_REPLAY_NEW;
    }
out:
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* The finished entry for (key, route, answer), built outside the lock (it may copy 4 KiB):
 * the list links, times and waiters come from the running entry it replaces. */
static entry_t *entry_done(const char *key, size_t nk, const char *route,
                           const tfd_replay_answer_t *a)
{
    size_t nr = strlen(route), nc = strlen(a->content_type), nm = strlen(a->msg);
    const tfd_blob_t *body = a->is_request ? NULL : a->body;
    int inl = body && body->len <= INLINE_MAX;
    size_t len = inl ? a->body->len : 0;
    entry_t *e = malloc(sizeof *e + nk + 1 + nr + 1 + nc + 1 + nm + 1 + len);
    if (!e)
        return NULL;
    memset(e, 0, sizeof *e);
    char *p = e->text;
    memcpy(p, key, nk + 1);
    p += nk + 1;
    memcpy(p, route, nr + 1);
    p += nr + 1;
    memcpy(p, a->content_type, nc + 1);
    p += nc + 1;
    memcpy(p, a->msg, nm + 1);
    p += nm + 1;
    if (len)
        memcpy(p, a->body->data, len);
    e->nkey = (uint32_t)nk;
    e->done = 1;
    e->status = a->status;
    e->code = a->code;
    e->indexed = body && body->doc;
    e->blob = body && !inl ? tfd_blob_ref(a->body) : NULL;
    e->len = len;
    e->is_request = a->is_request && a->code == TFP_OK;
    e->bytes = body ? body->len : nm;
    return e;
}

/* The running entry for key, or NULL; its slot in *slot. */
static entry_t *find_running(tfd_replay_t *r, uint64_t h, const char *key, size_t nk,
                             size_t *slot)
{
    if (!r->slots)
        return NULL;
    *slot = probe(r, h, key, nk);
    entry_t *e = r->slots[*slot].e;
    return e && !e->done ? e : NULL;
}

void tfd_replay_complete(tfd_replay_t *r, const char *user, const char *id, const char *route,
                         const tfd_replay_answer_t *ans)
{
    char key[KEY_MAX];
    size_t nk = make_key(key, user, id), i;
    if (!nk)
        return;
    uint64_t h = tfp_keyhash(&r->hkey, key, nk);
    entry_t *k = entry_done(key, nk, route, ans);
    pthread_mutex_lock(&r->lock);
    entry_t *e = find_running(r, h, key, nk, &i);
    if (e && (!k || strcmp(entry_route(e), route) != 0)) {
        drop(r, e);             /* out of memory, or not begin's route: forgotten, as if
                                 * abandoned */
    } else if (e) {
        k->hash = h;
        k->digest = e->digest;
        k->born = e->born;
        k->at = (time_t)tfx_now_s();
        k->waiters = e->waiters;
        e->waiters = NULL;
        replace(r, i, e, k);
        r->running--;
        r->bytes += k->bytes;
        wake(k);
        trim(r);
        free(e);
        k = NULL;
    }
    pthread_mutex_unlock(&r->lock);
    entry_free(k);
}

void tfd_replay_abandon(tfd_replay_t *r, const char *user, const char *id)
{
    char key[KEY_MAX];
    size_t nk = make_key(key, user, id), i;
    if (!nk)
        return;
    uint64_t h = tfp_keyhash(&r->hkey, key, nk);
    pthread_mutex_lock(&r->lock);
    entry_t *e = find_running(r, h, key, nk, &i);
    if (e)
        drop(r, e);
    pthread_mutex_unlock(&r->lock);
}

void tfd_replay_forget_waiter(tfd_replay_t *r, tfx_req_t *req)
{
    pthread_mutex_lock(&r->lock);
    for (entry_t *e = r->oldest; e; e = e->newer) {
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

/* The list is in the order entries were added and an answer completes after it was added,
 * so the first entry added after the cutoff ends the walk: a sweep costs what it forgets,
 * not the whole window (65536 entries by default, walked under the lock four times a
 * second). */
void tfd_replay_sweep(tfd_replay_t *r)
{
    pthread_mutex_lock(&r->lock);
    time_t cutoff = (time_t)tfx_now_s() - (time_t)r->lim.window_s;
    for (entry_t *e = r->oldest, *next; e && e->born <= cutoff; e = next) {
        next = e->newer;
        if (e->done && e->at <= cutoff)
            drop(r, e);
    }
    pthread_mutex_unlock(&r->lock);
}

void tfd_replay_wake_all(tfd_replay_t *r)
{
    pthread_mutex_lock(&r->lock);
    for (entry_t *e = r->oldest; e; e = e->newer)
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
