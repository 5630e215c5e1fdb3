/* loss_scale.c (test) — trainer/loss_scale.c: every decision of dynamic scaling over long
 * sequences of good and overflowing steps against PyTorch's GradScaler algorithm written out
 * here (with dptrain(5)'s bounds), on the reference and the CPU backend; unscaling exact for
 * powers of two and PyTorch's rounding of 1/scale otherwise; the static scale; the bounds; the
 * state a checkpoint carries; the messages; a failing backend; the test hook. Owns nothing
 * outside its process. */
#define _GNU_SOURCE
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "config/config.h"
#include "trainer/backend/backend.h"
#include "trainer/loss_scale.h"
#include "trainer/nn/nn.h"
#include "t/lib/tap.h"

#define N 1031 /* gradients: odd, several of the backends' blocks */

/* ---------------------------------------------------------------------------------------
 * The reference: torch.cuda.amp.GradScaler (step, then update: _amp_update_scale_), with
 * backoff_factor 0.5 and growth_factor 2, and dptrain(5)'s bounds: a scale is a number in
 * (0, 1e30], so growth stops below 1e30 (PyTorch's stops where the float32 scale would become
 * inf, and resets the tracker the same way); gradients still infinite at 2^-24 stop training. */

#define REF_FLOOR 0x1p-24
#define REF_CEIL  1e30

struct ref_scaler {
	double scale;
	long tracker, interval, skipped;
};

/* 1: optimizer.step() runs; 0: skipped (found_inf); -1: training diverged. */
static int ref_step(struct ref_scaler *r, int found_inf)
{
	if (found_inf) {
		r->skipped++;
		r->tracker = 0;
		if (r->scale * 0.5 < REF_FLOOR)
			return -1;
		r->scale *= 0.5;
		return 0;
	}
	if (++r->tracker == r->interval) {
		if (r->scale * 2.0 <= REF_CEIL)
			r->scale *= 2.0;
		r->tracker = 0;
	}
	return 1;
}

/* ---------------------------------------------------------------------------------------
 * Helpers. */

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* A gradient in [2^-20, 1) with a random sign: times any scale in [2^-24, 2^99] it stays a
 * normal float, so scaling by a power of two and back is exact. */
static float grad_value(void)
{
	uint64_t r = next();
	float m = 1.0f + (float)(r & 0xffffff) / (float)(1 << 24);
	int e = -(int)((r >> 24) % 20) - 1;
	return ((r >> 40) & 1 ? -1.0f : 1.0f) * ldexpf(m, e);
}

static struct cfg_precision prec(int dynamic, double scale, double initial, int interval)
{
	return (struct cfg_precision){.mode = CFG_PREC_FP16,
				      .dynamic_loss_scale = dynamic,
				      .loss_scale = scale,
				      .initial_loss_scale = initial,
				      .growth_interval = interval};
}

/* What loss_scale_check reads of a model: its backend and the flat gradients. */
static struct nn_model model_of(struct backend *be, float *grads)
{
	return (struct nn_model){.be = be, .grads = grads, .param_total = N};
}

/* What rank 0 prints for a skipped step, from the reference's scale before it. */
static void skip_line(char *buf, size_t len, long step, double before)
{
	snprintf(buf, len,
		 "dptrain: step %ld: gradients overflowed at loss scale %g; step skipped, scale "
		 "now %g\n",
		 step, before, before / 2);
}

/* ---------------------------------------------------------------------------------------
 * Dynamic scaling: a long sequence against the reference. */

struct seq {
	const char *what;
	double initial;
	int interval;
	int steps;
	unsigned inf_per_64; /* how often a step overflows */
	int until_error;     /* the sequence is expected to end in divergence */
	uint64_t seed;	     /* of its gradients and overflows: the same on every backend */
};

