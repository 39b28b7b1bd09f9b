/* builtin_routes.c - the routes every tfetchd has.
 *
 *   echo        returns the request's tensors and metadata unchanged.
 *   accumulate  keeps, per user, a running element-wise sum of each tensor name it is sent
 *               and returns the sums for the names in the request. A name seen again must
 *               keep its dtype and shape (else 422). Numeric dtypes only (F64 F32 I64..U8);
 *               integers wrap around like C unsigned arithmetic. The state lives in the
 *               caller's session: DELETE /v1/sessions/self or the session TTL ends it.
 * Stateless code; state lives in sessions. Any worker thread.
 */
#include "config.h"
#include "daemon/routes.h"

#include <stdlib.h>
#include <string.h>

static int echo_start(void *arg, tfd_call_t *c)
{
    (void)arg;
    for (size_t i = 0; i < c->in->n; i++) {
        const tfp_tensor_t *t = &c->in->t[i];
        if (tfd_call_output(c, t->name, t->dtype, t->rank, t->shape, t->data, t->nbytes,
                            TFD_OUT_REF) != TFP_OK)
            return TFD_CALL_DONE;
    }
    tfp_err_t err;
    c->out->meta_object = c->in->meta_object;   /* an empty "__metadata__" comes back too */
    for (size_t i = 0; i < c->in->nmeta; i++)
        if (tfp_doc_set_meta(c->out, c->in->meta[i].key, c->in->meta[i].value, &err) != TFP_OK) {
            tfd_call_fail(c, err.code, "%s", err.msg);
            return TFD_CALL_DONE;
        }
    return TFD_CALL_DONE;
}

/* ---- accumulate ------------------------------------------------------------------------- */

typedef struct {
    char *name;
    tfp_dtype_t dtype;
    int rank;
    uint64_t shape[TFP_MAX_RANK];
    uint64_t nbytes;
    uint8_t *data;
} acc_t;

typedef struct {
    size_t n;
    acc_t *v;
} accs_t;

static void accs_free(void *p)
{
    accs_t *a = p;
    for (size_t i = 0; i < a->n; i++) {
        free(a->v[i].name);
        free(a->v[i].data);
    }
    free(a->v);
    free(a);
}

static size_t acc_bytes(const tfp_tensor_t *t)
{
    return sizeof(acc_t) + strlen(t->name) + 1 + (size_t)t->nbytes;
}

static acc_t *acc_find(accs_t *a, const char *name)
{
    for (size_t i = 0; a && i < a->n; i++)
        if (strcmp(a->v[i].name, name) == 0)
            return &a->v[i];
    return NULL;
}

static int summable(tfp_dtype_t dt)
{
    switch (dt) {
    case TFP_F64: case TFP_F32: case TFP_I64: case TFP_I32: case TFP_I16: case TFP_I8:
    case TFP_U64: case TFP_U32: case TFP_U16: case TFP_U8:
        return 1;
    default:
        return 0;
    }
}

#define ADD_AS(T, UT)                                                                   \
    do {                                                                                \
        for (uint64_t k = 0; k < n; k++) {                                              \
            T x, y;                                                                     \
            memcpy(&x, dst + k * sizeof x, sizeof x);                                   \
            memcpy(&y, src + k * sizeof y, sizeof y);                                   \
            x = (T)((UT)x + (UT)y);                                                     \
            memcpy(dst + k * sizeof x, &x, sizeof x);                                   \
        }                                                                               \
    } while (0)

static void add_into(uint8_t *dst, const uint8_t *src, tfp_dtype_t dt, uint64_t nbytes)
{
    uint64_t n = nbytes / tfp_dtype_size(dt);
    switch (dt) {
    case TFP_F64: ADD_AS(double, double); break;
    case TFP_F32: ADD_AS(float, float); break;
    case TFP_I64: ADD_AS(int64_t, uint64_t); break;
    case TFP_I32: ADD_AS(int32_t, uint32_t); break;
    case TFP_I16: ADD_AS(int16_t, uint16_t); break;
    case TFP_I8: ADD_AS(int8_t, uint8_t); break;
    case TFP_U64: ADD_AS(uint64_t, uint64_t); break;
    case TFP_U32: ADD_AS(uint32_t, uint32_t); break;
    case TFP_U16: ADD_AS(uint16_t, uint16_t); break;
    case TFP_U8: ADD_AS(uint8_t, uint8_t); break;
    default: break;
    }
}

