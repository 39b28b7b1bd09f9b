/* torture.c - the allocation-failure torture driver (make torture; a bounded run in check).
 *
 * For each scenario it fails the 1st, 2nd, ... allocation our code makes (the shim,
 * tests/failmalloc.c, counts only callers in our objects) until a run in which the shim had
 * nothing left to fail, and checks each run: no crash, a clean error (the daemon answers 500
 * or 507; the library returns TF_ENOMEM), no leak (under valgrind: definitely lost bytes
 * after each run), and the daemon still serving the right bytes afterwards.
 *   daemon-put daemon-get daemon-call daemon-upgrade: one tfetchd (LD_PRELOAD=the shim,
 *     under valgrind with --valgrind) armed over a control socket around each request;
 *     upgrade is POST /v1/upgrade plus a PUT and a GET over UCX.
 *   client-put client-get client-call client-upgrade: this process's libtfetch (the shim
 *     preloaded here; the driver re-executes itself with LD_PRELOAD if it is not), armed
 *     around tf_client_new, the request(s) and tf_client_free. Run the driver under valgrind
 *     for the leak check.
 *   startup: tfetchd started with TF_FAILMALLOC=N: it serves (then SIGTERM must exit 0) or
 *     exits non-zero with a message; under valgrind with --valgrind (its leak check at exit).
 * What fails: allocations of tfetchd (daemon scenarios) or libtfetch.so (client ones), and
 * cJSON's made on their behalf; TF_TORTURE_OBJS (a TF_FAILMALLOC_OBJS list) changes that.
 * Options: --valgrind, --stride K (every Kth N only, for a bounded run), --from N, --max N
 * (--from 19 --max 19 reproduces one run; TF_FAILMALLOC_TRACE=1 adds the failing stack).
 * Exit status 0 when every run was clean. One thread; the daemon's spawner is tests/fixtures.c.
 */
#include "config.h"
#include "client/tfetch.h"
#include "tests/fixtures.h"
#include "transports/clock.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <valgrind/valgrind.h>

#define VALGRIND_CMD "valgrind -q --suppressions=%s/tests/valgrind-ucx.supp --leak-check=full " \
    "--errors-for-leak-kinds=definite --error-exitcode=99 --soname-synonyms=somalloc=nouserintercepts"

static int opt_valgrind, opt_stride = 1;
static long opt_max = 100000, opt_from = 1;
static const char *shim;
static char wrapper[1024];
static int problems;

static void (*fm_arm)(long);

/* The objects whose allocations are failed: TF_TORTURE_OBJS, else dflt ("main" is tfetchd). */
static const char *objs(const char *dflt)
{
    const char *o = getenv("TF_TORTURE_OBJS");
    return o && *o ? o : dflt;
}
static void (*fm_disarm)(long *, long *, long *);

__attribute__((format(printf, 1, 2))) static void problem(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("torture: PROBLEM: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    problems++;
}

/* ---- documents ------------------------------------------------------------------------- */

/* Two tensors and a meta key: a small F32 and a U8 big enough (3 MiB) for the huge-page
 * body path of transports/buf.c. v picks the contents, so two PUTs differ. */
static tf_doc_t *make_doc(int v)
{
    static unsigned char big[3 << 20];
    float small[16];
    int64_t s1[1] = {16}, s2[2] = {3, 1 << 20};
    tf_doc_t *d = tf_doc_new();
    for (int i = 0; i < 16; i++)
        small[i] = (float)(v * 100 + i);
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (unsigned char)(i * 7 + (size_t)v);
    if (!d || tf_doc_add(d, "a", TF_F32, 1, s1, small, sizeof small, TF_COPY) != TF_OK ||
        tf_doc_add(d, "b", TF_U8, 2, s2, big, sizeof big, TF_COPY) != TF_OK ||
        tf_doc_set_meta(d, "v", v ? "one" : "zero") != TF_OK) {
        fprintf(stderr, "torture: cannot build a document\n");
        exit(2);
    }
    return d;
}

static int same_doc(const tf_doc_t *a, const tf_doc_t *b)
{
    if (!a || !b || tf_doc_count(a) != tf_doc_count(b))
        return 0;
    for (size_t i = 0; i < tf_doc_count(a); i++) {
        const tf_tensor_t *x = tf_doc_at(a, i), *y = tf_doc_find(b, tf_doc_at(a, i)->name);
        if (!y || x->dtype != y->dtype || x->rank != y->rank || x->nbytes != y->nbytes ||
            memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->rank) != 0 ||
            memcmp(x->data, y->data, x->nbytes) != 0)
            return 0;
    }
    return 1;
}

