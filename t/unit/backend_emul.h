/* backend_emul.h — a test double of a 16-bit-activation backend on the CPU: wraps a float32
 * backend (the reference) and stores every activation as bfloat16 or IEEE half, the way the CUDA
 * backend's bf16/fp16 modes do (backend.h: acts in be->act_dtype, parameters and gradients in
 * float32). Each op widens its act inputs to float32, runs the wrapped op, and rounds its act
 * outputs once to the 16-bit type (nearest even); convolutions and linear layers also see their
 * weights rounded to the 16-bit type, and their weight gradients are rounded to it before they
 * are added to the float32 gradient, as the GPU computes them.
 *
 * It exists so that the CPU test suite runs nn.c's activation handling (sizes from act_size,
 * act_import of the batch, act_accum at residual joins, logits that are not floats) where no GPU
 * is, and gives the numbers a 16-bit activation path should produce. It is not a backend
 * dptrain uses. Header-only (static) so that it does not become a test program of its own. */
#ifndef DPTRAIN_BACKEND_EMUL_H
#define DPTRAIN_BACKEND_EMUL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/backend/backend.h"

struct emul {
	struct backend be; /* first: the ops get &emul.be */
	struct backend *in;
	enum be_dtype t;
};

static inline struct emul *emul_of(struct backend *be)
{
	return (struct emul *)be;
}

