/* optim.c — SGD, AdamW and LAMB updates over segments of the flat parameter buffer, and their
 * state. Owns nothing outside struct optim; the formulas are stated in optim.h.
 * Must not read the job config or talk to other ranks: the caller all-reduces between phases. */
#include "trainer/optim/optim.h"
#include "common/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* The update loops are written once with flag arguments and instantiated with constant flags
 * (always_inline), so every instance is a branch-free loop over restrict float arrays that the
 * compiler can vectorize (gcc: -ftree-vectorize or -O3, and -fno-math-errno for sqrtf).
 * Vector and scalar code give the same bits: nothing is reassociated. Fusing a*b+c into one
 * FMA would not: with -march flags that enable FMA, build with -ffp-contract=off, or parity
 * with PyTorch drops from bitwise to ~1e-5 (t/unit/optim.c fails). */
#define OPTIM_KERNEL static inline __attribute__((always_inline))

/* The element-wise updates of a large segment run on the OpenMP threads (train.threads), in
 * pieces of 16 floats' multiples: an update is memory-bound, and one thread leaves the step's
 * other threads waiting (ResNet-50's 94 MB of weights, momentum and gradients). Each element is
 * computed as alone, so the bits do not depend on the split. Reductions (LAMB's norms, the
 * gradient norm) stay in one thread, in their order. */
#define OPTIM_PAR_MIN 65536

static int optim_threads(size_t n)
{
#ifdef _OPENMP
	if (n >= OPTIM_PAR_MIN && !omp_in_parallel())
		return omp_get_max_threads();
#endif
	(void)n;
	return 1;
}

/* The start of piece k of t over n elements. */
static size_t optim_cut(size_t n, int k, int t)
{
	return k >= t ? n : n * (size_t)k / (size_t)t / 16 * 16;
}

void optim_params_default(struct optim_params *p, enum optim_kind kind)
{
	memset(p, 0, sizeof(*p));
	p->kind = kind;
	p->beta1 = 0.9;
	p->beta2 = 0.999;
	switch (kind) {
	case OPTIM_SGD:
		break;
	case OPTIM_ADAMW:
		p->eps = 1e-8;
		p->weight_decay = 1e-2;
		break;
	case OPTIM_LAMB:
		p->eps = 1e-6;
		p->weight_decay = 1e-2;
		break;
	}
}

const char *optim_kind_name(enum optim_kind kind)
{
	switch (kind) {
	case OPTIM_SGD:
		return "sgd";
	case OPTIM_ADAMW:
		return "adamw";
	case OPTIM_LAMB:
		return "lamb";
	}
	return "unknown";
}

/* ---- validation ------------------------------------------------------------------------- */

static int check_params(const struct optim_params *p, struct dp_error *err)
{
	const char *kn = optim_kind_name(p->kind);
	if (p->kind != OPTIM_SGD && p->kind != OPTIM_ADAMW && p->kind != OPTIM_LAMB) {
		errprintf(err, "dptrain: optimizer: unknown kind %d (sgd, adamw or lamb)",
			  (int)p->kind);
		return -1;
	}
	if (!isfinite(p->weight_decay) || p->weight_decay < 0) {
		errprintf(
		    err,
		    "dptrain: optimizer %s: weight_decay %g is invalid; use a finite value >= 0",
		    kn, p->weight_decay);
		return -1;
	}
	if (p->kind == OPTIM_SGD) {
		if (!isfinite(p->momentum) || p->momentum < 0) {
			errprintf(
			    err,
			    "dptrain: optimizer sgd: momentum %g is invalid; use a value >= 0 "
			    "(0.9 is usual)",
			    p->momentum);
			return -1;
		}
		if (!(p->dampening >= 0 && p->dampening <= 1)) {
			errprintf(err,
				  "dptrain: optimizer sgd: dampening %g is invalid; use a value in "
				  "[0, 1]",
				  p->dampening);
			return -1;
		}
		if (p->nesterov && (p->momentum <= 0 || p->dampening != 0)) {
			errprintf(
			    err,
			    "dptrain: optimizer sgd: Nesterov momentum needs momentum > 0 and "
			    "dampening 0 (got momentum %g, dampening %g)",
			    p->momentum, p->dampening);
			return -1;
		}
		return 0;
	}
	if (!(p->beta1 >= 0 && p->beta1 < 1) || !(p->beta2 >= 0 && p->beta2 < 1)) {
		errprintf(
		    err,
		    "dptrain: optimizer %s: betas (%g, %g) are invalid; each must be in [0, 1) "
		    "(0.9 and 0.999 are usual)",
		    kn, p->beta1, p->beta2);
		return -1;
	}
	if (!isfinite(p->eps) || p->eps < 0) {
		errprintf(err, "dptrain: optimizer %s: eps %g is invalid; use a value >= 0", kn,
			  p->eps);
		return -1;
	}
	if (p->kind == OPTIM_LAMB && (!isfinite(p->max_grad_norm) || p->max_grad_norm < 0)) {
		errprintf(
		    err,
		    "dptrain: optimizer lamb: max_grad_norm %g is invalid; use 0 (no clipping) "
		    "or a positive norm",
		    p->max_grad_norm);
		return -1;
	}
	return 0;
}

