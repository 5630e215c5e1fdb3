/* data.c — what every dataset kind shares: data_get/data_free and the file reader of
 * data_file.h (raw, or gzip through zlib's inflate). Formats live in data_idx.c, data_cifar.c and
 * data_synth.c; nothing here knows one. */
#include "trainer/data/data.h"
#include "trainer/data/data_file.h"
#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* read() and zlib count in int/unsigned: read in pieces well below that. */
#define READ_CHUNK (256u << 20)
#define IN_BUF	   (256u << 10) /* compressed input read at a time */

int data_get(const struct data_set *ds, size_t i, uint8_t *scratch, const uint8_t **pixels,
	     int *label, struct dp_error *err)
{
	if (i >= ds->count) {
		errprintf(err, "%s: sample %zu is out of range (the set has %zu)", ds->name, i,
			  ds->count);
		return -1;
	}
	if (!ds->ops->get) {
		errprintf(err, "%s: holds encoded images; they are read with data_read", ds->name);
		return -1;
	}
	return ds->ops->get(ds, i, scratch, pixels, label, err);
}

int data_read(const struct data_set *ds, size_t i, struct data_bytes *b, int *label,
	      struct dp_error *err)
{
	if (i >= ds->count) {
		errprintf(err, "%s: sample %zu is out of range (the set has %zu)", ds->name, i,
			  ds->count);
		return -1;
	}
	if (!ds->ops->read) {
		errprintf(err, "%s: holds decoded images; they are read with data_get", ds->name);
		return -1;
	}
	return ds->ops->read(ds, i, b, label, err);
}

void data_describe(const struct data_set *ds, size_t i, char *buf, size_t n)
{
	if (ds->ops && ds->ops->describe)
		ds->ops->describe(ds, i, buf, n);
	else
		snprintf(buf, n, "%s: sample %zu", ds->name, i);
}

void data_free(struct data_set *ds)
{
	if (ds->ops && ds->ops->free)
		ds->ops->free(ds);
	if (ds->class_names)
		for (int k = 0; k < ds->num_classes; k++)
			free(ds->class_names[k]);
	free(ds->class_names);
	free(ds->buf[0]);
	free(ds->buf[1]);
	memset(ds, 0, sizeof(*ds));
}

int data_file_open(struct data_file *f, const char *path, struct dp_error *err)
{
	struct stat st;
	ssize_t r;

	memset(f, 0, sizeof(*f));
	f->path = path;
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0) {
		errprintf(err, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(f->fd, &st) != 0) {
		errprintf(err, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (S_ISDIR(st.st_mode)) {
		errprintf(err, "%s: is a directory, not a dataset file", path);
		goto fail;
	}
	f->raw_size = st.st_size;
	f->in = malloc(IN_BUF);
	if (!f->in) {
		errprintf(err, "%s: out of memory", path);
		goto fail;
	}
	/* Look at the first two bytes: gzip's magic, or the data itself. */
	f->z.next_in = f->in;
	while (f->z.avail_in < 2 && !f->in_eof) {
		r = read(f->fd, f->in + f->z.avail_in, 2 - f->z.avail_in);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			errprintf(err, "%s: read error: %s", path, strerror(errno));
			goto fail;
		}
		if (r == 0)
			f->in_eof = true;
		f->z.avail_in += (unsigned)r;
	}
	f->gzipped = f->z.avail_in == 2 && f->in[0] == 0x1f && f->in[1] == 0x8b;
	if (f->gzipped) {
		if (inflateInit2(&f->z, 16 + MAX_WBITS) != Z_OK) {
			errprintf(err, "%s: cannot start gzip decompression", path);
			goto fail;
		}
		f->z_live = true;
	}
	return 0;
fail:
	data_file_close(f);
	return -1;
}

/* Refill the input buffer when it is empty; at end of file in_eof is set. */
static int fill_input(struct data_file *f, struct dp_error *err)
{
	while (f->z.avail_in == 0 && !f->in_eof) {
		ssize_t r = read(f->fd, f->in, IN_BUF);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			errprintf(err, "%s: read error: %s", f->path, strerror(errno));
			return -1;
		}
		f->in_eof = r == 0;
		f->z.next_in = f->in;
		f->z.avail_in = (unsigned)r;
	}
	return 0;
}

static int read_raw(struct data_file *f, uint8_t *p, size_t n, size_t *got, struct dp_error *err)
{
	size_t take = f->z.avail_in < n ? f->z.avail_in : n;

	memcpy(p, f->z.next_in, take); /* what the format probe read ahead */
	f->z.next_in += take;
	f->z.avail_in -= (unsigned)take;
	*got = take;
	while (*got < n && !f->in_eof) {
		size_t want = n - *got > READ_CHUNK ? READ_CHUNK : n - *got;
		ssize_t r = read(f->fd, p + *got, want);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			errprintf(err, "%s: read error: %s", f->path, strerror(errno));
			return -1;
		}
		f->in_eof = r == 0;
		*got += (size_t)r;
	}
	return 0;
}

