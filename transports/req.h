/* req.h - one request to tfetchd, whatever carried it: the interface the daemon's handlers
 * program against. HTTP (transports/http_server.c) and UCX (transports/ucx_server.c) each
 * implement it with a table of functions (tfx_req_ops_t), like redis's connection types, so
 * one set of handlers serves both.
 *
 * Each request carries the operation it asks for (tfp_op_t, proto/op.h), filled once by its
 * transport before begin: HTTP parses the request line and headers, UCX reads the frame, the
 * same-host shm transport (transports/shm_server.c) reads its message. A
 * request the transport could not make sense of carries why (tfx_req_op_error), for begin to
 * answer. Handlers answer a status with a message (tfx_respond_error) or a body
 * (tfx_respond); each transport renders that its own way (HTTP: a status line and a JSON
 * error body; UCX: a REPLY frame with status, HTTP-equivalent status and message).
 *
 * A request goes through three calls of tfx_handlers_t: begin (the operation is known:
 * reject at once, or accept a body into a buffer sized from its length), handle (the body is
 * complete: respond, or suspend until woken) and finish (the request is over; free state).
 * Responses point at the caller's memory and call its release function when sent.
 *
 * Threads: the transport's threads run the handlers; tfx_req_* calls other than
 * tfx_req_resume are valid only inside them, for that request.
 */
#ifndef TFX_REQ_H
#define TFX_REQ_H

#include <stddef.h>
#include <stdint.h>
#include "proto/answer.h"
#include "proto/op.h"
#include "proto/status.h"

typedef struct tfx_req tfx_req_t;

typedef struct {
    void (*begin)(tfx_req_t *req, void *arg);
    void (*handle)(tfx_req_t *req, void *arg);
    /* completed: the response was sent in full. Runs once for every begin. */
    void (*finish)(tfx_req_t *req, int completed, void *arg);
    /* Before an accepted body's buffer grows to `total` bytes: return 0 to allow it, or the
     * status to answer with (the body is then drained and the request refused). Optional. */
    tfp_status_t (*body_grow)(tfx_req_t *req, uint64_t total, void *arg);
    void *arg;
} tfx_handlers_t;

/* The transport a request came by: "http", "ucx" or "shm". */
const char *tfx_req_transport(const tfx_req_t *r);
/* The client's address ("127.0.0.1", "::1"), "" when the transport does not know it. */
const char *tfx_req_peer(const tfx_req_t *r);

/* The operation asked for. */
const tfp_op_t *tfx_req_op(const tfx_req_t *r);
/* Authentication's result: the operation's who, for the router to fill in the principal
 * (in begin, before any handler reads the operation). */
tfp_op_who_t *tfx_req_op_who(tfx_req_t *r);
/* Why the transport could not make sense of the request: code TFP_OK when it could, else
 * begin answers it (tfx_respond_error with that code and message). */
const tfp_op_err_t *tfx_req_op_error(const tfx_req_t *r);

/* In begin: accept a body of at most max bytes, received at offset headroom of a tfx_buf.
 * Without this call a body is read and discarded. A body above max gets a 413. */
void tfx_req_accept_body(tfx_req_t *r, size_t headroom, uint64_t max);
/* In begin, instead of tfx_req_accept_body: the body goes into the caller's memory buf
 * (cap bytes, the body at offset headroom) rather than a tfx_buf: the transport writes it
 * there (UCX: the rendezvous lands in it). Whenever the buffer stops being used - the body
 * is larger than it, the request ends without a handler taking it - give_back(arg) runs
 * once, and a larger body goes into a tfx_buf as usual; a handler that takes the body
 * (tfx_req_take_lent) takes that duty over. */
void tfx_req_accept_body_into(tfx_req_t *r, size_t headroom, uint64_t max, uint8_t *buf,
                              size_t cap, void (*give_back)(void *arg), void *arg);
/* In handle, right after tfx_req_take_body: 1 when the buffer it returned was lent (then
 * *give_back and *arg are the caller's to run instead of tfx_buf_free), else 0. */
