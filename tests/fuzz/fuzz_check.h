/* fuzz_check.h - what the proto fuzz targets share: how a target dies on a finding, and the
 * check every rejection passes (its status, and a message that starts with the parser's own
 * prefix). Included by one target each; FUZZ_NAME names it in the message. */
#ifndef FUZZ_CHECK_H
#define FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/status.h"

#ifndef FUZZ_NAME
#error "define FUZZ_NAME (the target's name) before including fuzz_check.h"
#endif

static void fail(const char *what, const tfp_err_t *err)
{
    fprintf(stderr, FUZZ_NAME ": %s (%s)\n", what, err != NULL ? err->msg : "");
    abort();
}

static void rejected(tfp_status_t st, const tfp_err_t *err, const char *prefix, int toobig_ok)
{
    if (st != TFP_EPROTO && !(toobig_ok && st == TFP_ETOOBIG))
        fail("unexpected status", err);
    if (err->code != st || err->msg[0] == '\0' || strncmp(err->msg, prefix, strlen(prefix)) != 0)
        fail("rejection without its message", err);
}

#endif
