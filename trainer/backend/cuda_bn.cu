/* cuda_bn.cu — the CUDA backend's batch norm: cuDNN's plain and Ex calls (float32, fp16) with the
 * plan each op takes and steps down from, the own kernels' passes (bf16) on their planned grid,
 * the fused ReLU and residual join. Nothing but batch norm; its kernels are cuda_bn_kernels.cuh. */
#ifdef HAVE_CUDNN /* without cuDNN there is no CUDA backend (backend_cuda.cu) */

#include <stdint.h>

#include "trainer/backend/cuda_bn_kernels.cuh"
#include "trainer/backend/cuda_eltwise_kernels.cuh"
#include "trainer/backend/cuda_internal.h"

/* Batch norm, with the reference's (PyTorch's) formulas: saved inverse std, running variance
 * unbiased, running = (1 - momentum) running + momentum stat. Which path each mode takes:
 * - bf16 (both layouts): own kernels (cuda_bn_kernels.cuh, bn_own_* below). cuDNN does not
 *   document its batch norm calls for bfloat16 data (PyTorch never gives cuDNN a bf16 batch norm:
 *   it runs its own kernels), so they may refuse it at run time or take a slow path. Three
 *   kernels a pass: per-slab partial sums in double, a fixed-order reduction per channel that
 *   finishes the statistics, an element-wise pass with the ReLU and the residual add fused (y
 *   rounded once); the same bits every run, in deterministic mode or not.
 * - fp16: cuDNN with half x and y and float32 parameters and statistics (the descriptor cuDNN
 *   derives for half data); training in NHWC through its persistent kernels (below).
 * - float32: cuDNN's CUDNN_BATCHNORM_SPATIAL, which agrees with the CPU backends to float32
 *   rounding.
 * On the cuDNN paths the fused ReLU and the fused residual add are own kernels after the forward
 * (bn_fwd_tail), except where cuDNN fuses them:
 * In fp16 NHWC training runs cudnnBatchNormalizationForwardTrainingEx in
 * CUDNN_BATCHNORM_SPATIAL_PERSISTENT, cuDNN's NHWC kernels, with the ReLU (BN_ACTIVATION) or the
 * add and the ReLU (BN_ADD_ACTIVATION) inside it where cuDNN fuses them: C a multiple of 4. The
 * add without a ReLU, and the other channel counts, run BN alone and bn_fwd_tail. The fused
 * result is rounded once, not after the BN and again after the add: not the bits of the separate
 * ops (t/unit/backend_cuda.c checks that within rounding). Where cuDNN refuses a plan (its size
 * queries here, or NOT_SUPPORTED from the call), the next one down is used: BN alone, then the
 * plain calls in CUDNN_BATCHNORM_SPATIAL. A refusal is any status of NOT_SUPPORTED's category
 * (cuDNN 9's sub-codes). The backward always masks dy itself (y > 0) and runs BackwardEx with
 * BN alone in the forward's mode, whose saved statistics it takes: a fused backward would need
 * the forward's reserve space, and ops keep nothing between calls (the reserve space is scratch
 * of the forward call). Where BN alone would need a reserve space too, or BackwardEx refuses,
 * the plain backward runs in that mode. Inference is the plain call with NHWC descriptors and
 * bn_fwd_tail. */

/* Sizes the Ex calls' workspaces and the forward's reserve space for bnOps `ops`, and makes it
 * the op's plan; else cuDNN's status, the op unchanged. */
