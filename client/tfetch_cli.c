/* tfetch_cli.c - the tfetch command: get, put, call, rm, ls, info and feed (declare, push,
 * pop, outfeed, done, stats) against a tfetchd, from a shell.
 *
 * Uses only the public libtfetch API (client/tfetch.h), like curl's tool over libcurl. Owns
 * one client for the life of the process. get, put, call and rm run as a batch of jobs over
 * the asynchronous API: up to --parallel requests in flight, each job's input file mapped
 * (or read) when it starts and released when it completes, each reply written out by its
 * callback, the next job started from there. ls, info and feed are single blocking calls.
 * Single-threaded. Exit codes are part of the interface (see usage and tfetch(1)): 0 ok, 1
 * usage or invalid input, 2 not found, 3 rejected by the server (4xx), 4 server or protocol
 * error, 5 connection/timeout/transfer error, 6 local I/O error; with several requests, the
 * code of the first one (in argument order) that failed.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client/tfetch.h"
#include "cli/doctor.h"

enum {
    EXIT_OK = 0,
    EXIT_USAGE = 1,
    EXIT_NOTFOUND = 2,
    EXIT_REJECTED = 3,
    EXIT_SERVER = 4,
    EXIT_TRANSFER = 5,
    EXIT_LOCAL = 6,
};

#define PROGRESS_MIN_BYTES (1024u * 1024u)

static const char usage_text[] =
    "Usage: tfetch [OPTIONS] COMMAND ARGS...\n"
    "Move tensors to and from a tfetchd server (safetensors documents over HTTP, or UCX\n"
    "when the server offers it).\n"
    "\n"
    "Commands:\n"
    "  get URL [FILE]   fetch the document at URL (http://HOST:PORT/v1/tensors/NAME) and\n"
    "                   write it as safetensors to FILE (through a temporary file renamed\n"
    "                   once complete), or to stdout when FILE is absent (not a terminal)\n"
    "                   or - (even a terminal)\n"
    "  get -d DIR URL...\n"
    "                   fetch each URL into DIR/NAME.safetensors (NAME: the URL's last path\n"
    "                   segment; DIR/NAME.raw with --raw)\n"
    "  put URL [FILE]   store the safetensors document read from FILE (or stdin) at URL;\n"
    "                   with --dtype and --shape, FILE holds one raw tensor instead, stored\n"
    "                   under the last path segment of URL\n"
    "  put URL FILE URL FILE...\n"
    "                   store each FILE at the URL before it\n"
    "  call URL [FILE]  exchange: POST the document read from FILE (or stdin) to a route\n"
    "                   (http://HOST:PORT/v1/call/ROUTE) and write the reply to stdout\n"
    "  call -d DIR URL FILE URL FILE...\n"
    "                   one exchange per pair, each reply into DIR/STEM.safetensors (STEM:\n"
    "                   FILE's name without directory and extension)\n"
    "  rm URL...        delete the tensor at each URL\n"
    "  ls [BASE]        list the stored tensors of the server at BASE (http://HOST:PORT)\n"
    "  info [BASE]      print the server's /v1/info JSON\n"
    "  doctor [--json] [BASE]\n"
    "                   what limits tfetch between this host and the server, and what\n"
    "                   to change; exit 0 when the fast path is available (tfetch\n"
    "                   doctor --help)\n"
    "  feed declare FEED [FILE]\n"
    "                   declare the feed at FEED (http://HOST:PORT/v1/feeds/NAME) with the\n"
    "                   JSON declaration read from FILE (or stdin); print its stats\n"
    "  feed push FEED [FILE]\n"
    "                   push the document in FILE (or stdin) to device queue --device\n"
    "                   (per_device feeds), or as one round to every device (split and\n"
    "                   broadcast feeds, no --device)\n"
    "  feed pop FEED [FILE]\n"
    "                   take the next item of device queue --device (default 0), write it\n"
    "                   to FILE (or stdout) and acknowledge it\n"
    "  feed outfeed FEED [FILE]\n"
    "                   read the first outfeed item after --after into FILE (or stdout)\n"
    "  feed done FEED   mark the feed done: consumers drain it, then see end of data\n"
    "  feed stats FEED  print the feed's stats JSON\n"
    "\n"
    "A bare NAME ([A-Za-z0-9._-]{1,255}) may stand for a URL: BASE/v1/tensors/NAME (get, put,\n"
    "rm) or BASE/v1/call/NAME (call), BASE being $TFETCH_URL, else \"url = ...\" in\n"
    "${XDG_CONFIG_HOME:-~/.config}/tfetch/config, else http://127.0.0.1:7070; ls and info\n"
    "without BASE use it too.\n"
    "\n"
    "Options:\n"
    "  -u, --user ID          send ID as the user id (Tfetch-User), [A-Za-z0-9._-]{1,128}\n"
    "      --token TOKEN      send Authorization: Bearer TOKEN (default $TFETCH_TOKEN)\n"
    "      --cacert FILE      https: trust the PEM CA certificates in FILE (default\n"
    "                         $TFETCH_CA_FILE, else the system's); always verified\n"
    "      --cert FILE        https: present the PEM client certificate in FILE to a server\n"
    "                         that asks (tls-client-ca), when no token is sent (default\n"
    "                         $TFETCH_CERT)\n"
    "      --key FILE         the PEM private key of --cert (default $TFETCH_KEY, else the\n"
    "                         key is in the --cert file)\n"
    "  -r, --request-id ID    use ID as the request id (Tfetch-Request-Id) of the (first)\n"
    "                         request\n"
    "  -t, --timeout MS       whole-request timeout in milliseconds (default 0: none; a\n"
    "                         stalled server is caught by --stall-time instead)\n"
    "      --stall-time MS    fail a request whose transfer moves fewer than --stall-rate\n"
    "                         bytes a second for MS milliseconds in a row, waiting for the\n"
    "                         answer included (--wait is added; 0: never; default 10000)\n"
    "      --stall-rate BYTES the rate below which a transfer counts as stalled (default\n"
    "                         1024)\n"
    "      --max-body SIZE    refuse a response body larger than SIZE bytes (suffix K, M, G\n"
    "                         or T: powers of 1024; 0: no limit; default: this machine's\n"
    "                         memory, at least 2G)\n"
    "  -w, --wait MS          get: wait up to MS milliseconds for the tensor to appear;\n"
    "                         feed push: for room in a full queue; feed pop and outfeed:\n"
    "                         for an item\n"
    "  -P, --parallel N       get, put, call, rm: up to N requests in flight at once, over up\n"
    "                         to N connections per server (1..1024; default 1)\n"
    "  -d, --dir DIR          get, call: write each reply into DIR (created if missing)\n"
    "  -f, --format FMT       body format: safetensors (default) or shumai (stock Shumai's\n"
    "                         sm.network.tfetch format: one F32 tensor; get and call only)\n"
    "      --raw              get, call: write the single tensor's raw bytes (C order)\n"
    "                         instead of a document, and print its name, dtype and shape to\n"
    "                         stderr\n"
    "      --dtype DT         put, call: the input is one raw tensor of this dtype (F64 F32\n"
    "                         F16 BF16 F8_E4M3 F8_E5M2 I64 I32 I16 I8 U64 U32 U16 U8 BOOL\n"
    "                         F8_E8M0 F4 F6_E2M3 F6_E3M2 F8_E4M3FNUZ F8_E5M2FNUZ C64)\n"
    "      --shape DIMS       put, call: the raw tensor's shape, e.g. 2,3 (\"\" for a scalar)\n"
    "      --json             ls: print the listing as JSON\n"
    "      --transport POLICY\n"
    "                         auto: negotiate UCX with the server before the first request\n"
    "                         and fall back to HTTP (saying why) when it cannot be had;\n"
    "                         http: HTTP only; ucx: UCX or fail. Default: $TFETCH_TRANSPORT,\n"
    "                         else auto when it is worth it (a server on this host, or a\n"
    "                         put/call body of 1 MiB or more) and not remembered to have\n"
    "                         failed for this origin (${XDG_CACHE_HOME:-~/.cache}/tfetch/\n"
    "                         upgrade, 30 s doubling to 1 h), else HTTP first and UCX once\n"
    "                         the server offers it ($TFETCH_UPGRADE=lazy: always so). ls,\n"
    "                         info, feed and --format shumai always use HTTP\n"
    "      --device DEV       feed push: the device queue's index; feed pop: its index or\n"
    "                         name (default 0)\n"
    "      --seq N            feed push: the item's sequence number (Tfetch-Seq) in the\n"
    "                         user id's stream, so a retry is not enqueued twice\n"
    "      --after S          feed outfeed: read the first item with a sequence number above\n"
    "                         S (default 0)\n"
    "      --consumer ID      feed pop: the consumer id (default tfetch): pops with another\n"
    "                         id wait for the lease of the last one\n"
    "  -s, --stats            after the requests print one JSON line per request to stderr\n"
    "                         (in argument order): {\"op\",\"transport\",\"bytes\",\"seconds\",\n"
    "                         \"request_id\",\"http_status\",\"status\",\"fallback\"}\n"
    "                         (fallback: why it went over HTTP when UCX was allowed)\n"
    "  -q, --quiet            print nothing but results and errors (no progress bar)\n"
    "  -h, --help             show this help and exit\n"
    "  -V, --version          show the version and exit\n"
    "\n"
    "A progress bar (with rate and time left) is drawn on stderr when it is a terminal, one\n"
    "request is made and its transfer exceeds 1 MiB. With several requests, each failure is\n"
    "reported as it happens.\n"
    "\n"
    "Exit status (with several requests: that of the first failed one, in argument order):\n"
    "  0  success\n"
    "  1  usage error or invalid input (bad option, URL, dtype, shape or file contents)\n"
    "  2  not found (no such tensor, HTTP 404)\n"
    "  3  rejected by the server (another 4xx status)\n"
    "  4  server error (5xx) or malformed response\n"
    "  5  connection, timeout or transfer error\n"
    "  6  local I/O error (reading FILE, writing output, out of memory)\n";

typedef struct {
    const char *user;
    const char *token;              /* --token (else libtfetch takes $TFETCH_TOKEN) */
    const char *cacert;             /* --cacert (else libtfetch takes $TFETCH_CA_FILE) */
    const char *cert, *key;         /* --cert, --key (else $TFETCH_CERT, $TFETCH_KEY) */
    const char *request_id;
    long timeout_ms;                /* -1: library default */
    long stall_ms;                  /* -1: library default */
    long stall_rate;                /* -1: library default */
    int64_t max_body;               /* -1: library default */
    long wait_ms;
    long parallel;                  /* 0: not given (1) */
    const char *dir;
    const char *format;
    int raw;
    const char *dtype;
    const char *shape;
    int json;
    const char *transport;
    int stats;
    int quiet;
    const char *device;             /* feed push, pop */
    uint64_t seq;                   /* feed push */
    uint64_t after;                 /* feed outfeed */
    const char *consumer;           /* feed pop */
} opts_t;

