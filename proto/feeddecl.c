/* feeddecl.c - a feed's declaration parsed and compared, items checked against its signature,
 * split items cut per device (feeddecl.h). Reaches cJSON through proto/cjson.h only. Pure;
 * any thread.
 */
#include "config.h"
#include "proto/feeddecl.h"
#include "proto/cjson.h"
#include "proto/ids.h"
#include "proto/raw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SAFE (1ull << 53)

const char *tfp_fanout_name(tfp_fanout_t f)
{
    switch (f) {
    case TFP_FANOUT_SPLIT: return "split";
    case TFP_FANOUT_BROADCAST: return "broadcast";
    default: return "per_device";
    }
}

void tfp_feed_decl_clear(tfp_feed_decl_t *d)
{
    if (!d)
        return;
    free(d->dev_names);
    free(d->sig);
    memset(d, 0, sizeof *d);
}

static int all_digits(const char *s)
{
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

static tfp_status_t bad(tfp_err_t *err, const char *fmt, const char *what)
{
    return tfp_err_set(err, TFP_EBADREQ, fmt, what);
}

/* An optional integer member in lo..hi; *v keeps its default when absent. */
static tfp_status_t opt_uint(const cJSON *root, const char *key, uint64_t lo, uint64_t hi,
                             uint64_t *v, tfp_err_t *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it)
        return TFP_OK;
    if (tfp_cj_uint(it, lo, hi, v) != 0)
        return tfp_err_set(err, TFP_EBADREQ, "%s must be an integer in %llu..%llu", key,
                           (unsigned long long)lo, (unsigned long long)hi);
    return TFP_OK;
}

static tfp_status_t take_devices(const cJSON *root, tfp_feed_decl_t *d, tfp_err_t *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "devices");
    uint64_t n = 1;
    if (!it) {
        d->ndev = 1;
        return TFP_OK;
    }
    if (cJSON_IsNumber(it)) {
        if (tfp_cj_uint(it, 1, TFP_FEED_MAX_DEVICES, &n) != 0)
            return tfp_err_set(err, TFP_EBADREQ, "devices must be a count in 1..%d or a list "
                               "of names", TFP_FEED_MAX_DEVICES);
        d->ndev = (unsigned)n;
        return TFP_OK;
    }
    int count = cJSON_IsArray(it) ? cJSON_GetArraySize(it) : -1;
    if (count < 1 || count > TFP_FEED_MAX_DEVICES)
        return tfp_err_set(err, TFP_EBADREQ, "devices must be a count in 1..%d or a list of "
                           "1..%d names", TFP_FEED_MAX_DEVICES, TFP_FEED_MAX_DEVICES);
    if (!(d->dev_names = calloc((size_t)count, sizeof *d->dev_names)))
        return tfp_err_set(err, TFP_ENOMEM, "out of memory");
    unsigned k = 0;
    for (const cJSON *c = it->child; c; c = c->next, k++) {
        if (!cJSON_IsString(c) || !tfp_name_valid(c->valuestring) || all_digits(c->valuestring))
            return tfp_err_set(err, TFP_EBADREQ, "devices[%u] must be a name "
                               "([A-Za-z0-9._-]{1,255}, not only digits)", k);
        snprintf(d->dev_names[k], sizeof d->dev_names[k], "%s", c->valuestring);
        for (unsigned j = 0; j < k; j++)
            if (strcmp(d->dev_names[j], d->dev_names[k]) == 0)
                return tfp_err_set(err, TFP_EBADREQ, "devices[%u]: '%s' is listed twice", k,
                                   d->dev_names[k]);
    }
    d->ndev = (unsigned)count;
    d->named = 1;
    return TFP_OK;
}

