/* noentry.c - a shared object that is not a tfetch plugin: it lacks tfpl_plugin_entry
 * (tests/check_plugins.c checks that tfetchd refuses it).
 */
int tp_not_a_plugin(int x);

int tp_not_a_plugin(int x) { return x + 1; }
