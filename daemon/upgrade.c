/* upgrade.c - POST /v1/upgrade and the UCX transport's admission tokens.
 *
 * Tokens live in a one-time token table (daemon/otokens.h) under a mutex: looked up by their
 * hash, bounded in all and per principal (per client address with authentication off), so
 * one client that asks without connecting cannot starve the others (429 with Retry-After for
 * it alone). The UCX progress thread verifies HELLOs through verify_hello; HTTP threads issue
 * tokens. Built without UCX (transports/ucx_server.h's stubs: no UCX worker ever starts),
 * every upgrade is refused with that reason and the daemon serves HTTP alone.
 */
#include "config.h"
#include "daemon/upgrade.h"
#include "daemon/log.h"
#include "daemon/otokens.h"
#include "daemon/shm.h"
#include "proto/auth.h"
#include "proto/netaddr.h"
#include "proto/upgrade.h"
#include "transports/clock.h"
#include "transports/hostid.h"
#include "transports/ucx_server.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 4096
#define DEFAULT_QUOTA 128               /* live tokens per principal (or address): upgrade.h */
#define LOCAL_REFRESH_MS 5000           /* this host's addresses, read again at most this often */

/* What a token was issued for: its payload in the table. */
typedef struct {
    tfp_up_host_t host;             /* who asked */
    tfp_cred_t cred;                /* TFP_CRED_BEARER: issued to the principal whose bearer */
    uint8_t token_hash[TFP_AUTH_HASH_LEN];  /* token hashes so (authentication on) */
    char principal[TFP_MAX_USER_ID + 1];
} token_t;

struct tfd_upgrade {
    pthread_mutex_t lock;
    tfd_otokens_t *tokens;          /* of token_t; under lock */
    unsigned ttl_ms;
    tfp_up_host_t self;
    char why[256];                  /* why UCX is off, "" when on */
    tfd_upgrade_stats_t st;
    struct tfd_shm *shm;            /* the same-host shm transport, or NULL */
    int tls;                        /* HTTPS on: UCX only to this host and to trusted */
    tfp_netlist_t trusted;          /* ucx-trusted's ranges (immutable once HTTP is up) */
    char trusted_text[128];         /* ucx-trusted as given, for the refusal */
    tfp_proto_range_t protocol;     /* the versions served (immutable once HTTP is up) */
    pthread_rwlock_t local_lock;    /* local: read by every HTTPS request's offer */
    tfp_netlist_t local;            /* this host's addresses */
    _Atomic uint64_t local_at_ms;   /* when they were read; 0: never */
    tfx_ucx_t *ucx;                 /* NULL: UCX is off (why says so) */
};

/* The client's pid, from the token, when it shares this host: the UCX side watches it
 * (UCX has no peer failure detection on one host). */
static int verify_hello(const char *token, const char *identity, long *peer_pid,
                        tfp_op_who_t *cred, char *why, size_t why_size, void *arg)
{
    tfd_upgrade_t *up = arg;
    tfp_up_host_t who;
    tfp_err_t err;
    int rc = -1;
    char expect[TFP_AUTH_PROOF_LEN + 1];
    size_t ident_len;
    char proof[TFP_AUTH_PROOF_LEN + 1];
    if (tfp_auth_hello_split(identity, strlen(identity), &ident_len, proof) != TFP_OK) {
        snprintf(why, why_size, "HELLO: the principal's proof is not 64 hex digits");
        goto out;
    }
    if (tfp_up_ident_parse(identity, ident_len, &who, &err) != TFP_OK) {
        snprintf(why, why_size, "HELLO: %.200s", err.msg);
        goto out;
    }
    pthread_mutex_lock(&up->lock);
    token_t *t = tfd_otokens_find(up->tokens, token, tfx_now_ms());
    if (!t) {
        snprintf(why, why_size, "unknown, expired or already used token");
    } else if (strcmp(t->host.boot_id, who.boot_id) != 0 ||
               strcmp(t->host.netns, who.netns) != 0) {
        snprintf(why, why_size, "the token was issued to another peer");
    } else if (t->cred == TFP_CRED_BEARER && !proof[0]) {
        snprintf(why, why_size, "the token was issued to principal '%s': HELLO must carry its "
                 "proof (authentication is on)", t->principal);
    } else if (t->cred == TFP_CRED_BEARER &&
               (tfp_auth_hello_proof(t->token_hash, token, expect),
                !tfp_auth_proof_equal(expect, proof))) {
        snprintf(why, why_size, "the token was issued to another principal");
    } else {
        cred->cred = t->cred;
        memcpy(cred->token_hash, t->token_hash, sizeof cred->token_hash);
        *peer_pid = tfp_up_host_same(&up->self, &t->host) ? (long)t->host.pid : 0;
        tfd_otokens_take(up->tokens, t);                 /* single use */
        rc = 0;
    }
    pthread_mutex_unlock(&up->lock);
out:
    pthread_mutex_lock(&up->lock);
    if (rc == 0)
        up->st.accepted++;
    else
        up->st.refused++;
    pthread_mutex_unlock(&up->lock);
    if (rc != 0)
        tfd_log(LOG_NOTICE, "ucx: HELLO refused: %s", why);
    return rc;
}

