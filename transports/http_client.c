/* http_client.c - the HTTP client engine over libcurl's multi interface.
 *
 * Owns one CURLM per engine (its connection and DNS caches give keep-alive reuse per origin;
 * HTTP/1.1 has no usable pipelining, so concurrency is several connections per origin, capped
 * by CURLMOPT_MAX_HOST_CONNECTIONS, with the requests beyond the cap queued inside libcurl)
 * and, per request, one CURL easy handle that is reset and reused when the request is started
 * again. Request bodies stream from the caller's borrowed segments through a read callback;
 * response bodies land in one buffer allocated from Content-Length (grown geometrically only
 * when the length is unknown). All callbacks, libcurl's and ours, run on the thread that calls
 * tfx_hc_poll / tfx_hc_drive / tfx_hc_cancel; an engine is used by one thread at a time.
 * libcurl's global initialisation is done once per process, guarded by pthread_once.
 */
#include "config.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "transports/http_client.h"
#include "transports/buf.h"
#include "transports/clock.h"

#define CONNECT_TIMEOUT_MS 10000L
#define DOWNLOAD_BUFFER (512L * 1024)
#define UPLOAD_BUFFER (2L * 1024 * 1024)
#define UNKNOWN_LENGTH_START (64u * 1024)
#define POLL_SLICE_MS 1000L

typedef struct {
    const uint8_t *ptr;
    size_t len;
    int fd;                         /* >= 0: the bytes are read from fd at off, not ptr */
    uint64_t off;
} seg_t;

struct tfx_hc_req {
    /* what to send */
    char *method;
    char *url;
    struct curl_slist *headers;
    seg_t *segs;
    size_t nsegs, capsegs;
    int has_body;
    int expect_off;                 /* "Expect:" already appended to headers */
    uint64_t body_total;
    long timeout_ms;
    size_t max_body;
    long low_speed, low_speed_s;    /* CURLOPT_LOW_SPEED_LIMIT, _TIME; 0: none */
    tfx_hc_progress_fn progress;
    void *progress_ud;
    int sink_fd;                    /* >= 0: a 2xx body is written here, not kept */
    const char *sink_type;          /* ... when its Content-Type starts so (NULL: any) */
    int sinking;                    /* this response's body goes to sink_fd */

    /* upload cursor */
    size_t seg_i;
    size_t seg_off;

    /* while running */
    CURL *easy;                     /* kept across starts for reuse */
    tfx_hc_t *hc;
    int running;
    tfx_hc_done_fn done;
    void *done_ud;
    tfx_hc_req_t *prev, *next;         /* the engine's running list */
    uint64_t t0_ns;                 /* tfx_now_ns() at the start */
    tfx_hc_status_t write_err;         /* why the write callback refused data */
    char why[160];                  /* ... in words; "" for libcurl's own text */

    /* what came back */
    tfx_hc_resp_t resp;
    char *hbuf;                     /* resp.headers: "name\0value\0" pairs, hlen bytes */
    size_t hlen, hcap;
    size_t body_cap;
    char errbuf[CURL_ERROR_SIZE];
};

struct tfx_hc {
    CURLM *multi;
    tfx_hc_req_t *running;             /* doubly linked list of started requests */
    int nrunning;
    char *ca_file;                     /* CURLOPT_CAINFO; NULL: libcurl's default store */
    char *cert_file, *key_file;        /* CURLOPT_SSLCERT, CURLOPT_SSLKEY; NULL: none */
};

/* ---- libcurl global init ----------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int ensure_curl(void)
{
    pthread_once(&curl_once, curl_init);
    return curl_init_rc == CURLE_OK ? 0 : -1;
}

/* ---- requests --------------------------------------------------------------------------- */

tfx_hc_status_t tfx_hc_req_new(tfx_hc_req_t **out)
{
    if (!out)
        return TFX_HC_EINVAL;
    tfx_hc_req_t *req = calloc(1, sizeof(*req));
    if (!req)
        return TFX_HC_ENOMEM;
    req->sink_fd = -1;
    *out = req;
    return TFX_HC_OK;
}

static void clear_response(tfx_hc_req_t *req)
{
    free(req->resp.body);
    memset(&req->resp, 0, sizeof(req->resp));
    req->hlen = 0;
    req->body_cap = 0;
    req->errbuf[0] = '\0';
    req->why[0] = '\0';
    req->write_err = TFX_HC_OK;
    req->sinking = 0;
}

void tfx_hc_req_reset(tfx_hc_req_t *req)
{
    if (!req || req->running)
        return;
    free(req->method);
    req->method = NULL;
    free(req->url);
    req->url = NULL;
    curl_slist_free_all(req->headers);
    req->headers = NULL;
    req->expect_off = 0;
    req->nsegs = 0;
    req->has_body = 0;
    req->body_total = 0;
    req->timeout_ms = 0;
    req->max_body = 0;
    req->low_speed = req->low_speed_s = 0;
    req->progress = NULL;
    req->progress_ud = NULL;
    req->sink_fd = -1;
    clear_response(req);
}

