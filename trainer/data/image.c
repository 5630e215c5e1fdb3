/* image.c — one encoded image to one training sample: the crop's geometry (image.h gives the
 * draws), a JPEG decoded at the smallest DCT scale that covers the crop and only over the
 * crop's rows and columns (libjpeg's scale_num/scale_denom, jpeg_crop_scanline,
 * jpeg_skip_scanlines), a PNG through libpng's simplified API, PIL's antialiased bilinear
 * resampling in its fixed point, then flip and ToTensor/Normalize. Owns only pixels: which
 * file, sample and epoch come from the caller. */
#include "trainer/data/image.h"
#include "trainer/data/mix.h"
#include "common/error.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#define PRECISION_BITS (32 - 8 - 2) /* PIL's Resample.c, 8-bit images */

int imtf_init(struct imtf *t, const struct imtf_spec *spec, struct dp_error *err)
{
	const struct imtf_spec *s = spec;
	bool any_std = false;

	memset(t, 0, sizeof(*t));
	t->spec = *spec;
	if (s->channels != 1 && s->channels != 3)
		return errprintf(err,
				 "image transform: %d channels; images are decoded as RGB (3) "
				 "or gray (1)",
				 s->channels);
	if (s->size < 1 || s->size > 8192)
		return errprintf(err, "image transform: output size %d is outside 1..8192",
				 s->size);
	if (s->mode == IMTF_EVAL && (s->resize < s->size || s->resize > 16384))
		return errprintf(err,
				 "image transform: resize %d must be at least the crop size %d "
				 "(and at most 16384)",
				 s->resize, s->size);
	if (s->mode == IMTF_TRAIN &&
	    !(s->scale[0] > 0 && s->scale[0] <= s->scale[1] && s->scale[1] <= 1))
		return errprintf(err,
				 "image transform: scale [%g, %g] must satisfy 0 < min <= max "
				 "<= 1",
				 s->scale[0], s->scale[1]);
	if (s->mode == IMTF_TRAIN &&
	    !(s->ratio[0] > 0 && s->ratio[0] <= s->ratio[1] && s->ratio[1] < 1e6))
		return errprintf(err, "image transform: ratio [%g, %g] must satisfy 0 < min <= max",
				 s->ratio[0], s->ratio[1]);
	if (!(s->flip_p >= 0 && s->flip_p <= 1))
		return errprintf(err, "image transform: flip probability %g is outside [0, 1]",
				 s->flip_p);
	for (int c = 0; c < s->channels; c++)
		any_std |= s->std[c] != 0;
	for (int c = 0; c < s->channels; c++) {
		float mean = any_std ? s->mean[c] : 0.0f, std = any_std ? s->std[c] : 1.0f;

		if (!(std > 0))
			return errprintf(err,
					 "image transform: std[%d] is %g; every channel's std "
					 "must be > 0",
					 c, (double)std);
		t->mean[c] = mean;
		t->std[c] = std;
		for (int v = 0; v < 256; v++)
			t->lut[c][v] = ((float)v / 255.0f - mean) / std;
	}
	return 0;
}

size_t imtf_out_elems(const struct imtf *t)
{
	return (size_t)t->spec.channels * (size_t)t->spec.size * (size_t)t->spec.size;
}

static double unit(uint64_t key, int k)
{
	return (double)(mix64(key + (uint64_t)(k + 1) * GOLDEN) >> 11) * 0x1.0p-53;
}

/* Python's round(): half to even (the default rounding mode). */
static int round_even(double x)
{
	return (int)nearbyint(x);
}

static void draw_train(const struct imtf_spec *s, uint64_t key, int W, int H, struct imtf_crop *c)
{
	double area = (double)W * H, lr0 = log(s->ratio[0]), lr1 = log(s->ratio[1]);
	double in_ratio;

	for (int a = 0; a < 10; a++) {
		double target =
		    area * (s->scale[0] + unit(key, 4 * a) * (s->scale[1] - s->scale[0]));
		double aspect = exp(lr0 + unit(key, 4 * a + 1) * (lr1 - lr0));
		int w = round_even(sqrt(target * aspect)), h = round_even(sqrt(target / aspect));

		if (w > 0 && w <= W && h > 0 && h <= H) {
			c->h = h;
			c->w = w;
			c->top = (int)below(mix64(key + (uint64_t)(4 * a + 3) * GOLDEN),
					    (uint64_t)(H - h + 1));
			c->left = (int)below(mix64(key + (uint64_t)(4 * a + 4) * GOLDEN),
					     (uint64_t)(W - w + 1));
			return;
		}
	}
	in_ratio = (double)W / H;
	c->w = W;
	c->h = H;
	if (in_ratio < s->ratio[0])
		c->h = round_even(W / s->ratio[0]);
	else if (in_ratio > s->ratio[1])
		c->w = round_even(H * s->ratio[1]);
	if (c->h < 1)
		c->h = 1;
	if (c->w < 1)
		c->w = 1;
	c->top = (H - c->h) / 2;
	c->left = (W - c->w) / 2;
}

