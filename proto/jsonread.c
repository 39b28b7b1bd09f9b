/* jsonread.c - the parsers for what a client reads from tfetchd: error bodies, the tensor
 * listing, a worker's registration.
 *
 * The text has passed the strict gate (proto/jsoncheck.h) on its way into cJSON, which the
 * parsers reach through proto/cjson.h. Parsed trees
 * live only inside one call. No state of its own; any thread (cJSON itself resets a global
 * error slot on every parse - see cjson.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/cjson.h"
#include "proto/dtype.h"
#include "proto/ids.h"
#include "proto/jsoncheck.h"
#include "proto/jsonread.h"
#include "proto/jsonw.h"
#include "proto/utf8.h"

#define MAX_EXACT (UINT64_C(1) << 53)

static void copy_trunc(char *dst, size_t size, const char *src)
{
    size_t n;

    if (size == 0)
        return;
    n = tfp_utf8_cut(src, strlen(src), size - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

int tfp_parse_error_body(const char *body, size_t len, tfp_status_t *code, char *msg,
                         size_t msg_size)
{
    const cJSON *e, *c;
    cJSON *root;
    tfp_status_t st;

    if (body == NULL || tfp_cj_parse(body, len, TFP_CJ_WHOLE | TFP_CJ_NODUP, &root, NULL, NULL) != TFP_OK)
        return -1;
    e = cJSON_GetObjectItemCaseSensitive(root, "error");
    c = cJSON_GetObjectItemCaseSensitive(root, "code");
    if (!cJSON_IsObject(root) || !cJSON_IsString(e) || !cJSON_IsString(c)) {
        cJSON_Delete(root);
        return -1;
    }
    if (tfp_status_from_name(c->valuestring, &st) != 0 || st == TFP_OK)
        st = TFP_EINTERNAL;
    if (code != NULL)
        *code = st;
    if (msg != NULL)
        copy_trunc(msg, msg_size, e->valuestring);
    cJSON_Delete(root);
    return 0;
}

/* ---- the listing --------------------------------------------------------------------- */

void tfp_listing_free(tfp_list_entry_t *entries, size_t n)
{
    if (entries == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(entries[i].name);
    free(entries);
}

/* Validates one inner {"name", "dtype", "shape"} description. */
static tfp_status_t check_tensor(const cJSON *t, size_t i, size_t j, tfp_err_t *err)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
    const cJSON *d;
    int rank = 0;

    if (!cJSON_IsObject(t))
        return tfp_err_set(err, TFP_EPROTO, "listing: tensors[%zu].tensors[%zu] is not an object",
                           i, j);
    if (!cJSON_IsString(name))
        return tfp_err_set(err, TFP_EPROTO, "listing: tensors[%zu].tensors[%zu].name is not a string",
                           i, j);
    if (!cJSON_IsString(dtype) ||
        tfp_dtype_from_name(dtype->valuestring, strlen(dtype->valuestring), NULL) != 0)
        return tfp_err_set(err, TFP_EPROTO, "listing: tensors[%zu].tensors[%zu].dtype is not a known dtype",
                           i, j);
    if (!cJSON_IsArray(shape))
        return tfp_err_set(err, TFP_EPROTO, "listing: tensors[%zu].tensors[%zu].shape is not an array",
                           i, j);
    cJSON_ArrayForEach(d, shape) {
        uint64_t v;

        if (++rank > 8 || tfp_cj_count(d, 0, MAX_EXACT, &v) != 0)
            return tfp_err_set(err, TFP_EPROTO,
                               "listing: tensors[%zu].tensors[%zu].shape is not up to 8 dims of 0..2^53",
                               i, j);
    }
    return TFP_OK;
}

