/* auth.c - the token table in use, its reload and the checks (see auth.h). */
#include "config.h"
#include "daemon/auth.h"

#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILE (16u << 20)
#define MAX_GROUPS 256

struct tfd_auth {
    int on;
    char shumai[TFP_MAX_USER_ID + 1];
    pthread_rwlock_t lock;
    tfp_tokens_t tokens;                    /* under lock */
    atomic_uint_fast64_t failures[3];
};

/* 1 if gid is this process's group or one of its supplementary groups. */
static int in_my_groups(gid_t gid)
{
    if (gid == getegid())
        return 1;
    gid_t groups[MAX_GROUPS];
    int n = getgroups(MAX_GROUPS, groups);
    for (int i = 0; i < n; i++)
        if (groups[i] == gid)
            return 1;
    return 0;
}

/* Whether the token file, as st describes it, is private enough to trust (as ssh judges a
 * private key): a regular file, owned by this process's user or root, that no other user
 * can read or write and no group can write. Read by a group only when that group is one of
 * this process's: a dedicated group that exists to let tfetchd read the file (systemd's
 * DynamicUser has no fixed uid to own it; Kubernetes mounts a Secret root-owned with the
 * pod's fsGroup), never a group of other users. 0, or -1 with err saying why. */
static int check_private(const char *path, const struct stat *st, tfp_err_t *err)
{
    uid_t me = geteuid();
    if (!S_ISREG(st->st_mode)) {
        tfp_err_set(err, TFP_EINVAL, "auth-tokens %s: not a regular file", path);
        return -1;
    }
    if (st->st_uid != me && st->st_uid != 0) {
        tfp_err_set(err, TFP_EINVAL, "auth-tokens %s: owned by uid %u, neither tfetchd's (%u) "
                    "nor root: refused (chown it)", path, (unsigned)st->st_uid, (unsigned)me);
        return -1;
    }
    unsigned mode = (unsigned)(st->st_mode & 07777);
    if ((mode & 0027) || ((mode & 0040) && !in_my_groups(st->st_gid))) {
        tfp_err_set(err, TFP_EINVAL, "auth-tokens %s: mode %04o lets %s read or write the "
                    "bearer tokens: refused (chmod 600 it, or 640 with a group only tfetchd "
                    "is in)", path, mode, (mode & 0007) ? "every user" : "another group");
        return -1;
    }
    return 0;
}

/* Reads and parses path into *out; reload (SIGHUP) also refuses a file that holds no entry,
 * or whose last line has no newline, as one being written in place (doc: write a new file
 * and rename it over the old). 0, or -1 with err set. */
static int load(const char *path, tfp_tokens_t *out, int reload, tfp_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        tfp_err_set(err, TFP_EINVAL, "auth-tokens %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        tfp_err_set(err, TFP_EINVAL, "auth-tokens %s: %s", path, strerror(errno));
        fclose(f);
        return -1;
    }
    if (check_private(path, &st, err) != 0) {
        fclose(f);
        return -1;
    }
    char *buf = malloc(MAX_FILE + 1);
    size_t n = buf ? fread(buf, 1, MAX_FILE + 1, f) : 0;
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad || n > MAX_FILE) {
        tfp_err_set(err, TFP_EINVAL, "auth-tokens %s: %s", path,
                    !buf ? "out of memory" : n > MAX_FILE ? "larger than 16M" : "read error");
        free(buf);
        return -1;
    }
    int torn = reload && n > 0 && buf[n - 1] != '\n';
    tfp_err_t pe = {0};
    tfp_status_t rc = tfp_tokens_parse(buf, n, out, &pe);
    memset(buf, 0, n);                      /* the tokens themselves are not kept */
    free(buf);
    if (rc != TFP_OK) {
        tfp_err_set(err, TFP_EINVAL, "auth-tokens %s: %s", path, pe.msg);
        return -1;
    }
    if (reload && (torn || out->n == 0)) {
        tfp_err_set(err, TFP_EINVAL, "auth-tokens %s: %s: a file being written? (write a new "
                    "file and rename it into place)", path, torn ? "the last line has no "
                    "newline" : "no token or cert: line");
        tfp_tokens_free(out);
        return -1;
    }
    return 0;
}

