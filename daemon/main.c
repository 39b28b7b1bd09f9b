/* main.c - tfetchd: the tensor transfer daemon's life story.
 *
 * Read the settings, block the signals every thread inherits, start serving, say so (stdout
 * line + sd_notify READY=1), then sleep in sigtimedwait, waking to pet the systemd watchdog,
 * until SIGTERM or SIGINT: stop accepting, finish the transfers in flight, exit 0. SIGHUP
 * reads the settings again and applies those that can change live (reload).
 * The main thread owns the server; the workers are the HTTP transport's.
 */
#include "config.h"
#include "daemon/conf.h"
#include "daemon/log.h"
#include "daemon/server.h"
#include "transports/buf.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#else
static int sd_notify(int unset, const char *state) { (void)unset; (void)state; return 0; }
static int sd_watchdog_enabled(int unset, uint64_t *usec) { (void)unset; (void)usec; return 0; }
#endif

static int watchdog_on;

/* Keeps systemd's watchdog fed while SIGTERM drains transfers, and while SIGHUP waits for
 * calls in the handlers of plugins it unloads. */
static void pet_watchdog(void)
{
    static time_t last;
    time_t now = time(NULL);
    if (watchdog_on && now != last) {       /* at most once a second */
        last = now;
        sd_notify(0, "WATCHDOG=1");
    }
}

/* While SIGHUP waits: pets the watchdog; non-zero (give the plugin change up) once SIGTERM
 * or SIGINT is pending, so stopping is not held up. */
static int reload_idle(void)
{
    pet_watchdog();
    sigset_t pending;
    return sigpending(&pending) == 0 &&
           (sigismember(&pending, SIGTERM) == 1 || sigismember(&pending, SIGINT) == 1);
}

/* SIGHUP: reopen the access log (logrotate), read the settings again (file, then the same
 * flags) and apply what can change while serving. A file that no longer parses changes
 * nothing. */
static void reload(tfd_server_t *srv, int argc, char **argv)
{
    sd_notify(0, "RELOADING=1\nSTATUS=reloading");
    tfd_server_reopen_logs(srv);
    tfd_config_t next;
    tfd_config_defaults(&next);
    if (tfd_config_load(&next, argc, argv) != 0) {
        tfd_log(LOG_ERR, "SIGHUP: the settings no longer load (see above); nothing changed");
        sd_notify(0, "READY=1\nSTATUS=serving (reload failed)");
        return;
    }
    unsigned n = tfd_server_reload(srv, &next, reload_idle);
    sd_notify(0, "READY=1\nSTATUS=serving");
    tfd_log(LOG_NOTICE, "SIGHUP: settings read again (%s); %u applied, access log reopened",
            next.config_file[0] ? next.config_file : "no config file", n);
}

int main(int argc, char **argv)
{
    tfd_config_t cfg;
    tfd_config_defaults(&cfg);
    int rc = tfd_config_load(&cfg, argc, argv);
    if (rc != 0)
        return rc > 0 ? EXIT_SUCCESS : 2;

    /* Every thread started from here on inherits this mask; only sigtimedwait sees them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    tfx_buf_set_cache_max(TFX_BUF_CACHE_DAEMON);   /* freed bodies, kept for the next PUT */
    tfp_err_t err;
    tfd_server_t *srv = tfd_server_start(&cfg, &err);
    if (!srv) {
        tfd_log(LOG_ERR, "cannot start: %s", err.msg);
        return EXIT_FAILURE;
    }
    const char *host_fmt = strchr(cfg.listen, ':') ? "[%s]" : "%s";
    char host[80];
    snprintf(host, sizeof host, host_fmt, cfg.listen);
    const char *scheme = cfg.tls_cert[0] ? "https" : "http";
    printf("listening on %s://%s:%u\n", scheme, host, (unsigned)tfd_server_port(srv));
    fflush(stdout);
    tfd_log(LOG_NOTICE, "tfetchd %s serving on %s://%s:%u (%u threads, store limit %llu "
            "bytes: %s; max body %llu bytes%s%s)", PACKAGE_VERSION, scheme, host,
            (unsigned)tfd_server_port(srv), cfg.threads, (unsigned long long)cfg.store_memory,
            cfg.store_memory_source, (unsigned long long)cfg.max_body,
            cfg.config_file[0] ? ", config " : "", cfg.config_file);
    sd_notify(0, "READY=1\nSTATUS=serving");

    uint64_t wd_usec = 0;
    long tick_ms = 250;                 /* housekeeping: worker leases, session expiry */
    if (sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec / 2000 < (uint64_t)tick_ms)
        tick_ms = (long)(wd_usec / 2000);
    watchdog_on = wd_usec != 0;
    for (;;) {
        struct timespec ts = {tick_ms / 1000, (tick_ms % 1000) * 1000000L};
        int sig = sigtimedwait(&sigs, NULL, &ts);
        if (wd_usec)
            sd_notify(0, "WATCHDOG=1");
        tfd_server_tick(srv);
        if (sig == SIGTERM || sig == SIGINT)
            break;
        if (sig == SIGHUP)
            reload(srv, argc, argv);
        if (sig < 0 && errno != EAGAIN && errno != EINTR) {
            tfd_log(LOG_ERR, "sigtimedwait: %s", strerror(errno));
            break;
        }
    }

    const tfd_config_t *now = tfd_server_config(srv);   /* drain settings as reloaded */
    if (now->drain_grace)
        tfd_log(LOG_NOTICE, "stopping: /readyz now answers 503; serving for %u s more "
                "(drain-grace) before the drain", now->drain_grace);
    tfd_log(LOG_NOTICE, "stopping: no new connections%s; finishing transfers in flight (up to "
            "%u s)", now->drain_grace ? " after the grace period" : "", now->drain_timeout);
    sd_notify(0, "STOPPING=1\nSTATUS=draining");
    unsigned left = tfd_server_drain(srv, now->drain_timeout, pet_watchdog);
    if (left)
        tfd_log(LOG_WARNING, "drain timeout: closing %u requests still in flight", left);
    tfd_server_free(srv);
    tfx_buf_trim();
    tfd_log(LOG_NOTICE, "stopped");
    return EXIT_SUCCESS;
}