/* The progress bar on stderr (one transfer at a time). */
typedef struct {
    int drawn;
    int pct;                        /* the percentage last drawn */
    struct timespec last;
    double t0;                      /* when this transfer's bar started; 0: not yet */
} bar_t;

static bar_t bar;

/* Ends a drawn progress bar's line, so that what follows starts on its own line. */
static void bar_end(void)
{
    if (bar.drawn)
        fputc('\n', stderr);
    bar.drawn = 0;
    bar.t0 = 0;
}

/* ---- messages ------------------------------------------------------------------------------ */

static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void msg(const char *fmt, ...)
{
    va_list ap;
    bar_end();
    fputs("tfetch: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    bar_end();
    fputs("tfetch: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'tfetch --help' for more information.\n", stderr);
    return EXIT_USAGE;
}

/* Writes s as a JSON string (quotes included). */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void print_stats(const tf_result_t *r)
{
    fputs("{\"op\":", stderr);
    json_str(stderr, r->op);
    fputs(",\"transport\":", stderr);
    json_str(stderr, r->transport);
    fprintf(stderr, ",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"request_id\":",
            r->bytes_sent + r->bytes_received, r->seconds);
    json_str(stderr, r->request_id);
    fprintf(stderr, ",\"http_status\":%d,\"status\":", r->http_status);
    json_str(stderr, tf_err_name(r->status));
    fputs(",\"fallback\":", stderr);
    json_str(stderr, r->fallback);
    fputs("}\n", stderr);
}

static int exit_for(tf_status_t st, int http_status)
{
    if (st == TF_OK)
        return EXIT_OK;
    if (st == TF_ENOTFOUND || http_status == 404)
        return EXIT_NOTFOUND;
    if (st == TF_EVERSION)              /* whichever side found it */
        return EXIT_REJECTED;
    if (http_status >= 400 && http_status < 500)
        return EXIT_REJECTED;
    if (http_status >= 500)
        return EXIT_SERVER;
    switch (st) {
    case TF_ECONNECT:
    case TF_ETIMEDOUT:
    case TF_EIO:
    case TF_ECANCELED:
    case TF_ETOOBIG:
        return EXIT_TRANSFER;
    case TF_EURL:
    case TF_EINVAL:
        return EXIT_USAGE;
    case TF_ENOMEM:
        return EXIT_LOCAL;
    default:
        return EXIT_SERVER;
    }
}

/* Reports a failed request (once) and returns its exit code. */
static int request_failed(const tf_result_t *r, const char *what, const char *url,
                          tf_status_t st)
{
    const char *why = r->error[0] ? r->error : tf_strerror(st);
    if (r->http_status && strncmp(why, "HTTP ", 5) != 0)
        msg("%s %s: %s (%s, HTTP %d)", what, url, why, tf_err_name(st), r->http_status);
    else
        msg("%s %s: %s (%s)", what, url, why, tf_err_name(st));
    return exit_for(st, r->http_status);
}

/* ---- progress bar ------------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int on_progress(uint64_t dn, uint64_t dt, uint64_t un, uint64_t ut, void *ud)
{
    bar_t *b = ud;
    uint64_t now = ut > dt ? un : dn, total = ut > dt ? ut : dt;
    if (total <= PROGRESS_MIN_BYTES)
        return 0;
    double t = now_s(), last = (double)b->last.tv_sec + (double)b->last.tv_nsec / 1e9;
    if (b->t0 == 0)
        b->t0 = t;
    if (now > total)
        now = total;
    int pct = (int)((double)now * 100.0 / (double)total);
    if (b->drawn && (pct == b->pct || (t - last < 0.1 && now < total)))
        return 0;
    clock_gettime(CLOCK_MONOTONIC, &b->last);
    b->pct = pct;
    int width = 30, fill = (int)((double)now / (double)total * width);
    char cells[64];
    for (int i = 0; i < width; i++)
        cells[i] = i < fill ? '#' : '.';
    cells[width] = '\0';
    /* Rate over the whole transfer so far, and the time left at that rate. */
    double el = t - b->t0, rate = el > 0.05 ? (double)now / el : 0;
    char eta[32] = "--:--";
    if (rate > 0 && now < total) {
        unsigned long left = (unsigned long)((double)(total - now) / rate + 0.5);
        snprintf(eta, sizeof eta, "%lu:%02lu", left / 60, left % 60);
    } else if (now >= total) {
        snprintf(eta, sizeof eta, "done");
    }
    fprintf(stderr, "\r%s [%s] %3d%% %.1f/%.1f MiB %7.1f MiB/s ETA %s ",
            ut > dt ? "up  " : "down", cells, pct, (double)now / 1048576.0,
            (double)total / 1048576.0, rate / 1048576.0, eta);
    fflush(stderr);
    b->drawn = 1;
    return 0;
}

/* ---- local files ------------------------------------------------------------------------- */

typedef struct {
    void *data;
    size_t len;
    int mapped;
} input_t;

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t k = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

/* Reads a stream of unknown length (a pipe): the only place a buffer grows. */
static int read_stream(int fd, input_t *in)
{
    size_t cap = 1u << 20, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return -1;
    for (;;) {
        if (len == cap) {
            char *b = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                errno = ENOMEM;
                return -1;
            }
            buf = b;
            cap *= 2;
        }
        ssize_t k = read(fd, buf + len, cap - len);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(buf);
            errno = e;
            return -1;
        }
        if (k == 0)
            break;
        len += (size_t)k;
    }
    in->data = buf;
    in->len = len;
    in->mapped = 0;
    return 0;
}

