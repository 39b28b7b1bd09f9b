/* http.h - from an HTTP request to the operation it asks for (tfp_op_t, proto/op.h): the
 * request line, the query's wait and the few headers tfetchd acts on, parsed once, with the
 * path and the media types in Accept and Content-Type. Bytes from the network: validated
 * here, never trusted. Pure; any thread.
 */
#ifndef TFP_HTTP_H
#define TFP_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include "proto/op.h"

/* The media type of a Content-Type value (parameters ignored, case-insensitive). */
tfp_media_t tfp_media_parse(const char *content_type);
/* The type in an Accept list that tfetchd can produce (safetensors, octet, json, any) with
 * the highest q-value, the first listed among equals; q=0 means "not this" (RFC 9110), so a
 * list whose producible types all have q=0 is TFP_MEDIA_OTHER (406), and a wildcard beside
 * "safetensors;q=0" means JSON. TFP_MEDIA_NONE when the header is absent, TFP_MEDIA_OTHER
 * when nothing listed is producible. */
tfp_media_t tfp_accept_pick(const char *accept);

/* Paths of the API. */
typedef enum {
    TFP_PATH_UNKNOWN = 0,
    TFP_PATH_HEALTHZ,               /* /healthz */
    TFP_PATH_READYZ,                /* /readyz */
    TFP_PATH_METRICS,               /* /metrics */
    TFP_PATH_INFO,                  /* /v1/info */
    TFP_PATH_TENSORS,               /* /v1/tensors or /v1/tensors/ */
    TFP_PATH_TENSOR,                /* /v1/tensors/NAME */
    TFP_PATH_CALL,                  /* /v1/call/ROUTE */
    TFP_PATH_SESSION_SELF,          /* /v1/sessions/self */
    TFP_PATH_WORKERS,               /* /v1/workers */
    TFP_PATH_WORKER,                /* /v1/workers/ID */
    TFP_PATH_WORKER_NEXT,           /* /v1/workers/ID/next */
    TFP_PATH_WORKER_REPLY,          /* /v1/workers/ID/calls/CALL */
    TFP_PATH_UPGRADE,               /* /v1/upgrade */
    TFP_PATH_SHUMAI,                /* /NAME: Shumai's tfetch (GET a tensor, POST a route) */
    TFP_PATH_FEEDS,                 /* /v1/feeds or /v1/feeds/ */
    TFP_PATH_FEED,                  /* /v1/feeds/F */
    TFP_PATH_FEED_INFEED,           /* /v1/feeds/F/infeed (a round to every device) */
    TFP_PATH_FEED_OUTFEED,          /* /v1/feeds/F/outfeed (readers) */
    TFP_PATH_FEED_DONE,             /* /v1/feeds/F/done */
    TFP_PATH_FEED_RESET,            /* /v1/feeds/F/reset */
    TFP_PATH_FEED_DEV_INFEED,       /* /v1/feeds/F/devices/D/infeed */
    TFP_PATH_FEED_DEV_POP,          /* /v1/feeds/F/devices/D/pop */
    TFP_PATH_FEED_DEV_DETACH,       /* /v1/feeds/F/devices/D/detach */
    TFP_PATH_FEED_DEV_ACK,          /* /v1/feeds/F/devices/D/ack */
    TFP_PATH_FEED_DEV_OUTFEED,      /* /v1/feeds/F/devices/D/outfeed (the computation) */
    TFP_PATH_BAD_NAME               /* a known prefix followed by an invalid name */
} tfp_path_t;

typedef struct {
    tfp_path_t kind;
    char name[256];                 /* tensor, route, worker id or feed; "" if none */
    char sub[256];                  /* the call id of TFP_PATH_WORKER_REPLY; a feed path's
                                     * device token */
} tfp_path_info_t;

/* Classifies path. Every name in it must match tfp_name_valid (else TFP_PATH_BAD_NAME). */
tfp_path_t tfp_path_parse(const char *path, tfp_path_info_t *out);

