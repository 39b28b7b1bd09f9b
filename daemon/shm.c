/* shm.c - the same-host shared-memory socket and its lending policy (see shm.h).
 *
 * One thread polls the listener, an eventfd (stop) and up to MAX_CONNS connections. A
 * connection's first message must be HELLO with a token issued in the last token_ttl_ms
 * (single use); anything else, or a malformed message, closes it. GET, COMMIT and CALL are
 * operations run through the router (transports/shm_server.h); what is left here is what
 * shm lends: each connection owns its leases (an answer's hold each: a stored document's
 * reference, or a call's answer), its lent PUT and CALL buffers, staging buffers and ring;
 * leases end with RELEASE,
 * with the connection, or at their expiry, which the poll timeout wakes for. Only this thread touches connections and
 * leases; the mutex covers the tokens (a one-time token table, daemon/otokens.h: looked up
 * by hash, bounded per principal as the upgrade's are) and the counters /metrics reads.
 */
#include "config.h"
#include "daemon/shm.h"
#include "daemon/log.h"
#include "daemon/otokens.h"
#include "daemon/ring.h"
#include "daemon/router.h"
#include "proto/shmframe.h"
#include "transports/clock.h"
#include "transports/shm.h"
#include "transports/shm_server.h"

#include <errno.h>
#include <stdatomic.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 256
#define MAX_TOKENS 1024
#define MAX_LEASES_PER_CONN 4096
#define MAX_ALLOCS_PER_CONN 16
#define MAX_TOKENS_PER_CONN 16      /* TOKENs one connection may hold unused at once */
#define MAX_STAGES_PER_CONN 16
/* A GET's answer lent to the peer: its memfd's hold (a stored document's reference, or an
 * answer's own copy), counted in the lease bound until RELEASE, the connection's end or
 * expiry. */
typedef struct {
    uint64_t id;
    void (*hold)(void *arg);
    void *hold_arg;
    uint64_t len;
    uint64_t expires_ms;
} lease_t;

/* A buffer lent for a PUT (ALLOC), until COMMIT or the connection ends. */
typedef struct {
    uint64_t id;
    tfx_shm_t m;
    uint64_t reserved;              /* store bytes reserved for it */
    uint64_t bound;                 /* a CALL's buffer: its bytes in the lease bound */
} alloc_t;

/* A staging buffer (STAGE): the producer's, writable by it and reused for its pushes;
 * request threads copy documents out of it (tfd_shm_staged_get). Mapped read-only here. */
struct tfd_stage {
    uint64_t id;                    /* random, never 0: what a staged body names */
    tfx_shm_t m;
    char principal[TFP_MAX_USER_ID + 1];    /* whose (authentication on); "" with it off */
    unsigned refs;                  /* the table's, and one per copy going on (stage_lock) */
};

typedef struct {
    int fd;
    long peer_pid, peer_uid;        /* who connected (SO_PEERCRED; -1 unknown), for the log */
    int hello;                      /* presented a valid token */
    int v2;                         /* its HELLO said TFP_SF_HELLO_V2: REPLY's http is read */
    int v3;                         /* ... TFP_SF_HELLO_V3: answer lines after the ETag too */
    tfp_op_who_t who;               /* the credential its token was issued to */
    char owner[TFD_OTOK_MAX_OWNER]; /* whose tokens its TOKENs count as (its token's owner) */
    lease_t *leases;
    size_t n, cap;
    alloc_t allocs[MAX_ALLOCS_PER_CONN];
    size_t nallocs;
    tfd_stage_t *stages[MAX_STAGES_PER_CONN];
    size_t nstages;
    tfd_ring_t *ring;               /* a feed's ring: the connection serves nothing else */
    uint64_t requests;              /* served after HELLO (RING must be the first) */
    uint64_t token_until[MAX_TOKENS_PER_CONN];  /* when each TOKEN it got expires */
} conn_t;


struct tfd_shm {
    tfd_store_t *store;
    tfd_feeds_t *feeds;             /* NULL: no rings */
    tfd_shmpool_t *pool;            /* ready regions for ALLOC, or NULL */
    tfd_waiters_t *waiters;
    tfd_auth_t *auth;                /* NULL or off: nothing is checked */
    tfx_handlers_t h;               /* the router's: what GET and COMMIT run through */
    int has_h;
    uint64_t max_body;
    uint64_t lease_max;
    unsigned lease_ms, token_ttl_ms;
    int listen_fd, stop_fd;
    int wake_fd;                    /* an eventfd: a feed's pop events changed (rings) */
    atomic_uint nrings;
    tfd_ring_acct_t *ring_acct;     /* what the rings' slots hold, closed rings' too */
    pthread_mutex_t ring_lock;      /* rings: what tfd_shm_lend looks through */
    tfd_ring_t *rings[MAX_CONNS];
    size_t nreg;
    pthread_mutex_t stage_lock;     /* stages: what tfd_shm_staged_get looks through */
    tfd_stage_t *stages[MAX_CONNS * MAX_STAGES_PER_CONN];
    size_t nstages;
    char name[TFX_SHM_MAX_NAME + 1];
    int path;                       /* name is a file system path (unlinked at the end) */
    tfx_shm_file_t file;            /* which file it is */
    pthread_t thread;
    conn_t conns[MAX_CONNS];
    size_t nconns;
    uint64_t next_lease;            /* the thread's */
    pthread_mutex_t lock;           /* tokens and st */
    tfd_otokens_t *tokens;          /* of tfp_op_who_t: cred and token_hash of the
                                     * upgrade's principal */
    tfd_shm_stats_t st;
};

/* ---- tokens ------------------------------------------------------------------------------- */

void tfd_shm_set_auth(tfd_shm_t *s, tfd_auth_t *auth) { s->auth = auth; }
void tfd_shm_set_handlers(tfd_shm_t *s, const tfx_handlers_t *h)
{
    s->h = *h;
    s->has_h = 1;
}
void tfd_shm_set_feeds(tfd_shm_t *s, tfd_feeds_t *feeds) { s->feeds = feeds; }
void tfd_shm_set_pool(tfd_shm_t *s, tfd_shmpool_t *pool) { s->pool = pool; }
int tfd_shm_is_file(const tfd_shm_t *s) { return s && s->path; }

void tfd_shm_set_token_quota(tfd_shm_t *s, unsigned per_owner)
{
    pthread_mutex_lock(&s->lock);
    tfd_otokens_set_quota(s->tokens, per_owner);
    pthread_mutex_unlock(&s->lock);
}

