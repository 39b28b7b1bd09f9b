/* tfetch-plugin.h - the C ABI of tfetchd route plugins (installed; see tfetch-plugin(3)).
 *
 * A plugin is a shared object that tfetchd loads at start-up (`plugin = /path/x.so [ARGS]` in
 * tfetchd.conf, or `--plugin`), or on SIGHUP when its line is added, and whose routes answer
 * POST /v1/call/{route}. It exports one function, tfpl_plugin_entry, which returns a static
 * description of the plugin: its name, its routes and optional init/fini. A route's handler reads the request's tensors through
 * the host table the daemon passes it, keeps per-user state in a slot the daemon owns, and
 * answers tensors or a status. The plugin links against nothing of tfetch: everything it
 * needs is in this header (standard headers, and tfetch-status.h, the table of status codes
 * installed beside it) and the host table.
 *
 * Versioning. TFPL_ABI changes only when something here changes incompatibly; tfetchd refuses
 * a plugin built for another ABI (and does not start; on SIGHUP, keeps the plugins it had).
 * Within an ABI, functions are only ever appended to tfpl_host_t: a plugin that uses one
 * added later tests TFPL_HOST_HAS first.
 *
 * Threads. init and fini run on the daemon's main thread, before the plugin's first call and
 * after its last, while other plugins may be serving (SIGHUP). Handlers run on the daemon's
 * HTTP threads, concurrently: for different users, for different routes, and for anything
 * on a stateless route. The calls of one user to one stateful route are serialised, so a
 * per-user state needs no lock of its own.
 *
 * Unloading. On SIGHUP a plugin whose line was removed, or whose arguments changed, is
 * unloaded only after every call in its handlers returned and every state its routes set was
 * destroyed; then fini runs and the object is dlclose'd. A changed line then loads the file
 * again: init runs on fresh static data, as at start-up (unless something keeps the object
 * loaded, e.g. RTLD_NODELETE or C++ unique symbols). A plugin with threads of its own stops
 * them in fini.
 *
 * Lifetimes. The host table lives from init until after fini. A tfpl_call_t, and everything
 * read through it (tensors, names, strings), lives until the handler returns. The plugin's
 * description and route names must stay valid while it is loaded (make them static).
 */
#ifndef TFETCH_PLUGIN_H
#define TFETCH_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "tfetch-status.h"
#include "tfetch-dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TFPL_ABI 1                  /* the plugin ABI this header describes */
#define TFPL_MAX_RANK 8             /* most dimensions a tensor has */

#if defined(__GNUC__)
#define TFPL_EXPORT __attribute__((visibility("default")))
#define TFPL_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define TFPL_EXPORT
#define TFPL_PRINTF(fmt, args)
#endif

/* Element types: the same values as tf_dtype_t in tfetch.h and the safetensors names without
 * the prefix ("F32", "BF16", ...). Data is little-endian, C order. */
enum {
#define TFPL_DTYPE_ENUM_(n, v, b) TFPL_##n = (v),
    TF_DTYPE_ROWS(TFPL_DTYPE_ENUM_)
#undef TFPL_DTYPE_ENUM_
};

