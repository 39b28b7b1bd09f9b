/* op.h - the operation a request to tfetchd asks for, whatever transport carried it.
 *
 * A request names one operation (get a tensor, run an exchange call, poll for work, ...),
 * the names it acts on, who asks (user id, request id), how long a GET may wait, what its
 * body holds and which form the answer should take. HTTP fills a tfp_op_t once from the
 * request line and headers (tfp_http_op_parse, proto/http.h); UCX fills it from the frame
 * (transports/ucx_server.c). tfetchd's handlers read only this struct, so a new transport
 * fills it and a new operation adds a kind, not a fake path. A request that cannot be
 * understood is refused with a tfp_op_err_t. Plain data and pure helpers; any thread.
 */
#ifndef TFP_OP_H
#define TFP_OP_H

#include <stdint.h>
#include "proto/digest.h"
#include "proto/doc.h"
#include "proto/httpcond.h"
#include "proto/ids.h"
#include "proto/protover.h"
#include "proto/status.h"

/* The forms a body or an answer can take (HTTP spells them as media types: tfp_media_parse
 * and tfp_accept_pick in proto/http.h). */
typedef enum {
    TFP_MEDIA_NONE = 0,             /* absent or empty */
    TFP_MEDIA_SAFETENSORS,          /* application/x-safetensors */
    TFP_MEDIA_OCTET,                /* application/octet-stream */
    TFP_MEDIA_JSON,                 /* application/json */
    TFP_MEDIA_FORM,                 /* application/x-www-form-urlencoded (curl's default) */
    TFP_MEDIA_ANY,                  /* * / * or application/ * (in Accept) */
    TFP_MEDIA_OTHER
} tfp_media_t;

/* The operations, each with its name for logs and tests. */
#define TFP_OP_MAP(X)                                                                \
    X(NONE, "none")                         /* names nothing (HTTP: unknown path) */ \
    X(HEALTH, "health")                     /* GET /healthz */                       \
    X(METRICS, "metrics")                   /* GET /metrics */                       \
    X(INFO, "info")                         /* GET /v1/info */                       \
    X(TENSOR_LIST, "tensor_list")           /* GET /v1/tensors */                    \
    X(TENSOR_GET, "tensor_get")             /* GET /v1/tensors/NAME; UCX GET */      \
    X(TENSOR_PUT, "tensor_put")             /* PUT /v1/tensors/NAME; UCX PUT */      \
    X(TENSOR_DELETE, "tensor_delete")       /* DELETE /v1/tensors/NAME; UCX DELETE */\
    X(CALL, "call")                         /* POST /v1/call/NAME; UCX CALL */       \
    X(SESSION_END, "session_end")           /* DELETE /v1/sessions/self */           \
    X(WORKER_REGISTER, "worker_register")   /* POST /v1/workers */                   \
    X(WORKER_LEAVE, "worker_leave")         /* DELETE /v1/workers/NAME */            \
    X(WORKER_POLL, "worker_poll")           /* GET /v1/workers/NAME/next */          \
    X(WORKER_REPLY, "worker_reply")         /* POST /v1/workers/NAME/calls/SUB */    \
    X(UPGRADE, "upgrade")                   /* POST /v1/upgrade */                   \
    X(SHUMAI_GET, "shumai_get")             /* Shumai's GET /NAME */                 \
    X(SHUMAI_CALL, "shumai_call")           /* Shumai's POST /NAME */                \
    X(READY, "ready")                       /* GET /readyz */                        \
    X(FEED_LIST, "feed_list")               /* GET /v1/feeds */                      \
    X(FEED_DECLARE, "feed_declare")         /* PUT /v1/feeds/F */                    \
    X(FEED_STATS, "feed_stats")             /* GET /v1/feeds/F */                    \
    X(FEED_DELETE, "feed_delete")           /* DELETE /v1/feeds/F */                 \
    X(FEED_INFEED, "feed_infeed")           /* POST /v1/feeds/F[/devices/D]/infeed */\
    X(FEED_POP, "feed_pop")                 /* POST /v1/feeds/F/devices/D/pop */     \
    X(FEED_ACK, "feed_ack")                 /* POST /v1/feeds/F/devices/D/ack */     \
    X(FEED_DETACH, "feed_detach")           /* POST /v1/feeds/F/devices/D/detach */  \
    X(FEED_OUTFEED_PUSH, "feed_outfeed_push") /* POST /v1/feeds/F/devices/D/outfeed */\
    X(FEED_OUTFEED_GET, "feed_outfeed_get") /* GET /v1/feeds/F/outfeed */            \
    X(FEED_DONE, "feed_done")               /* POST /v1/feeds/F/done */              \
    X(FEED_RESET, "feed_reset")             /* POST /v1/feeds/F/reset */

