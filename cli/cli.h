/* cli.h - what the files of the tfetch command share: its options, exit codes and the
 * functions one file offers the others.
 *
 * The tool is a client of libtfetch's public API only (client/tfetch.h), as curl's src/ is
 * of lib/: cli/ includes nothing else of the project. main.c dispatches, config.c reads the
 * options and sets the client up, commands.c runs get, put, call, rm, ls and info,
 * feeds.c the feed subcommands, files.c the local files and the progress bar.
 * Single-threaded.
 */
#ifndef TFETCH_CLI_H
#define TFETCH_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "client/tfetch.h"

/* Exit codes are part of the interface (see the usage text and tfetch(1)). */
enum {
    EXIT_OK = 0,
    EXIT_USAGE = 1,
    EXIT_NOTFOUND = 2,
    EXIT_REJECTED = 3,
    EXIT_SERVER = 4,
    EXIT_TRANSFER = 5,
    EXIT_LOCAL = 6,
    EXIT_NOTMODIFIED = 7,           /* get --wait-newer: no newer version came */
};

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
    int explain;                    /* --explain */
    int quiet;
    const char *device;             /* feed push, pop */
    uint64_t seq;                   /* feed push */
    uint64_t after;                 /* feed outfeed */
    const char *consumer;           /* feed pop */
    const char *after_name;         /* --after as given: ls's name, feed outfeed's number */
    int after_bad;                  /* --after is not a number (fine for ls only) */
    uint64_t ttl_s;                 /* put --ttl (0: none) */
    const char *if_match;           /* put, rm, get --if-match ETAG */
    int if_none_match;              /* put --if-none-match: create-only */
    const char *wait_newer;         /* get --wait-newer ETAG */
    int range;                      /* get --range A-B */
    uint64_t range_first, range_len;    /* its bytes (range_len 0: to the end) */
    const char *prefix;             /* ls --prefix */
    uint64_t limit;                 /* ls --limit (0: all) */
} cli_opts_t;

/* get, put, call and rm: the commands run as a batch of requests. */
typedef enum { CMD_GET, CMD_PUT, CMD_CALL, CMD_RM } cli_cmd_t;

/* An input file, read whole: mapped, or in memory of ours. */
typedef struct {
    void *data;
    size_t len;
    int mapped;
} cli_input_t;

/* ---- main.c: dispatch, usage, messages ----------------------------------------------------- */
extern const char cli_usage_text[];
/* "tfetch: ..." on stderr (ending a drawn progress bar first). */
void cli_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same, then the pointer to --help; returns EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_json_str(FILE *f, const char *s);
void cli_print_stats(const tf_result_t *r);
/* explain.c: --explain's paragraph on stderr for r, a request to url (NULL: unknown). */
void cli_print_explain(tf_client_t *c, const char *url, const tf_result_t *r);
/* Reports a failed request (once) and returns its exit code. */
int cli_request_failed(const tf_result_t *r, const char *what, const char *url,
                       tf_status_t st);
int cli_is(const char *cmd, const char *name);

/* ---- config.c: options, the client's settings, names instead of URLs ----------------------- */
int cli_parse_options(int argc, char **argv, cli_opts_t *o);
int cli_parse_ms(const char *s, long *out);
int cli_parse_shape(const char *s, int *rank, int64_t shape[TF_MAX_RANK]);
int cli_configure(tf_client_t *c, const cli_opts_t *o, int one_request);
int cli_resolve_urls(const char *cmd, char **args, int *nargs, const cli_opts_t *o,
                     char **owned, int *nowned);

/* ---- files.c: local files, documents in and out, the progress bar -------------------------- */
void cli_bar_end(void);
void cli_progress_attach(tf_client_t *c);
int cli_input_load(const char *path, cli_input_t *in);
void cli_input_release(cli_input_t *in);
void cli_last_segment(const char *url, char *buf, size_t size);
int cli_write_reply(const cli_opts_t *o, const char *what, const char *url,
                    const tf_doc_t *doc, const char *path);
int cli_load_doc(const cli_opts_t *o, const char *url, const char *path, cli_input_t *in,
                 tf_doc_t **doc);
/* Writes len bytes to path (stdout when NULL or "-") as cli_write_reply writes a reply:
 * through a temporary file renamed once complete, never to a terminal unless asked. */
int cli_write_bytes(const char *what, const char *url, const void *buf, size_t len,
                    const char *path);

/* A reply streamed to its file: a temporary file beside it (renamed once complete and
 * checked), or the file itself when it is not a regular one (/dev/null, a FIFO). */
typedef struct {
    int fd;                         /* -1: none */
    char *tmp;                      /* the temporary file's name, or NULL */
    int direct;
} cli_sink_t;
/* 1 if a get's reply to path streams there (a FILE or --dir, not stdout, --raw or shumai). */
int cli_sink_wanted(const cli_opts_t *o, const char *path);
/* Opens where a streamed reply goes; EXIT_OK, or an exit code (reported). */
int cli_sink_open(const char *path, cli_sink_t *s);
/* Ends a streamed reply: checked and renamed over path when rc is EXIT_OK, else removed.
 * Returns rc, or why it could not be kept. */
int cli_sink_close(const char *what, const char *url, const char *path, cli_sink_t *s,
                   int rc);
/* A put's input to be sent from its file (a non-empty regular file, not --dtype), checked
 * as a safetensors document: EXIT_OK and *fd; -1 when it must be read instead (load_doc);
 * or an exit code (reported). */
int cli_body_open(const cli_opts_t *o, const char *path, int *fd);

/* ---- commands.c: get, put, call, rm, ls, info ---------------------------------------------- */
int cli_cmd_batch(tf_client_t *c, const cli_opts_t *o, cli_cmd_t cmd, char **args, int nargs);
int cli_cmd_ls(tf_client_t *c, const cli_opts_t *o, const char *base);
int cli_cmd_info(tf_client_t *c, const char *base);
/* Prints a JSON text reply on stdout, newline-terminated; frees it. */
int cli_print_json(char *json);

/* ---- feeds.c: feed declare, push, pop, outfeed, done, stats -------------------------------- */
int cli_cmd_feed(tf_client_t *c, const cli_opts_t *o, char **args, int nargs);
int cli_check_feed(char **args, int nargs, const cli_opts_t *o);

#endif
