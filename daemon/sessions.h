/* sessions.h - per-user state kept between exchange calls.
 *
 * A session belongs to one user id (requests without one share the anonymous session "")
 * and holds one state slot per route. Sessions expire after ttl seconds unused, are bounded in
 * count and in bytes per user and in total; when a limit is reached the least recently used
 * idle session is evicted (counted). A session is locked while a call uses it, so one user's
 * concurrent calls to a stateful route are serialised; different users never share one.
 * Thread-safe.
 */
#ifndef TFD_SESSIONS_H
#define TFD_SESSIONS_H

#include <stddef.h>
#include <stdint.h>

typedef struct tfd_sessions tfd_sessions_t;
typedef struct tfd_session tfd_session_t;

typedef struct {
    unsigned ttl_s;                 /* idle time before expiry */
    unsigned max_sessions;
    uint64_t max_user_bytes;        /* state bytes one session may hold */
    uint64_t max_total_bytes;       /* state bytes all sessions may hold */
} tfd_sessions_limits_t;

typedef struct {
    uint64_t sessions, bytes, evictions, expirations, rejections;
} tfd_sessions_stats_t;

tfd_sessions_t *tfd_sessions_new(const tfd_sessions_limits_t *limits);
/* New limits while serving (SIGHUP); sessions already over them are not cut short. */
void tfd_sessions_set_limits(tfd_sessions_t *s, const tfd_sessions_limits_t *limits);
void tfd_sessions_free(tfd_sessions_t *s);

/* The session of user (created if needed), locked for the caller. NULL when it cannot be
 * created (the session count is at its limit and every session is in use, or no memory). */
void *tfd_sessions_acquire(tfd_sessions_t *s, const char *user);
void tfd_sessions_release(tfd_sessions_t *s, void *session);

/* State slots of an acquired session. */
void *tfd_session_state(tfd_sessions_t *s, void *session, const char *route);
/* 0, or -1 over quota / no memory. On failure a new state is destroyed (destroy(state)) and
 * the slot keeps what it had; passing the slot's current state again only updates its size
 * (and on failure leaves it as it was). Replacing frees the old state; NULL clears the slot. */
int tfd_session_set_state(tfd_sessions_t *s, void *session, const char *route, void *state,
                          size_t bytes, void (*destroy)(void *));

/* Ends user's session now (DELETE /v1/sessions/self): 0, or -1 if it had none. A session in
 * use is ended when its call releases it. */
int tfd_sessions_end(tfd_sessions_t *s, const char *user);
/* Frees (destroy) every state kept for route in the sessions no call holds, as a plugin's
 * routes go (SIGHUP). Returns how many sessions in use still keep one: call again once their
 * calls are over (a session's slots belong to the call holding it). */
unsigned tfd_sessions_drop_route(tfd_sessions_t *s, const char *route);
/* Expires idle sessions past their ttl; call periodically. */
void tfd_sessions_sweep(tfd_sessions_t *s);
void tfd_sessions_stats(tfd_sessions_t *s, tfd_sessions_stats_t *out);

#endif
