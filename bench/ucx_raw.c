/* ucx_raw.c - ucx-raw, the raw UCX active-message ceiling for tfetch's UCX transport.
 *
 * No tfetch code: a client sends a request as one UCP active message (a small fixed header plus
 * N payload bytes) to a server, which receives it into a buffer it allocated and touched
 * beforehand (eager: copied from the data pointer; rendezvous: ucp_am_recv_data_nbx straight
 * into the buffer) and answers with a header-only ack. The client times request -> ack round
 * trips (warm-up first) and reports p50/p99 latency and payload/p50 throughput, next to a
 * memcpy baseline from the same run. A "chunked" variant sends a large payload as several
 * messages (default 4 MiB) all in flight at once, acked once when the last byte has landed.
 *
 * Connection is by worker address, as tfetch's upgrade does for same-host peers: the server
 * (forked) hands its ucp_worker_query() address blob to the client (forked) through a pipe;
 * the client creates its endpoint with UCP_EP_PARAM_FIELD_REMOTE_ADDRESS and sends with
 * UCP_AM_SEND_FLAG_REPLY, and the server answers on the reply_ep that arrives with each
 * message. The endpoint's lanes (from ucp_ep_print_info) say which transports carried it:
 * "ucx/sysv+cma", "ucx/tcp", ... Both sides busy-poll one worker from one thread.
 *
 * Default plan: the memcpy baseline, then server/client pairs for default UCX_TLS and
 * UCX_TLS=tcp with UCP_ERR_HANDLING_MODE_NONE, and both with UCP_ERR_HANDLING_MODE_PEER.
 * The experiments (NET_ONLY, sleeping progress, threads) and the kill tests are ucx-probe's
 * (ucx_probe.c); the wire format, the server and the measurement are ucx_common.c's.
 *
 * Correctness before speed: for each size the server first receives into a poisoned buffer and
 * checks every byte; before the last timed repetition it poisons the buffer again and checks it
 * after. A mismatch fails that measurement.
 *
 * Output: one JSON line per measurement on stdout, the human table on stderr (--json: no
 * table). Exit status 0 if everything ran, 1 if anything failed, 2 on a usage error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "bench/common.h"
#include "bench/ucx_common.h"

#define MAX_CONFIGS 8
#define MAX_SECONDS_DEFAULT 100     /* the plan's limit */

static const char *const default_sizes = "8,64K,4M,64M,256M";
static const char *const default_chunked = "64M,256M";

const char *const bench_prog = "ucx-raw";

/* ---- the client: one thread, one endpoint, busy-polling -------------------------------- */

typedef struct {
    ucx_t u;
    const config_t *cfg;
    const opts_t *o;
    ucp_ep_h ep;
    char transport[64];
    char lanes[1024];           /* JSON array body */
    char am_send[160];          /* the protocol thresholds line */
    uint64_t next_id;
    req_hdr_t *hdrs;            /* the request in flight */
    size_t nhdrs;               /* capacity */
    int acked;
    ack_hdr_t ack;
    int sends_done;
    int send_status;            /* first error status of a send */
    int ep_failed;
    ucs_status_t ep_status;
    unsigned char *buf;         /* the payload sent */
    size_t cap;
} client_t;

static ucs_status_t cli_ack_cb(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param)
{
    client_t *c = arg;

    (void)data;
    (void)length;
    (void)param;
    if (header_length == sizeof c->ack) {
        memcpy(&c->ack, header, sizeof c->ack);
        c->acked = 1;
    } else {
        bench_errorf("client: ack header of %zu bytes", header_length);
    }
    return UCS_OK;
}

static void cli_send_cb(void *req, ucs_status_t st, void *user_data)
{
    client_t *c = user_data;

    if (st != UCS_OK && c->send_status == UCS_OK)
        c->send_status = (int)st;
    ucp_request_free(req);
    c->sends_done++;
}

static void cli_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    client_t *c = arg;

    (void)ep;
    c->ep_status = st;
    c->ep_failed = 1;
}

/* Progresses until the ack has come and every send is complete (0), something failed (-1),
 * or the deadline passed (-2). */
