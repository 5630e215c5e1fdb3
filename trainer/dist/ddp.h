/* ddp.h — data parallelism over a model and a comm, as PyTorch's DistributedDataParallel:
 * parameter broadcast, gradient buckets reduced on a communication thread while backward is
 * still running, averaging or summing, no communication on accumulation micro-steps.
 * Owns the bucket layout and the communication thread; must not touch the optimizer, the
 * data or the loss.
 *
 * Buckets. The model keeps parameters (and so gradients) in one flat buffer in reverse
 * execution order, which is the order backward produces them. Buckets are contiguous ranges
 * of that buffer cut at parameter boundaries: either every bucket_bytes (the first one
 * first_bucket_bytes, like DDP's 1 MiB first bucket, so communication starts early), or at
 * MindSpore's all_reduce_fusion_config split indices (indices into the parameter list in
 * that same order). The nn gradient hook tells which parameters are final; a bucket is handed
 * to the communication thread once all of its parameters are, and buckets are reduced strictly
 * in index order — the same on every rank. The last bucket also carries one float past the
 * gradients, a vote (ddp_set_vote). */
#ifndef DPTRAIN_DDP_H
#define DPTRAIN_DDP_H

#include <stddef.h>

#include "common/error.h"
#include "trainer/dist/comm.h"
#include "trainer/nn/nn.h"

#define DDP_FIRST_BUCKET_BYTES (1u << 20)   /* PyTorch's _DEFAULT_FIRST_BUCKET_BYTES */
#define DDP_MIN_SPLIT_BYTES    (512u << 10) /* smallest cap train.c derives for small models */

struct ddp_opts {
	int gradients_mean;	   /* 1: average over ranks (PyTorch); 0: sum (MindSpore) */
	size_t bucket_bytes;	   /* cap per bucket */
	size_t first_bucket_bytes; /* cap of the first bucket; 0: bucket_bytes */
	const int *fusion_split;   /* all_reduce_fusion_config, or NULL */
	int nfusion_split;
};

struct ddp_bucket {
	size_t lo, hi;	 /* range of the flat gradient buffer (floats) */
	int first, last; /* parameters (in offset order) it holds */
	size_t pending;	 /* parameter floats whose gradients are not final yet this step */
};

struct ddp;

/* Builds the buckets and starts the communication thread; installs the model's grad hook.
 * The model must outlive the ddp. */
int ddp_create(struct ddp **d, struct nn_model *m, struct comm *c, const struct ddp_opts *o,
	       struct dp_error *err);
void ddp_destroy(struct ddp *d);

/* Rank 0's parameters and buffers (BN running statistics and num_batches_tracked) to all. */
int ddp_broadcast_params(struct ddp *d, struct dp_error *err);
/* Rank 0's buffers to all (DDP's broadcast_buffers, before each training forward). */
int ddp_broadcast_buffers(struct ddp *d, struct dp_error *err);

/* Before a micro-step's backward: sync 1 on the last micro-step of an optimizer step (its
 * buckets are reduced as backward produces them), 0 on the others (no communication). -1
 * with err when this rank's vote cannot be put on the device. */
int ddp_begin_backward(struct ddp *d, int sync, struct dp_error *err);
/* After the backward of a sync micro-step: waits until every bucket is reduced. Gradients
 * are then the same on every rank. */
int ddp_finish(struct ddp *d, struct dp_error *err);

/* A vote carried in the last bucket at no extra communication (the float after the
 * parameters' gradients): set before ddp_begin_backward of a sync micro-step; after its
 * ddp_finish, ddp_votes gives the same *votes on every rank, > 0 when any rank voted > 0 (the
 * trainer's "stop after this step"); -1 with err when it cannot be read from the device (a
 * vote must not be lost as "no vote"). */
void ddp_set_vote(struct ddp *d, float vote);
int ddp_votes(const struct ddp *d, float *votes, struct dp_error *err);

/* 1 while the model's gradients are in the comm's shared memory (ddp.c), reduced in place. */
int ddp_grads_shared(const struct ddp *d);
int ddp_bucket_count(const struct ddp *d);
const struct ddp_bucket *ddp_bucket(const struct ddp *d, int i);
/* Seconds this step's ddp_finish spent waiting for communication (exposed communication). */
double ddp_last_wait(const struct ddp *d);

#endif
