/* check_http.c - the http suite: proto/http.c's media-type and request-path parsing.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"
#include "tests/suites.h"
#include "proto/http.h"
#include "proto/httpcond.h"

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

/* ETag lists: ours, foreign, weak, "*", and what is malformed. */
START_TEST(http_etags)
{
    tfp_etags_t l;
    char tag[TFP_ETAG_LEN];
    tfp_etag_format(tag, 0xab12ULL, 42);
    ck_assert_str_eq(tag, "\"000000000000ab12-42\"");
    ck_assert_int_eq(tfp_etags_parse(tag, 0, &l), 0);
    ck_assert(l.present && !l.any && l.n == 1 && l.foreign == 0);
    ck_assert(tfp_etags_match(&l, 0xab12, 42));
    ck_assert(!tfp_etags_match(&l, 0xab12, 43));
    ck_assert(!tfp_etags_match(&l, 0xab13, 42));          /* another start of the daemon */
    ck_assert_int_eq(tfp_etags_parse(" * ", 0, &l), 0);
    ck_assert(l.any && tfp_etags_match(&l, 1, 1));
    ck_assert_int_eq(tfp_etags_parse("\"x\", , \"000000000000ab12-7\",W/\"000000000000ab12-8\"", 0, &l), 0);
    ck_assert_uint_eq(l.n, 1);                               /* weak is foreign for If-Match */
    ck_assert_uint_eq(l.foreign, 2);
    ck_assert_int_eq(tfp_etags_parse("W/\"000000000000ab12-8\"", 1, &l), 0);
    ck_assert(tfp_etags_match(&l, 0xab12, 8));               /* If-None-Match is weak */
    ck_assert_int_eq(tfp_etags_parse("unquoted", 0, &l), -1);
    ck_assert_int_eq(tfp_etags_parse("\"open", 0, &l), -1);
    ck_assert_int_eq(tfp_etags_parse("\"a\" \"b\"", 0, &l), -1);   /* no comma */
    ck_assert_int_eq(tfp_etags_parse("*, \"a\"", 0, &l), -1);
    ck_assert_int_eq(tfp_etags_parse("\"a b\"", 0, &l), -1);         /* space is no etagc */
    ck_assert_int_eq(tfp_etags_parse("\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"", 0, &l), -1);
    ck_assert_int_eq(tfp_etags_parse("\"000000000000AB12-7\"", 0, &l), 0);
    ck_assert_uint_eq(l.foreign, 1);                         /* we write lower case only */
    ck_assert_int_eq(tfp_etags_parse("\"000000000000ab12-99999999999999999999\"", 0, &l), 0);
    ck_assert_uint_eq(l.foreign, 1);                         /* version overflows */
    ck_assert_int_eq(tfp_etags_parse(NULL, 0, &l), 0);
    ck_assert(!l.present);
}
END_TEST

/* Single byte ranges, resolved against a 100-byte document. */
START_TEST(http_ranges)
{
    tfp_range_t r;
    uint64_t off, len;
    tfp_range_parse("bytes=0-0", &r);
    ck_assert_int_eq(r.kind, TFP_RANGE_FROM_TO);
    ck_assert_int_eq(tfp_range_resolve(&r, 100, &off, &len), 0);
    ck_assert(off == 0 && len == 1);
    tfp_range_parse("bytes=10-", &r);
    ck_assert_int_eq(tfp_range_resolve(&r, 100, &off, &len), 0);
    ck_assert(off == 10 && len == 90);
    tfp_range_parse("bytes=90-1000", &r);                    /* clipped to the end */
    ck_assert_int_eq(tfp_range_resolve(&r, 100, &off, &len), 0);
    ck_assert(off == 90 && len == 10);
    tfp_range_parse("bytes=-8", &r);
    ck_assert_int_eq(tfp_range_resolve(&r, 100, &off, &len), 0);
    ck_assert(off == 92 && len == 8);
    tfp_range_parse("bytes=-500", &r);
    ck_assert_int_eq(tfp_range_resolve(&r, 100, &off, &len), 0);
    ck_assert(off == 0 && len == 100);
    tfp_range_parse("bytes=100-", &r);                       /* past the end: 416 */
    ck_assert_int_eq(tfp_range_resolve(&r, 100, &off, &len), -1);
    tfp_range_parse("bytes=-0", &r);
    ck_assert_int_eq(tfp_range_resolve(&r, 100, &off, &len), -1);
    /* ignored: the whole document */
    const char *ignored[] = {"bytes=5-2", "bytes=0-1,5-6", "items=0-1", "bytes=a-b", "bytes=",
                             "bytes=1-2x", "bytes=99999999999999999999-", NULL};
    for (int i = 0; ignored[i]; i++) {
        tfp_range_parse(ignored[i], &r);
        ck_assert_msg(r.kind == TFP_RANGE_NONE, "%s", ignored[i]);
        ck_assert_int_eq(tfp_range_resolve(&r, 100, &off, &len), 0);
        ck_assert(off == 0 && len == 100);
    }
}
END_TEST

/* What a client reads back: an ETag response header (one tag, or nothing) and a
 * Content-Range (a range within its total, or an unsatisfied range's total). */
START_TEST(http_response_cond)
{
    ck_assert(tfp_etag_valid("\"0123456789abcdef-7\""));
    ck_assert(tfp_etag_valid("W/\"x\""));
    const char *bad_tags[] = {"", "*", "abc", "\"a\", \"b\"", "\"a\",", "\"a", "\"a\" x",
                              "\"a\tb\"", "\"a\x7f\"", NULL};
    for (int i = 0; bad_tags[i]; i++)
        ck_assert_msg(!tfp_etag_valid(bad_tags[i]), "%s", bad_tags[i]);
    ck_assert(!tfp_etag_valid(NULL));

    uint64_t a = 1, b = 1, t = 1;
    ck_assert_int_eq(tfp_content_range_parse("bytes 0-7/100", &a, &b, &t), 0);
    ck_assert(a == 0 && b == 7 && t == 100);
    ck_assert_int_eq(tfp_content_range_parse("bytes */100", &a, &b, &t), 0);
    ck_assert(a == UINT64_MAX && b == UINT64_MAX && t == 100);
    const char *bad[] = {"", "bytes 0-7/*", "bytes 7-0/100", "bytes 0-100/100", "items 0-1/2",
                         "bytes 0-7/100 junk", "bytes -7/100", "bytes 0-7", "bytes a-b/c",
                         "bytes 0-99999999999999999999/100", NULL};
    for (int i = 0; bad[i]; i++) {
        a = b = t = 5;
        ck_assert_msg(tfp_content_range_parse(bad[i], &a, &b, &t) == -1, "%s", bad[i]);
        ck_assert(a == 5 && b == 5 && t == 5);          /* untouched */
    }
    ck_assert_int_eq(tfp_content_range_parse(NULL, &a, &b, &t), -1);
}
END_TEST

Suite *suite_http(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("http");
    tcase_add_test(tc, http_media_and_paths);
    tcase_add_test(tc, http_etags);
    tcase_add_test(tc, http_ranges);
    tcase_add_test(tc, http_response_cond);
    suite_add_tcase(s, tc);
    return s;
}
