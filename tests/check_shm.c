/* check_shm.c - the shm suite: the shared-memory layer (transports/shm.c): regions, seals,
 * descriptors over a socketpair, and what a hostile peer can send instead.
 *
 * Single-threaded; every test makes its own socketpair and regions and closes them.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "tests/suites.h"
#include "transports/spare.h"
#include "transports/buf.h"
#include "transports/shm.h"

static void pair(int sv[2])
{
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

/* How many descriptors this process has open. */
static int open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

START_TEST(shm_create_seal_map)
{
    tfx_shm_t m = TFX_SHM_NONE, r = TFX_SHM_NONE;
    tfp_err_t err = { TFP_OK, "" };
    ck_assert_int_eq(tfx_shm_create(8192, "t", &m, &err), TFP_OK);
    memset(m.p, 0xab, 8192);
    uint8_t *was = m.p;
    ck_assert_int_eq(tfx_shm_check(m.fd, 8192, TFX_SHM_SEAL_SIZE, NULL, &err), TFP_EPROTO);
    ck_assert_int_eq(tfx_shm_seal(&m, TFX_SHM_SEAL_WRITE, &err), TFP_OK);
    ck_assert_ptr_eq(m.p, was);                     /* pointers into it stay valid */
    ck_assert_int_eq(m.p[8191], 0xab);
    ck_assert_int_eq(tfx_shm_seal(&m, TFX_SHM_SEAL_WRITE, &err), TFP_OK);     /* again: no-op */
    size_t size = 0;
    ck_assert_int_eq(tfx_shm_check(m.fd, 8192, TFX_SHM_SEAL_WRITE, &size, &err), TFP_OK);
    ck_assert_uint_eq(size, 8192);
    ck_assert_int_eq(tfx_shm_check(m.fd, 8193, TFX_SHM_SEAL_WRITE, NULL, &err), TFP_EPROTO);
    /* No one can write into it again: not write(), not a writable mapping, not mprotect. */
    ck_assert_int_lt(pwrite(m.fd, "x", 1, 0), 0);
    ck_assert(mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd, 0) == MAP_FAILED);
    ck_assert_int_ne(mprotect(m.p, 8192, PROT_READ | PROT_WRITE), 0);
    ck_assert_int_ne(ftruncate(m.fd, 4096), 0);
    int dup_fd = dup(m.fd);
    ck_assert_int_eq(tfx_shm_map(dup_fd, size, 0, &r, &err), TFP_OK);
    ck_assert_int_eq(r.p[0], 0xab);
    ck_assert_int_ne(mprotect(r.p, 8192, PROT_READ | PROT_WRITE), 0);
    tfx_shm_close(&r);
    tfx_shm_close(&m);
    ck_assert_int_eq(m.fd, -1);
    tfx_shm_close(&m);                              /* twice: harmless */
    tfx_shm_close(NULL);
}
END_TEST

/* A ring's region: sealed in size only, the writer keeps writing and the reader sees it. */
START_TEST(shm_size_seal_ring)
{
    tfx_shm_t m = TFX_SHM_NONE, r = TFX_SHM_NONE;
    tfp_err_t err = { TFP_OK, "" };
    ck_assert_int_eq(tfx_shm_create(4096, NULL, &m, &err), TFP_OK);
    ck_assert_int_eq(tfx_shm_seal(&m, TFX_SHM_SEAL_SIZE, &err), TFP_OK);
    ck_assert_int_eq(tfx_shm_check(m.fd, 4096, TFX_SHM_SEAL_SIZE, NULL, &err), TFP_OK);
    ck_assert_int_eq(tfx_shm_check(m.fd, 4096, TFX_SHM_SEAL_WRITE, NULL, &err), TFP_EPROTO);
    ck_assert_int_eq(tfx_shm_map(dup(m.fd), 4096, 0, &r, &err), TFP_OK);
    m.p[100] = 7;
    ck_assert_int_eq(r.p[100], 7);
    ck_assert_int_ne(ftruncate(m.fd, 1 << 20), 0);  /* cannot grow or shrink */
    tfx_shm_close(&r);
    tfx_shm_close(&m);
}
END_TEST

