/* ucxframe.c - encoder and strict decoder of the UCX active-message header (ucxframe.h).
 *
 * One rule checker serves both directions: the decoder first checks what only raw bytes can
 * get wrong (length, magic, version, string lengths, NUL bytes), copies the
 * strings out and then runs the same checker the encoder runs, reporting TFP_EPROTO where
 * the encoder reports TFP_EINVAL. Fields are read and written byte by byte in little-endian
 * order, so alignment and host byte order never matter. No state; any thread.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proto/auth.h"
#include "proto/httpcond.h"
#include "proto/op.h"
#include "proto/jsonw.h"
#include "proto/le.h"
#include "proto/ucxframe.h"
#include "proto/answer.h"
#include "proto/shmframe.h"
#include "proto/upgrade.h"
#include "proto/utf8.h"

#define WHAT "ucx frame"

/* ---- little-endian fields ------------------------------------------------------------ */

/* ---- ops and statuses ---------------------------------------------------------------- */

const char *tfp_uf_op_name(int op)
{
    switch (op) {
    case TFP_UF_HELLO: return "HELLO";
    case TFP_UF_HELLO_ACK: return "HELLO_ACK";
    case TFP_UF_GET: return "GET";
    case TFP_UF_PUT: return "PUT";
    case TFP_UF_DELETE: return "DELETE";
    case TFP_UF_CALL: return "CALL";
    case TFP_UF_REPLY: return "REPLY";
    case TFP_UF_BYE: return "BYE";
    case TFP_UF_FEED: return "FEED";
    case TFP_UF_PART: return "PART";
    }
    return "?";
}

const char *tfp_uf_feed_op_name(int op)
{
    static const char *const names[] = {"?", "LIST", "DECLARE", "STATS", "DELETE", "INFEED",
                                         "POP", "ACK", "OUTFEED_PUSH", "OUTFEED_GET", "DONE",
                                         "RESET", "DETACH"};
    _Static_assert(sizeof names / sizeof names[0] == TFP_UF_FEED_LAST + 1, "a name per op");
    return op >= TFP_UF_FEED_LIST && op <= TFP_UF_FEED_LAST ? names[op] : "?";
}

static int op_known(int op)
{
    return op >= TFP_UF_HELLO && op <= TFP_UF_PART;
}

int tfp_uf_op_is_reply(int op)
{
    return op == TFP_UF_HELLO_ACK || op == TFP_UF_REPLY;
}

/* Ops that name a tensor or route, and must. */
static int op_needs_name(int op)
{
    return op == TFP_UF_GET || op == TFP_UF_PUT || op == TFP_UF_DELETE || op == TFP_UF_CALL;
}

/* Ops that may carry an empty request id. */
static int op_id_optional(int op)
{
    return op == TFP_UF_HELLO || op == TFP_UF_HELLO_ACK || op == TFP_UF_BYE;
}

/* Ops whose body_len may be non-zero. */
static int op_has_body(int op)
{
    return op == TFP_UF_PUT || op == TFP_UF_CALL || op == TFP_UF_REPLY || op == TFP_UF_FEED ||
           op == TFP_UF_PART;
}

/* Ops that may carry flag ANSWER or TIMING: what has an answer of its own, and REPLY. */
static int op_answers(int op)
{
    return op == TFP_UF_GET || op == TFP_UF_PUT || op == TFP_UF_DELETE || op == TFP_UF_CALL ||
           op == TFP_UF_FEED || op == TFP_UF_REPLY;
}

/* Ops whose wait_ms may be non-zero (FEED: only some feed ops, checked with the block). */
static int op_waits(int op)
{
    return op == TFP_UF_GET || op == TFP_UF_FEED;
}

static int status_known(int64_t v)
{
    switch (v) {
#define X(n, val, h, s) case (val):
        TFP_STATUS_MAP(X)
#undef X
        return 1;
    }
    return 0;
}

static const char *const known_features[] = {
    TFP_UF_FEATURE_BODY_PREFIX, TFP_UF_FEATURE_FEED_DETACH, TFP_UF_FEATURE_COND,
    TFP_UF_FEATURE_ANSWER, TFP_UF_FEATURE_DIGEST, TFP_UF_FEATURE_TIMING, TFP_UF_FEATURE_PARTS};

unsigned tfp_uf_feature_bit(const char *word)
{
    for (unsigned i = 0; word && i < sizeof known_features / sizeof known_features[0]; i++)
        if (strcmp(word, known_features[i]) == 0)
            return 1u << i;
    return 0;
}

unsigned tfp_uf_feature_bits(const char *msg)
{
    unsigned bits = 0;
    for (unsigned i = 0; i < sizeof known_features / sizeof known_features[0]; i++)
        if (tfp_uf_has_feature(msg, known_features[i]))
            bits |= 1u << i;
    return bits;
}

int tfp_uf_has_feature(const char *msg, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = msg; p && *p;) {
        while (*p == ' ')
            p++;
        size_t len = strcspn(p, " ");
        if (len == n && n && memcmp(p, word, n) == 0)
            return 1;
        p += len;
    }
    return 0;
}

void tfp_uf_init(tfp_uf_hdr_t *h, tfp_uf_op_t op, uint64_t seq)
{
    if (h == NULL)
        return;
    memset(h, 0, sizeof *h);
    h->op = op;
    h->seq = seq;
}

/* ---- the rules ----------------------------------------------------------------------- */

