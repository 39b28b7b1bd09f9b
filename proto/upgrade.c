/* upgrade.c - builders and strict parsers for the POST /v1/upgrade JSON, and host identity
 * checks.
 *
 * Builders write through the JSON writer (proto/jsonw.h); parsers hold the text to RFC 8259
 * with tfp_json_check before cJSON builds a tree, then walk every member of every object
 * against a table of known keys, so unknown and duplicate keys are refused by name. Worker
 * addresses travel as strict base64 (proto/base64.h). Parsed trees live only inside one
 * call. No state; any thread.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/base64.h"
#include "proto/cjson.h"
#include "proto/jsonread.h"
#include "proto/jsonw.h"
#include "proto/upgrade.h"
#include "proto/utf8.h"

#define MAX_TRANSPORTS 8
#define MAX_NETNS_DIGITS 20

/* ---- host identity ------------------------------------------------------------------- */

static int is_lower_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

int tfp_up_boot_id_valid(const char *s)
{
    if (s == NULL)
        return 0;
    for (int i = 0; i < TFP_UP_BOOT_ID_LEN; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;

        if (s[i] == '\0' || (dash ? s[i] != '-' : !is_lower_hex(s[i])))
            return 0;
    }
    return s[TFP_UP_BOOT_ID_LEN] == '\0';
}

int tfp_up_netns_valid(const char *s)
{
    size_t i = 5, digits = 0;

    if (s == NULL || strncmp(s, "net:[", 5) != 0)
        return 0;
    while (is_digit(s[i]) && digits <= MAX_NETNS_DIGITS) {
        i++;
        digits++;
    }
    return digits >= 1 && digits <= MAX_NETNS_DIGITS && s[i] == ']' && s[i + 1] == '\0';
}

int tfp_up_token_valid(const char *s)
{
    if (s == NULL)
        return 0;
    for (int i = 0; i < TFP_UP_TOKEN_LEN; i++) {
        if (!is_lower_hex(s[i]))
            return 0;                       /* also stops at the NUL of a short token */
    }
    return s[TFP_UP_TOKEN_LEN] == '\0';
}

/* NUL within size bytes: the field is a terminated string. */
static int terminated(const char *s, size_t size)
{
    return memchr(s, '\0', size) != NULL;
}

tfp_status_t tfp_up_host_check(const tfp_up_host_t *h, tfp_err_t *err)
{
    if (h == NULL)
        return tfp_err_set(err, TFP_EINVAL, "host identity: none given");
    if (!terminated(h->boot_id, sizeof h->boot_id) || !tfp_up_boot_id_valid(h->boot_id))
        return tfp_err_set(err, TFP_EINVAL,
                           "host identity: boot_id is not a 36-character lowercase uuid");
    if (!terminated(h->netns, sizeof h->netns) || !tfp_up_netns_valid(h->netns))
        return tfp_err_set(err, TFP_EINVAL, "host identity: netns is not \"net:[N]\"");
    if (h->pid < 1 || h->pid > TFP_UP_MAX_PID)
        return tfp_err_set(err, TFP_EINVAL, "host identity: pid %lld is not in 1..%d",
                           (long long)h->pid, TFP_UP_MAX_PID);
    return TFP_OK;
}

int tfp_up_host_same_kernel(const tfp_up_host_t *a, const tfp_up_host_t *b)
{
    return a && b && tfp_up_boot_id_valid(a->boot_id) && strcmp(a->boot_id, b->boot_id) == 0;
}

int tfp_up_host_same(const tfp_up_host_t *a, const tfp_up_host_t *b)
{
    if (a == NULL || b == NULL || !tfp_up_boot_id_valid(a->boot_id) ||
        !tfp_up_netns_valid(a->netns))
        return 0;
    return strcmp(a->boot_id, b->boot_id) == 0 && strcmp(a->netns, b->netns) == 0;
}

