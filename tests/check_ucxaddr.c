/* check_ucxaddr.c - the ucxaddr suite: proto/ucxaddr.c, the check a server's UCX worker
 * address passes before UCX reads it, and the UCX client's use of it.
 *
 * Hand-built addresses of both versions (every field the layout has), then real ones from
 * this machine's UCX (v1 and v2, all transports and network only) that must parse, every
 * truncation and one extra byte of them refused, every field out of range refused, random
 * bytes never accepted blindly, and tfp_ucxaddr_match against our own address. Last, the
 * UCX client: tfx_ucxc_connect given random bytes or an address whose transport entries are
 * too short fails with a reason (before this check UCX aborted or crashed the process).
 * Runs in Check's forked children.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proto/ucxaddr.h"
#include "tests/suites.h"

#ifdef HAVE_UCX
#include <ucp/api/ucp.h>
#include "transports/ucx_client.h"
#endif

/* ---- building addresses by hand ------------------------------------------------------ */

typedef struct {
    uint8_t b[4096];
    size_t n;
} abuf_t;

static void put(abuf_t *a, const void *p, size_t k)
{
    ck_assert_uint_le(a->n + k, sizeof a->b);
    memcpy(a->b + a->n, p, k);
    a->n += k;
}

static void put8(abuf_t *a, unsigned v)
{
    uint8_t b = (uint8_t)v;
    put(a, &b, 1);
}

static void header_v1(abuf_t *a, unsigned flags)
{
    a->n = 0;
    put8(a, (flags | 0x2u) << 4);           /* v1 always carries the uuid */
    put(a, "UUIDUUID", 8);
    if (flags & 0x4u)
        put(a, "CLIENTID", 8);
    if (flags & 0x1u) {
        put8(a, 4);
        put(a, "name", 4);
    }
}

static void header_v2(abuf_t *a, unsigned flags)
{
    a->n = 0;
    put8(a, 1);
    put8(a, flags);
    if (flags & 0x2u)
        put(a, "UUIDUUID", 8);
    if (flags & 0x4u)
        put(a, "CLIENTID", 8);
}

/* A v1 transport entry: checksum, attributes, interface address of len bytes. */
static void tl_v1(abuf_t *a, uint16_t csum, float bw, uint32_t pf, unsigned len, int last)
{
    float f[3] = {1e-9f, bw, 1e-7f};
    put(a, &csum, 2);
    put(a, f, sizeof f);
    put(a, &pf, 4);
    put8(a, len | (last ? 0x80u : 0));
    for (unsigned i = 0; i < len; i++)
        put8(a, i);
}

static void tl_v2(abuf_t *a, uint16_t csum, uint16_t flags, unsigned len, int last)
{
    uint8_t attr[4] = {10, 200, 30, 5};
    uint16_t seg = 128;
    put(a, &csum, 2);
    put(a, attr, 4);
    put(a, &seg, 2);
    put(a, &flags, 2);
    if (len >= 0x3f) {
        put8(a, 0x3fu | (last ? 0x80u : 0));
        put8(a, len);
    } else {
        put8(a, len | (last ? 0x80u : 0));
    }
    for (unsigned i = 0; i < len; i++)
        put8(a, 0xa0);
}

/* A device: md byte, device length byte with flags, optional paths and sys dev, address. */
static void dev(abuf_t *a, unsigned md, int empty, unsigned len, int paths, int sysdev,
                int last)
{
    put8(a, md | (empty ? 0x80u : 0));
    put8(a, len | (last ? 0x80u : 0) | (paths ? 0x40u : 0) | (sysdev >= 0 ? 0x20u : 0));
    if (paths)
        put8(a, (unsigned)paths);
    if (sysdev >= 0)
        put8(a, (unsigned)sysdev);
    for (unsigned i = 0; i < len; i++)
        put8(a, 0x55);
}

static tfp_status_t parse(const abuf_t *a, tfp_ucxaddr_t *out, tfp_err_t *err)
{
    return tfp_ucxaddr_parse(a->b, a->n, out, err);
}

