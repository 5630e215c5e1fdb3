/* backend.c — every op of the fast CPU backends checked against the reference backend: forward,
 * backward and beta = 1 accumulation on fresh random inputs over many shapes, outputs poisoned
 * with NaN first so an op that forgets to write fails. The CPU backend keeps acts in oneDNN's
 * blocked layouts (and in bfloat16 where asked): its ops run through backend_plain.h, which
 * converts every act from and to float32 NCHW around each op. PyTorch parity is
 * backend_torch.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/backend/backend.h"
#include "trainer/backend/backend_ref.h"
#include "trainer/data/image.h"
#include "t/unit/backend_check.h"
#include "t/unit/backend_plain.h"
#include "t/lib/tap.h"

/* The backend under test and the reference, with one op each for the case at hand. */
struct pair {
	struct backend *be[2]; /* [0] reference, [1] under test */
	struct be_op *op[2];
	struct chk_rng *rng;
	const char *name; /* of the backend under test */
	/* bfloat16 acts: results within bfloat16's rounding of float32's (tol), and the checks
	 * of float32 identities (relu of a float is that float) left out */
	int bf16;
};

/* Error allowed against the reference (chk_close_tol): float32's (CHK_TOL of each element, or
 * of a tenth of the tensor's RMS where it is smaller), or bfloat16's in the bfloat16 suite.
 * bfloat16 keeps 8 significant bits: every input and output is rounded by up to 2^-9 of
 * itself, and products sum in float32, so a result is off by a few such roundings of the
 * tensor's scale, which is what it is judged against there (a floor of the whole RMS). */
#define BF16_TOL 2.5e-2
/* Winograd's F(4x4, 3x3) (DPTRAIN_CPU_CONV_ALG=winograd: oneDNN's on AVX-512, else dptrain's
 * own, which has the same transforms) computes each
 * output tile through transforms whose entries reach 8 (and 1/6 after the sums), so its
 * roundings are those of a direct sum scaled up some tenfold: 2.1e-4 measured on a 512-channel
 * 3x3 (4,608 products an output) against 2.3e-5 for the direct convolution. */
#define WINO_TOL 1e-3
static double tol = CHK_TOL, tol_rms = 0.1;

static void ops_destroy(struct pair *p)
{
	for (int i = 0; i < 2; i++) {
		if (p->op[i])
			p->be[i]->ops->op_destroy(p->be[i], p->op[i]);
		p->op[i] = NULL;
	}
}

/* Both ops were created; else says why. */
static int created(struct pair *p, const char *what)
{
	if (ok(p->op[0] && p->op[1], "%s %s: created", p->name, what))
		return 1;
	for (int i = 0; i < 2; i++)
		if (!p->op[i])
			diag("%s: %s", p->be[i]->ops->name, p->be[i]->err.text);
	return 0;
}

static int ran(struct pair *p, int i, int rc, const char *what)
{
	if (rc == 0)
		return 1;
	fail("%s %s: %s failed: %s", p->name, what, p->be[i]->ops->name, p->be[i]->err.text);
	return 0;
}

/* Compares the backend under test with the reference; the label names both and the op. */
static void cmp(struct pair *p, const char *op, const char *what, const float *got,
		const float *want, size_t n)
{
	char t[320];

	snprintf(t, sizeof(t), "%s %s %s", p->name, op, what);
	chk_close_tol(got, want, n, tol, tol_rms, t);
}

/* beta = 1 onto a prefilled buffer must equal the prefill plus the beta = 0 result. */
/* Inputs: uniform in [lo, hi), and exact in bfloat16 in the bfloat16 suite, so that both
 * backends see the same numbers (rounding them on import would move ReLU and max pooling
 * decisions within bfloat16's rounding of a tie, which no tolerance on values measures). */
static void bf16_exact(const struct pair *p, float *x, size_t n)
{
	for (size_t i = 0; p->bf16 && i < n; i++) {
		uint32_t u;
		memcpy(&u, &x[i], sizeof(u));
		u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
		memcpy(&x[i], &u, sizeof(u));
	}
}

static void rand_in(struct pair *p, float *x, size_t n, float lo, float hi)
{
	chk_random(p->rng, x, n, lo, hi);
	bf16_exact(p, x, n);
}

static float *prefill(struct pair *p, size_t n)
{
	float *x = chk_alloc(n);

	rand_in(p, x, n, -1.0f, 1.0f);
	return x;
}

static void check_acc(const char *backend, const char *op, const char *what, const float *acc,
		      const float *pre, const float *out0, size_t n)
{
	float *want = chk_alloc(n);
	char t[320];

	for (size_t i = 0; i < n; i++)
		want[i] = pre[i] + out0[i];
	snprintf(t, sizeof(t), "%s %s %s beta=1", backend, op, what);
	chk_close_tol(acc, want, n, tol, tol_rms, t);
	free(want);
}

/* ------------------------------------------------------------------------------------- */

static void test_conv(struct pair *p, struct be_conv_desc d)
{
	char s[160], w[256];
	struct be_conv_desc dd[2] = {d, d};
	float *x = NULL, *wt = NULL, *b = NULL, *dy = NULL, *y[2] = {0}, *dx[2] = {0}, *dw[2] = {0},
	      *db[2] = {0}, *pre = NULL, *acc = NULL;

	be_conv_str(&d, s, sizeof(s));
	for (int i = 0; i < 2; i++)
		p->op[i] = p->be[i]->ops->conv_create(p->be[i], &dd[i]);
	snprintf(w, sizeof(w), "conv(%s)", s);
	if (!created(p, w))
		goto out;
	if (!ok(dd[1].oh == dd[0].oh && dd[1].ow == dd[0].ow, "%s %s: output %dx%d", p->name, w,
		dd[1].oh, dd[1].ow))
		goto out;
	size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * d.c * d.kh * d.kw;
	size_t ny = (size_t)d.n * d.k * dd[0].oh * dd[0].ow, nb = d.k;
	x = chk_alloc(nx), wt = chk_alloc(nw), b = chk_alloc(nb), dy = chk_alloc(ny);
	rand_in(p, x, nx, -1, 1);
	rand_in(p, wt, nw, -0.5f, 0.5f);
	rand_in(p, b, nb, -1, 1);
	rand_in(p, dy, ny, -1, 1);
	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		y[i] = chk_alloc(ny), dx[i] = chk_alloc(nx), dw[i] = chk_alloc(nw);
		db[i] = chk_alloc(nb);
		chk_poison(y[i], ny), chk_poison(dx[i], nx), chk_poison(dw[i], nw);
		chk_poison(db[i], nb);
		if (!ran(p, i, be->ops->conv_fwd(be, p->op[i], x, wt, d.has_bias ? b : NULL, y[i]),
			 w) ||
		    !ran(p, i, be->ops->conv_bwd_data(be, p->op[i], dy, wt, dx[i], 0.0f), w) ||
		    !ran(p, i,
			 be->ops->conv_bwd_weights(be, p->op[i], x, dy, dw[i],
						   d.has_bias ? db[i] : NULL, 0.0f),
			 w))
			goto out;
	}
	cmp(p, w, "fwd y", y[1], y[0], ny);
	cmp(p, w, "bwd dx", dx[1], dx[0], nx);
	cmp(p, w, "bwd dw", dw[1], dw[0], nw);
	if (d.has_bias)
		cmp(p, w, "bwd db", db[1], db[0], nb);

	/* Same inputs, same bits (the resume test compares losses with !=). */
	{
		struct backend *be = p->be[1];
		float *y2 = chk_alloc(ny), *dw2 = chk_alloc(nw), *db2 = chk_alloc(nb);
		if (ran(p, 1, be->ops->conv_fwd(be, p->op[1], x, wt, d.has_bias ? b : NULL, y2),
			w) &&
		    ran(p, 1,
			be->ops->conv_bwd_weights(be, p->op[1], x, dy, dw2, d.has_bias ? db2 : NULL,
						  0.0f),
			w))
			ok(memcmp(y2, y[1], ny * sizeof(float)) == 0 &&
			       memcmp(dw2, dw[1], nw * sizeof(float)) == 0 &&
			       (!d.has_bias || memcmp(db2, db[1], nb * sizeof(float)) == 0),
			   "%s %s: fwd and bwd weights repeat bit for bit", p->name, w);
		free(y2), free(dw2), free(db2);
	}

	/* Accumulation, on both backends (the reference must be right too). */
	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		const char *bn = be->ops->name;
		pre = prefill(p, nx), acc = chk_copy(pre, nx);
		if (ran(p, i, be->ops->conv_bwd_data(be, p->op[i], dy, wt, acc, 1.0f), w)) {
			check_acc(bn, w, "dx", acc, pre, dx[i], nx);
		}
		free(pre), free(acc);
		float *preb = prefill(p, nb), *accb = chk_copy(preb, nb);
		pre = prefill(p, nw), acc = chk_copy(pre, nw);
		if (ran(p, i,
			be->ops->conv_bwd_weights(be, p->op[i], x, dy, acc,
						  d.has_bias ? accb : NULL, 1.0f),
			w)) {
			check_acc(bn, w, "dw", acc, pre, dw[i], nw);
			if (d.has_bias) {
				check_acc(bn, w, "db", accb, preb, db[i], nb);
			}
		}
		free(pre), free(acc), free(preb), free(accb);
		pre = acc = NULL;
	}
