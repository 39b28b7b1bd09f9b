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

tfp_path_t tfp_path_parse(const char *path, char *name, size_t size)
{
    static const char tensors[] = "/v1/tensors";
    if (!path)
        return TFP_PATH_UNKNOWN;
    if (strcmp(path, "/healthz") == 0)
        return TFP_PATH_HEALTHZ;
    if (strcmp(path, "/metrics") == 0)
        return TFP_PATH_METRICS;
    if (strcmp(path, "/v1/info") == 0)
        return TFP_PATH_INFO;
    if (strncmp(path, tensors, sizeof tensors - 1) != 0)
        return TFP_PATH_UNKNOWN;
    const char *rest = path + sizeof tensors - 1;
    if (rest[0] == '\0' || strcmp(rest, "/") == 0)
        return TFP_PATH_TENSORS;
    if (rest[0] != '/')
        return TFP_PATH_UNKNOWN;
    rest++;
    size_t n = strlen(rest);
    if (n >= size || !tfp_name_valid(rest))
        return TFP_PATH_BAD_NAME;
    memcpy(name, rest, n + 1);
    return TFP_PATH_TENSOR;
}