START_TEST(ucxaddr_hand_built)
{
    tfp_ucxaddr_t o;
    tfp_err_t err;
    abuf_t a;

    /* v1: two devices (one empty), three transports, every header flag */
    header_v1(&a, 0x1u | 0x4u | 0x8u);
    dev(&a, 3, 0, 8, 2, 7, 0);
    tl_v1(&a, 0x1234, 1e9f, 0x3fff00u | 5u, 4, 0);
    tl_v1(&a, 0x5678, 2e9f, 0xc0000000u, 0, 1);
    dev(&a, 4, 1, 0, 0, -1, 0);
    dev(&a, 31, 0, 31, 0, -1, 1);
    tl_v1(&a, 0x9abc, 1.0f, 0, 63, 1);
    ck_assert_msg(parse(&a, &o, &err) == TFP_OK, "%s", err.msg);
    ck_assert_int_eq(o.version, 1);
    ck_assert_uint_eq(o.ndev, 3);
    ck_assert_uint_eq(o.n, 3);
    ck_assert_uint_eq(o.e[0].tl_csum, 0x1234);
    ck_assert_uint_eq(o.e[0].dev_addr_len, 8);
    ck_assert_uint_eq(o.e[0].iface_addr_len, 4);
    ck_assert_uint_eq(o.e[0].md_index, 3);
    ck_assert_uint_eq(o.e[2].dev_index, 2);
    ck_assert_uint_eq(o.e[2].dev_addr_len, 31);
    ck_assert_uint_eq(o.e[2].iface_addr_len, 63);

    /* v2: a 7-bit md index, extended device and interface lengths */
    header_v2(&a, 0x2u);
    put8(&a, 40);                           /* md 40 */
    put8(&a, 0x1fu | 0x80u);
    put8(&a, 33);                           /* last device, 33-byte address */
    for (int i = 0; i < 33; i++)
        put8(&a, 1);
    tl_v2(&a, 0x1111, 0x3ff, 100, 1);
    ck_assert_msg(parse(&a, &o, &err) == TFP_OK, "%s", err.msg);
    ck_assert_int_eq(o.version, 2);
    ck_assert_uint_eq(o.e[0].md_index, 40);
    ck_assert_uint_eq(o.e[0].dev_addr_len, 33);
    ck_assert_uint_eq(o.e[0].iface_addr_len, 100);

    /* no devices at all */
    header_v2(&a, 0);
    put8(&a, 0xff);
    ck_assert_int_eq(parse(&a, &o, &err), TFP_OK);
    ck_assert_uint_eq(o.n, 0);
    ck_assert_int_eq(tfp_ucxaddr_parse(a.b, a.n, NULL, &err), TFP_OK);     /* check only */
}
END_TEST

