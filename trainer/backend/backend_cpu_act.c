/* backend_cpu_act.c — the CPU backend's own kernels over its activation storage
 * (backend_cpu_act.h): batch norm, max pooling's backward, global average pooling, conversions
 * and the bfloat16 element-wise ops, on OpenMP threads. Each computes what the reference kernel
 * of the same op computes (backend_ref.c), in the same float32 and double arithmetic; only the
 * indexing differs, and bfloat16 values are widened on load and rounded once on store. */
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "trainer/backend/backend_cpu_act.h"
#include "trainer/backend/backend_ref.h"

#define INLINE static inline __attribute__((always_inline))

/* This file is compiled once per instruction-set level: as itself for x86-64's baseline (or
 * whatever the target's is), and through backend_cpu_act_avx2.c and backend_cpu_act_avx512.c,
 * which define CPU_ACT_LEVEL and include it with the compiler allowed those instructions.
 * The levels compute the same values: the vectors run across channels, each lane its own sums,
 * and nothing is contracted to FMA; only an NCHW plane's sum (an omp simd reduction in double)
 * may associate differently with the vector's width before it is rounded to float
 * (t/unit/cpu_act_levels.c finds every level's bits the same). backend_cpu_act_isa.c picks the
 * level oneDNN runs. */
#ifndef CPU_ACT_LEVEL
#define CPU_ACT_LEVEL base
#endif
#define LEVEL_CAT(a, b)	 a##_##b
#define LEVEL_NAME(a, b) LEVEL_CAT(a, b)
#define LEVEL(name)	 LEVEL_NAME(name, CPU_ACT_LEVEL)

/* Channels handled together (one AVX-512 vector of floats): a channel block of 8 or 16, or a
 * slice of an NHWC row. */
#define VMAX 16

