/* cuda_bn_kernels.cuh — batch norm's own kernels (bf16), and the residual join's kernels that
 * follow cuDNN's batch norm; included by cuda_bn.cu and run on the host by
 * t/unit/kernels_host.cc. Device code only: no library calls, no host state. */
#ifndef DPTRAIN_CUDA_BN_KERNELS_CUH
#define DPTRAIN_CUDA_BN_KERNELS_CUH

#include "trainer/backend/cuda_bn_geom.cuh"
#include "trainer/backend/cuda_kernels.cuh"

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

/* ---------------------------------------------------------------------------------------
 * Batch norm's own kernels (cuda_bn.cu says which mode runs them). Per channel c, over its
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
 * needs no more than float: its result is rounded to 8 (bf16) or 11 (fp16) bits. The
 * constants and the grid's plan: cuda_bn_geom.cuh. */

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

/* Returns bit e set where the stored (rounded) value e is above 0: the ReLU's mask (bn_grad's
 * test on y, so the same gradient bit for bit). */
template <typename T> __device__ static inline unsigned bn_st8(T *p, const float *v)
{
	constexpr int nq = sizeof(T) * BN_VEC / sizeof(uint4);
	uint4 u[nq];
	T h[BN_VEC];
	unsigned pos = 0;

#pragma unroll
	for (int e = 0; e < BN_VEC; e++) {
		h[e] = to_act<T>(v[e]);
		pos |= (ldf(h[e]) > 0.0f ? 1u : 0u) << e;
	}
	memcpy(u, h, sizeof(h));
#pragma unroll
	for (int q = 0; q < nq; q++) {
#ifdef __CUDA_ARCH__
		((uint4 *)p)[q] = u[q];
#else
		memcpy((char *)p + q * sizeof(uint4), &u[q], sizeof(uint4));
#endif
	}
	return pos;
}

/* The ReLU's mask as y's stand-in: BN_VEC values of 1 or 0 from the byte of bits at the row's
 * first channel (bit e: y > 0 at channel e), which bn_grad reads as it reads y. */
__device__ static inline void bn_bits8(const uint8_t *bits, size_t i, float *v)
{
	unsigned b = bits[i / BN_VEC];

#pragma unroll
	for (int e = 0; e < BN_VEC; e++)
		v[e] = (b >> e & 1u) ? 1.0f : 0.0f;
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

/* The ReLU's mask from y, or (bits not NULL, y NULL) from the forward's bits: the same sums. */
template <typename T>
__global__ static void k_bn_bwd_stats_v(bn_geom g, const T *x, const T *y, const uint8_t *bits,
					const T *dy, const float *save_mean, double *part)
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
				else if (bits)
					bn_bits8(bits, i[k], yv[k]);
				bn_ld8(x + i[k], xv[k]);
			}
#pragma unroll
			for (int k = 0; k < BN_VUNROLL; k++) {
				if (!in[k])
					continue;
#pragma unroll
				for (int e = 0; e < BN_VEC; e++) {
					double gd = bn_grad(y || bits ? yv[k][e] : 1.0f, gv[k][e]);
					sg[e] += gd;
					sgx[e] += gd * (xv[k][e] - mean[e]);
				}
			}
		}
	}
	bn_put8(g, t, part, sg, sgx);
}

/* With relu and bits, also the ReLU's mask: a byte of bits per row and BN_VEC channels, at
 * bits[i / BN_VEC] for the row's first channel i (bn_st8's). */
template <typename T>
__global__ static void k_bn_apply_v(bn_geom g, const T *x, const T *z, const float *coef, T *y,
				    int relu, uint8_t *bits)
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
			unsigned pos = bn_st8(y + i[k], o);
			if (relu && bits)
				bits[i[k] / BN_VEC] = (uint8_t)pos;
		}
	}
}

template <typename T>
__global__ static void k_bn_bwd_apply_v(bn_geom g, const T *x, const T *y, const uint8_t *bits,
					const T *dy, const float *coef, T *dx, float beta, T *dz,
					float bz)
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
			else if (bits)
				bn_bits8(bits, i[u], yv[u]);
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
				float gu = bn_grad(y || bits ? yv[u][e] : 1.0f, gv[u][e]);
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

#endif
