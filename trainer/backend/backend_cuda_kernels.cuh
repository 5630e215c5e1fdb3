/* backend_cuda_kernels.cuh — the CUDA backend's own kernels, included by backend_cuda.cu (and run
 * on the host by t/unit/kernels_host.cc):
 * element types of activations (float32, bfloat16, half), batch norm, pooling, element-wise ops,
 * global average pool, cross-entropy, sums. Device code only: no library calls, no host state. */
#ifndef DPTRAIN_BACKEND_CUDA_KERNELS_CUH
#define DPTRAIN_BACKEND_CUDA_KERNELS_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

extern "C" {
#include "trainer/backend/backend.h"
}

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

__global__ static void k_fill(float *x, float v, size_t n)
{
	GRID_LOOP(i, n)
	x[i] = v;
}

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

template <typename T> __global__ static void k_add(const T *a, const T *b, T *y, size_t n)
{
	GRID_LOOP(i, n)
	y[i] = to_act<T>(__fadd_rn(ldf(a[i]), ldf(b[i])));
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

/* input_u8: NHWC bytes to normalised float32 NCHW, element i of the output; the loader's
 * arithmetic in float32 with explicit rounding (no contraction). */
struct u8_norm {
	float mean[4], std[4];
};
__global__ static void k_input_u8(const uint8_t *src, float *dst, size_t n, int c, size_t hw,
				  struct u8_norm p)
{
	GRID_LOOP(i, n)
	{
		size_t pix = i % hw, t = i / hw;
		int ch = (int)(t % (size_t)c);
		size_t img = t / (size_t)c;
		float v = (float)src[(img * hw + pix) * (size_t)c + (size_t)ch];
		dst[i] = __fdiv_rn(__fsub_rn(__fdiv_rn(v, 255.0f), p.mean[ch]), p.std[ch]);
	}
}

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

/* The fused residual join after batch norm: y = relu?(y + z), y holding bn(x). The sum is
 * rounded once (float32: the reference's float add), then relu as k_relu_fwd. */
template <typename T> __global__ static void k_add_relu(T *y, const T *z, size_t n, int relu)
{
	GRID_LOOP(i, n)
	{
		float v = __fadd_rn(ldf(y[i]), ldf(z[i]));
		y[i] = to_act<T>(relu && !(v > 0.0f) ? 0.0f : v);
	}
}

/* Backward of the residual join: g = dy masked by y > 0 (with relu) goes to scratch for the
 * batch norm backward, and is blended into dz = g + bz * dz. Reads every input of index i before
 * writing it, so dz may be dy. */
template <typename T>
__global__ static void k_bn_add_bwd(const T *y, const T *dy, T *g, T *dz, float bz, size_t n,
				    int relu)
{
	GRID_LOOP(i, n)
	{
		float v = relu && !(ldf(y[i]) > 0.0f) ? 0.0f : ldf(dy[i]);
		g[i] = to_act<T>(v);
		dz[i] = to_act<T>(blend_f(v, bz, &dz[i]));
	}
}

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

/* y[r][c] += b[c] over rows of `cols` (linear's bias). */
template <typename T> __global__ static void k_bias_rows(T *y, const float *b, size_t n, int cols)
{
	GRID_LOOP(i, n)
	y[i] = to_act<T>(__fadd_rn(ldf(y[i]), b[i % cols]));
}

/* y[n][k][pixel] += b[k] (convolution's bias). */
template <typename T>
__global__ static void k_bias_chan(T *y, const float *b, size_t n, int chans, size_t hw, int nhwc)
{
	GRID_LOOP(i, n)
	y[i] = to_act<T>(__fadd_rn(ldf(y[i]), b[act_channel(i, chans, hw, nhwc)]));
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

/* Sum of squares (float32 gradients): fixed grid partials, then one block over them (same bits
 * every run). */
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

/* ---------------------------------------------------------------------------------------
 * Batch norm's own kernels (backend_cuda.cu says which mode runs them). Per channel c, over its
 * m = N*H*W values ("rows": row r = n * hw + pixel), each pass runs three kernels:
 *
 * 1. Partials. Block (i, j) of a (chunks, slabs) grid takes the channels of chunk i and the rows
 *    of slab j ([j * slab_rows, (j + 1) * slab_rows), the last slab shorter) and writes one
 *    partial sum per channel and slab: of x and x^2 (forward), of g and g (x - mean) (backward,
 *    g = dy masked by the fused ReLU). In NHWC a block is BN_CB channels x CU_THREADS / BN_CB
 *    row lanes, consecutive threads on consecutive channels of a row (coalesced); in NCHW it is
 *    one channel x CU_THREADS lanes, consecutive threads on consecutive pixels of its plane.
 * 2. Final. BN_LANES threads per channel add up its partials and finish: mean, inverse std and
 *    running statistics (forward), dgamma and dbeta (backward); and write the per-channel
 *    coefficients of the element-wise pass.
 * 3. Apply. The grid of 1 again, element-wise: y = relu?((x - mean) gamma invstd + beta (+ z)),
 *    or dx and dz, in float, rounded once to the act type.
 *
 * Sums are in double, each thread adding its rows in order, then fixed trees: their order
 * depends on the shape and the grid only, so the same inputs give the same bits every run. In
 * double the variance may be E[x^2] - mean^2 in one pass: the difference costs log2(mean^2 /
 * var) bits, of double's 53 (a channel of 1000 + U(-8, 8): 16 bits), where float32, with 24,
 * would be left with noise (x^2's rounding, 2^-24 mean^2 per add, outweighs var there).
 * Welford's update or Kahan's float sums would need a division or four float operations per
 * value for what double does in two; these kernels are memory-bound, and double runs at half
 * the float rate on the GPUs they are tuned for (the data-centre ones). The element-wise pass
 * needs no more than float: its result is rounded to 8 (bf16) or 11 (fp16) bits. */

#define BN_CB	  32 /* NHWC: channels per block of the partial and apply kernels */
#define BN_LANES  32 /* threads per channel in the final kernels */
#define BN_UNROLL 4  /* rows a thread loads before it uses the first: loads in flight */
/* The vector kernels (the _v ones): NHWC 2-byte acts, a multiple of BN_VCB channels, 16-byte
 * aligned tensors. A thread takes BN_VEC consecutive channels of a row, one 16-byte load per
 * tensor and row where the scalar kernels make 8 of 2 bytes (a warp moved 64 bytes a load
 * there: the kernels were bound by loads in flight, not by bandwidth). */
#define BN_VEC	     8	/* channels a thread loads at once */
#define BN_VCB	     64 /* channels per block: BN_VCB / BN_VEC threads per row */
#define BN_VUNROLL   2	/* rows in flight per thread (each row up to 5 loads of 16 bytes) */
#define BN_SLABS_MAX 1024
#define BN_ROWS_MIN  16

/* One batch norm's shape and its kernels' grid (backend_cuda.cu plans it at bn_create). */
struct bn_geom {
	size_t rows;	  /* m = N*H*W values per channel */
	size_t hw;	  /* pixels per sample */
	size_t slab_rows; /* rows per slab; the last one may have fewer */
	int chans;
	int nhwc;
	int vec;		/* the vector kernels' grid (BN_VCB channels a block) */
	unsigned chunks, slabs; /* the grid of the partial and apply kernels */
};

/* The grid for a shape: channel chunks x slabs of rows, the slabs as many as fill about one wave
 * of the GPU (`wave` blocks at once) with at least BN_ROWS_MIN rows per thread, at most
 * BN_SLABS_MAX. The order of the sums follows from the shape and this grid: the same bits every
 * run on one GPU model (another may differ in the last bits, as cuDNN's algorithms do). vec:
 * the vector kernels' grid (the caller checks that they apply). */
static inline void bn_geom_plan(const struct be_bn_desc *d, int nhwc, int vec, unsigned wave,
				struct bn_geom *g)
{
	size_t cb = !nhwc ? 1 : vec ? BN_VCB : BN_CB;
	size_t rb = CU_THREADS / (vec ? BN_VCB / BN_VEC : cb), slabs, most;

	g->rows = (size_t)d->n * d->h * d->w;
	g->hw = (size_t)d->h * d->w;
	g->chans = d->c;
	g->nhwc = nhwc;
	g->vec = vec;
	g->chunks = (unsigned)(((size_t)d->c + cb - 1) / cb);
	slabs = wave / g->chunks;
	most = (g->rows + rb * BN_ROWS_MIN - 1) / (rb * BN_ROWS_MIN);
	if (slabs > most)
		slabs = most;
	if (slabs > BN_SLABS_MAX)
		slabs = BN_SLABS_MAX;
	if (slabs < 1)
		slabs = 1;
	g->slab_rows = (g->rows + slabs - 1) / slabs;
	g->slabs = (unsigned)((g->rows + g->slab_rows - 1) / g->slab_rows);
}

/* This thread's part of the (chunks, slabs) grid: channel c (idle where c >= chans; the first
 * of BN_VEC in the vector kernels), its row lane ty of rb (tpr threads a row), and its slab's
 * rows [r0, r1), which it takes ty, ty + rb, ... */
struct bn_part {
	int c;
	unsigned cb, tpr, rb, ty;
	size_t r0, r1;
};

__device__ static inline bn_part bn_place(const bn_geom &g)
{
	bn_part t;

	t.cb = !g.nhwc ? 1 : g.vec ? BN_VCB : BN_CB;
	t.tpr = g.vec ? BN_VCB / BN_VEC : t.cb;
	t.rb = CU_THREADS / t.tpr;
	t.ty = threadIdx.x / t.tpr;
	t.c = (int)(blockIdx.x * t.cb + threadIdx.x % t.tpr * (g.vec ? BN_VEC : 1));
	t.r0 = (size_t)blockIdx.y * g.slab_rows;
	t.r1 = g.rows - t.r0 > g.slab_rows ? t.r0 + g.slab_rows : g.rows;
	return t;
}

/* A thread's walk over its channel's rows of its slab, rb at a time, BN_UNROLL rows a batch:
 * batch() gives their element indices (NHWC r * chans + c; NCHW (n * chans + c) * hw + p for
 * r = n * hw + p, whose n and p advance without a division per row) and whether each row is
 * still in the slab. Kernels load a whole batch before using any of it: a load waits for
 * nothing but its address, so BN_UNROLL of them are in flight per thread where one add
 * waiting for its load would otherwise hold up the next load (the kernels are memory-bound). */
struct bn_rows {
	size_t r, n, p, dn, dp;

	__device__ bn_rows(const bn_geom &g, const bn_part &t)
	    : r(t.r0 + t.ty), n(r / g.hw), p(r % g.hw), dn(t.rb / g.hw), dp(t.rb % g.hw)
	{
	}
	__device__ bool more(const bn_part &t) const
	{
		return r < t.r1;
	}
	template <int U>
	__device__ void batch(const bn_geom &g, const bn_part &t, size_t *i, bool *in)
	{
#pragma unroll
		for (int k = 0; k < U; k++) {
			in[k] = r < t.r1;
			i[k] = g.nhwc ? r * g.chans + t.c : (n * g.chans + t.c) * g.hw + p;
			r += t.rb;
			n += dn;
			p += dp;
			if (p >= g.hw) {
				p -= g.hw;
				n++;
			}
		}
	}
};

/* Sum of v over the `count` threads t of a block with the same t % stride and t / (stride *
 * count), member k = t / stride % count, in a fixed tree (count a power of two): the same bits
 * every run. Member 0 gets the sum. Every thread of the block must call it. */
__device__ static double bn_tree(double v, unsigned stride, unsigned count)
{
	__shared__ double sh[CU_THREADS];
	unsigned t = threadIdx.x, k = t / stride % count;

	sh[t] = v;
	__syncthreads();
	for (unsigned s = count / 2; s > 0; s >>= 1) {
		if (k < s)
			sh[t] += sh[t + s * stride];
		__syncthreads();
	}
	double r = sh[t];
	__syncthreads();
	return r;
}

/* The gradient reaching bn(x) from loaded values: dy, masked by y > 0 (yv is 1 without the
 * fused ReLU). */
__device__ static inline float bn_grad(float yv, float dyv)
{
	return yv > 0.0f ? dyv : 0.0f;
}

/* Partials are part[q * chans + c][slab]: q = 0 the first sum, q = 1 the second. */
__device__ static inline void bn_put(const bn_geom &g, const bn_part &t, double *part, double a,
				     double b)
{
	if (t.ty == 0 && t.c < g.chans) {
		part[(size_t)t.c * g.slabs + blockIdx.y] = a;
		part[((size_t)g.chans + t.c) * g.slabs + blockIdx.y] = b;
	}
}

/* Forward partials: the sums of x and of x^2. */
template <typename T> __global__ static void k_bn_stats(bn_geom g, const T *x, double *part)
{
	bn_part t = bn_place(g);
	double s = 0.0, ss = 0.0;

	if (t.c < g.chans) {
		for (bn_rows w(g, t); w.more(t);) {
			size_t i[BN_UNROLL];
			bool in[BN_UNROLL];
			float v[BN_UNROLL];
			w.batch<BN_UNROLL>(g, t, i, in);
#pragma unroll
			for (int k = 0; k < BN_UNROLL; k++)
				v[k] = in[k] ? ldf(x[i[k]]) : 0.0f;
#pragma unroll
			for (int k = 0; k < BN_UNROLL; k++) {
				if (in[k]) {
					s += v[k];
					ss += (double)v[k] * v[k];
				}
			}
		}
	}
	s = bn_tree(s, t.cb, t.rb);
	ss = bn_tree(ss, t.cb, t.rb);
	bn_put(g, t, part, s, ss);
}

/* Backward partials: the sums of g and of g (x - mean). y is NULL without the fused ReLU. */
template <typename T>
__global__ static void k_bn_bwd_stats(bn_geom g, const T *x, const T *y, const T *dy,
				      const float *save_mean, double *part)
{
	bn_part t = bn_place(g);
	double sg = 0.0, sgx = 0.0;

	if (t.c < g.chans) {
		double mean = save_mean[t.c];
		for (bn_rows w(g, t); w.more(t);) {
			size_t i[BN_UNROLL];
			bool in[BN_UNROLL];
			float gv[BN_UNROLL], xv[BN_UNROLL], yv[BN_UNROLL];
			w.batch<BN_UNROLL>(g, t, i, in);
#pragma unroll
			for (int k = 0; k < BN_UNROLL; k++) {
				gv[k] = in[k] ? ldf(dy[i[k]]) : 0.0f;
				yv[k] = in[k] && y ? ldf(y[i[k]]) : 1.0f;
				xv[k] = in[k] ? ldf(x[i[k]]) : 0.0f;
			}
#pragma unroll
			for (int k = 0; k < BN_UNROLL; k++) {
				if (in[k]) {
					double gd = bn_grad(yv[k], gv[k]);
					sg += gd;
					sgx += gd * (xv[k] - mean);
				}
			}
		}
	}
	sg = bn_tree(sg, t.cb, t.rb);
	sgx = bn_tree(sgx, t.cb, t.rb);
	bn_put(g, t, part, sg, sgx);
}

/* Channel c of the final kernels (BN_LANES threads each, CU_THREADS / BN_LANES per block): the
 * sums over its slabs of both partials, in the thread of lane 0 (which returns 1). */
__device__ static int bn_gather(const bn_geom &g, const double *part, int *c, double *a, double *b)
{
	unsigned lane = threadIdx.x % BN_LANES;
	double s = 0.0, t = 0.0;

	*c = (int)(blockIdx.x * (CU_THREADS / BN_LANES) + threadIdx.x / BN_LANES);
	if (*c < g.chans) {
		for (unsigned k = lane; k < g.slabs; k += BN_LANES) {
			s += part[(size_t)*c * g.slabs + k];
			t += part[((size_t)g.chans + *c) * g.slabs + k];
		}
	}
	*a = bn_tree(s, 1, BN_LANES);
	*b = bn_tree(t, 1, BN_LANES);
	return lane == 0 && *c < g.chans;
}

/* The forward's per-channel coefficients, coef[q * chans + c]: mean, gamma invstd, beta. */
__device__ static inline void bn_coef_fwd(float *coef, int chans, int c, double mean, double invstd,
					  float gamma, float beta_)
{
	coef[c] = (float)mean;
	coef[chans + c] = (float)(invstd * gamma);
	coef[2 * chans + c] = beta_;
}

/* Training statistics as the reference computes them (PyTorch's formulas): the biased variance
 * normalises, the unbiased one goes into the running variance. */
__global__ static void k_bn_stats_final(bn_geom g, const double *part, float eps, float momentum,
					const float *gamma, const float *beta_, float *save_mean,
					float *save_invstd, float *running_mean, float *running_var,
					float *coef)
{
	int c;
	double s, ss;

	if (!bn_gather(g, part, &c, &s, &ss))
		return;
	double m = (double)g.rows, mean = s / m, var = ss / m - mean * mean;
	if (var < 0.0) /* the rounding of a spread below double's resolution; NaN stays */
		var = 0.0;
	double invstd = 1.0 / sqrt(var + eps);
	save_mean[c] = (float)mean;
	save_invstd[c] = (float)invstd;
	running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
	running_var[c] =
	    (float)((1.0 - momentum) * running_var[c] + momentum * var * m / (m - 1.0));
	bn_coef_fwd(coef, g.chans, c, mean, invstd, gamma[c], beta_[c]);
}

/* Inference: the running statistics. */
__global__ static void k_bn_infer_coef(int chans, float eps, const float *gamma, const float *beta_,
				       const float *running_mean, const float *running_var,
				       float *coef)
{
	GRID_LOOP(c, (size_t)chans)
	bn_coef_fwd(coef, chans, (int)c, running_mean[c], 1.0 / sqrt((double)running_var[c] + eps),
		    gamma[c], beta_[c]);
}

/* y = relu?((x - mean) gamma invstd + beta (+ z)), one rounding to the act type (the residual
 * join fused: not the bits of BN, add and ReLU as separate ops, which round twice). A batch's
 * loads come before its stores, so y may be x. */
template <typename T>
__global__ static void k_bn_apply(bn_geom g, const T *x, const T *z, const float *coef, T *y,
				  int relu)
{
	bn_part t = bn_place(g);

	if (t.c >= g.chans)
		return;
	float mean = coef[t.c], scale = coef[g.chans + t.c], shift = coef[2 * g.chans + t.c];
	for (bn_rows w(g, t); w.more(t);) {
		size_t i[BN_UNROLL];
		bool in[BN_UNROLL];
		float xv[BN_UNROLL], zv[BN_UNROLL];
		w.batch<BN_UNROLL>(g, t, i, in);
#pragma unroll
		for (int k = 0; k < BN_UNROLL; k++) {
			xv[k] = in[k] ? ldf(x[i[k]]) : 0.0f;
			zv[k] = in[k] && z ? ldf(z[i[k]]) : 0.0f;
		}
#pragma unroll
		for (int k = 0; k < BN_UNROLL; k++) {
			float v = __fmaf_rn(__fsub_rn(xv[k], mean), scale, shift);
			if (z)
				v = __fadd_rn(v, zv[k]);
			if (in[k])
				y[i[k]] = to_act<T>(relu && !(v > 0.0f) ? 0.0f : v);
		}
	}
}

/* dgamma = sum g xhat and dbeta = sum g, blended with beta (0 never reads them); and the
 * coefficients of dx = k (g - sg / m - xhat sgx / m) with k = gamma invstd and xhat = (x - mean)
 * invstd, as dx = k g + kx (x - mean) + k0: coef[q * chans + c] = mean, k, kx, k0. */
__global__ static void k_bn_bwd_final(bn_geom g, const double *part, const float *gamma,
				      const float *save_mean, const float *save_invstd,
				      float *dgamma, float *dbeta, float beta, float *coef)
{
	int c;
	double sg, sgxm;

	if (!bn_gather(g, part, &c, &sg, &sgxm))
		return;
	double m = (double)g.rows, invstd = save_invstd[c], sgx = sgxm * invstd;
	double k = gamma[c] * invstd;
	dgamma[c] = blend_d(sgx, beta, &dgamma[c]);
	dbeta[c] = blend_d(sg, beta, &dbeta[c]);
	coef[c] = save_mean[c];
	coef[g.chans + c] = (float)k;
	coef[2 * g.chans + c] = (float)(-k * invstd * sgx / m);
	coef[3 * g.chans + c] = (float)(-k * sg / m);
}

/* out = g + beta * out as blend_f, from out's value already loaded (read only where beta is not
 * 0: it may be NaN then). */
__device__ static inline float blend_v(float g, float beta, float old)
{
	return beta == 0.0f ? g : __fadd_rn(g, __fmul_rn(beta, old));
}

/* dx = blend(k g + kx (x - mean) + k0, beta) where dx is given, dz = blend(g, bz) where dz is
 * (fuse_add); y is NULL without the fused ReLU. A batch's loads (the old dx and dz for the
 * blends too) come before its stores, so dx and dz may be x, y or dy (dz in dy's slot: dx still
 * sees the dy it was given). */
template <typename T>
__global__ static void k_bn_bwd_apply(bn_geom g, const T *x, const T *y, const T *dy,
				      const float *coef, T *dx, float beta, T *dz, float bz)
{
	bn_part t = bn_place(g);

	if (t.c >= g.chans)
		return;
	float mean = coef[t.c], k = coef[g.chans + t.c], kx = coef[2 * g.chans + t.c];
	float k0 = coef[3 * g.chans + t.c];
	int rdx = dx && beta != 0.0f, rdz = dz && bz != 0.0f;
	for (bn_rows w(g, t); w.more(t);) {
		size_t i[BN_UNROLL];
		bool in[BN_UNROLL];
		float gv[BN_UNROLL], yv[BN_UNROLL], xv[BN_UNROLL], ox[BN_UNROLL], oz[BN_UNROLL];
		w.batch<BN_UNROLL>(g, t, i, in);
#pragma unroll
		for (int u = 0; u < BN_UNROLL; u++) {
			gv[u] = in[u] ? ldf(dy[i[u]]) : 0.0f;
			yv[u] = in[u] && y ? ldf(y[i[u]]) : 1.0f;
			xv[u] = in[u] && dx ? ldf(x[i[u]]) : 0.0f;
			ox[u] = in[u] && rdx ? ldf(dx[i[u]]) : 0.0f;
			oz[u] = in[u] && rdz ? ldf(dz[i[u]]) : 0.0f;
		}
#pragma unroll
		for (int u = 0; u < BN_UNROLL; u++) {
			float gu = bn_grad(yv[u], gv[u]);
			float v = __fmaf_rn(k, gu, __fmaf_rn(kx, __fsub_rn(xv[u], mean), k0));
			if (in[u] && dx)
				dx[i[u]] = to_act<T>(blend_v(v, beta, ox[u]));
			if (in[u] && dz)
				dz[i[u]] = to_act<T>(blend_v(gu, bz, oz[u]));
		}
	}
}

/* ---- the vector kernels: BN_VEC channels a thread, one 16-byte load or store per tensor and
 * row; each channel's arithmetic is the scalar kernels' (the same formulas, the same per-thread
 * order of rows), on the vector grid. */

/* BN_VEC acts at p (16-byte aligned; 16 bytes for 2-byte acts) as floats, and back, rounded
 * once each. */
template <typename T> __device__ static inline void bn_ld8(const T *p, float *v)
{
	constexpr int nq = sizeof(T) * BN_VEC / sizeof(uint4);
	uint4 u[nq];
	T h[BN_VEC];

#pragma unroll
	for (int q = 0; q < nq; q++) {
#ifdef __CUDA_ARCH__
		u[q] = ((const uint4 *)p)[q];
#else
		memcpy(&u[q], (const char *)p + q * sizeof(uint4), sizeof(uint4));
#endif
	}
	memcpy(h, u, sizeof(h));
#pragma unroll
	for (int e = 0; e < BN_VEC; e++)
		v[e] = ldf(h[e]);
}

template <typename T> __device__ static inline void bn_st8(T *p, const float *v)
{
	constexpr int nq = sizeof(T) * BN_VEC / sizeof(uint4);
	uint4 u[nq];
	T h[BN_VEC];

#pragma unroll
	for (int e = 0; e < BN_VEC; e++)
		h[e] = to_act<T>(v[e]);
	memcpy(u, h, sizeof(h));
#pragma unroll
	for (int q = 0; q < nq; q++) {
#ifdef __CUDA_ARCH__
		((uint4 *)p)[q] = u[q];
#else
		memcpy((char *)p + q * sizeof(uint4), &u[q], sizeof(uint4));
#endif
	}
}

/* The partials of BN_VEC channels: bn_tree's sums (the same tree, the same order), for all 2 x
 * BN_VEC values at once, so a block ends with one tree's barriers, not 16 trees'. */
__device__ static inline void bn_put8(const bn_geom &g, const bn_part &t, double *part, double *a,
				      double *b)
{
	__shared__ double sh[2 * BN_VEC][CU_THREADS];
	unsigned th = threadIdx.x, k = th / t.tpr % t.rb;

#pragma unroll
	for (int e = 0; e < BN_VEC; e++) {
		sh[e][th] = a[e];
		sh[BN_VEC + e][th] = b[e];
	}
	__syncthreads();
	for (unsigned s = t.rb / 2; s > 0; s >>= 1) {
		if (k < s) {
#pragma unroll
			for (int e = 0; e < 2 * BN_VEC; e++)
				sh[e][th] += sh[e][th + s * t.tpr];
		}
		__syncthreads();
	}
	if (t.ty == 0 && t.c < g.chans) {
#pragma unroll
		for (int e = 0; e < BN_VEC; e++) {
			part[(size_t)(t.c + e) * g.slabs + blockIdx.y] = sh[e][th];
			part[((size_t)g.chans + t.c + e) * g.slabs + blockIdx.y] =
			    sh[BN_VEC + e][th];
		}
	}
}

template <typename T> __global__ static void k_bn_stats_v(bn_geom g, const T *x, double *part)
{
	bn_part t = bn_place(g);
	double s[BN_VEC], ss[BN_VEC];

#pragma unroll
	for (int e = 0; e < BN_VEC; e++)
		s[e] = ss[e] = 0.0;
	if (t.c < g.chans) {
		for (bn_rows w(g, t); w.more(t);) {
			size_t i[BN_VUNROLL];
			bool in[BN_VUNROLL];
			float v[BN_VUNROLL][BN_VEC];
			w.batch<BN_VUNROLL>(g, t, i, in);
#pragma unroll
			for (int k = 0; k < BN_VUNROLL; k++)
				if (in[k])
					bn_ld8(x + i[k], v[k]);
#pragma unroll
			for (int k = 0; k < BN_VUNROLL; k++) {
				if (!in[k])
					continue;
#pragma unroll
				for (int e = 0; e < BN_VEC; e++) {
					s[e] += v[k][e];
					ss[e] += (double)v[k][e] * v[k][e];
				}
			}
		}
	}
	bn_put8(g, t, part, s, ss);
}

template <typename T>
__global__ static void k_bn_bwd_stats_v(bn_geom g, const T *x, const T *y, const T *dy,
					const float *save_mean, double *part)
{
	bn_part t = bn_place(g);
	double sg[BN_VEC], sgx[BN_VEC], mean[BN_VEC];

#pragma unroll
	for (int e = 0; e < BN_VEC; e++)
		sg[e] = sgx[e] = mean[e] = 0.0;
	if (t.c < g.chans) {
#pragma unroll
		for (int e = 0; e < BN_VEC; e++)
			mean[e] = save_mean[t.c + e];
		for (bn_rows w(g, t); w.more(t);) {
			size_t i[BN_VUNROLL];
			bool in[BN_VUNROLL];
			float gv[BN_VUNROLL][BN_VEC], xv[BN_VUNROLL][BN_VEC],
			    yv[BN_VUNROLL][BN_VEC];
			w.batch<BN_VUNROLL>(g, t, i, in);
#pragma unroll
			for (int k = 0; k < BN_VUNROLL; k++) {
				if (!in[k])
					continue;
				bn_ld8(dy + i[k], gv[k]);
				if (y)
					bn_ld8(y + i[k], yv[k]);
				bn_ld8(x + i[k], xv[k]);
			}
#pragma unroll
			for (int k = 0; k < BN_VUNROLL; k++) {
				if (!in[k])
					continue;
#pragma unroll
				for (int e = 0; e < BN_VEC; e++) {
					double gd = bn_grad(y ? yv[k][e] : 1.0f, gv[k][e]);
					sg[e] += gd;
					sgx[e] += gd * (xv[k][e] - mean[e]);
				}
			}
		}
	}
	bn_put8(g, t, part, sg, sgx);
}

template <typename T>
__global__ static void k_bn_apply_v(bn_geom g, const T *x, const T *z, const float *coef, T *y,
				    int relu)
{
	bn_part t = bn_place(g);
	float mean[BN_VEC], scale[BN_VEC], shift[BN_VEC];

	if (t.c >= g.chans)
		return;
#pragma unroll
	for (int e = 0; e < BN_VEC; e++) {
		mean[e] = coef[t.c + e];
		scale[e] = coef[g.chans + t.c + e];
		shift[e] = coef[2 * g.chans + t.c + e];
	}
	for (bn_rows w(g, t); w.more(t);) {
		size_t i[BN_VUNROLL];
		bool in[BN_VUNROLL];
		float xv[BN_VUNROLL][BN_VEC], zv[BN_VUNROLL][BN_VEC];
		w.batch<BN_VUNROLL>(g, t, i, in);
#pragma unroll
		for (int k = 0; k < BN_VUNROLL; k++) {
			if (!in[k])
				continue;
			bn_ld8(x + i[k], xv[k]);
			if (z)
				bn_ld8(z + i[k], zv[k]);
		}
#pragma unroll
		for (int k = 0; k < BN_VUNROLL; k++) {
			if (!in[k])
				continue;
			float o[BN_VEC];
#pragma unroll
			for (int e = 0; e < BN_VEC; e++) {
				float v =
				    __fmaf_rn(__fsub_rn(xv[k][e], mean[e]), scale[e], shift[e]);
				if (z)
					v = __fadd_rn(v, zv[k][e]);
				o[e] = relu && !(v > 0.0f) ? 0.0f : v;
			}
			bn_st8(y + i[k], o);
		}
	}
}

template <typename T>
__global__ static void k_bn_bwd_apply_v(bn_geom g, const T *x, const T *y, const T *dy,
					const float *coef, T *dx, float beta, T *dz, float bz)
{
	bn_part t = bn_place(g);
	float mean[BN_VEC], k[BN_VEC], kx[BN_VEC], k0[BN_VEC];
	int rdx = dx && beta != 0.0f, rdz = dz && bz != 0.0f;

	if (t.c >= g.chans)
		return;
#pragma unroll
	for (int e = 0; e < BN_VEC; e++) {
		mean[e] = coef[t.c + e];
		k[e] = coef[g.chans + t.c + e];
		kx[e] = coef[2 * g.chans + t.c + e];
		k0[e] = coef[3 * g.chans + t.c + e];
	}
	for (bn_rows w(g, t); w.more(t);) {
		size_t i[BN_VUNROLL];
		bool in[BN_VUNROLL];
		float gv[BN_VUNROLL][BN_VEC], yv[BN_VUNROLL][BN_VEC], xv[BN_VUNROLL][BN_VEC];
		float ox[BN_VUNROLL][BN_VEC], oz[BN_VUNROLL][BN_VEC];
		w.batch<BN_VUNROLL>(g, t, i, in);
#pragma unroll
		for (int u = 0; u < BN_VUNROLL; u++) {
			if (!in[u])
				continue;
			bn_ld8(dy + i[u], gv[u]);
			if (y)
				bn_ld8(y + i[u], yv[u]);
			if (dx)
				bn_ld8(x + i[u], xv[u]);
			if (rdx)
				bn_ld8(dx + i[u], ox[u]);
			if (rdz)
				bn_ld8(dz + i[u], oz[u]);
		}
#pragma unroll
		for (int u = 0; u < BN_VUNROLL; u++) {
			if (!in[u])
				continue;
			float ov[BN_VEC], oh[BN_VEC];
#pragma unroll
			for (int e = 0; e < BN_VEC; e++) {
				float gu = bn_grad(y ? yv[u][e] : 1.0f, gv[u][e]);
				float v = __fmaf_rn(
				    k[e], gu,
				    __fmaf_rn(kx[e], __fsub_rn(dx ? xv[u][e] : 0.0f, mean[e]),
					      k0[e]));
				ov[e] = blend_v(v, beta, rdx ? ox[u][e] : 0.0f);
				oh[e] = blend_v(gu, bz, rdz ? oz[u][e] : 0.0f);
			}
			if (dx)
				bn_st8(dx + i[u], ov);
			if (dz)
				bn_st8(dz + i[u], oh);
		}
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

/* Softmax cross-entropy of one row per block: the reference's formulas in double. Labels were
 * checked on the host. Writes the row's loss and hit; dlogits when not NULL. */
template <typename T>
__global__ static void k_xent_rows(const T *logits, const int32_t *labels, int n, int classes,
				   float smoothing, float scale, double *row_loss, int *row_hit,
				   T *dlogits)
{
	__shared__ float bv[CU_THREADS];
	__shared__ int bi[CU_THREADS];
	int r = blockIdx.x, t = threadIdx.x;
	const T *l = logits + (size_t)r * classes;
	int label = labels[r];
	float v = 0.0f, ll = ldf(l[label]); /* read before dlogits (which may be logits) */
	int a = -1;

	/* argmax, ties to the lowest index, as the reference's l[j] > l[arg] from arg 0: a NaN
	 * wins only at index 0 */
	for (int j = t; j < classes; j += CU_THREADS) {
		float lj = ldf(l[j]);
		if (lj == lj && (a < 0 || lj > v)) {
			v = lj;
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
	int arg = bi[0] < 0 || isnan(ldf(l[0])) ? 0 : bi[0];
	double m = ldf(l[arg]), se = 0.0, slp = 0.0;
	for (int j = t; j < classes; j += CU_THREADS)
		se += exp((double)ldf(l[j]) - m);
	double lse = m + log(block_sum(se));
	for (int j = t; j < classes; j += CU_THREADS)
		slp += (double)ldf(l[j]) - lse;
	slp = block_sum(slp);
	/* smoothing / classes is a float division in the reference */
	float sc = smoothing / (float)classes;
	if (t == 0) {
		row_loss[r] = (1.0 - smoothing) * (lse - ll) - sc * slp;
		row_hit[r] = arg == label;
	}
	if (dlogits) {
		T *d = dlogits + (size_t)r * classes;
		double g = (double)scale / n;
		for (int j = t; j < classes; j += CU_THREADS) {
			double tj = sc + (j == label ? 1.0 - smoothing : 0.0);
			d[j] = to_act_d<T>((exp((double)ldf(l[j]) - lse) - tj) * g);
		}
	}
}

#endif
