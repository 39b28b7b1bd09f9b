/* files.c - the tfetch command's local files: inputs read whole (mapped, or read from a
 * pipe), documents made from them (a safetensors file, or one raw tensor from --dtype and
 * --shape), replies written out (through a temporary file renamed once complete, removed
 * if a signal ends the process), and the progress bar on stderr.
 *
 * Single-threaded: replies are written by completion callbacks on the driving thread; the
 * signal handler only unlinks the one temporary file being written.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

/* ---- progress bar ------------------------------------------------------------------------ */

#define PROGRESS_MIN_BYTES (1024u * 1024u)

/* The progress bar on stderr (one transfer at a time). */
typedef struct {
    int drawn;
    int pct;                        /* the percentage last drawn */
    struct timespec last;
    double t0;                      /* when this transfer's bar started; 0: not yet */
} bar_t;

static bar_t bar;

/* Ends a drawn progress bar's line, so that what follows starts on its own line. */
void cli_bar_end(void)
{
    if (bar.drawn)
        fputc('\n', stderr);
    bar.drawn = 0;
    bar.t0 = 0;
}

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

/* Draws the bar for c's transfers (one request at a time). */
void cli_progress_attach(tf_client_t *c)
{
    tf_client_set_progress(c, on_progress, &bar);
}

/* ---- local files ------------------------------------------------------------------------- */

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
static int read_stream(int fd, cli_input_t *in)
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
static int read_regular(int fd, size_t size, cli_input_t *in)
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

int cli_input_load(const char *path, cli_input_t *in)
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

void cli_input_release(cli_input_t *in)
{
    if (in->mapped)
        munmap(in->data, in->len);
    else
        free(in->data);
    in->data = NULL;
}


static void format_shape(const tf_tensor_t *t, char *buf, size_t size)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int k = 0; k < t->rank && o < size; k++)
        o += (size_t)snprintf(buf + o, size - o, "%s%" PRId64, k ? "," : "", t->shape[k]);
}

/* The last path segment of url, without query or fragment, into buf. */
void cli_last_segment(const char *url, char *buf, size_t size)
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

/* The temporary files being written (one per reply in flight: a streamed get writes while
 * its transfer runs, up to --parallel at once), removed by the signal handler if the
 * process is interrupted. Slots are claimed and given back on the driving thread only. */
#define TMP_SLOTS 1025
static char *volatile tmp_live[TMP_SLOTS];

