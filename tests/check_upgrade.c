/* check_upgrade.c - the upgrade suite: the POST /v1/upgrade JSON, the host identity it
 * carries, and base64 (proto/upgrade.c).
 *
 * Golden JSON pins the wire format; seeded random round trips check that what is built is
 * parsed back identical, and tables of bad documents that each is refused with its message.
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "proto/status.h"
#include "proto/upgrade.h"
#include "tests/fixtures.h"
#include "tests/suites.h"

#define BOOT "07424f66-80cc-4684-b9fd-2ab7faab3cd6"
#define NETNS "net:[4026531833]"
#define TOKEN "0123456789abcdef0123456789abcdef"

static void fill(char *dst, char c, size_t n)
{
    memset(dst, c, n);
    dst[n] = '\0';
}

/* ---- host identity ------------------------------------------------------------------- */

START_TEST(up_host_validators)
{
    ck_assert_int_eq(tfp_up_boot_id_valid(BOOT), 1);
    ck_assert_int_eq(tfp_up_boot_id_valid("00000000-0000-0000-0000-000000000000"), 1);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424F66-80cc-4684-b9fd-2ab7faab3cd6"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424f66-80cc-4684-b9fd-2ab7faab3cd"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424f66-80cc-4684-b9fd-2ab7faab3cd66"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424f6680cc-4684-b9fd-2ab7faab3cd6a"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424f66-80cc-4684-b9fd-2ab7faab3cd6\n"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424f66-80cc-4684-b9fd-2ab7-aab3cd6"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid("07424f66-80cc-4684-b9fd-2ab7faab3cg6"), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid(""), 0);
    ck_assert_int_eq(tfp_up_boot_id_valid(NULL), 0);

    ck_assert_int_eq(tfp_up_netns_valid(NETNS), 1);
    ck_assert_int_eq(tfp_up_netns_valid("net:[0]"), 1);
    ck_assert_int_eq(tfp_up_netns_valid("net:[18446744073709551615]"), 1);
    ck_assert_int_eq(tfp_up_netns_valid("net:[184467440737095516150]"), 0);     /* 21 digits */
    ck_assert_int_eq(tfp_up_netns_valid("net:[]"), 0);
    ck_assert_int_eq(tfp_up_netns_valid("net:[12a]"), 0);
    ck_assert_int_eq(tfp_up_netns_valid("net:[12] "), 0);
    ck_assert_int_eq(tfp_up_netns_valid("net:[12"), 0);
    ck_assert_int_eq(tfp_up_netns_valid("mnt:[4026531840]"), 0);
    ck_assert_int_eq(tfp_up_netns_valid("net:[-1]"), 0);
    ck_assert_int_eq(tfp_up_netns_valid(NULL), 0);

    ck_assert_int_eq(tfp_up_token_valid(TOKEN), 1);
    ck_assert_int_eq(tfp_up_token_valid("0123456789ABCDEF0123456789abcdef"), 0);
    ck_assert_int_eq(tfp_up_token_valid("0123456789abcdef0123456789abcde"), 0);
    ck_assert_int_eq(tfp_up_token_valid("0123456789abcdef0123456789abcdef0"), 0);
    ck_assert_int_eq(tfp_up_token_valid(""), 0);
    ck_assert_int_eq(tfp_up_token_valid(NULL), 0);
}
END_TEST

static tfp_up_host_t host_of(const char *boot, const char *netns, int64_t pid)
{
    tfp_up_host_t h;

    memset(&h, 0, sizeof h);
    snprintf(h.boot_id, sizeof h.boot_id, "%s", boot);
    snprintf(h.netns, sizeof h.netns, "%s", netns);
    h.pid = pid;
    return h;
}

START_TEST(up_host_check_same_ident)
{
    tfp_up_host_t a = host_of(BOOT, NETNS, 1234), b = a, p;
    char buf[TFP_UP_MAX_IDENT + 1];
    tfp_err_t err;

    ck_assert_int_eq(tfp_up_host_check(&a, &err), TFP_OK);
    b.pid = 1;
    ck_assert_int_eq(tfp_up_host_same(&a, &b), 1);
    b.netns[6] = '9';
    ck_assert_int_eq(tfp_up_host_same(&a, &b), 0);
    b = a;
    b.boot_id[0] = '1';
    ck_assert_int_eq(tfp_up_host_same(&a, &b), 0);
    ck_assert_int_eq(tfp_up_host_same(&a, NULL), 0);
    b = host_of("", "", 1);
    ck_assert_int_eq(tfp_up_host_same(&b, &b), 0);

    b = a;
    b.pid = 0;
    ck_assert_int_eq(tfp_up_host_check(&b, &err), TFP_EINVAL);
    ck_assert_str_eq(err.msg, "host identity: pid 0 is not in 1..2147483647");
    b.pid = INT64_C(2147483648);
    ck_assert_int_eq(tfp_up_host_check(&b, &err), TFP_EINVAL);
    b = a;
    b.boot_id[8] = 'x';
    ck_assert_int_eq(tfp_up_host_check(&b, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "boot_id is not a 36-character lowercase uuid"));
    b = a;
    memset(b.netns, '1', sizeof b.netns);
    ck_assert_int_eq(tfp_up_host_check(&b, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "netns is not \"net:[N]\""));
    ck_assert_int_eq(tfp_up_host_check(NULL, &err), TFP_EINVAL);

    ck_assert_int_eq(tfp_up_ident_format(&a, buf, sizeof buf, &err), TFP_OK);
    ck_assert_str_eq(buf, BOOT " " NETNS);
    ck_assert_int_eq(tfp_up_ident_parse(buf, strlen(buf), &p, &err), TFP_OK);
    ck_assert_str_eq(p.boot_id, BOOT);
    ck_assert_str_eq(p.netns, NETNS);
    ck_assert_int_eq(p.pid, 0);
    ck_assert_int_eq(tfp_up_host_same(&a, &p), 1);
    ck_assert_int_eq(tfp_up_ident_format(&a, buf, strlen(BOOT " " NETNS), &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "too small"));
    ck_assert_int_eq(tfp_up_ident_format(NULL, buf, sizeof buf, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_up_ident_format(&a, NULL, sizeof buf, &err), TFP_EINVAL);
    b = a;
    b.boot_id[0] = 'Q';
    ck_assert_int_eq(tfp_up_ident_format(&b, buf, sizeof buf, &err), TFP_EINVAL);
    b = a;
    strcpy(b.netns, "net:[1");
    ck_assert_int_eq(tfp_up_ident_format(&b, buf, sizeof buf, &err), TFP_EINVAL);
    /* a maximal identity fits TFP_UP_MAX_IDENT */
    b = host_of(BOOT, "net:[18446744073709551615]", 1);
    ck_assert_int_eq(tfp_up_ident_format(&b, buf, sizeof buf, &err), TFP_OK);
    ck_assert_uint_le(strlen(buf), TFP_UP_MAX_IDENT);
}
END_TEST

START_TEST(up_ident_parse_rejects)
{
    static const struct {
        const char *s;
        const char *want;
    } bad[] = {
        { "", "no space after 36 characters" },
        { BOOT, "no space after 36 characters" },
        { BOOT NETNS, "no space after 36 characters" },
        { BOOT "\t" NETNS, "no space after 36 characters" },
        { "07424F66-80cc-4684-b9fd-2ab7faab3cd6 " NETNS, "boot_id is not" },
        { BOOT " ", "netns is not" },
        { BOOT "  " NETNS, "netns is not" },
        { BOOT " " NETNS " ", "netns is not" },
        { BOOT " net:[1111111111111111111111111111111111]", "netns is not" },
    };
    tfp_up_host_t out, canary;
    tfp_err_t err;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&out, 0x33, sizeof out);
        canary = out;
        ck_assert_int_eq(tfp_up_ident_parse(bad[i].s, strlen(bad[i].s), &out, &err),
                         TFP_EPROTO);
        ck_assert_msg(strstr(err.msg, bad[i].want) != NULL, "case %zu: '%s'", i, err.msg);
        ck_assert_mem_eq(&out, &canary, sizeof out);
    }
    /* a NUL inside the netns part */
    ck_assert_int_eq(tfp_up_ident_parse(BOOT " net:[1]\0]", 46, &out, &err), TFP_EPROTO);
    ck_assert_int_eq(tfp_up_ident_parse(NULL, 0, &out, &err), TFP_EINVAL);
}
END_TEST