/* What tfp_http_op_parse reads. Strings are NUL-terminated; NULL when absent. */
typedef struct {
    const char *method;             /* "GET", ... */
    const char *path;               /* decoded, without the query */
    const char *wait;               /* the query's wait= value */
    const char *prefix, *after, *limit;  /* the query's: GET /v1/tensors (after: a name), GET /v1/feeds/F/outfeed (after: a seq) */
    const char *if_match, *if_none_match, *if_range, *range;     /* conditional, partial */
    const char *ttl;                /* Tfetch-TTL (PUT): seconds the document lives */
    int64_t content_length;         /* -1 when absent or when the body is chunked */
    int chunked;                    /* a Transfer-Encoding header is present */
    const char *content_type;       /* Content-Type */
    const char *accept;             /* Accept */
    const char *dtype, *shape;      /* Tfetch-Dtype, Tfetch-Shape: a raw body's tensor */
    const char *user;               /* Tfetch-User */
    const char *user_principal;     /* Tfetch-User-Principal */
    const char *authorization;      /* Authorization (its bearer token, hashed into op->who) */
    const char *cert_subject;       /* the client certificate's subject DN, verified against
                                     * tls-client-ca; NULL: none (or not asked for: a bearer
                                     * token decides) */
    int cert_bad;                   /* a client certificate was sent that does not verify */
    const char *request_id;         /* Tfetch-Request-Id */
    const char *worker_secret;      /* Tfetch-Worker-Secret */
    /* feeds */
    const char *seq;                /* Tfetch-Seq */
    const char *producer;           /* Tfetch-Producer */
    const char *consumer;           /* Tfetch-Consumer */
    const char *prefer;             /* Prefer (its wait=MS) */
    const char *ack, *through;      /* the query's ack=, through= values (after: above) */
    const char *rewind;             /* pop's ?rewind= ("1" or "0") */
    uint64_t max_body;              /* the largest document body the server takes */
    const char *protocol;           /* Tfetch-Protocol: the versions the client speaks */
    const char *content_digest, *repr_digest;           /* RFC 9530, on PUT */
    const char *want_content_digest, *want_repr_digest; /* RFC 9530, on GET */
    tfp_proto_range_t ours;         /* the versions the server speaks; {0, 0}: no check */
} tfp_http_req_t;

/* Fills *op (zeroed first) from the request. TFP_OK, or the first thing wrong, checked in
 * this order, with e set (code, message, and for TFP_EMETHOD the methods allowed):
 *   the request id, the user id, the worker secret (TFP_EBADREQ), the path (TFP_ENOTFOUND; TFP_EBADREQ for a
 *   bad name in it, or for a control character anywhere in it: the transport has already
 *   refused a NUL, raw or %00, see proto/httpframe.h), the method (TFP_EMETHOD),
 *   Tfetch-Protocol (TFP_EBADREQ when malformed; TFP_EVERSION when it shares no version with
 *   `ours`, a client naming none speaking version 1 - /healthz, /readyz, /metrics and
 *   /v1/info answer every version), Content-Digest / Repr-Digest on a PUT and
 *   Want-Repr-Digest / Want-Content-Digest on a GET (TFP_EBADREQ when malformed), the wait
 *   (TFP_EBADREQ), a feed operation's
 *   Tfetch-Seq, Tfetch-Producer, Tfetch-Consumer (required by pop and ack), Prefer's wait,
 *   ack, through (required by ack) and after (all TFP_EBADREQ), and for a document
 *   body: the Content-Type (TFP_EMEDIATYPE), the length against max_body (TFP_ETOOBIG), a
 *   raw body's Tfetch-Dtype and Tfetch-Shape (tfp_raw_check's codes), its size (TFP_ETOOBIG).
 * Even when it fails, op->kind names the operation the path and method point at (TFP_OP_NONE
 * for an unknown path), for the metrics; the fields after the failed check are left empty. */
tfp_status_t tfp_http_op_parse(const tfp_http_req_t *in, tfp_op_t *op, tfp_op_err_t *e);

#endif