static inline uint16_t emul_to16(enum be_dtype t, float f)
{
	if (t == BE_F16) {
		_Float16 h = (_Float16)f;
		uint16_t u;
		memcpy(&u, &h, 2);
		return u;
	}
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one */
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static inline float emul_from16(enum be_dtype t, uint16_t v)
{
	if (t == BE_F16) {
		_Float16 h;
		memcpy(&h, &v, 2);
		return (float)h;
	}
	uint32_t u = (uint32_t)v << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* float32 copy of n act elements (NULL in, NULL out); the caller frees it. */
static inline float *emul_widen(struct backend *be, const void *a, size_t n)
{
	if (!a)
		return NULL;
	float *f = malloc((n ? n : 1) * sizeof(float));
	const uint16_t *h = a;
	for (size_t i = 0; f && i < n; i++)
		f[i] = emul_from16(emul_of(be)->t, h[i]);
	return f;
}

/* float32 buffer for an output of n act elements the op blends into with beta: its old values
 * where beta is not 0 (never read otherwise); NULL for a NULL output. */
static inline float *emul_out(struct backend *be, const void *a, size_t n, float beta)
{
	if (!a)
		return NULL;
	return beta != 0.0f ? emul_widen(be, a, n) : malloc((n ? n : 1) * sizeof(float));
}

static inline void emul_narrow(struct backend *be, const float *f, void *a, size_t n)
{
	uint16_t *h = a;
	for (size_t i = 0; a && i < n; i++)
		h[i] = emul_to16(emul_of(be)->t, f[i]);
}

/* float32 values rounded to the 16-bit type (weights as the GPU's conv/linear see them). */
static inline float *emul_round(struct backend *be, const float *x, size_t n)
{
	if (!x)
		return NULL;
	float *f = malloc((n ? n : 1) * sizeof(float));
	for (size_t i = 0; f && i < n; i++)
		f[i] = emul_from16(emul_of(be)->t, emul_to16(emul_of(be)->t, x[i]));
	return f;
}

static inline int emul_rc(struct backend *be, int rc)
{
	if (rc < 0)
		errprintf(&be->err, "%s", emul_of(be)->in->err.text);
	return rc;
}

/* Weight gradient as the GPU makes it: computed with beta 0, rounded to the 16-bit type, then
 * added to the float32 gradient (g = r + beta g). */
static inline void emul_grad_in(struct backend *be, const float *r, float *g, size_t n, float beta)
{
	for (size_t i = 0; g && i < n; i++) {
		float v = emul_from16(emul_of(be)->t, emul_to16(emul_of(be)->t, r[i]));
		g[i] = beta == 0.0f ? v : v + beta * g[i];
	}
}

#define EMUL_IN emul_of(be)->in

static void *emul_alloc(struct backend *be, size_t bytes)
{
	return EMUL_IN->ops->alloc(EMUL_IN, bytes);
}
static void emul_free(struct backend *be, void *p)
{
	EMUL_IN->ops->free(EMUL_IN, p);
}
static int emul_to_host(struct backend *be, void *d, const void *s, size_t b)
{
	return EMUL_IN->ops->to_host(EMUL_IN, d, s, b);
}
static int emul_from_host(struct backend *be, void *d, const void *s, size_t b)
{
	return EMUL_IN->ops->from_host(EMUL_IN, d, s, b);
}
static int emul_fill(struct backend *be, float *x, float v, size_t n)
{
	return emul_rc(be, EMUL_IN->ops->fill(EMUL_IN, x, v, n));
}
static int emul_sync(struct backend *be)
{
	return emul_rc(be, EMUL_IN->ops->sync(EMUL_IN));
}
static int emul_axpby(struct backend *be, float a, const float *x, float b, float *y, size_t n)
{
	return emul_rc(be, EMUL_IN->ops->axpby(EMUL_IN, a, x, b, y, n));
}
static int emul_sumsq(struct backend *be, const float *x, size_t n, double *out)
{
	return emul_rc(be, EMUL_IN->ops->sumsq(EMUL_IN, x, n, out));
}
static void emul_op_destroy(struct backend *be, struct be_op *op)
{
	EMUL_IN->ops->op_destroy(EMUL_IN, op);
}

/* The wrapped backend's ops are the ops (descriptors carry no type). */
static struct be_op *emul_conv_create(struct backend *be, struct be_conv_desc *d)
{
	struct be_op *op = EMUL_IN->ops->conv_create(EMUL_IN, d);
	emul_rc(be, op ? 0 : -1);
	return op;
}
static struct be_op *emul_bn_create(struct backend *be, const struct be_bn_desc *d)
{
	struct be_op *op = EMUL_IN->ops->bn_create(EMUL_IN, d);
	emul_rc(be, op ? 0 : -1);
	return op;
}
static struct be_op *emul_pool_create(struct backend *be, struct be_pool_desc *d)
{
	struct be_op *op = EMUL_IN->ops->pool_create(EMUL_IN, d);
	emul_rc(be, op ? 0 : -1);
	return op;
}
static struct be_op *emul_linear_create(struct backend *be, const struct be_linear_desc *d)
{
	struct be_op *op = EMUL_IN->ops->linear_create(EMUL_IN, d);
	emul_rc(be, op ? 0 : -1);
	return op;
}

/* The op is opaque; the emulation keeps the sizes it needs in a side table keyed by op. */
#define EMUL_MAX_OPS 1024
static struct {
	const struct be_op *op;
	size_t x, y, w, b; /* act elements in and out; weight and bias floats */
} emul_sizes[EMUL_MAX_OPS];

static void emul_note(const struct be_op *op, size_t x, size_t y, size_t w, size_t b)
{
	for (int i = 0; i < EMUL_MAX_OPS; i++)
		if (!emul_sizes[i].op || emul_sizes[i].op == op) {
			emul_sizes[i].op = op;
			emul_sizes[i].x = x, emul_sizes[i].y = y;
			emul_sizes[i].w = w, emul_sizes[i].b = b;
			return;
		}
	fprintf(stderr, "backend_emul.h: more than %d ops\n", EMUL_MAX_OPS);
	abort();
}

static int emul_find(const struct be_op *op)
{
	for (int i = 0; i < EMUL_MAX_OPS && emul_sizes[i].op; i++)
		if (emul_sizes[i].op == op)
			return i;
	fprintf(stderr, "backend_emul.h: an op it did not create\n");
	abort();
}

static struct be_op *emul_conv_create_noted(struct backend *be, struct be_conv_desc *d)
{
	struct be_op *op = emul_conv_create(be, d);
	if (op)
		emul_note(op, (size_t)d->n * d->c * d->h * d->w,
			  (size_t)d->n * d->k * d->oh * d->ow, (size_t)d->k * d->c * d->kh * d->kw,
			  d->has_bias ? (size_t)d->k : 0);
	return op;
}
static struct be_op *emul_bn_create_noted(struct backend *be, const struct be_bn_desc *d)
{
	struct be_op *op = emul_bn_create(be, d);
	size_t n = (size_t)d->n * d->c * d->h * d->w;
	if (op)
		emul_note(op, n, n, (size_t)d->c, (size_t)d->c);
	return op;
}
static struct be_op *emul_pool_create_noted(struct backend *be, struct be_pool_desc *d)
{
	struct be_op *op = emul_pool_create(be, d);
	if (op)
		emul_note(op, (size_t)d->n * d->c * d->h * d->w,
			  (size_t)d->n * d->c * d->oh * d->ow, 0, 0);
	return op;
}
static struct be_op *emul_linear_create_noted(struct backend *be, const struct be_linear_desc *d)
{
	struct be_op *op = emul_linear_create(be, d);
	if (op)
		emul_note(op, (size_t)d->n * d->in, (size_t)d->n * d->out, (size_t)d->in * d->out,
			  d->has_bias ? (size_t)d->out : 0);
	return op;
}
static void emul_op_destroy_noted(struct backend *be, struct be_op *op)
{
	int i = emul_find(op), last = i;
	while (last + 1 < EMUL_MAX_OPS && emul_sizes[last + 1].op)
		last++;
	emul_sizes[i] = emul_sizes[last];
	emul_sizes[last].op = NULL;
	emul_op_destroy(be, op);
}

/* Convolution and linear forward and data backward have the same arguments: the wrapped op
 * runs on widened acts and weights rounded to the 16-bit type. */
typedef int (*emul_wfwd_fn)(struct backend *, struct be_op *, const float *, const float *,
			    const float *, float *);
typedef int (*emul_wbwd_fn)(struct backend *, struct be_op *, const float *, const float *, float *,
			    float);

static int emul_wfwd(struct backend *be, struct be_op *op, const float *x, const float *w,
		     const float *b, float *y, emul_wfwd_fn f)
{
	int s = emul_find(op), rc = -1;
	float *xf = emul_widen(be, x, emul_sizes[s].x), *wf = emul_round(be, w, emul_sizes[s].w);
	float *yf = malloc(emul_sizes[s].y * sizeof(float));
	if (xf && wf && yf && (rc = emul_rc(be, f(emul_of(be)->in, op, xf, wf, b, yf))) == 0)
		emul_narrow(be, yf, y, emul_sizes[s].y);
	free(xf), free(wf), free(yf);
	return rc;
}
static int emul_wbwd(struct backend *be, struct be_op *op, const float *dy, const float *w,
		     float *dx, float beta, emul_wbwd_fn f)
{
	int s = emul_find(op), rc = -1;
	float *dyf = emul_widen(be, dy, emul_sizes[s].y), *wf = emul_round(be, w, emul_sizes[s].w);
	float *dxf = emul_out(be, dx, emul_sizes[s].x, beta);
	if (dyf && wf && dxf && (rc = emul_rc(be, f(emul_of(be)->in, op, dyf, wf, dxf, beta))) == 0)
		emul_narrow(be, dxf, dx, emul_sizes[s].x);
	free(dyf), free(wf), free(dxf);
	return rc;
}
static int emul_conv_fwd(struct backend *be, struct be_op *op, const float *x, const float *w,
			 const float *b, float *y)
{
	return emul_wfwd(be, op, x, w, b, y, EMUL_IN->ops->conv_fwd);
}
static int emul_conv_bwd_data(struct backend *be, struct be_op *op, const float *dy, const float *w,
			      float *dx, float beta)
{
	return emul_wbwd(be, op, dy, w, dx, beta, EMUL_IN->ops->conv_bwd_data);
}
static int emul_conv_bwd_weights(struct backend *be, struct be_op *op, const float *x,
				 const float *dy, float *dw, float *db, float beta)
{
	int s = emul_find(op), rc = -1;
	float *xf = emul_widen(be, x, emul_sizes[s].x), *dyf = emul_widen(be, dy, emul_sizes[s].y);
	float *r = malloc((emul_sizes[s].w + emul_sizes[s].b + 1) * sizeof(float));
	if (xf && dyf && r &&
	    (rc = emul_rc(be, EMUL_IN->ops->conv_bwd_weights(EMUL_IN, op, xf, dyf, r,
							     db ? r + emul_sizes[s].w : NULL,
							     0.0f))) == 0) {
		emul_grad_in(be, r, dw, emul_sizes[s].w, beta);
		/* the bias gradient is a float32 sum of dy on the GPU: not rounded */
		for (size_t i = 0; db && i < emul_sizes[s].b; i++)
			db[i] = beta == 0.0f ? r[emul_sizes[s].w + i]
					     : r[emul_sizes[s].w + i] + beta * db[i];
	}
	free(xf), free(dyf), free(r);
	return rc;
}

static int emul_bn_fwd_train(struct backend *be, struct be_op *op, const float *x, const float *z,
			     const float *g, const float *b, float *y, float *sm, float *si,
			     float *rm, float *rv, float mom)
{
	int s = emul_find(op), rc = -1;
	float *xf = emul_widen(be, x, emul_sizes[s].x), *zf = emul_widen(be, z, emul_sizes[s].x);
	float *yf = malloc(emul_sizes[s].y * sizeof(float));
	if (xf && (zf || !z) && yf &&
	    (rc = emul_rc(be, EMUL_IN->ops->bn_fwd_train(EMUL_IN, op, xf, zf, g, b, yf, sm, si, rm,
							 rv, mom))) == 0)
		emul_narrow(be, yf, y, emul_sizes[s].y);
	free(xf), free(zf), free(yf);
	return rc;
}
static int emul_bn_fwd_infer(struct backend *be, struct be_op *op, const float *x, const float *z,
			     const float *g, const float *b, const float *rm, const float *rv,
			     float *y)
{
	int s = emul_find(op), rc = -1;
	float *xf = emul_widen(be, x, emul_sizes[s].x), *zf = emul_widen(be, z, emul_sizes[s].x);
	float *yf = malloc(emul_sizes[s].y * sizeof(float));
	if (xf && (zf || !z) && yf &&
	    (rc = emul_rc(be, EMUL_IN->ops->bn_fwd_infer(EMUL_IN, op, xf, zf, g, b, rm, rv, yf))) ==
		0)
		emul_narrow(be, yf, y, emul_sizes[s].y);
	free(xf), free(zf), free(yf);
	return rc;
}
static int emul_bn_bwd(struct backend *be, struct be_op *op, const float *x, const float *y,
		       const float *dy, const float *g, const float *sm, const float *si, float *dx,
		       float *dz, float bz, float *dg, float *db, float beta)
{
	int s = emul_find(op), rc = -1;
	size_t n = emul_sizes[s].x;
	float *xf = emul_widen(be, x, n), *yf = emul_widen(be, y, n), *dyf = emul_widen(be, dy, n);
	float *dxf = emul_out(be, dx, n, beta), *dzf = emul_out(be, dz, n, bz);
	if (xf && yf && dyf && (dxf || !dx) && (dzf || !dz) &&
	    (rc = emul_rc(be, EMUL_IN->ops->bn_bwd(EMUL_IN, op, xf, yf, dyf, g, sm, si, dxf, dzf,
						   bz, dg, db, beta))) == 0) {
		emul_narrow(be, dxf, dx, n);
		emul_narrow(be, dzf, dz, n);
	}
	free(xf), free(yf), free(dyf), free(dxf), free(dzf);
	return rc;
}

static int emul_pool_fwd(struct backend *be, struct be_op *op, const float *x, float *y)
{
	int s = emul_find(op), rc = -1;
	float *xf = emul_widen(be, x, emul_sizes[s].x),
	      *yf = malloc(emul_sizes[s].y * sizeof(float));
	if (xf && yf && (rc = emul_rc(be, EMUL_IN->ops->pool_fwd(EMUL_IN, op, xf, yf))) == 0)
		emul_narrow(be, yf, y, emul_sizes[s].y);
	free(xf), free(yf);
	return rc;
}
static int emul_pool_bwd(struct backend *be, struct be_op *op, const float *x, const float *y,
			 const float *dy, float *dx, float beta)
{
	int s = emul_find(op), rc = -1;
	size_t nx = emul_sizes[s].x, ny = emul_sizes[s].y;
	float *xf = emul_widen(be, x, nx), *yf = emul_widen(be, y, ny),
	      *dyf = emul_widen(be, dy, ny);
	float *dxf = emul_out(be, dx, nx, beta);
	if (xf && yf && dyf && dxf &&
	    (rc = emul_rc(be, EMUL_IN->ops->pool_bwd(EMUL_IN, op, xf, yf, dyf, dxf, beta))) == 0)
		emul_narrow(be, dxf, dx, nx);
	free(xf), free(yf), free(dyf), free(dxf);
	return rc;
}

static int emul_linear_fwd(struct backend *be, struct be_op *op, const float *x, const float *w,
			   const float *b, float *y)
{
	return emul_wfwd(be, op, x, w, b, y, EMUL_IN->ops->linear_fwd);
}
static int emul_linear_bwd_data(struct backend *be, struct be_op *op, const float *dy,
				const float *w, float *dx, float beta)
{
	return emul_wbwd(be, op, dy, w, dx, beta, EMUL_IN->ops->linear_bwd_data);
}
/* cuBLAS writes the linear weight gradient in float32 directly (16-bit inputs, float32 C). */
static int emul_linear_bwd_weights(struct backend *be, struct be_op *op, const float *x,
				   const float *dy, float *dw, float *db, float beta)
{
	int s = emul_find(op), rc;
	float *xf = emul_widen(be, x, emul_sizes[s].x), *dyf = emul_widen(be, dy, emul_sizes[s].y);
	rc = xf && dyf
		 ? emul_rc(be, EMUL_IN->ops->linear_bwd_weights(EMUL_IN, op, xf, dyf, dw, db, beta))
		 : -1;
	free(xf), free(dyf);
	return rc;
}

static int emul_relu_fwd(struct backend *be, const float *x, float *y, size_t n)
{
	float *f = emul_widen(be, x, n);
	int rc = f ? emul_rc(be, EMUL_IN->ops->relu_fwd(EMUL_IN, f, f, n)) : -1;
	if (rc == 0)
		emul_narrow(be, f, y, n);
	free(f);
	return rc;
}
static int emul_relu_bwd(struct backend *be, const float *y, const float *dy, float *dx, size_t n,
			 float beta)
{
	float *yf = emul_widen(be, y, n), *dyf = emul_widen(be, dy, n);
	float *dxf = emul_out(be, dx, n, beta);
	int rc = yf && dyf && dxf
		     ? emul_rc(be, EMUL_IN->ops->relu_bwd(EMUL_IN, yf, dyf, dxf, n, beta))
		     : -1;
	if (rc == 0)
		emul_narrow(be, dxf, dx, n);
	free(yf), free(dyf), free(dxf);
	return rc;
}
static int emul_add(struct backend *be, const float *a, const float *b, float *y, size_t n)
{
	float *af = emul_widen(be, a, n), *bf = emul_widen(be, b, n);
	int rc = af && bf ? emul_rc(be, EMUL_IN->ops->add(EMUL_IN, af, bf, af, n)) : -1;
	if (rc == 0)
		emul_narrow(be, af, y, n);
	free(af), free(bf);
	return rc;
}
static int emul_gap_fwd(struct backend *be, const float *x, float *y, int n, int c, int hw)
{
	float *xf = emul_widen(be, x, (size_t)n * c * hw),
	      *yf = malloc((size_t)n * c * sizeof(float));
	int rc = xf && yf ? emul_rc(be, EMUL_IN->ops->gap_fwd(EMUL_IN, xf, yf, n, c, hw)) : -1;
	if (rc == 0)
		emul_narrow(be, yf, y, (size_t)n * c);
	free(xf), free(yf);
	return rc;
}
static int emul_gap_bwd(struct backend *be, const float *dy, float *dx, int n, int c, int hw,
			float beta)
{
	size_t nx = (size_t)n * c * hw;
	float *dyf = emul_widen(be, dy, (size_t)n * c);
	float *dxf = emul_out(be, dx, nx, beta);
	int rc =
	    dyf && dxf ? emul_rc(be, EMUL_IN->ops->gap_bwd(EMUL_IN, dyf, dxf, n, c, hw, beta)) : -1;
	if (rc == 0)
		emul_narrow(be, dxf, dx, nx);
	free(dyf), free(dxf);
	return rc;
}
static int emul_xent(struct backend *be, const float *logits, const int32_t *labels, int n,
		     int classes, float smoothing, float scale, float *loss, int *correct,
		     float *dlogits)
{
	size_t nl = (size_t)n * classes;
	float *lf = emul_widen(be, logits, nl), *df = dlogits ? malloc(nl * sizeof(float)) : NULL;
	int rc = lf && (df || !dlogits)
		     ? emul_rc(be, EMUL_IN->ops->xent(EMUL_IN, lf, labels, n, classes, smoothing,
						      scale, loss, correct, df))
		     : -1;
	if (rc == 0)
		emul_narrow(be, df, dlogits, nl);
	free(lf), free(df);
	return rc;
}

static int emul_act_import(struct backend *be, const float *x, void *y, int n, int c, int h, int w)
{
	emul_narrow(be, x, y, (size_t)n * c * h * w);
	return 0;
}
static int emul_act_export(struct backend *be, const void *x, float *y, int n, int c, int h, int w)
{
	size_t k = (size_t)n * c * h * w;
	for (size_t i = 0; i < k; i++)
		y[i] = emul_from16(emul_of(be)->t, ((const uint16_t *)x)[i]);
	return 0;
}
static int emul_act_accum(struct backend *be, const void *dy, void *g, size_t n, float beta)
{
	const uint16_t *a = dy;
	uint16_t *b = g;
	for (size_t i = 0; i < n; i++) {
		float v = emul_from16(emul_of(be)->t, a[i]);
		if (beta != 0.0f)
			v = v + beta * emul_from16(emul_of(be)->t, b[i]);
		b[i] = emul_to16(emul_of(be)->t, v);
	}
	return 0;
}

static void emul_destroy(struct backend *be)
{
	EMUL_IN->ops->destroy(EMUL_IN);
	free(emul_of(be));
}

#undef EMUL_IN

static const struct backend_ops emul_ops = {
    .name = "emul16",
    .alloc = emul_alloc,
    .free = emul_free,
    .to_host = emul_to_host,
    .from_host = emul_from_host,
    .fill = emul_fill,
    .sync = emul_sync,
    .conv_create = emul_conv_create_noted,
    .conv_fwd = emul_conv_fwd,
    .conv_bwd_data = emul_conv_bwd_data,
    .conv_bwd_weights = emul_conv_bwd_weights,
    .bn_create = emul_bn_create_noted,
    .bn_fwd_train = emul_bn_fwd_train,
    .bn_fwd_infer = emul_bn_fwd_infer,
    .bn_bwd = emul_bn_bwd,
    .pool_create = emul_pool_create_noted,
    .pool_fwd = emul_pool_fwd,
    .pool_bwd = emul_pool_bwd,
    .linear_create = emul_linear_create_noted,
    .linear_fwd = emul_linear_fwd,
    .linear_bwd_data = emul_linear_bwd_data,
    .linear_bwd_weights = emul_linear_bwd_weights,
    .op_destroy = emul_op_destroy_noted,
    .relu_fwd = emul_relu_fwd,
    .relu_bwd = emul_relu_bwd,
    .add = emul_add,
    .axpby = emul_axpby,
    .gap_fwd = emul_gap_fwd,
    .gap_bwd = emul_gap_bwd,
    .xent = emul_xent,
    .sumsq = emul_sumsq,
    .destroy = emul_destroy,
    .act_import = emul_act_import,
    .act_export = emul_act_export,
    .act_accum = emul_act_accum,
};

/* Takes over `inner` (a float32 host-memory backend): destroying the result destroys it. */
static inline struct backend *emul_create(struct backend *inner, enum be_dtype t)
{
	struct emul *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->in = inner;
	e->t = t;
	e->be.ops = &emul_ops;
	e->be.act_dtype = t;
	e->be.act_size = 2;
	e->be.threads = inner->threads;
	return &e->be;
}

#endif