tfp_status_t tfp_up_ident_format(const tfp_up_host_t *h, char *buf, size_t size,
                                 tfp_err_t *err)
{
    size_t nb, nn;

    if (h == NULL || buf == NULL)
        return tfp_err_set(err, TFP_EINVAL, "host identity: no identity or no buffer");
    if (!terminated(h->boot_id, sizeof h->boot_id) || !tfp_up_boot_id_valid(h->boot_id))
        return tfp_err_set(err, TFP_EINVAL,
                           "host identity: boot_id is not a 36-character lowercase uuid");
    if (!terminated(h->netns, sizeof h->netns) || !tfp_up_netns_valid(h->netns))
        return tfp_err_set(err, TFP_EINVAL, "host identity: netns is not \"net:[N]\"");
    nb = strlen(h->boot_id);
    nn = strlen(h->netns);
    if (size < nb + 1 + nn + 1)
        return tfp_err_set(err, TFP_EINVAL, "host identity: buffer of %zu bytes is too small",
                           size);
    memcpy(buf, h->boot_id, nb);
    buf[nb] = ' ';
    memcpy(buf + nb + 1, h->netns, nn + 1);
    return TFP_OK;
}

tfp_status_t tfp_up_ident_parse(const char *s, size_t n, tfp_up_host_t *out, tfp_err_t *err)
{
    tfp_up_host_t h;
    size_t nn;

    if (s == NULL || out == NULL)
        return tfp_err_set(err, TFP_EINVAL, "host identity: no text or no output");
    if (n < TFP_UP_BOOT_ID_LEN + 1 || s[TFP_UP_BOOT_ID_LEN] != ' ')
        return tfp_err_set(err, TFP_EPROTO,
                           "host identity: not \"boot_id netns\" (no space after 36 characters)");
    memset(&h, 0, sizeof h);
    memcpy(h.boot_id, s, TFP_UP_BOOT_ID_LEN);
    if (!tfp_up_boot_id_valid(h.boot_id))
        return tfp_err_set(err, TFP_EPROTO,
                           "host identity: boot_id is not a 36-character lowercase uuid");
    nn = n - TFP_UP_BOOT_ID_LEN - 1;
    if (nn > TFP_UP_MAX_NETNS || memchr(s + TFP_UP_BOOT_ID_LEN + 1, '\0', nn) != NULL)
        return tfp_err_set(err, TFP_EPROTO, "host identity: netns is not \"net:[N]\"");
    memcpy(h.netns, s + TFP_UP_BOOT_ID_LEN + 1, nn);
    if (!tfp_up_netns_valid(h.netns))
        return tfp_err_set(err, TFP_EPROTO, "host identity: netns is not \"net:[N]\"");
    *out = h;
    return TFP_OK;
}

/* ---- shared by the parsers ----------------------------------------------------------- */

