/* failmalloc.c - the allocation-failure shim of the torture programme (tests/torture.c).
 *
 * A preloadable library (LD_PRELOAD, or linked into a test program) that wraps malloc,
 * calloc, realloc, strdup, strndup, posix_memalign, aligned_alloc, memalign, open_memstream
 * and anonymous mmap, and, once armed, makes the Nth of them fail (NULL / MAP_FAILED, errno
 * ENOMEM), once, as curl's memdebug does for `runtests -t`. Only allocations whose caller
 * (__builtin_return_address) lies in one of "our" objects are counted: by default the main
 * program and libtfetch.so (TF_FAILMALLOC_OBJS=main,libtfetch.so,...: "main" is the
 * executable, any other word a substring of a loaded object's path; add "libcjson" to fail
 * cJSON's allocations made on our behalf). Libraries' own allocations pass untouched: UCX,
 * libmicrohttpd, libcurl and GnuTLS are not ours to torture.
 *
 * Three ways to arm it:
 *   - TF_FAILMALLOC=N in the environment: armed from the first allocation (start-up torture;
 *     TF_FAILMALLOC_REPORT=PATH gets "counted C failed F" at exit).
 *   - TF_FAILMALLOC_CTL_FD=FD, an inherited socket: a control thread (all signals blocked, so
 *     it never takes the daemon's SIGTERM) reads "arm N\n" (answers "armed\n") and "disarm\n"
 *     (answers "counted C failed F leaked L\n"). Lets one daemon be tortured request by request.
 *   - tf_failmalloc_arm() / tf_failmalloc_disarm(), found with dlsym(RTLD_DEFAULT), in-process.
 * TF_FAILMALLOC_PROG=NAME arms only the program of that name (skipping wrappers before it).
 * TF_FAILMALLOC_TRACE=1 writes a backtrace of each failed allocation on stderr; =2 also the
 * caller of every counted one.
 * leaked: under valgrind, the growth of definitely lost bytes since the previous disarm (an
 * added leak check, whose records valgrind writes to its log); -1 when not under valgrind.
 *
 * Threads: any thread allocates; the counter is atomic. The underlying allocator is glibc's
 * (__libc_malloc and friends, which valgrind replaces too), so no dlsym bootstrap is needed
 * for the hot path.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>
#include <malloc.h>
#include <valgrind/memcheck.h>

/* glibc's own entry points (exported, and replaced by valgrind like malloc). */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

/* The API a test program reaches with dlsym(RTLD_DEFAULT, ...). */
void tf_failmalloc_arm(long n);
void tf_failmalloc_disarm(long *counted, long *failed, long *leaked);

#define MAX_RANGES 64
static struct {
    uintptr_t lo, hi;
} ranges[MAX_RANGES];
static int nranges;
static int armed;               /* atomic */
static long fail_at;            /* the Nth counted allocation fails */
static long counted;            /* atomic */
static long failed;             /* atomic */
static unsigned long lost_before;
static int trace;               /* TF_FAILMALLOC_TRACE=1: a backtrace of each failure */

static int want(const char *name, int is_main, const char *list)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "main") == 0 ? is_main : (*name && strstr(name, tok) != NULL))
            return 1;
    }
    return 0;
}

static int add_object(struct dl_phdr_info *info, size_t size, void *data)
{
    int *first = data;
    int is_main = *first;
    const char *list = getenv("TF_FAILMALLOC_OBJS");
    *first = 0;
    if (!want(info->dlpi_name, is_main, list && *list ? list : "main,libtfetch.so"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum && nranges < MAX_RANGES; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            ranges[nranges].lo = info->dlpi_addr + ph->p_vaddr;
            ranges[nranges].hi = ranges[nranges].lo + ph->p_memsz;
            nranges++;
        }
    }
    return 0;
}

static void find_objects(void)
{
    int first = 1;
    if (nranges == 0)
        dl_iterate_phdr(add_object, &first);
}

static int ours(const void *ra)
{
    uintptr_t a = (uintptr_t)ra;
    for (int i = 0; i < nranges; i++)
        if (a >= ranges[i].lo && a < ranges[i].hi)
            return 1;
    return 0;
}

/* 1: this allocation (made from ra) is the one to fail. */
static int should_fail(const void *ra)
{
    if (!__atomic_load_n(&armed, __ATOMIC_ACQUIRE) || !ours(ra))
        return 0;
    long k = __atomic_add_fetch(&counted, 1, __ATOMIC_RELAXED);
    if (trace == 2) {
        char line[64];
        int len = snprintf(line, sizeof line, "failmalloc: #%ld from %p\n", k, ra);
        (void)!write(2, line, (size_t)len);
    }
    if (k != fail_at)
        return 0;
    __atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);
    if (trace) {
        void *frames[32];
        int n = backtrace(frames, 32);
        static const char msg[] = "failmalloc: failing this allocation:\n";
        (void)!write(2, msg, sizeof msg - 1);
        backtrace_symbols_fd(frames, n, 2);
    }
    errno = ENOMEM;
    return 1;
}

void tf_failmalloc_arm(long n)
{
    find_objects();
    __atomic_store_n(&armed, 0, __ATOMIC_RELEASE);
    fail_at = n;
    __atomic_store_n(&counted, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&failed, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&armed, 1, __ATOMIC_RELEASE);
}