static tfp_status_t check_strings(const tfp_uf_hdr_t *h, tfp_status_t code, tfp_err_t *err)
{
    int op = (int)h->op;
    const char *on = tfp_uf_op_name(op);
    size_t nmsg;
    tfp_status_t st;
    tfp_err_t sub;

    if (memchr(h->request_id, '\0', sizeof h->request_id) == NULL ||
        memchr(h->user, '\0', sizeof h->user) == NULL ||
        memchr(h->name, '\0', sizeof h->name) == NULL ||
        memchr(h->msg, '\0', sizeof h->msg) == NULL ||
        memchr(h->user_principal, '\0', sizeof h->user_principal) == NULL)
        return tfp_err_set(err, code, WHAT ": a string field is not NUL-terminated");
    if (h->request_id[0] == '\0') {
        if (!op_id_optional(op))
            return tfp_err_set(err, code, WHAT ": request id is missing (required on %s)", on);
    } else if (!tfp_request_id_valid(h->request_id)) {
        return tfp_err_set(err, code, WHAT ": request id is not [A-Za-z0-9._:-]{1,128}");
    }
    if (op == TFP_UF_HELLO && h->user[0] != '\0')
        return tfp_err_set(err, code, WHAT ": user must be empty on HELLO");
    if (h->user[0] != '\0' && !tfp_user_id_valid(h->user))
        return tfp_err_set(err, code, WHAT ": user is not [A-Za-z0-9._-]{1,128}");
    if (h->user_principal[0] != '\0') {
        if (op != TFP_UF_GET && op != TFP_UF_PUT && op != TFP_UF_DELETE && op != TFP_UF_CALL &&
            op != TFP_UF_FEED)
            return tfp_err_set(err, code, WHAT ": user principal on %s", on);
        if (h->user[0] == '\0')
            return tfp_err_set(err, code, WHAT ": user principal without a user");
        if (!tfp_user_id_valid(h->user_principal))
            return tfp_err_set(err, code, WHAT ": user principal is not [A-Za-z0-9._-]{1,128}");
    }
    if (op == TFP_UF_HELLO) {
        if (!tfp_up_token_valid(h->name))
            return tfp_err_set(err, code, WHAT ": HELLO token is not %d lowercase hex "
                               "characters", TFP_UP_TOKEN_LEN);
    } else if (h->name[0] == '\0') {
        if (op_needs_name(op))
            return tfp_err_set(err, code, WHAT ": name is missing (required on %s)", on);
    } else if (!tfp_name_valid(h->name)) {
        return tfp_err_set(err, code, WHAT ": name is not [A-Za-z0-9._-]{1,255}");
    }
    nmsg = strlen(h->msg);
    if (!tfp_utf8_valid(h->msg, nmsg))
        return tfp_err_set(err, code, WHAT ": msg is not valid UTF-8");
    if (op == TFP_UF_HELLO) {
        tfp_up_host_t host;
        char proof[TFP_AUTH_PROOF_LEN + 1];
        size_t nident;

        if (tfp_auth_hello_split(h->msg, nmsg, &nident, proof) != TFP_OK)
            return tfp_err_set(err, code, WHAT ": HELLO msg is not \"boot_id netns\" then "
                               "an optional 64-hex-digit proof");
        st = tfp_up_ident_parse(h->msg, nident, &host, &sub);
        if (st != TFP_OK)
            return tfp_err_set(err, code, WHAT ": HELLO msg is not \"boot_id netns\" (%s)",
                               sub.msg);
    }
    return TFP_OK;
}

/* The feed block's rules (flag FEED set): what each feed op may carry, one way or the other. */
static tfp_status_t check_feed(const tfp_uf_hdr_t *h, tfp_status_t code, tfp_err_t *err)
{
    const tfp_uf_feed_t *f = &h->feed;
    int k = f->op;
    const char *fn = tfp_uf_feed_op_name(k);

    if (k < TFP_UF_FEED_LIST || k > TFP_UF_FEED_LAST)
        return tfp_err_set(err, code, WHAT ": unknown feed op %d", k);
    if (f->flags & ~(TFP_UF_FF_HAS_ACK | TFP_UF_FF_JSON | TFP_UF_FF_REWIND | TFP_UF_FF_STAGED))
        return tfp_err_set(err, code, WHAT ": feed flags 0x%02x has unknown bits", f->flags);
    if (memchr(f->dev, '\0', sizeof f->dev) == NULL ||
        memchr(f->producer, '\0', sizeof f->producer) == NULL ||
        memchr(f->consumer, '\0', sizeof f->consumer) == NULL)
        return tfp_err_set(err, code, WHAT ": a feed string is not NUL-terminated");
    if (h->op == TFP_UF_REPLY) {
        if (f->dev[0] || f->producer[0] || f->consumer[0] || f->ack || f->after ||
            (f->flags & (TFP_UF_FF_HAS_ACK | TFP_UF_FF_REWIND | TFP_UF_FF_STAGED)))
            return tfp_err_set(err, code, WHAT ": a feed REPLY carries request fields "
                               "(dev, producer, consumer, ack, after, staged)");
        if (f->present & ~TFP_UF_FP_ALL)
            return tfp_err_set(err, code, WHAT ": feed present 0x%04x has unknown bits",
                               f->present);
        const uint64_t v[] = {f->position, f->seq, f->round, f->generation, f->device,
                              f->retry_after, f->resume_after};
        for (unsigned i = 0; i < sizeof v / sizeof v[0]; i++)
            if (v[i] != 0 && !(f->present & (1u << i)))
                return tfp_err_set(err, code, WHAT ": feed REPLY sets a number its present "
                                   "bits do not flag (bit %u)", i);
        if ((f->flags & TFP_UF_FF_JSON) && h->body_len == 0)
            return tfp_err_set(err, code, WHAT ": feed flag JSON on a REPLY without a body");
        return TFP_OK;
    }
    /* a FEED request */
    if (f->present || f->position || f->round || f->generation || f->device ||
        f->retry_after || f->resume_after)
        return tfp_err_set(err, code, WHAT ": FEED %s carries reply fields", fn);
    if (k == TFP_UF_FEED_LIST ? h->name[0] != '\0' : h->name[0] == '\0')
        return tfp_err_set(err, code, WHAT ": FEED %s %s feed name", fn,
                           k == TFP_UF_FEED_LIST ? "takes no" : "needs a");
    int dev_needed = k == TFP_UF_FEED_POP || k == TFP_UF_FEED_ACK ||
                     k == TFP_UF_FEED_DETACH || k == TFP_UF_FEED_OUTFEED_PUSH;
    int pushes = k == TFP_UF_FEED_INFEED || k == TFP_UF_FEED_OUTFEED_PUSH;
    int consumes = k == TFP_UF_FEED_POP || k == TFP_UF_FEED_ACK || k == TFP_UF_FEED_DETACH;
    if (f->dev[0] == '\0' ? dev_needed : !(dev_needed || k == TFP_UF_FEED_INFEED))
        return tfp_err_set(err, code, WHAT ": FEED %s %s device", fn,
                           dev_needed ? "needs a" : "takes no");
    if (f->dev[0] && !tfp_name_valid(f->dev))
        return tfp_err_set(err, code, WHAT ": feed device is not [A-Za-z0-9._-]{1,255}");
    if (f->producer[0] && !pushes)
        return tfp_err_set(err, code, WHAT ": FEED %s takes no producer", fn);
    if (f->producer[0] && !tfp_user_id_valid(f->producer))
        return tfp_err_set(err, code, WHAT ": feed producer is not [A-Za-z0-9._-]{1,128}");
    if (f->consumer[0] == '\0' ? consumes : !consumes)
        return tfp_err_set(err, code, WHAT ": FEED %s %s consumer", fn,
                           consumes ? "needs a" : "takes no");
    if (f->consumer[0] && !tfp_user_id_valid(f->consumer))
        return tfp_err_set(err, code, WHAT ": feed consumer is not [A-Za-z0-9._-]{1,128}");
    if (f->seq && !pushes)
        return tfp_err_set(err, code, WHAT ": FEED %s takes no seq", fn);
    if ((f->flags & TFP_UF_FF_HAS_ACK) ? !consumes : (k == TFP_UF_FEED_ACK || f->ack != 0))
        return tfp_err_set(err, code, WHAT ": FEED %s: ack and its flag HAS_ACK disagree "
                           "(only POP and DETACH may, and ACK must, carry one)", fn);
    if ((f->flags & TFP_UF_FF_REWIND) && k != TFP_UF_FEED_POP)
        return tfp_err_set(err, code, WHAT ": FEED %s: only POP may rewind", fn);
    if (f->after && k != TFP_UF_FEED_OUTFEED_GET)
        return tfp_err_set(err, code, WHAT ": FEED %s takes no after", fn);
    if (f->seq > TFP_UF_FEED_MAX_POS || f->ack > TFP_UF_FEED_MAX_POS ||
        f->after > TFP_UF_FEED_MAX_POS)
        return tfp_err_set(err, code, WHAT ": feed seq, ack or after is above 2^63-1");
    if (h->wait_ms && !(pushes || k == TFP_UF_FEED_POP || k == TFP_UF_FEED_OUTFEED_GET))
        return tfp_err_set(err, code, WHAT ": wait_ms %u on FEED %s (which does not wait)",
                           (unsigned)h->wait_ms, fn);
    int json = (f->flags & TFP_UF_FF_JSON) != 0;
    if (k == TFP_UF_FEED_DECLARE ? (!json || h->body_len == 0) : json)
        return tfp_err_set(err, code, WHAT ": FEED %s: %s", fn, k == TFP_UF_FEED_DECLARE
                           ? "a declaration is a JSON body (flag JSON, body_len > 0)"
                           : "only DECLARE has a JSON body");
    if ((f->flags & TFP_UF_FF_STAGED) &&
        (!pushes || h->body_len != TFP_SF_STAGED_LEN || (h->flags & TFP_UF_F_BODY_PREFIX)))
        return tfp_err_set(err, code, WHAT ": FEED %s: flag STAGED is for INFEED and "
                           "OUTFEED_PUSH with a body of exactly %d bytes, no prefix", fn,
                           TFP_SF_STAGED_LEN);
    if (h->body_len && !pushes && k != TFP_UF_FEED_DECLARE)
        return tfp_err_set(err, code, WHAT ": body_len %llu on FEED %s (which has no body)",
                           (unsigned long long)h->body_len, fn);
    return TFP_OK;
}