out:
	ops_destroy(p);
	free(x), free(wt), free(b), free(dy);
	for (int i = 0; i < 2; i++)
		free(y[i]), free(dx[i]), free(dw[i]), free(db[i]);
}

/* ------------------------------------------------------------------------------------- */

/* A fused BN+add(+ReLU) op gives the same bits as BN, add and ReLU run as separate ops on the
 * same backend (nn.c fuses them, and models must not change numbers by it). y, dx and dz are
 * each backend's fused results for x, z and dy (bz = 0). */
static void test_bn_fused(struct pair *p, struct be_bn_desc d, const float *x, const float *z,
			  const float *g, const float *bt, const float *dy, float *const *y,
			  float *const *dx, float *const *dz)
{
	char s[160], w[256];
	size_t nx = (size_t)d.n * d.c * d.h * d.w, nc = d.c;
	struct be_bn_desc plain = d;

	plain.fuse_add = plain.fuse_relu = 0;
	be_bn_str(&d, s, sizeof(s));
	snprintf(w, sizeof(w), "bn(%s) vs separate ops", s);
	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		struct be_op *op = be->ops->bn_create(be, &plain);
		float *t = chk_alloc(nx), *u = chk_alloc(nx), *m = chk_alloc(nx),
		      *dx2 = chk_alloc(nx);
		float *dz2 = chk_alloc(nx), *sm = chk_alloc(nc), *si = chk_alloc(nc);
		float *rm = chk_alloc(nc), *rv = chk_alloc(nc), *dg = chk_alloc(nc),
		      *db = chk_alloc(nc);
		int rc = -1;

		be->ops->fill(be, rm, 0.0f, nc);
		be->ops->fill(be, rv, 1.0f, nc);
		chk_poison(dx2, nx), chk_poison(dz2, nx);
		if (op &&
		    be->ops->bn_fwd_train(be, op, x, NULL, g, bt, t, sm, si, rm, rv, 0.1f) == 0 &&
		    be->ops->add(be, t, z, u, nx) == 0 &&
		    (!d.fuse_relu || be->ops->relu_fwd(be, u, u, nx) == 0) &&
		    (d.fuse_relu ? be->ops->relu_bwd(be, u, dy, m, nx, 0.0f)
				 : be->ops->axpby(be, 1.0f, dy, 0.0f, m, nx)) == 0 &&
		    be->ops->axpby(be, 1.0f, m, 0.0f, dz2, nx) == 0 &&
		    be->ops->bn_bwd(be, op, x, t, m, g, sm, si, dx2, NULL, 0.0f, dg, db, 0.0f) == 0)
			rc = 0;
		if (ok(rc == 0, "%s %s: separate ops ran", be->ops->name, w)) {
			ok(memcmp(u, y[i], nx * sizeof(float)) == 0, "%s %s: same y, bit for bit",
			   be->ops->name, w);
			ok(memcmp(dx2, dx[i], nx * sizeof(float)) == 0,
			   "%s %s: same dx, bit for bit", be->ops->name, w);
			ok(memcmp(dz2, dz[i], nx * sizeof(float)) == 0,
			   "%s %s: same dz, bit for bit", be->ops->name, w);
		} else {
			diag("%s", be->err.text);
		}
		if (op)
			be->ops->op_destroy(be, op);
		free(t), free(u), free(m), free(dx2), free(dz2), free(sm), free(si), free(rm);
		free(rv), free(dg), free(db);
	}
}

