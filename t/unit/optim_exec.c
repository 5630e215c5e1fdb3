/* optim_exec.c (test) — trainer/optim/optim_exec.c: through the host's table, every call equals
 * optim.h's own to the bit (SGD plain, with weight decay, momentum and dampening, Nesterov;
 * AdamW; LAMB with clipping and nvlamb): the step, the protocol across ranks on one buffer and
 * on three ZeRO-1 shards stitched together (equal to the whole step for SGD and AdamW), padding
 * never touched, the state's trip through the host (a checkpoint restored into a fresh
 * optimizer continues bit for bit); and the error paths: a GPU exec on a backend that is not
 * CUDA fails naming the call, optim_exec_free clears any exec. Where a CUDA GPU is visible the
 * GPU's table is checked against optim_gpu.h's own calls the same way (skipped otherwise).
 * Self-contained: random data, no files. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/backend/backend.h"
#include "trainer/optim/optim.h"
#include "trainer/optim/optim_exec.h"
#include "trainer/optim/optim_gpu.h"
#include "t/lib/tap.h"

#define NSTEPS 5
#define NSHARD 3

/* Out of offset order, with gaps (padding the optimizer must not touch) and an empty one. */
static const struct optim_segment segs[] = {
    {"fc.weight", 1300, 700, 1}, {"fc.bias", 2000, 3, 0},    {"conv.weight", 7, 1200, 1},
    {"conv.bias", 0, 5, 0},	 {"bn.weight", 1210, 40, 0}, {"bn.bias", 1250, 40, 0},
    {"empty", 1290, 0, 1},
};
#define NSEGS ((int)(sizeof(segs) / sizeof(*segs)))
#define TOTAL ((size_t)2011)
#define GAP   4242.0f

struct config {
	const char *name;
	struct optim_params p;
	double lr;
};

static uint64_t rng = 0x853c49e6748fea9bull;

static float uniform(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 40) / (double)(1 << 24) * 2.0 - 1.0);
}

static float p0[TOTAL], grads[NSTEPS][TOTAL];

static void fill(void)
{
	for (size_t i = 0; i < TOTAL; i++) {
		p0[i] = GAP;
		for (int s = 0; s < NSTEPS; s++)
			grads[s][i] = GAP;
	}
	for (int k = 0; k < NSEGS; k++)
		for (size_t i = segs[k].offset; i < segs[k].offset + segs[k].count; i++) {
			p0[i] = uniform();
			for (int s = 0; s < NSTEPS; s++)
				grads[s][i] = uniform() * 3;
		}
}

static double lr_of(const struct config *c, int s)
{
	return c->lr * (1.0 - 0.15 * s);
}

static void init(struct optim *o, const struct config *c, size_t lo, size_t hi)
{
	struct dp_error err = {0};
	if (optim_init_shard(o, &c->p, segs, NSEGS, TOTAL, lo, hi, &err) < 0)
		bail_out("%s: optim_init_shard [%zu, %zu): %s", c->name, lo, hi, err.text);
}

static int same_state(const struct optim *a, const struct optim *b)
{
	if (a->nstate != b->nstate || a->step != b->step)
		return 0;
	for (int k = 0; k < a->nstate; k++)
		if (a->state[k].count != b->state[k].count ||
		    memcmp(a->state[k].data, b->state[k].data, a->state[k].count * sizeof(float)))
			return 0;
	return 1;
}

/* ---------------------------------------------------------------------------------------
 * The host's table against optim.h. */

static void check_step(const struct config *c)
{
	struct optim a, b;
	struct optim_exec x;
	struct dp_error err = {""};
	float pa[TOTAL], pb[TOTAL];
	int rv = 0;

	init(&a, c, 0, TOTAL);
	init(&b, c, 0, TOTAL);
	optim_exec_host(&x, &b);
	memcpy(pa, p0, sizeof(pa));
	memcpy(pb, p0, sizeof(pb));
	for (int s = 0; s < NSTEPS; s++) {
		optim_step(&a, pa, grads[s], lr_of(c, s));
		rv |= x.ops->step(&x, pb, grads[s], lr_of(c, s), &err);
	}
	ok(rv == 0 && !err.text[0] && !memcmp(pa, pb, sizeof(pa)) && same_state(&a, &b) &&
	       b.step == NSTEPS && pb[TOTAL - 1] == GAP && pb[6] == GAP,
	   "%s: %d steps through the table equal optim_step's to the bit: parameters, state, "
	   "step count, padding untouched",
	   c->name, NSTEPS);
	optim_free(&a);
	optim_free(&b);
}

