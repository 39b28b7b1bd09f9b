/* httpcond.h - HTTP's conditional and partial requests, parsed: ETag lists (If-Match,
 * If-None-Match, If-Range) and single byte ranges (Range), RFC 9110 sections 8.8.3, 13 and 14.
 *
 * tfetchd's entity tags are strong and name one stored version of a document:
 * "EPOCH-VERSION", EPOCH the store's random 64-bit id in 16 hex digits (new at every start, so
 * a tag from before a restart never matches), VERSION a decimal counter. Tags of any other
 * shape are valid syntax that simply never match. Pure functions; any thread.
 */
#ifndef TFP_HTTPCOND_H
#define TFP_HTTPCOND_H

#include <stddef.h>
#include <stdint.h>

#define TFP_ETAGS_MAX 8
#define TFP_ETAG_LEN 40             /* "%016llx-%llu" with quotes, and the NUL */

/* An ETag list. any: the list was "*". n: tags of ours, with foreign ones counted apart. */
typedef struct {
    int present;                    /* the header was given */
    int any;
    size_t n, foreign;
    struct { uint64_t epoch, version; } tag[TFP_ETAGS_MAX];
} tfp_etags_t;

/* Parses a header value into *out (zeroed first; present set). 0, or -1 for malformed syntax
 * or more than TFP_ETAGS_MAX tags. weak_ok: W/"..." allowed (If-None-Match compares weakly;
 * If-Match and If-Range need strong tags, so there a weak one is foreign). */
int tfp_etags_parse(const char *value, int weak_ok, tfp_etags_t *out);
/* 1 if the list holds (epoch, version) or is "*"; 0 otherwise. */
int tfp_etags_match(const tfp_etags_t *l, uint64_t epoch, uint64_t version);
/* 1 if value is exactly one entity tag (an ETag response header: "..." or W/"...", the
 * characters RFC 9110 allows), 0 otherwise ("*", a list, junk, NULL). */
int tfp_etag_valid(const char *value);
/* Writes "\"EPOCH-VERSION\"" into buf (TFP_ETAG_LEN bytes). */
void tfp_etag_format(char *buf, uint64_t epoch, uint64_t version);

/* One byte range: bytes=A-B, bytes=A-, bytes=-N. Several ranges, another unit or bad syntax:
 * TFP_RANGE_NONE (the whole representation is sent, as RFC 9110 14.2 allows). */
typedef enum { TFP_RANGE_NONE = 0, TFP_RANGE_FROM_TO, TFP_RANGE_FROM, TFP_RANGE_SUFFIX } tfp_range_kind_t;
typedef struct {
    tfp_range_kind_t kind;
    uint64_t a, b;                  /* FROM_TO: a..b; FROM: a..; SUFFIX: the last a bytes */
} tfp_range_t;

void tfp_range_parse(const char *value, tfp_range_t *out);
/* The bytes of a total-byte representation the range selects: 0 with *off and *len set, or
 * -1 when it is unsatisfiable (416). */
int tfp_range_resolve(const tfp_range_t *r, uint64_t total, uint64_t *off, uint64_t *len);

/* A Content-Range response header (RFC 9110 14.4): "bytes A-B/TOTAL" (0 and *first, *last,
 * *total; A <= B < TOTAL) or "bytes *\/TOTAL" (an unsatisfied range: 0 with *first and *last
 * UINT64_MAX). -1 for anything else (an unknown length "/ *" included). Outputs set only on 0. */
int tfp_content_range_parse(const char *value, uint64_t *first, uint64_t *last,
                            uint64_t *total);

#endif