static tfp_status_t take_sig_entry(const cJSON *e, size_t i, tfp_feed_sig_t *s, tfp_err_t *err)
{
    if (!cJSON_IsObject(e))
        return tfp_err_set(err, TFP_EBADREQ, "signature[%zu] must be an object "
                           "{\"name\", \"dtype\", \"shape\"}", i);
    for (const cJSON *c = e->child; c; c = c->next)
        if (strcmp(c->string, "name") && strcmp(c->string, "dtype") && strcmp(c->string, "shape"))
            return tfp_err_set(err, TFP_EBADREQ, "signature[%zu]: unknown key '%.64s'", i,
                               c->string);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!name || tfp_cj_str(name, s->name, TFP_FEED_MAX_SIG_NAME) != 0 || !s->name[0] ||
        strcmp(s->name, "__metadata__") == 0)
        return tfp_err_set(err, TFP_EBADREQ, "signature[%zu].name must be a tensor name of "
                           "1..%d bytes", i, TFP_FEED_MAX_SIG_NAME);
    if (!cJSON_IsString(dtype) ||
        tfp_dtype_from_name(dtype->valuestring, strlen(dtype->valuestring), &s->dtype) != 0)
        return tfp_err_set(err, TFP_EBADREQ, "signature[%zu].dtype must be a dtype name "
                           "(\"F32\", \"BF16\", ...)", i);
    int rank = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
    if (rank < 0 || rank > TFP_MAX_RANK)
        return tfp_err_set(err, TFP_EBADREQ, "signature[%zu].shape must be a list of at most "
                           "%d sizes", i, TFP_MAX_RANK);
    s->rank = rank;
    int k = 0;
    for (const cJSON *c = shape->child; c; c = c->next, k++)
        if (tfp_cj_uint(c, 0, MAX_SAFE, &s->shape[k]) != 0)
            return tfp_err_set(err, TFP_EBADREQ, "signature[%zu].shape[%d] must be an integer "
                               "in 0..2^53", i, k);
    tfp_err_t e2;
    if (tfp_shape_nbytes(s->dtype, s->rank, s->shape, &s->nbytes, &e2) != TFP_OK ||
        s->nbytes > MAX_SAFE)
        return tfp_err_set(err, TFP_EBADREQ, "signature[%zu]: the tensor is too large", i);
    return TFP_OK;
}

static tfp_status_t take_signature(const cJSON *root, tfp_feed_decl_t *d, tfp_err_t *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "signature");
    int n = cJSON_IsArray(it) ? cJSON_GetArraySize(it) : -1;
    if (n < 1 || n > TFP_FEED_MAX_SIG)
        return tfp_err_set(err, TFP_EBADREQ, "signature must list 1..%d tensors "
                           "[{\"name\", \"dtype\", \"shape\"}, ...]", TFP_FEED_MAX_SIG);
    if (!(d->sig = calloc((size_t)n, sizeof *d->sig)))
        return tfp_err_set(err, TFP_ENOMEM, "out of memory");
    size_t i = 0;
    tfp_status_t st;
    for (const cJSON *c = it->child; c; c = c->next, i++) {
        if ((st = take_sig_entry(c, i, &d->sig[i], err)) != TFP_OK)
            return st;
        for (size_t j = 0; j < i; j++)
            if (strcmp(d->sig[j].name, d->sig[i].name) == 0)
                return tfp_err_set(err, TFP_EBADREQ, "signature[%zu]: tensor '%s' is listed "
                                   "twice", i, d->sig[i].name);
    }
    d->nsig = (size_t)n;
    return TFP_OK;
}

static tfp_status_t take_fanout(const cJSON *root, tfp_feed_decl_t *d, tfp_err_t *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "fanout");
    d->fanout = TFP_FANOUT_PER_DEVICE;
    if (!it)
        return TFP_OK;
    const char *s = cJSON_IsString(it) ? it->valuestring : "";
    if (strcmp(s, "per_device") == 0)
        d->fanout = TFP_FANOUT_PER_DEVICE;
    else if (strcmp(s, "split") == 0)
        d->fanout = TFP_FANOUT_SPLIT;
    else if (strcmp(s, "broadcast") == 0)
        d->fanout = TFP_FANOUT_BROADCAST;
    else
        return bad(err, "%s must be \"per_device\", \"split\" or \"broadcast\"", "fanout");
    return TFP_OK;
}

