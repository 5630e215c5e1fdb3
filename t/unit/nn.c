/* nn.c — the model graph: parameter counts against torchvision, state_dict names and the
 * reverse-order layout, a finite-difference check of every model's backward schedule
 * (in-place ReLU, residual fan-out, gradient-slot reuse, accumulation), and the safetensors
 * round trip with its errors. Runs on the reference backend; that fusing changes no bit also on
 * the CPU backend, alone with --cpu (t0020 runs that under every instruction set oneDNN may
 * pick). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer/backend/backend.h"
#include "trainer/nn/nn.h"
#include "t/lib/tap.h"

static struct backend *be;

static uint64_t rs = 12345;
static double urand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (double)(rs >> 11) / 9007199254740992.0;
}

static void param_counts(void)
{
	struct dp_error err = {""};
	static const struct {
		const char *name;
		size_t count;
	} tv[] = {{"resnet18", 11689512},
		  {"resnet34", 21797672},
		  {"resnet50", 25557032},
		  {"resnet101", 44549160},
		  {"resnet152", 60192808}};
	for (size_t i = 0; i < sizeof(tv) / sizeof(tv[0]); i++) {
		struct nn_model m;
		struct nn_spec s = {.name = tv[i].name,
				    .c = 3,
				    .h = 224,
				    .w = 224,
				    .classes = 1000,
				    .stem = "imagenet"};
		if (!ok(nn_build(&m, be, &s, &err) == 0, "build %s: %s", tv[i].name, err.text))
			continue;
		is_int((long long)nn_param_count(&m), (long long)tv[i].count,
		       "%s (imagenet stem) has torchvision's parameter count", tv[i].name);
		nn_free(&m);
	}
	struct nn_model m;
	struct nn_spec s = {.name = "mlp", .c = 1, .h = 28, .w = 28, .classes = 10};
	ok(nn_build(&m, be, &s, &err) == 0, "build mlp");
	is_int((long long)nn_param_count(&m), 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10,
	       "mlp 784-512-512-10 parameter count");
	ok(m.params[m.nparams - 1].offset == 0 &&
	       strcmp(m.params[m.nparams - 1].name, "fc3.bias") == 0,
	   "last layer's bias is first in the flat buffer (reverse execution order)");
	nn_free(&m);
	/* regression: an empty model.hidden built the default 512-512 instead */
	static const int none[1] = {0};
	s.hidden = none;
	s.nhidden = 0;
	ok(nn_build(&m, be, &s, &err) == 0, "build mlp with hidden []");
	is_int((long long)nn_param_count(&m), 784 * 10 + 10, "mlp with hidden [] is linear");
	nn_free(&m);
	s.hidden = NULL;
	s.name = "lenet";
	ok(nn_build(&m, be, &s, &err) == 0, "build lenet");
	is_int((long long)nn_param_count(&m), 156 + 2416 + 48120 + 10164 + 850,
	       "lenet parameter count (28x28 input, padded first conv)");
	nn_free(&m);
	s = (struct nn_spec){
	    .name = "resnet50", .c = 3, .h = 32, .w = 32, .classes = 10, .stem = "small"};
	ok(nn_build(&m, be, &s, &err) == 0, "build resnet50 small");
	ok(nn_find_param(&m, "layer1.0.downsample.0.weight") &&
	       nn_find_param(&m, "layer4.2.bn3.bias") &&
	       nn_find_param(&m, "conv1.weight")->shape[2] == 3,
	   "resnet50 small: torchvision names, 3x3 stem");
	nn_free(&m);
	s.name = "resnet7";
	ok(nn_build(&m, be, &s, &err) < 0 &&
	       strstr(err.text, "unknown model \"resnet7\" (mlp, lenet, resnet18, resnet34"),
	   "a depth not in the list of models is refused, naming them: %s", err.text);
	s.name = "vgg";
	ok(nn_build(&m, be, &s, &err) < 0 && strstr(err.text, "unknown model \"vgg\""),
	   "unknown model is refused: %s", err.text);
	s = (struct nn_spec){.name = "lenet", .c = 1, .h = 20, .w = 20, .classes = 10};
	ok(nn_build(&m, be, &s, &err) < 0 && strstr(err.text, "28 to 32"),
	   "lenet refuses 20x20: %s", err.text);
}

