/* backend_cuda.cu — the CUDA backend: cuDNN for convolution and batch norm, cuBLAS for linear
 * layers, own kernels for pooling, element-wise ops, global average pool, cross-entropy and sums;
 * one stream on one GPU, memory from a caching arena over cudaMalloc. Float32 NCHW. Must not
 * change the op semantics backend_ref.c defines: t/unit/backend_cuda.c compares them op by op. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "backend.h"
#include "backend_cuda.h"
#include "backend_ref.h"
}

#ifndef HAVE_CUDNN

/* The toolkit without cuDNN: nothing to run convolutions with. */
extern "C" struct backend *be_cuda_create(int device, const struct be_cuda_opts *o, char *err,
					  size_t errlen)
{
	(void)device;
	(void)o;
	snprintf(err, errlen, "this build has no CUDA backend (cuDNN was missing at build time)");
	return NULL;
}

extern "C" void *be_cuda_stream(struct backend *be)
{
	(void)be;
	return NULL;
}

extern "C" int be_cuda_device(struct backend *be)
{
	(void)be;
	return -1;
}

extern "C" int be_cuda_describe(int device, char *buf, size_t len)
{
	(void)device;
	snprintf(buf, len, "this build has no CUDA backend (cuDNN was missing at build time)");
	return -1;
}

extern "C" size_t be_cuda_peak_bytes(struct backend *be)
{
	(void)be;
	return 0;
}

extern "C" int be_cuda_device_count(char *err, size_t errlen)
{
	snprintf(err, errlen, "this build has no CUDA backend (cuDNN was missing at build time)");
	return 0;
}

#else

#include <cudnn.h>

/* Numerics. By default convolutions run with CUDNN_FMA_MATH and cuBLAS with CUBLAS_DEFAULT_MATH,
 * which for float32 means no TF32 tensor cores: results agree with the CPU backends to float32
 * rounding. With be_cuda_opts.tf32 both may use TF32 tensor cores (cuDNN's default math and
 * CUBLAS_TF32_TENSOR_OP_MATH), as PyTorch does with allow_tf32.
 * Own kernels accumulate in double and write with __fadd_rn/__fmul_rn where the reference
 * computes in float (no FMA contraction), so element-wise ops match it bit for bit.
 *
 * Determinism. Own kernels and cuBLAS give the same bits for the same inputs on the same GPU.
 * cuDNN's convolution algorithms are chosen once per op by its heuristics
 * (cudnnGet*Algorithm_v7, no benchmarking); DPTRAIN_CUDA_DETERMINISTIC=1 at creation restricts
 * them to deterministic ones (the bit-exact resume test needs that on a GPU). */

#define CU_THREADS	256
#define CU_WS_CAP	((size_t)256 << 20) /* cuDNN workspace, shared by every op */
#define CU_SUMSQ_BLOCKS 1024

struct cu_block {
	void *p;
	size_t size;
	int used;
};

/* Everything ops share: the stream, the library handles, the workspace and the arena. */
struct cu_ctx {
	int device;
	int deterministic;
	int tf32;
	cudaStream_t stream;
	cudaStream_t copy; /* uploads (upload), created on first use */
	cudnnHandle_t dnn;
	cublasHandle_t blas;
	void *ws;
	size_t ws_bytes;
	struct cu_block *blocks; /* every cudaMalloc'ed block, free or not */
	size_t nblocks, cap;
	size_t held, peak; /* bytes cudaMalloc'ed now (blocks and workspace), and the most */
};

enum cu_kind { CU_CONV, CU_BN, CU_POOL, CU_LINEAR };

/* This file's definition of the opaque op. */
struct be_op {
	enum cu_kind kind;
	char shape[160]; /* "n=8 c=3 ..." for error messages */
	union {
		struct be_conv_desc conv;
		struct be_bn_desc bn;
		struct be_pool_desc pool;
		struct be_linear_desc linear;
	} d;
	/* conv: x, y, bias (1,k,1,1); bn: x and the per-channel parameters */
	cudnnTensorDescriptor_t xd, yd, bd;
	cudnnFilterDescriptor_t wd;
	cudnnConvolutionDescriptor_t cd;
	cudnnConvolutionFwdAlgo_t fwd_algo;
	cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
	cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
	size_t fwd_ws, bwd_data_ws, bwd_filter_ws;
	/* each pass's algorithm runs with the math type cuDNN listed it with */
	cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;
};

static struct cu_ctx *ctx_of(struct backend *be)
{
	return (struct cu_ctx *)be->priv;
}

/* Checks inside an op with `be`, `fn` (the op's name) and `shape`: fail it with -1 and a message
 * naming the op, its shape, the call and the library's error string. */
#define CU_RET(call)                                                                               \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess)                                                             \
			return be_errf(be, "%s(%s): %s: %s", fn, shape, #call,                     \
				       cudaGetErrorString(e_));                                    \
	} while (0)
#define DNN_RET(call)                                                                              \
	do {                                                                                       \
		cudnnStatus_t s_ = (call);                                                         \
		if (s_ != CUDNN_STATUS_SUCCESS)                                                    \
			return be_errf(be, "%s(%s): %s: %s", fn, shape, #call,                     \
				       cudnnGetErrorString(s_));                                   \
	} while (0)
#define BLAS_RET(call)                                                                             \
	do {                                                                                       \
		cublasStatus_t s_ = (call);                                                        \
		if (s_ != CUBLAS_STATUS_SUCCESS)                                                   \
			return be_errf(be, "%s(%s): %s: %s", fn, shape, #call,                     \
				       cublasGetStatusString(s_));                                 \
	} while (0)
