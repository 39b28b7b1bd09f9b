/* ucx_common.c - UCX context and worker setup, and the one progress loop, shared by
 * ucx_server.c and ucx_client.c. The loop runs on each side's progress thread; setup on the
 * thread that starts it; tfx_ucx_base_wake on any thread (it writes our own eventfd: the
 * worker may be replaced under another thread's feet, so nobody else touches it).
 */
#include "config.h"
#include "transports/ucx_common.h"
#include "transports/clock.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Creates b->worker with b's handler, its event fd in b->epfd. */
static tfp_status_t worker_open(tfx_ucx_base_t *b, tfp_err_t *err)
{
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = b->thread_mode};
    ucs_status_t st = ucp_worker_create(b->ctx, &wp, &b->worker);
    if (st != UCS_OK) {
        b->worker = NULL;
        return tfp_err_set(err, TFP_EINTERNAL, "UCX worker: %s", ucs_status_string(st));
    }
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        .id = b->am_id, .cb = b->am_cb, .arg = b->am_arg, .flags = UCP_AM_FLAG_WHOLE_MSG};
    st = ucp_worker_set_am_recv_handler(b->worker, &hp);
    if (st == UCS_OK)
        st = ucp_worker_get_efd(b->worker, &b->efd);
    if (st != UCS_OK) {
        tfp_err_set(err, TFP_EINTERNAL, "UCX worker setup: %s", ucs_status_string(st));
        goto destroy;
    }
    ucp_worker_attr_t wa = {.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER};
    b->max_am_header = ucp_worker_query(b->worker, &wa) == UCS_OK ? wa.max_am_header : 0;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = b->efd};
    if (epoll_ctl(b->epfd, EPOLL_CTL_ADD, b->efd, &ev) != 0) {
        tfp_err_set(err, TFP_EINTERNAL, "epoll: %s", strerror(errno));
        goto destroy;
    }
    return TFP_OK;
destroy:
    ucp_worker_destroy(b->worker);
    b->worker = NULL;
    b->efd = -1;
    return err->code;
}

static void worker_close(tfx_ucx_base_t *b)
{
    if (!b->worker)
        return;
    epoll_ctl(b->epfd, EPOLL_CTL_DEL, b->efd, NULL);
    ucp_worker_destroy(b->worker);
    b->worker = NULL;
    b->efd = -1;
}

void tfx_ucx_memory_types(ucp_context_h ctx, char *out, size_t size)
{
    ucp_context_attr_t a = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    size_t n = 0;
    out[0] = '\0';
    if (ucp_context_query(ctx, &a) == UCS_OK)
        for (int t = 0; t < UCS_MEMORY_TYPE_LAST; t++)
            if (a.memory_types & UCS_BIT(t)) {
                int k = snprintf(out + n, size - n, "%s%s", n ? "," : "",
                                 ucs_memory_type_names[t]);
                if (k < 0 || (size_t)k >= size - n)
                    break;
                n += (size_t)k;
            }
    if (!out[0])
        snprintf(out, size, "host");
}

tfp_status_t tfx_ucx_base_open(tfx_ucx_base_t *b, const char *name, unsigned am_id,
                               ucp_am_recv_callback_t cb, void *arg, int serialized,
                               const tfx_ucx_tune_t *tune, tfp_err_t *err)
{
    memset(b, 0, sizeof *b);
    b->epfd = b->wakefd = b->efd = -1;
    b->thread_mode = serialized ? UCS_THREAD_MODE_SERIALIZED : UCS_THREAD_MODE_SINGLE;
    b->am_id = am_id;
    b->am_cb = cb;
    b->am_arg = arg;
    ucp_config_t *config;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK)
        return tfp_err_set(err, TFP_EINTERNAL, "UCX configuration: %s", ucs_status_string(st));
    /* A blocking TCP connect (UCX 1.13's default) holds the progress thread for the
     * kernel's SYN timeout (~130 s) when the peer's ports are filtered. Unless the user
     * chose otherwise in the environment, connects are non-blocking. */
    if (!getenv("UCX_TCP_CONN_NB"))
        (void)ucp_config_modify(config, "CONN_NB", "y");   /* the tcp transport's key */
    if (tune && tune->no_shm && !getenv("UCX_TLS"))
        (void)ucp_config_modify(config, "TLS", "^sm");
    /* The tcp transport listens on one port per network interface it uses, each picked in
     * the range (its key, as CONN_NB: "TCP_PORT_RANGE" is accepted and ignored). */
    if (tune && tune->tcp_ports && tune->tcp_ports[0] &&
        (st = ucp_config_modify(config, "PORT_RANGE", tune->tcp_ports)) != UCS_OK) {
        ucp_config_release(config);
        return tfp_err_set(err, TFP_EINVAL, "UCX: ucx-ports %s: %s", tune->tcp_ports,
                           ucs_status_string(st));
    }
    ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
                       .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
                       .name = name};
    st = ucp_init(&pp, config, &b->ctx);
    ucp_config_release(config);
    if (st != UCS_OK) {
        b->ctx = NULL;
        return tfp_err_set(err, TFP_EINTERNAL, "UCX init: %s", ucs_status_string(st));
    }
    tfx_ucx_memory_types(b->ctx, b->memory_types, sizeof b->memory_types);
    b->epfd = epoll_create1(EPOLL_CLOEXEC);
    b->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = b->wakefd};
    if (b->epfd < 0 || b->wakefd < 0 || epoll_ctl(b->epfd, EPOLL_CTL_ADD, b->wakefd, &ev) != 0) {
        tfp_err_set(err, TFP_EINTERNAL, "epoll: %s", strerror(errno));
        goto fail;
    }
    if (worker_open(b, err) != TFP_OK)
        goto fail;
    return TFP_OK;
