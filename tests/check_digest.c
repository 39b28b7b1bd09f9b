/* check_digest.c - unit suite for proto/digest.c (RFC 9530 Content-Digest, Repr-Digest and
 * the Want- fields) and, end to end with curl against the real tfetchd: a PUT whose digest
 * does not match what arrived is refused with 400 TF_EDIGEST and nothing is stored, a
 * matching one is stored, and a GET that asks gets the Repr-Digest of the stored document.
 */
#include "config.h"
#include "tests/suites.h"
#include "tests/fixtures.h"
#include "proto/digest.h"
#include "proto/http.h"
#include "proto/op.h"
#include "client/tfetch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sha-256 of "" and of "abc" (FIPS 180-2), as the fields spell them. */
#define EMPTY "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:"
#define ABC "sha-256=:ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=:"

START_TEST(digest_vectors)
{
    uint8_t sha[TFP_DIGEST_LEN];
    char field[TFP_DIGEST_FIELD_MAX];
    tfp_digest_sha256("", 0, sha);
    tfp_digest_format(sha, field, sizeof field);
    ck_assert_str_eq(field, EMPTY);
    tfp_digest_sha256("abc", 3, sha);
    tfp_digest_format(sha, field, sizeof field);
    ck_assert_str_eq(field, ABC);

    tfp_digest_t d;
    tfp_err_t err;
    ck_assert_int_eq(tfp_digest_parse(ABC, &d, &err), TFP_OK);
    ck_assert_int_eq(d.has, 1);
    ck_assert_mem_eq(d.sha256, sha, TFP_DIGEST_LEN);
    /* other algorithms beside it, parameters, spaces */
    ck_assert_int_eq(tfp_digest_parse("md5=:AAAA:;x=1, " ABC ";a=\"q,\", unixsum=:AA==:",
                                      &d, &err), TFP_OK);
    ck_assert_int_eq(d.has, 1);
    ck_assert_mem_eq(d.sha256, sha, TFP_DIGEST_LEN);
    ck_assert_int_eq(tfp_digest_parse("sha-512=:AAAA:", &d, &err), TFP_OK);
    ck_assert_int_eq(d.has, 0);             /* nothing of ours to check */
}
END_TEST

static const char *const BAD_DIGEST[] = {
    "", "   ", "sha-256", "sha-256=", "sha-256=:", "sha-256=:" "AAAA", "SHA-256=:AAAA:",
    "sha-256=:AAAA:", "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU:",
    "sha-256=:47DEQpj8HBSa-_TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:", ABC ", " ABC, ABC ",", ABC " x",
    "sha-256=1", "sha-256=\"x\"", "1sha=:AAAA:", ABC ";", ABC ";=1", "sha-256=:AA AA:",
};

START_TEST(digest_refuses)
{
    tfp_digest_t d, canary;
    tfp_err_t err = {TFP_OK, ""};
    memset(&d, 0x5a, sizeof d);
    canary = d;
    ck_assert_msg(tfp_digest_parse(BAD_DIGEST[_i], &d, &err) == TFP_EPROTO, "'%s' accepted",
                  BAD_DIGEST[_i]);
    ck_assert_int_eq(err.code, TFP_EPROTO);
    ck_assert_msg(err.msg[0], "no message for '%s'", BAD_DIGEST[_i]);
    ck_assert_mem_eq(&d, &canary, sizeof d);
    char *big = malloc(TFP_DIGEST_MAX_INPUT + 2);
    ck_assert_ptr_nonnull(big);
    memset(big, 'a', TFP_DIGEST_MAX_INPUT + 1);
    big[TFP_DIGEST_MAX_INPUT + 1] = '\0';
    ck_assert_int_eq(tfp_digest_parse(big, &d, &err), TFP_EPROTO);
    free(big);
}
END_TEST

