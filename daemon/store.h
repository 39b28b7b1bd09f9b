/* store.h - the daemon's named-tensor store.
 *
 * Owns every stored document as a blob: the safetensors bytes (in one tfx_buf) and their
 * parsed index. Readers get a reference that keeps the bytes alive until released, so a GET can
 * stream a document while a PUT replaces the name: readers see the old or the new, never half.
 * Memory is accounted in payload bytes against a limit: stored documents (with the copies of
 * small ones made for same-host peers, tfd_store_share), replaced ones that readers still
 * hold, and reservations of uploads in progress (made before their bodies are read, so
 * concurrent PUTs cannot overcommit). Thread-safe.
 */
#ifndef TFD_STORE_H
#define TFD_STORE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "proto/doc.h"

typedef struct tfd_blob {
    atomic_int refs;
    uint8_t *base;                  /* tfx_buf holding the document */
    size_t cap;
    const uint8_t *data;            /* the safetensors bytes, inside base */
    size_t len;
    tfp_doc_t *doc;                 /* index; tensor data points into data */
    struct tfd_store *retired_in;   /* set once replaced/deleted: counted until freed */
    uint64_t version;               /* set when stored: unique in this store (the ETag) */
    uint64_t expires_ms;            /* tfx_now_ms() at which it stops existing; 0: never */
    int share_fd;                   /* tfd_blob_share's copy: its memfd, or -1 */
    void *share_p;                  /* and its read-only mapping (share_size bytes) */
    size_t share_size;
    size_t share_copy;              /* of it, bytes a share copied and the store counts */
    void (*give_back)(void *arg);   /* base is lent, not a tfx_buf (a feed ring's slot the
                                     * body was received into): this returns it; NULL: a
                                     * tfx_buf, freed with tfx_buf_free */
    void *give_back_arg;
    atomic_int sha_state;           /* sha256: 0 not computed, 1 being computed, 2 ready */
    uint8_t sha256[32];             /* of data[0..len): the stored representation's digest */
} tfd_blob_t;

/* The SHA-256 of b's document (Repr-Digest): computed at the first ask and kept for the
 * version's life (a PUT that carried a verified one sets it through tfd_blob_set_sha256).
 * Any thread; two first asks at once may both compute it. */
void tfd_blob_sha256(tfd_blob_t *b, uint8_t out[32]);
void tfd_blob_set_sha256(tfd_blob_t *b, const uint8_t sha256[32]);

/* Wraps a received buffer: the document is len bytes at data (inside base). Takes ownership
 * of base and doc (also on failure). NULL on allocation failure. */
tfd_blob_t *tfd_blob_new(uint8_t *base, size_t cap, const uint8_t *data, size_t len,
                         tfp_doc_t *doc);
/* The same for a lent base (give_back(arg) returns it when the blob is freed, or at once on
 * failure, instead of tfx_buf_free). */
tfd_blob_t *tfd_blob_new_lent(uint8_t *base, size_t cap, const uint8_t *data, size_t len,
                              tfp_doc_t *doc, void (*give_back)(void *arg), void *arg);
/* A blob holding a copy of len bytes at data; indexed: they are a safetensors document (with
 * the decoder's default limits), indexed again. NULL and *err on failure. */
tfd_blob_t *tfd_blob_copy(const uint8_t *data, size_t len, int indexed, tfp_err_t *err);
tfd_blob_t *tfd_blob_ref(tfd_blob_t *b);
void tfd_blob_unref(tfd_blob_t *b);         /* NULL is a no-op; frees on the last ref */
void tfd_blob_release(void *b);             /* tfd_blob_unref for release callbacks */
/* The blob's bytes as a sealed memfd, to hand to a same-host peer (transports/shm.h): *fd
 * (borrowed: lives as long as the blob), the document at *offset in it, *size the memfd's
 * size. A document put over shm is its own memfd already. A large one received over HTTP or
 * UCX lives in anonymous memory (huge pages, for UCX GETs) and moves into a memfd of its own
 * at its first share (tfx_buf_seal: one copy, a chunk at a time, at the same address; its
 * memory still counted once), none after; a small one is copied once into a new sealed memfd
 * kept with the blob. Either way its bytes never change while the blob or any mapping of it
 * lives: a replace stores a new blob, and the old one's memfd goes with its last reference.
 * 0, or -1 (out of memory or descriptors). Thread-safe. */
int tfd_blob_share(tfd_blob_t *b, int *fd, size_t *offset, size_t *size);

typedef struct tfd_store tfd_store_t;

tfd_store_t *tfd_store_new(uint64_t max_bytes);
void tfd_store_free(tfd_store_t *s);

