/* fixtures.h - the shared test fixtures, and the one tfetchd spawner (tests and bench).
 *
 * Starts the real tfetchd on port 0 and learns its port from the "listening on
 * http://ADDR:PORT" line it prints, stops it with a signal; runs the curl command line and
 * captures what it printed; builds URLs; writes temporary files; finds a port nothing listens
 * on. libc only (built as tests/libtdfix.la, which bench/tfetch-bench links too). Used by one
 * thread of a process at a time: each Check test runs in its own forked process.
 */
#ifndef TF_TESTS_FIXTURES_H
#define TF_TESTS_FIXTURES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    unsigned port;
    int out_fd;                     /* its stdout; open until td_stop, so late writes never fail */
    char base[64];                  /* http://127.0.0.1:PORT */
    char log_path[256];             /* the daemon's stderr */
} td_daemon_t;

/* How to start it (td_start_opts); zeroes give td_start's defaults. */
typedef struct {
    const char *bin;                /* NULL: $TFETCHD, else ./daemon/tfetchd */
    const char *const *args;        /* NULL-terminated, after --port 0 --listen 127.0.0.1 */
    int own_config;                 /* 1: no --config /dev/null (it reads its default file) */
    int start_ms;                   /* how long to wait for the port line; 0: 30000 */
    const char *log_prefix;         /* NULL: "/tmp/tfetchd-test" */
} td_opts_t;

/* Starts $TFETCHD (or ./daemon/tfetchd) --port 0 --listen 127.0.0.1 --config /dev/null plus
 * the extra args (NULL-terminated list), under $TFETCHD_WRAPPER if set (e.g. valgrind).
 * Returns 0, or -1 (the reason on stderr; d->pid is then 0 and the log kept). */
int td_start(td_daemon_t *d, const char *const *extra_args);
/* The same with every choice spelled out; the daemon gets SIGTERM if its parent dies. */
int td_start_opts(td_daemon_t *d, const td_opts_t *o);
/* Sends sig and waits (up to timeout_ms) for the exit; returns the exit status, 128+signal
 * if killed, or -1 on timeout (then it is SIGKILLed). Removes the log if it exited 0. */
int td_stop(td_daemon_t *d, int sig, int timeout_ms);
/* The last 4 KiB of the daemon's stderr, on stderr, between marker lines. */
void td_show_log(const td_daemon_t *d);

/* Runs a shell command; captures stdout (up to cap bytes, NUL-terminated) into out (may be
 * NULL). Returns its exit status, or -1. */
int td_run(const char *cmd, char *out, size_t cap);
/* An unlabelled number from the daemon's /metrics (curl), or -1 when it has none. */
long long td_metric(const td_daemon_t *d, const char *name);
/* snprintf into a static per-call buffer for building URLs: td_url(d, "/v1/tensors/%s", n). */
const char *td_url(const td_daemon_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A temporary file with the given bytes; returns its path (static storage, per slot 0..3). */
const char *td_tmpfile(int slot, const void *data, size_t len);

/* Removes this process's temporary files (td_tmpfile slots, curl bodies). */
void td_cleanup(void);

/* A port on 127.0.0.1 that nothing listens on: bound and kept so, never listening (a
 * connect is refused), until the process ends, so no other process can take it meanwhile.
 * Aborts (the test fails with SIGABRT) if the socket calls fail. */
int td_closed_port(void);

/* Seeded randomness and strings for the wire-format suites (check_ucxframe.c,
 * check_upgrade.c): xorshift64*, reproducible from the rnd_state a test sets. */
extern uint64_t rnd_state;
uint64_t rnd(void);
/* A draw in [0, n). */
size_t rnd_below(size_t n);
/* Random well-formed UTF-8 of at most max bytes, no NUL, into dst (max + 1 bytes). */
void rnd_utf8(char *dst, size_t max);

#endif