/* The same with `rv = -1; goto out;` for functions with cleanup. */
#define CU_TRY(call)                                                                               \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess) {                                                           \
			be_errf(be, "%s(%s): %s: %s", fn, shape, #call, cudaGetErrorString(e_));   \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)
#define DNN_TRY(call)                                                                              \
	do {                                                                                       \
		cudnnStatus_t s_ = (call);                                                         \
		if (s_ != CUDNN_STATUS_SUCCESS) {                                                  \
			be_errf(be, "%s(%s): %s: %s", fn, shape, #call, cudnnGetErrorString(s_));  \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)
/* A kernel launch on the backend's stream; launch errors (bad configuration) are caught here,
 * errors while it runs at the next synchronising call (to_host, sync, xent, sumsq). */
#define LAUNCH(kernel, grid, block, ...)                                                           \
	do {                                                                                       \
		kernel<<<(grid), (block), 0, ctx_of(be)->stream>>>(__VA_ARGS__);                   \
		cudaError_t e_ = cudaGetLastError();                                               \
		if (e_ != cudaSuccess)                                                             \
			return be_errf(be, "%s(%s): launching %s: %s", fn, shape, #kernel,         \
				       cudaGetErrorString(e_));                                    \
	} while (0)

static unsigned grid_for(size_t n)
{
	size_t b = (n + CU_THREADS - 1) / CU_THREADS;

	if (b > ((size_t)1 << 20)) /* the loops stride over the rest */
		b = (size_t)1 << 20;
	return b ? (unsigned)b : 1u;
}

/* ---------------------------------------------------------------------------------------
 * Memory: a caching arena. Sizes are rounded up to classes (at most 25% more than asked);
 * a freed block goes back to its class and is reused by the next request of that class. All
 * work runs in order on one stream, so a block freed while kernels still use it can be handed
 * out again at once: its next user's work queues behind theirs. */

static size_t size_class(size_t bytes)
{
	size_t top = 512, step;

	if (bytes <= top)
		return top;
	while (top < bytes)
		top <<= 1;
	step = top / 8; /* classes 5/8, 6/8, 7/8 and 8/8 of the next power of two */
	return (bytes + step - 1) / step * step;
}

/* Gives every unused block back to the driver (after the stream is done with them). */
static void arena_trim(struct cu_ctx *ctx)
{
	size_t j = 0;

	cudaStreamSynchronize(ctx->stream);
	for (size_t i = 0; i < ctx->nblocks; i++) {
		if (ctx->blocks[i].used)
			ctx->blocks[j++] = ctx->blocks[i];
		else {
			cudaFree(ctx->blocks[i].p);
			ctx->held -= ctx->blocks[i].size;
		}
	}
	ctx->nblocks = j;
}

/* cudaMalloc, trimming the arena once when the device is full. */
static cudaError_t dev_malloc(struct cu_ctx *ctx, void **p, size_t bytes)
{
	cudaError_t e = cudaMalloc(p, bytes);

	if (e == cudaErrorMemoryAllocation) {
		cudaGetLastError(); /* clear it */
		arena_trim(ctx);
		e = cudaMalloc(p, bytes);
	}
	if (e == cudaSuccess) {
		ctx->held += bytes;
		if (ctx->held > ctx->peak)
			ctx->peak = ctx->held;
	}
	return e;
}

static void *arena_alloc(struct backend *be, size_t bytes, const char *fn)
{
	struct cu_ctx *ctx = ctx_of(be);
	size_t cls = size_class(bytes);
	void *p = NULL;
	cudaError_t e;

	for (size_t i = ctx->nblocks; i-- > 0;) {
		if (!ctx->blocks[i].used && ctx->blocks[i].size == cls) {
			ctx->blocks[i].used = 1;
			return ctx->blocks[i].p;
		}
	}
	if (ctx->nblocks == ctx->cap) {
		size_t ncap = ctx->cap ? 2 * ctx->cap : 64;
		struct cu_block *nb =
		    (struct cu_block *)realloc(ctx->blocks, ncap * sizeof(*ctx->blocks));
		if (!nb) {
			be_errf(be, "%s(%zu bytes): out of host memory for the block table", fn,
				bytes);
			return NULL;
		}
		ctx->blocks = nb;
		ctx->cap = ncap;
	}
	e = dev_malloc(ctx, &p, cls);
	if (e != cudaSuccess) {
		cudaGetLastError();
		be_errf(be, "%s(%zu bytes): cudaMalloc(%zu) on GPU %d: %s", fn, bytes, cls,
			ctx->device, cudaGetErrorString(e));
		return NULL;
	}
	ctx->blocks[ctx->nblocks].p = p;
	ctx->blocks[ctx->nblocks].size = cls;
	ctx->blocks[ctx->nblocks].used = 1;
	ctx->nblocks++;
	return p;
}

static void arena_free(struct backend *be, void *p)
{
	struct cu_ctx *ctx = ctx_of(be);

	if (!p)
		return;
	for (size_t i = ctx->nblocks; i-- > 0;) {
		if (ctx->blocks[i].p == p) {
			ctx->blocks[i].used = 0;
			return;
		}
	}
	be_errf(be, "free(%p): not a block of this backend (ignored)", p);
}

/* The cuDNN workspace, grown to `bytes` (at most CU_WS_CAP: the algorithms are chosen so). */
static void *ws_reserve(struct backend *be, size_t bytes, const char *fn, const char *shape)
{
	struct cu_ctx *ctx = ctx_of(be);
	void *p = NULL;
	cudaError_t e;

	if (bytes <= ctx->ws_bytes)
		return ctx->ws;
	e = cudaStreamSynchronize(ctx->stream); /* the old workspace may still be in use */
	if (e != cudaSuccess) {
		be_errf(be, "%s(%s): cudaStreamSynchronize before growing the cuDNN workspace: %s",
			fn, shape, cudaGetErrorString(e));
		return NULL;
	}
	cudaFree(ctx->ws);
	ctx->held -= ctx->ws_bytes;
	ctx->ws = NULL;
	ctx->ws_bytes = 0;
	e = dev_malloc(ctx, &p, bytes);
	if (e != cudaSuccess) {
		cudaGetLastError();
		be_errf(be, "%s(%s): cudaMalloc(%zu) for the cuDNN workspace: %s", fn, shape, bytes,
			cudaGetErrorString(e));
		return NULL;
	}
	ctx->ws = p;
	ctx->ws_bytes = bytes;
	return p;
}

static void *cu_alloc(struct backend *be, size_t bytes)
{
	return arena_alloc(be, bytes, "alloc");
}

static void cu_free(struct backend *be, void *p)
{
	arena_free(be, p);
}

/* Copies in either direction (unified addressing tells which), finished on return: the host
 * buffer may be reused at once and errors of earlier kernels show up here. */
static int cu_copy(struct backend *be, const char *fn, void *dst, const void *src, size_t bytes)
{
	char shape[48];

	snprintf(shape, sizeof(shape), "%zu bytes", bytes);
	if (!bytes)
		return 0;
	CU_RET(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx_of(be)->stream));
	CU_RET(cudaStreamSynchronize(ctx_of(be)->stream));
	return 0;
}

static int cu_to_host(struct backend *be, void *dst, const void *src, size_t bytes)
{
	return cu_copy(be, "to_host", dst, src, bytes);
}

static int cu_from_host(struct backend *be, void *dst, const void *src, size_t bytes)
{
	return cu_copy(be, "from_host", dst, src, bytes);
}

static int cu_sync(struct backend *be)
{
	const char *fn = "sync", *shape = "";

	CU_RET(cudaStreamSynchronize(ctx_of(be)->stream));
	CU_RET(cudaGetLastError());
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * Kernels. Grid-stride loops over size_t indices; element-wise kernels read and write the same
 * index only, so outputs may alias inputs (nn.c runs relu_bwd in place). */

#define GRID_LOOP(i, n)                                                                            \
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                    \
	     i += (size_t)gridDim.x * blockDim.x)

/* Sum over a block of CU_THREADS threads in a fixed tree: the same bits every run. */
__device__ static double block_sum(double v)
{
	__shared__ double sh[CU_THREADS];
	unsigned t = threadIdx.x;

	sh[t] = v;
	__syncthreads();
	for (unsigned s = CU_THREADS / 2; s > 0; s >>= 1) {
		if (t < s)
			sh[t] += sh[t + s];
		__syncthreads();
	}
	double r = sh[0];
	__syncthreads();
	return r;
}

/* out = r + beta * out as the reference's blend(): in double, rounded once. */
__device__ static float blend_d(double r, float beta, const float *old)
{
	return beta == 0.0f ? (float)r : (float)(r + (double)beta * *old);
}

/* out = g + beta * out in float, rounded like the reference (no FMA). */
__device__ static float blend_f(float g, float beta, const float *old)
{
	return beta == 0.0f ? g : __fadd_rn(g, __fmul_rn(beta, *old));
}

__global__ static void k_fill(float *x, float v, size_t n)
{
	GRID_LOOP(i, n)
	x[i] = v;
}

__global__ static void k_relu_fwd(const float *x, float *y, size_t n)
{
	GRID_LOOP(i, n)
	{
		float v = x[i];
		y[i] = v > 0.0f ? v : 0.0f;
	}
}

__global__ static void k_relu_bwd(const float *y, const float *dy, float *dx, size_t n, float beta)
{
	GRID_LOOP(i, n)
	{
		float g = y[i] > 0.0f ? dy[i] : 0.0f;
		dx[i] = blend_f(g, beta, &dx[i]);
	}
}

__global__ static void k_add(const float *a, const float *b, float *y, size_t n)
{
	GRID_LOOP(i, n)
	y[i] = __fadd_rn(a[i], b[i]);
}

__global__ static void k_axpby(float alpha, const float *x, float beta, float *y, size_t n)
{
	GRID_LOOP(i, n)
	y[i] = blend_f(__fmul_rn(alpha, x[i]), beta, &y[i]);
}

__global__ static void k_gap_fwd(const float *x, float *y, size_t planes, int hw)
{
	GRID_LOOP(p, planes)
	{
		const float *xp = x + p * hw;
		double s = 0.0;
		for (int i = 0; i < hw; i++)
			s += xp[i];
		y[p] = (float)(s / hw);
	}
}

__global__ static void k_gap_bwd(const float *dy, float *dx, size_t n, int hw, float beta)
{
	GRID_LOOP(i, n)
	dx[i] = blend_f(__fdiv_rn(dy[i / hw], (float)hw), beta, &dx[i]);
}

/* y[r][c] += b[c] over rows of `cols`. */
__global__ static void k_bias_rows(float *y, const float *b, size_t n, int cols)
{
	GRID_LOOP(i, n)
	y[i] = __fadd_rn(y[i], b[i % cols]);
}

/* db[c] = sum over rows of dy[r][c] (+ beta db): linear's bias gradient. */
__global__ static void k_col_sum(const float *dy, int rows, int cols, float *db, float beta)
{
	GRID_LOOP(c, (size_t)cols)
	{
		double s = 0.0;
		for (int r = 0; r < rows; r++)
			s += dy[(size_t)r * cols + c];
		db[c] = blend_d(s, beta, &db[c]);
	}
}

/* db[k] = sum over n and the plane of dy[n][k] (+ beta db): one block per channel. */
__global__ static void k_channel_sum(const float *dy, int n, int k, int hw, float *db, float beta)
{
	int c = blockIdx.x;
	size_t m = (size_t)n * hw;
	double s = 0.0;

	for (size_t i = threadIdx.x; i < m; i += CU_THREADS)
		s += dy[((size_t)(i / hw) * k + c) * hw + i % hw];
	s = block_sum(s);
	if (threadIdx.x == 0)
		db[c] = blend_d(s, beta, &db[c]);
}

/* Sum of squares: fixed grid partials, then one block over them (same bits every run). */
__global__ static void k_sumsq_partial(const float *x, size_t n, double *partial)
{
	double s = 0.0;

	GRID_LOOP(i, n)
	s += (double)x[i] * x[i];
	s = block_sum(s);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = s;
}

__global__ static void k_sum_partials(const double *partial, unsigned count, double *out)
{
	double s = 0.0;

	for (unsigned i = threadIdx.x; i < count; i += CU_THREADS)
		s += partial[i];
	s = block_sum(s);
	if (threadIdx.x == 0)
		*out = s;
}

/* The reference's window_argmax, line for line: first maximum in scan order, NaN wins. */
__device__ static int window_argmax(const struct be_pool_desc &d, const float *xp, int oy, int ox)
{
	int y0 = oy * d.stride - d.pad, x0 = ox * d.stride - d.pad;
	int y1 = y0 + d.kh < d.h ? y0 + d.kh : d.h, x1 = x0 + d.kw < d.w ? x0 + d.kw : d.w;
	int best = (y0 > 0 ? y0 : 0) * d.w + (x0 > 0 ? x0 : 0);
	float m = xp[best];

	for (int iy = y0 > 0 ? y0 : 0; iy < y1; iy++) {
		for (int ix = x0 > 0 ? x0 : 0; ix < x1; ix++) {
			float v = xp[iy * d.w + ix];
			int take = v > m || v != v;
			best = take ? iy * d.w + ix : best;
			m = take ? v : m;
		}
	}
	return best;
}

__global__ static void k_pool_fwd(struct be_pool_desc d, const float *x, float *y, size_t n)
{
	size_t ohw = (size_t)d.oh * d.ow;

	GRID_LOOP(i, n)
	{
		size_t p = i / ohw;
		int oy = (int)(i % ohw) / d.ow, ox = (int)(i % ohw) % d.ow;
		const float *xp = x + p * d.h * d.w;
		if (d.kind == BE_POOL_MAX) {
			y[i] = xp[window_argmax(d, xp, oy, ox)];
			continue;
		}
		double s = 0.0;
		for (int a = 0; a < d.kh; a++) {
			int iy = oy * d.stride - d.pad + a;
			for (int b = 0; b < d.kw; b++) {
				int ix = ox * d.stride - d.pad + b;
				if (iy >= 0 && iy < d.h && ix >= 0 && ix < d.w)
					s += xp[iy * d.w + ix];
			}
		}
		y[i] = (float)(s / (d.kh * d.kw));
	}
}

/* Gather form of the reference's scatter: every input pixel visits the windows that cover it in
 * the reference's order (row-major over outputs) and adds the same float terms in that order,
 * starting from beta * old; no atomics, the reference's bits. */
__global__ static void k_pool_bwd(struct be_pool_desc d, const float *x, const float *dy, float *dx,
				  size_t n, float beta)
{
	size_t hw = (size_t)d.h * d.w;

	GRID_LOOP(i, n)
	{
		size_t p = i / hw;
		int iy = (int)(i % hw) / d.w, ix = (int)(i % hw) % d.w;
		const float *xp = x + p * hw;
		const float *dyp = dy + p * d.oh * d.ow;
		/* windows oy with oy*stride - pad <= iy < oy*stride - pad + kh */
		int ly = iy + d.pad - d.kh + 1, lx = ix + d.pad - d.kw + 1;
		int oy0 = ly <= 0 ? 0 : (ly + d.stride - 1) / d.stride;
		int ox0 = lx <= 0 ? 0 : (lx + d.stride - 1) / d.stride;
		int oy1 = (iy + d.pad) / d.stride, ox1 = (ix + d.pad) / d.stride;
		float acc = beta == 0.0f ? 0.0f : __fmul_rn(beta, dx[i]);
		if (oy1 > d.oh - 1)
			oy1 = d.oh - 1;
		if (ox1 > d.ow - 1)
			ox1 = d.ow - 1;
		for (int oy = oy0; oy <= oy1; oy++) {
			for (int ox = ox0; ox <= ox1; ox++) {
				float g = dyp[oy * d.ow + ox];
				if (d.kind == BE_POOL_MAX) {
					if (window_argmax(d, xp, oy, ox) == iy * d.w + ix)
						acc = __fadd_rn(acc, g);
				} else {
					acc = __fadd_rn(acc, __fdiv_rn(g, (float)(d.kh * d.kw)));
				}
			}
		}
		dx[i] = acc;
	}
}

/* Softmax cross-entropy of one row per block: the reference's formulas in double. Labels were
 * checked on the host. Writes the row's loss and hit; dlogits when not NULL. */
__global__ static void k_xent_rows(const float *logits, const int32_t *labels, int n, int classes,
				   float smoothing, float scale, double *row_loss, int *row_hit,
				   float *dlogits)
{
	__shared__ float bv[CU_THREADS];
	__shared__ int bi[CU_THREADS];
	int r = blockIdx.x, t = threadIdx.x;
	const float *l = logits + (size_t)r * classes;
	int label = labels[r];
	float v = 0.0f;
	int a = -1;

	/* argmax, ties to the lowest index */
	for (int j = t; j < classes; j += CU_THREADS) {
		if (a < 0 || l[j] > v) {
			v = l[j];
			a = j;
		}
	}
	bv[t] = v;
	bi[t] = a;
	__syncthreads();
	for (int s = CU_THREADS / 2; s > 0; s >>= 1) {
		if (t < s) {
			int j = bi[t + s];
			if (j >= 0 &&
			    (bi[t] < 0 || bv[t + s] > bv[t] || (bv[t + s] == bv[t] && j < bi[t]))) {
				bv[t] = bv[t + s];
				bi[t] = j;
			}
		}
		__syncthreads();
	}
	int arg = bi[0];
	double m = l[arg], se = 0.0, slp = 0.0;
	for (int j = t; j < classes; j += CU_THREADS)
		se += exp((double)l[j] - m);
	double lse = m + log(block_sum(se));
	for (int j = t; j < classes; j += CU_THREADS)
		slp += (double)l[j] - lse;
	slp = block_sum(slp);
	/* smoothing / classes is a float division in the reference */
	float sc = smoothing / (float)classes;
	if (t == 0) {
		row_loss[r] = (1.0 - smoothing) * (lse - l[label]) - sc * slp;
		row_hit[r] = arg == label;
	}
	if (dlogits) {
		float *d = dlogits + (size_t)r * classes;
		double g = (double)scale / n;
		for (int j = t; j < classes; j += CU_THREADS) {
			double tj = sc + (j == label ? 1.0 - smoothing : 0.0);
			d[j] = (float)((exp((double)l[j] - lse) - tj) * g);
		}
	}
}

/* ---------------------------------------------------------------------------------------
 * Element-wise ops, global average pool, cross-entropy, sums. */

static int cu_fill(struct backend *be, float *x, float value, size_t n)
{
	const char *fn = "fill";
	char shape[32];

	snprintf(shape, sizeof(shape), "n=%zu", n);
	if (n)
		LAUNCH(k_fill, grid_for(n), CU_THREADS, x, value, n);
	return 0;
}

static int cu_relu_fwd(struct backend *be, const float *x, float *y, size_t n)
{
	const char *fn = "relu_fwd";
	char shape[32];

	snprintf(shape, sizeof(shape), "n=%zu", n);
	if (n)
		LAUNCH(k_relu_fwd, grid_for(n), CU_THREADS, x, y, n);
	return 0;
}

static int cu_relu_bwd(struct backend *be, const float *y, const float *dy, float *dx, size_t n,
		       float beta)
{
	const char *fn = "relu_bwd";
	char shape[32];

	snprintf(shape, sizeof(shape), "n=%zu", n);
	if (n)
		LAUNCH(k_relu_bwd, grid_for(n), CU_THREADS, y, dy, dx, n, beta);
	return 0;
}

static int cu_add(struct backend *be, const float *a, const float *b, float *y, size_t n)
{
	const char *fn = "add";
	char shape[32];

	snprintf(shape, sizeof(shape), "n=%zu", n);
	if (n)
		LAUNCH(k_add, grid_for(n), CU_THREADS, a, b, y, n);
	return 0;
}

static int cu_axpby(struct backend *be, float alpha, const float *x, float beta, float *y, size_t n)
{
	const char *fn = "axpby";
	char shape[32];

	snprintf(shape, sizeof(shape), "n=%zu", n);
	if (n)
		LAUNCH(k_axpby, grid_for(n), CU_THREADS, alpha, x, beta, y, n);
	return 0;
}

static int cu_gap_fwd(struct backend *be, const float *x, float *y, int n, int c, int hw)
{
	const char *fn = "gap_fwd";
	char shape[64];

	snprintf(shape, sizeof(shape), "n=%d c=%d hw=%d", n, c, hw);
	if (n <= 0 || c <= 0 || hw <= 0)
		return be_errf(be, "gap_fwd(%s): sizes must be positive", shape);
	size_t planes = (size_t)n * c;
	LAUNCH(k_gap_fwd, grid_for(planes), CU_THREADS, x, y, planes, hw);
	return 0;
}

static int cu_gap_bwd(struct backend *be, const float *dy, float *dx, int n, int c, int hw,
		      float beta)
{
	const char *fn = "gap_bwd";
	char shape[64];

	snprintf(shape, sizeof(shape), "n=%d c=%d hw=%d", n, c, hw);
	if (n <= 0 || c <= 0 || hw <= 0)
		return be_errf(be, "gap_bwd(%s): sizes must be positive", shape);
	size_t total = (size_t)n * c * hw;
	LAUNCH(k_gap_bwd, grid_for(total), CU_THREADS, dy, dx, total, hw, beta);
	return 0;
}

/* Whether p is device (or managed) memory; host memory otherwise. */
static int is_device_ptr(const void *p)
{
	cudaPointerAttributes a;

	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		cudaGetLastError(); /* older drivers fail on plain host memory */
		return 0;
	}
	return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* Per-row results come back to the host and are summed there in row order, as the reference
 * does. Labels may be in device or host memory: they are read on the host first to give the
 * reference's message for a label out of range. */
static int cu_xent(struct backend *be, const float *logits, const int32_t *labels, int n,
		   int classes, float smoothing, float scale, float *loss, int *correct,
		   float *dlogits)
{
	const char *fn = "xent";
	char shape[64];
	struct cu_ctx *ctx = ctx_of(be);
	int32_t *hl = NULL;
	double *hloss = NULL;
	int *hhit = NULL;
	char *scratch = NULL;
	double *dloss;
	int *dhit;
	int32_t *dlab;
	const int32_t *lab;
	double total = 0.0;
	int hits = 0, rv = -1, on_dev;

	snprintf(shape, sizeof(shape), "n=%d classes=%d", n, classes);
	if (n <= 0 || classes <= 0 || !(smoothing >= 0.0f && smoothing <= 1.0f)) {
		be_errf(be,
			"xent(n=%d classes=%d smoothing=%g): n and classes must be positive, "
			"smoothing in [0, 1]",
			n, classes, smoothing);
		goto out;
	}
	hl = (int32_t *)malloc(sizeof(*hl) * n);
	hloss = (double *)malloc(sizeof(*hloss) * n);
	hhit = (int *)malloc(sizeof(*hhit) * n);
	if (!hl || !hloss || !hhit) {
		be_errf(be, "xent(%s): out of host memory", shape);
		goto out;
	}
	on_dev = is_device_ptr(labels);
	if (on_dev) {
		CU_TRY(cudaMemcpyAsync(hl, labels, sizeof(*hl) * n, cudaMemcpyDeviceToHost,
				       ctx->stream));
		CU_TRY(cudaStreamSynchronize(ctx->stream));
	} else {
		memcpy(hl, labels, sizeof(*hl) * n);
	}
	for (int i = 0; i < n; i++) {
		if (hl[i] < 0 || hl[i] >= classes) {
			be_errf(be,
				"xent(n=%d classes=%d): label %d of sample %d is outside [0, %d)",
				n, classes, (int)hl[i], i, classes);
			goto out;
		}
	}
	scratch = (char *)arena_alloc(be, (sizeof(double) + sizeof(int) + sizeof(int32_t)) * n, fn);
	if (!scratch)
		goto out;
	dloss = (double *)scratch;
	dhit = (int *)(dloss + n);
	dlab = (int32_t *)(dhit + n);
	lab = labels;
	if (!on_dev) {
		CU_TRY(cudaMemcpyAsync(dlab, hl, sizeof(*hl) * n, cudaMemcpyHostToDevice,
				       ctx->stream));
		lab = dlab;
	}
	k_xent_rows<<<n, CU_THREADS, 0, ctx->stream>>>(logits, lab, n, classes, smoothing, scale,
						       dloss, dhit, dlogits);
	CU_TRY(cudaGetLastError());
	CU_TRY(
	    cudaMemcpyAsync(hloss, dloss, sizeof(*hloss) * n, cudaMemcpyDeviceToHost, ctx->stream));
	CU_TRY(cudaMemcpyAsync(hhit, dhit, sizeof(*hhit) * n, cudaMemcpyDeviceToHost, ctx->stream));
	CU_TRY(cudaStreamSynchronize(ctx->stream));
	for (int i = 0; i < n; i++) {
		total += hloss[i];
		hits += hhit[i];
	}
	*loss = (float)(total / n);
	*correct = hits;
	rv = 0;
out:
	if (scratch)
		arena_free(be, scratch);
	free(hl);
	free(hloss);
	free(hhit);
	return rv;
}

static int cu_sumsq(struct backend *be, const float *x, size_t n, double *out)
{
	const char *fn = "sumsq";
	char shape[32];
	struct cu_ctx *ctx = ctx_of(be);
	size_t blocks = (n + CU_THREADS * 8 - 1) / (CU_THREADS * 8);
	double *partial = NULL;
	int rv = -1;

	snprintf(shape, sizeof(shape), "n=%zu", n);
	if (!n) {
		*out = 0.0;
		return 0;
	}
	if (blocks > CU_SUMSQ_BLOCKS)
		blocks = CU_SUMSQ_BLOCKS;
	partial = (double *)arena_alloc(be, sizeof(double) * (blocks + 1), fn);
	if (!partial)
		return -1;
	k_sumsq_partial<<<(unsigned)blocks, CU_THREADS, 0, ctx->stream>>>(x, n, partial);
	CU_TRY(cudaGetLastError());
	k_sum_partials<<<1, CU_THREADS, 0, ctx->stream>>>(partial, (unsigned)blocks,
							  partial + blocks);
	CU_TRY(cudaGetLastError());
	CU_TRY(cudaMemcpyAsync(out, partial + blocks, sizeof(double), cudaMemcpyDeviceToHost,
			       ctx->stream));
	CU_TRY(cudaStreamSynchronize(ctx->stream));
	rv = 0;
out:
	arena_free(be, partial);
	return rv;
}

/* ---------------------------------------------------------------------------------------
 * Ops with a plan. */

static struct be_op *op_new(struct backend *be, enum cu_kind kind, const char *fn)
{
	struct be_op *op = (struct be_op *)calloc(1, sizeof(*op));

	if (!op) {
		be_errf(be, "%s: out of memory", fn);
		return NULL;
	}
	op->kind = kind;
	return op;
}

/* A mismatched op is a caller bug that would otherwise read out of bounds. */
static int op_is(struct backend *be, const struct be_op *op, enum cu_kind kind, const char *fn)
{
	if (op && op->kind == kind)
		return 1;
	be_errf(be, "%s: the op was not created by the matching *_create", fn);
	return 0;
}

static void cu_op_destroy(struct backend *be, struct be_op *op)
{
	(void)be;
	if (!op)
		return;
	if (op->xd)
		cudnnDestroyTensorDescriptor(op->xd);
	if (op->yd)
		cudnnDestroyTensorDescriptor(op->yd);
	if (op->bd)
		cudnnDestroyTensorDescriptor(op->bd);
	if (op->wd)
		cudnnDestroyFilterDescriptor(op->wd);
	if (op->cd)
		cudnnDestroyConvolutionDescriptor(op->cd);
	free(op);
}

static int tensor4d(struct backend *be, cudnnTensorDescriptor_t *t, int n, int c, int h, int w,
		    const char *fn, const char *shape)
{
	DNN_RET(cudnnCreateTensorDescriptor(t));
	DNN_RET(cudnnSetTensor4dDescriptor(*t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
	return 0;
}

/* Whether a candidate algorithm may be used: supported, FMA arithmetic unless TF32 is allowed
 * (never a conversion to half precision), and deterministic when asked to be. */
static int algo_ok(struct cu_ctx *ctx, cudnnStatus_t status, cudnnMathType_t math,
		   cudnnDeterminism_t det)
{
	return status == CUDNN_STATUS_SUCCESS && math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
	       (ctx->tf32 || math != CUDNN_TENSOR_OP_MATH) &&
	       (!ctx->deterministic || det == CUDNN_DETERMINISTIC);
}

/* The three passes' algorithms: cuDNN's heuristics in order of expected speed, the first one
 * allowed whose workspace fits under the cap; else the always-supported, deterministic one. */
static int pick_algos(struct backend *be, struct be_op *op, const char *fn, const char *shape)
{
	struct cu_ctx *ctx = ctx_of(be);
	cudnnConvolutionFwdAlgoPerf_t pf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
	cudnnConvolutionBwdDataAlgoPerf_t pd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
	cudnnConvolutionBwdFilterAlgoPerf_t pw[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
	int got = 0, found;
	size_t ws;
	cudnnMathType_t fallback = ctx->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;

	op->fwd_math = op->bwd_data_math = op->bwd_filter_math = fallback;

	DNN_RET(cudnnGetConvolutionForwardAlgorithm_v7(ctx->dnn, op->xd, op->wd, op->cd, op->yd,
						       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, pf));
	found = 0;
	for (int i = 0; i < got && !found; i++) {
		if (algo_ok(ctx, pf[i].status, pf[i].mathType, pf[i].determinism) &&
		    cudnnGetConvolutionForwardWorkspaceSize(ctx->dnn, op->xd, op->wd, op->cd,
							    op->yd, pf[i].algo,
							    &ws) == CUDNN_STATUS_SUCCESS &&
		    ws <= CU_WS_CAP) {
			op->fwd_algo = pf[i].algo;
			op->fwd_ws = ws;
			op->fwd_math = pf[i].mathType;
			found = 1;
		}
	}
	if (!found) {
		op->fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
		DNN_RET(cudnnGetConvolutionForwardWorkspaceSize(ctx->dnn, op->xd, op->wd, op->cd,
								op->yd, op->fwd_algo, &op->fwd_ws));
	}

	DNN_RET(cudnnGetConvolutionBackwardDataAlgorithm_v7(
	    ctx->dnn, op->wd, op->yd, op->cd, op->xd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got,
	    pd));
	found = 0;
	for (int i = 0; i < got && !found; i++) {
		if (algo_ok(ctx, pd[i].status, pd[i].mathType, pd[i].determinism) &&
		    cudnnGetConvolutionBackwardDataWorkspaceSize(ctx->dnn, op->wd, op->yd, op->cd,
								 op->xd, pd[i].algo,
								 &ws) == CUDNN_STATUS_SUCCESS &&
		    ws <= CU_WS_CAP) {
			op->bwd_data_algo = pd[i].algo;
			op->bwd_data_ws = ws;
			op->bwd_data_math = pd[i].mathType;
			found = 1;
		}
	}
	if (!found) {
		op->bwd_data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
		DNN_RET(cudnnGetConvolutionBackwardDataWorkspaceSize(
		    ctx->dnn, op->wd, op->yd, op->cd, op->xd, op->bwd_data_algo, &op->bwd_data_ws));
	}

	DNN_RET(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
	    ctx->dnn, op->xd, op->yd, op->cd, op->wd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got,
	    pw));
	found = 0;
	for (int i = 0; i < got && !found; i++) {
		if (algo_ok(ctx, pw[i].status, pw[i].mathType, pw[i].determinism) &&
		    cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx->dnn, op->xd, op->yd, op->cd,
								   op->wd, pw[i].algo,
								   &ws) == CUDNN_STATUS_SUCCESS &&
		    ws <= CU_WS_CAP) {
			op->bwd_filter_algo = pw[i].algo;
			op->bwd_filter_ws = ws;
			op->bwd_filter_math = pw[i].mathType;
			found = 1;
		}
	}
	if (!found) {
		op->bwd_filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
		DNN_RET(cudnnGetConvolutionBackwardFilterWorkspaceSize(
		    ctx->dnn, op->xd, op->yd, op->cd, op->wd, op->bwd_filter_algo,
		    &op->bwd_filter_ws));
	}
	return 0;
}

static struct be_op *cu_conv_create(struct backend *be, struct be_conv_desc *d)
{
	const char *fn = "conv_create";
	struct be_op *op;
	const char *shape;
	int on, oc, oh, ow;

	if (be_conv_check(be, d) < 0 || !(op = op_new(be, CU_CONV, fn)))
		return NULL;
	op->d.conv = *d;
	shape = be_conv_str(d, op->shape, sizeof(op->shape));
	if (tensor4d(be, &op->xd, d->n, d->c, d->h, d->w, fn, shape) < 0 ||
	    tensor4d(be, &op->yd, d->n, d->k, d->oh, d->ow, fn, shape) < 0 ||
	    tensor4d(be, &op->bd, 1, d->k, 1, 1, fn, shape) < 0)
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
	DNN_FAIL(cudnnSetFilter4dDescriptor(op->wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, d->k, d->c,
					    d->kh, d->kw));
	DNN_FAIL(cudnnCreateConvolutionDescriptor(&op->cd));
	DNN_FAIL(cudnnSetConvolution2dDescriptor(op->cd, d->pad, d->pad, d->stride, d->stride, 1, 1,
						 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
	DNN_FAIL(cudnnSetConvolutionMathType(op->cd, ctx_of(be)->tf32 ? CUDNN_DEFAULT_MATH
								     : CUDNN_FMA_MATH));
	DNN_FAIL(cudnnGetConvolution2dForwardOutputDim(op->cd, op->xd, op->wd, &on, &oc, &oh, &ow));
#undef DNN_FAIL
	if (on != d->n || oc != d->k || oh != d->oh || ow != d->ow) {
		be_errf(be,
			"conv_create(%s): cuDNN computes an output of %dx%dx%dx%d, not %dx%dx%dx%d",
			shape, on, oc, oh, ow, d->n, d->k, d->oh, d->ow);
		goto fail;
	}
	if (pick_algos(be, op, fn, shape) < 0)
		goto fail;
	return op;
fail:
	cu_op_destroy(be, op);
	return NULL;
}

static const float one_f = 1.0f, zero_f = 0.0f;

static int cu_conv_fwd(struct backend *be, struct be_op *op, const float *x, const float *wgt,
		       const float *bias, float *y)
{
	const char *fn = "conv_fwd", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	void *ws;

	if (!op_is(be, op, CU_CONV, fn))
		return -1;
	shape = op->shape;
	if (op->d.conv.has_bias && !bias)
		return be_errf(be, "conv_fwd(%s): the op has a bias but bias is NULL", shape);
	if (!(ws = ws_reserve(be, op->fwd_ws, fn, shape)) && op->fwd_ws)
		return -1;
	DNN_RET(cudnnSetConvolutionMathType(op->cd, op->fwd_math));
	DNN_RET(cudnnConvolutionForward(ctx->dnn, &one_f, op->xd, x, op->wd, wgt, op->cd,
					op->fwd_algo, ws, op->fwd_ws, &zero_f, op->yd, y));
	if (op->d.conv.has_bias)
		DNN_RET(cudnnAddTensor(ctx->dnn, &one_f, op->bd, bias, &one_f, op->yd, y));
	return 0;
}

/* cuDNN's beta is the op table's: 0 does not read the output, else out = r + beta * out. */
static int cu_conv_bwd_data(struct backend *be, struct be_op *op, const float *dy, const float *wgt,
			    float *dx, float beta)
{
	const char *fn = "conv_bwd_data", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	void *ws;

	if (!op_is(be, op, CU_CONV, fn))
		return -1;
	shape = op->shape;
	if (!(ws = ws_reserve(be, op->bwd_data_ws, fn, shape)) && op->bwd_data_ws)
		return -1;
	DNN_RET(cudnnSetConvolutionMathType(op->cd, op->bwd_data_math));
	DNN_RET(cudnnConvolutionBackwardData(ctx->dnn, &one_f, op->wd, wgt, op->yd, dy, op->cd,
					     op->bwd_data_algo, ws, op->bwd_data_ws, &beta, op->xd,
					     dx));
	return 0;
}

static int cu_conv_bwd_weights(struct backend *be, struct be_op *op, const float *x,
			       const float *dy, float *dwgt, float *dbias, float beta)
{
	const char *fn = "conv_bwd_weights", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_conv_desc *d;
	void *ws;

	if (!op_is(be, op, CU_CONV, fn))
		return -1;
	shape = op->shape;
	d = &op->d.conv;
	if (d->has_bias && !dbias)
		return be_errf(be, "conv_bwd_weights(%s): the op has a bias but dbias is NULL",
			       shape);
	if (!(ws = ws_reserve(be, op->bwd_filter_ws, fn, shape)) && op->bwd_filter_ws)
		return -1;
	DNN_RET(cudnnSetConvolutionMathType(op->cd, op->bwd_filter_math));
	DNN_RET(cudnnConvolutionBackwardFilter(ctx->dnn, &one_f, op->xd, x, op->yd, dy, op->cd,
					       op->bwd_filter_algo, ws, op->bwd_filter_ws, &beta,
					       op->wd, dwgt));
	if (d->has_bias)
		LAUNCH(k_channel_sum, d->k, CU_THREADS, dy, d->n, d->k, d->oh * d->ow, dbias, beta);
	return 0;
}

/* Batch norm: cuDNN's spatial mode, whose formulas are PyTorch's (saved inverse std, running
 * variance unbiased, running = (1 - factor) running + factor stat with factor = momentum). The
 * fused ReLU is an own kernel after the forward and a mask of dy before the backward. */
static struct be_op *cu_bn_create(struct backend *be, const struct be_bn_desc *d)
{
	const char *fn = "bn_create";
	struct be_op *op;
	const char *shape;
	cudnnStatus_t s;

	if (be_bn_check(be, d) < 0 || !(op = op_new(be, CU_BN, fn)))
		return NULL;
	op->d.bn = *d;
	shape = be_bn_str(d, op->shape, sizeof(op->shape));
	if (tensor4d(be, &op->xd, d->n, d->c, d->h, d->w, fn, shape) < 0)
		goto fail;
	if ((s = cudnnCreateTensorDescriptor(&op->bd)) != CUDNN_STATUS_SUCCESS ||
	    (s = cudnnDeriveBNTensorDescriptor(op->bd, op->xd, CUDNN_BATCHNORM_SPATIAL)) !=
		CUDNN_STATUS_SUCCESS) {
		be_errf(be, "bn_create(%s): cudnnDeriveBNTensorDescriptor: %s", shape,
			cudnnGetErrorString(s));
		goto fail;
	}
	return op;
fail:
	cu_op_destroy(be, op);
	return NULL;
}

static int cu_bn_fwd_train(struct backend *be, struct be_op *op, const float *x, const float *gamma,
			   const float *beta_, float *y, float *save_mean, float *save_invstd,
			   float *running_mean, float *running_var, float momentum)
{
	const char *fn = "bn_fwd_train", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_bn_desc *d;

	if (!op_is(be, op, CU_BN, fn))
		return -1;
	shape = op->shape;
	d = &op->d.bn;
	if ((long long)d->n * d->h * d->w < 2)
		return be_errf(
		    be, "bn_fwd_train(%s): training needs more than one value per channel", shape);
	DNN_RET(cudnnBatchNormalizationForwardTraining(
	    ctx->dnn, CUDNN_BATCHNORM_SPATIAL, &one_f, &zero_f, op->xd, x, op->xd, y, op->bd, gamma,
	    beta_, (double)momentum, running_mean, running_var, (double)d->eps, save_mean,
	    save_invstd));
	if (d->fuse_relu) {
		size_t n = (size_t)d->n * d->c * d->h * d->w;
		LAUNCH(k_relu_fwd, grid_for(n), CU_THREADS, y, y, n);
	}
	return 0;
}

static int cu_bn_fwd_infer(struct backend *be, struct be_op *op, const float *x, const float *gamma,
			   const float *beta_, const float *running_mean, const float *running_var,
			   float *y)
{
	const char *fn = "bn_fwd_infer", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_bn_desc *d;

	if (!op_is(be, op, CU_BN, fn))
		return -1;
	shape = op->shape;
	d = &op->d.bn;
	DNN_RET(cudnnBatchNormalizationForwardInference(
	    ctx->dnn, CUDNN_BATCHNORM_SPATIAL, &one_f, &zero_f, op->xd, x, op->xd, y, op->bd, gamma,
	    beta_, running_mean, running_var, (double)d->eps));
	if (d->fuse_relu) {
		size_t n = (size_t)d->n * d->c * d->h * d->w;
		LAUNCH(k_relu_fwd, grid_for(n), CU_THREADS, y, y, n);
	}
	return 0;
}

/* cuDNN wants dx: without one (or where it aliases an input) it goes to scratch, blended into
 * the caller's dx afterwards when there is one. */
static int cu_bn_bwd(struct backend *be, struct be_op *op, const float *x, const float *y,
		     const float *dy, const float *gamma, const float *save_mean,
		     const float *save_invstd, float *dx, float *dgamma, float *dbeta, float beta)
{
	const char *fn = "bn_bwd", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_bn_desc *d;
	size_t n, need;
	float *scratch = NULL, *g, *out;
	float data_beta;
	int rv = -1, alias;

	if (!op_is(be, op, CU_BN, fn))
		return -1;
	shape = op->shape;
	d = &op->d.bn;
	n = (size_t)d->n * d->c * d->h * d->w;
	alias = dx && (dx == dy || dx == x);
	need = (d->fuse_relu ? n : 0) + (!dx || alias ? n : 0);
	if (need && !(scratch = (float *)arena_alloc(be, need * sizeof(float), fn)))
		return -1;
	g = (float *)dy;
	out = dx;
	data_beta = beta;
	if (d->fuse_relu) {
		g = scratch;
		k_relu_bwd<<<grid_for(n), CU_THREADS, 0, ctx->stream>>>(y, dy, g, n, 0.0f);
		CU_TRY(cudaGetLastError());
	}
	if (!dx || alias) {
		out = scratch + (d->fuse_relu ? n : 0);
		data_beta = 0.0f;
	}
	DNN_TRY(cudnnBatchNormalizationBackward(
	    ctx->dnn, CUDNN_BATCHNORM_SPATIAL, &one_f, &data_beta, &one_f, &beta, op->xd, x, op->xd,
	    g, op->xd, out, op->bd, gamma, dgamma, dbeta, (double)d->eps, save_mean, save_invstd));
	if (alias) {
		k_axpby<<<grid_for(n), CU_THREADS, 0, ctx->stream>>>(1.0f, out, beta, dx, n);
		CU_TRY(cudaGetLastError());
	}
	rv = 0;
out:
	arena_free(be, scratch);
	return rv;
}

static struct be_op *cu_pool_create(struct backend *be, struct be_pool_desc *d)
{
	struct be_op *op;

	if (be_pool_check(be, d) < 0 || !(op = op_new(be, CU_POOL, "pool_create")))
		return NULL;
	op->d.pool = *d;
	be_pool_str(d, op->shape, sizeof(op->shape));
	return op;
}

/* Own kernels, not cuDNN's: the op table fixes where max pooling sends the gradient of ties
 * (the first maximum in scan order), and the gather form needs no atomics. */
static int cu_pool_fwd(struct backend *be, struct be_op *op, const float *x, float *y)
{
	const char *fn = "pool_fwd", *shape;
	const struct be_pool_desc *d;

	if (!op_is(be, op, CU_POOL, fn))
		return -1;
	shape = op->shape;
	d = &op->d.pool;
	size_t n = (size_t)d->n * d->c * d->oh * d->ow;
	LAUNCH(k_pool_fwd, grid_for(n), CU_THREADS, *d, x, y, n);
	return 0;
}

static int cu_pool_bwd(struct backend *be, struct be_op *op, const float *x, const float *y,
		       const float *dy, float *dx, float beta)
{
	const char *fn = "pool_bwd", *shape;
	const struct be_pool_desc *d;

	(void)y;
	if (!op_is(be, op, CU_POOL, fn))
		return -1;
	shape = op->shape;
	d = &op->d.pool;
	size_t n = (size_t)d->n * d->c * d->h * d->w;
	LAUNCH(k_pool_bwd, grid_for(n), CU_THREADS, *d, x, dy, dx, n, beta);
	return 0;
}

static struct be_op *cu_linear_create(struct backend *be, const struct be_linear_desc *d)
{
	struct be_op *op;

	if (be_linear_check(be, d) < 0 || !(op = op_new(be, CU_LINEAR, "linear_create")))
		return NULL;
	op->d.linear = *d;
	be_linear_str(d, op->shape, sizeof(op->shape));
	return op;
}

/* Row-major products through column-major cuBLAS: a row-major [r][c] matrix is its column-major
 * transpose. y^T (out x n) = W (out x in, i.e. W^T read transposed) x^T (in x n). */
static int cu_linear_fwd(struct backend *be, struct be_op *op, const float *x, const float *wgt,
			 const float *bias, float *y)
{
	const char *fn = "linear_fwd", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_linear_desc *d;

	if (!op_is(be, op, CU_LINEAR, fn))
		return -1;
	shape = op->shape;
	d = &op->d.linear;
	if (d->has_bias && !bias)
		return be_errf(be, "linear_fwd(%s): the op has a bias but bias is NULL", shape);
	BLAS_RET(cublasSgemm(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, d->out, d->n, d->in, &one_f, wgt,
			     d->in, x, d->in, &zero_f, y, d->out));
	if (d->has_bias) {
		size_t n = (size_t)d->n * d->out;
		LAUNCH(k_bias_rows, grid_for(n), CU_THREADS, y, bias, n, d->out);
	}
	return 0;
}

/* dx^T (in x n) = W^T (in x out) dy^T (out x n). */
static int cu_linear_bwd_data(struct backend *be, struct be_op *op, const float *dy,
			      const float *wgt, float *dx, float beta)
{
	const char *fn = "linear_bwd_data", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_linear_desc *d;

	if (!op_is(be, op, CU_LINEAR, fn))
		return -1;
	shape = op->shape;
	d = &op->d.linear;
	BLAS_RET(cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, d->in, d->n, d->out, &one_f, wgt,
			     d->in, dy, d->out, &beta, dx, d->in));
	return 0;
}

/* dW^T (in x out) = x^T (in x n) dy (n x out, i.e. dy^T read transposed). */
static int cu_linear_bwd_weights(struct backend *be, struct be_op *op, const float *x,
				 const float *dy, float *dwgt, float *dbias, float beta)
{
	const char *fn = "linear_bwd_weights", *shape;
	struct cu_ctx *ctx = ctx_of(be);
	const struct be_linear_desc *d;

	if (!op_is(be, op, CU_LINEAR, fn))
		return -1;
	shape = op->shape;
	d = &op->d.linear;
	if (d->has_bias && !dbias)
		return be_errf(be, "linear_bwd_weights(%s): the op has a bias but dbias is NULL",
			       shape);
	BLAS_RET(cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_T, d->in, d->out, d->n, &one_f, x,
			     d->in, dy, d->out, &beta, dwgt, d->in));
	if (d->has_bias)
		LAUNCH(k_col_sum, grid_for((size_t)d->out), CU_THREADS, dy, d->n, d->out, dbias,
		       beta);
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * Pinned memory, uploads on a copy stream, markers (cudaEvent). */

static void *cu_host_alloc(struct backend *be, size_t bytes)
{
	void *p = NULL;
	cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);

	if (e != cudaSuccess) {
		cudaGetLastError();
		be_errf(be, "host_alloc(%zu bytes): cudaHostAlloc: %s", bytes, cudaGetErrorString(e));
		return NULL;
	}
	return p;
}

static void cu_host_free(struct backend *be, void *p)
{
	(void)be;
	if (p)
		cudaFreeHost(p);
}

/* Records *ev (created on first use, then reused) after the work given to stream so far. */
static int record_on(struct backend *be, cudaStream_t stream, void **ev, const char *fn,
		     const char *shape)
{
	if (!*ev) {
		cudaEvent_t e;
		CU_RET(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
		*ev = (void *)e;
	}
	CU_RET(cudaEventRecord((cudaEvent_t)*ev, stream));
	return 0;
}

static int cu_mark(struct backend *be, void **ev)
{
	return record_on(be, ctx_of(be)->stream, ev, "mark", "");
}

/* From any thread: the event's device is the backend's, whichever is current here. */
static int cu_mark_wait(struct backend *be, void *ev)
{
	const char *fn = "mark_wait", *shape = "";

	if (!ev)
		return 0;
	CU_RET(cudaSetDevice(ctx_of(be)->device)); /* for a thread that never chose one */
	CU_RET(cudaEventSynchronize((cudaEvent_t)ev));
	return 0;
}

static void cu_mark_free(struct backend *be, void *ev)
{
	(void)be;
	if (ev)
		cudaEventDestroy((cudaEvent_t)ev);
}

/* The copy runs on ctx->copy after what that stream was given before; the compute stream waits
 * for its end (an event) before anything issued later, so the copy overlaps the compute issued
 * earlier. Nothing orders it after that compute: dst must not be in use by it (the trainer
 * alternates two buffers and waits for a mark after the last work reading one). */
static int cu_upload(struct backend *be, void *dst, const void *src, size_t bytes, void **done)
{
	const char *fn = "upload";
	char shape[48];
	struct cu_ctx *ctx = ctx_of(be);

	snprintf(shape, sizeof(shape), "%zu bytes", bytes);
	if (!ctx->copy)
		CU_RET(cudaStreamCreateWithFlags(&ctx->copy, cudaStreamNonBlocking));
	if (bytes)
		CU_RET(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->copy));
	if (record_on(be, ctx->copy, done, fn, shape) < 0)
		return -1;
	CU_RET(cudaStreamWaitEvent(ctx->stream, (cudaEvent_t)*done, 0));
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * The backend. */

static void cu_destroy(struct backend *be)
{
	struct cu_ctx *ctx;

	if (!be)
		return;
	ctx = ctx_of(be);
	if (ctx) {
		if (ctx->stream)
			cudaStreamSynchronize(ctx->stream);
		for (size_t i = 0; i < ctx->nblocks; i++)
			cudaFree(ctx->blocks[i].p);
		free(ctx->blocks);
		cudaFree(ctx->ws);
		if (ctx->blas)
			cublasDestroy(ctx->blas);
		if (ctx->dnn)
			cudnnDestroy(ctx->dnn);
		if (ctx->stream)
			cudaStreamDestroy(ctx->stream);
		if (ctx->copy) {
			cudaStreamSynchronize(ctx->copy);
			cudaStreamDestroy(ctx->copy);
		}
		free(ctx);
	}
	free(be);
}

static const struct backend_ops cu_ops = {
    "cuda",
    cu_alloc,
    cu_free,
    cu_to_host,
    cu_from_host,
    cu_fill,
    cu_sync,
    cu_conv_create,
    cu_conv_fwd,
    cu_conv_bwd_data,
    cu_conv_bwd_weights,
    cu_bn_create,
    cu_bn_fwd_train,
    cu_bn_fwd_infer,
    cu_bn_bwd,
    cu_pool_create,
    cu_pool_fwd,
    cu_pool_bwd,
    cu_linear_create,
    cu_linear_fwd,
    cu_linear_bwd_data,
    cu_linear_bwd_weights,
    cu_op_destroy,
    cu_relu_fwd,
    cu_relu_bwd,
    cu_add,
    cu_axpby,
    cu_gap_fwd,
    cu_gap_bwd,
    cu_xent,
    cu_sumsq,
    cu_destroy,
    cu_host_alloc,
    cu_host_free,
    cu_upload,
    cu_mark,
    cu_mark_wait,
    cu_mark_free,
};

extern "C" void *be_cuda_stream(struct backend *be)
{
	return be && be->ops == &cu_ops ? (void *)ctx_of(be)->stream : NULL;
}

extern "C" int be_cuda_device(struct backend *be)
{
	return be && be->ops == &cu_ops ? ctx_of(be)->device : -1;
}

extern "C" size_t be_cuda_peak_bytes(struct backend *be)
{
	return be && be->ops == &cu_ops ? ctx_of(be)->peak : 0;
}

extern "C" int be_cuda_describe(int device, char *buf, size_t len)
{
	cudaDeviceProp p;
	char pci[64] = "?";
	cudaError_t e = cudaGetDeviceProperties(&p, device);

	if (e != cudaSuccess) {
		cudaGetLastError();
		snprintf(buf, len, "cudaGetDeviceProperties: %s", cudaGetErrorString(e));
		return -1;
	}
	if (cudaDeviceGetPCIBusId(pci, sizeof(pci), device) != cudaSuccess)
		cudaGetLastError();
	snprintf(buf, len, "%s, %.1f GiB, compute capability %d.%d, PCI %s", p.name,
		 (double)p.totalGlobalMem / (1 << 30), p.major, p.minor, pci);
	return 0;
}

extern "C" int be_cuda_device_count(char *err, size_t errlen)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);

	if (e != cudaSuccess) {
		cudaGetLastError();
		snprintf(err, errlen, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
		return 0;
	}
	if (count <= 0) {
		snprintf(err, errlen, "cudaGetDeviceCount found no GPU");
		return 0;
	}
	return count;
}

extern "C" struct backend *be_cuda_create(int device, const struct be_cuda_opts *o, char *err,
					  size_t errlen)
{
	struct backend *be = NULL;
	struct cu_ctx *ctx = NULL;
	const char *det = getenv("DPTRAIN_CUDA_DETERMINISTIC");
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	char why[256];
	int count = be_cuda_device_count(why, sizeof(why));
	cudaError_t e;
	cudnnStatus_t ds;
	cublasStatus_t bs;

	if (count <= 0) {
		snprintf(err, errlen, "cuda backend: no CUDA GPU visible: %s", why);
		return NULL;
	}
	if (device < 0 || device >= count) {
		snprintf(err, errlen,
			 "cuda backend: GPU %d does not exist: this process sees %d "
			 "(CUDA_VISIBLE_DEVICES=%s)",
			 device, count, cvd ? cvd : "(unset)");
		return NULL;
	}
	be = (struct backend *)calloc(1, sizeof(*be));
	ctx = (struct cu_ctx *)calloc(1, sizeof(*ctx));
	if (!be || !ctx) {
		snprintf(err, errlen, "cuda backend: out of memory");
		free(be);
		free(ctx);
		return NULL;
	}
	be->ops = &cu_ops;
	be->priv = ctx;
	be->threads = 0;
	ctx->device = device;
	ctx->deterministic = (det && strcmp(det, "1") == 0) || (o && o->deterministic);
	ctx->tf32 = o && o->tf32;
#define CREATE_TRY(ok, call, str)                                                                  \
	do {                                                                                       \
		if (!(ok)) {                                                                       \
			snprintf(err, errlen, "cuda backend on GPU %d: %s: %s", device, call,      \
				 str);                                                             \
			goto fail;                                                                 \
		}                                                                                  \
	} while (0)
	e = cudaSetDevice(device);
	CREATE_TRY(e == cudaSuccess, "cudaSetDevice", cudaGetErrorString(e));
	e = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking);
	CREATE_TRY(e == cudaSuccess, "cudaStreamCreate", cudaGetErrorString(e));
	ds = cudnnCreate(&ctx->dnn);
	CREATE_TRY(ds == CUDNN_STATUS_SUCCESS, "cudnnCreate", cudnnGetErrorString(ds));
	ds = cudnnSetStream(ctx->dnn, ctx->stream);
	CREATE_TRY(ds == CUDNN_STATUS_SUCCESS, "cudnnSetStream", cudnnGetErrorString(ds));
	bs = cublasCreate(&ctx->blas);
	CREATE_TRY(bs == CUBLAS_STATUS_SUCCESS, "cublasCreate", cublasGetStatusString(bs));
	bs = cublasSetStream(ctx->blas, ctx->stream);
	CREATE_TRY(bs == CUBLAS_STATUS_SUCCESS, "cublasSetStream", cublasGetStatusString(bs));
	/* Float32 sgemm in float32 (no TF32) like the CPU backends, unless TF32 is asked for */
	bs = cublasSetMathMode(ctx->blas,
			       ctx->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
	CREATE_TRY(bs == CUBLAS_STATUS_SUCCESS, "cublasSetMathMode", cublasGetStatusString(bs));
#undef CREATE_TRY
	return be;
fail:
	cudaGetLastError();
	cu_destroy(be);
	return NULL;
}

#endif /* HAVE_CUDNN */
