/* data_cifar.c — CIFAR-10 binary batches: fixed 3073-byte records (label, then 3x32x32
 * pixels, channel-planar), several files concatenated into one in-memory set kept as
 * records. Owns only this format; reading (and gzip) is data.c's. */
#include "common/error.h"
#include "trainer/data/data.h"
#include "trainer/data/data_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CIFAR_SIDE    32
#define CIFAR_CLASSES 10
#define CIFAR_PIXELS  (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD  (1 + CIFAR_PIXELS)

static int cifar_get(const struct data_set *ds, size_t i, uint8_t *scratch, const uint8_t **pixels,
		     int *label, struct dp_error *err)
{
	(void)scratch;
	(void)err;
	*pixels = ds->pixels + i * ds->pixel_stride;
	*label = ds->labels[i * ds->label_stride];
	return 0;
}

static const struct data_ops cifar_ops = {.get = cifar_get};

/* Appends one file's records to *all (len bytes so far, cap allocated). */
static int load_file(const char *path, uint8_t **all, size_t *len, struct dp_error *err)
{
	struct data_file f;
	uint8_t *buf = NULL, *nb;
	size_t got, records;
	int rv = -1;

	if (data_file_open(&f, path, err) != 0)
		return -1;
	if (data_file_read_alloc(&f, DATA_MAX_BYTES - *len + 1, &buf, &got, err) != 0)
		goto out;
	if (got > DATA_MAX_BYTES - *len) {
		errprintf(err,
			  "%s: implausibly large: the CIFAR-10 files given hold more than %llu GiB",
			  path, DATA_MAX_BYTES >> 30);
		goto out;
	}
	if (f.cut_short) {
		errprintf(err,
			  "%s: truncated: the gzip stream breaks off after %zu bytes; fetch the "
			  "file again",
			  path, got);
		goto out;
	}
	if (got == 0) {
		errprintf(err, "%s: empty file; expected CIFAR-10 records", path);
		goto out;
	}
	if (got % CIFAR_RECORD) {
		errprintf(err,
			  "%s: truncated or not a CIFAR-10 binary file: %zu bytes is not a whole "
			  "number of %d-byte records (1 label + 3072 pixels; the last has %zu)",
			  path, got, CIFAR_RECORD, got % CIFAR_RECORD);
		goto out;
	}
	records = got / CIFAR_RECORD;
	for (size_t r = 0; r < records; r++) {
		if (buf[r * CIFAR_RECORD] >= CIFAR_CLASSES) {
			errprintf(err,
				  "%s: record %zu has label %d; CIFAR-10 labels are 0..9 (a "
				  "CIFAR-100 file has two label bytes and is not supported)",
				  path, r, buf[r * CIFAR_RECORD]);
			goto out;
		}
	}
	if (*len == 0) {
		*all = buf;
		buf = NULL;
	} else {
		nb = realloc(*all, *len + got);
		if (!nb) {
			errprintf(err, "%s: out of memory (%zu bytes of records)", path,
				  *len + got);
			goto out;
		}
		*all = nb;
		memcpy(*all + *len, buf, got);
	}
	*len += got;
	rv = 0;
out:
	free(buf);
	data_file_close(&f);
	return rv;
}

int data_load_cifar10(struct data_set *ds, int nfiles, const char *const paths[],
		      struct dp_error *err)
{
	uint8_t *all = NULL;
	size_t len = 0;

	memset(ds, 0, sizeof(*ds));
	if (nfiles <= 0) {
		errprintf(err, "CIFAR-10: no files given");
		return -1;
	}
	for (int i = 0; i < nfiles; i++) {
		if (load_file(paths[i], &all, &len, err) != 0) {
			free(all);
			return -1;
		}
	}
	ds->ops = &cifar_ops;
	ds->kind = "cifar10";
	if (nfiles == 1)
		snprintf(ds->name, sizeof(ds->name), "%s", paths[0]);
	else
		snprintf(ds->name, sizeof(ds->name), "%s (and %d more CIFAR-10 files)", paths[0],
			 nfiles - 1);
	ds->count = len / CIFAR_RECORD;
	ds->channels = 3;
	ds->height = CIFAR_SIDE;
	ds->width = CIFAR_SIDE;
	ds->num_classes = CIFAR_CLASSES;
	ds->image_bytes = CIFAR_PIXELS;
	ds->labels = all;
	ds->label_stride = CIFAR_RECORD;
	ds->pixels = all + 1;
	ds->pixel_stride = CIFAR_RECORD;
	ds->buf[0] = all;
	return 0;
}