static cudnnStatus_t bn_plan(struct backend *be, struct be_op *op, cudnnBatchNormOps_t ops)
{
	const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
	cudnnHandle_t dnn = ctx_of(be)->dnn;
	cudnnActivationDescriptor_t ad = ops == CUDNN_BATCHNORM_OPS_BN ? NULL : op->ad;
	cudnnTensorDescriptor_t zd = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION ? op->xd : NULL;
	size_t fw = 0, bw = 0, rs = 0, rs_bn = 0;
	cudnnStatus_t s;

	if ((s = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
		 dnn, mode, ops, op->xd, zd, op->xd, op->bd, ad, &fw)) != CUDNN_STATUS_SUCCESS ||
	    (s = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
		 dnn, mode, ops, ad, op->xd, &rs)) != CUDNN_STATUS_SUCCESS ||
	    (s = cudnnGetBatchNormalizationBackwardExWorkspaceSize(
		 dnn, mode, CUDNN_BATCHNORM_OPS_BN, op->xd, op->xd, op->xd, NULL, op->xd, op->bd,
		 NULL, &bw)) != CUDNN_STATUS_SUCCESS ||
	    (s = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
		 dnn, mode, CUDNN_BATCHNORM_OPS_BN, NULL, op->xd, &rs_bn)) != CUDNN_STATUS_SUCCESS)
		return s;
	op->bn_ex = 1;
	/* BackwardEx with BN alone and no reserve space (the forward's is gone by then) only
	 * where BN alone needs none; else the plain backward in the same mode */
	op->bn_bwd_ex = rs_bn == 0;
	op->bn_mode = mode;
	op->bn_ops = ops;
	op->bn_fwd_ws = fw;
	op->bn_bwd_ws = bw;
	op->bn_reserve = rs;
	return CUDNN_STATUS_SUCCESS;
}

/* The plain calls in CUDNN_BATCHNORM_SPATIAL: float32, fp16 NCHW, and fp16 NHWC where cuDNN
 * refuses the Ex plans. */
static void bn_plain(struct be_op *op)
{
	op->bn_ex = op->bn_bwd_ex = 0;
	op->bn_mode = CUDNN_BATCHNORM_SPATIAL;
	op->bn_ops = CUDNN_BATCHNORM_OPS_BN;
	op->bn_fwd_ws = op->bn_bwd_ws = op->bn_reserve = 0;
}

/* The own kernels' grid for a shape (bn_geom_plan): the vector kernels' where the layout and
 * channel count allow them (NHWC, a multiple of BN_VCB channels) and DPTRAIN_CUDA_BN_VEC is not
 * 0; a call whose tensors are not 16-byte aligned (never in training: cudaMalloc's blocks are)
 * runs the scalar kernels on their own grid (bn_call_geom). */
static void bn_geom_for(const struct cu_ctx *ctx, const struct be_bn_desc *d, struct bn_geom *g)
{
	bn_geom_plan(d, ctx->nhwc, ctx->nhwc && ctx->bn_vec && d->c % BN_VCB == 0, ctx->bn_wave, g);
}

static int aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* The grid of one call: the op's, or the scalar kernels' where a tensor the vector kernels would
 * read or write is not 16-byte aligned. */
static struct bn_geom bn_call_geom(const struct cu_ctx *ctx, const struct be_op *op, const void *a,
				   const void *b, const void *c, const void *d, const void *e)
{
	struct bn_geom g = op->bn_geom;

	if (g.vec &&
	    !(aligned16(a) && aligned16(b) && aligned16(c) && aligned16(d) && aligned16(e)))
		bn_geom_plan(&op->d.bn, ctx->nhwc, 0, ctx->bn_wave, &g);
	return g;
}

static struct be_op *cu_bn_create(struct backend *be, const struct be_bn_desc *d)
{
	const char *fn = "bn_create";
	struct be_op *op;
	const char *shape;
	cudnnStatus_t s;

