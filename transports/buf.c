/* buf.c - payload buffers: huge-page-backed mappings for large bodies, malloc for small.
 *
 * Also the free()-compatible kind (tfx_buf_malloc): aligned with posix_memalign and advised
 * huge pages, with no cache, since whoever frees it does not come back here.
 *
 * Freed large mappings are kept in a small cache (at most tfx_buf_set_cache_max bytes, a few
 * entries) and handed out again for the same size: their pages are already faulted in, so
 * a steady stream of same-sized PUTs or exchanges (weights every step) does not pay first
 * touch each time (the kernel zeroing fresh pages was over half of a 4 MiB exchange's
 * server time). A body of unknown length grows in place (tfx_buf_grow): mremap moves a
 * large mapping's pages instead of copying them, so growing never holds old and new copies
 * at once and leaves no intermediate sizes in the cache. Thread-safe (one mutex around the
 * cache, one around the memfd table).
 *
 * Large buffers are anonymous memory, huge pages advised: a UCX GET out of the store then
 * reads 2 MiB pages (shmem, a memfd's memory, gets only 4 KiB ones where the host's
 * shmem_enabled is "never", Debian's default, and a GET over cma out of those ran at 0.55x
 * our PUT). A stored document is handed to a same-host peer by tfx_buf_seal, at its first
 * share: its bytes move into a new memfd a chunk at a time, each chunk's memfd pages mapped
 * read-only over the anonymous ones at the same address, and the memfd is sealed against
 * writes and resizes. So the copy never holds more than one chunk twice and the document's
 * memory is still counted once. A sealed buffer is never reused (tfx_buf_free unmaps it and
 * closes its memfd: the pages live on in whoever still maps them); a table keyed by address
 * holds each sealed buffer's descriptor, at most a quarter of RLIMIT_NOFILE of them.
 */
#include "config.h"
#include "transports/buf.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>
#define HASH_NONFATAL_OOM 1
#include <uthash.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BIG TFX_BUF_BIG
#define HUGE_ALIGN ((size_t)2 << 20)
#define CACHE_SLOTS 16
#define SEAL_CHUNK ((size_t)8 << 20)        /* tfx_buf_seal moves this much at a time */

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t len;
} cache[CACHE_SLOTS];
static size_t cached_bytes, cache_max = TFX_BUF_CACHE_DEFAULT;

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
    if (len <= cache_max && cached_bytes <= cache_max - len)
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

void tfx_buf_set_cache_max(size_t bytes)
{
    pthread_mutex_lock(&cache_lock);
    cache_max = bytes;
    pthread_mutex_unlock(&cache_lock);
}

/* ---- the memfd table: buffers handed to tfx_buf_seal ---------------------------------------- */

/* An entry is never reused: sealed (fd is its memfd), or a move under way or one that failed
 * half way (fd -1: the bytes are intact, part of them in a memfd that only the mapping
 * holds). */
typedef struct {
    void *p;                        /* key */
    int fd;
    int sealed;
    UT_hash_handle hh;
} memfd_t;

static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;
static memfd_t *fds;
static size_t nfds, max_fds;        /* entries; at most a quarter of RLIMIT_NOFILE */

static memfd_t *fd_find(const void *p)
{
    memfd_t *m = NULL;
    HASH_FIND_PTR(fds, &p, m);
    return m;
}

/* A new entry for p (fd -1, not sealed), or NULL when the table is full or out of memory. */
static memfd_t *fd_add(void *p)
{
    memfd_t *e = malloc(sizeof *e);
    if (!e)
        return NULL;
    e->p = p;
    e->fd = -1;
    e->sealed = 0;
    pthread_mutex_lock(&fd_lock);
    if (!max_fds) {
        struct rlimit rl;
        max_fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                      ? (size_t)rl.rlim_cur / 4 : 256;
    }
    if (nfds < max_fds && !fd_find(p)) {
        HASH_ADD_PTR(fds, p, e);
        if (e->hh.tbl)
            nfds++;
    }
    int added = e->hh.tbl != NULL;
    pthread_mutex_unlock(&fd_lock);
    if (!added) {
        free(e);
        return NULL;
    }
    return e;
}

/* Unregisters p: 1 when it had an entry (*fd its memfd, or -1), 0 when none. */
static int fd_forget(void *p, int *fd)
{
    pthread_mutex_lock(&fd_lock);
    memfd_t *e = fd_find(p);
    if (e) {
        HASH_DEL(fds, e);
        nfds--;
        *fd = e->fd;
    }
    pthread_mutex_unlock(&fd_lock);
    free(e);
    return e != NULL;
}

