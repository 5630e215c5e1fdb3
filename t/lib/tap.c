/* tap.c — TAP output for the C unit tests: plan, ok/is/like, skip, diag.
 * Global state is the one tap context below; tests are single-threaded. */
#include "t/lib/tap.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
	int planned; /* -1: no plan yet */
	int run;
	int failed;
} tap = {-1, 0, 0};

void plan(int n)
{
	tap.planned = n;
	printf("1..%d\n", n);
	fflush(stdout);
}

void plan_skip_all(const char *fmt, ...)
{
	va_list ap;
	printf("1..0 # SKIP ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(0);
}

static int vresult(const char *file, int line, int cond, const char *fmt, va_list ap)
{
	tap.run++;
	if (!cond)
		tap.failed++;
	printf("%sok %d - ", cond ? "" : "not ", tap.run);
	vprintf(fmt, ap);
	printf("\n");
	if (!cond)
		printf("#   Failed test at %s line %d.\n", file, line);
	fflush(stdout);
	return cond;
}

int ok_at(const char *file, int line, int cond, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vresult(file, line, cond, fmt, ap);
	va_end(ap);
	return cond;
}

int is_at(const char *file, int line, const char *got, const char *want, const char *fmt, ...)
{
	int cond = (got == NULL && want == NULL) ||
		   (got != NULL && want != NULL && strcmp(got, want) == 0);
	va_list ap;
	va_start(ap, fmt);
	vresult(file, line, cond, fmt, ap);
	va_end(ap);
	if (!cond) {
		printf("#          got: '%s'\n", got ? got : "(null)");
		printf("#     expected: '%s'\n", want ? want : "(null)");
	}
	return cond;
}

int like_at(const char *file, int line, const char *got, const char *needle, const char *fmt, ...)
{
	int cond = got != NULL && needle != NULL && strstr(got, needle) != NULL;
	va_list ap;
	va_start(ap, fmt);
	vresult(file, line, cond, fmt, ap);
	va_end(ap);
	if (!cond) {
		printf("#                   '%s'\n", got ? got : "(null)");
		printf("#     doesn't match '%s'\n", needle ? needle : "(null)");
	}
	return cond;
}

int is_int_at(const char *file, int line, long long got, long long want, const char *fmt, ...)
{
	int cond = got == want;
	va_list ap;
	va_start(ap, fmt);
	vresult(file, line, cond, fmt, ap);
	va_end(ap);
	if (!cond)
		printf("#          got: %lld\n#     expected: %lld\n", got, want);
	return cond;
}

int is_double_at(const char *file, int line, double got, double want, double tol, const char *fmt,
		 ...)
{
	/* NaN never passes, whatever the tolerance. */
	int cond = !isnan(got) && !isnan(want) && fabs(got - want) <= tol;
	va_list ap;
	va_start(ap, fmt);
	vresult(file, line, cond, fmt, ap);
	va_end(ap);
	if (!cond)
		printf("#          got: %.9g\n#     expected: %.9g (tolerance %.3g)\n", got, want,
		       tol);
	return cond;
}

void skip(int n, const char *fmt, ...)
{
	char reason[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	for (int i = 0; i < n; i++)
		printf("ok %d # skip %s\n", ++tap.run, reason);
	fflush(stdout);
}

static void vcomment(FILE *f, const char *fmt, va_list ap)
{
	char buf[4096];
	vsnprintf(buf, sizeof(buf), fmt, ap);
	for (char *line = buf, *nl; line && *line; line = nl) {
		nl = strchr(line, '\n');
		if (nl)
			*nl++ = '\0';
		fprintf(f, "# %s\n", line);
	}
	fflush(f);
}

void diag(const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	va_start(ap, fmt);
	vcomment(stderr, fmt, ap);
	va_end(ap);
}

void note(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vcomment(stdout, fmt, ap);
	va_end(ap);
}

void bail_out(const char *fmt, ...)
{
	va_list ap;
	printf("Bail out! ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(255);
}

int done_testing(void)
{
	if (tap.planned < 0)
		printf("1..%d\n", tap.run);
	else if (tap.planned != tap.run)
		printf("# Looks like you planned %d tests but ran %d.\n", tap.planned, tap.run);
	if (tap.failed)
		printf("# Looks like you failed %d test%s of %d.\n", tap.failed,
		       tap.failed == 1 ? "" : "s", tap.run);
	fflush(stdout);
	return tap.failed || (tap.planned >= 0 && tap.planned != tap.run) ? 1 : 0;
}

double tap_max_rel_err(const float *got, const float *want, size_t n, double floor)
{
	double worst = 0.0;
	for (size_t i = 0; i < n; i++) {
		double g = got[i], w = want[i];
		if (isnan(g) || isnan(w))
			return INFINITY;
		double den = fabs(w) > floor ? fabs(w) : floor;
		double e = fabs(g - w) / den;
		if (e > worst)
			worst = e;
	}
	return worst;
}