	if (be_bn_check(be, d) < 0 || !(op = op_new(be, CU_BN, fn)))
		return NULL;
	op->d.bn = *d;
	be_bn_str(d, op->shape, sizeof(op->shape));
	shape = op_shape(be, op);
	bn_plain(op);
	if (ctx_of(be)->dtype == BE_BF16) {
		op->bn_own = 1;
		bn_geom_for(ctx_of(be), d, &op->bn_geom);
		return op;
	}
	if (tensor4d(be, &op->xd, d->n, d->c, d->h, d->w, fn, shape) < 0)
		goto fail;
	if ((s = cudnnCreateTensorDescriptor(&op->bd)) != CUDNN_STATUS_SUCCESS ||
	    (s = cudnnDeriveBNTensorDescriptor(op->bd, op->xd, CUDNN_BATCHNORM_SPATIAL)) !=
		CUDNN_STATUS_SUCCESS) {
		be_errf(be, "bn_create(%s): cudnnDeriveBNTensorDescriptor: %s", shape,
			cudnnGetErrorString(s));
		goto fail;
	}
	/* device.deterministic keeps the plain calls: cuDNN does not document the persistent
	 * kernels' bits as the same from run to run */
	if (ctx_of(be)->nhwc && ctx_of(be)->dtype == BE_F16 && !ctx_of(be)->deterministic) {
		cudnnBatchNormOps_t want = CUDNN_BATCHNORM_OPS_BN;
		if (d->fuse_relu && d->c % 4 == 0)
			want = d->fuse_add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
					   : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
		/* NaN in, 0 out: the ReLU of k_relu_fwd and k_add_relu */
		if ((s = cudnnCreateActivationDescriptor(&op->ad)) != CUDNN_STATUS_SUCCESS ||
		    (s = cudnnSetActivationDescriptor(op->ad, CUDNN_ACTIVATION_RELU,
						      CUDNN_NOT_PROPAGATE_NAN, 0.0)) !=
			CUDNN_STATUS_SUCCESS) {
			be_errf(be, "bn_create(%s): cudnnSetActivationDescriptor(RELU): %s", shape,
				cudnnGetErrorString(s));
			goto fail;
		}
		if (bn_plan(be, op, want) != CUDNN_STATUS_SUCCESS &&
		    (want == CUDNN_BATCHNORM_OPS_BN ||
		     bn_plan(be, op, CUDNN_BATCHNORM_OPS_BN) != CUDNN_STATUS_SUCCESS))
			bn_plain(op);
	}
	return op;
fail:
	cu_op_destroy(be, op);
	return NULL;
}

/* A refusal: cuDNN 9 reports NOT_SUPPORTED with sub-codes (..._SHAPE, ..._LAYOUT, ...) of which
 * the category is NOT_SUPPORTED; nothing ran. */
#ifndef CUDNN_STATUS_CATEGORY
#define CUDNN_STATUS_CATEGORY(s) (s)
#endif
static int dnn_refused(cudnnStatus_t s)
{
	return CUDNN_STATUS_CATEGORY((int)s) == (int)CUDNN_STATUS_NOT_SUPPORTED;
}

static const char *bn_ops_name(cudnnBatchNormOps_t ops)
{
	return ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION ? "BN_ADD_ACTIVATION"
	       : ops == CUDNN_BATCHNORM_OPS_BN_ACTIVATION   ? "BN_ACTIVATION"
							    : "BN";
}

/* z is given exactly when the op adds a residual (the reference's check and message), and is not
 * y: cuDNN writes bn(x) into y before z is added (the own kernels would not mind, but every mode
 * keeps one contract). */
static int bn_check_z(struct backend *be, const struct be_op *op, const float *z, const float *y,
		      const char *fn)
{
	if (be_bn_z_check(be, &op->d.bn, z, fn) < 0)
		return -1;
	if (z && z == y)
		return be_errf(be, "%s(%s): z must not be the output y: pass a separate buffer", fn,
			       op->shape);
	return 0;
}

/* After cuDNN wrote y = bn(x): y = relu?(y + z), or relu(y). */
template <typename T>
static int bn_fwd_tail(struct backend *be, const struct be_op *op, const float *z, float *y,
		       const char *fn)
{
	const char *shape = op->shape;
	const struct be_bn_desc *d = &op->d.bn;
	size_t n = (size_t)d->n * d->c * d->h * d->w;

	if (d->fuse_add)
		LAUNCH(k_add_relu<T>, grid_for(n), CU_THREADS, (T *)y, (const T *)z, n,
		       d->fuse_relu);
	else if (d->fuse_relu)
		LAUNCH(k_relu_fwd<T>, grid_for(n), CU_THREADS, (const T *)y, (T *)y, n);
	return 0;
}

/* ---- Own kernels (bf16) ---- */

/* Blocks of the final kernels: BN_LANES threads per channel. */
static unsigned bn_final_blocks(const struct bn_geom *g)
{
	unsigned per = CU_THREADS / BN_LANES;

	return (unsigned)(((size_t)g->chans + per - 1) / per);
}