/* ---- upgrade request ----------------------------------------------------------------- */

#define REQ_GOLDEN "{\"transports\":[\"ucx\"],\"host\":{\"boot_id\":\"" BOOT "\",\"netns\":\"" \
    NETNS "\",\"pid\":1234},\"policy\":\"auto\"}"

START_TEST(up_req_golden_roundtrip)
{
    tfp_up_req_t req, got;
    char *json = NULL;
    size_t len = 0;
    tfp_err_t err;

    memset(&req, 0, sizeof req);
    req.transports = TFP_UP_T_UCX;
    req.host = host_of(BOOT, NETNS, 1234);
    req.policy = TFP_UP_POLICY_AUTO;
    ck_assert_int_eq(tfp_up_req_build(&req, &json, &len, &err), TFP_OK);
    ck_assert_str_eq(json, REQ_GOLDEN);
    ck_assert_uint_eq(len, strlen(REQ_GOLDEN));
    ck_assert_int_eq(tfp_up_req_parse(json, len, &got, &err), TFP_OK);
    ck_assert_uint_eq(got.transports, TFP_UP_T_UCX);
    ck_assert_str_eq(got.host.boot_id, BOOT);
    ck_assert_str_eq(got.host.netns, NETNS);
    ck_assert_int_eq(got.host.pid, 1234);
    ck_assert_int_eq(got.policy, TFP_UP_POLICY_AUTO);
    free(json);

    req.policy = TFP_UP_POLICY_UCX;
    req.host.pid = TFP_UP_MAX_PID;
    ck_assert_int_eq(tfp_up_req_build(&req, &json, NULL, &err), TFP_OK);
    ck_assert_int_eq(tfp_up_req_parse(json, strlen(json), &got, &err), TFP_OK);
    ck_assert_int_eq(got.policy, TFP_UP_POLICY_UCX);
    ck_assert_int_eq(got.host.pid, TFP_UP_MAX_PID);
    free(json);

    /* whitespace anywhere JSON allows it, members in any order */
    {
        const char *text = " \n{ \"policy\" : \"ucx\" ,\"host\":{\"pid\":7,\"netns\":\"net:[1]\","
                           "\"boot_id\":\"" BOOT "\"},\r\n\t\"transports\" : [ \"ucx\" ] }\n ";

        ck_assert_int_eq(tfp_up_req_parse(text, strlen(text), &got, &err), TFP_OK);
        ck_assert_int_eq(got.host.pid, 7);
        ck_assert_str_eq(got.host.netns, "net:[1]");
    }
}
END_TEST

START_TEST(up_req_random_roundtrip)
{
    rnd_state = UINT64_C(0xB7E151628AED2A6B);
    for (int i = 0; i < 2000; i++) {
        tfp_up_req_t req, got;
        tfp_err_t err;
        char *json;
        size_t len;

        memset(&req, 0, sizeof req);
        req.transports = TFP_UP_T_UCX;
        snprintf(req.host.boot_id, sizeof req.host.boot_id, "%08x-%04x-%04x-%04x-%012llx",
                 (unsigned)rnd(), (unsigned)(rnd() & 0xffff), (unsigned)(rnd() & 0xffff),
                 (unsigned)(rnd() & 0xffff),
                 (unsigned long long)(rnd() & UINT64_C(0xffffffffffff)));
        snprintf(req.host.netns, sizeof req.host.netns, "net:[%llu]",
                 (unsigned long long)(rnd() >> rnd_below(64)));
        req.host.pid = 1 + (int64_t)rnd_below(TFP_UP_MAX_PID);
        req.policy = (rnd() & 1) ? TFP_UP_POLICY_UCX : TFP_UP_POLICY_AUTO;
        ck_assert_int_eq(tfp_up_req_build(&req, &json, &len, &err), TFP_OK);
        ck_assert_int_eq(tfp_up_req_parse(json, len, &got, &err), TFP_OK);
        ck_assert_uint_eq(got.transports, req.transports);
        ck_assert_str_eq(got.host.boot_id, req.host.boot_id);
        ck_assert_str_eq(got.host.netns, req.host.netns);
        ck_assert_int_eq(got.host.pid, req.host.pid);
        ck_assert_int_eq(got.policy, req.policy);
        free(json);
    }
}
END_TEST

