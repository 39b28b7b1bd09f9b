/* ucxaddr.h - a UCX 1.13 packed worker address, checked before UCX ever sees it.
 *
 * An upgrade answer (proto/upgrade.h) carries the server's worker address as opaque bytes
 * for ucp_ep_create. UCX 1.13 reads that address without a length (ucp_address_unpack,
 * src/ucp/wireup/address.c) and asserts on what it does not expect, so random bytes from a
 * hostile server or a tampered plain-HTTP answer abort the whole client (SIGABRT). This
 * module walks the same layout with the length in hand and refuses, with a message, anything
 * that does not parse exactly: both address versions UCX 1.13 writes (UCX_ADDRESS_VERSION
 * v1, the default, and v2), non-unified mode only (UCX_UNIFIED_MODE=n, the default), the
 * header flags UCX knows, the device list (md index, flags, path count, system device, device
 * address), each transport's entry (name checksum, attributes, interface address), no
 * endpoint addresses (a worker address has none), at most UCP_MAX_RESOURCES entries, and no
 * byte left over. tfp_ucxaddr_match then holds a remote address to what this process's own
 * UCX writes: every transport both sides know must come with device and interface addresses
 * of the sizes our UCX reads for it (UCX reads them by the transport's own fixed layout, so
 * a shorter one would be read past its end).
 *
 * Layout (v1; v2 differs where noted):
 *   header      1 byte: version 0 in the low nibble, flags in the high one (v2: 2 bytes,
 *               version 1, then the flags byte); flags: debug info 1, uuid 2, client id 4,
 *               AM only 8
 *   uuid        8 bytes (v1 always; v2 when the flag says so)
 *   client id   8 bytes when flagged
 *   name        1 length byte + that many bytes, when debug info is flagged
 *   0xff        alone: no devices (and nothing after it); else, per device:
 *     md        1 byte: 0x80 empty device (no transports), md index in 0x1f (v2: 0x7f;
 *               0x7f means the index is the next byte)
 *     dev len   1 byte: 0x80 last device, 0x40 path count follows, 0x20 system device
 *               follows, length in 0x1f (v2: 0x1f means the length is the next byte)
 *     [paths] [sys dev] device address
 *     per transport (unless empty): name checksum (2), attributes (v1 16 bytes: three
 *     floats and prio/flags; v2 8 bytes), iface len 1 byte: 0x80 last transport, 0x40 endpoint
 *     addresses follow, length in 0x3f (v2: 0x3f means next byte), interface address.
 * Pure; any thread.
 */
#ifndef TFP_UCXADDR_H
#define TFP_UCXADDR_H

#include <stddef.h>
#include <stdint.h>
#include "proto/status.h"

#define TFP_UCXADDR_MAX_ENTRIES 128         /* UCP_MAX_RESOURCES in UCX 1.13 */
#define TFP_UCXADDR_MAX_MD 63               /* UCP_MAX_MDS - 1: md maps are 64-bit */

typedef struct {
    uint16_t tl_csum;                       /* the transport name's checksum */
    uint8_t md_index;
    uint8_t dev_index;                      /* which device of the address */
    uint8_t dev_addr_len;
    uint8_t iface_addr_len;
} tfp_ucxaddr_entry_t;

typedef struct {
    int version;                            /* 1 or 2 */
    unsigned flags;                         /* header flags */
    unsigned ndev;                          /* devices, empty ones included */
    unsigned n;                             /* transport entries */
    tfp_ucxaddr_entry_t e[TFP_UCXADDR_MAX_ENTRIES];
} tfp_ucxaddr_t;

/* Parses a[0..n). TFP_OK and *out (may be NULL: check only); TFP_EPROTO with the offset and
 * what is wrong; TFP_EINVAL for a NULL address. *out is written only on success. */
tfp_status_t tfp_ucxaddr_parse(const uint8_t *a, size_t n, tfp_ucxaddr_t *out, tfp_err_t *err);

/* Holds a parsed remote address to this process's own (local, parsed from its worker's
 * address with every transport): each remote entry whose transport local also has must carry
 * a device and an interface address of the same sizes as one of local's entries for it.
 * Entries of transports local lacks are ignored by UCX and here. TFP_OK, or TFP_EPROTO
 * naming the entry. */
tfp_status_t tfp_ucxaddr_match(const tfp_ucxaddr_t *remote, const tfp_ucxaddr_t *local,
                               tfp_err_t *err);

#endif
