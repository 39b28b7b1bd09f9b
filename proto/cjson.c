/* cjson.c - the strict parse and the checked getters of cjson.h, over cJSON. Pure; any
 * thread (see cjson.h for cJSON's one global).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/cjson.h"
#include "proto/jsonread.h"

size_t tfp_cj_skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

tfp_status_t tfp_cj_parse(const char *s, size_t n, unsigned flags, cJSON **out, size_t *end,
                          tfp_err_t *err)
{
    size_t stop;
    cJSON *root;
    tfp_status_t st;

    st = tfp_json_check(s, n, &stop, err);
    if (st != TFP_OK)
        return st;
    if ((flags & TFP_CJ_WHOLE) && tfp_cj_skip_ws(s, n, stop) != n)
        return tfp_err_set(err, TFP_EPROTO, "invalid JSON at byte %zu: text after the value",
                           tfp_cj_skip_ws(s, n, stop));
    root = cJSON_ParseWithLength(s, stop);
    if (root == NULL)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory parsing JSON");
    if (flags & TFP_CJ_NODUP) {
        int dup = tfp_cj_dup(root, 1, NULL);

        if (dup != 0) {
            cJSON_Delete(root);
            return dup < 0 ? tfp_err_set(err, TFP_ENOMEM, "out of memory parsing JSON")
                           : tfp_err_set(err, TFP_EPROTO, "duplicate key in JSON object");
        }
    }
    if (end != NULL)
        *end = stop;
    *out = root;
    return TFP_OK;
}

int tfp_cj_dup(const cJSON *item, int deep, const char **dup)
{
    const cJSON *c;
    const char **keys, *found;
    size_t n = 0, i = 0;

    for (c = item->child; c != NULL; c = c->next) {
        if (deep) {
            int sub = tfp_cj_dup(c, 1, dup);

            if (sub != 0)
                return sub;
        }
        n++;
    }
    if (!cJSON_IsObject(item) || n < 2)
        return 0;
    keys = malloc(n * sizeof *keys);
    if (keys == NULL)
        return -1;
    for (c = item->child; c != NULL; c = c->next)
        keys[i++] = c->string;
    found = tfp_find_dup(keys, n);
    free(keys);
    if (found != NULL && dup != NULL)
        *dup = found;
    return found != NULL;
}

int tfp_cj_uint(const cJSON *item, uint64_t lo, uint64_t hi, uint64_t *out)
{
    double d;

    if (!cJSON_IsNumber(item))
        return TFP_CJ_ENOTNUM;
    d = item->valuedouble;
    if (!(d >= (double)lo))
        return TFP_CJ_ELOW;
    if (d > (double)hi)
        return TFP_CJ_EHIGH;
    if (d != (double)(uint64_t)d)
        return TFP_CJ_EFRAC;
    *out = (uint64_t)d;
    return 0;
}

int tfp_cj_str(const cJSON *item, char *dst, size_t max)
{
    size_t n;

    if (!cJSON_IsString(item))
        return -1;
    n = strlen(item->valuestring);
    if (n > max)
        return -1;
    memcpy(dst, item->valuestring, n + 1);
    return 0;
}

tfp_status_t tfp_cj_prefix(tfp_err_t *err, tfp_status_t code, const char *what)
{
    char inner[sizeof err->msg];

    if (err == NULL)
        return code;
    memcpy(inner, err->msg, sizeof inner);
    inner[sizeof inner - 1] = '\0';
    return tfp_err_set(err, code, "%s: %s", what, inner);
}