static void test_bn(struct pair *p, struct be_bn_desc d)
{
	char s[160], w[256];
	size_t nx = (size_t)d.n * d.c * d.h * d.w, nc = d.c;
	float *x = chk_alloc(nx), *dy = chk_alloc(nx), *g = chk_alloc(nc), *bt = chk_alloc(nc);
	float *rm0 = chk_alloc(nc), *rv0 = chk_alloc(nc);
	float *y[2], *ye[2], *sm[2], *si[2], *rm[2], *rv[2], *dx[2], *dg[2], *dbt[2], *dz[2];
	float *z = d.fuse_add ? chk_alloc(nx) : NULL;
	float momentum = 0.1f;

	be_bn_str(&d, s, sizeof(s));
	snprintf(w, sizeof(w), "bn(%s)", s);
	/* Offset and scale per channel, so normalisation has something to undo. */
	rand_in(p, x, nx, -1, 1);
	for (size_t i = 0; i < nx; i++)
		x[i] = x[i] * (1.0f + (i / (d.h * d.w)) % d.c) + 0.5f * ((i / (d.h * d.w)) % d.c);
	bf16_exact(p, x, nx);
	rand_in(p, dy, nx, -1, 1);
	rand_in(p, g, nc, 0.5f, 1.5f);
	rand_in(p, bt, nc, -0.5f, 0.5f);
	rand_in(p, rm0, nc, -0.2f, 0.2f);
	rand_in(p, rv0, nc, 0.5f, 1.5f);
	if (z)
		rand_in(p, z, nx, -1, 1);
	for (int i = 0; i < 2; i++) {
		y[i] = chk_alloc(nx), ye[i] = chk_alloc(nx), dx[i] = chk_alloc(nx);
		dz[i] = z ? chk_alloc(nx) : NULL;
		if (z)
			chk_poison(dz[i], nx);
		sm[i] = chk_alloc(nc), si[i] = chk_alloc(nc), dg[i] = chk_alloc(nc);
		dbt[i] = chk_alloc(nc), rm[i] = chk_copy(rm0, nc), rv[i] = chk_copy(rv0, nc);
		chk_poison(y[i], nx), chk_poison(ye[i], nx), chk_poison(dx[i], nx);
		chk_poison(sm[i], nc), chk_poison(si[i], nc), chk_poison(dg[i], nc);
		chk_poison(dbt[i], nc);
		p->op[i] = p->be[i]->ops->bn_create(p->be[i], &d);
	}
	if (!created(p, w))
		goto out;
	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		if (!ran(p, i,
			 be->ops->bn_fwd_train(be, p->op[i], x, z, g, bt, y[i], sm[i], si[i], rm[i],
					       rv[i], momentum),
			 w) ||
		    !ran(p, i,
			 be->ops->bn_bwd(be, p->op[i], x, y[i], dy, g, sm[i], si[i], dx[i], dz[i],
					 0.0f, dg[i], dbt[i], 0.0f),
			 w) ||
		    !ran(p, i,
			 be->ops->bn_fwd_infer(be, p->op[i], x, z, g, bt, rm[i], rv[i], ye[i]), w))
			goto out;
	}
	cmp(p, w, "train y", y[1], y[0], nx);
	cmp(p, w, "save_mean", sm[1], sm[0], nc);
	cmp(p, w, "save_invstd", si[1], si[0], nc);
	cmp(p, w, "running_mean", rm[1], rm[0], nc);
	cmp(p, w, "running_var", rv[1], rv[0], nc);
	cmp(p, w, "dx", dx[1], dx[0], nx);
	cmp(p, w, "dgamma", dg[1], dg[0], nc);
	cmp(p, w, "dbeta", dbt[1], dbt[0], nc);
	cmp(p, w, "eval y", ye[1], ye[0], nx);
	if (z)
		cmp(p, w, "dz", dz[1], dz[0], nx);

	/* dx NULL: the parameter gradients alone, the same ones. */
	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		float *g2 = chk_alloc(nc), *b2 = chk_alloc(nc), *z2 = z ? chk_alloc(nx) : NULL;
		chk_poison(g2, nc), chk_poison(b2, nc);
		if (ran(p, i,
			be->ops->bn_bwd(be, p->op[i], x, y[i], dy, g, sm[i], si[i], NULL, z2, 0.0f,
					g2, b2, 0.0f),
			w))
			ok(memcmp(g2, dg[i], nc * sizeof(float)) == 0 &&
			       memcmp(b2, dbt[i], nc * sizeof(float)) == 0,
			   "%s %s: bwd without dx gives the same dgamma, dbeta", be->ops->name, w);
		free(g2), free(b2), free(z2);
	}

	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		float *pre = prefill(p, nx), *acc = chk_copy(pre, nx);
		float *preg = prefill(p, nc), *accg = chk_copy(preg, nc);
		float *preb = prefill(p, nc), *accb = chk_copy(preb, nc);
		float *prez = z ? prefill(p, nx) : NULL, *accz = z ? chk_copy(prez, nx) : NULL;
		/* The ReLU mask of a fused op belongs to the last training forward. */
		be->ops->bn_fwd_train(be, p->op[i], x, z, g, bt, y[i], sm[i], si[i], rm[i], rv[i],
				      momentum);
		if (ran(p, i,
			be->ops->bn_bwd(be, p->op[i], x, y[i], dy, g, sm[i], si[i], acc, accz, 1.0f,
					accg, accb, 1.0f),
			w)) {
			check_acc(be->ops->name, w, "dx", acc, pre, dx[i], nx);
			if (z)
				check_acc(be->ops->name, w, "dz", accz, prez, dz[i], nx);
			check_acc(be->ops->name, w, "dgamma", accg, preg, dg[i], nc);
			check_acc(be->ops->name, w, "dbeta", accb, preb, dbt[i], nc);
		}
		free(pre), free(acc), free(preg), free(accg), free(preb), free(accb);
		free(prez), free(accz);
	}
	/* Bit for bit in float32; in bfloat16 the fused op rounds once where the separate ops
	 * round BN's output and the sum, so they differ by a rounding (and a ReLU decision
	 * within it), and only the comparison with the reference above holds. */
	if (z && !p->bf16)
		test_bn_fused(p, d, x, z, g, bt, dy, y, dx, dz);
out:
	ops_destroy(p);
	free(x), free(dy), free(g), free(bt), free(rm0), free(rv0), free(z);
	for (int i = 0; i < 2; i++) {
		free(y[i]), free(ye[i]), free(dx[i]), free(sm[i]), free(si[i]), free(dz[i]);
		free(dg[i]), free(dbt[i]), free(rm[i]), free(rv[i]);
	}
}

/* ------------------------------------------------------------------------------------- */

/* levels > 0 quantises x to that many values, so max pooling windows hold ties. */
static void test_pool(struct pair *p, struct be_pool_desc d, int levels)
{
	char s[160], w[256];
	struct be_pool_desc dd[2] = {d, d};
	float *x = NULL, *dy = NULL, *y[2] = {0}, *dx[2] = {0};

	be_pool_str(&d, s, sizeof(s));
	snprintf(w, sizeof(w), "pool(%s)%s", s, levels ? " with ties" : "");
	for (int i = 0; i < 2; i++)
		p->op[i] = p->be[i]->ops->pool_create(p->be[i], &dd[i]);
	if (!created(p, w))
		goto out;
	if (!ok(dd[1].oh == dd[0].oh && dd[1].ow == dd[0].ow, "%s %s: output %dx%d", p->name, w,
		dd[1].oh, dd[1].ow))
		goto out;
	size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * dd[0].oh * dd[0].ow;
	x = chk_alloc(nx), dy = chk_alloc(ny);
	rand_in(p, x, nx, -1, 1);
	if (levels)
		for (size_t i = 0; i < nx; i++)
			x[i] = floorf((x[i] + 1.0f) * 0.5f * levels);
	rand_in(p, dy, ny, -1, 1);
	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		y[i] = chk_alloc(ny), dx[i] = chk_alloc(nx);
		chk_poison(y[i], ny), chk_poison(dx[i], nx);
		if (!ran(p, i, be->ops->pool_fwd(be, p->op[i], x, y[i]), w) ||
		    !ran(p, i, be->ops->pool_bwd(be, p->op[i], x, y[i], dy, dx[i], 0.0f), w))
			goto out;
	}
	cmp(p, w, "fwd y", y[1], y[0], ny);
	cmp(p, w, "bwd dx", dx[1], dx[0], nx);
	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		float *pre = prefill(p, nx), *acc = chk_copy(pre, nx);
		if (ran(p, i, be->ops->pool_bwd(be, p->op[i], x, y[i], dy, acc, 1.0f), w)) {
			check_acc(be->ops->name, w, "dx", acc, pre, dx[i], nx);
		}
		free(pre), free(acc);
	}
out:
	ops_destroy(p);
	free(x), free(dy);
	for (int i = 0; i < 2; i++)
		free(y[i]), free(dx[i]);
}

/* ------------------------------------------------------------------------------------- */

