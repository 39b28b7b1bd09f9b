/* upgrade.c - the client's origins and the per-origin upgrade policy: what the client knows
 * of each origin (scheme://host:port) it talks to (whether its responses offer UCX, its
 * connection, why there is none, a backoff), which transport a request takes, and the
 * negotiation (POST /v1/upgrade on a private engine, then transports/ucx_client's connect).
 *
 * Negotiating blocks, so it runs on the thread driving the client, when a request starts or
 * the client is driven, never inside a callback.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client/internal.h"
#include "proto/jsonread.h"
#include "proto/upgrade.h"
#include "transports/hostid.h"

#define UPGRADE_TIMEOUT_MS 2000L        /* POST /v1/upgrade */
#define BACKOFF_MIN_MS 1000L            /* after a failed upgrade, doubling ... */
#define BACKOFF_MAX_MS 300000L          /* ... up to 5 min; a success resets it */
#define EAGER_BODY (1u << 20)           /* a body this large is worth negotiating first */

/* ---- origins and the upgrade to UCX ------------------------------------------------------ */
/* Every request notes its origin (scheme://host:port); every HTTP response from it says
 * whether its server offers UCX (Tfetch-Upgrade). Under policy auto a request UCX can carry
 * negotiates once the server offered it; under policy ucx at once. Negotiating is
 * synchronous, at the start of a request and never inside a callback: POST /v1/upgrade on a
 * private engine (so no other request's callback runs meanwhile), then a UCX connection
 * presenting the one-time token, both with short timeouts. A failure is remembered with its
 * reason and a backoff; a connection is kept for the client's life unless it fails. */

static origin_t *origin_find(const tf_client_t *c, const char *key)
{
    for (origin_t *o = c->origins; o; o = o->next)
        if (strcmp(o->key, key) == 0)
            return o;
    return NULL;
}

/* The origin of url (made when new), or a refusal recorded for op: TF_EURL, TF_ENOMEM. */
tf_status_t tfi_origin_of(tf_client_t *c, const char *url, int op, origin_t **out)
{
    char *key = NULL, *path = NULL;
    int query;
    tfx_hc_status_t xst = tfx_hc_url_split(url, &key, &path, &query);
    if (xst != TFX_HC_OK)
        return tfi_refuse(c, op, xst == TFX_HC_ENOMEM ? TF_ENOMEM : TF_EURL,
                          xst == TFX_HC_ENOMEM ? NULL : "bad URL");
    *out = tfi_origin_get(c, key);
    free(key);
    free(path);
    return *out ? TF_OK : tfi_refuse(c, op, TF_ENOMEM, NULL);
}

origin_t *tfi_origin_get(tf_client_t *c, const char *key)
{
    origin_t *o = origin_find(c, key);
    if (o)
        return o;
    if (!(o = calloc(1, sizeof(*o))))
        return NULL;
    if (!(o->key = strdup(key))) {
        free(o);
        return NULL;
    }
    o->offered = -1;
    o->local = -1;
    o->same_host = -1;
    o->last_stages = (tf_stages_t){-1, -1, -1, -1, -1, -1, -1, -1, -1};
    o->next = c->origins;
    c->origins = o;
    return o;
}

/* 1 if origin key's host is this host (transports/hostid.h). Decided before any answer
 * from the server, so it is a guess the upgrade confirms (the server offers shm only when
 * its host id is ours). */
static int host_is_local(const char *key)
{
    const char *p = strstr(key, "://");
    char host[256];
    if (!p)
        return 0;
    p += 3;
    size_t k = *p == '[' ? strcspn(++p, "]") : strcspn(p, ":/?#");
    if (k == 0 || k >= sizeof host)
        return 0;
    memcpy(host, p, k);
    host[k] = '\0';
    return tfx_addr_is_local(host);
}

/* The bytes of f's document's tensors: the body is rendered only once the transport is
 * chosen (op.body_len is 0 until then). */
static uint64_t doc_bytes(const tf_fetch_t *f)
{
    uint64_t n = f->op.body_fd >= 0 ? f->op.body_fd_len : 0;
    for (size_t i = 0; f->op.body && i < tf_doc_count(f->op.body); i++)
        n += tf_doc_at(f->op.body, i)->nbytes;
    return n;
}

