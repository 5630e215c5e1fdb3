/* train_ckpt.h — what the training loop saves in a checkpoint and restores from one: weights
 * (model.safetensors), optimizer state (optim.safetensors, whole even when ZeRO-1 shards it),
 * and the position (step, epoch, sampler offset) with a fingerprint of the config parts that
 * must not change. Every function is collective over the ranks: rank 0 reads and writes
 * the files, the others receive what it read (no shared file system needed). */
#ifndef DPTRAIN_TRAIN_CKPT_H
#define DPTRAIN_TRAIN_CKPT_H

#include <stddef.h>

#include "common/error.h"
#include "trainer/dist/comm.h"
#include "config/config.h"
#include "trainer/nn/nn.h"
#include "trainer/optim/optim.h"

struct train_ckpt {
	const struct cfg *c;
	struct nn_model *m;
	struct optim *o;
	struct comm *comm; /* NULL for one rank */
	int rank, world_size;
	char root[4096]; /* the checkpoint directory */
	char fingerprint[512];
	long last_saved;      /* step of the last checkpoint written, -1 */
	size_t train_samples; /* in an epoch: what a resumed position is checked against */
};

/* Where we are: after `step` optimizer steps, in epoch `epoch` (0-based) at global sampler
 * offset `offset` (0 with epoch + 1 at an epoch's end). */
struct train_pos {
	long step;
	int epoch;
	size_t offset;
	double loss_scale; /* precision.loss_scale's current scale (1 without scaling) */
	long scale_good;   /* dynamic scaling: good steps in a row since it last changed */
	long skipped;	   /* steps skipped on overflow so far, in all runs */
};

void train_ckpt_init(struct train_ckpt *k, const struct cfg *c, const char *output_dir,
		     struct nn_model *m, struct optim *o, struct comm *comm, int rank,
		     int world_size, size_t train_samples);

/* Per checkpoint.resume: nothing (0), or a checkpoint restored (1, *pos and *from set on every
 * rank): rank 0 loads the weights (train.c then broadcasts them to the others), every rank
 * its position and its optimizer state (its own shard of it under ZeRO-1). auto skips
 * invalid checkpoints with a warning on stderr; a checkpoint of another model is an error. */
int train_ckpt_resume(struct train_ckpt *k, struct train_pos *pos, char *from, size_t fromlen,
		      struct dp_error *err);

/* Writes a checkpoint of the current weights and optimizer state at pos. */
int train_ckpt_save(struct train_ckpt *k, const struct train_pos *pos, struct dp_error *err);

#endif
