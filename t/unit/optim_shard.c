/* optim_shard.c (test) — ZeRO-1 shards of trainer/optim/optim.c stitched together equal the whole
 * step (bitwise for SGD/AdamW, 1e-6 for LAMB whose norms are summed in another order), and a
 * restored state continues bit for bit. Self-contained: random data, no golden files. */
#include "trainer/optim/optim.h"
#include "t/lib/tap.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NSTEPS	 5
#define MAXSHARD 8

/* Out of offset order with gaps, sizes around vector widths and one empty segment. */
static const struct optim_segment segs[] = {
    {"layer3.weight", 2900, 1000, 1}, {"layer3.bias", 2880, 17, 0}, {"layer2.weight", 2100, 777, 1},
    {"layer2.bias", 2096, 1, 0},      {"bn.weight", 2000, 64, 0},   {"bn.bias", 1936, 64, 0},
    {"layer1.weight", 5, 1921, 1},    {"empty", 1936, 0, 1},	    {"layer1.bias", 0, 5, 0},
};
#define NSEGS ((int)(sizeof(segs) / sizeof(*segs)))
#define TOTAL ((size_t)3904)
#define GAP   12345.0f

struct config {
	const char *name;
	struct optim_params p;
	double lr;
};

static uint64_t rng = 88172645463325252ull;

static float uniform(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 40) / (double)(1 << 24) * 2.0 - 1.0);
}

static void fill(float *params, float *grads[NSTEPS])
{
	for (size_t i = 0; i < TOTAL; i++)
		params[i] = GAP;
	for (int s = 0; s < NSTEPS; s++)
		for (size_t i = 0; i < TOTAL; i++)
			grads[s][i] = GAP;
	for (int k = 0; k < NSEGS; k++) {
		for (size_t i = segs[k].offset; i < segs[k].offset + segs[k].count; i++) {
			params[i] = uniform();
			for (int s = 0; s < NSTEPS; s++)
				grads[s][i] = uniform() * 2;
		}
	}
}

static double lr_of(const struct config *c, int s)
{
	return c->lr * (1.0 - 0.1 * s);
}

/* One step of every shard through the protocol of optim.h, the all-reduces done by hand. */
static void sharded_step(struct optim *sh, int n, float *params, const float *grads, double lr)
{
	double gn = 0, partial[MAXSHARD][2 * NSEGS], sums[2 * NSEGS] = {0};
	if (optim_needs_grad_norm(&sh[0])) {
		double gsq = 0;
		for (int r = 0; r < n; r++)
			gsq += optim_grad_sumsq(&sh[r], grads);
		gn = sqrt(gsq);
	}
	for (int r = 0; r < n; r++)
		optim_prepare(&sh[r], params, grads, gn, partial[r]);
	for (int r = 0; r < n; r++)
		for (int k = 0; k < optim_nsums(&sh[r]); k++)
			sums[k] += partial[r][k];
	for (int r = 0; r < n; r++)
		optim_apply(&sh[r], params, grads, lr, sums);
}

static double max_rel(const float *a, const float *b, size_t n)
{
	return tap_max_rel_err(a, b, n, 1e-3);
}

static void check_shards(const struct config *c, float *p0, float *grads[NSTEPS],
			 const size_t *bounds, int n, const char *what)
{
	struct dp_error err;
	struct optim full, sh[MAXSHARD];
	float *pf = malloc(TOTAL * sizeof(float)), *ps = malloc(TOTAL * sizeof(float));
	float *stitched = calloc(TOTAL, sizeof(float));
	int exact = c->p.kind != OPTIM_LAMB, inited = 0;

	memcpy(pf, p0, TOTAL * sizeof(float));
	memcpy(ps, p0, TOTAL * sizeof(float));
	if (optim_init(&full, &c->p, segs, NSEGS, TOTAL, &err) < 0)
		bail_out("%s", err.text);
	for (; inited < n; inited++)
		if (optim_init_shard(&sh[inited], &c->p, segs, NSEGS, TOTAL, bounds[inited],
				     bounds[inited + 1], &err) < 0)
			bail_out("%s", err.text);
	for (int s = 0; s < NSTEPS; s++) {
		optim_step(&full, pf, grads[s], lr_of(c, s));
		sharded_step(sh, n, ps, grads[s], lr_of(c, s));
	}
	if (exact)
		ok(!memcmp(pf, ps, TOTAL * sizeof(float)), "%s, %s: params bitwise equal", c->name,
		   what);
	else
		ok(max_rel(ps, pf, TOTAL) <= 1e-6, "%s, %s: params within 1e-6 (max rel err %.3g)",
		   c->name, what, max_rel(ps, pf, TOTAL));

	int nst;
	struct optim_state_buf *fs = optim_state(&full, &nst);
	for (int k = 0; k < nst; k++) {
		for (int r = 0; r < n; r++) {
			int m;
			struct optim_state_buf *b = optim_state(&sh[r], &m);
			if (b[k].count)
				memcpy(stitched + b[k].offset, b[k].data,
				       b[k].count * sizeof(float));
		}
		if (exact)
			ok(!memcmp(stitched, fs[k].data, TOTAL * sizeof(float)),
			   "%s, %s: %s bitwise equal", c->name, what, fs[k].name);
		else
			ok(max_rel(stitched, fs[k].data, TOTAL) <= 1e-6,
			   "%s, %s: %s within 1e-6 (max rel err %.3g)", c->name, what, fs[k].name,
			   max_rel(stitched, fs[k].data, TOTAL));
	}
	optim_free(&full);
	for (int r = 0; r < inited; r++)
		optim_free(&sh[r]);
	free(pf);
	free(ps);
	free(stitched);
}

