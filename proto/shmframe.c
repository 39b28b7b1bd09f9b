/* shmframe.c - the shm transport's messages (see shmframe.h): one validator shared by the
 * encoder and the decoder, so neither side can produce what the other refuses. Pure; any
 * thread.
 */
#include "config.h"
#include "proto/shmframe.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "proto/op.h"
#include "proto/le.h"
#include "proto/upgrade.h"
#include "proto/utf8.h"

static int status_known(int64_t v)
{
    switch (v) {
#define X(n, val, h, s) case (val):
        TFP_STATUS_MAP(X)
#undef X
        return 1;
    }
    return 0;
}

/* Whether m keeps every rule of shmframe.h; code is what to report (EINVAL or EPROTO). */
static tfp_status_t check(const tfp_sf_t *m, tfp_status_t code, tfp_err_t *err)
{
    const char *s = m->str;
    size_t n = m->str_len;
    int req = m->op != TFP_SF_REPLY && m->op != TFP_SF_ITEM;
    tfp_err_t sub;
    if (req && m->status != 0)
        return tfp_err_set(err, code, "shm: a request with status %d", (int)m->status);
    if (m->op != TFP_SF_REPLY && m->http)
        return tfp_err_set(err, code, "shm: an HTTP status outside a REPLY");
    if (m->op == TFP_SF_REPLY && m->http && (m->http < 100 || m->http > 599))
        return tfp_err_set(err, code, "shm: a REPLY with HTTP status %u", (unsigned)m->http);
    if (m->flags & ~(uint32_t)((m->op == TFP_SF_GET || m->op == TFP_SF_COMMIT) ? TFP_SF_F_COND
                               : m->op == TFP_SF_ALLOC ? TFP_SF_F_CALL : 0))
        return tfp_err_set(err, code, "shm: flags 0x%x on op %d", (unsigned)m->flags,
                           (int)m->op);
    switch (m->op) {
    case TFP_SF_HELLO:
        if (n != TFP_UP_TOKEN_LEN || !tfp_up_token_valid(s))
            return tfp_err_set(err, code, "shm: HELLO without a valid token");
        if (m->lease || m->b || (m->a != 0 && m->a != TFP_SF_HELLO_V2 && m->a != TFP_SF_HELLO_V3))
            return tfp_err_set(err, code, "shm: HELLO with numbers set (but a version)");
        return TFP_OK;
    case TFP_SF_GET:
        if (tfp_sf_target(m, NULL, NULL, NULL, &sub) != TFP_OK)
            return tfp_err_set(err, code, "%s", sub.msg);
        if (m->lease || m->a || m->b)
            return tfp_err_set(err, code, "shm: GET with numbers set");
        return TFP_OK;
    case TFP_SF_ALLOC:
    case TFP_SF_STAGE: {
        const char *op = m->op == TFP_SF_ALLOC ? "ALLOC" : "STAGE";
        if (n || m->lease || m->b)
            return tfp_err_set(err, code, "shm: %s with fields besides its size", op);
        if (m->a == 0 || m->a > TFP_SF_MAX_SIZE)
            return tfp_err_set(err, code, "shm: %s of %llu bytes", op,
                               (unsigned long long)m->a);
        return TFP_OK;
    }
    case TFP_SF_COMMIT:
        if (tfp_sf_target(m, NULL, NULL, NULL, &sub) != TFP_OK)
            return tfp_err_set(err, code, "%s", sub.msg);
        if (!m->lease || m->a == 0 || m->a > TFP_SF_MAX_SIZE)
            return tfp_err_set(err, code, "shm: COMMIT without a lease and a length");
        if (m->b > TFP_MAX_TTL_S)
            return tfp_err_set(err, code, "shm: COMMIT with a TTL of %llu s (at most %u)",
                               (unsigned long long)m->b, TFP_MAX_TTL_S);
        return TFP_OK;
    case TFP_SF_CALL:
        if (tfp_sf_call_spec(m, NULL, NULL, NULL, &sub) != TFP_OK)
            return tfp_err_set(err, code, "%s", sub.msg);
        if (!m->lease || m->a == 0 || m->a > TFP_SF_MAX_SIZE || m->b)
            return tfp_err_set(err, code, "shm: CALL without a lease and a length (or with b)");
        return TFP_OK;
    case TFP_SF_RELEASE:
        if (n || !m->lease || m->a || m->b)
            return tfp_err_set(err, code, "shm: RELEASE without exactly a lease");
        return TFP_OK;
    case TFP_SF_TOKEN:
        if (n || m->lease || m->a || m->b)
            return tfp_err_set(err, code, "shm: TOKEN with fields set");
        return TFP_OK;
    case TFP_SF_RING:
        if (tfp_sf_ring_spec(s, NULL, NULL, NULL, &sub) != TFP_OK)
            return tfp_err_set(err, code, "%s", sub.msg);
        if (m->lease || m->a == 0 || m->a > TFP_SF_MAX_SLOTS || m->b > TFP_SF_MAX_SLOT)
            return tfp_err_set(err, code, "shm: RING of %llu slots of %llu bytes (1..%d slots, "
                               "at most %llu bytes each)", (unsigned long long)m->a,
                               (unsigned long long)m->b, TFP_SF_MAX_SLOTS,
                               (unsigned long long)TFP_SF_MAX_SLOT);
        return TFP_OK;
    case TFP_SF_CREDIT:
        if (n || m->lease || m->a == 0 || m->b)
            return tfp_err_set(err, code, "shm: CREDIT without exactly a count");
        return TFP_OK;
    case TFP_SF_ACK:
        if (n || m->lease)
            return tfp_err_set(err, code, "shm: ACK with a string or a lease");
        return TFP_OK;
    case TFP_SF_FREE:
        if (n || m->lease || m->a == 0 || m->a > TFP_SF_MAX_SLOTS || m->b)
            return tfp_err_set(err, code, "shm: FREE without exactly a slot (1..%d)",
                               TFP_SF_MAX_SLOTS);
        return TFP_OK;
    case TFP_SF_ITEM:
        if (!status_known(m->status))
            return tfp_err_set(err, code, "shm: ITEM with unknown status %d", (int)m->status);
        if (m->status != TFP_OK) {
            if (m->lease || m->a || m->b || n > TFP_SF_MAX_MSG || !tfp_utf8_valid(s, n))
                return tfp_err_set(err, code, "shm: a failed ITEM with numbers set or a "
                                   "message that is not UTF-8");
            return TFP_OK;
        }
        if (tfp_sf_item_get(m, NULL, NULL, NULL, &sub) != TFP_OK)
            return tfp_err_set(err, code, "%s", sub.msg);
        if (m->lease ? m->b == 0 || m->a > TFP_SF_MAX_SIZE || m->b > TFP_SF_MAX_SIZE
                     : m->a || m->b)
            return tfp_err_set(err, code, "shm: ITEM at %llu with %llu bytes at %llu",
                               (unsigned long long)m->lease, (unsigned long long)m->b,
                               (unsigned long long)m->a);
        return TFP_OK;
    case TFP_SF_REPLY:
        if (!status_known(m->status))
            return tfp_err_set(err, code, "shm: REPLY with unknown status %d", (int)m->status);
        if (n > TFP_SF_MAX_MSG || !tfp_utf8_valid(s, n))
            return tfp_err_set(err, code, "shm: REPLY message is not UTF-8 of at most %d bytes",
                               TFP_SF_MAX_MSG);
        if (m->status != TFP_OK && (m->lease || m->a || m->b))
            return tfp_err_set(err, code, "shm: a failed REPLY with numbers set");
        return TFP_OK;
    }
    return tfp_err_set(err, code, "shm: unknown op %d", (int)m->op);
}

