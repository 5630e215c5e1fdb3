/* nn_half.c — models over a backend whose activations are 16-bit (backend.h: be->act_dtype), on
 * the CPU: the reference backend behind backend_emul.h's bfloat16/half storage. Checks that
 * nn.c sizes, imports and accumulates activations through the backend (a float access to a
 * 16-bit activation reads garbage or past the buffer, which these comparisons and the
 * sanitizers catch), that each model's loss and gradients stay within 16-bit rounding of the
 * float32 model's, that fused and unfused ResNet blocks agree, and that a model learns. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/backend/backend.h"
#include "t/unit/backend_emul.h"
#include "t/unit/backend_check.h"
#include "trainer/nn/nn.h"
#include "t/lib/tap.h"

static struct chk_rng rng;

struct run {
	double loss[2];
	float *grads;
	float logits0; /* first logit, exported to float32 */
};

/* Two steps (the second accumulating) of model `s` from seed 7 on backend be. */
static int run_model(struct backend *be, const struct nn_spec *s, const float *x, const int32_t *y,
		     int n, struct run *r)
{
	struct dp_error err;
	struct nn_model m;
	float *logits, loss, first;
	int correct;

	if (nn_build(&m, be, s, &err) < 0 || nn_init_weights(&m, 7, &err) < 0)
		return diag("%s on %s: %s", s->name, be->ops->name, err.text), -1;
	for (int step = 0; step < 2; step++) {
		if (nn_forward(&m, x, n, &logits, &err) < 0 ||
		    nn_loss(&m, y, n, 0.0f, 1.0f, &loss, &correct, &err) < 0 ||
		    nn_backward(&m, n, step ? 1.0f : 0.0f, &err) < 0) {
			diag("%s on %s: %s", s->name, be->ops->name, err.text);
			nn_free(&m);
			return -1;
		}
		r->loss[step] = loss;
	}
	if (be->ops->act_export)
		be->ops->act_export(be, logits, &first, 1, 1, 1, 1);
	else
		first = logits[0];
	r->logits0 = first;
	r->grads = malloc(m.param_total * sizeof(float));
	memcpy(r->grads, m.grads, m.param_total * sizeof(float));
	nn_free(&m);
	return 0;
}

/* The 16-bit model against the float32 one: losses within rtol, gradients in the same
 * direction (cosine) and of the same size. */
static void compare(const char *name, const struct nn_spec *s, enum be_dtype t, double rtol,
		    double min_cos)
{
	struct dp_error err;
	const char *tn = t == BE_BF16 ? "bf16" : "fp16";
	int n = 8;
	size_t nx = (size_t)n * s->c * s->h * s->w, np;
	float *x = chk_alloc(nx);
	int32_t y[8];
	struct run a = {0}, b = {0};
	struct backend *ref = be_ref_create(&err);
	struct backend *h = emul_create(be_ref_create(&err), t);
	struct nn_model probe;

	chk_random(&rng, x, nx, -1, 1);
	for (int i = 0; i < n; i++)
		y[i] = (int32_t)(chk_next(&rng) % (uint64_t)s->classes);
	if (!ok(ref && h && run_model(ref, s, x, y, n, &a) == 0 &&
		    run_model(h, s, x, y, n, &b) == 0,
		"%s %s: two steps on float32 and on %s activations", name, tn, tn))
		goto out;
	nn_build(&probe, ref, s, &err);
	np = probe.param_total;
	nn_free(&probe);
	double dot = 0, na = 0, nb = 0;
	for (size_t i = 0; i < np; i++) {
		dot += (double)a.grads[i] * b.grads[i];
		na += (double)a.grads[i] * a.grads[i];
		nb += (double)b.grads[i] * b.grads[i];
	}
	double cos = dot / (sqrt(na * nb) + 1e-300), ratio = sqrt(nb / (na + 1e-300));
	double e0 = fabs(b.loss[0] - a.loss[0]) / fabs(a.loss[0]);
	double e1 = fabs(b.loss[1] - a.loss[1]) / fabs(a.loss[1]);
	ok(e0 <= rtol && e1 <= rtol,
	   "%s %s: losses %.6g %.6g vs float32 %.6g %.6g (rel %.2g, %.2g <= %g)", name, tn,
	   b.loss[0], b.loss[1], a.loss[0], a.loss[1], e0, e1, rtol);
	ok(cos >= min_cos && fabs(ratio - 1) <= 0.05,
	   "%s %s: gradients: cosine %.5f (>= %g), norm ratio %.4f", name, tn, cos, min_cos, ratio);
	ok(fabs(b.logits0 - a.logits0) <= 0.1 * (fabs(a.logits0) + 1),
	   "%s %s: logits exported to float32 (%.5g vs %.5g)", name, tn, b.logits0, a.logits0);
out:
	free(x), free(a.grads), free(b.grads);
	if (ref)
		ref->ops->destroy(ref);
	if (h)
		h->ops->destroy(h);
}

