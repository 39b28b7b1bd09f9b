/* ucx_common.h - what the two raw UCX programs share: ucx-raw (the ceiling, ucx_raw.c) and
 * ucx-probe (the experiments and fault tests, ucx_probe.c).
 *
 * Owns the request/ack wire format (one active message id 17 with a 40-byte header and the
 * payload; a 48-byte header-only ack, id 18), a setup's description (config_t) and options,
 * context + worker setup, the server (busy-polling, or sleeping on the worker's efd), reading
 * an endpoint's lanes from ucp_ep_print_info, one size's measurement (ucxb_measure, over any
 * client's request function), the result lines (JSON on the original stdout, the table on
 * stderr), the memcpy baseline and the fork helpers. No tfetch code. Single-threaded except
 * where ucx_probe.c's client runs a progress thread (it calls none of these from there).
 */
#ifndef TFETCH_BENCH_UCX_COMMON_H
#define TFETCH_BENCH_UCX_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <ucp/api/ucp.h>

#include "bench/common.h"

#define MAX_SIZES 16
#define TIMEOUT_MS_DEFAULT 30000L
#define PAIR_SLACK_S 30             /* a pair's limit: its own deadlines plus this */
#define ADDR_MAX 65536

#define AM_REQ 17
#define AM_ACK 18
#define HDR_MAGIC 0x74667578u       /* "tfux" */

enum { OP_HELLO = 1, OP_DATA, OP_POISON, OP_CHECK, OP_QUIT, OP_DIE };
enum { F_VERIFY = 1 };
enum { ST_OK = 0, ST_BAD_HDR = 1, ST_NO_MEM = 2, ST_MISMATCH = 3, ST_RECV_ERR = 4 };

/* Request header: what every AM_REQ carries. */
typedef struct {
    uint32_t magic;
    uint16_t op;
    uint16_t flags;
    uint64_t id;            /* request id; the chunks of one request share it */
    uint64_t total;         /* payload bytes of the whole request */
    uint64_t offset;        /* where this message's payload goes */
    uint64_t seed;          /* pattern seed (OP_CHECK, F_VERIFY) */
} req_hdr_t;

/* Ack header: the whole AM_ACK (no payload). */
typedef struct {
    uint32_t magic;
    int32_t status;         /* ST_* */
    uint64_t id;
    uint64_t bytes;         /* payload bytes the server received for this id */
    uint32_t nrndv;         /* messages that came by rendezvous */
    uint32_t neager;        /* messages that came eagerly */
    uint64_t cpu_ns;        /* the server process's CPU time so far */
    uint64_t sleeps;        /* times the server has slept in epoll so far */
} ack_hdr_t;

_Static_assert(sizeof(req_hdr_t) == 40, "request header layout");
_Static_assert(sizeof(ack_hdr_t) == 48, "ack header layout");

enum { TM_SINGLE, TM_SERIALIZED, TM_MULTI };
enum { PT_NONE, PT_LOCK, PT_QUEUE };

/* One server/client pair's setup. ucx-raw sets name, tls, err_peer and the sizes only. */
typedef struct {
    char name[40];
    const char *tls;        /* UCX_TLS for both; NULL: the environment's (default "all") */
    const char *opt_name;   /* one more UCX setting for both (ucp_config_modify), e.g. */
    const char *opt_value;  /* "USE_MT_MUTEX", "y"; NULL: none */
    int err_peer;           /* UCP_ERR_HANDLING_MODE_PEER instead of NONE */
    int net_only;           /* server address from UCP_WORKER_ADDRESS_FLAG_NET_ONLY */
    int wakeup;             /* UCP_FEATURE_WAKEUP; sleep in epoll on the worker's efd */
    int thread_mode;        /* TM_* for the client's worker */
    int progress_thread;    /* PT_*: client: a progress thread progresses the worker; the main
                             * thread posts (PT_LOCK) or hands the sends to it (PT_QUEUE) */
    int kill_test;          /* the server SIGKILLs itself on receiving the request */
    int kill_client;        /* the client SIGKILLs itself right after posting the request */
    int expect_fail;        /* the endpoint is expected not to connect (shown, not failed) */
    size_t sizes[MAX_SIZES];
    int nsizes;
    size_t chunked[MAX_SIZES];  /* sizes also sent in chunks */
    int nchunked;
} config_t;

