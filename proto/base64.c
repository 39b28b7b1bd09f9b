/* base64.c - the strict base64 codec of base64.h.
 *
 * Written here rather than taken from a library: proto links nothing but cJSON, and the
 * common implementations decode leniently (whitespace, missing padding, non-zero trailing
 * bits), while a strict decoder gives each address exactly one spelling. The decoder checks
 * every character and the padding bits before it allocates. Pure; any thread.
 */
#include <stdint.h>
#include <stdlib.h>

#include "proto/base64.h"

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t tfp_b64_len(size_t n)
{
    return (n / 3 + (n % 3 != 0)) * 4;
}

char *tfp_b64_encode(const void *src, size_t n, size_t *out_len)
{
    const uint8_t *p = src;
    size_t len, i, o = 0;
    char *out;

    if (n / 3 >= (SIZE_MAX - 1) / 4 - 1 || (n > 0 && src == NULL))
        return NULL;
    len = tfp_b64_len(n);
    out = malloc(len + 1);
    if (out == NULL)
        return NULL;
    for (i = 0; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];

        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;

        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;

        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
    if (out_len != NULL)
        *out_len = o;
    return out;
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

tfp_status_t tfp_b64_decode(const char *s, size_t n, size_t max, uint8_t **out,
                               size_t *out_len, tfp_err_t *err)
{
    size_t pad = 0, dlen, o = 0;
    uint8_t *buf;

    if ((s == NULL && n > 0) || out == NULL || out_len == NULL)
        return tfp_err_set(err, TFP_EINVAL, "base64: no text or no output");
    if (n % 4 != 0)
        return tfp_err_set(err, TFP_EPROTO, "base64: length %zu is not a multiple of 4", n);
    if (n > 0 && s[n - 1] == '=')
        pad = s[n - 2] == '=' ? 2 : 1;
    dlen = n / 4 * 3 - pad;
    if (dlen > max)
        return tfp_err_set(err, TFP_ETOOBIG, "base64: decodes to %zu bytes, more than %zu",
                           dlen, max);
    for (size_t i = 0; i < n - pad; i++) {
        if (b64_value(s[i]) < 0)
            return tfp_err_set(err, TFP_EPROTO, "base64: invalid character at offset %zu", i);
    }
    if (pad > 0) {
        /* the unused low bits of the last data character must be zero */
        int last = b64_value(s[n - pad - 1]);

        if ((pad == 1 && (last & 3) != 0) || (pad == 2 && (last & 15) != 0))
            return tfp_err_set(err, TFP_EPROTO,
                               "base64: non-zero padding bits at offset %zu", n - pad - 1);
    }
    buf = malloc(dlen > 0 ? dlen : 1);
    if (buf == NULL)
        return tfp_err_set(err, TFP_ENOMEM, "base64: out of memory");
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int k;

        for (k = 0; k < 4; k++) {
            int c = s[i + k] == '=' ? 0 : b64_value(s[i + k]);

            v = v << 6 | (uint32_t)c;
        }
        buf[o++] = (uint8_t)(v >> 16);
        if (o < dlen)
            buf[o++] = (uint8_t)(v >> 8);
        if (o < dlen)
            buf[o++] = (uint8_t)v;
    }
    *out = buf;
    *out_len = dlen;
    return TFP_OK;
}
