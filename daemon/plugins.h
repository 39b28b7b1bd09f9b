/* plugins.h - route plugins: shared objects loaded through the ABI in tfetch-plugin.h, whose
 * routes join the route table (kind "plugin"), at start-up and again on SIGHUP.
 *
 * A plugin setting is "PATH [ARGS]": the path ends at the first blank, and the rest (leading
 * blanks skipped) goes to the plugin's init. Loading is all or nothing: a plugin that cannot
 * be opened, lacks tfpl_plugin_entry, was built for another ABI, declares a bad route, takes
 * a route name already in the table, or whose init refuses, is unloaded again and reported
 * as an error; at start-up tfetchd then does not start, on SIGHUP the plugins stay as they
 * were. A reload unloads a plugin only once no call runs in its handlers and its per-user
 * states are freed (with its own destructors).
 *
 * Threads: load, reload and free on the main thread; load before the HTTP server starts,
 * free after it stopped, reload while it serves. The routes' handlers run on any worker
 * thread.
 */
#ifndef TFD_PLUGINS_H
#define TFD_PLUGINS_H

#include <stddef.h>
#include "daemon/conf.h"
#include "daemon/routes.h"
#include "proto/status.h"

typedef struct tfd_plugins tfd_plugins_t;

/* An empty set whose plugins will register their routes in rs. NULL if no memory. */
tfd_plugins_t *tfd_plugins_new(tfd_routes_t *rs);
/* Loads one plugin ("PATH [ARGS]") and registers its routes. 0, or -1 with err set (and
 * nothing of the plugin left loaded or registered). */
int tfd_plugins_load(tfd_plugins_t *ps, const char *spec, tfp_err_t *err);
/* New set with every plugin cfg names, in order. NULL with err set on the first failure. */
tfd_plugins_t *tfd_plugins_start(tfd_routes_t *rs, const tfd_config_t *cfg, tfp_err_t *err);
size_t tfd_plugins_count(const tfd_plugins_t *ps);

/* How long a reload waits for the calls and states of the plugins it unloads. */
typedef struct {
    unsigned timeout_ms;            /* then it gives up, changing nothing */
    int (*idle)(void *arg);         /* called every 20 ms while waiting (housekeeping); non-zero
                                     * gives up. May be NULL */
    void *arg;
} tfd_plugins_wait_t;

/* Makes the loaded plugins the ones cfg names (SIGHUP); sessions holds the per-user states
 * of their routes (NULL: there are none). A plugin named with the same path and
 * arguments as before stays as it is. The others come and go:
 *   1. the new ones are opened and started (init), their routes not yet in the table;
 *   2. the routes of the ones going away (also those whose arguments changed) answer 503
 *      "being reloaded" from then on; it waits (w) until no call runs in their handlers
 *      and, from then on, until their per-user states are freed by their own destructors;
 *   3. one whose file is named again with other arguments is unloaded (fini, dlclose), and
 *      the file opened and started again with the new arguments;
 *   4. the new routes replace the placeholders (or are added), each in one step; the old
 *      ones left go (404); the plugins going away are unloaded (fini, dlclose).
 * Any failure (a file that does not load, a route name taken, an init that refuses, the wait
 * timing out or giving up) undoes it all: what step 1 and 3 started is stopped, and the old
 * plugins' routes are back. Their states may be gone by then, and one unloaded in step 3 is
 * started again from its old setting. Logs each plugin loaded and unloaded (NOTICE). 0, or
 * -1 with err set. w may be NULL (no waiting). */
int tfd_plugins_reload(tfd_plugins_t *ps, const tfd_config_t *cfg, tfd_sessions_t *sessions,
                       const tfd_plugins_wait_t *w, tfp_err_t *err);
/* Unloads in reverse order: removes each plugin's routes, runs its fini, closes it. Call once
 * no call can run any more and after the sessions (whose states a plugin's destructors free)
 * are freed, before the route table is. NULL is a no-op. */
void tfd_plugins_free(tfd_plugins_t *ps);

#endif