size_t tfp_sf_encode(const tfp_sf_t *m, uint8_t *buf, size_t size, tfp_err_t *err)
{
    if (m->str_len > TFP_SF_MAX_STR || memchr(m->str, 0, m->str_len)) {
        tfp_err_set(err, TFP_EINVAL, "shm: a string of %zu bytes", m->str_len);
        return 0;
    }
    if (check(m, TFP_EINVAL, err) != TFP_OK)
        return 0;
    size_t len = TFP_SF_FIXED + m->str_len;
    if (size < len) {
        tfp_err_set(err, TFP_EINVAL, "shm: a buffer of %zu bytes", size);
        return 0;
    }
    memset(buf, 0, TFP_SF_FIXED);
    tfp_le32_put(buf, TFP_SF_MAGIC);
    buf[4] = TFP_SF_VERSION;
    buf[5] = (uint8_t)m->op;
    buf[6] = (uint8_t)m->str_len;
    buf[7] = (uint8_t)(m->str_len >> 8);
    tfp_le64_put(buf + 8, m->seq);
    tfp_le32_put(buf + 16, (uint32_t)m->status);
    tfp_le32_put(buf + 20, m->op == TFP_SF_REPLY ? m->http : m->flags);
    tfp_le64_put(buf + 24, m->lease);
    tfp_le64_put(buf + 32, m->a);
    tfp_le64_put(buf + 40, m->b);
    memcpy(buf + TFP_SF_FIXED, m->str, m->str_len);
    return len;
}

