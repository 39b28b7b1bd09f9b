/* op.c - names of the operations and the refusals every transport shares (op.h). Pure; any
 * thread.
 */
#include "config.h"
#include "proto/op.h"

#include <stdarg.h>
#include <stdio.h>

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

tfp_status_t tfp_op_check_length(const tfp_op_t *op, uint64_t max, tfp_op_err_t *e)
{
    if (op->body.length >= 0 && (uint64_t)op->body.length > max)
        return tfp_op_fail(e, TFP_ETOOBIG, "body of %lld bytes exceeds the limit of %llu bytes",
                           (long long)op->body.length, (unsigned long long)max);
    return TFP_OK;
}
