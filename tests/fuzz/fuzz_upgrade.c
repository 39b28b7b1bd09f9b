/* fuzz_upgrade.c - libFuzzer harness for what a client trusts of an upgrade answer: the
 * answer's JSON (tfp_up_resp_parse) and the UCX worker address inside it (tfp_ucxaddr_parse,
 * proto/ucxaddr.c), the bytes that once reached UCX unchecked and aborted clients.
 *
 * Each input goes to tfp_ucxaddr_parse as raw address bytes and, as text, to
 * tfp_up_resp_parse; an accepted answer's worker address goes to tfp_ucxaddr_parse too. A
 * rejection must carry TFP_EPROTO (TFP_ETOOBIG for an oversize answer) and its message
 * prefix. An accepted address must hold what the layout allows (at most 128 entries, lengths
 * within the input), match itself, and parse exactly: its last byte cut off, or one byte
 * added, it is refused. Owns nothing between inputs; single-threaded. README.md beside it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/ucxaddr.h"
#include "proto/upgrade.h"

#define FUZZ_NAME "fuzz_upgrade"
#include "tests/fuzz/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static void address(const uint8_t *data, size_t size)
{
    tfp_ucxaddr_t a;
    tfp_err_t err;
    tfp_status_t st;

    if (size == 0)
        return;
    /* A copy of exactly size bytes: ASan sees any read past the end. */
    uint8_t *copy = malloc(size + 1);
    if (copy == NULL)
        abort();
    memcpy(copy, data, size);
    st = tfp_ucxaddr_parse(copy, size, &a, &err);
    if (st != TFP_OK) {
        rejected(st, &err, "UCX worker address: ", 0);
        free(copy);
        return;
    }
    if (a.n > TFP_UCXADDR_MAX_ENTRIES || a.ndev > TFP_UCXADDR_MAX_ENTRIES ||
        (a.version != 1 && a.version != 2))
        fail("accepted an address beyond the layout's bounds", NULL);
    size_t carried = 0;
    for (unsigned i = 0; i < a.n; i++) {
        carried += 2u + a.e[i].iface_addr_len;
        if (a.e[i].md_index > TFP_UCXADDR_MAX_MD || a.e[i].dev_index >= a.ndev)
            fail("accepted an entry out of range", NULL);
    }
    if (carried > size)
        fail("entries longer than the input", NULL);
    if (tfp_ucxaddr_match(&a, &a, &err) != TFP_OK)
        fail("an address does not match itself", &err);
    if (tfp_ucxaddr_parse(copy, size - 1, NULL, &err) != TFP_EPROTO)
        fail("accepted the address without its last byte", &err);
    copy[size] = data[size - 1];
    if (tfp_ucxaddr_parse(copy, size + 1, NULL, &err) != TFP_EPROTO)
        fail("accepted the address with a byte added", &err);
    free(copy);
}

static void response(const char *text, size_t size)
{
    tfp_up_resp_t r;
    tfp_err_t err;
    tfp_status_t st = tfp_up_resp_parse(text, size, &r, &err);

    if (st != TFP_OK) {
        rejected(st, &err, "upgrade response", 1);
        return;
    }
    if (r.upgraded) {
        if (r.worker_address == NULL || r.worker_address_len == 0 ||
            r.worker_address_len > TFP_UP_MAX_ADDR)
            fail("an upgraded answer without a bounded worker address", NULL);
        address(r.worker_address, r.worker_address_len);
    }
    tfp_up_resp_clear(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    address(data, size);
    response((const char *)data, size);
    return 0;
}