/* Reads a regular file whole: mapped, or one malloc sized by fstat. */
static int read_regular(int fd, size_t size, input_t *in)
{
    if (size == 0) {
        in->data = NULL;
        in->len = 0;
        in->mapped = 0;
        return 0;
    }
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
        in->data = p;
        in->len = size;
        in->mapped = 1;
        return 0;
    }
    char *buf = malloc(size);
    if (!buf)
        return -1;
    size_t got = 0;
    while (got < size) {
        ssize_t k = read(fd, buf + got, size - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int e = k < 0 ? errno : EIO;
            free(buf);
            errno = e;
            return -1;
        }
        got += (size_t)k;
    }
    in->data = buf;
    in->len = size;
    in->mapped = 0;
    return 0;
}

static int input_load(const char *path, input_t *in)
{
    int fd = STDIN_FILENO, rc = -1;
    struct stat st;

    if (path && strcmp(path, "-") != 0) {
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return -1;
    }
    if (fstat(fd, &st) != 0)
        goto close_fd;
    if (S_ISREG(st.st_mode))
        rc = read_regular(fd, (size_t)st.st_size, in);
    else
        rc = read_stream(fd, in);

close_fd:
    if (fd != STDIN_FILENO) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return rc;
}

static void input_release(input_t *in)
{
    if (in->mapped)
        munmap(in->data, in->len);
    else
        free(in->data);
    in->data = NULL;
}

/* ---- argument helpers -------------------------------------------------------------------- */

static int parse_ms(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0)
        return -1;
    *out = v;
    return 0;
}

/* A size in bytes: digits, then optionally K, M, G or T (powers of 1024). */
static int parse_size(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 0)
        return -1;
    int shift = 0;
    switch (*end) {
    case '\0': break;
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    case 'T': case 't': shift = 40; end++; break;
    default: return -1;
    }
    if (*end || v > (INT64_MAX >> shift))
        return -1;
    *out = (int64_t)v << shift;
    return 0;
}

/* "2,3", "[2,3]", "" or "[]" (a scalar). */
static int parse_shape(const char *s, int *rank, int64_t shape[TF_MAX_RANK])
{
    char buf[512];
    size_t n = strlen(s);
    if (n >= sizeof(buf))
        return -1;
    memcpy(buf, s, n + 1);
    char *p = buf;
    while (*p == ' ')
        p++;
    if (*p == '[') {
        char *close_br = strrchr(p, ']');
        if (!close_br)
            return -1;
        for (char *q = close_br + 1; *q; q++)
            if (*q != ' ')
                return -1;
        *close_br = '\0';
        p++;
    }
    int r = 0;
    char *q = p;
    while (*q == ' ')
        q++;
    if (*q == '\0') {
        *rank = 0;
        return 0;
    }
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p < '0' || *p > '9' || r == TF_MAX_RANK)
            return -1;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || v < 0)
            return -1;
        shape[r++] = v;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        if (*p != ',')
            return -1;
        p++;
    }
    *rank = r;
    return 0;
}

static void format_shape(const tf_tensor_t *t, char *buf, size_t size)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int k = 0; k < t->rank && o < size; k++)
        o += (size_t)snprintf(buf + o, size - o, "%s%" PRId64, k ? "," : "", t->shape[k]);
}

/* The last path segment of url, without query or fragment, into buf. */
static void last_segment(const char *url, char *buf, size_t size)
{
    const char *end = url + strcspn(url, "?#");
    const char *p = end;
    while (p > url && p[-1] != '/')
        p--;
    size_t n = (size_t)(end - p);
    if (n >= size)
        n = size - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
}

/* ---- output files: temporary, then renamed ------------------------------------------------ */

/* The temporary file being written (one at a time: replies are written on the driving
 * thread), removed by the signal handler if the process is interrupted while writing. */
static char tmp_path[4096];
static volatile sig_atomic_t tmp_live;

