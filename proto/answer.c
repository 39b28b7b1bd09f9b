/* answer.c - the typed answer's table and its renderings (see answer.h). Pure; any thread. */
#include "config.h"
#include "proto/answer.h"
#include "proto/ids.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

const tfp_af_row_t tfp_answer_fields[TFP_AF_COUNT] = {
#define X(id, h, s, uf, shm) [TFP_AF_##id] = {h, s, uf, shm},
    TFP_ANSWER_MAP(X)
#undef X
};

void tfp_answer_set_u64(tfp_answer_t *a, tfp_af_t f, uint64_t v)
{
    if ((unsigned)f >= TFP_AF_COUNT || tfp_answer_fields[f].is_str)
        return;
    a->num[f] = v;
    a->present |= 1u << f;
}

/* Whether v is a valid value of string field f: an ETag is one strong tag, quoted. */
static int str_valid(tfp_af_t f, const char *v)
{
    tfp_etags_t l;
    size_t n = strlen(v);
    (void)f;
    return n >= 2 && n <= TFP_AF_MAX_STR && v[0] == '"' && tfp_etags_parse(v, 0, &l) == 0 &&
           !l.any && l.n + l.foreign == 1;
}

int tfp_answer_set_str(tfp_answer_t *a, tfp_af_t f, const char *v)
{
    if ((unsigned)f >= TFP_AF_COUNT || !tfp_answer_fields[f].is_str || !str_valid(f, v))
        return -1;
    memcpy(a->str, v, strlen(v) + 1);
    a->present |= 1u << f;
    return 0;
}

int tfp_answer_has(const tfp_answer_t *a, tfp_af_t f)
{
    return (unsigned)f < TFP_AF_COUNT && (a->present & (1u << f)) != 0;
}

size_t tfp_answer_header_value(const tfp_answer_t *a, tfp_af_t f, char *buf, size_t size)
{
    if (!tfp_answer_has(a, f) || size == 0)
        return 0;
    int n = tfp_answer_fields[f].is_str ? snprintf(buf, size, "%s", a->str)
                                        : snprintf(buf, size, "%" PRIu64, a->num[f]);
    return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

int tfp_answer_header_parse(tfp_answer_t *a, const char *name, const char *value)
{
    for (unsigned f = 0; f < TFP_AF_COUNT; f++) {
        if (strcasecmp(name, tfp_answer_fields[f].header) != 0)
            continue;
        if (tfp_answer_fields[f].is_str)
            return tfp_answer_set_str(a, (tfp_af_t)f, value) == 0 ? 1 : -1;
        uint64_t v;
        if (tfp_parse_u64(value, UINT64_MAX, &v) != 0)
            return -1;
        tfp_answer_set_u64(a, (tfp_af_t)f, v);
        return 1;
    }
    return 0;
}

/* The feed block's number a present bit names, or NULL. */
static uint64_t *feed_num(tfp_uf_feed_t *f, uint16_t bit)
{
    switch (bit) {
    case TFP_UF_FP_POSITION: return &f->position;
    case TFP_UF_FP_SEQ: return &f->seq;
    case TFP_UF_FP_ROUND: return &f->round;
    case TFP_UF_FP_GENERATION: return &f->generation;
    case TFP_UF_FP_DEVICE: return &f->device;
    case TFP_UF_FP_RETRY_AFTER: return &f->retry_after;
    case TFP_UF_FP_RESUME_AFTER: return &f->resume_after;
    default: return NULL;
    }
}

void tfp_answer_to_feed(const tfp_answer_t *a, tfp_uf_feed_t *f)
{
    for (unsigned i = 0; i < TFP_AF_COUNT; i++) {
        uint16_t bit = tfp_answer_fields[i].uf_present;
        uint64_t *p = feed_num(f, bit);
        if (p && tfp_answer_has(a, (tfp_af_t)i)) {
            *p = a->num[i];
            f->present |= bit;
        }
    }
}

void tfp_answer_from_feed(const tfp_uf_feed_t *f, tfp_answer_t *a)
{
    tfp_uf_feed_t c = *f;
    for (unsigned i = 0; i < TFP_AF_COUNT; i++) {
        uint16_t bit = tfp_answer_fields[i].uf_present;
        uint64_t *p = feed_num(&c, bit);
        if (p && (f->present & bit))
            tfp_answer_set_u64(a, (tfp_af_t)i, *p);
    }
}

void tfp_answer_from_reply(const tfp_uf_hdr_t *h, tfp_answer_t *a)
{
    if (h->flags & TFP_UF_F_FEED)
        tfp_answer_from_feed(&h->feed, a);
    if ((h->flags & TFP_UF_F_COND) && h->cond.etag[0])
        (void)tfp_answer_set_str(a, TFP_AF_ETAG, h->cond.etag);
}

void tfp_answer_from_sf_reply(const tfp_sf_t *m, tfp_answer_t *a)
{
    char etag[TFP_ETAG_LEN];
    tfp_err_t err;
    if (tfp_sf_reply_etag(m, etag, &err) == TFP_OK)
        (void)tfp_answer_set_str(a, TFP_AF_ETAG, etag);
}