int tfx_req_take_lent(tfx_req_t *r, void (**give_back)(void *arg), void **arg);
/* In handle: the body received (NULL, 0 if none). */
const uint8_t *tfx_req_body(const tfx_req_t *r, size_t *len);
/* In handle: takes the buffer holding the body: *base is the tfx_buf (free with
 * tfx_buf_free(*base, *cap)); the body starts at *base + headroom. */
uint8_t *tfx_req_take_body(tfx_req_t *r, size_t *cap);

void tfx_req_set_ctx(tfx_req_t *r, void *ctx);
void *tfx_req_ctx(const tfx_req_t *r);

/* The answer's typed fields (proto/answer.h: ETag, a feed's numbers, Retry-After): handlers
 * fill them, each transport renders those it has a place for (HTTP: headers; UCX: the
 * REPLY's feed block; shm: the ETag). Fill before responding. */
tfp_answer_t *tfx_req_answer(tfx_req_t *r);
/* Adds a response header that is no typed field (copied; HTTP sends it; UCX and shm have
 * none, and keep none). Call before responding. */
void tfx_req_add_header(tfx_req_t *r, const char *name, const char *value);
/* Responds with body (borrowed until release(release_arg) runs; release may be NULL for
 * static data). The transport always calls release exactly once, even on failure. */
void tfx_respond(tfx_req_t *r, unsigned status, const char *content_type, const void *body,
                 size_t len, void (*release)(void *), void *release_arg);
/* Answers that the request failed: code (its HTTP-equivalent status follows from it) and a
 * message. HTTP: a JSON body {"error": msg, "code": "TF_E..."} (and Allow on the 405 the
 * transport refused a method with); UCX: a REPLY frame without a body. */
void tfx_respond_error(tfx_req_t *r, tfp_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An answer body that knows its backing (as nginx's ngx_buf_t is memory or a file): its
 * bytes and who frees them, and optionally how to hand them to a same-host peer as a sealed
 * memfd. HTTP and UCX send the bytes; shm passes the memfd (share), or a sealed copy of the
 * bytes when the body has none. */
typedef struct {
    const void *data;
    size_t len;
    void (*release)(void *arg);     /* NULL for static data */
    void *release_arg;
    /* Optional: the bytes as a sealed memfd: *fd (borrowed until release runs), the body at
     * *offset of its *size bytes. TFP_OK, or why not (TFP_ENOMEM, TFP_ENOSPACE). */
    tfp_status_t (*share)(void *share_arg, void *release_arg, int *fd, size_t *offset,
                          size_t *size);
    void *share_arg;
} tfx_body_t;
/* tfx_respond with such a body (release runs exactly once, as there). */
void tfx_respond_body(tfx_req_t *r, unsigned status, const char *content_type,
                      const tfx_body_t *body);
/* In handle, after tfx_req_take_lent: when the lent body lies at offset 0 of a sealed memfd
 * (a same-host PUT's), takes that memfd over: 1 with *fd, its mapping *p and *size (the
 * caller's to close, tfx_shm_close; the give-back then only ends the lending); else 0. */
int tfx_req_take_memfd(tfx_req_t *r, int *fd, void **p, size_t *size);

/* The status of the response queued (0 if none yet). */
unsigned tfx_req_status(const tfx_req_t *r);
uint64_t tfx_req_response_bytes(const tfx_req_t *r);
uint64_t tfx_req_body_bytes(const tfx_req_t *r);           /* request body bytes received */

/* In handle: don't respond now; handle runs again after tfx_req_resume. */
void tfx_req_suspend(tfx_req_t *r);
/* Any thread: wakes a request that suspended (or is about to). Safe to call more than once. */
void tfx_req_resume(tfx_req_t *r);
/* In handle: 0 when the transport cannot keep a suspended request (shm), so a handler that
 * would wait (a worker route, a retry waiting on the first try) declines instead; else 1. */
int tfx_req_may_wait(const tfx_req_t *r);
/* In handle, before anything ran: answers TFP_ENOTIMPL with msg (printf-style) and marks
 * the request declined, which the transport tells its client apart from a failure (shm: a
 * REPLY without an HTTP status; the client sends the request another way). */
void tfx_req_decline(tfx_req_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 if tfx_req_decline answered r. */
int tfx_req_declined(const tfx_req_t *r);

#endif
