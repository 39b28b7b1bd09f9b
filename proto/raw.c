/* raw.c - raw single-tensor bodies: the Tfetch-Shape and Tfetch-Dtype headers and the
 * body-size check.
 *
 * Header values come from the network: everything is validated and every refusal says which
 * header and what was wrong (TFP_EBADREQ for a bad header, TFP_EUNPROC for a body that does
 * not match it, TFP_ERANGE for sizes that overflow). Pure; any thread.
 */
#include <stdio.h>
#include <string.h>

#include "proto/raw.h"

#define MAX_DIM (UINT64_C(1) << 53)

static int ows(char c)
{
    return c == ' ' || c == '\t';
}

tfp_status_t tfp_raw_parse_shape(const char *s, int *rank, uint64_t shape[TFP_MAX_RANK],
                                 tfp_err_t *err)
{
    uint64_t dims[TFP_MAX_RANK];
    size_t i = 0, n;
    int r = 0;

    if (s == NULL)
        return tfp_err_set(err, TFP_EBADREQ, "missing Tfetch-Shape");
    n = strlen(s);
    while (n > 0 && ows(s[n - 1]))
        n--;
    while (i < n && ows(s[i]))
        i++;
    if (i < n && s[i] == '[') {
        if (s[n - 1] != ']' || n - i < 2)
            return tfp_err_set(err, TFP_EBADREQ, "Tfetch-Shape: '[' without a closing ']'");
        i++;
        n--;
        while (i < n && ows(s[i]))
            i++;
    }
    if (i == n)
        goto done;                      /* "", "[]": a scalar */
    for (;;) {
        uint64_t v = 0;
        size_t start;

        while (i < n && ows(s[i]))
            i++;
        start = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            v = v * 10 + (uint64_t)(s[i] - '0');
            if (v > MAX_DIM)
                return tfp_err_set(err, TFP_EBADREQ, "Tfetch-Shape: dim %d exceeds 2^53", r);
            i++;
        }
        if (i == start) {
            if (i == n || s[i] == ',')
                return tfp_err_set(err, TFP_EBADREQ, "Tfetch-Shape: dim %d is empty", r);
            return tfp_err_set(err, TFP_EBADREQ, "Tfetch-Shape: unexpected '%c' at byte %zu",
                               s[i], i);
        }
        if (r == TFP_MAX_RANK)
            return tfp_err_set(err, TFP_EBADREQ, "Tfetch-Shape: more than %d dims",
                               TFP_MAX_RANK);
        dims[r++] = v;
        while (i < n && ows(s[i]))
            i++;
        if (i == n)
            break;
        if (s[i] != ',')
            return tfp_err_set(err, TFP_EBADREQ, "Tfetch-Shape: unexpected '%c' at byte %zu",
                               s[i], i);
        i++;
    }
done:
    *rank = r;
    for (int k = 0; k < r; k++)
        shape[k] = dims[k];
    return TFP_OK;
}

int tfp_raw_format_shape(int rank, const uint64_t *shape, char *buf, size_t size)
{
    size_t len = 0;

    if (buf == NULL || size == 0 || rank < 0 || rank > TFP_MAX_RANK)
        return -1;
    buf[0] = '\0';
    for (int i = 0; i < rank; i++) {
        int k = snprintf(buf + len, size - len, i ? ",%llu" : "%llu",
                         (unsigned long long)shape[i]);

        if (k < 0 || (size_t)k >= size - len) {
            buf[0] = '\0';
            return -1;
        }
        len += (size_t)k;
    }
    return 0;
}

tfp_status_t tfp_raw_check(const char *dtype_hdr, const char *shape_hdr, uint64_t body_len,
                           tfp_dtype_t *dt, int *rank, uint64_t shape[TFP_MAX_RANK],
                           tfp_err_t *err)
{
    uint64_t dims[TFP_MAX_RANK], want;
    char text[TFP_MAX_RANK * 21];
    tfp_dtype_t d;
    tfp_status_t st;
    int r;

    if (dtype_hdr == NULL)
        return tfp_err_set(err, TFP_EBADREQ, "missing Tfetch-Dtype");
    if (tfp_dtype_from_name(dtype_hdr, strlen(dtype_hdr), &d) != 0)
        return tfp_err_set(err, TFP_EBADREQ, "Tfetch-Dtype: unknown dtype '%.32s'", dtype_hdr);
    st = tfp_raw_parse_shape(shape_hdr, &r, dims, err);
    if (st != TFP_OK)
        return st;
    st = tfp_shape_nbytes(d, r, dims, &want, err);
    if (st == TFP_EINVAL) {             /* packed elements that do not fill whole bytes */
        st = TFP_EBADREQ;
        if (err)
            err->code = st;
    }
    if (st != TFP_OK)
        return st;
    if (body_len != TFP_RAW_LEN_UNKNOWN && want != body_len) {
        tfp_raw_format_shape(r, dims, text, sizeof text);
        return tfp_err_set(err, TFP_EUNPROC, "body is %llu bytes but %s x [%s] needs %llu",
                           (unsigned long long)body_len, tfp_dtype_name(d), text,
                           (unsigned long long)want);
    }
    *dt = d;
    *rank = r;
    for (int k = 0; k < r; k++)
        shape[k] = dims[k];
    return TFP_OK;
}
