/* backend_torch.c — PyTorch parity of every backend op: forward, input gradient, weight
 * gradients, BN running statistics and cross-entropy with label smoothing, for the reference
 * and the CPU backends, against t/reference/data/ops.bin (written by t/reference/gen_ops.py,
 * whose docstring describes the format). Owns nothing but this test. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/backend/backend.h"
#include "trainer/backend/backend_ref.h"
#include "t/unit/backend_check.h"
#include "t/unit/backend_plain.h"
#include "t/lib/tap.h"

struct golden {
	int n;
	char **names;
	float **data;
	size_t *count;
};

static void golden_free(struct golden *g)
{
	for (int i = 0; i < g->n; i++)
		free(g->names[i]), free(g->data[i]);
	free(g->names), free(g->data), free(g->count);
	memset(g, 0, sizeof(*g));
}

/* A broken or missing file ends the test: nothing else could run. */
static void golden_load(struct golden *g, const char *path)
{
	FILE *f = fopen(path, "rb");
	char line[256];

	memset(g, 0, sizeof(*g));
	if (!f)
		bail_out("%s: %s (regenerate with make reference)", path, strerror(errno));
	if (!fgets(line, sizeof(line), f) || strcmp(line, "DPTRAIN-OPS 1\n") != 0)
		bail_out("%s: not a DPTRAIN-OPS 1 file", path);
	for (;;) {
		char name[200];
		unsigned long cnt;
		if (!fgets(line, sizeof(line), f))
			bail_out("%s: truncated after %d arrays (no END)", path, g->n);
		if (strcmp(line, "END\n") == 0)
			break;
		if (sscanf(line, "%199s %lu", name, &cnt) != 2 || cnt > (1UL << 26))
			bail_out("%s: bad record header after %d arrays", path, g->n);
		g->names = realloc(g->names, sizeof(*g->names) * (g->n + 1));
		g->data = realloc(g->data, sizeof(*g->data) * (g->n + 1));
		g->count = realloc(g->count, sizeof(*g->count) * (g->n + 1));
		if (!g->names || !g->data || !g->count || !(g->names[g->n] = strdup(name)))
			bail_out("out of memory");
		g->data[g->n] = chk_alloc(cnt);
		g->count[g->n] = cnt;
		if (fread(g->data[g->n], sizeof(float), cnt, f) != cnt)
			bail_out("%s: array %s is truncated", path, name);
		g->n++;
	}
	fclose(f);
}

/* The array CASE.KEY, which must hold `want` floats (0: any); NULL after a failed test. */
static const float *get(const struct golden *g, const char *c, const char *key, size_t want)
{
	char name[200];

	snprintf(name, sizeof(name), "%s.%s", c, key);
	for (int i = 0; i < g->n; i++) {
		if (strcmp(g->names[i], name) != 0)
			continue;
		if (want && g->count[i] != want) {
			fail("%s holds %zu floats, want %zu", name, g->count[i], want);
			return NULL;
		}
		return g->data[i];
	}
	return NULL;
}

static size_t count_of(const struct golden *g, const char *c, const char *key)
{
	char name[200];

	snprintf(name, sizeof(name), "%s.%s", c, key);
	for (int i = 0; i < g->n; i++)
		if (strcmp(g->names[i], name) == 0)
			return g->count[i];
	return 0;
}

static int must(int have, const char *c, const char *key)
{
	if (have)
		return 1;
	fail("ops.bin has no usable %s.%s", c, key);
	return 0;
}

static int check_rc(struct backend *be, int rc, const char *c)
{
	if (rc == 0)
		return 1;
	fail("%s %s: %s", be->ops->name, c, be->err.text);
	return 0;
}

static void close_to(struct backend *be, const char *c, const char *what, const float *got,
		     const float *want, size_t n)
{
	char t[128];

	snprintf(t, sizeof(t), "%s %s %s vs torch", be->ops->name, c, what);
	chk_close(got, want, n, t);
}

/* ------------------------------------------------------------------------------------- */

