/* kernels_host.cc — the CUDA backend's own kernels (trainer/backend/cuda_*_kernels.cuh) run on
 * the host through t/unit/cuda_emu.h, against the reference backend, on any machine: a GPU
 * run (t/unit/backend_cuda.c) is not at hand for every change. Covered: batch norm's own
 * kernels (bf16; the scalar ones in both layouts and the vector ones in NHWC: forward, backward,
 * the fused ReLU and residual, in-place calls), max pooling's backward (ties and NaN: bit for
 * bit, as the GPU test demands), and the cross-entropy's arg-max with NaN logits. The emulation
 * runs each block's 256 threads as host threads: shapes are small. */
#include "t/unit/cuda_emu.h"

#include "trainer/backend/cuda_bn_kernels.cuh"
#include "trainer/backend/cuda_pool_kernels.cuh"
#include "trainer/backend/cuda_loss_kernels.cuh"

#include <vector>

extern "C" {
#include "common/error.h"
#include "t/lib/tap.h"
#include "trainer/backend/backend_ref.h"
}

static uint64_t rng_s = 20261127u;

static double urand(void) /* [0, 1) */
{
	uint64_t z = (rng_s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static float rb16(float v) /* v rounded to bf16 */
{
	return __bfloat162float(__float2bfloat16_rn(v));
}

/* An act tensor n x c x hw in a layout: host floats (NCHW, bf16-exact) to bf16 and back. */
static std::vector<bf16> to_act16(const std::vector<float> &v, int n, int c, size_t hw, int nhwc)
{
	std::vector<bf16> a(v.size());
	for (int s = 0; s < n; s++)
		for (int ch = 0; ch < c; ch++)
			for (size_t p = 0; p < hw; p++)
				a[act_at(s, ch, p, c, hw, nhwc)] =
				    __float2bfloat16_rn(v[((size_t)s * c + ch) * hw + p]);
	return a;
}

static std::vector<float> from_act16(const bf16 *a, int n, int c, size_t hw, int nhwc)
{
	std::vector<float> v((size_t)n * c * hw);
	for (int s = 0; s < n; s++)
		for (int ch = 0; ch < c; ch++)
			for (size_t p = 0; p < hw; p++)
				v[((size_t)s * c + ch) * hw + p] =
				    __bfloat162float(a[act_at(s, ch, p, c, hw, nhwc)]);
	return v;
}

/* 16-byte aligned storage for kernels' tensors (the vector kernels need it, as cudaMalloc's). */
template <typename T> struct dbuf {
	T *p;
	size_t n;
	explicit dbuf(size_t count) : n(count)
	{
		p = (T *)aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64);
		if (!p)
			bail_out("out of memory");
		memset((void *)p, 0xff, count * sizeof(T)); /* NaN poison */
	}
	dbuf(const dbuf &) = delete;
	dbuf &operator=(const dbuf &) = delete;
	~dbuf()
	{
		free(p);
	}
	void set(const std::vector<T> &v)
	{
		memcpy((void *)p, v.data(), v.size() * sizeof(T));
	}
};

/* Relative L2 error of got against want (NaN anywhere: infinity). */
static double rel_l2(const std::vector<float> &got, const std::vector<float> &want)
{
	double e = 0.0, w = 0.0;
	for (size_t i = 0; i < got.size(); i++) {
		if (isnan(got[i]) || isnan(want[i]))
			return INFINITY;
		e += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
		w += (double)want[i] * want[i];
	}
	return sqrt(e / (w > 1e-30 ? w : 1e-30));
}

/* ---- max pooling's backward: bit for bit against the reference ---- */

static void test_pool(struct be_pool_desc d, int nhwc, int levels, int nan)
{
	struct backend *ref;
	struct dp_error err = {""};
	char s[160];

	if (!(ref = be_ref_create(&err)))
		bail_out("be_ref_create: %s", err.text);
	struct be_op *op = ref->ops->pool_create(ref, &d);
	if (!op)
		bail_out("pool_create: %s", ref->err.text);
	size_t hw = (size_t)d.h * d.w, ohw = (size_t)d.oh * d.ow;
	size_t nx = (size_t)d.n * d.c * hw, ny = (size_t)d.n * d.c * ohw;
	std::vector<float> x(nx), dy(ny), y(ny), dx(nx, 0.0f);
	for (auto &v : x)
		v = levels ? (float)floor(urand() * levels) : rb16((float)(urand() * 2 - 1));
	for (auto &v : dy)
		v = rb16((float)(urand() * 2 - 1));
	if (nan)
		x[nx / 3] = NAN, x[nx / 3 + 1] = NAN;
	be_ref_pool_fwd(&d, x.data(), y.data(), 0);
	be_ref_pool_bwd(&d, x.data(), dy.data(), dx.data(), 0.0f, 0);

	dbuf<bf16> gx(nx), gy(ny), gdy(ny), gdx(nx);
	gx.set(to_act16(x, d.n, d.c, hw, nhwc));
	gdy.set(to_act16(dy, d.n, d.c, ohw, nhwc));
	emu_launch(dim3(1), CU_THREADS, k_pool_fwd<bf16>, d, (const bf16 *)gx.p, gy.p, ny, nhwc);
	emu_launch(dim3(1), CU_THREADS, k_pool_bwd<bf16>, d, (const bf16 *)gx.p, (const bf16 *)gy.p,
		   (const bf16 *)gdy.p, gdx.p, nx, 0.0f, nhwc);
	std::vector<float> hy = from_act16(gy.p, d.n, d.c, ohw, nhwc);
	std::vector<float> hdx = from_act16(gdx.p, d.n, d.c, hw, nhwc);
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < ny; i++)
		if (!(hy[i] == rb16(y[i]) || (isnan(hy[i]) && isnan(y[i]))))
			bad += !bad ? (first = i, 1) : 1;
	ok(!bad, "max pool(%s)%s%s %s: forward as the reference (%zu differ, first %zu)",
	   be_pool_str(&d, s, sizeof(s)), levels ? " ties" : "", nan ? " NaN" : "",
	   nhwc ? "nhwc" : "nchw", bad, first);
	bad = 0;
	for (size_t i = 0; i < nx; i++)
		if (!(hdx[i] == rb16(dx[i]) || (isnan(hdx[i]) && isnan(dx[i]))))
			bad += !bad ? (first = i, 1) : 1;
	ok(!bad,
	   "max pool(%s)%s%s %s: backward bit for bit as the reference (%zu differ, first %zu: "
	   "%g, want %g)",
	   be_pool_str(&d, s, sizeof(s)), levels ? " ties" : "", nan ? " NaN" : "",
	   nhwc ? "nhwc" : "nchw", bad, first, bad ? hdx[first] : 0.0, bad ? rb16(dx[first]) : 0.0);
	ref->ops->op_destroy(ref, op);
	ref->ops->destroy(ref);
}

