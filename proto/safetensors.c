/* safetensors.c - strict safetensors decoding and encoding.
 *
 * The decoder owns nothing after it returns: it builds a tfp_doc_t whose tensors point into
 * the caller's buffer. It accepts exactly what the format allows - the JSON text is held to
 * RFC 8259 by tfp_json_check before cJSON builds a tree, duplicate keys are refused at every
 * level, and the tensors must tile the data section exactly - and names the problem in every
 * refusal. The encoder writes the header with tfp_jw (no cJSON on output).
 *
 * Threads: pure functions, any thread (cJSON's one global: see proto/cjson.h).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/cjson.h"
#include "proto/le.h"
#include "proto/jsonread.h"
#include "proto/jsonw.h"
#include "proto/raw.h"
#include "proto/safetensors.h"
#include "proto/utf8.h"

#define MAX_EXACT (UINT64_C(1) << 53)
#define SHOW_MAX 64                 /* bytes of a name quoted in a message */

typedef struct {
    uint64_t begin, end;
    size_t idx;                     /* the tensor's index in the doc */
} range_t;

/* ---- helpers --------------------------------------------------------------------------- */

/* A name short enough to quote in a 256-byte message, cut at a character boundary. */
static const char *show(const char *name, char buf[SHOW_MAX + 4])
{
    size_t len = strlen(name), n = tfp_utf8_cut(name, len, SHOW_MAX);

    if (n == len)
        return name;
    memcpy(buf, name, n);
    memcpy(buf + n, "...", 4);
    return buf;
}

static void shape_text(int rank, const uint64_t *shape, char *buf, size_t size)
{
    if (tfp_raw_format_shape(rank, shape, buf, size) != 0)
        buf[0] = '\0';
}

/* ---- decoding -------------------------------------------------------------------------- */

static tfp_status_t parse_meta(const cJSON *meta, tfp_doc_t *doc, tfp_err_t *err)
{
    const char *dup = NULL;
    char sb[SHOW_MAX + 4];
    const cJSON *m;
    tfp_status_t st;
    int r;

    if (!cJSON_IsObject(meta))
        return tfp_err_set(err, TFP_EPROTO, "__metadata__ is not an object");
    r = tfp_cj_dup(meta, 0, &dup);
    if (r < 0)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory checking __metadata__");
    if (r > 0)
        return tfp_err_set(err, TFP_EPROTO, "duplicate key '%s' in __metadata__",
                           show(dup, sb));
    cJSON_ArrayForEach(m, meta) {
        size_t klen = strlen(m->string);

        if (klen > TFP_MAX_NAME)
            return tfp_err_set(err, TFP_EPROTO, "__metadata__ key of %zu bytes exceeds %d",
                               klen, TFP_MAX_NAME);
        if (!cJSON_IsString(m))
            return tfp_err_set(err, TFP_EPROTO, "__metadata__['%s'] is not a string",
                               show(m->string, sb));
        st = tfp_doc_append_meta(doc, m->string, m->valuestring, err);
        if (st != TFP_OK)
            return st;
    }
    return TFP_OK;
}

static tfp_status_t parse_shape(const cJSON *shape, const char *nm, int *rank,
                                uint64_t dims[TFP_MAX_RANK], tfp_err_t *err)
{
    static const char *const why[] = { "", "is not a number", "is negative",
                                       "is not an integer", "exceeds 2^53" };
    const cJSON *d;
    int r = 0;

    if (!cJSON_IsArray(shape))
        return tfp_err_set(err, TFP_EPROTO, "tensor '%s': shape is not an array", nm);
    for (d = shape->child; d != NULL; d = d->next)
        r++;
    if (r > TFP_MAX_RANK)
        return tfp_err_set(err, TFP_EPROTO, "tensor '%s': shape has rank %d, more than %d", nm,
                           r, TFP_MAX_RANK);
    r = 0;
    cJSON_ArrayForEach(d, shape) {
        int e = tfp_cj_count(d, 0, MAX_EXACT, &dims[r]);

        if (e != 0)
            return tfp_err_set(err, TFP_EPROTO, "tensor '%s': shape[%d] %s", nm, r, why[-e]);
        r++;
    }
    *rank = r;
    return TFP_OK;
}

