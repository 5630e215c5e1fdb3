/* backend_cuda.c — the CUDA backend checked op by op against the CPU backend on fresh random
 * inputs (forward, backward, beta = 1 accumulation onto a prefill, outputs poisoned with NaN
 * first), bit-for-bit repeats with DPTRAIN_CUDA_DETERMINISTIC=1, the same with TF32 within its
 * tolerances, whole small models, uploads and markers.
 * Skips where no GPU is visible. Owns nothing outside its process. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_check.h"
#include "backend_cuda.h"
#include "backend_ref.h"
#include "nn.h"
#include "tap.h"

/* Tolerances, relative L2 error against the CPU backend (float32 everywhere: the CUDA backend
 * runs cuDNN with CUDNN_FMA_MATH and cuBLAS with CUBLAS_DEFAULT_MATH, so no TF32).
 * Element-wise ops, pooling and global average pool are the reference's formulas (most are
 * checked bit for bit besides); linear, batch norm and cross-entropy differ by summation
 * order; convolutions by cuDNN's algorithm (Winograd and FFT round differently from direct
 * summation); whole models by the sum of it all through every layer. */
#define TOL_ELT	   1e-6
#define TOL_F32	   1e-5
#define TOL_CONV   1e-4
#define TOL_LENET  1e-4
#define TOL_RESNET 1e-3
/* With TF32 (be_cuda_opts.tf32) convolutions and matrix products round their inputs to 10
 * mantissa bits (relative 2^-11 each): about 1e-3 per sum, several times that at the worst
 * element and through a whole model. */
#define TOL_TF32       1e-2
#define TOL_TF32_MODEL 5e-2

struct t {
	struct backend *cpu, *gpu;
	struct chk_rng *rng;
	const char *name; /* of the GPU backend variant */
	int det;	  /* DPTRAIN_CUDA_DETERMINISTIC=1: results repeat bit for bit */
	int tf32;	  /* TF32 tensor cores: looser tolerances for convolutions and products */
};

/* The tolerance of a convolution or matrix product: TF32's where it is on. */
static double mm_tol(const struct t *t, double tol)
{
	return t->tf32 && tol < TOL_TF32 ? TOL_TF32 : tol;
}

/* ------------------------------------------------------------------------------------- */
/* Device buffers: every failure here is the backend's, and stops the test. */

static float *dalloc(struct t *t, size_t n)
{
	float *p = t->gpu->ops->alloc(t->gpu, sizeof(float) * (n ? n : 1));

	if (!p)
		bail_out("%s alloc(%zu floats): %s", t->name, n, t->gpu->err);
	return p;
}

static float *up(struct t *t, const float *h, size_t n)
{
	float *p = dalloc(t, n);

	if (t->gpu->ops->from_host(t->gpu, p, h, sizeof(float) * n) < 0)
		bail_out("%s from_host(%zu floats): %s", t->name, n, t->gpu->err);
	return p;
}

static float *dpoison(struct t *t, size_t n)
{
	float *p = dalloc(t, n);

	if (t->gpu->ops->fill(t->gpu, p, NAN, n) < 0)
		bail_out("%s fill: %s", t->name, t->gpu->err);
	return p;
}

static float *down(struct t *t, const float *d, size_t n)
{
	float *h = chk_alloc(n);

	if (t->gpu->ops->to_host(t->gpu, h, d, sizeof(float) * n) < 0)
		bail_out("%s to_host(%zu floats): %s", t->name, n, t->gpu->err);
	return h;
}

static void dfree(struct t *t, void *p)
{
	t->gpu->ops->free(t->gpu, p);
}

/* ------------------------------------------------------------------------------------- */

static double rel_l2(const float *got, const float *want, size_t n)
{
	double num = 0.0, den = 0.0;

	for (size_t i = 0; i < n; i++) {
		double e = (double)got[i] - want[i];
		num += e * e;
		den += (double)want[i] * want[i];
	}
	return den > 0.0 ? sqrt(num / den) : sqrt(num); /* NaN stays NaN and fails */
}

static void cmp(struct t *t, const char *what, const char *part, const float *got,
		const float *want, size_t n, double tol)
{
	double e = rel_l2(got, want, n);

	ok(e <= tol, "%s %s %s: rel L2 err %.2e (tol %.0e, n=%zu)", t->name, what, part, e, tol, n);
}

/* Downloads d and compares it with the CPU's want; frees the host copy. */
static void cmp_dev(struct t *t, const char *what, const char *part, const float *d,
		    const float *want, size_t n, double tol)
{
	float *h = down(t, d, n);

	cmp(t, what, part, h, want, n, tol);
	free(h);
}

/* The output of a run with beta onto the prefill `pre` must be out0 + beta * pre, out0 being
 * the same op's beta = 0 output on the GPU. */
static void cmp_acc(struct t *t, const char *what, const char *part, const float *d,
		    const float *pre, const float *out0, float beta, size_t n)
{
	float *want = chk_alloc(n);
	char p[96];

	for (size_t i = 0; i < n; i++)
		want[i] = out0[i] + beta * pre[i];
	snprintf(p, sizeof(p), "%s beta=%g", part, beta);
	cmp_dev(t, what, p, d, want, n, TOL_ELT);
	free(want);
}

static void same_bits(struct t *t, const char *what, const float *d, const float *h, size_t n)
{
	float *g = down(t, d, n);

	ok(memcmp(g, h, n * sizeof(float)) == 0, "%s %s: repeats bit for bit", t->name, what);
	free(g);
}

static int ran(struct t *t, struct backend *be, int rc, const char *what)
{
	if (rc == 0)
		return 1;
	fail("%s %s: %s failed: %s", t->name, what, be->ops->name, be->err);
	return 0;
}

static float *rnd(struct t *t, size_t n, float lo, float hi)
{
	float *x = chk_alloc(n);

	chk_random(t->rng, x, n, lo, hi);
	return x;
}

/* ------------------------------------------------------------------------------------- */

