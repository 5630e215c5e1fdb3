/* atomic_file.c — atomic replacement of a file (see atomic_file.h): the one copy of the
 * temporary/fsync/rename/fsync-the-directory sequence that the rank table, the launcher's files,
 * safetensors and checkpoints use. Owns file handling only, never the contents. */
#define _GNU_SOURCE /* mkostemp, asprintf */
#include "common/atomic_file.h"
#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int af_write_fd(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len > 0) {
		ssize_t put = write(fd, p, len);
		if (put < 0 && errno == EINTR)
			continue;
		if (put < 0)
			return -1;
		if (put == 0) {
			errno = EIO; /* no progress and no error: do not spin */
			return -1;
		}
		p += put;
		len -= (size_t)put;
	}
	return 0;
}

void af_abort(struct af_file *f)
{
	int e = errno;
	if (f->fd >= 0)
		close(f->fd);
	if (f->tmp)
		unlink(f->tmp);
	free(f->path);
	free(f->tmp);
	free(f->dir);
	f->fd = -1;
	f->path = f->tmp = f->dir = NULL;
	errno = e;
}

/* Formats the message, releases f (removing the temporary if there still is one) and returns -1
 * with errno as it was on entry: the cause, for callers that give advice on it. */
static int af_failf(struct af_file *f, struct dp_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int af_failf(struct af_file *f, struct dp_error *err, const char *fmt, ...)
{
	int e = errno;
	va_list ap;
	va_start(ap, fmt);
	verrprintf(err, fmt, ap);
	va_end(ap);
	af_abort(f);
	errno = e;
	return -1;
}

int af_open(struct af_file *f, const char *path, mode_t mode, struct dp_error *err)
{
	const char *slash = strrchr(path, '/');

	f->fd = -1;
	f->path = f->tmp = f->dir = NULL;
	if (!*(slash ? slash + 1 : path)) {
		errno = EINVAL;
		return af_failf(f, err, "%s: not a file name", path);
	}
	/* The temporary lives next to the target: rename is atomic only within a file system. */
	f->path = strdup(path);
	f->dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
	if (!f->path || !f->dir ||
	    asprintf(&f->tmp, "%s.tmp-%ld-XXXXXX", path, (long)getpid()) < 0) {
		f->tmp = NULL;
		errno = ENOMEM;
		return af_failf(f, err, "%s: out of memory", path);
	}
	if ((f->fd = mkostemp(f->tmp, O_CLOEXEC)) < 0) {
		int e = errno;
		free(f->tmp); /* not ours: nothing to remove */
		f->tmp = NULL;
		errno = e;
		return af_failf(f, err, "%s: cannot create a temporary file in %s: %s", path,
				f->dir, strerror(e));
	}
	if (fchmod(f->fd, mode) < 0)
		return af_failf(f, err, "%s: cannot write %s: %s", path, f->tmp, strerror(errno));
	return 0;
}

int af_write_chunk(struct af_file *f, const void *data, size_t len, struct dp_error *err)
{
	if (f->fd < 0) {
		errprintf(err, "atomic write: the file is no longer open");
		errno = EBADF;
		return -1;
	}
	if (af_write_fd(f->fd, data, len) < 0)
		return af_failf(f, err, "%s: cannot write %s: %s", f->path, f->tmp,
				strerror(errno));
	return 0;
}

int af_commit(struct af_file *f, struct dp_error *err)
{
	int fd = f->fd, dfd;

	if (fd < 0) {
		errprintf(err, "atomic write: the file is no longer open");
		errno = EBADF;
		return -1;
	}
	if (fsync(fd) < 0)
		return af_failf(f, err, "%s: cannot write %s: %s", f->path, f->tmp,
				strerror(errno));
	f->fd = -1;
	if (close(fd) < 0)
		return af_failf(f, err, "%s: cannot write %s: %s", f->path, f->tmp,
				strerror(errno));
	if (rename(f->tmp, f->path) < 0)
		return af_failf(f, err, "%s: cannot rename %s into place: %s", f->path, f->tmp,
				strerror(errno));
	free(f->tmp);
	f->tmp = NULL;
	/* The rename itself is durable only once the directory is; some file systems cannot
	 * fsync a directory (EINVAL), and there is nothing more to do on those. */
	if ((dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    (fsync(dfd) < 0 && errno != EINVAL)) {
		int e = errno;
		if (dfd >= 0)
			close(dfd);
		errno = e;
		return af_failf(f, err, "%s: written, but cannot sync directory %s: %s", f->path,
				f->dir, strerror(e));
	}
	close(dfd);
	af_abort(f); /* only releases: the temporary is the file now */
	return 0;
}

int af_write(const char *path, const void *data, size_t len, mode_t mode, struct dp_error *err)
{
	struct af_file f;

	if (af_open(&f, path, mode, err) < 0 || af_write_chunk(&f, data, len, err) < 0)
		return -1;
	return af_commit(&f, err);
}
