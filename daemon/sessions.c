/* sessions.c - per-user state: a uthash map of user id -> session, evicted least recently
 * used first (by use_seq, a counter of uses; the map is never reordered, since a re-insert can
 * fail for want of memory).
 *
 * One global mutex guards the map, the LRU order and the byte counters; each session has its
 * own mutex, held by the call using it. Eviction, expiry and dropping a route's states (a
 * plugin unloaded) only touch sessions nobody holds (inuse == 0), so they never need a
 * session's mutex. Lock order: global before session, and
 * a call holding a session may take the global lock (set_state) but never the reverse wait.
 */
#include "config.h"
#include "daemon/sessions.h"
#include "transports/clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* An allocation failure inside uthash leaves the element out (hh.tbl == NULL) instead of
 * calling exit(-1). */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

typedef struct slot {
    struct slot *next;
    char *route;
    void *state;
    size_t bytes;
    void (*destroy)(void *);
} slot_t;

struct tfd_session {
    char *user;
    pthread_mutex_t lock;
    unsigned inuse;
    int ended;                      /* end requested while in use */
    time_t last_used;
    uint64_t use_seq;               /* s->uses when last acquired or released: the LRU order */
    uint64_t bytes;
    slot_t *slots;
    UT_hash_handle hh;
};

struct tfd_sessions {
    pthread_mutex_t lock;
    tfd_sessions_limits_t lim;
    tfd_session_t *map;
    uint64_t count, bytes, evictions, expirations, rejections;
    uint64_t uses;
};

tfd_sessions_t *tfd_sessions_new(const tfd_sessions_limits_t *limits)
{
    tfd_sessions_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->lim = *limits;
    return s;
}

/* Frees a session nobody holds. Caller holds the global lock; destructors run outside it
 * would be nicer, but they are plain frees of route state. */
static void drop(tfd_sessions_t *s, tfd_session_t *se)
{
    HASH_DEL(s->map, se);
    s->count--;
    s->bytes -= se->bytes;
    while (se->slots) {
        slot_t *n = se->slots->next;
        if (se->slots->destroy && se->slots->state)
            se->slots->destroy(se->slots->state);
        free(se->slots->route);
        free(se->slots);
        se->slots = n;
    }
    pthread_mutex_destroy(&se->lock);
    free(se->user);
    free(se);
}