void imtf_draw(const struct imtf *t, int64_t epoch, size_t index, int W, int H, struct imtf_crop *c)
{
	const struct imtf_spec *s = &t->spec;
	uint64_t key = mix64(mix64(mix64(s->seed ^ 0x696d616765746672ull) ^ (uint64_t)epoch) ^
			     (uint64_t)index);

	memset(c, 0, sizeof(*c));
	if (s->mode == IMTF_TRAIN) {
		draw_train(s, key, W, H, c);
		c->flip = unit(key, 40) < s->flip_p;
		return;
	}
	/* Resize(resize): the shorter side to `resize`, the longer floor(resize * L / S). */
	if (W <= H) {
		c->rw = s->resize;
		c->rh = (int)((double)s->resize * H / W);
	} else {
		c->rh = s->resize;
		c->rw = (int)((double)s->resize * W / H);
	}
	c->h = c->w = s->size;
	c->top = round_even((c->rh - s->size) / 2.0);
	c->left = round_even((c->rw - s->size) / 2.0);
}

/* ---- resampling: PIL's precompute_coeffs and 8-bit passes ---- */

/* One axis: output pixels out_off .. out_off+n-1 of an out_total-pixel resize of the input
 * range [in0, in0 + in_len) (the input's pixels lo .. hi-1 exist). coef holds ksize taps per
 * output, bounds[2x] the first input pixel, bounds[2x+1] how many. */
struct axis {
	int n, ksize;
	int *bounds;
	int32_t *coef;
	int first, last; /* input pixels used: [first, last) */
};

static int axis_taps(double in_len, int out_total)
{
	double fs = in_len / out_total;

	if (fs < 1.0)
		fs = 1.0;
	return (int)ceil(fs) * 2 + 1;
}

static void axis_coeffs(struct axis *a, double in0, double in_len, int lo, int hi, int out_total,
			int out_off, double *tmp)
{
	double scale = in_len / out_total, fs = scale < 1.0 ? 1.0 : scale, support = fs;
	double ss = 1.0 / fs;

	a->first = hi;
	a->last = lo;
	for (int x = 0; x < a->n; x++) {
		double center = in0 + (x + out_off + 0.5) * scale, ww = 0;
		int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
		int32_t *k = a->coef + (size_t)x * a->ksize;

		if (xmin < lo)
			xmin = lo;
		if (xmax > hi)
			xmax = hi;
		if (xmax <= xmin) { /* nothing in range: the nearest pixel */
			xmin = center < lo ? lo : hi - 1;
			xmax = xmin + 1;
		}
		xmax -= xmin;
		if (xmax > a->ksize)
			xmax = a->ksize;
		for (int i = 0; i < xmax; i++) {
			double d = fabs((i + xmin - center + 0.5) * ss);
			tmp[i] = d < 1.0 ? 1.0 - d : 0.0;
			ww += tmp[i];
		}
		for (int i = 0; i < a->ksize; i++) {
			double w = i < xmax ? (ww != 0.0 ? tmp[i] / ww : 0.0) : 0.0;
			k[i] = (int32_t)(w < 0 ? -0.5 + w * (1 << PRECISION_BITS)
					       : 0.5 + w * (1 << PRECISION_BITS));
		}
		if (ww == 0.0)
			k[0] = 1 << PRECISION_BITS;
		a->bounds[2 * x] = xmin;
		a->bounds[2 * x + 1] = xmax;
		if (xmin < a->first)
			a->first = xmin;
		if (xmin + xmax > a->last)
			a->last = xmin + xmax;
	}
}

