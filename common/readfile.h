/* readfile.h — a whole file into memory, bounded: a rank table, a job config, a checkpoint's
 * state, an index, a recorded error. What is at the path cannot hang the caller (a FIFO put
 * where a file is expected: the open does not block and only a regular file is read), nor
 * make it allocate more than the caller's bound. Owns reading, not what the bytes mean. */
#ifndef DPTRAIN_READFILE_H
#define DPTRAIN_READFILE_H

#include <stddef.h>

#include "common/error.h"

/* Read the regular file at path whole, at most max bytes, into *buf (malloc'd, a '\0' after
 * its *len bytes so that text parses as a string; the caller frees it). oflags: more open(2)
 * flags (O_NOFOLLOW: a symbolic link is refused). 0, or -1 with *buf NULL and err and errno
 * saying what failed, so that a caller may word it its own way:
 *   open(2)'s errno   "PATH: cannot open: STRERROR"
 *   EISDIR            "PATH: cannot read: Is a directory"
 *   EINVAL            "PATH: not a regular file (a FIFO)" (a character device, a socket, ...)
 *   EFBIG             "PATH: larger than MAX bytes"
 *   ENOMEM            "PATH: out of memory reading it"
 *   read(2)'s errno   "PATH: cannot read: STRERROR" */
int dp_read_file(const char *path, size_t max, int oflags, char **buf, size_t *len,
		 struct dp_error *err);

/* The same from an open descriptor (standard input), to its end; name stands for PATH in the
 * messages. */
int dp_read_fd(int fd, const char *name, size_t max, char **buf, size_t *len, struct dp_error *err);

#endif
