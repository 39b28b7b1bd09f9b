/* waiters.h - long-polling GETs (?wait=MS) that hold no thread while they wait.
 *
 * A GET for a missing name arms a waiter and suspends its HTTP request; a PUT of that name
 * wakes every waiter for it, and a timer thread wakes those whose deadline passed. Arming and
 * waking are ordered by one lock, and the presence check runs under it, so a PUT landing
 * between "not found" and "suspended" is never missed. Thread-safe; owns the timer thread.
 */
#ifndef TFD_WAITERS_H
#define TFD_WAITERS_H

#include <stdint.h>
#include "transports/req.h"

enum { TFD_WAIT_IDLE, TFD_WAIT_ARMED, TFD_WAIT_WOKEN, TFD_WAIT_EXPIRED, TFD_WAIT_SHUTDOWN };

typedef struct tfd_waiter {
    struct tfd_waiter *prev, *next;
    const char *name;               /* borrowed from the request context */
    tfx_req_t *req;
    uint64_t deadline_ms;           /* CLOCK_MONOTONIC */
    int state;                      /* TFD_WAIT_* */
} tfd_waiter_t;

typedef struct tfd_waiters tfd_waiters_t;

tfd_waiters_t *tfd_waiters_new(unsigned max_waiters);
/* A new max-waiters while serving (SIGHUP): waiters over it finish as they would; new ones
 * are refused until the count is under it. */
void tfd_waiters_set_max(tfd_waiters_t *ws, unsigned max_waiters);
void tfd_waiters_free(tfd_waiters_t *w);    /* after shutdown; joins the timer */

/* Arms w unless present(arg) says the name exists now (checked under the lock).
 * Returns 1 armed (suspend the request), 0 present, -1 too many waiters, -2 shutting down. */
int tfd_waiters_arm(tfd_waiters_t *ws, tfd_waiter_t *w, int (*present)(void *), void *arg);
/* Disarms w if still armed (the request ended). */
void tfd_waiters_disarm(tfd_waiters_t *ws, tfd_waiter_t *w);
/* Wakes every waiter for name. */
void tfd_waiters_notify(tfd_waiters_t *ws, const char *name);
/* Wakes every waiter with TFD_WAIT_SHUTDOWN; later arms return -2. */
void tfd_waiters_shutdown(tfd_waiters_t *ws);
unsigned tfd_waiters_count(tfd_waiters_t *ws);

#endif
