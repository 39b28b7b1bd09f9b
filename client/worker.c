/* worker.c - tf_worker_t: a process that serves routes for a tfetchd (the C form of Shumai's
 * `serve`), over the worker protocol of doc/PROTOCOL.md section 6: register, long-poll for a
 * call, answer it, repeat; unregister at the end.
 *
 * A worker owns its own HTTP engine and one engine request, driven to completion for each
 * step (blocking), so the handler runs on the thread in tf_worker_serve. The secret the
 * registration returned goes with every later request (Tfetch-Worker-Secret), never to
 * the caller's handler. Received call
 * documents are decoded in place (the poll's body becomes the document's storage); answers
 * are sent from the handler's document without concatenating it. The stop flag is a
 * sig_atomic_t so tf_worker_stop may come from a signal handler. One thread at a time.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/internal.h"
#include "proto/jsonread.h"
#include "proto/jsonw.h"
#include "proto/safetensors.h"
#include "transports/clock.h"
#include "transports/http_client.h"

#define STEP_SLACK_MS 10000L        /* beyond a poll's wait, for the network */
#define NAME_MAX_LEN 255

struct tf_worker {
    tfx_hc_t *hc;
    tfx_hc_req_t *req;
    char *base;
    char **routes;
    size_t nroutes;
    tf_worker_fn fn;
    void *ud;
    char id[64];
    char secret[TFP_WORKER_SECRET_LEN + 1];     /* "" from a server without secrets */
    char auth[TFP_AUTH_MAX_TOKEN + 8];          /* "Bearer $TFETCH_TOKEN"; "" for none */
    char protocol[TFP_PROTO_MAX_TEXT + 1];      /* Tfetch-Protocol, as tf_client_t's */
    long lease_ms;
    volatile sig_atomic_t stop;
};

/* The status an HTTP error answer names ({"error", "code"}), or TF_EHTTP. */
static tf_status_t http_status(const tfx_hc_resp_t *r)
{
    tfp_status_t code;
    char msg[256];
    if (r->body && tfp_parse_error_body((const char *)r->body, r->body_len, &code, msg,
                                        sizeof msg) == 0)
        return tfi_from_proto(code);
    return TF_EHTTP;
}

static void step_done(tfx_hc_req_t *req, tfx_hc_status_t st, void *ud)
{
    (void)req;
    *(tfx_hc_status_t *)ud = st;
}

/* Runs one request on w->req: method, path (under base), optional query, body segments.
 * Returns the transport's status; the response is in w->req. */
static tf_status_t step(tf_worker_t *w, const char *method, const char *path, const char *query,
                        const char *ctype, const void *const *segs, const size_t *lens,
                        size_t nsegs, long timeout_ms)
{
    char *url = NULL;
    tfx_hc_req_reset(w->req);
    tfx_hc_status_t st = tfx_hc_url_build(w->base, path, query, &url);
    if (st == TFX_HC_OK)
        st = tfx_hc_req_set_url(w->req, url);
    free(url);
    if (st == TFX_HC_OK)
        st = tfx_hc_req_set_method(w->req, method);
    if (st == TFX_HC_OK && ctype)
        st = tfx_hc_req_add_header(w->req, "Content-Type", ctype);
    if (st == TFX_HC_OK && w->secret[0])
        st = tfx_hc_req_add_header(w->req, "Tfetch-Worker-Secret", w->secret);
    if (st == TFX_HC_OK && w->auth[0])
        st = tfx_hc_req_add_header(w->req, "Authorization", w->auth);
    if (st == TFX_HC_OK)
        st = tfx_hc_req_add_header(w->req, "Tfetch-Protocol", w->protocol);
    for (size_t i = 0; st == TFX_HC_OK && i < nsegs; i++)
        st = tfx_hc_req_add_body(w->req, segs[i], lens[i]);
    if (st != TFX_HC_OK)
        return tfi_from_hc(st);
    tfx_hc_req_set_timeout(w->req, timeout_ms);
    tfx_hc_status_t done = TFX_HC_EAGAIN;
    st = tfx_hc_start(w->hc, w->req, step_done, &done);
    if (st == TFX_HC_OK)
        st = tfx_hc_drive(w->hc, w->req, -1);   /* until done (the request has a timeout) */
    return tfi_from_hc(st == TFX_HC_OK ? done : st);
}

