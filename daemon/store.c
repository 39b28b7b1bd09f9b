/* store.c - the daemon's named-tensor store: a uthash table of name -> blob under one mutex.
 *
 * The lock covers only the table and the counters: lookups take a reference and drop the
 * lock before any bytes move, so a slow reader never blocks a writer. Blob memory is freed by
 * whichever thread drops the last reference. Thread-safe.
 */
#include "config.h"
#include "daemon/store.h"
#include "proto/digest.h"
#include "proto/safetensors.h"
#include "transports/buf.h"
#include "transports/clock.h"
#include "transports/shm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
/* An allocation failure inside uthash leaves the element out (hh.tbl == NULL) instead of
 * calling exit(-1). */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

typedef struct {
    char *name;
    tfd_blob_t *blob;
    uint64_t last_used;             /* the store's clock at the last put or get */
    UT_hash_handle hh;
} entry_t;

struct tfd_store {
    pthread_mutex_t lock;
    entry_t *table;
    uint64_t bytes, reserved, max_bytes, count;
    uint64_t spare;                 /* reserved for memory kept ready (reserve_spare) */
    uint64_t retired;
    uint64_t next_version;          /* under lock */
    uint64_t epoch;                 /* fixed at start */
    uint64_t clock;                 /* LRU order, under lock */
    uint64_t with_ttl;              /* stored documents that have a TTL */
    uint64_t evictions, expirations;
    int evict_lru;
    void (*reclaim)(void *);        /* gives spare reservations back (tfd_store_set_reclaim) */
    void *reclaim_arg;
};

/* The bytes a blob holds in the store's account: the document, and the copy a same-host
 * share made of a small one (tfd_store_share). Under the lock. */
static uint64_t held(const tfd_blob_t *b)
{
    return b->len + b->share_copy;
}

static void retire(tfd_store_t *s, tfd_blob_t *b)
{
    b->retired_in = s;
    s->retired += held(b);
}

tfd_blob_t *tfd_blob_new(uint8_t *base, size_t cap, const uint8_t *data, size_t len,
                         tfp_doc_t *doc)
{
    tfd_blob_t *b = malloc(sizeof *b);
    if (!b) {
        tfx_buf_free(base, cap);
        tfp_doc_free(doc);
        return NULL;
    }
    atomic_init(&b->refs, 1);
    b->base = base;
    b->cap = cap;
    b->data = data;
    b->len = len;
    b->doc = doc;
    b->retired_in = NULL;
    b->version = 0;
    b->expires_ms = 0;
    b->share_fd = -1;
    b->share_p = NULL;
    b->share_size = 0;
    b->share_copy = 0;
    b->give_back = NULL;
    b->give_back_arg = NULL;
    atomic_init(&b->sha_state, 0);
    return b;
}

void tfd_blob_set_sha256(tfd_blob_t *b, const uint8_t sha256[32])
{
    int want = 0;
    if (atomic_compare_exchange_strong(&b->sha_state, &want, 1)) {
        memcpy(b->sha256, sha256, 32);
        atomic_store_explicit(&b->sha_state, 2, memory_order_release);
    }
}

void tfd_blob_sha256(tfd_blob_t *b, uint8_t out[32])
{
    if (atomic_load_explicit(&b->sha_state, memory_order_acquire) == 2) {
        memcpy(out, b->sha256, 32);
        return;
    }
    tfp_digest_sha256(b->data, b->len, out);    /* once per version; a race computes twice */
    tfd_blob_set_sha256(b, out);
}

tfd_blob_t *tfd_blob_new_lent(uint8_t *base, size_t cap, const uint8_t *data, size_t len,
                              tfp_doc_t *doc, void (*give_back)(void *arg), void *arg)
{
    tfd_blob_t *b = tfd_blob_new(NULL, 0, data, len, doc);
    if (!b) {
        give_back(arg);
        return NULL;
    }
    b->base = base;
    b->cap = cap;
    b->give_back = give_back;
    b->give_back_arg = arg;
    return b;
}