/* An If-Match / If-None-Match value: "" (none), or "*" or a list of entity tags. */
static int cond_list_ok(const char *v)
{
    tfp_etags_t l;
    return v[0] == '\0' || tfp_etags_parse(v, 1, &l) == 0;
}

/* The conditions block's rules (flag COND set): a request's conditions, TTL and range, or a
 * reply's ETag and range. */
static tfp_status_t check_cond(const tfp_uf_hdr_t *h, tfp_status_t code, tfp_err_t *err)
{
    const tfp_uf_cond_t *c = &h->cond;
    const char *on = tfp_uf_op_name((int)h->op);
    int range = (c->flags & TFP_UF_CF_RANGE) != 0;

    if (h->op != TFP_UF_GET && h->op != TFP_UF_PUT && h->op != TFP_UF_DELETE &&
        h->op != TFP_UF_REPLY && h->op != TFP_UF_PART)
        return tfp_err_set(err, code, WHAT ": flag COND on %s", on);
    if (h->flags & TFP_UF_F_FEED)
        return tfp_err_set(err, code, WHAT ": flags COND and FEED together");
    if (c->flags & ~TFP_UF_CF_RANGE)
        return tfp_err_set(err, code, WHAT ": cond flags 0x%02x has unknown bits", c->flags);
    if (memchr(c->if_match, '\0', sizeof c->if_match) == NULL ||
        memchr(c->if_none_match, '\0', sizeof c->if_none_match) == NULL ||
        memchr(c->etag, '\0', sizeof c->etag) == NULL)
        return tfp_err_set(err, code, WHAT ": a cond string is not NUL-terminated");
    if (h->op == TFP_UF_PART) {
        /* Only the piece's place: first..last within total, as many bytes as it carries. */
        if (!range || c->if_match[0] || c->if_none_match[0] || c->etag[0] || c->ttl_s)
            return tfp_err_set(err, code, WHAT ": a PART's cond block carries only its range");
        if (c->first > c->last || c->last >= c->total || h->body_len != c->last - c->first + 1)
            return tfp_err_set(err, code, WHAT ": PART range %llu-%llu/%llu does not hold its "
                               "%llu bytes within the total", (unsigned long long)c->first,
                               (unsigned long long)c->last, (unsigned long long)c->total,
                               (unsigned long long)h->body_len);
        return TFP_OK;
    }
    if (h->op == TFP_UF_REPLY) {
        if (c->if_match[0] || c->if_none_match[0] || c->ttl_s)
            return tfp_err_set(err, code, WHAT ": a cond REPLY carries request fields "
                               "(if_match, if_none_match, ttl)");
        if (c->etag[0] && !tfp_etag_valid(c->etag))
            return tfp_err_set(err, code, WHAT ": cond etag is not one entity tag");
        if (range ? !(c->first <= c->last && c->last < c->total) &&
                        !(c->first == UINT64_MAX && c->last == UINT64_MAX)
                  : (c->first || c->last || c->total))
            return tfp_err_set(err, code, WHAT ": cond range %llu-%llu/%llu is not within "
                               "its total, or set without flag RANGE",
                               (unsigned long long)c->first, (unsigned long long)c->last,
                               (unsigned long long)c->total);
        if (!range && !c->etag[0])
            return tfp_err_set(err, code, WHAT ": a cond REPLY without an etag or a range");
        return TFP_OK;
    }
    if (c->etag[0] || c->total)
        return tfp_err_set(err, code, WHAT ": %s carries reply fields (etag, total)", on);
    if (!cond_list_ok(c->if_match) || !cond_list_ok(c->if_none_match))
        return tfp_err_set(err, code, WHAT ": if_match or if_none_match is not * or a list "
                           "of at most %d entity tags", TFP_ETAGS_MAX);
    if (c->ttl_s && (h->op != TFP_UF_PUT || c->ttl_s > TFP_UF_MAX_TTL))
        return tfp_err_set(err, code, WHAT ": ttl %llu on %s (PUT only, at most %u)",
                           (unsigned long long)c->ttl_s, on, TFP_UF_MAX_TTL);
    if (range ? h->op != TFP_UF_GET || c->first > c->last : (c->first || c->last))
        return tfp_err_set(err, code, WHAT ": cond range on %s (GET only, first <= last)", on);
    return TFP_OK;
}

