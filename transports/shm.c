/* shm.c - memfd regions, seals, and descriptors over unix sockets (see shm.h).
 *
 * Thin over the kernel: memfd_create, ftruncate and mmap make a region; F_ADD_SEALS seals
 * it (F_SEAL_WRITE needs no writable shared mapping left, so the maker's own is replaced in
 * place by a read-only one first); sendmsg/recvmsg with SCM_RIGHTS move descriptors, and the
 * receive path closes whatever arrived whenever it refuses a message, so a hostile peer
 * cannot leak descriptors into us. No state; any thread.
 */
#define _GNU_SOURCE
#include "config.h"
#include "transports/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "transports/clock.h"

/* mmap(NULL, size, prot, flags, fd, 0), at an address aligned to 2 MiB when the region is
 * at least that large: a region whose pages are 2 MiB ones (the daemon's ready regions,
 * daemon/shmpool.c) is then mapped a PMD at a time (one fault, one page table entry, for 2
 * MiB: a 1 GiB region maps in well under a millisecond where 4 KiB pages took 70-250 ms
 * on our VMs), which the kernel does only where the address and the file offset agree
 * modulo 2 MiB. It aligns shmem mappings itself only when shmem huge pages are enabled,
 * so the reservation is made here: an inaccessible anonymous range 2 MiB longer, the
 * mapping placed over its aligned part (MAP_FIXED), the rest given back. */
static void *map_aligned(size_t size, int prot, int flags, int fd)
{
    if (size < TFX_SHM_HUGE || size > SIZE_MAX - TFX_SHM_HUGE)
        return mmap(NULL, size, prot, flags, fd, 0);
    size_t span = size + TFX_SHM_HUGE;
    uint8_t *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                      0);
    if (r == MAP_FAILED)
        return mmap(NULL, size, prot, flags, fd, 0);
    uintptr_t mask = (uintptr_t)TFX_SHM_HUGE - 1;
    uint8_t *a = (uint8_t *)(((uintptr_t)r + mask) & ~mask);
    void *p = mmap(a, size, prot, flags | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        munmap(r, span);
        errno = e;
        return MAP_FAILED;
    }
    if (a > r)
        munmap(r, (size_t)(a - r));
    size_t page = (size_t)sysconf(_SC_PAGESIZE), end = (size + page - 1) / page * page;
    if (r + span > a + end)
        munmap(a + end, (size_t)(r + span - (a + end)));
    return p;
}

#ifdef MADV_COLLAPSE
#define MADV_COLLAPSE_ MADV_COLLAPSE
#else
#define MADV_COLLAPSE_ 25                   /* Linux 6.1's, where glibc's headers lack it */
#endif

/* Collapsed at a time, the budget checked after each: one huge page, so that a 16 MiB
 * buffer's collapse stops at its budget too (32 MiB steps never looked at it below 32 MiB,
 * and fresh memory took 50-120 ms per 16 MiB there). A call per 2 MiB costs the same as one
 * per 32 MiB: 33-35 ms per 256 MiB either way, measured. */
#define COLLAPSE_STEP TFX_SHM_HUGE
/* A writer's collapse of a fresh buffer: 1 ms per MiB, at least 10 ms. */
#define COLLAPSE_BUDGET_US(size) ((size) >> 20 < 10 ? 10000u : (uint64_t)((size) >> 20) * 1000u)

int tfx_shm_collapse(const tfx_shm_t *m, uint64_t budget_us)
{
    size_t whole = m->size & ~(TFX_SHM_HUGE - 1);
    if (!whole || !m->p || ((uintptr_t)m->p & (TFX_SHM_HUGE - 1)))
        return EINVAL;
    /* A range with no page at all is not collapsed: one 4 KiB page is allocated in each 2
     * MiB (fallocate writes nothing, so a page already there keeps its bytes). */
    for (size_t off = 0; off < whole; off += TFX_SHM_HUGE)
        if (fallocate(m->fd, 0, (off_t)off, 4096) != 0)
            return errno;
    uint64_t t0 = tfx_now_ns();
    for (size_t off = 0; off < whole; off += COLLAPSE_STEP) {
        size_t n = whole - off < COLLAPSE_STEP ? whole - off : COLLAPSE_STEP;
        if (madvise(m->p + off, n, MADV_COLLAPSE_) != 0)
            return errno;
        if (budget_us && (tfx_now_ns() - t0) / 1000u > budget_us && off + n < whole)
            return ETIME;
    }
    return 0;
}