/* Runs s on be; the first mismatch of each kind is diagnosed and fails its test point. */
static void run_sequence(struct backend *be, const struct seq *s)
{
	struct cfg_precision p = prec(1, 1, s->initial, s->interval);
	struct loss_scale sc;
	struct ref_scaler ref = {.scale = s->initial, .interval = s->interval};
	float *g = malloc(N * sizeof(float)), *want = malloc(N * sizeof(float));
	struct nn_model m = model_of(be, g);
	char *out = NULL, expect[65536] = "", line[256];
	size_t outlen = 0;
	FILE *f = open_memstream(&out, &outlen);
	struct dp_error err = {0};
	int bad = 0, grads_bad = 0, rv = 0, want_rv = 0, step;
	long skips = 0, grows = 0;

	if (!g || !want || !f)
		bail_out("out of memory");
	rng = s->seed;
	loss_scale_init(&sc, &p);
	for (step = 1; step <= s->steps; step++) {
		double before = sc.scale;
		int inf = (unsigned)(next() % 64) < s->inf_per_64;
		for (size_t i = 0; i < N; i++) {
			want[i] = grad_value();
			g[i] = want[i] * (float)before; /* what backward leaves: scaled gradients */
		}
		if (inf) { /* one element, anywhere, the last one included */
			size_t at = next() % 4 == 0 ? N - 1 : (size_t)(next() % N);
			g[at] = next() % 2 ? INFINITY : NAN;
			if (next() % 3 == 0)
				g[at] = -INFINITY;
		}
		want_rv = ref_step(&ref, inf);
		rv = loss_scale_check(&sc, &m, step, f, 1, &err);
		if (want_rv == 0) {
			skip_line(line, sizeof(line), step, before);
			if (strlen(expect) + strlen(line) < sizeof(expect))
				strcat(expect, line);
			skips++;
		}
		if (want_rv == 1 && ref.scale > before)
			grows++;
		if (!bad && (rv != want_rv || sc.scale != ref.scale || sc.good != ref.tracker ||
			     sc.skipped != ref.skipped)) {
			diag(
			    "%s: step %d: got %d, scale %g, good %ld, skipped %ld; GradScaler: %d, "
			    "%g, %ld, %ld",
			    s->what, step, rv, sc.scale, sc.good, sc.skipped, want_rv, ref.scale,
			    ref.tracker, ref.skipped);
			bad = 1;
		}
		if (rv == 1 && !grads_bad && memcmp(g, want, N * sizeof(float)) != 0) {
			diag("%s: step %d: unscaled gradients differ from the unscaled ones",
			     s->what, step);
			grads_bad = 1;
		}
		if (rv < 0 || want_rv < 0)
			break;
	}
	fclose(f);
	ok(!bad,
	   "%s (%s): %d steps, %ld skipped, %ld growths: every decision, scale and count "
	   "is GradScaler's",
	   s->what, be->ops->name, step > s->steps ? s->steps : step, skips, grows);
	ok(!grads_bad, "%s (%s): the gradients of every step taken are unscaled to the bit",
	   s->what, be->ops->name);
	is(out, expect, "%s (%s): one line per skipped step, naming it and both scales", s->what,
	   be->ops->name);
	if (s->until_error) {
		char need[128];
		ok(rv == -1 && want_rv == -1, "%s (%s): ends with an error at step %d", s->what,
		   be->ops->name, step);
		snprintf(need, sizeof(need),
			 "step %d: the gradients are not finite even at loss "
			 "scale 5.96046e-08 (",
			 step);
		like(err.text, need, "%s (%s): it names the step and the smallest scale", s->what,
		     be->ops->name);
		snprintf(need, sizeof(need), "(%ld steps skipped)", ref.skipped);
		like(err.text, need, "%s (%s): and counts the skipped steps", s->what,
		     be->ops->name);
	} else {
		ok(rv != -1, "%s (%s): never an error: %s", s->what, be->ops->name, err.text);
	}
	free(out);
	free(g);
	free(want);
}

