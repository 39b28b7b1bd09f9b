/* check_httpframe.c - the httpframe suite: proto/httpframe.c's framing decision over a raw
 * header list (duplicates, Content-Length and Transfer-Encoding, Host, names and values,
 * the flags a transport sets for bare LF, NUL and obs-fold) and the percent-decoder.
 */
#include "config.h"

#include <stdarg.h>
#include <string.h>

#include <check.h>

#include "proto/httpframe.h"
#include "tests/suites.h"

#define MAXF 16

/* A request built from "Name: value" strings (NULL-terminated), split at the first ':'
 * (the value's leading spaces skipped, as a parser does). */
typedef struct {
    tfp_hfield_t f[MAXF];
    size_t n;
    tfp_http_frame_t in;
} req_t;

static void build(req_t *r, const char *version, va_list ap)
{
    const char *h;

    memset(r, 0, sizeof *r);
    while ((h = va_arg(ap, const char *)) != NULL) {
        const char *colon = strchr(h, ':');
        tfp_hfield_t *f = &r->f[r->n++];

        ck_assert_ptr_nonnull(colon);
        f->name = h;
        f->name_len = (size_t)(colon - h);
        f->value = colon + 1 + strspn(colon + 1, " \t");
        f->value_len = strlen(f->value);
    }
    r->in.version = version;
    r->in.fields = r->f;
    r->in.nfields = r->n;
}

static req_t R;
static tfp_http_framing_t OUT;
static tfp_err_t ERR;

/* The check's status for version and the headers that follow (NULL-terminated). */
static tfp_status_t check_v(const char *version, ...)
{
    va_list ap;

    va_start(ap, version);
    build(&R, version, ap);
    va_end(ap);
    memset(&OUT, 0x55, sizeof OUT);
    ERR.code = TFP_OK;
    ERR.msg[0] = '\0';
    return tfp_http_frame_check(&R.in, &OUT, &ERR);
}

#define CHECK11(...) check_v("HTTP/1.1", "Host: h", __VA_ARGS__, (const char *)NULL)
#define REFUSED(st, substr)                                                                \
    do {                                                                                   \
        ck_assert_int_eq((st), TFP_EBADREQ);                                               \
        ck_assert_msg(strstr(ERR.msg, substr) != NULL, "message '%s' lacks '%s'", ERR.msg, \
                      substr);                                                             \
    } while (0)

START_TEST(frame_plain_requests_pass)
{
    ck_assert_int_eq(check_v("HTTP/1.1", "Host: h", (const char *)NULL), TFP_OK);
    ck_assert_int_eq(OUT.content_length, -1);
    ck_assert_int_eq(OUT.chunked, 0);
    ck_assert_int_eq(CHECK11("Content-Length: 12", "Content-Type: application/x-safetensors",
                             "Tfetch-User: alice", "Tfetch-Request-Id: r-1"), TFP_OK);
    ck_assert_int_eq(OUT.content_length, 12);
    ck_assert_int_eq(CHECK11("Content-Length: 0"), TFP_OK);
    ck_assert_int_eq(OUT.content_length, 0);
    ck_assert_int_eq(CHECK11("Transfer-Encoding: chunked"), TFP_OK);
    ck_assert_int_eq(OUT.chunked, 1);
    ck_assert_int_eq(OUT.content_length, -1);
    ck_assert_int_eq(CHECK11("Transfer-Encoding: CHUNKED"), TFP_OK);
    ck_assert_int_eq(CHECK11("Transfer-Encoding: chunked"), TFP_OK);
    /* HTTP/1.0 needs no Host; list headers may repeat */
    ck_assert_int_eq(check_v("HTTP/1.0", "Accept: a/b", "Accept: */*", "X-Pad: \tv\t",
                             (const char *)NULL), TFP_OK);
    ck_assert_int_eq(CHECK11("Content-Length: 9223372036854775807"), TFP_OK);
    ck_assert_int_eq(OUT.content_length, INT64_MAX);
}
END_TEST