START_TEST(shm_check_refuses)
{
    tfp_err_t err = { TFP_OK, "" };
    ck_assert_int_eq(tfx_shm_check(-1, 1, 0, NULL, &err), TFP_EPROTO);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(tfx_shm_check(p[0], 1, 0, NULL, &err), TFP_EPROTO);   /* not a file */
    close(p[0]);
    close(p[1]);
    /* A memfd made without sealing allowed, and one with no seals. */
    int fd = memfd_create("x", MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 4096), 0);
    ck_assert_int_eq(tfx_shm_check(fd, 4096, 0, NULL, &err), TFP_EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "seal"));
    close(fd);
    fd = memfd_create("y", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_eq(ftruncate(fd, 4096), 0);
    ck_assert_int_eq(tfx_shm_check(fd, 4096, 0, NULL, &err), TFP_EPROTO);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    ck_assert_int_eq(tfx_shm_check(fd, 4096, 0, NULL, &err), TFP_OK);
    ck_assert_int_eq(tfx_shm_check(fd, 4096, TFX_SHM_SEAL_WRITE, NULL, &err), TFP_EPROTO);
    close(fd);
    tfx_shm_t m;
    ck_assert_int_eq(tfx_shm_create(0, NULL, &m, &err), TFP_EINVAL);
}
END_TEST

START_TEST(shm_pass_fds)
{
    int sv[2];
    pair(sv);
    tfx_shm_t m = TFX_SHM_NONE;
    tfp_err_t err = { TFP_OK, "" };
    ck_assert_int_eq(tfx_shm_create(4096, NULL, &m, &err), TFP_OK);
    strcpy((char *)m.p, "hello");
    ck_assert_int_eq(tfx_shm_seal(&m, TFX_SHM_SEAL_WRITE, &err), TFP_OK);
    ck_assert_int_eq(tfx_shm_send(sv[0], "doc", 3, &m.fd, 1, &err), TFP_OK);
    char buf[16];
    size_t len, nfds;
    int fds[2] = { -1, -1 };
    ck_assert_int_eq(tfx_shm_recv(sv[1], buf, sizeof buf, &len, fds, 2, &nfds, &err), TFP_OK);
    ck_assert_uint_eq(len, 3);
    ck_assert_uint_eq(nfds, 1);
    ck_assert_int_ne(fds[0], m.fd);
    ck_assert_int_eq(fcntl(fds[0], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    size_t size;
    ck_assert_int_eq(tfx_shm_check(fds[0], 4096, TFX_SHM_SEAL_WRITE, &size, &err), TFP_OK);
    tfx_shm_t r;
    ck_assert_int_eq(tfx_shm_map(fds[0], size, 0, &r, &err), TFP_OK);
    ck_assert_str_eq((char *)r.p, "hello");
    tfx_shm_close(&r);
    /* No descriptors at all is fine too; the peer closing reads as 0 bytes. */
    ck_assert_int_eq(tfx_shm_send(sv[0], "x", 1, NULL, 0, &err), TFP_OK);
    ck_assert_int_eq(tfx_shm_recv(sv[1], buf, sizeof buf, &len, fds, 2, &nfds, &err), TFP_OK);
    ck_assert_uint_eq(nfds, 0);
    close(sv[0]);
    ck_assert_int_eq(tfx_shm_recv(sv[1], buf, sizeof buf, &len, fds, 2, &nfds, &err), TFP_OK);
    ck_assert_uint_eq(len, 0);
    close(sv[1]);
    tfx_shm_close(&m);
    ck_assert_int_eq(tfx_shm_send(-1, "", 0, NULL, 0, &err), TFP_EINVAL);
}
END_TEST

/* Sends raw: n descriptors of fd in one SCM_RIGHTS message. */
static void send_n(int sock, int fd, int n)
{
    int fds[16];
    for (int i = 0; i < n; i++)
        fds[i] = fd;
    union {
        char buf[CMSG_SPACE(sizeof(int) * 16)];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = { "m", 1 };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                         .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n) };
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n);
    ck_assert_int_eq(sendmsg(sock, &mh, 0), 1);
}

