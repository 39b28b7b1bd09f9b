/* check_http.c - the http suite: proto/http.c's media-type and request-path parsing.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"
#include "tests/suites.h"
#include "proto/http.h"

#include <stdio.h>
#include <string.h>

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
    /* q-values: weighed, and q=0 is "not acceptable" */
    ck_assert_int_eq(tfp_accept_pick("application/json;q=0"), TFP_MEDIA_OTHER);
    ck_assert_int_eq(tfp_accept_pick("application/json;q=0.000, text/html"), TFP_MEDIA_OTHER);
    ck_assert_int_eq(tfp_accept_pick("application/json;q=0.5, application/x-safetensors;q=0.9"),
                     TFP_MEDIA_SAFETENSORS);
    ck_assert_int_eq(tfp_accept_pick("application/json; q=1.0, application/octet-stream"),
                     TFP_MEDIA_JSON);
    ck_assert_int_eq(tfp_accept_pick("*/*;q=0.1, application/json"), TFP_MEDIA_JSON);
    ck_assert_int_eq(tfp_accept_pick("application/x-safetensors;q=0, */*"), TFP_MEDIA_JSON);
    ck_assert_int_eq(tfp_accept_pick("*/*;q=0"), TFP_MEDIA_OTHER);
    ck_assert_int_eq(tfp_accept_pick("application/json;q=bogus"), TFP_MEDIA_JSON);  /* as q=1 */
    ck_assert_int_eq(tfp_accept_pick("application/json;charset=utf-8;q=0"), TFP_MEDIA_OTHER);

    tfp_path_info_t pi;
    ck_assert_int_eq(tfp_path_parse("/healthz", &pi), TFP_PATH_HEALTHZ);
    ck_assert_int_eq(tfp_path_parse("/readyz", &pi), TFP_PATH_READYZ);
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

Suite *suite_http(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("http");
    tcase_add_test(tc, http_media_and_paths);
    suite_add_tcase(s, tc);
    return s;
}
