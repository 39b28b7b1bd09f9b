/* shmpool.c - ready memory for same-host PUTs (daemon/shmpool.h).
 *
 * The pool keeps a short list of the sizes ALLOC asked for lately (WANTS, the most recent
 * first) and, for each, at most one ready region; its thread sleeps until a take leaves a
 * wanted size without one and the region taken has come back (committed, released, its
 * connection gone: tfd_shmpool_kick; or a second passed), then makes it: reserve its bytes
 * in the store, create the memfd, put its pages in (2 MiB ones where it can), and file it.
 * Making a region happens without the lock (a GiB takes a few hundred milliseconds), so a
 * take meanwhile finds it missing and makes its own.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/shmpool.h"
#include "transports/clock.h"

#define MAX_READY 4                         /* regions, one per wanted size */
#define MIN_POOLED (1u << 20)               /* smaller sizes fault in quickly anyway */
#define REFILL_AFTER_MS 1000                /* a refill waits this long for a region back */

typedef struct {
    size_t size;
    tfx_shm_t m;                            /* m.fd -1: none ready */
} slot_t;

struct tfd_shmpool {
    tfd_store_t *store;
    uint64_t max_bytes;
    int advise_huge;                        /* shmem_enabled lets MADV_HUGEPAGE count */
    int collapse;                           /* MADV_COLLAPSE makes huge pages here */
    char pages[96];
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    int stopping;
    int paused;                             /* drained: nothing made until the next take */
    int kicked;                             /* a lent region came back since the last take */
    uint64_t taken_ms;                      /* the last take (tfx_now_ms) */
    slot_t slots[MAX_READY];                /* wanted sizes, most recently asked first */
    size_t nslots;
    uint64_t ready_bytes;
    tfd_shmpool_stats_t st;
};

int tfd_shmem_huge(char *mode, size_t size)
{
    char line[128] = "";
    FILE *f = fopen(TFD_SHMEM_ENABLED, "r");
    if (f) {
        if (!fgets(line, sizeof line, f))
            line[0] = '\0';
        fclose(f);
    }
    const char *open = strchr(line, '['), *close = open ? strchr(open, ']') : NULL;
    int len = close ? (int)(close - open - 1) : 0;
    snprintf(mode, size, "%.*s", len, close ? open + 1 : "");
    if (!close)
        return -1;
    return !((len == 5 && !strncmp(open + 1, "never", 5)) ||
             (len == 4 && !strncmp(open + 1, "deny", 4)));
}


/* Puts the pages of bytes from..to of fd's file in place by writing zeros through the
 * descriptor: the file gets them and nobody's page tables do (the daemon's mapping stays
 * empty, so sealing the region later tears nothing down). 0 or an errno. */
static int write_zeros(int fd, size_t from, size_t to)
{
    static const unsigned char zeros[64 << 10];
    for (size_t off = from; off < to;) {
        size_t n = to - off < sizeof zeros ? to - off : sizeof zeros;
        ssize_t w = pwrite(fd, zeros, n, (off_t)off);
        if (w < 0 && errno != EINTR)
            return errno;
        off += w > 0 ? (size_t)w : 0;
    }
    return 0;
}

static int fill_by_write(const tfx_shm_t *m)
{
    return write_zeros(m->fd, 0, m->size);
}

/* Huge pages come only to a mapping advised so (shmem_enabled advise): faulted in through
 * the daemon's mapping, 2 MiB a fault. A kernel without MADV_POPULATE_WRITE (before 5.14)
 * writes zeros instead. 0 or an errno. */
static int fill_by_mapping(const tfx_shm_t *m)
{
#ifdef MADV_HUGEPAGE
    (void)madvise(m->p, m->size, MADV_HUGEPAGE);            /* advice only */
#endif
#ifdef MADV_POPULATE_WRITE
    if (madvise(m->p, m->size, MADV_POPULATE_WRITE) == 0)
        return 0;
    if (errno != EINVAL)
        return errno;
#endif
    return fill_by_write(m);
}

