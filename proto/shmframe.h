/* shmframe.h - the messages of tfetch's same-host shared-memory transport (shm/memfd).
 *
 * One message per SOCK_SEQPACKET datagram on the unix socket the upgrade names
 * (transports/shm.h moves them, with their descriptors); this file says what the bytes may
 * be. Wire layout, little-endian, 48 fixed bytes then the string, no terminator:
 *
 *   off size field
 *     0   4  magic      0x31534654 ("TFS1" as bytes)
 *     4   1  version    1
 *     5   1  op         tfp_sf_op_t
 *     6   2  str_len    the string's bytes (name, token or message)
 *     8   8  seq        the client's request number, echoed in the reply
 *    16   4  status     i32: a tfp_status_t in REPLY, 0 in requests
 *    20   4  flags/http requests: flags (TFP_SF_F_COND on GET and COMMIT, TFP_SF_F_CALL on
 *                       ALLOC, else 0);
 *                       REPLY: the HTTP-equivalent status (0 unsaid, else 100..599: 200,
 *                       304 for a GET whose If-None-Match holds, 201 or 204 for a COMMIT,
 *                       the error's); ITEM: 0
 *    24   8  lease      REPLY to GET/ALLOC: the lease it opened; RELEASE, COMMIT: the one
 *                       it names; 0 elsewhere
 *    32   8  a          GET REPLY: the document's offset in the memfd; ALLOC: the size
 *                       asked; COMMIT: the document's length; 0 elsewhere
 *    40   8  b          GET REPLY: the document's length; COMMIT: the TTL in seconds (0:
 *                       for ever, at most TFP_MAX_TTL_S); COMMIT REPLY: the stored
 *                       version (a: 1 if it replaced one, 0 if new); 0 elsewhere
 *    48      string
 *
 * Ops (a decoder refuses anything else, and so does the encoder):
 *   HELLO    first message on a connection: string = the one-time token of the upgrade (32
 *            lowercase hex), a = 0 or TFP_SF_HELLO_V2 (below); the REPLY says whether it was
 *            taken, and to a V2 HELLO its a = the ops the daemon takes beyond GET, ALLOC,
 *            STAGE, COMMIT, RELEASE, TOKEN and RING (TFP_SF_CAP_*; an older daemon says 0)
 *   GET      string = the tensor's name (tfp_name_valid), then with flag COND its
 *            conditions (below); the REPLY carries the document's memfd (sealed against
 *            writes and resizes), a = offset, b = length, a lease, string = its ETag; or,
 *            http 304, none of them (If-None-Match names the stored version)
 *   ALLOC    a = the size of a document to PUT (1..TFP_SF_MAX_SIZE); the REPLY carries a
 *            writable memfd of exactly that size and a lease naming it. With flag CALL
 *            (only to a daemon that named TFP_SF_CAP_CALL) the buffer is a CALL's request:
 *            the right asked is call (on some route) instead of write, and its bytes count
 *            in the lease bound instead of the store's
 *   STAGE    a = the size of a staging buffer (1..TFP_SF_MAX_SIZE): memory lent to a
 *            producer for its pushes, which stays the client's (writable, reused) until it
 *            sends RELEASE with its lease or the connection closes. The REPLY carries a
 *            memfd of exactly that size, sealed against resizes, and lease = the buffer's
 *            id, random (never 0): a push over UCX names it (a staged body, below) instead
 *            of carrying the bytes, and tfetchd copies them from there.
 *   COMMIT   lease = the ALLOC's, a = the document's length (<= its size), b = TTL,
 *            string = name, then with flag COND its conditions; the REPLY's b is the stored
 *            version, its string the ETag ("EPOCH-VERSION", quoted, as HTTP's)
 *   Conditions (flag COND; tfp_sf_target reads them): after the name, one to two lines,
 *            each "\n" then "If-Match: " or "If-None-Match: " and the header's value as HTTP
 *            takes it (an ETag list or "*", proto/httpcond.h), each at most once; and lines
 *            of the digest fields HTTP carries (a COMMIT's "Repr-Digest: " and
 *            "Content-Digest: ", a GET's "Want-Repr-Digest: ", "Want-Content-Digest: ",
 *            their values read by tfp_op_digest_lines, proto/op.h; a daemon of before
 *            refuses them, and the client goes over HTTP). A GET or COMMIT answered for a
 *            request without the flag is exactly what it was.
 *   CALL     an exchange (POST /v1/call/ROUTE): lease = the ALLOC's buffer holding the
 *            request's safetensors document, a = its length (<= the buffer's size), b = 0,
 *            string = the route's name (tfp_name_valid), then each at most once, in this
 *            order, "\nUser: " and the caller's user id (tfp_user_id_valid), "\nRequest-Id: "
 *            and the request id (tfp_request_id_valid); flags 0. Sent only on a connection
 *            whose HELLO said TFP_SF_HELLO_V2 or later and whose REPLY to it named TFP_SF_CAP_CALL.
 *            The buffer is sealed and lent to the route as the request body, as COMMIT's;
 *            whatever the outcome it is no longer lent. The REPLY is a GET's: the answer
 *            document's memfd (sealed against writes and resizes), a = offset, b = length,
 *            a lease; or a failure: status, http, message. A failed REPLY with status
 *            TF_ENOTIMPL and http 0 says the call was not run at all (its route answers
 *            later, from a worker, and a request over this socket cannot wait): the client
 *            sends it over UCX or HTTP instead. A route's own TF_ENOTIMPL has http 501.
 *   RELEASE  lease = a GET's or CALL's lease the client no longer maps, an ALLOC's buffer it
 *            gives up, or a STAGE's buffer it no longer uses (no REPLY)
 *   REPLY    status; http; string = the error message (UTF-8, at most TFP_SF_MAX_MSG) when
 *            not TFP_OK, the ETag on an OK reply to GET or COMMIT (to a HELLO_V3 client: then
 *            "\n" and the answer lines, proto/answer.h); a descriptor only with an OK reply
 *            to GET, ALLOC, STAGE or RING
 *
 * A feed's same-host ring (DESIGN.md section 7; doc/PROTOCOL.md "Feeds on one host") runs on
 * a connection of its own, opened with a token that TOKEN gives on an admitted one:
 *   TOKEN    no fields; the REPLY's string is a new one-time token (32 lowercase hex) for
 *            the same principal, good for one HELLO on a new connection
 *   RING     string = "FEED/DEV/CONSUMER" (a feed name, a device token, a consumer id),
 *            a = slots (1..TFP_SF_MAX_SLOTS), b = slot bytes (0: the daemon's choice, else
 *            at most TFP_SF_MAX_SLOT); the first request after HELLO. The REPLY carries the
 *            ring's memfd (sealed against resizes; the daemon writes it, the client maps it
 *            read-only), a = slots (at least those asked: the daemon adds room for its
 *            queue's items), b = slot bytes. From then on the connection is the
 *            ring's: only CREDIT, ACK and FREE go up, only ITEM comes down.
 *   CREDIT   a = how many items the client has asked for in all (cumulative, growing)
 *   ACK      a = position released through (cumulative), b = its generation
 *   FREE     a = a slot (1-based) whose item the client no longer maps
 *   ITEM     the daemon's, unasked: status OK with lease = the item's position (>= 1),
 *            a = its offset, b = its length (> 0), string = "SEQ ROUND GENERATION" in
 *            decimal; the item is in slot a / slot bytes of the ring, or, with a memfd
 *            attached (an item larger than a slot), at a in that memfd (sealed against
 *            writes). lease 0 (a, b 0): no item, the generation changed (a reset). Status
 *            TFP_EDONE: the feed is done and this queue drained; any other status: the
 *            ring is over (string = why), and the connection closes.
 * Pure functions, no I/O; any thread.
 */