START_TEST(digest_want)
{
    int w = -1;
    tfp_err_t err;
    ck_assert_int_eq(tfp_digest_want_parse("sha-256=1", &w, &err), TFP_OK);
    ck_assert_int_eq(w, 1);
    ck_assert_int_eq(tfp_digest_want_parse("sha-512=3, sha-256=10", &w, &err), TFP_OK);
    ck_assert_int_eq(w, 1);
    ck_assert_int_eq(tfp_digest_want_parse("sha-256=0", &w, &err), TFP_OK);
    ck_assert_int_eq(w, 0);
    ck_assert_int_eq(tfp_digest_want_parse("md5=2", &w, &err), TFP_OK);
    ck_assert_int_eq(w, 0);
    static const char *const bad[] = {"sha-256=11", "sha-256=-1", "sha-256=1.5", "sha-256",
                                      "sha-256=:AAAA:", "", "sha-256=1,", "sha-256=a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        w = 7;
        ck_assert_msg(tfp_digest_want_parse(bad[i], &w, &err) == TFP_EPROTO, "'%s'", bad[i]);
        ck_assert_int_eq(w, 7);
    }
}
END_TEST

/* The HTTP parser takes them on PUT and GET, and refuses a malformed one with 400. */
START_TEST(digest_http_op)
{
    tfp_http_req_t in = {.method = "PUT", .path = "/v1/tensors/w", .content_length = 8,
                         .content_type = "application/x-safetensors", .max_body = 1000,
                         .repr_digest = ABC};
    tfp_op_t op;
    tfp_op_err_t e;
    ck_assert_int_eq(tfp_http_op_parse(&in, &op, &e), TFP_OK);
    ck_assert_int_eq(op.digest.repr.has, 1);
    ck_assert_int_eq(op.digest.content.has, 0);
    in.content_digest = "sha-256=:AAAA:";
    ck_assert_int_eq(tfp_http_op_parse(&in, &op, &e), TFP_EBADREQ);
    ck_assert_msg(strncmp(e.msg, "Content-Digest: ", 16) == 0, "%s", e.msg);
    in = (tfp_http_req_t){.method = "GET", .path = "/v1/tensors/w", .content_length = -1,
                          .want_repr_digest = "sha-256=3"};
    ck_assert_int_eq(tfp_http_op_parse(&in, &op, &e), TFP_OK);
    ck_assert_int_eq(op.digest.want, 1);
    in.want_repr_digest = NULL;
    in.want_content_digest = "sha-256=x";
    ck_assert_int_eq(tfp_http_op_parse(&in, &op, &e), TFP_EBADREQ);
}
END_TEST

/* The client's switch: 0 or 1 only; TFETCH_VERIFY read at tf_client_new, a bad value failing
 * its requests until the program sets it. */
START_TEST(digest_client_switch)
{
    tf_client_t *c;
    tf_doc_t *d = NULL;
    ck_assert_int_eq(tf_client_set_verify(NULL, 1), TF_EINVAL);
    setenv("TFETCH_VERIFY", "yes", 1);
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_get(c, "http://127.0.0.1:1/v1/tensors/w", 0, &d), TF_EINVAL);
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "TFETCH_VERIFY"));
    ck_assert_int_eq(tf_client_set_verify(c, 2), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_verify(c, 1), TF_OK);
    ck_assert_int_eq(tf_get(c, "http://127.0.0.1:1/v1/tensors/w", 0, &d), TF_ECONNECT);
    ck_assert_ptr_null(d);
    tf_client_free(c);
    unsetenv("TFETCH_VERIFY");
}
END_TEST

/* ---- end to end: the real daemon, driven with curl ------------------------------------------ */

static td_daemon_t D;

/* A 77-byte safetensors document: one F32 [2] tensor. */
static const char *doc_file(void)
{
    static const char hdr[] = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    unsigned char buf[256];
    size_t hl = sizeof hdr - 1, pad = (8 - hl % 8) % 8, n = 0;
    uint64_t l = hl + pad;
    memcpy(buf, &l, 8);
    n = 8;
    memcpy(buf + n, hdr, hl);
    n += hl;
    memset(buf + n, ' ', pad);
    n += pad;
    float v[2] = {1, 2};
    memcpy(buf + n, v, 8);
    n += 8;
    return td_tmpfile(0, buf, n);
}

