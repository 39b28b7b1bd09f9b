/* auth.h - bearer tokens and rights: the token file, the Authorization header, the matcher.
 *
 * The token file (auth-tokens = PATH, tfetchd.conf(5)) is lines of
 *     TOKEN PRINCIPAL RIGHT...
 * with '#' starting a comment and blank lines skipped. TOKEN is 1..512 characters of an RFC
 * 6750 b64token ([A-Za-z0-9-._~+/]+ then '='s); PRINCIPAL a user id ([A-Za-z0-9._-]{1,128});
 * each RIGHT is KIND:PATTERN, KIND one of read write delete call serve produce consume forward
 * admin, PATTERN a name (tensor, route or feed), or a prefix followed by '*' matching any
 * suffix ("*" alone: every name). A line may name a TLS client certificate instead of a token:
 *     cert:SUBJECT PRINCIPAL RIGHT...
 * SUBJECT being the certificate's subject DN as RFC 4514 writes it (gnutls_x509_crt_get_dn3:
 * "CN=alice,O=ml"), a space in it written \20 (tfp_auth_cert_hash says exactly how); a '#'
 * inside SUBJECT is part of it, not a comment. tfp_tokens_parse keeps only each token's
 * SHA-256 (nettle), and for a cert: line the SHA-256 of "cert:SUBJECT" (no token can hold a
 * ':', so the two never meet), sorted; a lookup is a binary search over the hashes, the match
 * confirmed in constant time.
 * (The search's timing can tell at most how much of a guess's SHA-256 matches a real one,
 * which does not help find a token.) Pure; a parsed table is read-only and may be shared
 * between threads.
 */
#ifndef TFP_AUTH_H
#define TFP_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include "proto/ids.h"
#include "proto/status.h"

#define TFP_AUTH_HASH_LEN 32        /* SHA-256 */
#define TFP_AUTH_MAX_TOKEN 512
#define TFP_AUTH_MAX_LINE 8192
#define TFP_AUTH_MAX_SUBJECT 1024   /* a cert: line's SUBJECT, in the file's spelling */

#define TFP_RIGHT_MAP(X)            \
    X(READ, "read")                 \
    X(WRITE, "write")               \
    X(DELETE, "delete")             \
    X(CALL, "call")                 \
    X(SERVE, "serve")               \
    X(PRODUCE, "produce")           \
    X(CONSUME, "consume")           \
    X(FORWARD, "forward")           \
    X(ADMIN, "admin")

typedef enum {
#define X(n, s) TFP_RIGHT_##n,
    TFP_RIGHT_MAP(X)
#undef X
    TFP_RIGHT_COUNT
} tfp_right_t;

/* "read", ...; "?" for a value that is no right. */
const char *tfp_right_name(int right);

typedef struct {
    tfp_right_t right;
    char pattern[TFP_MAX_TENSOR_NAME + 2];      /* a name, or a prefix and '*' */
} tfp_grant_t;

typedef struct {
    uint8_t hash[TFP_AUTH_HASH_LEN];            /* SHA-256 of the token, or of "cert:SUBJECT" */
    char principal[TFP_MAX_USER_ID + 1];
    unsigned line;                              /* where the file gave it */
    int cert;                                   /* 1: a cert: line (a client certificate) */
    size_t ngrants;
    tfp_grant_t *grants;
} tfp_token_t;

typedef struct {
    size_t n;
    tfp_token_t *tokens;
    size_t ncerts;                              /* how many of them are cert: lines */
} tfp_tokens_t;

/* Parses a token file's text (len bytes, NUL not needed) into *out (zeroed first). TFP_OK, or
 * TFP_EINVAL with err saying "line N: ..." (what is wrong, never the token itself) and *out
 * empty; TFP_ENOMEM. A token (or a certificate subject) given twice is an error. */
tfp_status_t tfp_tokens_parse(const char *text, size_t len, tfp_tokens_t *out, tfp_err_t *err);
void tfp_tokens_free(tfp_tokens_t *t);

/* 1 if a[0..n) equals b[0..n), in time that depends on n alone, never on where they differ
 * (nettle's memeql_sec): how every secret or its hash is compared. n 0: 1. */
int tfp_auth_equal(const void *a, const void *b, size_t n);

/* SHA-256 of a token's len bytes. */
void tfp_auth_hash(const char *token, size_t len, uint8_t out[TFP_AUTH_HASH_LEN]);

/* The key a verified client certificate is looked up by: the SHA-256 of "cert:" and its
 * subject dn (NUL-terminated, as gnutls_x509_crt_get_dn3 gives it) in the token file's
 * spelling: every space, escaped ("\ ", RFC 4514's leading or trailing space) or not,
 * becomes \20, and every other control byte \XX (uppercase hex); the rest is kept as it is.
 * So "CN=Alice Smith,O=ml" is written cert:CN=Alice\20Smith,O=ml in the file. */
void tfp_auth_cert_hash(const char *dn, uint8_t out[TFP_AUTH_HASH_LEN]);

/* The entry whose hash is hash, or NULL. O(log n); the final comparison in constant time. */
const tfp_token_t *tfp_tokens_find(const tfp_tokens_t *t, const uint8_t hash[TFP_AUTH_HASH_LEN]);

/* 1 if pattern (a name, or a prefix and a trailing '*') matches name, else 0. */
int tfp_auth_pattern_match(const char *pattern, const char *name);

/* 1 if the token's principal holds right on name. */
int tfp_token_allows(const tfp_token_t *tok, tfp_right_t right, const char *name);

/* 1 if the token holds right on some name at all (a pattern, whatever it matches). */
int tfp_token_has_right(const tfp_token_t *tok, tfp_right_t right);

/* 1 if s[0..n) is a valid token (an RFC 6750 b64token of at most TFP_AUTH_MAX_TOKEN bytes). */
int tfp_auth_token_valid(const char *s, size_t n);

/* What an Authorization header holds. */
typedef enum {
    TFP_BEARER_NONE = 0,            /* no header */
    TFP_BEARER_OK,                  /* "Bearer TOKEN": *tok, *len point into the header */
    TFP_BEARER_BAD                  /* another scheme, or no or a malformed token */
} tfp_bearer_t;

/* Parses an Authorization header's value (NULL: absent). The scheme is case-insensitive;
 * spaces around the token are skipped. */
tfp_bearer_t tfp_bearer_parse(const char *value, const char **tok, size_t *len);

/* ---- the principal's proof in a UCX HELLO ------------------------------------------------ */

/* An upgrade token issued to an authenticated principal is bound to it: the HELLO that
 * presents it carries, after the host identity ("boot_id netns PROOF"), PROOF = the lowercase
 * hex SHA-256 of the bearer token's SHA-256 followed by the upgrade token. Only the holder
 * of the bearer token can make it; a stolen upgrade token is useless to another principal. */
#define TFP_AUTH_PROOF_LEN 64
void tfp_auth_hello_proof(const uint8_t token_hash[TFP_AUTH_HASH_LEN], const char *up_token,
                          char out[TFP_AUTH_PROOF_LEN + 1]);
/* Splits a HELLO's msg[0..n) into the host identity (its length in *ident_len) and the proof
 * (*proof: NUL-terminated, "" when none). A msg with more than one space after the boot id
 * must end in " " and exactly 64 lowercase hex digits: TFP_EPROTO otherwise. */
tfp_status_t tfp_auth_hello_split(const char *msg, size_t n, size_t *ident_len,
                                  char proof[TFP_AUTH_PROOF_LEN + 1]);
/* 1 if the two proofs are equal (constant time). */
int tfp_auth_proof_equal(const char *a, const char *b);

#endif