/* ---- the daemon side ------------------------------------------------------------------- */

static td_daemon_t D;
static int ctl = -1;

static int ctl_cmd(const char *cmd, char *ans, size_t cap)
{
    size_t len = 0;
    if (write(ctl, cmd, strlen(cmd)) != (ssize_t)strlen(cmd))
        return -1;
    while (len < cap - 1) {
        struct pollfd p = {.fd = ctl, .events = POLLIN};
        if (poll(&p, 1, 120000) <= 0)
            return -1;
        ssize_t got = read(ctl, ans + len, cap - 1 - len);
        if (got <= 0)
            return -1;
        len += (size_t)got;
        ans[len] = '\0';
        if (strchr(ans, '\n'))
            return 0;
    }
    return -1;
}

static void add_preload(void)
{
    const char *old = getenv("LD_PRELOAD");
    char buf[2048];
    if (old && strstr(old, shim))
        return;
    snprintf(buf, sizeof buf, "%s%s%s", shim, old && *old ? ":" : "", old ? old : "");
    setenv("LD_PRELOAD", buf, 1);
}

static int daemon_start(void)
{
    int sv[2];
    char fd[16];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return -1;
    fcntl(sv[0], F_SETFD, FD_CLOEXEC);
    snprintf(fd, sizeof fd, "%d", sv[1]);
    setenv("TF_FAILMALLOC_CTL_FD", fd, 1);
    setenv("TF_FAILMALLOC_OBJS", objs("main,libcjson"), 1);
    setenv("TF_FAILMALLOC_PROG", "tfetchd", 1);
    if (wrapper[0])
        setenv("TFETCHD_WRAPPER", wrapper, 1);
    const char *saved = getenv("LD_PRELOAD");
    char keep[2048] = "";
    if (saved)
        snprintf(keep, sizeof keep, "%s", saved);
    add_preload();
    const char *const args[] = {"--store-memory", "64M", NULL};
    td_opts_t o = {.args = args, .start_ms = 120000, .log_prefix = "/tmp/tfetchd-torture"};
    int rc = td_start_opts(&D, &o);
    if (keep[0])
        setenv("LD_PRELOAD", keep, 1);
    else
        unsetenv("LD_PRELOAD");
    unsetenv("TF_FAILMALLOC_CTL_FD");
    unsetenv("TF_FAILMALLOC_OBJS");
    unsetenv("TF_FAILMALLOC_PROG");
    close(sv[1]);
    ctl = sv[0];
    return rc;
}

/* Keeps the daemon's log (td_stop removes it after a clean exit) when a run had problems. */
static void keep_log(const char *scenario, int had)
{
    char cmd[512];
    if (!had && !getenv("TF_TORTURE_KEEP_LOGS"))
        return;
    snprintf(cmd, sizeof cmd, "cp %s /tmp/tf-torture-%s.log", D.log_path, scenario);
    if (td_run(cmd, NULL, 0) == 0)
        fprintf(stderr, "torture: %s: the daemon's log is in /tmp/tf-torture-%s.log\n", scenario,
                scenario);
}

static void daemon_stop(const char *scenario, int had)
{
    keep_log(scenario, had);
    int rc = td_stop(&D, SIGTERM, 120000);
    if (rc != 0) {
        problem("%s: tfetchd exited %d at the end", scenario, rc);
        td_show_log(&D);
    }
    close(ctl);
    ctl = -1;
}

static tf_client_t *client(tf_transport_t t)
{
    tf_client_t *c = NULL;
    if (tf_client_new(&c) != TF_OK)
        return NULL;
    tf_client_set_timeout(c, 120000);
    tf_client_set_transport(c, t);
    return c;
}

/* A daemon's answer to a request that met an allocation failure: success, or 500 / 507. */
static int clean_server(tf_status_t st, const tf_result_t *r)
{
    return st == TF_OK || r->http_status == 500 || r->http_status == 507;
}

