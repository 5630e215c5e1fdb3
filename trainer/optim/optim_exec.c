/* optim_exec.c — optim_exec.h's two tables: the host's calls optim.c, the GPU's optim_gpu.h. */
#include "trainer/optim/optim_exec.h"

#include <string.h>

#include "common/error.h"
#include "trainer/optim/optim_gpu.h"

static int host_step(struct optim_exec *x, float *params, const float *grads, double lr,
		     struct dp_error *err)
{
	(void)err;

	optim_step(x->o, params, grads, lr);
	return 0;
}

static int host_grad_sumsq(struct optim_exec *x, const float *grads, double *sumsq,
			   struct dp_error *err)
{
	(void)err;

	*sumsq = optim_grad_sumsq(x->o, grads);
	return 0;
}

static int host_prepare(struct optim_exec *x, const float *params, const float *grads,
			double grad_norm, double *sums, struct dp_error *err)
{
	(void)err;

	optim_prepare(x->o, params, grads, grad_norm, sums);
	return 0;
}

static int host_apply(struct optim_exec *x, float *params, const float *grads, double lr,
		      const double *sums, struct dp_error *err)
{
	(void)err;

	optim_apply(x->o, params, grads, lr, sums);
	return 0;
}

/* The host's state is o's own. */
static int host_state(struct optim_exec *x, struct dp_error *err)
{
	(void)x;
	(void)err;

	return 0;
}

static const struct optim_exec_ops host_ops = {
    .name = "host",
    .step = host_step,
    .grad_sumsq = host_grad_sumsq,
    .prepare = host_prepare,
    .apply = host_apply,
    .state_to_host = host_state,
    .state_from_host = host_state,
};

static int gpu_step(struct optim_exec *x, float *params, const float *grads, double lr,
		    struct dp_error *err)
{
	return optim_gpu_step(x->gpu, x->o, params, grads, lr, err);
}

static int gpu_grad_sumsq(struct optim_exec *x, const float *grads, double *sumsq,
			  struct dp_error *err)
{
	return optim_gpu_grad_sumsq(x->gpu, x->o, grads, sumsq, err);
}

static int gpu_prepare(struct optim_exec *x, const float *params, const float *grads,
		       double grad_norm, double *sums, struct dp_error *err)
{
	return optim_gpu_prepare(x->gpu, x->o, params, grads, grad_norm, sums, err);
}

static int gpu_apply(struct optim_exec *x, float *params, const float *grads, double lr,
		     const double *sums, struct dp_error *err)
{
	return optim_gpu_apply(x->gpu, x->o, params, grads, lr, sums, err);
}

static int gpu_state_to_host(struct optim_exec *x, struct dp_error *err)
{
	return optim_gpu_state_to_host(x->gpu, x->o, err);
}

static int gpu_state_from_host(struct optim_exec *x, struct dp_error *err)
{
	return optim_gpu_state_from_host(x->gpu, x->o, err);
}

static const struct optim_exec_ops gpu_ops = {
    .name = "gpu",
    .step = gpu_step,
    .grad_sumsq = gpu_grad_sumsq,
    .prepare = gpu_prepare,
    .apply = gpu_apply,
    .state_to_host = gpu_state_to_host,
    .state_from_host = gpu_state_from_host,
};

void optim_exec_host(struct optim_exec *x, struct optim *o)
{
	*x = (struct optim_exec){.ops = &host_ops, .o = o};
}

int optim_exec_gpu(struct optim_exec *x, struct optim *o, struct backend *be, struct dp_error *err)
{
	*x = (struct optim_exec){.ops = &gpu_ops, .o = o};
	return optim_gpu_create(&x->gpu, be, o, err);
}

void optim_exec_free(struct optim_exec *x)
{
	optim_gpu_destroy(x->gpu);
	memset(x, 0, sizeof(*x));
}