tfd_upgrade_t *tfd_upgrade_start(int enable, unsigned token_ttl_ms, uint64_t max_body,
                                 const char *tcp_ports, unsigned idle_s,
                                 const tfx_handlers_t *h)
{
    tfd_upgrade_t *up = calloc(1, sizeof *up);
    if (!up)
        return NULL;
    pthread_mutex_init(&up->lock, NULL);
    pthread_rwlock_init(&up->local_lock, NULL);
    up->ttl_ms = token_ttl_ms;
    if (!(up->tokens = tfd_otokens_new(MAX_TOKENS, sizeof(token_t), DEFAULT_QUOTA))) {
        tfd_upgrade_free(up);
        return NULL;
    }
    tfp_err_t err;
    if (tfx_hostid_get(&up->self, &err) != TFP_OK) {
        snprintf(up->why, sizeof up->why, "cannot tell this host's identity: %.200s", err.msg);
        return up;
    }
    if (!enable) {
        snprintf(up->why, sizeof up->why, "UCX is turned off (--ucx off)");
        return up;
    }
    /* a body in parts that stops is given up as an idle HTTP connection is closed */
    tfx_ucx_config_t cfg = {verify_hello, up, max_body, tcp_ports, (uint64_t)idle_s * 1000};
    up->ucx = tfx_ucx_start(&cfg, h, &err);
    if (!up->ucx && err.code == TFP_ENOTIMPL) {         /* built without UCX */
        snprintf(up->why, sizeof up->why, "%.200s", err.msg);
    } else if (!up->ucx) {
        snprintf(up->why, sizeof up->why, "UCX did not start: %.200s", err.msg);
        tfd_log(LOG_WARNING, "%s; serving HTTP only", up->why);
    } else {
        /* Asked, never assumed: a CUDA-enabled UCX could land items in device memory. */
        const char *mt = tfx_ucx_server_memory(up->ucx);
        tfd_log(LOG_INFO, "ucx: memory types %s%s", mt, strstr(mt, "cuda") ? ""
                : " (host memory only: device feeds stage through pinned host memory)");
    }
    return up;
}

void tfd_upgrade_set_shm(tfd_upgrade_t *up, struct tfd_shm *shm)
{
    up->shm = shm;
    if (shm)
        tfd_shm_set_token_quota(shm, tfd_otokens_quota(up->tokens));
}

void tfd_upgrade_set_token_quota(tfd_upgrade_t *up, unsigned per_client)
{
    pthread_mutex_lock(&up->lock);
    tfd_otokens_set_quota(up->tokens, per_client);
    pthread_mutex_unlock(&up->lock);
    if (up->shm)
        tfd_shm_set_token_quota(up->shm, per_client);
}

void tfd_upgrade_set_tls(tfd_upgrade_t *up, const tfp_netlist_t *trusted, const char *text)
{
    up->tls = 1;
    up->trusted = *trusted;
    snprintf(up->trusted_text, sizeof up->trusted_text, "%s", text && *text ? text : "same-host");
}

/* peer (an address's text) is one of this host's addresses: the cached list, read again
 * when it misses and is older than LOCAL_REFRESH_MS (addresses come and go), by one thread,
 * outside any lock (getifaddrs asks the kernel); the others answer from the list they have. */
