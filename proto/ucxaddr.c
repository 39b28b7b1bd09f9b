/* ucxaddr.c - the UCX 1.13 packed worker address walked with its length in hand
 * (ucxaddr.h has the layout). Our own code, written from the layout UCX 1.13's
 * src/ucp/wireup/address.c packs; it refuses whatever that packer never writes. Pure.
 */
#include "proto/ucxaddr.h"

#include <math.h>
#include <string.h>

#define HDR_DEBUG_INFO 0x1u
#define HDR_UUID 0x2u
#define HDR_CLIENT_ID 0x4u
#define HDR_AM_ONLY 0x8u
#define HDR_KNOWN (HDR_DEBUG_INFO | HDR_UUID | HDR_CLIENT_ID | HDR_AM_ONLY)

#define NULL_RESOURCE 0xffu
#define MD_EMPTY_DEV 0x80u
#define MD_ALLOC 0x40u                      /* v1 only, informational */
#define MD_REG 0x20u
#define FLAG_LAST 0x80u
#define DEV_NUM_PATHS 0x40u
#define DEV_SYS_DEVICE 0x20u
#define DEV_LEN_MASK 0x1fu
#define IFACE_HAS_EP 0x40u
#define IFACE_LEN_MASK 0x3fu
#define SYS_DEVICE_UNKNOWN 0xffu

#define V1_ATTR_LEN 16                      /* 3 floats, prio_cap_flags */
#define V2_ATTR_LEN 8                       /* 3 fp8, prio, seg_size, flags */
#define V1_ATOMIC_BITS 0xc0000000u          /* bits 30, 31 */
#define V1_CAP_BITS 0x003fff00u             /* 13 iface flags + 1 event flag from bit 8 */
#define V2_FLAG_BITS 0x03ffu                /* UCP_ADDR_IFACE_FLAG_*: bits 0..9 */

typedef struct {
    const uint8_t *a;
    size_t n, at;
    int version;
    tfp_err_t *err;
} cur_t;

static tfp_status_t bad(cur_t *c, const char *what)
{
    return tfp_err_set(c->err, TFP_EPROTO, "UCX worker address: %s at offset %zu", what, c->at);
}

static int take(cur_t *c, size_t k, const uint8_t **p)
{
    if (c->n - c->at < k)
        return -1;
    *p = c->a + c->at;
    c->at += k;
    return 0;
}

static int byte(cur_t *c, uint8_t *v)
{
    const uint8_t *p;
    if (take(c, 1, &p) != 0)
        return -1;
    *v = *p;
    return 0;
}

/* A value in the low bits of b (mask); in v2 the mask's all-ones means the next byte holds
 * it, and then it must not have fitted (the packer extends only values >= mask). */
static int extended(cur_t *c, uint8_t b, uint8_t mask, uint8_t *v)
{
    *v = b & mask;
    if (c->version == 2 && *v == mask) {
        if (byte(c, v) != 0 || *v < mask)
            return -1;
    }
    return 0;
}