static inline uint8_t clip8(int32_t v)
{
	if (v >= (255 << PRECISION_BITS))
		return 255;
	if (v <= 0)
		return 0;
	return (uint8_t)(v >> PRECISION_BITS);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* The RGB horizontal pass with SSE4.1: a pixel's three bytes widened to 32-bit lanes, one
 * multiply-add per tap for all three channels (the same integer sums as the plain loop). Reads
 * one byte past each pixel: the decode buffers have slack for it. */
__attribute__((target("sse4.1"))) static void
pass_h_rgb_sse41(const struct axis *a, const uint8_t *src, int rows, int sw, int sx0, uint8_t *dst)
{
	const __m128i half = _mm_set1_epi32(1 << (PRECISION_BITS - 1));

	for (int y = 0; y < rows; y++) {
		const uint8_t *in = src + (size_t)y * sw * 3;
		uint8_t *out = dst + (size_t)y * a->n * 3;

		for (int x = 0; x < a->n; x++) {
			const int32_t *k = a->coef + (size_t)x * a->ksize;
			const uint8_t *p = in + (size_t)(a->bounds[2 * x] - sx0) * 3;
			int m = a->bounds[2 * x + 1];
			__m128i acc = half;
			int32_t v[4];

			for (int i = 0; i < m; i++, p += 3) {
				int32_t px;
				memcpy(&px, p, 4);
				acc = _mm_add_epi32(
				    acc, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(px)),
							 _mm_set1_epi32(k[i])));
			}
			_mm_storeu_si128((__m128i *)v, acc);
			out[3 * x] = clip8(v[0]);
			out[3 * x + 1] = clip8(v[1]);
			out[3 * x + 2] = clip8(v[2]);
		}
	}
}
#define HAVE_PASS_H_SSE41 1
#endif

/* Horizontal pass: rows of src (width sw, origin column sx0), the output's columns. */
static void pass_h(const struct axis *a, const uint8_t *src, int rows, int sw, int sx0, int C,
		   uint8_t *dst)
{
#ifdef HAVE_PASS_H_SSE41
	if (C == 3 && __builtin_cpu_supports("sse4.1")) {
		pass_h_rgb_sse41(a, src, rows, sw, sx0, dst);
		return;
	}
#endif
	for (int y = 0; y < rows; y++) {
		const uint8_t *in = src + (size_t)y * sw * C;
		uint8_t *out = dst + (size_t)y * a->n * C;

		for (int x = 0; x < a->n; x++) {
			const int32_t *k = a->coef + (size_t)x * a->ksize;
			const uint8_t *p = in + (size_t)(a->bounds[2 * x] - sx0) * C;
			int m = a->bounds[2 * x + 1];

			if (C == 3) {
				int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
				for (int i = 0; i < m; i++, p += 3) {
					s0 += p[0] * k[i];
					s1 += p[1] * k[i];
					s2 += p[2] * k[i];
				}
				out[3 * x] = clip8(s0);
				out[3 * x + 1] = clip8(s1);
				out[3 * x + 2] = clip8(s2);
			} else {
				int32_t s0 = 1 << (PRECISION_BITS - 1);
				for (int i = 0; i < m; i++)
					s0 += p[i] * k[i];
				out[x] = clip8(s0);
			}
		}
	}
}

/* Vertical pass: src rows start at input row sy0, each `width` pixels. Row by row into an
 * accumulator (acc: width * C), so the inner loops run along contiguous bytes and vectorize;
 * the sums are PIL's, in the same order per output value. */
static void pass_v(const struct axis *a, const uint8_t *src, int width, int sy0, int C,
		   int32_t *acc, uint8_t *dst)
{
	size_t rowb = (size_t)width * C;

	for (int y = 0; y < a->n; y++) {
		const int32_t *k = a->coef + (size_t)y * a->ksize;
		const uint8_t *base = src + (size_t)(a->bounds[2 * y] - sy0) * rowb;
		int m = a->bounds[2 * y + 1];
		uint8_t *out = dst + (size_t)y * rowb;

		for (size_t x = 0; x < rowb; x++)
			acc[x] = 1 << (PRECISION_BITS - 1);
		for (int i = 0; i < m; i++) {
			const uint8_t *in = base + (size_t)i * rowb;
			int32_t ki = k[i];
			for (size_t x = 0; x < rowb; x++)
				acc[x] += in[x] * ki;
		}
		for (size_t x = 0; x < rowb; x++)
			out[x] = clip8(acc[x]);
	}
}

static int grow(void **p, size_t *cap, size_t need, struct dp_error *err)
{
	void *q;

	if (need <= *cap)
		return 0;
	q = realloc(*p, need);
	if (!q)
		return errprintf(err, "out of memory for %zu bytes of image buffers", need);
	*p = q;
	*cap = need;
	return 0;
}

