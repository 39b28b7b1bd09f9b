/* auth.h - tfetchd's bearer-token authentication and rights (auth-tokens = PATH).
 *
 * Holds the parsed token file (proto/auth.h: only the tokens' SHA-256 are kept), swapped
 * whole on SIGHUP (tfd_auth_reload: a file that no longer parses keeps the old table), and
 * the failure counters /metrics shows. With no file configured it is off and every check
 * allows. A request is authenticated by its token's hash (tfp_op_who_t.token_hash), or, with
 * no token sent, by its verified TLS client certificate's key (a cert: line, tls-client-ca);
 * the Shumai paths, which cannot send a token, are served as the configured shumai-principal
 * (the rights of the token lines naming it), or refused.
 *
 * Threads: checks run on the transports' threads under a read lock; the reload (main thread)
 * takes the write lock for the pointer swap only. Counters are atomic.
 */
#ifndef TFD_AUTH_H
#define TFD_AUTH_H

#include "proto/auth.h"
#include "proto/op.h"

typedef struct tfd_auth tfd_auth_t;

typedef enum {
    TFD_AUTH_OK = 0,
    TFD_AUTH_MISSING,               /* no (usable) bearer token: 401 */
    TFD_AUTH_UNKNOWN,               /* a token or certificate subject not in the file, or a
                                     * certificate that did not verify: 401 */
    TFD_AUTH_FORBIDDEN              /* known, without the right: 403 */
} tfd_auth_result_t;

/* path "" or NULL: off. shumai_principal "" or NULL: the Shumai paths are refused when on.
 * NULL with err set when the file cannot be read or parsed, or is not private: it must be a
 * regular file owned by tfetchd's user or root, readable by no other user, writable by no
 * group, and readable by a group only if tfetchd is in it (tfetchd.conf(5)). */
tfd_auth_t *tfd_auth_new(const char *path, const char *shumai_principal, tfp_err_t *err);
void tfd_auth_free(tfd_auth_t *a);
int tfd_auth_on(const tfd_auth_t *a);
/* Reads path again (or a new one): 0 with the new table in use, -1 with err set and the old
 * table kept: a file that is not private, does not parse, holds no entry, or whose last
 * line lacks its newline (one being written in place). Turning authentication on or off
 * takes a restart (-1). */
int tfd_auth_reload(tfd_auth_t *a, const char *path, tfp_err_t *err);
/* Lines (tokens and cert: lines) in the table now; *ncerts (unless NULL) the cert: lines. */
size_t tfd_auth_count(tfd_auth_t *a, size_t *ncerts);

/* Who asks: fills who->principal from the token or certificate (or, with shumai set and no
 * credential at all, the Shumai principal).
 * TFD_AUTH_OK (always, when off), MISSING or UNKNOWN. Not counted: tfd_auth_count_failure. */
tfd_auth_result_t tfd_auth_identify(tfd_auth_t *a, tfp_op_who_t *who, int shumai);
/* 1 if who (identified) holds right on name; 1 when off. With name NULL: on any name. */
int tfd_auth_allows(tfd_auth_t *a, const tfp_op_who_t *who, int shumai, tfp_right_t right,
                    const char *name);
void tfd_auth_count_failure(tfd_auth_t *a, tfd_auth_result_t why);
/* The failures counted: missing, unknown, forbidden. */
void tfd_auth_failures(tfd_auth_t *a, uint64_t out[3]);

#endif
