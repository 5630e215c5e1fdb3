/* optim.h — the trainer's optimizers (SGD with momentum/Nesterov, AdamW, LAMB) over the flat
 * float32 parameter and gradient buffers, including ZeRO-1 style shards of them.
 * Owns the update arithmetic and the optimizer state; knows nothing of the job config, the
 * model, collectives or checkpoint files (callers map those onto the parameters below).
 *
 * Semantics (all arithmetic float32 in the order written; constants computed in double and
 * rounded to float where PyTorch rounds them, so that results equal PyTorch 1.13's
 * single-tensor (foreach=False) CPU path bit for bit when neither side fuses multiply-adds):
 *
 * SGD (torch.optim.SGD): d = g + wd*p (decaying segments, wd != 0); with momentum > 0:
 *   buf = d on the first step (a copy: no dampening), later buf = momentum*buf + (1-dampening)*d;
 *   d = d + momentum*buf (Nesterov) or d = buf; then p = p + (-lr)*d.
 *   MindSpore's Momentum optimizer (accum = momentum*accum + g; p -= lr*accum) is the same
 *   update with dampening 0; it has no dampening. We follow PyTorch.
 *
 * AdamW (torch.optim.AdamW, amsgrad off), t = step number from 1:
 *   p = p*(1 - lr*wd) (decaying segments); m = m*b1 + (1-b1)*g; v = v*b2 + ((1-b2)*g)*g;
 *   p = p + (-(lr/(1-b1^t)) * m) / (sqrt(v)/sqrt(1-b2^t) + eps).
 *
 * LAMB (You et al. 2019, as NVIDIA apex FusedLAMB with adam_w_mode, grad_averaging and
 * bias_correction on; PyTorch has none), t = step number from 1:
 *   c = ||G|| / max_grad_norm if max_grad_norm > 0 and ||G|| > max_grad_norm, else 1, where
 *       ||G|| is the L2 norm of all gradients of all segments (apex's global clipping);
 *   s = g / c; m = m*b1 + (1-b1)*s; v = v*b2 + ((1-b2)*s)*s;
 *   u = (m/bc1) / (sqrt(v/bc2) + eps) + wd*p  (wd term on decaying segments only),
 *       bc1 = (float)(1-b1^t), bc2 = (float)(1-b2^t);
 *   per segment: r = lr * (||p|| / ||u||) if the segment adapts and both norms are non-zero,
 *       else r = lr; a segment adapts when nvlamb is set, or it decays and wd != 0 (apex:
 *       groups without weight decay get no trust ratio unless use_nvlamb);
 *   p = p - r*u.
 *   Norms are sums of squares in double, rounded to float after the square root. */
#ifndef DPTRAIN_OPTIM_H
#define DPTRAIN_OPTIM_H

#include <stddef.h>
#include "common/error.h"

enum optim_kind { OPTIM_SGD, OPTIM_ADAMW, OPTIM_LAMB };

/* Hyperparameters. Doubles because PyTorch's are Python floats: products like lr*wd are formed
 * in double before rounding to float32, and matching that keeps the results bit-exact. */
struct optim_params {
	enum optim_kind kind;
	double weight_decay;  /* applied to segments with decay set */
	double momentum;      /* SGD; 0 = plain SGD, no state */
	double dampening;     /* SGD */
	int nesterov;	      /* SGD; needs momentum > 0 and dampening 0 (as PyTorch) */
	double beta1, beta2;  /* AdamW, LAMB */
	double eps;	      /* AdamW, LAMB */
	double max_grad_norm; /* LAMB: > 0 turns on apex's global gradient-norm clipping */
	int nvlamb;	      /* LAMB: trust ratio on every segment (apex use_nvlamb) */
};

/* One parameter tensor: count floats at offset in the flat buffers. Elements of the flat
 * buffers covered by no segment (alignment padding) are never read or written. */
