/* backend_ref.c — the reference backend: every op as plain loops over NCHW floats with double
 * accumulators, written to be obviously right rather than fast. The test suite checks the other
 * backends against it and it against PyTorch. Must not call any library but libc and libm. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "trainer/backend/backend_ref.h"
#include "common/error.h"

/* ---------------------------------------------------------------------------------------
 * Helpers shared with the other CPU backends. */

int be_errf(struct backend *be, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verrprintf(&be->err, fmt, ap);
	va_end(ap);
	return -1;
}

const char *be_conv_str(const struct be_conv_desc *d, char *buf, size_t len)
{
	snprintf(buf, len, "n=%d c=%d h=%d w=%d k=%d %dx%d/%d pad %d%s", d->n, d->c, d->h, d->w,
		 d->k, d->kh, d->kw, d->stride, d->pad, d->has_bias ? " bias" : "");
	return buf;
}

const char *be_bn_str(const struct be_bn_desc *d, char *buf, size_t len)
{
	snprintf(buf, len, "n=%d c=%d h=%d w=%d eps=%g%s%s", d->n, d->c, d->h, d->w, d->eps,
		 d->fuse_add ? " +add" : "", d->fuse_relu ? " +relu" : "");
	return buf;
}

const char *be_pool_str(const struct be_pool_desc *d, char *buf, size_t len)
{
	snprintf(buf, len, "%s n=%d c=%d h=%d w=%d %dx%d/%d pad %d",
		 d->kind == BE_POOL_MAX ? "max" : "avg", d->n, d->c, d->h, d->w, d->kh, d->kw,
		 d->stride, d->pad);
	return buf;
}

const char *be_linear_str(const struct be_linear_desc *d, char *buf, size_t len)
{
	int k = snprintf(buf, len, "n=%d in=%d out=%d%s", d->n, d->in, d->out,
			 d->has_bias ? " bias" : "");
	if ((d->c || d->h || d->w) && k > 0 && (size_t)k < len)
		snprintf(buf + k, len - (size_t)k, " from %dx%dx%d", d->c, d->h, d->w);
	return buf;
}

/* Output size as PyTorch computes it (floor mode); 0 or less when the kernel does not fit. */
static int out_size(int in, int k, int stride, int pad)
{
	return (in + 2 * pad - k) / stride + 1;
}

/* Activations must stay indexable with int products per plane and size_t overall. */
#define BE_DIM_MAX (1 << 24)

static int dims_ok(int n, int c, int h, int w)
{
	return n > 0 && c > 0 && h > 0 && w > 0 && n < BE_DIM_MAX && c < BE_DIM_MAX &&
	       h < BE_DIM_MAX && w < BE_DIM_MAX && (long long)h * w < BE_DIM_MAX * 8LL;
}

int be_conv_check(struct backend *be, struct be_conv_desc *d)
{
	char s[160];

	if (!dims_ok(d->n, d->c, d->h, d->w) || d->k <= 0 || d->kh <= 0 || d->kw <= 0 ||
	    d->stride <= 0 || d->pad < 0)
		return be_errf(be, "conv_create(%s): every size must be positive, pad >= 0",
			       be_conv_str(d, s, sizeof(s)));
	d->oh = out_size(d->h, d->kh, d->stride, d->pad);
	d->ow = out_size(d->w, d->kw, d->stride, d->pad);
	if (d->h + 2 * d->pad < d->kh || d->w + 2 * d->pad < d->kw)
		return be_errf(be, "conv_create(%s): kernel larger than the padded input",
			       be_conv_str(d, s, sizeof(s)));
	return 0;
}

int be_bn_z_check(struct backend *be, const struct be_bn_desc *d, const void *z, const char *fn)
{
	char s[160];

	if (!z == !d->fuse_add)
		return 0;
	return be_errf(be, "%s(%s): %s", fn, be_bn_str(d, s, sizeof(s)),
		       d->fuse_add ? "the op adds a residual but its tensor is NULL"
				   : "a residual tensor was passed to an op without fuse_add");
}

int be_bn_check(struct backend *be, const struct be_bn_desc *d)
{
	char s[160];

	if (!dims_ok(d->n, d->c, d->h, d->w) || !(d->eps > 0.0f))
		return be_errf(be, "bn_create(%s): every size and eps must be positive",
			       be_bn_str(d, s, sizeof(s)));
	return 0;
}

int be_pool_check(struct backend *be, struct be_pool_desc *d)
{
	char s[160];

	if ((d->kind != BE_POOL_MAX && d->kind != BE_POOL_AVG) ||
	    !dims_ok(d->n, d->c, d->h, d->w) || d->kh <= 0 || d->kw <= 0 || d->stride <= 0 ||
	    d->pad < 0)
		return be_errf(be, "pool_create(%s): every size must be positive, pad >= 0",
			       be_pool_str(d, s, sizeof(s)));
	/* PyTorch's rule; it also guarantees no window lies entirely in the padding. */
	if (d->pad > d->kh / 2 || d->pad > d->kw / 2)
		return be_errf(be, "pool_create(%s): pad must be at most half the kernel size",
			       be_pool_str(d, s, sizeof(s)));
	d->oh = out_size(d->h, d->kh, d->stride, d->pad);
	d->ow = out_size(d->w, d->kw, d->stride, d->pad);
	if (d->oh <= 0 || d->ow <= 0)
		return be_errf(be, "pool_create(%s): kernel larger than the padded input",
			       be_pool_str(d, s, sizeof(s)));
	return 0;
}

