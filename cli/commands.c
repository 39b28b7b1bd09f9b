/* commands.c - the tfetch command's get, put, call and rm, and its ls and info.
 *
 * get, put, call and rm run as a batch of jobs over the asynchronous API: up to --parallel
 * requests in flight, each job's input file mapped (or read) when it starts and released
 * when it completes, each reply written out by its callback, the next job started from
 * there. ls and info are single blocking calls. Single-threaded.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

/* ---- get, put, call and rm: a batch of requests in flight ---------------------------------- */

/* get --wait-newer without --wait: how long the server is asked to wait for a newer version
 * (it caps it at its max-wait). */
#define WAIT_NEWER_MS 60000L

typedef struct batch batch_t;

typedef struct {
    batch_t *b;
    const char *url;
    const char *in_path;            /* put, call: the input (NULL or "-": stdin) */
    char *out_path;                 /* get, call: the output (NULL: stdout; "-": stdout, asked) */
    cli_input_t in;
    tf_doc_t *doc;                  /* what is sent, while in flight */
    int body_fd;                    /* put: the file sent from where it is, or -1 */
    cli_sink_t sink;                /* get: the file its reply streams to (fd -1: none) */
    tf_result_t result;
    int has_result;                 /* a request was made (or refused by the library) */
    int rc;
} job_t;

