/*
 * Monotonic time for timeouts, deadlines and measurements. Every module that waits or times
 * something asks here instead of keeping its own clock_gettime wrapper, so all of them count
 * in the same clock (CLOCK_MONOTONIC, which never jumps when the wall clock is set). The wall
 * clock is here only for what is handed on as a date (the clock a restored guest is set to).
 */
#ifndef VOIDBOX_COMMON_CLOCK_H
#define VOIDBOX_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

#define CLOCK_NSEC_PER_SEC 1000000000ULL
#define CLOCK_NSEC_PER_MSEC 1000000ULL
#define CLOCK_MSEC_PER_SEC 1000ULL

uint64_t clock_monotonic_ns(void);
uint64_t clock_monotonic_ms(void);
/* CLOCK_REALTIME in nanoseconds since the epoch. */
uint64_t clock_realtime_ns(void);
/*
 * The CLOCK_MONOTONIC instant timeout_ms from now, as pthread_cond_timedwait wants it (with a
 * condition variable whose clock is CLOCK_MONOTONIC). A negative timeout counts as 0.
 */
struct timespec clock_deadline_after_ms(long long timeout_ms);
/* Whole milliseconds from now until the CLOCK_MONOTONIC instant deadline; 0 once it passed. */
uint64_t clock_ms_until(const struct timespec *deadline);

#endif
