/* library.c - what belongs to libtfetch as a whole rather than to one object: its run-time
 * version, the release of memory it allocated for the caller, and the reading and writing
 * of versioned structs (a caller-allocated struct that starts with its size).
 *
 * A versioned struct lets a newer library meet an older caller's shorter struct, and an
 * older library a newer caller's longer one, the way Linux's extensible syscall structs
 * (clone3, openat2) do: the library reads or writes only the caller's size bytes, takes what
 * the caller's struct lacks as zero, and refuses a longer struct whose extra bytes it cannot
 * honour (not all zero). Size 0 stands for the 0.1 layout. No state; any thread.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "client/internal.h"

const char *tf_version(void)
{
    return PACKAGE_VERSION;
}

void tf_free(void *p)
{
    free(p);
}

tf_status_t tfi_struct_in(void *dst, size_t dst_size, const void *src, size_t size,
                          size_t min)
{
    if (size == 0)
        size = min;
    if (size < min)
        return TF_EINVAL;
    memset(dst, 0, dst_size);
    if (size <= dst_size) {
        memcpy(dst, src, size);
        return TF_OK;
    }
    for (size_t i = dst_size; i < size; i++)
        if (((const unsigned char *)src)[i] != 0)
            return TF_EINVAL;
    memcpy(dst, src, dst_size);
    return TF_OK;
}

size_t tfi_struct_out_size(size_t size, size_t have, size_t min)
{
    if (size == 0)
        size = min;
    if (size < min)
        return 0;
    return size < have ? size : have;
}
