/* cuda_conv.cu — the CUDA backend's convolutions: cuDNN's forward and backward passes, the
 * algorithm and math type of each (listed by cuDNN's heuristics once per op, then timed by
 * cudnnFind once per shape unless deterministic; its workspace under the cap), the half copy
 * of the weights and the widened weight gradient in half modes, the bias kernels. Nothing but
 * convolutions; the workspace itself is cuda_mem.cu's. */
#ifdef HAVE_CUDNN /* without cuDNN there is no CUDA backend (backend_cuda.cu) */

#include <string.h>

#include "trainer/backend/cuda_internal.h"

/* y[n][k][pixel] += b[k] (convolution's bias). */
template <typename T>
__global__ static void k_bias_chan(T *y, const float *b, size_t n, int chans, size_t hw, int nhwc)
{
	GRID_LOOP(i, n)
	y[i] = to_act<T>(__fadd_rn(ldf(y[i]), b[act_channel(i, chans, hw, nhwc)]));
}

/* db[c] = sum over n and the plane of dy[n][c] (+ beta db): one block per channel. */
template <typename T>
__global__ static void k_channel_sum(const T *dy, int n, int chans, int hw, int nhwc, float *db,
				     float beta)
{
	int c = blockIdx.x;
	size_t m = (size_t)n * hw;
	double s = 0.0;

	for (size_t i = threadIdx.x; i < m; i += CU_THREADS)
		s += ldf(dy[act_at((int)(i / hw), c, i % hw, chans, (size_t)hw, nhwc)]);
	s = block_sum(s);
	if (threadIdx.x == 0)
		db[c] = blend_d(s, beta, &db[c]);
}

/* The math type a convolution descriptor starts with (and the fallback algorithms run with):
 * float32 FMA, TF32 allowed when asked for, tensor cores allowed for half data. cuDNN's
 * heuristics list the algorithms this math type permits. */