/* LAMB shards on segment boundaries without clipping need no other rank's sums: optim_step
 * alone is exact. With clipping it is not (the gradient norm is global): the protocol is. */
static void check_aligned_lamb(const struct config *c, float *p0, float *grads[NSTEPS])
{
	static const size_t bounds[] = {0, 1936, 2880, TOTAL};
	struct dp_error err;
	struct optim full, sh[3];
	float *pf = malloc(TOTAL * sizeof(float)), *ps = malloc(TOTAL * sizeof(float));

	memcpy(pf, p0, TOTAL * sizeof(float));
	memcpy(ps, p0, TOTAL * sizeof(float));
	if (optim_init(&full, &c->p, segs, NSEGS, TOTAL, &err) < 0)
		bail_out("%s", err.text);
	for (int r = 0; r < 3; r++)
		if (optim_init_shard(&sh[r], &c->p, segs, NSEGS, TOTAL, bounds[r], bounds[r + 1],
				     &err) < 0)
			bail_out("%s", err.text);
	for (int s = 0; s < NSTEPS; s++) {
		optim_step(&full, pf, grads[s], lr_of(c, s));
		for (int r = 0; r < 3; r++)
			optim_step(&sh[r], ps, grads[s], lr_of(c, s));
	}
	if (c->p.max_grad_norm > 0)
		ok(memcmp(pf, ps, TOTAL * sizeof(float)) != 0,
		   "%s, shards on segment boundaries with optim_step: differ (local grad norms)",
		   c->name);
	else
		ok(!memcmp(pf, ps, TOTAL * sizeof(float)),
		   "%s, shards on segment boundaries with optim_step: params bitwise equal",
		   c->name);
	optim_free(&full);
	for (int r = 0; r < 3; r++)
		optim_free(&sh[r]);
	free(pf);
	free(ps);
}

/* Train 2 steps, save, train 3 more; restore into a new optimizer, train the same 3: equal. */
static void check_resume(const struct config *c, float *p0, float *grads[NSTEPS])
{
	struct dp_error err;
	struct optim a, b;
	float *pa = malloc(TOTAL * sizeof(float)), *pb = malloc(TOTAL * sizeof(float));
	float *saved[OPTIM_MAX_STATE] = {0};
	long saved_step;
	int na, nb, same = 1;

	memcpy(pa, p0, TOTAL * sizeof(float));
	if (optim_init(&a, &c->p, segs, NSEGS, TOTAL, &err) < 0 ||
	    optim_init(&b, &c->p, segs, NSEGS, TOTAL, &err) < 0)
		bail_out("%s", err.text);
	for (int s = 0; s < 2; s++)
		optim_step(&a, pa, grads[s], lr_of(c, s));

	/* the checkpoint: params, step count and state buffers */
	struct optim_state_buf *sa = optim_state(&a, &na);
	memcpy(pb, pa, TOTAL * sizeof(float));
	saved_step = a.step;
	for (int k = 0; k < na; k++) {
		saved[k] = malloc(sa[k].count * sizeof(float));
		memcpy(saved[k], sa[k].data, sa[k].count * sizeof(float));
	}
	for (int s = 2; s < NSTEPS; s++)
		optim_step(&a, pa, grads[s], lr_of(c, s));

	struct optim_state_buf *sb = optim_state(&b, &nb);
	is_int(nb, na, "%s resume: same state buffers", c->name);
	b.step = saved_step;
	for (int k = 0; k < nb && k < na; k++)
		memcpy(sb[k].data, saved[k], sb[k].count * sizeof(float));
	for (int s = 2; s < NSTEPS; s++)
		optim_step(&b, pb, grads[s], lr_of(c, s));

	ok(!memcmp(pa, pb, TOTAL * sizeof(float)), "%s resume: params bitwise equal", c->name);
	for (int k = 0; k < na && k < nb; k++)
		same &= !memcmp(sa[k].data, sb[k].data, sa[k].count * sizeof(float));
	ok(same, "%s resume: state bitwise equal", c->name);
	is_int(b.step, a.step, "%s resume: step count", c->name);
	optim_free(&a);
	optim_free(&b);
	for (int k = 0; k < na; k++)
		free(saved[k]);
	free(pa);
	free(pb);
}

