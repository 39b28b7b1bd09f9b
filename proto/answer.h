/* answer.h - the typed fields of tfetchd's answers, and the one table that says how each
 * travels on every transport.
 *
 * A handler fills an answer's fields (tfx_req_answer, transports/req.h): an ETag, a feed's
 * position, seq, round, generation and device, a Retry-After; it spells no header. Each
 * transport renders the fields it has a place for, from this table: HTTP its header (name
 * and value, rendered here and parsed back here: tfp_answer_header_parse), UCX its number
 * in the REPLY frame's feed block (tfp_answer_to_feed, proto/ucxframe.h), shm the ETag in
 * the REPLY's string (proto/shmframe.h). A new answer field is a row of TFP_ANSWER_MAP; its
 * round trip through the header and the frame is fuzzed (tests/fuzz/fuzz_httpop.c) and
 * tested (tests/check_answer.c). Pure data and functions; any thread.
 */
#ifndef TFP_ANSWER_H
#define TFP_ANSWER_H

#include <stddef.h>
#include <stdint.h>
#include "proto/httpcond.h"
#include "proto/shmframe.h"
#include "proto/ucxframe.h"

/* X(id, HTTP header, string (1) or number (0), UCX feed block's present bit (0: no place),
 * shm REPLY's string (1) or no place (0)) */
#define TFP_ANSWER_MAP(X)                                                                 \
    X(ETAG, "ETag", 1, 0, 1)                                                              \
    X(POSITION, "Tfetch-Position", 0, TFP_UF_FP_POSITION, 0)                              \
    X(SEQ, "Tfetch-Seq", 0, TFP_UF_FP_SEQ, 0)                                             \
    X(ROUND, "Tfetch-Round", 0, TFP_UF_FP_ROUND, 0)                                       \
    X(GENERATION, "Tfetch-Generation", 0, TFP_UF_FP_GENERATION, 0)                        \
    X(DEVICE, "Tfetch-Device", 0, TFP_UF_FP_DEVICE, 0)                                    \
    X(RETRY_AFTER, "Retry-After", 0, TFP_UF_FP_RETRY_AFTER, 0)

typedef enum {
#define X(id, h, s, uf, shm) TFP_AF_##id,
    TFP_ANSWER_MAP(X)
#undef X
    TFP_AF_COUNT
} tfp_af_t;

/* One row of the table. */
typedef struct {
    const char *header;             /* HTTP: the header's name */
    int is_str;                     /* the value is a string (else a decimal u64) */
    uint16_t uf_present;            /* UCX: the REPLY feed block's present bit; 0: none */
    int shm;                        /* shm: the REPLY's string carries it */
} tfp_af_row_t;

extern const tfp_af_row_t tfp_answer_fields[TFP_AF_COUNT];

#define TFP_AF_MAX_STR (TFP_ETAG_LEN - 1)   /* a string field's bytes: an ETag */

typedef struct {
    uint32_t present;               /* 1u << TFP_AF_* for each field set */
    uint64_t num[TFP_AF_COUNT];
    char str[TFP_AF_MAX_STR + 1];   /* the one string field's (ETag) */
} tfp_answer_t;

void tfp_answer_set_u64(tfp_answer_t *a, tfp_af_t f, uint64_t v);
/* A string field: v when it is valid for f (an ETag: one strong tag, tfp_etags_parse), 0;
 * else -1 and nothing set. */
int tfp_answer_set_str(tfp_answer_t *a, tfp_af_t f, const char *v);
int tfp_answer_has(const tfp_answer_t *a, tfp_af_t f);
/* Field f as its HTTP header's value, into buf (size >= 24 and > TFP_AF_MAX_STR): its
 * length, or 0 when f is not set. */
size_t tfp_answer_header_value(const tfp_answer_t *a, tfp_af_t f, char *buf, size_t size);
/* One received header into a: 1 when it is a field's (name compared without case) with a
 * valid value, 0 when it is no field's, -1 when a field's value is malformed (nothing set). */
int tfp_answer_header_parse(tfp_answer_t *a, const char *name, const char *value);
/* The fields with a place in a UCX REPLY's feed block, to it (present bits added) and back. */
void tfp_answer_to_feed(const tfp_answer_t *a, tfp_uf_feed_t *f);
void tfp_answer_from_feed(const tfp_uf_feed_t *f, tfp_answer_t *a);
/* Every field a decoded UCX REPLY carries, into a (added to what it holds): the feed block's
 * numbers (flag FEED) and the conditions block's ETag (flag COND). The client's reading of a
 * REPLY: the decoder checked the frame, this keeps only valid values. */
void tfp_answer_from_reply(const tfp_uf_hdr_t *h, tfp_answer_t *a);
/* Every field an shm REPLY carries (its string: the ETag of an OK answer to GET or COMMIT),
 * into a (added to what it holds); a malformed or absent one is left out. */
void tfp_answer_from_sf_reply(const tfp_sf_t *m, tfp_answer_t *a);

#endif
