/* http_guard.c - the HTTP server's connection guard (see http_guard.h).
 *
 * Owns one entry per open connection and three lists of them: the connections waiting for a
 * request head, oldest first (entries join at the tail when they start waiting, so the list
 * is ordered by deadline and the sweep stops at the first one still in time), the
 * connections receiving a body and those sending an answer (the sweep checks each one's rate
 * window; at the limit, admit looks among them for the slowest). Busy and doomed entries are
 * on none. Also owns the canned 408 answers, built once.
 *
 * Threads: every call takes the one mutex; the server's threads report events, the main
 * thread sweeps. Nothing here blocks but a non-blocking send of a 408 and getsockopt.
 */
#include "config.h"
#include "transports/http_guard.h"
#include "proto/jsonw.h"

#include <netinet/in.h>
#include <linux/tcp.h>              /* tcpi_bytes_acked: glibc's tcp_info lacks it */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

enum { C_HEAD, C_BODY, C_BUSY, C_SEND, C_DOOMED };

struct tfx_guard_conn {
    tfx_guard_conn_t *prev, *next;  /* in waiting, bodies or sends, by state */
    int fd;
    int state;
    uint64_t since;                 /* C_HEAD: waiting since; C_BODY, C_SEND: window start */
    uint64_t window_bytes;          /* C_BODY: bytes in the current window; C_SEND: bytes
                                     * acknowledged when it started */
    uint64_t began;                 /* C_BODY, C_SEND: when the transfer began */
    uint64_t moved;                 /* C_BODY: bytes since it began; C_SEND: bytes acknowledged
                                     * when it began */
    uint64_t acked;                 /* C_SEND: bytes acknowledged, as last read */
};

typedef struct {
    tfx_guard_conn_t *head, *tail;
} list_t;

struct tfx_guard {
    pthread_mutex_t lock;
    tfx_guard_config_t cfg;
    list_t waiting;                 /* C_HEAD, oldest first */
    list_t bodies;                  /* C_BODY */
    list_t sends;                   /* C_SEND */
    unsigned live;                  /* entries not doomed */
    tfx_guard_stats_t st;
    char *slow;                     /* the canned 408s: below the floor, */
    size_t slow_len;
    char *evict;                    /* and evicted at the limit */
    size_t evict_len;
};

/* ---- lists ---------------------------------------------------------------------------- */

static list_t *list_of(tfx_guard_t *g, const tfx_guard_conn_t *c)
{
    switch (c->state) {
    case C_HEAD: return &g->waiting;
    case C_BODY: return &g->bodies;
    case C_SEND: return &g->sends;
    default: return NULL;
    }
}

static void unlink_conn(tfx_guard_t *g, tfx_guard_conn_t *c)
{
    list_t *l = list_of(g, c);
    if (!l)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        l->tail = c->prev;
    c->prev = c->next = NULL;
}

/* Moves c to state (joining the tail of that state's list). Caller holds the lock. */
static void set_state(tfx_guard_t *g, tfx_guard_conn_t *c, int state)
{
    unlink_conn(g, c);
    c->state = state;
    list_t *l = list_of(g, c);
    if (!l)
        return;
    c->prev = l->tail;
    if (l->tail)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
}

/* Shuts c down for good: the server's loop sees the end of the stream and closes it. */
static void doom(tfx_guard_t *g, tfx_guard_conn_t *c)
{
    set_state(g, c, C_DOOMED);
    g->live--;
    (void)shutdown(c->fd, SHUT_RDWR);
}

/* Shuts c down; a body first gets the 408 in msg (best effort: one non-blocking send; the
 * socket buffer has room, since nothing was sent after the head). An answer being sent gets
 * nothing more: the server is in the middle of writing it. */
static void doom_transfer(tfx_guard_t *g, tfx_guard_conn_t *c, const char *msg, size_t len)
{
    if (c->state == C_BODY && msg)
        (void)send(c->fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    doom(g, c);
}

/* Are n bytes in ms below rate bytes/s? */
static int below(uint64_t n, uint64_t ms, uint64_t rate)
{
    return (unsigned __int128)n * 1000u < (unsigned __int128)rate * ms;
}

/* Bytes of fd's stream the peer has acknowledged (TCP_INFO), or 0 where there is no TCP
 * (the guard then sees no progress, and with a send floor cuts the answer as stalled). */
static uint64_t acked(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof ti.tcpi_bytes_acked)
        return 0;
    return ti.tcpi_bytes_acked;
}

/* Whether bytes of fd's request body wait in the kernel, unread: the client has sent them,
 * and the server is what is behind (its threads starved, the connection suspended), so the
 * client is not judged slow. A trickler's bytes are read as they come: it has none there. */
