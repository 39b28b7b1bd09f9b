/* check_hostid.c - the hostid suite: the host identity reader (transports/hostid.c), on this
 * host's /proc and on a fake one.
 *
 * Single-threaded; each test's fake /proc lives in its own temporary directory, removed after.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "proto/status.h"
#include "proto/upgrade.h"
#include "tests/suites.h"
#include "transports/hostid.h"

#define BOOT "07424f66-80cc-4684-b9fd-2ab7faab3cd6"
#define NETNS "net:[4026531833]"
#define TOKEN "0123456789abcdef0123456789abcdef"

/* ---- host identity from /proc -------------------------------------------------------- */

START_TEST(hostid_real)
{
    tfp_up_host_t h, again;
    tfp_err_t err = { TFP_OK, "" };
    char buf[64] = "";
    FILE *f;

    ck_assert_msg(tfx_hostid_get(&h, &err) == TFP_OK, "%s", err.msg);
    ck_assert_int_eq(tfp_up_host_check(&h, &err), TFP_OK);
    ck_assert_int_eq(h.pid, (int64_t)getpid());
    f = fopen("/proc/sys/kernel/random/boot_id", "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(buf, sizeof buf, f));
    fclose(f);
    ck_assert_int_eq(strncmp(buf, h.boot_id, TFP_UP_BOOT_ID_LEN), 0);
    ck_assert_int_eq(tfx_hostid_get(&again, &err), TFP_OK);
    ck_assert_int_eq(tfp_up_host_same(&h, &again), 1);
    ck_assert_int_eq(tfx_hostid_get(NULL, &err), TFP_EINVAL);
}
END_TEST

/* A fake /proc: dir/sys/kernel/random/boot_id holding boot, dir/self/ns/net -> link. */
static void fake_proc(const char *dir, const char *boot, const char *link)
{
    char p[512];
    FILE *f;

    snprintf(p, sizeof p, "%s/sys", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/sys/kernel", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/sys/kernel/random", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/self", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/self/ns", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/sys/kernel/random/boot_id", dir);
    unlink(p);
    if (boot != NULL) {
        f = fopen(p, "w");
        ck_assert_ptr_nonnull(f);
        fputs(boot, f);
        fclose(f);
    }
    snprintf(p, sizeof p, "%s/self/ns/net", dir);
    unlink(p);
    if (link != NULL)
        ck_assert_int_eq(symlink(link, p), 0);
}

static void rm_fake_proc(const char *dir)
{
    static const char *const parts[] = { "sys/kernel/random/boot_id", "self/ns/net",
                                         "sys/kernel/random", "sys/kernel", "sys", "self/ns",
                                         "self", "" };
    char p[512];

    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, parts[i]);
        remove(p);
    }
}

START_TEST(hostid_fake_proc)
{
    static const struct {
        const char *boot, *link, *want;
    } cases[] = {
        { BOOT "\n", NETNS, NULL },
        { BOOT, "net:[1]", NULL },
        { NULL, NETNS, "cannot open" },
        { BOOT "\n", NULL, "cannot read link" },
        { "", NETNS, "does not hold a 36-character lowercase uuid" },
        { BOOT "\n\n", NETNS, "does not hold a 36-character" },
        { BOOT "x\n", NETNS, "does not hold" },
        { "07424F66-80CC-4684-B9FD-2AB7FAAB3CD6\n", NETNS, "does not hold" },
        { BOOT "\n", "net:[1", "does not point at \"net:[N]\"" },
        { BOOT "\n", "net:[11111111111111111111111111111111111111111]", "does not point at" },
        { BOOT "\n", "/tmp/x", "does not point at" },
    };
    char dir[] = "/tmp/tfetch-hostid-XXXXXX";

    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tfp_up_host_t h, canary;
        tfp_err_t err = { TFP_OK, "" };
        tfp_status_t st;

        fake_proc(dir, cases[i].boot, cases[i].link);
        memset(&h, 0x11, sizeof h);
        canary = h;
        st = tfx_hostid_read(dir, &h, &err);
        if (cases[i].want == NULL) {
            ck_assert_msg(st == TFP_OK, "case %zu: %s", i, err.msg);
            ck_assert_str_eq(h.boot_id, BOOT);
            ck_assert_str_eq(h.netns, cases[i].link);
            ck_assert_int_eq(h.pid, (int64_t)getpid());
            continue;
        }
        ck_assert_msg(st == TFP_EINTERNAL, "case %zu: %s (%s)", i, tfp_status_name(st), err.msg);
        ck_assert_msg(strstr(err.msg, cases[i].want) != NULL, "case %zu: '%s'", i, err.msg);
        ck_assert_ptr_nonnull(strstr(err.msg, dir));
        ck_assert_mem_eq(&h, &canary, sizeof h);
    }
    /* boot_id a directory: it opens, but reading it fails */
    {
        char p[512];
        tfp_up_host_t h;
        tfp_err_t err;

        fake_proc(dir, NULL, NETNS);
        snprintf(p, sizeof p, "%s/sys/kernel/random/boot_id", dir);
        ck_assert_int_eq(mkdir(p, 0700), 0);
        ck_assert_int_eq(tfx_hostid_read(dir, &h, &err), TFP_EINTERNAL);
        ck_assert_msg(strstr(err.msg, "cannot read") != NULL, "'%s'", err.msg);
        ck_assert_int_eq(rmdir(p), 0);
    }
    rm_fake_proc(dir);
    {
        char *longroot = malloc(5000);
        tfp_up_host_t h;
        tfp_err_t err;

        ck_assert_ptr_nonnull(longroot);
        memset(longroot, 'a', 4999);
        longroot[4999] = '\0';
        ck_assert_int_eq(tfx_hostid_read(longroot, &h, &err), TFP_EINVAL);
        ck_assert_ptr_nonnull(strstr(err.msg, "too long"));
        free(longroot);

        ck_assert_int_eq(tfx_hostid_read(NULL, &h, &err), TFP_EINVAL);
        ck_assert_int_eq(tfx_hostid_read("/nonexistent-tfetch", &h, &err), TFP_EINTERNAL);
        ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent-tfetch/sys/kernel/random/boot_id"));
    }
}
END_TEST

/* ---- suite --------------------------------------------------------------------------- */

Suite *suite_hostid(void)
{
    Suite *s = suite_create("hostid");
    TCase *tc;

    tc = tcase_create("hostid");
    tcase_add_test(tc, hostid_real);
    tcase_add_test(tc, hostid_fake_proc);
    suite_add_tcase(s, tc);
    return s;
}