tfp_status_t tfp_sf_decode(const uint8_t *buf, size_t len, tfp_sf_t *out, tfp_err_t *err)
{
    if (len < TFP_SF_FIXED)
        return tfp_err_set(err, TFP_EPROTO, "shm: a message of %zu bytes", len);
    if (tfp_le32(buf) != TFP_SF_MAGIC)
        return tfp_err_set(err, TFP_EPROTO, "shm: bad magic");
    if (buf[4] != TFP_SF_VERSION)
        return tfp_err_set(err, TFP_EPROTO, "shm: version %u", buf[4]);
    size_t n = (size_t)buf[6] | (size_t)buf[7] << 8;
    if (n > TFP_SF_MAX_STR || len != TFP_SF_FIXED + n)
        return tfp_err_set(err, TFP_EPROTO, "shm: %zu bytes for a string of %zu", len, n);
    if (memchr(buf + TFP_SF_FIXED, 0, n))
        return tfp_err_set(err, TFP_EPROTO, "shm: a NUL in the string");
    tfp_sf_t m;
    m.op = (tfp_sf_op_t)buf[5];
    m.seq = tfp_le64(buf + 8);
    m.status = (int32_t)tfp_le32(buf + 16);
    m.flags = m.op == TFP_SF_REPLY ? 0 : tfp_le32(buf + 20);
    m.http = m.op == TFP_SF_REPLY ? tfp_le32(buf + 20) : 0;
    m.lease = tfp_le64(buf + 24);
    m.a = tfp_le64(buf + 32);
    m.b = tfp_le64(buf + 40);
    memcpy(m.str, buf + TFP_SF_FIXED, n);
    m.str[n] = '\0';
    m.str_len = n;
    tfp_status_t st = check(&m, TFP_EPROTO, err);
    if (st != TFP_OK)
        return st;
    *out = m;
    return TFP_OK;
}

tfp_status_t tfp_sf_check_span(uint64_t a, uint64_t b, uint64_t size, tfp_err_t *err)
{
    if (b == 0 || a > size || b > size - a)
        return tfp_err_set(err, TFP_EPROTO, "shm: a document at %llu+%llu in %llu bytes",
                           (unsigned long long)a, (unsigned long long)b,
                           (unsigned long long)size);
    return TFP_OK;
}

/* One condition line's value (what follows "\n" NAME ": ") checked as HTTP checks it: TFP_OK
 * with *out, else TFP_EPROTO. */
