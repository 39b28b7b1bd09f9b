/* upgrade.h - the JSON of POST /v1/upgrade (transport negotiation), the host identity it
 * carries, and the base64 used for the server's UCX worker address.
 *
 * The client builds a request naming the transports it has, its host identity (boot_id,
 * network namespace, pid: same-host peers are recognised by equal boot_id and netns) and its
 * policy; the server parses it and answers either with how to connect over UCX (a one-time
 * token, its lifetime, the worker address in base64, whether the peers share a host, the
 * server's pid) or with a refusal that keeps the client on HTTP and says why. Every parser is
 * strict: RFC 8259 JSON (proto/jsonread.h), no unknown or duplicate keys, every member of the
 * right type and within bounds; a rejection returns TFP_EPROTO (TFP_ETOOBIG for an oversize
 * body, TFP_ENOMEM) with a message naming the member. Builders refuse the same invalid values
 * with TFP_EINVAL. Pure functions, no I/O (reading this process's identity lives in
 * transports/hostid.h); any thread.
 */
#ifndef TFP_UPGRADE_H
#define TFP_UPGRADE_H

#include <stddef.h>
#include <stdint.h>
#include "proto/base64.h"
#include "proto/protover.h"
#include "proto/status.h"

#define TFP_UP_BOOT_ID_LEN 36               /* 8-4-4-4-12 lowercase hex */
#define TFP_UP_MAX_NETNS 32                 /* "net:[N]", N decimal, at most 20 digits */
#define TFP_UP_MAX_PID INT32_MAX            /* pids are 1..TFP_UP_MAX_PID */
#define TFP_UP_TOKEN_LEN 32                 /* lowercase hex */
#define TFP_UP_MAX_EXPIRES_MS 600000        /* tokens live 1 ms .. 10 min */
#define TFP_UP_MAX_ADDR 65536               /* decoded worker address bytes, 1..this */
#define TFP_UP_MAX_REASON 512               /* bytes of a refusal's reason, UTF-8 */
#define TFP_UP_MAX_SHM_SOCKET 96            /* an abstract socket name, [A-Za-z0-9._-], or an
                                             * absolute path of those and / */
#define TFP_UP_MAX_REQ_JSON 4096            /* largest request body a parser takes */
#define TFP_UP_MAX_RESP_JSON (128 * 1024)   /* largest response body a parser takes */
/* The HELLO identity "boot_id netns" (proto/ucxframe.h): at most this many bytes. */
#define TFP_UP_MAX_IDENT (TFP_UP_BOOT_ID_LEN + 1 + TFP_UP_MAX_NETNS)

/* ---- host identity ------------------------------------------------------------------- */

typedef struct {
    char boot_id[TFP_UP_BOOT_ID_LEN + 1];   /* /proc/sys/kernel/random/boot_id, no newline */
    char netns[TFP_UP_MAX_NETNS + 1];       /* readlink /proc/self/ns/net: "net:[4026531840]" */
    int64_t pid;                            /* 1..TFP_UP_MAX_PID */
} tfp_up_host_t;

/* 1 if valid, 0 if not (NULL is invalid). A boot id is exactly 36 characters: lowercase hex
 * in groups of 8-4-4-4-12 joined by '-'. A netns is "net:[" 1..20 decimal digits "]". */
int tfp_up_boot_id_valid(const char *s);
int tfp_up_netns_valid(const char *s);
/* 1 if the token is exactly TFP_UP_TOKEN_LEN lowercase hex characters. */
int tfp_up_token_valid(const char *s);
/* Checks all three fields of a host identity; TFP_EINVAL naming the bad one. */
tfp_status_t tfp_up_host_check(const tfp_up_host_t *h, tfp_err_t *err);
/* 1 if both identities name the same kernel and network namespace (pids may differ). */
int tfp_up_host_same(const tfp_up_host_t *a, const tfp_up_host_t *b);
/* The same kernel (boot ids), whatever the network namespaces: memory and descriptors can
 * be shared through a socket file both can open (a container beside tfetchd's, with the
 * socket's directory mounted), though not through an abstract socket. */
int tfp_up_host_same_kernel(const tfp_up_host_t *a, const tfp_up_host_t *b);

/* The identity a UCX HELLO carries in its msg: "boot_id netns" (one space; no pid).
 * tfp_up_ident_format writes it NUL-terminated into buf (size >= TFP_UP_MAX_IDENT + 1),
 * TFP_EINVAL if the identity is invalid or buf too small. tfp_up_ident_parse reads s[0..n)
 * into out->boot_id and out->netns (out->pid set to 0), TFP_EPROTO naming the bad part; out
 * is written only on success. */
tfp_status_t tfp_up_ident_format(const tfp_up_host_t *h, char *buf, size_t size,
                                 tfp_err_t *err);
tfp_status_t tfp_up_ident_parse(const char *s, size_t n, tfp_up_host_t *out, tfp_err_t *err);

/* ---- request ------------------------------------------------------------------------- */