/* One block of arena scratch: the partial sums (2 x chans x slabs doubles of grid g), then
 * ncoef x chans float coefficients at *coef. The caller frees it after issuing the kernels that
 * use it (the stream orders its reuse). */
static double *bn_scratch(struct backend *be, const struct bn_geom *g, int ncoef, float **coef,
			  const char *fn)
{
	size_t np = 2 * (size_t)g->chans * g->slabs;
	double *p = (double *)arena_alloc(
	    be, np * sizeof(double) + (size_t)ncoef * g->chans * sizeof(float), fn);

	*coef = p ? (float *)(p + np) : NULL;
	return p;
}

/* The forward's element-wise pass on grid g: the vector kernel (with bits, the ReLU's mask kept
 * there too) or the scalar one. */
template <typename T>
static int bn_apply(struct backend *be, const struct bn_geom *g, const float *x, const float *z,
		    const float *coef, float *y, int relu, uint8_t *bits, const char *fn,
		    const char *shape)
{
	dim3 grid(g->chunks, g->slabs);

	if (g->vec)
		LAUNCH(k_bn_apply_v<T>, grid, CU_THREADS, *g, (const T *)x, (const T *)z, coef,
		       (T *)y, relu, bits);
	else
		LAUNCH(k_bn_apply<T>, grid, CU_THREADS, *g, (const T *)x, (const T *)z, coef,
		       (T *)y, relu);
	return 0;
}

/* Reads x twice (the partial sums, then y), z once, writes y once. */
template <typename T>
static int bn_own_fwd_train(struct backend *be, struct be_op *op, const float *x, const float *z,
			    const float *gamma, const float *beta_, float *y, float *save_mean,
			    float *save_invstd, float *running_mean, float *running_var,
			    float momentum)
{
	const char *fn = "bn_fwd_train", *shape = op->shape;
	const struct bn_geom gg = bn_call_geom(ctx_of(be), op, x, z, y, NULL, NULL), *g = &gg;
	const struct be_bn_desc *d = &op->d.bn;
	dim3 grid(g->chunks, g->slabs);
	float *coef;
	double *part = bn_scratch(be, g, 3, &coef, fn);
	uint8_t *bits = NULL;
	int rv = -1;

	if (!part)
		return -1;
	op->bn_bits_y = NULL;
	/* the ReLU's mask as bits, made once an op (the bits of x's n x c x h x w) */
	if (g->vec && d->fuse_relu && ctx_of(be)->bn_bits) {
		if (!op->bn_bits)
			op->bn_bits = (uint8_t *)arena_alloc(
			    be, (size_t)d->n * d->c * d->h * d->w / BN_VEC, fn);
		if (!op->bn_bits)
			goto out;
		bits = op->bn_bits;
	}
	if (g->vec)
		LAUNCH_TRY(k_bn_stats_v<T>, grid, CU_THREADS, *g, (const T *)x, part);
	else
		LAUNCH_TRY(k_bn_stats<T>, grid, CU_THREADS, *g, (const T *)x, part);
	LAUNCH_TRY(k_bn_stats_final, bn_final_blocks(g), CU_THREADS, *g, part, d->eps, momentum,
		   gamma, beta_, save_mean, save_invstd, running_mean, running_var, coef);
	if (bn_apply<T>(be, g, x, z, coef, y, d->fuse_relu, bits, fn, shape) < 0)
		goto out;
	op->bn_bits_y = bits ? y : NULL;
	rv = 0;
out:
	arena_free(be, part);
	return rv;
}

