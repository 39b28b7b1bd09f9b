/* protover.h - the protocol version range each peer speaks, and the check that two overlap.
 *
 * A tfetch peer speaks the protocol versions MIN..MAX (TFP_PROTO_MIN..TFP_PROTO_MAX for this
 * build). It says so in the `Tfetch-Protocol: MIN-MAX` header of every HTTP request and
 * response, in `GET /v1/info` ("protocol": {"min", "max"}) and in the answer to
 * `POST /v1/upgrade`. A peer that says nothing is a version-1 peer (tfetch 0.1.0, curl).
 * Two peers whose ranges share no version refuse each other with TFP_EVERSION, whose message
 * names both ranges and the feature that met the mismatch; the promise (doc/PROTOCOL.md,
 * "Versions") is that release N speaks with N-1 both ways. Pure functions, no I/O; any
 * thread.
 */
#ifndef TFP_PROTOVER_H
#define TFP_PROTOVER_H

#include <stddef.h>
#include "proto/status.h"

#define TFP_PROTO_MIN 1                 /* 1: tfetch 0.1.0, which names no range */
#define TFP_PROTO_MAX 2                 /* 2: names its range, refuses with TF_EVERSION */
#define TFP_PROTO_LIMIT 65535           /* the largest version a range may name */
#define TFP_PROTO_MAX_TEXT 12           /* "65535-65535" */

typedef struct {
    unsigned min, max;                  /* 1 <= min <= max <= TFP_PROTO_LIMIT */
} tfp_proto_range_t;

/* This build's range, and the range of a peer that names none (version 1 only). */
tfp_proto_range_t tfp_proto_ours(void);
tfp_proto_range_t tfp_proto_unnamed(void);
/* 1 if r is a valid range. */
int tfp_proto_valid(tfp_proto_range_t r);

/* Parses "MIN-MAX" (decimal, no sign, no spaces, no leading zeros, 1..TFP_PROTO_LIMIT,
 * MIN <= MAX) from s[0..n); a single "N" means N-N. TFP_EPROTO naming the fault; *out is
 * written only on success. */
tfp_status_t tfp_proto_parse(const char *s, size_t n, tfp_proto_range_t *out,
                             tfp_err_t *err);
/* Writes "MIN-MAX" NUL-terminated into buf (size >= TFP_PROTO_MAX_TEXT + 1); TFP_EINVAL for
 * an invalid range or a short buffer. */
tfp_status_t tfp_proto_format(tfp_proto_range_t r, char *buf, size_t size, tfp_err_t *err);

/* Raises ours->min to the value of s (a test's planted incompatibility: TFETCH_PROTOCOL_MIN),
 * which must be a version within ours; TFP_EINVAL otherwise, ours untouched. */
tfp_status_t tfp_proto_raise_min(tfp_proto_range_t *ours, const char *s, tfp_err_t *err);

/* TFP_OK if the two ranges share a version (*common, if not NULL, the highest); else
 * TFP_EVERSION with "protocol version mismatch on FEATURE: this ME speaks A..B, the PEER
 * C..D (...)" - who must upgrade. */
tfp_status_t tfp_proto_check(tfp_proto_range_t mine, tfp_proto_range_t peer, const char *me,
                             const char *peer_name, const char *feature, unsigned *common,
                             tfp_err_t *err);

#endif
