/* check_store.c - the store suite: the daemon's named-tensor store (daemon/store.c):
 * references, limits, reservations, atomic replace, and walking it in name order.
 *
 * Single-threaded; owns only what each test allocates.
 */
#include "config.h"
#include "tests/suites.h"
#include "daemon/api.h"
#include "daemon/replay.h"
#include "daemon/store.h"
#include "proto/safetensors.h"
#include "transports/buf.h"
#include "transports/clock.h"
#include "transports/shm.h"

#include <sys/mman.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A blob holding one U8 tensor of n bytes filled with v. */
static tfd_blob_t *make_blob(const char *name, size_t n, uint8_t v)
{
    tfp_doc_t *doc = tfp_doc_new();
    uint8_t *data = malloc(n ? n : 1);
    memset(data, v, n);
    uint64_t shape[1] = {n};
    tfp_err_t err;
    ck_assert_int_eq(tfp_doc_add(doc, name, TFP_U8, 1, shape, data, n, &err), TFP_OK);
    uint8_t *enc;
    size_t len;
    ck_assert_int_eq(tfp_st_encode(doc, &enc, &len, &err), TFP_OK);
    tfp_doc_free(doc);
    free(data);
    size_t cap;
    uint8_t *buf = tfx_buf_alloc(len, &cap);
    memcpy(buf, enc, len);
    free(enc);
    tfp_doc_t *idx;
    ck_assert_int_eq(tfp_st_decode(buf, len, NULL, &idx, &err), TFP_OK);
    tfd_blob_t *b = tfd_blob_new(buf, cap, buf, len, idx);
    ck_assert_ptr_nonnull(b);
    return b;
}

START_TEST(store_put_get_replace_delete)
{
    tfd_store_t *s = tfd_store_new(1 << 20);
    tfd_blob_t *a = make_blob("w", 100, 1);
    size_t alen = a->len;
    ck_assert_int_eq(tfd_store_put(s, "w", a, 0), 0);
    tfd_blob_t *got = tfd_store_get(s, "w");
    ck_assert_ptr_eq(got, a);
    /* Replace while a reader holds the old one: the reader keeps intact bytes, and they stay
     * counted (retired) until it lets go. */
    tfd_blob_t *b = make_blob("w", 50, 2);
    size_t blen = b->len;
    ck_assert_int_eq(tfd_store_put(s, "w", b, 0), 1);
    ck_assert_uint_eq(got->len, alen);
    ck_assert_uint_eq(got->doc->t[0].data[99], 1);
    tfd_store_stats_t st;
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.bytes, blen);
    ck_assert_uint_eq(st.retired, alen);
    tfd_blob_unref(got);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.retired, 0);
    got = tfd_store_get(s, "w");
    ck_assert_uint_eq(got->doc->t[0].nbytes, 50);
    ck_assert_uint_eq(got->doc->t[0].data[0], 2);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.count, 1);
    ck_assert_uint_eq(st.bytes, got->len);
    /* Delete while read: retired until released. */
    ck_assert_int_eq(tfd_store_delete(s, "w"), 0);
    ck_assert_int_eq(tfd_store_delete(s, "w"), -1);
    ck_assert_ptr_null(tfd_store_get(s, "w"));
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.count, 0);
    ck_assert_uint_eq(st.bytes, 0);
    ck_assert_uint_eq(st.retired, blen);
    tfd_blob_unref(got);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.retired, 0);
    tfd_store_free(s);
}
END_TEST