static tfp_status_t parse_offsets(const cJSON *offs, const char *nm, range_t *rg,
                                  tfp_err_t *err)
{
    uint64_t v[2];
    const cJSON *o;
    int i = 0;

    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return tfp_err_set(err, TFP_EPROTO, "tensor '%s': data_offsets is not [begin, end]", nm);
    cJSON_ArrayForEach(o, offs) {
        if (tfp_cj_count(o, 0, MAX_EXACT, &v[i]) != 0)
            return tfp_err_set(err, TFP_EPROTO,
                               "tensor '%s': data_offsets[%d] is not an integer in 0..2^53", nm, i);
        i++;
    }
    if (v[0] > v[1])
        return tfp_err_set(err, TFP_EPROTO, "tensor '%s': data_offsets [%llu, %llu] end before they begin",
                           nm, (unsigned long long)v[0], (unsigned long long)v[1]);
    rg->begin = v[0];
    rg->end = v[1];
    return TFP_OK;
}

/* The checks an entry's parsed fields need whatever read them (nm: the name as quoted in
 * messages), then the tensor appended to doc with rg as its range. */
static tfp_status_t add_entry(tfp_doc_t *doc, const char *name, const char *nm, tfp_dtype_t dt,
                              int rank, const uint64_t *dims, uint64_t data_len, range_t *rg,
                              tfp_err_t *err)
{
    char text[TFP_MAX_RANK * 21];
    uint64_t nbytes;
    tfp_err_t inner;
    tfp_status_t st;

    if (tfp_shape_nbytes(dt, rank, dims, &nbytes, &inner) != TFP_OK) {  /* a header from */
        shape_text(rank, dims, text, sizeof text);                       /* the wire */
        return tfp_err_set(err, inner.code == TFP_EINVAL ? TFP_EPROTO : inner.code,
                           "tensor '%s': %s x [%s]: %s", nm, tfp_dtype_name(dt), text,
                           inner.msg);
    }
    if (rg->end - rg->begin != nbytes) {
        shape_text(rank, dims, text, sizeof text);
        return tfp_err_set(err, TFP_EPROTO,
                           "tensor '%s': data_offsets [%llu, %llu] do not match %s x [%s] = %llu bytes",
                           nm, (unsigned long long)rg->begin, (unsigned long long)rg->end,
                           tfp_dtype_name(dt), text, (unsigned long long)nbytes);
    }
    if (rg->end > data_len)
        return tfp_err_set(err, TFP_EPROTO,
                           "tensor '%s': data_offsets [%llu, %llu] run past the end of the %llu-byte data section",
                           nm, (unsigned long long)rg->begin, (unsigned long long)rg->end,
                           (unsigned long long)data_len);
    rg->idx = doc->n;
    st = tfp_doc_append(doc, name, dt, rank, dims, NULL, nbytes, err);
    if (st != TFP_OK)
        return st;
    doc->t[rg->idx].offset = rg->begin;
    return TFP_OK;
}

/* One "name": {"dtype", "shape", "data_offsets"} entry, appended to doc. */
static tfp_status_t parse_entry(const cJSON *e, tfp_doc_t *doc, uint64_t data_len,
                                range_t *rg, tfp_err_t *err)
{
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL, *c;
    uint64_t dims[TFP_MAX_RANK];
    const char *dup = NULL, *nm;
    char sb[SHOW_MAX + 4], sb2[SHOW_MAX + 4];
    size_t len = strlen(e->string);
    tfp_dtype_t dt;
    tfp_status_t st;
    int rank = 0, r;

    if (len == 0)
        return tfp_err_set(err, TFP_EPROTO, "tensor name is empty");
    if (len > TFP_MAX_NAME)
        return tfp_err_set(err, TFP_EPROTO, "tensor name of %zu bytes exceeds %d", len,
                           TFP_MAX_NAME);
    nm = show(e->string, sb);
    if (!cJSON_IsObject(e))
        return tfp_err_set(err, TFP_EPROTO, "tensor '%s': entry is not an object", nm);
    r = tfp_cj_dup(e, 0, &dup);
    if (r < 0)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory checking tensor '%s'", nm);
    if (r > 0)
        return tfp_err_set(err, TFP_EPROTO, "tensor '%s': duplicate key '%s'", nm,
                           show(dup, sb2));
    cJSON_ArrayForEach(c, e) {
        if (strcmp(c->string, "dtype") == 0)
            dtype = c;
        else if (strcmp(c->string, "shape") == 0)
            shape = c;
        else if (strcmp(c->string, "data_offsets") == 0)
            offs = c;
        else
            return tfp_err_set(err, TFP_EPROTO, "tensor '%s': unknown key '%s'", nm,
                               show(c->string, sb2));
    }
    if (dtype == NULL || shape == NULL || offs == NULL)
        return tfp_err_set(err, TFP_EPROTO, "tensor '%s': missing \"%s\"", nm,
                           dtype == NULL ? "dtype" : shape == NULL ? "shape" : "data_offsets");
    if (!cJSON_IsString(dtype))
        return tfp_err_set(err, TFP_EPROTO, "tensor '%s': dtype is not a string", nm);
    if (tfp_dtype_from_name(dtype->valuestring, strlen(dtype->valuestring), &dt) != 0)
        return tfp_err_set(err, TFP_EPROTO, "tensor '%s': unknown dtype '%s'", nm,
                           show(dtype->valuestring, sb2));
    st = parse_shape(shape, nm, &rank, dims, err);
    if (st != TFP_OK)
        return st;
    st = parse_offsets(offs, nm, rg, err);
    if (st != TFP_OK)
        return st;
    return add_entry(doc, e->string, nm, dt, rank, dims, data_len, rg, err);
}

