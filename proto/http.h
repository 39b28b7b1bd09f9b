/* http.h - parsing of the HTTP request fields tfetchd routes on: the path and the media types
 * in Accept and Content-Type. Bytes from the network: validated here, never trusted.
 * Pure; any thread.
 */
#ifndef TFP_HTTP_H
#define TFP_HTTP_H

#include <stddef.h>

typedef enum {
    TFP_MEDIA_NONE = 0,             /* absent or empty */
    TFP_MEDIA_SAFETENSORS,          /* application/x-safetensors */
    TFP_MEDIA_OCTET,                /* application/octet-stream */
    TFP_MEDIA_JSON,                 /* application/json */
    TFP_MEDIA_FORM,                 /* application/x-www-form-urlencoded (curl's default) */
    TFP_MEDIA_ANY,                  /* * / * or application/ * (in Accept) */
    TFP_MEDIA_OTHER
} tfp_media_t;

/* The media type of a Content-Type value (parameters ignored, case-insensitive). */
tfp_media_t tfp_media_parse(const char *content_type);
/* The first type in an Accept list that tfetchd can produce (safetensors, octet, json, any),
 * in the order listed (q-values are not weighed); TFP_MEDIA_NONE when the header is absent,
 * TFP_MEDIA_OTHER when nothing listed is producible. */
tfp_media_t tfp_accept_pick(const char *accept);

/* Routes of the API. */
typedef enum {
    TFP_PATH_UNKNOWN = 0,
    TFP_PATH_HEALTHZ,               /* /healthz */
    TFP_PATH_METRICS,               /* /metrics */
    TFP_PATH_INFO,                  /* /v1/info */
    TFP_PATH_TENSORS,               /* /v1/tensors or /v1/tensors/ */
    TFP_PATH_TENSOR,                /* /v1/tensors/NAME */
    TFP_PATH_CALL,                  /* /v1/call/ROUTE */
    TFP_PATH_SESSION_SELF,          /* /v1/sessions/self */
    TFP_PATH_WORKERS,               /* /v1/workers */
    TFP_PATH_WORKER,                /* /v1/workers/ID */
    TFP_PATH_WORKER_NEXT,           /* /v1/workers/ID/next */
    TFP_PATH_WORKER_REPLY,          /* /v1/workers/ID/calls/CALL */
    TFP_PATH_UPGRADE,               /* /v1/upgrade */
    TFP_PATH_SHUMAI,                /* /NAME: Shumai's tfetch (GET a tensor, POST a route) */
    TFP_PATH_BAD_NAME               /* a known prefix followed by an invalid name */
} tfp_path_t;

typedef struct {
    tfp_path_t kind;
    char name[256];                 /* tensor, route or worker id; "" if none */
    char sub[256];                  /* the call id of TFP_PATH_WORKER_REPLY */
} tfp_path_info_t;

/* Classifies path. Every name in it must match tfp_name_valid (else TFP_PATH_BAD_NAME). */
tfp_path_t tfp_path_parse(const char *path, tfp_path_info_t *out);

#endif
