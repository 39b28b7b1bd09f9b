/* store.c - the daemon's named-tensor store: a uthash table of name -> blob under one mutex.
 *
 * The lock covers only the table and the counters: lookups take a reference and drop the
 * lock before any bytes move, so a slow reader never blocks a writer. Blob memory is freed by
 * whichever thread drops the last reference. Thread-safe.
 */
#include "config.h"
#include "daemon/store.h"
#include "transports/buf.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
/* An allocation failure inside uthash leaves the element out (hh.tbl == NULL) instead of
 * calling exit(-1). */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

typedef struct {
    char *name;
    tfd_blob_t *blob;
    UT_hash_handle hh;
} entry_t;

struct tfd_store {
    pthread_mutex_t lock;
    entry_t *table;
    uint64_t bytes, reserved, max_bytes, count;
    uint64_t retired;
};

static void retire(tfd_store_t *s, tfd_blob_t *b)
{
    b->retired_in = s;
    s->retired += b->len;
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
    return b;
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
        b->retired_in->retired -= b->len;
        pthread_mutex_unlock(&b->retired_in->lock);
    }
    tfx_buf_free(b->base, b->cap);
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

tfd_blob_t *tfd_store_get(tfd_store_t *s, const char *name)
{
    pthread_mutex_lock(&s->lock);
    entry_t *e = find(s, name);
    tfd_blob_t *b = e ? tfd_blob_ref(e->blob) : NULL;
    pthread_mutex_unlock(&s->lock);
    return b;
}

/* Would `bytes` more fit? Caller holds the lock. */
static int fits(const tfd_store_t *s, uint64_t bytes)
{
    uint64_t used = s->bytes + s->retired + s->reserved;
    return bytes <= s->max_bytes && used <= s->max_bytes - bytes;
}

int tfd_store_reserve(tfd_store_t *s, uint64_t bytes)
{
    pthread_mutex_lock(&s->lock);
    int ok = fits(s, bytes);
    if (ok)
        s->reserved += bytes;
    pthread_mutex_unlock(&s->lock);
    return ok ? 0 : -1;
}

void tfd_store_unreserve(tfd_store_t *s, uint64_t bytes)
{
    pthread_mutex_lock(&s->lock);
    s->reserved -= bytes <= s->reserved ? bytes : s->reserved;
    pthread_mutex_unlock(&s->lock);
}

int tfd_store_put(tfd_store_t *s, const char *name, tfd_blob_t *blob, uint64_t reserved)
{
    tfd_blob_t *old = NULL;
    int rc;
    pthread_mutex_lock(&s->lock);
    s->reserved -= reserved <= s->reserved ? reserved : s->reserved;
    entry_t *e = find(s, name);
    if (!fits(s, blob->len)) {
        rc = -1;
        goto unlock;
    }
    if (e) {
        old = e->blob;
        s->bytes -= old->len;
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
    s->bytes += blob->len;
unlock:
    pthread_mutex_unlock(&s->lock);
    tfd_blob_unref(old);                        /* outside the lock: may unmap 256 MiB */
    return rc;
}

int tfd_store_delete(tfd_store_t *s, const char *name)
{
    pthread_mutex_lock(&s->lock);
    entry_t *e = find(s, name);
    if (e) {
        HASH_DEL(s->table, e);
        s->bytes -= e->blob->len;
        retire(s, e->blob);
        s->count--;
    }
    pthread_mutex_unlock(&s->lock);
    if (!e)
        return -1;
    tfd_blob_unref(e->blob);
    free(e->name);
    free(e);
    return 0;
}

static int by_name(entry_t *a, entry_t *b) { return strcmp(a->name, b->name); }

void tfd_store_each(tfd_store_t *s, void (*fn)(const char *, const tfd_blob_t *, void *),
                    void *arg)
{
    pthread_mutex_lock(&s->lock);
    HASH_SORT(s->table, by_name);
    for (entry_t *e = s->table; e; e = e->hh.next)
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
    pthread_mutex_unlock(&s->lock);
}