static unsigned kernel_seals(unsigned seals)
{
    unsigned k = F_SEAL_SHRINK | F_SEAL_GROW;
    if (seals & TFX_SHM_SEAL_WRITE)
        k |= F_SEAL_WRITE;
    if (seals & TFX_SHM_SEAL_WRITERS)
        k |= F_SEAL_FUTURE_WRITE;
    return k;
}

tfp_status_t tfx_shm_create(size_t size, const char *name, tfx_shm_t *out, tfp_err_t *err)
{
    if (size == 0 || size > (size_t)INT64_MAX)
        return tfp_err_set(err, TFP_EINVAL, "shm: a region of %zu bytes", size);
    int fd = memfd_create(name ? name : "tfetch", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return tfp_err_set(err, errno == ENOMEM ? TFP_ENOMEM : TFP_EINTERNAL,
                           "shm: memfd_create: %s", strerror(errno));
    if (ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        close(fd);
        return tfp_err_set(err, TFP_ENOMEM, "shm: ftruncate %zu: %s", size, strerror(e));
    }
    void *p = map_aligned(size, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return tfp_err_set(err, TFP_ENOMEM, "shm: mmap %zu: %s", size, strerror(e));
    }
    out->fd = fd;
    out->p = p;
    out->size = size;
    out->writable = 1;
    return TFP_OK;
}

tfp_status_t tfx_shm_seal(tfx_shm_t *m, unsigned seals, tfp_err_t *err)
{
    unsigned want = kernel_seals(seals);
    int have = fcntl(m->fd, F_GET_SEALS);
    if (have < 0)
        return tfp_err_set(err, TFP_EINTERNAL, "shm: F_GET_SEALS: %s", strerror(errno));
    if (((unsigned)have & want) == want)
        return TFP_OK;
    if (have & F_SEAL_SEAL)
        return tfp_err_set(err, TFP_EINTERNAL, "shm: sealed already with other seals");
    if ((want & F_SEAL_WRITE) && m->p && m->writable) {
        /* The same pages, read-only, at the same address: the old mapping goes atomically.
         * Mapped through a read-only descriptor, so the mapping cannot become writable
         * (VM_MAYWRITE), which is what F_SEAL_WRITE requires of every mapping left. */
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", m->fd);
        int ro = open(path, O_RDONLY | O_CLOEXEC);
        if (ro < 0)
            return tfp_err_set(err, TFP_EINTERNAL, "shm: reopen read-only: %s",
                               strerror(errno));
        void *p = mmap(m->p, m->size, PROT_READ, MAP_SHARED | MAP_FIXED, ro, 0);
        int e = errno;
        close(ro);
        if (p == MAP_FAILED)
            return tfp_err_set(err, TFP_EINTERNAL, "shm: remap read-only: %s", strerror(e));
        m->writable = 0;
    }
    /* Final with a write seal (a ring's writers seal too: nobody adds another, say
     * F_SEAL_WRITE, under the maker); a lent buffer gets the write seal later. */
    unsigned final = want & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE) ? F_SEAL_SEAL : 0;
    if (fcntl(m->fd, F_ADD_SEALS, (int)(want | final)) != 0)
        return tfp_err_set(err, TFP_EINTERNAL, "shm: F_ADD_SEALS: %s", strerror(errno));
    return TFP_OK;
}

tfp_status_t tfx_shm_check(int fd, size_t min_size, unsigned seals, size_t *size,
                           tfp_err_t *err)
{
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0)
        return tfp_err_set(err, TFP_EPROTO, "shm: not a descriptor");
    if (!S_ISREG(sb.st_mode))
        return tfp_err_set(err, TFP_EPROTO, "shm: not a memory file");
    int have = fcntl(fd, F_GET_SEALS);
    if (have < 0)
        return tfp_err_set(err, TFP_EPROTO, "shm: the descriptor cannot be sealed");
    unsigned want = kernel_seals(seals);
    if (((unsigned)have & want) != want)
        return tfp_err_set(err, TFP_EPROTO, "shm: the descriptor lacks seals (has 0x%x, needs "
                           "0x%x)", (unsigned)have, want);
    if (sb.st_size < 0 || (uint64_t)sb.st_size < min_size)
        return tfp_err_set(err, TFP_EPROTO, "shm: the region holds %lld bytes, not %zu",
                           (long long)sb.st_size, min_size);
    if (size)
        *size = (size_t)sb.st_size;
    return TFP_OK;
}

