/* ucxframe.h - the fixed binary header of tfetch's UCX active messages.
 *
 * Every UCX active message tfetch sends carries this header in the AM header; a body (the
 * same safetensors document HTTP carries) travels in the AM data. Wire layout, little-endian,
 * 40 fixed bytes then the strings back to back, no terminators:
 *
 *   off size field
 *     0   4  magic      0x31554654 ("TFU1" as bytes)
 *     4   1  version    2
 *     5   1  op         tfp_uf_op_t
 *     6   2  flags      bit0 TFP_UF_F_REPLY_HAS_BODY, bit1 TFP_UF_F_BODY_PREFIX,
 *                      bit8 TFP_UF_F_FEED, bit9 TFP_UF_F_COND, bit10 TFP_UF_F_ANSWER,
 *                      bit11 TFP_UF_F_TIMING, bit12 TFP_UF_F_PARTS, the others 0
 *     8   8  seq        the client's request number, echoed in the reply
 *    16   4  status     i32: a tfp_status_t in replies, 0 in requests
 *    20   4  wait_ms    GET long-poll in milliseconds; 0 on every other op
 *    24   8  body_len   payload bytes carried in the AM data
 *    32   1  id_len     request id      (0..128)
 *    33   1  user_len   user id         (0..128)
 *    34   1  name_len   tensor or route name, or the HELLO token (0..255)
 *    35   1  uprin_len  user principal (0..128): whose user `user` is, when a gateway
 *                      forwards another principal's user (HTTP's Tfetch-User-Principal)
 *    36   2  msg_len    message: UTF-8, no NUL (0..512)
 *    38   2  http       in REPLY and HELLO_ACK the HTTP-equivalent status (100..599, or
 *                      0); 0 in requests
 *    40      request_id, user, name, msg, user principal
 *            then, only with flag TFP_UF_F_FEED, the feed block (80 fixed bytes, then its
 *            strings back to back):
 *     0   1  feed_op    tfp_uf_feed_op_t (1..12)
 *     1   1  fflags     bit0 TFP_UF_FF_HAS_ACK (requests), bit2 TFP_UF_FF_REWIND (POP
 *                      requests: ?rewind=1), bit1 TFP_UF_FF_JSON (the body is
 *                      JSON text, else a safetensors document), bit3 TFP_UF_FF_STAGED
 *                      (INFEED and OUTFEED_PUSH requests: the body is not the document
 *                      but a staged body, proto/shmframe.h: where the document lies in a
 *                      staging buffer the same server lent this host's client; body_len
 *                      exactly TFP_SF_STAGED_LEN, no BODY_PREFIX)
 *     2   2  present    replies: which of the reply numbers below are set (TFP_UF_FP_*)
 *     4   1  dev_len    requests: the {dev} token (0..255)
 *     5   1  prod_len   requests: the producer stream id (0..128)
 *     6   1  cons_len   requests: the consumer id (0..128)
 *     7   1  reserved   0
 *     8   8  seq        Tfetch-Seq (requests: infeed, outfeed push; replies: the item's)
 *    16   8  ack        pop and detach ?ack=P, ack ?through=P (requests)
 *    24   8  after      outfeed get ?after=S (requests)
 *    32   8  position   replies: Tfetch-Position
 *    40   8  round      replies: Tfetch-Round
 *    48   8  generation replies: Tfetch-Generation
 *    56   8  device     replies: Tfetch-Device
 *    64   8  retry_after  replies: Retry-After (seconds)
 *    72   8  resume_after replies: an outfeed 410's resume point
 *    80      dev, producer, consumer
 *            then, only with flag TFP_UF_F_COND (GET, PUT, DELETE and their REPLY; never
 *            beside FEED), the conditions block (40 fixed bytes, then its strings):
 *     0   1  cflags     bit0 TFP_UF_CF_RANGE: a byte range (GET requests: asked; replies:
 *                      what the body holds, or with first = last = 2^64-1 an unsatisfied
 *                      range's total)
 *     1   1  im_len     requests: If-Match (0..255; 0 none)
 *     2   1  inm_len    requests: If-None-Match (0..255; 0 none)
 *     3   1  etag_len   replies: the ETag (0..63; 0 none)
 *     4   4  reserved   0
 *     8   8  ttl_s      PUT requests: Tfetch-TTL (0 none, else 1..31622400)
 *    16   8  first      the range's first byte
 *    24   8  last       its last byte (requests: 2^64-1 to the end)
 *    32   8  total      replies: the document's size (Content-Range)
 *    40      if_match, if_none_match, etag
 *            A request's block may be empty: it says the client reads the block in the
 *            reply (an ETag there); a reply's carries an etag or a range. A server offers
 *            it in its HELLO_ACK (TFP_UF_FEATURE_COND), answers with one only a request
 *            that sent one, and a client sends one only to a server that offered it.
 *            then, only with flag TFP_UF_F_ANSWER (GET, PUT, DELETE, CALL, FEED and their
 *            REPLY; beside FEED or COND or alone), the answer lines block:
 *     0   2  lines_len  0..TFP_UF_MAX_ANSWER
 *     2      lines      printable ASCII lines "Name: value\n" as HTTP writes its headers.
 *                      Replies: the answer's fields that have no other place in the frame
 *                      (its Server-Timing entries, a Repr-Digest, ...: proto/answer.h,
 *                      tfp_answer_lines). Requests: empty (the client asks for the block
 *                      in the reply), or, to a server that offered TFP_UF_FEATURE_DIGEST,
 *                      the digest headers HTTP carries (a PUT's Repr-Digest and
 *                      Content-Digest, a GET's Want-Repr-Digest: tfp_op_digest_lines). A
 *                      reader skips names it does not know. A server offers the block in
 *                      its HELLO_ACK (TFP_UF_FEATURE_ANSWER), answers with one only a
 *                      request that set the flag, and a client sets it only for a server
 *                      that offered it.
 *            then, only with flag TFP_UF_F_TIMING in a REPLY, the timing block (16 bytes):
 *     0   4  recv       the server's time on the request in microseconds, as HTTP's
 *     4   4  queue      Server-Timing names it (proto/answer.h), each u32, 0xffffffff for
 *     8   4  handler    one it did not measure (a request refused before its handler ran
 *    12   4  total      has no queue or handler); 0xfffffffe at most otherwise.
 *            A request sets the flag, with no block, to ask for it; a server offers it in
 *            its HELLO_ACK (TFP_UF_FEATURE_TIMING), answers with one only a request that
 *            asked, and then leaves its time out of the answer lines; a client asks only a
 *            server that offered it. Sixteen bytes written and read as numbers, where the
 *            answer lines' "T:" line is text to print, check and parse at both ends.
 *            then, only with flag TFP_UF_F_BODY_PREFIX (requests that carry a body: PUT,
 *            CALL, FEED), the first prefix_len bytes of the body (1..TFP_UF_MAX_PREFIX,
 *            fewer than body_len): what is left of the AM header after the frame. The AM
 *            data carries the rest of the body, so a document whose small header and large
 *            tensor lie apart goes as one contiguous piece (rendezvous, read straight from
 *            the sender) instead of as pieces through the peer's FIFO. A server offers
 *            it in its HELLO_ACK (TFP_UF_FEATURES); a client sends it only then.
 *
 * Ops and what each may carry (a decoder refuses anything else; an encoder the same):
 *   HELLO      first message on a new endpoint: name = the one-time token (32 lowercase hex,
 *              from POST /v1/upgrade), user empty, msg = the client's host identity
 *              "boot_id netns" (tfp_up_ident_format), then, for a token issued to an
 *              authenticated principal, " " and its 64-hex-digit proof
 *              (tfp_auth_hello_proof, proto/auth.h); request id empty or valid
 *   HELLO_ACK  the server's answer to HELLO (a reply)
 *   GET        name = tensor; wait_ms = long-poll (the only request that may set it)
 *   PUT        name = tensor; body_len = the document's size
 *   DELETE     name = tensor
 *   CALL       name = route (exchange); body_len = the request document's size
 *   REPLY      the answer to GET/PUT/DELETE/CALL, same request id; status and http (the
 *              status HTTP would have answered: 201 or 204 for a PUT, 404 ...); flag
 *              REPLY_HAS_BODY set exactly when body_len > 0, which only an OK reply may have;
 *              msg = an error message (a failed REPLY carries no body)
 *   BYE        either side is closing the endpoint
 *   PART       the next piece of a body sent in parts (flag PARTS, below), either way: seq
 *              and request id those of the request (of the REPLY: the same); flag COND
 *              alone, its block carrying only the range: first and last, the piece's place
 *              in the body, and total, the body's size (the frame's body_len); body_len =
 *              last - first + 1 = the AM data's length; every other field empty or 0
 *   FEED       a feed operation (doc/PROTOCOL.md, "Feeds over UCX"): flag FEED set and the
 *              feed block says which (feed_op) and carries the stream ids and positions
 *              HTTP carries in headers and the query; name = the feed (empty on LIST, else
 *              required); wait_ms on POP and OUTFEED_GET (?wait=) and INFEED and
 *              OUTFEED_PUSH (Prefer: wait=); a body on DECLARE (JSON, fflag JSON), INFEED
 *              and OUTFEED_PUSH (safetensors). Its REPLY may carry the feed block too (same
 *              feed_op; the numbers HTTP sends as headers, each flagged in present; fflag
 *              JSON when the reply body is JSON text).
 * Requests (HELLO, GET, PUT, DELETE, CALL, BYE) have status 0; replies (HELLO_ACK, REPLY) a
 * known tfp_status_t. The request id is required (tfp_request_id_valid) except on HELLO,
 * HELLO_ACK and BYE, where it may be empty. The user is empty or tfp_user_id_valid (HELLO:
 * empty). The user principal is empty or tfp_user_id_valid, and only on GET, PUT, DELETE,
 * CALL and FEED, with a user (a server that predates it refuses a frame that sets it; one
 * without it is byte for byte what it always was). The name is required (tfp_name_valid) on GET, PUT, DELETE and CALL, empty or valid
 * on HELLO_ACK, REPLY and BYE. body_len is 0 on HELLO, HELLO_ACK, GET, DELETE and BYE.
 *
 * Decoding copies the strings into the NUL-terminated fixed buffers of tfp_uf_hdr_t (all are
 * small and bounded), so a decoded header does not borrow the receive buffer and can outlive
 * it. Pure functions, no I/O, no state; any thread.
 */
