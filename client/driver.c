/* driver.c - a client driven by a thread of its own (tf_driver_t), for event loops and
 * language bindings that can neither block nor run callbacks on a foreign thread.
 *
 * A driver owns one client and one thread. Other threads hand it requests (tf_driver_submit:
 * a job, its strings copied, queued under the lock, then tf_client_wakeup); the driver thread
 * starts them with tf_fetch_start, drives the client with tf_client_run and, in each
 * request's callback, moves the outcome into the job and the job onto the completion queue.
 * Callers take completions back with tf_driver_reap. When a completion arrives to an empty,
 * drained queue the driver calls the caller's notify function once (an event loop's
 * thread-safe wake-up), and not again until a reap finds the queue empty: one wake-up per
 * burst, nothing polled. tf_driver_wait is the same signal for callers with a thread to block.
 *
 * Owns: the client (freed when the thread stops, which cancels what is in flight), the jobs
 * (queued, running, or completed and not yet reaped) and the replies in them until reaped.
 * Threads: the driver thread alone touches the client, except tf_client_wakeup, which
 * callers make under the lock; the driver takes the client away under the same lock before
 * freeing it, so no wakeup can reach a freed client. Everything else is under the lock.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/internal.h"
#include "proto/strcopy.h"

#define INLINE_MS 1L                    /* tf_driver_submit drives an inline request so long */

/* One submitted request: queued, then running on the driver, then a completion. */
typedef struct job {
    struct job *next;
    tf_driver_t *d;
    tf_request_t rq;                /* its strings point at the copies below */
    char *url, *request_id, *user, *if_match, *if_none_match;
    uint64_t tag;
    tf_fetch_t *f;                  /* while it runs (the driver thread's) */
    tf_status_t status;
    tf_doc_t *doc;                  /* the reply, until reaped */
    tf_result_t result;
} job_t;

typedef struct {
    job_t *head, *tail;
} queue_t;

struct tf_driver {
    tf_client_t *c;                 /* NULL once the driver thread took it to free it */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;            /* the driver: jobs queued, or stopping */
    pthread_cond_t ready;           /* tf_driver_wait: a completion is waiting */
    queue_t queued;                 /* submitted, not started */
    queue_t done;                   /* completed, not reaped */
    size_t running;                 /* started, not completed (the driver thread's count) */
    int stopping;
    int driving;                    /* the driver thread uses the client (out of the lock) */
    int caller;                     /* a submitting thread drives the client (inline) */
    job_t *held;                    /* the inline request, completed, not queued yet */
    int notified;                   /* notify ran; not again until a reap finds done empty */
    tf_notify_fn notify;
    void *ud;
};

static void push(queue_t *q, job_t *j)
{
    j->next = NULL;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
}

static job_t *pop(queue_t *q)
{
    job_t *j = q->head;
    if (j) {
        q->head = j->next;
        if (!q->head)
            q->tail = NULL;
        j->next = NULL;
    }
    return j;
}

static void job_free(job_t *j)
{
    if (!j)
        return;
    tf_doc_free(j->doc);
    free(j->url);
    free(j->request_id);
    free(j->user);
    free(j->if_match);
    free(j->if_none_match);
    free(j);
}

/* ---- the driver thread ----------------------------------------------------------------- */

/* Queues j's outcome for the caller; calls notify when the caller had drained the queue. */
static void finish(tf_driver_t *d, job_t *j)
{
    pthread_mutex_lock(&d->mu);
    if (d->caller) {                    /* inline: queued by tf_driver_submit on return */
        d->held = j;
        pthread_mutex_unlock(&d->mu);
        return;
    }
    push(&d->done, j);
    int wake = d->notify && !d->notified && !d->stopping;
    if (wake)
        d->notified = 1;
    pthread_cond_broadcast(&d->ready);
    pthread_mutex_unlock(&d->mu);
    if (wake)
        d->notify(d->ud);
}

static void on_done(tf_fetch_t *f, tf_status_t status, tf_doc_t *doc, const tf_result_t *r,
                    void *ud)
{
    job_t *j = ud;
    tf_driver_t *d = j->d;
    tf_fetch_free(f);                   /* from its own callback: freed when this returns */
    j->f = NULL;
    j->status = status;
    j->result = *r;
    if (status == TF_OK)
        j->doc = doc;
    else
        tf_doc_free(doc);
    d->running--;
    finish(d, j);
}