int tfd_shm_token(tfd_shm_t *s, char name[TFP_UP_MAX_SHM_SOCKET + 1],
                  char token[TFP_UP_TOKEN_LEN + 1], const tfp_op_who_t *who, const char *owner)
{
    tfp_op_who_t w;
    memset(&w, 0, sizeof w);
    if (who) {
        w.cred = who->cred;
        memcpy(w.token_hash, who->token_hash, sizeof w.token_hash);
    }
    pthread_mutex_lock(&s->lock);
    tfd_otok_result_t got = tfd_otokens_issue(s->tokens, owner ? owner : "", &w, tfx_now_ms(),
                                              s->token_ttl_ms, token, NULL);
    pthread_mutex_unlock(&s->lock);
    memset(&w, 0, sizeof w);
    snprintf(name, TFP_UP_MAX_SHM_SOCKET + 1, "%s", s->name);
    return got == TFD_OTOK_OK ? 0 : got == TFD_OTOK_QUOTA ? -2 : -1;
}

/* Takes token if it was issued and is still valid (single use): its credential into *who,
 * its owner into owner. */
static int take_token(tfd_shm_t *s, const char *token, tfp_op_who_t *who,
                      char owner[TFD_OTOK_MAX_OWNER])
{
    pthread_mutex_lock(&s->lock);
    tfp_op_who_t *w = tfd_otokens_find(s->tokens, token, tfx_now_ms());
    if (w) {
        *who = *w;
        snprintf(owner, TFD_OTOK_MAX_OWNER, "%s", tfd_otokens_owner(s->tokens, w));
        tfd_otokens_take(s->tokens, w);
    }
    pthread_mutex_unlock(&s->lock);
    return w != NULL;
}

/* ---- leases ------------------------------------------------------------------------------- */

/* What counts in the lease bound: GET leases, staging buffers, rings' slots. Under s->lock. */
static uint64_t held_locked(tfd_shm_t *s)
{
    return s->st.leased_bytes + s->st.staged_bytes + tfd_ring_acct_bytes(s->ring_acct);
}

/* Counts len more bytes in the lease bound (and one more in *count, len in *bytes: fields of
 * s->st) when they fit: 1, else 0 and nothing counted. */
static int bound_take(tfd_shm_t *s, uint64_t len, uint64_t *count, uint64_t *bytes)
{
    pthread_mutex_lock(&s->lock);
    uint64_t held = held_locked(s);
    int fits = len <= s->lease_max && held <= s->lease_max - len;
    if (fits) {
        (*count)++;
        *bytes += len;
    }
    pthread_mutex_unlock(&s->lock);
    return fits;
}

/* Takes back what bound_take counted. */
static void bound_give(tfd_shm_t *s, uint64_t len, uint64_t *count, uint64_t *bytes)
{
    pthread_mutex_lock(&s->lock);
    (*count)--;
    *bytes -= len;
    pthread_mutex_unlock(&s->lock);
}

static void lease_end(tfd_shm_t *s, conn_t *c, size_t i, int expired)
{
    lease_t l = c->leases[i];
    pthread_mutex_lock(&s->lock);
    s->st.leases--;
    s->st.leased_bytes -= l.len;
    s->st.expired += expired != 0;
    pthread_mutex_unlock(&s->lock);
    c->leases[i] = c->leases[--c->n];
    l.hold(l.hold_arg);
}

/* Room in c's table for one more lease: 0, or -1 (out of memory, or MAX_LEASES_PER_CONN). */
static int lease_room(conn_t *c)
{
    if (c->n < c->cap)
        return 0;
    size_t ncap = c->cap ? 2 * c->cap : 8;
    lease_t *nl = ncap <= MAX_LEASES_PER_CONN ? realloc(c->leases, ncap * sizeof *nl) : NULL;
    if (!nl)
        return -1;
    c->leases = nl;
    c->cap = ncap;
    return 0;
}

/* tfx_shm_call_t's admit: the answer's len bytes in the lease bound, or TFP_EFULL. */
static tfp_status_t lease_admit(void *arg, uint64_t len, char *msg, size_t msg_size)
{
    tfd_shm_t *s = arg;
    if (bound_take(s, len, &s->st.leases, &s->st.leased_bytes))
        return TFP_OK;
    snprintf(msg, msg_size, "shm: the lease bound (shm-lease-memory) is reached");
    return TFP_EFULL;
}

/* A lease for c on an answer lease_admit counted (room made by lease_room): its id. */
static uint64_t lease_open(tfd_shm_t *s, conn_t *c, const tfx_shm_call_t *call)
{
    lease_t *l = &c->leases[c->n++];
    l->id = ++s->next_lease;
    l->hold = call->hold;
    l->hold_arg = call->hold_arg;
    l->len = call->len;
    l->expires_ms = s->lease_ms ? tfx_now_ms() + s->lease_ms : 0;
    return l->id;
}

/* Takes back what an ALLOC counted (store bytes, or a CALL buffer's in the lease bound). */
static void alloc_unaccount(tfd_shm_t *s, alloc_t *a)
{
    uint64_t none = 1;
    tfd_store_unreserve(s->store, a->reserved);
    a->reserved = 0;
    if (a->bound)
        bound_give(s, a->bound, &none, &s->st.leased_bytes);
    a->bound = 0;
}

static void alloc_drop(tfd_shm_t *s, conn_t *c, size_t i)
{
    alloc_t *a = &c->allocs[i];
    alloc_unaccount(s, a);
    tfx_shm_close(&a->m);
    c->allocs[i] = c->allocs[--c->nallocs];
    tfd_shmpool_kick(s->pool);
}

static void stage_unref(tfd_stage_t *g)
{
    tfx_shm_close(&g->m);
    free(g);
}

/* Ends c's staging buffer i: out of the table at once (no push finds it from here on), its
 * mapping gone once the copies going on from it end. */
static void stage_drop(tfd_shm_t *s, conn_t *c, size_t i)
{
    tfd_stage_t *g = c->stages[i];
    uint64_t size = g->m.size;          /* g may be gone once the lock is dropped */
    c->stages[i] = c->stages[--c->nstages];
    pthread_mutex_lock(&s->stage_lock);
    for (size_t j = 0; j < s->nstages; j++)
        if (s->stages[j] == g) {
            s->stages[j] = s->stages[--s->nstages];
            break;
        }
    int last = --g->refs == 0;
    pthread_mutex_unlock(&s->stage_lock);
    bound_give(s, size, &s->st.stagings, &s->st.staged_bytes);
    if (last)
        stage_unref(g);
}

