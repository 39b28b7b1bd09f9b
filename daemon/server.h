/* server.h - tfetchd's life: starts the daemon's parts and both transports (HTTP, UCX),
 * ticks, drains and frees them.
 *
 * Owns every part (store, waiters, metrics, exchange routes and plugins, sessions, replay,
 * worker processes) and the transports for the daemon's lifetime. Created and drained by
 * the main thread; requests run on the transports' threads (router.h).
 */
#ifndef TFD_SERVER_H
#define TFD_SERVER_H

#include <stdint.h>
#include "daemon/conf.h"
#include "proto/status.h"

typedef struct tfd_server tfd_server_t;

tfd_server_t *tfd_server_start(const tfd_config_t *cfg, tfp_err_t *err);
uint16_t tfd_server_port(const tfd_server_t *s);
/* The settings in force (SIGHUP may have changed the live ones); for the main thread, which
 * is the one that reloads. */
const tfd_config_t *tfd_server_config(const tfd_server_t *s);
/* Periodic housekeeping (worker leases, session and replay expiry): call a few times a
 * second from the main thread. */
void tfd_server_tick(tfd_server_t *s);
/* SIGHUP: reopens the access log file (after a rotation). Main thread. */
void tfd_server_reopen_logs(tfd_server_t *s);
/* SIGHUP with the config read again: applies what can change while serving (the live_keys of
 * server.c: logging, limits, tokens, plugins) and logs, for every other setting that differs,
 * that it needs a restart. A plugin change may wait for calls in the handlers of plugins
 * that go (up to next's drain-timeout): meanwhile it ticks the server and calls idle (if not
 * NULL) every 20 ms; idle returning non-zero gives the plugin change up. Main thread.
 * Returns how many settings were applied. */
unsigned tfd_server_reload(tfd_server_t *s, const tfd_config_t *next, int (*idle)(void));
/* Stops accepting, answers long-polls and pending worker calls with 503, and waits up to
 * timeout_s for requests in flight to finish, calling tick (if not NULL) while it waits.
 * Returns the number still in flight when it gave up (0: clean). */
unsigned tfd_server_drain(tfd_server_t *s, unsigned timeout_s, void (*tick)(void));
void tfd_server_free(tfd_server_t *s);      /* closes every connection */

#endif
