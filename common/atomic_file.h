/* atomic_file.h — replacing a file that others read, atomically: a temporary next to it (the same
 * directory, since rename is atomic only within one file system), written in full, fsync'd,
 * renamed over the target, and the directory fsync'd. A reader sees the old file or the new one,
 * never a part. Knows nothing of what goes into the files. */
#ifndef DPTRAIN_ATOMIC_FILE_H
#define DPTRAIN_ATOMIC_FILE_H

#include <stddef.h>
#include <sys/types.h>
#include "common/error.h"

/* A file being written: open between af_open and af_commit/af_abort. The temporary is
 * "<path>.tmp-<pid>-XXXXXX" (ckpt.c recognises that name for "latest" and cleans it up). */
struct af_file {
	int fd;
	char *path, *tmp, *dir;
};

/* Messages start with the target path ("PATH: cannot write TMP: ..."); on failure errno is the
 * cause (ENOSPC, EDQUOT, ...), for callers that add advice, and no temporary is left. */

/* path = data[0..len) with permissions exactly mode (no umask). 0 or -1. */
int af_write(const char *path, const void *data, size_t len, mode_t mode, struct dp_error *err);

/* The same in pieces: af_open, any number of af_write_chunk, af_commit. A failing call releases
 * f and removes the temporary itself; af_abort gives up on a file still open and does nothing on
 * one already released, so a caller may call it at its one exit unconditionally. */
int af_open(struct af_file *f, const char *path, mode_t mode, struct dp_error *err);
int af_write_chunk(struct af_file *f, const void *data, size_t len, struct dp_error *err);
int af_commit(struct af_file *f, struct dp_error *err);
void af_abort(struct af_file *f);

/* write(2) all of data[0..len) to fd, retrying after EINTR and short writes; 0 or -1 (errno). */
int af_write_fd(int fd, const void *data, size_t len);

#endif
