/* router.h - tfetchd's endpoints: one table that maps each operation (proto/op.h) to its
 * metrics name, its body policy and its handlers, and the transports' handlers
 * (tfx_handlers_t) that run it for every request, whichever transport carried it.
 *
 * The router owns what spans a request: its context (ids, timing, body charges), the
 * server-made request ids, and the body memory held outside the store (body-memory).
 *
 * Threads: the handlers run on the transports' threads; new, free on the main thread.
 */
#ifndef TFD_ROUTER_H
#define TFD_ROUTER_H

#include <stdint.h>
#include "daemon/api.h"
#include "daemon/auth.h"
#include "transports/req.h"

typedef struct tfd_router tfd_router_t;

/* A router serving requests from api's parts (api must outlive it). NULL on no memory. */
tfd_router_t *tfd_router_new(const tfd_api_t *api);
/* After every transport has stopped. NULL is a no-op. */
void tfd_router_free(tfd_router_t *rt);
/* The handlers to start a transport with. */
tfx_handlers_t tfd_router_handlers(tfd_router_t *rt);
/* For what a transport lends outside an operation (daemon/shm.c: ALLOC, STAGE, RING, and
 * a ring at each fill): the one 401/403 decision, with the texts begin gives an operation.
 * who's credential is looked up again (a token revoked by SIGHUP fails now) and its
 * principal filled in; it must hold one of rights[0..nrights) on name (NULL: on some name).
 * TFP_OK (always with authentication off or a NULL a), else TFP_EUNAUTH or TFP_EFORBIDDEN
 * with msg, the failure counted. */
tfp_status_t tfd_router_check(tfd_auth_t *a, tfp_op_who_t *who, const tfp_right_t *rights,
                              size_t nrights, const char *name, char *msg, size_t msg_size);
/* Request body bytes held outside the store right now. */
uint64_t tfd_router_body_bytes(const tfd_router_t *rt);

#endif
