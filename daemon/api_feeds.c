/* api_feeds.c - the device feeds' endpoints (doc/PROTOCOL.md, "Feeds"; the queues are
 * daemon/feeds.c):
 *
 *   PUT    /v1/feeds/{feed}                      declare -> 201 / 200 (same) / 409 (different)
 *   GET    /v1/feeds, /v1/feeds/{feed}           names; one feed's stats
 *   DELETE /v1/feeds/{feed}                      -> 204
 *   POST   /v1/feeds/{feed}[/devices/{dev}]/infeed   an item or a round -> 201 {seq, round,
 *                                                generation}; 200 for a seq seen; 429 full
 *   POST   /v1/feeds/{feed}/devices/{dev}/pop?wait=MS&ack=P    the next item; 204 none
 *                                     (&rewind=1: what was delivered and not acked again)
 *   POST   /v1/feeds/{feed}/devices/{dev}/ack?through=P        -> 204
 *   POST   /v1/feeds/{feed}/devices/{dev}/detach?ack=P         -> 204 (held items go back,
 *                                     the consumer's waiting pop ends with 204)
 *   POST   /v1/feeds/{feed}/devices/{dev}/outfeed              -> 201 {seq}
 *   GET    /v1/feeds/{feed}/outfeed?after=S&wait=MS            the next result; 204; 410
 *   POST   /v1/feeds/{feed}/done, /reset
 *
 * A request that must wait (a full queue with Prefer: wait, an empty one with ?wait) arms
 * its context's waiter on the feed's key and suspends without holding a thread; the queues'
 * wake callback (server.c) notifies the waiters, whose timer ends the wait at the deadline.
 * The request's feed state (the feed reference, the decoded item, what it waits on) lives
 * in a tfd_feed_req_t freed by api_finish_feed.
 *
 * Runs on the transports' threads; see api.h.
 */
#include "config.h"
#include "daemon/api.h"
#include "daemon/shm.h"
#include "proto/jsonw.h"
#include "transports/buf.h"
#include "transports/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tfd_feed_req {
    tfd_feed_t *f;
    int dev;                        /* the path's device; -1 for none */
    int started;                    /* the first attempt ran (body taken, ack applied) */
    /* infeed / outfeed push: the item, held across waits */
    tfd_blob_t *blobs[TFP_FEED_MAX_DEVICES];
    unsigned nrefs;                 /* distinct references in blobs (broadcast: 1) */
    uint64_t bytes;
    char producer[TFP_MAX_USER_ID + 1];
    /* waiting */
    int what;                       /* TFD_FEED_* */
    unsigned wdev;
    uint64_t ev, generation;
    uint64_t attach;                /* pop: the attachment it waits under (tfd_feed_pop) */
    uint64_t wait_start_ns;
    char key[TFD_FEED_KEY_SIZE];
};

typedef struct tfd_feed_req feed_req_t;

static feed_req_t *feed_req(tfx_req_t *r, tfd_ctx_t *c)
{
    if (c->feed)
        return c->feed;
    feed_req_t *fr = calloc(1, sizeof *fr);
    if (!fr) {
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        return NULL;
    }
    c->feed = fr;
    fr->dev = -1;
    if (!(fr->f = tfd_feeds_get(c->api->feeds, c->name))) {
        api_fail(r, c, TFP_ENOTFOUND, "no feed named '%s'", c->name);
        return NULL;
    }
    if (c->op->sub[0] && (fr->dev = tfp_feed_dev_index(tfd_feed_decl(fr->f), c->op->sub)) < 0) {
        api_fail(r, c, TFP_ENOTFOUND, "feed '%s' has no device '%s'", c->name, c->op->sub);
        return NULL;
    }
    return fr;
}

/* ---- waiting ------------------------------------------------------------------------------ */

static int changed(void *arg)
{
    feed_req_t *fr = arg;
    return tfd_feed_events(fr->f, fr->what, fr->wdev) != fr->ev;
}

/* Ends a wait's clock: producers' blocked time, consumers' starved time. */
static void end_wait(tfd_ctx_t *c)
{
    feed_req_t *fr = c->feed;
    if (!fr || !fr->wait_start_ns)
        return;
    uint64_t ns = tfx_now_ns() - fr->wait_start_ns;
    fr->wait_start_ns = 0;
    if (fr->what == TFD_FEED_IN)
        tfd_feed_add_blocked(fr->f, ns);
    else if (fr->what == TFD_FEED_POP)
        tfd_feed_add_starved(fr->f, fr->wdev, ns);
}