void tfx_hc_req_free(tfx_hc_req_t *req)
{
    if (!req)
        return;
    if (req->running)
        tfx_hc_cancel(req->hc, req);
    tfx_hc_req_reset(req);
    free(req->segs);
    free(req->hbuf);
    if (req->easy)
        curl_easy_cleanup(req->easy);
    free(req);
}

static tfx_hc_status_t replace_string(char **dst, const char *src)
{
    char *s = strdup(src);
    if (!s)
        return TFX_HC_ENOMEM;
    free(*dst);
    *dst = s;
    return TFX_HC_OK;
}

tfx_hc_status_t tfx_hc_req_set_method(tfx_hc_req_t *req, const char *method)
{
    if (!req || !method || !*method || req->running)
        return TFX_HC_EINVAL;
    return replace_string(&req->method, method);
}

tfx_hc_status_t tfx_hc_req_set_url(tfx_hc_req_t *req, const char *url)
{
    if (!req || !url || req->running)
        return TFX_HC_EINVAL;
    return replace_string(&req->url, url);
}

tfx_hc_status_t tfx_hc_req_add_header(tfx_hc_req_t *req, const char *name, const char *value)
{
    if (!req || !name || !value || req->running)
        return TFX_HC_EINVAL;
    if (strpbrk(name, ":\r\n") || strpbrk(value, "\r\n"))
        return TFX_HC_EINVAL;
    size_t n = strlen(name) + strlen(value) + 3;
    char *line = malloc(n);
    if (!line)
        return TFX_HC_ENOMEM;
    /* "Name:" with nothing after it would tell libcurl to drop the header; "Name;" sends it
     * empty. */
    if (*value)
        snprintf(line, n, "%s: %s", name, value);
    else
        snprintf(line, n, "%s;", name);
    struct curl_slist *l = curl_slist_append(req->headers, line);
    free(line);
    if (!l)
        return TFX_HC_ENOMEM;
    req->headers = l;
    return TFX_HC_OK;
}

static tfx_hc_status_t add_seg(tfx_hc_req_t *req, const void *ptr, size_t len, int fd,
                               uint64_t off)
{
    if (req->nsegs == req->capsegs) {
        size_t cap = req->capsegs ? req->capsegs * 2 : 8;
        seg_t *s = realloc(req->segs, cap * sizeof(*s));
        if (!s)
            return TFX_HC_ENOMEM;
        req->segs = s;
        req->capsegs = cap;
    }
    req->segs[req->nsegs].ptr = ptr;
    req->segs[req->nsegs].len = len;
    req->segs[req->nsegs].fd = fd;
    req->segs[req->nsegs].off = off;
    req->nsegs++;
    req->has_body = 1;
    req->body_total += len;
    return TFX_HC_OK;
}

tfx_hc_status_t tfx_hc_req_add_body(tfx_hc_req_t *req, const void *ptr, size_t len)
{
    if (!req || (!ptr && len) || req->running)
        return TFX_HC_EINVAL;
    return add_seg(req, ptr, len, -1, 0);
}

tfx_hc_status_t tfx_hc_req_add_body_fd(tfx_hc_req_t *req, int fd, uint64_t off, size_t len)
{
    if (!req || fd < 0 || req->running)
        return TFX_HC_EINVAL;
    return add_seg(req, NULL, len, fd, off);
}

void tfx_hc_req_set_sink(tfx_hc_req_t *req, int fd, const char *content_type)
{
    if (req && !req->running) {
        req->sink_fd = fd >= 0 ? fd : -1;
        req->sink_type = content_type;
    }
}

void tfx_hc_req_set_timeout(tfx_hc_req_t *req, long timeout_ms)
{
    if (req)
        req->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
}

void tfx_hc_req_set_low_speed(tfx_hc_req_t *req, long bytes_per_s, long seconds)
{
    if (req && !req->running) {
        req->low_speed = bytes_per_s > 0 ? bytes_per_s : 0;
        req->low_speed_s = seconds > 0 ? seconds : 0;
    }
}

void tfx_hc_req_set_max_body(tfx_hc_req_t *req, size_t max)
{
    if (req)
        req->max_body = max;
}

void tfx_hc_req_set_progress(tfx_hc_req_t *req, tfx_hc_progress_fn fn, void *user_data)
{
    if (req) {
        req->progress = fn;
        req->progress_ud = user_data;
    }
}

const tfx_hc_resp_t *tfx_hc_req_response(const tfx_hc_req_t *req)
{
    return req ? &req->resp : NULL;
}

const char *tfx_hc_req_error(const tfx_hc_req_t *req)
{
    return req ? req->errbuf : "";
}

