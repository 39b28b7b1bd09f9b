/* http_server.h - the HTTP server side of tfetchd, on libmicrohttpd.
 *
 * Turns MHD's callback protocol into three calls per request: begin (the request line and
 * headers are in, parsed into the request's operation: reject at once, or accept a body into
 * a buffer sized from Content-Length), handle (the body is
 * complete: respond, or suspend until woken) and finish (the request is over; free state).
 * Responses point at the caller's memory and call its release function when sent, so a GET
 * serves stored bytes without copying them. A suspended request holds no thread: another
 * thread wakes it with tfx_req_resume and handle runs again.
 *
 * Threads: begin/handle/finish run on MHD's threads (a pool). tfx_req_* calls other
 * than tfx_req_resume are valid only inside those callbacks, for that request.
 */
#ifndef TFX_HTTP_SERVER_H
#define TFX_HTTP_SERVER_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include "proto/protover.h"
#include "proto/status.h"
#include "transports/req.h"

typedef struct tfx_http tfx_http_t;

typedef struct {
    const char *listen_addr;        /* numeric IPv4 or IPv6 address */
    uint16_t port;                  /* 0: the kernel picks one */
    unsigned threads;               /* MHD threads */
    unsigned max_connections;       /* at the limit a waiting connection makes room, or the
                                     * newcomer is refused at once (http_guard.h) */
    unsigned max_per_ip;            /* 0: no per-IP limit */
    unsigned idle_timeout_s;
    unsigned header_timeout_s;      /* a request head must be in this long after the connection
                                     * opened or its previous request ended; 0: no deadline */
    size_t conn_memory;             /* per-connection buffer memory (headers + read buffer) */
    size_t max_header_bytes;        /* sum of request header names and values */
    uint64_t min_upload_rate;       /* body bytes/s in each rate window, else 408; 0: no floor */
    uint64_t min_download_rate;     /* answer bytes/s the client must take in each rate window,
                                     * else the connection is closed; 0: no floor */
    unsigned rate_window_s;         /* the window both rates are averaged over; 0: 10 s */
    uint64_t max_body;              /* the largest document body announced (tfp_http_req_t) */
    tfp_proto_range_t protocol;     /* the versions served (tfp_http_req_t.ours); {0, 0}: any */
    const char *tls_cert_pem;       /* both set: serve HTTPS (TLS 1.2/1.3) with this PEM */
    const char *tls_key_pem;        /* certificate chain and key; NULL: plain HTTP */
    const char *tls_client_ca_pem;  /* with TLS: ask for a client certificate and verify it
                                     * against these PEM CAs (tfp_http_req_t.cert_subject);
                                     * NULL: none asked for */
    const char *cors_origins;       /* cors-origins (proto/cors.h): "*", or origins separated
                                     * by spaces or commas; NULL or "": no CORS */
    /* libmicrohttpd's own messages (a handshake that failed, a socket error): to this, fmt
     * being the same string for the same message; NULL: to stderr as warnings. */
    void (*log)(void *arg, const char *fmt, va_list ap);
    void *log_arg;
} tfx_http_config_t;

typedef tfx_handlers_t tfx_http_handlers_t;

/* Starts listening. Returns NULL and fills err on failure. */
tfx_http_t *tfx_http_start(const tfx_http_config_t *cfg, const tfx_http_handlers_t *h,
                           tfp_err_t *err);
uint16_t tfx_http_port(const tfx_http_t *s);
/* Stops accepting new connections: the listening socket is shut down, so the kernel refuses
 * newcomers at once, and those already in its backlog are handed to the server. Requests in
 * flight go on. From now on every response carries "Connection: close" and new requests on
 * open connections (those from the backlog included) get 503. */
void tfx_http_quiesce(tfx_http_t *s);
/* Housekeeping: closes connections past the head deadline, below the body rate or reading
 * an answer below the download rate. Call a few times a second (the main thread's tick). */
void tfx_http_tick(tfx_http_t *s);
/* Requests between begin and finish right now. */
unsigned tfx_http_inflight(const tfx_http_t *s);
/* What the connection guard has done (http_guard.h), and the connections it counts. */
typedef struct {
    unsigned open;
    uint64_t refused, evicted, head_timeouts, slow_bodies, slow_readers, evicted_slow;
} tfx_http_guard_stats_t;
void tfx_http_guard_stats(const tfx_http_t *s, tfx_http_guard_stats_t *out);
/* Open connections right now. */
unsigned tfx_http_connections(const tfx_http_t *s);
/* Closes every connection and frees the server. No request may be suspended. */
void tfx_http_stop(tfx_http_t *s);

#endif