static int server_behind(int fd)
{
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/* The floor of c's kind of transfer (0: none). */
static uint64_t floor_of(const tfx_guard_t *g, const tfx_guard_conn_t *c)
{
    return c->state == C_BODY ? g->cfg.min_rate : c->state == C_SEND ? g->cfg.min_send_rate : 0;
}

/* Has c's transfer fallen below its floor? Closes the window when it has run its length:
 * fails it if too few bytes moved, else starts the next one. Caller holds the lock. */
static int too_slow(tfx_guard_t *g, tfx_guard_conn_t *c, uint64_t now)
{
    uint64_t rate = floor_of(g, c);
    if (!rate || now - c->since < g->cfg.rate_window_ms)
        return 0;
    uint64_t moved = c->window_bytes;
    if (c->state == C_SEND) {
        c->acked = acked(c->fd);
        moved = c->acked - c->window_bytes;
    }
    if (below(moved, now - c->since, rate) && !(c->state == C_BODY && server_behind(c->fd)))
        return 1;
    c->since = now;
    c->window_bytes = c->state == C_SEND ? c->acked : 0;
    return 0;
}

/* The slowest transfer below its floor on average since it began, among those that have run
 * the grace period; NULL when there is none. Reads each answer's progress afresh. Caller
 * holds the lock. */
static tfx_guard_conn_t *slowest(tfx_guard_t *g, uint64_t now)
{
    tfx_guard_conn_t *v = NULL;
    uint64_t v_moved = 0, v_ms = 1;
    list_t *ls[2] = {&g->bodies, &g->sends};
    for (int i = 0; i < 2; i++)
        for (tfx_guard_conn_t *c = ls[i]->head; c; c = c->next) {
            uint64_t rate = floor_of(g, c), ms = now - c->began;
            if (!rate || now < c->began || ms < TFX_GUARD_GRACE_MS)
                continue;
            uint64_t moved = c->moved;
            if (c->state == C_SEND) {
                c->acked = acked(c->fd);
                moved = c->acked - c->moved;
            }
            /* the slowest relative to its floor: moved/(ms*rate) smallest */
            if (below(moved, ms, rate) && !(c->state == C_BODY && server_behind(c->fd)) &&
                (!v || (unsigned __int128)moved * v_ms * floor_of(g, v) <
                           (unsigned __int128)v_moved * ms * rate)) {
                v = c;
                v_moved = moved;
                v_ms = ms;
            }
        }
    return v;
}

/* A canned 408 with msg as its JSON error; NULL on out of memory. */
static char *canned_408(const char *msg, size_t *len)
{
    size_t jlen = 0;
    char *json = tfp_error_json(TFP_EREQTIME, msg, &jlen);
    if (!json)
        return NULL;
    size_t cap = jlen + 160;
    char *out = malloc(cap);
    if (out) {
        int n = snprintf(out, cap, "HTTP/1.1 408 Request Timeout\r\nContent-Type: "
                         "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         jlen, json);
        *len = n > 0 && (size_t)n < cap ? (size_t)n : 0;
    }
    free(json);
    return out;
}

/* ---- the API ------------------------------------------------------------------------------ */

tfx_guard_t *tfx_guard_new(const tfx_guard_config_t *cfg)
{
    tfx_guard_t *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->cfg = *cfg;
    if (g->cfg.max_conns == 0)
        g->cfg.max_conns = 1;
    if (g->cfg.rate_window_ms == 0)
        g->cfg.rate_window_ms = TFX_GUARD_RATE_WINDOW_MS;
    char msg[200];
    snprintf(msg, sizeof msg, "the request body arrived slower than %llu bytes/s over %u ms",
             (unsigned long long)cfg->min_rate, g->cfg.rate_window_ms);
    if (!(g->slow = canned_408(msg, &g->slow_len)))
        goto fail;
    snprintf(msg, sizeof msg, "the server is at its connection limit and this request body was "
             "the slowest, below %llu bytes/s", (unsigned long long)cfg->min_rate);
    if (!(g->evict = canned_408(msg, &g->evict_len)))
        goto fail;
    pthread_mutex_init(&g->lock, NULL);
    return g;
fail:
    free(g->slow);
    free(g);
    return NULL;
}

void tfx_guard_free(tfx_guard_t *g)
{
    if (!g)
        return;
    /* The server reports every close before this (MHD_stop_daemon does): whatever is
     * still listed is freed all the same. */
    list_t *ls[3] = {&g->waiting, &g->bodies, &g->sends};
    for (int i = 0; i < 3; i++)
        while (ls[i]->head) {
            tfx_guard_conn_t *c = ls[i]->head;
            ls[i]->head = c->next;
            free(c);
        }
    pthread_mutex_destroy(&g->lock);
    free(g->slow);
    free(g->evict);
    free(g);
}

int tfx_guard_admit(tfx_guard_t *g, uint64_t now)
{
    pthread_mutex_lock(&g->lock);
    int ok = 1;
    if (g->live >= g->cfg.max_conns) {
        tfx_guard_conn_t *v = g->waiting.head;     /* the longest waiting */
        tfx_guard_conn_t *s = !v || now - v->since < TFX_GUARD_GRACE_MS ? slowest(g, now) : NULL;
        if (s) {
            doom_transfer(g, s, g->evict, g->evict_len);
            g->st.evicted_slow++;
        } else if (v) {
            doom(g, v);
            g->st.evicted++;
        } else {
            g->st.refused++;
            ok = 0;
        }
    }
    pthread_mutex_unlock(&g->lock);
    return ok;
}

tfx_guard_conn_t *tfx_guard_open(tfx_guard_t *g, int fd, uint64_t now)
{
    tfx_guard_conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    c->state = C_BUSY;
    c->since = now;
    pthread_mutex_lock(&g->lock);
    g->live++;
    set_state(g, c, C_HEAD);
    pthread_mutex_unlock(&g->lock);
    return c;
}

void tfx_guard_head(tfx_guard_t *g, tfx_guard_conn_t *c, int body, uint64_t now)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->lock);
    if (c->state != C_DOOMED) {
        set_state(g, c, body ? C_BODY : C_BUSY);
        c->since = c->began = now;
        c->window_bytes = c->moved = 0;
    }
    pthread_mutex_unlock(&g->lock);
}

