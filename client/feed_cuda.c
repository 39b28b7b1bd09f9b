/* feed_cuda.c - the CUDA backend of a feed (feed.h), built with ./configure --with-cuda.
 *
 * Infeed: each received item is copied into pinned staging memory (cudaMallocHost), then
 * with cudaMemcpyAsync on the stream (the caller's, or one of the backend's own) into a
 * device buffer; an event recorded after the copy is the item's completion, polled by the
 * feed (cudaEventQuery), and a host function queued behind it (cudaLaunchHostFunc) wakes the
 * thread driving the client. The item's tensors then point into device memory. Outfeed: the
 * caller's device tensors are copied into pinned memory the same way, and the host copy is
 * sent once its event completed.
 *
 * Owns the stream (unless the caller gave one) and a pool of copy slots (pinned block,
 * device block, event), reused by size, freed at close. Every CUDA call is checked: with
 * cudart linked and no driver each returns cudaErrorInsufficientDriver (or
 * cudaErrorNoDevice without a GPU), which open turns into TF_ENOTIMPL, "no CUDA device",
 * so the feed can fall back to host. Called on the thread driving the client; the host
 * function runs on a CUDA thread and only wakes the client (tfi_wakeup, any thread).
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "client/feed.h"

#define ALIGN 256

typedef struct slot {
    struct slot *next;              /* the pool */
    void *pinned;
    void *dev;
    size_t cap;                     /* bytes of both blocks */
    cudaEvent_t ev;
    int ev_made;
} slot_t;

typedef struct {
    cudaStream_t stream;
    int own_stream;
    int device;
    slot_t *pool;
    void (*wake)(void *);
    void *wake_ud;
} cu_t;

static void CUDART_CB on_copied(void *ud)
{
    cu_t *cu = ud;
    if (cu->wake)
        cu->wake(cu->wake_ud);
}

static tf_status_t cu_fail(cudaError_t e, const char *what, char *why, size_t n)
{
    int nodev = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice;
    snprintf(why, n, "%s%s: %s (%s)", nodev ? "no CUDA device: " : "", what,
             cudaGetErrorName(e), cudaGetErrorString(e));
    return nodev ? TF_ENOTIMPL : TF_EIO;
}

static tf_status_t cu_open(const tfi_feed_env_t *env, void **state, char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return cu_fail(e, "cudaGetDeviceCount", why, n);
    if (count == 0)
        return cu_fail(cudaErrorNoDevice, "cudaGetDeviceCount", why, n);
    if (env->device < 0 || env->device >= count) {
        snprintf(why, n, "no CUDA device %d (%d present)", env->device, count);
        return TF_EINVAL;
    }
    if ((e = cudaSetDevice(env->device)) != cudaSuccess)
        return cu_fail(e, "cudaSetDevice", why, n);
    cu_t *cu = calloc(1, sizeof(*cu));
    if (!cu)
        return TF_ENOMEM;
    cu->device = env->device;
    cu->wake = env->wake;
    cu->wake_ud = env->wake_ud;
    if (env->stream) {
        cu->stream = (cudaStream_t)env->stream;
    } else {
        if ((e = cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking)) != cudaSuccess) {
            free(cu);
            return cu_fail(e, "cudaStreamCreateWithFlags", why, n);
        }
        cu->own_stream = 1;
    }
    *state = cu;
    return TF_OK;
}

static void slot_free(slot_t *s)
{
    if (s->ev_made)
        cudaEventDestroy(s->ev);
    if (s->pinned)
        cudaFreeHost(s->pinned);
    if (s->dev)
        cudaFree(s->dev);
    free(s);
}

static void cu_close(void *state)
{
    cu_t *cu = state;
    cudaStreamSynchronize(cu->stream);  /* every host function has run */
    while (cu->pool) {
        slot_t *s = cu->pool;
        cu->pool = s->next;
        slot_free(s);
    }
    if (cu->own_stream)
        cudaStreamDestroy(cu->stream);
    free(cu);
}

/* A slot of at least bytes, from the pool or new. */
static slot_t *slot_get(cu_t *cu, size_t bytes)
{
    for (slot_t **p = &cu->pool; *p; p = &(*p)->next) {
        if ((*p)->cap >= bytes) {
            slot_t *s = *p;
            *p = s->next;
            s->next = NULL;
            return s;
        }
    }
    slot_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    size_t cap = bytes ? bytes : ALIGN;
    if (cudaMallocHost(&s->pinned, cap) != cudaSuccess || cudaMalloc(&s->dev, cap) != cudaSuccess ||
        cudaEventCreateWithFlags(&s->ev, cudaEventDisableTiming) != cudaSuccess) {
        slot_free(s);
        return NULL;
    }
    s->ev_made = 1;
    s->cap = cap;
    return s;
}