/* Conditional put and delete: a compare-and-swap on the stored version. */
START_TEST(store_conditions)
{
    tfd_store_t *s = tfd_store_new(1 << 20);
    uint64_t v1 = 0, v2 = 0, v3 = 0;
    tfd_store_cond_t absent = {.absent = 1}, present = {.present = 1};
    tfd_blob_t *a = make_blob("w", 10, 1);
    ck_assert_int_eq(tfd_store_put_if(s, "w", a, 0, &present, NULL), -2);   /* not there */
    ck_assert_int_eq(tfd_store_put_if(s, "w", a, 0, &absent, &v1), 0);
    tfd_blob_t *b = make_blob("w", 10, 2);
    ck_assert_int_eq(tfd_store_put_if(s, "w", b, 0, &absent, NULL), -2);    /* create-only */
    uint64_t stale = v1 + 100;
    tfd_store_cond_t old = {.versions = &stale, .n = 1};
    ck_assert_int_eq(tfd_store_put_if(s, "w", b, 0, &old, NULL), -2);
    tfd_store_cond_t cur = {.versions = &v1, .n = 1};
    ck_assert_int_eq(tfd_store_put_if(s, "w", b, 0, &cur, &v2), 1);        /* the swap */
    ck_assert_uint_gt(v2, v1);
    tfd_blob_t *c = make_blob("w", 10, 3);
    ck_assert_int_eq(tfd_store_put_if(s, "w", c, 0, &cur, NULL), -2);      /* v1 is gone */
    tfd_store_cond_t none_of = {.not_versions = &v2, .n_not = 1};
    ck_assert_int_eq(tfd_store_put_if(s, "w", c, 0, &none_of, NULL), -2);
    ck_assert_int_eq(tfd_store_put_if(s, "w", c, 0, NULL, &v3), 1);
    tfd_blob_t *got = tfd_store_get(s, "w");
    ck_assert_uint_eq(got->version, v3);
    ck_assert_uint_eq(got->doc->t[0].data[0], 3);
    tfd_blob_unref(got);
    ck_assert_int_eq(tfd_store_delete_if(s, "w", &cur), -2);
    tfd_store_cond_t now = {.versions = &v3, .n = 1};
    ck_assert_int_eq(tfd_store_delete_if(s, "w", &now), 0);
    ck_assert_int_eq(tfd_store_delete_if(s, "w", &now), -2);                /* If-Match, gone */
    ck_assert_int_eq(tfd_store_delete_if(s, "w", NULL), -1);
    tfd_store_t *s2 = tfd_store_new(1);     /* a new start: another epoch (random 64 bits) */
    ck_assert(tfd_store_epoch(s) != tfd_store_epoch(s2));
    tfd_store_free(s2);
    tfd_store_free(s);
}
END_TEST

/* TTLs: an expired document is absent to every reader at once, and the sweep frees it. */
START_TEST(store_ttl)
{
    tfd_store_t *s = tfd_store_new(1 << 20);
    tfd_blob_t *a = make_blob("a", 10, 1), *b = make_blob("b", 10, 2);
    a->expires_ms = tfx_now_ms() + 60;
    ck_assert_int_eq(tfd_store_put(s, "a", a, 0), 0);
    ck_assert_int_eq(tfd_store_put(s, "b", b, 0), 0);
    tfd_blob_t *got = tfd_store_get(s, "a");
    ck_assert_ptr_nonnull(got);
    tfd_blob_unref(got);
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
    ck_assert_ptr_null(tfd_store_get(s, "a"));             /* gone on read */
    ck_assert_int_eq(tfd_store_delete(s, "a"), -1);
    tfd_store_stats_t st;
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.expirations, 1);
    ck_assert_uint_eq(st.count, 1);
    /* the sweep drops the ones nobody asked for */
    tfd_blob_t *c = make_blob("c", 10, 3);
    c->expires_ms = tfx_now_ms() + 1;
    ck_assert_int_eq(tfd_store_put(s, "c", c, 0), 0);
    nanosleep(&ts, NULL);
    ck_assert_uint_eq(tfd_store_sweep(s), 1);
    ck_assert_uint_eq(tfd_store_sweep(s), 0);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.expirations, 2);
    ck_assert_uint_eq(st.count, 1);
    ck_assert_ptr_nonnull((got = tfd_store_get(s, "b")));
    tfd_blob_unref(got);
    tfd_store_free(s);
}
END_TEST

/* evict lru: the least recently used document nobody holds makes room; a read one is kept;
 * when dropping all that can be dropped would not be enough, nothing is dropped. */
