/* check_client.c - unit tests of libtfetch that need no tfetchd: documents, status and dtype
 * names, URL and argument errors, connection failures, and the HTTP mapping checked against
 * a tiny canned-response server started in the test on port 0.
 *
 * Each canned server is one thread that accepts one connection, records the request and
 * writes a fixed response; it is joined before the test ends. The end-to-end tests against
 * the real daemon live in check_e2e.c.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/tfetch.h"
#include "proto/ids.h"
#include "proto/status.h"
#include "tests/fixtures.h"
#include "tests/suites.h"
#include "transports/http_client.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static tf_doc_t *sample_doc(unsigned flags, float *w, int32_t *b)
{
    tf_doc_t *doc = tf_doc_new();
    ck_assert_ptr_nonnull(doc);
    int64_t ws[2] = {2, 3}, bs[1] = {4};
    ck_assert_int_eq(tf_doc_add(doc, "w", TF_F32, 2, ws, w, 6 * sizeof(float), flags), TF_OK);
    ck_assert_int_eq(tf_doc_add(doc, "b", TF_I32, 1, bs, b, 4 * sizeof(int32_t), flags), TF_OK);
    ck_assert_int_eq(tf_doc_set_meta(doc, "format", "pt"), TF_OK);
    return doc;
}

/* ---- the canned-response server ----------------------------------------------------------- */

typedef struct {
    int lfd;
    int port;
    char *response;                 /* the whole raw HTTP response */
    size_t response_len;
    char head[8192];                /* request line and headers as received */
    uint8_t *body;                  /* request body as received */
    size_t body_len;
    pthread_t thread;
    int joined;
} canned_t;

static size_t content_length(const char *head)
{
    const char *p = head;
    while ((p = strchr(p, '\n')) != NULL) {
        p++;
        if (strncasecmp(p, "Content-Length:", 15) == 0)
            return (size_t)strtoull(p + 15, NULL, 10);
    }
    return 0;
}

static void *canned_main(void *arg)
{
    canned_t *s = arg;
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    size_t n = 0;
    char *end = NULL;
    while (!end && n + 1 < sizeof(s->head)) {
        ssize_t k = read(fd, s->head + n, sizeof(s->head) - 1 - n);
        if (k <= 0)
            goto close_fd;
        n += (size_t)k;
        s->head[n] = '\0';
        end = strstr(s->head, "\r\n\r\n");
    }
    if (!end)
        goto close_fd;
    size_t head_len = (size_t)(end - s->head) + 4;
    size_t want = content_length(s->head);
    s->body = malloc(want + 1);
    size_t have = n - head_len;
    memcpy(s->body, s->head + head_len, have);
    s->head[head_len] = '\0';
    while (have < want) {
        ssize_t k = read(fd, s->body + have, want - have);
        if (k <= 0)
            break;
        have += (size_t)k;
    }
    s->body_len = have;
    for (size_t off = 0; off < s->response_len;) {
        ssize_t k = send(fd, s->response + off, s->response_len - off, MSG_NOSIGNAL);
        if (k <= 0)
            break;
        off += (size_t)k;
    }
    shutdown(fd, SHUT_WR);
    /* Wait for the client to close, so that it reads the whole response first. */
    char sink[256];
    while (read(fd, sink, sizeof(sink)) > 0) {
    }
close_fd:
    close(fd);
    return NULL;
}

/* Starts a server that answers one request with status, extra headers and body. */
static canned_t *canned_start(int status, const char *headers, const void *body, size_t len)
{
    canned_t *s = calloc(1, sizeof(*s));
    ck_assert_ptr_nonnull(s);
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(s->lfd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(s->lfd, 4), 0);
    socklen_t alen = sizeof(a);
    ck_assert_int_eq(getsockname(s->lfd, (struct sockaddr *)&a, &alen), 0);
    s->port = ntohs(a.sin_port);

    char head[1024];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d X\r\n%sContent-Length: %zu\r\nConnection: close\r\n\r\n",
                      status, headers, len);
    s->response = malloc((size_t)hl + len);
    memcpy(s->response, head, (size_t)hl);
    if (len)
        memcpy(s->response + hl, body, len);
    s->response_len = (size_t)hl + len;
    ck_assert_int_eq(pthread_create(&s->thread, NULL, canned_main, s), 0);
    return s;
}

/* Waits for the server to have answered (its recorded request is then readable). */
static void canned_wait(canned_t *s)
{
    if (!s->joined)
        pthread_join(s->thread, NULL);
    s->joined = 1;
}

/* Waits for the server and frees it. */
static void canned_join(canned_t *s)
{
    canned_wait(s);
    close(s->lfd);
    free(s->response);
    free(s->body);
    free(s);
}

static char *url_of(const canned_t *s, const char *path)
{
    char *u = malloc(256);
    snprintf(u, 256, "http://127.0.0.1:%d%s", s->port, path);
    return u;
}

/* ---- documents ---------------------------------------------------------------------------- */

START_TEST(doc_add_find_at_meta)
{
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[4] = {7, 8, 9, 10};
    tf_doc_t *doc = sample_doc(TF_COPY, w, b);

    ck_assert_uint_eq(tf_doc_count(doc), 2);
    const tf_tensor_t *t0 = tf_doc_at(doc, 0);
    ck_assert_str_eq(t0->name, "w");
    ck_assert_int_eq(t0->dtype, TF_F32);
    ck_assert_int_eq(t0->rank, 2);
    ck_assert_int_eq(t0->shape[0], 2);
    ck_assert_int_eq(t0->shape[1], 3);
    ck_assert_uint_eq(t0->nbytes, sizeof(w));
    ck_assert_mem_eq(t0->data, w, sizeof(w));
    ck_assert_ptr_eq(tf_doc_find(doc, "w"), t0);
    const tf_tensor_t *tb = tf_doc_find(doc, "b");
    ck_assert_ptr_nonnull(tb);
    ck_assert_ptr_eq(tf_doc_at(doc, 1), tb);
    ck_assert_ptr_null(tf_doc_at(doc, 2));
    ck_assert_ptr_null(tf_doc_find(doc, "nope"));
    ck_assert_str_eq(tf_doc_meta(doc, "format"), "pt");
    ck_assert_ptr_null(tf_doc_meta(doc, "absent"));
    ck_assert_int_eq(tf_doc_set_meta(doc, "format", "np"), TF_OK);
    ck_assert_str_eq(tf_doc_meta(doc, "format"), "np");
    tf_doc_free(doc);
}
END_TEST

START_TEST(doc_copy_vs_borrow)
{
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[4] = {7, 8, 9, 10};
    tf_doc_t *copied = sample_doc(TF_COPY, w, b);
    tf_doc_t *borrowed = sample_doc(TF_BORROW, w, b);

    ck_assert_ptr_ne(tf_doc_find(copied, "w")->data, w);
    ck_assert_ptr_eq(tf_doc_find(borrowed, "w")->data, w);
    w[0] = 42;
    ck_assert_float_eq(((const float *)tf_doc_find(copied, "w")->data)[0], 1);
    ck_assert_float_eq(((const float *)tf_doc_find(borrowed, "w")->data)[0], 42);
    tf_doc_free(copied);
    tf_doc_free(borrowed);
}
END_TEST

START_TEST(doc_encode_decode_round_trip)
{
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[4] = {7, 8, 9, 10};
    tf_doc_t *doc = sample_doc(TF_BORROW, w, b);
    int64_t none[1] = {0};
    ck_assert_int_eq(tf_doc_add(doc, "empty", TF_U8, 1, none, NULL, 0, TF_COPY), TF_OK);
    double pi = 3.25;
    ck_assert_int_eq(tf_doc_add(doc, "scalar", TF_F64, 0, NULL, &pi, 8, TF_COPY), TF_OK);

    void *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(tf_doc_encode(doc, &buf, &len), TF_OK);
    ck_assert_uint_gt(len, 8 + sizeof(w) + sizeof(b) + 8);

    for (unsigned flags = TF_COPY; flags <= TF_BORROW; flags++) {
        tf_doc_t *back = NULL;
        ck_assert_int_eq(tf_doc_decode(buf, len, flags, &back), TF_OK);
        ck_assert_uint_eq(tf_doc_count(back), 4);
        const tf_tensor_t *tw = tf_doc_find(back, "w");
        ck_assert_ptr_nonnull(tw);
        ck_assert_int_eq(tw->dtype, TF_F32);
        ck_assert_int_eq(tw->rank, 2);
        ck_assert_int_eq(tw->shape[1], 3);
        ck_assert_mem_eq(tw->data, w, sizeof(w));
        const uint8_t *p = tw->data, *lo = buf, *hi = lo + len;
        if (flags == TF_BORROW)
            ck_assert(p >= lo && p < hi);
        else
            ck_assert(p < lo || p >= hi);
        ck_assert_mem_eq(tf_doc_find(back, "b")->data, b, sizeof(b));
        ck_assert_uint_eq(tf_doc_find(back, "empty")->nbytes, 0);
        ck_assert_int_eq(tf_doc_find(back, "scalar")->rank, 0);
        ck_assert_mem_eq(tf_doc_find(back, "scalar")->data, &pi, 8);
        ck_assert_str_eq(tf_doc_meta(back, "format"), "pt");
        tf_doc_free(back);
    }
    free(buf);
    tf_doc_free(doc);
}
END_TEST