/* Unmaps a large buffer for good (and closes its memfd). */
static void unmap_big(void *p, size_t len)
{
    int fd = -1;
    fd_forget(p, &fd);
    munmap(p, len);
    if (fd >= 0)
        close(fd);
}

/* Whether p is in the table: never to be reused. */
static int kept_apart(const void *p)
{
    pthread_mutex_lock(&fd_lock);
    int in = fd_find(p) != NULL;
    pthread_mutex_unlock(&fd_lock);
    return in;
}

int tfx_buf_fd(const void *p)
{
    pthread_mutex_lock(&fd_lock);
    memfd_t *e = p ? fd_find(p) : NULL;
    int fd = e && e->sealed ? e->fd : -1;
    pthread_mutex_unlock(&fd_lock);
    return fd;
}

int tfx_buf_sealed(const void *p)
{
    return tfx_buf_fd(p) >= 0;
}

/* Moves the cap bytes at p into the memfd fd (cap bytes long), a chunk at a time: the chunk
 * is written into the memfd (pwrite: no mapping to fault in or tear down, and the kernel
 * does not zero pages it is about to fill: 26 against 220 ms for 64 MiB through a mapping)
 * and the memfd's pages mapped over it, read-only through ro, at the same address. MAP_FIXED
 * swaps a mapping atomically, so a thread or a peer (cma) reading p meanwhile sees the same
 * bytes from one or the other, and the anonymous pages go back to the kernel as each chunk
 * is replaced. Returns the bytes replaced: cap when all went well. */
static size_t move_into(uint8_t *p, size_t cap, int fd, int ro)
{
    size_t off;
    for (off = 0; off < cap; off += SEAL_CHUNK) {
        size_t n = cap - off < SEAL_CHUNK ? cap - off : SEAL_CHUNK;
        for (size_t done = 0; done < n;) {
            ssize_t w = pwrite(fd, p + off + done, n - done, (off_t)(off + done));
            if (w <= 0)
                return off;
            done += (size_t)w;
        }
        if (mmap(p + off, n, PROT_READ, MAP_SHARED | MAP_FIXED, ro, (off_t)off) == MAP_FAILED)
            return off;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(p, cap, MADV_HUGEPAGE);   /* shmem huge pages where the host allows */
#endif
    return cap;
}

int tfx_buf_seal(void *p, size_t cap)
{
    if (!p || cap < BIG)
        return -1;
    pthread_mutex_lock(&fd_lock);
    memfd_t *e = fd_find(p);
    int fd = e && e->sealed ? e->fd : -1;
    pthread_mutex_unlock(&fd_lock);
    if (e || !(e = fd_add(p)))              /* sealed, failed, or no room in the table */
        return fd;
    /* Registered before anything moves, so it can never go back to the cache read-only. */
    size_t moved = 0;
    int ro = -1;
    char path[64];
    fd = memfd_create("tfetch-doc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    /* Mapped through a read-only descriptor, the chunks can never become writable
     * (VM_MAYWRITE), which is what F_SEAL_WRITE requires of every mapping left. */
    int ok = fd >= 0 && ftruncate(fd, (off_t)cap) == 0 &&
             (ro = open(path, O_RDONLY | O_CLOEXEC)) >= 0 &&
             (moved = move_into(p, cap, fd, ro)) == cap &&
             fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0;
    if (ro >= 0)
        close(ro);
    if (!ok && fd >= 0) {
        close(fd);                          /* what moved lives on in p's mapping of it */
        fd = -1;
    }
    pthread_mutex_lock(&fd_lock);
    if (ok) {
        e->fd = fd;
        e->sealed = 1;
    } else if (!moved) {                    /* nothing changed: p is reusable again */
        HASH_DEL(fds, e);
        nfds--;
        free(e);
    }
    pthread_mutex_unlock(&fd_lock);
    return fd;
}

/* ---- buffers ------------------------------------------------------------------------------- */

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
    if (p && cap >= BIG && !kept_apart(p) && to_cache(p, cap))
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
    if (len < size || kept_apart(p))        /* a sealed buffer never changes */
        return NULL;
    void *np = mremap(p, *cap, len, MREMAP_MAYMOVE);    /* keeps the huge-page advice */
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
    cached_bytes = 0;
    pthread_mutex_unlock(&cache_lock);
}