/* The plan for one sample: both axes' coefficients in the decoded image's coordinates. */
struct plan {
	struct axis ax, ay;
	int C;
};

/* Decoded image of Ws x Hs (the full image scaled by Ws/W, Hs/H): the axes for the crop. */
static int plan_axes(const struct imtf *t, const struct imtf_crop *c, int W, int H, int Ws, int Hs,
		     struct plan *p, struct imtf_scratch *s, struct dp_error *err)
{
	int n = t->spec.size;
	double sx = (double)Ws / W, sy = (double)Hs / H;
	double x0, xl, y0, yl;
	int xlo, xhi, ylo, yhi, xtot, ytot, xoff, yoff;
	double tmp[1024];

	if (t->spec.mode == IMTF_TRAIN) {
		x0 = c->left * sx, xl = c->w * sx, y0 = c->top * sy, yl = c->h * sy;
		xlo = (int)floor(x0 + 1e-9), xhi = (int)ceil(x0 + xl - 1e-9);
		ylo = (int)floor(y0 + 1e-9), yhi = (int)ceil(y0 + yl - 1e-9);
		xhi = xhi > Ws ? Ws : xhi < xlo + 1 ? xlo + 1 : xhi;
		yhi = yhi > Hs ? Hs : yhi < ylo + 1 ? ylo + 1 : yhi;
		xtot = ytot = n, xoff = yoff = 0;
	} else {
		x0 = 0, xl = Ws, y0 = 0, yl = Hs, xlo = 0, xhi = Ws, ylo = 0, yhi = Hs;
		xtot = c->rw, ytot = c->rh, xoff = c->left, yoff = c->top;
	}
	p->ax.n = p->ay.n = n;
	p->ax.ksize = axis_taps(xl, xtot);
	p->ay.ksize = axis_taps(yl, ytot);
	if (p->ax.ksize > 1024 || p->ay.ksize > 1024)
		return errprintf(err, "%dx%d is too large a crop for a %d-pixel output", c->w, c->h,
				 n);
	size_t ncoef = (size_t)n * (p->ax.ksize + p->ay.ksize);
	size_t need = ncoef * sizeof(int32_t) + (size_t)4 * n * sizeof(int);
	if (grow((void **)&s->coef, &s->coef_cap, need, err) < 0)
		return -1;
	p->ax.coef = s->coef;
	p->ay.coef = s->coef + (size_t)n * p->ax.ksize;
	p->ax.bounds = (int *)(s->coef + ncoef);
	p->ay.bounds = p->ax.bounds + 2 * n;
	axis_coeffs(&p->ax, x0, xl, xlo, xhi, xtot, xoff, tmp);
	axis_coeffs(&p->ay, y0, yl, ylo, yhi, ytot, yoff, tmp);
	return 0;
}

/* Resample the decoded window (columns [wx0, wx0+ww), rows [ay.first, ay.last)) to s->out. */
static int resample(const struct plan *p, const uint8_t *win, int ww, int wx0,
		    struct imtf_scratch *s, struct dp_error *err)
{
	int n = p->ax.n, rows = p->ay.last - p->ay.first;

	size_t tmp = (size_t)rows * n * p->C, acc = (size_t)n * p->C * sizeof(int32_t);

	if (grow((void **)&s->tmp, &s->tmp_cap, tmp + acc + 16, err) < 0 ||
	    grow((void **)&s->out, &s->out_cap, (size_t)n * n * p->C, err) < 0)
		return -1;
	pass_h(&p->ax, win, rows, ww, wx0, p->C, s->tmp);
	pass_v(&p->ay, s->tmp, n, p->ay.first, p->C,
	       (int32_t *)(s->tmp + ((tmp + 15) & ~(size_t)15)), s->out);
	return 0;
}

/* ---- JPEG ---- */

struct jerr {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	bool warned;
	char msg[JMSG_LENGTH_MAX];
};

static void jerr_exit(j_common_ptr cinfo)
{
	struct jerr *e = (struct jerr *)cinfo->err;

	e->pub.format_message(cinfo, e->msg);
	longjmp(e->jb, 1);
}

static void jerr_emit(j_common_ptr cinfo, int level)
{
	struct jerr *e = (struct jerr *)cinfo->err;

	if (level < 0 && !e->warned) { /* corrupt data: libjpeg goes on; keep the first */
		e->pub.format_message(cinfo, e->msg);
		e->warned = true;
	}
}