START_TEST(up_req_build_refuses)
{
    tfp_up_req_t req;
    char *json = (char *)"untouched";
    tfp_err_t err;

    memset(&req, 0, sizeof req);
    req.transports = TFP_UP_T_UCX;
    req.host = host_of(BOOT, NETNS, 1234);
    ck_assert_int_eq(tfp_up_req_build(NULL, &json, NULL, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_up_req_build(&req, NULL, NULL, &err), TFP_EINVAL);
    req.transports = 0;
    ck_assert_int_eq(tfp_up_req_build(&req, &json, NULL, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "transports 0x0 is empty or has unknown bits"));
    req.transports = TFP_UP_T_UCX | 0x4;
    ck_assert_int_eq(tfp_up_req_build(&req, &json, NULL, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "transports 0x5"));
    req.transports = TFP_UP_T_UCX;
    req.policy = (tfp_up_policy_t)7;
    ck_assert_int_eq(tfp_up_req_build(&req, &json, NULL, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown policy 7"));
    req.policy = TFP_UP_POLICY_AUTO;
    req.host.pid = -1;
    ck_assert_int_eq(tfp_up_req_build(&req, &json, NULL, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "pid -1 is not in"));
    req.host = host_of("x", NETNS, 1);
    ck_assert_int_eq(tfp_up_req_build(&req, &json, NULL, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "boot_id"));
    ck_assert_str_eq(json, "untouched");
}
END_TEST

#define HOST_JSON "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":1234}"
#define REQ(t, h, p) "{\"transports\":" t ",\"host\":" h ",\"policy\":" p "}"

static const struct {
    const char *body;
    tfp_status_t want;
    const char *substr;
} REQ_BAD[] = {
    { "", TFP_EPROTO, "upgrade request: invalid JSON at byte 0: unexpected end of text" },
    { "{", TFP_EPROTO, "upgrade request: invalid JSON" },
    { "[]", TFP_EPROTO, "upgrade request: not a JSON object" },
    { "\"ucx\"", TFP_EPROTO, "not a JSON object" },
    { REQ_GOLDEN " x", TFP_EPROTO, "text after the JSON value at byte" },
    { REQ_GOLDEN "{}", TFP_EPROTO, "text after the JSON value" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON ",\"policy\":\"auto\",\"extra\":1}",
      TFP_EPROTO, "upgrade request: unknown key \"extra\"" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON ",\"policy\":\"auto\",\"\\u0001k\":1}",
      TFP_EPROTO, "unknown key \"?k\"" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON ",\"policy\":\"auto\",\"policy\":\"ucx\"}",
      TFP_EPROTO, "upgrade request: duplicate key \"policy\"" },
    { "{\"host\":" HOST_JSON ",\"policy\":\"auto\"}", TFP_EPROTO,
      "upgrade request: missing \"transports\"" },
    { "{\"transports\":[\"ucx\"],\"policy\":\"auto\"}", TFP_EPROTO, "missing \"host\"" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON "}", TFP_EPROTO, "missing \"policy\"" },
    { REQ("\"ucx\"", HOST_JSON, "\"auto\""), TFP_EPROTO, "\"transports\" is not an array" },
    { REQ("{}", HOST_JSON, "\"auto\""), TFP_EPROTO, "\"transports\" is not an array" },
    { REQ("[]", HOST_JSON, "\"auto\""), TFP_EPROTO, "\"transports\" is empty" },
    { REQ("[1]", HOST_JSON, "\"auto\""), TFP_EPROTO, "transports[0] is not a string" },
    { REQ("[\"ucx\",null]", HOST_JSON, "\"auto\""), TFP_EPROTO, "transports[1] is not a string" },
    { REQ("[\"rdma\"]", HOST_JSON, "\"auto\""), TFP_EPROTO,
      "transports[0] \"rdma\" is not a known transport (ucx, shm)" },
    { REQ("[\"UCX\"]", HOST_JSON, "\"auto\""), TFP_EPROTO, "is not a known transport" },
    { REQ("[\"ucx\",\"ucx\"]", HOST_JSON, "\"auto\""), TFP_EPROTO,
      "transports[1] \"ucx\" is listed twice" },
    { REQ("[\"ucx\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"]", HOST_JSON, "\"auto\""),
      TFP_EPROTO, "\"transports\" lists more than 8 names" },
    { REQ("[1,2,3,4,5,6,7,8,9]", HOST_JSON, "\"auto\""), TFP_EPROTO, "lists more than 8" },
    { REQ("[\"ucx\",[],[],[],[],[],[],[]]", HOST_JSON, "\"auto\""), TFP_EPROTO,
      "transports[1] is not a string" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON ",\"policy\":\"auto\",\"k"
      "0123456789012345678901234567890123456789012345678901234567890123456789\":1}",
      TFP_EPROTO, "unknown key \"k012345678901234567890123456789012345678901234567890...\"" },
    { REQ("[\"ucx\"]", "[]", "\"auto\""), TFP_EPROTO, "\"host\" is not an object" },
    { REQ("[\"ucx\"]", "null", "\"auto\""), TFP_EPROTO, "\"host\" is not an object" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\"}", "\"auto\""),
      TFP_EPROTO, "upgrade request: host: missing \"pid\"" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":1,\"uid\":0}",
          "\"auto\""), TFP_EPROTO, "upgrade request: host: unknown key \"uid\"" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":1,\"pid\":2}",
          "\"auto\""), TFP_EPROTO, "host: duplicate key \"pid\"" },
    { REQ("[\"ucx\"]", "{\"boot_id\":1,\"netns\":\"" NETNS "\",\"pid\":1}", "\"auto\""),
      TFP_EPROTO, "host.boot_id is not a 36-character lowercase uuid" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "0\",\"netns\":\"" NETNS "\",\"pid\":1}",
          "\"auto\""), TFP_EPROTO, "host.boot_id is not" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"07424f66-80cc-4684-b9fd-2ab7faab3cd\",\"netns\":\""
          NETNS "\",\"pid\":1}", "\"auto\""), TFP_EPROTO, "host.boot_id is not" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"net:[1] \",\"pid\":1}", "\"auto\""),
      TFP_EPROTO, "host.netns is not \"net:[N]\"" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"net:[1111111111111111111111111111"
          "11111111111]\",\"pid\":1}", "\"auto\""), TFP_EPROTO, "host.netns is not" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":[],\"pid\":1}", "\"auto\""),
      TFP_EPROTO, "host.netns is not" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":0}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer in 1..2147483647" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":-5}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":1.5}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":2147483648}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":1e300}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":\"12\"}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer" },
    { REQ("[\"ucx\"]", "{\"boot_id\":\"" BOOT "\",\"netns\":\"" NETNS "\",\"pid\":true}",
          "\"auto\""), TFP_EPROTO, "host.pid is not an integer" },
    { REQ("[\"ucx\"]", HOST_JSON, "\"http\""), TFP_EPROTO,
      "\"policy\" is not \"auto\" or \"ucx\"" },
    { REQ("[\"ucx\"]", HOST_JSON, "\"AUTO\""), TFP_EPROTO, "\"policy\" is not" },
    { REQ("[\"ucx\"]", HOST_JSON, "1"), TFP_EPROTO, "\"policy\" is not" },
    { REQ("[\"ucx\"]", HOST_JSON, "null"), TFP_EPROTO, "\"policy\" is not" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON ",\"policy\":\"au\\u0000to\"}",
      TFP_EPROTO, "\\u0000 is not allowed" },
    { "{\"transports\":[\"ucx\"],\"host\":" HOST_JSON ",\"policy\":\"auto\xff\"}",
      TFP_EPROTO, "not valid UTF-8" },
    { "{\"transports\":[\"ucx\"],\"transports\":[\"ucx\"],\"host\":" HOST_JSON
      ",\"policy\":\"auto\"}", TFP_EPROTO, "duplicate key \"transports\"" },
};

START_TEST(up_req_parse_refuses)
{
    tfp_up_req_t out, canary;
    tfp_err_t err = { TFP_OK, "" };
    tfp_status_t st;

    memset(&out, 0x77, sizeof out);
    canary = out;
    st = tfp_up_req_parse(REQ_BAD[_i].body, strlen(REQ_BAD[_i].body), &out, &err);
    ck_assert_msg(st == REQ_BAD[_i].want, "case %d: got %s (%s)", _i, tfp_status_name(st),
                  err.msg);
    ck_assert_int_eq(err.code, st);
    ck_assert_msg(strstr(err.msg, REQ_BAD[_i].substr) != NULL, "case %d: '%s' lacks '%s'", _i,
                  err.msg, REQ_BAD[_i].substr);
    ck_assert_msg(strncmp(err.msg, "upgrade request", 15) == 0, "case %d: '%s'", _i, err.msg);
    ck_assert_mem_eq(&out, &canary, sizeof out);
}
END_TEST