INLINE float ld(const void *p, size_t i, int bf)
{
	return bf ? cpu_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

INLINE void st(void *p, size_t i, float v, int bf)
{
	if (bf)
		((uint16_t *)p)[i] = cpu_bf16(v);
	else
		((float *)p)[i] = v;
}

/* Up to VMAX consecutive channels of one block: element (i, s, lane v) of channel c0 + v at
 * base + i * c * hw + s * bs + v. */
struct chunk {
	size_t base;
	int c0, v;
};

/* Chunks of w channels: chunks_of and chunk_at take VMAX. */
static int chunks_w(const struct cpu_act *a, int w)
{
	return a->c / a->bs * ((a->bs + w - 1) / w);
}

static struct chunk chunk_w(const struct cpu_act *a, int q, int w)
{
	int per = (a->bs + w - 1) / w, cb = q / per, ci = q % per * w;
	struct chunk k = {(size_t)cb * a->hw * a->bs + (size_t)ci, cb * a->bs + ci,
			  a->bs - ci < w ? a->bs - ci : w};

	return k;
}

static int chunks_of(const struct cpu_act *a)
{
	return chunks_w(a, VMAX);
}

static struct chunk chunk_at(const struct cpu_act *a, int q)
{
	return chunk_w(a, q, VMAX);
}

/* Batch norm's channels per chunk. A bfloat16 NHWC act is read 32 channels (one 64-byte
 * cache line) at a time, and each thread takes as wide a run of a row as gives every thread a
 * chunk (up to BN_WMAX channels), so that it streams through contiguous memory: chunks of 16
 * channels read each line half, to be read again from memory by the next chunk, and read a
 * 2048-channel row at a 4 KiB stride, a new page every access (measured: the bfloat16 batch
 * norm's passes were a quarter of a ResNet-18 step and over a third of a ResNet-50 one). Every
 * channel's sums run in the same order whatever the width, so the bits do not depend on it. */
#define BN_LANES 32
#define BN_WMAX	 512
static int bn_width(const struct cpu_act *a)
{
#ifdef _OPENMP
	int threads = omp_get_max_threads();
#else
	int threads = 1;
#endif
	int lines = a->bs / BN_LANES, per;

	if (!a->bf16 || a->bs % BN_LANES != 0 || lines < threads)
		return VMAX;
	per = lines / threads;
	if (per > BN_WMAX / BN_LANES)
		per = BN_WMAX / BN_LANES;
	return per * BN_LANES;
}

/* Calls kernel(V, BF, args...) with the lane count and the type as constants where they are the
 * common ones, so that the lanes vectorize. */
#define DISPATCH(kernel, nv, bf, ...)                                                              \
	do {                                                                                       \
		if (bf && (nv) == 16)                                                              \
			kernel(16, 1, __VA_ARGS__);                                                \
		else if (bf && (nv) == 8)                                                          \
			kernel(8, 1, __VA_ARGS__);                                                 \
		else if (bf)                                                                       \
			kernel(nv, 1, __VA_ARGS__);                                                \
		else if ((nv) == 16)                                                               \
			kernel(16, 0, __VA_ARGS__);                                                \
		else if ((nv) == 8)                                                                \
			kernel(8, 0, __VA_ARGS__);                                                 \
		else                                                                               \
			kernel(nv, 0, __VA_ARGS__);                                                \
	} while (0)

/* Calls kernel(V, BF, args...) for a batch norm chunk of nv channels: 32 lanes at a time where
 * nv is a multiple of 32 (bfloat16 NHWC), else as DISPATCH does (one group). */
#define BN_DISPATCH(kernel, nv, bf, ...)                                                           \
	do {                                                                                       \
		if (bf && (nv) % BN_LANES == 0)                                                    \
			kernel(BN_LANES, 1, __VA_ARGS__);                                          \
		else                                                                               \
			DISPATCH(kernel, nv, bf, __VA_ARGS__);                                     \
	} while (0)

/* ---------------------------------------------------------------------------------------
 * Conversions. */

static void LEVEL(cpu_act_import)(const struct cpu_act *a, const float *x, void *y)
{
	int nb = a->c / a->bs, bs = a->bs, bf = a->bf16;
	size_t hw = a->hw;

	if (bs == 1 && !bf) {
		memcpy(y, x, (size_t)a->n * a->c * hw * sizeof(float));
		return;
	}
#pragma omp parallel for schedule(static)
	for (long p = 0; p < (long)a->n * nb; p++) {
		const float *in = x + (size_t)p * bs * hw; /* (i, cb * bs, 0) in NCHW */
		size_t out = (size_t)p * hw * bs;
		for (size_t s = 0; s < hw; s++)
			for (int v = 0; v < bs; v++)
				st(y, out + s * bs + v, in[(size_t)v * hw + s], bf);
	}
}

static void LEVEL(cpu_act_export)(const struct cpu_act *a, const void *x, float *y)
{
	int nb = a->c / a->bs, bs = a->bs, bf = a->bf16;
	size_t hw = a->hw;

	if (bs == 1 && !bf) {
		memcpy(y, x, (size_t)a->n * a->c * hw * sizeof(float));
		return;
	}
#pragma omp parallel for schedule(static)
	for (long p = 0; p < (long)a->n * nb; p++) {
		float *out = y + (size_t)p * bs * hw;
		size_t in = (size_t)p * hw * bs;
		for (int v = 0; v < bs; v++)
			for (size_t s = 0; s < hw; s++)
				out[(size_t)v * hw + s] = ld(x, in + s * bs + v, bf);
	}
}

/* ---------------------------------------------------------------------------------------
 * Batch norm. NCHW float32 keeps the per-plane loops (a channel's n x h x w values stay in L2
 * between the passes); the other layouts take VMAX channels of a block at once, their values
 * strided by the block. Sums are in double lanes (these reductions often nearly cancel: BN
 * biases deep in a net); the blocked statistics are one pass, shifted by each channel's first
 * value, where a channel's values no longer fit in L2. */

/* Sum of x (square = 0) or of (x - mean)^2 over one NCHW channel's planes. */
static double bn_plane_sum(const struct be_bn_desc *d, const float *x, int c, float mean,
			   int square)
{
	size_t hw = (size_t)d->h * d->w;
	double s = 0.0;

	for (int n = 0; n < d->n; n++) {
		const float *xp = x + ((size_t)n * d->c + c) * hw;
		double p = 0.0;
		if (square) {
#pragma omp simd reduction(+ : p)
			for (size_t i = 0; i < hw; i++)
				p += (double)(xp[i] - mean) * (double)(xp[i] - mean);
		} else {
#pragma omp simd reduction(+ : p)
			for (size_t i = 0; i < hw; i++)
				p += (double)xp[i];
		}
		s += p;
	}
	return s;
}

/* y = x * a + b over one NCHW channel, then + z and ReLU when fused (each rounded to float as
 * the separate ops round, so fusing changes no bit). */
static void bn_plane_apply(const struct be_bn_desc *d, const float *x, const float *z, float *y,
			   int c, float a, float b)
{
	size_t hw = (size_t)d->h * d->w;

	for (int n = 0; n < d->n; n++) {
		size_t off = ((size_t)n * d->c + c) * hw;
		const float *xp = x + off;
		float *yp = y + off;
		if (z) {
			const float *zp = z + off;
			int relu = d->fuse_relu;
#pragma omp simd
			for (size_t i = 0; i < hw; i++) {
				float v = xp[i] * a + b;
				float t = v + zp[i];
				yp[i] = !relu || t > 0.0f ? t : 0.0f;
			}
		} else if (d->fuse_relu) {
#pragma omp simd
			for (size_t i = 0; i < hw; i++) {
				float v = xp[i] * a + b;
				yp[i] = v > 0.0f ? v : 0.0f;
			}
		} else {
#pragma omp simd
			for (size_t i = 0; i < hw; i++)
				yp[i] = xp[i] * a + b;
		}
	}
}

/* The per-channel scale and shift from the batch (saved, and the running statistics moved as
 * PyTorch does, with the unbiased variance) or from the running statistics. */
static void bn_coef(const struct be_bn_desc *d, int c, double m, double mean, double var,
		    const float *gamma, const float *beta_, float *save_mean, float *save_invstd,
		    float *running_mean, float *running_var, float momentum, float *a, float *b)
{
	double invstd, ga;

	if (!save_mean) {
		ga = gamma[c] / sqrt((double)running_var[c] + d->eps);
		*a = (float)ga;
		*b = (float)(beta_[c] - running_mean[c] * ga);
		return;
	}
	invstd = 1.0 / sqrt(var + d->eps);
	ga = gamma[c] * invstd;
	*a = (float)ga;
	*b = (float)(beta_[c] - mean * ga);
	save_mean[c] = (float)mean;
	save_invstd[c] = (float)invstd;
	running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
	running_var[c] =
	    (float)((1.0 - momentum) * running_var[c] + momentum * var * m / (m - 1.0));
}

/* One chunk of channels of a blocked, NHWC or bfloat16 act: k.v channels, V lanes at a time
 * (k.v / V groups side by side in each row), BF the type. */
#define BN_FWD_CHUNK(V, BF, ...) bn_fwd_chunk(__VA_ARGS__, V, BF)
INLINE void bn_fwd_chunk(const struct be_bn_desc *d, const struct cpu_act *a, struct chunk k,
			 const void *x, const void *z, const float *gamma, const float *beta_,
			 void *y, float *save_mean, float *save_invstd, float *running_mean,
			 float *running_var, float momentum, const int V, const int BF)
{
	size_t hw = a->hw, ns = (size_t)a->c * hw, bs = (size_t)a->bs;
	double m = (double)a->n * hw;
	float fa[BN_WMAX], fb[BN_WMAX];
	int relu = d->fuse_relu, W = k.v, G = W / V;

	if (save_mean) {
		double sh[BN_WMAX], s1[BN_WMAX], s2[BN_WMAX];
		for (int v = 0; v < W; v++)
			sh[v] = ld(x, k.base + v, BF), s1[v] = 0.0, s2[v] = 0.0;
		for (int i = 0; i < a->n; i++)
			for (size_t s = 0; s < hw; s++) {
				size_t o = k.base + i * ns + s * bs;
				for (int g = 0; g < G; g++) {
					double *p1 = s1 + g * V, *p2 = s2 + g * V;
					const double *ph = sh + g * V;
					size_t og = o + (size_t)g * V;
#pragma omp simd
					for (int v = 0; v < V; v++) {
						double t = (double)ld(x, og + v, BF) - ph[v];
						p1[v] += t;
						p2[v] += t * t;
					}
				}
			}
		for (int v = 0; v < W; v++) {
			double e = s1[v] / m, var = s2[v] / m - e * e;
			bn_coef(d, k.c0 + v, m, sh[v] + e, var > 0.0 ? var : 0.0, gamma, beta_,
				save_mean, save_invstd, running_mean, running_var, momentum, &fa[v],
				&fb[v]);
		}
	} else {
		for (int v = 0; v < W; v++)
			bn_coef(d, k.c0 + v, m, 0.0, 0.0, gamma, beta_, NULL, NULL, running_mean,
				running_var, momentum, &fa[v], &fb[v]);
	}
	for (int i = 0; i < a->n; i++)
		for (size_t s = 0; s < hw; s++)
			for (int g = 0; g < G; g++) {
				size_t o = k.base + i * ns + s * bs + (size_t)g * V;
				const float *ga = fa + g * V, *gb = fb + g * V;
				if (z) {
#pragma omp simd
					for (int v = 0; v < V; v++) {
						/* in float32 and rounded once: the ReLU's decision
						 * is float32's, as the reference's */
						float t = ld(x, o + v, BF) * ga[v] + gb[v] +
							  ld(z, o + v, BF);
						st(y, o + v, !relu || t > 0.0f ? t : 0.0f, BF);
					}
				} else {
#pragma omp simd
					for (int v = 0; v < V; v++) {
						float t = ld(x, o + v, BF) * ga[v] + gb[v];
						st(y, o + v, !relu || t > 0.0f ? t : 0.0f, BF);
					}
				}
			}
}

static void LEVEL(cpu_act_bn_fwd)(const struct be_bn_desc *d, const struct cpu_act *a,
				  const void *x, const void *z, const float *gamma,
				  const float *beta_, void *y, float *save_mean, float *save_invstd,
				  float *running_mean, float *running_var, float momentum)
{
	if (a->bs == 1 && !a->bf16) {
		double m = (double)d->n * d->h * d->w;
#pragma omp parallel for schedule(static)
		for (int c = 0; c < d->c; c++) {
			double mean = 0.0, var = 0.0;
			float fa, fb;
			if (save_mean) {
				mean = bn_plane_sum(d, x, c, 0.0f, 0) / m;
				var = bn_plane_sum(d, x, c, (float)mean, 1) / m;
			}
			bn_coef(d, c, m, mean, var, gamma, beta_, save_mean, save_invstd,
				running_mean, running_var, momentum, &fa, &fb);
			bn_plane_apply(d, x, z, y, c, fa, fb);
		}
		return;
	}
	int w = bn_width(a), nq = chunks_w(a, w);
#pragma omp parallel for schedule(static)
	for (int q = 0; q < nq; q++) {
		struct chunk k = chunk_w(a, q, w);
		BN_DISPATCH(BN_FWD_CHUNK, k.v, a->bf16, d, a, k, x, z, gamma, beta_, y, save_mean,
			    save_invstd, running_mean, running_var, momentum);
	}
}

/* dx = gamma * invstd * (g - mean(g) - (x - mean) * invstd^2 * mean(g * (x - mean))),
 * g = dy, masked by y > 0 when the ReLU is fused; dz gets g as the separate add's axpby. */
static void bn_bwd_plane(const struct be_bn_desc *d, int c, const float *x, const float *y,
			 const float *dy, const float *gamma, const float *save_mean,
			 const float *save_invstd, float *dx, float *dz, float bz, float *dgamma,
			 float *dbeta, float beta)
{
	size_t hw = (size_t)d->h * d->w;
	double m = (double)d->n * hw, sg = 0.0, sgx = 0.0;
	float mean = save_mean[c], invstd = save_invstd[c];
	int relu = d->fuse_relu;

	for (int n = 0; n < d->n; n++) {
		size_t off = ((size_t)n * d->c + c) * hw;
		const float *xp = x + off, *yp = y + off, *gp = dy + off;
		double pg = 0.0, pgx = 0.0;
#pragma omp simd reduction(+ : pg, pgx)
		for (size_t i = 0; i < hw; i++) {
			float g = relu && !(yp[i] > 0.0f) ? 0.0f : gp[i];
			pg += (double)g;
			pgx += (double)g * (double)(xp[i] - mean);
		}
		sg += pg;
		sgx += pgx;
		if (dz) {
			float *dzp = dz + off;
			if (bz == 0.0f) {
#pragma omp simd
				for (size_t i = 0; i < hw; i++)
					dzp[i] = relu && !(yp[i] > 0.0f) ? 0.0f : gp[i];
			} else {
#pragma omp simd
				for (size_t i = 0; i < hw; i++)
					dzp[i] =
					    (relu && !(yp[i] > 0.0f) ? 0.0f : gp[i]) + bz * dzp[i];
			}
		}
	}
	float k = gamma[c] * invstd, mg = (float)(sg / m);
	float kx = (float)(sgx / m) * invstd * invstd;
	for (int n = 0; dx && n < d->n; n++) {
		size_t off = ((size_t)n * d->c + c) * hw;
		const float *xp = x + off, *yp = y + off, *gp = dy + off;
		float *dxp = dx + off;
#pragma omp simd
		for (size_t i = 0; i < hw; i++) {
			float g = relu && !(yp[i] > 0.0f) ? 0.0f : gp[i];
			float v = k * (g - mg - (xp[i] - mean) * kx);
			dxp[i] = beta == 0.0f ? v : v + beta * dxp[i];
		}
	}
	dgamma[c] = (float)(sgx * invstd + (beta == 0.0f ? 0.0 : beta * dgamma[c]));
	dbeta[c] = (float)(sg + (beta == 0.0f ? 0.0 : beta * dbeta[c]));
}

/* The gradient that reaches the batch norm: dy, or 0 where the fused ReLU cut (y <= 0, or y
 * NaN). Branch-free, so that the lanes' loops vectorize. */
INLINE float bn_g(int relu, float y, float dy)
{
	return relu && !(y > 0.0f) ? 0.0f : dy;
}

/* The backward's statistics pass over one chunk: sg += g, sgx += g * (x - mean) per lane, and
 * dz as the separate add's axpby: DZ 0 none, 1 dz = g, 2 dz = g + bz * dz. DZ, like V and BF,
 * is a constant at each call, so that the lanes' loop has no condition left in it. */
INLINE void bn_bwd_sums(const struct cpu_act *a, struct chunk k, const void *x, const void *y,
			const void *dy, const float *mean, int relu, void *dz, float bz, double *sg,
			double *sgx, const int V, const int BF, const int DZ)
{
	size_t hw = a->hw, ns = (size_t)a->c * hw, bs = (size_t)a->bs;
	int G = k.v / V;

	for (int i = 0; i < a->n; i++)
		for (size_t s = 0; s < hw; s++)
			for (int g = 0; g < G; g++) {
				size_t o = k.base + i * ns + s * bs + (size_t)g * V;
				double *pg = sg + g * V, *pgx = sgx + g * V;
				const float *pm = mean + g * V;
#pragma omp simd
				for (int v = 0; v < V; v++) {
					float gv = bn_g(relu, ld(y, o + v, BF), ld(dy, o + v, BF));
					pg[v] += (double)gv;
					pgx[v] += (double)gv * (double)(ld(x, o + v, BF) - pm[v]);
					if (DZ == 1)
						st(dz, o + v, gv, BF);
					else if (DZ == 2)
						st(dz, o + v, gv + bz * ld(dz, o + v, BF), BF);
				}
			}
}

#define BN_BWD_CHUNK(V, BF, ...) bn_bwd_chunk(__VA_ARGS__, V, BF)
INLINE void bn_bwd_chunk(const struct be_bn_desc *d, const struct cpu_act *a, struct chunk k,
			 const void *x, const void *y, const void *dy, const float *gamma,
			 const float *save_mean, const float *save_invstd, void *dx, void *dz,
			 float bz, float *dgamma, float *dbeta, float beta, const int V,
			 const int BF)
{
	size_t hw = a->hw, ns = (size_t)a->c * hw, bs = (size_t)a->bs;
	double m = (double)a->n * hw, sg[BN_WMAX], sgx[BN_WMAX];
	float mean[BN_WMAX], invstd[BN_WMAX], fk[BN_WMAX], mg[BN_WMAX], kx[BN_WMAX];
	int relu = d->fuse_relu, W = k.v, G = W / V;

	for (int v = 0; v < W; v++) {
		mean[v] = save_mean[k.c0 + v], invstd[v] = save_invstd[k.c0 + v];
		sg[v] = 0.0, sgx[v] = 0.0;
	}
	/* one straight vector loop per case of dz (a store under a condition in the lanes'
	 * loop keeps gcc from vectorizing it: measured 1.5-2x slower) */
	if (!dz)
		bn_bwd_sums(a, k, x, y, dy, mean, relu, NULL, 0.0f, sg, sgx, V, BF, 0);
	else if (bz == 0.0f)
		bn_bwd_sums(a, k, x, y, dy, mean, relu, dz, 0.0f, sg, sgx, V, BF, 1);
	else
		bn_bwd_sums(a, k, x, y, dy, mean, relu, dz, bz, sg, sgx, V, BF, 2);
	for (int v = 0; v < W; v++) {
		int c = k.c0 + v;
		fk[v] = gamma[c] * invstd[v];
		mg[v] = (float)(sg[v] / m);
		kx[v] = (float)(sgx[v] / m) * invstd[v] * invstd[v];
		dgamma[c] = (float)(sgx[v] * invstd[v] + (beta == 0.0f ? 0.0 : beta * dgamma[c]));
		dbeta[c] = (float)(sg[v] + (beta == 0.0f ? 0.0 : beta * dbeta[c]));
	}
	if (!dx)
		return;
	for (int i = 0; i < a->n; i++)
		for (size_t s = 0; s < hw; s++)
			for (int g = 0; g < G; g++) {
				size_t o = k.base + i * ns + s * bs + (size_t)g * V;
				const float *gk = fk + g * V, *gm = mg + g * V, *gx = kx + g * V;
				const float *pm = mean + g * V;
#pragma omp simd
				for (int v = 0; v < V; v++) {
					float gv = bn_g(relu, ld(y, o + v, BF), ld(dy, o + v, BF));
					float r = gk[v] *
						  (gv - gm[v] - (ld(x, o + v, BF) - pm[v]) * gx[v]);
					st(dx, o + v,
					   beta == 0.0f ? r : r + beta * ld(dx, o + v, BF), BF);
				}
			}
}

static void LEVEL(cpu_act_bn_bwd)(const struct be_bn_desc *d, const struct cpu_act *a,
				  const void *x, const void *y, const void *dy, const float *gamma,
				  const float *save_mean, const float *save_invstd, void *dx,
				  void *dz, float bz, float *dgamma, float *dbeta, float beta)
{
	if (a->bs == 1 && !a->bf16) {
#pragma omp parallel for schedule(static)
		for (int c = 0; c < d->c; c++)
			bn_bwd_plane(d, c, x, y, dy, gamma, save_mean, save_invstd, dx, dz, bz,
				     dgamma, dbeta, beta);
		return;
	}
	int w = bn_width(a), nq = chunks_w(a, w);
#pragma omp parallel for schedule(static)
	for (int q = 0; q < nq; q++) {
		struct chunk k = chunk_w(a, q, w);
		BN_DISPATCH(BN_BWD_CHUNK, k.v, a->bf16, d, a, k, x, y, dy, gamma, save_mean,
			    save_invstd, dx, dz, bz, dgamma, dbeta, beta);
	}
}

/* ---------------------------------------------------------------------------------------
 * Max pooling's backward: each window's first maximum in x, found again (PyTorch's rule: a
 * larger value or a NaN takes it), gets the window's gradient. A plane of one sample and one
 * channel block at a time, its lanes side by side. */

#define POOL_BWD_LANES(V, BF, ...) pool_bwd_lanes(__VA_ARGS__, V, BF)
INLINE void pool_bwd_lanes(const struct be_pool_desc *d, size_t bs, const void *x, size_t bx,
			   const void *dy, size_t by, float *acc, int oy, int ox, int v0,
			   const int V, const int BF)
{
	int y0 = oy * d->stride - d->pad, x0 = ox * d->stride - d->pad;
	int y1 = y0 + d->kh < d->h ? y0 + d->kh : d->h, x1 = x0 + d->kw < d->w ? x0 + d->kw : d->w;
	int first = (y0 > 0 ? y0 : 0) * d->w + (x0 > 0 ? x0 : 0);
	int best[VMAX];
	float m[VMAX];

	for (int v = 0; v < V; v++) {
		best[v] = first;
		m[v] = ld(x, bx + (size_t)first * bs + v0 + v, BF);
	}
	for (int iy = y0 > 0 ? y0 : 0; iy < y1; iy++)
		for (int ix = x0 > 0 ? x0 : 0; ix < x1; ix++) {
			int p = iy * d->w + ix;
#pragma omp simd
			for (int v = 0; v < V; v++) {
				float val = ld(x, bx + (size_t)p * bs + v0 + v, BF);
				int take = val > m[v] || val != val;
				best[v] = take ? p : best[v];
				m[v] = take ? val : m[v];
			}
		}
	size_t o = by + ((size_t)oy * d->ow + ox) * bs + v0;
	for (int v = 0; v < V; v++)
		acc[(size_t)best[v] * bs + v0 + v] += ld(dy, o + v, BF);
}

static void LEVEL(cpu_act_maxpool_bwd)(const struct be_pool_desc *d, int bs, int bf16,
				       const void *x, const void *dy, void *dx, float beta,
				       float *scratch)
{
	size_t hw = (size_t)d->h * d->w, ohw = (size_t)d->oh * d->ow, plane = hw * bs;
	long planes = (long)d->n * (d->c / bs);

	if (bs == 1 && !bf16) {
		be_ref_pool_bwd(d, x, dy, dx, beta, 1);
		return;
	}
#pragma omp parallel for schedule(static)
	for (long p = 0; p < planes; p++) {
		size_t bx = (size_t)p * plane, by = (size_t)p * ohw * bs;
		float *acc = bf16 ? scratch + bx : (float *)dx + bx;
		for (size_t e = 0; e < plane; e++)
			acc[e] = beta == 0.0f ? 0.0f : beta * ld(dx, bx + e, bf16);
		for (int oy = 0; oy < d->oh; oy++)
			for (int ox = 0; ox < d->ow; ox++)
				for (int v0 = 0; v0 < bs; v0 += VMAX) {
					int nv = bs - v0 < VMAX ? bs - v0 : VMAX;
					DISPATCH(POOL_BWD_LANES, nv, bf16, d, (size_t)bs, x, bx, dy,
						 by, acc, oy, ox, v0);
				}
		if (bf16)
			for (size_t e = 0; e < plane; e++)
				((uint16_t *)dx)[bx + e] = cpu_bf16(acc[e]);
	}
}

/* Max pooling's forward on NCHW float32 without padding (oneDNN 2.6 runs such a layer, LeNet's
 * 6-channel one, with its "simple_nchw" reference implementation: 18% of a LeNet step). Each
 * window's first maximum in scan order, a NaN winning (PyTorch's rule, the reference's), taken
 * across a row of outputs at once: one pass per window position. */
static void LEVEL(cpu_act_maxpool_fwd_nchw)(const struct be_pool_desc *d, const float *x, float *y)
{
	long planes = (long)d->n * d->c;
	size_t st = (size_t)d->stride;

#pragma omp parallel for schedule(static)
	for (long p = 0; p < planes; p++) {
		const float *xp = x + (size_t)p * d->h * d->w;
		float *yp = y + (size_t)p * d->oh * d->ow;
		for (int oy = 0; oy < d->oh; oy++) {
			float *yr = yp + (size_t)oy * d->ow;
			const float *x0 = xp + (size_t)oy * st * d->w;
			for (int ox = 0; ox < d->ow; ox++)
				yr[ox] = x0[ox * st];
			for (int ky = 0; ky < d->kh; ky++)
				for (int kx = ky == 0; kx < d->kw; kx++) {
					const float *xr = x0 + (size_t)ky * d->w + kx;
#pragma omp simd
					for (int ox = 0; ox < d->ow; ox++) {
						float v = xr[ox * st], m = yr[ox];
						yr[ox] = v > m || v != v ? v : m;
					}
				}
		}
	}
}

/* ---------------------------------------------------------------------------------------
 * Global average pooling. */

#define GAP_FWD_CHUNK(V, BF, ...) gap_fwd_chunk(__VA_ARGS__, V, BF)
INLINE void gap_fwd_chunk(const struct cpu_act *a, struct chunk k, int i, const void *x, void *y,
			  const int V, const int BF)
{
	size_t o = k.base + (size_t)i * a->c * a->hw;
	double s[VMAX];

	for (int v = 0; v < V; v++)
		s[v] = 0.0;
	for (size_t p = 0; p < a->hw; p++)
#pragma omp simd
		for (int v = 0; v < V; v++)
			s[v] += ld(x, o + p * a->bs + v, BF);
	for (int v = 0; v < V; v++)
		st(y, (size_t)i * a->c + k.c0 + v, (float)(s[v] / (double)a->hw), BF);
}

static void LEVEL(cpu_act_gap_fwd)(const struct cpu_act *a, const void *x, void *y)
{
	int nq = chunks_of(a);

	if (a->bs == 1 && !a->bf16) {
		be_ref_gap_fwd(x, y, a->n, a->c, (int)a->hw, 1);
		return;
	}
#pragma omp parallel for schedule(static)
	for (long p = 0; p < (long)a->n * nq; p++) {
		struct chunk k = chunk_at(a, (int)(p % nq));
		DISPATCH(GAP_FWD_CHUNK, k.v, a->bf16, a, k, (int)(p / nq), x, y);
	}
}

#define GAP_BWD_CHUNK(V, BF, ...) gap_bwd_chunk(__VA_ARGS__, V, BF)
INLINE void gap_bwd_chunk(const struct cpu_act *a, struct chunk k, int i, const void *dy, void *dx,
			  float beta, const int V, const int BF)
{
	size_t o = k.base + (size_t)i * a->c * a->hw;
	float g[VMAX];

	for (int v = 0; v < V; v++)
		g[v] = ld(dy, (size_t)i * a->c + k.c0 + v, BF) / (float)a->hw;
	for (size_t p = 0; p < a->hw; p++)
#pragma omp simd
		for (int v = 0; v < V; v++) {
			size_t e = o + p * a->bs + v;
			st(dx, e, beta == 0.0f ? g[v] : g[v] + beta * ld(dx, e, BF), BF);
		}
}

static void LEVEL(cpu_act_gap_bwd)(const struct cpu_act *a, const void *dy, void *dx, float beta)
{
	int nq = chunks_of(a);

	if (a->bs == 1 && !a->bf16) {
		be_ref_gap_bwd(dy, dx, a->n, a->c, (int)a->hw, beta, 1);
		return;
	}
#pragma omp parallel for schedule(static)
	for (long p = 0; p < (long)a->n * nq; p++) {
		struct chunk k = chunk_at(a, (int)(p % nq));
		DISPATCH(GAP_BWD_CHUNK, k.v, a->bf16, a, k, (int)(p / nq), dy, dx, beta);
	}
}

/* ---------------------------------------------------------------------------------------
 * bfloat16 element-wise: backend_ref.c's formulas in float32, one rounding. */

static void LEVEL(cpu_bf16_relu_fwd)(const uint16_t *x, uint16_t *y, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++) {
		float v = cpu_f32(x[i]);
		y[i] = cpu_bf16(v > 0.0f ? v : 0.0f);
	}
}

