/* fuzz_raw.c - libFuzzer harness for the raw-body headers (proto/raw.c): Tfetch-Dtype and
 * Tfetch-Shape, which describe the one tensor an application/octet-stream PUT or call
 * carries, and the document tfetchd builds from them.
 *
 * An input is up to three newline-separated fields: the Tfetch-Dtype value, the Tfetch-Shape
 * value and the body length (decimal; empty or missing: unknown, as for a chunked upload).
 * tfp_raw_check must refuse with TFP_EBADREQ, TFP_ERANGE or TFP_EUNPROC and a message, or
 * accept a known dtype, a rank in 0..TFP_MAX_RANK, dims up to 2^53 and, for a known length,
 * exactly dtype x shape bytes. The shape alone goes through tfp_raw_parse_shape as well, and
 * an accepted one must print (tfp_raw_format_shape) to a spelling that parses back equal. An
 * accepted description then takes the daemon's path (daemon/api_common.c): a document of
 * that one tensor (named "w"; fuzz_httpop checks the names a path gives it) whose
 * safetensors header must encode, and header plus a zeroed body of up to 64 KiB must decode
 * back to the same tensor. Owns nothing between inputs;
 * single-threaded. Build and run: see README.md beside it (make fuzz).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/raw.h"
#include "proto/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NFIELDS 3
#define MAX_DIM (UINT64_C(1) << 53)
#define MAX_BODY (64u << 10)

static void fail(const char *what, const tfp_err_t *err)
{
    fprintf(stderr, "fuzz_raw: %s (%s)\n", what, err != NULL ? err->msg : "");
    abort();
}

static void same_shape(int r1, const uint64_t *s1, int r2, const uint64_t *s2, const char *what)
{
    if (r1 != r2)
        fail(what, NULL);
    for (int i = 0; i < r1; i++)
        if (s1[i] != s2[i])
            fail(what, NULL);
}

/* The shape header alone: parse, print, parse again. */
static void shape_only(const char *text)
{
    uint64_t shape[TFP_MAX_RANK], again[TFP_MAX_RANK];
    char buf[TFP_MAX_RANK * 21 + 1];
    int rank, rank2;
    tfp_err_t err;
    tfp_status_t st = tfp_raw_parse_shape(text, &rank, shape, &err);

    if (st != TFP_OK) {
        if (st != TFP_EBADREQ || err.code != st || err.msg[0] == '\0')
            fail("shape refused without TFP_EBADREQ and a message", &err);
        return;
    }
    if (rank < 0 || rank > TFP_MAX_RANK)
        fail("shape rank out of range", NULL);
    for (int i = 0; i < rank; i++)
        if (shape[i] > MAX_DIM)
            fail("dim above 2^53 accepted", NULL);
    if (tfp_raw_format_shape(rank, shape, buf, sizeof buf) != 0)
        fail("formatting an accepted shape failed", NULL);
    if (tfp_raw_parse_shape(buf, &rank2, again, &err) != TFP_OK)
        fail("a printed shape does not parse", &err);
    same_shape(rank, shape, rank2, again, "shape changed in a print/parse round trip");
}

/* What api_begin_doc and api_body_doc do with an accepted raw body. */
static void as_document(const char *name, tfp_dtype_t dt, int rank, const uint64_t *shape,
                        uint64_t nbytes)
{
    tfp_doc_t *doc = tfp_doc_new(), *back = NULL;
    uint8_t *hdr = NULL, *whole;
    size_t hdr_len;
    tfp_err_t err;

    if (doc == NULL)
        return;
    if (tfp_doc_add(doc, name, dt, rank, shape, NULL, nbytes, &err) != TFP_OK)
        fail("an accepted raw body is no document", &err);
    if (tfp_st_encode_header(doc, &hdr, &hdr_len, &err) != TFP_OK)
        fail("an accepted raw body has no safetensors header", &err);
    tfp_doc_free(doc);
    if (nbytes > MAX_BODY) {
        free(hdr);
        return;
    }
    whole = calloc(1, hdr_len + (size_t)nbytes + 1);
    if (whole == NULL) {
        free(hdr);
        return;
    }
    memcpy(whole, hdr, hdr_len);
    free(hdr);
    if (tfp_st_decode(whole, hdr_len + (size_t)nbytes, NULL, &back, &err) != TFP_OK)
        fail("header + body does not decode", &err);
    if (back->n != 1 || strcmp(back->t[0].name, name) != 0 || back->t[0].dtype != dt ||
        back->t[0].nbytes != nbytes)
        fail("decoded tensor differs from the raw description", NULL);
    same_shape(rank, shape, back->t[0].rank, back->t[0].shape, "decoded shape differs");
    tfp_doc_free(back);
    free(whole);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *f[NFIELDS] = {0};
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *p = text;
    for (int i = 0; i < NFIELDS && p; i++) {
        f[i] = p;
        p = strchr(p, '\n');
        if (p)
            *p++ = '\0';
    }
    uint64_t len = TFP_RAW_LEN_UNKNOWN;
    if (f[2] && f[2][0])
        len = strtoull(f[2], NULL, 10);

    shape_only(f[1] ? f[1] : "");

    tfp_dtype_t dt;
    int rank;
    uint64_t shape[TFP_MAX_RANK], nbytes;
    tfp_err_t err;
    tfp_status_t st = tfp_raw_check(f[0], f[1], len, &dt, &rank, shape, &err);
    if (st != TFP_OK) {
        if (st != TFP_EBADREQ && st != TFP_ERANGE && st != TFP_EUNPROC)
            fail("unexpected status", &err);
        if (err.code != st || err.msg[0] == '\0')
            fail("rejection without a message", &err);
        free(text);
        return 0;
    }
    if ((unsigned)dt >= TFP_DTYPE_COUNT || rank < 0 || rank > TFP_MAX_RANK)
        fail("accepted dtype or rank out of range", NULL);
    if (tfp_shape_nbytes(dt, rank, shape, &nbytes, &err) != TFP_OK)
        fail("accepted shape has no size", &err);
    if (len != TFP_RAW_LEN_UNKNOWN && nbytes != len)
        fail("accepted a body whose length is not dtype x shape", NULL);
    as_document("w", dt, rank, shape, nbytes);
    free(text);
    return 0;
}
