/* optim_gpu.c (test) — trainer/optim/optim_cuda.cu against trainer/optim/optim.c on fresh random
 * data: SGD (plain, weight decay, momentum, Nesterov, dampening), AdamW and LAMB (clipping, nvlamb)
 * on the whole buffer and on a ZeRO shard, with NaN padding that must stay untouched; bit-for-bit
 * repeats, the state's round trip through the host, and the protocol across two shards.
 * Skips where no GPU is visible. Owns nothing outside its process. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/backend/backend.h"
#include "t/unit/backend_check.h"
#include "trainer/backend/backend_cuda.h"
#include "trainer/optim/optim.h"
#include "trainer/optim/optim_gpu.h"
#include "t/lib/tap.h"

/* optim_gpu.h promises optim.c's results to float32 rounding; the kernels follow its order of
 * operations, so most cases should be bitwise equal (the tests say which are). */
#define TOL    1e-6
#define NSTEPS 6
#define HALF   3 /* steps before the state goes through the host */

/* Out of offset order, with padding between them; sizes around the kernels' chunks (several
 * chunks for the two big ones, a chunk boundary inside), an empty segment, one whose
 * parameters start at zero (LAMB: ||p|| = 0) and one whose gradients stay zero (||u|| = 0). */
static const struct optim_segment segs[] = {
    {"layer3.weight", 2900, 70001, 1},
    {"layer1.bias", 0, 5, 0},
    {"fc.weight", 73000, 33000, 1},
    {"layer2.bias", 2096, 1, 0},
    {"bn.weight", 2000, 64, 0},
    {"layer1.weight", 5, 1921, 1},
    {"empty", 1936, 0, 1},
    {"bn.bias", 1936, 64, 0},
    {"layer2.weight", 2100, 777, 1},
    {"zero.weight", 106016, 100, 1},
    {"frozen.bias", 106200, 50, 0},
    {"layer3.bias", 2880, 17, 0},
};
#define NSEGS	 ((int)(sizeof(segs) / sizeof(*segs)))
#define TOTAL	 ((size_t)106300)
#define ZERO_SEG 9
#define FROZEN	 10
/* The ZeRO shard: cuts layer1.weight and fc.weight. The two-shard protocol cuts layer3.weight. */
#define SHARD_LO ((size_t)1000)
#define SHARD_HI ((size_t)80000)
#define CUT	 ((size_t)40000)

/* A quiet NaN with a payload: GPU arithmetic makes the canonical NaN, so any write shows. */
#define POISON_BITS 0x7fc5a5a5u

struct config {
	const char *name;
	struct optim_params p;
	double lr;
};

struct t {
	struct backend *be;
	float *p0;	       /* the initial parameters, POISON in the padding */
	float *grads[NSTEPS];  /* POISON in the padding */
	float *dgrads[NSTEPS]; /* device copies */
	char covered[TOTAL];   /* element belongs to a segment */
};

/* What a run leaves: all parameters, the state buffers ([lo, hi) each) and the step count. */
struct result {
	float *params;
	float *state[OPTIM_MAX_STATE];
	int nstate;
	size_t lo, hi;
	long step;
};

static double lr_of(const struct config *c, int s)
{
	return c->lr * (1.0 - 0.1 * s);
}

/* ------------------------------------------------------------------------------------- */
/* Device buffers: every failure here is the backend's, and stops the test. */

static float *up(struct t *t, const float *h, size_t n)
{
	float *p = t->be->ops->alloc(t->be, sizeof(float) * n);

	if (!p)
		bail_out("cuda alloc(%zu floats): %s", n, t->be->err.text);
	if (t->be->ops->from_host(t->be, p, h, sizeof(float) * n) < 0)
		bail_out("cuda from_host(%zu floats): %s", n, t->be->err.text);
	return p;
}

static float *down(struct t *t, const float *d, size_t n)
{
	float *h = chk_alloc(n);

	if (t->be->ops->to_host(t->be, h, d, sizeof(float) * n) < 0)
		bail_out("cuda to_host(%zu floats): %s", n, t->be->err.text);
	return h;
}