/* Under policy auto and TF_UPGRADE_EAGER: is f worth negotiating for before its origin has
 * offered UCX? A server on this host (shared memory), or a body of 1 MiB or more. */
static int worth_eager(const tf_client_t *c, origin_t *o, const tf_fetch_t *f)
{
    if (c->upgrade != TF_UPGRADE_EAGER)
        return 0;
    if (doc_bytes(f) >= EAGER_BODY)
        return 1;
    if (o->local < 0)
        o->local = host_is_local(o->key);
    return o->local;
}

/* Why UCX cannot carry op, or NULL when it can: UCX carries get, put, delete and exchange
 * in the safetensors format, of the tensor or route the URL names, with no query. */
static const char *why_not_ucx(const tfi_op_t *op)
{
    if (op->kind == TFI_OP_LIST || op->kind == TFI_OP_INFO)
        return "listings and server info travel over HTTP";
    if (op->kind == TFI_OP_CALL)        /* a feed operation with its FEED frame */
        return op->feed.op ? NULL : "this feed request travels over HTTP";
    if (op->format != TF_FORMAT_SAFETENSORS)
        return "the Shumai format travels over HTTP";
    if (op->query)
        return "URLs with a query travel over HTTP";
    if (!op->name[0])
        return op->kind == TF_OP_EXCHANGE ? "only exchanges with /v1/call/ROUTE travel over UCX"
                                          : "only requests to /v1/tensors/NAME travel over UCX";
    return NULL;
}

/* UCX cannot carry f (for the reason why): under policy auto it goes over HTTP, the reason
 * recorded as its fallback; under policy ucx it fails (TF_ECONNECT). */
static tf_status_t no_ucx(tf_fetch_t *f, const char *why)
{
    if (f->policy == TF_TRANSPORT_UCX)
        return tfi_rfail(&f->result, TF_ECONNECT, "no UCX connection (transport policy ucx): %s",
                         why);
    snprintf(f->result.fallback, sizeof(f->result.fallback), "%.159s", why);
    return TF_OK;
}

void tfi_up_failed(origin_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->why, sizeof(o->why), fmt, ap);
    va_end(ap);
    if (o->backoff_ms <= 0)
        o->backoff_ms = BACKOFF_MIN_MS;
    else if ((o->backoff_ms *= 2) > BACKOFF_MAX_MS)
        o->backoff_ms = BACKOFF_MAX_MS;
    o->retry_at = tfx_now_ms() + (uint64_t)o->backoff_ms;
}

tf_status_t tfi_origin_protocol(const tf_client_t *c, origin_t *o, const char *v,
                                const char *feature, tf_result_t *res)
{
    tfp_err_t err;
    tfp_proto_range_t peer = tfp_proto_unnamed();
    if (v[0] && tfp_proto_parse(v, strlen(v), &peer, &err) != TFP_OK)
        return tfi_rfail(res, TF_EPROTO, "the server's Tfetch-Protocol: %s", err.msg);
    o->protocol = peer;
    if (tfp_proto_check(c->protocol, peer, "client", "server", feature, NULL, &err) != TFP_OK)
        return tfi_rfail(res, TF_EVERSION, "%s", err.msg);
    return TF_OK;
}

/* A request to a server already known to speak none of our versions fails before it is
 * sent: nothing reaches a server that would misread it. */
static tf_status_t version_refusal(tf_client_t *c, tf_fetch_t *f)
{
    const origin_t *o = f->origin;
    tfp_err_t err;
    if (!o || o->protocol.min == 0 || f->op.kind == TFI_OP_INFO)
        return TF_OK;
    if (tfp_proto_check(c->protocol, o->protocol, "", "", "", NULL, &err) == TFP_OK)
        return TF_OK;                   /* the common case, without the label's formatting */
    char feature[96];
    snprintf(feature, sizeof(feature), "%s %.80s",
             f->op.kind == TFI_OP_CALL ? f->op.method : f->op.kind == TF_OP_PUT ? "PUT"
             : f->op.kind == TF_OP_DELETE ? "DELETE" : f->op.kind == TF_OP_EXCHANGE ? "POST"
             : "GET", f->op.name);
    if (tfp_proto_check(c->protocol, o->protocol, "client", "server", feature, NULL, &err) !=
        TFP_OK)
        return tfi_rfail(&f->result, TF_EVERSION, "%s", err.msg);
    return TF_OK;
}