START_TEST(store_evict_lru)
{
    tfd_blob_t *probe = make_blob("p", 1000, 0);
    size_t one = probe->len;
    tfd_blob_unref(probe);
    tfd_store_t *s = tfd_store_new(3 * one);
    ck_assert_int_eq(tfd_store_put(s, "a", make_blob("a", 1000, 1), 0), 0);
    ck_assert_int_eq(tfd_store_put(s, "b", make_blob("b", 1000, 2), 0), 0);
    ck_assert_int_eq(tfd_store_put(s, "c", make_blob("c", 1000, 3), 0), 0);
    ck_assert_int_eq(tfd_store_reserve(s, one), -1);           /* off: 507 as before */
    tfd_store_set_evict_lru(s, 1);
    tfd_blob_unref(tfd_store_get(s, "a"));                     /* a is now newer than b */
    tfd_blob_t *held = tfd_store_get(s, "b");                  /* b is being read */
    ck_assert_int_eq(tfd_store_reserve(s, one), 0);            /* drops c, the LRU unheld */
    ck_assert_ptr_null(tfd_store_get(s, "c"));
    tfd_store_stats_t st;
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert_int_eq(tfd_store_put(s, "d", make_blob("d", 1000, 4), one), 0);
    tfd_blob_t *held_d = tfd_store_get(s, "d");
    /* 2 more would need b or d, which are held: refused, and nothing is dropped for it */
    ck_assert_int_eq(tfd_store_reserve(s, 2 * one), -1);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert_uint_eq(st.count, 3);
    tfd_blob_unref(held);
    ck_assert_int_eq(tfd_store_reserve(s, 2 * one), 0);        /* now a and b go */
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.evictions, 3);
    tfd_blob_t *d = tfd_store_get(s, "d");                     /* the held one stays */
    ck_assert_ptr_eq(d, held_d);
    tfd_blob_unref(d);
    tfd_blob_unref(held_d);
    tfd_store_unreserve(s, 2 * one);
    tfd_store_free(s);
}
END_TEST

START_TEST(store_limits_and_reservations)
{
    tfd_store_t *s = tfd_store_new(1000);
    ck_assert_int_eq(tfd_store_reserve(s, 600), 0);
    ck_assert_int_eq(tfd_store_reserve(s, 600), -1);          /* 1200 > 1000 */
    tfd_blob_t *a = make_blob("a", 400, 1);
    uint64_t alen = a->len;
    ck_assert_int_eq(tfd_store_put(s, "a", a, 600), 0);
    tfd_store_stats_t st;
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.reserved, 0);
    ck_assert_uint_eq(st.bytes, alen);
    /* Replacing "a" needs room for both while the upload runs. */
    ck_assert_int_eq(tfd_store_reserve(s, 1000 - alen), 0);
    ck_assert_int_eq(tfd_store_reserve(s, 1), -1);
    tfd_store_unreserve(s, 1000 - alen);
    /* A put over the limit leaves the store unchanged and the blob with the caller. */
    tfd_blob_t *big = make_blob("b", 900, 3);
    ck_assert_int_eq(tfd_store_put(s, "b", big, 0), -1);
    tfd_blob_unref(big);
    ck_assert_ptr_null(tfd_store_get(s, "b"));
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.count, 1);
    ck_assert_uint_eq(st.bytes, alen);
    tfd_store_free(s);
}
END_TEST

static void collect(const char *name, const tfd_blob_t *b, void *arg)
{
    char *out = arg;
    strcat(out, name);
    strcat(out, ",");
    (void)b;
}

START_TEST(store_each_in_name_order)
{
    tfd_store_t *s = tfd_store_new(1 << 20);
    ck_assert_int_eq(tfd_store_put(s, "zeta", make_blob("zeta", 1, 0), 0), 0);
    ck_assert_int_eq(tfd_store_put(s, "alpha", make_blob("alpha", 1, 0), 0), 0);
    ck_assert_int_eq(tfd_store_put(s, "mid", make_blob("mid", 1, 0), 0), 0);
    char out[64] = "";
    tfd_store_each(s, collect, out);
    ck_assert_str_eq(out, "alpha,mid,zeta,");
    tfd_store_free(s);
}
END_TEST

/* Sharing a stored document with a same-host peer (tfd_blob_share): large ones move into a
 * memfd of their own, in place; small ones are copied once into a sealed memfd. The peer's mapping is
 * read-only for good, and a replace or delete never changes the bytes it sees. */
