/* check_accesslog.c - the accesslog suite: the access log's JSON line (daemon/accesslog.c)
 * and its file handling (append, reopen after a rotation).
 *
 * Single-threaded; owns only what each test allocates, and temporary files it removes.
 */
#include "config.h"
#include "tests/suites.h"
#include "daemon/accesslog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(accesslog_line)
{
    tfd_access_t a = {.client = "127.0.0.1", .transport = "http", .op = "tensor_get",
                      .name = "w", .user = "al\"ice", .request_id = "r-1", .status = 404,
                      .code = "TF_ENOTFOUND", .bytes_in = 0, .bytes_out = 61,
                      .seconds = 0.000125, .completed = 1};
    char *l = tfd_access_log_render(&a, 1796256000123ULL);     /* 2026-12-03T00:00:00.123Z */
    ck_assert_ptr_nonnull(l);
    ck_assert_str_eq(l, "{\"ts\":\"2026-12-03T00:00:00.123Z\",\"client\":\"127.0.0.1\","
                        "\"transport\":\"http\",\"op\":\"tensor_get\",\"name\":\"w\","
                        "\"user\":\"al\\\"ice\",\"request_id\":\"r-1\",\"status\":404,"
                        "\"code\":\"TF_ENOTFOUND\",\"bytes_in\":0,\"bytes_out\":61,"
                        "\"seconds\":0.000125,\"completed\":true}");
    free(l);
    tfd_access_t b = {.transport = "ucx", .op = "health", .status = 200};
    l = tfd_access_log_render(&b, 0);
    ck_assert_ptr_nonnull(strstr(l, "\"client\":null"));
    ck_assert_ptr_nonnull(strstr(l, "\"code\":null"));
    ck_assert_ptr_nonnull(strstr(l, "\"completed\":false"));
    free(l);
}
END_TEST

static size_t lines_in(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;
    int ch;
    while (f && (ch = fgetc(f)) != EOF)
        n += ch == '\n';
    if (f)
        fclose(f);
    return n;
}

START_TEST(accesslog_file_and_reopen)
{
    char path[64], moved[80];
    snprintf(path, sizeof path, "/tmp/tf-accesslog-%d", (int)getpid());
    snprintf(moved, sizeof moved, "%s.1", path);
    const char *err = NULL;
    tfd_access_log_t *off = tfd_access_log_open("off", &err);
    ck_assert_ptr_nonnull(off);
    ck_assert(!tfd_access_log_on(off));
    tfd_access_log_free(off);
    ck_assert_ptr_nonnull((off = tfd_access_log_open(NULL, &err)));
    ck_assert(!tfd_access_log_on(off));
    ck_assert_ptr_null(err);
    ck_assert_ptr_null(tfd_access_log_open("/nonexistent-dir/x.log", &err));
    ck_assert_ptr_nonnull(err);
    tfd_access_log_t *l = tfd_access_log_open(path, &err);
    ck_assert_ptr_nonnull(l);
    tfd_access_t a = {.transport = "http", .op = "health", .status = 200, .completed = 1};
    tfd_access_log_write(l, &a);
    tfd_access_log_write(l, &a);
    ck_assert_uint_eq(lines_in(path), 2);
    ck_assert_int_eq(rename(path, moved), 0);           /* logrotate */
    tfd_access_log_write(l, &a);                        /* still the old file */
    ck_assert_uint_eq(lines_in(moved), 3);
    ck_assert_int_eq(tfd_access_log_reopen(l), 0);
    tfd_access_log_write(l, &a);
    ck_assert_uint_eq(lines_in(path), 1);
    ck_assert_uint_eq(lines_in(moved), 3);
    tfd_access_log_free(l);
    tfd_access_log_write(NULL, &a);                     /* no log: a no-op */
    /* SIGHUP with a new access-log: off -> a file -> off; a bad path keeps the old target */
    tfd_access_log_write(off, &a);
    ck_assert_int_eq(tfd_access_log_set(off, path, &err), 0);
    ck_assert(tfd_access_log_on(off));
    tfd_access_log_write(off, &a);
    ck_assert_uint_eq(lines_in(path), 2);
    ck_assert_int_eq(tfd_access_log_set(off, "/nonexistent-dir/y", &err), -1);
    tfd_access_log_write(off, &a);
    ck_assert_uint_eq(lines_in(path), 3);
    ck_assert_int_eq(tfd_access_log_set(off, "off", &err), 0);
    tfd_access_log_write(off, &a);
    ck_assert_uint_eq(lines_in(path), 3);
    tfd_access_log_free(off);
    unlink(path);
    unlink(moved);
}
END_TEST

Suite *suite_accesslog(void)
{
    Suite *s = suite_create("accesslog");
    TCase *tc = tcase_create("accesslog");
    tcase_add_test(tc, accesslog_line);
    tcase_add_test(tc, accesslog_file_and_reopen);
    suite_add_tcase(s, tc);
    return s;
}