static void test_linear(struct pair *p, struct be_linear_desc d)
{
	char s[160], w[256];
	size_t nx = (size_t)d.n * d.in, nw = (size_t)d.out * d.in, ny = (size_t)d.n * d.out;
	size_t nb = d.out;
	float *x = chk_alloc(nx), *wt = chk_alloc(nw), *b = chk_alloc(nb), *dy = chk_alloc(ny);
	float *y[2], *dx[2], *dw[2], *db[2];

	be_linear_str(&d, s, sizeof(s));
	snprintf(w, sizeof(w), "linear(%s)", s);
	rand_in(p, x, nx, -1, 1);
	rand_in(p, wt, nw, -0.5f, 0.5f);
	rand_in(p, b, nb, -1, 1);
	rand_in(p, dy, ny, -1, 1);
	for (int i = 0; i < 2; i++) {
		y[i] = chk_alloc(ny), dx[i] = chk_alloc(nx), dw[i] = chk_alloc(nw);
		db[i] = chk_alloc(nb);
		chk_poison(y[i], ny), chk_poison(dx[i], nx), chk_poison(dw[i], nw);
		chk_poison(db[i], nb);
		p->op[i] = p->be[i]->ops->linear_create(p->be[i], &d);
	}
	if (!created(p, w))
		goto out;
	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		if (!ran(p, i,
			 be->ops->linear_fwd(be, p->op[i], x, wt, d.has_bias ? b : NULL, y[i]),
			 w) ||
		    !ran(p, i, be->ops->linear_bwd_data(be, p->op[i], dy, wt, dx[i], 0.0f), w) ||
		    !ran(p, i,
			 be->ops->linear_bwd_weights(be, p->op[i], x, dy, dw[i],
						     d.has_bias ? db[i] : NULL, 0.0f),
			 w))
			goto out;
	}
	cmp(p, w, "fwd y", y[1], y[0], ny);
	cmp(p, w, "bwd dx", dx[1], dx[0], nx);
	cmp(p, w, "bwd dw", dw[1], dw[0], nw);
	if (d.has_bias)
		cmp(p, w, "bwd db", db[1], db[0], nb);
	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		float *pre = prefill(p, nx), *acc = chk_copy(pre, nx);
		float *prew = prefill(p, nw), *accw = chk_copy(prew, nw);
		float *preb = prefill(p, nb), *accb = chk_copy(preb, nb);
		if (ran(p, i, be->ops->linear_bwd_data(be, p->op[i], dy, wt, acc, 1.0f), w)) {
			check_acc(be->ops->name, w, "dx", acc, pre, dx[i], nx);
		}
		if (ran(p, i,
			be->ops->linear_bwd_weights(be, p->op[i], x, dy, accw,
						    d.has_bias ? accb : NULL, 1.0f),
			w)) {
			check_acc(be->ops->name, w, "dw", accw, prew, dw[i], nw);
			if (d.has_bias) {
				check_acc(be->ops->name, w, "db", accb, preb, db[i], nb);
			}
		}
		free(pre), free(acc), free(prew), free(accw), free(preb), free(accb);
	}
out:
	ops_destroy(p);
	free(x), free(wt), free(b), free(dy);
	for (int i = 0; i < 2; i++)
		free(y[i]), free(dx[i]), free(dw[i]), free(db[i]);
}

/* ------------------------------------------------------------------------------------- */

static void test_eltwise(struct pair *p, size_t n)
{
	float *x = chk_alloc(n), *b = chk_alloc(n), *dy = chk_alloc(n), *pre = prefill(p, n);
	float *y[2], *dx[2], *acc[2], *sum[2], *ax[2];
	double ss[2];
	char w[64];

	rand_in(p, x, n, -1, 1);
	rand_in(p, b, n, -1, 1);
	rand_in(p, dy, n, -1, 1);
	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		y[i] = chk_alloc(n), dx[i] = chk_alloc(n), sum[i] = chk_alloc(n);
		acc[i] = chk_copy(pre, n), ax[i] = chk_copy(pre, n);
		chk_poison(y[i], n), chk_poison(dx[i], n), chk_poison(sum[i], n);
		be->ops->relu_fwd(be, x, y[i], n);
		be->ops->relu_bwd(be, y[i], dy, dx[i], n, 0.0f);
		be->ops->relu_bwd(be, y[i], dy, acc[i], n, 1.0f);
		be->ops->add(be, x, b, sum[i], n);
		be->ops->axpby(be, 0.5f, x, 2.0f, ax[i], n);
		be->ops->sumsq(be, x, n, &ss[i]);
	}
	snprintf(w, sizeof(w), "eltwise(n=%zu)", n);
	cmp(p, w, "relu fwd", y[1], y[0], n);
	cmp(p, w, "relu bwd", dx[1], dx[0], n);
	check_acc(p->name, w, "relu bwd", acc[1], pre, dx[1], n);
	cmp(p, w, "add", sum[1], sum[0], n);
	cmp(p, w, "axpby", ax[1], ax[0], n);
	ok(fabs(ss[1] - ss[0]) <= 1e-9 * ss[0], "sumsq: %.12g vs %.12g", ss[1], ss[0]);
	/* relu: exactly max(x, 0); its gradient flows where y > 0 only. */
	int exact = 1;
	for (size_t i = 0; i < n && !p->bf16; i++)
		exact &= y[1][i] == (x[i] > 0 ? x[i] : 0) && dx[1][i] == (x[i] > 0 ? dy[i] : 0);
	if (!p->bf16)
		ok(exact, "%s relu fwd/bwd exact over %zu floats", p->name, n);
	p->be[1]->ops->fill(p->be[1], y[1], 3.25f, n);
	exact = 1;
	for (size_t i = 0; i < n; i++)
		exact &= y[1][i] == 3.25f;
	ok(exact, "%s fill", p->name);
	free(x), free(b), free(dy), free(pre);
	for (int i = 0; i < 2; i++)
		free(y[i]), free(dx[i]), free(acc[i]), free(sum[i]), free(ax[i]);
}

static void test_gap(struct pair *p, int n, int c, int hw)
{
	size_t nx = (size_t)n * c * hw, ny = (size_t)n * c;
	float *x = chk_alloc(nx), *dy = chk_alloc(ny), *pre = prefill(p, nx);
	float *y[2], *dx[2], *acc[2];
	char t[96];

	rand_in(p, x, nx, -1, 1);
	rand_in(p, dy, ny, -1, 1);
	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		y[i] = chk_alloc(ny), dx[i] = chk_alloc(nx), acc[i] = chk_copy(pre, nx);
		chk_poison(y[i], ny), chk_poison(dx[i], nx);
		ran(p, i, be->ops->gap_fwd(be, x, y[i], n, c, hw), "gap_fwd");
		ran(p, i, be->ops->gap_bwd(be, dy, dx[i], n, c, hw, 0.0f), "gap_bwd");
		ran(p, i, be->ops->gap_bwd(be, dy, acc[i], n, c, hw, 1.0f), "gap_bwd");
	}
	snprintf(t, sizeof(t), "gap(n=%d c=%d hw=%d)", n, c, hw);
	cmp(p, t, "fwd y", y[1], y[0], ny);
	cmp(p, t, "bwd dx", dx[1], dx[0], nx);
	check_acc(p->name, t, "bwd dx", acc[1], pre, dx[1], nx);
	free(x), free(dy), free(pre);
	for (int i = 0; i < 2; i++)
		free(y[i]), free(dx[i]), free(acc[i]);
}

