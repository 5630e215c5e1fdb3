/* cuda_pool.cu — the CUDA backend's pooling: max pooling with PyTorch's ties, average pooling,
 * global average pool, on own kernels (cuda_pool_kernels.cuh). Nothing else. */
#ifdef HAVE_CUDNN /* without cuDNN there is no CUDA backend (backend_cuda.cu) */

#include <stdio.h>

#include "trainer/backend/cuda_internal.h"
#include "trainer/backend/cuda_pool_kernels.cuh"

template <typename T>
static int gap_fwd_t(struct backend *be, const float *x, float *y, int n, int c, int hw)
{
	const char *fn = "gap_fwd";
	char shape[64];
	size_t planes;

	snprintf(shape, sizeof(shape), "n=%d c=%d hw=%d%s", n, c, hw, dt_suffix(be));
	if (n <= 0 || c <= 0 || hw <= 0)
		return be_errf(be, "gap_fwd(%s): sizes must be positive", shape);
	planes = (size_t)n * c;
	LAUNCH(k_gap_fwd<T>, grid_for(planes), CU_THREADS, (const T *)x, (T *)y, planes, c, hw,
	       ctx_of(be)->nhwc);
	return 0;
}

static int cu_gap_fwd(struct backend *be, const float *x, float *y, int n, int c, int hw)
{
	return ACT_CALL(be, gap_fwd_t, be, x, y, n, c, hw);
}

template <typename T>
static int gap_bwd_t(struct backend *be, const float *dy, float *dx, int n, int c, int hw,
		     float beta)
{
	const char *fn = "gap_bwd";
	char shape[64];
	size_t total;

	snprintf(shape, sizeof(shape), "n=%d c=%d hw=%d%s", n, c, hw, dt_suffix(be));
	if (n <= 0 || c <= 0 || hw <= 0)
		return be_errf(be, "gap_bwd(%s): sizes must be positive", shape);
	total = (size_t)n * c * hw;
	LAUNCH(k_gap_bwd<T>, grid_for(total), CU_THREADS, (const T *)dy, (T *)dx, total, c, hw,
	       ctx_of(be)->nhwc, beta);
	return 0;
}

static int cu_gap_bwd(struct backend *be, const float *dy, float *dx, int n, int c, int hw,
		      float beta)
{
	return ACT_CALL(be, gap_bwd_t, be, dy, dx, n, c, hw, beta);
}

static struct be_op *cu_pool_create(struct backend *be, struct be_pool_desc *d)
{
	struct be_op *op;

	if (be_pool_check(be, d) < 0 || !(op = op_new(be, CU_POOL, "pool_create")))
		return NULL;
	op->d.pool = *d;
	be_pool_str(d, op->shape, sizeof(op->shape));
	op_shape(be, op);
	return op;
}

/* Own kernels, not cuDNN's: the op table fixes where max pooling sends the gradient of ties
 * (the first maximum in scan order), and the gather form needs no atomics. */
template <typename T>
static int pool_fwd_t(struct backend *be, struct be_op *op, const float *x, float *y)
{
	const char *fn = "pool_fwd", *shape;
	const struct be_pool_desc *d;
	size_t n;

	if (!op_is(be, op, CU_POOL, fn))
		return -1;
	shape = op->shape;
	d = &op->d.pool;
	n = (size_t)d->n * d->c * d->oh * d->ow;
	LAUNCH(k_pool_fwd<T>, grid_for(n), CU_THREADS, *d, (const T *)x, (T *)y, n,
	       ctx_of(be)->nhwc);
	return 0;
}

static int cu_pool_fwd(struct backend *be, struct be_op *op, const float *x, float *y)
{
	return ACT_CALL(be, pool_fwd_t, be, op, x, y);
}

template <typename T>
static int pool_bwd_t(struct backend *be, struct be_op *op, const float *x, const float *y,
		      const float *dy, float *dx, float beta)
{
	const char *fn = "pool_bwd", *shape;
	const struct be_pool_desc *d;
	size_t n;

	if (!op_is(be, op, CU_POOL, fn))
		return -1;
	shape = op->shape;
	d = &op->d.pool;
	n = (size_t)d->n * d->c * d->h * d->w;
	if (!y && d->kind == BE_POOL_MAX)
		return be_errf(
		    be,
		    "pool_bwd(%s): y is NULL (max pooling's backward reads the forward's "
		    "output)",
		    shape);
	LAUNCH(k_pool_bwd<T>, grid_for(n), CU_THREADS, *d, (const T *)x, (const T *)y,
	       (const T *)dy, (T *)dx, n, beta, ctx_of(be)->nhwc);
	return 0;
}

static int cu_pool_bwd(struct backend *be, struct be_op *op, const float *x, const float *y,
		       const float *dy, float *dx, float beta)
{
	return ACT_CALL(be, pool_bwd_t, be, op, x, y, dy, dx, beta);
}

/* The op table's pooling slots. */
void cu_pool_register(struct backend_ops *o)
{
	o->pool_create = cu_pool_create;
	o->pool_fwd = cu_pool_fwd;
	o->pool_bwd = cu_pool_bwd;
	o->gap_fwd = cu_gap_fwd;
	o->gap_bwd = cu_gap_bwd;
}

#endif /* HAVE_CUDNN */
