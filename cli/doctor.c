/* doctor.c - `tfetch doctor`: what limits tfetch between this host and a server, in words and
 * as JSON, and what to change.
 *
 * A newcomer's question is "why is it slow?". The doctor answers it from what this process
 * can see: the server's /v1/info, what libtfetch found when it upgraded (same host or not,
 * the shared-memory connection and why not, the server's uid, the UCX connection and why
 * not: tf_transport_info_t), this host's limits (/proc, /sys, getrlimit) and, for UCX ports
 * a firewall may drop, TCP connects of its own. Then a short probe transfer over every path
 * that runs (shared memory, UCX, HTTP), each against its own ceiling measured in the same
 * run: memcpy for the paths that copy through memory, a raw TCP stream over this host's
 * loopback for HTTP and UCX over TCP. The probe with the smallest share of its ceiling is
 * named the slowest. Exit status: 0 the fast path is available (same host: shm/memfd;
 * another host: UCX), 1 it is not, 2 no server or a usage error.
 *
 * Uses only the public API (client/tfetch.h) and system headers, like the rest of the tool.
 * Single-threaded but for the TCP ceiling's reader thread. Everything it allocates is freed
 * before it returns.
 */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/doctor.h"
#include "client/tfetch.h"

#define MAX_FINDINGS 32
#define MAX_PROBES 8
#define DEFAULT_PROBE (16u << 20)       /* bytes of each probe transfer */
#define PROBE_RUNS 3                    /* best of */
#define PORT_TIMEOUT_MS 500             /* a UCX port's TCP connect */

typedef enum { LV_OK, LV_INFO, LV_WARN, LV_FAIL } level_t;
static const char *const level_names[] = {"ok", "info", "warn", "fail"};

typedef struct {
    const char *name;               /* static: "server", "same-host", "shm", ... */
    level_t level;
    char what[512];                 /* what was found, in words */
    char fix[384];                  /* what to change; "" when nothing */
} finding_t;

typedef struct {
    const char *path;               /* "shm/memfd", "ucx", "http" */
    const char *op;                 /* "put", "get" */
    char transport[32];             /* what carried it, as the library says */
    double gbps;                    /* best of PROBE_RUNS; 0 when it failed */
    const char *ceiling;            /* "memcpy", "tcp" */
    double ceiling_gbps;
    char error[256];
} probe_t;

typedef struct {
    const char *base;
    int json;
    size_t size;                    /* probe bytes; 0: no probes */
    tf_client_t *c;
    char *info;                     /* /v1/info's JSON, or NULL */
    tf_transport_info_t ti;
    finding_t f[MAX_FINDINGS];
    int nf;
    probe_t p[MAX_PROBES];
    int np;
    double memcpy_gbps, tcp_gbps;
    int fast;                       /* the fast path is available */
    char fast_path[48];             /* which, or which is missing */
    char fast_why[384];             /* why not */
    int slowest;                    /* index into p, or -1 */
    char version[32];               /* the server's, from /v1/info ("" when unreached) */
    long proto_min, proto_max;      /* its protocol range (1..1: it names none) */
} doctor_t;

/* ---- small helpers ------------------------------------------------------------------------ */

static finding_t *add(doctor_t *d, const char *name, level_t lv, const char *fix,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static finding_t *add(doctor_t *d, const char *name, level_t lv, const char *fix,
                      const char *fmt, ...)
{
    if (d->nf >= MAX_FINDINGS)
        return NULL;
    finding_t *f = &d->f[d->nf++];
    f->name = name;
    f->level = lv;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->what, sizeof f->what, fmt, ap);
    va_end(ap);
    snprintf(f->fix, sizeof f->fix, "%s", fix ? fix : "");
    return f;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The first line of a small file, without its newline; -1 if it cannot be read. */
static int read_line(const char *path, char *buf, size_t n)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return -1;
    int ok = fgets(buf, (int)n, fp) != NULL;
    fclose(fp);
    if (!ok)
        return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

static long read_long(const char *path, long dflt)
{
    char b[64];
    return read_line(path, b, sizeof b) == 0 ? strtol(b, NULL, 10) : dflt;
}

/* The [selected] word of a sysfs choice file ("always [madvise] never"). */
static int read_choice(const char *path, char *out, size_t n)
{
    char b[256];
    if (read_line(path, b, sizeof b) != 0)
        return -1;
    const char *l = strchr(b, '['), *r = l ? strchr(l, ']') : NULL;
    if (!l || !r)
        return -1;
    snprintf(out, n, "%.*s", (int)(r - l - 1), l + 1);
    return 0;
}

/* A /proc/meminfo value in kB; -1 if absent. */
static long meminfo_kb(const char *key)
{
    FILE *fp = fopen("/proc/meminfo", "r");
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    if (!fp)
        return -1;
    while (fgets(line, sizeof line, fp))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = strtol(line + kl + 1, NULL, 10);
            break;
        }
    fclose(fp);
    return v;
}

