/* daemon_util.h - end-to-end test helpers: start the real tfetchd on port 0, learn its port
 * from the line it prints, stop it with a signal; run the curl command line and capture what
 * it printed. Used by the test process's main thread (and forked Check children).
 */
#ifndef TF_TESTS_DAEMON_UTIL_H
#define TF_TESTS_DAEMON_UTIL_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    unsigned port;
    char base[64];                  /* http://127.0.0.1:PORT */
    char log_path[256];             /* the daemon's stderr */
} td_daemon_t;

/* Starts $TFETCHD (or ./daemon/tfetchd) --port 0 --listen 127.0.0.1 plus the extra args
 * (NULL-terminated list), under $TFETCHD_WRAPPER if set (e.g. valgrind). Returns 0, or -1
 * (the reason on stderr). */
int td_start(td_daemon_t *d, const char *const *extra_args);
/* Sends sig and waits (up to timeout_ms) for the exit; returns the exit status, 128+signal
 * if killed, or -1 on timeout (then it is SIGKILLed). */
int td_stop(td_daemon_t *d, int sig, int timeout_ms);

/* Runs a shell command; captures stdout (up to cap bytes, NUL-terminated) into out (may be
 * NULL). Returns its exit status, or -1. */
int td_run(const char *cmd, char *out, size_t cap);
/* snprintf into a static per-call buffer for building URLs: td_url(d, "/v1/tensors/%s", n). */
const char *td_url(const td_daemon_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A temporary file with the given bytes; returns its path (static storage, per slot 0..3). */
const char *td_tmpfile(int slot, const void *data, size_t len);

/* Removes this process's temporary files (td_tmpfile slots, curl bodies). */
void td_cleanup(void);

#endif
