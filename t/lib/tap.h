/* tap.h — a small TAP producer for dptrain's C unit tests (run by prove).
 * Owns test numbering and the plan; knows nothing about what is tested. */
#ifndef DPTRAIN_TAP_H
#define DPTRAIN_TAP_H

#include <stddef.h>

#if defined(__GNUC__)
#define TAP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TAP_PRINTF(a, b)
#endif

void plan(int n);
void plan_skip_all(const char *fmt, ...) TAP_PRINTF(1, 2) __attribute__((noreturn));
int ok_at(const char *file, int line, int cond, const char *fmt, ...) TAP_PRINTF(4, 5);
int is_at(const char *file, int line, const char *got, const char *want, const char *fmt, ...)
    TAP_PRINTF(5, 6);
int is_int_at(const char *file, int line, long long got, long long want, const char *fmt, ...)
    TAP_PRINTF(5, 6);
int is_double_at(const char *file, int line, double got, double want, double tol, const char *fmt,
		 ...) TAP_PRINTF(6, 7);
int like_at(const char *file, int line, const char *got, const char *needle, const char *fmt, ...)
    TAP_PRINTF(5, 6);
void skip(int n, const char *fmt, ...) TAP_PRINTF(2, 3);
void diag(const char *fmt, ...) TAP_PRINTF(1, 2);
void note(const char *fmt, ...) TAP_PRINTF(1, 2);
void bail_out(const char *fmt, ...) TAP_PRINTF(1, 2) __attribute__((noreturn));
/* Prints the trailing plan if none was given; returns the exit status (0 iff all passed). */
int done_testing(void);
/* Max relative error between two float arrays: |a-b| / max(|b|, floor). */
double tap_max_rel_err(const float *got, const float *want, size_t n, double floor);

#define ok(cond, ...)		  ok_at(__FILE__, __LINE__, !!(cond), __VA_ARGS__)
#define is(got, want, ...)	  is_at(__FILE__, __LINE__, (got), (want), __VA_ARGS__)
#define is_int(got, want, ...)	  is_int_at(__FILE__, __LINE__, (got), (want), __VA_ARGS__)
#define is_double(g, w, tol, ...) is_double_at(__FILE__, __LINE__, (g), (w), (tol), __VA_ARGS__)
#define like(got, needle, ...)	  like_at(__FILE__, __LINE__, (got), (needle), __VA_ARGS__)
#define pass(...)		  ok_at(__FILE__, __LINE__, 1, __VA_ARGS__)
#define fail(...)		  ok_at(__FILE__, __LINE__, 0, __VA_ARGS__)

#endif