/* ---- reading /v1/info (flat lookups: the doctor needs a handful of fields) ------------------ */

/* The value after "key": in json[0..end), skipping string contents; NULL if absent. */
static const char *json_find(const char *json, const char *end, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = json; p && p < end; p++) {
        if (*p != '"')
            continue;
        const char *q = p + 1;
        while (q < end && *q != '"')
            q += *q == '\\' ? 2 : 1;
        if (q >= end)
            return NULL;
        if ((size_t)(q - p - 1) == kl && memcmp(p + 1, key, kl) == 0 && q[1] == ':')
            return q + 2;
        p = q;
    }
    return NULL;
}

/* The end of the object or array that starts at p ('{' or '['), past its closing bracket. */
static const char *json_skip(const char *p, const char *end)
{
    int depth = 0;
    for (; p < end; p++) {
        if (*p == '"') {
            for (p++; p < end && *p != '"'; p += *p == '\\' ? 2 : 1)
                ;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if ((*p == '}' || *p == ']') && --depth == 0) {
            return p + 1;
        }
    }
    return end;
}

/* The object member key: [*from, *to), or 0 when absent or not an object. */
static int json_obj(const char *json, const char *key, const char **from, const char **to)
{
    const char *end = json + strlen(json), *v = json_find(json, end, key);
    if (!v || *v != '{')
        return 0;
    *from = v;
    *to = json_skip(v, end);
    return 1;
}

static int json_str(const char *from, const char *to, const char *key, char *out, size_t n)
{
    const char *v = json_find(from, to, key);
    size_t k = 0;
    if (!v || *v != '"')
        return 0;
    for (v++; v < to && *v != '"' && k + 1 < n; v++) {
        if (*v == '\\' && v + 1 < to)
            v++;
        out[k++] = *v;
    }
    out[k] = '\0';
    return 1;
}

static long json_num(const char *from, const char *to, const char *key, long dflt)
{
    const char *v = json_find(from, to, key);
    return v && (isdigit((unsigned char)*v) || *v == '-') ? strtol(v, NULL, 10) : dflt;
}

/* 1 true, 0 false, -1 absent. */
static int json_bool(const char *from, const char *to, const char *key)
{
    const char *v = json_find(from, to, key);
    return !v ? -1 : strncmp(v, "true", 4) == 0 ? 1 : strncmp(v, "false", 5) == 0 ? 0 : -1;
}

/* ---- the server ----------------------------------------------------------------------------- */

/* host and port of base ("http://h:p/..."), for the TCP probes of UCX's ports. */
static int base_host(const char *base, char *host, size_t n, int *tls)
{
    const char *p = strstr(base, "://");
    *tls = strncmp(base, "https://", 8) == 0;
    if (!p)
        return -1;
    p += 3;
    size_t k;
    if (*p == '[') {                            /* [v6]:port */
        k = strcspn(++p, "]");
    } else {
        k = strcspn(p, ":/");
    }
    if (k == 0 || k >= n)
        return -1;
    snprintf(host, n, "%.*s", (int)k, p);
    return 0;
}

static int check_server(doctor_t *d)
{
    tf_status_t st = tf_info(d->c, d->base, &d->info);
    if (st != TF_OK) {
        const tf_result_t *r = tf_client_last(d->c);
        add(d, "server", LV_FAIL, "start tfetchd there, or name the right server (BASE, or "
            "TFETCH_URL)", "no tfetchd answers at %s: %s (%s)", d->base,
            r->error[0] ? r->error : tf_strerror(st), tf_err_name(st));
        return -1;
    }
    const char *end = d->info + strlen(d->info), *pf, *pt;
    char version[32] = "?", tls[8] = "", auth[16] = "";
    json_str(d->info, end, "version", version, sizeof version);
    json_str(d->info, end, "tls", tls, sizeof tls);
    json_str(d->info, end, "auth", auth, sizeof auth);
    long pmin = 1, pmax = 1;
    if (json_obj(d->info, "protocol", &pf, &pt)) {
        pmin = json_num(pf, pt, "min", 1);
        pmax = json_num(pf, pt, "max", 1);
    }
    snprintf(d->version, sizeof d->version, "%s", version);
    d->proto_min = pmin;
    d->proto_max = pmax;
    add(d, "server", LV_OK, NULL, "tfetchd %s answers at %s; it speaks protocol %ld..%ld%s",
        version, d->base, pmin, pmax, pmin == 1 && pmax == 1 ? " (an older release that names "
        "none: 1)" : "");
    if (strcmp(tls, "on") == 0)
        add(d, "tls", LV_INFO, NULL, "TLS is on: HTTP bodies are encrypted (CPU per byte); UCX "
            "is offered only on this host and on links named in ucx-trusted");
    else
        add(d, "tls", LV_INFO, NULL, "TLS is off: bodies cross the network in the clear over "
            "HTTP and UCX");
    if (strcmp(auth, "bearer") == 0)
        add(d, "auth", LV_INFO, NULL, "the server wants a bearer token (TFETCH_TOKEN); the "
            "probe needs write and delete on tf-doctor-*");
    return 0;
}

/* ---- same host, shared memory, uids --------------------------------------------------------- */

static int in_group(gid_t g)
{
    if (getegid() == g)
        return 1;
    gid_t groups[256];
    int n = getgroups(256, groups);
    for (int i = 0; i < n; i++)
        if (groups[i] == g)
            return 1;
    return 0;
}

/* Why this process cannot connect to a socket file, from its mode and group (or ""). */
static void socket_file_why(const char *path, char *fix, size_t n)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(fix, n, "%s does not exist here (%s): run the client in tfetchd's mount "
                 "namespace, or mount its runtime directory into the container", path,
                 strerror(errno));
        return;
    }
    if (geteuid() == 0 || geteuid() == sb.st_uid)
        return;
    if (!(sb.st_mode & S_IWGRP) || !in_group(sb.st_gid)) {
        struct group *gr = getgrgid(sb.st_gid);
        char gname[64];
        snprintf(gname, sizeof gname, "%s", gr ? gr->gr_name : "");
        if (!gname[0])
            snprintf(gname, sizeof gname, "%u", (unsigned)sb.st_gid);
        snprintf(fix, n, "the shm socket %s is mode %03o, group %s, and uid %u is not in that "
                 "group: add it (usermod -aG %s USER, then log in again), or start tfetchd "
                 "with shm-socket-group set to a group this user is in", path,
                 (unsigned)(sb.st_mode & 0777), gname, (unsigned)geteuid(), gname);
    }
}

