/* otokens.h - a table of one-time tokens: the UCX upgrade's (daemon/upgrade.c) and the
 * same-host shm socket's (daemon/shm.c).
 *
 * A token is 128 random bits in lowercase hex, issued to an owner (the principal that asked
 * for it, or with authentication off the client's address) with a payload the caller gives
 * (who asked, and for what), valid until it expires, and taken once. At most max are live in
 * all and per_owner for one owner, so one principal (or one address) that asks for tokens
 * without using them runs into its own limit (TFD_OTOK_QUOTA, with when its oldest expires)
 * while everyone else still gets theirs. A presented token is looked up by its SHA-256, in a
 * hash table (never a scan comparing it with the tokens issued), and the match confirmed in
 * constant time (tfp_auth_equal): its timing tells nothing of any token issued.
 *
 * Not thread-safe: each caller holds its own lock around every call.
 */
#ifndef TFD_OTOKENS_H
#define TFD_OTOKENS_H

#include <stddef.h>
#include <stdint.h>
#include "proto/ids.h"
#include "proto/upgrade.h"

typedef struct tfd_otokens tfd_otokens_t;

typedef enum {
    TFD_OTOK_OK = 0,
    TFD_OTOK_FULL,                  /* max live tokens in all */
    TFD_OTOK_QUOTA,                 /* per_owner live tokens for this owner */
    TFD_OTOK_NORANDOM               /* getrandom failed */
} tfd_otok_result_t;

/* Owners are at most this long (a principal, or an address's text); longer ones are cut. */
#define TFD_OTOK_MAX_OWNER (TFP_MAX_USER_ID + 1)

/* A table of at most max live tokens, each with payload_size bytes of payload; per_owner 0:
 * no limit per owner. NULL on memory. */
tfd_otokens_t *tfd_otokens_new(size_t max, size_t payload_size, size_t per_owner);
void tfd_otokens_free(tfd_otokens_t *t);                /* NULL is a no-op */
/* A new per-owner limit (0: none), for tokens issued from now on. */
void tfd_otokens_set_quota(tfd_otokens_t *t, size_t per_owner);
size_t tfd_otokens_quota(const tfd_otokens_t *t);

/* Issues a new token to owner, valid for ttl_ms from now_ms, with a copy of payload:
 * TFD_OTOK_OK with token set. Over the owner's limit: TFD_OTOK_QUOTA and *retry_ms (may be
 * NULL) the time until its oldest token expires (at least 1); over the table's,
 * TFD_OTOK_FULL and *retry_ms the time until any expires. Expired tokens are dropped first. */
tfd_otok_result_t tfd_otokens_issue(tfd_otokens_t *t, const char *owner, const void *payload,
                                    uint64_t now_ms, uint64_t ttl_ms,
                                    char token[TFP_UP_TOKEN_LEN + 1], uint64_t *retry_ms);

/* The payload of the live token presented (any NUL-terminated text), or NULL: unknown,
 * expired or already taken. Valid until the next call that changes the table. */
void *tfd_otokens_find(tfd_otokens_t *t, const char *token, uint64_t now_ms);
/* The owner of the token whose payload find returned. */
const char *tfd_otokens_owner(const tfd_otokens_t *t, const void *payload);
/* Takes the token whose payload find returned: it is gone (single use). */
void tfd_otokens_take(tfd_otokens_t *t, void *payload);

/* Live tokens, in all and (owner not NULL) of owner's, expired ones not counted. */
size_t tfd_otokens_count(tfd_otokens_t *t, const char *owner, uint64_t now_ms);

#endif