template <typename T>
static int bn_own_fwd_infer(struct backend *be, struct be_op *op, const float *x, const float *z,
			    const float *gamma, const float *beta_, const float *running_mean,
			    const float *running_var, float *y)
{
	const char *fn = "bn_fwd_infer", *shape = op->shape;
	const struct bn_geom gg = bn_call_geom(ctx_of(be), op, x, z, y, NULL, NULL), *g = &gg;
	const struct be_bn_desc *d = &op->d.bn;
	float *coef = (float *)arena_alloc(be, 3 * sizeof(float) * g->chans, fn);
	int rv = -1;

	if (!coef)
		return -1;
	op->bn_bits_y = NULL; /* y may be the last training forward's: its bits no longer hold */
	LAUNCH_TRY(k_bn_infer_coef, grid_for((size_t)g->chans), CU_THREADS, g->chans, d->eps, gamma,
		   beta_, running_mean, running_var, coef);
	if (bn_apply<T>(be, g, x, z, coef, y, d->fuse_relu, NULL, fn, shape) < 0)
		goto out;
	rv = 0;
out:
	arena_free(be, coef);
	return rv;
}

/* Reads x and dy (and y with fuse_relu, or on the vector grid the bits the training forward that
 * wrote this y kept) twice, writes dx and dz once; no scratch copy of an aliased dx is needed
 * (k_bn_bwd_apply reads each index before writing it). */
template <typename T>
static int bn_own_bwd(struct backend *be, struct be_op *op, const float *x, const float *y,
		      const float *dy, const float *gamma, const float *save_mean,
		      const float *save_invstd, float *dx, float *dz, float bz, float *dgamma,
		      float *dbeta, float beta)
{
	const char *fn = "bn_bwd", *shape = op->shape;
	const T *mask = op->d.bn.fuse_relu ? (const T *)y : NULL;
	const struct bn_geom gg = bn_call_geom(ctx_of(be), op, x, mask, dy, dx, dz), *g = &gg;
	dim3 grid(g->chunks, g->slabs);
	float *coef;
	double *part = bn_scratch(be, g, 4, &coef, fn);
	int rv = -1;

	/* the forward's bits, where the last training forward wrote this very y */
	const uint8_t *bits =
	    g->vec && mask && op->bn_bits && op->bn_bits_y == y ? op->bn_bits : NULL;
	const T *vmask = bits ? NULL : mask;

	if (!part)
		return -1;
	if (g->vec)
		LAUNCH_TRY(k_bn_bwd_stats_v<T>, grid, CU_THREADS, *g, (const T *)x, vmask, bits,
			   (const T *)dy, save_mean, part);
	else
		LAUNCH_TRY(k_bn_bwd_stats<T>, grid, CU_THREADS, *g, (const T *)x, mask,
			   (const T *)dy, save_mean, part);
	LAUNCH_TRY(k_bn_bwd_final, bn_final_blocks(g), CU_THREADS, *g, part, gamma, save_mean,
		   save_invstd, dgamma, dbeta, beta, coef);
	if ((dx || dz) && g->vec)
		LAUNCH_TRY(k_bn_bwd_apply_v<T>, grid, CU_THREADS, *g, (const T *)x, vmask, bits,
			   (const T *)dy, coef, (T *)dx, beta, (T *)dz, bz);
	else if (dx || dz)
		LAUNCH_TRY(k_bn_bwd_apply<T>, grid, CU_THREADS, *g, (const T *)x, mask,
			   (const T *)dy, coef, (T *)dx, beta, (T *)dz, bz);
	rv = 0;
out:
	arena_free(be, part);
	return rv;
}

/* ---- cuDNN (fp16, float32) and the dispatch ---- */

