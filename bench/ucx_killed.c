/* ucx_killed.c - ucx-killed: does a UCX server survive clients that die in the middle of
 * their wireup? The evidence behind tfetchd(8)'s BUGS section, and the check to run on a
 * new UCX before the test ucx_killed_mid_handshake is let run (tests/check_ucx.c).
 *
 * UCX only, no tfetch code: a server process (one worker, one active-message handler that
 * replies) and, one after another, N client processes that connect, send one message,
 * progress for 0-7 ms plus a little more each round, and _exit() with everything as it is
 * (what SIGKILL leaves: the kernel closes their sockets). After each client the server must
 * still be alive; at the end a healthy client must get a reply. Two ways to connect, each
 * with UCP_ERR_HANDLING_MODE_NONE and PEER:
 *   address   ucp_ep_create to the server's worker address (what tfetch's upgrade does);
 *   listener  ucp_listener_create on 127.0.0.1, clients connect by sockaddr.
 *
 * Usage: ucx-killed [CLIENTS [RUNS]] (default 80 clients, 3 runs per setup). One line per
 * run on stdout: setup, clients, and "survived" or "died after K (signal S)"; the server's
 * UCX error lines go to stderr. Exit status: 0 when every server survived, 1 otherwise.
 *
 * Measured with Debian 12's UCX 1.13.1 over tcp (UCX_TLS=tcp: clients of another uid, and
 * every client on another host) on a 2-core VM: "address" dies within 7-15 clients
 * (ucp_request.c:684, a queued wireup REQ purged when the server's connection back to the
 * dead client fails; upstream openucx PR #8175 removed that assertion), "listener" survived
 * 60 of 62 runs of 80 and died twice (wireup.c:1209 `cm_wireup_ep != NULL` in
 * ucp_wireup_init_lanes, for a connection request whose client was gone).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#define AM_HELLO 1
#define AM_REPLY 2

static ucp_context_h ctx;
static ucp_worker_h worker;
static int got_reply;

static long now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000L + t.tv_nsec / 1000;
}

static void open_worker(void)
{
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if (ucp_init(&p, NULL, &ctx) != UCS_OK || ucp_worker_create(ctx, &wp, &worker) != UCS_OK)
        _exit(3);
}

static void close_failed(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    (void)arg;
    (void)st;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r))
        ucp_request_free(r);
}

static ucp_err_handling_mode_t err_mode;

static void on_conn(ucp_conn_request_h cr, void *arg)
{
    (void)arg;
    ucp_ep_h ep;
    ucp_ep_params_t p = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                                       UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                       UCP_EP_PARAM_FIELD_ERR_HANDLER,
                         .conn_request = cr, .err_mode = err_mode,
                         .err_handler = {.cb = close_failed}};
    (void)ucp_ep_create(worker, &p, &ep);   /* fails for a client already gone: fine */
}

static void sent(void *r, ucs_status_t s, void *u)
{
    (void)s;
    (void)u;
    ucp_request_free(r);
}

static ucs_status_t on_hello(void *arg, const void *h, size_t hl, void *d, size_t l,
                             const ucp_am_recv_param_t *p)
{
    static char msg[64] = "reply";
    (void)arg, (void)h, (void)hl, (void)d, (void)l;
    if (p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
        ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.send = sent};
        (void)ucp_am_send_nbx(p->reply_ep, AM_REPLY, NULL, 0, msg, sizeof msg, &rp);
    }
    return UCS_OK;
}

static ucs_status_t on_reply(void *arg, const void *h, size_t hl, void *d, size_t l,
                             const ucp_am_recv_param_t *p)
{
    (void)arg, (void)h, (void)hl, (void)d, (void)l, (void)p;
    got_reply++;
    return UCS_OK;
}

static void handle(unsigned id, ucp_am_recv_callback_t cb)
{
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                               UCP_AM_HANDLER_PARAM_FIELD_CB,
                                 .id = id, .cb = cb};
    (void)ucp_worker_set_am_recv_handler(worker, &hp);
}

