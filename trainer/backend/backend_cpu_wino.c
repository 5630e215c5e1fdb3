/* backend_cpu_wino.c — Winograd's F(4x4, 3x3) for the CPU backend's float32 3x3 stride-1
 * convolutions (backend_cpu_wino.h), after Lavin and Gray, "Fast Algorithms for Convolutional
 * Neural Networks" (2016), with their interpolation points 0, 1, -1, 2, -2 and infinity.
 *
 * A 4 x 4 tile of outputs is A^T [(G g G^T) . (B^T d B)] A for the 6 x 6 input patch d under it
 * and each 3 x 3 kernel g: 36 products a tile and channel pair instead of 144. Over channels
 * the element-wise products are 36 matrix products, one per position of the 6 x 6 transformed
 * tile: M[pos] (tiles x k) = V[pos] (tiles x c) U[pos] (c x k), done by oneDNN's sgemm.
 *  - forward: V from x, U from the weights, y from M;
 *  - backward data: the forward of dy with the kernels turned by 180 degrees and c and k swapped;
 *  - backward weights: dU[pos] = sum over tiles of V[pos]^T (A dy A^T)[pos], dw = G^T dU G.
 * Tiles go in chunks that stay in a core's cache: the forward passes give each thread its own
 * chunks (transform, 36 products, transform back); the weight gradient, which sums over all
 * tiles, shares each chunk's 36 products among the threads. The transforms run over 8
 * channels at once (one block of nChw8c, half of nChw16c's), in GCC's vector types. */
#if HAVE_DNNL /* sgemm's; without oneDNN every convolution is the reference's */

#ifdef _OPENMP
#include <omp.h>
#endif

#include <oneapi/dnnl/dnnl.h>

#include "trainer/backend/backend_cpu_wino.h"

#define INLINE static inline __attribute__((always_inline))

typedef float v8 __attribute__((vector_size(32)));
/* 8 floats anywhere: the acts' and the tiles' vectors need not be 32-byte aligned */
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));
#define VLD(p)	  (*(const v8u *)(p))
#define VST(p, v) (*(v8u *)(p) = (v))

enum { T = 6, NPOS = 36, LANES = 8 };

/* Tiles of a thread's chunk: enough rows for sgemm to run near its peak, few enough that the
 * chunk's transformed tiles (36 x (c + k) floats a tile) stay in a core's cache where the
 * channels are few. */
#define CHUNK_MIN   32
#define CHUNK_BYTES (1u << 20)
/* Unless forced, batches of at most BATCH_MAX_DIRECT stay direct, as oneDNN's rule for its own
 * Winograd (measured on oneDNN 2.6, AVX-512: direct up to 8 images, Winograd from 9, at every
 * size); and so do layers of fewer than TILES_MIN tiles, where the weights' transform (36 x c
 * x k floats a call) outweighs what the tiles save. */
#define BATCH_MAX_DIRECT 8
#define TILES_MIN	 64

/* B^T z, z a column (or row) of a 6 x 6 input patch */
INLINE void bt6(const v8 z[T], v8 o[T])
{
	o[0] = 4 * z[0] - 5 * z[2] + z[4];
	o[1] = -4 * z[1] - 4 * z[2] + z[3] + z[4];
	o[2] = 4 * z[1] - 4 * z[2] - z[3] + z[4];
	o[3] = -2 * z[1] - z[2] + 2 * z[3] + z[4];
	o[4] = 2 * z[1] - z[2] - 2 * z[3] + z[4];
	o[5] = 4 * z[1] - 5 * z[3] + z[5];
}

/* A^T z: 6 transformed products to 4 outputs */
INLINE void at6(const v8 z[T], v8 o[4])
{
	o[0] = z[0] + z[1] + z[2] + z[3] + z[4];
	o[1] = z[1] - z[2] + 2 * z[3] - 2 * z[4];
	o[2] = z[1] + z[2] + 4 * z[3] + 4 * z[4];
	o[3] = z[1] - z[2] + 8 * z[3] - 8 * z[4] + z[5];
}