typedef struct {
    const char *name;
    tf_doc_t *doc[2];
    tf_doc_t *stored;           /* what the daemon should hold under "t" */
    char url[256], call[256];
} ctx_t;

/* One armed request (or several) against the daemon; 0 when clean. */
static int daemon_once(ctx_t *x, long n, tf_client_t *check)
{
    char ans[256];
    int bad = 0;
    tf_client_t *c = client(strcmp(x->name, "daemon-upgrade") == 0 ? TF_TRANSPORT_AUTO
                                                                   : TF_TRANSPORT_HTTP);
    tf_doc_t *got = NULL, *put = x->doc[n & 1];
    tf_status_t st;
    char cmd[64];

    if (!c)
        return problem("%s N=%ld: no client", x->name, n), 1;
    snprintf(cmd, sizeof cmd, "arm %ld\n", n);
    if (ctl_cmd(cmd, ans, sizeof ans) != 0)
        return problem("%s N=%ld: the control socket did not answer (daemon dead?)", x->name, n), 1;
    if (strcmp(x->name, "daemon-put") == 0) {
        st = tf_put(c, x->url, put);
        if (!clean_server(st, tf_client_last(c)))
            bad = 1;
        if (st == TF_OK)
            x->stored = put;
    } else if (strcmp(x->name, "daemon-get") == 0) {
        st = tf_get(c, x->url, 0, &got);
        if (!clean_server(st, tf_client_last(c)) || (st == TF_OK && !same_doc(got, x->stored)))
            bad = 1;
    } else if (strcmp(x->name, "daemon-call") == 0) {
        st = tf_fetch(c, x->call, put, &got);
        if (!clean_server(st, tf_client_last(c)) || (st == TF_OK && !same_doc(got, put)))
            bad = 1;
    } else {
        /* The upgrade: refused (500 -> TF_ECONNECT, the reason said) or made; then a PUT and
         * a GET over whatever carries them. */
        st = tf_client_upgrade(c, D.base);
        const tf_result_t *r = tf_client_last(c);
        if (st != TF_OK && !(st == TF_ECONNECT && (r->http_status == 500 || r->http_status == 0)))
            bad = 1;
        if (!bad) {
            st = tf_put(c, x->url, put);
            if (!clean_server(st, tf_client_last(c)))
                bad = 1;
            if (st == TF_OK)
                x->stored = put;
        }
        if (!bad) {
            st = tf_get(c, x->url, 0, &got);
            if (!clean_server(st, tf_client_last(c)) || (st == TF_OK && !same_doc(got, x->stored)))
                bad = 1;
        }
    }
    const tf_result_t *r = tf_client_last(c);
    if (bad)
        problem("%s N=%ld: %s (HTTP %d, via %s): %s", x->name, n, tf_err_name(st),
                r->http_status, r->transport, r->error);
    tf_doc_free(got);
    got = NULL;
    tf_client_free(c);
    if (ctl_cmd("disarm\n", ans, sizeof ans) != 0)
        return problem("%s N=%ld: the control socket did not answer (daemon dead?)", x->name, n), -1;
    long counted = 0, failed = 0, leaked = -1;
    sscanf(ans, "counted %ld failed %ld leaked %ld", &counted, &failed, &leaked);
    if (leaked > 0)
        bad = 1, problem("%s N=%ld: %ld bytes definitely lost (valgrind's log: %s)", x->name, n,
                         leaked, D.log_path);
    /* Still serving, and the stored tensor is whole (a failed PUT left the old one). */
    if (tf_get(check, x->url, 0, &got) != TF_OK || !same_doc(got, x->stored))
        bad = 1, problem("%s N=%ld: afterwards the stored tensor is wrong or missing (%s)", x->name,
                         n, tf_client_last(check)->error);
    tf_doc_free(got);
    return failed == 0 ? 2 : bad;         /* 2: nothing was left to fail: the sweep is done */
}

