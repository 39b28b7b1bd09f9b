/* clock.h - the one monotonic clock of tfetch's daemon, library and transports.
 *
 * Every duration, deadline and timer above proto/ reads CLOCK_MONOTONIC through these
 * helpers, so a wall-clock step never stretches or cuts a timeout. tfx_deadline_rt() is the
 * one exception: pthread_cond_timedwait() on a default condition variable wants an absolute
 * CLOCK_REALTIME time. Header-only; any thread.
 */
#ifndef TFX_CLOCK_H
#define TFX_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t tfx_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t tfx_now_ms(void) { return tfx_now_ns() / 1000000u; }

/* Milliseconds on CLOCK_MONOTONIC_COARSE: the last tick's time (a few ms behind), for a loop
 * that asks every pass whether a 100 ms period is over. A read costs ~6 ns where
 * CLOCK_MONOTONIC costs ~27 (kvm-clock, bench/README.md); compare it only with itself. */
static inline uint64_t tfx_now_coarse_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline double tfx_now_s(void) { return (double)tfx_now_ns() / 1e9; }

/* Seconds from t0_ns (a tfx_now_ns() reading) to now. */
static inline double tfx_since_s(uint64_t t0_ns) { return (double)(tfx_now_ns() - t0_ns) / 1e9; }

/* The CLOCK_REALTIME instant ms milliseconds from now, for pthread_cond_timedwait(). */
static inline struct timespec tfx_deadline_rt(uint64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000u);
    ts.tv_nsec += (long)(ms % 1000u) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

#endif