/* The protocol (optim.h) on nshard shards [bounds[i], bounds[i+1]), the ranks' all-reduces
 * summed here and their all-gather a copy of each shard; through the table or not. */
static void protocol(const struct config *c, int nshard, const size_t *bounds, int through,
		     float *params, struct optim *sh, int *rv, struct dp_error *err)
{
	for (int s = 0; s < NSTEPS; s++) {
		struct optim_exec x[NSHARD];
		float local[NSHARD][TOTAL];
		double gsq = 0, part, sums[NSHARD][2 * NSEGS], total[2 * NSEGS];
		int ns = optim_nsums(&sh[0]);
		for (int i = 0; i < nshard; i++) {
			optim_exec_host(&x[i], &sh[i]);
			memcpy(local[i], params, sizeof(local[i]));
		}
		if (optim_needs_grad_norm(&sh[0]))
			for (int i = 0; i < nshard; i++) {
				if (through)
					*rv |= x[i].ops->grad_sumsq(&x[i], grads[s], &part, err);
				else
					part = optim_grad_sumsq(&sh[i], grads[s]);
				gsq += part;
			}
		memset(total, 0, sizeof(total));
		for (int i = 0; i < nshard; i++) {
			memset(sums[i], 0, sizeof(sums[i]));
			if (through)
				*rv |= x[i].ops->prepare(&x[i], local[i], grads[s], sqrt(gsq),
							 sums[i], err);
			else
				optim_prepare(&sh[i], local[i], grads[s], sqrt(gsq), sums[i]);
			for (int k = 0; k < ns; k++)
				total[k] += sums[i][k];
		}
		for (int i = 0; i < nshard; i++) {
			if (through)
				*rv |= x[i].ops->apply(&x[i], local[i], grads[s], lr_of(c, s),
						       total, err);
			else
				optim_apply(&sh[i], local[i], grads[s], lr_of(c, s), total);
			memcpy(params + bounds[i], local[i] + bounds[i],
			       (bounds[i + 1] - bounds[i]) * sizeof(float));
		}
	}
}

static void check_protocol(const struct config *c)
{
	/* one shard (the whole buffer), then three uneven ones cutting segments */
	static const size_t whole[] = {0, TOTAL}, three[] = {0, 600, 1299, TOTAL};
	struct dp_error err = {""};

	for (int layout = 0; layout < 2; layout++) {
		int n = layout ? NSHARD : 1, rv = 0;
		const size_t *b = layout ? three : whole;
		struct optim sa[NSHARD], sb[NSHARD];
		float pa[TOTAL], pb[TOTAL];
		for (int i = 0; i < n; i++) {
			init(&sa[i], c, b[i], b[i + 1]);
			init(&sb[i], c, b[i], b[i + 1]);
		}
		memcpy(pa, p0, sizeof(pa));
		memcpy(pb, p0, sizeof(pb));
		protocol(c, n, b, 0, pa, sa, &rv, &err);
		protocol(c, n, b, 1, pb, sb, &rv, &err);
		int same = !memcmp(pa, pb, sizeof(pa));
		for (int i = 0; i < n; i++)
			same &= same_state(&sa[i], &sb[i]);
		ok(rv == 0 && !err.text[0] && same,
		   "%s: the protocol through the table (grad_sumsq, prepare, apply) on %d "
		   "shard%s equals optim.h's to the bit",
		   c->name, n, n == 1 ? "" : "s");
		if (layout &&
		    c->p.kind != OPTIM_LAMB) { /* element-wise: the shards are the whole */
			struct optim w;
			float pw[TOTAL];
			init(&w, c, 0, TOTAL);
			memcpy(pw, p0, sizeof(pw));
			for (int s = 0; s < NSTEPS; s++)
				optim_step(&w, pw, grads[s], lr_of(c, s));
			ok(!memcmp(pw, pb, sizeof(pw)),
			   "%s: 3 ZeRO-1 shards through the table, stitched, equal the whole "
			   "step to the bit",
			   c->name);
			optim_free(&w);
		}
		for (int i = 0; i < n; i++) {
			optim_free(&sa[i]);
			optim_free(&sb[i]);
		}
	}
}

/* A checkpoint's path: state_to_host, the state copied out and into a fresh optimizer,
 * state_from_host; both go on alike. */