typedef struct {
    int reps;               /* 0: by size */
    int warmup;             /* -1: by size */
    size_t chunk;
    long timeout_ms;
    long kill_wait_ms;
    int kill_close;         /* the kill test's endpoint close: 0 FORCE with PEER, flush with
                             * NONE (what UCX allows); 1 FORCE; 2 flush */
    int json_only;
    int info;               /* print ucp_ep_print_info / ucp_worker_print_info text */
    double memcpy_gbps;
    long max_seconds;       /* the whole plan's time limit; 0: by plan */
} opts_t;

typedef struct {
    const char *bench;
    const config_t *cfg;
    const char *variant;
    char transport[64];
    const char *proto;
    size_t bytes;
    size_t chunk;
    int reps;
    int warmup;
    double p50_us, p99_us, mean_us, gbps, mean_gbps, vs_memcpy;
    double cli_cpu_us, srv_cpu_us;      /* CPU time per timed request, each process */
    double loop_us;                     /* wall time of the timed loop per request */
    double cli_sleeps, srv_sleeps;      /* epoll sleeps per timed request */
} result_t;

/* ---- output: JSON lines on the original stdout (see ucxb_json_init), the table on stderr */

/* UCX 1.13 writes its log lines ("UCX ERROR ...") to stdout unless UCX_LOG_FILE says
 * otherwise, so this points fd 1 at stderr and keeps the real stdout for the JSON lines.
 * 0, or -1 with the reason printed. */
int ucxb_json_init(void);
/* The JSON lines' stream (after ucxb_json_init). */
FILE *ucxb_json(void);
/* printf to the JSON lines' stream. */
__attribute__((format(printf, 1, 2))) void jprint(const char *fmt, ...);
/* The setup's fields of a JSON line: "config":...,"tls":...,... (no braces). */
void json_config(const config_t *c);
/* A result: its JSON line, and (unless json_only) its table row. */
void emit(const opts_t *o, const result_t *r);

/* ---- small helpers ------------------------------------------------------------------- */

/* 0 if p[0..n) is bench_fill_pattern(seed), else -1. */
int check_pattern(const unsigned char *p, size_t n, uint64_t seed);
/* Page-aligned, written with byte (so no page fault is timed); free_touched(NULL) is a no-op. */
unsigned char *alloc_touched(size_t n, int byte);
void free_touched(unsigned char *p, size_t n);
/* This process's CPU time (all threads), seconds. */
double cpu_s(void);
/* The timing fields of r from n samples (seconds); sorts t. */
void summarise(double *t, int n, size_t bytes, double memcpy_gbps, result_t *r);
/* The memcpy baseline: 64 MiB into a written buffer, 20 timed copies. 0, or -1. */
int bench_memcpy(result_t *r);

/* ---- UCX setup shared by both sides -------------------------------------------------- */

typedef struct {
    ucp_context_h ctx;
    ucp_worker_h w;
    int efd;                    /* ucp_worker_get_efd (wakeup) */
    int epfd;                   /* an epoll set holding efd */
} ucx_t;

int ucx_open(ucx_t *u, const config_t *c, int thread_mode, const char *who);
void ucx_close(ucx_t *u);
/* Sleeps on the worker's efd if nothing is pending (wakeup mode): 1 slept or armed-and-woke,
 * 0 must progress more, -1 error. */
int ucx_sleep(ucx_t *u, int timeout_ms, unsigned long *sleeps);
ucs_thread_mode_t tm_ucs(int tm);
const char *ucs_tm_name(ucs_thread_mode_t tm);
/* ucp_ep_print_info text on stderr, between marker lines. */
void print_ep_info(const char *who, ucp_ep_h ep);
/* Reads ucp_ep_print_info text: lanes (a JSON array body), am_send (the protocol thresholds
 * line) and tr ("ucx/sysv+cma", "ucx/tcp", ...); see ucx_common.c. */
void parse_ep_info(const char *text, char *lanes, size_t lcap, char *am_send, size_t acap,
                   char *tr, size_t tcap);

/* Reads ep's ucp_ep_print_info (after the first round trip: wireup done) into tr, lanes and
 * am_send (parse_ep_info); with info, also prints the text. */
void describe_ep(ucp_ep_h ep, const char *name, int info, char *tr, size_t tcap, char *lanes,
                 size_t lcap, char *am_send, size_t acap);

/* The client's endpoint to the worker at addr, with the error mode c says (err_cb, arg: the
 * PEER mode's error callback), ack_cb (arg) set as AM_ACK's handler. 0, or -1 printed. */
int connect_ep(ucp_worker_h w, const config_t *c, const void *addr, int info,
               ucp_am_recv_callback_t ack_cb, ucp_err_handler_cb_t err_cb, void *arg,
               ucp_ep_h *out);
