/* client.c - tf_client_t, the long-lived handle: its creation, its settings (user id, next
 * request id, timeout, progress, body cap, connections, format, transport policy), what it
 * reports (the last outcome, the requests pending) and its release.
 *
 * A client owns one HTTP engine (transports/http_client: a libcurl multi handle whose
 * connection cache keeps up to N connections to each origin alive), a pool of idle engine
 * requests (each keeps its curl easy handle for reuse), the origins it has seen (upgrade.c)
 * and, once it upgraded, the UCX transport (ucx.c). Requests are fetch.c's. One thread at a
 * time per client; tf_client_wakeup alone may come from any thread (an atomic flag and
 * curl_multi_wakeup).
 */
#include "config.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "client/internal.h"
#include "transports/buf.h"

#define DEFAULT_TIMEOUT_MS 0L          /* none: stalls are caught by the stall limit */
/* Stall detection (doc/PROTOCOL.md, "What a client does when a server misbehaves"): a
 * transfer slower than 1 KiB/s for 10 s in a row is a stalled peer; any real link moves
 * more, and a long-poll's wait is added to the window. */
#define DEFAULT_STALL_RATE 1024u
#define DEFAULT_STALL_MS 10000L
/* Response bodies larger than this machine's memory are refused unless the caller raises
 * the cap (a reply is held in memory: one larger could never be), and never less than
 * 2 GiB: a server streaming without end is cut there, while any document a daemon's store
 * (half of its host's memory by default) holds fits a client of a host like it. */
#define MIN_DEFAULT_MAX_BODY ((uint64_t)2 << 30)

static uint64_t default_max_body(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    uint64_t phys = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
    return phys > MIN_DEFAULT_MAX_BODY ? phys : MIN_DEFAULT_MAX_BODY;
}
#define MAX_CONNECTIONS_CAP 4096L

/* ---- handle ------------------------------------------------------------------------------ */

