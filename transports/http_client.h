/* http_client.h - the HTTP client engine: one libcurl multi handle driving many requests.
 *
 * A tfx_hc_t is a long-lived handle that owns a CURLM: its connection cache keeps
 * connections to each origin alive and reuses them, and it caches DNS answers. A
 * tfx_hc_req_t is one request: method, URL, extra headers, a body given as borrowed
 * (pointer, length) segments streamed without being concatenated, and, once it completes,
 * the response (status, the headers tfetch cares about, and the body in one buffer sized
 * from Content-Length). Requests are started on an engine and complete through a callback
 * that runs exactly once on a successful start and never when the start fails. Nothing runs
 * in the background: callbacks run inside tfx_hc_poll / tfx_hc_drive / tfx_hc_cancel, on
 * the calling thread. An engine and its requests are used by one thread at a time. Blocking
 * calls are "start, then drive until done"; an async API is "start, then poll/drive later".
 * Everything here is prefixed tfx_hc_ (the server side of transports/ owns tfx_req_*).
 */
#ifndef TFX_HTTP_CLIENT_H
#define TFX_HTTP_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/answer.h"
#include "proto/status.h"

/* Outcomes decided by the transport (the HTTP status is reported separately): codes of the one
 * status space, tfp_status_t (proto/status.h; the same values as the public tf_status_t).
 * tfx_hc_status_t and the TFX_HC_ names are aliases of them, kept only so that callers written
 * against the old names keep compiling; new code uses tfp_status_t and TFP_ directly. It is an
 * int so that a switch over the old names stays complete. */
typedef int tfx_hc_status_t;
#define TFX_HC_OK TFP_OK
#define TFX_HC_ENOMEM TFP_ENOMEM
#define TFX_HC_EINVAL TFP_EINVAL
#define TFX_HC_EURL TFP_EURL
#define TFX_HC_ECONNECT TFP_ECONNECT
#define TFX_HC_ETIMEDOUT TFP_ETIMEDOUT
#define TFX_HC_EIO TFP_EIO
#define TFX_HC_ECANCELED TFP_ECANCELED
#define TFX_HC_ETOOBIG TFP_ETOOBIG
#define TFX_HC_EAGAIN TFP_EAGAIN
#define TFX_HC_EPROTO TFP_EPROTO           /* the server's answer is not HTTP */

static inline const char *tfx_hc_strerror(tfx_hc_status_t st)
{
    return tfp_status_text((tfp_status_t)st);
}

typedef struct tfx_hc tfx_hc_t;
typedef struct tfx_hc_req tfx_hc_req_t;

/* Called once when a started request completes (successfully or not). The request is no
 * longer attached to the engine; the callback may free it. */
typedef void (*tfx_hc_done_fn)(tfx_hc_req_t *req, tfx_hc_status_t st, void *user_data);
/* Transfer progress; return non-zero to abort the request (TFX_HC_ECANCELED). */
typedef int (*tfx_hc_progress_fn)(uint64_t down_now, uint64_t down_total, uint64_t up_now,
                               uint64_t up_total, void *user_data);

/* The response, filled in when the request completes. The engine names no header: every
 * header of the final response is kept as received (tfx_hc_resp_header reads one by name, as
 * curl_easy_header does), and those that are fields of tfetchd's typed answer
 * (proto/answer.h: ETag, the feed numbers, Retry-After, ...) are parsed, through the answer's
 * one table, into answer. */
typedef struct {
    long status;                    /* HTTP status; 0 if no response arrived */
    tfp_answer_t answer;            /* the typed answer's fields that came, valid ones only */
    const char *headers;            /* "name\0value\0" pairs (values trimmed), owned by the
                                     * request; read them with tfx_hc_resp_header */
    size_t headers_len;
    /* The first TFX_HC_HINDEX headers' name offsets and lengths in headers (nh of them,
     * more_headers: some past them), so that a lookup compares lengths before bytes. */
#define TFX_HC_HINDEX 32
    uint32_t hoff[TFX_HC_HINDEX], hnlen[TFX_HC_HINDEX];
    size_t nh;
    int more_headers;
    int sunk;                       /* the body went to the sink (tfx_hc_req_set_sink) */
    uint8_t *body;                  /* owned by the request; always NUL-terminated */
    size_t body_len;                /* excluding the NUL */
    uint64_t bytes_sent;            /* request body bytes handed to the connection */
    double seconds;                 /* wall time from start to completion */
    /* Where the time went, seconds from the start (0 when not known): connected (name
     * resolved, TCP and TLS done; about 0 on a kept connection) and ready to send
     * (libcurl's), the final answer's status line arrived (ours: a 100 Continue before it
     * does not count), the end. */
    double t_connect, t_pretransfer, t_head, t_total;
} tfx_hc_resp_t;