START_TEST(doc_encode_header_then_data)
{
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[4] = {7, 8, 9, 10};
    tf_doc_t *doc = sample_doc(TF_COPY, w, b);
    void *whole = NULL, *hdr = NULL;
    size_t wlen = 0, hlen = 0;

    ck_assert_int_eq(tf_doc_encode(doc, &whole, &wlen), TF_OK);
    ck_assert_int_eq(tf_doc_encode_header(doc, &hdr, &hlen), TF_OK);
    ck_assert_uint_eq(hlen % 8, 0);
    ck_assert_uint_eq(wlen, hlen + sizeof(w) + sizeof(b));
    ck_assert_mem_eq(whole, hdr, hlen);
    ck_assert_mem_eq((uint8_t *)whole + hlen, w, sizeof(w));
    ck_assert_mem_eq((uint8_t *)whole + hlen + sizeof(w), b, sizeof(b));
    free(whole);
    free(hdr);
    tf_doc_free(doc);
}
END_TEST

/* A document built in one buffer: its header, then each tensor, zeroed, exactly the bytes
 * tf_doc_encode gives; writable through tf_doc_writable (reflected in what it encodes);
 * closed to new tensors and metadata; an invalid layout refused. */
START_TEST(doc_packed_layout)
{
    int64_t s23[2] = {2, 3}, s4[1] = {4}, bad[1] = {-1};
    tf_tensor_spec_t specs[2] = {{"w", TF_F32, 2, s23}, {"b", TF_I32, 1, s4}};
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_doc_new_packed(specs, 2, &doc), TF_OK);
    ck_assert_uint_eq(tf_doc_count(doc), 2);
    const tf_tensor_t *w = tf_doc_find(doc, "w"), *b = tf_doc_find(doc, "b");
    ck_assert_ptr_nonnull(w);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(w->nbytes, 24);
    ck_assert_uint_eq(b->nbytes, 16);
    ck_assert_ptr_eq((const uint8_t *)w->data + 24, b->data);     /* one piece */
    static const uint8_t zero[24];
    ck_assert_mem_eq(w->data, zero, 24);
    float *wv = tf_doc_writable(doc, 0);
    int32_t *bv = tf_doc_writable(doc, 1);
    ck_assert_ptr_eq(wv, w->data);
    ck_assert_ptr_null(tf_doc_writable(doc, 2));
    for (int i = 0; i < 6; i++)
        wv[i] = (float)i + 0.5f;
    for (int i = 0; i < 4; i++)
        bv[i] = -i;
    void *enc = NULL, *hdr = NULL;
    size_t len = 0, hlen = 0;
    ck_assert_int_eq(tf_doc_encode(doc, &enc, &len), TF_OK);
    ck_assert_int_eq(tf_doc_encode_header(doc, &hdr, &hlen), TF_OK);
    ck_assert_uint_eq(len, hlen + 40);
    ck_assert_mem_eq((const uint8_t *)w->data - hlen, enc, len);  /* the buffer is the body */
    tf_doc_t *back = NULL;
    ck_assert_int_eq(tf_doc_decode(enc, len, 0, &back), TF_OK);
    ck_assert_mem_eq(tf_doc_find(back, "b")->data, bv, 16);
    tf_doc_free(back);
    free(enc);
    free(hdr);
    float more[1] = {1};
    int64_t s1[1] = {1};
    ck_assert_int_eq(tf_doc_add(doc, "more", TF_F32, 1, s1, more, 4, TF_COPY), TF_EINVAL);
    ck_assert_int_eq(tf_doc_set_meta(doc, "k", "v"), TF_EINVAL);
    tf_doc_free(doc);
    /* invalid layouts, and what is not built in place */
    tf_tensor_spec_t neg = {"n", TF_F32, 1, bad}, noname = {NULL, TF_F32, 1, s4};
    doc = NULL;
    ck_assert_int_eq(tf_doc_new_packed(&neg, 1, &doc), TF_EINVAL);
    ck_assert_int_eq(tf_doc_new_packed(&noname, 1, &doc), TF_EINVAL);
    ck_assert_int_eq(tf_doc_new_packed(specs, 2, NULL), TF_EINVAL);
    ck_assert_ptr_null(doc);
    doc = tf_doc_new();
    ck_assert_int_eq(tf_doc_add(doc, "w", TF_F32, 1, s1, more, 4, TF_BORROW), TF_OK);
    ck_assert_ptr_null(tf_doc_writable(doc, 0));
    tf_doc_free(doc);
    /* none at all: a header alone */
    ck_assert_int_eq(tf_doc_new_packed(NULL, 0, &doc), TF_OK);
    ck_assert_uint_eq(tf_doc_count(doc), 0);
    tf_doc_free(doc);
}
END_TEST

START_TEST(doc_add_rejects)
{
    float w[6] = {0};
    int64_t s23[2] = {2, 3}, neg[2] = {-2, -3};
    tf_doc_t *doc = tf_doc_new();

    ck_assert_int_eq(tf_doc_add(doc, "w", TF_F32, 2, s23, w, sizeof(w), TF_COPY), TF_OK);
    /* duplicate name */
    ck_assert_int_eq(tf_doc_add(doc, "w", TF_F32, 2, s23, w, sizeof(w), TF_COPY), TF_EINVAL);
    /* nbytes mismatch */
    ck_assert_int_eq(tf_doc_add(doc, "x", TF_F32, 2, s23, w, sizeof(w) - 4, TF_COPY),
                     TF_EINVAL);
    ck_assert_int_eq(tf_doc_add(doc, "x", TF_F64, 2, s23, w, sizeof(w), TF_COPY), TF_EINVAL);
    /* bad rank */
    ck_assert_int_eq(tf_doc_add(doc, "x", TF_F32, -1, s23, w, sizeof(w), TF_COPY), TF_EINVAL);
    ck_assert_int_eq(tf_doc_add(doc, "x", TF_F32, TF_MAX_RANK + 1, s23, w, sizeof(w), TF_COPY),
                     TF_EINVAL);
    ck_assert_int_eq(tf_doc_add(doc, "x", TF_F32, 2, NULL, w, sizeof(w), TF_COPY), TF_EINVAL);
    /* negative dims, bad dtype, missing data, bad flags, bad names */
    ck_assert_int_eq(tf_doc_add(doc, "x", TF_F32, 2, neg, w, sizeof(w), TF_COPY), TF_EINVAL);
    ck_assert_int_eq(tf_doc_add(doc, "x", (tf_dtype_t)99, 2, s23, w, sizeof(w), TF_COPY),
                     TF_EINVAL);
    ck_assert_int_eq(tf_doc_add(doc, "x", TF_F32, 2, s23, NULL, sizeof(w), TF_COPY), TF_EINVAL);
    ck_assert_int_eq(tf_doc_add(doc, "x", TF_F32, 2, s23, w, sizeof(w), 7), TF_EINVAL);
    ck_assert_int_eq(tf_doc_add(doc, NULL, TF_F32, 2, s23, w, sizeof(w), TF_COPY), TF_EINVAL);
    ck_assert_int_ne(tf_doc_add(doc, "", TF_F32, 2, s23, w, sizeof(w), TF_COPY), TF_OK);
    ck_assert_int_ne(tf_doc_add(doc, "__metadata__", TF_F32, 2, s23, w, sizeof(w), TF_COPY),
                     TF_OK);
    ck_assert_int_eq(tf_doc_add(NULL, "x", TF_F32, 2, s23, w, sizeof(w), TF_COPY), TF_EINVAL);
    /* a size that overflows */
    int64_t huge[3] = {INT64_MAX, INT64_MAX, 4};
    ck_assert_int_ne(tf_doc_add(doc, "x", TF_F32, 3, huge, w, sizeof(w), TF_COPY), TF_OK);
    /* nothing was added by the failures */
    ck_assert_uint_eq(tf_doc_count(doc), 1);
    ck_assert_int_eq(tf_doc_set_meta(doc, NULL, "v"), TF_EINVAL);
    ck_assert_int_eq(tf_doc_set_meta(doc, "k", NULL), TF_EINVAL);
    tf_doc_free(doc);
}
END_TEST