/* Each refusal, built by hand; the message names what is wrong. */
START_TEST(ucxaddr_refusals)
{
    tfp_err_t err;
    abuf_t a;
    static const struct {
        int kind;
        const char *msg;
    } cases[] = {
        {0, "not an address version"}, {1, "unknown header flags"},
        {2, "truncated worker uuid"}, {3, "truncated worker name"},
        {4, "endpoint addresses"}, {5, "beyond 63"}, {18, "bad memory domain index"},
        {6, "bad device path count"}, {7, "bad system device"},
        {8, "attributes out of range"}, {9, "attributes out of range"},
        {10, "unknown transport flags"}, {11, "bytes after the last device"},
        {12, "bad interface address length"}, {13, "more than 128 transport entries"},
        {14, "truncated device"}, {15, "transport bandwidth zero"},
        {16, "unknown transport flags"}, {17, "bytes after the last device"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        header_v1(&a, 0);
        switch (cases[i].kind) {
        case 0: a.b[0] = 0x25; break;                       /* version 5 */
        case 1: header_v2(&a, 0x40); break;
        case 2: a.n = 5; break;
        case 3: header_v1(&a, 0x1); a.n -= 2; break;
        case 4:
            dev(&a, 0, 0, 0, 0, -1, 1);
            tl_v1(&a, 1, 1e9f, 0, 0, 1);
            a.b[a.n - 1] |= 0x40;                           /* HAS_EP_ADDR */
            break;
        case 5:
            header_v2(&a, 0);
            put8(&a, 64);                                   /* md 64 */
            put8(&a, 0x80);
            break;
        case 6: dev(&a, 0, 1, 0, 1, -1, 1); break;          /* 1 path: never packed */
        case 7: dev(&a, 0, 1, 0, 0, 255, 1); break;         /* unknown sys dev: not packed */
        case 8: dev(&a, 0, 0, 0, 0, -1, 1); tl_v1(&a, 1, NAN, 0, 0, 1); break;
        case 9: dev(&a, 0, 0, 0, 0, -1, 1); tl_v1(&a, 1, 0.0f, 0, 0, 1); break;
        case 10: dev(&a, 0, 0, 0, 0, -1, 1); tl_v1(&a, 1, 1.0f, 0x01000000u, 0, 1); break;
        case 11: dev(&a, 0, 1, 0, 0, -1, 1); put8(&a, 0); break;
        case 12:                                            /* v2 extension below its mask */
            header_v2(&a, 0);
            dev(&a, 0, 0, 0, 0, -1, 1);
            tl_v2(&a, 1, 0, 1, 1);
            a.b[a.n - 2] = 0x3f | 0x80;
            a.b[a.n - 1] = 2;
            break;
        case 13:
            dev(&a, 0, 0, 0, 0, -1, 1);
            for (int k = 0; k < 129; k++)
                tl_v1(&a, 1, 1.0f, 0, 0, 0);
            break;
        case 14: dev(&a, 0, 1, 0, 0, -1, 0); break;         /* a device promised, none */
        case 15:
            header_v2(&a, 0);
            dev(&a, 0, 0, 0, 0, -1, 1);
            tl_v2(&a, 1, 0, 0, 1);
            a.b[a.n - 1 - 2 - 2 - 4 + 1] = 0;               /* fp8 bandwidth */
            break;
        case 16: header_v2(&a, 0); dev(&a, 0, 0, 0, 0, -1, 1); tl_v2(&a, 1, 0x400, 0, 1); break;
        case 17: header_v2(&a, 0); put8(&a, 0xff); put8(&a, 0); break;
        case 18: header_v2(&a, 0); put8(&a, 0x7f); put8(&a, 40); break;  /* fits: not extended */
        }
        tfp_status_t st = parse(&a, NULL, &err);
        ck_assert_msg(st == TFP_EPROTO, "case %zu: %d", i, st);
        ck_assert_msg(strstr(err.msg, cases[i].msg), "case %zu: %s", i, err.msg);
        ck_assert_ptr_nonnull(strstr(err.msg, "UCX worker address: "));
    }
    ck_assert_int_eq(tfp_ucxaddr_parse(NULL, 0, NULL, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_ucxaddr_parse(a.b, 0, NULL, &err), TFP_EPROTO);
}
END_TEST

/* Random bytes: whatever comes back, no read past the end (ASan/valgrind watch) and an
 * address that parses is one a second parse agrees with. */
START_TEST(ucxaddr_random_bytes)
{
    uint8_t *b = malloc(300);
    unsigned seed = 12345;
    size_t accepted = 0;
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t)(rand_r(&seed) % 300);
        uint8_t *p = b + 300 - n;           /* at the end of the allocation */
        for (size_t k = 0; k < n; k++)
            p[k] = (uint8_t)rand_r(&seed);
        if (i % 3 == 0 && n > 0)
            p[0] = (uint8_t)(rand_r(&seed) % 2 ? 0x20 : 0x01);
        tfp_ucxaddr_t o;
        tfp_err_t err;
        if (tfp_ucxaddr_parse(p, n, &o, &err) == TFP_OK)
            accepted++;
        else
            ck_assert_ptr_nonnull(strstr(err.msg, "UCX worker address"));
    }
    ck_assert_uint_lt(accepted, 200);
    free(b);
}
END_TEST

