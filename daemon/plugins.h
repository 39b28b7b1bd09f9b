/* plugins.h - route plugins: shared objects loaded at start-up through the ABI in
 * tfetch-plugin.h, whose routes join the route table (kind "plugin").
 *
 * A plugin setting is "PATH [ARGS]": the path ends at the first blank, and the rest (leading
 * blanks skipped) goes to the plugin's init. Loading is all or nothing: a plugin that cannot
 * be opened, lacks tfpl_plugin_entry, was built for another ABI, declares a bad route, takes
 * a route name already in the table, or whose init refuses, is unloaded again and reported
 * as an error, and tfetchd does not start.
 *
 * Threads: load and free on the main thread, while no call runs (before the HTTP server
 * starts, after it stopped); the routes' handlers then run on any worker thread.
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
/* Unloads in reverse order: removes each plugin's routes, runs its fini, closes it. Call once
 * no call can run any more and after the sessions (whose states a plugin's destructors free)
 * are freed, before the route table is. NULL is a no-op. */
void tfd_plugins_free(tfd_plugins_t *ps);

#endif