static int cli_wait(client_t *c, int nsends, double deadline)
{
    unsigned long spins = 0;

    while (!(c->acked && c->sends_done >= nsends)) {
        if (c->ep_failed || c->send_status)
            return -1;
        if (!ucp_worker_progress(c->u.w) && (++spins & 0x3ff) == 0 && tfx_now_s() > deadline)
            return -2;
    }
    return 0;
}

/* A request_fn_t: one request (ucxb_measure's), its ack checked. */
static int cli_request(void *arg, uint16_t op, uint16_t flags, size_t n, size_t chunk,
                       uint64_t seed, ack_hdr_t *ack)
{
    client_t *c = arg;
    uint64_t id = ++c->next_id;
    size_t pieces = prepare_hdrs(&c->hdrs, &c->nhdrs, id, op, flags, n, chunk, seed), posted;
    double drain_until;
    int rc;

    if (!pieces)
        return -1;
    c->acked = 0;
    c->sends_done = 0;
    posted = post_hdrs(c->ep, c->hdrs, pieces, c->buf, cli_send_cb, c, &c->sends_done,
                       &c->send_status);
    rc = cli_wait(c, (int)pieces, tfx_now_s() + (double)c->o->timeout_ms / 1000);
    if (rc != 0) {
        if (rc == -2)
            bench_errorf("client: no ack within %ld ms (op %u, %zu bytes)", c->o->timeout_ms, op,
                         n);
        else
            bench_errorf("client: request failed: %s", ucs_status_string(
                         c->ep_failed ? c->ep_status : (ucs_status_t)c->send_status));
        /* the messages posted still refer to hdrs and buf: let them complete (2 s at most) */
        drain_until = tfx_now_s() + 2;
        while (c->sends_done < (int)posted && tfx_now_s() < drain_until)
            ucp_worker_progress(c->u.w);
        return -1;
    }
    *ack = c->ack;
    return check_ack(ack, id, op, n);
}

static int cli_connect(client_t *c, const void *addr)
{
    return connect_ep(c->u.w, c->cfg, addr, c->o->info, cli_ack_cb, cli_ep_err_cb, c, &c->ep);
}


/* The client side of config c against the server whose worker address is addr: every size,
 * single then chunked. The process's exit status. */
static int run_client(const config_t *c, const opts_t *o, const void *addr)
{
    client_t cl;
    ack_hdr_t ack;
    size_t maxn = config_max_size(c);
    int i, failures = 0;
    double t0;

    memset(&cl, 0, sizeof cl);
    cl.cfg = c;
    cl.o = o;
    if (!(cl.buf = alloc_touched(maxn, 0))) {
        bench_errorf("client: out of memory (%zu bytes)", maxn);
        return 1;
    }
    cl.cap = maxn;
    if (ucx_open(&cl.u, c, TM_SINGLE, "client") != 0 || cli_connect(&cl, addr) != 0) {
        failures++;
        goto out;
    }
    t0 = tfx_now_s();
    if (cli_request(&cl, OP_HELLO, 0, 0, 0, 0, &ack) != 0) {
        bench_errorf("%s: the first round trip failed", c->name);
        failures++;
        goto out;
    }
    describe_ep(cl.ep, c->name, o->info, cl.transport, sizeof cl.transport, cl.lanes,
                sizeof cl.lanes, cl.am_send, sizeof cl.am_send);
    emit_ep(c, o, UCS_THREAD_MODE_SINGLE, cl.transport, (tfx_now_s() - t0) * 1e3, cl.lanes,
            cl.am_send);
    for (i = 0; i < c->nsizes; i++) {
        bench_fill_pattern(cl.buf, c->sizes[i], c->sizes[i]);
        if (ucxb_measure(c, o, cli_request, &cl, NULL, cl.transport, c->sizes[i], 0,
                         "single") != 0)
            failures++;
    }
    for (i = 0; i < c->nchunked; i++) {
        if (c->chunked[i] <= o->chunk)
            continue;
        bench_fill_pattern(cl.buf, c->chunked[i], c->chunked[i]);
        if (ucxb_measure(c, o, cli_request, &cl, NULL, cl.transport, c->chunked[i], o->chunk,
                         "chunked") != 0)
            failures++;
    }
    if (cli_request(&cl, OP_QUIT, 0, 0, 0, 0, &ack) != 0)
        failures++;
out:
    close_ep(cl.u.w, cl.ep, 0);
    ucx_close(&cl.u);
    free_touched(cl.buf, cl.cap);
    free(cl.hdrs);
    return failures ? 1 : 0;
}