int tfx_guard_body(tfx_guard_t *g, tfx_guard_conn_t *c, size_t n, uint64_t now)
{
    if (!c)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&g->lock);
    if (c->state == C_BODY) {
        c->window_bytes += n;
        c->moved += n;
        if (too_slow(g, c, now)) {
            doom_transfer(g, c, g->slow, g->slow_len);
            g->st.slow_bodies++;
            rc = -1;
        }
    } else if (c->state == C_DOOMED) {
        rc = -1;
    }
    pthread_mutex_unlock(&g->lock);
    return rc;
}

void tfx_guard_busy(tfx_guard_t *g, tfx_guard_conn_t *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->lock);
    if (c->state != C_DOOMED && c->state != C_BUSY)
        set_state(g, c, C_BUSY);
    pthread_mutex_unlock(&g->lock);
}

void tfx_guard_send(tfx_guard_t *g, tfx_guard_conn_t *c, uint64_t now)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->lock);
    if (c->state != C_DOOMED) {
        set_state(g, c, C_SEND);
        c->since = c->began = now;
        c->acked = c->window_bytes = c->moved = g->cfg.min_send_rate ? acked(c->fd) : 0;
    }
    pthread_mutex_unlock(&g->lock);
}

void tfx_guard_idle(tfx_guard_t *g, tfx_guard_conn_t *c, uint64_t now)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->lock);
    if (c->state != C_DOOMED) {
        c->since = now;
        set_state(g, c, C_HEAD);
    }
    pthread_mutex_unlock(&g->lock);
}

void tfx_guard_close(tfx_guard_t *g, tfx_guard_conn_t *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->lock);
    if (c->state != C_DOOMED)
        g->live--;
    unlink_conn(g, c);
    pthread_mutex_unlock(&g->lock);
    free(c);
}

void tfx_guard_sweep(tfx_guard_t *g, uint64_t now)
{
    pthread_mutex_lock(&g->lock);
    if (g->cfg.header_timeout_ms)
        while (g->waiting.head && now - g->waiting.head->since >= g->cfg.header_timeout_ms) {
            doom(g, g->waiting.head);
            g->st.head_timeouts++;
        }
    for (tfx_guard_conn_t *c = g->bodies.head, *next; c; c = next) {
        next = c->next;
        if (too_slow(g, c, now)) {
            doom_transfer(g, c, g->slow, g->slow_len);
            g->st.slow_bodies++;
        }
    }
    for (tfx_guard_conn_t *c = g->sends.head, *next; c; c = next) {
        next = c->next;
        if (too_slow(g, c, now)) {
            doom_transfer(g, c, NULL, 0);
            g->st.slow_readers++;
        }
    }
    pthread_mutex_unlock(&g->lock);
}

unsigned tfx_guard_count(tfx_guard_t *g)
{
    pthread_mutex_lock(&g->lock);
    unsigned n = g->live;
    pthread_mutex_unlock(&g->lock);
    return n;
}

void tfx_guard_stats(tfx_guard_t *g, tfx_guard_stats_t *out)
{
    pthread_mutex_lock(&g->lock);
    *out = g->st;
    pthread_mutex_unlock(&g->lock);
}