static int cmp_seg_offset(const void *a, const void *b)
{
	size_t x = ((const struct optim_segment *)a)->offset;
	size_t y = ((const struct optim_segment *)b)->offset;
	return x < y ? -1 : x > y;
}

static const char *seg_name(const struct optim_segment *s)
{
	return s->name ? s->name : "(unnamed)";
}

static int check_segments(const struct optim_segment *segs, int nsegs, size_t total,
			  struct dp_error *err)
{
	int rv = -1;
	struct optim_segment *sorted = NULL;

	if (nsegs <= 0 || segs == NULL) {
		errprintf(err, "dptrain: optimizer: the model has no parameters to optimize");
		goto out;
	}
	for (int i = 0; i < nsegs; i++) {
		if (segs[i].offset > total || segs[i].count > total - segs[i].offset) {
			errprintf(
			    err,
			    "dptrain: optimizer: parameter %d %s [%zu, +%zu) runs past the end "
			    "of the parameter buffer (%zu floats); this is a bug in the model "
			    "layout, please report it",
			    i, seg_name(&segs[i]), segs[i].offset, segs[i].count, total);
			goto out;
		}
	}
	sorted = malloc(sizeof(*sorted) * (size_t)nsegs);
	if (!sorted) {
		errprintf(err, "dptrain: optimizer: out of memory for %d segments", nsegs);
		goto out;
	}
	memcpy(sorted, segs, sizeof(*sorted) * (size_t)nsegs);
	qsort(sorted, (size_t)nsegs, sizeof(*sorted), cmp_seg_offset);
	for (int k = 0; k + 1 < nsegs; k++) {
		const struct optim_segment *a = &sorted[k], *b = &sorted[k + 1];
		if (a->count > 0 && b->count > 0 && a->offset + a->count > b->offset) {
			errprintf(
			    err,
			    "dptrain: optimizer: parameters %s [%zu, +%zu) and %s [%zu, +%zu) "
			    "overlap in the parameter buffer; this is a bug in the model layout, "
			    "please report it",
			    seg_name(a), a->offset, a->count, seg_name(b), b->offset, b->count);
			goto out;
		}
	}
	rv = 0;
out:
	free(sorted);
	return rv;
}

/* ---- init / free / state ------------------------------------------------------------------ */

