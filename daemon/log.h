/* log.h - tfetchd's log: one line per event on stderr, prefixed with the syslog priority
 * ("<3>" error ... "<7>" debug) so journald files each line at the right level.
 *
 * Repeats are rate-limited: lines of one kind (one format string, so the same message
 * whatever its arguments) print TFD_LOG_BURST times per TFD_LOG_WINDOW_MS; the rest are
 * counted, and once the window is over (at the next line of that kind, or at tfd_log_flush)
 * one line says how many were suppressed and what they were like. A client that floods the
 * server with connections each worth a warning costs a few lines, not one each. Debug lines
 * (one per request, asked for with log-level debug) are never held back.
 * Thread-safe (one mutex for the counts, one fputs per line).
 */
#ifndef TFD_LOG_H
#define TFD_LOG_H

#include <stdarg.h>
#include <syslog.h>

#define TFD_LOG_BURST 10u            /* lines of one kind printed per window */
#define TFD_LOG_WINDOW_MS 10000u

void tfd_log_set_level(int max_priority);       /* LOG_ERR .. LOG_DEBUG; default LOG_INFO */
int tfd_log_level(void);
void tfd_log(int priority, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with a prefix before the message ("http: "); fmt is the kind the repeats of
 * which are counted (a trailing newline in it is dropped). */
void tfd_vlog(int priority, const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* Writes the "N similar lines suppressed" line of every kind whose window is over, or (all
 * 1) of every kind with lines suppressed so far. The main loop's tick, and before exit. */
void tfd_log_flush(int all);

#endif
