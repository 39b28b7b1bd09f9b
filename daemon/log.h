/* log.h - tfetchd's log: one line per event on stderr, prefixed with the syslog priority
 * ("<3>" error ... "<7>" debug) so journald files each line at the right level.
 * Thread-safe (one fprintf per line).
 */
#ifndef TFD_LOG_H
#define TFD_LOG_H

#include <syslog.h>

void tfd_log_set_level(int max_priority);       /* LOG_ERR .. LOG_DEBUG; default LOG_INFO */
int tfd_log_level(void);
void tfd_log(int priority, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