static const struct seq seqs[] = {
    {"interval 3 from 2^10, a sixth overflowing", 1024, 3, 600, 11, 0, 0x9e3779b97f4a7c15ull},
    {"interval 1 from 2^0, rare overflows", 1, 1, 300, 2, 0, 0xbf58476d1ce4e5b9ull},
    {"interval 5 from 2^16, an eighth overflowing", 65536, 5, 600, 8, 0, 0x94d049bb133111ebull},
    {"interval 2 from 2^90: held below 1e30", 0x1p90, 2, 200, 1, 0, 0x2545f4914f6cdd1dull},
    {"interval 4 from 2^-20, every other step overflowing", 0x1p-20, 4, 400, 32, 1,
     0x243f6a8885a308d3ull},
};

/* ---------------------------------------------------------------------------------------
 * The bounds, exactly where they bite. */

static void test_bounds(struct backend *be)
{
	float g[N];
	struct nn_model m = model_of(be, g);
	struct loss_scale sc;
	struct cfg_precision p = prec(1, 1, 0x1p98, 1);
	struct dp_error err = {0};
	int rv;

	loss_scale_init(&sc, &p);
	for (size_t i = 0; i < N; i++)
		g[i] = 1.0f;
	rv = loss_scale_check(&sc, &m, 1, stdout, 0, &err);
	ok(rv == 1 && sc.scale == 0x1p99 && sc.good == 0, "2^98 grows to 2^99 (< 1e30)");
	rv = loss_scale_check(&sc, &m, 2, stdout, 0, &err);
	ok(rv == 1 && sc.scale == 0x1p99 && sc.good == 0,
	   "2^99 does not grow past 1e30; the good steps start again: %g, %ld", sc.scale, sc.good);

	p = prec(1, 1, 0x1p-23, 100);
	loss_scale_init(&sc, &p);
	g[7] = INFINITY;
	rv = loss_scale_check(&sc, &m, 1, stdout, 0, &err);
	ok(rv == 0 && sc.scale == 0x1p-24, "an overflow at 2^-23 goes down to 2^-24");
	g[7] = NAN;
	rv = loss_scale_check(&sc, &m, 2, stdout, 0, &err);
	ok(rv == -1, "an overflow at 2^-24 is an error");
	like(err.text,
	     "step 2: the gradients are not finite even at loss scale 5.96046e-08 (2 "
	     "steps skipped): training diverged; lower optimizer.lr or check the data",
	     "which says why and what to do");

	/* the largest finite gradients are no overflow: GradScaler looks for inf and nan only */
	p = prec(1, 1, 1, 2000);
	loss_scale_init(&sc, &p);
	for (size_t i = 0; i < N; i++)
		g[i] = i % 2 ? FLT_MAX : -FLT_MAX;
	rv = loss_scale_check(&sc, &m, 1, stdout, 0, &err);
	ok(rv == 1 && sc.skipped == 0 && g[0] == -FLT_MAX && g[N - 1] == -FLT_MAX,
	   "%d gradients of +-FLT_MAX are finite: the step goes ahead (%s)", N, be->ops->name);
}

/* ---------------------------------------------------------------------------------------
 * Static scaling and no scaling. */

