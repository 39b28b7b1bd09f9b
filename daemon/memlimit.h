/* memlimit.h - how much memory this process may use: the smaller of the machine's physical
 * memory and every memory limit of its cgroup and the cgroup's ancestors (cgroup v2
 * memory.max, cgroup v1 memory.limit_in_bytes), so that a daemon in a container limited to
 * 4 GB sizes its store from 4 GB, not from the host's RAM.
 *
 * Read once at start-up (and on SIGHUP) on the main thread; no state.
 */
#ifndef TFD_MEMLIMIT_H
#define TFD_MEMLIMIT_H

#include <stdint.h>

typedef struct {
    uint64_t bytes;                 /* the limit; 0 when nothing could be read */
    char source[2200];              /* where it came from, for /v1/info and the log:
                                     * "physical memory" or "cgroup v2 PATH/memory.max" */
} tfd_memlimit_t;

/* Fills *out. root is prepended to every path read (/proc/self/cgroup,
 * /proc/self/mountinfo and the cgroup files): "" on a real system, a scratch directory in
 * tests. phys is the physical memory in bytes (0: sysconf's). A cgroup file that is
 * missing, unreadable or says "max" (or v1's "unlimited" 2^63 - page) sets no limit. */
void tfd_memlimit_read(const char *root, uint64_t phys, tfd_memlimit_t *out);

#endif
