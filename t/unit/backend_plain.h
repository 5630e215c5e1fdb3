/* backend_plain.h — a test double that shows a backend with acts of its own (a layout, a type:
 * backend.h's act_import and act_export) as one with float32 NCHW acts: each op imports its act
 * inputs (and the outputs it blends into with beta) from the caller's float32 NCHW arrays into
 * the wrapped backend's acts, runs the wrapped op, and exports its act outputs back. Parameters
 * and their gradients are float32 in both and pass through. So t/unit/backend.c's comparisons
 * with the reference backend run unchanged on the CPU backend's blocked layouts and on its
 * bfloat16 mode, reordered back to plain in the test. Header-only (static) so that it does not
 * become a test program of its own. */
#ifndef DPTRAIN_BACKEND_PLAIN_H
#define DPTRAIN_BACKEND_PLAIN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/backend/backend.h"

struct plain {
	struct backend be; /* first: the ops get &plain.be */
	struct backend *in;
	struct backend_ops ops;
};

#define PLAIN_IN (((struct plain *)be)->in)

/* The shapes of an op's act input x and output y (n, c, h, w), kept beside it: ops are
 * opaque. */
#define PLAIN_MAX_OPS 256
static struct {
	const struct be_op *op;
	int x[4], y[4];
} plain_shapes[PLAIN_MAX_OPS];

static void plain_note(const struct be_op *op, int n, int c, int h, int w, int yc, int yh, int yw)
{
	for (int i = 0; i < PLAIN_MAX_OPS; i++)
		if (!plain_shapes[i].op || plain_shapes[i].op == op) {
			plain_shapes[i].op = op;
			memcpy(plain_shapes[i].x, (int[]){n, c, h, w}, sizeof(plain_shapes[i].x));
			memcpy(plain_shapes[i].y, (int[]){n, yc, yh, yw},
			       sizeof(plain_shapes[i].y));
			return;
		}
	fprintf(stderr, "backend_plain.h: more than %d ops\n", PLAIN_MAX_OPS);
	abort();
}

static int plain_find(const struct be_op *op)
{
	for (int i = 0; i < PLAIN_MAX_OPS; i++)
		if (plain_shapes[i].op == op)
			return i;
	fprintf(stderr, "backend_plain.h: an op it did not create\n");
	abort();
}

static int plain_rc(struct backend *be, int rc)
{
	if (rc < 0)
		errprintf(&be->err, "%s", PLAIN_IN->err.text);
	return rc;
}

/* A new act of shape s in the wrapped backend holding the float32 NCHW values x (NULL: left
 * unset; x NULL and want: NULL). */
static void *plain_import(struct backend *be, const float *x, const int *s, int want)
{
	struct backend *in = PLAIN_IN;
	size_t cnt = (size_t)s[0] * s[1] * s[2] * s[3];
	void *a;

	if (!x && !want)
		return NULL;
	a = in->ops->alloc(in, (cnt ? cnt : 1) * in->act_size);
	if (a && x && in->ops->act_import(in, x, a, s[0], s[1], s[2], s[3]) < 0) {
		in->ops->free(in, a);
		return NULL;
	}
	return a;
}

/* The output act for y: its values imported where the op blends into them (beta != 0). */
static void *plain_out(struct backend *be, const float *y, const int *s, float beta)
{
	return y ? plain_import(be, beta != 0.0f ? y : NULL, s, 1) : NULL;
}

static int plain_export(struct backend *be, const void *a, float *y, const int *s)
{
	if (!a || !y)
		return 0;
	return PLAIN_IN->ops->act_export(PLAIN_IN, a, y, s[0], s[1], s[2], s[3]);
}

static void plain_drop(struct backend *be, void *a)
{
	if (a)
		PLAIN_IN->ops->free(PLAIN_IN, a);
}

