/* routes.h - exchange routes: a name -> handler table behind POST /v1/call/{route} (and
 * Shumai's POST /{name}).
 *
 * A call carries the request's tensors (borrowed from the request body), who asked (user id,
 * request id) and the caller's per-user state slot for this route; the handler fills the
 * call's output document and status. Handlers either finish inside start (built-ins, plugins)
 * or later from another thread (worker routes), by calling tfd_call_finish.
 *
 * Threads: the table is read by every worker thread and changed when plugins load or unload
 * (start-up, SIGHUP) or workers come and go (rwlock). A call belongs to one request.
 */
#ifndef TFD_ROUTES_H
#define TFD_ROUTES_H

#include <stddef.h>
#include <stdint.h>
#include "proto/doc.h"

typedef struct tfd_call tfd_call_t;
typedef struct tfd_sessions tfd_sessions_t;

/* Returned by a route's start. */
enum { TFD_CALL_DONE = 0, TFD_CALL_PENDING = 1 };

typedef struct {
    /* Runs c. Returns TFD_CALL_DONE with c's status and outputs set, or TFD_CALL_PENDING
     * and calls tfd_call_finish(c) exactly once later, from any thread, unless cancelled
     * first. A route that can answer PENDING must have cancel. */
    int (*start)(void *arg, tfd_call_t *c);
    /* The caller's request is ending (its client went away, or it answered) after start
     * returned TFD_CALL_PENDING; called whether or not the call has finished. Once it
     * returns the route never touches c again (the caller frees it next), and a finish
     * racing it on another thread has either completed or will not happen. */
    void (*cancel)(void *arg, tfd_call_t *c);
    void *arg;
    const char *kind;               /* "builtin", "plugin", "worker": for /v1/info and logs */
    int stateless;                  /* no per-user session is opened for its calls */
    /* Optional (both or neither), for a route whose arg goes away while serving (a plugin
     * unloaded on SIGHUP): tfd_routes_find calls hold(arg) under the table's lock, and the
     * finder calls tfd_route_ops_release once it is done with the ops (start answered DONE,
     * or the pending call was finished or cancelled). Once the route is removed no new hold
     * can happen, so its owner frees arg when the holds it counted are all released. */
    void (*hold)(void *arg);
    void (*release)(void *arg);
} tfd_route_ops_t;

/* Lets go of ops found with tfd_routes_find (its release, if it has one). */
void tfd_route_ops_release(const tfd_route_ops_t *ops);

/* ---- calls --------------------------------------------------------------------------- */

struct tfd_call {
    const char *route;
    const char *user;               /* "" when the request carried no user id */
    const char *request_id;
    const tfp_doc_t *in;            /* borrowed: lives until the call is freed */
    const uint8_t *in_bytes;        /* the request's safetensors document, if it has one */
    size_t in_len;
    tfp_doc_t *out;                 /* outputs; tensors' data point into out_bufs or into in */
    tfp_status_t status;
    char msg[256];
    /* owned output buffers */
    void **out_bufs;
    size_t n_out_bufs, cap_out_bufs;
    uint8_t *adopted;               /* a tfx_buf handed over with tfd_call_adopt */
    size_t adopted_cap;
    /* per-user state (set by the server before start) */
    tfd_sessions_t *sessions;
    void *session;                  /* the caller's session, locked for the call */
    /* completion (set by the server) */
    void (*on_finish)(tfd_call_t *c, void *arg);
    void *on_finish_arg;
};

/* A new call; `in` must outlive it. NULL on allocation failure. */
tfd_call_t *tfd_call_new(const char *route, const char *user, const char *request_id,
                         const tfp_doc_t *in);
void tfd_call_free(tfd_call_t *c);

/* Adds an output tensor. TFD_OUT_COPY copies data into a buffer the call owns; TFD_OUT_REF
 * points at data that lives at least as long as the call (the call's inputs, or a buffer
 * given to tfd_call_keep). */
enum { TFD_OUT_COPY = 0, TFD_OUT_REF = 1 };
tfp_status_t tfd_call_output(tfd_call_t *c, const char *name, tfp_dtype_t dt, int rank,
                             const uint64_t *shape, const void *data, uint64_t nbytes,
                             int how);
/* Hands the call a tfx_buf (freed with the call) that outputs may reference. One per call. */
void tfd_call_adopt(tfd_call_t *c, uint8_t *base, size_t cap);
/* Allocates an output buffer the call owns (freed with the call). NULL on failure. */
void *tfd_call_alloc(tfd_call_t *c, size_t bytes);
/* Sets the call's error; printf-style. Returns code. */
tfp_status_t tfd_call_fail(tfd_call_t *c, tfp_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* For pending calls: reports completion (runs on_finish). */
void tfd_call_finish(tfd_call_t *c);

/* The caller's state for this route (NULL if none); valid during start. */
void *tfd_call_state(tfd_call_t *c);
/* Replaces the caller's state for this route; `bytes` counts against the session quotas;
 * destroy frees it (also called on the old state, on expiry and on eviction). Returns 0, or
 * -1 when over quota (then state is not kept and destroy(state) is called). */
int tfd_call_set_state(tfd_call_t *c, void *state, size_t bytes, void (*destroy)(void *));

/* ---- the route table ----------------------------------------------------------------- */

typedef struct tfd_routes tfd_routes_t;

tfd_routes_t *tfd_routes_new(void);
void tfd_routes_free(tfd_routes_t *rs);
/* Registers name (validated like tensor names). 0, -1 if taken, -2 invalid, -3 no memory. */
int tfd_routes_add(tfd_routes_t *rs, const char *name, const tfd_route_ops_t *ops);
/* Removes name if its ops.arg is arg. 0, or -1 if absent/not that owner. */
int tfd_routes_remove(tfd_routes_t *rs, const char *name, const void *arg);
/* Gives name new ops if its ops.arg is arg, in one step: a lookup sees either. 0, or -1 if
 * absent/not that owner. */
int tfd_routes_replace(tfd_routes_t *rs, const char *name, const void *arg,
                       const tfd_route_ops_t *ops);
/* Copies the ops for name into *ops and holds them (see hold): call tfd_route_ops_release
 * when done. 0, or -1 if there is no such route. */
int tfd_routes_find(tfd_routes_t *rs, const char *name, tfd_route_ops_t *ops);
/* Calls fn for each route (under the read lock). */
void tfd_routes_each(tfd_routes_t *rs, void (*fn)(const char *name, const tfd_route_ops_t *ops,
                                                 void *arg), void *arg);

/* Registers the built-in routes (echo, accumulate). */
int tfd_builtin_routes_add(tfd_routes_t *rs);

#endif