/* Statuses: the wire codes of tf_status_t (tfetch.h; "TF_EUNPROC" on the wire), generated from
 * TF_STATUS_WIRE_MAP in tfetch-status.h, which also gives the HTTP status the client gets
 * for each: TFPL_OK = 0, TFPL_ENOMEM = -1 (500), TFPL_EINVAL = -2 (400), TFPL_EBADREQ = -3
 * (400), TFPL_EPROTO = -4 (400), TFPL_ENOTFOUND = -5 (404), TFPL_EMETHOD = -6 (405),
 * TFPL_ENOTACCEPT = -7 (406), TFPL_ETOOBIG = -8 (413), TFPL_EMEDIATYPE = -9 (415),
 * TFPL_EUNPROC = -10 (422), TFPL_EHEADERS = -11 (431), TFPL_EBUSY = -12 (503),
 * TFPL_ENOSPACE = -13 (507), TFPL_EINTERNAL = -14 (500), TFPL_ERANGE = -15 (416),
 * TFPL_ELENGTH = -16 (411), TFPL_ECONFLICT = -17 (409), TFPL_EDONE = -18 (410),
 * TFPL_EGONE = -19 (410), TFPL_EFULL = -20 (429), TFPL_ENOTIMPL = -21 (501),
 * TFPL_EREQTIME = -22 (408), TFPL_EUNAUTH = -23 (401), TFPL_EFORBIDDEN = -24 (403),
 * TFPL_EPRECOND = -25 (412), TFPL_EVERSION = -26 (400), TFPL_EDIGEST = -27 (400). The
 * ones a route typically answers:
 * TFPL_EBADREQ for a bad request (metadata, parameters), TFPL_EUNPROC for well-formed
 * tensors this route cannot use, TFPL_EBUSY for "try again later", TFPL_ENOSPACE when a
 * quota (e.g. per-user state) is exhausted, TFPL_EINTERNAL for the plugin's own failure. */
enum {
#define TFPL_STATUS_ENUM_(n, v, h, s) TFPL_##n = (v),
    TF_STATUS_WIRE_MAP(TFPL_STATUS_ENUM_)
#undef TFPL_STATUS_ENUM_
};

/* Log levels: syslog priorities. */
enum { TFPL_LOG_ERR = 3, TFPL_LOG_WARNING = 4, TFPL_LOG_NOTICE = 5, TFPL_LOG_INFO = 6,
       TFPL_LOG_DEBUG = 7 };

/* Route flags. */
enum {
    TFPL_ROUTE_STATELESS = 1u << 0  /* no per-user state: no session is opened for its calls */
};

typedef struct tfpl_call tfpl_call_t;       /* one request to one route; opaque */
typedef struct tfpl_host tfpl_host_t;

/* A request tensor, borrowed for the call. data need not be aligned: read it with memcpy. */
typedef struct {
    const char *name;
    int dtype;                      /* TFPL_F32, ... */
    int rank;                       /* 0..TFPL_MAX_RANK */
    const uint64_t *shape;          /* rank dims */
    const void *data;               /* nbytes bytes */
    uint64_t nbytes;
} tfpl_tensor_t;

/* What the daemon offers. Functions that take a call may only be used during its handler.
 * Functions that return a status (TFPL_OK or an error) have, on error, already recorded it on
 * the call: the handler may simply return it. */
struct tfpl_host {
    unsigned abi;                   /* TFPL_ABI of the daemon */
    unsigned size;                  /* sizeof(tfpl_host_t) in the daemon; see TFPL_HOST_HAS */

    /* The request: its tensors in order, a tensor by name, a metadata value ("__metadata__"
     * of a safetensors body; NULL if absent), who asked ("" when no Tfetch-User was sent),
     * the request id, the route's name and its tfpl_route_t.arg. input_at and input_find
     * return 0, or -1 when there is no such tensor. */
    size_t (*input_count)(const tfpl_call_t *call);
    int (*input_at)(const tfpl_call_t *call, size_t i, tfpl_tensor_t *out);
    int (*input_find)(const tfpl_call_t *call, const char *name, tfpl_tensor_t *out);
    const char *(*input_meta)(const tfpl_call_t *call, const char *key);
    const char *(*user)(const tfpl_call_t *call);
    const char *(*request_id)(const tfpl_call_t *call);
    const char *(*route)(const tfpl_call_t *call);
    void *(*route_arg)(const tfpl_call_t *call);

    /* The caller's state for this route: NULL until set (and always on stateless routes).
     * set_state hands state to the daemon, which counts bytes against the user's session
     * quota and calls destroy(state) when it is replaced, when the session ends (DELETE
     * /v1/sessions/self, TTL, eviction) and at shutdown, always before fini. Setting the
     * current state again only updates its size. Returns 0, or -1 when over quota (or on a
     * stateless route): then a new state has already been destroyed and the slot keeps what
     * it had. A NULL state clears the slot. destroy may be NULL for a state that needs no
     * freeing. */
    void *(*state)(tfpl_call_t *call);
    int (*set_state)(tfpl_call_t *call, void *state, size_t bytes, void (*destroy)(void *state));