tfp_status_t tfx_shm_map(int fd, size_t size, int mode, tfx_shm_t *out, tfp_err_t *err)
{
    if (size == 0) {
        close(fd);
        return tfp_err_set(err, TFP_EPROTO, "shm: an empty region");
    }
    if (mode == TFX_SHM_MAP_COPY_ON_WRITE) {
        /* MAP_NORESERVE: only the pages a write copies are charged, when written, not the
         * whole region up front (a 5 GiB document read and never written costs nothing). */
        void *p = map_aligned(size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return tfp_err_set(err, e == ENOMEM ? TFP_ENOMEM : TFP_EPROTO,
                               "shm: mmap (copy on write): %s", strerror(e));
        }
        *out = (tfx_shm_t){ .fd = fd, .p = p, .size = size, .writable = 1 };
        return TFP_OK;
    }
    int writable = mode == TFX_SHM_MAP_FILL;
    /* A buffer lent to fill is faulted in at once: one pass in the kernel is cheaper than a
     * fault per page while it is written. Huge pages are advised first, so where the host
     * gives shmem huge pages (shmem_enabled advise) the pass allocates 2 MiB ones. A kernel
     * without MADV_POPULATE_WRITE (before 5.14) maps it again with MAP_POPULATE; memory
     * that cannot be had is refused now (it would be a SIGBUS at the writes). */
    void *p = map_aligned(size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return tfp_err_set(err, e == ENOMEM ? TFP_ENOMEM : TFP_EPROTO, "shm: mmap: %s",
                           strerror(e));
    }
    if (writable) {
#ifdef MADV_HUGEPAGE
        (void)madvise(p, size, MADV_HUGEPAGE);              /* advice only */
#endif
        /* Where the host gives no shmem huge pages, 2 MiB ones are made by collapsing
         * (tfx_shm_collapse): one collapse is far cheaper than 512 faults, and the writes
         * then run at memcpy speed. A region made so already (the daemon's ready ones) is
         * left as it is; one that cannot be, or the part of it past the budget (a host
         * that must compact memory for each huge page: 1 ms per MiB, where collapsing
         * takes 0.16 ms here), is faulted in 4 KiB pages below. */
        if (size >= TFX_SHM_HUGE) {
            tfx_shm_t r = {.fd = fd, .p = p, .size = size, .writable = 1};
            (void)tfx_shm_collapse(&r, COLLAPSE_BUDGET_US(size));
        }
        int e = EINVAL;
#ifdef MADV_POPULATE_WRITE
        e = madvise(p, size, MADV_POPULATE_WRITE) == 0 ? 0 : errno;
#endif
        if (e == EINVAL) {              /* not known to this kernel */
            munmap(p, size);
            p = map_aligned(size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd);
            e = p == MAP_FAILED ? errno : 0;
        }
        if (e != 0) {
            if (p != MAP_FAILED)
                munmap(p, size);
            close(fd);
            return tfp_err_set(err, TFP_ENOMEM, "shm: no memory to fill %zu bytes: %s", size,
                               strerror(e));
        }
    }
    out->fd = fd;
    out->p = p;
    out->size = size;
    out->writable = writable;
    return TFP_OK;
}

tfp_status_t tfx_shm_read_only(tfx_shm_t *m, tfp_err_t *err)
{
    if (m->p && m->writable && mprotect(m->p, m->size, PROT_READ) != 0)
        return tfp_err_set(err, TFP_EINTERNAL, "shm: mprotect: %s", strerror(errno));
    m->writable = 0;
    return TFP_OK;
}

void tfx_shm_close(tfx_shm_t *m)
{
    if (!m)
        return;
    if (m->p)
        munmap(m->p, m->size);
    if (m->fd >= 0)
        close(m->fd);
    *m = (tfx_shm_t)TFX_SHM_NONE;
}

/* ---- sockets -------------------------------------------------------------------------------- */

