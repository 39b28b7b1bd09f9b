/* check_store.c - unit suite for the daemon's modules that need no network: the store
 * (references, limits, reservations, atomic replace), settings parsing, metrics rendering,
 * and proto/http.c's routing and media-type parsing.
 */
#include "config.h"
#include "tests/suites.h"
#include "daemon/conf.h"
#include "daemon/metrics.h"
#include "daemon/store.h"
#include "proto/http.h"
#include "proto/safetensors.h"
#include "transports/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A blob holding one U8 tensor of n bytes filled with v. */
static tfd_blob_t *make_blob(const char *name, size_t n, uint8_t v)
{
    tfp_doc_t *doc = tfp_doc_new();
    uint8_t *data = malloc(n ? n : 1);
    memset(data, v, n);
    uint64_t shape[1] = {n};
    tfp_err_t err;
    ck_assert_int_eq(tfp_doc_add(doc, name, TFP_U8, 1, shape, data, n, &err), TFP_OK);
    uint8_t *enc;
    size_t len;
    ck_assert_int_eq(tfp_st_encode(doc, &enc, &len, &err), TFP_OK);
    tfp_doc_free(doc);
    free(data);
    size_t cap;
    uint8_t *buf = tfx_buf_alloc(len, &cap);
    memcpy(buf, enc, len);
    free(enc);
    tfp_doc_t *idx;
    ck_assert_int_eq(tfp_st_decode(buf, len, NULL, &idx, &err), TFP_OK);
    tfd_blob_t *b = tfd_blob_new(buf, cap, buf, len, idx);
    ck_assert_ptr_nonnull(b);
    return b;
}

START_TEST(store_put_get_replace_delete)
{
    tfd_store_t *s = tfd_store_new(1 << 20);
    tfd_blob_t *a = make_blob("w", 100, 1);
    size_t alen = a->len;
    ck_assert_int_eq(tfd_store_put(s, "w", a, 0), 0);
    tfd_blob_t *got = tfd_store_get(s, "w");
    ck_assert_ptr_eq(got, a);
    /* Replace while a reader holds the old one: the reader keeps intact bytes, and they stay
     * counted (retired) until it lets go. */
    tfd_blob_t *b = make_blob("w", 50, 2);
    size_t blen = b->len;
    ck_assert_int_eq(tfd_store_put(s, "w", b, 0), 1);
    ck_assert_uint_eq(got->len, alen);
    ck_assert_uint_eq(got->doc->t[0].data[99], 1);
    tfd_store_stats_t st;
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.bytes, blen);
    ck_assert_uint_eq(st.retired, alen);
    tfd_blob_unref(got);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.retired, 0);
    got = tfd_store_get(s, "w");
    ck_assert_uint_eq(got->doc->t[0].nbytes, 50);
    ck_assert_uint_eq(got->doc->t[0].data[0], 2);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.count, 1);
    ck_assert_uint_eq(st.bytes, got->len);
    /* Delete while read: retired until released. */
    ck_assert_int_eq(tfd_store_delete(s, "w"), 0);
    ck_assert_int_eq(tfd_store_delete(s, "w"), -1);
    ck_assert_ptr_null(tfd_store_get(s, "w"));
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.count, 0);
    ck_assert_uint_eq(st.bytes, 0);
    ck_assert_uint_eq(st.retired, blen);
    tfd_blob_unref(got);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.retired, 0);
    tfd_store_free(s);
}
END_TEST

START_TEST(store_limits_and_reservations)
{
    tfd_store_t *s = tfd_store_new(1000);
    ck_assert_int_eq(tfd_store_reserve(s, 600), 0);
    ck_assert_int_eq(tfd_store_reserve(s, 600), -1);          /* 1200 > 1000 */
    tfd_blob_t *a = make_blob("a", 400, 1);
    uint64_t alen = a->len;
    ck_assert_int_eq(tfd_store_put(s, "a", a, 600), 0);
    tfd_store_stats_t st;
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.reserved, 0);
    ck_assert_uint_eq(st.bytes, alen);
    /* Replacing "a" needs room for both while the upload runs. */
    ck_assert_int_eq(tfd_store_reserve(s, 1000 - alen), 0);
    ck_assert_int_eq(tfd_store_reserve(s, 1), -1);
    tfd_store_unreserve(s, 1000 - alen);
    /* A put over the limit leaves the store unchanged and the blob with the caller. */
    tfd_blob_t *big = make_blob("b", 900, 3);
    ck_assert_int_eq(tfd_store_put(s, "b", big, 0), -1);
    tfd_blob_unref(big);
    ck_assert_ptr_null(tfd_store_get(s, "b"));
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.count, 1);
    ck_assert_uint_eq(st.bytes, alen);
    tfd_store_free(s);
}
END_TEST

static void collect(const char *name, const tfd_blob_t *b, void *arg)
{
    char *out = arg;
    strcat(out, name);
    strcat(out, ",");
    (void)b;
}