static void conv_case(struct backend *be, const struct golden *g, const char *c)
{
	const float *cfg = get(g, c, "cfg", 10);
	if (!must(cfg != NULL, c, "cfg"))
		return;
	struct be_conv_desc d = {.n = cfg[0],
				 .c = cfg[1],
				 .h = cfg[2],
				 .w = cfg[3],
				 .k = cfg[4],
				 .kh = cfg[5],
				 .kw = cfg[6],
				 .stride = cfg[7],
				 .pad = cfg[8],
				 .has_bias = cfg[9]};
	struct be_op *op = be->ops->conv_create(be, &d);
	float *y = NULL, *dx = NULL, *dw = NULL, *db = NULL;
	if (!op) {
		fail("%s %s: %s", be->ops->name, c, be->err.text);
		return;
	}
	size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * d.c * d.kh * d.kw;
	size_t ny = (size_t)d.n * d.k * d.oh * d.ow;
	const float *x = get(g, c, "x", nx), *w = get(g, c, "w", nw), *dy = get(g, c, "dy", ny);
	const float *b = get(g, c, "b", d.k), *ty = get(g, c, "y", ny), *tdx = get(g, c, "dx", nx);
	const float *tdw = get(g, c, "dw", nw), *tdb = get(g, c, "db", d.k);
	if (!must(x && w && dy && ty && tdx && tdw, c, "x/w/dy/y/dx/dw") ||
	    (d.has_bias && !must(b && tdb, c, "b/db")))
		goto out;
	y = chk_alloc(ny), dx = chk_alloc(nx), dw = chk_alloc(nw), db = chk_alloc(d.k);
	chk_poison(y, ny), chk_poison(dx, nx), chk_poison(dw, nw), chk_poison(db, d.k);
	if (check_rc(be, be->ops->conv_fwd(be, op, x, w, b, y), c))
		close_to(be, c, "y", y, ty, ny);
	if (check_rc(be, be->ops->conv_bwd_data(be, op, dy, w, dx, 0.0f), c))
		close_to(be, c, "dx", dx, tdx, nx);
	if (check_rc(be, be->ops->conv_bwd_weights(be, op, x, dy, dw, db, 0.0f), c)) {
		close_to(be, c, "dw", dw, tdw, nw);
		if (d.has_bias)
			close_to(be, c, "db", db, tdb, d.k);
	}
out:
	be->ops->op_destroy(be, op);
	free(y), free(dx), free(dw), free(db);
}

