/* doc.c - the tensor document model: named tensors with borrowed data, plus metadata.
 *
 * Owns each doc's arrays, tensor names and metadata strings; never the tensor bytes, which
 * stay with whoever bound them (a decoder's input buffer, the caller's memory). Also the
 * overflow-checked shape arithmetic every codec uses. Not thread-safe per doc; no globals.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/doc.h"
#include "proto/jsonw.h"
#include "proto/utf8.h"

#define MAX_DIM (UINT64_C(1) << 53)

tfp_doc_t *tfp_doc_new(void)
{
    return calloc(1, sizeof(tfp_doc_t));
}

void tfp_doc_free(tfp_doc_t *doc)
{
    if (doc == NULL)
        return;
    for (size_t i = 0; i < doc->n; i++)
        free(doc->t[i].name);
    for (size_t i = 0; i < doc->nmeta; i++) {
        free(doc->meta[i].key);
        free(doc->meta[i].value);
    }
    free(doc->t);
    free(doc->meta);
    free(doc);
}

tfp_status_t tfp_shape_count(int rank, const uint64_t *shape, uint64_t *count, tfp_err_t *err)
{
    uint64_t c = 1;

    if (rank < 0 || rank > TFP_MAX_RANK)
        return tfp_err_set(err, TFP_EINVAL, "rank %d is outside 0..%d", rank, TFP_MAX_RANK);
    if (rank > 0 && shape == NULL)
        return tfp_err_set(err, TFP_EINVAL, "rank %d with no shape", rank);
    for (int i = 0; i < rank; i++) {
        if (shape[i] == 0) {
            *count = 0;
            return TFP_OK;
        }
    }
    for (int i = 0; i < rank; i++) {
        if (__builtin_mul_overflow(c, shape[i], &c))
            return tfp_err_set(err, TFP_ERANGE,
                               "element count overflows 64 bits at dim %d (%llu)", i,
                               (unsigned long long)shape[i]);
    }
    *count = c;
    return TFP_OK;
}

tfp_status_t tfp_shape_nbytes(tfp_dtype_t dt, int rank, const uint64_t *shape,
                              uint64_t *nbytes, tfp_err_t *err)
{
    unsigned bits = tfp_dtype_bits(dt);
    uint64_t count, total;
    tfp_status_t st;

    if (bits == 0)
        return tfp_err_set(err, TFP_EINVAL, "unknown dtype value %d", (int)dt);
    st = tfp_shape_count(rank, shape, &count, err);
    if (st != TFP_OK)
        return st;
    /* count x bits / 8 without overflowing on the way: 8 elements take exactly bits bytes */
    if (__builtin_mul_overflow(count / 8, (uint64_t)bits, &total) ||
        __builtin_add_overflow(total, count % 8 * bits / 8, &total))
        return tfp_err_set(err, TFP_ERANGE, "byte size of %s x %llu elements overflows 64 bits",
                           tfp_dtype_name(dt), (unsigned long long)count);
    if (count % 8 * bits % 8 != 0)
        return tfp_err_set(err, TFP_EINVAL,
                           "%llu elements of %s (%u bits each) do not fill whole bytes",
                           (unsigned long long)count, tfp_dtype_name(dt), bits);
    *nbytes = total;
    return TFP_OK;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);

    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

