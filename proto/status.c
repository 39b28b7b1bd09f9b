/* status.c - names, texts and HTTP codes of the wire status codes, and the error setter.
 *
 * Everything is generated from the table in proto/tfetch-status.h, so names, values, texts
 * and HTTP codes cannot drift. Owns no state beyond static strings; any thread.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proto/status.h"

const char *tfp_status_name(tfp_status_t st)
{
    switch (st) {
#define X(n, v, h, s) case TFP_##n: return "TF_" #n;
        TF_STATUS_MAP(X)
#undef X
    }
    return "TF_EUNKNOWN";
}

const char *tfp_status_text(tfp_status_t st)
{
    switch (st) {
#define X(n, v, h, s) case TFP_##n: return s;
        TF_STATUS_MAP(X)
#undef X
    }
    return "unknown status";
}

int tfp_status_http(tfp_status_t st)
{
    switch (st) {
#define X(n, v, h, s) case TFP_##n: return h;
        TFP_STATUS_MAP(X)
#undef X
    default:
        break;
    }
    return 500;
}

int tfp_status_from_name(const char *name, tfp_status_t *out)
{
    static const struct {
        const char *name;
        tfp_status_t st;
    } table[] = {
#define X(n, v, h, s) { "TF_" #n, TFP_##n },
        TFP_STATUS_MAP(X)
#undef X
    };

    if (name == NULL)
        return -1;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(name, table[i].name) == 0) {
            if (out != NULL)
                *out = table[i].st;
            return 0;
        }
    }
    return -1;
}

tfp_status_t tfp_err_set(tfp_err_t *err, tfp_status_t code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;

        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}