static void conn_close(tfd_shm_t *s, size_t k)
{
    conn_t *c = &s->conns[k];
    while (c->n)
        lease_end(s, c, c->n - 1, 0);
    while (c->nallocs)
        alloc_drop(s, c, c->nallocs - 1);
    while (c->nstages)
        stage_drop(s, c, c->nstages - 1);
    if (c->ring) {
        pthread_mutex_lock(&s->ring_lock);     /* no lend finds it from here on */
        for (size_t i = 0; i < s->nreg; i++)
            if (s->rings[i] == c->ring) {
                s->rings[i] = s->rings[--s->nreg];
                break;
            }
        pthread_mutex_unlock(&s->ring_lock);
        pthread_mutex_lock(&s->lock);
        s->st.rings--;
        pthread_mutex_unlock(&s->lock);
        atomic_fetch_sub(&s->nrings, 1);
        tfd_ring_free(c->ring);
    }
    free(c->leases);
    close(c->fd);
    s->conns[k] = s->conns[--s->nconns];
    pthread_mutex_lock(&s->lock);
    s->st.connections--;
    pthread_mutex_unlock(&s->lock);
}

/* ---- messages ----------------------------------------------------------------------------- */

static int reply(conn_t *c, const tfp_sf_t *m, int fd)
{
    uint8_t buf[TFP_SF_MAX];
    tfp_err_t err;
    size_t len = tfp_sf_encode(m, buf, sizeof buf, &err);
    if (!len)
        return -1;
    return tfx_shm_send(c->fd, buf, len, fd >= 0 ? &fd : NULL, fd >= 0, &err) == TFP_OK ? 0 : -1;
}

static int reply_error(tfd_shm_t *s, conn_t *c, uint64_t seq, tfp_status_t st, const char *msg)
{
    tfp_sf_t m;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_REPLY;
    m.seq = seq;
    m.status = st;
    m.str_len = strlen(msg) < TFP_SF_MAX_MSG ? strlen(msg) : TFP_SF_MAX_MSG;
    memcpy(m.str, msg, m.str_len);
    m.str[m.str_len] = '\0';
    pthread_mutex_lock(&s->lock);
    s->st.refused++;
    pthread_mutex_unlock(&s->lock);
    return reply(c, &m, -1);
}

/* The rights a lending needs besides an operation's: write (ALLOC), produce or consume
 * (STAGE: a producer's pushes), consume (RING). */
static const tfp_right_t R_WRITE[] = {TFP_RIGHT_WRITE};
static const tfp_right_t R_PUSH[] = {TFP_RIGHT_PRODUCE, TFP_RIGHT_CONSUME};
static const tfp_right_t R_CONSUME[] = {TFP_RIGHT_CONSUME};
#define RIGHTS(a) (a), sizeof(a) / sizeof(a)[0]

/* The router's decision (tfd_router_check) for what c's principal asks to be lent: 0 when
 * it may; else 1 with the refusal answered and *rc the answer's. *who (NULL: not wanted)
 * gets the principal. */
static int refused(tfd_shm_t *s, conn_t *c, const tfp_sf_t *q, const tfp_right_t *rights,
                   size_t n, const char *name, tfp_op_who_t *who, int *rc)
{
    tfp_op_who_t w = c->who;
    char msg[TFP_SF_MAX_MSG];
    tfp_status_t st = tfd_router_check(s->auth, &w, rights, n, name, msg, sizeof msg);
    if (who)
        *who = w;
    if (st == TFP_OK)
        return 0;
    *rc = reply_error(s, c, q->seq, st, msg);
    return 1;
}

void tfd_shm_op(const tfp_op_who_t *who, const tfp_sf_t *q, tfp_op_t *op)
{
    tfp_err_t err;
    tfp_op_kind_t kind = q->op == TFP_SF_COMMIT ? TFP_OP_TENSOR_PUT
                       : q->op == TFP_SF_CALL ? TFP_OP_CALL : TFP_OP_TENSOR_GET;
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->who.cred = who->cred;
    memcpy(op->who.token_hash, who->token_hash, sizeof op->who.token_hash);
    if (kind == TFP_OP_CALL)
        (void)tfp_sf_call_spec(q, op->name, op->who.user, op->who.request_id, &err);
    else
        (void)tfp_sf_target(q, op->name, &op->cond.if_match, &op->cond.if_none_match, &err);
    if (kind == TFP_OP_TENSOR_PUT || kind == TFP_OP_CALL) {
        op->ttl_s = kind == TFP_OP_TENSOR_PUT ? q->b : 0;
        op->body.kind = TFP_BODY_SAFETENSORS;
        op->body.media = TFP_MEDIA_SAFETENSORS;
        op->body.length = (int64_t)q->a;
    }
}

/* The digest fields among q's lines (a COMMIT's Repr-Digest, a GET's Want-Repr-Digest):
 * into op, or a malformed one into e, as HTTP answers it. */
static void shm_digests(const tfp_sf_t *q, tfp_op_t *op, tfp_op_err_t *e)
{
    const char *nl = memchr(q->str, '\n', q->str_len);
    if (nl)
        (void)tfp_op_digest_lines(op, nl, q->str_len - (size_t)(nl - q->str), e);
}

/* Sends call's answer to q: status, HTTP status, the ETag or the message, and for a body its
 * memfd under a new lease. */
static int reply_call(tfd_shm_t *s, conn_t *c, const tfp_sf_t *q, tfx_shm_call_t *call)
{
    tfp_sf_t m;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_REPLY;
    m.seq = q->seq;
    m.status = call->code;
    /* A 0.1.0 client's decoder refuses the word set (it was reserved): it gets 201/204 from
     * a, as before. */
    m.http = c->v2 && !call->declined && call->http >= 100 && call->http <= 599 ? call->http : 0;
    const char *str = call->code != TFP_OK ? call->msg : call->etag;
    m.str_len = strlen(str) < TFP_SF_MAX_MSG ? strlen(str) : TFP_SF_MAX_MSG;
    memcpy(m.str, str, m.str_len);
    m.str[m.str_len] = '\0';
    if (c->v3 && call->code == TFP_OK) {    /* the answer's other fields, as lines */
        char lines[TFP_SF_MAX_MSG];
        size_t n = tfp_answer_lines(&call->ans, ~(1u << TFP_AF_ETAG), lines,
                                    TFP_SF_MAX_MSG - m.str_len);
        if (n) {
            m.str[m.str_len] = '\n';
            memcpy(m.str + m.str_len + 1, lines, n + 1);
            m.str_len += 1 + n;
        }
    }
    pthread_mutex_lock(&s->lock);
    if (call->code != TFP_OK)
        s->st.refused++;
    else if (q->op == TFP_SF_GET)
        s->st.gets++;
    else if (q->op == TFP_SF_CALL)
        s->st.calls++;
    else
        s->st.puts++;
    pthread_mutex_unlock(&s->lock);
    tfp_etags_t tag;
    if (q->op == TFP_SF_COMMIT && call->code == TFP_OK) {
        m.a = call->http == 204;            /* replaced (HTTP 204) or new (201) */
        if (tfp_etags_parse(call->etag, 0, &tag) == 0 && tag.n == 1)
            m.b = tag.tag[0].version;       /* the stored version */
    }
    if (call->fd < 0)
        return reply(c, &m, -1);
    m.lease = lease_open(s, c, call);
    m.a = call->offset;
    m.b = call->len;
    return reply(c, &m, call->fd);
}