/* ---- a pair: a server and a client, forked --------------------------------------------- */

static int run_pair(const config_t *c, const opts_t *o, double run_deadline)
{
    double limit = 120 + PAIR_SLACK_S, deadline = tfx_now_s() + limit;
    unsigned char *addr;
    uint32_t len;
    pid_t spid, cpid;
    int status = 0, failures = 0;

    if (deadline > run_deadline)
        deadline = run_deadline;
    if (fork_server(c, o, limit, NULL, &spid, &addr, &len) != 0)
        return 1;
    cpid = fork();
    if (cpid < 0) {
        bench_errorf("fork: %s", strerror(errno));
        kill(spid, SIGKILL);
        waitpid(spid, &status, 0);
        free(addr);
        return 1;
    }
    if (cpid == 0) {
        int rc;
        child_setup();
        rc = run_client(c, o, addr);
        fflush(ucxb_json());
        fflush(stderr);
        _exit(rc);
    }
    free(addr);
    if (wait_child(cpid, deadline, &status) != 0) {
        bench_errorf("%s: the client did not finish in time (killed)", c->name);
        failures++;
    } else if (WIFSIGNALED(status)) {
        bench_errorf("%s: the client was killed by signal %d (%s)", c->name, WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        failures++;
    } else if (WEXITSTATUS(status) != 0) {
        failures++;
    }
    /* a client that finished well told the server to quit; otherwise it is not waited for */
    if (wait_child(spid, tfx_now_s() + (failures ? 1 : 10), &status) != 0) {
        if (!failures) {
            bench_errorf("%s: the server did not exit (killed)", c->name);
            failures++;
        }
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        bench_errorf("%s: the server failed (wait status %d)", c->name, status);
        failures++;
    }
    return failures;
}

/* ---- main ----------------------------------------------------------------------------- */

static int plan_default(config_t *plan, const char *sizes, const char *chunked)
{
    int n = 0;

    add_config(plan, &n, "shm", NULL, 0, sizes, chunked);
    add_config(plan, &n, "tcp", "tcp", 0, sizes, chunked);
    add_config(plan, &n, "shm-errpeer", NULL, 1, "8,64M", "64M");
    add_config(plan, &n, "tcp-errpeer", "tcp", 1, "8,64M", "");
    return n;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: ucx-raw [options]      fork server+client pairs (the default plan)\n"
        "Raw UCX active-message request/ack round trips: the ceiling for tfetch's UCX transport.\n"
        "JSON lines go to stdout, the human table to stderr. Experiments and kill tests: ucx-probe.\n"
        "\n"
        "Plan: shm (UCX_TLS from the environment, default all), tcp (UCX_TLS=tcp),\n"
        "  shm-errpeer and tcp-errpeer (UCP_ERR_HANDLING_MODE_PEER: 8 B, 64 MiB).\n"
        "  A setup option (--tls, --err-mode) runs that one setup instead.\n"
        "\n"
        "  --tls LIST          UCX_TLS for both sides (e.g. tcp, sysv,cma)\n"
        "  --err-mode none|peer  the client endpoint's error handling mode\n"
        "  --sizes LIST        payload sizes (default %s; K/M/G binary)\n"
        "  --chunked LIST      sizes also sent as chunks in flight (default %s; none)\n"
        "  --chunk SIZE        chunk size (default 4M)\n"
        "  --reps N, --warmup N  timed/untimed repetitions (default by size)\n"
        "  --timeout-ms MS     per request (default %ld)\n"
        "  --max-seconds S     time limit for all setups together (default %d)\n"
        "  --info              print ucp_worker_print_info and ucp_ep_print_info text\n"
        "  --json              JSON lines only\n",
        default_sizes, default_chunked, TIMEOUT_MS_DEFAULT, MAX_SECONDS_DEFAULT);
}