#ifndef TFP_UCXFRAME_H
#define TFP_UCXFRAME_H

#include <stddef.h>
#include <stdint.h>
#include "proto/ids.h"
#include "proto/status.h"

#define TFP_UF_MAGIC 0x31554654u            /* 'T' 'F' 'U' '1' in little-endian order */
#define TFP_UF_VERSION 2                    /* 2: the http field (was reserved2) */
#define TFP_UF_FIXED 40                     /* bytes before the strings */
#define TFP_UF_MAX_MSG 512
#define TFP_UF_FEED_FIXED 80                /* the feed block's bytes before its strings */
/* The largest feed block: a device and one stream id (a producer's or a consumer's, never
 * both: no feed op takes both). */
#define TFP_UF_MAX_FEED (TFP_UF_FEED_FIXED + TFP_MAX_TENSOR_NAME + TFP_MAX_USER_ID)
#define TFP_UF_COND_FIXED 40                /* the conditions block's bytes before its strings */
#define TFP_UF_MAX_COND 255                 /* an If-Match or If-None-Match value */
#define TFP_UF_MAX_ETAG 63                  /* an ETag */
#define TFP_UF_MAX_TTL 31622400u            /* Tfetch-TTL: a year of seconds */
/* The largest conditions block: a request's two conditions (a reply carries at most an
 * ETag). */