START_TEST(ucxaddr_match)
{
    tfp_ucxaddr_t local, remote;
    tfp_err_t err;
    abuf_t a;

    header_v1(&a, 0);
    dev(&a, 0, 0, 8, 0, -1, 1);
    tl_v1(&a, 0xaaaa, 1e9f, 0, 16, 0);
    tl_v1(&a, 0xbbbb, 1e9f, 0, 4, 1);
    ck_assert_int_eq(parse(&a, &local, &err), TFP_OK);
    ck_assert_int_eq(tfp_ucxaddr_match(&local, &local, &err), TFP_OK);

    header_v1(&a, 0);                       /* an unknown transport: ignored */
    dev(&a, 0, 0, 3, 0, -1, 1);
    tl_v1(&a, 0xcccc, 1e9f, 0, 1, 1);
    ck_assert_int_eq(parse(&a, &remote, &err), TFP_OK);
    ck_assert_int_eq(tfp_ucxaddr_match(&remote, &local, &err), TFP_OK);

    header_v1(&a, 0);                       /* a known one with a short device address */
    dev(&a, 0, 0, 0, 0, -1, 1);
    tl_v1(&a, 0xbbbb, 1e9f, 0, 4, 1);
    ck_assert_int_eq(parse(&a, &remote, &err), TFP_OK);
    ck_assert_int_eq(tfp_ucxaddr_match(&remote, &local, &err), TFP_EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "0xbbbb"));

    header_v1(&a, 0);                       /* ... or a long interface address */
    dev(&a, 0, 0, 8, 0, -1, 1);
    tl_v1(&a, 0xaaaa, 1e9f, 0, 17, 1);
    ck_assert_int_eq(parse(&a, &remote, &err), TFP_OK);
    ck_assert_int_eq(tfp_ucxaddr_match(&remote, &local, &err), TFP_EPROTO);
}
END_TEST

#ifdef HAVE_UCX
/* This machine's UCX's own worker address (version ver, all transports or network only). */
static void real_address(const char *ver, int net_only, uint8_t **out, size_t *len)
{
    ucp_config_t *cfg;
    ucp_context_h ctx;
    ucp_worker_h w;
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_worker_params_t wp = {.field_mask = 0};

    ck_assert_int_eq(setenv("UCX_ADDRESS_VERSION", ver, 1), 0);
    ck_assert_int_eq(ucp_config_read(NULL, NULL, &cfg), UCS_OK);
    ck_assert_int_eq(ucp_init(&p, cfg, &ctx), UCS_OK);
    ucp_config_release(cfg);
    ck_assert_int_eq(ucp_worker_create(ctx, &wp, &w), UCS_OK);
    ucp_worker_attr_t a = {.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS |
                                         UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS,
                           .address_flags = net_only ? UCP_WORKER_ADDRESS_FLAG_NET_ONLY : 0};
    ck_assert_int_eq(ucp_worker_query(w, &a), UCS_OK);
    *out = malloc(a.address_length);
    memcpy(*out, a.address, a.address_length);
    *len = a.address_length;
    ucp_worker_release_address(w, a.address);
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    unsetenv("UCX_ADDRESS_VERSION");
}

/* Real addresses parse, match themselves; every strict prefix and one more byte do not. */
START_TEST(ucxaddr_real_addresses)
{
    static const char *const vers[] = {"v1", "v2"};
    for (int v = 0; v < 2; v++) {
        for (int net = 0; net < 2; net++) {
            uint8_t *addr, *copy;
            size_t n;
            tfp_ucxaddr_t o;
            tfp_err_t err;
            real_address(vers[v], net, &addr, &n);
            ck_assert_msg(tfp_ucxaddr_parse(addr, n, &o, &err) == TFP_OK, "%s %s: %s",
                          vers[v], net ? "net" : "all", err.msg);
            ck_assert_int_eq(o.version, v + 1);
            ck_assert_uint_gt(o.n, 0);
            ck_assert_int_eq(tfp_ucxaddr_match(&o, &o, &err), TFP_OK);
            for (size_t k = 0; k < n; k++) {
                copy = malloc(k ? k : 1);   /* exact size: ASan sees a read past it */
                memcpy(copy, addr, k);
                ck_assert_msg(tfp_ucxaddr_parse(copy, k, NULL, &err) == TFP_EPROTO,
                              "%s: prefix of %zu of %zu bytes accepted", vers[v], k, n);
                free(copy);
            }
            copy = malloc(n + 1);
            memcpy(copy, addr, n);
            copy[n] = 0;
            ck_assert_int_eq(tfp_ucxaddr_parse(copy, n + 1, NULL, &err), TFP_EPROTO);
            free(copy);
            free(addr);
        }
    }
}
END_TEST