/* Parses argv into o and one (the single setup); *setup: a setup option was given. 0, 1
 * (--help: done), or 2 (usage error). */
static int parse_args(int argc, char **argv, opts_t *o, config_t *one, int *setup,
                      const char **sizes, const char **chunked)
{
    long v;
    int i;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--json")) {
            o->json_only = 1;
            continue;
        } else if (!strcmp(a, "--info")) {
            o->info = 1;
            continue;
        }
        if (!val) {
            bench_errorf(strncmp(a, "--", 2) ? "unknown option '%s' (try --help)"
                                              : "%s needs a value (or is unknown; try --help)", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--tls")) {
            one->tls = strcmp(val, "default") ? val : NULL;
            *setup = 1;
        } else if (!strcmp(a, "--err-mode")) {
            if (strcmp(val, "none") && strcmp(val, "peer")) {
                bench_errorf("--err-mode none|peer");
                return 2;
            }
            one->err_peer = !strcmp(val, "peer");
            *setup = 1;
        } else if (!strcmp(a, "--sizes")) {
            *sizes = val;
        } else if (!strcmp(a, "--chunked")) {
            *chunked = val;
        } else if (!strcmp(a, "--chunk")) {
            if (bench_parse_size(val, &o->chunk) != 0) {
                bench_errorf("bad --chunk '%s'", val);
                return 2;
            }
        } else if (!strcmp(a, "--max-seconds")) {
            if (bench_parse_long(val, 1, 86400, &v) != 0) {
                bench_errorf("bad --max-seconds '%s'", val);
                return 2;
            }
            o->max_seconds = v;
        } else if (!strcmp(a, "--reps") || !strcmp(a, "--warmup") || !strcmp(a, "--timeout-ms")) {
            if (bench_parse_long(val, !strcmp(a, "--reps") ? 1 : 0, 100000000L, &v) != 0) {
                bench_errorf("bad %s '%s'", a, val);
                return 2;
            }
            if (!strcmp(a, "--reps"))
                o->reps = (int)v;
            else if (!strcmp(a, "--warmup"))
                o->warmup = (int)v;
            else
                o->timeout_ms = v ? v : 24L * 3600 * 1000;
        } else {
            bench_errorf("unknown option '%s' (try --help)", a);
            return 2;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    static config_t plan[MAX_CONFIGS];
    const char *sizes = default_sizes, *chunked = default_chunked;
    int nplan, setup = 0, rc;
    config_t one;
    result_t mc;
    opts_t o;
    double run_deadline;

    memset(&o, 0, sizeof o);
    o.warmup = -1;
    o.chunk = 4 * MIB;
    o.timeout_ms = TIMEOUT_MS_DEFAULT;
    memset(&one, 0, sizeof one);
    if ((rc = parse_args(argc, argv, &o, &one, &setup, &sizes, &chunked)) != 0)
        return rc == 1 ? 0 : rc;
    nplan = plan_default(plan, sizes, chunked);
    if (!plan[0].nsizes || bench_parse_sizes(sizes, one.sizes, &one.nsizes, MAX_SIZES, 1) != 0 ||
        bench_parse_sizes(chunked, one.chunked, &one.nchunked, MAX_SIZES, 1) != 0) {
        bench_errorf("bad --sizes/--chunked (e.g. 8,64K,4M; at most %d)", MAX_SIZES);
        return 2;
    }
    if (setup) {
        snprintf(one.name, sizeof one.name, "one");
        plan[0] = one;
        nplan = 1;
    }
    signal(SIGPIPE, SIG_IGN);
    if (ucxb_json_init() != 0 || bench_memcpy(&mc) != 0)
        return 1;
    o.memcpy_gbps = mc.gbps;
    emit(&o, &mc);

    run_deadline = tfx_now_s() + (double)(o.max_seconds ? o.max_seconds : MAX_SECONDS_DEFAULT);
    return run_plan(plan, nplan, &o, run_deadline, run_pair);
}