/* A z: 4 output gradients to 6 (the transpose of at6) */
INLINE void a4(const v8 z[4], v8 o[T])
{
	o[0] = z[0];
	o[1] = z[0] + z[1] + z[2] + z[3];
	o[2] = z[0] - z[1] + z[2] - z[3];
	o[3] = z[0] + 2 * z[1] + 4 * z[2] + 8 * z[3];
	o[4] = z[0] - 2 * z[1] + 4 * z[2] - 8 * z[3];
	o[5] = z[3];
}

/* G z: 3 kernel taps to 6 */
INLINE void g3(const v8 z[3], v8 o[T])
{
	const float q = 1.0f / 4, s = 1.0f / 6, t = 1.0f / 12, u = 1.0f / 24;

	o[0] = q * z[0];
	o[1] = -s * (z[0] + z[1] + z[2]);
	o[2] = -s * (z[0] - z[1] + z[2]);
	o[3] = u * z[0] + t * z[1] + s * z[2];
	o[4] = u * z[0] - t * z[1] + s * z[2];
	o[5] = z[2];
}

/* G^T z: 6 transformed kernel gradients to 3 taps (the transpose of g3) */
INLINE void gt6(const v8 z[T], v8 o[3])
{
	const float q = 1.0f / 4, s = 1.0f / 6, t = 1.0f / 12, u = 1.0f / 24;

	o[0] = q * z[0] - s * (z[1] + z[2]) + u * (z[3] + z[4]);
	o[1] = s * (z[2] - z[1]) + t * (z[3] - z[4]);
	o[2] = s * (z[3] + z[4] - z[1] - z[2]) + z[5];
}

/* An act of ch channels in p's layout: where pixel (y, x) of image i has its 8 channels from
 * 8 * grp. */
struct act {
	const struct cpu_wino *p;
	int ch;
};

/* Where pixel 0 of image i has its 8 channels from 8 * grp; pixel (y, x) is (y * w + x) * bs
 * floats further. */
static size_t at(struct act a, int i, int grp)
{
	const struct cpu_wino *p = a.p;
	int c0 = grp * LANES;
	size_t hw = (size_t)p->h * p->w;

	return ((size_t)i * (a.ch / p->bs) + c0 / p->bs) * hw * p->bs + c0 % p->bs;
}

/* Tile t's image and the top-left pixel of its 6 x 6 input patch (the pad is 1). */
static void tile_of(const struct cpu_wino *p, size_t t, int *i, int *y0, int *x0)
{
	size_t per = (size_t)p->th * p->tw, r = t % per;

	*i = (int)(t / per);
	*y0 = (int)(r / p->tw) * 4 - 1;
	*x0 = (int)(r % p->tw) * 4 - 1;
}

/* B^T d B of tile t's patch of 8 channels from 8 * grp, to v[pos * ld] (zeros outside the
 * image). */
static void tile_in(struct act a, const float *x, size_t t, int grp, float *v, size_t ld)
{
	const struct cpu_wino *p = a.p;
	v8 d[T][T], col[T], o[T];
	int i, y0, x0;

	tile_of(p, t, &i, &y0, &x0);
	x += at(a, i, grp);
	for (int r = 0; r < T; r++)
		for (int s = 0; s < T; s++) {
			int y = y0 + r, xx = x0 + s;
			d[r][s] = (v8){0};
			if (y >= 0 && y < p->h && xx >= 0 && xx < p->w)
				d[r][s] = VLD(x + ((size_t)y * p->w + xx) * p->bs);
		}
	for (int s = 0; s < T; s++) { /* d = B^T d, column by column */
		for (int r = 0; r < T; r++)
			col[r] = d[r][s];
		bt6(col, o);
		for (int r = 0; r < T; r++)
			d[r][s] = o[r];
	}
	for (int r = 0; r < T; r++) { /* then d B, row by row */
		bt6(d[r], o);
		for (int s = 0; s < T; s++)
			VST(v + (size_t)(r * T + s) * ld, o[s]);
	}
}

