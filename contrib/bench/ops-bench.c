/* ops-bench.c — per-op timings of a CPU backend on the layers of one ResNet-50 stage (28x28,
 * batch 64 by default) and on ResNet-18's 3x3 convolutions after the small stem (28x28 to
 * 4x4), to compare layouts, algorithms, thread counts and PyTorch (ops-bench.py runs the
 * ResNet-50 set in torch). Not part of the build or the tests; touches nothing but stdout.
 *
 *   make && gcc -O2 -fopenmp -DHAVE_DNNL=1 -I. -o ops-bench contrib/bench/ops-bench.c \
 *       build/lib/libdptrain-backend.a build/lib/libdptrain-common.a -ldnnl -lm
 *   ./ops-bench [-t THREADS] [-n BATCH] [-i ITERS] [-o NAME] [-l LEVEL]
 *   (-l: the backend's own kernels (backend_cpu_act.c) as built for base, avx2 or avx512,
 *   instead of the level oneDNN runs: a per-level build's gain, measured)
 *   (DPTRAIN_CPU_CONV=plain|blocked|auto, DPTRAIN_CPU_CONV_ALG=auto|direct|winograd,
 *   ONEDNN_MAX_CPU_ISA)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trainer/backend/backend.h"
#include "trainer/backend/backend_cpu_act.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *buf(struct backend *be, size_t n)
{
	float *p = be->ops->alloc(be, n * sizeof(float));

	if (!p) {
		fprintf(stderr, "ops-bench: %s\n", be->err.text);
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
	return p;
}

static void die(struct backend *be, int rc)
{
	if (rc) {
		fprintf(stderr, "ops-bench: %s\n", be->err.text);
		exit(1);
	}
}

/* Best of iters calls after one warm-up, in ms: the machine may be shared. */
#define TIME(iters, ms, call)                                                                      \
	do {                                                                                       \
		die(be, call);                                                                     \
		ms = 1e30;                                                                         \
		for (int it_ = 0; it_ < (iters); it_++) {                                          \
			double t0_ = now();                                                        \
			die(be, call);                                                             \
			double t_ = (now() - t0_) * 1e3;                                           \
			ms = t_ < ms ? t_ : ms;                                                    \
		}                                                                                  \
	} while (0)

static double total;
static const char *only; /* -o: run the ops whose name contains this */

static int skip(const char *name)
{
	return only && !strstr(name, only);
}

static void conv(struct backend *be, int iters, const char *name, int n, int c, int h, int k,
		 int ks, int s)
{
	if (skip(name))
		return;
	struct be_conv_desc d = {
	    .n = n, .c = c, .h = h, .w = h, .k = k, .kh = ks, .kw = ks, .stride = s, .pad = ks / 2};
	struct be_op *op = be->ops->conv_create(be, &d);
	double f, bd, bw;

	if (!op)
		die(be, -1);
	size_t nx = (size_t)n * c * h * h, ny = (size_t)n * k * d.oh * d.ow;
	float *x = buf(be, nx), *w = buf(be, (size_t)k * c * ks * ks), *y = buf(be, ny);
	float *dx = buf(be, nx), *dw = buf(be, (size_t)k * c * ks * ks);
	TIME(iters, f, be->ops->conv_fwd(be, op, x, w, NULL, y));
	TIME(iters, bd, be->ops->conv_bwd_data(be, op, y, w, dx, 0.0f));
	TIME(iters, bw, be->ops->conv_bwd_weights(be, op, x, y, dw, NULL, 0.0f));
	printf("%-34s fwd %8.2f  bwd_data %8.2f  bwd_w %8.2f  all %8.2f  ms\n", name, f, bd, bw,
	       f + bd + bw);
	total += f + bd + bw;
	be->ops->op_destroy(be, op);
	be->ops->free(be, x), be->ops->free(be, w), be->ops->free(be, y);
	be->ops->free(be, dx), be->ops->free(be, dw);
}