static void check_state(const struct config *c)
{
	struct optim a, b;
	struct optim_exec xa, xb;
	struct dp_error err = {""};
	float pa[TOTAL], pb[TOTAL];
	int rv = 0, n;

	init(&a, c, 0, TOTAL);
	optim_exec_host(&xa, &a);
	memcpy(pa, p0, sizeof(pa));
	for (int s = 0; s < 2; s++)
		rv |= xa.ops->step(&xa, pa, grads[s], lr_of(c, s), &err);
	struct optim_state_buf *sa = optim_state(&a, &n);
	float *before[OPTIM_MAX_STATE] = {0};
	for (int k = 0; k < n; k++) {
		before[k] = malloc(sa[k].count * sizeof(float));
		memcpy(before[k], sa[k].data, sa[k].count * sizeof(float));
	}
	rv |= xa.ops->state_to_host(&xa, &err);
	int kept = 1;
	for (int k = 0; k < n; k++) {
		kept &= !memcmp(before[k], sa[k].data, sa[k].count * sizeof(float));
		free(before[k]);
	}

	init(&b, c, 0, TOTAL);
	optim_exec_host(&xb, &b);
	struct optim_state_buf *sb = optim_state(&b, &n);
	for (int k = 0; k < n; k++)
		memcpy(sb[k].data, sa[k].data, sa[k].count * sizeof(float));
	b.step = a.step;
	rv |= xb.ops->state_from_host(&xb, &err);
	memcpy(pb, pa, sizeof(pb));
	for (int s = 2; s < NSTEPS; s++) {
		rv |= xa.ops->step(&xa, pa, grads[s], lr_of(c, s), &err);
		rv |= xb.ops->step(&xb, pb, grads[s], lr_of(c, s), &err);
	}
	ok(rv == 0 && !err.text[0] && kept && !memcmp(pa, pb, sizeof(pa)) && same_state(&a, &b),
	   "%s: state_to_host keeps the state, state_from_host takes a restored one: %d more "
	   "steps equal to the bit",
	   c->name, NSTEPS - 2);
	optim_free(&a);
	optim_free(&b);
}

/* ---------------------------------------------------------------------------------------
 * Errors, and the exec's life. */

static void check_errors(void)
{
	struct dp_error err = {""};
	struct config c = {"adamw", {0}, 1e-3};
	struct optim o;
	struct optim_exec x, zero;
	float p[TOTAL];

	optim_params_default(&c.p, OPTIM_ADAMW);
	init(&o, &c, 0, TOTAL);
	optim_exec_host(&x, &o);
	ok(x.ops && !strcmp(x.ops->name, "host") && x.o == &o && !x.gpu,
	   "optim_exec_host: the \"host\" table over the caller's optimizer");
	ok(x.ops->step && x.ops->grad_sumsq && x.ops->prepare && x.ops->apply &&
	       x.ops->state_to_host && x.ops->state_from_host,
	   "every call is there");
	optim_exec_free(&x);
	ok(!x.ops && !x.o && !x.gpu, "optim_exec_free clears a host exec");
	memcpy(p, p0, sizeof(p));
	optim_step(&o, p, grads[0], 1e-3);
	ok(o.step == 1, "and leaves the optimizer to its owner");

	struct backend *ref = be_ref_create(&err);
	if (!ref)
		bail_out("be_ref_create: %s", err.text);
	int rv = optim_exec_gpu(&x, &o, ref, &err);
	ok(rv == -1, "optim_exec_gpu on the ref backend: -1");
	like(err.text, "optim_gpu_create", "the error names the call: %s", err.text);
	ok(x.ops && !strcmp(x.ops->name, "gpu") && x.o == &o && !x.gpu,
	   "the exec is the GPU's table with no device state");
	optim_exec_free(&x);
	ok(!x.ops && !x.o && !x.gpu, "optim_exec_free clears it");
	memset(&zero, 0, sizeof(zero));
	optim_exec_free(&zero);
	optim_exec_free(&zero);
	pass("optim_exec_free of a zeroed exec, twice, does nothing");
	ref->ops->destroy(ref);
	optim_free(&o);
}

/* ---------------------------------------------------------------------------------------
 * The GPU's table against optim_gpu.h's calls, where there is a GPU. */

#define GPU_TESTS 2

static float *up(struct backend *be, const float *h)
{
	float *d = be->ops->alloc(be, TOTAL * sizeof(float));
	if (!d || be->ops->from_host(be, d, h, TOTAL * sizeof(float)) < 0)
		bail_out("cuda buffer: %s", be->err.text);
	return d;
}