static void test_static(struct backend *be)
{
	float g[N], want[N];
	struct nn_model m = model_of(be, g);
	struct loss_scale sc;
	struct cfg_precision p = prec(0, 1, 65536, 2000);
	struct dp_error err = {0};
	char *out = NULL;
	size_t outlen = 0;
	int same = 1;

	loss_scale_init(&sc, &p);
	ok(!sc.on && !sc.dynamic && sc.scale == 1, "a static scale of 1 is off");
	for (size_t i = 0; i < N; i++)
		g[i] = want[i] = grad_value();
	g[3] = want[3] = INFINITY;
	ok(loss_scale_check(&sc, &m, 1, stdout, 1, &err) == 1 && !memcmp(g, want, sizeof(g)),
	   "off: the step goes ahead and the gradients are left as they are");

	p = prec(0, 128, 65536, 2000);
	loss_scale_init(&sc, &p);
	ok(sc.on && !sc.dynamic && sc.scale == 128, "a static scale of 128");
	for (int step = 1; step <= 20; step++) {
		for (size_t i = 0; i < N; i++) {
			want[i] = grad_value();
			g[i] = want[i] * 128.0f;
		}
		FILE *f = open_memstream(&out, &outlen);
		if (loss_scale_check(&sc, &m, step, f, 1, &err) != 1 || memcmp(g, want, sizeof(g)))
			same = 0;
		fclose(f);
		if (outlen)
			same = 0;
		free(out);
		out = NULL;
	}
	ok(same && sc.scale == 128 && sc.good == 0 && sc.skipped == 0,
	   "static 128 (%s): 20 steps unscaled to the bit, silently; the scale never moves",
	   be->ops->name);

	/* PyTorch's unscale_: inv_scale = scale.double().reciprocal().float(), grads *= it */
	p = prec(0, 1000, 65536, 2000);
	loss_scale_init(&sc, &p);
	float inv = (float)(1.0 / 1000.0);
	int differs_from_division = 0;
	for (size_t i = 0; i < N; i++) {
		g[i] = grad_value() * 1000.0f;
		want[i] = g[i] * inv;
		differs_from_division += want[i] != g[i] / 1000.0f;
	}
	ok(loss_scale_check(&sc, &m, 1, stdout, 1, &err) == 1 && !memcmp(g, want, sizeof(g)),
	   "static 1000 (%s): each gradient times (float)(1.0/1000), as GradScaler (%d of %d "
	   "differ from a division)",
	   be->ops->name, differs_from_division, N);

	p = prec(1, 1, 1, 0);
	loss_scale_init(&sc, &p);
	ok(sc.on && sc.dynamic && sc.scale == 1 && sc.interval == 2000,
	   "dynamic from 1 is on; growth_interval 0 means GradScaler's 2000");
}

/* ---------------------------------------------------------------------------------------
 * What a checkpoint carries (train_pos.loss_scale, scale_good) is the whole state: a scaler
 * restored from it, as train.c does after loss_scale_init, decides as the one never stopped. */

static void test_resume(struct backend *be)
{
	float g[N];
	struct nn_model m = model_of(be, g);
	struct cfg_precision p = prec(1, 1, 4096, 3);
	struct loss_scale a, b;
	struct dp_error err = {0};
	int same = 1, restored_at = 0;

	loss_scale_init(&a, &p);
	for (int step = 1; step <= 200; step++) {
		int inf = next() % 5 == 0;
		if (step == 97) { /* the checkpoint: the new run starts from what it holds */
			loss_scale_init(&b, &p);
			b.scale = a.scale;
			b.good = a.good;
			restored_at = step;
		}
		for (int k = 0; k < 2; k++) {
			struct loss_scale *sc = k ? &b : &a;
			if (k && !restored_at)
				continue;
			for (size_t i = 0; i < N; i++)
				g[i] = 0.5f;
			if (inf)
				g[N / 2] = INFINITY;
			int rv = loss_scale_check(sc, &m, step, stdout, 0, &err);
			if (k && (rv != (inf ? 0 : 1) || b.scale != a.scale || b.good != a.good))
				same = 0;
		}
	}
	ok(restored_at && same && a.good != 0,
	   "restored from (scale, good steps) at step 97, 103 more decisions equal the "
	   "uninterrupted run's (scale %g, %ld good steps at the end)",
	   a.scale, a.good);
}

/* ---------------------------------------------------------------------------------------
 * A backend that fails. */

static int fail_sumsq(struct backend *be, const float *x, size_t n, double *out)
{
	(void)x;
	(void)out;
	return errprintf(&be->err, "sumsq(n=%zu): injected failure", n);
}

static int fail_axpby(struct backend *be, float alpha, const float *x, float beta, float *y,
		      size_t n)
{
	(void)alpha;
	(void)x;
	(void)beta;
	(void)y;
	return errprintf(&be->err, "axpby(n=%zu): injected failure", n);
}

