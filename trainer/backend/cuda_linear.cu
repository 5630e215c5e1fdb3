/* cuda_linear.cu — the CUDA backend's linear layers: cuBLAS's products (float32 sgemm, GemmEx
 * on half acts), the half copy and permutation of the weights, the bias kernels. Nothing but
 * linear layers. */
#ifdef HAVE_CUDNN /* without cuDNN there is no CUDA backend (backend_cuda.cu) */

#include "trainer/backend/cuda_internal.h"

/* y[r][c] += b[c] over rows of `cols` (linear's bias). */
template <typename T> __global__ static void k_bias_rows(T *y, const float *b, size_t n, int cols)
{
	GRID_LOOP(i, n)
	y[i] = to_act<T>(__fadd_rn(ldf(y[i]), b[i % cols]));
}

/* db[c] = sum over rows of dy[r][c] (+ beta db): linear's bias gradient. */
template <typename T>
__global__ static void k_col_sum(const T *dy, int rows, int cols, float *db, float beta)
{
	GRID_LOOP(c, (size_t)cols)
	{
		double s = 0.0;
		for (int r = 0; r < rows; r++)
			s += ldf(dy[(size_t)r * cols + c]);
		db[c] = blend_d(s, beta, &db[c]);
	}
}

static struct be_op *cu_linear_create(struct backend *be, const struct be_linear_desc *d)
{
	struct be_op *op;

	if (be_linear_check(be, d) < 0 || !(op = op_new(be, CU_LINEAR, "linear_create")))
		return NULL;
	op->d.linear = *d;
	be_linear_str(d, op->shape, sizeof(op->shape));
	op_shape(be, op);
	return op;
}

/* Where the input is a flattened c x h x w act in NHWC, its features come in (h, w, c) order while
 * W stays [out][c][h][w]: the half copy of W is permuted to [out][h][w][c] (the product is then
 * the NCHW one), and the weight gradient permuted back. These are the (a, b) of half_weights:
 * (1, 1) where the orders agree (plain rows, NCHW). */
static void linear_perm(const struct cu_ctx *ctx, const struct be_linear_desc *d, size_t *a,
			size_t *b)
{
	int hwc = ctx->nhwc && d->c > 1 && (size_t)d->h * d->w > 1;

	*a = hwc ? (size_t)d->c : 1;
	*b = hwc ? (size_t)d->h * d->w : 1;
}

/* Row-major products through column-major cuBLAS: a row-major [r][c] matrix is its column-major
 * transpose. y^T (out x n) = W (out x in, i.e. W^T read transposed) x^T (in x n). Half modes:
 * cublasGemmEx on the act type with a half copy of W, float32 compute. */
