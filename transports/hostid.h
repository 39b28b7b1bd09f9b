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

#include "proto/status.h"
#include "proto/upgrade.h"

/* Fills *out for this process from /proc. TFP_EINTERNAL, with a message naming the file and
 * the reason, if a file cannot be read or its contents are not a valid identity; *out is
 * written only on success. */
tfp_status_t tfx_hostid_get(tfp_up_host_t *out, tfp_err_t *err);

/* As tfx_hostid_get, reading proc_root + "/sys/kernel/random/boot_id" and
 * proc_root + "/self/ns/net" instead (tests point it at a fake tree). */
tfp_status_t tfx_hostid_read(const char *proc_root, tfp_up_host_t *out, tfp_err_t *err);

#endif