static tfp_status_t check_answer(const tfp_uf_hdr_t *h, tfp_status_t code, tfp_err_t *err)
{
    size_t n = strnlen(h->answer, sizeof h->answer);
    if (!op_answers((int)h->op))
        return tfp_err_set(err, code, WHAT ": flag ANSWER on %s", tfp_uf_op_name((int)h->op));
    if (n > TFP_UF_MAX_ANSWER)
        return tfp_err_set(err, code, WHAT ": the answer lines are not NUL-terminated");
    if (!tfp_answer_lines_valid(h->answer, n))
        return tfp_err_set(err, code, WHAT ": the answer block is not lines \"Name: value\"");
    return TFP_OK;
}

/* Flag TIMING on the ops that take ANSWER; numbers only in a REPLY that carries the block. */
static tfp_status_t check_timing(const tfp_uf_hdr_t *h, tfp_status_t code, tfp_err_t *err)
{
    int reply = h->op == TFP_UF_REPLY && (h->flags & TFP_UF_F_TIMING);
    if ((h->flags & TFP_UF_F_TIMING) && !op_answers((int)h->op))
        return tfp_err_set(err, code, WHAT ": flag TIMING on %s", tfp_uf_op_name((int)h->op));
    for (unsigned i = 0; !reply && i < TFP_UF_TIMING_N; i++)
        if (h->timing[i])
            return tfp_err_set(err, code, WHAT ": timing numbers without a timing block");
    return TFP_OK;
}

static tfp_status_t check(const tfp_uf_hdr_t *h, tfp_status_t code, tfp_err_t *err)
{
    int op = (int)h->op;
    const char *on = tfp_uf_op_name(op);
    tfp_status_t st;

    if (!op_known(op))
        return tfp_err_set(err, code, WHAT ": unknown op %d", op);
    if ((h->flags & ~(TFP_UF_F_REPLY_HAS_BODY | TFP_UF_F_BODY_PREFIX | TFP_UF_F_FEED |
                      TFP_UF_F_COND | TFP_UF_F_ANSWER | TFP_UF_F_TIMING | TFP_UF_F_PARTS)) != 0)
        return tfp_err_set(err, code, WHAT ": flags 0x%04x has unknown bits", h->flags);
    if ((h->flags & TFP_UF_F_PARTS) && op != TFP_UF_GET && op != TFP_UF_PUT &&
        op != TFP_UF_CALL && op != TFP_UF_REPLY)
        return tfp_err_set(err, code, WHAT ": flag PARTS on %s", on);
    if (op == TFP_UF_PART &&
        (h->flags != TFP_UF_F_COND || h->user[0] || h->name[0] || h->msg[0] ||
         h->user_principal[0] || h->body_len == 0))
        return tfp_err_set(err, code, WHAT ": a PART carries flag COND alone, no user, name "
                           "or msg, and at least one byte");
    if (h->flags & TFP_UF_F_BODY_PREFIX) {
        if (op != TFP_UF_PUT && op != TFP_UF_CALL && op != TFP_UF_FEED)
            return tfp_err_set(err, code, WHAT ": flag BODY_PREFIX on %s", on);
        if (h->prefix_len == 0 || h->prefix_len > TFP_UF_MAX_PREFIX ||
            h->prefix_len >= h->body_len)
            return tfp_err_set(err, code, WHAT ": flag BODY_PREFIX with a body prefix of %u "
                               "bytes (1..%d, and less than body_len %llu)",
                               (unsigned)h->prefix_len, TFP_UF_MAX_PREFIX,
                               (unsigned long long)h->body_len);
    } else if (h->prefix_len != 0) {
        return tfp_err_set(err, code, WHAT ": prefix_len %u without flag BODY_PREFIX",
                           (unsigned)h->prefix_len);
    }
    if (op == TFP_UF_FEED && !(h->flags & TFP_UF_F_FEED))
        return tfp_err_set(err, code, WHAT ": FEED without its feed block (flag FEED)");
    if ((h->flags & TFP_UF_F_FEED) && op != TFP_UF_FEED && op != TFP_UF_REPLY)
        return tfp_err_set(err, code, WHAT ": flag FEED on %s", on);
    st = check_strings(h, code, err);
    if (st != TFP_OK)
        return st;
    if (tfp_uf_op_is_reply(op)) {
        if (!status_known(h->status))
            return tfp_err_set(err, code, WHAT ": status %d is not a known status",
                               (int)h->status);
    } else if (h->status != TFP_OK) {
        return tfp_err_set(err, code, WHAT ": status %d on a request (%s) must be 0",
                           (int)h->status, on);
    }
    if (h->wait_ms != 0 && !op_waits(op))
        return tfp_err_set(err, code, WHAT ": wait_ms %u on %s (only GET waits)",
                           (unsigned)h->wait_ms, on);
    if (!tfp_uf_op_is_reply(op)) {
        if (h->http != 0)
            return tfp_err_set(err, code, WHAT ": http %u on a request (%s) must be 0",
                               (unsigned)h->http, on);
    } else if (h->http != 0 && (h->http < 100 || h->http > 599)) {
        return tfp_err_set(err, code, WHAT ": %s carries HTTP status %u, not 100..599", on,
                           (unsigned)h->http);
    }
    if (h->body_len != 0 && !op_has_body(op))
        return tfp_err_set(err, code, WHAT ": body_len %llu on %s (which has no body)",
                           (unsigned long long)h->body_len, on);
    if (op != TFP_UF_REPLY) {
        if (h->flags & TFP_UF_F_REPLY_HAS_BODY)
            return tfp_err_set(err, code, WHAT ": flag REPLY_HAS_BODY on %s", on);
    } else {
        if (h->body_len != 0 && h->status != TFP_OK)
            return tfp_err_set(err, code, WHAT ": body_len %llu on a failed REPLY (%s)",
                               (unsigned long long)h->body_len, tfp_status_name(h->status));
        if (((h->flags & TFP_UF_F_REPLY_HAS_BODY) != 0) != (h->body_len != 0))
            return tfp_err_set(err, code, WHAT ": flag REPLY_HAS_BODY is %s but body_len is "
                               "%llu", (h->flags & TFP_UF_F_REPLY_HAS_BODY) ? "set" : "clear",
                               (unsigned long long)h->body_len);
    }
    if ((h->flags & TFP_UF_F_COND) && (st = check_cond(h, code, err)) != TFP_OK)
        return st;
    if ((h->flags & TFP_UF_F_ANSWER) && (st = check_answer(h, code, err)) != TFP_OK)
        return st;
    if ((st = check_timing(h, code, err)) != TFP_OK)
        return st;
    if (h->flags & TFP_UF_F_FEED)
        return check_feed(h, code, err);
    return TFP_OK;
}