/* Copies up to 48 bytes of a key for a message, printable ASCII only ('?' for the rest). */
static const char *printable(const char *s, char *buf, size_t size)
{
    size_t i;

    for (i = 0; s[i] != '\0' && i + 4 < size; i++)
        buf[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (s[i] != '\0') {
        memcpy(buf + i, "...", 3);
        i += 3;
    }
    buf[i] = '\0';
    return buf;
}

/* Size bound, strict check and parse; the root must be an object. what names the document. */
static tfp_status_t parse_object(const char *what, const char *body, size_t len, size_t max,
                                 cJSON **out, tfp_err_t *err)
{
    size_t end = 0, i;
    cJSON *root = NULL;
    tfp_status_t st;

    if (body == NULL)
        return tfp_err_set(err, TFP_EINVAL, "%s: no body", what);
    if (len > max)
        return tfp_err_set(err, TFP_ETOOBIG, "%s: body of %zu bytes is over the %zu-byte limit",
                           what, len, max);
    st = tfp_cj_parse(body, len, 0, &root, &end, err);
    if (st != TFP_OK)
        return tfp_cj_prefix(err, st, what);
    if ((i = tfp_cj_skip_ws(body, len, end)) != len)
        st = tfp_err_set(err, TFP_EPROTO, "%s: text after the JSON value at byte %zu", what, i);
    else if (!cJSON_IsObject(root))
        st = tfp_err_set(err, TFP_EPROTO, "%s: not a JSON object", what);
    if (st != TFP_OK) {
        cJSON_Delete(root);
        return st;
    }
    *out = root;
    return TFP_OK;
}

/* Matches every member of obj against keys[0..n) (n <= 16): found[i] gets member i. An
 * unknown or repeated key is refused by name; missing ones are the caller's to judge. */
/* keys[0..nreq) are required, keys[nreq..n) optional (found[i] NULL when absent). */
static tfp_status_t members_opt(const char *what, const cJSON *obj, const char *const *keys,
                                size_t n, size_t nreq, const cJSON **found, tfp_err_t *err);
static tfp_status_t members(const char *what, const cJSON *obj, const char *const *keys,
                            size_t n, const cJSON **found, tfp_err_t *err)
{
    return members_opt(what, obj, keys, n, n, found, err);
}

static tfp_status_t members_opt(const char *what, const cJSON *obj, const char *const *keys,
                                size_t n, size_t nreq, const cJSON **found, tfp_err_t *err)
{
    char kb[56];

    for (size_t i = 0; i < n; i++)
        found[i] = NULL;
    for (const cJSON *c = obj->child; c != NULL; c = c->next) {
        size_t i;

        for (i = 0; i < n && strcmp(c->string, keys[i]) != 0; i++)
            ;
        if (i == n)
            return tfp_err_set(err, TFP_EPROTO, "%s: unknown key \"%s\"", what,
                               printable(c->string, kb, sizeof kb));
        if (found[i] != NULL)
            return tfp_err_set(err, TFP_EPROTO, "%s: duplicate key \"%s\"", what, keys[i]);
        found[i] = c;
    }
    for (size_t i = 0; i < nreq; i++) {
        if (found[i] == NULL)
            return tfp_err_set(err, TFP_EPROTO, "%s: missing \"%s\"", what, keys[i]);
    }
    return TFP_OK;
}

/* An integer in lo..hi (lo >= 0, hi <= 2^53), or -1. */
static int get_int(const cJSON *item, int64_t lo, int64_t hi, int64_t *out)
{
    uint64_t v;

    if (tfp_cj_uint(item, (uint64_t)lo, (uint64_t)hi, &v) != 0)
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* ---- request ------------------------------------------------------------------------- */

static const struct {
    const char *name;
    unsigned bit;
} TRANSPORTS[] = {
    { "ucx", TFP_UP_T_UCX },
    { "shm", TFP_UP_T_SHM },
};

static const char *policy_name(tfp_up_policy_t p)
{
    switch (p) {
    case TFP_UP_POLICY_AUTO: return "auto";
    case TFP_UP_POLICY_UCX: return "ucx";
    }
    return NULL;
}

tfp_status_t tfp_up_req_build(const tfp_up_req_t *req, char **json, size_t *len,
                              tfp_err_t *err)
{
    tfp_status_t st;
    tfp_jw_t w;
    char *out;

    if (req == NULL || json == NULL)
        return tfp_err_set(err, TFP_EINVAL, "upgrade request: no request or no output");
    if (req->transports == 0 || (req->transports & ~TFP_UP_T_ALL) != 0)
        return tfp_err_set(err, TFP_EINVAL,
                           "upgrade request: transports 0x%x is empty or has unknown bits",
                           req->transports);
    if (policy_name(req->policy) == NULL)
        return tfp_err_set(err, TFP_EINVAL, "upgrade request: unknown policy %d",
                           (int)req->policy);
    st = tfp_up_host_check(&req->host, err);
    if (st != TFP_OK)
        return st;
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "transports");
    tfp_jw_arr_begin(&w);
    for (size_t i = 0; i < sizeof TRANSPORTS / sizeof TRANSPORTS[0]; i++) {
        if (req->transports & TRANSPORTS[i].bit)
            tfp_jw_str(&w, TRANSPORTS[i].name);
    }
    tfp_jw_arr_end(&w);
    tfp_jw_key(&w, "host");
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "boot_id");
    tfp_jw_str(&w, req->host.boot_id);
    tfp_jw_key(&w, "netns");
    tfp_jw_str(&w, req->host.netns);
    tfp_jw_key(&w, "pid");
    tfp_jw_int(&w, req->host.pid);
    tfp_jw_obj_end(&w);
    tfp_jw_key(&w, "policy");
    tfp_jw_str(&w, policy_name(req->policy));
    tfp_jw_obj_end(&w);
    out = tfp_jw_finish(&w, len);
    if (out == NULL)
        return tfp_err_set(err, TFP_ENOMEM, "upgrade request: out of memory");
    *json = out;
    return TFP_OK;
}

