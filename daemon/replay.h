/* replay.h - idempotent retries of exchange calls.
 *
 * A call that carries a client-chosen Tfetch-Request-Id is remembered under (user id, request
 * id) for a bounded window (time, count, bytes): a retry with the same id gets the first
 * answer back instead of running the route again, and a retry that arrives while the first is
 * still running waits for it. Reusing an id for a different route, or with a different body
 * (each entry keeps a keyed digest of the body it was first sent with), is refused. The oldest
 * answers are forgotten first when a bound is reached. Thread-safe.
 */
#ifndef TFD_REPLAY_H
#define TFD_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/store.h"
#include "transports/req.h"

typedef struct tfd_replay tfd_replay_t;

typedef struct {
    unsigned window_s;
    unsigned max_entries;
    uint64_t max_bytes;
} tfd_replay_limits_t;

/* A remembered answer: a body, or a failure (code and message). */
typedef struct {
    unsigned status;                /* HTTP-equivalent */
    char content_type[48];
    tfd_blob_t *body;               /* a reference: release with tfd_blob_unref; NULL on failure */
    tfp_status_t code;              /* TFP_OK, or the failure */
    char msg[256];                  /* the failure's message */
    int is_request;                 /* the body was the request's own bytes (an echo): the
                                     * window keeps none of it (a 16 MiB echo held 16 MiB of
                                     * the daemon's memory for the window's length), and a
                                     * retry, whose body has the same digest, is answered
                                     * with its own; tfd_replay_begin then gives body NULL */
} tfd_replay_answer_t;

enum { TFD_REPLAY_NEW, TFD_REPLAY_DONE, TFD_REPLAY_WAIT, TFD_REPLAY_CONFLICT, TFD_REPLAY_FULL,
       TFD_REPLAY_MISMATCH };

tfd_replay_t *tfd_replay_new(const tfd_replay_limits_t *lim);
/* New limits while serving (SIGHUP): finished answers beyond them are forgotten now. */
void tfd_replay_set_limits(tfd_replay_t *r, const tfd_replay_limits_t *lim);
void tfd_replay_free(tfd_replay_t *r);

/* The digest of a call's body that begin compares: tfp_bodyhash under the window's secret
 * key, so a client cannot aim two bodies at one digest (SipHash-1-3 over every byte took
 * 10-16 ms of a 16 MiB call's 20-30 ms on our machines; this takes a few). */
uint64_t tfd_replay_digest(const tfd_replay_t *r, const void *body, size_t len);
/* Looks up (user, id) for route and the body's digest:
 *   TFD_REPLAY_NEW       not seen: the caller runs the call, then tfd_replay_complete (or
 *                        tfd_replay_abandon if it gave no answer to remember);
 *   TFD_REPLAY_DONE      *ans holds the first answer (a new reference);
 *   TFD_REPLAY_WAIT      the first is still running: req will be resumed when it completes
 *                        (suspend it and look up again then);
 *   TFD_REPLAY_CONFLICT  the id was used for another route;
 *   TFD_REPLAY_MISMATCH  the id was used with another body (digest) for this route;
 *   TFD_REPLAY_FULL      too many calls running with ids to remember: run without. */
int tfd_replay_begin(tfd_replay_t *r, const char *user, const char *id, const char *route,
                     uint64_t digest, tfx_req_t *req, tfd_replay_answer_t *ans);
/* Remembers the answer (copied; takes a new reference to its body) and wakes waiting
 * retries. route is begin's. */
void tfd_replay_complete(tfd_replay_t *r, const char *user, const char *id, const char *route,
                         const tfd_replay_answer_t *ans);
void tfd_replay_abandon(tfd_replay_t *r, const char *user, const char *id);
/* A suspended waiter went away (its request ended): forget it. */
void tfd_replay_forget_waiter(tfd_replay_t *r, tfx_req_t *req);
/* Forgets answers older than the window. */
void tfd_replay_sweep(tfd_replay_t *r);
/* Wakes every waiter (shutdown). */
void tfd_replay_wake_all(tfd_replay_t *r);
void tfd_replay_stats(tfd_replay_t *r, uint64_t *entries, uint64_t *bytes, uint64_t *hits);

#endif
