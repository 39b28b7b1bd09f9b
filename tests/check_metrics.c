/* check_metrics.c - the metrics suite: rendering the daemon's counters (daemon/metrics.c)
 * as Prometheus text.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"
#include "tests/suites.h"
#include "daemon/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

START_TEST(metrics_render)
{
    tfd_metrics_t *m = tfd_metrics_new();
    tfd_metrics_record(m, TFD_EP_TENSOR_GET, TFD_TR_HTTP, 200, TFP_OK, 0, 1234, 0.002);
    tfd_metrics_record(m, TFD_EP_TENSOR_GET, TFD_TR_UCX, 404, TFP_ENOTFOUND, 0, 50, 0.0001);
    tfd_metrics_record(m, TFD_EP_TENSOR_PUT, TFD_TR_SHM, 413, TFP_ETOOBIG, 10, 60, 3.0);
    tfd_gauges_t g = {.stored_count = 3, .stored_bytes = 4096, .inflight = 1};
    size_t len;
    char *t = tfd_metrics_render(m, &g, &len);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(strlen(t), len);
    ck_assert_ptr_nonnull(strstr(t, "tfetch_requests_total{route=\"tensor_get\",status=\"200\",transport=\"http\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "tfetch_requests_total{route=\"tensor_get\",status=\"404\",transport=\"ucx\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "tfetch_errors_total{route=\"tensor_put\",code=\"TF_ETOOBIG\",transport=\"shm\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "tfetch_sent_bytes_total{route=\"tensor_get\"} 1284\n"));
    ck_assert_ptr_nonnull(strstr(t, "tfetch_request_duration_seconds_bucket{route=\"tensor_get\",le=\"0.0025\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "tfetch_request_duration_seconds_bucket{route=\"tensor_put\",le=\"2.5\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(t, "tfetch_request_duration_seconds_count{route=\"tensor_put\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "tfetch_stored_bytes 4096\n"));
    ck_assert_ptr_null(strstr(t, "status=\"500\""));
    free(t);
    tfd_metrics_free(m);
}
END_TEST

/* Reads one sample's value from the exposition text; -1 if absent. */
static double sample(const char *t, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(t, key);
    return p ? strtod(p + strlen(key), NULL) : -1;
}

/* build_info and the process_* family, read from /proc at render time: this process's own
 * values, so they can be checked against what the test sees itself. */
START_TEST(metrics_build_and_process)
{
    tfd_metrics_t *m = tfd_metrics_new();
    tfd_gauges_t g = {0};
    size_t len;
    char *t = tfd_metrics_render(m, &g, &len);
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(strstr(t, "\ntfetch_build_info{version=\"" PACKAGE_VERSION "\",ucx=\""));
    ck_assert_ptr_nonnull(strstr(t, "# TYPE process_cpu_seconds_total counter\n"));
    double rss = sample(t, "process_resident_memory_bytes");
    ck_assert_msg(rss > 1e5 && rss < 1e11, "rss %g", rss);
    ck_assert(sample(t, "process_virtual_memory_bytes") >= rss);
    double start = sample(t, "process_start_time_seconds"), now = (double)time(NULL);
    ck_assert_msg(start > now - 3600 && start <= now + 1, "start %f now %f", start, now);
    /* Open one more descriptor: the count follows. */
    double fds = sample(t, "process_open_fds");
    ck_assert(fds >= 3);
    free(t);
    int fd = open("/dev/null", O_RDONLY);
    t = tfd_metrics_render(m, &g, &len);
    ck_assert(sample(t, "process_open_fds") == fds + 1);
    ck_assert(sample(t, "process_max_fds") >= fds + 1);
    close(fd);
    free(t);
#if defined(HAVE_MALLINFO2) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* The heap in use follows a block held and given back. Under a sanitizer or valgrind
     * (which preloads its vgpreload_*.so) malloc is not glibc's, and the metric is left out. */
    const char *preload = getenv("LD_PRELOAD");
    if (preload && strstr(preload, "vgpreload")) {
        t = tfd_metrics_render(m, &g, &len);
        ck_assert_msg(sample(t, "tfetch_heap_in_use_bytes") < 0, "a heap under valgrind");
        free(t);
        tfd_metrics_free(m);
        return;
    }
    t = tfd_metrics_render(m, &g, &len);
    double heap = sample(t, "tfetch_heap_in_use_bytes");
    free(t);
    ck_assert_msg(heap > 0, "heap %g", heap);
    char *block = malloc(8u << 20);
    ck_assert_ptr_nonnull(block);
    memset(block, 1, 8u << 20);
    t = tfd_metrics_render(m, &g, &len);
    double held = sample(t, "tfetch_heap_in_use_bytes");
    free(t);
    free(block);
    t = tfd_metrics_render(m, &g, &len);
    double back = sample(t, "tfetch_heap_in_use_bytes");
    free(t);
    ck_assert_msg(held >= heap + (8u << 20) && back <= held - (8u << 20), "heap %g, holding 8 "
                  "MiB %g, given back %g", heap, held, back);
#endif
    tfd_metrics_free(m);
}
END_TEST

Suite *suite_metrics(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_add_test(tc, metrics_render);
    tcase_add_test(tc, metrics_build_and_process);
    suite_add_tcase(s, tc);
    return s;
}
