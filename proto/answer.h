/* answer.h - the typed fields of tfetchd's answers, and the one table that says how each
 * travels on every transport.
 *
 * A handler fills an answer's fields (tfx_req_answer, transports/req.h): an ETag, a feed's
 * position, seq, round, generation and device, a Retry-After; it spells no header. Each
 * transport renders the fields it has a place for, from this table: HTTP its header (name
 * and value, rendered here and parsed back here: tfp_answer_header_parse), UCX its number
 * in the REPLY frame's feed block (tfp_answer_to_feed, proto/ucxframe.h), the server's
 * time in its timing block (tfp_answer_to_reply), or, for a field with no place there, its
 * answer lines (the header's own "Name: value"), shm the ETag in
 * the REPLY's string and the rest as answer lines after it (proto/shmframe.h). The client
 * reads each back through the same table. A new answer field is a row of TFP_ANSWER_MAP; its
 * round trip through the header and the frame is fuzzed (tests/fuzz/fuzz_httpop.c) and
 * tested (tests/check_answer.c). Pure data and functions; any thread.
 */
#ifndef TFP_ANSWER_H
#define TFP_ANSWER_H

#include <stddef.h>
#include <stdint.h>
#include "proto/digest.h"
#include "proto/httpcond.h"
#include "proto/shmframe.h"
#include "proto/ucxframe.h"

/* X(id, HTTP header, kind, UCX feed block's present bit (0: no place of its own),
 * Server-Timing metric (kind DUR; NULL otherwise)). A field with no place of its own in a
 * UCX REPLY travels in its answer lines block (flag ANSWER), and in an shm REPLY's lines
 * (proto/shmframe.h), both written "Header: value" as HTTP writes the header. */
#define TFP_ANSWER_MAP(X)                                                                 \
    X(ETAG, "ETag", TFP_AK_STR, 0, NULL)                                                  \
    X(POSITION, "Tfetch-Position", TFP_AK_NUM, TFP_UF_FP_POSITION, NULL)                  \
    X(SEQ, "Tfetch-Seq", TFP_AK_NUM, TFP_UF_FP_SEQ, NULL)                                 \
    X(ROUND, "Tfetch-Round", TFP_AK_NUM, TFP_UF_FP_ROUND, NULL)                           \
    X(GENERATION, "Tfetch-Generation", TFP_AK_NUM, TFP_UF_FP_GENERATION, NULL)            \
    X(DEVICE, "Tfetch-Device", TFP_AK_NUM, TFP_UF_FP_DEVICE, NULL)                        \
    X(RETRY_AFTER, "Retry-After", TFP_AK_NUM, TFP_UF_FP_RETRY_AFTER, NULL)                \
    X(REPR_DIGEST, "Repr-Digest", TFP_AK_STR, 0, NULL)                                    \
    X(SRV_RECV, "Server-Timing", TFP_AK_DUR, 0, "recv")                                   \
    X(SRV_QUEUE, "Server-Timing", TFP_AK_DUR, 0, "queue")                                 \
    X(SRV_HANDLER, "Server-Timing", TFP_AK_DUR, 0, "handler")                             \
    X(SRV_TOTAL, "Server-Timing", TFP_AK_DUR, 0, "tf")

/* A field's kind: a decimal u64; a string (an ETag); a duration in microseconds, one entry
 * of the Server-Timing header ("handler;dur=0.125": milliseconds, three decimals). */
enum { TFP_AK_NUM = 0, TFP_AK_STR = 1, TFP_AK_DUR = 2 };

typedef enum {
#define X(id, h, k, uf, m) TFP_AF_##id,
    TFP_ANSWER_MAP(X)
#undef X
    TFP_AF_COUNT
} tfp_af_t;

/* The server's own time on a request (Server-Timing; doc/PROTOCOL.md "Server timing"): recv
 * from its head to its whole body, queue held waiting (a long-poll, a full queue, a call's
 * worker), handler the handler's and store's work, tf all of it up to the answer. */
#define TFP_AF_TIMING_MASK                                                                \
    ((1u << TFP_AF_SRV_RECV) | (1u << TFP_AF_SRV_QUEUE) | (1u << TFP_AF_SRV_HANDLER) |    \
     (1u << TFP_AF_SRV_TOTAL))

/* One row of the table. */
typedef struct {
    const char *header;             /* HTTP: the header's name */
    int is_str;                     /* the value is a string (else a number) */
    int kind;                       /* TFP_AK_* */
    uint16_t uf_present;            /* UCX: the REPLY feed block's present bit; 0: none */
    const char *metric;             /* kind DUR: its Server-Timing metric name */
    size_t header_len;              /* strlen(header) */
} tfp_af_row_t;

extern const tfp_af_row_t tfp_answer_fields[TFP_AF_COUNT];