tfp_status_t tfp_uf_check(const tfp_uf_hdr_t *h, tfp_err_t *err)
{
    if (h == NULL)
        return tfp_err_set(err, TFP_EINVAL, WHAT ": no header");
    return check(h, TFP_EINVAL, err);
}

/* ---- encode -------------------------------------------------------------------------- */

/* The feed block's numbers, in wire order (offset 8 on). */
#define FEED_NUMS(f) \
    { &(f)->seq, &(f)->ack, &(f)->after, &(f)->position, &(f)->round, &(f)->generation, \
      &(f)->device, &(f)->retry_after, &(f)->resume_after }

static void encode_feed(const tfp_uf_feed_t *f, uint8_t *p)
{
    size_t nd = strlen(f->dev), np = strlen(f->producer), nc = strlen(f->consumer);
    const uint64_t *nums[] = FEED_NUMS(f);

    p[0] = f->op;
    p[1] = f->flags;
    tfp_le_put(p + 2, f->present, 2);
    p[4] = (uint8_t)nd;
    p[5] = (uint8_t)np;
    p[6] = (uint8_t)nc;
    p[7] = 0;
    for (unsigned i = 0; i < 9; i++)
        tfp_le_put(p + 8 + 8 * i, *nums[i], 8);
    p += TFP_UF_FEED_FIXED;
    memcpy(p, f->dev, nd);
    memcpy(p + nd, f->producer, np);
    memcpy(p + nd + np, f->consumer, nc);
}

/* The conditions block's numbers, in wire order (offset 8 on). */
#define COND_NUMS(c) { &(c)->ttl_s, &(c)->first, &(c)->last, &(c)->total }

static size_t cond_len(const tfp_uf_cond_t *c)
{
    return TFP_UF_COND_FIXED + strlen(c->if_match) + strlen(c->if_none_match) +
           strlen(c->etag);
}

static void encode_cond(const tfp_uf_cond_t *c, uint8_t *p)
{
    size_t nim = strlen(c->if_match), ninm = strlen(c->if_none_match), ne = strlen(c->etag);
    const uint64_t *nums[] = COND_NUMS(c);

    p[0] = c->flags;
    p[1] = (uint8_t)nim;
    p[2] = (uint8_t)ninm;
    p[3] = (uint8_t)ne;
    tfp_le_put(p + 4, 0, 4);
    for (unsigned i = 0; i < 4; i++)
        tfp_le_put(p + 8 + 8 * i, *nums[i], 8);
    p += TFP_UF_COND_FIXED;
    memcpy(p, c->if_match, nim);
    memcpy(p + nim, c->if_none_match, ninm);
    memcpy(p + nim + ninm, c->etag, ne);
}

/* A REPLY with flag TIMING ends with the timing block; a request's flag only asks. */
static int has_timing_block(unsigned op, unsigned flags)
{
    return op == TFP_UF_REPLY && (flags & TFP_UF_F_TIMING);
}

tfp_status_t tfp_uf_encode(const tfp_uf_hdr_t *h, void *buf, size_t size, size_t *len,
                           tfp_err_t *err)
{
    size_t nid, nuser, nname, nmsg, nup, total;
    uint8_t *p = buf;
    tfp_status_t st;

    if (h == NULL || buf == NULL || len == NULL)
        return tfp_err_set(err, TFP_EINVAL, WHAT ": no header, buffer or length");
    st = check(h, TFP_EINVAL, err);
    if (st != TFP_OK)
        return st;
    nid = strlen(h->request_id);
    nuser = strlen(h->user);
    nname = strlen(h->name);
    nmsg = strlen(h->msg);
    nup = strlen(h->user_principal);
    total = TFP_UF_FIXED + nid + nuser + nname + nmsg + nup;
    if (h->flags & TFP_UF_F_FEED)
        total += TFP_UF_FEED_FIXED + strlen(h->feed.dev) + strlen(h->feed.producer) +
                 strlen(h->feed.consumer);
    if (h->flags & TFP_UF_F_COND)
        total += cond_len(&h->cond);
    size_t blocks = total;              /* where the answer block goes */
    if (h->flags & TFP_UF_F_ANSWER)
        total += 2 + strlen(h->answer);
    size_t tb = total;                  /* where the timing block goes */
    if (has_timing_block(h->op, h->flags))
        total += TFP_UF_TIMING_LEN;
    if (size < total)
        return tfp_err_set(err, TFP_EINVAL, WHAT ": buffer of %zu bytes is too small for %zu",
                           size, total);
    tfp_le_put(p + 0, TFP_UF_MAGIC, 4);
    p[4] = TFP_UF_VERSION;
    p[5] = (uint8_t)h->op;
    tfp_le_put(p + 6, h->flags, 2);
    tfp_le_put(p + 8, h->seq, 8);
    tfp_le_put(p + 16, (uint32_t)(int32_t)h->status, 4);
    tfp_le_put(p + 20, h->wait_ms, 4);
    tfp_le_put(p + 24, h->body_len, 8);
    p[32] = (uint8_t)nid;
    p[33] = (uint8_t)nuser;
    p[34] = (uint8_t)nname;
    p[35] = (uint8_t)nup;
    tfp_le_put(p + 36, nmsg, 2);
    tfp_le_put(p + 38, h->http, 2);
    p += TFP_UF_FIXED;
    memcpy(p, h->request_id, nid);
    p += nid;
    memcpy(p, h->user, nuser);
    p += nuser;
    memcpy(p, h->name, nname);
    p += nname;
    memcpy(p, h->msg, nmsg);
    p += nmsg;
    memcpy(p, h->user_principal, nup);
    p += nup;
    if (h->flags & TFP_UF_F_FEED)
        encode_feed(&h->feed, p);
    if (h->flags & TFP_UF_F_COND)
        encode_cond(&h->cond, p);       /* never beside a feed block (check) */
    if (h->flags & TFP_UF_F_ANSWER) {
        uint8_t *q = (uint8_t *)buf + blocks;
        size_t na = strlen(h->answer);
        tfp_le_put(q, na, 2);
        memcpy(q + 2, h->answer, na);
    }
    if (has_timing_block(h->op, h->flags))
        for (unsigned i = 0; i < TFP_UF_TIMING_N; i++)
            tfp_le_put((uint8_t *)buf + tb + 4 * i, h->timing[i], 4);
    *len = total;
    return TFP_OK;
}

