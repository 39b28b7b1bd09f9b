/* check_conf.c - the conf suite: tfetchd's settings (daemon/conf.c): sizes with units, a
 * settings file together with command-line flags, and the memory limit the defaults are
 * sized from (daemon/memlimit.c, over a scratch /proc and /sys/fs/cgroup).
 *
 * Single-threaded; writes one temporary settings file per test and removes it.
 */
#include "config.h"
#include "tests/suites.h"
#include "daemon/conf.h"
#include "daemon/memlimit.h"

#include <stdio.h>
#include <sys/stat.h>
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
    /* An shm-socket no upgrade answer could name is refused at start, not at every upgrade. */
    ck_assert_int_eq(load("shm-socket = /run/tfetchd/shm.sock\n", NULL, &cfg), 0);
    ck_assert_int_eq(load("shm-socket = run/shm.sock\n", NULL, &cfg), -1);
    ck_assert_int_eq(load("shm-socket = /run/tf etchd/shm.sock\n", NULL, &cfg), -1);
    ck_assert_int_eq(load("shm-socket = /run/../shm.sock\n", NULL, &cfg), -1);
    ck_assert_int_eq(load("ucx-ports = 7071-7079\n", NULL, &cfg), 0);
    ck_assert_int_eq(load("ucx-ports = 7079-7071\n", NULL, &cfg), -1);
    ck_assert_int_eq(load("ucx-ports = 7071\n", NULL, &cfg), -1);
}
END_TEST

/* ---- the memory limit, over a scratch tree ------------------------------------------------ */

static char ROOT[64];

/* Writes ROOT/path (its directories made) with text. */
static void put_file(const char *path, const char *text)
{
    char full[512];
    snprintf(full, sizeof full, "%s%s", ROOT, path);
    for (char *p = full + strlen(ROOT) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        (void)mkdir(full, 0755);
        *p = '/';
    }
    FILE *f = fopen(full, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void scratch(void)
{
    snprintf(ROOT, sizeof ROOT, "/tmp/tfetch-memlimit-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(ROOT));
}

static void scratch_rm(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ROOT);
    ck_assert_int_eq(system(cmd), 0);
}

#define GIB (UINT64_C(1) << 30)

/* cgroup v2: the process's cgroup and each ancestor up to the mount point bind; the
 * smallest wins and is named; "max" and a missing file set nothing; physical memory
 * smaller than every limit wins. */
START_TEST(memlimit_cgroup_v2)
{
    scratch();
    put_file("/proc/self/cgroup", "0::/kubepods/pod1/c1\n");
    put_file("/proc/self/mountinfo",
             "22 1 0:21 / /proc rw - proc proc rw\n"
             "30 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
    put_file("/sys/fs/cgroup/kubepods/memory.max", "max\n");
    put_file("/sys/fs/cgroup/kubepods/pod1/memory.max", "4294967296\n");
    put_file("/sys/fs/cgroup/kubepods/pod1/c1/memory.max", "max\n");
    tfd_memlimit_t m;
    tfd_memlimit_read(ROOT, 64 * GIB, &m);
    ck_assert_uint_eq(m.bytes, 4 * GIB);
    ck_assert_str_eq(m.source, "cgroup v2 /sys/fs/cgroup/kubepods/pod1/memory.max");
    put_file("/sys/fs/cgroup/kubepods/pod1/c1/memory.max", "3221225472\n");   /* tighter */
    tfd_memlimit_read(ROOT, 64 * GIB, &m);
    ck_assert_uint_eq(m.bytes, 3 * GIB);
    tfd_memlimit_read(ROOT, 2 * GIB, &m);                  /* the machine is smaller */
    ck_assert_uint_eq(m.bytes, 2 * GIB);
    ck_assert_str_eq(m.source, "physical memory");
    put_file("/sys/fs/cgroup/kubepods/pod1/c1/memory.max", "garbage\n");
    put_file("/sys/fs/cgroup/kubepods/pod1/memory.max", "max\n");
    tfd_memlimit_read(ROOT, 64 * GIB, &m);                  /* no limit anywhere */
    ck_assert_uint_eq(m.bytes, 64 * GIB);
    ck_assert_str_eq(m.source, "physical memory");
    scratch_rm();
}
END_TEST

/* cgroup v1: the memory controller's line and mount; v1's "unlimited" (2^63 - page) is no
 * limit; a container's mount of a subtree has its root cut off the cgroup's path. */
START_TEST(memlimit_cgroup_v1)
{
    scratch();
    put_file("/proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n");
    put_file("/proc/self/mountinfo",
             "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
             "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n");
    put_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824\n");
    put_file("/sys/fs/cgroup/cpu/memory.limit_in_bytes", "1\n");        /* not memory's */
    tfd_memlimit_t m;
    tfd_memlimit_read(ROOT, 64 * GIB, &m);
    ck_assert_uint_eq(m.bytes, GIB);
    ck_assert_str_eq(m.source, "cgroup v1 /sys/fs/cgroup/memory/memory.limit_in_bytes");
    put_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    tfd_memlimit_read(ROOT, 64 * GIB, &m);
    ck_assert_uint_eq(m.bytes, 64 * GIB);
    /* No cgroup files at all: physical memory. */
    scratch_rm();
    scratch();
    tfd_memlimit_read(ROOT, 8 * GIB, &m);
    ck_assert_uint_eq(m.bytes, 8 * GIB);
    ck_assert_str_eq(m.source, "physical memory");
    scratch_rm();
}
END_TEST

/* The defaults follow: store-memory is half the limit, max-body the store's memory unless
 * set; a set store-memory is named as the source and max-body follows it. */
START_TEST(conf_sizes_follow_the_store)
{
    tfd_config_t cfg;
    ck_assert_int_eq(load("", NULL, &cfg), 0);
    ck_assert_uint_eq(cfg.max_body, cfg.store_memory);
    ck_assert_msg(strncmp(cfg.store_memory_source, "half of ", 8) == 0, "%s",
                  cfg.store_memory_source);
    ck_assert_int_eq(load("store-memory = 3G\n", NULL, &cfg), 0);
    ck_assert_uint_eq(cfg.store_memory, 3 * GIB);
    ck_assert_uint_eq(cfg.max_body, 3 * GIB);
    ck_assert_str_eq(cfg.store_memory_source, "the store-memory setting");
    ck_assert_int_eq(load("store-memory = 3G\n", "--max-body=1M", &cfg), 0);
    ck_assert_uint_eq(cfg.max_body, 1u << 20);
}
END_TEST

Suite *suite_conf(void)
{
    Suite *s = suite_create("conf");
    TCase *tc = tcase_create("conf");
    tcase_add_test(tc, conf_sizes);
    tcase_add_test(tc, conf_file_and_flags);
    tcase_add_test(tc, memlimit_cgroup_v2);
    tcase_add_test(tc, memlimit_cgroup_v1);
    tcase_add_test(tc, conf_sizes_follow_the_store);
    suite_add_tcase(s, tc);
    return s;
}