/* The operation cannot proceed until counter ev of what/dev changes. 1: the request waits
 * (suspended, or run again at once); 0: it may not wait (no wait asked, or the deadline
 * passed): answer now; -1: answered (too many waiters, shutting down). */
static int feed_wait(tfx_req_t *r, tfd_ctx_t *c, int what, unsigned dev, uint64_t ev)
{
    feed_req_t *fr = c->feed;
    if (c->waiter.state == TFD_WAIT_SHUTDOWN) {
        api_fail(r, c, TFP_EBUSY, "the server is shutting down");
        return -1;
    }
    if (c->waiter.deadline_ms == 0 || c->waiter.state == TFD_WAIT_EXPIRED ||
        tfx_now_ms() >= c->waiter.deadline_ms)
        return 0;
    fr->what = what;
    fr->wdev = dev;
    fr->ev = ev;
    tfd_feed_key(fr->key, c->name, what, dev);
    c->waiter.name = fr->key;
    if (!fr->wait_start_ns)
        fr->wait_start_ns = tfx_now_ns();
    int armed = tfd_waiters_arm(c->api->waiters, &c->waiter, changed, fr);
    if (armed == 1) {
        tfx_req_suspend(r);
        return 1;
    }
    if (armed == 0) {                           /* it changed meanwhile: try again */
        c->waiter.state = TFD_WAIT_WOKEN;
        tfx_req_suspend(r);
        tfx_req_resume(r);
        return 1;
    }
    if (armed == -1)
        api_fail(r, c, TFP_EBUSY, "too many waiting requests (max-waiters %u)",
                 TFD_LIVE(c->api->cfg->max_waiters));
    else
        api_fail(r, c, TFP_EBUSY, "the server is shutting down");
    return -1;
}

void api_finish_feed(tfx_req_t *r, tfd_ctx_t *c)
{
    (void)r;
    feed_req_t *fr = c->feed;
    tfd_waiters_disarm(c->api->waiters, &c->waiter);
    if (!fr)
        return;
    if (fr->f)
        end_wait(c);
    for (unsigned i = 0; i < fr->nrefs; i++)
        tfd_blob_unref(fr->blobs[i]);
    tfd_feed_unref(fr->f);
    free(fr);
    c->feed = NULL;
}

/* ---- answers ------------------------------------------------------------------------------ */

static void respond_json_status(tfx_req_t *r, tfd_ctx_t *c, unsigned status, tfp_jw_t *w)
{
    size_t len;
    char *text = tfp_jw_finish(w, &len);
    if (!text) {
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        return;
    }
    api_respond_text(r, status, "application/json", text, len);
}

static void kv_uint(tfp_jw_t *w, const char *k, uint64_t v)
{
    tfp_jw_key(w, k);
    tfp_jw_uint(w, v);
}

/* A device queue's consumer as c's principal may see it: its own, or any with admin on
 * the feed (authentication off: every one). Another principal's id would let its reader act
 * as that consumer (pop, ack, detach), so others see only that one is attached. */
static const char *consumer_seen(tfd_ctx_t *c, const char *feed, const tfd_feed_dev_stats_t *q)
{
    if (!q->consumer[0])
        return NULL;
    if (!tfd_auth_on(c->api->auth) || strcmp(q->consumer_by, c->op->who.principal) == 0 ||
        tfd_auth_allows(c->api->auth, &c->op->who, 0, TFP_RIGHT_ADMIN, feed))
        return q->consumer;
    return TFD_FEED_CONSUMER_HIDDEN;
}

