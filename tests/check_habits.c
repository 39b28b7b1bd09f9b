/* check_habits.c - the HTTP habits browsers, wget and retrying clients rely on: the
 * cors-origins setting parsed and the Origin header checked (proto/cors.c), then against the
 * real tfetchd on port 0 driven by curl: CORS off by default (OPTIONS 405, no
 * Access-Control-Allow-Origin), a list of origins (preflight answered, the origin echoed with
 * credentials), "*" (never with credentials); Content-Disposition naming the download by the
 * form served (curl -OJ saves NAME.safetensors); a request id reused with another body
 * refused (422, naming the id) while a true retry is still replayed.
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "proto/cors.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- proto/cors ------------------------------------------------------------------------ */

START_TEST(cors_setting_parsed)
{
    tfp_cors_t c;
    tfp_err_t err;
    ck_assert_int_eq(tfp_cors_parse(NULL, &c, &err), TFP_OK);
    ck_assert(!c.any && c.n == 0);
    ck_assert_int_eq(tfp_cors_parse("", &c, &err), TFP_OK);
    ck_assert(!c.any && c.n == 0);
    ck_assert_int_eq(tfp_cors_parse(" * ", &c, &err), TFP_OK);
    ck_assert(c.any && c.n == 0);
    ck_assert_int_eq(tfp_cors_parse("https://app.example, http://localhost:8080 "
                                    "http://[::1]:9000", &c, &err), TFP_OK);
    ck_assert_uint_eq(c.n, 3);
    ck_assert_str_eq(c.origin[0], "https://app.example");
    ck_assert_str_eq(c.origin[1], "http://localhost:8080");
    ck_assert_str_eq(c.origin[2], "http://[::1]:9000");
    const char *bad[] = {"* https://a.example", "https://a.example/", "https://a.example/x",
                         "ftp://a.example", "https://", "https://a.example:0",
                         "https://a.example:65536", "https://a.example:80x", "a.example",
                         "null", "https://a b", "https://a\"b.example", "http://[::1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(tfp_cors_parse(bad[i], &c, &err) == TFP_EINVAL, "accepted '%s'", bad[i]);
        ck_assert_msg(strstr(err.msg, "cors-origins") != NULL, "%s", err.msg);
        ck_assert(!c.any && c.n == 0);          /* a refused setting leaves CORS off */
    }
    char many[64 * 40] = "";
    for (int i = 0; i <= TFP_CORS_MAX; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "https://h%d.example ", i);
    ck_assert_int_eq(tfp_cors_parse(many, &c, &err), TFP_EINVAL);
}
END_TEST

START_TEST(cors_origin_checked)
{
    tfp_cors_t off, any, list;
    tfp_err_t err;
    ck_assert_int_eq(tfp_cors_parse("", &off, &err), TFP_OK);
    ck_assert_int_eq(tfp_cors_parse("*", &any, &err), TFP_OK);
    ck_assert_int_eq(tfp_cors_parse("https://app.example", &list, &err), TFP_OK);
    ck_assert_int_eq(tfp_cors_check(&off, "https://app.example"), TFP_CORS_NONE);
    ck_assert_int_eq(tfp_cors_check(&any, "https://app.example"), TFP_CORS_ANY);
    ck_assert_int_eq(tfp_cors_check(&any, "null"), TFP_CORS_ANY);
    ck_assert_int_eq(tfp_cors_check(&any, NULL), TFP_CORS_NONE);
    ck_assert_int_eq(tfp_cors_check(&list, "https://app.example"), TFP_CORS_ORIGIN);
    /* Exactly: no prefix, suffix, other scheme or port; never a malformed one echoed. */
    const char *no[] = {"https://app.example.evil", "https://app.exampl", "http://app.example",
                        "https://app.example:443", "https://app.example/", "null", "",
                        "https://app.example\r\nX: y", "https://app.example\x01"};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        ck_assert_msg(tfp_cors_check(&list, no[i]) == TFP_CORS_NONE, "'%s' allowed", no[i]);
    ck_assert_int_eq(tfp_cors_check(&any, "https://app.example\r\nX: y"), TFP_CORS_NONE);
    char longo[400] = "https://";
    memset(longo + 8, 'a', 300);
    longo[308] = '\0';
    ck_assert_int_eq(tfp_cors_check(&any, longo), TFP_CORS_NONE);
}
END_TEST

/* ---- end to end ------------------------------------------------------------------------ */

static td_daemon_t D;
static char out[1 << 16];

static void start(const char *const *args)
{
    ck_assert_msg(td_start(&D, args) == 0, "tfetchd did not start");
}

static void stop_clean(void)
{
    ck_assert_int_eq(td_stop(&D, SIGTERM, 10000), 0);
    td_cleanup();
}

/* curl -sS -D - -o /dev/null (the status line and headers into out) with extra args. */
static void head(const char *args, const char *path)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "curl -sS -D - -o /dev/null %s '%s%s'", args, D.base, path);
    ck_assert_msg(td_run(cmd, out, sizeof out) == 0, "curl failed: %s", cmd);
}

