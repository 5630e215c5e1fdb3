/* backend_check.h — helpers shared by the backend op tests (t/unit/backend*.c): a seeded
 * generator, NaN poisoning, and a relative-error check whose floor scales with the data.
 * Header-only (static inline) so that it does not become a test program of its own. */
#ifndef DPTRAIN_BACKEND_CHECK_H
#define DPTRAIN_BACKEND_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "t/lib/tap.h"

/* Every comparison of two float computations (different summation orders, float against
 * double accumulation) must agree to this relative error. */
#define CHK_TOL 1e-4

struct chk_rng {
	uint64_t s;
};

/* The same inputs on every run (a test that passes once passes every time, on every machine):
 * DPTRAIN_TEST_SEED=N picks other ones, DPTRAIN_TEST_SEED=time new ones per run, to explore.
 * (With a seed per run, nn_half.t's fp16 LeNet gradients fell below their cosine bound about
 * once in many runs: a max-pool or ReLU decision within fp16 rounding of its tie flips and
 * moves one sample's share of the gradient, as t0700 explains for float32 sums.) */
static inline uint64_t chk_seed(void)
{
	const char *env = getenv("DPTRAIN_TEST_SEED");
	uint64_t seed = !env || !*env		   ? 20261126u
			: strcmp(env, "time") == 0 ? (uint64_t)time(NULL)
						   : strtoull(env, NULL, 0);

	diag("seed %llu (rerun with DPTRAIN_TEST_SEED=%llu)", (unsigned long long)seed,
	     (unsigned long long)seed);
	return seed;
}

/* splitmix64 */
static inline uint64_t chk_next(struct chk_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline void chk_random(struct chk_rng *r, float *x, size_t n, float lo, float hi)
{
	for (size_t i = 0; i < n; i++)
		x[i] = lo + (hi - lo) * (float)((chk_next(r) >> 40) * 0x1.0p-24);
}

static inline void chk_poison(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = NAN;
}

static inline float *chk_alloc(size_t n)
{
	float *p = malloc(sizeof(float) * (n ? n : 1));

	if (!p)
		bail_out("out of memory allocating %zu floats", n);
	return p;
}

static inline float *chk_copy(const float *x, size_t n)
{
	float *p = chk_alloc(n);

	memcpy(p, x, sizeof(float) * n);
	return p;
}

/* Max relative error with a floor of rms_frac times the reference's RMS: elements that cancel
 * to near zero are judged against the tensor's scale, not their own. At most tol. */
static inline int chk_close_tol(const float *got, const float *want, size_t n, double tol,
				double rms_frac, const char *what)
{
	double ss = 0.0, floor, err;

	for (size_t i = 0; i < n; i++)
		ss += (double)want[i] * want[i];
	floor = rms_frac * sqrt(ss / (n ? n : 1));
	if (!(floor > 1e-12))
		floor = 1e-12;
	err = tap_max_rel_err(got, want, n, floor);
	return ok(err <= tol, "%s: max rel err %.2e (n=%zu, floor %.2e)", what, err, n, floor);
}

/* ... at most CHK_TOL over a tenth of the RMS: two float32 computations. */
static inline int chk_close(const float *got, const float *want, size_t n, const char *what)
{
	return chk_close_tol(got, want, n, CHK_TOL, 0.1, what);
}

#endif
