/* status.c - libtfetch's status and dtype names: tf_strerror, tf_err_name and the dtype
 * helpers.
 *
 * Statuses come from the one status table (proto/tfetch-status.h, through tfetch.h's
 * TF_STATUS_MAP); dtypes are proto's, which come from the one dtype table
 * (proto/tfetch-dtype.h), so names, texts, widths and values cannot drift. Static data
 * only; any thread.
 */
#include "config.h"

#include <string.h>

#include "client/tfetch.h"
#include "proto/dtype.h"

/* Both are generated from tfetch-dtype.h; this keeps the casts below honest. */
#define X(n, v) _Static_assert((int)TF_##n == (int)TFP_##n, "dtype " #n " differs from proto");
TF_DTYPE_MAP(X)
#undef X

const char *tf_strerror(tf_status_t st)
{
    switch (st) {
#define X(n, v, h, s) case TF_##n: return s;
        TF_STATUS_MAP(X)
#undef X
    }
    return "unknown status";
}

const char *tf_err_name(tf_status_t st)
{
    switch (st) {
#define X(n, v, h, s) case TF_##n: return "TF_" #n;
        TF_STATUS_MAP(X)
#undef X
    }
    return "TF_EUNKNOWN";
}

const char *tf_dtype_name(tf_dtype_t dt)
{
    return tfp_dtype_name((tfp_dtype_t)dt);
}

size_t tf_dtype_size(tf_dtype_t dt)
{
    return tfp_dtype_size((tfp_dtype_t)dt);
}

unsigned tf_dtype_bits(tf_dtype_t dt)
{
    return tfp_dtype_bits((tfp_dtype_t)dt);
}

tf_status_t tf_dtype_from_name(const char *name, tf_dtype_t *out)
{
    tfp_dtype_t dt;

    if (!name || !out || tfp_dtype_from_name(name, strlen(name), &dt) != 0)
        return TF_EINVAL;
    *out = (tf_dtype_t)dt;
    return TF_OK;
}