struct batch {
    tf_client_t *c;
    const cli_opts_t *o;
    cli_cmd_t cmd;
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
        cli_input_release(&j->in);
    memset(&j->in, 0, sizeof(j->in));
    if (j->body_fd >= 0)
        close(j->body_fd);
    j->body_fd = -1;
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
        cli_bar_end();
    if (st != TF_OK) {
        j->rc = cli_request_failed(r, what, j->url, st);
        cli_sink_close(what, j->url, j->out_path, &j->sink, j->rc);
    } else if (j->sink.fd >= 0) {
        j->rc = cli_sink_close(what, j->url, j->out_path, &j->sink, EXIT_OK);
    } else if (b->cmd == CMD_GET || b->cmd == CMD_CALL) {
        j->rc = cli_write_reply(b->o, what, j->url, doc, j->out_path);
    } else if (!b->o->quiet && b->cmd == CMD_PUT) {
        fprintf(stderr, "%s %s (%" PRIu64 " bytes%s%s)\n",
                r->http_status == 201 ? "created" : "stored", j->url, r->bytes_sent,
                r->etag[0] ? ", etag " : "", r->etag);
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
    const cli_opts_t *o = b->o;
    tf_request_t rq = TF_REQUEST_INIT;
    rq.op = ops[b->cmd];
    rq.url = j->url;
    /* The conditions (main.c checked which command takes which). */
    rq.if_match = o->if_match;
    rq.if_none_match = o->if_none_match ? "*" : o->wait_newer;
    rq.ttl_s = o->ttl_s;
    int fd = -1;

    /* Big documents: a put's file is sent from where it is and a get's reply streams to its
     * file, neither held whole here. */
    if (b->cmd == CMD_PUT &&
        (j->rc = cli_body_open(b->o, j->in_path, &j->body_fd)) != -1) {
        if (j->rc != EXIT_OK)
            return;
        fd = j->body_fd;
    } else if (b->cmd == CMD_PUT || b->cmd == CMD_CALL) {
        if ((j->rc = cli_load_doc(b->o, j->url, j->in_path, &j->in, &j->doc)) != EXIT_OK)
            return;
        rq.in = j->doc;
    }
    if (b->cmd == CMD_GET && cli_sink_wanted(b->o, j->out_path)) {
        if ((j->rc = cli_sink_open(j->out_path, &j->sink)) != EXIT_OK)
            return;
        fd = j->sink.fd;
    }
    j->rc = EXIT_OK;
    if (b->cmd == CMD_GET)
        rq.wait_ms = o->wait_newer && !o->wait_ms ? WAIT_NEWER_MS : o->wait_ms;
    tf_status_t st = fd >= 0 ? tf_fetch_start_fd(b->c, &rq, fd, job_done, j, NULL)
                             : tf_fetch_start(b->c, &rq, job_done, j, NULL);
    if (st != TF_OK) {
        j->result = *tf_client_last(b->c);
        j->has_result = 1;
        j->rc = cli_request_failed(&j->result, cmd_names[b->cmd], j->url, st);
        cli_sink_close(cmd_names[b->cmd], j->url, j->out_path, &j->sink, j->rc);
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
static int out_stem(cli_cmd_t cmd, const char *url, const char *in_path, char *stem, size_t size)
{
    if (cmd == CMD_GET) {
        cli_last_segment(url, stem, size);
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
    const cli_opts_t *o = b->o;
    char stem[256];

    if (mkdir(o->dir, 0777) != 0 && errno != EEXIST) {
        cli_msg("cannot create %s: %s", o->dir, strerror(errno));
        return EXIT_LOCAL;
    }
    char **names = malloc(b->njobs * sizeof(*names));
    if (!names) {
        cli_msg("out of memory");
        return EXIT_LOCAL;
    }
    for (size_t i = 0; i < b->njobs; i++) {
        job_t *j = &b->jobs[i];
        if (out_stem(b->cmd, j->url, j->in_path, stem, sizeof(stem)) != 0) {
            free(names);
            return cli_usage_error("cannot name the output of %s", j->url);
        }
        if (!(j->out_path = join_out(o->dir, stem, o->raw))) {
            free(names);
            cli_msg("out of memory");
            return EXIT_LOCAL;
        }
        names[i] = j->out_path;
    }
    qsort(names, b->njobs, sizeof(*names), cmp_str);
    for (size_t i = 1; i < b->njobs; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            int rc = cli_usage_error("two replies would both be written to %s", names[i]);
            free(names);
            return rc;
        }
    }
    free(names);
    return EXIT_OK;
}

/* get --range: bytes of one stored document, written as they came. */
static int get_range(tf_client_t *c, const cli_opts_t *o, char **args, int nargs)
{
    void *buf = NULL;
    size_t len = 0;
    uint64_t total = 0;
    tf_status_t st = tf_get_range(c, args[0], o->range_first, o->range_len, &buf, &len, &total);
    if (o->stats)
        cli_print_stats(tf_client_last(c));
    if (o->explain)
        cli_print_explain(c, args[0], tf_client_last(c));
    if (st != TF_OK) {
        int rc = cli_request_failed(tf_client_last(c), "get", args[0], st);
        if (st == TF_ERANGE && total)
            cli_msg("get %s: the document has %" PRIu64 " bytes", args[0], total);
        return rc;
    }
    int rc = cli_write_bytes("get", args[0], buf, len, nargs > 1 ? args[1] : NULL);
    tf_free(buf);
    return rc;
}

/* Runs get, put, call or rm over its arguments: URLs, or URL FILE pairs. */
int cli_cmd_batch(tf_client_t *c, const cli_opts_t *o, cli_cmd_t cmd, char **args, int nargs)
{
    if (cmd == CMD_GET && o->range)
        return get_range(c, o, args, nargs);
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
        cli_msg("out of memory");
        return EXIT_LOCAL;
    }
    for (size_t i = 0; i < n; i++) {
        job_t *j = &b.jobs[i];
        j->b = &b;
        j->body_fd = j->sink.fd = -1;
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
    cli_bar_end();

    for (size_t i = 0; i < n; i++) {
        if (o->stats && b.jobs[i].has_result)
            cli_print_stats(&b.jobs[i].result);
        if (o->explain && b.jobs[i].has_result)
            cli_print_explain(c, b.jobs[i].url, &b.jobs[i].result);
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

int cli_cmd_ls(tf_client_t *c, const cli_opts_t *o, const char *base)
{
    tf_entry_t *e = NULL;
    size_t n = 0;
    char *next = NULL;
    tf_list_opts_t lo = TF_LIST_OPTS_INIT;
    lo.prefix = o->prefix;
    lo.after = o->after_name;
    lo.limit = o->limit;

    tf_status_t st = tf_list_page(c, base, &lo, &e, &n, &next);
    if (st != TF_OK)
        return cli_request_failed(tf_client_last(c), "ls", base, st);
    if (o->json) {
        fputs("{\"tensors\":[", stdout);
        for (size_t i = 0; i < n; i++) {
            fputs(i ? ",{\"name\":" : "{\"name\":", stdout);
            cli_json_str(stdout, e[i].name);
            printf(",\"bytes\":%" PRIu64 ",\"ntensors\":%zu}", e[i].bytes, e[i].ntensors);
        }
        fputs("]", stdout);
        if (next) {                         /* the page's end: where the next one starts */
            fputs(",\"next\":", stdout);
            cli_json_str(stdout, next);
        }
        fputs("}\n", stdout);
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
        if (next && !o->quiet)              /* on stderr: stdout stays the listing */
            cli_msg("more names follow: the next page is ls%s%s --limit %" PRIu64
                    " --after %s", o->prefix ? " --prefix " : "", o->prefix ? o->prefix : "",
                    o->limit, next);
    }
    tf_free(next);
    tf_list_free(e, n);
    if (fflush(stdout) != 0) {
        cli_msg("cannot write stdout: %s", strerror(errno));
        return EXIT_LOCAL;
    }
    return EXIT_OK;
}

/* Prints a JSON text reply on stdout, newline-terminated; frees it. */
int cli_print_json(char *json)
{
    size_t n = strlen(json);
    fputs(json, stdout);
    if (n == 0 || json[n - 1] != '\n')
        fputc('\n', stdout);
    tf_free(json);
    if (fflush(stdout) != 0) {
        cli_msg("cannot write stdout: %s", strerror(errno));
        return EXIT_LOCAL;
    }
    return EXIT_OK;
}

int cli_cmd_info(tf_client_t *c, const char *base)
{
    char *json = NULL;
    tf_status_t st = tf_info(c, base, &json);
    if (st != TF_OK)
        return cli_request_failed(tf_client_last(c), "info", base, st);
    return cli_print_json(json);
}
