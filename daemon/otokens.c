/* otokens.c - one-time tokens: a hash table keyed by their SHA-256 (see otokens.h).
 *
 * Entries live in one array of max slots, free ones on a free list; each bucket of the hash
 * table heads a chain of slots through next. The bucket of a token is the first bytes of its
 * SHA-256, so the tokens a lookup meets are those whose hash shares those bits with the
 * presented one's, and each is compared by its whole hash in constant time.
 */
#include "config.h"
#include "daemon/otokens.h"
#include "proto/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

typedef struct {
    uint8_t hash[TFP_AUTH_HASH_LEN];
    uint64_t expires_ms;
    char owner[TFD_OTOK_MAX_OWNER];
    int32_t next;                   /* the bucket's chain, or the free list; -1: end */
    int live;
} slot_t;

struct tfd_otokens {
    size_t max, payload_size, per_owner;
    slot_t *slots;
    uint8_t *payloads;              /* max * payload_size */
    int32_t *buckets;               /* nbuckets heads, -1: empty */
    size_t nbuckets;                /* a power of two, at least max */
    int32_t free_head;
    size_t live;
};

tfd_otokens_t *tfd_otokens_new(size_t max, size_t payload_size, size_t per_owner)
{
    if (max == 0 || max > INT32_MAX / 2)
        return NULL;
    tfd_otokens_t *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->max = max;
    t->payload_size = payload_size ? payload_size : 1;
    t->per_owner = per_owner;
    t->nbuckets = 16;
    while (t->nbuckets < max)
        t->nbuckets *= 2;
    t->slots = calloc(max, sizeof *t->slots);
    t->payloads = calloc(max, t->payload_size);
    t->buckets = malloc(t->nbuckets * sizeof *t->buckets);
    if (!t->slots || !t->payloads || !t->buckets) {
        tfd_otokens_free(t);
        return NULL;
    }
    for (size_t i = 0; i < t->nbuckets; i++)
        t->buckets[i] = -1;
    for (size_t i = 0; i < max; i++)
        t->slots[i].next = i + 1 < max ? (int32_t)(i + 1) : -1;
    t->free_head = 0;
    return t;
}

void tfd_otokens_free(tfd_otokens_t *t)
{
    if (!t)
        return;
    if (t->payloads)                /* who asked, what for: not left in freed memory */
        memset(t->payloads, 0, t->max * t->payload_size);
    free(t->slots);
    free(t->payloads);
    free(t->buckets);
    free(t);
}

void tfd_otokens_set_quota(tfd_otokens_t *t, size_t per_owner) { t->per_owner = per_owner; }
size_t tfd_otokens_quota(const tfd_otokens_t *t) { return t->per_owner; }

static size_t bucket_of(const tfd_otokens_t *t, const uint8_t hash[TFP_AUTH_HASH_LEN])
{
    uint32_t k = (uint32_t)hash[0] | (uint32_t)hash[1] << 8 | (uint32_t)hash[2] << 16 |
                 (uint32_t)hash[3] << 24;
    return k & (t->nbuckets - 1);
}

/* Unlinks live slot i from its bucket and puts it on the free list. */
static void drop(tfd_otokens_t *t, int32_t i)
{
    slot_t *s = &t->slots[i];
    int32_t *link = &t->buckets[bucket_of(t, s->hash)];
    while (*link != i)
        link = &t->slots[*link].next;
    *link = s->next;
    memset(s, 0, sizeof *s);
    memset(t->payloads + (size_t)i * t->payload_size, 0, t->payload_size);
    s->next = t->free_head;
    t->free_head = i;
    t->live--;
}

/* Drops every expired token. */
static void sweep(tfd_otokens_t *t, uint64_t now_ms)
{
    for (size_t i = 0; i < t->max && t->live; i++)
        if (t->slots[i].live && t->slots[i].expires_ms <= now_ms)
            drop(t, (int32_t)i);
}