tfd_auth_t *tfd_auth_new(const char *path, const char *shumai_principal, tfp_err_t *err)
{
    tfd_auth_t *a = calloc(1, sizeof *a);
    if (!a) {
        tfp_err_set(err, TFP_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_rwlock_init(&a->lock, NULL);
    for (int i = 0; i < 3; i++)
        atomic_init(&a->failures[i], 0);
    if (shumai_principal && shumai_principal[0]) {
        if (!tfp_user_id_valid(shumai_principal)) {
            tfp_err_set(err, TFP_EINVAL, "shumai-principal must match [A-Za-z0-9._-]{1,128}");
            tfd_auth_free(a);
            return NULL;
        }
        snprintf(a->shumai, sizeof a->shumai, "%s", shumai_principal);
    }
    if (path && path[0]) {
        if (load(path, &a->tokens, 0, err) != 0) {
            tfd_auth_free(a);
            return NULL;
        }
        a->on = 1;
    }
    return a;
}

void tfd_auth_free(tfd_auth_t *a)
{
    if (!a)
        return;
    tfp_tokens_free(&a->tokens);
    pthread_rwlock_destroy(&a->lock);
    free(a);
}

int tfd_auth_on(const tfd_auth_t *a) { return a && a->on; }

int tfd_auth_reload(tfd_auth_t *a, const char *path, tfp_err_t *err)
{
    int want = path && path[0];
    if (want != a->on) {
        tfp_err_set(err, TFP_EINVAL, "turning authentication %s takes a restart",
                    want ? "on" : "off");
        return -1;
    }
    if (!want)
        return 0;
    tfp_tokens_t next;
    if (load(path, &next, 1, err) != 0)
        return -1;
    pthread_rwlock_wrlock(&a->lock);
    tfp_tokens_t old = a->tokens;
    a->tokens = next;
    pthread_rwlock_unlock(&a->lock);
    tfp_tokens_free(&old);
    return 0;
}

size_t tfd_auth_count(tfd_auth_t *a, size_t *ncerts)
{
    pthread_rwlock_rdlock(&a->lock);
    size_t n = a->tokens.n;
    if (ncerts)
        *ncerts = a->tokens.ncerts;
    pthread_rwlock_unlock(&a->lock);
    return n;
}

/* Under the read lock: 1 if who holds right on name (any name when NULL). */
static int allows_locked(const tfd_auth_t *a, const tfp_op_who_t *who, int shumai,
                         tfp_right_t right, const char *name)
{
    if (who->cred == TFP_CRED_BEARER || who->cred == TFP_CRED_CERT) {
        const tfp_token_t *t = tfp_tokens_find(&a->tokens, who->token_hash);
        return t && (name ? tfp_token_allows(t, right, name) : tfp_token_has_right(t, right));
    }
    if (!shumai || !a->shumai[0])
        return 0;
    /* The Shumai principal: every line naming it. */
    for (size_t i = 0; i < a->tokens.n; i++) {
        const tfp_token_t *t = &a->tokens.tokens[i];
        if (strcmp(t->principal, a->shumai) == 0 &&
            (name ? tfp_token_allows(t, right, name) : tfp_token_has_right(t, right)))
            return 1;
    }
    return 0;
}

tfd_auth_result_t tfd_auth_identify(tfd_auth_t *a, tfp_op_who_t *who, int shumai)
{
    who->principal[0] = '\0';
    if (!tfd_auth_on(a))
        return TFD_AUTH_OK;
    if (who->cred == TFP_CRED_CERT_BAD)
        return TFD_AUTH_UNKNOWN;            /* another CA's, or expired: no way in */
    if (who->cred != TFP_CRED_BEARER && who->cred != TFP_CRED_CERT) {
        if (shumai && a->shumai[0] && who->cred == TFP_CRED_NONE) {
            snprintf(who->principal, sizeof who->principal, "%s", a->shumai);
            return TFD_AUTH_OK;
        }
        return TFD_AUTH_MISSING;
    }
    pthread_rwlock_rdlock(&a->lock);
    const tfp_token_t *t = tfp_tokens_find(&a->tokens, who->token_hash);
    if (t)
        snprintf(who->principal, sizeof who->principal, "%s", t->principal);
    pthread_rwlock_unlock(&a->lock);
    return t ? TFD_AUTH_OK : TFD_AUTH_UNKNOWN;
}

int tfd_auth_allows(tfd_auth_t *a, const tfp_op_who_t *who, int shumai, tfp_right_t right,
                    const char *name)
{
    if (!tfd_auth_on(a))
        return 1;
    pthread_rwlock_rdlock(&a->lock);
    int ok = allows_locked(a, who, shumai, right, name);
    pthread_rwlock_unlock(&a->lock);
    return ok;
}

void tfd_auth_count_failure(tfd_auth_t *a, tfd_auth_result_t why)
{
    if (a && why >= TFD_AUTH_MISSING && why <= TFD_AUTH_FORBIDDEN)
        atomic_fetch_add(&a->failures[why - 1], 1);
}

void tfd_auth_failures(tfd_auth_t *a, uint64_t out[3])
{
    for (int i = 0; i < 3; i++)
        out[i] = a ? atomic_load(&a->failures[i]) : 0;
}
