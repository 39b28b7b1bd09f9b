/* buf.h - payload buffers for tensor bodies.
 *
 * Large bodies (>= 2 MiB) are mapped directly and asked for transparent huge pages, so the one
 * write that fills them faults 2 MiB at a time instead of 4 KiB (first touch of a fresh 64 MiB
 * buffer costs ~200 ms in 4 KiB pages here); small ones come from malloc. Never zeroed, never
 * touched before the caller writes them. Any thread.
 */
#ifndef TFX_BUF_H
#define TFX_BUF_H

#include <stddef.h>

/* Returns a buffer of at least size bytes (size 0 allowed), or NULL. *cap gets the usable size
 * to pass back to tfx_buf_free. */
void *tfx_buf_alloc(size_t size, size_t *cap);
void tfx_buf_free(void *p, size_t cap);          /* NULL is a no-op */

#endif