/* The server: tells its parent (ready) its worker address, or its port once listening. */
static void serve(int listener, int ready)
{
    open_worker();
    handle(AM_HELLO, on_hello);
    ucp_listener_h l;
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ucp_listener_params_t lp = {.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                                              UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
                                .sockaddr = {.addr = (struct sockaddr *)&a, .addrlen = sizeof a},
                                .conn_handler = {.cb = on_conn}};
    ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    ucp_address_t *addr;
    size_t len;
    if (listener) {
        if (ucp_listener_create(worker, &lp, &l) != UCS_OK || ucp_listener_query(l, &la) != UCS_OK)
            _exit(3);
        uint16_t port = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
        len = sizeof port;
        if (write(ready, &len, sizeof len) < 0 || write(ready, &port, sizeof port) < 0)
            _exit(3);
    } else {
        if (ucp_worker_get_address(worker, &addr, &len) != UCS_OK ||
            write(ready, &len, sizeof len) < 0 || write(ready, addr, len) < 0)
            _exit(3);
    }
    for (;;)
        ucp_worker_progress(worker);
}

/* One client: connects, says hello, progresses for wait_us, then goes as it is (healthy:
 * waits up to 2 s for the reply and exits 0 only if it came). */
static void client(int listener, const void *addr, long wait_us, int healthy)
{
    open_worker();
    handle(AM_REPLY, on_reply);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ucp_ep_params_t p = {.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                       UCP_EP_PARAM_FIELD_ERR_HANDLER,
                         .err_mode = err_mode, .err_handler = {.cb = close_failed}};
    if (listener) {
        a.sin_port = htons(*(const uint16_t *)addr);
        p.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
        p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
        p.sockaddr.addr = (struct sockaddr *)&a;
        p.sockaddr.addrlen = sizeof a;
    } else {
        p.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        p.address = addr;
    }
    ucp_ep_h ep;
    if (ucp_ep_create(worker, &p, &ep) != UCS_OK)
        _exit(1);
    static char msg[64] = "hello";
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_AM_SEND_FLAG_REPLY};
    (void)ucp_am_send_nbx(ep, AM_HELLO, NULL, 0, msg, sizeof msg, &rp);
    long end = now_us() + (healthy ? 2000000 : wait_us);
    while (now_us() < end && !(healthy && got_reply))
        ucp_worker_progress(worker);
    _exit(healthy && !got_reply ? 1 : 0);
}

/* One run: 1 when the server survived every client and answered a healthy one after. */
static int run(int listener, int clients)
{
    int pp[2];
    if (pipe(pp) < 0)
        return 0;
    pid_t srv = fork();
    if (srv == 0) {
        close(pp[0]);
        serve(listener, pp[1]);
    }
    close(pp[1]);
    size_t len = 0;
    static char addr[8192];
    if (srv < 0 || read(pp[0], &len, sizeof len) != sizeof len || len > sizeof addr ||
        read(pp[0], addr, len) != (ssize_t)len) {
        printf("%-8s %-4s the server did not start\n", listener ? "listener" : "address",
               err_mode == UCP_ERR_HANDLING_MODE_PEER ? "peer" : "none");
        close(pp[0]);
        return 0;
    }
    close(pp[0]);
    int ok = 1, ws = 0, i;
    for (i = 0; i <= clients && ok; i++) {
        pid_t k = fork();
        if (k == 0)
            client(listener, addr, (i % 8) * 1000L + (i / 8) * 137L, i == clients);
        waitpid(k, &ws, 0);
        int healthy_failed = i == clients && !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
        if (waitpid(srv, &ws, WNOHANG) == srv || healthy_failed) {
            printf("%-8s %-4s died after %d of %d clients (%s %d)\n",
                   listener ? "listener" : "address",
                   err_mode == UCP_ERR_HANDLING_MODE_PEER ? "peer" : "none", i + 1, clients,
                   healthy_failed ? "no reply to the healthy client, status" : "signal",
                   healthy_failed ? ws : WIFSIGNALED(ws) ? WTERMSIG(ws) : -1);
            ok = 0;
        }
    }
    if (ok)
        printf("%-8s %-4s survived %d killed clients and answered the next\n",
               listener ? "listener" : "address",
               err_mode == UCP_ERR_HANDLING_MODE_PEER ? "peer" : "none", clients);
    fflush(stdout);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    return ok;
}

int main(int argc, char **argv)
{
    int clients = argc > 1 ? atoi(argv[1]) : 80, runs = argc > 2 ? atoi(argv[2]) : 3;
    if (clients < 1 || runs < 1 || argc > 3) {
        fprintf(stderr, "usage: ucx-killed [CLIENTS [RUNS]]\n");
        return 2;
    }
    int all = 1;
    for (int listener = 0; listener < 2; listener++)
        for (int m = 0; m < 2; m++) {
            err_mode = m ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
            for (int r = 0; r < runs; r++)
                all &= run(listener, clients);
        }
    return all ? 0 : 1;
}