static void *plain_alloc(struct backend *be, size_t bytes)
{
	return PLAIN_IN->ops->alloc(PLAIN_IN, bytes);
}
static void plain_free(struct backend *be, void *p)
{
	PLAIN_IN->ops->free(PLAIN_IN, p);
}
static int plain_copy(struct backend *be, void *d, const void *s, size_t b)
{
	return plain_rc(be, PLAIN_IN->ops->to_host(PLAIN_IN, d, s, b));
}
static int plain_fill(struct backend *be, float *x, float v, size_t n)
{
	return plain_rc(be, PLAIN_IN->ops->fill(PLAIN_IN, x, v, n));
}
static int plain_sync(struct backend *be)
{
	return plain_rc(be, PLAIN_IN->ops->sync(PLAIN_IN));
}
static int plain_axpby(struct backend *be, float a, const float *x, float b, float *y, size_t n)
{
	return plain_rc(be, PLAIN_IN->ops->axpby(PLAIN_IN, a, x, b, y, n));
}
static int plain_sumsq(struct backend *be, const float *x, size_t n, double *out)
{
	return plain_rc(be, PLAIN_IN->ops->sumsq(PLAIN_IN, x, n, out));
}
static int plain_input_u8(struct backend *be, const uint8_t *src, float *dst, int n, int c, int h,
			  int w, const float *mean, const float *std)
{
	return plain_rc(be, PLAIN_IN->ops->input_u8(PLAIN_IN, src, dst, n, c, h, w, mean, std));
}
static void plain_op_destroy(struct backend *be, struct be_op *op)
{
	if (op)
		plain_shapes[plain_find(op)].op = NULL;
	PLAIN_IN->ops->op_destroy(PLAIN_IN, op);
}

static struct be_op *plain_conv_create(struct backend *be, struct be_conv_desc *d)
{
	struct be_op *op = PLAIN_IN->ops->conv_create(PLAIN_IN, d);
	if (op)
		plain_note(op, d->n, d->c, d->h, d->w, d->k, d->oh, d->ow);
	plain_rc(be, op ? 0 : -1);
	return op;
}
static struct be_op *plain_bn_create(struct backend *be, const struct be_bn_desc *d)
{
	struct be_op *op = PLAIN_IN->ops->bn_create(PLAIN_IN, d);
	if (op)
		plain_note(op, d->n, d->c, d->h, d->w, d->c, d->h, d->w);
	plain_rc(be, op ? 0 : -1);
	return op;
}
static struct be_op *plain_pool_create(struct backend *be, struct be_pool_desc *d)
{
	struct be_op *op = PLAIN_IN->ops->pool_create(PLAIN_IN, d);
	if (op)
		plain_note(op, d->n, d->c, d->h, d->w, d->c, d->oh, d->ow);
	plain_rc(be, op ? 0 : -1);
	return op;
}
static struct be_op *plain_linear_create(struct backend *be, const struct be_linear_desc *d)
{
	struct be_op *op = PLAIN_IN->ops->linear_create(PLAIN_IN, d);
	if (op && d->c > 0)
		plain_note(op, d->n, d->c, d->h, d->w, d->out, 1, 1);
	else if (op)
		plain_note(op, d->n, d->in, 1, 1, d->out, 1, 1);
	plain_rc(be, op ? 0 : -1);
	return op;
}

/* Convolution and linear layers share their arguments' shapes. */
typedef int (*plain_fwd_fn)(struct backend *, struct be_op *, const float *, const float *,
			    const float *, float *);
typedef int (*plain_bwd_fn)(struct backend *, struct be_op *, const float *, const float *, float *,
			    float);
typedef int (*plain_bww_fn)(struct backend *, struct be_op *, const float *, const float *, float *,
			    float *, float);

static int plain_wfwd(struct backend *be, struct be_op *op, const float *x, const float *w,
		      const float *b, float *y, plain_fwd_fn f)
{
	int s = plain_find(op), rc = -1;
	void *ax = plain_import(be, x, plain_shapes[s].x, 1),
	     *ay = plain_out(be, y, plain_shapes[s].y, 0);
	if (ax && ay && (rc = plain_rc(be, f(PLAIN_IN, op, ax, w, b, ay))) == 0)
		rc = plain_export(be, ay, y, plain_shapes[s].y);
	plain_drop(be, ax), plain_drop(be, ay);
	return rc;
}
static int plain_wbwd(struct backend *be, struct be_op *op, const float *dy, const float *w,
		      float *dx, float beta, plain_bwd_fn f)
{
	int s = plain_find(op), rc = -1;
	void *ady = plain_import(be, dy, plain_shapes[s].y, 1);
	void *adx = plain_out(be, dx, plain_shapes[s].x, beta);
	if (ady && adx && (rc = plain_rc(be, f(PLAIN_IN, op, ady, w, adx, beta))) == 0)
		rc = plain_export(be, adx, dx, plain_shapes[s].x);
	plain_drop(be, ady), plain_drop(be, adx);
	return rc;
}
static int plain_wbww(struct backend *be, struct be_op *op, const float *x, const float *dy,
		      float *dw, float *db, float beta, plain_bww_fn f)
{
	int s = plain_find(op), rc = -1;
	void *ax = plain_import(be, x, plain_shapes[s].x, 1);
	void *ady = plain_import(be, dy, plain_shapes[s].y, 1);
	if (ax && ady)
		rc = plain_rc(be, f(PLAIN_IN, op, ax, ady, dw, db, beta));
	plain_drop(be, ax), plain_drop(be, ady);
	return rc;
}

