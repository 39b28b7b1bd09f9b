/* fuzz_safetensors.c - libFuzzer harness for the safetensors decoder.
 *
 * Feeds each input to tfp_st_decode, and to each of its two paths alone: the direct scan must
 * decline whatever the cJSON tree refuses, and give exactly the tree's doc for whatever it
 * reads. A rejection must carry a parser status and a message;
 * TFP_ENOMEM means cJSON refused text that tfp_json_check accepted (the fuzzer does not make
 * malloc fail), so it aborts too. An accepted document is re-encoded and decoded again and
 * must come back equal, and encoding that again must give the same bytes. Owns nothing
 * between inputs; single-threaded. Build and run: see README.md beside it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const tfp_err_t *err)
{
    fprintf(stderr, "fuzz_safetensors: %s (%s)\n", what, err != NULL ? err->msg : "");
    abort();
}

static void same(const tfp_doc_t *a, const tfp_doc_t *b)
{
    if (a->n != b->n || a->nmeta != b->nmeta ||
        (a->nmeta || a->meta_object) != (b->nmeta || b->meta_object))
        fail("tensor or metadata count changed", NULL);
    for (size_t i = 0; i < a->n; i++) {
        const tfp_tensor_t *x = &a->t[i], *y = &b->t[i];

        if (strcmp(x->name, y->name) != 0 || x->dtype != y->dtype || x->rank != y->rank ||
            x->nbytes != y->nbytes)
            fail("tensor changed", NULL);
        for (int d = 0; d < x->rank; d++) {
            if (x->shape[d] != y->shape[d])
                fail("shape changed", NULL);
        }
        if (x->nbytes > 0 && memcmp(x->data, y->data, (size_t)x->nbytes) != 0)
            fail("data changed", NULL);
    }
    for (size_t i = 0; i < a->nmeta; i++) {
        if (strcmp(a->meta[i].key, b->meta[i].key) != 0 ||
            strcmp(a->meta[i].value, b->meta[i].value) != 0)
            fail("metadata changed", NULL);
    }
}

/* The two paths agree with each other under lim, and with tfp_st_decode's *st and doc
 * (st NULL: it was not run under lim; then only the paths are compared). */
static void paths_agree(const uint8_t *data, size_t size, const tfp_st_limits_t *lim,
                        const tfp_status_t *decoded, const tfp_doc_t *doc)
{
    tfp_doc_t *tree = NULL, *scan = NULL;
    tfp_err_t err;
    tfp_status_t tst = tfp_st_decode_path(data, size, lim, TFP_ST_PATH_TREE, &tree, &err);
    tfp_status_t sst = tfp_st_decode_path(data, size, lim, TFP_ST_PATH_SCAN, &scan, &err);
    tfp_status_t st = decoded ? *decoded : tst;

    if (!decoded)
        doc = tree;
    if (tst != st)
        fail("the tree alone decides otherwise", &err);
    if (sst == TFP_OK && st != TFP_OK)
        fail("the scan accepted what the tree refuses", NULL);
    if (sst != TFP_OK && sst != TFP_EAGAIN && sst != st)
        fail("the scan refused (it may only decline)", &err);
    if (sst != TFP_OK && scan != NULL)
        fail("scan output set on failure", NULL);
    if (tree != NULL)
        same(doc, tree);
    if (scan != NULL) {
        same(doc, scan);
        for (size_t i = 0; i < tree->n; i++)     /* the tree's placement, not doc's */
            if (tree->t[i].offset != scan->t[i].offset || tree->t[i].data != scan->t[i].data)
                fail("the scan placed a tensor elsewhere", NULL);
    }
    tfp_doc_free(scan);
    tfp_doc_free(tree);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tfp_doc_t *doc = NULL, *again = NULL, *third = NULL;
    uint8_t *buf = NULL, *buf2 = NULL;
    size_t len, len2;
    tfp_err_t err;
    tfp_status_t st;

    st = tfp_st_decode(data, size, NULL, &doc, &err);
    paths_agree(data, size, NULL, &st, doc);
    if (size > 0) {     /* and under a tensor limit around the scan's own cap of 16, from
                         * the last byte (data, usually: it varies without breaking the doc) */
        tfp_st_limits_t lim = {0, 1 + data[size - 1] % 18u};
        paths_agree(data, size, &lim, NULL, NULL);
    }
    if (st != TFP_OK) {
        if (doc != NULL)
            fail("output set on failure", &err);
        if (st != TFP_EPROTO && st != TFP_ETOOBIG && st != TFP_ERANGE)
            fail("unexpected status", &err);
        if (err.code != st || err.msg[0] == '\0')
            fail("rejection without a message", &err);
        return 0;
    }
    if (tfp_st_encode(doc, &buf, &len, &err) != TFP_OK)
        fail("re-encoding failed", &err);
    if (tfp_st_decode(buf, len, NULL, &again, &err) != TFP_OK)
        fail("re-decoding failed", &err);
    same(doc, again);
    if (tfp_st_encode(again, &buf2, &len2, &err) != TFP_OK)
        fail("second re-encoding failed", &err);
    if (len != len2 || memcmp(buf, buf2, len) != 0)
        fail("encoding is not stable", NULL);
    if (tfp_st_decode(buf2, len2, NULL, &third, &err) != TFP_OK)
        fail("third decode failed", &err);
    same(again, third);
    tfp_doc_free(third);
    tfp_doc_free(again);
    tfp_doc_free(doc);
    free(buf2);
    free(buf);
    return 0;
}