/* A^T m A from m[pos * ld] to tile t's 4 x 4 outputs of 8 channels from 8 * grp, those inside
 * the image: y = result + beta * y. */
static void tile_out(struct act a, const float *m, size_t ld, size_t t, int grp, float *y,
		     float beta)
{
	const struct cpu_wino *p = a.p;
	v8 d[T][T], col[T], o[4], e[4][T];
	int i, y0, x0;

	tile_of(p, t, &i, &y0, &x0);
	y0++, x0++; /* the first output's pixel */
	for (int r = 0; r < T; r++)
		for (int s = 0; s < T; s++)
			d[r][s] = VLD(m + (size_t)(r * T + s) * ld);
	for (int s = 0; s < T; s++) { /* e = A^T d, column by column */
		for (int r = 0; r < T; r++)
			col[r] = d[r][s];
		at6(col, o);
		for (int r = 0; r < 4; r++)
			e[r][s] = o[r];
	}
	y += at(a, i, grp);
	for (int r = 0; r < 4 && y0 + r < p->h; r++) { /* then e A, row by row */
		at6(e[r], o);
		for (int s = 0; s < 4 && x0 + s < p->w; s++) {
			float *q = y + ((size_t)(y0 + r) * p->w + x0 + s) * p->bs;
			VST(q, beta == 0.0f ? o[s] : o[s] + beta * VLD(q));
		}
	}
}

/* A g A^T of tile t's 4 x 4 output gradients (zeros outside the image) to v[pos * ld]. */
static void tile_dy(struct act a, const float *dy, size_t t, int grp, float *v, size_t ld)
{
	const struct cpu_wino *p = a.p;
	v8 g[4][4], col[4], o[T], e[T][4];
	int i, y0, x0;

	tile_of(p, t, &i, &y0, &x0);
	y0++, x0++;
	dy += at(a, i, grp);
	for (int r = 0; r < 4; r++)
		for (int s = 0; s < 4; s++) {
			g[r][s] = (v8){0};
			if (y0 + r < p->h && x0 + s < p->w)
				g[r][s] = VLD(dy + ((size_t)(y0 + r) * p->w + x0 + s) * p->bs);
		}
	for (int s = 0; s < 4; s++) { /* e = A g, column by column */
		for (int r = 0; r < 4; r++)
			col[r] = g[r][s];
		a4(col, o);
		for (int r = 0; r < T; r++)
			e[r][s] = o[r];
	}
	for (int r = 0; r < T; r++) { /* then e A^T, row by row */
		a4(e[r], o);
		for (int s = 0; s < T; s++)
			VST(v + (size_t)(r * T + s) * ld, o[s]);
	}
}

/* U[pos][a][b] (a < na, b < nb) = G g G^T of the kernel joining channel a to b: w[b][a] (OIHW,
 * na = c inputs, nb = k outputs) for the forward; for the backward data (turn) the kernel of
 * w[a][b] turned by 180 degrees, a the output channels and b the input ones. Eight b at once
 * (nb is a multiple of 8). */
static void weights_in(const float *w, int na, int nb, int turn, float *u, int threads)
{
	size_t groups = (size_t)na * (nb / LANES), ld = (size_t)na * nb;

#pragma omp parallel for num_threads(threads) schedule(static)
	for (size_t ag = 0; ag < groups; ag++) {
		size_t a = ag / (nb / LANES), b0 = ag % (nb / LANES) * LANES;
		v8 g[3][3], t[T][3], z[3], o[T];

		for (int l = 0; l < LANES; l++) {
			size_t b = b0 + l;
			const float *k = turn ? w + (a * nb + b) * 9 : w + (b * na + a) * 9;
			for (int r = 0; r < 9; r++)
				g[r / 3][r % 3][l] = turn ? k[8 - r] : k[r];
		}
		for (int s = 0; s < 3; s++) { /* t = G g */
			for (int r = 0; r < 3; r++)
				z[r] = g[r][s];
			g3(z, o);
			for (int r = 0; r < T; r++)
				t[r][s] = o[r];
		}
		for (int r = 0; r < T; r++) { /* then t G^T */
			g3(t[r], o);
			for (int s = 0; s < T; s++)
				VST(u + (size_t)(r * T + s) * ld + a * nb + b0, o[s]);
		}
	}
}

