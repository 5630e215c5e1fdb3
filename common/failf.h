/* failf.h — the trainer's way to report an error to its caller: format the message into the
 * caller's buffer and return -1, so `return failf(err, errlen, "...", ...);` ends a function.
 * Also the monotonic clock and poll() deadlines the networking and training code share. */
#ifndef DPTRAIN_FAILF_H
#define DPTRAIN_FAILF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <time.h>

static inline int failf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int failf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

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
