/* fuzz_cors.c - libFuzzer harness for proto/cors.c: the cors-origins setting and the Origin
 * header a browser (or anyone) sends, the one value tfetchd may echo back in a header.
 *
 * An input is two lines: the setting, then the Origin ("-" alone: no Origin header). The
 * parse must succeed or refuse with TFP_EINVAL and a message naming cors-origins, leaving
 * CORS off; "*" and a list never both. The check must allow only a well-formed origin: for
 * TFP_CORS_ORIGIN one listed exactly, with no control character, space or quote, so that
 * echoing it cannot split or bend a header. Owns nothing between inputs; single-threaded.
 * Build and run: see README.md beside it (make fuzz).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/cors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *origin)
{
    fprintf(stderr, "fuzz_cors: %s (origin '%s')\n", what, origin ? origin : "(none)");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *origin = strchr(text, '\n');
    if (origin)
        *origin++ = '\0';
    if (origin && strcmp(origin, "-") == 0)
        origin = NULL;

    tfp_cors_t cors;
    tfp_err_t err;
    tfp_status_t st = tfp_cors_parse(text, &cors, &err);
    if (st != TFP_OK && (st != TFP_EINVAL || !strstr(err.msg, "cors-origins")))
        fail("a refusal without TFP_EINVAL naming cors-origins", origin);
    if (st != TFP_OK && (cors.any || cors.n))
        fail("a refused setting left CORS on", origin);
    if (cors.any && cors.n)
        fail("'*' beside a list", origin);
    for (size_t i = 0; i < cors.n; i++)
        if (!tfp_cors_origin_valid(cors.origin[i]))
            fail("a listed origin is not well-formed", cors.origin[i]);

    tfp_cors_allow_t a = tfp_cors_check(&cors, origin);
    if (a != TFP_CORS_NONE) {
        if (!origin || !tfp_cors_origin_valid(origin))
            fail("a malformed origin allowed", origin);
        for (const char *p = origin; *p; p++)
            if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f || *p == '"' || *p == ',')
                fail("an allowed origin would bend the header it is echoed in", origin);
    }
    if (a == TFP_CORS_ANY && !cors.any)
        fail("'*' answered without '*' configured", origin);
    if (a == TFP_CORS_ORIGIN) {
        size_t i = 0;
        while (i < cors.n && strcmp(cors.origin[i], origin) != 0)
            i++;
        if (i == cors.n)
            fail("an origin echoed that is not listed", origin);
    }
    free(text);
    return 0;
}