static void test_conv(struct t *t, struct be_conv_desc d)
{
	struct backend *c = t->cpu, *g = t->gpu;
	struct be_conv_desc dc = d, dg = d;
	struct be_op *oc = c->ops->conv_create(c, &dc), *og = g->ops->conv_create(g, &dg);
	char s[160], w[200];

	snprintf(w, sizeof(w), "conv(%s)", be_conv_str(&d, s, sizeof(s)));
	if (!ok(oc && og, "%s %s: created", t->name, w)) {
		diag("cpu: %s; gpu: %s", oc ? "" : c->err, og ? "" : g->err);
		goto out_ops;
	}
	if (!ok(dg.oh == dc.oh && dg.ow == dc.ow, "%s %s: output %dx%d", t->name, w, dg.oh, dg.ow))
		goto out_ops;
	size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * d.c * d.kh * d.kw;
	size_t ny = (size_t)d.n * d.k * dc.oh * dc.ow, nb = d.k;
	float *x = rnd(t, nx, -1, 1), *wt = rnd(t, nw, -0.5f, 0.5f), *b = rnd(t, nb, -1, 1);
	float *dy = rnd(t, ny, -1, 1);
	float *y = chk_alloc(ny), *dx = chk_alloc(nx), *dw = chk_alloc(nw), *db = chk_alloc(nb);
	float *gx = up(t, x, nx), *gw = up(t, wt, nw), *gb = up(t, b, nb), *gdy = up(t, dy, ny);
	float *gy = dpoison(t, ny), *gdx = dpoison(t, nx), *gdw = dpoison(t, nw);
	float *gdb = dpoison(t, nb);
	float *hy = NULL, *hdx = NULL, *hdw = NULL, *hdb = NULL;

	if (!ran(t, c, c->ops->conv_fwd(c, oc, x, wt, d.has_bias ? b : NULL, y), w) ||
	    !ran(t, c, c->ops->conv_bwd_data(c, oc, dy, wt, dx, 0.0f), w) ||
	    !ran(t, c, c->ops->conv_bwd_weights(c, oc, x, dy, dw, d.has_bias ? db : NULL, 0.0f),
		 w) ||
	    !ran(t, g, g->ops->conv_fwd(g, og, gx, gw, d.has_bias ? gb : NULL, gy), w) ||
	    !ran(t, g, g->ops->conv_bwd_data(g, og, gdy, gw, gdx, 0.0f), w) ||
	    !ran(t, g, g->ops->conv_bwd_weights(g, og, gx, gdy, gdw, d.has_bias ? gdb : NULL, 0.0f),
		 w))
		goto out;
	hy = down(t, gy, ny), hdx = down(t, gdx, nx), hdw = down(t, gdw, nw);
	hdb = down(t, gdb, nb);
	cmp(t, w, "fwd y", hy, y, ny, mm_tol(t, TOL_CONV));
	cmp(t, w, "bwd dx", hdx, dx, nx, mm_tol(t, TOL_CONV));
	cmp(t, w, "bwd dw", hdw, dw, nw, mm_tol(t, TOL_CONV));
	if (d.has_bias)
		cmp(t, w, "bwd db", hdb, db, nb, TOL_F32);

	if (t->det) {
		g->ops->fill(g, gy, NAN, ny), g->ops->fill(g, gdx, NAN, nx);
		g->ops->fill(g, gdw, NAN, nw);
		if (ran(t, g, g->ops->conv_fwd(g, og, gx, gw, d.has_bias ? gb : NULL, gy), w) &&
		    ran(t, g, g->ops->conv_bwd_data(g, og, gdy, gw, gdx, 0.0f), w) &&
		    ran(t, g,
			g->ops->conv_bwd_weights(g, og, gx, gdy, gdw, d.has_bias ? gdb : NULL,
						 0.0f),
			w)) {
			char r[240];
			snprintf(r, sizeof(r), "%s fwd", w);
			same_bits(t, r, gy, hy, ny);
			snprintf(r, sizeof(r), "%s bwd data", w);
			same_bits(t, r, gdx, hdx, nx);
			snprintf(r, sizeof(r), "%s bwd weights", w);
			same_bits(t, r, gdw, hdw, nw);
		}
	}

	/* Accumulation: beta = 1 as gradient accumulation uses it, 0.5 for the general blend. */
	float *pre = rnd(t, nx, -1, 1), *prew = rnd(t, nw, -1, 1), *preb = rnd(t, nb, -1, 1);
	float *ax = up(t, pre, nx), *aw = up(t, prew, nw), *ab = up(t, preb, nb);
	if (ran(t, g, g->ops->conv_bwd_data(g, og, gdy, gw, ax, 1.0f), w))
		cmp_acc(t, w, "dx", ax, pre, hdx, 1.0f, nx);
	if (ran(t, g, g->ops->conv_bwd_weights(g, og, gx, gdy, aw, d.has_bias ? ab : NULL, 1.0f),
		w)) {
		cmp_acc(t, w, "dw", aw, prew, hdw, 1.0f, nw);
		if (d.has_bias)
			cmp_acc(t, w, "db", ab, preb, hdb, 1.0f, nb);
	}
	g->ops->from_host(g, ax, pre, nx * sizeof(float));
	if (ran(t, g, g->ops->conv_bwd_data(g, og, gdy, gw, ax, 0.5f), w))
		cmp_acc(t, w, "dx", ax, pre, hdx, 0.5f, nx);
	free(pre), free(prew), free(preb);
	dfree(t, ax), dfree(t, aw), dfree(t, ab);
out:
	free(x), free(wt), free(b), free(dy), free(y), free(dx), free(dw), free(db);
	free(hy), free(hdx), free(hdw), free(hdb);
	dfree(t, gx), dfree(t, gw), dfree(t, gb), dfree(t, gdy), dfree(t, gy), dfree(t, gdx);
	dfree(t, gdw), dfree(t, gdb);
out_ops:
	if (oc)
		c->ops->op_destroy(c, oc);
	if (og)
		g->ops->op_destroy(g, og);
}

/* ------------------------------------------------------------------------------------- */

