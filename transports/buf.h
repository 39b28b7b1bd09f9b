/* buf.h - payload buffers for tensor bodies: the one allocator of every layer above proto.
 *
 * Large bodies (>= 2 MiB) are asked for transparent huge pages, so the one write that fills
 * them faults 2 MiB at a time instead of 4 KiB (first touch of a fresh 64 MiB buffer costs
 * ~200 ms in 4 KiB pages here); small ones come from malloc. Two kinds, for two ownerships:
 * tfx_buf_alloc's are mapped directly and reused for the same size from a bounded cache (the
 * daemon's store and request bodies, libtfetch's large UCX replies, returned with
 * tfx_buf_free; a capacity below 2 MiB means malloc'd, so tfx_buf_free(p, 0) is free(p)); tfx_buf_malloc's are
 * released by free() and may be grown by realloc() (the clients' reply bodies, which
 * libtfetch's caller frees). Never zeroed. Large tfx_buf_alloc buffers are memfd-backed
 * when descriptors allow, so the store can hand a document to a same-host peer
 * (tfx_buf_seal). Any thread.
 */
#ifndef TFX_BUF_H
#define TFX_BUF_H

#include <stddef.h>

/* Returns a buffer of at least size bytes (size 0 allowed), or NULL. *cap gets the usable size
 * to pass back to tfx_buf_free. */
void *tfx_buf_alloc(size_t size, size_t *cap);
/* As tfx_buf_alloc, for memory that will never be shared with another process (a client's
 * reply bodies): never memfd-backed (anonymous, huge pages advised), so it costs no
 * descriptor. Returned with tfx_buf_free, to the same cache, where anonymous buffers are
 * kept apart and bounded by TFX_BUF_PRIVATE_CACHE_MAX. */
void *tfx_buf_alloc_private(size_t size, size_t *cap);
/* Grows a tfx_buf_alloc buffer p of *cap bytes, whose first `used` bytes matter, to at least
 * size bytes (p NULL: a new one). Large buffers grow in place or move their pages (mremap),
 * never holding two copies. Returns the buffer (p itself is then invalid unless returned) and
 * updates *cap; NULL on failure, with p and *cap untouched and still valid. */
void *tfx_buf_grow(void *p, size_t *cap, size_t used, size_t size);
/* Returns the buffer: small ones to malloc, large ones to the reuse cache when it has room
 * (at most TFX_BUF_CACHE_MAX bytes, fully faulted in), else to the kernel. */
void tfx_buf_free(void *p, size_t cap);          /* NULL is a no-op */
/* As tfx_buf_free, but straight back to malloc or the kernel, never to the cache. */
void tfx_buf_free_uncached(void *p, size_t cap);
/* A buffer of size bytes (0 allowed) that free() releases and realloc() may grow, or NULL:
 * big ones 2 MiB-aligned with huge pages advised, small ones plain malloc. */
void *tfx_buf_malloc(size_t size);
/* The memfd behind a large tfx_buf_alloc buffer p (borrowed, valid until tfx_buf_free), or -1
 * when p has none (small, or anonymous memory). */
int tfx_buf_fd(const void *p);
/* Makes p (a tfx_buf_alloc buffer of cap bytes) shareable with other processes for good: its
 * mapping turns read-only in place (same address) and its memfd is sealed against writes and
 * resizes (transports/shm.h); it will never be reused. Returns the memfd (borrowed, as
 * tfx_buf_fd's), or -1 when p has none. Idempotent. Nothing may write into p afterwards. */
int tfx_buf_seal(void *p, size_t cap);
/* 1 once tfx_buf_seal sealed p. */
int tfx_buf_sealed(const void *p);
/* Gives every cached buffer back to the kernel (at exit, or under memory pressure). */
void tfx_buf_trim(void);

#define TFX_BUF_CACHE_MAX ((size_t)512 << 20)
#define TFX_BUF_PRIVATE_CACHE_MAX ((size_t)256 << 20)   /* of it, anonymous buffers */

#endif
