/* model_parity.c — one full training step of each bundled model against PyTorch (llm.c's
 * method): same initial weights and batch, then logits, loss, every parameter gradient, the
 * BN running statistics, and the weights after one SGD-momentum and one AdamW step, each
 * within a stated tolerance. The reference comes from t/reference/gen_model.py (Debian's
 * python3-torch + torchvision), generated into a temporary directory at test time, or read
 * from the directory given as argv[1]. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "nn.h"
#include "optim.h"
#include "safetensors.h"
#include "tap.h"

/* Errors are ||ours - exact|| / ||exact|| per tensor, exact = PyTorch in float64. */
#define TOL_FWD  1e-4 /* logits, running stats */
#define TOL_STEP 1e-3 /* gradients and weight updates */

static const struct st_tensor *need(const struct st_file *f, const char *fmt, const char *name)
{
	char key[256];
	snprintf(key, sizeof(key), fmt, name);
	const struct st_tensor *t = st_find(f, key);
	if (!t)
		bail_out("%s: no tensor %s (regenerate with t/reference/gen_model.py)", f->path, key);
	return t;
}

static size_t numel(const struct st_tensor *t)
{
	return (t->end - t->begin) / st_dtype_size(t->dtype);
}

/* ||got - want|| / ||want|| over a whole tensor. Element-wise relative error is not a fair
 * measure here: deep nets at init have gradients spanning many orders of magnitude within a
 * tensor, and the small elements carry float32 rounding of the large ones. */
static double rel_err_floor(const float *got, const float *want, size_t n, double floor_norm)
{
	double d = 0, w = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(got[i]))
			return INFINITY;
		d += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
		w += (double)want[i] * want[i];
	}
	w = sqrt(w) > floor_norm ? sqrt(w) : floor_norm;
	return w > 0 ? sqrt(d) / w : sqrt(d);
}

static double rel_err(const float *got, const float *want, size_t n)
{
	return rel_err_floor(got, want, n, 0.0);
}

static void load_init(struct nn_model *m, const struct st_file *f)
{
	for (int i = 0; i < m->nparams; i++) {
		const struct nn_param *p = &m->params[i];
		const struct st_tensor *t = need(f, "init.%s", p->name);
		if (numel(t) != p->count)
			bail_out("init.%s: %zu values, model has %zu", p->name, numel(t), p->count);
		m->be->ops->from_host(m->be, m->weights + p->offset, st_data(f, t),
				      p->count * sizeof(float));
	}
	for (int i = 0; i < m->nbufs; i++) {
		const struct nn_buffer *q = &m->bufs[i];
		const struct st_tensor *t = need(f, "init.%s", q->name);
		m->be->ops->from_host(m->be, m->state + q->offset, st_data(f, t),
				      q->count * sizeof(float));
	}
}

/* err32.R: PyTorch's own float32 error on result R, the yardstick. dptrain passes where it is
 * within tol, or within twice PyTorch's error where even PyTorch's float32 step is not. */
static double allowed(const struct st_file *f, const char *key, double tol)
{
	const struct st_tensor *t = need(f, "err32.%s", key);
	const float *e = st_data(f, t);
	return fmax(tol, 2.0 * (double)*e);
}

struct worst {
	double floor; /* a bound the result cannot beat (an update is no better than its gradient) */
	double ratio, err, torch_err;
	char name[128];
};

static void track(struct worst *w, const struct st_file *f, const char *key, double err,
		  double tol)
{
	double lim = allowed(f, key, tol);
	if (w->floor > lim)
		lim = w->floor;
	if (err / lim > w->ratio) {
		w->ratio = err / lim;
		w->err = err;
		w->torch_err = *(const float *)st_data(f, need(f, "err32.%s", key));
		snprintf(w->name, sizeof(w->name), "%s", key);
	}
}

static void report(const struct worst *w, const char *what)
{
	ok(w->ratio <= 1.0, "%s (worst %s: %.2g; PyTorch float32 %.2g)", what, w->name, w->err,
	   w->torch_err);
}