template <typename T>
static int linear_fwd_t(struct backend *be, struct be_op *op, const float *x, const float *wgt,
			const float *bias, float *y)
{
	const char *fn = "linear_fwd", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_linear_desc *d;
	void *wh = NULL;
	size_t ny;
	int rv = -1;

	if (!op_is(be, op, CU_LINEAR, fn))
		return -1;
	shape = op->shape;
	d = &op->d.linear;
	if (d->has_bias && !bias)
		return be_errf(be, "linear_fwd(%s): the op has a bias but bias is NULL", shape);
	ny = (size_t)d->n * d->out;
	if constexpr (act_lib<T>::half) {
		size_t pa, pb;
		linear_perm(ctx, d, &pa, &pb);
		if (!(wh = half_weights(be, wgt, (size_t)d->out * d->in, pa, pb, fn, shape)))
			return -1;
		BLAS_TRY(cublasGemmEx(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, d->out, d->n, d->in,
				      &one_f, wh, act_lib<T>::blas, d->in, x, act_lib<T>::blas,
				      d->in, &zero_f, y, act_lib<T>::blas, d->out,
				      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	} else {
		BLAS_TRY(cublasSgemm(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, d->out, d->n, d->in,
				     &one_f, wgt, d->in, x, d->in, &zero_f, y, d->out));
	}
	if (d->has_bias)
		LAUNCH_TRY(k_bias_rows<T>, grid_for(ny), CU_THREADS, (T *)y, bias, ny, d->out);
	rv = 0;
out:
	arena_free(be, wh);
	return rv;
}

static int cu_linear_fwd(struct backend *be, struct be_op *op, const float *x, const float *wgt,
			 const float *bias, float *y)
{
	return ACT_CALL(be, linear_fwd_t, be, op, x, wgt, bias, y);
}

/* dx^T (in x n) = W^T (in x out) dy^T (out x n). cuBLAS reads dx only when beta is not 0. */
static int cu_linear_bwd_data(struct backend *be, struct be_op *op, const float *dy,
			      const float *wgt, float *dx, float beta)
{
	const char *fn = "linear_bwd_data", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_linear_desc *d;
	cudaDataType_t t = ctx->dtype == BE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
	void *wh = NULL;
	int rv = -1;

	if (!op_is(be, op, CU_LINEAR, fn))
		return -1;
	shape = op->shape;
	d = &op->d.linear;
	if (ctx->dtype != BE_F32) {
		size_t pa, pb;
		linear_perm(ctx, d, &pa, &pb);
		if (!(wh = half_weights(be, wgt, (size_t)d->out * d->in, pa, pb, fn, shape)))
			return -1;
		BLAS_TRY(cublasGemmEx(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, d->in, d->n, d->out,
				      &one_f, wh, t, d->in, dy, t, d->out, &beta, dx, t, d->in,
				      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	} else {
		BLAS_TRY(cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, d->in, d->n, d->out,
				     &one_f, wgt, d->in, dy, d->out, &beta, dx, d->in));
	}
	rv = 0;
out:
	arena_free(be, wh);
	return rv;
}

/* dW^T (in x out) = x^T (in x n) dy (n x out, i.e. dy^T read transposed). Half modes: A and B
 * in the act type, C (the float32 gradient) in float32 with the caller's beta; where the features
 * come permuted (linear_perm), C goes to float32 scratch and is permuted back into dwgt. */
template <typename T>
static int linear_bwd_weights_t(struct backend *be, struct be_op *op, const float *x,
				const float *dy, float *dwgt, float *dbias, float beta)
{
	const char *fn = "linear_bwd_weights", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_linear_desc *d;
	float *dw, *scratch = NULL, cbeta = beta;
	size_t pa, pb, nw;
	int rv = -1;

	if (!op_is(be, op, CU_LINEAR, fn))
		return -1;
	shape = op->shape;
	d = &op->d.linear;
	if (d->has_bias && !dbias)
		return be_errf(be, "linear_bwd_weights(%s): the op has a bias but dbias is NULL",
			       shape);
	linear_perm(ctx, d, &pa, &pb);
	nw = (size_t)d->out * d->in;
	dw = dwgt;
	if (pa > 1) {
		if (!(dw = scratch = (float *)arena_alloc(be, nw * sizeof(float), fn)))
			return -1;
		cbeta = 0.0f;
	}
	if constexpr (act_lib<T>::half)
		BLAS_TRY(cublasGemmEx(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_T, d->in, d->out, d->n,
				      &one_f, x, act_lib<T>::blas, d->in, dy, act_lib<T>::blas,
				      d->out, &cbeta, dw, CUDA_R_32F, d->in, CUBLAS_COMPUTE_32F,
				      CUBLAS_GEMM_DEFAULT));
	else
		BLAS_TRY(cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_T, d->in, d->out, d->n,
				     &one_f, x, d->in, dy, d->out, &cbeta, dw, d->in));
	/* scratch is [out][h*w][c]: (a, b) = (h*w, c) back to [out][c][h*w] */
	if (scratch)
		LAUNCH_TRY(k_widen_blend_swap<float>, grid_for(nw), CU_THREADS, scratch, dwgt, nw,
			   pb, pa, beta);
	if (d->has_bias)
		LAUNCH_TRY(k_col_sum<T>, grid_for((size_t)d->out), CU_THREADS, (const T *)dy, d->n,
			   d->out, dbias, beta);
	rv = 0;
out:
	arena_free(be, scratch);
	return rv;
}

static int cu_linear_bwd_weights(struct backend *be, struct be_op *op, const float *x,
				 const float *dy, float *dwgt, float *dbias, float beta)
{
	return ACT_CALL(be, linear_bwd_weights_t, be, op, x, dy, dwgt, dbias, beta);
}

/* The op table's linear layer slots. */
void cu_linear_register(struct backend_ops *o)
{
	o->linear_create = cu_linear_create;
	o->linear_fwd = cu_linear_fwd;
	o->linear_bwd_data = cu_linear_bwd_data;
	o->linear_bwd_weights = cu_linear_bwd_weights;
}

#endif /* HAVE_CUDNN */
