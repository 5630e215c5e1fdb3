/* optim_bench.c (test) — time per step of each optimizer over a ResNet-50-sized flat buffer
 * (25.6M floats in 161 tensors), single thread. Skipped unless DPTRAIN_BENCH=1: it needs
 * ~600 MB and a few seconds, too much for every 'make check'. */
#include "trainer/optim/optim.h"
#include "t/lib/tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NSEGS  161
#define TOTAL  ((size_t)25557032) /* torchvision resnet50 parameter count */
#define NSTEPS 8

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench(const char *name, const struct optim_params *p, const struct optim_segment *segs,
		  float *params, const float *grads, double lr, int touches)
{
	struct dp_error err;
	struct optim o;
	if (optim_init(&o, p, segs, NSEGS, TOTAL, &err) < 0)
		bail_out("%s", err.text);
	optim_step(&o, params, grads, lr); /* first touch of the state pages */
	/* best of the steps: the machine is shared, the best is what the code can do */
	double best = INFINITY, sum = 0;
	for (int s = 0; s < NSTEPS; s++) {
		double t0 = now();
		optim_step(&o, params, grads, lr);
		double ms = (now() - t0) * 1e3;
		best = ms < best ? ms : best;
		sum += ms;
	}
	int finite = 1;
	for (size_t i = 0; i < TOTAL; i += 4099)
		finite &= isfinite(params[i]);
	/* touches: float reads + writes per element, the memory traffic the loops cannot avoid */
	ok(finite, "%s: %.1f ms/step best, %.1f mean, %zu params (%.1f GB/s at best)", name, best,
	   sum / NSTEPS, TOTAL, (double)touches * sizeof(float) * TOTAL / (best * 1e6));
	optim_free(&o);
}

int main(void)
{
	const char *env = getenv("DPTRAIN_BENCH");
	struct optim_segment segs[NSEGS];
	struct optim_params p;

	if (!env || strcmp(env, "1") != 0)
		plan_skip_all("set DPTRAIN_BENCH=1 to time the optimizers on 25.6M parameters");
	float *params = malloc(TOTAL * sizeof(float)), *grads = malloc(TOTAL * sizeof(float));
	if (!params || !grads)
		bail_out("out of memory for 2 x %zu floats", TOTAL);
	/* 53 conv weights share most of the floats; 108 small bn/bias tensors */
	size_t off = 0, small = 512;
	for (int i = 0; i < NSEGS; i++) {
		size_t big = (TOTAL - 108 * small) / 53;
		segs[i].name = NULL;
		segs[i].offset = off;
		segs[i].count = i < 53 ? big : small;
		segs[i].decay = i < 53;
		off += segs[i].count;
	}
	segs[NSEGS - 1].count += TOTAL - off;
	for (size_t i = 0; i < TOTAL; i++) {
		params[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
		grads[i] = (float)((i * 40503u) % 997) * 1e-3f - 0.5f;
	}

	optim_params_default(&p, OPTIM_SGD);
	p.momentum = 0.9;
	p.weight_decay = 1e-4;
	bench("sgd momentum", &p, segs, params, grads, 0.1, 5);
	p.nesterov = 1;
	bench("sgd nesterov", &p, segs, params, grads, 0.1, 5);
	optim_params_default(&p, OPTIM_ADAMW);
	bench("adamw", &p, segs, params, grads, 1e-3, 7);
	optim_params_default(&p, OPTIM_LAMB);
	bench("lamb", &p, segs, params, grads, 1e-3, 12);
	p.max_grad_norm = 1;
	bench("lamb clip", &p, segs, params, grads, 1e-3, 13);
	free(params);
	free(grads);
	return done_testing();
}
