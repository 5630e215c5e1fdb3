/* cpu_act_levels.c — the CPU backend's own kernels (backend_cpu_act.c) built for each x86
 * level give the same bits as the baseline build: batch norm forward (training, with the
 * residual and the ReLU fused, and inference) and backward (every dz and beta case), max
 * pooling's backward (overlapping and not) and its NCHW forward, global average pooling, the layout
 * conversions and the bfloat16 element-wise ops, in NCHW, 8- and 16-channel blocks, NHWC and
 * bfloat16. Levels this CPU lacks are skipped, saying so; t/t0020-cpu-isa.t checks that the trainer
 * picks the level oneDNN runs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "t/lib/tap.h"
#include "trainer/backend/backend_cpu_act.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	float v = (float)((rng >> 40) % 2001) / 1000.0f - 1.0f; /* -1..1, some exact zeros */
	return v;
}

static void *fill(size_t n, int bf16)
{
	void *p = malloc(n * (bf16 ? 2 : 4));
	for (size_t i = 0; i < n; i++) {
		float v = frand();
		if (bf16)
			((uint16_t *)p)[i] = cpu_bf16(v);
		else
			((float *)p)[i] = v;
	}
	return p;
}

static void *copy(const void *p, size_t bytes)
{
	void *q = malloc(bytes);
	memcpy(q, p, bytes);
	return q;
}

/* Runs every kernel at the current level on the same inputs; each output goes to out[k]. */
#define NOUT 40
struct outs {
	void *p[NOUT];
	size_t bytes[NOUT];
	int n;
};

static void keep(struct outs *o, void *p, size_t bytes)
{
	if (o->n == NOUT)
		bail_out("more than %d outputs: raise NOUT", NOUT);
	o->p[o->n] = p;
	o->bytes[o->n] = bytes;
	o->n++;
}

