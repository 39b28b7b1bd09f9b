/* protover.c - the protocol version range: parse, format, check (see protover.h).
 *
 * The header value and the environment's planted minimum arrive from outside, so both are
 * parsed strictly here. Pure; any thread.
 */
#include "proto/protover.h"

#include <stdio.h>

tfp_proto_range_t tfp_proto_ours(void)
{
    return (tfp_proto_range_t){TFP_PROTO_MIN, TFP_PROTO_MAX};
}

tfp_proto_range_t tfp_proto_unnamed(void)
{
    return (tfp_proto_range_t){1, 1};
}

int tfp_proto_valid(tfp_proto_range_t r)
{
    return r.min >= 1 && r.min <= r.max && r.max <= TFP_PROTO_LIMIT;
}

/* One version: 1..TFP_PROTO_LIMIT, decimal, no leading zero. Returns the characters taken
 * (0 if none make a version). */
static size_t one_version(const char *s, size_t n, unsigned *out)
{
    size_t i = 0;
    unsigned long v = 0;
    if (n == 0 || s[0] < '1' || s[0] > '9')
        return 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        v = v * 10 + (unsigned long)(s[i] - '0');
        if (v > TFP_PROTO_LIMIT)
            return 0;
        i++;
    }
    *out = (unsigned)v;
    return i;
}

tfp_status_t tfp_proto_parse(const char *s, size_t n, tfp_proto_range_t *out, tfp_err_t *err)
{
    tfp_proto_range_t r;
    if (!s)
        return tfp_err_set(err, TFP_EPROTO, "protocol range: missing");
    size_t a = one_version(s, n, &r.min);
    if (a == 0)
        return tfp_err_set(err, TFP_EPROTO, "protocol range must be MIN-MAX, versions 1 to %u "
                           "without leading zeros", TFP_PROTO_LIMIT);
    r.max = r.min;
    if (a < n) {
        size_t b = s[a] == '-' ? one_version(s + a + 1, n - a - 1, &r.max) : 0;
        if (b == 0 || a + 1 + b != n)
            return tfp_err_set(err, TFP_EPROTO, "protocol range must be MIN-MAX, versions 1 "
                               "to %u without leading zeros", TFP_PROTO_LIMIT);
    }
    if (r.min > r.max)
        return tfp_err_set(err, TFP_EPROTO, "protocol range %u-%u: MIN is above MAX", r.min,
                           r.max);
    *out = r;
    return TFP_OK;
}

tfp_status_t tfp_proto_format(tfp_proto_range_t r, char *buf, size_t size, tfp_err_t *err)
{
    if (!tfp_proto_valid(r) || !buf || size < TFP_PROTO_MAX_TEXT + 1)
        return tfp_err_set(err, TFP_EINVAL, "protocol range: invalid or no room");
    snprintf(buf, size, "%u-%u", r.min, r.max);
    return TFP_OK;
}

tfp_status_t tfp_proto_raise_min(tfp_proto_range_t *ours, const char *s, tfp_err_t *err)
{
    tfp_proto_range_t v;
    size_t n = 0;
    while (s && s[n])
        n++;
    if (!ours || tfp_proto_parse(s, n, &v, NULL) != TFP_OK || v.min != v.max ||
        v.min < ours->min || v.min > ours->max)
        return tfp_err_set(err, TFP_EINVAL, "TFETCH_PROTOCOL_MIN must be one version from %u "
                           "to %u", ours ? ours->min : TFP_PROTO_MIN,
                           ours ? ours->max : TFP_PROTO_MAX);
    ours->min = v.min;
    return TFP_OK;
}

tfp_status_t tfp_proto_check(tfp_proto_range_t mine, tfp_proto_range_t peer, const char *me,
                             const char *peer_name, const char *feature, unsigned *common,
                             tfp_err_t *err)
{
    if (tfp_proto_valid(mine) && tfp_proto_valid(peer) && mine.min <= peer.max &&
        peer.min <= mine.max) {
        if (common)
            *common = mine.max < peer.max ? mine.max : peer.max;
        return TFP_OK;
    }
    const char *older = peer.max < mine.min ? peer_name : me;
    return tfp_err_set(err, TFP_EVERSION, "protocol version mismatch on %s: this %s speaks "
                       "%u..%u, the %s %u..%u; the %s is too old and must be upgraded",
                       feature ? feature : "a request", me, mine.min, mine.max, peer_name,
                       peer.min, peer.max, older);
}