static int cmp_range(const void *a, const void *b)
{
    const range_t *x = a, *y = b;

    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Sorted by offsets, each tensor must begin where the previous one ended, and the last must
 * end where the data section does: no overlaps, no holes, nothing left over. */
static tfp_status_t check_tiling(const tfp_doc_t *doc, range_t *rg, size_t n,
                                 uint64_t data_len, tfp_err_t *err)
{
    char sb[SHOW_MAX + 4], sb2[SHOW_MAX + 4];
    uint64_t pos = 0;
    size_t last = SIZE_MAX;         /* the range that ends at pos */

    qsort(rg, n, sizeof *rg, cmp_range);
    for (size_t i = 0; i < n; i++) {
        if (rg[i].begin < pos)
            return tfp_err_set(err, TFP_EPROTO,
                               "tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]",
                               show(doc->t[rg[i].idx].name, sb),
                               (unsigned long long)rg[i].begin, (unsigned long long)rg[i].end,
                               show(doc->t[rg[last].idx].name, sb2),
                               (unsigned long long)rg[last].begin,
                               (unsigned long long)rg[last].end);
        if (rg[i].begin > pos)
            return tfp_err_set(err, TFP_EPROTO,
                               "data section bytes [%llu, %llu) belong to no tensor (a hole before tensor '%s')",
                               (unsigned long long)pos, (unsigned long long)rg[i].begin,
                               show(doc->t[rg[i].idx].name, sb));
        if (rg[i].end > pos) {
            pos = rg[i].end;
            last = i;
        }
    }
    if (pos != data_len)
        return tfp_err_set(err, TFP_EPROTO,
                           "tensors cover %llu bytes but the data section has %llu: %llu trailing bytes belong to no tensor",
                           (unsigned long long)pos, (unsigned long long)data_len,
                           (unsigned long long)(data_len - pos));
    return TFP_OK;
}

/* Parses the header text: a '{', strict JSON, then only spaces. */
static tfp_status_t parse_header(const char *hdr, size_t n, cJSON **out, tfp_err_t *err)
{
    tfp_err_t inner;
    size_t end = 0;
    cJSON *root;

    if (n == 0 || hdr[0] != '{')
        return tfp_err_set(err, TFP_EPROTO, "header is not a JSON object (it does not start with '{')");
    if (tfp_cj_parse(hdr, n, 0, &root, &end, &inner) != TFP_OK)
        return tfp_err_set(err, inner.code, "header: %s", inner.msg);
    for (size_t i = end; i < n; i++) {
        if (hdr[i] != ' ') {
            cJSON_Delete(root);
            return tfp_err_set(err, TFP_EPROTO,
                               "header: byte 0x%02x at %zu after the JSON object (only spaces may pad it)",
                               (unsigned char)hdr[i], i);
        }
    }
    *out = root;
    return TFP_OK;
}

/* The general path: the header as a cJSON tree, every rule checked and named. */
static tfp_status_t decode_tree(const uint8_t *buf, const char *hdr, uint64_t hlen,
                                uint64_t data_len, size_t max_tensors, tfp_doc_t **out,
                                tfp_err_t *err)
{
    size_t count = 0, ntensors, k = 0;
    const char *dup = NULL;
    const cJSON *meta = NULL, *c;
    char sb[SHOW_MAX + 4];
    range_t *rg = NULL;
    tfp_doc_t *doc;
    cJSON *root = NULL;
    tfp_status_t st;
    int r;

    st = parse_header(hdr, (size_t)hlen, &root, err);
    if (st != TFP_OK)
        return st;
    r = tfp_cj_dup(root, 0, &dup);
    if (r != 0) {
        st = r < 0 ? tfp_err_set(err, TFP_ENOMEM, "out of memory checking the header")
                   : tfp_err_set(err, TFP_EPROTO, "duplicate key '%s' in header", show(dup, sb));
        goto free_root;
    }
    cJSON_ArrayForEach(c, root) {
        if (strcmp(c->string, "__metadata__") == 0)
            meta = c;
        count++;
    }
    ntensors = count - (meta != NULL);
    if (ntensors > max_tensors) {
        st = tfp_err_set(err, TFP_ETOOBIG, "header lists %zu tensors, more than the limit of %zu",
                         ntensors, max_tensors);
        goto free_root;
    }
    doc = tfp_doc_new();
    rg = malloc((ntensors ? ntensors : 1) * sizeof *rg);
    if (doc == NULL || rg == NULL) {
        st = tfp_err_set(err, TFP_ENOMEM, "out of memory decoding the header");
        goto free_doc;
    }
    cJSON_ArrayForEach(c, root) {
        if (c == meta) {
            doc->meta_object = 1;           /* kept even when empty: encoded back */
            st = parse_meta(c, doc, err);
        }
        else
            st = parse_entry(c, doc, data_len, &rg[k++], err);
        if (st != TFP_OK)
            goto free_doc;
    }
    st = check_tiling(doc, rg, ntensors, data_len, err);
    if (st != TFP_OK)
        goto free_doc;
    for (size_t i = 0; i < doc->n; i++)
        doc->t[i].data = buf + 8 + hlen + doc->t[i].offset;
    free(rg);
    cJSON_Delete(root);
    *out = doc;
    return TFP_OK;

free_doc:
    free(rg);
    tfp_doc_free(doc);
free_root:
    cJSON_Delete(root);
    return st;
}

/* ---- the direct scan --------------------------------------------------------------------
 *
 * Most headers on the wire are what encoders write: compact or lightly spaced JSON, names in
 * plain ASCII, a few tensors. Building a cJSON tree for those is most of a small request's
 * decoding (a 1-tensor header: ~14k instructions through the tree, ~3k here). scan()
 * reads such a header directly and builds the doc the tree path would build; on anything
 * else - a backslash, a byte outside printable ASCII, a number with a sign, fraction or
 * exponent, more than SCAN_MAX tensors or SCAN_MAX_META metadata keys, a key out of place,
 * any rule broken - it declines, and the tree path decides (with its messages). So it never
 * refuses anything, and it accepts only text that is valid JSON by construction: objects,
 * arrays of integers, and strings of printable ASCII without escapes. fuzz_safetensors checks
 * that whatever it accepts, the tree path accepts as the same doc. */

#define SCAN_MAX 16                 /* tensors */
#define SCAN_MAX_META 16            /* metadata keys */
#define SCAN_MAX_VALUE 1024         /* bytes of one metadata value */

typedef struct {
    const char *p, *end;
} scan_t;

static int sc_ws(scan_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
    return c->p < c->end;
}

/* The next token is ch: consumed. */
static int sc_lit(scan_t *c, char ch)
{
    if (!sc_ws(c) || *c->p != ch)
        return 0;
    c->p++;
    return 1;
}

/* A string without escapes, of printable ASCII, at most max bytes: copied NUL-terminated
 * into out[max + 1]. */
static int sc_str(scan_t *c, char *out, size_t max, size_t *len)
{
    if (!sc_lit(c, '"'))
        return 0;
    const char *b = c->p;
    while (c->p < c->end && *c->p != '"') {
        unsigned char ch = (unsigned char)*c->p;
        if (ch < 0x20 || ch > 0x7e || ch == '\\')
            return 0;
        c->p++;
    }
    size_t n = (size_t)(c->p - b);
    if (c->p == c->end || n > max)
        return 0;
    memcpy(out, b, n);
    out[n] = '\0';
    *len = n;
    c->p++;
    return 1;
}

/* A JSON integer in 0..2^53 without sign, fraction or exponent (at most 16 digits). */
static int sc_uint(scan_t *c, uint64_t *v)
{
    uint64_t x = 0;
    size_t n = 0;

    if (!sc_ws(c))
        return 0;
    const char *b = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9' && n < 17) {
        x = x * 10 + (uint64_t)(*c->p - '0');
        c->p++;
        n++;
    }
    if (n == 0 || n > 16 || (n > 1 && *b == '0') || x > MAX_EXACT)
        return 0;
    *v = x;
    return 1;       /* a '.', 'e' or more digits after it are not ',' or ']': the caller stops */
}

