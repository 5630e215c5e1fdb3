/* cuda_internal.h — private to the CUDA backend, backend_cuda.cu and its family files cuda_*.cu
 * (contrib/ci/check-layers keeps it so): what they share. The context every op runs in, the
 * opaque op, the activation type's dispatch, the checks and launches that fail an op with a
 * message, and each file's entry points. Host code, C++ only; kernels are in cuda_*_kernels.cuh
 * and the files that launch them.
 *
 * One file per op family, as ggml and llm.c keep their kernels:
 *   backend_cuda.cu  the op table, device setup and teardown, backend_cuda.h's functions
 *   cuda_mem.cu      the caching arena, the cuDNN workspace, copies, pinned memory, uploads,
 *                    markers
 *   cuda_op.cu       ops with a plan: struct be_op made, checked and destroyed; shapes in
 *                    messages; cuDNN tensor descriptors
 *   cuda_eltwise.cu  element-wise ops, casts between float32 and acts, input_u8, sum of squares
 *   cuda_conv.cu     convolutions: cuDNN, its algorithms, workspaces and math types; bias
 *   cuda_bn.cu       batch norm: cuDNN's calls and plans, own kernels in bf16
 *   cuda_pool.cu     max and average pooling, global average pool
 *   cuda_linear.cu   linear layers: cuBLAS; bias
 *   cuda_loss.cu     softmax cross-entropy and its top-1 hits
 * A family's kernels are in its .cu file, or in cuda_<family>_kernels.cuh where another file
 * runs them too: batch norm's, pooling's and the loss's (t/unit/kernels_host.cc, on the host),
 * the element-wise ones batch norm launches. cuda_kernels.cuh holds what all kernels share.
 *
 * A new op touches its family's file and no other file of the CUDA backend: its kernel, its
 * function and one line in the file's cu_<family>_register, which fills the family's slots of the
 * op table (backend_cuda.cu calls each register function once; no file lists every op). A new
 * element-wise op is cuda_eltwise.cu alone (its kernel goes to cuda_eltwise_kernels.cuh only if
 * batch norm launches it too); outside the CUDA files it takes its slot in backend.h, the
 * reference and the CPU backend (backend_ref.h, backend_ref.c, backend_cpu.c) and its caller. */
#ifndef DPTRAIN_CUDA_INTERNAL_H
#define DPTRAIN_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

extern "C" {
#include "common/error.h"
#include "trainer/backend/backend.h"
#include "trainer/backend/backend_ref.h"
}

#include "trainer/backend/cuda_bn_geom.cuh"
#include "trainer/backend/cuda_kernels.cuh"

#define CU_WS_CAP ((size_t)256 << 20) /* cuDNN workspace, shared by every op */

struct cu_block {
	void *p;
	size_t size;
	int used;
};

/* A convolution shape's three algorithms as cudnnFind timed them (cuda_conv.cu), kept for every
 * later op of the same shape. */
struct cu_conv_pick {
	int n, c, h, w, k, kh, kw, stride, pad;
	cudnnConvolutionFwdAlgo_t fwd_algo;
	cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
	cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
	size_t fwd_ws, bwd_data_ws, bwd_filter_ws;
	cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;
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
	int bn_bits;   /* bn_vec with a ReLU: the forward keeps the mask as bits for the backward */
	int conv_find; /* convolutions: algorithms timed by cudnnFind, not only listed */
	struct cu_conv_pick *picks; /* conv_find: what it chose, one entry per shape */
	size_t npicks, picks_cap;
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

/* The CUDA backend's definition of the opaque op. */
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
	/* bn_own with a ReLU on the vector grid: the mask of the last training forward (a bit an
	 * element, arena memory held while the op lives) and the y it was written with: the
	 * backward given that y reads the bits instead */
	uint8_t *bn_bits;
	const void *bn_bits_y;
};

static inline struct cu_ctx *ctx_of(struct backend *be)
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

static inline cudnnDataType_t dnn_type(enum be_dtype t)
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

static inline unsigned grid_for(size_t n)
{
	size_t b = (n + CU_THREADS - 1) / CU_THREADS;

	if (b > ((size_t)1 << 20)) /* the loops stride over the rest */
		b = (size_t)1 << 20;
	return b ? (unsigned)b : 1u;
}

static const float one_f = 1.0f, zero_f = 0.0f;

/* ---------------------------------------------------------------------------------------
 * The files' entry points (each one's comment is at its definition). */

/* The op table's slots of each family: backend_cuda.cu builds the table from them. */
void cu_mem_register(struct backend_ops *o);
void cu_eltwise_register(struct backend_ops *o);
void cu_conv_register(struct backend_ops *o);
void cu_bn_register(struct backend_ops *o);
void cu_pool_register(struct backend_ops *o);
void cu_linear_register(struct backend_ops *o);
void cu_loss_register(struct backend_ops *o);

/* cuda_mem.cu: scratch and buffers from the arena, the cuDNN workspace. */
void *arena_alloc(struct backend *be, size_t bytes, const char *fn);
void arena_free(struct backend *be, void *p);
void *ws_reserve(struct backend *be, size_t bytes, const char *fn, const char *shape);
void *dev_scratch(struct backend *be, size_t bytes);
void dev_scratch_free(struct backend *be, void *p, size_t bytes);

/* cuda_op.cu: the opaque op and the messages' shapes. */
const char *dt_suffix(struct backend *be);
struct be_op *op_new(struct backend *be, enum cu_kind kind, const char *fn);
int op_is(struct backend *be, const struct be_op *op, enum cu_kind kind, const char *fn);
void cu_op_destroy(struct backend *be, struct be_op *op);
int tensor4d(struct backend *be, cudnnTensorDescriptor_t *t, int n, int c, int h, int w,
	     const char *fn, const char *shape);
const char *op_shape(struct backend *be, struct be_op *op);

/* cuda_eltwise.cu: the half copy of conv and linear weights. */
void *half_weights(struct backend *be, const float *wgt, size_t n, size_t a, size_t b,
		   const char *fn, const char *shape);

/* cuda_bn.cu: the own kernels' wave on a GPU, at creation. */
int cu_bn_wave(int device, int vec, unsigned *wave, struct dp_error *err);

#endif
