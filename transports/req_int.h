/* req_int.h - the inside of tfx_req_t, shared by the transports that implement it (not by
 * the daemon). A transport's request embeds this struct first and fills ops; the generic
 * parts (accessors, bodies, response headers, suspension flag) live in req.c.
 * Threads: as req.h.
 */
#ifndef TFX_REQ_INT_H
#define TFX_REQ_INT_H

#include "transports/req.h"

typedef struct tfx_hdr {
    struct tfx_hdr *next;
    char *name, *value;
} tfx_hdr_t;

typedef struct {
    const char *name;               /* "http", "ucx", "shm" */
    void (*respond)(tfx_req_t *r, unsigned status, const char *content_type, const void *body,
                    size_t len, void (*release)(void *), void *release_arg);
    /* Renders a failure (code, msg) the transport's way. r->status is set; sets r->resp_len
     * to the body bytes it sends, if any. */
    void (*respond_error)(tfx_req_t *r, tfp_status_t code, const char *msg);
    void (*resume)(tfx_req_t *r);
    /* Optional (NULL: respond with the body's bytes): a body that knows its backing. */
    void (*respond_body)(tfx_req_t *r, unsigned status, const char *content_type,
                         const tfx_body_t *body);
    /* Optional (NULL: never): tfx_req_take_memfd. */
    int (*take_memfd)(tfx_req_t *r, int *fd, void **p, size_t *size);
    /* 1: the transport sends no header but the typed answer's fields (UCX, shm), so
     * tfx_req_add_header keeps none (no allocation per header on their requests). */
    int no_headers;
    /* 1: a request that suspends cannot be kept (shm: one thread answers in order), so a
     * handler that would wait declines it instead (tfx_req_may_wait, tfx_req_decline). */
    int no_wait;
} tfx_req_ops_t;

struct tfx_req {
    const tfx_req_ops_t *ops;
    const tfx_handlers_t *h;
    tfp_op_t op;                    /* filled by the transport before begin */
    tfp_op_err_t op_err;            /* why op could not be filled (code TFP_OK if it was) */
    char peer[64];                  /* the client's address as the transport knows it; "" */
    void *ctx;

    /* body */
    int accept_body;
    size_t headroom;
    uint64_t max_body;
    uint8_t *buf;
    size_t cap;                     /* of buf */
    void (*give_back)(void *arg);   /* buf is lent by a handler (tfx_req_accept_body_into),
                                     * not a tfx_buf: this returns it; NULL otherwise */
    void *give_back_arg;
    uint64_t body_len;
    uint64_t body_seen;             /* including discarded bytes */
    tfp_status_t body_failed;       /* why the body is being drained, or TFP_OK */

    /* response */
    tfp_answer_t ans;               /* the typed fields (tfx_req_answer) */
    tfx_hdr_t *hdrs;
    unsigned status;
    uint64_t resp_len;
    int answered;
    int keep_headers;               /* a no_headers transport's request whose answer carries
                                     * some (UCX's COND block: Content-Range) */

    int want_suspend;
    int declined;                   /* tfx_req_decline answered it: nothing ran */

    /* the server's own time on it (Server-Timing: stamp_timing), CLOCK_MONOTONIC ns; 0: not
     * yet */
    uint64_t t_arrive;              /* the transport had its head (tfx_req_arrived) */
    uint64_t t_handle;              /* its body was in and handle first ran */
    uint64_t t_suspend;             /* handle suspended it, until it runs again */
    uint64_t wait_ns;               /* suspended in all (a long-poll, a full queue) */
};

/* The transport has r's head (its HTTP headers, its frame, its message): its time starts.
 * Called once, before begin. */
void tfx_req_arrived(tfx_req_t *r);
/* The transport is about to run handle (every run, a resumed one included). */
void tfx_req_handling(tfx_req_t *r);

/* Makes room in r->buf for `total` bytes after the headroom (one allocation when the
 * length is known; growing moves what arrived in place, tfx_buf_grow), after the handlers'
 * body_grow approved it.
 * TFP_OK or why not. */
tfp_status_t tfx_req_grow_body(tfx_req_t *r, uint64_t total);
/* Each typed field of r's answer that has an HTTP header: add(arg, name, value). */
void tfx_req_answer_headers(const tfx_req_t *r,
                            void (*add)(void *arg, const char *name, const char *value),
                            void *arg);
/* Frees the response headers and the body buffer. */
void tfx_req_release(tfx_req_t *r);

#endif