START_TEST(frame_content_length)
{
    REFUSED(CHECK11("Content-Length: 5", "Content-Length: 0"), "Content-Length given twice");
    REFUSED(CHECK11("Content-Length: 5", "content-length: 5"), "Content-Length given twice");
    REFUSED(CHECK11("Content-Length: 5,5"), "is not a number");
    REFUSED(CHECK11("Content-Length: +5"), "is not a number");
    REFUSED(CHECK11("Content-Length: 5 "), "is not a number");
    REFUSED(CHECK11("Content-Length: "), "Content-Length is empty");
    ck_assert_int_eq(CHECK11("Content-Length: 9223372036854775808"), TFP_ETOOBIG);
    ck_assert_int_eq(CHECK11("Content-Length: 99999999999999999999999"), TFP_ETOOBIG);
    /* a space before the colon makes a different name, which is not a token */
    REFUSED(CHECK11("Content-Length : 5"), "is not a token");
    REFUSED(CHECK11("Content-Length\t: 5"), "is not a token");
}
END_TEST

START_TEST(frame_transfer_encoding)
{
    REFUSED(CHECK11("Transfer-Encoding: chunked", "Content-Length: 5"),
            "both Transfer-Encoding and Content-Length");
    REFUSED(CHECK11("Content-Length: 5", "Transfer-Encoding: chunked"),
            "both Transfer-Encoding and Content-Length");
    REFUSED(CHECK11("Transfer-Encoding: chunked, chunked"), "chunked twice");
    REFUSED(CHECK11("Transfer-Encoding: chunked", "Transfer-Encoding: chunked"), "chunked twice");
    REFUSED(CHECK11("Transfer-Encoding: chunked, gzip"), "chunked is not the last");
    REFUSED(CHECK11("Transfer-Encoding: chunked", "Transfer-Encoding: gzip"),
            "chunked is not the last");
    REFUSED(CHECK11("Transfer-Encoding: "), "names no coding");
    REFUSED(CHECK11("Transfer-Encoding: ,"), "has an empty list element");
    /* An empty field beside a good one: the count of codings cannot hide it. */
    REFUSED(CHECK11("Transfer-Encoding: ", "Transfer-Encoding: chunked"), "names no coding");
    REFUSED(CHECK11("Transfer-Encoding: chunked", "Transfer-Encoding: "), "names no coding");
    /* Read as a whole by another parser (libmicrohttpd compares the value with "chunked"),
     * these are not chunked there: it would wait for a body it cannot frame. */
    REFUSED(CHECK11("Transfer-Encoding: chunked "), "ends in whitespace");
    REFUSED(CHECK11("Transfer-Encoding: chunked\t"), "ends in whitespace");
    REFUSED(CHECK11("Transfer-Encoding: ,chunked"), "has an empty list element");
    REFUSED(CHECK11("Transfer-Encoding: , chunked ,"), "has an empty list element");
    REFUSED(CHECK11("Transfer-Encoding: , chunked"), "has an empty list element");
    REFUSED(CHECK11("Transfer-Encoding: chunked,"), "has an empty list element");
    REFUSED(CHECK11("Transfer-Encoding: gzip,,chunked"), "has an empty list element");
    REFUSED(CHECK11("Transfer-Encoding: gzip", "Transfer-Encoding: chunked "),
            "ends in whitespace");
    REFUSED(check_v("HTTP/1.0", "Transfer-Encoding: chunked", (const char *)NULL),
            "Transfer-Encoding in an HTTP/1.0 request");
    /* any other coding: 501, not a wait for a body that cannot be framed */
    ck_assert_int_eq(CHECK11("Transfer-Encoding: gzip"), TFP_ENOTIMPL);
    ck_assert_msg(strstr(ERR.msg, "transfer coding 'gzip' is not implemented"), "%s", ERR.msg);
    ck_assert_int_eq(CHECK11("Transfer-Encoding: identity"), TFP_ENOTIMPL);
    ck_assert_int_eq(CHECK11("Transfer-Encoding: gzip, chunked"), TFP_ENOTIMPL);
    ck_assert_int_eq(CHECK11("Transfer-Encoding: gzip", "Transfer-Encoding: chunked"),
                     TFP_ENOTIMPL);
    ck_assert_int_eq(CHECK11("Transfer-Encoding: chunked;q=1"), TFP_ENOTIMPL);
    ck_assert_int_eq(CHECK11("Transfer-Encoding: xchunked"), TFP_ENOTIMPL);
}
END_TEST

