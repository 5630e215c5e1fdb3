/* cuda_eltwise_kernels.cuh — the element-wise kernels batch norm launches too (the ReLU after
 * cuDNN's forward, the masked gradient, the blends of its backward: cuda_bn.cu), besides the
 * element-wise ops (cuda_eltwise.cu, which holds the ones only they launch). Device code only. */
#ifndef DPTRAIN_CUDA_ELTWISE_KERNELS_CUH
#define DPTRAIN_CUDA_ELTWISE_KERNELS_CUH

#include "trainer/backend/cuda_kernels.cuh"

template <typename T> __global__ static void k_relu_fwd(const T *x, T *y, size_t n)
{
	GRID_LOOP(i, n)
	{
		float v = ldf(x[i]);
		y[i] = to_act<T>(v > 0.0f ? v : 0.0f);
	}
}

template <typename T>
__global__ static void k_relu_bwd(const T *y, const T *dy, T *dx, size_t n, float beta)
{
	GRID_LOOP(i, n)
	{
		float g = ldf(y[i]) > 0.0f ? ldf(dy[i]) : 0.0f;
		dx[i] = to_act<T>(blend_f(g, beta, &dx[i]));
	}
}

/* g = dy + beta * g over acts (act_accum; bn_bwd's blend of an aliased dx). With T = float the
 * bits of axpby(1, dy, beta, g). */
template <typename T> __global__ static void k_act_accum(const T *dy, T *g, size_t n, float beta)
{
	GRID_LOOP(i, n)
	g[i] = to_act<T>(blend_f(ldf(dy[i]), beta, &g[i]));
}

__global__ static void k_axpby(float alpha, const float *x, float beta, float *y, size_t n)
{
	GRID_LOOP(i, n)
	y[i] = blend_f(__fmul_rn(alpha, x[i]), beta, &y[i]);
}

#endif