int optim_init_shard(struct optim *o, const struct optim_params *p,
		     const struct optim_segment *segs, int nsegs, size_t total, size_t lo,
		     size_t hi, struct dp_error *err)
{
	static const char *const names[][OPTIM_MAX_STATE] = {
	    [OPTIM_SGD] = {"momentum_buffer", NULL},
	    [OPTIM_ADAMW] = {"exp_avg", "exp_avg_sq"},
	    [OPTIM_LAMB] = {"exp_avg", "exp_avg_sq"},
	};
	int rv = -1;

	memset(o, 0, sizeof(*o));
	if (check_params(p, err) < 0 || check_segments(segs, nsegs, total, err) < 0)
		goto out;
	if (lo > hi || hi > total) {
		errprintf(err,
			  "dptrain: optimizer: shard [%zu, %zu) is not inside the parameter buffer "
			  "(%zu floats); this is a bug in the optimizer sharding, please report it",
			  lo, hi, total);
		goto out;
	}
	o->p = *p;
	o->nsegs = nsegs;
	o->total = total;
	o->lo = lo;
	o->hi = hi;
	o->nstate = p->kind == OPTIM_SGD ? (p->momentum != 0 ? 1 : 0) : 2;
	if (!(o->segs = malloc(sizeof(*o->segs) * (size_t)nsegs)))
		goto oom;
	for (int i = 0; i < nsegs; i++) {
		o->segs[i] = segs[i];
		o->segs[i].name = NULL; /* the caller's string need not outlive init */
	}
	if (p->kind == OPTIM_LAMB && !(o->sums = malloc(sizeof(*o->sums) * 2 * (size_t)nsegs)))
		goto oom;
	for (int k = 0; k < o->nstate; k++) {
		struct optim_state_buf *b = &o->state[k];
		b->name = names[p->kind][k];
		b->offset = lo;
		b->count = hi - lo;
		if (b->count > 0 && !(b->data = calloc(b->count, sizeof(float))))
			goto oom;
	}
	rv = 0;
	goto out;
oom:
	errprintf(err,
		  "dptrain: optimizer %s: out of memory for its state (%d buffers of %zu floats); "
		  "use a smaller model, or shard the optimizer across ranks",
		  optim_kind_name(p->kind), o->nstate, hi - lo);
out:
	if (rv < 0)
		optim_free(o);
	return rv;
}

int optim_init(struct optim *o, const struct optim_params *p, const struct optim_segment *segs,
	       int nsegs, size_t total, struct dp_error *err)
{
	return optim_init_shard(o, p, segs, nsegs, total, 0, total, err);
}

void optim_free(struct optim *o)
{
	for (int k = 0; k < OPTIM_MAX_STATE; k++)
		free(o->state[k].data);
	free(o->segs);
	free(o->sums);
	memset(o, 0, sizeof(*o));
}

struct optim_state_buf *optim_state(struct optim *o, int *n)
{
	*n = o->nstate;
	return o->state;
}

/* The part [a, b) of segment s inside this optimizer's shard; 0 if there is none. */
static int seg_piece(const struct optim *o, const struct optim_segment *s, size_t *a, size_t *b)
{
	*a = s->offset > o->lo ? s->offset : o->lo;
	*b = s->offset + s->count < o->hi ? s->offset + s->count : o->hi;
	return *a < *b;
}

/* Sum of squares in double with 8 independent accumulators: a single running sum would wait
 * on the previous add for every element. The order is fixed, so the result is reproducible. */
static double sumsq(const float *restrict x, size_t n)
{
	double acc[8] = {0};
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int k = 0; k < 8; k++)
			acc[k] += (double)x[i + k] * x[i + k];
	for (; i < n; i++)
		acc[i % 8] += (double)x[i] * x[i];
	return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* ---- SGD ---------------------------------------------------------------------------------- */

struct sgd_consts {
	float wd, momentum, damp1, neg_lr; /* damp1 = 1 - dampening */
};

OPTIM_KERNEL void sgd_kernel(float *restrict p, const float *restrict g, float *restrict buf,
			     size_t n, struct sgd_consts c, int use_wd, int use_momentum, int first,
			     int nesterov)
{
	for (size_t i = 0; i < n; i++) {
		float d = use_wd ? g[i] + c.wd * p[i] : g[i];
		if (use_momentum) {
			float b = first ? d : buf[i] * c.momentum + c.damp1 * d;
			buf[i] = b;
			d = nesterov ? d + c.momentum * b : b;
		}
		p[i] = p[i] + c.neg_lr * d;
	}
}

