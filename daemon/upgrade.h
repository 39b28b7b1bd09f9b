/* upgrade.h - the UCX side of tfetchd: starting it, POST /v1/upgrade, and the one-time
 * tokens that admit a client's UCX endpoint.
 *
 * A token is 128 random bits, single-use, short-lived (upgrade-token-ttl) and bound to the
 * host identity (boot id + network namespace) the client declared when it asked; HELLO must
 * present both. With authentication on, the token is issued to the principal of the
 * upgrade request and carries its credential: the HELLO must prove it holds the same bearer
 * token (proto/auth.h, tfp_auth_hello_proof), and every request over that endpoint is then
 * authenticated and authorized with it exactly as over HTTP. Same-host clients get the UCX
 * worker address with every transport (shared memory, CMA); others get the network-only
 * address. Thread-safe.
 */
#ifndef TFD_UPGRADE_H
#define TFD_UPGRADE_H

#include <stdint.h>
#include "proto/netaddr.h"
#include "proto/protover.h"
#include "transports/req.h"

typedef struct tfd_upgrade tfd_upgrade_t;
struct tfd_config;

typedef struct {
    uint64_t issued, accepted, refused;     /* tokens; HELLOs */
    uint64_t dropped, requests;             /* UCX messages */
    uint64_t byes;                          /* UCX endpoints closed by a BYE */
    uint64_t prefixed;                      /* UCX requests sent with a body prefix */
    uint64_t bad_parts;                     /* PART frames out of place */
} tfd_upgrade_stats_t;

/* Starts UCX serving with handlers h, when built with UCX and enabled; request documents
 * above max_body are refused; tcp_ports ("LO-HI", or NULL/"": any) pins UCX's TCP listener;
 * a body in parts with no part for idle_s seconds is answered 408 (0: 60 s).
 * Never NULL on memory: when UCX is off or fails, tfd_upgrade_enabled says no and why. */
tfd_upgrade_t *tfd_upgrade_start(int enable, unsigned token_ttl_ms, uint64_t max_body,
                                 const char *tcp_ports, unsigned idle_s,
                                 const tfx_handlers_t *h);
int tfd_upgrade_enabled(tfd_upgrade_t *up, const char **why);
/* The protocol versions the server speaks, named in every answer to a client that named its
 * own (Tfetch-Protocol). Set once, before HTTP starts. */
void tfd_upgrade_set_protocol(tfd_upgrade_t *up, tfp_proto_range_t protocol);
/* The memory types the server's UCX can move, comma-separated ("host"; a CUDA-enabled UCX
 * adds "cuda", ...), or NULL when UCX is not running. */
const char *tfd_upgrade_memory_types(const tfd_upgrade_t *up);
/* HTTPS is on: UCX is not encrypted, so it is offered only to clients on this host (their
 * address one of this host's and their host identity ours) and to addresses in trusted
 * (ucx-trusted; text as given, for messages). Others are refused, the fallback saying why.
 * Call before HTTP starts. */
void tfd_upgrade_set_tls(tfd_upgrade_t *up, const tfp_netlist_t *trusted, const char *text);
/* Whether a client at peer (its address's text) is offered UCX: enabled, and (TLS on) a
 * client on this host or in ucx-trusted. For the Tfetch-Upgrade header. */
int tfd_upgrade_offered_to(tfd_upgrade_t *up, const char *peer);
/* ucx-trusted as given ("same-host" when not set) with TLS on; NULL with TLS off. */
const char *tfd_upgrade_trusted(const tfd_upgrade_t *up);
/* The same-host shm transport (daemon/shm.h) whose socket and tokens same-host clients that
 * list "shm" get with their UCX answer; NULL: none. Set before HTTP starts. */
struct tfd_shm;
void tfd_upgrade_set_shm(tfd_upgrade_t *up, struct tfd_shm *shm);
/* Unused one-time tokens one principal (with authentication off: one client address) may
 * hold at once, the UCX upgrade's and the shm socket's each (upgrade-tokens-per-client,
 * default 128; 0: no limit); over it an upgrade is answered 429 with Retry-After, for that
 * asker alone. Of 4096 in all. */
void tfd_upgrade_set_token_quota(tfd_upgrade_t *up, unsigned per_client);
/* POST /v1/upgrade (the body is complete). */
void tfd_upgrade_handle(tfd_upgrade_t *up, tfx_req_t *r);
void tfd_upgrade_quiesce(tfd_upgrade_t *up);
unsigned tfd_upgrade_inflight(tfd_upgrade_t *up);
void tfd_upgrade_stats(tfd_upgrade_t *up, tfd_upgrade_stats_t *st);
/* Stops UCX (after HTTP has stopped) and frees. NULL is a no-op. */
void tfd_upgrade_free(tfd_upgrade_t *up);

#endif