static tfp_status_t cond_value(const char *v, size_t n, const char *what, int weak_ok,
                               tfp_etags_t *out, tfp_err_t *err)
{
    char buf[TFP_SF_MAX_COND + 1];
    tfp_etags_t l;
    if (out && out->present)
        return tfp_err_set(err, TFP_EPROTO, "shm: %s given twice", what);
    if (n == 0 || n > TFP_SF_MAX_COND)
        return tfp_err_set(err, TFP_EPROTO, "shm: %s of %zu bytes (1..%d)", what, n,
                           TFP_SF_MAX_COND);
    memcpy(buf, v, n);
    buf[n] = '\0';
    if (tfp_etags_parse(buf, weak_ok, &l) != 0)
        return tfp_err_set(err, TFP_EPROTO, "shm: %s is not an ETag list or *", what);
    *out = l;
    return TFP_OK;
}

/* 1 if line[0..n) is a digest field as a GET or COMMIT may carry it after its name:
 * Repr-Digest, Content-Digest, Want-Repr-Digest or Want-Content-Digest, ": ", and a
 * printable ASCII value. */
static int digest_line(const char *line, size_t n)
{
    static const char *const keys[] = {"Repr-Digest: ", "Content-Digest: ",
                                       "Want-Repr-Digest: ", "Want-Content-Digest: "};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        size_t kn = strlen(keys[k]);
        if (n <= kn || memcmp(line, keys[k], kn) != 0)
            continue;
        for (size_t i = kn; i < n; i++)
            if ((unsigned char)line[i] < 0x20 || (unsigned char)line[i] > 0x7e)
                return 0;
        return 1;
    }
    return 0;
}

tfp_status_t tfp_sf_target(const tfp_sf_t *m, char name[TFP_MAX_TENSOR_NAME + 1],
                           tfp_etags_t *if_match, tfp_etags_t *if_none_match, tfp_err_t *err)
{
    static const char im_key[] = "\nIf-Match: ", inm_key[] = "\nIf-None-Match: ";
    const char *op = m->op == TFP_SF_GET ? "GET" : "COMMIT";
    tfp_etags_t im, inm;
    const char *s = m->str, *end = m->str + m->str_len;
    const char *nl = memchr(s, '\n', m->str_len);
    size_t n = (size_t)((nl ? nl : end) - s);
    char nm[TFP_MAX_TENSOR_NAME + 1];
    memset(&im, 0, sizeof im);
    memset(&inm, 0, sizeof inm);
    if (!n || n > TFP_MAX_TENSOR_NAME)
        return tfp_err_set(err, TFP_EPROTO, "shm: %s of an invalid tensor name", op);
    memcpy(nm, s, n);
    nm[n] = '\0';
    if (!tfp_name_valid(nm))
        return tfp_err_set(err, TFP_EPROTO, "shm: %s of an invalid tensor name", op);
    if (!(m->flags & TFP_SF_F_COND) != !nl)
        return tfp_err_set(err, TFP_EPROTO, "shm: %s with %s", op, nl ? "conditions but no "
                           "flag COND" : "flag COND but no conditions");
    for (const char *p = nl; p && p < end;) {
        const char *e = memchr(p + 1, '\n', (size_t)(end - p - 1));
        e = e ? e : end;
        size_t len = (size_t)(e - p);
        tfp_status_t st;
        if (len > sizeof im_key - 1 && memcmp(p, im_key, sizeof im_key - 1) == 0)
            st = cond_value(p + sizeof im_key - 1, len - (sizeof im_key - 1), "If-Match", 0,
                            &im, err);
        else if (len > sizeof inm_key - 1 && memcmp(p, inm_key, sizeof inm_key - 1) == 0)
            st = cond_value(p + sizeof inm_key - 1, len - (sizeof inm_key - 1),
                            "If-None-Match", 1, &inm, err);
        else if (digest_line(p + 1, len - 1))
            st = TFP_OK;                /* its value: tfp_op_digest_lines (proto/op.h) */
        else
            st = tfp_err_set(err, TFP_EPROTO, "shm: a condition that is neither If-Match "
                             "nor If-None-Match (nor a digest field)");
        if (st != TFP_OK)
            return st;
        p = e;
    }
    if (name)
        memcpy(name, nm, n + 1);
    if (if_match)
        *if_match = im;
    if (if_none_match)
        *if_none_match = inm;
    return TFP_OK;
}