START_TEST(up_req_parse_oversize)
{
    size_t n = TFP_UP_MAX_REQ_JSON + 1, glen = strlen(REQ_GOLDEN);
    char *big = malloc(n + 1);
    tfp_up_req_t out;
    tfp_err_t err;

    ck_assert_ptr_nonnull(big);
    /* the golden request padded with trailing whitespace: valid JSON, one byte too long */
    memcpy(big, REQ_GOLDEN, glen);
    memset(big + glen, ' ', n - glen);
    big[n] = '\0';
    ck_assert_int_eq(tfp_up_req_parse(big, n, &out, &err), TFP_ETOOBIG);
    ck_assert_str_eq(err.msg, "upgrade request: body of 4097 bytes is over the 4096-byte limit");
    ck_assert_int_eq(tfp_up_req_parse(big, n - 1, &out, &err), TFP_OK);
    free(big);
    ck_assert_int_eq(tfp_up_req_parse(NULL, 0, &out, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_up_req_parse(REQ_GOLDEN, glen, NULL, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_up_req_parse(REQ_GOLDEN, glen, &out, NULL), TFP_OK);
    ck_assert_int_eq(tfp_up_req_parse("{}", 2, &out, NULL), TFP_EPROTO);
    ck_assert_int_eq(tfp_up_req_parse("{", 1, &out, NULL), TFP_EPROTO);
}
END_TEST

/* ---- upgrade response ---------------------------------------------------------------- */

static void ucx_resp(tfp_up_resp_t *r, uint8_t *addr, size_t n)
{
    memset(r, 0, sizeof *r);
    r->upgraded = 1;
    strcpy(r->token, TOKEN);
    r->expires_ms = 10000;
    r->worker_address = addr;
    r->worker_address_len = n;
    r->same_host = 1;
    r->server_pid = 4321;
}

START_TEST(up_resp_golden_roundtrip)
{
    uint8_t addr[] = { 'f', 'o', 'o', 'b', 'a' };
    tfp_up_resp_t r, got;
    char *json;
    size_t len;
    tfp_err_t err;

    ucx_resp(&r, addr, sizeof addr);
    ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_OK);
    ck_assert_str_eq(json, "{\"transport\":\"ucx\",\"token\":\"" TOKEN "\",\"expires_ms\":10000,"
                           "\"worker_address\":\"Zm9vYmE=\",\"same_host\":true,"
                           "\"server_pid\":4321}");
    ck_assert_int_eq(tfp_up_resp_parse(json, len, &got, &err), TFP_OK);
    ck_assert_int_eq(got.upgraded, 1);
    ck_assert_str_eq(got.token, TOKEN);
    ck_assert_uint_eq(got.expires_ms, 10000);
    ck_assert_uint_eq(got.worker_address_len, sizeof addr);
    ck_assert_mem_eq(got.worker_address, addr, sizeof addr);
    ck_assert_int_eq(got.same_host, 1);
    ck_assert_int_eq(got.server_pid, 4321);
    ck_assert_str_eq(got.reason, "");
    tfp_up_resp_clear(&got);
    ck_assert_ptr_null(got.worker_address);
    free(json);

    memset(&r, 0, sizeof r);
    strcpy(r.reason, "UCX disabled by configuration \xe2\x80\x94 \"quoted\" \\ \x01");
    ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_OK);
    ck_assert_str_eq(json, "{\"transport\":\"http\",\"reason\":\"UCX disabled by configuration "
                           "\xe2\x80\x94 \\\"quoted\\\" \\\\ \\u0001\"}");
    memset(&got, 0x55, sizeof got);
    ck_assert_int_eq(tfp_up_resp_parse(json, len, &got, &err), TFP_OK);
    ck_assert_int_eq(got.upgraded, 0);
    ck_assert_str_eq(got.reason, r.reason);
    ck_assert_ptr_null(got.worker_address);
    ck_assert_str_eq(got.token, "");
    ck_assert_int_eq(got.server_pid, 0);
    tfp_up_resp_clear(&got);
    tfp_up_resp_clear(NULL);
    free(json);

    /* a maximal worker address, and same_host false */
    {
        uint8_t *big = malloc(TFP_UP_MAX_ADDR);

        ck_assert_ptr_nonnull(big);
        for (size_t i = 0; i < TFP_UP_MAX_ADDR; i++)
            big[i] = (uint8_t)(i * 7 + (i >> 8));
        ucx_resp(&r, big, TFP_UP_MAX_ADDR);
        r.same_host = 0;
        r.expires_ms = TFP_UP_MAX_EXPIRES_MS;
        ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_OK);
        ck_assert_uint_le(len, TFP_UP_MAX_RESP_JSON);
        ck_assert_int_eq(tfp_up_resp_parse(json, len, &got, &err), TFP_OK);
        ck_assert_uint_eq(got.worker_address_len, TFP_UP_MAX_ADDR);
        ck_assert_mem_eq(got.worker_address, big, TFP_UP_MAX_ADDR);
        ck_assert_int_eq(got.same_host, 0);
        ck_assert_uint_eq(got.expires_ms, TFP_UP_MAX_EXPIRES_MS);
        tfp_up_resp_clear(&got);
        free(json);
        free(big);
    }
}
END_TEST

/* The optional shm members (same-host shared memory): round trip, and what is refused. */
START_TEST(up_resp_shm)
{
    uint8_t addr[] = { 1, 2, 3 };
    tfp_up_resp_t r, got;
    char *json;
    size_t len;
    tfp_err_t err;

    ucx_resp(&r, addr, sizeof addr);
    strcpy(r.shm_socket, "tfetch-shm.12.00ff");
    strcpy(r.shm_token, "fedcba9876543210fedcba9876543210");
    ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_OK);
    ck_assert_ptr_nonnull(strstr(json, ",\"shm_socket\":\"tfetch-shm.12.00ff\",\"shm_token\":"));
    ck_assert_int_eq(tfp_up_resp_parse(json, len, &got, &err), TFP_OK);
    ck_assert_str_eq(got.shm_socket, r.shm_socket);
    ck_assert_str_eq(got.shm_token, r.shm_token);
    tfp_up_resp_clear(&got);
    free(json);
    /* Absent: both empty. */
    ucx_resp(&r, addr, sizeof addr);
    ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_OK);
    ck_assert_ptr_null(strstr(json, "shm"));
    ck_assert_int_eq(tfp_up_resp_parse(json, len, &got, &err), TFP_OK);
    ck_assert_str_eq(got.shm_socket, "");
    tfp_up_resp_clear(&got);
    free(json);
    /* The builder refuses a bad name, a lone member, another host. */
    strcpy(r.shm_socket, "a/b");
    strcpy(r.shm_token, TOKEN);
    ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_EINVAL);
    strcpy(r.shm_socket, "ok");
    r.shm_token[0] = '\0';
    ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_EINVAL);
    strcpy(r.shm_token, TOKEN);
    r.same_host = 0;
    ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "another host"));
    /* A socket file reaches another network namespace of the same kernel. */
    strcpy(r.shm_socket, "/run/tfetchd/shm.sock");
    ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_OK);
    ck_assert_int_eq(tfp_up_resp_parse(json, len, &got, &err), TFP_OK);
    ck_assert_int_eq(got.same_host, 0);
    ck_assert_str_eq(got.shm_socket, "/run/tfetchd/shm.sock");
    tfp_up_resp_clear(&got);
    free(json);
    /* Same kernel: the boot ids alone. */
    tfp_up_host_t h1 = {0}, h2 = {0};
    strcpy(h1.boot_id, "01234567-89ab-cdef-0123-456789abcdef");
    strcpy(h1.netns, "net:[4026531840]");
    h2 = h1;
    strcpy(h2.netns, "net:[4026532000]");
    ck_assert(tfp_up_host_same_kernel(&h1, &h2) && !tfp_up_host_same(&h1, &h2));
    h2.boot_id[0] = '1';
    ck_assert(!tfp_up_host_same_kernel(&h1, &h2));
    /* The parser the same, on hostile text. */
    static const char *const bad[] = {
        "{\"transport\":\"ucx\",\"token\":\"" TOKEN "\",\"expires_ms\":1,\"worker_address\":"
        "\"AQID\",\"same_host\":true,\"server_pid\":1,\"shm_socket\":\"s\"}",
        "{\"transport\":\"ucx\",\"token\":\"" TOKEN "\",\"expires_ms\":1,\"worker_address\":"
        "\"AQID\",\"same_host\":true,\"server_pid\":1,\"shm_socket\":\"s s\",\"shm_token\":\""
        TOKEN "\"}",
        "{\"transport\":\"ucx\",\"token\":\"" TOKEN "\",\"expires_ms\":1,\"worker_address\":"
        "\"AQID\",\"same_host\":false,\"server_pid\":1,\"shm_socket\":\"s\",\"shm_token\":\""
        TOKEN "\"}",
        "{\"transport\":\"ucx\",\"token\":\"" TOKEN "\",\"expires_ms\":1,\"worker_address\":"
        "\"AQID\",\"same_host\":true,\"server_pid\":1,\"shm_socket\":\"s\",\"shm_token\":\"xyz\"}",
        "{\"transport\":\"ucx\",\"token\":\"" TOKEN "\",\"expires_ms\":1,\"worker_address\":"
        "\"AQID\",\"same_host\":true,\"server_pid\":1,\"shm_socket\":7,\"shm_token\":\""
        TOKEN "\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&got, 0x55, sizeof got);
        ck_assert_msg(tfp_up_resp_parse(bad[i], strlen(bad[i]), &got, &err) == TFP_EPROTO,
                      "case %zu accepted", i);
        ck_assert_msg(strstr(err.msg, "shm") != NULL, "case %zu: %s", i, err.msg);
    }
    /* A request may list shm beside ucx. */
    tfp_up_req_t q;
    const char *req = "{\"transports\":[\"ucx\",\"shm\"],\"host\":{\"boot_id\":\"" BOOT
                      "\",\"netns\":\"" NETNS "\",\"pid\":5},\"policy\":\"auto\"}";
    ck_assert_int_eq(tfp_up_req_parse(req, strlen(req), &q, &err), TFP_OK);
    ck_assert_uint_eq(q.transports, TFP_UP_T_UCX | TFP_UP_T_SHM);
}
END_TEST