#define TFP_UP_T_UCX 0x1u                   /* "ucx" */
#define TFP_UP_T_SHM 0x2u                   /* "shm": same-host shared memory (shmframe.h) */
#define TFP_UP_T_ALL (TFP_UP_T_UCX | TFP_UP_T_SHM)

typedef enum {
    TFP_UP_POLICY_AUTO = 0,                 /* "auto": upgrade if possible, else HTTP */
    TFP_UP_POLICY_UCX = 1                   /* "ucx": strict, fail rather than fall back */
} tfp_up_policy_t;

typedef struct {
    unsigned transports;                    /* TFP_UP_T_* bits, at least one */
    tfp_up_host_t host;
    tfp_up_policy_t policy;
} tfp_up_req_t;

/* {"transports": ["ucx"], "host": {"boot_id": ..., "netns": ..., "pid": N},
 *  "policy": "auto"|"ucx"}. build: *json is malloc'd, NUL-terminated, *len (if not NULL) its
 * length; TFP_EINVAL for an invalid field, TFP_ENOMEM. parse: every member required, no
 * others; "transports" is 1..8 distinct known names; at most TFP_UP_MAX_REQ_JSON bytes
 * (JSON whitespace may follow the object). *out is written only on success. */
tfp_status_t tfp_up_req_build(const tfp_up_req_t *req, char **json, size_t *len,
                              tfp_err_t *err);
tfp_status_t tfp_up_req_parse(const char *body, size_t len, tfp_up_req_t *out,
                              tfp_err_t *err);

/* ---- response ------------------------------------------------------------------------ */

typedef struct {
    int upgraded;                           /* 1: "transport": "ucx"; 0: refusal, "http" */
    /* when upgraded */
    char token[TFP_UP_TOKEN_LEN + 1];
    uint64_t expires_ms;                    /* 1..TFP_UP_MAX_EXPIRES_MS */
    uint8_t *worker_address;                /* 1..TFP_UP_MAX_ADDR bytes: borrowed by build,
                                             * malloc'd by parse (tfp_up_resp_clear frees) */
    size_t worker_address_len;
    int same_host;                          /* 0 or 1 */
    int64_t server_pid;                     /* 1..TFP_UP_MAX_PID */
    /* when upgraded, optional: the same-host shm transport; "" when not offered */
    char shm_socket[TFP_UP_MAX_SHM_SOCKET + 1];     /* abstract unix socket name */
    char shm_token[TFP_UP_TOKEN_LEN + 1];   /* its one-time token (HELLO) */
    /* when refused */
    char reason[TFP_UP_MAX_REASON + 1];     /* 1..TFP_UP_MAX_REASON bytes of UTF-8 */
    /* either way, optional: the protocol versions the server speaks (protover.h); {0, 0}
     * when not named (a version-1 server, or a client that did not name its own) */
    tfp_proto_range_t protocol;
} tfp_up_resp_t;

/* Success: {"transport": "ucx", "token": ..., "expires_ms": N, "worker_address": "<base64>",
 * "same_host": bool, "server_pid": N[, "shm_socket": NAME, "shm_token": HEX]}; refusal:
 * {"transport": "http", "reason": "..."}. The shm members come together or not at all, only
 * with same_host true (or, for a socket file, to another network namespace of the same
 * kernel), and only to a client whose request listed "shm" (an older client's
 * strict parser would refuse them). Either kind may carry "protocol": {"min": N, "max": M}
 * (1 <= N <= M <= TFP_PROTO_LIMIT, no other members), only to a client whose request named its
 * own range in a Tfetch-Protocol header, for the same reason.
 * build writes only the members of its kind (the others are ignored); parse requires exactly
 * those members, at most TFP_UP_MAX_RESP_JSON bytes, and zeroes the unused ones. On success
 * the parsed worker_address is the caller's to free, through tfp_up_resp_clear; on failure
 * *out is untouched. */
tfp_status_t tfp_up_resp_build(const tfp_up_resp_t *resp, char **json, size_t *len,
                               tfp_err_t *err);
tfp_status_t tfp_up_resp_parse(const char *body, size_t len, tfp_up_resp_t *out,
                               tfp_err_t *err);
/* 1 if s may be an answer's "shm_socket": an abstract name of 1..TFP_UP_MAX_SHM_SOCKET of
 * [A-Za-z0-9._-], or an absolute path of those and '/' (no empty or .. component). What a
 * server configures must pass it, or no client could be told the name. */
int tfp_up_shm_socket_valid(const char *s);
/* Frees a parsed worker_address and zeroes *resp. NULL is a no-op. */
void tfp_up_resp_clear(tfp_up_resp_t *resp);

/* base64 moved to proto/base64.h; these names stay until the tests that use them (being
 * split into one file per module) call tfp_b64_* directly. */
#define tfp_up_b64_len tfp_b64_len
#define tfp_up_b64_encode tfp_b64_encode
#define tfp_up_b64_decode tfp_b64_decode

#endif