template <typename T>
static int bn_fwd_train_t(struct backend *be, struct be_op *op, const float *x, const float *z,
			  const float *gamma, const float *beta_, float *y, float *save_mean,
			  float *save_invstd, float *running_mean, float *running_var,
			  float momentum)
{
	const char *fn = "bn_fwd_train", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_bn_desc *d;

	if (!op_is(be, op, CU_BN, fn) || bn_check_z(be, op, z, y, fn) < 0)
		return -1;
	shape = op->shape;
	d = &op->d.bn;
	if ((long long)d->n * d->h * d->w < 2)
		return be_errf(
		    be, "bn_fwd_train(%s): training needs more than one value per channel", shape);
	if (op->bn_own)
		return bn_own_fwd_train<T>(be, op, x, z, gamma, beta_, y, save_mean, save_invstd,
					   running_mean, running_var, momentum);
	/* NHWC: the Ex call, one plan down after each NOT_SUPPORTED (nothing ran then) */
	while (op->bn_ex) {
		int add = op->bn_ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
		void *ws = NULL, *rs = NULL;
		cudnnStatus_t s;
		if (op->bn_fwd_ws && !(ws = ws_reserve(be, op->bn_fwd_ws, fn, shape)))
			return -1;
		if (op->bn_reserve && !(rs = arena_alloc(be, op->bn_reserve, fn)))
			return -1;
		s = cudnnBatchNormalizationForwardTrainingEx(
		    ctx->dnn, op->bn_mode, op->bn_ops, &one_f, &zero_f, op->xd, x,
		    add ? op->xd : NULL, add ? z : NULL, op->xd, y, op->bd, gamma, beta_,
		    (double)momentum, running_mean, running_var, (double)d->eps, save_mean,
		    save_invstd, op->bn_ops == CUDNN_BATCHNORM_OPS_BN ? NULL : op->ad, ws,
		    op->bn_fwd_ws, rs, op->bn_reserve);
		arena_free(be, rs); /* the stream orders its reuse after this call */
		if (s == CUDNN_STATUS_SUCCESS)
			return op->bn_ops == CUDNN_BATCHNORM_OPS_BN
				   ? bn_fwd_tail<T>(be, op, z, y, fn)
				   : 0;
		if (!dnn_refused(s))
			return be_errf(
			    be,
			    "%s(%s): cudnnBatchNormalizationForwardTrainingEx(PERSISTENT, "
			    "%s): %s",
			    fn, shape, bn_ops_name(op->bn_ops), cudnnGetErrorString(s));
		if (op->bn_ops == CUDNN_BATCHNORM_OPS_BN ||
		    bn_plan(be, op, CUDNN_BATCHNORM_OPS_BN) != CUDNN_STATUS_SUCCESS)
			bn_plain(op);
	}
	DNN_RET(cudnnBatchNormalizationForwardTraining(
	    ctx->dnn, op->bn_mode, &one_f, &zero_f, op->xd, x, op->xd, y, op->bd, gamma, beta_,
	    (double)momentum, running_mean, running_var, (double)d->eps, save_mean, save_invstd));
	return bn_fwd_tail<T>(be, op, z, y, fn);
}

static int cu_bn_fwd_train(struct backend *be, struct be_op *op, const float *x, const float *z,
			   const float *gamma, const float *beta_, float *y, float *save_mean,
			   float *save_invstd, float *running_mean, float *running_var,
			   float momentum)
{
	return ACT_CALL(be, bn_fwd_train_t, be, op, x, z, gamma, beta_, y, save_mean, save_invstd,
			running_mean, running_var, momentum);
}

template <typename T>
static int bn_fwd_infer_t(struct backend *be, struct be_op *op, const float *x, const float *z,
			  const float *gamma, const float *beta_, const float *running_mean,
			  const float *running_var, float *y)
{
	const char *fn = "bn_fwd_infer", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_bn_desc *d;

	if (!op_is(be, op, CU_BN, fn) || bn_check_z(be, op, z, y, fn) < 0)
		return -1;
	shape = op->shape;
	d = &op->d.bn;
	if (op->bn_own)
		return bn_own_fwd_infer<T>(be, op, x, z, gamma, beta_, running_mean, running_var,
					   y);
	DNN_RET(cudnnBatchNormalizationForwardInference(
	    ctx->dnn, CUDNN_BATCHNORM_SPATIAL, &one_f, &zero_f, op->xd, x, op->xd, y, op->bd, gamma,
	    beta_, running_mean, running_var, (double)d->eps));
	return bn_fwd_tail<T>(be, op, z, y, fn);
}

static int cu_bn_fwd_infer(struct backend *be, struct be_op *op, const float *x, const float *z,
			   const float *gamma, const float *beta_, const float *running_mean,
			   const float *running_var, float *y)
{
	return ACT_CALL(be, bn_fwd_infer_t, be, op, x, z, gamma, beta_, running_mean, running_var,
			y);
}