/* m's string: first, then "\nNAME1: v1" and "\nNAME2: v2" for each value given and not
 * empty. TFP_OK, or err (what: what the string holds) when it does not fit. */
static tfp_status_t set_lines(tfp_sf_t *m, const char *first, const char *name1,
                              const char *v1, const char *name2, const char *v2,
                              const char *what, tfp_err_t *err)
{
    int has1 = v1 && v1[0], has2 = v2 && v2[0];
    int n = snprintf(m->str, sizeof m->str, "%s%s%s%s%s%s%s%s%s", first, has1 ? "\n" : "",
                     has1 ? name1 : "", has1 ? ": " : "", has1 ? v1 : "", has2 ? "\n" : "",
                     has2 ? name2 : "", has2 ? ": " : "", has2 ? v2 : "");
    if (n < 0 || (size_t)n >= sizeof m->str) {
        m->str[0] = '\0';
        m->str_len = 0;
        return tfp_err_set(err, TFP_EINVAL, "shm: %s of %d bytes", what, n);
    }
    m->str_len = (size_t)n;
    return TFP_OK;
}

tfp_status_t tfp_sf_set_target(tfp_sf_t *m, const char *name, const char *if_match,
                               const char *if_none_match, tfp_err_t *err)
{
    int has_im = if_match && if_match[0], has_inm = if_none_match && if_none_match[0];
    if (set_lines(m, name, "If-Match", if_match, "If-None-Match", if_none_match,
                  "a name and conditions", err) != TFP_OK)
        return TFP_EINVAL;
    m->flags = (has_im || has_inm) ? m->flags | TFP_SF_F_COND : m->flags & ~TFP_SF_F_COND;
    if (tfp_sf_target(m, NULL, NULL, NULL, err) != TFP_OK) {
        err->code = TFP_EINVAL;
        return TFP_EINVAL;
    }
    return TFP_OK;
}

tfp_status_t tfp_sf_add_line(tfp_sf_t *m, const char *name, const char *value, tfp_err_t *err)
{
    size_t n = m->str_len, k = strlen(name), v = strlen(value);
    if (n + 1 + k + 2 + v > TFP_SF_MAX_STR)
        return tfp_err_set(err, TFP_EINVAL, "shm: no room for %s", name);
    char *p = m->str + n;
    *p++ = '\n';
    memcpy(p, name, k);
    memcpy(p + k, ": ", 2);
    memcpy(p + k + 2, value, v + 1);
    m->str_len = n + 1 + k + 2 + v;
    m->flags |= TFP_SF_F_COND;
    if (tfp_sf_target(m, NULL, NULL, NULL, err) != TFP_OK) {
        m->str[n] = '\0';
        m->str_len = n;
        err->code = TFP_EINVAL;
        return TFP_EINVAL;
    }
    return TFP_OK;
}

tfp_status_t tfp_sf_reply_etag(const tfp_sf_t *m, char etag[TFP_ETAG_LEN], tfp_err_t *err)
{
    tfp_etags_t l;
    if (m->op != TFP_SF_REPLY || m->status != TFP_OK || m->str_len == 0 ||
        m->str_len >= TFP_ETAG_LEN || tfp_etags_parse(m->str, 0, &l) != 0 || l.any ||
        l.n + l.foreign != 1 || m->str[0] != '"')
        return tfp_err_set(err, TFP_EPROTO, "shm: the answer carries no ETag");
    memcpy(etag, m->str, m->str_len + 1);
    return TFP_OK;
}