START_TEST(shm_hostile_fd_count)
{
    int sv[2];
    pair(sv);
    tfp_err_t err = { TFP_OK, "" };
    int before = open_fds();
    char buf[16];
    size_t len, nfds;
    int fds[4];
    send_n(sv[0], 0, 2);                            /* two where one is taken */
    ck_assert_int_eq(tfx_shm_recv(sv[1], buf, sizeof buf, &len, fds, 1, &nfds, &err),
                     TFP_EPROTO);
    ck_assert_uint_eq(nfds, 0);
    ck_assert_int_eq(open_fds(), before);           /* nothing leaked into us */
    send_n(sv[0], 0, 12);                           /* more than the control buffer holds */
    ck_assert_int_eq(tfx_shm_recv(sv[1], buf, sizeof buf, &len, fds, 4, &nfds, &err),
                     TFP_EPROTO);
    ck_assert_int_eq(open_fds(), before);
    send_n(sv[0], 0, 1);                            /* one where none is taken */
    ck_assert_int_eq(tfx_shm_recv(sv[1], buf, sizeof buf, &len, fds, 0, &nfds, &err),
                     TFP_EPROTO);
    ck_assert_int_eq(open_fds(), before);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(shm_hostile_truncated)
{
    int sv[2];
    pair(sv);
    tfp_err_t err = { TFP_OK, "" };
    int before = open_fds();
    char big[64];
    memset(big, 'a', sizeof big);
    int fd = 0;
    ck_assert_int_eq(tfx_shm_send(sv[0], big, sizeof big, &fd, 1, &err), TFP_OK);
    char buf[16];
    size_t len, nfds;
    int fds[2];
    /* Longer than the buffer: refused whole, the descriptor closed. */
    ck_assert_int_eq(tfx_shm_recv(sv[1], buf, sizeof buf, &len, fds, 2, &nfds, &err),
                     TFP_EPROTO);
    ck_assert_int_eq(open_fds(), before);
    /* Control data cut by a receiver with too little room (MSG_CTRUNC): the layer's own
     * buffer holds TFX_SHM_MAX_FDS + 4, so a peer sending 16 cuts it. */
    send_n(sv[0], 0, 16);
    ck_assert_int_eq(tfx_shm_recv(sv[1], buf, sizeof buf, &len, fds, 2, &nfds, &err),
                     TFP_EPROTO);
    ck_assert_ptr_nonnull(strstr(err.msg, "cut"));
    ck_assert_int_eq(open_fds(), before);
    /* Non-blocking and empty. */
    ck_assert_int_eq(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
    ck_assert_int_eq(tfx_shm_recv(sv[1], buf, sizeof buf, &len, fds, 2, &nfds, &err),
                     TFP_EAGAIN);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(shm_hostile_credentials)
{
    int sv[2];
    pair(sv);
    tfp_err_t err = { TFP_OK, "" };
    /* SCM_CREDENTIALS is a control message, but not descriptors: refused. */
    int on = 1;
    ck_assert_int_eq(setsockopt(sv[1], SOL_SOCKET, SO_PASSCRED, &on, sizeof on), 0);
    ck_assert_int_eq(tfx_shm_send(sv[0], "c", 1, NULL, 0, &err), TFP_OK);
    char buf[16];
    size_t len, nfds;
    int fds[2];
    ck_assert_int_eq(tfx_shm_recv(sv[1], buf, sizeof buf, &len, fds, 2, &nfds, &err),
                     TFP_EPROTO);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(shm_listen_connect)
{
    char name[TFX_SHM_MAX_NAME + 1];
    tfp_err_t err = { TFP_OK, "" };
    int l = tfx_shm_listen(name, sizeof name, &err);
    ck_assert_int_ge(l, 0);
    ck_assert_ptr_nonnull(strstr(name, "tfetch-shm."));
    int c = tfx_shm_connect(name, &err);
    ck_assert_int_ge(c, 0);
    int a = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    ck_assert_int_ge(a, 0);
    pid_t pid;
    uid_t uid;
    ck_assert_int_eq(tfx_shm_peer(a, &pid, &uid), 0);
    ck_assert_int_eq(pid, getpid());
    ck_assert_int_eq(uid, getuid());
    ck_assert_int_eq(tfx_shm_send(c, "hi", 2, NULL, 0, &err), TFP_OK);
    char buf[8];
    size_t len, nfds;
    int fds[1];
    ck_assert_int_eq(tfx_shm_recv(a, buf, sizeof buf, &len, fds, 1, &nfds, &err), TFP_OK);
    ck_assert_uint_eq(len, 2);
    close(a);
    close(c);
    close(l);
    ck_assert_int_lt(tfx_shm_connect(name, &err), 0);    /* gone with the listener */
    ck_assert_int_eq(err.code, TFP_ECONNECT);
    ck_assert_int_lt(tfx_shm_connect("", &err), 0);
}
END_TEST

/* The socket as a file: mode 0660, made whole; a live one is not taken over, a stale one
 * is, anything else there is refused; unlinked only while it is still ours. */
START_TEST(shm_listen_path)
{
    char dir[] = "/tmp/tfetch-shmpath-XXXXXX", path[128], other[160];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/shm.sock", dir);
    tfp_err_t err = { TFP_OK, "" };
    tfx_shm_file_t f, g;
    int l = tfx_shm_listen_path(path, (gid_t)-1, &f, &err);
    ck_assert_msg(l >= 0, "%s", err.msg);
    struct stat sb;
    ck_assert_int_eq(lstat(path, &sb), 0);
    ck_assert(S_ISSOCK(sb.st_mode));
    ck_assert_int_eq(sb.st_mode & 0777, 0660);
    int c = tfx_shm_connect(path, &err);                   /* by path */
    ck_assert_msg(c >= 0, "%s", err.msg);
    close(c);
    /* A second listener on a live socket: refused, the first untouched. */
    ck_assert_int_lt(tfx_shm_listen_path(path, (gid_t)-1, &g, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "in use"));
    ck_assert_int_ge((c = tfx_shm_connect(path, &err)), 0);
    close(c);
    /* Nothing listens any more (the file stays, as after a crash): taken over. */
    close(l);
    l = tfx_shm_listen_path(path, (gid_t)-1, &g, &err);
    ck_assert_msg(l >= 0, "%s", err.msg);
    /* The old one's unlink leaves the new file alone; the new one's removes it. */
    tfx_shm_unlink_path(path, &f);
    ck_assert_int_eq(lstat(path, &sb), 0);
    tfx_shm_unlink_path(path, &g);
    ck_assert_int_ne(lstat(path, &sb), 0);
    close(l);
    /* Not a socket there, or a relative path: refused. */
    snprintf(other, sizeof other, "%s/file", dir);
    FILE *fp = fopen(other, "w");
    ck_assert_ptr_nonnull(fp);
    fclose(fp);
    ck_assert_int_lt(tfx_shm_listen_path(other, (gid_t)-1, &g, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a socket"));
    ck_assert_int_lt(tfx_shm_listen_path("rel.sock", (gid_t)-1, &g, &err), 0);
    unlink(other);
    ck_assert_int_eq(rmdir(dir), 0);                     /* no temporary left behind */
}
END_TEST

/* What backs the page at p in this process: 1 a memfd ("/memfd:" in /proc/self/maps), 0
 * anything else (anonymous memory), -1 nothing. */
static int memfd_backed(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    int r = -1;
    while (r < 0 && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)p >= lo && (uintptr_t)p < hi)
            r = strstr(line, "/memfd:") != NULL;
    }
    fclose(f);
    return r;
}

/* The body allocator (transports/buf.c): large buffers are anonymous memory (a UCX GET out of
 * the store reads huge pages), grown in place; tfx_buf_seal moves one into a sealed memfd at
 * the same address with every byte kept, and it is never reused after. */
START_TEST(shm_buf_seal_moves)
{
    size_t cap;
    uint8_t *p = tfx_buf_alloc((size_t)3 << 20, &cap);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(memfd_backed(p), 0);
    ck_assert_int_eq(tfx_buf_fd(p), -1);
    ck_assert_int_eq(tfx_buf_sealed(p), 0);
    memset(p, 5, cap);
    p = tfx_buf_grow(p, &cap, cap, (size_t)19 << 20);  /* 20 MiB: the last chunk partial */
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(cap, (size_t)20 << 20);
    ck_assert_int_eq(memfd_backed(p + cap - 1), 0);
    ck_assert_int_eq(p[(3 << 20) - 1], 5);
    for (size_t i = 0; i < cap; i++)
        p[i] = (uint8_t)(i * 7 + (i >> 20));
    int before = open_fds();
    int sfd = tfx_buf_seal(p, cap);
    ck_assert_int_ge(sfd, 0);
    ck_assert_int_eq(open_fds(), before + 1);          /* its memfd, nothing else left open */
    ck_assert_int_eq(tfx_buf_seal(p, cap), sfd);        /* idempotent */
    ck_assert_int_eq(tfx_buf_fd(p), sfd);
    ck_assert_int_eq(tfx_buf_sealed(p), 1);
    ck_assert_int_eq(memfd_backed(p), 1);               /* same address, the memfd's pages */
    ck_assert_int_eq(memfd_backed(p + cap - 1), 1);
    size_t wrong = 0;
    for (size_t i = 0; i < cap; i++)
        wrong += p[i] != (uint8_t)(i * 7 + (i >> 20));
    ck_assert_uint_eq(wrong, 0);
    tfp_err_t err;
    size_t size;
    ck_assert_int_eq(tfx_shm_check(sfd, cap, TFX_SHM_SEAL_WRITE, &size, &err), TFP_OK);
    ck_assert_uint_eq(size, cap);
    ck_assert(mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0) == MAP_FAILED);
    ck_assert_int_ne(mprotect(p, 4096, PROT_READ | PROT_WRITE), 0);   /* ours, read-only too */
    tfx_shm_t peer;
    ck_assert_int_eq(tfx_shm_map(dup(sfd), cap, 0, &peer, &err), TFP_OK);
    ck_assert_int_eq(memcmp(peer.p, p, cap), 0);
    size_t c2 = cap;
    ck_assert_ptr_null(tfx_buf_grow(p, &c2, cap, cap + 1));  /* a sealed buffer never changes */
    ck_assert_uint_eq(c2, cap);
    tfx_buf_free(p, cap);                               /* sealed: unmapped, not cached */
    ck_assert_int_eq(tfx_buf_fd(p), -1);
    ck_assert_uint_eq(peer.p[cap - 1], (uint8_t)((cap - 1) * 7 + ((cap - 1) >> 20)));
    tfx_shm_close(&peer);
    ck_assert_int_eq(open_fds(), before);
    /* The next buffer of that size is fresh, writable memory. */
    uint8_t *q = tfx_buf_alloc(cap, &c2);
    ck_assert_int_eq(memfd_backed(q), 0);
    q[0] = q[c2 - 1] = 1;
    tfx_buf_free(q, c2);
    /* Small ones are malloc's: never sealed in place. */
    q = tfx_buf_alloc(100, &cap);
    ck_assert_int_eq(tfx_buf_fd(q), -1);
    ck_assert_int_eq(tfx_buf_seal(q, cap), -1);
    tfx_buf_free(q, cap);
    tfx_buf_trim();
}
END_TEST

/* The kB of PMD-mapped shmem in this process's mapping that holds p (smaps), or -1. */
static long pmd_mapped_kb(const void *p)
{
    char line[256];
    unsigned long lo, hi, at = (unsigned long)(uintptr_t)p;
    FILE *f = fopen("/proc/self/smaps", "r");
    long kb = -1;
    int in = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            in = lo <= at && at < hi;
        else if (in && sscanf(line, "ShmemPmdMapped: %ld kB", &kb) == 1)
            break;
    }
    if (f)
        fclose(f);
    return kb;
}

/* Whether this host may refuse collapsing: shmem_enabled deny, or a kernel before 6.1. */
static int collapse_refused_here(int e)
{
    char mode[64] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f))
            mode[0] = '\0';
        fclose(f);
    }
    return e == EINVAL && (!f || strstr(mode, "[deny]"));
}