static void bn_case(struct backend *be, const struct golden *g, const char *c)
{
	const float *cfg = get(g, c, "cfg", 7);
	if (!must(cfg != NULL, c, "cfg"))
		return;
	struct be_bn_desc d = {
	    .n = cfg[0], .c = cfg[1], .h = cfg[2], .w = cfg[3], .eps = cfg[4], .fuse_relu = cfg[5]};
	float momentum = cfg[6];
	size_t nx = (size_t)d.n * d.c * d.h * d.w, nc = d.c;
	const float *x = get(g, c, "x", nx), *gm = get(g, c, "gamma", nc);
	const float *bt = get(g, c, "beta", nc), *rm0 = get(g, c, "rm0", nc);
	const float *rv0 = get(g, c, "rv0", nc), *dy = get(g, c, "dy", nx);
	const float *ty = get(g, c, "y", nx), *tsm = get(g, c, "save_mean", nc);
	const float *tsi = get(g, c, "save_invstd", nc), *trm = get(g, c, "rm1", nc);
	const float *trv = get(g, c, "rv1", nc), *tdx = get(g, c, "dx", nx);
	const float *tdg = get(g, c, "dgamma", nc), *tdb = get(g, c, "dbeta", nc);
	const float *tye = get(g, c, "y_eval", nx);
	if (!must(x && gm && bt && rm0 && rv0 && dy && ty && tsm && tsi && trm && trv && tdx &&
		      tdg && tdb && tye,
		  c, "*"))
		return;
	struct be_op *op = be->ops->bn_create(be, &d);
	if (!op) {
		fail("%s %s: %s", be->ops->name, c, be->err.text);
		return;
	}
	float *y = chk_alloc(nx), *ye = chk_alloc(nx), *dx = chk_alloc(nx), *sm = chk_alloc(nc);
	float *si = chk_alloc(nc), *dg = chk_alloc(nc), *db = chk_alloc(nc);
	float *rm = chk_copy(rm0, nc), *rv = chk_copy(rv0, nc);
	chk_poison(y, nx), chk_poison(ye, nx), chk_poison(dx, nx), chk_poison(sm, nc);
	chk_poison(si, nc), chk_poison(dg, nc), chk_poison(db, nc);
	if (check_rc(be,
		     be->ops->bn_fwd_train(be, op, x, NULL, gm, bt, y, sm, si, rm, rv, momentum),
		     c)) {
		close_to(be, c, "y", y, ty, nx);
		close_to(be, c, "save_mean", sm, tsm, nc);
		close_to(be, c, "save_invstd", si, tsi, nc);
		close_to(be, c, "running_mean", rm, trm, nc);
		close_to(be, c, "running_var", rv, trv, nc);
		if (check_rc(
			be,
			be->ops->bn_bwd(be, op, x, y, dy, gm, sm, si, dx, NULL, 0.0f, dg, db, 0.0f),
			c)) {
			close_to(be, c, "dx", dx, tdx, nx);
			close_to(be, c, "dgamma", dg, tdg, nc);
			close_to(be, c, "dbeta", db, tdb, nc);
		}
		/* Inference from the updated running statistics. */
		if (check_rc(be, be->ops->bn_fwd_infer(be, op, x, NULL, gm, bt, rm, rv, ye), c))
			close_to(be, c, "y_eval", ye, tye, nx);
	}
	be->ops->op_destroy(be, op);
	free(y), free(ye), free(dx), free(sm), free(si), free(dg), free(db), free(rm), free(rv);
}

static void pool_case(struct backend *be, const struct golden *g, const char *c)
{
	const float *cfg = get(g, c, "cfg", 9);
	if (!must(cfg != NULL, c, "cfg"))
		return;
	struct be_pool_desc d = {.kind = cfg[0] == 0 ? BE_POOL_MAX : BE_POOL_AVG,
				 .n = cfg[1],
				 .c = cfg[2],
				 .h = cfg[3],
				 .w = cfg[4],
				 .kh = cfg[5],
				 .kw = cfg[6],
				 .stride = cfg[7],
				 .pad = cfg[8]};
	struct be_op *op = be->ops->pool_create(be, &d);
	if (!op) {
		fail("%s %s: %s", be->ops->name, c, be->err.text);
		return;
	}
	size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * d.oh * d.ow;
	const float *x = get(g, c, "x", nx), *dy = get(g, c, "dy", ny);
	const float *ty = get(g, c, "y", ny), *tdx = get(g, c, "dx", nx);
	float *y = chk_alloc(ny), *dx = chk_alloc(nx);
	if (must(x && dy && ty && tdx, c, "x/dy/y/dx")) {
		chk_poison(y, ny), chk_poison(dx, nx);
		if (check_rc(be, be->ops->pool_fwd(be, op, x, y), c))
			close_to(be, c, "y", y, ty, ny);
		if (check_rc(be, be->ops->pool_bwd(be, op, x, y, dy, dx, 0.0f), c))
			close_to(be, c, "dx", dx, tdx, nx);
	}
	be->ops->op_destroy(be, op);
	free(y), free(dx);
}