#ifndef TFP_SHMFRAME_H
#define TFP_SHMFRAME_H

#include <stddef.h>
#include <stdint.h>
#include "proto/httpcond.h"
#include "proto/ids.h"
#include "proto/status.h"

#define TFP_SF_MAGIC 0x31534654u
#define TFP_SF_VERSION 1
/* HELLO's a: 0 from a 0.1.0 client, whose decoder refuses a REPLY with its HTTP status set
 * (the word was reserved); TFP_SF_HELLO_V2 from a client that reads it (and sent only to a
 * server whose upgrade answer named protocol 2 or later: a 0.1.0 daemon refuses it). */
#define TFP_SF_HELLO_V2 2
/* The OK REPLY to a V2 HELLO: a = these bits, the ops the daemon takes besides the first
 * ones. A client sends CALL only when TFP_SF_CAP_CALL is set; a daemon without it (0.2.x
 * and before) answers 0, and a CALL it got would close the connection. */
#define TFP_SF_CAP_CALL 1u
#define TFP_SF_CAPS TFP_SF_CAP_CALL             /* what this tree's daemon takes */
/* HELLO's a from a client that also reads answer lines after the ETag of an OK REPLY (the
 * answer's other typed fields, the server's time among them: proto/answer.h,
 * tfp_answer_lines): "ETAG\nName: value\n..." (sent only to a server of protocol 2 or
 * later, as V2; it reads the REPLY's HTTP status too). */