START_TEST(frame_host_and_version)
{
    REFUSED(check_v("HTTP/1.1", (const char *)NULL), "without Host");
    REFUSED(check_v("HTTP/1.1", "X: 1", (const char *)NULL), "without Host");
    REFUSED(CHECK11("Host: other"), "Host given twice");
    REFUSED(check_v("HTTP/1.0", "Host: a", "HOST: b", (const char *)NULL), "Host given twice");
    ck_assert_int_eq(check_v("HTTP/1.1", "Host: ", (const char *)NULL), TFP_OK);
    REFUSED(check_v("HTTP/1.2", "Host: h", (const char *)NULL), "is not HTTP/1.0 or HTTP/1.1");
    REFUSED(check_v("HTTP/2.0", "Host: h", (const char *)NULL), "is not HTTP/1.0");
    REFUSED(check_v("", (const char *)NULL), "is not HTTP/1.0");
    REFUSED(check_v(NULL, (const char *)NULL), "is not HTTP/1.0");
}
END_TEST

START_TEST(frame_ids_and_singletons)
{
    REFUSED(CHECK11("Tfetch-User: alice", "Tfetch-User: bob"), "Tfetch-User given twice");
    REFUSED(CHECK11("Tfetch-User: alice", "tfetch-user: alice"), "Tfetch-User given twice");
    REFUSED(CHECK11("Tfetch-Request-Id: a", "Tfetch-Request-Id: b"),
            "Tfetch-Request-Id given twice");
    REFUSED(CHECK11("Tfetch-Dtype: F32", "Tfetch-Dtype: U8"), "Tfetch-Dtype given twice");
    REFUSED(CHECK11("Tfetch-Shape: 2", "Tfetch-Shape: 2"), "Tfetch-Shape given twice");
    REFUSED(CHECK11("Content-Type: a/b", "Content-Type: a/b"), "Content-Type given twice");
    /* the identity headers: one parser would take one token, another the other */
    REFUSED(CHECK11("Authorization: Bearer a", "Authorization: Bearer b"),
            "Authorization given twice");
    REFUSED(CHECK11("Authorization: Bearer a", "authorization: Bearer a"),
            "Authorization given twice");
    REFUSED(CHECK11("Tfetch-User-Principal: a", "Tfetch-User-Principal: b"),
            "Tfetch-User-Principal given twice");
    REFUSED(CHECK11("Tfetch-Worker-Secret: a", "Tfetch-Worker-Secret: b"),
            "Tfetch-Worker-Secret given twice");
    ck_assert_int_eq(CHECK11("Authorization: Bearer a"), TFP_OK);
}
END_TEST

START_TEST(frame_names_and_values)
{
    REFUSED(CHECK11("X A: 1"), "header name 'X A' is not a token");
    REFUSED(CHECK11("X(A): 1"), "is not a token");
    REFUSED(CHECK11(": 1"), "empty name");
    REFUSED(CHECK11("X-A: a\rb"), "control character 0x0d");
    REFUSED(CHECK11("X-A: a\x01"), "control character 0x01");
    REFUSED(CHECK11("X-A: a\x7f"), "control character 0x7f");
    ck_assert_int_eq(CHECK11("X-A: caf\xc3\xa9 \"q\" (c)"), TFP_OK);    /* obs-text */
    /* a NUL inside a value (given by length) is refused, not cut */
    ck_assert_int_eq(CHECK11("Tfetch-User: alice"), TFP_OK);
    R.f[1].value = "alice\0evil";
    R.f[1].value_len = 10;
    REFUSED(tfp_http_frame_check(&R.in, &OUT, &ERR), "control character 0x00");
}
END_TEST