START_TEST(digest_e2e)
{
    if (!getenv("TFETCHD")) {
        fprintf(stderr, "digest_e2e: skipped (TFETCHD not set)\n");
        return;
    }
    ck_assert_int_eq(td_start(&D, NULL), 0);
    const char *f = doc_file();
    char cmd[2048], out[1024], sha[TFP_DIGEST_FIELD_MAX];
    /* the document's digest, as a client would compute it */
    snprintf(cmd, sizeof cmd, "openssl dgst -sha256 -binary %s | base64", f);
    if (td_run(cmd, out, sizeof out) != 0 || strlen(out) < 44) {
        FILE *fp = fopen(f, "rb");
        unsigned char b[256];
        size_t n = fread(b, 1, sizeof b, fp);
        fclose(fp);
        uint8_t s[TFP_DIGEST_LEN];
        tfp_digest_sha256(b, n, s);
        tfp_digest_format(s, sha, sizeof sha);
    } else {
        out[44] = '\0';
        snprintf(sha, sizeof sha, "sha-256=:%s:", out);
    }
    /* one byte changed between the client and the server: refused, nothing stored */
    char bad[TFP_DIGEST_FIELD_MAX];
    snprintf(bad, sizeof bad, "%s", sha);
    bad[9] = bad[9] == 'A' ? 'B' : 'A';
    snprintf(cmd, sizeof cmd, "curl -s -w ' %%{http_code}' -X PUT --data-binary @%s "
             "-H 'Repr-Digest: %s' %s", f, bad, td_url(&D, "/v1/tensors/w"));
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\"code\":\"TF_EDIGEST\"") && strstr(out, " 400") &&
                  strstr(out, sha), "%s", out);
    snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -w '%%{http_code}' %s",
             td_url(&D, "/v1/tensors/w"));
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_str_eq(out, "404");
    snprintf(cmd, sizeof cmd, "curl -s -w ' %%{http_code}' -X PUT --data-binary @%s "
             "-H 'Content-Digest: %s' %s", f, bad, td_url(&D, "/v1/tensors/w"));
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "Content-Digest does not match"), "%s", out);
    /* the right one: stored; a GET that asks gets the stored document's digest, also for
     * a range of it, and one that does not ask gets none */
    snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -w '%%{http_code}' -X PUT --data-binary "
             "@%s -H 'Repr-Digest: %s' -H 'Content-Digest: %s' %s", f, sha, sha,
             td_url(&D, "/v1/tensors/w"));
    ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
    ck_assert_str_eq(out, "201");
    for (int range = 0; range < 2; range++) {
        snprintf(cmd, sizeof cmd, "curl -s -D - -o /dev/null -H 'Want-Repr-Digest: sha-256=1' "
                 "%s %s | tr -d '\\r' | grep -i '^repr-digest:'", range ? "-r 0-3" : "",
                 td_url(&D, "/v1/tensors/w"));
        ck_assert_int_eq(td_run(cmd, out, sizeof out), 0);
        char want[128];
        snprintf(want, sizeof want, "Repr-Digest: %s\n", sha);
        ck_assert_str_eq(out, want);
    }
    snprintf(cmd, sizeof cmd, "curl -s -D - -o /dev/null %s | grep -ci '^repr-digest:'",
             td_url(&D, "/v1/tensors/w"));
    td_run(cmd, out, sizeof out);
    ck_assert_str_eq(out, "0\n");
    ck_assert_int_eq(td_stop(&D, 15, 10000), 0);
    td_cleanup();
}
END_TEST

Suite *suite_digest(void)
{
    Suite *s = suite_create("digest");
    TCase *tc = tcase_create("digest");
    tcase_add_test(tc, digest_vectors);
    tcase_add_loop_test(tc, digest_refuses, 0, sizeof BAD_DIGEST / sizeof BAD_DIGEST[0]);
    tcase_add_test(tc, digest_want);
    tcase_add_test(tc, digest_http_op);
    tcase_add_test(tc, digest_client_switch);
    tcase_add_test(tc, digest_e2e);
    suite_add_tcase(s, tc);
    return s;
}
