/* cuda_eltwise.cu — the CUDA backend's element-wise ops (fill, relu, add, axpby, act_accum) over n
 * elements of any layout, the casts between float32 and acts (act_import, act_export, input_u8,
 * the half copy of conv and linear weights) and the sum of squares. Kernels only these ops launch
 * are here, those batch norm launches too in cuda_eltwise_kernels.cuh; no op with a plan. */
#ifdef HAVE_CUDNN /* without cuDNN there is no CUDA backend (backend_cuda.cu) */

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "trainer/backend/cuda_eltwise_kernels.cuh"
#include "trainer/backend/cuda_internal.h"

#define CU_SUMSQ_BLOCKS 1024

__global__ static void k_fill(float *x, float v, size_t n)
{
	GRID_LOOP(i, n)
	x[i] = v;
}

template <typename T> __global__ static void k_add(const T *a, const T *b, T *y, size_t n)
{
	GRID_LOOP(i, n)
	y[i] = to_act<T>(__fadd_rn(ldf(a[i]), ldf(b[i])));
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

/* "n=123 bf16": the shape of an element-wise op. */
static const char *n_str(struct backend *be, size_t n, char *buf, size_t len)
{
	snprintf(buf, len, "n=%zu%s", n, dt_suffix(be));
	return buf;
}

/* ---------------------------------------------------------------------------------------
 * Element-wise ops, casts, sums. Acts arrive as float pointers (the op table's type) and are
 * cast to the backend's element type T here. */

static int cu_fill(struct backend *be, float *x, float value, size_t n)
{
	const char *fn = "fill";
	char shape[32];

	snprintf(shape, sizeof(shape), "n=%zu", n);
	if (n)
		LAUNCH(k_fill, grid_for(n), CU_THREADS, x, value, n);
	return 0;
}

template <typename T> static int relu_fwd_t(struct backend *be, const float *x, float *y, size_t n)
{
	const char *fn = "relu_fwd";
	char s[48];
	const char *shape = n_str(be, n, s, sizeof(s));

	if (n)
		LAUNCH(k_relu_fwd<T>, grid_for(n), CU_THREADS, (const T *)x, (T *)y, n);
	return 0;
}

static int cu_relu_fwd(struct backend *be, const float *x, float *y, size_t n)
{
	return ACT_CALL(be, relu_fwd_t, be, x, y, n);
}

template <typename T>
static int relu_bwd_t(struct backend *be, const float *y, const float *dy, float *dx, size_t n,
		      float beta)
{
	const char *fn = "relu_bwd";
	char s[48];
	const char *shape = n_str(be, n, s, sizeof(s));

	if (n)
		LAUNCH(k_relu_bwd<T>, grid_for(n), CU_THREADS, (const T *)y, (const T *)dy, (T *)dx,
		       n, beta);
	return 0;
}

static int cu_relu_bwd(struct backend *be, const float *y, const float *dy, float *dx, size_t n,
		       float beta)
{
	return ACT_CALL(be, relu_bwd_t, be, y, dy, dx, n, beta);
}

template <typename T>
static int add_t(struct backend *be, const float *a, const float *b, float *y, size_t n)
{
	const char *fn = "add";
	char s[48];
	const char *shape = n_str(be, n, s, sizeof(s));

	if (n)
		LAUNCH(k_add<T>, grid_for(n), CU_THREADS, (const T *)a, (const T *)b, (T *)y, n);
	return 0;
}

static int cu_add(struct backend *be, const float *a, const float *b, float *y, size_t n)
{
	return ACT_CALL(be, add_t, be, a, b, y, n);
}

static int cu_axpby(struct backend *be, float alpha, const float *x, float beta, float *y, size_t n)
{
	const char *fn = "axpby";
	char shape[32];

	snprintf(shape, sizeof(shape), "n=%zu", n);
	if (n)
		LAUNCH(k_axpby, grid_for(n), CU_THREADS, alpha, x, beta, y, n);
	return 0;
}

template <typename T>
static int act_accum_t(struct backend *be, const void *dy, void *g, size_t n, float beta)
{
	const char *fn = "act_accum";
	char s[48];
	const char *shape = n_str(be, n, s, sizeof(s));

	if (n)
		LAUNCH(k_act_accum<T>, grid_for(n), CU_THREADS, (const T *)dy, (T *)g, n, beta);
	return 0;
}

static int cu_act_accum(struct backend *be, const void *dy, void *g, size_t n, float beta)
{
	return ACT_CALL(be, act_accum_t, be, dy, g, n, beta);
}

/* float32 NCHW <-> act: a conversion, and in NHWC a transpose of each sample's C x HW to HW x C
 * (none needed where C or HW is 1: rows, logits). */
static const char *nchw_str(struct backend *be, int n, int c, int h, int w, char *buf, size_t len)
{
	snprintf(buf, len, "n=%d c=%d h=%d w=%d%s", n, c, h, w, dt_suffix(be));
	return buf;
}

template <typename T>
static int act_import_t(struct backend *be, const float *x, void *y, int n, int c, int h, int w)
{
	const char *fn = "act_import";
	char s[96];
	const char *shape = nchw_str(be, n, c, h, w, s, sizeof(s));
	size_t total;

	if (n < 0 || c < 0 || h < 0 || w < 0)
		return be_errf(be, "act_import(%s): sizes must not be negative", shape);
	total = (size_t)n * c * h * w;
	if (!total)
		return 0;
	if (ctx_of(be)->nhwc && c > 1 && (size_t)h * w > 1)
		LAUNCH(k_import_swap<T>, grid_for(total), CU_THREADS, x, (T *)y, total, (size_t)c,
		       (size_t)h * w);
	else
		LAUNCH(k_import<T>, grid_for(total), CU_THREADS, x, (T *)y, total);
	return 0;
}

static int cu_act_import(struct backend *be, const float *x, void *y, int n, int c, int h, int w)
{
	return ACT_CALL(be, act_import_t, be, x, y, n, c, h, w);
}

template <typename T>
static int act_export_t(struct backend *be, const void *x, float *y, int n, int c, int h, int w)
{
	const char *fn = "act_export";
	char s[96];
	const char *shape = nchw_str(be, n, c, h, w, s, sizeof(s));
	size_t total;

	if (n < 0 || c < 0 || h < 0 || w < 0)
		return be_errf(be, "act_export(%s): sizes must not be negative", shape);
	total = (size_t)n * c * h * w;
	if (!total)
		return 0;
	if (ctx_of(be)->nhwc && c > 1 && (size_t)h * w > 1)
		LAUNCH(k_export_swap<T>, grid_for(total), CU_THREADS, (const T *)x, y, total,
		       (size_t)h * w, (size_t)c);
	else
		LAUNCH(k_export<T>, grid_for(total), CU_THREADS, (const T *)x, y, total);
	return 0;
}

static int cu_act_export(struct backend *be, const void *x, float *y, int n, int c, int h, int w)
{
	return ACT_CALL(be, act_export_t, be, x, y, n, c, h, w);
}

/* In half modes, a half copy of n float32 weights in arena scratch (the caller frees it after
 * issuing the op that reads it: the stream orders the reuse). With a, b > 1 each output row's
 * a x b weights are transposed to b x a: OIHW to OHWI (a = C, b = KH*KW), a linear layer's
 * [out][c][h*w] to [out][h*w][c]. NULL with be->err set. */
void *half_weights(struct backend *be, const float *wgt, size_t n, size_t a, size_t b,
		   const char *fn, const char *shape)
{
	struct cu_ctx *ctx = ctx_of(be);
	void *h = arena_alloc(be, n * sizeof(bf16), fn);
	int swap = a > 1 && b > 1;
	cudaError_t e;

	if (!h)
		return NULL;
	if (ctx->dtype == BE_BF16 && swap)
		k_import_swap<bf16>
		    <<<grid_for(n), CU_THREADS, 0, ctx->stream>>>(wgt, (bf16 *)h, n, a, b);
	else if (ctx->dtype == BE_BF16)
		k_import<bf16><<<grid_for(n), CU_THREADS, 0, ctx->stream>>>(wgt, (bf16 *)h, n);
	else if (swap)
		k_import_swap<f16>
		    <<<grid_for(n), CU_THREADS, 0, ctx->stream>>>(wgt, (f16 *)h, n, a, b);
	else
		k_import<f16><<<grid_for(n), CU_THREADS, 0, ctx->stream>>>(wgt, (f16 *)h, n);
	if ((e = cudaGetLastError()) != cudaSuccess) {
		be_errf(be, "%s(%s): launching the weight cast to the act type: %s", fn, shape,
			cudaGetErrorString(e));
		arena_free(be, h);
		return NULL;
	}
	return h;
}

static int cu_sumsq(struct backend *be, const float *x, size_t n, double *out)
{
	const char *fn = "sumsq";
	char shape[32];
	struct cu_ctx *ctx = ctx_of(be);
	size_t blocks = (n + CU_THREADS * 8 - 1) / (CU_THREADS * 8);
	double *partial = NULL;
	int rv = -1;

	snprintf(shape, sizeof(shape), "n=%zu", n);
	if (!n) {
		*out = 0.0;
		return 0;
	}
	if (blocks > CU_SUMSQ_BLOCKS)
		blocks = CU_SUMSQ_BLOCKS;
	partial = (double *)arena_alloc(be, sizeof(double) * (blocks + 1), fn);
	if (!partial)
		return -1;
	k_sumsq_partial<<<(unsigned)blocks, CU_THREADS, 0, ctx->stream>>>(x, n, partial);
	CU_TRY(cudaGetLastError());
	k_sum_partials<<<1, CU_THREADS, 0, ctx->stream>>>(partial, (unsigned)blocks,
							  partial + blocks);
	CU_TRY(cudaGetLastError());
	CU_TRY(cudaMemcpyAsync(out, partial + blocks, sizeof(double), cudaMemcpyDeviceToHost,
			       ctx->stream));
	CU_TRY(cudaStreamSynchronize(ctx->stream));
	rv = 0;
out:
	arena_free(be, partial);
	return rv;
}

static int cu_input_u8(struct backend *be, const uint8_t *src, float *dst, int n, int c, int h,
		       int w, const float *mean, const float *std)
{
	const char *fn = "input_u8";
	char shape[64];
	struct u8_norm p;
	size_t total = (size_t)n * c * h * w;

	snprintf(shape, sizeof(shape), "n=%d c=%d h=%d w=%d", n, c, h, w);
	if (n < 0 || c < 1 || c > 4 || h < 1 || w < 1)
		return be_errf(be, "%s(%s): bad shape (1..4 channels)", fn, shape);
	memset(&p, 0, sizeof(p));
	for (int i = 0; i < c; i++)
		p.mean[i] = mean[i], p.std[i] = std[i];
	if (total)
		LAUNCH(k_input_u8, grid_for(total), CU_THREADS, src, dst, total, c, (size_t)h * w,
		       p);
	return 0;
}

/* The op table's element-wise, cast and sum slots. */
void cu_eltwise_register(struct backend_ops *o)
{
	o->fill = cu_fill;
	o->relu_fwd = cu_relu_fwd;
	o->relu_bwd = cu_relu_bwd;
	o->add = cu_add;
	o->axpby = cu_axpby;
	o->sumsq = cu_sumsq;
	o->act_import = cu_act_import;
	o->act_export = cu_act_export;
	o->act_accum = cu_act_accum;
	o->input_u8 = cu_input_u8;
}

#endif /* HAVE_CUDNN */