START_TEST(up_resp_random_roundtrip)
{
    uint8_t addr[700];

    rnd_state = UINT64_C(0x3C6EF372FE94F82B);
    for (int i = 0; i < 2000; i++) {
        tfp_up_resp_t r, got;
        tfp_err_t err;
        char *json;
        size_t len;

        if (rnd() & 1) {
            size_t n = 1 + rnd_below(sizeof addr);

            for (size_t k = 0; k < n; k++)
                addr[k] = (uint8_t)rnd();
            ucx_resp(&r, addr, n);
            for (int k = 0; k < TFP_UP_TOKEN_LEN; k++)
                r.token[k] = "0123456789abcdef"[rnd_below(16)];
            r.expires_ms = 1 + rnd_below(TFP_UP_MAX_EXPIRES_MS);
            r.same_host = (int)(rnd() & 1);
            r.server_pid = 1 + (int64_t)rnd_below(TFP_UP_MAX_PID);
        } else {
            memset(&r, 0, sizeof r);
            do
                rnd_utf8(r.reason, TFP_UP_MAX_REASON);
            while (r.reason[0] == '\0');
        }
        ck_assert_int_eq(tfp_up_resp_build(&r, &json, &len, &err), TFP_OK);
        ck_assert_msg(tfp_up_resp_parse(json, len, &got, &err) == TFP_OK, "%s: %s", json,
                      err.msg);
        ck_assert_int_eq(got.upgraded, r.upgraded);
        if (r.upgraded) {
            ck_assert_str_eq(got.token, r.token);
            ck_assert_uint_eq(got.expires_ms, r.expires_ms);
            ck_assert_uint_eq(got.worker_address_len, r.worker_address_len);
            ck_assert_mem_eq(got.worker_address, r.worker_address, r.worker_address_len);
            ck_assert_int_eq(got.same_host, r.same_host);
            ck_assert_int_eq(got.server_pid, r.server_pid);
        } else {
            ck_assert_str_eq(got.reason, r.reason);
        }
        tfp_up_resp_clear(&got);
        free(json);
    }
}
END_TEST

START_TEST(up_resp_build_refuses)
{
    static const struct {
        int field;
        const char *want;
    } bad[] = {
        { 0, "token is not 32 lowercase hex characters" },
        { 1, "token is not 32" },
        { 2, "expires_ms 0 is not in 1..600000" },
        { 3, "expires_ms 600001 is not in 1..600000" },
        { 4, "worker address of 0 bytes is not 1..65536" },
        { 5, "worker address of 65537 bytes is not 1..65536" },
        { 6, "worker address of 3 bytes" },
        { 7, "same_host 2 is not 0 or 1" },
        { 8, "server_pid 0 is not in 1..2147483647" },
        { 9, "server_pid 2147483648 is not in" },
        { 10, "upgraded 2 is not 0 or 1" },
        { 11, "reason is not 1..512 bytes of UTF-8" },
        { 12, "reason is not 1..512 bytes of UTF-8" },
        { 13, "reason is not 1..512 bytes of UTF-8" },
        { 14, "token is not 32" },
    };
    uint8_t addr[3] = { 1, 2, 3 };
    tfp_up_resp_t r;
    char *json = (char *)"untouched";
    tfp_err_t err;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ucx_resp(&r, addr, sizeof addr);
        switch (bad[i].field) {
        case 0: r.token[0] = 'A'; break;
        case 1: r.token[31] = '\0'; break;
        case 2: r.expires_ms = 0; break;
        case 3: r.expires_ms = TFP_UP_MAX_EXPIRES_MS + 1; break;
        case 4: r.worker_address_len = 0; break;
        case 5: r.worker_address_len = TFP_UP_MAX_ADDR + 1; break;
        case 6: r.worker_address = NULL; break;
        case 7: r.same_host = 2; break;
        case 8: r.server_pid = 0; break;
        case 9: r.server_pid = INT64_C(2147483648); break;
        case 10: r.upgraded = 2; break;
        case 11: r.upgraded = 0; break;                     /* empty reason */
        case 12: r.upgraded = 0; strcpy(r.reason, "bad \xfe"); break;
        case 13: r.upgraded = 0; memset(r.reason, 'r', sizeof r.reason); break;
        case 14: memset(r.token, 'a', sizeof r.token); break;
        }
        ck_assert_int_eq(tfp_up_resp_build(&r, &json, NULL, &err), TFP_EINVAL);
        ck_assert_msg(strstr(err.msg, bad[i].want) != NULL, "case %zu: '%s' lacks '%s'", i,
                      err.msg, bad[i].want);
    }
    ck_assert_str_eq(json, "untouched");
    ck_assert_int_eq(tfp_up_resp_build(NULL, &json, NULL, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_up_resp_build(&r, NULL, NULL, &err), TFP_EINVAL);
    /* a 512-byte reason is fine */
    memset(&r, 0, sizeof r);
    fill(r.reason, 'r', TFP_UP_MAX_REASON);
    ck_assert_int_eq(tfp_up_resp_build(&r, &json, NULL, &err), TFP_OK);
    free(json);
}
END_TEST

#define UCX_RESP(tok, exp, addr, same, pid)                                               \
    "{\"transport\":\"ucx\",\"token\":" tok ",\"expires_ms\":" exp ",\"worker_address\":" \
    addr ",\"same_host\":" same ",\"server_pid\":" pid "}"
#define GOOD_TOK "\"" TOKEN "\""

