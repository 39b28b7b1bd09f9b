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
 * cache, one around the memfd table).
 *
 * Large tfx_buf_alloc buffers are memfd-backed (transports/shm.h) while descriptors last (a
 * quarter of RLIMIT_NOFILE; beyond, or when memfd_create fails, anonymous memory as before),
 * so a stored document can be handed to a same-host peer as it is: tfx_buf_seal turns the
 * mapping read-only in place and seals the memfd against writes and resizes. A sealed buffer
 * is never reused (tfx_buf_free unmaps it and closes its memfd: the pages live on in whoever
 * still maps them); one never sealed goes back to the cache as any other, which keeps the
 * cache's first-touch savings for every document no peer mapped. A table keyed by address
 * holds each memfd buffer's descriptor and whether it is sealed. shmem gets no transparent
 * huge pages here (shmem_enabled is "never" by default), so the huge-page advice only helps
 * the anonymous ones.
 */
#include "config.h"
#include "transports/buf.h"
#include "transports/shm.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>
#define HASH_NONFATAL_OOM 1
#include <uthash.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BIG (2u << 20)
#define HUGE_ALIGN ((size_t)2 << 20)
#define CACHE_SLOTS 16

/* Cached buffers keep their kind: memfd-backed ones go only to tfx_buf_alloc (so a stored
 * document can still be handed to a same-host peer), anonymous ones to
 * tfx_buf_alloc_private first (and to tfx_buf_alloc when no descriptor is left). Anonymous
 * bytes have a bound of their own, TFX_BUF_PRIVATE_CACHE_MAX: in a client process they are
 * memory the program did not ask to keep. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t len;
    int anon;
} cache[CACHE_SLOTS];
static size_t cached_bytes, cached_anon;

static void *from_cache(size_t len, int anon)
{
    void *p = NULL;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache[i].p && cache[i].len == len && cache[i].anon == anon) {
            p = cache[i].p;
            cache[i].p = NULL;
            cached_bytes -= len;
            if (anon)
                cached_anon -= len;
            break;
        }
    pthread_mutex_unlock(&cache_lock);
    return p;
}

static int to_cache(void *p, size_t len, int anon)
{
    int kept = 0;
    pthread_mutex_lock(&cache_lock);
    if (cached_bytes + len <= TFX_BUF_CACHE_MAX &&
        (!anon || cached_anon + len <= TFX_BUF_PRIVATE_CACHE_MAX))
        for (int i = 0; i < CACHE_SLOTS; i++)
            if (!cache[i].p) {
                cache[i].p = p;
                cache[i].len = len;
                cache[i].anon = anon;
                cached_bytes += len;
                if (anon)
                    cached_anon += len;
                kept = 1;
                break;
            }
    pthread_mutex_unlock(&cache_lock);
    return kept;
}

/* ---- the memfd table ---------------------------------------------------------------------- */

typedef struct {
    void *p;                        /* key */
    int fd;
    int sealed;
    UT_hash_handle hh;
} memfd_t;

static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;
static memfd_t *fds;
static size_t nfds, max_fds;

static memfd_t *fd_find(const void *p)
{
    memfd_t *m = NULL;
    HASH_FIND_PTR(fds, &p, m);
    return m;
}

/* A fresh memfd mapping of len bytes, registered; NULL when there is none to be had. */
static void *memfd_map(size_t len)
{
    pthread_mutex_lock(&fd_lock);
    if (!max_fds) {
        struct rlimit rl;
        max_fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                      ? (size_t)rl.rlim_cur / 4 : 256;
    }
    int room = nfds < max_fds;
    if (room)
        nfds++;                     /* claimed before the unlocked create */
    pthread_mutex_unlock(&fd_lock);
    if (!room)
        return NULL;
    tfx_shm_t m;
    memfd_t *e = malloc(sizeof *e);
    if (!e || tfx_shm_create(len, "tfetch-doc", &m, NULL) != TFP_OK) {
        free(e);
        pthread_mutex_lock(&fd_lock);
        nfds--;
        pthread_mutex_unlock(&fd_lock);
        return NULL;
    }
    e->p = m.p;
    e->fd = m.fd;
    e->sealed = 0;
    pthread_mutex_lock(&fd_lock);
    HASH_ADD_PTR(fds, p, e);
    int added = e->hh.tbl != NULL;
    if (!added)
        nfds--;
    pthread_mutex_unlock(&fd_lock);
    if (!added) {
        tfx_shm_close(&m);
        free(e);
        return NULL;
    }
    return m.p;
}