static void write_stats(tfp_jw_t *w, tfd_ctx_t *c, tfd_feed_t *f)
{
    const tfp_feed_decl_t *d = tfd_feed_decl(f);
    tfd_feed_stats_t *st = malloc(sizeof *st);
    if (!st) {
        tfp_jw_null(w);
        return;
    }
    tfd_feed_stats(f, st);
    tfp_jw_obj_begin(w);
    tfp_jw_key(w, "name");
    tfp_jw_str(w, st->name);
    tfp_jw_key(w, "owner");
    if (st->owner[0])
        tfp_jw_str(w, st->owner);
    else
        tfp_jw_null(w);
    tfp_jw_key(w, "fanout");
    tfp_jw_str(w, tfp_fanout_name(d->fanout));
    tfp_jw_key(w, "devices");
    tfp_jw_arr_begin(w);
    for (unsigned i = 0; i < d->ndev; i++) {
        const tfd_feed_dev_stats_t *q = &st->dev[i];
        char idx[16];
        snprintf(idx, sizeof idx, "%u", i);
        tfp_jw_obj_begin(w);
        tfp_jw_key(w, "name");
        tfp_jw_str(w, d->named ? d->dev_names[i] : idx);
        kv_uint(w, "depth", q->depth);
        kv_uint(w, "bytes", q->bytes);
        kv_uint(w, "high_water", q->high_water);
        kv_uint(w, "published", q->published);
        kv_uint(w, "delivered", q->delivered);
        kv_uint(w, "released", q->released);
        tfp_jw_key(w, "consumer");
        const char *seen = consumer_seen(c, st->name, q);
        if (seen)
            tfp_jw_str(w, seen);
        else
            tfp_jw_null(w);
        kv_uint(w, "redeliveries", q->redeliveries);
        kv_uint(w, "items_in", q->items_in);
        kv_uint(w, "items_out", q->items_out);
        tfp_jw_obj_end(w);
    }
    tfp_jw_arr_end(w);
    tfp_jw_key(w, "signature");
    tfp_jw_arr_begin(w);
    for (size_t i = 0; i < d->nsig; i++) {
        tfp_jw_obj_begin(w);
        tfp_jw_key(w, "name");
        tfp_jw_str(w, d->sig[i].name);
        tfp_jw_key(w, "dtype");
        tfp_jw_str(w, tfp_dtype_name(d->sig[i].dtype));
        tfp_jw_key(w, "shape");
        tfp_jw_arr_begin(w);
        for (int k = 0; k < d->sig[i].rank; k++)
            tfp_jw_uint(w, d->sig[i].shape[k]);
        tfp_jw_arr_end(w);
        tfp_jw_obj_end(w);
    }
    tfp_jw_arr_end(w);
    kv_uint(w, "max_items", d->max_items);
    kv_uint(w, "max_bytes", d->max_bytes);
    kv_uint(w, "lease_ms", d->lease_ms);
    kv_uint(w, "outfeed_items", d->outfeed_items);
    kv_uint(w, "generation", st->generation);
    tfp_jw_key(w, "done");
    tfp_jw_bool(w, st->done);
    kv_uint(w, "dropped", st->dropped);
    tfp_jw_key(w, "outfeed");
    tfp_jw_obj_begin(w);
    kv_uint(w, "first_seq", st->out_first);
    kv_uint(w, "last_seq", st->out_last);
    tfp_jw_obj_end(w);
    tfp_jw_obj_end(w);
    free(st);
}

static void respond_stats(tfx_req_t *r, tfd_ctx_t *c, unsigned status, tfd_feed_t *f)
{
    tfp_jw_t w;
    tfp_jw_init(&w);
    write_stats(&w, c, f);
    respond_json_status(r, c, status, &w);
}

/* A typed answer field (proto/answer.h): each transport renders it its own way. */
static void answer_u64(tfx_req_t *r, tfp_af_t f, uint64_t v)
{
    tfp_answer_set_u64(tfx_req_answer(r), f, v);
}

/* ---- declaring and inspecting ------------------------------------------------------------- */

void api_handle_feed_declare(tfx_req_t *r, tfd_ctx_t *c)
{
    size_t len;
    const uint8_t *body = tfx_req_body(r, &len);
    tfp_feed_decl_t d;
    tfp_err_t err;
    if (tfp_feed_decl_parse((const char *)body, body ? len : 0, &d, &err) != TFP_OK) {
        api_fail(r, c, err.code, "%s", err.msg);
        return;
    }
    tfd_feed_t *f = NULL;
    int created = 0;
    /* With authentication on the declaring principal owns the feed (feeds-per-user counts
     * per principal, whatever user ids it sends); without, the user id does. */
    const char *owner = c->op->who.principal[0] ? c->op->who.principal : c->user;
    tfp_status_t st = tfd_feeds_declare(c->api->feeds, c->name, owner, &d, &f, &created, &err);
    tfp_feed_decl_clear(&d);
    if (st != TFP_OK) {
        api_fail(r, c, st, "%s", err.msg);
        return;
    }
    respond_stats(r, c, created ? 201 : 200, f);
    tfd_feed_unref(f);
}