static void check_same_host(doctor_t *d)
{
    tf_status_t ust = tf_client_upgrade(d->c, d->base);
    d->ti = (tf_transport_info_t)TF_TRANSPORT_INFO_INIT;
    tf_client_transport_info(d->c, d->base, &d->ti);
    const tf_transport_info_t *ti = &d->ti;
    const char *sf = NULL, *st = NULL;
    char sock[128] = "";
    int shm_on = -1;
    if (json_obj(d->info, "shm", &sf, &st)) {
        shm_on = json_bool(sf, st, "enabled");
        json_str(sf, st, "socket", sock, sizeof sock);
    }

    if (strstr(ti->reason, "protocol version mismatch"))
        add(d, "protocol", LV_FAIL, "upgrade the older side (PROTOCOL.md section 2.4: a "
            "release speaks with the one before it)", "%s", ti->reason);
    if (ti->same_host == 1)
        add(d, "same-host", LV_OK, NULL, "the server runs on this host (same boot id and "
            "network namespace): the same-host path applies");
    else if (ti->same_host == 0)
        add(d, "same-host", LV_INFO, NULL, "the server is on another host, or in another "
            "network namespace of this one: the network paths apply (UCX, else HTTP)");
    else
        add(d, "same-host", LV_WARN, NULL, "not known: the upgrade got no answer (%s)",
            ti->reason[0] ? ti->reason : tf_strerror(ust));

    if (ti->same_host == 1) {
        if (ti->shm[0]) {
            add(d, "shm", LV_OK, NULL, "shared memory (shm/memfd) is connected: gets map the "
                "server's pages, puts fill memory it lends");
        } else {
            char fix[384] = "";
            if (shm_on == 0)
                snprintf(fix, sizeof fix, "start tfetchd with --shm on");
            else if (sock[0] == '/')
                socket_file_why(sock, fix, sizeof fix);
            add(d, "shm", LV_FAIL, fix[0] ? fix : NULL, "no shared-memory connection: %s",
                ti->shm_reason[0] ? ti->shm_reason : "the server offered none");
        }
    }
    if (ti->server_uid >= 0 && ti->same_host == 1) {
        if ((uid_t)ti->server_uid == geteuid())
            add(d, "uid", LV_OK, NULL, "tfetchd runs as this uid (%ld): UCX may also use its "
                "shared memory and CMA between the two", ti->server_uid);
        else
            add(d, "uid", LV_INFO, NULL, "tfetchd runs as uid %ld, this process as %u: UCX's "
                "shared memory and CMA are not used across uids (the shm socket's memfds "
                "are, and need no ptrace rights)", ti->server_uid, (unsigned)geteuid());
    }
    long scope = read_long("/proc/sys/kernel/yama/ptrace_scope", -1);
    if (ti->same_host == 1 && scope >= 1)
        add(d, "ptrace-scope", ti->shm[0] ? LV_INFO : LV_WARN,
            ti->shm[0] ? NULL : "sysctl kernel.yama.ptrace_scope=0, or fix the shm socket "
            "above (it needs no ptrace rights)",
            "kernel.yama.ptrace_scope is %ld: CMA (process_vm_readv) between processes that "
            "are not parent and child is refused, so UCX copies through its own shared "
            "memory instead", scope);
}