static socklen_t abstract_addr(struct sockaddr_un *sa, const char *name)
{
    size_t n = strlen(name);
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (name[0] == '/') {                   /* a file system path */
        memcpy(sa->sun_path, name, n);
        return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    }
    memcpy(sa->sun_path + 1, name, n);      /* sun_path[0] = 0: the abstract namespace */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* Is a socket file in use? 1 when something listens on it (a connect is answered, or its
 * backlog is full), 0 when nothing does (ECONNREFUSED: a file left by a stopped process), -1
 * with errno when it cannot be told (permission: another uid's socket is not ours to take). */
static int socket_in_use(const char *path)
{
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return -1;
    struct sockaddr_un sa;
    socklen_t sl = abstract_addr(&sa, path);
    int rc = connect(s, (struct sockaddr *)&sa, sl) == 0 || errno == EAGAIN ? 1
             : errno == ECONNREFUSED                                     ? 0
                                                                         : -1;
    int e = errno;
    close(s);
    errno = e;
    return rc;
}

int tfx_shm_listen_path(const char *path, gid_t gid, tfx_shm_file_t *file, tfp_err_t *err)
{
    char dir[TFX_SHM_MAX_NAME + 16], tmp[TFX_SHM_MAX_NAME + 24];
    struct stat sb;
    if (!path || path[0] != '/' || strlen(path) > TFX_SHM_MAX_NAME) {
        tfp_err_set(err, TFP_EINVAL, "shm: shm-socket must be an absolute path of at most %d "
                    "bytes", TFX_SHM_MAX_NAME);
        return -1;
    }
    if (lstat(path, &sb) == 0) {
        if (!S_ISSOCK(sb.st_mode)) {
            tfp_err_set(err, TFP_EINVAL, "shm: %s exists and is not a socket", path);
            return -1;
        }
        int used = socket_in_use(path);
        if (used != 0) {
            tfp_err_set(err, TFP_EBUSY, used > 0 ? "shm: %s is in use (another tfetchd?)"
                                                 : "shm: cannot tell whether %s is in use: %s",
                        path, strerror(errno));
            return -1;
        }
    }
    /* Made in a directory of our own (mode 0700) beside path, so no one can put anything in
     * its place between the bind and the chmod; then renamed over path, whole. */
    snprintf(dir, sizeof dir, "%s.XXXXXX", path);
    if (!mkdtemp(dir)) {
        tfp_err_set(err, TFP_EINTERNAL, "shm: mkdtemp beside %s: %s", path, strerror(errno));
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s/s", dir);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) {
        tfp_err_set(err, TFP_EINTERNAL, "shm: socket: %s", strerror(errno));
        (void)rmdir(dir);
        return -1;
    }
    struct sockaddr_un sa;
    socklen_t sl = abstract_addr(&sa, tmp);
    if (bind(s, (struct sockaddr *)&sa, sl) != 0 ||
        (gid != (gid_t)-1 && chown(tmp, (uid_t)-1, gid) != 0) || chmod(tmp, 0660) != 0 ||
        listen(s, 64) != 0 || lstat(tmp, &sb) != 0 || rename(tmp, path) != 0) {
        tfp_err_set(err, TFP_EINTERNAL, "shm: %s: %s", path, strerror(errno));
        (void)unlink(tmp);
        (void)rmdir(dir);
        close(s);
        return -1;
    }
    (void)rmdir(dir);
    file->dev = sb.st_dev;
    file->ino = sb.st_ino;
    return s;
}

void tfx_shm_unlink_path(const char *path, const tfx_shm_file_t *file)
{
    struct stat sb;
    /* Only our own file: a tfetchd started since may have put its socket there. */
    if (lstat(path, &sb) == 0 && sb.st_dev == file->dev && sb.st_ino == file->ino)
        (void)unlink(path);
}

int tfx_shm_listen(char *name, size_t size, tfp_err_t *err)
{
    uint8_t rnd[8];
    if (size <= TFX_SHM_MAX_NAME || getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        tfp_err_set(err, TFP_EINTERNAL, "shm: no name for the socket");
        return -1;
    }
    int n = snprintf(name, size, "tfetch-shm.%ld.", (long)getpid());
    for (size_t i = 0; i < sizeof rnd; i++)
        n += snprintf(name + n, size - (size_t)n, "%02x", rnd[i]);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) {
        tfp_err_set(err, TFP_EINTERNAL, "shm: socket: %s", strerror(errno));
        return -1;
    }
    struct sockaddr_un sa;
    socklen_t sl = abstract_addr(&sa, name);
    if (bind(s, (struct sockaddr *)&sa, sl) != 0 || listen(s, 64) != 0) {
        tfp_err_set(err, TFP_EINTERNAL, "shm: bind/listen: %s", strerror(errno));
        close(s);
        return -1;
    }
    return s;
}

int tfx_shm_connect(const char *name, tfp_err_t *err)
{
    if (!name || !name[0] || strlen(name) > TFX_SHM_MAX_NAME) {
        tfp_err_set(err, TFP_EINVAL, "shm: a bad socket name");
        return -1;
    }
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) {
        tfp_err_set(err, TFP_EINTERNAL, "shm: socket: %s", strerror(errno));
        return -1;
    }
    struct sockaddr_un sa;
    socklen_t sl = abstract_addr(&sa, name);
    if (connect(s, (struct sockaddr *)&sa, sl) != 0) {
        int e = errno;
        if (name[0] == '/' && (e == EACCES || e == EPERM))
            tfp_err_set(err, TFP_ECONNECT, "shm: connect %s: %s (join the socket's group)",
                        name, strerror(e));
        else
            tfp_err_set(err, TFP_ECONNECT, "shm: connect: %s", strerror(e));
        close(s);
        return -1;
    }
    return s;
}