static void on_fatal_signal(int sig)
{
    if (tmp_live)
        unlink(tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Creates PATH.tfetch-XXXXXX (mode 0666 & ~umask, as open(2) would make PATH) and returns
 * its descriptor, or -1 with errno set. */
static int tmp_open(const char *path)
{
    if (snprintf(tmp_path, sizeof tmp_path, "%s.tfetch-XXXXXX", path) >= (int)sizeof tmp_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    static int handlers;
    if (!handlers) {
        handlers = 1;
        signal(SIGINT, on_fatal_signal);
        signal(SIGTERM, on_fatal_signal);
        signal(SIGHUP, on_fatal_signal);
    }
    int fd = mkostemp(tmp_path, O_CLOEXEC);
    if (fd < 0)
        return -1;
    tmp_live = 1;
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, 0666 & ~um);
    return fd;
}

/* Renames the temporary file over path when ok, else removes it. 0, or -1 with errno. */
static int tmp_finish(const char *path, int ok)
{
    int rc = 0;
    if (ok && rename(tmp_path, path) != 0) {
        int e = errno;
        unlink(tmp_path);
        errno = e;
        rc = -1;
    } else if (!ok) {
        unlink(tmp_path);
    }
    tmp_live = 0;
    return rc;
}

/* ---- documents out and in --------------------------------------------------------------- */

static int write_doc(int fd, const tf_doc_t *doc)
{
    void *hdr = NULL;
    size_t hlen = 0;
    if (tf_doc_encode_header(doc, &hdr, &hlen) != TF_OK)
        return -1;
    int rc = write_all(fd, hdr, hlen);
    tf_free(hdr);
    for (size_t i = 0; rc == 0 && i < tf_doc_count(doc); i++) {
        const tf_tensor_t *t = tf_doc_at(doc, i);
        rc = write_all(fd, t->data, t->nbytes);
    }
    return rc;
}

/* Writes a reply to path (stdout when NULL or "-"): the document, or with --raw its one
 * tensor's bytes (and name, dtype, shape on stderr). Nothing is created when it cannot be
 * written as asked. */
static int write_reply(const opts_t *o, const char *what, const char *url, const tf_doc_t *doc,
                       const char *path)
{
    int to_stdout = !path || strcmp(path, "-") == 0;
    int rc = EXIT_OK;

    if (o->raw && tf_doc_count(doc) != 1) {
        msg("%s %s: --raw needs a one-tensor document, this one has %zu", what, url,
            tf_doc_count(doc));
        return EXIT_USAGE;
    }
    if (!path && isatty(STDOUT_FILENO)) {
        msg("%s %s: not writing %s to a terminal: give a FILE, --dir DIR, or '-' to insist",
            what, url, o->raw ? "raw tensor bytes" : "a binary safetensors document");
        return EXIT_USAGE;
    }
    /* A regular file (or a new one) is written to a temporary file beside it, renamed over
     * it once complete: an interrupted get leaves an existing file as it was. Anything else
     * (/dev/null, a FIFO, a terminal) is written in place: renaming over it would replace
     * the device. */
    int fd = STDOUT_FILENO, direct = 0;
    struct stat st;
    if (!to_stdout && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        direct = 1;
    if (!to_stdout && (fd = direct ? open(path, O_WRONLY | O_TRUNC | O_CLOEXEC)
                                   : tmp_open(path)) < 0) {
        msg("cannot create %s: %s", path, strerror(errno));
        return EXIT_LOCAL;
    }
    int wrc;
    if (o->raw) {
        const tf_tensor_t *t = tf_doc_at(doc, 0);
        wrc = write_all(fd, t->data, t->nbytes);
        if (!o->quiet) {
            char shape[256];
            format_shape(t, shape, sizeof(shape));
            bar_end();
            fprintf(stderr, "name=%s dtype=%s shape=%s\n", t->name, tf_dtype_name(t->dtype),
                    shape);
        }
    } else {
        wrc = write_doc(fd, doc);
    }
    if (wrc != 0) {
        msg("cannot write %s: %s", to_stdout ? "stdout" : path, strerror(errno));
        rc = EXIT_LOCAL;
    }
    if (!to_stdout && close(fd) != 0 && rc == EXIT_OK) {
        msg("cannot write %s: %s", path, strerror(errno));
        rc = EXIT_LOCAL;
    }
    if (!to_stdout && !direct && tmp_finish(path, rc == EXIT_OK) != 0 && rc == EXIT_OK) {
        msg("cannot rename %s to %s: %s", tmp_path, path, strerror(errno));
        rc = EXIT_LOCAL;
    }
    return rc;
}

/* Builds the one-tensor document of a raw input from --dtype and --shape. */
static int raw_doc(const opts_t *o, const char *url, const input_t *in, tf_doc_t **out)
{
    tf_dtype_t dt;
    int rank = 0;
    int64_t shape[TF_MAX_RANK];
    char name[256];

    if (tf_dtype_from_name(o->dtype, &dt) != TF_OK)
        return usage_error("unknown dtype '%s'", o->dtype);
    if (parse_shape(o->shape, &rank, shape) != 0)
        return usage_error("bad shape '%s' (expected e.g. 2,3)", o->shape);
    last_segment(url, name, sizeof(name));
    if (!name[0])
        return usage_error("cannot name the tensor: %s has no last path segment", url);
    uint64_t want = tf_dtype_bits(dt);      /* bits, then bytes: F4 packs two per byte */
    for (int k = 0; k < rank; k++) {
        if (shape[k] != 0 && want > UINT64_MAX / (uint64_t)shape[k])
            return usage_error("shape '%s' is too large", o->shape);
        want *= (uint64_t)shape[k];
    }
    if (want % 8 != 0)
        return usage_error("%s [%s] does not fill whole bytes", o->dtype, o->shape);
    want /= 8;
    if (want != in->len) {
        msg("input is %zu bytes but %s [%s] needs %" PRIu64, in->len, o->dtype, o->shape,
            want);
        return EXIT_USAGE;
    }
    tf_doc_t *doc = tf_doc_new();
    if (!doc) {
        msg("out of memory");
        return EXIT_LOCAL;
    }
    tf_status_t st = tf_doc_add(doc, name, dt, rank, shape, in->data, in->len, TF_BORROW);
    if (st != TF_OK) {
        tf_doc_free(doc);
        msg("cannot make a tensor named '%s': %s", name, tf_strerror(st));
        return st == TF_ENOMEM ? EXIT_LOCAL : EXIT_USAGE;
    }
    *out = doc;
    return EXIT_OK;
}

/* Reads path (stdin for NULL or "-") into in and makes the document to send: the file
 * itself (safetensors, borrowed) or, with --dtype, one raw tensor. */
static int load_doc(const opts_t *o, const char *url, const char *path, input_t *in,
                    tf_doc_t **doc)
{
    const char *shown = path && strcmp(path, "-") ? path : "stdin";
    int rc;

    if (input_load(path, in) != 0) {
        msg("cannot read %s: %s", shown, strerror(errno));
        return EXIT_LOCAL;
    }
    if (o->dtype) {
        if ((rc = raw_doc(o, url, in, doc)) != EXIT_OK)
            input_release(in);
        return rc;
    }
    char why[256];
    tf_status_t st = tf_doc_decode_msg(in->data, in->len, TF_BORROW, doc, why, sizeof why);
    if (st != TF_OK) {
        /* A document starts with an 8-byte header length and then '{'; anything else is most
         * likely a raw tensor given without its description. */
        const unsigned char *b = in->data;
        uint64_t hl = 0;
        for (int i = 7; in->len >= 8 && i >= 0; i--)
            hl = hl << 8 | b[i];
        int doc_like = in->len > 8 && hl <= in->len - 8 && b[8] == '{';
        msg("%s is not a valid safetensors document: %s (%s)%s", shown,
            why[0] ? why : tf_strerror(st), tf_err_name(st),
            doc_like ? "" : "; if it holds one raw tensor, give --dtype and --shape");
        input_release(in);
        return st == TF_ENOMEM ? EXIT_LOCAL : EXIT_USAGE;
    }
    return EXIT_OK;
}

/* ---- get, put, call and rm: a batch of requests in flight ---------------------------------- */

typedef enum { CMD_GET, CMD_PUT, CMD_CALL, CMD_RM } cmd_t;

typedef struct batch batch_t;

typedef struct {
    batch_t *b;
    const char *url;
    const char *in_path;            /* put, call: the input (NULL or "-": stdin) */
    char *out_path;                 /* get, call: the output (NULL: stdout; "-": stdout, asked) */
    input_t in;
    tf_doc_t *doc;                  /* what is sent, while in flight */
    tf_result_t result;
    int has_result;                 /* a request was made (or refused by the library) */
    int rc;
} job_t;

struct batch {
    tf_client_t *c;
    const opts_t *o;
    cmd_t cmd;
    job_t *jobs;
    size_t njobs, next;
    size_t inflight, window;
};

static const char *const cmd_names[] = {"get", "put", "call", "rm"};

static void release_input(job_t *j)
{
    tf_doc_free(j->doc);
    j->doc = NULL;
    if (j->in.data || j->in.len)
        input_release(&j->in);
    memset(&j->in, 0, sizeof(j->in));
}

static void start_more(batch_t *b);

/* A request of the batch completed: report it, write its reply, start the next ones. */
static void job_done(tf_fetch_t *f, tf_status_t st, tf_doc_t *doc, const tf_result_t *r,
                     void *ud)
{
    job_t *j = ud;
    batch_t *b = j->b;
    const char *what = cmd_names[b->cmd];

    j->result = *r;
    j->has_result = 1;
    b->inflight--;
    if (b->njobs == 1)
        bar_end();
    if (st != TF_OK) {
        j->rc = request_failed(r, what, j->url, st);
    } else if (b->cmd == CMD_GET || b->cmd == CMD_CALL) {
        j->rc = write_reply(b->o, what, j->url, doc, j->out_path);
    } else if (!b->o->quiet && b->cmd == CMD_PUT) {
        fprintf(stderr, "%s %s (%" PRIu64 " bytes)\n",
                r->http_status == 201 ? "created" : "stored", j->url, r->bytes_sent);
    } else if (!b->o->quiet) {
        fprintf(stderr, "removed %s\n", j->url);
    }
    tf_doc_free(doc);
    release_input(j);
    start_more(b);
}

static void start_job(batch_t *b, job_t *j)
{
    static const tf_op_t ops[] = {TF_OP_GET, TF_OP_PUT, TF_OP_EXCHANGE, TF_OP_DELETE};
    tf_request_t rq = {.op = ops[b->cmd], .url = j->url};

    if (b->cmd == CMD_PUT || b->cmd == CMD_CALL) {
        if ((j->rc = load_doc(b->o, j->url, j->in_path, &j->in, &j->doc)) != EXIT_OK)
            return;
        rq.in = j->doc;
    }
    if (b->cmd == CMD_GET)
        rq.wait_ms = b->o->wait_ms;
    tf_status_t st = tf_fetch_start(b->c, &rq, job_done, j, NULL);
    if (st != TF_OK) {
        j->result = *tf_client_last(b->c);
        j->has_result = 1;
        j->rc = request_failed(&j->result, cmd_names[b->cmd], j->url, st);
        release_input(j);
        return;
    }
    b->inflight++;
}

/* Starts jobs until the window is full (called again from each completion). */
static void start_more(batch_t *b)
{
    while (b->inflight < b->window && b->next < b->njobs)
        start_job(b, &b->jobs[b->next++]);
}

/* ---- naming the outputs of --dir ------------------------------------------------------------ */

/* DIR/STEM.safetensors (or .raw). */
static char *join_out(const char *dir, const char *stem, int raw)
{
    size_t n = strlen(dir) + strlen(stem) + 16;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s.%s", dir, stem, raw ? "raw" : "safetensors");
    return p;
}

/* The stem of an output: get names it after the URL's last path segment, call after its
 * input file (without directory and extension; "stdin" for standard input). */
static int out_stem(cmd_t cmd, const char *url, const char *in_path, char *stem, size_t size)
{
    if (cmd == CMD_GET) {
        last_segment(url, stem, size);
    } else if (!in_path || strcmp(in_path, "-") == 0) {
        snprintf(stem, size, "stdin");
    } else {
        const char *base = strrchr(in_path, '/');
        snprintf(stem, size, "%s", base ? base + 1 : in_path);
        char *dot = strrchr(stem, '.');
        if (dot && dot != stem)
            *dot = '\0';
    }
    return stem[0] && strcmp(stem, ".") != 0 && strcmp(stem, "..") != 0 ? 0 : -1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names every job's output under --dir, refusing two jobs that would write one file. */
static int name_outputs(batch_t *b)
{
    const opts_t *o = b->o;
    char stem[256];

    if (mkdir(o->dir, 0777) != 0 && errno != EEXIST) {
        msg("cannot create %s: %s", o->dir, strerror(errno));
        return EXIT_LOCAL;
    }
    char **names = malloc(b->njobs * sizeof(*names));
    if (!names) {
        msg("out of memory");
        return EXIT_LOCAL;
    }
    for (size_t i = 0; i < b->njobs; i++) {
        job_t *j = &b->jobs[i];
        if (out_stem(b->cmd, j->url, j->in_path, stem, sizeof(stem)) != 0) {
            free(names);
            return usage_error("cannot name the output of %s", j->url);
        }
        if (!(j->out_path = join_out(o->dir, stem, o->raw))) {
            free(names);
            msg("out of memory");
            return EXIT_LOCAL;
        }
        names[i] = j->out_path;
    }
    qsort(names, b->njobs, sizeof(*names), cmp_str);
    for (size_t i = 1; i < b->njobs; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            int rc = usage_error("two replies would both be written to %s", names[i]);
            free(names);
            return rc;
        }
    }
    free(names);
    return EXIT_OK;
}

/* Runs get, put, call or rm over its arguments: URLs, or URL FILE pairs. */
static int cmd_batch(tf_client_t *c, const opts_t *o, cmd_t cmd, char **args, int nargs)
{
    int pairs = cmd == CMD_PUT || cmd == CMD_CALL;
    size_t n = (size_t)nargs;                 /* rm URL..., get --dir DIR URL... */
    if (pairs)
        n = nargs == 1 ? 1 : (size_t)nargs / 2;   /* put/call URL [FILE] [URL FILE]... */
    else if (cmd == CMD_GET && !o->dir)
        n = 1;                                    /* get URL [FILE] */
    batch_t b = {.c = c, .o = o, .cmd = cmd, .njobs = n};
    int rc = EXIT_OK;

    b.window = o->parallel > 0 ? (size_t)o->parallel : 1;
    if (!(b.jobs = calloc(n, sizeof(*b.jobs)))) {
        msg("out of memory");
        return EXIT_LOCAL;
    }
    for (size_t i = 0; i < n; i++) {
        job_t *j = &b.jobs[i];
        j->b = &b;
        j->url = args[pairs ? 2 * i : i];
        if (pairs)
            j->in_path = 2 * i + 1 < (size_t)nargs ? args[2 * i + 1] : NULL;
    }
    if (cmd == CMD_GET && !o->dir && nargs == 2)      /* "-": stdout, even a terminal */
        b.jobs[0].out_path = strdup(args[1]);
    if (o->dir && (rc = name_outputs(&b)) != EXIT_OK)
        goto free_jobs;

    start_more(&b);
    while (tf_client_pending(c) > 0)
        tf_client_run(c, -1);
    bar_end();

    for (size_t i = 0; i < n; i++) {
        if (o->stats && b.jobs[i].has_result)
            print_stats(&b.jobs[i].result);
        if (rc == EXIT_OK)
            rc = b.jobs[i].rc;
    }
free_jobs:
    for (size_t i = 0; i < n; i++)
        free(b.jobs[i].out_path);
    free(b.jobs);
    return rc;
}

/* ---- ls and info -------------------------------------------------------------------------- */

static int cmd_ls(tf_client_t *c, const opts_t *o, const char *base)
{
    tf_entry_t *e = NULL;
    size_t n = 0;

    tf_status_t st = tf_list(c, base, &e, &n);
    if (st != TF_OK)
        return request_failed(tf_client_last(c), "ls", base, st);
    if (o->json) {
        fputs("{\"tensors\":[", stdout);
        for (size_t i = 0; i < n; i++) {
            fputs(i ? ",{\"name\":" : "{\"name\":", stdout);
            json_str(stdout, e[i].name);
            printf(",\"bytes\":%" PRIu64 ",\"ntensors\":%zu}", e[i].bytes, e[i].ntensors);
        }
        fputs("]}\n", stdout);
    } else {
        int w = 4;
        for (size_t i = 0; i < n; i++) {
            size_t len = strlen(e[i].name);
            if (len > (size_t)w)
                w = len > 200 ? 200 : (int)len;
        }
        if (!o->quiet)
            printf("%-*s %15s %8s\n", w, "NAME", "BYTES", "TENSORS");
        for (size_t i = 0; i < n; i++)
            printf("%-*s %15" PRIu64 " %8zu\n", w, e[i].name, e[i].bytes, e[i].ntensors);
    }
    tf_list_free(e, n);
    if (fflush(stdout) != 0) {
        msg("cannot write stdout: %s", strerror(errno));
        return EXIT_LOCAL;
    }
    return EXIT_OK;
}

/* Prints a JSON text reply on stdout, newline-terminated. */
static int print_json(char *json)
{
    size_t n = strlen(json);
    fputs(json, stdout);
    if (n == 0 || json[n - 1] != '\n')
        fputc('\n', stdout);
    tf_free(json);
    if (fflush(stdout) != 0) {
        msg("cannot write stdout: %s", strerror(errno));
        return EXIT_LOCAL;
    }
    return EXIT_OK;
}

static int cmd_info(tf_client_t *c, const char *base)
{
    char *json = NULL;
    tf_status_t st = tf_info(c, base, &json);
    if (st != TF_OK)
        return request_failed(tf_client_last(c), "info", base, st);
    return print_json(json);
}

/* ---- main -------------------------------------------------------------------------------- */

enum { OPT_RAW = 256, OPT_DTYPE, OPT_SHAPE, OPT_JSON, OPT_TRANSPORT, OPT_DEVICE, OPT_SEQ,
       OPT_AFTER, OPT_CONSUMER, OPT_TOKEN,
       OPT_CACERT, OPT_CERT, OPT_KEY, OPT_STALL_TIME, OPT_STALL_RATE, OPT_MAX_BODY };

static const struct option long_opts[] = {
    {"user", required_argument, NULL, 'u'},
    {"request-id", required_argument, NULL, 'r'},
    {"token", required_argument, NULL, OPT_TOKEN},
    {"cacert", required_argument, NULL, OPT_CACERT},
    {"cert", required_argument, NULL, OPT_CERT},
    {"key", required_argument, NULL, OPT_KEY},
    {"timeout", required_argument, NULL, 't'},
    {"stall-time", required_argument, NULL, OPT_STALL_TIME},
    {"stall-rate", required_argument, NULL, OPT_STALL_RATE},
    {"max-body", required_argument, NULL, OPT_MAX_BODY},
    {"wait", required_argument, NULL, 'w'},
    {"parallel", required_argument, NULL, 'P'},
    {"dir", required_argument, NULL, 'd'},
    {"format", required_argument, NULL, 'f'},
    {"raw", no_argument, NULL, OPT_RAW},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"shape", required_argument, NULL, OPT_SHAPE},
    {"json", no_argument, NULL, OPT_JSON},
    {"transport", required_argument, NULL, OPT_TRANSPORT},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"seq", required_argument, NULL, OPT_SEQ},
    {"after", required_argument, NULL, OPT_AFTER},
    {"consumer", required_argument, NULL, OPT_CONSUMER},
    {"stats", no_argument, NULL, 's'},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

/* Parses options into o; returns -1 to continue, or an exit code. */
static int parse_options(int argc, char **argv, opts_t *o)
{
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":u:r:t:w:P:d:f:sqhV", long_opts, NULL)) != -1) {
        switch (ch) {
        case 'u': o->user = optarg; break;
        case OPT_TOKEN: o->token = optarg; break;
        case OPT_CACERT: o->cacert = optarg; break;
        case OPT_CERT: o->cert = optarg; break;
        case OPT_KEY: o->key = optarg; break;
        case 'r': o->request_id = optarg; break;
        case 't':
            if (parse_ms(optarg, &o->timeout_ms) != 0)
                return usage_error("bad --timeout '%s' (milliseconds)", optarg);
            break;
        case OPT_STALL_TIME:
            if (parse_ms(optarg, &o->stall_ms) != 0)
                return usage_error("bad --stall-time '%s' (milliseconds)", optarg);
            break;
        case OPT_STALL_RATE:
            if (parse_ms(optarg, &o->stall_rate) != 0 || o->stall_rate < 1)
                return usage_error("bad --stall-rate '%s' (bytes a second, at least 1)", optarg);
            break;
        case OPT_MAX_BODY:
            if (parse_size(optarg, &o->max_body) != 0)
                return usage_error("bad --max-body '%s' (bytes, suffix K, M, G or T)", optarg);
            break;
        case 'w':
            if (parse_ms(optarg, &o->wait_ms) != 0)
                return usage_error("bad --wait '%s' (milliseconds)", optarg);
            break;
        case 'P':
            if (parse_ms(optarg, &o->parallel) != 0 || o->parallel < 1 || o->parallel > 1024)
                return usage_error("bad --parallel '%s' (1..1024)", optarg);
            break;
        case 'd': o->dir = optarg; break;
        case 'f':
            if (strcmp(optarg, "safetensors") != 0 && strcmp(optarg, "shumai") != 0)
                return usage_error("unknown --format '%s' (safetensors or shumai)", optarg);
            o->format = optarg;
            break;
        case OPT_RAW: o->raw = 1; break;
        case OPT_DTYPE: o->dtype = optarg; break;
        case OPT_SHAPE: o->shape = optarg; break;
        case OPT_JSON: o->json = 1; break;
        case OPT_TRANSPORT:
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "http") != 0 &&
                strcmp(optarg, "ucx") != 0)
                return usage_error("unknown --transport '%s' (auto, http or ucx)", optarg);
            o->transport = optarg;
            break;
        case OPT_DEVICE: o->device = optarg; break;
        case OPT_CONSUMER: o->consumer = optarg; break;
        case OPT_SEQ:
        case OPT_AFTER: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || optarg[0] == '-')
                return usage_error("bad --%s '%s' (a number)", ch == OPT_SEQ ? "seq" : "after",
                                   optarg);
            *(ch == OPT_SEQ ? &o->seq : &o->after) = (uint64_t)v;
            break;
        }
        case 's': o->stats = 1; break;
        case 'q': o->quiet = 1; break;
        case 'h': fputs(usage_text, stdout); return EXIT_OK;
        case 'V': printf("tfetch %s (libtfetch %s)\n", TF_VERSION, tf_version()); return EXIT_OK;
        case ':': return usage_error("option '%s' needs an argument", argv[optind - 1]);
        default: return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    return -1;
}