static double loss_of(struct nn_model *m, const float *x, const int32_t *y, int n)
{
	float *logits, loss;
	int correct;
	struct dp_error err;
	if (nn_forward(m, x, n, &logits, &err) < 0 ||
	    nn_loss(m, y, n, 0.1f, 1.0f, &loss, &correct, &err) < 0)
		bail_out("forward: %s", err.text);
	return loss;
}

/* Central differences on a sample of parameters vs nn_backward. */
static void gradcheck(const char *name, int c, int h, int w, int classes, int n, const char *stem,
		      const int *hidden, int nhidden)
{
	struct dp_error err = {""};
	struct nn_model m;
	struct nn_spec s = {.name = name,
			    .c = c,
			    .h = h,
			    .w = w,
			    .classes = classes,
			    .stem = stem,
			    .hidden = hidden,
			    .nhidden = nhidden};
	if (!ok(nn_build(&m, be, &s, &err) == 0, "build %s: %s", name, err.text))
		return;
	nn_init_weights(&m, 7, &err);
	size_t xn = (size_t)n * c * h * w;
	float *x = malloc(xn * sizeof(float));
	int32_t *y = malloc((size_t)n * sizeof(int32_t));
	for (size_t i = 0; i < xn; i++)
		x[i] = (float)(urand() * 2 - 1);
	for (int i = 0; i < n; i++)
		y[i] = (int32_t)(urand() * classes);

	loss_of(&m, x, y, n);
	ok(nn_backward(&m, n, 0.0f, &err) == 0, "%s backward: %s", name, err.text);
	float *g = malloc(m.param_total * sizeof(float));
	memcpy(g, m.grads, m.param_total * sizeof(float));
	/* accumulation: a second backward with beta 1 doubles every gradient */
	loss_of(&m, x, y, n);
	nn_backward(&m, n, 1.0f, &err);
	double worst_acc = 0;
	for (int i = 0; i < m.nparams; i++)
		for (size_t j = 0; j < m.params[i].count; j++) {
			size_t k = m.params[i].offset + j;
			double e = fabs(m.grads[k] - 2 * g[k]) / (fabs(2 * g[k]) + 1e-6);
			if (e > worst_acc)
				worst_acc = e;
		}
	ok(worst_acc < 1e-5, "%s: beta=1 accumulates (max rel error %.2g)", name, worst_acc);

	int bad = 0, checked = 0;
	double worst = 0;
	/* every parameter tensor of the small nets; 40 random ones of the deep ones */
	int samples = m.nparams <= 20 ? 3 * m.nparams : 40;
	for (int t = 0; t < samples; t++) {
		const struct nn_param *p =
		    &m.params[m.nparams <= 20 ? t % m.nparams : (int)(urand() * m.nparams)];
		{
			size_t k = p->offset + (size_t)(urand() * (double)p->count);
			float save = m.weights[k];
			double eps = 1e-3 * fmax(1.0, fabs(save));
			m.weights[k] = save + (float)eps;
			double lp = loss_of(&m, x, y, n);
			m.weights[k] = save - (float)eps;
			double lm = loss_of(&m, x, y, n);
			m.weights[k] = save;
			double num = (lp - lm) / (2 * eps), ana = g[k];
			/* float32 losses: differences below ~5e-4 are rounding noise */
			double e = fabs(num - ana) / (fmax(fabs(num), fabs(ana)) + 2.5e-2);
			checked++;
			if (e > worst)
				worst = e;
			if (e > 2e-2) {
				bad++;
				diag("%s %s[%zu]: numerical %.6g analytical %.6g", name, p->name,
				     k - p->offset, num, ana);
			}
		}
	}
	ok(bad == 0, "%s: %d sampled gradients match central differences (worst rel %.3g)", name,
	   checked, worst);
	free(g);
	free(x);
	free(y);
	nn_free(&m);
}