static tfp_status_t read_transports(const cJSON *arr, unsigned *out, tfp_err_t *err)
{
    const char *what = "upgrade request";
    unsigned bits = 0;
    size_t k = 0;
    char kb[56];

    if (!cJSON_IsArray(arr))
        return tfp_err_set(err, TFP_EPROTO, "%s: \"transports\" is not an array", what);
    if (cJSON_GetArraySize(arr) > MAX_TRANSPORTS)
        return tfp_err_set(err, TFP_EPROTO, "%s: \"transports\" lists more than %d names",
                           what, MAX_TRANSPORTS);
    for (const cJSON *c = arr->child; c != NULL; c = c->next, k++) {
        size_t i;

        if (!cJSON_IsString(c))
            return tfp_err_set(err, TFP_EPROTO, "%s: transports[%zu] is not a string", what, k);
        for (i = 0; i < sizeof TRANSPORTS / sizeof TRANSPORTS[0]; i++) {
            if (strcmp(c->valuestring, TRANSPORTS[i].name) == 0)
                break;
        }
        if (i == sizeof TRANSPORTS / sizeof TRANSPORTS[0])
            return tfp_err_set(err, TFP_EPROTO, "%s: transports[%zu] \"%s\" is not a known "
                               "transport (ucx, shm)", what, k,
                               printable(c->valuestring, kb, sizeof kb));
        if (bits & TRANSPORTS[i].bit)
            return tfp_err_set(err, TFP_EPROTO, "%s: transports[%zu] \"%s\" is listed twice",
                               what, k, TRANSPORTS[i].name);
        bits |= TRANSPORTS[i].bit;
    }
    if (bits == 0)
        return tfp_err_set(err, TFP_EPROTO, "%s: \"transports\" is empty", what);
    *out = bits;
    return TFP_OK;
}

static tfp_status_t read_host(const cJSON *obj, tfp_up_host_t *out, tfp_err_t *err)
{
    static const char *const keys[] = { "boot_id", "netns", "pid" };
    const cJSON *f[3];
    tfp_status_t st;

    if (!cJSON_IsObject(obj))
        return tfp_err_set(err, TFP_EPROTO, "upgrade request: \"host\" is not an object");
    st = members("upgrade request: host", obj, keys, 3, f, err);
    if (st != TFP_OK)
        return st;
    if (tfp_cj_str(f[0], out->boot_id, TFP_UP_BOOT_ID_LEN) != 0 ||
        !tfp_up_boot_id_valid(out->boot_id))
        return tfp_err_set(err, TFP_EPROTO, "upgrade request: host.boot_id is not a "
                           "36-character lowercase uuid");
    if (tfp_cj_str(f[1], out->netns, TFP_UP_MAX_NETNS) != 0 || !tfp_up_netns_valid(out->netns))
        return tfp_err_set(err, TFP_EPROTO, "upgrade request: host.netns is not \"net:[N]\"");
    if (get_int(f[2], 1, TFP_UP_MAX_PID, &out->pid) != 0)
        return tfp_err_set(err, TFP_EPROTO, "upgrade request: host.pid is not an integer in "
                           "1..%d", TFP_UP_MAX_PID);
    return TFP_OK;
}