#define TFP_SF_HELLO_V3 3
#define TFP_SF_FIXED 48
#define TFP_SF_MAX_MSG 512
#define TFP_SF_MAX_STR 1024                     /* every string fits in this: a name and
                                                 * two conditions of TFP_SF_MAX_COND */
#define TFP_SF_MAX_COND 360                     /* one condition's value */
#define TFP_SF_F_COND 1u                        /* GET, COMMIT: conditions follow the name */
#define TFP_SF_F_CALL 2u                        /* ALLOC: the buffer is for a CALL */
#define TFP_SF_MAX (TFP_SF_FIXED + TFP_SF_MAX_STR)
#define TFP_SF_MAX_SIZE ((uint64_t)1 << 46)     /* 64 TiB: a memfd's size, sanity only */

typedef enum {
    TFP_SF_HELLO = 1,
    TFP_SF_GET = 2,
    TFP_SF_ALLOC = 3,
    TFP_SF_COMMIT = 4,
    TFP_SF_RELEASE = 5,
    TFP_SF_REPLY = 6,
    TFP_SF_TOKEN = 7,
    TFP_SF_RING = 8,
    TFP_SF_CREDIT = 9,
    TFP_SF_ACK = 10,
    TFP_SF_FREE = 11,
    TFP_SF_ITEM = 12,
    TFP_SF_STAGE = 13,
    TFP_SF_CALL = 14,
} tfp_sf_op_t;

#define TFP_SF_MAX_SLOTS 64
#define TFP_SF_MAX_SLOT ((uint64_t)1 << 32)     /* 4 GiB: one slot's bytes */

typedef struct {
    tfp_sf_op_t op;
    uint64_t seq;
    int32_t status;
    uint32_t flags;                             /* requests: TFP_SF_F_* */
    uint32_t http;                              /* REPLY: the HTTP-equivalent status, 0 */
    uint64_t lease, a, b;
    char str[TFP_SF_MAX_STR + 1];               /* NUL-terminated copy of the string */
    size_t str_len;
} tfp_sf_t;

/* Encodes m into buf (size >= TFP_SF_MAX): the length, or 0 with err set (TFP_EINVAL) when m
 * breaks a rule above. */
size_t tfp_sf_encode(const tfp_sf_t *m, uint8_t *buf, size_t size, tfp_err_t *err);
/* Decodes one message of len bytes: TFP_OK and *out, or TFP_EPROTO naming the field at fault
 * (*out then untouched). */
tfp_status_t tfp_sf_decode(const uint8_t *buf, size_t len, tfp_sf_t *out, tfp_err_t *err);
/* Checks the geometry of a GET REPLY against the memfd the client received: the document
 * [a, a + b) inside size bytes, b > 0. TFP_EPROTO when not. */
tfp_status_t tfp_sf_check_span(uint64_t a, uint64_t b, uint64_t size, tfp_err_t *err);

/* A GET's or COMMIT's string: the tensor's name into name, and with flag COND its
 * conditions into *if_match and *if_none_match (each zeroed first; present when given;
 * either may be NULL). TFP_OK, or TFP_EPROTO saying what is wrong. */
