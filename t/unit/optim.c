/* optim.c (test) — trainer/optim/optim.c against PyTorch: params and optimizer state after each of
 * 5 steps of every case in t/reference/data/optim-*.json (made by t/reference/gen_optim.py). Reads
 * the golden files only; the sharding, resume and validation tests live elsewhere. */
#include "trainer/optim/optim.h"
#include "t/lib/tap.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_STEPS 8
#define MAX_SEGS  16

static const char *const sgd_cases[] = {"sgd", "sgd-wd", "sgd-momentum", "sgd-nesterov",
					"sgd-dampening"};
static const char *const other_cases[] = {"adamw", "adamw-nowd", "adamw-highwd",
					  "lamb",  "lamb-nowd",	 "lamb-nvlamb-clip"};

struct inputs {
	size_t total;
	struct optim_segment segs[MAX_SEGS];
	int nsegs;
	float *params;
	float *grads[MAX_STEPS];
	int nsteps;
};

static json_t *load(const char *name)
{
	char path[4096];
	const char *src = getenv("DPTRAIN_SRC_DIR");
	json_error_t e;
	snprintf(path, sizeof(path), "%s/t/reference/data/%s", src ? src : ".", name);
	json_t *j = json_load_file(path, 0, &e);
	if (!j)
		diag("cannot read %s: %s (line %d); regenerate with 'make reference'", path, e.text,
		     e.line);
	return j;
}

/* A string of space-separated hex float32 bit patterns; n must match. */
static int hex_floats(json_t *s, float *out, size_t n)
{
	const char *p = json_string_value(s);
	if (!p)
		return -1;
	for (size_t i = 0; i < n; i++) {
		char *end;
		unsigned long bits = strtoul(p, &end, 16);
		if (end == p)
			return -1;
		uint32_t b32 = (uint32_t)bits;
		memcpy(&out[i], &b32, sizeof(b32));
		p = end;
	}
	while (*p == ' ')
		p++;
	return *p ? -1 : 0;
}

static float *hex_alloc(json_t *s, size_t n)
{
	float *a = malloc(n * sizeof(float));
	if (a && hex_floats(s, a, n) < 0) {
		free(a);
		a = NULL;
	}
	return a;
}

static int load_inputs(struct inputs *in)
{
	json_t *j = load("optim-inputs.json");
	json_t *segs, *seg, *grads, *g;
	size_t i;
	int rv = -1;

	if (!j)
		return -1;
	in->total = (size_t)json_integer_value(json_object_get(j, "total"));
	segs = json_object_get(j, "segments");
	if (json_array_size(segs) > MAX_SEGS)
		goto out;
	json_array_foreach(segs, i, seg)
	{
		in->segs[i].offset = (size_t)json_integer_value(json_object_get(seg, "offset"));
		in->segs[i].count = (size_t)json_integer_value(json_object_get(seg, "count"));
		in->segs[i].decay = (int)json_integer_value(json_object_get(seg, "decay"));
		in->segs[i].name = NULL;
	}
	in->nsegs = (int)json_array_size(segs);
	in->params = hex_alloc(json_object_get(j, "params"), in->total);
	grads = json_object_get(j, "grads");
	if (!in->params || json_array_size(grads) > MAX_STEPS)
		goto out;
	json_array_foreach(grads, i, g)
	{
		if (!(in->grads[i] = hex_alloc(g, in->total)))
			goto out;
	}
	in->nsteps = (int)json_array_size(grads);
	rv = in->nsegs > 0 && in->nsteps > 0 ? 0 : -1;
out:
	json_decref(j);
	return rv;
}

static double num(json_t *c, const char *key)
{
	return json_number_value(json_object_get(c, key));
}

static void case_params(json_t *c, struct optim_params *p)
{
	const char *kind = json_string_value(json_object_get(c, "kind"));
	enum optim_kind k = !strcmp(kind, "sgd")     ? OPTIM_SGD
			    : !strcmp(kind, "adamw") ? OPTIM_ADAMW
						     : OPTIM_LAMB;
	optim_params_default(p, k);
	p->weight_decay = num(c, "weight_decay");
	if (k == OPTIM_SGD) {
		p->momentum = num(c, "momentum");
		p->dampening = num(c, "dampening");
		p->nesterov = json_is_true(json_object_get(c, "nesterov"));
		return;
	}
	p->beta1 = num(c, "beta1");
	p->beta2 = num(c, "beta2");
	p->eps = num(c, "eps");
	if (k == OPTIM_LAMB) {
		p->max_grad_norm = num(c, "max_grad_norm");
		p->nvlamb = json_is_true(json_object_get(c, "nvlamb"));
	}
}

/* Relative error against max(|want|, 1e-3 * max|want|): a value that cancels to almost zero
 * is judged against the array's scale, not its own. Also counts values that differ at all. */
static double compare(const float *got, const float *want, size_t n, size_t *ndiff)
{
	double scale = 0;
	*ndiff = 0;
	for (size_t i = 0; i < n; i++) {
		double w = want[i] < 0 ? -want[i] : want[i];
		scale = w > scale ? w : scale;
		*ndiff += memcmp(&got[i], &want[i], sizeof(float)) != 0;
	}
	return tap_max_rel_err(got, want, n, scale > 0 ? 1e-3 * scale : 1e-30);
}