static void run_all(const struct cpu_act *a, struct outs *o)
{
	int bf = a->bf16, es = bf ? 2 : 4;
	size_t n = (size_t)a->n * a->c * a->hw, nb = n * es;
	int h = 7, w = (int)a->hw / 7;
	struct be_bn_desc d = {a->n, a->c, h, w, 1e-5f, 1, 1};
	rng = 12345; /* the same inputs at every level */
	float *gamma = fill(a->c, 0), *beta_ = fill(a->c, 0);
	void *x = fill(n, bf), *z = fill(n, bf), *dy = fill(n, bf), *dzi = fill(n, bf);
	void *dxi = fill(n, bf);
	float *rm = calloc(a->c, 4), *rv = malloc(a->c * 4), *sm = malloc(a->c * 4),
	      *si = malloc(a->c * 4);
	for (int c = 0; c < a->c; c++)
		rv[c] = 1.0f;

	for (int relu = 0; relu < 2; relu++) {
		d.fuse_relu = relu;
		void *y = malloc(nb);
		cpu_act_bn_fwd(&d, a, x, relu ? z : NULL, gamma, beta_, y, sm, si, rm, rv, 0.1f);
		keep(o, y, nb);
		keep(o, copy(sm, a->c * 4), a->c * 4);
		keep(o, copy(si, a->c * 4), a->c * 4);
		keep(o, copy(rv, a->c * 4), a->c * 4);
		void *yi = malloc(nb);
		cpu_act_bn_fwd(&d, a, x, NULL, gamma, beta_, yi, NULL, NULL, rm, rv, 0.1f);
		keep(o, yi, nb);
		/* backward: dz absent, dz written, dz accumulated; beta 0 and 0.5 */
		for (int mode = 0; mode < 3; mode++) {
			void *dx = copy(dxi, nb), *dz = copy(dzi, nb);
			float *dg = calloc(a->c, 4), *db = calloc(a->c, 4);
			cpu_act_bn_bwd(&d, a, x, y, dy, gamma, sm, si, dx, mode ? dz : NULL,
				       mode == 2 ? 0.5f : 0.0f, dg, db, mode == 1 ? 0.5f : 0.0f);
			keep(o, dx, nb);
			if (mode)
				keep(o, dz, nb);
			else
				free(dz);
			free(dg), free(db); /* sums in double: same at every level as dx shows */
		}
	}
	/* max pooling's backward: 3x3 stride 2 pad 1 (overlapping) and 2x2 stride 2 */
	for (int k = 2; k <= 3; k++) {
		struct be_pool_desc p = {.kind = BE_POOL_MAX,
					 .n = a->n,
					 .c = a->c,
					 .h = h,
					 .w = w,
					 .kh = k,
					 .kw = k,
					 .stride = 2,
					 .pad = k == 3};
		p.oh = (h + 2 * p.pad - k) / 2 + 1, p.ow = (w + 2 * p.pad - k) / 2 + 1;
		size_t on = (size_t)a->n * a->c * p.oh * p.ow;
		void *pdy = fill(on, bf), *dx = copy(dxi, nb);
		float *scratch = malloc(n * 4);
		cpu_act_maxpool_bwd(&p, a->bs, bf, x, pdy, dx, k == 3 ? 0.5f : 0.0f, scratch);
		keep(o, dx, nb);
		free(pdy), free(scratch);
		if (a->bs == 1 && !bf) { /* the NCHW forward, unpadded */
			struct be_pool_desc q = p;
			q.pad = 0, q.oh = (h - k) / 2 + 1, q.ow = (w - k) / 2 + 1;
			size_t qn = (size_t)a->n * a->c * q.oh * q.ow;
			float *qy = malloc(qn * 4);
			cpu_act_maxpool_fwd_nchw(&q, x, qy);
			keep(o, qy, qn * 4);
		}
	}
	void *g = malloc((size_t)a->n * a->c * es);
	cpu_act_gap_fwd(a, x, g);
	keep(o, g, (size_t)a->n * a->c * es);
	void *gdx = copy(dxi, nb);
	cpu_act_gap_bwd(a, g, gdx, 0.5f);
	keep(o, gdx, nb);
	float *ex = malloc(n * 4);
	cpu_act_export(a, x, ex);
	keep(o, ex, n * 4);
	void *im = malloc(nb);
	cpu_act_import(a, ex, im);
	keep(o, im, nb);
	free(x), free(z), free(dy), free(dzi), free(dxi), free(gamma), free(beta_);
	free(rm), free(rv), free(sm), free(si);
}

static void run_bf16(struct outs *o)
{
	size_t n = 1000;
	rng = 777;
	uint16_t *a = fill(n, 1), *b = fill(n, 1), *y = malloc(2 * n), *r = malloc(2 * n);
	uint16_t *dx = fill(n, 1), *acc = fill(n, 1), *sc = fill(n, 1);
	float *f = malloc(4 * n), *ff = fill(n, 0);
	uint16_t *bf = malloc(2 * n);

	cpu_bf16_relu_fwd(a, r, n);
	keep(o, r, 2 * n);
	cpu_bf16_relu_bwd(a, b, dx, n, 0.5f);
	keep(o, dx, 2 * n);
	cpu_bf16_add(a, b, y, n);
	keep(o, y, 2 * n);
	cpu_bf16_accum(a, acc, n, 0.5f);
	keep(o, acc, 2 * n);
	cpu_bf16_scale(sc, 0.3f, n);
	keep(o, sc, 2 * n);
	cpu_bf16_to_f32(a, f, n);
	keep(o, f, 4 * n);
	cpu_bf16_from_f32(ff, bf, n);
	keep(o, bf, 2 * n);
	free(a), free(b), free(ff);
}

static void free_outs(struct outs *o)
{
	for (int i = 0; i < o->n; i++)
		free(o->p[i]);
	o->n = 0;
}

static int same(const struct outs *x, const struct outs *y, int *first)
{
	if (x->n != y->n)
		return 0;
	for (int i = 0; i < x->n; i++)
		if (x->bytes[i] != y->bytes[i] || memcmp(x->p[i], y->p[i], x->bytes[i])) {
			*first = i;
			return 0;
		}
	return 1;
}