/* ------------------------------------------------------------------------------------- */

static void result_from(struct result *r, struct optim *o, float *params)
{
	int n;
	struct optim_state_buf *b = optim_state(o, &n);

	memset(r, 0, sizeof(*r));
	r->params = params;
	r->nstate = n;
	r->lo = o->lo;
	r->hi = o->hi;
	r->step = o->step;
	for (int k = 0; k < n; k++)
		r->state[k] = chk_copy(b[k].data, b[k].count);
}

static void result_free(struct result *r)
{
	free(r->params);
	for (int k = 0; k < r->nstate; k++)
		free(r->state[k]);
	memset(r, 0, sizeof(*r));
}

static void init(const struct config *c, struct optim *o, size_t lo, size_t hi)
{
	struct dp_error err;

	if (optim_init_shard(o, &c->p, segs, NSEGS, TOTAL, lo, hi, &err) < 0)
		bail_out("%s: optim_init_shard [%zu, %zu): %s", c->name, lo, hi, err.text);
}

static struct optim_gpu *gpu_create(struct t *t, const struct config *c, struct optim *o)
{
	struct dp_error err;
	struct optim_gpu *g;

	if (optim_gpu_create(&g, t->be, o, &err) < 0)
		bail_out("%s: %s", c->name, err.text);
	return g;
}

/* Steps [from, to) of optim_gpu_step. */
static void gpu_steps(struct t *t, const struct config *c, struct optim_gpu *g, struct optim *o,
		      float *dp, int from, int to)
{
	struct dp_error err;

	for (int s = from; s < to; s++)
		if (optim_gpu_step(g, o, dp, t->dgrads[s], lr_of(c, s), &err) < 0)
			bail_out("%s step %d: %s", c->name, s, err.text);
}

static void gpu_state_to_host(const struct config *c, struct optim_gpu *g, struct optim *o)
{
	struct dp_error err;

	if (optim_gpu_state_to_host(g, o, &err) < 0)
		bail_out("%s: %s", c->name, err.text);
}

static void cpu_run(struct t *t, const struct config *c, size_t lo, size_t hi, struct result *r)
{
	struct optim o;
	float *p = chk_copy(t->p0, TOTAL);

	init(c, &o, lo, hi);
	for (int s = 0; s < NSTEPS; s++)
		optim_step(&o, p, t->grads[s], lr_of(c, s));
	result_from(r, &o, p);
	optim_free(&o);
}

static void gpu_run(struct t *t, const struct config *c, size_t lo, size_t hi, struct result *r)
{
	struct optim o;
	float *dp = up(t, t->p0, TOTAL);

	init(c, &o, lo, hi);
	struct optim_gpu *g = gpu_create(t, c, &o);
	gpu_steps(t, c, g, &o, dp, 0, NSTEPS);
	gpu_state_to_host(c, g, &o);
	result_from(r, &o, down(t, dp, TOTAL));
	optim_gpu_destroy(g);
	optim_free(&o);
	t->be->ops->free(t->be, dp);
}

/* HALF steps; the state to the host; a new optimizer restored from it (the checkpoint's path:
 * a fresh optim with the saved data and step) does the rest. */
static void gpu_run_resumed(struct t *t, const struct config *c, struct result *r)
{
	struct dp_error err;
	struct optim a, b;
	int na, nb;
	float *dp = up(t, t->p0, TOTAL);

	init(c, &a, 0, TOTAL);
	struct optim_gpu *g = gpu_create(t, c, &a);
	gpu_steps(t, c, g, &a, dp, 0, HALF);
	gpu_state_to_host(c, g, &a);
	/* gone before the next one exists: its blocks may come back to the new one, not zeroed */
	optim_gpu_destroy(g);

	init(c, &b, 0, TOTAL);
	struct optim_state_buf *sa = optim_state(&a, &na), *sb = optim_state(&b, &nb);
	for (int k = 0; k < na && k < nb; k++)
		memcpy(sb[k].data, sa[k].data, sa[k].count * sizeof(float));
	b.step = a.step;
	g = gpu_create(t, c, &b);
	if (optim_gpu_state_from_host(g, &b, &err) < 0)
		bail_out("%s: %s", c->name, err.text);
	/* the host copy is the checkpoint's: changing it now must not reach the device */
	for (int k = 0; k < nb; k++)
		for (size_t i = 0; i < sb[k].count; i++)
			sb[k].data[i] = NAN;
	gpu_steps(t, c, g, &b, dp, HALF, NSTEPS);
	gpu_state_to_host(c, g, &b);
	result_from(r, &b, down(t, dp, TOTAL));
	optim_gpu_destroy(g);
	optim_free(&a);
	optim_free(&b);
	t->be->ops->free(t->be, dp);
}

