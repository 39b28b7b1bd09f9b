/* digest.h - RFC 9530 integrity fields: Content-Digest and Repr-Digest (sha-256), and the
 * Want-Content-Digest / Want-Repr-Digest preferences.
 *
 * A digest field is a Structured Fields dictionary (RFC 8941) whose members are byte
 * sequences, `sha-256=:BASE64:`; members of other algorithms are allowed and ignored (only
 * sha-256 is checked), parameters are skipped. A Want- field is a dictionary of integer
 * weights 0..10; sha-256 with a weight above 0 is wanted. The parsers are strict about
 * syntax: a malformed field is refused (TFP_EPROTO naming the fault), never half-read. The
 * digest itself is nettle's SHA-256. Pure functions, no I/O; any thread.
 */
#ifndef TFP_DIGEST_H
#define TFP_DIGEST_H

#include <stddef.h>
#include <stdint.h>
#include "proto/status.h"

#define TFP_DIGEST_LEN 32                   /* sha-256 */
#define TFP_DIGEST_FIELD_MAX 64             /* "sha-256=:" 44 base64 ":" and a NUL */
#define TFP_DIGEST_MAX_INPUT 4096           /* longest field parsed */

typedef struct {
    int has;                                /* a sha-256 member was present */
    uint8_t sha256[TFP_DIGEST_LEN];
} tfp_digest_t;

/* Parses a Content-Digest or Repr-Digest value s (NUL-terminated). TFP_OK with out->has 1
 * and the value, or has 0 when no sha-256 member is there; TFP_EPROTO when the field is not
 * a dictionary of byte sequences, a sha-256 value is not 32 bytes, or sha-256 comes twice.
 * *out is written only on success. */
tfp_status_t tfp_digest_parse(const char *s, tfp_digest_t *out, tfp_err_t *err);
/* Parses a Want-Repr-Digest or Want-Content-Digest value: *wanted 1 when sha-256 has a
 * weight of 1..10, else 0; TFP_EPROTO when malformed (a weight outside 0..10, not an
 * integer). */
tfp_status_t tfp_digest_want_parse(const char *s, int *wanted, tfp_err_t *err);
/* SHA-256 of p[0..n). */
void tfp_digest_sha256(const void *p, size_t n, uint8_t out[TFP_DIGEST_LEN]);
/* Writes "sha-256=:BASE64:" NUL-terminated into buf (size >= TFP_DIGEST_FIELD_MAX). */
void tfp_digest_format(const uint8_t sha256[TFP_DIGEST_LEN], char *buf, size_t size);

#endif