/* UCX's ucs_crc16_string: the checksum an address names a transport by. */
static uint16_t tl_csum(const char *name)
{
    uint16_t crc = 0xffff;
    for (const char *p = name; *p; p++) {
        crc ^= (uint8_t)*p;
        for (int bit = 0; bit < 8; bit++)
            crc = (uint16_t)((crc >> 1) ^ ((crc & 1) ? 0x8408u : 0));
    }
    return (uint16_t)~crc;
}

/* A v1 address, well formed, naming tcp, posix and sysv (one device each) with empty device
 * and interface addresses: UCX reads each transport's fixed layout past them (it crashed
 * with SIGSEGV on a NULL device address). */
static void short_entries(abuf_t *a)
{
    static const char *const tls[] = {"tcp", "posix", "sysv"};
    header_v1(a, 0);
    for (int i = 0; i < 3; i++) {
        dev(a, (unsigned)i, 0, 0, 0, -1, i == 2);
        tl_v1(a, tl_csum(tls[i]), 1e9f, 0x3fff00u | 10u, 0, 1);
    }
}

/* The client's connect: random bytes, a truncated address and entries too short never reach
 * UCX (they aborted or crashed the process before); it fails with a reason at once. */
START_TEST(ucxaddr_client_refuses)
{
    tfp_err_t err;
    char why[256];
    tfx_ucxc_conn_t *conn = NULL;
    tfx_ucxc_t *u = tfx_ucxc_new(NULL, NULL, &err);
    ck_assert_msg(u != NULL, "%s", err.msg);
    uint8_t junk[200];
    unsigned seed = 7;
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < sizeof junk; i++)
            junk[i] = (uint8_t)rand_r(&seed);
        junk[0] = (uint8_t)(round % 2 ? 0x05 : 0x02);       /* versions UCX asserts on */
        tfp_status_t st = tfx_ucxc_connect(u, junk, sizeof junk, round % 2, "t", "i", 500,
                                           &conn, why, sizeof why);
        ck_assert_int_eq(st, TFP_EPROTO);
        ck_assert_msg(strstr(why, "UCX worker address: "), "%s", why);
    }
    uint8_t *addr;
    size_t n;
    real_address("v1", 0, &addr, &n);
    ck_assert_int_eq(tfx_ucxc_connect(u, addr, n - 1, 1, "t", "i", 500, &conn, why,
                                      sizeof why), TFP_EPROTO);
    free(addr);
    abuf_t a;
    short_entries(&a);
    ck_assert_int_eq(parse(&a, NULL, &err), TFP_OK);
    ck_assert_int_eq(tfx_ucxc_connect(u, a.b, a.n, 1, "t", "i", 500, &conn, why, sizeof why),
                     TFP_EPROTO);
    ck_assert_msg(strstr(why, "not the sizes our UCX reads"), "%s", why);
    tfx_ucxc_free(u);
}
END_TEST
#endif

Suite *suite_ucxaddr(void)
{
    Suite *s = suite_create("ucxaddr");
    TCase *tc = tcase_create("ucxaddr");

    tcase_add_test(tc, ucxaddr_hand_built);
    tcase_add_test(tc, ucxaddr_refusals);
    tcase_add_test(tc, ucxaddr_random_bytes);
    tcase_add_test(tc, ucxaddr_match);
#ifdef HAVE_UCX
    tcase_add_test(tc, ucxaddr_real_addresses);
    tcase_add_test(tc, ucxaddr_client_refuses);
    tcase_set_timeout(tc, 60);
#endif
    suite_add_tcase(s, tc);
    return s;
}