START_TEST(doc_decode_rejects)
{
    static const char junk[] = "definitely not safetensors";
    static const char bad_json[] = "\x08\0\0\0\0\0\0\0{\"w\": 1}";
    tf_doc_t *doc = NULL;
    /* a header length far beyond the cap */
    ck_assert_int_eq(tf_doc_decode(junk, sizeof(junk), TF_COPY, &doc), TF_ETOOBIG);
    ck_assert_ptr_null(doc);
    ck_assert_int_eq(tf_doc_decode(bad_json, sizeof(bad_json) - 1, TF_COPY, &doc), TF_EPROTO);
    ck_assert_int_eq(tf_doc_decode(bad_json, sizeof(bad_json) - 1, TF_BORROW, &doc), TF_EPROTO);
    ck_assert_ptr_null(doc);
    ck_assert_int_eq(tf_doc_decode(junk, 0, TF_BORROW, &doc), TF_EPROTO);
    ck_assert_int_eq(tf_doc_decode(NULL, 5, TF_BORROW, &doc), TF_EINVAL);
    ck_assert_int_eq(tf_doc_decode(junk, sizeof(junk), 9, &doc), TF_EINVAL);

    /* a valid document cut short */
    float w[6] = {0};
    int32_t b[4] = {0};
    tf_doc_t *src = sample_doc(TF_COPY, w, b);
    void *buf;
    size_t len;
    ck_assert_int_eq(tf_doc_encode(src, &buf, &len), TF_OK);
    ck_assert_int_ne(tf_doc_decode(buf, len - 1, TF_BORROW, &doc), TF_OK);
    ck_assert_int_ne(tf_doc_decode(buf, 7, TF_BORROW, &doc), TF_OK);
    ck_assert_ptr_null(doc);
    /* _msg says what is wrong, and is empty on success */
    char why[200] = "x";
    ck_assert_int_eq(tf_doc_decode_msg(bad_json, sizeof(bad_json) - 1, TF_BORROW, &doc, why,
                                       sizeof why), TF_EPROTO);
    ck_assert_msg(strstr(why, "'w'") != NULL, "%s", why);
    ck_assert_int_eq(tf_doc_decode_msg(junk, sizeof(junk), TF_BORROW, &doc, why, 12), TF_ETOOBIG);
    ck_assert_uint_eq(strlen(why), 11);                         /* cut to msg_len */
    ck_assert_int_eq(tf_doc_decode_msg(buf, len, TF_BORROW, &doc, why, sizeof why), TF_OK);
    ck_assert_str_eq(why, "");
    tf_doc_free(doc);
    doc = NULL;
    ck_assert_int_eq(tf_doc_decode_msg(buf, len - 1, TF_BORROW, &doc, NULL, 0), TF_EPROTO);
    free(buf);
    tf_doc_free(src);
}
END_TEST

START_TEST(free_null_is_noop)
{
    tf_doc_free(NULL);
    tf_client_free(NULL);
    tf_list_free(NULL, 0);
    ck_assert_uint_eq(tf_doc_count(NULL), 0);
    ck_assert_ptr_null(tf_doc_at(NULL, 0));
    ck_assert_ptr_null(tf_doc_find(NULL, "x"));
    ck_assert_ptr_null(tf_client_last(NULL));
}
END_TEST

/* ---- names -------------------------------------------------------------------------------- */

static const struct {
    tf_status_t st;
    const char *name;
    const char *text;
} all_statuses[] = {
#define X(n, v, h, s) {TF_##n, "TF_" #n, s},
    TF_STATUS_MAP(X)
#undef X
};

START_TEST(status_names_and_texts)
{
    size_t n = sizeof(all_statuses) / sizeof(all_statuses[0]);
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_eq(tf_err_name(all_statuses[i].st), all_statuses[i].name);
        ck_assert_str_eq(tf_strerror(all_statuses[i].st), all_statuses[i].text);
        ck_assert_uint_gt(strlen(tf_strerror(all_statuses[i].st)), 0);
        for (size_t j = 0; j < i; j++)
            ck_assert_int_ne(all_statuses[i].st, all_statuses[j].st);
    }
    ck_assert_str_eq(tf_err_name((tf_status_t)-999), "TF_EUNKNOWN");
    ck_assert_str_eq(tf_strerror((tf_status_t)-999), "unknown status");
    ck_assert_str_eq(tf_err_name((tf_status_t)7), "TF_EUNKNOWN");
}
END_TEST

START_TEST(status_names_match_proto)
{
    /* The wire names the server sends map onto the same values here. */
#define X(n, v, h, s)                                                    \
    do {                                                                 \
        ck_assert_int_eq((int)TF_##n, (int)TFP_##n);                     \
        ck_assert_str_eq(tf_err_name(TF_##n), tfp_status_name(TFP_##n)); \
    } while (0);
    TFP_STATUS_MAP(X)
#undef X
}
END_TEST

START_TEST(dtype_names)
{
    static const struct {
        tf_dtype_t dt;
        const char *name;
        size_t size;
    } all[] = {
        {TF_F64, "F64", 8}, {TF_F32, "F32", 4}, {TF_F16, "F16", 2}, {TF_BF16, "BF16", 2},
        {TF_F8_E4M3, "F8_E4M3", 1}, {TF_F8_E5M2, "F8_E5M2", 1}, {TF_I64, "I64", 8},
        {TF_I32, "I32", 4}, {TF_I16, "I16", 2}, {TF_I8, "I8", 1}, {TF_U64, "U64", 8},
        {TF_U32, "U32", 4}, {TF_U16, "U16", 2}, {TF_U8, "U8", 1}, {TF_BOOL, "BOOL", 1},
        {TF_F8_E8M0, "F8_E8M0", 1}, {TF_F4, "F4", 0}, {TF_F6_E2M3, "F6_E2M3", 0},
        {TF_F6_E3M2, "F6_E3M2", 0}, {TF_F8_E4M3FNUZ, "F8_E4M3FNUZ", 1},
        {TF_F8_E5M2FNUZ, "F8_E5M2FNUZ", 1}, {TF_C64, "C64", 8},
    };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        tf_dtype_t back;
        ck_assert_str_eq(tf_dtype_name(all[i].dt), all[i].name);
        ck_assert_uint_eq(tf_dtype_size(all[i].dt), all[i].size);
        ck_assert_int_eq(tf_dtype_from_name(all[i].name, &back), TF_OK);
        ck_assert_int_eq(back, all[i].dt);
    }
    tf_dtype_t dt = TF_U8;
    ck_assert_uint_eq(tf_dtype_bits(TF_F4), 4);            /* packed: two per byte */
    ck_assert_uint_eq(tf_dtype_bits(TF_F6_E3M2), 6);
    ck_assert_uint_eq(tf_dtype_bits(TF_C64), 64);
    ck_assert_ptr_null(tf_dtype_name((tf_dtype_t)22));
    ck_assert_ptr_null(tf_dtype_name((tf_dtype_t)-1));
    ck_assert_uint_eq(tf_dtype_size((tf_dtype_t)22), 0);
    ck_assert_uint_eq(tf_dtype_bits((tf_dtype_t)22), 0);
    ck_assert_int_eq(tf_dtype_from_name("f32", &dt), TF_EINVAL);
    ck_assert_int_eq(tf_dtype_from_name("F32 ", &dt), TF_EINVAL);
    ck_assert_int_eq(tf_dtype_from_name("", &dt), TF_EINVAL);
    ck_assert_int_eq(tf_dtype_from_name(NULL, &dt), TF_EINVAL);
    ck_assert_int_eq(dt, TF_U8);
}
END_TEST

/* ---- client without a server --------------------------------------------------------------- */

START_TEST(client_bad_urls)
{
    static const char *const bad[] = {
        "garbage", "", "ftp://127.0.0.1/v1/tensors/w", "http://", "://x", "http//x/y",
        "file:///etc/passwd",
    };
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tf_doc_t *doc = NULL;
        ck_assert_msg(tf_get(c, bad[i], 0, &doc) == TF_EURL, "get %s", bad[i]);
        ck_assert_ptr_null(doc);
        const tf_result_t *r = tf_client_last(c);
        ck_assert_int_eq(r->status, TF_EURL);
        ck_assert_str_eq(r->op, "get");
        ck_assert_int_eq(r->http_status, 0);
        ck_assert_uint_gt(strlen(r->error), 0);
    }
    char *json = NULL;
    tf_entry_t *e = NULL;
    size_t n = 0;
    ck_assert_int_eq(tf_get(c, NULL, 0, &(tf_doc_t *){NULL}), TF_EURL);
    ck_assert_int_eq(tf_delete(c, "nope"), TF_EURL);
    ck_assert_int_eq(tf_list(c, "not a url", &e, &n), TF_EURL);
    ck_assert_str_eq(tf_client_last(c)->op, "list");
    ck_assert_int_eq(tf_info(c, "gopher://x", &json), TF_EURL);
    ck_assert_str_eq(tf_client_last(c)->op, "info");
    ck_assert_ptr_null(json);
    tf_client_free(c);
}
END_TEST

START_TEST(client_bad_arguments)
{
    tf_client_t *c;
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_new(NULL), TF_EINVAL);
    ck_assert_int_eq(tf_fetch(c, "http://127.0.0.1:1/x", NULL, NULL), TF_EINVAL);
    ck_assert_int_eq(tf_get(c, "http://127.0.0.1:1/x", 0, NULL), TF_EINVAL);
    ck_assert_int_eq(tf_get(c, "http://127.0.0.1:1/x", -5, &doc), TF_EINVAL);
    ck_assert_int_eq(tf_put(c, "http://127.0.0.1:1/x", NULL), TF_EINVAL);
    ck_assert_int_eq(tf_list(c, "http://127.0.0.1:1", NULL, NULL), TF_EINVAL);
    ck_assert_int_eq(tf_info(c, "http://127.0.0.1:1", NULL), TF_EINVAL);
    ck_assert_int_eq(tf_get(NULL, "http://127.0.0.1:1/x", 0, &doc), TF_EINVAL);
    tf_client_free(c);
}
END_TEST

