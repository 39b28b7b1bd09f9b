/* scale.c - an example tfetchd route plugin (see tfetch-plugin(3) and doc/PLUGINS.md).
 *
 *   scale   multiplies every F32 and F64 tensor of the request by a factor and answers them
 *           under the same names, with the factor as metadata "factor". The factor is the
 *           request's metadata "factor", else a one-element F32/F64 tensor named "factor",
 *           else the plugin's default (2, or `factor=F` in its arguments). Other dtypes are
 *           refused with 422. Stateless.
 *   count   counts each user's calls (per-user state, freed by the daemon through count_free)
 *           and answers the count as a scalar I64 tensor "count"; its inputs are ignored.
 *
 *   plugin = /usr/local/lib/tfetch/plugins/scale.so factor=0.5
 *
 * make install puts it in $(libdir)/tfetch/plugins (tfetch-plugin.pc's plugindir).
 *
 * Uses only tfetch-plugin.h and libc. The default factor is written by init and only read
 * afterwards, so handlers may run on any number of threads at once.
 */
#include <tfetch-plugin.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double default_factor = 2.0;

/* A finite number spelling the whole of s. 0, or -1. */
static int parse_factor(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* The call's factor (see the top of the file). TFPL_OK, or the status it failed the call with. */
static int call_factor(const tfpl_host_t *host, tfpl_call_t *call, double *factor)
{
    const char *meta = host->input_meta(call, "factor");
    if (meta) {
        if (parse_factor(meta, factor) != 0)
            return host->fail(call, TFPL_EBADREQ, "scale: metadata factor must be a finite "
                              "number, got '%.64s'", meta);
        return TFPL_OK;
    }
    tfpl_tensor_t t;
    if (host->input_find(call, "factor", &t) != 0) {
        *factor = default_factor;
        return TFPL_OK;
    }
    if (t.dtype == TFPL_F64 && t.nbytes == sizeof(double)) {
        memcpy(factor, t.data, sizeof(double));
    } else if (t.dtype == TFPL_F32 && t.nbytes == sizeof(float)) {
        float f;
        memcpy(&f, t.data, sizeof f);
        *factor = f;
    } else {
        return host->fail(call, TFPL_EUNPROC, "scale: tensor 'factor' must hold one F32 or F64 "
                          "value; it is %s with %llu bytes", host->dtype_name(t.dtype),
                          (unsigned long long)t.nbytes);
    }
    return TFPL_OK;
}

static int scale_route(const tfpl_host_t *host, tfpl_call_t *call)
{
    double factor;
    int st = call_factor(host, call, &factor);
    if (st != TFPL_OK)
        return st;
    size_t n = host->input_count(call);
    for (size_t i = 0; i < n; i++) {
        tfpl_tensor_t t;
        host->input_at(call, i, &t);
        if (strcmp(t.name, "factor") == 0)
            continue;
        if (t.dtype != TFPL_F32 && t.dtype != TFPL_F64)
            return host->fail(call, TFPL_EUNPROC, "scale: tensor '%s' is %s; scale multiplies "
                              "F32 and F64 tensors", t.name, host->dtype_name(t.dtype));
        unsigned char *out = host->output_alloc(call, t.name, t.dtype, t.rank, t.shape);
        if (!out)
            return TFPL_EINTERNAL;      /* the call already carries the reason */
        const unsigned char *in = t.data;
        if (t.dtype == TFPL_F32) {
            for (uint64_t k = 0; k < t.nbytes / sizeof(float); k++) {
                float x;
                memcpy(&x, in + k * sizeof x, sizeof x);
                x = (float)(x * factor);
                memcpy(out + k * sizeof x, &x, sizeof x);
            }
        } else {
            for (uint64_t k = 0; k < t.nbytes / sizeof(double); k++) {
                double x;
                memcpy(&x, in + k * sizeof x, sizeof x);
                x *= factor;
                memcpy(out + k * sizeof x, &x, sizeof x);
            }
        }
    }
    char text[32];
    snprintf(text, sizeof text, "%.17g", factor);
    return host->output_meta(call, "factor", text);
}

/* ---- count: per-user state ---------------------------------------------------------------- */

typedef struct {
    int64_t calls;
} counter_t;

static void count_free(void *state) { free(state); }

static int count_route(const tfpl_host_t *host, tfpl_call_t *call)
{
    counter_t *c = host->state(call);
    if (!c) {
        if (!(c = calloc(1, sizeof *c)))
            return host->fail(call, TFPL_ENOMEM, "count: out of memory");
        if (host->set_state(call, c, sizeof *c, count_free) != 0)      /* c is freed */
            return host->fail(call, TFPL_ENOSPACE, "count: no room for the state of user "
                              "'%s'", host->user(call));
    }
    c->calls++;
    return host->output_add(call, "count", TFPL_I64, 0, NULL, &c->calls, sizeof c->calls);
}

/* ---- the plugin ----------------------------------------------------------------------------- */

/* Arguments: blank-separated key=value; only factor=F. */
static int scale_init(const tfpl_host_t *host, const char *args)
{
    char buf[256];
    if (strlen(args) >= sizeof buf) {
        host->log(host, TFPL_LOG_ERR, "arguments too long");
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", args);
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        if (strncmp(tok, "factor=", 7) != 0 || parse_factor(tok + 7, &default_factor) != 0) {
            host->log(host, TFPL_LOG_ERR, "unknown argument '%s' (it takes factor=NUMBER)", tok);
            return -1;
        }
    }
    host->log(host, TFPL_LOG_INFO, "default factor %g", default_factor);
    return 0;
}

const tfpl_plugin_t *tfpl_plugin_entry(unsigned host_abi)
{
    static const tfpl_route_t routes[] = {
        {"scale", scale_route, TFPL_ROUTE_STATELESS, NULL},
        {"count", count_route, 0, NULL},
    };
    static const tfpl_plugin_t plugin = {
        .abi = TFPL_ABI,
        .name = "scale",
        .version = "1.0",
        .routes = routes,
        .nroutes = sizeof routes / sizeof routes[0],
        .init = scale_init,
    };
    return host_abi == TFPL_ABI ? &plugin : NULL;
}