/* ---- decode -------------------------------------------------------------------------- */

int tfp_uf_peek_reply(const void *buf, size_t len, uint64_t *seq)
{
    const uint8_t *p = buf;
    if (!p || len < TFP_UF_FIXED || tfp_le_get(p, 4) != TFP_UF_MAGIC || p[4] != TFP_UF_VERSION ||
        p[5] != TFP_UF_REPLY)
        return 0;
    *seq = tfp_le_get(p + 8, 8);
    return 1;
}

/* Copies one string field out of the frame: n bytes, no NUL among them. */
static tfp_status_t take(const uint8_t **p, size_t n, char *dst, const char *field,
                         tfp_err_t *err)
{
    if (memchr(*p, '\0', n) != NULL)
        return tfp_err_set(err, TFP_EPROTO, WHAT ": %s contains a NUL byte", field);
    memcpy(dst, *p, n);
    dst[n] = '\0';
    *p += n;
    return TFP_OK;
}

tfp_status_t tfp_uf_decode(const void *buf, size_t len, tfp_uf_hdr_t *out, tfp_err_t *err)
{
    const uint8_t *p = buf;
    size_t nid, nuser, nname, nmsg, nup, total;
    uint64_t magic;
    tfp_uf_hdr_t h;
    tfp_status_t st;

    if (out == NULL || (buf == NULL && len > 0))
        return tfp_err_set(err, TFP_EINVAL, WHAT ": no buffer or no output");
    if (len < TFP_UF_FIXED)
        return tfp_err_set(err, TFP_EPROTO, WHAT ": %zu bytes is shorter than the %d-byte "
                           "fixed header", len, TFP_UF_FIXED);
    magic = tfp_le_get(p, 4);
    if (magic != TFP_UF_MAGIC)
        return tfp_err_set(err, TFP_EPROTO, WHAT ": bad magic 0x%08llx (want 0x%08x, \"TFU1\")",
                           (unsigned long long)magic, TFP_UF_MAGIC);
    if (p[4] != TFP_UF_VERSION)
        return tfp_err_set(err, TFP_EPROTO, WHAT ": version %u is not %d", p[4],
                           TFP_UF_VERSION);
    if (!op_known(p[5]))
        return tfp_err_set(err, TFP_EPROTO, WHAT ": unknown op %u", p[5]);
    nid = p[32];
    nuser = p[33];
    nname = p[34];
    nmsg = (size_t)tfp_le_get(p + 36, 2);
    nup = p[35];
    if (nup > TFP_MAX_USER_ID)
        return tfp_err_set(err, TFP_EPROTO, WHAT ": user principal length %zu is over %d", nup,
                           TFP_MAX_USER_ID);
    if (nid > TFP_MAX_REQUEST_ID)
        return tfp_err_set(err, TFP_EPROTO, WHAT ": request id length %zu is over %d", nid,
                           TFP_MAX_REQUEST_ID);
    if (nuser > TFP_MAX_USER_ID)
        return tfp_err_set(err, TFP_EPROTO, WHAT ": user length %zu is over %d", nuser,
                           TFP_MAX_USER_ID);
    if (nmsg > TFP_UF_MAX_MSG)
        return tfp_err_set(err, TFP_EPROTO, WHAT ": msg length %zu is over %d", nmsg,
                           TFP_UF_MAX_MSG);
    total = TFP_UF_FIXED + nid + nuser + nname + nmsg + nup;
    size_t nfd = 0, nfp = 0, nfc = 0;
    const uint8_t *fb = NULL;
    if (tfp_le_get(p + 6, 2) & TFP_UF_F_FEED) {
        if (len < total + TFP_UF_FEED_FIXED)
            return tfp_err_set(err, TFP_EPROTO, WHAT ": %zu bytes is too short for the feed "
                               "block (%zu + 80)", len, total);
        fb = p + total;
        nfd = fb[4];
        nfp = fb[5];
        nfc = fb[6];
        if (fb[7] != 0)
            return tfp_err_set(err, TFP_EPROTO, WHAT ": feed reserved byte is %u, not 0",
                               fb[7]);
        if (nfp > TFP_MAX_USER_ID || nfc > TFP_MAX_USER_ID)
            return tfp_err_set(err, TFP_EPROTO, WHAT ": feed producer or consumer length is "
                               "over %d", TFP_MAX_USER_ID);
        total += TFP_UF_FEED_FIXED + nfd + nfp + nfc;
    }
    size_t nim = 0, ninm = 0, ne = 0;
    const uint8_t *cb = NULL;
    if (tfp_le_get(p + 6, 2) & TFP_UF_F_COND) {
        if (len < total + TFP_UF_COND_FIXED)
            return tfp_err_set(err, TFP_EPROTO, WHAT ": %zu bytes is too short for the cond "
                               "block (%zu + 40)", len, total);
        cb = p + total;
        nim = cb[1];
        ninm = cb[2];
        ne = cb[3];
        if (tfp_le_get(cb + 4, 4) != 0)
            return tfp_err_set(err, TFP_EPROTO, WHAT ": cond reserved bytes are not 0");
        if (ne > TFP_UF_MAX_ETAG)
            return tfp_err_set(err, TFP_EPROTO, WHAT ": cond etag length %zu is over %d", ne,
                               TFP_UF_MAX_ETAG);
        total += TFP_UF_COND_FIXED + nim + ninm + ne;
    }
    size_t na = 0;
    const uint8_t *ab = NULL;
    if (tfp_le_get(p + 6, 2) & TFP_UF_F_ANSWER) {
        if (len < total + 2)
            return tfp_err_set(err, TFP_EPROTO, WHAT ": %zu bytes is too short for the answer "
                               "block (%zu + 2)", len, total);
        ab = p + total;
        na = (size_t)tfp_le_get(ab, 2);
        if (na > TFP_UF_MAX_ANSWER)
            return tfp_err_set(err, TFP_EPROTO, WHAT ": answer lines length %zu is over %d",
                               na, TFP_UF_MAX_ANSWER);
        total += 2 + na;
    }
    const uint8_t *tb = NULL;
    if (has_timing_block(p[5], (unsigned)tfp_le_get(p + 6, 2))) {
        if (len < total + TFP_UF_TIMING_LEN)
            return tfp_err_set(err, TFP_EPROTO, WHAT ": %zu bytes is too short for the timing "
                               "block (%zu + %d)", len, total, TFP_UF_TIMING_LEN);
        tb = p + total;
        total += TFP_UF_TIMING_LEN;
    }
    size_t prefix = 0;
    if (tfp_le_get(p + 6, 2) & TFP_UF_F_BODY_PREFIX) {
        if (len <= total || len - total > TFP_UF_MAX_PREFIX)
            return tfp_err_set(err, TFP_EPROTO, WHAT ": flag BODY_PREFIX, but %zu bytes "
                               "follow the %zu-byte frame (1..%d)", len > total ? len - total
                               : 0, total, TFP_UF_MAX_PREFIX);
        prefix = len - total;
    } else if (len != total) {
        return tfp_err_set(err, TFP_EPROTO, WHAT ": %zu bytes, but the header says %zu "
                           "(40 + strings%s%s%s%s)", len, total, fb ? " + feed block" : "",
                           cb ? " + cond block" : "", ab ? " + answer block" : "",
                           tb ? " + timing block" : "");
    }

    memset(&h, 0, sizeof h);
    h.op = (tfp_uf_op_t)p[5];
    h.flags = (uint16_t)tfp_le_get(p + 6, 2);
    h.seq = tfp_le_get(p + 8, 8);
    h.status = (tfp_status_t)(int32_t)(uint32_t)tfp_le_get(p + 16, 4);
    h.wait_ms = (uint32_t)tfp_le_get(p + 20, 4);
    h.http = (uint16_t)tfp_le_get(p + 38, 2);
    h.body_len = tfp_le_get(p + 24, 8);
    h.prefix_len = (uint32_t)prefix;
    p += TFP_UF_FIXED;
    if ((st = take(&p, nid, h.request_id, "request id", err)) != TFP_OK ||
        (st = take(&p, nuser, h.user, "user", err)) != TFP_OK ||
        (st = take(&p, nname, h.name, "name", err)) != TFP_OK ||
        (st = take(&p, nmsg, h.msg, "msg", err)) != TFP_OK ||
        (st = take(&p, nup, h.user_principal, "user principal", err)) != TFP_OK)
        return st;
    if (fb) {
        uint64_t *nums[] = FEED_NUMS(&h.feed);
        h.feed.op = fb[0];
        h.feed.flags = fb[1];
        h.feed.present = (uint16_t)tfp_le_get(fb + 2, 2);
        for (unsigned i = 0; i < 9; i++)
            *nums[i] = tfp_le_get(fb + 8 + 8 * i, 8);
        p = fb + TFP_UF_FEED_FIXED;
        if ((st = take(&p, nfd, h.feed.dev, "feed device", err)) != TFP_OK ||
            (st = take(&p, nfp, h.feed.producer, "feed producer", err)) != TFP_OK ||
            (st = take(&p, nfc, h.feed.consumer, "feed consumer", err)) != TFP_OK)
            return st;
    }
    if (cb) {
        uint64_t *nums[] = COND_NUMS(&h.cond);
        h.cond.flags = cb[0];
        for (unsigned i = 0; i < 4; i++)
            *nums[i] = tfp_le_get(cb + 8 + 8 * i, 8);
        p = cb + TFP_UF_COND_FIXED;
        if ((st = take(&p, nim, h.cond.if_match, "cond if_match", err)) != TFP_OK ||
            (st = take(&p, ninm, h.cond.if_none_match, "cond if_none_match", err)) != TFP_OK ||
            (st = take(&p, ne, h.cond.etag, "cond etag", err)) != TFP_OK)
            return st;
    }
    if (ab) {
        p = ab + 2;
        if ((st = take(&p, na, h.answer, "answer lines", err)) != TFP_OK)
            return st;
    }
    for (unsigned i = 0; tb && i < TFP_UF_TIMING_N; i++)
        h.timing[i] = (uint32_t)tfp_le_get(tb + 4 * i, 4);
    st = check(&h, TFP_EPROTO, err);
    if (st != TFP_OK)
        return st;
    *out = h;
    return TFP_OK;
}