void api_handle_feed_stats(tfx_req_t *r, tfd_ctx_t *c)
{
    feed_req_t *fr = feed_req(r, c);
    if (fr)
        respond_stats(r, c, 200, fr->f);
}

typedef struct {
    tfp_jw_t *w;
    tfd_ctx_t *c;
} feed_list_t;

static void list_one(const char *name, void *arg)
{
    feed_list_t *fl = arg;          /* only the feeds the principal may read */
    if (tfd_auth_allows(fl->c->api->auth, &fl->c->op->who, 0, TFP_RIGHT_READ, name))
        tfp_jw_str(fl->w, name);
}

void api_handle_feed_list(tfx_req_t *r, tfd_ctx_t *c)
{
    tfp_jw_t w;
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "feeds");
    tfp_jw_arr_begin(&w);
    feed_list_t fl = {&w, c};
    tfd_feeds_each(c->api->feeds, list_one, &fl);
    tfp_jw_arr_end(&w);
    tfp_jw_obj_end(&w);
    api_respond_json(r, c, &w);
}

void api_handle_feed_delete(tfx_req_t *r, tfd_ctx_t *c)
{
    if (tfd_feeds_delete(c->api->feeds, c->name) == 0)
        tfx_respond(r, 204, NULL, "", 0, NULL, NULL);
    else
        api_fail(r, c, TFP_ENOTFOUND, "no feed named '%s'", c->name);
}

void api_handle_feed_done(tfx_req_t *r, tfd_ctx_t *c)
{
    feed_req_t *fr = feed_req(r, c);
    if (!fr)
        return;
    tfd_feed_done(fr->f);
    respond_stats(r, c, 200, fr->f);
}

void api_handle_feed_reset(tfx_req_t *r, tfd_ctx_t *c)
{
    feed_req_t *fr = feed_req(r, c);
    if (!fr)
        return;
    uint64_t gen, dropped;
    tfd_feed_reset(fr->f, &gen, &dropped);
    tfp_jw_t w;
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    kv_uint(&w, "generation", gen);
    kv_uint(&w, "dropped", dropped);
    tfp_jw_obj_end(&w);
    api_respond_json(r, c, &w);
}

int api_feed_raw_name(const tfd_ctx_t *c, char *buf, size_t size)
{
    tfd_feed_t *f = tfd_feeds_get(c->api->feeds, c->name);
    int ok = f && tfd_feed_decl(f)->nsig == 1;
    if (ok)
        snprintf(buf, size, "%s", tfd_feed_decl(f)->sig[0].name);
    tfd_feed_unref(f);
    return ok;
}

/* ---- producers ---------------------------------------------------------------------------- */

/* The producer stream's id: Tfetch-Producer, else the user id, else "anon". */
static void take_producer(tfd_ctx_t *c, feed_req_t *fr)
{
    const char *p = c->op->feed.producer[0] ? c->op->feed.producer
                                            : c->user[0] ? c->user : "anon";
    snprintf(fr->producer, sizeof fr->producer, "%s", p);
}

/* The request's document as the item's blobs: one (per_device, broadcast, outfeed) holding
 * the body itself, or one per device with its rows (split). 0, or -1 after answering. */
