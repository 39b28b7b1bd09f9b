/* netaddr.c - IP addresses and address ranges as text (see netaddr.h). */
#include "proto/netaddr.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int tfp_addr_parse(const char *text, int *v6, uint8_t addr[16])
{
    struct in_addr a4;
    struct in6_addr a6;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(addr, 0, 16);
    if (inet_pton(AF_INET, text, &a4) == 1) {
        *v6 = 0;
        memcpy(addr, &a4, 4);
        return 0;
    }
    if (inet_pton(AF_INET6, text, &a6) != 1)
        return -1;
    if (memcmp(a6.s6_addr, mapped, sizeof mapped) == 0) {
        *v6 = 0;
        memcpy(addr, a6.s6_addr + 12, 4);
    } else {
        *v6 = 1;
        memcpy(addr, a6.s6_addr, 16);
    }
    return 0;
}

/* One entry, NUL-terminated, into *net. */
static int parse_net(char *e, tfp_net_t *net)
{
    char *slash = strchr(e, '/');
    unsigned long prefix = 0;
    if (slash) {
        char *end;
        *slash = '\0';
        if (!slash[1] || slash[1] < '0' || slash[1] > '9' || strlen(slash + 1) > 3)
            return -1;
        prefix = strtoul(slash + 1, &end, 10);
        if (*end)
            return -1;
    }
    /* Only a plain address is accepted: not an IPv4-mapped one under a v6 prefix. */
    if (tfp_addr_parse(e, &net->v6, net->addr) != 0 || (slash && strchr(e, ':') && !net->v6))
        return -1;
    unsigned bits = net->v6 ? 128 : 32;
    if (!slash)
        prefix = bits;
    if (prefix > bits)
        return -1;
    net->prefix = (unsigned)prefix;
    /* Host bits set below the prefix (10.1.2.3/8) are a typo more often than not: refused. */
    for (unsigned b = net->prefix; b < bits; b++)
        if (net->addr[b / 8] & (0x80u >> (b % 8)))
            return -1;
    return 0;
}

tfp_status_t tfp_netlist_parse(const char *list, tfp_netlist_t *out, tfp_err_t *err)
{
    memset(out, 0, sizeof *out);
    const char *p = list ? list : "";
    while (*p) {
        size_t skip = strspn(p, ", \t");
        p += skip;
        size_t k = strcspn(p, ", \t");
        if (k == 0)
            break;
        char e[64];
        if (k >= sizeof e)
            return tfp_err_set(err, TFP_EINVAL, "'%.*s...' is not an address range", 32, p);
        memcpy(e, p, k);
        e[k] = '\0';
        p += k;
        if (strcasecmp(e, "same-host") == 0) {
            out->same_host = 1;
            continue;
        }
        if (out->n == TFP_NETLIST_MAX)
            return tfp_err_set(err, TFP_EINVAL, "more than %d address ranges",
                               TFP_NETLIST_MAX);
        char shown[64];
        memcpy(shown, e, sizeof shown);
        if (parse_net(e, &out->nets[out->n]) != 0)
            return tfp_err_set(err, TFP_EINVAL,
                               "'%s' is not same-host, an address or ADDR/PREFIX with the "
                               "host bits zero", shown);
        out->n++;
    }
    return TFP_OK;
}

static int in_net(const tfp_net_t *n, int v6, const uint8_t a[16])
{
    if (n->v6 != v6)
        return 0;
    unsigned full = n->prefix / 8, rest = n->prefix % 8;
    if (memcmp(n->addr, a, full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    uint8_t mask = (uint8_t)(0xffu << (8 - rest));
    return (n->addr[full] & mask) == (a[full] & mask);
}

int tfp_netlist_match(const tfp_netlist_t *l, const char *addr)
{
    int v6;
    uint8_t a[16];
    if (!addr || tfp_addr_parse(addr, &v6, a) != 0)
        return 0;
    for (size_t i = 0; i < l->n; i++)
        if (in_net(&l->nets[i], v6, a))
            return 1;
    return 0;
}