typedef enum {
#define X(n, s) TFP_OP_##n,
    TFP_OP_MAP(X)
#undef X
    TFP_OP_COUNT
} tfp_op_kind_t;

/* "tensor_get", ...; "?" for a value that is no kind. Static strings. */
const char *tfp_op_name(int kind);

/* How a request body is laid out. */
typedef enum {
    TFP_BODY_NONE = 0,              /* the operation takes no body (one sent is discarded) */
    TFP_BODY_SAFETENSORS,           /* a safetensors document */
    TFP_BODY_RAW,                   /* one tensor's bytes, described by dtype and shape */
    TFP_BODY_SHUMAI,                /* a Shumai message */
    TFP_BODY_JSON,                  /* a JSON document (registrations, upgrades, errors) */
    TFP_BODY_STAGED                 /* infeed, outfeed push over UCX: a staged body
                                     * (proto/shmframe.h), the document in a staging buffer
                                     * this server lent (daemon/shm.h) */
} tfp_body_kind_t;

typedef struct {
    tfp_body_kind_t kind;
    tfp_media_t media;              /* as the request declared it (HTTP: Content-Type) */
    int64_t length;                 /* bytes announced; -1 when unknown (chunked) */
    /* TFP_BODY_RAW: the one tensor the body holds */
    tfp_dtype_t dtype;
    int rank;
    uint64_t shape[TFP_MAX_RANK];
    uint64_t nbytes;                /* dtype x shape */
} tfp_op_body_t;

/* What the request's credentials were (HTTP: the Authorization header, else the TLS client
 * certificate). A bearer token, when sent, decides; a certificate counts only without one. */
typedef enum {
    TFP_CRED_NONE = 0,              /* none sent */
    TFP_CRED_BEARER,                /* a bearer token: its SHA-256 in token_hash */
    TFP_CRED_BAD,                   /* another scheme, or a malformed token */
    TFP_CRED_CERT,                  /* a verified client certificate: token_hash is
                                     * tfp_auth_cert_hash of its subject */
    TFP_CRED_CERT_BAD               /* a client certificate that does not verify */
} tfp_cred_t;

/* Who asks. Authentication adds the principal it established here. */
typedef struct {
    char user[TFP_MAX_USER_ID + 1];             /* "" when none was given */
    char request_id[TFP_MAX_REQUEST_ID + 1];    /* "" when the client chose none */
    tfp_cred_t cred;
    uint8_t token_hash[32];                     /* TFP_CRED_BEARER: SHA-256 of the token (the
                                                 * token itself is not kept); TFP_CRED_CERT:
                                                 * the certificate's key (proto/auth.h) */
    char principal[TFP_MAX_USER_ID + 1];        /* set by tfetchd's router once the token is
                                                 * known; "" with authentication off */
    char user_principal[TFP_MAX_USER_ID + 1];   /* Tfetch-User-Principal: whose user `user`
                                                 * is, when a gateway forwards another
                                                 * principal's user; "" for the caller's own */
    tfp_proto_range_t protocol;                 /* Tfetch-Protocol: the versions the client
                                                 * speaks; {0, 0} when it named none */
} tfp_op_who_t;

/* A feed operation's stream and positions (doc/PROTOCOL.md, "Feeds"). */
typedef struct {
    uint64_t seq;                   /* infeed, outfeed push: Tfetch-Seq (from 1); 0: none */
    char producer[TFP_MAX_USER_ID + 1];         /* Tfetch-Producer; "" when none */
    char consumer[TFP_MAX_USER_ID + 1];         /* pop, ack: Tfetch-Consumer (required) */
    uint64_t ack;                   /* pop: ?ack=P; ack: ?through=P */
    int has_ack;
    int rewind;                     /* pop: ?rewind=1 (a consumer that restarted) */
    uint64_t after;                 /* outfeed get: ?after=S (0 when absent) */
} tfp_op_feed_t;

