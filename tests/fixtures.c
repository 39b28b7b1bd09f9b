/* fixtures.c - the shared test fixtures and the one tfetchd spawner; see fixtures.h.
 * Single-threaded use (each Check test runs in its own forked process; the bench from main).
 */
#include "config.h"
#include "tests/fixtures.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "transports/clock.h"

/* Reads stdout lines until one says "listening on http://ADDR:PORT" (within timeout_ms);
 * returns the port, or -1 with what it last read in line. */
static long read_port(int fd, int timeout_ms, char *line, size_t cap)
{
    size_t len = 0;
    uint64_t deadline = tfx_now_ms() + (uint64_t)timeout_ms;

    line[0] = '\0';
    while (tfx_now_ms() < deadline) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        char *nl, *p, *colon;
        ssize_t got;

        if (poll(&pfd, 1, 100) <= 0)
            continue;
        got = read(fd, line + len, cap - 1 - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        len += (size_t)got;
        line[len] = '\0';
        while ((nl = strchr(line, '\n')) != NULL) {
            *nl = '\0';
            p = strstr(line, "listening on ");
            p = p ? strstr(p, "://") : NULL;
            if (p) {
                p += 3;
                if (*p == '[')
                    p = strchr(p, ']');
                colon = p ? strchr(p, ':') : NULL;
                if (colon) {
                    char *end;
                    long port = strtol(colon + 1, &end, 10);
                    if (end != colon + 1 && port > 0 && port < 65536)
                        return port;
                }
            }
            len -= (size_t)(nl + 1 - line);
            memmove(line, nl + 1, len + 1);
        }
        if (len == cap - 1)
            len = 0;                            /* an over-long line: drop it */
    }
    return -1;
}

int td_start(td_daemon_t *d, const char *const *extra)
{
    td_opts_t o = {.args = extra};
    return td_start_opts(d, &o);
}

int td_start_opts(td_daemon_t *d, const td_opts_t *o)
{
    memset(d, 0, sizeof *d);
    d->out_fd = -1;
    const char *bin = o->bin ? o->bin : getenv("TFETCHD");
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
    if (!o->own_config) {
        argv[n++] = "--config";
        argv[n++] = "/dev/null";
    }
    for (int i = 0; o->args && o->args[i] && n < 62; i++)
        argv[n++] = o->args[i];
    argv[n] = NULL;

    snprintf(d->log_path, sizeof d->log_path, "%s-%d-%ld.log",
             o->log_prefix ? o->log_prefix : "/tmp/tfetchd-test", (int)getpid(), (long)time(NULL));
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(out[0]);
        close(out[1]);
        return -1;
    }
    if (pid == 0) {
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGTERM);       /* never outlive the test or the bench */
#endif
        dup2(out[1], 1);
        int err = open(d->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (err >= 0)
            dup2(err, 2);
        execvp(exe, (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    d->pid = pid;
    d->out_fd = out[0];
    char line[512];
    long port = read_port(d->out_fd, o->start_ms > 0 ? o->start_ms : 30000, line, sizeof line);
    if (port < 0) {
        fprintf(stderr, "tfetchd did not start (printed '%s'); log in %s\n", line, d->log_path);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(d->out_fd);
        d->out_fd = -1;
        d->pid = 0;
        return -1;
    }
    d->port = (unsigned)port;
    snprintf(d->base, sizeof d->base, "http://127.0.0.1:%u", d->port);
    return 0;
}

int td_stop(td_daemon_t *d, int sig, int timeout_ms)
{
    if (d->out_fd >= 0)
        close(d->out_fd);
    d->out_fd = -1;
    if (d->pid <= 0)
        return -1;
    kill(d->pid, sig);
    uint64_t t0 = tfx_now_ms();
    int st;
    for (;;) {
        pid_t r = waitpid(d->pid, &st, WNOHANG);
        if (r == d->pid)
            break;
        if (r < 0 && errno != EINTR) {
            d->pid = 0;
            return -1;
        }
        if (tfx_now_ms() - t0 > (uint64_t)timeout_ms) {
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

void td_show_log(const td_daemon_t *d)
{
    char buf[4096];
    FILE *f = fopen(d->log_path, "r");
    size_t got;
    long size;

    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, size > (long)sizeof buf ? size - (long)sizeof buf : 0, SEEK_SET);
    got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (got == 0)
        return;
    fprintf(stderr, "--- tfetchd stderr (%s, last %zu bytes) ---\n", d->log_path, got);
    fwrite(buf, 1, got, stderr);
    if (buf[got - 1] != '\n')
        fputc('\n', stderr);
    fprintf(stderr, "---\n");
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

long long td_metric(const td_daemon_t *d, const char *name)
{
    char cmd[256], pat[128];
    static char out[256 * 1024];
    snprintf(cmd, sizeof cmd, "curl -s -m 5 '%s/metrics'", d->base);
    if (td_run(cmd, out + 1, sizeof out - 1) != 0)
        return -1;
    out[0] = '\n';                      /* every line, the first too, follows a newline */
    snprintf(pat, sizeof pat, "\n%s ", name);
    const char *p = strstr(out, pat);
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
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
    fchmod(fileno(f), 0600);        /* private: tfetchd refuses a token file others can read */
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

int td_closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof(a);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        perror("td_closed_port");
        abort();
    }
    /* Kept bound (never listening: a connect is refused) until the process ends: closed,
     * the port was free for another test's daemon (--port 0) to take meanwhile. */
    return ntohs(a.sin_port);
}

/* ---- seeded randomness and strings for the wire-format suites ---------------------- */

uint64_t rnd_state;

uint64_t rnd(void)
{
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return rnd_state * UINT64_C(2685821657736338717);
}

size_t rnd_below(size_t n)
{
    return (size_t)(rnd() % n);
}


/* Random well-formed UTF-8 of at most max bytes, no NUL. */
void rnd_utf8(char *dst, size_t max)
{
    static const char *const pieces[] = { "a", "Z", " ", "\"", "\\", "\x01", "\x7f",
                                          "\xc3\xa9", "\xdf\xbf", "\xe2\x82\xac",
                                          "\xef\xbf\xbd", "\xf0\x9f\x98\x80",
                                          "\xf4\x8f\xbf\xbf" };
    size_t n = 0, target = rnd_below(max + 1);

    while (n < target) {
        const char *p = pieces[rnd_below(sizeof pieces / sizeof pieces[0])];
        size_t k = strlen(p);

        if (n + k > max)
            break;
        memcpy(dst + n, p, k);
        n += k;
    }
    dst[n] = '\0';
}
