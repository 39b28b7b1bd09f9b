/* fuzz_shumai.c - libFuzzer harness for the Shumai binary tensor decoder (proto/shumai.c),
 * which reads every Shumai POST /NAME body that reaches tfetchd, and for the provenance <->
 * user id mapping applied to what it decodes.
 *
 * Each input goes to tfp_shumai_decode as a whole message (with a small props cap, so the
 * TFP_ETOOBIG path is reached). A rejection must carry a parser status (TFP_EPROTO,
 * TFP_ERANGE, TFP_ETOOBIG) and a message; TFP_ENOMEM and TFP_EINVAL abort (the fuzzer never
 * makes malloc fail, and the arguments are always valid). An accepted message holds one F32
 * tensor named "tensor" whose bytes lie inside the input, and the format has one spelling per
 * value: encoding what was decoded (tfp_shumai_encode) must give back the input bytes, and
 * the header alone (tfp_shumai_encode_header) its first bytes. The input is also read as a
 * user id: one that maps to a provenance must map back to the same provenance through the
 * id Shumai would print. Owns nothing between inputs; single-threaded. Build and run: see
 * README.md beside it (make fuzz).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/shumai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PROPS 4096

static void fail(const char *what, const tfp_err_t *err)
{
    fprintf(stderr, "fuzz_shumai: %s (%s)\n", what, err != NULL ? err->msg : "");
    abort();
}

static void message(const uint8_t *data, size_t size)
{
    tfp_shumai_msg_t msg;
    tfp_err_t err;
    tfp_status_t st = tfp_shumai_decode(data, size, MAX_PROPS, &msg, &err);

    if (st != TFP_OK) {
        if (st != TFP_EPROTO && st != TFP_ERANGE && st != TFP_ETOOBIG)
            fail("unexpected status", &err);
        if (err.code != st || err.msg[0] == '\0')
            fail("rejection without a message", &err);
        return;
    }
    const tfp_doc_t *doc = msg.doc;
    if (doc == NULL || doc->n != 1 || doc->nmeta != 0)
        fail("accepted message is not one tensor", NULL);
    const tfp_tensor_t *t = &doc->t[0];
    if (strcmp(t->name, TFP_SHUMAI_TENSOR_NAME) != 0 || t->dtype != TFP_F32)
        fail("accepted tensor is not F32 'tensor'", NULL);
    if (t->nbytes > 0 && (t->data < data || t->data + t->nbytes > data + size))
        fail("tensor data outside the input", NULL);
    if (msg.props_len > MAX_PROPS || (msg.props_len > 0 && msg.props == NULL))
        fail("props above the cap or missing", NULL);
    if (msg.flags & ~TFP_SHUMAI_REQUIRES_GRAD)
        fail("undefined flag bits accepted", NULL);
    if (tfp_shumai_props_check(msg.props, msg.props_len, &err) != TFP_OK)
        fail("accepted props fail the props check", &err);
    const tfp_tensor_t *one;
    if (tfp_shumai_check_doc(doc, &one, &err) != TFP_OK || one != t)
        fail("decoded document fails the format's check", &err);

    uint8_t hdr[TFP_SHUMAI_MAX_HEADER];
    size_t hdr_len;
    if (tfp_shumai_encode_header(t->rank, t->shape, msg.provenance, msg.flags, msg.props_len,
                                 hdr, sizeof hdr, &hdr_len, &err) != TFP_OK)
        fail("encoding the header of what was decoded failed", &err);
    if (hdr_len > size || memcmp(hdr, data, hdr_len) != 0)
        fail("header re-encoding differs from the input", NULL);
    uint8_t *buf;
    size_t len;
    if (tfp_shumai_encode(t, msg.provenance, msg.flags, msg.props, msg.props_len, &buf, &len,
                          &err) != TFP_OK)
        fail("re-encoding what was decoded failed", &err);
    if (len != size || memcmp(buf, data, size) != 0)
        fail("re-encoding differs from the input", NULL);
    free(buf);

    char user[TFP_SHUMAI_USER_SIZE];
    int64_t back;
    if (tfp_shumai_provenance_to_user(msg.provenance, user)) {
        if (tfp_shumai_user_to_provenance(user, &back, &err) != TFP_OK ||
            back != msg.provenance)
            fail("provenance -> user id -> provenance changed it", &err);
    } else if (msg.provenance != TFP_SHUMAI_NO_PROVENANCE || user[0] != '\0') {
        fail("no user id for a real provenance", NULL);
    }
    tfp_shumai_msg_clear(&msg);
}

static void user_id(const uint8_t *data, size_t size)
{
    char text[64], again[TFP_SHUMAI_USER_SIZE];
    int64_t prov, back;
    tfp_err_t err;

    if (size >= sizeof text)
        return;
    memcpy(text, data, size);
    text[size] = '\0';
    tfp_status_t st = tfp_shumai_user_to_provenance(text, &prov, &err);
    if (st != TFP_OK) {
        if (st != TFP_EINVAL || err.msg[0] == '\0')
            fail("user id refused without TFP_EINVAL and a message", &err);
        return;
    }
    if (!tfp_shumai_provenance_to_user(prov, again)) {
        if (prov != TFP_SHUMAI_NO_PROVENANCE)
            fail("a parsed user id has no printed form", NULL);
        return;
    }
    if (tfp_shumai_user_to_provenance(again, &back, &err) != TFP_OK || back != prov)
        fail("user id -> provenance -> user id -> provenance changed it", &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    message(data, size);
    user_id(data, size);
    return 0;
}