/* The protocol of optim.h with two shards [0, CUT) and [CUT, TOTAL), the all-reduces summed
 * here; the state stitched into whole-buffer arrays. */
static void gpu_run_protocol(struct t *t, const struct config *c, struct result *r)
{
	static const size_t bounds[] = {0, CUT, TOTAL};
	struct dp_error err;
	struct optim sh[2];
	struct optim_gpu *g[2];
	float *dp = up(t, t->p0, TOTAL);

	for (int k = 0; k < 2; k++) {
		init(c, &sh[k], bounds[k], bounds[k + 1]);
		g[k] = gpu_create(t, c, &sh[k]);
	}
	for (int s = 0; s < NSTEPS; s++) {
		double gn = 0.0, partial[2][2 * NSEGS], sums[2 * NSEGS] = {0};
		if (optim_needs_grad_norm(&sh[0])) {
			double gsq = 0.0, x;
			for (int k = 0; k < 2; k++) {
				if (optim_gpu_grad_sumsq(g[k], &sh[k], t->dgrads[s], &x, &err) < 0)
					bail_out("%s shard %d: %s", c->name, k, err.text);
				gsq += x;
			}
			gn = sqrt(gsq);
		}
		for (int k = 0; k < 2; k++)
			if (optim_gpu_prepare(g[k], &sh[k], dp, t->dgrads[s], gn, partial[k],
					      &err) < 0)
				bail_out("%s shard %d: %s", c->name, k, err.text);
		for (int i = 0; i < optim_nsums(&sh[0]); i++)
			sums[i] = partial[0][i] + partial[1][i];
		for (int k = 0; k < 2; k++)
			if (optim_gpu_apply(g[k], &sh[k], dp, t->dgrads[s], lr_of(c, s), sums,
					    &err) < 0)
				bail_out("%s shard %d: %s", c->name, k, err.text);
	}
	memset(r, 0, sizeof(*r));
	r->params = down(t, dp, TOTAL);
	r->lo = 0;
	r->hi = TOTAL;
	r->step = sh[1].step;
	r->nstate = sh[0].nstate;
	for (int j = 0; j < r->nstate; j++)
		r->state[j] = calloc(TOTAL, sizeof(float));
	for (int k = 0; k < 2; k++) {
		gpu_state_to_host(c, g[k], &sh[k]);
		for (int j = 0; j < r->nstate; j++)
			if (sh[k].state[j].count)
				memcpy(r->state[j] + sh[k].state[j].offset, sh[k].state[j].data,
				       sh[k].state[j].count * sizeof(float));
		optim_gpu_destroy(g[k]);
		optim_free(&sh[k]);
	}
	t->be->ops->free(t->be, dp);
}

/* ------------------------------------------------------------------------------------- */
/* Comparisons */

/* got against want over the elements with mask set (all with mask NULL): max abs and relative
 * differences, relative to max(|want|, a thousandth of want's RMS) so that elements near zero
 * are judged against the tensor's scale; NaN anywhere fails. */