static const struct {
    const char *body;
    tfp_status_t want;
    const char *substr;
} RESP_BAD[] = {
    { "", TFP_EPROTO, "upgrade response: invalid JSON" },
    { "[{}]", TFP_EPROTO, "upgrade response: not a JSON object" },
    { "{}", TFP_EPROTO, "upgrade response: missing \"transport\"" },
    { "{\"reason\":\"x\"}", TFP_EPROTO, "missing \"transport\"" },
    { "{\"transport\":\"tcp\"}", TFP_EPROTO, "\"transport\" is not \"ucx\" or \"http\"" },
    { "{\"transport\":1}", TFP_EPROTO, "\"transport\" is not \"ucx\" or \"http\"" },
    { "{\"transport\":\"HTTP\",\"reason\":\"x\"}", TFP_EPROTO, "\"transport\" is not" },
    { "{\"transport\":\"http\"}", TFP_EPROTO, "upgrade response: missing \"reason\"" },
    { "{\"transport\":\"http\",\"reason\":\"\"}", TFP_EPROTO,
      "\"reason\" is not 1..512 bytes of UTF-8" },
    { "{\"transport\":\"http\",\"reason\":7}", TFP_EPROTO, "\"reason\" is not 1..512" },
    { "{\"transport\":\"http\",\"reason\":\"x\",\"token\":" GOOD_TOK "}", TFP_EPROTO,
      "unknown key \"token\"" },
    { "{\"transport\":\"http\",\"reason\":\"x\",\"reason\":\"y\"}", TFP_EPROTO,
      "duplicate key \"reason\"" },
    { "{\"transport\":\"http\",\"transport\":\"ucx\",\"reason\":\"x\"}", TFP_EPROTO,
      "duplicate key \"transport\"" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "true", "1") " 1", TFP_EPROTO,
      "text after the JSON value" },
    { "{\"transport\":\"ucx\",\"token\":" GOOD_TOK ",\"expires_ms\":10000,\"worker_address\":"
      "\"AQID\",\"same_host\":true}", TFP_EPROTO, "missing \"server_pid\"" },
    { "{\"transport\":\"ucx\",\"token\":" GOOD_TOK ",\"expires_ms\":10000,\"worker_address\":"
      "\"AQID\",\"same_host\":true,\"server_pid\":1,\"reason\":\"x\"}", TFP_EPROTO,
      "unknown key \"reason\"" },
    { "{\"transport\":\"ucx\",\"token\":" GOOD_TOK ",\"expires_ms\":10000,\"worker_address\":"
      "\"AQID\",\"same_host\":true,\"server_pid\":1,\"listener\":\"x\"}", TFP_EPROTO,
      "unknown key \"listener\"" },
    { UCX_RESP("\"0123456789ABCDEF0123456789abcdef\"", "10000", "\"AQID\"", "true", "1"),
      TFP_EPROTO, "\"token\" is not 32 lowercase hex characters" },
    { UCX_RESP("\"" TOKEN "0\"", "10000", "\"AQID\"", "true", "1"), TFP_EPROTO,
      "\"token\" is not 32" },
    { UCX_RESP("\"abc\"", "10000", "\"AQID\"", "true", "1"), TFP_EPROTO, "\"token\" is not 32" },
    { UCX_RESP("null", "10000", "\"AQID\"", "true", "1"), TFP_EPROTO, "\"token\" is not 32" },
    { UCX_RESP(GOOD_TOK, "0", "\"AQID\"", "true", "1"), TFP_EPROTO,
      "\"expires_ms\" is not an integer in 1..600000" },
    { UCX_RESP(GOOD_TOK, "600001", "\"AQID\"", "true", "1"), TFP_EPROTO, "\"expires_ms\" is not" },
    { UCX_RESP(GOOD_TOK, "10.5", "\"AQID\"", "true", "1"), TFP_EPROTO, "\"expires_ms\" is not" },
    { UCX_RESP(GOOD_TOK, "\"10000\"", "\"AQID\"", "true", "1"), TFP_EPROTO,
      "\"expires_ms\" is not" },
    { UCX_RESP(GOOD_TOK, "-1", "\"AQID\"", "true", "1"), TFP_EPROTO, "\"expires_ms\" is not" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "1", "1"), TFP_EPROTO,
      "\"same_host\" is not true or false" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "\"true\"", "1"), TFP_EPROTO,
      "\"same_host\" is not" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "null", "1"), TFP_EPROTO, "\"same_host\" is not" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "false", "0"), TFP_EPROTO,
      "\"server_pid\" is not an integer in 1..2147483647" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "false", "2147483648"), TFP_EPROTO,
      "\"server_pid\" is not" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQID\"", "false", "1E2"), TFP_OK, "" },
    { UCX_RESP(GOOD_TOK, "10000", "1", "true", "1"), TFP_EPROTO,
      "\"worker_address\" is not a string" },
    { UCX_RESP(GOOD_TOK, "10000", "\"\"", "true", "1"), TFP_EPROTO,
      "\"worker_address\" is empty" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQI\"", "true", "1"), TFP_EPROTO,
      "upgrade response: \"worker_address\": base64: length 3 is not a multiple of 4" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQ I\"", "true", "1"), TFP_EPROTO,
      "\"worker_address\": base64: invalid character at offset 2" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AQ==\\n\"", "true", "1"), TFP_EPROTO,
      "\"worker_address\": base64: length 5" },
    { UCX_RESP(GOOD_TOK, "10000", "\"AR==\"", "true", "1"), TFP_EPROTO,
      "\"worker_address\": base64: non-zero padding bits at offset 1" },
    { UCX_RESP(GOOD_TOK, "10000", "\"A-_B\"", "true", "1"), TFP_EPROTO,
      "base64: invalid character at offset 1" },
    /* the optional protocol range (proto/protover.h) */
    { "{\"transport\":\"http\",\"reason\":\"x\",\"protocol\":{\"min\":1,\"max\":2}}", TFP_OK, "" },
    { "{\"transport\":\"http\",\"reason\":\"x\",\"protocol\":[1,2]}", TFP_EPROTO,
      "\"protocol\" is not an object" },
    { "{\"transport\":\"http\",\"reason\":\"x\",\"protocol\":{\"min\":2,\"max\":1}}",
      TFP_EPROTO, "\"min\" and \"max\" are not versions 1..65535 with min <= max" },
    { "{\"transport\":\"http\",\"reason\":\"x\",\"protocol\":{\"min\":0,\"max\":1}}",
      TFP_EPROTO, "are not versions" },
    { "{\"transport\":\"http\",\"reason\":\"x\",\"protocol\":{\"min\":1,\"max\":65536}}",
      TFP_EPROTO, "are not versions" },
    { "{\"transport\":\"http\",\"reason\":\"x\",\"protocol\":{\"min\":1.5,\"max\":2}}",
      TFP_EPROTO, "are not versions" },
    { "{\"transport\":\"http\",\"reason\":\"x\",\"protocol\":{\"min\":1}}", TFP_EPROTO,
      "missing \"max\"" },
    { "{\"transport\":\"http\",\"reason\":\"x\",\"protocol\":{\"min\":1,\"max\":2,"
      "\"x\":3}}", TFP_EPROTO, "unknown key \"x\"" },
    { "{\"transport\":\"ucx\",\"token\":" GOOD_TOK ",\"expires_ms\":10000,\"worker_address\":"
      "\"AQID\",\"same_host\":true,\"server_pid\":1,\"protocol\":{\"min\":\"1\",\"max\":2}}",
      TFP_EPROTO, "are not versions" },
};

START_TEST(up_resp_parse_refuses)
{
    tfp_up_resp_t out, canary;
    tfp_err_t err = { TFP_OK, "" };
    tfp_status_t st;

    memset(&out, 0x66, sizeof out);
    canary = out;
    st = tfp_up_resp_parse(RESP_BAD[_i].body, strlen(RESP_BAD[_i].body), &out, &err);
    ck_assert_msg(st == RESP_BAD[_i].want, "case %d: got %s (%s)", _i, tfp_status_name(st),
                  err.msg);
    if (st == TFP_OK) {
        tfp_up_resp_clear(&out);
        return;
    }
    ck_assert_int_eq(err.code, st);
    ck_assert_msg(strstr(err.msg, RESP_BAD[_i].substr) != NULL, "case %d: '%s' lacks '%s'", _i,
                  err.msg, RESP_BAD[_i].substr);
    ck_assert_msg(strncmp(err.msg, "upgrade response", 16) == 0, "case %d: '%s'", _i, err.msg);
    ck_assert_mem_eq(&out, &canary, sizeof out);
}
END_TEST

/* The protocol range: its text, the check and its message, the planted minimum, and the
 * upgrade answer's optional "protocol" member (absent from a version-1 server's). */