/* Makes room for one more element in an array of elem-sized items. */
static int grow(void **arr, size_t n, size_t *cap, size_t elem)
{
    size_t ncap;
    void *p;

    if (n < *cap)
        return 0;
    ncap = *cap ? *cap * 2 : 8;
    if (ncap < *cap || ncap > SIZE_MAX / elem)
        return -1;
    p = realloc(*arr, ncap * elem);
    if (p == NULL)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

static tfp_status_t add_tensor(tfp_doc_t *doc, const char *name, tfp_dtype_t dt, int rank,
                               const uint64_t *shape, const void *data, uint64_t nbytes,
                               int check_dup, tfp_err_t *err)
{
    uint64_t want;
    size_t len;
    tfp_tensor_t *t;
    tfp_status_t st;

    if (doc == NULL || name == NULL)
        return tfp_err_set(err, TFP_EINVAL, "no doc or no name");
    len = strlen(name);
    if (len == 0)
        return tfp_err_set(err, TFP_EINVAL, "tensor name is empty");
    if (len > TFP_MAX_NAME)
        return tfp_err_set(err, TFP_EINVAL, "tensor name of %zu bytes exceeds %d", len,
                           TFP_MAX_NAME);
    if (!tfp_utf8_valid(name, len))
        return tfp_err_set(err, TFP_EINVAL, "tensor name is not valid UTF-8");
    if (strcmp(name, "__metadata__") == 0)
        return tfp_err_set(err, TFP_EINVAL, "\"__metadata__\" is not a tensor name");
    if (!tfp_dtype_valid(dt))
        return tfp_err_set(err, TFP_EINVAL, "tensor '%.64s': unknown dtype value %d", name,
                           (int)dt);
    if (rank < 0 || rank > TFP_MAX_RANK)
        return tfp_err_set(err, TFP_EINVAL, "tensor '%.64s': rank %d is outside 0..%d", name,
                           rank, TFP_MAX_RANK);
    if (rank > 0 && shape == NULL)
        return tfp_err_set(err, TFP_EINVAL, "tensor '%.64s': rank %d with no shape", name, rank);
    for (int i = 0; i < rank; i++) {
        if (shape[i] > MAX_DIM)
            return tfp_err_set(err, TFP_ERANGE, "tensor '%.64s': dim %d (%llu) exceeds 2^53",
                               name, i, (unsigned long long)shape[i]);
    }
    st = tfp_shape_nbytes(dt, rank, shape, &want, err);
    if (st != TFP_OK)
        return st;
    if (want != nbytes)
        return tfp_err_set(err, TFP_EINVAL, "tensor '%.64s': %llu bytes given, %s x shape needs %llu",
                           name, (unsigned long long)nbytes, tfp_dtype_name(dt),
                           (unsigned long long)want);
    if (check_dup && tfp_doc_find(doc, name) != NULL)
        return tfp_err_set(err, TFP_EINVAL, "tensor '%.64s' is already in the doc", name);
    if (grow((void **)&doc->t, doc->n, &doc->cap, sizeof *doc->t) != 0)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory adding a tensor");
    t = &doc->t[doc->n];
    memset(t, 0, sizeof *t);
    t->name = dup_str(name);
    if (t->name == NULL)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory adding a tensor");
    t->dtype = dt;
    t->rank = rank;
    for (int i = 0; i < rank; i++)
        t->shape[i] = shape[i];
    t->nbytes = nbytes;
    t->data = data;
    doc->n++;
    return TFP_OK;
}

tfp_status_t tfp_doc_add(tfp_doc_t *doc, const char *name, tfp_dtype_t dt, int rank,
                         const uint64_t *shape, const void *data, uint64_t nbytes,
                         tfp_err_t *err)
{
    return add_tensor(doc, name, dt, rank, shape, data, nbytes, 1, err);
}

tfp_status_t tfp_doc_append(tfp_doc_t *doc, const char *name, tfp_dtype_t dt, int rank,
                            const uint64_t *shape, const void *data, uint64_t nbytes,
                            tfp_err_t *err)
{
    return add_tensor(doc, name, dt, rank, shape, data, nbytes, 0, err);
}

static tfp_meta_t *find_meta(const tfp_doc_t *doc, const char *key)
{
    for (size_t i = 0; i < doc->nmeta; i++) {
        if (strcmp(doc->meta[i].key, key) == 0)
            return &doc->meta[i];
    }
    return NULL;
}

static tfp_status_t set_meta(tfp_doc_t *doc, const char *key, const char *value,
                             int check_dup, tfp_err_t *err)
{
    size_t klen;
    char *k, *v;
    tfp_meta_t *m;

    if (doc == NULL || key == NULL || value == NULL)
        return tfp_err_set(err, TFP_EINVAL, "no doc, key or value");
    klen = strlen(key);
    if (klen > TFP_MAX_NAME)
        return tfp_err_set(err, TFP_EINVAL, "metadata key of %zu bytes exceeds %d", klen,
                           TFP_MAX_NAME);
    if (!tfp_utf8_valid(key, klen))
        return tfp_err_set(err, TFP_EINVAL, "metadata key is not valid UTF-8");
    if (!tfp_utf8_valid(value, strlen(value)))
        return tfp_err_set(err, TFP_EINVAL, "metadata value for '%.64s' is not valid UTF-8",
                           key);
    m = check_dup ? find_meta(doc, key) : NULL;
    v = dup_str(value);
    if (v == NULL)
        goto out_of_memory;
    if (m != NULL) {
        free(m->value);
        m->value = v;
        return TFP_OK;
    }
    k = dup_str(key);
    if (k == NULL)
        goto free_value;
    if (grow((void **)&doc->meta, doc->nmeta, &doc->capmeta, sizeof *doc->meta) != 0)
        goto free_key;
    doc->meta[doc->nmeta].key = k;
    doc->meta[doc->nmeta].value = v;
    doc->nmeta++;
    return TFP_OK;

free_key:
    free(k);
free_value:
    free(v);
out_of_memory:
    return tfp_err_set(err, TFP_ENOMEM, "out of memory setting metadata");
}

tfp_status_t tfp_doc_set_meta(tfp_doc_t *doc, const char *key, const char *value,
                              tfp_err_t *err)
{
    return set_meta(doc, key, value, 1, err);
}

tfp_status_t tfp_doc_append_meta(tfp_doc_t *doc, const char *key, const char *value,
                                 tfp_err_t *err)
{
    return set_meta(doc, key, value, 0, err);
}

const tfp_tensor_t *tfp_doc_find(const tfp_doc_t *doc, const char *name)
{
    if (doc == NULL || name == NULL)
        return NULL;
    for (size_t i = 0; i < doc->n; i++) {
        if (strcmp(doc->t[i].name, name) == 0)
            return &doc->t[i];
    }
    return NULL;
}

const char *tfp_doc_meta(const tfp_doc_t *doc, const char *key)
{
    const tfp_meta_t *m;

    if (doc == NULL || key == NULL)
        return NULL;
    m = find_meta(doc, key);
    return m != NULL ? m->value : NULL;
}

uint64_t tfp_doc_data_bytes(const tfp_doc_t *doc)
{
    uint64_t sum = 0;

    if (doc == NULL)
        return 0;
    for (size_t i = 0; i < doc->n; i++) {
        if (__builtin_add_overflow(sum, doc->t[i].nbytes, &sum))
            return UINT64_MAX;
    }
    return sum;
}