static tfp_status_t read_entry(const cJSON *e, size_t i, tfp_list_entry_t *out, tfp_err_t *err)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(e, "bytes");
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(e, "tensors");
    const cJSON *t;
    size_t j = 0;
    tfp_status_t st;

    if (!cJSON_IsObject(e))
        return tfp_err_set(err, TFP_EPROTO, "listing: tensors[%zu] is not an object", i);
    if (!cJSON_IsString(name) || name->valuestring[0] == '\0')
        return tfp_err_set(err, TFP_EPROTO, "listing: tensors[%zu].name is not a non-empty string", i);
    if (tfp_cj_uint(bytes, 0, MAX_EXACT, &out->bytes) != 0)
        return tfp_err_set(err, TFP_EPROTO,
                           "listing: tensors[%zu].bytes is not a non-negative integer", i);
    if (!cJSON_IsArray(tensors))
        return tfp_err_set(err, TFP_EPROTO, "listing: tensors[%zu].tensors is not an array", i);
    cJSON_ArrayForEach(t, tensors) {
        st = check_tensor(t, i, j, err);
        if (st != TFP_OK)
            return st;
        j++;
    }
    out->ntensors = j;
    out->name = malloc(strlen(name->valuestring) + 1);
    if (out->name == NULL)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory reading the listing");
    strcpy(out->name, name->valuestring);
    return TFP_OK;
}

tfp_status_t tfp_parse_listing(const char *body, size_t len, tfp_list_entry_t **entries,
                               size_t *n, tfp_err_t *err)
{
    const cJSON *list, *e;
    tfp_list_entry_t *out = NULL;
    size_t count, i = 0;
    cJSON *root;
    tfp_status_t st;

    if (body == NULL || entries == NULL || n == NULL)
        return tfp_err_set(err, TFP_EINVAL, "listing: no body or no output");
    st = tfp_cj_parse(body, len, TFP_CJ_WHOLE | TFP_CJ_NODUP, &root, NULL, err);
    if (st != TFP_OK)
        return st;
    list = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    if (!cJSON_IsObject(root) || !cJSON_IsArray(list)) {
        st = tfp_err_set(err, TFP_EPROTO, "listing: not an object with a \"tensors\" array");
        goto free_root;
    }
    count = (size_t)cJSON_GetArraySize(list);
    if (count > 0) {
        out = calloc(count, sizeof *out);
        if (out == NULL) {
            st = tfp_err_set(err, TFP_ENOMEM, "out of memory reading the listing");
            goto free_root;
        }
    }
    cJSON_ArrayForEach(e, list) {
        st = read_entry(e, i, &out[i], err);
        if (st != TFP_OK)
            goto free_out;
        i++;
    }
    cJSON_Delete(root);
    *entries = out;
    *n = count;
    return TFP_OK;

free_out:
    tfp_listing_free(out, i);
free_root:
    cJSON_Delete(root);
    return st;
}

tfp_status_t tfp_parse_listing_next(const char *body, size_t len, char *next, tfp_err_t *err)
{
    cJSON *root = NULL;
    tfp_status_t st = tfp_cj_parse(body, len, TFP_CJ_WHOLE | TFP_CJ_NODUP, &root, NULL, err);
    if (st != TFP_OK)
        return st;
    const cJSON *v = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "next")
                                          : NULL;
    if (!cJSON_IsObject(root))
        st = tfp_err_set(err, TFP_EPROTO, "listing: not an object");
    else if (v && (!cJSON_IsString(v) || !tfp_name_valid(v->valuestring) ||
                   strlen(v->valuestring) > TFP_MAX_TENSOR_NAME))
        st = tfp_err_set(err, TFP_EPROTO, "listing: \"next\" is not a tensor name");
    else
        snprintf(next, TFP_MAX_TENSOR_NAME + 1, "%s", v ? v->valuestring : "");
    cJSON_Delete(root);
    return st;
}