START_TEST(frame_transport_flags)
{
    /* what the transport saw and its parser hid: each flag refuses the request */
    ck_assert_int_eq(CHECK11("Tfetch-User: alice", "X: 1"), TFP_OK);
    R.f[1].flags = TFP_HF_BADEND;
    REFUSED(tfp_http_frame_check(&R.in, &OUT, &ERR), "header 'Tfetch-User': a NUL byte, or a "
            "line not ended by CRLF");
    R.f[1].flags = TFP_HF_FOLDED;
    REFUSED(tfp_http_frame_check(&R.in, &OUT, &ERR), "header 'Tfetch-User': a folded");
    R.f[1].flags = 0;
    R.in.line_flags = TFP_HF_BADEND;
    REFUSED(tfp_http_frame_check(&R.in, &OUT, &ERR), "request line is not ended by CRLF");
    R.in.line_flags = TFP_HF_NUL;
    REFUSED(tfp_http_frame_check(&R.in, &OUT, &ERR), "NUL byte (raw or %00) in the request "
            "target");
    R.in.line_flags = 0;
    ck_assert_int_eq(tfp_http_frame_check(&R.in, &OUT, &ERR), TFP_OK);
    /* a %00 in a query parameter */
    tfp_hfield_t args[2] = {
        { "wait", 4, "5", 1, 0 },
        { "x", 1, "a\0b", 3, 0 },
    };
    R.in.args = args;
    R.in.nargs = 1;
    ck_assert_int_eq(tfp_http_frame_check(&R.in, &OUT, &ERR), TFP_OK);
    R.in.nargs = 2;
    REFUSED(tfp_http_frame_check(&R.in, &OUT, &ERR), "NUL byte (%00) in the query");
    args[1] = (tfp_hfield_t){ "x\0y", 3, NULL, 0, 0 };
    REFUSED(tfp_http_frame_check(&R.in, &OUT, &ERR), "NUL byte (%00) in the query");
}
END_TEST

START_TEST(url_unescape)
{
    char s[64];

    strcpy(s, "/v1/tensors/a%41%2f%2F");
    ck_assert_uint_eq(tfp_url_unescape(s), 16);
    ck_assert_str_eq(s, "/v1/tensors/aA//");
    strcpy(s, "/a%zz%4%");
    ck_assert_uint_eq(tfp_url_unescape(s), 8);
    ck_assert_str_eq(s, "/a%zz%4%");
    strcpy(s, "/victim%00x");
    ck_assert_uint_eq(tfp_url_unescape(s), 9);
    ck_assert_int_eq(memcmp(s, "/victim\0x", 10), 0);
    strcpy(s, "%25%30%30");                         /* "%00" spelled out: not a NUL */
    ck_assert_uint_eq(tfp_url_unescape(s), 3);
    ck_assert_str_eq(s, "%00");
    strcpy(s, "");
    ck_assert_uint_eq(tfp_url_unescape(s), 0);
}
END_TEST

Suite *suite_httpframe(void)
{
    Suite *s = suite_create("httpframe");
    TCase *tc = tcase_create("httpframe");

    tcase_add_test(tc, frame_plain_requests_pass);
    tcase_add_test(tc, frame_content_length);
    tcase_add_test(tc, frame_transfer_encoding);
    tcase_add_test(tc, frame_host_and_version);
    tcase_add_test(tc, frame_ids_and_singletons);
    tcase_add_test(tc, frame_names_and_values);
    tcase_add_test(tc, frame_transport_flags);
    tcase_add_test(tc, url_unescape);
    suite_add_tcase(s, tc);
    return s;
}