tfp_status_t tfp_up_req_parse(const char *body, size_t len, tfp_up_req_t *out,
                              tfp_err_t *err)
{
    static const char *const keys[] = { "transports", "host", "policy" };
    const cJSON *f[3];
    tfp_up_req_t r;
    cJSON *root;
    tfp_status_t st;

    if (out == NULL)
        return tfp_err_set(err, TFP_EINVAL, "upgrade request: no output");
    st = parse_object("upgrade request", body, len, TFP_UP_MAX_REQ_JSON, &root, err);
    if (st != TFP_OK)
        return st;
    memset(&r, 0, sizeof r);
    st = members("upgrade request", root, keys, 3, f, err);
    if (st == TFP_OK)
        st = read_transports(f[0], &r.transports, err);
    if (st == TFP_OK)
        st = read_host(f[1], &r.host, err);
    if (st == TFP_OK) {
        if (cJSON_IsString(f[2]) && strcmp(f[2]->valuestring, "auto") == 0)
            r.policy = TFP_UP_POLICY_AUTO;
        else if (cJSON_IsString(f[2]) && strcmp(f[2]->valuestring, "ucx") == 0)
            r.policy = TFP_UP_POLICY_UCX;
        else
            st = tfp_err_set(err, TFP_EPROTO,
                             "upgrade request: \"policy\" is not \"auto\" or \"ucx\"");
    }
    cJSON_Delete(root);
    if (st == TFP_OK)
        *out = r;
    return st;
}

/* ---- response ------------------------------------------------------------------------ */

void tfp_up_resp_clear(tfp_up_resp_t *resp)
{
    if (resp == NULL)
        return;
    free(resp->worker_address);
    memset(resp, 0, sizeof *resp);
}

/* 1 if s is an abstract socket name the shm transport may use. */
/* An abstract name, or an absolute path: [A-Za-z0-9._-] and, in a path, '/' (no empty or
 * dot-dot component: the path is what the server configured, nothing to be resolved). */
int tfp_up_shm_socket_valid(const char *s)
{
    size_t n = strnlen(s, TFP_UP_MAX_SHM_SOCKET + 1);
    if (n == 0 || n > TFP_UP_MAX_SHM_SOCKET)
        return 0;
    int path = s[0] == '/';
    for (size_t i = 0; i < n; i++) {
        if (path && s[i] == '/') {
            if (s[i + 1] == '/' || s[i + 1] == '\0' ||
                (s[i + 1] == '.' && s[i + 2] == '.' && (s[i + 3] == '/' || s[i + 3] == '\0')))
                return 0;
            continue;
        }
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '_' || s[i] == '-'))
            return 0;
    }
    return 1;
}

/* The optional shm members: both or neither, only between same-host peers, or peers of one
 * kernel in two network namespaces when the socket is a file (abstract names stay in
 * theirs). */
static tfp_status_t check_shm(const tfp_up_resp_t *r, tfp_status_t code, tfp_err_t *err)
{
    const char *what = "upgrade response";
    if (!r->shm_socket[0] && !r->shm_token[0])
        return TFP_OK;
    if (!tfp_up_shm_socket_valid(r->shm_socket))
        return tfp_err_set(err, code, "%s: \"shm_socket\" is not 1..%d of [A-Za-z0-9._-] or "
                           "an absolute path of them", what, TFP_UP_MAX_SHM_SOCKET);
    if (!tfp_up_token_valid(r->shm_token))
        return tfp_err_set(err, code, "%s: \"shm_token\" is not %d lowercase hex characters",
                           what, TFP_UP_TOKEN_LEN);
    if (!r->same_host && r->shm_socket[0] != '/')
        return tfp_err_set(err, code, "%s: an abstract shm socket offered to a peer on "
                           "another host or network namespace", what);
    return TFP_OK;
}