void tfi_up_connected(origin_t *o)
{
    o->conn_gen++;
    o->why[0] = '\0';
    o->backoff_ms = 0;
    o->retry_at = 0;
}

/* o's connection failed: closes it, remembering why. */
static void drop_broken(tf_client_t *c, origin_t *o)
{
    if (o->conn && c->up->broken(o)) {
        c->up->disconnect(o);
        tfi_up_failed(o, "the UCX connection failed");
    }
}

static void up_done(tfx_hc_req_t *req, tfx_hc_status_t st, void *ud)
{
    (void)req;
    *(tfx_hc_status_t *)ud = st;
}

/* Records what a non-200 answer to POST /v1/upgrade says. */
static void up_http_error(origin_t *o, const tfx_hc_resp_t *r)
{
    tfp_status_t code;
    char msg[128] = "";
    if (r->body && r->body_len)
        tfp_parse_error_body((const char *)r->body, r->body_len, &code, msg, sizeof(msg));
    if (r->status == 404 || r->status == 405)
        tfi_up_failed(o, "the server does not offer UCX (POST /v1/upgrade: HTTP %ld)", r->status);
    else
        tfi_up_failed(o, "the upgrade failed: HTTP %ld%s%s", r->status, msg[0] ? ": " : "", msg);
}

/* Whether the upgrade's answer names a range that meets ours (none named: version 1); notes
 * the server's range on o, and why not in o->why. */
static int version_agreed(const tf_client_t *c, origin_t *o, const tfp_up_resp_t *resp)
{
    tfp_err_t err;
    o->protocol = resp->protocol.min ? resp->protocol : tfp_proto_unnamed();
    if (tfp_proto_check(c->protocol, o->protocol, "client", "server", "POST /v1/upgrade", NULL,
                        &err) == TFP_OK)
        return 1;
    tfi_up_failed(o, "%s", err.msg);
    return 0;
}

/* POST origin/v1/upgrade: 0 and *resp filled when the server offers a connection, else -1
 * with o->why set. */