int tfx_shm_peer(int sock, pid_t *pid, uid_t *uid)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || len != sizeof cr)
        return -1;
    if (pid)
        *pid = cr.pid;
    if (uid)
        *uid = cr.uid;
    return 0;
}

tfp_status_t tfx_shm_send(int sock, const void *buf, size_t len, const int *fds, size_t nfds,
                          tfp_err_t *err)
{
    if (len == 0 || len > TFX_SHM_MAX_MSG || nfds > TFX_SHM_MAX_FDS)
        return tfp_err_set(err, TFP_EINVAL, "shm: a message of %zu bytes and %zu fds", len,
                           nfds);
    union {
        char buf[CMSG_SPACE(sizeof(int) * TFX_SHM_MAX_FDS)];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = { (void *)buf, len };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (nfds) {
        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
    }
    ssize_t n;
    do
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0 || (size_t)n != len)
        return tfp_err_set(err, TFP_EIO, "shm: sendmsg: %s", n < 0 ? strerror(errno)
                                                                   : "short");
    return TFP_OK;
}

tfp_status_t tfx_shm_send_many(int sock, const void *const *bufs, const size_t *lens, size_t n,
                               tfp_err_t *err)
{
    enum { MAX = 128 };
    struct iovec iov[MAX];
    struct mmsghdr mm[MAX];
    if (n > MAX)
        return tfp_err_set(err, TFP_EINVAL, "shm: %zu messages in one send", n);
    for (size_t k = 0; k < n; k++) {
        if (lens[k] == 0 || lens[k] > TFX_SHM_MAX_MSG)
            return tfp_err_set(err, TFP_EINVAL, "shm: a message of %zu bytes", lens[k]);
        iov[k] = (struct iovec){ (void *)bufs[k], lens[k] };
        memset(&mm[k], 0, sizeof mm[k]);
        mm[k].msg_hdr.msg_iov = &iov[k];
        mm[k].msg_hdr.msg_iovlen = 1;
    }
    /* A blocking socket sends them all, unless interrupted or failing part way: go on from
     * the first one not sent. */
    for (size_t done = 0; done < n;) {
        int sent = sendmmsg(sock, mm + done, (unsigned)(n - done), MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR)
            continue;
        if (sent <= 0)
            return tfp_err_set(err, TFP_EIO, "shm: sendmmsg: %s", sent < 0 ? strerror(errno)
                                                                         : "nothing sent");
        for (int k = 0; k < sent; k++)
            if (mm[done + (size_t)k].msg_len != lens[done + (size_t)k])
                return tfp_err_set(err, TFP_EIO, "shm: sendmmsg: short");
        done += (size_t)sent;
    }
    return TFP_OK;
}

/* Closes every descriptor the control messages of mh carry. */
static void close_all(struct msghdr *mh)
{
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
            cm->cmsg_len >= CMSG_LEN(0)) {
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
                close(fd);
            }
        }
}

tfp_status_t tfx_shm_recv(int sock, void *buf, size_t cap, size_t *len, int *fds,
                          size_t max_fds, size_t *nfds, tfp_err_t *err)
{
    /* Room for more than anyone may send: a peer that sends too many is seen, not cut. */
    union {
        char buf[CMSG_SPACE(sizeof(int) * (TFX_SHM_MAX_FDS + 4))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = { buf, cap };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                         .msg_controllen = sizeof ctl.buf };
    *nfds = 0;
    *len = 0;
    ssize_t n;
    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return TFP_EAGAIN;
        return tfp_err_set(err, TFP_EIO, "shm: recvmsg: %s", strerror(errno));
    }
    if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
        close_all(&mh);
        return tfp_err_set(err, TFP_EPROTO, "shm: a message %s was cut",
                           mh.msg_flags & MSG_CTRUNC ? "whose descriptors" : "");
    }
    size_t got = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) {
            close_all(&mh);
            return tfp_err_set(err, TFP_EPROTO, "shm: a control message that is not fds");
        }
        got += (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    }
    if (got > max_fds) {
        close_all(&mh);
        return tfp_err_set(err, TFP_EPROTO, "shm: %zu descriptors where at most %zu go", got,
                           max_fds);
    }
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        memcpy(fds + *nfds, CMSG_DATA(cm), k * sizeof(int));
        *nfds += k;
    }
    *len = (size_t)n;
    return TFP_OK;
}