/* Closes ep (flush, or FORCE), progressing w for 2 s at most; ep NULL: nothing. */
void close_ep(ucp_worker_h w, ucp_ep_h ep, int force);

/* ---- the server ---------------------------------------------------------------------- */

/* What the server's loop knows of the request being assembled (for a server_hook_t). */
typedef struct {
    uint64_t id, total, got;
    double req_t;               /* when it began; 0: none yet */
    int recv_failed;            /* a receive completed with an error: the peer is gone */
    ucs_status_t recv_status;
    double recv_fail_t;
} server_view_t;

/* Called once per turn of the server's loop (ucx-probe's kill-client report): 1 ends the
 * server with exit status 0, 0 goes on. */
typedef int (*server_hook_t)(const server_view_t *v, const config_t *c, const opts_t *o);

/* Runs a server until a client says OP_QUIT (or idle_s passes without a message; 0: never).
 * Its worker address goes to addr_fd (length-prefixed) or, if addr_fd < 0, to addr_file or
 * the JSON stream as hex. hook may be NULL. Returns 0 or 1 (the process's exit status). */
int run_server(const config_t *c, const opts_t *o, int addr_fd, const char *addr_file,
               double idle_s, server_hook_t hook);

/* ---- the client side: one request function, shared measurement ----------------------- */

/* Sends one request and waits for its ack: 0 and *ack, or -1 with the reason printed. */
typedef int (*request_fn_t)(void *cli, uint16_t op, uint16_t flags, size_t n, size_t chunk,
                            uint64_t seed, ack_hdr_t *ack);

/* Fills hdrs[0..pieces) for a request of n bytes with id (chunk 0: one message; else
 * messages of chunk bytes, all in flight), growing *hdrs (capacity *cap). The number of
 * messages, or 0 if out of memory. */
size_t prepare_hdrs(req_hdr_t **hdrs, size_t *cap, uint64_t id, uint16_t op, uint16_t flags,
                    size_t n, size_t chunk, uint64_t seed);
/* Posts the npieces messages of hdrs, payload from buf, with cb/user_data on each send.
 * Returns how many were posted; *immediate counts those complete at once, *err the first
 * failed post's status (unchanged if none). */
size_t post_hdrs(ucp_ep_h ep, const req_hdr_t *hdrs, size_t npieces, const unsigned char *buf,
                 ucp_send_nbx_callback_t cb, void *user_data, int *immediate, int *err);
/* Checks an ack against request id of op and n bytes: 0, or -1 with the reason printed. */
int check_ack(const ack_hdr_t *ack, uint64_t id, uint16_t op, size_t n);

/* One size, one variant: verify, warm up, time, emit. sleeps: the client's epoll sleep
 * counter (or NULL). 0 ok. */
int ucxb_measure(const config_t *c, const opts_t *o, request_fn_t req, void *cli,
                 const unsigned long *sleeps, const char *transport, size_t n, size_t chunk,
                 const char *variant);
/* The ucx-ep line and row, after the first round trip. */
void emit_ep(const config_t *c, const opts_t *o, ucs_thread_mode_t granted,
             const char *transport, double connect_ms, const char *lanes, const char *am_send);

/* ---- pairs: a server and a client, forked -------------------------------------------- */

int read_full(int fd, void *buf, size_t n, int timeout_ms);
/* Waits for pid until deadline (then SIGKILLs it): 0 with *status, -1 if it was killed. */
int wait_child(pid_t pid, double deadline, int *status);
/* In a forked child: die with the parent. */
void child_setup(void);
/* Forks the server (run_server with hook) and reads its address: 0 with *spid and the
 * address (malloc'ed, *len bytes), or -1 (the server is gone). */
int fork_server(const config_t *c, const opts_t *o, double idle_s, server_hook_t hook,
                pid_t *spid, unsigned char **addr, uint32_t *len);

/* The largest size c sends (at least 8). */
size_t config_max_size(const config_t *c);
/* Runs pair() for each setup of the plan, until run_deadline; returns the exit status (0:
 * every setup ran and passed, 1). */
int run_plan(const config_t *plan, int nplan, const opts_t *o, double run_deadline,
             int (*pair)(const config_t *c, const opts_t *o, double run_deadline));

/* Parses a plan entry's sizes; adds it to plan[*n]. */
config_t *add_config(config_t *plan, int *n, const char *name, const char *tls, int err_peer,
                     const char *sizes, const char *chunked);

#endif
