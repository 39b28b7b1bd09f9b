/* replay_micro.c - tfetch-replay-micro: what the replay window (daemon/replay.c) costs a call
 * that carries a request id, timed in process, away from the network's noise: begin (look
 * up, add) then complete (remember a 72-byte answer, an 8-byte echo's) for fresh ids, while
 * the window fills (every call adds memory: page faults included) and once it is full (every
 * call evicts the oldest). Prints ns per call and the page faults of each phase.
 * Single-threaded. bench/README.md, "Issue 9: the window's index".
 *
 *   tfetch-replay-micro [ENTRIES [CALLS]]     (default 65536 and 4 x ENTRIES)
 */
#include "config.h"
#include "daemon/replay.h"
#include "transports/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static long faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt + ru.ru_majflt;
}

int main(int argc, char **argv)
{
    long entries = argc > 1 ? atol(argv[1]) : 65536;
    long calls = argc > 2 ? atol(argv[2]) : 4 * entries;
    if (entries <= 0 || entries > 100000000 || calls < 2 * entries) {
        fprintf(stderr, "usage: %s [ENTRIES [CALLS >= 2 x ENTRIES]]\n", argv[0]);
        return 2;
    }
    tfd_replay_limits_t lim = {.window_s = 300, .max_entries = (unsigned)entries,
                               .max_bytes = (uint64_t)1 << 32};
    tfd_replay_t *r = tfd_replay_new(&lim);
    static const uint8_t body[72];
    tfp_err_t err;
    tfd_replay_answer_t a = {.status = 200, .code = TFP_OK,
                             .content_type = "application/x-safetensors"};
    if (!r || !(a.body = tfd_blob_copy(body, sizeof body, 0, &err))) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint64_t t0 = tfx_now_ns(), t_full = 0;
    long f0 = faults(), f_full = 0;
    for (long i = 0; i < calls; i++) {
        if (i == entries) {
            t_full = tfx_now_ns();
            f_full = faults();
        }
        char id[48];
        snprintf(id, sizeof id, "c7f3a9e2b1d04c55-%ld", i);    /* libtfetch's form */
        tfd_replay_answer_t got;
        if (tfd_replay_begin(r, "anonymous", id, "echo", 0, NULL, &got) != TFD_REPLAY_NEW) {
            fprintf(stderr, "call %ld was not new\n", i);
            return 1;
        }
        tfd_replay_complete(r, "anonymous", id, "echo", &a);
    }
    uint64_t t1 = tfx_now_ns();
    long f1 = faults();
    printf("filling (%ld calls):  %7.0f ns per call, %ld page faults\n", entries,
           (double)(t_full - t0) / (double)entries, f_full - f0);
    printf("full    (%ld calls): %7.0f ns per call, %ld page faults\n", calls - entries,
           (double)(t1 - t_full) / (double)(calls - entries), f1 - f_full);
    tfd_blob_unref(a.body);
    tfd_replay_free(r);
    return 0;
}
