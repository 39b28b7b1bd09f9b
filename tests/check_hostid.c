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

#include "proto/netaddr.h"
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

/* ---- address ranges (proto/netaddr.c) and this host's addresses -------------------------- */

START_TEST(netlist_parse_and_match)
{
    tfp_netlist_t l;
    tfp_err_t err;
    ck_assert_int_eq(tfp_netlist_parse("same-host, 10.0.0.0/8,192.168.7.9 fd00::/8", &l, &err),
                     TFP_OK);
    ck_assert_int_eq(l.same_host, 1);
    ck_assert_uint_eq(l.n, 3);
    ck_assert_int_eq(tfp_netlist_match(&l, "10.200.3.4"), 1);
    ck_assert_int_eq(tfp_netlist_match(&l, "11.0.0.1"), 0);
    ck_assert_int_eq(tfp_netlist_match(&l, "192.168.7.9"), 1);
    ck_assert_int_eq(tfp_netlist_match(&l, "192.168.7.10"), 0);
    ck_assert_int_eq(tfp_netlist_match(&l, "fd12::1"), 1);
    ck_assert_int_eq(tfp_netlist_match(&l, "fe80::1"), 0);
    ck_assert_int_eq(tfp_netlist_match(&l, "::ffff:10.1.2.3"), 1);   /* a v4 peer on :: */
    ck_assert_int_eq(tfp_netlist_match(&l, "10.1.2.3x"), 0);
    ck_assert_int_eq(tfp_netlist_match(&l, ""), 0);
    ck_assert_int_eq(tfp_netlist_match(&l, NULL), 0);
    /* Prefix lengths that are not byte-aligned. */
    ck_assert_int_eq(tfp_netlist_parse("10.77.0.0/17", &l, &err), TFP_OK);
    ck_assert_int_eq(tfp_netlist_match(&l, "10.77.127.255"), 1);
    ck_assert_int_eq(tfp_netlist_match(&l, "10.77.128.0"), 0);
    ck_assert_int_eq(l.same_host, 0);
    ck_assert_int_eq(tfp_netlist_parse("0.0.0.0/0", &l, &err), TFP_OK);
    ck_assert_int_eq(tfp_netlist_match(&l, "8.8.8.8"), 1);
    ck_assert_int_eq(tfp_netlist_match(&l, "::1"), 0);               /* v4 ranges only */
    ck_assert_int_eq(tfp_netlist_parse("", &l, &err), TFP_OK);
    ck_assert_uint_eq(l.n, 0);
    ck_assert_int_eq(tfp_netlist_match(&l, "127.0.0.1"), 0);
    ck_assert_int_eq(tfp_netlist_parse(NULL, &l, &err), TFP_OK);
}
END_TEST

START_TEST(netlist_refuses_bad_entries)
{
    static const char *bad[] = {"10.0.0.0/33", "10.1.2.3/8", "fd00::/129", "10.0.0/8",
                                "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8x", "example.com",
                                "same-hosts", "::ffff:10.0.0.0/104", "10.0.0.0/0008",
                                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tfp_netlist_t l;
        tfp_err_t err;
        ck_assert_msg(tfp_netlist_parse(bad[i], &l, &err) == TFP_EINVAL, "%s accepted", bad[i]);
        ck_assert_ptr_nonnull(strstr(err.msg, "address"));
    }
}
END_TEST

START_TEST(addr_is_local)
{
    ck_assert_int_eq(tfx_addr_is_local("localhost"), 1);
    ck_assert_int_eq(tfx_addr_is_local("127.0.0.1"), 1);
    ck_assert_int_eq(tfx_addr_is_local("127.3.4.5"), 1);
    ck_assert_int_eq(tfx_addr_is_local("::1"), 1);
    ck_assert_int_eq(tfx_addr_is_local("[::1]"), 1);
    ck_assert_int_eq(tfx_addr_is_local("::ffff:127.0.0.1"), 1);
    ck_assert_int_eq(tfx_addr_is_local("192.0.2.1"), 0);        /* TEST-NET-1: never ours */
    ck_assert_int_eq(tfx_addr_is_local("2001:db8::1"), 0);
    ck_assert_int_eq(tfx_addr_is_local("example.com"), 0);
    ck_assert_int_eq(tfx_addr_is_local(""), 0);
    ck_assert_int_eq(tfx_addr_is_local("[]"), 0);
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

    tc = tcase_create("netaddr");
    tcase_add_test(tc, netlist_parse_and_match);
    tcase_add_test(tc, netlist_refuses_bad_entries);
    tcase_add_test(tc, addr_is_local);
    suite_add_tcase(s, tc);
    return s;
}
