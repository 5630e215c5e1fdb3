/* cuda_pool_kernels.cuh — the pooling kernels: global average pool, max and average pooling with
 * PyTorch's ties; included by cuda_pool.cu and run on the host by t/unit/kernels_host.cc. Device
 * code only: no library calls, no host state. */
#ifndef DPTRAIN_CUDA_POOL_KERNELS_CUH
#define DPTRAIN_CUDA_POOL_KERNELS_CUH

extern "C" {
#include "trainer/backend/backend.h"
}

#include "trainer/backend/cuda_kernels.cuh"

/* Global average pool: one thread per (sample, channel) p = n * chans + c, the output's row
 * order; in NHWC consecutive threads read consecutive channels of a pixel (coalesced). */
template <typename T>
__global__ static void k_gap_fwd(const T *x, T *y, size_t planes, int chans, int hw, int nhwc)
{
	GRID_LOOP(p, planes)
	{
		const T *xp = x + act_at((int)(p / chans), (int)(p % chans), 0, chans, hw, nhwc);
		size_t ps = act_pix(chans, nhwc);
		double s = 0.0;
		for (int i = 0; i < hw; i++)
			s += ldf(xp[i * ps]);
		y[p] = to_act_d<T>(s / hw);
	}
}

template <typename T>
__global__ static void k_gap_bwd(const T *dy, T *dx, size_t n, int chans, int hw, int nhwc,
				 float beta)
{
	GRID_LOOP(i, n)
	{
		int s, c;
		size_t pos;
		act_coords(i, chans, hw, nhwc, &s, &c, &pos);
		float g = ldf(dy[(size_t)s * chans + c]);
		dx[i] = to_act<T>(blend_f(__fdiv_rn(g, (float)hw), beta, &dx[i]));
	}
}

/* The reference's window_argmax, line for line: first maximum in scan order, NaN wins. xp is a
 * channel's plane, its pixel p at xp[p * ps]; returns the pixel. */
template <typename T>
__device__ static int window_argmax(const struct be_pool_desc &d, const T *xp, size_t ps, int oy,
				    int ox)
{
	int y0 = oy * d.stride - d.pad, x0 = ox * d.stride - d.pad;
	int y1 = y0 + d.kh < d.h ? y0 + d.kh : d.h, x1 = x0 + d.kw < d.w ? x0 + d.kw : d.w;
	int best = (y0 > 0 ? y0 : 0) * d.w + (x0 > 0 ? x0 : 0);
	float m = ldf(xp[best * ps]);

	for (int iy = y0 > 0 ? y0 : 0; iy < y1; iy++) {
		for (int ix = x0 > 0 ? x0 : 0; ix < x1; ix++) {
			float v = ldf(xp[(iy * d.w + ix) * ps]);
			int take = v > m || v != v;
			best = take ? iy * d.w + ix : best;
			m = take ? v : m;
		}
	}
	return best;
}

/* One thread per output element in memory order: in NHWC consecutive threads take consecutive
 * channels of one window, and read consecutive elements (coalesced). */
template <typename T>
__global__ static void k_pool_fwd(struct be_pool_desc d, const T *x, T *y, size_t n, int nhwc)
{
	size_t ohw = (size_t)d.oh * d.ow, ps = act_pix(d.c, nhwc);

	GRID_LOOP(i, n)
	{
		int s, c;
		size_t op;
		act_coords(i, d.c, ohw, nhwc, &s, &c, &op);
		int oy = (int)op / d.ow, ox = (int)op % d.ow;
		const T *xp = x + act_at(s, c, 0, d.c, (size_t)d.h * d.w, nhwc);
		if (d.kind == BE_POOL_MAX) {
			y[i] = xp[window_argmax(d, xp, ps, oy, ox) * ps];
			continue;
		}
		double sum = 0.0;
		for (int a = 0; a < d.kh; a++) {
			int iy = oy * d.stride - d.pad + a;
			for (int b = 0; b < d.kw; b++) {
				int ix = ox * d.stride - d.pad + b;
				if (iy >= 0 && iy < d.h && ix >= 0 && ix < d.w)
					sum += ldf(xp[(iy * d.w + ix) * ps]);
			}
		}
		y[i] = to_act_d<T>(sum / (d.kh * d.kw));
	}
}

/* Gather form of the reference's scatter: every input pixel visits the windows that cover it in
 * the reference's order (row-major over outputs) and adds the same float terms in that order,
 * starting from beta * old; no atomics, the reference's bits (rounded once to the act type).
 * Max pooling: a window's maximum is in y, a copy of its arg-max pixel, so a pixel whose value
 * differs from it is not the arg-max; only a pixel equal to it (a tie, or the maximum itself)
 * or a NaN maximum scans the window. Each pixel used to scan every window covering it (9
 * reads each for 3x3: ResNet's stem took 8 times its forward). */
template <typename T>
__global__ static void k_pool_bwd(struct be_pool_desc d, const T *x, const T *y, const T *dy, T *dx,
				  size_t n, float beta, int nhwc)
{
	size_t hw = (size_t)d.h * d.w, ps = act_pix(d.c, nhwc);

	GRID_LOOP(i, n)
	{
		int s, c;
		size_t ip;
		act_coords(i, d.c, hw, nhwc, &s, &c, &ip);
		int iy = (int)ip / d.w, ix = (int)ip % d.w;
		const T *xp = x + act_at(s, c, 0, d.c, hw, nhwc);
		const T *dyp = dy + act_at(s, c, 0, d.c, (size_t)d.oh * d.ow, nhwc);
		const T *yp =
		    d.kind == BE_POOL_MAX ? y + act_at(s, c, 0, d.c, (size_t)d.oh * d.ow, nhwc) : y;
		float xv = d.kind == BE_POOL_MAX ? ldf(xp[ip * ps]) : 0.0f;
		/* windows oy with oy*stride - pad <= iy < oy*stride - pad + kh */
		int ly = iy + d.pad - d.kh + 1, lx = ix + d.pad - d.kw + 1;
		int oy0 = ly <= 0 ? 0 : (ly + d.stride - 1) / d.stride;
		int ox0 = lx <= 0 ? 0 : (lx + d.stride - 1) / d.stride;
		int oy1 = (iy + d.pad) / d.stride, ox1 = (ix + d.pad) / d.stride;
		float acc = beta == 0.0f ? 0.0f : __fmul_rn(beta, ldf(dx[i]));
		if (oy1 > d.oh - 1)
			oy1 = d.oh - 1;
		if (ox1 > d.ow - 1)
			ox1 = d.ow - 1;
		for (int oy = oy0; oy <= oy1; oy++) {
			for (int ox = ox0; ox <= ox1; ox++) {
				float g = ldf(dyp[(oy * d.ow + ox) * ps]);
				if (d.kind == BE_POOL_MAX) {
					float m = ldf(yp[(oy * d.ow + ox) * ps]);
					if ((m != m || xv == m) &&
					    window_argmax(d, xp, ps, oy, ox) == iy * d.w + ix)
						acc = __fadd_rn(acc, g);
				} else {
					acc = __fadd_rn(acc, __fdiv_rn(g, (float)(d.kh * d.kw)));
				}
			}
		}
		dx[i] = to_act<T>(acc);
	}
}

#endif
