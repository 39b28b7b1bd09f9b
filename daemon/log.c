/* log.c - stderr logging with syslog priority prefixes. The level is set once at start-up,
 * and on SIGHUP, read by every thread.
 */
#include "config.h"
#include "daemon/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static atomic_int max_level = LOG_INFO;     /* SIGHUP may change it while threads log */

void tfd_log_set_level(int max_priority) { atomic_store(&max_level, max_priority); }
int tfd_log_level(void) { return atomic_load(&max_level); }

void tfd_log(int priority, const char *fmt, ...)
{
    if (priority > atomic_load(&max_level))
        return;
    char line[1024];
    int n = snprintf(line, sizeof line, "<%d>", priority);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    if (len + 1 < sizeof line) {
        line[len++] = '\n';
        line[len] = '\0';
    }
    fputs(line, stderr);
}