static void bn(struct backend *be, int iters, const char *name, int n, int c, int h, int relu)
{
	if (skip(name))
		return;
	struct be_bn_desc d = {.n = n, .c = c, .h = h, .w = h, .eps = 1e-5f, .fuse_relu = relu};
	struct be_op *op = be->ops->bn_create(be, &d);
	double f, b;

	if (!op)
		die(be, -1);
	size_t nx = (size_t)n * c * h * h;
	float *x = buf(be, nx), *y = buf(be, nx), *dx = buf(be, nx), *p = buf(be, 8 * (size_t)c);
	float *g = p, *bt = p + c, *sm = p + 2 * c, *si = p + 3 * c, *rm = p + 4 * c;
	float *rv = p + 5 * c, *dg = p + 6 * c, *db = p + 7 * c;
	for (int i = 0; i < c; i++)
		rv[i] = 1.0f;
	TIME(iters, f, be->ops->bn_fwd_train(be, op, x, NULL, g, bt, y, sm, si, rm, rv, 0.1f));
	TIME(iters, b, be->ops->bn_bwd(be, op, x, y, x, g, sm, si, dx, NULL, 0.0f, dg, db, 0.0f));
	printf("%-34s fwd %8.2f  bwd %8.2f  all %8.2f  ms\n", name, f, b, f + b);
	total += f + b;
	be->ops->op_destroy(be, op);
	be->ops->free(be, x), be->ops->free(be, y), be->ops->free(be, dx), be->ops->free(be, p);
}

static void pool(struct backend *be, int iters, const char *name, enum be_pool_kind kind, int n,
		 int c, int h, int ks, int s, int pad)
{
	if (skip(name))
		return;
	struct be_pool_desc d = {.kind = kind,
				 .n = n,
				 .c = c,
				 .h = h,
				 .w = h,
				 .kh = ks,
				 .kw = ks,
				 .stride = s,
				 .pad = pad};
	struct be_op *op = be->ops->pool_create(be, &d);
	double f, b;

	if (!op)
		die(be, -1);
	size_t nx = (size_t)n * c * h * h, ny = (size_t)n * c * d.oh * d.ow;
	float *x = buf(be, nx), *y = buf(be, ny), *dx = buf(be, nx);
	TIME(iters, f, be->ops->pool_fwd(be, op, x, y));
	TIME(iters, b, be->ops->pool_bwd(be, op, x, y, y, dx, 0.0f));
	printf("%-34s fwd %8.2f  bwd %8.2f  all %8.2f  ms\n", name, f, b, f + b);
	total += f + b;
	be->ops->op_destroy(be, op);
	be->ops->free(be, x), be->ops->free(be, y), be->ops->free(be, dx);
}

static void eltwise(struct backend *be, int iters, const char *name, size_t n)
{
	if (skip(name))
		return;
	float *x = buf(be, n), *y = buf(be, n), *dx = buf(be, n);
	double f, b, a;

	TIME(iters, f, be->ops->relu_fwd(be, x, y, n));
	TIME(iters, b, be->ops->relu_bwd(be, y, x, dx, n, 0.0f));
	TIME(iters, a, be->ops->add(be, x, y, dx, n));
	printf("%-34s relu fwd %5.2f  relu bwd %5.2f  add %5.2f  all %8.2f  ms\n", name, f, b, a,
	       f + b + a);
	total += f + b + a;
	be->ops->free(be, x), be->ops->free(be, y), be->ops->free(be, dx);
}