static tf_status_t do_register(tf_worker_t *w)
{
    tfp_jw_t jw;
    tfp_jw_init(&jw);
    tfp_jw_obj_begin(&jw);
    tfp_jw_key(&jw, "routes");
    tfp_jw_arr_begin(&jw);
    for (size_t i = 0; i < w->nroutes; i++)
        tfp_jw_str(&jw, w->routes[i]);
    tfp_jw_arr_end(&jw);
    tfp_jw_obj_end(&jw);
    size_t len;
    char *json = tfp_jw_finish(&jw, &len);
    if (!json)
        return TF_ENOMEM;
    const void *segs[1] = {json};
    w->secret[0] = '\0';           /* a new registration: the old secret means nothing */
    tf_status_t st = step(w, "POST", "/v1/workers", NULL, "application/json", segs, &len, 1,
                          STEP_SLACK_MS);
    free(json);
    if (st != TF_OK)
        return st;
    const tfx_hc_resp_t *r = tfx_hc_req_response(w->req);
    if (r->status != 201)
        return http_status(r);
    uint64_t lease;
    tfp_err_t err;
    if (tfp_parse_worker_reg((const char *)r->body, r->body_len, w->id, sizeof w->id,
                             w->secret, &lease, &err) != TFP_OK)
        return TF_EPROTO;
    w->lease_ms = lease > 3600000u ? 3600000L : (long)lease;
    return TF_OK;
}

tf_status_t tf_worker_new(const char *base, const char *const *routes, size_t n,
                          tf_worker_fn fn, void *user_data, tf_worker_t **out)
{
    if (!base || !routes || n == 0 || !fn || !out)
        return TF_EINVAL;
    tf_worker_t *w = calloc(1, sizeof *w);
    if (!w)
        return TF_ENOMEM;
    tf_status_t st = TF_ENOMEM;
    w->fn = fn;
    w->ud = user_data;
    if (!(w->base = strdup(base)) || !(w->routes = calloc(n, sizeof *w->routes)))
        goto fail;
    for (size_t i = 0; i < n; i++) {
        if (!routes[i] || strlen(routes[i]) > NAME_MAX_LEN) {
            st = TF_EINVAL;
            goto fail;
        }
        if (!(w->routes[i] = strdup(routes[i])))
            goto fail;
        w->nroutes++;
    }
    const char *ca = getenv("TFETCH_CA_FILE");     /* https: the CAs trusted */
    const char *cert = getenv("TFETCH_CERT"), *key = getenv("TFETCH_KEY");  /* and mTLS */
    if (tfx_hc_new(&w->hc) != TFX_HC_OK || tfx_hc_req_new(&w->req) != TFX_HC_OK ||
        (ca && *ca && tfx_hc_set_ca_file(w->hc, ca) != TFX_HC_OK) ||
        (cert && *cert && tfx_hc_set_client_cert(w->hc, cert, key && *key ? key : NULL) !=
                              TFX_HC_OK))
        goto fail;
    tfp_proto_range_t pr = tfp_proto_ours();       /* TFETCH_PROTOCOL_MIN as the client's */
    const char *pmin = getenv("TFETCH_PROTOCOL_MIN");
    if (pmin && *pmin && tfp_proto_raise_min(&pr, pmin, NULL) != TFP_OK) {
        st = TF_EINVAL;
        goto fail;
    }
    tfp_proto_format(pr, w->protocol, sizeof w->protocol, NULL);
    const char *tok = getenv("TFETCH_TOKEN");      /* a token with serve on the routes */
    if (tok && *tok && tfp_auth_token_valid(tok, strlen(tok)))
        snprintf(w->auth, sizeof w->auth, "Bearer %s", tok);
    if ((st = do_register(w)) != TF_OK)
        goto fail;
    *out = w;
    return TF_OK;
fail:
    w->id[0] = '\0';                /* not registered: nothing to unregister */
    tf_worker_free(w);
    return st;
}

/* Sends the handler's answer (or its error) for call_id. */
static tf_status_t answer(tf_worker_t *w, const char *call_id, tf_status_t hst, tf_doc_t *out,
                          const char *msg)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/workers/%s/calls/%s", w->id, call_id);
    if (hst != TF_OK) {
        /* Only statuses the server speaks travel; a client-side one becomes internal. */
        tfp_status_t code = (tfp_status_t)hst;
        if (tfp_status_http(code) <= 0 || strcmp(tfp_status_name(code), "TF_EUNKNOWN") == 0)
            code = TFP_EINTERNAL;
        size_t len;
        char *json = tfp_error_json(code, msg && *msg ? msg : tfp_status_text(code), &len);
        if (!json)
            return TF_ENOMEM;
        const void *segs[1] = {json};
        tf_status_t st = step(w, "POST", path, NULL, "application/json", segs, &len, 1,
                              STEP_SLACK_MS);
        free(json);
        return st;
    }
    tfp_doc_t *d = out ? out->d : NULL;
    tfp_doc_t *empty = NULL;
    if (!d && !(d = empty = tfp_doc_new()))
        return TF_ENOMEM;
    uint8_t *hdr;
    size_t hdr_len;
    tfp_err_t err;
    tf_status_t st = TF_ENOMEM;
    const void **segs = calloc(d->n + 1, sizeof *segs);
    size_t *lens = calloc(d->n + 1, sizeof *lens);
    if (!segs || !lens)
        goto done;
    if (tfp_st_encode_header(d, &hdr, &hdr_len, &err) != TFP_OK) {
        st = tfi_from_proto(err.code);
        goto done;
    }
    size_t k = 0;
    segs[k] = hdr;
    lens[k++] = hdr_len;
    for (size_t i = 0; i < d->n; i++)       /* the encoder lays tensors out in doc order */
        if (d->t[i].nbytes) {
            segs[k] = d->t[i].data;
            lens[k++] = (size_t)d->t[i].nbytes;
        }
    st = step(w, "POST", path, NULL, "application/x-safetensors", segs, lens, k,
              STEP_SLACK_MS + 60000L);
    free(hdr);
