/* log.c - stderr logging with syslog priority prefixes, and the rate limit on repeats (log.h).
 * The level is set once at start-up, and on SIGHUP, read by every thread.
 *
 * Owns a small table of the kinds of line seen lately, keyed by format string (the same
 * pointer: every call site passes a literal, libmicrohttpd too), direct-mapped: a kind that
 * takes another's slot first writes that one's count of suppressed lines. Threads: any; one
 * mutex over the table, held only to count, never while writing.
 */
#include "config.h"
#include "daemon/log.h"
#include "transports/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define SLOTS 64
#define SAMPLE 160                  /* bytes of a kind's first line kept for its summary */

typedef struct {
    const char *key;                /* the format string; NULL: free */
    int priority;
    uint64_t start;                 /* the window's start (ms) */
    unsigned printed;               /* lines printed in this window */
    uint64_t suppressed;            /* lines counted, not printed, in this window */
    char sample[SAMPLE];            /* the window's first line, for the summary */
} kind_t;

static atomic_int max_level = LOG_INFO;     /* SIGHUP may change it while threads log */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static kind_t kinds[SLOTS];

void tfd_log_set_level(int max_priority) { atomic_store(&max_level, max_priority); }
int tfd_log_level(void) { return atomic_load(&max_level); }

static void put(const char *line)
{
    fputs(line, stderr);
}

/* The summary line of k's window into out (empty when nothing was suppressed), and the
 * window reset to start at now. Caller holds the lock. */
static void close_window(kind_t *k, uint64_t now, char *out, size_t cap)
{
    out[0] = '\0';
    if (k->suppressed)
        snprintf(out, cap, "<%d>%llu similar lines suppressed in %llu s (like: %s)\n",
                 k->priority, (unsigned long long)k->suppressed,
                 (unsigned long long)((now - k->start + 999) / 1000), k->sample);
    k->start = now;
    k->printed = 0;
    k->suppressed = 0;
}

#define PROBES 8                    /* slots a kind may take, from its home slot on */

static size_t home_of(const char *key)
{
    uintptr_t h = (uintptr_t)key;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)((h >> 32) % SLOTS);
}

/* key's slot: its own among the PROBES from its home, else the first free or idle one there
 * (an idle kind's window closed first: *summary), else, with all of them busy with other
 * kinds, its home slot, shared: the kinds there share one budget, so kinds that collide and
 * take turns cannot each start afresh and flood together. Caller holds the lock. */
static kind_t *slot_of(const char *key, uint64_t now, char *summary, size_t cap)
{
    size_t home = home_of(key);
    kind_t *take = NULL;
    for (size_t i = 0; i < PROBES; i++) {
        kind_t *k = &kinds[(home + i) % SLOTS];
        if (k->key == key)
            return k;
        if (!take && (!k->key || now - k->start >= TFD_LOG_WINDOW_MS))
            take = k;
    }
    if (!take) {
        kinds[home].key = key;
        return &kinds[home];
    }
    if (take->key)
        close_window(take, now, summary, cap);
    take->key = key;
    take->start = now;
    take->printed = 0;
    take->suppressed = 0;
    take->sample[0] = '\0';
    return take;
}

/* Whether a line of kind key may print now; *summary gets a line to write first (a window
 * over, or a slot taken from another kind). */
static int admit(int priority, const char *key, char *summary, size_t cap, kind_t **kp)
{
    int ok;

    pthread_mutex_lock(&lock);
    uint64_t now = tfx_now_ms();        /* under the lock: windows start in order */
    summary[0] = '\0';
    kind_t *k = slot_of(key, now, summary, cap);
    if (!summary[0] && now - k->start >= TFD_LOG_WINDOW_MS)
        close_window(k, now, summary, cap);
    k->priority = priority;
    ok = k->printed < TFD_LOG_BURST;
    if (ok)
        k->printed++;
    else
        k->suppressed++;
    *kp = ok && k->printed == 1 ? k : NULL;     /* the first of its window: keep a sample */
    pthread_mutex_unlock(&lock);
    return ok;
}

void tfd_vlog(int priority, const char *prefix, const char *fmt, va_list ap)
{
    if (priority > atomic_load(&max_level))
        return;
    char summary[SAMPLE + 128] = "";
    kind_t *first = NULL;
    int ok = priority >= LOG_DEBUG || admit(priority, fmt, summary, sizeof summary, &first);
    if (summary[0])
        put(summary);
    if (!ok)
        return;
    char line[1024];
    int n = snprintf(line, sizeof line, "<%d>%s", priority, prefix);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    size_t len = strlen(line);
    while (len > (size_t)n && line[len - 1] == '\n')
        line[--len] = '\0';
    if (first) {
        pthread_mutex_lock(&lock);
        if (first->key == fmt)
            snprintf(first->sample, sizeof first->sample, "%s", line + n - strlen(prefix));
        pthread_mutex_unlock(&lock);
    }
    if (len + 1 < sizeof line) {
        line[len++] = '\n';
        line[len] = '\0';
    }
    put(line);
}

void tfd_log(int priority, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tfd_vlog(priority, "", fmt, ap);
    va_end(ap);
}

void tfd_log_flush(int all)
{
    uint64_t now = tfx_now_ms();
    for (size_t i = 0; i < SLOTS; i++) {
        char summary[SAMPLE + 128] = "";
        pthread_mutex_lock(&lock);
        kind_t *k = &kinds[i];
        if (k->key && k->suppressed && (all || now - k->start >= TFD_LOG_WINDOW_MS))
            close_window(k, now, summary, sizeof summary);
        pthread_mutex_unlock(&lock);
        if (summary[0])
            put(summary);
    }
}
