/* spare.h - a bounded list of freed objects of one size, kept to be reused.
 *
 * Past malloc's per-thread cache (objects over about 1 KiB), a malloc that follows frees of
 * small chunks consolidates them first: a tenth of a microsecond on a per-request path. The
 * UCX engines and the router keep their ended requests here instead. The list lives in the
 * objects themselves: while spare, an object's first bytes hold the link (the taker zeroes
 * or rewrites it). No lock of its own: the caller's, when threads share one. Under ASan it
 * keeps nothing, so that a use after free is still caught. Header-only.
 */
#ifndef TFX_SPARE_H
#define TFX_SPARE_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    void *head;
    size_t n, max;
} tfx_spare_t;

static inline void tfx_spare_init(tfx_spare_t *s, size_t max)
{
#ifdef __SANITIZE_ADDRESS__
    max = 0;
#endif
    s->head = NULL;
    s->n = 0;
    s->max = max;
}

/* A spare object, or NULL: its contents are what they were but for the link. */
static inline void *tfx_spare_take(tfx_spare_t *s)
{
    void *p = s->head;
    if (p) {
        memcpy(&s->head, p, sizeof s->head);
        s->n--;
    }
    return p;
}

/* Keeps p (1), or 0 when the list is full: the caller frees it then. */
static inline int tfx_spare_put(tfx_spare_t *s, void *p)
{
    if (s->n >= s->max)
        return 0;
    memcpy(p, &s->head, sizeof s->head);
    s->head = p;
    s->n++;
    return 1;
}

static inline void tfx_spare_free_all(tfx_spare_t *s)
{
    for (void *p; (p = tfx_spare_take(s));)
        free(p);
}

#endif