static tfp_status_t check_ucx_resp(const tfp_up_resp_t *r, tfp_err_t *err)
{
    const char *what = "upgrade response";

    if (!terminated(r->token, sizeof r->token) || !tfp_up_token_valid(r->token))
        return tfp_err_set(err, TFP_EINVAL, "%s: token is not %d lowercase hex characters",
                           what, TFP_UP_TOKEN_LEN);
    if (r->expires_ms < 1 || r->expires_ms > TFP_UP_MAX_EXPIRES_MS)
        return tfp_err_set(err, TFP_EINVAL, "%s: expires_ms %llu is not in 1..%d", what,
                           (unsigned long long)r->expires_ms, TFP_UP_MAX_EXPIRES_MS);
    if (r->worker_address == NULL || r->worker_address_len < 1 ||
        r->worker_address_len > TFP_UP_MAX_ADDR)
        return tfp_err_set(err, TFP_EINVAL, "%s: worker address of %zu bytes is not 1..%d",
                           what, r->worker_address_len, TFP_UP_MAX_ADDR);
    if (r->same_host != 0 && r->same_host != 1)
        return tfp_err_set(err, TFP_EINVAL, "%s: same_host %d is not 0 or 1", what,
                           r->same_host);
    if (r->server_pid < 1 || r->server_pid > TFP_UP_MAX_PID)
        return tfp_err_set(err, TFP_EINVAL, "%s: server_pid %lld is not in 1..%d", what,
                           (long long)r->server_pid, TFP_UP_MAX_PID);
    tfp_status_t sst = check_shm(r, TFP_EINVAL, err);
    if (sst != TFP_OK)
        return sst;
    return TFP_OK;
}

/* "protocol": {"min": N, "max": M}, both integers 1..TFP_PROTO_LIMIT, N <= M. */
static tfp_status_t read_protocol(const cJSON *o, tfp_proto_range_t *out, tfp_err_t *err)
{
    static const char *const keys[] = { "min", "max" };
    const char *what = "upgrade response: \"protocol\"";
    const cJSON *f[2];
    int64_t lo, hi;
    tfp_status_t st;

    if (!cJSON_IsObject(o))
        return tfp_err_set(err, TFP_EPROTO, "%s is not an object", what);
    if ((st = members(what, o, keys, 2, f, err)) != TFP_OK)
        return st;
    if (get_int(f[0], 1, TFP_PROTO_LIMIT, &lo) != 0 ||
        get_int(f[1], 1, TFP_PROTO_LIMIT, &hi) != 0 || lo > hi)
        return tfp_err_set(err, TFP_EPROTO, "%s: \"min\" and \"max\" are not versions 1..%d "
                           "with min <= max", what, TFP_PROTO_LIMIT);
    out->min = (unsigned)lo;
    out->max = (unsigned)hi;
    return TFP_OK;
}

static void write_protocol(tfp_jw_t *w, tfp_proto_range_t r)
{
    tfp_jw_key(w, "protocol");
    tfp_jw_obj_begin(w);
    tfp_jw_key(w, "min");
    tfp_jw_uint(w, r.min);
    tfp_jw_key(w, "max");
    tfp_jw_uint(w, r.max);
    tfp_jw_obj_end(w);
}

/* n is strnlen(reason, TFP_UP_MAX_REASON + 1). */
static tfp_status_t check_reason(const char *reason, size_t n, tfp_status_t code,
                                 tfp_err_t *err)
{
    if (n < 1 || n > TFP_UP_MAX_REASON || !tfp_utf8_valid(reason, n))
        return tfp_err_set(err, code, "upgrade response: reason is not 1..%d bytes of UTF-8",
                           TFP_UP_MAX_REASON);
    return TFP_OK;
}