/* GET: the tensor_get operation through the router and the handlers; a body's memfd lent. */
static int do_get(tfd_shm_t *s, conn_t *c, const tfp_sf_t *q)
{
    tfp_op_t op;
    tfx_shm_call_t call = {.body = TFX_SHM_NONE, .admit = lease_admit, .admit_arg = s};
    tfp_op_err_t e = {TFP_OK, "", NULL};
    tfd_shm_op(&c->who, q, &op);
    shm_digests(q, &op, &e);
    if (lease_room(c) != 0)
        tfp_op_fail(&e, TFP_EFULL, "shm: this connection holds as many leases as it may");
    tfx_shm_call(&s->h, &op, &e, "shm", &call);
    return reply_call(s, c, q, &call);
}

/* The answer to ALLOC or STAGE q: the buffer's memfd fd, lease = its id, a = its size. */
static int reply_lent(conn_t *c, const tfp_sf_t *q, uint64_t id, int fd)
{
    tfp_sf_t m;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_REPLY;
    m.seq = q->seq;
    m.lease = id;
    m.a = q->a;
    return reply(c, &m, fd);
}

/* What ALLOC and STAGE check before lending a buffer of q->a bytes (what: "a document"
 * or "a staging buffer"; kind: what too many of is called): the rights (refused()),
 * max-body, n of max per connection. 0, or 1 with the refusal answered and
 * *rc its answer's. */
static int lend_refused(tfd_shm_t *s, conn_t *c, const tfp_sf_t *q, const tfp_right_t *rights,
                        size_t nrights, const char *what, const char *kind, size_t n,
                        size_t max, int *rc)
{
    char msg[200];
    if (refused(s, c, q, rights, nrights, NULL, NULL, rc))
        return 1;
    if (q->a > s->max_body) {
        snprintf(msg, sizeof msg, "%s of %llu bytes is over max-body (%llu)", what,
                 (unsigned long long)q->a, (unsigned long long)s->max_body);
        *rc = reply_error(s, c, q->seq, TFP_ETOOBIG, msg);
        return 1;
    }
    if (n == max) {
        snprintf(msg, sizeof msg, "too many %s lent at once", kind);
        *rc = reply_error(s, c, q->seq, TFP_EBUSY, msg);
        return 1;
    }
    return 0;
}

/* The memfd lent for a PUT (ALLOC) of size bytes, writable and mapped: *m itself when it is
 * a region made ready (daemon/shmpool.h), else a fresh one; sealed in size before it is
 * lent (a client that truncated it would SIGBUS us). TFP_OK, or why not (*m closed). */
static tfp_status_t put_memfd(int ready, size_t size, tfx_shm_t *m, tfp_err_t *err)
{
    if ((!ready && tfx_shm_create(size, "tfetch-put", m, err) != TFP_OK) ||
        tfx_shm_seal(m, TFX_SHM_SEAL_SIZE, err) != TFP_OK) {
        tfx_shm_close(m);
        return err->code;
    }
    return TFP_OK;
}

/* ALLOC: a writable memfd of exactly the size asked, store bytes reserved for it; with flag
 * CALL, a CALL's request, its bytes in the lease bound while lent. */
static const tfp_right_t R_CALL[] = {TFP_RIGHT_CALL};

static int do_alloc(tfd_shm_t *s, conn_t *c, const tfp_sf_t *q)
{
    char msg[160];
    int rc;
    int call = (q->flags & TFP_SF_F_CALL) != 0;
    if (call && !c->v2)
        return -1;                  /* never told CALL exists */
    if (call ? lend_refused(s, c, q, RIGHTS(R_CALL), "a call's document", "shm buffers",
                            c->nallocs, MAX_ALLOCS_PER_CONN, &rc)
             : lend_refused(s, c, q, RIGHTS(R_WRITE), "a document", "shm buffers", c->nallocs,
                            MAX_ALLOCS_PER_CONN, &rc))
        return rc;
    alloc_t *a = &c->allocs[c->nallocs];
    tfp_err_t err = {TFP_OK, ""};
    uint64_t none = 0;
    a->reserved = a->bound = 0;
    if (call) {
        if (!bound_take(s, q->a, &none, &s->st.leased_bytes)) {
            snprintf(msg, sizeof msg, "a call's document of %llu bytes would go over "
                     "shm-lease-memory (%llu bytes)", (unsigned long long)q->a,
                     (unsigned long long)s->lease_max);
            return reply_error(s, c, q->seq, TFP_EFULL, msg);
        }
        a->bound = q->a;
        /* A ready region (pages already there: the client's copy faults none) comes with
         * store bytes reserved, which a call's buffer does not hold: given back. */
        int ready = tfd_shmpool_take(s->pool, (size_t)q->a, &a->m);
        if (ready)
            tfd_store_unreserve(s->store, q->a);
        if (put_memfd(ready, (size_t)q->a, &a->m, &err) != TFP_OK) {
            alloc_unaccount(s, a);
            return reply_error(s, c, q->seq, TFP_ENOMEM, err.msg);
        }
    } else {
        /* A ready region comes with its bytes reserved; a fresh one reserves them first. */
        int ready = tfd_shmpool_take(s->pool, (size_t)q->a, &a->m);
        if (!ready && tfd_store_reserve(s->store, q->a) != 0) {
            snprintf(msg, sizeof msg, "storing %llu bytes would exceed the store's limit of "
                     "%llu bytes", (unsigned long long)q->a,
                     (unsigned long long)tfd_store_max(s->store));
            return reply_error(s, c, q->seq, TFP_ENOSPACE, msg);
        }
        a->reserved = q->a;
        if (put_memfd(ready, (size_t)q->a, &a->m, &err) != TFP_OK) {
            alloc_unaccount(s, a);
            return reply_error(s, c, q->seq, TFP_ENOMEM, err.msg);
        }
    }
    a->id = ++s->next_lease;
    c->nallocs++;
    return reply_lent(c, q, a->id, a->m.fd);
}