START_TEST(client_user_and_request_ids)
{
    tf_client_t *c;
    char long_id[200];
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_user(c, "alice.B-1_2"), TF_OK);
    ck_assert_int_eq(tf_client_set_user(c, "bad user"), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_user(c, ""), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_user(c, "a/b"), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_user(c, "x:y"), TF_EINVAL);
    memset(long_id, 'u', 129);
    long_id[129] = '\0';
    ck_assert_int_eq(tf_client_set_user(c, long_id), TF_EINVAL);
    long_id[128] = '\0';
    ck_assert_int_eq(tf_client_set_user(c, long_id), TF_OK);
    ck_assert_int_eq(tf_client_set_user(c, NULL), TF_OK);
    ck_assert_int_eq(tf_client_set_user(NULL, "a"), TF_EINVAL);

    ck_assert_int_eq(tf_client_set_request_id(c, "bad id"), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_request_id(c, "retry:42"), TF_OK);

    /* The id set is used by the next request only; later ones get fresh unique ids. */
    tf_doc_t *doc = NULL;
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/tensors/w", td_closed_port());
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_ECONNECT);
    ck_assert_str_eq(tf_client_last(c)->request_id, "retry:42");
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_ECONNECT);
    char first[129];
    snprintf(first, sizeof(first), "%s", tf_client_last(c)->request_id);
    ck_assert(tfp_request_id_valid(first));
    ck_assert_str_ne(first, "retry:42");
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_ECONNECT);
    ck_assert(tfp_request_id_valid(tf_client_last(c)->request_id));
    ck_assert_str_ne(tf_client_last(c)->request_id, first);
    /* Made ids: the client's 16 hex digits, '-', then a count that goes up by one. */
    const char *second = tf_client_last(c)->request_id;
    ck_assert_uint_eq(strspn(first, "0123456789abcdef"), 16);
    ck_assert_int_eq(first[16], '-');
    ck_assert_int_eq(strncmp(first, second, 17), 0);
    ck_assert_uint_eq(strspn(first + 17, "0123456789"), strlen(first + 17));
    ck_assert_uint_eq(strtoull(second + 17, NULL, 10), strtoull(first + 17, NULL, 10) + 1);
    tf_client_free(c);
}
END_TEST

START_TEST(client_connection_refused)
{
    tf_client_t *c;
    char url[64], base[64];
    int port = td_closed_port();
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/tensors/w", port);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", port);
    ck_assert_int_eq(tf_client_new(&c), TF_OK);

    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_ECONNECT);
    ck_assert_ptr_null(doc);
    const tf_result_t *r = tf_client_last(c);
    ck_assert_int_eq(r->status, TF_ECONNECT);
    ck_assert_int_eq(r->http_status, 0);
    ck_assert_str_eq(r->op, "get");
    ck_assert_str_eq(r->transport, "http");
    ck_assert(tfp_request_id_valid(r->request_id));
    ck_assert_uint_gt(strlen(r->error), 0);
    ck_assert_uint_eq(r->bytes_received, 0);
    ck_assert(r->seconds >= 0.0 && r->seconds < 10.0);

    float w[6] = {0};
    int32_t b[4] = {0};
    tf_doc_t *in = sample_doc(TF_BORROW, w, b);
    ck_assert_int_eq(tf_put(c, url, in), TF_ECONNECT);
    ck_assert_str_eq(tf_client_last(c)->op, "put");
    ck_assert_int_eq(tf_fetch(c, url, in, &doc), TF_ECONNECT);
    ck_assert_str_eq(tf_client_last(c)->op, "call");
    ck_assert_int_eq(tf_fetch(c, url, NULL, &doc), TF_ECONNECT);
    ck_assert_str_eq(tf_client_last(c)->op, "get");
    ck_assert_int_eq(tf_fetch(c, url, in, NULL), TF_ECONNECT);
    ck_assert_str_eq(tf_client_last(c)->op, "put");
    ck_assert_int_eq(tf_delete(c, url), TF_ECONNECT);
    ck_assert_str_eq(tf_client_last(c)->op, "delete");
    tf_entry_t *e = NULL;
    size_t n = 0;
    ck_assert_int_eq(tf_list(c, base, &e, &n), TF_ECONNECT);
    char *json = NULL;
    ck_assert_int_eq(tf_info(c, base, &json), TF_ECONNECT);
    ck_assert_ptr_null(json);
    tf_doc_free(in);
    tf_client_free(c);
}
END_TEST

/* A TFETCH_TRANSPORT that names no policy is refused, not read as auto: every request fails
 * saying so until the program sets a policy itself. */
START_TEST(client_bad_transport_env_is_refused)
{
    tf_client_t *c;
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/tensors/w", td_closed_port());
    setenv("TFETCH_TRANSPORT", "bogus", 1);
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_EINVAL);
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "TFETCH_TRANSPORT='bogus'"));
    ck_assert_int_eq(tf_delete(c, url), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_transport(c, TF_TRANSPORT_HTTP), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_ECONNECT);   /* now it goes out */
    tf_client_free(c);
    setenv("TFETCH_TRANSPORT", "HTTP", 1);                  /* case does not matter */
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_ECONNECT);
    tf_client_free(c);
    unsetenv("TFETCH_TRANSPORT");
}
END_TEST

/* TFETCH_UPGRADE names eager or lazy; another value is refused like a bad TFETCH_TRANSPORT,
 * until the program sets the upgrade policy itself. */
START_TEST(client_bad_upgrade_env_is_refused)
{
    tf_client_t *c;
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/tensors/w", td_closed_port());
    setenv("TFETCH_UPGRADE", "sometimes", 1);
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_EINVAL);
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "TFETCH_UPGRADE='sometimes'"));
    ck_assert_int_eq(tf_client_set_upgrade_policy(c, 0), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_upgrade_policy(c, 3), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_upgrade_policy(NULL, TF_UPGRADE_LAZY), TF_EINVAL);
    ck_assert_int_eq(tf_client_set_upgrade_policy(c, TF_UPGRADE_LAZY), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_ECONNECT);   /* now it goes out */
    /* Lazy: the first request does not negotiate, and its fallback says why. */
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->fallback, "upgrade policy lazy"));
    tf_client_free(c);
    setenv("TFETCH_UPGRADE", "EAGER", 1);                   /* case does not matter */
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_ECONNECT);
    tf_client_free(c);
    unsetenv("TFETCH_UPGRADE");
}
END_TEST

START_TEST(client_timeout)
{
    /* A listener that never accepts: the connection completes, no answer ever comes. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(fd, 4), 0);
    socklen_t len = sizeof(a);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/tensors/w", ntohs(a.sin_port));

    tf_client_t *c;
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    tf_client_set_timeout(c, 200);
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_ETIMEDOUT);
    const tf_result_t *r = tf_client_last(c);
    /* The whole request's time, the upgrade negotiated first (same host) included: a
     * quarter of the timeout went to it, the rest to the HTTP try. */
    ck_assert_msg(r->seconds >= 0.18 && r->seconds < 5.0, "seconds %.3f", r->seconds);
    /* wait_ms lengthens the timeout by the wait */
    ck_assert_int_eq(tf_get(c, url, 300, &doc), TF_ETIMEDOUT);
    ck_assert(tf_client_last(c)->seconds >= 0.45);
    tf_client_free(c);
    close(fd);
}
END_TEST

/* ---- client against canned responses -------------------------------------------------------- */

START_TEST(http_get_decodes_and_sends_ids)
{
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[4] = {7, 8, 9, 10};
    tf_doc_t *src = sample_doc(TF_COPY, w, b);
    void *body;
    size_t blen;
    ck_assert_int_eq(tf_doc_encode(src, &body, &blen), TF_OK);
    canned_t *s = canned_start(200,
                               "Content-Type: application/x-safetensors\r\n"
                               "Tfetch-Request-Id: echoed-7\r\nTfetch-Transport: http\r\n",
                               body, blen);
    char *url = url_of(s, "/v1/tensors/w");

    tf_client_t *c;
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_user(c, "alice"), TF_OK);
    ck_assert_int_eq(tf_client_set_request_id(c, "req-1"), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 250, &doc), TF_OK);
    canned_join(s);

    ck_assert_uint_eq(tf_doc_count(doc), 2);
    ck_assert_mem_eq(tf_doc_find(doc, "w")->data, w, sizeof(w));
    ck_assert_str_eq(tf_doc_meta(doc, "format"), "pt");
    const tf_result_t *r = tf_client_last(c);
    ck_assert_int_eq(r->status, TF_OK);
    ck_assert_int_eq(r->http_status, 200);
    ck_assert_str_eq(r->request_id, "echoed-7");
    ck_assert_str_eq(r->transport, "http");
    ck_assert_str_eq(r->op, "get");
    ck_assert_uint_eq(r->bytes_received, blen);
    ck_assert_str_eq(r->error, "");
    tf_doc_free(doc);
    tf_doc_free(src);
    free(body);
    free(url);
    tf_client_free(c);
}
END_TEST