static int take_item(tfx_req_t *r, tfd_ctx_t *c, feed_req_t *fr, int check, int split)
{
    const tfp_feed_decl_t *d = tfd_feed_decl(fr->f);
    uint8_t *base;
    size_t cap, len;
    tfp_doc_t *doc;
    tfp_err_t err;
    if (api_body_doc(r, c, &base, &cap, &len, &doc) != 0)
        return -1;
    /* A body received into a ring's slot stays there: the blob gives the slot back. */
    tfd_blob_t *whole = c->body_give_back
                            ? tfd_blob_new_lent(base, cap, base, len, doc, c->body_give_back,
                                                c->body_give_back_arg)
                            : tfd_blob_new(base, cap, base, len, doc);
    c->body_give_back = NULL;
    if (!whole) {
        api_fail(r, c, TFP_ENOMEM, "out of memory");
        return -1;
    }
    if (check && tfp_feed_sig_check(d, whole->doc, &err) != TFP_OK) {
        tfd_blob_unref(whole);
        api_fail(r, c, err.code, "feed '%s': %s", c->name, err.msg);
        return -1;
    }
    fr->bytes = tfp_doc_data_bytes(whole->doc);
    if (!split) {
        fr->blobs[0] = whole;
        fr->nrefs = 1;
        for (unsigned k = 1; check && k < d->ndev; k++)     /* broadcast: the same blob */
            fr->blobs[k] = whole;
        return 0;
    }
    /* Each device's rows are written once, into its ring's free slot when one is attached
     * on this host (then sent from there), else into memory of their own. */
    for (unsigned k = 0; k < d->ndev; k++) {
        tfp_doc_t *part = NULL;
        if (tfp_feed_split(whole->doc, d->ndev, k, &part, &err) != TFP_OK ||
            !(fr->blobs[k] = api_encode_blob_for(part, c->api->shm, fr->f, k, &err))) {
            tfp_doc_free(part);
            tfd_blob_unref(whole);
            api_fail(r, c, err.code, "%s", err.msg);
            return -1;
        }
        fr->nrefs = k + 1;
        tfp_doc_free(part);
    }
    fr->bytes /= d->ndev;
    tfd_blob_unref(whole);
    return 0;
}

/* api_feed_lend for the feed f the request names (looked up by the caller). */
static int lend_in(tfd_ctx_t *c, tfd_feed_t *f, uint64_t len, uint8_t **buf, size_t *cap,
                   void (**give_back)(void *), void **arg)
{
    if (len > SIZE_MAX)
        return 0;
    const tfp_feed_decl_t *d = tfd_feed_decl(f);
    int lent = 0;
    if (c->op->sub[0]) {                /* per_device: that device's ring */
        int dev = tfp_feed_dev_index(d, c->op->sub);
        lent = dev >= 0 && d->fanout == TFP_FANOUT_PER_DEVICE &&
               tfd_shm_lend(c->api->shm, f, (unsigned)dev, (size_t)len, buf, cap, give_back,
                            arg) == 0;
    } else if (d->fanout == TFP_FANOUT_BROADCAST) {
        /* A broadcast round: into the first ring with a slot; that device's consumer reads
         * it in place, the others' rings get it copied from there (one copy fewer than from
         * the heap into each). */
        for (unsigned dev = 0; !lent && dev < d->ndev; dev++)
            lent = tfd_shm_lend(c->api->shm, f, dev, (size_t)len, buf, cap, give_back,
                                arg) == 0;
    }
    return lent;
}

int api_feed_lend(tfd_ctx_t *c, uint64_t len, uint8_t **buf, size_t *cap,
                  void (**give_back)(void *), void **arg)
{
    if (!c->api->shm || c->op->kind != TFP_OP_FEED_INFEED)
        return 0;
    tfd_feed_t *f = tfd_feeds_get(c->api->feeds, c->name);      /* none: the handler says so */
    int lent = f && lend_in(c, f, len, buf, cap, give_back, arg);
    tfd_feed_unref(f);
    return lent;
}

const api_lender_t api_feed_lender = {api_feed_begin_lent, api_feed_lend};

int api_feed_begin_lent(tfx_req_t *r, tfd_ctx_t *c, uint64_t max)
{
    const tfp_op_t *op = c->op;
    int raw = op->body.kind == TFP_BODY_RAW;
    int st = op->body.kind == TFP_BODY_SAFETENSORS;
    if (!c->api->shm || op->kind != TFP_OP_FEED_INFEED || (!raw && !st) ||
        (st && (op->body.length == 0 || (op->body.length > 0 &&
                                         (uint64_t)op->body.length > max))))
        return 0;
    /* A raw body lands after the safetensors header api_begin_doc made for it. A chunked
     * safetensors body of unknown length gets a slot too (its payload is the signature's,
     * its header has the slot's room): one that outgrows it moves to memory of its own with
     * what arrived, as before. */
    tfd_feed_t *f = tfd_feeds_get(c->api->feeds, c->name);
    if (!f)
        return 0;                       /* the handler says so */
    uint64_t body = raw ? op->body.nbytes : op->body.length > 0 ? (uint64_t)op->body.length
                                                                 : tfd_feed_decl(f)->item_bytes;
    uint64_t len = c->raw_hdr_len + body;
    uint8_t *buf;
    size_t cap;
    void (*give_back)(void *);
    void *arg;
    int lent = len >= body && lend_in(c, f, len, &buf, &cap, &give_back, &arg);
    tfd_feed_unref(f);
    if (!lent)
        return 0;
    tfx_req_accept_body_into(r, c->raw_hdr_len, max, buf, cap, give_back, arg);
    return 1;
}