uint8_t *tfx_hc_req_take_body(tfx_hc_req_t *req, size_t *len)
{
    if (!req || req->running)
        return NULL;
    uint8_t *b = req->resp.body;
    if (len)
        *len = req->resp.body_len;
    req->resp.body = NULL;
    req->resp.body_len = 0;
    req->body_cap = 0;
    return b;
}

int tfx_hc_req_running(const tfx_hc_req_t *req)
{
    return req ? req->running : 0;
}

/* ---- libcurl callbacks ------------------------------------------------------------------ */

#define MAX_HEADER_BYTES (64u * 1024)  /* what one response's headers may keep in all */

/* Keeps one header (name, then its value trimmed) in req->hbuf: 0, or -1 when it does not
 * fit or memory runs out (the header is then dropped, as if it had not come). */
static int keep_header(tfx_hc_req_t *req, const char *name, size_t nlen, const char *v,
                       size_t vlen)
{
    while (vlen && (*v == ' ' || *v == '\t')) {
        v++;
        vlen--;
    }
    while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t' || v[vlen - 1] == '\r' ||
                    v[vlen - 1] == '\n'))
        vlen--;
    size_t need = req->hlen + nlen + vlen + 2;
    if (need > MAX_HEADER_BYTES)
        return -1;
    if (need > req->hcap) {
        size_t cap = req->hcap ? req->hcap : 512;     /* within malloc's per-thread cache */
        while (cap < need)
            cap *= 2;
        char *b = realloc(req->hbuf, cap);
        if (!b)
            return -1;
        req->hbuf = b;
        req->hcap = cap;
    }
    tfx_hc_resp_t *r = &req->resp;
    if (r->nh < TFX_HC_HINDEX) {
        r->hoff[r->nh] = (uint32_t)req->hlen;
        r->hnlen[r->nh++] = (uint32_t)nlen;
    } else {
        r->more_headers = 1;
    }
    char *p = req->hbuf + req->hlen;
    memcpy(p, name, nlen);
    p[nlen] = '\0';
    memcpy(p + nlen + 1, v, vlen);
    p[nlen + 1 + vlen] = '\0';
    req->hlen = need;
    req->resp.headers = req->hbuf;
    req->resp.headers_len = req->hlen;
    /* A field of the typed answer: parsed through its table (a malformed value: left out) */
    (void)tfp_answer_header_parse(&req->resp.answer, p, p + nlen + 1);
    return 0;
}

const char *tfx_hc_resp_header(const tfx_hc_resp_t *r, const char *name)
{
    const char *found = "";
    if (!r || !r->headers)
        return found;
    if (!r->more_headers) {             /* the index: a length, then the bytes (the last wins) */
        size_t n = strlen(name);
        for (size_t i = r->nh; i-- > 0;)
            if (r->hnlen[i] == n && strncasecmp(r->headers + r->hoff[i], name, n) == 0)
                return r->headers + r->hoff[i] + n + 1;
        return found;
    }
    for (size_t i = 0; i < r->headers_len;) {
        const char *n = r->headers + i, *v = n + strlen(n) + 1;
        if (strcasecmp(n, name) == 0)
            found = v;
        i = (size_t)(v - r->headers) + strlen(v) + 1;
    }
    return found;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *ud)
{
    tfx_hc_req_t *req = ud;
    size_t n = size * nitems;
    tfx_hc_resp_t *r = &req->resp;

    if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        /* A new status line (after a 1xx): forget what an interim response said. */
        r->t_head = tfx_since_s(req->t0_ns);
        req->hlen = 0;
        r->headers_len = 0;
        r->nh = 0;
        r->more_headers = 0;
        memset(&r->answer, 0, sizeof r->answer);
        return n;
    }
    const char *colon = memchr(line, ':', n);
    if (!colon || colon == line)
        return n;
    size_t name_len = (size_t)(colon - line);
    if (memchr(line, '\0', n))         /* a NUL inside a header: not kept */
        return n;
    (void)keep_header(req, line, name_len, colon + 1, n - name_len - 1);
    return n;
}

/* Makes room for need bytes plus the NUL. */
static int reserve_body(tfx_hc_req_t *req, size_t need)
{
    if (need < req->body_cap)
        return 0;
    size_t cap = req->body_cap ? req->body_cap : UNKNOWN_LENGTH_START;
    while (cap <= need) {
        if (cap > SIZE_MAX / 2) {
            cap = need + 1;
            break;
        }
        cap *= 2;
    }
    uint8_t *b = realloc(req->resp.body, cap);
    if (!b)
        return -1;
    req->resp.body = b;
    req->body_cap = cap;
    return 0;
}

/* The response body passes the cap: refused now, saying so (complete() keeps the text). */
static void too_big(tfx_hc_req_t *req, uint64_t bytes, const char *how)
{
    req->write_err = TFX_HC_ETOOBIG;
    snprintf(req->why, sizeof req->why, "the response body %s %" PRIu64 " bytes, more than "
             "this client takes (max body %zu bytes)", how, bytes, req->max_body);
}