tfp_status_t tfp_parse_worker_routes(const char *body, size_t len, size_t max, char ***routes,
                                     size_t *n, tfp_err_t *err)
{
    cJSON *root = NULL;
    tfp_status_t st = tfp_cj_parse(body, len, TFP_CJ_WHOLE | TFP_CJ_NODUP, &root, NULL, err);
    if (st != TFP_OK)
        return st;
    const cJSON *arr = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "routes")
                                            : NULL;
    size_t count = cJSON_IsArray(arr) ? (size_t)cJSON_GetArraySize(arr) : 0;
    char **out = NULL;
    size_t k = 0;
    if (!cJSON_IsObject(root) || !cJSON_IsArray(arr)) {
        st = tfp_err_set(err, TFP_EPROTO, "expected {\"routes\": [\"name\", ...]}");
        goto done;
    }
    if (count == 0 || count > max) {
        st = tfp_err_set(err, TFP_EPROTO, "\"routes\" must list 1 to %zu names, not %zu", max,
                         count);
        goto done;
    }
    for (const cJSON *c = root->child; c; c = c->next)
        if (strcmp(c->string, "routes") != 0) {
            st = tfp_err_set(err, TFP_EPROTO, "unknown key '%.64s'", c->string);
            goto done;
        }
    if (!(out = calloc(count, sizeof *out))) {
        st = tfp_err_set(err, TFP_ENOMEM, "out of memory");
        goto done;
    }
    for (const cJSON *c = arr->child; c; c = c->next) {
        if (!cJSON_IsString(c) || !tfp_name_valid(c->valuestring)) {
            st = tfp_err_set(err, TFP_EPROTO, "route %zu is not a valid name "
                             "([A-Za-z0-9._-]{1,255})", k);
            goto done;
        }
        if (!(out[k] = strdup(c->valuestring))) {
            st = tfp_err_set(err, TFP_ENOMEM, "out of memory");
            goto done;
        }
        k++;
    }
    *routes = out;
    *n = k;
    out = NULL;
done:
    if (out)
        tfp_strings_free(out, k);
    cJSON_Delete(root);
    return st;
}

void tfp_strings_free(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

tfp_status_t tfp_parse_worker_reg(const char *body, size_t len, char *id, size_t id_size,
                                  char *secret, uint64_t *lease_ms, tfp_err_t *err)
{
    cJSON *root = NULL;
    tfp_status_t st = tfp_cj_parse(body, len, TFP_CJ_WHOLE | TFP_CJ_NODUP, &root, NULL, err);
    if (st != TFP_OK)
        return st;
    const cJSON *w = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "worker")
                                          : NULL;
    const cJSON *l = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "lease_ms")
                                          : NULL;
    const cJSON *sec = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "secret")
                                            : NULL;
    uint64_t lease;
    if (!cJSON_IsString(w) || !tfp_name_valid(w->valuestring) ||
        strlen(w->valuestring) >= id_size || tfp_cj_uint(l, 0, MAX_EXACT, &lease) != 0 ||
        lease == 0 || (sec && !(cJSON_IsString(sec) && tfp_worker_secret_valid(sec->valuestring)))) {
        st = tfp_err_set(err, TFP_EPROTO, "expected {\"worker\": ID, \"secret\": S, "
                         "\"lease_ms\": N}");
    } else {
        memcpy(id, w->valuestring, strlen(w->valuestring) + 1);
        if (sec)
            memcpy(secret, sec->valuestring, TFP_WORKER_SECRET_LEN + 1);
        else
            secret[0] = '\0';
        *lease_ms = lease;
    }
    cJSON_Delete(root);
    return st;
}

tfp_status_t tfp_parse_uint_member(const char *body, size_t len, const char *key,
                                   uint64_t *out, tfp_err_t *err)
{
    cJSON *root = NULL;
    tfp_status_t st = tfp_cj_parse(body, len, TFP_CJ_WHOLE | TFP_CJ_NODUP, &root, NULL, err);
    if (st != TFP_OK)
        return st;
    const cJSON *m = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, key) : NULL;
    uint64_t v;
    if (tfp_cj_uint(m, 0, MAX_EXACT, &v) != 0)
        st = tfp_err_set(err, TFP_EPROTO, "expected an object with \"%s\": N (0..2^53)", key);
    else
        *out = v;
    cJSON_Delete(root);
    return st;
}