static int plain_conv_fwd(struct backend *be, struct be_op *op, const float *x, const float *w,
			  const float *b, float *y)
{
	return plain_wfwd(be, op, x, w, b, y, PLAIN_IN->ops->conv_fwd);
}
static int plain_conv_bwd_data(struct backend *be, struct be_op *op, const float *dy,
			       const float *w, float *dx, float beta)
{
	return plain_wbwd(be, op, dy, w, dx, beta, PLAIN_IN->ops->conv_bwd_data);
}
static int plain_conv_bwd_weights(struct backend *be, struct be_op *op, const float *x,
				  const float *dy, float *dw, float *db, float beta)
{
	return plain_wbww(be, op, x, dy, dw, db, beta, PLAIN_IN->ops->conv_bwd_weights);
}
static int plain_linear_fwd(struct backend *be, struct be_op *op, const float *x, const float *w,
			    const float *b, float *y)
{
	return plain_wfwd(be, op, x, w, b, y, PLAIN_IN->ops->linear_fwd);
}
static int plain_linear_bwd_data(struct backend *be, struct be_op *op, const float *dy,
				 const float *w, float *dx, float beta)
{
	return plain_wbwd(be, op, dy, w, dx, beta, PLAIN_IN->ops->linear_bwd_data);
}
static int plain_linear_bwd_weights(struct backend *be, struct be_op *op, const float *x,
				    const float *dy, float *dw, float *db, float beta)
{
	return plain_wbww(be, op, x, dy, dw, db, beta, PLAIN_IN->ops->linear_bwd_weights);
}

static int plain_bn_fwd(struct backend *be, struct be_op *op, const float *x, const float *z,
			const float *g, const float *b, float *y, float *sm, float *si, float *rm,
			float *rv, float mom, int train)
{
	int s = plain_find(op), rc = -1;
	const int *sh = plain_shapes[s].x;
	void *ax = plain_import(be, x, sh, 1), *az = plain_import(be, z, sh, 0);
	void *ay = plain_out(be, y, sh, 0);
	if (ax && (az || !z) && ay) {
		rc = train ? PLAIN_IN->ops->bn_fwd_train(PLAIN_IN, op, ax, az, g, b, ay, sm, si, rm,
							 rv, mom)
			   : PLAIN_IN->ops->bn_fwd_infer(PLAIN_IN, op, ax, az, g, b, rm, rv, ay);
		if (plain_rc(be, rc) == 0)
			rc = plain_export(be, ay, y, sh);
	}
	plain_drop(be, ax), plain_drop(be, az), plain_drop(be, ay);
	return rc;
}
static int plain_bn_fwd_train(struct backend *be, struct be_op *op, const float *x, const float *z,
			      const float *g, const float *b, float *y, float *sm, float *si,
			      float *rm, float *rv, float mom)
{
	return plain_bn_fwd(be, op, x, z, g, b, y, sm, si, rm, rv, mom, 1);
}
static int plain_bn_fwd_infer(struct backend *be, struct be_op *op, const float *x, const float *z,
			      const float *g, const float *b, const float *rm, const float *rv,
			      float *y)
{
	return plain_bn_fwd(be, op, x, z, g, b, y, NULL, NULL, (float *)rm, (float *)rv, 0.0f, 0);
}
static int plain_bn_bwd(struct backend *be, struct be_op *op, const float *x, const float *y,
			const float *dy, const float *g, const float *sm, const float *si,
			float *dx, float *dz, float bz, float *dg, float *db, float beta)
{
	int s = plain_find(op), rc = -1;
	const int *sh = plain_shapes[s].x;
	void *ax = plain_import(be, x, sh, 1), *ay = plain_import(be, y, sh, 1);
	void *ady = plain_import(be, dy, sh, 1), *adx = plain_out(be, dx, sh, beta);
	void *adz = plain_out(be, dz, sh, bz);
	if (ax && ay && ady && (adx || !dx) && (adz || !dz) &&
	    (rc = plain_rc(be, PLAIN_IN->ops->bn_bwd(PLAIN_IN, op, ax, ay, ady, g, sm, si, adx, adz,
						     bz, dg, db, beta))) == 0 &&
	    (rc = plain_export(be, adx, dx, sh)) == 0)
		rc = plain_export(be, adz, dz, sh);
	plain_drop(be, ax), plain_drop(be, ay), plain_drop(be, ady), plain_drop(be, adx);
	plain_drop(be, adz);
	return rc;
}