/* One client, requests to different URLs in turn (the client keeps its last URL's split): each
 * goes to its own server and path, a bad URL in between is still refused. */
START_TEST(client_each_url_split_anew)
{
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[4] = {7, 8, 9, 10};
    tf_doc_t *src = sample_doc(TF_COPY, w, b);
    void *body;
    size_t blen;
    ck_assert_int_eq(tf_doc_encode(src, &body, &blen), TF_OK);
    const char *hdrs = "Content-Type: application/x-safetensors\r\n";
    canned_t *s1 = canned_start(200, hdrs, body, blen);
    canned_t *s2 = canned_start(200, hdrs, body, blen);
    char *u1 = url_of(s1, "/v1/tensors/w"), *u2 = url_of(s2, "/v1/tensors/other");
    tf_client_t *c;
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_get(c, u1, 0, &doc), TF_OK);
    canned_wait(s1);
    tf_doc_free(doc);
    doc = NULL;
    ck_assert_int_eq(tf_get(c, "garbage", 0, &doc), TF_EURL);
    ck_assert_int_eq(tf_get(c, u1 + 1, 0, &doc), TF_EURL);
    ck_assert_int_eq(tf_get(c, u2, 0, &doc), TF_OK);
    canned_wait(s2);
    ck_assert_ptr_nonnull(strstr(s1->head, "GET /v1/tensors/w HTTP/1.1\r\n"));
    ck_assert_ptr_nonnull(strstr(s2->head, "GET /v1/tensors/other HTTP/1.1\r\n"));
    ck_assert_int_eq(tf_get(c, NULL, 0, &(tf_doc_t *){NULL}), TF_EURL);
    canned_join(s1);
    canned_join(s2);
    tf_doc_free(doc);
    tf_doc_free(src);
    free(body);
    free(u1);
    free(u2);
    tf_client_free(c);
}
END_TEST

/* The request the canned server recorded, checked in the test's thread. */
START_TEST(http_request_headers_and_body)
{
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[4] = {7, 8, 9, 10};
    tf_doc_t *in = sample_doc(TF_BORROW, w, b);
    void *expect;
    size_t elen;
    ck_assert_int_eq(tf_doc_encode(in, &expect, &elen), TF_OK);
    canned_t *s = canned_start(201, "", NULL, 0);
    char *url = url_of(s, "/v1/tensors/w");

    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_client_set_user(c, "bob"), TF_OK);
    ck_assert_int_eq(tf_client_set_request_id(c, "put-1"), TF_OK);
    ck_assert_int_eq(tf_put(c, url, in), TF_OK);
    const tf_result_t *r = tf_client_last(c);
    ck_assert_int_eq(r->http_status, 201);
    ck_assert_str_eq(r->request_id, "put-1");   /* not echoed: the one sent */
    ck_assert_uint_eq(r->bytes_sent, elen);
    canned_wait(s);

    ck_assert_msg(strncmp(s->head, "PUT /v1/tensors/w HTTP/1.1\r\n", 28) == 0, "%s", s->head);
    ck_assert_ptr_nonnull(strcasestr(s->head, "\r\nTfetch-User: bob\r\n"));
    ck_assert_ptr_nonnull(strcasestr(s->head, "\r\nTfetch-Request-Id: put-1\r\n"));
    ck_assert_ptr_nonnull(strcasestr(s->head, "\r\nContent-Type: application/x-safetensors\r\n"));
    ck_assert_ptr_null(strcasestr(s->head, "100-continue"));
    ck_assert_uint_eq(s->body_len, elen);
    ck_assert_mem_eq(s->body, expect, elen);
    canned_join(s);
    free(expect);
    free(url);
    tf_doc_free(in);
    tf_client_free(c);
}
END_TEST

START_TEST(http_get_wait_query_and_generated_id)
{
    static const char err[] = "{\"error\":\"no such tensor: w\",\"code\":\"TF_ENOTFOUND\"}";
    canned_t *s = canned_start(404, "Content-Type: application/json\r\n", err, strlen(err));
    char *url = url_of(s, "/v1/tensors/w");
    tf_client_t *c;
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 1500, &doc), TF_ENOTFOUND);
    canned_wait(s);
    ck_assert_msg(strncmp(s->head, "GET /v1/tensors/w?wait=1500 HTTP/1.1\r\n", 38) == 0, "%s",
                  s->head);
    const char *rid = strcasestr(s->head, "\r\nTfetch-Request-Id: ");
    ck_assert_ptr_nonnull(rid);
    ck_assert_ptr_null(strcasestr(s->head, "Tfetch-User"));
    char sent[129];
    ck_assert_int_eq(sscanf(rid + 21, "%128[^\r]", sent), 1);
    ck_assert_str_eq(sent, tf_client_last(c)->request_id);

    const tf_result_t *r = tf_client_last(c);
    ck_assert_int_eq(r->http_status, 404);
    ck_assert_str_eq(r->error, "no such tensor: w");
    ck_assert_ptr_null(doc);
    canned_join(s);
    free(url);
    tf_client_free(c);
}
END_TEST

START_TEST(http_error_codes_map_by_name)
{
    static const struct {
        int http;
        const char *code;
        tf_status_t st;
    } cases[] = {
        {400, "TF_EPROTO", TF_EPROTO},     {413, "TF_ETOOBIG", TF_ETOOBIG},
        {415, "TF_EMEDIATYPE", TF_EMEDIATYPE}, {503, "TF_EBUSY", TF_EBUSY},
        {507, "TF_ENOSPACE", TF_ENOSPACE}, {500, "TF_EWHATEVER", TF_EINTERNAL},
    };
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char body[128];
        int n = snprintf(body, sizeof(body), "{\"error\": \"boom %zu\", \"code\": \"%s\"}", i,
                         cases[i].code);
        canned_t *s = canned_start(cases[i].http, "Content-Type: application/json\r\n", body,
                                   (size_t)n);
        char *url = url_of(s, "/v1/tensors/x");
        ck_assert_int_eq(tf_delete(c, url), cases[i].st);
        canned_join(s);
        const tf_result_t *r = tf_client_last(c);
        ck_assert_int_eq(r->http_status, cases[i].http);
        char want[32];
        snprintf(want, sizeof(want), "boom %zu", i);
        ck_assert_str_eq(r->error, want);
        free(url);
    }
    tf_client_free(c);
}
END_TEST

START_TEST(http_non_json_error_is_ehttp)
{
    static const char html[] = "<html>Bad Gateway</html>\n";
    canned_t *s = canned_start(502, "Content-Type: text/html\r\n", html, sizeof(html) - 1);
    char *url = url_of(s, "/v1/tensors/x");
    tf_client_t *c;
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_EHTTP);
    canned_join(s);
    ck_assert_int_eq(tf_client_last(c)->http_status, 502);
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "502"));
    free(url);

    /* An error status with no body at all */
    s = canned_start(418, "", NULL, 0);
    url = url_of(s, "/v1/tensors/x");
    ck_assert_int_eq(tf_delete(c, url), TF_EHTTP);
    canned_join(s);
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "418"));
    free(url);
    tf_client_free(c);
}
END_TEST

START_TEST(http_bad_body_is_eproto)
{
    static const char junk[] = "\x10\0\0\0\0\0\0\0{\"w\": 1}        ";
    canned_t *s = canned_start(200, "Content-Type: application/x-safetensors\r\n", junk,
                               sizeof(junk) - 1);
    char *url = url_of(s, "/v1/tensors/w");
    tf_client_t *c;
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_EPROTO);
    canned_join(s);
    ck_assert_ptr_null(doc);
    ck_assert_int_eq(tf_client_last(c)->status, TF_EPROTO);
    ck_assert_int_eq(tf_client_last(c)->http_status, 200);
    ck_assert_uint_gt(strlen(tf_client_last(c)->error), 0);
    free(url);

    /* an empty 200 is not a document either */
    s = canned_start(200, "Content-Type: application/x-safetensors\r\n", NULL, 0);
    url = url_of(s, "/v1/tensors/w");
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_EPROTO);
    canned_join(s);
    free(url);
    tf_client_free(c);
}
END_TEST