/* ---- UCX ------------------------------------------------------------------------------------ */

/* 1 if a TCP connect to host:port completes within PORT_TIMEOUT_MS. */
static int port_answers(const char *host, int port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%d", port);
    if (getaddrinfo(host, ps, &hints, &ai) != 0)
        return 0;
    int ok = 0;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc == 0) {
            ok = 1;
        } else if (errno == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            int err = 0;
            socklen_t el = sizeof err;
            if (poll(&pfd, 1, PORT_TIMEOUT_MS) == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
                ok = 1;
        }
        close(fd);
    }
    freeaddrinfo(ai);
    return ok;
}

/* The local UCX-capable hardware this process can see. */
static void local_devices(char *out, size_t n)
{
    char line[64];
    size_t k = 0;
    out[0] = '\0';
    static const char *const rdma[] = {"mlx5_0", "mlx5_1", "mlx4_0", "rxe0", "siw0",
                                       "irdma0", "bnxt_re0", "efa_0"};
    for (size_t i = 0; i < sizeof rdma / sizeof rdma[0] && k + 1 < n; i++) {
        char p[160];
        snprintf(p, sizeof p, "/sys/class/infiniband/%s/ports/1/state", rdma[i]);
        if (read_line(p, line, sizeof line) == 0)
            k += (size_t)snprintf(out + k, n - k, "%s%s (%s)", k ? ", " : "", rdma[i], line);
    }
    struct stat sb;
    if (k + 1 < n && stat("/dev/nvidiactl", &sb) == 0)
        k += (size_t)snprintf(out + k, n - k, "%sa CUDA device (cuda_ipc, cuda_copy)",
                              k ? ", " : "");
    if (k == 0)
        snprintf(out, n, "no RDMA device or GPU: UCX has shared memory and TCP");
}

static void check_ucx(doctor_t *d)
{
    const tf_transport_info_t *ti = &d->ti;
    const char *uf, *ut;
    char reason[256] = "", ports[32] = "", devs[256];
    int enabled = -1;
    if (json_obj(d->info, "ucx", &uf, &ut)) {
        enabled = json_bool(uf, ut, "enabled");
        json_str(uf, ut, "reason", reason, sizeof reason);
        json_str(uf, ut, "ports", ports, sizeof ports);
    }
    local_devices(devs, sizeof devs);
    add(d, "ucx-devices", LV_INFO, NULL, "here: %s; this process's UCX moves %s memory", devs,
        ti->ucx_memory[0] ? ti->ucx_memory : "(UCX not started)");
    if (enabled == 0) {
        add(d, "ucx", ti->same_host == 1 ? LV_INFO : LV_FAIL, "start tfetchd with --ucx on "
            "(and a UCX it can load)", "the server offers no UCX: %s",
            reason[0] ? reason : "off");
        return;
    }
    if (strncmp(ti->transport, "ucx/", 4) == 0) {
        int tcp = strstr(ti->transport, "tcp") != NULL;
        add(d, "ucx", !tcp ? LV_OK : ti->same_host == 1 ? LV_INFO : LV_WARN,
            tcp && ti->same_host != 1 ? "an RDMA link (InfiniBand, RoCE) between the hosts "
            "lets UCX bypass TCP; with UCX_TLS the transports can be narrowed" : NULL,
            "UCX is connected over %s%s", ti->transport + 4,
            !tcp ? "" : ti->same_host == 1 ? " although both are on this host: its shared "
            "memory was ruled out (the uids differ, or UCX_TLS)" : " (about what HTTP "
            "reaches, with fewer copies)");
        return;
    }
    /* Offered and not connected: look at its ports from here. */
    char host[256];
    int tls, lo = 0, hi = 0, answer = 0, tried = 0;
    if (ports[0] && sscanf(ports, "%d-%d", &lo, &hi) == 2 && lo > 0 && hi >= lo &&
        base_host(d->base, host, sizeof host, &tls) == 0) {
        for (int p = lo; p <= hi && tried < 16; p++, tried++)
            answer += port_answers(host, p);
        if (answer == 0)
            add(d, "ucx-ports", LV_FAIL, "open TCP ports in the ucx-ports range from this "
                "host to the server (the firewall passes the HTTP port only)",
                "none of UCX's ports %s on %s answers from here while the HTTP port does: a "
                "firewall drops them (%s)", ports, host, ti->reason[0] ? ti->reason : "no "
                "UCX connection");
        else
            add(d, "ucx-ports", LV_WARN, NULL, "%d of UCX's ports %s answer from here, yet "
                "UCX did not connect: %s", answer, ports, ti->reason);
    } else {
        add(d, "ucx", ti->same_host == 1 && d->ti.shm[0] ? LV_INFO : LV_FAIL,
            "start tfetchd with --ucx-ports LO-HI and open that range in the firewall "
            "beside the HTTP port (UCX listens on a random port otherwise)",
            "the server offers UCX but no UCX connection was made from here: %s",
            ti->reason[0] ? ti->reason : "unknown");
    }
}