/* What one device queue holds of an item; split signatures must divide by the devices. */
static tfp_status_t size_item(tfp_feed_decl_t *d, tfp_err_t *err)
{
    uint64_t total = 0;
    for (size_t i = 0; i < d->nsig; i++) {
        const tfp_feed_sig_t *s = &d->sig[i];
        if (d->fanout == TFP_FANOUT_SPLIT && (s->rank < 1 || s->shape[0] % d->ndev != 0))
            return tfp_err_set(err, TFP_EBADREQ, "signature[%zu]: a split feed cuts dim 0 "
                               "across %u devices; '%s' has %s", i, d->ndev, s->name,
                               s->rank < 1 ? "no dim 0" : "a dim 0 not divisible by that");
        total += d->fanout == TFP_FANOUT_SPLIT ? s->nbytes / d->ndev : s->nbytes;
        if (total > MAX_SAFE)
            return bad(err, "%s: the item is too large", "signature");
    }
    d->item_bytes = total;
    if (total > d->max_bytes)
        return tfp_err_set(err, TFP_EBADREQ, "an item is %llu bytes per device queue, above "
                           "max_bytes %llu: it could never be enqueued",
                           (unsigned long long)total, (unsigned long long)d->max_bytes);
    return TFP_OK;
}

static const char *const known_keys[] = {"devices", "signature", "fanout", "max_items",
                                         "max_bytes", "lease_ms", "outfeed_items"};

tfp_status_t tfp_feed_decl_parse(const char *body, size_t len, tfp_feed_decl_t *out,
                                 tfp_err_t *err)
{
    cJSON *root = NULL;
    tfp_feed_decl_t d = {0};
    tfp_status_t st = tfp_cj_parse(body ? body : "", body ? len : 0,
                                   TFP_CJ_WHOLE | TFP_CJ_NODUP, &root, NULL, err);
    if (st != TFP_OK)
        return tfp_cj_prefix(err, st, "feed declaration");
    if (!cJSON_IsObject(root)) {
        st = tfp_err_set(err, TFP_EBADREQ, "a feed declaration is a JSON object");
        goto done;
    }
    for (const cJSON *c = root->child; c; c = c->next) {
        size_t k = 0;
        while (k < sizeof known_keys / sizeof known_keys[0] && strcmp(c->string, known_keys[k]))
            k++;
        if (k == sizeof known_keys / sizeof known_keys[0]) {
            st = tfp_err_set(err, TFP_EBADREQ, "feed declaration: unknown key '%.64s'",
                             c->string);
            goto done;
        }
    }
    d.max_items = 8;
    d.max_bytes = 256ull << 20;
    d.lease_ms = 30000;
    d.outfeed_items = 64;
    if ((st = take_devices(root, &d, err)) != TFP_OK ||
        (st = take_signature(root, &d, err)) != TFP_OK ||
        (st = take_fanout(root, &d, err)) != TFP_OK ||
        (st = opt_uint(root, "max_items", 1, TFP_FEED_MAX_ITEMS, &d.max_items, err)) != TFP_OK ||
        (st = opt_uint(root, "max_bytes", 1, MAX_SAFE, &d.max_bytes, err)) != TFP_OK ||
        (st = opt_uint(root, "lease_ms", 1, TFP_FEED_MAX_LEASE_MS, &d.lease_ms, err)) != TFP_OK ||
        (st = opt_uint(root, "outfeed_items", 1, TFP_FEED_MAX_ITEMS, &d.outfeed_items, err)) !=
            TFP_OK ||
        (st = size_item(&d, err)) != TFP_OK)
        goto done;
    *out = d;
    memset(&d, 0, sizeof d);
done:
    tfp_feed_decl_clear(&d);
    cJSON_Delete(root);
    return st;
}

int tfp_feed_decl_equal(const tfp_feed_decl_t *a, const tfp_feed_decl_t *b)
{
    if (a->ndev != b->ndev || a->named != b->named || a->nsig != b->nsig ||
        a->fanout != b->fanout || a->max_items != b->max_items || a->max_bytes != b->max_bytes ||
        a->lease_ms != b->lease_ms || a->outfeed_items != b->outfeed_items)
        return 0;
    for (unsigned i = 0; a->named && i < a->ndev; i++)
        if (strcmp(a->dev_names[i], b->dev_names[i]) != 0)
            return 0;
    for (size_t i = 0; i < a->nsig; i++) {
        const tfp_feed_sig_t *x = &a->sig[i], *y = &b->sig[i];
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->rank != y->rank ||
            memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->rank) != 0)
            return 0;
    }
    return 1;
}

