/* http.c - path routing and media-type parsing for tfetchd's HTTP API. Pure; any thread. */
#include "config.h"
#include "proto/http.h"
#include "proto/ids.h"

#include <string.h>
#include <strings.h>

/* Media type token at s (up to ';', ',' or end), spaces trimmed. */
static tfp_media_t classify(const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    static const struct { const char *t; tfp_media_t m; } types[] = {
        {"application/x-safetensors", TFP_MEDIA_SAFETENSORS},
        {"application/octet-stream", TFP_MEDIA_OCTET},
        {"application/json", TFP_MEDIA_JSON},
        {"application/x-www-form-urlencoded", TFP_MEDIA_FORM},
        {"*/*", TFP_MEDIA_ANY},
        {"application/*", TFP_MEDIA_ANY},
    };
    if (n == 0)
        return TFP_MEDIA_NONE;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strlen(types[i].t) == n && strncasecmp(s, types[i].t, n) == 0)
            return types[i].m;
    return TFP_MEDIA_OTHER;
}

tfp_media_t tfp_media_parse(const char *ct)
{
    if (!ct)
        return TFP_MEDIA_NONE;
    return classify(ct, strcspn(ct, ";"));
}

tfp_media_t tfp_accept_pick(const char *accept)
{
    if (!accept)
        return TFP_MEDIA_NONE;
    const char *p = accept;
    int any_listed = 0;
    while (*p) {
        size_t item = strcspn(p, ",");
        size_t type = strcspn(p, ";,");
        tfp_media_t m = classify(p, type < item ? type : item);
        if (m != TFP_MEDIA_NONE)
            any_listed = 1;
        if (m == TFP_MEDIA_SAFETENSORS || m == TFP_MEDIA_OCTET || m == TFP_MEDIA_JSON ||
            m == TFP_MEDIA_ANY)
            return m;
        p += item;
        if (*p == ',')
            p++;
    }
    return any_listed ? TFP_MEDIA_OTHER : TFP_MEDIA_NONE;
}

/* Copies one path segment (up to '/' or the end) into dst if it is a valid name. Returns
 * the rest of the path (at the '/' or the NUL), or NULL if the segment is not a valid name. */
static const char *segment(const char *p, char *dst, size_t size)
{
    size_t n = strcspn(p, "/");
    if (n == 0 || n >= size)
        return NULL;
    memcpy(dst, p, n);
    dst[n] = '\0';
    return tfp_name_valid(dst) ? p + n : NULL;
}

/* Matches "prefix/" at the start of path; returns what follows, or NULL. */
static const char *prefixed(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(path, prefix, n) == 0 && path[n] == '/' ? path + n + 1 : NULL;
}

static tfp_path_t classify_path(const char *path, tfp_path_info_t *o)
{
    const char *rest;
    if (strcmp(path, "/healthz") == 0)
        return TFP_PATH_HEALTHZ;
    if (strcmp(path, "/metrics") == 0)
        return TFP_PATH_METRICS;
    if (strcmp(path, "/v1/info") == 0)
        return TFP_PATH_INFO;
    if (strcmp(path, "/v1/tensors") == 0 || strcmp(path, "/v1/tensors/") == 0)
        return TFP_PATH_TENSORS;
    if (strcmp(path, "/v1/sessions/self") == 0)
        return TFP_PATH_SESSION_SELF;
    if (strcmp(path, "/v1/workers") == 0)
        return TFP_PATH_WORKERS;
    if (strcmp(path, "/v1/upgrade") == 0)
        return TFP_PATH_UPGRADE;
    if ((rest = prefixed(path, "/v1/tensors"))) {
        rest = segment(rest, o->name, sizeof o->name);
        return rest && !*rest ? TFP_PATH_TENSOR : TFP_PATH_BAD_NAME;
    }
    if ((rest = prefixed(path, "/v1/call"))) {
        rest = segment(rest, o->name, sizeof o->name);
        return rest && !*rest ? TFP_PATH_CALL : TFP_PATH_BAD_NAME;
    }
    if ((rest = prefixed(path, "/v1/workers"))) {
        rest = segment(rest, o->name, sizeof o->name);
        if (!rest)
            return TFP_PATH_BAD_NAME;
        if (!*rest)
            return TFP_PATH_WORKER;
        if (strcmp(rest, "/next") == 0)
            return TFP_PATH_WORKER_NEXT;
        if ((rest = prefixed(rest, "/calls"))) {
            rest = segment(rest, o->sub, sizeof o->sub);
            return rest && !*rest ? TFP_PATH_WORKER_REPLY : TFP_PATH_BAD_NAME;
        }
        return TFP_PATH_UNKNOWN;
    }
    if (strncmp(path, "/v1/", 4) == 0 || strcmp(path, "/v1") == 0)
        return TFP_PATH_UNKNOWN;
    /* Shumai: a single valid name segment. */
    if (path[0] == '/' && (rest = segment(path + 1, o->name, sizeof o->name)) && !*rest)
        return TFP_PATH_SHUMAI;
    return TFP_PATH_UNKNOWN;
}

tfp_path_t tfp_path_parse(const char *path, tfp_path_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->kind = path ? classify_path(path, out) : TFP_PATH_UNKNOWN;
    if (out->kind == TFP_PATH_UNKNOWN || out->kind == TFP_PATH_BAD_NAME)
        out->name[0] = out->sub[0] = '\0';
    return out->kind;
}