void tfd_sessions_free(tfd_sessions_t *s)
{
    if (!s)
        return;
    tfd_session_t *se, *tmp;
    HASH_ITER(hh, s->map, se, tmp)
        drop(s, se);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Evicts the least recently used idle session other than keep. 1 if one was evicted. */
static int evict_one(tfd_sessions_t *s, const tfd_session_t *keep)
{
    tfd_session_t *lru = NULL;
    for (tfd_session_t *se = s->map; se; se = se->hh.next)
        if (se != keep && se->inuse == 0 && (!lru || se->use_seq < lru->use_seq))
            lru = se;
    if (!lru)
        return 0;
    drop(s, lru);
    s->evictions++;
    return 1;
}

void *tfd_sessions_acquire(tfd_sessions_t *s, const char *user)
{
    pthread_mutex_lock(&s->lock);
    tfd_session_t *se = NULL;
    HASH_FIND_STR(s->map, user, se);
    if (!se) {
        if (s->count >= s->lim.max_sessions && !evict_one(s, NULL)) {
            s->rejections++;
            pthread_mutex_unlock(&s->lock);
            return NULL;
        }
        se = calloc(1, sizeof *se);
        if (!se || !(se->user = strdup(user))) {
            free(se);
            pthread_mutex_unlock(&s->lock);
            return NULL;
        }
        HASH_ADD_KEYPTR(hh, s->map, se->user, strlen(se->user), se);
        if (!se->hh.tbl) {
            free(se->user);
            free(se);
            pthread_mutex_unlock(&s->lock);
            return NULL;
        }
        pthread_mutex_init(&se->lock, NULL);
        s->count++;
    }
    se->inuse++;
    se->last_used = (time_t)tfx_now_s();
    se->use_seq = ++s->uses;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_lock(&se->lock);
    return se;
}

void tfd_sessions_release(tfd_sessions_t *s, void *session)
{
    tfd_session_t *se = session;
    if (!se)
        return;
    pthread_mutex_unlock(&se->lock);
    pthread_mutex_lock(&s->lock);
    se->inuse--;
    se->last_used = (time_t)tfx_now_s();
    se->use_seq = ++s->uses;
    if (se->ended && se->inuse == 0)
        drop(s, se);
    pthread_mutex_unlock(&s->lock);
}

static slot_t *find_slot(tfd_session_t *se, const char *route)
{
    for (slot_t *sl = se->slots; sl; sl = sl->next)
        if (strcmp(sl->route, route) == 0)
            return sl;
    return NULL;
}

void *tfd_session_state(tfd_sessions_t *s, void *session, const char *route)
{
    (void)s;
    slot_t *sl = find_slot(session, route);     /* the caller holds the session */
    return sl ? sl->state : NULL;
}

int tfd_session_set_state(tfd_sessions_t *s, void *session, const char *route, void *state,
                          size_t bytes, void (*destroy)(void *))
{
    tfd_session_t *se = session;
    slot_t *sl = find_slot(se, route);
    size_t old = sl ? sl->bytes : 0;
    int rc = 0;

    pthread_mutex_lock(&s->lock);
    if (state && se->bytes - old + bytes > s->lim.max_user_bytes) {
        rc = -1;
    } else if (state) {
        while (s->bytes - old + bytes > s->lim.max_total_bytes && evict_one(s, se))
            ;
        if (s->bytes - old + bytes > s->lim.max_total_bytes)
            rc = -1;
    }
    if (rc == 0 && state && !sl) {
        sl = calloc(1, sizeof *sl);
        if (!sl || !(sl->route = strdup(route))) {
            free(sl);
            sl = NULL;
            rc = -1;
        } else {
            sl->next = se->slots;
            se->slots = sl;
        }
    }
    if (rc == 0 && sl) {
        void *old_state = sl->state;
        void (*old_destroy)(void *) = sl->destroy;
        se->bytes = se->bytes - old + (state ? bytes : 0);
        s->bytes = s->bytes - old + (state ? bytes : 0);
        sl->state = state;
        sl->bytes = state ? bytes : 0;
        sl->destroy = destroy;
        if (old_state && old_state != state && old_destroy)
            old_destroy(old_state);
    }
    if (rc != 0)
        s->rejections++;
    pthread_mutex_unlock(&s->lock);
    if (rc != 0 && state && destroy && !(sl && sl->state == state))
        destroy(state);
    return rc;
}

int tfd_sessions_end(tfd_sessions_t *s, const char *user)
{
    pthread_mutex_lock(&s->lock);
    tfd_session_t *se = NULL;
    HASH_FIND_STR(s->map, user, se);
    int rc = se ? 0 : -1;
    if (se) {
        if (se->inuse)
            se->ended = 1;
        else
            drop(s, se);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

unsigned tfd_sessions_drop_route(tfd_sessions_t *s, const char *route)
{
    unsigned busy = 0;
    pthread_mutex_lock(&s->lock);
    for (tfd_session_t *se = s->map; se; se = se->hh.next) {
        slot_t **pp = &se->slots;
        while (*pp && strcmp((*pp)->route, route) != 0)
            pp = &(*pp)->next;
        slot_t *sl = *pp;
        if (!sl)
            continue;
        if (se->inuse) {            /* its call may be walking the slots right now */
            busy++;
            continue;
        }
        *pp = sl->next;
        se->bytes -= sl->bytes;
        s->bytes -= sl->bytes;
        if (sl->destroy && sl->state)
            sl->destroy(sl->state);
        free(sl->route);
        free(sl);
    }
    pthread_mutex_unlock(&s->lock);
    return busy;
}

void tfd_sessions_set_limits(tfd_sessions_t *s, const tfd_sessions_limits_t *limits)
{
    pthread_mutex_lock(&s->lock);
    s->lim = *limits;           /* sessions over a new bound are trimmed as they next change */
    pthread_mutex_unlock(&s->lock);
}

void tfd_sessions_sweep(tfd_sessions_t *s)
{
    pthread_mutex_lock(&s->lock);
    time_t cutoff = (time_t)tfx_now_s() - (time_t)s->lim.ttl_s;
    tfd_session_t *se, *tmp;
    HASH_ITER(hh, s->map, se, tmp) {
        if (se->inuse == 0 && se->last_used <= cutoff) {
            drop(s, se);
            s->expirations++;
        }
    }
    pthread_mutex_unlock(&s->lock);
}

void tfd_sessions_stats(tfd_sessions_t *s, tfd_sessions_stats_t *out)
{
    pthread_mutex_lock(&s->lock);
    out->sessions = s->count;
    out->bytes = s->bytes;
    out->evictions = s->evictions;
    out->expirations = s->expirations;
    out->rejections = s->rejections;
    pthread_mutex_unlock(&s->lock);
}
