/* feed.h - the device backends of a feed (feed.c): one table of functions per backend, as
 * the client's transports have (internal.h), so the feed's state machine is one code path
 * whatever the memory its items land in. feed_host.c (always), feed_sim.c (always: a thread
 * imitating a device's asynchronous copies and completion events) and feed_cuda.c (built
 * with --with-cuda; tfi_feed_cuda is NULL otherwise).
 *
 * A copy (tfi_copy_t) is one item moving between the host and where the computation reads
 * it: infeed, the received document (host memory) to the device; outfeed, the caller's
 * document (device memory) to the host, to be sent. A backend starts a copy, reports when it
 * completed (an event), and frees what it allocated for it. The feed calls a backend from
 * the thread driving the client only; a backend may own threads of its own (sim) or have the
 * device's (cuda) and then calls wake, from any thread, when a copy completes.
 */
#ifndef TF_CLIENT_FEED_H
#define TF_CLIENT_FEED_H

#include <stddef.h>

#include "client/internal.h"

typedef struct {
    tf_doc_t *host;                 /* infeed: the received item (the feed owns it);
                                     * outfeed: the host copy, the backend's (NULL: send the
                                     * caller's document itself) */
    const tf_doc_t *src;            /* outfeed: the caller's document (borrowed) */
    tf_doc_t *dev;                  /* infeed: what the caller reads, the backend's (NULL:
                                     * host itself) */
    void *priv;                     /* the backend's state for this copy */
} tfi_copy_t;

/* What a backend is told when it opens. */
typedef struct {
    void *stream;                   /* cuda: the caller's stream, or NULL */
    int device;                     /* cuda: the device ordinal */
    void (*wake)(void *ud);         /* a copy completed: any thread */
    void *wake_ud;
} tfi_feed_env_t;

typedef struct {
    const char *name;
    int device_memory;              /* items' tensors are in device memory */
    /* Opens the backend's state. TF_OK; TF_ENOTIMPL with why when there is no device; other
     * statuses with why. */
    tf_status_t (*open)(const tfi_feed_env_t *env, void **state, char *why, size_t why_size);
    void (*close)(void *state);
    /* Starts moving x->host into device memory, x->dev then describes it (before the copy
     * completed: do not read it until ready says so). */
    tf_status_t (*in_start)(void *state, tfi_copy_t *x);
    /* Starts moving x->src (device memory) into x->host. */
    tf_status_t (*out_start)(void *state, tfi_copy_t *x);
    /* 1 once x's copy completed, 0 while it runs, -1 when it failed. */
    int (*ready)(void *state, tfi_copy_t *x);
    /* Frees what the backend allocated for x (x->dev, x->priv, an outfeed's x->host) once
     * its copy completed or failed. */
    void (*release)(void *state, tfi_copy_t *x);
} tfi_feed_backend_t;

extern const tfi_feed_backend_t tfi_feed_host;
extern const tfi_feed_backend_t tfi_feed_sim;
extern const tfi_feed_backend_t *const tfi_feed_cuda;    /* NULL when built without CUDA */

/* For the device backends: a document of the same names, dtypes, shapes and metadata as
 * like, whose tensor i points at data[i] (borrowed). */
tf_status_t tfi_feed_doc_like(const tf_doc_t *like, void *const *data, tf_doc_t **out);

#endif