static void cmp(const char *what, const float *got, const float *want, const char *mask, size_t n,
		double tol)
{
	double ss = 0.0, floor, max_abs = 0.0, max_rel = 0.0;
	size_t m = 0, nan = 0, differ = 0;

	for (size_t i = 0; i < n; i++)
		if (!mask || mask[i]) {
			ss += (double)want[i] * want[i];
			m++;
		}
	floor = 1e-3 * sqrt(ss / (m ? m : 1));
	if (!(floor > 1e-30))
		floor = 1e-30;
	for (size_t i = 0; i < n; i++) {
		if (mask && !mask[i])
			continue;
		if (isnan(got[i]) || isnan(want[i])) {
			nan++;
			continue;
		}
		double d = fabs((double)got[i] - want[i]);
		double den = fabs(want[i]) > floor ? fabs(want[i]) : floor;
		differ += memcmp(&got[i], &want[i], sizeof(float)) != 0;
		if (d > max_abs)
			max_abs = d;
		if (d / den > max_rel)
			max_rel = d / den;
	}
	ok(nan == 0 && max_rel <= tol,
	   "%s: max abs diff %.3g, max rel diff %.3g (tol %.0e, n=%zu)%s%s", what, max_abs, max_rel,
	   tol, m, differ ? "" : ", bitwise equal", nan ? ", NaN found" : "");
}

/* Bitwise equality, for runs that must repeat exactly. */
static void same_bits(const char *what, const float *got, const float *want, size_t n)
{
	size_t differ = 0;

	for (size_t i = 0; i < n; i++)
		differ += memcmp(&got[i], &want[i], sizeof(float)) != 0;
	ok(differ == 0, "%s: bitwise equal (%zu of %zu differ)", what, differ, n);
}

static void cmp_results(struct t *t, const char *what, const struct result *got,
			const struct result *want, int bitwise)
{
	char name[256];

	snprintf(name, sizeof(name), "%s: params", what);
	if (bitwise)
		same_bits(name, got->params, want->params, TOTAL);
	else
		cmp(name, got->params, want->params, t->covered, TOTAL, TOL);
	if (!is_int(got->nstate, want->nstate, "%s: state buffers", what))
		return;
	for (int k = 0; k < got->nstate; k++) {
		/* padding inside the shard: zero on both sides, and must stay so */
		snprintf(name, sizeof(name), "%s: state %d", what, k);
		if (bitwise)
			same_bits(name, got->state[k], want->state[k], want->hi - want->lo);
		else
			cmp(name, got->state[k], want->state[k], NULL, want->hi - want->lo, TOL);
	}
	is_int(got->step, want->step, "%s: step count", what);
}

/* Padding, and everything outside the shard, keep their bits; something inside moved. */
static void check_untouched(struct t *t, const char *what, const struct result *r)
{
	size_t changed = 0, moved = 0;

	for (size_t i = 0; i < TOTAL; i++) {
		if (t->covered[i] && i >= r->lo && i < r->hi)
			moved += r->params[i] != t->p0[i];
		else
			changed += memcmp(&r->params[i], &t->p0[i], sizeof(float)) != 0;
	}
	ok(changed == 0 && moved > 0,
	   "%s: padding and parameters outside [%zu, %zu) untouched (%zu changed), parameters "
	   "moved (%zu)",
	   what, r->lo, r->hi, changed, moved);
}

