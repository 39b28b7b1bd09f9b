/* fuzz_ucxframe.c - libFuzzer harness for the UCX frame decoder and the upgrade JSON parsers.
 *
 * Each input goes to tfp_uf_decode as a frame, to tfp_sf_decode as a shm message, and as text to tfp_up_req_parse,
 * tfp_up_resp_parse, tfp_up_b64_decode and tfp_up_ident_parse (a frame starts with "TFU1"
 * and JSON with '{', so one corpus serves all of them). A rejection must carry the parser's
 * status and a message; TFP_ENOMEM and TFP_EINVAL abort (the fuzzer never makes malloc fail,
 * and the arguments are always valid). Every format has exactly one accepted encoding per
 * value, so an accepted frame must re-encode to the very input bytes, accepted base64 too,
 * and an accepted JSON document must build, parse back equal and build to the same text.
 * Owns nothing between inputs; single-threaded. Build and run: see README.md beside it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/shmframe.h"
#include "proto/ucxframe.h"
#include "proto/upgrade.h"

#define FUZZ_NAME "fuzz_ucxframe"
#include "tests/fuzz/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static void frame(const uint8_t *data, size_t size)
{
    uint8_t buf[TFP_UF_MAX_HEADER];
    tfp_uf_hdr_t h;
    tfp_err_t err;
    size_t len;
    tfp_status_t st = tfp_uf_decode(data, size, &h, &err);

    if (st != TFP_OK) {
        rejected(st, &err, "ucx frame: ", 0);
        return;
    }
    /* With flag BODY_PREFIX the body's first bytes follow the frame: the encoder writes the
     * frame alone. */
    if (size - h.prefix_len > TFP_UF_MAX_HEADER || h.prefix_len > TFP_UF_MAX_PREFIX)
        fail("accepted a frame over TFP_UF_MAX_HEADER, or a prefix over TFP_UF_MAX_PREFIX",
             NULL);
    if (tfp_uf_check(&h, &err) != TFP_OK)
        fail("a decoded header fails the check", &err);
    if (tfp_uf_encode(&h, buf, sizeof buf, &len, &err) != TFP_OK)
        fail("re-encoding failed", &err);
    if (len != size - h.prefix_len || memcmp(buf, data, len) != 0)
        fail("re-encoding differs from the input", NULL);
    /* A PART the decoder takes is taken in its place, and moves the body to its end. */
    if (h.op == TFP_UF_PART) {
        tfp_uf_parts_t t = {.seq = h.seq, .total = h.cond.total, .next = h.cond.first};
        memcpy(t.request_id, h.request_id, sizeof t.request_id);
        int small = h.cond.last + 1 < h.cond.total && h.body_len < TFP_UF_PART_MIN;
        tfp_status_t pst = tfp_uf_parts_take(&t, &h, h.body_len, &err);
        if ((pst == TFP_OK) == small || (pst == TFP_OK && t.next != h.cond.last + 1) ||
            t.next > t.total)
            fail("a decoded PART is not taken as its range says", NULL);
    }
}

static void request(const char *text, size_t size)
{
    tfp_up_req_t r, again;
    char *json, *json2;
    size_t len, len2;
    tfp_err_t err;
    tfp_status_t st = tfp_up_req_parse(text, size, &r, &err);

    if (st != TFP_OK) {
        rejected(st, &err, "upgrade request", 1);
        return;
    }
    if (tfp_up_req_build(&r, &json, &len, &err) != TFP_OK)
        fail("request: building what was parsed failed", &err);
    if (tfp_up_req_parse(json, len, &again, &err) != TFP_OK)
        fail("request: parsing what was built failed", &err);
    if (again.transports != r.transports || again.policy != r.policy ||
        again.host.pid != r.host.pid || strcmp(again.host.boot_id, r.host.boot_id) != 0 ||
        strcmp(again.host.netns, r.host.netns) != 0)
        fail("request: changed in a round trip", NULL);
    if (tfp_up_req_build(&again, &json2, &len2, &err) != TFP_OK)
        fail("request: second build failed", &err);
    if (len != len2 || memcmp(json, json2, len) != 0)
        fail("request: building is not stable", NULL);
    free(json2);
    free(json);
}

