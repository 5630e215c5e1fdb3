/* optim_gpu_none.c — optim_gpu.h's entry points in a build without the CUDA toolkit: they fail
 * saying so, so that callers and tests need no #ifdef. Built always; empty with HAVE_CUDA
 * (trainer/optim/optim_cuda.cu defines them there). */
#include <stdio.h>

#include "common/error.h"
#include "trainer/optim/optim_gpu.h"

#ifndef HAVE_CUDA

#define NO_CUDA                                                                                    \
	"this build has no CUDA (no toolkit at build time): rebuild with the CUDA toolkit, or "    \
	"train with the cpu backend"

static int no_cuda(const char *fn, struct dp_error *err)
{
	errprintf(err, "%s: " NO_CUDA, fn);
	return -1;
}

int optim_gpu_create(struct optim_gpu **g, struct backend *be, const struct optim *o,
		     struct dp_error *err)
{
	(void)be;
	(void)o;
	*g = NULL;
	return no_cuda("optim_gpu_create", err);
}

void optim_gpu_destroy(struct optim_gpu *g)
{
	(void)g;
}

int optim_gpu_step(struct optim_gpu *g, struct optim *o, float *params, const float *grads,
		   double lr, struct dp_error *err)
{
	(void)g;
	(void)o;
	(void)params;
	(void)grads;
	(void)lr;
	return no_cuda("optim_gpu_step", err);
}

int optim_gpu_grad_sumsq(struct optim_gpu *g, const struct optim *o, const float *grads,
			 double *out, struct dp_error *err)
{
	(void)g;
	(void)o;
	(void)grads;
	*out = 0.0;
	return no_cuda("optim_gpu_grad_sumsq", err);
}

int optim_gpu_prepare(struct optim_gpu *g, struct optim *o, const float *params, const float *grads,
		      double grad_norm, double *sums, struct dp_error *err)
{
	(void)g;
	(void)o;
	(void)params;
	(void)grads;
	(void)grad_norm;
	(void)sums;
	return no_cuda("optim_gpu_prepare", err);
}

int optim_gpu_apply(struct optim_gpu *g, struct optim *o, float *params, const float *grads,
		    double lr, const double *sums, struct dp_error *err)
{
	(void)g;
	(void)o;
	(void)params;
	(void)grads;
	(void)lr;
	(void)sums;
	return no_cuda("optim_gpu_apply", err);
}

int optim_gpu_state_to_host(struct optim_gpu *g, struct optim *o, struct dp_error *err)
{
	(void)g;
	(void)o;
	return no_cuda("optim_gpu_state_to_host", err);
}

int optim_gpu_state_from_host(struct optim_gpu *g, const struct optim *o, struct dp_error *err)
{
	(void)g;
	(void)o;
	return no_cuda("optim_gpu_state_from_host", err);
}

#else

typedef int optim_gpu_none_is_empty_with_cuda; /* ISO C forbids an empty translation unit */

#endif
