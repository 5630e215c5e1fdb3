/* sampler.h — which dataset indices a rank visits in an epoch, with exactly the semantics of
 * PyTorch 1.13's torch.utils.data.distributed.DistributedSampler (MindSpore's
 * num_shards/shard_id), plus an eval mode that shards a test set once, and a start offset for
 * resuming mid-epoch, also at a different world size. Knows nothing of datasets' contents,
 * batching or threads (a sampler is read-only between sampler_set_epoch/_set_start calls).
 *
 * The epoch's global order. With shuffle, perm = torch.randperm(n, generator=g) after
 * g.manual_seed(seed + epoch): torch's CPU generator is mt19937 seeded with the low 32 bits of
 * the seed (init_genrand), and randperm is Fisher-Yates, for i in 0..n-2:
 * z = next_u32() % (n - i); swap(perm[i], perm[z + i]). Without shuffle perm[i] = i. The
 * global sequence is then S(p) = perm[p mod n] for p = 0, 1, 2, ...: positions past n are
 * DistributedSampler's padding (indices += indices[:padding], repeated as needed).
 *
 * Sharding. With W ranks, rank r visits S(p) for p = r, r + W, r + 2W, ... while
 * p < total, total = W * ceil(n / W) (padding: every rank gets the same count), or
 * W * floor(n / W) with drop_last (the tail n mod W samples are not visited this epoch).
 * Eval mode: no shuffle, no padding, nothing dropped: rank r visits r, r + W, ... < n, so
 * across ranks every sample is visited exactly once and counts differ by at most one.
 *
 * Resuming. A checkpoint stores the epoch and a global offset g: the number of positions of
 * S consumed by all ranks together (after every rank consumed k samples, g = k * W; see
 * sampler_offset_after). A job resumed at g with W' ranks (W' may differ from W) continues
 * the same sequence S: rank r' visits S(g + r' + j * W') for j = 0 .. ceil((n - g) / W') - 1
 * (floor with drop_last; nothing when g >= n). With W' = W this is exactly the tail of the
 * uninterrupted epoch, padding included. With W' != W the set of samples still to be
 * visited is the same; what changes is which rank sees which, and the padding or drop at the
 * end of the epoch, which follow W' (as DistributedSampler at W' would pad the remainder).
 * The order does not depend on W because it shuffles first and shards second. */
#ifndef DPTRAIN_SAMPLER_H
#define DPTRAIN_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/error.h"

enum sampler_mode {
	SAMPLER_TRAIN, /* DistributedSampler */
	SAMPLER_EVAL,  /* each sample exactly once across ranks, in order */
};

struct sampler {
	enum sampler_mode mode;
	size_t n; /* dataset size */
	int num_replicas;
	int rank;
	bool shuffle;
	bool drop_last; /* our config calls it drop_remainder */
	uint64_t seed;
	int64_t epoch;
	size_t start; /* global offset g this rank's iteration starts at */
	size_t *perm; /* n entries when shuffling, else NULL */
};

/* DistributedSampler(dataset of n, num_replicas, rank, shuffle, seed, drop_last), at epoch 0.
 * -1 with err for n == 0, num_replicas < 1, rank outside 0..num_replicas-1, out of memory. */
int sampler_init(struct sampler *s, size_t n, int num_replicas, int rank, bool shuffle,
		 uint64_t seed, bool drop_last, struct dp_error *err);

/* Eval mode: rank r of num_replicas gets r, r + W, r + 2W, ... < n. */
int sampler_init_eval(struct sampler *s, size_t n, int num_replicas, int rank,
		      struct dp_error *err);

void sampler_free(struct sampler *s);

/* set_epoch(epoch): the permutation for seed + epoch; the start offset goes back to 0. */
void sampler_set_epoch(struct sampler *s, int64_t epoch);

/* Resume: this epoch's iteration starts at global offset g (see above). */
void sampler_set_start(struct sampler *s, size_t global_offset);

/* Skip k more of this rank's samples (the start moves by k * num_replicas). */
void sampler_skip(struct sampler *s, size_t k);

/* How many samples this rank visits from the start offset to the end of the epoch. At start
 * 0 this is DistributedSampler's num_samples (train) or sampler_eval_count (eval). */
size_t sampler_len(const struct sampler *s);

/* The dataset index of this rank's j-th sample (j < sampler_len). */
size_t sampler_index(const struct sampler *s, size_t j);

/* The global offset to store in a checkpoint once every rank consumed `consumed` samples
 * from the current start: start + consumed * num_replicas. */
size_t sampler_offset_after(const struct sampler *s, size_t consumed);

/* Samples rank `rank` of num_replicas gets from an n-sample set in eval mode. */
size_t sampler_eval_count(size_t n, int num_replicas, int rank);

/* torch.randperm(n, generator) after generator.manual_seed(seed), on the CPU: out[0..n-1]. */
void sampler_randperm(uint64_t seed, size_t n, size_t *out);

#endif
