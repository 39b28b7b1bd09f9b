/* shmpool.h - ready memory for same-host PUTs: memfds whose pages are already there.
 *
 * A same-host PUT writes its document into a memfd the daemon lends (ALLOC, daemon/shm.c).
 * A fresh memfd has no pages: the writer's first touch of each 4 KiB page allocates and
 * zeroes it, and on our machines (virtual ones, where memory the guest freed goes back to
 * the host) that costs four to twenty times the copy itself. A document's memfd cannot be
 * reused once stored: it is sealed against writes (readers rely on that), and seals are
 * forever. So the pool makes the next one ahead of time: a thread of its own creates memfds
 * of the sizes PUTs asked for lately and faults their pages in (MADV_POPULATE_WRITE), off
 * the request path, while the previous PUT's document is being used; ALLOC takes one of
 * the right size (a hit: the writer only maps pages that exist) or, with none ready, makes
 * a fresh one as before (a miss). A taken region is unsealed, never lent before, never
 * mapped by anyone but the daemon: reusing it exposes nothing.
 *
 * Bounded: ready regions hold at most max_bytes, and each one reserves its bytes in the
 * store (tfd_store_reserve), so the store's limit counts them and a full store makes no
 * more; a PUT that finds the store full has the pool give its bytes back first
 * (tfd_shmpool_drain). Sizes below 1 MiB are not pooled: their faults cost little. Where
 * the host gives shmem huge pages (shmem_enabled advise or always) the regions are advised
 * MADV_HUGEPAGE; where it does not (never, the default) they are collapsed into huge pages
 * (MADV_COLLAPSE, Linux 6.1) when the kernel can: the writer's mapping of a ready GiB then
 * costs a fraction of a millisecond, not the 70-250 ms of 262144 small pages, and it writes
 * at memcpy speed. tfd_shmpool_pages says which pages back them.
 *
 * Any thread may take, drain and read the stats; the pool's own thread refills.
 */
#ifndef TFD_SHMPOOL_H
#define TFD_SHMPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/store.h"
#include "proto/status.h"
#include "transports/shm.h"

typedef struct tfd_shmpool tfd_shmpool_t;

typedef struct {
    uint64_t ready;                 /* regions ready now */
    uint64_t ready_bytes;           /* their bytes (reserved in the store) */
    uint64_t max_bytes;             /* the bound */
    uint64_t hits, misses;          /* ALLOCs served from the pool, or made fresh */
    uint64_t made;                  /* regions the pool's thread made ready */
    uint64_t huge;                  /* of them, in 2 MiB pages by MADV_COLLAPSE */
} tfd_shmpool_stats_t;

/* max_bytes 0: no pool (tfd_shmpool_take always makes a fresh region). NULL with why set
 * when its thread cannot start. */
tfd_shmpool_t *tfd_shmpool_new(tfd_store_t *store, uint64_t max_bytes, char *why,
                               size_t why_size);
/* 1 with *out a ready region of exactly size bytes (one of size..size+size/8 cut to size),
 * writable and mapped by this process as tfx_shm_create's, its size bytes reserved in the
 * store for the caller; 0 when none is ready (the caller reserves and creates one as
 * before). Either way the pool learns that size is asked for and makes the next one ready.
 * p may be NULL (0). */
int tfd_shmpool_take(tfd_shmpool_t *p, size_t size, tfx_shm_t *out);
/* A region lent for a PUT or call came back (committed, released, or its connection
 * closed): the pool's thread may make the next one now, not beside the writer's copy. p may
 * be NULL. */
void tfd_shmpool_kick(tfd_shmpool_t *p);
/* Gives back every ready region's store bytes, and makes none until the next take: the
 * store calls it when a reservation does not fit (tfd_store_set_reclaim). */
void tfd_shmpool_drain(tfd_shmpool_t *p);
void tfd_shmpool_stats(tfd_shmpool_t *p, tfd_shmpool_stats_t *st);    /* p NULL: zeroes */
/* Whether the kernel gives memfds huge pages (TFD_SHMEM_ENABLED's bracketed mode into mode):
 * 1 (advise, always, within_size, force), 0 (never, deny), -1 (no such file: no shmem
 * huge pages on this kernel). */
#define TFD_SHMEM_ENABLED "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
int tfd_shmem_huge(char *mode, size_t size);
/* "shmem THP (advise)", "4 KiB pages (shmem_enabled never)": what backs the regions. */
const char *tfd_shmpool_pages(tfd_shmpool_t *p);
void tfd_shmpool_free(tfd_shmpool_t *p);

#endif