static void sgd_piece(float *p, const float *g, float *buf, size_t n, struct sgd_consts c,
		      int use_wd, int first, int nesterov)
{
	/* Every flag combination the loop can see, each as its own loop. */
	if (!buf) {
		if (use_wd)
			sgd_kernel(p, g, NULL, n, c, 1, 0, 0, 0);
		else
			sgd_kernel(p, g, NULL, n, c, 0, 0, 0, 0);
	} else if (use_wd) {
		if (first)
			sgd_kernel(p, g, buf, n, c, 1, 1, 1, nesterov);
		else if (nesterov)
			sgd_kernel(p, g, buf, n, c, 1, 1, 0, 1);
		else
			sgd_kernel(p, g, buf, n, c, 1, 1, 0, 0);
	} else {
		if (first)
			sgd_kernel(p, g, buf, n, c, 0, 1, 1, nesterov);
		else if (nesterov)
			sgd_kernel(p, g, buf, n, c, 0, 1, 0, 1);
		else
			sgd_kernel(p, g, buf, n, c, 0, 1, 0, 0);
	}
}

static void sgd_apply(struct optim *o, float *params, const float *grads, double lr)
{
	/* PyTorch rounds each Python-float scalar to float32 inside the kernel. */
	struct sgd_consts c = {
	    .wd = (float)o->p.weight_decay,
	    .momentum = (float)o->p.momentum,
	    .damp1 = (float)(1.0 - o->p.dampening),
	    .neg_lr = (float)-lr,
	};
	float *buf = o->nstate > 0 ? o->state[0].data : NULL;
	for (int i = 0; i < o->nsegs; i++) {
		size_t a, b;
		if (!seg_piece(o, &o->segs[i], &a, &b))
			continue;
		int use_wd = o->segs[i].decay && o->p.weight_decay != 0, nt = optim_threads(b - a);
		size_t n = b - a;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
		for (int k = 0; k < nt; k++) {
			size_t lo = optim_cut(n, k, nt), hi = optim_cut(n, k + 1, nt);
			sgd_piece(params + a + lo, grads + a + lo,
				  buf ? buf + (a - o->lo) + lo : NULL, hi - lo, c, use_wd,
				  o->step == 0, o->p.nesterov);
		}
	}
}

/* ---- AdamW -------------------------------------------------------------------------------- */

struct adam_consts {
	float b1, c1, b2, c2; /* c = 1 - b */
	float eps;
};

static struct adam_consts adam_consts(const struct optim_params *p)
{
	struct adam_consts c = {
	    .b1 = (float)p->beta1,
	    .c1 = (float)(1.0 - p->beta1),
	    .b2 = (float)p->beta2,
	    .c2 = (float)(1.0 - p->beta2),
	    .eps = (float)p->eps,
	};
	return c;
}

OPTIM_KERNEL void adamw_kernel(float *restrict p, const float *restrict g, float *restrict m,
			       float *restrict v, size_t n, struct adam_consts c, float decay,
			       float bc2_sqrt, float neg_step_size, int use_wd)
{
	for (size_t i = 0; i < n; i++) {
		float pi = use_wd ? p[i] * decay : p[i];
		float mi = m[i] * c.b1 + c.c1 * g[i];
		float vi = v[i] * c.b2 + c.c2 * g[i] * g[i];
		m[i] = mi;
		v[i] = vi;
		float denom = sqrtf(vi) / bc2_sqrt + c.eps;
		p[i] = pi + neg_step_size * mi / denom;
	}
}

