/* jsonview.h - renders small tensors as JSON for people (Accept: application/json).
 *
 * Output: {"name": {"dtype": "F32", "shape": [2,2], "data": [[1,2],[3,4]]}, ...,
 *          "__metadata__": {...}} with nested arrays in C order. Floats of every width
 * (F16, BF16, F8 decoded) print with enough digits to round-trip as F32/F64; NaN and
 * infinities print as the strings "NaN", "Infinity", "-Infinity"; BOOL as true/false; C64 as
 * [real, imaginary]. Packed sub-byte types (F4, F6_*) have no JSON view (TFP_ENOTACCEPT).
 * Pure; any thread.
 */
#ifndef TFP_JSONVIEW_H
#define TFP_JSONVIEW_H

#include <stddef.h>
#include "proto/doc.h"

/* Renders doc (tensors must have data bound). Refuses (TFP_ENOTACCEPT) when the total
 * element count exceeds max_elems, or the count of nested arrays does (a [1000000, 0] tensor
 * has no elements but a million "[]"). TFP_EINVAL if a tensor's data is unbound or its nbytes
 * does not match. *out is malloc'd, NUL-terminated; *len excludes the NUL. Compact output
 * (no spaces), tensors in doc order, "__metadata__" last and only if there is metadata. */
tfp_status_t tfp_jsonview_render(const tfp_doc_t *doc, uint64_t max_elems, char **out,
                                 size_t *len, tfp_err_t *err);

/* Decoders for the narrow float types, exposed for tests. */
float tfp_f16_to_f32(uint16_t h);
float tfp_bf16_to_f32(uint16_t h);
float tfp_f8e4m3_to_f32(uint8_t v);
float tfp_f8e5m2_to_f32(uint8_t v);
float tfp_f8e8m0_to_f32(uint8_t v);
float tfp_f8e4m3fnuz_to_f32(uint8_t v);
float tfp_f8e5m2fnuz_to_f32(uint8_t v);

#endif