/* ---- cross-entropy's arg-max with NaN logits ---- */

static void test_xent_nan(void)
{
	enum { N = 3, C = 300 };
	std::vector<float> l((size_t)N * C, 0.0f);
	int32_t lab[N] = {257, 0, 0};
	l[1] = NAN, l[257] = 5.0f;
	l[C] = NAN, l[C + 20] = 7.0f;
	for (int j = 0; j < C; j++)
		l[2 * C + j] = NAN;
	double loss[N];
	int hit[N];
	struct dp_error err = {""};
	struct backend *xref = be_ref_create(&err);
	if (!xref)
		bail_out("be_ref_create: %s", err.text);
	emu_launch(dim3(N), CU_THREADS, k_xent_rows<float>, (const float *)l.data(),
		   (const int32_t *)lab, (int)N, (int)C, 0.0f, 1.0f, loss, hit, (float *)NULL);
	for (int r = 0; r < N; r++) {
		float lr;
		int want = -1;
		be_ref_xent(xref, &l[(size_t)r * C], &lab[r], 1, C, 0.0f, 1.0f, &lr, &want, NULL,
			    0);
		is_int(hit[r], want, "xent row %d with NaN logits: the reference's hit (%d)", r,
		       want);
	}
	xref->ops->destroy(xref);
}

/* ---- batch norm's own kernels ---- */

struct bn_run {
	std::vector<float> y, sm, si, rm, rv, dx, dz, dg, db;
	std::vector<uint8_t> bits; /* use_bits: the forward's ReLU mask */
};

/* The forward (train) then backward of cuda_bn.cu's bn_own_fwd_train and bn_own_bwd on the
 * grid g, in bf16; dy_in_place: the backward writes dx over dy; use_bits (vector grid, ReLU):
 * the forward keeps the ReLU's mask as bits and the backward reads them instead of y. */