/* The optimizer step on copies of the initial weights and our gradients. */
static void check_update(struct nn_model *m, const struct st_file *f, const char *file,
			 const float *w0, const char *tag, enum optim_kind kind)
{
	struct optim o;
	struct optim_params p;
	char err[512], key[200], what[200];
	optim_params_default(&p, kind);
	if (kind == OPTIM_SGD) {
		p.momentum = 0.9;
		p.weight_decay = 5e-4;
	} else {
		p.weight_decay = 0.01;
		p.eps = 1.0; /* as gen_model.py, which says why */
	}
	double lr = kind == OPTIM_SGD ? 0.1 : 1e-3;
	struct optim_segment *segs = calloc((size_t)m->nparams, sizeof(*segs));
	for (int i = 0; i < m->nparams; i++)
		segs[i] = (struct optim_segment){m->params[i].name, m->params[i].offset,
						 m->params[i].count, 1};
	if (optim_init(&o, &p, segs, m->nparams, m->param_total, err, sizeof(err)) < 0)
		bail_out("optim_init: %s", err);
	float *w = malloc(m->param_total * sizeof(float));
	memcpy(w, w0, m->param_total * sizeof(float));
	optim_step(&o, w, m->grads, lr);
	for (size_t i = 0; i < m->param_total; i++)
		w[i] -= w0[i];
	struct worst worst = {0};
	for (int i = 0; i < m->nparams; i++) {
		const struct nn_param *q = &m->params[i];
		/* the update comes from our gradient, already held to PyTorch's standard above: it
		 * may be off by as much as that gradient is */
		snprintf(key, sizeof(key), "grad.%s", q->name);
		worst.floor = 2.0 * rel_err(m->grads + q->offset, st_data(f, need(f, "%s", key)),
					    q->count);
		snprintf(key, sizeof(key), "delta_%s.%s", kind == OPTIM_SGD ? "sgd" : "adamw", q->name);
		track(&worst, f, key, rel_err(w + q->offset, st_data(f, need(f, "%s", key)), q->count),
		      TOL_STEP);
	}
	snprintf(what, sizeof(what), "%s: the update of one %s step, every tensor", file, tag);
	report(&worst, what);
	free(w);
	free(segs);
	optim_free(&o);
}