static int same_owner(const slot_t *s, const char *owner)
{
    return strncmp(s->owner, owner, sizeof s->owner - 1) == 0;
}

/* How many live tokens owner holds, and when its first expires (UINT64_MAX: none). */
static size_t owned(const tfd_otokens_t *t, const char *owner, uint64_t *first)
{
    size_t n = 0;
    *first = UINT64_MAX;
    for (size_t i = 0; i < t->max; i++) {
        const slot_t *s = &t->slots[i];
        if (s->live && (!owner || same_owner(s, owner))) {
            n++;
            if (s->expires_ms < *first)
                *first = s->expires_ms;
        }
    }
    return n;
}

static uint64_t wait_ms(uint64_t until, uint64_t now_ms)
{
    return until > now_ms ? until - now_ms : 1;
}

tfd_otok_result_t tfd_otokens_issue(tfd_otokens_t *t, const char *owner, const void *payload,
                                    uint64_t now_ms, uint64_t ttl_ms,
                                    char token[TFP_UP_TOKEN_LEN + 1], uint64_t *retry_ms)
{
    uint64_t first, dummy;
    uint64_t *retry = retry_ms ? retry_ms : &dummy;
    sweep(t, now_ms);
    if (t->per_owner && owned(t, owner, &first) >= t->per_owner) {
        *retry = wait_ms(first, now_ms);
        return TFD_OTOK_QUOTA;
    }
    if (t->free_head < 0) {
        (void)owned(t, NULL, &first);
        *retry = wait_ms(first, now_ms);
        return TFD_OTOK_FULL;
    }
    uint8_t rnd[TFP_UP_TOKEN_LEN / 2];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return TFD_OTOK_NORANDOM;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof rnd; i++) {
        token[2 * i] = hex[rnd[i] >> 4];
        token[2 * i + 1] = hex[rnd[i] & 15];
    }
    token[TFP_UP_TOKEN_LEN] = '\0';
    int32_t i = t->free_head;
    slot_t *s = &t->slots[i];
    t->free_head = s->next;
    tfp_auth_hash(token, TFP_UP_TOKEN_LEN, s->hash);
    s->expires_ms = now_ms + ttl_ms;
    snprintf(s->owner, sizeof s->owner, "%s", owner);
    s->live = 1;
    memcpy(t->payloads + (size_t)i * t->payload_size, payload, t->payload_size);
    size_t b = bucket_of(t, s->hash);
    s->next = t->buckets[b];
    t->buckets[b] = i;
    t->live++;
    return TFD_OTOK_OK;
}

void *tfd_otokens_find(tfd_otokens_t *t, const char *token, uint64_t now_ms)
{
    uint8_t h[TFP_AUTH_HASH_LEN];
    tfp_auth_hash(token, strlen(token), h);
    int32_t i = t->buckets[bucket_of(t, h)];
    while (i >= 0) {
        slot_t *s = &t->slots[i];
        int32_t next = s->next;
        if (tfp_auth_equal(s->hash, h, sizeof h)) {
            if (s->expires_ms <= now_ms) {
                drop(t, i);
                return NULL;
            }
            return t->payloads + (size_t)i * t->payload_size;
        }
        i = next;
    }
    return NULL;
}

static int32_t index_of(const tfd_otokens_t *t, const void *payload)
{
    return (int32_t)(((const uint8_t *)payload - t->payloads) / (ptrdiff_t)t->payload_size);
}

const char *tfd_otokens_owner(const tfd_otokens_t *t, const void *payload)
{
    return t->slots[index_of(t, payload)].owner;
}

void tfd_otokens_take(tfd_otokens_t *t, void *payload)
{
    drop(t, index_of(t, payload));
}

size_t tfd_otokens_count(tfd_otokens_t *t, const char *owner, uint64_t now_ms)
{
    uint64_t first;
    sweep(t, now_ms);
    return owned(t, owner, &first);
}