static void test_bn(struct t *t, struct be_bn_desc d)
{
	struct backend *c = t->cpu, *g = t->gpu;
	struct be_op *oc = c->ops->bn_create(c, &d), *og = g->ops->bn_create(g, &d);
	size_t nx = (size_t)d.n * d.c * d.h * d.w, nc = d.c;
	float momentum = 0.1f;
	char s[160], w[200];

	snprintf(w, sizeof(w), "bn(%s)", be_bn_str(&d, s, sizeof(s)));
	if (!ok(oc && og, "%s %s: created", t->name, w)) {
		diag("cpu: %s; gpu: %s", oc ? "" : c->err, og ? "" : g->err);
		goto out_ops;
	}
	/* Offset and scale per channel, so normalisation has something to undo. */
	float *x = rnd(t, nx, -1, 1), *dy = rnd(t, nx, -1, 1), *gm = rnd(t, nc, 0.5f, 1.5f);
	float *bt = rnd(t, nc, -0.5f, 0.5f), *rm = rnd(t, nc, -0.2f, 0.2f);
	float *rv = rnd(t, nc, 0.5f, 1.5f);
	for (size_t i = 0; i < nx; i++)
		x[i] = x[i] * (1.0f + (i / (d.h * d.w)) % d.c) + 0.5f * ((i / (d.h * d.w)) % d.c);
	float *gx = up(t, x, nx), *gdy = up(t, dy, nx), *ggm = up(t, gm, nc), *gbt = up(t, bt, nc);
	float *grm = up(t, rm, nc), *grv = up(t, rv, nc);
	float *gy = dpoison(t, nx), *gye = dpoison(t, nx), *gsm = dpoison(t, nc);
	float *gsi = dpoison(t, nc), *gdx = dpoison(t, nx), *gdg = dpoison(t, nc);
	float *gdb = dpoison(t, nc);
	float *y = chk_alloc(nx), *ye = chk_alloc(nx), *sm = chk_alloc(nc), *si = chk_alloc(nc);
	float *dx = chk_alloc(nx), *dg = chk_alloc(nc), *db = chk_alloc(nc);
	float *hdx = NULL, *hdg = NULL, *hdb = NULL;

	if (!ran(t, c, c->ops->bn_fwd_train(c, oc, x, gm, bt, y, sm, si, rm, rv, momentum), w) ||
	    !ran(t, c, c->ops->bn_bwd(c, oc, x, y, dy, gm, sm, si, dx, dg, db, 0.0f), w) ||
	    !ran(t, c, c->ops->bn_fwd_infer(c, oc, x, gm, bt, rm, rv, ye), w) ||
	    !ran(t, g, g->ops->bn_fwd_train(g, og, gx, ggm, gbt, gy, gsm, gsi, grm, grv, momentum),
		 w) ||
	    !ran(t, g, g->ops->bn_bwd(g, og, gx, gy, gdy, ggm, gsm, gsi, gdx, gdg, gdb, 0.0f), w) ||
	    !ran(t, g, g->ops->bn_fwd_infer(g, og, gx, ggm, gbt, grm, grv, gye), w))
		goto out;
	cmp_dev(t, w, "train y", gy, y, nx, TOL_F32);
	cmp_dev(t, w, "save_mean", gsm, sm, nc, TOL_F32);
	cmp_dev(t, w, "save_invstd", gsi, si, nc, TOL_F32);
	cmp_dev(t, w, "running_mean", grm, rm, nc, TOL_F32);
	cmp_dev(t, w, "running_var (unbiased)", grv, rv, nc, TOL_F32);
	cmp_dev(t, w, "dx", gdx, dx, nx, TOL_F32);
	cmp_dev(t, w, "dgamma", gdg, dg, nc, TOL_F32);
	cmp_dev(t, w, "dbeta", gdb, db, nc, TOL_F32);
	cmp_dev(t, w, "eval y", gye, ye, nx, TOL_F32);
	hdx = down(t, gdx, nx), hdg = down(t, gdg, nc), hdb = down(t, gdb, nc);

	/* dx NULL: the parameter gradients alone, the same ones. */
	float *g2 = dpoison(t, nc), *b2 = dpoison(t, nc);
	if (ran(t, g, g->ops->bn_bwd(g, og, gx, gy, gdy, ggm, gsm, gsi, NULL, g2, b2, 0.0f), w)) {
		char r[240];
		snprintf(r, sizeof(r), "%s bwd without dx: dgamma", w);
		same_bits(t, r, g2, hdg, nc);
		snprintf(r, sizeof(r), "%s bwd without dx: dbeta", w);
		same_bits(t, r, b2, hdb, nc);
	}
	dfree(t, g2), dfree(t, b2);

	/* dx in place of dy (an aliasing caller), then beta = 1 onto prefills. */
	float *gdy2 = up(t, dy, nx);
	if (ran(t, g, g->ops->bn_bwd(g, og, gx, gy, gdy2, ggm, gsm, gsi, gdy2, gdg, gdb, 0.0f), w))
		cmp_dev(t, w, "dx in place of dy", gdy2, hdx, nx, TOL_ELT);
	dfree(t, gdy2);
	float *pre = rnd(t, nx, -1, 1), *preg = rnd(t, nc, -1, 1), *preb = rnd(t, nc, -1, 1);
	float *ax = up(t, pre, nx), *ag = up(t, preg, nc), *ab = up(t, preb, nc);
	if (ran(t, g, g->ops->bn_bwd(g, og, gx, gy, gdy, ggm, gsm, gsi, ax, ag, ab, 1.0f), w)) {
		cmp_acc(t, w, "dx", ax, pre, hdx, 1.0f, nx);
		cmp_acc(t, w, "dgamma", ag, preg, hdg, 1.0f, nc);
		cmp_acc(t, w, "dbeta", ab, preb, hdb, 1.0f, nc);
	}
	free(pre), free(preg), free(preb);
	dfree(t, ax), dfree(t, ag), dfree(t, ab);
out:
	free(x), free(dy), free(gm), free(bt), free(rm), free(rv), free(y), free(ye), free(sm);
	free(si), free(dx), free(dg), free(db), free(hdx), free(hdg), free(hdb);
	dfree(t, gx), dfree(t, gdy), dfree(t, ggm), dfree(t, gbt), dfree(t, grm), dfree(t, grv);
	dfree(t, gy), dfree(t, gye), dfree(t, gsm), dfree(t, gsi), dfree(t, gdx), dfree(t, gdg);
	dfree(t, gdb);
out_ops:
	if (oc)
		c->ops->op_destroy(c, oc);
	if (og)
		g->ops->op_destroy(g, og);
}

/* ------------------------------------------------------------------------------------- */

/* levels > 0 quantises x to that many values, so max pooling windows hold ties. */
static void test_pool(struct t *t, struct be_pool_desc d, int levels)
{
	struct backend *c = t->cpu, *g = t->gpu;
	struct be_pool_desc dc = d, dg = d;
	struct be_op *oc = c->ops->pool_create(c, &dc), *og = g->ops->pool_create(g, &dg);
	char s[160], w[200];

	snprintf(w, sizeof(w), "pool(%s)%s", be_pool_str(&d, s, sizeof(s)),
		 levels ? " with ties" : "");
	if (!ok(oc && og && dc.oh == dg.oh && dc.ow == dg.ow, "%s %s: created, output %dx%d",
		t->name, w, dg.oh, dg.ow)) {
		diag("cpu: %s; gpu: %s", oc ? "" : c->err, og ? "" : g->err);
		goto out_ops;
	}
	size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * dc.oh * dc.ow;
	float *x = rnd(t, nx, -1, 1), *dy = rnd(t, ny, -1, 1), *y = chk_alloc(ny);
	float *dx = chk_alloc(nx);
	if (levels)
		for (size_t i = 0; i < nx; i++)
			x[i] = floorf((x[i] + 1.0f) * 0.5f * levels);
	float *gx = up(t, x, nx), *gdy = up(t, dy, ny), *gy = dpoison(t, ny);
	float *gdx = dpoison(t, nx), *hdx = NULL;
	if (!ran(t, c, c->ops->pool_fwd(c, oc, x, y), w) ||
	    !ran(t, c, c->ops->pool_bwd(c, oc, x, y, dy, dx, 0.0f), w) ||
	    !ran(t, g, g->ops->pool_fwd(g, og, gx, gy), w) ||
	    !ran(t, g, g->ops->pool_bwd(g, og, gx, gy, gdy, gdx, 0.0f), w))
		goto out;
	cmp_dev(t, w, "fwd y", gy, y, ny, TOL_ELT);
	cmp_dev(t, w, "bwd dx", gdx, dx, nx, TOL_ELT);
	hdx = down(t, gdx, nx);
	if (d.kind == BE_POOL_MAX) {
		float *hy = down(t, gy, ny);
		ok(memcmp(hy, y, ny * sizeof(float)) == 0 &&
		       memcmp(hdx, dx, nx * sizeof(float)) == 0,
		   "%s %s: max pooling fwd and bwd equal the CPU's bit for bit (ties included)",
		   t->name, w);
		free(hy);
	}
	float *pre = rnd(t, nx, -1, 1), *ax = up(t, pre, nx);
	if (ran(t, g, g->ops->pool_bwd(g, og, gx, gy, gdy, ax, 1.0f), w))
		cmp_acc(t, w, "dx", ax, pre, hdx, 1.0f, nx);
	free(pre), dfree(t, ax);
out:
	free(x), free(dy), free(y), free(dx), free(hdx);
	dfree(t, gx), dfree(t, gdy), dfree(t, gy), dfree(t, gdx);
out_ops:
	if (oc)
		c->ops->op_destroy(c, oc);
	if (og)
		g->ops->op_destroy(g, og);
}