static int plain_pool_fwd(struct backend *be, struct be_op *op, const float *x, float *y)
{
	int s = plain_find(op), rc = -1;
	void *ax = plain_import(be, x, plain_shapes[s].x, 1),
	     *ay = plain_out(be, y, plain_shapes[s].y, 0);
	if (ax && ay && (rc = plain_rc(be, PLAIN_IN->ops->pool_fwd(PLAIN_IN, op, ax, ay))) == 0)
		rc = plain_export(be, ay, y, plain_shapes[s].y);
	plain_drop(be, ax), plain_drop(be, ay);
	return rc;
}
static int plain_pool_bwd(struct backend *be, struct be_op *op, const float *x, const float *y,
			  const float *dy, float *dx, float beta)
{
	int s = plain_find(op), rc = -1;
	const int *sx = plain_shapes[s].x, *sy = plain_shapes[s].y;
	void *ax = plain_import(be, x, sx, 1), *ay = plain_import(be, y, sy, 1);
	void *ady = plain_import(be, dy, sy, 1), *adx = plain_out(be, dx, sx, beta);
	if (ax && ay && ady && adx &&
	    (rc = plain_rc(be, PLAIN_IN->ops->pool_bwd(PLAIN_IN, op, ax, ay, ady, adx, beta))) == 0)
		rc = plain_export(be, adx, dx, sx);
	plain_drop(be, ax), plain_drop(be, ay), plain_drop(be, ady), plain_drop(be, adx);
	return rc;
}

/* Element-wise ops: n values as an n x 1 x 1 x 1 act (one channel: every layout is plain). */
static int plain_relu_fwd(struct backend *be, const float *x, float *y, size_t n)
{
	const int s[4] = {(int)n, 1, 1, 1};
	int rc = -1;
	void *ax = plain_import(be, x, s, 1), *ay = plain_out(be, y, s, 0);
	if (ax && ay && (rc = plain_rc(be, PLAIN_IN->ops->relu_fwd(PLAIN_IN, ax, ay, n))) == 0)
		rc = plain_export(be, ay, y, s);
	plain_drop(be, ax), plain_drop(be, ay);
	return rc;
}
static int plain_relu_bwd(struct backend *be, const float *y, const float *dy, float *dx, size_t n,
			  float beta)
{
	const int s[4] = {(int)n, 1, 1, 1};
	int rc = -1;
	void *ay = plain_import(be, y, s, 1), *ady = plain_import(be, dy, s, 1);
	void *adx = plain_out(be, dx, s, beta);
	if (ay && ady && adx &&
	    (rc = plain_rc(be, PLAIN_IN->ops->relu_bwd(PLAIN_IN, ay, ady, adx, n, beta))) == 0)
		rc = plain_export(be, adx, dx, s);
	plain_drop(be, ay), plain_drop(be, ady), plain_drop(be, adx);
	return rc;
}
static int plain_add(struct backend *be, const float *a, const float *b, float *y, size_t n)
{
	const int s[4] = {(int)n, 1, 1, 1};
	int rc = -1;
	void *aa = plain_import(be, a, s, 1), *ab = plain_import(be, b, s, 1);
	void *ay = plain_out(be, y, s, 0);
	if (aa && ab && ay && (rc = plain_rc(be, PLAIN_IN->ops->add(PLAIN_IN, aa, ab, ay, n))) == 0)
		rc = plain_export(be, ay, y, s);
	plain_drop(be, aa), plain_drop(be, ab), plain_drop(be, ay);
	return rc;
}