/* Where shmem_enabled says never the region's 2 MiB-aligned part is collapsed into huge
 * pages (tfx_shm_collapse) and its tail, under 2 MiB, filled by write. 0 or an errno. */
static int fill_by_collapse(const tfx_shm_t *m)
{
    int e = tfx_shm_collapse(m, 0);
    return e ? e : write_zeros(m->fd, m->size & ~(TFX_SHM_HUGE - 1), m->size);
}

/* Which pages the regions get: what shmem_enabled says (huge pages for memfds on advice,
 * always, or never), and under never whether this kernel collapses a memfd's range into huge
 * pages anyway (tried on one 2 MiB region now). */
static void read_pages(tfd_shmpool_t *p)
{
    char mode[32];
    int huge = tfd_shmem_huge(mode, sizeof mode);
    p->advise_huge = huge > 0;
    if (huge < 0) {
        snprintf(p->pages, sizeof p->pages, "4 KiB pages (no shmem huge pages on this kernel)");
        return;
    }
    if (huge) {
        snprintf(p->pages, sizeof p->pages, "shmem huge pages (shmem_enabled %s)", mode);
        return;
    }
    tfx_shm_t m = TFX_SHM_NONE;
    tfp_err_t err;
    int e = tfx_shm_create(TFX_SHM_HUGE, "tfetch-probe", &m, &err) == TFP_OK
                ? fill_by_collapse(&m)
                : ENOMEM;
    tfx_shm_close(&m);
    p->collapse = e == 0;
    if (e == 0)
        snprintf(p->pages, sizeof p->pages, "2 MiB pages (MADV_COLLAPSE; shmem_enabled %s)",
                 mode);
    else
        snprintf(p->pages, sizeof p->pages, "4 KiB pages (shmem_enabled %s; MADV_COLLAPSE: %s)",
                 mode, strerror(e));
}

/* A fresh region of size bytes whose pages are there, so the writer's mapping only points
 * at them: 2 MiB ones where the host gives them (shmem_enabled advise: faulted in so;
 * never: collapsed, when this kernel can), else 4 KiB ones written. */
static tfp_status_t make_ready(tfd_shmpool_t *p, size_t size, tfx_shm_t *m, tfp_err_t *err)
{
    if (tfx_shm_create(size, "tfetch-put", m, err) != TFP_OK)
        return err->code;
    int e, huge = 0;
    if (p->advise_huge) {
        e = fill_by_mapping(m);
    } else if (p->collapse && fill_by_collapse(m) == 0) {
        e = 0;
        huge = 1;
    } else {
        e = fill_by_write(m);           /* over any 4 KiB pages collapsing left */
    }
    if (e != 0) {                           /* ENOSPC, ENOMEM: the host has no memory */
        tfx_shm_close(m);
        return tfp_err_set(err, TFP_ENOMEM, "shm pool: %zu bytes: %s", size, strerror(e));
    }
    pthread_mutex_lock(&p->lock);
    p->st.huge += huge;
    pthread_mutex_unlock(&p->lock);
    return TFP_OK;
}

/* The first wanted size with no ready region that fits the bound, or 0. Under the lock. */
static size_t next_wanted(tfd_shmpool_t *p)
{
    if (p->paused)
        return 0;
    for (size_t i = 0; i < p->nslots; i++)
        if (p->slots[i].m.fd < 0 && p->ready_bytes + p->slots[i].size <= p->max_bytes)
            return p->slots[i].size;
    return 0;
}

/* Files m as the ready region of its size, if that size is still wanted and has none;
 * else it goes back. Under the lock; 1 when filed. */
static int file_ready(tfd_shmpool_t *p, const tfx_shm_t *m)
{
    if (p->paused)
        return 0;
    for (size_t i = 0; i < p->nslots; i++)
        if (p->slots[i].size == m->size && p->slots[i].m.fd < 0 &&
            p->ready_bytes + m->size <= p->max_bytes) {
            p->slots[i].m = *m;
            p->ready_bytes += m->size;
            p->st.made++;
            return 1;
        }
    return 0;
}