static void linear(struct backend *be, int iters, const char *name, int n, int in, int out)
{
	if (skip(name))
		return;
	struct be_linear_desc d = {.n = n, .in = in, .out = out, .has_bias = 1};
	struct be_op *op = be->ops->linear_create(be, &d);
	double f, bd, bw;

	if (!op)
		die(be, -1);
	float *x = buf(be, (size_t)n * in), *w = buf(be, (size_t)in * out), *b = buf(be, out);
	float *y = buf(be, (size_t)n * out), *dx = buf(be, (size_t)n * in);
	float *dw = buf(be, (size_t)in * out), *db = buf(be, out);
	TIME(iters, f, be->ops->linear_fwd(be, op, x, w, b, y));
	TIME(iters, bd, be->ops->linear_bwd_data(be, op, y, w, dx, 0.0f));
	TIME(iters, bw, be->ops->linear_bwd_weights(be, op, x, y, dw, db, 0.0f));
	printf("%-34s fwd %8.2f  bwd_data %8.2f  bwd_w %8.2f  all %8.2f  ms\n", name, f, bd, bw,
	       f + bd + bw);
	total += f + bd + bw;
	be->ops->op_destroy(be, op);
	be->ops->free(be, x), be->ops->free(be, w), be->ops->free(be, b);
	be->ops->free(be, y), be->ops->free(be, dx), be->ops->free(be, dw), be->ops->free(be, db);
}

int main(int argc, char **argv)
{
	int threads = 0, n = 64, iters = 5, opt;
	const char *level = NULL;
	struct dp_error err;

	while ((opt = getopt(argc, argv, "t:n:i:o:l:")) != -1) {
		switch (opt) {
		case 't':
			threads = atoi(optarg);
			break;
		case 'n':
			n = atoi(optarg);
			break;
		case 'i':
			iters = atoi(optarg);
			break;
		case 'o':
			only = optarg;
			break;
		case 'l':
			level = optarg;
			break;
		default:
			fprintf(stderr,
				"usage: ops-bench [-t THREADS] [-n BATCH] [-i ITERS] [-o NAME] "
				"[-l LEVEL]\n");
			return 2;
		}
	}
	struct backend *be = be_cpu_create(threads, &err);
	if (!be) {
		fprintf(stderr, "ops-bench: %s\n", err.text);
		return 1;
	}
	if (level && !cpu_act_use(level)) {
		fprintf(
		    stderr,
		    "ops-bench: -l %s: no such level in this build, or this CPU cannot run it\n",
		    level);
		return 2;
	}
	const char *layouts = getenv("DPTRAIN_CPU_CONV");
	const char *alg = getenv("DPTRAIN_CPU_CONV_ALG");
	printf("backend %s, %d threads, batch %d, best of %d, conv layouts %s, algorithm %s, own "
	       "kernels %s\n",
	       be->ops->name, be->threads, n, iters, layouts ? layouts : "auto", alg ? alg : "auto",
	       cpu_act_level());
	conv(be, iters, "conv 3x3 64->64 28x28", n, 64, 28, 64, 3, 1);
	conv(be, iters, "conv 1x1 512->128 28x28", n, 512, 28, 128, 1, 1);
	conv(be, iters, "conv 3x3 128->128 28x28", n, 128, 28, 128, 3, 1);
	conv(be, iters, "conv 1x1 128->512 28x28", n, 128, 28, 512, 1, 1);
	conv(be, iters, "conv 3x3/2 128->128 56->28", n, 128, 56, 128, 3, 2);
	conv(be, iters, "conv 1x1/2 256->512 56->28", n, 256, 56, 512, 1, 2);
	conv(be, iters, "conv 3x3 128->128 14x14 (r18)", n, 128, 14, 128, 3, 1);
	conv(be, iters, "conv 3x3 256->256 7x7 (r18)", n, 256, 7, 256, 3, 1);
	conv(be, iters, "conv 3x3 512->512 4x4 (r18)", n, 512, 4, 512, 3, 1);
	bn(be, iters, "bn+relu 128 28x28", n, 128, 28, 1);
	bn(be, iters, "bn 512 28x28", n, 512, 28, 0);
	eltwise(be, iters, "eltwise 512x28x28", (size_t)n * 512 * 28 * 28);
	pool(be, iters, "maxpool 3x3/2 64 112->56", BE_POOL_MAX, n, 64, 112, 3, 2, 1);
	pool(be, iters, "avgpool 2x2/2 128 28->14", BE_POOL_AVG, n, 128, 28, 2, 2, 0);
	linear(be, iters, "linear 2048->1000", n, 2048, 1000);
	printf("total %.1f ms\n", total);
	be->ops->destroy(be);
	return 0;
}
