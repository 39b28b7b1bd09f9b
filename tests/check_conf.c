/* check_conf.c - the conf suite: tfetchd's settings (daemon/conf.c): sizes with units, and a
 * settings file together with command-line flags.
 *
 * Single-threaded; writes one temporary settings file per test and removes it.
 */
#include "config.h"
#include "tests/suites.h"
#include "daemon/conf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

Suite *suite_conf(void)
{
    Suite *s = suite_create("conf");
    TCase *tc = tcase_create("conf");
    tcase_add_test(tc, conf_sizes);
    tcase_add_test(tc, conf_file_and_flags);
    suite_add_tcase(s, tc);
    return s;
}