/* A start the client refused (st): j completes at once with the client's reason. */
static void start_failed(tf_driver_t *d, job_t *j, tf_status_t st)
{
    d->running--;
    j->result = *tf_client_last(d->c);
    j->result.status = st;
    j->status = st;
    finish(d, j);
}

/* Starts j on the driver thread; a refusal completes it at once with the client's reason. */
static void start(tf_driver_t *d, job_t *j, int stopping)
{
    if (stopping) {
        j->status = tfi_rfail(&j->result, TF_ECANCELED, "the driver is stopping");
        finish(d, j);
        return;
    }
    d->running++;
    tf_status_t st = tf_fetch_start(d->c, &j->rq, on_done, j, &j->f);
    if (st != TF_OK)
        start_failed(d, j, st);
}

/* Starts j on the submitting thread, the driver being idle, and drives the client for up to
 * INLINE_MS waiting for it: a small request over shared memory or UCX completes within that
 * with no thread in between. What is still running then is the driver thread's. */
static void run_inline(tf_driver_t *d, job_t *j)
{
    d->running++;
    tf_status_t st = tfi_fetch_start_driven(d->c, &j->rq, on_done, j, &j->f);
    if (st != TF_OK) {
        start_failed(d, j, st);
        return;
    }
    tf_fetch_wait(j->f, INLINE_MS);
    /* A driven UCX request is sent by its wait: one whose wait never ran (the time went on
     * other work first) would never leave. Until it has been driven once, drive it. */
    while (j->f && j->f->via && j->f->via == d->c->up && j->f->treq && !j->f->drove)
        tf_fetch_wait(j->f, INLINE_MS);
}

static void *run(void *arg)
{
    tf_driver_t *d = arg;
    tf_client_t *c = d->c;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (d->caller || (!d->queued.head && !d->stopping && d->running == 0))
            pthread_cond_wait(&d->work, &d->mu);
        queue_t batch = d->queued;
        d->queued.head = d->queued.tail = NULL;
        int stopping = d->stopping;
        d->driving = 1;
        pthread_mutex_unlock(&d->mu);
        for (job_t *j = pop(&batch); j; j = pop(&batch))
            start(d, j, stopping);
        if (stopping)
            break;
        if (d->running > 0)
            tf_client_run(c, -1);       /* returns when all completed, or when woken */
        pthread_mutex_lock(&d->mu);
        d->driving = 0;
    }
    pthread_mutex_lock(&d->mu);         /* no tf_client_wakeup after this */
    d->c = NULL;
    pthread_mutex_unlock(&d->mu);
    tf_client_free(c);                  /* cancels what runs: their callbacks finish them */
    return NULL;
}

/* ---- callers ---------------------------------------------------------------------------- */

tf_status_t tf_driver_new(tf_client_t *c, tf_notify_fn notify, void *user_data,
                          tf_driver_t **out)
{
    if (!c || !out) {
        tf_client_free(c);
        return TF_EINVAL;
    }
    tf_driver_t *d = calloc(1, sizeof(*d));
    if (!d)
        goto free_client;
    d->c = c;
    d->notify = notify;
    d->ud = user_data;
    if (pthread_mutex_init(&d->mu, NULL) != 0)
        goto free_driver;
    if (pthread_cond_init(&d->work, NULL) != 0)
        goto destroy_mutex;
    if (pthread_cond_init(&d->ready, NULL) != 0)
        goto destroy_work;
    if (pthread_create(&d->thread, NULL, run, d) != 0) {
        pthread_cond_destroy(&d->ready);
        pthread_cond_destroy(&d->work);
        pthread_mutex_destroy(&d->mu);
        free(d);
        tf_client_free(c);
        return TF_EIO;
    }
    *out = d;
    return TF_OK;

destroy_work:
    pthread_cond_destroy(&d->work);
destroy_mutex:
    pthread_mutex_destroy(&d->mu);
free_driver:
    free(d);
free_client:
    tf_client_free(c);
    return TF_ENOMEM;
}

/* strdup of s, NULL staying NULL; *bad set when the copy failed. */
static char *copy(const char *s, int *bad)
{
    if (!s)
        return NULL;
    char *p = strdup(s);
    if (!p)
        *bad = 1;
    return p;
}