/* A 2xx body going to the sink: written through, none of it kept. */
static size_t sink_write(tfx_hc_req_t *req, const char *data, size_t n)
{
    if (req->max_body && req->resp.body_len + n > req->max_body) {
        too_big(req, (uint64_t)req->resp.body_len + n, "passes");
        return 0;
    }
    for (size_t done = 0; done < n;) {
        ssize_t k = write(req->sink_fd, data + done, n - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            req->write_err = TFX_HC_EIO;
            snprintf(req->why, sizeof req->why, "cannot write the response body: %s",
                     k < 0 ? strerror(errno) : "no progress");
            return 0;
        }
        done += (size_t)k;
    }
    req->resp.body_len += n;
    return n;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *ud)
{
    tfx_hc_req_t *req = ud;
    size_t n = size * nmemb;

    if (req->sink_fd >= 0 && !req->resp.body && !req->sinking) {
        /* First bytes: only a success's body goes to the sink; an error's is read here. */
        long code = 0;
        curl_off_t cl = -1;
        if (curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK &&
            code >= 200 && code < 300 &&
            (!req->sink_type ||
             strncasecmp(tfx_hc_resp_header(&req->resp, "Content-Type"), req->sink_type,
                         strlen(req->sink_type)) == 0))
            req->sinking = req->resp.sunk = 1;
        if (req->sinking && req->max_body &&
            curl_easy_getinfo(req->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK &&
            cl >= 0 && (uint64_t)cl > req->max_body) {
            too_big(req, (uint64_t)cl, "announces");    /* refused before a byte is written */
            return 0;
        }
    }
    if (req->sinking)
        return sink_write(req, data, n);
    if (!req->resp.body) {
        /* First bytes: size the buffer from Content-Length when the server sent one. */
        curl_off_t cl = -1;
        if (curl_easy_getinfo(req->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) != CURLE_OK)
            cl = -1;
        if (cl >= 0) {
            if ((uint64_t)cl >= SIZE_MAX || (req->max_body && (uint64_t)cl > req->max_body)) {
                too_big(req, (uint64_t)cl, "announces");
                return 0;
            }
            req->resp.body = tfx_buf_malloc((size_t)cl + 1);   /* free()d by the caller */
            if (!req->resp.body) {
                req->write_err = TFX_HC_ENOMEM;
                return 0;
            }
            req->body_cap = (size_t)cl + 1;
        }
    }
    if (n > SIZE_MAX - 1 - req->resp.body_len ||
        (req->max_body && req->resp.body_len + n > req->max_body)) {
        too_big(req, (uint64_t)req->resp.body_len + n, "passes");
        return 0;
    }
    if (reserve_body(req, req->resp.body_len + n) != 0) {
        req->write_err = TFX_HC_ENOMEM;
        return 0;
    }
    memcpy(req->resp.body + req->resp.body_len, data, n);
    req->resp.body_len += n;
    req->resp.body[req->resp.body_len] = '\0';
    return n;
}

static size_t on_read(char *dst, size_t size, size_t nitems, void *ud)
{
    tfx_hc_req_t *req = ud;
    size_t room = size * nitems, done = 0;

    while (room > 0 && req->seg_i < req->nsegs) {
        const seg_t *s = &req->segs[req->seg_i];
        size_t left = s->len - req->seg_off;
        size_t k = left < room ? left : room;
        if (k && s->fd >= 0) {
            /* A file's bytes, read as they are sent: never the whole file in memory. */
            ssize_t got = pread(s->fd, dst + done, k, (off_t)(s->off + req->seg_off));
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                req->write_err = TFX_HC_EIO;
                snprintf(req->why, sizeof req->why, "cannot read the request body: %s",
                         got < 0 ? strerror(errno) : "the file is shorter than it was");
                return CURL_READFUNC_ABORT;
            }
            k = (size_t)got;
        } else if (k) {
            memcpy(dst + done, s->ptr + req->seg_off, k);
        }
        if (k) {
            done += k;
            room -= k;
            req->seg_off += k;
        }
        if (req->seg_off == s->len) {
            req->seg_i++;
            req->seg_off = 0;
        }
    }
    return done;
}

/* libcurl rewinds the upload when it resends on a fresh connection. */
static int on_seek(void *ud, curl_off_t offset, int origin)
{
    tfx_hc_req_t *req = ud;
    if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > req->body_total)
        return CURL_SEEKFUNC_CANTSEEK;
    uint64_t left = (uint64_t)offset;
    req->seg_i = 0;
    req->seg_off = 0;
    while (req->seg_i < req->nsegs && left >= req->segs[req->seg_i].len) {
        left -= req->segs[req->seg_i].len;
        req->seg_i++;
    }
    req->seg_off = (size_t)left;
    return CURL_SEEKFUNC_OK;
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    tfx_hc_req_t *req = ud;
    if (!req->progress)
        return 0;
    return req->progress((uint64_t)dlnow, (uint64_t)dltotal, (uint64_t)ulnow,
                         (uint64_t)ultotal, req->progress_ud) ? 1 : 0;
}

