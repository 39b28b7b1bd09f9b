/* daemon_util.c - start/stop the real tfetchd and run curl for the end-to-end suites.
 * Single-threaded use (each Check test runs in its own forked process).
 */
#include "config.h"
#include "tests/daemon_util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000L + (t.tv_nsec - t0->tv_nsec) / 1000000L;
}

int td_start(td_daemon_t *d, const char *const *extra)
{
    memset(d, 0, sizeof *d);
    const char *bin = getenv("TFETCHD");
    if (!bin)
        bin = "./daemon/tfetchd";
    const char *argv[64];
    int n = 0;
    /* TFETCHD_WRAPPER="valgrind -q --error-exitcode=99": run the daemon under a tool. */
    static char wrap[512];
    const char *w = getenv("TFETCHD_WRAPPER");
    if (w && *w) {
        snprintf(wrap, sizeof wrap, "%s", w);
        for (char *tok = strtok(wrap, " "); tok && n < 16; tok = strtok(NULL, " "))
            argv[n++] = tok;
    }
    const char *exe = n ? argv[0] : bin;
    argv[n++] = bin;
    argv[n++] = "--port";
    argv[n++] = "0";
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--config";
    argv[n++] = "/dev/null";
    for (int i = 0; extra && extra[i] && n < 62; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;

    snprintf(d->log_path, sizeof d->log_path, "/tmp/tfetchd-test-%d-%ld.log", (int)getpid(),
             (long)time(NULL));
    int out[2];
    if (pipe(out) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(out[1], 1);
        int err = open(d->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (err >= 0)
            dup2(err, 2);
        close(out[0]);
        close(out[1]);
        execvp(exe, (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    d->pid = pid;
    char line[256];
    size_t len = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (len < sizeof line - 1 && ms_since(&t0) < 30000) {
        struct pollfd p = {out[0], POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t k = read(out[0], line + len, 1);
        if (k <= 0)
            break;
        if (line[len] == '\n')
            break;
        len++;
    }
    line[len] = '\0';
    close(out[0]);                  /* later stdout writes would get EPIPE: it prints one line */
    const char *p = strstr(line, "listening on http://127.0.0.1:");
    if (!p || sscanf(p + strlen("listening on http://127.0.0.1:"), "%u", &d->port) != 1) {
        fprintf(stderr, "tfetchd did not start (printed '%s'); log in %s\n", line, d->log_path);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    snprintf(d->base, sizeof d->base, "http://127.0.0.1:%u", d->port);
    return 0;
}

int td_stop(td_daemon_t *d, int sig, int timeout_ms)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, sig);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st;
    for (;;) {
        pid_t r = waitpid(d->pid, &st, WNOHANG);
        if (r == d->pid)
            break;
        if (ms_since(&t0) > timeout_ms) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, NULL, 0);
            d->pid = 0;
            return -1;
        }
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    d->pid = 0;
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (rc == 0)
        unlink(d->log_path);        /* kept when something went wrong */
    return rc;
}

int td_run(const char *cmd, char *out, size_t cap)
{
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t len = 0;
    if (out && cap) {
        size_t k;
        while (len < cap - 1 && (k = fread(out + len, 1, cap - 1 - len, f)) > 0)
            len += k;
        out[len] = '\0';
    }
    char sink[4096];
    while (fread(sink, 1, sizeof sink, f) > 0)
        ;
    int st = pclose(f);
    if (st < 0 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

const char *td_url(const td_daemon_t *d, const char *fmt, ...)
{
    static char bufs[4][512];
    static int k;
    char *b = bufs[k++ & 3];
    int n = snprintf(b, 512, "%s", d->base);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b + n, 512 - (size_t)n, fmt, ap);
    va_end(ap);
    return b;
}

const char *td_tmpfile(int slot, const void *data, size_t len)
{
    static char paths[4][128];
    char *p = paths[slot & 3];
    snprintf(p, 128, "/tmp/tfetch-test-%d-%d.bin", (int)getpid(), slot & 3);
    FILE *f = fopen(p, "wb");
    if (!f)
        return NULL;
    if (len && fwrite(data, 1, len, f) != len) {
        fclose(f);
        return NULL;
    }
    fclose(f);
    return p;
}

void td_cleanup(void)
{
    char p[128];
    for (int slot = 0; slot < 4; slot++) {
        snprintf(p, sizeof p, "/tmp/tfetch-test-%d-%d.bin", (int)getpid(), slot);
        unlink(p);
    }
    snprintf(p, sizeof p, "/tmp/tf-e2e-body-%d", (int)getpid());
    unlink(p);
    snprintf(p, sizeof p, "/tmp/tf-e2e-st-%d", (int)getpid());
    unlink(p);
}