fail:
    tfx_ucx_base_close(b);
    return err->code;
}

void tfx_ucx_base_close(tfx_ucx_base_t *b)
{
    if (b->epfd >= 0)
        worker_close(b);
    else if (b->worker)
        ucp_worker_destroy(b->worker);
    if (b->epfd >= 0)
        close(b->epfd);
    if (b->wakefd >= 0)
        close(b->wakefd);
    if (b->ctx)
        ucp_cleanup(b->ctx);
    memset(b, 0, sizeof *b);
    b->epfd = b->wakefd = b->efd = -1;
}

tfp_status_t tfx_ucx_base_renew(tfx_ucx_base_t *b, tfp_err_t *err)
{
    worker_close(b);
    return worker_open(b, err);
}

void tfx_ucx_base_wake(tfx_ucx_base_t *b)
{
    uint64_t one = 1;
    ssize_t n;
    do
        n = write(b->wakefd, &one, sizeof one);
    while (n < 0 && errno == EINTR);        /* EAGAIN: the counter is full, a wake pending */
}

/* Empties the wake fd's counter (EAGAIN: nothing pending). */
static void drain_wake(tfx_ucx_base_t *b)
{
    uint64_t v;
    while (read(b->wakefd, &v, sizeof v) < 0 && errno == EINTR)
        ;
}

/* Arms the worker, runs let_go (NULL: none) and sleeps on the worker's events and the wake
 * fd up to timeout_ms (1 ms when arming failed), draining the wake fd after the wait so no
 * wake is lost: 1 when arm said BUSY (nothing slept). A thread that takes the worker once
 * let_go ran sees its events itself; one of them may still end this sleep. */
static int arm_and_sleep(tfx_ucx_base_t *b, int timeout_ms, void (*let_go)(void *), void *arg)
{
    ucs_status_t st = b->worker ? ucp_worker_arm(b->worker) : UCS_OK;
    if (let_go)
        let_go(arg);
    if (st == UCS_ERR_BUSY)
        return 1;
    struct epoll_event ev[2];
    epoll_wait(b->epfd, ev, 2, st == UCS_OK ? timeout_ms : 1);
    drain_wake(b);
    return 0;
}

int tfx_ucx_base_sleep(tfx_ucx_base_t *b, int timeout_ms)
{
    return arm_and_sleep(b, timeout_ms, NULL, NULL);
}

void tfx_ucx_base_park(tfx_ucx_base_t *b, int timeout_ms)
{
    struct pollfd p = {.fd = b->wakefd, .events = POLLIN};
    poll(&p, 1, timeout_ms);
    drain_wake(b);
}

void tfx_ucx_loop_run(tfx_ucx_base_t *b, const tfx_ucx_loop_t *l)
{
    uint64_t last_work_ns = 0, stop_ns = 0, busy_since_ns = 0;

    for (;;) {
        unsigned n = 0;
        if (l->hold && !l->hold(l->arg)) {
            /* Lent: the borrower progresses it, and wakes us if it hands back work. */
            tfx_ucx_base_park(b, l->sleep_ms);
            last_work_ns = busy_since_ns = 0;
            continue;
        }
        while (b->worker && ucp_worker_progress(b->worker))
            n++;
        n += l->run(l->arg);
        if (l->stopping(l->arg)) {
            uint64_t now = tfx_now_ns();
            if (!stop_ns)
                stop_ns = now;
            if (l->drained(l->arg) || (l->drain_max_ns && now - stop_ns >= l->drain_max_ns))
                break;                  /* still held: nobody borrows it any more */
        }
        if (n) {
            last_work_ns = tfx_now_ns();
            busy_since_ns = 0;
            if (l->let_go)
                l->let_go(l->arg);
            continue;
        }
        uint64_t idle_ns = tfx_now_ns() - last_work_ns;
        int sending = l->sending && l->sending(l->arg);
        if (idle_ns < TFX_UCX_SPIN_NS || (sending && idle_ns < TFX_UCX_SEND_YIELD_NS)) {
            if (l->let_go)
                l->let_go(l->arg);
            if (idle_ns >= TFX_UCX_SPIN_NS)
                sched_yield();          /* a send waits for a peer that may need this core */
            continue;                   /* spin a little before sleeping */
        }
        /* A loop that lends the worker lets it go before it sleeps (the next pass then
         * parks if a caller took it). */
        if (!arm_and_sleep(b, sending ? 1 : l->sleep_ms, l->hold ? l->let_go : NULL, l->arg)) {
            busy_since_ns = 0;
            continue;
        }
        /* The worker says it has events, yet progress finds none. */
        uint64_t now = tfx_now_ns();
        if (!busy_since_ns)
            busy_since_ns = now;
        if (now - busy_since_ns < (uint64_t)TFX_UCX_WEDGED_MS * 1000000u)
            continue;
        if (l->wedged) {
            if (l->hold && !l->hold(l->arg))
                continue;               /* lent again: the borrower progresses it */
            l->wedged(l->arg);
            if (l->let_go)
                l->let_go(l->arg);
            busy_since_ns = 0;
        } else {
            struct epoll_event ev[2];
            epoll_wait(b->epfd, ev, 2, 1);  /* wedged for good: at least do not spin */
        }
    }
}