/* ------------------------------------------------------------------------------------- */

static void test_linear(struct t *t, struct be_linear_desc d)
{
	struct backend *c = t->cpu, *g = t->gpu;
	struct be_op *oc = c->ops->linear_create(c, &d), *og = g->ops->linear_create(g, &d);
	size_t nx = (size_t)d.n * d.in, nw = (size_t)d.out * d.in, ny = (size_t)d.n * d.out;
	size_t nb = d.out;
	char s[160], w[200];

	snprintf(w, sizeof(w), "linear(%s)", be_linear_str(&d, s, sizeof(s)));
	if (!ok(oc && og, "%s %s: created", t->name, w)) {
		diag("cpu: %s; gpu: %s", oc ? "" : c->err, og ? "" : g->err);
		goto out_ops;
	}
	float *x = rnd(t, nx, -1, 1), *wt = rnd(t, nw, -0.5f, 0.5f), *b = rnd(t, nb, -1, 1);
	float *dy = rnd(t, ny, -1, 1), *y = chk_alloc(ny), *dx = chk_alloc(nx);
	float *dw = chk_alloc(nw), *db = chk_alloc(nb);
	float *gx = up(t, x, nx), *gw = up(t, wt, nw), *gb = up(t, b, nb), *gdy = up(t, dy, ny);
	float *gy = dpoison(t, ny), *gdx = dpoison(t, nx), *gdw = dpoison(t, nw);
	float *gdb = dpoison(t, nb), *hdx = NULL, *hdw = NULL, *hdb = NULL;
	if (!ran(t, c, c->ops->linear_fwd(c, oc, x, wt, d.has_bias ? b : NULL, y), w) ||
	    !ran(t, c, c->ops->linear_bwd_data(c, oc, dy, wt, dx, 0.0f), w) ||
	    !ran(t, c, c->ops->linear_bwd_weights(c, oc, x, dy, dw, d.has_bias ? db : NULL, 0.0f),
		 w) ||
	    !ran(t, g, g->ops->linear_fwd(g, og, gx, gw, d.has_bias ? gb : NULL, gy), w) ||
	    !ran(t, g, g->ops->linear_bwd_data(g, og, gdy, gw, gdx, 0.0f), w) ||
	    !ran(t, g,
		 g->ops->linear_bwd_weights(g, og, gx, gdy, gdw, d.has_bias ? gdb : NULL, 0.0f), w))
		goto out;
	cmp_dev(t, w, "fwd y", gy, y, ny, mm_tol(t, TOL_F32));
	cmp_dev(t, w, "bwd dx", gdx, dx, nx, mm_tol(t, TOL_F32));
	cmp_dev(t, w, "bwd dw", gdw, dw, nw, mm_tol(t, TOL_F32));
	if (d.has_bias)
		cmp_dev(t, w, "bwd db", gdb, db, nb, TOL_F32);
	hdx = down(t, gdx, nx), hdw = down(t, gdw, nw), hdb = down(t, gdb, nb);
	float *pre = rnd(t, nx, -1, 1), *prew = rnd(t, nw, -1, 1), *preb = rnd(t, nb, -1, 1);
	float *ax = up(t, pre, nx), *aw = up(t, prew, nw), *ab = up(t, preb, nb);
	if (ran(t, g, g->ops->linear_bwd_data(g, og, gdy, gw, ax, 1.0f), w))
		cmp_acc(t, w, "dx", ax, pre, hdx, 1.0f, nx);
	if (ran(t, g, g->ops->linear_bwd_weights(g, og, gx, gdy, aw, d.has_bias ? ab : NULL, 1.0f),
		w)) {
		cmp_acc(t, w, "dw", aw, prew, hdw, 1.0f, nw);
		if (d.has_bias)
			cmp_acc(t, w, "db", ab, preb, hdb, 1.0f, nb);
	}
	free(pre), free(prew), free(preb);
	dfree(t, ax), dfree(t, aw), dfree(t, ab);
out:
	free(x), free(wt), free(b), free(dy), free(y), free(dx), free(dw), free(db);
	free(hdx), free(hdw), free(hdb);
	dfree(t, gx), dfree(t, gw), dfree(t, gb), dfree(t, gdy), dfree(t, gy), dfree(t, gdx);
	dfree(t, gdw), dfree(t, gdb);
out_ops:
	if (oc)
		c->ops->op_destroy(c, oc);
	if (og)
		g->ops->op_destroy(g, og);
}

/* ------------------------------------------------------------------------------------- */

/* The element-wise ops are the reference's float formulas without FMA contraction: equal to
 * the CPU bit for bit. */
