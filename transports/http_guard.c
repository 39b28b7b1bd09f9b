/* http_guard.c - the HTTP server's connection guard (see http_guard.h).
 *
 * Owns one entry per open connection and two lists of them: the connections waiting for a
 * request head, oldest first (entries join at the tail when they start waiting, so the list
 * is ordered by deadline and the sweep stops at the first one still in time), and the
 * connections receiving a body (the sweep checks each one's rate window). Busy and doomed
 * entries are on neither. Also owns the canned 408 answer, built once.
 *
 * Threads: every call takes the one mutex; the server's threads report events, the main
 * thread sweeps. Nothing here blocks but a non-blocking send of the 408.
 */
#include "config.h"
#include "transports/http_guard.h"
#include "proto/jsonw.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

enum { C_HEAD, C_BODY, C_BUSY, C_DOOMED };

struct tfx_guard_conn {
    tfx_guard_conn_t *prev, *next;  /* in waiting or bodies, by state */
    int fd;
    int state;
    uint64_t since;                 /* C_HEAD: waiting since; C_BODY: window start */
    uint64_t window_bytes;          /* C_BODY: bytes in the current window */
};

typedef struct {
    tfx_guard_conn_t *head, *tail;
} list_t;

struct tfx_guard {
    pthread_mutex_t lock;
    tfx_guard_config_t cfg;
    list_t waiting;                 /* C_HEAD, oldest first */
    list_t bodies;                  /* C_BODY */
    unsigned live;                  /* entries not doomed */
    tfx_guard_stats_t st;
    char *slow;                     /* the canned 408 */
    size_t slow_len;
};

/* ---- lists ---------------------------------------------------------------------------- */

static list_t *list_of(tfx_guard_t *g, const tfx_guard_conn_t *c)
{
    return c->state == C_HEAD ? &g->waiting : c->state == C_BODY ? &g->bodies : NULL;
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

/* Writes the 408 (best effort: one non-blocking send; the socket buffer has room, since
 * nothing was sent after the head) and shuts c down. */
static void doom_slow(tfx_guard_t *g, tfx_guard_conn_t *c)
{
    if (g->slow)
        (void)send(c->fd, g->slow, g->slow_len, MSG_DONTWAIT | MSG_NOSIGNAL);
    g->st.slow_bodies++;
    doom(g, c);
}

/* Has c's body fallen below the floor? Closes the window when it has run its length:
 * fails it if too few bytes came, else starts the next one. Caller holds the lock. */
static int too_slow(tfx_guard_t *g, tfx_guard_conn_t *c, uint64_t now)
{
    if (!g->cfg.min_rate || now - c->since < TFX_GUARD_RATE_WINDOW_MS)
        return 0;
    unsigned __int128 want = (unsigned __int128)g->cfg.min_rate * (now - c->since);
    if ((unsigned __int128)c->window_bytes * 1000u < want)
        return 1;
    c->since = now;
    c->window_bytes = 0;
    return 0;
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
    char msg[160];
    snprintf(msg, sizeof msg, "the request body arrived slower than %llu bytes/s over %u s",
             (unsigned long long)cfg->min_rate, TFX_GUARD_RATE_WINDOW_MS / 1000u);
    size_t jlen = 0;
    char *json = tfp_error_json(TFP_EREQTIME, msg, &jlen);
    if (!json) {
        free(g);
        return NULL;
    }
    size_t cap = jlen + 160;
    g->slow = malloc(cap);
    if (!g->slow) {
        free(json);
        free(g);
        return NULL;
    }
    int n = snprintf(g->slow, cap, "HTTP/1.1 408 Request Timeout\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     jlen, json);
    g->slow_len = n > 0 && (size_t)n < cap ? (size_t)n : 0;
    free(json);
    pthread_mutex_init(&g->lock, NULL);
    return g;
}

void tfx_guard_free(tfx_guard_t *g)
{
    if (!g)
        return;
    /* The server reports every close before this (MHD_stop_daemon does): whatever is
     * still listed is freed all the same. */
    list_t *ls[2] = {&g->waiting, &g->bodies};
    for (int i = 0; i < 2; i++)
        while (ls[i]->head) {
            tfx_guard_conn_t *c = ls[i]->head;
            ls[i]->head = c->next;
            free(c);
        }
    pthread_mutex_destroy(&g->lock);
    free(g->slow);
    free(g);
}

int tfx_guard_admit(tfx_guard_t *g, uint64_t now)
{
    pthread_mutex_lock(&g->lock);
    int ok = 1;
    if (g->live >= g->cfg.max_conns) {
        (void)now;
        tfx_guard_conn_t *v = g->waiting.head;     /* the longest waiting */
        if (v) {
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
        c->since = now;
        c->window_bytes = 0;
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
        if (too_slow(g, c, now)) {
            doom_slow(g, c);
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
        if (too_slow(g, c, now))
            doom_slow(g, c);
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