static int ask_upgrade(tf_client_t *c, origin_t *o, tf_transport_t policy, long timeout_ms,
                       tfp_up_resp_t *resp)
{
    tfp_up_req_t q = {.transports = TFP_UP_T_UCX | TFP_UP_T_SHM, .host = c->host,
                      .policy = policy == TF_TRANSPORT_UCX ? TFP_UP_POLICY_UCX
                                                           : TFP_UP_POLICY_AUTO};
    tfx_hc_status_t done = TFX_HC_EAGAIN;
    tfx_hc_t *hc = NULL;
    tfx_hc_req_t *req = NULL;
    char *json = NULL, *url = NULL;
    size_t len = 0;
    tfp_err_t err;
    int rc = -1;

    if (tfp_up_req_build(&q, &json, &len, &err) != TFP_OK) {
        tfi_up_failed(o, "cannot ask for an upgrade: %s", err.msg);
        return -1;
    }
    char auth[TFP_AUTH_MAX_TOKEN + 8] = "";
    if (c->token)
        snprintf(auth, sizeof auth, "Bearer %s", c->token);
    size_t ulen = strlen(o->key) + sizeof("/v1/upgrade");
    if (!(url = malloc(ulen)) || tfx_hc_new(&hc) != TFX_HC_OK ||
        tfx_hc_set_ca_file(hc, c->ca_file) != TFX_HC_OK ||
        tfx_hc_set_client_cert(hc, c->cert_file, c->key_file) != TFX_HC_OK ||
        tfx_hc_req_new(&req) != TFX_HC_OK) {
        tfi_up_failed(o, "out of memory");
        goto out;
    }
    snprintf(url, ulen, "%s/v1/upgrade", o->key);
    if (tfx_hc_req_set_method(req, "POST") != TFX_HC_OK ||
        tfx_hc_req_set_url(req, url) != TFX_HC_OK ||
        tfx_hc_req_add_header(req, "Content-Type", MIME_JSON) != TFX_HC_OK ||
        tfx_hc_req_add_header(req, "Accept", MIME_JSON) != TFX_HC_OK ||
        tfx_hc_req_add_header(req, "Tfetch-Protocol", c->protocol_text) != TFX_HC_OK ||
        (c->token && tfx_hc_req_add_header(req, "Authorization", auth) != TFX_HC_OK) ||
        tfx_hc_req_add_body(req, json, len) != TFX_HC_OK) {
        tfi_up_failed(o, "out of memory");
        goto out;
    }
    tfx_hc_req_set_timeout(req, timeout_ms);
    tfx_hc_req_set_max_body(req, TFP_UP_MAX_RESP_JSON);
    if (tfx_hc_start(hc, req, up_done, &done) != TFX_HC_OK) {
        tfi_up_failed(o, "cannot ask for an upgrade: out of memory");
        goto out;
    }
    tfx_hc_drive(hc, req, -1);          /* the request's own timeout bounds it */
    const tfx_hc_resp_t *r = tfx_hc_req_response(req);
    if (r->status > 0)
        o->offered = tfi_offers_ucx(tfx_hc_resp_header(r, "Tfetch-Upgrade"));
    if (done == TFX_HC_ECONNECT || done == TFX_HC_EURL) {
        /* Nothing listens there yet, or the URL is wrong: the request fails by itself, and
         * it says nothing of UCX, so no backoff keeps a later, good one from negotiating. */
        const char *why = tfx_hc_req_error(req);
        snprintf(o->why, sizeof(o->why), "POST /v1/upgrade failed: %s",
                 why[0] ? why : tfx_hc_strerror(done));
    } else if (done != TFX_HC_OK) {
        const char *why = tfx_hc_req_error(req);
        tfi_up_failed(o, "POST /v1/upgrade failed: %s", why[0] ? why : tfx_hc_strerror(done));
    } else if (r->status != 200) {
        up_http_error(o, r);
    } else if (tfp_up_resp_parse((const char *)r->body, r->body_len, resp, &err) != TFP_OK) {
        tfi_up_failed(o, "bad answer to POST /v1/upgrade: %s", err.msg);
    } else if (!version_agreed(c, o, resp)) {
        tfp_up_resp_clear(resp);
    } else if (!resp->upgraded) {
        o->offered = 0;
        tfi_up_failed(o, "the server does not offer UCX: %s", resp->reason);
    } else {
        rc = 0;
    }
out:
    tfx_hc_req_free(req);
    tfx_hc_free(hc);
    free(url);
    free(json);
    return rc;
}

/* Negotiates and connects o: 0 with o->conn; 1 with o->pending (made, not confirmed yet:
 * nothing waits for it); or -1 with o->why (and a backoff). POST /v1/upgrade waits up to
 * timeout_ms. The same-host shm socket is connected first: it answers in milliseconds,
 * carries gets and puts whatever becomes of UCX, and tells the server's uid, which decides
 * whether UCX may use shared memory (ucx.c). */
static int upgrade(tf_client_t *c, origin_t *o, tf_transport_t policy, long timeout_ms)
{
    tfp_up_resp_t resp;
    tfp_err_t err;
    int rc = -1;

    if (!c->have_host) {
        if (tfx_hostid_get(&c->host, &err) != TFP_OK) {
            tfi_up_failed(o, "cannot tell this host's identity: %s", err.msg);
            return -1;
        }
        c->have_host = 1;
    }
    memset(&resp, 0, sizeof(resp));
    if (ask_upgrade(c, o, policy, timeout_ms, &resp) != 0)
        return -1;
    o->same_host = resp.same_host;
    o->shm_why[0] = '\0';
    if (!resp.shm_socket[0])
        snprintf(o->shm_why, sizeof(o->shm_why), "the server offers no shm (not the same "
                 "host, or shm off)");
    else if (tfi_shm_connect(c, o, &resp, o->shm_why, sizeof(o->shm_why)) != 0)
        tfi_shm_disconnect(o);
    o->shm_failed = resp.shm_socket[0] && !o->shm;
    rc = c->up->connect(c, o, &resp);
    tfp_up_resp_clear(&resp);
    return rc;
}