static void check_config(struct t *t, const struct config *c)
{
	struct result cpu, gpu, again, resumed, proto, cpu_shard, gpu_shard;
	char what[128];

	cpu_run(t, c, 0, TOTAL, &cpu);
	gpu_run(t, c, 0, TOTAL, &gpu);
	snprintf(what, sizeof(what), "%s whole buffer, gpu vs optim.c", c->name);
	cmp_results(t, what, &gpu, &cpu, 0);
	snprintf(what, sizeof(what), "%s whole buffer", c->name);
	check_untouched(t, what, &gpu);

	gpu_run(t, c, 0, TOTAL, &again);
	snprintf(what, sizeof(what), "%s whole buffer, two gpu runs", c->name);
	cmp_results(t, what, &again, &gpu, 1);

	gpu_run_resumed(t, c, &resumed);
	snprintf(what, sizeof(what), "%s, state through the host after %d steps vs %d straight",
		 c->name, HALF, NSTEPS);
	cmp_results(t, what, &resumed, &gpu, 1);

	cpu_run(t, c, SHARD_LO, SHARD_HI, &cpu_shard);
	gpu_run(t, c, SHARD_LO, SHARD_HI, &gpu_shard);
	snprintf(what, sizeof(what), "%s shard [%zu, %zu), gpu vs optim.c", c->name, SHARD_LO,
		 SHARD_HI);
	cmp_results(t, what, &gpu_shard, &cpu_shard, 0);
	snprintf(what, sizeof(what), "%s shard", c->name);
	check_untouched(t, what, &gpu_shard);

	/* Across shards the sums are added in another order: LAMB agrees to rounding only. */
	gpu_run_protocol(t, c, &proto);
	snprintf(what, sizeof(what), "%s 2 shards through prepare/apply vs optim.c whole buffer",
		 c->name);
	cmp_results(t, what, &proto, &cpu, 0);
	snprintf(what, sizeof(what), "%s 2 shards through prepare/apply vs gpu whole buffer",
		 c->name);
	cmp_results(t, what, &proto, &gpu, c->p.kind != OPTIM_LAMB);

	result_free(&cpu);
	result_free(&gpu);
	result_free(&again);
	result_free(&resumed);
	result_free(&cpu_shard);
	result_free(&gpu_shard);
	result_free(&proto);
}

/* optim_gpu_grad_sumsq against optim_grad_sumsq, on the whole buffer and on the shard. */
static void check_grad_sumsq(struct t *t, const struct config *c)
{
	struct dp_error err;

	for (int k = 0; k < 2; k++) {
		size_t lo = k ? SHARD_LO : 0, hi = k ? SHARD_HI : TOTAL;
		struct optim o;
		double got = -1.0, want;
		init(c, &o, lo, hi);
		struct optim_gpu *g = gpu_create(t, c, &o);
		want = optim_grad_sumsq(&o, t->grads[0]);
		if (optim_gpu_grad_sumsq(g, &o, t->dgrads[0], &got, &err) < 0)
			bail_out("%s", err.text);
		ok(fabs(got - want) <= 1e-12 * want,
		   "grad_sumsq of [%zu, %zu): %.17g, optim.c %.17g (rel diff %.2g)", lo, hi, got,
		   want, fabs(got - want) / want);
		optim_gpu_destroy(g);
		optim_free(&o);
	}
}

static void check_errors(struct t *t, const struct config *c)
{
	struct dp_error err = {""};
	struct optim whole, shard;
	struct optim_gpu *g = NULL;
	struct backend *ref = be_ref_create(&err);

	if (!ref)
		bail_out("be_ref_create: %s", err.text);
	init(c, &whole, 0, TOTAL);
	init(c, &shard, SHARD_LO, SHARD_HI);
	ok(optim_gpu_create(&g, ref, &whole, &err) < 0 && g == NULL,
	   "optim_gpu_create on the ref backend fails");
	like(err.text, "not cuda", "and says why: %s", err.text);
	ref->ops->destroy(ref);

	g = gpu_create(t, c, &whole);
	float *dp = up(t, t->p0, TOTAL);
	ok(optim_gpu_step(g, &shard, dp, t->dgrads[0], 0.1, &err) < 0,
	   "optim_gpu_step with another optimizer than the one it was created for fails");
	like(err.text, "other than the one it was created for", "and says why: %s", err.text);
	is_int(shard.step, 0, "and counts no step");
	optim_gpu_destroy(g);
	t->be->ops->free(t->be, dp);
	optim_free(&whole);
	optim_free(&shard);
}

/* ------------------------------------------------------------------------------------- */

static struct config config(const char *name, enum optim_kind kind, double lr)
{
	struct config c = {name, {0}, lr};

	optim_params_default(&c.p, kind);
	return c;
}

