/* shm.h - shared memory between processes of one host: memfd regions, their seals, and their
 * file descriptors passed over a unix socket.
 *
 * A region (tfx_shm_t) is one memfd (memfd_create, MFD_ALLOW_SEALING, close-on-exec) of a
 * fixed size, mapped MAP_SHARED: read-write by the process that made it, read-only by every
 * process it is handed to. Once its contents are final its maker seals it (tfx_shm_seal):
 * TFX_SHM_SEAL_SIZE (F_SEAL_SHRINK | F_SEAL_GROW: no peer can ever SIGBUS on a mapping) and,
 * for data that no one may change again, TFX_SHM_SEAL_WRITE (F_SEAL_WRITE, after the maker's
 * own writable mapping was replaced by a read-only one at the same address, so pointers into
 * it stay valid), after which the seals themselves are sealed (F_SEAL_SEAL). A buffer lent
 * to a peer to fill is sealed in size first (so the peer cannot truncate it under its
 * maker's mapping, which would SIGBUS the maker), in write once it is given back. A receiver never trusts
 * the sender's word for any of it: tfx_shm_check reads the fd's own size (fstat) and seals
 * (F_GET_SEALS), tfx_shm_map maps it PROT_READ, and with F_SEAL_WRITE no mapping anywhere can
 * be made writable again (mmap PROT_WRITE and mprotect fail).
 *
 * Messages are SOCK_SEQPACKET datagrams (boundaries kept) of at most TFX_SHM_MAX_MSG bytes
 * carrying 0..TFX_SHM_MAX_FDS descriptors as SCM_RIGHTS. tfx_shm_recv refuses, closing every
 * descriptor that arrived, what a hostile peer can send: truncated data (MSG_TRUNC) or
 * control data (MSG_CTRUNC), control messages other than SCM_RIGHTS, more descriptors than
 * the caller takes. What the bytes mean is proto/'s business (proto/shmframe.h). The sockets
 * live in the abstract namespace (a name no file system holds, private to the network
 * namespace, gone with the listener); who may connect is decided by the first message, a
 * one-time token.
 *
 * The same layer carries rings (the device feeds' same-host ring, issue 11): one region of a
 * header plus n fixed slots, made by the writer, sealed TFX_SHM_SEAL_SIZE and
 * TFX_SHM_SEAL_WRITERS (it keeps writing through its own mapping; nobody else ever can, not
 * even by reopening the descriptor read-write through /proc), handed once to the reader, who maps it read-only (tfx_shm_map) and checks the size
 * seal (tfx_shm_check); slot indices then travel as small messages over the same socket, or
 * as atomics in the header. Nothing here knows of documents, slots or the daemon.
 *
 * No global state; the functions are any thread's, a region or a socket one thread's at a
 * time.
 */
#ifndef TFX_SHM_H
#define TFX_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "proto/status.h"

#define TFX_SHM_MAX_FDS 4
#define TFX_SHM_MAX_MSG 4096
#define TFX_SHM_MAX_NAME 96                 /* an abstract socket name's bytes, no NUL */
#define TFX_SHM_HUGE ((size_t)2 << 20)      /* a huge page: regions this large or more are
                                             * mapped aligned to it (tfx_shm_collapse) */

#define TFX_SHM_SEAL_SIZE 0x1u              /* F_SEAL_SHRINK | F_SEAL_GROW */
#define TFX_SHM_SEAL_WRITE 0x2u             /* F_SEAL_WRITE */
#define TFX_SHM_SEAL_WRITERS 0x4u           /* F_SEAL_FUTURE_WRITE: the maker's own mapping
                                             * keeps writing; no new writable mapping and
                                             * no write(2), through any descriptor (a ring) */

typedef struct {
    int fd;                                 /* the memfd (owned), -1 when none */
    uint8_t *p;                             /* the mapping of all size bytes, NULL when none */
    size_t size;
    int writable;                           /* p is mapped PROT_WRITE */
} tfx_shm_t;

#define TFX_SHM_NONE { -1, NULL, 0, 0 }

/* A new region of size bytes (> 0), mapped read-write, named name (for /proc/PID/fd; NULL:
 * "tfetch"). TFP_ENOMEM (or TFP_EINTERNAL naming the call) on failure; *out written only on
 * success. */
tfp_status_t tfx_shm_create(size_t size, const char *name, tfx_shm_t *out, tfp_err_t *err);
/* Seals m with seals (TFX_SHM_SEAL_* bits; SIZE is always added). With TFX_SHM_SEAL_WRITE
 * the maker's mapping becomes read-only in place first (same address), and F_SEAL_SEAL
 * makes the seals final; without it more can be added later.
 * Sealing again with the same bits is a no-op. TFP_EINTERNAL when the kernel refuses. */
tfp_status_t tfx_shm_seal(tfx_shm_t *m, unsigned seals, tfp_err_t *err);
/* Checks a received fd: a memfd-like file whose own size is at least min_size and whose seals
 * include seals (TFX_SHM_SEAL_* bits): TFP_EPROTO naming what is wrong, else TFP_OK and
 * *size (not NULL) its size. */
tfp_status_t tfx_shm_check(int fd, size_t min_size, unsigned seals, size_t *size,
                           tfp_err_t *err);
/* How tfx_shm_map maps a region. */
#define TFX_SHM_MAP_READ 0                  /* PROT_READ, shared: a write faults (SIGSEGV) */
#define TFX_SHM_MAP_FILL 1                  /* PROT_READ|PROT_WRITE, shared, faulted in at
                                             * once: a buffer lent to fill */
