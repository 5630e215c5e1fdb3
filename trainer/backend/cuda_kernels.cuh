/* cuda_kernels.cuh — what the CUDA backend's kernels share, included by every file of it that
 * has kernels and by t/unit/kernels_host.cc (which runs them on the host): the element types of
 * activations (float32, bfloat16, half), their layouts, grid-stride loops, fixed-order block sums,
 * blends, and the casts between float32 and acts that several families launch. Device code only:
 * no library calls, no host state. Templates and helpers only: a kernel that is not a template is
 * compiled into every file that includes its header, so it goes in its family's .cu, or in a
 * header that only its launchers include. */
#ifndef DPTRAIN_CUDA_KERNELS_CUH
#define DPTRAIN_CUDA_KERNELS_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define CU_THREADS 256

typedef __nv_bfloat16 bf16;
typedef __half f16;

/* ---------------------------------------------------------------------------------------
 * Activation element types. A kernel loads an act element as float (exact), computes as the
 * float32 kernel does and rounds its result once, to nearest even, on the store. With T = float
 * loads and stores are the identity, so the float32 mode keeps the float32 kernels' bits. */

__device__ static inline float ldf(float v)
{
	return v;
}

__device__ static inline float ldf(bf16 v)
{
	return __bfloat162float(v);
}

__device__ static inline float ldf(f16 v)
{
	return __half2float(v);
}

template <typename T> struct act_cvt;

template <> struct act_cvt<float> {
	__device__ static float from(float v)
	{
		return v;
	}
	__device__ static float from_d(double v)
	{
		return (float)v;
	}
};

template <> struct act_cvt<bf16> {
	__device__ static bf16 from(float v)
	{
		return __float2bfloat16_rn(v);
	}
	__device__ static bf16 from_d(double v)
	{
		return __double2bfloat16(v); /* one rounding, not double -> float -> bf16 */
	}
};

template <> struct act_cvt<f16> {
	__device__ static f16 from(float v)
	{
		return __float2half_rn(v); /* overflow gives inf: loss scaling sees it */
	}
	__device__ static f16 from_d(double v)
	{
		return __double2half(v);
	}
};

/* A float (or double) result stored as an act element. */
template <typename T> __device__ static inline T to_act(float v)
{
	return act_cvt<T>::from(v);
}

template <typename T> __device__ static inline T to_act_d(double v)
{
	return act_cvt<T>::from_d(v);
}

/* ---------------------------------------------------------------------------------------
 * Layout. Activations are NCHW, or NHWC ("channels last": a sample is hw rows of its channels)
 * in the half modes (backend_cuda.cu says when). Kernels take the layout as an argument (nhwc: 0
 * or 1) and reach elements through these helpers only; their arithmetic is the same in both. */

/* Index of element (n, c, pos) of an activation with `chans` channels of hw pixels. */
__device__ static inline size_t act_at(int n, int c, size_t pos, int chans, size_t hw, int nhwc)
{
	return nhwc ? ((size_t)n * hw + pos) * chans + c : ((size_t)n * chans + c) * hw + pos;
}

/* The distance between consecutive pixels of one channel: with act_at(n, c, 0, ...), a plane. */
__device__ static inline size_t act_pix(int chans, int nhwc)
{
	return nhwc ? (size_t)chans : 1;
}

/* Sample, channel and pixel of element i. */
__device__ static inline void act_coords(size_t i, int chans, size_t hw, int nhwc, int *n, int *c,
					 size_t *pos)
{
	size_t q = nhwc ? i / (size_t)chans : i / hw;

	*c = (int)(nhwc ? i % (size_t)chans : q % (size_t)chans);
	*pos = nhwc ? q % hw : i % hw;
	*n = (int)(nhwc ? q / hw : q / (size_t)chans);
}

/* Channel of element i. */
__device__ static inline int act_channel(size_t i, int chans, size_t hw, int nhwc)
{
	return (int)(nhwc ? i % (size_t)chans : i / hw % (size_t)chans);
}

/* Index in a [rows][a][b] array of element i of its [rows][b][a] transpose. NCHW -> NHWC is
 * (a, b) = (C, HW) per sample, NHWC -> NCHW (HW, C); cuDNN's NHWC filters are OHWI, (C, KHKW)
 * from OIHW and (KHKW, C) back. */
__device__ static inline size_t swap_src(size_t i, size_t a, size_t b)
{
	size_t ab = a * b, r = i % ab;

	return i - r + r % a * b + r / a;
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

/* out = r + beta * out as the reference's blend(): in double, rounded once (float outputs). */
__device__ static float blend_d(double r, float beta, const float *old)
{
	return beta == 0.0f ? (float)r : (float)(r + (double)beta * *old);
}

/* out = g + beta * out in float, rounded like the reference (no FMA); beta 0 never reads out,
 * which may hold NaN. The caller rounds the result to out's type. */
template <typename U> __device__ static float blend_f(float g, float beta, const U *old)
{
	return beta == 0.0f ? g : __fadd_rn(g, __fmul_rn(beta, ldf(*old)));
}

/* ---------------------------------------------------------------------------------------
 * Casts, launched by the element-wise ops (cuda_eltwise.cu), convolutions and linear layers. */

/* float32 <-> act (act_import, act_export, and the per-call half copy of conv and linear
 * weights). */
template <typename T> __global__ static void k_import(const float *x, T *y, size_t n)
{
	GRID_LOOP(i, n)
	y[i] = to_act<T>(x[i]);
}

template <typename T> __global__ static void k_export(const T *x, float *y, size_t n)
{
	GRID_LOOP(i, n)
	y[i] = ldf(x[i]);
}

/* The same with x a [rows][a][b] array and y its [rows][b][a] transpose (see swap_src): NCHW
 * <-> NHWC, OIHW -> OHWI. Writes are coalesced, reads strided: for input batches, weights and
 * exports (evaluation, tests), never in a layer's hot path. */
template <typename T>
__global__ static void k_import_swap(const float *x, T *y, size_t n, size_t a, size_t b)
{
	GRID_LOOP(i, n)
	y[i] = to_act<T>(x[swap_src(i, a, b)]);
}

template <typename T>
__global__ static void k_export_swap(const T *x, float *y, size_t n, size_t a, size_t b)
{
	GRID_LOOP(i, n)
	y[i] = ldf(x[swap_src(i, a, b)]);
}

/* dst = float(src) + beta * dst: a weight gradient cuDNN wrote in the act type, widened into the
 * float32 gradient. */
template <typename T>
__global__ static void k_widen_blend(const T *src, float *dst, size_t n, float beta)
{
	GRID_LOOP(i, n)
	dst[i] = blend_f(ldf(src[i]), beta, &dst[i]);
}

/* The same from src's [rows][a][b] to dst's [rows][b][a] order: an OHWI gradient into the OIHW
 * one (T the act type), a linear layer's [out][h][w][c] float32 gradient into [out][c][h][w]. */
template <typename T>
__global__ static void k_widen_blend_swap(const T *src, float *dst, size_t n, size_t a, size_t b,
					  float beta)
{
	GRID_LOOP(i, n)
	dst[i] = blend_f(ldf(src[swap_src(i, a, b)]), beta, &dst[i]);
}

#endif
