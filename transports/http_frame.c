/* http_frame.c - the framing check of http_frame.h.
 *
 * MHD 0.9.75 hands on header names and values as C strings that point into its read buffer,
 * where it parsed them in place: each line's CR LF became two NULs, the colon a NUL, and the
 * next line starts right after. So what its parser hides can be read back from the bytes
 * around each string, and this file does it, strictly for that version (tfx_http_frame_probes):
 *   - a NUL in a value, or a bare LF: the two bytes after the value are not both NUL, or the
 *     next line does not start right after them;
 *   - an obs-fold: MHD appends the continuation to the name (not the value), in a fresh
 *     allocation, so the name no longer sits just before its value;
 *   - a NUL in the path (raw, or %00 from the decoder): between the end of the decoded path
 *     and the query (or the end of the target) lies something other than the decoder's LF
 *     filler and NULs.
 * What it cannot see: a NUL as the very last byte of the last header's value, a bare LF on
 * the last header line or the empty line that ends the headers, a raw NUL inside the query
 * (doc/PROTOCOL.md, "What is refused"). MHD's callback threads; no state but the version
 * test, computed once.
 */
#include "config.h"
#include "transports/http_frame.h"
#include "proto/httpframe.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Whitespace MHD may skip between a colon and its value: far more is refused as malformed. */
#define MAX_LEADING_WS 4096

int tfx_http_frame_probes(void)
{
    static atomic_int on = -1;
    int v = atomic_load(&on);

    if (v < 0) {
        v = strcmp(MHD_get_version(), "0.9.75") == 0;
        atomic_store(&on, v);
    }
    return v;
}

size_t tfx_http_unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    size_t n = strlen(s), m = tfp_url_unescape(s);

    (void)cls;
    (void)conn;
    if (m + 1 < n)
        memset(s + m + 1, '\n', n - m - 1);
    return m;
}

typedef struct {
    tfp_hfield_t *f;
    size_t n, cap;
} list_t;

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key,
                               size_t key_size, const char *value, size_t value_size)
{
    list_t *l = cls;

    (void)kind;
    if (l->n == l->cap)
        return MHD_NO;
    l->f[l->n++] = (tfp_hfield_t){ key ? key : "", key ? key_size : 0, value,
                                   value ? value_size : 0, 0 };
    return MHD_YES;
}

/* The list of one kind, in arrival order; -1 out of memory. */
static int gather(struct MHD_Connection *conn, enum MHD_ValueKind kind, list_t *l)
{
    int n = MHD_get_connection_values_n(conn, kind, NULL, NULL);

    l->n = 0;
    l->cap = n > 0 ? (size_t)n : 0;
    l->f = l->cap ? calloc(l->cap, sizeof *l->f) : NULL;
    if (l->cap && !l->f)
        return -1;
    MHD_get_connection_values_n(conn, kind, collect, l);
    return 0;
}

/* Does the name sit just before its value, as MHD left an unfolded line (name, NUL for the
 * colon, spaces or tabs, value)? */
static int in_place(const tfp_hfield_t *f)
{
    const char *k_end = f->name + f->name_len;

    if (f->value == NULL || f->value <= k_end || f->value - k_end > MAX_LEADING_WS || *k_end)
        return 0;
    for (const char *p = k_end + 1; p < f->value; p++)
        if (*p != ' ' && *p != '\t')
            return 0;
    return 1;
}

/* Was the line that ends at end (the NUL after its last string) ended by CRLF, with the
 * next line (if next is not NULL) right after? */
static int crlf_after(const char *end, const char *next)
{
    return end[0] == '\0' && end[1] == '\0' && (next == NULL || next == end + 2);
}

/* The request target: between the end of the decoded path and limit (the first query
 * parameter, or the NUL that ended the target) only the decoder's LF filler, then NULs (the
 * '?' and any empty parameters). */
static int target_cut(const char *url, const char *limit)
{
    const char *p = url + strlen(url);

    if (p >= limit)
        return p != limit;
    p++;
    while (p < limit && *p == '\n')
        p++;
    while (p < limit && *p == '\0')
        p++;
    return p != limit;
}

static void probe(const char *url, const char *version, list_t *h, list_t *a, unsigned *line)
{
    const char *ve = version + strlen(version);
    const char *end = version - 1;              /* the NUL that was the space before it */

    for (size_t i = 0; i < h->n; i++)
        if (!in_place(&h->f[i]))
            h->f[i].flags |= TFP_HF_FOLDED;
    for (size_t i = 0; i < h->n; i++) {
        tfp_hfield_t *f = &h->f[i];
        const tfp_hfield_t *nx = i + 1 < h->n ? &h->f[i + 1] : NULL;

        if (f->value && !(f->flags & TFP_HF_FOLDED) &&
            !crlf_after(f->value + f->value_len,
                        nx && !(nx->flags & TFP_HF_FOLDED) ? nx->name : NULL))
            f->flags |= TFP_HF_BADEND;
    }
    if (!crlf_after(ve, h->n && !(h->f[0].flags & TFP_HF_FOLDED) ? h->f[0].name : NULL))
        *line |= TFP_HF_BADEND;
    if (url < end && end - url < (1 << 24) && *end == '\0') {
        const char *limit = end;

        if (a->n && a->f[0].name > url && a->f[0].name <= end)
            limit = a->f[0].name;
        if (target_cut(url, limit))
            *line |= TFP_HF_NUL;
    } else {
        *line |= TFP_HF_NUL;                    /* not the layout 0.9.75 leaves: refuse */
    }
}

tfp_status_t tfx_http_frame_check(struct MHD_Connection *conn, const char *url,
                                  const char *version, tfp_err_t *err)
{
    list_t h = { 0 }, a = { 0 };
    tfp_http_frame_t in = { .version = version };
    tfp_http_framing_t framing;
    tfp_status_t st;

    if (gather(conn, MHD_HEADER_KIND, &h) != 0 || gather(conn, MHD_GET_ARGUMENT_KIND, &a) != 0) {
        free(h.f);
        return tfp_err_set(err, TFP_ENOMEM, "out of memory checking the request's headers");
    }
    if (tfx_http_frame_probes() && url && version && *version)
        probe(url, version, &h, &a, &in.line_flags);
    in.fields = h.f;
    in.nfields = h.n;
    in.args = a.f;
    in.nargs = a.n;
    st = tfp_http_frame_check(&in, &framing, err);
    free(h.f);
    free(a.f);
    return st;
}
