/* clock.h — the monotonic clock and poll() deadlines the networking and training code share. */
#ifndef DPTRAIN_CLOCK_H
#define DPTRAIN_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock. */
static inline double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* poll()'s timeout for an absolute deadline: 0 when passed, at most an hour, rounded up. */
static inline int ms_until(double deadline)
{
	double left = deadline - now_s();
	if (left <= 0)
		return 0;
	if (left > 3600)
		return 3600 * 1000;
	return (int)(left * 1000) + 1;
}

#endif
