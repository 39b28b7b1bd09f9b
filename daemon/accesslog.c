/* accesslog.c - one JSON line per request (see accesslog.h). Lines are built with proto's
 * JSON writer, so names and ids are escaped like every other JSON tfetchd emits. */
#include "config.h"
#include "daemon/accesslog.h"
#include "proto/jsonw.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct tfd_access_log {
    pthread_mutex_t lock;           /* guards fd against reopen */
    int fd;
    char *path;                     /* NULL: stderr */
    atomic_int on;                  /* fd >= 0, readable without the lock: the per-request
                                     * check of a log that is off costs no mutex */
};

static int open_path(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
}

/* Opens spec into (*fd, *path): -1 / NULL for off; stderr; or the file. 0, or -1 with
 * *err set. */
static int open_spec(const char *spec, int *fd, char **path, const char **err)
{
    *fd = -1;
    *path = NULL;
    if (!spec || !*spec || strcmp(spec, "off") == 0)
        return 0;
    if (strcmp(spec, "stderr") == 0) {
        *fd = STDERR_FILENO;
        return 0;
    }
    if (!(*path = strdup(spec)) || (*fd = open_path(spec)) < 0) {
        *err = strerror(*path ? errno : ENOMEM);
        free(*path);
        *path = NULL;
        *fd = -1;
        return -1;
    }
    return 0;
}

tfd_access_log_t *tfd_access_log_open(const char *spec, const char **err)
{
    tfd_access_log_t *l = calloc(1, sizeof *l);
    if (!l) {
        *err = strerror(ENOMEM);
        return NULL;
    }
    if (open_spec(spec, &l->fd, &l->path, err) != 0) {
        free(l);
        return NULL;
    }
    atomic_init(&l->on, l->fd >= 0);
    pthread_mutex_init(&l->lock, NULL);
    return l;
}

int tfd_access_log_set(tfd_access_log_t *l, const char *spec, const char **err)
{
    int fd, old_fd;
    char *path, *old_path;
    if (open_spec(spec, &fd, &path, err) != 0)
        return -1;
    pthread_mutex_lock(&l->lock);
    old_fd = l->fd;
    old_path = l->path;
    l->fd = fd;
    l->path = path;
    atomic_store(&l->on, fd >= 0);
    pthread_mutex_unlock(&l->lock);
    if (old_path)
        close(old_fd);
    free(old_path);
    return 0;
}

void tfd_access_log_free(tfd_access_log_t *l)
{
    if (!l)
        return;
    if (l->path)
        close(l->fd);
    free(l->path);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

int tfd_access_log_reopen(tfd_access_log_t *l)
{
    pthread_mutex_lock(&l->lock);
    char *path = l->path ? strdup(l->path) : NULL;
    pthread_mutex_unlock(&l->lock);
    if (!path)
        return 0;
    int fd = open_path(path);
    free(path);
    if (fd < 0)
        return -1;
    pthread_mutex_lock(&l->lock);
    int old = l->fd;
    l->fd = fd;
    pthread_mutex_unlock(&l->lock);
    close(old);
    return 0;
}

static void kv_str(tfp_jw_t *w, const char *k, const char *v)
{
    tfp_jw_key(w, k);
    if (v && *v)
        tfp_jw_str(w, v);
    else
        tfp_jw_null(w);
}

char *tfd_access_log_render(const tfd_access_t *a, uint64_t unix_ms)
{
    char ts[40];
    time_t secs = (time_t)(unix_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t k = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + k, sizeof ts - k, ".%03uZ", (unsigned)(unix_ms % 1000));

    tfp_jw_t w;
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    kv_str(&w, "ts", ts);
    kv_str(&w, "client", a->client);
    kv_str(&w, "transport", a->transport);
    kv_str(&w, "op", a->op);
    kv_str(&w, "name", a->name);
    kv_str(&w, "user", a->user);
    if (a->principal && *a->principal)
        kv_str(&w, "principal", a->principal);
    kv_str(&w, "request_id", a->request_id);
    tfp_jw_key(&w, "status");
    tfp_jw_uint(&w, a->status);
    kv_str(&w, "code", a->code);
    tfp_jw_key(&w, "bytes_in");
    tfp_jw_uint(&w, a->bytes_in);
    tfp_jw_key(&w, "bytes_out");
    tfp_jw_uint(&w, a->bytes_out);
    tfp_jw_key(&w, "seconds");
    char s[32];
    snprintf(s, sizeof s, "%.6f", a->seconds);
    tfp_jw_raw(&w, s, strlen(s));
    tfp_jw_key(&w, "completed");
    tfp_jw_bool(&w, a->completed);
    tfp_jw_obj_end(&w);
    size_t len;
    return tfp_jw_finish(&w, &len);
}

int tfd_access_log_on(tfd_access_log_t *l)
{
    return atomic_load(&l->on);
}

void tfd_access_log_write(tfd_access_log_t *l, const tfd_access_t *a)
{
    if (!l || !tfd_access_log_on(l))
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char *line = tfd_access_log_render(a, (uint64_t)now.tv_sec * 1000u +
                                              (uint64_t)now.tv_nsec / 1000000u);
    if (!line)
        return;
    /* stderr lines carry the journal's priority prefix, as every other line there does. */
    size_t n = strlen(line);
    char *out = malloc(n + 5);
    if (out) {
        size_t off = 0;
        pthread_mutex_lock(&l->lock);
        if (!l->path) {
            memcpy(out, "<6>", 3);
            off = 3;
        }
        memcpy(out + off, line, n);
        out[off + n] = '\n';
        ssize_t wr = l->fd >= 0 ? write(l->fd, out, off + n + 1) : 0;
        pthread_mutex_unlock(&l->lock);
        (void)wr;                   /* a full disk must not fail the request */
        free(out);
    }
    free(line);
}