/* ---- bodies in parts ------------------------------------------------------------------ */

tfp_status_t tfp_uf_parts_begin(tfp_uf_parts_t *t, const tfp_uf_hdr_t *h, uint64_t data_len,
                                tfp_err_t *err)
{
    uint64_t have = h->prefix_len + data_len;       /* prefix_len <= TFP_UF_MAX_PREFIX */
    if (have > h->body_len || (have < h->body_len && !(h->flags & TFP_UF_F_PARTS)))
        return tfp_err_set(err, TFP_EPROTO, WHAT ": %llu body bytes in a frame whose "
                           "body_len is %llu%s", (unsigned long long)have,
                           (unsigned long long)h->body_len,
                           (h->flags & TFP_UF_F_PARTS) ? "" : " (and no flag PARTS)");
    if (have < h->body_len && have < TFP_UF_PART_MIN)
        return tfp_err_set(err, TFP_EPROTO, WHAT ": a first part of %llu bytes (at least "
                           "%llu unless it is the whole body)", (unsigned long long)have,
                           (unsigned long long)TFP_UF_PART_MIN);
    t->seq = h->seq;
    t->total = h->body_len;
    t->next = have;
    memcpy(t->request_id, h->request_id, sizeof t->request_id);
    return TFP_OK;
}