tf_status_t tf_driver_submit(tf_driver_t *d, const tf_request_t *rq, uint64_t tag,
                            unsigned flags)
{
    if (!d || !rq)
        return TF_EINVAL;
    job_t *j = calloc(1, sizeof(*j));
    if (!j)
        return TF_ENOMEM;
    /* The caller's struct may be shorter or longer than ours, as for tf_fetch_start. */
    if (tfi_struct_in(&j->rq, sizeof(j->rq), rq, rq->size, TFI_REQUEST_SIZE_0_1) != TF_OK) {
        free(j);
        return TF_EINVAL;
    }
    j->rq.size = sizeof(j->rq);
    int bad = 0;
    j->url = copy(j->rq.url, &bad);
    j->request_id = copy(j->rq.request_id, &bad);
    j->user = copy(j->rq.user, &bad);
    j->if_match = copy(j->rq.if_match, &bad);
    j->if_none_match = copy(j->rq.if_none_match, &bad);
    if (bad) {
        job_free(j);
        return TF_ENOMEM;
    }
    j->rq.url = j->url;
    j->rq.request_id = j->request_id;
    j->rq.user = j->user;
    j->rq.if_match = j->if_match;
    j->rq.if_none_match = j->if_none_match;
    j->d = d;
    j->tag = tag;
    pthread_mutex_lock(&d->mu);
    if (d->stopping || !d->c) {
        pthread_mutex_unlock(&d->mu);
        job_free(j);
        return TF_EINVAL;
    }
    if ((flags & TF_DRIVER_INLINE) && !d->driving && !d->caller && d->running == 0 &&
        !d->queued.head) {
        d->caller = 1;                  /* the driver thread keeps off the client */
        pthread_mutex_unlock(&d->mu);
        run_inline(d, j);
        pthread_mutex_lock(&d->mu);
        if (d->held) {
            push(&d->done, d->held);
            d->held = NULL;
            pthread_cond_broadcast(&d->ready);
        }
        d->caller = 0;
        if (d->running > 0 || d->queued.head || d->stopping)
            pthread_cond_signal(&d->work);
        pthread_mutex_unlock(&d->mu);
        return TF_OK;
    }
    /* The driver takes the whole queue at once: only the first of a batch wakes it. */
    int first = !d->queued.head;
    push(&d->queued, j);
    if (first) {
        pthread_cond_signal(&d->work);
        tf_client_wakeup(d->c);
    }
    pthread_mutex_unlock(&d->mu);
    return TF_OK;
}

tf_status_t tf_driver_reap(tf_driver_t *d, tf_completion_t *out)
{
    size_t n = out ? tfi_struct_out_size(out->size, sizeof(*out), TFI_COMPLETION_SIZE_0_1) : 0;
    if (!d || n == 0)
        return TF_EINVAL;
    pthread_mutex_lock(&d->mu);
    job_t *j = pop(&d->done);
    if (!j)
        d->notified = 0;
    pthread_mutex_unlock(&d->mu);
    if (!j)
        return TF_EAGAIN;
    tf_completion_t done = {.size = n, .tag = j->tag, .status = j->status, .doc = j->doc,
                            .result = j->result};
    memcpy(out, &done, n);
    j->doc = NULL;
    job_free(j);
    return TF_OK;
}

tf_status_t tf_driver_wait(tf_driver_t *d, long timeout_ms)
{
    if (!d)
        return TF_EINVAL;
    struct timespec until;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&d->mu);
    int timed_out = 0;
    while (!d->done.head && !timed_out) {
        if (timeout_ms < 0)
            pthread_cond_wait(&d->ready, &d->mu);
        else
            timed_out = pthread_cond_timedwait(&d->ready, &d->mu, &until) != 0;
    }
    tf_status_t st = d->done.head ? TF_OK : TF_EAGAIN;
    pthread_mutex_unlock(&d->mu);
    return st;
}

void tf_driver_free(tf_driver_t *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stopping = 1;
    pthread_cond_signal(&d->work);
    if (d->c)
        tf_client_wakeup(d->c);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    for (job_t *j = pop(&d->done); j; j = pop(&d->done))
        job_free(j);
    for (job_t *j = pop(&d->queued); j; j = pop(&d->queued))
        job_free(j);
    pthread_cond_destroy(&d->ready);
    pthread_cond_destroy(&d->work);
    pthread_mutex_destroy(&d->mu);
    free(d);
}
