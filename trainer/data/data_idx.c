/* data_idx.c — MNIST-style idx files (MNIST, Fashion-MNIST): an idx3 image file and an idx1
 * label file, raw or gzip, checked field by field with errors that name the file.
 * Owns only the idx format; reading (and gzip) is data.c's, the interface data.h's. */
#include "common/error.h"
#include "trainer/data/data.h"
#include "trainer/data/data_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDX3_MAGIC 0x00000803u /* unsigned bytes, 3 dimensions */
#define IDX1_MAGIC 0x00000801u /* unsigned bytes, 1 dimension */

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int idx_get(const struct data_set *ds, size_t i, uint8_t *scratch, const uint8_t **pixels,
		   int *label, struct dp_error *err)
{
	(void)scratch;
	(void)err;
	*pixels = ds->pixels + i * ds->pixel_stride;
	*label = ds->labels[i * ds->label_stride];
	return 0;
}

static const struct data_ops idx_ops = {.get = idx_get};

static const char *magic_hint(uint32_t magic, uint32_t want)
{
	if (magic == IDX1_MAGIC && want == IDX3_MAGIC)
		return ": that is an idx1 label file; are the image and label paths swapped?";
	if (magic == IDX3_MAGIC && want == IDX1_MAGIC)
		return ": that is an idx3 image file; are the image and label paths swapped?";
	if ((magic >> 8) == 0x08 && (magic & 0xff) != (want & 0xff))
		return ": an idx file of the wrong number of dimensions";
	return "";
}

/* Reads the header of `hdr_len` bytes and checks its magic. */
static int read_header(struct data_file *f, uint8_t *hdr, size_t hdr_len, uint32_t want,
		       const char *what, struct dp_error *err)
{
	size_t got;
	uint32_t magic;

	if (data_file_read(f, hdr, hdr_len, &got, err) != 0)
		return -1;
	if (got == 0) {
		errprintf(err, "%s: empty file; expected an %s", f->path, what);
		return -1;
	}
	if (got >= 4) {
		magic = be32(hdr);
		if (magic != want) {
			errprintf(err,
				  "%s: not an %s (magic 0x%08x; expected 0x%08x, unsigned bytes in "
				  "%u dimensions%s)",
				  f->path, what, magic, want, want & 0xff, magic_hint(magic, want));
			return -1;
		}
	}
	if (got < hdr_len) {
		errprintf(err,
			  "%s: truncated: %zu bytes is too short for the %zu-byte header of an %s",
			  f->path, got, hdr_len, what);
		return -1;
	}
	return 0;
}

static int load_images(struct data_set *ds, const char *path, struct dp_error *err)
{
	struct data_file f;
	uint8_t hdr[16], *buf = NULL;
	uint32_t n, rows, cols;
	size_t bytes, got;
	int rv = -1;

	if (data_file_open(&f, path, err) != 0)
		return -1;
	if (read_header(&f, hdr, sizeof(hdr), IDX3_MAGIC, "idx3 image file", err) != 0)
		goto out;
	n = be32(hdr + 4);
	rows = be32(hdr + 8);
	cols = be32(hdr + 12);
	if (n == 0) {
		errprintf(err, "%s: holds no images (count 0 in its header)", path);
		goto out;
	}
	if (rows == 0 || cols == 0) {
		errprintf(err, "%s: zero-size images (%ux%u in its header)", path, rows, cols);
		goto out;
	}
	if (rows > DATA_MAX_SIDE || cols > DATA_MAX_SIDE ||
	    (uint64_t)n * rows * cols > DATA_MAX_BYTES) {
		errprintf(
		    err,
		    "%s: implausible header: %u images of %ux%u (at most %u pixels a side and "
		    "%llu GiB in all); the file is corrupt or not an image file",
		    path, n, rows, cols, DATA_MAX_SIDE, DATA_MAX_BYTES >> 30);
		goto out;
	}
	bytes = (size_t)n * rows * cols;
	if (data_file_read_alloc(&f, bytes, &buf, &got, err) != 0)
		goto out;
	if (got < bytes) {
		errprintf(err,
			  "%s: truncated: expected %zu bytes of images (%u images of %ux%u) after "
			  "the 16-byte header, got %zu%s; fetch the file again",
			  path, bytes, n, rows, cols, got,
			  f.cut_short ? " before the gzip stream broke off" : "");
		goto out;
	}
	if (data_file_expect_end(&f, "images", err) != 0)
		goto out;
	ds->count = n;
	ds->channels = 1;
	ds->height = (int)rows;
	ds->width = (int)cols;
	ds->image_bytes = (size_t)rows * cols;
	ds->pixels = buf;
	ds->pixel_stride = ds->image_bytes;
	ds->buf[0] = buf;
	buf = NULL;
	rv = 0;
out:
	free(buf);
	data_file_close(&f);
	return rv;
}

static int load_labels(struct data_set *ds, const char *path, struct dp_error *err)
{
	struct data_file f;
	uint8_t hdr[8], *buf = NULL;
	uint32_t n;
	size_t got;
	int rv = -1, max = 0;

	if (data_file_open(&f, path, err) != 0)
		return -1;
	if (read_header(&f, hdr, sizeof(hdr), IDX1_MAGIC, "idx1 label file", err) != 0)
		goto out;
	n = be32(hdr + 4);
	if (n != ds->count) {
		errprintf(err,
			  "%s has %zu images but %s has %u labels; give the label file that "
			  "belongs to these images",
			  ds->name, ds->count, path, n);
		goto out;
	}
	if (data_file_read_alloc(&f, n, &buf, &got, err) != 0)
		goto out;
	if (got < n) {
		errprintf(err,
			  "%s: truncated: expected %u bytes of labels after the 8-byte header, got "
			  "%zu%s; fetch the file again",
			  path, n, got, f.cut_short ? " before the gzip stream broke off" : "");
		goto out;
	}
	if (data_file_expect_end(&f, "labels", err) != 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (buf[i] > max)
			max = buf[i];
	ds->num_classes = max + 1;
	ds->labels = buf;
	ds->label_stride = 1;
	ds->buf[1] = buf;
	buf = NULL;
	rv = 0;
out:
	free(buf);
	data_file_close(&f);
	return rv;
}

int data_load_idx(struct data_set *ds, const char *images_path, const char *labels_path,
		  struct dp_error *err)
{
	memset(ds, 0, sizeof(*ds));
	ds->ops = &idx_ops;
	ds->kind = "idx";
	snprintf(ds->name, sizeof(ds->name), "%s", images_path);
	if (load_images(ds, images_path, err) != 0 || load_labels(ds, labels_path, err) != 0) {
		data_free(ds);
		return -1;
	}
	return 0;
}