tfp_status_t tfp_sf_target(const tfp_sf_t *m, char name[TFP_MAX_TENSOR_NAME + 1],
                           tfp_etags_t *if_match, tfp_etags_t *if_none_match, tfp_err_t *err);
/* Writes a GET's or COMMIT's string: name, then each condition given (NULL or "": none);
 * sets flag COND when there is one. TFP_OK, or TFP_EINVAL when it does not fit or breaks a
 * rule (tfp_sf_target's). */
tfp_status_t tfp_sf_set_target(tfp_sf_t *m, const char *name, const char *if_match,
                               const char *if_none_match, tfp_err_t *err);
/* Appends a digest field's line to a GET's or COMMIT's string made by tfp_sf_set_target
 * ("\nRepr-Digest: VALUE", or Content-Digest, Want-Repr-Digest, Want-Content-Digest) and sets
 * flag COND. TFP_OK, or TFP_EINVAL (no room, not such a field: m unchanged but the flag). */
tfp_status_t tfp_sf_add_line(tfp_sf_t *m, const char *name, const char *value, tfp_err_t *err);
/* An OK REPLY's ETag (the string of a GET's or COMMIT's answer): TFP_OK when it is one
 * strong tag (then copied to etag), TFP_EPROTO otherwise (an older server says none). */
tfp_status_t tfp_sf_reply_etag(const tfp_sf_t *m, char etag[TFP_ETAG_LEN], tfp_err_t *err);

/* A CALL's string: the route into route, the user id into user and the request id into
 * request_id ("" when absent; any may be NULL). TFP_OK, or TFP_EPROTO saying what is wrong. */
tfp_status_t tfp_sf_call_spec(const tfp_sf_t *m, char route[TFP_MAX_TENSOR_NAME + 1],
                              char user[TFP_MAX_USER_ID + 1],
                              char request_id[TFP_MAX_REQUEST_ID + 1], tfp_err_t *err);
/* Writes a CALL's string (user, request_id: NULL or "" for none). TFP_OK, or TFP_EINVAL
 * when one breaks tfp_sf_call_spec's rules. */
tfp_status_t tfp_sf_set_call(tfp_sf_t *m, const char *route, const char *user,
                             const char *request_id, tfp_err_t *err);

/* A RING request's string split into its three parts (each checked: tfp_name_valid for the
 * feed and the device token, tfp_user_id_valid for the consumer). TFP_OK, or TFP_EPROTO. */
tfp_status_t tfp_sf_ring_spec(const char *s, char feed[TFP_MAX_TENSOR_NAME + 1],
                              char dev[TFP_MAX_TENSOR_NAME + 1],
                              char consumer[TFP_MAX_USER_ID + 1], tfp_err_t *err);
/* An OK ITEM's numbers: writes "SEQ ROUND GENERATION" into m's string; reads them back
 * (TFP_EPROTO unless exactly three decimal numbers, one space apart). */
void tfp_sf_item_set(tfp_sf_t *m, uint64_t seq, uint64_t round, uint64_t generation);
tfp_status_t tfp_sf_item_get(const tfp_sf_t *m, uint64_t *seq, uint64_t *round,
                             uint64_t *generation, tfp_err_t *err);

/* A staged body: what a push over UCX carries instead of its document when the document
 * lies in a staging buffer (STAGE) of the same tfetchd (doc/PROTOCOL.md, "Staged pushes").
 * 24 bytes, little-endian: lease (8, the STAGE reply's), offset (8), length (8) of the
 * document in that buffer. The decoder checks only the numbers' shape (lease != 0, length
 * 1..TFP_SF_MAX_SIZE, offset + length <= TFP_SF_MAX_SIZE); the daemon checks them against
 * the buffer, and the copy it takes like any body. */
#define TFP_SF_STAGED_LEN 24

typedef struct {
    uint64_t lease, offset, length;
} tfp_sf_staged_t;

void tfp_sf_staged_encode(const tfp_sf_staged_t *ref, uint8_t out[TFP_SF_STAGED_LEN]);
/* TFP_OK and *out, or TFP_EBADREQ (*out untouched). */
tfp_status_t tfp_sf_staged_decode(const uint8_t *buf, size_t len, tfp_sf_staged_t *out,
                                  tfp_err_t *err);

#endif
