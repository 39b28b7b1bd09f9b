/* check_feeddecl.c - unit suite for proto/feeddecl.c: a feed declaration's JSON (defaults,
 * every refusal with its message), comparing declarations, device tokens, the signature
 * check of items (the first difference named) and the split of an item per device.
 * Pure functions; no daemon.
 */
#include "config.h"
#include "tests/suites.h"
#include "proto/feeddecl.h"

#include <stdio.h>
#include <string.h>

#define SIG "\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[4,2]}]"

static tfp_status_t parse(const char *json, tfp_feed_decl_t *d, tfp_err_t *err)
{
    return tfp_feed_decl_parse(json, strlen(json), d, err);
}

START_TEST(feeddecl_defaults)
{
    tfp_feed_decl_t d;
    tfp_err_t err;
    ck_assert_int_eq(parse("{" SIG "}", &d, &err), TFP_OK);
    ck_assert_int_eq(d.ndev, 1);
    ck_assert_int_eq(d.named, 0);
    ck_assert_int_eq(d.fanout, TFP_FANOUT_PER_DEVICE);
    ck_assert_int_eq(d.max_items, 8);
    ck_assert_int_eq(d.max_bytes, 256u << 20);
    ck_assert_int_eq(d.lease_ms, 30000);
    ck_assert_int_eq(d.outfeed_items, 64);
    ck_assert_int_eq(d.nsig, 1);
    ck_assert_str_eq(d.sig[0].name, "x");
    ck_assert_int_eq(d.sig[0].dtype, TFP_F32);
    ck_assert_int_eq(d.sig[0].rank, 2);
    ck_assert_int_eq(d.sig[0].nbytes, 32);
    ck_assert_int_eq(d.item_bytes, 32);
    tfp_feed_decl_clear(&d);

    ck_assert_int_eq(parse("{\"devices\":[\"gpu0\",\"gpu1\"],\"fanout\":\"split\"," SIG
                           ",\"max_items\":2,\"max_bytes\":16,\"lease_ms\":5,"
                           "\"outfeed_items\":1}", &d, &err), TFP_OK);
    ck_assert_int_eq(d.ndev, 2);
    ck_assert_int_eq(d.named, 1);
    ck_assert_str_eq(d.dev_names[1], "gpu1");
    ck_assert_int_eq(d.item_bytes, 16);          /* each device's half */
    ck_assert_int_eq(tfp_feed_dev_index(&d, "gpu1"), 1);
    ck_assert_int_eq(tfp_feed_dev_index(&d, "0"), 0);
    ck_assert_int_eq(tfp_feed_dev_index(&d, "2"), -1);
    ck_assert_int_eq(tfp_feed_dev_index(&d, "gpu2"), -1);
    ck_assert_int_eq(tfp_feed_dev_index(&d, ""), -1);
    ck_assert_str_eq(tfp_fanout_name(d.fanout), "split");
    tfp_feed_decl_clear(&d);
    tfp_feed_decl_clear(NULL);
}
END_TEST

