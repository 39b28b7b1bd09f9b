/* shm.h - tfetchd's same-host shared-memory transport (shm/memfd): the unix socket and its
 * thread, its one-time tokens, and the lending policy: leases on the memfds same-host
 * clients map, their bound, buffers lent for PUTs and for pushes, rings.
 *
 * POST /v1/upgrade from a same-host client that lists "shm" gets this socket's abstract
 * name and a one-time token (tfd_shm_token, from daemon/upgrade.c). The client connects and
 * presents it (HELLO). GET and COMMIT are operations like HTTP's and UCX's: each runs
 * through the router and the tensor handlers (transports/shm_server.h: tensor_get and
 * tensor_put, with authentication, rights, conditions, TTL and ETag decided there, and
 * counted in the metrics and the access log as transport "shm"). A GET's answer is the
 * document's sealed memfd (tfd_store_share) under a lease: the daemon keeps the answer's
 * hold (a reference to the blob), so the store counts its bytes (retired once replaced or
 * deleted) until the lease ends: RELEASE, the connection closing (the client exited or
 * died: the kernel closes it), or expiry (shm-lease-ms). Leased bytes are bounded
 * (shm-lease-memory): a GET over the bound is answered TF_EFULL and the client falls back
 * to copying transports. A PUT goes the other way: ALLOC lends the client a writable memfd
 * of the document's size (store bytes reserved for it), the client writes the document and
 * unmaps it, and COMMIT seals it and runs the PUT with it as its body, stored as it is; a
 * refused one leaves nothing stored. Messages are proto/shmframe.h's, moved by
 * transports/shm.h. With authentication on, the token is issued to the principal of the
 * upgrade request and carries its credential (as the UCX token does): the connection it
 * admits acts as that principal, checked per request by the router (tfd_router_check for
 * ALLOC, STAGE and RING), so a revoked token stops working at once.
 *
 * A feed's consumer on this host gets a ring (daemon/ring.h): TOKEN on an admitted
 * connection gives a token for a second one, whose first request is RING (consume on the
 * feed); that connection then carries only the ring's messages, and its slots count in the
 * lease bound.
 *
 * One thread of its own serves the socket (poll over the listener and every connection);
 * tfd_shm_token and tfd_shm_stats take a mutex and may come from any thread.
 */
#ifndef TFD_SHM_H
#define TFD_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/auth.h"
#include "daemon/feeds.h"
#include "daemon/shmpool.h"
#include "daemon/store.h"
#include "daemon/waiters.h"
#include "proto/shmframe.h"
#include "proto/upgrade.h"
#include "transports/req.h"

typedef struct tfd_shm tfd_shm_t;

typedef struct {
    uint64_t leases;                /* open now */
    uint64_t leased_bytes;          /* their documents' bytes */
    uint64_t expired;               /* leases ended by shm-lease-ms */
    uint64_t gets, refused;         /* GETs answered with a memfd; requests refused */
    uint64_t puts;                  /* documents stored from a lent memfd */
    uint64_t calls;                 /* exchanges (CALL) answered with a memfd */
    uint64_t connections;           /* open now */
    uint64_t rings;                 /* feeds' same-host rings open now */
    uint64_t ring_bytes;            /* the memory of their slots, and of closed rings' slots
                                     * that queued items still hold (in the lease bound) */
    uint64_t ring_items;            /* items copied into a ring's slot */
    uint64_t ring_lent;             /* bodies received straight into a ring's slot */
    uint64_t ring_in_place;         /* items sent from the slot they were received into */
    uint64_t ring_overflow;         /* items sent as a memfd of their own (over a slot, or
                                     * every slot taken) */
    uint64_t stagings;              /* staging buffers lent now (STAGE) */
    uint64_t staged_bytes;          /* their bytes (in the lease bound) */
    uint64_t staged_pushes;         /* pushes whose document was copied from one */
} tfd_shm_stats_t;

typedef struct tfd_stage tfd_stage_t;

/* Starts serving: NULL with why set when it cannot (no memfd, no socket, no thread). PUTs
 * wake the long-poll waiters of their name; documents above max_body are refused. The socket
 * is a fresh abstract name, or with socket_path the file there (mode 0660, group socket_gid,
 * -1: tfetchd's; unlinked by tfd_shm_free): who may connect is then the file's business. */