static void response(const char *text, size_t size)
{
    tfp_up_resp_t r, again;
    char *json, *json2;
    size_t len, len2;
    tfp_err_t err;
    tfp_status_t st = tfp_up_resp_parse(text, size, &r, &err);

    if (st != TFP_OK) {
        rejected(st, &err, "upgrade response", 1);
        return;
    }
    if (tfp_up_resp_build(&r, &json, &len, &err) != TFP_OK)
        fail("response: building what was parsed failed", &err);
    if (tfp_up_resp_parse(json, len, &again, &err) != TFP_OK)
        fail("response: parsing what was built failed", &err);
    if (again.upgraded != r.upgraded || strcmp(again.token, r.token) != 0 ||
        again.expires_ms != r.expires_ms || again.same_host != r.same_host ||
        again.server_pid != r.server_pid || strcmp(again.reason, r.reason) != 0 ||
        again.worker_address_len != r.worker_address_len ||
        (r.worker_address_len > 0 &&
         memcmp(again.worker_address, r.worker_address, r.worker_address_len) != 0))
        fail("response: changed in a round trip", NULL);
    if (tfp_up_resp_build(&again, &json2, &len2, &err) != TFP_OK)
        fail("response: second build failed", &err);
    if (len != len2 || memcmp(json, json2, len) != 0)
        fail("response: building is not stable", NULL);
    free(json2);
    free(json);
    tfp_up_resp_clear(&again);
    tfp_up_resp_clear(&r);
}

static void base64(const char *text, size_t size)
{
    uint8_t *d;
    size_t dlen, elen;
    char *e;
    tfp_err_t err;
    tfp_status_t st = tfp_up_b64_decode(text, size, TFP_UP_MAX_ADDR, &d, &dlen, &err);

    if (st != TFP_OK) {
        rejected(st, &err, "base64: ", 1);
        return;
    }
    e = tfp_up_b64_encode(d, dlen, &elen);
    if (e == NULL)
        fail("base64: re-encoding failed", NULL);
    if (elen != size || memcmp(e, text, size) != 0)
        fail("base64: re-encoding differs from the input", NULL);
    free(e);
    free(d);
}

static void ident(const char *text, size_t size)
{
    char buf[TFP_UP_MAX_IDENT + 1];
    tfp_up_host_t h;
    tfp_err_t err;
    tfp_status_t st = tfp_up_ident_parse(text, size, &h, &err);

    if (st != TFP_OK) {
        rejected(st, &err, "host identity: ", 0);
        return;
    }
    if (tfp_up_ident_format(&h, buf, sizeof buf, &err) != TFP_OK)
        fail("ident: formatting what was parsed failed", &err);
    if (strlen(buf) != size || memcmp(buf, text, size) != 0)
        fail("ident: formatting differs from the input", NULL);
}

/* The shm transport's messages (proto/shmframe.c): one encoding per value, too. */
static void shm_message(const uint8_t *data, size_t size)
{
    uint8_t buf[TFP_SF_MAX];
    tfp_sf_t m;
    tfp_err_t err;
    tfp_status_t st = tfp_sf_decode(data, size, &m, &err);
    if (st != TFP_OK) {
        rejected(st, &err, "shm: ", 0);
        return;
    }
    size_t len = tfp_sf_encode(&m, buf, sizeof buf, &err);
    if (len == 0)
        fail("re-encoding a shm message failed", &err);
    if (len != size || memcmp(buf, data, size) != 0)
        fail("re-encoding a shm message differs from the input", NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    shm_message(data, size);
    const char *text = (const char *)data;

    frame(data, size);
    request(text, size);
    response(text, size);
    base64(text, size);
    ident(text, size);
    return 0;
}