static void test_eltwise(struct t *t, size_t n)
{
	struct backend *c = t->cpu, *g = t->gpu;
	float *x = rnd(t, n, -1, 1), *b = rnd(t, n, -1, 1), *dy = rnd(t, n, -1, 1);
	float *pre = rnd(t, n, -1, 1);
	float *y = chk_alloc(n), *dx = chk_alloc(n), *acc = chk_copy(pre, n), *sum = chk_alloc(n);
	float *ax = chk_copy(pre, n);
	float *gx = up(t, x, n), *gb = up(t, b, n), *gdy = up(t, dy, n), *gacc = up(t, pre, n);
	float *gax = up(t, pre, n), *gy = dpoison(t, n), *gdx = dpoison(t, n), *gs = dpoison(t, n);
	double ss[2] = {0, 0};
	char w[64];

	snprintf(w, sizeof(w), "eltwise(n=%zu)", n);
	c->ops->relu_fwd(c, x, y, n);
	c->ops->relu_bwd(c, y, dy, dx, n, 0.0f);
	c->ops->relu_bwd(c, y, dy, acc, n, 1.0f);
	c->ops->add(c, x, b, sum, n);
	c->ops->axpby(c, 0.5f, x, 2.0f, ax, n);
	c->ops->sumsq(c, x, n, &ss[0]);
	if (!ran(t, g, g->ops->relu_fwd(g, gx, gy, n), w) ||
	    !ran(t, g, g->ops->relu_bwd(g, gy, gdy, gdx, n, 0.0f), w) ||
	    !ran(t, g, g->ops->relu_bwd(g, gy, gdy, gacc, n, 1.0f), w) ||
	    !ran(t, g, g->ops->add(g, gx, gb, gs, n), w) ||
	    !ran(t, g, g->ops->axpby(g, 0.5f, gx, 2.0f, gax, n), w) ||
	    !ran(t, g, g->ops->sumsq(g, gx, n, &ss[1]), w))
		goto out;
	float *hy = down(t, gy, n), *hdx = down(t, gdx, n), *hacc = down(t, gacc, n);
	float *hs = down(t, gs, n), *hax = down(t, gax, n);
	ok(memcmp(hy, y, n * sizeof(float)) == 0, "%s %s relu fwd: bit for bit", t->name, w);
	ok(memcmp(hdx, dx, n * sizeof(float)) == 0, "%s %s relu bwd: bit for bit", t->name, w);
	ok(memcmp(hacc, acc, n * sizeof(float)) == 0, "%s %s relu bwd beta=1: bit for bit", t->name,
	   w);
	ok(memcmp(hs, sum, n * sizeof(float)) == 0, "%s %s add: bit for bit", t->name, w);
	ok(memcmp(hax, ax, n * sizeof(float)) == 0, "%s %s axpby(0.5, 2): bit for bit", t->name, w);
	ok(fabs(ss[1] - ss[0]) <= 1e-9 * ss[0], "%s %s sumsq: %.12g vs %.12g", t->name, w, ss[1],
	   ss[0]);
	double ss2 = -1.0;
	g->ops->sumsq(g, gx, n, &ss2);
	ok(ss2 == ss[1], "%s %s sumsq repeats bit for bit", t->name, w);
	/* In place, as nn.c runs relu_bwd when dx is dy. */
	if (ran(t, g, g->ops->relu_bwd(g, gy, gdy, gdy, n, 0.0f), w)) {
		float *hip = down(t, gdy, n);
		ok(memcmp(hip, dx, n * sizeof(float)) == 0, "%s %s relu bwd in place", t->name, w);
		free(hip);
	}
	if (ran(t, g, g->ops->fill(g, gy, 3.25f, n), w)) {
		float *hf = down(t, gy, n);
		int exact = 1;
		for (size_t i = 0; i < n; i++)
			exact &= hf[i] == 3.25f;
		ok(exact, "%s %s fill", t->name, w);
		free(hf);
	}
	free(hy), free(hdx), free(hacc), free(hs), free(hax);
out:
	free(x), free(b), free(dy), free(pre), free(y), free(dx), free(acc), free(sum), free(ax);
	dfree(t, gx), dfree(t, gb), dfree(t, gdy), dfree(t, gacc), dfree(t, gax), dfree(t, gy);
	dfree(t, gdx), dfree(t, gs);
}

static void test_gap(struct t *t, int n, int c, int hw)
{
	struct backend *cp = t->cpu, *g = t->gpu;
	size_t nx = (size_t)n * c * hw, ny = (size_t)n * c;
	float *x = rnd(t, nx, -1, 1), *dy = rnd(t, ny, -1, 1), *pre = rnd(t, nx, -1, 1);
	float *y = chk_alloc(ny), *dx = chk_alloc(nx), *acc = chk_copy(pre, nx);
	float *gx = up(t, x, nx), *gdy = up(t, dy, ny), *gacc = up(t, pre, nx);
	float *gy = dpoison(t, ny), *gdx = dpoison(t, nx);
	char w[96];

	snprintf(w, sizeof(w), "gap(n=%d c=%d hw=%d)", n, c, hw);
	cp->ops->gap_fwd(cp, x, y, n, c, hw);
	cp->ops->gap_bwd(cp, dy, dx, n, c, hw, 0.0f);
	cp->ops->gap_bwd(cp, dy, acc, n, c, hw, 1.0f);
	if (ran(t, g, g->ops->gap_fwd(g, gx, gy, n, c, hw), w) &&
	    ran(t, g, g->ops->gap_bwd(g, gdy, gdx, n, c, hw, 0.0f), w) &&
	    ran(t, g, g->ops->gap_bwd(g, gdy, gacc, n, c, hw, 1.0f), w)) {
		cmp_dev(t, w, "fwd y", gy, y, ny, TOL_ELT);
		cmp_dev(t, w, "bwd dx", gdx, dx, nx, TOL_ELT);
		cmp_dev(t, w, "bwd dx beta=1", gacc, acc, nx, TOL_ELT);
	}
	free(x), free(dy), free(pre), free(y), free(dx), free(acc);
	dfree(t, gx), dfree(t, gdy), dfree(t, gacc), dfree(t, gy), dfree(t, gdx);
}

static void test_xent(struct t *t, int n, int classes, float smoothing, float scale)
{
	struct backend *c = t->cpu, *g = t->gpu;
	size_t nl = (size_t)n * classes;
	float *l = rnd(t, nl, -4, 4), *d = chk_alloc(nl), loss[3];
	int32_t *lab = malloc(sizeof(*lab) * n);
	int correct[3];
	char w[128];

	if (!lab)
		bail_out("out of memory");
	for (int i = 0; i < n; i++)
		lab[i] = (int32_t)(chk_next(t->rng) % classes);
	/* Some rows predict their label, so correct is not always 0. */
	for (int i = 0; i < n; i += 3)
		l[(size_t)i * classes + lab[i]] = 10.0f;
	snprintf(w, sizeof(w), "xent(n=%d classes=%d smoothing=%g scale=%g)", n, classes, smoothing,
		 scale);
	float *gl = up(t, l, nl), *gd = dpoison(t, nl);
	int32_t *glab = g->ops->alloc(g, sizeof(*lab) * n);
	if (!glab || g->ops->from_host(g, glab, lab, sizeof(*lab) * n) < 0)
		bail_out("%s: labels to the GPU: %s", t->name, g->err);
	if (ran(t, c,
		c->ops->xent(c, l, lab, n, classes, smoothing, scale, &loss[0], &correct[0], d),
		w) &&
	    ran(t, g,
		g->ops->xent(g, gl, glab, n, classes, smoothing, scale, &loss[1], &correct[1], gd),
		w)) {
		is_double(loss[1], loss[0], 1e-5 * fabs(loss[0]), "%s %s loss %.6f", t->name, w,
			  loss[1]);
		is_int(correct[1], correct[0], "%s %s correct %d", t->name, w, correct[1]);
		cmp_dev(t, w, "dlogits", gd, d, nl, TOL_F32);
	}
	/* Labels in host memory and no dlogits: the same loss. */
	if (ran(t, g,
		g->ops->xent(g, gl, lab, n, classes, smoothing, scale, &loss[2], &correct[2], NULL),
		w))
		ok(loss[2] == loss[1] && correct[2] == correct[1],
		   "%s %s: host labels, no dlogits: same loss and hits", t->name, w);
	free(l), free(d), free(lab);
	dfree(t, gl), dfree(t, gd), dfree(t, glab);
}