/* [N, ...] of at most max integers. */
static int sc_uints(scan_t *c, uint64_t *v, int max, int *count)
{
    int n = 0;

    if (!sc_lit(c, '['))
        return 0;
    if (sc_lit(c, ']')) {
        *count = 0;
        return 1;
    }
    do {
        if (n == max || !sc_uint(c, &v[n]))
            return 0;
        n++;
    } while (sc_lit(c, ','));
    *count = n;
    return sc_lit(c, ']');
}

/* {"dtype": "..", "shape": [..], "data_offsets": [b, e]} in any order, each once. */
static int sc_entry(scan_t *c, tfp_doc_t *doc, const char *name, uint64_t data_len,
                    range_t *rg)
{
    char key[16], dts[16];
    uint64_t dims[TFP_MAX_RANK], offs[2];
    unsigned seen = 0;
    size_t n;
    int rank = 0, k;
    tfp_dtype_t dt;
    tfp_err_t err;

    if (!sc_lit(c, '{'))
        return 0;
    do {
        if (!sc_str(c, key, sizeof key - 1, &n) || !sc_lit(c, ':'))
            return 0;
        if (strcmp(key, "dtype") == 0 && !(seen & 1)) {
            if (!sc_str(c, dts, sizeof dts - 1, &n) || tfp_dtype_from_name(dts, n, &dt) != 0)
                return 0;
            seen |= 1;
        } else if (strcmp(key, "shape") == 0 && !(seen & 2)) {
            if (!sc_uints(c, dims, TFP_MAX_RANK, &rank))
                return 0;
            seen |= 2;
        } else if (strcmp(key, "data_offsets") == 0 && !(seen & 4)) {
            if (!sc_uints(c, offs, 2, &k) || k != 2 || offs[0] > offs[1])
                return 0;
            seen |= 4;
        } else {
            return 0;
        }
    } while (sc_lit(c, ','));
    if (!sc_lit(c, '}') || seen != 7)
        return 0;
    rg->begin = offs[0];
    rg->end = offs[1];
    return add_entry(doc, name, name, dt, rank, dims, data_len, rg, &err) == TFP_OK;
}