void tf_failmalloc_disarm(long *c, long *f, long *leaked)
{
    __atomic_store_n(&armed, 0, __ATOMIC_RELEASE);
    *c = __atomic_load_n(&counted, __ATOMIC_RELAXED);
    *f = __atomic_load_n(&failed, __ATOMIC_RELAXED);
    *leaked = -1;
    if (RUNNING_ON_VALGRIND) {
        unsigned long lost = 0, dubious = 0, reachable = 0, suppressed = 0;
        VALGRIND_DO_ADDED_LEAK_CHECK;
        VALGRIND_COUNT_LEAKS(lost, dubious, reachable, suppressed);
        (void)dubious;
        (void)reachable;
        (void)suppressed;
        *leaked = (long)(lost - lost_before);
        lost_before = lost;
    }
}

/* ---- the wrappers ---------------------------------------------------------------------- */

void *malloc(size_t n)
{
    if (should_fail(__builtin_return_address(0)))
        return NULL;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    if (should_fail(__builtin_return_address(0)))
        return NULL;
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    if ((p == NULL || n > 0) && should_fail(__builtin_return_address(0)))
        return NULL;
    return __libc_realloc(p, n);
}

void free(void *p)
{
    __libc_free(p);
}

char *strdup(const char *s)
{
    if (should_fail(__builtin_return_address(0)))
        return NULL;
    size_t n = strlen(s) + 1;
    char *p = __libc_malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

char *strndup(const char *s, size_t max)
{
    if (should_fail(__builtin_return_address(0)))
        return NULL;
    size_t n = strnlen(s, max);
    char *p = __libc_malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

int posix_memalign(void **out, size_t align, size_t n)
{
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    if (should_fail(__builtin_return_address(0)))
        return ENOMEM;
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
    if (should_fail(__builtin_return_address(0)))
        return NULL;
    return __libc_memalign(align, n);
}

void *memalign(size_t align, size_t n)
{
    if (should_fail(__builtin_return_address(0)))
        return NULL;
    return __libc_memalign(align, n);
}

FILE *open_memstream(char **ptr, size_t *size)
{
    static FILE *(*real)(char **, size_t *);
    if (should_fail(__builtin_return_address(0)))
        return NULL;
    if (!real)
        real = (FILE * (*)(char **, size_t *)) dlsym(RTLD_NEXT, "open_memstream");
    return real ? real(ptr, size) : NULL;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    static void *(*real)(void *, size_t, int, int, int, off_t);
    if ((flags & MAP_ANONYMOUS) && should_fail(__builtin_return_address(0)))
        return MAP_FAILED;
    if (!real)
        real = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
    if (!real) {
        errno = ENOSYS;
        return MAP_FAILED;
    }
    return real(addr, len, prot, flags, fd, off);
}

/* ---- arming from the environment ------------------------------------------------------- */

static int ctl_fd = -1;

static void reply(const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(ctl_fd, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void *control(void *arg)
{
    char line[128];
    size_t len = 0;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    for (;;) {
        ssize_t got = read(ctl_fd, line + len, sizeof line - 1 - len);
        if (got <= 0)
            break;
        len += (size_t)got;
        line[len] = '\0';
        char *nl;
        while ((nl = strchr(line, '\n')) != NULL) {
            *nl = '\0';
            if (strncmp(line, "arm ", 4) == 0) {
                tf_failmalloc_arm(strtol(line + 4, NULL, 10));
                reply("armed\n");
            } else if (strcmp(line, "disarm") == 0) {
                long c, f, l;
                char out[128];
                tf_failmalloc_disarm(&c, &f, &l);
                snprintf(out, sizeof out, "counted %ld failed %ld leaked %ld\n", c, f, l);
                reply(out);
            } else {
                reply("?\n");
            }
            len -= (size_t)(nl + 1 - line);
            memmove(line, nl + 1, len + 1);
        }
        if (len == sizeof line - 1)
            len = 0;
    }
    return NULL;
}

static char report_path[256];

static void report(void)
{
    char out[128];
    FILE *f;
    if (!report_path[0] || (f = fopen(report_path, "w")) == NULL)
        return;
    snprintf(out, sizeof out, "counted %ld failed %ld\n", __atomic_load_n(&counted, __ATOMIC_RELAXED),
             __atomic_load_n(&failed, __ATOMIC_RELAXED));
    fputs(out, f);
    fclose(f);
}

__attribute__((constructor)) static void failmalloc_init(void)
{
    /* TF_FAILMALLOC_PROG=tfetchd: only that program is armed (not a wrapper before it, such
     * as Debian's valgrind script, which would otherwise take the settings for itself). */
    const char *prog = getenv("TF_FAILMALLOC_PROG");
    if (prog && *prog && strcmp(prog, program_invocation_short_name) != 0)
        return;
    const char *n = getenv("TF_FAILMALLOC");
    const char *fd = getenv("TF_FAILMALLOC_CTL_FD");
    const char *rep = getenv("TF_FAILMALLOC_REPORT");
    const char *tr = getenv("TF_FAILMALLOC_TRACE");

    trace = tr && (*tr == '1' || *tr == '2') ? *tr - '0' : 0;
    if (trace) {
        void *f[1];
        backtrace(f, 1);        /* loads libgcc_s now, not inside a failing malloc */
    }

    if (rep && *rep) {
        snprintf(report_path, sizeof report_path, "%s", rep);
        atexit(report);
    }
    if (fd && *fd) {
        pthread_t t;
        ctl_fd = atoi(fd);
        if (pthread_create(&t, NULL, control, NULL) == 0)
            pthread_detach(t);
    }
    /* Processes this one starts inherit LD_PRELOAD, not the arming. */
    unsetenv("TF_FAILMALLOC_CTL_FD");
    unsetenv("TF_FAILMALLOC_REPORT");
    if (n && *n) {
        long at = strtol(n, NULL, 10);
        unsetenv("TF_FAILMALLOC");
        if (at > 0)
            tf_failmalloc_arm(at);
    }
}
