/* feeddecl.h - a device feed's declaration (PUT /v1/feeds/{feed}, doc/PROTOCOL.md "Feeds"):
 * the JSON parsed and validated into a tfp_feed_decl_t, compared with an existing one (the
 * same declaration again is 200, a different one 409), and the checks every infeed item
 * goes through: its tensors against the signature (422 naming the first difference), and a
 * split item cut into one device's rows. Bytes from the network: validated here, never
 * trusted. Pure; any thread; a declaration is owned by one thread until it is shared
 * read-only.
 */
#ifndef TFP_FEEDDECL_H
#define TFP_FEEDDECL_H

#include <stddef.h>
#include <stdint.h>
#include "proto/doc.h"
#include "proto/status.h"

#define TFP_FEED_MAX_DEVICES 64
#define TFP_FEED_MAX_SIG 64              /* tensors in a signature */
#define TFP_FEED_MAX_SIG_NAME 255        /* bytes of a signature tensor's name */
#define TFP_FEED_MAX_ITEMS 1048576u      /* max_items and outfeed_items */
#define TFP_FEED_MAX_LEASE_MS 86400000u  /* a day */

typedef enum { TFP_FANOUT_PER_DEVICE, TFP_FANOUT_SPLIT, TFP_FANOUT_BROADCAST } tfp_fanout_t;

/* "per_device", "split", "broadcast". */
const char *tfp_fanout_name(tfp_fanout_t f);

/* One tensor every item carries. */
typedef struct {
    char name[TFP_FEED_MAX_SIG_NAME + 1];
    tfp_dtype_t dtype;
    int rank;
    uint64_t shape[TFP_MAX_RANK];
    uint64_t nbytes;                /* of the whole item's tensor (dtype x shape) */
} tfp_feed_sig_t;

typedef struct {
    unsigned ndev;                  /* 1..TFP_FEED_MAX_DEVICES */
    int named;                      /* 1: "devices" was a list of names */
    char (*dev_names)[256];         /* named: ndev valid names, never all digits; else NULL */
    size_t nsig;                    /* 1..TFP_FEED_MAX_SIG */
    tfp_feed_sig_t *sig;
    tfp_fanout_t fanout;
    uint64_t max_items;             /* per device queue, 1..TFP_FEED_MAX_ITEMS (default 8) */
    uint64_t max_bytes;             /* per device queue, payload bytes (default 256 MiB) */
    uint64_t lease_ms;              /* consumer lease, 1..TFP_FEED_MAX_LEASE_MS (30000) */
    uint64_t outfeed_items;         /* outfeed retention, 1..TFP_FEED_MAX_ITEMS (64) */
    uint64_t item_bytes;            /* payload bytes of one item as one device queue holds it
                                     * (split: the device's share) */
} tfp_feed_decl_t;

/* Parses a declaration: strict JSON (tfp_json_check, no duplicate keys), an object with
 * "signature" (required) and the optional "devices" (default 1), "fanout", "max_items",
 * "max_bytes", "lease_ms", "outfeed_items"; no other keys. Checks each value's range, that
 * signature names and device names are distinct, that a split signature's dim 0 divides by
 * the device count, and that one item fits max_bytes. TFP_OK and *out (free its contents
 * with tfp_feed_decl_clear), or TFP_EBADREQ / TFP_EPROTO naming the member
 * ("signature[1].shape: ..."), or TFP_ENOMEM; *out untouched on failure. */
tfp_status_t tfp_feed_decl_parse(const char *body, size_t len, tfp_feed_decl_t *out,
                                 tfp_err_t *err);
void tfp_feed_decl_clear(tfp_feed_decl_t *d);
/* 1 if a and b declare the same feed (every member, defaults included), else 0. */
int tfp_feed_decl_equal(const tfp_feed_decl_t *a, const tfp_feed_decl_t *b);

/* The device index token names ("0".."n-1", or one of the declared names), or -1. */
int tfp_feed_dev_index(const tfp_feed_decl_t *d, const char *token);

/* Checks a whole item (as a producer sends it) against the signature: the same tensor
 * names, each with the signature's dtype and shape, nothing else (metadata is free).
 * TFP_OK, or TFP_EUNPROC naming the first difference, the signature's order first:
 * "tensor 'x' has dtype F16; the signature says F32", "... has shape [3,4]; the signature
 * says [32,128]", "the item lacks tensor 'y'", "tensor 'z' is not in the signature". */
tfp_status_t tfp_feed_sig_check(const tfp_feed_decl_t *d, const tfp_doc_t *doc, tfp_err_t *err);

/* Device dev's part of a checked split item: every tensor's rows [dev*k, (dev+1)*k) of dim 0
 * (k = dim 0 / ndev), pointing into whole's data (borrowed: whole's bytes must outlive the
 * part), metadata copied. TFP_OK and *part (tfp_doc_free), TFP_EINVAL when a tensor cannot be
 * split that way, or TFP_ENOMEM. */
tfp_status_t tfp_feed_split(const tfp_doc_t *whole, unsigned ndev, unsigned dev,
                            tfp_doc_t **part, tfp_err_t *err);

#endif
