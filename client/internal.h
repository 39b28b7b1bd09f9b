/* internal.h - libtfetch's private types, shared by client/doc.c and client/client.c.
 *
 * A tf_doc wraps a proto document (names, shapes, metadata) plus the storage that keeps its
 * tensors' bytes alive: per-tensor copies (TF_COPY) and/or one whole buffer the tensors point
 * into (a received response body, or a copied encoded document). The public tf_tensor_t
 * views are kept in a parallel array so tf_doc_at can hand out stable pointers. Same threading
 * as the public objects: one thread at a time per doc or client. Not installed.
 */
#ifndef TF_CLIENT_INTERNAL_H
#define TF_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "client/tfetch.h"
#include "proto/doc.h"
#include "proto/status.h"

struct tf_doc {
    tfp_doc_t *d;                   /* the model; tensor data pointers are borrowed */
    tf_tensor_t *views;             /* views[i] mirrors d->t[i] */
    void **copies;                  /* copies[i]: TF_COPY storage for tensor i, or NULL */
    size_t cap;                     /* capacity of views and copies */
    void *buf;                      /* whole buffer the tensors point into, or NULL */
};

/* Internal functions use the tfi_ prefix: they cross files inside libtfetch but are not
 * exported (the library exports only ^tf_). */

/* Wraps a decoded proto doc whose data points into buf (taken over when not NULL: freed
 * with the doc). On failure neither d nor buf is freed. */
tf_status_t tfi_doc_wrap(tfp_doc_t *d, void *buf, tf_doc_t **out);

/* The proto status with the same name (the values are equal by construction). */
static inline tf_status_t tfi_from_proto(tfp_status_t st)
{
    return (tf_status_t)st;
}

#endif