/* ---- this host's limits ----------------------------------------------------------------------- */

static void check_host(doctor_t *d)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        char fix[160];
        snprintf(fix, sizeof fix, "ulimit -n %llu (the hard limit), or LimitNOFILE= in the "
                 "unit", (unsigned long long)rl.rlim_max);
        add(d, "ulimit-n", rl.rlim_cur < 4096 ? LV_WARN : LV_OK,
            rl.rlim_cur < 4096 ? fix : NULL, "open files: %llu (hard %llu); each connection "
            "and each mapped document holds one", (unsigned long long)rl.rlim_cur,
            (unsigned long long)rl.rlim_max);
    }
    long somax = read_long("/proc/sys/net/core/somaxconn", -1);
    if (somax >= 0)
        add(d, "somaxconn", somax < 1024 ? LV_WARN : LV_OK,
            somax < 1024 ? "sysctl net.core.somaxconn=4096" : NULL,
            "net.core.somaxconn is %ld: a tfetchd on this host queues at most that many "
            "connections not yet accepted", somax);
    char thp[32] = "", shm[32] = "";
    if (read_choice("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp) == 0)
        add(d, "thp", strcmp(thp, "never") == 0 ? LV_WARN : LV_OK,
            strcmp(thp, "never") == 0 ? "echo madvise > /sys/kernel/mm/transparent_hugepage/"
            "enabled" : NULL, "transparent huge pages: %s (large bodies ask for them with "
            "madvise)", thp);
    if (read_choice("/sys/kernel/mm/transparent_hugepage/shmem_enabled", shm, sizeof shm) == 0) {
        int bad = strcmp(shm, "never") == 0 || strcmp(shm, "deny") == 0;
        add(d, "thp-shmem", bad ? LV_WARN : LV_OK,
            bad ? "echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled" : NULL,
            "shared-memory huge pages: %s%s", shm, bad ? ": documents put over shm sit in "
            "4 KiB pages, and UCX GETs of them run about half as fast" : "");
    }
    long total = meminfo_kb("HugePages_Total"), freep = meminfo_kb("HugePages_Free"),
         sz = meminfo_kb("Hugepagesize");
    if (total >= 0)
        add(d, "hugepages", LV_INFO, NULL, "huge-page reserve: %ld of %ld free (%ld kB "
            "each); tfetch uses transparent huge pages, not this reserve", freep, total, sz);
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (64u << 20)) {
        char devs[256];
        local_devices(devs, sizeof devs);
        if (strstr(devs, "ACTIVE"))
            add(d, "memlock", LV_WARN, "ulimit -l unlimited, or LimitMEMLOCK=infinity in the "
                "unit", "locked memory is limited to %llu KiB: RDMA registers (pins) the "
                "buffers it moves", (unsigned long long)(rl.rlim_cur >> 10));
    }
}

/* ---- ceilings and probes -------------------------------------------------------------------- */

static double ceiling_memcpy(size_t n)
{
    char *a = malloc(n), *b = malloc(n);
    double best = 0;
    if (a && b) {
        memset(a, 1, n);
        memset(b, 2, n);
        for (int i = 0; i < PROBE_RUNS; i++) {
            double t0 = now_s();
            memcpy(b, a, n);
            double t = now_s() - t0;
            if (t > 0 && n / t / 1e9 > best)
                best = (double)n / t / 1e9;
        }
    }
    free(a);
    free(b);
    return best;
}

typedef struct {
    int fd;
    size_t got;
} sink_t;

static void *tcp_sink(void *arg)
{
    sink_t *s = arg;
    size_t cap = 4u << 20;
    char *buf = malloc(cap);
    ssize_t k;
    if (!buf)
        return NULL;
    while ((k = read(s->fd, buf, cap)) > 0)
        s->got += (size_t)k;
    free(buf);
    return NULL;
}

/* Reads every byte of a reply, as its consumer would: a mapped reply's pages are touched. */
static uint64_t touch(const tf_doc_t *doc)
{
    uint64_t sum = 0;
    for (size_t i = 0; doc && i < tf_doc_count(doc); i++) {
        const tf_tensor_t *t = tf_doc_at(doc, i);
        const unsigned char *p = t->data;
        size_t n = t->nbytes / 8;
        for (size_t k = 0; k < n; k++) {
            uint64_t w;
            memcpy(&w, p + 8 * k, 8);
            sum += w;
        }
    }
    return sum;
}

