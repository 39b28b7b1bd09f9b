/* explain.c - tfetch --explain: one paragraph per request saying the path it took, its rate,
 * the ceiling of that path where one is known, where its time went, and why this path
 * rather than a faster one (the fallback reason the library keeps). On the public API only:
 * the request's tf_result_t and its origin's tf_transport_info_t. Main thread.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

/* What a memcpy on this host moves a second, measured now over n bytes (at most 64 MiB,
 * at least 1 MiB): the ceiling of a same-host path that copies once. 0 when it cannot. */
static double memcpy_rate(uint64_t n)
{
    size_t len = n > (64u << 20) ? (64u << 20) : n < (1u << 20) ? (1u << 20) : (size_t)n;
    char *a = malloc(len), *b = malloc(len);
    double best = 0;
    if (a && b) {
        memset(a, 1, len);
        memset(b, 2, len);              /* both faulted in: the copy alone is timed */
        for (int i = 0; i < 3; i++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            memcpy(b, a, len);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
            if (s > 0 && (double)len / s > best)
                best = (double)len / s;
        }
        if (b[len - 1] != 1)            /* read: the copy is not optimised away */
            best = 0;
    }
    free(a);
    free(b);
    return best;
}

static void rate(char *buf, size_t size, double bytes_per_s)
{
    if (bytes_per_s >= 1e9)
        snprintf(buf, size, "%.2f GB/s", bytes_per_s / 1e9);
    else
        snprintf(buf, size, "%.1f MB/s", bytes_per_s / 1e6);
}

/* " name 1.234 ms" for a stage that was measured, into buf at *len. */
static void stage(char *buf, size_t size, size_t *len, const char *name, double ms)
{
    if (ms < 0 || *len >= size)
        return;
    *len += (size_t)snprintf(buf + *len, size - *len, "%s%s %.3f ms", *len ? ", " : "", name,
                             ms);
}

void cli_print_explain(tf_client_t *c, const char *url, const tf_result_t *r)
{
    tf_transport_info_t ti = TF_TRANSPORT_INFO_INIT;
    int have_ti = url && tf_client_transport_info(c, url, &ti) == TF_OK;
    const char *t = r->transport[0] ? r->transport : "http";
    int shm = strncmp(t, "shm/", 4) == 0, ucx = strncmp(t, "ucx", 3) == 0;
    int same_host = have_ti && ti.same_host == 1;
    uint64_t bytes = r->bytes_sent + r->bytes_received;
    char what[64], ceiling[256] = "", times[400] = "", why[400] = "";
    size_t tl = 0;

    snprintf(what, sizeof what, "%s", r->op[0] ? r->op : "request");
    fprintf(stderr, "tfetch: %s %s went over %s", what, url ? url : "", t);
    if (shm)
        fputs(" (same-host shared memory)", stderr);
    else if (ucx)
        fputs(same_host ? " (UCX on this host)" : " (UCX)", stderr);
    if (r->status != TF_OK)
        fprintf(stderr, " and failed (%s)", tf_err_name(r->status));
    char rt[32] = "";
    if (bytes && r->seconds > 0)
        rate(rt, sizeof rt, (double)bytes / r->seconds);
    fprintf(stderr, ": %llu bytes in %.3f ms%s%s.", (unsigned long long)bytes,
            r->seconds * 1000.0, rt[0] ? ", " : "", rt);
    /* The ceiling: one copy on this host for a same-host path; unknown elsewhere. */
    if ((shm || (ucx && same_host)) && bytes) {
        double m = memcpy_rate(bytes);
        char mr[32];
        rate(mr, sizeof mr, m);
        if (m > 0)
            snprintf(ceiling, sizeof ceiling, " Its ceiling is one memcpy on this host, %s "
                     "measured now%s.", mr, shm && strcmp(r->op, "get") == 0
                     ? " (a get over shm maps the stored bytes and copies none, so it can "
                       "pass it)" : "");
    } else {
        snprintf(ceiling, sizeof ceiling, " Its ceiling is not known here (tfetch doctor "
                 "measures this host's paths against theirs).");
    }
    fputs(ceiling, stderr);
    const tf_stages_t *s = &r->stages;
    stage(times, sizeof times, &tl, "connect", s->connect);
    stage(times, sizeof times, &tl, "upgrade", s->upgrade);
    stage(times, sizeof times, &tl, "send", s->send);
    stage(times, sizeof times, &tl, "server", s->server);
    stage(times, sizeof times, &tl, "receive", s->receive);
    stage(times, sizeof times, &tl, "decode", s->decode);
    if (tl)
        fprintf(stderr, " Its time: %s.", times);
    /* Why this path and not a faster one. */
    if (r->fallback[0])
        snprintf(why, sizeof why, " Not a faster path because: %s.", r->fallback);
    else if (shm)
        snprintf(why, sizeof why, " It is the fastest path tfetch has.");
    else if (ucx && same_host && have_ti && ti.shm_reason[0])
        snprintf(why, sizeof why, " Not same-host shared memory because: %s.", ti.shm_reason);
    else if (ucx)
        snprintf(why, sizeof why, " %s", same_host ? "Same-host shared memory carries gets "
                 "and puts without conditions; this request is not one." :
                 "The server is on another host: UCX is its fastest path.");
    else if (have_ti && ti.reason[0])
        snprintf(why, sizeof why, " Not UCX because: %s.", ti.reason);
    else
        snprintf(why, sizeof why, " HTTP was the transport asked for (--transport http or "
                 "$TFETCH_TRANSPORT), or the server offers nothing faster.");
    fprintf(stderr, "%s\n", why);
}