/* The gradient reaching bn(x) is dy masked by y > 0 (fuse_relu); with fuse_add it is also z's
 * gradient: one kernel writes it to scratch for cuDNN and blends it into dz. cuDNN wants dx:
 * without one (or where it aliases an input) it goes to scratch, blended into the caller's dx
 * afterwards when there is one. The Ex call (fp16 NHWC) gets beta 0 only, the one way PyTorch and
 * apex run cuDNN's NHWC kernels: with beta != 0 dx, dgamma and dbeta go to scratch too and own
 * kernels blend them (nn.c passes beta 0). */
template <typename T>
static int bn_bwd_t(struct backend *be, struct be_op *op, const float *x, const float *y,
		    const float *dy, const float *gamma, const float *save_mean,
		    const float *save_invstd, float *dx, float *dz, float bz, float *dgamma,
		    float *dbeta, float beta)
{
	const char *fn = "bn_bwd", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_bn_desc *d;
	size_t n, need;
	T *scratch = NULL, *dst;
	float *pscratch = NULL, *dg, *db;
	const T *g;
	float data_beta, param_beta;
	int rv = -1, alias, masked, own_blend, dx_scratch;
	cudnnStatus_t s;

	if (!op_is(be, op, CU_BN, fn))
		return -1;
	shape = op->shape;
	d = &op->d.bn;
	if (be_bn_z_check(be, d, dz, fn) < 0)
		return -1;
	if (d->fuse_relu && !y)
		return be_errf(
		    be, "bn_bwd(%s): the op fuses a ReLU, whose mask is y > 0, but y is NULL",
		    shape);
	if (op->bn_own)
		return bn_own_bwd<T>(be, op, x, y, dy, gamma, save_mean, save_invstd, dx, dz, bz,
				     dgamma, dbeta, beta);
	n = (size_t)d->n * d->c * d->h * d->w;
	alias = dx && (dx == dy || dx == x);
	masked = d->fuse_relu || d->fuse_add;
	own_blend = op->bn_ex && beta != 0.0f;
	dx_scratch = !dx || alias || own_blend;
	need = (masked ? n : 0) + (dx_scratch ? n : 0);
	if (need && !(scratch = (T *)arena_alloc(be, need * sizeof(T), fn)))
		return -1;
	if (own_blend && !(pscratch = (float *)arena_alloc(be, 2 * sizeof(float) * d->c, fn)))
		goto out;
	g = (const T *)dy;
	dst = (T *)dx;
	data_beta = beta;
	dg = dgamma;
	db = dbeta;
	param_beta = beta;
	if (d->fuse_add) {
		LAUNCH_TRY(k_bn_add_bwd<T>, grid_for(n), CU_THREADS, (const T *)y, (const T *)dy,
			   scratch, (T *)dz, bz, n, d->fuse_relu);
		g = scratch;
	} else if (d->fuse_relu) {
		LAUNCH_TRY(k_relu_bwd<T>, grid_for(n), CU_THREADS, (const T *)y, (const T *)dy,
			   scratch, n, 0.0f);
		g = scratch;
	}
	if (dx_scratch) {
		dst = scratch + (masked ? n : 0);
		data_beta = 0.0f;
	}
	if (own_blend) {
		dg = pscratch;
		db = pscratch + d->c;
		param_beta = 0.0f;
	}
	s = CUDNN_STATUS_NOT_SUPPORTED;
	if (op->bn_ex && op->bn_bwd_ex) {
		void *ws = NULL;
		if (op->bn_bwd_ws && !(ws = ws_reserve(be, op->bn_bwd_ws, fn, shape)))
			goto out;
		/* BN alone reads neither y nor the bias (activations do): y as apex passes it */
		s = cudnnBatchNormalizationBackwardEx(
		    ctx->dnn, op->bn_mode, CUDNN_BATCHNORM_OPS_BN, &one_f, &data_beta, &one_f,
		    &param_beta, op->xd, x, y ? op->xd : NULL, y, op->xd, g, NULL, NULL, op->xd,
		    dst, op->bd, gamma, NULL, dg, db, (double)d->eps, save_mean, save_invstd, NULL,
		    ws, op->bn_bwd_ws, NULL, 0);
		if (s != CUDNN_STATUS_SUCCESS && !dnn_refused(s)) {
			be_errf(be, "%s(%s): cudnnBatchNormalizationBackwardEx(PERSISTENT, BN): %s",
				fn, shape, cudnnGetErrorString(s));
			goto out;
		}
	}
	if (dnn_refused(s)) /* the plain call, in the forward's mode */
		DNN_TRY(cudnnBatchNormalizationBackward(ctx->dnn, op->bn_mode, &one_f, &data_beta,
							&one_f, &param_beta, op->xd, x, op->xd, g,
							op->xd, dst, op->bd, gamma, dg, db,
							(double)d->eps, save_mean, save_invstd));
	if (dx && dx_scratch)
		LAUNCH_TRY(k_act_accum<T>, grid_for(n), CU_THREADS, (const T *)dst, (T *)dx, n,
			   beta);
	if (own_blend) {
		LAUNCH_TRY(k_axpby, grid_for(d->c), CU_THREADS, 1.0f, dg, beta, dgamma,
			   (size_t)d->c);
		LAUNCH_TRY(k_axpby, grid_for(d->c), CU_THREADS, 1.0f, db, beta, dbeta,
			   (size_t)d->c);
	}
	rv = 0;
out:
	arena_free(be, scratch);
	arena_free(be, pscratch);
	return rv;
}

