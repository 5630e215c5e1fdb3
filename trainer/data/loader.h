/* loader.h — this rank's batches, float32 NCHW in host memory, from a dataset, a sampler and
 * transforms, prefetched by worker threads. Batch b of an epoch always holds this rank's
 * samples b*B .. b*B+B-1 (sampler order) transformed with their own (seed, epoch, index)
 * draws, so batches are identical whatever the number of workers. Owns its threads and
 * buffers; knows nothing of devices (the caller's allocator can hand out pinned memory),
 * models or the job config.
 *
 * drop_remainder: like MindSpore's batch(drop_remainder=True), the last batch of the epoch
 * is dropped when it has fewer than batch_size samples; otherwise it is returned short (n <
 * batch_size). It is independent of the sampler's drop_last (the config's one
 * data.drop_remainder sets both).
 *
 * Use: loader_create; per epoch loader_start_epoch then loader_next/loader_release until
 * loader_next returns 0; loader_destroy (at any point: workers stop, are joined, and every
 * buffer is freed). One consumer thread. */
#ifndef DPTRAIN_LOADER_H
#define DPTRAIN_LOADER_H

#include "common/error.h"
#include "trainer/data/data.h"
#include "trainer/data/image.h"
#include "trainer/data/sampler.h"
#include "trainer/data/transform.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct loader_batch {
	float *x;    /* n x C x H x W, float32 NCHW (NULL with opts.u8) */
	uint8_t *u8; /* opts.u8: n x H x W x C bytes, cropped and flipped, not normalised */
	int32_t *y;  /* n labels */
	int n;	     /* samples in this batch: batch_size, or fewer for a short last batch */
	int64_t epoch;
	int64_t step; /* step within the epoch, 0-based (counts batches skipped by a resume) */
	size_t next_offset; /* sampler global offset once this batch is consumed: checkpoint it */
};

/* Where batch buffers come from (pinned memory for a GPU); NULL members mean malloc/free. */
struct loader_alloc {
	void *(*alloc)(void *ctx, size_t bytes);
	void (*free)(void *ctx, void *p);
	void *ctx;
};

struct loader_opts {
	int batch_size;	     /* per rank */
	bool drop_remainder; /* drop a short last batch */
	int workers;	     /* prefetch threads; 0 = produce batches in loader_next itself */
	int prefetch;	     /* batch buffers (>= 1; 0: max(2, workers + 1)) */
	struct loader_alloc alloc;

	/* Encoded sets (ds->encoded): the decode-and-augment transform (tf is then NULL). An
	 * image that cannot be read or decoded is warned about once (on `warn`, NULL: stderr,
	 * naming the file and `what`, e.g. "data.train") and replaced by the next good sample in
	 * dataset order (index + 1, + 2, ...: the same whatever the workers); more than max_bad
	 * such images on this rank stop the epoch with an error naming the last. */
	const struct imtf *imtf;
	bool u8; /* hand over uint8 NHWC (u8) for a device to normalise, not float32 (x) */
	long max_bad;
	FILE *warn;
	const char *what;
};

struct loader;

/* ds, s and tf (or opts->imtf) must outlive the loader; the loader alone changes the sampler's
 * epoch and start from here on. -1 with err: bad options, a transform that does not fit the images,
 * a batch size larger than this rank's samples per epoch with drop_remainder, out of memory,
 * threads that cannot be started. */
int loader_create(struct loader **out, const struct data_set *ds, struct sampler *s,
		  const struct tf *tf, const struct loader_opts *opts, struct dp_error *err);

/* Begin an epoch at global sampler offset `start` (0, or what a checkpoint's next_offset
 * said). Abandons what is left of the previous epoch; batches the caller still holds must
 * have been released. The first batch's step is start / (batch_size * num_replicas). */
int loader_start_epoch(struct loader *l, int64_t epoch, size_t start, struct dp_error *err);

/* Batches this rank gets from the epoch's start to its end. */
size_t loader_batches(const struct loader *l);

/* The next batch in order: 1 and *b set, 0 at the end of the epoch, -1 with err (a worker's
 * error, or every prefetch buffer still held by the caller). Blocks until it is ready. */
int loader_next(struct loader *l, struct loader_batch **b, struct dp_error *err);

/* Give a batch's buffers back for prefetching; batches may be released in any order. */
void loader_release(struct loader *l, struct loader_batch *b);

/* Stop and join the workers (mid-epoch too), free every buffer. NULL is a no-op. */
void loader_destroy(struct loader *l);

#endif