int main(void)
{
	static const struct {
		int bs, c, bf16;
		const char *what;
	} lay[] = {{1, 24, 0, "NCHW float32"},
		   {8, 24, 0, "8-channel blocks"},
		   {16, 32, 0, "16-channel blocks"},
		   {16, 32, 1, "16-channel blocks, bfloat16"},
		   {24, 24, 1, "NHWC bfloat16"},
		   {24, 24, 0, "NHWC float32"},
		   {64, 64, 1, "NHWC bfloat16, 64 channels"}};
	const char *levels[] = {"avx2", "avx512"};
	const int nlay = sizeof(lay) / sizeof(lay[0]);

	plan(2 * (nlay + 1) + 4);
	ok(cpu_act_use("base") && strcmp(cpu_act_level(), "base") == 0, "the base level is there");
	ok(!cpu_act_use("sse9"), "an unknown level is refused");
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx512f"))
		ok(!cpu_act_use("avx512") && strcmp(cpu_act_level(), "base") == 0,
		   "avx512 is refused on a CPU without AVX-512, the level unchanged (was SIGILL)");
	else
		skip(1, "this CPU has AVX-512: no level to refuse");
#else
	skip(1, "not x86-64: no level to refuse");
#endif
	for (int l = 0; l < 2; l++) {
		int have = 0;
#if defined(__x86_64__)
		__builtin_cpu_init();
		have = l == 0 ? __builtin_cpu_supports("avx2")
			      : __builtin_cpu_supports("avx512f") &&
				    __builtin_cpu_supports("avx512bw") &&
				    __builtin_cpu_supports("avx512vl") &&
				    __builtin_cpu_supports("avx512dq");
#endif
		if (!have) { /* a CPU without it: the clean-root check allows this skip */
			skip(nlay + 1, "this CPU has no %s", levels[l]);
			continue;
		}
		if (!cpu_act_use(levels[l])) {
			skip(nlay + 1, "this build has no %s", levels[l]);
			continue;
		}
		for (int i = 0; i < nlay; i++) {
			struct cpu_act a = {5, lay[i].c, lay[i].bs, 7 * 45, lay[i].bf16};
			struct outs base = {0}, lv = {0};
			int first = -1;
			cpu_act_use("base");
			run_all(&a, &base);
			cpu_act_use(levels[l]);
			run_all(&a, &lv);
			ok(same(&base, &lv, &first),
			   "%s: %s: every kernel gives the base level's bits", levels[l],
			   lay[i].what);
			if (first >= 0)
				diag("output %d differs", first);
			free_outs(&base), free_outs(&lv);
		}
		struct outs base = {0}, lv = {0};
		int first = -1;
		cpu_act_use("base");
		run_bf16(&base);
		cpu_act_use(levels[l]);
		run_bf16(&lv);
		ok(same(&base, &lv, &first),
		   "%s: bfloat16 element-wise ops give the base level's bits", levels[l]);
		if (first >= 0)
			diag("output %d differs", first);
		free_outs(&base), free_outs(&lv);
	}
	/* Batch norm reads a bfloat16 NHWC row 32 channels at a time where every thread gets a
	 * chunk, else 16: the same bits either way (1 thread: 32; 8 threads: 16 for 64 channels).
	 */
#ifdef _OPENMP
	{
		struct cpu_act a = {5, 64, 64, 7 * 45, 1};
		struct outs w32 = {0}, w16 = {0};
		int first = -1;
		if (!cpu_act_use("avx512") && !cpu_act_use("avx2"))
			cpu_act_use("base");
		omp_set_num_threads(1);
		run_all(&a, &w32);
		omp_set_num_threads(8);
		run_all(&a, &w16);
		ok(same(&w32, &w16, &first),
		   "%s: NHWC bfloat16 batch norm: a run of 32-channel groups and 16-channel chunks "
		   "give the same bits",
		   cpu_act_level());
		if (first >= 0)
			diag("output %d differs", first);
		free_outs(&w32), free_outs(&w16);
	}
#else
	skip(1, "built without OpenMP: one chunk width");
#endif
	return done_testing();
}