/* A decompressor whose errors longjmp to je->jb and whose first warning is kept. */
static void jerr_init(struct jpeg_decompress_struct *d, struct jerr *je)
{
	memset(je, 0, sizeof(*je));
	d->err = jpeg_std_error(&je->pub);
	je->pub.error_exit = jerr_exit;
	je->pub.emit_message = jerr_emit;
	jpeg_create_decompress(d);
}

static bool is_jpeg(const uint8_t *b, size_t n)
{
	return n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff;
}

static bool is_png(const uint8_t *b, size_t n)
{
	return n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0;
}

/* The smallest N/8 (N = 1, 2, 4, 8) whose scaled image still has `need` pixels along `have`.
 * Only those: libjpeg-turbo has SIMD code for their IDCTs, and its plain-C 6x6, 7x7 (12x12,
 * 14x14 for 4:2:0 chroma) cost more than decoding at full size with SIMD (measured: 500x375
 * photos train 10% slower with every N/8 than with powers of two only). */
static int dct_num(double have, double need)
{
	for (int num = 1; num < 8; num *= 2)
		if (floor(have * num / 8.0) >= need)
			return num;
	return 8;
}

/* PIL's convert("L"): ITU-R 601-2 luma in 16-bit fixed point (the L24 macro of Convert.c),
 * the weights summing to 65536, so that a grey pixel keeps its level. */