static int is(const char *cmd, const char *name)
{
    return strcmp(cmd, name) == 0;
}

/* ---- feed: declare, push, pop, outfeed, done, stats ------------------------------------------ */

static int feed_declare(tf_client_t *c, const char *url, const char *path)
{
    input_t in = {0};
    const char *shown = path && strcmp(path, "-") ? path : "stdin";
    if (input_load(path, &in) != 0) {
        msg("cannot read %s: %s", shown, strerror(errno));
        return EXIT_LOCAL;
    }
    char *json = strndup(in.data ? in.data : "", in.len);
    input_release(&in);
    if (!json) {
        msg("out of memory");
        return EXIT_LOCAL;
    }
    char *stats = NULL;
    tf_status_t st = tf_feed_declare(c, url, json, &stats);
    free(json);
    if (st != TF_OK)
        return request_failed(tf_client_last(c), "feed declare", url, st);
    return print_json(stats);
}

static int feed_push(tf_client_t *c, const opts_t *o, const char *url, const char *path)
{
    input_t in = {0};
    tf_doc_t *doc = NULL;
    int rc = load_doc(o, url, path, &in, &doc);
    if (rc != EXIT_OK)
        return rc;
    int dev = -1;
    long d;
    if (o->device && (parse_ms(o->device, &d) != 0 || d > 63)) {
        rc = usage_error("feed push: --device takes an index (0..63)");
        goto out;
    }
    if (o->device)
        dev = (int)d;
    uint64_t round = 0;
    tf_status_t st = tf_infeed_push(c, url, dev, doc, o->seq, o->wait_ms, &round);
    if (st != TF_OK)
        rc = request_failed(tf_client_last(c), "feed push", url, st);
    else if (!o->quiet)
        fprintf(stderr, "round=%" PRIu64 "\n", round);
out:
    tf_doc_free(doc);
    input_release(&in);
    return rc;
}