#define TFP_UF_MAX_CONDB (TFP_UF_COND_FIXED + 2 * TFP_UF_MAX_COND)
/* The largest header an encoder writes or a decoder accepts (a feed block and a conditions
 * block never go together). */
#define TFP_UF_MAX_BLOCK (TFP_UF_MAX_FEED > TFP_UF_MAX_CONDB ? TFP_UF_MAX_FEED : TFP_UF_MAX_CONDB)
#define TFP_UF_MAX_ANSWER 256               /* the answer lines block's text */
#define TFP_UF_TIMING_N 4                   /* the timing block: recv, queue, handler, total */
#define TFP_UF_TIMING_LEN (4 * TFP_UF_TIMING_N)
#define TFP_UF_TIMING_NONE 0xffffffffu      /* a duration the server did not measure */
#define TFP_UF_MAX_HEADER                                                                   \
    (TFP_UF_FIXED + TFP_MAX_REQUEST_ID + 2 * TFP_MAX_USER_ID + TFP_MAX_TENSOR_NAME +        \
     TFP_UF_MAX_MSG + TFP_UF_MAX_BLOCK + 2 + TFP_UF_MAX_ANSWER + TFP_UF_TIMING_LEN)

#define TFP_UF_F_REPLY_HAS_BODY 0x0001u
#define TFP_UF_F_BODY_PREFIX 0x0002u        /* the body's first bytes end the AM header */
#define TFP_UF_F_FEED 0x0100u               /* the feed block follows the strings */
#define TFP_UF_F_COND 0x0200u               /* the conditions block follows the strings */
#define TFP_UF_F_ANSWER 0x0400u             /* the answer lines block follows those */
#define TFP_UF_F_TIMING 0x0800u             /* requests: asks for the server's time; replies:
                                             * the timing block ends the frame */