/* A string field's bytes at most: an ETag, a Repr-Digest of sha-256 alone. */
#define TFP_AF_MAX_STR (TFP_DIGEST_FIELD_MAX > TFP_ETAG_LEN ? TFP_DIGEST_FIELD_MAX - 1       \
                                                            : TFP_ETAG_LEN - 1)

typedef struct {
    uint32_t present;               /* 1u << TFP_AF_* for each field set */
    uint64_t num[TFP_AF_COUNT];
    char str[2][TFP_AF_MAX_STR + 1];  /* the string fields' values: tfp_answer_str */
} tfp_answer_t;

void tfp_answer_set_u64(tfp_answer_t *a, tfp_af_t f, uint64_t v);
/* String field f's value: "" when it is not set (or f is no string field). */
const char *tfp_answer_str(const tfp_answer_t *a, tfp_af_t f);
/* A string field: v when it is valid for f (an ETag: one strong tag, tfp_etags_parse; a
 * Repr-Digest: a digest field with a sha-256 member, tfp_digest_parse), 0; else -1 and
 * nothing set. */
int tfp_answer_set_str(tfp_answer_t *a, tfp_af_t f, const char *v);
int tfp_answer_has(const tfp_answer_t *a, tfp_af_t f);
/* Field f as its HTTP header's value, into buf (size >= 24 and > TFP_AF_MAX_STR): its
 * length, or 0 when f is not set. */
size_t tfp_answer_header_value(const tfp_answer_t *a, tfp_af_t f, char *buf, size_t size);
/* One received header into a: 1 when it is a field's (name compared without case) with a
 * valid value, 0 when it is no field's, -1 when a field's value is malformed (nothing set).
 * Server-Timing is a list: its entries of our metrics are taken (1), a list with none of
 * them is no field's (0), one of ours without a valid dur is malformed (-1). */
int tfp_answer_header_parse(tfp_answer_t *a, const char *name, const char *value);
/* The largest answer lines block (UCX, shm) a writer writes or a reader takes. */
#define TFP_ANSWER_MAX_LINES 512
/* The fields of a in mask (1u << TFP_AF_*) as lines "Header: value", each ended by "\n",
 * into buf (NUL-terminated): its length (0: none set). A field that does not fit is left
 * out. The server's time (TFP_AF_TIMING_MASK) is one line "T: RECV,QUEUE,HANDLER,TF" in
 * microseconds ("-": not set), not HTTP's 75-byte Server-Timing list. */
size_t tfp_answer_lines(const tfp_answer_t *a, uint32_t mask, char *buf, size_t size);
/* Lines as tfp_answer_lines writes them, into a: each "Header: value" through
 * tfp_answer_header_parse, the "T:" line by its own parser; a line of no field's, or with a
 * malformed value, is skipped.
 * 0, or -1 when the text is not such lines (nothing set then). */
int tfp_answer_lines_parse(tfp_answer_t *a, const char *s, size_t n);
/* 1 if s[0..n) has the form of answer lines: printable ASCII lines "Name: value\n", Name a
 * token; what a frame's decoder checks. */
int tfp_answer_lines_valid(const char *s, size_t n);
/* The fields with a place in a UCX REPLY's feed block, to it (present bits added) and back.
 * tfp_answer_uf_lines_mask: those without one (but the ETag, the conditions block's), which
 * go in the REPLY's answer lines to a request that asked (flag ANSWER). */
uint32_t tfp_answer_uf_lines_mask(void);
void tfp_answer_to_feed(const tfp_answer_t *a, tfp_uf_feed_t *f);
void tfp_answer_from_feed(const tfp_uf_feed_t *f, tfp_answer_t *a);
/* The server's writing of a UCX REPLY, for a request whose flags were asked: to one that
 * set TIMING, the server's time as the timing block; to one that set ANSWER, the answer
 * lines of the fields without a place elsewhere (the time among them only when TIMING was
 * not asked). The feed and conditions blocks are the transport's (tfp_answer_to_feed). */
void tfp_answer_to_reply(const tfp_answer_t *a, uint16_t asked, tfp_uf_hdr_t *h);
/* Every field a decoded UCX REPLY carries, into a (added to what it holds): the feed block's
 * numbers (flag FEED), the conditions block's ETag (flag COND), the answer lines (flag
 * ANSWER) and the timing block (flag TIMING). The client's reading of a REPLY: the decoder
 * checked the frame, this keeps only valid values. */
void tfp_answer_from_reply(const tfp_uf_hdr_t *h, tfp_answer_t *a);
/* Every field an shm REPLY carries, into a (added to what it holds): its string's first line
 * (the ETag of an OK answer to GET or COMMIT), then, to a client whose HELLO said
 * TFP_SF_HELLO_V3, answer lines; a malformed or absent one is left out. */
void tfp_answer_from_sf_reply(const tfp_sf_t *m, tfp_answer_t *a);

#endif