struct optim_segment {
	const char *name; /* for messages during optim_init only; may be NULL */
	size_t offset, count;
	int decay; /* weight decay applies (PyTorch: the param group's weight_decay != 0) */
};

/* A piece of optimizer state: count floats mirroring the flat buffers' [offset, offset+count)
 * (the optimizer's shard). Names are PyTorch's state_dict keys. A checkpoint saves data and
 * optim->step, and restores them into a freshly initialised optimizer of the same shape. */
struct optim_state_buf {
	const char *name; /* "momentum_buffer", "exp_avg", "exp_avg_sq" */
	float *data;
	size_t offset, count;
};

#define OPTIM_MAX_STATE 2

struct optim {
	struct optim_params p;
	struct optim_segment *segs; /* copy of the caller's, names cleared */
	int nsegs;
	size_t total;  /* floats in the flat buffers */
	size_t lo, hi; /* the shard this optimizer updates: [lo, hi) of the flat buffers */
	long step;     /* updates done so far; saved and restored with the state */
	struct optim_state_buf state[OPTIM_MAX_STATE];
	int nstate;
	double *sums; /* LAMB: optim_step's own 2*nsegs norms */
};

/* PyTorch's defaults for kind (apex's for LAMB: betas 0.9/0.999, eps 1e-6, wd 0.01, no
 * clipping); momentum 0 for SGD. */
void optim_params_default(struct optim_params *p, enum optim_kind kind);
const char *optim_kind_name(enum optim_kind kind);

/* Validates p and segs (inside [0,total), not overlapping) and allocates zeroed state.
 * optim_init owns the whole buffer; optim_init_shard only [lo, hi) (ZeRO-1: each rank keeps
 * and updates state for its shard; segments are clipped to it). 0, or -1 with a message. */
int optim_init(struct optim *o, const struct optim_params *p, const struct optim_segment *segs,
	       int nsegs, size_t total, struct dp_error *err);
int optim_init_shard(struct optim *o, const struct optim_params *p,
		     const struct optim_segment *segs, int nsegs, size_t total, size_t lo,
		     size_t hi, struct dp_error *err);
void optim_free(struct optim *o);

/* One update of this optimizer's shard with learning rate lr; params and grads are the whole
 * flat buffers. This is the protocol below with no other ranks, so it is exact for a whole
 * buffer, and for SGD/AdamW on any shard. A LAMB shard needs the other ranks' sums when it
 * cuts a segment or clips by the global gradient norm (max_grad_norm > 0): use the protocol. */
void optim_step(struct optim *o, float *params, const float *grads, double lr);

/* The step as a protocol across ranks that each own a shard (any optimizer; trivial for
 * SGD/AdamW):
 *   if (optim_needs_grad_norm(o)) { gsq = optim_grad_sumsq(o, grads); all-reduce sum gsq; }
 *   optim_prepare(o, params, grads, sqrt(gsq), sums);      sums: optim_nsums(o) doubles
 *   if (optim_nsums(o) > 0) all-reduce sum of sums;
 *   optim_apply(o, params, grads, lr, sums);
 *   all-gather params (each rank has updated only its [lo, hi));
 * optim_prepare updates LAMB's moments and writes this shard's partial sums of squares per
 * segment (sums[2i] for ||p||^2 of segment i, sums[2i+1] for ||u||^2); optim_apply changes
 * the parameters and counts the step; params must not change in between (apply recomputes the
 * update from them rather than keeping a copy of the buffer's size). */
int optim_needs_grad_norm(const struct optim *o);
double optim_grad_sumsq(const struct optim *o, const float *grads);
int optim_nsums(const struct optim *o);
void optim_prepare(struct optim *o, const float *params, const float *grads, double grad_norm,
		   double *sums);
void optim_apply(struct optim *o, float *params, const float *grads, double lr, const double *sums);

/* The state buffers (their data may be overwritten to restore a checkpoint); *n gets the count
 * (0 for SGD without momentum). */
struct optim_state_buf *optim_state(struct optim *o, int *n);

#endif