int tfp_feed_dev_index(const tfp_feed_decl_t *d, const char *token)
{
    if (!token || !*token)
        return -1;
    for (unsigned i = 0; d->named && i < d->ndev; i++)
        if (strcmp(d->dev_names[i], token) == 0)
            return (int)i;
    uint64_t v;
    if (all_digits(token) && tfp_parse_u64(token, TFP_FEED_MAX_DEVICES, &v) == 0 && v < d->ndev)
        return (int)v;
    return -1;
}

static void shape_text(int rank, const uint64_t *shape, char *buf, size_t size)
{
    buf[0] = '\0';
    tfp_raw_format_shape(rank, shape, buf, size);
}

tfp_status_t tfp_feed_sig_check(const tfp_feed_decl_t *d, const tfp_doc_t *doc, tfp_err_t *err)
{
    char have[TFP_MAX_RANK * 21 + 1], want[TFP_MAX_RANK * 21 + 1];
    for (size_t i = 0; i < d->nsig; i++) {
        const tfp_feed_sig_t *s = &d->sig[i];
        const tfp_tensor_t *t = tfp_doc_find(doc, s->name);
        if (!t)
            return tfp_err_set(err, TFP_EUNPROC, "the item lacks tensor '%s'", s->name);
        if (t->dtype != s->dtype)
            return tfp_err_set(err, TFP_EUNPROC, "tensor '%s' has dtype %s; the signature says "
                               "%s", s->name, tfp_dtype_name(t->dtype), tfp_dtype_name(s->dtype));
        if (t->rank != s->rank ||
            memcmp(t->shape, s->shape, sizeof s->shape[0] * (size_t)s->rank) != 0) {
            shape_text(t->rank, t->shape, have, sizeof have);
            shape_text(s->rank, s->shape, want, sizeof want);
            return tfp_err_set(err, TFP_EUNPROC, "tensor '%s' has shape [%s]; the signature "
                               "says [%s]", s->name, have, want);
        }
    }
    if (doc->n != d->nsig)                      /* names are unique: one must be extra */
        for (size_t i = 0; i < doc->n; i++) {
            size_t j = 0;
            while (j < d->nsig && strcmp(d->sig[j].name, doc->t[i].name) != 0)
                j++;
            if (j == d->nsig)
                return tfp_err_set(err, TFP_EUNPROC, "tensor '%.255s' is not in the signature",
                                   doc->t[i].name);
        }
    return TFP_OK;
}

tfp_status_t tfp_feed_split(const tfp_doc_t *whole, unsigned ndev, unsigned dev,
                            tfp_doc_t **part, tfp_err_t *err)
{
    if (ndev == 0 || dev >= ndev)
        return tfp_err_set(err, TFP_EINVAL, "device %u of %u", dev, ndev);
    tfp_doc_t *p = tfp_doc_new();
    if (!p)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory");
    tfp_status_t st;
    for (size_t i = 0; i < whole->n; i++) {
        const tfp_tensor_t *t = &whole->t[i];
        if (t->rank < 1 || t->shape[0] % ndev != 0) {
            st = tfp_err_set(err, TFP_EINVAL, "tensor '%.255s': dim 0 does not divide by %u",
                             t->name, ndev);
            goto fail;
        }
        uint64_t shape[TFP_MAX_RANK];
        memcpy(shape, t->shape, sizeof shape);
        shape[0] /= ndev;
        uint64_t n = t->nbytes / ndev;
        const uint8_t *data = t->data ? t->data + n * dev : NULL;
        if ((st = tfp_doc_append(p, t->name, t->dtype, t->rank, shape, data, n, err)) != TFP_OK)
            goto fail;
    }
    for (size_t i = 0; i < whole->nmeta; i++)
        if ((st = tfp_doc_append_meta(p, whole->meta[i].key, whole->meta[i].value, err)) !=
            TFP_OK)
            goto fail;
    *part = p;
    return TFP_OK;
fail:
    tfp_doc_free(p);
    return st;
}
