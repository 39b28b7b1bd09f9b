/* hostid.c - reads this process's host identity (boot id, network namespace, pid) from /proc.
 *
 * The only I/O behind the upgrade handshake's identity: everything it reads is validated by
 * proto/upgrade.c's checks before it is handed out. No state; any thread.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "proto/netaddr.h"
#include "transports/hostid.h"

static tfp_status_t read_boot_id(const char *path, char *out, tfp_err_t *err)
{
    char buf[TFP_UP_BOOT_ID_LEN + 3];
    ssize_t n;
    int fd, e;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tfp_err_set(err, TFP_EINTERNAL, "host identity: cannot open %s: %s", path,
                           strerror(errno));
    do
        n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    e = errno;
    close(fd);
    if (n < 0)
        return tfp_err_set(err, TFP_EINTERNAL, "host identity: cannot read %s: %s", path,
                           strerror(e));
    buf[n] = '\0';
    if (n > 0 && buf[n - 1] == '\n')
        buf[--n] = '\0';
    if (!tfp_up_boot_id_valid(buf))
        return tfp_err_set(err, TFP_EINTERNAL, "host identity: %s does not hold a "
                           "36-character lowercase uuid", path);
    memcpy(out, buf, TFP_UP_BOOT_ID_LEN + 1);
    return TFP_OK;
}

static tfp_status_t read_netns(const char *path, char *out, tfp_err_t *err)
{
    char buf[TFP_UP_MAX_NETNS + 2];
    ssize_t n;

    n = readlink(path, buf, sizeof buf - 1);
    if (n < 0)
        return tfp_err_set(err, TFP_EINTERNAL, "host identity: cannot read link %s: %s", path,
                           strerror(errno));
    buf[n] = '\0';
    if (!tfp_up_netns_valid(buf))
        return tfp_err_set(err, TFP_EINTERNAL, "host identity: %s does not point at "
                           "\"net:[N]\"", path);
    memcpy(out, buf, (size_t)n + 1);
    return TFP_OK;
}

tfp_status_t tfx_hostid_read(const char *proc_root, tfp_up_host_t *out, tfp_err_t *err)
{
    char path[4096];
    tfp_up_host_t h;
    tfp_status_t st;
    int k;

    if (proc_root == NULL || out == NULL)
        return tfp_err_set(err, TFP_EINVAL, "host identity: no /proc root or no output");
    memset(&h, 0, sizeof h);
    k = snprintf(path, sizeof path, "%s/sys/kernel/random/boot_id", proc_root);
    if (k < 0 || (size_t)k >= sizeof path)
        return tfp_err_set(err, TFP_EINVAL, "host identity: /proc root path is too long");
    st = read_boot_id(path, h.boot_id, err);
    if (st != TFP_OK)
        return st;
    k = snprintf(path, sizeof path, "%s/self/ns/net", proc_root);
    if (k < 0 || (size_t)k >= sizeof path)
        return tfp_err_set(err, TFP_EINVAL, "host identity: /proc root path is too long");
    st = read_netns(path, h.netns, err);
    if (st != TFP_OK)
        return st;
    h.pid = (int64_t)getpid();
    *out = h;
    return TFP_OK;
}

tfp_status_t tfx_hostid_get(tfp_up_host_t *out, tfp_err_t *err)
{
    return tfx_hostid_read("/proc", out, err);
}

int tfx_local_addrs(tfp_netlist_t *out)
{
    memset(out, 0, sizeof *out);
    out->nets[0] = (tfp_net_t){.v6 = 0, .addr = {127}, .prefix = 8};
    out->nets[1] = (tfp_net_t){.v6 = 1, .addr = {[15] = 1}, .prefix = 128};
    out->n = 2;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return -1;
    for (struct ifaddrs *i = ifs; i && out->n < TFP_NETLIST_MAX; i = i->ifa_next) {
        tfp_net_t *n = &out->nets[out->n];
        if (!i->ifa_addr)
            continue;
        if (i->ifa_addr->sa_family == AF_INET) {
            *n = (tfp_net_t){.v6 = 0, .prefix = 32};
            memcpy(n->addr, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            *n = (tfp_net_t){.v6 = 1, .prefix = 128};
            memcpy(n->addr, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
        } else {
            continue;
        }
        out->n++;
    }
    freeifaddrs(ifs);
    return 0;
}

int tfx_addr_is_local(const char *host)
{
    char text[64];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host++;
        n -= 2;
    }
    if (n == 0 || n >= sizeof text)
        return 0;
    memcpy(text, host, n);
    text[n] = '\0';
    if (strcasecmp(text, "localhost") == 0)
        return 1;
    tfp_netlist_t local;
    tfx_local_addrs(&local);        /* on failure it still holds the loopback ranges */
    return tfp_netlist_match(&local, text);
}