static void share_case(size_t n)
{
    tfd_store_t *s = tfd_store_new((uint64_t)64 << 20);
    tfd_blob_t *a = make_blob("w", n, 7);
    ck_assert_int_eq(tfd_store_put(s, "w", a, 0), 0);
    tfd_blob_t *got = tfd_store_get(s, "w");
    int fd, fd2;
    size_t off, size, off2, size2;
    ck_assert_int_eq(tfd_blob_share(got, &fd, &off, &size), 0);
    ck_assert_int_eq(tfd_blob_share(got, &fd2, &off2, &size2), 0);       /* once */
    ck_assert_int_eq(fd, fd2);
    ck_assert_uint_eq(off, off2);
    ck_assert_uint_ge(size, off + got->len);
    tfp_err_t err;
    ck_assert_int_eq(tfx_shm_check(fd, off + got->len, TFX_SHM_SEAL_WRITE, NULL, &err), TFP_OK);
    ck_assert(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
    tfx_shm_t peer;
    ck_assert_int_eq(tfx_shm_map(dup(fd), size, 0, &peer, &err), TFP_OK);
    ck_assert_int_ne(mprotect(peer.p, size, PROT_READ | PROT_WRITE), 0);
    const uint8_t *seen = peer.p + off;
    ck_assert_int_eq(memcmp(seen, got->data, got->len), 0);
    size_t len = got->len;
    /* The daemon's own readers still read the blob where it was. */
    ck_assert_uint_eq(got->doc->t[0].data[n - 1], 7);
    tfd_blob_t *b = make_blob("w", n, 9);
    ck_assert_int_eq(tfd_store_put(s, "w", b, 0), 1);
    ck_assert_int_eq(tfd_store_delete(s, "w"), 0);
    tfd_blob_unref(got);                    /* the last reference: its memfd closed */
    tfd_store_stats_t st;
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.retired, 0);
    /* The peer's mapping lives on, unchanged. */
    tfp_doc_t *idx;
    ck_assert_int_eq(tfp_st_decode(seen, len, NULL, &idx, &err), TFP_OK);
    ck_assert_uint_eq(idx->t[0].nbytes, n);
    ck_assert_uint_eq(idx->t[0].data[0], 7);
    ck_assert_uint_eq(idx->t[0].data[n - 1], 7);
    tfp_doc_free(idx);
    tfx_shm_close(&peer);
    tfd_store_free(s);
}

START_TEST(store_share)
{
    share_case(100);                        /* small: copied into its own memfd */
    share_case((size_t)3 << 20);            /* large: moved into a memfd, in place */
}
END_TEST

/* What a same-host share costs the store (tfd_store_share): a small document's copy is
 * reserved first (refused over the limit: the peer falls back to UCX or HTTP), then counted
 * with the document, stored or retired, until the blob goes; a large one moves into its memfd
 * in place and is counted once. */
START_TEST(store_share_counted)
{
    tfd_blob_t *a = make_blob("w", 1000, 7);
    uint64_t len = a->len;
    tfd_store_t *s = tfd_store_new(len + len / 2);     /* the document, not its copy */
    ck_assert_int_eq(tfd_store_put(s, "w", a, 0), 0);
    tfd_blob_t *got = tfd_store_get(s, "w");
    int fd, fd2;
    size_t off, size;
    tfd_store_stats_t st;
    ck_assert_int_eq(tfd_store_share(s, got, &fd, &off, &size), -2);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.bytes, len);
    ck_assert_uint_eq(st.reserved, 0);
    tfd_store_set_max(s, 2 * len);
    ck_assert_int_eq(tfd_store_share(s, got, &fd, &off, &size), 0);
    ck_assert_int_eq(tfd_store_share(s, got, &fd2, &off, &size), 0);     /* one copy */
    ck_assert_int_eq(fd, fd2);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.bytes, 2 * len);
    ck_assert_uint_eq(st.reserved, 0);
    ck_assert_int_eq(tfd_store_reserve(s, 1), -1);             /* the copy filled it */
    ck_assert_int_eq(tfd_store_delete(s, "w"), 0);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.bytes, 0);
    ck_assert_uint_eq(st.retired, 2 * len);                     /* the reader holds both */
    tfd_blob_unref(got);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.retired, 0);
    /* Retired first, shared after: counted as retired. */
    ck_assert_int_eq(tfd_store_put(s, "w", make_blob("w", 1000, 8), 0), 0);
    got = tfd_store_get(s, "w");
    ck_assert_int_eq(tfd_store_delete(s, "w"), 0);
    ck_assert_int_eq(tfd_store_share(s, got, &fd, &off, &size), 0);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.bytes, 0);
    ck_assert_uint_eq(st.retired, 2 * len);
    tfd_blob_unref(got);
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.retired, 0);
    /* A large one is its own memfd from then on: nothing more to count. */
    tfd_store_set_max(s, (uint64_t)8 << 20);
    tfd_blob_t *big = make_blob("b", (size_t)3 << 20, 1);
    uint64_t blen = big->len;
    ck_assert_int_eq(tfd_store_put(s, "b", big, 0), 0);
    got = tfd_store_get(s, "b");
    ck_assert_int_eq(tfd_store_share(s, got, &fd, &off, &size), 0);
    ck_assert_int_eq(fd, tfx_buf_fd(got->base));
    tfd_store_stats(s, &st);
    ck_assert_uint_eq(st.bytes, blen);
    tfd_blob_unref(got);
    tfd_store_free(s);
}
END_TEST