/* Values a reader can check by hand: equal logits give log(C) whatever the smoothing, a
 * gradient of (1/C - target) / n, and argmax ties go to the lowest index. */
static void test_xent_known(struct t *t)
{
	enum { N = 2, C = 4 };
	struct backend *g = t->gpu;
	float l[N * C] = {0}, d[N * C], loss;
	int32_t lab[N] = {0, 3};
	int correct = -1;
	float *gl = up(t, l, N * C), *gd = dpoison(t, N * C);

	if (g->ops->xent(g, gl, lab, N, C, 0.1f, 2.0f, &loss, &correct, gd) != 0) {
		fail("%s xent equal logits: %s", t->name, g->err);
		goto out;
	}
	g->ops->to_host(g, d, gd, sizeof(d));
	is_double(loss, log(4.0), 1e-6, "%s xent equal logits: loss log(4)", t->name);
	is_int(correct, 1, "%s xent: argmax ties go to the lowest index", t->name);
	is_double(d[0], (0.25 - 0.925) / N * 2, 1e-6, "%s xent dlogits at the label", t->name);
	is_double(d[1], (0.25 - 0.025) / N * 2, 1e-6, "%s xent dlogits off the label", t->name);
out:
	dfree(t, gl), dfree(t, gd);
}

/* ------------------------------------------------------------------------------------- */

/* Bad shapes and arguments: -1 or NULL with the reference's message. */
static void test_errors(struct t *t)
{
	struct backend *be = t->gpu;
	const char *bn = t->name;
	struct be_conv_desc cd = {
	    .n = 8, .c = 3, .h = 2, .w = 2, .k = 4, .kh = 7, .kw = 7, .stride = 1};
	struct be_op *op = be->ops->conv_create(be, &cd);
	ok(op == NULL, "%s conv_create rejects a kernel larger than the input", bn);
	like(be->err, "conv_create(n=8 c=3 h=2 w=2 k=4 7x7/1 pad 0)", "%s: message names the shape",
	     bn);
	if (op)
		be->ops->op_destroy(be, op);

	struct be_conv_desc cb = {
	    .n = 1, .c = 1, .h = 3, .w = 3, .k = 1, .kh = 1, .kw = 1, .stride = 1, .has_bias = 1};
	float *cx = dpoison(t, 9), *cw = dpoison(t, 1), *cy = dpoison(t, 9);
	op = be->ops->conv_create(be, &cb);
	if (ok(op != NULL, "%s conv_create with bias", bn)) {
		ok(be->ops->conv_fwd(be, op, cx, cw, NULL, cy) == -1,
		   "%s conv_fwd refuses a NULL bias when the op has one", bn);
		like(be->err, "conv_fwd(n=1 c=1 h=3 w=3 k=1 1x1/1 pad 0 bias): the op has a bias",
		     "%s: message names the op and what is missing", bn);
		ok(be->ops->bn_fwd_infer(be, op, cx, cw, cw, cw, cw, cy) == -1,
		   "%s an op of another kind is refused", bn);
		like(be->err, "bn_fwd_infer: the op was not created by the matching", "%s: says so",
		     bn);
		be->ops->op_destroy(be, op);
	} else {
		diag("%s", be->err);
	}
	dfree(t, cx), dfree(t, cw), dfree(t, cy);

	struct be_pool_desc pd = {.kind = BE_POOL_MAX,
				  .n = 1,
				  .c = 1,
				  .h = 8,
				  .w = 8,
				  .kh = 2,
				  .kw = 2,
				  .stride = 2,
				  .pad = 2};
	op = be->ops->pool_create(be, &pd);
	ok(op == NULL, "%s pool_create rejects pad > kernel/2", bn);
	like(be->err, "pool_create(max n=1 c=1 h=8 w=8 2x2/2 pad 2)", "%s: message names the shape",
	     bn);
	if (op)
		be->ops->op_destroy(be, op);

	struct be_bn_desc bd = {.n = 1, .c = 2, .h = 1, .w = 1, .eps = 1e-5f};
	float *b2 = dpoison(t, 2);
	op = be->ops->bn_create(be, &bd);
	if (ok(op != NULL, "%s bn_create n=1 h=w=1 (inference is fine)", bn)) {
		ok(be->ops->bn_fwd_train(be, op, b2, b2, b2, b2, b2, b2, b2, b2, 0.1f) == -1,
		   "%s bn_fwd_train with one value per channel fails", bn);
		like(be->err, "more than one value per channel", "%s: message says why", bn);
		be->ops->op_destroy(be, op);
	} else {
		diag("%s", be->err);
	}
	dfree(t, b2);

	float zeros[6] = {0}, loss;
	float *l = up(t, zeros, 6);
	int32_t lab[2] = {1, 3};
	int correct;
	ok(be->ops->xent(be, l, lab, 2, 3, 0.0f, 1.0f, &loss, &correct, NULL) == -1,
	   "%s xent rejects a label out of range", bn);
	like(be->err, "label 3 of sample 1", "%s: message names the sample", bn);
	dfree(t, l);

	struct be_linear_desc ld = {.n = 0, .in = 4, .out = 2};
	op = be->ops->linear_create(be, &ld);
	ok(op == NULL, "%s linear_create rejects n=0", bn);
	like(be->err, "linear_create(n=0 in=4 out=2)", "%s: message names the shape", bn);
	if (op)
		be->ops->op_destroy(be, op);

	ok(be->ops->sync(be) == 0, "%s sync after all that: %s", bn, be->err);
}

/* The arena hands a freed block back to the next request of its size class. */
static void test_arena(struct t *t)
{
	struct backend *g = t->gpu;
	void *a = g->ops->alloc(g, 1000), *b, *c;

	g->ops->free(g, a);
	b = g->ops->alloc(g, 900);
	ok(a && b == a, "%s alloc: a freed block is reused for the same size class", t->name);
	c = g->ops->alloc(g, 1000);
	ok(c && c != b, "%s alloc: a block in use is not handed out twice", t->name);
	g->ops->free(g, b);
	g->ops->free(g, c);
	g->ops->free(g, NULL);
	void *big = g->ops->alloc(g, (size_t)1 << 50);
	ok(big == NULL, "%s alloc of 1 PiB fails", t->name);
	like(g->err, "cudaMalloc", "%s: and names cudaMalloc: %s", t->name, g->err);
	float h = 0;
	ok(g->ops->to_host(g, &h, (float *)a, 0) == 0, "%s to_host of 0 bytes", t->name);
}

/* Page-locked buffers, uploads on the copy engine, markers: a batch uploaded into one of two
 * device buffers arrives whole and in order with the ops issued after it. */