static void test_xent(struct pair *p, int n, int classes, float smoothing, float scale)
{
	size_t nl = (size_t)n * classes;
	float *l = chk_alloc(nl), *d[2], loss[2];
	int32_t *lab = malloc(sizeof(*lab) * n);
	int correct[2];
	char t[128];

	if (!lab)
		bail_out("out of memory");
	rand_in(p, l, nl, -4, 4);
	for (int i = 0; i < n; i++)
		lab[i] = (int32_t)(chk_next(p->rng) % classes);
	/* Some rows predict their label, so correct is not always 0. */
	for (int i = 0; i < n; i += 3)
		l[(size_t)i * classes + lab[i]] = 10.0f;
	for (int i = 0; i < 2; i++) {
		struct backend *be = p->be[i];
		d[i] = chk_alloc(nl);
		chk_poison(d[i], nl);
		ran(p, i,
		    be->ops->xent(be, l, lab, n, classes, smoothing, scale, &loss[i], &correct[i],
				  d[i]),
		    "xent");
	}
	snprintf(t, sizeof(t), "xent(n=%d classes=%d smoothing=%g scale=%g)", n, classes, smoothing,
		 scale);
	is_double(loss[1], loss[0], (tol == CHK_TOL ? 1e-5 : tol) * fabs(loss[0]),
		  "%s %s loss %.6f", p->name, t, loss[1]);
	is_int(correct[1], correct[0], "%s %s correct %d", p->name, t, correct[1]);
	cmp(p, t, "dlogits", d[1], d[0], nl);
	free(l), free(lab), free(d[0]), free(d[1]);
}

/* Values a reader can check by hand: equal logits give log(C) whatever the smoothing, a
 * gradient of (1/C - target) / n (to within e: the gradient is an act), and argmax ties go to
 * the lowest index. */
static void test_xent_known(struct backend *be, double e)
{
	enum { N = 2, C = 4 };
	float l[N * C] = {0}, d[N * C], loss;
	int32_t lab[N] = {0, 3};
	int correct = -1;

	if (be->ops->xent(be, l, lab, N, C, 0.1f, 2.0f, &loss, &correct, d) != 0) {
		fail("%s xent equal logits: %s", be->ops->name, be->err.text);
		return;
	}
	is_double(loss, log(4.0), 1e-6, "%s xent equal logits: loss log(4)", be->ops->name);
	is_int(correct, 1, "%s xent: argmax ties go to the lowest index", be->ops->name);
	/* target = 0.9 * onehot + 0.1/4; d = (0.25 - target) / N * scale */
	is_double(d[0], (0.25 - 0.925) / N * 2, e, "%s xent dlogits at the label", be->ops->name);
	is_double(d[1], (0.25 - 0.025) / N * 2, e, "%s xent dlogits off the label", be->ops->name);
	ok(be->ops->xent(be, l, lab, N, C, 0.0f, 1.0f, &loss, &correct, NULL) == 0,
	   "%s xent without dlogits", be->ops->name);
}

/* ------------------------------------------------------------------------------------- */

/* Bad shapes and arguments: -1 or NULL with a message naming the op and the shape. */
static void test_errors(struct backend *be)
{
	const char *bn = be->ops->name;
	struct be_conv_desc cd = {
	    .n = 8, .c = 3, .h = 2, .w = 2, .k = 4, .kh = 7, .kw = 7, .stride = 1};
	struct be_op *op = be->ops->conv_create(be, &cd);
	ok(op == NULL, "%s conv_create rejects a kernel larger than the input", bn);
	like(be->err.text, "conv_create(n=8 c=3 h=2 w=2 k=4 7x7/1 pad 0)",
	     "%s: message names the shape", bn);
	if (op)
		be->ops->op_destroy(be, op);

	struct be_conv_desc cb = {
	    .n = 1, .c = 1, .h = 3, .w = 3, .k = 1, .kh = 1, .kw = 1, .stride = 1, .has_bias = 1};
	float cx[9] = {0}, cw[1] = {1}, cy[9];
	op = be->ops->conv_create(be, &cb);
	if (ok(op != NULL, "%s conv_create with bias", bn)) {
		ok(be->ops->conv_fwd(be, op, cx, cw, NULL, cy) == -1,
		   "%s conv_fwd refuses a NULL bias when the op has one", bn);
		like(be->err.text,
		     "conv_fwd(n=1 c=1 h=3 w=3 k=1 1x1/1 pad 0 bias): the op has a bias",
		     "%s: message names the op and what is missing", bn);
		be->ops->op_destroy(be, op);
	}

	struct be_pool_desc pd = {.kind = BE_POOL_MAX,
				  .n = 1,
				  .c = 1,
				  .h = 8,
				  .w = 8,
				  .kh = 2,
				  .kw = 2,
				  .stride = 2,
				  .pad = 2};
	op = be->ops->pool_create(be, &pd);
	ok(op == NULL, "%s pool_create rejects pad > kernel/2", bn);
	like(be->err.text, "pool_create(max n=1 c=1 h=8 w=8 2x2/2 pad 2)",
	     "%s: message names the shape", bn);
	if (op)
		be->ops->op_destroy(be, op);

	struct be_bn_desc bd = {.n = 1, .c = 2, .h = 1, .w = 1, .eps = 1e-5f};
	float x[2] = {1, 2}, y[2], g[2] = {1, 1}, b[2] = {0, 0}, sm[2], si[2], rm[2], rv[2];
	op = be->ops->bn_create(be, &bd);
	if (ok(op != NULL, "%s bn_create n=1 h=w=1 (inference is fine)", bn)) {
		ok(be->ops->bn_fwd_train(be, op, x, NULL, g, b, y, sm, si, rm, rv, 0.1f) == -1,
		   "%s bn_fwd_train with one value per channel fails", bn);
		like(be->err.text, "more than one value per channel", "%s: message says why", bn);
		ok(be->ops->bn_fwd_infer(be, op, x, x, g, b, rm, rv, y) == -1,
		   "%s bn_fwd_infer refuses a residual the op does not add", bn);
		like(be->err.text, "without fuse_add", "%s: message says why", bn);
		be->ops->op_destroy(be, op);
	} else {
		diag("%s", be->err.text);
	}
	bd.fuse_add = 1;
	op = be->ops->bn_create(be, &bd);
	if (ok(op != NULL, "%s bn_create with fuse_add", bn)) {
		ok(be->ops->bn_fwd_infer(be, op, x, NULL, g, b, rm, rv, y) == -1,
		   "%s bn_fwd_infer with fuse_add and no residual fails", bn);
		like(be->err.text,
		     "bn_fwd_infer(n=1 c=2 h=1 w=1 eps=1e-05 +add): the op adds a residual",
		     "%s: message names the op, shape and what is missing", bn);
		be->ops->op_destroy(be, op);
	} else {
		diag("%s", be->err.text);
	}

	float l[6] = {0}, loss;
	int32_t lab[2] = {1, 3};
	int correct;
	ok(be->ops->xent(be, l, lab, 2, 3, 0.0f, 1.0f, &loss, &correct, NULL) == -1,
	   "%s xent rejects a label out of range", bn);
	like(be->err.text, "label 3 of sample 1", "%s: message names the sample", bn);

	struct be_linear_desc ld = {.n = 0, .in = 4, .out = 2};
	op = be->ops->linear_create(be, &ld);
	ok(op == NULL, "%s linear_create rejects n=0", bn);
	like(be->err.text, "linear_create(n=0 in=4 out=2)", "%s: message names the shape", bn);
	if (op)
		be->ops->op_destroy(be, op);
	ld = (struct be_linear_desc){.n = 2, .in = 30, .out = 2, .c = 2, .h = 4, .w = 4};
	op = be->ops->linear_create(be, &ld);
	ok(op == NULL, "%s linear_create rejects an input shape that is not `in` features", bn);
	like(be->err.text, "input shape 2x4x4 is not 30 features", "%s: message says why", bn);
	if (op)
		be->ops->op_destroy(be, op);
}

/* ------------------------------------------------------------------------------------- */

