/* testplug.c - plugins for tests/check_plugins.c, one source built three ways:
 *
 *   testplug.so   probes the host table: routes "tp_probe" (answers what the host told it),
 *                 "tp_status" (returns the status in metadata "status", optionally failing
 *                 first with metadata "fail"), "tp_badout" (describes an output wrongly in the
 *                 way metadata "how" says) and "tp_state" (a per-user state whose destructor
 *                 counts, read through the exported tp_destroyed) and "tp_sleep" (the request's
 *                 one U8 tensor is an absolute path P: creates P.in, then blocks until P exists or
 *                 60 s passed, and answers a U8 "slept"; lets a test hold a call inside a
 *                 handler while it reloads). fini counts, and complains (log, tp_bad_finis)
 *                 when a state is still alive: the daemon destroys them all first.
 *   badabi.so     (-DTP_BAD_ABI) claims ABI TFPL_ABI + 1
 *   refuse.so     (-DTP_REFUSE) wants a newer host: returns NULL from tfpl_plugin_entry
 * (noentry.c is the fourth: a shared object without tfpl_plugin_entry.)
 */
#include <tfetch-plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

TFPL_EXPORT int tp_destroyed;           /* states destroyed so far */
TFPL_EXPORT int tp_finis;               /* fini calls so far */
TFPL_EXPORT int tp_bad_finis;           /* fini calls while states were alive */
static int tp_alive;                    /* states made and not destroyed (calls of one user are
                                         * serialised, of several users not: atomics) */
static int tp_route_tag = 7;                   /* what tp_probe's route_arg points at */

static int probe(const tfpl_host_t *host, tfpl_call_t *call)
{
    tfpl_tensor_t t;
    if (host->input_at(call, host->input_count(call), &t) != -1 ||
        host->input_find(call, "no-such-tensor", &t) != -1 ||
        host->input_meta(call, "no-such-key") != NULL || host->state(call) != NULL ||
        !TFPL_HOST_HAS(host, status_name) || host->dtype_size(TFPL_BF16) != 2 ||
        host->dtype_name(99) != NULL || host->dtype_size(-1) != 0 ||
        strcmp(host->status_name(TFPL_EUNPROC), "TF_EUNPROC") != 0)
        return host->fail(call, TFPL_EINTERNAL, "probe: the host table misbehaves");
    int *tag = host->route_arg(call);
    int64_t v[3] = {(int64_t)host->input_count(call), tag ? *tag : -1, (int64_t)host->abi};
    uint64_t shape[1] = {3};
    if (host->output_add(call, "counts", TFPL_I64, 1, shape, v, sizeof v) != TFPL_OK ||
        host->output_meta(call, "user", host->user(call)) != TFPL_OK ||
        host->output_meta(call, "request", host->request_id(call)) != TFPL_OK ||
        host->output_meta(call, "route", host->route(call)) != TFPL_OK)
        return TFPL_EINTERNAL;
    for (size_t i = 0; host->input_at(call, i, &t) == 0; i++) {   /* echo, renamed */
        char name[300];
        snprintf(name, sizeof name, "in.%s", t.name);
        void *p = host->output_alloc(call, name, t.dtype, t.rank, t.shape);
        if (!p)
            return TFPL_EINTERNAL;
        memcpy(p, t.data, (size_t)t.nbytes);
    }
    if (host->input_find(call, "x", &t) == 0)
        host->log(host, TFPL_LOG_DEBUG, "x is %s, rank %d", host->dtype_name(t.dtype), t.rank);
    return TFPL_OK;
}

static int status(const tfpl_host_t *host, tfpl_call_t *call)
{
    const char *s = host->input_meta(call, "status");
    const char *f = host->input_meta(call, "fail");
    if (f)
        host->fail(call, atoi(f), "tp_status failed as asked (%s)", f);
    return s ? atoi(s) : TFPL_OK;
}

static int badout(const tfpl_host_t *host, tfpl_call_t *call)
{
    const char *how = host->input_meta(call, "how");
    uint64_t shape[2] = {2, 2};
    float v[4] = {1, 2, 3, 4};
    if (!how)
        return TFPL_OK;
    if (strcmp(how, "nbytes") == 0)
        return host->output_add(call, "v", TFPL_F32, 2, shape, v, 8);
    if (strcmp(how, "dtype") == 0)
        return host->output_add(call, "v", 42, 2, shape, v, sizeof v);
    if (strcmp(how, "rank") == 0)
        return host->output_alloc(call, "v", TFPL_F32, 9, shape) ? TFPL_OK : TFPL_EINTERNAL;
    if (strcmp(how, "name") == 0)
        return host->output_add(call, "__metadata__", TFPL_F32, 2, shape, v, sizeof v);
    if (strcmp(how, "twice") == 0) {
        host->output_add(call, "v", TFPL_F32, 2, shape, v, sizeof v);
        return host->output_add(call, "v", TFPL_F32, 2, shape, v, sizeof v);
    }
    if (strcmp(how, "ignored") == 0) {           /* a recorded error wins over TFPL_OK */
        host->output_add(call, "v", TFPL_F32, 2, shape, v, 3);
        return TFPL_OK;
    }
    return TFPL_OK;
}