#define TFX_SHM_MAP_COPY_ON_WRITE 2         /* PROT_READ|PROT_WRITE, MAP_PRIVATE: reads share
                                             * the region's pages; a write copies the page it
                                             * touches into this process, and no other holder
                                             * ever sees it (allowed on an F_SEAL_WRITE memfd) */

/* Wraps fd (taken over: closed on failure too) as a region of size bytes mapped as mode
 * (TFX_SHM_MAP_*); its tfx_shm_t writable is 1 for FILL and COPY_ON_WRITE. */
tfp_status_t tfx_shm_map(int fd, size_t size, int mode, tfx_shm_t *out, tfp_err_t *err);
/* Makes the 2 MiB-aligned part of m (mapped writable, at a 2 MiB-aligned address, as
 * tfx_shm_create and tfx_shm_map place regions of 2 MiB or more) 2 MiB pages where the
 * kernel can (MADV_COLLAPSE, Linux 6.1; even where shmem_enabled is never, not under deny),
 * keeping any bytes already there; new pages read as zeros. A writer's mapping of such a
 * region takes one fault per 2 MiB instead of 512. It goes 2 MiB at a time and, with
 * budget_us not 0, stops once that many microseconds have gone (a host whose free memory is
 * fragmented compacts it for each huge page): ETIME, the part done left so, the rest in
 * whatever pages it had. 0, or an errno (EINVAL: no such call, or the region is under 2
 * MiB or not so mapped; EAGAIN, ENOMEM: no huge page now; ETIME: out of budget). */
int tfx_shm_collapse(const tfx_shm_t *m, uint64_t budget_us);
/* Makes m's mapping read-only (this side only reads it; the memfd's other holders may
 * still write). */
tfp_status_t tfx_shm_read_only(tfx_shm_t *m, tfp_err_t *err);
/* Unmaps and closes; m becomes TFX_SHM_NONE. NULL or an empty region is a no-op. */
void tfx_shm_close(tfx_shm_t *m);

/* ---- sockets and messages ------------------------------------------------------------------ */

/* A listening SOCK_SEQPACKET socket (non-blocking, close-on-exec) at a fresh random abstract
 * name "tfetch-shm.PID.HEX", written NUL-terminated into name (size > TFX_SHM_MAX_NAME). The
 * socket, or -1 with err set. */
int tfx_shm_listen(char *name, size_t size, tfp_err_t *err);
/* A listening socket as tfx_shm_listen's, at the file system path (absolute, at most
 * TFX_SHM_MAX_NAME bytes) instead: who may connect is the file's mode 0660 and group gid
 * (-1: the process's), as with docker.sock. The file appears whole: made under a temporary
 * name in a private directory, given its mode and group, then renamed over path; a socket
 * already there is replaced when nothing listens on it (another tfetchd: refused, "in use");
 * anything else there is refused, and so is a socket whose use cannot be told (another
 * uid's). *file identifies the file for tfx_shm_unlink_path. The directory should be
 * writable by its owner only. */
typedef struct {
    dev_t dev;
    ino_t ino;
} tfx_shm_file_t;
int tfx_shm_listen_path(const char *path, gid_t gid, tfx_shm_file_t *file, tfp_err_t *err);
/* Removes the socket file tfx_shm_listen_path made, if it is still that file. */
void tfx_shm_unlink_path(const char *path, const tfx_shm_file_t *file);
/* Connects (blocking, close-on-exec) to name: an abstract name, or a file system path when
 * it starts with '/'. The socket, or -1 with err set (a path the caller may not connect to:
 * "Permission denied", naming it). */
int tfx_shm_connect(const char *name, tfp_err_t *err);
/* The connecting peer's pid and uid (SO_PEERCRED). 0, or -1. */
int tfx_shm_peer(int sock, pid_t *pid, uid_t *uid);

/* Sends one message: len (1..TFX_SHM_MAX_MSG) bytes with fds[0..nfds) (nfds <=
 * TFX_SHM_MAX_FDS; the fds stay the caller's). Blocks (MSG_NOSIGNAL). TFP_OK, or TFP_EIO
 * (the peer is gone) / TFP_EINVAL with err set. */
tfp_status_t tfx_shm_send(int sock, const void *buf, size_t len, const int *fds, size_t nfds,
                          tfp_err_t *err);
/* Sends n messages (no descriptors) in one call (sendmmsg): each is its own record, in
 * order, and the peer is woken once. */
tfp_status_t tfx_shm_send_many(int sock, const void *const *bufs, const size_t *lens, size_t n,
                               tfp_err_t *err);
/* Receives one message into buf (cap bytes) and up to max_fds descriptors into fds (close-on-
 * exec; *nfds how many, the caller's to close). *len its length; 0 with TFP_OK: the peer
 * closed. TFP_EAGAIN on a non-blocking socket with nothing to read. TFP_EPROTO (every
 * received descriptor closed, *nfds 0) for a message longer than cap, truncated control data,
 * a control message that is not SCM_RIGHTS, or more than max_fds descriptors; TFP_EIO for a
 * socket error. */
tfp_status_t tfx_shm_recv(int sock, void *buf, size_t cap, size_t *len, int *fds,
                          size_t max_fds, size_t *nfds, tfp_err_t *err);

#endif