static void save_load(void)
{
	char path[] = "/tmp/dptrain-nn-XXXXXX";
	struct dp_error err = {""};
	int fd = mkstemp(path);
	close(fd);
	struct nn_model a, b;
	struct nn_spec s = {
	    .name = "resnet18", .c = 3, .h = 16, .w = 16, .classes = 5, .stem = "small"};
	nn_build(&a, be, &s, &err);
	nn_build(&b, be, &s, &err);
	nn_init_weights(&a, 1, &err);
	nn_init_weights(&b, 2, &err);
	for (size_t i = 0; i < a.state_total; i++)
		a.state[i] = (float)urand();
	a.batches_tracked = 42;
	ok(nn_save_weights(&a, path, "{\"model\":\"resnet18\"}", &err) == 0, "save weights: %s",
	   err.text);
	ok(nn_load_weights(&b, path, &err) == 0, "load weights: %s", err.text);
	ok(memcmp(a.weights, b.weights, a.param_total * sizeof(float)) == 0 &&
	       memcmp(a.state, b.state, a.state_total * sizeof(float)) == 0 &&
	       b.batches_tracked == 42,
	   "weights, running stats and num_batches_tracked round-trip exactly");

	struct nn_model c;
	struct nn_spec s2 = s;
	s2.classes = 7;
	nn_build(&c, be, &s2, &err);
	ok(nn_load_weights(&c, path, &err) < 0 &&
	       strstr(err.text,
		      "tensor \"fc.weight\" has shape [5, 512], model resnet18 expects [7, 512]"),
	   "a shape mismatch names the tensor and both shapes: %s", err.text);
	nn_free(&c);
	s2 = (struct nn_spec){.name = "lenet", .c = 1, .h = 28, .w = 28, .classes = 10};
	nn_build(&c, be, &s2, &err);
	ok(nn_load_weights(&c, path, &err) < 0 &&
	       strstr(err.text,
		      "tensor \"conv1.weight\" has shape [64, 3, 3, 3], model lenet expects"),
	   "another model's file: %s", err.text);
	nn_free(&c);

	FILE *f = fopen(path, "r+");
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	fclose(f);
	ok(truncate(path, size - 100) == 0, "truncate the file");
	ok(nn_load_weights(&b, path, &err) < 0 && strstr(err.text, "outside the"),
	   "a truncated file is refused: %s", err.text);
	ok(truncate(path, 4) == 0 && nn_load_weights(&b, path, &err) < 0 &&
	       strstr(err.text, "truncated"),
	   "a 4-byte file is refused: %s", err.text);
	unlink(path);
	ok(nn_load_weights(&b, path, &err) < 0 && strstr(err.text, "No such file"),
	   "a missing file is refused: %s", err.text);
	nn_free(&a);
	nn_free(&b);
}

/* nn_build fuses each block's last BN, the residual add and the ReLU into one node. The fused
 * model must compute the same bits as the unfused one (forward, loss, every gradient, running
 * statistics, across two steps with accumulation), hold fewer activations, and save the same
 * safetensors file (state_dict order, names, values). */