#define TFP_UF_F_PARTS 0x1000u              /* requests (GET, PUT, CALL): the sender takes
                                             * a reply in parts, and its body may continue
                                             * in PART frames; REPLY: the body continues in
                                             * PART frames (see "Bodies in parts") */
#define TFP_UF_CF_RANGE 0x01u               /* the conditions block's range is set */

/* The most body bytes a header may carry (flag BODY_PREFIX): a document's safetensors
 * header, and the small tensors before its last one. */
#define TFP_UF_MAX_PREFIX 2048
/* What a server's successful HELLO_ACK says in its msg (space-separated words; a client
 * ignores words it does not know, and an older server says nothing): "body-prefix" = it
 * takes flag BODY_PREFIX; "feed-detach" = it takes FEED op DETACH (an older server drops the
 * frame unanswered). */
#define TFP_UF_FEATURE_BODY_PREFIX "body-prefix"
#define TFP_UF_FEATURE_FEED_DETACH "feed-detach"
/* "cond" = it takes flag COND (conditions, TTL, ranges) and answers with an ETag. */
#define TFP_UF_FEATURE_COND "cond"
/* "answer" = it takes flag ANSWER and answers with the answer lines block. */
#define TFP_UF_FEATURE_ANSWER "answer"
/* "digest" = it takes a request's digest lines in that block and verifies, or names, the
 * document's sha-256 as over HTTP (doc/PROTOCOL.md section 2.5). */
#define TFP_UF_FEATURE_DIGEST "digest"
/* "timing" = it takes flag TIMING and answers with the timing block. */
#define TFP_UF_FEATURE_TIMING "timing"
/* "parts" = it takes flag PARTS and PART frames, and answers a request that set the flag
 * with a large body in parts. */
#define TFP_UF_FEATURE_PARTS "parts"
#define TFP_UF_FEATURES                                                                    \
    TFP_UF_FEATURE_BODY_PREFIX " " TFP_UF_FEATURE_FEED_DETACH " " TFP_UF_FEATURE_COND " "   \
    TFP_UF_FEATURE_ANSWER " " TFP_UF_FEATURE_DIGEST " " TFP_UF_FEATURE_TIMING " "          \
    TFP_UF_FEATURE_PARTS