static bn_run bn_kernels(const struct be_bn_desc &d, const bn_geom &g, const std::vector<float> &x,
			 const std::vector<float> &z, const std::vector<float> &dy,
			 const std::vector<float> &gm, const std::vector<float> &bt,
			 const std::vector<float> &rm0, const std::vector<float> &rv0,
			 int dy_in_place, int use_bits = 0)
{
	size_t hw = (size_t)d.h * d.w, nx = (size_t)d.n * d.c * hw, C = (size_t)d.c;
	int nhwc = g.nhwc;
	dim3 grid(g.chunks, g.slabs);
	unsigned fin = (unsigned)((C + CU_THREADS / BN_LANES - 1) / (CU_THREADS / BN_LANES));
	dbuf<bf16> gx(nx), gz(nx), gy(nx), gdy(nx), gdx(nx), gdz(nx);
	std::vector<double> part(2 * C * g.slabs);
	std::vector<float> coef(4 * C), sm(C), si(C), rm(rm0), rv(rv0), dg(C), db(C);
	bn_run r;
	/* poisoned: every byte must be written by the forward */
	std::vector<uint8_t> bits(use_bits ? nx / BN_VEC : 0, 0xa5);
	uint8_t *bp = use_bits ? bits.data() : NULL;

	gx.set(to_act16(x, d.n, d.c, hw, nhwc));
	gdy.set(to_act16(dy, d.n, d.c, hw, nhwc));
	if (d.fuse_add)
		gz.set(to_act16(z, d.n, d.c, hw, nhwc));
	const bf16 *zp = d.fuse_add ? gz.p : NULL;
	if (g.vec)
		emu_launch(grid, CU_THREADS, k_bn_stats_v<bf16>, g, (const bf16 *)gx.p,
			   part.data());
	else
		emu_launch(grid, CU_THREADS, k_bn_stats<bf16>, g, (const bf16 *)gx.p, part.data());
	emu_launch(dim3(fin), CU_THREADS, k_bn_stats_final, g, (const double *)part.data(), d.eps,
		   0.1f, gm.data(), bt.data(), sm.data(), si.data(), rm.data(), rv.data(),
		   coef.data());
	if (g.vec)
		emu_launch(grid, CU_THREADS, k_bn_apply_v<bf16>, g, (const bf16 *)gx.p, zp,
			   (const float *)coef.data(), gy.p, d.fuse_relu, bp);
	else
		emu_launch(grid, CU_THREADS, k_bn_apply<bf16>, g, (const bf16 *)gx.p, zp,
			   (const float *)coef.data(), gy.p, d.fuse_relu);
	const bf16 *mask = d.fuse_relu && !use_bits ? gy.p : NULL;
	const uint8_t *bm = d.fuse_relu ? bp : NULL;
	bf16 *dxp = dy_in_place ? gdy.p : gdx.p, *dzp = d.fuse_add ? gdz.p : NULL;
	if (g.vec)
		emu_launch(grid, CU_THREADS, k_bn_bwd_stats_v<bf16>, g, (const bf16 *)gx.p, mask,
			   bm, (const bf16 *)gdy.p, (const float *)sm.data(), part.data());
	else
		emu_launch(grid, CU_THREADS, k_bn_bwd_stats<bf16>, g, (const bf16 *)gx.p, mask,
			   (const bf16 *)gdy.p, (const float *)sm.data(), part.data());
	emu_launch(dim3(fin), CU_THREADS, k_bn_bwd_final, g, (const double *)part.data(), gm.data(),
		   (const float *)sm.data(), (const float *)si.data(), dg.data(), db.data(), 0.0f,
		   coef.data());
	if (g.vec)
		emu_launch(grid, CU_THREADS, k_bn_bwd_apply_v<bf16>, g, (const bf16 *)gx.p, mask,
			   bm, (const bf16 *)gdy.p, (const float *)coef.data(), dxp, 0.0f, dzp,
			   0.0f);
	else
		emu_launch(grid, CU_THREADS, k_bn_bwd_apply<bf16>, g, (const bf16 *)gx.p, mask,
			   (const bf16 *)gdy.p, (const float *)coef.data(), dxp, 0.0f, dzp, 0.0f);
	r.y = from_act16(gy.p, d.n, d.c, hw, nhwc);
	r.dx = from_act16(dxp, d.n, d.c, hw, nhwc);
	if (d.fuse_add)
		r.dz = from_act16(gdz.p, d.n, d.c, hw, nhwc);
	r.sm = sm, r.si = si, r.rm = rm, r.rv = rv, r.dg = dg, r.db = db;
	r.bits = bits;
	return r;
}