/* ---- engine ----------------------------------------------------------------------------- */

tfx_hc_status_t tfx_hc_new(tfx_hc_t **out)
{
    if (!out)
        return TFX_HC_EINVAL;
    if (ensure_curl() != 0)
        return TFX_HC_ENOMEM;
    tfx_hc_t *hc = calloc(1, sizeof(*hc));
    if (!hc)
        return TFX_HC_ENOMEM;
    hc->multi = curl_multi_init();
    if (!hc->multi)
        goto free_hc;
    tfx_hc_set_max_host_connections(hc, TFX_HC_DEFAULT_HOST_CONNECTIONS);
    *out = hc;
    return TFX_HC_OK;

free_hc:
    free(hc);
    return TFX_HC_ENOMEM;
}

tfx_hc_status_t tfx_hc_set_max_host_connections(tfx_hc_t *hc, long n)
{
    if (!hc || n < 1 || n > LONG_MAX / 4)
        return TFX_HC_EINVAL;
    if (curl_multi_setopt(hc->multi, CURLMOPT_MAX_HOST_CONNECTIONS, n) != CURLM_OK ||
        curl_multi_setopt(hc->multi, CURLMOPT_MAXCONNECTS, 4 * n) != CURLM_OK)
        return TFX_HC_EINVAL;
    return TFX_HC_OK;
}

static void unlink_req(tfx_hc_t *hc, tfx_hc_req_t *req)
{
    if (req->prev)
        req->prev->next = req->next;
    else
        hc->running = req->next;
    if (req->next)
        req->next->prev = req->prev;
    req->prev = req->next = NULL;
    hc->nrunning--;
}

static tfx_hc_status_t map_curl(const tfx_hc_req_t *req, CURLcode rc)
{
    switch (rc) {
    case CURLE_OK:
        return TFX_HC_OK;
    case CURLE_UNSUPPORTED_PROTOCOL:
        /* also a reply that is not HTTP at all ("Received HTTP/0.9"): the server's fault */
        return strstr(req->errbuf, "HTTP/0.9") || strstr(req->errbuf, "response") ?
               TFX_HC_EPROTO : TFX_HC_EURL;
    case CURLE_URL_MALFORMAT:
        return TFX_HC_EURL;
    case CURLE_WEIRD_SERVER_REPLY:
        return TFX_HC_EPROTO;
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    /* No trusted TLS session (bad certificate, no TLS on the port): libcurl's text says why. */
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
        return TFX_HC_ECONNECT;
    case CURLE_OPERATION_TIMEDOUT:
        return TFX_HC_ETIMEDOUT;
    case CURLE_ABORTED_BY_CALLBACK:
        /* also a body file that could not be read (on_read) */
        return req->write_err != TFX_HC_OK ? req->write_err : TFX_HC_ECANCELED;
    case CURLE_OUT_OF_MEMORY:
        return TFX_HC_ENOMEM;
    case CURLE_WRITE_ERROR:
        return req->write_err != TFX_HC_OK ? req->write_err : TFX_HC_EIO;
    default:
        return TFX_HC_EIO;
    }
}

/* libcurl's timings of the transfer, in seconds from its start. */
static void record_times(tfx_hc_req_t *req)
{
    curl_off_t us;
    tfx_hc_resp_t *r = &req->resp;
#define T(info, field)                                                                    \
    if (curl_easy_getinfo(req->easy, info, &us) == CURLE_OK && us > 0)                    \
        r->field = (double)us / 1e6;
    T(CURLINFO_CONNECT_TIME_T, t_connect)
    T(CURLINFO_APPCONNECT_TIME_T, t_connect)            /* TLS: its handshake too */
    T(CURLINFO_PRETRANSFER_TIME_T, t_pretransfer)
    T(CURLINFO_TOTAL_TIME_T, t_total)
#undef T
}

/* Detaches a finished (or canceled) request, records what came back and runs its callback.
 * Nothing touches req after the callback: it may have freed it. */
static void complete(tfx_hc_t *hc, tfx_hc_req_t *req, tfx_hc_status_t st)
{
    long code = 0;
    curl_off_t up = 0;

    curl_multi_remove_handle(hc->multi, req->easy);
    unlink_req(hc, req);
    if (curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK)
        req->resp.status = code;
    if (curl_easy_getinfo(req->easy, CURLINFO_SIZE_UPLOAD_T, &up) == CURLE_OK && up > 0)
        req->resp.bytes_sent = (uint64_t)up;
    record_times(req);
    req->resp.seconds = tfx_since_s(req->t0_ns);
    if (st == TFX_HC_ECANCELED && !req->errbuf[0])
        snprintf(req->errbuf, sizeof(req->errbuf), "request canceled");
    if (req->why[0] && st == req->write_err)
        snprintf(req->errbuf, sizeof(req->errbuf), "%s", req->why);
    else if (st == TFX_HC_ETIMEDOUT && strstr(req->errbuf, "too slow"))
        snprintf(req->errbuf, sizeof(req->errbuf), "stalled: fewer than %ld bytes a second "
                 "moved for %ld s (the server stopped answering)", req->low_speed,
                 req->low_speed_s);
    req->running = 0;
    req->hc = NULL;
    tfx_hc_done_fn done = req->done;
    void *ud = req->done_ud;
    req->done = NULL;
    req->done_ud = NULL;
    done(req, st, ud);
}