/* {"key": "value", ...}: string values, keys once each. */
static int sc_meta(scan_t *c, tfp_doc_t *doc)
{
    char key[TFP_MAX_NAME + 1], value[SCAN_MAX_VALUE + 1];
    size_t n;
    tfp_err_t err;

    if (!sc_lit(c, '{'))
        return 0;
    doc->meta_object = 1;
    if (sc_lit(c, '}'))
        return 1;
    do {
        if (doc->nmeta == SCAN_MAX_META || !sc_str(c, key, TFP_MAX_NAME, &n) ||
            !sc_lit(c, ':') || !sc_str(c, value, SCAN_MAX_VALUE, &n) ||
            tfp_doc_meta(doc, key) != NULL)
            return 0;
        if (tfp_doc_append_meta(doc, key, value, &err) != TFP_OK)
            return 0;
    } while (sc_lit(c, ','));
    return sc_lit(c, '}');
}

static int sc_header(scan_t *c, tfp_doc_t *doc, uint64_t data_len, size_t max_tensors,
                     range_t *rg)
{
    char name[TFP_MAX_NAME + 1];
    size_t n;
    int meta = 0;

    if (c->p == c->end || *c->p != '{')
        return 0;
    c->p++;
    if (!sc_lit(c, '}')) {
        do {
            if (!sc_str(c, name, TFP_MAX_NAME, &n) || !sc_lit(c, ':'))
                return 0;
            if (strcmp(name, "__metadata__") == 0) {
                if (meta++ || !sc_meta(c, doc))
                    return 0;
                continue;
            }
            if (n == 0 || doc->n == SCAN_MAX || doc->n == max_tensors ||
                tfp_doc_find(doc, name) != NULL)
                return 0;
            if (!sc_entry(c, doc, name, data_len, &rg[doc->n]))
                return 0;
        } while (sc_lit(c, ','));
        if (!sc_lit(c, '}'))
            return 0;
    }
    for (; c->p < c->end; c->p++)
        if (*c->p != ' ')
            return 0;
    return 1;
}