static void adamw_apply(struct optim *o, float *params, const float *grads, double lr)
{
	struct adam_consts c = adam_consts(&o->p);
	double t = (double)(o->step + 1);
	/* As torch: bias corrections and step size in double, rounded once. */
	float bc2_sqrt = (float)sqrt(1.0 - pow(o->p.beta2, t));
	float neg_step_size = (float)-(lr / (1.0 - pow(o->p.beta1, t)));
	float decay = (float)(1.0 - lr * o->p.weight_decay);
	float *m = o->state[0].data, *v = o->state[1].data;
	for (int i = 0; i < o->nsegs; i++) {
		size_t a, b;
		if (!seg_piece(o, &o->segs[i], &a, &b))
			continue;
		size_t n = b - a;
		int wd = o->segs[i].decay && o->p.weight_decay != 0, nt = optim_threads(n);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
		for (int k = 0; k < nt; k++) {
			size_t lo = optim_cut(n, k, nt), hi = optim_cut(n, k + 1, nt);
			size_t e = a + lo, s = e - o->lo;
			if (wd)
				adamw_kernel(params + e, grads + e, m + s, v + s, hi - lo, c, decay,
					     bc2_sqrt, neg_step_size, 1);
			else
				adamw_kernel(params + e, grads + e, m + s, v + s, hi - lo, c, decay,
					     bc2_sqrt, neg_step_size, 0);
		}
	}
}

/* ---- LAMB --------------------------------------------------------------------------------- */

struct lamb_consts {
	struct adam_consts a;
	float bc1, bc2; /* bias corrections 1 - beta^t */
	float wd;
	float clip; /* the gradient divisor: ||G|| / max_grad_norm, or 1 */
};

static struct lamb_consts lamb_consts(const struct optim *o, double grad_norm)
{
	double t = (double)(o->step + 1);
	struct lamb_consts c = {
	    .a = adam_consts(&o->p),
	    .bc1 = (float)(1.0 - pow(o->p.beta1, t)),
	    .bc2 = (float)(1.0 - pow(o->p.beta2, t)),
	    .wd = (float)o->p.weight_decay,
	    .clip = 1.0f,
	};
	float gn = (float)grad_norm, mg = (float)o->p.max_grad_norm;
	if (mg > 0 && gn > mg)
		c.clip = gn / mg;
	return c;
}

OPTIM_KERNEL void lamb_moments_kernel(const float *restrict g, float *restrict m, float *restrict v,
				      size_t n, struct lamb_consts c, int clip)
{
	for (size_t i = 0; i < n; i++) {
		float s = clip ? g[i] / c.clip : g[i];
		m[i] = m[i] * c.a.b1 + c.a.c1 * s;
		v[i] = v[i] * c.a.b2 + c.a.c2 * s * s;
	}
}

/* The update direction u of one element; computed identically by prepare and apply, so the
 * norm the trust ratio uses is the norm of exactly the u that is applied. */
OPTIM_KERNEL float lamb_u(float m, float v, float p, struct lamb_consts c, int use_wd)
{
	float u = (m / c.bc1) / (sqrtf(v / c.bc2) + c.a.eps);
	return use_wd ? u + c.wd * p : u;
}

OPTIM_KERNEL void lamb_u_kernel(float *restrict u, const float *restrict p, const float *restrict m,
				const float *restrict v, size_t n, struct lamb_consts c, int use_wd)
{
	for (size_t i = 0; i < n; i++)
		u[i] = lamb_u(m[i], v[i], p[i], c, use_wd);
}

OPTIM_KERNEL void lamb_update_kernel(float *restrict p, const float *restrict m,
				     const float *restrict v, size_t n, struct lamb_consts c,
				     float ratio, int use_wd)
{
	for (size_t i = 0; i < n; i++)
		p[i] = p[i] - ratio * lamb_u(m[i], v[i], p[i], c, use_wd);
}

static int lamb_use_wd(const struct optim *o, int seg)
{
	return o->segs[seg].decay && o->p.weight_decay != 0;
}

/* Moments, then u a block at a time into a buffer that stays in L1, for the norms: every loop
 * is a plain vectorizable one and m and v are still in cache when u is formed. */
#define LAMB_BLOCK 1024

