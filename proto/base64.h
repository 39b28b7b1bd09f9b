/* base64.h - base64 (RFC 4648 section 4: the standard alphabet, '=' padding), strict.
 *
 * The encoder writes the canonical form and the decoder accepts only that, so every byte
 * string has exactly one accepted text (the UCX upgrade carries worker addresses this way).
 * Pure; any thread.
 */
#ifndef TFP_BASE64_H
#define TFP_BASE64_H

#include <stddef.h>
#include <stdint.h>
#include "proto/status.h"

/* 4 * ceil(n / 3): the encoded length of n bytes (without the NUL). */
size_t tfp_b64_len(size_t n);
/* Returns the malloc'd NUL-terminated encoding of src[0..n) (n may be 0), *out_len (if not
 * NULL) its length; NULL if out of memory, src is NULL with n > 0, or the length would
 * overflow. */
char *tfp_b64_encode(const void *src, size_t n, size_t *out_len);
/* Strict decoding of s[0..n): a multiple of 4 characters, alphabet only (no whitespace, no
 * URL-safe '-' '_'), '=' only as the last one or two, and the unused bits of the last group
 * zero. At most max decoded bytes (TFP_ETOOBIG beyond). *out is malloc'd (non-NULL even for 0
 * bytes), *out_len its length; both set only on success. TFP_EPROTO with the offset of the bad
 * character; TFP_EINVAL for NULL arguments; TFP_ENOMEM. */
tfp_status_t tfp_b64_decode(const char *s, size_t n, size_t max, uint8_t **out,
                            size_t *out_len, tfp_err_t *err);

#endif