tfp_status_t tfp_uf_parts_take(tfp_uf_parts_t *t, const tfp_uf_hdr_t *part, uint64_t data_len,
                               tfp_err_t *err)
{
    const tfp_uf_cond_t *c = &part->cond;
    if (part->op != TFP_UF_PART || part->seq != t->seq ||
        strcmp(part->request_id, t->request_id) != 0)
        return tfp_err_set(err, TFP_EPROTO, WHAT ": a PART of another request");
    if (tfp_uf_parts_done(t))
        return tfp_err_set(err, TFP_EPROTO, WHAT ": a PART after the body's last byte");
    if (c->total != t->total || c->first != t->next || data_len != part->body_len)
        return tfp_err_set(err, TFP_EPROTO, WHAT ": PART %llu-%llu/%llu (%llu bytes) where "
                           "%llu-/%llu comes next", (unsigned long long)c->first,
                           (unsigned long long)c->last, (unsigned long long)c->total,
                           (unsigned long long)data_len, (unsigned long long)t->next,
                           (unsigned long long)t->total);
    if (c->last + 1 < t->total && part->body_len < TFP_UF_PART_MIN)
        return tfp_err_set(err, TFP_EPROTO, WHAT ": a PART of %llu bytes before the last "
                           "(at least %llu)", (unsigned long long)part->body_len,
                           (unsigned long long)TFP_UF_PART_MIN);
    t->next = c->last + 1;
    return TFP_OK;
}

int tfp_uf_parts_done(const tfp_uf_parts_t *t)
{
    return t->next >= t->total;
}

void tfp_uf_parts_next(tfp_uf_parts_t *t, uint64_t len, tfp_uf_hdr_t *h)
{
    if (len > t->total - t->next)
        len = t->total - t->next;
    tfp_uf_init(h, TFP_UF_PART, t->seq);
    memcpy(h->request_id, t->request_id, sizeof h->request_id);
    h->flags = TFP_UF_F_COND;
    h->body_len = len;
    h->cond.flags = TFP_UF_CF_RANGE;
    h->cond.first = t->next;
    h->cond.last = t->next + len - 1;
    h->cond.total = t->total;
    t->next += len;
}

/* ---- the same operation over HTTP --------------------------------------------------------- */

static void feed_header(tfp_uf_feed_http_t *out, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void feed_header(tfp_uf_feed_http_t *out, const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    out->hname[out->nheaders] = name;
    vsnprintf(out->hvalue[out->nheaders], sizeof out->hvalue[0], fmt, ap);
    out->nheaders++;
    va_end(ap);
}

/* A push's headers (infeed and outfeed alike): its sequence, its producer, how long it may
 * wait for room. */
static void push_headers(tfp_uf_feed_http_t *out, const tfp_uf_feed_t *f, uint32_t wait_ms)
{
    if (f->seq)
        feed_header(out, "Tfetch-Seq", "%llu", (unsigned long long)f->seq);
    if (f->producer[0])
        feed_header(out, "Tfetch-Producer", "%s", f->producer);
    if (wait_ms)
        feed_header(out, "Prefer", "wait=%u", (unsigned)wait_ms);
}

tfp_status_t tfp_uf_feed_http(const tfp_uf_feed_t *f, uint32_t wait_ms, tfp_uf_feed_http_t *out)
{
    char ack[40] = "";
    int has_ack = (f->flags & TFP_UF_FF_HAS_ACK) != 0;
    memset(out, 0, sizeof *out);
    char *p = out->path;
    size_t n = sizeof out->path;
    switch (f->op) {
    case TFP_UF_FEED_STATS:
        out->method = "GET";
        break;
    case TFP_UF_FEED_DECLARE:
        out->method = "PUT";
        break;
    case TFP_UF_FEED_DELETE:
        out->method = "DELETE";
        break;
    case TFP_UF_FEED_DONE:
        out->method = "POST";
        snprintf(p, n, "/done");
        break;
    case TFP_UF_FEED_RESET:
        out->method = "POST";
        snprintf(p, n, "/reset");
        break;
    case TFP_UF_FEED_INFEED:
        out->method = "POST";
        if (f->dev[0])
            snprintf(p, n, "/devices/%s/infeed", f->dev);
        else
            snprintf(p, n, "/infeed");
        push_headers(out, f, wait_ms);
        break;
    case TFP_UF_FEED_POP:
        out->method = "POST";
        if (has_ack)
            snprintf(ack, sizeof ack, "&ack=%llu", (unsigned long long)f->ack);
        snprintf(p, n, "/devices/%s/pop?wait=%u%s%s", f->dev, (unsigned)wait_ms, ack,
                 (f->flags & TFP_UF_FF_REWIND) ? "&rewind=1" : "");
        feed_header(out, "Tfetch-Consumer", "%s", f->consumer);
        break;
    case TFP_UF_FEED_ACK:
    case TFP_UF_FEED_DETACH: {
        int is_ack = f->op == TFP_UF_FEED_ACK;
        out->method = "POST";
        if (has_ack)
            snprintf(ack, sizeof ack, "?%s=%llu", is_ack ? "through" : "ack",
                     (unsigned long long)f->ack);
        snprintf(p, n, "/devices/%s/%s%s", f->dev, is_ack ? "ack" : "detach", ack);
        feed_header(out, "Tfetch-Consumer", "%s", f->consumer);
        break;
    }
    case TFP_UF_FEED_OUTFEED_PUSH:
        out->method = "POST";
        snprintf(p, n, "/devices/%s/outfeed", f->dev);
        push_headers(out, f, wait_ms);
        break;
    case TFP_UF_FEED_OUTFEED_GET:
        out->method = "GET";
        snprintf(p, n, "/outfeed?after=%llu&wait=%u", (unsigned long long)f->after,
                 (unsigned)wait_ms);
        break;
    default:
        return TFP_EINVAL;
    }
    return TFP_OK;
}