static void fused_same_bits(const char *name, int batch, int hw)
{
	char pa[] = "/tmp/dptrain-nn-XXXXXX", pb[] = "/tmp/dptrain-nn-XXXXXX";
	struct dp_error err = {""};
	struct nn_model m[2];
	struct nn_spec s = {.name = name, .c = 3, .h = hw, .w = hw, .classes = 5, .stem = "small"};
	size_t nx = (size_t)batch * 3 * hw * hw;
	float *x = malloc(nx * sizeof(float)), loss[2][2];
	int32_t labels[16];
	int nodes[2], acts[2], correct;

	for (size_t i = 0; i < nx; i++)
		x[i] = (float)(urand() * 2 - 1);
	for (int i = 0; i < batch; i++)
		labels[i] = (int32_t)(urand() * 5) % 5;
	for (int k = 0; k < 2; k++) {
		s.unfused = k;
		if (nn_build(&m[k], be, &s, &err) < 0 || nn_init_weights(&m[k], 7, &err) < 0)
			bail_out("%s: %s", name, err.text);
		nodes[k] = m[k].nnodes;
		nn_reserve(&m[k], batch, &err);
		acts[k] = 0;
		for (int i = 1; i < m[k].nacts; i++)
			acts[k] += m[k].acts[i].alias < 0 && m[k].acts[i].data != NULL;
		for (int step = 0; step < 2; step++) {
			float *logits;
			if (nn_forward(&m[k], x, batch, &logits, &err) < 0 ||
			    nn_loss(&m[k], labels, batch, 0.1f, 1.0f, &loss[k][step], &correct,
				    &err) < 0 ||
			    nn_backward(&m[k], batch, step ? 1.0f : 0.0f, &err) < 0)
				bail_out("%s: %s", name, err.text);
		}
	}
	int blocks = !strcmp(name, "resnet18") ? 8 : 16;
	const char *bn = be->ops->name;
	ok(nodes[1] - nodes[0] == 2 * blocks,
	   "%s [%s]: %d nodes fused, %d unfused (%d blocks fused)", name, bn, nodes[0], nodes[1],
	   blocks);
	/* the BN output and the add's (the ReLU ran in place on the latter) */
	ok(acts[1] - acts[0] == blocks, "%s [%s]: %d activations allocated fused, %d unfused", name,
	   bn, acts[0], acts[1]);
	ok(memcmp(loss[0], loss[1], sizeof(loss[0])) == 0, "%s [%s]: same losses (%.9g %.9g)", name,
	   bn, loss[0][0], loss[0][1]);
	ok(memcmp(m[0].grads, m[1].grads, m[0].param_total * sizeof(float)) == 0,
	   "%s [%s]: same accumulated gradients, bit for bit", name, bn);
	ok(memcmp(m[0].state, m[1].state, m[0].state_total * sizeof(float)) == 0,
	   "%s [%s]: same running statistics", name, bn);
	close(mkstemp(pa));
	close(mkstemp(pb));
	int saved = nn_save_weights(&m[0], pa, NULL, &err) == 0 &&
		    nn_save_weights(&m[1], pb, NULL, &err) == 0;
	FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
	int same = saved && fa && fb;
	for (int ca = 0, cb = 0; same && (ca != EOF || cb != EOF);) {
		ca = fgetc(fa);
		cb = fgetc(fb);
		same = ca == cb;
	}
	ok(same, "%s [%s]: fused and unfused models save the same safetensors file", name, bn);
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	unlink(pa);
	unlink(pb);
	nn_free(&m[0]);
	nn_free(&m[1]);
	free(x);
}

int main(int argc, char **argv)
{
	struct dp_error err = {""};
	int cpu_only = argc > 1 && strcmp(argv[1], "--cpu") == 0;
	if (argc > 1 && !cpu_only)
		bail_out("usage: nn.t [--cpu]");
	if (!cpu_only) {
		be = be_ref_create(&err);
		if (!be)
			bail_out("reference backend: %s", err.text);
		param_counts();
		static const int hidden[2] = {12, 9};
		gradcheck("mlp", 1, 5, 5, 4, 3, NULL, hidden, 2);
		gradcheck("lenet", 1, 28, 28, 10, 2, NULL, NULL, 0);
		/* resnet18 covers basic blocks with and without downsampling, fan-out into the
		 * residual add and in-place ReLU. resnet50's bottlenecks and the imagenet stem are
		 * checked against PyTorch in model_parity.c: float32 central differences are too
		 * coarse for them. */
		gradcheck("resnet18", 3, 16, 16, 4, 4, "small", NULL, 0);
		fused_same_bits("resnet18", 4, 8);
		fused_same_bits("resnet50", 2, 8);
		save_load();
		be->ops->destroy(be);
	}
	be = be_cpu_create(0, &err);
	if (!be)
		bail_out("cpu backend: %s", err.text);
	fused_same_bits("resnet18", 4, 8);
	fused_same_bits("resnet50", 2, 8);
	be->ops->destroy(be);
	return done_testing();
}