/* Completes every request libcurl reports finished. Returns 1 if target was among them. */
static int dispatch(tfx_hc_t *hc, const tfx_hc_req_t *target)
{
    int hit = 0, left;
    CURLMsg *m;

    while ((m = curl_multi_info_read(hc->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURLcode rc = m->data.result;
        char *priv = NULL;
        if (curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv) != CURLE_OK || !priv)
            continue;
        tfx_hc_req_t *req = (tfx_hc_req_t *)(void *)priv;
        if (req == target)
            hit = 1;
        complete(hc, req, map_curl(req, rc));
    }
    return hit;
}

void tfx_hc_cancel(tfx_hc_t *hc, tfx_hc_req_t *req)
{
    if (!hc || !req || !req->running || req->hc != hc)
        return;
    complete(hc, req, TFX_HC_ECANCELED);
}

void tfx_hc_free(tfx_hc_t *hc)
{
    if (!hc)
        return;
    while (hc->running)
        tfx_hc_cancel(hc, hc->running);
    curl_multi_cleanup(hc->multi);
    free(hc->ca_file);
    free(hc->cert_file);
    free(hc->key_file);
    free(hc);
}

tfx_hc_status_t tfx_hc_set_ca_file(tfx_hc_t *hc, const char *path)
{
    if (!hc)
        return TFX_HC_EINVAL;
    char *p = NULL;
    if (path && !(p = strdup(path)))
        return TFX_HC_ENOMEM;
    free(hc->ca_file);
    hc->ca_file = p;
    return TFX_HC_OK;
}

tfx_hc_status_t tfx_hc_set_client_cert(tfx_hc_t *hc, const char *cert, const char *key)
{
    if (!hc)
        return TFX_HC_EINVAL;
    char *c = NULL, *k = NULL;
    if (cert && (!(c = strdup(cert)) || (key && !(k = strdup(key))))) {
        free(c);
        return TFX_HC_ENOMEM;
    }
    free(hc->cert_file);
    free(hc->key_file);
    hc->cert_file = c;
    hc->key_file = k;
    return TFX_HC_OK;
}

int tfx_hc_running(const tfx_hc_t *hc)
{
    return hc ? hc->nrunning : 0;
}

static void set_protocols(CURL *e)
{
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
}

static tfx_hc_status_t configure(tfx_hc_req_t *req)
{
    CURL *e = req->easy;
    const char *method = req->method ? req->method : "GET";
    int ok = 1;

#define SET(opt, val) ok &= curl_easy_setopt(e, opt, val) == CURLE_OK
    SET(CURLOPT_URL, req->url);
    SET(CURLOPT_PRIVATE, (void *)req);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_TCP_NODELAY, 1L);
    SET(CURLOPT_TCP_KEEPALIVE, 1L);
    SET(CURLOPT_ERRORBUFFER, req->errbuf);
    SET(CURLOPT_BUFFERSIZE, DOWNLOAD_BUFFER);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, (void *)req);
    SET(CURLOPT_WRITEFUNCTION, on_write);
    SET(CURLOPT_WRITEDATA, (void *)req);
    long connect_ms = CONNECT_TIMEOUT_MS;
    if (req->timeout_ms > 0 && req->timeout_ms < connect_ms)
        connect_ms = req->timeout_ms;
    SET(CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    SET(CURLOPT_TIMEOUT_MS, req->timeout_ms);
    SET(CURLOPT_LOW_SPEED_LIMIT, req->low_speed_s > 0 ? req->low_speed : 0L);
    SET(CURLOPT_LOW_SPEED_TIME, req->low_speed > 0 ? req->low_speed_s : 0L);
    if (req->progress) {
        SET(CURLOPT_XFERINFOFUNCTION, on_progress);
        SET(CURLOPT_XFERINFODATA, (void *)req);
        SET(CURLOPT_NOPROGRESS, 0L);
    }
    if (req->has_body) {
        req->seg_i = 0;
        req->seg_off = 0;
        SET(CURLOPT_READFUNCTION, on_read);
        SET(CURLOPT_READDATA, (void *)req);
        SET(CURLOPT_SEEKFUNCTION, on_seek);
        SET(CURLOPT_SEEKDATA, (void *)req);
        SET(CURLOPT_UPLOAD_BUFFERSIZE, UPLOAD_BUFFER);
        if (strcmp(method, "PUT") == 0) {
            SET(CURLOPT_UPLOAD, 1L);
            SET(CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->body_total);
        } else {
            SET(CURLOPT_POST, 1L);
            SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_total);
            if (strcmp(method, "POST") != 0)
                SET(CURLOPT_CUSTOMREQUEST, method);
        }
    } else if (strcmp(method, "GET") == 0) {
        SET(CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "HEAD") == 0) {
        SET(CURLOPT_NOBODY, 1L);
    } else {
        SET(CURLOPT_CUSTOMREQUEST, method);
    }
    SET(CURLOPT_HTTPHEADER, req->headers);
