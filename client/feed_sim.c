/* feed_sim.c - the simulated device backend of a feed (feed.h): what the cuda backend does,
 * with host memory standing in for the device's and a thread standing in for its copy
 * engine, so that the feed's state machine (a copy started, its completion event polled,
 * the item handed out only then, released after) runs in CI without a GPU.
 *
 * Owns one copy thread and a FIFO of copy jobs (like a stream: in order). Each job sleeps a
 * latency (TFETCH_SIM_LATENCY_US, default 200 us) plus its bytes at TFETCH_SIM_GBPS
 * (default 12, a PCIe 4 x16 copy), then copies into a block of "device" memory (malloc'd) and
 * sets its completion flag (the event), then calls the feed's wake. The feed's thread starts
 * jobs and reads the flags; the copy thread runs the jobs; the mutex guards the FIFO, the
 * flags are atomics.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/feed.h"

#define ALIGN 64

typedef struct job {
    struct job *next;
    const tf_doc_t *from;           /* what is copied (tensor by tensor) */
    uint8_t *block;                 /* into this, tensor i at off[i] */
    size_t *off;
    size_t bytes;
    atomic_int done;                /* the event: 1 completed */
} job_t;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    job_t *head, *tail;
    int stop;
    long latency_us;
    double gbps;
    void (*wake)(void *);
    void *wake_ud;
} sim_t;

static void sleep_us(long us)
{
    if (us <= 0)
        return;
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void run_job(sim_t *s, job_t *j)
{
    sleep_us(s->latency_us + (long)((double)j->bytes / (s->gbps * 1e3)));
    for (size_t i = 0; i < tf_doc_count(j->from); i++) {
        const tf_tensor_t *t = tf_doc_at(j->from, i);
        if (t->nbytes)
            memcpy(j->block + j->off[i], t->data, t->nbytes);
    }
    atomic_store_explicit(&j->done, 1, memory_order_release);
    if (s->wake)
        s->wake(s->wake_ud);
}

static void *copy_thread(void *arg)
{
    sim_t *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head)
            break;                      /* stopped, nothing left */
        job_t *j = s->head;
        s->head = j->next;
        if (!s->head)
            s->tail = NULL;
        pthread_mutex_unlock(&s->mu);
        run_job(s, j);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static long env_long(const char *name, long def)
{
    const char *v = getenv(name);
    char *end;
    long x = v ? strtol(v, &end, 10) : def;
    return v && (*end || x < 0) ? def : x;
}

static tf_status_t sim_open(const tfi_feed_env_t *env, void **state, char *why, size_t n)
{
    sim_t *s = calloc(1, sizeof(*s));
    if (!s)
        return TF_ENOMEM;
    s->latency_us = env_long("TFETCH_SIM_LATENCY_US", 200);
    long gbps = env_long("TFETCH_SIM_GBPS", 12);
    s->gbps = gbps > 0 ? (double)gbps : 12.0;
    s->wake = env->wake;
    s->wake_ud = env->wake_ud;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, copy_thread, s) != 0) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return TF_ENOMEM;
    }
    *state = s;
    return TF_OK;
}

/* Finishes the jobs queued (the feed released their copies already, or waits for them),
 * then stops the thread. */
static void sim_close(void *state)
{
    sim_t *s = state;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static void job_free(job_t *j)
{
    if (!j)
        return;
    free(j->block);
    free(j->off);
    free(j);
}

/* A job copying from's tensors into a new block; *data[i] where tensor i lands. */
static job_t *job_new(const tf_doc_t *from, void ***data)
{
    size_t n = tf_doc_count(from);
    job_t *j = calloc(1, sizeof(*j));
    void **d = calloc(n ? n : 1, sizeof(*d));
    if (!j || !d || !(j->off = calloc(n ? n : 1, sizeof(*j->off))))
        goto fail;
    for (size_t i = 0; i < n; i++) {
        j->off[i] = j->bytes;
        j->bytes += (tf_doc_at(from, i)->nbytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    if (!(j->block = aligned_alloc(ALIGN, j->bytes ? j->bytes : ALIGN)))
        goto fail;
    for (size_t i = 0; i < n; i++)
        d[i] = j->block + j->off[i];
    j->from = from;
    atomic_init(&j->done, 0);
    *data = d;
    return j;

fail:
    free(d);
    job_free(j);
    return NULL;
}

static void enqueue(sim_t *s, job_t *j)
{
    pthread_mutex_lock(&s->mu);
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Starts a copy of from into a new "device" document *to. */
static tf_status_t start_copy(sim_t *s, tfi_copy_t *x, const tf_doc_t *from, tf_doc_t **to)
{
    void **data = NULL;
    job_t *j = job_new(from, &data);
    if (!j)
        return TF_ENOMEM;
    tf_status_t st = tfi_feed_doc_like(from, data, to);
    free(data);
    if (st != TF_OK) {
        job_free(j);
        return st;
    }
    x->priv = j;
    enqueue(s, j);
    return TF_OK;
}

static tf_status_t sim_in_start(void *state, tfi_copy_t *x)
{
    return start_copy(state, x, x->host, &x->dev);
}

static tf_status_t sim_out_start(void *state, tfi_copy_t *x)
{
    return start_copy(state, x, x->src, &x->host);
}

static int sim_ready(void *state, tfi_copy_t *x)
{
    job_t *j = x->priv;
    return !j || atomic_load_explicit(&j->done, memory_order_acquire);
}

/* The feed releases a copy only once it completed (or never started); a copy still queued
 * is waited for, as a device's would be. */
static void sim_release(void *state, tfi_copy_t *x)
{
    job_t *j = x->priv;
    while (j && !atomic_load_explicit(&j->done, memory_order_acquire))
        sleep_us(100);
    if (x->src) {
        tf_doc_free(x->host);
        x->host = NULL;
    } else {
        tf_doc_free(x->dev);
        x->dev = NULL;
    }
    job_free(j);
    x->priv = NULL;
}

const tfi_feed_backend_t tfi_feed_sim = {
    .name = "sim",
    .device_memory = 1,
    .open = sim_open,
    .close = sim_close,
    .in_start = sim_in_start,
    .out_start = sim_out_start,
    .ready = sim_ready,
    .release = sim_release,
};