/* The feed block's fflags and present bits. */
#define TFP_UF_FF_HAS_ACK 0x01u
#define TFP_UF_FF_JSON 0x02u
#define TFP_UF_FF_REWIND 0x04u         /* POP requests: ?rewind=1 */
#define TFP_UF_FF_STAGED 0x08u         /* INFEED, OUTFEED_PUSH: a staged body */
#define TFP_UF_FP_POSITION 0x0001u
#define TFP_UF_FP_SEQ 0x0002u
#define TFP_UF_FP_ROUND 0x0004u
#define TFP_UF_FP_GENERATION 0x0008u
#define TFP_UF_FP_DEVICE 0x0010u
#define TFP_UF_FP_RETRY_AFTER 0x0020u
#define TFP_UF_FP_RESUME_AFTER 0x0040u
#define TFP_UF_FP_ALL 0x007fu
/* The largest position, seq or after a request may carry (as HTTP's parser allows). */
#define TFP_UF_FEED_MAX_POS (UINT64_MAX / 2)

typedef enum {
    TFP_UF_HELLO = 1,
    TFP_UF_HELLO_ACK = 2,
    TFP_UF_GET = 3,
    TFP_UF_PUT = 4,
    TFP_UF_DELETE = 5,
    TFP_UF_CALL = 6,
    TFP_UF_REPLY = 7,
    TFP_UF_BYE = 8,
    TFP_UF_FEED = 9,
    TFP_UF_PART = 10
} tfp_uf_op_t;

/* Which feed operation a FEED frame asks for (the tfp_op_kind_t FEED_*; numbers only ever
 * added at the end). */
typedef enum {
    TFP_UF_FEED_LIST = 1,
    TFP_UF_FEED_DECLARE = 2,
    TFP_UF_FEED_STATS = 3,
    TFP_UF_FEED_DELETE = 4,
    TFP_UF_FEED_INFEED = 5,
    TFP_UF_FEED_POP = 6,
    TFP_UF_FEED_ACK = 7,
    TFP_UF_FEED_OUTFEED_PUSH = 8,
    TFP_UF_FEED_OUTFEED_GET = 9,
    TFP_UF_FEED_DONE = 10,
    TFP_UF_FEED_RESET = 11,
    TFP_UF_FEED_DETACH = 12,
    TFP_UF_FEED_LAST = TFP_UF_FEED_DETACH
} tfp_uf_feed_op_t;

/* The feed block (flag TFP_UF_F_FEED). Zeroed by tfp_uf_init. */
typedef struct {
    uint8_t op;                                 /* tfp_uf_feed_op_t */
    uint8_t flags;                              /* TFP_UF_FF_* */
    uint16_t present;                           /* replies: TFP_UF_FP_* */
    uint64_t seq, ack, after;
    uint64_t position, round, generation, device, retry_after, resume_after;
    char dev[TFP_MAX_TENSOR_NAME + 1];          /* NUL-terminated; "" for none */
    char producer[TFP_MAX_USER_ID + 1];
    char consumer[TFP_MAX_USER_ID + 1];
} tfp_uf_feed_t;

/* The conditions block (flag TFP_UF_F_COND). Zeroed by tfp_uf_init. */
typedef struct {
    uint8_t flags;                              /* TFP_UF_CF_* */
    uint64_t ttl_s;
    uint64_t first, last, total;
    char if_match[TFP_UF_MAX_COND + 1];         /* NUL-terminated; "" for none */
    char if_none_match[TFP_UF_MAX_COND + 1];
    char etag[TFP_UF_MAX_ETAG + 1];
} tfp_uf_cond_t;