/* STAGE: a staging buffer for this principal's pushes (see struct tfd_stage), in the lease
 * bound, for a principal that may push somewhere (produce or consume on some name); each
 * push that names it is authorized as any. */
static int do_stage(tfd_shm_t *s, conn_t *c, const tfp_sf_t *q)
{
    char msg[200];
    int rc;
    if (lend_refused(s, c, q, RIGHTS(R_PUSH), "a staging buffer", "staging buffers",
                     c->nstages, MAX_STAGES_PER_CONN, &rc))
        return rc;
    if (!bound_take(s, q->a, &s->st.stagings, &s->st.staged_bytes)) {
        snprintf(msg, sizeof msg, "a staging buffer of %llu bytes would go over "
                 "shm-lease-memory (%llu bytes)", (unsigned long long)q->a,
                 (unsigned long long)s->lease_max);
        return reply_error(s, c, q->seq, TFP_EFULL, msg);
    }
    tfd_stage_t *g = calloc(1, sizeof *g);
    tfp_err_t err = {TFP_ENOMEM, "out of memory"};
    if (g)
        g->m.fd = -1;
    /* Sealed in size before it is lent (a client that truncated it would SIGBUS us); this
     * side only ever reads it. */
    if (!g || tfx_shm_create((size_t)q->a, "tfetch-stage", &g->m, &err) != TFP_OK ||
        tfx_shm_seal(&g->m, TFX_SHM_SEAL_SIZE, &err) != TFP_OK ||
        tfx_shm_read_only(&g->m, &err) != TFP_OK ||
        (getrandom(&g->id, sizeof g->id, 0) != (ssize_t)sizeof g->id &&
         tfp_err_set(&err, TFP_EINTERNAL, "shm: getrandom: %s", strerror(errno)) != TFP_OK)) {
        if (g)
            stage_unref(g);
        bound_give(s, q->a, &s->st.stagings, &s->st.staged_bytes);
        return reply_error(s, c, q->seq, err.code, err.msg);
    }
    if (s->auth && tfd_auth_on(s->auth)) {
        tfp_op_who_t w = c->who;
        if (tfd_auth_identify(s->auth, &w, 0) == TFD_AUTH_OK)  /* the router said it is */
            snprintf(g->principal, sizeof g->principal, "%s", w.principal);
    }
    g->refs = 1;
    pthread_mutex_lock(&s->stage_lock);
    int clash;                                  /* 2^-64 a pair, but never two alike */
    do {
        clash = !g->id;
        for (size_t j = 0; j < s->nstages && !clash; j++)
            clash = s->stages[j]->id == g->id;
        g->id += (uint64_t)clash;
    } while (clash);
    s->stages[s->nstages++] = g;                /* MAX_STAGES_PER_CONN a connection */
    pthread_mutex_unlock(&s->stage_lock);
    c->stages[c->nstages++] = g;
    rc = reply_lent(c, q, g->id, g->m.fd);
    close(g->m.fd);                             /* the client's now; the mapping stays */
    g->m.fd = -1;
    return rc;
}

tfp_status_t tfd_shm_staged_get(tfd_shm_t *s, const char *principal,
                                const tfp_sf_staged_t *ref, const uint8_t **p,
                                tfd_stage_t **held, tfp_err_t *err)
{
    tfd_stage_t *g = NULL;
    if (s) {
        pthread_mutex_lock(&s->stage_lock);
        for (size_t j = 0; j < s->nstages && !g; j++)
            if (s->stages[j]->id == ref->lease &&
                strcmp(s->stages[j]->principal, principal) == 0)
                g = s->stages[j];
        if (g && (ref->length > g->m.size || ref->offset > g->m.size - ref->length)) {
            pthread_mutex_unlock(&s->stage_lock);
            return tfp_err_set(err, TFP_EBADREQ, "a staged body of %llu bytes at %llu in a "
                               "staging buffer of %zu bytes", (unsigned long long)ref->length,
                               (unsigned long long)ref->offset, g->m.size);
        }
        if (g)
            g->refs++;
        pthread_mutex_unlock(&s->stage_lock);
    }
    /* Another principal's buffer reads as none at all: ids are not to be probed. */
    if (!g)
        return tfp_err_set(err, TFP_ENOTFOUND, "no staging buffer %llu on this server for "
                           "this principal (released, or its client's shm connection closed)",
                           (unsigned long long)ref->lease);
    *p = g->m.p + ref->offset;
    *held = g;
    return TFP_OK;
}

void tfd_shm_staged_put(tfd_shm_t *s, tfd_stage_t *g, int copied)
{
    pthread_mutex_lock(&s->stage_lock);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&s->stage_lock);
    if (last)
        stage_unref(g);
    if (copied) {
        pthread_mutex_lock(&s->lock);
        s->st.staged_pushes++;
        pthread_mutex_unlock(&s->lock);
    }
}

/* COMMIT: the tensor_put operation through the router and the handlers, its body the lent
 * buffer, sealed first (which fails while the client still maps it writable) and then kept
 * as it is. Whatever the outcome the buffer is no longer lent. */