static void test_bn(struct be_bn_desc d, int nhwc, int vec)
{
	struct dp_error err = {""};
	struct backend *ref = be_ref_create(&err);
	char s[160], w[200];

	if (!ref)
		bail_out("be_ref_create: %s", err.text);
	snprintf(w, sizeof(w), "bn(%s) %s%s", be_bn_str(&d, s, sizeof(s)), nhwc ? "nhwc" : "nchw",
		 vec ? " vector" : "");
	size_t hw = (size_t)d.h * d.w, nx = (size_t)d.n * d.c * hw, C = (size_t)d.c;
	std::vector<float> x(nx), z(nx), dy(nx), gm(C), bt(C), rm(C), rv(C);
	for (size_t i = 0; i < nx; i++) {
		int ch = (int)(i / hw % C);
		x[i] = rb16((float)((urand() * 2 - 1) * (1 + ch % 5) + 0.5 * (ch % 3)));
		z[i] = rb16((float)(urand() * 2 - 1));
		dy[i] = rb16((float)(urand() * 2 - 1));
	}
	for (size_t c = 0; c < C; c++) {
		gm[c] = (float)(0.5 + urand()), bt[c] = (float)(urand() - 0.5);
		rm[c] = (float)(urand() * 0.4 - 0.2), rv[c] = (float)(0.5 + urand());
	}
	bn_geom g;
	bn_geom_plan(&d, nhwc, vec, 6, &g);
	bn_run k = bn_kernels(d, g, x, z, dy, gm, bt, rm, rv, 0);

	/* the reference, given the kernels' y for the ReLU's mask (as backend_cuda.c does) */
	struct be_op *op = ref->ops->bn_create(ref, &d);
	if (!op)
		bail_out("bn_create: %s", ref->err.text);
	std::vector<float> y(nx), sm(C), si(C), rrm(rm), rrv(rv), dx(nx), dz(nx), dg(C), db(C);
	if (ref->ops->bn_fwd_train(ref, op, x.data(), d.fuse_add ? z.data() : NULL, gm.data(),
				   bt.data(), y.data(), sm.data(), si.data(), rrm.data(),
				   rrv.data(), 0.1f) ||
	    ref->ops->bn_bwd(ref, op, x.data(), k.y.data(), dy.data(), gm.data(), sm.data(),
			     si.data(), dx.data(), d.fuse_add ? dz.data() : NULL, 0.0f, dg.data(),
			     db.data(), 0.0f))
		bail_out("%s: the reference: %s", w, ref->err.text);
	double e_y = rel_l2(k.y, y), e_dx = rel_l2(k.dx, dx);
	ok(e_y < 8e-3, "%s: train y within bf16 rounding of the reference (rel L2 %.2g)", w, e_y);
	ok(rel_l2(k.sm, sm) < 1e-5 && rel_l2(k.si, si) < 1e-5,
	   "%s: saved mean and inverse std (rel L2 %.2g, %.2g)", w, rel_l2(k.sm, sm),
	   rel_l2(k.si, si));
	ok(rel_l2(k.rm, rrm) < 1e-5 && rel_l2(k.rv, rrv) < 1e-5,
	   "%s: running mean and (unbiased) variance (rel L2 %.2g, %.2g)", w, rel_l2(k.rm, rrm),
	   rel_l2(k.rv, rrv));
	ok(e_dx < 8e-3, "%s: dx within bf16 rounding of the reference (rel L2 %.2g)", w, e_dx);
	ok(rel_l2(k.dg, dg) < 1e-4 && rel_l2(k.db, db) < 1e-4,
	   "%s: dgamma and dbeta (rel L2 %.2g, %.2g)", w, rel_l2(k.dg, dg), rel_l2(k.db, db));
	if (d.fuse_add) {
		/* dz is the masked dy, rounded once: exact */
		size_t bad = 0;
		for (size_t i = 0; i < nx; i++)
			bad += k.dz[i] != rb16(dz[i]);
		ok(!bad, "%s: dz bit for bit (%zu differ)", w, bad);
	}
	/* dx over dy: the same bits (the vector kernels; the scalar ones are the GPU test's) */
	if (vec) {
		bn_run k2 = bn_kernels(d, g, x, z, dy, gm, bt, rm, rv, 1);
		ok(!memcmp(k2.dx.data(), k.dx.data(), nx * sizeof(float)),
		   "%s: dx in place of dy, same bits", w);
	}
	/* the ReLU's mask kept as bits by the forward and read by the backward instead of y: bit
	 * (row, channel) is y > 0 there, and every result is the y path's, bit for bit */
	if (vec && d.fuse_relu) {
		bn_run kb = bn_kernels(d, g, x, z, dy, gm, bt, rm, rv, 0, 1);
		size_t bad = 0;
		for (size_t i = 0; i < nx; i++) {
			/* y in NCHW order (from_act16); the bits in the NHWC tensor's order */
			size_t n = i / (C * hw), c = i / hw % C, p = i % hw;
			size_t j = (n * hw + p) * C + c;
			bad += (kb.bits[j / BN_VEC] >> (j % BN_VEC) & 1u) != (k.y[i] > 0.0f);
		}
		ok(!bad, "%s: the bits are y > 0 (%zu of %zu differ)", w, bad, nx);
		ok(!memcmp(kb.y.data(), k.y.data(), nx * sizeof(float)) &&
		       !memcmp(kb.dx.data(), k.dx.data(), nx * sizeof(float)) &&
		       (!d.fuse_add || !memcmp(kb.dz.data(), k.dz.data(), nx * sizeof(float))) &&
		       !memcmp(kb.dg.data(), k.dg.data(), C * sizeof(float)) &&
		       !memcmp(kb.db.data(), k.db.data(), C * sizeof(float)),
		   "%s: y, dx, dz, dgamma, dbeta with the bits: the bits of the y path", w);
	}
	ref->ops->op_destroy(ref, op);
	ref->ops->destroy(ref);
}

