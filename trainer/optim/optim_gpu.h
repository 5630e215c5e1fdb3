/* optim_gpu.h — optim.h's updates (SGD with momentum/Nesterov, AdamW, LAMB, ZeRO-1 shards) on a
 * CUDA backend's device buffers: the same arithmetic as optim.c in fused kernels over all
 * parameter tensors at once (one launch per pass, not one per tensor), the optimizer state in
 * device memory. Runs on the backend's stream, in order with its ops; nothing synchronises
 * except the calls that return host values (optim_gpu_grad_sumsq, optim_gpu_prepare for LAMB,
 * the state copies).
 *
 * The host struct optim stays the description (parameters, segments, shard) and the home of
 * the checkpointed state: optim_gpu_state_to_host copies the device state into its
 * o->state[k].data before a checkpoint is written, optim_gpu_state_from_host back after one is
 * read. o->step counts the updates, as with optim.c.
 *
 * Results agree with optim.c to float32 rounding (the kernels do not contract multiply-adds
 * where optim.c does not; sums of squares run in double in a fixed order, so two runs give the
 * same bits). Builds without CUDA get entry points that fail with a message. */
#ifndef DPTRAIN_OPTIM_GPU_H
#define DPTRAIN_OPTIM_GPU_H

#include <stddef.h>

#include "common/error.h"
#include "trainer/backend/backend.h"
#include "trainer/optim/optim.h"

struct optim_gpu;

/* For o (optim_init or optim_init_shard done) on the CUDA backend be: device state zeroed like
 * o's, the segment table uploaded. 0, or -1 with a message naming the call. */
int optim_gpu_create(struct optim_gpu **g, struct backend *be, const struct optim *o,
		     struct dp_error *err);
/* Before the backend is destroyed: it frees through the backend and waits on its stream. */
void optim_gpu_destroy(struct optim_gpu *g);

/* optim_step on device buffers (params, grads: the whole flat buffers in device memory). */
int optim_gpu_step(struct optim_gpu *g, struct optim *o, float *params, const float *grads,
		   double lr, struct dp_error *err);

/* optim.h's protocol across ranks, on device buffers; sums are host doubles as there. */
int optim_gpu_grad_sumsq(struct optim_gpu *g, const struct optim *o, const float *grads,
			 double *out, struct dp_error *err);
int optim_gpu_prepare(struct optim_gpu *g, struct optim *o, const float *params, const float *grads,
		      double grad_norm, double *sums, struct dp_error *err);
int optim_gpu_apply(struct optim_gpu *g, struct optim *o, float *params, const float *grads,
		    double lr, const double *sums, struct dp_error *err);

/* The state between the device and o->state[k].data (the checkpoint's copy). */
int optim_gpu_state_to_host(struct optim_gpu *g, struct optim *o, struct dp_error *err);
int optim_gpu_state_from_host(struct optim_gpu *g, const struct optim *o, struct dp_error *err);

#endif