static int plain_gap_fwd(struct backend *be, const float *x, float *y, int n, int c, int hw)
{
	const int sx[4] = {n, c, hw, 1}, sy[4] = {n, c, 1, 1};
	int rc = -1;
	void *ax = plain_import(be, x, sx, 1), *ay = plain_out(be, y, sy, 0);
	if (ax && ay &&
	    (rc = plain_rc(be, PLAIN_IN->ops->gap_fwd(PLAIN_IN, ax, ay, n, c, hw))) == 0)
		rc = plain_export(be, ay, y, sy);
	plain_drop(be, ax), plain_drop(be, ay);
	return rc;
}
static int plain_gap_bwd(struct backend *be, const float *dy, float *dx, int n, int c, int hw,
			 float beta)
{
	const int sx[4] = {n, c, hw, 1}, sy[4] = {n, c, 1, 1};
	int rc = -1;
	void *ady = plain_import(be, dy, sy, 1), *adx = plain_out(be, dx, sx, beta);
	if (ady && adx &&
	    (rc = plain_rc(be, PLAIN_IN->ops->gap_bwd(PLAIN_IN, ady, adx, n, c, hw, beta))) == 0)
		rc = plain_export(be, adx, dx, sx);
	plain_drop(be, ady), plain_drop(be, adx);
	return rc;
}

static int plain_xent(struct backend *be, const float *logits, const int32_t *labels, int n,
		      int classes, float smoothing, float scale, float *loss, int *correct,
		      float *dlogits)
{
	const int s[4] = {n > 0 ? n : 0, classes > 0 ? classes : 0, 1, 1};
	int rc = -1;
	void *al = plain_import(be, logits, s, 1), *ad = plain_out(be, dlogits, s, 0);
	if (al && (ad || !dlogits) &&
	    (rc = plain_rc(be, PLAIN_IN->ops->xent(PLAIN_IN, al, labels, n, classes, smoothing,
						   scale, loss, correct, ad))) == 0)
		rc = plain_export(be, ad, dlogits, s);
	plain_drop(be, al), plain_drop(be, ad);
	return rc;
}

static void plain_destroy(struct backend *be)
{
	free(be);
}

static const struct backend_ops plain_ops = {
    .alloc = plain_alloc,
    .free = plain_free,
    .to_host = plain_copy,
    .from_host = plain_copy,
    .fill = plain_fill,
    .sync = plain_sync,
    .conv_create = plain_conv_create,
    .conv_fwd = plain_conv_fwd,
    .conv_bwd_data = plain_conv_bwd_data,
    .conv_bwd_weights = plain_conv_bwd_weights,
    .bn_create = plain_bn_create,
    .bn_fwd_train = plain_bn_fwd_train,
    .bn_fwd_infer = plain_bn_fwd_infer,
    .bn_bwd = plain_bn_bwd,
    .pool_create = plain_pool_create,
    .pool_fwd = plain_pool_fwd,
    .pool_bwd = plain_pool_bwd,
    .linear_create = plain_linear_create,
    .linear_fwd = plain_linear_fwd,
    .linear_bwd_data = plain_linear_bwd_data,
    .linear_bwd_weights = plain_linear_bwd_weights,
    .op_destroy = plain_op_destroy,
    .relu_fwd = plain_relu_fwd,
    .relu_bwd = plain_relu_bwd,
    .add = plain_add,
    .axpby = plain_axpby,
    .gap_fwd = plain_gap_fwd,
    .gap_bwd = plain_gap_bwd,
    .xent = plain_xent,
    .sumsq = plain_sumsq,
    .destroy = plain_destroy,
    .input_u8 = plain_input_u8,
};

/* The view of `in` (which must have act_import and act_export, and stays the caller's to
 * destroy, after the view), called name. */
static inline struct backend *plain_view(struct backend *in, const char *name)
{
	struct plain *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->ops = plain_ops;
	p->ops.name = name;
	p->in = in;
	p->be.ops = &p->ops;
	p->be.act_dtype = BE_F32;
	p->be.act_size = sizeof(float);
	p->be.threads = in->threads;
	return &p->be;
}

#endif