int main(void)
{
	/* max pooling: the shapes of backend_cuda.c, with ties and NaN */
	const struct be_pool_desc pools[] = {
	    {BE_POOL_MAX, 2, 3, 9, 9, 3, 3, 2, 1, 0, 0},
	    {BE_POOL_MAX, 2, 3, 7, 7, 2, 2, 2, 0, 0, 0},
	    {BE_POOL_MAX, 1, 4, 16, 16, 3, 3, 1, 1, 0, 0},
	    {BE_POOL_MAX, 2, 17, 12, 10, 3, 3, 2, 1, 0, 0},
	};
	for (size_t i = 0; i < sizeof(pools) / sizeof(pools[0]); i++) {
		struct be_pool_desc d = pools[i];
		struct dp_error err = {""};
		struct backend *ref = be_ref_create(&err);
		struct be_op *op = ref ? ref->ops->pool_create(ref, &d) : NULL; /* sets oh, ow */
		if (!op)
			bail_out("pool_create: %s", ref ? ref->err.text : err.text);
		ref->ops->op_destroy(ref, op);
		ref->ops->destroy(ref);
		for (int nhwc = 0; nhwc < 2; nhwc++) {
			test_pool(d, nhwc, 0, 0);
			test_pool(d, nhwc, 3, 0);
			test_pool(d, nhwc, 0, 1);
		}
	}
	test_xent_nan();

	/* batch norm: the scalar kernels in both layouts, the vector ones where they apply (NHWC,
	 * a multiple of 64 channels): one slab and several, a short last one, ReLU and residual */
	const struct be_bn_desc bns[] = {
	    {2, 3, 5, 7, 1e-5f, 1, 1},	{4, 32, 8, 8, 1e-3f, 1, 0},  {3, 64, 6, 5, 1e-5f, 0, 0},
	    {2, 64, 9, 7, 1e-5f, 1, 1}, {3, 192, 5, 5, 1e-5f, 0, 1}, {9, 64, 37, 41, 1e-5f, 1, 1},
	    {4, 128, 7, 6, 1e-5f, 1, 0},
	};
	for (size_t i = 0; i < sizeof(bns) / sizeof(bns[0]); i++) {
		if (bns[i].c <= 64) /* NCHW: a block per channel (the emulation's cost) */
			test_bn(bns[i], 0, 0);
		test_bn(bns[i], 1, 0);
		if (bns[i].c % BN_VCB == 0)
			test_bn(bns[i], 1, 1);
	}
	return done_testing();
}
