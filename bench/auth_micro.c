/* auth_micro.c - tfetch-auth-micro: what tfetchd's authentication does per request, timed
 * in process, away from the network's noise: parse "Authorization: Bearer TOKEN"
 * (tfp_bearer_parse), hash it (tfp_auth_hash, SHA-256), find its principal
 * (tfd_auth_identify, under the table's read lock) and check one right on a name
 * (tfd_auth_allows), against a token file of 1, 100 and 100000 tokens. Prints ns per
 * request. Single-threaded; owns its temporary token file. bench/README.md, "Auth cost".
 */
#include "config.h"
#include "daemon/auth.h"
#include "proto/auth.h"
#include "transports/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double per_request_ns(tfd_auth_t *a, const char *header, long iters)
{
    volatile int sink = 0;
    uint64_t t0 = tfx_now_ns();
    for (long i = 0; i < iters; i++) {
        tfp_op_who_t who = {0};
        const char *tok;
        size_t len;
        if (tfp_bearer_parse(header, &tok, &len) == TFP_BEARER_OK) {
            who.cred = TFP_CRED_BEARER;
            tfp_auth_hash(tok, len, who.token_hash);
        }
        sink += tfd_auth_identify(a, &who, 0) == TFD_AUTH_OK;
        sink += tfd_auth_allows(a, &who, 0, TFP_RIGHT_READ, "bench.w");
    }
    (void)sink;
    return (double)(tfx_now_ns() - t0) / (double)iters;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 1000000;
    static const long sizes[] = {1, 100, 100000};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        char path[] = "/tmp/tfetch-auth-micro-XXXXXX";
        int fd = mkstemp(path);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!f) {
            perror("token file");
            return 1;
        }
        for (long i = 0; i < sizes[s]; i++)
            fprintf(f, "tk-bench-%ld p%ld read:bench.* write:bench.* call:*\n", i, i);
        fclose(f);
        tfp_err_t err = {0};
        tfd_auth_t *a = tfd_auth_new(path, NULL, &err);
        unlink(path);
        if (!a) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        char header[64];
        snprintf(header, sizeof header, "Bearer tk-bench-%ld", sizes[s] / 2);
        per_request_ns(a, header, iters / 10);                  /* warm up */
        double ns = per_request_ns(a, header, iters);
        printf("{\"bench\":\"auth\",\"tokens\":%ld,\"iters\":%ld,\"ns_per_request\":%.1f}\n",
               sizes[s], iters, ns);
        tfd_auth_free(a);
    }
    return 0;
}
