/* shm.c - the same-host shared-memory path (tfi_shm, "shm/memfd"): each origin's unix
 * connection to the daemon's shm socket (made with the answer to POST /v1/upgrade, when
 * that names one), a GET sent over it and answered with the document's memfd, which is
 * checked (its own size and seals), mapped read-only and decoded in place: the tf_doc's
 * tensors point into the mapping, which the doc keeps until tf_doc_free unmaps it and ends
 * the lease. PUTs write into a buffer the daemon lends (ALLOC) and COMMIT it; exchanges of
 * 64 KiB or more (CALL, when the daemon's HELLO answer names it) write the request into a
 * lent buffer with pwritev and get the answer document back as a GET's. Under policy auto
 * only; a refusal (the lease bound, a route that answers later) or a failure of the
 * connection sends the request over UCX or HTTP instead, saying why.
 *
 * A GET over shm is one local round trip (a CALL two, the route running meanwhile), done in
 * start on the calling thread; its completion is queued and run by drain, like every other
 * transport's. The connection is
 * shared by the docs holding leases on it (a reference count), so a doc may outlive the
 * client; RELEASE is one datagram, so any thread may send it. Same threading otherwise as
 * the client.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <sys/mman.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "client/internal.h"
#include "proto/safetensors.h"
#include "proto/shmframe.h"
#include "transports/shm.h"

#define SHM_TIMEOUT_MS 2000L            /* HELLO, and a GET's answer */
#define MAX_DECLINED 8                  /* routes remembered as answering later */
/* Exchanges with less tensor data than this stay on UCX (or HTTP): a CALL over shm costs
 * two round trips on the socket and a memfd made, mapped and unmapped on each side, which
 * a small body's copies through UCX undercut (8 B: 15-60 us over UCX, 55-90 us over shm;
 * 64 KiB: 0.3-0.5 ms over UCX, 0.12 ms over shm, on a loaded 2-core VM). */
#define SHM_CALL_MIN ((size_t)64 << 10)

typedef struct {
    int sock;
    atomic_int refs;                    /* the origin's, and one per doc with a lease */
    uint64_t seq;
    unsigned caps;                      /* TFP_SF_CAP_*: what the daemon took besides */
    /* Routes whose calls the daemon declined (they answer later, from a worker): sent over
     * UCX or HTTP from then on, without asking again. Round robin. The engine's thread. */
    char declined[MAX_DECLINED][TFP_MAX_TENSOR_NAME + 1];
    unsigned ndeclined;
    char name[TFP_UP_MAX_SHM_SOCKET + 1];       /* the daemon's socket, for TOKEN's */
    long peer_pid;                      /* the daemon's pid, from the socket (0: unknown) */
} shmc_t;

/* What the transport holds per client: finished requests waiting for drain. */
typedef struct {
    tf_fetch_t **done;
    size_t n, cap;
} shm_state_t;

static void conn_unref(shmc_t *k)
{
    if (k && atomic_fetch_sub(&k->refs, 1) == 1) {
        close(k->sock);
        free(k);
    }
}

/* Sends m over k. 0, or -1. */
static int send_msg(shmc_t *k, const tfp_sf_t *m)
{
    uint8_t buf[TFP_SF_MAX];
    tfp_err_t err;
    size_t len = tfp_sf_encode(m, buf, sizeof buf, &err);
    return len && tfx_shm_send(k->sock, buf, len, NULL, 0, &err) == TFP_OK ? 0 : -1;
}

/* Waits up to ms for the REPLY to seq: 0 with *r and maybe *fd (else -1), or -1 with why. */
static int recv_reply(shmc_t *k, uint64_t seq, long ms, tfp_sf_t *r, int *fd, char *why,
                      size_t why_size)
{
    struct pollfd p = { .fd = k->sock, .events = POLLIN };
    *fd = -1;
    if (poll(&p, 1, (int)ms) <= 0) {
        snprintf(why, why_size, "no answer over the shm socket within %ld ms", ms);
        return -1;
    }
    uint8_t buf[TFP_SF_MAX];
    size_t len, nfds;
    tfp_err_t err;
    if (tfx_shm_recv(k->sock, buf, sizeof buf, &len, fd, 1, &nfds, &err) != TFP_OK ||
        len == 0) {
        snprintf(why, why_size, "%s", len == 0 ? "the daemon closed the shm socket" : err.msg);
        return -1;
    }
    if (nfds == 0)
        *fd = -1;
    tfp_status_t st = tfp_sf_decode(buf, len, r, &err);
    if (st != TFP_OK || r->op != TFP_SF_REPLY || r->seq != seq ||
        (*fd >= 0 && r->status != TFP_OK)) {
        /* err.msg says something only when the decoder refused */
        snprintf(why, why_size, "bad shm answer: %s", st != TFP_OK ? err.msg :
                 r->op != TFP_SF_REPLY ? "not a REPLY" : r->seq != seq ?
                 "the reply to another request" : "a descriptor with a refusal");
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        return -1;
    }
    return 0;
}

/* Connects o's shm socket with the upgrade's token: 0, or -1 (o->shm stays NULL; why). A
 * connection o has to that very socket of that very daemon is kept; one to another (the
 * daemon restarted: a new abstract name, or the same socket file served by a new pid) is
 * dropped first, so documents staged with the old one go as their bytes. */