/* Regions of 2 MiB or more are mapped 2 MiB-aligned, and tfx_shm_collapse makes their
 * aligned part huge pages (where the kernel can), keeping the bytes already there; another
 * process's mapping (tfx_shm_map, aligned too) then maps them a PMD at a time. */
START_TEST(shm_collapse_huge_pages)
{
    tfx_shm_t m;
    tfp_err_t err;
    size_t size = ((size_t)6 << 20) + 12345;
    ck_assert_int_eq(tfx_shm_create(size, "t", &m, &err), TFP_OK);
    ck_assert_uint_eq((uintptr_t)m.p & (((uintptr_t)2 << 20) - 1), 0);
    m.p[7] = 0x5a;
    m.p[(3u << 20) + 11] = 0xa5;
    m.p[size - 1] = 0x77;
    int e = tfx_shm_collapse(&m, 0);
    if (e != 0 && collapse_refused_here(e)) {
        fprintf(stderr, "shm_collapse_huge_pages: this kernel collapses no shmem (%s)\n",
                strerror(e));
        tfx_shm_close(&m);
        return;
    }
    ck_assert_msg(e == 0, "MADV_COLLAPSE: %s", strerror(e));
    ck_assert_int_eq(m.p[7], 0x5a);
    ck_assert_int_eq(m.p[(3u << 20) + 11], 0xa5);
    ck_assert_int_eq(m.p[size - 1], 0x77);
    ck_assert_int_eq(m.p[(5u << 20) + 3], 0);              /* a new page: zeros */
    ck_assert_int_ge(pmd_mapped_kb(m.p), 6 << 10);
    tfx_shm_t r;
    ck_assert_int_eq(tfx_shm_map(dup(m.fd), size, TFX_SHM_MAP_READ, &r, &err), TFP_OK);
    ck_assert_uint_eq((uintptr_t)r.p & (((uintptr_t)2 << 20) - 1), 0);
    ck_assert_int_eq(r.p[(3u << 20) + 11], 0xa5);
    ck_assert_int_eq(r.p[7] + r.p[(5u << 20) + 3], 0x5a);
    ck_assert_int_ge(pmd_mapped_kb(r.p), 4 << 10);
    tfx_shm_close(&r);
    /* Under 2 MiB: nothing to collapse, said so. */
    tfx_shm_t small;
    ck_assert_int_eq(tfx_shm_create(1u << 20, "t", &small, &err), TFP_OK);
    ck_assert_int_eq(tfx_shm_collapse(&small, 0), EINVAL);
    tfx_shm_close(&small);
    tfx_shm_close(&m);
    /* Out of budget: the first 2 MiB step is done, the rest left in 4 KiB pages. */
    ck_assert_int_eq(tfx_shm_create((size_t)96 << 20, "t", &m, &err), TFP_OK);
    ck_assert_int_eq(tfx_shm_collapse(&m, 1), ETIME);
    ck_assert_int_eq(pmd_mapped_kb(m.p), 2 << 10);
    ck_assert_int_eq(tfx_shm_collapse(&m, 0), 0);          /* no budget: the rest too */
    ck_assert_int_eq(pmd_mapped_kb(m.p), 96 << 10);
    tfx_shm_close(&m);
}
END_TEST