/* dw[b][a] (OIHW) = G^T dU[.][a][b] G + beta * dw, eight b at once */
static void weights_out(const float *du, int na, int nb, float *dw, float beta, int threads)
{
	size_t groups = (size_t)na * (nb / LANES), ld = (size_t)na * nb;

#pragma omp parallel for num_threads(threads) schedule(static)
	for (size_t ag = 0; ag < groups; ag++) {
		size_t a = ag / (nb / LANES), b0 = ag % (nb / LANES) * LANES;
		v8 t[3][T], z[T], o[3], g[3][3];

		for (int s = 0; s < T; s++) { /* t = G^T dU */
			for (int r = 0; r < T; r++)
				z[r] = VLD(du + (size_t)(r * T + s) * ld + a * nb + b0);
			gt6(z, o);
			for (int r = 0; r < 3; r++)
				t[r][s] = o[r];
		}
		for (int r = 0; r < 3; r++) { /* then t G */
			gt6(t[r], o);
			for (int s = 0; s < 3; s++)
				g[r][s] = o[s];
		}
		for (int l = 0; l < LANES; l++) {
			float *k = dw + ((b0 + l) * na + a) * 9;
			for (int r = 0; r < 9; r++)
				k[r] = g[r / 3][r % 3][l] + (beta == 0.0f ? 0.0f : beta * k[r]);
		}
	}
}

int cpu_wino_plan(struct cpu_wino *p, const struct be_conv_desc *d, int bs, int threads, int force)
{
	struct cpu_wino q = {0};

	if (d->kh != 3 || d->kw != 3 || d->stride != 1 || d->pad != 1 || d->has_bias ||
	    d->oh != d->h || d->ow != d->w || (bs != 8 && bs != 16) || d->c % bs || d->k % bs)
		return -1;
	q.n = d->n, q.h = d->h, q.w = d->w, q.c = d->c, q.k = d->k, q.bs = bs;
	q.th = (d->h + 3) / 4, q.tw = (d->w + 3) / 4;
	q.tiles = (size_t)q.n * q.th * q.tw;
	if (!force && (q.n <= BATCH_MAX_DIRECT || q.tiles < TILES_MIN))
		return -1;
	q.threads = threads > 0 ? threads : 1;
	size_t fit = CHUNK_BYTES / (NPOS * sizeof(float) * (size_t)(q.c + q.k));
	size_t share = (q.tiles + q.threads - 1) / q.threads;
	q.chunk = (int)(fit < CHUNK_MIN ? CHUNK_MIN : fit);
	if ((size_t)q.chunk > share)
		q.chunk = (int)share;
	*p = q;
	return 0;
}

size_t cpu_wino_scratch(const struct cpu_wino *p)
{
	return (size_t)NPOS * p->c * p->k +
	       (size_t)p->threads * p->chunk * NPOS * (size_t)(p->c + p->k);
}

/* out (co channels) = the convolution of in (ci channels) with the transformed kernels u
 * (U[pos][ci][co]), + beta * out: each thread its own chunks of tiles. */