static void test_async(struct t *t)
{
	struct backend *g = t->gpu;
	size_t n = 1 << 20;
	float *h = g->ops->host_alloc(g, n * sizeof(float)), *back = chk_alloc(n);
	float *d[2] = {dalloc(t, n), dalloc(t, n)}, *sum = dalloc(t, n);
	void *done[2] = {NULL, NULL}, *used[2] = {NULL, NULL};
	int bad = 0;

	if (!ok(h != NULL, "%s host_alloc(%zu bytes): %s", t->name, n * sizeof(float),
		h ? "" : g->err))
		return;
	ok(g->ops->mark_wait(g, NULL) == 0, "%s mark_wait(NULL) returns at once", t->name);
	for (int round = 0; round < 6; round++) {
		int i = round & 1;
		if (g->ops->mark_wait(g, used[i]) < 0)
			bad++;
		for (size_t k = 0; k < n; k++)
			h[k] = (float)(round * 1000003 + (int)k % 977);
		/* the ops after the upload see it: sum = d[i] + d[i] */
		if (g->ops->upload(g, d[i], h, n * sizeof(float), &done[i]) < 0 ||
		    g->ops->add(g, d[i], d[i], sum, n) < 0 || g->ops->mark(g, &used[i]) < 0 ||
		    g->ops->mark_wait(g, done[i]) < 0 ||
		    g->ops->to_host(g, back, sum, n * sizeof(float)) < 0) {
			bad++;
			diag("%s round %d: %s", t->name, round, g->err);
			break;
		}
		for (size_t k = 0; k < n; k++)
			if (back[k] != 2.0f * (float)(round * 1000003 + (int)k % 977)) {
				bad++;
				break;
			}
	}
	ok(bad == 0, "%s upload + mark: 6 alternating uploads of %zu floats arrive before the "
		     "ops issued after them",
	   t->name, n);
	for (int i = 0; i < 2; i++) {
		g->ops->mark_free(g, done[i]);
		g->ops->mark_free(g, used[i]);
		g->ops->free(g, d[i]);
	}
	g->ops->free(g, sum);
	g->ops->host_free(g, h);
	free(back);
	ok(be_cuda_peak_bytes(g) >= 3 * n * sizeof(float),
	   "%s peak device memory %zu bytes counts the buffers", t->name, be_cuda_peak_bytes(g));
	char desc[256];
	ok(be_cuda_describe(be_cuda_device(g), desc, sizeof(desc)) == 0 && desc[0],
	   "%s describe: %s", t->name, desc);
}

/* ------------------------------------------------------------------------------------- */

/* A whole model, one training step and an eval forward, on both backends from the same
 * weights and data. */
static void test_model(struct t *t, const char *name, int c, int h, int w, int n, double tol)
{
	struct nn_spec spec = {.name = name, .c = c, .h = h, .w = w, .classes = 10};
	struct nn_model mc, mg;
	char err[512], what[96];
	size_t nx = (size_t)n * c * h * w, nl = (size_t)n * 10;
	float *x = rnd(t, nx, -1, 1), *lc, *lg, loss[2];
	int32_t *lab = malloc(sizeof(*lab) * n), *glab;
	int correct[2];
	uint64_t seed = chk_next(t->rng);

	snprintf(what, sizeof(what), "model %s %dx%dx%d batch %d", name, c, h, w, n);
	if (!lab)
		bail_out("out of memory");
	for (int i = 0; i < n; i++)
		lab[i] = (int32_t)(chk_next(t->rng) % 10);
	if (nn_build(&mc, t->cpu, &spec, err, sizeof(err)) < 0 ||
	    nn_init_weights(&mc, seed, err, sizeof(err)) < 0)
		bail_out("%s on cpu: %s", what, err);
	if (nn_build(&mg, t->gpu, &spec, err, sizeof(err)) < 0 ||
	    nn_init_weights(&mg, seed, err, sizeof(err)) < 0) {
		fail("%s on %s: %s", what, t->name, err);
		nn_free(&mg); /* safe twice: nn_build frees on failure and clears the model */
		nn_free(&mc);
		free(x), free(lab);
		return;
	}
	float *gx = up(t, x, nx);
	glab = t->gpu->ops->alloc(t->gpu, sizeof(*lab) * n);
	if (!glab || t->gpu->ops->from_host(t->gpu, glab, lab, sizeof(*lab) * n) < 0)
		bail_out("%s: labels to the GPU: %s", what, t->gpu->err);
	nn_set_training(&mc, 1);
	nn_set_training(&mg, 1);
	if (nn_forward(&mc, x, n, &lc, err, sizeof(err)) < 0 ||
	    nn_loss(&mc, lab, n, 0.1f, 1.0f, &loss[0], &correct[0], err, sizeof(err)) < 0 ||
	    nn_backward(&mc, n, 0.0f, err, sizeof(err)) < 0)
		bail_out("%s on cpu: %s", what, err);
	if (nn_forward(&mg, gx, n, &lg, err, sizeof(err)) < 0 ||
	    nn_loss(&mg, glab, n, 0.1f, 1.0f, &loss[1], &correct[1], err, sizeof(err)) < 0 ||
	    nn_backward(&mg, n, 0.0f, err, sizeof(err)) < 0) {
		fail("%s on %s: %s", what, t->name, err);
		goto out;
	}
	cmp_dev(t, what, "train logits", lg, lc, nl, tol);
	is_double(loss[1], loss[0], tol * fabs(loss[0]), "%s %s: loss %.6f vs %.6f", t->name, what,
		  loss[1], loss[0]);
	cmp_dev(t, what, "every gradient", mg.grads, mc.grads, mc.param_total, tol);
	if (mc.state_total)
		cmp_dev(t, what, "BN running stats", mg.state, mc.state, mc.state_total, tol);
	nn_set_training(&mc, 0);
	nn_set_training(&mg, 0);
	if (nn_forward(&mc, x, n, &lc, err, sizeof(err)) < 0)
		bail_out("%s eval on cpu: %s", what, err);
	if (nn_forward(&mg, gx, n, &lg, err, sizeof(err)) < 0) {
		fail("%s eval on %s: %s", what, t->name, err);
		goto out;
	}
	cmp_dev(t, what, "eval logits", lg, lc, nl, tol);
out:
	dfree(t, gx), dfree(t, glab);
	nn_free(&mc);
	nn_free(&mg);
	free(x), free(lab);
}

/* ------------------------------------------------------------------------------------- */