START_TEST(feeddecl_refusals)
{
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"", "feed declaration: "},
        {"[]", "a feed declaration is a JSON object"},
        {"{\"devices\":2}", "signature must list 1..64 tensors"},
        {"{" SIG ",\"extra\":1}", "feed declaration: unknown key 'extra'"},
        {"{" SIG ",\"devices\":0}", "devices must be a count in 1..64"},
        {"{" SIG ",\"devices\":65}", "devices must be a count in 1..64"},
        {"{" SIG ",\"devices\":[]}", "devices must be a count in 1..64 or a list of"},
        {"{" SIG ",\"devices\":[\"a\",\"a\"]}", "devices[1]: 'a' is listed twice"},
        {"{" SIG ",\"devices\":[\"7\"]}", "devices[0] must be a name"},
        {"{" SIG ",\"devices\":[\"a/b\"]}", "devices[0] must be a name"},
        {"{\"signature\":[]}", "signature must list 1..64 tensors"},
        {"{\"signature\":[1]}", "signature[0] must be an object"},
        {"{\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[],\"q\":1}]}",
         "signature[0]: unknown key 'q'"},
        {"{\"signature\":[{\"name\":\"\",\"dtype\":\"F32\",\"shape\":[]}]}",
         "signature[0].name must be a tensor name"},
        {"{\"signature\":[{\"name\":\"x\",\"dtype\":\"F33\",\"shape\":[]}]}",
         "signature[0].dtype must be a dtype name"},
        {"{\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[-1]}]}",
         "signature[0].shape[0] must be an integer"},
        {"{\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1]}]}",
         "signature[0].shape must be a list of at most 8"},
        {"{\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[9007199254740992,4]}]}",
         "signature[0]: the tensor is too large"},
        {"{\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[1]},"
         "{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[1]}]}",
         "signature[1]: tensor 'x' is listed twice"},
        {"{" SIG ",\"fanout\":\"all\"}", "fanout must be"},
        {"{" SIG ",\"max_items\":0}", "max_items must be an integer in 1..1048576"},
        {"{" SIG ",\"max_items\":1.5}", "max_items must be an integer"},
        {"{" SIG ",\"lease_ms\":0}", "lease_ms must be an integer"},
        {"{" SIG ",\"outfeed_items\":0}", "outfeed_items must be an integer"},
        {"{" SIG ",\"max_bytes\":31}", "an item is 32 bytes per device queue, above max_bytes 31"},
        {"{" SIG ",\"fanout\":\"split\",\"devices\":3}",
         "signature[0]: a split feed cuts dim 0 across 3 devices"},
        {"{\"fanout\":\"split\",\"signature\":[{\"name\":\"s\",\"dtype\":\"F32\",\"shape\":[]}]}",
         "signature[0]: a split feed cuts dim 0 across 1 devices; 's' has no dim 0"},
        {"{" SIG "," SIG "}", "feed declaration: duplicate key"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tfp_feed_decl_t d = {.ndev = 99};
        tfp_err_t err;
        tfp_status_t st = parse(bad[i].json, &d, &err);
        ck_assert_msg(st == TFP_EBADREQ || st == TFP_EPROTO, "%s: %s", bad[i].json,
                      tfp_status_name(st));
        ck_assert_msg(strncmp(err.msg, bad[i].msg, strlen(bad[i].msg)) == 0,
                      "%s: message '%s', want '%s...'", bad[i].json, err.msg, bad[i].msg);
        ck_assert_int_eq(d.ndev, 99);                        /* untouched */
    }
}
END_TEST

START_TEST(feeddecl_equal)
{
    tfp_feed_decl_t a, b;
    tfp_err_t err;
    ck_assert_int_eq(parse("{" SIG "}", &a, &err), TFP_OK);
    ck_assert_int_eq(parse("{\"max_items\":8,\"devices\":1," SIG "}", &b, &err), TFP_OK);
    ck_assert_int_eq(tfp_feed_decl_equal(&a, &b), 1);
    tfp_feed_decl_clear(&b);
    static const char *const differ[] = {
        "{" SIG ",\"devices\":2}", "{" SIG ",\"devices\":[\"a\"]}", "{" SIG ",\"max_items\":9}",
        "{" SIG ",\"fanout\":\"broadcast\"}", "{" SIG ",\"lease_ms\":1}",
        "{\"signature\":[{\"name\":\"y\",\"dtype\":\"F32\",\"shape\":[4,2]}]}",
        "{\"signature\":[{\"name\":\"x\",\"dtype\":\"F16\",\"shape\":[4,2]}]}",
        "{\"signature\":[{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[2,4]}]}",
    };
    for (size_t i = 0; i < sizeof differ / sizeof differ[0]; i++) {
        ck_assert_int_eq(parse(differ[i], &b, &err), TFP_OK);
        ck_assert_msg(!tfp_feed_decl_equal(&a, &b), "%s", differ[i]);
        tfp_feed_decl_clear(&b);
    }
    tfp_feed_decl_clear(&a);
    ck_assert_int_eq(parse("{\"devices\":[\"a\",\"b\"]," SIG "}", &a, &err), TFP_OK);
    ck_assert_int_eq(parse("{\"devices\":[\"a\",\"c\"]," SIG "}", &b, &err), TFP_OK);
    ck_assert_int_eq(tfp_feed_decl_equal(&a, &b), 0);
    tfp_feed_decl_clear(&a);
    tfp_feed_decl_clear(&b);
}
END_TEST