static int peer_is_local(tfd_upgrade_t *up, const char *peer)
{
    pthread_rwlock_rdlock(&up->local_lock);
    int hit = tfp_netlist_match(&up->local, peer);
    pthread_rwlock_unlock(&up->local_lock);
    if (hit)
        return 1;
    uint64_t now = tfx_now_ms(), at = atomic_load(&up->local_at_ms);
    if ((at && now - at < LOCAL_REFRESH_MS) ||
        !atomic_compare_exchange_strong(&up->local_at_ms, &at, now ? now : 1))
        return 0;
    tfp_netlist_t fresh;
    tfx_local_addrs(&fresh);        /* on failure it still holds the loopback ranges */
    pthread_rwlock_wrlock(&up->local_lock);
    up->local = fresh;
    pthread_rwlock_unlock(&up->local_lock);
    return tfp_netlist_match(&fresh, peer);
}

/* With TLS on, may a client at peer that says it is (same_host) on this host get UCX in the
 * clear? On this host: yes (nothing crosses a wire). Elsewhere: only in ucx-trusted. */
static int trusted(tfd_upgrade_t *up, const char *peer, int same_host)
{
    if (!up->tls || tfp_netlist_match(&up->trusted, peer))
        return 1;
    return same_host && peer_is_local(up, peer);
}

int tfd_upgrade_offered_to(tfd_upgrade_t *up, const char *peer)
{
    return up->why[0] == '\0' && trusted(up, peer, 1);
}

const char *tfd_upgrade_trusted(const tfd_upgrade_t *up)
{
    return up->tls ? up->trusted_text : NULL;
}

const char *tfd_upgrade_memory_types(const tfd_upgrade_t *up)
{
    return up->ucx ? tfx_ucx_server_memory(up->ucx) : NULL;
}

int tfd_upgrade_enabled(tfd_upgrade_t *up, const char **why)
{
    if (why)
        *why = up->why;
    return up->why[0] == '\0';
}

void tfd_upgrade_set_protocol(tfd_upgrade_t *up, tfp_proto_range_t protocol)
{
    up->protocol = protocol;
}

/* The server's range, for a client that named its own (an older one's parser refuses it). */
static tfp_proto_range_t protocol_for(const tfd_upgrade_t *up, tfx_req_t *r)
{
    return tfx_req_op_who(r)->protocol.min ? up->protocol : (tfp_proto_range_t){0, 0};
}

static void refuse(tfd_upgrade_t *up, tfx_req_t *r, const char *reason)
{
    tfp_up_resp_t resp = {0};
    resp.protocol = protocol_for(up, r);
    snprintf(resp.reason, sizeof resp.reason, "%s", reason);
    char *json;
    size_t len;
    tfp_err_t err;
    if (tfp_up_resp_build(&resp, &json, &len, &err) != TFP_OK) {
        tfx_respond_error(r, err.code, "%s", err.msg);
        return;
    }
    tfx_respond(r, 200, "application/json", json, len, free, json);
}

