/* dtype.c - names and sizes of the element types.
 *
 * Generated from the one table (tfetch-dtype.h, through TFP_DTYPE_MAP in dtype.h). Owns only static tables; any thread.
 */
#include <string.h>

#include "proto/dtype.h"

static const struct {
    const char *name;
    unsigned bits;
} dtypes[TFP_DTYPE_COUNT] = {
#define X(n, v, b, s) [v] = { s, b },
    TFP_DTYPE_MAP(X)
#undef X
};

static int in_range(tfp_dtype_t dt)
{
    return (int)dt >= 0 && (int)dt < (int)TFP_DTYPE_COUNT;
}

const char *tfp_dtype_name(tfp_dtype_t dt)
{
    return in_range(dt) ? dtypes[dt].name : NULL;
}

int tfp_dtype_valid(tfp_dtype_t dt)
{
    return in_range(dt);
}

unsigned tfp_dtype_bits(tfp_dtype_t dt)
{
    return in_range(dt) ? dtypes[dt].bits : 0;
}

size_t tfp_dtype_size(tfp_dtype_t dt)
{
    return in_range(dt) && dtypes[dt].bits % 8 == 0 ? dtypes[dt].bits / 8 : 0;
}

int tfp_dtype_from_name(const char *s, size_t len, tfp_dtype_t *out)
{
    if (s == NULL)
        return -1;
    for (int i = 0; i < (int)TFP_DTYPE_COUNT; i++) {
        if (strlen(dtypes[i].name) == len && memcmp(dtypes[i].name, s, len) == 0) {
            if (out != NULL)
                *out = (tfp_dtype_t)i;
            return 0;
        }
    }
    return -1;
}
