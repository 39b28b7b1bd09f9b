/* memlimit.c - the memory this process may use (see memlimit.h).
 *
 * Finds the process's cgroup in /proc/self/cgroup (v2: the "0::PATH" line; v1: the line
 * whose controllers include memory), the hierarchy's mount point in /proc/self/mountinfo
 * (and the mount's own root, which a container's mount may have cut off the path), then
 * reads the limit file of that cgroup and of each ancestor up to the mount point: a parent's
 * limit binds its children too. No library reads cgroups for us on Debian 12 (libcgroup is
 * v1-only and not for this); the files are small and their format fixed by the kernel.
 */
#include "config.h"
#include "daemon/memlimit.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PATH_BYTES 1024
/* v1 says "no limit" with the largest page-aligned signed value; treat anything past 2^62 as
 * none, as no machine has that much. */
#define NO_LIMIT_ABOVE (UINT64_C(1) << 62)

typedef struct {
    int found;
    char path[PATH_BYTES];          /* the cgroup, as /proc/self/cgroup names it */
    char mount[PATH_BYTES];         /* where the hierarchy is mounted */
    char mount_root[PATH_BYTES];    /* the hierarchy's directory at that mount point */
} hier_t;

/* Opens root + path for reading; NULL when absent. */
static FILE *open_at(const char *root, const char *path)
{
    char full[2 * PATH_BYTES];
    if ((size_t)snprintf(full, sizeof full, "%s%s", root, path) >= sizeof full)
        return NULL;
    return fopen(full, "re");
}

static int has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && memcmp(p, word, n) == 0)
            return 1;
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

static void copy(char *dst, const char *src)
{
    snprintf(dst, PATH_BYTES, "%s", src);
}

/* /proc/self/cgroup: "0::/a/b" (v2) and "4:memory:/a/b" (v1). */
static void read_cgroups(const char *root, hier_t *v2, hier_t *v1)
{
    FILE *f = open_at(root, "/proc/self/cgroup");
    if (!f)
        return;
    char line[PATH_BYTES + 128];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/' || strstr(c2 + 1, "/..") || strstr(c2 + 1, "//"))
            continue;               /* outside our cgroup namespace's root: not ours to read */
        *c1 = *c2 = '\0';
        if (strcmp(line, "0") == 0 && c1[1] == '\0') {
            v2->found = 1;
            copy(v2->path, c2 + 1);
        } else if (has_word(c1 + 1, "memory")) {
            v1->found = 1;
            copy(v1->path, c2 + 1);
        }
    }
    fclose(f);
}

/* /proc/self/mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE SOURCE
 * SUPEROPTS". */
static void read_mounts(const char *root, hier_t *v2, hier_t *v1)
{
    FILE *f = open_at(root, "/proc/self/mountinfo");
    if (!f)
        return;
    char line[4 * PATH_BYTES];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *field[6], *save = NULL, *p = line;
        int n = 0;
        for (; n < 6 && (field[n] = strtok_r(p, " ", &save)); n++)
            p = NULL;
        char *dash = NULL, *t;
        while ((t = strtok_r(NULL, " ", &save)))
            if (strcmp(t, "-") == 0) {
                dash = t;
                break;
            }
        char *fstype = dash ? strtok_r(NULL, " ", &save) : NULL;
        char *source = fstype ? strtok_r(NULL, " ", &save) : NULL;
        char *super = source ? strtok_r(NULL, " ", &save) : NULL;
        if (n < 6 || !fstype)
            continue;
        hier_t *h = strcmp(fstype, "cgroup2") == 0 ? v2
                  : strcmp(fstype, "cgroup") == 0 && super && has_word(super, "memory") ? v1
                  : NULL;
        if (!h || h->mount[0])
            continue;
        copy(h->mount_root, field[3]);
        copy(h->mount, field[4]);
    }
    fclose(f);
}

/* The limit in root + file: 0 when none (absent, "max", unparsable or past 2^62). */
static uint64_t read_limit(const char *root, const char *file)
{
    FILE *f = open_at(root, file);
    if (!f)
        return 0;
    char buf[64] = "";
    int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok || buf[0] < '0' || buf[0] > '9')
        return 0;                           /* "max", or nothing */
    errno = 0;
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || (*end && *end != '\n') || v == 0 || v >= NO_LIMIT_ABOVE)
        return 0;
    return (uint64_t)v;
}

/* Walks h's cgroup and its ancestors up to the mount point, lowering *out to each limit
 * found in its file (memory.max or memory.limit_in_bytes) and naming it in source. */
static void walk(const char *root, const hier_t *h, const char *file, const char *what,
                 tfd_memlimit_t *out)
{
    if (!h->found || !h->mount[0])
        return;
    const char *rel = h->path;
    size_t rl = strlen(h->mount_root);
    /* A mount of a subtree (a container's): its root is cut off the cgroup's path. */
    if (strcmp(h->mount_root, "/") != 0 && strncmp(rel, h->mount_root, rl) == 0 &&
        (rel[rl] == '/' || rel[rl] == '\0'))
        rel += rl;
    char dir[2 * PATH_BYTES];
    if ((size_t)snprintf(dir, sizeof dir, "%s%s", h->mount, strcmp(rel, "/") ? rel : "") >=
        sizeof dir)
        return;
    size_t top = strlen(h->mount);
    for (;;) {
        char path[2 * PATH_BYTES + 32];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        uint64_t v = read_limit(root, path);
        if (v && v < out->bytes) {
            out->bytes = v;
            snprintf(out->source, sizeof out->source, "%s %s", what, path);
        }
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top || !slash || (size_t)(slash - dir) < top)
            break;
        *slash = '\0';
    }
}

void tfd_memlimit_read(const char *root, uint64_t phys, tfd_memlimit_t *out)
{
    if (phys == 0) {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        phys = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
    }
    out->bytes = phys ? phys : UINT64_MAX;
    snprintf(out->source, sizeof out->source, "physical memory");
    hier_t v2, v1;
    memset(&v2, 0, sizeof v2);
    memset(&v1, 0, sizeof v1);
    read_cgroups(root, &v2, &v1);
    read_mounts(root, &v2, &v1);
    walk(root, &v2, "memory.max", "cgroup v2", out);
    walk(root, &v1, "memory.limit_in_bytes", "cgroup v1", out);
    if (out->bytes == UINT64_MAX) {
        out->bytes = 0;
        snprintf(out->source, sizeof out->source, "unknown");
    }
}