/* The allocators' spare list (transports/spare.h): last in, first out, never more than its
 * bound (the rest is the caller's to free), nothing at all under ASan; free_all empties it. */
START_TEST(spare_list_bounded)
{
    tfx_spare_t s;
    tfx_spare_init(&s, 2);
    void *a = malloc(64), *b = malloc(64), *c = malloc(64);
    ck_assert_ptr_null(tfx_spare_take(&s));
#ifdef __SANITIZE_ADDRESS__
    ck_assert_int_eq(tfx_spare_put(&s, a), 0);
    free(a);
    free(b);
    free(c);
#else
    ck_assert_int_eq(tfx_spare_put(&s, a), 1);
    ck_assert_int_eq(tfx_spare_put(&s, b), 1);
    ck_assert_int_eq(tfx_spare_put(&s, c), 0);     /* full */
    free(c);
    ck_assert_ptr_eq(tfx_spare_take(&s), b);
    ck_assert_int_eq(tfx_spare_put(&s, b), 1);
    ck_assert_uint_eq(s.n, 2);
    tfx_spare_free_all(&s);
    ck_assert_uint_eq(s.n, 0);
    ck_assert_ptr_null(tfx_spare_take(&s));
#endif
}
END_TEST

Suite *suite_shm(void)
{
    Suite *s = suite_create("shm");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, shm_create_seal_map);
    tcase_add_test(tc, shm_size_seal_ring);
    tcase_add_test(tc, shm_check_refuses);
    tcase_add_test(tc, shm_pass_fds);
    tcase_add_test(tc, shm_hostile_fd_count);
    tcase_add_test(tc, shm_hostile_truncated);
    tcase_add_test(tc, shm_hostile_credentials);
    tcase_add_test(tc, shm_listen_connect);
    tcase_add_test(tc, shm_listen_path);
    tcase_add_test(tc, shm_buf_seal_moves);
    tcase_add_test(tc, spare_list_bounded);
    tcase_add_test(tc, shm_collapse_huge_pages);
    suite_add_tcase(s, tc);
    return s;
}
