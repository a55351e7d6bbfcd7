/* The clock helpers of clock.h. */
#include "common/clock.h"

uint64_t clock_monotonic_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint64_t)now.tv_sec * CLOCK_NSEC_PER_SEC + (uint64_t)now.tv_nsec;
}

uint64_t clock_realtime_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	return (uint64_t)now.tv_sec * CLOCK_NSEC_PER_SEC + (uint64_t)now.tv_nsec;
}

uint64_t clock_monotonic_ms(void)
{
	return clock_monotonic_ns() / CLOCK_NSEC_PER_MSEC;
}

uint64_t clock_ms_until(const struct timespec *deadline)
{
	uint64_t at = (uint64_t)deadline->tv_sec * CLOCK_NSEC_PER_SEC + (uint64_t)deadline->tv_nsec;
	uint64_t now = clock_monotonic_ns();

	return at > now ? (at - now) / CLOCK_NSEC_PER_MSEC : 0;
}

struct timespec clock_deadline_after_ms(long long timeout_ms)
{
	uint64_t at = clock_monotonic_ns() +
		      (timeout_ms > 0 ? (uint64_t)timeout_ms * CLOCK_NSEC_PER_MSEC : 0);

	return (struct timespec){ .tv_sec = (time_t)(at / CLOCK_NSEC_PER_SEC),
				  .tv_nsec = (long)(at % CLOCK_NSEC_PER_SEC) };
}