static int feed_pop(tf_client_t *c, const opts_t *o, const char *url, const char *path)
{
    tf_feed_opts_t fo = TF_FEED_OPTS_INIT;
    fo.flags = TF_FEED_NO_PREFETCH;    /* one item: nothing else delivered to us */
    fo.consumer = o->consumer ? o->consumer : "tfetch";
    tf_feed_t *feed = NULL;
    tf_status_t st = tf_feed_attach_opts(c, url, o->device ? o->device : "0", "host", &fo, &feed);
    if (st != TF_OK)
        return request_failed(tf_client_last(c), "feed pop", url, st);
    tf_item_t *it = NULL;
    int rc;
    st = tf_infeed_pop(feed, o->wait_ms, &it);
    if (st == TF_EAGAIN) {
        msg("feed pop %s: nothing within %ld ms", url, o->wait_ms);
        rc = EXIT_NOTFOUND;
    } else if (st == TF_EDONE) {
        msg("feed pop %s: the feed is done (TF_EDONE)", url);
        rc = EXIT_REJECTED;
    } else if (st != TF_OK) {
        rc = request_failed(tf_client_last(c), "feed pop", url, st);
    } else {
        if (!o->quiet)
            fprintf(stderr, "position=%" PRIu64 " seq=%" PRIu64 " round=%" PRIu64
                    " generation=%" PRIu64 "\n", tf_item_position(it), tf_item_seq(it),
                    tf_item_round(it), tf_item_generation(it));
        rc = write_reply(o, "feed pop", url, tf_item_doc(it), path);
        /* Acknowledged only once written: a failed write leaves it to the next consumer. */
        if (rc == EXIT_OK)
            tf_item_release(it);
    }
    tf_feed_detach(feed);
    return rc;
}

static int feed_outfeed(tf_client_t *c, const opts_t *o, const char *url, const char *path)
{
    tf_doc_t *doc = NULL;
    uint64_t seq = 0;
    int dev = -1;
    tf_status_t st = tf_outfeed_get(c, url, o->after, o->wait_ms, &doc, &seq, &dev);
    if (st == TF_EAGAIN) {
        msg("feed outfeed %s: nothing after %" PRIu64 " within %ld ms", url, o->after, o->wait_ms);
        return EXIT_NOTFOUND;
    }
    if (st == TF_EGONE) {
        msg("feed outfeed %s: item %" PRIu64 " is no longer kept; resume after %" PRIu64, url,
            o->after + 1, seq);
        return EXIT_REJECTED;
    }
    if (st != TF_OK)
        return request_failed(tf_client_last(c), "feed outfeed", url, st);
    if (!o->quiet)
        fprintf(stderr, "seq=%" PRIu64 " device=%d\n", seq, dev);
    int rc = write_reply(o, "feed outfeed", url, doc, path);
    tf_doc_free(doc);
    return rc;
}

static int cmd_feed(tf_client_t *c, const opts_t *o, char **args, int nargs)
{
    const char *sub = args[0], *url = args[1], *file = nargs > 2 ? args[2] : NULL;
    tf_status_t st;
    char *json = NULL;
    if (is(sub, "declare"))
        return feed_declare(c, url, file);
    if (is(sub, "push"))
        return feed_push(c, o, url, file);
    if (is(sub, "pop"))
        return feed_pop(c, o, url, file);
    if (is(sub, "outfeed"))
        return feed_outfeed(c, o, url, file);
    if (is(sub, "done")) {
        st = tf_feed_done(c, url);
        return st == TF_OK ? EXIT_OK : request_failed(tf_client_last(c), "feed done", url, st);
    }
    st = tf_feed_stats(c, url, &json);
    if (st != TF_OK)
        return request_failed(tf_client_last(c), "feed stats", url, st);
    return print_json(json);
}

