/* workers.h - routes served by other processes (the C form of Shumai's `serve`).
 *
 * A worker registers the routes it serves (POST /v1/workers) and gets an id and a secret,
 * then long-polls for calls
 * (GET /v1/workers/{id}/next) and posts each answer back (POST /v1/workers/{id}/calls/{call}).
 * A call to one of its routes is queued for it and the caller waits (no thread held). Every
 * poll and reply renews the worker's lease; a worker whose lease runs out (it died, hung, or
 * was cut off) is dropped: its routes go away and every call queued for it or in its hands
 * fails at once with 503, so callers never hang. Thread-safe; the lease clock is driven by
 * tfd_workers_tick from the main loop.
 */
#ifndef TFD_WORKERS_H
#define TFD_WORKERS_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/routes.h"
#include "proto/ids.h"
#include "transports/req.h"

typedef struct tfd_workers tfd_workers_t;

#define TFD_WORKER_ID_SIZE 40      /* "w" + 32 hex digits (128 random bits) + NUL */
#define TFD_WORKER_SECRET_SIZE (TFP_WORKER_SECRET_LEN + 1)
#define TFD_CALL_ID_SIZE 24

enum { TFD_POLL_IDLE, TFD_POLL_ARMED, TFD_POLL_GOT, TFD_POLL_EMPTY, TFD_POLL_GONE };

/* One long-poll by a worker; lives in the polling request's context. */
typedef struct tfd_worker_poll {
    struct tfd_worker_poll *next;
    tfx_req_t *req;
    int state;                      /* TFD_POLL_* */
    uint64_t deadline_ms;
    /* the call handed out (state GOT) */
    char call_id[TFD_CALL_ID_SIZE];
    char route[256];
    char user[129];
    char request_id[129];
    uint8_t *body;                  /* malloc'd copy of the call's input document */
    size_t len;
} tfd_worker_poll_t;

typedef struct {
    unsigned lease_ms;              /* how long a worker may go without polling or replying */
    unsigned max_workers;
    unsigned max_queue;             /* calls waiting per worker */
} tfd_workers_limits_t;

tfd_workers_t *tfd_workers_new(tfd_routes_t *routes, const tfd_workers_limits_t *lim);
void tfd_workers_free(tfd_workers_t *ws);

/* Registers a worker serving routes[0..n). Fills id and secret (random, unguessable: the
 * secret goes only to the worker). 0, or a status with err set (TFP_EUNPROC: a route is
 * taken or invalid; TFP_EBUSY: too many workers; TFP_EINTERNAL: no randomness). */
tfp_status_t tfd_workers_register(tfd_workers_t *ws, const char *const *routes, size_t n,
                                  char id[TFD_WORKER_ID_SIZE],
                                  char secret[TFD_WORKER_SECRET_SIZE], tfp_err_t *err);
/* Binds worker id to the principal that registered it (authentication on; "" or NULL: to
 * none). tfd_workers_owned_by_other: 1 if id names a worker bound to a principal other than
 * principal, else 0 (unknown ids too: the calls below say so). */
void tfd_workers_set_owner(tfd_workers_t *ws, const char *id, const char *principal);
int tfd_workers_owned_by_other(tfd_workers_t *ws, const char *id, const char *principal);

/* The calls below act for worker id only when secret is its own (compared in constant
 * time); they return -1 for an unknown id and -2 for a wrong or missing ("") secret. */

/* Drops a worker now (its calls fail with 503). 0, -1 or -2. */
int tfd_workers_unregister(tfd_workers_t *ws, const char *id, const char *secret);

/* Starts or continues a poll: hands out the next queued call (state GOT, returns 1), or arms
 * the poll (returns 0: suspend the request; it is resumed when a call arrives or the
 * deadline passes, state GOT/EMPTY), or -1 for an unknown worker (state GONE), -2 for a
 * wrong secret (state unchanged). */
int tfd_workers_poll(tfd_workers_t *ws, const char *id, const char *secret,
                     tfd_worker_poll_t *p);
/* The polling request ended: disarms it; frees p->body. */
void tfd_workers_poll_done(tfd_workers_t *ws, tfd_worker_poll_t *p);

/* Delivers a worker's answer. On success (st == TFP_OK) the call's outputs become doc's
 * tensors, whose bytes live in base (a tfx_buf of cap bytes): ownership of doc and base
 * passes to the workers module in every case. 0, -1 if the worker or call is unknown, or
 * -2 (wrong secret). */
int tfd_workers_reply(tfd_workers_t *ws, const char *id, const char *secret,
                      const char *call_id, tfp_status_t st, const char *msg, tfp_doc_t *doc,
                      uint8_t *base, size_t cap);

/* Expires leases and poll deadlines; call a few times a second. */
void tfd_workers_tick(tfd_workers_t *ws);
/* Fails every call and wakes every poll (the daemon is stopping). */
void tfd_workers_shutdown(tfd_workers_t *ws);
unsigned tfd_workers_count(tfd_workers_t *ws);

#endif