done:
    free(segs);
    free(lens);
    tfp_doc_free(empty);
    return st;
}

/* Handles the call a poll brought: decode, run the handler, answer. */
static tf_status_t handle(tf_worker_t *w)
{
    const tfx_hc_resp_t *r = tfx_hc_req_response(w->req);
    char call_id[32], route[256], user[129], rid[129];
    snprintf(call_id, sizeof call_id, "%s", tfx_hc_resp_header(r, "Tfetch-Call"));
    snprintf(route, sizeof route, "%s", tfx_hc_resp_header(r, "Tfetch-Route"));
    snprintf(user, sizeof user, "%s", tfx_hc_resp_header(r, "Tfetch-Call-User"));
    snprintf(rid, sizeof rid, "%s", tfx_hc_resp_header(r, "Tfetch-Call-Request-Id"));
    size_t len;
    uint8_t *body = tfx_hc_req_take_body(w->req, &len);
    tfp_doc_t *d = NULL;
    tf_doc_t *in = NULL, *out = NULL;
    tfp_err_t err;
    char msg[256] = "";
    tf_status_t hst;
    if (!call_id[0]) {
        free(body);
        return TF_EPROTO;
    }
    if (!body || tfp_st_decode(body, len, NULL, &d, &err) != TFP_OK) {
        hst = TF_EPROTO;
        snprintf(msg, sizeof msg, "the worker could not read the call: %.200s",
                 body ? err.msg : "no body");
        free(body);
    } else if (tfi_doc_wrap(d, body, &in) != TF_OK) {
        tfp_doc_free(d);
        free(body);
        hst = TF_ENOMEM;
    } else {
        tf_call_t call = {route, user, rid, call_id};
        hst = w->fn(&call, in, &out, msg, sizeof msg, w->ud);
        if (hst == TF_OK && out == NULL)
            out = NULL;             /* an empty answer */
    }
    tf_status_t st = answer(w, call_id, hst, hst == TF_OK ? out : NULL, msg);
    tf_doc_free(out);
    tf_doc_free(in);
    return st;
}

tf_status_t tf_worker_serve(tf_worker_t *w, long timeout_ms)
{
    if (!w)
        return TF_EINVAL;
    uint64_t t0 = tfx_now_ms(), lost_since = 0;
    int lost = 0;
    char path[128], query[32];
    snprintf(path, sizeof path, "/v1/workers/%s/next", w->id);
    w->stop = 0;
    while (!w->stop) {
        long left = timeout_ms < 0 ? w->lease_ms : timeout_ms - (long)(tfx_now_ms() - t0);
        if (left <= 0)
            return TF_OK;
        long wait = w->lease_ms / 2 < left ? w->lease_ms / 2 : left;
        snprintf(query, sizeof query, "wait=%ld", wait);
        tf_status_t st = step(w, "GET", path, query, NULL, NULL, NULL, 0, wait + STEP_SLACK_MS);
        const tfx_hc_resp_t *r = tfx_hc_req_response(w->req);
        if (st != TF_OK) {
            /* The server is unreachable: keep trying for a lease, then give up. */
            if (!lost) {
                lost = 1;
                lost_since = tfx_now_ms();
            } else if ((long)(tfx_now_ms() - lost_since) > w->lease_ms) {
                return st;
            }
            struct timespec ts = {0, 100 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        lost = 0;
        if (r->status == 204)
            continue;
        if (r->status == 404) {             /* dropped (lease ran out): register again */
            if ((st = do_register(w)) != TF_OK)
                return st;
            snprintf(path, sizeof path, "/v1/workers/%s/next", w->id);
            continue;
        }
        if (r->status != 200)
            return http_status(r);
        if ((st = handle(w)) != TF_OK && st != TF_EPROTO)
            return st;
    }
    return TF_OK;
}

void tf_worker_stop(tf_worker_t *w)
{
    if (w)
        w->stop = 1;
}

const char *tf_worker_id(const tf_worker_t *w) { return w ? w->id : ""; }

long tf_worker_lease_ms(const tf_worker_t *w) { return w ? w->lease_ms : 0; }

void tf_worker_free(tf_worker_t *w)
{
    if (!w)
        return;
    if (w->id[0] && w->hc && w->req) {
        char path[128];
        snprintf(path, sizeof path, "/v1/workers/%s", w->id);
        step(w, "DELETE", path, NULL, NULL, NULL, NULL, 0, 5000);
    }
    tfx_hc_req_free(w->req);
    tfx_hc_free(w->hc);
    for (size_t i = 0; i < w->nroutes; i++)
        free(w->routes[i]);
    free(w->routes);
    free(w->base);
    free(w);
}