void tfd_upgrade_handle(tfd_upgrade_t *up, tfx_req_t *r)
{
    size_t len;
    const uint8_t *body = tfx_req_body(r, &len);
    tfp_up_req_t req;
    tfp_err_t err;
    if (tfp_up_req_parse((const char *)body, len, &req, &err) != TFP_OK) {
        tfx_respond_error(r, err.code, "upgrade request: %s", err.msg);
        return;
    }
    if (up->why[0]) {
        refuse(up, r, up->why);
        return;
    }
    if (tfx_req_op_who(r)->cred == TFP_CRED_CERT) {
        /* Over UCX each request is checked against the bearer token that upgraded it
         * (HELLO's proof, revocation by SIGHUP); a certificate gives none to carry. */
        refuse(up, r, "a client certificate's principal has no bearer token to carry over UCX "
                  "(send a token to upgrade)");
        return;
    }
    const char *peer = tfx_req_peer(r);
    if (!trusted(up, peer, tfp_up_host_same(&up->self, &req.host))) {
        char why[TFP_UP_MAX_REASON + 1];
        snprintf(why, sizeof why, "TLS is on and UCX is not encrypted: %.64s is not on a "
                 "trusted link (ucx-trusted: %.100s)", peer[0] ? peer : "this client",
                 up->trusted_text);
        refuse(up, r, why);
        return;
    }
    tfp_up_resp_t resp = {0};
    resp.upgraded = 1;
    resp.protocol = protocol_for(up, r);
    resp.same_host = tfp_up_host_same(&up->self, &req.host);
    resp.server_pid = up->self.pid;
    resp.expires_ms = up->ttl_ms;
    if (tfx_ucx_address(up->ucx, !resp.same_host, &resp.worker_address,
                        &resp.worker_address_len) != 0) {
        tfx_respond_error(r, TFP_ENOMEM, "out of memory");
        return;
    }
    token_t t;
    memset(&t, 0, sizeof t);
    t.host = req.host;
    const tfp_op_who_t *w = tfx_req_op_who(r);
    if (w->principal[0] && w->cred == TFP_CRED_BEARER) {     /* authentication on */
        t.cred = TFP_CRED_BEARER;
        memcpy(t.token_hash, w->token_hash, sizeof t.token_hash);
        snprintf(t.principal, sizeof t.principal, "%s", w->principal);
    } else {
        t.cred = TFP_CRED_NONE;
    }
    /* Counted per principal; without authentication per client address. */
    const char *owner = w->principal[0] ? w->principal : peer;
    uint64_t retry_ms = 0;
    pthread_mutex_lock(&up->lock);
    tfd_otok_result_t got = tfd_otokens_issue(up->tokens, owner, &t, tfx_now_ms(), up->ttl_ms,
                                              resp.token, &retry_ms);
    if (got == TFD_OTOK_OK)
        up->st.issued++;
    size_t quota = tfd_otokens_quota(up->tokens);
    pthread_mutex_unlock(&up->lock);
    memset(&t, 0, sizeof t);
    if (got != TFD_OTOK_OK) {
        free(resp.worker_address);
        if (got == TFD_OTOK_NORANDOM) {
            tfx_respond_error(r, TFP_EINTERNAL, "no randomness for a token");
            return;
        }
        tfp_answer_set_u64(tfx_req_answer(r), TFP_AF_RETRY_AFTER, (retry_ms + 999) / 1000);
        if (got == TFD_OTOK_QUOTA)      /* names only the asker's own principal or address */
            tfx_respond_error(r, TFP_EFULL, "%s %s holds %zu unused upgrade tokens, the most "
                              "upgrade-tokens-per-client allows: use them or wait for them to "
                              "expire", w->principal[0] ? "principal" : "client", owner, quota);
        else
            tfx_respond_error(r, TFP_EBUSY, "too many upgrades pending");
        return;
    }
    /* Same host, and the client can map memory: the shm socket with its own token. From
     * another network namespace of this kernel (a pod beside a DaemonSet's) only a socket
     * file reaches it; whether that client has it mounted, its connect says at once. */
    int shm_reach = resp.same_host ||
                    (tfp_up_host_same_kernel(&up->self, &req.host) && tfd_shm_is_file(up->shm));
    if (up->shm && shm_reach && (req.transports & TFP_UP_T_SHM) &&
        tfd_shm_token(up->shm, resp.shm_socket, resp.shm_token, w, owner) != 0)
        resp.shm_socket[0] = resp.shm_token[0] = '\0';
    char *json;
    tfp_status_t st = tfp_up_resp_build(&resp, &json, &len, &err);
    free(resp.worker_address);
    if (st != TFP_OK) {
        tfx_respond_error(r, err.code, "%s", err.msg);
        return;
    }
    tfx_respond(r, 200, "application/json", json, len, free, json);
}

void tfd_upgrade_quiesce(tfd_upgrade_t *up)
{
    if (up->ucx)
        tfx_ucx_quiesce(up->ucx);
}

unsigned tfd_upgrade_inflight(tfd_upgrade_t *up)
{
    return up->ucx ? tfx_ucx_inflight(up->ucx) : 0;
}

void tfd_upgrade_stats(tfd_upgrade_t *up, tfd_upgrade_stats_t *st)
{
    pthread_mutex_lock(&up->lock);
    *st = up->st;
    pthread_mutex_unlock(&up->lock);
    if (up->ucx) {
        tfx_ucx_stats_t us;
        tfx_ucx_stats(up->ucx, &us);
        st->dropped = us.dropped;
        st->requests = us.requests;
        st->byes = us.byes;
        st->prefixed = us.prefixed;
        st->bad_parts = us.bad_parts;
    }
}

void tfd_upgrade_free(tfd_upgrade_t *up)
{
    if (!up)
        return;
    tfx_ucx_stop(up->ucx);
    tfd_otokens_free(up->tokens);
    pthread_rwlock_destroy(&up->local_lock);
    pthread_mutex_destroy(&up->lock);
    free(up);
}