tfd_blob_t *tfd_blob_copy(const uint8_t *data, size_t len, int indexed, tfp_err_t *err)
{
    size_t cap;
    uint8_t *buf = tfx_buf_alloc(len, &cap);
    tfp_doc_t *doc = NULL;
    if (!buf) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory for a %zu-byte copy", len);
        return NULL;
    }
    memcpy(buf, data, len);
    if (indexed && tfp_st_decode(buf, len, NULL, &doc, err) != TFP_OK) {
        tfx_buf_free(buf, cap);
        return NULL;
    }
    tfd_blob_t *b = tfd_blob_new(buf, cap, buf, len, doc);
    if (!b)
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
    return b;
}

static pthread_mutex_t share_lock = PTHREAD_MUTEX_INITIALIZER;    /* tfd_blob_share, rare */

/* tfd_blob_share, and with s (not NULL) tfd_store_share: a copy is reserved in s before it is
 * made and counted with the blob after. */
static int share(tfd_store_t *s, tfd_blob_t *b, int *fd, size_t *offset, size_t *size)
{
    int rc = -1;
    pthread_mutex_lock(&share_lock);
    if (b->share_fd >= 0) {
        *fd = b->share_fd;
        *offset = 0;                    /* a copy, or a document put over shm */
        *size = b->share_size;
        rc = 0;
    } else if (b->base && b->cap >= TFX_BUF_BIG && !b->give_back) {
        /* Moved into a memfd where it is, never copied beside itself: a large document's
         * memory stays counted once. */
        int own = tfx_buf_seal(b->base, b->cap);
        if (own >= 0) {
            *fd = own;
            *offset = (size_t)(b->data - b->base);
            *size = b->cap;
            rc = 0;
        }
    } else {
        size_t want = b->len ? b->len : 1;
        tfx_shm_t m;
        if (s && tfd_store_reserve(s, want) != 0)
            rc = -2;
        else if (tfx_shm_create(want, "tfetch-doc", &m, NULL) == TFP_OK) {
            memcpy(m.p, b->data, b->len);
            if (tfx_shm_seal(&m, TFX_SHM_SEAL_WRITE, NULL) == TFP_OK) {
                b->share_fd = *fd = m.fd;
                b->share_p = m.p;
                b->share_size = *size = m.size;
                *offset = 0;
                rc = 0;
            } else {
                tfx_shm_close(&m);
            }
        }
        if (s && rc != -2) {
            pthread_mutex_lock(&s->lock);
            s->reserved -= want <= s->reserved ? want : s->reserved;
            if (rc == 0) {                  /* counted where the blob is: stored or retired */
                b->share_copy = want;
                if (b->retired_in == s)
                    s->retired += want;
                else
                    s->bytes += want;
            }
            pthread_mutex_unlock(&s->lock);
        }
    }
    pthread_mutex_unlock(&share_lock);
    return rc;
}

int tfd_blob_share(tfd_blob_t *b, int *fd, size_t *offset, size_t *size)
{
    return share(NULL, b, fd, offset, size);
}

int tfd_store_share(tfd_store_t *s, tfd_blob_t *b, int *fd, size_t *offset, size_t *size)
{
    return share(s, b, fd, offset, size);
}

tfd_blob_t *tfd_blob_ref(tfd_blob_t *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}

void tfd_blob_unref(tfd_blob_t *b)
{
    if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (b->retired_in) {
        pthread_mutex_lock(&b->retired_in->lock);
        b->retired_in->retired -= held(b);
        pthread_mutex_unlock(&b->retired_in->lock);
    }
    if (b->give_back)
        b->give_back(b->give_back_arg);
    else
        tfx_buf_free(b->base, b->cap);
    if (b->share_fd >= 0) {
        tfx_shm_t m = { b->share_fd, b->share_p, b->share_size, 0 };
        tfx_shm_close(&m);
    }
    tfp_doc_free(b->doc);
    free(b);
}

void tfd_blob_release(void *b) { tfd_blob_unref(b); }