START_TEST(up_protocol)
{
    tfp_proto_range_t r = {0, 0}, ours = tfp_proto_ours();
    tfp_err_t err;
    char buf[TFP_PROTO_MAX_TEXT + 1];
    unsigned common = 0;

    ck_assert_int_eq(tfp_proto_parse("1-65535", 7, &r, &err), TFP_OK);
    ck_assert_uint_eq(r.min, 1);
    ck_assert_uint_eq(r.max, 65535);
    ck_assert_int_eq(tfp_proto_format(r, buf, sizeof buf, &err), TFP_OK);
    ck_assert_str_eq(buf, "1-65535");
    ck_assert_int_eq(tfp_proto_parse("7", 1, &r, &err), TFP_OK);
    ck_assert_uint_eq(r.min, 7);
    ck_assert_uint_eq(r.max, 7);
    ck_assert_int_eq(tfp_proto_parse("1-2", 2, &r, &err), TFP_EPROTO);    /* "1-": n counts */
    ck_assert_int_eq(tfp_proto_parse(NULL, 0, &r, &err), TFP_EPROTO);
    ck_assert_int_eq(tfp_proto_format((tfp_proto_range_t){3, 2}, buf, sizeof buf, &err),
                     TFP_EINVAL);
    ck_assert_int_eq(tfp_proto_format(ours, buf, 4, &err), TFP_EINVAL);
    ck_assert_uint_eq(ours.min, TFP_PROTO_MIN);
    ck_assert_uint_eq(ours.max, TFP_PROTO_MAX);
    ck_assert_uint_le(ours.min, 1);         /* N-1: this release still speaks 0.1.0's */

    ck_assert_int_eq(tfp_proto_check(ours, tfp_proto_unnamed(), "client", "server", "GET x",
                                     &common, &err), TFP_OK);
    ck_assert_uint_eq(common, 1);
    ck_assert_int_eq(tfp_proto_check((tfp_proto_range_t){2, 5}, (tfp_proto_range_t){4, 9}, "a",
                                     "b", "f", &common, &err), TFP_OK);
    ck_assert_uint_eq(common, 5);
    ck_assert_int_eq(tfp_proto_check((tfp_proto_range_t){2, 2}, tfp_proto_unnamed(), "client",
                                     "server", "PUT w", NULL, &err), TFP_EVERSION);
    ck_assert_int_eq(err.code, TFP_EVERSION);
    ck_assert_str_eq(err.msg, "protocol version mismatch on PUT w: this client speaks 2..2, "
                              "the server 1..1; the server is too old and must be upgraded");
    ck_assert_int_eq(tfp_proto_check((tfp_proto_range_t){0, 0}, ours, "a", "b", NULL, NULL,
                                     &err), TFP_EVERSION);

    r = ours;
    ck_assert_int_eq(tfp_proto_raise_min(&r, "2", &err), TFP_OK);
    ck_assert_uint_eq(r.min, 2);
    ck_assert_uint_eq(r.max, TFP_PROTO_MAX);
    static const char *const bad_min[] = {"0", "3", "1-2", "", "x", "02"};
    for (size_t i = 0; i < sizeof bad_min / sizeof bad_min[0]; i++) {
        r = ours;
        ck_assert_int_eq(tfp_proto_raise_min(&r, bad_min[i], &err), TFP_EINVAL);
        ck_assert_uint_eq(r.min, ours.min);
        ck_assert_ptr_nonnull(strstr(err.msg, "TFETCH_PROTOCOL_MIN"));
    }

    /* the answer: named when set, round trip; absent, {0, 0} */
    uint8_t addr[] = { 1, 2, 3 };
    tfp_up_resp_t resp, got;
    char *json;
    size_t len;
    ucx_resp(&resp, addr, sizeof addr);
    resp.protocol = (tfp_proto_range_t){1, 2};
    ck_assert_int_eq(tfp_up_resp_build(&resp, &json, &len, &err), TFP_OK);
    ck_assert_ptr_nonnull(strstr(json, ",\"protocol\":{\"min\":1,\"max\":2}}"));
    ck_assert_int_eq(tfp_up_resp_parse(json, len, &got, &err), TFP_OK);
    ck_assert_uint_eq(got.protocol.min, 1);
    ck_assert_uint_eq(got.protocol.max, 2);
    tfp_up_resp_clear(&got);
    free(json);
    resp.protocol = (tfp_proto_range_t){3, 2};
    ck_assert_int_eq(tfp_up_resp_build(&resp, &json, &len, &err), TFP_EINVAL);
    resp.protocol = (tfp_proto_range_t){0, 0};
    ck_assert_int_eq(tfp_up_resp_build(&resp, &json, &len, &err), TFP_OK);
    ck_assert_ptr_null(strstr(json, "protocol"));
    ck_assert_int_eq(tfp_up_resp_parse(json, len, &got, &err), TFP_OK);
    ck_assert_uint_eq(got.protocol.min, 0);
    tfp_up_resp_clear(&got);
    free(json);
    memset(&resp, 0, sizeof resp);
    strcpy(resp.reason, "off");
    resp.protocol = (tfp_proto_range_t){1, 2};
    ck_assert_int_eq(tfp_up_resp_build(&resp, &json, &len, &err), TFP_OK);
    ck_assert_str_eq(json, "{\"transport\":\"http\",\"reason\":\"off\","
                           "\"protocol\":{\"min\":1,\"max\":2}}");
    ck_assert_int_eq(tfp_up_resp_parse(json, len, &got, &err), TFP_OK);
    ck_assert_uint_eq(got.protocol.max, 2);
    free(json);
}
END_TEST

START_TEST(up_resp_parse_oversize)
{
    tfp_up_resp_t r, out;
    tfp_err_t err;
    size_t alen = TFP_UP_MAX_ADDR + 3, len;
    uint8_t *addr = calloc(1, alen);
    char *b64, *body;

    ck_assert_ptr_nonnull(addr);
    /* an address one group past the bound: ETOOBIG from base64, named */
    b64 = tfp_up_b64_encode(addr, alen, NULL);
    ck_assert_ptr_nonnull(b64);
    body = malloc(strlen(b64) + 256);
    ck_assert_ptr_nonnull(body);
    len = (size_t)sprintf(body, UCX_RESP(GOOD_TOK, "1", "\"%s\"", "true", "1"), b64);
    ck_assert_int_eq(tfp_up_resp_parse(body, len, &out, &err), TFP_ETOOBIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"worker_address\": base64: decodes to 65539 bytes, "
                                          "more than 65536"));
    free(body);
    free(b64);
    /* a body over the byte bound */
    body = malloc(TFP_UP_MAX_RESP_JSON + 2);
    ck_assert_ptr_nonnull(body);
    ucx_resp(&r, addr, 1);
    {
        char *json;
        size_t jlen;

        ck_assert_int_eq(tfp_up_resp_build(&r, &json, &jlen, &err), TFP_OK);
        memcpy(body, json, jlen);
        memset(body + jlen, '\n', TFP_UP_MAX_RESP_JSON + 1 - jlen);
        free(json);
    }
    ck_assert_int_eq(tfp_up_resp_parse(body, TFP_UP_MAX_RESP_JSON + 1, &out, &err),
                     TFP_ETOOBIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "upgrade response: body of 131073 bytes is over"));
    ck_assert_int_eq(tfp_up_resp_parse(body, TFP_UP_MAX_RESP_JSON, &out, &err), TFP_OK);
    tfp_up_resp_clear(&out);
    free(body);
    free(addr);
    ck_assert_int_eq(tfp_up_resp_parse(NULL, 0, &out, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_up_resp_parse("{}", 2, NULL, &err), TFP_EINVAL);
}
END_TEST

/* ---- base64 -------------------------------------------------------------------------- */