/* The doc, or NULL: declined (the tree path decides). */
static tfp_doc_t *scan(const uint8_t *buf, const char *hdr, uint64_t hlen, uint64_t data_len,
                       size_t max_tensors)
{
    range_t rg[SCAN_MAX];
    scan_t c = {hdr, hdr + hlen};
    tfp_doc_t *doc = tfp_doc_new();
    tfp_err_t err;

    if (doc == NULL)
        return NULL;
    if (!sc_header(&c, doc, data_len, max_tensors, rg) ||
        check_tiling(doc, rg, doc->n, data_len, &err) != TFP_OK) {
        tfp_doc_free(doc);
        return NULL;
    }
    for (size_t i = 0; i < doc->n; i++)
        doc->t[i].data = buf + 8 + hlen + doc->t[i].offset;
    return doc;
}

tfp_status_t tfp_st_decode_path(const uint8_t *buf, size_t len, const tfp_st_limits_t *limits,
                                int path, tfp_doc_t **out, tfp_err_t *err)
{
    uint64_t max_header = TFP_ST_DEFAULT_MAX_HEADER, hlen, data_len;
    size_t max_tensors = TFP_ST_DEFAULT_MAX_TENSORS;
    const char *hdr;

    if (out == NULL || (buf == NULL && len > 0))
        return tfp_err_set(err, TFP_EINVAL, "no buffer or no output");
    *out = NULL;
    if (limits != NULL && limits->max_header != 0)
        max_header = limits->max_header;
    if (limits != NULL && limits->max_tensors != 0)
        max_tensors = limits->max_tensors;
    if (len < 8)
        return tfp_err_set(err, TFP_EPROTO,
                           "%zu bytes is shorter than the 8-byte header length", len);
    hlen = tfp_le64(buf);
    if (hlen > max_header)
        return tfp_err_set(err, TFP_ETOOBIG, "header length %llu exceeds the limit of %llu bytes",
                           (unsigned long long)hlen, (unsigned long long)max_header);
    if (hlen > len - 8)
        return tfp_err_set(err, TFP_EPROTO, "header length %llu exceeds the %zu bytes that follow",
                           (unsigned long long)hlen, len - 8);
    hdr = (const char *)buf + 8;
    data_len = len - 8 - hlen;
    if (path != TFP_ST_PATH_TREE) {
        *out = scan(buf, hdr, hlen, data_len, max_tensors);
        if (*out != NULL)
            return TFP_OK;
        if (path == TFP_ST_PATH_SCAN)
            return tfp_err_set(err, TFP_EAGAIN, "declined by the direct scan");
    }
    return decode_tree(buf, hdr, hlen, data_len, max_tensors, out, err);
}

tfp_status_t tfp_st_decode(const uint8_t *buf, size_t len, const tfp_st_limits_t *limits,
                           tfp_doc_t **out, tfp_err_t *err)
{
    return tfp_st_decode_path(buf, len, limits, TFP_ST_PATH_BOTH, out, err);
}

/* ---- encoding -------------------------------------------------------------------------- */