static int cu_bn_bwd(struct backend *be, struct be_op *op, const float *x, const float *y,
		     const float *dy, const float *gamma, const float *save_mean,
		     const float *save_invstd, float *dx, float *dz, float bz, float *dgamma,
		     float *dbeta, float beta)
{
	return ACT_CALL(be, bn_bwd_t, be, op, x, y, dy, gamma, save_mean, save_invstd, dx, dz, bz,
			dgamma, dbeta, beta);
}

/* bf16: how many blocks of the own kernels' partial passes GPU `device` runs at once, one wave
 * (bn_geom_plan fills it); vec: the vector kernels will run too. -1 with *err set, worded as
 * be_cuda_create's other failures. */
int cu_bn_wave(int device, int vec, unsigned *wave, struct dp_error *err)
{
	int sms = 0, nf = -1;
	cudaError_t e;

#define CREATE_TRY(ok, call, str)                                                                  \
	do {                                                                                       \
		if (!(ok)) {                                                                       \
			errprintf(err, "cuda backend on GPU %d: %s: %s", device, call, str);       \
			return -1;                                                                 \
		}                                                                                  \
	} while (0)
	e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
	CREATE_TRY(e == cudaSuccess, "cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)",
		   cudaGetErrorString(e));
	/* nf: the fewest blocks per SM of the partial kernels that will run */
#define BN_OCCUPANCY(kernel)                                                                       \
	do {                                                                                       \
		int nb_ = 0;                                                                       \
		e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb_, kernel, CU_THREADS, 0);    \
		CREATE_TRY(e == cudaSuccess,                                                       \
			   "cudaOccupancyMaxActiveBlocksPerMultiprocessor(" #kernel ")",           \
			   cudaGetErrorString(e));                                                 \
		nf = nf < 0 || nb_ < nf ? nb_ : nf;                                                \
	} while (0)
	BN_OCCUPANCY(k_bn_stats<bf16>);
	BN_OCCUPANCY(k_bn_bwd_stats<bf16>);
	if (vec) { /* the vector kernels hold more registers */
		BN_OCCUPANCY(k_bn_stats_v<bf16>);
		BN_OCCUPANCY(k_bn_bwd_stats_v<bf16>);
	}
#undef BN_OCCUPANCY
#undef CREATE_TRY
	*wave = (unsigned)(sms > 0 ? sms : 1) * (unsigned)(nf > 0 ? nf : 1);
	return 0;
}

/* The op table's batch norm slots. */
void cu_bn_register(struct backend_ops *o)
{
	o->bn_create = cu_bn_create;
	o->bn_fwd_train = cu_bn_fwd_train;
	o->bn_fwd_infer = cu_bn_fwd_infer;
	o->bn_bwd = cu_bn_bwd;
}

#endif /* HAVE_CUDNN */
