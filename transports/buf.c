/* buf.c - payload buffers: huge-page-backed mappings for large bodies, malloc for small.
 *
 * Also the free()-compatible kind (tfx_buf_malloc): aligned with posix_memalign and advised
 * huge pages, with no cache, since whoever frees it does not come back here.
 *
 * Freed large mappings are kept in a small cache (at most TFX_BUF_CACHE_MAX bytes, a few
 * entries) and handed out again for the same size: their pages are already faulted in, so
 * a steady stream of same-sized PUTs or exchanges (weights every step) does not pay first
 * touch each time (the kernel zeroing fresh pages was over half of a 4 MiB exchange's
 * server time). A body of unknown length grows in place (tfx_buf_grow): mremap moves a
 * large mapping's pages instead of copying them, so growing never holds old and new copies
 * at once and leaves no intermediate sizes in the cache. Thread-safe (one mutex around the
 * cache).
 */
#include "config.h"
#include "transports/buf.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BIG (2u << 20)
#define HUGE_ALIGN ((size_t)2 << 20)
#define CACHE_SLOTS 16

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t len;
} cache[CACHE_SLOTS];
static size_t cached_bytes;

static void *from_cache(size_t len)
{
    void *p = NULL;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache[i].p && cache[i].len == len) {
            p = cache[i].p;
            cache[i].p = NULL;
            cached_bytes -= len;
            break;
        }
    pthread_mutex_unlock(&cache_lock);
    return p;
}

static int to_cache(void *p, size_t len)
{
    int kept = 0;
    pthread_mutex_lock(&cache_lock);
    if (cached_bytes + len <= TFX_BUF_CACHE_MAX)
        for (int i = 0; i < CACHE_SLOTS; i++)
            if (!cache[i].p) {
                cache[i].p = p;
                cache[i].len = len;
                cached_bytes += len;
                kept = 1;
                break;
            }
    pthread_mutex_unlock(&cache_lock);
    return kept;
}

void *tfx_buf_alloc(size_t size, size_t *cap)
{
    if (size < BIG) {
        void *p = malloc(size ? size : 1);
        if (p)
            *cap = size;
        return p;
    }
    size_t len = (size + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
    if (len < size)
        return NULL;
    void *p = from_cache(len);
    if (!p) {
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return NULL;
#ifdef MADV_HUGEPAGE
        (void)madvise(p, len, MADV_HUGEPAGE);   /* advice only: fine if refused */
#endif
    }
    *cap = len;
    return p;
}

void tfx_buf_free(void *p, size_t cap)
{
    if (!p)
        return;
    if (cap < BIG)
        free(p);
    else if (!to_cache(p, cap))
        munmap(p, cap);
}

void *tfx_buf_grow(void *p, size_t *cap, size_t used, size_t size)
{
    if (!p)
        return tfx_buf_alloc(size, cap);
    if (size <= *cap)
        return p;
    if (used > *cap)
        used = *cap;
    if (*cap < BIG && size < BIG) {
        void *np = realloc(p, size);
        if (np)
            *cap = size;
        return np;
    }
    if (*cap < BIG) {                       /* small to large: copy at most 2 MiB once */
        size_t ncap;
        void *np = tfx_buf_alloc(size, &ncap);
        if (!np)
            return NULL;
        memcpy(np, p, used);
        free(p);
        *cap = ncap;
        return np;
    }
    size_t len = (size + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
    if (len < size)
        return NULL;
    void *np = mremap(p, *cap, len, MREMAP_MAYMOVE);   /* keeps the huge-page advice */
    if (np == MAP_FAILED)
        return NULL;
    *cap = len;
    return np;
}

void *tfx_buf_malloc(size_t size)
{
    if (size < BIG)
        return malloc(size ? size : 1);
    void *p = NULL;
    if (posix_memalign(&p, HUGE_ALIGN, size) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    /* The whole huge pages inside the block; advice only: fine if refused. */
    (void)madvise(p, size & ~(HUGE_ALIGN - 1), MADV_HUGEPAGE);
#endif
    return p;
}

void tfx_buf_trim(void)
{
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache[i].p) {
            munmap(cache[i].p, cache[i].len);
            cache[i].p = NULL;
        }
    cached_bytes = 0;
    pthread_mutex_unlock(&cache_lock);
}