static void state_free(void *p)
{
    free(p);
    __atomic_fetch_add(&tp_destroyed, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&tp_alive, 1, __ATOMIC_SEQ_CST);
}

/* Keeps a counter of size metadata "bytes" (default 8); answers it as U32 "n". */
static int state(const tfpl_host_t *host, tfpl_call_t *call)
{
    unsigned *n = host->state(call);
    const char *b = host->input_meta(call, "bytes");
    size_t bytes = b ? (size_t)atol(b) : 8;
    if (!n) {
        if (!(n = calloc(1, sizeof *n)))
            return TFPL_ENOMEM;
        __atomic_fetch_add(&tp_alive, 1, __ATOMIC_SEQ_CST);
        if (host->set_state(call, n, bytes, state_free) != 0)
            return host->fail(call, TFPL_ENOSPACE, "tp_state: over quota");
    } else if (b && host->set_state(call, n, bytes, state_free) != 0) {
        return host->fail(call, TFPL_ENOSPACE, "tp_state: over quota");
    }
    (*n)++;
    return host->output_add(call, "n", TFPL_U32, 0, NULL, n, sizeof *n);
}

static int sleep_route(const tfpl_host_t *host, tfpl_call_t *call)
{
    tfpl_tensor_t t;
    char path[512], in[600];
    if (host->input_at(call, 0, &t) != 0 || t.dtype != TFPL_U8 || t.nbytes == 0 ||
        t.nbytes >= sizeof path)
        return host->fail(call, TFPL_EBADREQ, "tp_sleep: send a path as one U8 tensor");
    memcpy(path, t.data, (size_t)t.nbytes);
    path[t.nbytes] = '\0';
    if (path[0] != '/' || strlen(path) != t.nbytes)
        return host->fail(call, TFPL_EBADREQ, "tp_sleep: the path must be absolute");
    snprintf(in, sizeof in, "%s.in", path);
    FILE *f = fopen(in, "w");
    if (!f)
        return host->fail(call, TFPL_EINTERNAL, "tp_sleep: cannot create %s", in);
    fclose(f);
    uint8_t slept = 1;
    for (int i = 0; i < 6000 && access(path, F_OK) != 0; i++) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (access(path, F_OK) != 0)
        slept = 0;
    return host->output_add(call, "slept", TFPL_U8, 0, NULL, &slept, 1);
}

static int tp_init(const tfpl_host_t *host, const char *args)
{
    if (strcmp(args, "fail") == 0) {
        host->log(host, TFPL_LOG_ERR, "asked to fail");
        return -1;
    }
    return 0;
}

static void tp_fini(const tfpl_host_t *host)
{
    int alive = __atomic_load_n(&tp_alive, __ATOMIC_SEQ_CST);
    if (alive) {
        host->log(host, TFPL_LOG_ERR, "fini while %d states are alive", alive);
        tp_bad_finis++;
    }
    tp_finis++;
}

const tfpl_plugin_t *tfpl_plugin_entry(unsigned host_abi)
{
    static const tfpl_route_t routes[] = {
        {"tp_probe", probe, TFPL_ROUTE_STATELESS, &tp_route_tag},
        {"tp_status", status, TFPL_ROUTE_STATELESS, NULL},
        {"tp_badout", badout, TFPL_ROUTE_STATELESS, NULL},
        {"tp_state", state, 0, NULL},
        {"tp_sleep", sleep_route, TFPL_ROUTE_STATELESS, NULL},
    };
    static const tfpl_plugin_t plugin = {
#ifdef TP_BAD_ABI
        .abi = TFPL_ABI + 1,
#else
        .abi = TFPL_ABI,
#endif
        .name = "testplug",
        .routes = routes,
        .nroutes = sizeof routes / sizeof routes[0],
        .init = tp_init,
        .fini = tp_fini,
    };
#ifdef TP_REFUSE
    return host_abi > TFPL_ABI ? &plugin : NULL;
#else
    return host_abi == TFPL_ABI ? &plugin : NULL;
#endif
}