static int do_commit(tfd_shm_t *s, conn_t *c, const tfp_sf_t *q)
{
    size_t i;
    for (i = 0; i < c->nallocs && c->allocs[i].id != q->lease; i++)
        ;
    if (i == c->nallocs)
        return reply_error(s, c, q->seq, TFP_EBADREQ, "shm: COMMIT of no buffer lent");
    alloc_t a = c->allocs[i];
    c->allocs[i] = c->allocs[--c->nallocs];
    alloc_unaccount(s, &a);                     /* the PUT reserves its own length */
    tfp_op_t op;
    tfp_op_err_t e = {TFP_OK, "", NULL};
    tfp_err_t err;
    tfd_shm_op(&c->who, q, &op);
    shm_digests(q, &op, &e);            /* a malformed one: answered as HTTP does */
    if (e.code == TFP_OK && q->a > a.m.size)
        tfp_op_fail(&e, TFP_EBADREQ, "shm: a document of %llu bytes in a buffer of %zu",
                    (unsigned long long)q->a, a.m.size);
    else if (e.code == TFP_OK && tfx_shm_seal(&a.m, TFX_SHM_SEAL_WRITE, &err) != TFP_OK)
        tfp_op_fail(&e, TFP_EBADREQ, "shm: the buffer cannot be sealed (still mapped writable "
                    "by the client?): %.200s", err.msg);
    if (e.code != TFP_OK)
        tfx_shm_close(&a.m);
    tfx_shm_call_t call = {.body = a.m, .body_len = (size_t)q->a};
    /* The document this replaces is freed after the answer, not before: unmapping a large
     * one takes longer than all the rest of a commit. */
    tfd_blob_t *old = tfd_store_get(s->store, op.name);
    tfx_shm_call(&s->h, &op, &e, "shm", &call);
    int sent = reply_call(s, c, q, &call);
    tfd_blob_unref(old);
    tfd_shmpool_kick(s->pool);
    return sent;
}

/* CALL: the call operation through the router and the handlers (the route HTTP and UCX
 * run), its body the lent buffer, sealed first as COMMIT's; the answer's document lent as a
 * memfd under a lease, as GET's. Whatever the outcome the buffer is no longer lent. */
static int do_call(tfd_shm_t *s, conn_t *c, const tfp_sf_t *q)
{
    size_t i;
    if (!c->v2)                 /* a client that said no V2 was never told CALL exists */
        return -1;
    for (i = 0; i < c->nallocs && c->allocs[i].id != q->lease; i++)
        ;
    if (i == c->nallocs)
        return reply_error(s, c, q->seq, TFP_EBADREQ, "shm: CALL of no buffer lent");
    alloc_t a = c->allocs[i];
    c->allocs[i] = c->allocs[--c->nallocs];
    alloc_unaccount(s, &a);                     /* the answer is counted as a lease */
    tfp_op_t op;
    tfp_op_err_t e = {TFP_OK, "", NULL};
    tfp_err_t err;
    tfd_shm_op(&c->who, q, &op);
    if (q->a > a.m.size)
        tfp_op_fail(&e, TFP_EBADREQ, "shm: a document of %llu bytes in a buffer of %zu",
                    (unsigned long long)q->a, a.m.size);
    else if (tfx_shm_seal(&a.m, TFX_SHM_SEAL_WRITE, &err) != TFP_OK)
        tfp_op_fail(&e, TFP_EBADREQ, "shm: the buffer cannot be sealed (still mapped writable "
                    "by the client?): %.200s", err.msg);
    else if (tfp_op_check_length(&op, s->max_body, &e) != TFP_OK)
        ;                                       /* e says why */
    else if (lease_room(c) != 0)
        tfp_op_fail(&e, TFP_EFULL, "shm: this connection holds as many leases as it may");
    if (e.code != TFP_OK)
        tfx_shm_close(&a.m);
    tfx_shm_call_t call = {.body = a.m, .body_len = (size_t)q->a, .admit = lease_admit,
                           .admit_arg = s};
    tfx_shm_call(&s->h, &op, &e, "shm", &call);
    int sent = reply_call(s, c, q, &call);
    tfd_shmpool_kick(s->pool);
    return sent;
}

/* TOKEN: a one-time token for another connection of this principal (a feed's ring). At
 * most MAX_TOKENS_PER_CONN unused at once per connection, and as many as the principal's
 * quota allows over all its connections (upgrade-tokens-per-client), so no client can fill
 * the token table. */
static int do_token(tfd_shm_t *s, conn_t *c, const tfp_sf_t *q)
{
    uint64_t now = tfx_now_ms();
    int k = -1;
    for (int i = 0; i < MAX_TOKENS_PER_CONN && k < 0; i++)
        if (c->token_until[i] <= now)
            k = i;
    tfp_sf_t m;
    memset(&m, 0, sizeof m);
    char name[TFP_UP_MAX_SHM_SOCKET + 1];
    int rc = k < 0 ? -1 : tfd_shm_token(s, name, m.str, &c->who, c->owner);
    if (rc == -2)
        return reply_error(s, c, q->seq, TFP_EFULL, "shm: this principal holds as many unused "
                           "tokens as upgrade-tokens-per-client allows");
    if (rc != 0)
        return reply_error(s, c, q->seq, TFP_EBUSY, "shm: too many tokens asked for at once");
    c->token_until[k] = now + s->token_ttl_ms;
    m.op = TFP_SF_REPLY;
    m.seq = q->seq;
    m.str_len = strlen(m.str);
    return reply(c, &m, -1);
}

/* RING: this connection becomes a feed device queue's ring (daemon/ring.h), its memfd in
 * the answer. Rights as a pop over HTTP: consume on the feed. */
static int do_ring(tfd_shm_t *s, conn_t *c, const tfp_sf_t *q)
{
    char feed[TFP_MAX_TENSOR_NAME + 1], dev[TFP_MAX_TENSOR_NAME + 1];
    char consumer[TFP_MAX_USER_ID + 1];
    tfp_err_t err;
    int rc;
    if (tfp_sf_ring_spec(q->str, feed, dev, consumer, &err) != TFP_OK)
        return -1;                          /* the decoder checked it: cannot happen */
    tfp_op_who_t w;                     /* the consumer id is this principal's (feeds.h) */
    if (refused(s, c, q, RIGHTS(R_CONSUME), feed, &w, &rc))
        return rc;
    if (!s->feeds)
        return reply_error(s, c, q->seq, TFP_ENOTIMPL, "shm: this server has no feeds");
    if (c->requests > 1 || c->ring)
        return reply_error(s, c, q->seq, TFP_EBADREQ, "shm: RING must be a connection's "
                           "first request");
    pthread_mutex_lock(&s->lock);
    uint64_t held = held_locked(s);
    uint64_t left = held < s->lease_max ? s->lease_max - held : 0;
    pthread_mutex_unlock(&s->lock);
    tfd_ring_t *r;
    int fd;
    tfp_status_t st = tfd_ring_open(s->feeds, feed, dev, consumer, w.principal, (unsigned)q->a,
                                    q->b, left, s->ring_acct, &r, &fd, &err);
    if (st != TFP_OK)
        return reply_error(s, c, q->seq, st, err.msg);
    tfp_sf_t m;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_REPLY;
    m.seq = q->seq;
    m.a = tfd_ring_slots(r);
    m.b = tfd_ring_slot_bytes(r);
    /* Registered before the answer: a push the client sends once it has it finds the ring. */
    c->ring = r;
    pthread_mutex_lock(&s->ring_lock);
    s->rings[s->nreg++] = r;                    /* one per connection: never over MAX_CONNS */
    pthread_mutex_unlock(&s->ring_lock);
    pthread_mutex_lock(&s->lock);
    s->st.rings++;
    pthread_mutex_unlock(&s->lock);
    atomic_fetch_add(&s->nrings, 1);
    return reply(c, &m, fd);                    /* failed: the caller closes c, and r */
}

