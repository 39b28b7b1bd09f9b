/* netaddr.h - IP addresses and address ranges as text: the `ucx-trusted` list.
 *
 * A list is comma- or space-separated entries, each `same-host`, an address (a /32 or
 * /128), or a CIDR range `ADDR/PREFIX`, IPv4 or IPv6 ("10.0.0.0/8, fd00::/8"). An
 * IPv4-mapped IPv6 address (::ffff:10.1.2.3, as a dual-stack listener reports a v4 peer)
 * matches as the IPv4 address it carries. Pure: no I/O, no state; any thread.
 */
#ifndef TFP_NETADDR_H
#define TFP_NETADDR_H

#include <stddef.h>
#include <stdint.h>
#include "proto/status.h"

#define TFP_NETLIST_MAX 128

typedef struct {
    int v6;                         /* 0: IPv4 (addr[0..3]), 1: IPv6 */
    uint8_t addr[16];
    unsigned prefix;                /* leading bits that must match */
} tfp_net_t;

typedef struct {
    int same_host;                  /* `same-host` was listed */
    size_t n;
    tfp_net_t nets[TFP_NETLIST_MAX];
} tfp_netlist_t;

/* Reads an address's text into *v6 and addr (an IPv4-mapped IPv6 address as IPv4).
 * 0, or -1 when text is not an IPv4 or IPv6 address. */
int tfp_addr_parse(const char *text, int *v6, uint8_t addr[16]);

/* Parses list (NULL or "" is the empty list) into *out. TFP_EINVAL naming the bad entry. */
tfp_status_t tfp_netlist_parse(const char *list, tfp_netlist_t *out, tfp_err_t *err);

/* 1 if the address text addr lies in one of l's ranges (same-host is not a range: the
 * caller decides it); 0 otherwise, and for text that is not an address. */
int tfp_netlist_match(const tfp_netlist_t *l, const char *addr);

#endif