static void test_backend_fails(struct backend *be)
{
	struct backend_ops ops = *be->ops;
	struct backend bad = *be;
	float g[N];
	struct nn_model m = model_of(&bad, g);
	struct loss_scale sc;
	struct cfg_precision p = prec(1, 1, 256, 2);
	struct dp_error err = {0};

	bad.ops = &ops;
	for (size_t i = 0; i < N; i++)
		g[i] = 1.0f;
	ops.sumsq = fail_sumsq;
	loss_scale_init(&sc, &p);
	ok(loss_scale_check(&sc, &m, 41, stdout, 1, &err) == -1, "sumsq fails: -1");
	is(err.text, "loss scaling at step 41: sumsq(n=1031): injected failure",
	   "the error names the step and the backend's message");
	ok(sc.scale == 256 && sc.good == 0 && sc.skipped == 0, "and the scaler is as it was");

	ops.sumsq = be->ops->sumsq;
	ops.axpby = fail_axpby;
	ok(loss_scale_check(&sc, &m, 42, stdout, 1, &err) == -1, "dynamic, axpby fails: -1");
	is(err.text, "loss scaling at step 42: axpby(n=1031): injected failure", "named likewise");
	p = prec(0, 8, 1, 1);
	loss_scale_init(&sc, &p);
	ok(loss_scale_check(&sc, &m, 43, stdout, 1, &err) == -1 &&
	       strstr(err.text, "loss scaling at step 43: axpby"),
	   "static, axpby fails: -1 naming the step");
}

/* ---------------------------------------------------------------------------------------
 * DPTRAIN_TEST_OVERFLOW_AT. */

static void test_hook(void)
{
	long hits[8];
	int n = 0;

	unsetenv("DPTRAIN_TEST_OVERFLOW_AT");
	for (long s = 0; s < 100; s++)
		n += loss_scale_test_overflow(s);
	is_int(n, 0, "unset: no step overflows");
	setenv("DPTRAIN_TEST_OVERFLOW_AT", "3,7,12", 1);
	n = 0;
	for (long s = 0; s < 100; s++)
		if (loss_scale_test_overflow(s) && n < 8)
			hits[n++] = s;
	ok(n == 3 && hits[0] == 3 && hits[1] == 7 && hits[2] == 12,
	   "\"3,7,12\": steps 3, 7 and 12 and no other (%d)", n);
	setenv("DPTRAIN_TEST_OVERFLOW_AT", "5", 1);
	ok(loss_scale_test_overflow(5) && !loss_scale_test_overflow(50) &&
	       !loss_scale_test_overflow(4),
	   "\"5\": step 5 only");
	setenv("DPTRAIN_TEST_OVERFLOW_AT", "junk", 1);
	ok(!loss_scale_test_overflow(0) && !loss_scale_test_overflow(1), "junk: none");
	unsetenv("DPTRAIN_TEST_OVERFLOW_AT");
}

int main(void)
{
	struct dp_error err = {0};
	struct backend *be[2];

	be[0] = be_ref_create(&err);
	if (!be[0])
		bail_out("be_ref_create: %s", err.text);
	be[1] = be_cpu_create(1, &err);
	if (!be[1])
		bail_out("be_cpu_create(1): %s", err.text);
	for (int b = 0; b < 2; b++) {
		for (size_t i = 0; i < sizeof(seqs) / sizeof(*seqs); i++)
			run_sequence(be[b], &seqs[i]);
		test_bounds(be[b]);
		test_static(be[b]);
	}
	test_resume(be[0]);
	test_backend_fails(be[0]);
	test_hook();

	/* rank 0 alone says a step was skipped */
	{
		float g[N];
		struct nn_model m = model_of(be[0], g);
		struct loss_scale sc;
		struct cfg_precision p = prec(1, 1, 64, 10);
		char *out = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&out, &len);
		for (size_t i = 0; i < N; i++)
			g[i] = 1.0f;
		g[0] = INFINITY;
		loss_scale_init(&sc, &p);
		int rv = loss_scale_check(&sc, &m, 9, f, 0, &err);
		fclose(f);
		ok(rv == 0 && sc.scale == 32 && len == 0,
		   "another rank skips and halves alike, saying nothing");
		free(out);
	}
	for (int b = 0; b < 2; b++)
		be[b]->ops->destroy(be[b]);
	return done_testing();
}