/* Unregisters p: its fd (>= 0) and whether it was sealed, or -1 when p has no memfd. */
static int memfd_forget(void *p, int *sealed)
{
    pthread_mutex_lock(&fd_lock);
    memfd_t *e = fd_find(p);
    int fd = -1;
    if (e) {
        HASH_DEL(fds, e);
        nfds--;
        fd = e->fd;
        *sealed = e->sealed;
    }
    pthread_mutex_unlock(&fd_lock);
    free(e);
    return fd;
}

/* Unmaps a large buffer for good (and closes its memfd). */
static void unmap_big(void *p, size_t len)
{
    int sealed;
    int fd = memfd_forget(p, &sealed);
    munmap(p, len);
    if (fd >= 0)
        close(fd);
}

int tfx_buf_fd(const void *p)
{
    pthread_mutex_lock(&fd_lock);
    memfd_t *e = p ? fd_find(p) : NULL;
    int fd = e ? e->fd : -1;
    pthread_mutex_unlock(&fd_lock);
    return fd;
}

int tfx_buf_seal(void *p, size_t cap)
{
    pthread_mutex_lock(&fd_lock);
    memfd_t *e = p ? fd_find(p) : NULL;
    int fd = -1;
    if (e) {
        tfx_shm_t m = { e->fd, p, cap, !e->sealed };
        if (e->sealed || tfx_shm_seal(&m, TFX_SHM_SEAL_WRITE, NULL) == TFP_OK) {
            e->sealed = 1;
            fd = e->fd;
        }
    }
    pthread_mutex_unlock(&fd_lock);
    return fd;
}

int tfx_buf_sealed(const void *p)
{
    pthread_mutex_lock(&fd_lock);
    memfd_t *e = p ? fd_find(p) : NULL;
    int sealed = e && e->sealed;
    pthread_mutex_unlock(&fd_lock);
    return sealed;
}

/* ---- buffers ------------------------------------------------------------------------------- */

static void *alloc(size_t size, size_t *cap, int memfd)
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
    void *p = from_cache(len, !memfd);
    if (!p && memfd && (p = memfd_map(len))) {
#ifdef MADV_HUGEPAGE
        /* shmem gets huge pages only where the host allows it (shmem_enabled advise or
         * within_size): then a UCX GET's copy out of the store pins 2 MiB pages, not 4 KiB
         * ones (measured: 11.2 against 7.6 GB/s for 64 MiB over cma). Advice only. */
        (void)madvise(p, len, MADV_HUGEPAGE);
#endif
    }
    if (!p && memfd)
        p = from_cache(len, 1);         /* no descriptor to be had: anonymous, as below */
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

void *tfx_buf_alloc(size_t size, size_t *cap)
{
    return alloc(size, cap, 1);
}

void *tfx_buf_alloc_private(size_t size, size_t *cap)
{
    return alloc(size, cap, 0);
}

void tfx_buf_free_uncached(void *p, size_t cap)
{
    if (!p)
        return;
    if (cap < BIG)
        free(p);
    else
        unmap_big(p, cap);
}

void tfx_buf_free(void *p, size_t cap)
{
    if (p && cap >= BIG && !tfx_buf_sealed(p) && to_cache(p, cap, tfx_buf_fd(p) < 0))
        return;
    tfx_buf_free_uncached(p, cap);
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
    pthread_mutex_lock(&fd_lock);           /* the table's key moves with the pages */
    memfd_t *e = fd_find(p);
    void *np = MAP_FAILED;
    if (!e || (!e->sealed && ftruncate(e->fd, (off_t)len) == 0))
        np = mremap(p, *cap, len, MREMAP_MAYMOVE);  /* keeps the huge-page advice */
    if (e && np == MAP_FAILED && !e->sealed)
        (void)ftruncate(e->fd, (off_t)*cap);
    if (e && np != MAP_FAILED && np != p) {
        HASH_DEL(fds, e);
        e->p = np;
        HASH_ADD_PTR(fds, p, e);
        if (!e->hh.tbl) {                   /* no room to re-add: the fd goes, not the pages */
            close(e->fd);
            nfds--;
            free(e);
        }
    }
    pthread_mutex_unlock(&fd_lock);
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
            unmap_big(cache[i].p, cache[i].len);
            cache[i].p = NULL;
        }
    cached_bytes = cached_anon = 0;
    pthread_mutex_unlock(&cache_lock);
}
