/* shmframe.c - the shm transport's messages (see shmframe.h): one validator shared by the
 * encoder and the decoder, so neither side can produce what the other refuses. Pure; any
 * thread.
 */
#include "config.h"
#include "proto/shmframe.h"

#include <string.h>

#include "proto/upgrade.h"
#include "proto/utf8.h"

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

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
    int req = m->op != TFP_SF_REPLY;
    if (req && m->status != 0)
        return tfp_err_set(err, code, "shm: a request with status %d", (int)m->status);
    switch (m->op) {
    case TFP_SF_HELLO:
        if (n != TFP_UP_TOKEN_LEN || !tfp_up_token_valid(s))
            return tfp_err_set(err, code, "shm: HELLO without a valid token");
        if (m->lease || m->a || m->b)
            return tfp_err_set(err, code, "shm: HELLO with numbers set");
        return TFP_OK;
    case TFP_SF_GET:
        if (!n || n > TFP_MAX_TENSOR_NAME || !tfp_name_valid(s))
            return tfp_err_set(err, code, "shm: GET of an invalid tensor name");
        if (m->lease || m->a || m->b)
            return tfp_err_set(err, code, "shm: GET with numbers set");
        return TFP_OK;
    case TFP_SF_ALLOC:
        if (n || m->lease || m->b)
            return tfp_err_set(err, code, "shm: ALLOC with fields besides its size");
        if (m->a == 0 || m->a > TFP_SF_MAX_SIZE)
            return tfp_err_set(err, code, "shm: ALLOC of %llu bytes",
                               (unsigned long long)m->a);
        return TFP_OK;
    case TFP_SF_COMMIT:
        if (!n || n > TFP_MAX_TENSOR_NAME || !tfp_name_valid(s))
            return tfp_err_set(err, code, "shm: COMMIT to an invalid tensor name");
        if (!m->lease || m->b || m->a == 0 || m->a > TFP_SF_MAX_SIZE)
            return tfp_err_set(err, code, "shm: COMMIT without a lease and a length");
        return TFP_OK;
    case TFP_SF_RELEASE:
        if (n || !m->lease || m->a || m->b)
            return tfp_err_set(err, code, "shm: RELEASE without exactly a lease");
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
    put32(buf, TFP_SF_MAGIC);
    buf[4] = TFP_SF_VERSION;
    buf[5] = (uint8_t)m->op;
    buf[6] = (uint8_t)m->str_len;
    buf[7] = (uint8_t)(m->str_len >> 8);
    put64(buf + 8, m->seq);
    put32(buf + 16, (uint32_t)m->status);
    put64(buf + 24, m->lease);
    put64(buf + 32, m->a);
    put64(buf + 40, m->b);
    memcpy(buf + TFP_SF_FIXED, m->str, m->str_len);
    return len;
}

tfp_status_t tfp_sf_decode(const uint8_t *buf, size_t len, tfp_sf_t *out, tfp_err_t *err)
{
    if (len < TFP_SF_FIXED)
        return tfp_err_set(err, TFP_EPROTO, "shm: a message of %zu bytes", len);
    if (get32(buf) != TFP_SF_MAGIC)
        return tfp_err_set(err, TFP_EPROTO, "shm: bad magic");
    if (buf[4] != TFP_SF_VERSION)
        return tfp_err_set(err, TFP_EPROTO, "shm: version %u", buf[4]);
    if (get32(buf + 20) != 0)
        return tfp_err_set(err, TFP_EPROTO, "shm: reserved bytes set");
    size_t n = (size_t)buf[6] | (size_t)buf[7] << 8;
    if (n > TFP_SF_MAX_STR || len != TFP_SF_FIXED + n)
        return tfp_err_set(err, TFP_EPROTO, "shm: %zu bytes for a string of %zu", len, n);
    if (memchr(buf + TFP_SF_FIXED, 0, n))
        return tfp_err_set(err, TFP_EPROTO, "shm: a NUL in the string");
    tfp_sf_t m;
    m.op = (tfp_sf_op_t)buf[5];
    m.seq = get64(buf + 8);
    m.status = (int32_t)get32(buf + 16);
    m.lease = get64(buf + 24);
    m.a = get64(buf + 32);
    m.b = get64(buf + 40);
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