static void on_fatal_signal(int sig)
{
    for (size_t i = 0; i < TMP_SLOTS; i++)
        if (tmp_live[i])
            unlink(tmp_live[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Creates PATH.tfetch-XXXXXX (mode 0666 & ~umask, as open(2) would make PATH) and returns
 * its descriptor and, in *tmp, its name (malloc'd; cli_tmp_finish frees it), or -1 with
 * errno set. */
static int tmp_open(const char *path, char **tmp)
{
    size_t n = strlen(path) + sizeof ".tfetch-XXXXXX", slot = 0;
    char *name;
    while (slot < TMP_SLOTS && tmp_live[slot])
        slot++;
    if (n > 4096 || slot == TMP_SLOTS) {
        errno = n > 4096 ? ENAMETOOLONG : EMFILE;
        return -1;
    }
    if (!(name = malloc(n)))
        return -1;
    snprintf(name, n, "%s.tfetch-XXXXXX", path);
    static int handlers;
    if (!handlers) {
        handlers = 1;
        signal(SIGINT, on_fatal_signal);
        signal(SIGTERM, on_fatal_signal);
        signal(SIGHUP, on_fatal_signal);
    }
    int fd = mkostemp(name, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        free(name);
        errno = e;
        return -1;
    }
    tmp_live[slot] = name;
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, 0666 & ~um);
    *tmp = name;
    return fd;
}

/* Renames the temporary file tmp over path when ok, else removes it; frees tmp. 0, or -1
 * with errno. */
static int tmp_finish(char *tmp, const char *path, int ok)
{
    int rc = 0;
    if (ok && rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        rc = -1;
    } else if (!ok) {
        unlink(tmp);
    }
    for (size_t i = 0; i < TMP_SLOTS; i++)
        if (tmp_live[i] == tmp)
            tmp_live[i] = NULL;
    int e = errno;
    free(tmp);
    errno = e;
    return rc;
}

/* Closes an output file fd opened for path (a temporary one tmp, renamed into place when
 * all went well, else removed; NULL: written in place) and returns rc, or EXIT_LOCAL when
 * the close or the rename failed. */
static int out_close(const char *path, int fd, char *tmp, int rc)
{
    if (close(fd) != 0 && rc == EXIT_OK) {
        cli_msg("cannot write %s: %s", path, strerror(errno));
        rc = EXIT_LOCAL;
    }
    if (tmp) {
        char shown[4096];
        snprintf(shown, sizeof shown, "%s", tmp);
        if (tmp_finish(tmp, path, rc == EXIT_OK) != 0 && rc == EXIT_OK) {
            cli_msg("cannot rename %s to %s: %s", shown, path, strerror(errno));
            rc = EXIT_LOCAL;
        }
    }
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
int cli_write_reply(const cli_opts_t *o, const char *what, const char *url,
                    const tf_doc_t *doc, const char *path)
{
    int to_stdout = !path || strcmp(path, "-") == 0;
    int rc = EXIT_OK;

    if (o->raw && tf_doc_count(doc) != 1) {
        cli_msg("%s %s: --raw needs a one-tensor document, this one has %zu", what, url,
                tf_doc_count(doc));
        return EXIT_USAGE;
    }
    if (!path && isatty(STDOUT_FILENO)) {
        cli_msg("%s %s: not writing %s to a terminal: give a FILE, --dir DIR, or '-' to insist",
                what, url, o->raw ? "raw tensor bytes" : "a binary safetensors document");
        return EXIT_USAGE;
    }
    /* A regular file (or a new one) is written to a temporary file beside it, renamed over
     * it once complete: an interrupted get leaves an existing file as it was. Anything else
     * (/dev/null, a FIFO, a terminal) is written in place: renaming over it would replace
     * the device. */
    int fd = STDOUT_FILENO, direct = 0;
    char *tmp = NULL;
    struct stat st;
    if (!to_stdout && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        direct = 1;
    if (!to_stdout && (fd = direct ? open(path, O_WRONLY | O_TRUNC | O_CLOEXEC)
                                   : tmp_open(path, &tmp)) < 0) {
        cli_msg("cannot create %s: %s", path, strerror(errno));
        return EXIT_LOCAL;
    }
    int wrc;
    if (o->raw) {
        const tf_tensor_t *t = tf_doc_at(doc, 0);
        wrc = write_all(fd, t->data, t->nbytes);
        if (!o->quiet) {
            char shape[256];
            format_shape(t, shape, sizeof(shape));
            cli_bar_end();
            fprintf(stderr, "name=%s dtype=%s shape=%s\n", t->name, tf_dtype_name(t->dtype),
                    shape);
        }
    } else {
        wrc = write_doc(fd, doc);
    }
    if (wrc != 0) {
        cli_msg("cannot write %s: %s", to_stdout ? "stdout" : path, strerror(errno));
        rc = EXIT_LOCAL;
    }
    if (!to_stdout)
        rc = out_close(path, fd, direct ? NULL : tmp, rc);
    return rc;
}

/* Builds the one-tensor document of a raw input from --dtype and --shape. */
static int raw_doc(const cli_opts_t *o, const char *url, const cli_input_t *in,
                   tf_doc_t **out)
{
    tf_dtype_t dt;
    int rank = 0;
    int64_t shape[TF_MAX_RANK];
    char name[256];

    if (tf_dtype_from_name(o->dtype, &dt) != TF_OK)
        return cli_usage_error("unknown dtype '%s'", o->dtype);
    if (cli_parse_shape(o->shape, &rank, shape) != 0)
        return cli_usage_error("bad shape '%s' (expected e.g. 2,3)", o->shape);
    cli_last_segment(url, name, sizeof(name));
    if (!name[0])
        return cli_usage_error("cannot name the tensor: %s has no last path segment", url);
    uint64_t want = tf_dtype_bits(dt);      /* bits, then bytes: F4 packs two per byte */
    for (int k = 0; k < rank; k++) {
        if (shape[k] != 0 && want > UINT64_MAX / (uint64_t)shape[k])
            return cli_usage_error("shape '%s' is too large", o->shape);
        want *= (uint64_t)shape[k];
    }
    if (want % 8 != 0)
        return cli_usage_error("%s [%s] does not fill whole bytes", o->dtype, o->shape);
    want /= 8;
    if (want != in->len) {
        cli_msg("input is %zu bytes but %s [%s] needs %" PRIu64, in->len, o->dtype, o->shape,
                want);
        return EXIT_USAGE;
    }
    tf_doc_t *doc = tf_doc_new();
    if (!doc) {
        cli_msg("out of memory");
        return EXIT_LOCAL;
    }
    tf_status_t st = tf_doc_add(doc, name, dt, rank, shape, in->data, in->len, TF_BORROW);
    if (st != TF_OK) {
        tf_doc_free(doc);
        cli_msg("cannot make a tensor named '%s': %s", name, tf_strerror(st));
        return st == TF_ENOMEM ? EXIT_LOCAL : EXIT_USAGE;
    }
    *out = doc;
    return EXIT_OK;
}

/* Reports data (len bytes, from shown) that tf_doc_decode_msg refused with st and why;
 * returns the exit code. */
static int not_a_doc(const char *shown, const void *data, size_t len, tf_status_t st,
                     const char *why)
{
    /* A document starts with an 8-byte header length and then '{'; anything else is most
     * likely a raw tensor given without its description. */
    const unsigned char *b = data;
    uint64_t hl = 0;
    for (int i = 7; len >= 8 && i >= 0; i--)
        hl = hl << 8 | b[i];
    int doc_like = len > 8 && hl <= len - 8 && b[8] == '{';
    cli_msg("%s is not a valid safetensors document: %s (%s)%s", shown,
            why[0] ? why : tf_strerror(st), tf_err_name(st),
            doc_like ? "" : "; if it holds one raw tensor, give --dtype and --shape");
    return st == TF_ENOMEM ? EXIT_LOCAL : EXIT_USAGE;
}

/* Reads path (stdin for NULL or "-") into in and makes the document to send: the file
 * itself (safetensors, borrowed) or, with --dtype, one raw tensor. */
int cli_load_doc(const cli_opts_t *o, const char *url, const char *path, cli_input_t *in,
                 tf_doc_t **doc)
{
    const char *shown = path && strcmp(path, "-") ? path : "stdin";
    int rc;

    if (cli_input_load(path, in) != 0) {
        cli_msg("cannot read %s: %s", shown, strerror(errno));
        return EXIT_LOCAL;
    }
    if (o->dtype) {
        if ((rc = raw_doc(o, url, in, doc)) != EXIT_OK)
            cli_input_release(in);
        return rc;
    }
    char why[256];
    tf_status_t st = tf_doc_decode_msg(in->data, in->len, TF_BORROW, doc, why, sizeof why);
    if (st != TF_OK) {
        rc = not_a_doc(shown, in->data, in->len, st, why);
        cli_input_release(in);
        return rc;
    }
    return EXIT_OK;
}

/* ---- big documents: replies streamed to their file, bodies sent from theirs -------------- */

int cli_sink_wanted(const cli_opts_t *o, const char *path)
{
    return path && strcmp(path, "-") != 0 && !o->raw &&
           !(o->format && strcmp(o->format, "shumai") == 0);
}

int cli_sink_open(const char *path, cli_sink_t *s)
{
    struct stat st;
    s->tmp = NULL;
    s->direct = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
    s->fd = s->direct ? open(path, O_WRONLY | O_TRUNC | O_CLOEXEC) : tmp_open(path, &s->tmp);
    if (s->fd < 0) {
        cli_msg("cannot create %s: %s", path, strerror(errno));
        return EXIT_LOCAL;
    }
    return EXIT_OK;
}

/* The streamed reply in the temporary file fd is a safetensors document, as the library
 * checks one it holds in memory: mapped read-only, only its header read. */
static int check_reply(const char *what, const char *url, int fd)
{
    struct stat st;
    char why[256] = "";
    tf_doc_t *doc = NULL;
    if (fstat(fd, &st) != 0) {
        cli_msg("%s %s: cannot check the reply: %s", what, url, strerror(errno));
        return EXIT_LOCAL;
    }
    size_t len = (size_t)st.st_size;
    void *p = len ? mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0) : NULL;
    if (p == MAP_FAILED) {
        cli_msg("%s %s: cannot check the reply: %s", what, url, strerror(errno));
        return EXIT_LOCAL;
    }
    tf_status_t rc = p ? tf_doc_decode_msg(p, len, TF_BORROW, &doc, why, sizeof why)
                       : TF_EPROTO;
    tf_doc_free(doc);
    if (p)
        munmap(p, len);
    if (rc == TF_OK)
        return EXIT_OK;
    cli_msg("%s %s: bad safetensors response: %s (%s)", what, url,
            why[0] ? why : p ? tf_strerror(rc) : "empty response body", tf_err_name(rc));
    return rc == TF_ENOMEM ? EXIT_LOCAL : EXIT_SERVER;
}

int cli_sink_close(const char *what, const char *url, const char *path, cli_sink_t *s, int rc)
{
    if (s->fd < 0)
        return rc;
    if (rc == EXIT_OK && !s->direct)
        rc = check_reply(what, url, s->fd);
    rc = out_close(path, s->fd, s->tmp, rc);
    s->fd = -1;
    s->tmp = NULL;
    return rc;
}

int cli_body_open(const cli_opts_t *o, const char *path, int *out)
{
    struct stat st;
    char why[256] = "";
    tf_doc_t *doc = NULL;
    if (o->dtype || !path || strcmp(path, "-") == 0)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        cli_msg("cannot read %s: %s", path, strerror(errno));
        return EXIT_LOCAL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        close(fd);
        return -1;                      /* read as a stream (or found empty) by load_doc */
    }
    /* Checked here as load_doc would, through a mapping that reads only the header. */
    size_t len = (size_t)st.st_size;
    void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return -1;
    }
    tf_status_t rc = tf_doc_decode_msg(p, len, TF_BORROW, &doc, why, sizeof why);
    tf_doc_free(doc);
    int exit_rc = rc == TF_OK ? EXIT_OK : not_a_doc(path, p, len, rc, why);
    munmap(p, len);
    if (exit_rc != EXIT_OK) {
        close(fd);
        return exit_rc;
    }
    *out = fd;
    return EXIT_OK;
}

/* ---- raw bytes out (get --range) ---------------------------------------------------------- */

int cli_write_bytes(const char *what, const char *url, const void *buf, size_t len,
                    const char *path)
{
    int to_stdout = !path || strcmp(path, "-") == 0;
    int rc = EXIT_OK, fd = STDOUT_FILENO, direct = 0;
    char *tmp = NULL;
    struct stat st;

    if (!path && isatty(STDOUT_FILENO)) {
        cli_msg("%s %s: not writing bytes to a terminal: give a FILE, or '-' to insist", what,
                url);
        return EXIT_USAGE;
    }
    if (!to_stdout && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        direct = 1;                     /* a device or FIFO: in place, as cli_write_reply */
    if (!to_stdout && (fd = direct ? open(path, O_WRONLY | O_TRUNC | O_CLOEXEC)
                                   : tmp_open(path, &tmp)) < 0) {
        cli_msg("cannot create %s: %s", path, strerror(errno));
        return EXIT_LOCAL;
    }
    if (write_all(fd, buf, len) != 0) {
        cli_msg("cannot write %s: %s", to_stdout ? "stdout" : path, strerror(errno));
        rc = EXIT_LOCAL;
    }
    if (!to_stdout)
        rc = out_close(path, fd, direct ? NULL : tmp, rc);
    if (to_stdout && fflush(stdout) != 0 && rc == EXIT_OK)
        rc = EXIT_LOCAL;
    return rc;
}