int main(void)
{
	struct dp_error err = {""};
	int count = be_cuda_device_count(&err);
	static struct t t; /* covered[] is big for the stack */
	struct config cfg[12];
	int n = 0;
	float poison;
	uint32_t bits = POISON_BITS;

	if (count <= 0)
		plan_skip_all("no CUDA GPU visible: %s", err.text);
	t.be = be_cuda_create(0, NULL, &err);
	if (!t.be) {
		if (strstr(err.text, "this build has no CUDA"))
			plan_skip_all("%s", err.text);
		bail_out("be_cuda_create(0): %s", err.text);
	}
	diag("%d GPU(s) visible; comparing with optim.c on the host", count);

	struct chk_rng rng = {chk_seed()};
	memcpy(&poison, &bits, sizeof(poison));
	t.p0 = chk_alloc(TOTAL);
	for (size_t i = 0; i < TOTAL; i++)
		t.p0[i] = poison;
	for (int s = 0; s < NSTEPS; s++) {
		t.grads[s] = chk_alloc(TOTAL);
		for (size_t i = 0; i < TOTAL; i++)
			t.grads[s][i] = poison;
	}
	for (int k = 0; k < NSEGS; k++) {
		const struct optim_segment *sg = &segs[k];
		memset(t.covered + sg->offset, 1, sg->count);
		if (k == ZERO_SEG)
			memset(t.p0 + sg->offset, 0, sg->count * sizeof(float));
		else
			chk_random(&rng, t.p0 + sg->offset, sg->count, -1.0f, 1.0f);
		for (int s = 0; s < NSTEPS; s++) {
			if (k == FROZEN)
				memset(t.grads[s] + sg->offset, 0, sg->count * sizeof(float));
			else
				chk_random(&rng, t.grads[s] + sg->offset, sg->count, -1.0f, 1.0f);
		}
	}
	for (int s = 0; s < NSTEPS; s++)
		t.dgrads[s] = up(&t, t.grads[s], TOTAL);

	cfg[n++] = config("sgd", OPTIM_SGD, 0.1);
	cfg[n] = config("sgd-wd", OPTIM_SGD, 0.1);
	cfg[n++].p.weight_decay = 1e-2;
	cfg[n] = config("sgd-momentum", OPTIM_SGD, 0.1);
	cfg[n].p.momentum = 0.9;
	cfg[n++].p.weight_decay = 5e-4;
	cfg[n] = config("sgd-nesterov", OPTIM_SGD, 0.1);
	cfg[n].p.momentum = 0.9;
	cfg[n].p.nesterov = 1;
	cfg[n++].p.weight_decay = 5e-4;
	cfg[n] = config("sgd-dampening", OPTIM_SGD, 0.05);
	cfg[n].p.momentum = 0.9;
	cfg[n++].p.dampening = 0.1;
	cfg[n++] = config("adamw", OPTIM_ADAMW, 1e-3);
	cfg[n] = config("adamw-nowd", OPTIM_ADAMW, 1e-3);
	cfg[n++].p.weight_decay = 0;
	cfg[n++] = config("lamb", OPTIM_LAMB, 1e-2);
	cfg[n] = config("lamb-clip", OPTIM_LAMB, 1e-2);
	cfg[n++].p.max_grad_norm = 1.0; /* the gradients' norm is about 180: always clipped */
	cfg[n] = config("lamb-nvlamb", OPTIM_LAMB, 1e-2);
	cfg[n++].p.nvlamb = 1;
	cfg[n] = config("lamb-nvlamb-clip", OPTIM_LAMB, 1e-2);
	cfg[n].p.nvlamb = 1;
	cfg[n++].p.max_grad_norm = 1.0;
	cfg[n] = config("lamb-nowd", OPTIM_LAMB, 1e-2);
	cfg[n++].p.weight_decay = 0;

	for (int i = 0; i < n; i++)
		check_config(&t, &cfg[i]);
	check_grad_sumsq(&t, &cfg[8]);
	check_errors(&t, &cfg[5]);

	for (int s = 0; s < NSTEPS; s++) {
		t.be->ops->free(t.be, t.dgrads[s]);
		free(t.grads[s]);
	}
	free(t.p0);
	t.be->ops->destroy(t.be);
	return done_testing();
}