static tfp_doc_t *doc2(const char *n1, tfp_dtype_t dt, uint64_t d0, const char *n2)
{
    static float data[64];
    tfp_doc_t *doc = tfp_doc_new();
    tfp_err_t err;
    uint64_t shape[2] = {d0, 2};
    ck_assert_int_eq(tfp_doc_add(doc, n1, dt, 2, shape, data, d0 * 2 * tfp_dtype_size(dt), &err),
                     TFP_OK);
    if (n2) {
        uint64_t s1[1] = {4};
        ck_assert_int_eq(tfp_doc_add(doc, n2, TFP_U8, 1, s1, data, 4, &err), TFP_OK);
    }
    return doc;
}

START_TEST(feeddecl_signature_check)
{
    tfp_feed_decl_t d;
    tfp_err_t err;
    ck_assert_int_eq(parse("{" SIG "}", &d, &err), TFP_OK);
    static const struct {
        const char *n1;
        tfp_dtype_t dt;
        uint64_t d0;
        const char *n2, *msg;
    } cases[] = {
        {"x", TFP_F32, 4, NULL, NULL},
        {"y", TFP_F32, 4, NULL, "the item lacks tensor 'x'"},
        {"x", TFP_F16, 4, NULL, "tensor 'x' has dtype F16; the signature says F32"},
        {"x", TFP_F32, 3, NULL, "tensor 'x' has shape [3,2]; the signature says [4,2]"},
        {"x", TFP_F32, 4, "z", "tensor 'z' is not in the signature"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tfp_doc_t *doc = doc2(cases[i].n1, cases[i].dt, cases[i].d0, cases[i].n2);
        tfp_status_t st = tfp_feed_sig_check(&d, doc, &err);
        if (!cases[i].msg) {
            ck_assert_int_eq(st, TFP_OK);
        } else {
            ck_assert_int_eq(st, TFP_EUNPROC);
            ck_assert_str_eq(err.msg, cases[i].msg);
        }
        tfp_doc_free(doc);
    }
    tfp_feed_decl_clear(&d);
}
END_TEST

START_TEST(feeddecl_split)
{
    float data[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    tfp_doc_t *doc = tfp_doc_new();
    tfp_err_t err;
    uint64_t shape[2] = {4, 2};
    ck_assert_int_eq(tfp_doc_add(doc, "x", TFP_F32, 2, shape, data, sizeof data, &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_set_meta(doc, "k", "v", &err), TFP_OK);
    tfp_doc_t *part = NULL;
    ck_assert_int_eq(tfp_feed_split(doc, 2, 1, &part, &err), TFP_OK);
    ck_assert_int_eq(part->n, 1);
    ck_assert_int_eq(part->t[0].shape[0], 2);
    ck_assert_int_eq(part->t[0].shape[1], 2);
    ck_assert_int_eq(part->t[0].nbytes, 16);
    ck_assert(part->t[0].data == (const uint8_t *)&data[4]);        /* rows 2..3 */
    ck_assert_str_eq(tfp_doc_meta(part, "k"), "v");
    tfp_doc_free(part);
    ck_assert_int_eq(tfp_feed_split(doc, 3, 0, &part, &err), TFP_EINVAL);
    ck_assert_int_eq(tfp_feed_split(doc, 2, 2, &part, &err), TFP_EINVAL);
    tfp_doc_free(doc);
}
END_TEST

Suite *suite_feeddecl(void)
{
    Suite *s = suite_create("feeddecl");
    TCase *tc = tcase_create("decl");
    tcase_add_test(tc, feeddecl_defaults);
    tcase_add_test(tc, feeddecl_refusals);
    tcase_add_test(tc, feeddecl_equal);
    tcase_add_test(tc, feeddecl_signature_check);
    tcase_add_test(tc, feeddecl_split);
    suite_add_tcase(s, tc);
    return s;
}