typedef struct {
    tfp_uf_op_t op;
    uint16_t flags;
    uint64_t seq;
    tfp_status_t status;
    uint32_t wait_ms;                           /* GET only */
    uint16_t http;                              /* replies only: HTTP-equivalent status */
    uint64_t body_len;
    uint32_t prefix_len;                        /* with flag BODY_PREFIX: the body bytes
                                                 * after the frame; else 0 */
    char request_id[TFP_MAX_REQUEST_ID + 1];    /* NUL-terminated; "" for none */
    char user[TFP_MAX_USER_ID + 1];
    char name[TFP_MAX_TENSOR_NAME + 1];
    char msg[TFP_UF_MAX_MSG + 1];
    char user_principal[TFP_MAX_USER_ID + 1];   /* "" unless forwarding another's user */
    tfp_uf_feed_t feed;                         /* with flag TFP_UF_F_FEED only */
    tfp_uf_cond_t cond;                         /* with flag TFP_UF_F_COND only */
    char answer[TFP_UF_MAX_ANSWER + 1];         /* with flag TFP_UF_F_ANSWER: the lines
                                                 * (NUL-terminated; "" in requests) */
    uint32_t timing[TFP_UF_TIMING_N];           /* replies with flag TFP_UF_F_TIMING: the
                                                 * server's time in microseconds (recv,
                                                 * queue, handler, total; TFP_UF_TIMING_NONE:
                                                 * not measured); 0 otherwise */
} tfp_uf_hdr_t;

/* The HTTP request that asks what a FEED frame's block asks (doc/PROTOCOL.md section 9):
 * one description of a feed operation, rendered for HTTP here and for UCX by the frame
 * itself, so the two cannot drift (proto/http.c reads it back as the same operation:
 * tests/check_ucxframe.c, uf_feed_http). */
#define TFP_UF_FEED_HTTP_HEADERS 3
typedef struct {
    const char *method;                         /* "GET", "PUT", "POST", "DELETE" */
    char path[TFP_MAX_TENSOR_NAME + 96];        /* after the feed's URL (/v1/feeds/NAME),
                                                 * query included: "", "/done",
                                                 * "/devices/0/pop?wait=100&ack=3" */
    const char *hname[TFP_UF_FEED_HTTP_HEADERS];
    char hvalue[TFP_UF_FEED_HTTP_HEADERS][TFP_MAX_USER_ID + 32];
    size_t nheaders;
} tfp_uf_feed_http_t;
/* f's operation (wait_ms: the frame's wait) as HTTP: TFP_OK and *out, or TFP_EINVAL for a
 * block that is no feed operation on one feed (LIST included: it names none). */
tfp_status_t tfp_uf_feed_http(const tfp_uf_feed_t *f, uint32_t wait_ms, tfp_uf_feed_http_t *out);

/* Zeroes *h and sets op and seq: the rest is filled in by the caller. */
void tfp_uf_init(tfp_uf_hdr_t *h, tfp_uf_op_t op, uint64_t seq);

/* "HELLO", "GET", ...; "?" for a value that is no op. Static strings. */
const char *tfp_uf_op_name(int op);
/* "LIST", "POP", ...; "?" for a value that is no feed op. Static strings. */
const char *tfp_uf_feed_op_name(int op);
/* The features this build knows as bits: a word's (0 for a word it does not know), and the
 * set a HELLO_ACK's msg lists, read once per connection rather than its text per request. */
unsigned tfp_uf_feature_bit(const char *word);
unsigned tfp_uf_feature_bits(const char *msg);
/* 1 if a HELLO_ACK's msg lists the feature word (TFP_UF_FEATURE_*). */
int tfp_uf_has_feature(const char *msg, const char *word);
/* 1 for HELLO_ACK and REPLY, 0 for the requests and for unknown values. */
int tfp_uf_op_is_reply(int op);

/* Checks every field against the rules above: TFP_OK, or TFP_EINVAL with a message naming
 * the field. (The encoder runs this; a decoded header always passes it.) */
tfp_status_t tfp_uf_check(const tfp_uf_hdr_t *h, tfp_err_t *err);