static float get_float(const uint8_t *p)
{
    float f;
    memcpy(&f, p, sizeof f);                /* the packer's byte order: same-arch peers */
    return f;
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint16_t get_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static tfp_status_t header(cur_t *c, unsigned *flags)
{
    const uint8_t *p;
    uint8_t h;

    if (byte(c, &h) != 0)
        return bad(c, "no header");
    if ((h & 0x0f) == 0) {
        c->version = 1;
        *flags = h >> 4;
    } else if (h == 1) {
        c->version = 2;
        uint8_t f;
        if (byte(c, &f) != 0)
            return bad(c, "truncated header");
        *flags = f;
    } else {
        c->at--;
        return bad(c, "not an address version UCX 1.13 writes");
    }
    if (*flags & ~HDR_KNOWN)
        return bad(c, "unknown header flags");
    if ((c->version == 1 || (*flags & HDR_UUID)) && take(c, 8, &p) != 0)
        return bad(c, "truncated worker uuid");
    if ((*flags & HDR_CLIENT_ID) && take(c, 8, &p) != 0)
        return bad(c, "truncated client id");
    if (*flags & HDR_DEBUG_INFO) {
        uint8_t len;
        if (byte(c, &len) != 0 || take(c, len, &p) != 0)
            return bad(c, "truncated worker name");
    }
    return TFP_OK;
}

/* The transport's attributes: values UCX's packer can write and its lane selection can
 * score (finite, non-negative, a positive bandwidth; no flag bits it does not define). */
static tfp_status_t attrs(cur_t *c)
{
    const uint8_t *p;
    if (c->version == 1) {
        if (take(c, V1_ATTR_LEN, &p) != 0)
            return bad(c, "truncated transport attributes");
        float ovh = get_float(p), bw = get_float(p + 4), lat = get_float(p + 8);
        uint32_t pf = get_u32(p + 12);
        if (!isfinite(ovh) || !isfinite(bw) || !isfinite(lat) || ovh < 0 || bw <= 0 ||
            lat < 0)
            return bad(c, "transport attributes out of range");
        if (pf & ~(0xffu | V1_CAP_BITS | V1_ATOMIC_BITS))
            return bad(c, "unknown transport flags");
        return TFP_OK;
    }
    if (take(c, V2_ATTR_LEN, &p) != 0)
        return bad(c, "truncated transport attributes");
    if (p[1] == 0)
        return bad(c, "transport bandwidth zero");
    if (get_u16(p + 6) & ~V2_FLAG_BITS)
        return bad(c, "unknown transport flags");
    return TFP_OK;
}

static tfp_status_t transport(cur_t *c, tfp_ucxaddr_t *o, uint8_t md, uint8_t dev_len,
                              int *last)
{
    const uint8_t *p;
    tfp_status_t st;
    uint8_t b, len;

    if (o->n >= TFP_UCXADDR_MAX_ENTRIES)
        return bad(c, "more than 128 transport entries");
    if (take(c, 2, &p) != 0)
        return bad(c, "truncated transport name checksum");
    tfp_ucxaddr_entry_t *e = &o->e[o->n];
    e->tl_csum = get_u16(p);
    if ((st = attrs(c)) != TFP_OK)
        return st;
    if (byte(c, &b) != 0)
        return bad(c, "truncated interface address length");
    if (b & IFACE_HAS_EP)
        return bad(c, "endpoint addresses in a worker address");
    if (extended(c, b, IFACE_LEN_MASK, &len) != 0)
        return bad(c, "bad interface address length");
    if (take(c, len, &p) != 0)
        return bad(c, "truncated interface address");
    e->md_index = md;
    e->dev_index = (uint8_t)o->ndev;
    e->dev_addr_len = dev_len;
    e->iface_addr_len = len;
    o->n++;
    *last = (b & FLAG_LAST) != 0;
    return TFP_OK;
}

/* One device and its transports; *last set when it is flagged the last. */
static tfp_status_t device(cur_t *c, tfp_ucxaddr_t *o, int *last)
{
    const uint8_t *p;
    uint8_t mb, md, db, len, v;
    tfp_status_t st;

    if (o->ndev >= TFP_UCXADDR_MAX_ENTRIES)
        return bad(c, "more than 128 devices");
    if (byte(c, &mb) != 0)
        return bad(c, "truncated device");
    int empty = (mb & MD_EMPTY_DEV) != 0;
    if (extended(c, mb, c->version == 1 ? 0x1f : 0x7f, &md) != 0)
        return bad(c, "bad memory domain index");
    if (md > TFP_UCXADDR_MAX_MD)
        return bad(c, "memory domain index beyond 63");
    if (byte(c, &db) != 0)
        return bad(c, "truncated device address length");
    *last = (db & FLAG_LAST) != 0;
    if (extended(c, db, DEV_LEN_MASK, &len) != 0)
        return bad(c, "bad device address length");
    if (db & DEV_NUM_PATHS) {
        if (byte(c, &v) != 0 || v < 2)      /* the packer writes it only for 2 or more */
            return bad(c, "bad device path count");
    }
    if (db & DEV_SYS_DEVICE) {
        if (byte(c, &v) != 0 || v == SYS_DEVICE_UNKNOWN)
            return bad(c, "bad system device");
    }
    if (take(c, len, &p) != 0)
        return bad(c, "truncated device address");
    for (int tl_last = empty; !tl_last;)
        if ((st = transport(c, o, md, len, &tl_last)) != TFP_OK)
            return st;
    o->ndev++;
    return TFP_OK;
}

tfp_status_t tfp_ucxaddr_parse(const uint8_t *a, size_t n, tfp_ucxaddr_t *out, tfp_err_t *err)
{
    cur_t c = {.a = a, .n = n, .err = err};
    tfp_ucxaddr_t o;
    tfp_status_t st;
    int last = 0;

    if (a == NULL)
        return tfp_err_set(err, TFP_EINVAL, "UCX worker address: none");
    memset(&o, 0, sizeof o);
    if ((st = header(&c, &o.flags)) != TFP_OK)
        return st;
    o.version = c.version;
    if (c.at < n && a[c.at] == NULL_RESOURCE) {
        c.at++;                             /* no devices at all */
    } else {
        while (!last)
            if ((st = device(&c, &o, &last)) != TFP_OK)
                return st;
    }
    if (c.at != n)
        return bad(&c, "bytes after the last device");
    if (out)
        *out = o;
    return TFP_OK;
}

tfp_status_t tfp_ucxaddr_match(const tfp_ucxaddr_t *remote, const tfp_ucxaddr_t *local,
                               tfp_err_t *err)
{
    for (unsigned i = 0; i < remote->n; i++) {
        const tfp_ucxaddr_entry_t *r = &remote->e[i];
        int known = 0, fits = 0;
        for (unsigned j = 0; j < local->n && !fits; j++) {
            const tfp_ucxaddr_entry_t *l = &local->e[j];
            if (l->tl_csum != r->tl_csum)
                continue;
            known = 1;
            fits = l->dev_addr_len == r->dev_addr_len && l->iface_addr_len == r->iface_addr_len;
        }
        if (known && !fits)
            return tfp_err_set(err, TFP_EPROTO, "UCX worker address: transport 0x%04x with "
                               "%u+%u address bytes, not the sizes our UCX reads",
                               r->tl_csum, r->dev_addr_len, r->iface_addr_len);
    }
    return TFP_OK;
}