static void run_case(const struct inputs *in, const char *name, double tol)
{
	char file[256];
	struct dp_error err;
	struct optim o;
	struct optim_params p;
	float *params = NULL, *want = NULL;
	json_t *c;

	snprintf(file, sizeof(file), "optim-%s.json", name);
	if (!(c = load(file))) {
		fail("%s: golden file", name);
		return;
	}
	case_params(c, &p);
	if (!ok(optim_init(&o, &p, in->segs, in->nsegs, in->total, &err) == 0, "%s: init", name)) {
		diag("%s", err.text);
		goto out;
	}
	params = malloc(in->total * sizeof(float));
	want = malloc(in->total * sizeof(float));
	memcpy(params, in->params, in->total * sizeof(float));
	json_t *lrs = json_object_get(c, "lr"), *steps = json_object_get(c, "steps");
	is_int((long long)json_array_size(steps), in->nsteps, "%s: %d steps", name, in->nsteps);
	for (int s = 0; s < in->nsteps && s < (int)json_array_size(steps); s++) {
		json_t *st = json_array_get(steps, (size_t)s);
		size_t ndiff;
		optim_step(&o, params, in->grads[s],
			   json_number_value(json_array_get(lrs, (size_t)s)));

		if (hex_floats(json_object_get(st, "params"), want, in->total) < 0) {
			fail("%s step %d: golden params", name, s + 1);
			continue;
		}
		double e = compare(params, want, in->total, &ndiff);
		ok(e <= tol,
		   "%s step %d: params, max rel err %.3g <= %.0e (%zu of %zu not identical)", name,
		   s + 1, e, tol, ndiff, in->total);

		int nstate;
		struct optim_state_buf *sb = optim_state(&o, &nstate);
		/* Golden keys other than params are state buffers: same set, same values. */
		is_int((long long)json_object_size(st) - 1, nstate, "%s step %d: %d state buffers",
		       name, s + 1, nstate);
		for (int k = 0; k < nstate; k++) {
			if (sb[k].offset != 0 || sb[k].count != in->total ||
			    hex_floats(json_object_get(st, sb[k].name), want, in->total) < 0) {
				fail("%s step %d: state %s in golden file", name, s + 1,
				     sb[k].name);
				continue;
			}
			e = compare(sb[k].data, want, in->total, &ndiff);
			ok(e <= tol, "%s step %d: %s, max rel err %.3g (%zu not identical)", name,
			   s + 1, sb[k].name, e, ndiff);
		}
	}
	is_int(o.step, in->nsteps, "%s: step count", name);
	optim_free(&o);
out:
	free(params);
	free(want);
	json_decref(c);
}

/* Segments large enough to be updated in pieces on the OpenMP threads give the bits of one
 * thread: every kind, 3 steps, params and state compared bit for bit. */
static void test_threads(void)
{
#ifdef _OPENMP
	static const struct optim_segment segs[] = {
	    {"big", 0, 300001, 1}, {"mid", 300001, 70000, 0}, {"small", 370001, 100, 1}};
	const size_t total = 370101;
	static const char *const kinds[] = {"sgd-nesterov", "sgd-momentum", "adamw", "lamb-clip"};
	float *g = malloc(total * sizeof(float)), *p0 = malloc(total * sizeof(float));
	uint64_t r = 88172645463325252ull;

	for (size_t i = 0; i < total; i++) {
		r ^= r << 13, r ^= r >> 7, r ^= r << 17;
		p0[i] = (float)(r % 20001) / 10000.0f - 1.0f;
		g[i] = (float)((r >> 20) % 20001) / 20000.0f - 0.5f;
	}
	for (int k = 0; k < 4; k++) {
		float *res[2];
		struct optim o[2];
		int ok_all = 1;
		for (int t = 0; t < 2; t++) {
			struct optim_params p;
			struct dp_error err;
			optim_params_default(&p, k < 2	  ? OPTIM_SGD
						 : k == 2 ? OPTIM_ADAMW
							  : OPTIM_LAMB);
			p.weight_decay = 0.01;
			p.momentum = k < 2 ? 0.9 : 0.0;
			p.nesterov = k == 0;
			p.max_grad_norm = k == 3 ? 1.0 : 0.0;
			omp_set_num_threads(t == 0 ? 1 : 3);
			res[t] = malloc(total * sizeof(float));
			memcpy(res[t], p0, total * sizeof(float));
			if (optim_init(&o[t], &p, segs, 3, total, &err) != 0) {
				fail("%s: init: %s", kinds[k], err.text);
				ok_all = 0;
				continue;
			}
			for (int s = 0; s < 3; s++)
				optim_step(&o[t], res[t], g, 0.01 * (s + 1));
		}
		if (ok_all) {
			int n0, n1, same = memcmp(res[0], res[1], total * sizeof(float)) == 0;
			struct optim_state_buf *a = optim_state(&o[0], &n0),
					       *b = optim_state(&o[1], &n1);
			for (int i = 0; same && i < n0 && i < n1; i++)
				same =
				    a[i].count == b[i].count &&
				    memcmp(a[i].data, b[i].data, a[i].count * sizeof(float)) == 0;
			ok(same && n0 == n1,
			   "%s: 3 threads give 1 thread's params and state, bit for bit", kinds[k]);
			optim_free(&o[0]);
			optim_free(&o[1]);
		}
		free(res[0]);
		free(res[1]);
	}
	free(g);
	free(p0);
#else
	skip(4, "built without OpenMP: one thread");
#endif
}

int main(void)
{
	struct inputs in = {0};

	if (!ok(load_inputs(&in) == 0, "read optim-inputs.json"))
		return done_testing();
	for (size_t i = 0; i < sizeof(sgd_cases) / sizeof(*sgd_cases); i++)
		run_case(&in, sgd_cases[i], 1e-6);
	for (size_t i = 0; i < sizeof(other_cases) / sizeof(*other_cases); i++)
		run_case(&in, other_cases[i], 1e-5);
	free(in.params);
	for (int s = 0; s < MAX_STEPS; s++)
		free(in.grads[s]);
	test_threads();
	return done_testing();
}