int tfi_shm_connect(tf_client_t *c, origin_t *o, const tfp_up_resp_t *resp, char *why,
                    size_t why_size)
{
    (void)c;
    tfp_err_t err;
    if (o->shm && strcmp(((shmc_t *)o->shm)->name, resp->shm_socket) == 0 &&
        (((shmc_t *)o->shm)->peer_pid <= 0 || ((shmc_t *)o->shm)->peer_pid == resp->server_pid))
        return 0;                       /* the same daemon: the connection holds */
    tfi_shm_disconnect(o);              /* another daemon (a restart): its buffers are gone */
    o->server_uid_known = 0;            /* read again below, from this daemon */
    int sock = tfx_shm_connect(resp->shm_socket, &err);
    struct stat sb;
    if (sock < 0) {
        /* A socket file that keeps us out still says whose it is. */
        int absent = 0;
        if (resp->shm_socket[0] == '/' && stat(resp->shm_socket, &sb) == 0) {
            o->server_uid = sb.st_uid;
            o->server_uid_known = 1;
        } else if (resp->shm_socket[0] == '/') {
            absent = errno == ENOENT || errno == ENOTDIR;
        }
        /* Another container of this host, the socket's directory not mounted into it. */
        snprintf(why, why_size, "%s%s", err.msg, absent ? " (not in this file system: mount "
                 "its directory here, e.g. a hostPath)" : "");
        return -1;
    }
    pid_t pid = 0;
    if (tfx_shm_peer(sock, &pid, &o->server_uid) == 0)
        o->server_uid_known = 1;
    shmc_t *k = calloc(1, sizeof *k);
    if (!k) {
        close(sock);
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    k->sock = sock;
    atomic_init(&k->refs, 1);
    snprintf(k->name, sizeof k->name, "%s", resp->shm_socket);
    k->peer_pid = (long)pid;        /* SO_PEERCRED's, in our pid namespace (0: unknown) */
    tfp_sf_t m, r;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_HELLO;
    m.seq = ++k->seq;
    /* A server that named protocol 2 reads (and answers) the newer REPLY; a 0.1.0 one
     * names none, and would refuse the version. */
    m.a = resp->protocol.max >= 2 ? TFP_SF_HELLO_V3 : 0;    /* V2, and answer lines */
    m.str_len = strlen(resp->shm_token);
    memcpy(m.str, resp->shm_token, m.str_len + 1);
    int fd, rc = send_msg(k, &m);
    if (rc != 0)
        snprintf(why, why_size, "cannot send HELLO over the shm socket");
    else if ((rc = recv_reply(k, m.seq, SHM_TIMEOUT_MS, &r, &fd, why, why_size)) == 0 &&
             r.status != TFP_OK) {
        snprintf(why, why_size, "shm HELLO refused: %s", r.str);
        rc = -1;
    } else if (rc == 0 && fd >= 0) {    /* never sent with HELLO's answer: not kept open */
        close(fd);
        snprintf(why, why_size, "bad shm answer: a descriptor with the HELLO reply");
        rc = -1;
    } else if (rc == 0 && m.a >= TFP_SF_HELLO_V2) {
        k->caps = (unsigned)(r.a & TFP_SF_CAPS);    /* an older daemon says 0: GET and PUT */
    }
    if (rc != 0) {
        conn_unref(k);
        return -1;
    }
    o->shm = k;
    return 0;
}

int tfi_shm_peer_uid(const origin_t *o, uid_t *uid)
{
    if (!o->server_uid_known)
        return -1;
    *uid = o->server_uid;
    return 0;
}

int tfi_shm_token(origin_t *o, char name[TFP_UP_MAX_SHM_SOCKET + 1],
                  char token[TFP_UP_TOKEN_LEN + 1], char *why, size_t why_size)
{
    shmc_t *k = o->shm;
    if (!k) {
        snprintf(why, why_size, "no shm connection to this server");
        return -1;
    }
    tfp_sf_t m, r;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_TOKEN;
    m.seq = ++k->seq;
    int fd;
    if (send_msg(k, &m) != 0 || recv_reply(k, m.seq, SHM_TIMEOUT_MS, &r, &fd, why,
                                            why_size) != 0) {
        if (!why[0])
            snprintf(why, why_size, "the shm connection failed");
        tfi_shm_disconnect(o);
        return -1;
    }
    if (fd >= 0)                        /* TOKEN's answer carries none: not kept open */
        close(fd);
    if (r.status != TFP_OK || r.str_len != TFP_UP_TOKEN_LEN || !tfp_up_token_valid(r.str)) {
        snprintf(why, why_size, "no token: %s", r.status != TFP_OK ? r.str : "a bad answer");
        return -1;
    }
    memcpy(token, r.str, TFP_UP_TOKEN_LEN + 1);
    snprintf(name, TFP_UP_MAX_SHM_SOCKET + 1, "%s", k->name);
    return 0;
}

void tfi_shm_disconnect(origin_t *o)
{
    conn_unref(o->shm);
    o->shm = NULL;
}

/* 1 if the daemon declined calls of route before (they answer later). */
static int declined(const shmc_t *k, const char *route)
{
    for (unsigned i = 0; i < MAX_DECLINED && i < k->ndeclined; i++)
        if (strcmp(k->declined[i], route) == 0)
            return 1;
    return 0;
}

/* The bytes of doc's tensors, up to SHM_CALL_MIN. */
static size_t data_bytes(const tf_doc_t *doc)
{
    size_t n = 0;
    for (size_t i = 0; i < tf_doc_count(doc) && n < SHM_CALL_MIN; i++)
        n += tf_doc_at(doc, i)->nbytes;
    return n;
}

int tfi_shm_can(const tf_fetch_t *f)
{
    const shmc_t *k = f->origin ? f->origin->shm : NULL;
    if (k && f->op.kind == TF_OP_EXCHANGE)
        return f->policy == TF_TRANSPORT_AUTO && (k->caps & TFP_SF_CAP_CALL) &&
               !f->op.query && f->op.format == TF_FORMAT_SAFETENSORS && f->op.name[0] &&
               f->op.body && !tfi_op_has_cond(&f->op) && !declined(k, f->op.name) &&
               data_bytes(f->op.body) >= SHM_CALL_MIN;
    return f->origin && f->origin->shm && f->policy == TF_TRANSPORT_AUTO &&
           ((f->op.kind == TF_OP_GET && f->op.wait_ms <= 0) || f->op.kind == TF_OP_PUT) &&
           !f->op.query && f->op.format == TF_FORMAT_SAFETENSORS && f->op.name[0] &&
           /* a PUT's conditions and TTL go in its COMMIT; a GET's stay with HTTP, whose
            * answer (304, a range) is no mapped document */
           !(f->op.kind == TF_OP_GET ? tfi_op_has_cond(&f->op) : f->op.cond.range) &&
           /* a verified one's digest lines: a daemon of protocol 2 or later reads them */
           (!f->c->verify || f->origin->protocol.max >= 2);
}

void tfi_shm_note(tf_fetch_t *f)
{
    const shmc_t *k = f->origin ? f->origin->shm : NULL;
    if (!k || f->op.kind != TF_OP_EXCHANGE || f->policy != TF_TRANSPORT_AUTO || f->op.query ||
        f->op.format != TF_FORMAT_SAFETENSORS || !f->op.name[0] || !f->op.body ||
        tfi_op_has_cond(&f->op) || data_bytes(f->op.body) < SHM_CALL_MIN ||
        f->result.fallback[0])
        return;
    if (!(k->caps & TFP_SF_CAP_CALL))
        snprintf(f->result.fallback, sizeof(f->result.fallback), "shm: this server's shm "
                 "socket takes no exchanges (a tfetchd of before CALL)");
    else if (declined(k, f->op.name))
        snprintf(f->result.fallback, sizeof(f->result.fallback), "shm: route '%.60s' answers "
                 "later, from a worker (declined over shm before)", f->op.name);
}

/* ---- the doc's mapping ---------------------------------------------------------------------- */

typedef struct {
    tfx_shm_t map;
    shmc_t *conn;
    uint64_t lease;                     /* a GET's lease, or an ALLOC's buffer; 0 when over */
    size_t len;                         /* the document's bytes at map.p */
} lease_t;

/* tf_doc_free: unmaps, then tells the daemon (if it is still there) the lease is over (or
 * the lent buffer no longer wanted). */
static void lease_release(void *arg)
{
    lease_t *l = arg;
    tfx_shm_close(&l->map);
    if (!l->lease) {
        conn_unref(l->conn);
        free(l);
        return;
    }
    tfp_sf_t m;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_RELEASE;
    m.lease = l->lease;
    (void)send_msg(l->conn, &m);         /* a daemon gone has ended it already */
    conn_unref(l->conn);
    free(l);
}

/* ---- requests ------------------------------------------------------------------------------ */

/* f cannot go over shm (why): over the origin's UCX connection or HTTP instead (fetch.c
 * retries over HTTP when this fails). */
static tf_status_t fall_back(tf_client_t *c, tf_fetch_t *f, const char *why)
{
    if (strncmp(why, "shm: ", 5) == 0)     /* transports/shm.c's own words say it already */
        why += 5;
    snprintf(f->result.fallback, sizeof(f->result.fallback), "shm: %.150s", why);
    if (f->origin->conn && c->up)
        return c->up->start(c, f);
    return tfi_http.start(c, f);
}

static tf_status_t queue_done(tf_client_t *c, tf_fetch_t *f)
{
    shm_state_t *s = c->shm_state;
    if (s->n == s->cap) {
        size_t ncap = s->cap ? 2 * s->cap : 8;
        tf_fetch_t **nd = realloc(s->done, ncap * sizeof *nd);
        if (!nd)
            return TF_ENOMEM;
        s->done = nd;
        s->cap = ncap;
    }
    s->done[s->n++] = f;
    f->via = &tfi_shm;
    return TF_OK;
}

/* ALLOC or STAGE (op, with flags): a writable memfd of exactly size bytes from the daemon,
 * not mapped: 0 with *fd and *lease, the daemon's refusal (1: *st, why), or -1 with why (the
 * connection failed, or the buffer is not what was asked). */
static int ask_fd(shmc_t *k, tfp_sf_op_t op, uint32_t flags, size_t size, long ms, int *fd,
                  uint64_t *lease, tfp_status_t *st, char *why, size_t why_size)
{
    tfp_sf_t q, r;
    tfp_err_t err;
    memset(&q, 0, sizeof q);
    q.op = op;
    q.flags = flags;
    q.seq = ++k->seq;
    q.a = size;
    *st = TFP_OK;
    if (send_msg(k, &q) != 0 || recv_reply(k, q.seq, ms, &r, fd, why, why_size) != 0)
        return -1;
    if (r.status != TFP_OK) {
        if (*fd >= 0)
            close(*fd);
        *st = (tfp_status_t)r.status;
        snprintf(why, why_size, "%.200s", r.str);
        return 1;
    }
    /* A buffer we may write into, of exactly the size asked, that no one can shrink. */
    size_t got;
    if (*fd < 0 || tfx_shm_check(*fd, size, 0, &got, &err) != TFP_OK || got != size ||
        r.a != size) {
        if (*fd >= 0)
            close(*fd);
        snprintf(why, why_size, "bad shm buffer: %.200s", *fd < 0 ? "none" : err.msg);
        return -1;
    }
    *lease = r.lease;
    return 0;
}

/* ask_fd's buffer (ALLOC or STAGE), mapped: 0 with *m and *lease, else as ask_fd. */
static int ask_buffer(shmc_t *k, tfp_sf_op_t op, size_t size, long ms, tfx_shm_t *m,
                      uint64_t *lease, tfp_status_t *st, char *why, size_t why_size)
{
    tfp_err_t err;
    uint64_t id;
    int fd, rc = ask_fd(k, op, 0, size, ms, &fd, &id, st, why, why_size);
    if (rc != 0)
        return rc;
    if (tfx_shm_map(fd, size, TFX_SHM_MAP_FILL, m, &err) != TFP_OK) {
        snprintf(why, why_size, "%s", err.msg);
        return -1;
    }
    *lease = id;
    return 0;
}

/* Gives up the writable mapping of l (the daemon cannot seal a buffer still mapped writable):
 * a PROT_NONE reservation holds the addresses meanwhile. */
static void unmap_writable(lease_t *l)
{
    (void)mmap(l->map.p, l->map.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
               0);
    l->map.writable = 0;
}

/* After COMMIT (whatever its answer): the same bytes, read-only, at the same address. */
static void remap_read_only(lease_t *l)
{
    void *p = mmap(l->map.p, l->map.size, PROT_READ, MAP_SHARED | MAP_FIXED, l->map.fd, 0);
    (void)p;                            /* on failure the PROT_NONE stays: reads fault */
}

/* COMMIT of l's buffer as op's name, under its conditions and TTL: the daemon's answer in
 * *r; -1 with why on a transport failure. */
static int commit(shmc_t *k, lease_t *l, const tfi_op_t *op, long ms, tfp_sf_t *r, char *why,
                  size_t why_size)
{
    tfp_sf_t q;
    tfp_err_t err;
    memset(&q, 0, sizeof q);
    q.op = TFP_SF_COMMIT;
    q.seq = ++k->seq;
    q.lease = l->lease;
    q.a = l->len;
    q.b = op->cond.ttl_s;
    if (tfp_sf_set_target(&q, op->name, op->cond.if_match, op->cond.if_none_match, &err) !=
            TFP_OK ||
        (op->digest[0] && tfp_sf_add_line(&q, "Repr-Digest", op->digest, &err) != TFP_OK)) {
        snprintf(why, why_size, "%s", err.msg);
        return -1;
    }
    unmap_writable(l);
    int fd, rc = send_msg(k, &q) != 0 ? -1 : recv_reply(k, q.seq, ms, r, &fd, why, why_size);
    l->lease = 0;                       /* no longer lent, whatever happened */
    remap_read_only(l);
    return rc;
}

/* Records the daemon's answer to a COMMIT in f. */
/* The typed fields an OK REPLY carries (its ETag; an older daemon names none), into f. */
static void reply_answer(tf_fetch_t *f, const tfp_sf_t *r)
{
    tfp_answer_t ans = {0};
    tfp_answer_from_sf_reply(r, &ans);
    tfi_take_answer(f, &ans);
}

static void commit_result(tf_fetch_t *f, const tfp_sf_t *r, uint64_t len)
{
    tf_result_t *res = &f->result;
    res->bytes_sent = len;
    if (r->status != TFP_OK) {
        tf_status_t st = tfi_from_proto((tfp_status_t)r->status);
        res->http_status = tfp_status_http((tfp_status_t)r->status);
        tfi_rfail(res, st, "%s", r->str);
        return;
    }
    res->status = TF_OK;
    res->http_status = r->http ? (int)r->http : r->a ? 204 : 201;
    reply_answer(f, r);
}

static void copy_segs(const tf_fetch_t *f, uint8_t *dst)
{
    size_t off = 0;
    for (size_t i = 0; i < f->op.nsegs; i++) {
        memcpy(dst + off, f->op.segs[i], f->op.lens[i]);
        off += f->op.lens[i];
    }
}

/* A put from a file (tf_fetch_start_fd): its bytes read straight into the lent buffer, in
 * slices reported as progress; nothing of the file is mapped or held here. 0, or -1 with
 * why. */
static int read_file(tf_client_t *c, tf_fetch_t *f, uint8_t *dst, char *why, size_t why_size)
{
    uint64_t len = f->op.body_fd_len, off = 0;
    while (off < len) {
        size_t k = len - off > (64u << 20) ? (64u << 20) : (size_t)(len - off);
        ssize_t got = pread(f->op.body_fd, dst + off, k, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            snprintf(why, why_size, "cannot read the body's file: %s",
                     got < 0 ? strerror(errno) : "it is shorter than it was");
            return -1;
        }
        off += (uint64_t)got;
        if (tfi_progress(c, 0, 0, off, len)) {
            snprintf(why, why_size, "canceled by the progress callback");
            return -1;
        }
    }
    return 0;
}

/* A PUT over shm: a document built in place (tf_doc_new_shm) is committed as it is; any
 * other is written into a lent buffer first (one copy), then committed. */
static tf_status_t shm_put(tf_client_t *c, tf_fetch_t *f)
{
    origin_t *o = f->origin;
    shmc_t *k = o->shm;
    tf_result_t *res = &f->result;
    tf_doc_t *doc = (tf_doc_t *)f->op.body;
    char why[256] = "";
    long ms = tfi_remaining_ms(f);
    ms = ms > 0 && ms < SHM_TIMEOUT_MS ? ms : SHM_TIMEOUT_MS;
    tfp_sf_t r;
    lease_t *l = doc ? doc->shm_lent : NULL;
    if (l && l->conn == k) {
        doc->shm_lent = NULL;           /* committed now: read-only from here on */
        uint64_t t_commit = tfx_now_ns();
        res->stages.connect = res->stages.send = res->stages.decode = 0;  /* built in place */
        int crc = commit(k, l, &f->op, ms, &r, why, sizeof why);
        f->rt_ms = (double)(tfx_now_ns() - t_commit) / 1e6;
        if (crc != 0) {
            tfi_shm_disconnect(o);
            return fall_back(c, f, why);    /* the doc is readable again: sent as any */
        }
        snprintf(res->transport, sizeof(res->transport), "shm/memfd");
        commit_result(f, &r, l->len);
        return queue_done(c, f);
    }
    lease_t tmp = { TFX_SHM_NONE, k, 0, (size_t)f->op.body_len };
    tfp_status_t st = TFP_OK;
    uint64_t t_send = tfx_now_ns();
    int rc = f->op.body_len ? ask_buffer(k, TFP_SF_ALLOC, (size_t)f->op.body_len, ms,
                                         &tmp.map, &tmp.lease, &st, why, sizeof why)
                            : 1;
    if (rc < 0)
        tfi_shm_disconnect(o);
    if (rc != 0 || !f->op.body_len) {
        if (rc > 0 && (st == TFP_ENOSPACE || st == TFP_ETOOBIG)) {
            snprintf(res->transport, sizeof(res->transport), "shm/memfd");
            res->http_status = tfp_status_http(st);
            tfi_rfail(res, tfi_from_proto(st), "%s", why);   /* as HTTP would answer */
            return queue_done(c, f);
        }
        return fall_back(c, f, f->op.body_len ? why : "an empty body");
    }
    if (f->op.body_fd >= 0 ? read_file(c, f, tmp.map.p, why, sizeof why) != 0
                           : (copy_segs(f, tmp.map.p), 0)) {
        tfp_sf_t m;                     /* the lent buffer is no longer wanted */
        memset(&m, 0, sizeof m);
        m.op = TFP_SF_RELEASE;
        m.lease = tmp.lease;
        (void)send_msg(k, &m);
        tfx_shm_close(&tmp.map);
        res->transport[0] = '\0';
        tfi_rfail(res, strstr(why, "canceled") ? TF_ECANCELED : TF_EIO, "%s", why);
        return queue_done(c, f);
    }
    uint64_t t_commit = tfx_now_ns();
    res->stages.send = (double)(t_commit - t_send) / 1e6;      /* lent, and copied into */
    res->stages.connect = res->stages.decode = 0;
    rc = commit(k, &tmp, &f->op, ms, &r, why, sizeof why);
    f->rt_ms = (double)(tfx_now_ns() - t_commit) / 1e6;
    tfx_shm_close(&tmp.map);
    if (rc != 0) {
        tfi_shm_disconnect(o);
        return fall_back(c, f, why);
    }
    snprintf(res->transport, sizeof(res->transport), "shm/memfd");
    commit_result(f, &r, f->op.body_len);
    return queue_done(c, f);
}

/* An OK answer's memfd fd (GET, CALL: the REPLY r) checked (its own size, its seals, the
 * span r names), mapped copy-on-write and decoded in place into f->doc, which holds the
 * lease until tf_doc_free. 0 with f's result filled, or -1 with err (fd closed, the lease
 * ended). */
static int map_answer(tf_client_t *c, tf_fetch_t *f, shmc_t *k, const tfp_sf_t *r, int fd,
                      tfp_err_t *err)
{
    tf_result_t *res = &f->result;
    size_t size;
    lease_t *l = NULL;
    tfp_doc_t *d = NULL;
    /* Trust nothing the daemon said about the memory: its own size, its seals, the span. */
    if (tfx_shm_check(fd, 1, TFX_SHM_SEAL_WRITE, &size, err) != TFP_OK ||
        tfp_sf_check_span(r->a, r->b, size, err) != TFP_OK) {
        close(fd);
        goto bad;
    }
    if (!(l = calloc(1, sizeof *l))) {
        close(fd);
        snprintf(err->msg, sizeof err->msg, "out of memory");
        goto bad;
    }
    l->lease = r->lease;
    /* Copy-on-write: the caller may write into what it got (a page it writes becomes its
     * own) while the daemon's bytes stay as they are; reads share the daemon's pages. */
    if (tfx_shm_map(fd, size, TFX_SHM_MAP_COPY_ON_WRITE, &l->map, err) != TFP_OK)
        goto bad;
    if (c->max_body > 0 && r->b > c->max_body) {
        snprintf(err->msg, sizeof err->msg, "the document (%llu bytes) exceeds the cap",
                 (unsigned long long)r->b);
        goto bad;
    }
    if (tfp_st_decode(l->map.p + r->a, (size_t)r->b, NULL, &d, err) != TFP_OK)
        goto bad;
    if (tfi_doc_wrap(d, NULL, &f->doc) != TF_OK) {
        tfp_doc_free(d);
        snprintf(err->msg, sizeof err->msg, "out of memory");
        goto bad;
    }
    atomic_fetch_add(&k->refs, 1);
    l->conn = k;
    f->doc->release = lease_release;
    f->doc->release_arg = l;
    f->doc->owns_bytes = 1;             /* copy-on-write: the caller's to write */
    f->doc->raw = l->map.p + r->a;
    f->doc->raw_len = (size_t)r->b;
    res->status = TF_OK;
    res->http_status = r->http ? (int)r->http : 200;
    res->bytes_received = r->b;
    return 0;
bad:
    /* The lease is ours to end even though the document is unusable. */
    if (l)
        tfx_shm_close(&l->map);
    free(l);
    if (r->lease) {
        tfp_sf_t m;
        memset(&m, 0, sizeof m);
        m.op = TFP_SF_RELEASE;
        m.lease = r->lease;
        (void)send_msg(k, &m);
    }
    res->transport[0] = '\0';
    return -1;
}

/* f's rendered body written at offset 0 of fd (pwritev, in as many calls as it takes). 0, or
 * -1 with why. */
static int write_segs(const tf_fetch_t *f, int fd, char *why, size_t why_size)
{
    struct iovec v[64];
    size_t seg = 0, in_seg = 0;
    off_t off = 0;
    while (seg < f->op.nsegs) {
        int n = 0;
        for (size_t i = seg; i < f->op.nsegs && n < 64; i++, n++) {
            size_t skip = i == seg ? in_seg : 0;
            v[n].iov_base = (uint8_t *)f->op.segs[i] + skip;
            v[n].iov_len = f->op.lens[i] - skip;
        }
        ssize_t w = pwritev(fd, v, n, off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            snprintf(why, why_size, "cannot write the call's document into the shm buffer: %s",
                     w < 0 ? strerror(errno) : "no progress");
            return -1;
        }
        off += w;
        for (size_t left = (size_t)w; left && seg < f->op.nsegs;) {
            size_t rest = f->op.lens[seg] - in_seg;
            if (left < rest) {
                in_seg += left;
                left = 0;
            } else {
                left -= rest;
                seg++;
                in_seg = 0;
            }
        }
        while (seg < f->op.nsegs && f->op.lens[seg] == in_seg) {   /* empty segments */
            seg++;
            in_seg = 0;
        }
    }
    return 0;
}

/* The call's document written into the lent buffer fd (taken: closed). From 2 MiB on it is
 * mapped (2 MiB pages: tfx_shm_map collapses a fresh one, a ready one is so already) and
 * copied into at memcpy speed, then unmapped before CALL (the daemon seals it); smaller
 * ones, or where mapping fails, go by pwritev, never mapped: in 4 KiB pages the page tables
 * cost more than the copy on our VMs, and pwritev leaves nothing mapped writable to seal
 * past. 0, or -1 with why. */
static int write_call(const tf_fetch_t *f, int fd, char *why, size_t why_size)
{
    tfx_shm_t m;
    tfp_err_t err;
    size_t len = (size_t)f->op.body_len;
    int dup_fd = len >= TFX_SHM_HUGE ? dup(fd) : -1;
    if (dup_fd >= 0 && tfx_shm_map(dup_fd, len, TFX_SHM_MAP_FILL, &m, &err) == TFP_OK) {
        copy_segs(f, m.p);
        tfx_shm_close(&m);
        close(fd);
        return 0;
    }
    int rc = write_segs(f, fd, why, why_size);
    close(fd);
    return rc;
}

/* A CALL over shm: the request document written into a buffer the daemon lends (ALLOC with
 * flag CALL), the route run by the daemon as over HTTP, the answer document mapped from
 * the memfd it lends back. A route the daemon declines (it answers later) goes over UCX or
 * HTTP, and so do its later calls; a call whose answer does not come in its time fails
 * (it may have run: never sent again). */
static tf_status_t shm_call(tf_client_t *c, tf_fetch_t *f)
{
    origin_t *o = f->origin;
    shmc_t *k = o->shm;
    tf_result_t *res = &f->result;
    char why[256] = "";
    long left = tfi_remaining_ms(f);
    long ms = left > 0 && left < SHM_TIMEOUT_MS ? left : SHM_TIMEOUT_MS;
    uint64_t lease = 0;
    tfp_status_t st = TFP_OK;
    tfp_err_t err;
    int bfd = -1;
    uint64_t t_send = tfx_now_ns();
    int rc = ask_fd(k, TFP_SF_ALLOC, TFP_SF_F_CALL, (size_t)f->op.body_len, ms, &bfd, &lease,
                    &st, why, sizeof why);
    if (rc < 0)
        tfi_shm_disconnect(o);
    if (rc != 0) {
        if (rc > 0 && st != TFP_EFULL && st != TFP_ENOMEM) {
            /* Refused as HTTP would refuse it (rights, max-body): the answer. */
            snprintf(res->transport, sizeof(res->transport), "shm/memfd");
            res->http_status = tfp_status_http(st);
            tfi_rfail(res, tfi_from_proto(st), "%s", why);
            return queue_done(c, f);
        }
        return fall_back(c, f, why);
    }
    rc = write_call(f, bfd, why, sizeof why);
    if (rc != 0) {
        tfp_sf_t m;                     /* the lent buffer is no longer wanted */
        memset(&m, 0, sizeof m);
        m.op = TFP_SF_RELEASE;
        m.lease = lease;
        (void)send_msg(k, &m);
        return fall_back(c, f, why);
    }
    (void)tfi_progress(c, 0, 0, f->op.body_len, f->op.body_len);
    tfp_sf_t q, r;
    memset(&q, 0, sizeof q);
    q.op = TFP_SF_CALL;
    q.seq = ++k->seq;
    q.lease = lease;
    q.a = f->op.body_len;
    if (tfp_sf_set_call(&q, f->op.name, f->op.user, f->op.request_id, &err) != TFP_OK) {
        q.op = TFP_SF_RELEASE;          /* the buffer is no longer wanted */
        q.a = 0;
        q.str_len = 0;
        q.str[0] = '\0';
        (void)send_msg(k, &q);
        return fall_back(c, f, err.msg);
    }
    if (send_msg(k, &q) != 0) {
        tfi_shm_disconnect(o);
        return fall_back(c, f, "cannot send CALL over the shm socket");
    }
    /* The route runs meanwhile: the request's own time, not the socket's. */
    int fd = -1;
    uint64_t t_req = tfx_now_ns();
    if (recv_reply(k, q.seq, left > 0 ? left : -1, &r, &fd, why, sizeof why) != 0) {
        tfi_shm_disconnect(o);
        snprintf(res->transport, sizeof(res->transport), "shm/memfd");
        tfi_rfail(res, strncmp(why, "no answer", 9) == 0 ? TF_ETIMEDOUT : TF_EIO,
                  "the call over shm: %s", why);
        return queue_done(c, f);
    }
    uint64_t t_rep = tfx_now_ns();
    res->bytes_sent = f->op.body_len;
    res->stages.connect = 0;                        /* connected */
    res->stages.send = (double)(t_req - t_send) / 1e6;  /* lent, written into, sent */
    f->rt_ms = (double)(t_rep - t_req) / 1e6;       /* the round trip, the server's time in it */
    if (r.status == TFP_ENOTIMPL && r.http == 0) {
        /* Declined: nothing ran. This route goes another way from now on. */
        snprintf(k->declined[k->ndeclined++ % MAX_DECLINED], sizeof k->declined[0], "%s",
                 f->op.name);
        res->bytes_sent = 0;
        return fall_back(c, f, r.str);
    }
    if (r.status == TFP_EFULL && strncmp(r.str, "shm: ", 5) == 0) {
        /* The lease bound (shm-lease-memory, or this connection's count): the answer cannot
         * be lent. Over UCX or HTTP with the same request id the replay window answers it
         * without running the route again. */
        res->bytes_sent = 0;
        return fall_back(c, f, r.str);
    }
    snprintf(res->transport, sizeof(res->transport), "shm/memfd");
    if (r.status != TFP_OK) {
        res->http_status = r.http ? (int)r.http : tfp_status_http((tfp_status_t)r.status);
        tfi_rfail(res, tfi_from_proto((tfp_status_t)r.status), "%s", r.str);
        return queue_done(c, f);
    }
    if (fd < 0) {
        tfi_rfail(res, TF_EPROTO, "the call over shm: an answer without a memfd");
        return queue_done(c, f);
    }
    if (map_answer(c, f, k, &r, fd, &err) != 0) {
        snprintf(res->transport, sizeof(res->transport), "shm/memfd");
        tfi_rfail(res, TF_EPROTO, "the call over shm: %s", err.msg);
        return queue_done(c, f);
    }
    res->stages.decode = (double)(tfx_now_ns() - t_rep) / 1e6;  /* checked, mapped, decoded */
    reply_answer(f, &r);
    return queue_done(c, f);
}

static tf_status_t shm_start(tf_client_t *c, tf_fetch_t *f)
{
    if (f->op.kind == TF_OP_PUT)
        return shm_put(c, f);
    if (f->op.kind == TF_OP_EXCHANGE)
        return shm_call(c, f);
    origin_t *o = f->origin;
    shmc_t *k = o->shm;
    tf_result_t *res = &f->result;
    char why[256] = "";
    tfp_sf_t m, r;
    memset(&m, 0, sizeof m);
    m.op = TFP_SF_GET;
    m.seq = ++k->seq;
    m.str_len = strlen(f->op.name);
    memcpy(m.str, f->op.name, m.str_len + 1);
    tfp_err_t err;
    if (f->c->verify && tfp_sf_add_line(&m, "Want-Repr-Digest", "sha-256=1", &err) != TFP_OK)
        return fall_back(c, f, err.msg);
    long ms = tfi_remaining_ms(f);
    int fd = -1;
    uint64_t t_req = tfx_now_ns();
    if (send_msg(k, &m) != 0 ||
        recv_reply(k, m.seq, ms > 0 && ms < SHM_TIMEOUT_MS ? ms : SHM_TIMEOUT_MS, &r, &fd, why,
                   sizeof why) != 0) {
        tfi_shm_disconnect(o);
        return fall_back(c, f, why[0] ? why : "the shm connection failed");
    }
    snprintf(res->transport, sizeof(res->transport), "shm/memfd");
    uint64_t t_rep = tfx_now_ns();
    f->rt_ms = (double)(t_rep - t_req) / 1e6;     /* the round trip, the server's time in it */
    res->stages.connect = res->stages.send = 0;     /* connected; a message */
    if (r.status == TFP_ENOTFOUND) {
        res->http_status = 404;
        tfi_rfail(res, TF_ENOTFOUND, "%s", r.str);
        return queue_done(c, f);
    }
    if (r.status != TFP_OK || fd < 0)
        return fall_back(c, f, r.status != TFP_OK ? r.str : "an answer without a memfd");
    if (map_answer(c, f, k, &r, fd, &err) != 0)
        return fall_back(c, f, err.msg);
    res->stages.decode = (double)(tfx_now_ns() - t_rep) / 1e6;  /* checked, mapped, decoded */
    reply_answer(f, &r);
    return queue_done(c, f);
}

/* Completes what start finished (callbacks run here). */
static void shm_drain(tf_client_t *c)
{
    shm_state_t *s = c->shm_state;
    while (s && s->n) {
        tf_fetch_t *f = s->done[0];
        memmove(s->done, s->done + 1, --s->n * sizeof *s->done);
        f->via = NULL;
        f->result.seconds = tfx_since_s(f->t0_ns);
        if (f->canceled || c->closing) {
            tf_doc_free(f->doc);            /* unmapped, its lease ended */
            f->doc = NULL;
            tfi_rfail(&f->result, TF_ECANCELED, "request canceled");
        }
        tfi_complete_fetch(c, f);
    }
}

static void shm_cancel(tf_client_t *c, tf_fetch_t *f)
{
    (void)c;
    f->canceled = 1;
}

static size_t shm_running(const tf_client_t *c)
{
    const shm_state_t *s = c->shm_state;
    return s ? s->n : 0;
}

static int shmt_open(tf_client_t *c)
{
    return (c->shm_state = calloc(1, sizeof(shm_state_t))) ? 0 : -1;
}

static void shmt_close(tf_client_t *c)
{
    shm_state_t *s = c->shm_state;
    if (!s)
        return;
    shm_drain(c);
    for (origin_t *o = c->origins; o; o = o->next)
        tfi_shm_disconnect(o);
    free(s->done);
    free(s);
    c->shm_state = NULL;
}

const tfi_transport_t tfi_shm = {
    .name = "shm",
    .open = shmt_open,
    .start = shm_start,
    .cancel = shm_cancel,
    .drain = shm_drain,
    .running = shm_running,
    .close = shmt_close,
};

/* ---- documents built in place ------------------------------------------------------------- */

/* tf_doc_new_shm (ALLOC: lent for one put) and tf_doc_new_staging (STAGE: the producer's
 * for its pushes): the document's header written into a buffer the daemon at url lends. */
static tf_status_t new_in_shm(tf_client_t *c, const char *url, const tf_tensor_spec_t *tensors,
                              size_t n, tfp_sf_op_t sop, const char *fn, tf_doc_t **out)
{
    int op = sop == TFP_SF_ALLOC ? TF_OP_PUT : TFI_OP_CALL;
    if (!c || !url || !out || (n && !tensors))
        return TF_EINVAL;
    if (c->in_cb || c->in_engine || c->closing) {
        char why[96];
        snprintf(why, sizeof why, "%s is not allowed inside a callback", fn);
        return tfi_refuse(c, op, TF_EINVAL, why);
    }
    if (sop == TFP_SF_STAGE && c->transport == TF_TRANSPORT_HTTP)
        return tfi_refuse(c, op, TF_ENOTIMPL, "transport policy http: pushes go over HTTP, "
                          "which carries no staged body");
    origin_t *o = NULL;
    tf_status_t ost = tfi_origin_of(c, url, op, &o);
    if (ost != TF_OK)
        return ost;
    if (!o->shm)
        (void)tf_client_upgrade(c, url);
    if (!o->shm) {
        char why[sizeof(o->shm_why) + 64];
        snprintf(why, sizeof why, "no shared memory with this server: %s",
                 o->shm_why[0] ? o->shm_why : o->why[0] ? o->why : "no upgrade");
        return tfi_refuse(c, op, TF_ENOTIMPL, why);
    }
    void *hdr = NULL;
    size_t hlen = 0, data = 0;
    tf_status_t st = tfi_layout_header(tensors, n, &hdr, &hlen, &data);
    if (st != TF_OK)
        return tfi_refuse(c, op, st, st == TF_ENOMEM ? NULL : "an invalid tensor layout");
    tf_doc_t *doc = NULL;
    lease_t *l = calloc(1, sizeof *l);
    char why[256] = "";
    tfp_status_t pst = TFP_OK;
    shmc_t *k = o->shm;
    int rc = l ? ask_buffer(k, sop, hlen + data, SHM_TIMEOUT_MS, &l->map, &l->lease, &pst,
                            why, sizeof why) : -1;
    if (rc != 0) {
        free(hdr);
        free(l);
        if (rc < 0 && l)
            tfi_shm_disconnect(o);
        return tfi_refuse(c, op, rc > 0 ? tfi_from_proto(pst) : l ? TF_EIO : TF_ENOMEM,
                          why[0] ? why : NULL);
    }
    memcpy(l->map.p, hdr, hlen);
    free(hdr);
    l->len = hlen + data;
    l->map.writable = 1;
    atomic_fetch_add(&k->refs, 1);
    l->conn = k;
    tfp_doc_t *d = NULL;
    tfp_err_t err;
    if (tfp_st_decode(l->map.p, l->len, NULL, &d, &err) != TFP_OK ||
        tfi_doc_wrap(d, NULL, &doc) != TF_OK) {
        tfp_doc_free(d);
        lease_release(l);               /* gives the buffer back */
        return tfi_refuse(c, op, TF_ENOMEM, NULL);
    }
    doc->release = lease_release;
    doc->release_arg = l;
    if (sop == TFP_SF_ALLOC) {
        doc->shm_lent = l;
    } else {
        doc->staged = l;
        doc->packed_p = l->map.p;       /* one piece, as tf_doc_new_packed's */
        doc->packed = l->len;
    }
    doc->frozen = 1;
    *out = doc;
    return TF_OK;
}

tf_status_t tf_doc_new_shm(tf_client_t *c, const char *url, const tf_tensor_spec_t *tensors,
                           size_t n, tf_doc_t **out)
{
    return new_in_shm(c, url, tensors, n, TFP_SF_ALLOC, "tf_doc_new_shm", out);
}

tf_status_t tf_doc_new_staging(tf_client_t *c, const char *url,
                               const tf_tensor_spec_t *tensors, size_t n, tf_doc_t **out)
{
    return new_in_shm(c, url, tensors, n, TFP_SF_STAGE, "tf_doc_new_staging", out);
}

int tfi_shm_staged(const origin_t *o, const tf_doc_t *doc, uint8_t ref[TFP_SF_STAGED_LEN])
{
    const lease_t *l = doc ? doc->staged : NULL;
    if (!l || !o->shm || l->conn != o->shm)
        return 0;                       /* another server's, or an earlier connection's */
    tfp_sf_staged_t r = {l->lease, 0, l->len};
    tfp_sf_staged_encode(&r, ref);
    return 1;
}

void *tf_doc_writable(const tf_doc_t *doc, size_t i)
{
    if (!doc || (!doc->shm_lent && !doc->packed && !doc->owns_bytes) || i >= tf_doc_count(doc))
        return NULL;
    return (void *)tf_doc_at(doc, i)->data;
}