static int run_daemon(const char *name)
{
    ctx_t x = {.name = name};
    int before = problems;
    if (daemon_start() != 0)
        return problem("%s: tfetchd did not start", name), 1;
    snprintf(x.url, sizeof x.url, "%s/v1/tensors/t", D.base);
    snprintf(x.call, sizeof x.call, "%s/v1/call/echo", D.base);
    x.doc[0] = make_doc(0);
    x.doc[1] = make_doc(1);
    tf_client_t *check = client(TF_TRANSPORT_HTTP);
    if (!check || tf_put(check, x.url, x.doc[1]) != TF_OK)
        return problem("%s: the first PUT failed", name), 1;
    x.stored = x.doc[1];
    long n, last = 0;
    int rc = 0;
    for (n = opt_from; n <= opt_max; n += opt_stride) {
        rc = daemon_once(&x, n, check);
        if (rc == 2 || rc < 0)
            break;
        last = n;
    }
    fprintf(stderr, "torture: %s: failed allocations 1..%ld (stride %d) of our code\n", name, last,
            opt_stride);
    tf_client_free(check);
    tf_doc_free(x.doc[0]);
    tf_doc_free(x.doc[1]);
    daemon_stop(name, problems != before);
    return 0;
}

/* ---- the client side ------------------------------------------------------------------- */

/* TF_OK or TF_ENOMEM; an upgrade may also be refused for want of memory (TF_ECONNECT). */
static int clean_client(tf_status_t st)
{
    return st == TF_OK || st == TF_ENOMEM;
}

static int client_once(ctx_t *x, long n, tf_client_t *check)
{
    long counted = 0, failed = 0, leaked = -1;
    int bad = 0;
    tf_client_t *c = NULL;
    tf_doc_t *got = NULL, *put = x->doc[n & 1];
    tf_status_t st = TF_OK;
    char err[320] = "";
    int upgrade = strcmp(x->name, "client-upgrade") == 0;

    fm_arm(n);
    st = tf_client_new(&c);
    if (st == TF_OK) {
        tf_client_set_timeout(c, 120000);
        tf_client_set_transport(c, upgrade ? TF_TRANSPORT_AUTO : TF_TRANSPORT_HTTP);
        if (upgrade) {
            st = tf_client_upgrade(c, D.base);
            /* Refused: TF_ECONNECT with the reason, and the requests go over HTTP. */
            if (st == TF_ECONNECT)
                st = TF_OK;
            if (clean_client(st)) {
                st = tf_put(c, x->url, put);
                if (st == TF_OK)
                    x->stored = put;
            }
            if (st == TF_OK) {
                st = tf_get(c, x->url, 0, &got);
                if (st == TF_OK && !same_doc(got, x->stored))
                    bad = 1;
            }
        } else if (strcmp(x->name, "client-put") == 0) {
            st = tf_put(c, x->url, put);
            if (st == TF_OK)
                x->stored = put;
        } else if (strcmp(x->name, "client-get") == 0) {
            st = tf_get(c, x->url, 0, &got);
            if (st == TF_OK && !same_doc(got, x->stored))
                bad = 1;
        } else {
            st = tf_fetch(c, x->call, put, &got);
            if (st == TF_OK && !same_doc(got, put))
                bad = 1;
        }
        const tf_result_t *r = tf_client_last(c);
        snprintf(err, sizeof err, "HTTP %d, via %s: %s", r->http_status, r->transport, r->error);
    }
    tf_doc_free(got);
    got = NULL;
    tf_client_free(c);
    fm_disarm(&counted, &failed, &leaked);
    if (bad || !clean_client(st))
        bad = 1, problem("%s N=%ld: %s (%s)", x->name, n, tf_err_name(st), err);
    if (leaked > 0)
        bad = 1, problem("%s N=%ld: %ld bytes definitely lost (see valgrind's records above)",
                         x->name, n, leaked);
    if (tf_get(check, x->url, 0, &got) != TF_OK || !same_doc(got, x->stored))
        bad = 1, problem("%s N=%ld: afterwards the stored tensor is wrong or missing (%s)", x->name,
                         n, tf_client_last(check)->error);
    tf_doc_free(got);
    return failed == 0 ? 2 : bad;
}