START_TEST(http_raw_response)
{
    float v[6] = {1, 2, 3, 4, 5, 6};
    canned_t *s = canned_start(200,
                               "Content-Type: application/octet-stream\r\n"
                               "Tfetch-Dtype: F32\r\nTfetch-Shape: 2,3\r\n",
                               v, sizeof(v));
    char *url = url_of(s, "/v1/tensors/act");
    tf_client_t *c;
    tf_doc_t *doc = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_OK);
    canned_join(s);
    ck_assert_uint_eq(tf_doc_count(doc), 1);
    const tf_tensor_t *t = tf_doc_find(doc, "act");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, TF_F32);
    ck_assert_int_eq(t->rank, 2);
    ck_assert_mem_eq(t->data, v, sizeof(v));
    tf_doc_free(doc);
    free(url);
    tf_client_free(c);
}
END_TEST

START_TEST(http_exchange_posts_doc)
{
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[4] = {7, 8, 9, 10};
    tf_doc_t *in = sample_doc(TF_BORROW, w, b);
    void *body;
    size_t blen;
    ck_assert_int_eq(tf_doc_encode(in, &body, &blen), TF_OK);
    canned_t *s = canned_start(200, "Content-Type: application/x-safetensors\r\n", body, blen);
    char *url = url_of(s, "/v1/call/echo");
    tf_client_t *c;
    tf_doc_t *out = NULL;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_fetch(c, url, in, &out), TF_OK);
    canned_wait(s);
    ck_assert_msg(strncmp(s->head, "POST /v1/call/echo HTTP/1.1\r\n", 29) == 0, "%s", s->head);
    ck_assert_uint_eq(s->body_len, blen);
    ck_assert_mem_eq(s->body, body, blen);
    ck_assert_str_eq(tf_client_last(c)->op, "call");
    ck_assert_mem_eq(tf_doc_find(out, "b")->data, b, sizeof(b));
    canned_join(s);
    tf_doc_free(out);
    tf_doc_free(in);
    free(body);
    free(url);
    tf_client_free(c);
}
END_TEST

START_TEST(http_list_and_info)
{
    static const char listing[] =
        "{\"tensors\":[{\"name\":\"w\",\"bytes\":123,\"tensors\":[{\"name\":\"w\",\"dtype\":"
        "\"F32\",\"shape\":[2,2]}]},{\"name\":\"pair\",\"bytes\":456,\"tensors\":[{\"name\":"
        "\"a\",\"dtype\":\"U8\",\"shape\":[1]},{\"name\":\"b\",\"dtype\":\"U8\",\"shape\":[1]}]}]}";
    canned_t *s = canned_start(200, "Content-Type: application/json\r\n", listing,
                               sizeof(listing) - 1);
    char *base = url_of(s, "/ignored/path?q=1");
    tf_client_t *c;
    tf_entry_t *e = NULL;
    size_t n = 0;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    ck_assert_int_eq(tf_list(c, base, &e, &n), TF_OK);
    canned_wait(s);
    ck_assert_msg(strncmp(s->head, "GET /v1/tensors HTTP/1.1\r\n", 26) == 0, "%s", s->head);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(e[0].name, "w");
    ck_assert_uint_eq(e[0].bytes, 123);
    ck_assert_uint_eq(e[0].ntensors, 1);
    ck_assert_str_eq(e[1].name, "pair");
    ck_assert_uint_eq(e[1].ntensors, 2);
    tf_list_free(e, n);
    canned_join(s);
    free(base);

    static const char info[] = "{\"version\":\"0.1.0\",\"transports\":[\"http\"]}";
    s = canned_start(200, "Content-Type: application/json\r\n", info, sizeof(info) - 1);
    base = url_of(s, "");
    char *json = NULL;
    ck_assert_int_eq(tf_info(c, base, &json), TF_OK);
    canned_join(s);
    ck_assert_str_eq(json, info);
    free(json);
    free(base);

    /* a listing that is not one */
    s = canned_start(200, "Content-Type: application/json\r\n", "[1,2]", 5);
    base = url_of(s, "");
    ck_assert_int_eq(tf_list(c, base, &e, &n), TF_EPROTO);
    canned_join(s);
    free(base);
    tf_client_free(c);
}
END_TEST

static int abort_progress(uint64_t dn, uint64_t dt, uint64_t un, uint64_t ut, void *ud)
{
    int *calls = ud;
    (*calls)++;
    return dn > 0;
}

START_TEST(http_progress_abort_and_max_body)
{
    size_t big = 4u << 20;
    uint8_t *body = calloc(1, big);
    canned_t *s = canned_start(200, "Content-Type: application/x-safetensors\r\n", body, big);
    char *url = url_of(s, "/v1/tensors/big");
    tf_client_t *c;
    tf_doc_t *doc = NULL;
    int calls = 0;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    tf_client_set_progress(c, abort_progress, &calls);
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_ECANCELED);
    ck_assert_int_gt(calls, 0);
    canned_join(s);
    free(url);

    tf_client_set_progress(c, NULL, NULL);
    tf_client_set_max_body(c, 1u << 20);
    s = canned_start(200, "Content-Type: application/x-safetensors\r\n", body, big);
    url = url_of(s, "/v1/tensors/big");
    ck_assert_int_eq(tf_get(c, url, 0, &doc), TF_ETOOBIG);
    canned_join(s);
    ck_assert_ptr_null(doc);
    free(url);
    free(body);
    tf_client_free(c);
}
END_TEST

/* ---- the HTTP engine under the client ------------------------------------------------------ */

typedef struct {
    int calls;
    tfx_hc_status_t st;
} done_t;

static void count_done(tfx_hc_req_t *req, tfx_hc_status_t st, void *ud)
{
    done_t *d = ud;
    d->calls++;
    d->st = st;
}

/* A listener that never accepts: requests to it stay in flight. */
static int silent_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(fd, 8), 0);
    socklen_t len = sizeof(a);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

START_TEST(engine_callback_once_and_segments)
{
    canned_t *s = canned_start(200, "Tfetch-Shape: 2,3\r\nTfetch-Dtype: F32\r\n", "hello", 5);
    char *url = url_of(s, "/v1/call/echo");
    tfx_hc_t *hc;
    tfx_hc_req_t *req;
    done_t d = {0};
    ck_assert_int_eq(tfx_hc_new(&hc), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_new(&req), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_set_method(req, "POST"), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_set_url(req, url), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_add_body(req, "abc", 3), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_add_body(req, "", 0), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_add_body(req, "defgh", 5), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_add_header(req, "X-Test", "1"), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_add_header(req, "Bad\r\nName", "1"), TFX_HC_EINVAL);
    ck_assert_int_eq(tfx_hc_start(hc, req, count_done, &d), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_running(req), 1);
    ck_assert_int_eq(tfx_hc_start(hc, req, count_done, &d), TFX_HC_EINVAL);   /* already */
    ck_assert_int_eq(tfx_hc_drive(hc, req, -1), TFX_HC_OK);
    ck_assert_int_eq(d.calls, 1);
    ck_assert_int_eq(d.st, TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_running(hc), 0);
    ck_assert_int_eq(tfx_hc_drive(hc, req, -1), TFX_HC_OK);   /* done already: no second call */
    ck_assert_int_eq(d.calls, 1);
    const tfx_hc_resp_t *r = tfx_hc_req_response(req);
    ck_assert_int_eq(r->status, 200);
    ck_assert_str_eq(tfx_hc_resp_header(r, "Tfetch-Shape"), "2,3");
    ck_assert_str_eq(tfx_hc_resp_header(r, "tfetch-dtype"), "F32");    /* any case */
    ck_assert_str_eq(tfx_hc_resp_header(r, "X-Absent"), "");
    ck_assert_uint_eq(r->body_len, 5);
    ck_assert_str_eq((const char *)r->body, "hello");
    ck_assert_uint_eq(r->bytes_sent, 8);
    canned_wait(s);
    ck_assert_uint_eq(s->body_len, 8);
    ck_assert_mem_eq(s->body, "abcdefgh", 8);
    ck_assert_ptr_nonnull(strstr(s->head, "\r\nX-Test: 1\r\n"));
    size_t len = 0;
    uint8_t *body = tfx_hc_req_take_body(req, &len);
    ck_assert_uint_eq(len, 5);
    ck_assert_ptr_null(tfx_hc_req_response(req)->body);
    free(body);
    canned_join(s);
    free(url);
    tfx_hc_req_free(req);
    tfx_hc_free(hc);
}
END_TEST

START_TEST(engine_start_error_never_calls_back)
{
    tfx_hc_t *hc;
    tfx_hc_req_t *req;
    done_t d = {0};
    ck_assert_int_eq(tfx_hc_new(&hc), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_new(&req), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_start(hc, req, count_done, &d), TFX_HC_EINVAL);   /* no URL */
    ck_assert_int_eq(tfx_hc_req_set_url(req, "http://127.0.0.1:1/"), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_start(hc, req, NULL, &d), TFX_HC_EINVAL);
    ck_assert_int_eq(tfx_hc_poll(hc, 0), 0);
    ck_assert_int_eq(d.calls, 0);
    tfx_hc_req_free(req);
    tfx_hc_free(hc);
    tfx_hc_req_free(NULL);
    tfx_hc_free(NULL);
}
END_TEST