static void *refill(void *arg)
{
    tfd_shmpool_t *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->stopping) {
        size_t size = next_wanted(p);
        if (!size) {
            pthread_cond_wait(&p->wake, &p->lock);
            continue;
        }
        /* Not while the region just taken is being written: making the next one (zeroing
         * it) beside that copy took a third of a 1 GiB PUT's speed on our 2-core VMs
         * (tfetch-shm-bench, paced: 0.65-0.88x memcpy, 0.94-1.07x after). A writer that
         * keeps its region longer than REFILL_AFTER_MS gets the refill anyway. */
        uint64_t now = tfx_now_ms(), until = p->taken_ms + REFILL_AFTER_MS;
        if (!p->kicked && now < until) {
            struct timespec ts = tfx_deadline_rt(until - now);
            pthread_cond_timedwait(&p->wake, &p->lock, &ts);
            continue;
        }
        pthread_mutex_unlock(&p->lock);
        tfx_shm_t m = {.fd = -1};
        tfp_err_t err;
        int reserved = tfd_store_reserve_spare(p->store, size) == 0;
        int made = reserved && make_ready(p, size, &m, &err) == TFP_OK;
        pthread_mutex_lock(&p->lock);
        if (made && !p->stopping && file_ready(p, &m))
            continue;
        pthread_mutex_unlock(&p->lock);
        if (made)
            tfx_shm_close(&m);
        if (reserved)
            tfd_store_unreserve_spare(p->store, size, 0);
        else
            tfd_log(LOG_DEBUG, "shm pool: the store has no room for %zu ready bytes", size);
        pthread_mutex_lock(&p->lock);
        if (!made)                          /* no room, or no memory: wait for a take */
            pthread_cond_wait(&p->wake, &p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void drain_cb(void *p)
{
    tfd_shmpool_drain(p);
}

tfd_shmpool_t *tfd_shmpool_new(tfd_store_t *store, uint64_t max_bytes, char *why,
                               size_t why_size)
{
    tfd_shmpool_t *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(why, why_size, "out of memory");
        return NULL;
    }
    p->store = store;
    p->max_bytes = max_bytes;
    p->st.max_bytes = max_bytes;
    read_pages(p);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    if (max_bytes && (errno = pthread_create(&p->thread, NULL, refill, p)) != 0) {
        snprintf(why, why_size, "shm pool: thread: %s", strerror(errno));
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return NULL;
    }
    if (max_bytes)
        tfd_store_set_reclaim(store, drain_cb, p);
    return p;
}

/* Makes size the most recently wanted one (its slot first, the oldest dropped when the
 * list is full; a dropped slot's ready region is returned through *drop). Under the lock. */
static void want(tfd_shmpool_t *p, size_t size, tfx_shm_t *drop)
{
    size_t i;
    for (i = 0; i < p->nslots && p->slots[i].size != size; i++)
        ;
    slot_t s = {.size = size, .m = {.fd = -1}};
    if (i < p->nslots) {
        s = p->slots[i];
    } else if (p->nslots == MAX_READY) {
        i = --p->nslots;
        *drop = p->slots[i].m;
        if (drop->fd >= 0)
            p->ready_bytes -= drop->size;
    }
    memmove(&p->slots[1], &p->slots[0], i * sizeof p->slots[0]);
    p->slots[0] = s;
    if (i == p->nslots)
        p->nslots++;
}

/* The ready region of a size in size..size+size/8, out of its slot, or 0. Under the lock. */
static int take_ready(tfd_shmpool_t *p, size_t size, tfx_shm_t *out)
{
    for (size_t i = 0; i < p->nslots; i++) {
        tfx_shm_t *m = &p->slots[i].m;
        if (m->fd >= 0 && m->size >= size && m->size - size <= size / 8) {
            *out = *m;
            m->fd = -1;
            p->ready_bytes -= out->size;
            return 1;
        }
    }
    return 0;
}

/* A ready region of more than size bytes cut to size: the file shrinks (its tail pages
 * freed) and so does the mapping. */
static tfp_status_t cut(tfx_shm_t *m, size_t size, tfp_err_t *err)
{
    if (m->size == size)
        return TFP_OK;
    if (ftruncate(m->fd, (off_t)size) != 0)
        return tfp_err_set(err, TFP_ENOMEM, "shm pool: ftruncate %zu: %s", size,
                           strerror(errno));
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t keep = (size + page - 1) / page * page, had = (m->size + page - 1) / page * page;
    if (had > keep)
        munmap((unsigned char *)m->p + keep, had - keep);
    m->size = size;
    return TFP_OK;
}

static void give_back(tfd_shmpool_t *p, tfx_shm_t *m)
{
    if (m->fd < 0)
        return;
    size_t size = m->size;
    tfx_shm_close(m);
    tfd_store_unreserve_spare(p->store, size, 0);
}

int tfd_shmpool_take(tfd_shmpool_t *p, size_t size, tfx_shm_t *out)
{
    tfx_shm_t got = {.fd = -1}, drop = {.fd = -1};
    int hit = 0;
    if (!p || !p->max_bytes || size < MIN_POOLED)
        return 0;
    pthread_mutex_lock(&p->lock);
    hit = take_ready(p, size, &got);
    want(p, size, &drop);
    p->paused = 0;
    if (hit)
        p->st.hits++;
    else
        p->st.misses++;
    p->kicked = 0;                      /* the refill waits for a lent region to come back */
    p->taken_ms = tfx_now_ms();
    pthread_mutex_unlock(&p->lock);
    give_back(p, &drop);
    if (!hit)
        return 0;
    size_t had = got.size;
    tfp_err_t err;
    if (cut(&got, size, &err) != TFP_OK) {
        tfd_log(LOG_WARNING, "%s", err.msg);
        give_back(p, &got);
        return 0;
    }
    tfd_store_unreserve_spare(p->store, had, size);     /* size of them the caller's now */
    *out = got;
    return 1;
}

void tfd_shmpool_kick(tfd_shmpool_t *p)
{
    if (!p || !p->max_bytes)
        return;
    pthread_mutex_lock(&p->lock);
    p->kicked = 1;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
}

void tfd_shmpool_drain(tfd_shmpool_t *p)
{
    if (!p)
        return;
    tfx_shm_t gone[MAX_READY];
    size_t n = 0;
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->nslots; i++)
        if (p->slots[i].m.fd >= 0) {
            gone[n++] = p->slots[i].m;
            p->slots[i].m.fd = -1;
        }
    p->ready_bytes = 0;
    p->paused = 1;
    pthread_mutex_unlock(&p->lock);
    for (size_t i = 0; i < n; i++)
        give_back(p, &gone[i]);
}

void tfd_shmpool_stats(tfd_shmpool_t *p, tfd_shmpool_stats_t *st)
{
    memset(st, 0, sizeof *st);
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    *st = p->st;
    st->ready_bytes = p->ready_bytes;
    for (size_t i = 0; i < p->nslots; i++)
        st->ready += p->slots[i].m.fd >= 0;
    pthread_mutex_unlock(&p->lock);
}

const char *tfd_shmpool_pages(tfd_shmpool_t *p)
{
    return p ? p->pages : "";
}

void tfd_shmpool_free(tfd_shmpool_t *p)
{
    if (!p)
        return;
    if (p->max_bytes) {
        tfd_store_set_reclaim(p->store, NULL, NULL);
        pthread_mutex_lock(&p->lock);
        p->stopping = 1;
        pthread_cond_signal(&p->wake);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->thread, NULL);
    }
    tfd_shmpool_drain(p);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
