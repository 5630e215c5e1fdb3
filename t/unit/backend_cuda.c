/* backend_cuda.c — the CUDA backend checked op by op against the CPU backend on fresh random
 * inputs (forward, backward, beta = 1 accumulation onto a prefill, outputs poisoned with NaN
 * first), bit-for-bit repeats with DPTRAIN_CUDA_DETERMINISTIC=1, the same with TF32 within its
 * tolerances, fused BN+add+ReLU against the separate ops, whole small models, uploads and
 * markers; then its bf16 and fp16 activation modes against the reference backend on inputs
 * rounded to the type, in both activation layouts (NHWC, the default, and NCHW), bf16's own
 * batch norm kernels besides (a large-mean channel, repeats bit for bit), and the two
 * layouts against each other. Skips where no GPU is visible. Owns nothing outside its process. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/backend/backend.h"
#include "t/unit/backend_check.h"
#include "trainer/backend/backend_cuda.h"
#include "trainer/backend/backend_ref.h"
#include "trainer/nn/nn.h"
#include "t/lib/tap.h"

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
/* A model's whole gradient is ill-conditioned where its logits are not: a last-bit difference
 * moves a ReLU mask or a max-pool pick near a tie, each moving an O(1) share of a gradient, and
 * resnet18 at 32x32 and batch 4 runs its last BN over 4x4 pixels behind a global average pool,
 * whose backward cancels most of the gradient. Measured against the CPU backend with an
 * emulation of float32 rounding differences (the reference backend's ops for the GPU's; 24
 * seeds): logits and the last layer's gradient within 1.3e-6, resnet18's whole gradient
 * heavy-tailed, median 6e-4, largest 1.0e-2; lenet's within 5e-7. So the whole gradient gets its
 * own tolerance (see test_model; halving one residual branch's gradient gives 0.6). */
#define TOL_RESNET_GRAD 5e-2
/* With TF32 (be_cuda_opts.tf32) convolutions and matrix products round their inputs to 10
 * mantissa bits (relative 2^-11 each): about 1e-3 per sum, several times that at the worst
 * element and through a whole model. Whole gradients as above, emulated (operands rounded to 10
 * bits, 16 and 40 seeds): resnet18 0.09-0.11, lenet median 6e-3, heavy-tailed up to 0.13. */
#define TOL_TF32	     1e-2
#define TOL_TF32_MODEL	     5e-2
#define TOL_TF32_LENET_GRAD  3e-1
#define TOL_TF32_RESNET_GRAD 2.5e-1

struct t {
	struct backend *cpu, *gpu;
	struct chk_rng *rng;
	const char *name; /* of the GPU backend variant */
	int det;	  /* DPTRAIN_CUDA_DETERMINISTIC=1: results repeat bit for bit */
	int tf32;	  /* TF32 tensor cores: looser tolerances for convolutions and products */
	enum be_dtype dt; /* the GPU backend's activation type; cpu is the ref backend if half */
	int nhwc;	  /* half modes: the backend's acts are NHWC (DPTRAIN_CUDA_LAYOUT unset) */
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
		bail_out("%s alloc(%zu floats): %s", t->name, n, t->gpu->err.text);
	return p;
}

static float *up(struct t *t, const float *h, size_t n)
{
	float *p = dalloc(t, n);

	if (t->gpu->ops->from_host(t->gpu, p, h, sizeof(float) * n) < 0)
		bail_out("%s from_host(%zu floats): %s", t->name, n, t->gpu->err.text);
	return p;
}

static float *dpoison(struct t *t, size_t n)
{
	float *p = dalloc(t, n);

	if (t->gpu->ops->fill(t->gpu, p, NAN, n) < 0)
		bail_out("%s fill: %s", t->name, t->gpu->err.text);
	return p;
}

