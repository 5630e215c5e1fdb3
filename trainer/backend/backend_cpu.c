/* backend_cpu.c — the CPU backend: oneDNN primitives for convolution, pooling and inner product,
 * planned once per op (at *_create) and reused; batch norm, max pooling's backward, global
 * average pooling and the bfloat16 element-wise ops as own OpenMP loops (backend_cpu_act.c);
 * the float32 element-wise ops, cross-entropy and sums as the reference kernels on OpenMP
 * threads. Built without oneDNN it is the reference backend on OpenMP threads. Must not change
 * the op semantics the reference backend defines: the tests compare the two op for op. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/error.h"
#include "common/env.h"
#include "trainer/backend/backend_ref.h"

#ifndef HAVE_DNNL

struct backend *be_cpu_create(int threads, struct dp_error *err)
{
	return be_ref_create_parallel(threads, err);
}

struct backend *be_cpu_create_opts(int threads, const struct be_cpu_opts *o, struct dp_error *err)
{
	if (o && o->act_dtype != BE_F32) {
		errprintf(err, "cpu backend: built without oneDNN, it computes in float32 only");
		return NULL;
	}
	return be_ref_create_parallel(threads, err);
}

int be_cpu_bf16(struct dp_error *why)
{
	errprintf(why, "built without oneDNN: no bfloat16 kernels");
	return 0;
}

void be_cpu_describe(char *buf, size_t len)
{
	snprintf(buf, len, "no oneDNN: reference kernels");
}

const char *be_cpu_kernels(void)
{
	return "reference";
}

const char *be_cpu_conv_impl(struct backend *be, struct be_op *op, int pass)
{
	(void)be, (void)op, (void)pass;
	return "";
}

int be_cpu_winograd(void)
{
	return 0;
}

#else

#include <oneapi/dnnl/dnnl_debug.h>

#include "trainer/backend/backend_cpu_act.h"
#include "trainer/backend/backend_cpu_dnnl.h" /* oneDNN 2 and 3 behind oneDNN 3's calls */
#include "trainer/backend/backend_cpu_wino.h"

/* Activations live in the layout oneDNN's convolutions choose on this CPU, from the first layer
 * to the loss, with no reorder between ops (measured once, at creation: cpu_probe_layout):
 * float32 in nChw16c blocks with AVX-512 and nChw8c with AVX2 and SSE4.1 (an act whose channels
 * are not a multiple of the block, such as a 1- or 3-channel input, stays NCHW), bfloat16 NHWC
 * on AMX. Channel counts decide the layout alone, so the element-wise ops (relu, add) see two
 * acts of a shape in the same layout, and a 1x1 act's blocked form is its plain rows ([n][c]:
 * global pooling's output, linear layers). Only act_import (the input batch) and act_export
 * (logits for evaluation, tests) convert from and to float32 NCHW. Parameters stay float32
 * OIHW / [out][in]: each pass reorders the weights into its own layout (and type) and the weight
 * gradient back. Where oneDNN's choice for a pass differs from the act's layout (a convolution
 * reading a 6-channel NCHW act), that pass reorders at its boundary through the arena.
 * DPTRAIN_CPU_CONV=plain|blocked keeps acts NCHW and forces plain or oneDNN's layouts inside
 * every convolution (reordered at each op boundary), for contrib/bench/ops-bench.c and to compare
 * with the layout kept end to end.
 *
 * Float32 convolutions ask oneDNN for its choice of algorithm (DPTRAIN_CPU_CONV_ALG, default
 * auto): on AVX-512 it takes Winograd's F(4x4, 3x3) for 3x3 stride-1 layers of whole channel
 * blocks at batches above 8, every pass (1.5-2.1x the direct convolution's rate on ResNet's
 * layers; results within about ten float32 roundings of the direct sum's). Where oneDNN has no
 * Winograd (AVX2, oneDNN 3), dptrain's own F(4x4, 3x3) takes the same layers
 * (backend_cpu_wino.c); elsewhere, and in bfloat16, the direct convolution. */

/* Scratch shared by every op of the backend: ops run one at a time on the one stream, so a
 * single arena, sized for the largest op, holds the reordered copies and the accumulation
 * temporaries. */
struct cpu_ctx {
	dnnl_engine_t eng;
	dnnl_stream_t stream;
	char *arena;
	size_t arena_bytes;
	enum { CONV_AUTO, CONV_PLAIN, CONV_BLOCKED } conv; /* layouts: DPTRAIN_CPU_CONV */
	dnnl_data_type_t dt;				   /* acts: dnnl_f32, or dnnl_bf16 */
	int bf16;
	/* acts' channel block: 16 or 8 (nChw16c, nChw8c where the channels are a multiple,
	 * else NCHW), 1 (NCHW) or 0 (NHWC) */
	int block;
	/* bfloat16 NHWC convolutions with at most this many output pixels an image take their
	 * weight gradient as an inner product (conv_bwdw_ip_create; DPTRAIN_CPU_BWDW_IP) */
	long bwdw_ip_max;
	/* the convolutions' algorithm (DPTRAIN_CPU_CONV_ALG): dnnl_convolution_auto (oneDNN
	 * takes Winograd where it implements it and judges it faster), _direct or _winograd */
	dnnl_alg_kind_t alg;
};

/* The default of DPTRAIN_CPU_BWDW_IP: ResNet's 7x7 and 4x4 stages (doc/performance.md); and
 * the least output channels and input channels x kernel size for which it pays. */
#define CPU_BWDW_IP_MAX	    64
#define CPU_BWDW_IP_MIN_K   64
#define CPU_BWDW_IP_MIN_CKK 256

enum arg_role {
	ARG_IN,	 /* read; reordered into the primitive's layout when it differs */
	ARG_OUT, /* written; honours beta and reorders back when the layout differs */
};

/* One tensor argument of a primitive: the caller's memory (`user`: an act in the backend's
 * layout, or a float32 parameter) and the memory the primitive reads or writes (`prim`: the
 * caller's buffer when possible, else an arena slot). */
struct cpu_arg {
	int id; /* DNNL_ARG_* */
	enum arg_role role;
	int same; /* the primitive uses the caller's layout and type */
	dnnl_memory_t user, prim;
	dnnl_primitive_t to_prim; /* ARG_IN, !same: user -> prim */
	dnnl_primitive_t to_user; /* ARG_OUT, !same: prim -> user, overwriting */
	dnnl_primitive_t add;	  /* ARG_OUT: prim -> user, adding (beta = 1) */
	size_t off;		  /* arena slot */
	size_t count;		  /* elements in the caller's tensor */
	int bf16;		  /* the caller's tensor is bfloat16 */
};

#define CPU_ARGS_MAX 10

/* One primitive with its arguments, in the order the op passes pointers. */
struct cpu_pass {
	dnnl_primitive_t prim;
	int nargs;
	struct cpu_arg arg[CPU_ARGS_MAX];
	size_t arena; /* bytes of arena it needs */
};

/* What a pass is built from: argument ids, roles and the caller's layout. */
struct arg_spec {
	int id;
	enum arg_role role;
	cpu_cmd md;
};

enum cpu_kind { CPU_CONV, CPU_BN, CPU_POOL, CPU_LINEAR };

/* This file's definition of the opaque op. */
struct be_op {
	enum cpu_kind kind;
	char what[200]; /* "conv(n=8 c=3 ...)" for error messages */
	union {
		struct be_conv_desc conv;
		struct be_bn_desc bn;
		struct be_pool_desc pool;
		struct be_linear_desc linear;
	} d;
	/* conv, linear: fwd, bwd data, bwd weights. pool: fwd, bwd (avg). bn: none. */
	struct cpu_pass pass[3];
	/* conv: its weight gradient as an inner product of dy's rows with the input's patches
	 * (cpu_conv_patches into the arena at col_off), not the convolution's own pass */
	int bwdw_ip;
	size_t col_off, dw_off, db_off;
	/* conv: every pass by dptrain's own Winograd (backend_cpu_wino.c), no primitive */
	int wino;
	struct cpu_wino wplan;
};

enum { PASS_FWD = 0, PASS_BWD_DATA = 1, PASS_BWD_WEIGHTS = 2 };

static struct cpu_ctx *ctx_of(struct backend *be)
{
	return be->priv;
}

static int dnnl_fail(struct backend *be, const char *fn, const char *what, const char *call,
		     dnnl_status_t st)
{
	return be_errf(be, "%s%s: %s: %s", fn, what, call, dnnl_status2str(st));
}