void api_handle_feed_infeed(tfx_req_t *r, tfd_ctx_t *c)
{
    feed_req_t *fr = feed_req(r, c);
    if (!fr)
        return;
    const tfp_feed_decl_t *d = tfd_feed_decl(fr->f);
    int round = fr->dev < 0;
    if (!fr->started) {
        fr->started = 1;
        if (round != (d->fanout != TFP_FANOUT_PER_DEVICE)) {
            api_fail(r, c, TFP_ECONFLICT, round ? "feed '%s' is per_device: infeed to "
                     "/v1/feeds/%s/devices/{dev}/infeed" : "feed '%s' takes rounds for every "
                     "device (%s): infeed to /v1/feeds/%s/infeed", c->name,
                     round ? c->name : tfp_fanout_name(d->fanout), c->name);
            return;
        }
        if (take_item(r, c, fr, 1, d->fanout == TFP_FANOUT_SPLIT) != 0)
            return;
        take_producer(c, fr);
    }
    /* Retries after a wait must find the generation of the first attempt. */
    tfd_infeed_t in = {fr->producer, c->op->feed.seq, fr->dev, fr->blobs, fr->bytes,
                       fr->generation};
    tfd_infeed_res_t res = {0};
    uint64_t ev = 0;
    tfp_err_t err;
    tfp_status_t st = tfd_feed_infeed(fr->f, &in, &res, &ev, &err);
    if (!fr->generation)
        fr->generation = res.generation;
    if (st == TFP_ECONFLICT && res.ahead) {
        /* Ahead of its stream: with a wait, it waits for the pushes before it. */
        int w = feed_wait(r, c, TFD_FEED_IN, 0, ev);
        if (w != 0)
            return;
        end_wait(c);
        api_fail(r, c, st, "%s", err.msg);
        return;
    }
    if (st == TFP_EFULL) {
        int w = feed_wait(r, c, TFD_FEED_IN, 0, ev);
        if (w != 0)
            return;
        end_wait(c);
        answer_u64(r, TFP_AF_RETRY_AFTER, 1);
        api_fail(r, c, TFP_EFULL, "%s", err.msg);
        return;
    }
    end_wait(c);
    if (st != TFP_OK) {
        api_fail(r, c, st, "%s", err.msg);
        return;
    }
    answer_u64(r, TFP_AF_GENERATION, res.generation);
    tfp_jw_t w;
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    kv_uint(&w, "seq", res.seq);
    kv_uint(&w, "round", res.round);
    kv_uint(&w, "generation", res.generation);
    tfp_jw_obj_end(&w);
    respond_json_status(r, c, res.dup ? 200 : 201, &w);
}

/* ---- consumers ---------------------------------------------------------------------------- */

void api_handle_feed_pop(tfx_req_t *r, tfd_ctx_t *c)
{
    feed_req_t *fr = feed_req(r, c);
    if (!fr)
        return;
    const uint64_t *ack = NULL;
    int first = !fr->started;
    if (first) {
        fr->started = 1;
        if (c->op->feed.has_ack)
            ack = &c->op->feed.ack;
    }
    tfd_feed_item_t it;
    uint64_t ev = 0;
    tfp_err_t err;
    unsigned dev = (unsigned)fr->dev;
    tfp_status_t st = tfd_feed_pop(fr->f, dev, c->op->feed.consumer, c->op->who.principal,
                                   ack, first && c->op->feed.rewind, c->waiter.deadline_ms,
                                   &fr->attach, &it, &ev, &err);
    if (st == TFP_ECANCELED) {          /* its consumer detached while it waited */
        end_wait(c);
        answer_u64(r, TFP_AF_GENERATION, it.generation);
        tfx_respond(r, 204, NULL, "", 0, NULL, NULL);
        return;
    }
    if (st == TFP_EAGAIN) {
        if (first)
            fr->generation = it.generation;
        if (it.generation == fr->generation) {   /* a reset ends the wait */
            int w = feed_wait(r, c, TFD_FEED_POP, dev, ev);
            if (w != 0)
                return;
        }
        end_wait(c);
        answer_u64(r, TFP_AF_GENERATION, it.generation);
        tfx_respond(r, 204, NULL, "", 0, NULL, NULL);
        return;
    }
    end_wait(c);
    if (st != TFP_OK) {
        api_fail(r, c, st, "%s", err.msg);
        return;
    }
    answer_u64(r, TFP_AF_POSITION, it.position);
    answer_u64(r, TFP_AF_SEQ, it.seq);
    answer_u64(r, TFP_AF_ROUND, it.round);
    answer_u64(r, TFP_AF_GENERATION, it.generation);
    api_serve_blob(r, c, it.blob);
}

