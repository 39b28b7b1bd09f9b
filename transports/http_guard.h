/* http_guard.h - the HTTP server's connection guard: admission at the connection limit,
 * the request-head deadline and the rate floors for request bodies and for answers (the
 * slowloris defences: slow heads, slow bodies, slow readers).
 *
 * The guard keeps one entry per open connection, in one of five states: waiting for a
 * request head (since it opened, or since its previous request completed), receiving a body,
 * busy (handled or suspended: no deadline of ours, the server's idle timeout applies),
 * sending an answer, and doomed (shut down by the guard, closing). It never reads or writes
 * the sockets' data: it sees events (open, head complete, body bytes, answer queued, request
 * done, close), reads how much of an answer the peer has acknowledged from the kernel
 * (TCP_INFO), and acts on laggards with shutdown(2), which makes the server's own loop close
 * them. Where an answer is still possible (a body too slow) it first writes a canned 408 with
 * a JSON error body {"error", "code": "TF_EREQTIME"}; the server has written nothing on such
 * a connection since its head arrived (a 100 Continue comes before any body byte).
 *
 * Rates: a body must bring min_rate bytes/s, and an answer must be taken by the peer at
 * min_send_rate bytes/s, each averaged over every window of rate_window_ms (the first from
 * the head, or from the answer queued): a transfer that is slow but moving above the floor
 * is never cut, however long it takes, while one that stalls or trickles is closed at the end
 * of its window (a body with its 408).
 *
 * Admission (tfx_guard_admit, before a new connection is set up): below the limit, yes. At
 * the limit, room is made, in this order: the connection that has waited longest for a
 * request head, if it has waited TFX_GUARD_GRACE_MS; else the slowest transfer (body or
 * answer) whose average since it began is below its floor and that has run TFX_GUARD_GRACE_MS;
 * else a connection waiting for a head, however briefly. So slow or idle connections give way
 * to a new one, and a client that sends its request at once is served however many laggards
 * hold the table (oldest first, as nginx reuses idle keep-alive connections). Only when every
 * connection is busy or moving at its floor is the newcomer refused (the server closes it at
 * once) rather than left waiting in the listen backlog.
 *
 * Every call takes the current time (tfx_now_ms) as now, so tests can drive the clock.
 * Thread-safe: one mutex; the server's threads report events, the main thread sweeps. A
 * file descriptor is shut down or asked for TCP_INFO only under that mutex, and an entry
 * leaves the table (close) under it before the server closes the descriptor, so a reused
 * descriptor is never hit.
 */
#ifndef TFX_HTTP_GUARD_H
#define TFX_HTTP_GUARD_H

#include <stddef.h>
#include <stdint.h>

typedef struct tfx_guard tfx_guard_t;
typedef struct tfx_guard_conn tfx_guard_conn_t;

/* The rates are measured over windows this long unless the configuration says otherwise. */
#define TFX_GUARD_RATE_WINDOW_MS 10000u
/* At the limit, a transfer is judged by its average only after running this long, and a
 * connection waiting for its head gives way before slow transfers only after waiting this
 * long: a newcomer is not evicted by the next one before it had a chance to speak. */
#define TFX_GUARD_GRACE_MS 1000u

typedef struct {
    unsigned max_conns;             /* connections admitted at once (>= 1) */
    unsigned header_timeout_ms;     /* a request head must be in within this; 0: no deadline */
    uint64_t min_rate;              /* body bytes/s in every rate window; 0: no floor */
    uint64_t min_send_rate;         /* answer bytes/s the peer must take in every rate window
                                     * (acknowledged, TCP_INFO); 0: no floor */
    unsigned rate_window_ms;        /* 0: TFX_GUARD_RATE_WINDOW_MS */
} tfx_guard_config_t;

/* What the guard has done, for the metrics. */
typedef struct {
    uint64_t refused;               /* newcomers refused at the limit */
    uint64_t evicted;               /* waiting connections shut for a newcomer */
    uint64_t head_timeouts;         /* connections shut at the head deadline */
    uint64_t slow_bodies;           /* uploads cut off below the rate floor (408) */
    uint64_t slow_readers;          /* answers cut off below the send floor */
    uint64_t evicted_slow;          /* transfers below their floor shut for a newcomer */
} tfx_guard_stats_t;

/* NULL on out of memory. */
tfx_guard_t *tfx_guard_new(const tfx_guard_config_t *cfg);
/* Frees the guard and any entries left (it shuts nothing down). NULL is a no-op. */
void tfx_guard_free(tfx_guard_t *g);

/* May a new connection come in? 1 (after making room if at the limit, in the order above),
 * or 0: refuse it. */
int tfx_guard_admit(tfx_guard_t *g, uint64_t now);
/* A connection opened on fd: its head deadline starts now. NULL on out of memory (the
 * connection then goes unguarded; every other call accepts NULL and does nothing). */
tfx_guard_conn_t *tfx_guard_open(tfx_guard_t *g, int fd, uint64_t now);
/* Its request head is complete; a body follows when body is 1 (the rate window starts). */
void tfx_guard_head(tfx_guard_t *g, tfx_guard_conn_t *c, int body, uint64_t now);
/* n body bytes arrived. 0, or -1 when the body has fallen below the rate floor: the 408 has
 * been written and the connection shut; the caller drops it. */
int tfx_guard_body(tfx_guard_t *g, tfx_guard_conn_t *c, size_t n, uint64_t now);
/* The body is complete (or there was none): the request is being handled. Idempotent. */
void tfx_guard_busy(tfx_guard_t *g, tfx_guard_conn_t *c);
/* Its answer is queued: the server writes it from now on, and the peer must take it at the
 * send floor (the window starts now). */
void tfx_guard_send(tfx_guard_t *g, tfx_guard_conn_t *c, uint64_t now);
/* The request is over; the connection (kept alive) waits for the next head from now. */
void tfx_guard_idle(tfx_guard_t *g, tfx_guard_conn_t *c, uint64_t now);
/* The connection is closing: the entry is freed (before its descriptor is closed). */
void tfx_guard_close(tfx_guard_t *g, tfx_guard_conn_t *c);

/* Shuts down every connection past its head deadline, every upload below the rate floor
 * (after writing its 408) and every answer its peer takes below the send floor. Call a few
 * times a second. */
void tfx_guard_sweep(tfx_guard_t *g, uint64_t now);

/* Connections counted against the limit (open and not doomed). */
unsigned tfx_guard_count(tfx_guard_t *g);
void tfx_guard_stats(tfx_guard_t *g, tfx_guard_stats_t *out);

#endif