static void check_gpu(const struct config *cfgs, int ncfg)
{
	struct dp_error err = {""};
	int count = be_cuda_device_count(&err);
	struct backend *be = count > 0 ? be_cuda_create(0, NULL, &err) : NULL;
	if (!be) {
		skip(GPU_TESTS * ncfg, "no CUDA GPU visible: %s", err.text);
		return;
	}
	float *dg[NSTEPS];
	for (int s = 0; s < NSTEPS; s++)
		dg[s] = up(be, grads[s]);
	for (int i = 0; i < ncfg; i++) {
		const struct config *c = &cfgs[i];
		struct optim a, b;
		struct optim_gpu *g = NULL;
		struct optim_exec x;
		float *da = up(be, p0), *db = up(be, p0), ha[TOTAL], hb[TOTAL];
		int rv = 0;
		init(&a, c, 0, TOTAL);
		init(&b, c, 0, TOTAL);
		if (optim_gpu_create(&g, be, &a, &err) < 0 || optim_exec_gpu(&x, &b, be, &err) < 0)
			bail_out("%s: %s", c->name, err.text);
		for (int s = 0; s < NSTEPS; s++) {
			rv |= optim_gpu_step(g, &a, da, dg[s], lr_of(c, s), &err);
			rv |= x.ops->step(&x, db, dg[s], lr_of(c, s), &err);
		}
		rv |= optim_gpu_state_to_host(g, &a, &err);
		rv |= x.ops->state_to_host(&x, &err);
		if (be->ops->to_host(be, ha, da, sizeof(ha)) < 0 ||
		    be->ops->to_host(be, hb, db, sizeof(hb)) < 0)
			bail_out("cuda to_host: %s", be->err.text);
		ok(rv == 0 && !strcmp(x.ops->name, "gpu") && !memcmp(ha, hb, sizeof(ha)) &&
		       same_state(&a, &b),
		   "%s on the GPU: %d steps and state_to_host through the table equal "
		   "optim_gpu.h's to the bit: %s",
		   c->name, NSTEPS, err.text);

		/* the state back from the host into fresh device state continues alike */
		struct optim_exec y;
		struct optim r;
		int n;
		init(&r, c, 0, TOTAL);
		struct optim_state_buf *sr = optim_state(&r, &n);
		for (int k = 0; k < n; k++)
			memcpy(sr[k].data, b.state[k].data, b.state[k].count * sizeof(float));
		r.step = b.step;
		float *dr = up(be, hb), hr[TOTAL];
		if (optim_exec_gpu(&y, &r, be, &err) < 0)
			bail_out("%s: %s", c->name, err.text);
		rv = y.ops->state_from_host(&y, &err);
		rv |= y.ops->step(&y, dr, dg[0], 1e-3, &err);
		rv |= x.ops->step(&x, db, dg[0], 1e-3, &err);
		if (be->ops->to_host(be, hr, dr, sizeof(hr)) < 0 ||
		    be->ops->to_host(be, hb, db, sizeof(hb)) < 0)
			bail_out("cuda to_host: %s", be->err.text);
		ok(rv == 0 && !memcmp(hr, hb, sizeof(hr)),
		   "%s on the GPU: state_from_host through the table, one more step equal: %s",
		   c->name, err.text);
		optim_exec_free(&y);
		optim_exec_free(&x);
		optim_gpu_destroy(g);
		be->ops->free(be, da);
		be->ops->free(be, db);
		be->ops->free(be, dr);
		optim_free(&a);
		optim_free(&b);
		optim_free(&r);
	}
	for (int s = 0; s < NSTEPS; s++)
		be->ops->free(be, dg[s]);
	be->ops->destroy(be);
}

static struct config config(const char *name, enum optim_kind kind, double lr)
{
	struct config c = {.name = name, .lr = lr};
	optim_params_default(&c.p, kind);
	return c;
}

int main(void)
{
	struct config cfg[8];
	int n = 0;

	fill();
	cfg[n++] = config("sgd", OPTIM_SGD, 0.1);
	cfg[n] = config("sgd-momentum-wd-dampening", OPTIM_SGD, 0.05);
	cfg[n].p.momentum = 0.9;
	cfg[n].p.dampening = 0.1;
	cfg[n++].p.weight_decay = 5e-4;
	cfg[n] = config("sgd-nesterov", OPTIM_SGD, 0.1);
	cfg[n].p.momentum = 0.9;
	cfg[n].p.nesterov = 1;
	cfg[n++].p.weight_decay = 1e-4;
	cfg[n] = config("adamw", OPTIM_ADAMW, 1e-3);
	cfg[n++].p.weight_decay = 0.01;
	cfg[n] = config("lamb-clip", OPTIM_LAMB, 1e-2);
	cfg[n++].p.max_grad_norm = 1.0;
	cfg[n] = config("lamb-nvlamb", OPTIM_LAMB, 1e-2);
	cfg[n++].p.nvlamb = 1;

	for (int i = 0; i < n; i++) {
		check_step(&cfg[i]);
		check_protocol(&cfg[i]);
		check_state(&cfg[i]);
	}
	check_errors();
	check_gpu(cfg, n);
	return done_testing();
}