/* One "\nKEY: value" line of a CALL at *p (before end): 1 with the value in out (size
 * bytes, NUL-terminated) and *p past it, 0 when the line is not KEY's. */
static int call_line(const char **p, const char *end, const char *key, char *out, size_t size)
{
    size_t k = strlen(key);
    if ((size_t)(end - *p) < k + 1 || (*p)[0] != '\n' || memcmp(*p + 1, key, k) != 0)
        return 0;
    const char *v = *p + 1 + k, *e = memchr(v, '\n', (size_t)(end - v));
    e = e ? e : end;
    size_t n = (size_t)(e - v);
    if (n >= size)
        n = size - 1;                   /* too long: cut, then refused by its validator */
    memcpy(out, v, n);
    out[n] = '\0';
    if ((size_t)(e - v) >= size)
        out[0] = '\0';                 /* "": invalid for both validators */
    *p = e;
    return 1;
}

tfp_status_t tfp_sf_call_spec(const tfp_sf_t *m, char route[TFP_MAX_TENSOR_NAME + 1],
                              char user[TFP_MAX_USER_ID + 1],
                              char request_id[TFP_MAX_REQUEST_ID + 1], tfp_err_t *err)
{
    const char *s = m->str, *end = m->str + m->str_len;
    const char *nl = memchr(s, '\n', m->str_len);
    size_t n = (size_t)((nl ? nl : end) - s);
    char r[TFP_MAX_TENSOR_NAME + 1], u[TFP_MAX_USER_ID + 1] = "";
    char id[TFP_MAX_REQUEST_ID + 1] = "";
    if (!n || n > TFP_MAX_TENSOR_NAME)
        return tfp_err_set(err, TFP_EPROTO, "shm: CALL of an invalid route name");
    memcpy(r, s, n);
    r[n] = '\0';
    if (!tfp_name_valid(r))
        return tfp_err_set(err, TFP_EPROTO, "shm: CALL of an invalid route name");
    const char *p = s + n;
    if (p < end && call_line(&p, end, "User: ", u, sizeof u) && !tfp_user_id_valid(u))
        return tfp_err_set(err, TFP_EPROTO, "shm: CALL with an invalid user id");
    if (p < end && call_line(&p, end, "Request-Id: ", id, sizeof id) &&
        !tfp_request_id_valid(id))
        return tfp_err_set(err, TFP_EPROTO, "shm: CALL with an invalid request id");
    if (p != end)
        return tfp_err_set(err, TFP_EPROTO, "shm: CALL with a line that is neither User nor "
                           "Request-Id (each at most once, in that order)");
    if (route)
        memcpy(route, r, n + 1);
    if (user)
        memcpy(user, u, sizeof u);
    if (request_id)
        memcpy(request_id, id, sizeof id);
    return TFP_OK;
}

tfp_status_t tfp_sf_set_call(tfp_sf_t *m, const char *route, const char *user,
                             const char *request_id, tfp_err_t *err)
{
    if (set_lines(m, route, "User", user, "Request-Id", request_id,
                  "a route, user and request id", err) != TFP_OK)
        return TFP_EINVAL;
    if (tfp_sf_call_spec(m, NULL, NULL, NULL, err) != TFP_OK) {
        err->code = TFP_EINVAL;
        return TFP_EINVAL;
    }
    return TFP_OK;
}

/* Copies the part of s up to '/' (or the end, last) into out (size bytes): its end, or NULL. */
static const char *part(const char *s, int last, char *out, size_t size)
{
    const char *e = last ? s + strlen(s) : strchr(s, '/');
    if (!e || (size_t)(e - s) >= size)
        return NULL;
    memcpy(out, s, (size_t)(e - s));
    out[e - s] = '\0';
    return e;
}