START_TEST(engine_cancel_drive_timeout_and_free)
{
    int port;
    int lfd = silent_listener(&port);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/tensors/w", port);
    tfx_hc_t *hc;
    tfx_hc_req_t *a, *b;
    done_t da = {0}, db = {0};
    ck_assert_int_eq(tfx_hc_new(&hc), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_new(&a), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_new(&b), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_set_url(a, url), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_set_url(b, url), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_start(hc, a, count_done, &da), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_start(hc, b, count_done, &db), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_running(hc), 2);

    ck_assert_int_eq(tfx_hc_drive(hc, a, 100), TFX_HC_EAGAIN);
    ck_assert_int_eq(da.calls, 0);
    tfx_hc_cancel(hc, a);
    ck_assert_int_eq(da.calls, 1);
    ck_assert_int_eq(da.st, TFX_HC_ECANCELED);
    ck_assert_int_eq(tfx_hc_req_running(a), 0);
    tfx_hc_cancel(hc, a);                   /* not running: a no-op */
    ck_assert_int_eq(da.calls, 1);
    ck_assert_int_eq(tfx_hc_poll(hc, 10), 1);

    /* freeing the engine completes what is left, once */
    tfx_hc_free(hc);
    ck_assert_int_eq(db.calls, 1);
    ck_assert_int_eq(db.st, TFX_HC_ECANCELED);
    tfx_hc_req_free(a);
    tfx_hc_req_free(b);
    close(lfd);
}
END_TEST

START_TEST(engine_two_at_once)
{
    canned_t *s1 = canned_start(200, "", "one", 3);
    canned_t *s2 = canned_start(404, "", "two!", 4);
    char *u1 = url_of(s1, "/a"), *u2 = url_of(s2, "/b");
    tfx_hc_t *hc;
    tfx_hc_req_t *r1, *r2;
    done_t d1 = {0}, d2 = {0};
    ck_assert_int_eq(tfx_hc_new(&hc), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_new(&r1), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_new(&r2), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_set_url(r1, u1), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_req_set_url(r2, u2), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_start(hc, r1, count_done, &d1), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_start(hc, r2, count_done, &d2), TFX_HC_OK);
    for (int i = 0; i < 100 && tfx_hc_poll(hc, 100) > 0; i++) {
    }
    ck_assert_int_eq(d1.calls, 1);
    ck_assert_int_eq(d2.calls, 1);
    ck_assert_int_eq(d1.st, TFX_HC_OK);
    ck_assert_int_eq(d2.st, TFX_HC_OK);        /* an HTTP error is not a transport error */
    ck_assert_int_eq(tfx_hc_req_response(r1)->status, 200);
    ck_assert_int_eq(tfx_hc_req_response(r2)->status, 404);
    ck_assert_str_eq((const char *)tfx_hc_req_response(r2)->body, "two!");
    canned_join(s1);
    canned_join(s2);
    free(u1);
    free(u2);
    tfx_hc_req_free(r1);
    tfx_hc_req_free(r2);
    tfx_hc_free(hc);
}
END_TEST

START_TEST(engine_connection_cap_and_wait)
{
    tfx_hc_t *hc;
    ck_assert_int_eq(tfx_hc_new(&hc), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_set_max_host_connections(hc, 0), TFX_HC_EINVAL);
    ck_assert_int_eq(tfx_hc_set_max_host_connections(hc, -3), TFX_HC_EINVAL);
    ck_assert_int_eq(tfx_hc_set_max_host_connections(NULL, 4), TFX_HC_EINVAL);
    ck_assert_int_eq(tfx_hc_set_max_host_connections(hc, 1), TFX_HC_OK);
    ck_assert_int_eq(tfx_hc_set_max_host_connections(hc, 64), TFX_HC_OK);
    /* nothing running: waiting returns at once instead of sleeping out the timeout */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tfx_hc_wait(hc, 5000);
    tfx_hc_wait(NULL, 5000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_int_lt(t1.tv_sec - t0.tv_sec, 2);
    tfx_hc_free(hc);
}
END_TEST

START_TEST(engine_url_build)
{
    char *out = NULL;
    ck_assert_int_eq(tfx_hc_url_build("http://h:1/v1/tensors/w", NULL, "wait=5", &out), TFX_HC_OK);
    ck_assert_str_eq(out, "http://h:1/v1/tensors/w?wait=5");
    free(out);
    ck_assert_int_eq(tfx_hc_url_build("http://h:1/x?a=1#frag", NULL, "wait=5", &out), TFX_HC_OK);
    ck_assert_str_eq(out, "http://h:1/x?a=1&wait=5");
    free(out);
    ck_assert_int_eq(tfx_hc_url_build("HTTPS://h/deep/path?q=1", "/v1/info", NULL, &out),
                     TFX_HC_OK);
    ck_assert_str_eq(out, "https://h/v1/info");
    free(out);
    ck_assert_int_eq(tfx_hc_url_build("h:1/x", NULL, NULL, &out), TFX_HC_EURL);
    ck_assert_int_eq(tfx_hc_url_build("ftp://h/x", NULL, NULL, &out), TFX_HC_EURL);
    ck_assert_int_eq(tfx_hc_url_build("http:///x", NULL, NULL, &out), TFX_HC_EURL);
    ck_assert_int_eq(tfx_hc_url_build(NULL, NULL, NULL, &out), TFX_HC_EINVAL);
    ck_assert_str_eq(tfx_hc_strerror(TFX_HC_EURL), "bad URL");
    ck_assert_str_eq(tfx_hc_strerror((tfx_hc_status_t)99), "unknown status");
}
END_TEST

/* ---- the ABI: versioned structs, tf_free, tf_version ----------------------------------- */

/* Where the last field of the 0.1 layouts ends: a 0.1 caller's struct may be exactly this
 * long (the library must not read or write past it, whatever fields it has grown since). */
#define REQUEST_0_1 (offsetof(tf_request_t, transport) + sizeof(tf_transport_t))
#define TRANSPORT_INFO_0_1 (offsetof(tf_transport_info_t, retry_ms) + sizeof(long))

START_TEST(abi_version_and_free)
{
    ck_assert_ptr_nonnull(tf_version());
    ck_assert_str_eq(tf_version(), TF_VERSION);         /* this build's library and header */
    ck_assert_str_eq(TF_VERSION, PACKAGE_VERSION);      /* configure's version is the header's */
    tf_free(NULL);
    float w[6] = {0};
    int32_t b[4] = {0};
    tf_doc_t *doc = sample_doc(TF_BORROW, w, b);
    void *buf = NULL, *hdr = NULL;
    size_t len = 0, hlen = 0;
    ck_assert_int_eq(tf_doc_encode(doc, &buf, &len), TF_OK);
    ck_assert_int_eq(tf_doc_encode_header(doc, &hdr, &hlen), TF_OK);
    tf_free(buf);
    tf_free(hdr);
    tf_doc_free(doc);
}
END_TEST

/* Starts rq (a GET of url) and waits for it; the status it ends with. */
static tf_status_t start_and_wait(tf_client_t *c, const tf_request_t *rq)
{
    tf_fetch_t *f = NULL;
    tf_status_t st = tf_fetch_start(c, rq, NULL, NULL, &f);
    if (st != TF_OK)
        return st;
    st = tf_fetch_wait(f, 10000);
    tf_fetch_free(f);
    return st;
}

START_TEST(abi_request_size)
{
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[4] = {7, 8, 9, 10};
    tf_doc_t *src = sample_doc(TF_COPY, w, b);
    void *body;
    size_t blen;
    ck_assert_int_eq(tf_doc_encode(src, &body, &blen), TF_OK);
    canned_t *s = canned_start(200, "Content-Type: application/x-safetensors\r\n", body, blen);
    char *url = url_of(s, "/v1/tensors/w");
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);

    /* A 0.1 caller's struct, allocated exactly as long as its fields: every field is read
     * (the request id, the last-but-one, reaches the server), nothing past it (ASan). */
    ck_assert_uint_ge(sizeof(tf_request_t), REQUEST_0_1);
    tf_request_t fields = {.size = REQUEST_0_1, .op = TF_OP_GET, .url = url,
                           .request_id = "abi-old", .transport = TF_TRANSPORT_HTTP};
    unsigned char *old = malloc(REQUEST_0_1);
    ck_assert_ptr_nonnull(old);
    memcpy(old, &fields, REQUEST_0_1);
    tf_fetch_t *f = NULL;
    ck_assert_int_eq(tf_fetch_start(c, (const tf_request_t *)(void *)old, NULL, NULL, &f), TF_OK);
    ck_assert_int_eq(tf_fetch_wait(f, 10000), TF_OK);
    tf_doc_t *doc = tf_fetch_take_doc(f);
    ck_assert_uint_eq(tf_doc_count(doc), 2);
    tf_doc_free(doc);
    tf_fetch_free(f);
    canned_wait(s);
    ck_assert_ptr_nonnull(strcasestr(s->head, "\r\nTfetch-Request-Id: abi-old\r\n"));
    canned_join(s);
    free(old);

    /* A size below the 0.1 layout is refused before anything starts. */
    int port = td_closed_port();
    char refused[64];
    snprintf(refused, sizeof(refused), "http://127.0.0.1:%d/v1/tensors/w", port);
    tf_request_t rq = {.size = offsetof(tf_request_t, transport), .op = TF_OP_GET,
                       .url = refused};
    ck_assert_int_eq(tf_fetch_start(c, &rq, NULL, NULL, &f), TF_EINVAL);
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "size"));
    rq.size = 1;
    ck_assert_int_eq(tf_fetch_start(c, &rq, NULL, NULL, &f), TF_EINVAL);

    /* Size 0 and TF_REQUEST_INIT: this header's fields. */
    rq.size = 0;
    ck_assert_int_eq(start_and_wait(c, &rq), TF_ECONNECT);
    tf_request_t init = TF_REQUEST_INIT;
    ck_assert_uint_eq(init.size, sizeof(tf_request_t));
    init.op = TF_OP_GET;
    init.url = refused;
    ck_assert_int_eq(start_and_wait(c, &init), TF_ECONNECT);

    /* A newer caller's longer struct: fields this library does not know are fine while
     * they are zero, refused once one is set. */
    size_t big = sizeof(tf_request_t) + 16;
    unsigned char *newer = calloc(1, big);
    ck_assert_ptr_nonnull(newer);
    memcpy(newer, &init, sizeof(init));
    ((tf_request_t *)newer)->size = big;
    ck_assert_int_eq(start_and_wait(c, (tf_request_t *)newer), TF_ECONNECT);
    newer[big - 1] = 1;
    ck_assert_int_eq(tf_fetch_start(c, (tf_request_t *)newer, NULL, NULL, &f), TF_EINVAL);
    ck_assert_ptr_nonnull(strstr(tf_client_last(c)->error, "does not know"));
    free(newer);

    tf_client_free(c);
    tf_doc_free(src);
    free(body);
    free(url);
}
END_TEST