static cudnnMathType_t conv_math(const struct cu_ctx *ctx)
{
	if (ctx->dtype != BE_F32)
		return CUDNN_TENSOR_OP_MATH;
	return ctx->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

/* The math type an accepted algorithm runs with: float32 without TF32 runs with FMA math even
 * where cuDNN listed the algorithm with CUDNN_DEFAULT_MATH, which on Ampere and later GPUs lets
 * float32 convolutions use TF32 tensor cores (PyTorch's allow_tf32=False does the same). */
static cudnnMathType_t run_math(const struct cu_ctx *ctx, cudnnMathType_t listed)
{
	return ctx->dtype == BE_F32 && !ctx->tf32 ? CUDNN_FMA_MATH : listed;
}

/* Whether a candidate algorithm may be used: supported, never a conversion of the data to a
 * narrower type, FMA arithmetic for float32 data unless TF32 is allowed (tensor cores are the
 * point of half data), and deterministic when asked to be. */
static int algo_ok(struct cu_ctx *ctx, cudnnStatus_t status, cudnnMathType_t math,
		   cudnnDeterminism_t det)
{
	return status == CUDNN_STATUS_SUCCESS && math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
	       (ctx->tf32 || ctx->dtype != BE_F32 || math != CUDNN_TENSOR_OP_MATH) &&
	       (!ctx->deterministic || det == CUDNN_DETERMINISTIC);
}

/* The first algorithm of a cuDNN list p_[0..got_) that may be used and whose workspace, sized
 * under the math type it will run with (tensor-op math may need more than the descriptor's), fits
 * under the cap: into op's algo_f, ws_f and math_f, found_ set. The lists name an algorithm once
 * per math type. */
#define SELECT(p_, got_, found_, wsize, algo_f, ws_f, math_f, ...)                                 \
	do {                                                                                       \
		for (int i_ = 0; i_ < (got_) && !(found_); i_++) {                                 \
			size_t ws_;                                                                \
			cudnnMathType_t m_ = run_math(ctx, p_[i_].mathType);                       \
			if (!algo_ok(ctx, p_[i_].status, p_[i_].mathType, p_[i_].determinism))     \
				continue;                                                          \
			DNN_RET(cudnnSetConvolutionMathType(op->cd, m_));                          \
			if (wsize(ctx->dnn, __VA_ARGS__, p_[i_].algo, &ws_) ==                     \
				CUDNN_STATUS_SUCCESS &&                                            \
			    ws_ <= CU_WS_CAP) {                                                    \
				op->algo_f = p_[i_].algo;                                          \
				op->ws_f = ws_;                                                    \
				op->math_f = m_;                                                   \
				found_ = 1;                                                        \
			}                                                                          \
		}                                                                                  \
		DNN_RET(cudnnSetConvolutionMathType(op->cd, fallback));                            \
	} while (0)

/* A list's length (cuDNN's *MaxCount, at most 64) into max_, the descriptor at its math type. */
#define LIST_START(maxcount, max_)                                                                 \
	do {                                                                                       \
		DNN_RET(maxcount(ctx->dnn, &(max_)));                                              \
		if ((max_) > 64 || (max_) < 1)                                                     \
			(max_) = 64;                                                               \
		DNN_RET(cudnnSetConvolutionMathType(op->cd, fallback));                            \
	} while (0)

/* The three passes' algorithms: cuDNN's heuristics in order of expected speed, the first one
 * allowed; else the always-supported, deterministic one. The lists are sized by *MaxCount. */
#define PICK(perf_t, maxcount, heuristic, wsize, fb_algo, algo_f, ws_f, math_f, ...)               \
	do {                                                                                       \
		perf_t p_[64];                                                                     \
		int max_ = 0, got_ = 0, found_ = 0;                                                \
		LIST_START(maxcount, max_);                                                        \
		DNN_RET(heuristic(ctx->dnn, __VA_ARGS__, max_, &got_, p_));                        \
		SELECT(p_, got_, found_, wsize, algo_f, ws_f, math_f, __VA_ARGS__);                \
		if (!found_) {                                                                     \
			op->algo_f = fb_algo;                                                      \
			DNN_RET(wsize(ctx->dnn, __VA_ARGS__, op->algo_f, &op->ws_f));              \
		}                                                                                  \
	} while (0)

static int pick_algos(struct backend *be, struct be_op *op, const char *fn, const char *shape)
{
	struct cu_ctx *ctx = ctx_of(be);
	cudnnMathType_t fallback = conv_math(ctx);

	op->fwd_math = op->bwd_data_math = op->bwd_filter_math = fallback;
	PICK(cudnnConvolutionFwdAlgoPerf_t, cudnnGetConvolutionForwardAlgorithmMaxCount,
	     cudnnGetConvolutionForwardAlgorithm_v7, cudnnGetConvolutionForwardWorkspaceSize,
	     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, fwd_algo, fwd_ws, fwd_math, op->xd, op->wd,
	     op->cd, op->yd);
	PICK(cudnnConvolutionBwdDataAlgoPerf_t, cudnnGetConvolutionBackwardDataAlgorithmMaxCount,
	     cudnnGetConvolutionBackwardDataAlgorithm_v7,
	     cudnnGetConvolutionBackwardDataWorkspaceSize, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
	     bwd_data_algo, bwd_data_ws, bwd_data_math, op->wd, op->yd, op->cd, op->xd);
	PICK(cudnnConvolutionBwdFilterAlgoPerf_t,
	     cudnnGetConvolutionBackwardFilterAlgorithmMaxCount,
	     cudnnGetConvolutionBackwardFilterAlgorithm_v7,
	     cudnnGetConvolutionBackwardFilterWorkspaceSize, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
	     bwd_filter_algo, bwd_filter_ws, bwd_filter_math, op->xd, op->yd, op->cd, op->wd);
	return 0;
}
#undef PICK

/* A pass's algorithms timed on the GPU (cudnnFind*Ex, fastest first, each given the whole cap
 * of workspace), the first one allowed replacing the heuristics' pick; a search that fails or
 * finds none allowed leaves that pick. */
#define FIND(perf_t, maxcount, find, wsize, algo_f, ws_f, math_f, fargs, ...)                      \
	do {                                                                                       \
		perf_t p_[64];                                                                     \
		int max_ = 0, got_ = 0, found_ = 0;                                                \
		LIST_START(maxcount, max_);                                                        \
		if (find fargs == CUDNN_STATUS_SUCCESS)                                            \
			SELECT(p_, got_, found_, wsize, algo_f, ws_f, math_f, __VA_ARGS__);        \
	} while (0)

/* The three passes timed on scratch x, y, w and a workspace ws of the cap. */
static int find_passes(struct backend *be, struct be_op *op, const char *fn, const char *shape,
		       void *x, void *y, void *w, void *ws)
{
	struct cu_ctx *ctx = ctx_of(be);
	cudnnMathType_t fallback = conv_math(ctx);

	FIND(cudnnConvolutionFwdAlgoPerf_t, cudnnGetConvolutionForwardAlgorithmMaxCount,
	     cudnnFindConvolutionForwardAlgorithmEx, cudnnGetConvolutionForwardWorkspaceSize,
	     fwd_algo, fwd_ws, fwd_math,
	     (ctx->dnn, op->xd, x, op->wd, w, op->cd, op->yd, y, max_, &got_, p_, ws, CU_WS_CAP),
	     op->xd, op->wd, op->cd, op->yd);
	FIND(cudnnConvolutionBwdDataAlgoPerf_t, cudnnGetConvolutionBackwardDataAlgorithmMaxCount,
	     cudnnFindConvolutionBackwardDataAlgorithmEx,
	     cudnnGetConvolutionBackwardDataWorkspaceSize, bwd_data_algo, bwd_data_ws,
	     bwd_data_math,
	     (ctx->dnn, op->wd, w, op->yd, y, op->cd, op->xd, x, max_, &got_, p_, ws, CU_WS_CAP),
	     op->wd, op->yd, op->cd, op->xd);
	FIND(cudnnConvolutionBwdFilterAlgoPerf_t,
	     cudnnGetConvolutionBackwardFilterAlgorithmMaxCount,
	     cudnnFindConvolutionBackwardFilterAlgorithmEx,
	     cudnnGetConvolutionBackwardFilterWorkspaceSize, bwd_filter_algo, bwd_filter_ws,
	     bwd_filter_math,
	     (ctx->dnn, op->xd, x, op->yd, y, op->cd, op->wd, w, max_, &got_, p_, ws, CU_WS_CAP),
	     op->xd, op->yd, op->cd, op->wd);
	return 0;
}

static int same_shape(const struct cu_conv_pick *p, const struct be_conv_desc *d)
{
	return p->n == d->n && p->c == d->c && p->h == d->h && p->w == d->w && p->k == d->k &&
	       p->kh == d->kh && p->kw == d->kw && p->stride == d->stride && p->pad == d->pad;
}

/* The three passes' algorithm, workspace and math type, from one holder to the other. */
#define COPY_ALGOS(to, from)                                                                       \
	do {                                                                                       \
		(to)->fwd_algo = (from)->fwd_algo, (to)->fwd_ws = (from)->fwd_ws;                  \
		(to)->fwd_math = (from)->fwd_math;                                                 \
		(to)->bwd_data_algo = (from)->bwd_data_algo;                                       \
		(to)->bwd_data_ws = (from)->bwd_data_ws;                                           \
		(to)->bwd_data_math = (from)->bwd_data_math;                                       \
		(to)->bwd_filter_algo = (from)->bwd_filter_algo;                                   \
		(to)->bwd_filter_ws = (from)->bwd_filter_ws;                                       \
		(to)->bwd_filter_math = (from)->bwd_filter_math;                                   \
	} while (0)

/* The choice timed for op's shape by an earlier op, copied into op: 1, else 0. */
static int picked_before(struct cu_ctx *ctx, struct be_op *op)
{
	for (size_t i = 0; i < ctx->npicks; i++)
		if (same_shape(&ctx->picks[i], &op->d.conv)) {
			COPY_ALGOS(op, &ctx->picks[i]);
			return 1;
		}
	return 0;
}

/* cuDNN's fastest algorithms for op's shape (not picked before), timed on scratch buffers of
 * the shape (their contents do not matter to the timing) and kept in ctx->picks; where the
 * device has no room for the scratch, or the search fails, the heuristics' picks (made before)
 * stay. */
static int find_algos(struct backend *be, struct be_op *op, const char *fn, const char *shape)
{
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_conv_desc *d = &op->d.conv;
	size_t es = be->act_size, al = 256;
	size_t nx = ((size_t)d->n * d->c * d->h * d->w * es + al - 1) / al * al;
	size_t ny = ((size_t)d->n * d->k * d->oh * d->ow * es + al - 1) / al * al;
	size_t nw = ((size_t)d->k * d->c * d->kh * d->kw * es + al - 1) / al * al;
	size_t total = nx + ny + nw + CU_WS_CAP;
	struct cu_conv_pick *p;
	char *x;
	int rv;

	if (ctx->npicks == ctx->picks_cap) {
		size_t ncap = ctx->picks_cap ? 2 * ctx->picks_cap : 32;
		p = (struct cu_conv_pick *)realloc(ctx->picks, ncap * sizeof(*p));
		if (!p)
			return be_errf(be, "%s(%s): out of memory for the algorithm choices", fn,
				       shape);
		ctx->picks = p;
		ctx->picks_cap = ncap;
	}
	if (!(x = (char *)dev_scratch(be, total)))
		return 0; /* no room to time them: the heuristics' picks, not kept for the shape */
	/* defined contents (zeros) for the inputs, whatever the algorithms read */
	rv = cudaMemsetAsync(x, 0, nx + ny + nw, ctx->stream) == cudaSuccess
		 ? find_passes(be, op, fn, shape, x, x + nx, x + nx + ny, x + nx + ny + nw)
		 : 0;
	dev_scratch_free(be, x, total);
	if (rv < 0)
		return -1;
	/* a failed search may leave an error behind: not this op's, and not the next call's */
	cudaGetLastError();
	p = &ctx->picks[ctx->npicks++];
	p->n = d->n, p->c = d->c, p->h = d->h, p->w = d->w, p->k = d->k;
	p->kh = d->kh, p->kw = d->kw, p->stride = d->stride, p->pad = d->pad;
	COPY_ALGOS(p, op);
	return 0;
}
#undef COPY_ALGOS
#undef FIND
#undef SELECT
#undef LIST_START

/* Convolutions: data, filters and the output in the act type, float32 compute; in NHWC the filters
 * too (K x KH x KW x C in memory: what cuDNN's NHWC kernels take). The bias (1, k) is added by an
 * own kernel: cudnnAddTensor would have to mix a float32 bias into half data. */
static struct be_op *cu_conv_create(struct backend *be, struct be_conv_desc *d)
{
	const char *fn = "conv_create";
	struct be_op *op;
	const char *shape;
	int on, oc, oh, ow;

	if (be_conv_check(be, d) < 0 || !(op = op_new(be, CU_CONV, fn)))
		return NULL;
	op->d.conv = *d;
	be_conv_str(d, op->shape, sizeof(op->shape));
	shape = op_shape(be, op);
	if (tensor4d(be, &op->xd, d->n, d->c, d->h, d->w, fn, shape) < 0 ||
	    tensor4d(be, &op->yd, d->n, d->k, d->oh, d->ow, fn, shape) < 0)
		goto fail;
#define DNN_FAIL(call)                                                                             \
	do {                                                                                       \
		cudnnStatus_t s_ = (call);                                                         \
		if (s_ != CUDNN_STATUS_SUCCESS) {                                                  \
			be_errf(be, "%s(%s): %s: %s", fn, shape, #call, cudnnGetErrorString(s_));  \
			goto fail;                                                                 \
		}                                                                                  \
	} while (0)
	DNN_FAIL(cudnnCreateFilterDescriptor(&op->wd));
	DNN_FAIL(cudnnSetFilter4dDescriptor(
	    op->wd, dnn_type(ctx_of(be)->dtype),
	    ctx_of(be)->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, d->k, d->c, d->kh, d->kw));
	DNN_FAIL(cudnnCreateConvolutionDescriptor(&op->cd));
	DNN_FAIL(cudnnSetConvolution2dDescriptor(op->cd, d->pad, d->pad, d->stride, d->stride, 1, 1,
						 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
	DNN_FAIL(cudnnSetConvolutionMathType(op->cd, conv_math(ctx_of(be))));
	DNN_FAIL(cudnnGetConvolution2dForwardOutputDim(op->cd, op->xd, op->wd, &on, &oc, &oh, &ow));
#undef DNN_FAIL
	if (on != d->n || oc != d->k || oh != d->oh || ow != d->ow) {
		be_errf(be,
			"conv_create(%s): cuDNN computes an output of %dx%dx%dx%d, not %dx%dx%dx%d",
			shape, on, oc, oh, ow, d->n, d->k, d->oh, d->ow);
		goto fail;
	}
	/* a shape timed before takes its choice; else the heuristics' pick, then the timed one */
	if (!(ctx_of(be)->conv_find && picked_before(ctx_of(be), op)) &&
	    (pick_algos(be, op, fn, shape) < 0 ||
	     (ctx_of(be)->conv_find && find_algos(be, op, fn, shape) < 0)))
		goto fail;
	return op;
fail:
	cu_op_destroy(be, op);
	return NULL;
}

static size_t conv_wcount(const struct be_conv_desc *d)
{
	return (size_t)d->k * d->c * d->kh * d->kw;
}

/* The half copy of a convolution's weights: OHWI in NHWC, OIHW in NCHW. */
static void *conv_half_weights(struct backend *be, const struct be_conv_desc *d, const float *wgt,
			       const char *fn, const char *shape)
{
	size_t a = ctx_of(be)->nhwc ? (size_t)d->c : 1;

	return half_weights(be, wgt, conv_wcount(d), a, (size_t)d->kh * d->kw, fn, shape);
}

template <typename T>
static int conv_fwd_t(struct backend *be, struct be_op *op, const float *x, const float *wgt,
		      const float *bias, float *y)
{
	const char *fn = "conv_fwd", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_conv_desc *d;
	const void *w = wgt;
	void *ws, *wh = NULL;
	size_t ny;
	int rv = -1;

	if (!op_is(be, op, CU_CONV, fn))
		return -1;
	shape = op->shape;
	d = &op->d.conv;
	if (d->has_bias && !bias)
		return be_errf(be, "conv_fwd(%s): the op has a bias but bias is NULL", shape);
	if (!(ws = ws_reserve(be, op->fwd_ws, fn, shape)) && op->fwd_ws)
		return -1;
	if (act_lib<T>::half && !(w = wh = conv_half_weights(be, d, wgt, fn, shape)))
		return -1;
	ny = (size_t)d->n * d->k * d->oh * d->ow;
	DNN_TRY(cudnnSetConvolutionMathType(op->cd, op->fwd_math));
	DNN_TRY(cudnnConvolutionForward(ctx->dnn, &one_f, op->xd, x, op->wd, w, op->cd,
					op->fwd_algo, ws, op->fwd_ws, &zero_f, op->yd, y));
	if (d->has_bias)
		LAUNCH_TRY(k_bias_chan<T>, grid_for(ny), CU_THREADS, (T *)y, bias, ny, d->k,
			   (size_t)d->oh * d->ow, ctx->nhwc);
	rv = 0;
out:
	arena_free(be, wh);
	return rv;
}

static int cu_conv_fwd(struct backend *be, struct be_op *op, const float *x, const float *wgt,
		       const float *bias, float *y)
{
	return ACT_CALL(be, conv_fwd_t, be, op, x, wgt, bias, y);
}

/* cuDNN's beta is the op table's: 0 does not read the output, else out = r + beta * out (in
 * float32, rounded once to the act type). */
static int cu_conv_bwd_data(struct backend *be, struct be_op *op, const float *dy, const float *wgt,
			    float *dx, float beta)
{
	const char *fn = "conv_bwd_data", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const void *w = wgt;
	void *ws, *wh = NULL;
	int rv = -1;

	if (!op_is(be, op, CU_CONV, fn))
		return -1;
	shape = op->shape;
	if (!(ws = ws_reserve(be, op->bwd_data_ws, fn, shape)) && op->bwd_data_ws)
		return -1;
	if (ctx->dtype != BE_F32 && !(w = wh = conv_half_weights(be, &op->d.conv, wgt, fn, shape)))
		return -1;
	DNN_TRY(cudnnSetConvolutionMathType(op->cd, op->bwd_data_math));
	DNN_TRY(cudnnConvolutionBackwardData(ctx->dnn, &one_f, op->wd, w, op->yd, dy, op->cd,
					     op->bwd_data_algo, ws, op->bwd_data_ws, &beta, op->xd,
					     dx));
	rv = 0;
out:
	arena_free(be, wh);
	return rv;
}

/* Float32: cuDNN blends into dwgt itself. Half modes: the filter descriptor is half, so cuDNN
 * writes dW in the act type into scratch (beta 0) and k_widen_blend adds it into dwgt (from OHWI
 * to OIHW in NHWC). */
template <typename T>
static int conv_bwd_weights_t(struct backend *be, struct be_op *op, const float *x, const float *dy,
			      float *dwgt, float *dbias, float beta)
{
	const char *fn = "conv_bwd_weights", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_conv_desc *d;
	void *ws, *dw = dwgt, *dwh = NULL;
	float wbeta = beta;
	size_t nw;
	int rv = -1;

	if (!op_is(be, op, CU_CONV, fn))
		return -1;
	shape = op->shape;
	d = &op->d.conv;
	if (d->has_bias && !dbias)
		return be_errf(be, "conv_bwd_weights(%s): the op has a bias but dbias is NULL",
			       shape);
	if (!(ws = ws_reserve(be, op->bwd_filter_ws, fn, shape)) && op->bwd_filter_ws)
		return -1;
	nw = conv_wcount(d);
	if constexpr (act_lib<T>::half) {
		if (!(dw = dwh = arena_alloc(be, nw * sizeof(T), fn)))
			return -1;
		wbeta = 0.0f;
	}
	DNN_TRY(cudnnSetConvolutionMathType(op->cd, op->bwd_filter_math));
	DNN_TRY(cudnnConvolutionBackwardFilter(ctx->dnn, &one_f, op->xd, x, op->yd, dy, op->cd,
					       op->bwd_filter_algo, ws, op->bwd_filter_ws, &wbeta,
					       op->wd, dw));
	if constexpr (act_lib<T>::half) {
		size_t khw = (size_t)d->kh * d->kw;
		if (ctx->nhwc && d->c > 1 && khw > 1)
			LAUNCH_TRY(k_widen_blend_swap<T>, grid_for(nw), CU_THREADS, (const T *)dwh,
				   dwgt, nw, khw, (size_t)d->c, beta);
		else
			LAUNCH_TRY(k_widen_blend<T>, grid_for(nw), CU_THREADS, (const T *)dwh, dwgt,
				   nw, beta);
	}
	if (d->has_bias)
		LAUNCH_TRY(k_channel_sum<T>, d->k, CU_THREADS, (const T *)dy, d->n, d->k,
			   d->oh * d->ow, ctx->nhwc, dbias, beta);
	rv = 0;
out:
	arena_free(be, dwh);
	return rv;
}

static int cu_conv_bwd_weights(struct backend *be, struct be_op *op, const float *x,
			       const float *dy, float *dwgt, float *dbias, float beta)
{
	return ACT_CALL(be, conv_bwd_weights_t, be, op, x, dy, dwgt, dbias, beta);
}

/* The op table's convolution slots. */
void cu_conv_register(struct backend_ops *o)
{
	o->conv_create = cu_conv_create;
	o->conv_fwd = cu_conv_fwd;
	o->conv_bwd_data = cu_conv_bwd_data;
	o->conv_bwd_weights = cu_conv_bwd_weights;
}

#endif /* HAVE_CUDNN */