static void LEVEL(cpu_bf16_relu_bwd)(const uint16_t *y, const uint16_t *dy, uint16_t *dx, size_t n,
				     float beta)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++) {
		float g = cpu_f32(y[i]) > 0.0f ? cpu_f32(dy[i]) : 0.0f;
		dx[i] = cpu_bf16(beta == 0.0f ? g : g + beta * cpu_f32(dx[i]));
	}
}

static void LEVEL(cpu_bf16_add)(const uint16_t *a, const uint16_t *b, uint16_t *y, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++)
		y[i] = cpu_bf16(cpu_f32(a[i]) + cpu_f32(b[i]));
}

static void LEVEL(cpu_bf16_accum)(const uint16_t *dy, uint16_t *g, size_t n, float beta)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++)
		g[i] =
		    cpu_bf16(beta == 0.0f ? cpu_f32(dy[i]) : cpu_f32(dy[i]) + beta * cpu_f32(g[i]));
}

static void LEVEL(cpu_bf16_scale)(uint16_t *y, float beta, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++)
		y[i] = cpu_bf16(beta * cpu_f32(y[i]));
}

static void LEVEL(cpu_bf16_from_f32)(const float *x, uint16_t *y, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++)
		y[i] = cpu_bf16(x[i]);
}

static void LEVEL(cpu_bf16_to_f32)(const uint16_t *x, float *y, size_t n)
{
#pragma omp parallel for simd schedule(static)
	for (size_t i = 0; i < n; i++)
		y[i] = cpu_f32(x[i]);
}

const struct cpu_act_kernels LEVEL(cpu_act_kernels) = {
    .import = LEVEL(cpu_act_import),
    .export_ = LEVEL(cpu_act_export),
    .bn_fwd = LEVEL(cpu_act_bn_fwd),
    .bn_bwd = LEVEL(cpu_act_bn_bwd),
    .maxpool_bwd = LEVEL(cpu_act_maxpool_bwd),
    .maxpool_fwd_nchw = LEVEL(cpu_act_maxpool_fwd_nchw),
    .gap_fwd = LEVEL(cpu_act_gap_fwd),
    .gap_bwd = LEVEL(cpu_act_gap_bwd),
    .bf16_relu_fwd = LEVEL(cpu_bf16_relu_fwd),
    .bf16_relu_bwd = LEVEL(cpu_bf16_relu_bwd),
    .bf16_add = LEVEL(cpu_bf16_add),
    .bf16_accum = LEVEL(cpu_bf16_accum),
    .bf16_scale = LEVEL(cpu_bf16_scale),
    .bf16_from_f32 = LEVEL(cpu_bf16_from_f32),
    .bf16_to_f32 = LEVEL(cpu_bf16_to_f32),
};