/* 204, or the failure. */
static void answer_204(tfx_req_t *r, tfd_ctx_t *c, tfp_status_t st, const tfp_err_t *err)
{
    if (st != TFP_OK)
        api_fail(r, c, st, "%s", err->msg);
    else
        tfx_respond(r, 204, NULL, "", 0, NULL, NULL);
}

void api_handle_feed_ack(tfx_req_t *r, tfd_ctx_t *c)
{
    feed_req_t *fr = feed_req(r, c);
    if (!fr)
        return;
    tfp_err_t err;
    answer_204(r, c, tfd_feed_ack(fr->f, (unsigned)fr->dev, c->op->feed.consumer,
                                  c->op->who.principal, c->op->feed.ack, &err), &err);
}

void api_handle_feed_detach(tfx_req_t *r, tfd_ctx_t *c)
{
    feed_req_t *fr = feed_req(r, c);
    if (!fr)
        return;
    tfp_err_t err;
    answer_204(r, c, tfd_feed_detach(fr->f, (unsigned)fr->dev, c->op->feed.consumer,
                                     c->op->who.principal,
                                     c->op->feed.has_ack ? &c->op->feed.ack : NULL, &err),
               &err);
}

/* ---- outfeed ------------------------------------------------------------------------------ */

void api_handle_feed_outfeed_push(tfx_req_t *r, tfd_ctx_t *c)
{
    feed_req_t *fr = feed_req(r, c);
    if (!fr)
        return;
    if (take_item(r, c, fr, 0, 0) != 0)
        return;
    take_producer(c, fr);
    uint64_t seq = 0;
    int dup = 0;
    tfp_err_t err;
    tfp_status_t st = tfd_feed_outfeed_push(fr->f, (unsigned)fr->dev, fr->producer,
                                            c->op->feed.seq, fr->blobs[0], fr->bytes, &seq,
                                            &dup, &err);
    if (st != TFP_OK) {
        api_fail(r, c, st, "%s", err.msg);
        return;
    }
    tfp_jw_t w;
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    kv_uint(&w, "seq", seq);
    tfp_jw_obj_end(&w);
    respond_json_status(r, c, dup ? 200 : 201, &w);
}

void api_handle_feed_outfeed_get(tfx_req_t *r, tfd_ctx_t *c)
{
    feed_req_t *fr = feed_req(r, c);
    if (!fr)
        return;
    tfd_outfeed_item_t it;
    uint64_t ev = 0, resume = 0;
    tfp_err_t err;
    tfp_status_t st = tfd_feed_outfeed_get(fr->f, c->op->feed.after, &it, &ev, &resume, &err);
    if (st == TFP_EAGAIN) {
        if (feed_wait(r, c, TFD_FEED_OUT, 0, ev) == 0)
            tfx_respond(r, 204, NULL, "", 0, NULL, NULL);
        return;
    }
    if (st == TFP_EGONE) {
        tfp_jw_t w;
        tfp_jw_init(&w);
        tfp_jw_obj_begin(&w);
        tfp_jw_key(&w, "error");
        tfp_jw_str(&w, err.msg);
        tfp_jw_key(&w, "code");
        tfp_jw_str(&w, tfp_status_name(TFP_EGONE));
        kv_uint(&w, "resume_after", resume);
        tfp_jw_obj_end(&w);
        c->code = TFP_EGONE;
        respond_json_status(r, c, 410, &w);
        return;
    }
    if (st != TFP_OK) {
        api_fail(r, c, st, "%s", err.msg);
        return;
    }
    answer_u64(r, TFP_AF_SEQ, it.seq);
    answer_u64(r, TFP_AF_DEVICE, it.dev);
    answer_u64(r, TFP_AF_GENERATION, it.generation);
    api_serve_blob(r, c, it.blob);
}