static size_t layout(const tf_doc_t *d, size_t *off)
{
    size_t total = 0;
    for (size_t i = 0; i < tf_doc_count(d); i++) {
        off[i] = total;
        total += (tf_doc_at(d, i)->nbytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    return total;
}

/* Queues the completion: the event, and the wake-up behind it. */
static tf_status_t finish_copy(cu_t *cu, slot_t *s)
{
    if (cudaEventRecord(s->ev, cu->stream) != cudaSuccess)
        return TF_EIO;
    cudaLaunchHostFunc(cu->stream, on_copied, cu);
    return TF_OK;
}

static tf_status_t cu_in_start(void *state, tfi_copy_t *x)
{
    cu_t *cu = state;
    size_t n = tf_doc_count(x->host);
    size_t *off = calloc(n ? n : 1, sizeof(*off));
    void **data = calloc(n ? n : 1, sizeof(*data));
    slot_t *s = NULL;
    tf_status_t st = TF_ENOMEM;
    if (!off || !data)
        goto out;
    size_t total = layout(x->host, off);
    if (!(s = slot_get(cu, total)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        const tf_tensor_t *t = tf_doc_at(x->host, i);
        if (t->nbytes)
            memcpy((uint8_t *)s->pinned + off[i], t->data, t->nbytes);
        data[i] = (uint8_t *)s->dev + off[i];
    }
    st = TF_EIO;
    if (total && cudaMemcpyAsync(s->dev, s->pinned, total, cudaMemcpyHostToDevice, cu->stream) !=
                     cudaSuccess)
        goto out;
    if ((st = finish_copy(cu, s)) != TF_OK)
        goto out;
    if ((st = tfi_feed_doc_like(x->host, data, &x->dev)) != TF_OK)
        goto out;
    x->priv = s;
    s = NULL;
out:
    if (s) {
        cudaEventSynchronize(s->ev);
        s->next = cu->pool;
        cu->pool = s;
    }
    free(off);
    free(data);
    return st;
}

static tf_status_t cu_out_start(void *state, tfi_copy_t *x)
{
    cu_t *cu = state;
    size_t n = tf_doc_count(x->src);
    size_t *off = calloc(n ? n : 1, sizeof(*off));
    void **data = calloc(n ? n : 1, sizeof(*data));
    slot_t *s = NULL;
    tf_status_t st = TF_ENOMEM;
    if (!off || !data)
        goto out;
    size_t total = layout(x->src, off);
    if (!(s = slot_get(cu, total)))
        goto out;
    st = TF_EIO;
    for (size_t i = 0; i < n; i++) {
        const tf_tensor_t *t = tf_doc_at(x->src, i);
        data[i] = (uint8_t *)s->pinned + off[i];
        if (t->nbytes && cudaMemcpyAsync(data[i], t->data, t->nbytes, cudaMemcpyDeviceToHost,
                                         cu->stream) != cudaSuccess)
            goto out;
    }
    if ((st = finish_copy(cu, s)) != TF_OK)
        goto out;
    if ((st = tfi_feed_doc_like(x->src, data, &x->host)) != TF_OK)
        goto out;
    x->priv = s;
    s = NULL;
out:
    if (s) {
        cudaEventSynchronize(s->ev);
        s->next = cu->pool;
        cu->pool = s;
    }
    free(off);
    free(data);
    return st;
}

static int cu_ready(void *state, tfi_copy_t *x)
{
    slot_t *s = x->priv;
    if (!s)
        return 1;
    cudaError_t e = cudaEventQuery(s->ev);
    return e == cudaSuccess ? 1 : e == cudaErrorNotReady ? 0 : -1;
}

static void cu_release(void *state, tfi_copy_t *x)
{
    cu_t *cu = state;
    slot_t *s = x->priv;
    if (s) {
        cudaEventSynchronize(s->ev);    /* a slot is reused only once its copy is done */
        s->next = cu->pool;
        cu->pool = s;
    }
    x->priv = NULL;
    if (x->src) {
        tf_doc_free(x->host);
        x->host = NULL;
    } else {
        tf_doc_free(x->dev);
        x->dev = NULL;
    }
}

static const tfi_feed_backend_t cuda_backend = {
    .name = "cuda",
    .device_memory = 1,
    .open = cu_open,
    .close = cu_close,
    .in_start = cu_in_start,
    .out_start = cu_out_start,
    .ready = cu_ready,
    .release = cu_release,
};

const tfi_feed_backend_t *const tfi_feed_cuda = &cuda_backend;