static void lamb_prepare(struct optim *o, const float *params, const float *grads, double grad_norm,
			 double *sums)
{
	struct lamb_consts c = lamb_consts(o, grad_norm);
	float *m = o->state[0].data, *v = o->state[1].data;
	float u[LAMB_BLOCK];
	for (int i = 0; i < o->nsegs; i++) {
		size_t a, b;
		sums[2 * i] = sums[2 * i + 1] = 0;
		if (!seg_piece(o, &o->segs[i], &a, &b))
			continue;
		int use_wd = lamb_use_wd(o, i);
		for (size_t k = a; k < b; k += LAMB_BLOCK) {
			size_t n = b - k < LAMB_BLOCK ? b - k : LAMB_BLOCK, s = k - o->lo;
			if (c.clip != 1.0f)
				lamb_moments_kernel(grads + k, m + s, v + s, n, c, 1);
			else
				lamb_moments_kernel(grads + k, m + s, v + s, n, c, 0);
			if (use_wd)
				lamb_u_kernel(u, params + k, m + s, v + s, n, c, 1);
			else
				lamb_u_kernel(u, params + k, m + s, v + s, n, c, 0);
			sums[2 * i] += sumsq(params + k, n);
			sums[2 * i + 1] += sumsq(u, n);
		}
	}
}

static void lamb_apply(struct optim *o, float *params, double lr, const double *sums)
{
	/* grad_norm only sets the clip divisor, which the moments already absorbed. */
	struct lamb_consts c = lamb_consts(o, 0);
	float *m = o->state[0].data, *v = o->state[1].data;
	for (int i = 0; i < o->nsegs; i++) {
		size_t a, b;
		if (!seg_piece(o, &o->segs[i], &a, &b))
			continue;
		size_t s = a - o->lo;
		int use_wd = lamb_use_wd(o, i);
		float ratio = (float)lr;
		if (o->p.nvlamb || use_wd) {
			float pn = (float)sqrt(sums[2 * i]), un = (float)sqrt(sums[2 * i + 1]);
			if (pn != 0 && un != 0)
				ratio = (float)lr * (pn / un);
		}
		size_t n = b - a;
		int nt = optim_threads(n);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
		for (int k = 0; k < nt; k++) {
			size_t lo = optim_cut(n, k, nt), hi = optim_cut(n, k + 1, nt);
			if (use_wd)
				lamb_update_kernel(params + a + lo, m + s + lo, v + s + lo, hi - lo,
						   c, ratio, 1);
			else
				lamb_update_kernel(params + a + lo, m + s + lo, v + s + lo, hi - lo,
						   c, ratio, 0);
		}
	}
}

/* ---- the step protocol -------------------------------------------------------------------- */

int optim_needs_grad_norm(const struct optim *o)
{
	return o->p.kind == OPTIM_LAMB && o->p.max_grad_norm > 0;
}

double optim_grad_sumsq(const struct optim *o, const float *grads)
{
	double sum = 0;
	for (int i = 0; i < o->nsegs; i++) {
		size_t a, b;
		if (seg_piece(o, &o->segs[i], &a, &b))
			sum += sumsq(grads + a, b - a);
	}
	return sum;
}

int optim_nsums(const struct optim *o)
{
	return o->p.kind == OPTIM_LAMB ? 2 * o->nsegs : 0;
}

void optim_prepare(struct optim *o, const float *params, const float *grads, double grad_norm,
		   double *sums)
{
	if (o->p.kind == OPTIM_LAMB)
		lamb_prepare(o, params, grads, grad_norm, sums);
}

void optim_apply(struct optim *o, float *params, const float *grads, double lr, const double *sums)
{
	switch (o->p.kind) {
	case OPTIM_SGD:
		sgd_apply(o, params, grads, lr);
		break;
	case OPTIM_ADAMW:
		adamw_apply(o, params, grads, lr);
		break;
	case OPTIM_LAMB:
		lamb_apply(o, params, lr, sums);
		break;
	}
	o->step++;
}

void optim_step(struct optim *o, float *params, const float *grads, double lr)
{
	double grad_norm = 0;
	if (optim_needs_grad_norm(o))
		grad_norm = sqrt(optim_grad_sumsq(o, grads));
	optim_prepare(o, params, grads, grad_norm, o->sums);
	optim_apply(o, params, grads, lr, o->sums);
}