tfd_store_t *tfd_store_new(uint64_t max_bytes)
{
    tfd_store_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->max_bytes = max_bytes;
    if (getrandom(&s->epoch, sizeof s->epoch, 0) != (ssize_t)sizeof s->epoch) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s->epoch = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 12;
    }
    return s;
}

void tfd_store_free(tfd_store_t *s)
{
    if (!s)
        return;
    entry_t *e, *tmp;
    HASH_ITER(hh, s->table, e, tmp) {
        HASH_DEL(s->table, e);
        e->blob->retired_in = NULL;         /* the store goes first; readers are gone by now */
        tfd_blob_unref(e->blob);
        free(e->name);
        free(e);
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static entry_t *find(tfd_store_t *s, const char *name)
{
    entry_t *e = NULL;
    HASH_FIND_STR(s->table, name, e);
    return e;
}

static int expired(const tfd_blob_t *b, uint64_t now)
{
    return b->expires_ms && now >= b->expires_ms;
}

/* Takes e out of the table (under the lock); the caller unrefs its blob outside it. */
static tfd_blob_t *unlink_entry(tfd_store_t *s, entry_t *e, int retire_it)
{
    tfd_blob_t *b = e->blob;
    HASH_DEL(s->table, e);
    s->bytes -= held(b);
    if (retire_it)
        retire(s, b);
    s->count--;
    s->with_ttl -= b->expires_ms != 0;
    free(e->name);
    free(e);
    return b;
}

/* Under the lock: a live entry for name, dropping it first if its TTL ran out (*drop gets
 * its blob, to unref outside the lock). */
static entry_t *find_live(tfd_store_t *s, const char *name, tfd_blob_t **drop)
{
    entry_t *e = find(s, name);
    if (e && expired(e->blob, tfx_now_ms())) {
        *drop = unlink_entry(s, e, 1);
        s->expirations++;
        return NULL;
    }
    return e;
}

tfd_blob_t *tfd_store_get(tfd_store_t *s, const char *name)
{
    tfd_blob_t *drop = NULL;
    pthread_mutex_lock(&s->lock);
    entry_t *e = find_live(s, name, &drop);
    tfd_blob_t *b = NULL;
    if (e) {
        b = tfd_blob_ref(e->blob);
        e->last_used = ++s->clock;
    }
    pthread_mutex_unlock(&s->lock);
    tfd_blob_unref(drop);
    return b;
}

void tfd_store_set_max(tfd_store_t *s, uint64_t max_bytes)
{
    pthread_mutex_lock(&s->lock);
    s->max_bytes = max_bytes;
    pthread_mutex_unlock(&s->lock);
}

uint64_t tfd_store_max(tfd_store_t *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t m = s->max_bytes;
    pthread_mutex_unlock(&s->lock);
    return m;
}

void tfd_store_set_evict_lru(tfd_store_t *s, int on)
{
    pthread_mutex_lock(&s->lock);
    s->evict_lru = on;
    pthread_mutex_unlock(&s->lock);
}

/* Under the lock: drops least recently used documents nobody reads until bytes fit, onto
 * *freed (a list through the blobs' retired_in, unref'd by the caller outside the lock).
 * Returns whether they fit. */
static int fits(const tfd_store_t *s, uint64_t bytes);
static int evict_for(tfd_store_t *s, uint64_t bytes, tfd_blob_t **freed, size_t *nfreed,
                     size_t cap)
{
    /* Only when dropping what can be dropped is enough: never evict for nothing. */
    uint64_t can = 0, used = s->bytes + s->retired + s->reserved + s->spare;
    size_t n = 0;
    for (entry_t *e = s->table; e && n < cap; e = e->hh.next)
        if (atomic_load(&e->blob->refs) == 1) {
            can += held(e->blob);
            n++;
        }
    if (bytes > s->max_bytes || used - can > s->max_bytes - bytes)
        return 0;
    while (!fits(s, bytes) && *nfreed < cap) {
        entry_t *victim = NULL;
        for (entry_t *e = s->table; e; e = e->hh.next)
            if (atomic_load(&e->blob->refs) == 1 && (!victim || e->last_used < victim->last_used))
                victim = e;
        if (!victim)
            return 0;               /* all in use: memory would not come back now */
        freed[(*nfreed)++] = unlink_entry(s, victim, 0);
        s->evictions++;
    }
    return fits(s, bytes);
}

unsigned tfd_store_sweep(tfd_store_t *s)
{
    enum { BATCH = 64 };
    tfd_blob_t *drop[BATCH];
    unsigned total = 0;
    size_t n;
    do {
        n = 0;
        pthread_mutex_lock(&s->lock);
        uint64_t now = tfx_now_ms();
        entry_t *e, *tmp;
        if (s->with_ttl)
            HASH_ITER(hh, s->table, e, tmp) {
                if (n == BATCH)
                    break;
                if (expired(e->blob, now)) {
                    drop[n++] = unlink_entry(s, e, 1);
                    s->expirations++;
                }
            }
        pthread_mutex_unlock(&s->lock);
        for (size_t i = 0; i < n; i++)
            tfd_blob_unref(drop[i]);
        total += (unsigned)n;
    } while (n == BATCH);
    return total;
}

/* Would `bytes` more fit? Caller holds the lock. */
static int fits(const tfd_store_t *s, uint64_t bytes)
{
    uint64_t used = s->bytes + s->retired + s->reserved + s->spare;
    return bytes <= s->max_bytes && used <= s->max_bytes - bytes;
}

void tfd_store_set_reclaim(tfd_store_t *s, void (*reclaim)(void *), void *arg)
{
    pthread_mutex_lock(&s->lock);
    s->reclaim = reclaim;
    s->reclaim_arg = arg;
    pthread_mutex_unlock(&s->lock);
}

int tfd_store_reserve_spare(tfd_store_t *s, uint64_t bytes)
{
    pthread_mutex_lock(&s->lock);
    int ok = fits(s, bytes);
    if (ok)
        s->spare += bytes;
    pthread_mutex_unlock(&s->lock);
    return ok ? 0 : -1;
}

void tfd_store_unreserve_spare(tfd_store_t *s, uint64_t bytes, uint64_t to_reserved)
{
    pthread_mutex_lock(&s->lock);
    s->spare -= bytes <= s->spare ? bytes : s->spare;
    s->reserved += to_reserved;
    pthread_mutex_unlock(&s->lock);
}

int tfd_store_reserve(tfd_store_t *s, uint64_t bytes)
{
    enum { MAX_EVICT = 256 };
    tfd_blob_t *freed[MAX_EVICT];
    size_t nfreed = 0;
    pthread_mutex_lock(&s->lock);
    int ok = fits(s, bytes);
    if (!ok && s->reclaim) {        /* spare memory goes before any document does */
        void (*reclaim)(void *) = s->reclaim;
        void *arg = s->reclaim_arg;
        pthread_mutex_unlock(&s->lock);
        reclaim(arg);
        pthread_mutex_lock(&s->lock);
        ok = fits(s, bytes);
    }
    ok = ok || (s->evict_lru && evict_for(s, bytes, freed, &nfreed, MAX_EVICT));
    if (ok)
        s->reserved += bytes;
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < nfreed; i++)
        tfd_blob_unref(freed[i]);               /* outside the lock: may unmap 256 MiB */
    return ok ? 0 : -1;
}

void tfd_store_unreserve(tfd_store_t *s, uint64_t bytes)
{
    pthread_mutex_lock(&s->lock);
    s->reserved -= bytes <= s->reserved ? bytes : s->reserved;
    pthread_mutex_unlock(&s->lock);
}

/* Whether cond holds for the entry e (NULL: none stored). Under the lock. */
static int holds(const entry_t *e, const tfd_store_cond_t *cond)
{
    if (!cond)
        return 1;
    if ((cond->absent && e) || (cond->present && !e))
        return 0;
    if (cond->versions) {
        int hit = 0;
        for (size_t i = 0; e && i < cond->n; i++)
            hit |= cond->versions[i] == e->blob->version;
        if (!hit)
            return 0;
    }
    for (size_t i = 0; e && i < cond->n_not; i++)
        if (cond->not_versions[i] == e->blob->version)
            return 0;
    return 1;
}

int tfd_store_put_if(tfd_store_t *s, const char *name, tfd_blob_t *blob, uint64_t reserved,
                     const tfd_store_cond_t *cond, uint64_t *version)
{
    tfd_blob_t *old = NULL, *drop = NULL;
    int rc;
    pthread_mutex_lock(&s->lock);
    s->reserved -= reserved <= s->reserved ? reserved : s->reserved;
    entry_t *e = find_live(s, name, &drop);
    if (!holds(e, cond)) {
        rc = -2;
        goto unlock;
    }
    if (!fits(s, held(blob))) {
        rc = -1;
        goto unlock;
    }
    blob->version = ++s->next_version;
    if (version)
        *version = blob->version;
    if (e) {
        old = e->blob;
        s->bytes -= held(old);
        s->with_ttl -= old->expires_ms != 0;
        retire(s, old);
        e->blob = blob;
        rc = 1;
    } else {
        e = calloc(1, sizeof *e);
        if (!e || !(e->name = strdup(name))) {
            free(e);
            rc = -1;
            goto unlock;
        }
        e->blob = blob;
        HASH_ADD_KEYPTR(hh, s->table, e->name, strlen(e->name), e);
        if (!e->hh.tbl) {
            free(e->name);
            free(e);
            rc = -1;
            goto unlock;
        }
        s->count++;
        rc = 0;
    }
    s->bytes += held(blob);
    s->with_ttl += blob->expires_ms != 0;
    e->last_used = ++s->clock;
unlock:
    pthread_mutex_unlock(&s->lock);
    tfd_blob_unref(old);                        /* outside the lock: may unmap 256 MiB */
    tfd_blob_unref(drop);
    return rc;
}

int tfd_store_put(tfd_store_t *s, const char *name, tfd_blob_t *blob, uint64_t reserved)
{
    return tfd_store_put_if(s, name, blob, reserved, NULL, NULL);
}

int tfd_store_delete_if(tfd_store_t *s, const char *name, const tfd_store_cond_t *cond)
{
    tfd_blob_t *drop = NULL, *b = NULL;
    pthread_mutex_lock(&s->lock);
    entry_t *e = find_live(s, name, &drop);
    int rc = !holds(e, cond) ? -2 : e ? 0 : -1;     /* If-Match on a missing name fails too */
    if (rc == 0)
        b = unlink_entry(s, e, 1);
    pthread_mutex_unlock(&s->lock);
    tfd_blob_unref(b);
    tfd_blob_unref(drop);
    return rc;
}

int tfd_store_delete(tfd_store_t *s, const char *name)
{
    return tfd_store_delete_if(s, name, NULL);
}

uint64_t tfd_store_epoch(const tfd_store_t *s)
{
    return s->epoch;
}

static int by_name(entry_t *a, entry_t *b) { return strcmp(a->name, b->name); }

void tfd_store_each(tfd_store_t *s, void (*fn)(const char *, const tfd_blob_t *, void *),
                    void *arg)
{
    pthread_mutex_lock(&s->lock);
    HASH_SORT(s->table, by_name);
    uint64_t now = tfx_now_ms();
    for (entry_t *e = s->table; e; e = e->hh.next)
        if (!expired(e->blob, now))         /* gone for readers; the sweep frees it */
            fn(e->name, e->blob, arg);
    pthread_mutex_unlock(&s->lock);
}

void tfd_store_stats(tfd_store_t *s, tfd_store_stats_t *st)
{
    pthread_mutex_lock(&s->lock);
    st->count = s->count;
    st->bytes = s->bytes;
    st->retired = s->retired;
    st->reserved = s->reserved;
    st->max_bytes = s->max_bytes;
    st->evictions = s->evictions;
    st->expirations = s->expirations;
    pthread_mutex_unlock(&s->lock);
}