static int wino_conv(const struct cpu_wino *p, const float *in, int ci, const float *u, float *out,
		     int co, float beta, float *scratch)
{
	struct act ai = {p, ci}, ao = {p, co};
	size_t chunks = (p->tiles + p->chunk - 1) / p->chunk;
	float *tiles = scratch + (size_t)NPOS * ci * co;
	int failed = 0;

#pragma omp parallel num_threads(p->threads)
	{
#ifdef _OPENMP
		int me = omp_get_thread_num();
#else
		int me = 0;
#endif
		float *v = tiles + (size_t)me * p->chunk * NPOS * (size_t)(ci + co);
		float *m = v + (size_t)p->chunk * NPOS * ci;
#pragma omp for schedule(dynamic)
		for (size_t b = 0; b < chunks; b++) {
			size_t t0 = b * p->chunk, nt = p->tiles - t0;
			if (nt > (size_t)p->chunk)
				nt = (size_t)p->chunk;
			for (size_t j = 0; j < nt; j++)
				for (int g = 0; g < ci / LANES; g++)
					tile_in(ai, in, t0 + j, g, v + j * ci + g * LANES, nt * ci);
			for (int pos = 0; pos < NPOS; pos++)
				if (dnnl_sgemm('N', 'N', (dnnl_dim_t)nt, co, ci, 1.0f,
					       v + pos * nt * ci, ci, u + (size_t)pos * ci * co, co,
					       0.0f, m + pos * nt * co, co) != dnnl_success) {
#pragma omp atomic write
					failed = 1;
				}
			for (size_t j = 0; j < nt; j++)
				for (int g = 0; g < co / LANES; g++)
					tile_out(ao, m + j * co + g * LANES, nt * co, t0 + j, g,
						 out, beta);
		}
	}
	return failed ? -1 : 0;
}

int cpu_wino_fwd(const struct cpu_wino *p, const float *x, const float *w, float *y, float *scratch)
{
	weights_in(w, p->c, p->k, 0, scratch, p->threads);
	return wino_conv(p, x, p->c, scratch, y, p->k, 0.0f, scratch);
}

int cpu_wino_bwd_data(const struct cpu_wino *p, const float *dy, const float *w, float *dx,
		      float beta, float *scratch)
{
	weights_in(w, p->k, p->c, 1, scratch, p->threads);
	return wino_conv(p, dy, p->k, scratch, dx, p->c, beta, scratch);
}

/* dU[pos] (c x k) = sum over tiles of V[pos]^T (A dy A^T)[pos], a chunk of every thread's
 * tiles at a time: the transforms split over tiles, the 36 products over positions. */
int cpu_wino_bwd_weights(const struct cpu_wino *p, const float *x, const float *dy, float *dw,
			 float beta, float *scratch)
{
	struct act ax = {p, p->c}, ay = {p, p->k};
	size_t chunk = (size_t)p->chunk * p->threads, c = p->c, k = p->k;
	float *du = scratch, *v = scratch + NPOS * c * k, *g = v + chunk * NPOS * c;
	int failed = 0;

	for (size_t t0 = 0; t0 < p->tiles; t0 += chunk) {
		size_t nt = p->tiles - t0 < chunk ? p->tiles - t0 : chunk;
		size_t gx = nt * (c / LANES), gy = nt * (k / LANES);
		float b = t0 == 0 ? 0.0f : 1.0f;
#pragma omp parallel num_threads(p->threads)
		{
#pragma omp for schedule(static) nowait
			for (size_t jg = 0; jg < gx; jg++) {
				size_t j = jg / (c / LANES);
				int gr = (int)(jg % (c / LANES));
				tile_in(ax, x, t0 + j, gr, v + j * c + gr * LANES, nt * c);
			}
#pragma omp for schedule(static)
			for (size_t jg = 0; jg < gy; jg++) {
				size_t j = jg / (k / LANES);
				int gr = (int)(jg % (k / LANES));
				tile_dy(ay, dy, t0 + j, gr, g + j * k + gr * LANES, nt * k);
			}
#pragma omp for schedule(static)
			for (int pos = 0; pos < NPOS; pos++)
				if (dnnl_sgemm('T', 'N', (dnnl_dim_t)c, (dnnl_dim_t)k,
					       (dnnl_dim_t)nt, 1.0f, v + pos * nt * c,
					       (dnnl_dim_t)c, g + pos * nt * k, (dnnl_dim_t)k, b,
					       du + pos * c * k, (dnnl_dim_t)k) != dnnl_success) {
#pragma omp atomic write
					failed = 1;
				}
		}
	}
	if (failed)
		return -1;
	weights_out(du, p->c, p->k, dw, beta, p->threads);
	return 0;
}

#endif /* HAVE_DNNL */