/* The value of header name in out (case-insensitive name), or NULL; static. */
static const char *hval(const char *name)
{
    static char v[1024];
    size_t n = strlen(name);
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *s = p + n + 1;
            while (*s == ' ')
                s++;
            size_t k = strcspn(s, "\r\n");
            snprintf(v, sizeof v, "%.*s", (int)k, s);
            return v;
        }
    }
    return NULL;
}

static int status(void)
{
    return strncmp(out, "HTTP/", 5) == 0 ? atoi(strchr(out, ' ') + 1) : -1;
}

static void put_w(void)
{
    float v[3] = {1, 2, 3};
    const char *f = td_tmpfile(0, v, sizeof v);
    char args[512];
    snprintf(args, sizeof args, "-X PUT --data-binary @%s -H 'Tfetch-Dtype: F32' "
             "-H 'Tfetch-Shape: 3'", f);
    head(args, "/v1/tensors/w");
    ck_assert_int_eq(status(), 201);
}

START_TEST(content_disposition_names_the_download)
{
    start(NULL);
    put_w();
    head("", "/v1/tensors/w");
    ck_assert_int_eq(status(), 200);
    ck_assert_msg(hval("Content-Disposition") != NULL, "%s", out);
    ck_assert_str_eq(hval("Content-Disposition"), "attachment; filename=\"w.safetensors\"");
    head("-H 'Accept: application/octet-stream'", "/v1/tensors/w");
    ck_assert_str_eq(hval("Content-Disposition"), "attachment; filename=\"w.raw\"");
    head("-H 'Accept: application/json'", "/v1/tensors/w");
    ck_assert_str_eq(hval("Content-Disposition"), "attachment; filename=\"w.json\"");
    head("-H 'Range: bytes=0-7'", "/v1/tensors/w");
    ck_assert_int_eq(status(), 206);
    ck_assert_str_eq(hval("Content-Disposition"), "attachment; filename=\"w.safetensors\"");
    /* Not on refusals: 406, 404. */
    head("-H 'Accept: image/png'", "/v1/tensors/w");
    ck_assert_int_eq(status(), 406);
    ck_assert_ptr_null(hval("Content-Disposition"));
    head("", "/v1/tensors/nosuch");
    ck_assert_int_eq(status(), 404);
    ck_assert_ptr_null(hval("Content-Disposition"));
    /* What a download tool does with it: curl -OJ (as wget --content-disposition) saves
     * w.safetensors, not "w". */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "d=$(mktemp -d) && cd \"$d\" && curl -sS --fail -OJ '%s/v1/tensors/w'"
             " && ls && cd / && rm -rf \"$d\"", D.base);
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_str_eq(out, "w.safetensors\n");
    stop_clean();
}
END_TEST

static const char preflight[] = "-X OPTIONS -H 'Access-Control-Request-Method: PUT' "
                                "-H 'Access-Control-Request-Headers: tfetch-dtype, tfetch-shape'";

START_TEST(cors_off_by_default)
{
    start(NULL);
    put_w();
    char args[512];
    snprintf(args, sizeof args, "%s -H 'Origin: https://app.example'", preflight);
    head(args, "/v1/tensors/w");
    ck_assert_int_eq(status(), 405);
    ck_assert_ptr_null(hval("Access-Control-Allow-Origin"));
    head("-H 'Origin: https://app.example'", "/v1/tensors/w");
    ck_assert_int_eq(status(), 200);
    ck_assert_ptr_null(hval("Access-Control-Allow-Origin"));
    stop_clean();
}
END_TEST

START_TEST(cors_listed_origins)
{
    const char *args[] = {"--cors-origins", "https://app.example, http://localhost:8080", NULL};
    start(args);
    put_w();
    char a[512];
    /* The preflight: answered before the router, with what may be sent. */
    snprintf(a, sizeof a, "%s -H 'Origin: https://app.example'", preflight);
    head(a, "/v1/tensors/w");
    ck_assert_int_eq(status(), 204);
    ck_assert_str_eq(hval("Access-Control-Allow-Origin"), "https://app.example");
    ck_assert_str_eq(hval("Access-Control-Allow-Credentials"), "true");
    ck_assert_msg(strstr(hval("Access-Control-Allow-Methods"), "PUT") != NULL, "%s", out);
    ck_assert_msg(strstr(hval("Access-Control-Allow-Headers"), "Tfetch-Dtype") != NULL, "%s", out);
    ck_assert_msg(hval("Vary") != NULL, "%s", out);
    /* The request itself: the origin echoed, the headers a page reads exposed. */
    head("-H 'Origin: http://localhost:8080'", "/v1/tensors/w");
    ck_assert_int_eq(status(), 200);
    ck_assert_str_eq(hval("Access-Control-Allow-Origin"), "http://localhost:8080");
    ck_assert_str_eq(hval("Access-Control-Allow-Credentials"), "true");
    ck_assert_msg(strstr(hval("Access-Control-Expose-Headers"), "ETag") != NULL, "%s", out);
    ck_assert_str_eq(hval("Vary"), "Origin");
    /* Errors carry it too (a page reads the JSON error). */
    head("-H 'Origin: https://app.example'", "/v1/tensors/nosuch");
    ck_assert_int_eq(status(), 404);
    ck_assert_str_eq(hval("Access-Control-Allow-Origin"), "https://app.example");
    /* Another origin: nothing, and its preflight is not answered. */
    head("-H 'Origin: https://app.example.evil'", "/v1/tensors/w");
    ck_assert_ptr_null(hval("Access-Control-Allow-Origin"));
    ck_assert_str_eq(hval("Vary"), "Origin");
    snprintf(a, sizeof a, "%s -H 'Origin: https://evil.example'", preflight);
    head(a, "/v1/tensors/w");
    ck_assert_int_eq(status(), 405);
    ck_assert_ptr_null(hval("Access-Control-Allow-Origin"));
    stop_clean();
}
END_TEST