static float *down(struct t *t, const float *d, size_t n)
{
	float *h = chk_alloc(n);

	if (t->gpu->ops->to_host(t->gpu, h, d, sizeof(float) * n) < 0)
		bail_out("%s to_host(%zu floats): %s", t->name, n, t->gpu->err.text);
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

	ok(e <= tol, "%s %s %s: rel L2 err %.2e (tol %.2g, n=%zu)", t->name, what, part, e, tol, n);
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

/* Activations: float32 in the fp32 modes, else the half type (be->act_size bytes each). */

/* A buffer of n acts filled with 0xff bytes: NaN in float32, bfloat16 and half alike. */
static void *apoison(struct t *t, size_t n)
{
	size_t bytes = n * t->gpu->act_size;
	unsigned char *h = malloc(bytes ? bytes : 1);
	void *p = t->gpu->ops->alloc(t->gpu, bytes ? bytes : 1);

	if (!h || !p)
		bail_out("%s alloc(%zu acts): %s", t->name, n,
			 p ? "out of host memory" : t->gpu->err.text);
	memset(h, 0xff, bytes);
	if (t->gpu->ops->from_host(t->gpu, p, h, bytes) < 0)
		bail_out("%s from_host(%zu bytes): %s", t->name, bytes, t->gpu->err.text);
	free(h);
	return p;
}

/* Host float32 values into a new act buffer, through act_import where the backend has it (as
 * nn.c feeds input batches). Shapes are NCHW ([n][features] rows as n x f x 1 x 1). */
static void *aup(struct t *t, const float *x, int n, int c, int h, int w)
{
	size_t cnt = (size_t)n * c * h * w;
	float *f;
	void *a;

	if (!t->gpu->ops->act_import)
		return up(t, x, cnt);
	f = up(t, x, cnt);
	a = apoison(t, cnt);
	if (t->gpu->ops->act_import(t->gpu, f, a, n, c, h, w) < 0)
		bail_out("%s act_import(%zu values): %s", t->name, cnt, t->gpu->err.text);
	dfree(t, f);
	return a;
}

/* An act buffer to the host as float32 (act_export where the backend has it). */
static float *adown(struct t *t, const void *a, int n, int c, int h, int w)
{
	size_t cnt = (size_t)n * c * h * w;
	float *f, *hst;

	if (!t->gpu->ops->act_export)
		return down(t, a, cnt);
	f = dalloc(t, cnt);
	if (t->gpu->ops->act_export(t->gpu, a, f, n, c, h, w) < 0)
		bail_out("%s act_export(%zu values): %s", t->name, cnt, t->gpu->err.text);
	hst = down(t, f, cnt);
	dfree(t, f);
	return hst;
}

/* Two device buffers hold the same bytes. */
static void same_bytes(struct t *t, const char *what, const void *a, const void *b, size_t bytes)
{
	unsigned char *ha = malloc(bytes ? bytes : 1), *hb = malloc(bytes ? bytes : 1);

	if (!ha || !hb)
		bail_out("out of memory");
	if (t->gpu->ops->to_host(t->gpu, ha, a, bytes) < 0 ||
	    t->gpu->ops->to_host(t->gpu, hb, b, bytes) < 0)
		bail_out("%s to_host(%zu bytes): %s", t->name, bytes, t->gpu->err.text);
	ok(memcmp(ha, hb, bytes) == 0, "%s %s: bit for bit", t->name, what);
	free(ha), free(hb);
}

/* float -> bfloat16 or IEEE half -> float, to nearest even: the reference side of the half
 * modes' checks. Checked outside the test against CUDA's __float2bfloat16_rn and
 * __float2half_rn for all 2^32 floats. */
static float round_bf16(float x)
{
	uint32_t u;

	memcpy(&u, &x, sizeof(u));
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return x; /* NaN */
	u += 0x7fffu + ((u >> 16) & 1u);
	u &= 0xffff0000u;
	memcpy(&x, &u, sizeof(x));
	return x;
}

static float round_f16(float x)
{
	float a = fabsf(x), q;
	int e;

	if (a != a)
		return x;
	if (a >= 65520.0f) /* half-way to 2^16 rounds to even: past the largest half, 65504 */
		return copysignf(INFINITY, x);
	if (a < 0x1p-14f) {
		q = 0x1p-24f; /* subnormal halfs: one fixed step */
	} else {
		frexpf(a, &e); /* a = m 2^e, m in [0.5, 1), 11 significant bits */
		q = ldexpf(1.0f, e - 11);
	}
	return copysignf(nearbyintf(a / q) * q, x);
}

static float round_act(const struct t *t, float x)
{
	return t->dt == BE_BF16 ? round_bf16(x) : t->dt == BE_F16 ? round_f16(x) : x;
}

/* The spacing of the act type's values at |x| (bf16: 8 significant bits; fp16: 11, and 2^-24
 * below its normal range). */
static double act_ulp(const struct t *t, float x)
{
	int e;

	if (!(fabsf(x) > 0.0f) || !isfinite(x))
		return t->dt == BE_BF16 ? 0x1p-133 : 0x1p-24;
	frexpf(fabsf(x), &e);
	if (t->dt == BE_BF16)
		return ldexp(1.0, (e < -125 ? -125 : e) - 8);
	return ldexp(1.0, (e < -13 ? -13 : e) - 11);
}

static int same_float(float a, float b)
{
	return a == b ? signbit(a) == signbit(b) : (a != a && b != b);
}

/* got (act values) against the reference's float32 result rounded once to the act type: bit for
 * bit (ulps 0, where the reference computes in float, rounding as the kernel does), or within
 * one step of the type (ulps 1, where the reference rounds a double to float and then we round
 * again, the GPU once). */
static void cmp_round(struct t *t, const char *what, const char *part, const float *got,
		      const float *want, size_t n, int ulps)
{
	size_t bad = 0, first = 0;

	for (size_t i = 0; i < n; i++) {
		float w = round_act(t, want[i]);
		int good = same_float(got[i], w);
		if (!good && ulps)
			good = fabs((double)got[i] - w) <=
			       ulps * act_ulp(t, fabsf(w) > fabsf(got[i]) ? w : got[i]);
		if (!good && !bad++)
			first = i;
	}
	ok(bad == 0, "%s %s %s: %s the reference's result rounded to the type (n=%zu)", t->name,
	   what, part, ulps ? "within one step of" : "bit for bit", n);
	if (bad)
		diag("%zu differ; first at %zu: got %.9g, want %.9g (float32 %.9g)", bad, first,
		     got[first], round_act(t, want[first]), want[first]);
}

static int ran(struct t *t, struct backend *be, int rc, const char *what)
{
	if (rc == 0)
		return 1;
	fail("%s %s: %s failed: %s", t->name, what, be->ops->name, be->err.text);
	return 0;
}

static float *rnd(struct t *t, size_t n, float lo, float hi)
{
	float *x = chk_alloc(n);

	chk_random(t->rng, x, n, lo, hi);
	return x;
}

/* Random values already in the act type, so both sides compute on the same numbers. */
static float *hrnd(struct t *t, size_t n, float lo, float hi)
{
	float *x = rnd(t, n, lo, hi);

	for (size_t i = 0; i < n; i++)
		x[i] = round_act(t, x[i]);
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
		diag("cpu: %s; gpu: %s", oc ? "" : c->err.text, og ? "" : g->err.text);
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

static double act_tol(const struct t *t);

/* On the GPU, a fused BN+add(+ReLU) op gives the bits of BN, add and ReLU run as separate ops
 * (nn.c fuses them and must not change numbers by it): forward y, backward dx, and dz = the
 * masked dy. fy, fdx, fdz are the fused op's results for gx, gz, gdy (bz = 0). Compares raw act
 * bytes, so it holds in every activation type. Where the join is fused into the BN kernel, y is
 * rounded once where the separate ops round after each, and agrees within rounding only: bf16
 * (own kernels, both layouts) and fp16 NHWC (cuDNN's persistent kernels). dx stays bit for bit in
 * bf16 (its saved statistics and the masked gradient are the same bits either way), within
 * rounding in fp16 NHWC (its saved statistics come from another cuDNN kernel); dz, dy masked by
 * y, bit for bit everywhere: both backwards mask with the fused y. */
static void fused_vs_separate(struct t *t, const char *w, const struct be_bn_desc *d,
			      const void *gx, const void *gz, const float *ggm, const float *gbt,
			      const void *gdy, const void *fy, const void *fdx, const void *fdz)
{
	struct backend *g = t->gpu;
	struct be_bn_desc plain = *d;
	size_t nx = (size_t)d->n * d->c * d->h * d->w, nc = d->c, bytes = nx * g->act_size;
	struct be_op *op;
	float *sm = dpoison(t, nc), *si = dpoison(t, nc), *rm = dalloc(t, nc), *rv = dalloc(t, nc);
	float *dg = dpoison(t, nc), *db = dpoison(t, nc);
	void *bn = apoison(t, nx), *u = apoison(t, nx), *m = apoison(t, nx), *dx = apoison(t, nx);
	const void *gm;
	char r[240];

	plain.fuse_add = plain.fuse_relu = 0;
	op = g->ops->bn_create(g, &plain);
	gm = d->fuse_relu ? m : gdy; /* the gradient reaching BN; without ReLU it is dy */
	if (!ok(op && g->ops->fill(g, rm, 0.0f, nc) == 0 && g->ops->fill(g, rv, 1.0f, nc) == 0 &&
		    g->ops->bn_fwd_train(g, op, gx, NULL, ggm, gbt, bn, sm, si, rm, rv, 0.1f) ==
			0 &&
		    g->ops->add(g, bn, gz, u, nx) == 0 &&
		    (!d->fuse_relu || g->ops->relu_fwd(g, u, u, nx) == 0) &&
		    (!d->fuse_relu || g->ops->relu_bwd(g, fy, gdy, m, nx, 0.0f) == 0) &&
		    g->ops->bn_bwd(g, op, gx, bn, gm, ggm, sm, si, dx, NULL, 0.0f, dg, db, 0.0f) ==
			0,
		"%s %s vs separate ops: ran", t->name, w)) {
		diag("%s", g->err.text);
		goto out;
	}
	if (t->dt == BE_BF16 || (t->nhwc && t->dt == BE_F16)) {
		float *hu = adown(t, u, d->n, d->c, d->h, d->w);
		float *hf = adown(t, fy, d->n, d->c, d->h, d->w);
		cmp(t, w, "fused y vs separate ops", hf, hu, nx, act_tol(t));
		free(hu), free(hf);
	} else {
		snprintf(r, sizeof(r), "%s fused y", w);
		same_bytes(t, r, u, fy, bytes);
	}
	if (t->nhwc && t->dt == BE_F16) {
		float *hu = adown(t, dx, d->n, d->c, d->h, d->w);
		float *hf = adown(t, fdx, d->n, d->c, d->h, d->w);
		cmp(t, w, "fused dx vs separate ops", hf, hu, nx, act_tol(t));
		free(hu), free(hf);
	} else {
		snprintf(r, sizeof(r), "%s fused dx", w);
		same_bytes(t, r, dx, fdx, bytes);
	}
	snprintf(r, sizeof(r), "%s fused dz", w);
	same_bytes(t, r, gm, fdz, bytes);
out:
	if (op)
		g->ops->op_destroy(g, op);
	dfree(t, sm), dfree(t, si), dfree(t, rm), dfree(t, rv), dfree(t, dg), dfree(t, db);
	dfree(t, bn), dfree(t, u), dfree(t, m), dfree(t, dx);
}

/* With fuse_add, z is a random residual and dz z's gradient. Both backwards mask dy with the
 * GPU's forward output: an element of y within rounding of 0 may have the other sign on the CPU,
 * and one mask element flipped would move dx far past any tolerance. */
static void test_bn(struct t *t, struct be_bn_desc d)
{
	struct backend *c = t->cpu, *g = t->gpu;
	struct be_op *oc = c->ops->bn_create(c, &d), *og = g->ops->bn_create(g, &d);
	size_t nx = (size_t)d.n * d.c * d.h * d.w, nc = d.c;
	float momentum = 0.1f;
	char s[160], w[200], r[240];

	snprintf(w, sizeof(w), "bn(%s)", be_bn_str(&d, s, sizeof(s)));
	if (!ok(oc && og, "%s %s: created", t->name, w)) {
		diag("cpu: %s; gpu: %s", oc ? "" : c->err.text, og ? "" : g->err.text);
		goto out_ops;
	}
	/* Offset and scale per channel, so normalisation has something to undo. */
	float *x = rnd(t, nx, -1, 1), *dy = rnd(t, nx, -1, 1), *gm = rnd(t, nc, 0.5f, 1.5f);
	float *bt = rnd(t, nc, -0.5f, 0.5f), *rm = rnd(t, nc, -0.2f, 0.2f);
	float *rv = rnd(t, nc, 0.5f, 1.5f), *z = d.fuse_add ? rnd(t, nx, -1, 1) : NULL;
	for (size_t i = 0; i < nx; i++)
		x[i] = x[i] * (1.0f + (i / (d.h * d.w)) % d.c) + 0.5f * ((i / (d.h * d.w)) % d.c);
	float *gx = up(t, x, nx), *gdy = up(t, dy, nx), *ggm = up(t, gm, nc), *gbt = up(t, bt, nc);
	float *grm = up(t, rm, nc), *grv = up(t, rv, nc), *gz = z ? up(t, z, nx) : NULL;
	float *gy = dpoison(t, nx), *gye = dpoison(t, nx), *gsm = dpoison(t, nc);
	float *gsi = dpoison(t, nc), *gdx = dpoison(t, nx), *gdg = dpoison(t, nc);
	float *gdb = dpoison(t, nc), *gdz = z ? dpoison(t, nx) : NULL;
	float *y = chk_alloc(nx), *ye = chk_alloc(nx), *sm = chk_alloc(nc), *si = chk_alloc(nc);
	float *dx = chk_alloc(nx), *dg = chk_alloc(nc), *db = chk_alloc(nc);
	float *dz = z ? chk_alloc(nx) : NULL;
	float *hy = NULL, *hdx = NULL, *hdg = NULL, *hdb = NULL, *hdz = NULL;

	if (!ran(t, c, c->ops->bn_fwd_train(c, oc, x, z, gm, bt, y, sm, si, rm, rv, momentum), w) ||
	    !ran(t, g,
		 g->ops->bn_fwd_train(g, og, gx, gz, ggm, gbt, gy, gsm, gsi, grm, grv, momentum),
		 w))
		goto out;
	hy = down(t, gy, nx);
	if (!ran(t, c, c->ops->bn_bwd(c, oc, x, hy, dy, gm, sm, si, dx, dz, 0.0f, dg, db, 0.0f),
		 w) ||
	    !ran(t, c, c->ops->bn_fwd_infer(c, oc, x, z, gm, bt, rm, rv, ye), w) ||
	    !ran(t, g,
		 g->ops->bn_bwd(g, og, gx, gy, gdy, ggm, gsm, gsi, gdx, gdz, 0.0f, gdg, gdb, 0.0f),
		 w) ||
	    !ran(t, g, g->ops->bn_fwd_infer(g, og, gx, gz, ggm, gbt, grm, grv, gye), w))
		goto out;
	cmp(t, w, "train y", hy, y, nx, TOL_F32);
	cmp_dev(t, w, "save_mean", gsm, sm, nc, TOL_F32);
	cmp_dev(t, w, "save_invstd", gsi, si, nc, TOL_F32);
	cmp_dev(t, w, "running_mean", grm, rm, nc, TOL_F32);
	cmp_dev(t, w, "running_var (unbiased)", grv, rv, nc, TOL_F32);
	cmp_dev(t, w, "dx", gdx, dx, nx, TOL_F32);
	cmp_dev(t, w, "dgamma", gdg, dg, nc, TOL_F32);
	cmp_dev(t, w, "dbeta", gdb, db, nc, TOL_F32);
	cmp_dev(t, w, "eval y", gye, ye, nx, TOL_F32);
	hdx = down(t, gdx, nx), hdg = down(t, gdg, nc), hdb = down(t, gdb, nc);
	if (z) {
		hdz = down(t, gdz, nx);
		ok(memcmp(hdz, dz, nx * sizeof(float)) == 0,
		   "%s %s: dz (dy through the same ReLU mask) equals the CPU's bit for bit",
		   t->name, w);
	}

	/* dx NULL: the parameter gradients alone, the same ones (and the same dz). */
	float *g2 = dpoison(t, nc), *b2 = dpoison(t, nc), *z2 = z ? dpoison(t, nx) : NULL;
	if (ran(t, g,
		g->ops->bn_bwd(g, og, gx, gy, gdy, ggm, gsm, gsi, NULL, z2, 0.0f, g2, b2, 0.0f),
		w)) {
		snprintf(r, sizeof(r), "%s bwd without dx: dgamma", w);
		same_bits(t, r, g2, hdg, nc);
		snprintf(r, sizeof(r), "%s bwd without dx: dbeta", w);
		same_bits(t, r, b2, hdb, nc);
		if (z) {
			snprintf(r, sizeof(r), "%s bwd without dx: dz", w);
			same_bits(t, r, z2, hdz, nx);
		}
	}
	dfree(t, g2), dfree(t, b2), dfree(t, z2);

	/* dx in place of dy (an aliasing caller), then beta = 1 onto prefills. */
	float *gdy2 = up(t, dy, nx), *z3 = z ? dpoison(t, nx) : NULL;
	if (ran(t, g,
		g->ops->bn_bwd(g, og, gx, gy, gdy2, ggm, gsm, gsi, gdy2, z3, 0.0f, gdg, gdb, 0.0f),
		w)) {
		cmp_dev(t, w, "dx in place of dy", gdy2, hdx, nx, TOL_ELT);
		if (z) {
			snprintf(r, sizeof(r), "%s dx in place of dy: dz", w);
			same_bits(t, r, z3, hdz, nx);
		}
	}
	dfree(t, gdy2), dfree(t, z3);
	/* dz in place of dy: nn.c gives z's gradient the slot of y's when their lives meet here. */
	if (z) {
		float *gdy3 = up(t, dy, nx), *dx3 = dpoison(t, nx);
		if (ran(t, g,
			g->ops->bn_bwd(g, og, gx, gy, gdy3, ggm, gsm, gsi, dx3, gdy3, 0.0f, gdg,
				       gdb, 0.0f),
			w)) {
			snprintf(r, sizeof(r), "%s dz in place of dy: dz", w);
			same_bits(t, r, gdy3, hdz, nx);
			cmp_dev(t, w, "dz in place of dy: dx", dx3, hdx, nx, TOL_ELT);
		}
		dfree(t, gdy3), dfree(t, dx3);
	}
	float *pre = rnd(t, nx, -1, 1), *preg = rnd(t, nc, -1, 1), *preb = rnd(t, nc, -1, 1);
	float *prez = z ? rnd(t, nx, -1, 1) : NULL;
	float *ax = up(t, pre, nx), *ag = up(t, preg, nc), *ab = up(t, preb, nc);
	float *az = z ? up(t, prez, nx) : NULL;
	if (ran(t, g, g->ops->bn_bwd(g, og, gx, gy, gdy, ggm, gsm, gsi, ax, az, 1.0f, ag, ab, 1.0f),
		w)) {
		cmp_acc(t, w, "dx", ax, pre, hdx, 1.0f, nx);
		cmp_acc(t, w, "dgamma", ag, preg, hdg, 1.0f, nc);
		cmp_acc(t, w, "dbeta", ab, preb, hdb, 1.0f, nc);
		if (z)
			cmp_acc(t, w, "dz", az, prez, hdz, 1.0f, nx);
	}
	free(pre), free(preg), free(preb), free(prez);
	dfree(t, ax), dfree(t, ag), dfree(t, ab), dfree(t, az);
	if (z)
		fused_vs_separate(t, w, &d, gx, gz, ggm, gbt, gdy, gy, gdx, gdz);
out:
	free(x), free(dy), free(gm), free(bt), free(rm), free(rv), free(z), free(y), free(ye);
	free(sm), free(si), free(dx), free(dg), free(db), free(dz), free(hy), free(hdx), free(hdg);
	free(hdb), free(hdz);
	dfree(t, gx), dfree(t, gdy), dfree(t, ggm), dfree(t, gbt), dfree(t, grm), dfree(t, grv);
	dfree(t, gz), dfree(t, gy), dfree(t, gye), dfree(t, gsm), dfree(t, gsi), dfree(t, gdx);
	dfree(t, gdg), dfree(t, gdb), dfree(t, gdz);
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
		diag("cpu: %s; gpu: %s", oc ? "" : c->err.text, og ? "" : g->err.text);
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
		diag("cpu: %s; gpu: %s", oc ? "" : c->err.text, og ? "" : g->err.text);
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

/* input_u8 on the device against the CPU's: bytes in, the same floats out. */
static void test_input_u8(struct t *t, int n, int c, int h, int w)
{
	struct backend *cb = t->cpu, *g = t->gpu;
	size_t bytes = (size_t)n * c * h * w, words = (bytes + 3) / 4;
	float *raw = chk_alloc(words), *want = chk_alloc(bytes);
	uint8_t *src = (uint8_t *)raw;
	const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
	char what[64];

	for (size_t i = 0; i < bytes; i++)
		src[i] = (uint8_t)((i * 2654435761u) >> 13);
	snprintf(what, sizeof(what), "input_u8(n=%d c=%d h=%d w=%d)", n, c, h, w);
	float *gsrc = up(t, raw, words), *gdst = dpoison(t, bytes);
	cb->ops->input_u8(cb, src, want, n, c, h, w, mean, std);
	if (ran(t, g, g->ops->input_u8(g, (const uint8_t *)gsrc, gdst, n, c, h, w, mean, std),
		what)) {
		float *got = down(t, gdst, bytes);
		ok(memcmp(got, want, bytes * sizeof(float)) == 0, "%s %s: bit for bit", t->name,
		   what);
		free(got);
	}
	dfree(t, gsrc), dfree(t, gdst);
	free(raw), free(want);
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
		bail_out("%s: labels to the GPU: %s", t->name, g->err.text);
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
		fail("%s xent equal logits: %s", t->name, g->err.text);
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

/* NaN logits: the hits are the reference's (its l[j] > l[arg] from arg 0: a NaN is never the
 * argmax unless it is at index 0), though the loss is NaN. Row 0: a NaN below the maximum in
 * another thread's stride; row 1: a NaN at index 0; row 2: all NaN. 300 classes: more than a
 * block's threads. */
static void test_xent_nan(struct t *t)
{
	enum { N = 3, C = 300 };
	struct backend *c = t->cpu, *g = t->gpu;
	static float l[N * C];
	int32_t lab[N] = {257, 0, 0};
	int want = -1, got = -1;
	float loss[2], *gl;

	memset(l, 0, sizeof(l));
	l[1] = NAN, l[257] = 5.0f;
	l[C] = NAN, l[C + 20] = 7.0f;
	for (int j = 0; j < C; j++)
		l[2 * C + j] = NAN;
	gl = up(t, l, N * C);
	if (ran(t, c, c->ops->xent(c, l, lab, N, C, 0.0f, 1.0f, &loss[0], &want, NULL),
		"xent NaN") &&
	    ran(t, g, g->ops->xent(g, gl, lab, N, C, 0.0f, 1.0f, &loss[1], &got, NULL),
		"xent NaN")) {
		is_int(want, 3, "%s xent with NaN logits: the reference counts 3 hits", t->name);
		is_int(got, want, "%s xent with NaN logits: the same hits as the reference",
		       t->name);
	}
	dfree(t, gl);
}

/* ------------------------------------------------------------------------------------- */

/* Bad shapes and arguments: -1 or NULL with the reference's message. */
/* " bf16" or " fp16" as the backend appends to shapes in messages. */
static const char *dt_suffix(const struct t *t)
{
	if (t->dt == BE_F32)
		return "";
	if (t->dt == BE_BF16)
		return t->nhwc ? " bf16 nhwc" : " bf16";
	return t->nhwc ? " fp16 nhwc" : " fp16";
}

static void test_errors(struct t *t)
{
	struct backend *be = t->gpu;
	const char *bn = t->name;
	char want[200];
	struct be_conv_desc cd = {
	    .n = 8, .c = 3, .h = 2, .w = 2, .k = 4, .kh = 7, .kw = 7, .stride = 1};
	struct be_op *op = be->ops->conv_create(be, &cd);
	ok(op == NULL, "%s conv_create rejects a kernel larger than the input", bn);
	like(be->err.text, "conv_create(n=8 c=3 h=2 w=2 k=4 7x7/1 pad 0)",
	     "%s: message names the shape", bn);
	if (op)
		be->ops->op_destroy(be, op);

	struct be_conv_desc cb = {
	    .n = 1, .c = 1, .h = 3, .w = 3, .k = 1, .kh = 1, .kw = 1, .stride = 1, .has_bias = 1};
	float *cx = dpoison(t, 9), *cw = dpoison(t, 1), *cy = dpoison(t, 9);
	op = be->ops->conv_create(be, &cb);
	if (ok(op != NULL, "%s conv_create with bias", bn)) {
		ok(be->ops->conv_fwd(be, op, cx, cw, NULL, cy) == -1,
		   "%s conv_fwd refuses a NULL bias when the op has one", bn);
		snprintf(want, sizeof(want),
			 "conv_fwd(n=1 c=1 h=3 w=3 k=1 1x1/1 pad 0 bias%s): the op has a bias",
			 dt_suffix(t));
		like(be->err.text, want,
		     "%s: message names the op, its shape and type, and what is missing", bn);
		ok(be->ops->bn_fwd_infer(be, op, cx, NULL, cw, cw, cw, cw, cy) == -1,
		   "%s an op of another kind is refused", bn);
		like(be->err.text, "bn_fwd_infer: the op was not created by the matching",
		     "%s: says so", bn);
		be->ops->op_destroy(be, op);
	} else {
		diag("%s", be->err.text);
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
	like(be->err.text, "pool_create(max n=1 c=1 h=8 w=8 2x2/2 pad 2)",
	     "%s: message names the shape", bn);
	if (op)
		be->ops->op_destroy(be, op);
	pd.pad = 0;
	op = be->ops->pool_create(be, &pd);
	if (ok(op != NULL, "%s pool_create max 2x2/2", bn)) {
		float *px = dpoison(t, 64), *pdy = dpoison(t, 16), *pdx = dpoison(t, 64);
		ok(be->ops->pool_bwd(be, op, px, NULL, pdy, pdx, 0.0f) == -1,
		   "%s max pool_bwd without y fails", bn);
		like(be->err.text, "y is NULL", "%s: message says why: %s", bn, be->err.text);
		dfree(t, px), dfree(t, pdy), dfree(t, pdx);
		be->ops->op_destroy(be, op);
	} else {
		diag("%s", be->err.text);
	}

	struct be_bn_desc bd = {.n = 1, .c = 2, .h = 1, .w = 1, .eps = 1e-5f};
	float *b2 = dpoison(t, 2), *z2 = dpoison(t, 2), *y2 = dpoison(t, 2);
	op = be->ops->bn_create(be, &bd);
	if (ok(op != NULL, "%s bn_create n=1 h=w=1 (inference is fine)", bn)) {
		ok(be->ops->bn_fwd_train(be, op, b2, NULL, b2, b2, b2, b2, b2, b2, b2, 0.1f) == -1,
		   "%s bn_fwd_train with one value per channel fails", bn);
		like(be->err.text, "more than one value per channel", "%s: message says why", bn);
		ok(be->ops->bn_fwd_infer(be, op, b2, z2, b2, b2, b2, b2, y2) == -1,
		   "%s bn_fwd_infer refuses a residual the op does not add", bn);
		like(be->err.text, "without fuse_add", "%s: message says why: %s", bn,
		     be->err.text);
		be->ops->op_destroy(be, op);
	} else {
		diag("%s", be->err.text);
	}
	bd.fuse_add = 1;
	op = be->ops->bn_create(be, &bd);
	if (ok(op != NULL, "%s bn_create with fuse_add", bn)) {
		ok(be->ops->bn_fwd_infer(be, op, b2, NULL, b2, b2, b2, b2, y2) == -1,
		   "%s bn_fwd_infer with fuse_add and no residual fails", bn);
		like(be->err.text,
		     "bn_fwd_infer(n=1 c=2 h=1 w=1 eps=1e-05 +add): the op adds a residual",
		     "%s: message names the op, shape and what is missing: %s", bn, be->err.text);
		ok(be->ops->bn_bwd(be, op, b2, y2, z2, b2, b2, b2, NULL, NULL, 0.0f, b2, b2,
				   0.0f) == -1,
		   "%s bn_bwd with fuse_add and no dz fails", bn);
		like(be->err.text, "bn_bwd(n=1 c=2 h=1 w=1 eps=1e-05 +add): the op adds a residual",
		     "%s: message names the op and shape: %s", bn, be->err.text);
		ok(be->ops->bn_fwd_infer(be, op, b2, y2, b2, b2, b2, b2, y2) == -1,
		   "%s bn_fwd_infer refuses z == y (cuDNN writes y before adding z)", bn);
		like(be->err.text, "z must not be the output y", "%s: message says why: %s", bn,
		     be->err.text);
		be->ops->op_destroy(be, op);
	} else {
		diag("%s", be->err.text);
	}
	dfree(t, b2), dfree(t, z2), dfree(t, y2);
	if (be->ops->act_import) {
		float *f = dpoison(t, 4);
		void *a = apoison(t, 4);
		ok(be->ops->act_import(be, f, a, -1, 1, 2, 2) == -1,
		   "%s act_import refuses a negative size", bn);
		snprintf(want, sizeof(want), "act_import(n=-1 c=1 h=2 w=2%s): sizes", dt_suffix(t));
		like(be->err.text, want, "%s: message names the op, shape and type: %s", bn,
		     be->err.text);
		ok(be->ops->act_import(be, f, a, 0, 3, 2, 2) == 0 &&
		       be->ops->act_export(be, a, f, 0, 3, 2, 2) == 0,
		   "%s act_import and act_export of no values do nothing", bn);
		dfree(t, f), dfree(t, a);
	}

	float zeros[6] = {0}, loss;
	float *l = up(t, zeros, 6);
	int32_t lab[2] = {1, 3};
	int correct;
	ok(be->ops->xent(be, l, lab, 2, 3, 0.0f, 1.0f, &loss, &correct, NULL) == -1,
	   "%s xent rejects a label out of range", bn);
	like(be->err.text, "label 3 of sample 1", "%s: message names the sample", bn);
	dfree(t, l);

	struct be_linear_desc ld = {.n = 0, .in = 4, .out = 2};
	op = be->ops->linear_create(be, &ld);
	ok(op == NULL, "%s linear_create rejects n=0", bn);
	like(be->err.text, "linear_create(n=0 in=4 out=2)", "%s: message names the shape", bn);
	if (op)
		be->ops->op_destroy(be, op);

	ok(be->ops->sync(be) == 0, "%s sync after all that: %s", bn, be->err.text);
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
	like(g->err.text, "cudaMalloc", "%s: and names cudaMalloc: %s", t->name, g->err.text);
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
		h ? "" : g->err.text))
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
			diag("%s round %d: %s", t->name, round, g->err.text);
			break;
		}
		for (size_t k = 0; k < n; k++)
			if (back[k] != 2.0f * (float)(round * 1000003 + (int)k % 977)) {
				bad++;
				break;
			}
	}
	ok(bad == 0,
	   "%s upload + mark: 6 alternating uploads of %zu floats arrive before the "
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
 * weights and data: logits, loss and BN statistics within tol, the gradients within gtol. In the
 * half modes the input is rounded to the type first (the GPU's import is then exact; its weights
 * are rounded per op, part of the tolerance) and the logits come back through act_export. scale
 * multiplies the loss gradient on both sides, as loss scaling does (fp16 needs it to keep small
 * gradients out of its subnormals). */
static void test_model(struct t *t, const char *name, int c, int h, int w, int n, double tol,
		       double gtol, float scale)
{
	struct nn_spec spec = {.name = name, .c = c, .h = h, .w = w, .classes = 10};
	struct nn_model mc, mg;
	char what[96];
	struct dp_error err;
	size_t nx = (size_t)n * c * h * w, nl = (size_t)n * 10;
	float *x = t->dt == BE_F32 ? rnd(t, nx, -1, 1) : hrnd(t, nx, -1, 1), *lc, *lg, *hl, loss[2];
	int32_t *lab = malloc(sizeof(*lab) * n), *glab;
	int correct[2];
	uint64_t seed = chk_next(t->rng);

	snprintf(what, sizeof(what), "model %s %dx%dx%d batch %d", name, c, h, w, n);
	if (!lab)
		bail_out("out of memory");
	for (int i = 0; i < n; i++)
		lab[i] = (int32_t)(chk_next(t->rng) % 10);
	if (nn_build(&mc, t->cpu, &spec, &err) < 0 || nn_init_weights(&mc, seed, &err) < 0)
		bail_out("%s on cpu: %s", what, err.text);
	if (nn_build(&mg, t->gpu, &spec, &err) < 0 || nn_init_weights(&mg, seed, &err) < 0) {
		fail("%s on %s: %s", what, t->name, err.text);
		nn_free(&mg); /* safe twice: nn_build frees on failure and clears the model */
		nn_free(&mc);
		free(x), free(lab);
		return;
	}
	float *gx = up(t, x, nx);
	glab = t->gpu->ops->alloc(t->gpu, sizeof(*lab) * n);
	if (!glab || t->gpu->ops->from_host(t->gpu, glab, lab, sizeof(*lab) * n) < 0)
		bail_out("%s: labels to the GPU: %s", what, t->gpu->err.text);
	nn_set_training(&mc, 1);
	nn_set_training(&mg, 1);
	if (nn_forward(&mc, x, n, &lc, &err) < 0 ||
	    nn_loss(&mc, lab, n, 0.1f, scale, &loss[0], &correct[0], &err) < 0 ||
	    nn_backward(&mc, n, 0.0f, &err) < 0)
		bail_out("%s on cpu: %s", what, err.text);
	if (nn_forward(&mg, gx, n, &lg, &err) < 0 ||
	    nn_loss(&mg, glab, n, 0.1f, scale, &loss[1], &correct[1], &err) < 0 ||
	    nn_backward(&mg, n, 0.0f, &err) < 0) {
		fail("%s on %s: %s", what, t->name, err.text);
		goto out;
	}
	hl = adown(t, lg, n, 10, 1, 1);
	cmp(t, what, "train logits", hl, lc, nl, tol);
	free(hl);
	is_double(loss[1], loss[0], tol * fabs(loss[0]), "%s %s: loss %.6f vs %.6f", t->name, what,
		  loss[1], loss[0]);
	/* The last layer's parameters come first in the flat buffer (reverse execution order). Its
	 * gradient depends on the forward and the loss only, not on the backward's cancellations
	 * (see the half modes' tolerances), so it holds to tol in every mode. */
	size_t last = 0;
	int lnode = -1;
	for (int p = 0; p < mc.nparams; p++)
		if (mc.params[p].offset == 0)
			lnode = mc.params[p].node;
	for (int p = 0; p < mc.nparams; p++)
		if (mc.params[p].node == lnode && mc.params[p].offset + mc.params[p].count > last)
			last = mc.params[p].offset + mc.params[p].count;
	cmp_dev(t, what, "last layer's gradient", mg.grads, mc.grads, last, tol);
	cmp_dev(t, what, "every gradient", mg.grads, mc.grads, mc.param_total, gtol);
	if (mc.state_total)
		cmp_dev(t, what, "BN running stats", mg.state, mc.state, mc.state_total, tol);
	nn_set_training(&mc, 0);
	nn_set_training(&mg, 0);
	if (nn_forward(&mc, x, n, &lc, &err) < 0)
		bail_out("%s eval on cpu: %s", what, err.text);
	if (nn_forward(&mg, gx, n, &lg, &err) < 0) {
		fail("%s eval on %s: %s", what, t->name, err.text);
		goto out;
	}
	hl = adown(t, lg, n, 10, 1, 1);
	cmp(t, what, "eval logits", hl, lc, nl, tol);
	free(hl);
out:
	dfree(t, gx), dfree(t, glab);
	nn_free(&mc);
	nn_free(&mg);
	free(x), free(lab);
}

/* ------------------------------------------------------------------------------------- */
/* bf16 and fp16 activations against the reference backend (float32, double sums) on the same
 * inputs, rounded to the type first: the GPU gets them through act_import (exact then) and
 * gives its results back through act_export; outputs start as NaN. Parameters and their
 * gradients are float32 on both sides; conv and linear weights are rounded to the type too, so
 * the GPU's own cast of them is exact.
 *
 * Tolerances. Element-wise ops, pooling, global average pool and the residual join compute in
 * float as the reference does and round once: equal to the reference's result rounded to the
 * type, bit for bit; where the reference rounds a double to float (average pooling, global
 * average pool forward, cross-entropy's dlogits) the GPU rounds the double once, so within one
 * step of the type. Convolution, linear and batch norm outputs in the type are rounded once
 * from float32 sums: relative error up to 2^-9 (bf16, 8 significant bits) or 2^-12 (fp16, 11
 * bits) per element, a relative L2 error of about 1.1e-3 or 1.4e-4, plus cuDNN's algorithms
 * (Winograd and FFT transforms, tensor-core tiles): TOL_BF16 and TOL_FP16 leave about ten times
 * that. Conv weight gradients pass through the type (cuDNN writes them in it), linear ones do
 * not. Float32 results of half inputs (BN statistics, dgamma, dbeta, bias gradients, linear
 * weight gradients) differ from the reference by summation order only: TOL_HALF_F32. Whole
 * models add up every layer's rounding (the weights rounded per op too), forward and back. */
#define TOL_BF16     2e-2
#define TOL_FP16     5e-3
#define TOL_HALF_F32 1e-4
/* Whole models: logits, loss, BN statistics and the last layer's gradient within the first
 * tolerance, every gradient within the second. Measured with an exact host emulation of the half
 * modes (the reference's ops on bf16/fp16 storage, rounded where this backend rounds; 40 seeds
 * for lenet, 16 for resnet18), largest seen in bf16 and fp16: lenet logits 3.6e-3 and 4.4e-4,
 * last layer 5.1e-3 and 6.4e-4, every gradient 0.18 and 0.13; resnet18 logits 2.1e-2 and
 * 2.2e-3, loss 3.2e-3 and 2.6e-4 relative, BN statistics 6.3e-4 and 8.1e-5, last layer 1.7e-2
 * and 2.2e-3, every gradient 0.32 and 0.12. Whole gradients are that far off in either type
 * without any bug: rounding moves max-pool picks and ReLU masks near 0, each moving an O(1)
 * share of a gradient (lenet's error is heavy-tailed over seeds for that reason, and falls
 * only as the square root of the precision), and resnet18's last stage runs BN over 4x4 pixels
 * of 4 samples behind a global average pool, whose backward cancels most of the rounded
 * gradient. The gradient tolerances still catch halving one residual branch's gradient (0.63 in
 * bf16, 0.61 in fp16 on resnet18). */
#define TOL_BF16_LENET	     2e-2
#define TOL_BF16_LENET_GRAD  4e-1
#define TOL_BF16_RESNET	     6e-2
#define TOL_BF16_RESNET_GRAD 4.5e-1
#define TOL_FP16_LENET	     3e-3
#define TOL_FP16_LENET_GRAD  3e-1
#define TOL_FP16_RESNET	     1e-2
#define TOL_FP16_RESNET_GRAD 2.5e-1
#define FP16_MODEL_SCALE     128.0f /* loss scale for the fp16 model step (both sides) */

static double act_tol(const struct t *t)
{
	return t->dt == BE_BF16 ? TOL_BF16 : TOL_FP16;
}

/* got[i] = a[i] + b[i] in float32: what a beta = 1 blend onto prefill b must give, before the
 * rounding to the type. */
static float *sum_of(const float *a, const float *b, size_t n)
{
	float *s = chk_alloc(n);

	for (size_t i = 0; i < n; i++)
		s[i] = a[i] + b[i];
	return s;
}

/* The type: act_size and act_dtype, import and export exact for values the type holds,
 * import rounding others to nearest even, and the NaN poison the tests start outputs with. */
static void test_act_h(struct t *t)
{
	struct backend *g = t->gpu;
	size_t n = 4099;
	float *x = hrnd(t, n, -3, 3), *raw = rnd(t, n, -70000, 70000), *want = chk_alloc(n);
	float *fx, *back;
	void *a;
	int exact = 1;

	is_int((int)g->act_size, 2, "%s act_size is 2 bytes", t->name);
	is_int((int)g->act_dtype, (int)t->dt, "%s act_dtype is the one asked for", t->name);
	ok(g->ops->act_import && g->ops->act_export && g->ops->act_accum,
	   "%s has act_import, act_export and act_accum", t->name);
	/* zeros, the largest finite value, the smallest subnormal, infinities */
	x[0] = 0.0f, x[1] = -0.0f, x[2] = INFINITY, x[3] = -INFINITY;
	x[4] = t->dt == BE_BF16 ? 0x1.fep127f : 65504.0f;
	x[5] = t->dt == BE_BF16 ? 0x1p-133f : 0x1p-24f;
	x[6] = -x[5];
	back = adown(t, a = aup(t, x, 1, 1, 1, (int)n), 1, 1, 1, (int)n);
	for (size_t i = 0; i < n; i++)
		exact &= same_float(back[i], x[i]);
	ok(exact, "%s act_import then act_export gives back every value the type holds", t->name);
	free(back), dfree(t, a);

	raw[0] = 1e30f, raw[1] = -1e-30f, raw[2] = 1.00390625f, raw[3] = 65519.0f;
	raw[4] = 65520.0f; /* fp16: rounds to inf; bf16: to 65536 */
	for (size_t i = 0; i < n; i++)
		want[i] = raw[i];
	back = adown(t, a = aup(t, raw, 1, 1, 1, (int)n), 1, 1, 1, (int)n);
	cmp_round(t, "act_import", "of float32 values", back, want, n, 0);
	free(back), dfree(t, a);

	a = apoison(t, n);
	back = adown(t, a, 1, 1, 1, (int)n);
	exact = 1;
	for (size_t i = 0; i < n; i++)
		exact &= isnan(back[i]) != 0;
	ok(exact, "%s a poisoned buffer exports as NaN", t->name);
	free(back), dfree(t, a);

	/* a real shape: n c h w */
	fx = up(t, x, 2 * 3 * 5 * 7);
	a = apoison(t, 2 * 3 * 5 * 7);
	ok(g->ops->act_import(g, fx, a, 2, 3, 5, 7) == 0, "%s act_import 2x3x5x7", t->name);
	back = adown(t, a, 2, 3, 5, 7);
	ok(memcmp(back, x, 2 * 3 * 5 * 7 * sizeof(float)) == 0, "%s 2x3x5x7 round trip", t->name);
	free(back), dfree(t, a), dfree(t, fx);
	free(x), free(raw), free(want);
}

static void test_conv_h(struct t *t, struct be_conv_desc d)
{
	struct backend *r = t->cpu, *g = t->gpu;
	struct be_conv_desc dr = d, dg = d;
	struct be_op *orf = r->ops->conv_create(r, &dr), *og = g->ops->conv_create(g, &dg);
	char s[160], w[200];

	snprintf(w, sizeof(w), "conv(%s)", be_conv_str(&d, s, sizeof(s)));
	if (!ok(orf && og && dg.oh == dr.oh && dg.ow == dr.ow, "%s %s: created", t->name, w)) {
		diag("ref: %s; gpu: %s", orf ? "" : r->err.text, og ? "" : g->err.text);
		goto out_ops;
	}
	int oh = dr.oh, ow = dr.ow;
	size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * d.c * d.kh * d.kw;
	size_t ny = (size_t)d.n * d.k * oh * ow, nb = d.k;
	float *x = hrnd(t, nx, -1, 1), *wt = hrnd(t, nw, -0.5f, 0.5f), *b = rnd(t, nb, -1, 1);
	float *dy = hrnd(t, ny, -1, 1);
	float *y = chk_alloc(ny), *dx = chk_alloc(nx), *dw = chk_alloc(nw), *db = chk_alloc(nb);
	void *gx = aup(t, x, d.n, d.c, d.h, d.w), *gdy = aup(t, dy, d.n, d.k, oh, ow);
	void *gy = apoison(t, ny), *gdx = apoison(t, nx);
	float *gw = up(t, wt, nw), *gb = up(t, b, nb), *gdw = dpoison(t, nw), *gdb = dpoison(t, nb);
	float *hy = NULL, *hdx = NULL, *hdw = NULL, *hdb = NULL;

	if (!ran(t, r, r->ops->conv_fwd(r, orf, x, wt, d.has_bias ? b : NULL, y), w) ||
	    !ran(t, r, r->ops->conv_bwd_data(r, orf, dy, wt, dx, 0.0f), w) ||
	    !ran(t, r, r->ops->conv_bwd_weights(r, orf, x, dy, dw, d.has_bias ? db : NULL, 0.0f),
		 w) ||
	    !ran(t, g, g->ops->conv_fwd(g, og, gx, gw, d.has_bias ? gb : NULL, gy), w) ||
	    !ran(t, g, g->ops->conv_bwd_data(g, og, gdy, gw, gdx, 0.0f), w) ||
	    !ran(t, g, g->ops->conv_bwd_weights(g, og, gx, gdy, gdw, d.has_bias ? gdb : NULL, 0.0f),
		 w))
		goto out;
	hy = adown(t, gy, d.n, d.k, oh, ow), hdx = adown(t, gdx, d.n, d.c, d.h, d.w);
	hdw = down(t, gdw, nw), hdb = down(t, gdb, nb);
	cmp(t, w, "fwd y", hy, y, ny, act_tol(t));
	cmp(t, w, "bwd dx", hdx, dx, nx, act_tol(t));
	cmp(t, w, "bwd dw (through the type)", hdw, dw, nw, act_tol(t));
	if (d.has_bias)
		cmp(t, w, "bwd db", hdb, db, nb, TOL_HALF_F32);

	/* beta = 1 onto prefills: dx blended in float32 by cuDNN, rounded once; dw and db added
	 * in float32 to the same gradient (deterministic algorithms: the same bits as before). */
	float *pre = hrnd(t, nx, -1, 1), *prew = rnd(t, nw, -1, 1), *preb = rnd(t, nb, -1, 1);
	void *ax = aup(t, pre, d.n, d.c, d.h, d.w);
	float *aw = up(t, prew, nw), *ab = up(t, preb, nb);
	if (ran(t, g, g->ops->conv_bwd_data(g, og, gdy, gw, ax, 1.0f), w)) {
		float *h = adown(t, ax, d.n, d.c, d.h, d.w), *want = sum_of(hdx, pre, nx);
		cmp(t, w, "dx beta=1", h, want, nx, act_tol(t));
		free(h), free(want);
	}
	if (ran(t, g, g->ops->conv_bwd_weights(g, og, gx, gdy, aw, d.has_bias ? ab : NULL, 1.0f),
		w)) {
		if (t->det)
			cmp_acc(t, w, "dw", aw, prew, hdw, 1.0f, nw);
		if (d.has_bias)
			cmp_acc(t, w, "db", ab, preb, hdb, 1.0f, nb);
	}
	free(pre), free(prew), free(preb);
	dfree(t, ax), dfree(t, aw), dfree(t, ab);
out:
	free(x), free(wt), free(b), free(dy), free(y), free(dx), free(dw), free(db);
	free(hy), free(hdx), free(hdw), free(hdb);
	dfree(t, gx), dfree(t, gw), dfree(t, gb), dfree(t, gdy), dfree(t, gy), dfree(t, gdx);
	dfree(t, gdw), dfree(t, gdb);
out_ops:
	if (orf)
		r->ops->op_destroy(r, orf);
	if (og)
		g->ops->op_destroy(g, og);
}

/* The reference's backward masks dy with the GPU's y (see test_bn) and uses its own saved
 * statistics. In bf16 (own kernels) an absent or aliased dx, and dz in dy's slot, change no bit
 * of any output; the cuDNN paths take those through scratch and agree within rounding. */
static void test_bn_h(struct t *t, struct be_bn_desc d)
{
	struct backend *r = t->cpu, *g = t->gpu;
	struct be_op *orf = r->ops->bn_create(r, &d), *og = g->ops->bn_create(g, &d);
	size_t nx = (size_t)d.n * d.c * d.h * d.w, nc = d.c, bytes = nx * g->act_size;
	float momentum = 0.1f;
	int own = t->dt == BE_BF16;
	char s[160], w[200], q[240];

	snprintf(w, sizeof(w), "bn(%s)", be_bn_str(&d, s, sizeof(s)));
	if (!ok(orf && og, "%s %s: created", t->name, w)) {
		diag("ref: %s; gpu: %s", orf ? "" : r->err.text, og ? "" : g->err.text);
		goto out_ops;
	}
	float *x = rnd(t, nx, -1, 1), *dy = hrnd(t, nx, -1, 1), *gm = rnd(t, nc, 0.5f, 1.5f);
	float *bt = rnd(t, nc, -0.5f, 0.5f), *rm = rnd(t, nc, -0.2f, 0.2f);
	float *rv = rnd(t, nc, 0.5f, 1.5f), *z = d.fuse_add ? hrnd(t, nx, -1, 1) : NULL;
	for (size_t i = 0; i < nx; i++)
		x[i] = round_act(t, x[i] * (1.0f + (i / (d.h * d.w)) % d.c) +
					0.5f * ((i / (d.h * d.w)) % d.c));
	void *gx = aup(t, x, d.n, d.c, d.h, d.w), *gdy = aup(t, dy, d.n, d.c, d.h, d.w);
	void *gz = z ? aup(t, z, d.n, d.c, d.h, d.w) : NULL;
	void *gy = apoison(t, nx), *gye = apoison(t, nx), *gdx = apoison(t, nx);
	void *gdz = z ? apoison(t, nx) : NULL;
	float *ggm = up(t, gm, nc), *gbt = up(t, bt, nc), *grm = up(t, rm, nc),
	      *grv = up(t, rv, nc);
	float *gsm = dpoison(t, nc), *gsi = dpoison(t, nc), *gdg = dpoison(t, nc);
	float *gdb = dpoison(t, nc);
	float *y = chk_alloc(nx), *ye = chk_alloc(nx), *sm = chk_alloc(nc), *si = chk_alloc(nc);
	float *dx = chk_alloc(nx), *dg = chk_alloc(nc), *db = chk_alloc(nc);
	float *dz = z ? chk_alloc(nx) : NULL;
	float *hy = NULL, *hdx = NULL, *hdz = NULL, *hdg = NULL, *hdb = NULL, *hye = NULL;

	if (!ran(t, r, r->ops->bn_fwd_train(r, orf, x, z, gm, bt, y, sm, si, rm, rv, momentum),
		 w) ||
	    !ran(t, g,
		 g->ops->bn_fwd_train(g, og, gx, gz, ggm, gbt, gy, gsm, gsi, grm, grv, momentum),
		 w))
		goto out;
	hy = adown(t, gy, d.n, d.c, d.h, d.w);
	if (!ran(t, r, r->ops->bn_bwd(r, orf, x, hy, dy, gm, sm, si, dx, dz, 0.0f, dg, db, 0.0f),
		 w) ||
	    !ran(t, r, r->ops->bn_fwd_infer(r, orf, x, z, gm, bt, rm, rv, ye), w) ||
	    !ran(t, g,
		 g->ops->bn_bwd(g, og, gx, gy, gdy, ggm, gsm, gsi, gdx, gdz, 0.0f, gdg, gdb, 0.0f),
		 w) ||
	    !ran(t, g, g->ops->bn_fwd_infer(g, og, gx, gz, ggm, gbt, grm, grv, gye), w))
		goto out;
	diag("%s %s: trains with %s", t->name, w, be_cuda_bn_plan(g, og));
	cmp(t, w, "train y", hy, y, nx, act_tol(t));
	cmp_dev(t, w, "save_mean", gsm, sm, nc, TOL_HALF_F32);
	cmp_dev(t, w, "save_invstd", gsi, si, nc, TOL_HALF_F32);
	cmp_dev(t, w, "running_mean", grm, rm, nc, TOL_HALF_F32);
	cmp_dev(t, w, "running_var (unbiased)", grv, rv, nc, TOL_HALF_F32);
	hdx = adown(t, gdx, d.n, d.c, d.h, d.w), hdg = down(t, gdg, nc), hdb = down(t, gdb, nc);
	cmp(t, w, "dx", hdx, dx, nx, act_tol(t));
	cmp(t, w, "dgamma", hdg, dg, nc, TOL_HALF_F32);
	cmp(t, w, "dbeta", hdb, db, nc, TOL_HALF_F32);
	hye = adown(t, gye, d.n, d.c, d.h, d.w);
	cmp(t, w, "eval y", hye, ye, nx, act_tol(t));
	if (z) {
		hdz = adown(t, gdz, d.n, d.c, d.h, d.w);
		cmp_round(t, w, "dz", hdz, dz, nx, 0);
	}

	/* beta = 1 (and bz = 1) onto prefills */
	float *pre = hrnd(t, nx, -1, 1), *preg = rnd(t, nc, -1, 1), *preb = rnd(t, nc, -1, 1);
	float *prez = z ? hrnd(t, nx, -1, 1) : NULL;
	void *ax = aup(t, pre, d.n, d.c, d.h, d.w),
	     *az = z ? aup(t, prez, d.n, d.c, d.h, d.w) : NULL;
	float *ag = up(t, preg, nc), *ab = up(t, preb, nc);
	if (ran(t, g, g->ops->bn_bwd(g, og, gx, gy, gdy, ggm, gsm, gsi, ax, az, 1.0f, ag, ab, 1.0f),
		w)) {
		float *h = adown(t, ax, d.n, d.c, d.h, d.w), *want = sum_of(hdx, pre, nx);
		cmp(t, w, "dx beta=1", h, want, nx, act_tol(t));
		free(h), free(want);
		cmp_acc(t, w, "dgamma", ag, preg, hdg, 1.0f, nc);
		cmp_acc(t, w, "dbeta", ab, preb, hdb, 1.0f, nc);
		if (z) {
			h = adown(t, az, d.n, d.c, d.h, d.w), want = sum_of(hdz, prez, nx);
			cmp_round(t, w, "dz bz=1", h, want, nx, 0);
			free(h), free(want);
		}
	}
	free(pre), free(preg), free(preb), free(prez);
	dfree(t, ax), dfree(t, az), dfree(t, ag), dfree(t, ab);
	/* dx in place of dy */
	void *gdy2 = aup(t, dy, d.n, d.c, d.h, d.w), *z3 = z ? apoison(t, nx) : NULL;
	if (ran(t, g,
		g->ops->bn_bwd(g, og, gx, gy, gdy2, ggm, gsm, gsi, gdy2, z3, 0.0f, gdg, gdb, 0.0f),
		w)) {
		float *h = adown(t, gdy2, d.n, d.c, d.h, d.w);
		cmp(t, w, "dx in place of dy", h, hdx, nx, act_tol(t));
		free(h);
		snprintf(q, sizeof(q), "%s dx in place of dy", w);
		if (own)
			same_bytes(t, q, gdy2, gdx, bytes);
	}
	dfree(t, gdy2), dfree(t, z3);
	/* dx NULL: the parameter gradients alone, the same ones (and the same dz) */
	float *g2 = dpoison(t, nc), *b2 = dpoison(t, nc);
	void *z2 = z ? apoison(t, nx) : NULL;
	if (ran(t, g,
		g->ops->bn_bwd(g, og, gx, gy, gdy, ggm, gsm, gsi, NULL, z2, 0.0f, g2, b2, 0.0f),
		w)) {
		if (own) {
			snprintf(q, sizeof(q), "%s bwd without dx: dgamma", w);
			same_bits(t, q, g2, hdg, nc);
			snprintf(q, sizeof(q), "%s bwd without dx: dbeta", w);
			same_bits(t, q, b2, hdb, nc);
		} else {
			cmp_dev(t, w, "bwd without dx: dgamma", g2, hdg, nc, TOL_HALF_F32);
			cmp_dev(t, w, "bwd without dx: dbeta", b2, hdb, nc, TOL_HALF_F32);
		}
		if (z) {
			snprintf(q, sizeof(q), "%s bwd without dx: dz", w);
			same_bytes(t, q, z2, gdz, bytes);
		}
	}
	dfree(t, g2), dfree(t, b2), dfree(t, z2);
	/* dx in place of x */
	void *gx2 = aup(t, x, d.n, d.c, d.h, d.w), *z4 = z ? apoison(t, nx) : NULL;
	if (ran(t, g,
		g->ops->bn_bwd(g, og, gx2, gy, gdy, ggm, gsm, gsi, gx2, z4, 0.0f, gdg, gdb, 0.0f),
		w)) {
		float *h = adown(t, gx2, d.n, d.c, d.h, d.w);
		cmp(t, w, "dx in place of x", h, hdx, nx, act_tol(t));
		free(h);
		snprintf(q, sizeof(q), "%s dx in place of x", w);
		if (own)
			same_bytes(t, q, gx2, gdx, bytes);
	}
	dfree(t, gx2), dfree(t, z4);
	/* dz in place of dy: nn.c gives z's gradient the slot of y's when their lives meet here */
	if (z) {
		void *gdy3 = aup(t, dy, d.n, d.c, d.h, d.w), *dx3 = apoison(t, nx);
		if (ran(t, g,
			g->ops->bn_bwd(g, og, gx, gy, gdy3, ggm, gsm, gsi, dx3, gdy3, 0.0f, gdg,
				       gdb, 0.0f),
			w)) {
			snprintf(q, sizeof(q), "%s dz in place of dy: dz", w);
			same_bytes(t, q, gdy3, gdz, bytes);
			float *h = adown(t, dx3, d.n, d.c, d.h, d.w);
			cmp(t, w, "dz in place of dy: dx", h, hdx, nx, act_tol(t));
			free(h);
			snprintf(q, sizeof(q), "%s dz in place of dy: dx", w);
			if (own)
				same_bytes(t, q, dx3, gdx, bytes);
		}
		dfree(t, gdy3), dfree(t, dx3);
	}
	if (z)
		fused_vs_separate(t, w, &d, gx, gz, ggm, gbt, gdy, gy, gdx, gdz);
out:
	free(x), free(dy), free(gm), free(bt), free(rm), free(rv), free(z), free(y), free(ye);
	free(sm), free(si), free(dx), free(dg), free(db), free(dz), free(hy), free(hdx), free(hdz);
	free(hdg), free(hdb), free(hye);
	dfree(t, gx), dfree(t, gdy), dfree(t, gz), dfree(t, gy), dfree(t, gye), dfree(t, gdx);
	dfree(t, gdz), dfree(t, ggm), dfree(t, gbt), dfree(t, grm), dfree(t, grv), dfree(t, gsm);
	dfree(t, gsi), dfree(t, gdg), dfree(t, gdb);
out_ops:
	if (orf)
		r->ops->op_destroy(r, orf);
	if (og)
		g->ops->op_destroy(g, og);
}

/* bf16's own batch norm kernels (cuda_bn.cu): the statistics of a channel `big` (-1: none)
 * whose mean is large against its spread, 1000 + U(-8, 8): with m = 13653 values a float32
 * E[x^2] - mean^2 gives a variance off by a factor of two or more (measured in a host emulation)
 * where the kernels' double sums agree with the reference's two passes to float32 rounding; and
 * two identical training steps (forward and backward) give the same bits, which
 * device.deterministic and the bit-exact resume test rely on. */
static void test_bn_h_own(struct t *t, struct be_bn_desc d, int big)
{
	struct backend *r = t->cpu, *g = t->gpu;
	struct be_op *orf = r->ops->bn_create(r, &d), *og = g->ops->bn_create(g, &d);
	size_t nx = (size_t)d.n * d.c * d.h * d.w, nc = d.c, hw = (size_t)d.h * d.w;
	size_t bytes = nx * g->act_size;
	float momentum = 0.1f;
	char s[160], w[200], q[300];
	void *gy[2] = {NULL, NULL}, *gdx[2] = {NULL, NULL}, *gdz[2] = {NULL, NULL};
	float *gsm[2] = {NULL, NULL}, *gsi[2] = {NULL, NULL}, *grm[2] = {NULL, NULL};
	float *grv[2] = {NULL, NULL}, *gdg[2] = {NULL, NULL}, *gdb[2] = {NULL, NULL};

	snprintf(w, sizeof(w), "bn(%s)%s", be_bn_str(&d, s, sizeof(s)),
		 big >= 0 ? " with a large-mean channel" : "");
	if (!ok(orf && og, "%s %s: created", t->name, w)) {
		diag("ref: %s; gpu: %s", orf ? "" : r->err.text, og ? "" : g->err.text);
		goto out_ops;
	}
	float *x = rnd(t, nx, -1, 1), *dy = hrnd(t, nx, -1, 1), *gm = rnd(t, nc, 0.5f, 1.5f);
	float *bt = rnd(t, nc, -0.5f, 0.5f), *rm = rnd(t, nc, -0.2f, 0.2f);
	float *rv = rnd(t, nc, 0.5f, 1.5f), *z = d.fuse_add ? hrnd(t, nx, -1, 1) : NULL;
	for (size_t i = 0; i < nx; i++) {
		int c = (int)(i / hw % nc);
		x[i] = round_act(t, c == big ? 1000.0f + 8.0f * x[i]
					     : x[i] * (1.0f + c % 5) + 0.5f * (c % 7));
	}
	void *gx = aup(t, x, d.n, d.c, d.h, d.w), *gdy = aup(t, dy, d.n, d.c, d.h, d.w);
	void *gz = z ? aup(t, z, d.n, d.c, d.h, d.w) : NULL;
	float *ggm = up(t, gm, nc), *gbt = up(t, bt, nc);
	for (int k = 0; k < 2; k++) {
		gy[k] = apoison(t, nx), gdx[k] = apoison(t, nx), gdz[k] = z ? apoison(t, nx) : NULL;
		gsm[k] = dpoison(t, nc), gsi[k] = dpoison(t, nc), grm[k] = up(t, rm, nc);
		grv[k] = up(t, rv, nc), gdg[k] = dpoison(t, nc), gdb[k] = dpoison(t, nc);
	}
	float *y = chk_alloc(nx), *sm = chk_alloc(nc), *si = chk_alloc(nc), *dx = chk_alloc(nx);
	float *dg = chk_alloc(nc), *db = chk_alloc(nc), *dz = z ? chk_alloc(nx) : NULL;
	float *hy = NULL, *hdx = NULL, *hsm = NULL, *hsi = NULL, *hrv = NULL;

	for (int k = 0; k < 2; k++)
		if (!ran(t, g,
			 g->ops->bn_fwd_train(g, og, gx, gz, ggm, gbt, gy[k], gsm[k], gsi[k],
					      grm[k], grv[k], momentum),
			 w) ||
		    !ran(t, g,
			 g->ops->bn_bwd(g, og, gx, gy[k], gdy, ggm, gsm[k], gsi[k], gdx[k], gdz[k],
					0.0f, gdg[k], gdb[k], 0.0f),
			 w))
			goto out;
	hy = adown(t, gy[0], d.n, d.c, d.h, d.w);
	if (!ran(t, r, r->ops->bn_fwd_train(r, orf, x, z, gm, bt, y, sm, si, rm, rv, momentum),
		 w) ||
	    !ran(t, r, r->ops->bn_bwd(r, orf, x, hy, dy, gm, sm, si, dx, dz, 0.0f, dg, db, 0.0f),
		 w))
		goto out;
	cmp(t, w, "train y", hy, y, nx, act_tol(t));
	cmp_dev(t, w, "save_mean", gsm[0], sm, nc, TOL_HALF_F32);
	cmp_dev(t, w, "save_invstd", gsi[0], si, nc, TOL_HALF_F32);
	cmp_dev(t, w, "running_mean", grm[0], rm, nc, TOL_HALF_F32);
	cmp_dev(t, w, "running_var (unbiased)", grv[0], rv, nc, TOL_HALF_F32);
	hdx = adown(t, gdx[0], d.n, d.c, d.h, d.w);
	cmp(t, w, "dx", hdx, dx, nx, act_tol(t));
	cmp_dev(t, w, "dgamma", gdg[0], dg, nc, TOL_HALF_F32);
	cmp_dev(t, w, "dbeta", gdb[0], db, nc, TOL_HALF_F32);
	if (big >= 0) {
		/* that channel alone: the L2 errors above are dominated by the others */
		hsm = down(t, gsm[0], nc), hsi = down(t, gsi[0], nc), hrv = down(t, grv[0], nc);
		ok(fabs((double)hsm[big] - sm[big]) <= 1e-6 * fabs(sm[big]) &&
		       fabs((double)hsi[big] - si[big]) <= 1e-5 * si[big] &&
		       fabs((double)hrv[big] - rv[big]) <= 1e-5 * rv[big],
		   "%s %s: channel %d: mean %.9g (reference %.9g), inverse std %.9g (%.9g), "
		   "running var %.9g (%.9g)",
		   t->name, w, big, hsm[big], sm[big], hsi[big], si[big], hrv[big], rv[big]);
	}
	/* the second step: every output the same bits as the first */
	snprintf(q, sizeof(q), "%s y repeats bit for bit", w);
	same_bytes(t, q, gy[0], gy[1], bytes);
	snprintf(q, sizeof(q), "%s save_mean repeats bit for bit", w);
	same_bytes(t, q, gsm[0], gsm[1], nc * sizeof(float));
	snprintf(q, sizeof(q), "%s save_invstd repeats bit for bit", w);
	same_bytes(t, q, gsi[0], gsi[1], nc * sizeof(float));
	snprintf(q, sizeof(q), "%s running_mean and running_var repeat bit for bit", w);
	same_bytes(t, q, grm[0], grm[1], nc * sizeof(float));
	same_bytes(t, q, grv[0], grv[1], nc * sizeof(float));
	snprintf(q, sizeof(q), "%s dx repeats bit for bit", w);
	same_bytes(t, q, gdx[0], gdx[1], bytes);
	snprintf(q, sizeof(q), "%s dgamma and dbeta repeat bit for bit", w);
	same_bytes(t, q, gdg[0], gdg[1], nc * sizeof(float));
	same_bytes(t, q, gdb[0], gdb[1], nc * sizeof(float));
	if (z) {
		snprintf(q, sizeof(q), "%s dz repeats bit for bit", w);
		same_bytes(t, q, gdz[0], gdz[1], bytes);
	}
	/* With a ReLU the vector kernels' training forward keeps the mask as bits for the backward
	 * given its y: an inference forward into that same y afterwards must make the backward read
	 * y again (the stale bits would mask with the training forward's signs). */
	if (d.fuse_relu) {
		float *iy = NULL, *idx = NULL;
		if (!ran(t, g,
			 g->ops->bn_fwd_train(g, og, gx, gz, ggm, gbt, gy[1], gsm[1], gsi[1],
					      grm[1], grv[1], momentum),
			 w) ||
		    !ran(t, g, g->ops->bn_fwd_infer(g, og, gx, gz, ggm, gbt, grm[1], grv[1], gy[1]),
			 w) ||
		    !ran(t, g,
			 g->ops->bn_bwd(g, og, gx, gy[1], gdy, ggm, gsm[0], gsi[0], gdx[1], gdz[1],
					0.0f, gdg[1], gdb[1], 0.0f),
			 w))
			goto out;
		iy = adown(t, gy[1], d.n, d.c, d.h, d.w);
		if (ran(t, r,
			r->ops->bn_bwd(r, orf, x, iy, dy, gm, sm, si, dx, dz, 0.0f, dg, db, 0.0f),
			w)) {
			idx = adown(t, gdx[1], d.n, d.c, d.h, d.w);
			cmp(t, w, "dx masked by an inference forward's y over the training one's",
			    idx, dx, nx, act_tol(t));
		}
		free(iy), free(idx);
	}
out:
	free(x), free(dy), free(gm), free(bt), free(rm), free(rv), free(z), free(y), free(sm);
	free(si), free(dx), free(dg), free(db), free(dz), free(hy), free(hdx), free(hsm), free(hsi);
	free(hrv);
	dfree(t, gx), dfree(t, gdy), dfree(t, gz), dfree(t, ggm), dfree(t, gbt);
	for (int k = 0; k < 2; k++) {
		dfree(t, gy[k]), dfree(t, gdx[k]), dfree(t, gdz[k]), dfree(t, gsm[k]);
		dfree(t, gsi[k]), dfree(t, grm[k]), dfree(t, grv[k]), dfree(t, gdg[k]);
		dfree(t, gdb[k]);
	}
out_ops:
	if (orf)
		r->ops->op_destroy(r, orf);
	if (og)
		g->ops->op_destroy(g, og);
}

static void test_pool_h(struct t *t, struct be_pool_desc d, int levels)
{
	struct backend *r = t->cpu, *g = t->gpu;
	struct be_pool_desc dr = d, dg = d;
	struct be_op *orf = r->ops->pool_create(r, &dr), *og = g->ops->pool_create(g, &dg);
	char s[160], w[200];

	snprintf(w, sizeof(w), "pool(%s)%s", be_pool_str(&d, s, sizeof(s)),
		 levels ? " with ties" : "");
	if (!ok(orf && og && dr.oh == dg.oh && dr.ow == dg.ow, "%s %s: created", t->name, w)) {
		diag("ref: %s; gpu: %s", orf ? "" : r->err.text, og ? "" : g->err.text);
		goto out_ops;
	}
	size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * dr.oh * dr.ow;
	float *x = hrnd(t, nx, -1, 1), *dy = hrnd(t, ny, -1, 1), *y = chk_alloc(ny);
	float *dx = chk_alloc(nx), *pre = hrnd(t, nx, -1, 1), *acc = chk_copy(pre, nx);
	if (levels)
		for (size_t i = 0; i < nx; i++)
			x[i] = floorf((x[i] + 1.0f) * 0.5f * levels);
	void *gx = aup(t, x, d.n, d.c, d.h, d.w), *gdy = aup(t, dy, d.n, d.c, dr.oh, dr.ow);
	void *gy = apoison(t, ny), *gdx = apoison(t, nx), *gacc = aup(t, pre, d.n, d.c, d.h, d.w);
	if (ran(t, r, r->ops->pool_fwd(r, orf, x, y), w) &&
	    ran(t, r, r->ops->pool_bwd(r, orf, x, y, dy, dx, 0.0f), w) &&
	    ran(t, r, r->ops->pool_bwd(r, orf, x, y, dy, acc, 1.0f), w) &&
	    ran(t, g, g->ops->pool_fwd(g, og, gx, gy), w) &&
	    ran(t, g, g->ops->pool_bwd(g, og, gx, gy, gdy, gdx, 0.0f), w) &&
	    ran(t, g, g->ops->pool_bwd(g, og, gx, gy, gdy, gacc, 1.0f), w)) {
		float *hy = adown(t, gy, d.n, d.c, dr.oh, dr.ow);
		float *hdx = adown(t, gdx, d.n, d.c, d.h, d.w);
		float *hacc = adown(t, gacc, d.n, d.c, d.h, d.w);
		cmp_round(t, w, "fwd y", hy, y, ny, d.kind == BE_POOL_AVG);
		cmp_round(t, w, "bwd dx", hdx, dx, nx, 0);
		cmp_round(t, w, "bwd dx beta=1", hacc, acc, nx, 0);
		free(hy), free(hdx), free(hacc);
	}
	free(x), free(dy), free(y), free(dx), free(pre), free(acc);
	dfree(t, gx), dfree(t, gdy), dfree(t, gy), dfree(t, gdx), dfree(t, gacc);
out_ops:
	if (orf)
		r->ops->op_destroy(r, orf);
	if (og)
		g->ops->op_destroy(g, og);
}

/* An input flattened from c x h x w (d.c set) is imported as that 4-D act, as nn.c's flattened
 * conv or pool output arrives: in NHWC its features come in (h, w, c) order, the weights' in
 * (c, h, w), and the results must still be the reference's. */
static void test_linear_h(struct t *t, struct be_linear_desc d)
{
	struct backend *r = t->cpu, *g = t->gpu;
	struct be_op *orf = r->ops->linear_create(r, &d), *og = g->ops->linear_create(g, &d);
	size_t nx = (size_t)d.n * d.in, nw = (size_t)d.out * d.in, ny = (size_t)d.n * d.out;
	size_t nb = d.out;
	int xc = d.c ? d.c : d.in, xh = d.c ? d.h : 1, xw = d.c ? d.w : 1; /* the input's shape */
	char s[160], w[200];

	snprintf(w, sizeof(w), "linear(%s)", be_linear_str(&d, s, sizeof(s)));
	if (!ok(orf && og, "%s %s: created", t->name, w)) {
		diag("ref: %s; gpu: %s", orf ? "" : r->err.text, og ? "" : g->err.text);
		goto out_ops;
	}
	float *x = hrnd(t, nx, -1, 1), *wt = hrnd(t, nw, -0.5f, 0.5f), *b = rnd(t, nb, -1, 1);
	float *dy = hrnd(t, ny, -1, 1), *y = chk_alloc(ny), *dx = chk_alloc(nx);
	float *dw = chk_alloc(nw), *db = chk_alloc(nb);
	void *gx = aup(t, x, d.n, xc, xh, xw), *gdy = aup(t, dy, d.n, d.out, 1, 1);
	void *gy = apoison(t, ny), *gdx = apoison(t, nx);
	float *gw = up(t, wt, nw), *gb = up(t, b, nb), *gdw = dpoison(t, nw), *gdb = dpoison(t, nb);
	float *hdx = NULL, *hdw = NULL, *hdb = NULL;
	if (!ran(t, r, r->ops->linear_fwd(r, orf, x, wt, d.has_bias ? b : NULL, y), w) ||
	    !ran(t, r, r->ops->linear_bwd_data(r, orf, dy, wt, dx, 0.0f), w) ||
	    !ran(t, r, r->ops->linear_bwd_weights(r, orf, x, dy, dw, d.has_bias ? db : NULL, 0.0f),
		 w) ||
	    !ran(t, g, g->ops->linear_fwd(g, og, gx, gw, d.has_bias ? gb : NULL, gy), w) ||
	    !ran(t, g, g->ops->linear_bwd_data(g, og, gdy, gw, gdx, 0.0f), w) ||
	    !ran(t, g,
		 g->ops->linear_bwd_weights(g, og, gx, gdy, gdw, d.has_bias ? gdb : NULL, 0.0f), w))
		goto out;
	float *hy = adown(t, gy, d.n, d.out, 1, 1);
	cmp(t, w, "fwd y", hy, y, ny, act_tol(t));
	free(hy);
	hdx = adown(t, gdx, d.n, xc, xh, xw), hdw = down(t, gdw, nw), hdb = down(t, gdb, nb);
	cmp(t, w, "bwd dx", hdx, dx, nx, act_tol(t));
	cmp(t, w, "bwd dw (float32 from half inputs)", hdw, dw, nw, TOL_HALF_F32);
	if (d.has_bias)
		cmp(t, w, "bwd db", hdb, db, nb, TOL_HALF_F32);
	float *pre = hrnd(t, nx, -1, 1), *prew = rnd(t, nw, -1, 1), *preb = rnd(t, nb, -1, 1);
	void *ax = aup(t, pre, d.n, xc, xh, xw);
	float *aw = up(t, prew, nw), *ab = up(t, preb, nb);
	if (ran(t, g, g->ops->linear_bwd_data(g, og, gdy, gw, ax, 1.0f), w)) {
		float *h = adown(t, ax, d.n, xc, xh, xw), *want = sum_of(hdx, pre, nx);
		cmp(t, w, "dx beta=1", h, want, nx, act_tol(t));
		free(h), free(want);
	}
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
	if (orf)
		r->ops->op_destroy(r, orf);
	if (og)
		g->ops->op_destroy(g, og);
}

/* relu, add and act_accum: the reference's float formula, rounded once. */
static void test_eltwise_h(struct t *t, size_t n)
{
	struct backend *r = t->cpu, *g = t->gpu;
	float *x = hrnd(t, n, -1, 1), *b = hrnd(t, n, -1, 1), *dy = hrnd(t, n, -1, 1);
	float *pre = hrnd(t, n, -1, 1), *y = chk_alloc(n), *dx = chk_alloc(n);
	float *acc = chk_copy(pre, n), *sum = chk_alloc(n), *g0 = chk_alloc(n);
	float *g1 = chk_copy(pre, n);
	char w[64];
	int in = (int)n;

	if (t->dt == BE_F16 && n > 2) /* fp16 overflow is inf, not clamped: 60000 + 60000 */
		x[2] = b[2] = 60000.0f;
	void *gx = aup(t, x, 1, 1, 1, in), *gb = aup(t, b, 1, 1, 1, in);
	void *gdy = aup(t, dy, 1, 1, 1, in), *gacc = aup(t, pre, 1, 1, 1, in);
	void *gg1 = aup(t, pre, 1, 1, 1, in), *gy = apoison(t, n), *gdx = apoison(t, n);
	void *gs = apoison(t, n), *gg0 = apoison(t, n);

	snprintf(w, sizeof(w), "eltwise(n=%zu)", n);
	r->ops->relu_fwd(r, x, y, n);
	r->ops->relu_bwd(r, y, dy, dx, n, 0.0f);
	r->ops->relu_bwd(r, y, dy, acc, n, 1.0f);
	r->ops->add(r, x, b, sum, n);
	r->ops->axpby(r, 1.0f, dy, 0.0f, g0, n); /* act_accum's float32 twin */
	r->ops->axpby(r, 1.0f, dy, 1.0f, g1, n);
	if (!ran(t, g, g->ops->relu_fwd(g, gx, gy, n), w) ||
	    !ran(t, g, g->ops->relu_bwd(g, gy, gdy, gdx, n, 0.0f), w) ||
	    !ran(t, g, g->ops->relu_bwd(g, gy, gdy, gacc, n, 1.0f), w) ||
	    !ran(t, g, g->ops->add(g, gx, gb, gs, n), w) ||
	    !ran(t, g, g->ops->act_accum(g, gdy, gg0, n, 0.0f), w) ||
	    !ran(t, g, g->ops->act_accum(g, gdy, gg1, n, 1.0f), w))
		goto out;
	float *h = adown(t, gy, 1, 1, 1, in);
	cmp_round(t, w, "relu fwd", h, y, n, 0);
	free(h), h = adown(t, gdx, 1, 1, 1, in);
	cmp_round(t, w, "relu bwd", h, dx, n, 0);
	free(h), h = adown(t, gacc, 1, 1, 1, in);
	cmp_round(t, w, "relu bwd beta=1", h, acc, n, 0);
	free(h), h = adown(t, gs, 1, 1, 1, in);
	cmp_round(t, w, "add", h, sum, n, 0);
	free(h), h = adown(t, gg0, 1, 1, 1, in);
	cmp_round(t, w, "act_accum beta=0", h, g0, n, 0);
	free(h), h = adown(t, gg1, 1, 1, 1, in);
	cmp_round(t, w, "act_accum beta=1", h, g1, n, 0);
	free(h);
	if (ran(t, g, g->ops->relu_bwd(g, gy, gdy, gdy, n, 0.0f), w)) { /* in place, as nn.c */
		h = adown(t, gdy, 1, 1, 1, in);
		cmp_round(t, w, "relu bwd in place", h, dx, n, 0);
		free(h);
	}
out:
	free(x), free(b), free(dy), free(pre), free(y), free(dx), free(acc), free(sum), free(g0);
	free(g1);
	dfree(t, gx), dfree(t, gb), dfree(t, gdy), dfree(t, gacc), dfree(t, gg1), dfree(t, gy);
	dfree(t, gdx), dfree(t, gs), dfree(t, gg0);
}

static void test_gap_h(struct t *t, int n, int c, int hw)
{
	struct backend *r = t->cpu, *g = t->gpu;
	size_t nx = (size_t)n * c * hw, ny = (size_t)n * c;
	float *x = hrnd(t, nx, -1, 1), *dy = hrnd(t, ny, -1, 1), *pre = hrnd(t, nx, -1, 1);
	float *y = chk_alloc(ny), *dx = chk_alloc(nx), *acc = chk_copy(pre, nx);
	void *gx = aup(t, x, n, c, hw, 1), *gdy = aup(t, dy, n, c, 1, 1);
	void *gacc = aup(t, pre, n, c, hw, 1), *gy = apoison(t, ny), *gdx = apoison(t, nx);
	char w[96];

	snprintf(w, sizeof(w), "gap(n=%d c=%d hw=%d)", n, c, hw);
	r->ops->gap_fwd(r, x, y, n, c, hw);
	r->ops->gap_bwd(r, dy, dx, n, c, hw, 0.0f);
	r->ops->gap_bwd(r, dy, acc, n, c, hw, 1.0f);
	if (ran(t, g, g->ops->gap_fwd(g, gx, gy, n, c, hw), w) &&
	    ran(t, g, g->ops->gap_bwd(g, gdy, gdx, n, c, hw, 0.0f), w) &&
	    ran(t, g, g->ops->gap_bwd(g, gdy, gacc, n, c, hw, 1.0f), w)) {
		float *h = adown(t, gy, n, c, 1, 1);
		cmp_round(t, w, "fwd y", h, y, ny, 1);
		free(h), h = adown(t, gdx, n, c, hw, 1);
		cmp_round(t, w, "bwd dx", h, dx, nx, 0);
		free(h), h = adown(t, gacc, n, c, hw, 1);
		cmp_round(t, w, "bwd dx beta=1", h, acc, nx, 0);
		free(h);
	}
	free(x), free(dy), free(pre), free(y), free(dx), free(acc);
	dfree(t, gx), dfree(t, gdy), dfree(t, gacc), dfree(t, gy), dfree(t, gdx);
}

static void test_xent_h(struct t *t, int n, int classes, float smoothing, float scale)
{
	struct backend *r = t->cpu, *g = t->gpu;
	size_t nl = (size_t)n * classes;
	float *l = hrnd(t, nl, -4, 4), *d = chk_alloc(nl), loss[3];
	int32_t *lab = malloc(sizeof(*lab) * n);
	int correct[3];
	char w[128];

	if (!lab)
		bail_out("out of memory");
	for (int i = 0; i < n; i++)
		lab[i] = (int32_t)(chk_next(t->rng) % classes);
	for (int i = 0; i < n; i += 3)
		l[(size_t)i * classes + lab[i]] = 10.0f;
	snprintf(w, sizeof(w), "xent(n=%d classes=%d smoothing=%g scale=%g)", n, classes, smoothing,
		 scale);
	void *gl = aup(t, l, n, classes, 1, 1), *gd = apoison(t, nl);
	int32_t *glab = g->ops->alloc(g, sizeof(*lab) * n);
	if (!glab || g->ops->from_host(g, glab, lab, sizeof(*lab) * n) < 0)
		bail_out("%s: labels to the GPU: %s", t->name, g->err.text);
	if (ran(t, r,
		r->ops->xent(r, l, lab, n, classes, smoothing, scale, &loss[0], &correct[0], d),
		w) &&
	    ran(t, g,
		g->ops->xent(g, gl, glab, n, classes, smoothing, scale, &loss[1], &correct[1], gd),
		w)) {
		float *h = adown(t, gd, n, classes, 1, 1);
		is_double(loss[1], loss[0], 1e-5 * fabs(loss[0]), "%s %s loss %.6f", t->name, w,
			  loss[1]);
		is_int(correct[1], correct[0], "%s %s correct %d", t->name, w, correct[1]);
		cmp_round(t, w, "dlogits", h, d, nl, 1);
		free(h);
	}
	if (ran(t, g,
		g->ops->xent(g, gl, lab, n, classes, smoothing, scale, &loss[2], &correct[2], NULL),
		w))
		ok(loss[2] == loss[1] && correct[2] == correct[1],
		   "%s %s: host labels, no dlogits: same loss and hits", t->name, w);
	free(l), free(d), free(lab);
	dfree(t, gl), dfree(t, gd), dfree(t, glab);
}

/* ------------------------------------------------------------------------------------- */
/* The half modes' two layouts against each other: t->gpu NHWC, tn->gpu the same type in NCHW
 * (DPTRAIN_CUDA_LAYOUT=nchw). */

/* An act element's bits as a float (exact): bfloat16 is float's top half; IEEE half by its
 * fields. */
static float act_bits(const struct t *t, uint16_t u)
{
	float f;

	if (t->dt == BE_BF16) {
		uint32_t v = (uint32_t)u << 16;
		memcpy(&f, &v, sizeof(f));
		return f;
	}
	int e = (u >> 10) & 0x1f, m = u & 0x3ff;
	if (e == 31)
		f = m ? NAN : INFINITY;
	else if (e == 0)
		f = ldexpf((float)m, -24);
	else
		f = ldexpf((float)(m | 0x400), e - 25);
	return u & 0x8000 ? -f : f;
}

/* Where act_import puts element (n, c, h, w), read from the raw act bytes: NHWC at
 * ((n H + h) W + w) C + c, NCHW at ((n C + c) H + h) W + w. */
static void test_layout_memory(struct t *t, struct t *tn)
{
	enum { N = 2, C = 3, H = 5, W = 7, CNT = N * C * H * W };
	struct t *tt[2] = {t, tn};
	float *x = hrnd(t, CNT, -3, 3);
	uint16_t raw[2][CNT];
	int good[2] = {1, 1};

	for (int k = 0; k < 2; k++) {
		void *a = aup(tt[k], x, N, C, H, W);
		if (tt[k]->gpu->ops->to_host(tt[k]->gpu, raw[k], a, sizeof(raw[k])) < 0)
			bail_out("%s to_host: %s", tt[k]->name, tt[k]->gpu->err.text);
		dfree(tt[k], a);
	}
	for (int n = 0; n < N; n++)
		for (int c = 0; c < C; c++)
			for (int h = 0; h < H; h++)
				for (int w = 0; w < W; w++) {
					size_t i = (((size_t)n * C + c) * H + h) * W + w;
					size_t j = (((size_t)n * H + h) * W + w) * C + c;
					good[0] &= same_float(act_bits(t, raw[0][j]), x[i]);
					good[1] &= same_float(act_bits(t, raw[1][i]), x[i]);
				}
	ok(good[0], "%s act_import 2x3x5x7: element (n, c, h, w) at ((n H + h) W + w) C + c (NHWC)",
	   t->name);
	ok(good[1], "%s act_import 2x3x5x7: element (n, c, h, w) at ((n C + c) H + h) W + w (NCHW)",
	   tn->name);
	free(x);
}

/* One convolution in both layouts from the same inputs: its results within the type's
 * rounding of each other (both are the reference's within it: this catches a permutation that
 * is consistently wrong in both directions), and the NHWC output exported to float32 and
 * imported again gives back its bytes. */
static void test_conv_layouts(struct t *t, struct t *tn, struct be_conv_desc d)
{
	struct t *tt[2] = {t, tn};
	struct be_conv_desc dd[2] = {d, d};
	struct be_op *op[2] = {NULL, NULL};
	void *gx[2] = {NULL, NULL}, *gdy[2] = {NULL, NULL}, *gy[2] = {NULL, NULL};
	void *gdx[2] = {NULL, NULL};
	float *gw[2] = {NULL, NULL}, *gb[2] = {NULL, NULL}, *gdw[2] = {NULL, NULL};
	float *gdb[2] = {NULL, NULL}, *hy[2] = {NULL, NULL}, *hdx[2] = {NULL, NULL};
	float *hdw[2] = {NULL, NULL}, *hdb[2] = {NULL, NULL};
	char s[160], w[200];
	int k;

	snprintf(w, sizeof(w), "conv(%s) NHWC vs NCHW", be_conv_str(&d, s, sizeof(s)));
	for (k = 0; k < 2; k++)
		op[k] = tt[k]->gpu->ops->conv_create(tt[k]->gpu, &dd[k]);
	if (!ok(op[0] && op[1], "%s: created", w)) {
		diag("%s / %s", op[0] ? "" : t->gpu->err.text, op[1] ? "" : tn->gpu->err.text);
		goto out_ops;
	}
	int oh = dd[0].oh, ow = dd[0].ow;
	size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * d.c * d.kh * d.kw;
	size_t ny = (size_t)d.n * d.k * oh * ow, nb = d.k;
	float *x = hrnd(t, nx, -1, 1), *wt = hrnd(t, nw, -0.5f, 0.5f), *b = rnd(t, nb, -1, 1);
	float *dy = hrnd(t, ny, -1, 1);
	for (k = 0; k < 2; k++) {
		struct t *q = tt[k];
		struct backend *g = q->gpu;
		gx[k] = aup(q, x, d.n, d.c, d.h, d.w), gdy[k] = aup(q, dy, d.n, d.k, oh, ow);
		gy[k] = apoison(q, ny), gdx[k] = apoison(q, nx);
		gw[k] = up(q, wt, nw), gb[k] = up(q, b, nb), gdw[k] = dpoison(q, nw);
		gdb[k] = dpoison(q, nb);
		if (!ran(q, g,
			 g->ops->conv_fwd(g, op[k], gx[k], gw[k], d.has_bias ? gb[k] : NULL, gy[k]),
			 w) ||
		    !ran(q, g, g->ops->conv_bwd_data(g, op[k], gdy[k], gw[k], gdx[k], 0.0f), w) ||
		    !ran(q, g,
			 g->ops->conv_bwd_weights(g, op[k], gx[k], gdy[k], gdw[k],
						  d.has_bias ? gdb[k] : NULL, 0.0f),
			 w))
			goto out;
		hy[k] = adown(q, gy[k], d.n, d.k, oh, ow);
		hdx[k] = adown(q, gdx[k], d.n, d.c, d.h, d.w);
		hdw[k] = down(q, gdw[k], nw);
		hdb[k] = down(q, gdb[k], nb);
	}
	cmp(t, w, "fwd y", hy[0], hy[1], ny, act_tol(t));
	cmp(t, w, "bwd dx", hdx[0], hdx[1], nx, act_tol(t));
	cmp(t, w, "bwd dw", hdw[0], hdw[1], nw, act_tol(t));
	if (d.has_bias)
		cmp(t, w, "bwd db", hdb[0], hdb[1], nb, TOL_HALF_F32);
	void *back = aup(t, hy[0], d.n, d.k, oh, ow);
	char r[240];
	snprintf(r, sizeof(r), "conv(%s) output exported and imported again", s);
	same_bytes(t, r, back, gy[0], ny * t->gpu->act_size);
	dfree(t, back);
out:
	free(x), free(wt), free(b), free(dy);
	for (k = 0; k < 2; k++) {
		free(hy[k]), free(hdx[k]), free(hdw[k]), free(hdb[k]);
		struct t *q = tt[k];
		dfree(q, gx[k]), dfree(q, gdy[k]), dfree(q, gy[k]), dfree(q, gdx[k]);
		dfree(q, gw[k]), dfree(q, gb[k]), dfree(q, gdw[k]), dfree(q, gdb[k]);
	}
out_ops:
	for (k = 0; k < 2; k++)
		if (op[k])
			tt[k]->gpu->ops->op_destroy(tt[k]->gpu, op[k]);
}

/* One training step of a model in both layouts from the same weights and batch: loss, logits
 * and the last layer's gradient within 2 tol of each other, tol being how far each may be from
 * the float32 model (test_model's tolerances; the whole gradient's is too loose to say more than
 * test_model does). lenet runs the flattened-input linear layer, resnet18 the fused batch norms. */
static void test_model_layouts(struct t *t, struct t *tn, const char *name, int c, int h, int w,
			       int n, double tol, float scale)
{
	struct nn_spec spec = {.name = name, .c = c, .h = h, .w = w, .classes = 10};
	struct t *tt[2] = {t, tn};
	struct nn_model m[2];
	size_t nx = (size_t)n * c * h * w, nl = (size_t)n * 10, last = 0;
	float *x = hrnd(t, nx, -1, 1), *lg, loss[2], *hl[2] = {NULL, NULL}, *hg[2] = {NULL, NULL};
	int32_t *lab = malloc(sizeof(*lab) * n);
	int correct[2], built = 0, k;
	uint64_t seed = chk_next(t->rng);
	char what[128];
	struct dp_error err;

	snprintf(what, sizeof(what), "model %s %dx%dx%d batch %d, NHWC vs NCHW", name, c, h, w, n);
	if (!lab)
		bail_out("out of memory");
	for (int i = 0; i < n; i++)
		lab[i] = (int32_t)(chk_next(t->rng) % 10);
	for (k = 0; k < 2; k++, built++) {
		struct t *q = tt[k];
		struct backend *g = q->gpu;
		float *gx;
		int32_t *glab;
		if (nn_build(&m[k], g, &spec, &err) < 0 || nn_init_weights(&m[k], seed, &err) < 0) {
			nn_free(&m[k]);
			fail("%s on %s: %s", what, q->name, err.text);
			goto out;
		}
		gx = up(q, x, nx);
		glab = g->ops->alloc(g, sizeof(*lab) * n);
		if (!glab || g->ops->from_host(g, glab, lab, sizeof(*lab) * n) < 0)
			bail_out("%s: labels to the GPU: %s", what, g->err.text);
		nn_set_training(&m[k], 1);
		if (nn_forward(&m[k], gx, n, &lg, &err) < 0 ||
		    nn_loss(&m[k], glab, n, 0.1f, scale, &loss[k], &correct[k], &err) < 0 ||
		    nn_backward(&m[k], n, 0.0f, &err) < 0) {
			fail("%s on %s: %s", what, q->name, err.text);
			dfree(q, gx), dfree(q, glab);
			built++;
			goto out;
		}
		hl[k] = adown(q, lg, n, 10, 1, 1);
		hg[k] = down(q, m[k].grads, m[k].param_total);
		dfree(q, gx), dfree(q, glab);
	}
	is_double(loss[0], loss[1], 2 * tol * fabs(loss[1]), "%s %s: loss %.6f vs %.6f", t->name,
		  what, loss[0], loss[1]);
	cmp(t, what, "train logits", hl[0], hl[1], nl, 2 * tol);
	/* the last layer's parameters come first in the flat buffer (see test_model) */
	int lnode = -1;
	for (int p = 0; p < m[0].nparams; p++)
		if (m[0].params[p].offset == 0)
			lnode = m[0].params[p].node;
	for (int p = 0; p < m[0].nparams; p++)
		if (m[0].params[p].node == lnode &&
		    m[0].params[p].offset + m[0].params[p].count > last)
			last = m[0].params[p].offset + m[0].params[p].count;
	cmp(t, what, "last layer's gradient", hg[0], hg[1], last, 2 * tol);
out:
	for (k = 0; k < built; k++)
		nn_free(&m[k]);
	for (k = 0; k < 2; k++)
		free(hl[k]), free(hg[k]);
	free(x), free(lab);
}

/* cudnnFind: each convolution shape's algorithms timed once, when its first op is made, and
 * the choice kept for the next op of that shape; never with DPTRAIN_CUDA_CONV_FIND=0 or
 * deterministic algorithms. (That the timed algorithms compute the right thing is the "fast"
 * suite's: run_cases with the default backend.) */
static void test_conv_find(void)
{
	static const struct {
		const char *name, *env_find, *env_det;
		size_t want;
	} modes[] = {
	    {"default", NULL, NULL, 2},
	    {"DPTRAIN_CUDA_CONV_FIND=0", "0", NULL, 0},
	    {"DPTRAIN_CUDA_DETERMINISTIC=1", NULL, "1", 0},
	};
	struct be_conv_desc a = {
	    .n = 4, .c = 8, .h = 14, .w = 14, .k = 16, .kh = 3, .kw = 3, .stride = 1, .pad = 1};
	struct be_conv_desc b = a;

	b.k = 32;
	b.stride = 2;
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		struct dp_error err = {""};
		struct be_conv_desc d1 = a, d2 = a, d3 = b;

		if (modes[i].env_find)
			setenv("DPTRAIN_CUDA_CONV_FIND", modes[i].env_find, 1);
		if (modes[i].env_det)
			setenv("DPTRAIN_CUDA_DETERMINISTIC", modes[i].env_det, 1);
		struct backend *g = be_cuda_create(0, NULL, &err);
		unsetenv("DPTRAIN_CUDA_CONV_FIND");
		unsetenv("DPTRAIN_CUDA_DETERMINISTIC");
		if (!ok(g != NULL, "conv find, %s: be_cuda_create(0): %s", modes[i].name,
			g ? "" : err.text))
			continue;
		struct be_op *o1 = g->ops->conv_create(g, &d1);
		size_t after1 = be_cuda_conv_shapes_timed(g);
		struct be_op *o2 = g->ops->conv_create(g, &d2);
		size_t after2 = be_cuda_conv_shapes_timed(g);
		struct be_op *o3 = g->ops->conv_create(g, &d3);
		size_t after3 = be_cuda_conv_shapes_timed(g);
		if (ok(o1 && o2 && o3, "conv find, %s: three convolutions made", modes[i].name))
			ok(after1 == (modes[i].want ? 1u : 0u) && after2 == after1 &&
			       after3 == modes[i].want,
			   "conv find, %s: shapes timed %zu, %zu, %zu (want %zu: a shape once)",
			   modes[i].name, after1, after2, after3, modes[i].want);
		else
			diag("%s", g->err.text);
		g->ops->op_destroy(g, o1);
		g->ops->op_destroy(g, o2);
		g->ops->op_destroy(g, o3);
		g->ops->destroy(g);
	}
}

/* ------------------------------------------------------------------------------------- */
/* The cases: every op, shape and whole model the suite checks, and on which backends (modes).
 * A case runs on each mode in its modes, in this order; an op's case compares the float32 modes
 * with the CPU backend (test_conv, ...) and the half modes with the reference (test_conv_h, ...),
 * each with its tolerances (the TOL_* above, by op and mode); whole models carry theirs. */

/* The modes: the backends main creates, one bit each. */
enum {
	M_F32_DET = 1 << 0,   /* float32, DPTRAIN_CUDA_DETERMINISTIC=1: repeats bit for bit */
	M_F32_FAST = 1 << 1,  /* float32, cuDNN's fastest algorithms */
	M_F32_TF32 = 1 << 2,  /* float32 with TF32 tensor cores */
	M_BF16_NHWC = 1 << 3, /* bf16 and fp16 in both layouts, deterministic algorithms */
	M_BF16_NCHW = 1 << 4, /* (DPTRAIN_CUDA_LAYOUT=nchw) */
	M_FP16_NHWC = 1 << 5,
	M_FP16_NCHW = 1 << 6,
	M_BF16_NHWC_FAST = 1 << 7, /* the same with cuDNN's fastest algorithms */
	M_BF16_NCHW_FAST = 1 << 8,
	M_FP16_NHWC_FAST = 1 << 9,
	M_FP16_NCHW_FAST = 1 << 10,
	M_BF16_LAYOUTS = 1 << 11, /* NHWC against NCHW (run_case's nchw), deterministic */
	M_FP16_LAYOUTS = 1 << 12,
};
#define M_F32	  (M_F32_DET | M_F32_TF32) /* the float32 suite; M_F32_FAST runs convolutions */
#define M_BF16	  (M_BF16_NHWC | M_BF16_NCHW)
#define M_FP16	  (M_FP16_NHWC | M_FP16_NCHW)
#define M_HALF	  (M_BF16 | M_FP16) /* the half suite; the _FAST modes run convolutions */
#define M_FULL	  (M_F32 | M_HALF)
#define M_LAYOUTS (M_BF16_LAYOUTS | M_FP16_LAYOUTS)
#define M_ALL                                                                                      \
	(M_FULL | M_F32_FAST | M_BF16_NHWC_FAST | M_BF16_NCHW_FAST | M_FP16_NHWC_FAST |            \
	 M_FP16_NCHW_FAST)
/* fp16 NHWC training as it runs by default: batch norm through cuDNN's Ex calls (persistent NHWC
 * kernels, the ReLU and the add fused), which the deterministic backend never takes */
#define M_FP16_EX M_FP16_NHWC_FAST
#define M_FULL_EX (M_FULL | M_FP16_EX)

enum tc_op {
	T_ACT,		 /* test_act_h: the act type, import and export */
	T_CONV,		 /* test_conv, test_conv_h */
	T_BN,		 /* test_bn, test_bn_h */
	T_BN_OWN,	 /* test_bn_h_own: bf16's own kernels, arg the large-mean channel or -1 */
	T_POOL,		 /* test_pool, test_pool_h: arg levels of x (ties), 0 for none */
	T_LINEAR,	 /* test_linear, test_linear_h */
	T_ELTWISE,	 /* test_eltwise, test_eltwise_h over n values */
	T_INPUT_U8,	 /* test_input_u8, dims n c h w */
	T_GAP,		 /* test_gap, test_gap_h, dims n c hw */
	T_XENT,		 /* test_xent, test_xent_h */
	T_XENT_KNOWN,	 /* test_xent_known */
	T_XENT_NAN,	 /* test_xent_nan */
	T_ERRORS,	 /* test_errors */
	T_ARENA,	 /* test_arena */
	T_ASYNC,	 /* test_async */
	T_MODEL,	 /* test_model */
	T_LAYOUT_MEMORY, /* test_layout_memory */
	T_CONV_LAYOUTS,	 /* test_conv_layouts */
	T_MODEL_LAYOUTS, /* test_model_layouts: model.tol as test_model's (gtol unused) */
};

struct tcase {
	enum tc_op op;
	unsigned modes; /* M_* */
	union {
		struct be_conv_desc conv;
		struct be_bn_desc bn;
		struct be_pool_desc pool;
		struct be_linear_desc lin;
		size_t n;
		unsigned char dims[4]; /* small: bounds the buffers' sizes for the compiler too */
		struct {
			int n, classes;
			float smoothing, scale;
		} xent;
		struct {
			const char *name;
			int c, h, w, n;
			double tol, gtol; /* logits, loss, BN statistics, the last layer's gradient;
					     every gradient */
			float scale;	  /* of the loss gradient, both sides */
		} model;
	};
	int arg;
};

static const struct tcase cases[] = {
    {T_ACT, M_HALF, .n = 0},
    /*                      n  c   h   w   k  kh kw s  pad bias */
    {T_CONV, M_ALL, .conv = {2, 3, 9, 11, 5, 3, 3, 1, 1, 1, 0, 0}},  /* odd sizes, bias */
    {T_CONV, M_ALL, .conv = {1, 5, 7, 7, 6, 3, 3, 2, 1, 0, 0, 0}},   /* batch 1, stride 2 */
    {T_CONV, M_ALL, .conv = {3, 8, 6, 6, 12, 1, 1, 1, 0, 0, 0, 0}},  /* 1x1 */
    {T_CONV, M_ALL, .conv = {2, 16, 8, 8, 8, 1, 1, 2, 0, 0, 0, 0}},  /* 1x1/2 downsample */
    {T_CONV, M_ALL, .conv = {2, 3, 23, 23, 8, 7, 7, 2, 3, 0, 0, 0}}, /* 7x7/2 stem */
    {T_CONV, M_ALL,
     .conv = {4, 17, 10, 10, 19, 3, 3, 1, 1, 0, 0, 0}}, /* channels not multiple of 8 */
    {T_CONV, M_ALL, .conv = {2, 32, 14, 14, 32, 3, 3, 1, 1, 0, 0, 0}}, /* Winograd-friendly */
    {T_CONV, M_ALL, .conv = {2, 64, 7, 7, 128, 3, 3, 2, 1, 0, 0, 0}},  /* 3x3/2 widening */
    {T_CONV, M_ALL, .conv = {2, 4, 5, 5, 3, 5, 5, 1, 0, 1, 0, 0}},     /* kernel covers the input */
    {T_CONV, M_ALL, .conv = {2, 16, 4, 4, 16, 1, 1, 1, 0, 1, 0, 0}},   /* 1x1 with bias */
    {T_CONV, M_ALL, .conv = {2, 64, 12, 12, 256, 1, 1, 1, 0, 0, 0, 0}}, /* bottleneck expansion */
    {T_CONV, M_ALL, .conv = {32, 64, 32, 32, 64, 3, 3, 1, 1, 0, 0, 0}}, /* big enough for FFT */
    /*                   n, c, h, w, eps, fuse_relu, fuse_add */
    {T_BN, M_FULL_EX, .bn = {2, 3, 5, 7, 1e-5f, 0, 0}},
    {T_BN, M_FULL_EX, .bn = {2, 3, 5, 7, 1e-5f, 1, 0}},
    {T_BN, M_FULL_EX, .bn = {1, 16, 4, 4, 1e-5f, 1, 0}},
    {T_BN, M_FULL_EX, .bn = {8, 17, 3, 3, 1e-5f, 0, 0}},
    {T_BN, M_FULL_EX, .bn = {4, 32, 8, 8, 1e-3f, 1, 0}},
    {T_BN, M_FULL_EX, .bn = {3, 8, 1, 1, 1e-5f, 0, 0}},
    {T_BN, M_FULL_EX, .bn = {3, 64, 6, 5, 1e-5f, 0, 0}},
    {T_BN, M_FULL_EX, .bn = {16, 24, 2, 2, 1e-5f, 1, 0}},
    {T_BN, M_FULL_EX, .bn = {32, 64, 16, 16, 1e-5f, 1, 0}},
    {T_BN, M_FULL_EX, .bn = {2, 3, 5, 7, 1e-5f, 1, 1}},
    {T_BN, M_FULL_EX, .bn = {8, 17, 3, 3, 1e-5f, 0, 1}},
    {T_BN, M_FULL_EX, .bn = {4, 32, 8, 8, 1e-3f, 1, 1}},
    {T_BN, M_FULL_EX, .bn = {16, 24, 2, 2, 1e-5f, 1, 1}},
    {T_BN, M_FULL_EX, .bn = {32, 64, 16, 16, 1e-5f, 1, 1}},
    {T_MODEL, M_FP16_EX,
     .model = {"resnet18", 3, 32, 32, 4, TOL_FP16_RESNET, TOL_FP16_RESNET_GRAD, FP16_MODEL_SCALE}},
    /* bf16's own BN kernels split each channel's n*h*w values into slabs (cuda_bn.cu): this
     * shape has many, the last one short, in either layout, and an odd channel count; then its
     * statistics with a large-mean channel (2), and the repeats of a large shape */
    {T_BN, M_BF16, .bn = {9, 7, 37, 41, 1e-5f, 1, 1}},
    {T_BN_OWN, M_BF16, .bn = {9, 7, 37, 41, 1e-5f, 1, 1}, .arg = 2},
    {T_BN_OWN, M_BF16, .bn = {32, 64, 16, 16, 1e-5f, 1, 0}, .arg = -1},
    {T_BN_OWN, M_BF16, .bn = {8, 128, 12, 12, 1e-5f, 1, 1}, .arg = -1},
    /*                      kind         n  c   h   w  kh kw s pad */
    {T_POOL, M_FULL, .pool = {BE_POOL_MAX, 2, 3, 9, 9, 3, 3, 2, 1, 0, 0}},
    {T_POOL, M_FULL, .pool = {BE_POOL_MAX, 2, 3, 7, 7, 2, 2, 2, 0, 0, 0}},
    {T_POOL, M_FULL, .pool = {BE_POOL_MAX, 1, 4, 16, 16, 3, 3, 1, 1, 0, 0}},
    {T_POOL, M_FULL, .pool = {BE_POOL_MAX, 2, 17, 12, 10, 3, 3, 2, 1, 0, 0}},
    {T_POOL, M_FULL, .pool = {BE_POOL_AVG, 2, 3, 8, 8, 2, 2, 2, 0, 0, 0}},
    {T_POOL, M_FULL, .pool = {BE_POOL_AVG, 2, 5, 9, 7, 3, 3, 1, 1, 0, 0}},
    {T_POOL, M_FULL, .pool = {BE_POOL_AVG, 1, 16, 7, 7, 7, 7, 1, 0, 0, 0}},
    {T_POOL, M_FULL, .pool = {BE_POOL_AVG, 2, 3, 11, 11, 3, 3, 2, 1, 0, 0}},
    /* ties (ReLU outputs are full of zeros): both must pick the first maximum */
    {T_POOL, M_FULL, .pool = {BE_POOL_MAX, 2, 3, 9, 9, 3, 3, 2, 1, 0, 0}, .arg = 3},
    {T_POOL, M_FULL, .pool = {BE_POOL_MAX, 2, 17, 12, 10, 3, 3, 2, 1, 0, 0}, .arg = 2},
    /* n, in, out, bias, then the c x h x w the input was flattened from (nn.c's desc for a
     * linear layer after a conv or pool: lenet's fc1), 0 for plain rows */
    {T_LINEAR, M_FULL, .lin = {1, 7, 3, 1, 0, 0, 0}},
    {T_LINEAR, M_FULL, .lin = {5, 64, 10, 1, 0, 0, 0}},
    {T_LINEAR, M_FULL, .lin = {8, 33, 17, 0, 0, 0, 0}},
    {T_LINEAR, M_FULL, .lin = {16, 512, 100, 1, 0, 0, 0}},
    {T_LINEAR, M_FULL, .lin = {256, 1000, 10, 1, 0, 0, 0}},
    {T_LINEAR, M_FULL, .lin = {4, 256, 120, 1, 16, 4, 4}},
    {T_LINEAR, M_FULL, .lin = {3, 30, 7, 0, 5, 2, 3}},
    {T_LINEAR, M_FULL, .lin = {2, 24, 5, 1, 24, 1, 1}},
    {T_ELTWISE, M_FULL, .n = 1},
    {T_ELTWISE, M_FULL, .n = 1000003},
    {T_INPUT_U8, M_F32, .dims = {3, 3, 224, 224}},
    {T_INPUT_U8, M_F32, .dims = {1, 1, 5, 7}},
    {T_GAP, M_FULL, .dims = {2, 3, 5}},
    {T_GAP, M_FULL, .dims = {4, 64, 49}},
    /*                       n, classes, smoothing, scale */
    {T_XENT, M_FULL, .xent = {1, 10, 0.0f, 1.0f}},
    {T_XENT, M_FULL, .xent = {16, 10, 0.1f, 1.0f}},
    {T_XENT, M_FULL, .xent = {7, 1000, 0.1f, 0.25f}},
    {T_XENT_KNOWN, M_F32, .n = 0},
    {T_XENT_NAN, M_F32, .n = 0},
    {T_ERRORS, M_FULL, .n = 0},
    {T_ARENA, M_F32, .n = 0},
    /* whole models: name, c, h, w, batch, tol, gtol, loss scale */
    {T_MODEL, M_F32_DET, .model = {"lenet", 1, 28, 28, 8, TOL_LENET, TOL_LENET, 1.0f}},
    {T_MODEL, M_F32_TF32,
     .model = {"lenet", 1, 28, 28, 8, TOL_TF32_MODEL, TOL_TF32_LENET_GRAD, 1.0f}},
    {T_MODEL, M_BF16, .model = {"lenet", 1, 28, 28, 8, TOL_BF16_LENET, TOL_BF16_LENET_GRAD, 1.0f}},
    {T_MODEL, M_FP16,
     .model = {"lenet", 1, 28, 28, 8, TOL_FP16_LENET, TOL_FP16_LENET_GRAD, FP16_MODEL_SCALE}},
    {T_MODEL, M_F32_DET, .model = {"resnet18", 3, 32, 32, 4, TOL_RESNET, TOL_RESNET_GRAD, 1.0f}},
    {T_MODEL, M_F32_TF32,
     .model = {"resnet18", 3, 32, 32, 4, TOL_TF32_MODEL, TOL_TF32_RESNET_GRAD, 1.0f}},
    {T_MODEL, M_BF16,
     .model = {"resnet18", 3, 32, 32, 4, TOL_BF16_RESNET, TOL_BF16_RESNET_GRAD, 1.0f}},
    {T_MODEL, M_FP16,
     .model = {"resnet18", 3, 32, 32, 4, TOL_FP16_RESNET, TOL_FP16_RESNET_GRAD, FP16_MODEL_SCALE}},
    {T_ASYNC, M_F32, .n = 0},
    /* the two layouts against each other: n c h w k kh kw s pad bias */
    {T_LAYOUT_MEMORY, M_LAYOUTS, .n = 0},
    {T_CONV_LAYOUTS, M_LAYOUTS, .conv = {2, 8, 6, 6, 16, 3, 3, 1, 1, 1, 0, 0}},	 /* OHWI != OIHW */
    {T_CONV_LAYOUTS, M_LAYOUTS, .conv = {2, 3, 9, 11, 5, 3, 3, 2, 1, 0, 0, 0}},	 /* odd sizes */
    {T_CONV_LAYOUTS, M_LAYOUTS, .conv = {2, 16, 8, 8, 32, 1, 1, 2, 0, 0, 0, 0}}, /* OHWI == OIHW */
    {T_CONV_LAYOUTS, M_LAYOUTS, .conv = {2, 1, 12, 12, 6, 5, 5, 1, 0, 1, 0, 0}}, /* lenet's conv1 */
    {T_MODEL_LAYOUTS, M_BF16_LAYOUTS, .model = {"lenet", 1, 28, 28, 8, TOL_BF16_LENET, 0, 1.0f}},
    {T_MODEL_LAYOUTS, M_FP16_LAYOUTS,
     .model = {"lenet", 1, 28, 28, 8, TOL_FP16_LENET, 0, FP16_MODEL_SCALE}},
    {T_MODEL_LAYOUTS, M_BF16_LAYOUTS,
     .model = {"resnet18", 3, 32, 32, 4, TOL_BF16_RESNET, 0, 1.0f}},
    {T_MODEL_LAYOUTS, M_FP16_LAYOUTS,
     .model = {"resnet18", 3, 32, 32, 4, TOL_FP16_RESNET, 0, FP16_MODEL_SCALE}},
};

/* One case on t's backend: the float32 modes' test of its op, or the half modes'. models: the CPU
 * backend whole models compare with (the reference would take a minute on resnet18); nchw: the
 * NCHW twin of t's NHWC backend, for the layout cases. */
static void run_case(struct t *t, const struct tcase *c, struct backend *models, struct t *nchw)
{
	int f32 = t->dt == BE_F32;
	struct t tm;

	switch (c->op) {
	case T_ACT:
		test_act_h(t);
		break;
	case T_CONV:
		if (f32)
			test_conv(t, c->conv);
		else
			test_conv_h(t, c->conv);
		break;
	case T_BN:
		if (f32)
			test_bn(t, c->bn);
		else
			test_bn_h(t, c->bn);
		break;
	case T_BN_OWN:
		test_bn_h_own(t, c->bn, c->arg);
		break;
	case T_POOL:
		if (f32)
			test_pool(t, c->pool, c->arg);
		else
			test_pool_h(t, c->pool, c->arg);
		break;
	case T_LINEAR:
		if (f32)
			test_linear(t, c->lin);
		else
			test_linear_h(t, c->lin);
		break;
	case T_ELTWISE:
		if (f32)
			test_eltwise(t, c->n);
		else
			test_eltwise_h(t, c->n);
		break;
	case T_INPUT_U8:
		test_input_u8(t, c->dims[0], c->dims[1], c->dims[2], c->dims[3]);
		break;
	case T_GAP:
		if (f32)
			test_gap(t, c->dims[0], c->dims[1], c->dims[2]);
		else
			test_gap_h(t, c->dims[0], c->dims[1], c->dims[2]);
		break;
	case T_XENT:
		if (f32)
			test_xent(t, c->xent.n, c->xent.classes, c->xent.smoothing, c->xent.scale);
		else
			test_xent_h(t, c->xent.n, c->xent.classes, c->xent.smoothing,
				    c->xent.scale);
		break;
	case T_XENT_KNOWN:
		test_xent_known(t);
		break;
	case T_XENT_NAN:
		test_xent_nan(t);
		break;
	case T_ERRORS:
		test_errors(t);
		break;
	case T_ARENA:
		test_arena(t);
		break;
	case T_ASYNC:
		test_async(t);
		break;
	case T_MODEL: /* against the CPU backend in every mode */
		tm = *t;
		tm.cpu = models;
		test_model(&tm, c->model.name, c->model.c, c->model.h, c->model.w, c->model.n,
			   c->model.tol, c->model.gtol, c->model.scale);
		break;
	case T_LAYOUT_MEMORY:
		test_layout_memory(t, nchw);
		break;
	case T_CONV_LAYOUTS:
		test_conv_layouts(t, nchw, c->conv);
		break;
	case T_MODEL_LAYOUTS:
		test_model_layouts(t, nchw, c->model.name, c->model.c, c->model.h, c->model.w,
				   c->model.n, c->model.tol, c->model.scale);
		break;
	}
}

/* Every case of mode, in the table's order, on t's backend (run_case says what models and nchw
 * are). */
static void run_cases(struct t *t, unsigned mode, struct backend *models, struct t *nchw)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (cases[i].modes & mode)
			run_case(t, &cases[i], models, nchw);
}

int main(void)
{
	struct dp_error err = {""};
	int count = be_cuda_device_count(&err);

	if (count <= 0)
		plan_skip_all("no CUDA GPU visible: %s", err.text);

	struct chk_rng rng = {chk_seed()};
	struct backend *cpu = be_cpu_create(1, &err);
	if (!cpu)
		bail_out("be_cpu_create(1): %s", err.text);

	/* Deterministic first: the full suite, with bit-for-bit repeats. */
	setenv("DPTRAIN_CUDA_DETERMINISTIC", "1", 1);
	struct backend *det = be_cuda_create(0, NULL, &err);
	unsetenv("DPTRAIN_CUDA_DETERMINISTIC");
	if (!ok(det != NULL, "be_cuda_create(0) with DPTRAIN_CUDA_DETERMINISTIC=1: %s",
		det ? det->ops->name : err.text))
		bail_out("%s", err.text);
	ok(strcmp(det->ops->name, "cuda") == 0, "the backend is called cuda");
	ok(det->act_dtype == BE_F32 && det->act_size == sizeof(float) && !det->ops->act_import &&
	       !det->ops->act_export && !det->ops->act_accum,
	   "float32 mode: act_size 4, acts are float arrays (no act_import/export/accum)");
	diag("%d GPU(s) visible; comparing with the cpu backend (%s)", count, cpu->ops->name);
	struct t td = {cpu, det, &rng, "cuda (deterministic)", 1, 0, BE_F32, 0};
	run_cases(&td, M_F32_DET, cpu, NULL);
	det->ops->destroy(det);

	/* cuDNN's fastest algorithms, deterministic or not: the same results within tolerance. */
	struct backend *fast = be_cuda_create(0, NULL, &err);
	if (ok(fast != NULL, "be_cuda_create(0): %s", fast ? fast->ops->name : err.text)) {
		struct t tf = {cpu, fast, &rng, "cuda", 0, 0, BE_F32, 0};
		run_cases(&tf, M_F32_FAST, cpu, NULL);
		fast->ops->destroy(fast);
	}

	test_conv_find();

	/* TF32 tensor cores: the same suite within TF32's tolerances */
	struct be_cuda_opts to = {.tf32 = 1};
	struct backend *tf = be_cuda_create(0, &to, &err);
	if (ok(tf != NULL, "be_cuda_create(0, tf32): %s", tf ? tf->ops->name : err.text)) {
		struct t tt = {cpu, tf, &rng, "cuda (tf32)", 0, 1, BE_F32, 0};
		run_cases(&tt, M_F32_TF32, cpu, NULL);
		tf->ops->destroy(tf);
	}

	/* bf16 and fp16 activations against the reference backend, in NHWC (the default) and
	 * NCHW (DPTRAIN_CUDA_LAYOUT=nchw): the full suite with deterministic algorithms, then the
	 * convolutions with cuDNN's fastest. */
	struct backend *ref = be_ref_create(&err);
	if (!ref)
		bail_out("be_ref_create: %s", err.text);
	/* i: bf16 then fp16, each NHWC then NCHW, each deterministic then fast */
	static const unsigned half_modes[8] = {
	    M_BF16_NHWC, M_BF16_NHWC_FAST, M_BF16_NCHW, M_BF16_NCHW_FAST,
	    M_FP16_NHWC, M_FP16_NHWC_FAST, M_FP16_NCHW, M_FP16_NCHW_FAST,
	};
	for (int i = 0; i < 8; i++) {
		enum be_dtype dt = i < 4 ? BE_BF16 : BE_F16;
		int nchw = (i >> 1) & 1, determ = !(i & 1);
		struct be_cuda_opts ho = {.deterministic = determ, .act_dtype = dt};
		char name[64];
		snprintf(name, sizeof(name), "cuda %s%s%s", dt == BE_BF16 ? "bf16" : "fp16",
			 nchw ? " nchw" : "", determ ? " (deterministic)" : "");
		if (nchw)
			setenv("DPTRAIN_CUDA_LAYOUT", "nchw", 1);
		struct backend *hb = be_cuda_create(0, &ho, &err);
		unsetenv("DPTRAIN_CUDA_LAYOUT");
		if (!ok(hb != NULL, "be_cuda_create(0, %s): %s", name,
			hb ? hb->ops->name : err.text))
			continue;
		struct t th = {ref, hb, &rng, name, determ, 0, dt, !nchw};
		run_cases(&th, half_modes[i], cpu, NULL);
		hb->ops->destroy(hb);
	}
	/* The two layouts against each other (DPTRAIN_CUDA_LAYOUT=nhwc: the default, by name). */
	for (int i = 0; i < 2; i++) {
		enum be_dtype dt = i ? BE_F16 : BE_BF16;
		struct be_cuda_opts ho = {.deterministic = 1, .act_dtype = dt};
		char nn[64], nc[64];
		struct dp_error err2 = {""};
		snprintf(nn, sizeof(nn), "cuda %s nhwc", i ? "fp16" : "bf16");
		snprintf(nc, sizeof(nc), "cuda %s nchw", i ? "fp16" : "bf16");
		setenv("DPTRAIN_CUDA_LAYOUT", "nhwc", 1);
		struct backend *hn = be_cuda_create(0, &ho, &err);
		setenv("DPTRAIN_CUDA_LAYOUT", "nchw", 1);
		struct backend *hc = be_cuda_create(0, &ho, &err2);
		unsetenv("DPTRAIN_CUDA_LAYOUT");
		if (ok(hn && hc, "be_cuda_create(0, %s) and (0, %s): %s%s", nn, nc,
		       hn ? "" : err.text, hc ? "" : err2.text)) {
			struct t tn = {ref, hn, &rng, nn, 1, 0, dt, 1};
			struct t tc = {ref, hc, &rng, nc, 1, 0, dt, 0};
			run_cases(&tn, i ? M_FP16_LAYOUTS : M_BF16_LAYOUTS, cpu, &tc);
		}
		if (hn)
			hn->ops->destroy(hn);
		if (hc)
			hc->ops->destroy(hc);
	}
	struct be_cuda_opts lo = {.act_dtype = BE_BF16};
	setenv("DPTRAIN_CUDA_LAYOUT", "chw", 1);
	struct backend *bad_lay = be_cuda_create(0, &lo, &err);
	unsetenv("DPTRAIN_CUDA_LAYOUT");
	ok(bad_lay == NULL, "be_cuda_create refuses DPTRAIN_CUDA_LAYOUT=chw");
	like(err.text, "DPTRAIN_CUDA_LAYOUT=chw: expected nchw or nhwc",
	     "and names the variable and its values: %s", err.text);
	if (bad_lay)
		bad_lay->ops->destroy(bad_lay);
	/* float32 stays NCHW: acts are float arrays whatever the variable says */
	setenv("DPTRAIN_CUDA_LAYOUT", "nhwc", 1);
	struct backend *f32n = be_cuda_create(0, NULL, &err);
	unsetenv("DPTRAIN_CUDA_LAYOUT");
	ok(f32n && !f32n->ops->act_import && f32n->act_size == sizeof(float),
	   "float32 mode with DPTRAIN_CUDA_LAYOUT=nhwc: float arrays, no act_import: %s",
	   f32n ? "" : err.text);
	if (f32n)
		f32n->ops->destroy(f32n);
	struct be_cuda_opts bo = {.act_dtype = (enum be_dtype)7};
	struct backend *bad_dt = be_cuda_create(0, &bo, &err);
	ok(bad_dt == NULL, "be_cuda_create refuses an unknown act_dtype");
	like(err.text, "act_dtype 7", "and names it: %s", err.text);
	if (bad_dt)
		bad_dt->ops->destroy(bad_dt);
	ref->ops->destroy(ref);

	struct backend *bad = be_cuda_create(count, NULL, &err);
	ok(bad == NULL, "be_cuda_create(%d) fails: one past the last GPU", count);
	like(err.text, "does not exist", "and says why: %s", err.text);
	if (bad)
		bad->ops->destroy(bad);
	cpu->ops->destroy(cpu);
	return done_testing();
}