/* The feed subcommand's arguments and the options that apply to it. */
static int check_feed(char **args, int nargs, const opts_t *o)
{
    static const char *const subs[] = {"declare", "push", "pop", "outfeed", "done", "stats"};
    int known = 0;
    if (nargs < 1)
        return usage_error("feed needs a subcommand (declare, push, pop, outfeed, done, stats)");
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
        known |= is(args[0], subs[i]);
    if (!known)
        return usage_error("unknown feed subcommand '%s'", args[0]);
    const char *sub = args[0];
    int takes_file = !is(sub, "done") && !is(sub, "stats");
    if (nargs < 2)
        return usage_error("feed %s needs a feed URL", sub);
    if (nargs > (takes_file ? 3 : 2))
        return usage_error("too many arguments for feed %s", sub);
    if (o->device && !is(sub, "push") && !is(sub, "pop"))
        return usage_error("--device applies to feed push and feed pop only");
    if (o->seq && !is(sub, "push"))
        return usage_error("--seq applies to feed push only");
    if (o->after && !is(sub, "outfeed"))
        return usage_error("--after applies to feed outfeed only");
    if (o->consumer && !is(sub, "pop"))
        return usage_error("--consumer applies to feed pop only");
    if (o->wait_ms > 0 && !is(sub, "push") && !is(sub, "pop") && !is(sub, "outfeed"))
        return usage_error("--wait applies to get and feed push, pop and outfeed only");
    if (o->raw && !is(sub, "pop") && !is(sub, "outfeed"))
        return usage_error("--raw applies to get, call, feed pop and feed outfeed only");
    if (o->dtype || o->shape || o->dir || o->parallel || o->json || o->format)
        return usage_error("feed takes none of --dtype, --shape, --dir, --parallel, --json, "
                           "--format");
    return -1;
}

/* Checks the number of arguments of a command. */
static int check_args(const char *cmd, char **args, int nargs, const opts_t *o)
{
    if (nargs < 1)
        return usage_error("%s needs a URL or a name", cmd);
    if (is(cmd, "ls") || is(cmd, "info")) {
        if (nargs > 1)
            return usage_error("too many arguments for %s", cmd);
    } else if (is(cmd, "get")) {
        if (!o->dir && nargs > 2)
            return usage_error("get with several URLs needs --dir");
    } else if (is(cmd, "put") || is(cmd, "call")) {
        if (nargs > 2 && nargs % 2 != 0)
            return usage_error("%s takes URL FILE pairs", cmd);
        if (is(cmd, "call") && !o->dir && nargs > 2)
            return usage_error("call with several pairs needs --dir");
        if (is(cmd, "call") && o->dir && nargs < 2)
            return usage_error("call --dir takes URL FILE pairs");
        int stdin_uses = nargs == 1;
        for (int i = 1; i < nargs; i += 2)
            stdin_uses += strcmp(args[i], "-") == 0;
        if (stdin_uses > 1)
            return usage_error("standard input (-) can be read only once");
    }
    return -1;
}

/* Checks the command's arguments and the options that apply to it only. */
static int check_command(const char *cmd, char **args, int nargs, const opts_t *o)
{
    if (is(cmd, "feed"))
        return check_feed(args, nargs, o);
    if (o->device || o->seq || o->after || o->consumer)
        return usage_error("--device, --seq, --after and --consumer apply to feed only");
    int batch = is(cmd, "get") || is(cmd, "put") || is(cmd, "call") || is(cmd, "rm");
    int rc = check_args(cmd, args, nargs, o);
    if (rc >= 0)
        return rc;
    if (o->wait_ms > 0 && !is(cmd, "get"))
        return usage_error("--wait applies to get only");
    if (o->raw && !is(cmd, "get") && !is(cmd, "call"))
        return usage_error("--raw applies to get and call only");
    if ((o->dtype || o->shape) && !is(cmd, "put") && !is(cmd, "call"))
        return usage_error("--dtype and --shape apply to put and call only");
    if (!o->dtype != !o->shape)
        return usage_error("--dtype and --shape go together");
    if (o->json && !is(cmd, "ls"))
        return usage_error("--json applies to ls only");
    if (o->dir && !is(cmd, "get") && !is(cmd, "call"))
        return usage_error("--dir applies to get and call only");
    if (o->parallel && !batch)
        return usage_error("--parallel applies to get, put, call and rm only");
    if (o->format && is(o->format, "shumai") && !is(cmd, "get") && !is(cmd, "call"))
        return usage_error("--format shumai applies to get and call only");
    return -1;
}

/* auto, http or ucx, in any case (as the library reads TFETCH_TRANSPORT). */
static int is_policy(const char *v)
{
    return strcasecmp(v, "auto") == 0 || strcasecmp(v, "http") == 0 ||
           strcasecmp(v, "ucx") == 0;
}

/* Sets the client up from the options; returns -1 to continue, or an exit code. */
static int configure(tf_client_t *c, const opts_t *o, int one_request)
{
    if (o->user && tf_client_set_user(c, o->user) != TF_OK)
        return usage_error("bad --user '%s' (expected [A-Za-z0-9._-]{1,128})", o->user);
    /* The token itself is never printed. */
    if (o->token && tf_client_set_token(c, o->token) != TF_OK)
        return usage_error("bad --token (expected [A-Za-z0-9-._~+/]+ then '='s, at most 512 "
                           "characters)");
    const char *tok = getenv("TFETCH_TOKEN");
    if (!o->token && tok && *tok && tf_client_set_token(c, tok) != TF_OK)
        return usage_error("TFETCH_TOKEN is not a bearer token (expected [A-Za-z0-9-._~+/]+ "
                           "then '='s, at most 512 characters)");
    if (o->cacert && tf_client_set_ca_file(c, o->cacert) != TF_OK)
        return usage_error("--cacert %s: cannot read the file", o->cacert);
    const char *ca = getenv("TFETCH_CA_FILE");
    if (!o->cacert && ca && *ca && tf_client_set_ca_file(c, ca) != TF_OK)
        return usage_error("TFETCH_CA_FILE %s: cannot read the file", ca);
    const char *cert = o->cert, *key = o->key;
    if (!cert) {                    /* both from the environment, or neither */
        cert = getenv("TFETCH_CERT");
        key = key ? key : getenv("TFETCH_KEY");
        cert = cert && *cert ? cert : NULL;
        key = key && *key ? key : NULL;
    }
    if (key && !cert)
        return usage_error("--key needs --cert (or TFETCH_CERT)");
    if (cert && tf_client_set_cert(c, cert, key) != TF_OK)
        return usage_error("%s %s%s%s: cannot read the file", o->cert ? "--cert" : "TFETCH_CERT",
                           cert, key ? ", key " : "", key ? key : "");
    if (o->timeout_ms >= 0)
        tf_client_set_timeout(c, o->timeout_ms);
    if ((o->stall_ms >= 0 || o->stall_rate >= 0) &&
        tf_client_set_stall(c, o->stall_rate >= 0 ? (uint64_t)o->stall_rate : 1024u,
                            o->stall_ms >= 0 ? o->stall_ms : 10000L) != TF_OK)
        return usage_error("bad --stall-time or --stall-rate");
    if (o->max_body >= 0)
        tf_client_set_max_body(c, (uint64_t)o->max_body);
    if (o->parallel > 0 && tf_client_set_max_connections(c, o->parallel) != TF_OK)
        return usage_error("bad --parallel %ld", o->parallel);
    if (o->format && is(o->format, "shumai"))
        tf_client_set_format(c, TF_FORMAT_SHUMAI);
    const char *env = getenv("TFETCH_TRANSPORT");
    if (!o->transport && env && *env && !is_policy(env))
        return usage_error("TFETCH_TRANSPORT='%s' is not auto, http or ucx", env);
    const char *up = getenv("TFETCH_UPGRADE");
    if (up && *up && strcasecmp(up, "eager") != 0 && strcasecmp(up, "lazy") != 0)
        return usage_error("TFETCH_UPGRADE='%s' is not eager or lazy", up);
    if (o->transport)
        tf_client_set_transport(c, is(o->transport, "ucx")    ? TF_TRANSPORT_UCX
                                   : is(o->transport, "http") ? TF_TRANSPORT_HTTP
                                                              : TF_TRANSPORT_AUTO);
    if (!o->quiet && one_request && isatty(STDERR_FILENO))
        tf_client_set_progress(c, on_progress, &bar);
    return -1;
}