/* Writes h into buf[0..size) (size TFP_UF_MAX_HEADER is always enough) and sets *len to the
 * bytes written. TFP_EINVAL, naming the field, if h breaks a rule or buf is too small; buf
 * and *len are then untouched. With flag BODY_PREFIX the frame alone is written: the caller
 * appends the prefix_len body bytes after it. */
tfp_status_t tfp_uf_encode(const tfp_uf_hdr_t *h, void *buf, size_t size, size_t *len,
                           tfp_err_t *err);

/* 1 if buf starts as a REPLY frame does (magic, version, op), with its seq: which request a
 * reply is for, to decode it in that request's place. Nothing else is checked: the frame is
 * still decoded (tfp_uf_decode) before anything of it is used. */
int tfp_uf_peek_reply(const void *buf, size_t len, uint64_t *seq);

/* ---- Bodies in parts ----------------------------------------------------------------------
 * UCX moves a body as one rendezvous and says nothing until it is all across, so a body
 * whose progress is wanted (a CLI transfer's bar) goes in parts: the first frame (a PUT or
 * CALL with flag PARTS, or a REPLY to a request that set it) says the whole body_len and
 * carries its first bytes (prefix and AM data); PART frames carry the rest, in order, back
 * to back, each sent once the one before it has gone (its send completed), so a receiver
 * has at most one part arriving while the previous one lands. Every part but the last holds
 * at least TFP_UF_PART_MIN bytes. A receiver checks each with tfp_uf_parts_take and treats
 * a part that breaks the rules as a broken connection; one that waits too long for the next
 * part gives up on the body (the server answers 408, the client's stall detection fails
 * the request). Only to a peer that offered TFP_UF_FEATURE_PARTS. */
#define TFP_UF_PART_MIN ((uint64_t)1 << 20)
#define TFP_UF_PART_BYTES ((uint64_t)16 << 20)  /* what this build's senders cut */

typedef struct {
    uint64_t seq;
    uint64_t total;                             /* the body's size */
    uint64_t next;                              /* where the next part starts */
    char request_id[TFP_MAX_REQUEST_ID + 1];
} tfp_uf_parts_t;

/* The first frame of a body (h, decoded: a request or REPLY that carries a body) with its
 * AM data's length: TFP_OK and *t set (tfp_uf_parts_done says whether PART frames follow),
 * or TFP_EPROTO: the frame's bytes do not add up to its body_len (more, or fewer without
 * flag PARTS or below TFP_UF_PART_MIN). */
tfp_status_t tfp_uf_parts_begin(tfp_uf_parts_t *t, const tfp_uf_hdr_t *h, uint64_t data_len,
                                tfp_err_t *err);
/* A decoded PART frame and its AM data's length, against t: TFP_OK and t advanced, or
 * TFP_EPROTO (another request's, out of place, past the total, too small) with t as it was. */
tfp_status_t tfp_uf_parts_take(tfp_uf_parts_t *t, const tfp_uf_hdr_t *part, uint64_t data_len,
                               tfp_err_t *err);
/* 1 once every byte of the body is accounted for. */
int tfp_uf_parts_done(const tfp_uf_parts_t *t);
/* The PART frame for the next piece of t's body, of len bytes (at most what is left): h is
 * set and t advanced past it. A sender's counterpart of tfp_uf_parts_take. */
void tfp_uf_parts_next(tfp_uf_parts_t *t, uint64_t len, tfp_uf_hdr_t *h);

/* Decodes exactly len bytes (the whole AM header: trailing bytes are refused, except, with
 * flag BODY_PREFIX, the body's prefix: out->prefix_len bytes at buf + len - prefix_len).
 * TFP_OK and *out set, or TFP_EPROTO with a message naming what was wrong and *out
 * untouched. */
tfp_status_t tfp_uf_decode(const void *buf, size_t len, tfp_uf_hdr_t *out, tfp_err_t *err);

#endif