/* ---- engine -------------------------------------------------------------------------- */

/* Creates an engine; initialises libcurl once per process on first use. It opens at most
 * TFX_HC_DEFAULT_HOST_CONNECTIONS connections per origin; requests beyond that wait inside
 * libcurl for a free one. */
#define TFX_HC_DEFAULT_HOST_CONNECTIONS 16L
tfx_hc_status_t tfx_hc_new(tfx_hc_t **out);
/* Caps the connections the engine opens to one origin (n >= 1); the connection cache keeps
 * up to 4 x n idle ones. Takes effect for connections opened from now on. */
tfx_hc_status_t tfx_hc_set_max_host_connections(tfx_hc_t *hc, long n);
/* https: verify servers against the PEM CA certificates in path (copied) instead of the
 * system's store (CURLOPT_CAINFO); NULL: the system's store again. Verification of the
 * peer and its host name is always on. For requests started from now on. */
tfx_hc_status_t tfx_hc_set_ca_file(tfx_hc_t *hc, const char *path);
/* https: present the PEM client certificate in cert and its PEM private key in key (both
 * copied; key NULL: the key is in cert) when a server asks (CURLOPT_SSLCERT, CURLOPT_SSLKEY);
 * cert NULL: none. For requests started from now on. */
tfx_hc_status_t tfx_hc_set_client_cert(tfx_hc_t *hc, const char *cert, const char *key);
/* Cancels every unfinished request (their callbacks run with TFX_HC_ECANCELED), then frees. */
void tfx_hc_free(tfx_hc_t *hc);
/* Starts req. On TFX_HC_OK, done runs exactly once later; on an error it never runs. A request
 * can be started once at a time; after completion it may be reset and started again. */
tfx_hc_status_t tfx_hc_start(tfx_hc_t *hc, tfx_hc_req_t *req, tfx_hc_done_fn done, void *user_data);
/* Does pending work and completes finished requests, waiting up to timeout_ms (0: don't
 * wait; -1: until something happens) for activity. Returns the number still running. If
 * libcurl's multi interface itself fails, every running request completes with TFX_HC_EIO. */
int tfx_hc_poll(tfx_hc_t *hc, long timeout_ms);
/* Only waits: returns when a running request's connection has activity, a libcurl timer is
 * due, tfx_hc_wakeup is called, or timeout_ms passes (at most one second; -1: that second).
 * Waits even when no request is running (for a wake-up). Completes nothing: call
 * tfx_hc_poll(hc, 0) next. Lets a caller check its own condition between the two. */
void tfx_hc_wait(tfx_hc_t *hc, long timeout_ms);
/* Makes the current or the next tfx_hc_wait (or a poll's wait) return at once. The one
 * function here that any thread may call, while the engine exists (curl_multi_wakeup). Lets
 * another source of completions (the UCX progress thread) share the engine's sleep. */
void tfx_hc_wakeup(tfx_hc_t *hc);
/* Runs the engine until req completes (TFX_HC_OK, its callback has run) or timeout_ms passes
 * (TFX_HC_EAGAIN; -1 waits for ever). Other requests progress meanwhile. */
tfx_hc_status_t tfx_hc_drive(tfx_hc_t *hc, tfx_hc_req_t *req, long timeout_ms);
/* Stops an unfinished request now; its callback runs with TFX_HC_ECANCELED before this returns.
 * A no-op for a request that is not running. */
void tfx_hc_cancel(tfx_hc_t *hc, tfx_hc_req_t *req);
/* Number of requests started and not yet completed. */
int tfx_hc_running(const tfx_hc_t *hc);

/* ---- requests ------------------------------------------------------------------------ */

tfx_hc_status_t tfx_hc_req_new(tfx_hc_req_t **out);
/* Frees a request that is not running (a running one must be canceled first). */
void tfx_hc_req_free(tfx_hc_req_t *req);
/* Clears method, URL, headers, body segments and response for reuse; keeps allocations. */
void tfx_hc_req_reset(tfx_hc_req_t *req);

