/* jsonview.c - small tensors rendered as JSON for people (Accept: application/json), and
 * the decoders of the narrow float types.
 *
 * Reads tensor bytes as little-endian whatever the host; writes through tfp_jw, so names
 * and metadata are escaped like every other JSON proto emits. The caller's max_elems bounds
 * the work and the output: a doc with more elements, or more nested arrays, is refused.
 * Owns nothing past the call; any thread.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "proto/jsonview.h"
#include "proto/le.h"
#include "proto/jsonw.h"

float tfp_f16_to_f32(uint16_t h)
{
    unsigned e = (h >> 10) & 0x1F, m = h & 0x3FF;
    float v;

    if (e == 0)
        v = ldexpf((float)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexpf((float)(m | 0x400), (int)e - 25);
    return (h & 0x8000) ? -v : v;
}

float tfp_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float v;

    memcpy(&v, &bits, sizeof v);
    return v;
}

/* E4M3 "fn": bias 7, no infinities, only S.1111.111 is NaN; max 448. */
float tfp_f8e4m3_to_f32(uint8_t b)
{
    unsigned e = (b >> 3) & 0xF, m = b & 0x7;
    float v;

    if (e == 15 && m == 7)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf((float)(m | 0x8), (int)e - 10);
    return (b & 0x80) ? -v : v;
}

/* E8M0 (the MX block scale): an exponent only, 2^(e - 127); 0xFF is NaN. */
float tfp_f8e8m0_to_f32(uint8_t b)
{
    return b == 0xFF ? NAN : ldexpf(1.0f, (int)b - 127);
}

/* The "fnuz" pair: no infinities, no negative zero; 0x80 (the would-be -0) is the one NaN.
 * E4M3FNUZ has bias 8, E5M2FNUZ bias 16. */
static float fnuz_to_f32(uint8_t b, unsigned mbits, int bias)
{
    unsigned e = (b & 0x7F) >> mbits, m = b & ((1u << mbits) - 1);
    float v;

    if (b == 0x80)
        return NAN;
    if (e == 0)
        v = ldexpf((float)m, 1 - bias - (int)mbits);
    else
        v = ldexpf((float)(m | (1u << mbits)), (int)e - bias - (int)mbits);
    return (b & 0x80) ? -v : v;
}

float tfp_f8e4m3fnuz_to_f32(uint8_t b)
{
    return fnuz_to_f32(b, 3, 8);
}

float tfp_f8e5m2fnuz_to_f32(uint8_t b)
{
    return fnuz_to_f32(b, 2, 16);
}

/* E5M2: bias 15, IEEE-like (the top byte of an F16). */
float tfp_f8e5m2_to_f32(uint8_t b)
{
    return tfp_f16_to_f32((uint16_t)(b << 8));
}

static void put_float(tfp_jw_t *w, double v, int f64)
{
    char b[40];
    int k;

    if (isnan(v)) {
        tfp_jw_str(w, "NaN");
        return;
    }
    if (isinf(v)) {
        tfp_jw_str(w, v < 0 ? "-Infinity" : "Infinity");
        return;
    }
    k = snprintf(b, sizeof b, f64 ? "%.17g" : "%.9g", v);
    for (int i = 0; i < k; i++) {
        if (b[i] == ',')
            b[i] = '.';                 /* a locale's decimal comma is not JSON */
    }
    tfp_jw_raw(w, b, (size_t)k);
}

static void put_elem(tfp_jw_t *w, tfp_dtype_t dt, const uint8_t *p)
{
    uint64_t u = tfp_le_get(p, tfp_dtype_size(dt));
    uint32_t u32 = (uint32_t)u;
    float f;
    double d;

    switch (dt) {
    case TFP_F64:
        memcpy(&d, &u, sizeof d);
        put_float(w, d, 1);
        return;
    case TFP_F32:
        memcpy(&f, &u32, sizeof f);
        put_float(w, f, 0);
        return;
    case TFP_F16:
        put_float(w, tfp_f16_to_f32((uint16_t)u), 0);
        return;
    case TFP_BF16:
        put_float(w, tfp_bf16_to_f32((uint16_t)u), 0);
        return;
    case TFP_F8_E4M3:
        put_float(w, tfp_f8e4m3_to_f32((uint8_t)u), 0);
        return;
    case TFP_F8_E5M2:
        put_float(w, tfp_f8e5m2_to_f32((uint8_t)u), 0);
        return;
    case TFP_F8_E8M0:
        put_float(w, tfp_f8e8m0_to_f32((uint8_t)u), 0);
        return;
    case TFP_F8_E4M3FNUZ:
        put_float(w, tfp_f8e4m3fnuz_to_f32((uint8_t)u), 0);
        return;
    case TFP_F8_E5M2FNUZ:
        put_float(w, tfp_f8e5m2fnuz_to_f32((uint8_t)u), 0);
        return;
    case TFP_C64:                   /* [real, imaginary] */
        tfp_jw_arr_begin(w);
        u32 = (uint32_t)u;
        memcpy(&f, &u32, sizeof f);
        put_float(w, f, 0);
        u32 = (uint32_t)(u >> 32);
        memcpy(&f, &u32, sizeof f);
        put_float(w, f, 0);
        tfp_jw_arr_end(w);
        return;
    case TFP_I64:
        tfp_jw_int(w, (int64_t)u);
        return;
    case TFP_I32:
        tfp_jw_int(w, (int32_t)(uint32_t)u);
        return;
    case TFP_I16:
        tfp_jw_int(w, (int16_t)(uint16_t)u);
        return;
    case TFP_I8:
        tfp_jw_int(w, (int8_t)(uint8_t)u);
        return;
    case TFP_BOOL:
        tfp_jw_bool(w, u != 0);
        return;
    default:                        /* U64, U32, U16, U8 */
        tfp_jw_uint(w, u);
        return;
    }
}

