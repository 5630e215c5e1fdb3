/* safetensors.h — read and write the safetensors format (8-byte little-endian header length,
 * a JSON header of {name: {dtype, shape, data_offsets}}, then the raw little-endian data), the
 * weight format PyTorch, JAX and others read. Reading maps the file and checks every offset;
 * writing is atomic. Knows nothing about models. */
#ifndef DPTRAIN_SAFETENSORS_H
#define DPTRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "common/error.h"

#define ST_MAX_DIMS 8

struct st_tensor {
	char *name;
	char dtype[8]; /* "F32", "F16", "BF16", "I64", ... */
	int ndim;
	int64_t shape[ST_MAX_DIMS];
	size_t begin, end; /* within the data region */
};

struct st_file {
	char *path;
	unsigned char *map;
	size_t size;
	size_t data_start;
	int n;
	struct st_tensor *t;
	char *metadata; /* the "__metadata__" object as JSON text, or NULL */
};

/* Open and validate: header size, JSON, dtypes, shapes against byte ranges, ranges inside the
 * file and not overlapping. Errors name the file and the tensor. */
int st_open(struct st_file *f, const char *path, struct dp_error *err);
void st_close(struct st_file *f);
const struct st_tensor *st_find(const struct st_file *f, const char *name);
const void *st_data(const struct st_file *f, const struct st_tensor *t);
size_t st_dtype_size(const char *dtype); /* 0 if unknown */

struct st_entry {
	const char *name;
	const char *dtype;
	int ndim;
	const int64_t *shape;
	const void *data;
	size_t nbytes;
};

/* Write n tensors (in the given order) and optional string metadata (a JSON object text or
 * NULL) to path atomically: temporary in the same directory, fsync, rename, fsync dir. */
int st_write_atomic(const char *path, const struct st_entry *e, int n, const char *metadata_json,
		    struct dp_error *err);

#endif