tfp_status_t tfp_st_encode_header(tfp_doc_t *doc, uint8_t **hdr, size_t *hdr_len,
                                  tfp_err_t *err)
{
    uint64_t off = 0, want;
    size_t json_len, pad, total;
    uint8_t *out;
    char *json;
    tfp_jw_t w;
    tfp_status_t st;

    if (doc == NULL || hdr == NULL || hdr_len == NULL)
        return tfp_err_set(err, TFP_EINVAL, "no doc or no output");
    for (size_t i = 0; i < doc->n; i++) {
        tfp_tensor_t *t = &doc->t[i];

        st = tfp_shape_nbytes(t->dtype, t->rank, t->shape, &want, err);
        if (st != TFP_OK)
            return st;
        if (want != t->nbytes)
            return tfp_err_set(err, TFP_EINVAL, "tensor '%.64s': nbytes %llu, dtype x shape %llu",
                               t->name, (unsigned long long)t->nbytes,
                               (unsigned long long)want);
        t->offset = off;
        if (__builtin_add_overflow(off, t->nbytes, &off))
            return tfp_err_set(err, TFP_ERANGE, "data section size overflows 64 bits");
    }

    tfp_jw_init(&w);
    tfp_jw_obj_begin(&w);
    if (doc->nmeta > 0 || doc->meta_object) {
        tfp_jw_key(&w, "__metadata__");
        tfp_jw_obj_begin(&w);
        for (size_t i = 0; i < doc->nmeta; i++) {
            tfp_jw_key(&w, doc->meta[i].key);
            tfp_jw_str(&w, doc->meta[i].value);
        }
        tfp_jw_obj_end(&w);
    }
    for (size_t i = 0; i < doc->n; i++) {
        const tfp_tensor_t *t = &doc->t[i];

        tfp_jw_key(&w, t->name);
        tfp_jw_obj_begin(&w);
        tfp_jw_key(&w, "dtype");
        tfp_jw_str(&w, tfp_dtype_name(t->dtype));
        tfp_jw_key(&w, "shape");
        tfp_jw_arr_begin(&w);
        for (int d = 0; d < t->rank; d++)
            tfp_jw_uint(&w, t->shape[d]);
        tfp_jw_arr_end(&w);
        tfp_jw_key(&w, "data_offsets");
        tfp_jw_arr_begin(&w);
        tfp_jw_uint(&w, t->offset);
        tfp_jw_uint(&w, t->offset + t->nbytes);
        tfp_jw_arr_end(&w);
        tfp_jw_obj_end(&w);
    }
    tfp_jw_obj_end(&w);
    json = tfp_jw_finish(&w, &json_len);
    if (json == NULL)
        return tfp_err_set(err, TFP_ENOMEM, "out of memory encoding the header");

    pad = (8 - json_len % 8) % 8;
    total = 8 + json_len + pad;
    out = malloc(total);
    if (out == NULL) {
        free(json);
        return tfp_err_set(err, TFP_ENOMEM, "out of memory encoding the header");
    }
    tfp_le64_put(out, (uint64_t)(json_len + pad));
    memcpy(out + 8, json, json_len);
    memset(out + 8 + json_len, ' ', pad);
    free(json);
    *hdr = out;
    *hdr_len = total;
    return TFP_OK;
}

tfp_status_t tfp_st_encode(tfp_doc_t *doc, uint8_t **buf, size_t *len, tfp_err_t *err)
{
    uint8_t *hdr, *out;
    size_t hdr_len, total;
    uint64_t data;
    tfp_status_t st;

    if (doc == NULL || buf == NULL || len == NULL)
        return tfp_err_set(err, TFP_EINVAL, "no doc or no output");
    for (size_t i = 0; i < doc->n; i++) {
        if (doc->t[i].nbytes > 0 && doc->t[i].data == NULL)
            return tfp_err_set(err, TFP_EINVAL, "tensor '%.64s' has no data bound",
                               doc->t[i].name);
    }
    st = tfp_st_encode_header(doc, &hdr, &hdr_len, err);
    if (st != TFP_OK)
        return st;
    data = tfp_doc_data_bytes(doc);
    if (data > SIZE_MAX - hdr_len) {
        st = tfp_err_set(err, TFP_ERANGE, "document of %llu data bytes does not fit in memory",
                         (unsigned long long)data);
        goto free_hdr;
    }
    total = hdr_len + (size_t)data;
    out = realloc(hdr, total);
    if (out == NULL) {
        st = tfp_err_set(err, TFP_ENOMEM, "out of memory encoding the document");
        goto free_hdr;
    }
    for (size_t i = 0; i < doc->n; i++) {
        if (doc->t[i].nbytes > 0)
            memcpy(out + hdr_len + doc->t[i].offset, doc->t[i].data, (size_t)doc->t[i].nbytes);
    }
    *buf = out;
    *len = total;
    return TFP_OK;

free_hdr:
    free(hdr);
    return st;
}