static int run_client(const char *name)
{
    ctx_t x = {.name = name};
    int before = problems;
    const char *const args[] = {"--store-memory", "64M", NULL};
    td_opts_t o = {.args = args, .start_ms = 120000, .log_prefix = "/tmp/tfetchd-torture"};
    if (td_start_opts(&D, &o) != 0)
        return problem("%s: tfetchd did not start", name), 1;
    snprintf(x.url, sizeof x.url, "%s/v1/tensors/t", D.base);
    snprintf(x.call, sizeof x.call, "%s/v1/call/echo", D.base);
    x.doc[0] = make_doc(0);
    x.doc[1] = make_doc(1);
    tf_client_t *check = client(TF_TRANSPORT_HTTP);
    if (!check || tf_put(check, x.url, x.doc[1]) != TF_OK)
        return problem("%s: the first PUT failed", name), 1;
    x.stored = x.doc[1];
    long n, last = 0;
    for (n = opt_from; n <= opt_max; n += opt_stride) {
        if (client_once(&x, n, check) == 2)
            break;
        last = n;
    }
    fprintf(stderr, "torture: %s: failed allocations 1..%ld (stride %d) of libtfetch\n", name,
            last, opt_stride);
    tf_client_free(check);
    tf_doc_free(x.doc[0]);
    tf_doc_free(x.doc[1]);
    keep_log(name, problems != before);
    int rc = td_stop(&D, SIGTERM, 120000);
    if (rc != 0)
        problem("%s: tfetchd exited %d", name, rc);
    return 0;
}

/* ---- start-up ------------------------------------------------------------------------- */

/* Starts tfetchd with the Nth allocation failing; 0 clean, 1 not, 2 nothing failed. */
static int startup_once(long n)
{
    char nbuf[32], rep[128], log[128], line[512] = "";
    snprintf(nbuf, sizeof nbuf, "%ld", n);
    snprintf(rep, sizeof rep, "/tmp/tf-torture-report-%d", (int)getpid());
    snprintf(log, sizeof log, "/tmp/tf-torture-startup-%d.log", (int)getpid());
    unlink(rep);
    int out[2];
    if (pipe(out) != 0)
        return 1;
    const char *bin = getenv("TFETCHD") ? getenv("TFETCHD") : "./daemon/tfetchd";
    pid_t pid = fork();
    if (pid == 0) {
        char wrap[1024];
        const char *argv[32];
        int k = 0;
        snprintf(wrap, sizeof wrap, "%s", wrapper);
        for (char *t = strtok(wrap, " "); t && k < 20; t = strtok(NULL, " "))
            argv[k++] = t;
        const char *rest[] = {bin, "--port", "0", "--listen", "127.0.0.1", "--config", "/dev/null",
                              "--store-memory", "64M", NULL};
        for (int i = 0; rest[i]; i++)
            argv[k++] = rest[i];
        argv[k] = NULL;
        setenv("TF_FAILMALLOC", nbuf, 1);
        setenv("TF_FAILMALLOC_REPORT", rep, 1);
        setenv("TF_FAILMALLOC_OBJS", objs("main,libcjson"), 1);
        setenv("TF_FAILMALLOC_PROG", "tfetchd", 1);
        add_preload();
        dup2(out[1], 1);
        int e = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(e, 2);
        close(out[0]);
        close(out[1]);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    /* Either the port line, or EOF (it gave up). */
    size_t len = 0;
    int serving = 0;
    uint64_t deadline = tfx_now_ms() + 120000;
    while (tfx_now_ms() < deadline && len < sizeof line - 1) {
        struct pollfd p = {.fd = out[0], .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t got = read(out[0], line + len, sizeof line - 1 - len);
        if (got <= 0)
            break;
        len += (size_t)got;
        line[len] = '\0';
        if (strstr(line, "listening on ") && strchr(line, '\n')) {
            serving = 1;
            break;
        }
    }
    if (serving)
        kill(pid, SIGTERM);
    int st = 0, bad = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (tfx_now_ms() > deadline + 60000) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            problem("startup N=%ld: tfetchd hung (killed)", n);
            bad = 1;
            break;
        }
        usleep(20000);
    }
    close(out[0]);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char msg[512] = "";
    FILE *f = fopen(log, "r");
    if (f) {
        size_t k = fread(msg, 1, sizeof msg - 1, f);
        msg[k] = '\0';
        fclose(f);
    }
    if (!bad && serving && code != 0)
        bad = 1, problem("startup N=%ld: served, then exited %d: %s", n, code, msg);
    if (!bad && !serving && (code == 0 || code >= 99 || !msg[0]))
        bad = 1, problem("startup N=%ld: did not serve, exit %d, message '%s'", n, code, msg);
    if (bad)
        fprintf(stderr, "torture: startup N=%ld: the log is kept in %s\n", n, log);
    else
        unlink(log);
    long counted = 0, failed = 0;
    f = fopen(rep, "r");
    if (f) {
        if (fscanf(f, "counted %ld failed %ld", &counted, &failed) != 2)
            failed = 1;
        fclose(f);
    } else {
        failed = 1;       /* no report (killed): keep going */
    }
    unlink(rep);
    return !bad && failed == 0 ? 2 : bad;
}