    /* The answer. output_add copies a tensor (nbytes must equal dtype size x elements).
     * output_alloc adds a tensor whose bytes the daemon allocates (aligned for any type, owned
     * by the call) and returns them for the handler to fill before it returns; NULL on error.
     * output_meta sets a metadata key of the answer. Names must be unique in the answer. */
    int (*output_add)(tfpl_call_t *call, const char *name, int dtype, int rank,
                      const uint64_t *shape, const void *data, uint64_t nbytes);
    void *(*output_alloc)(tfpl_call_t *call, const char *name, int dtype, int rank,
                          const uint64_t *shape);
    int (*output_meta)(tfpl_call_t *call, const char *key, const char *value);
    /* Fails the call with status and a printf-style message for the client (the "error" of
     * the JSON error body). Returns status (TFPL_EINTERNAL if status is not an error). */
    int (*fail)(tfpl_call_t *call, int status, const char *fmt, ...) TFPL_PRINTF(3, 4);

    /* Utilities. log writes one line to the daemon's log, prefixed with the plugin's name.
     * dtype_name: "F32" (NULL if unknown); dtype_size: bytes per element (0 if unknown, and
     * for the packed F4/F6_* types, whose tensors take elements x bits / 8 bytes);
     * status_name: "TF_EUNPROC". */
    void (*log)(const tfpl_host_t *host, int level, const char *fmt, ...) TFPL_PRINTF(3, 4);
    const char *(*dtype_name)(int dtype);
    size_t (*dtype_size)(int dtype);
    const char *(*status_name)(int status);
};

/* Whether the daemon's host table has member (a function added after the plugin's ABI began). */
#define TFPL_HOST_HAS(host, member) \
    ((host)->size >= offsetof(tfpl_host_t, member) + sizeof((host)->member))

/* A route handler: reads the call's inputs, adds outputs, returns TFPL_OK, or an error status
 * (with host->fail for a message; a status already recorded on the call wins). */
typedef int (*tfpl_handler_t)(const tfpl_host_t *host, tfpl_call_t *call);

typedef struct {
    const char *name;               /* [A-Za-z0-9._-]{1,255}, not "." or ".." */
    tfpl_handler_t handler;
    unsigned flags;                 /* TFPL_ROUTE_*; unknown bits are refused */
    void *arg;                      /* anything; host->route_arg(call) */
} tfpl_route_t;

typedef struct {
    unsigned abi;                   /* TFPL_ABI */
    const char *name;               /* for logs, e.g. "scale" */
    const char *version;            /* for logs; may be NULL */
    const tfpl_route_t *routes;     /* at least one */
    size_t nroutes;
    /* Optional. args is what followed the path in the plugin setting ("" if nothing); a
     * plugin without init refuses arguments. Non-zero refuses to load (log why first): tfetchd
     * then does not start (on SIGHUP: keeps the plugins it had). */
    int (*init)(const tfpl_host_t *host, const char *args);
    /* Optional; after the last call and after every state was destroyed. Runs when init
     * succeeded (or there is none), also when the daemon then fails to start or a SIGHUP
     * that started it is undone. */
    void (*fini)(const tfpl_host_t *host);
} tfpl_plugin_t;

/* The one symbol a plugin exports. host_abi is the daemon's TFPL_ABI: return NULL if the
 * plugin cannot work with it, else its description (abi = TFPL_ABI). */
#define TFPL_ENTRY_SYMBOL "tfpl_plugin_entry"
TFPL_EXPORT const tfpl_plugin_t *tfpl_plugin_entry(unsigned host_abi);

#ifdef __cplusplus
}
#endif

#endif
