/* hostid.h - this process's host identity, for transport negotiation.
 *
 * Reads the kernel's boot id (/proc/sys/kernel/random/boot_id) and the network namespace
 * (readlink /proc/self/ns/net) and takes getpid(): two peers with equal boot_id and netns
 * share a kernel and a network namespace, so UCX can use shared memory and CMA between them
 * (see proto/upgrade.h, which carries the identity and holds the pure checks). Does I/O on
 * /proc; no state; any thread.
 */
#ifndef TFX_HOSTID_H
#define TFX_HOSTID_H

#include "proto/netaddr.h"
#include "proto/status.h"
#include "proto/upgrade.h"

/* Fills *out for this process from /proc. TFP_EINTERNAL, with a message naming the file and
 * the reason, if a file cannot be read or its contents are not a valid identity; *out is
 * written only on success. */
tfp_status_t tfx_hostid_get(tfp_up_host_t *out, tfp_err_t *err);

/* As tfx_hostid_get, reading proc_root + "/sys/kernel/random/boot_id" and
 * proc_root + "/self/ns/net" instead (tests point it at a fake tree). */
tfp_status_t tfx_hostid_read(const char *proc_root, tfp_up_host_t *out, tfp_err_t *err);

/* This host's addresses as a list (proto/netaddr.h): 127.0.0.0/8, ::1/128 and each
 * interface's address (getifaddrs), as many as fit. -1 with errno when getifaddrs fails. */
int tfx_local_addrs(tfp_netlist_t *out);

/* 1 if host (a name or an address's text, IPv6 with or without brackets) is this host:
 * "localhost", a loopback address, or one of this host's own interface addresses
 * (getifaddrs; an IPv4-mapped IPv6 address counts as its IPv4 address). 0 otherwise,
 * and for any other name (no resolution is done). */
int tfx_addr_is_local(const char *host);

#endif
