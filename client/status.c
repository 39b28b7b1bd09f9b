/* status.c - libtfetch's status and dtype names: tf_strerror, tf_err_name and the dtype
 * helpers.
 *
 * Everything is generated from the X-macros in proto/tfetch-status.h (statuses, through
 * tfetch.h's TF_STATUS_MAP) and proto/dtype.h (dtype sizes and names), so names, texts and
 * values cannot drift. Static data only; any thread.
 */
#include "config.h"

#include <string.h>

#include "client/tfetch.h"
#include "proto/dtype.h"

/* Statuses share one table with proto; dtypes are written out in tfetch.h, so every one must
 * have proto's value. */
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

/* Local tables, so the client does not depend on proto for names that the header fixes. */
static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
#define X(n, v, sz, s) [v] = {s, sz},
    TFP_DTYPE_MAP(X)
#undef X
};

const char *tf_dtype_name(tf_dtype_t dt)
{
    if ((unsigned)dt >= sizeof(dtypes) / sizeof(dtypes[0]))
        return NULL;
    return dtypes[dt].name;
}

size_t tf_dtype_size(tf_dtype_t dt)
{
    if ((unsigned)dt >= sizeof(dtypes) / sizeof(dtypes[0]))
        return 0;
    return dtypes[dt].size;
}

tf_status_t tf_dtype_from_name(const char *name, tf_dtype_t *out)
{
    if (!name || !out)
        return TF_EINVAL;
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
        if (dtypes[i].name && strcmp(dtypes[i].name, name) == 0) {
            *out = (tf_dtype_t)i;
            return TF_OK;
        }
    }
    return TF_EINVAL;
}