/* Nested arrays in C order: dim d of t, starting at element *idx. */
static void put_dims(tfp_jw_t *w, const tfp_tensor_t *t, int d, uint64_t *idx)
{
    if (d == t->rank) {
        put_elem(w, t->dtype, t->data + *idx * tfp_dtype_size(t->dtype));
        (*idx)++;
        return;
    }
    tfp_jw_arr_begin(w);
    for (uint64_t i = 0; i < t->shape[d]; i++)
        put_dims(w, t, d + 1, idx);
    tfp_jw_arr_end(w);
}

/* Elements and nested arrays of t, added to the totals (saturating). */
static tfp_status_t cost(const tfp_tensor_t *t, uint64_t *elems, uint64_t *arrays,
                         tfp_err_t *err)
{
    uint64_t nbytes, count, p = 1;
    tfp_status_t st;

    st = tfp_shape_nbytes(t->dtype, t->rank, t->shape, &nbytes, err);
    if (st != TFP_OK)
        return st;
    if (tfp_dtype_size(t->dtype) == 0)
        return tfp_err_set(err, TFP_ENOTACCEPT,
                           "tensor '%.64s': packed %s elements have no JSON view; ask for safetensors",
                           t->name, tfp_dtype_name(t->dtype));
    if (nbytes != t->nbytes || (nbytes > 0 && t->data == NULL))
        return tfp_err_set(err, TFP_EINVAL, "tensor '%.64s': data not bound or wrong size",
                           t->name);
    tfp_shape_count(t->rank, t->shape, &count, NULL);
    if (__builtin_add_overflow(*elems, count, elems))
        *elems = UINT64_MAX;
    for (int d = 0; d < t->rank; d++) {
        if (__builtin_add_overflow(*arrays, p, arrays))
            *arrays = UINT64_MAX;
        if (__builtin_mul_overflow(p, t->shape[d], &p))
            p = UINT64_MAX;
    }
    return TFP_OK;
}

tfp_status_t tfp_jsonview_render(const tfp_doc_t *doc, uint64_t max_elems, char **out,
                                 size_t *len, tfp_err_t *err)
{
    uint64_t elems = 0, arrays = 0;
    tfp_status_t st;
    tfp_jw_t w;
    char *text;

    if (doc == NULL || out == NULL)
        return tfp_err_set(err, TFP_EINVAL, "no doc or no output");
    for (size_t i = 0; i < doc->n; i++) {
        st = cost(&doc->t[i], &elems, &arrays, err);
        if (st != TFP_OK)
            return st;
    }
    if (elems > max_elems)
        return tfp_err_set(err, TFP_ENOTACCEPT,
                           "%llu elements are too many for JSON (at most %llu); ask for safetensors",
                           (unsigned long long)elems, (unsigned long long)max_elems);
    if (arrays > max_elems)
        return tfp_err_set(err, TFP_ENOTACCEPT,
                           "%llu nested arrays are too many for JSON (at most %llu); ask for safetensors",
                           (unsigned long long)arrays, (unsigned long long)max_elems);

    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    for (size_t i = 0; i < doc->n; i++) {
        const tfp_tensor_t *t = &doc->t[i];
        uint64_t idx = 0;

        tfp_jw_key(&w, t->name);
        tfp_jw_obj_begin(&w);
        tfp_jw_key(&w, "dtype");
        tfp_jw_str(&w, tfp_dtype_name(t->dtype));
        tfp_jw_key(&w, "shape");
        tfp_jw_arr_begin(&w);
        for (int d = 0; d < t->rank; d++)
            tfp_jw_uint(&w, t->shape[d]);
        tfp_jw_arr_end(&w);
        tfp_jw_key(&w, "data");
        put_dims(&w, t, 0, &idx);
        tfp_jw_obj_end(&w);
    }
    if (doc->nmeta > 0) {
        tfp_jw_key(&w, "__metadata__");
        tfp_jw_obj_begin(&w);
        for (size_t i = 0; i < doc->nmeta; i++) {
            tfp_jw_key(&w, doc->meta[i].key);
            tfp_jw_str(&w, doc->meta[i].value);
        }
        tfp_jw_obj_end(&w);
    }
    tfp_jw_obj_end(&w);
    text = tfp_jw_finish(&w, len);
    if (text == NULL)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory rendering JSON");
    *out = text;
    return TFP_OK;
}
