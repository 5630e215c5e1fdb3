/* optim_exec.h — one optimizer wherever its parameters live: the same calls update host memory
 * (optim.c) or a GPU's (optim_gpu.h), chosen once when it is made, so that the training loop
 * never asks which. The host struct optim stays the description and the checkpoint's copy of
 * the state (optim_gpu.h); the calls mirror optim.h's step and its protocol across ranks. */
#ifndef DPTRAIN_OPTIM_EXEC_H
#define DPTRAIN_OPTIM_EXEC_H

#include <stddef.h>

#include "common/error.h"
#include "trainer/backend/backend.h"
#include "trainer/optim/optim.h"

struct optim_exec;

/* Every call returns 0, or -1 with err (the host's never fail). params and grads are the
 * model's whole flat buffers, on the host or on the GPU as the exec was made for. */
struct optim_exec_ops {
	const char *name; /* "host", "gpu" */
	/* optim_step */
	int (*step)(struct optim_exec *x, float *params, const float *grads, double lr,
		    struct dp_error *err);
	/* optim.h's protocol across ranks (optim_grad_sumsq, optim_prepare, optim_apply) */
	int (*grad_sumsq)(struct optim_exec *x, const float *grads, double *sumsq,
			  struct dp_error *err);
	int (*prepare)(struct optim_exec *x, const float *params, const float *grads,
		       double grad_norm, double *sums, struct dp_error *err);
	int (*apply)(struct optim_exec *x, float *params, const float *grads, double lr,
		     const double *sums, struct dp_error *err);
	/* the state into o->state[k].data, before a checkpoint is written from there, and back
	 * after one was read into it */
	int (*state_to_host)(struct optim_exec *x, struct dp_error *err);
	int (*state_from_host)(struct optim_exec *x, struct dp_error *err);
};

struct optim_exec {
	const struct optim_exec_ops *ops;
	struct optim *o;       /* the caller's, initialised (optim_init or optim_init_shard) */
	struct optim_gpu *gpu; /* the device state, for the GPU's ops */
};

/* For o on the host. */
void optim_exec_host(struct optim_exec *x, struct optim *o);
/* For o on the CUDA backend be: device state zeroed like o's (optim_gpu_create). */
int optim_exec_gpu(struct optim_exec *x, struct optim *o, struct backend *be, struct dp_error *err);
/* Frees what optim_exec_gpu made (not o); a zeroed or host exec is a no-op. */
void optim_exec_free(struct optim_exec *x);

#endif