static void linear_case(struct backend *be, const struct golden *g, const char *c)
{
	const float *cfg = get(g, c, "cfg", 4);
	if (!must(cfg != NULL, c, "cfg"))
		return;
	struct be_linear_desc d = {.n = cfg[0], .in = cfg[1], .out = cfg[2], .has_bias = cfg[3]};
	struct be_op *op = be->ops->linear_create(be, &d);
	if (!op) {
		fail("%s %s: %s", be->ops->name, c, be->err.text);
		return;
	}
	size_t nx = (size_t)d.n * d.in, nw = (size_t)d.out * d.in, ny = (size_t)d.n * d.out;
	const float *x = get(g, c, "x", nx), *w = get(g, c, "w", nw), *dy = get(g, c, "dy", ny);
	const float *b = get(g, c, "b", d.out), *ty = get(g, c, "y", ny);
	const float *tdx = get(g, c, "dx", nx), *tdw = get(g, c, "dw", nw);
	const float *tdb = get(g, c, "db", d.out);
	float *y = chk_alloc(ny), *dx = chk_alloc(nx), *dw = chk_alloc(nw), *db = chk_alloc(d.out);
	if (must(x && w && dy && ty && tdx && tdw, c, "x/w/dy/y/dx/dw") &&
	    (!d.has_bias || must(b && tdb, c, "b/db"))) {
		chk_poison(y, ny), chk_poison(dx, nx), chk_poison(dw, nw), chk_poison(db, d.out);
		if (check_rc(be, be->ops->linear_fwd(be, op, x, w, b, y), c))
			close_to(be, c, "y", y, ty, ny);
		if (check_rc(be, be->ops->linear_bwd_data(be, op, dy, w, dx, 0.0f), c))
			close_to(be, c, "dx", dx, tdx, nx);
		if (check_rc(be, be->ops->linear_bwd_weights(be, op, x, dy, dw, db, 0.0f), c)) {
			close_to(be, c, "dw", dw, tdw, nw);
			if (d.has_bias)
				close_to(be, c, "db", db, tdb, d.out);
		}
	}
	be->ops->op_destroy(be, op);
	free(y), free(dx), free(dw), free(db);
}

static void relu_case(struct backend *be, const struct golden *g)
{
	size_t n = count_of(g, "relu", "x");
	const float *x = get(g, "relu", "x", n), *dy = get(g, "relu", "dy", n);
	const float *ty = get(g, "relu", "y", n), *tdx = get(g, "relu", "dx", n);
	if (!must(n && x && dy && ty && tdx, "relu", "x/dy/y/dx"))
		return;
	float *y = chk_alloc(n), *dx = chk_alloc(n);
	chk_poison(y, n), chk_poison(dx, n);
	if (check_rc(be, be->ops->relu_fwd(be, x, y, n), "relu"))
		close_to(be, "relu", "y", y, ty, n);
	if (check_rc(be, be->ops->relu_bwd(be, y, dy, dx, n, 0.0f), "relu"))
		close_to(be, "relu", "dx", dx, tdx, n);
	free(y), free(dx);
}

static void gap_case(struct backend *be, const struct golden *g, const char *c)
{
	const float *cfg = get(g, c, "cfg", 3);
	if (!must(cfg != NULL, c, "cfg"))
		return;
	int n = cfg[0], ch = cfg[1], hw = cfg[2];
	size_t nx = (size_t)n * ch * hw, ny = (size_t)n * ch;
	const float *x = get(g, c, "x", nx), *dy = get(g, c, "dy", ny);
	const float *ty = get(g, c, "y", ny), *tdx = get(g, c, "dx", nx);
	if (!must(x && dy && ty && tdx, c, "x/dy/y/dx"))
		return;
	float *y = chk_alloc(ny), *dx = chk_alloc(nx);
	chk_poison(y, ny), chk_poison(dx, nx);
	if (check_rc(be, be->ops->gap_fwd(be, x, y, n, ch, hw), c))
		close_to(be, c, "y", y, ty, ny);
	if (check_rc(be, be->ops->gap_bwd(be, dy, dx, n, ch, hw, 0.0f), c))
		close_to(be, c, "dx", dx, tdx, nx);
	free(y), free(dx);
}