static inline uint8_t luma(int r, int g, int b)
{
	return (uint8_t)((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

/* PIL's rounded a * b / 255 (MULDIV255). */
static int muldiv255(int a, int b)
{
	int t = a * b + 128;
	return ((t >> 8) + t) >> 8;
}

/* CMYK (or YCCK) to RGB or gray exactly as PIL reads and converts it: Photoshop's files (an
 * Adobe marker) store the values inverted; R = (255 - K) - C (255 - K) / 255, rounded. */
static void cmyk_row(uint8_t *row, int w, int C, bool adobe)
{
	for (int x = 0; x < w; x++) {
		const uint8_t *q = row + 4 * x;
		int c = adobe ? 255 - q[0] : q[0], m = adobe ? 255 - q[1] : q[1];
		int y = adobe ? 255 - q[2] : q[2], nk = 255 - (adobe ? 255 - q[3] : q[3]);
		int r = nk - muldiv255(c, nk), g = nk - muldiv255(m, nk), b = nk - muldiv255(y, nk);

		if (C == 3) {
			row[3 * x] = (uint8_t)r, row[3 * x + 1] = (uint8_t)g;
			row[3 * x + 2] = (uint8_t)b;
		} else {
			row[x] = luma(r, g, b);
		}
	}
}

/* w pixels of pc bytes (the first 1 grey or 3 RGB; alpha after them dropped) to C bytes, as
 * PIL's convert("RGB") (grey repeated) and then convert("L") do. dst may be src where C <= pc. */
static void pixels_to(const uint8_t *src, int pc, bool colour, uint8_t *dst, int C, int w)
{
	for (int x = 0; x < w; x++) {
		const uint8_t *q = src + (size_t)pc * x;
		uint8_t *o = dst + (size_t)C * x;

		if (C == 1)
			o[0] = colour ? luma(q[0], q[1], q[2]) : q[0];
		else if (colour)
			memmove(o, q, 3);
		else
			o[0] = o[1] = o[2] = q[0];
	}
}

struct jpeg_job {
	const struct imtf *t;
	const struct imtf_crop *c;
	struct imtf_scratch *s;
	struct plan p;
	int W, H;
};

static int decode_jpeg(const uint8_t *buf, size_t len, struct jpeg_job *j, bool *warning,
		       struct dp_error *err)
{
	struct jpeg_decompress_struct d;
	struct jerr je;
	const struct imtf_spec *sp = &j->t->spec;
	struct imtf_scratch *s = j->s;
	int C = sp->channels;
	volatile int rv = -1;

	jerr_init(&d, &je);
	if (setjmp(je.jb)) {
		errprintf(err, "JPEG: %s", je.msg);
		goto out;
	}
	jpeg_mem_src(&d, buf, (unsigned long)len);
	jpeg_read_header(&d, TRUE);
	{
		bool cmyk = d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK;
		int W = (int)d.image_width, H = (int)d.image_height, num = 8, pc;
		JDIMENSION xoff, xw;

		/* One channel from a colour JPEG: RGB, then PIL's luma (libjpeg's own grey output,
		 * its Y, is off by one level in places) */
		d.out_color_space = cmyk					    ? JCS_CMYK
				    : C == 1 && d.jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE
										    : JCS_RGB;
		if (sp->dct_scaling && sp->mode == IMTF_TRAIN) {
			/* the crop must keep at least the output's pixels (eval: never scaled,
			 * torchvision's pixels) */
			int a = dct_num(j->c->w, sp->size), b = dct_num(j->c->h, sp->size);
			num = a > b ? a : b;
		}
		d.scale_num = (unsigned)num;
		d.scale_denom = 8;
		jpeg_calc_output_dimensions(&d);
		if ((double)d.output_width * d.output_height > IMG_MAX_DECODED_PIXELS) {
			errprintf(err, "JPEG of %dx%d is too large to decode (more than %u pixels)",
				  W, H, IMG_MAX_DECODED_PIXELS);
			goto out;
		}
		j->p.C = C;
		if (plan_axes(j->t, j->c, W, H, (int)d.output_width, (int)d.output_height, &j->p, s,
			      err) < 0)
			goto out;
		jpeg_start_decompress(&d);
		/* Columns: libjpeg decodes whole iMCUs and upsamples chroma as if the window's
		 * edges were the image's (replicating the edge sample), so the window gets one
		 * iMCU more on each side: the columns used then come out as in a full decode. */
		int mcu = d.max_h_samp_factor * d.min_DCT_scaled_size;
		int x0 = j->p.ax.first - mcu < 0 ? 0 : j->p.ax.first - mcu;
		int x1 = j->p.ax.last + mcu > (int)d.output_width ? (int)d.output_width
								  : j->p.ax.last + mcu;
		xoff = (JDIMENSION)x0;
		xw = (JDIMENSION)(x1 - x0);
		if (xw < d.output_width)
			jpeg_crop_scanline(&d, &xoff, &xw);
		else
			xoff = 0, xw = d.output_width;
		pc = cmyk ? 4 : d.out_color_space == JCS_RGB ? 3 : 1;
		int rows = j->p.ay.last - j->p.ay.first;
		if (grow((void **)&s->dec, &s->dec_cap, (size_t)rows * xw * pc + 16, err) < 0)
			goto out;
		if (j->p.ay.first > 0)
			jpeg_skip_scanlines(&d, (JDIMENSION)j->p.ay.first);
		for (int r = 0; r < rows; r++) {
			/* rows of pc bytes a pixel, packed to C in place below */
			JSAMPROW row = s->dec + (size_t)r * xw * pc;
			if (jpeg_read_scanlines(&d, &row, 1) != 1) {
				errprintf(err, "JPEG: the decoder stopped at row %d",
					  j->p.ay.first + r);
				goto out;
			}
		}
		for (int r = 0; pc != C && r < rows; r++) {
			uint8_t *src = s->dec + (size_t)r * xw * pc;
			if (cmyk)
				cmyk_row(src, (int)xw, C, d.saw_Adobe_marker);
			else
				pixels_to(src, pc, true, src, C, (int)xw);
			memmove(s->dec + (size_t)r * xw * C, src, (size_t)xw * C);
		}
		if (resample(&j->p, s->dec, (int)xw, (int)xoff, s, err) < 0)
			goto out;
	}
	rv = 0;
out:
	if (je.warned && rv == 0) {
		*warning = true;
		errprintf(err, "JPEG: %s", je.msg);
	}
	jpeg_destroy_decompress(&d);
	return rv;
}

/* ---- PNG ---- */

/* libpng's classic API, not the simplified one: that one converts 16-bit samples as linear
 * light and applies gAMA chunks, where PIL takes the high byte and ignores gamma (measured:
 * 50 levels of 255 apart on average), and makes grey of colour in linear light too. */
struct png_io {
	const uint8_t *buf;
	size_t len, at;
	char msg[200];
};

static void png_read_mem(png_structp png, png_bytep out, size_t n)
{
	struct png_io *io = png_get_io_ptr(png);

	if (n > io->len - io->at)
		png_error(png, "the file ends early (cut short?)");
	memcpy(out, io->buf + io->at, n);
	io->at += n;
}

static void png_fail(png_structp png, png_const_charp msg)
{
	struct png_io *io = png_get_error_ptr(png);

	snprintf(io->msg, sizeof(io->msg), "%s", msg);
	png_longjmp(png, 1);
}

/* Warnings (a damaged ancillary chunk, a colour profile): PIL reads such files as they are. */
static void png_quiet(png_structp png, png_const_charp msg)
{
	(void)png;
	(void)msg;
}

static int decode_png(const uint8_t *buf, size_t len, struct jpeg_job *j, struct dp_error *err)
{
	const struct imtf_spec *sp = &j->t->spec;
	struct imtf_scratch *s = j->s;
	struct png_io io = {.buf = buf, .len = len};
	int C = sp->channels;
	png_structp png;
	png_infop info = NULL;
	volatile int rv = -1;

	png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, png_fail, png_quiet);
	if (!png || !(info = png_create_info_struct(png))) {
		png_destroy_read_struct(&png, NULL, NULL);
		return errprintf(err, "PNG: out of memory");
	}
	if (setjmp(png_jmpbuf(png))) {
		errprintf(err, "PNG: %s", io.msg);
		goto out;
	}
	png_set_read_fn(png, &io, png_read_mem);
	png_read_info(png, info);
	{
		png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
		int type = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
		bool colour = (type & PNG_COLOR_MASK_COLOR) != 0, interlaced;
		size_t rowb;
		int pc, first, last, passes;

		if ((double)w * h > IMG_MAX_DECODED_PIXELS) {
			errprintf(err, "PNG of %ux%u is too large to decode (more than %u pixels)",
				  w, h, IMG_MAX_DECODED_PIXELS);
			goto out;
		}
		/* What PIL reads: the high byte of 16-bit samples, a palette's colours (its
		 * transparency left out), grey of 1, 2 or 4 bits scaled to 0..255 */
		if (depth == 16)
			png_set_strip_16(png);
		if (type == PNG_COLOR_TYPE_PALETTE)
			png_set_palette_to_rgb(png);
		else if (depth < 8)
			png_set_expand_gray_1_2_4_to_8(png);
		passes = png_set_interlace_handling(png);
		interlaced = passes > 1;
		png_read_update_info(png, info);
		pc = png_get_channels(png, info);
		rowb = png_get_rowbytes(png, info);
		if (rowb != (size_t)w * pc || pc < (colour ? 3 : 1)) {
			errprintf(err,
				  "PNG: unexpected layout (%d channels, %zu bytes a row of %u)", pc,
				  rowb, w);
			goto out;
		}
		j->p.C = C;
		if (plan_axes(j->t, j->c, j->W, j->H, j->W, j->H, &j->p, s, err) < 0)
			goto out;
		/* the rows the crop uses, [first, last), in s->dec at C bytes a pixel; libpng's
		 * rows in s->tmp (every row where interlaced: each pass adds to each row) */
		first = j->p.ay.first, last = j->p.ay.last;
		if (grow((void **)&s->dec, &s->dec_cap, (size_t)(last - first) * w * C + 16, err) <
			0 ||
		    grow((void **)&s->tmp, &s->tmp_cap, (interlaced ? (size_t)h : 1) * rowb + 16,
			 err) < 0)
			goto out;
		/* interlaced: each of the 7 passes fills in its pixels of every row */
		for (int pass = 0; pass < passes; pass++) {
			for (int y = 0; y < (interlaced ? (int)h : last); y++) {
				png_bytep row = s->tmp + (interlaced ? (size_t)y * rowb : 0);
				png_read_row(png, row, NULL);
				if (!interlaced && y >= first)
					pixels_to(row, pc, colour,
						  s->dec + (size_t)(y - first) * w * C, C, (int)w);
			}
		}
		for (int y = first; interlaced && y < last; y++)
			pixels_to(s->tmp + (size_t)y * rowb, pc, colour,
				  s->dec + (size_t)(y - first) * w * C, C, (int)w);
		/* (s->tmp is the resampler's from here on) */
		if (resample(&j->p, s->dec, j->W, 0, s, err) < 0)
			goto out;
	}
	rv = 0;
out:
	png_destroy_read_struct(&png, &info, NULL);
	return rv;
}

/* ---- the sample ---- */

static int png_size(const uint8_t *b, size_t n, int *W, int *H, struct dp_error *err)
{
	uint32_t w, h;

	if (n < 24 || memcmp(b + 12, "IHDR", 4) != 0)
		return errprintf(err, "PNG: no IHDR chunk (damaged header)");
	w = (uint32_t)b[16] << 24 | (uint32_t)b[17] << 16 | (uint32_t)b[18] << 8 | b[19];
	h = (uint32_t)b[20] << 24 | (uint32_t)b[21] << 16 | (uint32_t)b[22] << 8 | b[23];
	if (w == 0 || h == 0 || w > 1000000 || h > 1000000)
		return errprintf(err, "PNG: implausible size %ux%u", w, h);
	*W = (int)w;
	*H = (int)h;
	return 0;
}

static int jpeg_size(const uint8_t *buf, size_t len, int *W, int *H, struct dp_error *err)
{
	struct jpeg_decompress_struct d;
	struct jerr je;
	volatile int rv = -1;

	jerr_init(&d, &je);
	if (setjmp(je.jb)) {
		errprintf(err, "JPEG: %s", je.msg);
	} else {
		jpeg_mem_src(&d, buf, (unsigned long)len);
		jpeg_read_header(&d, TRUE);
		*W = (int)d.image_width;
		*H = (int)d.image_height;
		rv = 0;
	}
	jpeg_destroy_decompress(&d);
	return rv;
}

int img_probe(const uint8_t *buf, size_t len, int *W, int *H, const char **kind,
	      struct dp_error *err)
{
	if (is_jpeg(buf, len)) {
		*kind = "JPEG";
		return jpeg_size(buf, len, W, H, err);
	}
	if (is_png(buf, len)) {
		*kind = "PNG";
		return png_size(buf, len, W, H, err);
	}
	*kind = NULL;
	if (len == 0)
		return errprintf(err, "empty file");
	return errprintf(err, "neither a JPEG nor a PNG (starts with %02x %02x %02x %02x)",
			 len > 0 ? buf[0] : 0, len > 1 ? buf[1] : 0, len > 2 ? buf[2] : 0,
			 len > 3 ? buf[3] : 0);
}

/* Decode + crop + resample into s->out (size x size x C, HWC, not flipped). */
static int sample_pixels(const struct imtf *t, int64_t epoch, size_t index, const uint8_t *buf,
			 size_t len, struct imtf_scratch *s, struct imtf_crop *c, bool *warning,
			 struct dp_error *err)
{
	struct jpeg_job j = {.t = t, .c = c, .s = s};
	const char *kind;

	*warning = false;
	if (img_probe(buf, len, &j.W, &j.H, &kind, err) < 0)
		return -1;
	imtf_draw(t, epoch, index, j.W, j.H, c);
	if (strcmp(kind, "JPEG") == 0)
		return decode_jpeg(buf, len, &j, warning, err);
	return decode_png(buf, len, &j, err);
}

int imtf_apply(const struct imtf *t, int64_t epoch, size_t index, const uint8_t *buf, size_t len,
	       struct imtf_scratch *s, float *dst, bool *warning, struct dp_error *err)
{
	struct imtf_crop c;
	int n = t->spec.size, C = t->spec.channels;

	if (sample_pixels(t, epoch, index, buf, len, s, &c, warning, err) < 0)
		return -1;
	for (int ch = 0; ch < C; ch++) {
		const float *lut = t->lut[ch];
		for (int y = 0; y < n; y++) {
			const uint8_t *in = s->out + (size_t)y * n * C + ch;
			float *row = dst + ((size_t)ch * n + y) * n;
			if (c.flip)
				for (int x = 0; x < n; x++)
					row[x] = lut[in[(size_t)(n - 1 - x) * C]];
			else
				for (int x = 0; x < n; x++)
					row[x] = lut[in[(size_t)x * C]];
		}
	}
	return 0;
}

int imtf_apply_u8(const struct imtf *t, int64_t epoch, size_t index, const uint8_t *buf, size_t len,
		  struct imtf_scratch *s, uint8_t *dst, bool *warning, struct dp_error *err)
{
	struct imtf_crop c;
	int n = t->spec.size, C = t->spec.channels;

	if (sample_pixels(t, epoch, index, buf, len, s, &c, warning, err) < 0)
		return -1;
	for (int y = 0; y < n; y++) {
		const uint8_t *in = s->out + (size_t)y * n * C;
		uint8_t *row = dst + (size_t)y * n * C;
		if (!c.flip) {
			memcpy(row, in, (size_t)n * C);
			continue;
		}
		for (int x = 0; x < n; x++)
			memcpy(row + (size_t)x * C, in + (size_t)(n - 1 - x) * C, (size_t)C);
	}
	return 0;
}

void imtf_scratch_free(struct imtf_scratch *s)
{
	free(s->dec);
	free(s->tmp);
	free(s->coef);
	free(s->out);
	memset(s, 0, sizeof(*s));
}