/* A new reference to the blob stored under name, or NULL. */
tfd_blob_t *tfd_store_get(tfd_store_t *s, const char *name);
/* tfd_blob_share for a blob got from s: the copy a small document needs is reserved first
 * (evicting as tfd_store_reserve does) and then counted with the document, in the store's
 * bytes or as retired, until the blob goes, so the same-host peers of a store full of small
 * documents cannot double its memory. -2 when that copy would exceed the limit. */
int tfd_store_share(tfd_store_t *s, tfd_blob_t *b, int *fd, size_t *offset, size_t *size);
/* Reserves bytes for an upload. The document it may replace is not counted as freed: both
 * live while the upload runs, and the old one until its last reader lets go. 0, or -1 if
 * the store would exceed its limit. */
int tfd_store_reserve(tfd_store_t *s, uint64_t bytes);
void tfd_store_unreserve(tfd_store_t *s, uint64_t bytes);
/* Reserves bytes for memory kept spare (ready ahead of need, daemon/shmpool.h): only if
 * they fit as the store stands, never evicting. 0, or -1. */
int tfd_store_reserve_spare(tfd_store_t *s, uint64_t bytes);
/* Gives back bytes of spare reservation, to_reserved of them (at most bytes) becoming an
 * upload's reservation (tfd_store_reserve's) in the same step. */
void tfd_store_unreserve_spare(tfd_store_t *s, uint64_t bytes, uint64_t to_reserved);
/* A reservation that does not fit first calls reclaim(arg) (outside the store's lock),
 * which gives spare reservations back, then tries again (and evicts, under lru). */
void tfd_store_set_reclaim(tfd_store_t *s, void (*reclaim)(void *), void *arg);
/* Stores blob under name (taking the caller's reference), releasing `reserved` bytes of
 * reservation. Returns 1 if it replaced a document, 0 if new, -1 if over the limit (then the
 * blob is not stored and the caller keeps its reference) or out of memory. */
int tfd_store_put(tfd_store_t *s, const char *name, tfd_blob_t *blob, uint64_t reserved);
/* 0, or -1 if absent. */
int tfd_store_delete(tfd_store_t *s, const char *name);

/* A precondition on the document stored under a name, checked under the store's lock with
 * the change it guards, so a conditional PUT is a compare-and-swap. */
typedef struct {
    int absent;                     /* only if there is none (If-None-Match: *) */
    int present;                    /* only if there is one (If-Match: *) */
    const uint64_t *versions;       /* only if it is one of these n versions (If-Match) */
    size_t n;
    const uint64_t *not_versions;   /* only if it is none of these n_not (If-None-Match) */
    size_t n_not;
} tfd_store_cond_t;
/* tfd_store_put and tfd_store_delete under a condition (NULL: none): -2 when it does not
 * hold (nothing changed; put: the caller keeps its reference and its reservation is
 * released). put_if sets *version (NULL: not wanted) to the stored document's version. */
int tfd_store_put_if(tfd_store_t *s, const char *name, tfd_blob_t *blob, uint64_t reserved,
                     const tfd_store_cond_t *cond, uint64_t *version);
int tfd_store_delete_if(tfd_store_t *s, const char *name, const tfd_store_cond_t *cond);
/* Opt-in: when a reservation does not fit, drop the least recently used documents that no
 * reader holds (their memory comes back at once) until it does, rather than refuse it. */
void tfd_store_set_evict_lru(tfd_store_t *s, int on);
/* A new limit (SIGHUP): later reservations are checked against it; nothing stored is dropped
 * for it. And the limit in force. */
void tfd_store_set_max(tfd_store_t *s, uint64_t max_bytes);
uint64_t tfd_store_max(tfd_store_t *s);
/* Drops every document whose TTL ran out (the main thread's tick; reads already treat them
 * as absent). Returns how many. */
unsigned tfd_store_sweep(tfd_store_t *s);

/* The store's epoch: random, new at every start; with a blob's version it makes its ETag. */
uint64_t tfd_store_epoch(const tfd_store_t *s);

/* Calls fn for each stored document in name order, under the store's lock (fn must not call
 * back into the store). */
void tfd_store_each(tfd_store_t *s, void (*fn)(const char *name, const tfd_blob_t *b, void *arg),
                    void *arg);
typedef struct {
    uint64_t count;                 /* documents stored */
    uint64_t bytes;                 /* their bytes */
    uint64_t retired;               /* replaced or deleted documents still being read */
    uint64_t reserved;              /* uploads in progress */
    uint64_t max_bytes;
    uint64_t evictions;             /* documents dropped to make room (evict lru) */
    uint64_t expirations;           /* documents dropped when their TTL ran out */
} tfd_store_stats_t;
void tfd_store_stats(tfd_store_t *s, tfd_store_stats_t *st);

#endif