static void xent_case(struct backend *be, const struct golden *g, const char *c)
{
	const float *cfg = get(g, c, "cfg", 4);
	if (!must(cfg != NULL, c, "cfg"))
		return;
	int n = cfg[0], classes = cfg[1];
	float smoothing = cfg[2], scale = cfg[3], loss = NAN;
	size_t nl = (size_t)n * classes;
	const float *l = get(g, c, "logits", nl), *fl = get(g, c, "labels", n);
	const float *tl = get(g, c, "loss", 1), *td = get(g, c, "dlogits", nl);
	const float *tc = get(g, c, "correct", 1);
	if (!must(l && fl && tl && td && tc, c, "logits/labels/loss/dlogits/correct"))
		return;
	int32_t *lab = malloc(sizeof(*lab) * n);
	float *d = chk_alloc(nl);
	int correct = -1;
	if (!lab)
		bail_out("out of memory");
	for (int i = 0; i < n; i++)
		lab[i] = (int32_t)fl[i];
	chk_poison(d, nl);
	if (check_rc(be,
		     be->ops->xent(be, l, lab, n, classes, smoothing, scale, &loss, &correct, d),
		     c)) {
		is_double(loss, tl[0], CHK_TOL * fabs(tl[0]),
			  "%s %s loss (smoothing %g) vs torch: %.7f", be->ops->name, c, smoothing,
			  loss);
		is_int(correct, (int)tc[0], "%s %s correct vs torch", be->ops->name, c);
		close_to(be, c, "dlogits", d, td, nl);
	}
	free(lab), free(d);
}

static void run_all(struct backend *be, const struct golden *g)
{
	char c[32];

	diag("backend %s", be->ops->name);
	for (int i = 0; snprintf(c, sizeof(c), "conv%d", i), get(g, c, "cfg", 0); i++)
		conv_case(be, g, c);
	for (int i = 0; snprintf(c, sizeof(c), "bn%d", i), get(g, c, "cfg", 0); i++)
		bn_case(be, g, c);
	for (int i = 0; snprintf(c, sizeof(c), "pool%d", i), get(g, c, "cfg", 0); i++)
		pool_case(be, g, c);
	for (int i = 0; snprintf(c, sizeof(c), "linear%d", i), get(g, c, "cfg", 0); i++)
		linear_case(be, g, c);
	relu_case(be, g);
	for (int i = 0; snprintf(c, sizeof(c), "gap%d", i), get(g, c, "cfg", 0); i++)
		gap_case(be, g, c);
	for (int i = 0; snprintf(c, sizeof(c), "xent%d", i), get(g, c, "cfg", 0); i++)
		xent_case(be, g, c);
}

int main(void)
{
	const char *src = getenv("DPTRAIN_SRC_DIR");
	char path[4096];
	struct dp_error err;
	struct golden g;
	struct backend *be[3] = {NULL, NULL, NULL};

	snprintf(path, sizeof(path), "%s/t/reference/data/ops.bin", src && *src ? src : ".");
	golden_load(&g, path);
	/* The file must hold every kind of case, or the loops above would test nothing. */
	ok(get(&g, "conv0", "cfg", 0) && get(&g, "bn0", "cfg", 0) && get(&g, "pool0", "cfg", 0) &&
	       get(&g, "linear0", "cfg", 0) && get(&g, "relu", "x", 0) &&
	       get(&g, "gap0", "cfg", 0) && get(&g, "xent1", "cfg", 0),
	   "%s: %d arrays, every op present", path, g.n);

	be[0] = be_ref_create(&err);
	be[1] = be_cpu_create(0, &err);
	be[2] = be_ref_create_parallel(0, &err);
	for (int i = 0; i < 3; i++) {
		if (!ok(be[i] != NULL, "backend %d created", i)) {
			diag("%s", err.text);
			continue;
		}
		/* acts in the backend's own layout (oneDNN's blocks): seen as float32 NCHW */
		struct backend *view = be[i]->ops->act_import ? plain_view(be[i], "cpu") : NULL;
		run_all(view ? view : be[i], &g);
		if (view)
			view->ops->destroy(view);
		be[i]->ops->destroy(be[i]);
	}
	golden_free(&g);
	return done_testing();
}