/* lenet learns 4 well-separated classes in bf16: plain SGD through the op table. */
static void learns(void)
{
	struct dp_error err;
	struct backend *h = emul_create(be_ref_create(&err), BE_BF16);
	struct nn_spec s = {.name = "lenet", .c = 1, .h = 28, .w = 28, .classes = 4};
	struct nn_model m;
	int n = 8, correct = 0;
	size_t px = 28 * 28;
	float *x = chk_alloc(n * px), *logits, loss = 0, first = 0;
	int32_t y[8];

	if (!ok(nn_build(&m, h, &s, &err) == 0 && nn_init_weights(&m, 3, &err) == 0,
		"lenet on bf16 builds%s%s", *err.text ? ": " : "", err.text))
		goto out;
	for (int step = 0; step < 60; step++) {
		/* class k: a bright quadrant k over noise */
		chk_random(&rng, x, n * px, 0, 0.3f);
		for (int i = 0; i < n; i++) {
			y[i] = (int32_t)(chk_next(&rng) % 4);
			for (int r = 0; r < 14; r++)
				for (int c = 0; c < 14; c++)
					x[i * px + (r + 14 * (y[i] / 2)) * 28 + c +
					  14 * (y[i] % 2)] += 1;
		}
		if (nn_forward(&m, x, n, &logits, &err) < 0 ||
		    nn_loss(&m, y, n, 0.0f, 1.0f, &loss, &correct, &err) < 0 ||
		    nn_backward(&m, n, 0.0f, &err) < 0 ||
		    h->ops->axpby(h, -0.1f, m.grads, 1.0f, m.weights, m.param_total) < 0) {
			fail("lenet on bf16, step %d: %s", step, err.text);
			goto done;
		}
		if (step == 0)
			first = loss;
	}
	ok(loss < 0.5f * first && correct >= n - 1,
	   "lenet on bf16 learns: loss %.4f -> %.4f, last batch %d/%d right", first, loss, correct,
	   n);
done:
	nn_free(&m);
out:
	free(x);
	h->ops->destroy(h);
}

int main(void)
{
	static const int hidden[2] = {24, 16};
	struct nn_spec mlp = {
	    .name = "mlp", .c = 1, .h = 6, .w = 6, .classes = 5, .hidden = hidden, .nhidden = 2};
	struct nn_spec lenet = {.name = "lenet", .c = 1, .h = 28, .w = 28, .classes = 10};
	struct nn_spec rn = {
	    .name = "resnet18", .c = 3, .h = 16, .w = 16, .classes = 5, .stem = "small"};
	struct nn_spec rn_unfused = rn;

	rng.s = chk_seed();
	rn_unfused.unfused = 1;
	/* bf16 keeps 8 mantissa bits (relative rounding 2^-9 per op), fp16 11 (2^-12); over a few
	 * layers the loss moves by a few of those, the gradients' direction by less than 1%.
	 * ResNet's batch norm over 8 samples of 2x2 in its last stage amplifies rounding (a cosine
	 * of ~0.95 in bf16, ~0.99 in fp16 from run to run); a wrong activation access gives
	 * unrelated gradients (cosine near 0) or NaN. Fused and unfused blocks do not round alike
	 * in 16 bits (one rounding of bn + z against two), so each is held to float32. */
	compare("mlp", &mlp, BE_BF16, 2e-2, 0.99);
	compare("lenet", &lenet, BE_BF16, 2e-2, 0.99);
	compare("resnet18", &rn, BE_BF16, 1e-2, 0.9);
	compare("lenet", &lenet, BE_F16, 3e-3, 0.999);
	compare("resnet18 unfused", &rn_unfused, BE_F16, 2e-3, 0.98);
	learns();
	return done_testing();
}