#undef SET
    set_protocols(e);
    return ok ? TFX_HC_OK : TFX_HC_EINVAL;
}

tfx_hc_status_t tfx_hc_start(tfx_hc_t *hc, tfx_hc_req_t *req, tfx_hc_done_fn done, void *user_data)
{
    if (!hc || !req || !done || !req->url || req->running)
        return TFX_HC_EINVAL;
    clear_response(req);
    if (req->easy) {
        curl_easy_reset(req->easy);
    } else {
        req->easy = curl_easy_init();
        if (!req->easy)
            return TFX_HC_ENOMEM;
    }
    /* libcurl would otherwise wait up to a second for "100 Continue" before a big body. */
    if (req->has_body && !req->expect_off) {
        struct curl_slist *l = curl_slist_append(req->headers, "Expect:");
        if (!l)
            return TFX_HC_ENOMEM;
        req->headers = l;
        req->expect_off = 1;
    }
    tfx_hc_status_t st = configure(req);
    if (st != TFX_HC_OK)
        return st;
    /* Verification stays on (libcurl's default); only the trusted CAs can change. */
    if (hc->ca_file && curl_easy_setopt(req->easy, CURLOPT_CAINFO, hc->ca_file) != CURLE_OK)
        return TFX_HC_EINVAL;
    if (hc->cert_file && (curl_easy_setopt(req->easy, CURLOPT_SSLCERT, hc->cert_file) != CURLE_OK ||
                          (hc->key_file && curl_easy_setopt(req->easy, CURLOPT_SSLKEY,
                                                            hc->key_file) != CURLE_OK)))
        return TFX_HC_EINVAL;
    req->t0_ns = tfx_now_ns();
    if (curl_multi_add_handle(hc->multi, req->easy) != CURLM_OK)
        return TFX_HC_ENOMEM;
    req->hc = hc;
    req->running = 1;
    req->done = done;
    req->done_ud = user_data;
    req->prev = NULL;
    req->next = hc->running;
    if (hc->running)
        hc->running->prev = req;
    hc->running = req;
    hc->nrunning++;
    return TFX_HC_OK;
}

/* Completes every running request with TFX_HC_EIO: the multi handle itself failed, so
 * nothing else would ever complete them. */
static void fail_all(tfx_hc_t *hc)
{
    while (hc->running) {
        tfx_hc_req_t *req = hc->running;
        snprintf(req->errbuf, sizeof(req->errbuf), "libcurl multi interface failed");
        complete(hc, req, TFX_HC_EIO);
    }
}

/* One round of work: transfers, then the callbacks of what finished. */
static void perform(tfx_hc_t *hc)
{
    int still;
    if (curl_multi_perform(hc->multi, &still) != CURLM_OK) {
        fail_all(hc);
        return;
    }
    dispatch(hc, NULL);
}

void tfx_hc_wait(tfx_hc_t *hc, long timeout_ms)
{
    if (!hc || timeout_ms == 0)
        return;
    long wait = timeout_ms < 0 || timeout_ms > POLL_SLICE_MS ? POLL_SLICE_MS : timeout_ms;
    curl_multi_poll(hc->multi, NULL, 0, (int)wait, NULL);
}

void tfx_hc_wakeup(tfx_hc_t *hc)
{
    if (hc)
        curl_multi_wakeup(hc->multi);
}

int tfx_hc_poll(tfx_hc_t *hc, long timeout_ms)
{
    if (!hc)
        return 0;
    perform(hc);
    if (timeout_ms != 0 && hc->nrunning > 0) {
        tfx_hc_wait(hc, timeout_ms);
        perform(hc);
    }
    return hc->nrunning;
}