/* Padding between segments is neither read nor written. */
static void check_gaps(const struct config *c, float *p0, float *grads[NSTEPS])
{
	struct dp_error err;
	struct optim o;
	float *p = malloc(TOTAL * sizeof(float));
	char *covered = calloc(TOTAL, 1);
	int bad = 0, moved = 0;

	memcpy(p, p0, TOTAL * sizeof(float));
	for (int k = 0; k < NSEGS; k++)
		memset(covered + segs[k].offset, 1, segs[k].count);
	if (optim_init(&o, &c->p, segs, NSEGS, TOTAL, &err) < 0)
		bail_out("%s", err.text);
	for (int s = 0; s < NSTEPS; s++)
		optim_step(&o, p, grads[s], lr_of(c, s));
	for (size_t i = 0; i < TOTAL; i++) {
		bad += !covered[i] && p[i] != GAP;
		moved += covered[i] && p[i] != p0[i];
	}
	ok(bad == 0 && moved > 0, "%s: gaps untouched (%d changed), parameters moved (%d)", c->name,
	   bad, moved);
	optim_free(&o);
	free(p);
	free(covered);
}

int main(void)
{
	static const size_t two[] = {0, 1000, TOTAL};
	static const size_t three[] = {0, 7, 2897, TOTAL};
	/* an empty shard, shards inside one segment, one on a segment boundary */
	static const size_t seven[] = {0, 3, 3, 500, 1936, 2100, 2101, TOTAL};
	struct config cfg[7];
	float *p0 = malloc(TOTAL * sizeof(float)), *grads[NSTEPS];

	for (int s = 0; s < NSTEPS; s++)
		grads[s] = malloc(TOTAL * sizeof(float));
	fill(p0, grads);

	cfg[0] = (struct config){"sgd", {0}, 0.1};
	optim_params_default(&cfg[0].p, OPTIM_SGD);
	cfg[0].p.weight_decay = 1e-3;
	cfg[1] = (struct config){"sgd-nesterov", {0}, 0.1};
	optim_params_default(&cfg[1].p, OPTIM_SGD);
	cfg[1].p.momentum = 0.9;
	cfg[1].p.nesterov = 1;
	cfg[1].p.weight_decay = 5e-4;
	cfg[2] = (struct config){"sgd-dampening", {0}, 0.05};
	optim_params_default(&cfg[2].p, OPTIM_SGD);
	cfg[2].p.momentum = 0.9;
	cfg[2].p.dampening = 0.1;
	cfg[3] = (struct config){"adamw", {0}, 1e-3};
	optim_params_default(&cfg[3].p, OPTIM_ADAMW);
	cfg[4] = (struct config){"adamw-nowd", {0}, 1e-3};
	optim_params_default(&cfg[4].p, OPTIM_ADAMW);
	cfg[4].p.weight_decay = 0;
	cfg[5] = (struct config){"lamb", {0}, 1e-2};
	optim_params_default(&cfg[5].p, OPTIM_LAMB);
	cfg[6] = (struct config){"lamb-nvlamb-clip", {0}, 1e-2};
	optim_params_default(&cfg[6].p, OPTIM_LAMB);
	cfg[6].p.nvlamb = 1;
	cfg[6].p.max_grad_norm = 1.0;

	for (int i = 0; i < 7; i++) {
		check_shards(&cfg[i], p0, grads, two, 2, "2 shards");
		check_shards(&cfg[i], p0, grads, three, 3, "3 shards");
		check_shards(&cfg[i], p0, grads, seven, 7, "7 shards");
		check_resume(&cfg[i], p0, grads);
		check_gaps(&cfg[i], p0, grads);
	}
	check_aligned_lamb(&cfg[5], p0, grads);
	check_aligned_lamb(&cfg[6], p0, grads);

	free(p0);
	for (int s = 0; s < NSTEPS; s++)
		free(grads[s]);
	return done_testing();
}
