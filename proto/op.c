/* op.c - names of the operations and the refusals every transport shares (op.h). Pure; any
 * thread.
 */
#include "config.h"
#include "proto/op.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

const char *tfp_op_name(int kind)
{
    static const char *const names[] = {
#define X(n, s) s,
        TFP_OP_MAP(X)
#undef X
    };
    return kind >= 0 && kind < TFP_OP_COUNT ? names[kind] : "?";
}

tfp_status_t tfp_op_fail(tfp_op_err_t *e, tfp_status_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    e->allow = NULL;
    return code;
}

int tfp_op_accepts_safetensors(const tfp_op_t *op)
{
    return op->accept == TFP_MEDIA_NONE || op->accept == TFP_MEDIA_SAFETENSORS ||
           op->accept == TFP_MEDIA_ANY;
}

tfp_status_t tfp_op_check_length(const tfp_op_t *op, uint64_t max, tfp_op_err_t *e)
{
    if (op->body.length >= 0 && (uint64_t)op->body.length > max)
        return tfp_op_fail(e, TFP_ETOOBIG, "body of %lld bytes exceeds the limit of %llu bytes",
                           (long long)op->body.length, (unsigned long long)max);
    return TFP_OK;
}

tfp_status_t tfp_op_digest_lines(tfp_op_t *op, const char *s, size_t n, tfp_op_err_t *e)
{
    char v[TFP_DIGEST_MAX_INPUT + 1];
    tfp_err_t err;
    for (size_t i = 0; i < n;) {
        const char *line = s + i, *end = memchr(line, '\n', n - i);
        size_t len = end ? (size_t)(end - line) : n - i;
        i += len + 1;
        const char *colon = memchr(line, ':', len);
        if (!colon || (size_t)(colon - line) + 2 > len || colon[1] != ' ')
            continue;                   /* the frame's decoder checked the form */
        size_t nn = (size_t)(colon - line), vn = len - nn - 2;
        if (vn > TFP_DIGEST_MAX_INPUT)
            return tfp_op_fail(e, TFP_EBADREQ, "%.*s: longer than %d bytes", (int)nn, line,
                               TFP_DIGEST_MAX_INPUT);
        memcpy(v, colon + 2, vn);
        v[vn] = '\0';
#define IS(name) (nn == sizeof(name) - 1 && strncasecmp(line, name, nn) == 0)
        if (op->kind == TFP_OP_TENSOR_PUT && (IS("Repr-Digest") || IS("Content-Digest"))) {
            tfp_digest_t *d = IS("Repr-Digest") ? &op->digest.repr : &op->digest.content;
            if (tfp_digest_parse(v, d, &err) != TFP_OK)
                return tfp_op_fail(e, TFP_EBADREQ, "%.*s: %s", (int)nn, line, err.msg);
        } else if (op->kind == TFP_OP_TENSOR_GET &&
                   (IS("Want-Repr-Digest") || IS("Want-Content-Digest"))) {
            int w = 0;
            if (tfp_digest_want_parse(v, &w, &err) != TFP_OK)
                return tfp_op_fail(e, TFP_EBADREQ, "%.*s: %s", (int)nn, line, err.msg);
            op->digest.want |= w;
        }
#undef IS
    }
    return TFP_OK;
}