typedef struct {
    tfp_op_kind_t kind;
    char name[TFP_MAX_TENSOR_NAME + 1];         /* tensor, route, worker id or feed; "" if none */
    char sub[TFP_MAX_TENSOR_NAME + 1];          /* WORKER_REPLY: the call id; FEED_*: the
                                                 * device token ("" for a whole-feed path) */
    char worker_secret[TFP_WORKER_SECRET_LEN + 1];  /* Tfetch-Worker-Secret; "" if none */
    tfp_op_who_t who;
    uint64_t wait_ms;               /* TENSOR_GET, WORKER_POLL, FEED_POP, FEED_OUTFEED_GET
                                     * (?wait=), FEED_INFEED, FEED_OUTFEED_PUSH (Prefer:
                                     * wait=): how long to wait, uncapped */
    tfp_op_body_t body;
    tfp_media_t accept;             /* the answer's form (HTTP: Accept); NONE: the default */
    struct {                        /* TENSOR_LIST: which names, in name order */
        char prefix[TFP_MAX_TENSOR_NAME + 1];   /* only names starting so; "" all */
        char after[TFP_MAX_TENSOR_NAME + 1];    /* only names after this one; "" from the start */
        uint64_t limit;                         /* at most this many; 0 no limit */
    } list;
    uint64_t ttl_s;                 /* TENSOR_PUT: seconds the document lives; 0 for ever */
    struct {                        /* TENSOR_GET, _PUT, _DELETE (HTTP): conditions, range */
        tfp_etags_t if_match, if_none_match, if_range;
        tfp_range_t range;          /* GET only; NONE when absent, ignored or If-Range fails */
    } cond;
    tfp_op_feed_t feed;             /* FEED_*: stream ids and positions */
    struct {                        /* TENSOR_GET, _PUT (HTTP): RFC 9530 integrity fields */
        tfp_digest_t content, repr; /* PUT: Content-Digest, Repr-Digest (sha-256) */
        int want;                   /* GET: Want-Repr-Digest or Want-Content-Digest asks for
                                     * sha-256 */
    } digest;
} tfp_op_t;

#define TFP_OP_MAX_MSG 512
#define TFP_MAX_TTL_S (366u * 24 * 3600)   /* Tfetch-TTL: at most a year */

/* Why a request was refused before any handler ran. */
typedef struct {
    tfp_status_t code;              /* TFP_OK when the request is understood */
    char msg[TFP_OP_MAX_MSG];
    const char *allow;              /* TFP_EMETHOD: the methods the target allows ("GET,HEAD") */
} tfp_op_err_t;

/* Sets e's code and formatted message (allow NULL) and returns code. */
tfp_status_t tfp_op_fail(tfp_op_err_t *e, tfp_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* 1 when op's answer may be a safetensors document (Accept: none, safetensors or any); 0
 * when it asked for another form (JSON, raw, Shumai's). */
int tfp_op_accepts_safetensors(const tfp_op_t *op);
/* Refuses a document body announced above max bytes (TFP_ETOOBIG). TFP_OK otherwise,
 * e untouched. */
tfp_status_t tfp_op_check_length(const tfp_op_t *op, uint64_t max, tfp_op_err_t *e);
/* A request's header lines as a frame carries them ("Name: value\n" each: UCX's answer lines
 * block, shm's lines after a GET's or COMMIT's name), of which it takes, as HTTP does, the
 * digests: a PUT's Repr-Digest and Content-Digest, a GET's Want-Repr-Digest and
 * Want-Content-Digest (other names are skipped). TFP_OK, or TFP_EBADREQ in e naming the
 * field, as HTTP answers a malformed one. */
tfp_status_t tfp_op_digest_lines(tfp_op_t *op, const char *s, size_t n, tfp_op_err_t *e);

#endif