static void check_model(struct backend *be, const char *dir, const char *file, int c, int h,
			int w, const char *stem)
{
	char name[64];
	snprintf(name, sizeof(name), "%.*s", (int)strcspn(file, "-"), file);
	char path[4096], err[512] = "", key[200], what[256];
	struct st_file f;
	struct nn_model m;
	snprintf(path, sizeof(path), "%s/%s.safetensors", dir, file);
	if (st_open(&f, path, err, sizeof(err)) < 0)
		bail_out("%s", err);
	struct nn_spec spec = {.name = name, .c = c, .h = h, .w = w, .classes = 10, .stem = stem};
	if (nn_build(&m, be, &spec, err, sizeof(err)) < 0)
		bail_out("%s", err);
	load_init(&m, &f);
	const struct st_tensor *tx = need(&f, "%s", "x"), *ty = need(&f, "%s", "y");
	int n = (int)numel(ty);
	const float *smooth = st_data(&f, need(&f, "%s", "label_smoothing"));
	float *logits, loss;
	int correct;
	if (nn_forward(&m, st_data(&f, tx), n, &logits, err, sizeof(err)) < 0 ||
	    nn_loss(&m, st_data(&f, ty), n, *smooth, 1.0f, &loss, &correct, err, sizeof(err)) < 0 ||
	    nn_backward(&m, n, 0.0f, err, sizeof(err)) < 0)
		bail_out("%s step: %s", name, err);
	const char *bn = be->ops->name;
	struct worst wl = {0};
	track(&wl, &f, "logits",
	      rel_err(logits, st_data(&f, need(&f, "%s", "logits")), (size_t)n * 10), TOL_FWD);
	snprintf(what, sizeof(what), "%s [%s]: logits", file, bn);
	report(&wl, what);
	const float *lref = st_data(&f, need(&f, "%s", "loss"));
	is_double(loss, *lref, 1e-5 * fabs(*lref) + 1e-6, "%s [%s]: loss", file, bn);
	/* Like allclose's atol: a tensor's error is measured against its own norm, or against
	 * the norm a tensor of its size has when the whole gradient's energy is spread evenly,
	 * whichever is larger. Gradients that nearly cancel out (BN biases deep in resnet50 at
	 * init, 30x below that share) are otherwise all rounding: PyTorch's own float32 error
	 * on them swings between 3e-5 and 1e-2 from tensor to tensor. */
	double gsq = 0;
	size_t gn = 0;
	for (int i = 0; i < m.nparams; i++) {
		const struct nn_param *p = &m.params[i];
		const float *g = st_data(&f, need(&f, "grad.%s", p->name));
		for (size_t j = 0; j < p->count; j++)
			gsq += (double)g[j] * g[j];
		gn += p->count;
	}
	struct worst wg = {0};
	for (int i = 0; i < m.nparams; i++) {
		const struct nn_param *p = &m.params[i];
		snprintf(key, sizeof(key), "grad.%s", p->name);
		double fl = sqrt(gsq * (double)p->count / (double)gn);
		track(&wg, &f, key,
		      rel_err_floor(m.grads + p->offset, st_data(&f, need(&f, "%s", key)), p->count,
				    fl),
		      TOL_STEP);
	}
	snprintf(what, sizeof(what), "%s [%s]: all %d parameter gradients", file, bn, m.nparams);
	report(&wg, what);
	if (m.nbufs) {
		struct worst ws = {0};
		for (int i = 0; i < m.nbufs; i++) {
			const struct nn_buffer *q = &m.bufs[i];
			snprintf(key, sizeof(key), "after.%s", q->name);
			track(&ws, &f, key,
			      rel_err(m.state + q->offset, st_data(&f, need(&f, "%s", key)), q->count),
			      TOL_FWD);
		}
		snprintf(what, sizeof(what), "%s [%s]: BN running statistics after the step", file,
			 bn);
		report(&ws, what);
	}
	float *w0 = malloc(m.param_total * sizeof(float));
	memcpy(w0, m.weights, m.param_total * sizeof(float));
	check_update(&m, &f, file, w0, "SGD momentum", OPTIM_SGD);
	check_update(&m, &f, file, w0, "AdamW", OPTIM_ADAMW);
	free(w0);
	nn_free(&m);
	st_close(&f);
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/dptrain-parity-XXXXXX", err[512] = "", cmd[8192];
	const char *src = getenv("DPTRAIN_SRC_DIR");
	const char *refdir = argc > 1 ? argv[1] : NULL;
	if (!refdir) {
		if (system("/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null") != 0)
			plan_skip_all("PyTorch with torchvision is not installed (Debian: "
				      "python3-torch python3-torchvision; run 'make deps')");
		if (!mkdtemp(dir))
			bail_out("mkdtemp failed");
		snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/t/reference/gen_model.py %s",
			 src ? src : ".", dir);
		note("generating the PyTorch reference: %s", cmd);
		if (system(cmd) != 0)
			bail_out("the PyTorch reference generator failed: %s", cmd);
		refdir = dir;
	}
	struct backend *ref = be_ref_create(err, sizeof(err));
	struct backend *cpu = be_cpu_create(2, err, sizeof(err));
	if (!ref || !cpu)
		bail_out("backend: %s", err);
	check_model(ref, refdir, "mlp", 1, 28, 28, NULL);
	check_model(cpu, refdir, "mlp", 1, 28, 28, NULL);
	check_model(ref, refdir, "lenet", 1, 28, 28, NULL);
	check_model(cpu, refdir, "lenet", 1, 28, 28, NULL);
	check_model(cpu, refdir, "resnet18", 3, 32, 32, "small");
	check_model(cpu, refdir, "resnet50", 3, 32, 32, "small");
	check_model(cpu, refdir, "resnet18-imagenet", 3, 64, 64, "imagenet");
	ref->ops->destroy(ref);
	cpu->ops->destroy(cpu);
	if (refdir == dir) {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		if (system(cmd) != 0)
			diag("could not remove %s", dir);
	}
	return done_testing();
}
