/* data_file.h — reading dataset files for data_*.c only (not a public API): one path for raw
 * and gzip-compressed files (inflate, trailer checksum verified), errors that name the file and say
 * whether it is missing, unreadable, corrupt or cut short. Knows no dataset format. */
#ifndef DPTRAIN_DATA_FILE_H
#define DPTRAIN_DATA_FILE_H

#include "common/error.h"
#include "trainer/data/data.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <zlib.h>

struct data_file {
	const char *path;
	int fd;
	off_t raw_size; /* size on disk */
	bool gzipped;	/* from the content (1f 8b), not the name */
	bool cut_short; /* the gzip stream ended before its end marker / trailer */
	bool z_live;	/* inflate state initialised */
	bool z_done;	/* the current gzip member ended, its trailer checked */
	bool in_eof;
	z_stream z;
	uint8_t *in; /* input buffer (compressed bytes, or raw bytes read ahead) */
	size_t out_total;
};

/* Open for reading; err: "PATH: No such file or directory", "PATH: is a directory", ... */
int data_file_open(struct data_file *f, const char *path, struct dp_error *err);

/* Read up to n bytes into buf; *got says how many arrived. Fewer than n means the data
 * ended (f->cut_short tells a truncated gzip stream from a clean end). -1 with err on a
 * corrupt gzip stream or an I/O error. */
int data_file_read(struct data_file *f, void *buf, size_t n, size_t *got, struct dp_error *err);

/* Read up to n bytes into a buffer malloc'd here (grown as data arrives, so a header that
 * promises more than the file holds costs no more memory than the file). */
int data_file_read_alloc(struct data_file *f, size_t n, uint8_t **buf, size_t *got,
			 struct dp_error *err);

/* After the last expected byte: 0 if the file ends there (for gzip: trailer and checksum
 * verified), -1 with err if more data follows or the stream is corrupt or cut short.
 * `what` names the content for the message ("10000 labels"). */
int data_file_expect_end(struct data_file *f, const char *what, struct dp_error *err);

void data_file_close(struct data_file *f);

#endif