/* Fills a ring connection's free slots; -1: close it. With authentication on, the
 * principal must still hold consume on the feed (its token looked up again, as each GET's
 * is), so revoking a token or a right by SIGHUP stops a ring at its next wake. */
static int ring_fill(tfd_shm_t *s, conn_t *c)
{
    tfp_op_who_t w = c->who;
    const char *feed = tfd_ring_feed(c->ring);
    char msg[TFP_SF_MAX_MSG];
    tfp_status_t st = tfd_router_check(s->auth, &w, RIGHTS(R_CONSUME), feed, msg, sizeof msg);
    if (st != TFP_OK) {
        tfd_ring_end(c->ring, c->fd, st, msg);
        tfd_log(LOG_NOTICE, "shm: ring of feed '%s' ended: %s", feed, msg);
        return -1;
    }
    tfd_ring_stats_t rs = {0, 0, 0};
    int rc = tfd_ring_fill(c->ring, c->fd, &rs);
    if (rs.items || rs.in_place || rs.overflow) {
        pthread_mutex_lock(&s->lock);
        s->st.ring_items += rs.items;
        s->st.ring_in_place += rs.in_place;
        s->st.ring_overflow += rs.overflow;
        pthread_mutex_unlock(&s->lock);
    }
    return rc;
}

int tfd_shm_lend(tfd_shm_t *s, const tfd_feed_t *f, unsigned dev, size_t len, uint8_t **buf,
                 size_t *cap, void (**give_back)(void *arg), void **arg)
{
    int rc = -1;
    if (!s || !atomic_load_explicit(&s->nrings, memory_order_relaxed))
        return -1;
    pthread_mutex_lock(&s->ring_lock);
    for (size_t i = 0; i < s->nreg; i++)
        if (tfd_ring_serves(s->rings[i], f, dev)) {
            rc = tfd_ring_lend(s->rings[i], len, buf, cap, give_back, arg);
            break;
        }
    pthread_mutex_unlock(&s->ring_lock);
    if (rc == 0) {
        pthread_mutex_lock(&s->lock);
        s->st.ring_lent++;
        pthread_mutex_unlock(&s->lock);
    }
    return rc;
}

void tfd_shm_feed_wake(tfd_shm_t *s)
{
    uint64_t one = 1;
    if (s && atomic_load_explicit(&s->nrings, memory_order_relaxed) &&
        write(s->wake_fd, &one, sizeof one) < 0) {
        /* a full counter: the thread is woken anyway */
    }
}

static void do_release(tfd_shm_t *s, conn_t *c, uint64_t id)
{
    for (size_t i = 0; i < c->nallocs; i++)
        if (c->allocs[i].id == id) {        /* a lent buffer the client gave up */
            alloc_drop(s, c, i);
            return;
        }
    for (size_t i = 0; i < c->n; i++)
        if (c->leases[i].id == id) {
            lease_end(s, c, i, 0);
            return;
        }
    for (size_t i = 0; i < c->nstages; i++)
        if (c->stages[i]->id == id) {       /* a staging buffer the client is done with */
            stage_drop(s, c, i);
            return;
        }
}

/* Reads one message of connection k: -1 when it is to be closed. */
static int serve(tfd_shm_t *s, size_t k)
{
    conn_t *c = &s->conns[k];
    uint8_t buf[TFP_SF_MAX];
    size_t len, nfds;
    int fds[1];
    tfp_err_t err;
    tfp_status_t st = tfx_shm_recv(c->fd, buf, sizeof buf, &len, fds, 0, &nfds, &err);
    if (st == TFP_EAGAIN)
        return 0;
    if (st != TFP_OK || len == 0)
        return -1;                  /* gone, or a message no client of ours sends */
    tfp_sf_t q;
    if (tfp_sf_decode(buf, len, &q, &err) != TFP_OK) {
        tfd_log(LOG_NOTICE, "shm: %s; connection closed", err.msg);
        return -1;
    }
    if (!c->hello) {
        if (q.op != TFP_SF_HELLO || !take_token(s, q.str, &c->who, c->owner)) {
            reply_error(s, c, q.seq, TFP_EUNAUTH, "unknown, expired or already used token");
            tfd_log(LOG_NOTICE, "shm: HELLO refused (pid %ld, uid %ld)", c->peer_pid,
                    c->peer_uid);
            return -1;
        }
        c->hello = 1;
        c->v2 = q.a == TFP_SF_HELLO_V2 || q.a == TFP_SF_HELLO_V3;
        c->v3 = q.a == TFP_SF_HELLO_V3;
        tfd_log(LOG_DEBUG, "shm: pid %ld (uid %ld) connected", c->peer_pid, c->peer_uid);
        tfp_sf_t m;
        memset(&m, 0, sizeof m);
        m.op = TFP_SF_REPLY;
        m.seq = q.seq;
        m.a = c->v2 ? TFP_SF_CAPS : 0;          /* what it may send besides (CALL) */
        return reply(c, &m, -1);
    }
    c->requests++;
    if (c->ring) {
        if (q.op != TFP_SF_CREDIT && q.op != TFP_SF_ACK && q.op != TFP_SF_FREE)
            return -1;                  /* a ring's connection serves nothing else */
        if (tfd_ring_message(c->ring, &q) != 0) {
            tfd_log(LOG_NOTICE, "shm: a ring's consumer broke its rules (credit that "
                    "shrinks, or a slot it does not hold); connection closed");
            return -1;
        }
        return ring_fill(s, c);
    }
    switch (q.op) {
    case TFP_SF_TOKEN:
        return do_token(s, c, &q);
    case TFP_SF_RING:
        return do_ring(s, c, &q);
    case TFP_SF_GET:
        return do_get(s, c, &q);
    case TFP_SF_RELEASE:
        do_release(s, c, q.lease);
        return 0;
    case TFP_SF_ALLOC:
        return do_alloc(s, c, &q);
    case TFP_SF_STAGE:
        return do_stage(s, c, &q);
    case TFP_SF_COMMIT:
        return do_commit(s, c, &q);
    case TFP_SF_CALL:
        return do_call(s, c, &q);
    default:
        return -1;                  /* HELLO again, or a REPLY from a client */
    }
}