START_TEST(store_each_in_name_order)
{
    tfd_store_t *s = tfd_store_new(1 << 20);
    ck_assert_int_eq(tfd_store_put(s, "zeta", make_blob("zeta", 1, 0), 0), 0);
    ck_assert_int_eq(tfd_store_put(s, "alpha", make_blob("alpha", 1, 0), 0), 0);
    ck_assert_int_eq(tfd_store_put(s, "mid", make_blob("mid", 1, 0), 0), 0);
    char out[64] = "";
    tfd_store_each(s, collect, out);
    ck_assert_str_eq(out, "alpha,mid,zeta,");
    tfd_store_free(s);
}
END_TEST

START_TEST(conf_sizes)
{
    uint64_t v;
    ck_assert_int_eq(tfd_parse_size("0", &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(tfd_parse_size("512K", &v), 0);
    ck_assert_uint_eq(v, 512 * 1024);
    ck_assert_int_eq(tfd_parse_size("64M", &v), 0);
    ck_assert_uint_eq(v, 64ull << 20);
    ck_assert_int_eq(tfd_parse_size("1GiB", &v), 0);
    ck_assert_uint_eq(v, 1ull << 30);
    ck_assert_int_eq(tfd_parse_size("2T", &v), 0);
    ck_assert_uint_eq(v, 2ull << 40);
    ck_assert_int_eq(tfd_parse_size("-1", &v), -1);
    ck_assert_int_eq(tfd_parse_size("", &v), -1);
    ck_assert_int_eq(tfd_parse_size("12Q", &v), -1);
    ck_assert_int_eq(tfd_parse_size("99999999999999999999", &v), -1);
    ck_assert_int_eq(tfd_parse_size("99999999999T", &v), -1);
}
END_TEST

static int load(const char *file_text, const char *flag, tfd_config_t *cfg)
{
    char path[] = "/tmp/tfetchd-conf-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, file_text, strlen(file_text)), (ssize_t)strlen(file_text));
    close(fd);
    char *argv[] = {"tfetchd", "--config", path, (char *)flag, NULL};
    tfd_config_defaults(cfg);
    int rc = tfd_config_load(cfg, flag ? 4 : 3, argv);
    unlink(path);
    return rc;
}

START_TEST(conf_file_and_flags)
{
    tfd_config_t cfg;
    ck_assert_int_eq(load("[tfetchd]\nmax-body = 2M\nport = 9000\n", NULL, &cfg), 0);
    ck_assert_uint_eq(cfg.max_body, 2u << 20);
    ck_assert_uint_eq(cfg.port, 9000);
    /* Flags override the file. */
    ck_assert_int_eq(load("port = 9000\n", "--port=9100", &cfg), 0);
    ck_assert_uint_eq(cfg.port, 9100);
    ck_assert_int_eq(load("no-such-key = 1\n", NULL, &cfg), -1);
    ck_assert_int_eq(load("[other]\nport = 1\n", NULL, &cfg), -1);
    ck_assert_int_eq(load("port = 70000\n", NULL, &cfg), -1);
    ck_assert_int_eq(load("max-body = lots\n", NULL, &cfg), -1);
    ck_assert_int_eq(load("log-level = chatty\n", NULL, &cfg), -1);
    ck_assert_int_eq(load("", "--threads=0", &cfg), -1);
    ck_assert_int_eq(load("", "--bogus", &cfg), -1);
}
END_TEST

START_TEST(metrics_render)
{
    tfd_metrics_t *m = tfd_metrics_new();
    tfd_metrics_record(m, TFD_EP_TENSOR_GET, 200, TFP_OK, 0, 1234, 0.002);
    tfd_metrics_record(m, TFD_EP_TENSOR_GET, 404, TFP_ENOTFOUND, 0, 50, 0.0001);
    tfd_metrics_record(m, TFD_EP_TENSOR_PUT, 413, TFP_ETOOBIG, 10, 60, 3.0);
    tfd_gauges_t g = {.stored_count = 3, .stored_bytes = 4096, .inflight = 1};
    size_t len;
    char *t = tfd_metrics_render(m, &g, &len);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(strlen(t), len);
    ck_assert_ptr_nonnull(strstr(t, "tfetch_requests_total{route=\"tensor_get\",status=\"200\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "tfetch_requests_total{route=\"tensor_get\",status=\"404\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "tfetch_errors_total{route=\"tensor_put\",code=\"TF_ETOOBIG\"} 1\n"));
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

START_TEST(http_media_and_paths)
{
    ck_assert_int_eq(tfp_media_parse(NULL), TFP_MEDIA_NONE);
    ck_assert_int_eq(tfp_media_parse("application/x-safetensors"), TFP_MEDIA_SAFETENSORS);
    ck_assert_int_eq(tfp_media_parse("Application/Octet-Stream; charset=x"), TFP_MEDIA_OCTET);
    ck_assert_int_eq(tfp_media_parse("text/plain"), TFP_MEDIA_OTHER);
    ck_assert_int_eq(tfp_accept_pick(NULL), TFP_MEDIA_NONE);
    ck_assert_int_eq(tfp_accept_pick("*/*"), TFP_MEDIA_ANY);
    ck_assert_int_eq(tfp_accept_pick("text/html, application/json;q=0.9"), TFP_MEDIA_JSON);
    ck_assert_int_eq(tfp_accept_pick("application/octet-stream,application/json"), TFP_MEDIA_OCTET);
    ck_assert_int_eq(tfp_accept_pick("text/html"), TFP_MEDIA_OTHER);
    ck_assert_int_eq(tfp_accept_pick(" , "), TFP_MEDIA_NONE);

    tfp_path_info_t pi;
    ck_assert_int_eq(tfp_path_parse("/healthz", &pi), TFP_PATH_HEALTHZ);
    ck_assert_int_eq(tfp_path_parse("/metrics", &pi), TFP_PATH_METRICS);
    ck_assert_int_eq(tfp_path_parse("/v1/info", &pi), TFP_PATH_INFO);
    ck_assert_int_eq(tfp_path_parse("/v1/tensors", &pi), TFP_PATH_TENSORS);
    ck_assert_int_eq(tfp_path_parse("/v1/tensors/", &pi), TFP_PATH_TENSORS);
    ck_assert_int_eq(tfp_path_parse("/v1/tensors/layer.0_w-1", &pi), TFP_PATH_TENSOR);
    ck_assert_str_eq(pi.name, "layer.0_w-1");
    ck_assert_int_eq(tfp_path_parse("/v1/tensors/a/b", &pi), TFP_PATH_BAD_NAME);
    ck_assert_int_eq(tfp_path_parse("/v1/tensors/..", &pi), TFP_PATH_BAD_NAME);
    ck_assert_int_eq(tfp_path_parse("/v1/tensorsX", &pi), TFP_PATH_UNKNOWN);
    ck_assert_int_eq(tfp_path_parse("/", &pi), TFP_PATH_UNKNOWN);
    ck_assert_int_eq(tfp_path_parse("/v1/call/echo", &pi), TFP_PATH_CALL);
    ck_assert_str_eq(pi.name, "echo");
    ck_assert_int_eq(tfp_path_parse("/v1/call/", &pi), TFP_PATH_BAD_NAME);
    ck_assert_int_eq(tfp_path_parse("/v1/sessions/self", &pi), TFP_PATH_SESSION_SELF);
    ck_assert_int_eq(tfp_path_parse("/v1/workers", &pi), TFP_PATH_WORKERS);
    ck_assert_int_eq(tfp_path_parse("/v1/workers/w-1", &pi), TFP_PATH_WORKER);
    ck_assert_int_eq(tfp_path_parse("/v1/workers/w-1/next", &pi), TFP_PATH_WORKER_NEXT);
    ck_assert_str_eq(pi.name, "w-1");
    ck_assert_int_eq(tfp_path_parse("/v1/workers/w-1/calls/c7", &pi), TFP_PATH_WORKER_REPLY);
    ck_assert_str_eq(pi.sub, "c7");
    ck_assert_int_eq(tfp_path_parse("/v1/workers/w-1/bogus", &pi), TFP_PATH_UNKNOWN);
    ck_assert_int_eq(tfp_path_parse("/v1/nothing", &pi), TFP_PATH_UNKNOWN);
    ck_assert_int_eq(tfp_path_parse("/weights", &pi), TFP_PATH_SHUMAI);
    ck_assert_str_eq(pi.name, "weights");
    ck_assert_int_eq(tfp_path_parse("/a/b", &pi), TFP_PATH_UNKNOWN);
    char longname[300];
    memset(longname, 'a', sizeof longname);
    memcpy(longname, "/v1/tensors/", 12);
    longname[299] = '\0';
    ck_assert_int_eq(tfp_path_parse(longname, &pi), TFP_PATH_BAD_NAME);
}
END_TEST

Suite *suite_store(void)
{
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("store");
    tcase_add_test(tc, store_put_get_replace_delete);
    tcase_add_test(tc, store_limits_and_reservations);
    tcase_add_test(tc, store_each_in_name_order);
    suite_add_tcase(s, tc);
    tc = tcase_create("conf");
    tcase_add_test(tc, conf_sizes);
    tcase_add_test(tc, conf_file_and_flags);
    suite_add_tcase(s, tc);
    tc = tcase_create("metrics");
    tcase_add_test(tc, metrics_render);
    suite_add_tcase(s, tc);
    tc = tcase_create("http");
    tcase_add_test(tc, http_media_and_paths);
    suite_add_tcase(s, tc);
    return s;
}