/* Negotiates for the origins that requests started inside callbacks found unconnected.
 * Called when the client is driven, outside callbacks. */
void tfi_upgrade_wanted(tf_client_t *c)
{
    if (!c->want_upgrades || c->in_cb || c->in_engine || c->closing)
        return;
    c->want_upgrades = 0;
    for (origin_t *o = c->origins; o; o = o->next) {
        if (!o->want_upgrade)
            continue;
        o->want_upgrade = 0;
        if (!o->conn && !o->pending && !c->up_dead[0] &&
            !(o->retry_at && tfx_now_ms() < o->retry_at))
            upgrade(c, o, o->want_policy, UPGRADE_TIMEOUT_MS);
    }
}

/* f goes over o's upgraded connection, unless it has conditions (a TTL, a range) and o's
 * server takes none over UCX (an older tfetchd): then HTTP carries it, under every policy,
 * saying so (not a fallback: HTTP is where such a server reads them). */
static tf_status_t via_up(tf_client_t *c, tf_fetch_t *f, origin_t *o,
                          const tfi_transport_t **via)
{
    if (c->verify && (f->op.kind == TF_OP_GET || f->op.kind == TF_OP_PUT) &&
        !(c->up->has_feature && c->up->has_feature(o, TFP_UF_FEATURE_DIGEST))) {
        *via = &tfi_http;
        snprintf(f->result.fallback, sizeof(f->result.fallback), "digest verification "
                 "(tf_client_set_verify): this server's UCX carries no digests (an older "
                 "tfetchd): verified requests travel over HTTP");
        return TF_OK;
    }
    if (tfi_op_has_cond(&f->op) &&
        !(c->up->has_feature && c->up->has_feature(o, TFP_UF_FEATURE_COND))) {
        *via = &tfi_http;
        snprintf(f->result.fallback, sizeof(f->result.fallback), "this server's UCX takes no "
                 "conditions, TTLs or ranges (an older tfetchd): they travel over HTTP");
        return TF_OK;
    }
    *via = c->up;
    return TF_OK;
}

/* Decides how f travels: *via = c->up over its origin's connection (made now when that is
 * needed and allowed), else tfi_http with the reason in f->result.fallback. Under policy
 * ucx, what would fall back fails instead: the status is returned and recorded in
 * f->result. A client built without UCX is one whose UCX cannot start (c->up_dead). */