int be_linear_check(struct backend *be, const struct be_linear_desc *d)
{
	char s[160];

	if (!dims_ok(d->n, d->in, d->out, 1))
		return be_errf(be, "linear_create(%s): every size must be positive",
			       be_linear_str(d, s, sizeof(s)));
	if ((d->c || d->h || d->w) &&
	    (d->c <= 0 || d->h <= 0 || d->w <= 0 || (long long)d->c * d->h * d->w != d->in))
		return be_errf(be, "linear_create(%s): input shape %dx%dx%d is not %d features",
			       be_linear_str(d, s, sizeof(s)), d->c, d->h, d->w, d->in);
	return 0;
}

void *be_host_alloc(size_t bytes)
{
	size_t rounded = (bytes + 63) / 64 * 64;

	return aligned_alloc(64, rounded ? rounded : 64);
}

void be_host_free(void *p)
{
	free(p);
}

/* ---------------------------------------------------------------------------------------
 * Kernels. `#pragma omp ... if (par)` keeps the reference single-threaded and lets the
 * CPU backend run the very same loops on all its threads. */

static inline float blend(double r, float beta, float old)
{
	return beta == 0.0f ? (float)r : (float)(r + (double)beta * old);
}

void be_ref_fill(float *x, float value, size_t n, int par)
{
#pragma omp parallel for simd schedule(static) if (par)
	for (size_t i = 0; i < n; i++)
		x[i] = value;
}

void be_ref_input_u8(const uint8_t *src, float *dst, int n, int c, int h, int w, const float *mean,
		     const float *std, int par)
{
	size_t hw = (size_t)h * w;

#pragma omp parallel for schedule(static) if (par)
	for (int i = 0; i < n; i++)
		for (int ch = 0; ch < c; ch++) {
			const uint8_t *in = src + (size_t)i * hw * c + ch;
			float *out = dst + ((size_t)i * c + ch) * hw;
			for (size_t p = 0; p < hw; p++)
				out[p] = ((float)in[p * c] / 255.0f - mean[ch]) / std[ch];
		}
}