static void run_suite(struct pair *p, int convs_only)
{
	static const struct be_conv_desc convs[] = {
	    /* n  c   h   w   k  kh kw s  pad bias */
	    {2, 3, 9, 11, 5, 3, 3, 1, 1, 1, 0, 0},     /* odd sizes, bias */
	    {1, 5, 7, 7, 6, 3, 3, 2, 1, 0, 0, 0},      /* batch 1, stride 2 */
	    {3, 8, 6, 6, 12, 1, 1, 1, 0, 0, 0, 0},     /* 1x1 */
	    {2, 16, 8, 8, 8, 1, 1, 2, 0, 0, 0, 0},     /* 1x1/2 downsample */
	    {2, 3, 23, 23, 8, 7, 7, 2, 3, 0, 0, 0},    /* 7x7/2 stem */
	    {4, 17, 10, 10, 19, 3, 3, 1, 1, 0, 0, 0},  /* channels not multiple of 8 */
	    {2, 32, 14, 14, 32, 3, 3, 1, 1, 0, 0, 0},  /* blocked-friendly */
	    {2, 64, 7, 7, 128, 3, 3, 2, 1, 0, 0, 0},   /* 3x3/2 widening */
	    {2, 4, 5, 5, 3, 5, 5, 1, 0, 1, 0, 0},      /* kernel covers the input */
	    {2, 16, 4, 4, 16, 1, 1, 1, 0, 1, 0, 0},    /* 1x1 with bias */
	    {2, 64, 6, 6, 64, 3, 3, 1, 1, 1, 0, 0},    /* bias, wide and small: bfloat16 NHWC's
							* weight gradient by inner product */
	    {2, 64, 10, 10, 64, 3, 3, 1, 1, 0, 0, 0},  /* 100 pixels: by inner product only when
							* DPTRAIN_CPU_BWDW_IP allows */
	    {2, 64, 12, 12, 256, 1, 1, 1, 0, 0, 0, 0}, /* bottleneck expansion */
	    /* resnet18 with the ImageNet stem at 64x64 (model_parity.c's): the stem, and the
	     * deepest layers, where a 3x3 pad 1 window is larger than the 2x2 input and a 1x1/2
	     * downsample leaves the last row unread (negative right padding); 64 and 512
	     * channels are whole blocks of 8 (AVX2) and 16 (AVX-512) */
	    {2, 3, 64, 64, 64, 7, 7, 2, 3, 0, 0, 0},
	    {2, 256, 4, 4, 512, 1, 1, 2, 0, 0, 0, 0},
	    {2, 512, 2, 2, 512, 3, 3, 1, 1, 0, 0, 0},
	};
	static const struct be_bn_desc bns[] = {
	    {2, 3, 5, 7, 1e-5f, 0, 0},
	    {2, 3, 5, 7, 1e-5f, 1, 0},
	    {1, 16, 4, 4, 1e-5f, 1, 0},
	    {8, 17, 3, 3, 1e-5f, 0, 0},
	    {4, 32, 8, 8, 1e-3f, 1, 0},
	    {3, 8, 1, 1, 1e-5f, 0, 0},
	    {3, 64, 6, 5, 1e-5f, 0, 0},
	    {16, 24, 2, 2, 1e-5f, 1, 0},
	    /* the residual join of a ResNet block, and an add without ReLU */
	    {2, 3, 5, 7, 1e-5f, 1, 1},
	    {4, 32, 8, 8, 1e-5f, 1, 1},
	    {3, 8, 1, 1, 1e-5f, 0, 1},
	    {8, 17, 3, 3, 1e-5f, 1, 1},
	};
	static const struct be_pool_desc pools[] = {
	    {BE_POOL_MAX, 2, 3, 9, 9, 3, 3, 2, 1, 0, 0},
	    {BE_POOL_MAX, 2, 3, 7, 7, 2, 2, 2, 0, 0, 0},
	    {BE_POOL_MAX, 1, 4, 16, 16, 3, 3, 1, 1, 0, 0},
	    {BE_POOL_MAX, 2, 17, 12, 10, 3, 3, 2, 1, 0, 0},
	    {BE_POOL_MAX, 2, 64, 32, 32, 3, 3, 2, 1, 0, 0}, /* the ImageNet stem's, at 64x64 */
	    {BE_POOL_MAX, 3, 6, 24, 24, 2, 2, 2, 0, 0, 0},  /* LeNet's first, NCHW */
	    {BE_POOL_MAX, 2, 5, 11, 13, 3, 3, 2, 0, 0, 0},  /* overlapping, unpadded, NCHW */
	    {BE_POOL_AVG, 2, 3, 8, 8, 2, 2, 2, 0, 0, 0},
	    {BE_POOL_AVG, 2, 5, 9, 7, 3, 3, 1, 1, 0, 0},
	    {BE_POOL_AVG, 1, 16, 7, 7, 7, 7, 1, 0, 0, 0},
	    {BE_POOL_AVG, 2, 3, 11, 11, 3, 3, 2, 1, 0, 0},
	};
	static const struct be_linear_desc lins[] = {
	    {1, 7, 3, 1, 0, 0, 0},	{5, 64, 10, 1, 0, 0, 0},    {8, 33, 17, 0, 0, 0, 0},
	    {16, 512, 100, 1, 0, 0, 0}, {4, 256, 120, 1, 16, 4, 4}, /* lenet's fc1 after flattening
								       16x4x4 */
	};

	for (size_t i = 0; i < sizeof(convs) / sizeof(convs[0]); i++)
		test_conv(p, convs[i]);
	if (convs_only)
		return;
	for (size_t i = 0; i < sizeof(bns) / sizeof(bns[0]); i++)
		test_bn(p, bns[i]);
	for (size_t i = 0; i < sizeof(pools) / sizeof(pools[0]); i++)
		test_pool(p, pools[i], 0);
	/* Ties (ReLU outputs are full of zeros): both must pick the first maximum. */
	test_pool(p, pools[0], 3);
	test_pool(p, pools[3], 2);
	test_pool(p, pools[5], 2);
	test_pool(p, pools[6], 3);
	for (size_t i = 0; i < sizeof(lins) / sizeof(lins[0]); i++)
		test_linear(p, lins[i]);
	test_eltwise(p, 1);
	test_eltwise(p, 1000003);
	test_gap(p, 2, 3, 5);
	test_gap(p, 4, 64, 49);
	test_xent(p, 1, 10, 0.0f, 1.0f);
	test_xent(p, 16, 10, 0.1f, 1.0f);
	test_xent(p, 7, 1000, 0.1f, 0.25f);
	test_xent_known(p->be[1], p->bf16 ? 1e-3 : 1e-6);
	test_errors(p->be[1]);
}

/* input_u8: every byte value in every channel, NHWC in, NCHW out, exactly the loader's table
 * (trainer/data/image.c's lut: what the host path gives the model). */
static void test_input_u8(struct backend *be)
{
	enum { N = 2, C = 3, H = 16, W = 16 };
	struct imtf_spec s = {.mode = IMTF_EVAL,
			      .channels = C,
			      .size = 4,
			      .resize = 4,
			      .mean = {0.485f, 0.456f, 0.406f},
			      .std = {0.229f, 0.224f, 0.225f}};
	struct imtf t;
	struct dp_error err;
	static uint8_t src[N * H * W * C];
	static float dst[N * C * H * W];
	int bad = 0;

	if (imtf_init(&t, &s, &err) != 0)
		bail_out("imtf_init: %s", err.text);
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 7 + i / 256);
	if (!ok(be->ops->input_u8 &&
		    be->ops->input_u8(be, src, dst, N, C, H, W, t.mean, t.std) == 0,
		"%s input_u8 runs", be->ops->name))
		return;
	for (int n = 0; n < N; n++)
		for (int c = 0; c < C; c++)
			for (int p = 0; p < H * W; p++) {
				uint8_t v = src[((size_t)n * H * W + p) * C + c];
				bad += memcmp(&dst[((size_t)n * C + c) * H * W + p], &t.lut[c][v],
					      sizeof(float)) != 0;
			}
	is_int(bad, 0, "%s input_u8: NHWC bytes to NCHW floats, the loader's table bit for bit",
	       be->ops->name);
	ok(be->ops->input_u8(be, src, dst, N, 5, H, W, t.mean, t.std) == -1,
	   "%s input_u8 with 5 channels: refused", be->ops->name);
}

