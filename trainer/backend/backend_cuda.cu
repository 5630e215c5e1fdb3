/* backend_cuda.cu — the CUDA backend: cuDNN for convolution and batch norm, cuBLAS for linear
 * layers, own kernels (backend_cuda_kernels.cuh) for batch norm in bf16, pooling, element-wise
 * ops, global average pool, cross-entropy and sums; one stream on one GPU, memory from a caching
 * arena over cudaMalloc. Activations in float32, bfloat16 or half (be_cuda_opts.act_dtype), NCHW in
 * float32 and NHWC in the half modes (DPTRAIN_CUDA_LAYOUT), float32 parameters. Must not change the
 * op semantics backend_ref.c defines: t/unit/backend_cuda.c compares them op by op. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

extern "C" {
#include "common/error.h"
#include "trainer/backend/backend.h"
#include "trainer/backend/backend_cuda.h"
#include "trainer/backend/backend_ref.h"
}

#ifndef HAVE_CUDNN

/* The toolkit without cuDNN: nothing to run convolutions with. */
extern "C" struct backend *be_cuda_create(int device, const struct be_cuda_opts *o,
					  struct dp_error *err)
{
	(void)device;
	(void)o;
	errprintf(err, "this build has no CUDA backend (cuDNN was missing at build time)");
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

extern "C" const char *be_cuda_bn_plan(struct backend *be, struct be_op *op)
{
	(void)be;
	(void)op;
	return "no CUDA backend";
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

extern "C" int be_cuda_device_count(struct dp_error *err)
{
	errprintf(err, "this build has no CUDA backend (cuDNN was missing at build time)");
	return 0;
}

#else

#include <cudnn.h>

#include "trainer/backend/backend_cuda_kernels.cuh"

/* Numerics. By default convolutions run with CUDNN_FMA_MATH and cuBLAS with CUBLAS_DEFAULT_MATH,
 * which for float32 means no TF32 tensor cores: results agree with the CPU backends to float32
 * rounding. With be_cuda_opts.tf32 both may use TF32 tensor cores (cuDNN's default math and
 * CUBLAS_TF32_TENSOR_OP_MATH), as PyTorch does with allow_tf32.
 * Own kernels accumulate in double and write with __fadd_rn/__fmul_rn where the reference
 * computes in float (no FMA contraction), so element-wise ops match it bit for bit.
 *
 * Half modes (be_cuda_opts.act_dtype BE_BF16 or BE_F16), PyTorch's autocast done by hand:
 * activations are stored in the half type, everything else stays float32. Own kernels are the
 * float32 ones with loads widened to float and one rounding to nearest even on the store.
 * Convolutions are cuDNN's with half data and filters and float32 compute (its PSEUDO_HALF and
 * PSEUDO_BFLOAT16 configurations), tensor cores allowed; each call first casts the float32
 * weights into a half copy in scratch (they change every step: nothing to cache). The weight
 * gradient comes out of cuDNN in the half type into scratch and is widened into the float32
 * gradient. Linear layers are cublasGemmEx with half A and B and float32 compute (reductions in
 * float32 too); their weight gradient is written in float32 directly. Batch norm has half x and y
 * and float32 parameters and statistics: cuDNN's in fp16, own kernels in bf16 (see the batch
 * norm section for why). Nothing is clamped: an fp16 overflow is inf, and the trainer's loss
 * scaling (sumsq of the float32 gradients) skips that step.
 *
 * Layout. In the half modes activations are NHWC ("channels last"), where tensor cores and
 * cuDNN's fast half kernels want them (PyTorch's channels_last with autocast does the same);
 * DPTRAIN_CUDA_LAYOUT=nchw at creation keeps NCHW there (benchmarks, and tests comparing the
 * two). Float32 modes are always NCHW: cuDNN's float32 kernels gain nothing from NHWC, and their
 * tests compare with the CPU bit for bit. Nothing outside this file sees the layout: act_import
 * and act_export transpose from and to float32 NCHW, and weights stay float32 OIHW ([out][in]
 * with the input's features in c, h, w order for linear layers): the per-call half copy is
 * permuted to what the NHWC data needs (OHWI filters; [out][h][w][c] for a linear layer fed a
 * flattened c x h x w act) and the gradients permuted back. Own kernels keep their arithmetic,
 * only their indexing changes (the layout helpers in backend_cuda_kernels.cuh). Batch norm
 * training in fp16 NHWC runs cuDNN's persistent NHWC kernels
 * (cudnnBatchNormalizationForwardTrainingEx, CUDNN_BATCHNORM_SPATIAL_PERSISTENT), the ReLU and
 * the residual add fused into them where cuDNN can (see cu_bn_create). In bf16 NHWC a batch norm
 * of a multiple of 64 channels runs the own kernels' vector versions (8 channels a thread, 16
 * bytes a load); DPTRAIN_CUDA_BN_VEC=0 at creation keeps the scalar ones (to compare).
 * t/unit/kernels_host.cc runs the own kernels on the host (t/unit/cuda_emu.h), on any machine.
 *
 * Determinism. Own kernels (batch norm's too: fixed-order sums, no atomics) and cuBLAS give the
 * same bits for the same inputs on the same GPU.
 * cuDNN's convolution algorithms are chosen once per op by its heuristics
 * (cudnnGet*Algorithm_v7, no benchmarking); DPTRAIN_CUDA_DETERMINISTIC=1 at creation restricts
 * them to deterministic ones (the bit-exact resume test needs that on a GPU). */

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
	enum be_dtype dtype; /* activations: float32, bf16 or fp16 */
	int nhwc;	     /* activations NHWC (half modes), else NCHW */
	unsigned bn_wave;    /* bf16: blocks of the own BN partial kernels the GPU runs at once */
	int bn_vec;	     /* bf16 NHWC: the own BN's vector kernels where a shape allows them */
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
	char shape[160]; /* "n=8 c=3 ... bf16" for error messages */
	union {
		struct be_conv_desc conv;
		struct be_bn_desc bn;
		struct be_pool_desc pool;
		struct be_linear_desc linear;
	} d;
	/* conv: x and y; bn (cuDNN's): x (also y, dy, dx) and the per-channel parameters (bd) */
	cudnnTensorDescriptor_t xd, yd, bd;
	cudnnFilterDescriptor_t wd;
	cudnnConvolutionDescriptor_t cd;
	cudnnConvolutionFwdAlgo_t fwd_algo;
	cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
	cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
	size_t fwd_ws, bwd_data_ws, bwd_filter_ws;
	/* each pass's algorithm runs with the math type cuDNN listed it with */
	cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;
	/* bn: bn_ex: training through the Ex calls (NHWC), with bn_mode and bn_ops (the fused ReLU
	 * in ad), their workspaces and the forward's reserve space; else the plain calls in
	 * CUDNN_BATCHNORM_SPATIAL. */
	int bn_ex, bn_bwd_ex;
	cudnnBatchNormMode_t bn_mode;
	cudnnBatchNormOps_t bn_ops;
	cudnnActivationDescriptor_t ad;
	size_t bn_fwd_ws, bn_bwd_ws, bn_reserve;
	/* bn: bn_own: own kernels (bf16) on the grid bn_geom, no cuDNN descriptor */
	int bn_own;
	struct bn_geom bn_geom;
};

static struct cu_ctx *ctx_of(struct backend *be)
{
	return (struct cu_ctx *)be->priv;
}

/* The element type's names in the libraries, and whether it is a half type. */
template <typename T> struct act_lib;
template <> struct act_lib<float> {
	static constexpr bool half = false;
	static constexpr cudaDataType_t blas = CUDA_R_32F;
};
template <> struct act_lib<bf16> {
	static constexpr bool half = true;
	static constexpr cudaDataType_t blas = CUDA_R_16BF;
};
template <> struct act_lib<f16> {
	static constexpr bool half = true;
	static constexpr cudaDataType_t blas = CUDA_R_16F;
};

static cudnnDataType_t dnn_type(enum be_dtype t)
{
	return t == BE_BF16  ? CUDNN_DATA_BFLOAT16
	       : t == BE_F16 ? CUDNN_DATA_HALF
			     : CUDNN_DATA_FLOAT;
}

/* fn<T>(...) for the backend's activation type T: the op table passes acts as float pointers
 * whatever they hold, the kernels are typed. */
#define ACT_CALL(be, fn, ...)                                                                      \
	(ctx_of(be)->dtype == BE_BF16  ? fn<bf16>(__VA_ARGS__)                                     \
	 : ctx_of(be)->dtype == BE_F16 ? fn<f16>(__VA_ARGS__)                                      \
				       : fn<float>(__VA_ARGS__))

/* " bf16" or " fp16" after a shape in messages, then " nhwc" in that layout; nothing in float32
 * mode. */
static const char *dt_suffix(struct backend *be)
{
	const struct cu_ctx *ctx = ctx_of(be);

	if (ctx->dtype == BE_F32)
		return "";
	if (ctx->dtype == BE_BF16)
		return ctx->nhwc ? " bf16 nhwc" : " bf16";
	return ctx->nhwc ? " fp16 nhwc" : " fp16";
}

/* "n=123 bf16": the shape of an element-wise op. */
static const char *n_str(struct backend *be, size_t n, char *buf, size_t len)
{
	snprintf(buf, len, "n=%zu%s", n, dt_suffix(be));
	return buf;
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
#define BLAS_TRY(call)                                                                             \
	do {                                                                                       \
		cublasStatus_t s_ = (call);                                                        \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
			be_errf(be, "%s(%s): %s: %s", fn, shape, #call,                            \
				cublasGetStatusString(s_));                                        \
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
#define LAUNCH_TRY(kernel, grid, block, ...)                                                       \
	do {                                                                                       \
		kernel<<<(grid), (block), 0, ctx_of(be)->stream>>>(__VA_ARGS__);                   \
		cudaError_t e_ = cudaGetLastError();                                               \
		if (e_ != cudaSuccess) {                                                           \
			be_errf(be, "%s(%s): launching %s: %s", fn, shape, #kernel,                \
				cudaGetErrorString(e_));                                           \
			goto out;                                                                  \
		}                                                                                  \
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
 * Element-wise ops, global average pool, cross-entropy, sums. Acts arrive as float pointers
 * (the op table's type) and are cast to the backend's element type T here. */

static int cu_fill(struct backend *be, float *x, float value, size_t n)
{
	const char *fn = "fill";
	char shape[32];

	snprintf(shape, sizeof(shape), "n=%zu", n);
	if (n)
		LAUNCH(k_fill, grid_for(n), CU_THREADS, x, value, n);
	return 0;
}

template <typename T> static int relu_fwd_t(struct backend *be, const float *x, float *y, size_t n)
{
	const char *fn = "relu_fwd";
	char s[48];
	const char *shape = n_str(be, n, s, sizeof(s));

	if (n)
		LAUNCH(k_relu_fwd<T>, grid_for(n), CU_THREADS, (const T *)x, (T *)y, n);
	return 0;
}

static int cu_relu_fwd(struct backend *be, const float *x, float *y, size_t n)
{
	return ACT_CALL(be, relu_fwd_t, be, x, y, n);
}

template <typename T>
static int relu_bwd_t(struct backend *be, const float *y, const float *dy, float *dx, size_t n,
		      float beta)
{
	const char *fn = "relu_bwd";
	char s[48];
	const char *shape = n_str(be, n, s, sizeof(s));

	if (n)
		LAUNCH(k_relu_bwd<T>, grid_for(n), CU_THREADS, (const T *)y, (const T *)dy, (T *)dx,
		       n, beta);
	return 0;
}

static int cu_relu_bwd(struct backend *be, const float *y, const float *dy, float *dx, size_t n,
		       float beta)
{
	return ACT_CALL(be, relu_bwd_t, be, y, dy, dx, n, beta);
}

template <typename T>
static int add_t(struct backend *be, const float *a, const float *b, float *y, size_t n)
{
	const char *fn = "add";
	char s[48];
	const char *shape = n_str(be, n, s, sizeof(s));

	if (n)
		LAUNCH(k_add<T>, grid_for(n), CU_THREADS, (const T *)a, (const T *)b, (T *)y, n);
	return 0;
}

static int cu_add(struct backend *be, const float *a, const float *b, float *y, size_t n)
{
	return ACT_CALL(be, add_t, be, a, b, y, n);
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

template <typename T>
static int act_accum_t(struct backend *be, const void *dy, void *g, size_t n, float beta)
{
	const char *fn = "act_accum";
	char s[48];
	const char *shape = n_str(be, n, s, sizeof(s));

	if (n)
		LAUNCH(k_act_accum<T>, grid_for(n), CU_THREADS, (const T *)dy, (T *)g, n, beta);
	return 0;
}

static int cu_act_accum(struct backend *be, const void *dy, void *g, size_t n, float beta)
{
	return ACT_CALL(be, act_accum_t, be, dy, g, n, beta);
}

/* float32 NCHW <-> act: a conversion, and in NHWC a transpose of each sample's C x HW to HW x C
 * (none needed where C or HW is 1: rows, logits). */
static const char *nchw_str(struct backend *be, int n, int c, int h, int w, char *buf, size_t len)
{
	snprintf(buf, len, "n=%d c=%d h=%d w=%d%s", n, c, h, w, dt_suffix(be));
	return buf;
}

template <typename T>
static int act_import_t(struct backend *be, const float *x, void *y, int n, int c, int h, int w)
{
	const char *fn = "act_import";
	char s[96];
	const char *shape = nchw_str(be, n, c, h, w, s, sizeof(s));
	size_t total;

	if (n < 0 || c < 0 || h < 0 || w < 0)
		return be_errf(be, "act_import(%s): sizes must not be negative", shape);
	total = (size_t)n * c * h * w;
	if (!total)
		return 0;
	if (ctx_of(be)->nhwc && c > 1 && (size_t)h * w > 1)
		LAUNCH(k_import_swap<T>, grid_for(total), CU_THREADS, x, (T *)y, total, (size_t)c,
		       (size_t)h * w);
	else
		LAUNCH(k_import<T>, grid_for(total), CU_THREADS, x, (T *)y, total);
	return 0;
}

static int cu_act_import(struct backend *be, const float *x, void *y, int n, int c, int h, int w)
{
	return ACT_CALL(be, act_import_t, be, x, y, n, c, h, w);
}

template <typename T>
static int act_export_t(struct backend *be, const void *x, float *y, int n, int c, int h, int w)
{
	const char *fn = "act_export";
	char s[96];
	const char *shape = nchw_str(be, n, c, h, w, s, sizeof(s));
	size_t total;

	if (n < 0 || c < 0 || h < 0 || w < 0)
		return be_errf(be, "act_export(%s): sizes must not be negative", shape);
	total = (size_t)n * c * h * w;
	if (!total)
		return 0;
	if (ctx_of(be)->nhwc && c > 1 && (size_t)h * w > 1)
		LAUNCH(k_export_swap<T>, grid_for(total), CU_THREADS, (const T *)x, y, total,
		       (size_t)h * w, (size_t)c);
	else
		LAUNCH(k_export<T>, grid_for(total), CU_THREADS, (const T *)x, y, total);
	return 0;
}

static int cu_act_export(struct backend *be, const void *x, float *y, int n, int c, int h, int w)
{
	return ACT_CALL(be, act_export_t, be, x, y, n, c, h, w);
}

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
template <typename T>
static int xent_t(struct backend *be, const float *logits, const int32_t *labels, int n,
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

	snprintf(shape, sizeof(shape), "n=%d classes=%d%s", n, classes, dt_suffix(be));
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
	k_xent_rows<T><<<n, CU_THREADS, 0, ctx->stream>>>(
	    (const T *)logits, lab, n, classes, smoothing, scale, dloss, dhit, (T *)dlogits);
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

static int cu_xent(struct backend *be, const float *logits, const int32_t *labels, int n,
		   int classes, float smoothing, float scale, float *loss, int *correct,
		   float *dlogits)
{
	return ACT_CALL(be, xent_t, be, logits, labels, n, classes, smoothing, scale, loss, correct,
			dlogits);
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
	if (op->ad)
		cudnnDestroyActivationDescriptor(op->ad);
	free(op);
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

static int tensor4d(struct backend *be, cudnnTensorDescriptor_t *t, int n, int c, int h, int w,
		    const char *fn, const char *shape)
{
	DNN_RET(cudnnCreateTensorDescriptor(t));
	DNN_RET(cudnnSetTensor4dDescriptor(*t,
					   ctx_of(be)->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
					   dnn_type(ctx_of(be)->dtype), n, c, h, w));
	return 0;
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

/* The three passes' algorithms: cuDNN's heuristics in order of expected speed, the first one
 * allowed whose workspace fits under the cap; else the always-supported, deterministic one. The
 * heuristics list an algorithm once per math type, so the lists are sized by *MaxCount, and
 * each workspace is sized under the math type the algorithm will run with (tensor-op math
 * may need more than the descriptor's). */
#define PICK(perf_t, maxcount, heuristic, wsize, fb_algo, algo_f, ws_f, math_f, ...)               \
	do {                                                                                       \
		perf_t p_[64];                                                                     \
		int max_ = 0, got_ = 0, found_ = 0;                                                \
		DNN_RET(maxcount(ctx->dnn, &max_));                                                \
		if (max_ > 64 || max_ < 1)                                                         \
			max_ = 64;                                                                 \
		DNN_RET(cudnnSetConvolutionMathType(op->cd, fallback));                            \
		DNN_RET(heuristic(ctx->dnn, __VA_ARGS__, max_, &got_, p_));                        \
		for (int i_ = 0; i_ < got_ && !found_; i_++) {                                     \
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

/* op->shape: the shape string, then the activation type in half modes ("... pad 1 bf16"). */
static const char *op_shape(struct backend *be, struct be_op *op)
{
	size_t len = strlen(op->shape);

	snprintf(op->shape + len, sizeof(op->shape) - len, "%s", dt_suffix(be));
	return op->shape;
}

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
	if (pick_algos(be, op, fn, shape) < 0)
		goto fail;
	return op;
fail:
	cu_op_destroy(be, op);
	return NULL;
}

static const float one_f = 1.0f, zero_f = 0.0f;

/* In half modes, a half copy of n float32 weights in arena scratch (the caller frees it after
 * issuing the op that reads it: the stream orders the reuse). With a, b > 1 each output row's
 * a x b weights are transposed to b x a: OIHW to OHWI (a = C, b = KH*KW), a linear layer's
 * [out][c][h*w] to [out][h*w][c]. NULL with be->err set. */
static void *half_weights(struct backend *be, const float *wgt, size_t n, size_t a, size_t b,
			  const char *fn, const char *shape)
{
	struct cu_ctx *ctx = ctx_of(be);
	void *h = arena_alloc(be, n * sizeof(bf16), fn);
	int swap = a > 1 && b > 1;
	cudaError_t e;

	if (!h)
		return NULL;
	if (ctx->dtype == BE_BF16 && swap)
		k_import_swap<bf16>
		    <<<grid_for(n), CU_THREADS, 0, ctx->stream>>>(wgt, (bf16 *)h, n, a, b);
	else if (ctx->dtype == BE_BF16)
		k_import<bf16><<<grid_for(n), CU_THREADS, 0, ctx->stream>>>(wgt, (bf16 *)h, n);
	else if (swap)
		k_import_swap<f16>
		    <<<grid_for(n), CU_THREADS, 0, ctx->stream>>>(wgt, (f16 *)h, n, a, b);
	else
		k_import<f16><<<grid_for(n), CU_THREADS, 0, ctx->stream>>>(wgt, (f16 *)h, n);
	if ((e = cudaGetLastError()) != cudaSuccess) {
		be_errf(be, "%s(%s): launching the weight cast to the act type: %s", fn, shape,
			cudaGetErrorString(e));
		arena_free(be, h);
		return NULL;
	}
	return h;
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

/* Batch norm, with the reference's (PyTorch's) formulas: saved inverse std, running variance
 * unbiased, running = (1 - momentum) running + momentum stat. Which path each mode takes:
 * - bf16 (both layouts): own kernels (backend_cuda_kernels.cuh, bn_own_* below). cuDNN does not
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

/* The forward's element-wise pass on grid g: the vector kernel or the scalar one. */
template <typename T>
static int bn_apply(struct backend *be, const struct bn_geom *g, const float *x, const float *z,
		    const float *coef, float *y, int relu, const char *fn, const char *shape)
{
	dim3 grid(g->chunks, g->slabs);

	if (g->vec)
		LAUNCH(k_bn_apply_v<T>, grid, CU_THREADS, *g, (const T *)x, (const T *)z, coef,
		       (T *)y, relu);
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
	int rv = -1;

	if (!part)
		return -1;
	if (g->vec)
		LAUNCH_TRY(k_bn_stats_v<T>, grid, CU_THREADS, *g, (const T *)x, part);
	else
		LAUNCH_TRY(k_bn_stats<T>, grid, CU_THREADS, *g, (const T *)x, part);
	LAUNCH_TRY(k_bn_stats_final, bn_final_blocks(g), CU_THREADS, *g, part, d->eps, momentum,
		   gamma, beta_, save_mean, save_invstd, running_mean, running_var, coef);
	if (bn_apply<T>(be, g, x, z, coef, y, d->fuse_relu, fn, shape) < 0)
		goto out;
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
	LAUNCH_TRY(k_bn_infer_coef, grid_for((size_t)g->chans), CU_THREADS, g->chans, d->eps, gamma,
		   beta_, running_mean, running_var, coef);
	if (bn_apply<T>(be, g, x, z, coef, y, d->fuse_relu, fn, shape) < 0)
		goto out;
	rv = 0;
out:
	arena_free(be, coef);
	return rv;
}

/* Reads x and dy (and y with fuse_relu) twice, writes dx and dz once; no scratch copy of an
 * aliased dx is needed (k_bn_bwd_apply reads each index before writing it). */
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

	if (!part)
		return -1;
	if (g->vec)
		LAUNCH_TRY(k_bn_bwd_stats_v<T>, grid, CU_THREADS, *g, (const T *)x, mask,
			   (const T *)dy, save_mean, part);
	else
		LAUNCH_TRY(k_bn_bwd_stats<T>, grid, CU_THREADS, *g, (const T *)x, mask,
			   (const T *)dy, save_mean, part);
	LAUNCH_TRY(k_bn_bwd_final, bn_final_blocks(g), CU_THREADS, *g, part, gamma, save_mean,
		   save_invstd, dgamma, dbeta, beta, coef);
	if ((dx || dz) && g->vec)
		LAUNCH_TRY(k_bn_bwd_apply_v<T>, grid, CU_THREADS, *g, (const T *)x, mask,
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

/* ---------------------------------------------------------------------------------------
 * Pinned memory, uploads on a copy stream, markers (cudaEvent). */

static void *cu_host_alloc(struct backend *be, size_t bytes)
{
	void *p = NULL;
	cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);

	if (e != cudaSuccess) {
		cudaGetLastError();
		be_errf(be, "host_alloc(%zu bytes): cudaHostAlloc: %s", bytes,
			cudaGetErrorString(e));
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

static int cu_profile(struct backend *be, int on)
{
	const char *fn = on ? "profile start" : "profile stop", *shape = "";

	CU_RET(cudaStreamSynchronize(ctx_of(be)->stream));
	CU_RET(on ? cudaProfilerStart() : cudaProfilerStop());
	return 0;
}

static int cu_input_u8(struct backend *be, const uint8_t *src, float *dst, int n, int c, int h,
		       int w, const float *mean, const float *std)
{
	const char *fn = "input_u8";
	char shape[64];
	struct u8_norm p;
	size_t total = (size_t)n * c * h * w;

	snprintf(shape, sizeof(shape), "n=%d c=%d h=%d w=%d", n, c, h, w);
	if (n < 0 || c < 1 || c > 4 || h < 1 || w < 1)
		return be_errf(be, "%s(%s): bad shape (1..4 channels)", fn, shape);
	memset(&p, 0, sizeof(p));
	for (int i = 0; i < c; i++)
		p.mean[i] = mean[i], p.std[i] = std[i];
	if (total)
		LAUNCH(k_input_u8, grid_for(total), CU_THREADS, src, dst, total, c, (size_t)h * w,
		       p);
	return 0;
}

/* The op table, in backend.h's order (C++ has no designated initializers here). Float32
 * mode leaves act_import, act_export and act_accum NULL: an act is then a float array, and nn.c
 * uses its input batch and axpby directly instead of copies. */
#define CU_OPS(name, import, export_, accum)                                                       \
	{                                                                                          \
		name, cu_alloc, cu_free, cu_to_host, cu_from_host, cu_fill, cu_sync,               \
		    cu_conv_create, cu_conv_fwd, cu_conv_bwd_data, cu_conv_bwd_weights,            \
		    cu_bn_create, cu_bn_fwd_train, cu_bn_fwd_infer, cu_bn_bwd, cu_pool_create,     \
		    cu_pool_fwd, cu_pool_bwd, cu_linear_create, cu_linear_fwd, cu_linear_bwd_data, \
		    cu_linear_bwd_weights, cu_op_destroy, cu_relu_fwd, cu_relu_bwd, cu_add,        \
		    cu_axpby, cu_gap_fwd, cu_gap_bwd, cu_xent, cu_sumsq, cu_destroy, import,       \
		    export_, accum, cu_host_alloc, cu_host_free, cu_upload, cu_mark, cu_mark_wait, \
		    cu_mark_free, cu_profile, cu_input_u8,                                         \
	}

static const struct backend_ops cu_ops = CU_OPS("cuda", NULL, NULL, NULL);
static const struct backend_ops cu_ops_half =
    CU_OPS("cuda", cu_act_import, cu_act_export, cu_act_accum);

static int is_cuda(const struct backend *be)
{
	return be && (be->ops == &cu_ops || be->ops == &cu_ops_half);
}

extern "C" void *be_cuda_stream(struct backend *be)
{
	return is_cuda(be) ? (void *)ctx_of(be)->stream : NULL;
}

extern "C" int be_cuda_device(struct backend *be)
{
	return is_cuda(be) ? ctx_of(be)->device : -1;
}

extern "C" const char *be_cuda_bn_plan(struct backend *be, struct be_op *op)
{
	if (!is_cuda(be) || !op || op->kind != CU_BN)
		return "not a batch norm of a CUDA backend";
	if (op->bn_own)
		return "own kernels";
	if (!op->bn_ex)
		return "cuDNN plain calls";
	switch (op->bn_ops) {
	case CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION:
		return op->bn_bwd_ex ? "cuDNN Ex BN_ADD_ACTIVATION"
				     : "cuDNN Ex BN_ADD_ACTIVATION (plain backward)";
	case CUDNN_BATCHNORM_OPS_BN_ACTIVATION:
		return op->bn_bwd_ex ? "cuDNN Ex BN_ACTIVATION"
				     : "cuDNN Ex BN_ACTIVATION (plain backward)";
	default:
		return op->bn_bwd_ex ? "cuDNN Ex BN" : "cuDNN Ex BN (plain backward)";
	}
}

extern "C" size_t be_cuda_peak_bytes(struct backend *be)
{
	return is_cuda(be) ? ctx_of(be)->peak : 0;
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

extern "C" int be_cuda_device_count(struct dp_error *err)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);

	if (e != cudaSuccess) {
		cudaGetLastError();
		errprintf(err, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
		return 0;
	}
	if (count <= 0) {
		errprintf(err, "cudaGetDeviceCount found no GPU");
		return 0;
	}
	return count;
}

extern "C" struct backend *be_cuda_create(int device, const struct be_cuda_opts *o,
					  struct dp_error *err)
{
	struct backend *be = NULL;
	struct cu_ctx *ctx = NULL;
	const char *det = getenv("DPTRAIN_CUDA_DETERMINISTIC");
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	const char *layout = getenv("DPTRAIN_CUDA_LAYOUT");
	const char *bn_vec = getenv("DPTRAIN_CUDA_BN_VEC");
	enum be_dtype dt = o ? o->act_dtype : BE_F32;
	int count;
	cudaError_t e;
	cudnnStatus_t ds;
	cublasStatus_t bs;
	cublasMath_t bm;

	if (dt != BE_F32 && dt != BE_BF16 && dt != BE_F16) {
		errprintf(err,
			  "cuda backend: act_dtype %d is not BE_F32, BE_BF16 or BE_F16 (a caller "
			  "bug)",
			  (int)dt);
		return NULL;
	}
	if (layout && *layout && strcmp(layout, "nchw") != 0 && strcmp(layout, "nhwc") != 0) {
		errprintf(
		    err,
		    "cuda backend: DPTRAIN_CUDA_LAYOUT=%s: expected nchw or nhwc (the bf16/fp16 "
		    "modes' activation layout; unset or empty: nhwc)",
		    layout);
		return NULL;
	}
	count = be_cuda_device_count(err);
	if (count <= 0) {
		errprefix(err, "cuda backend: no CUDA GPU visible");
		return NULL;
	}
	if (device < 0 || device >= count) {
		errprintf(err,
			  "cuda backend: GPU %d does not exist: this process sees %d "
			  "(CUDA_VISIBLE_DEVICES=%s)",
			  device, count, cvd ? cvd : "(unset)");
		return NULL;
	}
	be = (struct backend *)calloc(1, sizeof(*be));
	ctx = (struct cu_ctx *)calloc(1, sizeof(*ctx));
	if (!be || !ctx) {
		errprintf(err, "cuda backend: out of memory");
		free(be);
		free(ctx);
		return NULL;
	}
	be->ops = dt == BE_F32 ? &cu_ops : &cu_ops_half;
	be->priv = ctx;
	be->threads = 0;
	be->act_dtype = dt;
	be->act_size = dt == BE_F32 ? sizeof(float) : sizeof(bf16);
	ctx->device = device;
	ctx->deterministic = (det && strcmp(det, "1") == 0) || (o && o->deterministic);
	ctx->tf32 = o && o->tf32;
	ctx->dtype = dt;
	/* DPTRAIN_CUDA_BN_VEC=0: the scalar kernels everywhere (to compare the two) */
	ctx->bn_vec = !(bn_vec && strcmp(bn_vec, "0") == 0);
	/* float32 modes are NCHW whatever the variable says (see the top of this file) */
	ctx->nhwc = dt != BE_F32 && !(layout && strcmp(layout, "nchw") == 0);
#define CREATE_TRY(ok, call, str)                                                                  \
	do {                                                                                       \
		if (!(ok)) {                                                                       \
			errprintf(err, "cuda backend on GPU %d: %s: %s", device, call, str);       \
			goto fail;                                                                 \
		}                                                                                  \
	} while (0)
	e = cudaSetDevice(device);
	CREATE_TRY(e == cudaSuccess, "cudaSetDevice", cudaGetErrorString(e));
	e = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking);
	CREATE_TRY(e == cudaSuccess, "cudaStreamCreate", cudaGetErrorString(e));
	if (dt == BE_BF16) { /* own batch norm kernels: one wave of their partial kernels */
		int sms = 0, nf = -1;
		e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
		CREATE_TRY(e == cudaSuccess,
			   "cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)",
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
		if (ctx->bn_vec) { /* the vector kernels hold more registers */
			BN_OCCUPANCY(k_bn_stats_v<bf16>);
			BN_OCCUPANCY(k_bn_bwd_stats_v<bf16>);
		}
#undef BN_OCCUPANCY
		ctx->bn_wave = (unsigned)(sms > 0 ? sms : 1) * (unsigned)(nf > 0 ? nf : 1);
	}
	ds = cudnnCreate(&ctx->dnn);
	CREATE_TRY(ds == CUDNN_STATUS_SUCCESS, "cudnnCreate", cudnnGetErrorString(ds));
	ds = cudnnSetStream(ctx->dnn, ctx->stream);
	CREATE_TRY(ds == CUDNN_STATUS_SUCCESS, "cudnnSetStream", cudnnGetErrorString(ds));
	bs = cublasCreate(&ctx->blas);
	CREATE_TRY(bs == CUBLAS_STATUS_SUCCESS, "cublasCreate", cublasGetStatusString(bs));
	bs = cublasSetStream(ctx->blas, ctx->stream);
	CREATE_TRY(bs == CUBLAS_STATUS_SUCCESS, "cublasSetStream", cublasGetStatusString(bs));
	/* Float32 sgemm in float32 (no TF32) like the CPU backends, unless TF32 is asked for. Half
	 * modes: tensor cores (the default for half GemmEx), and split-K reductions in float32,
	 * not in the half output type. */
	if (dt != BE_F32)
		bm = (cublasMath_t)(CUBLAS_DEFAULT_MATH |
				    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
	else
		bm = ctx->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
	bs = cublasSetMathMode(ctx->blas, bm);
	CREATE_TRY(bs == CUBLAS_STATUS_SUCCESS, "cublasSetMathMode", cublasGetStatusString(bs));
#undef CREATE_TRY
	return be;
fail:
	cudaGetLastError();
	cu_destroy(be);
	return NULL;
}

#endif /* HAVE_CUDNN */
