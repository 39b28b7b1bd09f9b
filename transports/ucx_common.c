/* ucx_common.c - UCX context and worker setup, and the one progress loop, shared by
 * ucx_server.c and ucx_client.c. The loop runs on each side's progress thread; setup on the
 * thread that starts it.
 */
#include "config.h"
#include "transports/ucx_common.h"
#include "transports/clock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

tfp_status_t tfx_ucx_base_open(tfx_ucx_base_t *b, const char *name, unsigned am_id,
                               ucp_am_recv_callback_t cb, void *arg, tfp_err_t *err)
{
    memset(b, 0, sizeof *b);
    b->epfd = -1;
    ucp_config_t *config;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK)
        return tfp_err_set(err, TFP_EINTERNAL, "UCX configuration: %s", ucs_status_string(st));
    /* A blocking TCP connect (UCX 1.13's default) holds the progress thread for the
     * kernel's SYN timeout (~130 s) when the peer's ports are filtered. Unless the user
     * chose otherwise in the environment, connects are non-blocking. */
    if (!getenv("UCX_TCP_CONN_NB"))
        (void)ucp_config_modify(config, "CONN_NB", "y");   /* the tcp transport's key */
    ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
                       .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
                       .name = name};
    st = ucp_init(&pp, config, &b->ctx);
    ucp_config_release(config);
    if (st != UCS_OK)
        return tfp_err_set(err, TFP_EINTERNAL, "UCX init: %s", ucs_status_string(st));
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    st = ucp_worker_create(b->ctx, &wp, &b->worker);
    if (st != UCS_OK) {
        tfp_err_set(err, TFP_EINTERNAL, "UCX worker: %s", ucs_status_string(st));
        goto cleanup_ctx;
    }
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        .id = am_id, .cb = cb, .arg = arg, .flags = UCP_AM_FLAG_WHOLE_MSG};
    st = ucp_worker_set_am_recv_handler(b->worker, &hp);
    if (st == UCS_OK)
        st = ucp_worker_get_efd(b->worker, &b->efd);
    if (st != UCS_OK) {
        tfp_err_set(err, TFP_EINTERNAL, "UCX worker setup: %s", ucs_status_string(st));
        goto destroy_worker;
    }
    b->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = b->efd};
    if (b->epfd < 0 || epoll_ctl(b->epfd, EPOLL_CTL_ADD, b->efd, &ev) != 0) {
        tfp_err_set(err, TFP_EINTERNAL, "epoll: %s", strerror(errno));
        goto close_epoll;
    }
    return TFP_OK;
close_epoll:
    if (b->epfd >= 0)
        close(b->epfd);
destroy_worker:
    ucp_worker_destroy(b->worker);
cleanup_ctx:
    ucp_cleanup(b->ctx);
    memset(b, 0, sizeof *b);
    return err->code;
}

void tfx_ucx_base_close(tfx_ucx_base_t *b)
{
    if (b->epfd >= 0)
        close(b->epfd);
    if (b->worker)
        ucp_worker_destroy(b->worker);
    if (b->ctx)
        ucp_cleanup(b->ctx);
    memset(b, 0, sizeof *b);
    b->epfd = -1;
}

void tfx_ucx_base_sleep(tfx_ucx_base_t *b, int timeout_ms)
{
    ucs_status_t st = ucp_worker_arm(b->worker);
    if (st == UCS_ERR_BUSY)
        return;
    struct epoll_event ev;
    epoll_wait(b->epfd, &ev, 1, st == UCS_OK ? timeout_ms : 1);
}

void tfx_ucx_loop_run(tfx_ucx_base_t *b, const tfx_ucx_loop_t *l)
{
    uint64_t last_work_ns = 0, stop_ns = 0;

    for (;;) {
        unsigned n = 0;
        while (ucp_worker_progress(b->worker))
            n++;
        n += l->run(l->arg);
        if (l->stopping(l->arg)) {
            uint64_t now = tfx_now_ns();
            if (!stop_ns)
                stop_ns = now;
            if (l->drained(l->arg) || (l->drain_max_ns && now - stop_ns >= l->drain_max_ns))
                break;
        }
        if (n) {
            last_work_ns = tfx_now_ns();
            continue;
        }
        if (tfx_now_ns() - last_work_ns < TFX_UCX_SPIN_NS)
            continue;                   /* spin a little before sleeping */
        tfx_ucx_base_sleep(b, l->sleep_ms);
    }
}