START_TEST(b64_vectors)
{
    static const char *const plain[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
    static const char *const enc[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=",
                                       "Zm9vYmFy" };
    tfp_err_t err;

    for (int i = 0; i < 7; i++) {
        size_t n = strlen(plain[i]), olen = 99;
        char *e = tfp_up_b64_encode(plain[i], n, &olen);
        uint8_t *d = NULL;
        size_t dlen = 99;

        ck_assert_ptr_nonnull(e);
        ck_assert_str_eq(e, enc[i]);
        ck_assert_uint_eq(olen, strlen(enc[i]));
        ck_assert_uint_eq(tfp_up_b64_len(n), olen);
        ck_assert_int_eq(tfp_up_b64_decode(e, olen, 64, &d, &dlen, &err), TFP_OK);
        ck_assert_ptr_nonnull(d);
        ck_assert_uint_eq(dlen, n);
        if (n > 0)
            ck_assert_mem_eq(d, plain[i], n);
        free(d);
        free(e);
    }
    /* every byte value, and the whole alphabet */
    {
        uint8_t all[256], *d;
        size_t dlen;
        char *e;

        for (int i = 0; i < 256; i++)
            all[i] = (uint8_t)i;
        e = tfp_up_b64_encode(all, sizeof all, NULL);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(strncmp(e, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8g", 44), 0);
        ck_assert_int_eq(strcmp(e + strlen(e) - 8, "/P3+/w=="), 0);
        ck_assert_int_eq(tfp_up_b64_decode(e, strlen(e), 256, &d, &dlen, &err), TFP_OK);
        ck_assert_uint_eq(dlen, 256);
        ck_assert_mem_eq(d, all, 256);
        free(d);
        free(e);
        ck_assert_int_eq(tfp_up_b64_decode("+/+/", 4, 3, &d, &dlen, &err), TFP_OK);
        ck_assert_uint_eq(d[0], 0xfb);
        ck_assert_uint_eq(d[1], 0xff);
        ck_assert_uint_eq(d[2], 0xbf);
        free(d);
    }
    ck_assert_ptr_null(tfp_up_b64_encode(NULL, 1, NULL));
    {
        char *e = tfp_up_b64_encode(NULL, 0, NULL);

        ck_assert_ptr_nonnull(e);
        ck_assert_str_eq(e, "");
        free(e);
    }
}
END_TEST

START_TEST(b64_strict)
{
    static const struct {
        const char *s;
        tfp_status_t want;
        const char *substr;
    } bad[] = {
        { "Z", TFP_EPROTO, "length 1 is not a multiple of 4" },
        { "Zg", TFP_EPROTO, "length 2 is not a multiple of 4" },
        { "Zg=", TFP_EPROTO, "length 3" },
        { "Zm9vY", TFP_EPROTO, "length 5" },
        { "Zg==\n", TFP_EPROTO, "length 5" },
        { "Zm 9", TFP_EPROTO, "invalid character at offset 2" },
        { "Zm9v\nZm9v", TFP_EPROTO, "length 9" },
        { "Zm9v\r\nZm", TFP_EPROTO, "invalid character at offset 4" },
        { "Zm-_", TFP_EPROTO, "invalid character at offset 2" },
        { "Zg==Zg==", TFP_EPROTO, "invalid character at offset 2" },
        { "Z===", TFP_EPROTO, "invalid character at offset 1" },
        { "====", TFP_EPROTO, "invalid character at offset 0" },
        { "=Zm9", TFP_EPROTO, "invalid character at offset 0" },
        { "Zh==", TFP_EPROTO, "non-zero padding bits at offset 1" },
        { "Zm9=", TFP_EPROTO, "non-zero padding bits at offset 2" },
        { "Zm8=", TFP_OK, "" },
        { "Zm\xc3\xa9", TFP_EPROTO, "invalid character at offset 2" },
        { "Zm9v", TFP_OK, "" },
    };
    tfp_err_t err;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *d = (uint8_t *)"x";
        size_t dlen = 77;
        tfp_status_t st = tfp_up_b64_decode(bad[i].s, strlen(bad[i].s), 100, &d, &dlen, &err);

        ck_assert_msg(st == bad[i].want, "case %zu '%s': %s (%s)", i, bad[i].s,
                      tfp_status_name(st), err.msg);
        if (st == TFP_OK) {
            free(d);
            continue;
        }
        ck_assert_msg(strstr(err.msg, bad[i].substr) != NULL, "case %zu: '%s'", i, err.msg);
        ck_assert_int_eq(strncmp(err.msg, "base64: ", 8), 0);
        ck_assert_uint_eq(dlen, 77);
    }
    /* a NUL inside the text is just an invalid character */
    {
        uint8_t *d;
        size_t dlen;

        ck_assert_int_eq(tfp_up_b64_decode("Zm\0v", 4, 100, &d, &dlen, &err), TFP_EPROTO);
        ck_assert_ptr_nonnull(strstr(err.msg, "offset 2"));
        ck_assert_int_eq(tfp_up_b64_decode(NULL, 4, 100, &d, &dlen, &err), TFP_EINVAL);
        ck_assert_int_eq(tfp_up_b64_decode("Zm9v", 4, 100, NULL, &dlen, &err), TFP_EINVAL);
        ck_assert_int_eq(tfp_up_b64_decode("Zm9v", 4, 100, &d, NULL, &err), TFP_EINVAL);
    }
}
END_TEST

START_TEST(b64_bounds_and_random)
{
    uint8_t src[300], *d;
    size_t dlen;
    tfp_err_t err;

    ck_assert_uint_eq(tfp_up_b64_len(0), 0);
    ck_assert_uint_eq(tfp_up_b64_len(1), 4);
    ck_assert_uint_eq(tfp_up_b64_len(3), 4);
    ck_assert_uint_eq(tfp_up_b64_len(4), 8);
    ck_assert_uint_eq(tfp_up_b64_len(65536), 87384);
    /* max is on decoded bytes: exactly max passes, one more is ETOOBIG */
    ck_assert_int_eq(tfp_up_b64_decode("Zm9v", 4, 3, &d, &dlen, &err), TFP_OK);
    free(d);
    ck_assert_int_eq(tfp_up_b64_decode("Zm9v", 4, 2, &d, &dlen, &err), TFP_ETOOBIG);
    ck_assert_str_eq(err.msg, "base64: decodes to 3 bytes, more than 2");
    ck_assert_int_eq(tfp_up_b64_decode("Zm8=", 4, 2, &d, &dlen, &err), TFP_OK);
    free(d);
    ck_assert_int_eq(tfp_up_b64_decode("", 0, 0, &d, &dlen, &err), TFP_OK);
    ck_assert_ptr_nonnull(d);
    ck_assert_uint_eq(dlen, 0);
    free(d);

    rnd_state = UINT64_C(0xA4093822299F31D0);
    for (int i = 0; i < 3000; i++) {
        size_t n = rnd_below(sizeof src + 1), elen;
        char *e;

        for (size_t k = 0; k < n; k++)
            src[k] = (uint8_t)rnd();
        e = tfp_up_b64_encode(src, n, &elen);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(elen, tfp_up_b64_len(n));
        ck_assert_int_eq(tfp_up_b64_decode(e, elen, n, &d, &dlen, &err), TFP_OK);
        ck_assert_uint_eq(dlen, n);
        if (n > 0)
            ck_assert_mem_eq(d, src, n);
        free(d);
        /* one flipped character: refused, or decodes to different bytes that encode back to
         * exactly that text (one spelling per byte string) */
        if (elen > 0) {
            size_t at = rnd_below(elen);
            char *again;

            e[at] = (char)(e[at] ^ (1 << rnd_below(7)));
            if (tfp_up_b64_decode(e, elen, n, &d, &dlen, &err) == TFP_OK) {
                again = tfp_up_b64_encode(d, dlen, NULL);
                ck_assert_ptr_nonnull(again);
                ck_assert_str_eq(again, e);
                ck_assert(dlen != n || memcmp(d, src, n) != 0);
                free(again);
                free(d);
            } else {
                ck_assert(err.code == TFP_EPROTO || err.code == TFP_ETOOBIG);
            }
        }
        free(e);
    }
}
END_TEST

/* ---- suite --------------------------------------------------------------------------- */

Suite *suite_upgrade(void)
{
    Suite *s = suite_create("upgrade");
    TCase *tc;

    tc = tcase_create("upgrade");
    tcase_add_test(tc, up_host_validators);
    tcase_add_test(tc, up_host_check_same_ident);
    tcase_add_test(tc, up_ident_parse_rejects);
    tcase_add_test(tc, up_req_golden_roundtrip);
    tcase_add_test(tc, up_req_random_roundtrip);
    tcase_add_test(tc, up_req_build_refuses);
    tcase_add_loop_test(tc, up_req_parse_refuses, 0,
                        (int)(sizeof REQ_BAD / sizeof REQ_BAD[0]));
    tcase_add_test(tc, up_req_parse_oversize);
    tcase_add_test(tc, up_resp_golden_roundtrip);
    tcase_add_test(tc, up_resp_random_roundtrip);
    tcase_add_test(tc, up_resp_shm);
    tcase_add_test(tc, up_resp_build_refuses);
    tcase_add_loop_test(tc, up_resp_parse_refuses, 0,
                        (int)(sizeof RESP_BAD / sizeof RESP_BAD[0]));
    tcase_add_test(tc, up_resp_parse_oversize);
    tcase_add_test(tc, up_protocol);
    suite_add_tcase(s, tc);

    tc = tcase_create("base64");
    tcase_add_test(tc, b64_vectors);
    tcase_add_test(tc, b64_strict);
    tcase_add_test(tc, b64_bounds_and_random);
    suite_add_tcase(s, tc);
    return s;
}