tfp_status_t tfp_up_resp_build(const tfp_up_resp_t *resp, char **json, size_t *len,
                               tfp_err_t *err)
{
    tfp_status_t st;
    tfp_jw_t w;
    char *b64 = NULL, *out;
    size_t b64_len = 0;

    if (resp == NULL || json == NULL)
        return tfp_err_set(err, TFP_EINVAL, "upgrade response: no response or no output");
    if (resp->upgraded != 0 && resp->upgraded != 1)
        return tfp_err_set(err, TFP_EINVAL, "upgrade response: upgraded %d is not 0 or 1",
                           resp->upgraded);
    if (resp->protocol.min != 0 && !tfp_proto_valid(resp->protocol))
        return tfp_err_set(err, TFP_EINVAL, "upgrade response: protocol %u..%u is not a "
                           "range of versions 1..%d", resp->protocol.min, resp->protocol.max,
                           TFP_PROTO_LIMIT);
    if (resp->upgraded)
        st = check_ucx_resp(resp, err);
    else
        st = check_reason(resp->reason, strnlen(resp->reason, sizeof resp->reason), TFP_EINVAL,
                          err);
    if (st != TFP_OK)
        return st;
    if (resp->upgraded) {
        b64 = tfp_b64_encode(resp->worker_address, resp->worker_address_len, &b64_len);
        if (b64 == NULL)
            return tfp_err_set(err, TFP_ENOMEM, "upgrade response: out of memory");
    }
    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    tfp_jw_key(&w, "transport");
    if (resp->upgraded) {
        tfp_jw_str(&w, "ucx");
        tfp_jw_key(&w, "token");
        tfp_jw_str(&w, resp->token);
        tfp_jw_key(&w, "expires_ms");
        tfp_jw_uint(&w, resp->expires_ms);
        tfp_jw_key(&w, "worker_address");
        tfp_jw_strn(&w, b64, b64_len);
        tfp_jw_key(&w, "same_host");
        tfp_jw_bool(&w, resp->same_host);
        tfp_jw_key(&w, "server_pid");
        tfp_jw_int(&w, resp->server_pid);
        if (resp->shm_socket[0]) {
            tfp_jw_key(&w, "shm_socket");
            tfp_jw_str(&w, resp->shm_socket);
            tfp_jw_key(&w, "shm_token");
            tfp_jw_str(&w, resp->shm_token);
        }
    } else {
        tfp_jw_str(&w, "http");
        tfp_jw_key(&w, "reason");
        tfp_jw_str(&w, resp->reason);
    }
    if (resp->protocol.min != 0)
        write_protocol(&w, resp->protocol);
    tfp_jw_obj_end(&w);
    free(b64);
    out = tfp_jw_finish(&w, len);
    if (out == NULL)
        return tfp_err_set(err, TFP_ENOMEM, "upgrade response: out of memory");
    *json = out;
    return TFP_OK;
}