static int run_startup(void)
{
    long n, last = 0;
    for (n = opt_from; n <= opt_max; n += opt_stride) {
        if (startup_once(n) == 2)
            break;
        last = n;
    }
    fprintf(stderr, "torture: startup: failed allocations 1..%ld (stride %d) of tfetchd\n", last,
            opt_stride);
    return 0;
}

/* ---- main ----------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr, "usage: torture [--valgrind] [--stride K] [--from N] [--max N] SCENARIO...\n"
            "  daemon-put daemon-get daemon-call daemon-upgrade\n"
            "  client-put client-get client-call client-upgrade startup\n"
            "  TF_FAILMALLOC_SO: the shim (tests/.libs/libfailmalloc.so)\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int first = 1;
    for (; first < argc && strncmp(argv[first], "--", 2) == 0; first++) {
        if (strcmp(argv[first], "--valgrind") == 0)
            opt_valgrind = 1;
        else if (strcmp(argv[first], "--stride") == 0 && first + 1 < argc)
            opt_stride = atoi(argv[++first]);
        else if (strcmp(argv[first], "--from") == 0 && first + 1 < argc)
            opt_from = atol(argv[++first]);
        else if (strcmp(argv[first], "--max") == 0 && first + 1 < argc)
            opt_max = atol(argv[++first]);
        else
            usage();
    }
    if (first == argc || opt_stride < 1)
        usage();
    shim = getenv("TF_FAILMALLOC_SO");
    if (!shim || access(shim, R_OK) != 0) {
        fprintf(stderr, "torture: set TF_FAILMALLOC_SO to the shim's path\n");
        return 2;
    }
    if (opt_valgrind) {
        const char *top = getenv("TF_TOP_SRCDIR") ? getenv("TF_TOP_SRCDIR") : ".";
        snprintf(wrapper, sizeof wrapper, VALGRIND_CMD, top);
    }
    fm_arm = (void (*)(long))dlsym(RTLD_DEFAULT, "tf_failmalloc_arm");
    fm_disarm = (void (*)(long *, long *, long *))dlsym(RTLD_DEFAULT, "tf_failmalloc_disarm");
    for (int i = first; i < argc; i++)
        if (strncmp(argv[i], "client-", 7) == 0 && !fm_arm) {
            if (getenv("TF_TORTURE_REEXEC") || RUNNING_ON_VALGRIND) {
                fprintf(stderr, "torture: the shim is not preloaded (LD_PRELOAD=%s)\n", shim);
                return 2;
            }
            setenv("TF_TORTURE_REEXEC", "1", 1);
            add_preload();
            execv("/proc/self/exe", argv);
            perror("torture: re-exec");
            return 2;
        }
    signal(SIGPIPE, SIG_IGN);
    for (int i = first; i < argc; i++) {
        double t0 = tfx_now_s();
        int before = problems;
        if (strncmp(argv[i], "daemon-", 7) == 0)
            run_daemon(argv[i]);
        else if (strncmp(argv[i], "client-", 7) == 0) {
            setenv("TF_FAILMALLOC_OBJS", objs("libtfetch.so,libcjson"), 1);
            run_client(argv[i]);
        } else if (strcmp(argv[i], "startup") == 0)
            run_startup();
        else
            usage();
        fprintf(stderr, "torture: %s: %s, %.1f s\n", argv[i],
                problems == before ? "clean" : "PROBLEMS", tfx_now_s() - t0);
    }
    td_cleanup();
    return problems ? 1 : 0;
}
