/* buf.c - payload buffers: huge-page-backed mappings for large bodies, malloc for small.
 * Stateless; any thread.
 */
#include "config.h"
#include "transports/buf.h"

#include <stdlib.h>
#include <sys/mman.h>

#define BIG (2u << 20)
#define HUGE_ALIGN ((size_t)2 << 20)

void *tfx_buf_alloc(size_t size, size_t *cap)
{
    if (size < BIG) {
        void *p = malloc(size ? size : 1);
        if (p)
            *cap = size;
        return p;
    }
    size_t len = (size + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
    if (len < size)
        return NULL;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, len, MADV_HUGEPAGE);      /* advice only: fine if refused */
#endif
    *cap = len;
    return p;
}

void tfx_buf_free(void *p, size_t cap)
{
    if (!p)
        return;
    if (cap < BIG)
        free(p);
    else
        munmap(p, cap);
}