static void make_rid_prefix(char out[17])
{
    uint8_t r[8];
    ssize_t got = getrandom(r, sizeof(r), GRND_NONBLOCK);
    if (got != (ssize_t)sizeof(r)) {
        /* No entropy yet (early boot): the ids still only need to be unique. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                     ((uint64_t)getpid() << 16) ^ (uint64_t)(uintptr_t)out;
        memcpy(r, &x, sizeof(r));
    }
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
}

/* TFETCH_TRANSPORT=auto|http|ucx, or unset/empty: auto. Anything else is refused, not
 * guessed at: why goes in bad, and the client's requests fail with it until the program
 * sets a policy itself (tf_client_set_transport). */
static tf_transport_t transport_from_env(char *bad, size_t badlen)
{
    const char *v = getenv("TFETCH_TRANSPORT");
    bad[0] = '\0';
    if (!v || !*v || strcasecmp(v, "auto") == 0)
        return TF_TRANSPORT_AUTO;
    if (strcasecmp(v, "http") == 0)
        return TF_TRANSPORT_HTTP;
    if (strcasecmp(v, "ucx") == 0)
        return TF_TRANSPORT_UCX;
    snprintf(bad, badlen, "TFETCH_TRANSPORT='%.32s' is not auto, http or ucx", v);
    return TF_TRANSPORT_AUTO;
}

/* TFETCH_UPGRADE=eager|lazy, or unset/empty: eager. Anything else is refused as a bad
 * TFETCH_TRANSPORT is. */
static tf_upgrade_t upgrade_from_env(char *bad, size_t badlen)
{
    const char *v = getenv("TFETCH_UPGRADE");
    if (!v || !*v || strcasecmp(v, "eager") == 0)
        return TF_UPGRADE_EAGER;
    if (strcasecmp(v, "lazy") == 0)
        return TF_UPGRADE_LAZY;
    snprintf(bad, badlen, "TFETCH_UPGRADE='%.32s' is not eager or lazy", v);
    return TF_UPGRADE_EAGER;
}

static atomic_uint live_clients;        /* clients made and not yet freed */

int tfi_clients_live(void)
{
    return atomic_load(&live_clients) != 0;
}

tf_status_t tf_client_new(tf_client_t **out)
{
    if (!out)
        return TF_EINVAL;
    tf_client_t *c = calloc(1, sizeof(*c));
    if (!c)
        return TF_ENOMEM;
    c->transports[c->ntransports++] = &tfi_http;
    if (tfi_ucx)
        c->transports[c->ntransports++] = tfi_ucx;
    c->transports[c->ntransports++] = &tfi_shm;
    for (size_t i = 0; i < c->ntransports; i++) {
        if (c->transports[i]->open && c->transports[i]->open(c) != 0) {
            while (i-- > 0)
                c->transports[i]->close(c);
            free(c);
            return TF_ENOMEM;
        }
    }
    c->up = tfi_ucx;
    if (!c->up)
        snprintf(c->up_dead, sizeof(c->up_dead), "this libtfetch was built without UCX");
    c->timeout_ms = DEFAULT_TIMEOUT_MS;
    c->stall_rate = DEFAULT_STALL_RATE;
    c->stall_ms = DEFAULT_STALL_MS;
    c->max_body = default_max_body();
    c->format = TF_FORMAT_SAFETENSORS;
    c->transport = transport_from_env(c->env_bad, sizeof(c->env_bad));
    if (!c->env_bad[0])
        c->upgrade = upgrade_from_env(c->env_bad, sizeof(c->env_bad));
    else
        c->upgrade = TF_UPGRADE_EAGER;
    const char *tok = getenv("TFETCH_TOKEN");
    if (tok && *tok && tf_client_set_token(c, tok) != TF_OK)
        snprintf(c->env_bad, sizeof(c->env_bad), "TFETCH_TOKEN is not a bearer token "
                 "([A-Za-z0-9-._~+/]+ then '='s, at most %u characters)", TFP_AUTH_MAX_TOKEN);
    const char *ca = getenv("TFETCH_CA_FILE");
    if (ca && *ca && tf_client_set_ca_file(c, ca) != TF_OK)
        snprintf(c->env_bad, sizeof(c->env_bad), "TFETCH_CA_FILE names no readable file");
    const char *cert = getenv("TFETCH_CERT"), *key = getenv("TFETCH_KEY");
    if (((cert && *cert) || (key && *key)) &&
        tf_client_set_cert(c, cert && *cert ? cert : NULL, key && *key ? key : NULL) != TF_OK)
        snprintf(c->env_bad, sizeof(c->env_bad), "TFETCH_CERT and TFETCH_KEY name no readable "
                 "certificate and key (TFETCH_KEY needs TFETCH_CERT)");
    const char *vf = getenv("TFETCH_VERIFY");
    if (vf && *vf && strcmp(vf, "0") != 0 && strcmp(vf, "1") != 0)
        snprintf(c->env_bad, sizeof(c->env_bad), "TFETCH_VERIFY='%.16s' is not 1 or 0", vf);
    c->verify = vf && strcmp(vf, "1") == 0;
    c->protocol = tfp_proto_ours();
    const char *pmin = getenv("TFETCH_PROTOCOL_MIN");
    tfp_err_t perr;
    if (pmin && *pmin && tfp_proto_raise_min(&c->protocol, pmin, &perr) != TFP_OK)
        snprintf(c->env_bad, sizeof(c->env_bad), "%.90s", perr.msg);
    tfp_proto_format(c->protocol, c->protocol_text, sizeof(c->protocol_text), NULL);
    make_rid_prefix(c->rid_prefix);
    snprintf(c->last.transport, sizeof(c->last.transport), "http");
    atomic_fetch_add(&live_clients, 1);
    *out = c;
    return TF_OK;
}

void tf_client_free(tf_client_t *c)
{
    if (!c || c->in_cb || c->in_engine || c->closing)
        return;
    c->closing = 1;
    /* Cancels every pending request, the transports in reverse order: their callbacks run now
     * (UCX ones once the transport has given their buffers back). */
    for (size_t i = c->ntransports; i-- > 0;)
        c->transports[i]->close(c);
    /* Held handles outlive the client, detached. */
    for (tf_fetch_t *f = c->live, *next; f; f = next) {
        next = f->next;
        f->c = NULL;
        f->origin = NULL;
        f->prev = f->next = NULL;
    }
    for (origin_t *o = c->origins, *next; o; o = next) {
        next = o->next;
        free(o->key);
        free(o);
    }
    c->origins = NULL;
    tfi_split_forget(c);
    free(c->user);
    tf_client_set_token(c, NULL);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    free(c);
    /* Freed large UCX replies are kept for reuse while a client lives (transports/buf.h);
     * the last one gives them back, so a program done with tfetch holds none. */
    if (atomic_fetch_sub(&live_clients, 1) == 1)
        tfx_buf_trim();
}

/* Closes the upgraded (UCX and shm) connections, of https origins only when https_only:
 * they were made under credentials or a server verification that no longer hold. The next
 * request negotiates again, as the first did. */
static void drop_upgrades(tf_client_t *c, int https_only)
{
    for (origin_t *o = c->origins; o; o = o->next) {
        if (https_only && strncmp(o->key, "https:", 6) != 0)
            continue;
        if ((o->conn || o->pending) && c->up) {
            c->up->disconnect(o);
            o->why[0] = '\0';
            o->retry_at = 0;
            o->backoff_ms = 0;
        }
        tfi_shm_disconnect(o);
    }
}

/* 1 if path can be opened for reading now. */
static int readable(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f)
        fclose(f);
    return f != NULL;
}

tf_status_t tf_client_set_ca_file(tf_client_t *c, const char *path)
{
    if (!c)
        return TF_EINVAL;
    char *p = NULL;
    if (path) {
        if (!readable(path))                   /* say so now, not at the first request */
            return TF_EINVAL;
        if (!(p = strdup(path)))
            return TF_ENOMEM;
    }
    if (tfx_hc_set_ca_file(c->hc, p) != TFX_HC_OK) {
        free(p);
        return TF_ENOMEM;
    }
    free(c->ca_file);
    c->ca_file = p;
    /* An https origin's upgrade rode on its verification with the old CA: redo both. */
    drop_upgrades(c, 1);
    if (strncmp(c->env_bad, "TFETCH_CA_FILE", 14) == 0)
        c->env_bad[0] = '\0';              /* the program's choice overrides the environment */
    return TF_OK;
}

tf_status_t tf_client_set_cert(tf_client_t *c, const char *cert_pem_path, const char *key_pem_path)
{
    if (!c || (!cert_pem_path && key_pem_path))
        return TF_EINVAL;
    char *cp = NULL, *kp = NULL;
    if (cert_pem_path) {                   /* say so now, not at the first request */
        if (!readable(cert_pem_path) || (key_pem_path && !readable(key_pem_path)))
            return TF_EINVAL;
        if (!(cp = strdup(cert_pem_path)) || (key_pem_path && !(kp = strdup(key_pem_path)))) {
            free(cp);
            return TF_ENOMEM;
        }
    }
    if (tfx_hc_set_client_cert(c->hc, cp, kp) != TFX_HC_OK) {
        free(cp);
        free(kp);
        return TF_ENOMEM;
    }
    free(c->cert_file);
    free(c->key_file);
    c->cert_file = cp;
    c->key_file = kp;
    if (strncmp(c->env_bad, "TFETCH_CERT", 11) == 0)
        c->env_bad[0] = '\0';              /* the program's choice overrides the environment */
    return TF_OK;
}

tf_status_t tf_client_set_user(tf_client_t *c, const char *user_id)
{
    if (!c)
        return TF_EINVAL;
    if (!user_id) {
        free(c->user);
        c->user = NULL;
        return TF_OK;
    }
    if (!tfp_user_id_valid(user_id))
        return TF_EINVAL;
    char *u = strdup(user_id);
    if (!u)
        return TF_ENOMEM;
    free(c->user);
    c->user = u;
    return TF_OK;
}

tf_status_t tf_client_set_token(tf_client_t *c, const char *token)
{
    if (!c)
        return TF_EINVAL;
    if (token && !tfp_auth_token_valid(token, strlen(token)))
        return TF_EINVAL;
    char *t = NULL;
    if (token && !(t = strdup(token)))
        return TF_ENOMEM;
    int same = (!token && !c->token) || (token && c->token && strcmp(token, c->token) == 0);
    /* A UCX or shm connection runs as the principal whose token upgraded it: another token
     * takes new connections (made at the next request, as the first were). */
    if (!same)
        drop_upgrades(c, 0);
    if (c->token) {
        volatile char *p = c->token;            /* not left behind in freed memory */
        while (*p)
            *p++ = '\0';
        free(c->token);
    }
    c->token = t;
    if (strncmp(c->env_bad, "TFETCH_TOKEN", 12) == 0)
        c->env_bad[0] = '\0';              /* the program's choice overrides the environment */
    return TF_OK;
}

tf_status_t tf_client_set_request_id(tf_client_t *c, const char *request_id)
{
    if (!c)
        return TF_EINVAL;
    if (!request_id) {
        c->next_rid[0] = '\0';
        return TF_OK;
    }
    if (!tfp_request_id_valid(request_id) || strlen(request_id) >= sizeof(c->next_rid))
        return TF_EINVAL;
    snprintf(c->next_rid, sizeof(c->next_rid), "%s", request_id);
    return TF_OK;
}

void tf_client_set_timeout(tf_client_t *c, long timeout_ms)
{
    if (c)
        c->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
}

void tf_client_set_progress(tf_client_t *c, tf_progress_fn fn, void *user_data)
{
    if (c) {
        c->progress = fn;
        c->progress_ud = user_data;
    }
}

void tf_client_set_max_body(tf_client_t *c, uint64_t max)
{
    if (c)
        c->max_body = max;
}

tf_status_t tf_client_set_stall(tf_client_t *c, uint64_t min_bytes_per_s, long stall_ms)
{
    if (!c || stall_ms < 0 || (stall_ms > 0 && (min_bytes_per_s == 0 ||
                                                min_bytes_per_s > (uint64_t)LONG_MAX)))
        return TF_EINVAL;
    c->stall_rate = stall_ms > 0 ? min_bytes_per_s : 0;
    c->stall_ms = stall_ms;
    return TF_OK;
}

long tfi_stall_seconds(const tf_fetch_t *f)
{
    const tf_client_t *c = f->c;
    if (!c || c->stall_ms <= 0)
        return 0;
    long ms = c->stall_ms;
    ms = f->hold_ms > LONG_MAX - ms - 999 ? LONG_MAX - 999 : ms + f->hold_ms;
    return (ms + 999) / 1000;
}

tf_status_t tf_client_set_max_connections(tf_client_t *c, long n)
{
    if (!c || n < 1 || n > MAX_CONNECTIONS_CAP || c->in_engine)
        return TF_EINVAL;
    return tfi_set_max_connections(c, n);
}

int tfi_format_valid(tf_format_t f)
{
    return f == TF_FORMAT_SAFETENSORS || f == TF_FORMAT_SHUMAI;
}

tf_status_t tf_client_set_format(tf_client_t *c, tf_format_t format)
{
    if (!c || !tfi_format_valid(format))
        return TF_EINVAL;
    c->format = format;
    return TF_OK;
}

int tfi_transport_valid(tf_transport_t t)
{
    return t == TF_TRANSPORT_AUTO || t == TF_TRANSPORT_HTTP || t == TF_TRANSPORT_UCX;
}

tf_status_t tf_client_set_transport(tf_client_t *c, tf_transport_t transport)
{
    if (!c || !tfi_transport_valid(transport))
        return TF_EINVAL;
    c->transport = transport;
    c->env_bad[0] = '\0';              /* the program's choice overrides the environment */
    return TF_OK;
}

tf_status_t tf_client_set_upgrade_policy(tf_client_t *c, tf_upgrade_t upgrade)
{
    if (!c || (upgrade != TF_UPGRADE_EAGER && upgrade != TF_UPGRADE_LAZY))
        return TF_EINVAL;
    c->upgrade = upgrade;
    if (strncmp(c->env_bad, "TFETCH_UPGRADE", 14) == 0)
        c->env_bad[0] = '\0';          /* the program's choice overrides the environment */
    return TF_OK;
}

tf_status_t tf_client_set_verify(tf_client_t *c, int on)
{
    if (!c || (on != 0 && on != 1))
        return TF_EINVAL;
    c->verify = on;
    if (strncmp(c->env_bad, "TFETCH_VERIFY", 13) == 0)
        c->env_bad[0] = '\0';          /* the program's choice overrides the environment */
    return TF_OK;
}

const tf_result_t *tf_client_last(const tf_client_t *c)
{
    return c ? &c->last : NULL;
}

size_t tf_client_pending(const tf_client_t *c)
{
    return c ? c->npending : 0;
}

void tf_client_wakeup(tf_client_t *c)
{
    if (!c)
        return;
    atomic_store(&c->woken, 1);
    tfi_wakeup(c);
}