static const struct be_conv_desc convs[] = {
    /* n  c   h   w   k  kh kw s  pad bias */
    {2, 3, 9, 11, 5, 3, 3, 1, 1, 1, 0, 0},     /* odd sizes, bias */
    {1, 5, 7, 7, 6, 3, 3, 2, 1, 0, 0, 0},      /* batch 1, stride 2 */
    {3, 8, 6, 6, 12, 1, 1, 1, 0, 0, 0, 0},     /* 1x1 */
    {2, 16, 8, 8, 8, 1, 1, 2, 0, 0, 0, 0},     /* 1x1/2 downsample */
    {2, 3, 23, 23, 8, 7, 7, 2, 3, 0, 0, 0},    /* 7x7/2 stem */
    {4, 17, 10, 10, 19, 3, 3, 1, 1, 0, 0, 0},  /* channels not multiple of 8 */
    {2, 32, 14, 14, 32, 3, 3, 1, 1, 0, 0, 0},  /* Winograd-friendly */
    {2, 64, 7, 7, 128, 3, 3, 2, 1, 0, 0, 0},   /* 3x3/2 widening */
    {2, 4, 5, 5, 3, 5, 5, 1, 0, 1, 0, 0},      /* kernel covers the input */
    {2, 16, 4, 4, 16, 1, 1, 1, 0, 1, 0, 0},    /* 1x1 with bias */
    {2, 64, 12, 12, 256, 1, 1, 1, 0, 0, 0, 0}, /* bottleneck expansion */
    {32, 64, 32, 32, 64, 3, 3, 1, 1, 0, 0, 0}, /* a real layer: big enough for FFT */
};

static void run_suite(struct t *t, int convs_only)
{
	static const struct be_bn_desc bns[] = {
	    {2, 3, 5, 7, 1e-5f, 0},  {2, 3, 5, 7, 1e-5f, 1},   {1, 16, 4, 4, 1e-5f, 1},
	    {8, 17, 3, 3, 1e-5f, 0}, {4, 32, 8, 8, 1e-3f, 1},  {3, 8, 1, 1, 1e-5f, 0},
	    {3, 64, 6, 5, 1e-5f, 0}, {16, 24, 2, 2, 1e-5f, 1}, {32, 64, 16, 16, 1e-5f, 1},
	};
	static const struct be_pool_desc pools[] = {
	    {BE_POOL_MAX, 2, 3, 9, 9, 3, 3, 2, 1, 0, 0},
	    {BE_POOL_MAX, 2, 3, 7, 7, 2, 2, 2, 0, 0, 0},
	    {BE_POOL_MAX, 1, 4, 16, 16, 3, 3, 1, 1, 0, 0},
	    {BE_POOL_MAX, 2, 17, 12, 10, 3, 3, 2, 1, 0, 0},
	    {BE_POOL_AVG, 2, 3, 8, 8, 2, 2, 2, 0, 0, 0},
	    {BE_POOL_AVG, 2, 5, 9, 7, 3, 3, 1, 1, 0, 0},
	    {BE_POOL_AVG, 1, 16, 7, 7, 7, 7, 1, 0, 0, 0},
	    {BE_POOL_AVG, 2, 3, 11, 11, 3, 3, 2, 1, 0, 0},
	};
	static const struct be_linear_desc lins[] = {
	    {1, 7, 3, 1}, {5, 64, 10, 1}, {8, 33, 17, 0}, {16, 512, 100, 1}, {256, 1000, 10, 1},
	};

	for (size_t i = 0; i < sizeof(convs) / sizeof(convs[0]); i++)
		test_conv(t, convs[i]);
	if (convs_only)
		return;
	for (size_t i = 0; i < sizeof(bns) / sizeof(bns[0]); i++)
		test_bn(t, bns[i]);
	for (size_t i = 0; i < sizeof(pools) / sizeof(pools[0]); i++)
		test_pool(t, pools[i], 0);
	/* Ties (ReLU outputs are full of zeros): both must pick the first maximum. */
	test_pool(t, pools[0], 3);
	test_pool(t, pools[3], 2);
	for (size_t i = 0; i < sizeof(lins) / sizeof(lins[0]); i++)
		test_linear(t, lins[i]);
	test_eltwise(t, 1);
	test_eltwise(t, 1000003);
	test_gap(t, 2, 3, 5);
	test_gap(t, 4, 64, 49);
	test_xent(t, 1, 10, 0.0f, 1.0f);
	test_xent(t, 16, 10, 0.1f, 1.0f);
	test_xent(t, 7, 1000, 0.1f, 0.25f);
	test_xent_known(t);
	test_errors(t);
	test_arena(t);
	test_model(t, "lenet", 1, 28, 28, 8, t->tf32 ? TOL_TF32_MODEL : TOL_LENET);
	test_model(t, "resnet18", 3, 32, 32, 4, t->tf32 ? TOL_TF32_MODEL : TOL_RESNET);
	test_async(t);
}

int main(void)
{
	char err[512] = "";
	int count = be_cuda_device_count(err, sizeof(err));

	if (count <= 0)
		plan_skip_all("no CUDA GPU visible: %s", err);

	struct chk_rng rng = {chk_seed()};
	struct backend *cpu = be_cpu_create(1, err, sizeof(err));
	if (!cpu)
		bail_out("be_cpu_create(1): %s", err);

	/* Deterministic first: the full suite, with bit-for-bit repeats. */
	setenv("DPTRAIN_CUDA_DETERMINISTIC", "1", 1);
	struct backend *det = be_cuda_create(0, NULL, err, sizeof(err));
	unsetenv("DPTRAIN_CUDA_DETERMINISTIC");
	if (!ok(det != NULL, "be_cuda_create(0) with DPTRAIN_CUDA_DETERMINISTIC=1: %s",
		det ? det->ops->name : err))
		bail_out("%s", err);
	ok(strcmp(det->ops->name, "cuda") == 0, "the backend is called cuda");
	diag("%d GPU(s) visible; comparing with the cpu backend (%s)", count, cpu->ops->name);
	struct t td = {cpu, det, &rng, "cuda (deterministic)", 1, 0};
	run_suite(&td, 0);
	det->ops->destroy(det);

	/* cuDNN's fastest algorithms, deterministic or not: the same results within tolerance. */
	struct backend *fast = be_cuda_create(0, NULL, err, sizeof(err));
	if (ok(fast != NULL, "be_cuda_create(0): %s", fast ? fast->ops->name : err)) {
		struct t tf = {cpu, fast, &rng, "cuda", 0, 0};
		run_suite(&tf, 1);
		fast->ops->destroy(fast);
	}

	/* TF32 tensor cores: the same suite within TF32's tolerances */
	struct be_cuda_opts to = {.tf32 = 1};
	struct backend *tf = be_cuda_create(0, &to, err, sizeof(err));
	if (ok(tf != NULL, "be_cuda_create(0, tf32): %s", tf ? tf->ops->name : err)) {
		struct t tt = {cpu, tf, &rng, "cuda (tf32)", 0, 1};
		run_suite(&tt, 0);
		tf->ops->destroy(tf);
	}

	struct backend *bad = be_cuda_create(count, NULL, err, sizeof(err));
	ok(bad == NULL, "be_cuda_create(%d) fails: one past the last GPU", count);
	like(err, "does not exist", "and says why: %s", err);
	if (bad)
		bad->ops->destroy(bad);
	cpu->ops->destroy(cpu);
	return done_testing();
}
