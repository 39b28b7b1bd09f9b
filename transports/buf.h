/* buf.h - payload buffers for tensor bodies: the one allocator of every layer above proto.
 *
 * Large bodies (>= TFX_BUF_BIG, 2 MiB) are anonymous mappings asked for transparent huge
 * pages, so the one write that fills them faults 2 MiB at a time instead of 4 KiB (first
 * touch of a fresh 64 MiB buffer costs ~200 ms in 4 KiB pages here) and a UCX transfer out of
 * them pins 2 MiB pages; small ones come from malloc. Two kinds, for two ownerships:
 * tfx_buf_alloc's are mapped directly and reused for the same size from a bounded cache (the
 * daemon's store and request bodies, libtfetch's large UCX replies, returned with
 * tfx_buf_free; a capacity below 2 MiB means malloc'd, so tfx_buf_free(p, 0) is free(p));
 * tfx_buf_malloc's are released by free() and may be grown by realloc() (the clients' reply
 * bodies, which libtfetch's caller frees). Never zeroed. A large tfx_buf_alloc buffer can be
 * handed to a same-host peer once its contents are final (tfx_buf_seal: its bytes move into a
 * sealed memfd, at the same address). Any thread.
 */
#ifndef TFX_BUF_H
#define TFX_BUF_H

#include <stddef.h>

/* Returns a buffer of at least size bytes (size 0 allowed), or NULL. *cap gets the usable size
 * to pass back to tfx_buf_free. */
void *tfx_buf_alloc(size_t size, size_t *cap);
/* Grows a tfx_buf_alloc buffer p of *cap bytes, whose first `used` bytes matter, to at least
 * size bytes (p NULL: a new one). Large buffers grow in place or move their pages (mremap),
 * never holding two copies. Returns the buffer (p itself is then invalid unless returned) and
 * updates *cap; NULL on failure, with p and *cap untouched and still valid. */
void *tfx_buf_grow(void *p, size_t *cap, size_t used, size_t size);
/* Returns the buffer: small ones to malloc, large ones to the reuse cache when it has room
 * (tfx_buf_set_cache_max; fully faulted in) and they were never sealed, else to the
 * kernel. */
void tfx_buf_free(void *p, size_t cap);          /* NULL is a no-op */
/* As tfx_buf_free, but straight back to malloc or the kernel, never to the cache. */
void tfx_buf_free_uncached(void *p, size_t cap);
/* A buffer of size bytes (0 allowed) that free() releases and realloc() may grow, or NULL:
 * big ones 2 MiB-aligned with huge pages advised, small ones plain malloc. */
void *tfx_buf_malloc(size_t size);
/* The sealed memfd behind p (borrowed, valid until tfx_buf_free), or -1 when tfx_buf_seal has
 * not sealed p. */
int tfx_buf_fd(const void *p);
/* Makes p (a tfx_buf_alloc buffer of cap bytes, >= TFX_BUF_BIG) shareable with other
 * processes for good: its bytes move into a new memfd, mapped read-only in place of p's
 * pages at the same address (8 MiB at a time, so the move holds at most that much twice;
 * ~26 ms for 64 MiB here), and the memfd is sealed against writes and resizes
 * (transports/shm.h); p will never be reused. Returns the memfd (borrowed, as tfx_buf_fd's),
 * or -1: p small, no descriptor to be had (at most a quarter of RLIMIT_NOFILE buffers are
 * sealed at once), or the move failed (p keeps its bytes either way, and is not retried
 * after a move that failed half way; -1 too while another thread moves it). Idempotent.
 * Nothing may write into p from the call on. */
int tfx_buf_seal(void *p, size_t cap);
/* 1 once tfx_buf_seal sealed p. */
int tfx_buf_sealed(const void *p);
/* Gives every cached buffer back to the kernel (at exit, or under memory pressure). */
void tfx_buf_trim(void);

/* Bounds the bytes the reuse cache keeps (at start, before any buffer comes back; lowering it
 * gives back nothing already kept). */
void tfx_buf_set_cache_max(size_t bytes);

#define TFX_BUF_BIG ((size_t)2 << 20)           /* from here on, mapped (and cached) */
/* A library's bound: memory its program did not ask to keep (libtfetch's reply bodies). */
#define TFX_BUF_CACHE_DEFAULT ((size_t)256 << 20)
/* tfetchd's: its request bodies and stored documents, a steady stream of same-sized PUTs. */
#define TFX_BUF_CACHE_DAEMON ((size_t)512 << 20)

#endif