/* Where the CPU backend has acts of its own (oneDNN's channel blocks, bfloat16): import and
 * export invert each other exactly, an act of many channels is stored otherwise than NCHW (so
 * the suite above runs the layout-aware kernels), and one of a single channel as NCHW. */
static void test_layout(struct backend *be)
{
	enum { N = 3, C = 32, H = 5, W = 3 };
	const char *bn = be->act_size == 2 ? "cpu bf16" : "cpu";
	static float x[N * C * H * W], back[N * C * H * W];
	static float raw[N * C * H * W]; /* an act: float32, or bfloat16 in half of it */
	size_t n = sizeof(x) / sizeof(x[0]);
	int differs = 0;

	if (!ok(be->ops->act_import && be->ops->act_export, "%s: acts of its own (import, export)",
		bn))
		return;
	for (size_t i = 0; i < n; i++) /* exact in bfloat16 too */
		x[i] = (float)((int)(i % 251) - 125) / 8.0f;
	if (!ok(be->ops->act_import(be, x, raw, N, C, H, W) == 0 &&
		    be->ops->act_export(be, raw, back, N, C, H, W) == 0,
		"%s act_import, act_export run: %s", bn, be->err.text))
		return;
	ok(memcmp(x, back, sizeof(x)) == 0, "%s: export(import(x)) == x, %dx%dx%dx%d", bn, N, C, H,
	   W);
	for (size_t i = 0; i < n; i++) {
		float v;
		if (be->act_size == 2) {
			uint32_t u = (uint32_t)((const uint16_t *)raw)[i] << 16;
			memcpy(&v, &u, sizeof(v));
		} else {
			v = raw[i];
		}
		differs += v != x[i];
	}
	ok(differs > 0, "%s: a %d-channel act is not stored NCHW (%d of %zu values moved)", bn, C,
	   differs, n);
	if (be->act_size == 4) {
		ok(be->ops->act_import(be, x, raw, N * C, 1, H, W) == 0 &&
		       memcmp(raw, x, N * C * H * W * sizeof(float)) == 0,
		   "%s: a 1-channel act is NCHW", bn);
	}
}

/* The CPU backend created with var=val in the environment (o NULL: the defaults), checked. */
static struct backend *cpu_with_env(const char *var, const char *val, const struct be_cpu_opts *o)
{
	struct dp_error err;

	setenv(var, val, 1);
	struct backend *be = be_cpu_create_opts(0, o, &err);
	unsetenv(var);
	ok(be != NULL, "be_cpu_create with %s=%s: %s", var, val, be ? be->ops->name : err.text);
	return be;
}

/* Which algorithm each DPTRAIN_CPU_CONV_ALG gives a float32 3x3 stride-1 convolution of
 * ResNet's (64 channels, 14x14, batch 64) and a stride-2 one, by the implementation that runs
 * each pass: Winograd unless direct is asked for, oneDNN's where it has one (oneDNN 2 on
 * AVX-512), else dptrain's own (be_cpu_winograd says which), and never for a stride of 2.
 * dptrain's own leaves a batch of 2 direct under auto, as oneDNN does its own, not when
 * Winograd is asked for. */
static void test_conv_alg(void)
{
	static const char *algs[] = {"auto", "direct", "winograd"};
	int avx512 = strcmp(be_cpu_kernels(), "avx512") == 0, wino = be_cpu_winograd();
	char desc[160];

	be_cpu_describe(desc, sizeof(desc));
	if (avx512 && strncmp(desc, "oneDNN 2.", 9) == 0)
		ok(wino == 2, "%s: oneDNN's float32 Winograd is there (be_cpu_winograd %d)", desc,
		   wino);
	else
		ok(wino == 1, "%s: dptrain's own float32 Winograd runs (be_cpu_winograd %d)", desc,
		   wino);
	ok(wino != 2 || avx512, "oneDNN's Winograd only where oneDNN runs AVX-512 (%s kernels)",
	   be_cpu_kernels());

	for (int i = 0; i < 3; i++) {
		struct backend *be = cpu_with_env("DPTRAIN_CPU_CONV_ALG", algs[i], NULL);
		if (!be)
			continue;
		struct be_conv_desc d3 = {64, 64, 14, 14, 64, 3, 3, 1, 1, 0, 0, 0};
		struct be_conv_desc d2 = {64, 64, 14, 14, 128, 3, 3, 2, 1, 0, 0, 0};
		struct be_conv_desc ds = {2, 64, 28, 28, 64, 3, 3, 1, 1, 0, 0, 0};
		struct be_op *op3 = be->ops->conv_create(be, &d3);
		struct be_op *op2 = be->ops->conv_create(be, &d2);
		struct be_op *ops = be->ops->conv_create(be, &ds);
		if (ok(op3 && op2 && ops, "DPTRAIN_CPU_CONV_ALG=%s: convolutions created",
		       algs[i])) {
			int want = wino && i != 1;
			const char *mine = "dptrain_wino_4x3";
			for (int pass = 0; pass < 3; pass++) {
				const char *impl = be_cpu_conv_impl(be, op3, pass);
				ok(*impl && !!strstr(impl, "wino") == want &&
				       (strcmp(impl, mine) == 0) == (want && wino == 1),
				   "DPTRAIN_CPU_CONV_ALG=%s, %s kernels: 3x3/1 pass %d runs %s "
				   "(%s)",
				   algs[i], be_cpu_kernels(), pass, impl,
				   !want       ? "not Winograd"
				   : wino == 1 ? "dptrain's Winograd"
					       : "oneDNN's Winograd");
				if (wino == 1) {
					impl = be_cpu_conv_impl(be, ops, pass);
					ok((strcmp(impl, mine) == 0) == (i == 2),
					   "DPTRAIN_CPU_CONV_ALG=%s: a batch of 2, pass %d "
					   "runs %s (%s)",
					   algs[i], pass, impl,
					   i == 2 ? "dptrain's Winograd" : "direct");
				}
				impl = be_cpu_conv_impl(be, op2, pass);
				ok(*impl && !strstr(impl, "wino"),
				   "DPTRAIN_CPU_CONV_ALG=%s: 3x3/2 pass %d runs %s (not Winograd)",
				   algs[i], pass, impl);
			}
		}
		is(be_cpu_conv_impl(be, NULL, 0), "", "no op: no implementation");
		if (op3)
			be->ops->op_destroy(be, op3);
		if (op2)
			be->ops->op_destroy(be, op2);
		if (ops)
			be->ops->op_destroy(be, ops);
		be->ops->destroy(be);
	}
}

