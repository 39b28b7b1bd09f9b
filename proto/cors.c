/* cors.c - the cors-origins setting and the Origin header checked (see cors.h). Pure. */
#include "config.h"
#include "proto/cors.h"

#include <string.h>

/* host: a DNS name or IPv4 ([A-Za-z0-9.-]) or a bracketed IPv6 literal ([0-9A-Fa-f:.]). */
static int host_valid(const char *h, size_t n)
{
    if (n == 0)
        return 0;
    if (h[0] == '[') {
        if (n < 3 || h[n - 1] != ']')
            return 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (!strchr("0123456789abcdefABCDEF:.", h[i]))
                return 0;
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

static int origin_valid_n(const char *s, size_t n)
{
    if (n == 4 && memcmp(s, "null", 4) == 0)
        return 1;
    if (n > TFP_CORS_ORIGIN_MAX)
        return 0;
    size_t skip;
    if (n > 7 && memcmp(s, "http://", 7) == 0)
        skip = 7;
    else if (n > 8 && memcmp(s, "https://", 8) == 0)
        skip = 8;
    else
        return 0;
    const char *h = s + skip, *end = s + n;
    /* The port follows the last ':' after an IPv6 literal's ']' (or any ':' without one). */
    const char *close = memchr(h, ']', (size_t)(end - h));
    const char *from = close ? close : h;
    const char *colon = memchr(from, ':', (size_t)(end - from));
    const char *hend = colon ? colon : end;
    if (!host_valid(h, (size_t)(hend - h)))
        return 0;
    if (colon) {
        size_t digits = (size_t)(end - colon - 1);
        if (digits == 0 || digits > 5)
            return 0;
        unsigned long port = 0;
        for (const char *p = colon + 1; p < end; p++) {
            if (*p < '0' || *p > '9')
                return 0;
            port = port * 10 + (unsigned long)(*p - '0');
        }
        if (port == 0 || port > 65535)
            return 0;
    }
    return 1;
}

int tfp_cors_origin_valid(const char *s)
{
    return s && origin_valid_n(s, strlen(s));
}

tfp_status_t tfp_cors_parse(const char *setting, tfp_cors_t *out, tfp_err_t *err)
{
    memset(out, 0, sizeof *out);
    const char *p = setting ? setting : "";
    while (*p) {
        size_t skip = strspn(p, " ,\t"), n;
        p += skip;
        if (!*p)
            break;
        n = strcspn(p, " ,\t");
        if (n == 1 && p[0] == '*') {
            out->any = 1;
        } else if (!origin_valid_n(p, n) || (n == 4 && memcmp(p, "null", 4) == 0)) {
            memset(out, 0, sizeof *out);
            return tfp_err_set(err, TFP_EINVAL, "cors-origins: '%.*s' is not an origin "
                               "(scheme://host[:port], http or https, no path; or *)",
                               (int)(n > 80 ? 80 : n), p);
        } else if (out->n == TFP_CORS_MAX) {
            memset(out, 0, sizeof *out);
            return tfp_err_set(err, TFP_EINVAL, "cors-origins: more than %d origins",
                               TFP_CORS_MAX);
        } else {
            memcpy(out->origin[out->n], p, n);
            out->origin[out->n++][n] = '\0';
        }
        p += n;
    }
    if (out->any && out->n) {
        memset(out, 0, sizeof *out);
        return tfp_err_set(err, TFP_EINVAL, "cors-origins: '*' stands alone (any origin, "
                           "without credentials), not beside a list of origins");
    }
    return TFP_OK;
}

tfp_cors_allow_t tfp_cors_check(const tfp_cors_t *cors, const char *origin)
{
    if (!origin || (!cors->any && cors->n == 0) || !tfp_cors_origin_valid(origin))
        return TFP_CORS_NONE;
    if (cors->any)
        return TFP_CORS_ANY;
    for (size_t i = 0; i < cors->n; i++)
        if (strcmp(cors->origin[i], origin) == 0)
            return TFP_CORS_ORIGIN;
    return TFP_CORS_NONE;
}
