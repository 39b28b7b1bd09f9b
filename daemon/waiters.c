/* waiters.c - suspended long-poll GETs, woken by PUTs or by their deadline.
 *
 * Waiters sit on one doubly linked list under one mutex (notify scans it: fine for the bounded
 * count, max-waiters). The timer thread sleeps on a condition variable until the earliest
 * deadline and is signalled when an earlier one is armed. Waking = set state, unlink, resume
 * the request; the request's handler then reads the state. Thread-safe.
 */
#include "config.h"
#include "daemon/waiters.h"
#include "transports/clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct tfd_waiters {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t timer;
    tfd_waiter_t *head;
    unsigned count, max;
    int stopping;
};

static void unlink_waiter(tfd_waiters_t *ws, tfd_waiter_t *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        ws->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
    ws->count--;
}

/* Caller holds the lock. */
static void wake(tfd_waiters_t *ws, tfd_waiter_t *w, int state)
{
    unlink_waiter(ws, w);
    w->state = state;
    tfx_req_resume(w->req);
}

static void *timer_main(void *arg)
{
    tfd_waiters_t *ws = arg;
    pthread_mutex_lock(&ws->lock);
    while (!ws->stopping) {
        uint64_t now = tfx_now_ms(), next = UINT64_MAX;
        tfd_waiter_t *w = ws->head;
        while (w) {
            tfd_waiter_t *n = w->next;
            if (w->deadline_ms <= now)
                wake(ws, w, TFD_WAIT_EXPIRED);
            else if (w->deadline_ms < next)
                next = w->deadline_ms;
            w = n;
        }
        if (next == UINT64_MAX) {
            pthread_cond_wait(&ws->cond, &ws->lock);
        } else {
            /* the condition variable runs on CLOCK_MONOTONIC, tfx_now_ns's clock */
            uint64_t at = tfx_now_ns() + (next - now) * 1000000u;
            struct timespec ts = {(time_t)(at / 1000000000u), (long)(at % 1000000000u)};
            pthread_cond_timedwait(&ws->cond, &ws->lock, &ts);
        }
    }
    pthread_mutex_unlock(&ws->lock);
    return NULL;
}

void tfd_waiters_set_max(tfd_waiters_t *ws, unsigned max_waiters)
{
    pthread_mutex_lock(&ws->lock);
    ws->max = max_waiters;
    pthread_mutex_unlock(&ws->lock);
}

tfd_waiters_t *tfd_waiters_new(unsigned max_waiters)
{
    tfd_waiters_t *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ws->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&ws->lock, NULL);
    ws->max = max_waiters;
    if (pthread_create(&ws->timer, NULL, timer_main, ws) != 0) {
        pthread_cond_destroy(&ws->cond);
        pthread_mutex_destroy(&ws->lock);
        free(ws);
        return NULL;
    }
    return ws;
}

void tfd_waiters_free(tfd_waiters_t *ws)
{
    if (!ws)
        return;
    tfd_waiters_shutdown(ws);
    pthread_join(ws->timer, NULL);
    pthread_cond_destroy(&ws->cond);
    pthread_mutex_destroy(&ws->lock);
    free(ws);
}

int tfd_waiters_arm(tfd_waiters_t *ws, tfd_waiter_t *w, int (*present)(void *), void *arg)
{
    int rc;
    pthread_mutex_lock(&ws->lock);
    if (ws->stopping) {
        rc = -2;
    } else if (present(arg)) {
        rc = 0;
    } else if (ws->count >= ws->max) {
        rc = -1;
    } else {
        w->state = TFD_WAIT_ARMED;
        w->prev = NULL;
        w->next = ws->head;
        if (ws->head)
            ws->head->prev = w;
        ws->head = w;
        ws->count++;
        pthread_cond_signal(&ws->cond);        /* it may be the earliest deadline */
        rc = 1;
    }
    pthread_mutex_unlock(&ws->lock);
    return rc;
}

void tfd_waiters_disarm(tfd_waiters_t *ws, tfd_waiter_t *w)
{
    pthread_mutex_lock(&ws->lock);
    if (w->state == TFD_WAIT_ARMED) {
        unlink_waiter(ws, w);
        w->state = TFD_WAIT_IDLE;
    }
    pthread_mutex_unlock(&ws->lock);
}

void tfd_waiters_notify(tfd_waiters_t *ws, const char *name)
{
    pthread_mutex_lock(&ws->lock);
    tfd_waiter_t *w = ws->head;
    while (w) {
        tfd_waiter_t *n = w->next;
        if (strcmp(w->name, name) == 0)
            wake(ws, w, TFD_WAIT_WOKEN);
        w = n;
    }
    pthread_mutex_unlock(&ws->lock);
}

void tfd_waiters_shutdown(tfd_waiters_t *ws)
{
    pthread_mutex_lock(&ws->lock);
    ws->stopping = 1;
    while (ws->head)
        wake(ws, ws->head, TFD_WAIT_SHUTDOWN);
    pthread_cond_signal(&ws->cond);
    pthread_mutex_unlock(&ws->lock);
}

unsigned tfd_waiters_count(tfd_waiters_t *ws)
{
    pthread_mutex_lock(&ws->lock);
    unsigned n = ws->count;
    pthread_mutex_unlock(&ws->lock);
    return n;
}