static int run(const char *cmd, char **args, int nargs, const opts_t *o)
{
    tf_client_t *c = NULL;
    int rc;

    if (tf_client_new(&c) != TF_OK) {
        msg("cannot create a client: out of memory");
        return EXIT_LOCAL;
    }
    int pairs = is(cmd, "put") || is(cmd, "call");
    int one = nargs == 1 || (nargs == 2 && (pairs || !o->dir));
    if ((rc = configure(c, o, one)) >= 0)
        goto free_client;

    /* The strict ucx policy wants UCX from the first request on, and waits for it: a failure
     * here is reported by the requests (they fail, saying why). Under auto, given or not,
     * the library decides by itself (its eager upgrade policy: a server on this host, or a
     * body of 1 MiB or more, is negotiated with before the first request, and never waited
     * on past a few tens of milliseconds); the tool keeps no cache of its own. */
    const char *policy = o->transport ? o->transport : getenv("TFETCH_TRANSPORT");
    int can_upgrade = !is(cmd, "ls") && !is(cmd, "info") && !is(cmd, "feed") &&
                      !(o->format && is(o->format, "shumai"));
    if (can_upgrade && policy && strcasecmp(policy, "ucx") == 0)
        tf_client_upgrade(c, args[0]);
    /* After the upgrade, which is a request of its own: --request-id names the first of the
     * user's. */
    if (o->request_id && tf_client_set_request_id(c, o->request_id) != TF_OK) {
        rc = usage_error("bad --request-id '%s' (expected [A-Za-z0-9._:-]{1,128})",
                         o->request_id);
        goto free_client;
    }

    if (is(cmd, "ls")) {
        rc = cmd_ls(c, o, args[0]);
    } else if (is(cmd, "info")) {
        rc = cmd_info(c, args[0]);
    } else if (is(cmd, "feed")) {
        rc = cmd_feed(c, o, args, nargs);
    } else {
        cmd_t k = is(cmd, "get") ? CMD_GET : is(cmd, "put") ? CMD_PUT
                                           : is(cmd, "call") ? CMD_CALL : CMD_RM;
        rc = cmd_batch(c, o, k, args, nargs);
    }
    bar_end();
    /* A request was made unless the command failed before reaching the network. */
    if (o->stats && (is(cmd, "ls") || is(cmd, "info") || is(cmd, "feed")) &&
        tf_client_last(c)->op[0])
        print_stats(tf_client_last(c));

free_client:
    tf_client_free(c);
    return rc;
}

/* ---- names instead of URLs: the default server ---------------------------------------- */

#define DEFAULT_BASE "http://127.0.0.1:7070"

/* The server a bare name refers to: $TFETCH_URL, else "url = ..." in
 * ${XDG_CONFIG_HOME:-~/.config}/tfetch/config, else the embedded default. Into buf, without a
 * trailing slash. */
static void default_base(char *buf, size_t n)
{
    const char *env = getenv("TFETCH_URL");
    snprintf(buf, n, "%s", DEFAULT_BASE);
    if (env && *env) {
        snprintf(buf, n, "%s", env);
    } else {
        char path[4096];
        const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
        if (xdg && *xdg)
            snprintf(path, sizeof path, "%s/tfetch/config", xdg);
        else if (home && *home)
            snprintf(path, sizeof path, "%s/.config/tfetch/config", home);
        else
            path[0] = '\0';
        FILE *f = path[0] ? fopen(path, "r") : NULL;
        char line[4096];
        while (f && fgets(line, sizeof line, f)) {
            char *p = line + strspn(line, " \t");
            if (strncmp(p, "url", 3) != 0)
                continue;
            p += 3 + strspn(p + 3, " \t");
            if (*p != '=')
                continue;
            p += 1 + strspn(p + 1, " \t");
            p[strcspn(p, " \t\r\n#")] = '\0';
            if (*p)
                snprintf(buf, n, "%s", p);
        }
        if (f)
            fclose(f);
    }
    size_t k = strlen(buf);
    while (k > 0 && buf[k - 1] == '/')
        buf[--k] = '\0';
}

/* A tensor or route name as the CLI takes it in place of a URL. */
static int bare_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z') &&
            !(s[i] >= '0' && s[i] <= '9') && !strchr("._-", s[i]))
            return 0;
    return 1;
}

/* Where the command takes a URL, a bare name means one on the default server: get, put and
 * rm a tensor (BASE/v1/tensors/NAME), call a route (BASE/v1/call/NAME); ls and info take the
 * server itself, BASE when absent. Rewrites args[] in place (new strings in owned[], freed by
 * the caller); returns -1, or a usage error's exit code. */
static int resolve_urls(const char *cmd, char **args, int *nargs, const opts_t *o,
                        char **owned, int *nowned)
{
    char base[2048];
    default_base(base, sizeof base);
    if ((is(cmd, "ls") || is(cmd, "info")) && *nargs == 0) {
        if (!(owned[(*nowned)++] = args[0] = strdup(base)))
            return EXIT_LOCAL;
        *nargs = 1;
        return -1;
    }
    int pairs = is(cmd, "put") || is(cmd, "call");
    for (int i = 0; i < *nargs; i++) {
        int is_url_slot = is(cmd, "rm") || (is(cmd, "get") && (o->dir || i == 0)) ||
                          (pairs && i % 2 == 0);
        if (!is_url_slot || strstr(args[i], "://"))
            continue;
        if (is(cmd, "ls") || is(cmd, "info") || !bare_name(args[i]))
            return usage_error("'%s' is neither a URL (http://HOST:PORT/...) nor a tensor name "
                               "([A-Za-z0-9._-]{1,255})", args[i]);
        size_t n = strlen(base) + strlen(args[i]) + 16;
        char *u = malloc(n);
        if (!u)
            return EXIT_LOCAL;
        snprintf(u, n, "%s/v1/%s/%s", base, is(cmd, "call") ? "call" : "tensors", args[i]);
        args[i] = owned[(*nowned)++] = u;
    }
    return -1;
}

int main(int argc, char **argv)
{
    opts_t o = {.timeout_ms = -1, .stall_ms = -1, .stall_rate = -1, .max_body = -1};

    if (argc > 1 && strcmp(argv[1], "doctor") == 0)     /* its own options: cli/doctor.c */
        return tfc_doctor(argc - 1, argv + 1);
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (optind >= argc)
        return usage_error("no command given");
    const char *cmd = argv[optind];
    static const char *const commands[] = {"get", "put", "call", "rm", "ls", "info", "feed"};
    int known = 0;
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        known |= strcmp(cmd, commands[i]) == 0;
    if (!known)
        return usage_error("unknown command '%s'", cmd);
    int nargs = argc - optind - 1;
    /* The arguments, with bare names resolved against the default server (one slot more
     * for ls and info without BASE). */
    char **args = calloc((size_t)nargs + 2, sizeof *args), **owned = calloc((size_t)nargs + 2,
                                                                          sizeof *owned);
    int nowned = 0;
    if (!args || !owned) {
        free(args);
        free(owned);
        msg("out of memory");
        return EXIT_LOCAL;
    }
    memcpy(args, argv + optind + 1, (size_t)nargs * sizeof *args);
    if ((rc = resolve_urls(cmd, args, &nargs, &o, owned, &nowned)) < 0 &&
        (rc = check_command(cmd, args, nargs, &o)) < 0)
        rc = run(cmd, args, nargs, &o);
    for (int i = 0; i < nowned; i++)
        free(owned[i]);
    free(owned);
    free(args);
    return rc;
}