/* api_encode_blob's index (built from the doc, not parsed back) is the doc a decode of the
 * blob's bytes gives: names, dtypes, shapes, offsets, data pointers and metadata, in order. */
START_TEST(store_encode_blob_index)
{
    tfp_doc_t *doc = tfp_doc_new();
    tfp_err_t err;
    uint8_t a[6] = {1, 2, 3, 4, 5, 6}, b[8] = {9, 8, 7, 6, 5, 4, 3, 2};
    uint64_t sa[2] = {2, 3}, sb[1] = {2}, sz[3] = {4, 0, 2};
    ck_assert_int_eq(tfp_doc_set_meta(doc, "format", "pt", &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_add(doc, "zeta", TFP_U8, 2, sa, a, 6, &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_add(doc, "empty", TFP_F32, 3, sz, NULL, 0, &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_add(doc, "alpha", TFP_F32, 1, sb, b, 8, &err), TFP_OK);
    ck_assert_int_eq(tfp_doc_set_meta(doc, "a-key", "v\"q", &err), TFP_OK);
    tfd_blob_t *bl = api_encode_blob(doc, &err);
    ck_assert_ptr_nonnull(bl);
    tfp_doc_t *dec = NULL;
    ck_assert_int_eq(tfp_st_decode(bl->data, bl->len, NULL, &dec, &err), TFP_OK);
    const tfp_doc_t *ix = bl->doc;
    ck_assert_uint_eq(ix->n, dec->n);
    ck_assert_uint_eq(ix->nmeta, dec->nmeta);
    for (size_t i = 0; i < dec->n; i++) {
        ck_assert_str_eq(ix->t[i].name, dec->t[i].name);
        ck_assert_int_eq(ix->t[i].dtype, dec->t[i].dtype);
        ck_assert_int_eq(ix->t[i].rank, dec->t[i].rank);
        ck_assert_mem_eq(ix->t[i].shape, dec->t[i].shape, sizeof dec->t[i].shape);
        ck_assert_uint_eq(ix->t[i].offset, dec->t[i].offset);
        ck_assert_uint_eq(ix->t[i].nbytes, dec->t[i].nbytes);
        ck_assert_ptr_eq(ix->t[i].data, dec->t[i].data);
    }
    for (size_t i = 0; i < dec->nmeta; i++) {
        ck_assert_str_eq(ix->meta[i].key, dec->meta[i].key);
        ck_assert_str_eq(ix->meta[i].value, dec->meta[i].value);
    }
    ck_assert_mem_eq(tfp_doc_find(ix, "alpha")->data, b, 8);
    tfp_doc_free(dec);
    tfd_blob_release(bl);
    tfp_doc_free(doc);
}
END_TEST

/* ---- the replay window (daemon/replay.c) ------------------------------------------------- */

static tfd_replay_t *replay_new(unsigned window_s, unsigned entries, uint64_t bytes)
{
    tfd_replay_limits_t lim = {window_s, entries, bytes};
    tfd_replay_t *r = tfd_replay_new(&lim);
    ck_assert_ptr_nonnull(r);
    return r;
}

/* Runs (user, id) on route to completion with answer a: it was new. */
static void replay_run(tfd_replay_t *r, const char *user, const char *id, const char *route,
                       const tfd_replay_answer_t *a)
{
    tfd_replay_answer_t got;
    ck_assert_int_eq(tfd_replay_begin(r, user, id, route, 0, NULL, &got), TFD_REPLAY_NEW);
    tfd_replay_complete(r, user, id, route, a);
}

/* Small answers are kept as bytes and made into a blob again on a retry: the same bytes, and
 * the same index (Accept: JSON and raw answers are made from it); large ones are kept as the
 * blob itself. Failures keep their code and message; an answer without an index (Shumai's
 * format) comes back without one. */
START_TEST(replay_answers_come_back_the_same)
{
    tfd_replay_t *r = replay_new(60, 16, 1 << 20);
    tfd_blob_t *small = make_blob("x", 8, 7), *large = make_blob("y", 64 << 10, 9);
    tfp_err_t err;
    tfd_blob_t *raw = tfd_blob_copy((const uint8_t *)"\x01\x02\x03", 3, 0, &err);
    ck_assert_ptr_nonnull(raw);
    tfd_replay_answer_t a = {.status = 200, .code = TFP_OK, .content_type = "application/x-safetensors"};
    a.body = small;
    replay_run(r, "u", "1", "echo", &a);
    a.body = large;
    replay_run(r, "u", "2", "echo", &a);
    a.body = raw;
    snprintf(a.content_type, sizeof a.content_type, "application/octet-stream");
    replay_run(r, "u", "3", "echo", &a);
    tfd_replay_answer_t f = {.status = 409, .code = TFP_ECONFLICT};
    snprintf(f.msg, sizeof f.msg, "the route said no");
    replay_run(r, "u", "4", "echo", &f);

    tfd_replay_answer_t got;
    ck_assert_int_eq(tfd_replay_begin(r, "u", "1", "echo", 0, NULL, &got), TFD_REPLAY_DONE);
    ck_assert_int_eq(got.code, TFP_OK);
    ck_assert_uint_eq(got.status, 200);
    ck_assert_str_eq(got.content_type, "application/x-safetensors");
    ck_assert_ptr_nonnull(got.body);
    ck_assert_ptr_ne(got.body, small);                 /* made again from the kept bytes */
    ck_assert_uint_eq(got.body->len, small->len);
    ck_assert_mem_eq(got.body->data, small->data, small->len);
    ck_assert_ptr_nonnull(got.body->doc);
    const tfp_tensor_t *t = tfp_doc_find(got.body->doc, "x");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->nbytes, 8);
    ck_assert_uint_eq(((const uint8_t *)t->data)[7], 7);
    ck_assert_ptr_eq(t->data, got.body->data + (small->len - 8));  /* into the new blob */
    tfd_blob_unref(got.body);

    ck_assert_int_eq(tfd_replay_begin(r, "u", "2", "echo", 0, NULL, &got), TFD_REPLAY_DONE);
    ck_assert_ptr_eq(got.body, large);                 /* kept as it was */
    tfd_blob_unref(got.body);

    ck_assert_int_eq(tfd_replay_begin(r, "u", "3", "echo", 0, NULL, &got), TFD_REPLAY_DONE);
    ck_assert_str_eq(got.content_type, "application/octet-stream");
    ck_assert_uint_eq(got.body->len, 3);
    ck_assert_mem_eq(got.body->data, "\x01\x02\x03", 3);
    ck_assert_ptr_null(got.body->doc);
    tfd_blob_unref(got.body);

    ck_assert_int_eq(tfd_replay_begin(r, "u", "4", "echo", 0, NULL, &got), TFD_REPLAY_DONE);
    ck_assert_int_eq(got.code, TFP_ECONFLICT);
    ck_assert_uint_eq(got.status, 409);
    ck_assert_str_eq(got.msg, "the route said no");
    ck_assert_ptr_null(got.body);

    /* Another route with the same id, and the same id of another user. */
    ck_assert_int_eq(tfd_replay_begin(r, "u", "1", "other", 0, NULL, &got), TFD_REPLAY_CONFLICT);
    ck_assert_int_eq(tfd_replay_begin(r, "v", "1", "echo", 0, NULL, &got), TFD_REPLAY_NEW);
    tfd_replay_abandon(r, "v", "1");
    ck_assert_int_eq(tfd_replay_begin(r, "v", "1", "echo", 0, NULL, &got), TFD_REPLAY_NEW);
    tfd_replay_abandon(r, "v", "1");
    /* The same id and route with another body: refused, finished or still running; the
     * digest is keyed (two windows digest the same bytes differently) and covers every
     * byte. */
    ck_assert_int_eq(tfd_replay_begin(r, "u", "1", "echo", 1, NULL, &got), TFD_REPLAY_MISMATCH);
    ck_assert_uint_ne(tfd_replay_digest(r, "abc", 3), tfd_replay_digest(r, "abd", 3));
    ck_assert_uint_eq(tfd_replay_digest(r, "abc", 3), tfd_replay_digest(r, "abc", 3));
    ck_assert_int_eq(tfd_replay_begin(r, "u", "run", "echo", 7, NULL, &got), TFD_REPLAY_NEW);
    ck_assert_int_eq(tfd_replay_begin(r, "u", "run", "echo", 8, NULL, &got), TFD_REPLAY_MISMATCH);
    tfd_replay_abandon(r, "u", "run");

    uint64_t entries, bytes, hits;
    tfd_replay_stats(r, &entries, &bytes, &hits);
    ck_assert_uint_eq(entries, 4);
    ck_assert_uint_eq(bytes, small->len + large->len + 3 + strlen("the route said no"));
    ck_assert_uint_eq(hits, 4);
    tfd_blob_unref(small);
    tfd_blob_unref(large);
    tfd_blob_unref(raw);
    tfd_replay_free(r);                                /* holds the large blob until here */
}
END_TEST

/* Keys are kept whole, never cut (two cut keys could be one): state keys of the longest kind
 * that differ in their last byte are two calls; a key longer than any the daemon makes runs
 * without retry protection. */
START_TEST(replay_long_keys_run_without)
{
    tfd_replay_t *r = replay_new(60, 16, 1 << 20);
    char user[2 * (TFP_MAX_USER_ID + 1)], id[TFP_MAX_REQUEST_ID + 1], huge[1024];
    memset(user, 'u', sizeof user - 1);
    user[sizeof user - 1] = '\0';
    memset(id, 'i', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    tfd_replay_answer_t a = {.status = 200, .code = TFP_OK}, got;
    tfd_blob_t *b = make_blob("x", 8, 1);
    a.body = b;
    replay_run(r, user, id, "echo", &a);
    user[sizeof user - 2] = 'X';
    ck_assert_int_eq(tfd_replay_begin(r, user, id, "echo", 0, NULL, &got), TFD_REPLAY_NEW);
    tfd_replay_abandon(r, user, id);
    user[sizeof user - 2] = 'u';
    ck_assert_int_eq(tfd_replay_begin(r, user, id, "echo", 0, NULL, &got), TFD_REPLAY_DONE);
    tfd_blob_unref(got.body);
    memset(huge, 'h', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    ck_assert_int_eq(tfd_replay_begin(r, huge, id, "echo", 0, NULL, &got), TFD_REPLAY_FULL);
    tfd_replay_complete(r, huge, id, "echo", &a);             /* nothing to complete: no effect */
    tfd_replay_abandon(r, huge, id);
    uint64_t entries, bytes, hits;
    tfd_replay_stats(r, &entries, &bytes, &hits);
    ck_assert_uint_eq(entries, 1);
    tfd_blob_unref(b);
    tfd_replay_free(r);
}
END_TEST

/* The window forgets finished answers older than window_s, keeps newer ones and every call
 * still running, and the entry and byte bounds forget the oldest finished first. */
START_TEST(replay_window_and_bounds)
{
    /* Times are whole seconds: with a 2 s window, "new" (added just before the sweep) is
     * kept even when a second begins between the two, and "old", 2.1 s older, is not. */
    tfd_replay_t *r = replay_new(2, 3, 1 << 20);
    tfd_replay_answer_t a = {.status = 200, .code = TFP_OK}, got;
    tfd_blob_t *b = make_blob("x", 8, 1);
    a.body = b;
    replay_run(r, "u", "old", "echo", &a);
    ck_assert_int_eq(tfd_replay_begin(r, "u", "running", "echo", 0, NULL, &got), TFD_REPLAY_NEW);
    struct timespec ts = {2, 100000000};
    nanosleep(&ts, NULL);
    replay_run(r, "u", "new", "echo", &a);
    tfd_replay_sweep(r);
    ck_assert_int_eq(tfd_replay_begin(r, "u", "old", "echo", 0, NULL, &got), TFD_REPLAY_NEW);
    tfd_replay_abandon(r, "u", "old");
    ck_assert_int_eq(tfd_replay_begin(r, "u", "new", "echo", 0, NULL, &got), TFD_REPLAY_DONE);
    tfd_blob_unref(got.body);
    ck_assert_int_eq(tfd_replay_begin(r, "u", "running", "echo", 0, NULL, &got), TFD_REPLAY_WAIT);
    tfd_replay_forget_waiter(r, NULL);
    /* Three entries at most: more finished ones push the oldest finished out ("new", then
     * "a"), never "running". */
    replay_run(r, "u", "a", "echo", &a);
    replay_run(r, "u", "b", "echo", &a);
    ck_assert_int_eq(tfd_replay_begin(r, "u", "new", "echo", 0, NULL, &got), TFD_REPLAY_NEW);
    tfd_replay_abandon(r, "u", "new");
    ck_assert_int_eq(tfd_replay_begin(r, "u", "a", "echo", 0, NULL, &got), TFD_REPLAY_NEW);
    tfd_replay_abandon(r, "u", "a");
    ck_assert_int_eq(tfd_replay_begin(r, "u", "running", "echo", 0, NULL, &got), TFD_REPLAY_WAIT);
    tfd_replay_forget_waiter(r, NULL);
    tfd_replay_abandon(r, "u", "running");
    ck_assert_int_eq(tfd_replay_begin(r, "u", "b", "echo", 0, NULL, &got), TFD_REPLAY_DONE);
    tfd_blob_unref(got.body);
    uint64_t entries, bytes, hits;
    tfd_replay_stats(r, &entries, &bytes, &hits);
    ck_assert_uint_eq(entries, 1);
    ck_assert_uint_eq(bytes, b->len);
    tfd_blob_unref(b);
    tfd_replay_free(r);
}
END_TEST

/* Thousands of ids through a window of 1000, with every seventh call abandoned and every
 * fifth a failure: the index finds each of the last 1000 with its own answer, none of the
 * ones pushed out, and keeps finding them while the oldest leave one by one (each removal
 * moves later slots back; a slip there loses or misplaces a neighbour). */
START_TEST(replay_many_ids)
{
    enum { WINDOW = 1000, CALLS = 5000 };
    tfd_replay_t *r = replay_new(60, WINDOW, 1 << 30);
    tfd_replay_answer_t got;
    char id[32];
    for (int i = 0; i < CALLS; i++) {
        snprintf(id, sizeof id, "c-%d", i);
        ck_assert_int_eq(tfd_replay_begin(r, "u", id, "echo", 0, NULL, &got), TFD_REPLAY_NEW);
        if (i % 7 == 3) {
            tfd_replay_abandon(r, "u", id);
            continue;
        }
        tfd_replay_answer_t a = {.status = 200, .code = TFP_OK};
        tfd_blob_t *b = NULL;
        if (i % 5 == 1) {
            a.code = TFP_ECONFLICT;
            a.status = 409;
            snprintf(a.msg, sizeof a.msg, "failure %d", i);
        } else {
            b = make_blob(id, 4, 1);
            a.body = b;
        }
        tfd_replay_complete(r, "u", id, "echo", &a);
        tfd_blob_unref(b);
    }
    uint64_t entries, bytes, hits;
    tfd_replay_stats(r, &entries, &bytes, &hits);
    ck_assert_uint_eq(entries, WINDOW);
    /* Newest first, abandoned ids skipped: looking one up would add it (NEW) and push the
     * oldest kept out. The window holds the last 1000 that finished. */
    int kept = 0, first = 0;
    for (int i = CALLS - 1; i >= 0 && kept < WINDOW; i--) {
        snprintf(id, sizeof id, "c-%d", i);
        if (i % 7 == 3)
            continue;
        first = i;
        ck_assert_int_eq(tfd_replay_begin(r, "u", id, "echo", 0, NULL, &got), TFD_REPLAY_DONE);
        if (i % 5 == 1) {
            char want[32];
            snprintf(want, sizeof want, "failure %d", i);
            ck_assert_int_eq(got.code, TFP_ECONFLICT);
            ck_assert_str_eq(got.msg, want);
        } else {
            ck_assert_int_eq(got.code, TFP_OK);
            tfd_blob_t *want = make_blob(id, 4, 1);
            ck_assert_uint_eq(got.body->len, want->len);
            ck_assert_mem_eq(got.body->data, want->data, want->len);
            tfd_blob_unref(want);
            tfd_blob_unref(got.body);
        }
        kept++;
    }
    ck_assert_int_eq(kept, WINDOW);
    for (int i = 0; i < first; i++) {
        snprintf(id, sizeof id, "c-%d", i);
        ck_assert_int_eq(tfd_replay_begin(r, "u", id, "echo", 0, NULL, &got), TFD_REPLAY_NEW);
        tfd_replay_abandon(r, "u", id);
    }
    tfd_replay_free(r);
}
END_TEST

Suite *suite_store(void)
{
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("store");
    tcase_add_test(tc, store_put_get_replace_delete);
    tcase_add_test(tc, store_limits_and_reservations);
    tcase_add_test(tc, store_conditions);
    tcase_add_test(tc, store_ttl);
    tcase_add_test(tc, store_evict_lru);
    tcase_add_test(tc, store_each_in_name_order);
    tcase_add_test(tc, store_share);
    tcase_add_test(tc, store_share_counted);
    tcase_add_test(tc, store_encode_blob_index);
    suite_add_tcase(s, tc);
    tc = tcase_create("replay");
    tcase_add_test(tc, replay_answers_come_back_the_same);
    tcase_add_test(tc, replay_long_keys_run_without);
    tcase_add_test(tc, replay_window_and_bounds);
    tcase_add_test(tc, replay_many_ids);
    suite_add_tcase(s, tc);
    return s;
}