static tfp_status_t read_ucx_resp(const cJSON *root, tfp_up_resp_t *r, tfp_err_t *err)
{
    static const char *const keys[] = { "transport", "token", "expires_ms", "worker_address",
                                        "same_host", "server_pid", "shm_socket",
                                        "shm_token", "protocol" };
    const char *what = "upgrade response";
    const cJSON *f[9];
    int64_t v;
    tfp_status_t st;

    st = members_opt(what, root, keys, 9, 6, f, err);
    if (st != TFP_OK)
        return st;
    if (f[8] && (st = read_protocol(f[8], &r->protocol, err)) != TFP_OK)
        return st;
    if (tfp_cj_str(f[1], r->token, TFP_UP_TOKEN_LEN) != 0 || !tfp_up_token_valid(r->token))
        return tfp_err_set(err, TFP_EPROTO, "%s: \"token\" is not %d lowercase hex characters",
                           what, TFP_UP_TOKEN_LEN);
    if (get_int(f[2], 1, TFP_UP_MAX_EXPIRES_MS, &v) != 0)
        return tfp_err_set(err, TFP_EPROTO, "%s: \"expires_ms\" is not an integer in 1..%d",
                           what, TFP_UP_MAX_EXPIRES_MS);
    r->expires_ms = (uint64_t)v;
    if (!cJSON_IsBool(f[4]))
        return tfp_err_set(err, TFP_EPROTO, "%s: \"same_host\" is not true or false", what);
    r->same_host = cJSON_IsTrue(f[4]);
    if (get_int(f[5], 1, TFP_UP_MAX_PID, &r->server_pid) != 0)
        return tfp_err_set(err, TFP_EPROTO, "%s: \"server_pid\" is not an integer in 1..%d",
                           what, TFP_UP_MAX_PID);
    if ((f[6] && tfp_cj_str(f[6], r->shm_socket, TFP_UP_MAX_SHM_SOCKET) != 0) ||
        (f[7] && tfp_cj_str(f[7], r->shm_token, TFP_UP_TOKEN_LEN) != 0) ||
        (!f[6] != !f[7]))
        return tfp_err_set(err, TFP_EPROTO, "%s: \"shm_socket\" and \"shm_token\" are not "
                           "two strings of at most %d and %d bytes", what,
                           TFP_UP_MAX_SHM_SOCKET, TFP_UP_TOKEN_LEN);
    if ((st = check_shm(r, TFP_EPROTO, err)) != TFP_OK)
        return st;
    if (!cJSON_IsString(f[3]))
        return tfp_err_set(err, TFP_EPROTO, "%s: \"worker_address\" is not a string", what);
    st = tfp_b64_decode(f[3]->valuestring, strlen(f[3]->valuestring), TFP_UP_MAX_ADDR,
                           &r->worker_address, &r->worker_address_len, err);
    if (st != TFP_OK)
        return tfp_cj_prefix(err, st, "upgrade response: \"worker_address\"");
    if (r->worker_address_len == 0) {
        free(r->worker_address);
        r->worker_address = NULL;
        return tfp_err_set(err, TFP_EPROTO, "%s: \"worker_address\" is empty", what);
    }
    return TFP_OK;
}

tfp_status_t tfp_up_resp_parse(const char *body, size_t len, tfp_up_resp_t *out,
                               tfp_err_t *err)
{
    static const char *const refusal_keys[] = { "transport", "reason", "protocol" };
    const char *what = "upgrade response";
    const cJSON *t, *f[3];
    tfp_up_resp_t r;
    cJSON *root;
    tfp_status_t st;

    if (out == NULL)
        return tfp_err_set(err, TFP_EINVAL, "%s: no output", what);
    st = parse_object(what, body, len, TFP_UP_MAX_RESP_JSON, &root, err);
    if (st != TFP_OK)
        return st;
    memset(&r, 0, sizeof r);
    t = cJSON_GetObjectItemCaseSensitive(root, "transport");
    if (cJSON_IsString(t) && strcmp(t->valuestring, "ucx") == 0) {
        r.upgraded = 1;
        st = read_ucx_resp(root, &r, err);
    } else if (cJSON_IsString(t) && strcmp(t->valuestring, "http") == 0) {
        st = members_opt(what, root, refusal_keys, 3, 2, f, err);
        if (st == TFP_OK && f[2])
            st = read_protocol(f[2], &r.protocol, err);
        if (st == TFP_OK && (!cJSON_IsString(f[1]) ||
                             check_reason(f[1]->valuestring, strlen(f[1]->valuestring),
                                          TFP_EPROTO, err) != TFP_OK))
            st = tfp_err_set(err, TFP_EPROTO, "%s: \"reason\" is not 1..%d bytes of UTF-8",
                             what, TFP_UP_MAX_REASON);
        if (st == TFP_OK)
            memcpy(r.reason, f[1]->valuestring, strlen(f[1]->valuestring) + 1);
    } else if (t == NULL) {
        st = tfp_err_set(err, TFP_EPROTO, "%s: missing \"transport\"", what);
    } else {
        st = tfp_err_set(err, TFP_EPROTO, "%s: \"transport\" is not \"ucx\" or \"http\"", what);
    }
    cJSON_Delete(root);
    if (st != TFP_OK) {
        free(r.worker_address);
        return st;
    }
    *out = r;
    return TFP_OK;
}