tfx_hc_status_t tfx_hc_drive(tfx_hc_t *hc, tfx_hc_req_t *req, long timeout_ms)
{
    uint64_t t0_ns;
    int still;

    if (!hc || !req)
        return TFX_HC_EINVAL;
    if (!req->running)
        return TFX_HC_OK;
    if (req->hc != hc)
        return TFX_HC_EINVAL;
    t0_ns = tfx_now_ns();
    for (;;) {
        if (curl_multi_perform(hc->multi, &still) != CURLM_OK) {
            /* The multi handle itself failed: nothing will complete req any more. */
            snprintf(req->errbuf, sizeof(req->errbuf), "libcurl multi interface failed");
            complete(hc, req, TFX_HC_EIO);
            return TFX_HC_OK;
        }
        if (dispatch(hc, req))
            return TFX_HC_OK;
        long wait = POLL_SLICE_MS;
        if (timeout_ms >= 0) {
            long left = timeout_ms - (long)(tfx_since_s(t0_ns) * 1000.0);
            if (left <= 0)
                return TFX_HC_EAGAIN;
            if (left < wait)
                wait = left;
        }
        curl_multi_poll(hc->multi, NULL, 0, (int)wait, NULL);
    }
}

/* ---- URLs ------------------------------------------------------------------------------- */

/* Parses url into *out, checking what both URL functions need: an http(s) scheme and a
 * non-empty host (libcurl reads "http:///x" as host x: an empty authority is refused here).
 * On success *scheme and *host are set (curl_free them) and *out must be cleaned up. */
static tfx_hc_status_t open_url(const char *url, CURLU **out, char **scheme, char **host)
{
    const char *auth = strstr(url, "://");
    if (!auth || auth[3] == '/' || auth[3] == '\0')
        return TFX_HC_EURL;
    if (ensure_curl() != 0)
        return TFX_HC_ENOMEM;
    CURLU *u = curl_url();
    if (!u)
        return TFX_HC_ENOMEM;
    *scheme = *host = NULL;
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, scheme, 0) != CURLUE_OK ||
        (strcasecmp(*scheme, "http") != 0 && strcasecmp(*scheme, "https") != 0) ||
        curl_url_get(u, CURLUPART_HOST, host, 0) != CURLUE_OK || !**host) {
        curl_free(*host);
        curl_free(*scheme);
        curl_url_cleanup(u);
        return TFX_HC_EURL;
    }
    *out = u;
    return TFX_HC_OK;
}

tfx_hc_status_t tfx_hc_url_build(const char *url, const char *path, const char *query, char **out)
{
    tfx_hc_status_t st = TFX_HC_EURL;
    char *scheme = NULL, *host = NULL, *full = NULL;

    if (!url || !out)
        return TFX_HC_EINVAL;
    CURLU *u;
    if ((st = open_url(url, &u, &scheme, &host)) != TFX_HC_OK)
        return st;
    st = TFX_HC_EURL;
    curl_url_set(u, CURLUPART_FRAGMENT, NULL, 0);
    if (path) {
        if (curl_url_set(u, CURLUPART_PATH, path, 0) != CURLUE_OK ||
            curl_url_set(u, CURLUPART_QUERY, NULL, 0) != CURLUE_OK)
            goto free_parts;
    }
    if (query && curl_url_set(u, CURLUPART_QUERY, query, CURLU_APPENDQUERY) != CURLUE_OK)
        goto free_parts;
    if (curl_url_get(u, CURLUPART_URL, &full, 0) != CURLUE_OK)
        goto free_parts;
    *out = strdup(full);
    st = *out ? TFX_HC_OK : TFX_HC_ENOMEM;
    curl_free(full);

free_parts:
    curl_free(host);
    curl_free(scheme);
    curl_url_cleanup(u);
    return st;
}

tfx_hc_status_t tfx_hc_url_split(const char *url, char **origin, char **path, int *has_query)
{
    tfx_hc_status_t st = TFX_HC_EURL;
    char *scheme = NULL, *host = NULL, *port = NULL, *p = NULL, *q = NULL;

    if (!url || !origin || !path || !has_query)
        return TFX_HC_EINVAL;
    CURLU *u;
    if ((st = open_url(url, &u, &scheme, &host)) != TFX_HC_OK)
        return st;
    st = TFX_HC_EURL;
    if (curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK)
        goto free_parts;
    if (curl_url_get(u, CURLUPART_PATH, &p, 0) != CURLUE_OK)
        goto free_parts;
    CURLUcode qrc = curl_url_get(u, CURLUPART_QUERY, &q, 0);
    for (char *c = scheme; *c; c++)
        *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    for (char *c = host; *c; c++)
        *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    size_t n = strlen(scheme) + strlen(host) + strlen(port) + 5;
    char *o = malloc(n);
    char *pp = strdup(p && *p ? p : "/");
    if (!o || !pp) {
        free(o);
        free(pp);
        st = TFX_HC_ENOMEM;
        goto free_parts;
    }
    snprintf(o, n, "%s://%s:%s", scheme, host, port);
    *origin = o;
    *path = pp;
    *has_query = qrc == CURLUE_OK && q != NULL;
    st = TFX_HC_OK;

free_parts:
    curl_free(q);
    curl_free(p);
    curl_free(port);
    curl_free(host);
    curl_free(scheme);
    curl_url_cleanup(u);
    return st;
}