tfd_shm_t *tfd_shm_start(tfd_store_t *store, tfd_waiters_t *waiters, uint64_t max_body,
                         uint64_t lease_max_bytes, unsigned lease_ms, unsigned token_ttl_ms,
                         const char *socket_path, gid_t socket_gid, char *why,
                         size_t why_size);
/* Checks what it lends against auth (NULL or off: none; tfd_router_check); set before any
 * token is issued. */
void tfd_shm_set_auth(tfd_shm_t *s, tfd_auth_t *auth);
/* The handlers GET and COMMIT run through as operations (transports/shm_server.h): the
 * router's, as HTTP's and UCX's. Set before any token is issued. */
void tfd_shm_set_handlers(tfd_shm_t *s, const tfx_handlers_t *h);
/* A decoded GET, COMMIT or CALL q as the operation it asks for (tensor_get, tensor_put,
 * call): the name and conditions of its string, COMMIT's TTL, CALL's user and request id,
 * the safetensors body of q->a bytes (COMMIT, CALL), and who's credential (the
 * connection's; the router establishes the principal). What the socket's
 * thread runs through tfx_shm_call, and the request fuzzer too. */
void tfd_shm_op(const tfp_op_who_t *who, const tfp_sf_t *q, tfp_op_t *op);
/* Feeds whose device queues same-host consumers may attach rings to (daemon/ring.h);
 * without it RING is refused. Set before serving. */
void tfd_shm_set_feeds(tfd_shm_t *s, tfd_feeds_t *feeds);
/* ALLOC lends regions from pool (daemon/shmpool.h) where it has one ready. Set before
 * serving; the pool outlives s. */
void tfd_shm_set_pool(tfd_shm_t *s, tfd_shmpool_t *pool);
/* Whether the socket is a file (shm-socket), which other network namespaces may reach. */
int tfd_shm_is_file(const tfd_shm_t *s);
/* Any thread (a request's begin): a free slot of the ring attached to f's device queue dev,
 * for a body of len bytes to be received into (tfd_ring_lend): 0 with *buf, *cap and the
 * give-back; -1 when no ring is attached there or it has no slot to lend. */
int tfd_shm_lend(tfd_shm_t *s, const tfd_feed_t *f, unsigned dev, size_t len, uint8_t **buf,
                 size_t *cap, void (**give_back)(void *arg), void **arg);
/* Any thread (a request's handler): the document a staged body (ref) names, in a staging
 * buffer lent to principal ("" with authentication off): TFP_OK with *p pointing at its
 * ref->length bytes, readable until tfd_shm_staged_put(s, *held, copied) however the
 * client's connection fares; else TFP_ENOTFOUND (no such buffer for that principal: ids
 * are not to be probed) or TFP_EBADREQ (outside the buffer). The client may write the
 * buffer all along: copy it out once and check the copy, never the buffer. */
tfp_status_t tfd_shm_staged_get(tfd_shm_t *s, const char *principal,
                                const tfp_sf_staged_t *ref, const uint8_t **p,
                                tfd_stage_t **held, tfp_err_t *err);
/* copied: the document was taken (counted in staged_pushes). */
void tfd_shm_staged_put(tfd_shm_t *s, tfd_stage_t *g, int copied);
/* Any thread: some feed's pop events changed (the feeds' wake callback): rings look again.
 * s NULL, or no ring open: nothing (no system call). */
void tfd_shm_feed_wake(tfd_shm_t *s);
/* Issues a one-time token for the socket: writes the socket's name and the token. who: the
 * credential it is issued to (cred and token_hash; NULL with authentication off); owner:
 * whose quota it counts in (the principal, or with authentication off the client's
 * address). 0, -2 (owner over its quota) or -1 (too many pending in all). */
int tfd_shm_token(tfd_shm_t *s, char name[TFP_UP_MAX_SHM_SOCKET + 1],
                  char token[TFP_UP_TOKEN_LEN + 1], const tfp_op_who_t *who,
                  const char *owner);
/* Unused tokens one owner may hold at once (upgrade-tokens-per-client; 0: no limit). */
void tfd_shm_set_token_quota(tfd_shm_t *s, unsigned per_owner);
void tfd_shm_stats(tfd_shm_t *s, tfd_shm_stats_t *st);     /* s NULL: zeroes */
/* Stops the thread, closes every connection (ending their leases), frees. NULL: no-op. */
void tfd_shm_free(tfd_shm_t *s);

#endif