/* Checks a oneDNN call inside a function with `be`, `fn`, `what`, `rv` and an `out` label. */
#define DNNL_TRY(f, args)                                                                          \
	do {                                                                                       \
		dnnl_status_t st_ = f args;                                                        \
		if (st_ != dnnl_success) {                                                         \
			dnnl_fail(be, fn, what, #f, st_);                                          \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

/* A memory descriptor (cpu_md_destroy it; NULL on failure, which creating a primitive from it
 * then reports). */
static cpu_md md_new(int ndims, const int64_t *dims, dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
	dnnl_dims_t d;
	cpu_md md = NULL;

	for (int i = 0; i < ndims; i++)
		d[i] = dims[i];
	if (cpu_md_create(&md, ndims, d, dt, tag) != dnnl_success) {
		cpu_md_destroy(md);
		md = NULL;
	}
	return md;
}

/* Channels per block of an act with c channels (backend_cpu_act.h: 1 is NCHW, c NHWC). */
static int act_bs(const struct cpu_ctx *ctx, int c)
{
	if (ctx->block == 0)
		return c;
	return c % ctx->block == 0 ? ctx->block : 1;
}

static dnnl_format_tag_t act_tag(const struct cpu_ctx *ctx, int c)
{
	int bs = act_bs(ctx, c);

	if (ctx->block == 0)
		return dnnl_nhwc;
	return bs == 16 ? dnnl_nChw16c : bs == 8 ? dnnl_nChw8c : dnnl_nchw;
}

/* The descriptor of an n x c x h x w act as this backend stores it. */
static cpu_md md_act(const struct cpu_ctx *ctx, int n, int c, int h, int w)
{
	const int64_t dims[] = {n, c, h, w};

	return md_new(4, dims, ctx->dt, act_tag(ctx, c));
}

static struct cpu_act act_of(const struct cpu_ctx *ctx, int n, int c, size_t hw)
{
	struct cpu_act a = {n, c, act_bs(ctx, c), hw, ctx->bf16};

	return a;
}

static size_t align64(size_t n)
{
	return (n + 63) / 64 * 64;
}

static int arena_reserve(struct backend *be, size_t bytes, const char *fn, const char *what)
{
	struct cpu_ctx *ctx = ctx_of(be);
	char *p;

	if (bytes <= ctx->arena_bytes)
		return 0;
	p = be_host_alloc(bytes);
	if (!p)
		return be_errf(be, "%s%s: scratch of %zu bytes: %s", fn, what, bytes,
			       strerror(errno));
	be_host_free(ctx->arena);
	ctx->arena = p;
	ctx->arena_bytes = bytes;
	return 0;
}

static int reorder_create(struct backend *be, dnnl_primitive_t *prim, cpu_cmd from, cpu_cmd to,
			  int add, const char *fn, const char *what)
{
	struct cpu_ctx *ctx = ctx_of(be);
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	dnnl_primitive_desc_t pd = NULL;
	int rv = -1;

	if (add) {
		DNNL_TRY(dnnl_post_ops_create, (&po));
		DNNL_TRY(cpu_sum_post_op, (po));
		DNNL_TRY(dnnl_primitive_attr_create, (&attr));
		DNNL_TRY(dnnl_primitive_attr_set_post_ops, (attr, po));
	}
	DNNL_TRY(dnnl_reorder_primitive_desc_create, (&pd, from, ctx->eng, to, ctx->eng, attr));
	DNNL_TRY(dnnl_primitive_create, (prim, pd));
	rv = 0;
out:
	dnnl_primitive_desc_destroy(pd);
	dnnl_primitive_attr_destroy(attr);
	dnnl_post_ops_destroy(po);
	return rv;
}

static void pass_destroy(struct cpu_pass *p)
{
	for (int i = 0; i < p->nargs; i++) {
		struct cpu_arg *a = &p->arg[i];
		dnnl_primitive_destroy(a->to_prim);
		dnnl_primitive_destroy(a->to_user);
		dnnl_primitive_destroy(a->add);
		dnnl_memory_destroy(a->user);
		dnnl_memory_destroy(a->prim);
	}
	dnnl_primitive_destroy(p->prim);
	memset(p, 0, sizeof(*p));
}

/* Plans one primitive from its descriptor *pdp, which it takes over (and sets to NULL): kept in
 * *keep_pd when that is not NULL (a forward's, the hint of its backward passes), else
 * destroyed. */
static int pass_create(struct backend *be, struct be_op *op, struct cpu_pass *p,
		       dnnl_primitive_desc_t *pdp, dnnl_primitive_desc_t *keep_pd,
		       const struct arg_spec *spec, int nspec, const char *fn)
{
	struct cpu_ctx *ctx = ctx_of(be);
	const char *what = op->what;
	dnnl_primitive_desc_t pd = *pdp;
	size_t off = 0;
	int rv = -1;

	*pdp = NULL;
	DNNL_TRY(dnnl_primitive_create, (&p->prim, pd));
	for (int i = 0; i < nspec; i++) {
		struct cpu_arg *a = &p->arg[i];
		cpu_cmd pmd = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, spec[i].id);
		cpu_cmd umd = spec[i].md;

		p->nargs = i + 1;
		a->id = spec[i].id;
		a->role = spec[i].role;
		if (!pmd || cpu_md_ndims(pmd) == 0) {
			be_errf(be, "%s%s: the primitive has no argument %d", fn, what, a->id);
			goto out;
		}
		a->same = dnnl_memory_desc_equal(umd, pmd);
		a->bf16 = cpu_md_dtype(umd) == dnnl_bf16;
		a->count = dnnl_memory_desc_get_size(umd) / (a->bf16 ? 2 : sizeof(float));
		DNNL_TRY(dnnl_memory_create, (&a->user, umd, ctx->eng, DNNL_MEMORY_NONE));
		DNNL_TRY(dnnl_memory_create, (&a->prim, pmd, ctx->eng, DNNL_MEMORY_NONE));
		if (a->role == ARG_IN && !a->same &&
		    reorder_create(be, &a->to_prim, umd, pmd, 0, fn, what) < 0)
			goto out;
		if (a->role == ARG_OUT && !a->same &&
		    reorder_create(be, &a->to_user, pmd, umd, 0, fn, what) < 0)
			goto out;
		if (a->role == ARG_OUT && reorder_create(be, &a->add, pmd, umd, 1, fn, what) < 0)
			goto out;
		if (!a->same || a->role == ARG_OUT) {
			a->off = off;
			off += align64(dnnl_memory_desc_get_size(pmd));
		}
	}
	p->arena = off;
	if (arena_reserve(be, off, fn, what) < 0)
		goto out;
	rv = 0;
out:
	if (keep_pd && rv == 0)
		*keep_pd = pd;
	else
		dnnl_primitive_desc_destroy(pd);
	return rv;
}

static int run_reorder(struct backend *be, dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to,
		       const char *fn, const char *what)
{
	dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
	int rv = -1;

	DNNL_TRY(dnnl_primitive_execute, (r, ctx_of(be)->stream, 2, args));
	rv = 0;
out:
	return rv;
}

/* out = out + r, element by element in the caller's layout: what the add reorder computes
 * (float32, or bfloat16 widened, added in float32 and rounded once), without its overhead
 * (measured: an act's accumulation took 2-3 ms a call in oneDNN 2.6's reorder). */
static void cpu_accum_same(void *out, const void *r, size_t n, int bf16)
{
	if (bf16)
		cpu_bf16_accum(r, out, n, 1.0f);
	else
		be_ref_add(r, out, out, n, 1);
}

/* Runs a pass on the caller's pointers (in spec order). Inputs are only read: oneDNN takes
 * non-const handles. beta applies to ARG_OUT arguments: out = result + beta * out. */
static int pass_run(struct backend *be, struct be_op *op, struct cpu_pass *p, void *const *ptr,
		    float beta, const char *fn)
{
	struct cpu_ctx *ctx = ctx_of(be);
	const char *what = op->what;
	dnnl_exec_arg_t args[CPU_ARGS_MAX];
	int rv = -1;

	for (int i = 0; i < p->nargs; i++) {
		struct cpu_arg *a = &p->arg[i];
		int direct = a->same && (a->role == ARG_IN || beta == 0.0f);
		DNNL_TRY(dnnl_memory_set_data_handle, (a->user, ptr[i]));
		DNNL_TRY(dnnl_memory_set_data_handle,
			 (a->prim, direct ? ptr[i] : ctx->arena + a->off));
		if (a->role == ARG_IN && !a->same &&
		    run_reorder(be, a->to_prim, a->user, a->prim, fn, what) < 0)
			goto out;
		args[i].arg = a->id;
		args[i].memory = a->prim;
	}
	DNNL_TRY(dnnl_primitive_execute, (p->prim, ctx->stream, p->nargs, args));
	for (int i = 0; i < p->nargs; i++) {
		struct cpu_arg *a = &p->arg[i];
		if (a->role != ARG_OUT || (a->same && beta == 0.0f))
			continue;
		if (a->same && beta == 1.0f) { /* out += result, as the add reorder, in one pass */
			cpu_accum_same(ptr[i], ctx->arena + a->off, a->count, a->bf16);
			continue;
		}
		if (beta != 0.0f && beta != 1.0f && a->bf16) /* the add reorder's sum: scale 1 */
			cpu_bf16_scale(ptr[i], beta, a->count);
		else if (beta != 0.0f && beta != 1.0f)
			be_ref_scale(ptr[i], beta, a->count, 1);
		if (run_reorder(be, beta == 0.0f ? a->to_user : a->add, a->prim, a->user, fn,
				what) < 0)
			goto out;
	}
	DNNL_TRY(dnnl_stream_wait, (ctx->stream));
	rv = 0;
out:
	return rv;
}

static struct be_op *op_new(struct backend *be, enum cpu_kind kind, const char *fn,
			    const char *shape)
{
	struct be_op *op = calloc(1, sizeof(*op));

	if (!op) {
		be_errf(be, "%s(%s): out of memory", fn, shape);
		return NULL;
	}
	op->kind = kind;
	snprintf(op->what, sizeof(op->what), "(%s)", shape);
	return op;
}

static void cpu_op_destroy(struct backend *be, struct be_op *op)
{
	(void)be;
	if (!op)
		return;
	for (int i = 0; i < 3; i++)
		pass_destroy(&op->pass[i]);
	free(op);
}

static int op_is(struct backend *be, const struct be_op *op, enum cpu_kind kind, const char *fn)
{
	if (op && op->kind == kind)
		return 1;
	be_errf(be, "%s: the op was not created by the matching *_create", fn);
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * Convolution. */

/* The input's patches of a convolution on NHWC acts, one row per output pixel: row
 * (n * oh + i) * ow + j holds x[n][i * stride - pad + a][j * stride - pad + b][0..c) for a in
 * [0, kh), b in [0, kw), in that order, zeros where the window leaves the input. With dy's NHWC
 * rows ([n * oh * ow][k]) the weight gradient is then one matrix product: what an inner
 * product's backward by weights computes, dw[k][c][a][b] = sum over rows of dy[row][k] *
 * patch[row][a][b][c]. */
static void cpu_conv_patches(const struct be_conv_desc *d, const uint16_t *x, uint16_t *col)
{
	long rows = (long)d->n * d->oh * d->ow;
	size_t c = (size_t)d->c, per = (size_t)d->kh * d->kw * c;

#pragma omp parallel for schedule(static)
	for (long r = 0; r < rows; r++) {
		int n = (int)(r / ((long)d->oh * d->ow)), rem = (int)(r % ((long)d->oh * d->ow));
		int i = rem / d->ow, j = rem % d->ow;
		uint16_t *o = col + (size_t)r * per;
		for (int a = 0; a < d->kh; a++) {
			int ih = i * d->stride - d->pad + a;
			for (int b = 0; b < d->kw; b++, o += c) {
				int iw = j * d->stride - d->pad + b;
				if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w)
					memset(o, 0, c * sizeof(*o));
				else
					memcpy(o, x + (((size_t)n * d->h + ih) * d->w + iw) * c,
					       c * sizeof(*o));
			}
		}
	}
}

/* dw = g + beta * dw (g alone if beta is 0, dw not read), g in OHWI ([k][a][b][c]: the inner
 * product's) and dw in OIHW, p = kh * kw: each output channel's p x c block transposed in
 * cache. The sum in pass_run's order and float arithmetic, so the bits are those of its add. */
static void cpu_conv_ohwi(const float *g, float *dw, int k, int c, int p, float beta)
{
#pragma omp parallel for schedule(static)
	for (int o = 0; o < k; o++) {
		const float *src = g + (size_t)o * p * c;
		float *dst = dw + (size_t)o * c * p;
		if (beta == 0.0f)
			for (int q = 0; q < p; q++)
				for (int i = 0; i < c; i++)
					dst[(size_t)i * p + q] = src[(size_t)q * c + i];
		else
			for (int q = 0; q < p; q++)
				for (int i = 0; i < c; i++)
					dst[(size_t)i * p + q] =
					    beta * dst[(size_t)i * p + q] + src[(size_t)q * c + i];
	}
}

/* The weight gradient's pass as an inner product over the patches (cpu_conv_patches): for
 * bfloat16 NHWC acts where the output is small, which oneDNN 2's AMX convolution backward by
 * weights runs far below its forward's rate (ResNet's 4x4 and 7x7 stages: 3x its time), while
 * its inner product's runs as a matrix product. Returns 1 if planned, 0 if not taken (the
 * convolution's own pass is planned instead), -1 on error. */
static int conv_bwdw_ip_create(struct backend *be, struct be_op *op, cpu_cmd b)
{
	struct cpu_ctx *ctx = ctx_of(be);
	const struct be_conv_desc *d = &op->d.conv;
	const char *fn = "conv_create", *what = op->what;
	int64_t rows = (int64_t)d->n * d->oh * d->ow;
	const int64_t cd[] = {rows, d->c, d->kh, d->kw}, wd[] = {d->k, d->c, d->kh, d->kw},
		      yd[] = {rows, d->k};
	dnnl_primitive_desc_t pd = NULL, fwd_pd = NULL;
	cpu_md col = NULL, dy = NULL, wa = NULL, dwa = NULL;
	int rv = -1;

	/* small outputs of wide layers (ResNet's 7x7 and 4x4 stages); on narrow ones (LeNet's
	 * 6 -> 16 5x5 on 8x8: 0.25 ms against the convolution's 0.15) building the patches
	 * costs more than the product saves */
	if (ctx->block != 0 || !ctx->bf16 || ctx->conv != CONV_AUTO ||
	    (long)d->oh * d->ow > ctx->bwdw_ip_max || d->k < CPU_BWDW_IP_MIN_K ||
	    (long)d->c * d->kh * d->kw < CPU_BWDW_IP_MIN_CKK)
		return 0;
	col = md_new(4, cd, dnnl_bf16, dnnl_acdb);
	dy = md_new(2, yd, dnnl_bf16, dnnl_ab);
	wa = md_new(4, wd, dnnl_bf16, dnnl_format_tag_any);
	/* the gradient as the matrix product leaves it, [k][a][b][c] (OHWI); cpu_conv_ohwi
	 * rearranges it (oneDNN's reorder of the layout it picked took twice the product's time) */
	dwa = md_new(4, wd, dnnl_f32, dnnl_acdb);
	DNNL_TRY(cpu_ip_fwd_pd,
		 (&fwd_pd, ctx->eng, dnnl_forward_training, col, wa, d->has_bias ? b : NULL, dy));
	DNNL_TRY(cpu_ip_bwd_weights_pd,
		 (&pd, ctx->eng, col, dwa, d->has_bias ? b : NULL, dy, fwd_pd));
	struct arg_spec bwd_w[] = {{DNNL_ARG_SRC, ARG_IN, col},
				   {DNNL_ARG_DIFF_DST, ARG_IN, dy},
				   {DNNL_ARG_DIFF_WEIGHTS, ARG_OUT, dwa},
				   {DNNL_ARG_DIFF_BIAS, ARG_OUT, b}};
	struct cpu_pass *p = &op->pass[PASS_BWD_WEIGHTS];
	size_t nw = (size_t)d->k * d->c * d->kh * d->kw;
	if (pass_create(be, op, p, &pd, NULL, bwd_w, 3 + !!d->has_bias, fn) < 0)
		goto out;
	/* the arena: the pass's own slots, the patches, the OHWI gradient, the bias's */
	op->col_off = p->arena;
	op->dw_off = op->col_off + align64((size_t)rows * d->kh * d->kw * d->c * 2);
	op->db_off = op->dw_off + align64(nw * sizeof(float));
	if (arena_reserve(be, op->db_off + (size_t)d->k * sizeof(float), fn, what) < 0)
		goto out;
	op->bwdw_ip = 1;
	rv = 1;
out:
	dnnl_primitive_desc_destroy(pd);
	dnnl_primitive_desc_destroy(fwd_pd);
	cpu_md_destroy(col), cpu_md_destroy(dy), cpu_md_destroy(wa), cpu_md_destroy(dwa);
	return rv;
}

/* Where oneDNN has no Winograd for a float32 layer (AVX2, oneDNN 3's builds) and its acts are
 * in blocks of 8 or 16 channels, dptrain's own F(4x4, 3x3) takes every pass of a 3x3 stride-1
 * convolution (backend_cpu_wino.c; doc/performance.md) unless direct is asked for; under auto
 * only at batches above 8 (oneDNN's rule for its own) with enough tiles to pay. 1 when it does (its
 * scratch reserved), 0 when not, -1 on error. */
static int cpu_conv_own_wino(struct backend *be, struct be_op *op)
{
	struct cpu_ctx *ctx = ctx_of(be);
	const struct be_conv_desc *d = &op->d.conv;
	dnnl_primitive_desc_t pd = NULL;
	dnnl_dims_t one = {1, 1};
	struct cpu_wino plan;

	if (ctx->alg == dnnl_convolution_direct || ctx->bf16 || ctx->conv != CONV_AUTO ||
	    cpu_wino_plan(&plan, d, ctx->block, be->threads,
			  ctx->alg == dnnl_convolution_winograd) < 0)
		return 0;
	/* oneDNN's own where it has one */
	const int64_t xd[] = {d->n, d->c, d->h, d->w}, wd[] = {d->k, d->c, 3, 3};
	cpu_md x = md_new(4, xd, dnnl_f32, act_tag(ctx, d->c));
	cpu_md w = md_new(4, wd, dnnl_f32, dnnl_format_tag_any);
	dnnl_status_t st = cpu_conv_fwd_pd(&pd, ctx->eng, dnnl_forward_training,
					   dnnl_convolution_winograd, x, w, NULL, x, one, one, one);
	dnnl_primitive_desc_destroy(pd);
	cpu_md_destroy(x), cpu_md_destroy(w);
	if (st == dnnl_success)
		return 0;
	if (arena_reserve(be, cpu_wino_scratch(&plan) * sizeof(float), "conv_create", op->what) < 0)
		return -1;
	op->wino = 1;
	op->wplan = plan;
	return 1;
}

static struct be_op *cpu_conv_create(struct backend *be, struct be_conv_desc *d)
{
	struct cpu_ctx *ctx = ctx_of(be);
	const char *fn = "conv_create";
	char shape[160];
	struct be_op *op = NULL;
	dnnl_primitive_desc_t pd = NULL, fwd_pd = NULL;
	dnnl_dims_t strides = {d->stride, d->stride}, pl = {d->pad, d->pad}, pr;
	int rv = -1;

	if (be_conv_check(be, d) < 0)
		return NULL;
	be_conv_str(d, shape, sizeof(shape));
	if (!(op = op_new(be, CPU_CONV, "conv", shape)))
		return NULL;
	const char *what = op->what;
	op->d.conv = *d;
	/* PyTorch's floor mode leaves the last rows unread: oneDNN expresses that as a right
	 * padding that may be negative. */
	pr[0] = (int64_t)(d->oh - 1) * d->stride + d->kh - d->h - d->pad;
	pr[1] = (int64_t)(d->ow - 1) * d->stride + d->kw - d->w - d->pad;
	const int64_t xd[] = {d->n, d->c, d->h, d->w}, wd[] = {d->k, d->c, d->kh, d->kw},
		      bd[] = {d->k}, yd[] = {d->n, d->k, d->oh, d->ow};
	dnnl_format_tag_t any = dnnl_format_tag_any;
	/* the caller's: acts as stored, float32 OIHW weights and bias */
	cpu_md x = md_act(ctx, d->n, d->c, d->h, d->w), y = md_act(ctx, d->n, d->k, d->oh, d->ow);
	cpu_md w = md_new(4, wd, dnnl_f32, dnnl_oihw), b = md_new(1, bd, dnnl_f32, dnnl_a);
	/* the passes': oneDNN's choice (`any`), in the acts' type; weight gradients float32 */
	cpu_md xa = md_new(4, xd, ctx->dt, any), wa = md_new(4, wd, ctx->dt, any);
	cpu_md ya = md_new(4, yd, ctx->dt, any), dwa = md_new(4, wd, dnnl_f32, any);
	cpu_md wp = md_new(4, wd, ctx->dt, dnnl_oihw);
	/* Every pass takes oneDNN's layouts (with AUTO those are the acts' own, so nothing is
	 * reordered but the weights), except under DPTRAIN_CPU_CONV=plain. */
	int plain = ctx->conv == CONV_PLAIN;
	cpu_cmd px = plain ? x : xa, pw = plain ? wp : wa, py = plain ? y : ya;
	cpu_cmd pdw = plain ? w : dwa, bias = d->has_bias ? b : NULL;

	/* Winograd where oneDNN implements it (float32 3x3 stride 1 on AVX-512: F(4x4, 3x3),
	 * 1.5-2.1x the direct convolution's rate on ResNet's layers, doc/performance.md), else
	 * dptrain's own where it applies, else direct; the backward passes follow the forward's
	 * choice where they can. */
	dnnl_alg_kind_t alg = ctx->alg;
	int own = cpu_conv_own_wino(be, op);
	if (own != 0) {
		rv = own > 0 ? 0 : -1;
		goto out;
	}
	if (alg == dnnl_convolution_direct ||
	    cpu_conv_fwd_pd(&pd, ctx->eng, dnnl_forward_training, alg, px, pw, bias, py, strides,
			    pl, pr) != dnnl_success) {
		alg = dnnl_convolution_direct;
		DNNL_TRY(cpu_conv_fwd_pd, (&pd, ctx->eng, dnnl_forward_training, alg, px, pw, bias,
					   py, strides, pl, pr));
	}
	struct arg_spec fwd[] = {{DNNL_ARG_SRC, ARG_IN, x},
				 {DNNL_ARG_WEIGHTS, ARG_IN, w},
				 {DNNL_ARG_DST, ARG_OUT, y},
				 {DNNL_ARG_BIAS, ARG_IN, b}};
	if (pass_create(be, op, &op->pass[PASS_FWD], &pd, &fwd_pd, fwd, 3 + !!d->has_bias, fn) < 0)
		goto out;

	if (alg == dnnl_convolution_direct ||
	    cpu_conv_bwd_data_pd(&pd, ctx->eng, alg, px, pw, py, strides, pl, pr, fwd_pd) !=
		dnnl_success)
		DNNL_TRY(cpu_conv_bwd_data_pd, (&pd, ctx->eng, dnnl_convolution_direct, px, pw, py,
						strides, pl, pr, fwd_pd));
	struct arg_spec bwd_data[] = {{DNNL_ARG_DIFF_DST, ARG_IN, y},
				      {DNNL_ARG_WEIGHTS, ARG_IN, w},
				      {DNNL_ARG_DIFF_SRC, ARG_OUT, x}};
	if (pass_create(be, op, &op->pass[PASS_BWD_DATA], &pd, NULL, bwd_data, 3, fn) < 0)
		goto out;

	int ip = conv_bwdw_ip_create(be, op, b);
	if (ip < 0)
		goto out;
	if (ip > 0) {
		rv = 0;
		goto out;
	}
	if (alg == dnnl_convolution_direct ||
	    cpu_conv_bwd_weights_pd(&pd, ctx->eng, alg, px, pdw, bias, py, strides, pl, pr,
				    fwd_pd) != dnnl_success)
		DNNL_TRY(cpu_conv_bwd_weights_pd, (&pd, ctx->eng, dnnl_convolution_direct, px, pdw,
						   bias, py, strides, pl, pr, fwd_pd));
	struct arg_spec bwd_w[] = {{DNNL_ARG_SRC, ARG_IN, x},
				   {DNNL_ARG_DIFF_DST, ARG_IN, y},
				   {DNNL_ARG_DIFF_WEIGHTS, ARG_OUT, w},
				   {DNNL_ARG_DIFF_BIAS, ARG_OUT, b}};
	if (pass_create(be, op, &op->pass[PASS_BWD_WEIGHTS], &pd, NULL, bwd_w, 3 + !!d->has_bias,
			fn) < 0)
		goto out;
	rv = 0;
out:
	dnnl_primitive_desc_destroy(pd);
	dnnl_primitive_desc_destroy(fwd_pd);
	cpu_md_destroy(x), cpu_md_destroy(w), cpu_md_destroy(b), cpu_md_destroy(y);
	cpu_md_destroy(xa), cpu_md_destroy(wa), cpu_md_destroy(ya), cpu_md_destroy(dwa);
	cpu_md_destroy(wp);
	if (rv < 0) {
		cpu_op_destroy(be, op);
		return NULL;
	}
	return op;
}

static float *wino_scratch(struct backend *be)
{
	return (float *)ctx_of(be)->arena;
}

static int wino_run(struct backend *be, struct be_op *op, int rc, const char *fn)
{
	if (rc < 0)
		return be_errf(be, "%s%s: oneDNN's sgemm failed in dptrain's Winograd", fn,
			       op->what);
	return 0;
}

static int cpu_conv_fwd(struct backend *be, struct be_op *op, const float *x, const float *wgt,
			const float *bias, float *y)
{
	if (!op_is(be, op, CPU_CONV, "conv_fwd"))
		return -1;
	if (op->d.conv.has_bias && !bias)
		return be_errf(be, "conv_fwd%s: the op has a bias but bias is NULL", op->what);
	if (op->wino)
		return wino_run(be, op, cpu_wino_fwd(&op->wplan, x, wgt, y, wino_scratch(be)),
				"conv_fwd");
	void *ptr[] = {(void *)x, (void *)wgt, y, (void *)bias};
	return pass_run(be, op, &op->pass[PASS_FWD], ptr, 0.0f, "conv_fwd");
}

static int cpu_conv_bwd_data(struct backend *be, struct be_op *op, const float *dy,
			     const float *wgt, float *dx, float beta)
{
	if (!op_is(be, op, CPU_CONV, "conv_bwd_data"))
		return -1;
	if (op->wino)
		return wino_run(be, op,
				cpu_wino_bwd_data(&op->wplan, dy, wgt, dx, beta, wino_scratch(be)),
				"conv_bwd_data");
	void *ptr[] = {(void *)dy, (void *)wgt, dx};
	return pass_run(be, op, &op->pass[PASS_BWD_DATA], ptr, beta, "conv_bwd_data");
}

static int cpu_conv_bwd_weights(struct backend *be, struct be_op *op, const float *x,
				const float *dy, float *dwgt, float *dbias, float beta)
{
	if (!op_is(be, op, CPU_CONV, "conv_bwd_weights"))
		return -1;
	if (op->d.conv.has_bias && !dbias)
		return be_errf(be, "conv_bwd_weights%s: the op has a bias but dbias is NULL",
			       op->what);
	if (op->wino)
		return wino_run(
		    be, op, cpu_wino_bwd_weights(&op->wplan, x, dy, dwgt, beta, wino_scratch(be)),
		    "conv_bwd_weights");
	void *ptr[] = {(void *)x, (void *)dy, dwgt, dbias};
	if (op->bwdw_ip) {
		const struct be_conv_desc *d = &op->d.conv;
		char *arena = ctx_of(be)->arena;
		int p = d->kh * d->kw, direct = beta == 0.0f && p == 1; /* 1x1: OHWI is OIHW */
		ptr[0] = arena + op->col_off;
		cpu_conv_patches(d, (const uint16_t *)x, ptr[0]);
		if (!direct)
			ptr[2] = arena + op->dw_off;
		if (dbias && beta != 0.0f)
			ptr[3] = arena + op->db_off;
		if (pass_run(be, op, &op->pass[PASS_BWD_WEIGHTS], ptr, 0.0f, "conv_bwd_weights") <
		    0)
			return -1;
		if (!direct)
			cpu_conv_ohwi(ptr[2], dwgt, d->k, d->c, p, beta);
		for (int o = 0; dbias && beta != 0.0f && o < d->k; o++)
			dbias[o] = beta * dbias[o] + ((const float *)ptr[3])[o];
		return 0;
	}
	return pass_run(be, op, &op->pass[PASS_BWD_WEIGHTS], ptr, beta, "conv_bwd_weights");
}

/* ---------------------------------------------------------------------------------------
 * Batch norm: own loops (backend_cpu_act.c) in the acts' layout, the ReLU and the residual
 * add fused in. oneDNN's NCHW batch norm measured 20-50x slower than these; its blocked one
 * keeps no double sums and no running statistics. Stateless: the fused ReLU's backward takes
 * its mask from y. */

static struct be_op *cpu_bn_create(struct backend *be, const struct be_bn_desc *d)
{
	char shape[160];
	struct be_op *op;

	if (be_bn_check(be, d) < 0)
		return NULL;
	if (!(op = op_new(be, CPU_BN, "bn", be_bn_str(d, shape, sizeof(shape)))))
		return NULL;
	op->d.bn = *d;
	return op;
}

static int cpu_bn_fwd_train(struct backend *be, struct be_op *op, const float *x, const float *z,
			    const float *gamma, const float *beta_, float *y, float *save_mean,
			    float *save_invstd, float *running_mean, float *running_var,
			    float momentum)
{
	if (!op_is(be, op, CPU_BN, "bn_fwd_train") ||
	    be_bn_z_check(be, &op->d.bn, z, "bn_fwd_train") < 0)
		return -1;
	const struct be_bn_desc *d = &op->d.bn;
	struct cpu_act a = act_of(ctx_of(be), d->n, d->c, (size_t)d->h * d->w);
	if ((double)d->n * d->h * d->w < 2)
		return be_errf(be, "bn_fwd_train%s: training needs more than one value per channel",
			       op->what);
	cpu_act_bn_fwd(d, &a, x, z, gamma, beta_, y, save_mean, save_invstd, running_mean,
		       running_var, momentum);
	return 0;
}

static int cpu_bn_fwd_infer(struct backend *be, struct be_op *op, const float *x, const float *z,
			    const float *gamma, const float *beta_, const float *running_mean,
			    const float *running_var, float *y)
{
	if (!op_is(be, op, CPU_BN, "bn_fwd_infer") ||
	    be_bn_z_check(be, &op->d.bn, z, "bn_fwd_infer") < 0)
		return -1;
	const struct be_bn_desc *d = &op->d.bn;
	struct cpu_act a = act_of(ctx_of(be), d->n, d->c, (size_t)d->h * d->w);
	cpu_act_bn_fwd(d, &a, x, z, gamma, beta_, y, NULL, NULL, (float *)running_mean,
		       (float *)running_var, 0.0f);
	return 0;
}

static int cpu_bn_bwd(struct backend *be, struct be_op *op, const float *x, const float *y,
		      const float *dy, const float *gamma, const float *save_mean,
		      const float *save_invstd, float *dx, float *dz, float bz, float *dgamma,
		      float *dbeta, float beta)
{
	if (!op_is(be, op, CPU_BN, "bn_bwd") || be_bn_z_check(be, &op->d.bn, dz, "bn_bwd") < 0)
		return -1;
	const struct be_bn_desc *d = &op->d.bn;
	struct cpu_act a = act_of(ctx_of(be), d->n, d->c, (size_t)d->h * d->w);
	cpu_act_bn_bwd(d, &a, x, y, dy, gamma, save_mean, save_invstd, dx, dz, bz, dgamma, dbeta,
		       beta);
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * Pooling: oneDNN's in the acts' layout, but for max pooling's backward, an own kernel
 * (backend_cpu_act.c): it finds each window's first maximum in x again, which sends ties where
 * PyTorch sends them and keeps no state between forward and backward. */

static struct be_op *cpu_pool_create(struct backend *be, struct be_pool_desc *d)
{
	struct cpu_ctx *ctx = ctx_of(be);
	const char *fn = "pool_create";
	char shape[160];
	struct be_op *op = NULL;
	dnnl_primitive_desc_t pd = NULL, fwd_pd = NULL;
	dnnl_dims_t strides = {d->stride, d->stride}, kernel = {d->kh, d->kw};
	dnnl_dims_t pl = {d->pad, d->pad}, pr;
	int max = d->kind == BE_POOL_MAX;
	dnnl_alg_kind_t alg = max ? dnnl_pooling_max : dnnl_pooling_avg_include_padding;
	int rv = -1;

	if (be_pool_check(be, d) < 0)
		return NULL;
	be_pool_str(d, shape, sizeof(shape));
	if (!(op = op_new(be, CPU_POOL, "pool", shape)))
		return NULL;
	const char *what = op->what;
	op->d.pool = *d;
	pr[0] = (int64_t)(d->oh - 1) * d->stride + d->kh - d->h - d->pad;
	pr[1] = (int64_t)(d->ow - 1) * d->stride + d->kw - d->w - d->pad;
	cpu_md x = md_act(ctx, d->n, d->c, d->h, d->w), y = md_act(ctx, d->n, d->c, d->oh, d->ow);

	/* Inference for max: no workspace to write, backward does not need one. */
	DNNL_TRY(cpu_pool_fwd_pd,
		 (&pd, ctx->eng, max ? dnnl_forward_inference : dnnl_forward_training, alg, x, y,
		  strides, kernel, pl, pr));
	struct arg_spec fwd[] = {{DNNL_ARG_SRC, ARG_IN, x}, {DNNL_ARG_DST, ARG_OUT, y}};
	if (pass_create(be, op, &op->pass[PASS_FWD], &pd, &fwd_pd, fwd, 2, fn) < 0)
		goto out;
	if (!max) {
		DNNL_TRY(cpu_pool_bwd_pd,
			 (&pd, ctx->eng, alg, x, y, strides, kernel, pl, pr, fwd_pd));
		struct arg_spec bwd[] = {{DNNL_ARG_DIFF_DST, ARG_IN, y},
					 {DNNL_ARG_DIFF_SRC, ARG_OUT, x}};
		if (pass_create(be, op, &op->pass[PASS_BWD_DATA], &pd, NULL, bwd, 2, fn) < 0)
			goto out;
	} else if (ctx->bf16 && arena_reserve(be, (size_t)d->n * d->c * d->h * d->w * sizeof(float),
					      fn, what) < 0) {
		goto out; /* max pooling's bfloat16 gradient is summed in float32 there */
	}
	rv = 0;
out:
	dnnl_primitive_desc_destroy(pd);
	dnnl_primitive_desc_destroy(fwd_pd);
	cpu_md_destroy(x), cpu_md_destroy(y);
	if (rv < 0) {
		cpu_op_destroy(be, op);
		return NULL;
	}
	return op;
}

static int cpu_pool_fwd(struct backend *be, struct be_op *op, const float *x, float *y)
{
	struct cpu_ctx *ctx = ctx_of(be);

	if (!op_is(be, op, CPU_POOL, "pool_fwd"))
		return -1;
	const struct be_pool_desc *d = &op->d.pool;
	if (d->kind == BE_POOL_MAX && d->pad == 0 && !ctx->bf16 && act_bs(ctx, d->c) == 1) {
		cpu_act_maxpool_fwd_nchw(d, x, y); /* oneDNN's is its reference loop there */
		return 0;
	}
	void *ptr[] = {(void *)x, y};
	return pass_run(be, op, &op->pass[PASS_FWD], ptr, 0.0f, "pool_fwd");
}

static int cpu_pool_bwd(struct backend *be, struct be_op *op, const float *x, const float *y,
			const float *dy, float *dx, float beta)
{
	struct cpu_ctx *ctx = ctx_of(be);

	(void)y;
	if (!op_is(be, op, CPU_POOL, "pool_bwd"))
		return -1;
	const struct be_pool_desc *d = &op->d.pool;
	if (d->kind == BE_POOL_MAX) {
		cpu_act_maxpool_bwd(d, act_bs(ctx, d->c), ctx->bf16, x, dy, dx, beta,
				    ctx->bf16 ? (float *)ctx->arena : NULL);
		return 0;
	}
	void *ptr[] = {(void *)dy, dx};
	return pass_run(be, op, &op->pass[PASS_BWD_DATA], ptr, beta, "pool_bwd");
}

/* ---------------------------------------------------------------------------------------
 * Inner product (linear). Rows [n][features] are the same in every act layout; a flattened
 * c x h x w act stored in channel blocks is given to oneDNN as what it is (4-D, blocked), with
 * the float32 weights [out][c][h][w] reordered to match. */

static struct be_op *cpu_linear_create(struct backend *be, const struct be_linear_desc *d)
{
	struct cpu_ctx *ctx = ctx_of(be);
	const char *fn = "linear_create";
	char shape[160];
	struct be_op *op = NULL;
	dnnl_primitive_desc_t pd = NULL, fwd_pd = NULL;
	int rv = -1;

	if (be_linear_check(be, d) < 0)
		return NULL;
	be_linear_str(d, shape, sizeof(shape));
	if (!(op = op_new(be, CPU_LINEAR, "linear", shape)))
		return NULL;
	const char *what = op->what;
	op->d.linear = *d;
	int blocked = d->c > 0 && act_bs(ctx, d->c) > 1;
	int nd = blocked ? 4 : 2;
	const int64_t wd4[] = {d->out, d->c, d->h, d->w};
	const int64_t xd2[] = {d->n, d->in}, wd2[] = {d->out, d->in};
	const int64_t *wd = blocked ? wd4 : wd2;
	dnnl_format_tag_t any = dnnl_format_tag_any, wtag = blocked ? dnnl_oihw : dnnl_ab;
	cpu_md x = blocked ? md_act(ctx, d->n, d->c, d->h, d->w) : md_new(2, xd2, ctx->dt, dnnl_ab);
	cpu_md w = md_new(nd, wd, dnnl_f32, wtag);
	cpu_md b = md_new(1, (int64_t[]){d->out}, dnnl_f32, dnnl_a);
	cpu_md y = md_new(2, (int64_t[]){d->n, d->out}, ctx->dt, dnnl_ab);
	/* Float32 rows take the weights as they are (a plain GEMM); blocked inputs and bfloat16
	 * get them in oneDNN's layout and type, reordered per call. */
	int own = blocked || ctx->bf16;
	cpu_md wa = md_new(nd, wd, ctx->dt, any), dwa = md_new(nd, wd, dnnl_f32, any);
	cpu_cmd pw = own ? wa : w, pdw = own ? dwa : w, bias = d->has_bias ? b : NULL;

	DNNL_TRY(cpu_ip_fwd_pd, (&pd, ctx->eng, dnnl_forward_training, x, pw, bias, y));
	struct arg_spec fwd[] = {{DNNL_ARG_SRC, ARG_IN, x},
				 {DNNL_ARG_WEIGHTS, ARG_IN, w},
				 {DNNL_ARG_DST, ARG_OUT, y},
				 {DNNL_ARG_BIAS, ARG_IN, b}};
	if (pass_create(be, op, &op->pass[PASS_FWD], &pd, &fwd_pd, fwd, 3 + !!d->has_bias, fn) < 0)
		goto out;
	DNNL_TRY(cpu_ip_bwd_data_pd, (&pd, ctx->eng, x, pw, y, fwd_pd));
	struct arg_spec bwd_data[] = {{DNNL_ARG_DIFF_DST, ARG_IN, y},
				      {DNNL_ARG_WEIGHTS, ARG_IN, w},
				      {DNNL_ARG_DIFF_SRC, ARG_OUT, x}};
	if (pass_create(be, op, &op->pass[PASS_BWD_DATA], &pd, NULL, bwd_data, 3, fn) < 0)
		goto out;
	DNNL_TRY(cpu_ip_bwd_weights_pd, (&pd, ctx->eng, x, pdw, bias, y, fwd_pd));
	struct arg_spec bwd_w[] = {{DNNL_ARG_SRC, ARG_IN, x},
				   {DNNL_ARG_DIFF_DST, ARG_IN, y},
				   {DNNL_ARG_DIFF_WEIGHTS, ARG_OUT, w},
				   {DNNL_ARG_DIFF_BIAS, ARG_OUT, b}};
	if (pass_create(be, op, &op->pass[PASS_BWD_WEIGHTS], &pd, NULL, bwd_w, 3 + !!d->has_bias,
			fn) < 0)
		goto out;
	rv = 0;
out:
	dnnl_primitive_desc_destroy(pd);
	dnnl_primitive_desc_destroy(fwd_pd);
	cpu_md_destroy(x), cpu_md_destroy(w), cpu_md_destroy(b), cpu_md_destroy(y);
	cpu_md_destroy(wa), cpu_md_destroy(dwa);
	if (rv < 0) {
		cpu_op_destroy(be, op);
		return NULL;
	}
	return op;
}

static int cpu_linear_fwd(struct backend *be, struct be_op *op, const float *x, const float *wgt,
			  const float *bias, float *y)
{
	if (!op_is(be, op, CPU_LINEAR, "linear_fwd"))
		return -1;
	if (op->d.linear.has_bias && !bias)
		return be_errf(be, "linear_fwd%s: the op has a bias but bias is NULL", op->what);
	void *ptr[] = {(void *)x, (void *)wgt, y, (void *)bias};
	return pass_run(be, op, &op->pass[PASS_FWD], ptr, 0.0f, "linear_fwd");
}

static int cpu_linear_bwd_data(struct backend *be, struct be_op *op, const float *dy,
			       const float *wgt, float *dx, float beta)
{
	if (!op_is(be, op, CPU_LINEAR, "linear_bwd_data"))
		return -1;
	void *ptr[] = {(void *)dy, (void *)wgt, dx};
	return pass_run(be, op, &op->pass[PASS_BWD_DATA], ptr, beta, "linear_bwd_data");
}

static int cpu_linear_bwd_weights(struct backend *be, struct be_op *op, const float *x,
				  const float *dy, float *dwgt, float *dbias, float beta)
{
	if (!op_is(be, op, CPU_LINEAR, "linear_bwd_weights"))
		return -1;
	if (op->d.linear.has_bias && !dbias)
		return be_errf(be, "linear_bwd_weights%s: the op has a bias but dbias is NULL",
			       op->what);
	void *ptr[] = {(void *)x, (void *)dy, dwgt, dbias};
	return pass_run(be, op, &op->pass[PASS_BWD_WEIGHTS], ptr, beta, "linear_bwd_weights");
}

/* ---------------------------------------------------------------------------------------
 * Memory and the element-wise ops: memory-bound loops, as fast as oneDNN's eltwise without
 * a primitive per size. Acts in bfloat16 go through backend_cpu_act.c's; parameters and
 * gradients (fill, axpby, sumsq) are float32 always. */

static int cpu_fill(struct backend *be, float *x, float value, size_t n)
{
	(void)be;
	be_ref_fill(x, value, n, 1);
	return 0;
}

static int cpu_sync(struct backend *be)
{
	(void)be;
	return 0;
}

static int cpu_relu_fwd(struct backend *be, const float *x, float *y, size_t n)
{
	if (ctx_of(be)->bf16)
		cpu_bf16_relu_fwd((const uint16_t *)x, (uint16_t *)y, n);
	else
		be_ref_relu_fwd(x, y, n, 1);
	return 0;
}

static int cpu_relu_bwd(struct backend *be, const float *y, const float *dy, float *dx, size_t n,
			float beta)
{
	if (ctx_of(be)->bf16)
		cpu_bf16_relu_bwd((const uint16_t *)y, (const uint16_t *)dy, (uint16_t *)dx, n,
				  beta);
	else
		be_ref_relu_bwd(y, dy, dx, n, beta, 1);
	return 0;
}

static int cpu_input_u8(struct backend *be, const uint8_t *src, float *dst, int n, int c, int h,
			int w, const float *mean, const float *std)
{
	if (n < 0 || c < 1 || c > 4 || h < 1 || w < 1)
		return be_errf(be, "input_u8(n=%d c=%d h=%d w=%d): bad shape (1..4 channels)", n, c,
			       h, w);
	be_ref_input_u8(src, dst, n, c, h, w, mean, std, 1);
	return 0;
}

static int cpu_add(struct backend *be, const float *a, const float *b, float *y, size_t n)
{
	if (ctx_of(be)->bf16)
		cpu_bf16_add((const uint16_t *)a, (const uint16_t *)b, (uint16_t *)y, n);
	else
		be_ref_add(a, b, y, n, 1);
	return 0;
}

static int cpu_axpby(struct backend *be, float alpha, const float *x, float beta, float *y,
		     size_t n)
{
	(void)be;
	be_ref_axpby(alpha, x, beta, y, n, 1);
	return 0;
}

static int cpu_gap_fwd(struct backend *be, const float *x, float *y, int n, int c, int hw)
{
	if (n <= 0 || c <= 0 || hw <= 0)
		return be_errf(be, "gap_fwd(n=%d c=%d hw=%d): sizes must be positive", n, c, hw);
	struct cpu_act a = act_of(ctx_of(be), n, c, (size_t)hw);
	cpu_act_gap_fwd(&a, x, y);
	return 0;
}

static int cpu_gap_bwd(struct backend *be, const float *dy, float *dx, int n, int c, int hw,
		       float beta)
{
	if (n <= 0 || c <= 0 || hw <= 0)
		return be_errf(be, "gap_bwd(n=%d c=%d hw=%d): sizes must be positive", n, c, hw);
	struct cpu_act a = act_of(ctx_of(be), n, c, (size_t)hw);
	cpu_act_gap_bwd(&a, dy, dx, beta);
	return 0;
}

/* bfloat16 logits are widened into the arena, and their gradient rounded from there. */
static int cpu_xent(struct backend *be, const float *logits, const int32_t *labels, int n,
		    int classes, float smoothing, float scale, float *loss, int *correct,
		    float *dlogits)
{
	struct cpu_ctx *ctx = ctx_of(be);
	size_t cnt = (size_t)(n > 0 ? n : 0) * (size_t)(classes > 0 ? classes : 0);

	if (!ctx->bf16)
		return be_ref_xent(be, logits, labels, n, classes, smoothing, scale, loss, correct,
				   dlogits, 1);
	if (arena_reserve(be, 2 * align64(cnt * sizeof(float)), "xent", "") < 0)
		return -1;
	float *l = (float *)ctx->arena, *g = (float *)(ctx->arena + align64(cnt * sizeof(float)));
	cpu_bf16_to_f32((const uint16_t *)logits, l, cnt);
	if (be_ref_xent(be, l, labels, n, classes, smoothing, scale, loss, correct,
			dlogits ? g : NULL, 1) < 0)
		return -1;
	if (dlogits)
		cpu_bf16_from_f32(g, (uint16_t *)dlogits, cnt);
	return 0;
}

static int cpu_sumsq(struct backend *be, const float *x, size_t n, double *out)
{
	(void)be;
	*out = be_ref_sumsq(x, n, 1);
	return 0;
}

static int cpu_act_import_op(struct backend *be, const float *x, void *y, int n, int c, int h,
			     int w)
{
	struct cpu_act a = act_of(ctx_of(be), n, c, (size_t)h * w);

	if (n < 0 || c <= 0 || h <= 0 || w <= 0)
		return be_errf(be, "act_import(n=%d c=%d h=%d w=%d): bad shape", n, c, h, w);
	cpu_act_import(&a, x, y);
	return 0;
}

static int cpu_act_export_op(struct backend *be, const void *x, float *y, int n, int c, int h,
			     int w)
{
	struct cpu_act a = act_of(ctx_of(be), n, c, (size_t)h * w);

	if (n < 0 || c <= 0 || h <= 0 || w <= 0)
		return be_errf(be, "act_export(n=%d c=%d h=%d w=%d): bad shape", n, c, h, w);
	cpu_act_export(&a, x, y);
	return 0;
}

static int cpu_act_accum(struct backend *be, const void *dy, void *g, size_t n, float beta)
{
	if (ctx_of(be)->bf16)
		cpu_bf16_accum(dy, g, n, beta);
	else
		be_ref_axpby(1.0f, dy, beta, g, n, 1);
	return 0;
}

static void cpu_destroy(struct backend *be)
{
	struct cpu_ctx *ctx;

	if (!be)
		return;
	ctx = be->priv;
	if (ctx) {
		dnnl_stream_destroy(ctx->stream);
		dnnl_engine_destroy(ctx->eng);
		be_host_free(ctx->arena);
		free(ctx);
	}
	free(be);
}

static const char *isa_name(dnnl_cpu_isa_t isa)
{
	static const struct {
		dnnl_cpu_isa_t isa;
		const char *name;
	} isas[] = {
	    {dnnl_cpu_isa_sse41, "sse41"},
	    {dnnl_cpu_isa_avx, "avx"},
	    {dnnl_cpu_isa_avx2, "avx2"},
	    {dnnl_cpu_isa_avx2_vnni, "avx2_vnni"},
	    {dnnl_cpu_isa_avx512_core, "avx512_core"},
	    {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
	    {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
	    {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
	    CPU_ISA_NAMES_3 /* oneDNN 3's newer levels */
	};

	for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++)
		if (isas[i].isa == isa)
			return isas[i].name;
	return NULL;
}

void be_cpu_describe(char *buf, size_t len)
{
	const dnnl_version_t *v = dnnl_version();
	dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
	const char *name = isa_name(isa);

	if (name)
		snprintf(buf, len, "oneDNN %d.%d.%d, %s", v->major, v->minor, v->patch, name);
	else
		snprintf(buf, len, "oneDNN %d.%d.%d, instruction set 0x%x", v->major, v->minor,
			 v->patch, (unsigned)isa);
}

const char *be_cpu_kernels(void)
{
	return cpu_act_use(NULL);
}

/* bfloat16 arithmetic in hardware: AVX512_BF16 (avx512_core_bf16) or AMX, as oneDNN sees it
 * (after ONEDNN_MAX_CPU_ISA); each level's flags include the ones below it. Elsewhere oneDNN
 * would emulate it, slower than float32. */
int be_cpu_bf16(struct dp_error *why)
{
	dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
	const char *name = isa_name(isa);

	if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
	    (unsigned)dnnl_cpu_isa_avx512_core_bf16)
		return 1;
	errprintf(why, "bfloat16 needs AVX512_BF16 or AMX; oneDNN runs %s here",
		  name ? name : "an older instruction set");
	return 0;
}

#define CPU_OPS_INIT                                                                               \
	.alloc = be_host_op_alloc, .free = be_host_op_free, .to_host = be_host_op_copy,            \
	.from_host = be_host_op_copy, .fill = cpu_fill, .sync = cpu_sync,                          \
	.conv_create = cpu_conv_create, .conv_fwd = cpu_conv_fwd,                                  \
	.conv_bwd_data = cpu_conv_bwd_data, .conv_bwd_weights = cpu_conv_bwd_weights,              \
	.bn_create = cpu_bn_create, .bn_fwd_train = cpu_bn_fwd_train,                              \
	.bn_fwd_infer = cpu_bn_fwd_infer, .bn_bwd = cpu_bn_bwd, .pool_create = cpu_pool_create,    \
	.pool_fwd = cpu_pool_fwd, .pool_bwd = cpu_pool_bwd, .linear_create = cpu_linear_create,    \
	.linear_fwd = cpu_linear_fwd, .linear_bwd_data = cpu_linear_bwd_data,                      \
	.linear_bwd_weights = cpu_linear_bwd_weights, .op_destroy = cpu_op_destroy,                \
	.relu_fwd = cpu_relu_fwd, .relu_bwd = cpu_relu_bwd, .add = cpu_add, .axpby = cpu_axpby,    \
	.gap_fwd = cpu_gap_fwd, .gap_bwd = cpu_gap_bwd, .xent = cpu_xent, .sumsq = cpu_sumsq,      \
	.destroy = cpu_destroy, .input_u8 = cpu_input_u8

/* Acts in oneDNN's layouts or in bfloat16: the caller converts through act_import/act_export.
 * Float32 NCHW throughout (DPTRAIN_CPU_CONV=plain|blocked): an act is a float array, and nn.c
 * uses its input batch and axpby directly. */
static const struct backend_ops cpu_ops = {.name = "cpu",
					   CPU_OPS_INIT,
					   .act_import = cpu_act_import_op,
					   .act_export = cpu_act_export_op,
					   .act_accum = cpu_act_accum};
static const struct backend_ops cpu_nchw_ops = {.name = "cpu", CPU_OPS_INIT};

/* What the probes ask oneDNN about: the forward of a ResNet-like convolution (batch 32, 64 ->
 * 64 channels, 14x14, 3x3 stride 1 pad 1), its acts of type dt in layout tag (any: oneDNN's
 * choice), its weights oneDNN's choice, by algorithm alg. */
static const int64_t probe_xd[] = {32, 64, 14, 14};

static dnnl_status_t probe_conv(dnnl_primitive_desc_t *pd, dnnl_engine_t eng, dnnl_data_type_t dt,
				dnnl_format_tag_t tag, dnnl_alg_kind_t alg)
{
	const int64_t wd[] = {64, 64, 3, 3};
	const dnnl_dims_t one = {1, 1};
	cpu_md x = md_new(4, probe_xd, dt, tag), w = md_new(4, wd, dt, dnnl_format_tag_any);
	dnnl_status_t st =
	    cpu_conv_fwd_pd(pd, eng, dnnl_forward_training, alg, x, w, NULL, x, one, one, one);

	cpu_md_destroy(x), cpu_md_destroy(w);
	return st;
}

const char *be_cpu_conv_impl(struct backend *be, struct be_op *op, int pass)
{
	const char *impl = NULL;
	const_dnnl_primitive_desc_t pd = NULL;

	if ((be->ops == &cpu_ops || be->ops == &cpu_nchw_ops) && op && op->kind == CPU_CONV &&
	    op->wino && pass >= 0 && pass <= 2)
		return "dptrain_wino_4x3";
	if ((be->ops != &cpu_ops && be->ops != &cpu_nchw_ops) || !op || op->kind != CPU_CONV ||
	    pass < 0 || pass > 2 || !op->pass[pass].prim ||
	    dnnl_primitive_get_primitive_desc(op->pass[pass].prim, &pd) != dnnl_success ||
	    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
	    !impl)
		return "";
	return impl;
}

/* The channel block of the acts in the layout oneDNN's convolutions take for type dt here (16
 * or 8: nChw16c, nChw8c; 0: NHWC; 1: NCHW), asked of a ResNet-like 3x3 convolution's forward
 * with every layout left to it; -1 when oneDNN refuses it (*st says why). */
static int probe_block(dnnl_engine_t eng, dnnl_data_type_t dt, dnnl_status_t *st)
{
	static const struct {
		dnnl_format_tag_t tag;
		int block;
	} known[] = {{dnnl_nChw16c, 16}, {dnnl_nChw8c, 8}, {dnnl_nhwc, 0}, {dnnl_nchw, 1}};
	dnnl_primitive_desc_t pd = NULL;
	int block = 1;

	*st = probe_conv(&pd, eng, dt, dnnl_format_tag_any, dnnl_convolution_direct);
	if (*st != dnnl_success)
		return -1;
	cpu_cmd src = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		cpu_md k = md_new(4, probe_xd, dt, known[i].tag);
		int same = k && dnnl_memory_desc_equal(k, src);
		cpu_md_destroy(k);
		if (same) {
			block = known[i].block;
			break;
		}
	}
	dnnl_primitive_desc_destroy(pd);
	return block;
}

int be_cpu_winograd(void)
{
	dnnl_engine_t eng = NULL;
	dnnl_primitive_desc_t pd = NULL;
	dnnl_status_t st;
	int rv = 0;

	if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success)
		return 0;
	if (probe_conv(&pd, eng, dnnl_f32, dnnl_nChw16c, dnnl_convolution_winograd) == dnnl_success)
		rv = 2;
	else if (probe_block(eng, dnnl_f32, &st) >= 8) /* cpu_conv_own_wino's acts */
		rv = 1;
	dnnl_primitive_desc_destroy(pd);
	dnnl_engine_destroy(eng);
	return rv;
}

/* The layout of the acts (ctx->block): probe_block's for their type. */
static int cpu_probe_layout(struct cpu_ctx *ctx, struct dp_error *err)
{
	dnnl_status_t st;
	int block = probe_block(ctx->eng, ctx->dt, &st);

	ctx->block = block < 0 ? 1 : block;
	if (block < 0)
		errprintf(err, "cpu backend: a %s convolution: %s",
			  ctx->bf16 ? "bfloat16" : "float32", dnnl_status2str(st));
	return block < 0 ? -1 : 0;
}

struct backend *be_cpu_create(int threads, struct dp_error *err)
{
	return be_cpu_create_opts(threads, NULL, err);
}

struct backend *be_cpu_create_opts(int threads, const struct be_cpu_opts *o, struct dp_error *err)
{
	struct backend *be = calloc(1, sizeof(*be));
	struct cpu_ctx *ctx = calloc(1, sizeof(*ctx));
	enum be_dtype dt = o ? o->act_dtype : BE_F32;
	dnnl_status_t st;
	const char *conv = getenv(ENV_DPTRAIN_CPU_CONV), *ipmax = getenv(ENV_DPTRAIN_CPU_BWDW_IP);
	const char *alg = getenv(ENV_DPTRAIN_CPU_CONV_ALG);

	if (!be || !ctx) {
		errprintf(err, "cpu backend: out of memory");
		free(be);
		free(ctx);
		return NULL;
	}
	be->priv = ctx;
	if (dt != BE_F32 && dt != BE_BF16) {
		errprintf(err, "cpu backend: activations in float32 or bfloat16, not type %d",
			  (int)dt);
		goto fail;
	}
	if (dt == BE_BF16 && !be_cpu_bf16(err)) {
		errprefix(err, "cpu backend");
		goto fail;
	}
	ctx->bf16 = dt == BE_BF16;
	ctx->dt = ctx->bf16 ? dnnl_bf16 : dnnl_f32;
	be->act_dtype = dt;
	be->act_size = ctx->bf16 ? sizeof(uint16_t) : sizeof(float);
	/* For benchmarks: acts NCHW, plain or blocked layouts inside every convolution. */
	if (conv && strcmp(conv, "plain") == 0)
		ctx->conv = CONV_PLAIN;
	else if (conv && strcmp(conv, "blocked") == 0)
		ctx->conv = CONV_BLOCKED;
	else if (conv && *conv && strcmp(conv, "auto") != 0) {
		errprintf(err, "cpu backend: DPTRAIN_CPU_CONV=%s: want plain, blocked or auto",
			  conv);
		goto fail;
	}
	ctx->alg = dnnl_convolution_auto;
	if (alg && strcmp(alg, "direct") == 0)
		ctx->alg = dnnl_convolution_direct;
	else if (alg && strcmp(alg, "winograd") == 0)
		ctx->alg = dnnl_convolution_winograd;
	else if (alg && *alg && strcmp(alg, "auto") != 0) {
		errprintf(err,
			  "cpu backend: DPTRAIN_CPU_CONV_ALG=%s: want auto, direct or winograd",
			  alg);
		goto fail;
	}
	ctx->bwdw_ip_max = CPU_BWDW_IP_MAX;
	if (ipmax && *ipmax) {
		char *end;
		errno = 0;
		ctx->bwdw_ip_max = strtol(ipmax, &end, 10);
		if (errno || *end || ctx->bwdw_ip_max < 0) {
			errprintf(err,
				  "cpu backend: DPTRAIN_CPU_BWDW_IP=%s: want a number of output "
				  "pixels, 0 or more",
				  ipmax);
			goto fail;
		}
	}
	if (threads < 0) {
		errprintf(err, "cpu backend: threads must be 0 (the default) or more, not %d",
			  threads);
		goto fail;
	}
#ifdef _OPENMP
	/* oneDNN's OpenMP runtime runs on omp_get_max_threads() threads. */
	if (threads > 0)
		omp_set_num_threads(threads);
	be->threads = omp_get_max_threads();
#else
	be->threads = 1;
#endif
	if ((st = dnnl_engine_create(&ctx->eng, dnnl_cpu, 0)) != dnnl_success) {
		errprintf(err, "cpu backend: dnnl_engine_create: %s", dnnl_status2str(st));
		goto fail;
	}
	if ((st = dnnl_stream_create(&ctx->stream, ctx->eng, dnnl_stream_default_flags)) !=
	    dnnl_success) {
		errprintf(err, "cpu backend: dnnl_stream_create: %s", dnnl_status2str(st));
		goto fail;
	}
	if (ctx->conv != CONV_AUTO)
		ctx->block = 1;
	else if (cpu_probe_layout(ctx, err) < 0)
		goto fail;
	be->ops = ctx->block == 1 && !ctx->bf16 ? &cpu_nchw_ops : &cpu_ops;
	cpu_act_use(NULL); /* the level of our kernels: oneDNN's */
	return be;
fail:
	cpu_destroy(be);
	return NULL;
}

#endif /* HAVE_DNNL */