tf_status_t tfi_choose(tf_client_t *c, tf_fetch_t *f, const tfi_transport_t **via)
{
    *via = &tfi_http;
    tf_status_t vst = version_refusal(c, f);
    if (vst != TF_OK)
        return vst;
    const char *why = why_not_ucx(&f->op);
    if (!why && !f->origin)
        why = "out of memory";
    if (f->policy == TF_TRANSPORT_HTTP)
        return TF_OK;
    if (why) {
        /* Not a fallback: UCX never carries these, whatever the policy. */
        snprintf(f->result.fallback, sizeof(f->result.fallback), "%s", why);
        return TF_OK;
    }
    origin_t *o = f->origin;
    int strict = f->policy == TF_TRANSPORT_UCX;
    if (tfi_shm_can(f)) {
        *via = &tfi_shm;
        return TF_OK;
    }
    tfi_shm_note(f);
    drop_broken(c, o);
    /* A connection still confirming: under policy ucx wait for it (it fails by its own
     * deadline); otherwise look, and go on without it while it is not there. */
    if (o->pending) {
        uint64_t t0 = tfx_now_ns();
        int rc = c->up->settle(c, o, strict && !c->in_cb && !c->in_engine ? UPGRADE_TIMEOUT_MS
                                                                          : 0);
        f->result.stages.upgrade = (double)(tfx_now_ns() - t0) / 1e6;
        if (rc == 1)
            return no_ucx(f, o->why);
    }
    if (o->conn)
        return via_up(c, f, o, via);
    if (c->up_dead[0])
        return no_ucx(f, c->up_dead);
    if (!strict && o->offered < 0 && !worth_eager(c, o, f))
        return no_ucx(f, c->upgrade == TF_UPGRADE_LAZY
                             ? "the server has not offered UCX yet (upgrade policy lazy: a "
                               "first request goes over HTTP)"
                             : "the server has not offered UCX yet (not worth negotiating "
                               "first: another host and a small body)");
    if (!strict && o->offered == 0)
        return no_ucx(f, strncmp(o->why, "the server does not offer UCX", 29) == 0
                             ? o->why : "the server does not offer UCX");
    if (o->retry_at && tfx_now_ms() < o->retry_at)
        return no_ucx(f, o->why);
    if (c->in_cb || c->in_engine) {
        /* Negotiating blocks: not inside a callback. The client does it when next driven. */
        if (!o->want_upgrade) {
            o->want_upgrade = 1;
            o->want_policy = f->policy;
            c->want_upgrades = 1;
        }
        return no_ucx(f, "the UCX connection is not made yet (a request started inside a "
                         "callback does not wait for it)");
    }
    /* Negotiating before an offer is a guess: it takes at most a quarter of the request's
     * own time, so a server that does not answer it leaves the request most of its time. */
    long timeout_ms = UPGRADE_TIMEOUT_MS;
    if (!strict && o->offered < 0 && f->total_ms > 0 && f->total_ms / 4 < timeout_ms)
        timeout_ms = f->total_ms / 4 > 0 ? f->total_ms / 4 : 1;
    uint64_t t0 = tfx_now_ns();
    int rc = upgrade(c, o, f->policy, timeout_ms);
    vst = version_refusal(c, f);
    if (vst == TF_OK && rc == 1 && strict)
        rc = c->up->settle(c, o, UPGRADE_TIMEOUT_MS);
    f->result.stages.upgrade = (double)(tfx_now_ns() - t0) / 1e6;
    if (vst != TF_OK)
        return vst;
    /* The shm socket the upgrade connected carries what it can, also when UCX did not (or
     * not yet) connect: a server of another uid, a firewall on UCX's ports. */
    if (tfi_shm_can(f)) {
        *via = &tfi_shm;
        return TF_OK;
    }
    tfi_shm_note(f);
    if (rc != 0 && o->shm_failed && (f->op.kind == TF_OP_GET || f->op.kind == TF_OP_PUT)) {
        /* Shared memory would have carried it: its reason first, it is the one to act on. */
        char both[sizeof(o->shm_why) + sizeof(o->why) + 8];
        snprintf(both, sizeof(both), "%s; %s", o->shm_why, o->why);
        return no_ucx(f, both);
    }
    if (rc != 0)
        return no_ucx(f, o->why);
    /* UCX carries what shared memory would have: no silent fallback, say why. */
    if (o->shm_failed && (f->op.kind == TF_OP_GET || f->op.kind == TF_OP_PUT))
        snprintf(f->result.fallback, sizeof(f->result.fallback), "no shm: %.150s", o->shm_why);
    return via_up(c, f, o, via);
}

tf_status_t tf_client_upgrade(tf_client_t *c, const char *url)
{
    if (!c)
        return TF_EINVAL;
    if (c->in_cb || c->in_engine || c->closing)
        return tfi_refuse(c, TFI_OP_UPGRADE, TF_EINVAL,
                          "tf_client_upgrade is not allowed inside a callback");
    origin_t *o = NULL;
    tf_status_t ost = tfi_origin_of(c, url, TFI_OP_UPGRADE, &o);
    if (ost != TF_OK)
        return ost;
    drop_broken(c, o);
    tfi_new_result(c, &c->last, TFI_OP_UPGRADE, NULL);
    if (!o->conn) {
        /* Blocking by contract: a connection made but not yet confirmed is waited for. */
        int rc = o->pending                                   ? 1
                 : c->up_dead[0] || (o->retry_at && tfx_now_ms() < o->retry_at) ? -1
                                                              : upgrade(c, o, TF_TRANSPORT_UCX,
                                                                        UPGRADE_TIMEOUT_MS);
        if (rc == 1)
            rc = c->up->settle(c, o, UPGRADE_TIMEOUT_MS);
        if (rc != 0)
            return tfi_rfail(&c->last, TF_ECONNECT, "%s", c->up_dead[0] ? c->up_dead : o->why);
    }
    c->last.status = TF_OK;
    snprintf(c->last.transport, sizeof(c->last.transport), "%s", o->transport);
    return TF_OK;
}