/* Ends the leases past their time; the ms until the next one ends (-1: none). */
static int expire(tfd_shm_t *s)
{
    uint64_t now = tfx_now_ms(), next = 0;
    for (size_t k = 0; k < s->nconns; k++) {
        conn_t *c = &s->conns[k];
        for (size_t i = 0; i < c->n;) {
            uint64_t e = c->leases[i].expires_ms;
            if (e && e <= now) {
                lease_end(s, c, i, 1);
                continue;
            }
            if (e && (!next || e < next))
                next = e;
            i++;
        }
        if (c->ring) {
            uint64_t e = now + tfd_ring_tick(c->ring, now);
            if (!next || e < next)
                next = e;
        }
    }
    return next ? (int)(next - now > 60000 ? 60000 : next - now) : -1;
}

static void *loop(void *arg)
{
    tfd_shm_t *s = arg;
    struct pollfd p[MAX_CONNS + 3];
    for (;;) {
        int timeout = expire(s);
        p[0] = (struct pollfd){ .fd = s->stop_fd, .events = POLLIN };
        p[1] = (struct pollfd){ .fd = s->listen_fd, .events = POLLIN };
        p[2] = (struct pollfd){ .fd = s->wake_fd, .events = POLLIN };
        size_t n = s->nconns;
        for (size_t k = 0; k < n; k++)
            p[3 + k] = (struct pollfd){ .fd = s->conns[k].fd, .events = POLLIN };
        int r = poll(p, 3 + n, timeout);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        if (p[0].revents)
            break;
        uint64_t woken;
        if (p[2].revents && read(s->wake_fd, &woken, sizeof woken) < 0) {
            /* drained already */
        }
        /* Backwards: closing k moves the last connection into its place. */
        for (size_t k = n; k-- > 0;)
            if (p[3 + k].revents && serve(s, k) != 0)
                conn_close(s, k);
        /* Rings: a feed changed (wake_fd), or a ring's consumer said something. */
        for (size_t k = s->nconns; k-- > 0;)
            if (s->conns[k].ring && ring_fill(s, &s->conns[k]) != 0)
                conn_close(s, k);
        if (p[1].revents & POLLIN) {
            int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0 && s->nconns == MAX_CONNS) {
                close(fd);
            } else if (fd >= 0) {
                pid_t pid = -1;
                uid_t uid = (uid_t)-1;
                int known = tfx_shm_peer(fd, &pid, &uid) == 0;
                s->conns[s->nconns++] = (conn_t){ .fd = fd, .peer_pid = known ? (long)pid : -1,
                                                  .peer_uid = known ? (long)uid : -1 };
                pthread_mutex_lock(&s->lock);
                s->st.connections++;
                pthread_mutex_unlock(&s->lock);
            }
        }
    }
    return NULL;
}

/* ---- life ---------------------------------------------------------------------------------- */

tfd_shm_t *tfd_shm_start(tfd_store_t *store, tfd_waiters_t *waiters, uint64_t max_body,
                         uint64_t lease_max_bytes, unsigned lease_ms, unsigned token_ttl_ms,
                         const char *socket_path, gid_t socket_gid, char *why, size_t why_size)
{
    tfd_shm_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(why, why_size, "out of memory");
        return NULL;
    }
    s->store = store;
    s->waiters = waiters;
    s->max_body = max_body;
    s->lease_max = lease_max_bytes;
    s->lease_ms = lease_ms;
    s->token_ttl_ms = token_ttl_ms;
    s->listen_fd = s->stop_fd = s->wake_fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->ring_lock, NULL);
    pthread_mutex_init(&s->stage_lock, NULL);
    tfp_err_t err;
    if (!(s->ring_acct = tfd_ring_acct_new()) ||
        !(s->tokens = tfd_otokens_new(MAX_TOKENS, sizeof(tfp_op_who_t), 0))) {
        snprintf(why, why_size, "out of memory");
        goto fail;
    }
    tfx_shm_t probe;
    if (tfx_shm_create(1, "tfetch-probe", &probe, &err) != TFP_OK) {
        snprintf(why, why_size, "%s", err.msg);
        goto fail;
    }
    tfx_shm_close(&probe);
    if (socket_path && socket_path[0]) {
        snprintf(s->name, sizeof s->name, "%s", socket_path);
        s->listen_fd = tfx_shm_listen_path(socket_path, socket_gid, &s->file, &err);
        s->path = s->listen_fd >= 0;
    } else {
        s->listen_fd = tfx_shm_listen(s->name, sizeof s->name, &err);
    }
    if (s->listen_fd < 0) {
        snprintf(why, why_size, "%s", err.msg);
        goto fail;
    }
    if ((s->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0 ||
        (s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
        pthread_create(&s->thread, NULL, loop, s) != 0) {
        snprintf(why, why_size, "shm: no thread: %s", strerror(errno));
        goto fail;
    }
    return s;
fail:
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    if (s->stop_fd >= 0)
        close(s->stop_fd);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    tfd_ring_acct_unref(s->ring_acct);
    tfd_otokens_free(s->tokens);
    pthread_mutex_destroy(&s->stage_lock);
    pthread_mutex_destroy(&s->ring_lock);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return NULL;
}

void tfd_shm_stats(tfd_shm_t *s, tfd_shm_stats_t *st)
{
    if (!s) {
        memset(st, 0, sizeof *st);
        return;
    }
    pthread_mutex_lock(&s->lock);
    *st = s->st;
    pthread_mutex_unlock(&s->lock);
    st->ring_bytes = tfd_ring_acct_bytes(s->ring_acct);
}

void tfd_shm_free(tfd_shm_t *s)
{
    if (!s)
        return;
    uint64_t one = 1;
    if (write(s->stop_fd, &one, sizeof one) == (ssize_t)sizeof one)
        pthread_join(s->thread, NULL);
    while (s->nconns)
        conn_close(s, s->nconns - 1);
    close(s->wake_fd);
    close(s->stop_fd);
    close(s->listen_fd);
    if (s->path)
        tfx_shm_unlink_path(s->name, &s->file);
    tfd_ring_acct_unref(s->ring_acct);     /* rings' slots that queued items keep count */
    tfd_otokens_free(s->tokens);
    pthread_mutex_destroy(&s->stage_lock);
    pthread_mutex_destroy(&s->ring_lock);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