/* "GET", "PUT", "POST", "DELETE", ... (copied). Default "GET". */
tfx_hc_status_t tfx_hc_req_set_method(tfx_hc_req_t *req, const char *method);
tfx_hc_status_t tfx_hc_req_set_url(tfx_hc_req_t *req, const char *url);       /* copied */
/* Adds "Name: value" (copied). */
tfx_hc_status_t tfx_hc_req_add_header(tfx_hc_req_t *req, const char *name, const char *value);
/* Appends a body segment (borrowed: it must live until completion). The body is the
 * segments in order; a request with any segment (even empty ones) has a body. */
tfx_hc_status_t tfx_hc_req_add_body(tfx_hc_req_t *req, const void *ptr, size_t len);
/* Appends a body segment of len bytes read from fd at offset off as they are sent (pread:
 * the file is never held in memory; fd borrowed until completion). A file that reads short
 * fails the request (TFX_HC_EIO, saying so). */
tfx_hc_status_t tfx_hc_req_add_body_fd(tfx_hc_req_t *req, int fd, uint64_t off, size_t len);
/* A 2xx response's body whose Content-Type starts with content_type (borrowed; NULL: any)
 * is written to fd (borrowed until completion) as it arrives instead of being kept:
 * resp.sunk is 1, resp.body stays NULL and resp.body_len counts the bytes written. Any
 * other body is kept as usual (an error, an unexpected type: the caller reads it). The
 * body cap applies to the announced length and the bytes written. -1: none (the default). */
void tfx_hc_req_set_sink(tfx_hc_req_t *req, int fd, const char *content_type);
/* Whole-request timeout (0: none). The connect timeout is min(10 s, this). */
void tfx_hc_req_set_timeout(tfx_hc_req_t *req, long timeout_ms);
/* Refuses a response body larger than max (TFX_HC_ETOOBIG); 0: no cap. */
void tfx_hc_req_set_max_body(tfx_hc_req_t *req, size_t max);
/* Stall detection (curl's low-speed limit): the transfer fails (TFX_HC_ETIMEDOUT, "too
 * slow") once it moves fewer than bytes_per_s bytes a second, both ways together, for
 * seconds in a row; waiting for the answer counts. 0 for either: none (the default). */
void tfx_hc_req_set_low_speed(tfx_hc_req_t *req, long bytes_per_s, long seconds);
void tfx_hc_req_set_progress(tfx_hc_req_t *req, tfx_hc_progress_fn fn, void *user_data);

/* Valid after completion, until reset or free. */
const tfx_hc_resp_t *tfx_hc_req_response(const tfx_hc_req_t *req);
/* The value of the response's header name (compared without case; the last one when it came
 * more than once), trimmed; "" when absent. Borrowed from r, valid as r is. */
const char *tfx_hc_resp_header(const tfx_hc_resp_t *r, const char *name);
/* The transport's own message for a failure ("" if none), e.g. libcurl's error text. */
const char *tfx_hc_req_error(const tfx_hc_req_t *req);
/* Hands the response body (malloc'd, NUL-terminated) to the caller; NULL if none. */
uint8_t *tfx_hc_req_take_body(tfx_hc_req_t *req, size_t *len);
/* 1 while started and not completed. */
int tfx_hc_req_running(const tfx_hc_req_t *req);

/* ---- URLs ---------------------------------------------------------------------------- */

/* Checks url is an absolute http(s) URL with a host and builds a new one: path replaces the
 * path (and drops the query) when not NULL; query ("wait=100") is appended when not NULL.
 * *out is malloc'd. TFX_HC_EURL for a malformed URL or another scheme. */
tfx_hc_status_t tfx_hc_url_build(const char *url, const char *path, const char *query, char **out);
/* Splits an absolute http(s) URL into its origin, "scheme://host:port" (lowercase scheme and
 * host, the port always written, the default one included) and its path ("/" when empty),
 * both malloc'd; *has_query is 1 when the URL has a query. The outputs are set only on
 * success. TFX_HC_EURL as tfx_hc_url_build. */
tfx_hc_status_t tfx_hc_url_split(const char *url, char **origin, char **path, int *has_query);

#endif