int main(void)
{
	struct dp_error err;
	struct chk_rng rng = {chk_seed()};
	struct backend *ref = be_ref_create(&err);
	struct backend *cpu = NULL, *par = NULL, *view = NULL, *cpu16 = NULL, *view16 = NULL;

	if (!ref)
		bail_out("be_ref_create: %s", err.text);
	ok(strcmp(ref->ops->name, "ref") == 0, "reference backend is called ref");
	test_xent_known(ref, 1e-6);
	test_errors(ref);

	cpu = be_cpu_create(0, &err);
	if (!ok(cpu != NULL, "be_cpu_create(0): %s", cpu ? cpu->ops->name : err.text))
		goto out;
	diag("cpu backend: %s, %d threads", cpu->ops->name, cpu->threads);
	test_input_u8(ref);
	test_input_u8(cpu);
	test_layout(cpu);
	/* acts in the backend's own layout: compared through float32 NCHW */
	view = cpu->ops->act_import ? plain_view(cpu, "cpu") : NULL;
	struct pair p = {{ref, view ? view : cpu}, {NULL, NULL}, &rng, cpu->ops->name, 0};
	run_suite(&p, 0);

	/* The layouts the CPU backend does not pick by default, forced (DPTRAIN_CPU_CONV): acts
	 * NCHW, each convolution in plain or in oneDNN's layouts. */
	static const char *layouts[] = {"plain", "blocked"};
	static const char *names[] = {"cpu (conv=plain)", "cpu (conv=blocked)"};
	for (int i = 0; i < 2; i++) {
		struct backend *forced = cpu_with_env("DPTRAIN_CPU_CONV", layouts[i], NULL);
		if (!forced)
			continue;
		ok(!forced->ops->act_import, "DPTRAIN_CPU_CONV=%s: acts are float32 NCHW",
		   layouts[i]);
		struct pair f = {{ref, forced}, {NULL, NULL}, &rng, names[i], 0};
		run_suite(&f, 1);
		forced->ops->destroy(forced);
	}

	/* The convolutions' algorithm (DPTRAIN_CPU_CONV_ALG): direct everywhere, and Winograd
	 * for float32 3x3 stride-1 layers: oneDNN's on AVX-512 with oneDNN 2, dptrain's own
	 * elsewhere (every such convolution of the suite, however few its tiles). By default
	 * (auto) Winograd takes the layers where it pays: a ResNet layer at batch 64. */
	test_conv_alg();
	static const char *algs[] = {"direct", "winograd"};
	static const char *algnames[] = {"cpu (alg=direct)", "cpu (alg=winograd)"};
	for (int i = 0; i < 2; i++) {
		struct backend *a = cpu_with_env("DPTRAIN_CPU_CONV_ALG", algs[i], NULL);
		if (!a)
			continue;
		struct backend *v = a->ops->act_import ? plain_view(a, algnames[i]) : a;
		struct pair f = {{ref, v}, {NULL, NULL}, &rng, algnames[i], 0};
		tol = i ? WINO_TOL : CHK_TOL;
		run_suite(&f, 1);
		tol = CHK_TOL;
		if (v != a)
			v->ops->destroy(v);
		a->ops->destroy(a);
	}

	/* bfloat16 acts where the CPU computes in it: every op within bfloat16's rounding. */
	struct dp_error why;
	struct be_cpu_opts o16 = {.act_dtype = BE_BF16};
	if (be_cpu_bf16(&why)) {
		cpu16 = be_cpu_create_opts(0, &o16, &err);
		if (ok(cpu16 != NULL, "be_cpu_create_opts(bf16): %s",
		       cpu16 ? cpu16->ops->name : err.text)) {
			is_int((int)cpu16->act_size, 2, "bf16: acts of 2 bytes");
			test_layout(cpu16);
			view16 = plain_view(cpu16, "cpu bf16");
			struct pair h = {{ref, view16}, {NULL, NULL}, &rng, "cpu bf16", 1};
			tol = BF16_TOL, tol_rms = 1.0;
			run_suite(&h, 0);
			/* The weight gradient of small outputs by inner product (AMX's NHWC): every
			 * convolution one way, then the other (DPTRAIN_CPU_BWDW_IP). */
			static const char *ipmax[] = {"0", "1000000"};
			static const char *ipname[] = {"cpu bf16 (bwdw conv)",
						       "cpu bf16 (bwdw ip)"};
			for (int i = 0; i < 2; i++) {
				struct backend *b16 =
				    cpu_with_env("DPTRAIN_CPU_BWDW_IP", ipmax[i], &o16);
				if (!b16)
					continue;
				struct backend *v16 = plain_view(b16, ipname[i]);
				struct pair f = {{ref, v16}, {NULL, NULL}, &rng, ipname[i], 1};
				run_suite(&f, 1);
				v16->ops->destroy(v16);
				b16->ops->destroy(b16);
			}
			tol = CHK_TOL, tol_rms = 0.1;
		}
	} else {
		skip(1, "bfloat16: %s", why.text);
		struct backend *no = be_cpu_create_opts(0, &o16, &err);
		ok(no == NULL && strstr(err.text, "bfloat16 needs AVX512_BF16 or AMX"),
		   "be_cpu_create_opts(bf16) is refused, saying why: %s", err.text);
		if (no)
			no->ops->destroy(no);
	}

	/* The fallback without oneDNN: the reference kernels on OpenMP threads. */
	par = be_ref_create_parallel(0, &err);
	if (!ok(par != NULL, "be_ref_create_parallel: %s", par ? par->ops->name : err.text))
		goto out;
	struct pair q = {{ref, par}, {NULL, NULL}, &rng, par->ops->name, 0};
	run_suite(&q, 0);

	/* Values the variables refuse, each named in the error with what is wanted. */
	static const struct {
		const char *var, *val, *why;
	} bad_env[] = {
	    {"DPTRAIN_CPU_CONV_ALG", "wino", "want auto, direct or winograd"},
	    {"DPTRAIN_CPU_CONV_ALG", "Direct", "want auto, direct or winograd"},
	    {"DPTRAIN_CPU_CONV_ALG", "auto ", "want auto, direct or winograd"},
	    {"DPTRAIN_CPU_BWDW_IP", "-3", "want a number of output pixels"},
	    {"DPTRAIN_CPU_BWDW_IP", "64x", "want a number of output pixels"},
	    {"DPTRAIN_CPU_BWDW_IP", "lots", "want a number of output pixels"},
	};
	for (size_t i = 0; i < sizeof(bad_env) / sizeof(bad_env[0]); i++) {
		setenv(bad_env[i].var, bad_env[i].val, 1);
		struct backend *b = be_cpu_create(0, &err);
		unsetenv(bad_env[i].var);
		ok(b == NULL, "%s=%s is refused", bad_env[i].var, bad_env[i].val);
		like(err.text, bad_env[i].why, "and says why: %s", err.text);
		like(err.text, bad_env[i].var, "naming the variable");
		if (b)
			b->ops->destroy(b);
	}
	struct backend *bad = be_cpu_create(-1, &err);
	ok(bad == NULL, "be_cpu_create(-1) fails");
	like(err.text, "threads must be 0 (the default) or more", "and says why");
	if (bad)
		bad->ops->destroy(bad);
	/* Last: OpenMP keeps the thread count for the rest of the process. */
	struct backend *one = be_cpu_create(1, &err);
	if (ok(one != NULL, "be_cpu_create(1)"))
		is_int(one->threads, 1, "runs on 1 thread");
	if (one)
		one->ops->destroy(one);
out:
	if (view16)
		view16->ops->destroy(view16);
	if (cpu16)
		cpu16->ops->destroy(cpu16);
	if (view)
		view->ops->destroy(view);
	if (par)
		par->ops->destroy(par);
	if (cpu)
		cpu->ops->destroy(cpu);
	ref->ops->destroy(ref);
	return done_testing();
}