/* A raw TCP stream of n bytes over this host's loopback: the ceiling of the paths that
 * cross TCP. 0 when a socket call fails. */
static double ceiling_tcp(size_t n)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), cs = -1, as = -1;
    char *buf = malloc(4u << 20);
    double best = 0;
    if (ls < 0 || !buf || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &al) != 0)
        goto out;
    memset(buf, 3, 4u << 20);
    for (int run = 0; run < PROBE_RUNS; run++) {
        cs = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (cs < 0 || connect(cs, (struct sockaddr *)&a, sizeof a) != 0 ||
            (as = accept(ls, NULL, NULL)) < 0)
            goto out;
        int big = 4 << 20;              /* as curl and libmicrohttpd get: autotuned, large */
        setsockopt(cs, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
        setsockopt(as, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
        sink_t s = {.fd = as};
        pthread_t th;
        if (pthread_create(&th, NULL, tcp_sink, &s) != 0)
            goto out;
        double t0 = now_s();
        size_t sent = 0;
        while (sent < n) {
            size_t k = n - sent < (4u << 20) ? n - sent : (4u << 20);
            ssize_t w = write(cs, buf, k);
            if (w <= 0)
                break;
            sent += (size_t)w;
        }
        shutdown(cs, SHUT_WR);
        pthread_join(th, NULL);
        double t = now_s() - t0;
        if (s.got == n && t > 0 && n / t / 1e9 > best)
            best = (double)n / t / 1e9;
        close(as);
        close(cs);
        as = cs = -1;
    }
out:
    if (as >= 0)
        close(as);
    if (cs >= 0)
        close(cs);
    if (ls >= 0)
        close(ls);
    free(buf);
    return best;
}

static volatile uint64_t touched;

/* One probe: PROBE_RUNS puts or gets of doc under policy, the best rate kept. */
static void probe(doctor_t *d, const char *path, tf_transport_t policy, const char *op,
                  const char *url, const tf_doc_t *doc, const char *ceiling, double cgbps)
{
    if (d->np >= MAX_PROBES)
        return;
    probe_t *p = &d->p[d->np++];
    memset(p, 0, sizeof *p);
    p->path = path;
    p->op = op;
    p->ceiling = ceiling;
    p->ceiling_gbps = cgbps;
    tf_client_set_transport(d->c, policy);
    for (int i = 0; i < PROBE_RUNS; i++) {
        tf_doc_t *got = NULL;
        double t0 = now_s();
        tf_status_t st = strcmp(op, "put") == 0 ? tf_put(d->c, url, doc)
                                                 : tf_get(d->c, url, 0, &got);
        touched = touch(got);               /* volatile: the reads are made */
        double t = now_s() - t0;
        tf_doc_free(got);
        const tf_result_t *r = tf_client_last(d->c);
        if (st != TF_OK) {
            snprintf(p->error, sizeof p->error, "%.200s (%s)", r->error[0] ? r->error
                     : tf_strerror(st), tf_err_name(st));
            p->gbps = 0;
            return;
        }
        snprintf(p->transport, sizeof p->transport, "%s", r->transport);
        if (t > 0 && d->size / t / 1e9 > p->gbps)
            p->gbps = (double)d->size / t / 1e9;
    }
}

static void run_probes(doctor_t *d)
{
    if (d->size == 0)
        return;
    d->memcpy_gbps = ceiling_memcpy(d->size);
    d->tcp_gbps = ceiling_tcp(d->size);
    uint8_t *data = malloc(d->size);
    tf_doc_t *doc = tf_doc_new();
    char url[1024];
    int64_t shape[1] = {(int64_t)d->size};
    snprintf(url, sizeof url, "%s/v1/tensors/tf-doctor-%ld", d->base, (long)getpid());
    if (!data || !doc || tf_doc_add(doc, "x", TF_U8, 1, shape, data, d->size,
                                    TF_BORROW) != TF_OK) {
        add(d, "probe", LV_WARN, NULL, "no probe: out of memory for %zu bytes", d->size);
        goto out;
    }
    for (size_t i = 0; i < d->size; i++)       /* not zeros: no page stays a zero page */
        data[i] = (uint8_t)(i * 31 + 7);
    int tcp_ucx = strstr(d->ti.transport, "tcp") != NULL;
    if (d->ti.shm[0]) {
        probe(d, "shm/memfd", TF_TRANSPORT_AUTO, "put", url, doc, "memcpy", d->memcpy_gbps);
        probe(d, "shm/memfd", TF_TRANSPORT_AUTO, "get", url, doc, "memcpy", d->memcpy_gbps);
    }
    if (strncmp(d->ti.transport, "ucx/", 4) == 0) {
        probe(d, "ucx", TF_TRANSPORT_UCX, "put", url, doc, tcp_ucx ? "tcp" : "memcpy",
              tcp_ucx ? d->tcp_gbps : d->memcpy_gbps);
        probe(d, "ucx", TF_TRANSPORT_UCX, "get", url, doc, tcp_ucx ? "tcp" : "memcpy",
              tcp_ucx ? d->tcp_gbps : d->memcpy_gbps);
    }
    probe(d, "http", TF_TRANSPORT_HTTP, "put", url, doc, "tcp", d->tcp_gbps);
    probe(d, "http", TF_TRANSPORT_HTTP, "get", url, doc, "tcp", d->tcp_gbps);
    tf_client_set_transport(d->c, TF_TRANSPORT_HTTP);
    tf_delete(d->c, url);
    double worst = 2;
    d->slowest = -1;
    for (int i = 0; i < d->np; i++) {
        const probe_t *p = &d->p[i];
        if (p->error[0]) {
            add(d, "probe", LV_FAIL, NULL, "%s %s failed: %s", p->path, p->op, p->error);
            continue;
        }
        double frac = p->ceiling_gbps > 0 ? p->gbps / p->ceiling_gbps : 1;
        if (frac < worst) {
            worst = frac;
            d->slowest = i;
        }
    }
out:
    tf_doc_free(doc);
    free(data);
}

/* ---- verdict and output ---------------------------------------------------------------------- */

static void verdict(doctor_t *d)
{
    const tf_transport_info_t *ti = &d->ti;
    if (ti->same_host == 1) {
        snprintf(d->fast_path, sizeof d->fast_path, "shm/memfd");
        d->fast = ti->shm[0] != 0;
        if (!d->fast)
            snprintf(d->fast_why, sizeof d->fast_why, "%s", ti->shm_reason[0] ? ti->shm_reason
                     : "no shared-memory connection");
    } else {
        snprintf(d->fast_path, sizeof d->fast_path, "%s", strncmp(ti->transport, "ucx/", 4) == 0
                 ? ti->transport : "ucx");
        d->fast = strncmp(ti->transport, "ucx/", 4) == 0;
        if (!d->fast)
            snprintf(d->fast_why, sizeof d->fast_why, "%s", ti->reason[0] ? ti->reason
                     : "no UCX connection");
    }
}

static void json_string(FILE *o, const char *s)
{
    fputc('"', o);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(o, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(o, "\\u%04x", ch);
        else
            fputc(ch, o);
    }
    fputc('"', o);
}

static void print_json(const doctor_t *d)
{
    FILE *o = stdout;
    fputs("{\"base\":", o);
    json_string(o, d->base);
    fputs(",\"server\":", o);
    if (d->version[0]) {
        fputs("{\"version\":", o);
        json_string(o, d->version);
        fprintf(o, ",\"protocol\":{\"min\":%ld,\"max\":%ld}}", d->proto_min, d->proto_max);
    } else {
        fputs("null", o);
    }
    fprintf(o, ",\"same_host\":%s,\"fast_path\":{\"available\":%s,\"path\":",
            d->ti.same_host == 1 ? "true" : d->ti.same_host == 0 ? "false" : "null",
            d->fast ? "true" : "false");
    json_string(o, d->fast_path);
    fputs(",\"why_not\":", o);
    json_string(o, d->fast_why);
    fputs("},\"checks\":[", o);
    for (int i = 0; i < d->nf; i++) {
        fprintf(o, "%s{\"name\":\"%s\",\"level\":\"%s\",\"what\":", i ? "," : "", d->f[i].name,
                level_names[d->f[i].level]);
        json_string(o, d->f[i].what);
        fputs(",\"fix\":", o);
        json_string(o, d->f[i].fix);
        fputc('}', o);
    }
    fprintf(o, "],\"ceilings\":{\"memcpy_gbps\":%.3f,\"tcp_gbps\":%.3f},\"probes\":[",
            d->memcpy_gbps, d->tcp_gbps);
    for (int i = 0; i < d->np; i++) {
        const probe_t *p = &d->p[i];
        fprintf(o, "%s{\"path\":\"%s\",\"op\":\"%s\",\"transport\":", i ? "," : "", p->path,
                p->op);
        json_string(o, p->transport);
        fprintf(o, ",\"bytes\":%zu,\"gbps\":%.3f,\"ceiling\":\"%s\",\"ceiling_gbps\":%.3f,"
                "\"error\":", d->size, p->gbps, p->ceiling, p->ceiling_gbps);
        json_string(o, p->error);
        fputc('}', o);
    }
    fputs("],\"slowest\":", o);
    if (d->slowest >= 0)
        fprintf(o, "{\"path\":\"%s\",\"op\":\"%s\"}", d->p[d->slowest].path,
                d->p[d->slowest].op);
    else
        fputs("null", o);
    fputs("}\n", o);
}

static void print_words(const doctor_t *d)
{
    printf("tfetch doctor: %s\n", d->base);
    for (int i = 0; i < d->nf; i++) {
        const finding_t *f = &d->f[i];
        printf("  %-4s  %-12s  %s\n", level_names[f->level], f->name, f->what);
        if (f->fix[0])
            printf("  %-4s  %-12s  fix: %s\n", "", "", f->fix);
    }
    if (d->np) {
        printf("probes (%zu bytes, best of %d; ceilings measured now: memcpy %.2f GB/s, TCP "
               "over loopback %.2f GB/s):\n", d->size, PROBE_RUNS, d->memcpy_gbps, d->tcp_gbps);
        for (int i = 0; i < d->np; i++) {
            const probe_t *p = &d->p[i];
            if (p->error[0])
                printf("  %-10s %-4s failed: %s\n", p->path, p->op, p->error);
            else
                printf("  %-10s %-4s %7.2f GB/s  %3.0f%% of %s (%s)\n", p->path, p->op, p->gbps,
                       p->ceiling_gbps > 0 ? 100 * p->gbps / p->ceiling_gbps : 0, p->ceiling,
                       p->transport);
        }
        if (d->slowest >= 0) {
            const probe_t *p = &d->p[d->slowest];
            printf("slowest: %s %s, %.2f GB/s, %.0f%% of its ceiling (%s, %.2f GB/s)\n",
                   p->path, p->op, p->gbps,
                   p->ceiling_gbps > 0 ? 100 * p->gbps / p->ceiling_gbps : 0, p->ceiling,
                   p->ceiling_gbps);
        }
    }
    if (d->fast)
        printf("fast path: %s is available\n", d->fast_path);
    else
        printf("fast path: %s is NOT available: %s\n", d->fast_path, d->fast_why);
}

/* ---- the command ------------------------------------------------------------------------------ */

static int usage(FILE *o, int rc)
{
    fputs("Usage: tfetch doctor [--json] [--size SIZE] [--no-probe] [BASE]\n"
          "Check this host and the tfetchd at BASE (default $TFETCH_URL, else\n"
          "http://127.0.0.1:7070): same host or not and the same-host path (uids, the shm\n"
          "socket, ptrace scope), huge pages, UCX's devices and ports, ulimit -n, somaxconn,\n"
          "TLS; then probe each path that runs against its ceiling (memcpy, a TCP stream).\n"
          "  --json        one JSON object instead of words\n"
          "  --size SIZE   bytes of each probe transfer (suffix K or M; default 16M)\n"
          "  --no-probe    skip the probe transfers\n"
          "Exit status: 0 the fast path is available, 1 it is not, 2 no server or bad usage.\n",
          o);
    return rc;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    if (*end || v == 0 || v > (1ull << 30))
        return -1;
    *out = (size_t)v;
    return 0;
}

int tfc_doctor(int argc, char **argv)
{
    doctor_t *d = calloc(1, sizeof *d);
    int rc = 2;
    if (!d) {
        fputs("tfetch doctor: out of memory\n", stderr);
        return 2;
    }
    d->size = DEFAULT_PROBE;
    d->slowest = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            d->json = 1;
        } else if (strcmp(argv[i], "--no-probe") == 0) {
            d->size = 0;
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            if (parse_size(argv[++i], &d->size) != 0) {
                fprintf(stderr, "tfetch doctor: --size '%s' is not 1..1G bytes\n", argv[i]);
                goto out;
            }
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            rc = usage(stdout, 0);
            goto out;
        } else if (argv[i][0] != '-' && !d->base) {
            d->base = argv[i];
        } else {
            fprintf(stderr, "tfetch doctor: unexpected argument '%s'\n", argv[i]);
            rc = usage(stderr, 2);
            goto out;
        }
    }
    if (!d->base)
        d->base = getenv("TFETCH_URL") && *getenv("TFETCH_URL") ? getenv("TFETCH_URL")
                                                                : "http://127.0.0.1:7070";
    if (tf_client_new(&d->c) != TF_OK) {
        fputs("tfetch doctor: cannot make a client\n", stderr);
        goto out;
    }
    tf_client_set_timeout(d->c, 10000);
    if (check_server(d) == 0) {
        check_same_host(d);
        check_ucx(d);
        check_host(d);
        run_probes(d);
        verdict(d);
        rc = d->fast ? 0 : 1;
    } else {
        snprintf(d->fast_path, sizeof d->fast_path, "none");
        snprintf(d->fast_why, sizeof d->fast_why, "no server");
        d->ti.same_host = -1;
    }
    if (d->json)
        print_json(d);
    else
        print_words(d);
out:
    tf_client_free(d->c);
    tf_free(d->info);
    free(d);
    return rc;
}