void be_ref_relu_fwd(const float *x, float *y, size_t n, int par)
{
#pragma omp parallel for simd schedule(static) if (par)
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* dy is read whatever the mask: a load under the condition kept gcc from vectorizing the loop
 * (no masked loads below AVX), and the branch it made instead mispredicted on about half the
 * elements (a 784-512-512-10 MLP's step spent 5% of its time here on an AMD EPYC). */
void be_ref_relu_bwd(const float *y, const float *dy, float *dx, size_t n, float beta, int par)
{
	if (beta == 0.0f) {
#pragma omp parallel for simd schedule(static) if (par)
		for (size_t i = 0; i < n; i++) {
			float d = dy[i];
			dx[i] = y[i] > 0.0f ? d : 0.0f;
		}
	} else {
#pragma omp parallel for simd schedule(static) if (par)
		for (size_t i = 0; i < n; i++) {
			float d = dy[i];
			dx[i] = (y[i] > 0.0f ? d : 0.0f) + beta * dx[i];
		}
	}
}

void be_ref_add(const float *a, const float *b, float *y, size_t n, int par)
{
#pragma omp parallel for simd schedule(static) if (par)
	for (size_t i = 0; i < n; i++)
		y[i] = a[i] + b[i];
}

void be_ref_axpby(float alpha, const float *x, float beta, float *y, size_t n, int par)
{
	if (beta == 0.0f) {
#pragma omp parallel for simd schedule(static) if (par)
		for (size_t i = 0; i < n; i++)
			y[i] = alpha * x[i];
	} else {
#pragma omp parallel for simd schedule(static) if (par)
		for (size_t i = 0; i < n; i++)
			y[i] = alpha * x[i] + beta * y[i];
	}
}

void be_ref_scale(float *y, float beta, size_t n, int par)
{
#pragma omp parallel for simd schedule(static) if (par)
	for (size_t i = 0; i < n; i++)
		y[i] *= beta;
}

void be_ref_gap_fwd(const float *x, float *y, int n, int c, int hw, int par)
{
	long planes = (long)n * c;

#pragma omp parallel for schedule(static) if (par)
	for (long p = 0; p < planes; p++) {
		const float *xp = x + p * hw;
		double s = 0.0;
		for (int i = 0; i < hw; i++)
			s += xp[i];
		y[p] = (float)(s / hw);
	}
}

void be_ref_gap_bwd(const float *dy, float *dx, int n, int c, int hw, float beta, int par)
{
	long planes = (long)n * c;

#pragma omp parallel for schedule(static) if (par)
	for (long p = 0; p < planes; p++) {
		float g = dy[p] / (float)hw;
		float *dxp = dx + p * hw;
		for (int i = 0; i < hw; i++)
			dxp[i] = beta == 0.0f ? g : g + beta * dxp[i];
	}
}

/* Blocks of a fixed size, summed in order: the result is the same for any thread count. */
#define SUMSQ_BLOCK 8192

double be_ref_sumsq(const float *x, size_t n, int par)
{
	size_t nb = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
	double partial[256];
	double total = 0.0;

	/* Chunks of at most 256 blocks keep the partials on the stack. */
	for (size_t b0 = 0; b0 < nb; b0 += 256) {
		size_t cnt = nb - b0 < 256 ? nb - b0 : 256;
#pragma omp parallel for schedule(static) if (par)
		for (size_t b = 0; b < cnt; b++) {
			size_t lo = (b0 + b) * SUMSQ_BLOCK;
			size_t hi = lo + SUMSQ_BLOCK < n ? lo + SUMSQ_BLOCK : n;
			double s = 0.0;
			for (size_t i = lo; i < hi; i++)
				s += (double)x[i] * x[i];
			partial[b] = s;
		}
		for (size_t b = 0; b < cnt; b++)
			total += partial[b];
	}
	return total;
}

int be_ref_xent(struct backend *be, const float *logits, const int32_t *labels, int n, int classes,
		float smoothing, float scale, float *loss, int *correct, float *dlogits, int par)
{
	double *row_loss = NULL;
	int *row_correct = NULL;
	double total = 0.0;
	int hits = 0;
	int rv = -1;

	if (n <= 0 || classes <= 0 || !(smoothing >= 0.0f && smoothing <= 1.0f)) {
		be_errf(be,
			"xent(n=%d classes=%d smoothing=%g): n and classes must be positive, "
			"smoothing in [0, 1]",
			n, classes, smoothing);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		if (labels[i] < 0 || labels[i] >= classes) {
			be_errf(be,
				"xent(n=%d classes=%d): label %d of sample %d is outside [0, %d)",
				n, classes, (int)labels[i], i, classes);
			goto out;
		}
	}
	row_loss = malloc(sizeof(*row_loss) * n);
	row_correct = malloc(sizeof(*row_correct) * n);
	if (!row_loss || !row_correct) {
		be_errf(be, "xent(n=%d classes=%d): out of memory", n, classes);
		goto out;
	}

	/* PyTorch: loss_i = (1-s) * -log p[y_i] + s/C * sum_j -log p_j, averaged over the batch;
	 * dloss/dlogit_ij = (p_ij - (1-s)[j == y_i] - s/C) / n. */
#pragma omp parallel for schedule(static) if (par)
	for (int i = 0; i < n; i++) {
		const float *l = logits + (size_t)i * classes;
		int arg = 0;
		for (int j = 1; j < classes; j++)
			if (l[j] > l[arg])
				arg = j;
		double m = l[arg], se = 0.0, sum_logp = 0.0;
		for (int j = 0; j < classes; j++)
			se += exp((double)l[j] - m);
		double lse = m + log(se);
		for (int j = 0; j < classes; j++)
			sum_logp += (double)l[j] - lse;
		double nll = lse - l[labels[i]];
		row_loss[i] = (1.0 - smoothing) * nll - smoothing / classes * sum_logp;
		row_correct[i] = arg == labels[i];
		if (dlogits) {
			float *d = dlogits + (size_t)i * classes;
			double g = (double)scale / n;
			for (int j = 0; j < classes; j++) {
				double t =
				    smoothing / classes + (j == labels[i] ? 1.0 - smoothing : 0.0);
				d[j] = (float)((exp((double)l[j] - lse) - t) * g);
			}
		}
	}
	for (int i = 0; i < n; i++) {
		total += row_loss[i];
		hits += row_correct[i];
	}
	*loss = (float)(total / n);
	*correct = hits;
	rv = 0;
out:
	free(row_loss);
	free(row_correct);
	return rv;
}

void be_ref_conv_fwd(const struct be_conv_desc *d, const float *x, const float *wgt,
		     const float *bias, float *y, int par)
{
	long planes = (long)d->n * d->k;

#pragma omp parallel for schedule(static) if (par)
	for (long p = 0; p < planes; p++) {
		int n = p / d->k, k = p % d->k;
		float *yp = y + p * d->oh * d->ow;
		for (int oy = 0; oy < d->oh; oy++) {
			for (int ox = 0; ox < d->ow; ox++) {
				double s = d->has_bias ? bias[k] : 0.0;
				for (int c = 0; c < d->c; c++) {
					const float *xp = x + ((size_t)n * d->c + c) * d->h * d->w;
					const float *wp =
					    wgt + ((size_t)k * d->c + c) * d->kh * d->kw;
					for (int i = 0; i < d->kh; i++) {
						int iy = oy * d->stride - d->pad + i;
						if (iy < 0 || iy >= d->h)
							continue;
						for (int j = 0; j < d->kw; j++) {
							int ix = ox * d->stride - d->pad + j;
							if (ix < 0 || ix >= d->w)
								continue;
							s += (double)xp[iy * d->w + ix] *
							     wp[i * d->kw + j];
						}
					}
				}
				yp[oy * d->ow + ox] = (float)s;
			}
		}
	}
}

void be_ref_conv_bwd_data(const struct be_conv_desc *d, const float *dy, const float *wgt,
			  float *dx, float beta, int par)
{
	long planes = (long)d->n * d->c;

	/* Gather form: every input pixel sums the outputs whose window covers it. */
#pragma omp parallel for schedule(static) if (par)
	for (long p = 0; p < planes; p++) {
		int n = p / d->c, c = p % d->c;
		float *dxp = dx + p * d->h * d->w;
		for (int iy = 0; iy < d->h; iy++) {
			for (int ix = 0; ix < d->w; ix++) {
				double s = 0.0;
				for (int k = 0; k < d->k; k++) {
					const float *dyp =
					    dy + ((size_t)n * d->k + k) * d->oh * d->ow;
					const float *wp =
					    wgt + ((size_t)k * d->c + c) * d->kh * d->kw;
					for (int i = 0; i < d->kh; i++) {
						int ty = iy + d->pad - i;
						if (ty < 0 || ty % d->stride ||
						    ty / d->stride >= d->oh)
							continue;
						for (int j = 0; j < d->kw; j++) {
							int tx = ix + d->pad - j;
							if (tx < 0 || tx % d->stride ||
							    tx / d->stride >= d->ow)
								continue;
							s += (double)dyp[ty / d->stride * d->ow +
									 tx / d->stride] *
							     wp[i * d->kw + j];
						}
					}
				}
				float *o = &dxp[iy * d->w + ix];
				*o = blend(s, beta, *o);
			}
		}
	}
}

void be_ref_conv_bwd_weights(const struct be_conv_desc *d, const float *x, const float *dy,
			     float *dwgt, float *dbias, float beta, int par)
{
	long taps = (long)d->k * d->c * d->kh * d->kw;

#pragma omp parallel for schedule(static) if (par)
	for (long t = 0; t < taps; t++) {
		int j = t % d->kw, i = t / d->kw % d->kh;
		int c = t / ((long)d->kw * d->kh) % d->c, k = t / ((long)d->kw * d->kh * d->c);
		double s = 0.0;
		for (int n = 0; n < d->n; n++) {
			const float *xp = x + ((size_t)n * d->c + c) * d->h * d->w;
			const float *dyp = dy + ((size_t)n * d->k + k) * d->oh * d->ow;
			for (int oy = 0; oy < d->oh; oy++) {
				int iy = oy * d->stride - d->pad + i;
				if (iy < 0 || iy >= d->h)
					continue;
				for (int ox = 0; ox < d->ow; ox++) {
					int ix = ox * d->stride - d->pad + j;
					if (ix < 0 || ix >= d->w)
						continue;
					s += (double)dyp[oy * d->ow + ox] * xp[iy * d->w + ix];
				}
			}
		}
		dwgt[t] = blend(s, beta, dwgt[t]);
	}
	if (!d->has_bias)
		return;
#pragma omp parallel for schedule(static) if (par)
	for (int k = 0; k < d->k; k++) {
		double s = 0.0;
		for (int n = 0; n < d->n; n++) {
			const float *dyp = dy + ((size_t)n * d->k + k) * d->oh * d->ow;
			for (int o = 0; o < d->oh * d->ow; o++)
				s += dyp[o];
		}
		dbias[k] = blend(s, beta, dbias[k]);
	}
}

/* Index (within the input plane) of the window's first maximum in scan order, with PyTorch's
 * rule `if (val > maxval || isnan(val))` (so a NaN wins). The window is clipped to the input:
 * padding is -inf and never wins, since pad <= kernel / 2 leaves every window a real pixel. */
static int window_argmax(const struct be_pool_desc *d, const float *xp, int oy, int ox)
{
	int y0 = oy * d->stride - d->pad, x0 = ox * d->stride - d->pad;
	int y1 = y0 + d->kh < d->h ? y0 + d->kh : d->h, x1 = x0 + d->kw < d->w ? x0 + d->kw : d->w;
	int best = (y0 > 0 ? y0 : 0) * d->w + (x0 > 0 ? x0 : 0);
	float m = xp[best];

	/* Branch-free: random data makes `v > m` unpredictable. */
	for (int iy = y0 > 0 ? y0 : 0; iy < y1; iy++) {
		for (int ix = x0 > 0 ? x0 : 0; ix < x1; ix++) {
			float v = xp[iy * d->w + ix];
			int take = v > m || v != v;
			best = take ? iy * d->w + ix : best;
			m = take ? v : m;
		}
	}
	return best;
}

void be_ref_pool_fwd(const struct be_pool_desc *d, const float *x, float *y, int par)
{
	long planes = (long)d->n * d->c;

#pragma omp parallel for schedule(static) if (par)
	for (long p = 0; p < planes; p++) {
		const float *xp = x + p * d->h * d->w;
		float *yp = y + p * d->oh * d->ow;
		for (int oy = 0; oy < d->oh; oy++) {
			for (int ox = 0; ox < d->ow; ox++) {
				if (d->kind == BE_POOL_MAX) {
					yp[oy * d->ow + ox] = xp[window_argmax(d, xp, oy, ox)];
					continue;
				}
				double s = 0.0;
				for (int i = 0; i < d->kh; i++) {
					int iy = oy * d->stride - d->pad + i;
					for (int j = 0; j < d->kw; j++) {
						int ix = ox * d->stride - d->pad + j;
						if (iy >= 0 && iy < d->h && ix >= 0 && ix < d->w)
							s += xp[iy * d->w + ix];
					}
				}
				yp[oy * d->ow + ox] = (float)(s / (d->kh * d->kw));
			}
		}
	}
}

void be_ref_pool_bwd(const struct be_pool_desc *d, const float *x, const float *dy, float *dx,
		     float beta, int par)
{
	long planes = (long)d->n * d->c;
	int hw = d->h * d->w;

	/* Scatter form: windows overlap when stride < kernel, so each plane is first scaled by
	 * beta (or cleared), then every output adds its share. Planes are independent. */
#pragma omp parallel for schedule(static) if (par)
	for (long p = 0; p < planes; p++) {
		const float *xp = x + p * hw;
		const float *dyp = dy + p * d->oh * d->ow;
		float *dxp = dx + p * hw;
		for (int i = 0; i < hw; i++)
			dxp[i] = beta == 0.0f ? 0.0f : beta * dxp[i];
		for (int oy = 0; oy < d->oh; oy++) {
			for (int ox = 0; ox < d->ow; ox++) {
				float g = dyp[oy * d->ow + ox];
				if (d->kind == BE_POOL_MAX) {
					dxp[window_argmax(d, xp, oy, ox)] += g;
					continue;
				}
				g /= (float)(d->kh * d->kw);
				for (int i = 0; i < d->kh; i++) {
					int iy = oy * d->stride - d->pad + i;
					for (int j = 0; j < d->kw; j++) {
						int ix = ox * d->stride - d->pad + j;
						if (iy >= 0 && iy < d->h && ix >= 0 && ix < d->w)
							dxp[iy * d->w + ix] += g;
					}
				}
			}
		}
	}
}

/* ---------------------------------------------------------------------------------------
 * Batch norm, PyTorch's training and inference formulas, per channel in double. */

static void bn_channel_stats(const struct be_bn_desc *d, const float *x, int c, double *mean,
			     double *var)
{
	size_t hw = (size_t)d->h * d->w;
	double m = (double)d->n * hw, s = 0.0, ss = 0.0;

	for (int n = 0; n < d->n; n++) {
		const float *xp = x + ((size_t)n * d->c + c) * hw;
		for (size_t i = 0; i < hw; i++)
			s += xp[i];
	}
	*mean = s / m;
	for (int n = 0; n < d->n; n++) {
		const float *xp = x + ((size_t)n * d->c + c) * hw;
		for (size_t i = 0; i < hw; i++)
			ss += (xp[i] - *mean) * (xp[i] - *mean);
	}
	*var = ss / m;
}

/* With fuse_add, y = relu(float(bn) + z) rounded as the separate ops round: BN's float output,
 * a float add, then ReLU (so fusing changes no bit). */
static void bn_channel_apply(const struct be_bn_desc *d, const float *x, const float *z, float *y,
			     int c, double mean, double invstd, double gamma, double shift)
{
	size_t hw = (size_t)d->h * d->w;

	for (int n = 0; n < d->n; n++) {
		size_t off = ((size_t)n * d->c + c) * hw;
		for (size_t i = 0; i < hw; i++) {
			double v = (x[off + i] - mean) * invstd * gamma + shift;
			if (z) {
				float t = (float)v + z[off + i];
				y[off + i] = d->fuse_relu ? (t > 0.0f ? t : 0.0f) : t;
			} else {
				y[off + i] = (float)(d->fuse_relu && v < 0.0 ? 0.0 : v);
			}
		}
	}
}

static void ref_bn_fwd_train(const struct be_bn_desc *d, const float *x, const float *z,
			     const float *gamma, const float *beta_, float *y, float *save_mean,
			     float *save_invstd, float *running_mean, float *running_var,
			     float momentum, int par)
{
	double m = (double)d->n * d->h * d->w;

#pragma omp parallel for schedule(static) if (par)
	for (int c = 0; c < d->c; c++) {
		double mean, var;
		bn_channel_stats(d, x, c, &mean, &var);
		double invstd = 1.0 / sqrt(var + d->eps);
		bn_channel_apply(d, x, z, y, c, mean, invstd, gamma[c], beta_[c]);
		save_mean[c] = (float)mean;
		save_invstd[c] = (float)invstd;
		running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
		running_var[c] =
		    (float)((1.0 - momentum) * running_var[c] + momentum * var * m / (m - 1.0));
	}
}

static void ref_bn_fwd_infer(const struct be_bn_desc *d, const float *x, const float *z,
			     const float *gamma, const float *beta_, const float *running_mean,
			     const float *running_var, float *y, int par)
{
#pragma omp parallel for schedule(static) if (par)
	for (int c = 0; c < d->c; c++)
		bn_channel_apply(d, x, z, y, c, running_mean[c],
				 1.0 / sqrt((double)running_var[c] + d->eps), gamma[c], beta_[c]);
}

static void ref_bn_bwd(const struct be_bn_desc *d, const float *x, const float *y, const float *dy,
		       const float *gamma, const float *save_mean, const float *save_invstd,
		       float *dx, float *dz, float bz, float *dgamma, float *dbeta, float beta,
		       int par)
{
	size_t hw = (size_t)d->h * d->w;
	double m = (double)d->n * hw;

	/* dx = gamma * invstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy masked by relu. */
#pragma omp parallel for schedule(static) if (par)
	for (int c = 0; c < d->c; c++) {
		double mean = save_mean[c], invstd = save_invstd[c], sg = 0.0, sgx = 0.0;
		for (int n = 0; n < d->n; n++) {
			size_t off = ((size_t)n * d->c + c) * hw;
			for (size_t i = 0; i < hw; i++) {
				float g = d->fuse_relu && !(y[off + i] > 0.0f) ? 0.0f : dy[off + i];
				sg += g;
				sgx += g * (x[off + i] - mean) * invstd;
				if (dz) /* float, as the separate add's backward (axpby) */
					dz[off + i] = bz == 0.0f ? g : g + bz * dz[off + i];
			}
		}
		double k = gamma[c] * invstd;
		for (int n = 0; dx && n < d->n; n++) {
			size_t off = ((size_t)n * d->c + c) * hw;
			for (size_t i = 0; i < hw; i++) {
				double g = d->fuse_relu && !(y[off + i] > 0.0f) ? 0.0 : dy[off + i];
				double xhat = (x[off + i] - mean) * invstd;
				dx[off + i] =
				    blend(k * (g - sg / m - xhat * sgx / m), beta, dx[off + i]);
			}
		}
		dgamma[c] = blend(sgx, beta, dgamma[c]);
		dbeta[c] = blend(sg, beta, dbeta[c]);
	}
}

/* ---------------------------------------------------------------------------------------
 * The op table. */

struct ref_ctx {
	int par; /* 1: run the kernels on OpenMP threads */
};

enum ref_kind { REF_CONV, REF_BN, REF_POOL, REF_LINEAR };

/* This file's definition of the opaque op: the descriptor it was planned for. */
struct be_op {
	enum ref_kind kind;
	union {
		struct be_conv_desc conv;
		struct be_bn_desc bn;
		struct be_pool_desc pool;
		struct be_linear_desc linear;
	} d;
};

static int par_of(struct backend *be)
{
	return ((struct ref_ctx *)be->priv)->par;
}

void *be_host_op_alloc(struct backend *be, size_t bytes)
{
	void *p = be_host_alloc(bytes);

	if (!p)
		be_errf(be, "alloc(%zu bytes): %s", bytes, strerror(errno));
	return p;
}

void be_host_op_free(struct backend *be, void *p)
{
	(void)be;
	be_host_free(p);
}

int be_host_op_copy(struct backend *be, void *dst, const void *src, size_t bytes)
{
	(void)be;
	memcpy(dst, src, bytes);
	return 0;
}

static int ref_input_u8(struct backend *be, const uint8_t *src, float *dst, int n, int c, int h,
			int w, const float *mean, const float *std)
{
	if (n < 0 || c < 1 || c > 4 || h < 1 || w < 1)
		return be_errf(be, "input_u8(n=%d c=%d h=%d w=%d): bad shape (1..4 channels)", n, c,
			       h, w);
	be_ref_input_u8(src, dst, n, c, h, w, mean, std, par_of(be));
	return 0;
}

static int ref_fill(struct backend *be, float *x, float value, size_t n)
{
	be_ref_fill(x, value, n, par_of(be));
	return 0;
}

static int ref_sync(struct backend *be)
{
	(void)be;
	return 0;
}

static struct be_op *op_new(struct backend *be, enum ref_kind kind, const char *what)
{
	struct be_op *op = calloc(1, sizeof(*op));

	if (!op) {
		be_errf(be, "%s: out of memory", what);
		return NULL;
	}
	op->kind = kind;
	return op;
}

/* A mismatched op is a caller bug that would otherwise read out of bounds. */
static int op_is(struct backend *be, const struct be_op *op, enum ref_kind kind, const char *fn)
{
	if (op && op->kind == kind)
		return 1;
	be_errf(be, "%s: the op was not created by the matching *_create", fn);
	return 0;
}

static struct be_op *ref_conv_create(struct backend *be, struct be_conv_desc *d)
{
	struct be_op *op;

	if (be_conv_check(be, d) < 0 || !(op = op_new(be, REF_CONV, "conv_create")))
		return NULL;
	op->d.conv = *d;
	return op;
}

static int ref_conv_fwd(struct backend *be, struct be_op *op, const float *x, const float *wgt,
			const float *bias, float *y)
{
	char shape[160];

	if (!op_is(be, op, REF_CONV, "conv_fwd"))
		return -1;
	if (op->d.conv.has_bias && !bias)
		return be_errf(be, "conv_fwd(%s): the op has a bias but bias is NULL",
			       be_conv_str(&op->d.conv, shape, sizeof(shape)));
	be_ref_conv_fwd(&op->d.conv, x, wgt, bias, y, par_of(be));
	return 0;
}

static int ref_conv_bwd_data(struct backend *be, struct be_op *op, const float *dy,
			     const float *wgt, float *dx, float beta)
{
	if (!op_is(be, op, REF_CONV, "conv_bwd_data"))
		return -1;
	be_ref_conv_bwd_data(&op->d.conv, dy, wgt, dx, beta, par_of(be));
	return 0;
}

static int ref_conv_bwd_weights(struct backend *be, struct be_op *op, const float *x,
				const float *dy, float *dwgt, float *dbias, float beta)
{
	char s[160];

	if (!op_is(be, op, REF_CONV, "conv_bwd_weights"))
		return -1;
	if (op->d.conv.has_bias && !dbias)
		return be_errf(be, "conv_bwd_weights(%s): the op has a bias but dbias is NULL",
			       be_conv_str(&op->d.conv, s, sizeof(s)));
	be_ref_conv_bwd_weights(&op->d.conv, x, dy, dwgt, dbias, beta, par_of(be));
	return 0;
}

static struct be_op *ref_bn_create(struct backend *be, const struct be_bn_desc *d)
{
	struct be_op *op;

	if (be_bn_check(be, d) < 0 || !(op = op_new(be, REF_BN, "bn_create")))
		return NULL;
	op->d.bn = *d;
	return op;
}

static int ref_bn_fwd_train_op(struct backend *be, struct be_op *op, const float *x, const float *z,
			       const float *gamma, const float *beta_, float *y, float *save_mean,
			       float *save_invstd, float *running_mean, float *running_var,
			       float momentum)
{
	char s[160];

	if (!op_is(be, op, REF_BN, "bn_fwd_train") ||
	    be_bn_z_check(be, &op->d.bn, z, "bn_fwd_train") < 0)
		return -1;
	if ((long long)op->d.bn.n * op->d.bn.h * op->d.bn.w < 2)
		return be_errf(be,
			       "bn_fwd_train(%s): training needs more than one value per channel",
			       be_bn_str(&op->d.bn, s, sizeof(s)));
	ref_bn_fwd_train(&op->d.bn, x, z, gamma, beta_, y, save_mean, save_invstd, running_mean,
			 running_var, momentum, par_of(be));
	return 0;
}

static int ref_bn_fwd_infer_op(struct backend *be, struct be_op *op, const float *x, const float *z,
			       const float *gamma, const float *beta_, const float *running_mean,
			       const float *running_var, float *y)
{
	if (!op_is(be, op, REF_BN, "bn_fwd_infer") ||
	    be_bn_z_check(be, &op->d.bn, z, "bn_fwd_infer") < 0)
		return -1;
	ref_bn_fwd_infer(&op->d.bn, x, z, gamma, beta_, running_mean, running_var, y, par_of(be));
	return 0;
}

static int ref_bn_bwd_op(struct backend *be, struct be_op *op, const float *x, const float *y,
			 const float *dy, const float *gamma, const float *save_mean,
			 const float *save_invstd, float *dx, float *dz, float bz, float *dgamma,
			 float *dbeta, float beta)
{
	if (!op_is(be, op, REF_BN, "bn_bwd") || be_bn_z_check(be, &op->d.bn, dz, "bn_bwd") < 0)
		return -1;
	ref_bn_bwd(&op->d.bn, x, y, dy, gamma, save_mean, save_invstd, dx, dz, bz, dgamma, dbeta,
		   beta, par_of(be));
	return 0;
}

static struct be_op *ref_pool_create(struct backend *be, struct be_pool_desc *d)
{
	struct be_op *op;

	if (be_pool_check(be, d) < 0 || !(op = op_new(be, REF_POOL, "pool_create")))
		return NULL;
	op->d.pool = *d;
	return op;
}

static int ref_pool_fwd(struct backend *be, struct be_op *op, const float *x, float *y)
{
	if (!op_is(be, op, REF_POOL, "pool_fwd"))
		return -1;
	be_ref_pool_fwd(&op->d.pool, x, y, par_of(be));
	return 0;
}

static int ref_pool_bwd(struct backend *be, struct be_op *op, const float *x, const float *y,
			const float *dy, float *dx, float beta)
{
	(void)y;
	if (!op_is(be, op, REF_POOL, "pool_bwd"))
		return -1;
	be_ref_pool_bwd(&op->d.pool, x, dy, dx, beta, par_of(be));
	return 0;
}

static struct be_op *ref_linear_create(struct backend *be, const struct be_linear_desc *d)
{
	struct be_op *op;

	if (be_linear_check(be, d) < 0 || !(op = op_new(be, REF_LINEAR, "linear_create")))
		return NULL;
	op->d.linear = *d;
	return op;
}

static int ref_linear_fwd(struct backend *be, struct be_op *op, const float *x, const float *wgt,
			  const float *bias, float *y)
{
	char shape[160];

	if (!op_is(be, op, REF_LINEAR, "linear_fwd"))
		return -1;
	if (op->d.linear.has_bias && !bias)
		return be_errf(be, "linear_fwd(%s): the op has a bias but bias is NULL",
			       be_linear_str(&op->d.linear, shape, sizeof(shape)));
	const struct be_linear_desc *d = &op->d.linear;
	long outs = (long)d->n * d->out;
#pragma omp parallel for schedule(static) if (par_of(be))
	for (long t = 0; t < outs; t++) {
		const float *xr = x + t / d->out * d->in, *wr = wgt + t % d->out * d->in;
		double s = d->has_bias ? bias[t % d->out] : 0.0;
		for (int i = 0; i < d->in; i++)
			s += (double)xr[i] * wr[i];
		y[t] = (float)s;
	}
	return 0;
}

static int ref_linear_bwd_data(struct backend *be, struct be_op *op, const float *dy,
			       const float *wgt, float *dx, float beta)
{
	if (!op_is(be, op, REF_LINEAR, "linear_bwd_data"))
		return -1;
	const struct be_linear_desc *d = &op->d.linear;
	long ins = (long)d->n * d->in;
#pragma omp parallel for schedule(static) if (par_of(be))
	for (long t = 0; t < ins; t++) {
		long n = t / d->in, i = t % d->in;
		double s = 0.0;
		for (int o = 0; o < d->out; o++)
			s += (double)dy[n * d->out + o] * wgt[(size_t)o * d->in + i];
		dx[t] = blend(s, beta, dx[t]);
	}
	return 0;
}

static int ref_linear_bwd_weights(struct backend *be, struct be_op *op, const float *x,
				  const float *dy, float *dwgt, float *dbias, float beta)
{
	char shape[160];

	if (!op_is(be, op, REF_LINEAR, "linear_bwd_weights"))
		return -1;
	if (op->d.linear.has_bias && !dbias)
		return be_errf(be, "linear_bwd_weights(%s): the op has a bias but dbias is NULL",
			       be_linear_str(&op->d.linear, shape, sizeof(shape)));
	const struct be_linear_desc *d = &op->d.linear;
	long taps = (long)d->out * d->in;
#pragma omp parallel for schedule(static) if (par_of(be))
	for (long t = 0; t < taps; t++) {
		long o = t / d->in, i = t % d->in;
		double s = 0.0;
		for (int n = 0; n < d->n; n++)
			s += (double)dy[(size_t)n * d->out + o] * x[(size_t)n * d->in + i];
		dwgt[t] = blend(s, beta, dwgt[t]);
	}
	if (d->has_bias) {
		for (int o = 0; o < d->out; o++) {
			double s = 0.0;
			for (int n = 0; n < d->n; n++)
				s += dy[(size_t)n * d->out + o];
			dbias[o] = blend(s, beta, dbias[o]);
		}
	}
	return 0;
}

static void ref_op_destroy(struct backend *be, struct be_op *op)
{
	(void)be;
	free(op);
}

static int ref_relu_fwd(struct backend *be, const float *x, float *y, size_t n)
{
	be_ref_relu_fwd(x, y, n, par_of(be));
	return 0;
}

static int ref_relu_bwd(struct backend *be, const float *y, const float *dy, float *dx, size_t n,
			float beta)
{
	be_ref_relu_bwd(y, dy, dx, n, beta, par_of(be));
	return 0;
}

static int ref_add(struct backend *be, const float *a, const float *b, float *y, size_t n)
{
	be_ref_add(a, b, y, n, par_of(be));
	return 0;
}

static int ref_axpby(struct backend *be, float alpha, const float *x, float beta, float *y,
		     size_t n)
{
	be_ref_axpby(alpha, x, beta, y, n, par_of(be));
	return 0;
}

static int ref_gap_fwd(struct backend *be, const float *x, float *y, int n, int c, int hw)
{
	if (n <= 0 || c <= 0 || hw <= 0)
		return be_errf(be, "gap_fwd(n=%d c=%d hw=%d): sizes must be positive", n, c, hw);
	be_ref_gap_fwd(x, y, n, c, hw, par_of(be));
	return 0;
}

static int ref_gap_bwd(struct backend *be, const float *dy, float *dx, int n, int c, int hw,
		       float beta)
{
	if (n <= 0 || c <= 0 || hw <= 0)
		return be_errf(be, "gap_bwd(n=%d c=%d hw=%d): sizes must be positive", n, c, hw);
	be_ref_gap_bwd(dy, dx, n, c, hw, beta, par_of(be));
	return 0;
}

static int ref_xent(struct backend *be, const float *logits, const int32_t *labels, int n,
		    int classes, float smoothing, float scale, float *loss, int *correct,
		    float *dlogits)
{
	return be_ref_xent(be, logits, labels, n, classes, smoothing, scale, loss, correct, dlogits,
			   par_of(be));
}

static int ref_sumsq(struct backend *be, const float *x, size_t n, double *out)
{
	*out = be_ref_sumsq(x, n, par_of(be));
	return 0;
}

static void ref_destroy(struct backend *be)
{
	if (!be)
		return;
	free(be->priv);
	free(be);
}

#define REF_OPS_INIT                                                                               \
	.alloc = be_host_op_alloc, .free = be_host_op_free, .to_host = be_host_op_copy,            \
	.from_host = be_host_op_copy, .fill = ref_fill, .sync = ref_sync,                          \
	.conv_create = ref_conv_create, .conv_fwd = ref_conv_fwd,                                  \
	.conv_bwd_data = ref_conv_bwd_data, .conv_bwd_weights = ref_conv_bwd_weights,              \
	.bn_create = ref_bn_create, .bn_fwd_train = ref_bn_fwd_train_op,                           \
	.bn_fwd_infer = ref_bn_fwd_infer_op, .bn_bwd = ref_bn_bwd_op,                              \
	.pool_create = ref_pool_create, .pool_fwd = ref_pool_fwd, .pool_bwd = ref_pool_bwd,        \
	.linear_create = ref_linear_create, .linear_fwd = ref_linear_fwd,                          \
	.linear_bwd_data = ref_linear_bwd_data, .linear_bwd_weights = ref_linear_bwd_weights,      \
	.op_destroy = ref_op_destroy, .relu_fwd = ref_relu_fwd, .relu_bwd = ref_relu_bwd,          \
	.add = ref_add, .axpby = ref_axpby, .gap_fwd = ref_gap_fwd, .gap_bwd = ref_gap_bwd,        \
	.xent = ref_xent, .sumsq = ref_sumsq, .destroy = ref_destroy, .input_u8 = ref_input_u8

static const struct backend_ops ref_ops = {.name = "ref", REF_OPS_INIT};
static const struct backend_ops ref_parallel_ops = {.name = "cpu (no oneDNN)", REF_OPS_INIT};

static struct backend *ref_new(const struct backend_ops *ops, int par, int threads,
			       struct dp_error *err)
{
	struct backend *be;
	struct ref_ctx *ctx;

	if (threads < 0) {
		errprintf(err, "%s backend: threads must be 0 (the default) or more, not %d",
			  ops->name, threads);
		return NULL;
	}
	be = calloc(1, sizeof(*be));
	ctx = calloc(1, sizeof(*ctx));
	if (!be || !ctx) {
		errprintf(err, "%s backend: out of memory", ops->name);
		free(be);
		free(ctx);
		return NULL;
	}
	ctx->par = par;
	be->ops = ops;
	be->priv = ctx;
	be->act_dtype = BE_F32;
	be->act_size = sizeof(float);
	be->threads = 1;
#ifdef _OPENMP
	if (par && threads > 0)
		omp_set_num_threads(threads);
	if (par)
		be->threads = omp_get_max_threads();
#endif
	return be;
}

struct backend *be_ref_create(struct dp_error *err)
{
	return ref_new(&ref_ops, 0, 0, err);
}

struct backend *be_ref_create_parallel(int threads, struct dp_error *err)
{
	return ref_new(&ref_parallel_ops, 1, threads, err);
}