static void fill_transport_info(const tf_client_t *c, const origin_t *o,
                                tf_transport_info_t *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->transport, sizeof(out->transport), "http");
    out->offered = o ? o->offered : -1;
    out->same_host = o ? o->same_host : -1;
    out->server_uid = o && o->server_uid_known ? (long)o->server_uid : -1;
    if (o) {
        out->protocol_min = o->protocol.min;
        out->protocol_max = o->protocol.max;
        snprintf(out->shm_reason, sizeof(out->shm_reason), "%s", o->shm ? "" : o->shm_why);
        if (o->shm)
            snprintf(out->shm, sizeof(out->shm), "shm/memfd");
    }
    out->caller_driven = o ? o->caller_driven : 0;
    out->last_stages = o ? o->last_stages : (tf_stages_t){-1, -1, -1, -1, -1, -1, -1, -1, -1};
    if (o) {
        snprintf(out->last_transport, sizeof(out->last_transport), "%s", o->last_transport);
        snprintf(out->last_fallback, sizeof(out->last_fallback), "%s", o->last_fallback);
    }
    const char *mt = tfi_ucx_memory(c);
    snprintf(out->ucx_memory, sizeof(out->ucx_memory), "%s", mt ? mt : "");
    if (o && o->conn && !c->up->broken(o)) {
        snprintf(out->transport, sizeof(out->transport), "%s", o->transport);
        return;
    }
    uint64_t now = tfx_now_ms();
    if (o && o->retry_at > now)
        out->retry_ms = (long)(o->retry_at - now);
    if (c->up_dead[0])
        snprintf(out->reason, sizeof(out->reason), "%s", c->up_dead);
    else if (o && o->conn)
        snprintf(out->reason, sizeof(out->reason), "the UCX connection failed");
    else if (o && o->why[0])
        snprintf(out->reason, sizeof(out->reason), "%s", o->why);
    else if (o && o->offered == 0)
        snprintf(out->reason, sizeof(out->reason), "the server does not offer UCX");
}

tf_status_t tf_client_transport_info(tf_client_t *c, const char *url, tf_transport_info_t *out)
{
    char *key = NULL, *path = NULL;
    int query;
    if (!c || !out)
        return TF_EINVAL;
    /* The caller's struct may be shorter (an older header): fill only what it has. */
    size_t n = tfi_struct_out_size(out->size, sizeof(*out), TFI_TRANSPORT_INFO_SIZE_0_1);
    if (n == 0)
        return TF_EINVAL;
    tfx_hc_status_t xst = tfx_hc_url_split(url, &key, &path, &query);
    if (xst != TFX_HC_OK)
        return xst == TFX_HC_ENOMEM ? TF_ENOMEM : TF_EURL;
    const origin_t *o = origin_find(c, key);
    free(key);
    free(path);
    tf_transport_info_t ti;
    fill_transport_info(c, o, &ti);
    ti.size = n;
    memcpy(out, &ti, n);
    return TF_OK;
}

/* 1 if a Tfetch-Upgrade value lists ucx (a comma-separated list of tokens). */
int tfi_offers_ucx(const char *v)
{
    for (const char *p = v; *p;) {
        p += strspn(p, " \t,");
        size_t n = strcspn(p, " \t,");
        if (n == 3 && strncasecmp(p, "ucx", 3) == 0)
            return 1;
        p += n;
    }
    return 0;
}