START_TEST(cors_any_origin_never_with_credentials)
{
    const char *args[] = {"--cors-origins", "*", NULL};
    start(args);
    put_w();
    char a[512];
    snprintf(a, sizeof a, "%s -H 'Origin: https://anyone.example'", preflight);
    head(a, "/v1/tensors/w");
    ck_assert_int_eq(status(), 204);
    ck_assert_str_eq(hval("Access-Control-Allow-Origin"), "*");
    ck_assert_ptr_null(hval("Access-Control-Allow-Credentials"));
    head("-H 'Origin: https://anyone.example'", "/v1/tensors/w");
    ck_assert_int_eq(status(), 200);
    ck_assert_str_eq(hval("Access-Control-Allow-Origin"), "*");
    ck_assert_ptr_null(hval("Access-Control-Allow-Credentials"));
    /* Not a preflight (no Access-Control-Request-Method): OPTIONS stays 405. */
    head("-X OPTIONS -H 'Origin: https://anyone.example'", "/v1/tensors/w");
    ck_assert_int_eq(status(), 405);
    stop_clean();
    /* A malformed setting stops the start, naming it. */
    const char *bad[] = {"--cors-origins", "https://a.example/path", NULL};
    ck_assert_int_ne(td_start(&D, bad), 0);
    td_cleanup();
}
END_TEST

/* POST /v1/call/echo with two I32s, a user and a request id; status, the body in out. */
static int call_echo(const char *rid, int32_t a, int32_t b)
{
    int32_t v[2] = {a, b};
    const char *f = td_tmpfile(1, v, sizeof v);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "curl -sS -o /tmp/tf-habits-%d -w '%%{http_code}' -X POST "
             "--data-binary @%s -H 'Tfetch-Dtype: I32' -H 'Tfetch-Shape: 2' "
             "-H 'Accept: application/json' -H 'Tfetch-User: ida' -H 'Tfetch-Request-Id: %s' "
             "'%s/v1/call/echo'; echo; cat /tmp/tf-habits-%d; rm -f /tmp/tf-habits-%d",
             (int)getpid(), f, rid, D.base, (int)getpid(), (int)getpid());
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    return atoi(out);
}

START_TEST(request_id_reused_with_another_body)
{
    start(NULL);
    ck_assert_int_eq(call_echo("job-7", 1, 2), 200);
    ck_assert_msg(strstr(out, "[1,2]") != NULL, "%s", out);
    /* A true retry: the same body, the first answer. */
    ck_assert_int_eq(call_echo("job-7", 1, 2), 200);
    ck_assert_msg(strstr(out, "[1,2]") != NULL, "%s", out);
    /* The same id, another body: refused, not answered with the first one's reply. */
    ck_assert_int_eq(call_echo("job-7", 1, 3), 422);
    ck_assert_msg(strstr(out, "TF_EUNPROC") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "'job-7'") != NULL && strstr(out, "different body") != NULL,
                  "%s", out);
    /* The first answer is still there for a true retry; a new id runs. */
    ck_assert_int_eq(call_echo("job-7", 1, 2), 200);
    ck_assert_int_eq(call_echo("job-8", 1, 3), 200);
    ck_assert_msg(strstr(out, "[1,3]") != NULL, "%s", out);
    ck_assert_int_eq((int)td_metric(&D, "tfetch_replay_hits_total"), 2);
    stop_clean();
}
END_TEST

Suite *suite_habits(void)
{
    Suite *s = suite_create("habits");
    TCase *tc = tcase_create("cors");
    tcase_add_test(tc, cors_setting_parsed);
    tcase_add_test(tc, cors_origin_checked);
    suite_add_tcase(s, tc);
    tc = tcase_create("e2e");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, content_disposition_names_the_download);
    tcase_add_test(tc, cors_off_by_default);
    tcase_add_test(tc, cors_listed_origins);
    tcase_add_test(tc, cors_any_origin_never_with_credentials);
    tcase_add_test(tc, request_id_reused_with_another_body);
    suite_add_tcase(s, tc);
    return s;
}