static int same_shape(const acc_t *a, const tfp_tensor_t *t)
{
    if (a->rank != t->rank)
        return 0;
    for (int d = 0; d < t->rank; d++)
        if (a->shape[d] != t->shape[d])
            return 0;
    return 1;
}

static int accumulate_start(void *arg, tfd_call_t *c)
{
    (void)arg;
    accs_t *st = tfd_call_state(c);
    size_t grow = 0, adding = 0;

    /* Check everything before changing anything: a refused call leaves the sums as they were. */
    for (size_t i = 0; i < c->in->n; i++) {
        const tfp_tensor_t *t = &c->in->t[i];
        if (!summable(t->dtype)) {
            tfd_call_fail(c, TFP_EUNPROC, "accumulate: tensor '%s' is %s; it sums F64, F32 "
                          "and integer tensors", t->name, tfp_dtype_name(t->dtype));
            return TFD_CALL_DONE;
        }
        acc_t *a = acc_find(st, t->name);
        if (a && (a->dtype != t->dtype || !same_shape(a, t))) {
            tfd_call_fail(c, TFP_EUNPROC, "accumulate: tensor '%s' was %s with %d dims before; "
                          "a running sum keeps its dtype and shape", t->name,
                          tfp_dtype_name(a->dtype), a->rank);
            return TFD_CALL_DONE;
        }
        if (!a) {
            grow += acc_bytes(t);
            adding++;
        }
    }
    if (adding) {
        int fresh = st == NULL;
        if (fresh && !(st = calloc(1, sizeof *st))) {
            tfd_call_fail(c, TFP_ENOMEM, "out of memory");
            return TFD_CALL_DONE;
        }
        acc_t *nv = realloc(st->v, (st->n + adding) * sizeof *nv);
        if (!nv) {
            if (fresh)
                accs_free(st);
            tfd_call_fail(c, TFP_ENOMEM, "out of memory");
            return TFD_CALL_DONE;
        }
        st->v = nv;
        size_t have = 0;
        for (size_t i = 0; i < st->n; i++)
            have += sizeof(acc_t) + strlen(st->v[i].name) + 1 + (size_t)st->v[i].nbytes;
        if (tfd_call_set_state(c, st, have + grow, accs_free) != 0) {
            tfd_call_fail(c, TFP_ENOSPACE, "accumulate: the session state of user '%s' would "
                          "exceed its quota", c->user);
            return TFD_CALL_DONE;
        }
    }
    for (size_t i = 0; i < c->in->n; i++) {
        const tfp_tensor_t *t = &c->in->t[i];
        acc_t *a = acc_find(st, t->name);
        if (a) {
            add_into(a->data, t->data, t->dtype, t->nbytes);
        } else {
            a = &st->v[st->n];
            memset(a, 0, sizeof *a);
            a->name = strdup(t->name);
            a->data = malloc(t->nbytes ? (size_t)t->nbytes : 1);
            if (!a->name || !a->data) {
                free(a->name);
                free(a->data);
                tfd_call_fail(c, TFP_ENOMEM, "out of memory");
                return TFD_CALL_DONE;
            }
            a->dtype = t->dtype;
            a->rank = t->rank;
            memcpy(a->shape, t->shape, sizeof a->shape);
            a->nbytes = t->nbytes;
            memcpy(a->data, t->data, (size_t)t->nbytes);
            st->n++;
        }
        if (tfd_call_output(c, a->name, a->dtype, a->rank, a->shape, a->data, a->nbytes,
                            TFD_OUT_COPY) != TFP_OK)
            return TFD_CALL_DONE;
    }
    return TFD_CALL_DONE;
}

int tfd_builtin_routes_add(tfd_routes_t *rs)
{
    static const tfd_route_ops_t echo = {.start = echo_start, .kind = "builtin", .stateless = 1};
    static const tfd_route_ops_t accumulate = {.start = accumulate_start, .kind = "builtin"};
    if (tfd_routes_add(rs, "echo", &echo) != 0 ||
        tfd_routes_add(rs, "accumulate", &accumulate) != 0)
        return -1;
    return 0;
}