tfp_status_t tfp_sf_ring_spec(const char *s, char feed[TFP_MAX_TENSOR_NAME + 1],
                              char dev[TFP_MAX_TENSOR_NAME + 1],
                              char consumer[TFP_MAX_USER_ID + 1], tfp_err_t *err)
{
    char f[TFP_MAX_TENSOR_NAME + 1], d[TFP_MAX_TENSOR_NAME + 1], c[TFP_MAX_USER_ID + 1];
    const char *p = part(s, 0, f, sizeof f);
    const char *q = p ? part(p + 1, 0, d, sizeof d) : NULL;
    if (!q || !part(q + 1, 1, c, sizeof c) || !tfp_name_valid(f) || !tfp_name_valid(d) ||
        !tfp_user_id_valid(c))
        return tfp_err_set(err, TFP_EPROTO, "shm: RING names no FEED/DEV/CONSUMER");
    if (feed)
        memcpy(feed, f, sizeof f);
    if (dev)
        memcpy(dev, d, sizeof d);
    if (consumer)
        memcpy(consumer, c, sizeof c);
    return TFP_OK;
}

void tfp_sf_item_set(tfp_sf_t *m, uint64_t seq, uint64_t round, uint64_t generation)
{
    int n = snprintf(m->str, sizeof m->str, "%" PRIu64 " %" PRIu64 " %" PRIu64, seq, round,
                     generation);
    m->str_len = n > 0 ? (size_t)n : 0;
}

tfp_status_t tfp_sf_item_get(const tfp_sf_t *m, uint64_t *seq, uint64_t *round,
                             uint64_t *generation, tfp_err_t *err)
{
    uint64_t v[3];
    const char *s = m->str;
    for (int i = 0; i < 3; i++) {
        char num[24];
        size_t k = 0;
        while (s[k] >= '0' && s[k] <= '9' && k < sizeof num - 1)
            k++;
        if (k == 0 || k >= 21 || (i < 2 ? s[k] != ' ' : s[k] != '\0'))
            return tfp_err_set(err, TFP_EPROTO, "shm: ITEM numbers are not 'SEQ ROUND "
                               "GENERATION'");
        memcpy(num, s, k);
        num[k] = '\0';
        if (tfp_parse_u64(num, UINT64_MAX, &v[i]) != 0)
            return tfp_err_set(err, TFP_EPROTO, "shm: ITEM number '%s' is out of range", num);
        s += k + (i < 2);
    }
    if (seq)
        *seq = v[0];
    if (round)
        *round = v[1];
    if (generation)
        *generation = v[2];
    return TFP_OK;
}

void tfp_sf_staged_encode(const tfp_sf_staged_t *ref, uint8_t out[TFP_SF_STAGED_LEN])
{
    tfp_le64_put(out, ref->lease);
    tfp_le64_put(out + 8, ref->offset);
    tfp_le64_put(out + 16, ref->length);
}

tfp_status_t tfp_sf_staged_decode(const uint8_t *buf, size_t len, tfp_sf_staged_t *out,
                                  tfp_err_t *err)
{
    if (len != TFP_SF_STAGED_LEN)
        return tfp_err_set(err, TFP_EBADREQ, "a staged body is %d bytes (lease, offset, "
                           "length), not %zu", TFP_SF_STAGED_LEN, len);
    tfp_sf_staged_t r = {tfp_le64(buf), tfp_le64(buf + 8), tfp_le64(buf + 16)};
    if (r.lease == 0 || r.length == 0 || r.length > TFP_SF_MAX_SIZE ||
        r.offset > TFP_SF_MAX_SIZE - r.length)
        return tfp_err_set(err, TFP_EBADREQ, "a staged body names lease %llu, %llu bytes at "
                           "%llu (a lease, and 1..2^46 bytes inside 2^46)",
                           (unsigned long long)r.lease, (unsigned long long)r.length,
                           (unsigned long long)r.offset);
    *out = r;
    return TFP_OK;
}
