/* data.h — the trainer's datasets behind one interface: MNIST/Fashion-MNIST idx, CIFAR-10
 * binary batches and a seeded synthetic set (decoded: uint8 CHW images of one size, kept in
 * host memory or generated on demand), and image folders and packed shards (encoded: JPEG or
 * PNG files of any size, read on demand; trainer/data/image.h decodes them). Owns reading and
 * checking dataset files and indexes; knows nothing of sampling, transforms, batching, the
 * job config or devices. */
#ifndef DPTRAIN_DATA_H
#define DPTRAIN_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/error.h"

#define DATA_NAME_MAX 512

/* Plausibility limits: a header asking for more is refused before anything is allocated. */
#define DATA_MAX_SIDE  65536	     /* pixels per image side */
#define DATA_MAX_BYTES (64ull << 30) /* uint8 pixels of one dataset held in memory */

struct data_set;

/* An encoded sample's bytes: a buffer the caller owns and reuses (read() grows it with
 * realloc; free(p) when done). */
struct data_bytes {
	uint8_t *p;
	size_t len, cap;
};

/* Per-kind behaviour; every member must be safe to call from several threads at once.
 * Decoded sets: get() returns the CHW pixels of sample i (a pointer into the set's memory, or
 * into `scratch` after filling it) and its label. Encoded sets: read() puts the file's bytes
 * into b and returns its label; describe() writes what a message calls sample i ("ROOT/cls/
 * x.jpg", "DIR/shard-00003.tar: cls/x.jpg"). 0 on success, -1 with err filled. */
struct data_ops {
	int (*get)(const struct data_set *ds, size_t i, uint8_t *scratch, const uint8_t **pixels,
		   int *label, struct dp_error *err);
	int (*read)(const struct data_set *ds, size_t i, struct data_bytes *b, int *label,
		    struct dp_error *err);
	void (*describe)(const struct data_set *ds, size_t i, char *buf, size_t n);
	void (*free)(struct data_set *ds);
};

struct data_set {
	const struct data_ops *ops;
	const char *kind;	  /* "idx", "cifar10", "synthetic", ... */
	char name[DATA_NAME_MAX]; /* what messages call it: the images file, or a description */
	size_t count;		  /* samples */
	int channels, height, width;
	int num_classes;    /* labels are 0..num_classes-1 */
	size_t image_bytes; /* channels * height * width */

	/* In-memory sets (idx, cifar10): sample i's pixels are at pixels + i * pixel_stride,
	 * its label at labels[i * label_stride]. The buffers are owned by the set. */
	const uint8_t *pixels;
	const uint8_t *labels;
	size_t pixel_stride, label_stride;
	void *buf[2]; /* what to free */

	uint64_t seed; /* synthetic: what every pixel and label derives from */

	/* Encoded sets (imagefolder, shards): encoded is true, channels 3, height = width = 0
	 * (every file has its own size); get is NULL, read and describe are set. class_names[k]
	 * is label k's folder name (num_classes of them, sorted by strcmp as torchvision's
	 * ImageFolder sorts them). */
	bool encoded;
	char **class_names;
	void *priv; /* the kind's own state, freed by ops->free */
};

/* MNIST-style idx files (Fashion-MNIST, MNIST, KMNIST): images are idx3 (magic 0x00000803:
 * unsigned bytes, count x rows x cols), labels idx1 (magic 0x00000801). Either file may be
 * gzip-compressed (detected from its content, not its name). channels = 1; num_classes =
 * the largest label + 1. Errors name the file: missing, unreadable, corrupt gzip, wrong
 * magic, zero or implausible sizes, truncated or trailing data, count mismatch. */
int data_load_idx(struct data_set *ds, const char *images_path, const char *labels_path,
		  struct dp_error *err);

/* CIFAR-10 binary batches (data_batch_1.bin ... or test_batch.bin): records of one label
 * byte (0..9) and 3072 pixel bytes (1024 R, 1024 G, 1024 B, rows top to bottom), read from
 * each file in order into one set of 3x32x32 images. Files may be gzip-compressed. */
int data_load_cifar10(struct data_set *ds, int nfiles, const char *const paths[],
		      struct dp_error *err);

/* A synthetic set for throughput runs: nothing is stored, sample i is generated on demand
 * from (seed, i). label = h(seed, i) mod classes; pixel = (random byte & 127) +
 * label * 128 / classes, so the mean brightness tells the class and a model can learn it. */
int data_synthetic(struct data_set *ds, size_t count, int channels, int height, int width,
		   int num_classes, uint64_t seed, struct dp_error *err);

/* The torchvision ImageFolder layout: root/<class>/<file>, classes = the subfolders sorted by
 * name (label k = the k-th), files in a class sorted by name, recursively, kept when their
 * name ends in .jpg, .jpeg, .png (any case) as torchvision's IMG_EXTENSIONS would keep
 * them; sample order = class order, then file order. The list comes from `index` when it is
 * not NULL (a file `dptrain-data index` wrote; its root must be this root), else from
 * `cache_dir`/imagefolder-<hash of root>.index when that exists and the root's class folders
 * have not changed since (mtime), else from listing the folders, which is then written there
 * (atomically; cache_dir NULL: not cached). Errors name the root or the index and its line. */
int data_load_imagefolder(struct data_set *ds, const char *root, const char *index,
			  const char *cache_dir, struct dp_error *err);

/* Packed shards (doc/dptrain-data.1 has the format): DIR/index and the tar shards it names,
 * written by `dptrain-data pack ROOT DIR`, same samples, labels and order as the imagefolder
 * it came from. Checks the index and the shards' sizes when loading; a sample's bytes are
 * checked against the index's CRC-32 when read. */
int data_load_shards(struct data_set *ds, const char *dir, struct dp_error *err);

/* Encoded sets: sample i's file bytes and label (i < ds->count). */
int data_read(const struct data_set *ds, size_t i, struct data_bytes *b, int *label,
	      struct dp_error *err);

/* Encoded sets: what messages call sample i. */
void data_describe(const struct data_set *ds, size_t i, char *buf, size_t n);

/* Sample i (< ds->count): CHW pixels and label. `scratch` must hold ds->image_bytes (only
 * generated sets write to it). Thread-safe. 0 on success, -1 with err filled. */
int data_get(const struct data_set *ds, size_t i, uint8_t *scratch, const uint8_t **pixels,
	     int *label, struct dp_error *err);

/* Free what a loader allocated; leaves *ds zeroed. Safe on a zeroed set. */
void data_free(struct data_set *ds);

#endif