START_TEST(abi_transport_info_size)
{
    tf_client_t *c;
    ck_assert_int_eq(tf_client_new(&c), TF_OK);
    const char *url = "http://127.0.0.1:1/v1/tensors/w";

    /* Size 0: the 0.1 fields, and size then says how many bytes were filled. */
    tf_transport_info_t ti;
    memset(&ti, 0, sizeof(ti));
    ck_assert_int_eq(tf_client_transport_info(c, url, &ti), TF_OK);
    ck_assert_uint_eq(ti.size, TRANSPORT_INFO_0_1);
    ck_assert_str_eq(ti.transport, "http");
    ck_assert_int_eq(ti.offered, -1);
    tf_transport_info_t init = TF_TRANSPORT_INFO_INIT;
    ck_assert_uint_eq(init.size, sizeof(tf_transport_info_t));
    ck_assert_int_eq(tf_client_transport_info(c, url, &init), TF_OK);
    ck_assert_str_eq(init.transport, "http");
    ck_assert_int_eq(init.same_host, -1);           /* nothing known of that origin */
    ck_assert_int_eq(init.server_uid, -1);
    ck_assert_uint_eq(init.protocol_min, 0);
    ck_assert_str_eq(init.shm, "");

    /* A 0.1 caller's struct, exactly as long as its fields: nothing written past (ASan). */
    unsigned char *old = calloc(1, TRANSPORT_INFO_0_1);
    ck_assert_ptr_nonnull(old);
    size_t size = TRANSPORT_INFO_0_1;
    memcpy(old, &size, sizeof(size));
    ck_assert_int_eq(tf_client_transport_info(c, url, (tf_transport_info_t *)(void *)old), TF_OK);
    memset(&ti, 0, sizeof(ti));
    memcpy(&ti, old, TRANSPORT_INFO_0_1);
    ck_assert_uint_eq(ti.size, TRANSPORT_INFO_0_1);
    ck_assert_str_eq(ti.transport, "http");
    ck_assert_int_eq(ti.offered, -1);
    free(old);

    /* Below the 0.1 layout: refused, nothing written. */
    memset(&ti, 0x5a, sizeof(ti));
    ti.size = offsetof(tf_transport_info_t, retry_ms);
    ck_assert_int_eq(tf_client_transport_info(c, url, &ti), TF_EINVAL);
    ck_assert_uint_eq(ti.size, offsetof(tf_transport_info_t, retry_ms));
    ck_assert_int_eq((unsigned char)ti.transport[0], 0x5a);

    /* A newer caller's longer struct: the library fills what it knows, leaves the rest as
     * it was and says how much it filled. */
    size_t big = sizeof(tf_transport_info_t) + 16;
    unsigned char *newer = malloc(big);
    ck_assert_ptr_nonnull(newer);
    memset(newer, 0xaa, big);
    ((tf_transport_info_t *)newer)->size = big;
    ck_assert_int_eq(tf_client_transport_info(c, url, (tf_transport_info_t *)newer), TF_OK);
    ck_assert_uint_eq(((tf_transport_info_t *)newer)->size, sizeof(tf_transport_info_t));
    ck_assert_str_eq(((tf_transport_info_t *)newer)->transport, "http");
    for (size_t i = sizeof(tf_transport_info_t); i < big; i++)
        ck_assert_int_eq(newer[i], 0xaa);
    free(newer);
    tf_client_free(c);
}
END_TEST

static void http_lazy(void)
{
    setenv("TFETCH_UPGRADE", "lazy", 1);
}

Suite *suite_client(void)
{
    Suite *s = suite_create("client");

    TCase *docs = tcase_create("doc");
    tcase_add_test(docs, doc_add_find_at_meta);
    tcase_add_test(docs, doc_copy_vs_borrow);
    tcase_add_test(docs, doc_encode_decode_round_trip);
    tcase_add_test(docs, doc_encode_header_then_data);
    tcase_add_test(docs, doc_packed_layout);
    tcase_add_test(docs, doc_add_rejects);
    tcase_add_test(docs, doc_decode_rejects);
    tcase_add_test(docs, free_null_is_noop);
    suite_add_tcase(s, docs);

    TCase *names = tcase_create("names");
    tcase_add_test(names, status_names_and_texts);
    tcase_add_test(names, status_names_match_proto);
    tcase_add_test(names, dtype_names);
    suite_add_tcase(s, names);

    TCase *offline = tcase_create("offline");
    tcase_add_test(offline, client_bad_urls);
    tcase_add_test(offline, client_bad_arguments);
    tcase_add_test(offline, client_user_and_request_ids);
    tcase_add_test(offline, client_connection_refused);
    tcase_add_test(offline, client_timeout);
    tcase_add_test(offline, client_bad_transport_env_is_refused);
    tcase_add_test(offline, client_bad_upgrade_env_is_refused);
    tcase_set_timeout(offline, 30);
    suite_add_tcase(s, offline);

    TCase *http = tcase_create("http");
    /* These check HTTP framing against a scripted server on loopback: its first answer is
     * the request's, so the library must not negotiate an upgrade first. */
    tcase_add_checked_fixture(http, http_lazy, NULL);
    tcase_add_test(http, http_get_decodes_and_sends_ids);
    tcase_add_test(http, client_each_url_split_anew);
    tcase_add_test(http, http_request_headers_and_body);
    tcase_add_test(http, http_get_wait_query_and_generated_id);
    tcase_add_test(http, http_error_codes_map_by_name);
    tcase_add_test(http, http_non_json_error_is_ehttp);
    tcase_add_test(http, http_bad_body_is_eproto);
    tcase_add_test(http, http_raw_response);
    tcase_add_test(http, http_exchange_posts_doc);
    tcase_add_test(http, http_list_and_info);
    tcase_add_test(http, http_progress_abort_and_max_body);
    tcase_set_timeout(http, 30);
    suite_add_tcase(s, http);

    TCase *engine = tcase_create("engine");
    tcase_add_test(engine, engine_callback_once_and_segments);
    tcase_add_test(engine, engine_start_error_never_calls_back);
    tcase_add_test(engine, engine_cancel_drive_timeout_and_free);
    tcase_add_test(engine, engine_two_at_once);
    tcase_add_test(engine, engine_connection_cap_and_wait);
    tcase_add_test(engine, engine_url_build);
    tcase_set_timeout(engine, 30);
    suite_add_tcase(s, engine);

    TCase *abi = tcase_create("abi");
    tcase_add_test(abi, abi_version_and_free);
    tcase_add_test(abi, abi_request_size);
    tcase_add_test(abi, abi_transport_info_size);
    tcase_set_timeout(abi, 30);
    suite_add_tcase(s, abi);
    return s;
}
