/* accesslog.h - tfetchd's access log: one JSON line per finished request (RFC 8259 text, one
 * object per line, as log shippers and jq read it).
 *
 * Off by default; SIGHUP may point it elsewhere (tfd_access_log_set). "stderr" writes the lines there (under systemd that is the journal, each
 * line at priority info); a path appends to that file, reopened by tfd_access_log_reopen
 * (SIGHUP) so logrotate can move it away. Owns the file. Thread-safe: every request thread
 * writes whole lines (one write(2) each on an O_APPEND descriptor); reopen swaps under a lock.
 */
#ifndef TFD_ACCESSLOG_H
#define TFD_ACCESSLOG_H

#include <stdint.h>

typedef struct tfd_access_log tfd_access_log_t;

/* One finished request, as the log shows it. */
typedef struct {
    const char *client;             /* address; "" unknown */
    const char *transport;          /* "http", "ucx" */
    const char *op;                 /* "tensor_get", ... */
    const char *name;               /* tensor, route or worker; "" none */
    const char *user;               /* "" none */
    const char *principal;          /* the token's (auth-tokens); NULL or "": not written */
    const char *request_id;
    unsigned status;                /* HTTP status (UCX: the status its reply carries) */
    const char *code;               /* "TF_ENOTFOUND"; NULL on success */
    uint64_t bytes_in, bytes_out;
    double seconds;
    int completed;                  /* 0: the client went away before the answer was sent */
} tfd_access_t;

/* spec: NULL, "" or "off": none (a log that writes nothing until tfd_access_log_set);
 * "stderr"; or a file path. NULL with *err set (errno text) when the file cannot be opened. */
tfd_access_log_t *tfd_access_log_open(const char *spec, const char **err);
/* Points the log elsewhere (SIGHUP with a new access-log): the same specs as open. 0, or -1
 * with *err set and the old target kept. */
int tfd_access_log_set(tfd_access_log_t *l, const char *spec, const char **err);
/* 1 when lines are written somewhere. */
int tfd_access_log_on(tfd_access_log_t *l);
void tfd_access_log_free(tfd_access_log_t *l);      /* NULL is a no-op */
/* Reopens the file (after a rotation); stderr is left as it is. 0, or -1 (the old file is
 * kept). */
int tfd_access_log_reopen(tfd_access_log_t *l);
/* Writes one line. NULL l is a no-op. */
void tfd_access_log_write(tfd_access_log_t *l, const tfd_access_t *a);
/* Renders the line (without the newline) into a malloc'd string, for tests; NULL on OOM. */
char *tfd_access_log_render(const tfd_access_t *a, uint64_t unix_ms);

#endif