/* Inflate into p until n bytes, the end of the file, or an error. A member's end is only
 * reached (and its CRC-32 and length checked) by asking for the byte after it, which
 * data_file_expect_end does. Concatenated members are read as one stream (as gzip does). */
static int read_gz(struct data_file *f, uint8_t *p, size_t n, size_t *got, struct dp_error *err)
{
	*got = 0;
	while (*got < n) {
		size_t want = n - *got > READ_CHUNK ? READ_CHUNK : n - *got;
		int ret;

		if (fill_input(f, err) != 0)
			return -1;
		if (f->z_done) {
			if (f->z.avail_in == 0)
				break; /* clean end of file */
			if (f->z.next_in[0] != 0x1f) {
				errprintf(
				    err,
				    "%s: trailing garbage after the gzip data; fetch the file "
				    "again",
				    f->path);
				return -1;
			}
			inflateReset(&f->z);
			f->z_done = false;
		}
		if (f->z.avail_in == 0) {
			f->cut_short = true;
			break;
		}
		f->z.next_out = p + *got;
		f->z.avail_out = (unsigned)want;
		ret = inflate(&f->z, Z_NO_FLUSH);
		*got += want - f->z.avail_out;
		f->out_total += want - f->z.avail_out;
		if (ret == Z_STREAM_END)
			f->z_done = true;
		else if (ret == Z_MEM_ERROR) {
			errprintf(err, "%s: out of memory decompressing", f->path);
			return -1;
		} else if (ret != Z_OK && ret != Z_BUF_ERROR) {
			errprintf(
			    err,
			    "%s: corrupt gzip data (%s) after %zu uncompressed bytes; fetch the "
			    "file again",
			    f->path, f->z.msg ? f->z.msg : "bad stream", f->out_total);
			return -1;
		}
	}
	return 0;
}

int data_file_read(struct data_file *f, void *buf, size_t n, size_t *got, struct dp_error *err)
{
	return f->gzipped ? read_gz(f, buf, n, got, err) : read_raw(f, buf, n, got, err);
}

int data_file_read_alloc(struct data_file *f, size_t n, uint8_t **buf, size_t *got,
			 struct dp_error *err)
{
	size_t cap, have = 0;
	uint8_t *b = NULL;
	int rv = -1;

	*buf = NULL;
	*got = 0;
	/* A raw file holds no more than its size (one allocation: +1 sees that it ended); a
	 * gzip stream's size is unknown until read, so it is grown into. */
	if (!f->gzipped)
		cap = f->raw_size >= 0 && (size_t)f->raw_size < n ? (size_t)f->raw_size + 1 : n;
	else
		cap = n < (64u << 20) ? n : 64u << 20;
	if (cap == 0)
		cap = 1;
	for (;;) {
		size_t want, r;
		uint8_t *nb = realloc(b, cap);

		if (!nb) {
			errprintf(err, "%s: out of memory reading %zu bytes", f->path, cap);
			goto out;
		}
		b = nb;
		want = (n < cap ? n : cap) - have;
		if (data_file_read(f, b + have, want, &r, err) != 0)
			goto out;
		have += r;
		if (r < want || have == n)
			break;
		cap = cap > n / 2 ? n : cap * 2;
	}
	*buf = b;
	*got = have;
	b = NULL;
	rv = 0;
out:
	free(b);
	return rv;
}

int data_file_expect_end(struct data_file *f, const char *what, struct dp_error *err)
{
	uint8_t extra[4096];
	size_t got, more = 0;

	if (data_file_read(f, extra, 1, &got, err) != 0)
		return -1;
	if (got) {
		do {
			more += got;
			if (data_file_read(f, extra, sizeof(extra), &got, err) != 0)
				return -1;
		} while (got);
		errprintf(err,
			  "%s: %zu bytes of trailing data after the %s its header announces; "
			  "the header is wrong or the file was appended to",
			  f->path, more, what);
		return -1;
	}
	if (f->cut_short) {
		errprintf(err,
			  "%s: truncated gzip file: the data is complete but the gzip trailer is "
			  "missing; fetch the file again",
			  f->path);
		return -1;
	}
	return 0;
}

void data_file_close(struct data_file *f)
{
	if (f->z_live)
		inflateEnd(&f->z);
	if (f->fd >= 0)
		close(f->fd);
	free(f->in);
	f->z_live = false;
	f->fd = -1;
	f->in = NULL;
}
